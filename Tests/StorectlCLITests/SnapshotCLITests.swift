import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

@Suite("storectl snapshot, end to end", .onTestThreads)
struct SnapshotCLITests {
    @Test("a store nothing was committed to since its last snapshot: the next snapshot reads no page (same map, same check), restores to the same content; a commit or a changed external file takes the full path again; so does an app that closes the store between snapshots, and a write whose file time was put back")
    func unchangedStore() throws {
        let folder = try TempFolder()
        var options = SampleStore.Options()
        options.items = 2_000
        options.externalFiles = 2
        let store = try SampleStore.create(at: folder.file("Tasks.sqlite"), options: options).path
        let repo = try folder.repository("repo")
        // An app keeps the store open (its -shm stays, as under a running app).
        let app = try DatabaseQueueHolder(store)
        func create() throws -> SnapshotCreate.Result {
            let run = try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo, "--json"])
            #expect(run.status == 0, "\(run.stderr)")
            return try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(run.stdout.utf8))
        }
        // The store was just written, and its -wal holds no frame: a state seen within 100 ms of
        // the file's last write is not trusted later (a write in the same clock tick would not show).
        Thread.sleep(forTimeInterval: 0.15)
        let read = try create()
        #expect(!read.unchanged, "the first snapshot of the store reads it")
        let reused = try create()
        #expect(reused.unchanged && reused.addedBytes == 0 && reused.parent == read.id)
        let restored = try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, reused.id, "--to", folder.file("copy.sqlite")])
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(try StoreState.digest(folder.file("copy.sqlite"), journalMode: false) == (try StoreState.digest(store, journalMode: false)))
        try app.write("UPDATE ZITEM SET ZTITLE = 'changed' WHERE Z_PK = 3")
        #expect(try !create().unchanged, "a commit since")
        #expect(try create().unchanged)
        let external = StoreFile(unchecked: store).externalDataPath
        let file = try #require(FileManager.default.subpaths(atPath: external)?.sorted().first)
        try Data("other bytes".utf8).write(to: URL(fileURLWithPath: (external as NSString).appendingPathComponent(file)))
        #expect(try !create().unchanged, "an external-data file changed")
        #expect(try create().unchanged)
        // The app closes (its -wal and -shm go), another process commits and closes, the app opens
        // again: the wal-index is new and empty as before, but the database file changed.
        try app.close()
        let other = try DatabaseQueue(path: store)
        try other.inDatabase { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'while closed' WHERE Z_PK = 4") }
        try other.close()
        let again = try DatabaseQueueHolder(store)
        #expect(try !create().unchanged, "committed while the app was closed")
        try again.close()
        // An app that closes the store when idle (its -wal and -shm go each time): once its last
        // write is 100 ms old, a snapshot records the file's state, and the next one reuses it,
        // also after the app opened and closed the store again without writing.
        let closed = StoreFile(unchecked: store)
        #expect(FileSystem.kind(of: closed.walPath) == .missing, "the app's close removed its -wal")
        Thread.sleep(forTimeInterval: 0.2)
        _ = try create()   // reads the store unless its parent already saw this state
        #expect(try create().unchanged, "nothing was committed since, and no frame is in any -wal")
        let reader = try DatabaseQueue(path: store)
        _ = try reader.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM") }
        try reader.close()
        #expect(FileSystem.kind(of: closed.walPath) == .missing)
        #expect(try create().unchanged, "opened and closed without a write")
        let writer = try DatabaseQueue(path: store)
        try writer.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'closed again' WHERE Z_PK = 5") }
        try writer.close()
        #expect(FileSystem.kind(of: closed.walPath) == .missing, "the write went into the file at close")
        let changed = try create()
        #expect(!changed.unchanged, "a commit while no one else had the store open")
        let copy = folder.file("after-close.sqlite")
        #expect(try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, changed.id, "--to", copy]).status == 0)
        #expect(try DatabaseQueue(path: copy).read { try String.fetchOne($0, sql: "SELECT ZTITLE FROM ZITEM WHERE Z_PK = 5") } == "closed again")
        // A write whose file time is put back (`touch -d`, a copy that keeps times): the size and
        // the modification time are as before, the status change time is not (it was "unchanged,
        // no page read" and held the old title: found by a helper trying it as a new user).
        Thread.sleep(forTimeInterval: 0.2)
        _ = try create()
        #expect(try create().unchanged)
        var before = stat()
        #expect(stat(store, &before) == 0)
        let backdated = try DatabaseQueue(path: store)
        try backdated.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'time put back' WHERE Z_PK = 5") }
        try backdated.close()
        var times = [before.st_atim, before.st_mtim]
        #expect(utimensat(AT_FDCWD, store, &times, 0) == 0)
        var after = stat()
        #expect(stat(store, &after) == 0 && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec && after.st_size == before.st_size)
        Thread.sleep(forTimeInterval: 0.2)
        let putBack = try create()
        #expect(!putBack.unchanged, "written, its time put back")
        let backdatedCopy = folder.file("time-put-back.sqlite")
        #expect(try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, putBack.id, "--to", backdatedCopy]).status == 0)
        #expect(try DatabaseQueue(path: backdatedCopy).read { try String.fetchOne($0, sql: "SELECT ZTITLE FROM ZITEM WHERE Z_PK = 5") } == "time put back")
    }

    @Test("a first snapshot of a live store holds the app's -wal only while it copies the pages: the app's TRUNCATE checkpoint succeeds while the snapshot still packs (not so when it streams from the read transaction, as with no room for the scratch copy); each restores to the store's content and leaves no scratch copy")
    func firstSnapshotFreesTheWal() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 60_000)
        let app = try DatabaseQueue(path: store)   // keeps the -wal, as a running app does
        defer { try? app.close() }
        try app.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = ZTITLE || '+' WHERE Z_PK % 7 = 0") }
        // The app's commits below set one title to A or B (a commit that changes nothing writes nothing).
        var contents: Set<String> = []
        for title in ["A", "B"] {
            try app.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = ? WHERE Z_PK = 1", arguments: [title]) }
            contents.insert(try StoreState.digest(store, journalMode: false))
        }
        /// A first snapshot (zstd level 19: packing takes seconds) while the app commits and asks for a TRUNCATE checkpoint every 10 ms: the share of the
        /// snapshot's time that was left after the last one refused (0: none was).
        func snapshot(_ label: String, _ environment: [String: String]) throws -> Double {
            let repo = try folder.repository(label)
            let started = Date()
            let running = try ChildProcess.Running(Binaries.storectl, ["snapshot", "create", store, "--repo", repo, "--level", "19", "--json"],
                                                   environment: ProcessInfo.processInfo.environment.merging(environment) { $1 })
            // What counts is the last refusal: the read transaction held the -wal until then.
            // (The first success after the first refusal was measured before: a brief read
            // before the main one, on a loaded machine, let a checkpoint through at the start,
            // and a streamed snapshot looked as if it had let the -wal go at once.)
            var held = false   // a checkpoint was refused: the snapshot's read transaction began
            var lastRefused: Date?
            var title = "A"
            while running.isRunning {
                title = title == "A" ? "B" : "A"
                try app.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = ? WHERE Z_PK = 1", arguments: [title]) }
                let busy = try app.writeWithoutTransaction { try Int.fetchOne($0, sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
                if busy != 0, running.isRunning {
                    held = true
                    lastRefused = Date()
                }
                usleep(10_000)
            }
            #expect(held, "\(label): no checkpoint was ever refused (the snapshot's read was not seen)")
            let result = running.wait()
            let ended = Date()
            #expect(result.status == 0, "\(label): \(result.stderr)")
            let id = try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(result.stdout.utf8)).id
            let copy = folder.file("\(label).sqlite")
            #expect(try storectl("snapshot", "restore", "--repo", repo, id, "--to", copy).status == 0)
            #expect(contents.contains(try StoreState.digest(copy, journalMode: false)), "\(label): the restored content")
            return lastRefused.map { ended.timeIntervalSince($0) / ended.timeIntervalSince(started) } ?? 0
        }
        let scratch = folder.file("scratch")
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: false)
        // The copy kept in the page cache (it fits), and written back as it is made (a large one).
        for cache in ["on", "off"] {
            let spilled = try snapshot("spilled-\(cache)", ["TMPDIR": scratch, "STORECTL_SPILL_CACHE": cache])
            #expect(spilled > 0.5, "cache \(cache): the -wal was held for more than half the snapshot: \(spilled) of it left when a checkpoint got through")
            #expect(try FileManager.default.contentsOfDirectory(atPath: scratch).isEmpty, "the scratch copy is removed")
        }
        let streamed = try snapshot("streamed", ["TMPDIR": scratch, "STORECTL_TEST_NO_SPILL": "1"])
        #expect(streamed < 0.3, "the read transaction holds the -wal while the pages are packed: \(streamed) of it left")
        if let small = TempMount(kilobytes: 1024) {
            let direct = try snapshot("no-room", ["TMPDIR": small.path])
            #expect(direct < 0.3, "no room for the copy: streamed as before, \(direct) left")
            #expect(try FileManager.default.contentsOfDirectory(atPath: small.path).isEmpty)
        }
        // A misspelt setting is a usage error before anything is read, not the memory rule in silence.
        let misspelt = try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", try folder.repository("misspelt")],
                                            environment: ProcessInfo.processInfo.environment.merging(["STORECTL_SPILL_CACHE": "yes"]) { $1 })
        #expect(misspelt.status == 64 && misspelt.stderr.contains("STORECTL_SPILL_CACHE=yes: it takes on or off"), "\(misspelt.status) \(misspelt.stderr)")
    }

    @Test("repo init, then create, list, show, verify, restore, prune: output and exit statuses")
    func tour() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let repo = folder.file("repo")
        // Encrypted: the password from STORECTL_PASSWORD_FILE for every command.
        let environment = ["STORECTL_PASSWORD_FILE": try folder.passwordFile()]
        func cli(_ arguments: String...) throws -> ChildProcess.Result { try ChildProcess.run(Binaries.storectl, arguments, environment: environment) }
        let missing = try cli("snapshot", "create", store, "--repo", repo)
        #expect(missing.status == 66 && missing.stderr.contains("storectl repo init --repo \(repo)"), "no implicit repository")
        let made = try cli("repo", "init", "--repo", repo)
        #expect(made.status == 0 && made.stdout.hasPrefix("created repository \(repo): format 2, encrypted (AES-256-GCM)"), "\(made.stdout)\(made.stderr)")
        #expect(try cli("repo", "init", "--repo", repo).status == 73, "never over an existing repository")
        // The key the child wrote costs what the tests ask for (STORECTL_TEST_KDF_N, 2^10), not 2^15.
        let keyNames = try FileManager.default.contentsOfDirectory(atPath: repo + "/keys")
        #expect(keyNames.count == 1)
        let key = try JSON.decoder().decode(KeyFile.self, from: Data(contentsOf: URL(fileURLWithPath: repo + "/keys/" + (keyNames.first ?? ""))))
        #expect(key.kdf.n == (ProcessInfo.processInfo.environment["STORECTL_TEST_KDF_N"].flatMap(Int.init) ?? 1 << 10))
        let created = try cli("snapshot", "create", store, "--repo", repo, "--tag", "nightly")
        #expect(created.status == 0, "\(created.stderr)")
        #expect(created.stdout.hasPrefix("snapshot 2") && created.stdout.contains("quick_check ok") && created.stdout.contains("tags nightly"))
        #expect(created.stderr.isEmpty)

        let list = try cli("snapshot", "list", "--repo", repo)
        #expect(list.status == 0)
        #expect(list.stdout.hasPrefix("ID  "))
        #expect(list.stdout.contains("Tasks.sqlite") && list.stdout.contains("nightly") && list.stdout.contains("never"))
        let rows = try JSON.decoder().decode([SnapshotSummary].self, from: Data(try cli("snapshot", "list", "--repo", repo, "--json").stdout.utf8))
        let id = try #require(rows.first?.id)

        let show = try cli("snapshot", "show", "--repo", repo, String(id.prefix(20)))
        #expect(show.status == 0 && show.stdout.contains("snapshot   \(id)") && show.stdout.contains("Category"))

        let verify = try cli("snapshot", "verify", "--repo", repo, "--all")
        #expect(verify.status == 0 && verify.stdout.hasPrefix("ok      \(id)"))
        #expect(try cli("snapshot", "verify", "--repo", repo).status == 64, "ids or --all")
        // A TMPDIR that is not there is named as where the scratch folder came from.
        var noTemp = environment
        noTemp["TMPDIR"] = folder.file("no-such-tmp")
        let lost = try ChildProcess.run(Binaries.storectl, ["snapshot", "verify", "--repo", repo, id], environment: noTemp)
        #expect(lost.status == 73 && lost.stderr.contains("the scratch folder TMPDIR names") && lost.stderr.contains("set TMPDIR"), "\(lost.status) \(lost.stderr)")

        let restored = try cli("snapshot", "restore", "--repo", repo, id, "--to", folder.file("copy.sqlite"))
        #expect(restored.status == 0 && restored.stdout.hasPrefix("restored \(id) to \(folder.file("copy.sqlite"))"))
        #expect(try cli("snapshot", "restore", "--repo", repo, id, "--to", "a", "--in-place", "b").status == 64)
        // A stale -wal where the restored store goes (no database beside it) is kept aside, and said so.
        let stale = folder.file("stale.sqlite")
        try Data("left by something else".utf8).write(to: URL(fileURLWithPath: stale + "-wal"))
        let past = try cli("snapshot", "restore", "--repo", repo, id, "--to", stale, "--json")
        #expect(past.status == 0, "\(past.stderr)")
        let kept = try JSON.decoder().decode(SnapshotRestore.Result.self, from: Data(past.stdout.utf8)).keptUnexpected
        #expect(kept.count == 1 && kept.first?.hasPrefix(stale + ".unexpected-") == true && kept.first?.hasSuffix("-wal") == true
                && FileSystem.kind(of: kept.first ?? "") == .file && FileSystem.kind(of: stale + "-wal") == .missing, "\(kept)")
        try FileManager.default.removeItem(atPath: stale)
        try Data("left again".utf8).write(to: URL(fileURLWithPath: stale + "-wal"))
        let said = try cli("snapshot", "restore", "--repo", repo, id, "--to", stale)
        #expect(said.status == 0 && said.stdout.contains("files found in the way (no store's) were kept at \(stale).unexpected-"), "\(said.stdout)")
        let inPlace = try cli("snapshot", "restore", "--repo", repo, id, "--in-place", store, "--json")
        #expect(inPlace.status == 0)
        let result = try JSON.decoder().decode(SnapshotRestore.Result.self, from: Data(inPlace.stdout.utf8))
        #expect(result.safetySnapshot != nil)
        // Its source passed quick_check when the snapshot was taken, and every restored page is
        // checked against its id: not checked a second time, unless --check.
        #expect(result.databaseCheck == "quick_check when the snapshot was taken", "\(result.databaseCheck)")
        let checked = try cli("snapshot", "restore", "--repo", repo, id, "--to", folder.file("checked.sqlite"), "--check", "--json")
        #expect(checked.status == 0, "\(checked.stderr)")
        #expect(try JSON.decoder().decode(SnapshotRestore.Result.self, from: Data(checked.stdout.utf8)).databaseCheck == "quick_check of the restored database")

        let dry = try cli("snapshot", "prune", "--repo", repo, "--keep-tag", "nightly", "--dry-run")
        #expect(dry.status == 0 && dry.stdout.contains("keep   \(id)  tagged nightly") && dry.stdout.contains("would keep"))
        // The restore in place's safety snapshot is kept a week whatever the rules; --keep-safety 0 lets the rules decide.
        #expect(dry.stdout.contains("a safety snapshot (pre-restore) younger than 7d"), "\(dry.stdout)")
        let empty = try cli("snapshot", "prune", "--repo", repo)
        #expect(empty.status == 64 && empty.stderr.contains("empty policy"))
        #expect(try cli("snapshot", "prune", "--repo", repo, "--keep-within", "30").status == 64)
        let pruned = try cli("snapshot", "prune", "--repo", repo, "--keep-tag", "nightly", "--keep-safety", "0")
        #expect(pruned.status == 0 && pruned.stdout.contains("kept 1, removed 1"))
        // The time it says is the command's, not its copy's: a password command that takes a
        // second (standing in for a stalled server) shows in it (it said 0.03s).
        let slow = try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo],
                                        environment: ["STORECTL_PASSWORD_COMMAND": "sleep 1.2; cat \(try folder.passwordFile())"])
        let slowSaid = slow.stdout.split(separator: ",").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
        #expect(slow.status == 0 && slowSaid.hasSuffix("s") && (Double(slowSaid.dropLast()) ?? 0) >= 1.2, "\(slow.stdout)\(slow.stderr)")
    }

    @Test("restore --in-place of another store's snapshot is refused (64) naming both stores and --store, before anything is done: the store's bytes unchanged, no safety snapshot; --store naming the snapshot's store lets it through, as does the same store reached through a symlinked folder; with no store there (--create) nothing is replaced and nothing is asked; this path snapshotted on another host needs --host too")
    func inPlaceOfAnotherStore() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let other = folder.file("Other.sqlite")
        let made = try ChildProcess.run(Binaries.lab, ["make-store", other, "--items", "300", "--journal-mode", "wal"])
        #expect(made.status == 0, "\(made.stderr)")
        let repo = folder.file("repo")
        let environment = ["STORECTL_PASSWORD_FILE": try folder.passwordFile()]
        func cli(_ arguments: String...) throws -> ChildProcess.Result { try ChildProcess.run(Binaries.storectl, arguments, environment: environment) }
        #expect(try cli("repo", "init", "--repo", repo).status == 0)
        let created = try cli("snapshot", "create", other, "--repo", repo, "--json")
        #expect(created.status == 0, "\(created.stderr)")
        let id = try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(created.stdout.utf8)).id
        func snapshots() throws -> Int { try JSON.decoder().decode([SnapshotSummary].self, from: Data(try cli("snapshot", "list", "--repo", repo, "--json").stdout.utf8)).count }
        let before = try Data(contentsOf: URL(fileURLWithPath: store))
        for live in [false, true] {
            let refused = live ? try cli("snapshot", "restore", "--repo", repo, id, "--in-place", store, "--live")
                               : try cli("snapshot", "restore", "--repo", repo, id, "--in-place", store)
            #expect(refused.status == 64 && refused.stderr.contains("\(id) is of \(other), not of \(store)") && refused.stderr.contains("nothing was changed")
                    && refused.stderr.contains("--store \(other)"), "\(refused.status) \(refused.stderr)")
        }
        // A prefix typed: the refusal names the whole id it found.
        let prefixed = try cli("snapshot", "restore", "--repo", repo, String(id.prefix(11)), "--in-place", store)
        #expect(prefixed.status == 64 && prefixed.stderr.contains("\(id) is of \(other)"), "\(prefixed.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: store)) == before && (try snapshots()) == 1, "refused before anything was done")
        // Named on purpose: it goes through (a safety snapshot of the replaced store first).
        let named = try cli("snapshot", "restore", "--repo", repo, id, "--in-place", store, "--store", other, "--json")
        #expect(named.status == 0, "\(named.stderr)")
        #expect(try DatabaseQueue(path: store).read { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM") } == 300)
        #expect(try snapshots() == 2)
        // The same store through a symlinked folder is the same store.
        let linked = folder.file("linked")
        try FileManager.default.createSymbolicLink(atPath: linked, withDestinationPath: folder.path)
        let again = try cli("snapshot", "create", other, "--repo", repo, "--json")
        let otherID = try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(again.stdout.utf8)).id
        let viaLink = try cli("snapshot", "restore", "--repo", repo, otherID, "--in-place", linked + "/Other.sqlite")
        #expect(viaLink.status == 0, "\(viaLink.stderr)")
        // No store there: nothing is replaced, nothing asked.
        let fresh = try cli("snapshot", "restore", "--repo", repo, id, "--in-place", folder.file("New.sqlite"), "--create")
        #expect(fresh.status == 0, "\(fresh.stderr)")
        // This path, snapshotted on another host (a shared repository): its --host too.
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare") else { return }
        let elsewhere = try ChildProcess.run("/usr/bin/unshare", ["-u", "/bin/sh", "-c", "hostname storectl-other-host && exec \"$0\" \"$@\"",
                                                                  Binaries.storectl, "snapshot", "create", store, "--repo", repo, "--json"], environment: environment)
        #expect(elsewhere.status == 0, "\(elsewhere.stderr)")
        let otherHostID = try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(elsewhere.stdout.utf8)).id
        let beforeHost = try Data(contentsOf: URL(fileURLWithPath: store))
        let hostRefused = try cli("snapshot", "restore", "--repo", repo, otherHostID, "--in-place", store)
        #expect(hostRefused.status == 64 && hostRefused.stderr.contains("is of \(store) on host storectl-other-host, not of \(store) on this host")
                && hostRefused.stderr.contains("--store \(store) --host storectl-other-host"), "\(hostRefused.status) \(hostRefused.stderr)")
        #expect(try cli("snapshot", "restore", "--repo", repo, otherHostID, "--in-place", store, "--store", store).status == 64, "--host is needed too")
        #expect(try Data(contentsOf: URL(fileURLWithPath: store)) == beforeHost)
        let hostNamed = try cli("snapshot", "restore", "--repo", repo, otherHostID, "--in-place", store, "--store", store, "--host", "storectl-other-host")
        #expect(hostNamed.status == 0, "\(hostNamed.stderr)")
    }

    @Test("format 2 on the command line: a wrong password 77, a plain repository says so on every command, repo check 2 on damage, stats, export, keys")
    func pagedCommands() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let password = try folder.passwordFile()
        func cli(_ arguments: String..., password file: String? = nil) throws -> ChildProcess.Result {
            try ChildProcess.run(Binaries.storectl, arguments, environment: ["STORECTL_PASSWORD_FILE": file ?? password])
        }
        let repo = folder.file("repo")
        #expect(try cli("repo", "init", "--repo", repo).status == 0)
        #expect(try cli("snapshot", "create", store, "--repo", repo).status == 0)
        try Data("wrong\n".utf8).write(to: URL(fileURLWithPath: folder.file("wrong")))
        let wrong = try cli("snapshot", "list", "--repo", repo, "--json", password: folder.file("wrong"))
        #expect(wrong.status == 77 && wrong.stderr.contains("wrong password") && wrong.stdout.contains("\"status\" : 77"))
        let noTerminal = try ChildProcess.run("/usr/bin/setsid", ["-w", Binaries.storectl, "snapshot", "list", "--repo", repo], environment: ["STORECTL_PASSWORD_FILE": ""])
        #expect(noTerminal.status == 64 && noTerminal.stderr.contains("no terminal"), "\(noTerminal.stderr)")
        let stats = try cli("repo", "stats", "--repo", repo)
        #expect(stats.status == 0 && stats.stdout.contains("format 2, encrypted") && stats.stdout.contains("pages"))
        let rows = try JSON.decoder().decode([SnapshotSummary].self, from: Data(try cli("snapshot", "list", "--repo", repo, "--json").stdout.utf8))
        let export = try cli("snapshot", "export", "--repo", repo, try #require(rows.first?.id), "--output", folder.file("s.tar.zst"))
        #expect(export.status == 0 && export.stdout.hasPrefix("exported snapshot"), "\(export.stderr)")
        try Data("second\n".utf8).write(to: URL(fileURLWithPath: folder.file("second")))
        #expect(try cli("key", "add", "--repo", repo, "--new-password-file", folder.file("second")).status == 0)
        #expect(try cli("key", "list", "--repo", repo).stdout.split(separator: "\n").count == 2)
        #expect(try cli("snapshot", "list", "--repo", repo, password: folder.file("second")).status == 0)
        // `key remove` by the start of an id: keys are added (each with its own password, a cheap
        // scrypt) until two ids start alike (at most 16 more); that start names both: 64, listing
        // them, nothing removed. A start naming one removes it, and the whole id is printed.
        var keys = RepositoryKeys.Options(location: repo, password: .file(password))
        keys.kdfN = 1 << 10
        func keyIDs() throws -> [String] { try RepositoryKeys.list(keys).map(\.id) }
        var shared: String?
        for n in 0..<16 where shared == nil {
            try Data("extra-\(n)\n".utf8).write(to: URL(fileURLWithPath: folder.file("extra-\(n)")))
            keys.newPassword = .file(folder.file("extra-\(n)"))
            _ = try RepositoryKeys.add(keys)
            shared = Dictionary(grouping: try keyIDs().map { String($0.prefix(1)) }, by: { $0 }).first { $0.value.count > 1 }?.key
        }
        let start = try #require(shared)
        let keysBefore = try keyIDs()
        let ambiguous = try cli("key", "remove", "--repo", repo, start.uppercased())
        #expect(ambiguous.status == 64 && ambiguous.stderr.contains("starts") && keysBefore.filter { $0.hasPrefix(start) }.allSatisfy { ambiguous.stderr.contains($0) },
                "\(ambiguous.status) \(ambiguous.stderr)")
        #expect(try keyIDs() == keysBefore, "an ambiguous start removes nothing")
        let current = try #require(try RepositoryKeys.list(keys).first { $0.current }?.id)
        let unique = try #require(keysBefore.last { $0 != current })
        let removed = try cli("key", "remove", "--repo", repo, String(unique.prefix(8)).uppercased())
        let keysAfter = try keyIDs()
        #expect(removed.status == 0 && removed.stdout == "removed key \(unique)\n" && !keysAfter.contains(unique), "\(removed.stdout)\(removed.stderr)")

        let plain = folder.file("plain")
        #expect(try cli("repo", "init", "--repo", plain, "--insecure-no-encryption").status == 0)
        for arguments in [["snapshot", "create", store, "--repo", plain], ["snapshot", "list", "--repo", plain], ["repo", "check", "--repo", plain]] {
            let result = try ChildProcess.run(Binaries.storectl, arguments)
            #expect(result.status == 0 && result.stderr.contains("warning: the repository \(plain) is NOT encrypted"), "\(arguments): \(result.stderr)")
        }
        let pack = try #require(FileManager.default.subpaths(atPath: plain + "/data")?.first { $0.count > 10 })
        var data = try Data(contentsOf: URL(fileURLWithPath: plain + "/data/" + pack))
        data[data.count / 2] ^= 0xFF
        try data.write(to: URL(fileURLWithPath: plain + "/data/" + pack))
        let damaged = try ChildProcess.run(Binaries.storectl, ["repo", "check", "--repo", plain, "--read-data"])
        #expect(damaged.status == 2 && damaged.stdout.contains("PROBLEM") && damaged.stdout.contains(pack.suffix(64)), "\(damaged.stdout)")
        #expect(try ChildProcess.run(Binaries.storectl, ["snapshot", "verify", "--repo", plain, "--all"]).status == 65)
    }

    @Test("a damaged snapshot: verify exits 65 naming it; an unknown id 66; not a repository 65")
    func errors() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let repo = try folder.repository()
        #expect(try storectl("snapshot", "create", store, "--repo", repo).status == 0)
        let pack = try #require(FileManager.default.subpaths(atPath: repo + "/data")?.first { $0.count > 10 })
        let path = repo + "/data/" + pack
        var data = try Data(contentsOf: URL(fileURLWithPath: path))
        data[data.count / 3] ^= 0xFF
        try data.write(to: URL(fileURLWithPath: path))
        let verify = try storectl("snapshot", "verify", "--repo", repo, "--all")
        #expect(verify.status == 65)
        #expect(verify.stdout.hasPrefix("DAMAGED 2"))
        #expect(try storectl("snapshot", "list", "--repo", repo).stdout.contains("FAILED"))
        #expect(try storectl("snapshot", "show", "--repo", repo, "20000101T000000Z").status == 66)
        #expect(try storectl("snapshot", "list", "--repo", folder.path).status == 65)
    }

    @Test("a pack verify cannot read stops it there: the snapshots checked before keep their outcomes (text and one JSON array), the one it stopped at is NOT CHECKED (not damaged) with what was not reached, and the exit is the read's status, not 65")
    func unreadablePackStopsVerify() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let repo = try folder.repository()
        func packs() -> Set<String> { Set((FileManager.default.subpaths(atPath: repo + "/data") ?? []).filter { $0.count > 10 }) }
        func create() throws -> String {
            let run = try storectl("snapshot", "create", store, "--repo", repo, "--json")
            #expect(run.status == 0, "\(run.stderr)")
            return try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(run.stdout.utf8)).id
        }
        let older = try create()
        let first = packs()
        let app = try DatabaseQueue(path: store)
        try app.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = ZTITLE || '!' WHERE Z_PK % 3 = 0") }
        try app.close()
        let newer = try create()
        let added = try #require(packs().subtracting(first).first, "the second snapshot wrote a pack")
        // The newer snapshot's own pack is there but cannot be read (read(2) fails: it is a
        // folder now); the older one does not use it.
        let path = repo + "/data/" + added
        try FileManager.default.removeItem(atPath: path)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        let json = try storectl("snapshot", "verify", "--repo", repo, older, newer, "--json")
        #expect(json.status == 66, "the read's status: \(json.status) \(json.stderr)")
        let outcomes = try JSON.decoder().decode([SnapshotVerify.Outcome].self, from: Data(json.stdout.utf8))
        #expect(outcomes.count == 2 && outcomes[0].id == older && outcomes[0].ok && outcomes[0].status == nil, "\(json.stdout)")
        #expect(outcomes.count == 2 && !outcomes[1].ok && outcomes[1].status == 66 && outcomes[1].problem?.contains(added.components(separatedBy: "/").last ?? added) == true, "\(json.stdout)")
        let text = try storectl("snapshot", "verify", "--repo", repo, older, newer)
        let lines = text.stdout.split(separator: "\n")
        #expect(text.status == 66 && lines.count == 2 && lines[0].hasPrefix("ok      \(older)") && lines[1].hasPrefix("NOT CHECKED \(newer): "), "\(text.stdout)")
        #expect(!text.stdout.contains("DAMAGED"), "a pack that cannot be read is not called damaged")
        // --all (newest first) stops at once, naming what it did not reach.
        let all = try storectl("snapshot", "verify", "--repo", repo, "--all")
        #expect(all.status == 66 && all.stdout.hasPrefix("NOT CHECKED \(newer): ") && all.stdout.contains("not checked: 1 more snapshot and the points"), "\(all.stdout)")
        // Damage found before a stop is 65: the damage is what must be acted on; both are named.
        let damaged = SnapshotVerify.Outcome(id: "a", ok: false, problem: "a page differs", seconds: 0)
        let stopped = SnapshotVerify.Outcome(id: "b", ok: false, problem: "server unreachable", seconds: 0, status: 74)
        let ok = SnapshotVerify.Outcome(id: "c", ok: true, seconds: 0)
        let both = SnapshotVerify.ending(of: [damaged, stopped])
        #expect(both.status == .badData && both.error?.message.contains("could not check snapshot b: server unreachable") == true)
        #expect(SnapshotVerify.ending(of: [ok, stopped]).status == .ioError)
        #expect(SnapshotVerify.ending(of: [ok]).status == .ok)
        // Checked, not recorded: the status of what stopped the record (74 unless it said otherwise).
        var unrecorded = ok
        unrecorded.unrecorded = "the repository's folder is gone"
        #expect(SnapshotVerify.ending(of: [unrecorded]).status == .ioError)
        unrecorded.unrecordedStatus = 66
        #expect(SnapshotVerify.ending(of: [ok, unrecorded]).status == .noInput)
    }

    @Test("verify with no room left for the \"last verified\" record: the snapshot is called ok and NOT RECORDED (74), not NOT CHECKED; with room, it is recorded", .enabled(if: TempMount.isAvailable))
    func verifiedButNotRecorded() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let mount = try #require(TempMount(kilobytes: 4096))
        let repo = try RepositoryInit.run(.init(location: mount.file("repo"), encrypted: false, password: .file(try folder.passwordFile()))).location
        let created = try storectl("snapshot", "create", store, "--repo", repo, "--json")
        #expect(created.status == 0, "\(created.stderr)")
        let id = try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(created.stdout.utf8)).id
        // One page left: the run's (shared) lock object fits, the record after the check does not.
        let spare = mount.file("spare"), filler = mount.file("filler")
        try Data(count: 4096).write(to: URL(fileURLWithPath: spare))
        _ = try ChildProcess.run("/bin/sh", ["-c", "cat /dev/zero > '\(filler)' 2>/dev/null"])
        try FileManager.default.removeItem(atPath: spare)
        let full = try storectl("snapshot", "verify", "--repo", repo, id)
        #expect(full.status == 74 && full.stdout.hasPrefix("ok      \(id)") && full.stdout.contains("NOT RECORDED as verified: ")
                && full.stdout.contains("no space left"), "\(full.status) \(full.stdout) \(full.stderr)")
        #expect(!full.stdout.contains("NOT CHECKED") && !FileManager.default.fileExists(atPath: repo + "/verified/\(id).json"))
        let json = try storectl("snapshot", "verify", "--repo", repo, id, "--json")
        let outcomes = try JSON.decoder().decode([SnapshotVerify.Outcome].self, from: Data(json.stdout.utf8))
        #expect(json.status == 74 && outcomes.count == 1 && outcomes[0].ok && outcomes[0].status == nil && outcomes[0].unrecorded != nil && outcomes[0].unrecordedStatus == 74, "\(json.stdout)")
        try FileManager.default.removeItem(atPath: filler)
        let roomy = try storectl("snapshot", "verify", "--repo", repo, id)
        #expect(roomy.status == 0 && !roomy.stdout.contains("NOT RECORDED") && FileManager.default.fileExists(atPath: repo + "/verified/\(id).json"), "\(roomy.stdout)")
    }

    @Test("the repository's volume full, then mounted read-only: restore, export, repo check and prune --dry-run read without a lock and say so (they were 74 and 73 on the lock, the restore most wanted then); a prune that would remove is still refused 74 with what to do; a snapshot is refused", .enabled(if: TempMount.isAvailable))
    func readsWhereNoLockCanBeWritten() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let mount = try #require(TempMount(kilobytes: 8192))
        let repo = try RepositoryInit.run(.init(location: mount.file("repo"), encrypted: false, password: .file(try folder.passwordFile()))).location
        var ids: [String] = []
        for _ in 0..<2 {
            let created = try storectl("snapshot", "create", store, "--repo", repo, "--json")
            #expect(created.status == 0, "\(created.stderr)")
            ids.append(try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(created.stdout.utf8)).id)
            try DatabaseQueue(path: store).write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'second' WHERE Z_PK = 1") }
        }
        let filler = mount.file("filler")
        _ = try ChildProcess.run("/bin/sh", ["-c", "cat /dev/zero > '\(filler)' 2>/dev/null"])
        func reads(_ label: String) throws {
            let target = folder.file("restored-\(label).sqlite")
            let restored = try storectl("snapshot", "restore", "--repo", repo, ids[0], "--to", target)
            #expect(restored.status == 0 && restored.stderr.contains("without a lock"), "\(label): \(restored.status) \(restored.stderr)")
            let title = try DatabaseQueue(path: target).read { try String.fetchOne($0, sql: "SELECT ZTITLE FROM ZITEM WHERE Z_PK = 1") }
            #expect(title != "second", "\(label): the first snapshot's content")
            let exported = try storectl("snapshot", "export", "--repo", repo, ids[1], "--output", folder.file("export-\(label).tar.zst"))
            #expect(exported.status == 0 && exported.stderr.contains("without a lock"), "\(label): \(exported.status) \(exported.stderr)")
            let check = try storectl("repo", "check", "--repo", repo, "--read-data")
            #expect(check.status == 0 && check.stderr.contains("without a lock"), "\(label): \(check.status) \(check.stderr)")
            let dry = try storectl("snapshot", "prune", "--repo", repo, "--keep-last", "1", "--dry-run")
            #expect(dry.status == 0 && dry.stdout.contains("would remove 1"), "\(label): \(dry.status) \(dry.stdout) \(dry.stderr)")
        }
        try reads("full")
        let prune = try storectl("snapshot", "prune", "--repo", repo, "--keep-last", "1")
        #expect(prune.status == 74 && prune.stderr.contains("cannot write its lock") && prune.stderr.contains("free a few MiB"), "\(prune.status) \(prune.stderr)")
        let create = try storectl("snapshot", "create", store, "--repo", repo)
        #expect(create.status == 74, "\(create.status) \(create.stderr)")
        try FileManager.default.removeItem(atPath: filler)
        #expect(try ChildProcess.run("/bin/mount", ["-o", "remount,ro", mount.path]).status == 0)
        try reads("read-only")
        #expect(try storectl("snapshot", "list", "--repo", repo).stdout.contains(ids[0]), "nothing was removed")
    }

    @Test("a store whose path has a control character (a tab) is refused before it is snapshotted (64), not recorded and then called damaged; replicate refuses it too")
    func controlCharacterInPath() throws {
        let folder = try TempFolder()
        let odd = folder.file("with\ttab")
        try FileManager.default.createDirectory(atPath: odd, withIntermediateDirectories: false)
        let made = try ChildProcess.run(Binaries.lab, ["make-store", odd + "/Tasks.sqlite", "--items", "50"])
        #expect(made.status == 0, "\(made.stderr)")
        let repo = try folder.repository()
        let run = try storectl("snapshot", "create", odd + "/Tasks.sqlite", "--repo", repo)
        #expect(run.status == 64 && run.stderr.contains("has a control character"), "\(run.status) \(run.stderr)")
        let listed = try storectl("snapshot", "list", "--repo", repo)
        #expect(listed.status == 0 && !listed.stdout.contains("DAMAGED") && !listed.stdout.contains("Tasks"), "\(listed.stdout)")
        let follow = try storectl("replicate", odd + "/Tasks.sqlite", "--repo", repo, "--for", "1s")
        #expect(follow.status == 64 && follow.stderr.contains("has a control character"), "\(follow.status) \(follow.stderr)")
    }

    @Test("two writers: the second exits 75 at once naming the holder; with --wait it waits its turn")
    func lockContention() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let repo = try folder.repository()
        #expect(try storectl("snapshot", "create", store, "--repo", repo).status == 0)
        // A live process holds the repository alone (as a prune does) until the test ends it.
        let holder = try ChildProcess.Running("/bin/sleep", ["120"])
        let record = #"{"format":"storectl-lock","host":"\#(ProcessInfo.processInfo.hostName)","pid":\#(holder.pid),"user":"x","exclusive":true,"operation":"snapshot prune","created":"\#(Timestamp.iso(Date()))","refreshed":"\#(Timestamp.iso(Date()))"}"#
        try LocalBackend(root: repo).write("locks/00000000c0ffee00", Data(record.utf8), point: "test.lock")
        // Reaped as soon as it ends (a zombie would look alive to the waiting storectl).
        let reaped = DispatchSemaphore(value: 0)
        DispatchQueue.global().async { _ = holder.wait(); reaped.signal() }
        let started = Date()
        let busy = try storectl("snapshot", "create", store, "--repo", repo)
        #expect(busy.status == 75)
        #expect(busy.stderr.contains("snapshot prune") && busy.stderr.contains("pid \(holder.pid)"), "\(busy.stderr)")
        #expect(Date().timeIntervalSince(started) < 15, "at once, not after a wait")
        let waiting = try ChildProcess.Running(Binaries.storectl, ["snapshot", "create", store, "--repo", repo, "--wait"])
        usleep(1_000_000)
        #expect(waiting.isRunning, "it waits while the holder holds the repository")
        holder.signal(SIGKILL)
        reaped.wait()
        let waited = waiting.wait()
        #expect(waited.status == 0, "\(waited.stderr)")
        #expect(try SnapshotSummary.list(repository: repo).count == 2)

        // A writer holds it shared (a snapshot, a replicate): prune's dry run only reads, so it
        // runs beside it; the prune itself waits for the repository alone (75).
        let writer = try ChildProcess.Running("/bin/sleep", ["30"])
        defer { writer.signal(SIGKILL); _ = writer.wait() }
        let shared = #"{"format":"storectl-lock","host":"\#(ProcessInfo.processInfo.hostName)","pid":\#(writer.pid),"user":"x","exclusive":false,"operation":"replicate","created":"\#(Timestamp.iso(Date()))","refreshed":"\#(Timestamp.iso(Date()))"}"#
        try LocalBackend(root: repo).write("locks/00000000c0ffee01", Data(shared.utf8), point: "test.lock")
        let dry = try storectl("snapshot", "prune", "--repo", repo, "--keep-last", "1", "--dry-run")
        #expect(dry.status == 0 && dry.stdout.contains("would remove 1"), "\(dry.stdout)\(dry.stderr)")
        let prune = try storectl("snapshot", "prune", "--repo", repo, "--keep-last", "1")
        #expect(prune.status == 75 && prune.stderr.contains("replicate"), "\(prune.stderr)")
        // A mistyped --store prunes nothing: it says so, naming the stores there (66).
        let typo = try storectl("snapshot", "prune", "--repo", repo, "--keep-last", "1", "--dry-run", "--store", folder.file("Task.sqlite"))
        #expect(typo.status == 66 && typo.stderr.contains("is of store \(folder.file("Task.sqlite"))")
                && typo.stderr.contains("its stores: \(store)"), "\(typo.stderr)")
    }

    @Test("two stores in folders whose names differ only in Unicode form (é as one character, NFC, and as e with a combining accent, NFD: two folders on Linux, one string to Swift's ==) are two stores: each its own first snapshot, prune --keep-last 1 keeps each one's newest, --store selects one, an in-place restore of one's snapshot onto the other is refused (64), replicate follows both")
    func unicodeFormsAreTwoStores() throws {
        let folder = try TempFolder()
        let repo = try folder.repository()
        var stores: [String] = []
        for (i, name) in ["caf\u{E9}", "cafe\u{301}"].enumerated() {
            let dir = folder.file(name)
            #expect(mkdir(dir, 0o755) == 0)
            let store = dir + "/Tasks.sqlite"
            let made = try ChildProcess.run(Binaries.lab, ["make-store", store, "--items", "200", "--seed", "\(31 + i)"])
            #expect(made.status == 0, "\(made.stderr)")
            stores.append(store)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasPrefix("caf") }.count == 2, "two folders on disk")
        var ids: [[String]] = [[], []]
        for round in 0..<2 {
            for (i, store) in stores.enumerated() {
                try DatabaseQueue(path: store).write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = ? WHERE Z_PK = 1", arguments: ["round \(round)"]) }
                let made = try storectl("snapshot", "create", store, "--repo", repo, "--json")
                #expect(made.status == 0, "\(made.stderr)")
                let result = try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(made.stdout.utf8))
                #expect(round == 0 ? result.parent == nil : result.parent == ids[i].last, "store \(i) round \(round): parent \(result.parent ?? "none")")
                ids[i].append(result.id)
            }
        }
        let one = try storectl("snapshot", "list", "--repo", repo, "--store", stores[1], "--json")
        #expect(one.status == 0 && ids[1].allSatisfy(one.stdout.contains) && !ids[0].contains(where: one.stdout.contains), "\(one.stdout)")
        let refused = try storectl("snapshot", "restore", "--repo", repo, ids[1][1], "--in-place", stores[0])
        #expect(refused.status == 64, "\(refused.status) \(refused.stderr)")
        let prune = try storectl("snapshot", "prune", "--repo", repo, "--keep-last", "1")
        #expect(prune.status == 0, "\(prune.stderr)")
        let left = try SnapshotSummary.list(repository: repo).map(\.id).sorted()
        #expect(left == [ids[0][1], ids[1][1]].sorted(), "each store's newest stays: \(left)")
        let followed = try storectl("replicate", stores[0], stores[1], "--repo", repo, "--for", "1s", "--heartbeat", "0", "--json")
        #expect(followed.status == 0, "\(followed.stderr)")
        let points = try storectl("snapshot", "list", "--repo", repo, "--points", "--json")
        for store in stores {
            #expect(points.stdout.utf8.split(separator: UInt8(ascii: "\"")).contains { $0.elementsEqual(store.utf8) }, "points of \(store): \(points.stdout)")
        }
    }

    @Test("a new store made at a moved store's path: its first snapshot there warns that the earlier ones are of another Core Data store (prune groups them by path); its next does not")
    func anotherStoreAtThePath() throws {
        let folder = try TempFolder()
        let (store, repo, _) = try storeWithSnapshot(folder, items: 200)
        try FileManager.default.moveItem(atPath: store, toPath: folder.file("Moved.sqlite"))
        for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: store + suffix) }
        let made = try ChildProcess.run(Binaries.lab, ["make-store", store, "--items", "100", "--seed", "3"])
        #expect(made.status == 0, "\(made.stderr)")
        let first = try storectl("snapshot", "create", store, "--repo", repo, "--json")
        #expect(first.status == 0 && first.stderr.contains("is another Core Data store than the one its earlier snapshots are of"), "\(first.stderr)")
        #expect(try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(first.stdout.utf8)).parentStoreUUID != nil)
        try DatabaseQueue(path: store).write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'next' WHERE Z_PK = 1") }
        let next = try storectl("snapshot", "create", store, "--repo", repo)
        #expect(next.status == 0 && !next.stderr.contains("another Core Data store"), "\(next.stderr)")
    }

    @Test("a prune cut short after removing a record (SIGTERM at its first removal; a server gone away takes the same path): the error names the snapshot it removed, never 'nothing was changed'; the same prune again finishes")
    func pruneCutShort() throws {
        let folder = try TempFolder()
        let (store, repo, first) = try storeWithSnapshot(folder, items: 300)
        for title in ["second", "third"] {
            try DatabaseQueue(path: store).write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = ? WHERE Z_PK = 1", arguments: [title]) }
            #expect(try storectl("snapshot", "create", store, "--repo", repo).status == 0)
        }
        let byTime = try SnapshotSummary.list(repository: repo).sorted { ($0.time, $0.id) < ($1.time, $1.id) }.map(\.id)
        #expect(byTime.count == 3 && byTime.first == first)
        let expired = byTime.dropLast().sorted()   // removed in the order of their ids
        let cut = try storectl("snapshot", "prune", "--repo", repo, "--keep-last", "1", environment: ["STORECTL_TEST_SIGNAL_AT": "prune.record.remove#1"])
        #expect(cut.status == 143 && cut.stderr.contains("before that, this prune removed 1 snapshot (\(expired[0]))")
                && !cut.stderr.contains("nothing was changed"), "\(cut.status) \(cut.stderr)")
        #expect(try SnapshotSummary.list(repository: repo).map(\.id).sorted() == [expired[1], byTime[2]].sorted())
        let again = try storectl("snapshot", "prune", "--repo", repo, "--keep-last", "1")
        #expect(again.status == 0 && again.stdout.contains("removed \(expired[1])"), "\(again.stdout) \(again.stderr)")
        #expect(try SnapshotSummary.list(repository: repo).map(\.id) == [byTime[2]])
        #expect(try storectl("repo", "check", "--repo", repo).status == 0)
    }

    @Test("restore --in-place beside an app that opens the store for each commit: every commit the app was told succeeded is in a pre-restore safety snapshot or in the store afterwards (the store's write lock is held from the safety snapshot through the swap, and a process that opened the store meanwhile stops the swap: 75, nothing changed); each restore ends 0 or 75; with the app stopped it ends 0")
    func inPlaceBesideReopeningWriter() throws {
        let folder = try TempFolder()
        let (store, repo, snapshot) = try storeWithSnapshot(folder, items: 2_000)
        let log = folder.file("commits.log"), ready = folder.file("ready")
        let writer = try ChildProcess.Running(Binaries.lab, ["writer", store, "--interval-ms", "60", "--reopen", "--ready-file", ready, "--commit-log", log])
        #expect(ChildProcess.waitFor(file: ready))
        var safeties: [String] = [], statuses: [Int32] = [], diag: [String] = []
        for attempt in 1...12 {
            // Every fourth waits for the app (--wait), so that some swaps run beside it however
            // slow the machine: on a loaded CI machine all 12 without --wait were refused.
            let wait = attempt % 4 == 0 ? ["--wait"] : []
            let restore = try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, snapshot, "--in-place", store, "--json"] + wait)
            statuses.append(restore.status)
            if restore.status == 0 {
                let result = try JSON.decoder().decode(SnapshotRestore.Result.self, from: Data(restore.stdout.utf8))
                if let safety = result.safetySnapshot { safeties.append(safety) }
                diag.append("#\(attempt): unexpected \(result.keptUnexpected) moved \(result.movedAside) still \(String(describing: result.replacedStillOpenBy))")
            } else {
                #expect(restore.status == 75 && restore.stderr.contains("nothing was changed") && !restore.stderr.contains("stays"), "\(restore.status) \(restore.stderr)")
            }
            usleep(150_000)
        }
        writer.signal(SIGTERM)
        let stats = writer.wait()
        #expect(stats.status == 0, "\(stats.stderr)")
        // Every commit number the app was told succeeded, and where each one is now.
        let acknowledged = try acknowledgedCommits(log)
        let kept = try writerCommits(in: store, orSafetySnapshots: safeties, of: repo, restoringInto: folder)
        let lost = acknowledged.subtracting(kept).sorted()
        #expect(acknowledged.count > 20, "the app kept committing: \(acknowledged.count)")
        #expect(lost.isEmpty, "\(lost.count) of \(acknowledged.count) acknowledged commits are in no safety snapshot and not in the store: \(lost.prefix(10)); statuses \(statuses) DIAG \(diag) FILES \((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? [])")
        #expect(statuses.allSatisfy { $0 == 0 || $0 == 75 }, "\(statuses)")
        // A refusal takes its safety snapshot back (the store was not changed; the next attempt
        // takes its own): the repository holds the first snapshot and one per restore made.
        #expect(try SnapshotSummary.list(repository: repo).count == 1 + safeties.count, "\(statuses)")
        // Some went through beside it (the swap itself ran under the app, not only refusals).
        #expect(statuses.contains(0), "\(statuses)")
        // The app stopped: the restore goes through.
        let quiet = try storectl("snapshot", "restore", "--repo", repo, snapshot, "--in-place", store)
        #expect(quiet.status == 0, "\(quiet.stderr)")
        #expect(try writerCommits(in: store).isEmpty)
    }

    @Test("restore --in-place with an app opening the store in the instant between the swap's renames (the swap paused there): its connection cannot start on the replaced file (fenced: it waits, then fails, an error it sees), so no commit it was told succeeded lands in files set aside or pairs the replaced file with the restored store's -wal; the restored store is whole", arguments: ["swap.aside.wal", "swap.aside.shm", "swap.aside.database"])
    func inPlaceAppBetweenRenames(point: String) throws {
        let folder = try TempFolder()
        let (store, repo, snapshot) = try storeWithSnapshot(folder, items: 2_000)
        let log = folder.file("commits.log"), ready = folder.file("ready")
        let writer = try ChildProcess.Running(Binaries.lab, ["writer", store, "--interval-ms", "20", "--reopen", "--busy-timeout", "0.3",
                                                             "--ready-file", ready, "--commit-log", log])
        #expect(ChildProcess.waitFor(file: ready))
        // --force: past the app (it opens the store every 20 ms). The pause holds the swap
        // between two renames for longer than the app's busy timeout: the commit it was waiting
        // to make under the store's write lock fails, and it opens the store again meanwhile.
        let trace = folder.file("trace")
        // Committed before the restore began: in its safety snapshot, never in the restored store
        // (a connection pairing the replaced file with the restored store's -wal brings the
        // replaced file's pages, these commits on them, into the restored store).
        let committing = Date().addingTimeInterval(30)
        while ((try? acknowledgedCommits(log))?.count ?? 0) < 5, Date() < committing { usleep(50_000) }
        let beforeRestore = try acknowledgedCommits(log)
        let restore = try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, snapshot, "--in-place", store, "--force", "--json"],
                                           environment: ["STORECTL_TEST_PAUSE_AT": "\(point):1500", "STORECTL_FAULT_TRACE": trace])
        #expect(try String(contentsOfFile: trace, encoding: .utf8).contains("\(point)#1"), "the swap passed \(point)")
        // The app goes on, on the restored store (a few commits, however loaded the machine).
        let after = try acknowledgedCommits(log).count
        let deadline = Date().addingTimeInterval(20)
        while ((try? acknowledgedCommits(log))?.count ?? 0) < after + 3, Date() < deadline { usleep(50_000) }
        writer.signal(SIGTERM)
        let stats = writer.wait()
        #expect(stats.status == 0, "\(stats.stderr)")
        #expect(restore.status == 0, "\(restore.stderr)")
        let result = try JSON.decoder().decode(SnapshotRestore.Result.self, from: Data(restore.stdout.utf8))
        #expect(result.keptUnexpected.isEmpty, "the app wrote beside the swap: \(result.keptUnexpected)")
        let acknowledged = try acknowledgedCommits(log)
        let kept = try writerCommits(in: store, orSafetySnapshots: result.safetySnapshot.map { [$0] } ?? [], of: repo, restoringInto: folder)
        #expect(acknowledged.count >= after + 3, "the app kept committing: \(acknowledged.count)")
        #expect(acknowledged.subtracting(kept).isEmpty, "lost: \(acknowledged.subtracting(kept).sorted())")
        #expect(!beforeRestore.isEmpty)
        let revived = try writerCommits(in: store).intersection(beforeRestore)
        #expect(revived.isEmpty, "\(revived.count) of the \(beforeRestore.count) commits made before the restore are in the restored store: \(revived.sorted().prefix(5))")
        let check = try DatabaseQueue(path: store).read { try String.fetchAll($0, sql: "PRAGMA integrity_check") }
        #expect(check == ["ok"], "\(check)")
        // Nothing beside the store but its own files and the commit log.
        let names = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { ($0.hasPrefix("Tasks.sqlite.") || $0.hasPrefix(".Tasks.sqlite")) && $0 != "Tasks.sqlite.storectl-lock" }
        #expect(names.isEmpty, "\(names)")
    }

    @Test("restore --in-place, the swap's look at the store: a process that opened the database file since the restore began and holds no lock yet (on its way to its first read) stops the swap (75, nothing changed); so does one holding a SHARED lock and no -shm lock yet (WAL mode); one that kept the file open since before the restore, with no lock (not SQLite), does not; one that had a connection (a lock) when the restore began and, at the look, has the file open with no lock (its next connection, on its way to its first read) does; so does one with no lock at the start that took one while the restore staged its copy (a per-write app caught between its open and its lock at the start)", arguments: ["fresh", "shared", "long-held", "reopened", "locked-meanwhile"])
    func inPlaceLookAtOpeners(kind: String) throws {
        let folder = try TempFolder()
        let (store, repo, snapshot) = try storeWithSnapshot(folder, items: 200)
        let before = try FileProbe.shared.sha256(of: store)
        // Opens the file (and with "shared" takes a read lock on SQLite's SHARED range, as a
        // connection does before it opens the -shm), says so, and sleeps. "reopened": with the
        // lock, until told to go on; then closes it (the lock goes with it) and opens the file
        // again, as a per-write app's next connection does, and holds it with no lock.
        let script = """
            import fcntl, os, sys, time
            fd = os.open(sys.argv[1], os.O_RDONLY)
            if sys.argv[3] in ("shared", "reopened"):
                fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 510, 0x40000002)
            open(sys.argv[2], "w").write("ready")
            if sys.argv[3] in ("reopened", "locked-meanwhile"):
                while not os.path.exists(sys.argv[2] + ".go"):
                    time.sleep(0.01)
                if sys.argv[3] == "locked-meanwhile":
                    fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 510, 0x40000002)
                    time.sleep(0.3)
                os.close(fd)
                fd = os.open(sys.argv[1], os.O_RDONLY)
                open(sys.argv[2] + ".again", "w").write("again")
            time.sleep(60)
            """
        let ready = folder.file("opened")
        var holder: ChildProcess.Running?
        defer { holder?.signal(SIGKILL); _ = holder?.wait() }
        func startHolder() throws {
            holder = try ChildProcess.Running("/usr/bin/python3", ["-c", script, store, ready, kind])
            #expect(ChildProcess.waitFor(file: ready))
        }
        if kind != "fresh" { try startHolder() }
        // "fresh": opened while the restore stages its copy (paused there), after it began.
        // Paused until the holder has done its part (a fixed 1.5 s pause was not always enough
        // on a loaded machine), then a little longer: the restore's watch looks every 20 ms.
        let trace = folder.file("trace"), resume = folder.file("resume")
        let restore = try ChildProcess.Running(Binaries.storectl, ["snapshot", "restore", "--repo", repo, snapshot, "--in-place", store],
                                               environment: ["STORECTL_TEST_PAUSE_AT": "restore.database.sync:60000", "STORECTL_TEST_PAUSE_UNTIL": resume,
                                                             "STORECTL_FAULT_TRACE": trace])
        #expect(ChildProcess.waitFor(file: trace))
        let paused = Date().addingTimeInterval(30)
        while !((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").contains("restore.database.sync#1"), Date() < paused { usleep(10_000) }
        if kind == "fresh" { try startHolder() }
        if kind == "reopened" || kind == "locked-meanwhile" {
            _ = FileManager.default.createFile(atPath: ready + ".go", contents: Data())
            #expect(ChildProcess.waitFor(file: ready + ".again"))
        }
        usleep(300_000)
        _ = FileManager.default.createFile(atPath: resume, contents: Data())
        let result = restore.wait()
        if kind == "long-held" {
            #expect(result.status == 0, "\(result.stderr)")
        } else {
            #expect(result.status == 75 && result.stderr.contains("was opened by another process (pid \(holder?.pid ?? 0))")
                    && result.stderr.contains("nothing was changed"), "\(result.status) \(result.stderr)")
            #expect(try FileProbe.shared.sha256(of: store) == before)
        }
    }

    @Test("restore --in-place --force past an app that keeps a connection open and opens a second one on the replaced file during the swap (it takes its lock without asking the kernel, past the fence, and opens the -wal by name): the restore waits for that one as for a fenced connection, and says to restart the app now")
    func inPlaceForcedSecondConnection() throws {
        let folder = try TempFolder()
        let (store, repo, snapshot) = try storeWithSnapshot(folder, items: 200)
        let script = """
            import os, sqlite3, sys, time
            first = sqlite3.connect(sys.argv[1])
            first.execute("SELECT count(*) FROM ZITEM").fetchall()
            open(sys.argv[2], "w").write("ready")
            while not os.path.exists(sys.argv[2] + ".go"):
                time.sleep(0.01)
            second = sqlite3.connect(sys.argv[1])
            open(sys.argv[2] + ".again", "w").write("again")
            time.sleep(60)
            """
        let ready = folder.file("connected")
        let app = try ChildProcess.Running("/usr/bin/python3", ["-c", script, store, ready])
        defer { app.signal(SIGKILL); _ = app.wait() }
        #expect(ChildProcess.waitFor(file: ready))
        let trace = folder.file("trace")
        // Paused after the -shm is set aside, before the database file is: the second connection
        // opens the file the restore replaces.
        let resume = folder.file("resume")
        let restore = try ChildProcess.Running(Binaries.storectl, ["snapshot", "restore", "--repo", repo, snapshot, "--in-place", store, "--force", "--timeout", "3", "--json"],
                                               environment: ["STORECTL_TEST_PAUSE_AT": "swap.aside.shm:60000", "STORECTL_TEST_PAUSE_UNTIL": resume,
                                                             "STORECTL_FAULT_TRACE": trace])
        let paused = Date().addingTimeInterval(30)
        while !((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").contains("swap.aside.shm#1"), Date() < paused, restore.isRunning { usleep(10_000) }
        _ = FileManager.default.createFile(atPath: ready + ".go", contents: Data())
        #expect(ChildProcess.waitFor(file: ready + ".again"))
        _ = FileManager.default.createFile(atPath: resume, contents: Data())
        let done = restore.wait()
        #expect(done.status == 0, "\(done.stderr)")
        let result = try JSON.decoder().decode(SnapshotRestore.Result.self, from: Data(done.stdout.utf8))
        #expect(result.replacedStillOpenBy == app.pid && result.replacedStillOpenDuringSwap == true, "\(done.stdout)")
    }

    @Test("restore --in-place --force beside an app that opens the store for each commit: every commit the app was told succeeded is in the pre-restore safety snapshot or in the store (each such restore lost the commit the app was waiting to make); past an app that keeps the store open it waits at most 10 s for it, then says to restart it")
    func inPlaceForcedBesideApps() throws {
        let folder = try TempFolder()
        let (store, repo, snapshot) = try storeWithSnapshot(folder, items: 2_000)
        let log = folder.file("commits.log"), ready = folder.file("ready")
        let writer = try ChildProcess.Running(Binaries.lab, ["writer", store, "--interval-ms", "20", "--reopen", "--ready-file", ready, "--commit-log", log])
        #expect(ChildProcess.waitFor(file: ready))
        var safeties: [String] = []
        for _ in 1...2 {
            let restore = try storectl("snapshot", "restore", "--repo", repo, snapshot, "--in-place", store, "--force", "--json")
            #expect(restore.status == 0, "\(restore.stderr)")
            if let result = try? JSON.decoder().decode(SnapshotRestore.Result.self, from: Data(restore.stdout.utf8)), let safety = result.safetySnapshot {
                safeties.append(safety)
            }
            usleep(100_000)
        }
        writer.signal(SIGTERM)
        #expect(writer.wait().status == 0)
        let acknowledged = try acknowledgedCommits(log)
        let kept = try writerCommits(in: store, orSafetySnapshots: safeties, of: repo, restoringInto: folder)
        #expect(safeties.count == 2 && acknowledged.count > 10, "\(safeties.count) safety snapshots, \(acknowledged.count) commits")
        #expect(acknowledged.subtracting(kept).isEmpty, "lost: \(acknowledged.subtracting(kept).sorted())")

        // An app that keeps the store open (a read transaction held): waited for 10 s at most, then named.
        let held = folder.file("held")
        let holder = try ChildProcess.Running(Binaries.lab, ["hold", store, "--mode", "read", "--seconds", "60", "--ready-file", held])
        defer { holder.signal(SIGTERM); _ = holder.wait() }
        #expect(ChildProcess.waitFor(file: held))
        let started = Date()
        let forced = try storectl("snapshot", "restore", "--repo", repo, snapshot, "--in-place", store, "--force")
        let took = Date().timeIntervalSince(started)
        #expect(forced.status == 0, "\(forced.stderr)")
        #expect(forced.stdout.contains("WARNING: pid \(holder.pid) still had the replaced store open"), "\(forced.stdout)")
        #expect(took >= 9.5 && took < 30, "\(took) s")
    }

    @Test("restore --in-place --wait waits for the app's connections to close (refused at once without it; SIGTERM ends the wait: 143, saying where and that nothing changed), and beside an app that opens the store for each commit takes the lock and the safety snapshot again until none opened meanwhile: each restore goes through, one safety snapshot each, no acknowledged commit lost")
    func inPlaceWaitsForTheApp() throws {
        let folder = try TempFolder()
        let (store, repo, snapshot) = try storeWithSnapshot(folder, items: 2_000)
        // Open until the test lets it go: refused at once; with --wait, restored once it closed.
        let held = folder.file("held")
        let holder = try ChildProcess.Running(Binaries.lab, ["hold", store, "--mode", "read", "--seconds", "120", "--ready-file", held])
        #expect(ChildProcess.waitFor(file: held))
        let refused = try storectl("snapshot", "restore", "--repo", repo, snapshot, "--in-place", store)
        #expect(refused.status == 75 && refused.stderr.contains("is open by another process (pid \(holder.pid))"), "\(refused.stderr)")
        // SIGTERM while it waits: 143, saying where it stopped and that nothing changed (it said
        // only "stopped: SIGTERM was received").
        let before = try FileProbe.shared.sha256(of: store)
        let stopped = try ChildProcess.Running(Binaries.storectl, ["snapshot", "restore", "--repo", repo, snapshot, "--in-place", store, "--wait"],
                                               environment: ["STORECTL_PROGRESS": "always"])
        #expect(waitUntil { stopped.stderrSoFar.contains("waiting for the app (pid \(holder.pid))") || !stopped.isRunning }, "\(stopped.stderrSoFar)")
        stopped.signal(SIGTERM)
        let stop = stopped.wait()
        #expect(stop.status == 143 && stop.stderr.contains("snapshot restore stopped during its preflight stage: SIGTERM was received; nothing was changed"),
                "\(stop.status) \(stop.stderr)")
        #expect(try FileProbe.shared.sha256(of: store) == before)
        let waiting = try ChildProcess.Running(Binaries.storectl, ["snapshot", "restore", "--repo", repo, snapshot, "--in-place", store, "--wait"],
                                               environment: ["STORECTL_PROGRESS": "always"])
        #expect(waitUntil { waiting.stderrSoFar.contains("waiting for the app (pid \(holder.pid)) to close the store, for at most") }, "\(waiting.stderrSoFar)")
        #expect(waiting.isRunning, "it waits while the app has the store open")
        holder.signal(SIGTERM)
        _ = holder.wait()
        let waited = waiting.wait()
        #expect(waited.status == 0, "\(waited.stderr)")

        let log = folder.file("commits.log"), ready = folder.file("ready")
        let writer = try ChildProcess.Running(Binaries.lab, ["writer", store, "--interval-ms", "150", "--reopen", "--ready-file", ready, "--commit-log", log])
        #expect(ChildProcess.waitFor(file: ready))
        var safeties: [String] = [], statuses: [Int32] = []
        for _ in 1...3 {
            let restore = try storectl("snapshot", "restore", "--repo", repo, snapshot, "--in-place", store, "--wait", "--json")
            statuses.append(restore.status)
            if let result = try? JSON.decoder().decode(SnapshotRestore.Result.self, from: Data(restore.stdout.utf8)), let safety = result.safetySnapshot {
                safeties.append(safety)
            }
            usleep(200_000)
        }
        writer.signal(SIGTERM)
        #expect(writer.wait().status == 0)
        #expect(statuses == [0, 0, 0], "\(statuses)")
        let acknowledged = try acknowledgedCommits(log)
        let kept = try writerCommits(in: store, orSafetySnapshots: safeties, of: repo, restoringInto: folder)
        #expect(acknowledged.count > 3 && acknowledged.subtracting(kept).isEmpty, "lost: \(acknowledged.subtracting(kept).sorted()) of \(acknowledged.count)")
        // The first snapshot, the held-open restore's safety snapshot, and one per restore here.
        #expect(try SnapshotSummary.list(repository: repo).count == 2 + safeties.count, "\(safeties)")
    }

    @Test("restore --in-place refused because a per-write app opened the store meanwhile, killed -9 just as it takes back its safety snapshot (fault point restore.safety.forget): the store is untouched, the snapshot gone, the repository clean, and the next restore goes through")
    func killedTakingBackSafety() throws {
        let folder = try TempFolder()
        let (store, repo, snapshot) = try storeWithSnapshot(folder, items: 2_000)
        let log = folder.file("commits.log"), ready = folder.file("ready")
        let writer = try ChildProcess.Running(Binaries.lab, ["writer", store, "--interval-ms", "20", "--reopen", "--ready-file", ready, "--commit-log", log])
        #expect(ChildProcess.waitFor(file: ready))
        var statuses: [Int32] = []
        while statuses.last != 137, statuses.count < 40 {
            let restore = try storectl("snapshot", "restore", "--repo", repo, snapshot, "--in-place", store,
                                       environment: ["STORECTL_FAULT_POINT": "restore.safety.forget"])
            statuses.append(restore.status)
        }
        writer.signal(SIGTERM)
        #expect(writer.wait().status == 0)
        try #require(statuses.last == 137, "no attempt was refused after its safety snapshot: \(statuses)")
        // Killed after the record's removal: no snapshot of the attempt, and (when no attempt went
        // through) every commit the app was told succeeded still in the store.
        let made = statuses.filter { $0 == 0 }.count
        #expect(try SnapshotSummary.list(repository: repo).count == 1 + made, "\(statuses)")
        if made == 0 {
            let acknowledged = try acknowledgedCommits(log)
            let inStore = try writerCommits(in: store)
            #expect(!acknowledged.isEmpty && acknowledged.isSubset(of: inStore), "\(acknowledged.subtracting(inStore).sorted().prefix(10))")
        }
        let check = try storectl("repo", "check", "--repo", repo)
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
        let integrity = try DatabaseQueue(path: store).read { try String.fetchOne($0, sql: "PRAGMA integrity_check") }
        #expect(integrity == "ok")
        let again = try storectl("snapshot", "restore", "--repo", repo, snapshot, "--in-place", store)
        #expect(again.status == 0, "\(again.stderr)")
    }

    @Test("kill -9 during a first snapshot leaves nothing listed; the next create removes what it wrote", arguments: [0.05, 0.2, 0.5])
    func killedMidCreate(_ delay: Double) throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 150_000)
        let repo = try folder.repository()
        // zstd at 19: seconds of work, so the kill lands inside it.
        let victim = try ChildProcess.Running(Binaries.storectl, ["snapshot", "create", store, "--repo", repo, "--level", "19"])
        usleep(useconds_t(delay * 1_000_000))
        victim.signal(SIGKILL)
        #expect(victim.wait().status == 137)
        #expect(try SnapshotSummary.list(repository: repo).isEmpty, "the interrupted snapshot is not listed")
        #expect(try storectl("snapshot", "create", store, "--repo", repo).status == 0)
        #expect(try SnapshotSummary.list(repository: repo).count == 1)
        #expect(try SnapshotVerify.run(.init(repository: repo, all: true)).allSatisfy(\.ok))
        let check = try RepositoryCheck.run(.init(location: repo, password: .resolve(file: nil)))
        #expect(check.ok && check.notes.isEmpty, "the dead writer's packs went with the next create: \(check.notes)")
    }
}

/// A connection held open by the test, as an app holds its store.
final class DatabaseQueueHolder {
    let queue: DatabaseQueue
    init(_ path: String) throws {
        queue = try DatabaseQueue(path: path)
        try queue.inDatabase { _ = try Int.fetchOne($0, sql: "SELECT count(*) FROM sqlite_master") }
    }
    func write(_ sql: String) throws { try queue.inDatabase { try $0.execute(sql: sql) } }
    func close() throws { try queue.close() }
}

@Suite("external data in subfolders", .onTestThreads)
struct ExternalSubfolderTests {
    @Test("a file in a subfolder of _EXTERNAL_DATA: a snapshot restores it into the same subfolder (it was written flattened into the folder), diff of the store against the snapshot says same; replicate reports each subfolder as not carried (a new file in one would not be seen), on stderr and in its summary")
    func subfolder() throws {
        let folder = try TempFolder("storectl-external-subfolder")
        let store = try makeStore(folder)
        let repo = try folder.repository("repo")
        let environment = ["STORECTL_PASSWORD_FILE": try folder.passwordFile()]
        let external = StoreFile(unchecked: store).externalDataPath
        let sub = (external as NSString).appendingPathComponent("sub")
        try FileManager.default.createDirectory(atPath: sub, withIntermediateDirectories: true)
        try Data("inner".utf8).write(to: URL(fileURLWithPath: (sub as NSString).appendingPathComponent("inner.bin")))
        try Data("top".utf8).write(to: URL(fileURLWithPath: (external as NSString).appendingPathComponent("top.bin")))
        let created = try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo, "--json"], environment: environment)
        #expect(created.status == 0, "\(created.stderr)")
        let id = try #require(try JSONSerialization.jsonObject(with: Data(created.stdout.utf8)) as? [String: Any])["id"] as? String ?? ""
        let target = folder.file("restored.sqlite")
        let restored = try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, id, "--to", target], environment: environment)
        #expect(restored.status == 0, "\(restored.stderr)")
        let back = StoreFile(unchecked: target).externalDataPath
        #expect(FileManager.default.contents(atPath: (back as NSString).appendingPathComponent("sub/inner.bin")) == Data("inner".utf8))
        #expect(FileManager.default.contents(atPath: (back as NSString).appendingPathComponent("top.bin")) == Data("top".utf8))
        #expect(!FileManager.default.fileExists(atPath: (back as NSString).appendingPathComponent("inner.bin")), "not flattened")
        let diff = try ChildProcess.run(Binaries.storectl, ["diff", "--repo", repo, id, store], environment: environment)
        #expect(diff.status == 0, "\(diff.stdout) \(diff.stderr)")
        // replicate: a subfolder appearing after its base is said not carried, on stderr and in the summary.
        let sub2 = (external as NSString).appendingPathComponent("later")
        // The folder and the commit come after the follower's base and it is stopped once the
        // commit's point is in (waited for: fixed times did not hold on a loaded machine).
        func newestPoint() -> String? { newestListedPoint(repo, environment: environment) }
        let follower = try ChildProcess.Running(Binaries.storectl, ["replicate", store, "--repo", repo, "--sync-interval", "200ms", "--quiet"], environment: environment)
        defer { follower.signal(SIGTERM); _ = follower.wait() }
        #expect(waitUntil { newestPoint() != nil }, "no base within 60 s")
        let base = newestPoint()
        try FileManager.default.createDirectory(atPath: sub2, withIntermediateDirectories: true)
        let app = try DatabaseQueue(path: store)
        try app.inDatabase { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'later' WHERE Z_PK = 1") }
        try app.close()
        #expect(waitUntil { newestPoint().map { $0 != base } ?? false }, "the commit's point was not in within 60 s")
        follower.signal(SIGTERM)
        let ran = follower.wait()
        #expect(ran.status == 0 && ran.stderr.contains("later is not carried") && ran.stderr.contains("sub is not carried") && ran.stdout.contains("2 NOT carried"), "\(ran.stdout) \(ran.stderr)")
    }

    @Test("a copy of a store at another path (and another store sharing its pages): its first snapshot stores none of the pages or external-data chunks another store's snapshot stored (they were all stored again), restores exactly, and still does once the other store's snapshots are pruned")
    func pagesSharedAcrossStores() throws {
        let folder = try TempFolder("storectl-shared-pages")
        let store = try makeStore(folder)
        try addExternalFiles(store, count: 2)
        let copyFolder = folder.file("copy")
        try FileManager.default.createDirectory(atPath: copyFolder, withIntermediateDirectories: false)
        let copy = (copyFolder as NSString).appendingPathComponent(FileSystem.name(of: store))
        #expect(try ChildProcess.run(Binaries.storectl, ["backup", store, "-o", copy]).status == 0)
        let repo = try folder.repository("repo")
        let environment = ["STORECTL_PASSWORD_FILE": try folder.passwordFile()]
        func create(_ path: String) throws -> SnapshotCreate.Result {
            let run = try ChildProcess.run(Binaries.storectl, ["snapshot", "create", path, "--repo", repo, "--json"], environment: environment)
            #expect(run.status == 0, "\(run.stderr)")
            return try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(run.stdout.utf8))
        }
        let first = try create(store), second = try create(copy)
        let firstAdded = try #require(first.addedBytes), secondAdded = try #require(second.addedBytes)
        // The second holds only its own map (and the pages that differ: the backup's header).
        #expect(secondAdded * 10 < firstAdded, "the copy's first snapshot added \(secondAdded) bytes, the store's \(firstAdded)")
        // A grouping that pools the stores (tags alone) keeps each store's newest snapshot checked
        // when taken (it removed the older store's only one: "verified" meant `snapshot verify` only).
        let pooled = try ChildProcess.run(Binaries.storectl, ["snapshot", "prune", "--repo", repo, "--keep-last", "1", "--group-by", "tags"], environment: environment)
        #expect(pooled.status == 0, "\(pooled.stdout) \(pooled.stderr)")
        let listed = try ChildProcess.run(Binaries.storectl, ["snapshot", "list", "--repo", repo], environment: environment)
        #expect(listed.stdout.contains(first.id) && listed.stdout.contains(second.id), "\(pooled.stdout)\n\(listed.stdout)")
        // Every item of the store changed and snapshotted, its first snapshot pruned: the copy's
        // items' pages are then in no snapshot but the copy's, and its restore reads them from the
        // packs the store's first snapshot wrote (kept alive by the copy's snapshot).
        try DatabaseQueue(path: store).write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = ZTITLE || ' (changed)'") }
        _ = try create(store)
        let pruned = try ChildProcess.run(Binaries.storectl, ["snapshot", "prune", "--repo", repo, "--store", store, "--keep-last", "1"], environment: environment)
        #expect(pruned.status == 0 && pruned.stdout.contains(first.id), "\(pruned.stdout) \(pruned.stderr)")
        let remaining = try ChildProcess.run(Binaries.storectl, ["snapshot", "list", "--repo", repo], environment: environment)
        #expect(!remaining.stdout.contains(first.id) && remaining.stdout.contains(second.id), "\(remaining.stdout)")
        let target = folder.file("restored.sqlite")
        let restored = try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, second.id, "--to", target], environment: environment)
        #expect(restored.status == 0, "\(restored.stderr)")
        let diff = try ChildProcess.run(Binaries.storectl, ["diff", target, copy], environment: environment)
        #expect(diff.status == 0, "\(diff.stdout) \(diff.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: StoreFile(unchecked: target).externalDataPath).sorted()
                == (try FileManager.default.contentsOfDirectory(atPath: StoreFile(unchecked: copy).externalDataPath).sorted()))
        let check = try ChildProcess.run(Binaries.storectl, ["repo", "check", "--repo", repo, "--read-data"], environment: environment)
        #expect(check.status == 0, "\(check.stdout) \(check.stderr)")
    }

    @Test("restore --in-place replaces the support folder's _EXTERNAL_DATA only: what else the app keeps in .<stem>_SUPPORT (in no snapshot) stays, the external data is the snapshot's, and a store without a support folder gets one")
    func supportFolderKept() throws {
        let folder = try TempFolder("storectl-support-kept")
        let store = try makeStore(folder)
        try addExternalFiles(store, count: 2)
        let repo = try folder.repository("repo")
        let environment = ["STORECTL_PASSWORD_FILE": try folder.passwordFile()]
        let file = StoreFile(unchecked: store)
        let snapshotFiles = try FileManager.default.contentsOfDirectory(atPath: file.externalDataPath).sorted()
        try #require(!snapshotFiles.isEmpty)
        let created = try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo, "--json"], environment: environment)
        let id = try #require(try JSONSerialization.jsonObject(with: Data(created.stdout.utf8)) as? [String: Any])["id"] as? String ?? ""
        // After the snapshot: the app's own folder in the support folder, and an external file more.
        let own = (file.supportPath as NSString).appendingPathComponent("other/x")
        try FileManager.default.createDirectory(atPath: FileSystem.parent(of: own), withIntermediateDirectories: true)
        try Data("keep".utf8).write(to: URL(fileURLWithPath: own))
        try Data("new".utf8).write(to: URL(fileURLWithPath: (file.externalDataPath as NSString).appendingPathComponent("later.bin")))
        let restored = try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, id, "--in-place", store], environment: environment)
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(FileManager.default.contents(atPath: own) == Data("keep".utf8), "the app's own file in the support folder is gone")
        #expect(try FileManager.default.contentsOfDirectory(atPath: file.externalDataPath).sorted() == snapshotFiles)
        #expect(try FileManager.default.contentsOfDirectory(atPath: file.supportPath).sorted() == ["_EXTERNAL_DATA", "other"])
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.contains("storectl-") && !$0.hasSuffix("storectl-lock") } == [])
        // No support folder at all: the restore makes it, with the snapshot's files.
        try FileManager.default.removeItem(atPath: file.supportPath)
        let again = try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, id, "--in-place", store], environment: environment)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: file.externalDataPath).sorted() == snapshotFiles)
        let diff = try ChildProcess.run(Binaries.storectl, ["diff", "--repo", repo, id, store], environment: environment)
        #expect(diff.status == 0, "\(diff.stdout) \(diff.stderr)")
    }
}

/// `count` external-data files in the store's `_EXTERNAL_DATA` (no row names them: the folder's
/// files go with every copy all the same).
private func addExternalFiles(_ store: String, count: Int) throws {
    let external = StoreFile(unchecked: store).externalDataPath
    try FileManager.default.createDirectory(atPath: external, withIntermediateDirectories: true)
    for k in 0..<count {
        try Data(String(repeating: "file \(k) ", count: 500).utf8).write(to: URL(fileURLWithPath: (external as NSString).appendingPathComponent("0000000\(k)-AAAA-BBBB-CCCC-DDDDDDDDDDDD")))
    }
}

/// A sample store in `folder`, a repository beside it, and the id of a first snapshot of the store.
private func storeWithSnapshot(_ folder: TempFolder, items: Int) throws -> (store: String, repo: String, snapshot: String) {
    let store = try makeStore(folder, items: items)
    let repo = try folder.repository()
    let first = try storectl("snapshot", "create", store, "--repo", repo, "--json")
    #expect(first.status == 0, "\(first.stderr)")
    return (store, repo, try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(first.stdout.utf8)).id)
}

/// The writer's commits held by `store` or by any of the safety snapshots (each restored into
/// `folder` as `safety-<k>.sqlite`): where every acknowledged commit must be after restores beside it.
private func writerCommits(in store: String, orSafetySnapshots safeties: [String], of repo: String, restoringInto folder: TempFolder) throws -> Set<Int> {
    var kept = try writerCommits(in: store)
    for (k, safety) in safeties.enumerated() {
        let copy = folder.file("safety-\(k).sqlite")
        let restored = try storectl("snapshot", "restore", "--repo", repo, safety, "--to", copy)
        #expect(restored.status == 0, "\(restored.stderr)")
        kept.formUnion(try writerCommits(in: copy))
    }
    return kept
}
