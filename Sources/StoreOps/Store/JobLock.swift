import Foundation

/// The job lock of a store: an flock(2) on a sidecar file beside it, never on the database itself.
///
/// Migrations, purges and scheduled jobs take it so that two of them never run over each other.
/// The holder writes its pid, job and start time into the file, so a process that finds the lock
/// taken can say who holds it and since when. flock locks belong to the open file description and
/// are released by the kernel when the holder exits, kill -9 included: a crash never leaves a
/// stale lock behind.
public final class JobLock {
    public struct Holder: Codable, Sendable, Equatable {
        public var pid: Int32
        public var job: String
        public var since: Date
    }

    /// The lock was held elsewhere: the run is skipped (75), a value and not a message.
    public struct Busy: Error, Sendable {
        public var error: StoreOpsError
    }

    public let path: String
    public let shared: Bool
    private var fd: Int32

    private init(path: String, fd: Int32, shared: Bool) {
        self.path = path
        self.fd = fd
        self.shared = shared
    }

    /// Takes the lock at `path`, creating the file (mode 0600) if needed.
    ///
    /// - Parameters:
    ///   - job: what the holder is doing ("migrate", "purge", ...), recorded for others to read.
    ///   - wait: wait until the lock is free instead of failing at once (SIGINT or SIGTERM end
    ///     the wait: 130 or 143, nothing done).
    ///   - shared: a reader's lock (backup, snapshot create): any number at once, never beside an
    ///     exclusive holder.
    ///   - waiting: with `wait`, told who holds the lock when the wait begins and about once a
    ///     second after (a terminal's progress line says so).
    /// - Throws: `Busy` (exit 75, naming the holder) when the lock is taken and `wait` is false.
    /// - Parameter waitLimit: with `wait`, how long at most (then busy, as without `wait`).
    public static func acquire(path: String, job: String, wait: Bool = false, waitLimit: TimeInterval? = nil, shared: Bool = false,
                               waiting: ((String) -> Void)? = nil) throws -> JobLock {
        // Never through a link: the store's folder is its owner's, and a lock file planted as a
        // symbolic or hard link to another file (/etc/shadow) would have a root job write its record
        // there, and hand it to the owner below (a review).
        let fd: Int32
        do { fd = try FileSystem.openCreating(path, mode: 0o600, flags: O_RDWR | O_NOFOLLOW, point: "joblock.create") } catch {
            var link = stat()
            guard lstat(path, &link) == 0, (link.st_mode & S_IFMT) == S_IFLNK else { throw error }
            throw StoreOpsError(.cannotCreate, "the job lock file \(path) is not a plain file of its own (a symbolic link)",
                                hint: "remove it while no job runs; storectl makes it again")
        }
        var mine = stat()
        guard fstat(fd, &mine) == 0, (mine.st_mode & S_IFMT) == S_IFREG, mine.st_nlink == 1 else {
            close(fd)
            throw StoreOpsError(.cannotCreate, "the job lock file \(path) is not a plain file of its own (a link, or another kind of file)",
                                hint: "remove it while no job runs; storectl makes it again")
        }
        // Root's run hands the lock file to the store's owner, as it does the -wal and -shm: left
        // root's (0600), it failed every later job run as the owner (73, a trial). Only a file root
        // owns (this run's, or an older root run's).
        // The same for a follower's lock (`<store>.storectl-replicate-<id>`: root's follower left it
        // root's, and the owner's follower failed 73 "Permission denied", a trial).
        let storePath: String? = path.hasSuffix(".storectl-lock") ? String(path.dropLast(".storectl-lock".count))
            : path.range(of: ".storectl-replicate-", options: .backwards).map { String(path[..<$0.lowerBound]) }
        if geteuid() == 0, mine.st_uid == 0, let storePath {
            var store = stat()
            if stat(storePath, &store) == 0, store.st_uid != 0, store.st_dev == mine.st_dev {
                _ = fchown(fd, store.st_uid, store.st_gid)
            }
        }
        let mode = shared ? LOCK_SH : LOCK_EX
        // Taken by someone else for an instant is not busy: `isHeld` (preflight, purge's dry run,
        // `replicate status`) takes the lock to learn whether it is free, and a job starting in
        // that microsecond failed 75. Tried again for up to 500 ms before it counts as busy (50 ms
        // was not enough on a loaded machine: a prober descheduled while it held the lock for its
        // look made a job starting then fail; a real holder costs half a second more to report).
        // A wait polls (every 20 ms) instead of blocking in flock(2): the signal handlers restart
        // an interrupted call (SA_RESTART), so a blocking wait ignored Ctrl-C and SIGTERM until
        // the other job let go (a new operator's trial: a backup --wait beside a purge).
        let started = Date()
        var retryUntil: Date?
        var told: Date?
        while flock(fd, mode | LOCK_NB) != 0 {
            let err = errno
            if err == EINTR { continue }
            guard err == EWOULDBLOCK else {
                close(fd)
                throw StoreOpsError.posix(err, doing: "locking \(path)", side: .output)
            }
            if let signal = ProcessSignals.received {
                close(fd)
                throw StoreOpsError(.signal(signal), "interrupted while waiting for the job lock \(path); nothing was changed")
            }
            if wait, let limit = waitLimit, Date().timeIntervalSince(started) >= limit {
                close(fd)
                let holder = readHolder(path: path)
                throw Busy(error: StoreOpsError(.busy,
                    "skipped: another job\(holder.map { " (\($0.job), pid \($0.pid), since \(Timestamp.iso($0.since)))" } ?? "") held the store's lock for all the \(Format.duration(limit)) this run waited",
                    hint: "it runs again at its next scheduled time; if the other job should have ended by now, see its line in the job log (the lock is \(path))"))
            }
            if wait {
                if let waiting, Date().timeIntervalSince(told ?? .distantPast) >= 1 {
                    told = Date()
                    waiting(waitingNote(path: path, holder: readHolder(path: path), since: started))
                }
                usleep(20_000)
                continue
            }
            if Date() < (retryUntil ?? .distantFuture) {
                if retryUntil == nil { retryUntil = Date().addingTimeInterval(0.5) }
                usleep(2_000)
                continue
            }
            close(fd)
            throw Busy(error: busyError(path: path, holder: readHolder(path: path)))
        }
        let lock = JobLock(path: path, fd: fd, shared: shared)
        lock.record(Holder(pid: getpid(), job: job, since: Timestamp.now()))
        return lock
    }

    /// What a terminal's progress line says while a run waits for the lock.
    static func waitingNote(path: String, holder: Holder?, since: Date) -> String {
        let waited = Format.duration(Date().timeIntervalSince(since))
        guard let holder else { return "waiting for the store's job lock (another job holds it), \(waited) so far" }
        return "waiting for the store's job lock (\(holder.job), pid \(holder.pid), since \(Timestamp.iso(holder.since))), \(waited) so far"
    }

    /// Who holds the lock at `path` right now, if anyone (does not take it, does not create it).
    public static func currentHolder(path: String) -> Holder? {
        guard isHeld(path: path) == true else { return nil }
        return readHolder(path: path) ?? Holder(pid: 0, job: "unknown", since: Date(timeIntervalSince1970: 0))
    }

    /// Whether anyone holds the lock at `path` right now; nil when that cannot be known (no such
    /// file, or one this user cannot open). It takes the lock for an instant to learn that (a job
    /// that meets it there tries again for a moment: `acquire`).
    public static func isHeld(path: String) -> Bool? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        if flock(fd, LOCK_EX | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return false
        }
        return errno == EWOULDBLOCK ? true : nil
    }

    /// Releases the lock. Also done on deinit and, by the kernel, when the process exits.
    public func release() {
        guard fd >= 0 else { return }
        if !shared { _ = ftruncate(fd, 0) }   // other readers may still hold it: their record stays
        flock(fd, LOCK_UN)
        close(fd)
        fd = -1
    }

    deinit { release() }

    private func record(_ holder: Holder) {
        guard let data = try? JSON.encode(holder, pretty: false) else { return }
        _ = ftruncate(fd, 0)
        _ = data.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
    }

    private static func readHolder(path: String) -> Holder? {
        guard let data = FileManager.default.contents(atPath: path), !data.isEmpty else { return nil }
        return try? JSON.decoder().decode(Holder.self, from: data)
    }

    static func busyError(path: String, holder: Holder?) -> StoreOpsError {
        guard let holder else {
            return StoreOpsError(.busy, "skipped: another job holds the lock \(path)", hint: "try again later (or, where the command takes it, pass --wait)")
        }
        return StoreOpsError(.busy,
                             "skipped: another job (\(holder.job)) holds the lock since \(Timestamp.iso(holder.since)), pid \(holder.pid)",
                             hint: "try again later (or, where the command takes it, pass --wait); the lock is \(path)")
    }
}
