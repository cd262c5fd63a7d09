import Foundation
import Logging

/// `storectl diff A B`: what changed between two stores, backups, snapshots or points, in Core
/// Data's terms (entities, objects, attributes, relationships, the model) or, for a plain SQLite
/// store, tables and rows. Read-only on every side; see `PageDiff` for why it costs what changed.
public enum StoreDiff {
    static let logger = Logger(label: "storectl.diff")
    public enum Side: Sendable, Equatable {
        /// A store or a backup file (a live store is read in one read transaction).
        case file(String)
        /// A snapshot id (or unique prefix) in `Options.repository`.
        case snapshot(String)
        /// The point recorded by `storectl replicate` at or before this time.
        case point(Date)
    }

    public struct Options: Sendable {
        public var a: Side
        public var b: Side
        public var repository: String?
        public var password: PasswordSource = .resolve(file: nil)
        /// Points: the store whose (when the repository has points of several), and its host.
        public var pointStore: String?
        public var pointHost: String?
        /// Objects (or rows, or links) listed per entity; the counts are always complete.
        public var limit: Int?
        /// Only these entities (or tables), by name.
        public var entities: [String] = []
        /// "Entity.attribute": objects of that entity (and its sub-entities) are matched by that
        /// attribute (a UUID) instead of Z_PK, for stores whose keys were renumbered.
        public var keys: [String] = []
        /// Also report Core Data's bookkeeping: `Z_OPT` bumps, `Z_PRIMARYKEY`, `Z_METADATA`, the
        /// model cache and persistent-history tables.
        public var bookkeeping = false
        /// Where a live store's consistent copy is made when its `-wal` holds pages (default: TMPDIR).
        public var scratch: String?
        /// What one connection wrote between the sides (a migration's, `WriteRecorder`): the
        /// differences it did not write are another process's, reported in `Report.others`.
        public var written: WrittenRows?
        /// Values shortened for people (text to 60 characters); JSON keeps up to 4 KiB.
        public var shortValues = true
        /// Compare the external-data folders too (a migration's rehearsal compares two copies of
        /// one database, which SQL cannot give external files: it leaves them out).
        public var externalData = true
        /// How many bytes of rows added or removed the diff holds to pair them by key (`--key`, a
        /// plain table's primary key) at the end; rows beyond it are listed as they are (added,
        /// removed), not paired, and a warning says how many. A VACUUM renumbers the rowids of a
        /// table without INTEGER PRIMARY KEY: every row of it would otherwise be held.
        public var pairingBudget = 128 << 20

        public init(a: Side, b: Side) {
            self.a = a
            self.b = b
        }
    }

    // MARK: - Report

    public struct Report: Sendable, Codable {
        public var summary: Summary {
            Summary(same: same, schema: schema.map { "\($0.change) \($0.type) \($0.name)" }, model: model,
                    entities: entities.map(Summary.Entity.init), links: links.map(Summary.Links.init), externalFiles: externalData.count)
        }
        public var a: SideSummary
        public var b: SideSummary
        /// Nothing differs (bookkeeping left out unless asked for).
        public var same: Bool
        public var schema: [SchemaChange]
        /// The Core Data model's differences, in words (entities, attributes, relationships,
        /// constraints, version hashes).
        public var model: [String]
        public var entities: [EntityChanges]
        /// Many-to-many relationships (join tables).
        public var links: [LinkChanges]
        public var externalData: [FileChange]
        public var bookkeeping: Bookkeeping
        /// Objects added or removed whose `--key` attribute is NULL (so not matched by it), by
        /// "Entity.attribute"; also said as a warning.
        public var keyless: [String: Int] = [:]
        /// Objects added or removed whose key value (`--key`, or a plain table's primary key)
        /// another object of the same side shares (so not matched by it), by "Entity.attribute";
        /// also said as a warning.
        public var ambiguousKeys: [String: Int] = [:]
        /// Rows added or removed that were not held for pairing by key (`Options.pairingBudget`
        /// was spent), by "Entity.attribute" or "table.column": listed as added or removed; also
        /// said as a warning.
        public var unpaired: [String: Int] = [:]
        /// With `Options.written`: what other processes changed (rows, and columns of rows, the
        /// recorded connection did not write); `entities` and `links` then hold only its changes.
        public var others: Others?
        public var stats: Stats
        /// For checks of the result (not printed): the Z_PKs of removed objects per table, and the
        /// to-one references the second side added or changed, whatever `limit` listed.
        public var removedKeys: [String: [Int64]] = [:]
        public var newReferences: [Reference] = []

        enum CodingKeys: String, CodingKey {
            case a, b, same, schema, model, entities, links, externalData, bookkeeping, keyless, ambiguousKeys, unpaired, others, stats
        }
    }

    public struct Others: Sendable, Codable {
        public var entities: [EntityChanges]
        public var links: [LinkChanges]

        public var summary: Summary {
            Summary(same: entities.isEmpty && links.isEmpty, schema: [], model: [],
                    entities: entities.map(Summary.Entity.init), links: links.map(Summary.Links.init), externalFiles: 0)
        }
    }

    /// A to-one reference on the second side: "Entity.relationship" of the object, and the Z_PK it
    /// points at in the destination entity's table.
    public struct Reference: Sendable, Codable, Equatable {
        public var relationship: String
        public var destinationTable: String
        public var key: Int64
    }

    public struct SideSummary: Sendable, Codable {
        public var name: String
        /// "file", "snapshot" or "point".
        public var kind: String
        public var pages: Int
        public var pageSize: Int
        public var coreData: Bool
        /// A live store whose `-wal` held pages was read from a consistent copy.
        public var copied: Bool
    }

    public struct SchemaChange: Sendable, Codable, Equatable {
        /// "added", "removed" or "changed".
        public var change: String
        public var type: String
        public var name: String
        /// The table it belongs to (an index's or trigger's table; a table's own name).
        public var table: String
        public var before: String?
        public var after: String?
        /// A changed table's columns only the second side has, and only the first (what the text
        /// report says of it: `~ table ZITEM` alone did not say a column, and its values, went).
        public var columnsAdded: [String]?
        public var columnsRemoved: [String]?
    }

    public struct EntityChanges: Sendable, Codable {
        /// The Core Data entity (nil: a plain table).
        public var entity: String?
        public var table: String
        /// The entity and its superentities, nearest first (what a declaration may name).
        public var lineage: [String] = []
        public var added = 0
        public var removed = 0
        public var changed = 0
        /// Changed objects per attribute or relationship name.
        public var attributes: [String: Int] = [:]
        /// The column of each attribute or relationship in `attributes` whose column is named
        /// otherwise (`title`: `ZTITLE1`): a declaration may name either.
        public var columns: [String: String] = [:]
        public var objects: [ObjectChange] = []
        /// Objects changed beyond `limit` (counted, not listed).
        public var unlisted = 0
    }

    public struct ObjectChange: Sendable, Codable {
        /// "added", "removed" or "changed".
        public var change: String
        /// "Note 42" (entity and Z_PK), "id 7" or "rowid 7".
        public var object: String
        public var values: [ValueChange]
    }

    public struct ValueChange: Sendable, Codable, Equatable {
        public var name: String
        /// For people: dates as times, text quoted and escaped (long text shortened), blobs by
        /// size and hash, "NULL" for NULL (as SQL writes it).
        public var before: String?
        public var after: String?
        /// For programs (`--json`): the stored values as they are (absent where the side has none).
        public var beforeValue: TypedValue?
        public var afterValue: TypedValue?

        public init(name: String, before: String?, after: String?, beforeValue: TypedValue? = nil, afterValue: TypedValue? = nil) {
            self.name = name
            self.before = before
            self.after = after
            self.beforeValue = beforeValue
            self.afterValue = afterValue
        }

        private enum CodingKeys: String, CodingKey { case name, before, after, beforeValue, afterValue }

        /// A stored NULL is `"beforeValue": null`, which is not the key left out (that side has
        /// no such value): read back as `.null`, not nil.
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            name = try c.decode(String.self, forKey: .name)
            before = try c.decodeIfPresent(String.self, forKey: .before)
            after = try c.decodeIfPresent(String.self, forKey: .after)
            beforeValue = c.contains(.beforeValue) ? try c.decode(TypedValue.self, forKey: .beforeValue) : nil
            afterValue = c.contains(.afterValue) ? try c.decode(TypedValue.self, forKey: .afterValue) : nil
        }
    }

    /// A stored value in `--json`, as SQLite holds it: NULL is `null`, an integer or a real a JSON
    /// number (Core Data's dates are seconds since 2001-01-01, as stored; a real with no fraction
    /// is written as an integer is, and one that is not finite as the string "inf" or "-inf", so
    /// a program reads numbers as numbers, not SQLite's storage class), text the whole string, a
    /// blob `{"bytes": N, "sha256": "…"}`.
    public enum TypedValue: Sendable, Codable, Equatable {
        case null
        case integer(Int64)
        case real(Double)
        case text(String)
        case blob(bytes: Int, sha256: String)

        init(_ value: SQLitePages.Value) {
            switch value {
            case .null: self = .null
            case .integer(let n): self = .integer(n)
            case .real(let d): self = .real(d)
            case .text(let t): self = .text(t)
            case .blob(let b): self = .blob(bytes: b.count, sha256: Hashing.sha256(b))
            }
        }

        private enum BlobKeys: String, CodingKey { case bytes, sha256 }

        public func encode(to encoder: any Encoder) throws {
            switch self {
            case .null:
                var c = encoder.singleValueContainer()
                try c.encodeNil()
            case .integer(let n):
                var c = encoder.singleValueContainer()
                try c.encode(n)
            case .real(let d):
                var c = encoder.singleValueContainer()
                if d.isFinite { try c.encode(d) } else { try c.encode(d.isNaN ? "nan" : d > 0 ? "inf" : "-inf") }
            case .text(let t):
                var c = encoder.singleValueContainer()
                try c.encode(t)
            case .blob(let bytes, let sha256):
                var c = encoder.container(keyedBy: BlobKeys.self)
                try c.encode(bytes, forKey: .bytes)
                try c.encode(sha256, forKey: .sha256)
            }
        }

        public init(from decoder: any Decoder) throws {
            if let keyed = try? decoder.container(keyedBy: BlobKeys.self), keyed.contains(.bytes) {
                self = .blob(bytes: try keyed.decode(Int.self, forKey: .bytes), sha256: try keyed.decode(String.self, forKey: .sha256))
                return
            }
            let c = try decoder.singleValueContainer()
            if c.decodeNil() { self = .null }
            else if let n = try? c.decode(Int64.self) { self = .integer(n) }
            else if let d = try? c.decode(Double.self) { self = .real(d) }
            else { self = .text(try c.decode(String.self)) }
        }
    }

    public struct LinkChanges: Sendable, Codable {
        /// "Entity.relationship".
        public var relationship: String
        public var table: String
        /// The other end as the model names it, "Destination.inverse" (or "Destination" alone
        /// when the relationship has no inverse); nil without a model. A declaration of either
        /// end covers the links, as `--entity` of either end shows them.
        public var inverse: String?
        public var added = 0
        public var removed = 0
        /// Links of an ordered many-to-many whose position changed (the same two objects).
        public var reordered = 0
        /// With `--bookkeeping`: links whose only change is an end renumbered under `--key` (the
        /// same two objects; without it they are counted in `bookkeeping.references`).
        public var renumbered = 0
        public var links: [LinkChange] = []
        public var unlisted = 0
    }

    public struct LinkChange: Sendable, Codable {
        /// "added", "removed", "reordered" or (`--bookkeeping`) "renumbered".
        public var change: String
        public var link: String
    }

    public struct FileChange: Sendable, Codable {
        public var change: String
        public var path: String
        public var before: UInt64?
        public var after: UInt64?
        /// The SHA-256 of each side's file (a file changed at the same size said only its size).
        public var beforeSHA256: String?
        public var afterSHA256: String?
    }

    public struct Bookkeeping: Sendable, Codable {
        /// Rows of bookkeeping tables that differ.
        public var rows = 0
        public var tables: [String] = []
        /// Objects whose only change is Core Data's `Z_OPT` counter.
        public var optBumps = 0
        /// Objects matched by `--key` whose only change is their Z_PK (renumbered).
        public var renumbered = 0
        /// Objects and many-to-many links whose only change is that an object they point at was
        /// renumbered under `--key` (the same object, a new Z_PK).
        public var references = 0
        /// Listed in `entities` (--bookkeeping), or only counted here.
        public var shown = false
    }

    public struct Stats: Sendable, Codable {
        /// How pages were found equal: "content ids" (one repository) or "bytes".
        public var method: String
        public var pagesRead: Int
        /// Frames of a repository read for the pages it had to give.
        public var framesRead: Int
        /// Bytes of those frames decompressed: only the chunks holding pages needed, where the
        /// snapshot's record lists its interior pages (`InteriorPages`); every byte otherwise.
        public var bytesDecompressed: Int?
        public var leavesSkipped: Int
        public var leavesDecoded: Int
        /// Why every leaf was compared (a differing page nothing explained), when it happened.
        public var fallback: String?
        public var seconds: Double
    }

    // MARK: - Running

    /// - Throws: 64 a side needs --repo, 66 a missing file or unknown snapshot id, 65 a side that
    ///   is not a readable SQLite database or a damaged snapshot, 75 a locked store.
    public static func run(_ options: Options, progress: ProgressHandler? = nil) throws -> Report {
        try run(options, repository: nil, progress: progress)
    }

    /// - Parameter opened: the repository, when the caller holds it open (migrate's verify stage).
    static func run(_ options: Options, repository opened: PagedRepository?, progress: ProgressHandler? = nil) throws -> Report {
        let started = Date()
        var repository: PagedRepository? = opened
        func repo() throws -> PagedRepository {
            if let repository { return repository }
            guard let location = options.repository else {
                throw StoreOpsError(.usage, "a snapshot id or a point needs --repo", hint: "pass --repo REPOSITORY, or name two files")
            }
            let opened = try PagedRepository.open(at: location, password: options.password)
            repository = opened
            return opened
        }
        var scratch: [PendingFile] = []
        defer {
            for file in scratch {
                for suffix in ["-wal", "-shm", "-journal"] { FileSystem.remove(file.tempPath + suffix, point: "diff.scratch.sidecar.remove") }
                file.discard()
            }
        }
        func open(_ side: Side) throws -> (any DiffPages, SideSummary) {
            switch side {
            case .file(let path):
                let store = try StoreFile(existing: path)
                do {
                    let pages = try FilePages(path: store.path, what: path, hold: true)
                    return (pages, SideSummary(name: path, kind: "file", pages: pages.pageCount, pageSize: pages.pageSize, coreData: false, copied: false))
                } catch is FilePages.NeedsCopy {
                    let folder = FileSystem.absolute(options.scratch ?? (ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp"))
                    try SpaceRequirement.require(FileSystem.size(of: store.path) ?? 0, at: folder, purpose: "a consistent copy of \(path) (its -wal holds pages)",
                                                 hint: "free space there, or pass --scratch DIR")
                    // What a killed diff left there goes first (its owner's pid is in the name).
                    PendingFile.removeStale(in: folder, prefix: "storectl-diff-")
                    let pending = try PendingFile(finalPath: (folder as NSString).appendingPathComponent("storectl-diff-\(scratch.count).sqlite"), label: "diff.scratch")
                    scratch.append(pending)
                    let copy = pending.tempPath
                    progress?(.stage("copying \(path)"))
                    _ = try ConsistentCopy.copy(store, to: copy, options: .init(writeBehind: false))
                    let pages = try FilePages(path: copy, what: path, hold: false)
                    return (pages, SideSummary(name: path, kind: "file", pages: pages.pageCount, pageSize: pages.pageSize, coreData: false, copied: true))
                }
            case .snapshot(let id):
                let repository = try repo()
                // A point named by its label (`<chain>@<number>`, as restore and diff print it).
                if let label = SnapshotID.pointLabel(id) {
                    return try point(try PointRestore.resolve(repository, label: label, scratch: pointScratch()), in: repository)
                }
                let record = try repository.record(id)
                let pages = try RepositoryPages(record: record, overlay: nil, repository: repository, what: "snapshot \(record.id)")
                return (pages, SideSummary(name: record.id, kind: "snapshot", pages: pages.pageCount, pageSize: pages.pageSize, coreData: false, copied: false))
            case .point(let time):
                let repository = try repo()
                return try point(try PointRestore.resolve(repository, at: time, store: options.pointStore, host: options.pointHost, scratch: pointScratch()),
                                 in: repository, asked: time)
            }
        }
        /// Where a point's pages beyond the memory budget go.
        func pointScratch() -> String { options.scratch.map { FileSystem.absolute($0) } ?? PointRestore.temporaryFolder }
        /// A point's side: its chain's base with the point's pages over it.
        func point(_ target: PointRestore.Target, in repository: PagedRepository, asked: Date? = nil) throws -> (any DiffPages, SideSummary) {
            let name = target.point.map { "point \($0)" } ?? "snapshot \(target.record.id)"
            let pages = try RepositoryPages(record: target.record, overlay: target.overlay, repository: repository, what: name)
            let time = (target.time ?? asked).map { " at \(Timestamp.iso($0))" } ?? ""
            return (pages, SideSummary(name: "\(target.point ?? target.record.id)\(time)", kind: "point",
                                       pages: pages.pageCount, pageSize: pages.pageSize, coreData: false, copied: false))
        }
        func stage(_ what: String, _ more: Logger.Metadata = [:]) {
            logger.debug("\(what)", metadata: more.merging(["ms": "\(Int(Date().timeIntervalSince(started) * 1000))", "memory": "\(ProcessMemory.text())"]) { a, _ in a })
        }
        progress?(.stage("reading"))
        let sideA: (any DiffPages, SideSummary), sideB: (any DiffPages, SideSummary)
        if case .snapshot(let idA) = options.a, case .snapshot(let idB) = options.b, SnapshotID.pointLabel(idA) == nil, SnapshotID.pointLabel(idB) == nil {
            // Two snapshots: their records and maps read at once, one on each core.
            let repository = try repo()
            stage("repository open")
            // Both maps' blobs found in one scan of the indexes (locating the pages is the
            // second); the indexes are not kept: a shared repository's would cost memory in
            // proportion to every store in it, not to the two snapshots.
            let (recordA, recordB) = (try repository.record(idA), try repository.record(idB))
            let (found, damaged) = try BlobLocator.locate(Set((recordA.pages.typedBlobs + recordB.pages.typedBlobs).map(\.0)), in: repository)
            stage("maps located")
            final class Opened: @unchecked Sendable { let pages: RepositoryPages; init(_ pages: RepositoryPages) { self.pages = pages } }
            let one: @Sendable (PagedSnapshotRecord) throws -> Opened = { record in
                Opened(try RepositoryPages(record: record, overlay: nil, repository: repository, what: "snapshot \(record.id)", locations: found, damaged: damaged))
            }
            let (x, y) = try inParallel({ try one(recordA) }, { try one(recordB) })
            func summary(_ pages: RepositoryPages) -> SideSummary {
                SideSummary(name: pages.record.id, kind: "snapshot", pages: pages.pageCount, pageSize: pages.pageSize, coreData: false, copied: false)
            }
            sideA = (x.pages, summary(x.pages))
            sideB = (y.pages, summary(y.pages))
        } else {
            sideA = try open(options.a)
            sideB = try open(options.b)
        }
        let (pagesA, summaryA0) = sideA
        var summaryA = summaryA0
        let (pagesB, summaryB0) = sideB
        var summaryB = summaryB0
        stage("sides open")
        let diff = try PageDiff(pagesA, pagesB)
        stage("pages compared, schemas read")
        func decoded(_ onA: Bool) -> (PageDiff.SchemaEntry) throws -> [(Int64, [SQLitePages.Value])] {
            { entry in
                let encoding = onA ? diff.headerA.textEncoding : diff.headerB.textEncoding
                return try diff.allRows(onA: onA, root: entry.rootPage).map {
                    ($0.0, try SQLitePages.record($0.1, encoding: encoding, what: "\((onA ? diff.a : diff.b).what): table \(entry.name)"))
                }
            }
        }
        let schemaA = try DiffSchema(entries: diff.schemaA, rowsOf: decoded(true))
        let schemaB = try DiffSchema(entries: diff.schemaB, rowsOf: decoded(false))
        summaryA.coreData = schemaA.coreData != nil
        summaryB.coreData = schemaB.coreData != nil

        stage("schemas rebuilt")
        progress?(.stage("comparing"))
        var collector = Collector(options: options, a: schemaA, b: schemaB, diff: diff)
        try collector.checkFilter()
        try collector.compareTables()
        stage("tables compared", ["leaves read (ms)": "\(Int(diff.leafReadSeconds * 1000))"])
        if try !diff.accountForDifferences() {
            collector = Collector(options: options, a: schemaA, b: schemaB, diff: diff)
            try collector.compareTables()
        }
        try collector.matchKeys()
        try collector.compareReferencesIntoRenumbered()
        // Two different stores (Core Data's store UUIDs differ): objects are matched by Z_PK,
        // which two stores give out independently, so "changed" may be two unrelated objects.
        if options.keys.isEmpty, let x = schemaA.coreData?.metadata.uuid, let y = schemaB.coreData?.metadata.uuid, !x.isEmpty, !y.isEmpty, x != y {
            logger.warning("the two sides are different Core Data stores (store UUID \(x) and \(y)): objects are matched by Z_PK, which each store numbers on its own; --key Entity.attribute (a UUID attribute) matches them by what they are")
        }
        for (key, count) in collector.keyless.sorted(by: { $0.key < $1.key }) {
            logger.warning("--key \(key): \(Format.plural(count, "object", "objects")) added or removed \(count == 1 ? "has" : "have") no value for it (NULL), so \(count == 1 ? "is" : "are") not matched by it; name an attribute every object has (a UUID)")
        }
        for (key, count) in collector.ambiguous.sorted(by: { $0.key < $1.key }) {
            logger.warning("--key \(key): \(Format.plural(count, "object", "objects")) added or removed share \(count == 1 ? "its" : "their") value with another object of the same side, so \(count == 1 ? "is" : "are") not matched by it; name an attribute each object has its own value of (a UUID)")
        }
        for (key, count) in collector.unpaired.sorted(by: { $0.key < $1.key }) {
            logger.warning("\(key): \(Format.plural(count, "row", "rows")) \(count == 1 ? "is" : "are") listed as \(count == 1 ? "it is" : "they are"), not held to be paired by key: the rows held reached \(Format.bytes(UInt64(options.pairingBudget))) (a row whose key moved may show as one removed and one added, a reference to a renumbered object as a change)")
        }
        stage("differences accounted for")
        var schema = schemaChanges(schemaA.entries, schemaB.entries)
        for k in schema.indices where schema[k].type == "table" && schema[k].change == "changed" {
            guard let x = schemaA.layouts[schema[k].name]?.columns, let y = schemaB.layouts[schema[k].name]?.columns else { continue }
            let added = y.filter { !x.contains($0) }, removed = x.filter { !y.contains($0) }
            if !added.isEmpty { schema[k].columnsAdded = added }
            if !removed.isEmpty { schema[k].columnsRemoved = removed }
        }
        for (name, x, y) in [("user_version", diff.headerA.userVersion, diff.headerB.userVersion),
                             ("application_id", diff.headerA.applicationID, diff.headerB.applicationID)] where x != y {
            schema.append(SchemaChange(change: "changed", type: "pragma", name: name, table: "", before: String(x), after: String(y)))
        }
        if !options.entities.isEmpty {
            // --entity: the schema changes of those entities' tables (and of tables named) only.
            let named = Set(options.entities.map { $0.lowercased() })
            var tables = named
            for store in [schemaA.coreData, schemaB.coreData].compactMap({ $0 }) {
                for entity in store.entities {
                    let lineage = store.model?.ancestors(of: entity.name) ?? [entity.name]
                    if let table = entity.table, lineage.contains(where: { named.contains($0.lowercased()) }) { tables.insert(table.lowercased()) }
                }
            }
            schema = schema.filter { tables.contains($0.table.lowercased()) }
        }
        let model = modelChanges(schemaA.coreData, schemaB.coreData)
        // --entity: external-data files are no entity's until a row naming them is read (left out, as the README says).
        let external = options.externalData && options.entities.isEmpty ? try externalChanges(options, pagesA, pagesB) : []
        func sorted(_ entities: [String: EntityChanges]) -> [EntityChanges] {
            entities.values.filter { $0.added + $0.removed + $0.changed > 0 }.sorted { ($0.entity ?? $0.table, $0.table) < ($1.entity ?? $1.table, $1.table) }
        }
        func sorted(_ links: [String: LinkChanges]) -> [LinkChanges] {
            links.values.filter { $0.added + $0.removed + $0.reordered + $0.renumbered > 0 }.sorted { $0.relationship < $1.relationship }
        }
        let entities = sorted(collector.entities), links = sorted(collector.links)
        let others = options.written == nil ? nil : Others(entities: sorted(collector.otherEntities), links: sorted(collector.otherLinks))
        let same = schema.isEmpty && model.isEmpty && entities.isEmpty && links.isEmpty && external.isEmpty && others?.summary.same != false
        return Report(
            a: summaryA, b: summaryB, same: same, schema: schema, model: model, entities: entities, links: links,
            externalData: external, bookkeeping: collector.bookkeeping, keyless: collector.keyless, ambiguousKeys: collector.ambiguous, unpaired: collector.unpaired, others: others,
            stats: Stats(method: diff.method, pagesRead: pagesA.pagesRead + pagesB.pagesRead,
                         framesRead: [pagesA, pagesB].reduce(0) { $0 + (($1 as? RepositoryPages)?.framesRead ?? 0) },
                         bytesDecompressed: [pagesA, pagesB].reduce(0) { $0 + (($1 as? RepositoryPages)?.bytesDecompressed ?? 0) },
                         leavesSkipped: diff.leavesSkipped, leavesDecoded: diff.leavesDecoded, fallback: diff.fellBackReason,
                         seconds: Date().timeIntervalSince(started)),
            removedKeys: collector.removedKeys, newReferences: collector.references)
    }

    // MARK: - Summaries and declarations

    /// What changed, in counts: for a migration's report and history row.
    public struct Summary: Sendable, Codable, Equatable {
        /// Keys as in the diff's own JSON (`entity` for a Core Data entity, absent for a plain
        /// table; `table` always).
        public struct Entity: Sendable, Codable, Equatable {
            /// The Core Data entity (nil: a plain table).
            public var entity: String?
            public var table: String
            public var added: Int
            public var removed: Int
            public var changed: Int
            /// Changed objects per attribute or relationship.
            public var attributes: [String: Int]
            /// The entity, or the table of a plain store.
            public var name: String { entity ?? table }

            init(_ e: EntityChanges) {
                (entity, table, added, removed, changed, attributes) = (e.entity, e.table, e.added, e.removed, e.changed, e.attributes)
            }
        }
        public struct Links: Sendable, Codable, Equatable {
            public var relationship: String
            public var added: Int
            public var removed: Int
            /// Links whose position changed (nil: none; absent from summaries written before it).
            public var reordered: Int?

            init(_ l: LinkChanges) {
                (relationship, added, removed) = (l.relationship, l.added, l.removed)
                reordered = l.reordered > 0 ? l.reordered : nil
            }
            var text: String { "\(Format.plural(added, "link", "links")) added, \(removed) removed" + (reordered.map { ", \($0) reordered" } ?? "") }
        }
        public var same: Bool
        public var schema: [String]
        public var model: [String]
        public var entities: [Entity]
        public var links: [Links]
        public var externalFiles: Int

        /// One line: "Task: 12 changed (title 12); Item.tags: 3 links added; schema: 2 changes".
        public var text: String {
            var parts: [String] = []
            for e in entities {
                var counts: [String] = []
                if e.added > 0 { counts.append("\(e.added) added") }
                if e.removed > 0 { counts.append("\(e.removed) removed") }
                if e.changed > 0 {
                    counts.append("\(e.changed) changed (" + e.attributes.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") + ")")
                }
                parts.append("\(e.name): \(counts.joined(separator: ", "))")
            }
            for l in links { parts.append("\(l.relationship): \(l.text)") }
            if !schema.isEmpty { parts.append("schema: " + schema.joined(separator: ", ")) }
            if !model.isEmpty { parts.append("model: " + model.joined(separator: "; ")) }
            if externalFiles > 0 { parts.append("external data: \(externalFiles) files") }
            return parts.isEmpty ? "no change" : parts.joined(separator: "; ")
        }
    }

    /// Changes outside what is declared, in words (empty: all declared). A declared `Entity`
    /// allows any change to its objects (and its sub-entities'); `Entity.name` a change of that
    /// attribute or relationship (a link of that many-to-many); a plain table's name or
    /// `table.column` likewise. Schema and model changes are a migration's own business, and
    /// bookkeeping is never counted.
    public static func undeclared(_ report: Report, declared: Set<String>) -> [String] {
        let names = Set(declared.map { $0.lowercased() })
        func allows(_ scopes: [String], _ member: String? = nil, coreDataColumn: Bool = false) -> Bool {
            scopes.contains { scope in
                guard !names.contains(scope.lowercased()) else { return true }
                guard let member = member?.lowercased() else { return false }
                // A Core Data column the model does not have (a migration added it) is named as the
                // column: `Item.priorityLabel` declares ZPRIORITYLABEL, Core Data's column for that
                // attribute (the README's own example failed on its sample store without this).
                return names.contains("\(scope.lowercased()).\(member)")
                    || coreDataColumn && names.contains("\(scope.lowercased()).\(member.dropFirst())")
            }
        }
        /// A name the diff gives as a Core Data column (`ZPRIORITYLABEL`), not as the model names an
        /// attribute (`zOrder`), nor a plain table's column.
        func isCoreDataColumn(_ name: String, of e: EntityChanges) -> Bool {
            e.entity != nil && name.count > 1 && name.hasPrefix("Z") && name == name.uppercased()
        }
        var out: [String] = []
        for e in report.entities {
            let scopes = (e.lineage.isEmpty ? [e.entity].compactMap { $0 } : e.lineage) + [e.table]
            let label = e.entity.map { "\($0) (\(e.table))" } ?? "table \(e.table)"
            guard !allows(scopes) else { continue }
            if e.added > 0 { out.append("\(label): \(e.added) added") }
            if e.removed > 0 { out.append("\(label): \(e.removed) removed") }
            // A position in an ordered relationship ("parentFolder (order)") is the relationship's.
            for (name, count) in e.attributes.sorted(by: { $0.key < $1.key })
            where !allows(scopes, name, coreDataColumn: isCoreDataColumn(name, of: e)) && !(e.columns[name].map { allows(scopes, $0, coreDataColumn: isCoreDataColumn($0, of: e)) } ?? false)
                && !(name.hasSuffix(" (order)") && allows(scopes, String(name.dropLast(" (order)".count)))) {
                let unit = e.entity == nil ? "row" : "object"   // a plain table's are rows
                out.append("\(label): \(name) changed in \(count) \(unit)\(count == 1 ? "" : "s")")
            }
        }
        // Core Data's own record of the store's model (the metadata's version hashes, the cached
        // model): written only by a model upgrade, which declares it; Z_PRIMARYKEY's counters
        // follow from the rows any declared change adds, and are not asked for.
        let modelTables = ["Z_METADATA": "the store's metadata: its model's version hashes, Z_VERSION, Z_UUID",
                           "Z_MODELCACHE": "the model Core Data cached in the store"]
        for table in report.bookkeeping.tables.sorted() {
            // The table, or a column of it (`Z_METADATA.Z_UUID`, as the UUID check takes it).
            guard let what = modelTables[table.uppercased()], !names.contains(table.lowercased()),
                  !names.contains(where: { $0.hasPrefix(table.lowercased() + ".") }) else { continue }
            out.append("table \(table) rewritten (\(what)): a model upgrade declares `\(table)`")
        }
        for l in report.links {
            let owner = String(l.relationship.split(separator: ".").first ?? "")
            let member = l.relationship.split(separator: ".").dropFirst().first.map(String.init)
            guard !allows([owner, l.table], member) else { continue }
            if let inverse = l.inverse {
                let parts = inverse.split(separator: ".", maxSplits: 1).map(String.init)
                if let entity = parts.first, allows([entity], parts.count > 1 ? parts[1] : nil) { continue }
            }
            out.append("\(l.relationship) (\(l.table)): \(Format.plural(l.added, "link", "links")) added, \(l.removed) removed" + (l.reordered > 0 ? ", \(l.reordered) reordered" : ""))
        }
        return out
    }

    // MARK: - Schema and model

    static func schemaChanges(_ a: [PageDiff.SchemaEntry], _ b: [PageDiff.SchemaEntry]) -> [SchemaChange] {
        func key(_ e: PageDiff.SchemaEntry) -> String { "\(e.type)\u{0}\(e.name)" }
        let byA = Dictionary(a.map { (key($0), $0) }, uniquingKeysWith: { x, _ in x })
        let byB = Dictionary(b.map { (key($0), $0) }, uniquingKeysWith: { x, _ in x })
        var out: [SchemaChange] = []
        for k in Set(byA.keys).union(byB.keys).sorted() {
            let x = byA[k], y = byB[k]
            let entry = (x ?? y)!
            if x == nil { out.append(SchemaChange(change: "added", type: entry.type, name: entry.name, table: entry.table, before: nil, after: y?.sql)) }
            else if y == nil { out.append(SchemaChange(change: "removed", type: entry.type, name: entry.name, table: entry.table, before: x?.sql, after: nil)) }
            else if x?.sql != y?.sql { out.append(SchemaChange(change: "changed", type: entry.type, name: entry.name, table: entry.table, before: x?.sql, after: y?.sql)) }
        }
        return out
    }

    static func modelChanges(_ a: CoreDataStore?, _ b: CoreDataStore?) -> [String] {
        guard a != nil || b != nil else { return [] }
        guard let a, let b else { return [a == nil ? "the second side is a Core Data store, the first is not" : "the first side is a Core Data store, the second is not"] }
        var out: [String] = []
        let hashesA = a.metadata.modelVersionHashes, hashesB = b.metadata.modelVersionHashes
        let changedHashes = Set(hashesA.keys).union(hashesB.keys).sorted().filter { hashesA[$0] != hashesB[$0] && hashesA[$0] != nil && hashesB[$0] != nil }
        if !changedHashes.isEmpty { out.append("version hash changed: \(changedHashes.joined(separator: ", "))") }
        guard let ma = a.model, let mb = b.model else {
            if a.model == nil, b.model == nil {
                let added = Set(a.entities.map(\.name)).symmetricDifference(b.entities.map(\.name))
                if !added.isEmpty { out.append("entities differ: \(added.sorted().joined(separator: ", ")) (no model cache to say more)") }
            } else {
                out.append("only the \(a.model == nil ? "second" : "first") side has a readable model cache (Z_MODELCACHE): the model is not compared")
            }
            return out
        }
        let entitiesA = Set(ma.superentity.keys), entitiesB = Set(mb.superentity.keys)
        for name in entitiesB.subtracting(entitiesA).sorted() { out.append("entity \(name) added") }
        for name in entitiesA.subtracting(entitiesB).sorted() { out.append("entity \(name) removed") }
        for name in entitiesA.intersection(entitiesB).sorted() where (ma.superentity[name] ?? nil) != (mb.superentity[name] ?? nil) {
            out.append("entity \(name): parent \((ma.superentity[name] ?? nil) ?? "none") → \((mb.superentity[name] ?? nil) ?? "none")")
        }
        func describe(_ x: CoreDataModel.Attribute) -> String { "\(x.typeName), \(x.isOptional ? "optional" : "required")" }
        let attrA = Dictionary(ma.attributes.map { ("\($0.entity).\($0.name)", $0) }, uniquingKeysWith: { x, _ in x })
        let attrB = Dictionary(mb.attributes.map { ("\($0.entity).\($0.name)", $0) }, uniquingKeysWith: { x, _ in x })
        for k in Set(attrA.keys).union(attrB.keys).sorted() {
            switch (attrA[k], attrB[k]) {
            case (nil, let y?): out.append("attribute \(k) added (\(describe(y)))")
            case (let x?, nil): out.append("attribute \(k) removed (\(describe(x)))")
            case (let x?, let y?) where x != y: out.append("attribute \(k): \(describe(x)) → \(describe(y))")
            default: break
            }
        }
        func describe(_ r: CoreDataModel.Relationship) -> String {
            let optional = r.isOptional.map { $0 ? ", optional" : ", required" } ?? ""
            return "\(r.isToMany ? (r.isOrdered ? "ordered to-many" : "to-many") : "to-one") \(r.destination), inverse \(r.inverse ?? "none"), delete rule \(r.deleteRule.name)\(optional)"
        }
        let relA = Dictionary(ma.relationships.map { ("\($0.entity).\($0.name)", $0) }, uniquingKeysWith: { x, _ in x })
        let relB = Dictionary(mb.relationships.map { ("\($0.entity).\($0.name)", $0) }, uniquingKeysWith: { x, _ in x })
        for k in Set(relA.keys).union(relB.keys).sorted() {
            switch (relA[k], relB[k]) {
            case (nil, let y?): out.append("relationship \(k) added (\(describe(y)))")
            case (let x?, nil): out.append("relationship \(k) removed (\(describe(x)))")
            case (let x?, let y?) where x != y: out.append("relationship \(k): \(describe(x)) → \(describe(y))")
            default: break
            }
        }
        for name in Set(ma.uniquenessConstraints.keys).union(mb.uniquenessConstraints.keys).sorted()
        where ma.uniquenessConstraints[name] != mb.uniquenessConstraints[name] {
            func text(_ c: [[String]]?) -> String { (c ?? []).map { "(\($0.joined(separator: ", ")))" }.joined(separator: " ").isEmpty ? "none" : (c ?? []).map { "(\($0.joined(separator: ", ")))" }.joined(separator: " ") }
            out.append("uniqueness constraints of \(name): \(text(ma.uniquenessConstraints[name])) → \(text(mb.uniquenessConstraints[name]))")
        }
        return out
    }

    // MARK: - External data

    /// External-data files (Core Data's `_EXTERNAL_DATA`) by name: size and SHA-256 per side.
    static func externalChanges(_ options: Options, _ a: any DiffPages, _ b: any DiffPages) throws -> [FileChange] {
        func files(_ side: Side, _ pages: any DiffPages) throws -> [String: (UInt64, String)]? {
            switch side {
            case .file(let path):
                let folder = StoreFile(unchecked: path).externalDataPath
                guard FileSystem.kind(of: folder) == .directory else { return [:] }
                // Files in subfolders too, by their path below the folder (as snapshots record them).
                var out: [String: (UInt64, String)] = [:]
                let enumerator = FileManager.default.enumerator(atPath: folder)
                while let relative = enumerator?.nextObject() as? String {
                    let full = (folder as NSString).appendingPathComponent(relative)
                    guard FileSystem.kind(of: full) == .file else { continue }
                    out[relative] = (FileSystem.size(of: full) ?? 0, try Hashing.sha256(ofFile: full))
                }
                return out
            case .snapshot, .point:
                guard let side = pages as? RepositoryPages else { return nil }
                return side.files.mapValues { ($0.bytes, $0.sha256) }
            }
        }
        guard let x = try files(options.a, a), let y = try files(options.b, b) else { return [] }
        var out: [FileChange] = []
        for name in Set(x.keys).union(y.keys).sorted() {
            switch (x[name], y[name]) {
            case (nil, let after?): out.append(FileChange(change: "added", path: name, before: nil, after: after.0, afterSHA256: after.1))
            case (let before?, nil): out.append(FileChange(change: "removed", path: name, before: before.0, after: nil, beforeSHA256: before.1))
            case (let before?, let after?) where before.1 != after.1:
                out.append(FileChange(change: "changed", path: name, before: before.0, after: after.0, beforeSHA256: before.1, afterSHA256: after.1))
            default: break
            }
        }
        return out
    }
}
