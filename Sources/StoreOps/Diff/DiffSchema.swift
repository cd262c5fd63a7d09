import Foundation
import GRDB

/// One side's schema, rebuilt in an in-memory database from its `sqlite_master` (tables only,
/// empty) with its Core Data bookkeeping rows (`Z_METADATA`, `Z_PRIMARYKEY`, `Z_MODELCACHE`)
/// copied in: SQLite itself parses the CREATE statements (columns, defaults, the rowid alias),
/// and the Core Data readers work on it unchanged. Nothing is executed but one CREATE TABLE at a
/// time and INSERTs with bound values.
final class DiffSchema {
    /// A table's record layout.
    struct Layout {
        /// The stored columns, in record order.
        var columns: [String]
        /// The INTEGER PRIMARY KEY column (stored as NULL in the record: its value is the rowid).
        var rowidAlias: Int?
        var defaults: [SQLitePages.Value]
        /// The declared primary key's columns (empty: the rowid).
        var primaryKey: [String]
        var withoutRowid: Bool
        /// Columns declared TIMESTAMP (what Core Data declares a date attribute's column as).
        var timestamps: Set<String> = []
    }

    let entries: [PageDiff.SchemaEntry]
    let layouts: [String: Layout]
    let schema: StoreSchema
    var coreData: CoreDataStore? { schema.coreData }

    static let bookkeepingTables: Set<String> = ["Z_PRIMARYKEY", "Z_METADATA", "Z_MODELCACHE"]

    /// - Parameter rowsOf: the rowids and decoded records of a table of this side (for the bookkeeping tables).
    init(entries: [PageDiff.SchemaEntry], rowsOf: (PageDiff.SchemaEntry) throws -> [(Int64, [SQLitePages.Value])]) throws {
        self.entries = entries
        let queue = try DatabaseQueue()
        var layouts: [String: Layout] = [:]
        try queue.inDatabase { db in
            for entry in entries where entry.type == "table" && entry.rootPage > 0 {
                let lower = entry.name.lowercased()
                if lower == "sqlite_sequence" {
                    // Rows paired by the table they count for.
                    layouts[entry.name] = Layout(columns: ["name", "seq"], rowidAlias: nil, defaults: [.null, .null], primaryKey: ["name"], withoutRowid: false)
                    continue
                }
                if lower.hasPrefix("sqlite_stat") {
                    layouts[entry.name] = Layout(columns: ["tbl", "idx", "stat"], rowidAlias: nil, defaults: [.null, .null, .null], primaryKey: [], withoutRowid: false)
                    continue
                }
                guard let sql = entry.sql, !lower.hasPrefix("sqlite_"),
                      sql.trimmingCharacters(in: .whitespacesAndNewlines).uppercased().hasPrefix("CREATE TABLE") else { continue }
                // Text from the file: a definition only. `CREATE TABLE ... AS SELECT` (SQLite never
                // stores one: it stores the columns it made) could run any query, so it is not run.
                guard sql.range(of: #"\bAS\s*\(?\s*(SELECT|WITH|VALUES)\b"#, options: [.regularExpression, .caseInsensitive]) == nil else { continue }
                // One statement (GRDB refuses a second), a table by the name sqlite_master gives.
                guard (try? db.makeStatement(sql: sql).execute()) != nil else { continue }
                guard let rows = try? Row.fetchAll(db, sql: "SELECT name, type, dflt_value, pk, hidden FROM pragma_table_xinfo(?)", arguments: [entry.name]),
                      !rows.isEmpty else { continue }
                let withoutRowid = (try? Bool.fetchOne(db, sql: "SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?", arguments: [entry.name])) == true
                var columns: [String] = []
                var defaults: [SQLitePages.Value] = []
                var keyed: [(Int, String, String)] = []
                var timestamps: Set<String> = []
                for row in rows {
                    let hidden: Int = row[4] ?? 0
                    guard hidden != 1, hidden != 2 else { continue }   // virtual-table hidden, or generated and not stored
                    let name: String = row[0] ?? ""
                    columns.append(name)
                    if ((row[1] as String?) ?? "").uppercased() == "TIMESTAMP" { timestamps.insert(name) }
                    defaults.append(Self.literal(row[2] as String?))
                    let pk: Int = row[3] ?? 0
                    if pk > 0 { keyed.append((pk, name, (row[1] as String?) ?? "")) }
                }
                keyed.sort { $0.0 < $1.0 }
                if withoutRowid {
                    // A WITHOUT ROWID table's records hold its key columns first, then the others.
                    let order = keyed.map(\.1) + columns.filter { name in !keyed.contains { $0.1 == name } }
                    let byName = Dictionary(zip(columns, defaults), uniquingKeysWith: { x, _ in x })
                    columns = order
                    defaults = order.map { byName[$0] ?? .null }
                }
                var alias: Int?
                if !withoutRowid, keyed.count == 1, keyed[0].2.uppercased() == "INTEGER" { alias = columns.firstIndex(of: keyed[0].1) }
                layouts[entry.name] = Layout(columns: columns, rowidAlias: alias, defaults: defaults, primaryKey: keyed.map(\.1), withoutRowid: withoutRowid,
                                             timestamps: timestamps)
            }
            // Core Data's bookkeeping rows, for CoreDataStore.read.
            for entry in entries where entry.type == "table" && Self.bookkeepingTables.contains(entry.name) {
                guard let layout = layouts[entry.name] else { continue }
                let names = layout.columns.map { quoteIdentifier($0) }.joined(separator: ", ")
                let marks = Array(repeating: "?", count: layout.columns.count).joined(separator: ", ")
                let statement = try db.makeStatement(sql: "INSERT INTO \(quoteIdentifier(entry.name)) (\(names)) VALUES (\(marks))")
                for (rowid, values) in try rowsOf(entry) {
                    // An INTEGER PRIMARY KEY (Z_PRIMARYKEY's Z_ENT) is the rowid, stored as NULL in
                    // the record: inserted as NULL it would be numbered anew (16001 became 21).
                    let padded = (0..<layout.columns.count).map { i -> SQLitePages.Value in
                        let value = i < values.count ? values[i] : layout.defaults[i]
                        return i == layout.rowidAlias && value == .null ? .integer(rowid) : value
                    }
                    try statement.execute(arguments: StatementArguments(padded.map(Self.databaseValue)))
                }
            }
        }
        self.layouts = layouts
        schema = try queue.inDatabase { db in try StoreSchema.read(db) }
    }

    static func databaseValue(_ value: SQLitePages.Value) -> DatabaseValue {
        switch value {
        case .null: .null
        case .integer(let n): n.databaseValue
        case .real(let d): d.databaseValue
        case .text(let t): t.databaseValue
        case .blob(let b): Data(b).databaseValue
        }
    }

    /// A column default written as a literal (a number, a quoted string, NULL); anything else
    /// (an expression) reads as NULL for rows written before the column existed.
    static func literal(_ text: String?) -> SQLitePages.Value {
        guard let text = text?.trimmingCharacters(in: .whitespaces), !text.isEmpty, text.uppercased() != "NULL" else { return .null }
        if let n = Int64(text) { return .integer(n) }
        if let d = Double(text) { return .real(d) }
        if text.count >= 2, text.hasPrefix("'"), text.hasSuffix("'") {
            return .text(String(text.dropFirst().dropLast()).replacingOccurrences(of: "''", with: "'"))
        }
        return .null
    }

    /// A record's values by column name (the rowid alias filled in, missing trailing columns defaulted).
    func values(of table: String, record: [SQLitePages.Value], rowid: Int64) -> [(String, SQLitePages.Value)] {
        guard let layout = layouts[table] else {
            return record.enumerated().map { ("column \($0.offset + 1)", $0.element) }
        }
        var out: [(String, SQLitePages.Value)] = []
        out.reserveCapacity(layout.columns.count)
        for (i, name) in layout.columns.enumerated() {
            var value = i < record.count ? record[i] : layout.defaults[i]
            if i == layout.rowidAlias, value == .null { value = .integer(rowid) }
            out.append((name, value))
        }
        return out
    }
}
