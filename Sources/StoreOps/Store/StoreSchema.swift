import Foundation
import GRDB

/// What planning needs to know about a store, read once: its tables and their columns, which are
/// WITHOUT ROWID, the foreign keys declared, and the Core Data facts. Purge planning, the delete
/// graph and a migration's lint are pure functions of this value (and are tested with hand-made ones).
public struct StoreSchema: Sendable {
    public struct Column: Sendable, Equatable {
        public var name: String
        /// The declared type, as written ("INTEGER", "VARCHAR", "" when none).
        public var type: String
        public init(name: String, type: String) {
            self.name = name
            self.type = type
        }
    }

    public struct ForeignKey: Sendable, Equatable {
        public var table: String
        public var parent: String
        public var onDelete: String
    }

    /// Table name (as spelled in the schema) -> its columns, in order.
    public var tables: [String: [Column]]
    public var withoutRowid: Set<String>
    public var foreignKeys: [ForeignKey]
    public var coreData: CoreDataStore?

    public init(tables: [String: [Column]], withoutRowid: Set<String> = [], foreignKeys: [ForeignKey] = [], coreData: CoreDataStore? = nil) {
        self.tables = tables
        self.withoutRowid = withoutRowid
        self.foreignKeys = foreignKeys
        self.coreData = coreData
    }

    /// Reads the schema through `db`. A Core Data store whose bookkeeping cannot be read gets no
    /// Core Data facts (`coreDataProblem` says why).
    public static func read(_ db: Database) throws -> StoreSchema {
        var tables: [String: [Column]] = [:]
        var withoutRowid = Set<String>()
        var foreignKeys: [ForeignKey] = []
        let rows = try Row.fetchAll(db, sql: "SELECT name, sql FROM sqlite_master WHERE type = 'table'")
        for row in rows {
            guard let name = row.text(0) else { continue }
            tables[name] = try Row.fetchAll(db, sql: "SELECT name, type FROM pragma_table_info(?)", arguments: [name])
                .map { Column(name: $0.text(0) ?? "", type: $0.text(1) ?? "") }
            if (row.text(1) ?? "").uppercased().replacingOccurrences(of: " ", with: "").contains("WITHOUTROWID") { withoutRowid.insert(name) }
            for fk in try Row.fetchAll(db, sql: "SELECT \"table\", on_delete FROM pragma_foreign_key_list(?)", arguments: [name]) {
                foreignKeys.append(ForeignKey(table: name, parent: fk.text(0) ?? "", onDelete: (fk.text(1) ?? "").uppercased()))
            }
        }
        return StoreSchema(tables: tables, withoutRowid: withoutRowid, foreignKeys: foreignKeys, coreData: try? CoreDataStore.read(db))
    }

    /// The table's real spelling, matched without regard to case.
    public func table(_ name: String) -> String? {
        tables.keys.first { $0.caseInsensitiveCompare(name) == .orderedSame }
    }

    /// The column names of `table` (empty when there is no such table).
    public func columns(of table: String) -> [String] { (tables[table] ?? []).map(\.name) }

    public var tableNames: [String] { tables.keys.sorted() }
}
