import Foundation

/// `storectl snapshot import FILE --repo R`: brings one snapshot archive (the `.tar.zst`
/// `snapshot export` writes, format 1's layout) into a format-2 repository, keeping its id,
/// time, host, source path and tags, so a snapshot can move between repositories, hosts and
/// sites as one file and come back as the same snapshot.
///
/// Nothing counts until it is verified: the archive is read twice (its manifest, which is its
/// last entry, then every entry checked against it: names, sizes, SHA-256 of every file and of
/// the database, quick_check), unpacked into a scratch folder, streamed into packs page by page
/// as it is (so the snapshot restores to the same bytes), committed (packs, index, then the
/// sealed record), and then reassembled from the repository and compared with the archive's
/// database SHA-256. The scratch folder goes in every case.
public enum SnapshotImport {
    public struct Options: Sendable {
        public var file: String
        public var repository: String
        public var password: PasswordSource = .resolve(file: nil)
        /// Where the archive is unpacked (default: TMPDIR).
        public var scratch: String?
        public var wait = false

        public init(file: String, repository: String, password: PasswordSource = .resolve(file: nil)) {
            self.file = file
            self.repository = repository
            self.password = password
        }
    }

    public struct Result: Sendable, Codable {
        public var id: String
        public var repository: String
        /// The repository already held this snapshot (the same one: its id, time and source); it
        /// was verified again and nothing was written.
        public var alreadyThere: Bool
        public var addedBytes: UInt64
        public var databaseSHA256: String
        public var startedAt: Date
        public var host: String
        public var source: String
        public var tags: [String]
        /// How long each stage of `snapshot import` took (lock, preflight, import); nil in a convert's report.
        public var stages: [StageTiming]?
    }

    /// - Throws: 66 no such file or repository, 65 a damaged archive or an id the repository holds
    ///   for another snapshot (or a format-1 repository), 74 no room to unpack, 77 wrong password.
    public static func run(_ options: Options, progress: ProgressHandler? = nil) throws -> Result {
        guard !options.file.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw StoreOpsError(.usage, "no archive named: give the .tar.zst `storectl snapshot export` wrote")
        }
        let file = FileSystem.absolute(options.file)
        guard FileSystem.kind(of: file) == .file else {
            throw StoreOpsError(.noInput, "\(file) does not exist or is not a file", hint: "name a snapshot archive written by `storectl snapshot export`")
        }
        let pipeline = Pipeline(operation: "snapshot import", progress: progress)
        var road = PlannedRoad<Scratch, Result>(lock: .none, wait: options.wait, actName: "import",
                                                preflight: { _ in try Scratch(in: options.scratch, label: "import", needing: 0) },
                                                act: { pipeline, scratch in
                                                    defer { scratch.discard() }
                                                    return try bring(file, into: try pipeline.repository, scratch: scratch, progress: progress)
                                                })
        road.repository = .init(options.repository, password: options.password, exclusive: false)
        road.abandon = { scratch in scratch.discard() }
        let walked = pipeline.walk(road)
        var result = try walked.get()
        result.stages = walked.stages
        return result
    }

    /// Reads and checks the archive into the scratch folder, then brings it in.
    static func bring(_ file: String, into repository: PagedRepository, scratch: Scratch, progress: ProgressHandler?) throws -> Result {
        progress?(.stage("read and check the archive"))
        // Room for the database and its external data twice (unpacked, then reassembled from the
        // repository to be compared), checked once the manifest says how big they are.
        let manifest = try SnapshotExtraction.runFile(file, into: try scratch.targets(for: nil), level: .quick) { manifest in
            // Its figures first (65 naming the field): a size no storectl writes read as "not
            // enough space, 2099 TiB needed" (74) before (a fuzzer).
            try manifest.checkFigures(what: "\(FileSystem.name(of: file))'s manifest")
            let external = min(manifest.externalData?.totalBytes ?? 0, 1 << 50)
            let bytes = min(manifest.database.bytes, 1 << 50) + external
            try SpaceRequirement.require(2 * bytes + SpaceRequirement.margin(bytes), at: scratch.base, purpose: "unpacking \(FileSystem.name(of: file))",
                                         hint: "pass --scratch with a folder on a larger volume")
        }
        let staged = try scratch.stage(databaseNamed: FileSystem.name(of: manifest.database.path))
        return try bringIn(database: staged, origin: manifest, into: repository, scratch: scratch, progress: progress)
    }

    /// Streams a verified database file (and the external data staged beside it) into
    /// `repository` as the snapshot `origin` describes, then reassembles it from the repository
    /// and compares it with the file. A snapshot the repository already holds under the same id
    /// is verified the same way and not written again (a convert run killed after its commit);
    /// under the same id but from another time or store it is 65.
    static func bringIn(database: String, origin: Manifest, into repository: PagedRepository, scratch: Scratch,
                        progress: ProgressHandler?) throws -> Result {
        guard let facts = origin.snapshot, SnapshotID.isWellFormed(facts.id) else {
            throw StoreOpsError(.badData, "the snapshot to bring in has no valid id (\((origin.snapshot?.id ?? "none").debugDescription); storectl writes ids like 20261122T031500Z-7f3a9c)")
        }
        do { try SnapshotCreate.validate(tags: facts.tags) } catch let error as StoreOpsError {
            throw StoreOpsError(.badData, "snapshot \(facts.id) carries a tag storectl would not write: \(error.message)")
        }
        // Its host and store path are printed by list, show and prune (none may be empty here),
        // its figures summed, its time is its id's: what every record is held to when opened.
        for (field, text) in [("host", origin.host), ("store path", origin.source.path)] where text.isEmpty {
            throw StoreOpsError(.badData, "snapshot \(facts.id) names an empty \(field)")
        }
        try origin.checkIdentity(id: facts.id, what: "snapshot \(facts.id)")
        try origin.checkFigures(what: "snapshot \(facts.id)")
        // Not in the future either (checked once, here: this host's clock is the reference).
        guard origin.startedAt <= Date().addingTimeInterval(86_400) else {
            throw StoreOpsError(.badData, "snapshot \(facts.id) says it was taken at \(Timestamp.iso(origin.startedAt)), in the future",
                                hint: "check this host's clock and the archive's origin")
        }
        // A compression level from outside data: used only when it is one zstd takes.
        let level = facts.level.flatMap { (1...19).contains($0) ? $0 : nil }
        let expected = try Hashing.sha256(ofFile: database)
        let records = try repository.catalog().records
        var record: PagedSnapshotRecord
        var added: UInt64 = 0
        var alreadyThere = false
        if let existing = records.first(where: { $0.id == facts.id }) {
            // What differs, each named with both sides.
            let held = existing.manifest
            let differences: [String] = [
                held.startedAt == origin.startedAt ? nil : "taken \(Timestamp.iso(held.startedAt)) there, \(Timestamp.iso(origin.startedAt)) in the archive",
                held.source.path.isExactly(origin.source.path) ? nil : "store \(held.source.path.debugDescription) there, \(origin.source.path.debugDescription) in the archive",
                held.host == origin.host ? nil : "host \(held.host.debugDescription) there, \(origin.host.debugDescription) in the archive",
                held.snapshot?.tags ?? [] == facts.tags ? nil : "tags \((held.snapshot?.tags ?? []).joined(separator: ",")) there, \(facts.tags.joined(separator: ",")) in the archive",
                held.database.bytes == origin.database.bytes ? nil : "a database of \(Format.count(held.database.bytes)) bytes there, \(Format.count(origin.database.bytes)) in the archive",
            ].compactMap { $0 }
            guard differences.isEmpty else {
                throw StoreOpsError(.badData, "\(repository.location) already holds a different snapshot \(facts.id): \(differences.joined(separator: "; "))",
                                    hint: "ids are unique in a repository: import it into another repository")
            }
            record = existing
            alreadyThere = true
        } else {
            progress?(.stage("pages"))
            let work = PagedSnapshotWork(store: try StoreFile(existing: database), repository: repository, tags: facts.tags, level: level, origin: origin)
            do {
                try work.prepare(records: records)
                try work.copyFile(progress: progress.map { handler in { handler(.step($0)) } })
                progress?(.stage("commit"))
                try work.check()
                // The record is written only once the snapshot it describes reassembles, from the
                // packs and index just made durable, to the bytes it was made from.
                try work.commit { record in
                    progress?(.stage("verify"))
                    try verify(record, in: repository, expected: expected, scratch: scratch)
                }
            } catch {
                work.abandon()
                throw error
            }
            guard let committed = work.record else { throw StoreOpsError(.failure, "the snapshot \(facts.id) did not commit") }
            record = committed
            added = committed.added.storedBytes
        }
        if alreadyThere {
            // The same facts, so the same bytes: a difference is this archive's (or damage to the
            // copy there, which repo check tells apart), said as such.
            progress?(.stage("verify"))
            try verify(record, in: repository, expected: expected, scratch: scratch, heldBefore: true)
        }
        // The verification is recorded as `snapshot verify` records its own (the list's LAST
        // VERIFIED said "never" after an import that had said "verified"). The snapshot is in
        // either way: a note that cannot be written is a warning, not a failed import.
        do {
            try repository.recordVerification(record.id, .init(at: Timestamp.now(), ok: true, level: .quick, problem: nil))
        } catch {
            SnapshotCreate.logger.warning("snapshot \(record.id) was verified; recording that failed: \(error)")
        }
        return Result(id: facts.id, repository: repository.location, alreadyThere: alreadyThere,
                      addedBytes: added, databaseSHA256: expected, startedAt: origin.startedAt, host: origin.host, source: origin.source.path,
                      tags: facts.tags)
    }

    /// Reassembles `record` from `repository` and compares it with the bytes it was made from.
    /// - Parameter heldBefore: the repository held the snapshot before this run: other bytes are
    ///   the archive's (or damage to the copy there), not what this run wrote.
    static func verify(_ record: PagedSnapshotRecord, in repository: PagedRepository, expected: String, scratch: Scratch, heldBefore: Bool = false) throws {
        let sha = try PagedExtraction.run(record, repository: repository, into: try scratch.targets(for: "verify"), level: .quick) ?? ""
        if heldBefore, sha != expected {
            throw StoreOpsError(.badData, "\(repository.location) already holds snapshot \(record.id), and its database differs from this archive's (sha256 \(sha.prefix(12))… there, \(expected.prefix(12))… in the archive): not imported",
                                hint: "ids are unique in a repository: import it into another repository; `storectl repo check --read-data --repo \(repository.location)` tells whether the copy there is damaged")
        }
        guard sha == expected else {
            throw StoreOpsError(.badData, "snapshot \(record.id) in \(repository.location) reassembles to other bytes than it was made from (sha256 \(sha.prefix(12))…, expected \(expected.prefix(12))…)",
                                hint: "run `storectl repo check --read-data --repo \(repository.location)`")
        }
    }

    /// A temporary folder for one snapshot at a time: where an archive or an old repository's
    /// snapshot is unpacked (the database under its own name, its external data where a store's
    /// is), and where the brought-in snapshot is reassembled to be compared. Removed at the end
    /// (a killed run's by the next run: a temp name of a dead process).
    final class Scratch {
        let folder: PendingFile
        /// The folder the scratch folder was made in.
        let base: String
        private var count = 0

        init(in parent: String?, label: String, needing bytes: UInt64) throws {
            base = FileSystem.absolute(parent ?? NSTemporaryDirectory())
            guard FileSystem.kind(of: base) == .directory else { throw StoreOpsError(.cannotCreate, "the scratch folder \(base) does not exist") }
            try SpaceRequirement.require(bytes + SpaceRequirement.margin(bytes), at: base, purpose: "the \(label)'s scratch copy",
                                         hint: "pass --scratch with a folder on a larger volume")
            PendingFile.removeStale(in: base, prefix: "storectl-\(label)")
            folder = try PendingFile(finalPath: (base as NSString).appendingPathComponent("storectl-\(label)"), directory: true, label: "\(label).scratch")
        }

        /// A new empty database file and external-data folder in a subfolder of their own.
        func targets(for name: String?) throws -> SnapshotExtraction.Targets {
            count += 1
            let sub = (folder.tempPath as NSString).appendingPathComponent("\(count)-\(name ?? "unpacked")")
            try FileSystem.makeDirectory(sub, existingOK: false, point: "scratch.folder")
            let database = (sub as NSString).appendingPathComponent("database")
            let external = (sub as NSString).appendingPathComponent("external")
            try FileSystem.makeDirectory(external, existingOK: false, point: "scratch.folder")
            close(try FileSystem.create(database, point: "scratch.file"))
            latest = (database, external)
            return .init(database: database, externalFolder: external)
        }

        private var latest: (database: String, external: String)?

        /// The last unpacked snapshot laid out as its store was: `<name>` and, when it had
        /// external data, `.<stem>_SUPPORT/_EXTERNAL_DATA/` beside it (so its records keep their
        /// paths). Returns the database's path.
        func stage(databaseNamed name: String) throws -> String {
            guard let latest, PagedSnapshotRecord.isExternalFileName(name) else {
                throw StoreOpsError(.badData, "the snapshot's database is named \(name), which is not a plain file name")
            }
            let folder = FileSystem.parent(of: latest.database)
            let database = (folder as NSString).appendingPathComponent(name)
            try FileSystem.rename(latest.database, database, point: "scratch.stage")
            let files = (try? FileManager.default.contentsOfDirectory(atPath: latest.external)) ?? []
            if !files.isEmpty {
                let support = StoreFile.supportPath(forDatabase: database)
                try FileSystem.makeDirectory(support, existingOK: false, point: "scratch.folder")
                try FileSystem.rename(latest.external, (support as NSString).appendingPathComponent(StoreFile.externalDataFolderName), point: "scratch.stage")
            }
            return database
        }

        func discard() { folder.discard() }
    }
}
