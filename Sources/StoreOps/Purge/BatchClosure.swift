import Foundation
import GRDB

/// Everything one purge batch deletes and updates, computed from its root rows by following the
/// delete graph, with set-wise queries (a few per relationship, not one per row).
///
/// Every related row remembers which roots reached it, so a deny excludes exactly the roots it
/// concerns (and, conservatively, any root sharing a related row with them).
struct BatchClosure {
    typealias Roots = Set<Int64>

    var rootTable: String
    /// Table -> Z_PK (rowid) -> the roots that lead to it. Includes the roots themselves.
    var deletes: [String: [Int64: Roots]] = [:]
    /// (table, column, entities, bumpsOpt) -> referenced Z_PK -> roots.
    var nullify: [NullifyKey: [Int64: Roots]] = [:]
    /// (join table, own column) -> Z_PK -> roots.
    var joins: [JoinKey: [Int64: Roots]] = [:]
    /// Denied roots and why.
    var denied: [Int64: String] = [:]

    struct NullifyKey: Hashable { var table: String; var column: String; var entities: [Int]; var bumpsOpt: Bool }
    struct JoinKey: Hashable { var table: String; var column: String }

    /// Computes the closure of `roots` (rows of `table`) from the rows `rows` fetches for it: the
    /// decisions (what cascades, what is nullified, which roots a deny keeps) are pure over them.
    init(roots: [Int64], table: String, graph: DeleteGraph?, rows: some ClosureRows) throws {
        rootTable = table
        let start = Dictionary(uniqueKeysWithValues: roots.map { ($0, Roots([$0])) })
        deletes[table] = start
        guard let graph else { return }
        var queue: [(String, [Int64: Roots])] = [(table, start)]
        while !queue.isEmpty {
            let (current, items) = queue.removeFirst()
            for (ent, pks) in try rows.entities(of: Array(items.keys), in: current) {
                let scoped = items.filter { pks.contains($0.key) }
                for effect in graph.effects[ent] ?? [] {
                    for fetched in try rows.rows(for: effect, from: Array(scoped.keys), in: current) {
                        queue += follow(effect, from: scoped, column: fetched.column, rows: fetched.pairs)
                    }
                }
            }
        }
        spreadDenials()
    }

    /// A related row reached from a denied root is kept, and so are the other roots reaching it.
    private mutating func spreadDenials() {
        var changed = true
        while changed {
            changed = false
            for map in deletes.values {
                for roots in map.values where !roots.isDisjoint(with: Set(denied.keys)) {
                    for root in roots where denied[root] == nil {
                        denied[root] = "shares related rows with a root a deny rule keeps"
                        changed = true
                    }
                }
            }
        }
    }

    /// Follows one effect over the rows fetched for one of its columns (`(from, to)` pairs: a
    /// referencing row and the row it references, a row and the row it references, a join row's two
    /// sides); returns newly reached rows to delete, by table, for the queue. Pure.
    mutating func follow(_ effect: DeleteGraph.Effect, from items: [Int64: Roots], column: String,
                         rows: [(Int64, Int64)]) -> [(String, [Int64: Roots])] {
        var reached: [String: [Int64: Roots]] = [:]
        func reach(_ table: String, _ pk: Int64, _ roots: Roots) {
            if deletes[table]?[pk] == nil { reached[table, default: [:]][pk, default: []].formUnion(roots) }
            deletes[table, default: [:]][pk, default: []].formUnion(roots)
        }
        func deny(_ roots: Roots, _ reason: String) {
            for root in roots where denied[root] == nil { denied[root] = reason }
        }
        switch effect.kind {
        case .referencedBy(let other, _, let entities, let bumpsOpt):
            // Rows of `other`: (child Z_PK, the parent Z_PK its `column` holds).
            for (child, parent) in rows {
                let roots = items[parent] ?? []
                switch effect.action {
                case .cascade?: reach(other, child, roots)
                case .nullify?:
                    nullify[NullifyKey(table: other, column: column, entities: entities, bumpsOpt: bumpsOpt), default: [:]][parent, default: []].formUnion(roots)
                case .deny?: deny(roots, "\(other) row \(child) still refers to it (\(effect.relationship) is deny)")
                case nil: break
                }
            }
        case .references(_, let destination):
            for (pk, target) in rows {
                let roots = items[pk] ?? []
                switch effect.action {
                case .cascade?: reach(destination, target, roots)
                case .deny?: deny(roots, "it still refers to \(destination) row \(target) (\(effect.relationship) is deny)")
                default: break
                }
            }
        case .join(let joinTable, let own, _, let otherTable):
            for (pk, target) in rows {
                let roots = items[pk] ?? []
                joins[JoinKey(table: joinTable, column: own), default: [:]][pk, default: []].formUnion(roots)
                switch effect.action {
                case .cascade?: reach(otherTable, target, roots)
                case .deny?: deny(roots, "it is still linked to \(otherTable) row \(target) (\(effect.relationship) is deny)")
                default: break
                }
            }
        }
        return reached.map { ($0.key, $0.value) }
    }

    /// What the batch changes once denied roots are left out.
    struct Effects: Sendable, Equatable {
        var roots = 0
        /// Cascaded rows per table (roots not included).
        var cascaded: [String: Int] = [:]
        /// Nullified references per "TABLE.COLUMN".
        var nullified: [String: Int] = [:]
        var joinRows = 0
        /// The rows deleted, by table (for the check after the purge).
        var deleted: [String: [Int64]] = [:]
        /// "TABLE.COLUMN" of a join table -> the ids whose join rows are deleted (`planned()` only).
        var joinIDs: [String: Set<Int64>] = [:]
        /// "TABLE.COLUMN" -> the ids whose references are nullified (`planned()` only).
        var nullifiedIDs: [String: Set<Int64>] = [:]
    }

    /// Counts what `apply` would change (the dry run).
    func count(db: Database) throws -> Effects {
        try perform(db: db, apply: false)
    }

    /// Deletes and updates, inside the caller's transaction.
    func apply(db: Database) throws -> Effects {
        try perform(db: db, apply: true)
    }

    /// What `apply` will change, by id, before it runs (what `BatchCheck` holds the batch's
    /// changes against): the rows deleted per table, and per join-table or reference column the
    /// ids whose rows it deletes or nullifies. The same selection as `perform`'s.
    func planned() -> Effects {
        let ids = allowedIDs
        var effects = Effects()
        for (table, rows) in deletes {
            let ids = ids(rows)
            if !ids.isEmpty { effects.deleted[table, default: []] += ids }
        }
        for (key, rows) in joins {
            let ids = ids(rows)
            if !ids.isEmpty { effects.joinIDs["\(key.table).\(key.column)", default: []].formUnion(ids) }
        }
        for (key, rows) in nullify {
            let ids = ids(rows)
            if !ids.isEmpty { effects.nullifiedIDs["\(key.table).\(key.column)", default: []].formUnion(ids) }
        }
        return effects
    }

    /// The rows of a map that no denied root reaches (what a batch changes), by id.
    private var allowedIDs: ([Int64: Roots]) -> [Int64] {
        let blocked = Set(denied.keys)
        return { rows in rows.filter { $0.value.isDisjoint(with: blocked) }.map(\.key) }
    }

    private func perform(db: Database, apply: Bool) throws -> Effects {
        let allowedIDs = allowedIDs
        var effects = Effects()
        for (table, rows) in deletes.sorted(by: { $0.key < $1.key }) {
            let ids = allowedIDs(rows)
            guard !ids.isEmpty else { continue }
            if table == rootTable {
                let roots = ids.filter { rows[$0]?.contains($0) == true }
                effects.roots = roots.count
                if ids.count > roots.count { effects.cascaded[table, default: 0] += ids.count - roots.count }
            } else {
                effects.cascaded[table, default: 0] += ids.count
            }
            effects.deleted[table, default: []] += ids
            if apply { try db.execute(sql: Self.deleteStatement(table).sql, arguments: [Self.json(ids)]) }
        }
        for (key, rows) in joins.sorted(by: { $0.key.table < $1.key.table }) {
            let ids = allowedIDs(rows)
            guard !ids.isEmpty else { continue }
            if apply {
                try db.execute(sql: Self.joinDeleteStatement(table: key.table, column: key.column).sql, arguments: [Self.json(ids)])
                effects.joinRows += db.changesCount
            } else {
                effects.joinRows += try Int.fetchOne(db, sql: "SELECT count(*) \(Self.joinCondition(table: key.table, column: key.column))",
                                                     arguments: [Self.json(ids)]) ?? 0
            }
        }
        for (key, rows) in nullify.sorted(by: { $0.key.table < $1.key.table }) {
            let ids = allowedIDs(rows)
            guard !ids.isEmpty else { continue }
            // Rows this batch deletes need no nullifying (the count must match what applying does).
            let deleted = Self.json(allowedIDs(deletes[key.table] ?? [:]))
            let label = "\(key.table).\(key.column)"
            if apply {
                try db.execute(sql: Self.nullifyStatement(table: key.table, column: key.column, entities: key.entities, bumpsOpt: key.bumpsOpt).sql,
                               arguments: [Self.json(ids), deleted])
                effects.nullified[label, default: 0] += db.changesCount
            } else {
                let condition = Self.nullifyCondition(column: key.column, entities: key.entities)
                effects.nullified[label, default: 0] += try Int.fetchOne(db, sql: "SELECT count(*) FROM \(quoteIdentifier(key.table)) \(condition)",
                                                                          arguments: [Self.json(ids), deleted]) ?? 0
            }
        }
        effects.nullified = effects.nullified.filter { $0.value > 0 }
        return effects
    }

    // The statements a batch runs, written once (`DeleteGraph.writes` lists them for `TriggerLint`).

    static func deleteStatement(_ table: String) -> TriggerLint.Write {
        .init(table: table, sql: "DELETE FROM \(quoteIdentifier(table)) WHERE rowid IN (SELECT value FROM json_each(?))")
    }

    static func joinCondition(table: String, column: String) -> String {
        "FROM \(quoteIdentifier(table)) WHERE \(quoteIdentifier(column)) IN (SELECT value FROM json_each(?))"
    }

    static func joinDeleteStatement(table: String, column: String) -> TriggerLint.Write {
        .init(table: table, sql: "DELETE \(joinCondition(table: table, column: column))")
    }

    static func nullifyCondition(column: String, entities: [Int]) -> String {
        let scope = entities.isEmpty ? "" : " AND Z_ENT IN (\(entities.map(String.init).joined(separator: ", ")))"
        return "WHERE \(quoteIdentifier(column)) IN (SELECT value FROM json_each(?))\(scope) AND rowid NOT IN (SELECT value FROM json_each(?))"
    }

    static func nullifyStatement(table: String, column: String, entities: [Int], bumpsOpt: Bool) -> TriggerLint.Write {
        let opt = bumpsOpt ? ", Z_OPT = coalesce(Z_OPT, 0) + 1" : ""
        return .init(table: table, sql: "UPDATE \(quoteIdentifier(table)) SET \(quoteIdentifier(column)) = NULL\(opt) \(nullifyCondition(column: column, entities: entities))")
    }

    /// Row ids as a JSON array, bound as one argument and read back with json_each().
    static func json<S: Sequence>(_ ids: S) -> String where S.Element == Int64 {
        "[" + ids.map(String.init).joined(separator: ",") + "]"
    }
}

