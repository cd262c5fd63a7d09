import Foundation

/// What `storectl schedule show` lists: each job with its next runs.
public struct ScheduleEntry: Sendable, Codable {
    public var job: ScheduledJob
    public var policy: String
    public var store: String
    public var expression: String
    public var nextRuns: [Date]
    public var timeZone: String

    /// How many next runs `schedule show` may list.
    public static let countRange = 1...1000

    /// The scheduled jobs of the policies, with their next `count` runs in `timeZone`.
    ///
    /// - Throws: 64 for a count outside 1...1000.
    public static func list(policies: [String], count: Int = 5, now: Date = Date(), timeZone: TimeZone = .current) throws -> [ScheduleEntry] {
        guard countRange.contains(count) else {
            throw StoreOpsError(.usage, "--count \(count): expected \(countRange.lowerBound) to \(countRange.upperBound) next runs")
        }
        let loaded = try policies.map(Policy.load)
        return try Crontab.jobs(loaded).map { job in
            let expression = try CronExpression(job.expression)
            return ScheduleEntry(job: job.job, policy: job.policy, store: job.store, expression: job.expression,
                                 nextRuns: expression.nextRuns(after: now, count: count, in: timeZone), timeZone: timeZone.identifier)
        }
    }
}
