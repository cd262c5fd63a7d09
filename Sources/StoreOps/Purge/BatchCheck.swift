import CSQLiteSink
import Foundation
import GRDB

/// A purge batch verified by meaning: SQLite's session extension records what the batch's
/// transaction changed, and before it commits that is held against the plan. What the batch's
/// own statements changed must be exactly the planned rows deleted, their join-table rows, and
/// the planned references nullified (that column, and `Z_OPT` where Core Data bumps it); a row
/// the plan does not name, or a planned row left in place, rolls the batch back and fails the
/// purge. What the store's own triggers and declared `ON DELETE` actions changed in turn (the
/// session marks those changes indirect: an R-tree's shadow tables in Photos, a cascade declared
/// in SQL) is counted per table in the report. A purge runs while the app writes; the diff of
/// whole stores before and after would hold the app's writes too, the batch's change set holds
/// only the batch's.
final class BatchCheck {
    private let session: OpaquePointer

    struct Change {
        var table: String
        var op: Int32
        var indirect: Bool
        var primaryKey: [Bool]
        var old: [(type: Int32, value: Int64)]
        var new: [(type: Int32, value: Int64)]
    }

    /// What the check needs of the store's schema, read once per purge: each table's columns in
    /// the order sessions number them, and the virtual tables' shadow tables.
    struct Tables: Sendable {
        var columns: [String: [String]] = [:]
        var shadows = Set<String>()

        static func read(_ db: Database) throws -> Tables {
            var tables = Tables()
            for name in try String.fetchAll(db, sql: "SELECT name FROM pragma_table_list WHERE schema = 'main' AND type IN ('table', 'shadow')") {
                tables.columns[name] = try String.fetchAll(db, sql: "SELECT name FROM pragma_table_info(?)", arguments: [name])
            }
            tables.shadows = Set(try String.fetchAll(db, sql: "SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'shadow'"))
            return tables
        }
    }

    /// Starts recording on `db` (inside the batch's transaction, before its first write).
    init(_ db: Database) throws {
        var rc: Int32 = 0
        guard let session = storectl_session_start(db.sqliteConnection, &rc) else {
            throw StoreOpsError(.failure, "could not record the batch's changes (SQLite session extension: code \(rc))",
                                hint: "storectl needs a libsqlite3 built with the session extension (Debian's is)")
        }
        self.session = session
    }

    deinit { storectl_session_end(session) }

    func changes() throws -> [Change] {
        final class Box { var changes: [Change] = [] }
        let box = Box()
        let rc = storectl_session_changes(session, { context, raw in
            guard let context, let raw else { return SQLITE_ABORT }
            let change = raw.pointee
            let box = Unmanaged<Box>.fromOpaque(context).takeUnretainedValue()
            let count = Int(change.columns)
            var pk: [Bool] = [], old: [(Int32, Int64)] = [], new: [(Int32, Int64)] = []
            for i in 0..<count {
                pk.append(change.primary_key.map { $0[i] != 0 } ?? false)
                old.append((change.old_type[i], change.old_value[i]))
                new.append((change.new_type[i], change.new_value[i]))
            }
            box.changes.append(Change(table: change.table.map { String(cString: $0) } ?? "", op: change.op, indirect: change.indirect != 0, primaryKey: pk,
                                      old: old.map { (type: $0.0, value: $0.1) }, new: new.map { (type: $0.0, value: $0.1) }))
            return 0
        }, Unmanaged.passUnretained(box).toOpaque())
        guard rc == SQLITE_OK else { throw StoreOpsError(.failure, "could not read the batch's recorded changes (SQLite code \(rc))") }
        return box.changes
    }

    /// What the batch's statements changed outside its plan, in words (empty: exactly the plan),
    /// and the rows triggers and declared actions changed, per table.
    ///
    /// - Parameter columns: a table's column names, in the order sessions number them.
    /// - Parameter shadowTables: the store's virtual tables' shadow tables (`PRAGMA table_list`'s
    ///   type "shadow"): their modules write them with statements of their own, which sessions do
    ///   not mark indirect.
    static func unplanned(_ changes: [Change], effects: BatchClosure.Effects, columns: (String) -> [String],
                          shadowTables: Set<String> = []) -> (problems: [String], indirect: [String: Int]) {
        var problems: [String] = []
        var indirect: [String: Int] = [:]
        var deletedIDs: [String: Set<Int64>] = [:]
        var recorded = Set<String>()
        let planned = effects.deleted.mapValues { Set($0) }
        func note(_ text: String) { if problems.count < 20 { problems.append(text) } }
        for change in changes {
            recorded.insert(change.table)
            // Planned rows a trigger deleted first count as deleted.
            if change.op == SQLITE_DELETE, let id = singleIntegerKey(change) { deletedIDs[change.table, default: []].insert(id) }
            if change.indirect || shadowTables.contains(change.table) {
                indirect[change.table, default: 0] += 1
                continue
            }
            let names = columns(change.table)
            func index(_ name: String) -> Int? { names.firstIndex { $0.caseInsensitiveCompare(name) == .orderedSame } }
            let key = change.primaryKey.firstIndex(of: true).map { change.old[$0].type == SQLITE_INTEGER ? "\(change.old[$0].value)" : "?" } ?? "?"
            switch change.op {
            case SQLITE_DELETE:
                if let id = singleIntegerKey(change), planned[change.table]?.contains(id) == true { continue }
                let joined = effects.joinIDs.contains { entry in
                    entry.key.hasPrefix(change.table + ".") && index(String(entry.key.dropFirst(change.table.count + 1))).map { i in
                        i < change.old.count && change.old[i].type == SQLITE_INTEGER && entry.value.contains(change.old[i].value)
                    } == true
                }
                if joined { continue }
                note("\(change.table): row \(key) deleted, which the plan does not name")
            case SQLITE_UPDATE:
                let changed = change.new.indices.filter { change.new[$0].type != 0 }
                // Every changed column is Z_OPT or a planned nullify of this row's reference (a row
                // may lose two references in one batch).
                var plannedColumns: [Int: Set<Int64>] = [:]
                for entry in effects.nullifiedIDs where entry.key.hasPrefix(change.table + ".") {
                    if let i = index(String(entry.key.dropFirst(change.table.count + 1))), i < change.old.count { plannedColumns[i] = entry.value }
                }
                let opt = index("Z_OPT")
                let nullified = !changed.isEmpty && changed.contains { plannedColumns[$0] != nil } && changed.allSatisfy { i in
                    if i == opt { return true }
                    guard let ids = plannedColumns[i] else { return false }
                    return change.new[i].type == SQLITE_NULL && change.old[i].type == SQLITE_INTEGER && ids.contains(change.old[i].value)
                }
                if nullified { continue }
                let what = changed.map { $0 < names.count ? names[$0] : "column \($0 + 1)" }.joined(separator: ", ")
                note("\(change.table): row \(key) updated (\(what)), which the plan does not name")
            default:
                note("\(change.table): a row inserted, which a purge never does")
            }
        }
        // Every planned row gone (tables sessions record: those with a PRIMARY KEY).
        for (table, ids) in effects.deleted where !ids.isEmpty && (recorded.contains(table) || hasPrimaryKey(table, columns)) {
            let left = Set(ids).subtracting(deletedIDs[table] ?? [])
            if !left.isEmpty { note("\(table): \(left.count) planned row\(left.count == 1 ? "" : "s") not deleted (\(left.sorted().prefix(5).map(String.init).joined(separator: ", ")))") }
        }
        return (problems, indirect)
    }

    /// The row's key when its primary key is one integer column (Core Data's Z_PK).
    private static func singleIntegerKey(_ change: Change) -> Int64? {
        let columns = change.primaryKey.enumerated().filter(\.element).map(\.offset)
        guard columns.count == 1, columns[0] < change.old.count, change.old[columns[0]].type == SQLITE_INTEGER else { return nil }
        return change.old[columns[0]].value
    }

    /// Sessions record only tables with a PRIMARY KEY; Core Data's all have one (`Z_PK`).
    private static func hasPrimaryKey(_ table: String, _ columns: (String) -> [String]) -> Bool {
        columns(table).contains { $0.uppercased() == "Z_PK" }
    }
}
