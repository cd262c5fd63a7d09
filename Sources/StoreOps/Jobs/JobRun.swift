import Foundation

/// `storectl run JOB --policy FILE`: what cron and systemd call. Quiet on success; one JSON line
/// per run in the policy's job log; Prometheus metrics for node_exporter's textfile collector.
public enum JobRun {
    public struct Options: Sendable {
        public var job: ScheduledJob
        public var policy: String
        /// Sleep a random time up to this before starting (cron has no jitter of its own).
        public var jitter: TimeInterval = 0
        public init(job: ScheduledJob, policy: String, jitter: TimeInterval = 0) {
            self.job = job
            self.policy = policy
            self.jitter = jitter
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
        public var snapshotId: String?
        public var snapshotBytes: UInt64?
        public var prunedSnapshots: [String]?
        public var error: String?
        public var stages: [StageTiming]?
    }

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
            let loaded = try Policy.load(options.policy)
            policy = loaded
            record.store = loaded.store.path
            if let schedule = loaded.schedule, let log = schedule.log {
                LogRotation.rotateIfNeeded(log + ".out", maxBytes: schedule.logMaxBytes, keep: schedule.logKeep)
            }
            if options.jitter > 0 {
                let until = Date().addingTimeInterval(Double.random(in: 0...options.jitter))
                while Date() < until, ProcessSignals.received == nil { usleep(100_000) }
                try ProcessSignals.checkpoint("waiting out the jitter")
            }
            let store = try StoreFile(existing: loaded.store.path)
            let pipeline = Pipeline(operation: "run \(options.job.rawValue)", store: store)
            var stepsEnding = Ending.ok
            let road = Road<Void>(lock: .exclusive, actName: options.job.rawValue) { _ in
                stepsEnding = try perform(options.job, policy: loaded, store: store, record: &record)
            }
            let walked = pipeline.walk(road)
            record.stages = walked.stages
            ending = walked.ending.outcome == .ok ? stepsEnding : walked.ending
        } catch {
            ending = Ending.from(error)
        }
        record.outcome = ending.outcome.rawValue
        record.exitCode = ending.status.rawValue
        record.error = ending.error?.message ?? ending.stop.map { "stopped: \($0)" }
        record.end = Timestamp.now()
        record.durationSeconds = record.end.timeIntervalSince(record.start)
        if let schedule = policy?.schedule {
            if let log = schedule.log {
                LogRotation.rotateIfNeeded(log, maxBytes: schedule.logMaxBytes, keep: schedule.logKeep)
                appendLog(record, to: log)
            }
            if let folder = schedule.metrics { try? Metrics.write(record, folder: folder) }
        }
        return record
    }

    /// The job's steps, with the store's lock held; returns the purge's ending when it has one.
    static func perform(_ job: ScheduledJob, policy: Policy, store: StoreFile, record: inout Record) throws -> Ending {
        func snapshot() throws {
            guard let section = policy.snapshot else {
                throw StoreOpsError(.badData, "\(policy.file) has no [snapshot] section naming the repository")
            }
            var options = SnapshotCreate.Options(repository: section.repository, tags: section.tags.isEmpty ? ["scheduled"] : section.tags,
                                                 compression: section.compression, level: section.level)
            options.storeLockHeld = true
            let created = try SnapshotCreate.run(store: store.path, options: options)
            record.snapshotId = created.id
            record.snapshotBytes = created.record.snapshot?.archive?.bytes
        }
        func purge(skipSnapshot: Bool) throws -> Ending {
            var options = Purge.Options(policy: policy.file)
            options.jobLockHeld = true
            options.skipSnapshot = skipSnapshot
            let report = try Purge.run(options)
            record.rowsPurged = report.rules.reduce(0) { $0 + $1.deleted }
            if let id = report.snapshot { record.snapshotId = id }
            if !report.tripped.isEmpty {
                return Ending(.refused, error: StoreOpsError(.checksFailed, "circuit breaker: " + report.tripped.joined(separator: "; ")))
            }
            return report.ending
        }
        switch job {
        case .snapshot:
            try snapshot()
            return .ok
        case .purge:
            return try purge(skipSnapshot: false)
        case .maintain:
            try snapshot()
            guard let retention = policy.snapshot?.retention, let repository = policy.snapshot?.repository else {
                throw StoreOpsError(.badData, "\(policy.file) has no [snapshot.retention]: maintain prunes the repository by it")
            }
            let pruned = try SnapshotPrune.run(.init(repository: repository, policy: retention))
            record.prunedSnapshots = pruned.removed
            return try purge(skipSnapshot: true)
        }
    }

    /// Appends one JSON line; a single write(2) on an O_APPEND descriptor, so concurrent runs'
    /// lines never interleave.
    static func appendLog(_ record: Record, to path: String) {
        guard var data = try? JSON.encode(record, pretty: false) else { return }
        data.append(0x0A)
        let fd: Int32
        do { fd = try FileSystem.openCreating(path, mode: 0o640, flags: O_WRONLY | O_APPEND, point: "joblog.create") } catch {
            FileHandle.standardError.write(Data("storectl: cannot append to the job log \(path): \((error as? StoreOpsError)?.message ?? "\(error)")\n".utf8))
            return
        }
        defer { close(fd) }
        _ = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}

/// Prometheus metrics for node_exporter's textfile collector: one `.prom` file per store and job,
/// replaced atomically (written under a name the collector ignores, then renamed), as the
/// collector's documentation asks.
public enum Metrics {
    /// The file for a store's job: `storectl-<store name>-<short hash of its path>-<job>.prom`.
    public static func file(folder: String, store: String, job: ScheduledJob) -> String {
        let name = ((FileSystem.name(of: store) as NSString).deletingPathExtension)
            .map { $0.isLetter || $0.isNumber ? $0 : "_" }
        let hash = Hashing.sha256(Data(store.utf8)).prefix(8)
        return (folder as NSString).appendingPathComponent("storectl-\(String(name))-\(hash)-\(job.rawValue).prom")
    }

    /// Writes the metrics of `record`, carrying the last success time and the purged-rows counter
    /// over from the previous file.
    public static func write(_ record: JobRun.Record, folder: String) throws {
        let store = record.store ?? record.policy
        let path = file(folder: folder, store: store, job: record.job)
        let previous = values(in: (try? String(contentsOfFile: path, encoding: .utf8)) ?? "")
        let labels = "{job=\"\(record.job.rawValue)\",store=\"\(escape(store))\"}"
        let ok = record.exitCode == 0
        let lastSuccess = ok ? record.end.timeIntervalSince1970 : previous["storectl_job_last_success_timestamp_seconds"] ?? 0
        let purged = (previous["storectl_purged_rows_total"] ?? 0) + Double(record.rowsPurged ?? 0)
        let snapshotBytes = record.snapshotBytes.map { Double($0) } ?? previous["storectl_snapshot_bytes"] ?? 0
        let metrics: [(String, String, String, Double)] = [
            ("storectl_job_last_success_timestamp_seconds", "gauge", "When the job last succeeded (Unix time).", lastSuccess),
            ("storectl_job_last_run_timestamp_seconds", "gauge", "When the job last ran (Unix time).", record.end.timeIntervalSince1970),
            ("storectl_job_duration_seconds", "gauge", "How long the last run took.", record.durationSeconds),
            ("storectl_job_exit_code", "gauge", "The last run's exit status (0 ok, 75 skipped, see storectl --help).", Double(record.exitCode)),
            ("storectl_purged_rows_total", "counter", "Rows purged by this job since its metrics file was created.", purged),
            ("storectl_snapshot_bytes", "gauge", "Size of the last snapshot archive this job made.", snapshotBytes),
        ]
        var text = ""
        for (name, type, help, value) in metrics {
            text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name)\(labels) \(format(value))\n"
        }
        let pending = try PendingFile(finalPath: path, label: "metrics.file")
        try pending.write(Data(text.utf8))
        chmod(pending.tempPath, 0o644)
        try pending.commit(replacing: true)
    }

    static func format(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(format: "%.3f", value)
    }

    /// Label values escape backslash, double quote and newline (the exposition format's rule).
    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\n", with: "\\n")
    }

    static func values(in text: String) -> [String: Double] {
        var result: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let brace = line.firstIndex(of: "{"), let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            result[String(line[..<brace])] = value
        }
        return result
    }
}

/// What `storectl schedule show` lists: each job with its next runs.
public struct ScheduleEntry: Sendable, Codable {
    public var job: ScheduledJob
    public var policy: String
    public var store: String
    public var expression: String
    public var nextRuns: [Date]
    public var timeZone: String

    /// How many next runs `schedule show` may list.
    public static let countRange = 1...1000

    /// The scheduled jobs of the policies, with their next `count` runs in `timeZone`.
    ///
    /// - Throws: 64 for a count outside 1...1000.
    public static func list(policies: [String], count: Int = 5, now: Date = Date(), timeZone: TimeZone = .current) throws -> [ScheduleEntry] {
        guard countRange.contains(count) else {
            throw StoreOpsError(.usage, "--count \(count): expected \(countRange.lowerBound) to \(countRange.upperBound) next runs")
        }
        let loaded = try policies.map(Policy.load)
        return try Crontab.jobs(loaded).map { job in
            let expression = try CronExpression(job.expression)
            return ScheduleEntry(job: job.job, policy: job.policy, store: job.store, expression: job.expression,
                                 nextRuns: expression.nextRuns(after: now, count: count, in: timeZone), timeZone: timeZone.identifier)
        }
    }
}
