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
    /// How long a safety snapshot (`safetyTags`: what a migration, a restore in place or a purge
    /// replaced, the undo the operator was told of) is kept whatever the rules; nil: 7 days; 0: no
    /// longer than the rules keep it. The next `maintain` removed a pre-migrate snapshot that was
    /// not the day's newest (a trial), and with it `rollback`'s target.
    public var safety: DurationText?

    /// The tags storectl gives the snapshots it takes before changing a store.
    public static let safetyTags = ["pre-migrate", "pre-restore", "pre-purge"]
    public static let defaultSafety = DurationText(seconds: 7 * 86_400, text: "7d")

    public init(last: Int? = nil, hourly: Int? = nil, daily: Int? = nil, weekly: Int? = nil, monthly: Int? = nil,
                yearly: Int? = nil, within: DurationText? = nil, tags: [String] = [], safety: DurationText? = nil) {
        self.last = last
        self.hourly = hourly
        self.daily = daily
        self.weekly = weekly
        self.monthly = monthly
        self.yearly = yearly
        self.within = within
        self.tags = tags
        self.safety = safety
    }

    /// True when no rule is set: such a policy would remove everything and is refused.
    public var isEmpty: Bool {
        [last, hourly, daily, weekly, monthly, yearly].allSatisfy { $0 == nil || $0 == 0 } && within == nil && tags.isEmpty
    }

    /// Checks counts (-1 or more), `within` (more than nothing) and tags (none blank): a value that
    /// would keep nothing by accident, such as a cron line's `--keep-tag "$TAG"` with TAG unset,
    /// is refused rather than allowed to remove every other snapshot.
    /// - Throws: exit 64 naming the option.
    public func validate() throws {
        for (name, value) in [("last", last), ("hourly", hourly), ("daily", daily), ("weekly", weekly), ("monthly", monthly), ("yearly", yearly)] {
            if let value, value < -1 {
                throw StoreOpsError(.usage, "--keep-\(name) \(value): expected a count, or -1 for no limit")
            }
        }
        if let within, within.seconds <= 0 {
            throw StoreOpsError(.usage, "--keep-within \(within.text): keeps nothing but the newest snapshot",
                                hint: "give a duration such as 7d or 12h")
        }
        if let blank = tags.first(where: { $0.trimmingCharacters(in: .whitespaces).isEmpty }) {
            throw StoreOpsError(.usage, "--keep-tag \(blank.debugDescription): an empty tag keeps nothing, so every snapshot it was meant to keep would be removed",
                                hint: "check what sets it (a cron line's --keep-tag \"$TAG\" with TAG unset passes an empty tag)")
        }
    }
}
