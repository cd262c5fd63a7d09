import Foundation

/// `storectl backup`: an online, consistent, verified, private copy of a live store, with its
/// manifest and Core Data external data beside it.
public enum Backup {
    public struct Options: Sendable {
        /// A file path, or an existing folder (the copy is then `<stem>-<UTC timestamp>.sqlite`).
        public var output: String
        public var verify: VerifyLevel = .quick
        /// Seconds without progress because the store is locked before giving up with exit 75.
        public var timeout: TimeInterval = 60
        /// Replace an existing output file instead of refusing (exit 73).
        public var overwrite = false
        /// Check free space before copying (tests turn it off to reach a real ENOSPC mid-copy).
        public var checkFreeSpace = true

        public init(output: String, verify: VerifyLevel = .quick, timeout: TimeInterval = 60, overwrite: Bool = false) {
            self.output = output
            self.verify = verify
            self.timeout = timeout
            self.overwrite = overwrite
        }
    }

    public struct Result: Sendable, Codable {
        public var path: String
        public var manifestPath: String
        public var manifest: Manifest
        /// Backup steps taken, restarts forced by writers (rollback mode), busy retries.
        public var steps: Int
        public var restarts: Int
        public var busyRetries: Int
    }

    /// Copies `source` as described by `options`.
    ///
    /// ```swift
    /// let result = try Backup.run(source: "/data/Tasks.sqlite", options: .init(output: "/backups"))
    /// print(result.path, result.manifest.database.sha256)
    /// ```
    ///
    /// Order of effects: the database, the external-data folder and the manifest are written under
    /// temporary names in the output folder, verified and fsynced; then one `StoreSwap` (a
    /// journaled set of renames) gives them their final names, the database last. A crash before
    /// the journal leaves only temp files (removed by the next run in that folder); a crash after
    /// it is finished by the next run (or `storectl recover`), so a database never carries its
    /// final name without its manifest and external data.
    ///
    /// - Throws: `StoreOpsError` with the documented exit status (66 missing source, 65 corrupt,
    ///   73 output not creatable, 74 disk full, 75 busy, 64 output equal to the source).
    public static func run(source: String, options: Options, progress: ProgressHandler? = nil) throws -> Result {
        try Validate.timeout(options.timeout)
        let store = try StoreFile(existing: source)
        try Recovery.prepare(store, lockHeld: false)
        let startedAt = Timestamp.now()
        let output = try resolveOutput(options.output, store: store, at: startedAt, overwrite: options.overwrite)
        StoreSwap.recoverAll(in: output.folder)
        PendingFile.removeStale(in: output.folder)
        let copyStem = (FileSystem.name(of: output.path) as NSString).deletingPathExtension
        let manifestPath = (output.folder as NSString).appendingPathComponent("\(copyStem).manifest.json")
        let supportPath = StoreFile.supportPath(forDatabase: output.path)
        if !options.overwrite {
            for path in [manifestPath, supportPath] where StoreSwap.lstatIdentity(path) != nil {
                throw StoreOpsError(.cannotCreate, "\(path) already exists: the backup's \(path == manifestPath ? "manifest" : "external data") would go there",
                                    hint: "choose another --output, or pass --force to replace that backup")
            }
        }

        let database = try PendingFile(finalPath: output.path, label: "backup.database")
        let externalSource = store.externalDataPath
        let hasExternal = FileSystem.kind(of: externalSource) == .directory
        let externalFolder = "\(FileSystem.name(of: supportPath))/\(StoreFile.externalDataFolderName)"
        var support: PendingFile?
        var externalFiles: [Manifest.FileRecord] = []

        let copyOptions = ConsistentCopy.Options(timeout: options.timeout)
        let copied = try ConsistentCopy.copy(store, to: database.tempPath, options: copyOptions, onSnapshot: { info in
            let externalBytes = hasExternal ? ExternalDataFolder.size(of: externalSource) : 0
            if options.checkFreeSpace {
                try SpaceRequirement.require(.backup, info: info, extraBytes: externalBytes,
                                             at: output.folder, purpose: "the backup of \(store.path)")
            }
            if hasExternal {
                // Copied now, while the snapshot is held: the files the snapshot refers to exist.
                let pending = try PendingFile(finalPath: supportPath, directory: true, label: "backup.support")
                externalFiles = try ExternalDataFolder.copy(
                    from: externalSource, to: (pending.tempPath as NSString).appendingPathComponent(StoreFile.externalDataFolderName),
                    relativeRoot: externalFolder, label: "backup.support")
                support = pending
            }
        }, progress: progress)
        let copyPath = database.tempPath
        let (inspection, (sha256, coreData)) = try ConsistentCopy.verify(copyPath, level: options.verify, store: store) {
            (try Hashing.sha256(ofFile: copyPath), try ConsistentCopy.coreDataFacts(of: copyPath, store: store))
        }

        let finishedAt = Timestamp.now()
        let manifest = Manifest(
            kind: "backup", tool: .init(), host: ProcessInfo.processInfo.hostName,
            source: copied.source,
            database: .init(path: FileSystem.name(of: output.path), bytes: FileSystem.size(of: copyPath) ?? 0, sha256: sha256,
                            pageSize: inspection.pageSize, pageCount: inspection.pageCount, journalMode: "delete"),
            externalData: hasExternal ? .init(folder: externalFolder, files: externalFiles,
                                              totalBytes: externalFiles.reduce(0) { $0 + $1.bytes }) : nil,
            startedAt: startedAt, finishedAt: finishedAt,
            durationSeconds: finishedAt.timeIntervalSince(startedAt),
            verify: inspection.verification, coreData: coreData)
        let manifestFile = try PendingFile(finalPath: manifestPath, label: "backup.manifest")
        try manifestFile.write(try JSON.encode(manifest))
        try manifestFile.sync()
        try support?.sync()
        try database.sync()
        var installs = [StoreSwap.Install(manifestFile, role: "manifest")]
        if let support { installs.append(.init(support, role: "support")) }
        installs.append(.init(database, role: "database"))
        let replacing: [(path: String, role: String)] = options.overwrite
            ? [(output.path, "database"), (manifestPath, "manifest"), (supportPath, "support")].filter { StoreSwap.lstatIdentity($0.path) != nil }
            : []
        _ = try StoreSwap.perform(.init(operation: "backup", target: output.path, installs: installs, replacing: replacing,
                                        keepOld: .discard, expectedSHA256: sha256))
        ConsistentCopy.logger.debug("fsynced and renamed", metadata: ["ms": "\(Int(Date().timeIntervalSince(startedAt) * 1000))"])
        return Result(path: output.path, manifestPath: manifestPath, manifest: manifest,
                      steps: copied.steps, restarts: copied.restarts, busyRetries: copied.busyRetries)
    }

    /// The longest output name: its manifest (`.manifest.json`) and swap record (`.storectl-swap.json`)
    /// must fit in 255 bytes too.
    static let maxOutputNameBytes = 200

    struct Output {
        var path: String
        var folder: String
    }

    /// Where the copy goes: a file path, or `<stem>-<UTC timestamp>.sqlite` inside an existing folder.
    static func resolveOutput(_ requested: String, store: StoreFile, at date: Date, overwrite: Bool) throws -> Output {
        let absolute = FileSystem.absolute(requested)
        var path = absolute
        if FileSystem.kind(of: absolute) == .directory {
            path = (absolute as NSString).appendingPathComponent("\(store.stem)-\(Timestamp.compact(date)).sqlite")
        }
        let folder = FileSystem.parent(of: path)
        let nameBytes = FileSystem.name(of: path).utf8.count
        guard nameBytes <= maxOutputNameBytes else {
            throw StoreOpsError(.cannotCreate, "the output name \(FileSystem.name(of: path).prefix(40))… is \(nameBytes) bytes long; storectl needs at most \(maxOutputNameBytes)",
                                hint: "the manifest and the journal beside it get longer names, and a file name may have at most 255 bytes: choose a shorter --output")
        }
        switch FileSystem.kind(of: folder) {
        case .directory: break
        case .missing:
            throw StoreOpsError(.cannotCreate, "the output folder \(folder) does not exist", hint: "create it first, or choose another --output")
        default:
            throw StoreOpsError(.cannotCreate, "\(folder) is not a folder", hint: "choose another --output")
        }
        guard access(folder, W_OK | X_OK) == 0 else {
            throw StoreOpsError(.cannotCreate, "the output folder \(folder) is not writable", hint: "choose another --output, or fix its permissions")
        }
        let sourceNames = [store.path, store.walPath, store.shmPath, store.journalPath]
        if sourceNames.contains(path) || sameFile(path, store.path) {
            throw StoreOpsError(.usage, "the output \(path) is the source store itself", hint: "write the backup to another file or folder")
        }
        switch FileSystem.kind(of: path) {
        case .missing: break
        case .file where overwrite: break
        case .file:
            throw StoreOpsError(.cannotCreate, "\(path) already exists", hint: "choose another name, or pass --force to replace it")
        default:
            throw StoreOpsError(.cannotCreate, "\(path) exists and is not a regular file")
        }
        return Output(path: path, folder: folder)
    }

    static func sameFile(_ a: String, _ b: String) -> Bool {
        guard let x = FileSystem.identity(of: a), let y = FileSystem.identity(of: b) else { return false }
        return x == y
    }
}
