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
        public var compression: Compression
        public var level: Int?
        public var tags: [String]
        /// The keep rules `storectl run maintain` prunes the repository by.
        public var retention: RetentionPolicy?
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

/// One `[[purge]]` rule: which soft-deleted rows of which table or entity go, and how fast.
public struct PurgeRule: Sendable {
    public enum Target: Sendable, Equatable, CustomStringConvertible {
        case table(String)
        case entity(String)
        /// The policy key that names it ("table" or "entity"), for messages.
        public var key: String {
            switch self {
            case .table: "table"
            case .entity: "entity"
            }
        }

        public var description: String {
            switch self {
            case .table(let name): "table \(name)"
            case .entity(let name): "entity \(name)"
            }
        }
    }

    /// How the deleted-at column stores time.
    public enum TimeFormat: String, Sendable, CaseIterable {
        /// Seconds since 2001-01-01T00:00:00Z (Core Data, SwiftData).
        case coredata
        /// Seconds since 1970.
        case unix
        /// Milliseconds since 1970.
        case unixMs = "unix_ms"
        /// ISO-8601 text, e.g. 2026-11-22T03:15:00Z (compared with SQLite's julianday()).
        case iso8601

        /// The value of `date` as bound in SQL: a number for the numeric formats (bound as text, a
        /// number would compare greater than every number in a column without a declared type), the
        /// text for ISO-8601.
        public func databaseValue(of date: Date) -> DatabaseValue {
            switch self {
            case .coredata: (date.timeIntervalSince1970 - CoreDataStore.referenceDateOffset).databaseValue
            case .unix: date.timeIntervalSince1970.databaseValue
            case .unixMs: Int64((date.timeIntervalSince1970 * 1000).rounded(.down)).databaseValue
            case .iso8601: Timestamp.iso(date).databaseValue
            }
        }

        /// The value of `date` in this format, as text for people.
        public func value(of date: Date) -> String {
            switch self {
            case .coredata: String(format: "%.3f", date.timeIntervalSince1970 - CoreDataStore.referenceDateOffset)
            case .unix: String(format: "%.3f", date.timeIntervalSince1970)
            case .unixMs: String(format: "%.0f", (date.timeIntervalSince1970 * 1000).rounded(.down))
            case .iso8601: Timestamp.iso(date)
            }
        }
    }

    public var name: String
    public var target: Target
    public var deletedFlag: String?
    public var deletedAt: String?
    public var timeFormat: TimeFormat
    /// Rows deleted longer ago than this go (at exactly the cutoff too).
    public var retention: DurationText?
    public var batchSize: Int
    public var maxRows: Int?
    public var maxRuntime: DurationText?
    public var pause: TimeInterval
    /// Circuit breaker: refuse the run if more than this fraction of the rows would go.
    public var maxFraction: Double?
    /// Line of `[[purge]]` in the file.
    public var line: Int?
}

/// A policy file's problems: every one, with file, line, key and what is expected.
public struct PolicyProblems: Error, Sendable, CustomStringConvertible {
    public struct Problem: Sendable, Equatable, CustomStringConvertible {
        public var line: Int?
        public var key: String
        public var message: String
        public var description: String { "\(line.map { "\($0): " } ?? " ")\(key): \(message)" }
    }

    public var file: String
    public var problems: [Problem]

    public var description: String {
        "\(file): \(problems.count) problem\(problems.count == 1 ? "" : "s")\n" + problems.map { "  \(file):\($0)" }.joined(separator: "\n")
    }

    /// As the error every command reports: exit 65.
    public var storeOpsError: StoreOpsError {
        StoreOpsError(.badData, description, hint: "fix the policy file; `storectl policy check \(file)` re-checks it")
    }
}
