import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

/// Bad input found by trying storectl as a new user would: each gets a clear message, its
/// documented status, and leaves stores and snapshots as they were.
@Suite("bad input: clear errors, documented statuses, nothing changed", .onTestThreads)
struct BadInputTests {
    func store(_ folder: TempFolder, items: Int = 300) throws -> String {
        var options = SampleStore.Options()
        options.items = items
        options.externalFiles = 1
        return try SampleStore.create(at: folder.file("Tasks.sqlite"), options: options).path
    }

    @Test("a create killed after its pack and before its index: repo check, taking the repository, removes the dead writer's pack and says so (it did so in silence); a prune --dry-run before it removes nothing, not even the dead writer's lock")
    func checkSaysWhatItCleanedUp() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 500)
        let repo = try folder.repository("snaps", encrypted: true)
        let environment = ["STORECTL_PASSWORD_FILE": try folder.passwordFile()]
        let killed = try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo], environment: environment.merging(["STORECTL_FAULT_POINT": "pack.write.sync-folder"]) { $1 })
        #expect(killed.status == 137, "\(killed.stderr)")
        let locks = try FileManager.default.contentsOfDirectory(atPath: repo + "/locks")
        #expect(locks.count == 1)
        let dry = try ChildProcess.run(Binaries.storectl, ["snapshot", "prune", "--repo", repo, "--keep-last", "1", "--dry-run"], environment: environment)
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: repo + "/locks") == locks, "a dry run removes nothing")
        let check = try ChildProcess.run(Binaries.storectl, ["repo", "check", "--repo", repo], environment: environment)
        #expect(check.status == 0 && check.stdout.contains("note    removed 1 object a dead run left"), "\(check.stdout) \(check.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: repo + "/locks").isEmpty)
    }

    @Test("a damaged key file, and the password given opens no other key: 65 (the password may be the damaged key's), naming the file, not 77 \"wrong password\"; the other key's password still opens")
    func damagedKeyIsNotAWrongPassword() throws {
        let folder = try TempFolder()
        let repo = try folder.repository("snaps", encrypted: true)
        let second = folder.file("second")
        try Data("another pass phrase\n".utf8).write(to: URL(fileURLWithPath: second))
        let added = try storectl("key", "add", "--repo", repo, "--password-file", try folder.passwordFile(), "--new-password-file", second)
        #expect(added.status == 0, "\(added.stderr)")
        let keys = try FileManager.default.contentsOfDirectory(atPath: repo + "/keys").sorted()
        #expect(keys.count == 2)
        // Damage the key the second password opens: find it by trying each.
        var damagedOne: String?
        for key in keys {
            let saved = try Data(contentsOf: URL(fileURLWithPath: repo + "/keys/" + key))
            try Data("not json".utf8).write(to: URL(fileURLWithPath: repo + "/keys/" + key))
            let run = try storectl("snapshot", "list", "--repo", repo, "--password-file", second)
            if run.status != 0 {
                #expect(run.status == 65 && run.stderr.contains("keys/") && run.stderr.contains("may be this password's"), "\(run.status) \(run.stderr)")
                damagedOne = key
                let first = try storectl("snapshot", "list", "--repo", repo, "--password-file", try folder.passwordFile())
                #expect(first.status == 0, "\(first.stderr)")
            }
            try saved.write(to: URL(fileURLWithPath: repo + "/keys/" + key))
        }
        #expect(damagedOne != nil)
        // No key damaged: a wrong password is 77.
        let wrong = folder.file("wrong")
        try Data("wrong\n".utf8).write(to: URL(fileURLWithPath: wrong))
        #expect(try storectl("snapshot", "list", "--repo", repo, "--password-file", wrong).status == 77)
    }

    @Test("a password command that hangs (a password manager waiting for a prompt): SIGTERM stops the run at once (143) and the command with it; with no signal, it is stopped at STORECTL_PASSWORD_COMMAND_TIMEOUT (exit 1 saying so)")
    func hangingPasswordCommand() throws {
        let folder = try TempFolder()
        let repo = try folder.repository("repo", encrypted: true)
        let marker = "sleep 987\(getpid() % 1000)"
        let running = try ChildProcess.Running(Binaries.storectl, ["snapshot", "list", "--repo", repo],
                                               environment: ["STORECTL_PASSWORD_FILE": "", "STORECTL_PASSWORD_COMMAND": marker])
        usleep(700_000)
        let signalled = Date()
        running.signal(SIGTERM)
        let stopped = running.wait()
        #expect(stopped.status == 143 && Date().timeIntervalSince(signalled) < 3, "\(stopped.status) \(stopped.stderr)")
        usleep(200_000)
        #expect(try ChildProcess.run("/usr/bin/pgrep", ["-f", marker]).status != 0, "the command was stopped too")
        let timed = try ChildProcess.run(Binaries.storectl, ["snapshot", "list", "--repo", repo],
                                         environment: ["STORECTL_PASSWORD_FILE": "", "STORECTL_PASSWORD_COMMAND": marker, "STORECTL_PASSWORD_COMMAND_TIMEOUT": "1.5"])
        #expect(timed.status == 1 && timed.stderr.contains("did not finish within 1.50s"), "\(timed.status) \(timed.stderr)")
        // A limit that is not a number of seconds is refused (it was ignored: 60 s).
        for bad in ["abc", "0", "-1", ""] {
            let refused = try ChildProcess.run(Binaries.storectl, ["snapshot", "list", "--repo", repo],
                                               environment: ["STORECTL_PASSWORD_FILE": "", "STORECTL_PASSWORD_COMMAND": marker, "STORECTL_PASSWORD_COMMAND_TIMEOUT": bad])
            #expect(refused.status == 64 && refused.stderr.contains("STORECTL_PASSWORD_COMMAND_TIMEOUT"), "\(bad): \(refused.status) \(refused.stderr)")
        }
    }

    @Test("a damaged snapshot record: listed as DAMAGED, verify --all exits 65 naming it, prune keeps it, a good id still restores")
    func damagedCatalogEntry() throws {
        let folder = try TempFolder()
        let store = try store(folder)
        let repo = try folder.repository("snaps")
        let bad = try SnapshotCreate.run(store: store, options: .init(repository: repo))
        let good = try SnapshotCreate.run(store: store, options: .init(repository: repo))
        try Data(#"{"format":"storectl-manifest","formatVersion":99}"#.utf8).write(to: URL(fileURLWithPath: repo + "/snapshots/\(bad.id)"))
        let list = try storectl("snapshot", "list", "--repo", repo)
        #expect(list.status == 0, "\(list.stderr)")
        #expect(list.stdout.contains(bad.id) && list.stdout.contains("DAMAGED catalog entry"), "\(list.stdout)")
        let verify = try storectl("snapshot", "verify", "--repo", repo, "--all")
        #expect(verify.status == 65)
        #expect(verify.stdout.contains("ok      \(good.id)") && verify.stdout.contains("DAMAGED \(bad.id)"), "\(verify.stdout)")
        #expect(verify.stdout.contains("snapshots/\(bad.id)"), "\(verify.stdout)")
        #expect(try storectl("snapshot", "restore", "--repo", repo, good.id, "--to", folder.file("r.sqlite")).status == 0)
        let prune = try storectl("snapshot", "prune", "--repo", repo, "--keep-last", "1")
        #expect(prune.status == 0, "\(prune.stderr)")
        #expect(FileManager.default.fileExists(atPath: repo + "/snapshots/\(bad.id)"), "never removed as if expired")
        #expect(prune.stdout.contains("damaged"), "\(prune.stdout)")
    }

    /// Found by a helper trying storectl as a new user: each was reported as another error, the word typed never named.
    @Test("a mistyped option or subcommand is named as such (64), not as the complaint it causes; a repeated diff --store is refused; --at durations without their minus say how to write them; a missing password file says so and where its name came from; a blank --repo is 64, not the current folder; a point's label without --repo, or as rollback's --to, says what it needs",
          arguments: [
            (["snapshot", "restore", "--repo", "/nonexistent", "--at", "-1m", "--stor", "A.sqlite", "--to", "x.sqlite"], 64, "unknown option '--stor'. Did you mean '--store'?"),
            (["snapshot", "restore", "--repo", "/nonexistent", "--at", "-1m", "--store", "A.sqlite", "--too", "x.sqlite"], 64, "unknown option '--too'. Did you mean '--to'?"),
            (["snapshot", "restore", "--repo", "/nonexistent", "--to", "x.sqlite"], 64, "pass a snapshot id or --at TIME"),
            (["replicate", "stats", "--repo", "/nonexistent"], 64, "did you mean `storectl replicate status`?"),
            // A blank --repo (an unset variable) is not the current folder.
            (["snapshot", "list", "--repo", ""], 64, "--repo is blank"),
            (["repo", "init", "--repo", " "], 64, "--repo is blank"),
            (["diff", "--repo", "", "a.sqlite", "b.sqlite"], 64, "--repo is blank"),
            // A point's label, as restore prints it, where a snapshot id goes: how to name a point.
            (["diff", "20261202T015131Z-55d10e@1", "b.sqlite"], 64, "20261202T015131Z-55d10e@1 is a point: it needs --repo"),
            (["rollback", "Tasks.sqlite", "--repo", "/nonexistent", "--to", "20261202T015131Z-55d10e@2"], 64, "name a point by its time: --at TIME"),
            (["snapshot", "lst", "--repo", "/nonexistent"], 64, "`storectl snapshot` has no subcommand 'lst': did you mean `storectl snapshot list`?"),
            (["bakup", "Tasks.sqlite"], 64, "did you mean `storectl backup`?"),
            // A required option mistyped: ArgumentParser said "missing expected argument '--policy <policy>'".
            (["purge", "--polcy", "tasks.toml"], 64, "unknown option '--polcy'. Did you mean '--policy'?"),
            (["migrate", "Tasks.sqlite", "--migration", "migrations", "--repo", "snaps"], 64, "unknown option '--migration'. Did you mean '--migrations'?"),
            // No far-fetched guess (replicate's --quiet on snapshot create was "did you mean '--wait'?").
            (["snapshot", "create", "Tasks.sqlite", "--repo", "/nonexistent", "--quiet"], 64, "unknown option '--quiet'\n"),
            (["snapshot", "create", "Tasks.sqlite", "--quiet"], 64, "unknown option '--quiet'\n"),
            (["diff", "--repo", "/nonexistent", "--store", "a.sqlite", "--at", "-1m", "--store", "b.sqlite", "--at", "-2m"], 64, "--store given 2 times (a.sqlite, b.sqlite)"),
            (["snapshot", "restore", "--repo", "/nonexistent", "--at", "10s", "--to", "x.sqlite"], 64, "a time before now is written -10s"),
            (["snapshot", "restore", "--repo", "/nonexistent", "--at", "-10", "--to", "x.sqlite"], 64, "has no unit (write e.g. -10s"),
            // A value that looks like an option: ArgumentParser said only "missing value".
            (["snapshot", "prune", "--repo", "/nonexistent", "--keep-points", "-1h"], 64, "('-1h' after it reads as an option; `--keep-points=-1h` passes it as the value)"),
            (["snapshot", "list", "--repo", "/nonexistent-password-test"], 66, "the password file /nonexistent-pw (named by STORECTL_PASSWORD_FILE) does not exist"),
          ] as [([String], Int32, String)])
    func namedTypos(_ arguments: [String], _ status: Int32, _ message: String) throws {
        let folder = try TempFolder()
        let repo = folder.file("repo")
        // A real repository for the password case (the file is read when one is opened).
        if arguments.contains("/nonexistent-password-test") {
            #expect(try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", repo], environment: ["STORECTL_PASSWORD_FILE": try folder.passwordFile()]).status == 0)
        }
        let given = arguments.map { $0 == "/nonexistent-password-test" ? repo : $0 }
        let result = try ChildProcess.run(Binaries.storectl, given, environment: ["STORECTL_PASSWORD_FILE": "/nonexistent-pw"], currentDirectory: folder.path)
        #expect(result.status == status, "\(given): \(result.status) \(result.stderr)")
        #expect(result.stderr.contains(message), "\(given): \(result.stderr)")
    }

    @Test("repo init inside another repository is refused (73, naming it), at any depth; beside it is fine (a trial: a repository was made in another's folder)")
    func initInsideAnother() throws {
        let folder = try TempFolder()
        let environment = ["STORECTL_PASSWORD_FILE": try folder.passwordFile()]
        let outer = folder.file("repo")
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", outer], environment: environment).status == 0)
        try FileManager.default.createDirectory(atPath: outer + "/deeper", withIntermediateDirectories: false)
        for inner in [outer + "/sub", outer + "/deeper/sub", outer + "/data"] {
            let result = try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", inner], environment: environment)
            #expect(result.status == 73 && result.stderr.contains("is inside the repository \(outer)"), "\(inner): \(result.status) \(result.stderr)")
        }
        #expect(FileSystem.kind(of: outer + "/sub") == .missing && FileSystem.kind(of: outer + "/deeper/sub") == .missing)
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "check", "--repo", outer], environment: environment).status == 0)
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", folder.file("beside")], environment: environment).status == 0)
        // A file named config that is not a repository's does not count.
        let plain = folder.file("plain")
        try FileManager.default.createDirectory(atPath: plain, withIntermediateDirectories: false)
        try Data("[core]\n".utf8).write(to: URL(fileURLWithPath: plain + "/config"))
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", plain + "/r"], environment: environment).status == 0)
    }

    @Test("a scheduled run of a policy that names no password, with none in the environment and no terminal: 64 saying what the policy lacks, not only that there is no terminal")
    func scheduledRunWithoutPassword() throws {
        let folder = try TempFolder()
        _ = try store(folder)
        let password = try folder.passwordFile()
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", folder.file("snaps")], environment: ["STORECTL_PASSWORD_FILE": password]).status == 0)
        let policy = folder.file("p.toml")
        try Data("[store]\npath = \"Tasks.sqlite\"\n\n[snapshot]\nrepository = \"snaps\"\n".utf8).write(to: URL(fileURLWithPath: policy))
        // setsid: no controlling terminal, as under cron or systemd (and no prompt if the tests have one).
        let run = try ChildProcess.run("/usr/bin/setsid", ["--wait", Binaries.storectl, "run", "snapshot", "--policy", policy],
                                       environment: ["STORECTL_PASSWORD_FILE": "", "STORECTL_PASSWORD_COMMAND": ""])
        #expect(run.status == 64, "\(run.status) \(run.stderr)")
        #expect(run.stderr.contains("the policy names no password_file or password_command under [snapshot]"), "\(run.stderr)")
    }

    @Test("schedule show --count outside 1...1000 is refused at once (64), with the usage line", arguments: ["0", "-1", "99999999"])
    func scheduleCount(_ count: String) throws {
        let folder = try TempFolder()
        _ = try store(folder)
        let policy = folder.file("p.toml")
        try Data("[store]\npath = \"Tasks.sqlite\"\n\n[schedule]\nsnapshot = \"15 * * * *\"\n\n[snapshot]\nrepository = \"snaps\"\n".utf8)
            .write(to: URL(fileURLWithPath: policy))
        let started = Date()
        let result = try storectl("schedule", "show", "--policy", policy, "--count", count)
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains("1 to 1000"), "\(result.stderr)")
        // As every usage error: the command's usage line (it had none: thrown by the library).
        #expect(result.stderr.contains("usage: storectl schedule show --policy"), "\(result.stderr)")
        #expect(Date().timeIntervalSince(started) < 5)
    }

    @Test("a damaged store is 65 with a hint everywhere: purge included")
    func damagedStore() throws {
        let folder = try TempFolder()
        let store = try store(folder, items: 3_000)
        // Overwrite pages in the middle of the file (b-tree pages of ZITEM) with garbage.
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: store))
        try handle.seek(toOffset: 40 * 4096)
        handle.write(Data((0..<(16 * 4096)).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 7) }))
        try handle.close()
        let policy = folder.file("p.toml")
        try Data("""
            [store]
            path = "Tasks.sqlite"

            [[purge]]
            name = "items"
            entity = "Item"
            deleted_flag = "ZISDELETED"
            deleted_at = "ZDELETEDAT"
            time_format = "coredata"
            retention = "30d"
            """.utf8).write(to: URL(fileURLWithPath: policy))
        let snaps = try folder.repository("snaps", encrypted: true)
        for arguments in [["purge", "--policy", policy], ["purge", "--policy", policy, "--dry-run"], ["backup", store, "-o", folder.file("b.sqlite")],
                          ["snapshot", "create", store, "--repo", snaps]] {
            let result = try ChildProcess.run(Binaries.storectl, arguments, environment: ["STORECTL_PASSWORD_FILE": try folder.passwordFile()])
            #expect(result.status == 65, "\(arguments): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains("hint:"), "\(arguments): \(result.stderr)")
            #expect(!result.stderr.contains("SQLite error 11"), "\(arguments): \(result.stderr)")
        }
    }

    @Test("killswitch engage on a missing path or a folder: 66, and no stray file")
    func killswitchTarget() throws {
        let folder = try TempFolder()
        let missing = try storectl("killswitch", "engage", folder.file("Typo.sqlite"))
        #expect(missing.status == 66, "\(missing.stderr)")
        #expect(folder.contents().isEmpty)
        let directory = try storectl("killswitch", "engage", folder.path)
        #expect(directory.status == 66, "\(directory.stderr)")
        #expect(!FileManager.default.fileExists(atPath: folder.path + ".storectl-killswitch"))
    }

    @Test("migrate --to a version that does not exist (64); a migration that is not UTF-8 (65, the byte offset); the store unchanged")
    func migrateInputs() throws {
        let folder = try TempFolder()
        let store = try store(folder)
        let migrations = folder.file("migrations")
        try FileManager.default.createDirectory(atPath: migrations, withIntermediateDirectories: false)
        try Data("UPDATE ZTAG SET ZNAME = upper(ZNAME);".utf8).write(to: URL(fileURLWithPath: migrations + "/0001_upper.sql"))
        let before = try StoreState.digest(store)
        let to = try storectl("migrate", store, "--migrations", migrations, "--repo", folder.file("snaps"), "--to", "7")
        #expect(to.status == 64, "\(to.stderr)")
        #expect(to.stderr.contains("there is no migration 7"), "\(to.stderr)")
        try Data([0x55, 0x50, 0x44, 0xE9, 0x20] + Array(" ZTAG;".utf8)).write(to: URL(fileURLWithPath: migrations + "/0002_latin1.sql"))
        let latin1 = try storectl("migrate", store, "--migrations", migrations, "--repo", folder.file("snaps"))
        #expect(latin1.status == 65, "\(latin1.stderr)")
        #expect(latin1.stderr.contains("0002_latin1.sql is not UTF-8 text: byte 3 (0xe9)"), "\(latin1.stderr)")
        #expect(try StoreState.digest(store) == before)
        #expect(FileSystem.kind(of: folder.file("snaps")) == .missing)
    }

    @Test("negative values: --timeout=-5 is refused (64) wherever timeouts are taken; --keep-last -1 parses as documented")
    func negativeValues() throws {
        let folder = try TempFolder()
        let store = try store(folder)
        for arguments in [["backup", store, "-o", folder.file("b.sqlite"), "--timeout=-5"], ["preflight", store, "--timeout", "-5"],
                          ["snapshot", "create", store, "--repo", folder.file("snaps"), "--timeout", "-5"],
                          ["snapshot", "restore", "--repo", folder.file("snaps"), "ID", "--in-place", store, "--timeout", "-5"]] {
            let result = try ChildProcess.run(Binaries.storectl, arguments)
            #expect(result.status == 64, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains("--timeout -5: expected seconds"), "\(arguments): \(result.stderr)")
        }
        let huge = try storectl("snapshot", "restore", "--repo", folder.file("snaps"), "ID", "--in-place", store, "--timeout", "99999999")
        #expect(huge.status == 64 && huge.stderr.contains("expected seconds from 0 to 604800"), "\(huge.stderr)")
        #expect(!FileManager.default.fileExists(atPath: folder.file("b.sqlite")))
        _ = try SnapshotCreate.run(store: store, options: .init(repository: try folder.repository("snaps")))
        let keep = try storectl("snapshot", "prune", "--repo", folder.file("snaps"), "--keep-last", "-1")
        #expect(keep.status == 0, "\(keep.stderr)")
        #expect(keep.stdout.contains("kept 1, removed 0"), "\(keep.stdout)")
    }

    @Test("file names: a 300-character output name (73, with a hint); names that are not UTF-8 (64 for an argument, 65 for an external-data file)")
    func fileNames() throws {
        let folder = try TempFolder()
        let store = try store(folder)
        let long = try storectl("backup", store, "-o", folder.file(String(repeating: "x", count: 300) + ".sqlite"))
        #expect(long.status == 73, "\(long.stderr)")
        #expect(long.stderr.contains("hint:") && long.stderr.contains("bytes long"), "\(long.stderr)")

        let raw = Array(folder.path.utf8) + Array("/caf".utf8) + [0xE9] + Array(".sqlite".utf8)
        let fd = raw.withUnsafeBufferPointer { buffer -> Int32 in
            let cString = Array(buffer) + [0]
            return cString.withUnsafeBufferPointer { open(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), O_CREAT | O_WRONLY, 0o600) }
        }
        #expect(fd >= 0)
        close(fd)
        let result = try ChildProcess.run("/bin/sh", ["-c", "exec \"$0\" preflight \"$(printf '\(folder.path)/caf\\351.sqlite')\"", Binaries.storectl])
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains("is not valid UTF-8") && result.stderr.contains("caf\\xe9.sqlite"), "\(result.stderr)")

        let external = StoreFile(unchecked: store).externalDataPath
        let badName = Array(external.utf8) + Array("/photo-".utf8) + [0xFF] + [0]
        let made = badName.withUnsafeBufferPointer { open(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), O_CREAT | O_WRONLY, 0o600) }
        #expect(made >= 0)
        close(made)
        let backup = try storectl("backup", store, "-o", folder.file("b.sqlite"))
        #expect(backup.status == 65, "\(backup.stderr)")
        #expect(backup.stderr.contains("photo-\\xff") && backup.stderr.contains("not valid UTF-8"), "\(backup.stderr)")
        #expect(!FileManager.default.fileExists(atPath: folder.file("b.sqlite")))
    }

    @Test("repositories, keys and export: each bad input is refused with its status, and nothing is made or changed; a store or a folder that is not a repository given as --repo names the repositories next to it")
    func repositoryCommands() throws {
        let folder = try TempFolder()
        let store = try store(folder)
        let password = try folder.passwordFile()
        try Data("\n".utf8).write(to: URL(fileURLWithPath: folder.file("empty")))
        try FileManager.default.createDirectory(atPath: folder.file("full"), withIntermediateDirectories: false)
        try Data("x".utf8).write(to: URL(fileURLWithPath: folder.file("full/other")))
        let environment = ["STORECTL_PASSWORD_FILE": password]
        func run(_ arguments: [String], _ extra: [String: String] = [:]) throws -> ChildProcess.Result {
            try ChildProcess.run(Binaries.storectl, arguments, environment: environment.merging(extra) { $1 })
        }
        for (arguments, status, message, extra) in [
            (["repo", "init", "--repo", folder.file("r"), "--format", "3"], 64, "format 2 only", [:]),
            (["repo", "init", "--repo", folder.file("r"), "--format", "1"], 64, "snapshot export", [:]),
            (["repo", "init", "--repo", folder.file("full")], 73, "is not empty", [:]),
            (["repo", "init", "--repo", folder.file("nowhere/r")], 73, "does not exist", [:]),
            (["repo", "init", "--repo", folder.file("r")], 64, "password is empty", ["STORECTL_PASSWORD_FILE": folder.file("empty")]),
            (["repo", "check", "--repo", folder.file("r")], 66, "check --repo", [:]),
        ] as [([String], Int32, String, [String: String])] {
            let result = try run(arguments, extra)
            #expect(result.status == status && result.stderr.contains(message), "\(arguments): \(result.status) \(result.stderr)")
        }
        #expect(FileSystem.kind(of: folder.file("r")) == .missing, "no repository was made")
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.file("full")) == ["other"])

        let repo = folder.file("r"), plain = folder.file("plain"), one = try folder.oldRepository("format-1", as: "one")
        #expect(try run(["repo", "init", "--repo", repo]).status == 0)
        #expect(try run(["repo", "init", "--repo", plain, "--insecure-no-encryption"]).status == 0)
        #expect(try run(["snapshot", "create", store, "--repo", repo]).status == 0)
        let id = try #require(try JSON.decoder().decode([SnapshotSummary].self, from: Data(try run(["snapshot", "list", "--repo", repo, "--json"]).stdout.utf8)).first?.id)
        let before = try FileManager.default.subpathsOfDirectory(atPath: repo).sorted()
        for (arguments, status, message) in [
            (["key", "remove", "--repo", repo, "../../etc"], 64, "is not a key id"),
            (["key", "remove", "--repo", repo, "0123456789abcdef"], 66, "has no key"),
            (["key", "list", "--repo", plain], 64, "not encrypted"),
            (["key", "list", "--repo", one], 65, "storectl repo convert \(one) --repo NEW"),
            (["repo", "repair", "--repo", one], 65, "is a format-1 repository (made by an earlier storectl)"),
            (["snapshot", "export", "--repo", repo, id, "--output", folder.file("s.zip")], 64, "*.tar.zst"),
            (["snapshot", "export", "--repo", repo, id, "--output", folder.path], 64, "is a folder: the archive is one file"),
            (["snapshot", "export", "--repo", repo, "20000101T000000Z", "--output", folder.file("s.tar.zst")], 66, "no snapshot"),
            (["snapshot", "create", store, "--repo", repo, "--compression", "xz"], 64, "unknown option '--compression'"),
            (["snapshot", "restore", "--repo", repo, id, "--to", folder.file("full")], 73, "is a folder: --to names the store file the restore makes\n  hint: name a file in it that does not exist yet, e.g. --to \(folder.file("full"))/"),
            // A store given as --repo: what --repo names, and the repositories beside it (it had no hint).
            (["snapshot", "list", "--repo", store], 65, "hint: --repo names a repository's folder, not a store; repositories next to it: "),
            (["snapshot", "list", "--repo", folder.file("full")], 65, "(it has no config)\n  hint: check --repo; repositories next to it: "),
        ] as [([String], Int32, String)] {
            let result = try run(arguments)
            #expect(result.status == status && result.stderr.contains(message), "\(arguments): \(result.status) \(result.stderr)")
        }
        #expect(FileSystem.kind(of: folder.file("s.zip")) == .missing && FileSystem.kind(of: folder.file("s.tar.zst")) == .missing)
        #expect(try FileManager.default.subpathsOfDirectory(atPath: repo).sorted() == before, "the repository is as it was")
        // The example names a file that does not exist (it named one that did: the next try was 73 too).
        let storeName = FileSystem.name(of: store)
        try FileManager.default.createDirectory(atPath: folder.file("taken"), withIntermediateDirectories: false)
        try Data("x".utf8).write(to: URL(fileURLWithPath: folder.file("taken") + "/" + storeName))
        let taken = try run(["snapshot", "restore", "--repo", repo, id, "--to", folder.file("taken")])
        let stem = (storeName as NSString).deletingPathExtension, ext = (storeName as NSString).pathExtension
        #expect(taken.status == 73 && taken.stderr.contains("e.g. --to \(folder.file("taken"))/\(stem)-2.\(ext)"), "\(taken.stderr)")
        // A copy of the repository without its config: said so, and what to do (it said only "check --repo").
        let noConfig = folder.file("noconfig")
        try FileManager.default.copyItem(atPath: repo, toPath: noConfig)
        try FileManager.default.removeItem(atPath: noConfig + "/config")
        let lost = try run(["snapshot", "list", "--repo", noConfig])
        #expect(lost.status == 65 && lost.stderr.contains("its config is missing") && lost.stderr.contains("put back the config"), "\(lost.stderr)")
        // A damaged key file beside the good one: key list says so (it left it out without a word).
        let damagedKey = folder.file("damagedkey")
        try FileManager.default.copyItem(atPath: repo, toPath: damagedKey)
        try Data("not a key".utf8).write(to: URL(fileURLWithPath: damagedKey + "/keys/00112233445566778899aabbccddeeff"))
        let keys = try run(["key", "list", "--repo", damagedKey])
        #expect(keys.status == 0 && keys.stderr.contains("00112233445566778899aabbccddeeff") && keys.stderr.contains("not listed"), "\(keys.stdout) \(keys.stderr)")
    }

    @Test("restore --in-place: no store at the path (66 unless --create); a damaged pack is refused before any safety snapshot")
    func restoreInPlaceInputs() throws {
        let folder = try TempFolder()
        let store = try store(folder)
        let repo = try folder.repository("snaps")
        let snapshot = try SnapshotCreate.run(store: store, options: .init(repository: repo))
        let missing = try storectl("snapshot", "restore", "--repo", repo, snapshot.id, "--in-place", folder.file("Other.sqlite"))
        #expect(missing.status == 66, "\(missing.stderr)")
        #expect(missing.stderr.contains("--create"), "\(missing.stderr)")
        #expect(!FileManager.default.fileExists(atPath: folder.file("Other.sqlite")))
        #expect(try storectl("snapshot", "restore", "--repo", repo, snapshot.id, "--in-place", folder.file("Other.sqlite"), "--create").status == 0)

        // A byte of a pack the snapshot needs is flipped.
        for pack in FileManager.default.subpaths(atPath: repo + "/data") ?? [] where pack.count > 10 {
            let path = repo + "/data/" + pack
            var data = try Data(contentsOf: URL(fileURLWithPath: path))
            data[data.count / 3] ^= 0x20
            try data.write(to: URL(fileURLWithPath: path))
        }
        let before = try StoreState.digest(store)
        let listed = try SnapshotSummary.list(repository: repo).count
        let damaged = try storectl("snapshot", "restore", "--repo", repo, snapshot.id, "--in-place", store)
        #expect(damaged.status == 65, "\(damaged.stderr)")
        #expect(try SnapshotSummary.list(repository: repo).count == listed, "no safety snapshot was taken for a restore that cannot happen")
        #expect(try StoreState.digest(store) == before)
    }

    @Test("human output: long entity names whole, singular for one, preflight --json with ok, status and figures")
    func humanOutput() throws {
        let folder = try TempFolder()
        let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/coredata/photos-10.15.7").path
        let photos = folder.file("Photos.sqlite")
        for suffix in ["", "-wal", "-shm"] { try FileManager.default.copyItem(atPath: fixtures + "/Photos.sqlite" + suffix, toPath: photos + suffix) }
        let repo = try folder.repository("snaps")
        let created = try storectl("snapshot", "create", photos, "--repo", repo, "--json")
        #expect(created.status == 0, "\(created.stderr)")
        let id = try #require(try JSONSerialization.jsonObject(with: Data(created.stdout.utf8)) as? [String: Any])["id"] as? String
        let show = try storectl("snapshot", "show", "--repo", repo, try #require(id))
        #expect(show.stdout.contains("CloudSharedAlbumInvitationRecord "), "\(show.stdout)")

        let preflight = try storectl("preflight", photos, "--json")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(preflight.stdout.utf8)) as? [String: Any])
        #expect(object["ok"] as? Bool == (preflight.status == 0))
        #expect(object["status"] as? Int == Int(preflight.status))
        let checks = try #require(object["checks"] as? [[String: Any]])
        let zMax = try #require(checks.first { $0["id"] as? String == "coredata.z_max" })
        #expect(((zMax["figures"] as? [String: Any])?["rootEntities"] as? Int ?? 0) > 40, "\(zMax)")
        let space = try #require(checks.first { $0["id"] as? String == "space.destination" })
        #expect(((space["figures"] as? [String: Any])?["availableBytes"] as? Int ?? 0) > 0)

        _ = try store(folder)
        let policy = folder.file("p.toml")
        try Data("[store]\npath = \"Tasks.sqlite\"\n\n[[purge]]\nname = \"tags\"\ntable = \"ZTAG\"\ndeleted_flag = \"ZISDELETED\"\n".utf8)
            .write(to: URL(fileURLWithPath: policy))
        let purge = try storectl("purge", "--policy", policy)
        #expect(purge.stdout.contains(" in 1 batch,"), "\(purge.stdout)")
        #expect(!purge.stdout.contains("1 batches"))
    }
}

/// Item by item, the wrong answers a new user met: each is now its own status and says what is wrong.
@Suite("smaller wrong answers, put right", .onTestThreads)
struct SmallerAnswerTests {
    @Test("negative and out-of-range values say so (64); a migrations file, a missing store for rollback or the kill switch, a file that is not a store, a too-long restore name")
    func messages() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 300)
        let password = try folder.passwordFile()
        let environment = ["STORECTL_PASSWORD_FILE": password]
        let repo = folder.file("repo")
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", repo], environment: environment).status == 0)
        #expect(try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo], environment: environment).status == 0)
        let id = try #require(try JSON.decoder().decode([SnapshotSummary].self, from: Data(try ChildProcess.run(Binaries.storectl,
                                                          ["snapshot", "list", "--repo", repo, "--json"], environment: environment).stdout.utf8)).first?.id)
        try FileManager.default.createDirectory(atPath: folder.file("migrations"), withIntermediateDirectories: false)
        try Data("SELECT 1;".utf8).write(to: URL(fileURLWithPath: folder.file("migrations/0001_a.sql")))
        try Data("not a store\n".utf8).write(to: URL(fileURLWithPath: folder.file("notes.txt")))
        let long = folder.file(String(repeating: "n", count: 230) + ".sqlite")
        for (arguments, status, message) in [
            (["snapshot", "create", store, "--repo", repo, "--level", "-7"], 64, "out of range"),
            (["migrate", "apply", store, "--migrations", folder.file("migrations"), "--repo", repo, "--to", "-1"], 64, "out of range"),
            (["snapshot", "prune", "--repo", repo, "--keep-within", "-1d"], 64, "is negative"),
            (["snapshot", "prune", "--repo", repo, "--keep-within", "3x"], 64, "unknown unit 'x'"),
            (["snapshot", "create", store, "--repo", repo, "--level", "25"], 64, "out of range"),
            (["run", "purge", "--policy", folder.file("none.toml"), "--jitter", "-5m"], 64, "is negative"),
            (["migrate", "status", store, "--migrations", folder.file("migrations/0001_a.sql")], 66, "is a file, not a folder"),
            (["rollback", folder.file("missing.sqlite"), "--repo", repo], 66, "no such store"),
            (["killswitch", "status", folder.file("missing.sqlite")], 66, "no such file"),
            (["killswitch", "engage", folder.file("notes.txt")], 65, "not a SQLite database"),
            (["snapshot", "restore", "--repo", repo, id, "--to", long], 73, "the output name"),
        ] as [([String], Int32, String)] {
            let result = try ChildProcess.run(Binaries.storectl, arguments, environment: environment)
            #expect(result.status == status && result.stderr.contains(message), "\(arguments.prefix(3)): \(result.status) \(result.stderr)")
            // Every usage error, ArgumentParser's or the library's, has the usage line and a hint
            // (`--keep-within 3x`, `--level 25` had neither: found by a helper).
            if status == 64 { #expect(result.stderr.contains("\n  usage: storectl ") && result.stderr.contains("\n  hint: "), "\(arguments.prefix(3)): \(result.stderr)") }
        }
        #expect(FileSystem.kind(of: folder.file("missing.sqlite.storectl-lock")) == .missing, "rollback left no lock file beside a missing store")
        #expect(FileSystem.kind(of: folder.file("notes.txt.storectl-killswitch")) == .missing)
        #expect(FileSystem.kind(of: folder.file("r1")) == .missing)
    }

    @Test("two folder backups in one second: the second takes the next free name (-2), neither is refused or moved aside")
    func backupsInOneSecond() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 300)
        let out = folder.file("out")
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: false)
        var lines: [String] = []
        for _ in 0..<3 {
            let result = try ChildProcess.run(Binaries.storectl, ["backup", store, "--output", out])
            #expect(result.status == 0, "\(result.stderr)")
            lines.append(result.stdout)
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: out).filter { $0.hasSuffix(".sqlite") }.sorted()
        #expect(names.count == 3, "\(names)")
        #expect(names.contains { $0.hasSuffix("Z-2.sqlite") } || Set(names.map { $0.prefix(22) }).count > 1, "\(names)")
    }

    @Test("a read-only mount: preflight works on the store; migrate says read-only (73); export into it says read-only (73), not 'not enough space'",
          .enabled(if: TempMount.isAvailable))
    func readOnlyMount() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 300)
        // A store checkpointed into its file (no -wal), as it sits on a read-only volume.
        _ = try ChildProcess.run("/usr/bin/env", ["python3", "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()", store])
        let mount = try #require(TempMount(kilobytes: 16 * 1024))
        let onMount = mount.file("Tasks.sqlite")
        try FileManager.default.copyItem(atPath: store, toPath: onMount)
        #expect(try ChildProcess.run("/bin/mount", ["-o", "remount,ro", mount.path]).status == 0)
        let preflight = try ChildProcess.run(Binaries.storectl, ["preflight", onMount])
        #expect(!preflight.stderr.contains("cannot open") && [0, 2].contains(preflight.status), "\(preflight.status) \(preflight.stdout)\(preflight.stderr)")
        try FileManager.default.createDirectory(atPath: folder.file("migrations"), withIntermediateDirectories: false)
        try Data("SELECT 1;".utf8).write(to: URL(fileURLWithPath: folder.file("migrations/0001_a.sql")))
        let migrate = try ChildProcess.run(Binaries.storectl, ["migrate", "apply", onMount, "--migrations", folder.file("migrations"), "--repo", folder.file("snaps")])
        #expect(migrate.status == 73 && migrate.stderr.contains("read-only file system"), "\(migrate.status) \(migrate.stderr)")
        let repo = folder.file("repo")
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", repo, "--insecure-no-encryption"]).status == 0)
        #expect(try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo]).status == 0)
        let id = try #require(try JSON.decoder().decode([SnapshotSummary].self, from: Data(try ChildProcess.run(Binaries.storectl,
                                                          ["snapshot", "list", "--repo", repo, "--json"]).stdout.utf8)).first?.id)
        let export = try ChildProcess.run(Binaries.storectl, ["snapshot", "export", "--repo", repo, id, "--output", mount.file("s.tar.zst")])
        #expect(export.status == 73 && export.stderr.contains("read-only file system"), "\(export.status) \(export.stderr)")
        // /proc stores nothing: 73 (cannot create output), not 74 "not enough space, 0 B free".
        let proc = try ChildProcess.run(Binaries.storectl, ["snapshot", "export", "--repo", repo, id, "--output", "/proc/storectl-s.tar.zst"])
        #expect(proc.status == 73 && proc.stderr.contains("stores nothing"), "\(proc.status) \(proc.stderr)")
    }

    @Test("a migration that fills the disk: its rollback cannot start because the store's -wal holds the space (its failed transaction's frames); it says so and how to release it, which works",
          .enabled(if: TempMount.isAvailable))
    func fullDiskRollbackNamesTheWAL() throws {
        let folder = try TempFolder()
        let mount = try #require(TempMount(kilobytes: 20 * 1024))
        let store = mount.file("Tasks.sqlite")
        #expect(try ChildProcess.run(Binaries.lab, ["make-store", store, "--items", "20000"]).status == 0)
        let original = try storeDigest(store)
        let repo = folder.file("snaps")
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", repo, "--insecure-no-encryption"]).status == 0)
        let migrations = folder.file("m")
        try FileManager.default.createDirectory(atPath: migrations, withIntermediateDirectories: false)
        try Data("-- storectl: changes Tag.ZNAME\nUPDATE ZTAG SET ZNAME = upper(ZNAME);\n".utf8).write(to: URL(fileURLWithPath: migrations + "/0001_small.sql"))
        try Data("-- storectl: changes Item.ZBODY\nUPDATE ZITEM SET ZBODY = ZBODY || hex(randomblob(400));\n".utf8).write(to: URL(fileURLWithPath: migrations + "/0002_grow.sql"))
        let run = try ChildProcess.run(Binaries.storectl, ["migrate", "apply", store, "--migrations", migrations, "--repo", repo, "--rollback-on-failure"])
        #expect(run.status == 4 && run.stdout.contains("Tasks.sqlite-wal holds") && run.stdout.contains("no space left"), "\(run.status) \(run.stdout) \(run.stderr)")
        // The rollback by itself: SQLite releases the -wal when it has a page of room to write the
        // committed frames back (0), else it says how much the -wal holds and how to free it (74).
        let again = try ChildProcess.run(Binaries.storectl, ["rollback", store, "--repo", repo])
        #expect(again.status == 0 || again.status == 74 && again.stderr.contains("-wal holds") && again.stderr.contains("PRAGMA wal_checkpoint(TRUNCATE)"),
                "\(again.status) \(again.stderr)")
        if again.status == 74 {
            // What the hint says, then the rollback.
            _ = try ChildProcess.run("/usr/bin/env", ["python3", "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()", store])
            let rolled = try ChildProcess.run(Binaries.storectl, ["rollback", store, "--repo", repo])
            #expect(rolled.status == 0, "\(rolled.stderr)")
        }
        #expect(try storeDigest(store) == original)
    }
}
