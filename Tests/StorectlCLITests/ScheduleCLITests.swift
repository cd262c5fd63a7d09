import Foundation
import StoreLab
import StoreOps
import Testing

func scheduledPolicy(_ folder: TempFolder, store: String, snapshot: String = "*/15 * * * *") throws -> String {
    let path = folder.file("tasks.toml")
    if FileSystem.kind(of: folder.file("snaps")) == .missing { _ = try folder.repository("snaps", encrypted: true) }
    try Data("""
        [store]
        path = "\(store)"
        [[purge]]
        entity = "Item"
        deleted_flag = "ZISDELETED"
        deleted_at = "ZDELETEDAT"
        time_format = "coredata"
        retention = "30d"
        [snapshot]
        repository = "snaps"
        password_file = "password"
        [snapshot.retention]
        keep_last = 3
        [schedule]
        snapshot = "\(snapshot)"
        purge = "30 3 * * *"
        log = "jobs.jsonl"
        """.utf8).write(to: URL(fileURLWithPath: path))
    return path
}

/// A stand-in `crontab` command for STORECTL_CRONTAB, keeping its table in `crontab.txt` of
/// `folder` (`-u USER` is taken and ignored): its path and the table's.
func standInCrontab(_ folder: TempFolder) throws -> (command: String, table: String) {
    let table = folder.file("crontab.txt")
    let command = folder.file("crontab")
    try Data("#!/bin/sh\ncase \"$1\" in -l) cat '\(table)' 2>/dev/null || { echo \"no crontab for root\" >&2; exit 1; };; -u) shift 2; [ \"$1\" = - ] && cat > '\(table)' || { cat '\(table)' 2>/dev/null || { echo \"no crontab for nobody\" >&2; exit 1; }; };; -) cat > '\(table)';; esac\n".utf8)
        .write(to: URL(fileURLWithPath: command))
    #expect(chmod(command, 0o755) == 0)
    return (command, table)
}

@Suite("storectl schedule and run, end to end", .onTestThreads)
struct ScheduleCLITests {
    @Test("STORECTL_CRONTAB naming no executable: install says so, naming the path (66; it said cron was not installed)")
    func crontabStandInMissing() throws {
        let folder = try TempFolder()
        let policy = try scheduledPolicy(folder, store: try makeStore(folder))
        let missing = folder.file("no-such-crontab")
        let result = try storectl("schedule", "install", "--policy", policy, "--skip-checks", environment: ["STORECTL_CRONTAB": missing])
        #expect(result.status == 66 && result.stderr.contains("STORECTL_CRONTAB names \(missing), which is not an executable file"), "\(result.status) \(result.stderr)")
    }

    @Test("a crontab that refuses to write without reading what it is given (no permission): install reports its words and exits 1 (it was killed by SIGPIPE: 141, no message)")
    func crontabThatDoesNotRead() throws {
        let folder = try TempFolder()
        let policy = try scheduledPolicy(folder, store: try makeStore(folder))
        let crontab = folder.file("crontab-deny")
        // Its table is larger than a pipe holds (64 KiB): the new table written back cannot fit
        // before the stand-in exits without reading it, whatever the timing.
        try Data("""
        #!/bin/sh
        case "$1" in -l) i=0; while [ $i -lt 2000 ]; do echo "# a line of an existing crontab, kept as it is, number $i"; i=$((i+1)); done; exit 0;; esac
        echo "crontab: cannot write: Permission denied" >&2
        exit 1
        """.utf8).write(to: URL(fileURLWithPath: crontab))
        #expect(chmod(crontab, 0o755) == 0)
        let result = try storectl("schedule", "install", "--policy", policy, "--skip-checks", environment: ["STORECTL_CRONTAB": crontab])
        #expect(result.status == 1 && result.stderr.contains("cannot write: Permission denied"), "\(result.status) \(result.stderr)")
    }

    @Test("schedule show lists each job with its next runs in the machine's time zone (cron's and systemd's, not the shell's TZ) and UTC")
    func show() throws {
        let folder = try TempFolder()
        let policy = try scheduledPolicy(folder, store: try makeStore(folder))
        // The shell's TZ is another zone than the machine's: the runs are listed as cron runs them,
        // with a note (they were listed in the shell's zone, five hours off on a UTC server).
        let system = SystemTimeZone.zone
        let shell = system.secondsFromGMT() == TimeZone(identifier: "Asia/Tokyo")?.secondsFromGMT() ? "America/New_York" : "Asia/Tokyo"
        let result = try storectl("schedule", "show", "--policy", policy, environment: ["TZ": shell])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n")
        #expect(lines.first?.hasPrefix("snapshot  */15 * * * *  \(folder.file("Tasks.sqlite"))") == true)
        // Per job: what it runs, its jitter, whether this user's crontab has it, then its next runs.
        #expect(lines.filter { $0.hasPrefix("    ") && $0.hasSuffix(" UTC") }.count == 10)
        #expect(lines.contains { $0.hasPrefix("    runs: '") && $0.contains("' run snapshot --policy '\(policy)'") }, "\(result.stdout)")
        #expect(result.stderr.contains("times are in this machine's zone, \(system.identifier)") && result.stderr.contains("TZ=\(shell) is not theirs"), "\(result.stderr)")
        // purge is "30 3 * * *": 03:30 in the machine's zone, whatever the shell's.
        // The first column is the machine's time: 03:30 there, whatever the shell's zone.
        let localColumns = lines.filter { $0.hasPrefix("    ") }.compactMap { $0.components(separatedBy: "   ").dropFirst().first }
        #expect(localColumns.contains { $0.contains(" 03:30 ") }, "\(result.stdout)")
        #expect(!result.stdout.contains("JST") && !result.stdout.contains("GMT+9") || shell != "Asia/Tokyo", "\(result.stdout)")
        let same = try storectl("schedule", "show", "--policy", policy, environment: ["TZ": system.identifier])
        #expect(same.status == 0 && same.stderr.isEmpty, "\(same.stderr)")
        let json = try storectl("schedule", "show", "--policy", policy, "--json")
        let entries = try JSON.decoder().decode([ScheduleEntry].self, from: Data(json.stdout.utf8))
        #expect(entries.map(\.job) == [.snapshot, .purge] && entries.allSatisfy { $0.nextRuns.count == 5 })
        // Installed (a stand-in crontab): said so; the policy changed since: said to install again.
        let stand = ["STORECTL_CRONTAB": try standInCrontab(folder).command]
        func states() throws -> [String?] {
            try JSON.decoder().decode([ScheduleEntry].self, from: Data(try storectl("schedule", "show", "--policy", policy, "--json", environment: stand).stdout.utf8)).map(\.crontab)
        }
        #expect(try states() == ["not installed", "not installed"])
        #expect(try storectl("schedule", "install", "--policy", policy, "--skip-checks", environment: stand).status == 0)
        #expect(try states() == ["installed", "installed"])
        let text = try String(contentsOfFile: policy, encoding: .utf8)
        try Data(text.replacingOccurrences(of: "*/15 * * * *", with: "*/20 * * * *").utf8).write(to: URL(fileURLWithPath: policy))
        #expect(try states() == ["differs", "installed"])
        let shown = try storectl("schedule", "show", "--policy", policy, environment: stand)
        #expect(shown.stdout.contains("as another line") && shown.stdout.contains("schedule install --policy \(policy)` again"), "\(shown.stdout)")
    }

    @Test("--json for automation: schedule install and uninstall say what they installed and removed, the kill switch's engage, status and release say its state (`ok` true; a failure is the usual error document)")
    func jsonForAutomation() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let policy = try scheduledPolicy(folder, store: store)
        let stand = ["STORECTL_CRONTAB": try standInCrontab(folder).command]
        func object(_ result: ChildProcess.Result) throws -> [String: Any] {
            try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stdout) \(result.stderr)")
        }
        let installed = try object(try storectl("schedule", "install", "--policy", policy, "--skip-checks", "--json", environment: stand))
        #expect(installed["ok"] as? Bool == true && (installed["installed"] as? [[String: Any]])?.compactMap { $0["job"] as? String } == ["snapshot", "purge"], "\(installed)")
        let removed = try object(try storectl("schedule", "uninstall", "--json", environment: stand))
        #expect(removed["ok"] as? Bool == true && removed["removed"] as? [String] == [policy], "\(removed)")
        let again = try object(try storectl("schedule", "uninstall", "--json", environment: stand))
        #expect(again["removed"] as? [String] == [])
        let engaged = try object(try storectl("killswitch", "engage", store, "--reason", "maintenance", "--json"))
        #expect(engaged["ok"] as? Bool == true && engaged["engaged"] as? Bool == true && (engaged["content"] as? String)?.hasSuffix("maintenance") == true, "\(engaged)")
        let shown = try object(try storectl("killswitch", "status", store, "--json"))
        #expect(shown["engaged"] as? Bool == true)
        let released = try object(try storectl("killswitch", "release", store, "--json"))
        #expect(released["released"] as? Bool == true && released["engaged"] as? Bool == false, "\(released)")
        let status = try storectl("killswitch", "status", folder.file("missing.sqlite"), "--json")
        let missing = try object(status)
        #expect(status.status == 66 && missing["ok"] as? Bool == false)
    }

    @Test("the [replicate] service is checked before its unit is written, as systemd will start it: a repository typo, a password only in this shell's environment, a status_file folder that does not exist, a store not in WAL mode are refused (2, nothing written) and failed by policy check; a ready one is written and policy check says so")
    func replicateServiceIsChecked() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        _ = try folder.repository("snaps", encrypted: true)
        func policy(_ name: String, repository: String = "snaps", password: Bool = true, replicate: String = "sync_interval = \"1s\"", store path: String? = nil) throws -> String {
            let file = folder.file("\(name).toml")
            try Data("""
                [store]
                path = "\(path ?? store)"
                [snapshot]
                repository = "\(repository)"
                \(password ? "password_file = \"password\"" : "")
                [replicate]
                \(replicate)
                """.utf8).write(to: URL(fileURLWithPath: file))
            return file
        }
        var options = SampleStore.Options()
        options.items = 10
        options.journalMode = "delete"
        let rollback = try SampleStore.create(at: folder.file("Rollback.sqlite"), options: options).path
        // The installing shell has the password in its environment; systemd will not.
        let shell = ["STORECTL_PASSWORD_FILE": folder.file("password")]
        let cases: [(String, String, String)] = [
            (try policy("typo", repository: "snapz"), "repository", "there is no snapshot repository at \(folder.file("snapz"))"),
            (try policy("envpassword", password: false), "password", "names no password_file or password_command"),
            (try policy("nostatus", replicate: "status_file = \"nowhere/status.json\""), "replicate", "[replicate] status_file \(folder.file("nowhere/status.json"))"),
            (try policy("notwal", store: rollback), "replicate", "is not in WAL mode"),
        ]
        for (file, check, message) in cases {
            let units = folder.file("units-\(FileSystem.name(of: file))")
            try FileManager.default.createDirectory(atPath: units, withIntermediateDirectories: false)
            let written = try storectl("schedule", "systemd", "--policy", file, "--output", units, environment: shell)
            #expect(written.status == 2 && written.stderr.contains("the replicate service would fail") && written.stderr.contains(message), "\(file): \(written.stderr)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: units).isEmpty, "\(file): nothing written")
            let checked = try storectl("policy", "check", file, environment: shell)
            #expect(checked.status == 2 && checked.stdout.contains("  \(check.padding(toLength: 12, withPad: " ", startingAt: 0)) ") && checked.stdout.contains(message), "\(file): \(checked.stdout)")
        }
        // cron never runs the service: a crontab for a policy with [replicate] is not refused for it.
        let withJob = folder.file("cronjob.toml")
        try Data((try String(contentsOfFile: try policy("notwal2", store: rollback), encoding: .utf8)) .replacingOccurrences(of: "[replicate]", with: "[schedule]\nsnapshot = \"0 * * * *\"\n[replicate]").utf8)
            .write(to: URL(fileURLWithPath: withJob))
        let crontab = try storectl("schedule", "crontab", "--policy", withJob)
        #expect(crontab.status == 0 && crontab.stdout.contains("run snapshot"), "\(crontab.status) \(crontab.stdout) \(crontab.stderr)")
        let ready = try policy("ready", replicate: "status_file = \"status.json\"")
        let units = folder.file("units")
        try FileManager.default.createDirectory(atPath: units, withIntermediateDirectories: false)
        let written = try storectl("schedule", "systemd", "--policy", ready, "--output", units)
        #expect(written.status == 0, "\(written.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: units) == ["storectl-ready-replicate.service"])
        // `schedule install --systemd` writes the same unit and says how to enable it; the same
        // checks first (nothing written for a policy whose service would fail); --user is the crontab's.
        let installed = folder.file("installed")
        try FileManager.default.createDirectory(atPath: installed, withIntermediateDirectories: false)
        let install = try storectl("schedule", "install", "--systemd", "--policy", ready, "--output", installed)
        #expect(install.status == 0 && install.stdout.contains("systemctl daemon-reload && systemctl enable --now storectl-ready-replicate.service"), "\(install.stdout) \(install.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: installed) == ["storectl-ready-replicate.service"])
        #expect(try String(contentsOfFile: installed + "/storectl-ready-replicate.service", encoding: .utf8)
                == (try String(contentsOfFile: units + "/storectl-ready-replicate.service", encoding: .utf8)))
        let refusedFolder = folder.file("refused")
        try FileManager.default.createDirectory(atPath: refusedFolder, withIntermediateDirectories: false)
        let refused = try storectl("schedule", "install", "--systemd", "--policy", cases[0].0, "--output", refusedFolder, environment: shell)
        #expect(refused.status == 2 && refused.stderr.contains("the replicate service would fail"), "\(refused.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: refusedFolder).isEmpty)
        let mixed = try storectl("schedule", "install", "--systemd", "--user", "nobody", "--policy", ready)
        #expect(mixed.status == 64, "\(mixed.status) \(mixed.stderr)")
        let checked = try storectl("policy", "check", ready)
        #expect(checked.status == 0 && checked.stdout.contains("ready to run snapshot, the replicate service: store, repository (password ok), replicate)"), "\(checked.stdout)")
    }

    @Test("a policy's password_command runs in the policy's folder (as password_file is read from it): `cat password` beside the policy works from any folder, as cron and systemd run jobs; a failing one is named as the policy's, not STORECTL_PASSWORD_COMMAND")
    func passwordCommandRunsInThePolicysFolder() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        _ = try folder.repository("snaps", encrypted: true)
        let policy = folder.file("command.toml")
        try Data("""
            [store]
            path = "\(store)"
            [snapshot]
            repository = "snaps"
            password_command = "cat password"
            """.utf8).write(to: URL(fileURLWithPath: policy))
        let elsewhere = try TempFolder()
        let checked = try ChildProcess.run(Binaries.storectl, ["policy", "check", policy], currentDirectory: elsewhere.path)
        #expect(checked.status == 0 && checked.stdout.contains("password ok"), "\(checked.stdout) \(checked.stderr)")
        let run = try ChildProcess.run(Binaries.storectl, ["run", "snapshot", "--policy", policy], currentDirectory: "/")
        #expect(run.status == 0, "\(run.stderr)")
        try Data("""
            [store]
            path = "\(store)"
            [snapshot]
            repository = "snaps"
            password_command = "cat no-such-file"
            """.utf8).write(to: URL(fileURLWithPath: policy))
        let failing = try ChildProcess.run(Binaries.storectl, ["run", "snapshot", "--policy", policy], currentDirectory: "/")
        #expect(failing.status == 1 && failing.stderr.contains("the policy's password_command (run in \(folder.path)) exited 1"), "\(failing.stderr)")
    }

    @Test("schedule crontab prints the block with this binary's absolute path; systemd writes the units")
    func crontabAndSystemd() throws {
        let folder = try TempFolder()
        let policy = try scheduledPolicy(folder, store: try makeStore(folder))
        let crontab = try storectl("schedule", "crontab", "--policy", policy)
        #expect(crontab.status == 0)
        #expect(crontab.stdout.contains("*/15 * * * * '\(FileSystem.absolute(Binaries.storectl))' run snapshot --policy '\(policy)' >> '\(folder.file("jobs.jsonl")).out' 2>&1"))
        let units = folder.file("units")
        try FileManager.default.createDirectory(atPath: units, withIntermediateDirectories: false)
        let systemd = try storectl("schedule", "systemd", "--policy", policy, "--output", units)
        #expect(systemd.status == 0)
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: units)) == ["storectl-tasks-snapshot.service", "storectl-tasks-snapshot.timer",
                                                                                   "storectl-tasks-purge.service", "storectl-tasks-purge.timer"])
        #expect(try storectl("schedule", "systemd", "--policy", policy, "--output", folder.file("nowhere")).status == 73)

        // Run through a symlink (as /usr/bin/storectl of a package or a versioned install): the
        // jobs name the symlink, so an upgrade that moves the binary does not break them; found
        // on PATH the same way the shell found it.
        let bin = folder.file("bin")
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: false)
        try FileManager.default.createSymbolicLink(atPath: bin + "/storectl", withDestinationPath: FileSystem.absolute(Binaries.storectl))
        let linked = try ChildProcess.run(bin + "/storectl", ["schedule", "crontab", "--policy", policy])
        #expect(linked.stdout.contains("* '\(bin)/storectl' run snapshot"), "\(linked.stdout)")
        let onPath = try ChildProcess.run("/bin/sh", ["-c", "PATH=\"$1:$PATH\" exec storectl schedule crontab --policy \"$2\"", "sh", bin, policy])
        #expect(onPath.stdout.contains("* '\(bin)/storectl' run snapshot"), "\(onPath.stdout) \(onPath.stderr)")
    }

    @Test("run: quiet on success, one line on failure, the log line either way")
    func run() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let policy = try scheduledPolicy(folder, store: store)
        let ok = try storectl("run", "snapshot", "--policy", policy)
        #expect(ok.status == 0 && ok.stdout.isEmpty && ok.stderr.isEmpty, "\(ok.stderr)")
        unlink(store)
        let failed = try storectl("run", "purge", "--policy", policy)
        #expect(failed.status == 66)
        // The error, and its hint as every command prints it (the hint was lost).
        let said = failed.stderr.split(separator: "\n")
        #expect(said.count == 2 && failed.stderr.hasPrefix("storectl: purge (\(store)): ") && said[1].hasPrefix("  hint: "), "\(failed.stderr)")
        let log = try String(contentsOfFile: folder.file("jobs.jsonl"), encoding: .utf8).split(separator: "\n")
        #expect(log.count == 2 && log[1].contains("\"outcome\":\"failed\"") && log[1].contains("\"hint\":"))
        // --json: the record with the fields every command's JSON has (`ok`, `status`, `message`, `hint`).
        let json = try storectl("run", "purge", "--policy", policy, "--json")
        let fields = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any] ?? [:]
        #expect(json.status == 66 && fields["ok"] as? Bool == false && fields["status"] as? Int == 66 && fields["exitCode"] as? Int == 66
                && (fields["message"] as? String)?.contains("Tasks.sqlite") == true && fields["hint"] is String && fields["outcome"] as? String == "failed", "\(json.stdout)")
        #expect(try storectl("run", "vacuum", "--policy", policy).status == 64)
        #expect(try storectl("run", "purge", "--policy", policy, "--jitter", "soon").status == 64)
    }

    @Test("a job log that is a symbolic link, another user's file or a hard link is not appended to: the job's work is done and the run ends 73 saying why (nothing appended to what the link names); policy check names it (2); a password file every user can write is a note (a trial: root's job appended its log line to a planted link's target, policy check said ok)",
          .enabled(if: geteuid() == 0))
    func logThatIsNotTheJobsIsRefused() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let policy = try scheduledPolicy(folder, store: store)
        let text = try String(contentsOfFile: policy, encoding: .utf8)
        try Data(text.replacingOccurrences(of: "log = \"jobs.jsonl\"", with: "log = \"logs/jobs.jsonl\"").utf8).write(to: URL(fileURLWithPath: policy))
        let logs = folder.file("logs")
        try FileManager.default.createDirectory(atPath: logs, withIntermediateDirectories: false)
        chmod(logs, 0o777)   // a folder others can write: what they plant there is refused, the job runs
        let log = logs + "/jobs.jsonl"
        let victim = folder.file("victim.txt")
        try Data("VICTIM\n".utf8).write(to: URL(fileURLWithPath: victim))
        let cases: [(String, () -> Void)] = [
            ("is a symbolic link", { _ = symlink(victim, log); _ = lchown(log, 65534, 0) }),
            ("is owned by nobody", { FileManager.default.createFile(atPath: log, contents: nil); chown(log, 65534, 0) }),
            ("has 2 names", { _ = link(victim, log) }),
        ]
        for (why, make) in cases {
            unlink(log)
            make()
            let run = try storectl("run", "snapshot", "--policy", policy)
            #expect(run.status == 73 && run.stderr.contains("refused to append to the job log") && run.stderr.contains(why) && run.stderr.contains("move it aside") && !run.stderr.contains("folder writable"), "\(why): \(run.status) \(run.stderr)")
            let check = try storectl("policy", "check", policy)
            #expect(check.status == 2 && check.stdout.contains(why), "\(why): \(check.stdout)")
        }
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "VICTIM\n", "nothing appended to what the link named")
        unlink(log)
        #expect(try storectl("run", "snapshot", "--policy", policy).status == 0)
        #expect((try? String(contentsOfFile: log, encoding: .utf8))?.contains("\"outcome\":\"ok\"") == true)
        chmod(folder.file("password"), 0o646)
        let noted = try storectl("policy", "check", policy)
        #expect(noted.status == 0 && noted.stdout.contains("is writable by every user"), "\(noted.stdout)")
    }

    @Test("a policy another user can write (every user, root's job's group, another owner, or through its folder), or whose password_command's program another user owns, is refused by run (65, nothing written: not even its log), policy check and install (2, nothing installed): its password_command runs as the job's user",
          .enabled(if: geteuid() == 0))
    func policyOthersCanWriteIsRefused() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let policy = try scheduledPolicy(folder, store: store)
        let (standIn, crontab) = try standInCrontab(folder)
        let cases: [(String, () -> Void, () -> Void)] = [
            ("is writable by every user", { chmod(policy, 0o646) }, { chmod(policy, 0o644) }),
            ("is writable by its group", { chmod(policy, 0o664) }, { chmod(policy, 0o644) }),
            ("is owned by nobody", { chown(policy, 65534, 0) }, { chown(policy, 0, 0) }),
            ("its folder \(FileSystem.absolute(folder.path)) is writable by every user", { chmod(folder.path, 0o777) }, { chmod(folder.path, 0o700) }),
        ]
        for (why, make, undo) in cases {
            make()
            defer { undo() }
            let run = try storectl("run", "snapshot", "--policy", policy)
            #expect(run.status == 65 && run.stderr.contains("refused to run the policy") && run.stderr.contains(why), "\(why): \(run.status) \(run.stderr)")
            let check = try storectl("policy", "check", policy)
            #expect(check.status == 2 && check.stdout.contains("policy ") && check.stdout.contains(why), "\(why): \(check.stdout)")
            let replicate = try storectl("replicate", "--policy", policy, "--for", "1s")
            #expect(replicate.status == 65 && replicate.stderr.contains(why), "\(why): \(replicate.status) \(replicate.stderr)")
            let install = try storectl("schedule", "install", "--policy", policy, environment: ["STORECTL_CRONTAB": standIn])
            #expect(install.status == 2 && install.stderr.contains(why) && FileSystem.kind(of: crontab) == .missing, "\(why): \(install.stderr)")
        }
        // Nothing ran: no snapshot was made, and the refused policy's log was not written (root
        // wrote a refused policy's log and metrics, wherever it named them: a review).
        #expect(try storectl("snapshot", "list", "--repo", folder.file("snaps"), "--password-file", folder.file("password")).stdout.contains("no snapshots"))
        #expect(FileSystem.kind(of: folder.file("jobs.jsonl")) == .missing)
        // A policy with no schedule is a person's: policy check does not judge its owner.
        let manual = folder.file("manual.toml")
        try Data("[store]\npath = \"\(store)\"\n[[purge]]\nentity = \"Item\"\ndeleted_flag = \"ZISDELETED\"\ndeleted_at = \"ZDELETEDAT\"\ntime_format = \"coredata\"\nretention = \"30d\"\n".utf8)
            .write(to: URL(fileURLWithPath: manual))
        chmod(manual, 0o666)
        #expect(try storectl("policy", "check", manual).status == 0)
        // The program its password_command runs, owned by another user: refused (it ran as root).
        let script = folder.file("getpw.sh")
        try Data("#!/bin/sh\ncat '\(folder.file("password"))'\n".utf8).write(to: URL(fileURLWithPath: script))
        chmod(script, 0o755)
        chown(script, 65534, 0)
        let text = try String(contentsOfFile: policy, encoding: .utf8)
        try Data(text.replacingOccurrences(of: "password_file = \"password\"", with: "password_command = \"./getpw.sh\"").utf8).write(to: URL(fileURLWithPath: policy))
        let byScript = try storectl("run", "snapshot", "--policy", policy)
        #expect(byScript.status == 65 && byScript.stderr.contains("password_command names \(script): \(script) is owned by nobody"), "\(byScript.status) \(byScript.stderr)")
        let checked = try storectl("policy", "check", policy)
        #expect(checked.status == 2 && checked.stdout.contains("password_command names"), "\(checked.stdout)")
        // Forms a shell would run the same script by are refused, not parsed around (a review ran
        // it as root through each): only plain words, every file they name checked.
        let marker = folder.file("ran-as-root")
        try Data("#!/bin/sh\ntouch '\(marker)'\ncat '\(folder.file("password"))'\n".utf8).write(to: URL(fileURLWithPath: script))
        for (command, why) in [("FOO=1 ./getpw.sh", "variable assignment"), ("exec ./getpw.sh", "is owned by nobody"), ("\\\"./getpw.sh\\\"", "plain words only"),
                               ("true; ./getpw.sh", "plain words only"), ("sh -e ./getpw.sh", "is owned by nobody"), ("$(echo ./getpw.sh)", "plain words only")] {
            try Data(text.replacingOccurrences(of: "password_file = \"password\"", with: "password_command = \"\(command)\"").utf8).write(to: URL(fileURLWithPath: policy))
            let refused = try storectl("run", "snapshot", "--policy", policy)
            #expect(refused.status == 65 && refused.stderr.contains(why), "\(command): \(refused.status) \(refused.stderr)")
            let check = try storectl("policy", "check", policy)
            #expect(check.status == 2 && check.stdout.contains(why), "\(command): \(check.stdout)")
            #expect(FileSystem.kind(of: marker) == .missing, "\(command) ran the script")
        }
        // A symbolic link another user owns on the command's path: it could be pointed elsewhere
        // between the check and the run (the check followed it and looked only at the target).
        let trusted = folder.file("trusted")
        try FileManager.default.createDirectory(atPath: trusted, withIntermediateDirectories: false)
        try FileManager.default.copyItem(atPath: script, toPath: trusted + "/getpw.sh")
        chown(trusted + "/getpw.sh", 0, 0)
        #expect(symlink(trusted, folder.file("link")) == 0 && lchown(folder.file("link"), 65534, 0) == 0)
        try Data(text.replacingOccurrences(of: "password_file = \"password\"", with: "password_command = \"./link/getpw.sh\"").utf8).write(to: URL(fileURLWithPath: policy))
        let linked = try storectl("run", "snapshot", "--policy", policy)
        #expect(linked.status == 65 && linked.stderr.contains("the symbolic link \(folder.file("link")) is owned by nobody"), "\(linked.status) \(linked.stderr)")
        #expect(FileSystem.kind(of: marker) == .missing)
        // The policy reached through such a link: refused the same way.
        try Data(text.utf8).write(to: URL(fileURLWithPath: policy))
        let viaLink = try storectl("run", "snapshot", "--policy", folder.file("link") + "/../tasks.toml")
        #expect(viaLink.status == 65 && viaLink.stderr.contains("symbolic link"), "\(viaLink.status) \(viaLink.stderr)")
        chown(script, 0, 0)
        try Data(text.replacingOccurrences(of: "password_file = \"password\"", with: "password_command = \"./getpw.sh\"").utf8).write(to: URL(fileURLWithPath: policy))
        #expect(try storectl("run", "snapshot", "--policy", policy).status == 0)
        #expect(FileSystem.kind(of: marker) == .file)
        try Data(text.utf8).write(to: URL(fileURLWithPath: policy))
        // Sticky and shared (as /tmp) is fine: no one can rename another user's file there.
        chmod(folder.path, 0o1777)
        defer { chmod(folder.path, 0o700) }
        let run = try storectl("run", "snapshot", "--policy", policy)
        #expect(run.status == 0, "\(run.stderr)")
    }

    @Test("an engaged kill switch, or a circuit breaker that would trip now, is a note of policy check and install (ready, exit 0): the purge would stop before its first batch, or be refused")
    func killSwitchIsANote() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let policy = try scheduledPolicy(folder, store: store)
        #expect(try storectl("policy", "check", policy).stdout.contains("note:") == false)
        #expect(try storectl("killswitch", "engage", store).status == 0)
        let check = try storectl("policy", "check", policy)
        #expect(check.status == 0 && check.stdout.contains("ok    ") && check.stdout.contains("note: the kill switch \(store).storectl-killswitch is engaged"), "\(check.stdout)")
        let json = try storectl("policy", "check", policy, "--json")
        #expect(json.stdout.contains("\"notes\"") && json.stdout.contains("killswitch"), "\(json.stdout)")
        let crontab = try storectl("schedule", "crontab", "--policy", policy)
        #expect(crontab.status == 0 && crontab.stderr.contains("storectl: note: \(policy): the kill switch"), "\(crontab.stderr)")
        // A circuit breaker that would trip now is a note too (it said ready).
        #expect(try storectl("killswitch", "release", store).status == 0)
        let text = try String(contentsOfFile: policy, encoding: .utf8)
        try Data(text.replacingOccurrences(of: "retention = \"30d\"", with: "retention = \"30d\"\nmax_fraction = 0.0001").utf8).write(to: URL(fileURLWithPath: policy))
        let breaker = try storectl("policy", "check", policy)
        #expect(breaker.status == 0 && breaker.stdout.contains("note: the circuit breaker would refuse the purge if it ran now: rule ")
                && !breaker.stdout.contains("kill switch"), "\(breaker.stdout)")
    }

    @Test("schedule install --user as root checks as that user (a password file only root can read was ready, and the user's first run failed)", .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")))
    func installForAnotherUserChecksAsThem() throws {
        let folder = try TempFolder()
        let policy = try scheduledPolicy(folder, store: try makeStore(folder))
        let (standIn, crontab) = try standInCrontab(folder)
        #expect(try ChildProcess.run("/bin/chown", ["-R", "65534:65534", folder.path]).status == 0)
        #expect(chmod(folder.path, 0o755) == 0)
        // Everything nobody's but the password file, which only root can read.
        let password = folder.file("password")
        #expect(chown(password, 0, 0) == 0 && chmod(password, 0o600) == 0)
        let refused = try storectl("schedule", "install", "--user", "nobody", "--policy", policy, environment: ["STORECTL_CRONTAB": standIn])
        #expect(refused.status == 2 && refused.stderr.contains("checked as nobody") && refused.stderr.contains("password"), "\(refused.status) \(refused.stderr)")
        #expect(FileSystem.kind(of: crontab) == .missing)
        // Checked as nobody, whose policy it is (as root, nobody's policy is itself refused).
        #expect(!refused.stderr.contains("is owned by nobody"), "\(refused.stderr)")
        #expect(chown(password, 65534, 65534) == 0)
        let installed = try storectl("schedule", "install", "--user", "nobody", "--policy", policy, environment: ["STORECTL_CRONTAB": standIn])
        #expect(installed.status == 0 && installed.stdout.contains("installed 2 jobs in the crontab of nobody"), "\(installed.status) \(installed.stderr)")
        #expect(FileSystem.kind(of: crontab) == .file)
    }

    @Test("install warns when no cron daemon runs (the jobs are installed but nothing runs them)")
    func installWithoutCronDaemon() throws {
        let folder = try TempFolder()
        let policy = try scheduledPolicy(folder, store: try makeStore(folder))
        let (standIn, crontab) = try standInCrontab(folder)
        let none = try storectl("schedule", "install", "--policy", policy, environment: ["STORECTL_CRONTAB": standIn, "STORECTL_TEST_CRON_DAEMONS": "no-such-cron-daemon"])
        #expect(none.status == 0 && none.stderr.contains("warning: no cron daemon is running on this machine"), "\(none.stderr)")
        // A daemon by another name that does run (this test's own process stands in for it).
        let me = try String(contentsOfFile: "/proc/self/comm", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let found = try storectl("schedule", "install", "--policy", policy, environment: ["STORECTL_CRONTAB": standIn, "STORECTL_TEST_CRON_DAEMONS": me])
        #expect(found.status == 0 && !found.stderr.contains("no cron daemon"), "\(found.stderr)")
    }
}

/// Installs a job into the crontab of a real cron daemon and waits for it to run. About a minute;
/// opt-in locally (STORECTL_CRON_TEST=1), always on in CI (.ci/run installs cron and sets it).
@Suite("real cron", .onOwnThread, .enabled(if: ProcessInfo.processInfo.environment["STORECTL_CRON_TEST"] == "1"))
struct RealCronTests {
    // No `.timeLimit`: Swift Testing starts its clock before the suite's trait moves the body to
    // its thread, so it would count any time queued for it (a CI run: 240 s passed before the body
    // began); the wait below has its own deadline (150 s), and the run its watchdog.
    @Test("schedule install puts an every-minute snapshot job in root's crontab; cron runs it; uninstall restores the crontab")
    func everyMinute() throws {
        try #require(getuid() == 0, "needs root to run a cron daemon")
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/sbin/cron"), "apt-get install cron")
        let folder = try TempFolder()
        chmod(folder.path, 0o755)
        let store = try makeStore(folder)
        let policy = try scheduledPolicy(folder, store: store, snapshot: "* * * * *")
        let original = try Crontab.read(user: nil)
        defer { try? Crontab.write(original, user: nil) }
        let foreign = original + "# a foreign line storectl must keep\n"
        try Crontab.write(foreign, user: nil)

        let install = try storectl("schedule", "install", "--policy", policy)
        #expect(install.status == 0, "\(install.stderr)")
        #expect(try storectl("schedule", "install", "--policy", policy).status == 0, "installing twice is harmless")
        let installed = try Crontab.read(user: nil)
        #expect(installed.hasPrefix(foreign) && installed.components(separatedBy: "# BEGIN storectl").count == 2)

        // Our own daemon unless one already runs; stop only the one started here. (SIGKILL: a child
        // started from a test thread inherits that thread's blocked signals, SIGTERM included.)
        let running = try ChildProcess.run("/usr/bin/pgrep", ["-x", "cron"]).status == 0
        let daemon = running ? nil : try ChildProcess.Running("/usr/sbin/cron", ["-f"])
        defer { daemon?.signal(SIGKILL); _ = daemon?.wait() }

        let log = folder.file("jobs.jsonl")
        let deadline = Date().addingTimeInterval(150)
        var record: JobRun.Record?
        while Date() < deadline, record == nil {
            sleep(2)
            if let line = (try? String(contentsOfFile: log, encoding: .utf8))?.split(separator: "\n").first {
                record = try JSON.decoder().decode(JobRun.Record.self, from: Data(line.utf8))
            }
        }
        let ran = try #require(record, "cron did not run the job within 150 s")
        #expect(ran.job == .snapshot && ran.outcome == "ok", "\(ran.error ?? "")")
        let snapshots = try SnapshotSummary.list(repository: folder.file("snaps"), password: .file(try folder.passwordFile()))
        #expect(snapshots.map(\.id).contains(ran.snapshotId ?? "none"))

        // One policy's jobs by name: a policy with none there is 66, and the crontab is left alone.
        let none = try storectl("schedule", "uninstall", "--policy", folder.file("other.toml"))
        #expect(none.status == 66 && none.stderr.contains("no jobs of \(folder.file("other.toml"))"), "\(none.stderr)")
        let byPolicy = try storectl("schedule", "uninstall", "--policy", policy)
        #expect(byPolicy.status == 0 && byPolicy.stdout.contains("removed the jobs of"), "\(byPolicy.stdout)\(byPolicy.stderr)")
        #expect(try storectl("schedule", "uninstall").status == 0)
        #expect(try Crontab.read(user: nil) == foreign)
    }
}
