import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

/// What a new operator met trying storectl (a helper's session): damaged stores preflight could not
/// report on, messages that said less than they should, a rehearsal that hid its plan, a lock file
/// left beside a store that was not there.
@Suite("damaged and mistaken input, as a new operator meets it", .onTestThreads)
struct DamagedInputTests {
    /// A checkpointed copy of a fresh store (no -wal): its pages are all in the file.
    func checkpointed(_ folder: TempFolder) throws -> String {
        let store = try makeStore(folder)
        let queue = try DatabaseQueue(path: store)
        try queue.writeWithoutTransaction { _ = try $0.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
        try queue.close()
        return store
    }

    /// `count` bytes of `byte` written at `offset` of `page` (1-based, the file's page size).
    func damage(_ path: String, page: Int, offset: Int, byte: UInt8 = 0xFF, count: Int = 64) throws {
        let header = try FileProbe.shared.header(of: path)
        let pageSize = StoreFile.pageSize(fromHeader: header)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        try handle.seek(toOffset: UInt64((page - 1) * pageSize + offset))
        try handle.write(contentsOf: Data(repeating: byte, count: count))
    }

    @Test("preflight of a store cut short (SQLite cannot read its schema) reports a failed check saying so, 2, not a 65 whose hint is to run preflight")
    func preflightOfATruncatedStore() throws {
        let folder = try TempFolder()
        let store = try checkpointed(folder)
        let data = try Data(contentsOf: URL(fileURLWithPath: store))
        let cut = folder.file("Cut.sqlite")
        try data.prefix(data.count / 2 + 100).write(to: URL(fileURLWithPath: cut))

        let result = try ChildProcess.run(Binaries.storectl, ["preflight", "--full", cut])
        #expect(result.status == 2, "\(result.stdout) \(result.stderr)")
        #expect(result.stdout.contains("fail  store.readable") && result.stdout.contains("the file is cut short"), "\(result.stdout)")
        #expect(!result.stderr.contains("preflight --full"), "\(result.stderr)")
        let json = try ChildProcess.run(Binaries.storectl, ["preflight", cut, "--json"])
        #expect(json.status == 2 && json.stdout.contains("\"store.readable\""), "\(json.stdout) \(json.stderr)")

        // A file that is not SQLite at all stays bad input.
        let text = folder.file("notes.txt")
        try Data("not a database, only text\n".utf8).write(to: URL(fileURLWithPath: text))
        #expect(try ChildProcess.run(Binaries.storectl, ["preflight", text]).status == 65)
    }

    @Test("preflight --full of a store whose table's root page is damaged, where SQLite's whole-file checks stop: table by table, that table named, the others read")
    func preflightTableByTable() throws {
        let folder = try TempFolder()
        let store = try checkpointed(folder)
        // Page 3 is Z_METADATA's root in this store: its b-tree header overwritten.
        try damage(store, page: 3, offset: 0)

        let result = try ChildProcess.run(Binaries.storectl, ["preflight", "--full", store])
        #expect(result.status == 2, "\(result.stdout) \(result.stderr)")
        #expect(result.stdout.contains("SQLite stopped on damage (database disk image is malformed); table by table: damaged: Z_METADATA, 7 other tables ok"), "\(result.stdout)")
        let json = try ChildProcess.run(Binaries.storectl, ["preflight", "--full", store, "--json"])
        let report = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any], "\(json.stdout)")
        let checks = report["checks"] as? [[String: Any]] ?? []
        for id in ["integrity.quick_check", "integrity.integrity_check"] {
            let check = try #require(checks.first { $0["id"] as? String == id }, "\(json.stdout)")
            #expect((check["figures"] as? [String: Any])?["damagedTables"] as? [String] == ["Z_METADATA"], "\(check)")
        }
    }

    @Test("preflight of a leaf page with damaged cell pointers: SQLite's messages one a line (it returns them as one row), counted as such")
    func preflightOneMessageALine() throws {
        let folder = try TempFolder()
        let store = try checkpointed(folder)
        // Page 20 is a leaf of ZITEM in this store: its cell pointers overwritten.
        try damage(store, page: 20, offset: 8)
        let json = try ChildProcess.run(Binaries.storectl, ["preflight", store, "--json"])
        #expect(json.status == 2, "\(json.stdout) \(json.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any], "\(json.stdout)")
        let check = try #require((report["checks"] as? [[String: Any]] ?? []).first { $0["id"] as? String == "integrity.quick_check" }, "\(json.stdout)")
        let details = check["details"] as? [String] ?? []
        #expect(details.count == 20 && details.allSatisfy { $0.hasPrefix("On tree page 20 cell ") && !$0.contains("\n") }, "\(details)")
        #expect(check["summary"] as? String == "20 problems (the first 20)", "\(check)")
    }

    @Test("diff of a store with a damaged page says the side is damaged, with a hint (65)")
    func diffOfADamagedStore() throws {
        let folder = try TempFolder()
        let store = try checkpointed(folder)
        let damaged = folder.file("Damaged.sqlite")
        try FileManager.default.copyItem(atPath: store, toPath: damaged)
        try damage(damaged, page: 20, offset: 8)
        let result = try ChildProcess.run(Binaries.storectl, ["diff", store, damaged])
        #expect(result.status == 65, "\(result.stdout) \(result.stderr)")
        #expect(result.stderr.contains("Damaged.sqlite is damaged: ") && result.stderr.contains("hint: `storectl preflight --full FILE`"), "\(result.stderr)")
    }

    @Test("restore --in-place of a store that is not there: 66, and no lock file left beside the missing store")
    func restoreInPlaceOfNothing() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let repo = try folder.repository("snaps", encrypted: true)
        let environment = ["STORECTL_PASSWORD_FILE": try folder.passwordFile()]
        let made = try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo, "--json"], environment: environment)
        let id = try #require(try JSONSerialization.jsonObject(with: Data(made.stdout.utf8)) as? [String: Any])["id"] as? String ?? ""
        let missing = folder.file("nope.sqlite")
        let result = try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, id, "--in-place", missing], environment: environment)
        #expect(result.status == 66 && result.stderr.contains("nothing was changed"), "\(result.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasPrefix("nope") } == [], "left beside it")
    }

    @Test("migrate --dry-run of a migration that fails on the copy: the plan, the failure, 2; the store unchanged")
    func rehearsalThatFails() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let repo = try folder.repository("snaps", encrypted: true)
        let migrations = folder.file("migrations")
        try FileManager.default.createDirectory(atPath: migrations, withIntermediateDirectories: false)
        try Data("ALTER TABLE ZITEM ADD COLUMN ZLABEL VARCHAR;".utf8).write(to: URL(fileURLWithPath: migrations + "/0001_label.sql"))
        try Data("INSERT INTO no_such_table VALUES (1);".utf8).write(to: URL(fileURLWithPath: migrations + "/0002_broken.sql"))
        let before = try StoreState.digest(store)
        let result = try ChildProcess.run(Binaries.storectl, ["migrate", store, "--migrations", migrations, "--repo", repo, "--dry-run"],
                                          environment: ["STORECTL_PASSWORD_FILE": try folder.passwordFile()])
        #expect(result.status == 2, "\(result.stdout) \(result.stderr)")
        // The file and statement that failed, named once.
        #expect(result.stdout.contains("plan for ") && result.stdout.contains("FAILS ON A COPY: 0002_broken.sql statement 1 of 1 (`INSERT INTO no_such_table VALUES (1);`): ")
                && result.stdout.contains("no such table: no_such_table") && !result.stdout.contains("0002_broken: 0002_broken"), "\(result.stdout)")
        // A failure in the checks file is named as one.
        try Data("SELEC 1;".utf8).write(to: URL(fileURLWithPath: migrations + "/0001_label.verify.sql"))
        try FileManager.default.removeItem(atPath: migrations + "/0002_broken.sql")
        let checks = try ChildProcess.run(Binaries.storectl, ["migrate", store, "--migrations", migrations, "--repo", repo, "--dry-run"],
                                          environment: ["STORECTL_PASSWORD_FILE": try folder.passwordFile()])
        #expect(checks.status == 2 && checks.stdout.contains("FAILS ON A COPY: 0001_label.verify.sql check 1 of 1 (`SELEC 1;`): ") && checks.stdout.contains("syntax error"),
                "\(checks.stdout) \(checks.stderr)")
        #expect(try StoreState.digest(store) == before)
    }

    @Test("a repository's config cut short is damaged (65, put a copy back), not \"not a repository: check --repo\"")
    func configCutShort() throws {
        let folder = try TempFolder()
        let repo = try folder.repository("snaps", encrypted: true)
        let config = repo + "/config"
        let data = try Data(contentsOf: URL(fileURLWithPath: config))
        try FileManager.default.removeItem(atPath: config)
        try data.prefix(data.count / 2).write(to: URL(fileURLWithPath: config))
        let result = try ChildProcess.run(Binaries.storectl, ["snapshot", "list", "--repo", repo], environment: ["STORECTL_PASSWORD_FILE": try folder.passwordFile()])
        #expect(result.status == 65 && result.stderr.contains("config is damaged") && result.stderr.contains("put back a copy"), "\(result.stderr)")
    }

    @Test("a prune whose data cannot be collected (an index is damaged) removes the records it was asked to and says so, and ends 65, not 0 (a scheduled prune looked healthy while nothing was freed); its dry run ends 0")
    func pruneWithDamagedIndex() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 500)
        let repo = try folder.repository("snaps")
        for k in 1...3 {
            let queue = try DatabaseQueue(path: store)
            try queue.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = ? WHERE Z_PK = 1", arguments: ["round \(k)"]) }
            try queue.close()
            #expect(try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo]).status == 0)
        }
        let index = try #require(FileManager.default.subpaths(atPath: repo + "/index")?.filter { !$0.hasPrefix(".") && FileSystem.kind(of: repo + "/index/" + $0) == .file }.sorted().first)
        let path = repo + "/index/" + index
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        for i in stride(from: bytes.count / 2, to: min(bytes.count, bytes.count / 2 + 16), by: 1) { bytes[i] ^= 0xFF }
        try FileManager.default.removeItem(atPath: path)
        try bytes.write(to: URL(fileURLWithPath: path))
        let dry = try ChildProcess.run(Binaries.storectl, ["snapshot", "prune", "--repo", repo, "--keep-last", "1", "--dry-run"])
        #expect(dry.status == 0 && dry.stdout.contains("no data collected"), "\(dry.status) \(dry.stdout) \(dry.stderr)")
        let pruned = try ChildProcess.run(Binaries.storectl, ["snapshot", "prune", "--repo", repo, "--keep-last", "1"])
        #expect(pruned.status == 65, "\(pruned.status) \(pruned.stdout) \(pruned.stderr)")
        #expect(pruned.stdout.contains("removed 2") && pruned.stdout.contains("no data collected") && pruned.stdout.contains("repo repair"), "\(pruned.stdout)")
        let json = try ChildProcess.run(Binaries.storectl, ["snapshot", "prune", "--repo", repo, "--keep-last", "1", "--json"])
        #expect(json.status == 65 && json.stdout.contains("repo repair"), "\(json.status) \(json.stdout)")
        // Repaired, the prune collects and ends 0.
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "repair", "--repo", repo]).status == 0)
        let after = try ChildProcess.run(Binaries.storectl, ["snapshot", "prune", "--repo", repo, "--keep-last", "1"])
        #expect(after.status == 0 && after.stdout.contains("freed"), "\(after.status) \(after.stdout) \(after.stderr)")
        // A damaged record is listed under a header of its own (after the last store's group it
        // read as that store's), and counted apart.
        #expect(try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo]).status == 0)
        let records = (try FileManager.default.contentsOfDirectory(atPath: repo + "/snapshots")).filter { !$0.hasPrefix(".") }.sorted()
        let record = repo + "/snapshots/" + (try #require(records.first))
        var recordBytes = try Data(contentsOf: URL(fileURLWithPath: record))
        for i in 20..<36 where i < recordBytes.count { recordBytes[i] ^= 0xFF }
        try FileManager.default.removeItem(atPath: record)
        try recordBytes.write(to: URL(fileURLWithPath: record))
        let listed = try ChildProcess.run(Binaries.storectl, ["snapshot", "prune", "--repo", repo, "--keep-last", "1", "--dry-run"])
        let lines = listed.stdout.split(separator: "\n").map(String.init)
        let header = lines.firstIndex { $0.hasPrefix("damaged catalog entries") }, entry = lines.firstIndex { $0.contains("its catalog entry is damaged") }
        #expect(header != nil && entry != nil && header! < entry!, "\(listed.stdout)")
        #expect(listed.stdout.contains("(and 1 damaged)"), "\(listed.stdout)")
    }

    @Test("a prune on a repository whose volume is full cannot take its lock (74): it says the volume is full, what prune needs, and not to delete files in the repository by hand (it said only \"free space on the destination volume\", to an operator running the command that frees it)",
          .enabled(if: TempMount.isAvailable))
    func pruneOnAFullVolume() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 300)
        let mount = try #require(TempMount(kilobytes: 4096))
        let repo = mount.file("repo")
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", repo, "--insecure-no-encryption"]).status == 0)
        #expect(try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo]).status == 0)
        _ = try ChildProcess.run("/bin/sh", ["-c", "cat /dev/zero > '\(mount.file("filler"))' 2>/dev/null"])
        let pruned = try ChildProcess.run(Binaries.storectl, ["snapshot", "prune", "--repo", repo, "--keep-last", "1"])
        #expect(pruned.status == 74, "\(pruned.status) \(pruned.stderr)")
        #expect(pruned.stderr.contains("the repository's volume is full: snapshot prune cannot write its lock") && pruned.stderr.contains("Never delete files inside the repository"), "\(pruned.stderr)")
    }

    @Test("a prune on a nearly full volume whose thinning finds no room still removes the expired snapshots and collects (it removed nothing), ends 74 saying thinning found no room and what was removed; with room, the same prune thins", .enabled(if: TempMount.isAvailable))
    func pruneThinningWithoutRoom() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 2000)
        let mount = try #require(TempMount(kilobytes: 24 * 1024))
        let repo = mount.file("repo")
        let env = ["STORECTL_PASSWORD_FILE": try folder.passwordFile()]
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", repo, "--insecure-no-encryption"]).status == 0)
        let first = try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo, "--json"], environment: env)
        let expired = try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(first.stdout.utf8)).id
        // Chains of points, a new base every 2 s while the app writes: the older ones are thinned.
        let follower = try ChildProcess.Running(Binaries.storectl, ["replicate", store, "--repo", repo, "--quiet", "--base-interval", "2s", "--sync-interval", "200ms",
                                                                    "--merge-interval", "0", "--heartbeat", "0"], environment: env)
        usleep(1_000_000)
        #expect(try ChildProcess.run(Binaries.lab, ["churn", store, "--log", folder.file("churn.log"), "--duration", "6"]).status == 0)
        usleep(1_000_000)
        follower.signal(SIGTERM)
        #expect(follower.wait().status == 0)
        #expect(try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo], environment: env).status == 0)
        // A few KiB left: the lock fits, a thinned segment does not.
        var space = statvfs()
        #expect(statvfs(mount.path, &space) == 0)
        let free = Int(space.f_bavail) * Int(space.f_frsize)
        #expect(FileManager.default.createFile(atPath: mount.file("filler"), contents: Data(count: max(0, free - 8192))))
        let args = ["snapshot", "prune", "--repo", repo, "--keep-last", "1", "--keep-points", "1s", "--keep-point-minutes", "1d", "--keep-point-bases", "1d"]
        let full = try ChildProcess.run(Binaries.storectl, args, environment: env)
        #expect(full.status == 74 && full.stderr.contains("thinning points found no room") && full.stderr.contains("this prune removed 1 snapshot (\(expired))")
                && !full.stderr.contains("once the repository answers"), "\(full.status) \(full.stderr)")
        let listed = try ChildProcess.run(Binaries.storectl, ["snapshot", "list", "--repo", repo], environment: env)
        #expect(!listed.stdout.contains(expired), "\(listed.stdout)")
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "check", "--repo", repo, "--read-data"], environment: env).status == 0)
        try FileManager.default.removeItem(atPath: mount.file("filler"))
        let roomy = try ChildProcess.run(Binaries.storectl, args, environment: env)
        #expect(roomy.status == 0, "\(roomy.stdout) \(roomy.stderr)")
        let points = try ChildProcess.run(Binaries.storectl, ["snapshot", "list", "--repo", repo, "--points"], environment: env)
        #expect(points.stdout.contains("thinned"), "\(points.stdout)")
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "check", "--repo", repo, "--read-data"], environment: env).status == 0)
    }

    @Test("a misspelt policy section is the first problem named, with the name it was meant to be; --at with an unknown unit reads as a sentence")
    func mistakesNamedFirst() throws {
        let folder = try TempFolder()
        _ = try makeStore(folder)
        let policy = folder.file("policy.toml")
        try Data("""
            [store]
            path = "Tasks.sqlite"

            [schedule]
            snapshot = "hourly"

            [snapshto]
            repository = "snaps"
            """.utf8).write(to: URL(fileURLWithPath: policy))
        let result = try ChildProcess.run(Binaries.storectl, ["policy", "check", policy])
        #expect(result.status == 65, "\(result.stdout) \(result.stderr)")
        let problems = (result.stdout + result.stderr).split(separator: "\n").filter { $0.contains("policy.toml:") || $0.contains(": missing") || $0.contains("unknown key") }
        #expect(problems.first?.contains("snapshto: unknown key; did you mean \"snapshot\"?") == true, "\(result.stdout) \(result.stderr)")

        let at = try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", folder.file("snaps"), "--at", "-5x", "--to", folder.file("r.sqlite")])
        #expect(at.status == 64 && at.stderr.contains("--at -5x has an unknown unit 'x'"), "\(at.stderr)")
    }
}

/// The second helper's session (interruptions, the kill switch, busy stores, full disks, jobs).
@Suite("stops, locks and kill switches, as a new operator meets them", .onTestThreads)
struct OperatorStopTests {
    func purgePolicy(_ folder: TempFolder, store: String) throws -> String {
        let path = folder.file("purge.toml")
        try Data("""
            [store]
            path = "\(store)"
            busy_timeout = "1s"
            [[purge]]
            name = "items"
            entity = "Item"
            deleted_flag = "ZISDELETED"
            deleted_at = "ZDELETEDAT"
            time_format = "coredata"
            retention = "30d"
            """.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test("replicate stopped by SIGTERM while its first base is made: a stop (0) that says nothing is protected yet, not \"never followed\" (143); the status file still says it is not followed")
    func stoppedDuringFirstBase() throws {
        let folder = try TempFolder("storectl-replicate")
        let store = try makeStore(folder, items: 60_000)
        let repo = try folder.repository("repo")
        // zstd 19 makes the base take seconds; SIGTERM comes while it is made: once the trace shows
        // the base begun (its spill file made), not after a fixed time (a loaded machine had not
        // begun it, or installed its handlers, 700 ms in).
        let trace = folder.file("trace")
        let follower = try ChildProcess.Running(Binaries.storectl, ["replicate", store, "--repo", repo, "--level", "19", "--for", "60s",
                                                                    "--status-file", folder.file("status.json")],
                                                environment: ["STORECTL_PASSWORD_FILE": try folder.passwordFile(), "STORECTL_FAULT_TRACE": trace,
                                                              // (the base through a scratch copy, whose making the trace shows, however busy the page cache)
                                                              "STORECTL_SPILL_CACHE": "on", "TMPDIR": folder.path])
        let begun = Date().addingTimeInterval(60)
        while Date() < begun, !((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").contains("snapshot.spill.create#1") { usleep(20_000) }
        #expect(((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").contains("snapshot.spill.create#1") && !((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").contains("pack.write.rename"),
                "the base did not begin within 60 s, or was written before the signal")
        follower.signal(SIGTERM)
        let result = follower.wait()
        #expect(result.status == 0, "\(result.status) \(result.stderr)")
        #expect(result.stderr.contains("stopped by SIGTERM while its first base was made: nothing of it is protected yet") && !result.stderr.contains("never followed"),
                "\(result.stderr)")
        let status = try ChildProcess.run(Binaries.storectl, ["replicate", "status", "--status-file", folder.file("status.json"), "--repo", repo],
                                          environment: ["STORECTL_PASSWORD_FILE": try folder.passwordFile()])
        #expect(status.stdout.contains("NOT FOLLOWED: stopped by SIGTERM while its first base was made"), "\(status.stdout)")
    }

    @Test("purge against a store another process holds locked: 75 whose hint names the policy's busy_timeout (purge has no --timeout)")
    func purgeBusyHint() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, journalMode: "delete")
        let policy = try purgePolicy(folder, store: store)
        let ready = folder.file("held")
        let holder = try ChildProcess.Running(Binaries.lab, ["hold", store, "--mode", "exclusive", "--seconds", "6", "--ready-file", ready])
        defer { holder.signal(SIGTERM); _ = holder.wait() }
        var waited = 0
        while FileSystem.kind(of: ready) == .missing, waited < 200 { usleep(25_000); waited += 1 }
        let result = try ChildProcess.run(Binaries.storectl, ["purge", "--policy", policy])
        #expect(result.status == 75, "\(result.status) \(result.stderr)")
        #expect(result.stderr.contains("busy_timeout (1s) in \(policy)") && !result.stderr.contains("--timeout"), "\(result.stderr)")
    }

    @Test("purge with the kill switch already thrown: says nothing was changed (not \"finished batches are committed\"); --json names the switch plainly")
    func purgeStoppedBeforeABatch() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let policy = try purgePolicy(folder, store: store)
        #expect(try ChildProcess.run(Binaries.storectl, ["killswitch", "engage", store]).status == 0)
        let result = try ChildProcess.run(Binaries.storectl, ["purge", "--policy", policy])
        #expect(result.stderr.contains("no batch ran: nothing was changed") && !result.stderr.contains("finished batches are committed"), "\(result.status) \(result.stderr)")
        let json = try ChildProcess.run(Binaries.storectl, ["purge", "--policy", policy, "--json"])
        #expect(json.stdout.contains("\"killSwitch\" : \"\(store).storectl-killswitch\"") && !json.stdout.contains("_0"), "\(json.stdout)")
        // An ending recorded before this change (the compiler's form) still reads.
        let old = try JSON.decoder().decode(StopReason.self, from: Data(#"{"killSwitch":{"_0":"/s.storectl-killswitch"}}"#.utf8))
        #expect(old == .killSwitch("/s.storectl-killswitch"))
        #expect(try JSON.decoder().decode(StopReason.self, from: try JSON.encoder().encode(StopReason.signal(15))) == .signal(15))
    }

    @Test("recover of a folder where it removed a dead run's temporary file says so, not also \"nothing to recover\"")
    func recoverSaysWhatItDid() throws {
        let folder = try TempFolder()
        let stale = folder.file(".b.sqlite.tmp-storectl-999999-dead")
        try Data("x".utf8).write(to: URL(fileURLWithPath: stale))
        let target = folder.file("b.sqlite")
        let result = try ChildProcess.run(Binaries.storectl, ["recover", target])
        #expect(result.stdout.contains("removed 1 temporary file of dead storectl runs") && !result.stdout.contains("nothing to recover"), "\(result.status) \(result.stdout) \(result.stderr)")
    }
}
