import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

@Suite("purge: which rows go")
struct PurgeSelectionTests {
    static let now = Date(timeIntervalSince1970: 1_795_317_300)   // 2026-11-22T03:15:00Z

    /// A plain table with rows around a 30-day cutoff, written in `format`.
    func boundaryStore(_ format: PurgeRule.TimeFormat, in folder: TempFolder) throws -> String {
        let path = folder.file("events.sqlite")
        let cutoff = Self.now.addingTimeInterval(-30 * 86_400)
        func stamp(_ date: Date) -> DatabaseValue {
            switch format {
            case .coredata: (date.timeIntervalSince1970 - CoreDataStore.referenceDateOffset).databaseValue
            case .unix: date.timeIntervalSince1970.databaseValue
            case .unixMs: Int64(date.timeIntervalSince1970 * 1000).databaseValue
            case .iso8601: Timestamp.iso(date).databaseValue
            }
        }
        let queue = try DatabaseQueue(path: path)
        try queue.write { db in
            try db.execute(sql: "CREATE TABLE events (id INTEGER PRIMARY KEY, label TEXT, is_deleted INTEGER, deleted_at)")
            let rows: [(String, Int, Date?)] = [
                ("expired-long-ago", 1, Self.now.addingTimeInterval(-400 * 86_400)),
                ("expired-1s-before-cutoff", 1, cutoff.addingTimeInterval(-1)),
                ("exactly-at-cutoff", 1, cutoff),
                ("1s-after-cutoff", 1, cutoff.addingTimeInterval(1)),
                ("deleted-yesterday", 1, Self.now.addingTimeInterval(-86_400)),
                ("live-with-old-stamp", 0, Self.now.addingTimeInterval(-400 * 86_400)),
                ("flagged-without-time", 1, nil),
                ("live", 0, nil),
            ]
            for (label, flag, date) in rows {
                try db.execute(sql: "INSERT INTO events (label, is_deleted, deleted_at) VALUES (?, ?, ?)",
                               arguments: [label, flag, date.map(stamp) ?? .null])
            }
        }
        try queue.close()
        return path
    }

    @Test("only expired soft-deleted rows go, the cutoff itself included", arguments: PurgeRule.TimeFormat.allCases)
    func boundary(_ format: PurgeRule.TimeFormat) throws {
        let folder = try TempFolder()
        let store = try boundaryStore(format, in: folder)
        let policy = try writePolicy("""
            [store]
            path = "\(store)"
            [[purge]]
            table = "events"
            deleted_flag = "is_deleted"
            deleted_at = "deleted_at"
            time_format = "\(format.rawValue)"
            retention = "30d"
            batch_size = 2
            """, in: folder)
        var options = Purge.Options(policy: policy)
        options.now = Self.now
        let report = try Purge.run(options)
        #expect(report.rules[0].deleted == 3)
        #expect(report.rules[0].batches == 2)
        let left = try readStore(store) { try String.fetchAll($0, sql: "SELECT label FROM events ORDER BY id") }
        #expect(left == ["1s-after-cutoff", "deleted-yesterday", "live-with-old-stamp", "flagged-without-time", "live"])
    }

    @Test("a flag-only rule takes every flagged row; a time-only rule every expired one")
    func flagOrTimeOnly() throws {
        let folder = try TempFolder()
        let store = try boundaryStore(.unix, in: folder)
        let flagOnly = try writePolicy("[store]\npath = \"\(store)\"\n[[purge]]\ntable = \"events\"\ndeleted_flag = \"is_deleted\"", in: folder, name: "a.toml")
        var options = Purge.Options(policy: flagOnly, dryRun: true)
        options.now = Self.now
        #expect(try Purge.run(options).rules[0].deleted == 6)
        let timeOnly = try writePolicy("[store]\npath = \"\(store)\"\n[[purge]]\ntable = \"events\"\ndeleted_at = \"deleted_at\"\ntime_format = \"unix\"\nretention = \"30d\"",
                                       in: folder, name: "b.toml")
        options = Purge.Options(policy: timeOnly, dryRun: true)
        options.now = Self.now
        #expect(try Purge.run(options).rules[0].deleted == 4, "the live row with an old stamp counts without a flag")
    }
}

@Suite("purge: Core Data delete rules")
struct PurgeCoreDataTests {
    func policy(_ store: String, _ rules: String, folder: TempFolder, extra: String = "") throws -> String {
        try writePolicy("[store]\npath = \"\(store)\"\n\(rules)\n\(extra)", in: folder)
    }

    static let items = "[[purge]]\nname = \"items\"\nentity = \"Item\"\ndeleted_flag = \"ZISDELETED\"\ndeleted_at = \"ZDELETEDAT\"\ntime_format = \"coredata\"\nretention = \"30d\"\nbatch_size = 200"

    @Test("cascade: an item's attachments and tag links go with it; nothing is left dangling")
    func cascade() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 5_000)
        let cutoff = Date().timeIntervalSince1970 - CoreDataStore.referenceDateOffset - 30 * 86_400
        let (expected, attachments, links, total) = try readStore(store) { db in
            let doomed = "SELECT Z_PK FROM ZITEM WHERE ZISDELETED != 0 AND ZDELETEDAT <= \(cutoff)"
            return (try Int.fetchOne(db, sql: "SELECT count(*) FROM (\(doomed))")!,
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM ZATTACHMENT WHERE ZITEM IN (\(doomed))")!,
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM Z_2TAGS WHERE Z_2ITEMS IN (\(doomed))")!,
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM ZITEM")!)
        }
        let dry = try Purge.run(.init(policy: try policy(store, Self.items, folder: folder), dryRun: true))
        #expect(dry.rules[0].deleted == expected && dry.rules[0].cascaded["ZATTACHMENT"] == attachments && dry.rules[0].joinRows == links)
        let report = try Purge.run(.init(policy: try policy(store, Self.items, folder: folder)))
        #expect(report.status == .ok)
        #expect(report.rules[0].deleted == expected && report.rules[0].cascaded == dry.rules[0].cascaded && report.rules[0].joinRows == links)
        #expect(try rowCount(store) == total - expected)
        #expect(report.checkpointed)
        let preflight = try Preflight.run(store: store)
        #expect(preflight.check("coredata.orphans")?.status == .ok, "\(preflight.check("coredata.orphans")?.details ?? [])")
        #expect(try readStore(store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM Z_2TAGS WHERE Z_2ITEMS NOT IN (SELECT Z_PK FROM ZITEM)") } == 0)
    }

    @Test("a purge that finds nothing to delete leaves the store's files byte for byte as they were: its -wal is not checkpointed into the database file (an operator's trial: it was)")
    func nothingToDeleteTouchesNothing() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 500)
        // Nothing expired; the app's connection stays open with frames in its -wal.
        let app = try DatabaseQueue(path: store)
        defer { try? app.close() }
        try app.write { db in
            try db.execute(sql: "UPDATE ZITEM SET ZISDELETED = 0")
            try db.execute(sql: "UPDATE ZITEM SET ZTITLE = ZTITLE || '.' WHERE Z_PK <= 50")
        }
        func digest(_ path: String) throws -> String { try Hashing.sha256(ofFile: path) }
        let before = (try digest(store), try digest(store + "-wal"))
        let report = try Purge.run(.init(policy: try policy(store, Self.items, folder: folder)))
        #expect(report.status == .ok && report.rules[0].deleted == 0 && !report.checkpointed)
        #expect(try digest(store) == before.0 && (try digest(store + "-wal")) == before.1, "the store's files changed")
    }

    @Test("nullify: deleting a category clears its items' reference and bumps their Z_OPT (also after columns were added with defaults, as a lightweight migration adds them: the rows written before read NULL there in SQLite 3.40's pre-update hook, not a change)",
          arguments: [false, true])
    func nullify(addedColumns: Bool) throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 3_000)
        if addedColumns {
            try DatabaseQueue(path: store).write { db in
                try db.execute(sql: "ALTER TABLE ZITEM ADD COLUMN ZFLAG INTEGER DEFAULT 0; ALTER TABLE ZITEM ADD COLUMN ZNOTE VARCHAR DEFAULT 'none'")
            }
        }
        let categories = "[[purge]]\nentity = \"Category\"\ndeleted_flag = \"ZISDELETED\"\ndeleted_at = \"ZDELETEDAT\"\ntime_format = \"coredata\"\nretention = \"7d\""
        let (referencing, doomed) = try readStore(store) { db in
            (try Int.fetchOne(db, sql: "SELECT count(*) FROM ZITEM WHERE ZCATEGORY IN (SELECT Z_PK FROM ZCATEGORY WHERE ZISDELETED = 1 AND Z_PK > 7)")!,
             try Int.fetchOne(db, sql: "SELECT count(*) FROM ZCATEGORY WHERE ZISDELETED = 1 AND Z_PK > 7")!)
        }
        let report = try Purge.run(.init(policy: try policy(store, categories, folder: folder)))
        #expect(report.status == .ok, "\(report.ending.error?.message ?? "")")
        #expect(report.rules[0].verifiedBatches == report.rules[0].batches)
        #expect(report.rules[0].deleted == doomed)
        #expect(report.rules[0].nullified["ZITEM.ZCATEGORY"] == referencing)
        let bumped = try readStore(store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM WHERE ZCATEGORY IS NULL AND Z_OPT = 2") }
        let dangling = try readStore(store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM WHERE ZCATEGORY NOT IN (SELECT Z_PK FROM ZCATEGORY)") }
        #expect(bumped == referencing)
        #expect(dangling == 0)
    }

    @Test("deny: a tag still linked to items stays, named; the run succeeds unless the rule says on_deny = \"fail\"", arguments: [nil, "keep", "fail"])
    func deny(_ onDeny: String?) throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        let answer = onDeny.map { "\non_deny = \"\($0)\"" } ?? ""
        let tags = "[[purge]]\nentity = \"Tag\"\ndeleted_flag = \"ZISDELETED\"\ndeleted_at = \"ZDELETEDAT\"\ntime_format = \"coredata\"\nretention = \"30d\"\(answer)"
        let report = try Purge.run(.init(policy: try policy(store, tags, folder: folder)))
        #expect(report.status == (onDeny == "fail" ? .checksFailed : .ok))
        if onDeny == "fail" { #expect(report.ending.error?.message.contains("on_deny = \"fail\"") == true) }
        #expect(report.rules[0].deleted == 1 && report.rules[0].denied == 1)
        #expect(report.rules[0].deniedSamples.first?.hasPrefix("ZTAG row 19: it is still linked to ZITEM row") == true)
        #expect(try readStore(store) { try Int64.fetchAll($0, sql: "SELECT Z_PK FROM ZTAG WHERE ZISDELETED = 1") } == [19])
    }

    @Test("the real stores: dry-run counts with cascades, and the files are not changed", arguments: [
        (Fixture.notes, "entity = \"ICNote\"\ndeleted_flag = \"ZHASCHECKLIST\"", 1, ["ZICCLOUDSTATE": 2, "ZICCLOUDSYNCINGOBJECT": 1, "ZICNOTEDATA": 1]),
        // Photos' assets carry Core Data triggers (refused, see CoreDataTriggerTests); its moments do not.
        (Fixture.photos, "entity = \"Moment\"\ndeleted_flag = \"Z_OPT\"", 4, [:]),
    ] as [(Fixture, String, Int, [String: Int])])
    func fixtures(_ fixture: Fixture, _ rule: String, _ roots: Int, _ cascaded: [String: Int]) throws {
        let folder = try TempFolder()
        let store = try fixture.copy(into: folder)
        let before = ["", "-wal"].map { try? Hashing.sha256(ofFile: store + $0) }
        let report = try Purge.run(.init(policy: try policy(store, "[[purge]]\n\(rule)", folder: folder), dryRun: true))
        #expect(report.rules[0].deleted == roots)
        #expect(report.rules[0].cascaded == cascaded)
        #expect(report.rules[0].notes.contains { $0.contains("persistent history") })
        #expect(try Hashing.sha256(ofFile: store) == before[0], "the database file is unchanged")
        // Its -wal is unchanged too; where there was none, SQLite's read-only open made an empty one.
        #expect(before[1] == nil ? FileSystem.size(of: store + "-wal") ?? 0 == 0 : (try? Hashing.sha256(ofFile: store + "-wal")) == before[1])
    }

    @Test("without a model cache only the named rows go, and the report says so")
    func noModelCache() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        try DatabaseQueue(path: store).write { try $0.execute(sql: "DROP TABLE Z_MODELCACHE") }
        let attachments = try readStore(store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZATTACHMENT") }
        let report = try Purge.run(.init(policy: try policy(store, Self.items, folder: folder)))
        #expect(report.rules[0].deleted > 0 && report.rules[0].cascaded.isEmpty)
        #expect(report.rules[0].notes.first?.contains("relationships are not followed") == true)
        #expect(try readStore(store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZATTACHMENT") } == attachments)
    }

    @Test("a plain store's declared foreign keys are honoured (ON DELETE CASCADE)")
    func sqlForeignKeys() throws {
        let folder = try TempFolder()
        let store = folder.file("app.sqlite")
        try DatabaseQueue(path: store).write { db in
            try db.execute(sql: """
                CREATE TABLE lists (id INTEGER PRIMARY KEY, deleted INTEGER);
                CREATE TABLE entries (id INTEGER PRIMARY KEY, list INTEGER REFERENCES lists(id) ON DELETE CASCADE);
                INSERT INTO lists VALUES (1, 1), (2, 0);
                INSERT INTO entries (list) VALUES (1), (1), (2);
                """)
        }
        _ = try Purge.run(.init(policy: try policy(store, "[[purge]]\ntable = \"lists\"\ndeleted_flag = \"deleted\"", folder: folder)))
        #expect(try readStore(store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM entries") } == 1)
    }
}

@Suite("purge: limits, breaker, snapshot, locks, kill switch")
struct PurgeControlTests {
    func itemsPolicy(_ store: String, folder: TempFolder, extra: String = "", ruleExtra: String = "") throws -> String {
        try writePolicy("[store]\npath = \"\(store)\"\n\(PurgeCoreDataTests.items)\n\(ruleExtra)\n\(extra)", in: folder)
    }

    @Test("the circuit breaker refuses the whole run before anything is deleted or snapshotted")
    func circuitBreaker() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        let before = try Hashing.sha256(ofFile: store)
        let repo = try folder.repository("snaps")
        let policy = try itemsPolicy(store, folder: folder, extra: "[snapshot]\nrepository = \"\(repo)\"\nbefore_purge = true",
                                     ruleExtra: "max_fraction = 0.01")
        let report = try Purge.run(.init(policy: policy))
        #expect(report.status == .checksFailed)
        #expect(report.tripped.first?.contains("above max_fraction 1.0%") == true)
        #expect(try report.snapshot == nil && SnapshotSummary.list(repository: repo).isEmpty)
        #expect(try Hashing.sha256(ofFile: store) == before)
    }

    @Test("max_rows and max_runtime stop a rule as planned")
    func limits() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 5_000)
        let rows = try Purge.run(.init(policy: try itemsPolicy(store, folder: folder, ruleExtra: "max_rows = 250")))
        #expect(rows.rules[0].deleted == 250 && rows.rules[0].stopped == .maxRows(250) && rows.status == .ok)
        let time = try Purge.run(.init(policy: try itemsPolicy(store, folder: folder, ruleExtra: "max_runtime = \"50ms\"\npause = \"40ms\"")))
        #expect(time.rules[0].stopped == .maxRuntime(0.05) && time.rules[0].batches <= 3)
    }

    @Test("a snapshot first when the policy asks; if it cannot be made, nothing is deleted")
    func snapshotFirst() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        let repo = try folder.repository("snaps", encrypted: true)
        let report = try Purge.run(.init(policy: try itemsPolicy(store, folder: folder,
                                                                 extra: "[snapshot]\nrepository = \"\(repo)\"\nbefore_purge = true\npassword_file = \"\(try folder.passwordFile())\"")))
        let listed = try SnapshotSummary.list(repository: repo, password: .file(try folder.passwordFile()))
        #expect(listed.map(\.id) == [report.snapshot] && listed.first?.tags == ["pre-purge"])
        // The snapshot was checked before anything was deleted (format 2: what it wrote, read back;
        // that is not recorded as a full verification), and the deletes were checked after.
        #expect(listed.first?.lastVerified == nil)
        var verify = SnapshotVerify.Options(repository: repo, all: true)
        verify.password = .file(try folder.passwordFile())
        #expect(try SnapshotVerify.run(verify).map(\.ok) == [true])
        #expect(report.stages.map(\.name) == ["lock", "preflight", "snapshot", "purge", "verify"])
        #expect(report.verified.contains("quick_check(ZITEM) ok") && report.verified.contains("quick_check(ZATTACHMENT) ok"), "\(report.verified)")
        #expect(report.verified.contains { $0.hasPrefix("ZATTACHMENT.ZITEM: no reference to a deleted row") }, "\(report.verified)")

        let other = try TempFolder()
        let store2 = try sampleStore(in: other)
        let before = try Hashing.sha256(ofFile: store2)
        let notRepo = other.file("stuff")
        try FileManager.default.createDirectory(atPath: notRepo, withIntermediateDirectories: false)
        _ = FileManager.default.createFile(atPath: notRepo + "/file", contents: Data([1]))
        let error = #expect(throws: StoreOpsError.self) {
            try Purge.run(.init(policy: try itemsPolicy(store2, folder: other, extra: "[snapshot]\nrepository = \"\(notRepo)\"\nbefore_purge = true")))
        }
        #expect(error?.status == .badData)
        #expect(try Hashing.sha256(ofFile: store2) == before)
    }

    @Test("another job holding the store's lock: 75 at once, naming it")
    func lockContention() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        let lock = try JobLock.acquire(path: StoreFile(unchecked: store).jobLockPath, job: "migrate")
        defer { lock.release() }
        let error = #expect(throws: StoreOpsError.self) { try Purge.run(.init(policy: try itemsPolicy(store, folder: folder))) }
        #expect(error?.status == .busy)
        #expect(error?.message.contains("another job (migrate) holds the lock") == true)
    }

    @Test("an engaged kill switch stops the run before it starts, saying how to release it; preflight --for purge fails on it")
    func killSwitchBeforeStart() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        try KillSwitch.engage(StoreFile(unchecked: store), reason: "deploy aborted")
        let report = try Purge.run(.init(policy: try itemsPolicy(store, folder: folder)))
        #expect(report.status == .failure)
        #expect(report.rules.isEmpty)
        #expect(report.ending.stop?.description.contains("storectl killswitch release \(store)") == true, "\(String(describing: report.ending.stop))")
        let preflight = try Preflight.run(store: store, options: .init(operation: .purge))
        #expect(!preflight.passed)
        #expect(preflight.check("killswitch")?.summary.contains("deploy aborted") == true)
        #expect(preflight.check("killswitch")?.advice == "storectl killswitch release \(store) lets runs go on")
        #expect(try Preflight.run(store: store, options: .init(operation: .backup)).check("killswitch") == nil, "a backup does not honour it")
        #expect(KillSwitch.release(StoreFile(unchecked: store)))
        #expect(try Preflight.run(store: store, options: .init(operation: .purge)).check("killswitch") == nil)
    }

    @Test("kill switch or SIGTERM mid-run: every finished batch committed, the rest untouched", arguments: ["killswitch", "sigterm"])
    func stoppedMidRun(_ how: String) throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 20_000)
        let cutoff = Date().timeIntervalSince1970 - CoreDataStore.referenceDateOffset - 30 * 86_400
        let candidates = try readStore(store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM WHERE ZISDELETED != 0 AND ZDELETEDAT <= ?", arguments: [cutoff]) }!
        let policy = try itemsPolicy(store, folder: folder, ruleExtra: "pause = \"100ms\"")
        let purge = try ChildProcess.Running(Binaries.storectl, ["purge", "--policy", policy, "--json"])
        // Stopped once a first batch is committed (read from the store, not after a fixed time: a
        // loaded machine had not begun by then).
        let begun = Date().addingTimeInterval(60)
        func left() -> Int? { (try? readStore(store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM WHERE ZISDELETED != 0 AND ZDELETEDAT <= ?", arguments: [cutoff]) }) ?? nil }
        while Date() < begun, purge.isRunning, (left() ?? candidates) == candidates { usleep(20_000) }
        if how == "killswitch" {
            #expect(try ChildProcess.run(Binaries.storectl, ["killswitch", "engage", store]).status == 0)
        } else {
            purge.signal(SIGTERM)
        }
        let result = purge.wait()
        #expect(result.status == (how == "killswitch" ? 1 : 143), "\(result.stderr)")
        let report = try JSON.decoder().decode(Purge.Report.self, from: Data(result.stdout.utf8))
        let deleted = report.rules[0].deleted
        #expect(deleted > 0 && deleted < candidates && deleted % 200 == 0, "\(deleted) of \(candidates), whole batches only")
        let left = try readStore(store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM WHERE ZISDELETED != 0 AND ZDELETEDAT <= ?", arguments: [cutoff]) }!
        #expect(left == candidates - deleted)
        #expect(try Preflight.run(store: store).passed)
    }
}
