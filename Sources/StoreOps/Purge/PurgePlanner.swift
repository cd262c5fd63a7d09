import Foundation
import GRDB

/// Resolves a policy's rules against a store: which table, which rows, which delete rules.
///
/// `plan` is a pure function of the policy and a `StoreSchema` (tested with hand-made schemas);
/// `resolve` is the edge that reads the schema and adds what needs the store itself (triggers
/// calling functions only the app registers, found by preparing the statements, see `TriggerLint`).
public enum PurgePlanner {
    /// Tables a purge never touches: Core Data's bookkeeping and history, SQLite's, storectl's.
    static func isProtected(_ table: String, coreData: CoreDataStore?) -> Bool {
        let upper = table.uppercased()
        if ["Z_PRIMARYKEY", "Z_METADATA", "Z_MODELCACHE"].contains(upper) { return true }
        if upper.hasPrefix("SQLITE_") || upper.hasPrefix("STORECTL_") { return true }
        if let coreData, coreData.entities.contains(where: { $0.ent >= 16_000 && $0.table?.uppercased() == upper }) { return true }
        return ["ACHANGE", "ATRANSACTION", "ATRANSACTIONSTRING"].contains(upper)
    }

    /// Reads the store's schema, plans, and checks the planned statements' triggers.
    ///
    /// - Returns: the resolved targets, or every problem found (exit 65 when reported).
    public static func resolve(_ policy: Policy, db: Database, now: Date = Date()) throws -> Result<[PurgeTarget], PolicyProblems> {
        let source = (try? String(contentsOfFile: policy.file, encoding: .utf8)) ?? ""
        let sink = ProblemSink(lines: TOMLLines(source: source))
        let targets = plan(policy, schema: try StoreSchema.read(db), now: now, sink: sink)
        for (index, target) in targets.enumerated() {
            if let problem = try timeFormatProblem(target, db: db, now: now) {
                sink.add(["purge", "\(index)", "time_format"], problem)
            }
            for trigger in try TriggerLint.check(store: policy.store.path, writes: target.writes) {
                sink.add(["purge", "\(index)", target.rule.target.key], "\(trigger); \(TriggerLint.hint)")
            }
        }
        guard sink.problems.isEmpty else { return .failure(PolicyProblems(file: policy.file, problems: sink.problems)) }
        return .success(targets)
    }

    /// Whether the deletion times read as the rule's `time_format` are times a row could have been
    /// deleted at: the newest after 2000 and not ahead of now (a day's grace). A Core Data store's
    /// seconds since 2001 read as `unix` are all in 1970-1996, so every soft-deleted row was past
    /// its retention (a trial's check said ok and the purge would take rows deleted yesterday);
    /// numbers read as ISO-8601 match nothing, for ever. Says which format fits, when one does.
    static func timeFormatProblem(_ target: PurgeTarget, db: Database, now: Date) throws -> String? {
        guard let column = target.deletedAtColumn else { return nil }
        let quoted = quoteIdentifier(column)
        // The rows the rule looks at (its entities, flagged deleted), with a time.
        var scope = target.entityFilter.isEmpty ? [] : ["Z_ENT IN (\(target.entityFilter.map(String.init).joined(separator: ", ")))"]
        if let flag = target.flagColumn { scope.append("\(quoteIdentifier(flag)) != 0") }
        scope.append("\(quoted) IS NOT NULL")
        guard let row = try Row.fetchOne(db, sql: """
            SELECT max(CASE WHEN typeof(\(quoted)) IN ('integer', 'real') THEN \(quoted) END),
                   count(CASE WHEN typeof(\(quoted)) IN ('integer', 'real') THEN 1 END),
                   count(CASE WHEN typeof(\(quoted)) = 'text' THEN 1 END)
            FROM \(quoteIdentifier(target.table)) WHERE \(scope.joined(separator: " AND "))
            """) else { return nil }
        let newest: Double? = row[0], numbers: Int = row[1] ?? 0, texts: Int = row[2] ?? 0
        let earliest = Date(timeIntervalSince1970: 946_684_800), latest = now.addingTimeInterval(86_400)   // 2000-01-01; a day ahead
        func date(_ value: Double, as format: PurgeRule.TimeFormat) -> Date? {
            switch format {
            case .coredata: Date(timeIntervalSince1970: value + CoreDataStore.referenceDateOffset)
            case .unix: Date(timeIntervalSince1970: value)
            case .unixMs: Date(timeIntervalSince1970: value / 1000)
            case .iso8601: nil
            }
        }
        let format = target.rule.timeFormat
        if format == .iso8601 {
            guard numbers > 0, texts == 0, let newest else { return nil }
            let fits = PurgeRule.TimeFormat.allCases.filter { date(newest, as: $0).map { $0 >= earliest && $0 <= latest } ?? false }
            return "\(column) holds numbers, not ISO-8601 text: no row would ever match" + (fits.first.map { "; its values read as \"\($0.rawValue)\" are recent times" } ?? "")
        }
        guard let newest else {
            return texts > 0 && numbers == 0 ? "\(column) holds text, not numbers: time_format \"iso8601\" reads it" : nil
        }
        // Only the direction that harms: every time before 2000 puts every row past its retention.
        // (All ahead of now purges nothing, as rows kept for later or a partly done purge's rest
        // may be: not refused; a crash test's store was.)
        guard let read = date(newest, as: format), read < earliest else { return nil }
        let fits = PurgeRule.TimeFormat.allCases.filter { $0 != format && (date(newest, as: $0).map { $0 >= earliest && $0 <= latest } ?? false) }
        return "\(column)'s newest value \(newest) read as \"\(format.rawValue)\" is \(Timestamp.iso(read)): no row was deleted then"
            + (fits.first.map { "; read as \"\($0.rawValue)\" it is \(Timestamp.iso(date(newest, as: $0) ?? read)): is time_format \"\($0.rawValue)\"?" } ?? "")
            + " (a wrong format would purge rows still inside their retention, or none)"
    }

    /// Plans every rule against a schema value: no I/O (the trigger check is `resolve`'s).
    public static func plan(_ policy: Policy, schema: StoreSchema, now: Date) -> Result<[PurgeTarget], PolicyProblems> {
        let sink = ProblemSink(lines: TOMLLines(source: ""))
        let targets = plan(policy, schema: schema, now: now, sink: sink)
        return sink.problems.isEmpty ? .success(targets) : .failure(PolicyProblems(file: policy.file, problems: sink.problems))
    }

    /// Checks every rule against the schema and the Core Data model, and resolves it: a pure function.
    static func plan(_ policy: Policy, schema: StoreSchema, now: Date, sink: ProblemSink) -> [PurgeTarget] {
        let graph: Result<DeleteGraph, StoreOpsError>? = schema.coreData?.model == nil ? nil : Result { try DeleteGraph(schema: schema) }
            .mapError { ($0 as? StoreOpsError) ?? StoreOpsError(.badData, "\($0)") }
        return policy.rules.enumerated().compactMap { index, rule in
            plan(rule, index: index, policy: policy, schema: schema, graph: graph, now: now) { key, message in
                sink.add(["purge", "\(index)", key], message)
            }
        }
    }

    /// One rule: its table (and Z_ENT family), its columns, its delete graph and notes.
    static func plan(_ rule: PurgeRule, index: Int, policy: Policy, schema: StoreSchema, graph: Result<DeleteGraph, StoreOpsError>?,
                     now: Date, problem: (String, String) -> Void) -> PurgeTarget? {
        let coreData = schema.coreData
        guard let (table, filter, entityName) = target(of: rule, policy: policy, schema: schema, problem: problem) else { return nil }
        if isProtected(table, coreData: coreData) {
            problem(rule.target.key, "\(table) is Core Data's, SQLite's or storectl's own bookkeeping and is never purged")
            return nil
        }
        if schema.withoutRowid.contains(table) {
            problem("table", "\(table) is a WITHOUT ROWID table; storectl purges rowid tables only")
            return nil
        }
        let columns = schema.columns(of: table)
        func column(_ key: String, _ name: String?) -> String?? {
            guard let name else { return .some(nil) }
            guard let real = columns.first(where: { $0.caseInsensitiveCompare(name) == .orderedSame }) else {
                problem(key, "no column \(name.debugDescription) in \(table)\(Format.didYouMean(name, among: columns)); columns: \(columns.joined(separator: ", "))")
                return nil
            }
            return .some(real)
        }
        guard let flag = column("deleted_flag", rule.deletedFlag), let deletedAt = column("deleted_at", rule.deletedAt) else { return nil }
        var notes: [String] = []
        var deleteGraph: DeleteGraph?
        if let coreData, table.uppercased().hasPrefix("Z") {
            switch graph {
            case .success(let built)?:
                deleteGraph = built
                let roots = filter.isEmpty ? coreData.entities.filter { $0.table == table }.map(\.ent) : filter
                for text in built.unresolved(from: roots) { problem(rule.target.key, text) }
            case .failure(let error)?:
                problem("entity", error.message)
            case nil:
                notes.append("\(coreData.modelUnavailableReason ?? "no model cache"): Core Data relationships are not followed; only rows of \(table) are deleted")
            }
            if coreData.entities.contains(where: { $0.ent >= 16_000 }) {
                notes.append("the store records persistent history; rows deleted outside Core Data leave no history, so sync (CloudKit) does not learn of them")
            }
        }
        let roots = filter.isEmpty ? (coreData?.entities.filter { $0.table == table }.map(\.ent) ?? []) : filter
        return PurgeTarget(rule: rule, table: table, entityFilter: filter, entityName: entityName, flagColumn: flag, deletedAtColumn: deletedAt,
                           cutoff: rule.retention.map { now.addingTimeInterval(-$0.seconds) }, graph: deleteGraph, notes: notes,
                           writes: deleteGraph?.writes(from: roots, rootTable: table) ?? [BatchClosure.deleteStatement(table)])
    }

    /// The rule's table, the Z_ENT values it selects (empty: every row), and its entity's name.
    static func target(of rule: PurgeRule, policy: Policy, schema: StoreSchema,
                       problem: (String, String) -> Void) -> (table: String, filter: [Int], entity: String?)? {
        switch rule.target {
        case .table(let name):
            guard let real = schema.table(name) else {
                problem("table", "no table \(name.debugDescription) in \(policy.store.path)\(Format.didYouMean(name, among: schema.tableNames)); tables: \(schema.tableNames.joined(separator: ", "))")
                // The rest of the rule checked against the table it is nearest to, so one round
                // lists its other problems too (a trial needed three rounds for one file); the
                // policy is refused all the same.
                guard let near = Format.nearest(name, among: schema.tableNames), let table = schema.table(near),
                      !isProtected(table, coreData: schema.coreData) else { return nil }
                return (table, [], nil)
            }
            return (real, [], nil)
        case .entity(let name):
            guard let coreData = schema.coreData else {
                problem("entity", "\(policy.store.path) is not a Core Data store (no Z_PRIMARYKEY/Z_METADATA); name a table instead")
                return nil
            }
            let names = coreData.entities.map(\.name)
            let named = coreData.entity(named: name)
            if named == nil {
                problem("entity", "no entity \(name.debugDescription) in Z_PRIMARYKEY\(Format.didYouMean(name, among: names)); entities: \(names.joined(separator: ", "))")
            }
            // As for a table: the rest of the rule checked against the nearest entity.
            guard let entity = named ?? Format.nearest(name, among: names).flatMap({ coreData.entity(named: $0) }) else { return nil }
            guard let real = entity.table else {
                problem("entity", "entity \(name) has no table in the store")
                return nil
            }
            let family = coreData.family(of: entity.ent).map(\.ent)
            let sharing = coreData.entities.filter { $0.table == real }.map(\.ent)
            return (real, Set(sharing) != Set(family) ? family : [], entity.name)
        }
    }
}
