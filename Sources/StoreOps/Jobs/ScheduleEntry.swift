import Foundation

/// What `storectl schedule show` lists: each job with its next runs.
public struct ScheduleEntry: Sendable, Codable {
    public var job: ScheduledJob
    public var policy: String
    public var store: String
    public var expression: String
    public var nextRuns: [Date]
    public var timeZone: String
    /// What cron runs (the crontab line after the expression, as `schedule install` writes it).
    public var command: String?
    /// How much later than each next run the job may start (`[schedule] jitter`).
    public var jitter: String?
    /// Whether the current user's crontab has the job as `schedule install` writes it now:
    /// "installed", "differs", "not installed"; nil when the crontab could not be read.
    public var crontab: String?

    /// How many next runs `schedule show` may list.
    public static let countRange = 1...1000

    /// The scheduled jobs of the policies, with their next `count` runs in `timeZone`.
    ///
    /// - Throws: 64 for a count outside 1...1000.
    /// - Parameter executable: storectl's path as crontab lines name it: with it, each entry says
    ///   its command and whether the current user's crontab has it (`crontab` nil when that
    ///   cannot be read: no crontab command, no permission).
    public static func list(policies: [String], count: Int = 5, now: Date = Date(), timeZone: TimeZone = SystemTimeZone.zone,
                            executable: String? = nil) throws -> [ScheduleEntry] {
        guard countRange.contains(count) else {
            throw StoreOpsError(.usage, "--count \(count): expected \(countRange.lowerBound) to \(countRange.upperBound) next runs")
        }
        let loaded = try policies.map(Policy.load)
        let jobs = Crontab.jobs(loaded)
        let installed = executable != nil && !jobs.isEmpty ? try? Crontab.read(user: nil) : nil
        return try jobs.map { job in
            let expression = try CronExpression(job.expression)
            var entry = ScheduleEntry(job: job.job, policy: job.policy, store: job.store, expression: job.expression,
                                      nextRuns: expression.nextRuns(after: now, count: count, in: timeZone), timeZone: timeZone.identifier)
            entry.jitter = job.jitter?.text
            if let executable {
                entry.command = Crontab.command(job, executable: executable)
                entry.crontab = installed.map { Crontab.state(of: job, in: $0, executable: executable) }
            }
            return entry
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
        // A copied /etc/localtime (no name to read): the zone database's file with the same
        // bytes. (`TimeZone.current` follows the shell's TZ, which is not cron's zone.)
        if let copied = FileManager.default.contents(atPath: "/etc/localtime"), let name = zoneNamed(matching: copied) {
            if let zone = TimeZone(identifier: name) { return zone }
        }
        return TimeZone.current
    }

    /// The name of the zone whose file under `root` holds exactly `data` (a copied /etc/localtime).
    /// Files are compared only where the sizes agree; `posix/` and `right/` (copies, leap
    /// seconds) are skipped.
    public static func zoneNamed(matching data: Data, root: String = "/usr/share/zoneinfo") -> String? {
        guard !data.isEmpty, let names = FileManager.default.subpaths(atPath: root) else { return nil }
        // Shorter names first: `UTC` before `Etc/UTC`, `Europe/Paris` before its aliases deeper down.
        // Not the database's own links and placeholders (`posixrules`, `localtime`, `Factory`).
        let odd: Set<String> = ["posixrules", "localtime", "Factory"]
        for name in names.sorted(by: { ($0.count, $0) < ($1.count, $1) }) where !name.hasPrefix("posix/") && !name.hasPrefix("right/") && !odd.contains(name) {
            let path = (root as NSString).appendingPathComponent(name)
            var info = stat()
            guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG, Int(info.st_size) == data.count else { continue }
            if FileManager.default.contents(atPath: path) == data, TimeZone(identifier: name) != nil { return name }
        }
        return nil
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
