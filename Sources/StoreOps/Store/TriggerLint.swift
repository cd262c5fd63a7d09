import Foundation
import GRDB

/// Finds the triggers a planned statement would fire that call SQL functions this connection
/// lacks: Core Data registers functions such as `NSCoreDataTriggerUpdateAffectedObjectValue` at
/// run time and Photos-style stores have triggers (on DELETE too) that call them. Outside Core
/// Data, any statement firing one fails with "no such function".
///
/// SQLite compiles the triggers a statement can fire when it prepares the statement, so each
/// planned statement is prepared (never run) on a read-only connection of its own: a missing
/// function is a prepare error naming it. To find every missing function, not only the first, a
/// stub is registered on that throwaway connection and the statement prepared again. No stub is
/// ever registered on a connection that runs anything: a stand-in would silently skip what the
/// trigger maintains.
public enum TriggerLint {
    public struct Write: Sendable, Equatable {
        /// The table the statement writes, when known (purge statements); nil for arbitrary SQL.
        public var table: String?
        public var sql: String
        public init(table: String?, sql: String) {
            self.table = table
            self.sql = sql
        }
    }

    public struct Problem: Sendable, Codable, Equatable, CustomStringConvertible {
        public var table: String?
        public var function: String
        /// "NAME (on TABLE)" of the triggers that call the function.
        public var triggers: [String]

        public var description: String {
            let what = table.map { "writing \($0)" } ?? "this statement"
            let fired = triggers.isEmpty ? "a trigger" : "trigger\(triggers.count == 1 ? "" : "s") \(triggers.joined(separator: ", "))"
            return "\(what) fires \(fired), which call\(triggers.count == 1 ? "s" : "") \(function)(), a function only the app "
                + "(Core Data) registers: outside it the statement fails with \"no such function\""
        }
    }

    public static let hint = "change these rows from the app itself (Core Data runs these triggers), or leave this table out; "
        + "storectl does not register stand-ins that would skip what the triggers maintain"

    /// Prepares each statement on its own read-only connection to `store` and reports every
    /// missing function (each once).
    public static func check(store: String, writes: [Write]) throws -> [Problem] {
        guard !writes.isEmpty else { return [] }
        let queue = try StoreConnection.open(store, access: .readOnly, busyTimeout: 5, label: "storectl.trigger-lint")
        defer { try? queue.close() }
        return try queue.inDatabase { db in
            let triggers = try Row.fetchAll(db, sql: "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger'")
                .map { (name: $0.text(0) ?? "?", table: $0.text(1) ?? "?", sql: ($0.text(2) ?? "").uppercased()) }
            guard !triggers.isEmpty else { return [] }
            var problems: [Problem] = []
            var stubbed = Set<String>()
            for write in writes {
                for _ in 0..<64 {
                    do {
                        _ = try db.makeStatement(sql: write.sql)
                        break
                    } catch let error as DatabaseError {
                        guard let message = error.message, message.hasPrefix("no such function: ") else { break }
                        let function = String(message.dropFirst("no such function: ".count))
                        guard stubbed.insert(function.uppercased()).inserted else { break }
                        db.add(function: DatabaseFunction(function, argumentCount: nil, pure: false) { _ in nil })
                        let calling = triggers.filter { calls($0.sql, function) }
                        let onTable = calling.filter { trigger in
                            guard let table = write.table, trigger.table.caseInsensitiveCompare(table) == .orderedSame else { return false }
                            return fires(trigger.sql, for: write.sql.uppercased())
                        }
                        let named = (onTable.isEmpty ? calling : onTable).map { "\($0.name) (on \($0.table))" }
                        problems.append(Problem(table: write.table, function: function, triggers: named))
                    }
                }
            }
            return problems
        }
    }

    /// Whether a trigger (upper-cased SQL) fires for a statement (upper-cased): its event is the
    /// statement's verb, and for `UPDATE OF columns` one of those columns is set.
    static func fires(_ trigger: String, for statement: String) -> Bool {
        let verb = statement.split(separator: " ").first.map(String.init) ?? ""
        let header = trigger.components(separatedBy: " BEGIN").first ?? trigger
        guard header.contains(" \(verb) ON ") || header.contains(" \(verb) OF ") else { return false }
        guard verb == "UPDATE", let of = header.range(of: " UPDATE OF ") else { return true }
        let columns = header[of.upperBound...].components(separatedBy: " ON ").first?
            .split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\"`[]")) } ?? []
        let set = statement.components(separatedBy: " WHERE ").first ?? statement
        return columns.contains { set.contains("\"\($0)\" =") || set.contains(" \($0) =") }
    }

    /// Whether upper-cased trigger SQL calls `function(`.
    static func calls(_ sql: String, _ function: String) -> Bool {
        let name = function.uppercased()
        var search = sql.startIndex
        while let range = sql.range(of: name, range: search..<sql.endIndex) {
            let before = range.lowerBound == sql.startIndex ? " " : sql[sql.index(before: range.lowerBound)]
            let after = sql[range.upperBound...].drop { $0 == " " }.first
            if !(before.isLetter || before.isNumber || before == "_"), after == "(" { return true }
            search = range.upperBound
        }
        return false
    }
}
