import Foundation
import GRDB

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
    /// What rows a deny rule keeps make of the run: `.keep` lists them and the run still succeeds
    /// (they are what the model declares, and would otherwise fail every nightly run until someone
    /// unlinks them); `.fail` makes the run exit 2.
    public var onDeny: OnDeny = .keep
    public enum OnDeny: String, Sendable, Codable, CaseIterable { case keep, fail }
    /// Line of `[[purge]]` in the file.
    public var line: Int?
}
