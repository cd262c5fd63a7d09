import Foundation

/// `storectl replicate --policy FILE`'s line in the policy's JSON job log (`[schedule] log`), the
/// log the scheduled jobs append to: one line per store when the run stops, with how it ended and
/// what it did (a run lasts days; while it runs, the status file and the metrics say how it goes).
public enum ReplicateJobLog {
    public struct Record: Sendable, Codable, Equatable {
        public var start: Date
        public var end: Date
        public var durationSeconds: Double
        /// "replicate", beside the scheduled jobs' "snapshot", "purge", "maintain".
        public var job = "replicate"
        public var store: String
        public var policy: String
        /// ok, failed (commits read and not written, or the store never followed), stopped by
        /// SIGTERM/SIGINT are ok when everything read was written.
        public var outcome: String
        public var exitCode: Int32
        public var stoppedBy: String
        public var points: Int
        public var segments: Int
        public var bases: Int
        public var gaps: [Replicate.Gap]
        public var uploadedBytes: UInt64
        public var requests: Int
        /// Commits read and never written (this store's).
        public var unwritten: Int?
        public var error: String?
    }

    /// Appends each store's line to the log of the policy that names it (stores of policies
    /// without a log are skipped). Returns what could not be written, for a warning.
    public static func append(_ summary: Replicate.Summary, logs: [String: Replicate.Options.JobLog], start: Date, exitCode: Int32,
                              error: String?) -> [String] {
        var problems: [String] = []
        let end = Date()
        for store in summary.stores {
            guard let log = logs[store.store] ?? logs[FileSystem.absolute(store.store)] else { continue }
            let unwritten = summary.state == "stopped" ? (store.waiting ?? 0) : 0
            let kept = summary.state == "stopped" ? (store.keptPoints ?? 0) : 0
            let failed = (store.notFollowed != nil && store.notFollowedStatus != 0) || unwritten > 0 || kept > 0
            let record = Record(start: start, end: end, durationSeconds: end.timeIntervalSince(start), store: store.store, policy: log.policy,
                                outcome: failed ? "failed" : "ok", exitCode: failed ? exitCode : 0, stoppedBy: summary.stoppedBy,
                                points: store.points, segments: store.segments, bases: store.bases.count, gaps: store.gaps,
                                uploadedBytes: store.uploadedBytes, requests: store.requests, unwritten: unwritten > 0 ? unwritten : nil,
                                error: failed ? (store.notFollowed ?? error) : store.notFollowed)
            LogRotation.rotateIfNeeded(log.path, maxBytes: log.maxBytes, keep: log.keep)
            if let problem = JobRun.appendLog(record, to: log.path) { problems.append(problem) }
        }
        return problems
    }
}
