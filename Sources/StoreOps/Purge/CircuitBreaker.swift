import Foundation
import GRDB
import Logging

/// The circuit breaker of a purge rule: a pure function of the counts.
public enum CircuitBreaker {
    /// Why the rule must not run (more of the table would go than `max_fraction` allows), or nil.
    public static func trips(rule: PurgeRule, candidates: Int, total: Int) -> String? {
        guard let limit = rule.maxFraction, total > 0, Double(candidates) / Double(total) > limit else { return nil }
        return "rule \(rule.name): \(Format.count(candidates)) of \(Format.count(total)) rows "
            + "(\(Format.percent(Double(candidates) / Double(total)))) would go, above max_fraction \(Format.percent(limit))"
    }
}
