import Foundation

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

        public init(repository: String, tags: [String] = [], compression: Compression = .zstd, level: Int? = nil,
                    timeout: TimeInterval = 60, wait: Bool = false) {
            self.repository = repository
            self.tags = tags
            self.compression = compression
            self.level = level
            self.timeout = timeout
            self.wait = wait
        }
    }

    public struct Result: Sendable, Codable {
        public var id: String
        public var archive: String
        public var record: Manifest
        /// Temp files and unlisted archives of interrupted runs that were removed first.
        public var removedStray: [String]
    }

    /// Creates a snapshot of `store` in the repository (made if the folder is missing or empty).
    ///
    /// ```swift
    /// let result = try SnapshotCreate.run(store: "/srv/app/Tasks.sqlite", options: .init(repository: "/snapshots", tags: ["nightly"]))
    /// ```
    ///
    /// - Throws: 75 when another writer holds the repository, 74 when there is no room, 65/66 for
    ///   a bad store, 64 for a bad tag or level.
    public static func run(store path: String, options: Options, progress: ProgressHandler? = nil) throws -> Result {
        let level = try options.compression.validatedLevel(options.level)
        try Validate.timeout(options.timeout)
        try validate(tags: options.tags)
        let store = try StoreFile(existing: path)
        try Recovery.prepare(store, lockHeld: false)
        let (repository, created) = try SnapshotRepository.openOrCreate(options.repository)
        let lock = try repository.lockForWriting(job: "snapshot create", wait: options.wait)
        defer { lock.release() }
        let stray = repository.removeStray()
        do {
            var result = try create(store: store, in: repository, tags: options.tags, compression: options.compression, level: level,
                                    timeout: options.timeout, checkFreeSpace: options.checkFreeSpace, progress: progress)
            result.removedStray = stray
            return result
        } catch {
            // A repository made for this snapshot is not left behind empty when the snapshot fails.
            if created { repository.removeIfEmpty() }
            throw error
        }
    }

    static func validate(tags: [String]) throws {
        for tag in tags {
            let allowed = !tag.isEmpty && tag.count <= 64 && tag.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "._:-".contains($0)) }
            if !allowed {
                throw StoreOpsError(.usage, "tag \"\(tag)\": use 1 to 64 letters, digits, '.', '_', ':' or '-'")
            }
        }
    }

    /// Creates the snapshot; the caller holds the repository's lock.
    static func create(store: StoreFile, in repository: SnapshotRepository, tags: [String], compression: Compression, level: Int?,
                       timeout: TimeInterval, checkFreeSpace: Bool, progress: ProgressHandler?) throws -> Result {
        let startedAt = Timestamp.now()
        let id = SnapshotID.make(at: startedAt)
        let archiveName = "\(id).\(compression.fileExtension)"
        let archive = try PendingFile(finalPath: (repository.snapshotsFolder as NSString).appendingPathComponent(archiveName), label: "snapshot.archive")
        let copy = try PendingFile(finalPath: (repository.snapshotsFolder as NSString).appendingPathComponent("\(id).sqlite"), label: "snapshot.copy")
        defer { copy.discard() }
        let externalSource = store.externalDataPath
        let hasExternal = FileSystem.kind(of: externalSource) == .directory
        var external: PendingFile?
        defer { external?.discard() }
        let support = "store/\(FileSystem.name(of: store.supportPath))/\(StoreFile.externalDataFolderName)"

        // The copy is scratch, read once while packing and deleted: no write-behind for it.
        let copied = try ConsistentCopy.copy(store, to: copy.tempPath, options: .init(timeout: timeout, writeBehind: false), onSnapshot: { info in
            if checkFreeSpace {
                try SpaceRequirement.require(.snapshot, info: info, extraBytes: hasExternal ? 2 * ExternalDataFolder.size(of: externalSource) : 0,
                                             at: repository.path, purpose: "a snapshot of \(store.path)")
            }
            if hasExternal {
                // Taken while the snapshot is held, like the pages.
                let folder = try PendingFile(finalPath: (repository.snapshotsFolder as NSString).appendingPathComponent("\(id)-external"), directory: true,
                                             label: "snapshot.external")
                _ = try ExternalDataFolder.copy(from: externalSource, to: folder.tempPath, relativeRoot: "", label: "snapshot.external")
                external = folder
            }
        }, progress: progress)

        // Check the copy on one core while the other packs it (hashing the database and the
        // archive on the way) and counts its entities.
        let copyPath = copy.tempPath
        let archivePath = archive.tempPath
        let externalPath = external?.tempPath
        let databaseName = "store/\(store.name)"
        let fd = open(archivePath, O_WRONLY | O_TRUNC | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "opening \(archivePath)", side: .output) }
        defer { close(fd) }
        let (inspection, packed) = try ConsistentCopy.verify(copyPath, level: .quick, store: store) { () throws -> Packed in
            let writer = try ArchiveWriter(fd: fd, path: archivePath, compression: compression, level: level,
                                           threads: ProcessInfo.processInfo.activeProcessorCount)
            let (dbBytes, dbSHA) = try writer.addFile(copyPath, as: databaseName)
            var files: [Manifest.FileRecord] = []
            if let externalPath {
                for name in ((try? FileManager.default.contentsOfDirectory(atPath: externalPath)) ?? []).sorted() {
                    let (bytes, sha) = try writer.addFile((externalPath as NSString).appendingPathComponent(name), as: "\(support)/\(name)")
                    files.append(.init(path: "\(support)/\(name)", bytes: bytes, sha256: sha))
                }
            }
            let facts = try ConsistentCopy.coreDataFacts(of: copyPath, store: store)
            return Packed(writer: writer, databaseBytes: dbBytes, databaseSHA: dbSHA, externalFiles: files, coreData: facts)
        }

        let finishedAt = Timestamp.now()
        var record = Manifest(
            kind: "snapshot", tool: .init(), host: ProcessInfo.processInfo.hostName,
            source: copied.source,
            database: .init(path: databaseName, bytes: packed.databaseBytes, sha256: packed.databaseSHA,
                            pageSize: inspection.pageSize, pageCount: inspection.pageCount, journalMode: "delete"),
            externalData: hasExternal ? .init(folder: support, files: packed.externalFiles,
                                              totalBytes: packed.externalFiles.reduce(0) { $0 + $1.bytes }) : nil,
            startedAt: startedAt, finishedAt: finishedAt, durationSeconds: finishedAt.timeIntervalSince(startedAt),
            verify: inspection.verification, coreData: packed.coreData,
            snapshot: .init(id: id, tags: tags, compression: compression, level: level, archive: nil))
        // The manifest goes last into the archive: it carries the database's hash, known only now.
        try packed.writer.addData(try JSON.encode(record), as: "manifest.json")
        let (archiveBytes, archiveSHA) = try packed.writer.finish()
        record.snapshot?.archive = .init(path: "snapshots/\(archiveName)", bytes: archiveBytes, sha256: archiveSHA)

        try archive.commit()
        try repository.addToCatalog(record)
        return Result(id: id, archive: archive.finalPath, record: record, removedStray: [])
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
