import Foundation

/// The result of one preflight check: one line of the report.
public struct Check: Sendable, Codable, Equatable {
    public enum Status: String, Sendable, Codable, Comparable {
        case ok, warn, fail, skip

        private var rank: Int { [.skip: 0, .ok: 1, .warn: 2, .fail: 3][self]! }
        public static func < (a: Status, b: Status) -> Bool { a.rank < b.rank }
    }

    /// Stable identifier for machines, e.g. "integrity.quick_check".
    public var id: String
    public var status: Status
    /// The figure, short: "1.0 GiB free, 2.1 GiB needed".
    public var summary: String
    /// Details, one per line (problems found, samples).
    public var details: [String] = []
    /// What to do about a warning or failure.
    public var advice: String?
    /// The check's figures for machines (bytes, counts, pids, the problems found), by name.
    public var figures: [String: JSONValue]

    public init(_ id: String, _ status: Status, _ summary: String, details: [String] = [], advice: String? = nil,
                figures: [String: JSONValue] = [:]) {
        self.id = id
        self.status = status
        self.summary = summary
        self.details = details
        self.advice = advice
        self.figures = figures
    }
}

extension Check {
    /// The same check with these figures.
    func with(_ figures: [String: JSONValue]) -> Check {
        var copy = self
        copy.figures = figures
        return copy
    }
}

/// What `storectl preflight` returns: every check, the Core Data entity counts, and the verdict.
public struct PreflightReport: Sendable, Codable {
    /// True when no check failed (warnings pass): the verdict, for machines.
    public var ok: Bool
    /// The exit status `storectl preflight` ends with: 0 passed, 2 a check failed.
    public var status: Int32
    public var store: String
    public var operation: Preflight.Operation
    public var destination: String
    public var checks: [Check]
    /// Core Data stores only: rows per entity.
    public var entities: [CoreDataCensus.EntityCount]?
    public var startedAt: Date
    public var durationSeconds: Double

    public init(store: String, operation: Preflight.Operation, destination: String, checks: [Check],
                entities: [CoreDataCensus.EntityCount]?, startedAt: Date, durationSeconds: Double) {
        let passed = !checks.contains { $0.status == .fail }
        ok = passed
        status = passed ? ExitStatus.ok.rawValue : ExitStatus.checksFailed.rawValue
        self.store = store
        self.operation = operation
        self.destination = destination
        self.checks = checks
        self.entities = entities
        self.startedAt = startedAt
        self.durationSeconds = durationSeconds
    }

    /// True when no check failed (warnings pass).
    public var passed: Bool { !checks.contains { $0.status == .fail } }

    public func check(_ id: String) -> Check? { checks.first { $0.id == id } }

    /// The human-readable table: one line per check, then the entity counts.
    public func renderTable() -> String {
        var lines = ["preflight \(store)  (for \(operation.rawValue) -> \(destination))"]
        let width = max(24, checks.map(\.id.count).max() ?? 0)
        for check in checks {
            let label = check.id.padding(toLength: width, withPad: " ", startingAt: 0)
            lines.append("  \(check.status.rawValue.padding(toLength: 5, withPad: " ", startingAt: 0)) \(label)  \(check.summary)")
            for detail in check.details { lines.append("        \(String(repeating: " ", count: width))    \(detail)") }
            if let advice = check.advice, check.status >= .warn {
                lines.append("        \(String(repeating: " ", count: width))    -> \(advice)")
            }
        }
        if let entities, !entities.isEmpty {
            lines.append("")
            lines.append("  entities (Core Data)")
            let nameWidth = max(12, entities.map(\.entity.count).max() ?? 0)
            for entity in entities {
                let rows = entity.rows.map { Format.count($0) } ?? "no table"
                let table = entity.table.map { "  \($0)" } ?? ""
                lines.append("    \(entity.entity.padding(toLength: nameWidth, withPad: " ", startingAt: 0))  \(rows.leftPadded(to: 12))\(table)")
            }
        }
        let counts = Dictionary(grouping: checks, by: \.status).mapValues(\.count)
        let tally = [Check.Status.ok, .warn, .fail, .skip].compactMap { s in counts[s].map { "\($0) \(s.rawValue)" } }
        lines.append("")
        lines.append("result: \(passed ? "ok" : "FAILED") (\(tally.joined(separator: ", ")); \(Format.duration(durationSeconds)))")
        return lines.joined(separator: "\n")
    }
}

extension String {
    public func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
