import Foundation

/// Replaces the files of a store (or of a backup) as one recoverable transaction.
///
/// A store is several names that no single rename can swap together: the database, its `-wal`,
/// `-shm` and `-journal`, Core Data's `.<stem>_SUPPORT/` folder (and, for a backup, its
/// manifest). A swap installs prepared files under those names and sets the old ones aside:
///
/// 1. The new files are staged under temporary names in the same folder, fsynced and verified
///    (by the caller, before `perform`).
/// 2. An intent record, `<database>.storectl-swap.json`, is written, fsynced and flocked. It lists
///    every step with the inode of the file it moves, and a private folder for the old files,
///    `.<name>.storectl-swap-<id>/`.
/// 3. Old sidecars and folders are renamed into that folder; an old file that a new one replaces
///    is hard-linked there first, so its name is never missing: the rename of the new file over it
///    is atomic. The database is installed last.
/// 4. The folders are fsynced; the old files are discarded (they were snapshotted) or renamed to
///    their kept names (`<store><suffix>`, `-wal` beside it); the record is removed.
///
/// Nothing old is deleted before every new file has its final name. Every step is idempotent and
/// identified by inode, so `recover` can finish a swap that a crash interrupted at any point:
/// it rolls forward while every new file still exists (they were durable before the record was),
/// and back otherwise. The record's flock tells a live swap from a dead one. A `-wal` found beside
/// the old database is always kept with it (in the aside folder), never removed while it may hold
/// commits the main file lacks.
public enum StoreSwap {
    /// What becomes of the files a swap replaces.
    public enum KeepOld: Codable, Sendable, Equatable {
        /// Deleted once the new files are in place (the caller has a verified copy of them).
        case discard
        /// Renamed to `<store><suffix>` (with its `-wal`, `-shm`, support folder) for a person to look at.
        case rename(suffix: String)
    }

    /// Work that belongs to the swap and is finished by whoever finishes it.
    public enum Followup: String, Codable, Sendable {
        /// The migration whose rollback this swap is: its journal goes once the store is restored.
        case removeMigrationJournal
    }

    public struct Step: Codable, Sendable, Equatable {
        public enum Kind: String, Codable, Sendable {
            /// An old file or folder renamed into the aside folder.
            case moveOld
            /// An old file that a new one replaces: hard-linked into the aside folder first.
            case linkOld
            /// A staged new file or folder renamed to its final name.
            case install
        }
        public var kind: Kind
        public var role: String
        public var from: String
        public var to: String
        public var device: UInt64
        public var inode: UInt64
        /// An old file's (or folder's) size and modification time (ns) when the record was
        /// written: a recovery that finds the file still at its name, changed since, knows another
        /// process wrote it after the swap's process died (absent in records an older storectl wrote).
        public var state: [Int64]? = nil
    }

    /// The intent record.
    public struct Journal: Codable, Sendable, Equatable {
        public var format = "storectl-swap"
        public var formatVersion = 1
        public var operation: String
        public var pid: Int32
        public var host: String
        public var startedAt: Date
        /// The database path the swap installs.
        public var target: String
        public var aside: String
        public var steps: [Step]
        public var keepOld: KeepOld
        /// SHA-256 of the new database, checked once it is in place.
        public var expectedSHA256: String?
        public var followups: [Followup]
        /// The staged database's size and modification time (ns) when the record was written
        /// (its device and inode are its install step's): a recovery checks that the file in place
        /// is that one, unwritten since, where no SHA-256 was given (absent in records an older
        /// storectl wrote). The caller verified its content before the swap.
        public var expectedFile: [Int64]?
    }

    /// A file to install: a staged temp artifact and its final name.
    public struct Install {
        public var staged: PendingFile
        public var role: String
        public var finalPath: String { staged.finalPath }
        public init(_ staged: PendingFile, role: String) {
            self.staged = staged
            self.role = role
        }
    }

    public struct Plan {
        public var operation: String
        /// The database path; the record is `<target>.storectl-swap.json`.
        public var target: String
        /// In order; put the database last.
        public var installs: [Install]
        /// Existing names whose files the swap replaces or sets aside, in order (sidecars first).
        public var replacing: [(path: String, role: String)]
        public var keepOld: KeepOld
        public var expectedSHA256: String?
        public var followups: [Followup] = []

        public init(operation: String, target: String, installs: [Install], replacing: [(path: String, role: String)],
                    keepOld: KeepOld, expectedSHA256: String? = nil, followups: [Followup] = []) {
            self.operation = operation
            self.target = target
            self.installs = installs
            self.replacing = replacing
            self.keepOld = keepOld
            self.expectedSHA256 = expectedSHA256
            self.followups = followups
        }
    }

    /// What a finished swap did with the old files.
    public struct Outcome: Sendable, Codable, Equatable {
        public var operation: String
        public var target: String
        /// Old names that were replaced or set aside (discarded, or kept under `kept`).
        public var replaced: [String]
        /// Where kept old files now are.
        public var kept: [String]
        /// Files found in the way that no step knew (another process wrote them after a crash), kept
        /// beside the store as `<store>.unexpected-<time>-<name>` (empty ones are dropped).
        public var intruders: [String]
        /// Recovery only: forward (finished) or back (undone, when a new file had vanished).
        public var direction: String
        /// The database in place matches the expected SHA-256 (nil when there was none to check).
        public var verified: Bool?
        /// Recovery only: old files another process wrote after the swap's process died (kept,
        /// under `kept`, not discarded).
        public var writtenSince: [String]? = nil
    }

    public static func journalPath(for target: String) -> String { target + ".storectl-swap.json" }
    static let journalSuffix = ".storectl-swap.json"

    // MARK: - Performing

    /// Performs the swap. The staged files must be complete and fsynced; from the moment the
    /// record is durable, the swap belongs to it (a crash is finished by `recover`).
    public static func perform(_ plan: Plan) throws -> Outcome {
        let folder = FileSystem.parent(of: plan.target)
        let id = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        let aside = (folder as NSString).appendingPathComponent(".\(FileSystem.name(of: plan.target)).storectl-swap-\(id)")
        var steps: [Step] = []
        var asideNames = Set<String>()
        func slot(for path: String) -> String {
            var name = FileSystem.name(of: path)
            while asideNames.contains(name) { name += "_" }
            asideNames.insert(name)
            return (aside as NSString).appendingPathComponent(name)
        }
        let installedPaths = Set(plan.installs.map(\.finalPath))
        for (path, role) in plan.replacing {
            guard let id = lstatIdentity(path) else { continue }
            let replacedByFile = installedPaths.contains(path) && FileSystem.kind(of: path) == .file
            steps.append(Step(kind: replacedByFile ? .linkOld : .moveOld, role: role, from: path, to: slot(for: path),
                              device: id.dev, inode: id.ino, state: fileState(path)))
        }
        for install in plan.installs {
            guard let id = FileSystem.identity(of: install.staged.tempPath) else {
                throw StoreOpsError(.failure, "the staged \(install.role) \(install.staged.tempPath) is missing")
            }
            steps.append(Step(kind: .install, role: install.role, from: install.staged.tempPath, to: install.finalPath,
                              device: id.dev, inode: id.ino))
        }
        var journal = Journal(operation: plan.operation, pid: getpid(), host: ProcessInfo.processInfo.hostName,
                              startedAt: Timestamp.now(), target: plan.target, aside: aside, steps: steps,
                              keepOld: plan.keepOld, expectedSHA256: plan.expectedSHA256, followups: plan.followups)
        if let database = plan.installs.first(where: { $0.finalPath == plan.target }) { journal.expectedFile = fileState(database.staged.tempPath) }
        let lockFD = try writeJournal(journal)
        defer { close(lockFD) }
        for install in plan.installs { install.staged.handOver() }   // the record owns them now
        // Their locks are held until the swap is over (a record names them by path, and another
        // container may see the folder under another path).
        defer { for install in plan.installs { install.staged.releaseAfterSwap() } }
        do {
            try apply(journal)
        } catch {
            // Still alive: put everything back rather than leave the store between two states.
            guard (try? undo(journal)) != nil else {
                throw StoreOpsError(.rollbackFailed, "the swap of \(plan.target) failed (\((error as? StoreOpsError)?.message ?? "\(error)")) and could not be undone",
                                    hint: "storectl recover \(plan.target) finishes it once the cause (a full disk?) is fixed")
            }
            // Undone: the staged files are back at their temporary names, which no record owns.
            for install in plan.installs { install.staged.reclaim() }
            throw error
        }
        // The caller checked what it staged; the hash check is for a recovery, which did not.
        return try dispose(journal, direction: "forward", intruders: [], checkingHash: false)
    }

    /// Writes the record durably and returns a descriptor holding its flock.
    private static func writeJournal(_ journal: Journal) throws -> Int32 {
        let path = journalPath(for: journal.target)
        guard FileSystem.kind(of: path) == .missing else {
            throw StoreOpsError(.failure, "\(path) exists: an interrupted swap of \(journal.target) must be finished first",
                                hint: "storectl recover \(journal.target)")
        }
        let pending = try PendingFile(finalPath: path, label: "swap.journal")
        try pending.write(try JSON.encode(journal))
        // The flock the temporary was made under stays held on the record (the same file) until
        // the swap is over: a recovery finds it locked while this process runs the swap.
        let fd = pending.takeLock()
        guard fd >= 0 else { throw StoreOpsError(.ioError, "could not lock \(pending.tempPath): this file system has no flock", hint: "keep stores on a local file system") }
        do { try pending.commit() } catch {
            close(fd)
            throw error
        }
        return fd
    }

    /// Applies every step (idempotently), syncs, disposes of the old files, runs the follow-ups
    /// and removes the record. Used by `perform` and by `recover`.
    static func finish(_ journal: Journal, direction: String, writtenSince: [String] = []) throws -> Outcome {
        let intruders = try apply(journal)
        return try dispose(journal, direction: direction, intruders: intruders, checkingHash: true, writtenSince: writtenSince)
    }

    /// The steps: old files aside, new files in place, folders synced. Returns the intruders moved away.
    @discardableResult
    static func apply(_ journal: Journal) throws -> [String] {
        // Past the old files' disposal nothing is left to move: the numbers of their inodes are
        // free, and a file the app has created since may have one (a -wal at the old -wal's name
        // and number would be taken for the old one and set aside with the app's commits).
        if disposing(journal) { return [] }
        let folder = FileSystem.parent(of: journal.target)
        try FileSystem.makeDirectory(journal.aside, existingOK: true, point: "swap.aside-folder")
        try FileSystem.sync(folder, directory: true, point: "swap.aside-folder.sync")
        var intruders: [String] = []
        for step in journal.steps {
            switch step.kind {
            case .moveOld:
                if holds(step.to, step) { continue }
                guard holds(step.from, step) else { continue }   // gone since (an -shm SQLite removed)
                try FileSystem.rename(step.from, step.to, point: "swap.aside.\(step.role)")
            case .linkOld:
                if holds(step.to, step) { continue }
                guard holds(step.from, step) else { continue }
                try FileSystem.link(step.from, step.to, point: "swap.aside.\(step.role)")
            case .install:
                if holds(step.to, step) { continue }
                guard holds(step.from, step) else {
                    throw StoreOpsError(.failure, "the staged \(step.role) \(step.from) of the swap of \(journal.target) is missing")
                }
                if step.to == journal.target {
                    // Sidecars that appeared beside the old database after the record was written (an
                    // app or a reader opened it after a crash) belong to the old file: never to the new one.
                    for suffix in ["-wal", "-shm", "-journal"] where lstatIdentity(step.to + suffix) != nil {
                        let away = (journal.aside as NSString).appendingPathComponent("unexpected-\(FileSystem.name(of: step.to))\(suffix)-\(intruders.count)")
                        try FileSystem.rename(step.to + suffix, away, point: "swap.intruder")
                        intruders.append(away)
                    }
                }
                let replacedByThis = journal.steps.contains { $0.kind == .linkOld && $0.from == step.to && holds(step.to, $0) }
                if !replacedByThis, lstatIdentity(step.to) != nil {
                    // Something no step knows took the name (an app opened the store after a crash):
                    // it is kept in the aside folder, never overwritten.
                    let away = (journal.aside as NSString).appendingPathComponent("unexpected-\(FileSystem.name(of: step.to))-\(intruders.count)")
                    try FileSystem.rename(step.to, away, point: "swap.intruder")
                    intruders.append(away)
                }
                try FileSystem.rename(step.from, step.to, point: "swap.install.\(step.role)")
            }
        }
        try FileSystem.sync(journal.aside, directory: true, point: "swap.sync-aside")
        try FileSystem.sync(folder, directory: true, point: "swap.sync-folder")
        return intruders
    }

    /// Checks the new database, disposes of the old files, runs the follow-ups, removes the record.
    static func dispose(_ journal: Journal, direction: String, intruders: [String], checkingHash: Bool, writtenSince: [String] = []) throws -> Outcome {
        let folder = FileSystem.parent(of: journal.target)
        let replaced = journal.steps.filter { $0.kind != .install && holds($0.to, $0) }.map(\.from)
        var intruders = intruders
        if let names = try? FileManager.default.contentsOfDirectory(atPath: journal.aside) {
            for name in names where name.hasPrefix("unexpected-") {
                let path = (journal.aside as NSString).appendingPathComponent(name)
                if !intruders.contains(path) { intruders.append(path) }
            }
        }
        var verified: Bool?
        if checkingHash, let expected = journal.expectedSHA256 {
            // The kept descriptor: a caller may have a connection to the store open (a purge's
            // snapshot stage recovers under its own connection), and closing a descriptor of it
            // would drop that connection's locks.
            verified = (try? FileProbe.shared.sha256(of: journal.target)) == expected
        } else if checkingHash, let expected = journal.expectedFile,
                  let install = journal.steps.first(where: { $0.kind == .install && $0.to == journal.target }) {
            // The file staged (its device and inode), neither grown nor written since (a rename
            // changes neither its size nor its modification time).
            let identity = lstatIdentity(journal.target)
            verified = identity?.dev == install.device && identity?.ino == install.inode && fileState(journal.target) == expected
        }
        var kept: [String] = []
        // What others wrote in the way is kept beside the store whatever becomes of the old files,
        // unless it holds nothing (an empty -wal, or an -shm, which is only an index).
        let stamp = Timestamp.compact(journal.startedAt)
        var keptIntruders: [String] = []
        for intruder in intruders {
            let name = FileSystem.name(of: intruder)
            let empty = (FileSystem.size(of: intruder) ?? 0) == 0 || name.contains("-shm-")
            guard !empty else { continue }
            // A sidecar keeps its suffix (`<store>.unexpected-<time>-wal`), anything else its name.
            let sidecar = ["-wal", "-shm", "-journal"].first { name.contains("\(FileSystem.name(of: journal.target))\($0)-") }
            let keptPath = try freeName(journal.target + ".unexpected-\(stamp)"
                                        + (sidecar ?? "-" + name.replacingOccurrences(of: "unexpected-", with: "")))
            try FileSystem.rename(intruder, keptPath, point: "swap.keep.intruder")
            keptIntruders.append(keptPath)
        }
        // When someone wrote in the way, or into the old files, the old files are kept too: what
        // they wrote may belong with them, or is in them.
        // A recovery of a disposal that had begun keeping them (killed between its renames: what
        // it kept is at names of this swap's stamp, no longer in the aside folder) keeps the rest.
        var keepOld = journal.keepOld
        if keepOld == .discard, !keptIntruders.isEmpty || !writtenSince.isEmpty || keptEarlier(journal, stamp: stamp) {
            keepOld = .rename(suffix: ".replaced-\(stamp)")
        }
        var doomed: String?
        switch keepOld {
        case .discard:
            // Marked first (the folder renamed, the rename synced), emptied, and removed only after
            // the record: until then a recovery knows the old files are being destroyed, whatever
            // has become of them (see `disposing`).
            let gone = discardedName(journal)
            if lstatIdentity(journal.aside) != nil {
                try FileSystem.rename(journal.aside, gone, point: "swap.discard-old.mark")
                try FileSystem.sync(folder, directory: true, point: "swap.discard-old.mark.sync")
            }
            try FileSystem.emptyDirectory(gone, point: "swap.discard-old", eachPoint: "swap.discard-old.file")
            // Empty on disk before the record goes (else a power loss could leave the old files
            // in a folder no record names).
            try FileSystem.sync(gone, directory: true, point: "swap.discard-old.sync")
            doomed = gone
        case .rename(let suffix):
            let moving = journal.steps.filter { $0.kind != .install && holds($0.to, $0) }
            // One suffix for the set, free for every one of its names: `<store><suffix>-2` keeps
            // its -wal as `<store><suffix>-2-wal`, the name SQLite pairs with it (each name made
            // free on its own gave `<store><suffix>-wal-2`, a -wal SQLite never reads with its
            // database: a second failed migration in one second lost its commits so).
            // A recovery finds the suffix the interrupted run chose: a kept name that already holds
            // its own step's file (moved there before the crash) is no conflict, so the first free
            // candidate is the same (each set's database and -wal stay paired under one suffix).
            let aside = journal.steps.filter { $0.kind != .install }
            var free = suffix, n = 1
            while n < 1000, aside.contains(where: { step in
                let name = keptName(step.from, target: journal.target, suffix: free)
                return lstatIdentity(name) != nil && !holds(name, step)
            }) {
                n += 1
                free = "\(suffix)-\(n)"
            }
            for step in moving {
                let keptPath = try freeName(keptName(step.from, target: journal.target, suffix: free))
                try FileSystem.rename(step.to, keptPath, point: "swap.keep.\(step.role)")
                kept.append(keptPath)
            }
            FileSystem.remove(journal.aside, point: "swap.remove-aside")
        }
        if verified != false {
            for followup in journal.followups {
                switch followup {
                case .removeMigrationJournal:
                    try FileSystem.removeFile(MigrationJournal.path(for: StoreFile(unchecked: journal.target)), point: "swap.followup.migration-journal")
                }
            }
        }
        try FileSystem.removeFile(journalPath(for: journal.target), point: "swap.journal.remove")
        try FileSystem.sync(folder, directory: true, point: "swap.done")
        if let doomed { FileSystem.removeEmptyDirectory(doomed, point: "swap.discard-old.folder") }
        return Outcome(operation: journal.operation, target: journal.target, replaced: replaced, kept: kept,
                       intruders: keptIntruders, direction: direction, verified: verified, writtenSince: writtenSince.isEmpty ? nil : writtenSince)
    }

    static let asideMarker = ".storectl-swap-", discardedMarker = ".storectl-gone-"

    /// The aside folder's name while its old files are destroyed (as long as its own name: a
    /// name that fits there fits here).
    static func discardedName(_ journal: Journal) -> String {
        let name = FileSystem.name(of: journal.aside)
        guard let range = name.range(of: asideMarker, options: .backwards) else { return journal.aside + "-gone" }
        return (FileSystem.parent(of: journal.aside) as NSString).appendingPathComponent(name.replacingCharacters(in: range, with: discardedMarker))
    }

    /// Whether the swap got as far as disposing of the old files: the aside folder marked for
    /// removal (it stays, emptied, until the record is gone), or (a record of a storectl that
    /// removed the folder at once) gone with every new file in place: the folder is made before
    /// the first move and removed only by the disposal; an undo puts the new files back first.
    /// From there an old file's recorded inode says nothing: its number is free, and a file made
    /// since may have it. Such a swap is only ever finished, never undone.
    static func disposing(_ journal: Journal) -> Bool {
        if lstatIdentity(discardedName(journal)) != nil { return true }
        return lstatIdentity(journal.aside) == nil
            && journal.steps.filter { $0.kind == .install }.allSatisfy { holds($0.to, $0) }
    }

    /// Whether an interrupted disposal had begun keeping the old files or what others wrote:
    /// names of this swap's stamp beside the store.
    static func keptEarlier(_ journal: Journal, stamp: String) -> Bool {
        let name = FileSystem.name(of: journal.target)
        let prefixes = [".replaced-", ".unexpected-"].map { name + $0 + stamp }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: FileSystem.parent(of: journal.target))) ?? []
        return names.contains { entry in prefixes.contains { entry.hasPrefix($0) } }
            || journal.steps.contains { step in
                // A support folder's kept name is `.<stem>.replaced-<stamp>_SUPPORT`.
                step.kind != .install && !step.from.hasPrefix(journal.target)
                    && holds(keptName(step.from, target: journal.target, suffix: ".replaced-\(stamp)"), step)
            }
    }

    /// Removes the marked folders (`.<store>.storectl-gone-<id>`) among `names` in `folder` whose
    /// swap record is gone: disposals killed after their record went (their files were doomed
    /// when the folder was marked, and the record goes only once it is empty). Returns them.
    static func removeFinishedMarks(in folder: String, names: [String]) -> [String] {
        var removed: [String] = []
        for name in names where name.hasPrefix(".") {
            guard let marker = name.range(of: discardedMarker, options: .backwards) else { continue }
            let target = (folder as NSString).appendingPathComponent(String(name[name.index(after: name.startIndex)..<marker.lowerBound]))
            guard lstatIdentity(journalPath(for: target)) == nil else { continue }
            let path = (folder as NSString).appendingPathComponent(name)
            // Only a real folder of this user's (a name planted in a shared folder, a symbolic link
            // to another folder, must not get its target emptied by a root cron job's backup).
            var info = stat()
            guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR, info.st_uid == geteuid() else { continue }
            guard (try? FileSystem.emptyDirectory(path, point: "swap.gone.empty")) != nil else { continue }
            if FileSystem.removeEmptyDirectory(path, point: "swap.gone.remove") { removed.append(path) }
        }
        return removed
    }

    /// `<store>-wal` becomes `<store><suffix>-wal`; `.<stem>_SUPPORT` becomes `.<stem><suffix>_SUPPORT`.
    static func keptName(_ path: String, target: String, suffix: String) -> String {
        if path.hasPrefix(target) { return target + suffix + path.dropFirst(target.count) }
        return StoreFile.supportPath(path, withSuffix: suffix) ?? path + suffix
    }

    /// `path`, or `path-2`, `path-3`... whichever does not exist.
    static func freeName(_ path: String) throws -> String {
        var candidate = path
        var n = 1
        while lstatIdentity(candidate) != nil {
            n += 1
            guard n < 1000 else { throw StoreOpsError(.cannotCreate, "no free name near \(path)") }
            candidate = "\(path)-\(n)"
        }
        return candidate
    }

    static func holds(_ path: String, _ step: Step) -> Bool {
        guard let id = lstatIdentity(path) else { return false }
        return id.dev == step.device && id.ino == step.inode
    }

    /// A file's size and modification time (ns), as `Journal.expectedFile` records them.
    static func fileState(_ path: String) -> [Int64]? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return [Int64(info.st_size), Int64(info.st_mtim.tv_sec) &* 1_000_000_000 &+ Int64(info.st_mtim.tv_nsec)]
    }

    static func lstatIdentity(_ path: String) -> (dev: UInt64, ino: UInt64)? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return (UInt64(info.st_dev), UInt64(info.st_ino))
    }

    // MARK: - Recovery

    /// The interrupted swap of `target`, if its record exists.
    public static func pending(target: String) -> Bool {
        FileSystem.kind(of: journalPath(for: target)) != .missing
    }

    /// Finishes (or, when a staged file has vanished, undoes) the interrupted swap of `target`.
    ///
    /// - Returns: nil when there is nothing to recover.
    /// - Throws: 75 when the swap's own process is still running it; 65 when the record is not
    ///   readable (nothing is guessed: the record and the files are left for a person).
    @discardableResult
    public static func recover(target: String) throws -> Outcome? {
        let path = journalPath(for: target)
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            // No record can exist under a name too long to exist: the target's own name is judged
            // by the command that makes it (73 naming the output).
            if errno == ENOENT || errno == ENAMETOOLONG { return nil }
            throw StoreOpsError.posix(errno, doing: "opening \(path)", side: .input)
        }
        defer { close(fd) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            throw StoreOpsError(.busy, "a swap of \(target) is in progress (\(path) is locked by its process)",
                                hint: "wait for it to finish")
        }
        // The record may have been finished and removed while we waited for its lock.
        var opened = stat()
        guard fstat(fd, &opened) == 0, let now = lstatIdentity(path), now.ino == UInt64(opened.st_ino) else { return nil }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 { if errno == EINTR { continue }; throw StoreOpsError.posix(errno, doing: "reading \(path)", side: .input) }
            if n == 0 { break }
            data.append(contentsOf: buffer[0..<n])
            guard data.count < 16 << 20 else { break }
        }
        guard let journal = try? JSON.decoder().decode(Journal.self, from: data), journal.format == "storectl-swap" else {
            throw StoreOpsError(.badData, "\(path) is not a readable swap record; nothing was changed",
                                hint: "it describes an interrupted restore of \(target): move the files back by hand (the record lists them), then remove it")
        }
        guard journal.formatVersion <= 1 else {
            throw StoreOpsError(.badData, "\(path) was written by a newer storectl (format \(journal.formatVersion))", hint: "use a newer storectl")
        }
        // A process on the store's files now (the app, started again after the crash): moving
        // files under it would leave it writing into files set aside (its commits acknowledged and
        // not in the store). Nothing is done until it has closed the store.
        // (Only while a file still has to move at a live name: once every new file is in place
        // and every old one aside, what is left (disposal, the record) moves nothing the app uses.)
        let disposing = disposing(journal)
        let moves = !disposing && journal.steps.contains { $0.kind == .install ? !holds($0.to, $0) : holds($0.from, $0) }
        if moves, let pid = openedBy(journal) {
            throw StoreOpsError(.busy, "an interrupted \(journal.operation) of \(target) waits to be finished, and another process (pid \(pid)) has the store open; nothing was changed",
                                hint: "stop the app, then run `storectl recover \(target)` (the app's commits since the crash are then kept)")
        }
        // An old file written since the record (the app opened the store after the crash,
        // committed and closed it, leaving no -wal in the way): it is kept beside the store with
        // the other old files, as what an app writes in the way is, not discarded with them (its
        // commits were lost so). Looked at where it is now: at its name, or set aside (same inode).
        let written = disposing ? [] : journal.steps.filter { step in
            guard step.kind != .install, !step.from.hasSuffix("-shm"), let state = step.state else { return false }
            let now = holds(step.from, step) ? fileState(step.from) : holds(step.to, step) ? fileState(step.to) : nil
            return now != nil && now != state
        }.map(\.from)
        let newFilesThere = journal.steps.filter { $0.kind == .install }.allSatisfy { holds($0.to, $0) || holds($0.from, $0) }
        if newFilesThere || disposing { return try finish(journal, direction: "forward", writtenSince: written) }
        return try undo(journal)
    }

    /// A process other than this one (a `replicate` follower aside) with a connection on the
    /// store's files at their names: a lock on the database's SHARED range, or on the `-shm`'s
    /// DMS byte, which a WAL-mode connection holds from its first read until it closes. (A bare
    /// open descriptor is not counted: storectl's own processes keep some without a connection.)
    static func openedBy(_ journal: Journal) -> Int32? {
        OpenFence.connected(to: StoreFile(unchecked: journal.target)).first { !LockState.isFollower($0) }
    }

    /// Puts the old files back and removes what was installed (a staged file vanished, so the swap
    /// cannot be finished).
    static func undo(_ journal: Journal) throws -> Outcome {
        let folder = FileSystem.parent(of: journal.target)
        for step in journal.steps.reversed() {
            switch step.kind {
            case .install:
                if holds(step.to, step) { try FileSystem.rename(step.to, step.from, point: "swap.undo.\(step.role)") }
            case .linkOld:
                if holds(step.from, step) {
                    if holds(step.to, step) { try FileSystem.removeFile(step.to, point: "swap.undo.\(step.role)") }
                } else if holds(step.to, step) {
                    try FileSystem.rename(step.to, step.from, point: "swap.undo.\(step.role)")
                }
            case .moveOld:
                if holds(step.to, step), lstatIdentity(step.from) == nil {
                    try FileSystem.rename(step.to, step.from, point: "swap.undo.\(step.role)")
                }
            }
        }
        try FileSystem.sync(folder, directory: true, point: "swap.undo.sync")
        // The aside folder is removed only when empty: anything left in it is old data.
        FileSystem.removeEmptyDirectory(journal.aside, point: "swap.undo.aside")
        try FileSystem.removeFile(journalPath(for: journal.target), point: "swap.journal.remove")
        try FileSystem.sync(folder, directory: true, point: "swap.done")
        return Outcome(operation: journal.operation, target: journal.target, replaced: [], kept: [], intruders: [],
                       direction: "back", verified: nil)
    }

    /// Recovers every interrupted swap recorded in `folder` whose process is gone (the next
    /// backup into a folder does this). Live ones and unreadable records are left alone.
    @discardableResult
    public static func recoverAll(in folder: String) -> [Outcome] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return names.filter { $0.hasSuffix(journalSuffix) }.compactMap { name in
            let target = (folder as NSString).appendingPathComponent(String(name.dropLast(journalSuffix.count)))
            return try? recover(target: target)
        }
    }

    /// Paths the interrupted swaps recorded in `folder` still need (their staged files): stale
    /// temp-file cleanup must leave them.
    static func protectedPaths(in folder: String) -> Set<String> {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        var paths = Set<String>()
        for name in names where name.hasSuffix(journalSuffix) {
            let path = (folder as NSString).appendingPathComponent(name)
            guard let data = FileManager.default.contents(atPath: path), let journal = try? JSON.decoder().decode(Journal.self, from: data) else { continue }
            for step in journal.steps { paths.insert(step.from); paths.insert(step.to) }
            paths.insert(journal.aside)
            paths.insert(discardedName(journal))
        }
        return paths
    }
}
