import CSQLiteSink
import Foundation
import GRDB

/// The rows a migration's own connection wrote, and for an update the columns whose value it
/// changed, as SQLite's pre-update hook reports them. Under `--force` the app writes while the
/// migrations run, so the diff of the pre-migrate snapshot with the result holds the app's writes
/// too; a difference is the migration's when its connection inserted or deleted that row, or
/// changed that column of it (its statements, triggers and declared `ON DELETE` actions alike),
/// and another process's otherwise (`StoreDiff.Options.written`).
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
    /// Too many chunks to keep: nothing can be attributed to another process.
    public internal(set) var overflowed = false
    /// Chunks kept, over every table and column.
    var chunkCount = 0
    static let limit = 16_384   // 8 MiB of bits

    public init() {}

    func table(_ name: String) -> Table? { tables[name.lowercased()] }
}

/// Records what one connection writes, from `start` to `stop` (SQLite's pre-update hook; it
/// replaces any other pre-update hook on the connection).
final class WriteRecorder {
    private final class Box {
        var written = WrittenRows()
        var tablePointer: UnsafePointer<CChar>?
        var table = ""
        /// The table being written, out of `written.tables` while it is (no lookup per row).
        var current = WrittenRows.Table()
        var mainPointer: UnsafePointer<CChar>?
        var isMain = false

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
            // The names point into SQLite's schema: one String per table, not per row.
            if change.schema != box.mainPointer {
                box.mainPointer = change.schema
                box.isMain = change.schema.map { strcmp($0, "main") == 0 } ?? false
            }
            guard box.isMain else { return }   // TEMP and attached databases are not the store
            if change.table != box.tablePointer {
                box.tablePointer = change.table
                let name = change.table.map { String(cString: $0).lowercased() } ?? ""
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
                box.written.overflowed = true
                box.written.tables = [:]
                box.current = WrittenRows.Table()
            }
        }, Unmanaged.passUnretained(box).toOpaque())
        if watch == nil { return nil }
    }

    deinit { stop() }

    /// Stops watching; what was written.
    @discardableResult
    func stop() -> WrittenRows {
        if let watch {
            storectl_watch_end(watch)
            box.put()
        }
        watch = nil
        return box.written
    }
}
