import Foundation

/// `storectl run JOB --policy FILE`: what cron and systemd call. Quiet on success; one JSON line
/// per run in the policy's job log; Prometheus metrics for node_exporter's textfile collector.
public enum JobRun {
    public struct Options: Sendable {
        public var job: ScheduledJob
        public var policy: String
        /// Sleep a random time up to this before starting (cron has no jitter of its own).
        public var jitter: TimeInterval = 0
        /// The repository's password (`--password-file`), over the policy's and the environment's.
        public var password: PasswordSource?
        /// Told what the run waits for before its work (the jitter), for a terminal.
        public var announce: (@Sendable (String) -> Void)?
        public init(job: ScheduledJob, policy: String, jitter: TimeInterval = 0, password: PasswordSource? = nil) {
            self.job = job
            self.policy = policy
            self.jitter = jitter
            self.password = password
        }
    }

    /// One run, as written to the job log.
    public struct Record: Sendable, Codable, Equatable {
        public var start: Date
        public var end: Date
        public var durationSeconds: Double
        public var job: ScheduledJob
        public var store: String?
        public var policy: String
        /// ok, failed, skipped (another job held the lock), stopped (kill switch, signal), refused (breaker, deny).
        public var outcome: String
        public var exitCode: Int32
        public var rowsPurged: Int?
        /// Rows the purge's deny rules kept this run (listed in the purge's report).
        public var rowsKeptByDeny: Int?
        public var snapshotId: String?
        public var snapshotBytes: UInt64?
        public var prunedSnapshots: [String]?
        public var error: String?
        /// What to do about `error`, when the failure says (the hint printed on stderr by hand).
        public var hint: String?
        public var stages: [StageTiming]?
        /// `--jitter`: how long the run waited before it began (`start` is after the wait).
        public var jitterSeconds: Double?
        /// How long the run waited for another job of the store to let go of its lock (a second
        /// or more; `start` is after the wait).
        public var lockWaitSeconds: Double?
    }

    /// The time until `job`'s next scheduled run by `policy` (less a minute: that run waits in
    /// its turn), or nil when the policy does not schedule it.
    public static func untilNextRun(of job: ScheduledJob, in policy: Policy, now: Date = Date()) -> TimeInterval? {
        guard let text = Crontab.jobs([policy]).first(where: { $0.job == job })?.expression, let expression = try? CronExpression(text),
              let next = expression.nextRuns(after: now, count: 1, in: SystemTimeZone.zone).first else { return nil }
        return max(0, next.timeIntervalSince(now) - 60)
    }

    /// How long a scheduled run waits for another job of the same store to let go of its lock
    /// before it is skipped (75).
    public static let lockWait: TimeInterval = ProcessInfo.processInfo.environment["STORECTL_TEST_JOB_LOCK_WAIT"].flatMap(Double.init) ?? 15 * 60

    /// Runs the job; never throws: every outcome is a record (and its exit code). The job walks the
    /// pipeline with the store's lock held exclusively (a run finding it held is `skipped`, 75); its
    /// steps (snapshot, prune, purge) run with that lock.
    public static func run(_ options: Options) -> Record {
        let start = Timestamp.now()
        var record = Record(start: start, end: start, durationSeconds: 0, job: options.job, store: nil,
                            policy: FileSystem.absolute(options.policy), outcome: "ok", exitCode: 0)
        var policy: Policy?
        var ending = Ending.ok
        do {
            // Trusted before it is read, and its command before anything is written (a refused
            // policy's own log and metrics were written by root: a review).
            try PolicyTrust.check(options.policy)
            var loaded = try Policy.load(options.policy)
            try PolicyTrust.checkCommand(of: loaded)
            if let password = options.password { loaded.snapshot?.passwordSource = password }
            policy = loaded
            record.store = loaded.store.path
            if let schedule = loaded.schedule, let log = schedule.log {
                LogRotation.rotateIfNeeded(log + ".out", maxBytes: schedule.logMaxBytes, keep: schedule.logKeep)
            }
            if options.jitter > 0 {
                let wait = Double.random(in: 0...options.jitter)
                options.announce?("waiting \(Format.duration(wait)) (--jitter \(Format.duration(options.jitter))) before the \(options.job.rawValue)")
                let until = Date().addingTimeInterval(wait)
                while Date() < until, ProcessSignals.received == nil { usleep(100_000) }
                try ProcessSignals.checkpoint("waiting out the jitter")
                // The job's time is its work's: the wait is said apart (an alert on the duration
                // saw 61 s for a 0.5 s snapshot).
                record.jitterSeconds = (wait * 1000).rounded() / 1000
                record.start = Timestamp.now()
            }
            // A sequence of roads under one lock: the job takes the store's lock (exclusive), then
            // walks each step's own road in turn (each with that lock held, each taking the
            // repository's lock it needs in its own lock stage: shared to snapshot, alone to prune).
            let store = try StoreFile(existing: loaded.store.path)
            let pipeline = Pipeline(operation: "run \(options.job.rawValue)", store: store)
            defer { pipeline.unlock() }
            do {
                // Another job of the same store (a daily purge at the hourly snapshot's minute):
                // waited for, not skipped at once (75 every day, a trial); up to `lockWait`, and
                // never past this job's next scheduled run (which waits in its turn: runs of a
                // `*/5` job behind an hour's purge would pile up otherwise, a review).
                let waitLimit = min(JobRun.lockWait, untilNextRun(of: options.job, in: loaded) ?? JobRun.lockWait)
                let waitStarted = Date()
                try pipeline.lock(.exclusive, wait: waitLimit > 0, waitLimit: waitLimit)
                // The job's time is its work's: the wait is said apart, as the jitter is.
                let waited = Date().timeIntervalSince(waitStarted)
                if waited >= 1 {
                    record.lockWaitSeconds = (waited * 1000).rounded() / 1000
                    record.start = Timestamp.now()
                }
                ending = try perform(options.job, policy: loaded, store: store, record: &record, between: { try pipeline.checkpoint() })
            } catch {
                ending = Pipeline.ending(error, rollsBack: false)
            }
            record.stages = pipeline.stages + (record.stages ?? [])
        } catch {
            ending = Ending.from(error)
        }
        record.outcome = ending.outcome.rawValue
        record.exitCode = ending.status.rawValue
        record.error = ending.error?.message ?? ending.stop.map { "stopped: \($0)" }
        record.hint = ending.error?.hint
        record.end = Timestamp.now()
        record.durationSeconds = (record.end.timeIntervalSince(record.start) * 1000).rounded() / 1000
        if let schedule = policy?.schedule {
            // The metrics first: one that cannot be written turns the run into a failure (an alert
            // on the last success must not go quiet), and the log line says so.
            if let folder = schedule.metrics {
                do { try Metrics.write(record, folder: folder) } catch {
                    let failure = StoreOpsError.wrapping(error) ?? StoreOpsError(.cannotCreate, "\(error)")
                    fail(&record, "the metrics cannot be written into \(folder): \(failure.message)", status: failure.status == .ioError ? .ioError : .cannotCreate,
                         hint: "make that folder writable by the job's user, or change the policy's `metrics` (`storectl policy check \(record.policy)` checks it)")
                }
            }
            if let log = schedule.log {
                LogRotation.rotateIfNeeded(log, maxBytes: schedule.logMaxBytes, keep: schedule.logKeep)
                if let problem = appendLog(record, to: log) {
                    // A file that is not one a job appends to (a link, another user's file, a hard
                    // link) is not put right by a writable folder (an operator's trial: it said so).
                    let what = PolicyTrust.logFileProblem(log) != nil
                        ? "look at what \(log) is (another user may have put it there), move it aside and let the job make a new one, or change the policy's `log`"
                        : FileSystem.kind(of: log) == .file ? "let the job's user write \(log) (`chown`), or change the policy's `log`"
                        : "make the log's folder writable by the job's user, or change the policy's `log`"
                    fail(&record, problem, status: .cannotCreate, hint: "\(what) (`storectl policy check \(record.policy)` checks it)")
                }
            }
        }
        return record
    }

    /// A run whose job succeeded but whose report could not be written: failed, with the reason
    /// added to whatever error it had.
    static func fail(_ record: inout Record, _ problem: String, status: ExitStatus, hint: String? = nil) {
        if record.exitCode == 0 {
            record.exitCode = status.rawValue
            record.outcome = Outcome.failed.rawValue
            record.hint = hint ?? record.hint
        }
        record.error = [record.error, problem].compactMap { $0 }.joined(separator: "; ")
    }

    /// The job's steps, with the store's lock held, each a road of its own walked in turn (its
    /// stages are the record's, named after the step); returns the purge's ending when it has one.
    /// `between` is a safe point between two steps (a signal stops the job there).
    static func perform(_ job: ScheduledJob, policy: Policy, store: StoreFile, record: inout Record,
                        between: () throws -> Void) throws -> Ending {
        func add(_ step: String, _ stages: [StageTiming]) {
            record.stages = (record.stages ?? []) + stages.map { StageTiming(name: "\(step) \($0.name)", seconds: $0.seconds) }
        }
        func snapshot() throws {
            guard let section = policy.snapshot else {
                throw StoreOpsError(.badData, "\(policy.file) has no [snapshot] section naming the repository")
            }
            var options = SnapshotCreate.Options(repository: section.repository, tags: section.tags.isEmpty ? ["scheduled"] : section.tags,
                                                 level: section.level)
            options.storeLockHeld = true
            options.password = section.password
            // A repository shared by several stores: another store's prune holds it alone for a
            // moment; a scheduled run waits its turn rather than losing its run (75).
            options.wait = true
            let created = try SnapshotCreate.run(store: store.path, options: options)
            add("snapshot", created.stages)
            record.snapshotId = created.id
            record.snapshotBytes = created.record.snapshot?.archive?.bytes ?? created.addedBytes
        }
        func purge(skipSnapshot: Bool) throws -> Ending {
            var options = Purge.Options(policy: policy.file)
            options.jobLockHeld = true
            options.skipSnapshot = skipSnapshot
            try between()
            let report = try Purge.run(options)
            add("purge", report.stages)
            record.rowsPurged = report.rules.reduce(0) { $0 + $1.deleted }
            record.rowsKeptByDeny = report.rules.reduce(0) { $0 + $1.denied }
            if let id = report.snapshot {
                record.snapshotId = id
                record.snapshotBytes = report.snapshotBytes
            }
            return report.ending   // a circuit breaker's refusal included: the purge's walk ended it
        }
        switch job {
        case .snapshot:
            try snapshot()
            return .ok
        case .purge:
            return try purge(skipSnapshot: false)
        case .maintain:
            try snapshot()
            guard let section = policy.snapshot, let retention = section.retention else {
                throw StoreOpsError(.badData, "\(policy.file) has no [snapshot.retention]: maintain prunes the repository by it")
            }
            // Only this store's snapshots, as this host took them: the repository may hold others'.
            try between()
            var options = SnapshotPrune.Options(repository: section.repository, policy: retention, password: section.password,
                                                filter: .init(host: ProcessInfo.processInfo.hostName, path: store.path))
            // Alone in the repository: it waits for another store's snapshot (shared) to end; the
            // prune and the purge after it were lost for the week (75) when they met.
            options.wait = true
            if let replicate = policy.replicate {
                options.points = PointRetention(everyCommit: replicate.keepPoints.seconds, minutes: replicate.keepPointMinutes.seconds,
                                                bases: replicate.keepPointBases.seconds, explicit: true)
            }
            let pruned = try SnapshotPrune.run(options)
            add("prune", pruned.stages)
            record.prunedSnapshots = pruned.removed
            // A store that is only snapshotted (and followed) has nothing to purge: maintain ends here.
            guard !policy.rules.isEmpty else { return .ok }
            return try purge(skipSnapshot: true)
        }
    }

    /// Appends one JSON line; a single write(2) on an O_APPEND descriptor, so concurrent runs'
    /// lines never interleave.
    /// Returns what went wrong, or nil.
    static func appendLog(_ record: some Encodable, to path: String) -> String? {
        guard var data = try? JSON.encode(record, pretty: false) else { return "the job log line cannot be encoded" }
        data.append(0x0A)
        let fd: Int32
        // Never through a link, and only a plain file of this user's or root's with one name
        // (`PolicyTrust.logFileProblem`): a link planted as root's job log had root append there.
        do { fd = try FileSystem.openCreating(path, mode: 0o640, flags: O_WRONLY | O_APPEND | O_NOFOLLOW, point: "joblog.create") } catch {
            if let why = PolicyTrust.logFileProblem(path) { return "refused to append to the job log: \(why)" }
            return "cannot append to the job log \(path): \((StoreOpsError.wrapping(error) ?? StoreOpsError(.cannotCreate, "\(error)")).message)"
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return "cannot append to the job log \(path): \(String(cString: strerror(errno)))" }
        if let why = PolicyTrust.logFileProblem(path, info: info, uid: geteuid()) { return "refused to append to the job log: \(why)" }
        let written = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == data.count else {
            return "cannot append to the job log \(path): \(written < 0 ? String(cString: strerror(errno)) : "short write")"
        }
        return nil
    }
}

