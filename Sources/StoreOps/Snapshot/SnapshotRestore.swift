import Foundation
import Logging
import GRDBSQLite

/// `storectl snapshot restore`: puts a verified snapshot back, as a new file or in place of a store.
public enum SnapshotRestore {
    static let logger = Logger(label: "storectl.restore")
    public enum Target: Sendable, Equatable {
        /// A new file (refused if it exists).
        case file(String)
        /// In place of a store: a safety snapshot of it first, then an atomic swap.
        case inPlace(String)
    }

    public struct Options: Sendable {
        public var repository: String
        public var id: String
        public var target: Target
        /// In place: go ahead although another process has the store open, and, when the current
        /// store is too damaged for a safety snapshot, move it aside instead.
        public var force = false
        /// Wait for the repository's and the store's locks instead of exiting 75.
        public var wait = false
        public var timeout: TimeInterval = 60
        /// The caller (a migration rolling back) already holds the store's job lock.
        public var jobLockHeld = false
        /// How the current store is kept before it is replaced (in place).
        public var keepCurrent: KeepCurrent = .snapshot
        /// In place: restore although no store exists at the path (otherwise exit 66).
        public var create = false
        /// The swap also clears this migration's journal (a migration's rollback).
        public var clearsMigrationJournal = false
        /// Where an encrypted repository's password comes from.
        public var password: PasswordSource = .resolve(file: nil)
        /// A point in time instead of a snapshot id (`--at`): the newest point recorded by then.
        public var at: Date?
        /// With `at`: the store whose points (its path as `replicate` followed it; needed when the
        /// repository has points of more than one store).
        public var pointStore: String?
        public var pointHost: String?
        /// Run `quick_check` on the restored database even when the snapshot's source passed it
        /// when the snapshot was taken (`--check`); every page is checked against its content id either way.
        public var check = false
        /// In place, beside a running app: the snapshot written into the store through SQLite's
        /// backup API under its write lock (`LiveRestore`), not its files replaced.
        public var live = false
        /// The snapshot is the store's own by its migration history or journal (a rollback's): not
        /// compared with the store's path and host (a container recreated under a new host name,
        /// a store folder moved, must still roll back).
        var ownSnapshot = false
        /// The store's write lock, taken by the caller (migrate's rollback, from its own run's
        /// lock): held until the swap is done and the replaced files' other openers are gone, as
        /// an in-place restore without `--force` does with the lock it takes itself.
        var gate: WriteGate?

        public enum KeepCurrent: Sendable, Equatable {
            /// A safety snapshot (tag pre-restore) in the repository.
            case snapshot
            /// Renamed aside with this suffix (`<store><suffix>`, -wal and -shm too): instant, for a
            /// migration's rollback, whose failed state is only evidence.
            case moveAside(suffix: String)
        }

        public init(repository: String, id: String, target: Target, force: Bool = false, wait: Bool = false) {
            self.repository = repository
            self.id = id
            self.target = target
            self.force = force
            self.wait = wait
        }
    }

    /// What reading a point took: the digests read instead of the segments they span
    /// (`PointDigest`), the segments read, and the commits replayed from them.
    public struct PointReads: Sendable, Codable, Equatable {
        /// The milestone the point was read from (`PointMilestone`: its snapshot id), or nil:
        /// from its chain's base.
        public var milestone: String?
        public var digests = 0
        public var segments = 0
        public var commits = 0
    }

    public struct Result: Sendable, Codable {
        public var id: String
        public var restoredTo: String
        /// In place: the `pre-restore` snapshot of the store as it was.
        public var safetySnapshot: String?
        /// That snapshot was made from this point of `storectl replicate` (the store's state then),
        /// not by reading the store (`PointSnapshot`).
        public var safetySnapshotPoint: String?
        /// In place: where the previous store's files were kept (a damaged store with --force, a
        /// migration's failed state, sidecars found without their store).
        public var movedAside: [String]
        /// Files found in the way that belonged to no store storectl knew (a stale `-wal` beside
        /// the target of `--to`), kept as `<store>.unexpected-<time>-<name>`.
        public var keptUnexpected: [String] = []
        /// In place: the old store's -wal/-shm/-journal, discarded once the restored store was in
        /// place (they are in the safety snapshot).
        public var removedSidecars: [String]
        public var externalFiles: Int
        /// A point of a store with external data restored before any snapshot after it was
        /// taken: files the app wrote after the chain's base are not held (what to do about it).
        public var externalFilesNote: String?
        /// The journal mode the restored store has (in place: the mode the store had).
        public var journalMode: String
        /// How the database's structure was checked, beside every page against its content id:
        /// `quick_check of the restored database`, or (a snapshot restored page for page, its
        /// source checked when it was taken) `quick_check when the snapshot was taken`.
        public var databaseCheck = ""
        /// Every page of the database was checked against the snapshot's content ids, and its
        /// integrity checked, before the swap; the file in place is that file (same inode).
        public var verified: Bool
        /// An interrupted swap of this path that was finished first.
        public var recovered: StoreSwap.Outcome?
        public var record: Manifest
        /// `--at`: the point restored (`<chain>@<n>`) and the time it was the store's state.
        public var point: String?
        public var pointTime: Date?
        /// `--at` fell where retention thinned the points (one a minute kept, or only a chain's
        /// base): the store may have had commits after `pointTime` and by the time asked.
        public var pointThinned: Bool?
        /// `--at`: what reading the point took.
        public var pointReads: PointReads?
        /// In place: how long each stage took (lock, preflight, snapshot, swap).
        public var stages: [StageTiming] = []
        /// In place: a process that still had the replaced store open when the restore let its
        /// lock go (after a minute, or a signal): its commits from then on go to the replaced
        /// files; restart it.
        public var replacedStillOpenBy: Int32?
        /// That process opened the store during the swap and had not read from it yet: its next
        /// statement would read the replaced file with the restored store's -wal (restart it now).
        public var replacedStillOpenDuringSwap: Bool?
        /// `--live`: written into the store through SQLite (no file replaced), what the -wal
        /// holds after it, and whether a passive checkpoint moved every frame into the file.
        public var throughSQLite: Bool?
        public var walBytes: UInt64?
        public var checkpointed: Bool?
        /// `--live`: seconds the store's write lock was held (the app's commits waited at most
        /// this long), from before the safety snapshot to the commit.
        public var writeLockSeconds: Double?
        /// `--live`: a signal (SIGINT, SIGTERM) that came once the backup's last step had begun,
        /// which commits: the restore was finished and read back, not stopped.
        public var signalAfterCommit: String?
    }

    /// Verifies the snapshot while unpacking it beside the target, checks the database, then
    /// swaps it into place as one journaled, recoverable transaction (`StoreSwap`).
    ///
    /// - Throws: 66 unknown id or (in place) no store at the path, 65 damaged or hostile snapshot
    ///   (nothing changed), 73 target not creatable or existing, 74 no room, 75 store open by
    ///   another process or locked.
    public static func run(_ options: Options, progress: ProgressHandler? = nil) throws -> Result {
        try Validate.timeout(options.timeout)
        switch options.target {
        case .file(let path):
            // Before the repository is opened (no password asked, no lock taken for a name that cannot be made).
            try Validate.outputName(FileSystem.absolute(path), option: "--to")
            let pipeline = Pipeline(operation: "snapshot restore", progress: progress)
            var road = PlannedRoad<PointRestore.Target, Result>(
                lock: .none, wait: options.wait, actName: "restore",
                preflight: { pipeline in try PointRestore.target(options, in: try pipeline.repository) },
                act: { pipeline, target in
                    let repository = try pipeline.repository
                    var result = try target.namingDigests(repository) {
                        try restoreToNewFile(target.record, from: repository, path: FileSystem.absolute(path),
                                             overlay: target.overlay, check: options.check, progress: progress)
                    }
                    result.point = target.point
                    result.pointTime = target.time
                    result.pointReads = target.reads
                    if target.thinned { result.pointThinned = true }
                    return result
                })
            road.repository = .init(options.repository, password: options.password, exclusive: false)
            road.repository?.readsOnly = true   // a restore to a new file writes nothing there
            let walked = pipeline.walk(road)
            var result = try walked.get()
            result.stages = walked.stages
            return result
        case .inPlace(let path):
            let inPlace = InPlace(store: StoreFile(unchecked: path), options: options)
            inPlace.progress = progress
            return try inPlace.walk(progress: progress)
        }
    }

    /// A restore in place as a stage of another road (migrate's rollback), not a road of its own:
    /// that road holds the store's lock and the repository (`hold`); the snapshot is staged and
    /// checked, the current store kept as `options.keepCurrent` says, and the swap made.
    static func inPlace(_ options: Options, in hold: RepositoryHold, progress: ProgressHandler? = nil) throws -> Result {
        guard case .inPlace(let path) = options.target else { throw StoreOpsError(.failure, "a restore in place needs its store") }
        let restore = InPlace(store: StoreFile(unchecked: path), options: options)
        restore.progress = progress
        restore.hold = hold
        try restore.check()
        _ = try restore.keepCurrent()
        try restore.swap()
        return try restore.result()
    }

    /// Unpacked and checked, not yet in place.
    struct Staged {
        var database: PendingFile
        var support: PendingFile?
        var externalFiles: Int
        var externalFilesNote: String?
        var journalMode: String
        var databaseCheck: String
    }

    /// A TRUNCATE checkpoint of the store at `path` (its committed frames written into the file,
    /// the -wal emptied), waiting at most 200 ms for another connection; nil once the -wal is empty, else why not.
    static func releaseWAL(of path: String) -> String? {
        // Opened read-write without SQLITE_OPEN_CREATE (never a database made where none is).
        var db: OpaquePointer?
        guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK, let db else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open it"
            sqlite3_close(db)
            return message
        }
        defer { sqlite3_close(db) }
        sqlite3_busy_timeout(db, 200)
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(db, "PRAGMA wal_checkpoint(TRUNCATE)", -1, &statement, nil) == SQLITE_OK else {
            return String(cString: sqlite3_errmsg(db))
        }
        defer { sqlite3_finalize(statement) }
        let rc = sqlite3_step(statement)
        if rc & 0xff == SQLITE_FULL { return "SQLite needs room to write the -wal's frames into the database file first" }
        guard rc == SQLITE_ROW else { return String(cString: sqlite3_errmsg(db)) }
        if sqlite3_column_int(statement, 0) != 0 { return "another connection is in the way (a process that has the store open, or this run's own write lock)" }
        return (FileSystem.size(of: path + "-wal") ?? 0) == 0 ? nil : "the -wal is not empty after the checkpoint"
    }

    /// Unpacks and checks the snapshot beside `finalPath`, then puts the database in `journalMode`
    /// ("wal" or "delete") and fsyncs everything.
    ///
    /// Every page is checked against its content id. A snapshot restored page for page whose
    /// source passed `quick_check` (or `integrity_check`) when it was taken, in the read
    /// transaction its pages came from, is then those same bytes, and is not checked again unless
    /// `check` says so; a point (pages the app committed since its base, never checked) and a
    /// chain's base recorded unchecked are.
    static func stage(_ snapshot: PagedSnapshotRecord, from repository: PagedRepository, at finalPath: String, journalMode: String,
                      overlay: PointOverlay? = nil, check: Bool = false, progress: ProgressHandler? = nil) throws -> Staged {
        let record = overlay?.manifest(of: snapshot) ?? snapshot.manifest
        let folder = FileSystem.parent(of: finalPath)
        switch FileSystem.kind(of: folder) {
        case .directory: break
        case .missing: throw StoreOpsError(.cannotCreate, "the folder \(folder) does not exist", hint: "create it first (storectl makes no folders), or restore --to a file in another folder")
        default: throw StoreOpsError(.cannotCreate, "\(folder) is not a folder")
        }
        guard access(folder, W_OK | X_OK) == 0 else {
            throw StoreOpsError(.cannotCreate, "the folder \(folder) is not writable")
        }
        let external = record.externalData?.totalBytes ?? 0
        let needed = record.database.bytes + external + SpaceRequirement.margin(record.database.bytes)
        do {
            try SpaceRequirement.require(needed, at: folder, purpose: "the restore", hint: "free space on that volume first")
        } catch let error as StoreOpsError where error.kind == .noSpace && FileSystem.kind(of: finalPath) == .file
                    && StoreFile.isWALHeader((try? FileProbe.shared.header(of: finalPath)) ?? []) && (FileSystem.size(of: finalPath + "-wal") ?? 0) > 0 {
            // A restore in place over a WAL store whose -wal holds the space: a migration that
            // failed on a full disk leaves its pages there, and its rollback (this restore) could
            // not start (a trial: 16 of 20 MB). The frames are SQLite's to release: a TRUNCATE
            // checkpoint, if no connection is in the way; then looked at again. Only over a WAL
            // store there: a -wal beside a path with no database (--to, --create) is no store's.
            let wal = FileSystem.size(of: finalPath + "-wal") ?? 0
            if let why = releaseWAL(of: finalPath) {
                throw StoreOpsError(.noSpace, error.message + "; \(finalPath)-wal holds \(Format.bytes(wal)) of it (frames of a failed transaction stay there), which storectl could not release: \(why)",
                                    hint: "with nothing else open on the store, `sqlite3 \(finalPath) 'PRAGMA wal_checkpoint(TRUNCATE)'` releases it (or free space on that volume), then run this again")
            }
            progress?(.note("released \(Format.bytes(wal)) of \(finalPath)-wal (a TRUNCATE checkpoint) to make room for the restore"))
            try SpaceRequirement.require(needed, at: folder, purpose: "the restore", hint: "free space on that volume first")
        }
        StoreSwap.recoverAll(in: folder)
        PendingFile.removeStale(besideStore: StoreFile(unchecked: finalPath))
        let database = try PendingFile(finalPath: finalPath, label: "restore.database")
        var support: PendingFile?
        var externalFolder: String?
        if record.externalData != nil {
            let supportPath = StoreFile.supportPath(forDatabase: finalPath)
            if FileSystem.kind(of: supportPath) == .directory {
                // A support folder there already (a restore in place): only its `_EXTERNAL_DATA`
                // is the snapshot's; whatever else the app keeps in it is not storectl's, is in no
                // snapshot, and stays (the whole folder was replaced, and those files lost).
                let pending = try PendingFile(finalPath: (supportPath as NSString).appendingPathComponent(StoreFile.externalDataFolderName),
                                              directory: true, label: "restore.support")
                externalFolder = pending.tempPath
                support = pending
            } else {
                let pending = try PendingFile(finalPath: supportPath, directory: true, label: "restore.support")
                let inner = (pending.tempPath as NSString).appendingPathComponent(StoreFile.externalDataFolderName)
                try FileSystem.makeDirectory(inner, point: "restore.support.external-folder")
                externalFolder = inner
                support = pending
            }
        }
        let started = Date()
        let checkedWhenTaken = overlay == nil && snapshot.manifest.verify.ok && snapshot.manifest.verify.level != .none
        let level: VerifyLevel = checkedWhenTaken && !check ? .none : .quick
        try PagedExtraction.run(snapshot, repository: repository, into: .init(database: database.tempPath, externalFolder: externalFolder),
                                level: level, overlay: overlay, fileHash: false, progress: progress)
        logger.debug("unpacked and checked", metadata: ["ms": "\(Int(Date().timeIntervalSince(started) * 1000))"])
        if journalMode == "wal" { try switchToWAL(database.tempPath) }
        progress?(.stage("sync"))
        try database.sync()
        try support?.sync()
        var note: String?
        if let overlay, !overlay.tracked, overlay.filesFrom == nil, snapshot.manifest.externalData != nil {
            note = "external-data files the app wrote after the chain's base (\(Timestamp.iso(snapshot.manifest.startedAt))) are not in the repository "
                + "until a snapshot of the store is taken after this point; the restored store has the base's (`storectl snapshot create`, then restore again)"
        }
        let taken = snapshot.manifest.verify.level == .full ? "integrity_check" : "quick_check"
        return Staged(database: database, support: support, externalFiles: record.externalData?.files.count ?? 0,
                      externalFilesNote: note, journalMode: journalMode,
                      databaseCheck: level == .none ? "\(taken) when the snapshot was taken" : "quick_check of the restored database")
    }

    /// Puts a staged (closed, unused) database back in WAL mode: the header's read/write versions
    /// become 2 (https://sqlite.org/fileformat2.html#file_format_version_numbers). Closing the only
    /// connection checkpoints and removes the `-wal` and `-shm` it made.
    static func switchToWAL(_ path: String) throws {
        let queue = try StoreConnection.open(path, access: .readWrite, busyTimeout: 5, side: .output, label: "storectl.restore-wal")
        let mode = try queue.inDatabase { db -> String? in
            do { return try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL") } catch {
                throw StoreOpsError.sqlite(error, doing: "switching the restored database to WAL mode", side: .output)
            }
        }
        do { try queue.close() } catch { throw StoreOpsError.sqlite(error, doing: "closing \(path)", side: .output) }
        guard mode?.lowercased() == "wal" else {
            throw StoreOpsError(.failure, "could not switch the restored database to WAL mode (got \(mode ?? "nothing"))")
        }
        for suffix in ["-wal", "-shm"] { FileSystem.remove(path + suffix, point: "restore.database.wal-cleanup") }
    }

    /// `folder/name`, or `folder/<stem>-2.<ext>`, `-3`… whichever does not exist (a hint's
    /// example named a file that did).
    static func freeExample(in folder: String, name: String) -> String {
        let stem = (name as NSString).deletingPathExtension, ext = (name as NSString).pathExtension
        for n in 1...1000 {
            let candidate = (folder as NSString).appendingPathComponent(n == 1 ? name : "\(stem)-\(n)" + (ext.isEmpty ? "" : ".\(ext)"))
            if FileSystem.kind(of: candidate) == .missing { return candidate }
        }
        return (folder as NSString).appendingPathComponent(name)
    }

    static func restoreToNewFile(_ snapshot: PagedSnapshotRecord, from repository: PagedRepository, path: String,
                                 overlay: PointOverlay? = nil, check: Bool = false, progress: ProgressHandler? = nil) throws -> Result {
        let record = overlay?.manifest(of: snapshot) ?? snapshot.manifest
        let recovered = try StoreSwap.recover(target: path)
        switch FileSystem.kind(of: path) {
        case .missing: break
        case .directory:
            // --to names the file made, not a folder to make it in (a new user's trial got the --in-place hint).
            let name = FileSystem.name(of: record.source.path)
            throw StoreOpsError(.cannotCreate, "\(path) is a folder: --to names the store file the restore makes",
                                hint: "name a file in it that does not exist yet, e.g. --to \(Self.freeExample(in: path, name: name.isEmpty ? "restored.sqlite" : name))")
        default:
            throw StoreOpsError(.cannotCreate, "\(path) already exists",
                                hint: "restore to a new path, or use --in-place to replace a store (with a safety snapshot)")
        }
        let support = StoreFile(unchecked: path).supportPath
        if record.externalData != nil, FileSystem.kind(of: support) != .missing {
            throw StoreOpsError(.cannotCreate, "\(support) already exists: the restored store's external data would go there",
                                hint: "restore to another name, or move that folder away first")
        }
        // `--to` writes the snapshot's database byte for byte (journal_mode=delete).
        let staged = try stage(snapshot, from: repository, at: path, journalMode: "delete", overlay: overlay, check: check, progress: progress)
        let installs = (staged.support.map { [StoreSwap.Install($0, role: "support")] } ?? []) + [StoreSwap.Install(staged.database, role: "database")]
        let outcome = try StoreSwap.perform(.init(operation: "restore", target: path, installs: installs, replacing: [], keepOld: .discard))
        var result = Result(id: record.snapshot?.id ?? "", restoredTo: path, safetySnapshot: nil, movedAside: [], removedSidecars: [],
                            externalFiles: staged.externalFiles, externalFilesNote: staged.externalFilesNote, journalMode: "delete",
                            databaseCheck: staged.databaseCheck, verified: true, recovered: recovered, record: record)
        result.keptUnexpected = outcome.intruders
        return result
    }

    /// A restore in place, walking the pipeline: lock (the store's, exclusive; then the
    /// repository's), preflight (the store may be replaced; the snapshot unpacked and checked beside
    /// it: a damaged or hostile archive is refused before anything else), snapshot (the safety
    /// snapshot of the current store), swap (one journaled `StoreSwap`).
    final class InPlace {
        let store: StoreFile
        let options: Options
        // A run that ends before its swap (refused, an error, a signal) stops the watch here.
        deinit { quiet?.stop() }
        var hold: RepositoryHold?
        var target: PointRestore.Target?
        var record: Manifest?
        var staged: Staged?
        var exists = false
        var keep: StoreSwap.KeepOld = .discard
        var safety: String?
        var safetyPoint: String?
        var outcome: StoreSwap.Outcome?
        var recovered: StoreSwap.Outcome?
        var progress: ProgressHandler?
        /// The store's write lock, from before the current store is kept until the swap is done.
        var gate: WriteGate?
        /// A process still on the replaced files when the restore let the lock go (`swap`).
        var stillOpenBy: Int32?
        /// It opened the replaced file after the fence went up and holds no lock on it.
        var stillOpenFenced = false
        /// The descriptors of the store's database file kept open without a lock from the restore's
        /// start on (`QuietDescriptors`). Any other descriptor without a lock, at the swap's look or
        /// after the renames, may be a connection on its way to its first read. (Exempted by pid,
        /// a per-write app whose connection held a lock at the start and whose next one sat
        /// between its open and its lock at the look lost a commit to a paired file in a loaded
        /// test run.)
        var quiet: QuietDescriptors?
        /// `--live`: the staged copy's pages (checked against the store before the safety
        /// snapshot), and what writing them through SQLite did (nil until it has).
        var livePages = 0
        var liveOutcome: LiveRestore.Outcome?

        init(store: StoreFile, options: Options) {
            self.store = store
            self.options = options
        }

        func walk(progress: ProgressHandler?) throws -> Result {
            defer {
                gate?.release()
                hold?.release()
            }
            // No store, nothing to finish (a swap record would put one back) and none asked for:
            // refused before the lock stage, which would leave its lock file beside the missing store.
            if !options.create, FileSystem.kind(of: store.path) == .missing, !StoreSwap.pending(target: store.path) {
                throw StoreOpsError(.noInput, "no store at \(store.path) to restore in place of; nothing was changed",
                                    hint: options.live ? "check the path; --live writes into an existing store (to make one there, restore without --live, with --create)"
                                                       : "check the path, or pass --create to restore a store there")
            }
            let pipeline = Pipeline(operation: options.clearsMigrationJournal ? "rollback" : "snapshot restore", store: store, progress: progress)
            var road = Road<InPlace>(lock: options.jobLockHeld ? .held : .exclusive, wait: options.wait, actName: options.live ? "write" : "swap") { _ in
                try self.swap()
                return self
            }
            // The store alone, then the repository shared (the lock stage's fixed order).
            road.repository = .init(options.repository, password: options.password, exclusive: false)
            road.preflight = { pipeline in
                self.hold = pipeline.hold
                try self.check()
            }
            road.snapshot = { _, _ in try self.keepCurrent() }
            let walked = pipeline.walk(road)
            var result = try walked.get().result()
            result.stages = walked.stages
            return result
        }

        /// The store may be replaced, and the snapshot is unpacked and checked beside it.
        func check() throws {
            recovered = nil
            guard let hold else { throw StoreOpsError(.failure, "the repository was not opened") }
            let target = try PointRestore.target(options, in: hold.repository)
            self.target = target
            let snapshot = target.record
            let record = target.overlay?.manifest(of: snapshot) ?? snapshot.manifest
            self.record = record
            exists = FileSystem.kind(of: store.path) == .file
            // Who has the file open now, long before the swap (`OpenFence`).
            if exists { quiet = QuietDescriptors(store: store) }
            if !exists, FileSystem.kind(of: store.path) != .missing {
                throw StoreOpsError(.noInput, "\(store.path) is not a regular file", hint: "pass the store's database file")
            }
            if exists, options.at == nil, !options.ownSnapshot { try checkSameStore(record) }
            guard exists || options.create else {
                throw StoreOpsError(.noInput, "no store at \(store.path) to restore in place of; nothing was changed",
                                    hint: options.live ? "check the path; --live writes into an existing store (to make one there, restore without --live, with --create)"
                                                       : "check the path, or pass --create to restore a store there")
            }
            // With --wait, the look that ends the wait is the one that lets the restore go on (a
            // second look after it refused when the app opened the store between the two).
            let until = Date().addingTimeInterval(options.timeout)
            if options.live {
                guard exists else {
                    throw StoreOpsError(.usage, "--live restores into an existing store; there is none at \(store.path)", hint: "restore without --live (with --create)")
                }
                try LiveRestore.preflight(store: store, record: record)
            }
            while exists, !options.force, !options.live, let pid = try LockState.otherUser(of: store) {
                guard options.wait, !LockState.isFollower(pid), Date() < until else {
                    // Named where --live's own preflight would let it through.
                    let live = (try? LiveRestore.preflight(store: store, record: record)) != nil
                    throw StoreOpsError(.busy, "\(store.path) is open by another process (pid \(pid))"
                                        + (options.wait ? " after \(Format.duration(options.timeout)) of waiting for it to close the store" : "") + "; nothing was changed",
                                        hint: "stop the app first" + (live ? "; or pass --live to write the snapshot into the store through SQLite beside the app (its connections stay open)" : "")
                                            + "; or pass --force (the app must then open the store again: what it commits to the replaced store before it does is lost)")
                }
                LockState.waitUntilClosed(store, until: until) { [progress] in progress?(.note(LockState.waitingNote($0, until: until))) }
                if let signal = ProcessSignals.received { throw Pipeline.Stop(reason: .signal(signal), unchanged: true) }
            }
            // Through SQLite (--live), the backup API makes the pages WAL pages itself.
            let journalMode = options.live ? "delete" : exists ? (StoreFile.isWALHeader(try FileProbe.shared.header(of: store.path)) ? "wal" : "delete")
                                     : (record.source.journalMode == "wal" ? "wal" : "delete")
            let staged = try target.namingDigests(hold.repository) {
                try stage(snapshot, from: hold.repository, at: store.path, journalMode: journalMode, overlay: target.overlay,
                          check: options.check, progress: progress)
            }
            if exists, !options.live {
                // The app's user must be able to open its restored store: same owner and mode as before.
                try FileSystem.copyOwnership(from: store.path, to: staged.database.tempPath)
                if let support = staged.support { try FileSystem.copyOwnership(from: store.path, to: support.tempPath) }
            }
            if options.live { livePages = try LiveRestore.stagedPageCount(staged.database.tempPath, against: store) }
            self.staged = staged
        }

        /// A snapshot (or a point named by its label) of another store, or of this path on another
        /// host, would replace this store's data with that store's: refused (64) unless `--store`
        /// (and `--host`) name the snapshot's store, as a point restored in place must be named.
        /// `--at` is checked when its point is chosen (`PointRestore.storeKey`); with no store
        /// here (`--create`) nothing is replaced.
        func checkSameStore(_ record: Manifest) throws {
            let here = ProcessInfo.processInfo.hostName
            let source = record.source.path
            let samePath = source.isExactly(store.path) || FileSystem.absolute(source).isExactly(store.path)
            // (A record without a host, which storectl never writes, is judged by its path alone.)
            let sameHost = record.host.isEmpty || record.host.isExactly(here)
            if samePath, sameHost { return }
            if let named = options.pointStore, [source, FileSystem.absolute(source)].contains(where: { $0.isExactly(StoreFile(unchecked: named).path) }),
               sameHost ? options.pointHost == nil || options.pointHost == record.host : options.pointHost == record.host { return }
            // The full id (a prefix typed is named as the snapshot it found).
            let full: String? = record.snapshot.map(\.id).flatMap { id in !options.id.isEmpty && id.hasPrefix(options.id) ? id : nil }
            let what = full ?? (options.id.isEmpty ? "the snapshot" : options.id)
            let of = (sameHost ? source : "\(source) on host \(record.host)")
                + (options.pointStore.map { " (--store \($0)\(options.pointHost.map { " --host \($0)" } ?? "") names another)" } ?? "")
            throw StoreOpsError.refused("\(what) is of \(of), not of \(store.path)\(samePath ? " on this host (\(here))" : ""): restored in place it would replace this store's data with that store's; nothing was changed",
                                hint: "to do that on purpose (the store moved, or this machine replaces that one), name the snapshot's store: storectl snapshot restore ... --in-place \(store.path) --store \(source)"
                                    + (sameHost ? "" : " --host \(record.host)") + "; or restore it --to a new file")
        }

        /// How the current store is kept: a safety snapshot, or renamed aside. Returns the snapshot's id.
        func keepCurrent() throws -> String {
            // No commit from here to the swap: what the app was told is committed is in the safety
            // snapshot (or the store moved aside), or comes after the swap, in the restored store.
            // Only when the current store's files are discarded after the swap (a safety snapshot
            // holds them): moved aside (a migration's rollback keeps its failed state so), a commit
            // made meanwhile stays in the kept files, and a rollback must not fail for a lock
            // (it renamed aside without one before). With --force, a store that cannot be locked
            // (damaged, busy, not writable by this user) is restored without it, as before.
            if let held = options.gate { gate = held }
            if options.live, exists, gate == nil, case .snapshot = options.keepCurrent, let early = try safetyBeforeTheLock() { return early }
            if exists, gate == nil, case .snapshot = options.keepCurrent {
                do { gate = try lockStore() } catch let error as StoreOpsError {
                    guard options.force else { throw error }
                    SnapshotRestore.logger.warning("the store's write lock could not be taken; restored without it (--force)", metadata: ["store": "\(store.path)", "error": "\(error.message)"])
                }
            }
            switch options.keepCurrent {
            case .moveAside(let suffix):
                keep = .rename(suffix: suffix)
            case .snapshot where exists:
                guard let hold else { break }
                do {
                    let created = try safetySnapshot(in: hold, fromPoint: true)
                    safety = created.id
                    safetyPoint = created.point
                } catch let error as StoreOpsError where error.status == .badData && !options.live {
                    guard options.force else {
                        throw StoreOpsError(.badData, "the current store cannot be snapshotted (\(error.message)); nothing was changed",
                                            hint: "pass --force to restore anyway: the damaged store is then moved aside, not deleted")
                    }
                    keep = .rename(suffix: ".damaged-\(Timestamp.compact(Date()))")
                } catch var error as StoreOpsError where !error.message.contains("nothing was changed") {
                    // Said as the safety snapshot's, and that the store is as it was (a server gone
                    // away during it said only that the repository was unreachable).
                    error.message = "the safety snapshot of \(store.path) failed: \(error.message); nothing was changed"
                    throw error
                }
            case .snapshot:
                // No store, but perhaps sidecars an earlier failure left: all that is left of something, kept.
                keep = .rename(suffix: ".orphaned-\(Timestamp.compact(Date()))")
            }
            return safety ?? ""
        }

        /// `--live`: the safety snapshot taken before the store's write lock, so that the app's
        /// commits wait for the backup's transaction alone, not for the snapshot too. It holds
        /// the store as it is under the lock when its record's source state (the wal-index's
        /// commit counter, salts and last frame, the file's identity and times, the external
        /// data: the same at the start and end of its read) is still the store's once the lock
        /// is taken: no commit came between. Otherwise (an app committing all the time) it is
        /// taken back and the caller takes one under the lock, as without `--live`. Nil then, or
        /// when it could not be made (the caller's own attempt says why).
        func safetyBeforeTheLock() throws -> String? {
            guard let hold else { return nil }
            let started = Date()
            func takeBack() {
                if let kept = forgetSafety() {
                    SnapshotRestore.logger.warning("a safety snapshot could not be taken back; it stays in the repository (tag pre-restore)", metadata: ["snapshot": "\(kept)"])
                }
            }
            let created = try safetySnapshot(in: hold, fromPoint: false)
            safety = created.id
            let state: SourceFingerprint?
            do { state = try hold.repository.record(created.id).source } catch {
                takeBack()
                throw error
            }
            do { gate = try lockStore() } catch {
                takeBack()
                throw error
            }
            if let state, state.settled, SourceFingerprint.take(store) == state {
                SnapshotRestore.logger.debug("safety snapshot taken before the write lock: nothing committed since",
                                             metadata: ["snapshot": "\(created.id)", "ms": "\(Int(Date().timeIntervalSince(started) * 1000))"])
                return created.id
            }
            SnapshotRestore.logger.debug("the store changed after the safety snapshot taken before the write lock: taken again under it", metadata: ["snapshot": "\(created.id)"])
            takeBack()
            return nil
        }

        /// The store's write lock (`WriteGate`), a damaged store's failure said as such.
        func lockStore() throws -> WriteGate {
            do { return try WriteGate(path: store.path, busyMilliseconds: Int32(min(options.timeout, 3600) * 1000)) } catch let error as StoreOpsError where error.status == .badData && !options.force {
                throw StoreOpsError(.badData, "the current store cannot be locked (\(error.message)); nothing was changed",
                                    hint: options.live ? "stop the app and restore without --live, with --force: the damaged store is then moved aside, not deleted"
                                                       : "pass --force to restore anyway: the damaged store is then moved aside, not deleted")
            }
        }

        /// The `pre-restore` snapshot of the store as it is (from `replicate`'s newest point when
        /// `fromPoint` and one stands for it).
        func safetySnapshot(in hold: RepositoryHold, fromPoint: Bool) throws -> SnapshotCreate.Result {
            do {
                return try SnapshotCreate.create(store: try StoreFile(existing: store.path), in: hold, tags: ["pre-restore"], level: nil, timeout: options.timeout,
                                                 checkFreeSpace: true, fromPoint: fromPoint, writeLockHeld: gate != nil,
                                                 progress: progress.map { handler in { handler(.step($0)) } })
            } catch let error as StoreOpsError where error.status == .badData && options.live {
                throw StoreOpsError(.badData, "the current store cannot be snapshotted (\(error.message)); nothing was changed",
                                    hint: "stop the app and restore without --live, with --force: the damaged store is then moved aside, not deleted")
            }
        }

        /// Takes back the safety snapshot of an attempt that changed nothing (the store holds all it
        /// holds); the error when it could not be removed (it then stays).
        @discardableResult
        func forgetSafety() -> String? {
            guard let id = safety, let hold else { return nil }
            do {
                try hold.repository.backend.remove(PagedSnapshotRecord.key(id), point: "restore.safety.forget")
                safety = nil
                safetyPoint = nil
                return nil
            } catch {
                return "\(id): \((error as? StoreOpsError)?.message ?? "\(error)")"
            }
        }

        /// One journaled swap of the database, its sidecars and the external data; with `--live`,
        /// the snapshot written into the store through SQLite instead.
        func swap() throws {
            guard let staged, record != nil else { throw StoreOpsError(.failure, "nothing was staged") }
            if options.live {
                quiet?.stop()
                return try writeThroughSQLite(staged)
            }
            var replacing: [(path: String, role: String)] = [(store.walPath, "wal"), (store.shmPath, "shm"), (store.journalPath, "journal")]
            if exists { replacing.append((store.path, "database")) }
            // Only the external data of a support folder there (`stage`): the rest of it is the
            // app's, in no snapshot, and stays.
            replacing.append(FileSystem.kind(of: store.supportPath) == .directory ? (store.externalDataPath, "support") : (store.supportPath, "support"))
            // Opened meanwhile (a process that opens the store for each write, waiting for the
            // gate to commit): swapped now, it would commit to the replaced files once the gate
            // is gone. Nothing is changed, so the safety snapshot is taken back: the store holds
            // all it holds and more (the next attempt takes its own), and `rollback --wait` beside
            // such an app would otherwise leave one per attempt (a trial counted 54).
            // With --wait: the lock and the snapshot let go, until the store is closed again, then
            // both taken anew (the staged snapshot stays good), and looked at again: at most the
            // restore's timeout. (The look that ends the wait is the one that lets the swap go: a
            // second look after it made a --wait restore fail with 75 when the app opened the
            // store between the two.) Its own deadline: staging a large snapshot may take longer
            // than `timeout` itself.
            // The fence goes up before the look, so that nobody the look did not see can start
            // on the file it replaces (`OpenFence`); its descriptor is closed after the gate's.
            let fence = exists && gate != nil ? OpenFence(path: store.path) : nil
            defer {
                gate?.release()
                gate = nil
                fence?.close()
                quiet?.stop()
            }
            // The descriptors other processes had open on the file when the fence went up: the
            // wait after the renames is for one opened after that (see `fenced()`).
            var openedBefore = Set<OpenFence.Descriptor>()
            let walMode = exists && StoreFile.isWALHeader((try? FileProbe.shared.header(of: store.path)) ?? [])
            func blocker() throws -> Int32? {
                guard let fence else { return try LockState.otherUser(of: store) }
                // A connection kept taking its SHARED lock for 2 s: someone is on the file
                // (0: a process this user cannot see).
                if !fence.raise() { return try LockState.otherUser(of: store) ?? 0 }
                if let pid = try LockState.otherUser(of: store) { return pid }
                // WAL mode: a connection between its SHARED lock and its first look at the -shm
                // holds no lock there yet (it would open the -wal and -shm by name after the renames).
                if StoreFile.isWALHeader(try FileProbe.shared.header(of: store.path)), let pid = fence.sharedHolder() { return pid }
                // A descriptor with no lock that was not a quiet one when the restore began (every
                // lock holder is refused above): a connection on its way to its first read.
                let open = fence.otherDescriptors()
                openedBefore = Set(open)
                let quietNow = quiet?.settled() ?? []
                return open.first { !quietNow.contains($0) }?.pid
            }
            var deadline: Date?
            while exists, !options.force, let pid = try blocker() {
                fence?.lift()
                guard options.wait, options.gate == nil, !LockState.isFollower(pid) else {
                    let kept = forgetSafety().map { " (its safety snapshot stays: it could not be removed: \($0))" } ?? ""
                    throw StoreOpsError(.busy, "\(store.path) was opened by another process\(pid > 0 ? " (pid \(pid))" : "") while the restore ran; nothing was changed" + kept,
                                        hint: "stop the app first, or pass --force (the app must then open the store again: what it commits to the replaced store before it does is lost)")
                }
                let unremoved = forgetSafety()
                gate?.release()
                gate = nil
                let until = deadline ?? Date().addingTimeInterval(options.timeout)
                deadline = until
                LockState.waitUntilClosed(store, until: until) { [progress] in progress?(.note(LockState.waitingNote($0, until: until))) }
                // Neither the lock nor a safety snapshot is held now: never on to the swap from here.
                // (A safety snapshot that could not be removed stays: then "nothing was changed" is not said.)
                if let signal = ProcessSignals.received { throw Pipeline.Stop(reason: .signal(signal), unchanged: unremoved == nil) }
                guard Date() < until else {
                    throw StoreOpsError(.busy, "\(store.path) was opened by another process while the restore ran, and kept open for the \(Format.duration(options.timeout)) it waited; nothing was changed",
                                        hint: "stop the app first, or pass --force (the app must then open the store again: what it commits to the replaced store before it does is lost)")
                }
                _ = try keepCurrent()
            }
            // The replaced store's -shm, held open across the swap: a process that opens the store
            // between that check and the swap's renames (the fsyncs take milliseconds) waits for
            // the gate on the old files, and commits there once it is gone. Every connection holds
            // a read lock on the -shm's DMS byte while open: the gate is held until none but ours
            // is left on the old one (a client that opens the store for each write gives up when
            // its busy timeout passes: an error it sees, not a commit lost), or `timeout` passes.
            // With --force too (an app that opens the store for each write lost the commit it
            // was waiting to make in every such restore, 6 of 6 in a trial), but for at most 10 s
            // when the operator forced it past an app that keeps the store open: such an app
            // never lets go, and the warning below says to restart it.
            // --force: not looked at, but fenced all the same.
            let oldShm = gate != nil && exists ? open(store.shmPath, O_RDONLY | O_CLOEXEC) : -1
            if options.force, let fence {
                _ = quiet?.settled()
                fence.raise()
                openedBefore = Set(fence.otherDescriptors())
            }
            let waitLimit = options.force && options.gate == nil ? min(options.timeout, 10) : options.timeout
            // Closing any descriptor of a file drops every fcntl lock this process holds on it:
            // the gate's (its write lock, its DMS byte) goes first, on every path.
            defer {
                gate?.release()
                gate = nil
                if oldShm >= 0 { close(oldShm) }
            }
            // Looked at on the store's path: stopped before the renames put another file there.
            quiet?.stop()
            var installs: [StoreSwap.Install] = []
            if let support = staged.support { installs.append(.init(support, role: "support")) }
            installs.append(.init(staged.database, role: "database"))
            outcome = try StoreSwap.perform(.init(
                operation: options.clearsMigrationJournal ? "rollback" : "restore", target: store.path, installs: installs,
                replacing: replacing.filter { StoreSwap.lstatIdentity($0.path) != nil }, keepOld: keep,
                followups: options.clearsMigrationJournal ? [.removeMigrationJournal] : []))
            if oldShm >= 0 || fence != nil {
                let until = Date().addingTimeInterval(waitLimit)
                // A `storectl replicate` follower only reads (it reopens the store within a moment):
                // it is not waited for. Nor is anyone once the fence could not be raised (--force
                // past a connection that kept taking its lock): the file is theirs then.
                func other() -> Int32? {
                    if oldShm >= 0, let pid = FileProbe.conflictingHolder(fd: oldShm, type: Int32(F_WRLCK), start: LockState.walDMSByte, length: 1),
                       !LockState.isFollower(pid) {
                        return pid
                    }
                    return fenced()
                }
                // A connection on the replaced file that has not read from it yet: let go, its
                // first read opens the -wal (and, alone in its process, the -shm) by name, the
                // restored store's, and pairs them with the replaced file (frames built on its
                // pages). Fenced, it cannot read: SQLITE_BUSY until it gives up or the fence goes.
                // - A descriptor opened since the fence went up, in any process (one that has a
                //   connection on the file takes its SHARED lock without asking the kernel, past
                //   the fence, and shares that connection's -shm, but opens the -wal by name).
                // - WAL mode: a descriptor that was not a quiet one when the restore began, in a
                //   process with no lock on the replaced file now (a connection holds its locks
                //   from its first read until it closes: what has none has not read; with --force
                //   no look refused it).
                // A rollback journal: only the first (an idle connection holds no lock there).
                func fenced() -> Int32? {
                    guard let fence, fence.raised else { return nil }
                    let open = fence.otherDescriptors()
                    if let fresh = open.first(where: { !openedBefore.contains($0) }) { return fresh.pid }
                    guard walMode else { return nil }
                    let quietNow = quiet?.current ?? []
                    let unknown = open.filter { !quietNow.contains($0) }
                    guard !unknown.isEmpty else { return nil }
                    let connected = fence.connected(shm: oldShm)
                    return unknown.first { !connected.contains($0.pid) }?.pid
                }
                var holder = other()
                // Not cut short by SIGTERM: let go now, the lock would let such a client's commit
                // land in the replaced files, lost with them (a trial lost one in each of 6 rollbacks
                // stopped so). The wait ends when it gives up (its busy timeout) or at `timeout`.
                if holder != nil {
                    SnapshotRestore.logger.notice("waiting for another process to let go of the replaced store (its commit would be lost)",
                                                  metadata: ["store": "\(store.path)", "pid": "\(holder ?? 0)", "timeout": "\(waitLimit)"])
                }
                while holder != nil, Date() < until {
                    usleep(10_000)
                    holder = other()
                }
                // A fenced connection is waited for the whole --timeout even with --force (whose
                // 10 s are for an app that keeps the store open), whatever ended the wait above.
                let fencedUntil = Date().addingTimeInterval(max(0, options.timeout - waitLimit))
                var pairing = fenced()
                while pairing != nil, Date() < fencedUntil {
                    usleep(10_000)
                    pairing = fenced()
                }
                if let still = pairing ?? holder {
                    stillOpenBy = still
                    stillOpenFenced = pairing != nil
                    SnapshotRestore.logger.warning(stillOpenFenced
                                                   ? "a process opened the store during the swap and still has the replaced file open: restart it now (its next statement would read the replaced file with the restored store's -wal)"
                                                   : "a process still has the replaced store open after the restore; its commits from now on go to the replaced files: restart it",
                                                   metadata: ["store": "\(store.path)", "pid": "\(still)"])
                }
            }
        }

        /// `--live`: the backup API into the store, under the lock the safety snapshot was taken
        /// under. A commit that slips in while the lock passes from the gate to the backup (the
        /// backup's destination may have no transaction open when it starts) is not in that
        /// safety snapshot: nothing is written then, and it starts again with a new one.
        func writeThroughSQLite(_ staged: Staged) throws {
            // A caller's lock (migrate's rollback) cannot be taken again after its hand-off.
            guard options.gate == nil else { throw StoreOpsError(.failure, "a restore through SQLite takes the store's write lock itself") }
            var unremoved: [String] = []
            for attempt in 1...3 {
                guard let gate else {
                    throw StoreOpsError(.failure, "the restore does not hold \(store.path)'s write lock")
                }
                var committed = false
                do {
                    liveOutcome = try LiveRestore.apply(staged: staged.database.tempPath, pageCount: livePages, into: store, gate: gate, safety: safety,
                                                        committed: &committed, progress: progress)
                    self.gate = nil
                    staged.database.discard()
                    return
                } catch let error where !committed && !(error is LiveRestore.Interfered) {
                    // Nothing was written: the store holds all it holds, so its safety snapshot is
                    // taken back (as a swap refused at the last moment does).
                    self.gate = nil
                    let kept = forgetSafety().map { " (its safety snapshot stays: it could not be removed: \($0))" } ?? ""
                    guard var said = error as? StoreOpsError else { throw error }
                    said.message += "; nothing was changed" + kept
                    throw said
                } catch is LiveRestore.Interfered {
                    self.gate = nil
                    if let kept = forgetSafety() { unremoved.append(kept) }
                    SnapshotRestore.logger.notice("a commit landed while the lock passed to SQLite's backup; nothing was written, trying again with a new safety snapshot",
                                                  metadata: ["store": "\(store.path)", "attempt": "\(attempt)"])
                    guard attempt < 3 else {
                        throw StoreOpsError(.busy, "the app committed in the instant the restore handed its lock to SQLite's backup, three times; nothing was changed"
                                            + (unremoved.isEmpty ? "" : " (safety snapshots that could not be removed stay: \(unremoved.joined(separator: "; ")))"),
                                            hint: "try again")
                    }
                    do { _ = try keepCurrent() } catch var error as StoreOpsError {
                        error.message += "; nothing was changed" + (unremoved.isEmpty ? "" : " (safety snapshots that could not be removed stay: \(unremoved.joined(separator: "; ")))")
                        throw error
                    }
                    if !unremoved.isEmpty {
                        SnapshotRestore.logger.warning("an earlier attempt's safety snapshot could not be taken back; it stays in the repository (tag pre-restore)",
                                                       metadata: ["snapshots": "\(unremoved.joined(separator: "; "))"])
                    }
                }
            }
        }

        func result() throws -> Result {
            if let live = liveOutcome, let staged, let record {
                var result = Result(id: record.snapshot?.id ?? "", restoredTo: store.path, safetySnapshot: safety, safetySnapshotPoint: safetyPoint,
                                    movedAside: [], removedSidecars: [], externalFiles: 0, externalFilesNote: nil, journalMode: "wal",
                                    databaseCheck: staged.databaseCheck, verified: true, recovered: recovered, record: record,
                                    point: target?.point, pointTime: target?.time, pointReads: target?.reads)
                if target?.thinned == true { result.pointThinned = true }
                result.throughSQLite = true
                result.walBytes = live.walBytes
                result.checkpointed = live.checkpointed
                result.writeLockSeconds = (live.lockHeld * 1000).rounded() / 1000
                result.signalAfterCommit = ProcessSignals.received.map(ProcessSignals.name)
                return result
            }
            guard let outcome, let staged, let record else { throw StoreOpsError(.failure, "the restore did not finish") }
            let sidecars = Set([store.walPath, store.shmPath, store.journalPath])
            var result = Result(id: record.snapshot?.id ?? "", restoredTo: store.path, safetySnapshot: safety, safetySnapshotPoint: safetyPoint, movedAside: outcome.kept,
                                removedSidecars: keep == .discard ? outcome.replaced.filter { sidecars.contains($0) } : [],
                                externalFiles: staged.externalFiles, externalFilesNote: staged.externalFilesNote, journalMode: staged.journalMode,
                                databaseCheck: staged.databaseCheck, verified: true, recovered: recovered, record: record,
                                point: target?.point, pointTime: target?.time, pointReads: target?.reads)
            if target?.thinned == true { result.pointThinned = true }
            result.replacedStillOpenBy = stillOpenBy
            if stillOpenBy != nil { result.replacedStillOpenDuringSwap = stillOpenFenced }
            result.keptUnexpected = outcome.intruders
            return result
        }
    }
}
