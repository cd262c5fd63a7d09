import Foundation
import StoreLab
import StoreOps
import Testing

/// Next-run tables in UTC (the zone is a parameter; cron itself uses the daemon's local zone).
@Suite("cron expressions (Vixie semantics)")
struct CronExpressionTests {
    static let utc = TimeZone(identifier: "UTC")!

    func runs(_ expression: String, after: String, count: Int = 5, zone: TimeZone = utc) throws -> [String] {
        try CronExpression(expression).nextRuns(after: Timestamp.parseISO(after)!, count: count, in: zone)
            .map { String(Timestamp.iso($0).prefix(16)) }
    }

    @Test(arguments: [
        // Month ends: only months with a 31st.
        ("0 0 31 * *", "2026-01-31T00:00:00Z", ["2026-03-31T00:00", "2026-05-31T00:00", "2026-07-31T00:00", "2026-08-31T00:00", "2026-10-31T00:00"]),
        // The leap day, every four years (2100 is not a leap year: 2096 then 2104).
        ("0 12 29 2 *", "2026-01-01T00:00:00Z", ["2028-02-29T12:00", "2032-02-29T12:00", "2036-02-29T12:00", "2040-02-29T12:00", "2044-02-29T12:00"]),
        ("0 0 29 2 *", "2096-03-01T00:00:00Z", ["2104-02-29T00:00", "2108-02-29T00:00"]),
        // Steps, ranges, lists, names in ranges.
        ("*/20 9-10 * * *", "2026-11-22T09:30:00Z", ["2026-11-22T09:40", "2026-11-22T10:00", "2026-11-22T10:20", "2026-11-22T10:40", "2026-11-23T09:00"]),
        ("30 3 * * mon-fri", "2026-11-21T00:00:00Z", ["2026-11-23T03:30", "2026-11-24T03:30", "2026-11-25T03:30", "2026-11-26T03:30", "2026-11-27T03:30"]),
        ("5,10-12,*/30 0 1 JAN *", "2026-06-01T00:00:00Z", ["2027-01-01T00:00", "2027-01-01T00:05", "2027-01-01T00:10", "2027-01-01T00:11", "2027-01-01T00:12"]),
        // Both day fields restricted: a day matching either runs (Sun Nov 22 and 29, Tue Dec 1, ...).
        ("0 4 1,15 * sun", "2026-11-22T03:00:00Z", ["2026-11-22T04:00", "2026-11-29T04:00", "2026-12-01T04:00", "2026-12-06T04:00", "2026-12-13T04:00"]),
        // One of them starts with '*': a day must match both (odd days that are Mondays).
        ("0 0 */2 * 1", "2026-11-01T00:00:00Z", ["2026-11-09T00:00", "2026-11-23T00:00", "2026-12-07T00:00", "2026-12-21T00:00", "2027-01-11T00:00"]),
        // 0 and 7 are both Sunday.
        ("0 0 * * 7", "2026-11-21T00:00:00Z", ["2026-11-22T00:00", "2026-11-29T00:00"]),
        // Shortcuts.
        ("@hourly", "2026-11-22T03:15:00Z", ["2026-11-22T04:00", "2026-11-22T05:00"]),
        ("@weekly", "2026-11-22T03:15:00Z", ["2026-11-29T00:00", "2026-12-06T00:00"]),
        ("@monthly", "2026-12-15T00:00:00Z", ["2027-01-01T00:00", "2027-02-01T00:00"]),
        ("@annually", "2026-12-15T00:00:00Z", ["2027-01-01T00:00", "2028-01-01T00:00"]),
        ("@daily", "2026-12-31T23:59:00Z", ["2027-01-01T00:00"]),
        // Never: there is no 30th of February.
        ("0 0 30 2 *", "2026-01-01T00:00:00Z", []),
    ] as [(String, String, [String])])
    func nextRuns(_ expression: String, _ after: String, _ expected: [String]) throws {
        #expect(try runs(expression, after: after, count: max(expected.count, 1)) == expected)
    }

    @Test("local time: a wall-clock time skipped by spring-forward does not run that day (Europe/Paris, 2026-03-29)")
    func localTimeZone() throws {
        let paris = try #require(TimeZone(identifier: "Europe/Paris"))
        let found = try CronExpression("30 2 * * *").nextRuns(after: Timestamp.parseISO("2026-03-27T12:00:00Z")!, count: 3, in: paris)
        #expect(found.map { String(Timestamp.iso($0).prefix(16)) } == ["2026-03-28T01:30", "2026-03-30T00:30", "2026-03-31T00:30"],
                "02:30 CET is 01:30 UTC; 02:30 on the 29th does not exist; then 02:30 CEST is 00:30 UTC")
    }

    @Test("invalid expressions name the field and what is wrong", arguments: [
        ("60 * * * *", "minute: 60 is out of range 0-59"),
        ("* 24 * * *", "hour: 24 is out of range 0-23"),
        ("* * 0 * *", "day of month: 0 is out of range 1-31"),
        ("* * * 13 *", "month: 13 is out of range 1-12"),
        ("* * * * 8", "day of week: 8 is out of range 0-7"),
        ("* * * *", "fields: expected 5 fields"),
        ("* * * * * *", "fields: expected 5 fields"),
        ("5/10 * * * *", "minute: a step needs a range or *"),
        ("*/0 * * * *", "minute: the step \"0\" is not a positive number"),
        ("10-5 * * * *", "minute: the range 10-5 runs backwards"),
        ("* * * foo *", "month: \"foo\" is not a number or a name"),
        ("* * * * funday", "day of week: \"funday\" is not a number or a name"),
        ("1,,2 * * * *", "minute: an empty element"),
        ("x * * * *", "minute: \"x\" is not a number"),
        ("@reboot", "shortcut: @reboot runs at boot only"),
        ("@often", "shortcut: unknown shortcut @often"),
    ] as [(String, String)])
    func invalid(_ expression: String, _ problem: String) {
        let error = #expect(throws: CronExpression.ParseError.self) { try CronExpression(expression) }
        #expect(error?.description.contains(problem) == true, "\(error?.description ?? "")")
    }

    @Test("the systemd translation elapses when cron runs (checked with systemd-analyze)",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze")),
          arguments: ["30 3 * * *", "*/15 9-17 * * mon-fri", "0 4 1,15 * sun", "0 0 */2 * 1", "0 12 29 2 *", "@monthly", "5,35 */6 * jan,jul *"])
    func systemdAgrees(_ expression: String) throws {
        let cron = try CronExpression(expression)
        let after = Date()
        var systemd: [Date] = []
        for calendar in SystemdUnits.onCalendar(cron) {
            let result = try ChildProcess.run("/usr/bin/systemd-analyze", ["calendar", "--iterations=5", calendar], environment: ["TZ": "UTC"])
            #expect(result.status == 0, "systemd refuses \(calendar): \(result.stderr)")
            for line in result.stdout.split(separator: "\n") where line.contains("elapse:") || line.contains("Iter. #") {
                // "    Next elapse: Sun 2026-11-22 04:00:00 UTC" / "       Iter. #2: Sun 2026-11-29 04:00:00 UTC"
                let parts = line.split(separator: " ").suffix(3)
                if let date = Timestamp.parseISO("\(parts.dropLast().joined(separator: "T"))Z") { systemd.append(date) }
            }
        }
        let expected = cron.nextRuns(after: after, count: 5, in: Self.utc)
        #expect(Array(Set(systemd).sorted().prefix(5)) == expected, "\(SystemdUnits.onCalendar(cron))")
    }

    @Test("a /proc mounted with hidepid hides cron's process from other users: its absence is not taken for no cron daemon")
    func hidepidIsNoEvidence() {
        let line = "proc /proc proc rw,nosuid,nodev,noexec,relatime,%@ 0 0\nsysfs /sys sysfs rw 0 0\n"
        for option in ["hidepid=2", "hidepid=invisible", "hidepid=1", "hidepid=noaccess"] {
            #expect(CronDaemon.procHidesOtherUsers(mounts: line.replacingOccurrences(of: "%@", with: option)), "\(option)")
        }
        for option in ["hidepid=0", "hidepid=off", "gid=5"] {
            #expect(!CronDaemon.procHidesOtherUsers(mounts: line.replacingOccurrences(of: "%@", with: option)), "\(option)")
        }
        #expect(!CronDaemon.procHidesOtherUsers(mounts: "proc /other proc rw,hidepid=2 0 0\n"), "only /proc's own mount")
        #expect(!CronDaemon.procHidesOtherUsers(mounts: nil))
    }

    @Test("a copied /etc/localtime (no link, no /etc/timezone) is named by the zone file with its bytes, not by the shell's TZ",
          .enabled(if: FileManager.default.fileExists(atPath: "/usr/share/zoneinfo/Europe/Paris")))
    func copiedLocaltimeIsNamed() throws {
        let paris = try #require(FileManager.default.contents(atPath: "/usr/share/zoneinfo/Europe/Paris"))
        #expect(SystemTimeZone.zoneNamed(matching: paris).map { TimeZone(identifier: $0)?.secondsFromGMT(for: Date(timeIntervalSince1970: 0)) } == 3600,
                "a zone with Paris's rules (Europe/Paris or an alias of it)")
        let folder = try TempFolder()
        try FileManager.default.createDirectory(atPath: folder.file("Europe"), withIntermediateDirectories: true)
        try paris.write(to: URL(fileURLWithPath: folder.file("Europe/Paris")))
        var other = paris
        other[other.count - 2] ^= 0xFF   // the same size, other bytes: compared, not taken
        try other.write(to: URL(fileURLWithPath: folder.file("Europe/A-same-size")))
        #expect(SystemTimeZone.zoneNamed(matching: paris, root: folder.path) == "Europe/Paris")
        #expect(SystemTimeZone.zoneNamed(matching: Data("TZif-not-a-zone".utf8), root: folder.path) == nil)
    }
}
