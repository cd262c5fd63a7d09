import ArgumentParser
import Foundation
import StoreOps

struct ScheduleCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schedule",
        abstract: "Show, install and remove the jobs that policy files schedule (cron or systemd).",
        subcommands: [Show.self, CrontabLines.self, Install.self, Uninstall.self, Systemd.self])

    /// The absolute path of this executable, for crontab lines and unit files: the name it was run
    /// by (a symlink such as /usr/bin/storectl stays a symlink, so an upgrade that moves the binary
    /// it points at does not break the jobs), found as the shell found it, when that name is this
    /// very file; otherwise the file itself.
    static var executable: String {
        let resolved = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let invoked = CommandLine.arguments.first ?? ""
        var candidates: [String] = []
        if invoked.contains("/") {
            // Not FileSystem.absolute: it resolves symlinks, and the symlink is the point.
            let path = invoked.hasPrefix("/") ? invoked : (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(invoked)
            candidates = [path]
        } else if !invoked.isEmpty {
            let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
            candidates = path.split(separator: ":").map { (String($0) as NSString).appendingPathComponent(invoked) }
                .filter { $0.hasPrefix("/") }
        }
        let this = resolved.flatMap { FileSystem.identity(of: $0) }
        for candidate in candidates where FileManager.default.isExecutableFile(atPath: candidate) {
            if let this, let other = FileSystem.identity(of: candidate), other == this { return candidate }
        }
        return resolved ?? FileSystem.absolute(invoked)
    }

    struct Show: ParsableCommand, JSONOutput {
        static let configuration = CommandConfiguration(commandName: "show", abstract: "List the jobs with their cron expressions and next 5 runs (in this machine's time zone, as cron and systemd read them, and UTC).")
        @Option(name: .customLong("policy"), help: "Policy files (repeatable).") var policies: [String]
        @Option(parsing: .unconditional, help: "How many next runs to show (1 to 1000).") var count = 5
        @Flag(help: "Print as JSON.") var json = false

        func validate() throws {
            guard !ValidationGate.off else { return }
            guard (1...1000).contains(count) else { throw ValidationError("--count \(count): expected 1 to 1000 next runs") }
        }

        func run() throws {
            let entries = try ScheduleEntry.list(policies: policies, count: count, executable: ScheduleCommand.executable)
            if json { print(jsonReport(entries)); return }
            guard !entries.isEmpty else { print("no scheduled jobs in \(policies.joined(separator: ", "))"); return }
            let local = DateFormatter()
            local.dateFormat = "EEE yyyy-MM-dd HH:mm zzz"
            local.timeZone = SystemTimeZone.zone
            if let tz = SystemTimeZone.shellDiffers {
                FileHandle.standardError.write(Data("storectl: note: times are in this machine's zone, \(SystemTimeZone.zone.identifier), as cron and systemd read the expressions; this shell's TZ=\(tz) is not theirs\n".utf8))
            }
            for entry in entries {
                print("\(entry.job.rawValue)  \(entry.expression)  \(entry.store)  (\(entry.policy))")
                if let command = entry.command { print("    runs: \(command)") }
                if let jitter = entry.jitter { print("    starts up to \(jitter) after each time below (jitter)") }
                switch entry.crontab {
                case "installed"?: print("    in this user's crontab")
                case "differs"?: print("    in this user's crontab as another line (installed before the policy or storectl changed): run `storectl schedule install --policy \(entry.policy)` again")
                case "not installed"?: print("    not in this user's crontab (`storectl schedule install --policy \(entry.policy)`; systemd timers are not looked at here: `systemctl list-timers 'storectl-*'`)")
                default: break
                }
                for run in entry.nextRuns {
                    print("    \(local.string(from: run))   \(Timestamp.iso(run).prefix(16).replacingOccurrences(of: "T", with: " ")) UTC")
                }
                if entry.nextRuns.isEmpty { print("    never: no date matches this expression") }
            }
        }
    }

    struct CrontabLines: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "crontab", abstract: "Print the crontab block for the policies' jobs (after checking that each could run).")
        @Option(name: .customLong("policy"), help: "Policy files (repeatable).") var policies: [String]
        @Flag(help: "Print the lines even when a job would fail (see `storectl policy check`).") var skipChecks = false

        func run() throws {
            let loaded = try policies.map(Policy.load)
            try ReadinessText.requireReady(loaded, skip: skipChecks)
            let jobs = Crontab.jobs(loaded)
            print(Crontab.block(jobs, executable: ScheduleCommand.executable).joined(separator: "\n"))
        }
    }

    /// What `install`, `uninstall` and `systemd` print with `--json`.
    struct Outcome: Encodable {
        var ok = true
        var scheduler: String
        var user: String?
        var installed: [Crontab.Job]?
        var kept: [String]?
        var removed: [String]?
        var written: [String]?
        var enable: [String]?
    }

    struct Install: ParsableCommand, JSONOutput {
        static let configuration = CommandConfiguration(
            commandName: "install",
            abstract: "Merge the policies' jobs into a user's crontab (crontab -), replacing only storectl's block; or, with --systemd, write their systemd units.",
            discussion: "--systemd writes what `schedule systemd` writes (a .service and .timer per job, a service per [replicate]) into --output (default /etc/systemd/system) and prints the systemctl line that enables them.")
        @Option(name: .customLong("policy"), help: "Policy files (repeatable).") var policies: [String]
        @Option(help: "Whose crontab (default: yours; another user's needs root).") var user: String?
        @Flag(help: "Install even when a job would fail now (e.g. the store is deployed later). Not recommended.") var skipChecks = false
        @Flag(help: "Write systemd units (timers, and a service per [replicate]) instead of crontab lines.") var systemd = false
        @Option(help: "With --systemd: the folder for the units.") var output: String?
        @Flag(help: "Print what was installed as JSON.") var json = false

        func validate() throws {
            guard !ValidationGate.off else { return }
            if systemd, user != nil { throw ValidationError("--user is for the crontab; systemd units run as root unless the policy's unit says otherwise") }
            if !systemd, output != nil { throw ValidationError("--output is for --systemd (the units' folder)") }
        }

        func run() throws {
            if systemd {
                let written = try Systemd.write(policies: policies, output: output ?? "/etc/systemd/system", skipChecks: skipChecks)
                let enable = written.map { FileSystem.name(of: $0) }.filter { $0.hasSuffix(".timer") || $0.hasSuffix("-replicate.service") }
                if json {
                    print(jsonReport(Outcome(scheduler: "systemd", written: written, enable: enable)))
                    return
                }
                for path in written { print(path) }
                print("then: systemctl daemon-reload && systemctl enable --now \(enable.joined(separator: " "))")
                return
            }
            // A policy named twice is installed once (its jobs ran twice, one of each pair skipped 75).
            var seen = Set<String>()
            let loaded = try policies.map(Policy.load).filter { seen.insert($0.file.exactKey).inserted }
            let jobs = Crontab.jobs(loaded)
            guard !jobs.isEmpty else { throw StoreOpsError(.usage, "the policies schedule no jobs ([schedule] snapshot/purge/maintain)") }
            if let user, !skipChecks, user != ProcessInfo.processInfo.userName {
                try Self.requireReady(loaded, as: user)
            } else {
                try ReadinessText.requireReady(loaded, skip: skipChecks)
            }
            let existing = try Crontab.read(user: user)
            let (merged, kept) = try Crontab.install(jobs, into: existing, executable: ScheduleCommand.executable)
            try Crontab.write(merged, user: user)
            if json {
                print(jsonReport(Outcome(scheduler: "cron", user: user ?? ProcessInfo.processInfo.userName, installed: jobs, kept: kept)))
            } else {
                print("installed \(jobs.count) job\(jobs.count == 1 ? "" : "s") in the crontab of \(user ?? "the current user")"
                      + (kept.isEmpty ? "" : "; kept the jobs of \(kept.count == 1 ? "a policy" : "\(kept.count) policies") installed before: \(kept.joined(separator: ", ")) "
                         + "(`storectl schedule uninstall --policy FILE` removes one's)"))
            }
            if CronDaemon.checked, !CronDaemon.isRunning {
                // Installed is not run: a container or a minimal machine has crontab but no daemon (a trial).
                FileHandle.standardError.write(Data(("storectl: warning: no cron daemon is running on this machine: the jobs are in the crontab "
                    + "but nothing runs them until one is (`systemctl enable --now cron`; `crond` on Red Hat's systems), or use `schedule install --systemd`\n").utf8))
            }
            for policy in loaded where policy.replicate != nil {
                FileHandle.standardError.write(Data("storectl: note: [replicate] of \(policy.file) is a service, not a cron job: `storectl schedule install --systemd --policy \(policy.file)`\n".utf8))
            }
        }
    }

    struct Uninstall: ParsableCommand, JSONOutput {
        static let configuration = CommandConfiguration(commandName: "uninstall", abstract: "Remove storectl's block from a user's crontab, leaving other lines alone; with --policy, only those policies' jobs.")
        @Option(help: "Whose crontab (default: yours).") var user: String?
        @Option(name: .customLong("policy"), help: "Remove only this policy's jobs (repeatable; the path install named).") var policies: [String] = []
        @Flag(help: "Print what was removed as JSON (`removed`: the policies whose jobs went).") var json = false

        func say(_ text: String, removed: [String]) {
            print(json ? jsonReport(Outcome(scheduler: "cron", user: user ?? ProcessInfo.processInfo.userName, removed: removed)) : text)
        }

        func run() throws {
            let existing = try Crontab.read(user: user)
            if !policies.isEmpty {
                let named = policies.map(FileSystem.absolute)
                let (cleaned, removed) = try Crontab.uninstall(named, from: existing)
                guard !removed.isEmpty else {
                    throw StoreOpsError(.noInput, "no jobs of \(named.joined(separator: ", ")) in the crontab of \(user ?? "the current user")",
                                        hint: "`crontab -l` shows the policies storectl's block names")
                }
                try Crontab.write(cleaned, user: user)
                say("removed the jobs of \(removed.joined(separator: ", ")) from the crontab of \(user ?? "the current user")", removed: removed)
                return
            }
            let cleaned = try Crontab.remove(existing)
            if cleaned == existing {
                say("no storectl jobs in the crontab of \(user ?? "the current user")", removed: [])
                return
            }
            let removed = try Crontab.policies(in: existing)
            try Crontab.write(cleaned, user: user)
            say("removed storectl's jobs from the crontab of \(user ?? "the current user")", removed: removed)
        }
    }

    struct Systemd: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "systemd",
            abstract: "Write a .service and a .timer per job into a folder (e.g. /etc/systemd/system).",
            discussion: "Then: systemctl daemon-reload && systemctl enable --now storectl-<policy>-<job>.timer")
        @Option(name: .customLong("policy"), help: "Policy files (repeatable).") var policies: [String]
        @Option(help: "The folder to write the units into.") var output: String
        @Flag(help: "Write the units even when a job would fail now (see `storectl policy check`).") var skipChecks = false

        func run() throws {
            for path in try Self.write(policies: policies, output: output, skipChecks: skipChecks) { print(path) }
        }

        /// Writes the policies' units into `output`; their paths.
        static func write(policies: [String], output: String, skipChecks: Bool) throws -> [String] {
            var seen = Set<String>()
            let loaded = try policies.map(Policy.load).filter { seen.insert($0.file.exactKey).inserted }
            try ReadinessText.requireReady(loaded, skip: skipChecks, replicateService: true, scheduler: .systemd)
            let jobs = Crontab.jobs(loaded)
            try SystemdUnits.refuseNewlines(loaded.flatMap { [$0.file, $0.store.path] })
            let units = try SystemdUnits.units(jobs, executable: ScheduleCommand.executable)
                + SystemdUnits.replicateUnits(loaded, executable: ScheduleCommand.executable)
            guard !units.isEmpty else { throw StoreOpsError(.usage, "the policies schedule no jobs ([schedule] snapshot/purge/maintain) and have no [replicate]") }
            try SystemdUnits.write(units, to: FileSystem.absolute(output))
            return units.map { (FileSystem.absolute(output) as NSString).appendingPathComponent($0.name) }
        }
    }
}

extension ScheduleCommand.Install {
    /// The checks, as the jobs will run: as `user`. Root runs them as that user (`setpriv`, with
    /// the environment cron gives a job: HOME, USER, LOGNAME, SHELL, a plain PATH); they ran as root,
    /// and a password file only root could read, or a repository folder the user cannot write, passed
    /// and failed the first run (a trial). Another user cannot switch: the checks run as it, and say so.
    static func requireReady(_ policies: [Policy], as user: String) throws {
        guard geteuid() == 0, let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            FileHandle.standardError.write(Data("storectl: note: checked as \(ProcessInfo.processInfo.userName), not as \(user), whom the jobs run as (only root can check as another user)\n".utf8))
            try ReadinessText.requireReady(policies, skip: false)
            return
        }
        guard let entry = getpwnam(user) else {
            throw StoreOpsError(.noInput, "no user \(user) on this machine", hint: "check --user (the user the jobs run as)")
        }
        let uid = entry.pointee.pw_uid, gid = entry.pointee.pw_gid
        let name = String(cString: entry.pointee.pw_name), home = String(cString: entry.pointee.pw_dir)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: setpriv)
        // The environment cron gives a job, set by env(1) (setpriv's --reset-env is newer than util-linux 2.35).
        process.arguments = ["--reuid=\(uid)", "--regid=\(gid)", "--init-groups", "--", "/usr/bin/env", "-i",
                             "HOME=\(home)", "USER=\(name)", "LOGNAME=\(name)", "SHELL=/bin/sh", "PATH=/usr/bin:/bin",
                             ScheduleCommand.executable, "schedule", "crontab"] + policies.flatMap { ["--policy", $0.file] }
        process.currentDirectoryURL = URL(fileURLWithPath: "/")
        let stderr = Pipe()
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        process.standardError = stderr
        try process.run()
        let said = stderr.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let status = process.terminationReason == .exit ? process.terminationStatus : ExitStatus.failure.rawValue
        // The checks ran (ready, or problems found) or storectl as that user said why not; else
        // the switch itself failed, and its words are what is said.
        let ran = status == 0 || status == ExitStatus.checksFailed.rawValue || String(decoding: said, as: UTF8.self).hasPrefix("storectl")
        guard ran else {
            throw StoreOpsError(.failure, "the checks could not be run as \(user): \(setpriv) exited \(status): \(String(decoding: said, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))",
                                hint: "--skip-checks installs without them")
        }
        FileHandle.standardError.write(Data("storectl: checked as \(user), as cron will run the jobs\n".utf8))
        FileHandle.standardError.write(said)
        if status != 0 { throw Finished(status: ExitStatus(rawValue: status)) }
    }
}
