import Foundation

/// `storectl snapshot export ID --output FILE.tar.zst`: a snapshot as one self-contained archive
/// (`manifest.json`, `store/<name>`, the external
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
        /// How long each stage took (lock, preflight, export: reassemble and archive, commit).
        public var stages: [StageTiming] = []
    }

    /// What the preflight readies: the snapshot, and the temporary files beside the output.
    final class Staging {
        let snapshot: PagedSnapshotRecord
        let output: String
        let database: PendingFile
        let files: PendingFile?
        let archive: PendingFile
        init(snapshot: PagedSnapshotRecord, output: String, database: PendingFile, files: PendingFile?, archive: PendingFile) {
            (self.snapshot, self.output, self.database, self.files, self.archive) = (snapshot, output, database, files, archive)
        }
        /// Removes the scratch copies (always) and the unfinished archive (unless it was committed).
        func discard(archiveToo: Bool) {
            database.discard()
            files?.discard()
            if archiveToo { archive.discard() }
        }
    }

    /// - Throws: 66 unknown snapshot, 65 damaged, 73 output exists or cannot be made, 74 no room,
    ///   64 an output name not ending in `.tar.zst`.
    public static func run(_ options: Options, progress: ProgressHandler? = nil) throws -> Result {
        let output = FileSystem.absolute(options.output)
        let folder = try checkOutput(output)
        let pipeline = Pipeline(operation: "snapshot export", progress: progress)
        var road = PlannedRoad<Staging, (Staging, Result)>(
            lock: .none, actName: "export",
            preflight: { pipeline in try stage(options.id, of: try pipeline.repository, output: output, folder: folder) },
            act: { pipeline, staging in
                defer { staging.discard(archiveToo: false) }
                return (staging, try write(staging, from: try pipeline.repository, progress: progress))
            })
        road.repository = .init(options.repository, password: options.password, exclusive: false)
        road.repository?.readsOnly = true
        road.commit = { _, written in try written.0.archive.commit() }
        road.abandon = { staging in staging.discard(archiveToo: true) }
        let walked = pipeline.walk(road)
        var result = try walked.get().1
        result.stages = walked.stages
        return result
    }

    /// The snapshot, room for it twice beside the output, and the temporary files.
    static func stage(_ id: String, of repository: PagedRepository, output: String, folder: String) throws -> Staging {
        let snapshot = try repository.record(id)
        let manifest = snapshot.manifest
        let external = manifest.externalData?.totalBytes ?? 0
        let needed = 2 * (manifest.database.bytes + external) + SpaceRequirement.margin(manifest.database.bytes)
        try SpaceRequirement.require(needed, at: folder, purpose: "the export of snapshot \(snapshot.id)")
        PendingFile.removeStale(in: folder, prefix: FileSystem.name(of: output))
        let database = try PendingFile(finalPath: output + ".sqlite", label: "export.database")
        let files = manifest.externalData == nil ? nil : try PendingFile(finalPath: output + ".external", directory: true, label: "export.external")
        return Staging(snapshot: snapshot, output: output, database: database, files: files,
                       archive: try PendingFile(finalPath: output, label: "export.archive"))
    }

    /// Reassembles the snapshot (every page checked) and writes the archive under its temporary name.
    static func write(_ staging: Staging, from repository: PagedRepository, progress: ProgressHandler?) throws -> Result {
        var manifest = staging.snapshot.manifest
        let sha = try PagedExtraction.run(staging.snapshot, repository: repository,
                                          into: .init(database: staging.database.tempPath, externalFolder: staging.files?.tempPath),
                                          level: .quick, progress: progress) ?? ""
        progress?(.stage("archive (zstd)"))
        let fd = open(staging.archive.tempPath, O_WRONLY | O_TRUNC | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "opening \(staging.archive.tempPath)", side: .output) }
        defer { close(fd) }
        let writer = try ArchiveWriter(fd: fd, path: staging.archive.tempPath, compression: .zstd, level: 3,
                                       threads: ProcessInfo.processInfo.activeProcessorCount)
        let databaseName = "store/\(FileSystem.name(of: manifest.source.path))"
        let archiving = Date(), total = manifest.database.bytes
        let (_, written) = try writer.addFile(staging.database.tempPath, as: databaseName, progress: progress.map { handler in { done in
            handler(.step(ProgressUpdate(phase: "archive (zstd)", done: done, total: total, unit: .bytes, bytes: done, startedAt: archiving)))
        } })
        guard written == sha else { throw StoreOpsError(.ioError, "the reassembled database changed while it was archived") }
        if let files = staging.files, let records = manifest.externalData?.files {
            for record in records {
                _ = try writer.addFile((files.tempPath as NSString).appendingPathComponent(FileSystem.name(of: record.path)), as: record.path)
            }
        }
        // The manifest the archive carries: the database's hash, nothing of the repository.
        manifest.database.path = databaseName
        manifest.database.sha256 = sha
        manifest.snapshot?.archive = nil
        manifest.snapshot?.format = nil
        manifest.snapshot?.parent = nil
        manifest.snapshot?.addedBytes = nil
        try writer.addData(try JSON.encode(manifest), as: "manifest.json")
        let (bytes, archiveSHA) = try writer.finish()
        return Result(id: staging.snapshot.id, output: staging.output, bytes: bytes, sha256: archiveSHA, databaseSHA256: sha)
    }

    /// The archive's name is checked before the repository is opened: 64 for a name that is not
    /// `*.tar.zst`, 73 when it exists or its folder is missing or read-only. Returns the folder.
    static func checkOutput(_ output: String) throws -> String {
        if FileSystem.kind(of: output) == .directory {
            throw StoreOpsError.refused("--output \(output) is a folder: the archive is one file", hint: "name the file in it: --output \((output as NSString).appendingPathComponent("SNAPSHOT.tar.zst"))")
        }
        guard output.hasSuffix(".tar.zst") else {
            throw StoreOpsError(.usage, "--output \(output): the archive is zstd-compressed tar; name it *.tar.zst")
        }
        guard FileSystem.kind(of: output) == .missing else {
            throw StoreOpsError(.cannotCreate, "\(output) already exists", hint: "choose another --output, or remove it first")
        }
        let folder = FileSystem.parent(of: output)
        guard FileSystem.kind(of: folder) == .directory else { throw StoreOpsError(.cannotCreate, "the folder \(folder) does not exist", hint: "create it first, or export to a file in another folder") }
        try Validate.outputName(output)
        try Validate.writableFolder(folder)
        return folder
    }
}
