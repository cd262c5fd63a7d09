import Foundation

/// Which snapshots a retention policy keeps: the rules of restic's `forget`.
///
/// - Rules are OR-ed: a snapshot is kept when any rule keeps it, and every such rule is a reason.
/// - `last N` keeps the N newest. `hourly N`, `daily N`, `weekly N`, `monthly N`, `yearly N` keep
///   the newest snapshot of each of the N most recent hours/days/ISO weeks/months/years that
///   *have* snapshots (not calendar periods counted back from now). -1 means no limit.
/// - `within D` keeps every snapshot taken within D of the newest snapshot, not of now, so
///   nothing expires merely because backups stopped.
/// - `tags` keeps every snapshot carrying one of them.
/// - The newest snapshot whose last verification passed is always kept.
///
/// Periods are UTC calendar periods (a snapshot at 23:30 UTC belongs to that UTC day wherever the
/// server is). A pure function of its inputs, so it is tested with fixed snapshot lists.
public struct RetentionPolicy: Sendable, Codable, Equatable {
    public var last: Int?
    public var hourly: Int?
    public var daily: Int?
    public var weekly: Int?
    public var monthly: Int?
    public var yearly: Int?
    public var within: DurationText?
    public var tags: [String] = []

    public init(last: Int? = nil, hourly: Int? = nil, daily: Int? = nil, weekly: Int? = nil, monthly: Int? = nil,
                yearly: Int? = nil, within: DurationText? = nil, tags: [String] = []) {
        self.last = last
        self.hourly = hourly
        self.daily = daily
        self.weekly = weekly
        self.monthly = monthly
        self.yearly = yearly
        self.within = within
        self.tags = tags
    }

    /// True when no rule is set: such a policy would remove everything and is refused.
    public var isEmpty: Bool {
        [last, hourly, daily, weekly, monthly, yearly].allSatisfy { $0 == nil || $0 == 0 } && within == nil && tags.isEmpty
    }

    /// Checks counts (-1 or more). - Throws: exit 64 naming the option.
    public func validate() throws {
        for (name, value) in [("last", last), ("hourly", hourly), ("daily", daily), ("weekly", weekly), ("monthly", monthly), ("yearly", yearly)] {
            if let value, value < -1 {
                throw StoreOpsError(.usage, "--keep-\(name) \(value): expected a count, or -1 for no limit")
            }
        }
    }
}

public struct RetentionCandidate: Sendable, Equatable {
    public var id: String
    public var time: Date
    public var tags: [String]
    /// Its last verification passed.
    public var verified: Bool

    public init(id: String, time: Date, tags: [String] = [], verified: Bool = false) {
        self.id = id
        self.time = time
        self.tags = tags
        self.verified = verified
    }
}

public struct RetentionDecision: Sendable, Codable, Equatable {
    public var id: String
    public var time: Date
    public var keep: Bool
    /// Why it is kept ("daily snapshot", "within 2d of the newest", ...), or why removed.
    public var reasons: [String]
}

public enum Retention {
    /// Decides keep or remove for every snapshot; returns the decisions newest first.
    public static func apply(_ policy: RetentionPolicy, to snapshots: [RetentionCandidate]) -> [RetentionDecision] {
        let sorted = snapshots.sorted { ($0.time, $0.id) > ($1.time, $1.id) }
        guard let newest = sorted.first else { return [] }
        var calendar = Calendar(identifier: .iso8601)
        calendar.timeZone = TimeZone(identifier: "UTC")!

        typealias BucketKey = (Date) -> String
        func key(_ components: Set<Calendar.Component>) -> BucketKey {
            { date in
                let c = calendar.dateComponents(components, from: date)
                return [c.yearForWeekOfYear, c.year, c.month, c.day, c.hour, c.weekOfYear].map { $0.map(String.init) ?? "-" }.joined(separator: ".")
            }
        }
        var rules: [(name: String, remaining: Int, key: BucketKey?)] = []
        if let n = policy.last { rules.append(("last", n, nil)) }
        if let n = policy.hourly { rules.append(("hourly", n, key([.year, .month, .day, .hour]))) }
        if let n = policy.daily { rules.append(("daily", n, key([.year, .month, .day]))) }
        if let n = policy.weekly { rules.append(("weekly", n, key([.yearForWeekOfYear, .weekOfYear]))) }
        if let n = policy.monthly { rules.append(("monthly", n, key([.year, .month]))) }
        if let n = policy.yearly { rules.append(("yearly", n, key([.year]))) }
        var lastBucket = [String?](repeating: nil, count: rules.count)

        var decisions: [RetentionDecision] = []
        for snapshot in sorted {
            var reasons: [String] = []
            for tag in policy.tags where snapshot.tags.contains(tag) { reasons.append("tagged \(tag)") }
            if let within = policy.within, snapshot.time >= newest.time.addingTimeInterval(-within.seconds) {
                reasons.append("within \(within.text) of the newest")
            }
            for i in rules.indices where rules[i].remaining != 0 {
                let bucket = rules[i].key?(snapshot.time) ?? snapshot.id
                if bucket != lastBucket[i] {
                    lastBucket[i] = bucket
                    if rules[i].remaining > 0 { rules[i].remaining -= 1 }
                    reasons.append(rules[i].name == "last" ? "one of the last \(policy.last!)" : "\(rules[i].name) snapshot")
                }
            }
            decisions.append(RetentionDecision(id: snapshot.id, time: snapshot.time, keep: !reasons.isEmpty, reasons: reasons))
        }
        if let index = sorted.firstIndex(where: \.verified), !decisions[index].keep {
            decisions[index].keep = true
            decisions[index].reasons = ["the newest verified snapshot (always kept)"]
        }
        for i in decisions.indices where !decisions[i].keep { decisions[i].reasons = ["no rule keeps it"] }
        return decisions
    }
}
