import Foundation

/// `storectl snapshot export ID --output FILE.tar.zst`: a snapshot of either format as one
/// self-contained archive in format 1's layout (`manifest.json`, `store/<name>`, the external
/// data under `store/.<stem>_SUPPORT/_EXTERNAL_DATA/`), which bsdtar and `tar --zstd` read and
/// which needs neither storectl nor the repository's password. The snapshot is reassembled and
/// checked first (every page against its id, the database's quick_check), beside the output;
/// the archive is written to a temp name, fsynced and renamed (mode 0600).
public enum SnapshotExport {
    public struct Options: Sendable {
        public var repository: String
        public var id: String
        public var output: String
        public var password: PasswordSource

        public init(repository: String, id: String, output: String, password: PasswordSource = .resolve(file: nil)) {
            self.repository = repository
            self.id = id
            self.output = output
            self.password = password
        }
    }

    public struct Result: Sendable, Codable {
        public var id: String
        public var output: String
        public var bytes: UInt64
        public var sha256: String
        public var databaseSHA256: String
    }

    /// - Throws: 66 unknown snapshot, 65 damaged, 73 output exists or cannot be made, 74 no room,
    ///   64 an output name not ending in `.tar.zst`.
    public static func run(_ options: Options, progress: ProgressHandler? = nil) throws -> Result {
        let output = FileSystem.absolute(options.output)
        let folder = try checkOutput(output)
        let opened = try OpenedRepository.open(options.repository, password: options.password)
        let hold = try RepositoryHold.take(opened, operation: "snapshot export", exclusive: false, wait: false)
        defer { hold.release() }
        let entry = try opened.entry(options.id)
        var manifest = entry.manifest
        let external = manifest.externalData?.totalBytes ?? 0
        let needed = 2 * (manifest.database.bytes + external) + SpaceRequirement.margin(manifest.database.bytes)
        try SpaceRequirement.require(needed, at: folder, purpose: "the export of snapshot \(entry.id)")
        PendingFile.removeStale(in: folder, prefix: FileSystem.name(of: output))
        let database = try PendingFile(finalPath: output + ".sqlite", label: "export.database")
        defer { database.discard() }
        var files: PendingFile?
        defer { files?.discard() }
        if manifest.externalData != nil { files = try PendingFile(finalPath: output + ".external", directory: true, label: "export.external") }
        let sha = try entry.extract(into: .init(database: database.tempPath, externalFolder: files?.tempPath), level: .quick, progress: progress)
        progress?(.stage("archive (zstd)"))

        let archive = try PendingFile(finalPath: output, label: "export.archive")
        var committed = false
        defer { if !committed { archive.discard() } }
        let fd = open(archive.tempPath, O_WRONLY | O_TRUNC | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "opening \(archive.tempPath)", side: .output) }
        defer { close(fd) }
        let writer = try ArchiveWriter(fd: fd, path: archive.tempPath, compression: .zstd, level: 3,
                                       threads: ProcessInfo.processInfo.activeProcessorCount)
        let databaseName = "store/\(FileSystem.name(of: manifest.source.path))"
        let archiving = Date(), total = manifest.database.bytes
        let (_, written) = try writer.addFile(database.tempPath, as: databaseName, progress: progress.map { handler in { done in
            handler(.step(ProgressUpdate(phase: "archive (zstd)", done: done, total: total, unit: .bytes, bytes: done, startedAt: archiving)))
        } })
        guard written == sha else { throw StoreOpsError(.ioError, "the reassembled database changed while it was archived") }
        if let files, let records = manifest.externalData?.files {
            for record in records {
                _ = try writer.addFile((files.tempPath as NSString).appendingPathComponent(FileSystem.name(of: record.path)), as: record.path)
            }
        }
        // The manifest as a format-1 archive carries it: the database's hash, no archive record.
        manifest.database.path = databaseName
        manifest.database.sha256 = sha
        manifest.snapshot?.archive = nil
        manifest.snapshot?.format = nil
        manifest.snapshot?.parent = nil
        manifest.snapshot?.addedBytes = nil
        try writer.addData(try JSON.encode(manifest), as: "manifest.json")
        let (bytes, archiveSHA) = try writer.finish()
        try archive.commit()
        committed = true
        return Result(id: entry.id, output: output, bytes: bytes, sha256: archiveSHA, databaseSHA256: sha)
    }
    /// The archive's name is checked before the repository is opened: 64 for a name that is not
    /// `*.tar.zst`, 73 when it exists or its folder is missing or read-only. Returns the folder.
    static func checkOutput(_ output: String) throws -> String {
        guard output.hasSuffix(".tar.zst") else {
            throw StoreOpsError(.usage, "--output \(output): the archive is zstd-compressed tar; name it *.tar.zst")
        }
        guard FileSystem.kind(of: output) == .missing else {
            throw StoreOpsError(.cannotCreate, "\(output) already exists", hint: "choose another --output, or remove it first")
        }
        let folder = FileSystem.parent(of: output)
        guard FileSystem.kind(of: folder) == .directory else { throw StoreOpsError(.cannotCreate, "the folder \(folder) does not exist") }
        try Validate.outputName(output)
        try Validate.writableFolder(folder)
        return folder
    }
}
