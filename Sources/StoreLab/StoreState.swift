import Foundation
import GRDB
import StoreOps

/// What a store holds, as one comparable value: every row of every table (rowid order), the
/// external-data files (name and SHA-256) and the journal mode. Two stores with the same digest
/// hold the same data whatever their page layout; crash tests compare a store against the state
/// before and after an operation with it.
public enum StoreState {
    /// - Parameter journalMode: include the journal mode (a copy is `delete` where its store is `wal`).
    public static func digest(_ path: String, journalMode: Bool = true) throws -> String {
        var config = Configuration()
        config.readonly = true
        config.busyMode = .timeout(10)
        let queue = try DatabaseQueue(path: path, configuration: config)
        defer { try? queue.close() }
        var text = try queue.inDatabase { db -> String in
            var text = journalMode ? "journal_mode \(try String.fetchOne(db, sql: "PRAGMA journal_mode") ?? "?")\n" : ""
            let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
            for table in tables {
                text += "## \(table)\n"
                // storectl's migration history: what was applied, not when or by which run.
                text += table == MigrationHistory.table
                    ? try rows(db, table: table, columns: ["version", "name", "sha256"], order: "version")
                    : try rows(db, table: table)
            }
            return text
        }
        let external = StoreFile(unchecked: path).externalDataPath
        for name in ((try? FileManager.default.contentsOfDirectory(atPath: external)) ?? []).sorted() {
            text += "external \(name) \(try Hashing.sha256(ofFile: (external as NSString).appendingPathComponent(name)))\n"
        }
        return Hashing.sha256(Data(text.utf8))
    }

    /// A table's rows as text, a line each (`columns`, default all, in `order`), for digests:
    /// each line written by SQLite (quote() is exact for every type: text escaped, blobs in hex,
    /// reals round-tripping), the table as one value. A row at a time in Swift (a debug build's
    /// GRDB rows as strings, which also gave blobs by size only) was most of the test process's
    /// own CPU.
    public static func rows(_ db: Database, table: String, columns: [String]? = nil, order: String = "rowid") throws -> String {
        let names = try columns ?? Row.fetchAll(db, sql: "SELECT name FROM pragma_table_info(?)", arguments: [table]).map { $0[0] as String }
        guard !names.isEmpty else { return "" }
        let line = names.map { "quote(\(quoteIdentifier($0)))" }.joined(separator: " || ',' || ")
        let sql = "SELECT group_concat(line, char(10)) FROM (SELECT \(line) AS line FROM \(quoteIdentifier(table)) ORDER BY \(order))"
        return try String.fetchOne(db, sql: sql).map { $0 + "\n" } ?? ""
    }

    /// Commits `count` small updates (one transaction each) to a WAL store and leaves them in its
    /// `-wal` only: automatic checkpoints are off and the process must end without closing the
    /// connection (`storectl-lab wal-commits` kills itself), as an app killed after committing does.
    public static func commitToWALOnly(_ path: String, count: Int) throws -> DatabaseQueue {
        var config = Configuration()
        config.busyMode = .timeout(10)
        let queue = try DatabaseQueue(path: path, configuration: config)
        try queue.inDatabase { db in
            try db.execute(sql: "PRAGMA wal_autocheckpoint = 0")
            for i in 0..<count {
                try db.execute(sql: "UPDATE ZITEM SET ZTITLE = ZTITLE || ?, Z_OPT = Z_OPT + 1 WHERE Z_PK = ?",
                               arguments: [" +\(i)", 1 + (i * 7919) % 200])
            }
        }
        return queue
    }
}
