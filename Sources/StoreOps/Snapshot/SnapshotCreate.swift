import Foundation
import Logging

/// `storectl snapshot create`: a consistent copy of a store packed with its manifest into one
/// compressed archive in a snapshot repository.
public enum SnapshotCreate {
    public struct Options: Sendable {
        public var repository: String
        public var tags: [String] = []
        public var compression: Compression = .zstd
        /// Compression level; nil for the compression's default.
        public var level: Int?
        /// Seconds without progress on a locked store before giving up (exit 75).
        public var timeout: TimeInterval = 60
        /// Wait for another writer of the repository instead of exiting 75.
        public var wait = false
        /// Check free space first (tests turn it off to reach a real ENOSPC).
        public var checkFreeSpace = true
        /// The caller (a migration, a purge, a scheduled job) holds the store's job lock.
        public var storeLockHeld = false
        /// Where an encrypted repository's password comes from.
        public var password: PasswordSource = .resolve(file: nil)

        public init(repository: String, tags: [String] = [], compression: Compression = .zstd, level: Int? = nil,
                    timeout: TimeInterval = 60, wait: Bool = false, password: PasswordSource = .resolve(file: nil)) {
            self.repository = repository
            self.tags = tags
            self.compression = compression
            self.level = level
            self.timeout = timeout
            self.wait = wait
            self.password = password
        }
    }

    public struct Result: Sendable, Codable {
        public var id: String
        /// Format 1: the archive file; format 2: the snapshot record.
        public var archive: String
        public var record: Manifest
        /// The repository's format (1 or 2).
        public var format: Int = 1
        /// Format 2: bytes added to the repository (new packs and index), and the parent.
        public var addedBytes: UInt64?
        public var parent: String?
        /// Format 2: the packs this snapshot wrote (what a safety snapshot's check reads back).
        public var packsWritten: [String]?
        /// Temp files and unlisted archives of interrupted runs that were removed first.
        public var removedStray: [String]
        /// How long each stage took (lock, preflight, copy, verify, commit).
        public var stages: [StageTiming] = []
    }

    static let logger = Logger(label: "storectl.snapshot")

    /// Creates a snapshot of `store` in an existing repository (format 1 or 2; `storectl repo init`
    /// makes one), walking the pipeline: lock (shared with backups and other snapshots, never
    /// beside a change of the store), preflight (the repository opened and locked), copy, verify,
    /// commit (format 1: the archive renamed, then its catalog entry; format 2: the last pack and
    /// index, then the sealed record).
    ///
    /// ```swift
    /// let result = try SnapshotCreate.run(store: "/srv/app/Tasks.sqlite", options: .init(repository: "/snapshots", tags: ["nightly"]))
    /// ```
    ///
    /// - Throws: 75 when another writer holds the repository or a change holds the store, 74 when
    ///   there is no room, 65/66 for a bad store or repository, 64 for a bad tag or level, 77 for
    ///   a wrong password.
    public static func run(store path: String, options: Options, progress: ProgressHandler? = nil) throws -> Result {
        let level = try options.compression.validatedLevel(options.level)
        try Validate.timeout(options.timeout)
        try validate(tags: options.tags)
        let store = try StoreFile(existing: path)
        let pipeline = Pipeline(operation: "snapshot create", store: store, progress: progress)
        var held: RepositoryHold?
        defer { held?.release() }
        var work: (any SnapshotWork)?
        var road = Road<any SnapshotWork>(lock: options.storeLockHeld ? .held : .shared, wait: options.wait, actName: "copy") { pipeline in
            guard let work else { throw StoreOpsError(.failure, "no repository") }
            try work.copy(timeout: options.timeout, checkFreeSpace: options.checkFreeSpace, progress: { pipeline.step($0) })
            return work
        }
        road.preflight = { _ in
            let hold = try RepositoryHold.take(try OpenedRepository.open(options.repository, password: options.password, missing: .initHint),
                                               operation: "snapshot create", exclusive: false, wait: options.wait)
            held = hold
            work = try makeWork(store: store, in: hold, tags: options.tags, compression: options.compression, level: level)
        }
        road.verify = { _, work in try work.check() }
        road.commit = { _, work in try work.commit() }
        let walked = pipeline.walk(road)
        if walked.ending.outcome != .ok { work?.abandon() }
        var result = try walked.get().result()
        result.removedStray = held?.removedStray ?? []
        result.stages = walked.stages
        return result
    }

    static func validate(tags: [String]) throws {
        for tag in tags {
            let allowed = !tag.isEmpty && tag.count <= 64 && tag.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "._:-".contains($0)) }
            if !allowed {
                throw StoreOpsError(.usage, "tag \"\(tag)\": use 1 to 64 letters, digits, '.', '_', ':' or '-'")
            }
        }
    }

    static func makeWork(store: StoreFile, in hold: RepositoryHold, tags: [String], compression: Compression, level: Int?) throws -> any SnapshotWork {
        switch hold.repository {
        case .archives(let repository):
            return try Work(store: store, repository: repository, tags: tags, compression: compression, level: level)
        case .paged(let repository):
            guard compression == .zstd else {
                throw StoreOpsError(.usage, "a format-2 repository compresses with zstd; --compression \(compression.rawValue) is for format 1")
            }
            let work = PagedSnapshotWork(store: store, repository: repository, tags: tags, level: level)
            try work.prepare(records: try repository.catalog().records)
            return work
        }
    }

    /// Creates the snapshot; the caller holds the repository (and the store's lock): a restore's
    /// safety snapshot.
    static func create(store: StoreFile, in hold: RepositoryHold, tags: [String], compression: Compression, level: Int?,
                       timeout: TimeInterval, checkFreeSpace: Bool, progress: StepHandler?) throws -> Result {
        let work = try makeWork(store: store, in: hold, tags: tags, compression: compression, level: level)
        do {
            try work.copy(timeout: timeout, checkFreeSpace: checkFreeSpace, progress: progress)
            try work.check()
            try work.commit()
        } catch {
            work.abandon()
            throw error
        }
        return try work.result()
    }

    /// One snapshot's files and facts, from the consistent copy to the catalog entry.
    final class Work: SnapshotWork {
        let store: StoreFile
        let repository: SnapshotRepository
        let tags: [String]
        let compression: Compression
        let level: Int?
        let startedAt = Timestamp.now()
        let id: String
        let archive: PendingFile
        let copy: PendingFile
        var external: PendingFile?
        var copied: ConsistentCopy.Copied?
        var packed: Packed?
        var inspection: ConsistentCopy.Inspection?
        var record: Manifest?

        init(store: StoreFile, repository: SnapshotRepository, tags: [String], compression: Compression, level: Int?) throws {
            self.store = store
            self.repository = repository
            self.tags = tags
            self.compression = compression
            self.level = level
            id = SnapshotID.make(at: startedAt)
            archive = try PendingFile(finalPath: (repository.snapshotsFolder as NSString).appendingPathComponent("\(id).\(compression.fileExtension)"),
                                      label: "snapshot.archive")
            copy = try PendingFile(finalPath: (repository.snapshotsFolder as NSString).appendingPathComponent("\(id).sqlite"), label: "snapshot.copy")
        }

        deinit {
            copy.discard()
            external?.discard()
        }

        var externalRoot: String { "store/" + StoreFile.externalDataRelativePath(forDatabaseNamed: store.name) }

        /// The consistent copy (scratch: read once while packing, then deleted, so no write-behind)
        /// and the external data, taken while the copy's snapshot is held.
        func copy(timeout: TimeInterval, checkFreeSpace: Bool, progress: StepHandler?) throws {
            let externalSource = store.externalDataPath
            let hasExternal = FileSystem.kind(of: externalSource) == .directory
            copied = try ConsistentCopy.copy(store, to: copy.tempPath, options: .init(timeout: timeout, writeBehind: false), onSnapshot: { info in
                if checkFreeSpace {
                    try SpaceRequirement.require(.snapshot, info: info, extraBytes: hasExternal ? 2 * ExternalDataFolder.size(of: externalSource) : 0,
                                                 at: self.repository.path, purpose: "a snapshot of \(self.store.path)")
                }
                guard hasExternal else { return }
                let folder = try PendingFile(finalPath: (self.repository.snapshotsFolder as NSString).appendingPathComponent("\(self.id)-external"),
                                             directory: true, label: "snapshot.external")
                _ = try ExternalDataFolder.copy(from: externalSource, to: folder.tempPath, relativeRoot: "", label: "snapshot.external")
                self.external = folder
            }, progress: progress)
        }

        func check() throws { try packAndCheck() }

        func abandon() {
            copy.discard()
            external?.discard()
            archive.discard()
        }

        /// Checks the copy on one core while the other packs it (hashing the database and the
        /// archive on the way) and counts its entities.
        func packAndCheck() throws {
            let copyPath = copy.tempPath, archivePath = archive.tempPath, externalPath = external?.tempPath
            let databaseName = "store/\(store.name)", support = externalRoot, store = self.store
            let compression = self.compression, level = self.level
            let fd = open(archivePath, O_WRONLY | O_TRUNC | O_CLOEXEC)
            guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "opening \(archivePath)", side: .output) }
            defer { close(fd) }
            let (inspection, packed) = try ConsistentCopy.verify(copyPath, level: .quick, store: store) { () throws -> Packed in
                let writer = try ArchiveWriter(fd: fd, path: archivePath, compression: compression, level: level,
                                               threads: ProcessInfo.processInfo.activeProcessorCount)
                let (dbBytes, dbSHA) = try writer.addFile(copyPath, as: databaseName)
                var files: [Manifest.FileRecord] = []
                for name in ((externalPath.flatMap { try? FileManager.default.contentsOfDirectory(atPath: $0) }) ?? []).sorted() {
                    let (bytes, sha) = try writer.addFile(((externalPath ?? "") as NSString).appendingPathComponent(name), as: "\(support)/\(name)")
                    files.append(.init(path: "\(support)/\(name)", bytes: bytes, sha256: sha))
                }
                let facts = try ConsistentCopy.coreDataFacts(of: copyPath, store: store)
                return Packed(writer: writer, databaseBytes: dbBytes, databaseSHA: dbSHA, externalFiles: files, coreData: facts)
            }
            self.inspection = inspection
            self.packed = packed
            // The manifest goes last into the archive: it carries the database's hash, known only now.
            guard let copied else { throw StoreOpsError(.failure, "nothing was copied") }
            var record = Manifest.of(kind: "snapshot", copied: copied, database: databaseName, bytes: packed.databaseBytes,
                                     sha256: packed.databaseSHA, inspection: inspection,
                                     external: external == nil ? nil : (support, packed.externalFiles), coreData: packed.coreData,
                                     startedAt: startedAt,
                                     snapshot: .init(id: id, tags: tags, compression: compression, level: level, archive: nil))
            try packed.writer.addData(try JSON.encode(record), as: "manifest.json")
            let (archiveBytes, archiveSHA) = try packed.writer.finish()
            record.snapshot?.archive = .init(path: "snapshots/\(FileSystem.name(of: archive.finalPath))", bytes: archiveBytes, sha256: archiveSHA)
            self.record = record
        }

        /// The archive gets its final name, then the catalog entry lists it: the snapshot counts.
        func commit() throws {
            guard let record else { throw StoreOpsError(.failure, "nothing was packed") }
            try archive.commit()
            try repository.addToCatalog(record)
        }

        func result() throws -> Result {
            guard let record else { throw StoreOpsError(.failure, "the snapshot did not finish") }
            return Result(id: id, archive: archive.finalPath, record: record, removedStray: [])
        }
    }

    /// What packing produced; the writer stays open until the manifest is added.
    final class Packed: @unchecked Sendable {
        let writer: ArchiveWriter
        let databaseBytes: UInt64
        let databaseSHA: String
        let externalFiles: [Manifest.FileRecord]
        let coreData: Manifest.CoreDataFacts?
        init(writer: ArchiveWriter, databaseBytes: UInt64, databaseSHA: String, externalFiles: [Manifest.FileRecord],
             coreData: Manifest.CoreDataFacts?) {
            self.writer = writer
            self.databaseBytes = databaseBytes
            self.databaseSHA = databaseSHA
            self.externalFiles = externalFiles
            self.coreData = coreData
        }
    }
}
