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
        /// Wait for a restore, migration or purge of the store to finish instead of exiting 75.
        public var wait = false
        /// The caller (a scheduled job) holds the store's job lock.
        public var lockHeld = false

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
        /// How long each stage took (lock, preflight, copy, verify, install).
        public var stages: [StageTiming]
    }

    /// Copies `source` as described by `options`, walking the pipeline: lock (shared: backups run
    /// beside each other and beside snapshots, never beside a restore, migration or purge of the
    /// store), preflight (the output), copy, verify, install.
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
        let pipeline = Pipeline(operation: "backup", store: store, progress: progress)
        let work = Work(store: store, options: options, startedAt: Timestamp.now())
        var road = Road<Work>(lock: options.lockHeld ? .held : .shared, wait: options.wait, actName: "copy") { pipeline in
            try work.copy(pipeline)
            return work
        }
        road.preflight = { _ in try work.prepareOutput() }
        road.verify = { _, work in try work.verify() }
        road.commit = { _, work in try work.install() }
        road.commitName = "install"
        let walked = pipeline.walk(road)
        return try walked.get().result(stages: walked.stages)
    }

    /// One backup's files and facts, from the output's name to the installed copy.
    final class Work {
        let store: StoreFile
        let options: Options
        let startedAt: Date
        var output = Output(path: "", folder: "")
        var database: PendingFile?
        var support: PendingFile?
        var manifestFile: PendingFile?
        var externalFiles: [Manifest.FileRecord] = []
        var copied: ConsistentCopy.Copied?
        var manifest: Manifest?

        init(store: StoreFile, options: Options, startedAt: Date) {
            self.store = store
            self.options = options
            self.startedAt = startedAt
        }

        var manifestPath: String {
            (output.folder as NSString).appendingPathComponent("\((FileSystem.name(of: output.path) as NSString).deletingPathExtension).manifest.json")
        }
        var supportPath: String { StoreFile.supportPath(forDatabase: output.path) }

        /// The output's name is free (or may be replaced), and earlier runs' leftovers there are dealt with.
        func prepareOutput() throws {
            // Backups beside each other into one folder: the name is chosen, and the database's
            // temporary made, under an flock on the folder, so that a second run sees the first's
            // live temporary and takes the next name (both took the same name in the same second,
            // and one's finished backup was set aside as "unexpected" by the other's swap).
            let requested = FileSystem.absolute(options.output)
            let folder = FileSystem.kind(of: requested) == .directory ? requested : FileSystem.parent(of: requested)
            let lock = FolderLock(folder)
            defer { lock.release() }
            // An earlier backup here killed in its swap is finished first (its output, once in
            // place, is an existing file the name check must see; judged before it, the run was
            // refused 73 and the swap's record and folder were left).
            if FileSystem.kind(of: folder) == .directory {
                StoreSwap.recoverAll(in: folder)
                PendingFile.removeStale(in: folder)
            }
            output = try resolveOutput(options.output, store: store, at: startedAt, overwrite: options.overwrite)
            if output.folder != folder {
                StoreSwap.recoverAll(in: output.folder)
                PendingFile.removeStale(in: output.folder)
            }
            if let making = PendingFile.temporaries(of: output.path).first(where: { PendingFile.isRunning($0) })
                .flatMap({ PendingFile.temporaryOwner(FileSystem.name(of: $0)) }) {
                throw StoreOpsError(.busy, "another storectl run (pid \(making)) is making \(output.path)",
                                    hint: "wait for it to finish, or back up to another name (a folder as --output names each backup)")
            }
            if !options.overwrite {
                for path in [manifestPath, supportPath] where StoreSwap.lstatIdentity(path) != nil {
                    throw StoreOpsError(.cannotCreate, "\(path) already exists: the backup's \(path == manifestPath ? "manifest" : "external data") would go there",
                                        hint: "choose another --output, or pass --force to replace that backup")
                }
            }
            database = try PendingFile(finalPath: output.path, label: "backup.database")
        }

        /// The consistent copy, and the external data copied while its snapshot is held.
        func copy(_ pipeline: Pipeline) throws {
            let database = try self.database ?? PendingFile(finalPath: output.path, label: "backup.database")
            self.database = database
            let externalSource = store.externalDataPath
            let hasExternal = FileSystem.kind(of: externalSource) == .directory
            copied = try ConsistentCopy.copy(store, to: database.tempPath, options: .init(timeout: options.timeout), onSnapshot: { info in
                if self.options.checkFreeSpace {
                    try SpaceRequirement.require(.backup, info: info, extraBytes: hasExternal ? ExternalDataFolder.size(of: externalSource) : 0,
                                                 at: self.output.folder, purpose: "the backup of \(self.store.path)")
                }
                guard hasExternal else { return }
                // Copied now, while the snapshot is held: the files the snapshot refers to exist.
                let pending = try PendingFile(finalPath: self.supportPath, directory: true, label: "backup.support")
                self.externalFiles = try ExternalDataFolder.copy(
                    from: externalSource, to: (pending.tempPath as NSString).appendingPathComponent(StoreFile.externalDataFolderName),
                    relativeRoot: StoreFile.externalDataRelativePath(forDatabaseNamed: self.output.path), label: "backup.support")
                self.support = pending
            }, progress: { pipeline.step($0) })
        }

        /// The copy's integrity check (with its hash and entity counts alongside), then its manifest.
        func verify() throws {
            guard let database, let copied else { throw StoreOpsError(.failure, "nothing was copied") }
            let copyPath = database.tempPath
            let store = self.store
            let (inspection, (sha256, coreData)) = try ConsistentCopy.verify(copyPath, level: options.verify, store: store) {
                (try Hashing.sha256(ofFile: copyPath), try ConsistentCopy.coreDataFacts(of: copyPath, store: store))
            }
            manifest = Manifest.of(kind: "backup", copied: copied, database: FileSystem.name(of: output.path),
                                   bytes: FileSystem.size(of: copyPath) ?? 0, sha256: sha256, inspection: inspection,
                                   external: support == nil ? nil : (StoreFile.externalDataRelativePath(forDatabaseNamed: output.path), externalFiles),
                                   coreData: coreData, startedAt: startedAt)
        }

        /// Manifest, external data and database get their final names in one journaled swap.
        func install() throws {
            guard let database, let manifest else { throw StoreOpsError(.failure, "nothing to install") }
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
                                            keepOld: .discard, expectedSHA256: manifest.database.sha256))
        }

        func result(stages: [StageTiming]) throws -> Result {
            guard let manifest, let copied else { throw StoreOpsError(.failure, "the backup did not finish") }
            return Result(path: output.path, manifestPath: manifestPath, manifest: manifest, steps: copied.steps,
                          restarts: copied.restarts, busyRetries: copied.busyRetries, stages: stages)
        }
    }

    struct Output {
        var path: String
        var folder: String
    }

    /// Where the copy goes: a file path, or `<stem>-<UTC timestamp>.sqlite` inside an existing folder.
    static func resolveOutput(_ requested: String, store: StoreFile, at date: Date, overwrite: Bool) throws -> Output {
        let absolute = FileSystem.absolute(requested)
        var path = absolute
        if FileSystem.kind(of: absolute) == .directory {
            // Named to the second; a second backup in the same second takes the next free suffix
            // (-2, -3, …): free means no database, manifest, external data or swap record by that name.
            let stamp = "\(store.stem)-\(Timestamp.compact(date))"
            for attempt in 1...1000 {
                let name = attempt == 1 ? stamp : "\(stamp)-\(attempt)"
                path = (absolute as NSString).appendingPathComponent("\(name).sqlite")
                let manifest = (absolute as NSString).appendingPathComponent("\(name).manifest.json")
                // Also taken: a name another run is making now (its live temporary; `prepareOutput`).
                let taken = [path, manifest, StoreFile.supportPath(forDatabase: path), StoreSwap.journalPath(for: path)]
                    .contains { StoreSwap.lstatIdentity($0) != nil }
                    || PendingFile.temporaries(of: path).contains { PendingFile.isRunning($0) }
                if !taken { break }
            }
        }
        let folder = FileSystem.parent(of: path)
        try Validate.outputName(path)
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

/// An exclusive flock on a folder (its descriptor), held while a name in it is chosen and claimed;
/// none when the folder cannot be opened (the caller's own checks then say why).
final class FolderLock {
    private var fd: Int32

    init(_ folder: String) {
        fd = open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 {
            while flock(fd, LOCK_EX) != 0, errno == EINTR {}
        }
    }

    func release() {
        if fd >= 0 { close(fd) }
        fd = -1
    }

    deinit { release() }
}
