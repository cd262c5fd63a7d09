import Foundation

public enum Retention {
    /// Decides keep or remove for every snapshot, applying the policy to each group on its own
    /// (by default each store: its host and path); returns the decisions by group (in the order
    /// of each group's newest snapshot, newest first), newest first within a group.
    public static func apply(_ policy: RetentionPolicy, to snapshots: [RetentionCandidate], groupBy grouping: SnapshotGrouping, now: Date = Date()) -> [RetentionDecision] {
        // Grouped by the fields' bytes (two paths that look the same are two stores), named by the
        // label; not by the label, whose `host:path` is the same for host `vm` and path `h:/x`
        // as for host `vm:h` and path `/x` (a trial's two stores were pruned as one).
        var groups: [String: (label: String, members: [RetentionCandidate])] = [:]
        for snapshot in snapshots {
            let label = grouping.label(host: snapshot.host, path: snapshot.path, tags: snapshot.tags)
            groups[grouping.key(host: snapshot.host, path: snapshot.path, tags: snapshot.tags), default: (label, [])].members.append(snapshot)
        }
        let decided = groups.values.map { label, members in
            apply(policy, to: members).map { decision -> RetentionDecision in
                var decision = decision
                decision.group = label
                return decision
            }
        }
        var out = decided.sorted { a, b in
            guard let x = a.first, let y = b.first else { return a.count > b.count }
            return (x.time, x.group ?? "") > (y.time, y.group ?? "")
        }.flatMap { $0 }
        // Whatever the grouping (`none`, `path`, `tags`), each store's newest verified snapshot
        // stays: a grouping wider than the store must not leave a store with no good snapshot.
        var newestVerified: [String: RetentionCandidate] = [:]
        for snapshot in snapshots where snapshot.verified {
            let store = "\(snapshot.host)\u{0}\(snapshot.path)".exactKey
            if let current = newestVerified[store], (current.time, current.id) >= (snapshot.time, snapshot.id) { continue }
            newestVerified[store] = snapshot
        }
        let kept = Set(newestVerified.values.map(\.id))
        for i in out.indices where !out[i].keep && kept.contains(out[i].id) {
            out[i].keep = true
            out[i].reasons = ["the newest verified snapshot of its store (always kept)"]
        }
        // Nor is a store left with no snapshot that passed a check (its check when taken counts):
        // when the rules keep none such of a store, its newest such stays.
        let byID = Dictionary(snapshots.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        var storesWithOne = Set<String>()
        var newestChecked: [String: RetentionCandidate] = [:]
        for decision in out {
            guard let snapshot = byID[decision.id], snapshot.checked else { continue }
            let store = "\(snapshot.host)\u{0}\(snapshot.path)".exactKey
            if decision.keep { storesWithOne.insert(store) }
            if let current = newestChecked[store], (current.time, current.id) >= (snapshot.time, snapshot.id) { continue }
            newestChecked[store] = snapshot
        }
        let rescued = Set(newestChecked.filter { !storesWithOne.contains($0.key) }.values.map(\.id))
        for i in out.indices where !out[i].keep && rescued.contains(out[i].id) {
            out[i].keep = true
            out[i].reasons = ["the newest snapshot of its store that passed its check (a store keeps one at least)"]
        }
        // A safety snapshot (the undo of a migration, a restore in place, a purge) is kept for
        // `safety` after it was taken (counted from now: it is the incident's age that matters),
        // whatever the rules: the next maintain removed one that was not the day's newest.
        let safety = policy.safety ?? RetentionPolicy.defaultSafety
        if safety.seconds > 0 {
            for i in out.indices where !out[i].keep {
                guard let snapshot = byID[out[i].id], now.timeIntervalSince(snapshot.time) < safety.seconds,
                      let tag = RetentionPolicy.safetyTags.first(where: snapshot.tags.contains) else { continue }
                out[i].keep = true
                out[i].reasons = ["a safety snapshot (\(tag)) younger than \(safety.text): kept that long whatever the rules (keep_safety, --keep-safety)"]
            }
        }
        return out
    }

    /// Decides keep or remove for every snapshot of one group; returns the decisions newest first.
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
