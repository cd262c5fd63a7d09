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

    public var ending: Ending {
        passed ? .ok : Ending(.checksFailed, error: StoreOpsError(.checksFailed, "preflight failed: " + checks.filter { $0.status == .fail }.map(\.id).joined(separator: ", ")))
    }

    public func check(_ id: String) -> Check? { checks.first { $0.id == id } }


}

extension String {
    public func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}
