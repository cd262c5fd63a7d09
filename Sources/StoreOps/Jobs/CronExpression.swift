import Foundation

/// A cron schedule, parsed the way Vixie cron (Debian's `cron`) reads a crontab line's first five
/// fields, with the next run times it gives in a time zone.
///
/// - Fields: minute 0-59, hour 0-23, day of month 1-31, month 1-12 or jan-dec, day of week 0-7
///   (0 and 7 are Sunday) or sun-sat; names are case-insensitive.
/// - Each field: `*`, a number, a range `a-b`, a step over `*` or a range (`*/15`, `8-18/2`), or a
///   comma-separated list of these. A step after a single number (`5/10`) is refused: crons
///   disagree on what it means. Names may appear in ranges and lists, as Vixie's parser accepts.
/// - `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`), `@hourly`.
///   `@reboot` has no next run and is refused.
/// - Vixie's day rule: when neither the day-of-month nor the day-of-week field starts with `*`,
///   a day matching either runs; otherwise a day must match both.
public struct CronExpression: Sendable, Equatable, CustomStringConvertible {
    public let text: String
    public let minutes: Set<Int>
    public let hours: Set<Int>
    public let days: Set<Int>
    public let months: Set<Int>
    /// 0 = Sunday ... 6 = Saturday (7 is folded into 0).
    public let weekdays: Set<Int>
    /// The fields began with `*` (Vixie's DOM_STAR / DOW_STAR).
    public let dayStar: Bool
    public let weekdayStar: Bool

    public var description: String { text }

    public struct ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        public var expression: String
        public var field: String
        public var problem: String
        public var description: String { "cron expression \"\(expression)\": \(field): \(problem)" }
    }

    static let shortcuts = ["@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
                            "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"]
    static let monthNames = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
    static let dayNames = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]

    public init(_ text: String) throws {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        var expanded = trimmed
        if trimmed.hasPrefix("@") {
            guard let fields = Self.shortcuts[trimmed.lowercased()] else {
                throw ParseError(expression: text, field: "shortcut", problem: trimmed.lowercased() == "@reboot"
                    ? "@reboot runs at boot only; storectl jobs need a time schedule"
                    : "unknown shortcut \(trimmed); expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly")
            }
            expanded = fields
        }
        let fields = expanded.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        guard fields.count == 5 else {
            throw ParseError(expression: text, field: "fields", problem: "expected 5 fields (minute hour day-of-month month day-of-week), found \(fields.count)")
        }
        func parse(_ index: Int, _ name: String, _ range: ClosedRange<Int>, names: [String] = [], nameBase: Int = 0) throws -> Set<Int> {
            try Self.field(fields[index], name: name, range: range, names: names, nameBase: nameBase, expression: text)
        }
        self.text = trimmed
        minutes = try parse(0, "minute", 0...59)
        hours = try parse(1, "hour", 0...23)
        days = try parse(2, "day of month", 1...31)
        months = try parse(3, "month", 1...12, names: Self.monthNames, nameBase: 1)
        weekdays = Set(try parse(4, "day of week", 0...7, names: Self.dayNames).map { $0 % 7 })
        dayStar = fields[2].hasPrefix("*")
        weekdayStar = fields[4].hasPrefix("*")
    }

    static func field(_ text: String, name: String, range: ClosedRange<Int>, names: [String], nameBase: Int, expression: String) throws -> Set<Int> {
        func fail(_ problem: String) -> ParseError { ParseError(expression: expression, field: name, problem: problem) }
        func number(_ token: Substring) throws -> Int {
            if let value = Int(token) {
                guard range.contains(value) else { throw fail("\(value) is out of range \(range.lowerBound)-\(range.upperBound)") }
                return value
            }
            if let index = names.firstIndex(of: token.lowercased()) { return index + nameBase }
            if names.isEmpty { throw fail("\"\(token)\" is not a number") }
            throw fail("\"\(token)\" is not a number or a name (\(names.joined(separator: ", ")))")
        }
        var values = Set<Int>()
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            guard !part.isEmpty else { throw fail("an empty element in the list \"\(text)\"") }
            let pieces = part.split(separator: "/", omittingEmptySubsequences: false)
            guard pieces.count <= 2 else { throw fail("more than one step in \"\(part)\"") }
            let base = pieces[0]
            var low = range.lowerBound
            var high = range.upperBound
            var isSingle = false
            if base == "*" {
                // The whole range (for day of week Vixie's * is 0-6; 7 adds nothing).
                if name == "day of week" { high = 6 }
            } else if let dash = base.firstIndex(of: "-") {
                low = try number(base[..<dash])
                high = try number(base[base.index(after: dash)...])
                guard low <= high else { throw fail("the range \(base) runs backwards") }
            } else {
                low = try number(base)
                high = low
                isSingle = true
            }
            var step = 1
            if pieces.count == 2 {
                guard !isSingle else { throw fail("a step needs a range or *: write \(base)-\(range.upperBound)/\(pieces[1]) or */\(pieces[1])") }
                guard let value = Int(pieces[1]), value > 0 else { throw fail("the step \"\(pieces[1])\" is not a positive number") }
                step = value
            }
            values.formUnion(stride(from: low, through: high, by: step))
        }
        return values
    }

    /// Whether `components` (in the schedule's zone) is a run time.
    func matches(minute: Int, hour: Int, day: Int, month: Int, weekday: Int) -> Bool {
        guard minutes.contains(minute), hours.contains(hour), months.contains(month) else { return false }
        let dom = days.contains(day)
        let dow = weekdays.contains(weekday)
        return (dayStar || weekdayStar) ? (dom && dow) : (dom || dow)
    }

    /// The next `count` run times strictly after `date`, in `timeZone` (wall-clock minutes that do
    /// not exist there, in a spring-forward gap, are skipped). Empty when the schedule never runs
    /// (e.g. `0 0 30 2 *`).
    public func nextRuns(after date: Date, count: Int, in timeZone: TimeZone = .current) -> [Date] {
        guard count > 0 else { return [] }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        var runs: [Date] = []
        var day = calendar.startOfDay(for: date)
        let sortedHours = hours.sorted()
        let sortedMinutes = minutes.sorted()
        // Leap days come back within 8 years (2096 -> 2104): nine years without a match means never.
        var daysWithoutRun = 0
        while daysWithoutRun < 366 * 9 {
            daysWithoutRun += 1
            let parts = calendar.dateComponents([.year, .month, .day, .weekday], from: day)
            if months.contains(parts.month!), matches(minute: sortedMinutes[0], hour: sortedHours[0], day: parts.day!,
                                                      month: parts.month!, weekday: parts.weekday! - 1) {
                for hour in sortedHours {
                    for minute in sortedMinutes {
                        var wanted = DateComponents()
                        wanted.year = parts.year
                        wanted.month = parts.month
                        wanted.day = parts.day
                        wanted.hour = hour
                        wanted.minute = minute
                        guard let run = calendar.date(from: wanted) else { continue }
                        let check = calendar.dateComponents([.hour, .minute, .day], from: run)
                        guard check.hour == hour, check.minute == minute, check.day == parts.day else { continue }   // a DST gap
                        if run > date, runs.last.map({ run > $0 }) ?? true {
                            runs.append(run)
                            daysWithoutRun = 0
                            if runs.count >= count { return runs }
                        }
                    }
                }
            }
            guard let next = calendar.date(byAdding: .day, value: 1, to: day) else { break }
            day = calendar.startOfDay(for: next)
        }
        return runs
    }
}
