import Foundation

/// A `.service` and a `.timer` per scheduled job, for systemd instead of cron.
public enum SystemdUnits {
    public struct Unit: Sendable, Equatable {
        public var name: String
        public var contents: String
    }

    /// A long-running service per policy with a `[replicate]` section:
    /// `storectl-<policy file stem>-replicate.service`, restarted when it stops, stopped by SIGTERM
    /// (replicate writes what it has read and exits 0 within seconds).
    public static func replicateUnits(_ policies: [Policy], executable: String) -> [Unit] {
        policies.filter { $0.replicate != nil }.map { policy in
            let stem = ((FileSystem.name(of: policy.file) as NSString).deletingPathExtension)
                .map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" ? $0 : "-" }
            return Unit(name: "storectl-\(String(stem))-replicate.service", contents: """
                [Unit]
                Description=\(text("storectl replicate of \(policy.store.path) (\(policy.file))"))
                After=local-fs.target network-online.target
                Wants=network-online.target

                [Service]
                Type=simple
                ExecStart=\(quote(executable, executable: true)) replicate --policy \(quote(policy.file)) --quiet
                Restart=always
                RestartSec=5
                KillSignal=SIGTERM
                TimeoutStopSec=60

                [Install]
                WantedBy=multi-user.target

                """)
        }
    }

    /// The units of `jobs`, named `storectl-<policy file stem>-<job>.{service,timer}`.
    ///
    /// - Throws: exit 64 when two policies would give units the same name.
    public static func units(_ jobs: [Crontab.Job], executable: String) throws -> [Unit] {
        try refuseNewlines([executable] + jobs.flatMap { [$0.policy, $0.store] })
        var units: [Unit] = []
        var seen: [String: String] = [:]
        for job in jobs {
            let stem = ((FileSystem.name(of: job.policy) as NSString).deletingPathExtension)
                .map { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" ? $0 : "-" }
            let base = "storectl-\(String(stem))-\(job.job.rawValue)"
            if let other = seen[base], other != job.policy {
                throw StoreOpsError(.usage, "\(job.policy) and \(other) would both make \(base).service; rename one of the policy files")
            }
            seen[base] = job.policy
            let expression = try CronExpression(job.expression)
            let description = text("storectl \(job.job.rawValue) of \(job.store) (\(job.policy))")
            units.append(Unit(name: "\(base).service", contents: """
                [Unit]
                Description=\(description)
                After=local-fs.target network-online.target
                Wants=network-online.target

                [Service]
                Type=oneshot
                ExecStart=\(quote(executable, executable: true)) run \(job.job.rawValue) --policy \(quote(job.policy))

                """))
            var timer = """
                [Unit]
                Description=Schedule of \(description): \(text(job.expression))

                [Timer]

                """
            for calendar in onCalendar(expression) { timer += "OnCalendar=\(calendar)\n" }
            timer += "Persistent=true\n"
            if let jitter = job.jitter { timer += "RandomizedDelaySec=\(Int(jitter.seconds.rounded(.up)))\n" }
            timer += "\n[Install]\nWantedBy=timers.target\n"
            units.append(Unit(name: "\(base).timer", contents: timer))
        }
        return units
    }

    /// systemd calendar events equal to a cron schedule. Restricted fields become explicit lists;
    /// when both day fields are restricted, cron runs on days matching either, so there are two
    /// events (systemd would otherwise require both).
    public static func onCalendar(_ cron: CronExpression) -> [String] {
        func list(_ values: Set<Int>, full: ClosedRange<Int>) -> String {
            values == Set(full) ? "*" : values.sorted().map { String(format: "%02d", $0) }.joined(separator: ",")
        }
        let month = list(cron.months, full: 1...12)
        let time = "\(list(cron.hours, full: 0...23)):\(list(cron.minutes, full: 0...59)):00"
        let days = list(cron.days, full: 1...31)
        let names = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let weekdays = cron.weekdays.sorted().map { names[$0] }.joined(separator: ",")
        if cron.dayStar || cron.weekdayStar {
            // Vixie ANDs the two day fields here, as systemd does.
            return ["\(cron.weekdays.count == 7 ? "" : "\(weekdays) ")*-\(month)-\(days) \(time)"]
        }
        return ["\(weekdays) *-\(month)-* \(time)", "*-\(month)-\(days) \(time)"]
    }

    /// A word of `ExecStart=`: systemd expands `%` specifiers everywhere there and `$` variables
    /// in the arguments (not in the program's path), so `%` is written `%%` and, in an argument,
    /// `$` is written `$$`; spaces, tabs, quotes and backslashes are quoted. (A newline cannot be
    /// written in a unit: `refuseNewlines` refuses such paths first.)
    public static func quote(_ text: String, executable: Bool = false) -> String {
        var literal = text.replacingOccurrences(of: "%", with: "%%")
        if !executable { literal = literal.replacingOccurrences(of: "$", with: "$$") }
        return literal.contains(where: { $0 == " " || $0 == "\t" || $0 == "\"" || $0 == "\\" || $0 == "'" })
            ? "\"" + literal.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
            : literal
    }

    /// A path with a line break cannot be written into a unit file (it would end the line, and
    /// what follows would be read as a directive of its own): 64, naming it.
    public static func refuseNewlines(_ paths: [String]) throws {
        if let path = paths.first(where: { $0.contains("\n") || $0.contains("\r") }) {
            throw StoreOpsError(.usage, "\(path.debugDescription) has a line break, which a systemd unit cannot hold",
                                hint: "rename it (or use `storectl schedule install` for cron, which quotes it)")
        }
    }

    /// The `--policy` argument of a unit's `ExecStart=` line, as written there.
    static func policyWord(_ contents: String) -> String? {
        guard let line = contents.split(separator: "\n").first(where: { $0.hasPrefix("ExecStart=") }),
              let range = line.range(of: " --policy ") else { return nil }
        let rest = line[range.upperBound...]
        if rest.hasPrefix("\"") {
            // Quoted: up to the closing quote not escaped.
            var word = "", escaped = false
            for character in rest.dropFirst() {
                if escaped { word.append(character); escaped = false } else if character == "\\" { escaped = true } else if character == "\"" { return word } else { word.append(character) }
            }
            return word
        }
        return String(rest.prefix { $0 != " " })
    }

    /// Text in `Description=`: systemd expands `%` specifiers there too.
    public static func text(_ text: String) -> String {
        text.replacingOccurrences(of: "%", with: "%%").replacingOccurrences(of: "\n", with: " ")
    }

    /// Writes the units into `folder` (each atomically, mode 0644 as systemd expects).
    public static func write(_ units: [Unit], to folder: String) throws {
        guard FileSystem.kind(of: folder) == .directory else {
            throw StoreOpsError(.cannotCreate, "the output folder \(folder) does not exist", hint: "create it first, or pass another --output (systemd reads /etc/systemd/system)")
        }
        // A run killed between writing a unit and renaming it left its temporary among the units
        // (found by the crash test): removed first (every unit's name starts so).
        PendingFile.removeStale(in: folder, prefix: "storectl-")
        // Units are named after the policy file's stem: another policy of the same name (in
        // another folder) installed before would lose its jobs to this one, silently.
        for unit in units {
            let path = (folder as NSString).appendingPathComponent(unit.name)
            guard let existing = try? String(contentsOfFile: path, encoding: .utf8),
                  let theirs = policyWord(existing), let ours = policyWord(unit.contents), theirs != ours else { continue }
            throw StoreOpsError(.cannotCreate, "\(path) is the unit of another policy (\(theirs)): writing this one's (\(ours)) would end that policy's job; nothing was written",
                                hint: "units are named after the policy file (storectl-<file name>-<job>): rename one of the two files, or remove that policy's units first if it is gone")
        }
        for unit in units {
            let file = try PendingFile(finalPath: (folder as NSString).appendingPathComponent(unit.name), label: "systemd.unit")
            try file.write(Data(unit.contents.utf8))
            chmod(file.tempPath, 0o644)
            try file.commit(replacing: true)
        }
    }
}
