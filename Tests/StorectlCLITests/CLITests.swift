import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing
@testable import storectl

func storectl(_ arguments: String..., environment: [String: String]? = nil) throws -> ChildProcess.Result {
    try ChildProcess.run(Binaries.storectl, arguments, environment: environment)
}

/// Polls `condition` every 200 ms (it may start a process) until it holds or `timeout` passes; whether it held. Tests wait
/// for the state they need this way, never for a fixed time: a loaded CI machine runs a
/// follower's start, base and uploads several times slower than a quiet one.
func waitUntil(_ timeout: TimeInterval = 60, every interval: TimeInterval = 0.2, _ condition: () throws -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    repeat {
        if (try? condition()) == true { return true }
        usleep(useconds_t(interval * 1_000_000))
    } while Date() < deadline
    return (try? condition()) == true
}

/// Waits until process `pid` catches `signal` (its handler is installed: /proc/PID/status's
/// SigCgt mask), so a signal sent now is handled, not the default action; whether it did.
func waitForHandler(of signal: Int32, in pid: Int32, timeout: TimeInterval = 30) -> Bool {
    waitUntil(timeout) {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigCgt:") }),
              let mask = UInt64(line.dropFirst("SigCgt:".count).trimmingCharacters(in: .whitespaces), radix: 16) else { return false }
        return mask & (UInt64(1) << UInt64(signal - 1)) != 0
    }
}

/// The newest point `snapshot list --points --json` lists for the repository's first store, as
/// the RFC 3339 text it prints (a point's time: a restore or diff at it finds exactly that point).
func newestListedPoint(_ repo: String, environment: [String: String]? = nil) -> String? {
    guard let listed = try? ChildProcess.run(Binaries.storectl, ["snapshot", "list", "--repo", repo, "--points", "--json"], environment: environment),
          listed.status == 0,
          let stores = try? JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]] else { return nil }
    return stores.first?["newestPoint"] as? String
}

func makeStore(_ folder: TempFolder, items: Int = 2_000, journalMode: String = "wal") throws -> String {
    let path = folder.file("Tasks.sqlite")
    let made = try ChildProcess.run(Binaries.lab, ["make-store", path, "--items", "\(items)", "--journal-mode", journalMode])
    #expect(made.status == 0, "\(made.stderr)")
    return path
}

/// The numbers of the commits `storectl-lab writer --reopen --commit-log LOG` was told succeeded.
func acknowledgedCommits(_ log: String) throws -> Set<Int> {
    Set(try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").compactMap { $0.split(separator: " ").first.flatMap { Int($0) } })
}

/// The numbers of that writer's commits a store (or a restored copy) holds: its titles end " #n".
func writerCommits(in path: String) throws -> Set<Int> {
    let queue = try DatabaseQueue(path: path, configuration: { var c = Configuration(); c.readonly = true; return c }())
    defer { try? queue.close() }
    let titles = try queue.read { try String.fetchAll($0, sql: "SELECT ZTITLE FROM ZITEM WHERE ZTITLE LIKE 'written by the load % #%'") }
    return Set(titles.compactMap { $0.firstMatch(of: /#(\d+)$/).flatMap { Int($0.1) } })
}

/// Leaves a hot rollback journal beside a rollback-mode store: a writer (python3's sqlite3) runs
/// `update` in a transaction with a two-page cache, so its changes spill into the file, and is
/// killed (SIGKILL) before it commits.
func leaveHotJournal(_ store: String, update: String) throws {
    let crash = """
        import os, signal, sqlite3, sys
        c = sqlite3.connect(sys.argv[1], isolation_level=None)
        c.execute('PRAGMA cache_size = 2')
        c.execute('BEGIN')
        c.execute(sys.argv[2])
        os.kill(os.getpid(), signal.SIGKILL)
        """
    let killed = try ChildProcess.run("/usr/bin/python3", ["-c", crash, store, update])
    #expect(killed.status != 0)
    try #require((FileSystem.size(of: store + "-journal") ?? 0) > 0, "no hot journal was left")
}

/// Where a paced copy's threads are expected in the idle class: CAP_SYS_NICE (the guard can take
/// them out again) and scheduler statistics readable and counting.
enum StarvationGuardSupport {
    static var idleClassExpected: Bool {
        guard let text = try? String(contentsOfFile: "/proc/self/schedstat", encoding: .ascii),
              text.split(separator: " ").first.flatMap({ UInt64($0) }).map({ $0 > 0 }) == true,
              let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return false }
        // CapEff bit 23: CAP_SYS_NICE.
        let effective = status.split(separator: "\n").first { $0.hasPrefix("CapEff:") }
            .flatMap { UInt64($0.dropFirst("CapEff:".count).trimmingCharacters(in: .whitespaces), radix: 16) }
        return (effective ?? 0) & (1 << 23) != 0
    }
}

@Suite("storectl backup, end to end", .onTestThreads)
struct BackupCLITests {
    @Test("quiet success: one summary line on stdout, nothing on stderr, exit 0")
    func success() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let result = try storectl("backup", store, "--output", folder.path)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.isEmpty, "no progress when stderr is not a terminal: \(result.stderr)")
        let lines = result.stdout.split(separator: "\n")
        #expect(lines.count == 1)
        #expect(lines.first?.hasPrefix("backup ok: \(folder.path)/Tasks-") == true)
        #expect(result.stdout.contains("quick_check ok"))
        #expect(result.stdout.contains("(source wal, 6 entities)"))
    }

    @Test("backups beside each other into one folder (three at once, five rounds): each gets its own name (-2, -3 in the same second), each file is its own whole backup with its manifest, nothing set aside as unexpected; two at once to one named file: one makes it, the other is refused (75) naming the run making it")
    func besideEachOther() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 200)
        let out = folder.file("backups")
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: false)
        var made: Set<String> = []
        for round in 1...5 {
            let runs = try (0..<3).map { _ in try ChildProcess.Running(Binaries.storectl, ["backup", store, "-o", out, "--json"]) }
            for run in runs {
                let result = run.wait()
                #expect(result.status == 0, "round \(round): \(result.stderr)")
                guard result.status == 0, let decoded = try? JSON.decoder().decode(Backup.Result.self, from: Data(result.stdout.utf8)) else { continue }
                #expect(!made.contains(decoded.path), "round \(round): two runs said they made \(decoded.path)")
                made.insert(decoded.path)
                #expect(decoded.manifest.database.sha256 == (try Hashing.sha256(ofFile: decoded.path)), "\(decoded.path) is not the backup its run made")
            }
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: out)
        #expect(made.count == 15 && names.filter { $0.hasSuffix(".sqlite") }.count == 15 && names.filter { $0.hasSuffix(".manifest.json") }.count == 15,
                "\(made.count) made; \(names.sorted())")
        #expect(!names.contains { $0.contains("unexpected") || $0.contains("storectl-swap") || $0.contains(".tmp-storectl-") }, "\(names.sorted())")
        // One named file, two runs at once: never one's backup set aside by the other's.
        let target = folder.file("one.sqlite")
        let pair = try (0..<2).map { _ in try ChildProcess.Running(Binaries.storectl, ["backup", store, "-o", target]) }
        let results = pair.map { $0.wait() }
        #expect(results.filter { $0.status == 0 }.count >= 1, "\(results.map(\.stderr))")
        for result in results where result.status != 0 {
            #expect([75, 73].contains(result.status) && (result.stderr.contains("is making") || result.stderr.contains("already exists")), "\(result.status) \(result.stderr)")
        }
        let beside = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        #expect(!beside.contains { $0.contains("unexpected") }, "\(beside)")
    }

    @Test("--json: the result, with the manifest, on stdout")
    func json() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let result = try storectl("backup", store, "-o", folder.file("copy.sqlite"), "--json", "--verify", "full")
        #expect(result.status == 0, "\(result.stderr)")
        let decoded = try JSON.decoder().decode(Backup.Result.self, from: Data(result.stdout.utf8))
        #expect(decoded.path == folder.file("copy.sqlite"))
        #expect(decoded.manifest.verify.level == .full)
        #expect(decoded.manifest.database.sha256 == (try Hashing.sha256(ofFile: decoded.path)))
    }

    @Test("errors: message on stderr and the documented status; with --json also a JSON error on stdout")
    func errors() throws {
        let folder = try TempFolder()
        let missing = try storectl("backup", folder.file("missing.sqlite"), "-o", folder.path)
        #expect(missing.status == 66)
        #expect(missing.stderr.hasPrefix("storectl: \(folder.file("missing.sqlite")): no such file"))
        #expect(missing.stdout.isEmpty)

        let json = try storectl("backup", folder.file("missing.sqlite"), "-o", folder.path, "--json")
        #expect(json.status == 66)
        let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        #expect(object?["ok"] as? Bool == false)
        #expect(object?["status"] as? Int == 66)

        let store = try makeStore(folder)
        let exists = try storectl("backup", store, "-o", store)
        #expect(exists.status == 64)
        #expect(exists.stderr.contains("is the source store itself"))
    }

    @Test("usage errors exit 64", arguments: [
        ["backup", "x.sqlite"],                                   // no --output
        ["backup", "x.sqlite", "-o", "y", "--verify", "bogus"],   // bad enum
        ["backup", "x.sqlite", "-o", "y", "--timeout", "soon"],   // not a number
        ["preflight", "x.sqlite", "--for", "dance"],
        ["frobnicate"],
        [],                                                       // no subcommand: help on stderr, 64 (not a success)
        ["snapshot"],
        ["repo"],
    ])
    func usage(_ arguments: [String]) throws {
        let result = try ChildProcess.run(Binaries.storectl, arguments)
        #expect(result.status == 64, "\(arguments): \(result.stderr)")
        #expect(!result.stderr.isEmpty)
        if arguments == ["snapshot"] { #expect(result.stderr.contains("name a subcommand (create, list, show, verify, restore, export, import, prune)"), "\(result.stderr)") }
        if arguments == [] { #expect(result.stderr.contains("name a subcommand (backup, preflight, snapshot, repo, key, policy, purge, killswitch,"), "\(result.stderr)") }
    }

    @Test("an unreadable store: 66 (run as an unprivileged user when the tests run as root)")
    func unreadable() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        chmod(store, 0o000)
        defer { chmod(store, 0o644) }
        chmod(folder.path, 0o777)
        let result: ChildProcess.Result
        if getuid() == 0 {
            result = try ChildProcess.run("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups",
                                                               Binaries.storectl, "backup", store, "-o", folder.file("out.sqlite")])
        } else {
            result = try storectl("backup", store, "-o", folder.file("out.sqlite"))
        }
        #expect(result.status == 66, "\(result.stderr)")
        #expect(result.stderr.contains("Permission denied"))
        #expect(leftoversIn(folder.path).isEmpty)
    }

    @Test("a repository this user may not read: 66 saying so (owner, mode) and what to do, not \"an empty folder\" with a hint to repo init")
    func unreadableRepository() throws {
        let folder = try TempFolder()
        chmod(folder.path, 0o755)
        let repo = try folder.repository("repo")
        chmod(repo, getuid() == 0 ? 0o700 : 0o000)
        defer { chmod(repo, 0o700) }
        let arguments = ["snapshot", "list", "--repo", repo]
        let result = getuid() == 0
            ? try ChildProcess.run("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", Binaries.storectl] + arguments)
            : try ChildProcess.run(Binaries.storectl, arguments)
        #expect(result.status == 66, "\(result.stderr)")
        #expect(result.stderr.contains("cannot read the repository \(repo): permission denied (owner ") && result.stderr.contains("mode 0"), "\(result.stderr)")
        #expect(!result.stderr.contains("empty folder") && !result.stderr.contains("repo init"), "\(result.stderr)")
    }

    @Test("a WAL store in a folder this user cannot write (SQLite must make its -shm there): diff and preflight say so and what to do (66), not 'attempt to write a readonly database' (74)",
          .enabled(if: getuid() == 0))
    func walStoreInUnwritableFolder() throws {
        let folder = try TempFolder()
        chmod(folder.path, 0o755)
        let store = try makeStore(folder, items: 50)
        for suffix in ["-wal", "-shm"] { _ = FileSystem.remove(store + suffix, point: "test") }
        let copy = folder.file("Copy.sqlite")
        try FileManager.default.copyItem(atPath: store, toPath: copy)
        chmod(store, 0o644)
        chmod(copy, 0o644)
        for arguments in [["diff", store, copy], ["preflight", store]] {
            let result = try ChildProcess.run("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", Binaries.storectl] + arguments)
            #expect(result.status == 66, "\(arguments): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains("is in WAL mode, and SQLite reads such a store through its -shm") && result.stderr.contains("run storectl as the store's owner"),
                    "\(arguments): \(result.stderr)")
        }
    }

    @Test("SIGTERM or Ctrl-C during a backup removes the temp file and exits 128+signal", arguments: [SIGTERM, SIGINT])
    func signalCleansUp(_ signal: Int32) throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, journalMode: "delete")
        // The store is locked exclusively, so the backup waits in its retry loop when the signal comes.
        let holder = try holdExclusively(store, folder)
        defer { holder.signal(SIGTERM); _ = holder.wait() }
        let out = folder.file("out")
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: false)
        // Its progress line (drawn on a pipe too with STORECTL_PROGRESS=always) says when the copy
        // stage has begun: a signal before it is a stop at the stage's start, not in the retry loop
        // (a loaded CI machine had not reached the copy stage 300 ms after the handlers were in).
        let backup = try ChildProcess.Running(Binaries.storectl, ["backup", store, "-o", out, "--timeout", "60"],
                                              environment: ["STORECTL_PROGRESS": "always"])
        #expect(waitForHandler(of: signal, in: backup.pid), "no handler within 30 s")
        let deadline = Date().addingTimeInterval(30)
        while !backup.stderrSoFar.contains("copy"), Date() < deadline { usleep(20_000) }
        #expect(backup.stderrSoFar.contains("copy"), "the copy stage did not begin within 30 s: \(backup.stderrSoFar)")
        usleep(300_000)
        backup.signal(signal)
        let result = backup.wait()
        #expect(result.status == 128 + signal, "\(result.stderr)")
        #expect(result.stderr.contains("interrupted by \(signal == SIGTERM ? "SIGTERM" : "SIGINT")"))
        #expect((try FileManager.default.contentsOfDirectory(atPath: out)).isEmpty)
        if signal == SIGTERM {
            // Still locked when the timeout passes: 75, saying what it was doing once.
            let busy = try storectl("backup", store, "-o", out, "--timeout", "0.5")
            #expect(busy.status == 75 && busy.stderr.contains("stayed locked"), "\(busy.stderr)")
            #expect(busy.stderr.components(separatedBy: "opening \(store)").count == 2, "\(busy.stderr)")
        }
    }

    @Test("preflight of a rollback-mode store another process holds exclusively past --timeout: the report (who holds it, store.locked failed, what did not run) and 75, as JSON too; it ended with the error alone")
    func preflightOfALockedStore() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 100, journalMode: "delete")
        let holder = try holdExclusively(store, folder)
        defer { holder.signal(SIGTERM); _ = holder.wait() }
        let text = try storectl("preflight", store, "--timeout", "0.5")
        #expect(text.status == 75, "\(text.status) \(text.stdout)\(text.stderr)")
        #expect(text.stdout.contains("fail  store.locked") && text.stdout.contains("stayed locked for") && text.stdout.contains("did not run"), "\(text.stdout)")
        #expect(text.stdout.contains("pid \(holder.pid)"), "names the holder: \(text.stdout)")
        #expect(text.stdout.contains("result: FAILED"), "\(text.stdout)")
        let json = try storectl("preflight", store, "--timeout", "0.5", "--json")
        #expect(json.status == 75, "\(json.stderr)")
        let report = try JSON.decoder().decode(PreflightReport.self, from: Data(json.stdout.utf8))
        #expect(report.status == 75 && report.check("store.locked")?.status == .fail && report.check("lock.writer") != nil)
        holder.signal(SIGTERM)
        _ = holder.wait()
        let free = try storectl("preflight", store)
        #expect(free.status == 0 && !free.stdout.contains("store.locked"), "\(free.stdout)")
    }

    @Test("SIGTERM while the backup is put in place (its swap paused at the folder's fsync): finished, not stopped half way, and said (it said nothing and ended 0)")
    func signalDuringTheSwap() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 100)
        let out = folder.file("late.sqlite")
        let backup = try ChildProcess.Running(Binaries.storectl, ["backup", store, "-o", out], environment: ["STORECTL_TEST_PAUSE_AT": "swap.sync-folder:2500"])
        let deadline = Date().addingTimeInterval(30)
        while FileSystem.kind(of: StoreSwap.journalPath(for: out)) == .missing, Date() < deadline { usleep(20_000) }
        usleep(300_000)
        backup.signal(SIGTERM)
        let result = backup.wait()
        #expect(result.status == 0 && result.stderr.contains("SIGTERM came while the backup was being put in place: too late to stop; it was finished"), "\(result.status) \(result.stderr)")
        #expect(FileSystem.kind(of: out) == .file && FileSystem.kind(of: StoreSwap.journalPath(for: out)) == .missing)
    }

    @Test("a backup copies in the idle scheduling class (and paced writes) unless --no-pace")
    func pacedBackupRunsNiced() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, journalMode: "delete")
        // The store is locked exclusively: each backup waits in its retry loop while we look at it.
        let holder = try holdExclusively(store, folder)
        defer { holder.signal(SIGTERM); _ = holder.wait() }
        func scheduling(_ extra: [String]) throws -> (nice: Int?, policy: Int?) {
            let backup = try ChildProcess.Running(Binaries.storectl, ["backup", store, "-o", folder.file("b\(extra.count).sqlite"), "--timeout", "60"] + extra)
            defer { backup.signal(SIGTERM); _ = backup.wait() }
            // /proc/PID/stat: after the command name in parentheses, field N is at N - 2:
            // the 19th is the nice value, the 41st the scheduling policy (5: SCHED_IDLE).
            func read() throws -> (nice: Int?, policy: Int?) {
                let stat = try String(contentsOfFile: "/proc/\(backup.pid)/stat", encoding: .utf8)
                let fields = stat[(stat.lastIndex(of: ")") ?? stat.startIndex)...].split(separator: " ")
                return (fields.count > 17 ? Int(fields[17]) : nil, fields.count > 39 ? Int(fields[39]) : nil)
            }
            // In its retry loop: its handlers are installed before it opens the store; paced, it
            // leaves the normal class (looked at until it does, a loaded machine is slow to start).
            #expect(waitForHandler(of: SIGTERM, in: backup.pid), "no handler within 30 s")
            if extra.isEmpty { _ = waitUntil(20) { let now = try read(); return now.policy != 0 || now.nice != 0 } } else { usleep(500_000) }
            return try read()
        }
        // The idle class where the guard can watch and take threads out of it (root here, with
        // readable scheduler statistics); nice 10 otherwise.
        let paced = try scheduling([])
        if StarvationGuardSupport.idleClassExpected {
            #expect(paced.policy == 5)
        } else {
            #expect(paced.policy == 5 || (paced.policy == 0 && paced.nice == 10), "\(paced)")
        }
        let full = try scheduling(["--no-pace"])
        #expect(full.nice == 0)
        #expect(full.policy == 0)
    }

    @Test("a paced backup starved of CPU in the idle class moves to nice 10 within seconds and finishes",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/taskset") && StarvationGuardSupport.idleClassExpected))
    func starvedBackupIsRaised() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 20_000)
        // A busy loop and the backup on the same core: an idle-class thread gets next to nothing there.
        let spinner = try ChildProcess.Running("/usr/bin/taskset", ["-c", "0", "/bin/sh", "-c", "while :; do :; done"])
        defer { spinner.signal(SIGKILL); _ = spinner.wait() }
        let started = Date()
        let result = try ChildProcess.run("/usr/bin/taskset", ["-c", "0", Binaries.storectl, "backup", store, "-o", folder.file("b.sqlite")],
                                          environment: ["STORECTL_LOG_LEVEL": "debug"])
        let seconds = Date().timeIntervalSince(started)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("starved of CPU in the idle class"), "\(result.stderr.suffix(2000))")
        // Threads really moved (a failed move is logged with threads: 0 and a warning).
        let moved = result.stderr.firstMatch(of: /threads: (\d+)/).flatMap { Int($0.1) }
        #expect((moved ?? 0) > 0, "\(result.stderr.suffix(2000))")
        #expect(seconds < 30, "\(seconds) s")
        #expect(FileManager.default.fileExists(atPath: folder.file("b.sqlite")))
    }

    @Test("a paced backup copies a pace chunk (256 KiB) a step, written back while the next is copied; --no-pace 4 MiB; the same copy")
    func pacedBackupSteps() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 40_000)
        let bytes = try #require((try FileManager.default.attributesOfItem(atPath: store)[.size] as? NSNumber)?.intValue)
        #expect(bytes > 8 << 20, "a store of several chunks")
        func backup(_ extra: [String]) throws -> (steps: Int, sha256: String) {
            let result = try ChildProcess.run(Binaries.storectl, ["backup", store, "-o", folder.file("b\(extra.count).sqlite"), "--json"] + extra)
            #expect(result.status == 0, "\(result.stderr)")
            let object = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
            let database = (object["manifest"] as? [String: Any])?["database"] as? [String: Any]
            return (try #require(object["steps"] as? Int), try #require(database?["sha256"] as? String))
        }
        let paced = try backup([])
        let full = try backup(["--no-pace"])
        // A step per chunk (the last one partial), against a step per 4 MiB.
        let chunk = Int(IOPace.defaultChunk)
        #expect(chunk == 256 << 10)
        #expect(paced.steps >= bytes / chunk && paced.steps <= bytes / chunk + 2, "\(paced.steps) steps for \(bytes) bytes")
        #expect(full.steps >= bytes >> 22 && full.steps <= (bytes >> 22) + 2, "\(full.steps) steps for \(bytes) bytes")
        #expect(paced.sha256 == full.sha256)
    }

    /// A second process holding `store` (rollback-journal mode) exclusively for up to 30 s, once it does.
    func holdExclusively(_ store: String, _ folder: TempFolder) throws -> ChildProcess.Running {
        let ready = folder.file("held")
        let holder = try ChildProcess.Running(Binaries.lab, ["hold", store, "--mode", "exclusive", "--seconds", "30", "--ready-file", ready])
        #expect(ChildProcess.waitFor(file: ready))
        return holder
    }

    @Test("--help lists every exit status")
    func helpListsExitStatuses() throws {
        let result = try storectl("--help")
        #expect(result.status == 0)
        for (status, meaning) in StoreOps.ExitStatus.documented {
            #expect(result.stdout.contains("\(status.rawValue)") && result.stdout.contains(meaning), "\(meaning)")
        }
    }
}

@Suite("storectl preflight, end to end", .onTestThreads)
struct PreflightCLITests {
    @Test("a table and exit 0 for a healthy store; the same as JSON")
    func healthy() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let table = try storectl("preflight", store)
        #expect(table.status == 0, "\(table.stdout)\(table.stderr)")
        #expect(table.stdout.contains("ok    integrity.quick_check"))
        #expect(table.stdout.contains("entities (Core Data)"))
        #expect(table.stdout.contains("result: ok"))

        let json = try storectl("preflight", store, "--json", "--for", "snapshot", "--dest", folder.path, "--full")
        #expect(json.status == 0)
        let report = try JSON.decoder().decode(PreflightReport.self, from: Data(json.stdout.utf8))
        #expect(report.operation == .snapshot)
        #expect(report.check("integrity.integrity_check")?.status == .ok)
        #expect(report.check("store.links") == nil, "said only for a file with more than one name")

        // A second name for the same file (a hard link): a warning naming the count, still 0.
        #expect(link(store, folder.file("Other.sqlite")) == 0)
        let linked = try storectl("preflight", store, "--json")
        #expect(linked.status == 0, "\(linked.stdout)")
        let warned = try JSON.decoder().decode(PreflightReport.self, from: Data(linked.stdout.utf8)).check("store.links")
        #expect(warned?.status == .warn && warned?.figures["links"] == .int(2) && warned?.advice?.contains("same name") == true, "\(String(describing: warned))")
    }

    @Test("a rollback-mode store with a hot journal (a writer killed mid-transaction after its cache spilled into the file): preflight fails store.journal saying so (2), backup says what it is and how to roll it back (74), not \"permission denied\" (66); once rolled back, preflight passes")
    func hotJournal() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, journalMode: "delete")
        try leaveHotJournal(store, update: "UPDATE ZITEM SET ZTITLE = ZTITLE || ' (edited)'")
        let checked = try storectl("preflight", store)
        #expect(checked.status == 2 && checked.stdout.contains("fail  store.journal") && checked.stdout.contains("hot rollback journal"), "\(checked.status) \(checked.stdout) \(checked.stderr)")
        let backup = try storectl("backup", store, "--output", folder.file("copy.sqlite"))
        #expect(backup.status == 74 && backup.stderr.contains("hot rollback journal") && backup.stderr.contains("PRAGMA quick_check"), "\(backup.status) \(backup.stderr)")
        _ = try ChildProcess.run("/usr/bin/python3", ["-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA quick_check').fetchall(); c.close()", store])
        #expect(try storectl("preflight", store).status == 0)
    }

    @Test("a failed check: exit 2 and the failing line")
    func failing() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        try DatabaseQueue(path: store).write { try $0.execute(sql: "UPDATE ZITEM SET ZCATEGORY = 4242 WHERE Z_PK = 7") }
        let result = try storectl("preflight", store)
        #expect(result.status == 2)
        #expect(result.stdout.contains("fail  coredata.orphans"))
        #expect(result.stdout.contains("result: FAILED"))
    }

    @Test("bad input: missing store 66, not a SQLite file 65")
    func badInput() throws {
        let folder = try TempFolder()
        #expect(try storectl("preflight", folder.file("none.sqlite")).status == 66)
        let text = folder.file("text.sqlite")
        try Data("not a database at all, just words".utf8).write(to: URL(fileURLWithPath: text))
        let result = try storectl("preflight", text)
        #expect(result.status == 65)
        #expect(result.stderr.contains("not a SQLite database"))
    }
}

@Suite("storectl argument parsing (in process)", .onTestThreads)
struct ParsingTests {
    @Test func backupOptions() throws {
        let command = try BackupCommand.parse(["a.sqlite", "-o", "/b", "--verify", "full", "--timeout", "5", "--force", "--json"])
        #expect(command.source == "a.sqlite" && command.output == "/b" && command.verify == .full)
        #expect(command.timeout == 5 && command.force && command.json)
        let defaults = try BackupCommand.parse(["a.sqlite", "--output", "/b"])
        #expect(defaults.verify == .quick && defaults.timeout == 60 && !defaults.force)
    }

    @Test func preflightOptions() throws {
        let command = try PreflightCommand.parse(["a.sqlite", "--for", "migrate", "--dest", "/repo", "--full"])
        #expect(command.operation == .migrate && command.dest == "/repo" && command.full)
        #expect(throws: (any Error).self) { try PreflightCommand.parse(["a.sqlite", "--for", "nothing"]) }
    }

    @Test func subcommandsAreRegistered() throws {
        #expect(try Storectl.parseAsRoot(["backup", "x", "-o", "y"]) is BackupCommand)
        #expect(try Storectl.parseAsRoot(["preflight", "x"]) is PreflightCommand)
    }
}

func leftoversIn(_ folder: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).filter { $0.contains(".tmp-storectl-") }
}
