import CSQLiteSink
import Foundation
import GRDB

/// The rows a migration's own connection wrote, and for an update the columns whose value it
/// changed, as SQLite's pre-update hook reports them. Under `--force` the app writes while the
/// migrations run, so the diff of the pre-migrate snapshot with the result holds the app's writes
/// too; a difference is the migration's when its connection inserted or deleted that row, or
/// changed that column of it (its statements, triggers and Swift stages alike), and another
/// process's otherwise (`StoreDiff.Options.written`).
///
/// A dense rowid range (Core Data's `Z_PK`) costs a bit a row per column written: 4,000,000 rows
/// updated in one column are 500 KB. Past `limit` chunks (rowids scattered far apart) the record
/// is given up (`overflowed`) and every difference counts as the migration's, as it did before
/// rows were attributed.
public struct WrittenRows: Sendable {
    /// Rowids, as bits in chunks of 4,096.
    public struct RowSet: Sendable {
        private(set) var chunks: [Int64: [UInt64]] = [:]

        @discardableResult
        mutating func insert(_ rowid: Int64) -> Bool {
            let chunk = rowid >> 12, bit = Int(rowid & 4095)
            let isNew = chunks[chunk] == nil
            chunks[chunk, default: [UInt64](repeating: 0, count: 64)][bit >> 6] |= 1 << UInt64(bit & 63)
            return isNew
        }

        func contains(_ rowid: Int64) -> Bool {
            guard let words = chunks[rowid >> 12] else { return false }
            let bit = Int(rowid & 4095)
            return words[bit >> 6] & (1 << UInt64(bit & 63)) != 0
        }
    }

    public struct Table: Sendable {
        /// Rows inserted or deleted (an update that changed a rowid: both rowids).
        var rows = RowSet()
        /// Per column (SQLite's numbering, from 0; 63 stands for every column from 63 on), the rows
        /// whose value in it an update changed.
        var columns: [Int: RowSet] = [:]

        /// This connection inserted or deleted the row, or changed that column of it (nil: a
        /// column it cannot place, which counts as written).
        func wrote(_ rowid: Int64, column: Int?) -> Bool {
            if rows.contains(rowid) { return true }
            guard let column else { return true }
            return columns[min(column, 63)]?.contains(rowid) == true   // 63: any column from 63 on
        }

        /// This connection wrote the row in any way.
        func touched(_ rowid: Int64) -> Bool {
            rows.contains(rowid) || columns.values.contains { $0.contains(rowid) }
        }
    }

    /// By table name, lowercased (SQLite's names are case-insensitive).
    var tables: [String: Table] = [:]
    /// Too many chunks to keep, or a write the hook may not have seen (another pre-update hook
    /// replaced it; a migration run outside a transaction, as VACUUM is; a schema change that
    /// cannot be placed): nothing can be attributed to another process.
    public internal(set) var overflowed = false
    /// Tables whose rows the migrations changed in ways the hook does not report one by one
    /// (made, dropped or renamed, rebuilt under the same name, a column dropped or renamed: SQLite
    /// rewrites those rows without the hook), by lowercased name: theirs as a whole.
    var rewritten: Set<String> = []
    /// Chunks kept, over every table and column.
    var chunkCount = 0
    static let limit = 16_384   // 8 MiB of bits

    public init() {}

    func table(_ name: String) -> Table? { tables[name.lowercased()] }

    /// Nothing can be attributed any more: every difference is the migrations'.
    mutating func giveUp() {
        overflowed = true
        tables = [:]
    }

    /// The schema as the recorder compares it around each migration statement.
    struct Schema: Equatable {
        struct Table: Equatable {
            var rootPage: Int64
            var sql: String
            var columns: [String]
        }
        var version: Int
        /// Tables by lowercased name.
        var tables: [String: Table]
        /// Every entry (tables, indexes, triggers, views): type, name, root page and SQL.
        var entries: [String]

        static func read(_ db: Database) throws -> Schema {
            var tables: [String: Table] = [:]
            var entries: [String] = []
            for row in try Row.fetchAll(db, sql: "SELECT type, name, rootpage, sql FROM main.sqlite_master ORDER BY type, name") {
                let type: String = row[0] ?? "", name: String = row[1] ?? "", root: Int64 = row[2] ?? 0, sql: String = row[3] ?? ""
                entries.append("\(type)\u{0}\(name)\u{0}\(root)\u{0}\(sql)")
                guard type == "table" else { continue }
                let columns = try String.fetchAll(db, sql: "SELECT name FROM pragma_table_info(?)", arguments: [name]).map { $0.lowercased() }
                tables[name.lowercased()] = Table(rootPage: root, sql: sql, columns: columns)
            }
            return Schema(version: try Int.fetchOne(db, sql: "PRAGMA main.schema_version") ?? 0, tables: tables, entries: entries)
        }
    }

    /// What one schema change did to the tables: made, dropped, renamed or rebuilt ones (their
    /// SQL changed other than by columns added at the end) are rewritten; one whose SQL and
    /// columns are the same is not (auto-vacuum moves a table's root page when another is
    /// dropped). A changed schema version with nothing to show for it (a table dropped and made
    /// again the same in one statement) cannot be placed.
    mutating func note(schemaChange before: Schema, _ after: Schema) {
        guard before.version != after.version else { return }
        if before.entries == after.entries { return giveUp() }
        for name in Set(before.tables.keys).union(after.tables.keys) {
            guard let old = before.tables[name], let new = after.tables[name] else {
                rewritten.insert(name)
                continue
            }
            if old.sql == new.sql && old.columns == new.columns { continue }
            let added = new.columns.count > old.columns.count && Array(new.columns.prefix(old.columns.count)) == old.columns
            if added && old.rootPage == new.rootPage { continue }   // ALTER TABLE ADD COLUMN: no row rewritten
            rewritten.insert(name)
        }
    }
}

/// Records what one connection writes, from `start` to `stop` (SQLite's pre-update hook; it
/// replaces any other pre-update hook on the connection).
final class WriteRecorder {
    private final class Box {
        var written = WrittenRows()
        /// The name of the table being written, as SQLite spells it (compared at every row:
        /// SQLite frees and remakes its names when the schema changes, so an address seen before
        /// may name another table now).
        var tableBytes: [CChar] = [0]
        var table = ""
        /// The table being written, out of `written.tables` while it is (no lookup per row).
        var current = WrittenRows.Table()

        func put() {
            if !table.isEmpty, !written.overflowed { written.tables[table] = current }
        }

        func take(_ name: String) {
            put()
            table = name
            current = written.tables.removeValue(forKey: name) ?? WrittenRows.Table()
        }
    }

    private let box = Box()
    private var watch: OpaquePointer?

    /// Watches `db` until `stop` (nil when SQLite cannot watch: out of memory).
    init?(_ db: Database) {
        watch = storectl_watch_start(db.sqliteConnection, { context, raw in
            guard let context, let raw else { return }
            let box = Unmanaged<Box>.fromOpaque(context).takeUnretainedValue()
            guard !box.written.overflowed else { return }
            let change = raw.pointee
            guard let schema = change.schema, strcmp(schema, "main") == 0 else { return }   // TEMP and attached databases are not the store
            guard let table = change.table else { return }
            if strcmp(table, box.tableBytes) != 0 {
                box.tableBytes = Array(UnsafeBufferPointer(start: table, count: strlen(table) + 1))
                let name = String(cString: table).lowercased()
                if name != box.table { box.take(name) }
            }
            var added = 0
            switch change.op {
            case SQLITE_INSERT:
                if box.current.rows.insert(change.new_key) { added += 1 }
            case SQLITE_DELETE:
                if box.current.rows.insert(change.old_key) { added += 1 }
            default:
                if change.old_key != change.new_key {
                    if box.current.rows.insert(change.old_key) { added += 1 }
                    if box.current.rows.insert(change.new_key) { added += 1 }
                } else {
                    var mask = storectl_row_changed_mask(change.db, change.columns)
                    while mask != 0 {
                        let column = mask.trailingZeroBitCount
                        mask &= mask - 1
                        if box.current.columns[column, default: WrittenRows.RowSet()].insert(change.old_key) { added += 1 }
                    }
                }
            }
            box.written.chunkCount += added
            if box.written.chunkCount > WrittenRows.limit {
                box.written.giveUp()
                box.current = WrittenRows.Table()
            }
        }, Unmanaged.passUnretained(box).toOpaque())
        if watch == nil { return nil }
    }

    deinit { stop() }

    /// The schema after the last statement run through `execute`.
    private var schema: WrittenRows.Schema?

    /// Runs one migration statement on the recorded connection, noting the tables its schema
    /// change rewrote (`WrittenRows.note(schemaChange:)`), if it made one.
    func execute(_ sql: String, in db: Database) throws {
        let before = try schema ?? WrittenRows.Schema.read(db)
        schema = before
        try db.execute(sql: sql)
        guard try Int.fetchOne(db, sql: "PRAGMA main.schema_version") != before.version else { return }
        let after = try WrittenRows.Schema.read(db)
        schema = after
        box.put()
        box.written.note(schemaChange: before, after)
        box.current = box.written.tables.removeValue(forKey: box.table) ?? WrittenRows.Table()
    }

    /// Runs a migration's code (not SQL) on the recorded connection: if it changed the schema,
    /// what it rewrote cannot be placed, and the record is given up.
    func run(_ body: (Database) throws -> Void, in db: Database) throws {
        let before = try schema ?? WrittenRows.Schema.read(db)
        try body(db)
        let version = try Int.fetchOne(db, sql: "PRAGMA main.schema_version")
        schema = version == before.version ? before : nil
        if version != before.version { giveUp() }
    }

    /// Every difference is the migrations' (a write the hook cannot report: VACUUM, a
    /// migration's Swift code that changed the schema).
    func giveUp() {
        box.written.giveUp()
        box.current = WrittenRows.Table()
    }

    /// Stops watching; what was written.
    @discardableResult
    func stop() -> WrittenRows {
        if let watch {
            let replaced = storectl_watch_replaced(watch) != 0
            let ours = storectl_watch_end_checked(watch) != 0
            box.put()
            if replaced || !ours { giveUp() }   // another hook was or became the connection's
        }
        watch = nil
        return box.written
    }
}
