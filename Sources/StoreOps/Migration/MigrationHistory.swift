import Foundation
import GRDB

/// The `storectl_migrations` table: one row per applied migration, written in the same
/// transaction as the migration itself.
public enum MigrationHistory {
    public static let table = "storectl_migrations"

    public struct Entry: Sendable, Codable, Equatable {
        public var version: Int
        public var name: String
        public var sha256: String
        public var appliedAt: Date
        public var durationMs: Int
        public var snapshotId: String?
    }

    public static func read(_ db: Database) throws -> [Entry] {
        guard try db.tableExists(table) else { return [] }
        return try Row.fetchAll(db, sql: "SELECT version, name, sha256, applied_at, duration_ms, snapshot_id FROM \(table) ORDER BY version").map { row in
            Entry(version: Int(clamping: try row.integer(0, "\(table).version")), name: row.text(1) ?? "?", sha256: row.text(2) ?? "",
                  appliedAt: row.text(3).flatMap(Timestamp.parseISO) ?? Date(timeIntervalSince1970: 0),
                  durationMs: Int(clamping: (try? row.optionalInteger(4, "duration_ms")).flatMap { $0 } ?? 0), snapshotId: row.text(5))
        }
    }

    static func record(_ db: Database, _ entry: Entry) throws {
        try db.execute(sql: """
            CREATE TABLE IF NOT EXISTS \(table) (version INTEGER PRIMARY KEY, name TEXT NOT NULL, sha256 TEXT NOT NULL,
                applied_at TEXT NOT NULL, duration_ms INTEGER NOT NULL, snapshot_id TEXT)
            """)
        try db.execute(sql: "INSERT INTO \(table) (version, name, sha256, applied_at, duration_ms, snapshot_id) VALUES (?, ?, ?, ?, ?, ?)",
                       arguments: [entry.version, entry.name, entry.sha256, Timestamp.iso(entry.appliedAt), entry.durationMs, entry.snapshotId])
    }

    /// What a run changed (`StoreDiff.Summary.text`), on the row of the last migration it
    /// applied; the column is added to a history table made before it existed.
    static func recordChanges(_ db: Database, version: Int, text: String) throws {
        guard try db.tableExists(table) else { return }
        if try !db.columns(in: table).contains(where: { $0.name == "changes" }) {
            try db.execute(sql: "ALTER TABLE \(table) ADD COLUMN changes TEXT")
        }
        try db.execute(sql: "UPDATE \(table) SET changes = ? WHERE version = ?", arguments: [text, version])
    }

    /// What the run that applied `version` changed, when recorded.
    public static func changes(_ db: Database, version: Int) throws -> String? {
        guard try db.tableExists(table), try db.columns(in: table).contains(where: { $0.name == "changes" }) else { return nil }
        return try String.fetchOne(db, sql: "SELECT changes FROM \(table) WHERE version = ?", arguments: [version])
    }

    /// The store's version: the highest applied migration (0 when none).
    public static func version(_ db: Database) throws -> Int { try read(db).map(\.version).max() ?? 0 }
}
