import Foundation
import GRDB

/// A purge rule resolved against the real store: real table and column names (checked, then
/// quoted), the entity family, the cutoff, and the Core Data delete rules to honour.
///
/// Nothing from a policy reaches SQL unchecked: a name is used only after it was found in
/// `sqlite_master` or `PRAGMA table_info`, and then only quoted; values (the cutoff, row ids) are
/// always bound.
public struct PurgeTarget: Sendable {
    public var rule: PurgeRule
    /// The real table name.
    public var table: String
    /// `Z_ENT` values selected (Core Data entity rules); empty means every row of the table.
    public var entityFilter: [Int]
    public var entityName: String?
    public var flagColumn: String?
    public var deletedAtColumn: String?
    /// Rows deleted at or before this moment go.
    public var cutoff: Date?
    /// Core Data delete rules; nil when the store has no model (only the named rows go).
    public var graph: DeleteGraph?
    /// Things the operator should know (no model cache, history not recorded, ...).
    public var notes: [String]

    /// The condition selecting this rule's rows (rowid cursor excluded), with its arguments.
    var condition: (sql: String, arguments: StatementArguments) {
        var parts: [String] = []
        var arguments: StatementArguments = []
        if !entityFilter.isEmpty {
            parts.append("Z_ENT IN (\(entityFilter.map(String.init).joined(separator: ", ")))")
        }
        if let flag = flagColumn { parts.append("\(quoteIdentifier(flag)) != 0") }
        if let column = deletedAtColumn, let cutoff {
            let quoted = quoteIdentifier(column)
            if rule.timeFormat == .iso8601 {
                parts.append("julianday(\(quoted)) <= julianday(?)")
            } else {
                parts.append("\(quoted) IS NOT NULL AND \(quoted) <= ?")
            }
            _ = arguments.append(contentsOf: [rule.timeFormat.databaseValue(of: cutoff)])
        }
        return (parts.isEmpty ? "1" : parts.joined(separator: " AND "), arguments)
    }

    /// The statement a batch selects its rows with (shown by `policy explain`).
    var batchSelectSQL: String {
        "SELECT rowid FROM \(quoteIdentifier(table)) WHERE rowid > ? AND \(condition.sql) ORDER BY rowid LIMIT ?"
    }

    /// Rows the rule would take now, and the rows it chooses among (the circuit breaker's base).
    func counts(_ db: Database) throws -> (candidates: Int, total: Int) {
        let (sql, arguments) = condition
        let candidates = try Int.fetchOne(db, sql: "SELECT count(*) FROM \(quoteIdentifier(table)) WHERE \(sql)", arguments: arguments) ?? 0
        let scope = entityFilter.isEmpty ? "" : " WHERE Z_ENT IN (\(entityFilter.map(String.init).joined(separator: ", ")))"
        let total = try Int.fetchOne(db, sql: "SELECT count(*) FROM \(quoteIdentifier(table))\(scope)") ?? 0
        return (candidates, total)
    }
}

/// Resolves a policy's rules against a store.
public enum PurgePlanner {
    /// Tables a purge never touches: Core Data's bookkeeping and history, SQLite's, storectl's.
    static func isProtected(_ table: String, coreData: CoreDataStore?) -> Bool {
        let upper = table.uppercased()
        if ["Z_PRIMARYKEY", "Z_METADATA", "Z_MODELCACHE"].contains(upper) { return true }
        if upper.hasPrefix("SQLITE_") || upper.hasPrefix("STORECTL_") { return true }
        if let coreData, coreData.entities.contains(where: { $0.ent >= 16_000 && $0.table?.uppercased() == upper }) { return true }
        return ["ACHANGE", "ATRANSACTION", "ATRANSACTIONSTRING"].contains(upper)
    }

    /// Checks every rule against the store's schema and model.
    ///
    /// - Returns: the resolved targets, or every problem found (exit 65 when reported).
    public static func resolve(_ policy: Policy, db: Database, now: Date = Date()) throws -> Result<[PurgeTarget], PolicyProblems> {
        let source = (try? String(contentsOfFile: policy.file, encoding: .utf8)) ?? ""
        let sink = ProblemSink(lines: TOMLLines(source: source))
        let coreData = try? CoreDataStore.read(db)
        let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'")
        var targets: [PurgeTarget] = []
        for (index, rule) in policy.rules.enumerated() {
            let path = ["purge", "\(index)"]
            func problem(_ key: String, _ message: String) { sink.add(path + [key], message) }
            var table: String?
            var filter: [Int] = []
            var entityName: String?
            switch rule.target {
            case .table(let name):
                guard let real = tables.first(where: { $0.caseInsensitiveCompare(name) == .orderedSame }) else {
                    problem("table", "no table \(name.debugDescription) in \(policy.store.path); tables: \(tables.sorted().joined(separator: ", "))")
                    continue
                }
                table = real
            case .entity(let name):
                guard let coreData else {
                    problem("entity", "\(policy.store.path) is not a Core Data store (no Z_PRIMARYKEY/Z_METADATA); name a table instead")
                    continue
                }
                guard let entity = coreData.entity(named: name) else {
                    problem("entity", "no entity \(name.debugDescription) in Z_PRIMARYKEY; entities: \(coreData.entities.map(\.name).joined(separator: ", "))")
                    continue
                }
                guard let real = entity.table else {
                    problem("entity", "entity \(name) has no table in the store")
                    continue
                }
                table = real
                entityName = entity.name
                let family = coreData.family(of: entity.ent).map(\.ent)
                let sharing = coreData.entities.filter { $0.table == real }.map(\.ent)
                if Set(sharing) != Set(family) { filter = family }
            }
            guard let table else { continue }
            if isProtected(table, coreData: coreData) {
                problem(rule.target.description.hasPrefix("table") ? "table" : "entity",
                        "\(table) is Core Data's, SQLite's or storectl's own bookkeeping and is never purged")
                continue
            }
            if (try? Row.fetchOne(db, sql: "SELECT rowid FROM \(quoteIdentifier(table)) LIMIT 0")) == nil,
               (try? db.makeStatement(sql: "SELECT rowid FROM \(quoteIdentifier(table)) LIMIT 0")) == nil {
                problem("table", "\(table) is a WITHOUT ROWID table; storectl purges rowid tables only")
                continue
            }
            let columns = try db.columns(in: table).map(\.name)
            func column(_ key: String, _ name: String?) -> String?? {
                guard let name else { return .some(nil) }
                guard let real = columns.first(where: { $0.caseInsensitiveCompare(name) == .orderedSame }) else {
                    problem(key, "no column \(name.debugDescription) in \(table); columns: \(columns.joined(separator: ", "))")
                    return nil
                }
                return .some(real)
            }
            guard let flag = column("deleted_flag", rule.deletedFlag), let deletedAt = column("deleted_at", rule.deletedAt) else { continue }
            var notes: [String] = []
            var graph: DeleteGraph?
            if let coreData, table.uppercased().hasPrefix("Z") {
                if coreData.model != nil {
                    do {
                        graph = try DeleteGraph(store: coreData, db: db)
                        let roots = filter.isEmpty ? coreData.entities.filter { $0.table == table }.map(\.ent) : filter
                        for problem in graph!.unresolved(from: roots) {
                            sink.add(path + [rule.target.description.hasPrefix("table") ? "table" : "entity"], problem)
                        }
                    } catch let error as StoreOpsError {
                        problem("entity", error.message)
                    }
                } else {
                    notes.append("\(coreData.modelUnavailableReason ?? "no model cache"): Core Data relationships are not followed; only rows of \(table) are deleted")
                }
                if coreData.entities.contains(where: { $0.ent >= 16_000 }) {
                    notes.append("the store records persistent history; rows deleted outside Core Data leave no history, so sync (CloudKit) does not learn of them")
                }
            }
            // Triggers the batches would fire that call functions only the app registers: refused now.
            let roots = filter.isEmpty ? (coreData?.entities.filter { $0.table == table }.map(\.ent) ?? []) : filter
            let writes = graph?.writes(from: roots, rootTable: table) ?? [BatchClosure.deleteStatement(table)]
            for trigger in try TriggerLint.check(store: policy.store.path, writes: writes) {
                problem(rule.target.description.hasPrefix("table") ? "table" : "entity", "\(trigger); \(TriggerLint.hint)")
            }
            let cutoff = rule.retention.map { now.addingTimeInterval(-$0.seconds) }
            targets.append(PurgeTarget(rule: rule, table: table, entityFilter: filter, entityName: entityName, flagColumn: flag,
                                       deletedAtColumn: deletedAt, cutoff: cutoff, graph: graph, notes: notes))
        }
        guard sink.problems.isEmpty else { return .failure(PolicyProblems(file: policy.file, problems: sink.problems)) }
        return .success(targets)
    }
}
