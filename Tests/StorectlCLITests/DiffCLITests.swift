import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

@Suite("storectl diff, end to end", .onTestThreads)
struct DiffCLITests {
    func report(_ run: ChildProcess.Result) throws -> StoreDiff.Report {
        try JSON.decoder().decode(StoreDiff.Report.self, from: Data(run.stdout.utf8))
    }

    func write(_ path: String, _ sql: String, arguments: StatementArguments = []) throws {
        let queue = try DatabaseQueue(path: path)
        try queue.write { try $0.execute(sql: sql, arguments: arguments) }
        try queue.close()
    }

    func snapshot(_ store: String, _ repo: String) throws -> String {
        let run = try storectl("snapshot", "create", store, "--repo", repo, "--json")
        #expect(run.status == 0, "\(run.stderr)")
        return try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(run.stdout.utf8)).id
    }

    @Test("two snapshots of one repository 60 scattered updates, 5 deletions, 3 insertions and tag links apart: exactly those objects, by content id, decoding only the leaves that differ; the human summary and exit 2, exit 0 for the same snapshot")
    func snapshots() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 20_000)
        let repo = try folder.repository()
        let first = try snapshot(store, repo)
        var generator = SystemRandomNumberGenerator()
        let keys = try DatabaseQueue(path: store).read { try Int64.fetchAll($0, sql: "SELECT Z_PK FROM ZITEM ORDER BY Z_PK") }
        let shuffled = keys.shuffled(using: &generator)
        let updated = Set(shuffled.prefix(60)), deleted = Set(shuffled.dropFirst(60).prefix(5))
        for key in updated { try write(store, "UPDATE ZITEM SET ZTITLE = 'edited ' || Z_PK, Z_OPT = Z_OPT + 1 WHERE Z_PK = ?", arguments: [key]) }
        try write(store, "DELETE FROM ZITEM WHERE Z_PK IN (\(deleted.map(String.init).joined(separator: ",")))")
        let maxKey = keys.max() ?? 0
        try write(store, """
            INSERT INTO ZITEM (Z_PK, Z_ENT, Z_OPT, ZTITLE) SELECT Z_PK + \(maxKey), Z_ENT, 1, 'new' FROM ZITEM WHERE Z_PK IN (\(shuffled.suffix(3).map(String.init).joined(separator: ",")));
            UPDATE Z_PRIMARYKEY SET Z_MAX = Z_MAX + 3 WHERE Z_NAME = 'Item';
            DELETE FROM Z_2TAGS WHERE rowid = (SELECT min(rowid) FROM Z_2TAGS);
            """)
        let second = try snapshot(store, repo)
        let run = try storectl("diff", "--repo", repo, first, second, "--json")
        #expect(run.status == 2, "\(run.stderr)")
        let result = try report(run)
        #expect(result.stats.method == "content ids" && result.stats.fallback == nil)
        let items = result.entities.filter { $0.table == "ZITEM" }
        func objectKeys(_ change: String) -> Set<Int64> {
            Set(items.flatMap(\.objects).filter { $0.change == change }.compactMap { Int64($0.object.split(separator: " ").last ?? "") })
        }
        #expect(objectKeys("changed") == updated)
        #expect(objectKeys("removed") == deleted)
        #expect(objectKeys("added").count == 3 && objectKeys("added").allSatisfy { $0 > maxKey })
        #expect(items.allSatisfy { $0.attributes.keys.sorted() == ["ZTITLE"] || $0.changed == 0 }, "Z_OPT is bookkeeping: \(items.map(\.attributes))")
        #expect(result.links.first?.table == "Z_2TAGS" && result.links.first?.removed == 1)
        #expect(result.bookkeeping.tables.contains("Z_PRIMARYKEY"))
        #expect(result.stats.leavesDecoded * 5 < result.stats.leavesSkipped, "only leaves that differ: \(result.stats.leavesDecoded) decoded, \(result.stats.leavesSkipped) skipped")
        let text = try storectl("diff", "--repo", repo, first, second, "--limit", "2")
        #expect(text.status == 2)
        #expect(text.stdout.contains("changed (ZTITLE") && text.stdout.contains("… and") && text.stdout.contains("Item.tags (Z_2TAGS)"), "\(text.stdout)")
        // --limit 0: counts only, complete; --entity narrows; a blank or unknown name is 64, never "same".
        let counts = try report(try storectl("diff", "--repo", repo, first, second, "--json", "--limit", "0"))
        #expect(counts.entities.allSatisfy { $0.objects.isEmpty } && counts.entities.filter { $0.table == "ZITEM" }.reduce(0) { $0 + $1.changed } == 60)
        let narrowed = try storectl("diff", "--repo", repo, first, second, "--json", "--entity", "Tag")
        let narrowedTables = try report(narrowed).entities.map(\.table)
        #expect(narrowedTables.allSatisfy { $0 == "ZTAG" }, "\(narrowed.stdout)")
        for bad in ["", " ", "Item,", "Itme"] {
            let refused = try storectl("diff", "--repo", repo, first, second, "--entity", bad)
            #expect(refused.status == 64 && refused.stdout.isEmpty, "--entity \(bad.debugDescription): \(refused.status) \(refused.stderr)")
        }
        let guessed = try storectl("diff", "--repo", repo, first, second, "--entity", "Itme").stderr
        #expect(guessed.contains(#"Itme (did you mean "Item"?)"#), "the closest name, and the hint lists the entities: \(guessed)")
        let same = try storectl("diff", "--repo", repo, second, second)
        #expect(same.status == 0 && same.stdout.contains("\nsame"), "\(same.stdout)\(same.stderr)")
        // A mistyped id (a letter past f): not a snapshot id, with how to list them (it said "no such file", "check the store's path").
        let typo = String(second.dropLast()) + "X"
        let mistyped = try storectl("diff", "--repo", repo, first, typo)
        #expect(mistyped.status == 66 && mistyped.stderr.contains("\"\(typo)\" is not a snapshot id") && mistyped.stderr.contains("snapshot list --repo"), "\(mistyped.stderr)")
        // A file against a snapshot: the store as it is now is the second snapshot.
        let mixed = try storectl("diff", "--repo", repo, second, store)
        #expect(mixed.status == 0, "\(mixed.stdout)\(mixed.stderr)")
        // One row changed in the file: the pages it shares with the snapshot (the b-tree interior
        // pages the walks need among them) are read from the file, so only the frames holding the
        // pages that differ are decompressed, not the snapshot's every frame.
        let storeMiB = try DatabaseQueue(path: store).read { try Int.fetchOne($0, sql: "SELECT page_count * page_size FROM pragma_page_count, pragma_page_size") ?? 0 } >> 20
        #expect(storeMiB >= 4, "the store spans several frames: \(storeMiB) MiB")
        let one = try #require(keys.first { !deleted.contains($0) })
        try write(store, "UPDATE ZITEM SET ZTITLE = 'once more' WHERE Z_PK = ?", arguments: [one])
        for (x, y) in [(second, store), (store, second)] {
            let single = try report(try storectl("diff", "--repo", repo, x, y, "--json"))
            let changed = single.entities.flatMap(\.objects).filter { $0.change == "changed" }.compactMap { Int64($0.object.split(separator: " ").last ?? "") }
            #expect(changed == [one] && single.entities.flatMap(\.objects).count == 1, "\(single.entities)")
            #expect(single.stats.framesRead <= 3, "frames read: \(single.stats.framesRead) (reading interior pages from the snapshot took all 20 here, a store of \(storeMiB) MiB)")
        }
    }

    @Test("a snapshot lists its b-tree interior pages and packs them apart, its other pages compressed in chunks: a diff of two snapshots 6 scattered updates apart decompresses a small part of the store (from records made before the list existed: all of it) and says the same; after a prune repacks, the same again")
    func interiorPagesListed() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 80_000)
        let storeBytes = try DatabaseQueue(path: store).read { try Int.fetchOne($0, sql: "SELECT page_count * page_size FROM pragma_page_count, pragma_page_size") ?? 0 }
        #expect(storeBytes >= 16 << 20, "a store of many frames: \(storeBytes) bytes")
        let listed = try folder.repository(), unlisted = try folder.repository("unlisted")
        let old = ["STORECTL_TEST_NO_INTERIOR_PAGES": "1"]
        func snap(_ repo: String, _ environment: [String: String]?) throws -> String {
            let run = try storectl("snapshot", "create", store, "--repo", repo, "--json", environment: environment)
            #expect(run.status == 0, "\(run.stderr)")
            return try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(run.stdout.utf8)).id
        }
        let firstListed = try snap(listed, nil), firstUnlisted = try snap(unlisted, old)
        let keys = try DatabaseQueue(path: store).read { try Int64.fetchAll($0, sql: "SELECT Z_PK FROM ZITEM ORDER BY Z_PK") }
        let updated = Set(stride(from: 0, to: keys.count, by: keys.count / 6).prefix(6).map { keys[$0] })
        for key in updated { try write(store, "UPDATE ZITEM SET ZTITLE = 'edited ' || Z_PK WHERE Z_PK = ?", arguments: [key]) }
        let secondListed = try snap(listed, nil), secondUnlisted = try snap(unlisted, old)
        func changed(_ report: StoreDiff.Report) -> Set<Int64> {
            Set(report.entities.flatMap(\.objects).filter { $0.change == "changed" }.compactMap { Int64($0.object.split(separator: " ").last ?? "") })
        }
        let fast = try report(try storectl("diff", "--repo", listed, firstListed, secondListed, "--json"))
        let slow = try report(try storectl("diff", "--repo", unlisted, firstUnlisted, secondUnlisted, "--json"))
        #expect(changed(fast) == updated && changed(slow) == updated, "\(changed(fast).sorted()) \(changed(slow).sorted())")
        #expect(fast.entities.flatMap(\.objects).count == 6 && fast.stats.fallback == nil, "\(fast.entities)")
        let fastBytes = try #require(fast.stats.bytesDecompressed), slowBytes = try #require(slow.stats.bytesDecompressed)
        // Listed: the interior pages' frames, the chunks holding the 6 leaves on each side, a
        // leaf of each table (the walk reads one to know it has reached the leaves) and the
        // Core Data tables read whole (the model cache), each chunk only up to the last page
        // wanted in it: 3.0 MB here (9.7 MB with chunks decompressed whole), 22 MB unlisted.
        #expect(fastBytes * 4 < storeBytes && fastBytes * 4 < slowBytes, "decompressed \(fastBytes) of a \(storeBytes)-byte store (\(slowBytes) unlisted)")
        // Not listed: every frame of the first snapshot, whole, to find the interior pages.
        #expect(slowBytes >= storeBytes * 9 / 10, "decompressed \(slowBytes) of a \(storeBytes)-byte store")
        // Two thirds of the rows rewritten, then a prune to the last snapshot: the packs the
        // earlier ones filled are mostly garbage and repacked, interior pages apart and the
        // rest in chunks, so a diff against what they carry reads as little.
        try write(store, "UPDATE ZITEM SET ZTITLE = ZTITLE || ' (rewritten)' WHERE Z_PK % 3 != 0")
        let third = try snap(listed, nil)
        let pruned = try storectl("snapshot", "prune", "--repo", listed, "--keep-last", "1", "--json")
        #expect(pruned.status == 0, "\(pruned.stderr)")
        let prune = try JSONSerialization.jsonObject(with: Data(pruned.stdout.utf8)) as? [String: Any]
        #expect(((prune?["garbage"] as? [String: Any])?["repackedPacks"] as? Int ?? 0) > 0, "\(pruned.stdout)")
        try write(store, "UPDATE ZITEM SET ZTITLE = 'again' WHERE Z_PK = ?", arguments: [keys[7]])
        let fourth = try snap(listed, nil)
        let after = try report(try storectl("diff", "--repo", listed, third, fourth, "--json"))
        #expect(changed(after) == [keys[7]], "\(after.entities)")
        #expect(try #require(after.stats.bytesDecompressed) * 2 < storeBytes, "\(after.stats)")
        #expect(try storectl("repo", "check", "--repo", listed, "--read-data").status == 0)
    }

    @Test("every object of a 60,000-item store changed: the second snapshot's differing leaves (more than two batches of 512) are read ahead on a thread of their own while the first side's decode; exactly 60,000 changed, the same as two files say; a pack of the second snapshot damaged: 65 naming it, no hang")
    func manyLeavesReadAhead() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 60_000)
        let repo = try folder.repository()
        let first = try snapshot(store, repo)
        let before = Set(try FileManager.default.subpathsOfDirectory(atPath: repo + "/data"))
        let queue = try DatabaseQueue(path: store)
        try queue.writeWithoutTransaction { try $0.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
        try queue.close()
        try FileManager.default.copyItem(atPath: store, toPath: folder.file("before.sqlite"))
        try write(store, "UPDATE ZITEM SET ZTITLE = ZTITLE || ' (edited)', Z_OPT = Z_OPT + 1")
        let second = try snapshot(store, repo)
        let run = try storectl("diff", "--repo", repo, first, second, "--json", "--limit", "0")
        #expect(run.status == 2, "\(run.stderr)")
        let result = try report(run)
        let changed = result.entities.filter { $0.table == "ZITEM" }.map(\.changed).reduce(0, +)
        #expect(changed == 60_000 && result.stats.fallback == nil, "\(changed) changed, \(result.stats)")
        #expect(result.stats.leavesDecoded > 2 * 2 * 512, "enough leaves for the read-ahead to run: \(result.stats.leavesDecoded)")
        let files = try report(try storectl("diff", folder.file("before.sqlite"), store, "--json", "--limit", "0"))
        #expect(files.entities.filter { $0.table == "ZITEM" }.map(\.changed).reduce(0, +) == 60_000)
        // The second snapshot's packs, each damaged near its end (where the leaves it added are).
        let added = Set(try FileManager.default.subpathsOfDirectory(atPath: repo + "/data")).subtracting(before)
            .map { repo + "/data/" + $0 }.filter { FileSystem.kind(of: $0) == .file }
        #expect(!added.isEmpty)
        for pack in added {
            let handle = try #require(FileHandle(forUpdatingAtPath: pack))
            let size = try handle.seekToEnd()
            try handle.seek(toOffset: size * 3 / 4)
            let byte = try handle.read(upToCount: 1) ?? Data([0])
            try handle.seek(toOffset: size * 3 / 4)
            try handle.write(contentsOf: Data([byte[0] ^ 0xFF]))
            try handle.close()
        }
        let damaged = try storectl("diff", "--repo", repo, first, second, "--json", "--limit", "0")
        #expect(damaged.status == 65 && added.contains { damaged.stderr.contains(FileSystem.name(of: $0)) }, "\(damaged.status) \(damaged.stderr)")
    }

    @Test("a long value rewritten in place (same length, so the leaf's bytes may not change, only its overflow pages): found, in files and in snapshots")
    func overflowOnly() throws {
        let folder = try TempFolder()
        let store = folder.file("plain.sqlite")
        try write(store, """
            CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);
            INSERT INTO notes (body) VALUES (printf('%.*c', 30000, 'a')), ('short');
            """)
        let repo = try folder.repository()
        let first = try snapshot(store, repo)
        _ = try ChildProcess.run("/bin/cp", [store, folder.file("before.sqlite")])
        try write(store, "UPDATE notes SET body = printf('%.*c', 29999, 'a') || 'b' WHERE id = 1")
        let second = try snapshot(store, repo)
        for arguments in [["diff", "--repo", repo, first, second, "--json"], ["diff", folder.file("before.sqlite"), store, "--json"]] {
            let run = try ChildProcess.run(Binaries.storectl, arguments)
            #expect(run.status == 2, "\(arguments): \(run.stderr)")
            let result = try report(run)
            #expect(result.entities.count == 1 && result.entities.first?.changed == 1 && result.entities.first?.objects.first?.object == "id 1",
                    "\(arguments): \(result.entities)")
        }
        // For people, a long text is shown around where it changed.
        let text = try storectl("diff", folder.file("before.sqlite"), store)
        #expect(text.stdout.contains("…\"" + String(repeating: "a", count: 21) + "\" (30000 characters) → …\"" + String(repeating: "a", count: 20) + "b\" (30000 characters)"), "\(text.stdout)")
    }

    @Test("a plain SQLite store: a column and an index added are schema changes, rows by primary key, an added row named by its key once; bad input: not a database 65, missing 66, a snapshot id without --repo 66, one side 64")
    func plainAndBadInput() throws {
        let folder = try TempFolder()
        let a = folder.file("a.sqlite"), b = folder.file("b.sqlite")
        for path in [a, b] {
            try write(path, "CREATE TABLE t (code TEXT PRIMARY KEY, n INTEGER); INSERT INTO t VALUES ('x', 1), ('y', 2)")
        }
        try write(b, "ALTER TABLE t ADD COLUMN note TEXT DEFAULT 'none'; CREATE INDEX t_n ON t(n); UPDATE t SET n = 5 WHERE code = 'y'")
        let run = try storectl("diff", a, b, "--json")
        #expect(run.status == 2, "\(run.stderr)")
        let result = try report(run)
        #expect(Set(result.schema.map { "\($0.change) \($0.type) \($0.name)" }) == ["changed table t", "added index t_n"])
        let rows = try #require(result.entities.first { $0.table == "t" })
        #expect(rows.changed == 1 && rows.objects.first?.object == "code \"y\"" && rows.attributes == ["n": 1], "\(rows)")
        // An added row is named by its key, which its values do not repeat (it said `+ code "z": code "z"; n 7`).
        try write(b, "INSERT INTO t (code, n) VALUES ('z', 7)")
        let added = try storectl("diff", a, b)
        #expect(added.stdout.contains("  + code \"z\": n 7; note \"none\"\n"), "\(added.stdout)")
        let junk = folder.file("junk.sqlite")
        try Data(repeating: 7, count: 8192).write(to: URL(fileURLWithPath: junk))
        let bad = try storectl("diff", a, junk)
        #expect(bad.status == 65 && bad.stderr.contains(junk), "\(bad.stderr)")
        let missing = try storectl("diff", a, folder.file("nope.sqlite"))
        #expect(missing.status == 66, "\(missing.stderr)")
        let noRepo = try storectl("diff", a, "20261125T011206Z-cd1e69")
        #expect(noRepo.status == 66 && noRepo.stderr.contains("--repo"), "\(noRepo.stderr)")
        let one = try storectl("diff", a)
        #expect(one.status == 64 && one.stderr.contains("two sides"), "\(one.stderr)")
    }

    @Test("a Core Data store without a model cache (the sample store): a column Core Data declared TIMESTAMP is shown as a date, not seconds since 2001; a plain table's TIMESTAMP column stays a number")
    func datesWithoutModel() throws {
        let folder = try TempFolder()
        let made = try ChildProcess.run(Binaries.lab, ["make-store", folder.file("a.sqlite"), "--items", "20"])
        #expect(made.status == 0, "\(made.stderr)")
        let a = folder.file("a.sqlite"), b = folder.file("b.sqlite")
        try write(a, "CREATE TABLE log (id INTEGER PRIMARY KEY, at TIMESTAMP); INSERT INTO log VALUES (1, 800000000)")
        try FileManager.default.copyItem(atPath: a, toPath: b)
        try write(b, "UPDATE ZITEM SET ZCREATEDAT = 800000000 WHERE Z_PK = 3; UPDATE log SET at = 800003600")
        let run = try storectl("diff", a, b)
        #expect(run.status == 2, "\(run.stderr)")
        #expect(run.stdout.contains("→ 2026-05-09T06:13:20.000Z"), "\(run.stdout)")
        #expect(run.stdout.contains("800000000 → 800003600"), "\(run.stdout)")
    }

    @Test("WITHOUT ROWID tables (a two-column key, a text key): a row whose other columns changed is one row changed with its before and after, paired by primary key; rows only one side has are added and removed")
    func withoutRowidRowsByKey() throws {
        let folder = try TempFolder()
        let a = folder.file("a.sqlite"), b = folder.file("b.sqlite")
        for path in [a, b] {
            try write(path, """
                CREATE TABLE c (a INTEGER, b TEXT, v, PRIMARY KEY (a, b)) WITHOUT ROWID; INSERT INTO c VALUES (1, 'x', 10), (2, 'y', 20), (3, 'z', 30);
                CREATE TABLE k (name TEXT PRIMARY KEY, v) WITHOUT ROWID; INSERT INTO k VALUES ('a', 1), ('b', 2)
                """)
        }
        try write(b, "UPDATE c SET v = 99 WHERE a = 1; DELETE FROM c WHERE a = 3; INSERT INTO c VALUES (4, 'q', 40); UPDATE k SET v = 5 WHERE name = 'a'")
        let run = try storectl("diff", a, b, "--json")
        #expect(run.status == 2, "\(run.stderr)")
        let result = try report(run)
        let c = try #require(result.entities.first { $0.table == "c" })
        #expect(c.changed == 1 && c.added == 1 && c.removed == 1 && c.attributes == ["v": 1], "\(c)")
        #expect(c.objects.first { $0.change == "changed" }?.object == "a 1, b \"x\"", "\(c.objects)")
        let k = try #require(result.entities.first { $0.table == "k" })
        #expect(k.changed == 1 && k.added == 0 && k.removed == 0 && k.objects.first?.object == "name \"a\"", "\(k)")
    }

    @Test("what a new user typed wrong gets a message naming it: a truncated file (65, how far, and what to do), a --scratch folder that is not there (73 naming --scratch), --limit -1 (64, not \"missing value\"), --at without a time zone (64, how to add one)")
    func mistakesAreNamed() throws {
        let folder = try TempFolder()
        let a = folder.file("a.sqlite")
        try write(a, "CREATE TABLE t (x BLOB); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 5000) INSERT INTO t SELECT randomblob(100) FROM c")
        let whole = try Data(contentsOf: URL(fileURLWithPath: a))
        let cut = folder.file("cut.sqlite")
        try whole.prefix(whole.count / 3).write(to: URL(fileURLWithPath: cut))
        let truncated = try storectl("diff", a, cut)
        #expect(truncated.status == 65 && truncated.stderr.contains("truncated") && truncated.stderr.contains("preflight"), "\(truncated.stderr)")
        let scratch = try storectl("diff", a, a, "--scratch", folder.file("none"))
        #expect(scratch.status == 73 && scratch.stderr.contains("--scratch") && scratch.stderr.contains("no such folder") && scratch.stderr.contains("mkdir -p"), "\(scratch.stderr)")
        // A file given where a folder goes is not told to mkdir it.
        let file = try storectl("diff", a, a, "--scratch", a)
        #expect(file.status == 73 && file.stderr.contains("a file, not a folder") && !file.stderr.contains("mkdir"), "\(file.stderr)")
        let limit = try storectl("diff", a, a, "--limit", "-1")
        #expect(limit.status == 64 && limit.stderr.contains("0 or more"), "\(limit.stderr)")
        let zone = try storectl("diff", "--repo", folder.file("repo"), "--at", "2026-11-28 15:01:45", a)
        #expect(zone.status == 64 && zone.stderr.contains("no time zone"), "\(zone.stderr)")
    }

    @Test("a rollback-mode store with a hot journal (a writer killed mid-transaction after its cache spilled into the file): 74 naming the journal and how to roll it back, not SQLite's \"attempt to write a readonly database\"; once rolled back, the same as before the transaction (0)")
    func hotJournal() throws {
        let folder = try TempFolder()
        let a = folder.file("a.sqlite"), b = folder.file("b.sqlite")
        for path in [a, b] {
            try write(path, "PRAGMA journal_mode = DELETE; CREATE TABLE t (x BLOB); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 3000) INSERT INTO t SELECT zeroblob(100) FROM c")
        }
        try leaveHotJournal(b, update: "UPDATE t SET x = randomblob(100)")
        let run = try storectl("diff", a, b)
        #expect(run.status == 74 && run.stderr.contains("hot rollback journal") && run.stderr.contains("\(b)-journal") && run.stderr.contains("PRAGMA quick_check"), "\(run.status) \(run.stderr)")
        let rolled = try ChildProcess.run("/usr/bin/python3", ["-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA quick_check').fetchall(); c.close()", b])
        #expect(rolled.status == 0, "\(rolled.stderr)")
        let after = try storectl("diff", a, b)
        #expect(after.status == 0, "\(after.status) \(after.stdout) \(after.stderr)")
    }

    @Test("diff of a live store against its snapshot 8 times under a writer committing every 2 ms: every run exits 2, and the rows it reports added are exactly a prefix of the writer's commits that includes all committed before it started")
    func underWriter() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 5_000)
        let repo = try folder.repository()
        let base = try snapshot(store, repo)
        let log = folder.file("commits.log"), ready = folder.file("ready")
        let writer = try ChildProcess.Running(Binaries.lab, ["writer", store, "--interval-ms", "2", "--ready-file", ready,
                                                             "--commit-log", log, "--autocheckpoint", "100"])
        defer { writer.signal(SIGTERM); _ = writer.wait() }
        #expect(ChildProcess.waitFor(file: ready))
        var failures: [String] = []
        for round in 1...8 {
            let started = Date().timeIntervalSince1970
            let run = try storectl("diff", "--repo", repo, base, store, "--json", "--entity", "Task,Note,Item")
            guard run.status == 2, let result = try? report(run) else {
                failures.append("round \(round): exit \(run.status): \(run.stderr.prefix(300))")
                continue
            }
            let added = result.entities.flatMap(\.objects).filter { $0.change == "added" }
                .compactMap { Int64($0.object.split(separator: " ").last ?? "") }.sorted()
            let logged = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").compactMap { line -> (Int64, Double)? in
                let fields = line.split(separator: " ")
                guard fields.count == 2, let key = Int64(fields[0]), let at = Double(fields[1]) else { return nil }
                return (key, at)
            }
            let before = logged.filter { $0.1 < started }.count
            if added != Array(logged.map(\.0).prefix(added.count)) { failures.append("round \(round): the added rows are not a prefix of the writer's commits") }
            if added.count < before { failures.append("round \(round): \(before) committed before it started, \(added.count) reported") }
        }
        #expect(failures.isEmpty, "\(failures)")
    }

    @Test("a live store whose -wal is non-empty but every frame of it checkpointed (SQLite keeps the file's length) is read in place, not copied, and says exactly what changed; a commit not yet checkpointed makes it read a consistent copy again")
    func checkpointedWalReadInPlace() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 3_000)
        let repo = try folder.repository()
        let base = try snapshot(store, repo)
        // The app: a connection held open, WAL mode, that commits and checkpoints (PASSIVE) as SQLite's autocheckpoint does.
        let app = try DatabaseQueue(path: store)
        defer { try? app.close() }
        try app.writeWithoutTransaction { db in
            try db.execute(sql: "UPDATE ZITEM SET ZTITLE = 'first ' || Z_PK WHERE Z_PK <= 40")
            _ = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(PASSIVE)")
        }
        #expect(((try? FileManager.default.attributesOfItem(atPath: store + "-wal")[.size] as? Int) ?? 0) > 32, "the -wal keeps its length")
        let inPlace = try report(try storectl("diff", "--repo", repo, base, store, "--json"))
        #expect(inPlace.b.copied == false, "every frame is in the file: read in place")
        #expect(inPlace.entities.flatMap(\.objects).filter { $0.change == "changed" }.count == 40)
        try app.writeWithoutTransaction { db in try db.execute(sql: "UPDATE ZITEM SET ZTITLE = 'second ' || Z_PK WHERE Z_PK > 40 AND Z_PK <= 45") }
        let copied = try report(try storectl("diff", "--repo", repo, base, store, "--json"))
        #expect(copied.b.copied == true, "a commit only the -wal holds: a consistent copy")
        #expect(copied.entities.flatMap(\.objects).filter { $0.change == "changed" }.count == 45)
    }

    @Test("a file longer than its header's page count (grown in chunks, as with SQLITE_FCNTL_CHUNK_SIZE: zero pages at its end) counts the pages SQLite counts, and is the same as the file without them")
    func fileGrownInChunks() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 500)
        try DatabaseQueue(path: store).writeWithoutTransaction { _ = try Row.fetchOne($0, sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
        let pages = try DatabaseQueue(path: store).read { try Int.fetchOne($0, sql: "PRAGMA page_count") } ?? 0
        let grown = folder.file("grown.sqlite")
        var bytes = try Data(contentsOf: URL(fileURLWithPath: store))
        bytes.append(Data(count: 16 * 4096))
        try bytes.write(to: URL(fileURLWithPath: grown))
        let run = try storectl("diff", store, grown)
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        #expect(run.stdout.contains("a: \(store) (\(pages) pages") && run.stdout.contains("b: \(grown) (\(pages) pages"), "\(pages): \(run.stdout)")
    }

    @Test("damaged pages never crash it: 40 copies of the Notes store, each with 16 random bytes written over a random page, diffed against the original: every run exits 0, 2 or 65, and a 65 names the file or the page")
    func damagedPages() throws {
        let folder = try TempFolder()
        let root = (ReadmeTranscriptTests.packageRoot as NSString).appendingPathComponent("Tests/Fixtures/coredata/notes-macos15/NoteStore-macOS-15-Seqoia.sqlite")
        let original = folder.file("original.sqlite")
        try FileManager.default.copyItem(atPath: root, toPath: original)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: original))
        let pageSize = 4096, pages = bytes.count / pageSize
        var generator = SystemRandomNumberGenerator()
        var outcomes: [Int32: Int] = [:]
        var failures: [String] = []
        for round in 0..<40 {
            var damaged = bytes
            let page = Int.random(in: 0..<pages, using: &generator)
            let offset = page * pageSize + Int.random(in: 0..<(pageSize - 16), using: &generator)
            for i in 0..<16 { damaged[offset + i] = UInt8.random(in: 0...255, using: &generator) }
            let path = folder.file("damaged-\(round).sqlite")
            try damaged.write(to: URL(fileURLWithPath: path))
            let run = try storectl("diff", original, path, "--json")
            outcomes[run.status, default: 0] += 1
            if ![0, 2, 65].contains(run.status) {
                failures.append("page \(page + 1) byte \(offset % pageSize): exit \(run.status): \(run.stderr.prefix(400))")
            } else if run.status == 65, !run.stderr.contains(path) && !run.stderr.contains("page") {
                failures.append("page \(page + 1): a 65 that names nothing: \(run.stderr.prefix(200))")
            }
        }
        #expect(failures.isEmpty, "\(failures)")
        #expect((outcomes[2] ?? 0) + (outcomes[65] ?? 0) > 0, "the damage was seen at least once: \(outcomes)")
    }

    @Test("damage the page comparison took for free space or derived data is 65 naming the file and the page (a trial: both were \"same\", exit 0): a zeroed index leaf, a pointer-map page with entries SQLite never writes; the undamaged copy still diffs the same")
    func damageNotTakenForFreeSpace() throws {
        let folder = try TempFolder()
        let root = (ReadmeTranscriptTests.packageRoot as NSString).appendingPathComponent("Tests/Fixtures/coredata/notes-macos15/NoteStore-macOS-15-Seqoia.sqlite")
        let original = folder.file("original.sqlite")
        try FileManager.default.copyItem(atPath: root, toPath: original)
        let (leaf, autoVacuum) = try DatabaseQueue(path: original, configuration: { var c = Configuration(); c.readonly = true; return c }()).read { db in
            (try Int.fetchOne(db, sql: "SELECT pageno FROM dbstat WHERE name = 'ZICCLOUDSYNCINGOBJECT_ZFOLDER_INDEX' AND pagetype = 'leaf' ORDER BY pageno LIMIT 1"),
             try Int.fetchOne(db, sql: "PRAGMA auto_vacuum"))
        }
        let page = try #require(leaf)
        #expect(autoVacuum != 0, "the fixture has pointer-map pages")
        let bytes = try Data(contentsOf: URL(fileURLWithPath: original))
        var zeroed = bytes
        zeroed.replaceSubrange((page - 1) * 4096..<(page * 4096), with: Data(count: 4096))
        let zeroedPath = folder.file("zeroed.sqlite")
        try zeroed.write(to: URL(fileURLWithPath: zeroedPath))
        let one = try storectl("diff", original, zeroedPath)
        #expect(one.status == 65 && one.stderr.contains(zeroedPath) && (one.stderr.contains("page \(page) is all zeros") || one.stderr.contains("page \(page) is not a b-tree page")), "\(one.status) \(one.stdout)\(one.stderr)")
        var mapped = bytes
        for k in 0..<8 { mapped[4096 + 10 + 5 * k] = 0xEE }   // page 2's entries' type bytes
        let mappedPath = folder.file("pointer-map.sqlite")
        try mapped.write(to: URL(fileURLWithPath: mappedPath))
        let two = try storectl("diff", mappedPath, original)
        #expect(two.status == 65 && two.stderr.contains(mappedPath) && two.stderr.contains("pointer-map page 2"), "\(two.status) \(two.stdout)\(two.stderr)")
        #expect(try storectl("diff", original, root).status == 0)
    }

    @Test("--key with an attribute the entity lacks (the Notes store): 64, and the hint lists the entity's own attributes from the model (ICNote's identifier, not ICAccount's accountType), all of them or a count of the rest; blank sides are 64")
    func keyHintNamesTheEntitysAttributes() throws {
        let folder = try TempFolder()
        let root = (ReadmeTranscriptTests.packageRoot as NSString).appendingPathComponent("Tests/Fixtures/coredata/notes-macos15/NoteStore-macOS-15-Seqoia.sqlite")
        let a = folder.file("a.sqlite"), b = folder.file("b.sqlite")
        try FileManager.default.copyItem(atPath: root, toPath: a)
        try FileManager.default.copyItem(atPath: root, toPath: b)
        let run = try storectl("diff", a, b, "--key", "ICNote.bogus")
        #expect(run.status == 64 && run.stderr.contains("ICNote has no attribute bogus"), "\(run.stderr)")
        let hint = run.stderr.components(separatedBy: "its attributes: ").last ?? ""
        #expect(hint.contains("identifier") && !hint.contains("accountType"), "\(hint)")
        let names = hint.components(separatedBy: ", ")
        #expect(names.count <= 61 && (names.count < 60 || hint.contains(" more")), "\(hint)")
        let blank = try storectl("diff", a, "")
        #expect(blank.status == 64 && blank.stderr.contains("a blank side"), "\(blank.stderr)")
    }

    @Test("external data: a file changed, one removed and one added in the store's _EXTERNAL_DATA are listed by name and size, against a copy and against a snapshot")
    func externalData() throws {
        let folder = try TempFolder()
        let made = try ChildProcess.run(Binaries.lab, ["make-store", folder.file("Tasks.sqlite"), "--items", "500", "--external-files", "3"])
        #expect(made.status == 0, "\(made.stderr)")
        let store = folder.file("Tasks.sqlite")
        let repo = try folder.repository()
        let before = try snapshot(store, repo)
        let external = StoreFile(unchecked: store).externalDataPath
        let names = try FileManager.default.contentsOfDirectory(atPath: external).sorted()
        #expect(names.count == 3)
        // A store kept aside as storectl keeps one (a migration's failed state: the database as
        // `<store>.failed-migration-<time>`, its folder as `.<stem>.failed-migration-<time>_SUPPORT`)
        // has its external data where it was kept: the same, not three files removed.
        let kept = store + ".failed-migration-20261202T015214Z"
        try FileManager.default.copyItem(atPath: store, toPath: kept)
        try FileManager.default.copyItem(atPath: StoreFile(unchecked: store).supportPath, toPath: folder.file(".Tasks.failed-migration-20261202T015214Z_SUPPORT"))
        let keptRun = try storectl("diff", store, kept, "--json")
        let keptFiles = try report(keptRun).externalData
        #expect(keptRun.status == 0 && keptFiles.isEmpty, "\(keptRun.stdout)\(keptRun.stderr)")
        try Data("changed bytes".utf8).write(to: URL(fileURLWithPath: (external as NSString).appendingPathComponent(names[0])))
        try FileManager.default.removeItem(atPath: (external as NSString).appendingPathComponent(names[1]))
        try Data("new".utf8).write(to: URL(fileURLWithPath: (external as NSString).appendingPathComponent("NEW-FILE")))
        let run = try storectl("diff", "--repo", repo, before, store, "--json")
        #expect(run.status == 2, "\(run.stderr)")
        let files = try report(run).externalData
        #expect(Set(files.map { "\($0.change) \($0.path)" }) == ["changed \(names[0])", "removed \(names[1])", "added NEW-FILE"], "\(files.map(\.path))")
        #expect(files.first { $0.change == "changed" }?.after == 13)
    }

    @Test("points: `--at` twice compares two points recorded by replicate (the one commit between them, by content id); a point against the store after it is the same")
    func points() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 1_000)
        let repo = try folder.repository()
        let follower = try ChildProcess.Running(Binaries.storectl, ["replicate", store, "--repo", repo, "--sync-interval", "200ms", "--quiet"])
        defer { follower.signal(SIGTERM); _ = follower.wait() }
        // The two points' times from the listing (the base, then the commit's point once it is
        // in), not the wall clock: a loaded machine made the base after a fixed 1.5 s.
        #expect(waitUntil { newestListedPoint(repo) != nil }, "no base within 60 s")
        let before = try #require(newestListedPoint(repo))
        try write(store, "UPDATE ZITEM SET ZTITLE = 'between the points' WHERE Z_PK = 3")
        #expect(waitUntil { newestListedPoint(repo).map { $0 != before } ?? false }, "the commit's point was not in within 60 s")
        let after = try #require(newestListedPoint(repo))
        follower.signal(SIGTERM)
        #expect(follower.wait().status == 0)
        let run = try storectl("diff", "--repo", repo, "--at", before, "--at", after, "--json")
        #expect(run.status == 2, "\(run.stderr)")
        let result = try report(run)
        #expect(result.a.kind == "point" && result.b.kind == "point" && result.stats.method == "content ids")
        let changed = result.entities.flatMap(\.objects)
        #expect(changed.count == 1 && changed.first?.object.hasSuffix(" 3") == true && changed.first?.values.first?.after == "\"between the points\"", "\(changed)")
        let same = try storectl("diff", "--repo", repo, "--at", after, store)
        #expect(same.status == 0, "\(same.stdout)\(same.stderr)")
        // The points by their labels, as diff and restore print them (`<chain>@<number>`): the same
        // two points, the same one change; restored by label, the same content as by time.
        let labels = [result.a.name, result.b.name].map { String($0.split(separator: " ").first ?? "") }
        #expect(labels.allSatisfy { SnapshotID.pointLabel($0) != nil }, "\(labels)")
        let byLabel = try storectl("diff", "--repo", repo, labels[0], labels[1], "--json")
        #expect(byLabel.status == 2, "\(byLabel.stderr)")
        let labelled = try report(byLabel)
        #expect(labelled.a.kind == "point" && labelled.entities.flatMap(\.objects).map(\.object) == changed.map(\.object), "\(labelled.entities)")
        let fromLabel = folder.file("by-label.sqlite"), fromTime = folder.file("by-time.sqlite")
        let restored = try storectl("snapshot", "restore", "--repo", repo, labels[1], "--to", fromLabel, "--json")
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(try JSON.decoder().decode(SnapshotRestore.Result.self, from: Data(restored.stdout.utf8)).point == labels[1])
        #expect(try storectl("snapshot", "restore", "--repo", repo, "--at", after, "--to", fromTime).status == 0)
        #expect(try StoreState.digest(fromLabel, journalMode: false) == StoreState.digest(fromTime, journalMode: false))
        // A number past the chain's last point, or a chain the repository does not have: 66.
        let chain = labels[1].split(separator: "@")[0]
        let past = try storectl("snapshot", "restore", "--repo", repo, "\(chain)@99999", "--to", folder.file("past.sqlite"))
        #expect(past.status == 66 && past.stderr.contains("is not in"), "\(past.stderr)")
        let none = try storectl("diff", "--repo", repo, "20200101T000000Z-abcdef@1", store)
        #expect(none.status == 66 && none.stderr.contains("no chain of points based on snapshot 20200101T000000Z-abcdef"), "\(none.stderr)")
    }

    @Test("--json carries each value as stored beside its display form: NULL null, integers and reals numbers, text whole and unescaped, blobs by size and SHA-256; the text report's values stay for people")
    func typedValues() throws {
        let folder = try TempFolder()
        let a = folder.file("a.sqlite"), b = folder.file("b.sqlite")
        let long = String(repeating: "long text ", count: 100) + "\u{1b}[31m the end"
        try write(a, "CREATE TABLE v (id INTEGER PRIMARY KEY, n INTEGER, r REAL, s TEXT, x BLOB); INSERT INTO v VALUES (1, 5, 1.5, 'old \"q\"', x'00ff'), (2, 1, NULL, 'gone', NULL);")
        _ = try ChildProcess.run("/bin/cp", [a, b])
        try write(b, "UPDATE v SET n = NULL, r = 798123456.25, s = ?, x = x'0102' WHERE id = 1; DELETE FROM v WHERE id = 2;", arguments: [long])
        let run = try storectl("diff", a, b, "--json")
        #expect(run.status == 2, "\(run.stderr)")
        let objects = try report(run).entities.first { $0.table == "v" }?.objects ?? []
        let changed = try #require(objects.first { $0.change == "changed" })
        func value(_ name: String) -> StoreDiff.ValueChange? { changed.values.first { $0.name == name } }
        #expect(value("n")?.beforeValue == .integer(5) && value("n")?.before == "5" && value("n")?.after == "NULL" && value("n")?.afterValue == .null,
                "a stored NULL reads back as .null, not as no value: \(String(describing: value("n")))")
        #expect(value("r")?.beforeValue == .real(1.5) && value("r")?.afterValue == .real(798_123_456.25))
        #expect(value("s")?.beforeValue == .text("old \"q\"") && value("s")?.afterValue == .text(long), "whole, unescaped")
        #expect(value("s")?.after?.contains("\\u{1b}") == true, "the display form stays escaped: \(value("s")?.after ?? "")")
        #expect(value("x")?.beforeValue == .blob(bytes: 2, sha256: "06eb7d6a69ee19e5fbdf749018d3d2abfa04bcbd1365db312eb86dc7169389b8"), "\(String(describing: value("x")))")
        let removed = try #require(objects.first { $0.change == "removed" })
        #expect(removed.values.first { $0.name == "s" }?.beforeValue == .text("gone") && removed.values.first { $0.name == "s" }?.afterValue == nil)
        // NULL is JSON null where a side has it, absent where the side has no such value.
        #expect(run.stdout.contains("\"afterValue\" : null"), "\(run.stdout)")
        // The text report has no typed values to carry.
        #expect(try storectl("diff", a, b).status == 2)
    }

    @Test("a plain store's rows are paired by their primary key when it is not the rowid: INSERT OR REPLACE (a new rowid) is one row changed, a delete and an insert reusing a rowid are one removed and one added (a TEXT key, a composite one); --key table.column pairs by another column; user_version is a schema change; control characters and quotes in values are escaped; stdout that cannot be written is 74")
    func plainKeysAndOutput() throws {
        let folder = try TempFolder()
        let a = folder.file("a.sqlite"), b = folder.file("b.sqlite")
        try write(a, """
            CREATE TABLE u (email TEXT PRIMARY KEY, name TEXT);
            INSERT INTO u VALUES ('a@x', 'A'), ('b@x', 'B'), ('c@x', 'C');
            CREATE TABLE c (x INTEGER, y TEXT, v TEXT, PRIMARY KEY (x, y));
            INSERT INTO c VALUES (1, 'a', 'one'), (2, 'b', 'two');
            CREATE TABLE t (id INTEGER PRIMARY KEY, code TEXT, v TEXT);
            INSERT INTO t VALUES (1, 'k1', 'v1'), (2, 'k2', 'v2');
            """)
        _ = try ChildProcess.run("/bin/cp", [a, b])
        try write(b, """
            INSERT OR REPLACE INTO u VALUES ('a@x', 'A2');
            DELETE FROM u WHERE email = 'c@x'; INSERT INTO u VALUES ('d@x', 'D');
            DELETE FROM c WHERE x = 2; INSERT INTO c VALUES (3, 'c', 'three'); INSERT OR REPLACE INTO c VALUES (1, 'a', 'uno');
            DELETE FROM t; INSERT INTO t VALUES (1, 'k2', 'v2'), (2, 'k1', 'v1 changed');
            PRAGMA user_version = 7;
            """)
        let run = try storectl("diff", a, b, "--json")
        #expect(run.status == 2, "\(run.stderr)")
        let result = try report(run)
        func objects(_ table: String) -> [String] {
            (result.entities.first { $0.table == table }?.objects ?? []).map { "\($0.change) \($0.object)" }.sorted()
        }
        #expect(objects("u") == ["added email \"d@x\"", "changed email \"a@x\"", "removed email \"c@x\""], "\(objects("u"))")
        #expect(objects("c") == ["added x 3, y \"c\"", "changed x 1, y \"a\"", "removed x 2, y \"b\""], "\(objects("c"))")
        #expect(result.entities.first { $0.table == "u" }?.objects.first { $0.change == "changed" }?.values.map { "\($0.name) \($0.before ?? "") → \($0.after ?? "")" } == ["name \"A\" → \"A2\""])
        #expect(result.schema.contains { $0.type == "pragma" && $0.name == "user_version" && $0.before == "0" && $0.after == "7" }, "\(result.schema)")
        // A table's columns added and removed are said in the text report, not only `~ table`.
        let altered = folder.file("altered.sqlite")
        _ = try ChildProcess.run("/bin/cp", [a, altered])
        try write(altered, "ALTER TABLE u ADD COLUMN phone TEXT; ALTER TABLE c DROP COLUMN v;")
        let columns = try storectl("diff", a, altered)
        #expect(columns.stdout.contains("~ table u (columns added: phone)") && columns.stdout.contains("~ table c (columns removed: v)"), "\(columns.stdout)")
        // By rowid, t's two rows swapped codes; by --key t.code, k1's value changed and k2 is the same.
        #expect(objects("t") == ["changed id 1", "changed id 2"], "\(objects("t"))")
        let keyed = try report(try storectl("diff", a, b, "--json", "--key", "t.code"))
        let t = keyed.entities.first { $0.table == "t" }
        #expect(t?.changed == 1 && t?.added == 0 && t?.removed == 0 && t?.objects.first?.values.map(\.name) == ["v"], "\(String(describing: t))")
        // A row whose rowid alone changed, paired by --key: counted as renumbered (it was "same"
        // with nothing said), listed with --bookkeeping.
        let moved = folder.file("moved.sqlite")
        _ = try ChildProcess.run("/bin/cp", [a, moved])
        try write(moved, "UPDATE t SET id = 3 WHERE id = 1")
        let renumbered = try storectl("diff", a, moved, "--json", "--key", "t.code")
        let counted = try report(renumbered)
        #expect(renumbered.status == 0 && counted.same && counted.bookkeeping.renumbered == 1, "\(renumbered.stdout)")
        let said = try storectl("diff", a, moved, "--key", "t.code")
        #expect(said.status == 0 && said.stdout.contains("1 object renumbered under --key"), "\(said.stdout)")
        let listed = try storectl("diff", a, moved, "--key", "t.code", "--bookkeeping")
        #expect(listed.stdout.contains(#"code "k1" (id 1 → 3)"#), "\(listed.stdout)")
        // A row added with no value for the key is not paired by it, and said (JSON: keyless).
        let nulls = folder.file("nulls.sqlite")
        _ = try ChildProcess.run("/bin/cp", [b, nulls])
        try write(nulls, "INSERT INTO t VALUES (3, NULL, 'v3')")
        let keyless = try report(try storectl("diff", a, nulls, "--json", "--key", "t.code"))
        #expect(keyless.keyless == ["t.code": 1] && keyless.entities.first { $0.table == "t" }?.added == 1, "\(keyless.keyless)")

        // A value that would move the cursor or recolour the terminal is shown escaped.
        try write(b, "UPDATE t SET v = char(13) || 'over' || char(27) || '[31m' || '\"q\\' WHERE id = 1")
        let text = try storectl("diff", a, b)
        #expect(text.stdout.contains(#""\rover\u{1b}[31m\"q\\""#) && !text.stdout.contains("\u{1b}"), "\(text.stdout)")

        // Output that cannot be written: 74 and why, not a silent 2 (or 0).
        for sides in [[a, b], [a, a]] {
            let full = try ChildProcess.run("/bin/sh", ["-c", "\"$0\" diff \"$1\" \"$2\" > /dev/full", Binaries.storectl] + sides)
            #expect(full.status == 74 && full.stderr.contains("cannot write the output"), "\(full.status) \(full.stderr)")
        }
    }

    @Test("Core Data: an object whose Z_ENT changed is one object removed (of the old entity) and one added (of the new), not a changed attribute; --key with a relationship or Z_PK is 64; a --key value two objects share matches neither and is said")
    func entityChangeAndKeys() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 200)
        let before = folder.file("before.sqlite")
        _ = try ChildProcess.run("/bin/cp", [store, before])
        let entities = try DatabaseQueue(path: store).read { try Row.fetchAll($0, sql: "SELECT Z_ENT, Z_NAME FROM Z_PRIMARYKEY WHERE Z_NAME IN ('Task', 'Note')") }
        let byName = Dictionary(uniqueKeysWithValues: entities.map { (($0["Z_NAME"] as String?) ?? "", ($0["Z_ENT"] as Int?) ?? 0) })
        let task = try #require(byName["Task"]), note = try #require(byName["Note"])
        let pk = try #require(try DatabaseQueue(path: store).read { try Int64.fetchOne($0, sql: "SELECT Z_PK FROM ZITEM WHERE Z_ENT = ? ORDER BY Z_PK LIMIT 1", arguments: [task]) })
        try write(store, "UPDATE ZITEM SET Z_ENT = ? WHERE Z_PK = ?", arguments: [note, pk])
        let result = try report(try storectl("diff", before, store, "--json"))
        let changes = result.entities.map { "\($0.entity ?? $0.table): +\($0.added) -\($0.removed) ~\($0.changed)" }.sorted()
        #expect(changes == ["Note: +1 -0 ~0", "Task: +0 -1 ~0"], "\(changes)")

        let relationship = try storectl("diff", before, store, "--key", "Item.category")
        #expect(relationship.status == 64 && relationship.stderr.contains("is a relationship"), "\(relationship.stderr)")
        #expect(try storectl("diff", before, store, "--key", "Item.Z_PK").status == 64)
        let toMany = try storectl("diff", before, store, "--key", "Item.tags")
        #expect(toMany.status == 64 && toMany.stderr.contains("tags is a relationship (to-many to Tag)"), "\(toMany.stderr)")

        // Renumbered objects whose --key value (a priority) others share: not matched by it, said.
        let renumbered = folder.file("renumbered.sqlite")
        _ = try ChildProcess.run("/bin/cp", [before, renumbered])
        try write(renumbered, "UPDATE ZITEM SET Z_PK = Z_PK + 100000 WHERE Z_PK <= 20")
        let shared = try storectl("diff", before, renumbered, "--json", "--key", "Item.priority")
        let sharedReport = try report(shared)
        #expect(shared.stderr.contains("share") && !sharedReport.ambiguousKeys.isEmpty, "\(shared.stderr) \(sharedReport.ambiguousKeys)")
        #expect(sharedReport.entities.reduce(0) { $0 + $1.changed } == 0, "no object is paired by a shared value")
    }

    @Test("a new user's trial of diff: --entity of a sub-entity shows its supertype's links (it said same), --entity leaves external data out, --limit caps the external files, a changed file says its hashes, a dropped column's values are a change, NULL is NULL, a table named in --key says its entity, a name that is neither file nor id with --repo says both, two different stores are warned of")
    func newUserTrial() throws {
        let folder = try TempFolder()
        let made = try ChildProcess.run(Binaries.lab, ["make-store", folder.file("a.sqlite"), "--items", "300", "--external-files", "4"])
        #expect(made.status == 0, "\(made.stderr)")
        let a = folder.file("a.sqlite"), b = folder.file("b.sqlite")
        _ = try storectl("backup", a, "-o", b)
        // A Task's tag link (Item.tags is declared on Item, Task's supertype).
        let task = try #require(try DatabaseQueue(path: b).read { try Int64.fetchOne($0, sql: "SELECT Z_2ITEMS FROM Z_2TAGS JOIN ZITEM ON Z_PK = Z_2ITEMS WHERE Z_ENT = 3 LIMIT 1") })
        try write(b, "DELETE FROM Z_2TAGS WHERE Z_2ITEMS = ?", arguments: [task])
        let byTask = try storectl("diff", a, b, "--entity", "Task")
        #expect(byTask.status == 2 && byTask.stdout.contains("Item.tags (Z_2TAGS)") && !byTask.stdout.contains("\nsame"), "\(byTask.stdout)")
        // External data: one file changed at the same size.
        let folderB = StoreFile(unchecked: b).externalDataPath
        let files = try FileManager.default.contentsOfDirectory(atPath: folderB).sorted()
        let first = try #require(files.first)
        let path = (folderB as NSString).appendingPathComponent(first)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        bytes[0] ^= 0xff
        try bytes.write(to: URL(fileURLWithPath: path))
        let whole = try storectl("diff", a, b)
        #expect(whole.stdout.contains("external data: 1 file differs") && whole.stdout.contains("sha256") == false && whole.stdout.contains(" → "), "\(whole.stdout)")
        let line = whole.stdout.split(separator: "\n").first { $0.contains(first) }.map(String.init) ?? ""
        let hashes = line.split(whereSeparator: { $0 == " " || $0 == ")" }).filter { $0.count == 12 && $0.allSatisfy(\.isHexDigit) }
        #expect(hashes.count == 2 && hashes[0] != hashes[1], "a change at the same size shows its hashes: \(line)")
        let tagsOnly = try storectl("diff", a, b, "--entity", "Category")
        #expect(tagsOnly.status == 0 && !tagsOnly.stdout.contains("external data"), "--entity leaves external data out: \(tagsOnly.stdout)")
        let counts = try storectl("diff", a, b, "--limit", "0")
        #expect(counts.stdout.contains("external data: 1 file differs") && !counts.stdout.contains(first), "--limit 0: counts only: \(counts.stdout)")
        // A column dropped: its values are a change (it was a schema change alone), shown as such; NULL as NULL.
        let c = folder.file("c.sqlite")
        _ = try storectl("backup", a, "-o", c)
        try write(c, "UPDATE ZITEM SET ZTITLE = NULL WHERE Z_PK = 1; ALTER TABLE ZITEM DROP COLUMN ZBODY;")
        let dropped = try storectl("diff", a, c, "--json")
        let report = try report(dropped)
        let nonNullBodies = try DatabaseQueue(path: a).read { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM WHERE ZBODY IS NOT NULL") } ?? 0
        #expect(nonNullBodies > 0 && report.entities.reduce(0) { $0 + ($1.attributes["ZBODY"] ?? 0) } == nonNullBodies, "\(report.entities.map(\.attributes))")
        let values = report.entities.flatMap(\.objects).flatMap(\.values)
        #expect(values.contains { $0.name == "ZBODY" && $0.after == "(column dropped)" })
        #expect(values.contains { $0.after == "NULL" && $0.afterValue == .null }, "NULL, not nil")
        // --key naming the table: says which entity's table it is.
        let keyed = try storectl("diff", a, b, "--key", "ZTAG.ZNAME")
        #expect(keyed.status == 64 && keyed.stderr.contains("ZTAG is the table of Tag") && keyed.stderr.contains("--key Tag.ZNAME"), "\(keyed.stderr)")
        // With --repo, a name that is neither a file nor an id.
        let repo = try folder.repository()
        let neither = try storectl("diff", "zzz", a, "--repo", repo)
        #expect(neither.status == 66 && neither.stderr.contains("is no file, nor a snapshot id"), "\(neither.stderr)")
        // Two different stores (another store's UUID): warned, matched by Z_PK all the same.
        let other = folder.file("other.sqlite")
        #expect(try ChildProcess.run(Binaries.lab, ["make-store", other, "--items", "300"]).status == 0)
        let uuids = try [a, other].map { path in try DatabaseQueue(path: path).read { try String.fetchOne($0, sql: "SELECT Z_UUID FROM Z_METADATA") } }
        let unrelated = try storectl("diff", a, other)
        if uuids[0] != uuids[1] {
            #expect(unrelated.stderr.contains("different Core Data stores"), "\(unrelated.stderr)")
        }
        #expect(!byTask.stderr.contains("different Core Data stores"), "a backup is the same store")
    }
}
