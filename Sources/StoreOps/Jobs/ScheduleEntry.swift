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
    public static func list(policies: [String], count: Int = 5, now: Date = Date(), timeZone: TimeZone = SystemTimeZone.zone) throws -> [ScheduleEntry] {
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

/// The machine's own time zone, the one cron and systemd's timers read their expressions in
/// (`/etc/localtime`, else `/etc/timezone`), whatever `TZ` the shell running `schedule show` has:
/// with `TZ=America/New_York` in a shell on a UTC server, the next runs were listed five hours
/// off the times cron ran them (a trial).
public enum SystemTimeZone {
    public static var zone: TimeZone {
        if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/etc/localtime"),
           let range = target.range(of: "zoneinfo/"),
           let zone = TimeZone(identifier: String(target[range.upperBound...])) {
            return zone
        }
        if let name = try? String(contentsOfFile: "/etc/timezone", encoding: .utf8),
           let zone = TimeZone(identifier: name.trimmingCharacters(in: .whitespacesAndNewlines)) {
            return zone
        }
        // A copied /etc/localtime (no name to read): what the C library makes of it without TZ.
        return TimeZone.current
    }

    /// The shell's `TZ` when it names another zone than the machine's (what `schedule show` says it ignored), else nil.
    public static var shellDiffers: String? {
        // A file (`TZ=:/etc/localtime`, POSIX's form) cannot be compared by name: not said.
        guard let tz = ProcessInfo.processInfo.environment["TZ"], !tz.isEmpty, !tz.hasPrefix(":/"), !tz.hasPrefix("/") else { return nil }
        let named = TimeZone(identifier: tz.hasPrefix(":") ? String(tz.dropFirst()) : tz)
        let system = zone
        if let named, named.identifier == system.identifier { return nil }
        if let named, named.secondsFromGMT() == system.secondsFromGMT(), named.nextDaylightSavingTimeTransition == system.nextDaylightSavingTimeTransition { return nil }
        return tz
    }
}
