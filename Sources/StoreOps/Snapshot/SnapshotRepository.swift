import Foundation

/// A folder of snapshots:
///
///     REPO/                          mode 0700
///       storectl-repo.json           marks the folder as a repository (format and version)
///       snapshots/<id>.tar.zst       the archives (mode 0600)
///       catalog/<id>.json            one manifest per snapshot: what `list` shows
///       verified/<id>.json           when each snapshot was last verified, and the result
///       .lock                        writers (create, restore, prune) hold an flock on it
///
/// Creating writes the archive first and the catalog entry last; pruning removes the catalog
/// entry first: a snapshot is listed only when its archive is complete. Each catalog entry is
/// its own file, written atomically, so adding or removing one never rewrites another. Readers
/// (list, show, verify) take no lock.
public final class SnapshotRepository: Sendable {
    public let path: String
    static let markerName = "storectl-repo.json"
    static let formatVersion = 1

    struct Marker: Codable {
        var format = "storectl-snapshot-repository"
        var formatVersion = SnapshotRepository.formatVersion
        var createdAt: Date
    }

    /// When a snapshot was last verified, and what was found.
    public struct VerificationRecord: Sendable, Codable, Equatable {
        public var at: Date
        public var ok: Bool
        public var level: VerifyLevel
        public var problem: String?
    }

    var snapshotsFolder: String { (path as NSString).appendingPathComponent("snapshots") }
    var catalogFolder: String { (path as NSString).appendingPathComponent("catalog") }
    var verifiedFolder: String { (path as NSString).appendingPathComponent("verified") }
    var lockPath: String { (path as NSString).appendingPathComponent(".lock") }

    private init(path: String) { self.path = path }

    /// Opens an existing repository.
    ///
    /// - Throws: 66 when the folder does not exist, 65 when it is not a storectl repository or was
    ///   written by a newer storectl.
    public static func open(_ path: String) throws -> SnapshotRepository {
        let absolute = FileSystem.absolute(path)
        switch FileSystem.kind(of: absolute) {
        case .missing:
            throw StoreOpsError(.noInput, "the snapshot repository \(absolute) does not exist",
                                hint: "check --repo; `storectl snapshot create` makes a new repository")
        case .directory: break
        default:
            throw StoreOpsError(.badData, "\(absolute) is not a folder, so not a snapshot repository")
        }
        let repo = SnapshotRepository(path: absolute)
        try repo.checkMarker()
        return repo
    }

    /// Makes a new format-1 repository (`storectl repo init --format 1`) at a missing path or in an
    /// empty folder.
    ///
    /// A new repository is built under a temporary name (folders and marker, fsynced) and renamed
    /// into place, so a crash never leaves half a repository.
    ///
    /// - Throws: 73 when a repository is already there or the folder holds other files (it is not
    ///   made a repository behind the operator's back), or it cannot be created.
    public static func create(_ path: String) throws -> SnapshotRepository {
        let absolute = FileSystem.absolute(path)
        let kind = try RepositoryInit.checkTarget(absolute)
        let parent = FileSystem.parent(of: absolute)
        PendingFile.removeStale(in: parent, prefix: FileSystem.name(of: absolute))
        let staging = try PendingFile(finalPath: absolute, directory: true, label: "repo.create")
        let repo = SnapshotRepository(path: staging.tempPath)
        for folder in [repo.snapshotsFolder, repo.catalogFolder, repo.verifiedFolder] {
            try FileSystem.makeDirectory(folder, point: "repo.create.folder")
        }
        try FileSystem.writeNewFile((staging.tempPath as NSString).appendingPathComponent(markerName),
                                    try JSON.encode(Marker(createdAt: Timestamp.now())), point: "repo.create.marker")
        // rename(2) replaces an empty folder the operator made for it.
        try staging.commit(replacing: kind == .directory)
        return SnapshotRepository(path: absolute)
    }

    private func checkMarker() throws {
        let markerPath = (path as NSString).appendingPathComponent(Self.markerName)
        guard let data = FileManager.default.contents(atPath: markerPath) else {
            throw StoreOpsError(.badData, "\(path) is not a storectl snapshot repository (no \(Self.markerName))",
                                hint: "check --repo")
        }
        guard let marker = try? JSON.decoder().decode(Marker.self, from: data), marker.format == "storectl-snapshot-repository" else {
            throw StoreOpsError(.badData, "\(markerPath) is not a storectl repository marker")
        }
        guard marker.formatVersion <= Self.formatVersion else {
            throw StoreOpsError(.badData, "\(path) is a version \(marker.formatVersion) repository; this storectl reads up to version \(Self.formatVersion)",
                                hint: "use a newer storectl")
        }
    }

    /// Takes the writers' lock (exit 75 at once when held, unless `wait`).
    public func lockForWriting(job: String, wait: Bool) throws -> JobLock {
        try JobLock.acquire(path: lockPath, job: job, wait: wait)
    }

    // MARK: - Catalog

    /// A catalog entry that cannot be read: listed as damaged, never removed by prune.
    public struct DamagedEntry: Sendable, Codable, Equatable {
        /// The id its file name gives.
        public var id: String
        public var file: String
        public var problem: String
    }

    /// Every readable catalog entry (newest first) and every damaged one.
    public func catalog() -> (records: [Manifest], damaged: [DamagedEntry]) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: catalogFolder)) ?? []
        var records: [Manifest] = []
        var damaged: [DamagedEntry] = []
        for name in names.sorted() where name.hasSuffix(".json") && !name.hasPrefix(".") {
            let file = (catalogFolder as NSString).appendingPathComponent(name)
            let id = String(name.dropLast(5))
            func bad(_ problem: String) { damaged.append(DamagedEntry(id: id, file: file, problem: problem)) }
            guard let data = FileManager.default.contents(atPath: file) else { bad("cannot be read"); continue }
            guard data.count < 64 << 20 else { bad("is \(Format.bytes(UInt64(data.count))), not a catalog entry"); continue }
            struct Header: Decodable { var format: String?; var formatVersion: Int? }
            // The format and version first: a newer manifest is "use a newer storectl", not garbage.
            if let header = try? JSON.decoder().decode(Header.self, from: data), header.format == "storectl-manifest",
               let version = header.formatVersion, version > Manifest.currentFormatVersion {
                bad("has format version \(version); this storectl reads up to \(Manifest.currentFormatVersion) (use a newer storectl)")
                continue
            }
            let record: Manifest
            do { record = try JSON.decoder().decode(Manifest.self, from: data) } catch {
                bad("is not a valid manifest (\(Self.describe(error)))")
                continue
            }
            guard record.format == "storectl-manifest" else { bad("is not a storectl manifest (format \(record.format.debugDescription))"); continue }
            guard record.formatVersion <= Manifest.currentFormatVersion else {
                bad("has format version \(record.formatVersion); this storectl reads up to \(Manifest.currentFormatVersion) (use a newer storectl)")
                continue
            }
            guard let facts = record.snapshot, facts.id == id, SnapshotID.isPlausible(id), facts.archive != nil else {
                bad("does not describe snapshot \(id) (its id or archive record is missing or different)")
                continue
            }
            records.append(record)
        }
        records.sort { ($0.startedAt, $0.snapshot?.id ?? "") > ($1.startedAt, $1.snapshot?.id ?? "") }
        return (records, damaged)
    }

    /// Every readable snapshot, newest first (damaged catalog entries are in `catalog()`).
    public func records() throws -> [Manifest] { catalog().records }

    /// A decoding error in a sentence (the key path and what was wrong), not Foundation's dump.
    static func describe(_ error: any Error) -> String {
        guard let decoding = error as? DecodingError else { return "\(error)" }
        func path(_ context: DecodingError.Context) -> String {
            let keys = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
            return keys.isEmpty ? "" : " at \(keys)"
        }
        switch decoding {
        case .dataCorrupted(let context): return "not valid JSON\(path(context))"
        case .keyNotFound(let key, let context): return "no \(key.stringValue)\(path(context))"
        case .typeMismatch(_, let context): return "\(context.debugDescription.lowercased())\(path(context))"
        case .valueNotFound(_, let context): return "a missing value\(path(context))"
        @unknown default: return "\(error)"
        }
    }

    /// The snapshot with this id, or the only one whose id starts with it.
    ///
    /// - Throws: 66 when there is none (or the text cannot be an id), 64 when a prefix is ambiguous.
    public func record(_ id: String) throws -> Manifest {
        guard SnapshotID.isPlausible(id) else {
            throw StoreOpsError(.noInput, "\"\(id)\" is not a snapshot id", hint: "`storectl snapshot list --repo \(path)` shows the ids")
        }
        let (all, damaged) = catalog()
        if let exact = all.first(where: { $0.snapshot?.id == id }) { return exact }
        if let broken = damaged.first(where: { $0.id == id }) ?? (damaged.count == 1 && damaged[0].id.hasPrefix(id)
                                                                      && !all.contains { $0.snapshot?.id.hasPrefix(id) == true } ? damaged[0] : nil) {
            throw StoreOpsError(.badData, "snapshot \(broken.id): its catalog entry \(broken.file) \(broken.problem)",
                                hint: "restore another snapshot (`storectl snapshot list --repo \(path)` marks damaged entries)")
        }
        let matches = all.filter { $0.snapshot?.id.hasPrefix(id) == true }
        guard matches.count <= 1 else {
            throw StoreOpsError(.usage, "\"\(id)\" matches \(matches.count) snapshots: \(matches.compactMap { $0.snapshot?.id }.joined(separator: ", "))")
        }
        guard let match = matches.first else {
            throw StoreOpsError(.noInput, "no snapshot \(id) in \(path)", hint: "`storectl snapshot list --repo \(path)` shows the ids")
        }
        return match
    }

    func archivePath(_ record: Manifest) -> String {
        (path as NSString).appendingPathComponent(record.snapshot?.archive?.path ?? "")
    }

    func catalogPath(_ id: String) -> String { (catalogFolder as NSString).appendingPathComponent("\(id).json") }
    func verifiedPath(_ id: String) -> String { (verifiedFolder as NSString).appendingPathComponent("\(id).json") }

    func addToCatalog(_ record: Manifest) throws {
        guard let id = record.snapshot?.id else { throw StoreOpsError(.failure, "a catalog entry needs a snapshot id") }
        let entry = try PendingFile(finalPath: catalogPath(id), label: "snapshot.catalog")
        try entry.write(try JSON.encode(record))
        try entry.commit()
    }

    /// The last verification of a snapshot, if any.
    public func lastVerification(_ id: String) -> VerificationRecord? {
        FileManager.default.contents(atPath: verifiedPath(id)).flatMap { try? JSON.decoder().decode(VerificationRecord.self, from: $0) }
    }

    func recordVerification(_ id: String, _ record: VerificationRecord) throws {
        let file = try PendingFile(finalPath: verifiedPath(id), label: "verify.record")
        try file.write(try JSON.encode(record))
        try file.commit(replacing: true)
    }

    /// Removes a snapshot: the catalog entry first (it stops being listed), then the archive.
    func remove(_ record: Manifest) throws {
        guard let id = record.snapshot?.id else { return }
        try FileSystem.removeFile(catalogPath(id), point: "prune.catalog.remove")
        try FileSystem.sync(catalogFolder, directory: true, point: "prune.catalog.sync")
        try FileSystem.removeFile(archivePath(record), point: "prune.archive.remove")
        try FileSystem.removeFile(verifiedPath(id), point: "prune.verified.remove")
        try FileSystem.sync(snapshotsFolder, directory: true, point: "prune.archive.sync")
    }

    /// Removes what interrupted runs left (under the writers' lock): temp files of dead
    /// processes, archives without a catalog entry, verification records of removed snapshots.
    @discardableResult
    func removeStray() -> [String] {
        var removed: [String] = []
        for folder in [path, snapshotsFolder, catalogFolder, verifiedFolder] {
            removed += PendingFile.removeStale(in: folder)
        }
        let listed = Set(((try? FileManager.default.contentsOfDirectory(atPath: catalogFolder)) ?? [])
            .filter { $0.hasSuffix(".json") && !$0.hasPrefix(".") }.map { String($0.dropLast(5)) })
        for name in (try? FileManager.default.contentsOfDirectory(atPath: snapshotsFolder)) ?? [] where !name.hasPrefix(".") {
            let id = String(name.prefix { $0 != "." })
            if SnapshotID.isPlausible(id), !listed.contains(id) {
                let file = (snapshotsFolder as NSString).appendingPathComponent(name)
                if FileSystem.remove(file, point: "stray.archive.remove") { removed.append(file) }
            }
        }
        for name in (try? FileManager.default.contentsOfDirectory(atPath: verifiedFolder)) ?? [] where name.hasSuffix(".json") && !name.hasPrefix(".") {
            if !listed.contains(String(name.dropLast(5))) {
                FileSystem.remove((verifiedFolder as NSString).appendingPathComponent(name), point: "stray.verified.remove")
            }
        }
        return removed
    }
}

