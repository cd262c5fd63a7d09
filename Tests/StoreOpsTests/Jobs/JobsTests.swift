import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

/// A sample store with a policy scheduling all three jobs.
struct ScheduledFixture {
    let folder: TempFolder
    let store: String
    let policy: String

    init(items: Int = 3_000, keepLast: Int = 2, rule: String? = nil, schedule: String = "") throws {
        folder = try TempFolder()
        store = try sampleStore(in: folder, items: items)
        // Scheduled jobs on an encrypted format-2 repository, the password named by the policy.
        _ = try folder.repository("snaps", encrypted: true)
        try FileManager.default.createDirectory(atPath: folder.file("metrics"), withIntermediateDirectories: false)
        policy = try writePolicy("""
            [store]
            path = "Tasks.sqlite"
            [[purge]]
            name = "items"
            entity = "Item"
            deleted_flag = "ZISDELETED"
            deleted_at = "ZDELETEDAT"
            time_format = "coredata"
            retention = "30d"
            \(rule ?? "")
            [snapshot]
            repository = "snaps"
            password_file = "password"
            [snapshot.retention]
            keep_last = \(keepLast)
            [schedule]
            snapshot = "15 * * * *"
            purge = "30 3 * * *"
            maintain = "0 4 * * 0"
            jitter = "90s"
            log = "jobs.jsonl"
            metrics = "metrics"
            \(schedule)
            """, in: folder)
    }

    func logLines() throws -> [JobRun.Record] {
        try String(contentsOfFile: folder.file("jobs.jsonl"), encoding: .utf8).split(separator: "\n")
            .map { try JSON.decoder().decode(JobRun.Record.self, from: Data($0.utf8)) }
    }
}

@Suite("crontab and systemd")
struct CrontabTests {
    let foreign = "MAILTO=ops@example.com\n# nightly report\n0 6 * * * /usr/local/bin/report\n"

    @Test("merge adds the block, replaces only it on re-install, and keeps every foreign line")
    func mergeIsIdempotent() throws {
        let fixture = try ScheduledFixture()
        let jobs = Crontab.jobs([try Policy.load(fixture.policy)])
        let block = Crontab.block(jobs, executable: "/usr/local/bin/storectl")
        let once = try Crontab.merge(foreign, block: block)
        #expect(once.hasPrefix(foreign))
        #expect(try Crontab.merge(once, block: block) == once, "installing twice changes nothing")
        let later = once + "15 7 * * * /usr/local/bin/other\n"
        let updated = try Crontab.merge(later, block: Array(block.prefix(3)) + [Crontab.end])
        #expect(updated.contains("0 6 * * * /usr/local/bin/report") && updated.contains("15 7 * * * /usr/local/bin/other"))
        #expect(updated.components(separatedBy: "# BEGIN storectl").count == 2)
        #expect(!updated.contains("run maintain"), "the old block was replaced, not added to")
        #expect(try Crontab.remove(updated) == foreign + "15 7 * * * /usr/local/bin/other\n")
        #expect(try Crontab.remove(foreign) == foreign)
        #expect(try Crontab.merge("", block: block).hasPrefix(Crontab.begin))
    }

    @Test("install keeps the jobs of another policy installed before (they were replaced, silently); installing a policy again replaces only its own; uninstall --policy removes one's, the block once none is left")
    func installKeepsOtherPolicies() throws {
        let first = try ScheduledFixture(), second = try ScheduledFixture()
        let a = try Policy.load(first.policy), b = try Policy.load(second.policy)
        let afterA = try Crontab.install(Crontab.jobs([a]), into: foreign, executable: "/usr/bin/storectl")
        #expect(afterA.kept.isEmpty)
        let afterB = try Crontab.install(Crontab.jobs([b]), into: afterA.text, executable: "/usr/bin/storectl")
        #expect(afterB.kept == [a.file], "\(afterB.kept)")
        for policy in [a, b] { #expect(afterB.text.components(separatedBy: "--policy '\(policy.file)'").count - 1 == Crontab.jobs([policy]).count, "\(afterB.text)") }
        #expect(afterB.text.hasPrefix(foreign) && afterB.text.components(separatedBy: "# BEGIN storectl").count == 2)
        let again = try Crontab.install(Crontab.jobs([a]), into: afterB.text, executable: "/usr/bin/storectl")
        #expect(again.kept == [b.file] && again.text.components(separatedBy: "--policy '\(a.file)'").count - 1 == Crontab.jobs([a]).count, "\(again.text)")
        let withoutA = try Crontab.uninstall([a.file], from: again.text)
        #expect(withoutA.removed == [a.file] && !withoutA.text.contains(a.file) && withoutA.text.contains(b.file))
        #expect(try Crontab.uninstall([b.file], from: withoutA.text).text == foreign)
    }

    @Test("systemd units of two policies with the same file name (in two folders): the second is refused (73), the first's units left as they were")
    func systemdUnitsOfAnotherPolicy() throws {
        let first = try ScheduledFixture(), second = try ScheduledFixture()
        #expect(FileSystem.name(of: first.policy) == FileSystem.name(of: second.policy))
        let out = try TempFolder()
        let unitsA = try SystemdUnits.units(Crontab.jobs([try Policy.load(first.policy)]), executable: "/usr/bin/storectl")
        try SystemdUnits.write(unitsA, to: out.path)
        let before = try unitsA.map { try String(contentsOfFile: out.file($0.name), encoding: .utf8) }
        let unitsB = try SystemdUnits.units(Crontab.jobs([try Policy.load(second.policy)]), executable: "/usr/bin/storectl")
        let error = #expect(throws: StoreOpsError.self) { try SystemdUnits.write(unitsB, to: out.path) }
        #expect(error?.status == .cannotCreate && error?.message.contains(first.policy) == true, "\(error?.message ?? "")")
        #expect(try unitsA.map { try String(contentsOfFile: out.file($0.name), encoding: .utf8) } == before)
        try SystemdUnits.write(unitsA, to: out.path)   // the same policy again: its own units, replaced
    }

    @Test("a damaged block is refused (65) rather than guessed at")
    func damaged() throws {
        #expect((#expect(throws: StoreOpsError.self) { try Crontab.merge("\(Crontab.begin)\n* * * * * x\n", block: []) })?.status == .badData)
        #expect((#expect(throws: StoreOpsError.self) { try Crontab.remove("\(Crontab.end)\n\(Crontab.begin)\n") })?.status == .badData)
    }

    @Test("the lines: absolute paths quoted for sh, % escaped, jitter, output beside the job log, a marker per job")
    func lines() throws {
        let job = Crontab.Job(job: .purge, policy: "/etc/storectl/it's 100%.toml", store: "/srv/a.sqlite", expression: "30 3 * * *",
                              jitter: try DurationText.parse("2m").get(), log: "/var/log/storectl/a.jsonl")
        let block = Crontab.block([job], executable: "/opt/storectl/bin/storectl")
        #expect(block == [
            Crontab.begin,
            "# storectl purge: /etc/storectl/it's 100%.toml (store /srv/a.sqlite)",
            "30 3 * * * '/opt/storectl/bin/storectl' run purge --policy '/etc/storectl/it'\\''s 100\\%.toml' --jitter 2m >> '/var/log/storectl/a.jsonl.out' 2>&1",
            Crontab.end,
        ])
    }

    @Test("systemd units: a oneshot service and a persistent timer per job")
    func systemd() throws {
        let fixture = try ScheduledFixture()
        let units = try SystemdUnits.units(Crontab.jobs([try Policy.load(fixture.policy)]), executable: "/usr/local/bin/storectl")
        #expect(units.map(\.name) == ["storectl-policy-snapshot.service", "storectl-policy-snapshot.timer", "storectl-policy-purge.service",
                                      "storectl-policy-purge.timer", "storectl-policy-maintain.service", "storectl-policy-maintain.timer"])
        #expect(units[2].contents == """
            [Unit]
            Description=storectl purge of \(fixture.store) (\(fixture.policy))
            After=local-fs.target network-online.target
            Wants=network-online.target

            [Service]
            Type=oneshot
            ExecStart=/usr/local/bin/storectl run purge --policy \(fixture.policy)

            """)
        #expect(units[3].contents == """
            [Unit]
            Description=Schedule of storectl purge of \(fixture.store) (\(fixture.policy)): 30 3 * * *

            [Timer]
            OnCalendar=*-*-* 03:30:00
            Persistent=true
            RandomizedDelaySec=90

            [Install]
            WantedBy=timers.target

            """)
        #expect(units[5].contents.contains("OnCalendar=Sun *-*-* 04:00:00\n"))
        // systemd expands % specifiers and $ variables in ExecStart= (and % in Description=):
        // a path with them is written so that it reaches storectl as it is.
        #expect(SystemdUnits.quote("/srv/100%/a$HOME.toml") == "/srv/100%%/a$$HOME.toml")
        #expect(SystemdUnits.quote("/opt/a$b/100%/storectl", executable: true) == "/opt/a$b/100%%/storectl", "no variables in the program's path")
        #expect(SystemdUnits.quote("/srv/a\tb.toml") == "\"/srv/a\tb.toml\"")
        #expect((#expect(throws: StoreOpsError.self) { try SystemdUnits.refuseNewlines(["/srv/a\nExecStartPre=/bin/rm.toml"]) })?.status == .usage)
        #expect(SystemdUnits.quote("/srv/my app/it's \"x\".toml") == "\"/srv/my app/it's \\\"x\\\".toml\"")
        #expect(SystemdUnits.text("storectl purge of /srv/100%h") == "storectl purge of /srv/100%%h")
        try SystemdUnits.write(units, to: fixture.folder.path)
        #expect(permissions(fixture.folder.file("storectl-policy-purge.timer")) == 0o644)
    }

    @Test("a bad cron expression in a policy is a policy error with its line")
    func policyCron() throws {
        let folder = try TempFolder()
        let path = try writePolicy("[store]\npath = \"x\"\n[schedule]\npurge = \"61 * * * *\"", in: folder)
        let error = #expect(throws: StoreOpsError.self) { try Policy.load(path) }
        #expect(error?.message.contains("\(path):4: schedule.purge: minute: 61 is out of range 0-59 (in \"61 * * * *\")") == true, "\(error?.message ?? "")")
    }
}

@Suite("storectl run: jobs, log, metrics")
struct JobRunTests {
    @Test("maintain: snapshot, then prune by the retention, then purge, in that order")
    func maintain() throws {
        let fixture = try ScheduledFixture(keepLast: 2)
        let repo = fixture.folder.file("snaps")
        let password = PasswordSource.file(try fixture.folder.passwordFile())
        for _ in 0..<2 { _ = try SnapshotCreate.run(store: fixture.store, options: .init(repository: repo, password: password)) }
        let before = try SnapshotSummary.list(repository: repo, password: password).map(\.id)
        let soft = try readStore(fixture.store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM WHERE ZISDELETED = 1") }!

        let record = JobRun.run(.init(job: .maintain, policy: fixture.policy))
        #expect(record.exitCode == 0 && record.outcome == "ok", "\(record.error ?? "")")
        let after = try SnapshotSummary.list(repository: repo, password: password).map(\.id)
        #expect(after.count == 2 && after.first == record.snapshotId, "the new snapshot and the newest old one are kept")
        #expect(record.prunedSnapshots == [before.last!])
        #expect((record.rowsPurged ?? 0) > 0)
        // A sequence of roads under the job's lock, each step's stages named after it, in order.
        let steps = (record.stages ?? []).map(\.name)
        #expect(steps.first == "lock" && steps.contains("snapshot copy") && steps.contains("prune prune") && steps.contains("purge purge"), "\(steps)")
        #expect((steps.firstIndex(of: "snapshot copy") ?? 99) < (steps.firstIndex(of: "prune prune") ?? 0)
                && (steps.firstIndex(of: "prune prune") ?? 99) < (steps.firstIndex(of: "purge purge") ?? 0), "\(steps)")
        // The snapshot came first: it still has the rows the purge then deleted.
        let restored = fixture.folder.file("restored.sqlite")
        var restore = SnapshotRestore.Options(repository: repo, id: record.snapshotId!, target: .file(restored))
        restore.password = password
        _ = try SnapshotRestore.run(restore)
        #expect(try readStore(restored) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM WHERE ZISDELETED = 1") } == soft)
        #expect(try readStore(fixture.store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM WHERE ZISDELETED = 1") } == soft - record.rowsPurged!)
        let log = try fixture.logLines()
        // The bytes the snapshot added (none here: the store did not change since the last one).
        #expect(log.count == 1 && log[0].job == .maintain && log[0].snapshotBytes == 0)
    }

    @Test("a scheduled purge whose policy snapshots first: its job-log line and its metrics carry the snapshot's id and size (the size was missing, the metric 0)")
    func purgeSnapshotBytes() throws {
        let fixture = try ScheduledFixture()
        let policy = try String(contentsOfFile: fixture.policy, encoding: .utf8)
        #expect(policy.contains("[snapshot]\n"))
        try Data(policy.replacingOccurrences(of: "[snapshot]\n", with: "[snapshot]\nbefore_purge = true\n").utf8).write(to: URL(fileURLWithPath: fixture.policy))
        let record = JobRun.run(.init(job: .purge, policy: fixture.policy))
        #expect(record.exitCode == 0, "\(record.error ?? "")")
        let bytes = try #require(record.snapshotBytes, "no snapshotBytes: \(record)")
        #expect(record.snapshotId != nil && bytes > 0)
        let metrics = try String(contentsOfFile: Metrics.file(folder: fixture.folder.file("metrics"), store: fixture.store, job: .purge), encoding: .utf8)
        #expect(metrics.contains("storectl_snapshot_bytes{job=\"purge\",store=\"\(fixture.store)\"} \(bytes)\n"), "\(metrics)")
    }

    @Test("the metrics file: names, labels, values, atomic replacement; last success and the counter carry over")
    func metrics() throws {
        let fixture = try ScheduledFixture()
        let first = JobRun.run(.init(job: .purge, policy: fixture.policy))
        #expect(first.exitCode == 0)
        let file = Metrics.file(folder: fixture.folder.file("metrics"), store: fixture.store, job: .purge)
        let text = try String(contentsOfFile: file, encoding: .utf8)
        let labels = "{job=\"purge\",store=\"\(fixture.store)\"}"
        for name in ["storectl_job_last_success_timestamp_seconds", "storectl_job_last_run_timestamp_seconds", "storectl_job_duration_seconds",
                     "storectl_job_exit_code", "storectl_purged_rows_total", "storectl_snapshot_bytes", "storectl_purge_rows_kept_by_deny"] {
            #expect(text.contains("# TYPE \(name) "), "\(name)")
            #expect(text.contains("\n\(name)\(labels) "), "\(name)")
        }
        #expect(text.contains("storectl_purged_rows_total\(labels) \(first.rowsPurged!)\n"))
        #expect(text.contains("storectl_purge_rows_kept_by_deny\(labels) \(first.rowsKeptByDeny!)\n"))
        #expect(text.contains("storectl_job_exit_code\(labels) 0\n"))
        #expect(permissions(file) == 0o644)
        let inode = FileSystem.identity(of: file)?.ino

        // A failing run (the store is gone): exit code recorded, last success kept.
        try FileManager.default.moveItem(atPath: fixture.store, toPath: fixture.store + ".away")
        let failed = JobRun.run(.init(job: .purge, policy: fixture.policy))
        #expect(failed.exitCode == 66 && failed.outcome == "failed")
        let after = try String(contentsOfFile: file, encoding: .utf8)
        #expect(after.contains("storectl_job_exit_code\(labels) 66\n"))
        // Compared as a number: a time written as 1795990000.000 is read back and carried over as 1795990000
        // (one run in a thousand: CI met it).
        let carried = after.split(separator: "\n").first { $0.hasPrefix("storectl_job_last_success_timestamp_seconds\(labels) ") }
            .flatMap { Double($0.split(separator: " ").last ?? "") }
        #expect(carried.map { abs($0 - first.end.timeIntervalSince1970) < 0.0015 } == true, "\(after)")
        #expect(after.contains("storectl_purged_rows_total\(labels) \(first.rowsPurged!)\n"), "the counter does not go back")
        #expect(after.contains("storectl_purge_rows_kept_by_deny\(labels) \(first.rowsKeptByDeny!)\n"), "the gauge is carried over, not dropped")
        #expect(FileSystem.identity(of: file)?.ino != inode, "replaced by rename, never rewritten in place")
        #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.folder.file("metrics")).allSatisfy { $0.hasSuffix(".prom") })
        #expect(try fixture.logLines().map(\.outcome) == ["ok", "failed"])
    }

    @Test("the job log and its .out are rotated beyond log_max_size, keeping log_keep old files")
    func logRotation() throws {
        let fixture = try ScheduledFixture(items: 200, schedule: "log_max_size = 4096\nlog_keep = 2")
        let log = fixture.folder.file("jobs.jsonl")
        try Data(repeating: 0x41, count: 5000).write(to: URL(fileURLWithPath: log + ".out"))
        for _ in 0..<30 { #expect(JobRun.run(.init(job: .snapshot, policy: fixture.policy)).exitCode == 0) }
        let names = fixture.folder.contents().filter { $0.hasPrefix("jobs.jsonl") }
        // The .out was rotated when a run started (cron's `>>` makes a new one for the next run).
        #expect(names == ["jobs.jsonl", "jobs.jsonl.1", "jobs.jsonl.2", "jobs.jsonl.out.1"], "\(names)")
        #expect((FileSystem.size(of: log) ?? 0) <= 4096 + 1024)
        // Every line of every log file is still a whole record.
        for name in ["jobs.jsonl", "jobs.jsonl.1", "jobs.jsonl.2"] {
            let text = try String(contentsOfFile: fixture.folder.file(name), encoding: .utf8)
            for line in text.split(separator: "\n") { _ = try JSON.decoder().decode(JobRun.Record.self, from: Data(line.utf8)) }
        }
        let bad = try writePolicy("[store]\npath = \"Tasks.sqlite\"\n[schedule]\nlog = \"j\"\nlog_max_size = \"lots\"\nlog_keep = 0\n", in: fixture.folder)
        let error = #expect(throws: StoreOpsError.self) { try Policy.load(bad) }
        #expect(error?.description.contains("log_max_size") == true && error?.description.contains("log_keep") == true)
    }

    @Test("--jitter: the run's duration and start are its work's, the wait recorded apart (jitterSeconds); an alert on the duration saw 61 s for a 0.5 s snapshot (a trial)")
    func jitterIsNotTheJobsTime() throws {
        let fixture = try ScheduledFixture(items: 500)
        let began = Date()
        let run = try ChildProcess.run(Binaries.storectl, ["run", "snapshot", "--policy", fixture.policy, "--jitter", "2s", "--json"])
        let took = Date().timeIntervalSince(began)
        #expect(run.status == 0, "\(run.stderr)")
        let record = try #require(try fixture.logLines().last)
        let waited = try #require(record.jitterSeconds)
        #expect(waited >= 0 && waited <= 2)
        #expect(record.durationSeconds <= took - waited + 0.05, "\(record.durationSeconds) s recorded, \(took) s in all, \(waited) s of jitter")
        #expect(record.start >= began.addingTimeInterval(waited - 0.05), "the start is after the wait")
        // Not a terminal: nothing said of the wait (cron's runs are quiet).
        #expect(run.stderr.isEmpty, "\(run.stderr)")
    }

    @Test("two runs of one store at once (a daily purge at the hourly snapshot's minute): the second waits for the first and then runs, both ok (it was skipped with 75 every day, a trial), its start after the wait (lockWaitSeconds apart); never past its own next run; past the lock wait it is skipped with 75, naming the first and how long it waited; all are logged")
    func overlap() throws {
        func whileFirstRuns(_ fixture: ScheduledFixture, _ body: (ChildProcess.Running) throws -> Void) throws {
            let first = try ChildProcess.Running(Binaries.storectl, ["run", "purge", "--policy", fixture.policy])
            let deadline = Date().addingTimeInterval(10)
            while JobLock.currentHolder(path: fixture.store + ".storectl-lock") == nil, Date() < deadline { usleep(20_000) }
            try body(first)
            #expect(first.wait().status == 0)
        }
        let waits = try ScheduledFixture(items: 20_000, rule: "batch_size = 100\npause = \"100ms\"")
        // maintain: weekly, so its next run is not within this wait (a run never waits past it).
        try whileFirstRuns(waits) { _ in
            let second = try ChildProcess.run(Binaries.storectl, ["run", "maintain", "--policy", waits.policy])
            #expect(second.status == 0, "\(second.stderr)")
        }
        let lines = try waits.logLines()
        #expect(lines.map(\.outcome) == ["ok", "ok"])
        // The wait is said apart, and the start is after it: the duration is the job's.
        if let waited = lines.last?.lockWaitSeconds, let first = lines.first {
            #expect(lines[1].start >= first.end.addingTimeInterval(-0.1), "\(lines[1].start) before \(first.end) with \(waited) s waited")
        }
        // A job scheduled every 5 minutes never waits past its next run (they piled up behind a long purge).
        let every5 = try Policy.load(try writePolicy("[store]\npath = \"Tasks.sqlite\"\n[snapshot]\nrepository = \"snaps\"\npassword_file = \"password\"\n[schedule]\nsnapshot = \"*/5 * * * *\"\n", in: waits.folder, name: "every5.toml"))
        let until = try #require(JobRun.untilNextRun(of: .snapshot, in: every5))
        #expect(until <= 240, "\(until)")
        #expect(JobRun.untilNextRun(of: .purge, in: every5) == nil)
        let skips = try ScheduledFixture(items: 20_000, rule: "batch_size = 100\npause = \"100ms\"")
        try whileFirstRuns(skips) { first in
            let second = try ChildProcess.run(Binaries.storectl, ["run", "purge", "--policy", skips.policy], environment: ["STORECTL_TEST_JOB_LOCK_WAIT": "0.5"])
            #expect(second.status == 75)
            #expect(second.stderr.contains("skipped: another job (run purge, pid \(first.pid), since") && second.stderr.contains("held the store's lock for all the"), "\(second.stderr)")
            #expect(second.stdout.isEmpty)
        }
        #expect(try skips.logLines().map(\.outcome).sorted() == ["ok", "skipped"])
    }
}
