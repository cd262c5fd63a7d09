import Foundation
import GRDB

/// Counting and cross-checking a Core Data store's rows: per-entity counts, `Z_MAX` against the
/// real primary keys, and to-one relationship columns pointing at rows that do not exist.
///
/// Core Data declares no `REFERENCES`, so `PRAGMA foreign_key_check` cannot find broken
/// relationships; they are found by joining each `Z<REL>` column to its destination's `Z_PK`.
public enum CoreDataCensus {
    public struct EntityCount: Sendable, Codable, Equatable {
        public var entity: String
        public var ent: Int
        public var table: String?
        /// Rows whose `Z_ENT` is this entity (its own rows, not its sub-entities').
        public var rows: Int?
    }

    /// A root entity's key counter or key column that Core Data would trip over.
    public struct KeyCounterProblem: Sendable, Codable, Equatable {
        public var entity: String
        public var table: String
        public var zMax: Int
        /// The highest key, compared as a number.
        public var maxPK: Int
        /// The key column's declared type when it is not INTEGER (a table rebuilt by a database browser).
        public var keyColumnType: String?
        /// Keys stored as something other than integers (text, real, blob).
        public var nonIntegerKeys: Int

        /// What is wrong, in words.
        public var summary: String {
            var parts: [String] = []
            if maxPK > zMax { parts.append("Z_MAX \(zMax) < max(Z_PK) \(maxPK)") }
            if let keyColumnType { parts.append("Z_PK is declared \(keyColumnType.isEmpty ? "without a type" : keyColumnType), not INTEGER") }
            if nonIntegerKeys > 0 { parts.append("\(nonIntegerKeys) key\(nonIntegerKeys == 1 ? " is" : "s are") not stored as integers") }
            return "\(entity) (\(table)): " + parts.joined(separator: "; ")
        }
    }

    /// A to-one relationship column and the table its values point into.
    public struct ToOneColumn: Sendable, Codable, Equatable {
        public var table: String
        public var column: String
        /// "Entity.relationship" (several when sub-entities share the column's name).
        public var relationships: [String]
        public var destinationTable: String
    }

    public struct OrphanCount: Sendable, Codable, Equatable {
        public var table: String
        public var column: String
        public var relationships: [String]
        public var destinationTable: String
        public var orphans: Int
    }

    /// Rows per entity name (entities with a table), or nil for a store that is not Core Data's:
    /// what manifests record and migrations compare.
    public static func countsByEntity(_ db: Database) throws -> [String: Int]? {
        guard let store = try CoreDataStore.read(db) else { return nil }
        return Dictionary(try entityCounts(db, store: store).compactMap { c in c.rows.map { (c.entity, $0) } }, uniquingKeysWith: +)
    }

    /// Rows per entity.
    ///
    /// A table holding one entity is counted with `count(*)`, which SQLite answers from its
    /// smallest index; a table shared by sub-entities is grouped by `Z_ENT`, which uses the
    /// `<TABLE>_Z_ENT_INDEX` Core Data creates for such tables (a full scan without it).
    public static func entityCounts(_ db: Database, store: CoreDataStore) throws -> [EntityCount] {
        var perTable: [String: [Int: Int]] = [:]
        for table in Set(store.entities.compactMap(\.table)) {
            let columns = Set(try db.columns(in: table).map { $0.name.uppercased() })
            let owners = store.entities.filter { $0.table == table }
            if owners.count == 1 {
                perTable[table] = [owners[0].ent: try Int.fetchOne(db, sql: "SELECT count(*) FROM \(quoteIdentifier(table))") ?? 0]
            } else if columns.contains("Z_ENT") {
                // Grouped by the raw column so SQLite walks Z_ENT's index in order (grouping by an
                // expression would sort 4 million rows in a temp b-tree); odd values are folded here.
                let rows = try Row.fetchAll(db, sql: "SELECT Z_ENT, count(*) FROM \(quoteIdentifier(table)) GROUP BY Z_ENT")
                perTable[table] = Dictionary(try rows.map { (Self.entityNumber($0[0] as DatabaseValue),
                                                             Int(clamping: try $0.integer(1, "count")) ) }, uniquingKeysWith: +)
            } else {
                perTable[table] = [:]   // shared, but no Z_ENT column to tell the entities apart
            }
        }
        return store.entities.map { entity in
            let rows = entity.table.map { perTable[$0]?[entity.ent] ?? 0 }
            return EntityCount(entity: entity.name, ent: entity.ent, table: entity.table, rows: rows)
        }
    }

    /// Root entities whose `Z_MAX` is below their table's largest `Z_PK` (Core Data would hand out
    /// primary keys that already exist), or whose key column is not an INTEGER column of integers.
    ///
    /// Keys are compared as numbers (`CAST`): in a table rebuilt with `Z_PK TEXT`, max() of text
    /// would compare "9" above "57". All figures come from one statement, so from one snapshot: on
    /// a live store an app inserts a row and raises `Z_MAX` in one transaction, and two separate
    /// reads could fall on either side of it and report a problem that does not exist.
    public static func keyCounterProblems(_ db: Database, store: CoreDataStore) throws -> [KeyCounterProblem] {
        var problems: [KeyCounterProblem] = []
        for entity in store.entities where entity.isRoot {
            guard let table = entity.table,
                  let key = try db.columns(in: table).first(where: { $0.name.uppercased() == "Z_PK" }) else { continue }
            // Z_PK declared INTEGER PRIMARY KEY is the rowid: its max is one b-tree step and it
            // cannot hold anything but integers. Any other declaration is scanned (a damaged store).
            let isRowid = key.type.uppercased() == "INTEGER" && key.primaryKeyIndex == 1
            let row = try Row.fetchOne(db, sql: isRowid ? """
                SELECT (SELECT CAST(Z_MAX AS INTEGER) FROM Z_PRIMARYKEY WHERE CAST(Z_ENT AS INTEGER) = ?),
                       (SELECT max(Z_PK) FROM \(quoteIdentifier(table))), 0
                """ : """
                SELECT (SELECT CAST(Z_MAX AS INTEGER) FROM Z_PRIMARYKEY WHERE CAST(Z_ENT AS INTEGER) = ?),
                       (SELECT max(CAST(Z_PK AS INTEGER)) FROM \(quoteIdentifier(table))),
                       (SELECT count(*) FROM \(quoteIdentifier(table)) WHERE typeof(Z_PK) NOT IN ('integer', 'null'))
                """, arguments: [entity.ent])
            let zMax = Int(clamping: try row?.optionalInteger(0, "Z_PRIMARYKEY.Z_MAX of \(entity.name)") ?? 0)
            let maxPK = Int(clamping: try row?.optionalInteger(1, "max(Z_PK) of \(table)") ?? 0)
            let nonInteger = Int(clamping: try row?.optionalInteger(2, "count") ?? 0)
            let declared = key.type.uppercased()
            let problem = KeyCounterProblem(entity: entity.name, table: table, zMax: zMax, maxPK: maxPK,
                                            keyColumnType: declared == "INTEGER" ? nil : key.type, nonIntegerKeys: nonInteger)
            if maxPK > zMax || problem.keyColumnType != nil || nonInteger > 0 { problems.append(problem) }
        }
        return problems
    }

    /// Maps the model's to-one relationships to real columns.
    ///
    /// Core Data names a to-one column `Z<NAME>`; when sub-entities sharing a table declare
    /// relationships of the same name it adds numbered twins (`ZACCOUNT1`...`ZACCOUNT8` in Notes).
    /// All twins are checked against the destination when every same-named relationship in the
    /// table points into the same destination table; otherwise the group is reported as skipped.
    ///
    /// - Returns: the columns, and a note per relationship group that could not be mapped.
    public static func toOneColumns(_ db: Database, store: CoreDataStore) throws -> (columns: [ToOneColumn], skipped: [String]) {
        var cache: [String: [String]] = [:]
        for table in Set(store.entities.compactMap(\.table)) { cache[table] = try db.columns(in: table).map(\.name) }
        return toOneColumns(store: store) { cache[$0] ?? [] }
    }

    /// The same from the tables' columns: a pure function.
    public static func toOneColumns(store: CoreDataStore, columnsOf: (String) -> [String]) -> (columns: [ToOneColumn], skipped: [String]) {
        guard let model = store.model else { return ([], []) }
        var groups: [String: [String: [CoreDataModel.Relationship]]] = [:]   // table -> NAME -> relationships
        for relationship in model.relationships where !relationship.isToMany {
            guard let table = store.entity(named: relationship.entity)?.table else { continue }
            groups[table, default: [:]][relationship.name.uppercased(), default: []].append(relationship)
        }
        var columns: [ToOneColumn] = []
        var skipped: [String] = []
        for (table, byName) in groups.sorted(by: { $0.key < $1.key }) {
            let tableColumns = columnsOf(table)
            let exactNames = Set(byName.keys.map { "Z" + $0 })
            for (name, relationships) in byName.sorted(by: { $0.key < $1.key }) {
                let matching = tableColumns.filter { column in
                    let upper = column.uppercased()
                    if upper == "Z" + name { return true }
                    guard upper.hasPrefix("Z" + name), !exactNames.contains(upper) else { return false }
                    let suffix = upper.dropFirst(name.count + 1)
                    return !suffix.isEmpty && suffix.allSatisfy(\.isNumber)
                }
                guard !matching.isEmpty else { continue }
                let labels = relationships.map { "\($0.entity).\($0.name)" }.sorted()
                let destinations = Set(relationships.compactMap { store.entity(named: $0.destination)?.table })
                guard destinations.count == 1, let destination = destinations.first else {
                    skipped.append("\(table).Z\(name)*: relationships \(labels.joined(separator: ", ")) point into different tables")
                    continue
                }
                for column in matching {
                    columns.append(ToOneColumn(table: table, column: column, relationships: labels, destinationTable: destination))
                }
            }
        }
        return (columns, skipped)
    }

    /// The ends of Core Data's many-to-many links: every column `Z_<ent><NAME>` of a join table
    /// `Z_<ent><NAME>` holds the Z_PK of an object of entity `<ent>`, so it must resolve into that
    /// entity's table as a to-one column must (a link to a removed or never-made object is a fault
    /// Core Data cannot fulfil). `relationships` names the join table's relationship as the diff
    /// does ("Item.tags"). Tables and columns come from the schema, entity numbers from
    /// `Z_PRIMARYKEY`: no model is needed.
    public static func joinColumns(_ db: Database, store: CoreDataStore) throws -> [ToOneColumn] {
        let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        return joinColumns(store: store, tables: tables) { table in (try? db.columns(in: table).map(\.name)) ?? [] }
    }

    /// The same from the tables and their columns: a pure function.
    public static func joinColumns(store: CoreDataStore, tables: [String], columnsOf: (String) -> [String]) -> [ToOneColumn] {
        var out: [ToOneColumn] = []
        for table in tables {
            let upper = table.uppercased()
            guard let relationship = StoreDiff.Labels.joinRelationship(upper, store: store, model: store.model) else { continue }
            for column in columnsOf(table) {
                guard let ent = StoreDiff.Labels.joinEnd(column), let destination = store.entity(ent: ent)?.table else { continue }
                out.append(ToOneColumn(table: table, column: column, relationships: [relationship], destinationTable: destination))
            }
        }
        return out
    }

    /// Counts, for every mapped to-one column, the values with no row in the destination table.
    public static func orphans(_ db: Database, columns: [ToOneColumn]) throws -> [OrphanCount] {
        try columns.map { column in
            let sql = """
                SELECT count(*) FROM \(quoteIdentifier(column.table)) AS s
                WHERE s.\(quoteIdentifier(column.column)) IS NOT NULL
                  AND NOT EXISTS (SELECT 1 FROM \(quoteIdentifier(column.destinationTable)) AS d
                                  WHERE d.Z_PK = s.\(quoteIdentifier(column.column)))
                """
            let count = try Int.fetchOne(db, sql: sql) ?? 0
            return OrphanCount(table: column.table, column: column.column, relationships: column.relationships,
                               destinationTable: column.destinationTable, orphans: count)
        }
    }

    /// A `Z_ENT` value as an entity number: integers (and text or reals that are integers) as
    /// themselves, anything else -1, which no entity has.
    static func entityNumber(_ value: DatabaseValue) -> Int {
        switch value.storage {
        case .int64(let n): return Int(clamping: n)
        case .double(let d) where d == d.rounded() && abs(d) < 9.2e18: return Int(clamping: Int64(d))
        case .string(let s): return Int(s.trimmingCharacters(in: .whitespaces)) ?? -1
        default: return -1
        }
    }
}
