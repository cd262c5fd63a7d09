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
    /// Every statement the rule's batches can run (for `TriggerLint`).
    public var writes: [TriggerLint.Write] = []

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

    /// The statement re-checking a batch's candidates under the write lock.
    var confirmSQL: String {
        "SELECT rowid FROM \(quoteIdentifier(table)) WHERE rowid IN (SELECT value FROM json_each(?)) AND \(condition.sql) ORDER BY rowid"
    }

    /// The rule's own limits: `max_rows` deleted, `max_runtime` passed.
    func limitReached(deleted: Int, since started: Date) -> StopReason? {
        if let max = rule.maxRows, deleted >= max { return .maxRows(max) }
        if let limit = rule.maxRuntime, Date().timeIntervalSince(started) >= limit.seconds { return .maxRuntime(limit.seconds) }
        return nil
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

