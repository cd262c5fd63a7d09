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

