import CSQLiteSink
import Foundation
import GRDB

/// A purge batch verified by meaning: SQLite's pre-update hook reports every row the batch's
/// transaction changes, as it changes it, and each is held against the batch's plan. What the
/// batch's own statements changed must be exactly the planned rows deleted, their join-table
/// rows, and the planned references nullified (that column, and `Z_OPT` where Core Data bumps
/// it); a row the plan does not name, or a planned row left in place, rolls the batch back and
/// fails the purge. What the store's own triggers and declared `ON DELETE` actions changed in turn
/// (the hook's trigger depth is above 0 for those: an R-tree's shadow tables in Photos, a cascade
/// declared in SQL) is counted per table in the report. A purge runs while the app writes; the
/// diff of whole stores before and after would hold the app's writes too, the batch's own
/// changes hold only the batch's.
///
/// The hook sees every rowid table, with or without a declared primary key (SQLite's session
/// extension, used before, skipped tables without one, and cost about as much as the deletes
/// themselves: it copies each deleted row whole, and looks every row up again to write its change
/// set). Here a deleted row costs a call and its rowid; only a join table's row is read, for the
/// column the plan names it by, and only an updated row's columns are compared. WITHOUT ROWID
/// and virtual tables are not seen (Core Data writes neither; a virtual table's shadow tables are).
final class BatchCheck {
    private let db: Database
    private let box: Box
    private var watch: OpaquePointer?

    private final class Box {
        var tally: Tally
        var tablePointer: UnsafePointer<CChar>?
        var table = ""
        var mainPointer: UnsafePointer<CChar>?
        var isMain = false
        init(_ tally: Tally) { self.tally = tally }
    }

    /// What the check needs of the store's schema, read once per purge: each table's columns in
    /// the order SQLite numbers them, and the virtual tables' shadow tables.
    struct Tables: Sendable {
        var columns: [String: [String]] = [:]
        /// Per table, the columns with a declared default (index -> its SQL text).
        var defaults: [String: [Int: String]] = [:]
        var shadows = Set<String>()

        static func read(_ db: Database) throws -> Tables {
            var tables = Tables()
            for name in try String.fetchAll(db, sql: "SELECT name FROM pragma_table_list WHERE schema = 'main' AND type IN ('table', 'shadow')") {
                let rows = try Row.fetchAll(db, sql: "SELECT name, dflt_value FROM pragma_table_info(?)", arguments: [name])
                tables.columns[name] = rows.map { $0[0] as String? ?? "" }
                for (i, row) in rows.enumerated() { if let text = row[1] as String? { tables.defaults[name, default: [:]][i] = text } }
            }
            tables.shadows = Set(try String.fetchAll(db, sql: "SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'shadow'"))
            return tables
        }
    }

    /// Starts watching `db` (inside the batch's transaction, before its first write) for the
    /// changes `plan` names (`BatchClosure.planned()`: the ids deleted, joined and nullified).
    init(_ db: Database, plan: BatchClosure.Effects, tables: Tables) throws {
        self.db = db
        box = Box(Tally(effects: plan, columns: { tables.columns[$0] ?? [] }, shadowTables: tables.shadows, defaults: { tables.defaults[$0] ?? [:] }))
        watch = storectl_watch_start(db.sqliteConnection, { context, raw in
            guard let context, let raw else { return }
            let box = Unmanaged<Box>.fromOpaque(context).takeUnretainedValue()
            let change = raw.pointee
            // The names point into SQLite's schema: one String per table, not per row.
            if change.schema != box.mainPointer {
                box.mainPointer = change.schema
                box.isMain = change.schema.map { strcmp($0, "main") == 0 } ?? false
            }
            guard box.isMain else { return }   // a purge writes only `main`; TEMP is its own scratch
            if change.table != box.tablePointer {
                box.tablePointer = change.table
                box.table = change.table.map { String(cString: $0) } ?? ""
            }
            box.tally.add(HookedChange(table: box.table, change: change))
        }, Unmanaged.passUnretained(box).toOpaque())
        guard watch != nil else { throw StoreOpsError(.failure, "could not watch the batch's changes (out of memory)") }
    }

    deinit { stop() }

    private func stop() {
        if let watch { storectl_watch_end(watch) }
        watch = nil
    }

    /// Stops watching; what the batch changed outside its plan, in words (empty: exactly the
    /// plan), and the rows (rowids) triggers and declared actions changed, per table: a row a
    /// trigger updates once per deleted row is one row.
    func verdict() -> (problems: [String], indirect: [String: Set<Int64>]) {
        stop()
        let problems = box.tally.finish().problems
        return (problems, box.tally.indirectRows)
    }

    /// A change as a test writes it (the form SQLite's change sets have: per column the old and
    /// new value's type, 0 when not given, and integer value).
    struct Change {
        var table: String
        var op: Int32
        var indirect: Bool
        var primaryKey: [Bool]
        var old: [(type: Int32, value: Int64)]
        var new: [(type: Int32, value: Int64)]
    }

    /// The rules applied to a list of changes (for tests).
    ///
    /// - Parameter columns: a table's column names, in the order SQLite numbers them.
    /// - Parameter shadowTables: the store's virtual tables' shadow tables (`PRAGMA table_list`'s
    ///   type "shadow"): their modules write them with statements of their own, at trigger depth 0.
    static func unplanned(_ changes: [Change], effects: BatchClosure.Effects, columns: @escaping (String) -> [String],
                          shadowTables: Set<String> = []) -> (problems: [String], indirect: [String: Int]) {
        var tally = Tally(effects: effects, columns: columns, shadowTables: shadowTables)
        for change in changes { tally.add(change) }
        return tally.finish()
    }
}

/// One recorded change, as the tally reads it: from the pre-update hook, or a test's value.
protocol RecordedChange {
    var table: String { get }
    var op: Int32 { get }
    var indirect: Bool { get }
    var count: Int { get }
    /// The changed row's rowid (the plan names rows by it; Core Data's `Z_PK` is it).
    var key: Int64? { get }
    func old(_ column: Int) -> (type: Int32, value: Int64)
    func new(_ column: Int) -> (type: Int32, value: Int64)
    /// For an UPDATE: whether the column's value changed.
    func changed(_ column: Int) -> Bool
}

extension BatchCheck.Change: RecordedChange {
    var count: Int { max(old.count, new.count) }
    var key: Int64? {
        let columns = primaryKey.enumerated().filter(\.element).map(\.offset)
        guard columns.count == 1, columns[0] < old.count, old[columns[0]].type == SQLITE_INTEGER else { return nil }
        return old[columns[0]].value
    }
    func old(_ column: Int) -> (type: Int32, value: Int64) { column < old.count ? old[column] : (0, 0) }
    func new(_ column: Int) -> (type: Int32, value: Int64) { column < new.count ? new[column] : (0, 0) }
    func changed(_ column: Int) -> Bool { new(column).type != 0 }
}

/// A change the pre-update hook reports; its values are read from SQLite during the callback only.
struct HookedChange: RecordedChange {
    let table: String
    let change: storectl_row_change
    var op: Int32 { change.op }
    var indirect: Bool { change.depth > 0 }
    var count: Int { Int(change.columns) }
    var key: Int64? { change.op == SQLITE_INSERT ? change.new_key : change.old_key }
    func old(_ column: Int) -> (type: Int32, value: Int64) {
        var value: Int64 = 0
        let type = storectl_row_old(change.db, Int32(column), &value)
        return (type, value)
    }
    func new(_ column: Int) -> (type: Int32, value: Int64) {
        var value: Int64 = 0
        let type = storectl_row_new(change.db, Int32(column), &value)
        return (type, value)
    }
    func changed(_ column: Int) -> Bool { storectl_row_changed(change.db, Int32(column)) != 0 }
}

extension BatchCheck {
    /// The check's rules, applied one change at a time, with what they need of each table worked
    /// out once per table.
    struct Tally {
        private final class TableRules {
            let name: String
            let names: [String]
            let shadow: Bool
            let planned: Set<Int64>?
            /// Column -> the ids whose join rows the plan deletes through it.
            var joins: [(column: Int, ids: Set<Int64>)] = []
            /// Column -> the ids whose references the plan nullifies.
            var nullified: [Int: Set<Int64>] = [:]
            let opt: Int?
            /// Columns with a declared default (index -> SQL text).
            var defaults: [Int: String] = [:]
            /// The rows the batch deleted (directly or not), by rowid.
            var deleted = Set<Int64>()
            /// The rows triggers and declared actions changed, by rowid (and those without one).
            var indirect = Set<Int64>()
            var indirectUnkeyed = 0
            /// Planned rows deleted, then inserted again.
            var putBack = Set<Int64>()

            init(name: String, names: [String], shadow: Bool, planned: Set<Int64>?, opt: Int?) {
                self.name = name; self.names = names; self.shadow = shadow; self.planned = planned; self.opt = opt
            }
        }
        private let effects: BatchClosure.Effects
        private let columns: (String) -> [String]
        private let shadowTables: Set<String>
        private let defaults: (String) -> [Int: String]
        private var rules: [String: TableRules] = [:]
        private var last: TableRules?
        private var problems: [String] = []

        init(effects: BatchClosure.Effects, columns: @escaping (String) -> [String], shadowTables: Set<String>,
             defaults: @escaping (String) -> [Int: String] = { _ in [:] }) {
            self.effects = effects
            self.columns = columns
            self.shadowTables = shadowTables
            self.defaults = defaults
        }

        private mutating func note(_ text: String) { if problems.count < 20 { problems.append(text) } }

        private mutating func rules(for table: String) -> TableRules {
            if let last, last.name == table { return last }
            if let known = rules[table] { last = known; return known }
            let names = columns(table)
            func index(_ name: String) -> Int? { names.firstIndex { $0.caseInsensitiveCompare(name) == .orderedSame } }
            let made = TableRules(name: table, names: names, shadow: shadowTables.contains(table), planned: effects.deleted[table].map { Set($0) },
                                  opt: index("Z_OPT"))
            made.defaults = defaults(table)
            let prefix = table + "."
            for entry in effects.joinIDs where entry.key.hasPrefix(prefix) {
                if let i = index(String(entry.key.dropFirst(prefix.count))) { made.joins.append((i, entry.value)) }
            }
            for entry in effects.nullifiedIDs where entry.key.hasPrefix(prefix) {
                if let i = index(String(entry.key.dropFirst(prefix.count))) { made.nullified[i] = entry.value }
            }
            rules[table] = made
            last = made
            return made
        }

        mutating func add<C: RecordedChange>(_ change: C) {
            let table = change.table
            let rules = rules(for: table)
            let id = change.key
            // Planned rows a trigger deleted first count as deleted.
            if change.op == SQLITE_DELETE, let id { rules.deleted.insert(id) }
            // A planned row inserted again (a trigger that puts deleted rows back: a trial's purge
            // said every row was deleted, and all of them were still there) is not deleted.
            if change.op == SQLITE_INSERT, let id, rules.planned?.contains(id) == true, rules.deleted.remove(id) != nil { rules.putBack.insert(id) }
            if change.indirect || rules.shadow {
                if let id { rules.indirect.insert(id) } else { rules.indirectUnkeyed += 1 }
                return
            }
            let key = id.map(String.init) ?? "?"
            switch change.op {
            case SQLITE_DELETE:
                if let id, rules.planned?.contains(id) == true { return }
                let joined = rules.joins.contains { join in
                    guard join.column < change.count else { return false }
                    let old = change.old(join.column)
                    return old.type == SQLITE_INTEGER && join.ids.contains(old.value)
                }
                if joined { return }
                note("\(table): row \(key) deleted, which the plan does not name")
            case SQLITE_UPDATE:
                // Every changed column is Z_OPT or a planned nullify of this row's reference (a row
                // may lose two references in one batch), and one of them is the latter.
                var changed: [Int] = [], planned = false, other = false
                for i in 0..<change.count where change.changed(i) {
                    let old = change.old(i), new = change.new(i)
                    // SQLite 3.40 gives NULL as the old value of a column added (with a default) after
                    // the row was written, and the default as its new one: not a change.
                    if old.type == SQLITE_NULL, let text = rules.defaults[i], text.uppercased() != "NULL",
                       Int64(text).map({ new.type == SQLITE_INTEGER && new.value == $0 }) ?? true { continue }
                    changed.append(i)
                    if i == rules.opt { continue }
                    if let ids = rules.nullified[i], new.type == SQLITE_NULL, old.type == SQLITE_INTEGER, ids.contains(old.value) {
                        planned = true
                    } else {
                        other = true
                    }
                }
                if planned && !other { return }
                let what = changed.map { $0 < rules.names.count ? rules.names[$0] : "column \($0 + 1)" }.joined(separator: ", ")
                note("\(table): row \(key) updated (\(what.isEmpty ? "no column" : what)), which the plan does not name")
            default:
                note("\(table): a row inserted, which a purge never does")
            }
        }

        /// The problems, after checking that every planned row is gone, and the indirect changes
        /// per table.
        mutating func finish() -> (problems: [String], indirect: [String: Int]) {
            for (table, ids) in effects.deleted.sorted(by: { $0.key < $1.key }) where !ids.isEmpty {
                let left = Set(ids).subtracting(rules[table]?.deleted ?? [])
                let back = left.intersection(rules[table]?.putBack ?? [])
                if !back.isEmpty { note("\(table): \(back.count) planned row\(back.count == 1 ? "" : "s") deleted and inserted again (by a trigger?) (\(back.sorted().prefix(5).map(String.init).joined(separator: ", ")))") }
                let kept = left.subtracting(back)
                if !kept.isEmpty { note("\(table): \(kept.count) planned row\(kept.count == 1 ? "" : "s") not deleted (\(kept.sorted().prefix(5).map(String.init).joined(separator: ", ")))") }
            }
            var indirect: [String: Int] = [:]
            for (table, rules) in rules where rules.indirect.count + rules.indirectUnkeyed > 0 {
                indirect[table] = rules.indirect.count + rules.indirectUnkeyed
            }
            return (problems, indirect)
        }

        /// The rows triggers and declared actions changed, by table (rowids).
        var indirectRows: [String: Set<Int64>] {
            var out: [String: Set<Int64>] = [:]
            for (table, rules) in rules where !rules.indirect.isEmpty { out[table] = rules.indirect }
            return out
        }
    }
}
