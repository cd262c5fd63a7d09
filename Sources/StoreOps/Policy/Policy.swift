import Foundation
import GRDB

/// A retention policy file: the store, its purge rules, snapshots before purging and their
/// retention, and the schedules of the jobs. See Policies/README.md for the format.
public struct Policy: Sendable {
    /// Absolute path of the policy file.
    public var file: String
    public var store: StoreSection
    public var rules: [PurgeRule]
    public var snapshot: SnapshotSection?
    public var schedule: ScheduleSection?
    /// `[replicate]`: how `storectl replicate --policy` follows the store (into `[snapshot]`'s repository).
    public var replicate: ReplicateSection?

    public struct ReplicateSection: Sendable {
        public var syncInterval: DurationText
        public var baseInterval: DurationText
        /// How often a chain's segments are merged into one object (0: never).
        public var mergeInterval: DurationText
        /// How often an idle store's follower confirms it (0: never).
        public var heartbeat = DurationText(seconds: 60, text: "1m")
        /// Points retention (`storectl run maintain` prunes by it): every commit, then only bases.
        public var keepPoints: DurationText
        public var keepPointMinutes: DurationText
        public var keepPointBases: DurationText
        public var statusFile: String?
        /// Defaults to `[schedule] metrics`.
        public var metrics: String?
        /// Where commits wait while the repository cannot be written (`Replicate.Options.spoolFolder`).
        public var spool: String?
        public var spoolLimit: UInt64?
    }

    public struct StoreSection: Sendable {
        /// Absolute; a relative path in the file is taken relative to the file's folder.
        public var path: String
        /// How long each batch waits for the app's locks before the run gives up (exit 75).
        public var busyTimeout: DurationText
    }

    public struct SnapshotSection: Sendable {
        public var repository: String
        /// Take a snapshot before purging; the purge does not start if it fails.
        public var beforePurge: Bool
        /// zstd's level for the snapshots (nil: 3).
        public var level: Int?
        public var tags: [String]
        /// The keep rules `storectl run maintain` prunes the repository by.
        public var retention: RetentionPolicy?
        /// Where an encrypted repository's password comes from: `password_file` (relative to the
        /// policy file) or `password_command`; nil: the environment (STORECTL_PASSWORD_FILE, …).
        public var passwordSource: PasswordSource?

        /// The password source scheduled and manual runs of this policy use.
        /// With none named anywhere and no terminal (cron, systemd), the failure names the policy's
        /// fix, not only "there is no terminal to ask on" (what cron mailed; found by a helper).
        public var password: PasswordSource {
            if let passwordSource { return passwordSource }
            let resolved = PasswordSource.resolve(file: nil)
            guard case .prompt = resolved, !PasswordSource.terminalAvailable else { return resolved }
            return .unavailable("the policy names no password_file or password_command under [snapshot], STORECTL_PASSWORD_FILE and "
                                + "STORECTL_PASSWORD_COMMAND are not set, and there is no terminal to ask on")
        }
    }

    public struct ScheduleSection: Sendable {
        /// Cron expressions (five fields or @daily-style); nil: the job is not scheduled.
        public var purge: String?
        public var snapshot: String?
        public var maintain: String?
        /// A random delay before each run (systemd RandomizedDelaySec; a sleep in cron).
        public var jitter: DurationText?
        /// Where each run appends its JSON line.
        public var log: String?
        /// A node_exporter textfile-collector folder for Prometheus metrics.
        public var metrics: String?
        /// The log and its `.out` are rotated beyond this size (`log_max_size`, default 10 MiB)...
        public var logMaxBytes: UInt64 = LogRotation.defaultMaxBytes
        /// ...keeping this many old files (`log_keep`, default 5).
        public var logKeep: Int = LogRotation.defaultKeep
        /// Lines of `[schedule]` keys, for messages.
        public var lines: [String: Int] = [:]
    }
}

