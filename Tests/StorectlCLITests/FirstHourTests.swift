import Foundation
import StoreLab
import StoreOps
import Testing

/// An operator's first hour: scheduled jobs refused before they are installed when they would
/// fail, every command that opens a repository takes the same password options, metrics that
/// cannot be written fail the run, a mistyped --repo on a read command is not told to make one.
@Suite("an operator's first hour", .onTestThreads)
struct FirstHourTests {
    /// A store, an encrypted format-2 repository, and a scheduled policy with `extra` lines in
    /// [snapshot] (e.g. its password_file) and [schedule] (log, metrics).
    struct World {
        let folder: TempFolder
        let store: String
        let repository: String
        let password: String
        let policy: String

        init(snapshotLines: String = "", scheduleLines: String = "log = \"jobs.jsonl\"") throws {
            folder = try TempFolder()
            store = try makeStore(folder)
            repository = try folder.repository("snaps", encrypted: true)
            password = try folder.passwordFile()
            policy = folder.file("tasks.toml")
            try write(snapshotLines: snapshotLines, scheduleLines: scheduleLines)
        }

        func write(snapshotLines: String, scheduleLines: String) throws {
            try Data("""
                [store]
                path = "Tasks.sqlite"
                [[purge]]
                entity = "Item"
                deleted_flag = "ZISDELETED"
                deleted_at = "ZDELETEDAT"
                time_format = "coredata"
                retention = "30d"
                [snapshot]
                repository = "snaps"
                before_purge = true
                \(snapshotLines)
                [snapshot.retention]
                keep_last = 3
                [schedule]
                snapshot = "15 * * * *"
                purge = "30 3 * * *"
                \(scheduleLines)
                """.utf8).write(to: URL(fileURLWithPath: policy))
        }

        func wrongPassword() throws -> String {
            let path = folder.file("wrong")
            try Data("not the password\n".utf8).write(to: URL(fileURLWithPath: path))
            return path
        }
    }

    @Test("an encrypted repository and a policy that names no password: policy check and schedule refuse, naming the password; purge and run take --password-file")
    func passwordBeforeInstall() throws {
        let world = try World()
        let check = try storectl("policy", "check", world.policy)
        #expect(check.status == 2, "\(check.stdout)\(check.stderr)")
        #expect(check.stdout.contains("FAIL  \(world.policy)") && check.stdout.contains("  password     no password: \(world.policy) names no password_file"), "\(check.stdout)")
        #expect(try storectl("policy", "check", "--file-only", world.policy).status == 0, "the file alone is fine")
        for arguments in [["schedule", "crontab"], ["schedule", "install"], ["schedule", "systemd", "--output", world.folder.path]] {
            let refused = try ChildProcess.run(Binaries.storectl, arguments + ["--policy", world.policy])
            #expect(refused.status == 2, "\(arguments): \(refused.stderr)")
            #expect(refused.stdout.isEmpty && refused.stderr.contains("would fail when run by cron or systemd")
                    && refused.stderr.contains("  password "), "\(arguments): \(refused.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: world.folder.file("storectl-tasks-snapshot.service")), "no unit written")
        let skipped = try storectl("schedule", "crontab", "--policy", world.policy, "--skip-checks")
        #expect(skipped.status == 0 && skipped.stderr.contains("--skip-checks") && skipped.stdout.contains("# BEGIN storectl"))

        // By hand: the same password options as every repository command; a wrong one is 77 in the dry run already.
        let wrongDry = try storectl("purge", "--policy", world.policy, "--dry-run", "--password-file", try world.wrongPassword())
        #expect(wrongDry.status == 77, "\(wrongDry.stderr)")
        let dry = try storectl("purge", "--policy", world.policy, "--dry-run", "--password-file", world.password)
        #expect(dry.status == 0 && dry.stdout.contains("would snapshot into \(world.repository) first (opened with the password)"), "\(dry.stdout)\(dry.stderr)")
        #expect(!dry.stdout.contains("NOW A RUN WOULD NOT GO"), "\(dry.stdout)")
        // What would stop the real run now is said by the dry run (it takes no lock and changes nothing, so neither stops it).
        #expect(try storectl("killswitch", "engage", world.store).status == 0)
        let lockReady = world.folder.file("lock-ready")
        let holder = try ChildProcess.Running(Binaries.lab, ["job-lock", world.store, "--job", "migrate", "--seconds", "20", "--ready-file", lockReady])
        #expect(ChildProcess.waitFor(file: lockReady))
        let blocked = try storectl("purge", "--policy", world.policy, "--dry-run", "--password-file", world.password)
        holder.signal(SIGTERM)
        _ = holder.wait()
        #expect(try storectl("killswitch", "release", world.store).status == 0)
        #expect(blocked.status == 0 && blocked.stdout.contains("NOW A RUN WOULD NOT GO: the kill switch") && blocked.stdout.contains("killswitch release")
                && blocked.stdout.contains("NOW A RUN WOULD NOT GO: another job (migrate, pid \(holder.pid)) holds the store's job lock"), "\(blocked.stdout)\(blocked.stderr)")
        let purge = try storectl("purge", "--policy", world.policy, "--password-file", world.password)
        #expect(purge.status == 0 && purge.stdout.contains("snapshot first: "), "\(purge.stderr)")
        let run = try storectl("run", "snapshot", "--policy", world.policy, "--password-file", world.password)
        #expect(run.status == 0 && run.stderr.isEmpty, "\(run.stderr)")
        let wrongRun = try storectl("run", "snapshot", "--policy", world.policy, "--password-file", try world.wrongPassword())
        #expect(wrongRun.status == 77, "\(wrongRun.stderr)")

        // The policy names its password: everything is ready, and says so.
        try world.write(snapshotLines: "password_file = \"password\"", scheduleLines: "log = \"jobs.jsonl\"")
        let ready = try storectl("policy", "check", world.policy)
        #expect(ready.status == 0, "\(ready.stdout)")
        #expect(ready.stdout.contains("ready to run snapshot, purge: store, repository (password ok), log"), "\(ready.stdout)")
        #expect(try storectl("schedule", "crontab", "--policy", world.policy).status == 0)
        let json = try storectl("policy", "check", world.policy, "--json")
        let results = try JSON.decoder().decode([PolicyCheck.FileResult].self, from: Data(json.stdout.utf8))
        #expect(results.first?.readiness?.ok == true && results.first?.readiness?.jobs == [.snapshot, .purge])

        // The policy's password file holds the wrong password: the hint names that file, not
        // every place a password could come from.
        let wrong = try world.wrongPassword()
        try world.write(snapshotLines: "password_file = \"wrong\"", scheduleLines: "log = \"jobs.jsonl\"")
        let refused = try storectl("schedule", "crontab", "--policy", world.policy)
        #expect(refused.status == 2 && refused.stderr.contains("snapshot, purge would fail"), "\(refused.stderr)")
        #expect(refused.stderr.contains("the password was read from \(wrong)"), "\(refused.stderr)")
        // A password command that fails is the password's problem, not the repository's (it was listed so).
        try world.write(snapshotLines: "password_command = \"false\"", scheduleLines: "log = \"jobs.jsonl\"")
        let failing = try storectl("policy", "check", world.policy)
        #expect(failing.status == 2 && failing.stdout.contains("  password     the policy's password_command") && failing.stdout.contains("exited 1")
                && !failing.stdout.contains("  repository "), "\(failing.stdout)")
        // A command this shell finds through its PATH, or that needs one of its variables, is run
        // as cron runs it (PATH=/usr/bin:/bin, none of this shell's variables): it would fail there
        // (a trial's passed the check and failed its first run, 127).
        let tools = world.folder.file("tools")
        try FileManager.default.createDirectory(atPath: tools, withIntermediateDirectories: true)
        let script = (tools as NSString).appendingPathComponent("mypw")
        try Data("#!/bin/sh\ntest -n \"$PW_TOKEN\" && cat \"$(dirname \"$0\")/../password\"\n".utf8).write(to: URL(fileURLWithPath: script))
        chmod(script, 0o755)
        let shell = ["PATH": tools + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"), "PW_TOKEN": "set"]
        try world.write(snapshotLines: "password_command = \"mypw\"", scheduleLines: "log = \"jobs.jsonl\"")
        let byPath = try storectl("policy", "check", world.policy, environment: shell)
        #expect(byPath.status == 2 && byPath.stdout.contains("when run as a scheduled job runs it") && byPath.stdout.contains("full path"), "\(byPath.stdout)")
        try world.write(snapshotLines: "password_command = \"\(script)\"", scheduleLines: "log = \"jobs.jsonl\"")
        let needsVariable = try storectl("policy", "check", world.policy, environment: shell)
        #expect(needsVariable.status == 2 && needsVariable.stdout.contains("when run as a scheduled job runs it"), "\(needsVariable.stdout)")
        try Data("#!/bin/sh\ncat \"$(dirname \"$0\")/../password\"\n".utf8).write(to: URL(fileURLWithPath: script))
        let fullPath = try storectl("policy", "check", world.policy, environment: shell)
        #expect(fullPath.status == 0 && fullPath.stdout.contains("repository (password ok)"), "\(fullPath.stdout)")
        // systemd's services have /usr/local/bin in their PATH, cron's jobs do not: a command found
        // there is refused for a crontab and written for systemd (it was refused for both).
        if geteuid() == 0, FileSystem.kind(of: "/usr/local/bin") == .directory {
            let name = "storectl-test-pw-\(getpid())"
            let local = "/usr/local/bin/" + name
            try Data("#!/bin/sh\ncat '\(world.password)'\n".utf8).write(to: URL(fileURLWithPath: local))
            defer { unlink(local) }
            chmod(local, 0o755)
            try world.write(snapshotLines: "password_command = \"\(name)\"", scheduleLines: "log = \"jobs.jsonl\"")
            let forCron = try storectl("schedule", "crontab", "--policy", world.policy)
            #expect(forCron.status == 2 && forCron.stderr.contains("full path"), "\(forCron.status) \(forCron.stderr)")
            let units = world.folder.file("units")
            try FileManager.default.createDirectory(atPath: units, withIntermediateDirectories: true)
            let forSystemd = try storectl("schedule", "systemd", "--policy", world.policy, "--output", units)
            #expect(forSystemd.status == 0 && forSystemd.stdout.contains(".timer"), "\(forSystemd.status) \(forSystemd.stderr)")
        }
        try world.write(snapshotLines: "password_command = \"false\"", scheduleLines: "log = \"jobs.jsonl\"")
        // Without before_purge only the snapshot opens the repository: only it would fail.
        try Data(try String(contentsOfFile: world.policy, encoding: .utf8).replacingOccurrences(of: "before_purge = true", with: "before_purge = false").utf8)
            .write(to: URL(fileURLWithPath: world.policy))
        let onlySnapshot = try storectl("schedule", "crontab", "--policy", world.policy)
        #expect(onlySnapshot.status == 2 && onlySnapshot.stderr.contains("\(world.policy): snapshot would fail"), "\(onlySnapshot.stderr)")
    }

    @Test("policy check names every problem a run would fail on: store, repository, retention, log and metrics folders")
    func everyProblemNamed() throws {
        let world = try World(snapshotLines: "password_file = \"password\"",
                              scheduleLines: "log = \"no-such-folder/jobs.jsonl\"\nmetrics = \"metrics\"\nmaintain = \"0 4 * * 0\"")
        try FileManager.default.removeItem(atPath: world.repository)
        try FileManager.default.removeItem(atPath: world.store)
        let check = try storectl("policy", "check", world.policy)
        #expect(check.status == 2)
        for line in ["  store        the store \(world.store) does not exist",
                     "  repository   there is no snapshot repository at \(world.repository)",
                     "-> make one first: `storectl repo init --repo \(world.repository)`",
                     "  log          the job log \(world.folder.file("no-such-folder/jobs.jsonl")) cannot be created: its folder \(world.folder.file("no-such-folder")) does not exist",
                     "  metrics      the metrics folder \(world.folder.file("metrics")) does not exist"] {
            #expect(check.stdout.contains(line), "\(line)\n---\n\(check.stdout)")
        }
        let json = try storectl("policy", "check", world.policy, "--json")
        let readiness = try #require(try JSON.decoder().decode([PolicyCheck.FileResult].self, from: Data(json.stdout.utf8)).first?.readiness)
        #expect(readiness.problems.map(\.check) == ["store", "repository", "log", "metrics"], "\(readiness.problems)")
        #expect(readiness.problems.map(\.status) == [66, 66, 73, 73])
    }

    @Test("schedule refuses what a run would fail on and policy check names: a rule's entity the store lacks (65 at the first purge, installed with 0 before), a store that is not a SQLite database (\"not reachable\" and 0 before), a repository folder the job's user cannot write (73 at the first snapshot)")
    func scheduleChecksWhatRunsNeed() throws {
        let world = try World(snapshotLines: "password_file = \"password\"")
        let good = try String(contentsOfFile: world.policy, encoding: .utf8)
        func refused(_ check: String, _ words: String, _ arguments: [String] = []) throws {
            let crontab = try ChildProcess.run(Binaries.storectl, arguments + ["schedule", "crontab", "--policy", world.policy])
            #expect(crontab.status == 2 && crontab.stderr.contains("  \(check) ") && crontab.stderr.contains(words), "\(check): \(crontab.status) \(crontab.stderr)")
        }
        try Data(good.replacingOccurrences(of: "entity = \"Item\"", with: "entity = \"Itme\"").utf8).write(to: URL(fileURLWithPath: world.policy))
        try refused("rules", "Itme")
        let named = try storectl("policy", "check", world.policy)
        #expect(named.status == 65 && named.stdout.contains("Itme"), "\(named.stdout)")
        // An expression no date matches: it would never run.
        try Data(good.replacingOccurrences(of: "purge = \"30 3 * * *\"", with: "purge = \"0 0 31 2 *\"").utf8).write(to: URL(fileURLWithPath: world.policy))
        try refused("schedule", "never runs")
        try Data(good.utf8).write(to: URL(fileURLWithPath: world.policy))
        #expect(try storectl("schedule", "crontab", "--policy", world.policy).status == 0)
        // The store replaced by a text file.
        let saved = world.folder.file("saved.sqlite")
        try FileManager.default.moveItem(atPath: world.store, toPath: saved)
        try Data("hello\n".utf8).write(to: URL(fileURLWithPath: world.store))
        try refused("store", "is not a SQLite database")
        let text = try storectl("policy", "check", world.policy)
        #expect(text.status != 0 && !text.stdout.contains("not reachable") && text.stdout.contains("not a SQLite database"), "\(text.status) \(text.stdout)")
        try FileManager.default.removeItem(atPath: world.store)
        try FileManager.default.moveItem(atPath: saved, toPath: world.store)
        // A repository folder the job's user (nobody) cannot write; everything else theirs.
        guard getuid() == 0 else { return }
        _ = try storectl("snapshot", "create", world.store, "--repo", world.repository, "--password-file", world.password)
        let asNobody = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", Binaries.storectl]
        #expect(try ChildProcess.run("/bin/chown", ["-R", "65534:65534", world.folder.path]).status == 0)
        #expect(try ChildProcess.run("/bin/chmod", ["755", world.folder.path]).status == 0)
        let data = (world.repository as NSString).appendingPathComponent("data")
        let sub = try #require(try FileManager.default.contentsOfDirectory(atPath: data).first)
        #expect(try ChildProcess.run("/bin/chown", ["0:0", (data as NSString).appendingPathComponent(sub)]).status == 0)
        let crontab = try ChildProcess.run(asNobody[0], Array(asNobody.dropFirst()) + ["schedule", "crontab", "--policy", world.policy])
        #expect(crontab.status == 2 && crontab.stderr.contains("  repository ") && crontab.stderr.contains("data/\(sub) is not writable"), "\(crontab.status) \(crontab.stderr)")
    }

    @Test("a job run as root hands the store's lock file to the store's owner (it left it root's, 0600, and every later job of the owner failed 73); a lock file the job's user cannot open is a problem policy check names (it said ready)", .enabled(if: getuid() == 0))
    func lockFileBelongsToTheStoresOwner() throws {
        let world = try World(snapshotLines: "password_file = \"password\"")
        #expect(try ChildProcess.run("/bin/chown", ["-R", "65534:65534", world.folder.path]).status == 0)
        #expect(try ChildProcess.run("/bin/chmod", ["755", world.folder.path]).status == 0)
        let lock = world.store + ".storectl-lock"
        try? FileManager.default.removeItem(atPath: lock)
        // The owner's policy is the owner's to change: root refuses to run it (its password_command
        // would run as root). Root's job has a policy of root's own, naming the owner's store.
        let owners = try storectl("run", "snapshot", "--policy", world.policy)
        #expect(owners.status == 65 && owners.stderr.contains("is owned by nobody"), "\(owners.status) \(owners.stderr)")
        #expect(FileSystem.kind(of: lock) == .missing)
        let etc = try TempFolder()
        let rootPolicy = etc.file("tasks.toml")
        let text = try String(contentsOfFile: world.policy, encoding: .utf8)
            .replacingOccurrences(of: "path = \"Tasks.sqlite\"", with: "path = \"\(world.store)\"")
            .replacingOccurrences(of: "repository = \"snaps\"", with: "repository = \"\(world.repository)\"")
            .replacingOccurrences(of: "password_file = \"password\"", with: "password_file = \"\(world.password)\"")
            .replacingOccurrences(of: "log = \"jobs.jsonl\"", with: "log = \"\(etc.file("jobs.jsonl"))\"")
        try Data(text.utf8).write(to: URL(fileURLWithPath: rootPolicy))
        let asRoot = try storectl("run", "snapshot", "--policy", rootPolicy)
        #expect(asRoot.status == 0, "\(asRoot.stderr)")
        var info = stat()
        #expect(stat(lock, &info) == 0 && info.st_uid == 65534 && info.st_gid == 65534, "the lock file is uid \(info.st_uid)")
        let asNobody = ["--reuid=65534", "--regid=65534", "--clear-groups", Binaries.storectl]
        // The owner's own job takes the lock (a backup into its folder: root's run made repository
        // files root's too, which is the repository's owner's business, not the store's lock's).
        let owner = try ChildProcess.run("/usr/bin/setpriv", asNobody + ["backup", world.store, "--output", world.folder.file("by-owner.sqlite")])
        #expect(owner.status == 0, "\(owner.status) \(owner.stderr)")
        // A lock file planted as a link to another file: never followed, never chowned.
        let victim = world.folder.file("victim")
        try Data("root's\n".utf8).write(to: URL(fileURLWithPath: victim))
        #expect(chown(victim, 0, 0) == 0)
        try FileManager.default.removeItem(atPath: lock)
        #expect(symlink(victim, lock) == 0)
        let linked = try storectl("backup", world.store, "--output", world.folder.file("linked.sqlite"))
        #expect(linked.status == 73 && linked.stderr.contains("not a plain file of its own"), "\(linked.status) \(linked.stderr)")
        var victimInfo = stat()
        #expect(stat(victim, &victimInfo) == 0 && victimInfo.st_uid == 0)
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "root's\n")
        try FileManager.default.removeItem(atPath: lock)
        #expect(link(victim, lock) == 0)
        let hardLinked = try storectl("backup", world.store, "--output", world.folder.file("hard.sqlite"))
        #expect(hardLinked.status == 73 && hardLinked.stderr.contains("not a plain file of its own"), "\(hardLinked.status) \(hardLinked.stderr)")
        #expect(stat(victim, &victimInfo) == 0 && victimInfo.st_uid == 0)
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "root's\n")
        try FileManager.default.removeItem(atPath: lock)
        #expect(try storectl("backup", world.store, "--output", world.folder.file("again.sqlite")).status == 0)
        // One an older storectl left root's: named before the job is installed.
        #expect(chown(lock, 0, 0) == 0)
        let check = try ChildProcess.run("/usr/bin/setpriv", asNobody + ["policy", "check", world.policy])
        #expect(check.status == 2 && check.stdout.contains("storectl-lock is owned by root"), "\(check.status) \(check.stdout)")
    }

    @Test("run maintain in a repository another store's snapshot is writing (its shared lock held, paused 3 s): the prune waits for it and the run ends 0 (it ended 75, the week's prune and purge lost)")
    func maintainWaitsForAnotherStore() throws {
        let world = try World(snapshotLines: "password_file = \"password\"")
        let other = try TempFolder()
        let otherStore = try makeStore(other, items: 200)
        let environment = ["STORECTL_PASSWORD_FILE": world.password, "STORECTL_TEST_PAUSE_AT": "pack.write.create#1:3000"]
        let writing = try ChildProcess.Running(Binaries.storectl, ["snapshot", "create", otherStore, "--repo", world.repository], environment: environment)
        // Its lock taken (a lock object in the repository), then paused at its first pack: a fixed
        // second was not always enough on a loaded machine.
        let locks = (world.repository as NSString).appendingPathComponent("locks")
        #expect(waitUntil(30, every: 0.05) { !((try? FileManager.default.contentsOfDirectory(atPath: locks)) ?? []).filter { !$0.hasPrefix(".") }.isEmpty })
        usleep(300_000)
        let started = Date()
        let maintain = try storectl("run", "maintain", "--policy", world.policy)
        #expect(maintain.status == 0, "\(maintain.status) \(maintain.stderr)")
        #expect(Date().timeIntervalSince(started) > 1, "it did not wait: \(Date().timeIntervalSince(started)) s")
        #expect(writing.wait().status == 0)
    }

    @Test("a metrics folder that cannot be written: the run fails (73), says why on stderr and in the job log; the log line is still written")
    func metricsFailLoudly() throws {
        let world = try World(snapshotLines: "password_file = \"password\"", scheduleLines: "log = \"jobs.jsonl\"\nmetrics = \"metrics\"")
        let run = try storectl("run", "snapshot", "--policy", world.policy)
        #expect(run.status == 73, "\(run.stderr)")
        #expect(run.stderr.hasPrefix("storectl: snapshot (\(world.store)): the metrics cannot be written into \(world.folder.file("metrics"))"), "\(run.stderr)")
        let line = try #require(try String(contentsOfFile: world.folder.file("jobs.jsonl"), encoding: .utf8).split(separator: "\n").last)
        let record = try JSON.decoder().decode(JobRun.Record.self, from: Data(line.utf8))
        #expect(record.outcome == "failed" && record.exitCode == 73 && record.snapshotId != nil && record.error?.contains("metrics") == true)
        // With the folder there: 0, and a .prom file with the last success.
        try FileManager.default.createDirectory(atPath: world.folder.file("metrics"), withIntermediateDirectories: false)
        #expect(try storectl("run", "snapshot", "--policy", world.policy).status == 0)
        let proms = try FileManager.default.contentsOfDirectory(atPath: world.folder.file("metrics"))
        #expect(proms.count == 1 && proms[0].hasSuffix("-snapshot.prom"))
        // A job log that cannot be appended to fails the run too.
        try world.write(snapshotLines: "password_file = \"password\"", scheduleLines: "log = \"gone/jobs.jsonl\"")
        let noLog = try storectl("run", "snapshot", "--policy", world.policy)
        #expect(noLog.status == 73 && noLog.stderr.contains("cannot append to the job log"), "\(noLog.stderr)")
    }

    @Test("an S3 repository reached only through this shell's AWS_* variables: schedule refuses, since cron will not have them", .enabled(if: SharedS3.wanted))
    func s3SettingsFromTheShell() throws {
        let world = try World(snapshotLines: "password_file = \"password\"")
        let location = try SharedS3.newLocation("first-hour")
        let environment = try SharedS3.environment()
        let made = try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", location, "--password-file", world.password], environment: environment)
        #expect(made.status == 0, "\(made.stderr)")
        let policy = try String(contentsOfFile: world.policy, encoding: .utf8).replacingOccurrences(of: "repository = \"snaps\"", with: "repository = \"\(location)\"")
        try Data(policy.utf8).write(to: URL(fileURLWithPath: world.policy))
        let refused = try ChildProcess.run(Binaries.storectl, ["schedule", "crontab", "--policy", world.policy], environment: environment)
        #expect(refused.status == 2, "\(refused.stderr)")
        #expect(refused.stderr.contains("  s3 ") && refused.stderr.contains("AWS_ACCESS_KEY_ID") && refused.stderr.contains("from this shell's environment"), "\(refused.stderr)")
        // By hand (no [schedule] context), the same settings are fine: the run has them.
        let byHand = try ChildProcess.run(Binaries.storectl, ["run", "snapshot", "--policy", world.policy], environment: environment)
        #expect(byHand.status == 0, "\(byHand.stderr)")
        // No credentials anywhere (none exported, no profile file): an s3 problem whose hint is
        // the profile file a scheduled run reads, not the password's, nor "export AWS_…".
        var bare = environment.filter { !["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"].contains($0.key) }
        bare["AWS_SHARED_CREDENTIALS_FILE"] = world.folder.file("no-credentials")
        let none = try ChildProcess.run(Binaries.storectl, ["policy", "check", world.policy], environment: bare)
        #expect(none.status == 2 && none.stdout.contains("  s3 ") && none.stdout.contains("no S3 credentials") && !none.stdout.contains("  password ")
                && none.stdout.contains("~/.aws/credentials of the user the job runs as"), "\(none.status) \(none.stdout) \(none.stderr)")
    }

    @Test("a mistyped --repo: read commands name the repositories next to it; only snapshot create suggests repo init")
    func mistypedRepository() throws {
        let world = try World()
        let typo = world.folder.file("snapz")
        for arguments in [["snapshot", "list", "--repo", typo], ["snapshot", "verify", "--repo", typo, "--all"], ["repo", "stats", "--repo", typo]] {
            let result = try ChildProcess.run(Binaries.storectl, arguments)
            #expect(result.status == 66, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains("hint: check --repo; repositories next to it: \(world.repository)") && !result.stderr.contains("repo init"),
                    "\(arguments): \(result.stderr)")
        }
        let create = try storectl("snapshot", "create", world.store, "--repo", typo)
        #expect(create.status == 66 && create.stderr.contains("make one first: `storectl repo init --repo \(typo)`"), "\(create.stderr)")
    }
}
