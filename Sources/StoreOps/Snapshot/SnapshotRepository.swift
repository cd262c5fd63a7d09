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

    /// Opens a repository, making one if the folder is missing or empty.
    ///
    /// - Throws: 65 when the folder holds other files (it is not made a repository behind the
    ///   operator's back), 73 when it cannot be created.
    public static func openOrCreate(_ path: String) throws -> SnapshotRepository {
        let absolute = FileSystem.absolute(path)
        let kind = FileSystem.kind(of: absolute)
        if kind == .directory, FileManager.default.fileExists(atPath: (absolute as NSString).appendingPathComponent(markerName)) {
            return try open(absolute)
        }
        switch kind {
        case .missing:
            let parent = FileSystem.parent(of: absolute)
            guard FileSystem.kind(of: parent) == .directory else {
                throw StoreOpsError(.cannotCreate, "cannot create the repository \(absolute): \(parent) does not exist")
            }
            guard mkdir(absolute, 0o700) == 0 || errno == EEXIST else {
                throw StoreOpsError.posix(errno, doing: "creating the repository \(absolute)", side: .output)
            }
        case .directory:
            let contents = (try? FileManager.default.contentsOfDirectory(atPath: absolute)) ?? []
            guard contents.isEmpty else {
                throw StoreOpsError(.badData, "\(absolute) is not a storectl snapshot repository (no \(markerName)) and is not empty",
                                    hint: "choose an empty or new folder for --repo")
            }
            chmod(absolute, 0o700)
        default:
            throw StoreOpsError(.cannotCreate, "\(absolute) exists and is not a folder")
        }
        let repo = SnapshotRepository(path: absolute)
        for folder in [repo.snapshotsFolder, repo.catalogFolder, repo.verifiedFolder] {
            guard mkdir(folder, 0o700) == 0 || errno == EEXIST else {
                throw StoreOpsError.posix(errno, doing: "creating \(folder)", side: .output)
            }
        }
        let marker = try PendingFile(finalPath: (absolute as NSString).appendingPathComponent(markerName))
        try marker.write(try JSON.encode(Marker(createdAt: Timestamp.now())))
        try marker.commit(replacing: true)
        return repo
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

    /// Every listed snapshot, newest first.
    public func records() throws -> [Manifest] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: catalogFolder)) ?? []
        var records: [Manifest] = []
        for name in names where name.hasSuffix(".json") && !name.hasPrefix(".") {
            let file = (catalogFolder as NSString).appendingPathComponent(name)
            guard let data = FileManager.default.contents(atPath: file) else { continue }
            do {
                let record = try JSON.decoder().decode(Manifest.self, from: data)
                guard record.formatVersion <= Manifest.currentFormatVersion else {
                    throw StoreOpsError(.badData, "catalog entry \(file) has format version \(record.formatVersion); use a newer storectl")
                }
                records.append(record)
            } catch let error as StoreOpsError {
                throw error
            } catch {
                throw StoreOpsError(.badData, "catalog entry \(file) is not a valid manifest (\(error))",
                                    hint: "the repository is damaged; `storectl snapshot verify --all` checks the archives")
            }
        }
        return records.sorted { ($0.startedAt, $0.snapshot?.id ?? "") > ($1.startedAt, $1.snapshot?.id ?? "") }
    }

    /// The snapshot with this id, or the only one whose id starts with it.
    ///
    /// - Throws: 66 when there is none (or the text cannot be an id), 64 when a prefix is ambiguous.
    public func record(_ id: String) throws -> Manifest {
        guard SnapshotID.isPlausible(id) else {
            throw StoreOpsError(.noInput, "\"\(id)\" is not a snapshot id", hint: "`storectl snapshot list --repo \(path)` shows the ids")
        }
        let all = try records()
        if let exact = all.first(where: { $0.snapshot?.id == id }) { return exact }
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
        let entry = try PendingFile(finalPath: catalogPath(id))
        try entry.write(try JSON.encode(record))
        try entry.commit()
    }

    /// The last verification of a snapshot, if any.
    public func lastVerification(_ id: String) -> VerificationRecord? {
        FileManager.default.contents(atPath: verifiedPath(id)).flatMap { try? JSON.decoder().decode(VerificationRecord.self, from: $0) }
    }

    func recordVerification(_ id: String, _ record: VerificationRecord) throws {
        let file = try PendingFile(finalPath: verifiedPath(id))
        try file.write(try JSON.encode(record))
        try file.commit(replacing: true)
    }

    /// Removes a snapshot: the catalog entry first (it stops being listed), then the archive.
    func remove(_ record: Manifest) throws {
        guard let id = record.snapshot?.id else { return }
        guard unlink(catalogPath(id)) == 0 || errno == ENOENT else {
            throw StoreOpsError.posix(errno, doing: "removing the catalog entry of \(id)", side: .output)
        }
        try FileSystem.sync(catalogFolder, directory: true)
        unlink(archivePath(record))
        unlink(verifiedPath(id))
        try FileSystem.sync(snapshotsFolder, directory: true)
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
            .filter { $0.hasSuffix(".json") }.map { String($0.dropLast(5)) })
        for name in (try? FileManager.default.contentsOfDirectory(atPath: snapshotsFolder)) ?? [] where !name.hasPrefix(".") {
            let id = String(name.prefix { $0 != "." })
            if SnapshotID.isPlausible(id), !listed.contains(id) {
                let file = (snapshotsFolder as NSString).appendingPathComponent(name)
                unlink(file)
                removed.append(file)
            }
        }
        for name in (try? FileManager.default.contentsOfDirectory(atPath: verifiedFolder)) ?? [] where name.hasSuffix(".json") {
            if !listed.contains(String(name.dropLast(5))) {
                unlink((verifiedFolder as NSString).appendingPathComponent(name))
            }
        }
        return removed
    }
}

/// Snapshot ids: the UTC time and a random suffix, `20261122T031500Z-7f3a9c`; they sort by time.
public enum SnapshotID {
    public static func make(at date: Date) -> String {
        "\(Timestamp.compact(date))-\(String(format: "%06x", UInt32.random(in: 0...0xFF_FFFF)))"
    }

    /// Whether `text` could be (a prefix of) an id: digits, T, Z, '-' and hex, nothing that can
    /// name another path.
    public static func isPlausible(_ text: String) -> Bool {
        !text.isEmpty && text.count <= 40 && text.allSatisfy { $0.isASCII && ($0.isHexDigit || $0 == "T" || $0 == "Z" || $0 == "-") }
    }
}
