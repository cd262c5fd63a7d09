import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

/// A sample store, a migrations folder and a repository.
struct MigrationFixture {
    let folder: TempFolder
    let store: String
    let migrations: String
    let repo: String

    init(items: Int = 2_000) throws {
        folder = try TempFolder()
        store = try sampleStore(in: folder, items: items)
        migrations = folder.file("migrations")
        repo = try folder.repository("snaps")
        try FileManager.default.createDirectory(atPath: migrations, withIntermediateDirectories: false)
    }

    func write(_ name: String, _ sql: String) throws {
        try Data(sql.utf8).write(to: URL(fileURLWithPath: (migrations as NSString).appendingPathComponent(name)))
    }

    func options(rollback: Bool = false, stages: [Migration] = [], to: Int? = nil) -> Migrate.Options {
        Migrate.Options(store: store, migrations: migrations, repository: repo, stages: stages, to: to, rollbackOnFailure: rollback)
    }

    func version() throws -> Int { try readStore(store) { try MigrationHistory.version($0) } }

    /// The last leaf page of b-tree `name`, after the -wal is checkpointed into the file and closed.
    func lastLeaf(of name: String) throws -> Int {
        let app = try DatabaseQueue(path: store)
        defer { try? app.close() }
        return try app.writeWithoutTransaction { db -> Int in
            try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
            return try Int.fetchOne(db, sql: "SELECT max(pageno) FROM dbstat WHERE name = ? AND pagetype = 'leaf'", arguments: [name]) ?? 0
        }
    }

    /// Overwrites page `page` of the store's file from byte `from` on (damage behind SQLite's back).
    func scribble(page: Int, from: Int = 0) throws {
        guard let handle = FileHandle(forWritingAtPath: store) else { throw StoreOpsError(.noInput, "cannot write \(store)") }
        try handle.seek(toOffset: UInt64((page - 1) * 4096 + from))
        handle.write(Data(repeating: 0xEE, count: 4096 - from))
        try handle.close()
    }

    static let addPriority = """
        -- Tasks get a label for their priority.
        ALTER TABLE ZITEM ADD COLUMN ZPRIORITYLABEL VARCHAR;
        UPDATE ZITEM SET ZPRIORITYLABEL = CASE ZPRIORITY WHEN 0 THEN 'low' WHEN 1 THEN 'normal' ELSE 'high' END;
        CREATE INDEX ZITEM_ZPRIORITYLABEL_INDEX ON ZITEM (ZPRIORITYLABEL);
        """
    static let everyItemLabelled = "SELECT count(*) = 0 FROM ZITEM WHERE ZPRIORITYLABEL IS NULL;"
    static let upperCategories = "UPDATE ZCATEGORY SET ZNAME = upper(ZNAME);"
}

@Suite("migrate")
struct MigrateTests {
    @Test("several SQL files and a Swift stage apply in order, each with its history row; status shows them")
    func success() throws {
        let fixture = try MigrationFixture()
        try fixture.write("0001_add_priority.sql", MigrationFixture.addPriority)
        try fixture.write("0001_add_priority.verify.sql", MigrationFixture.everyItemLabelled)
        try fixture.write("0002_upper_categories.sql", MigrationFixture.upperCategories)
        let seenOld = Locked(false)
        let stage = Migration(version: 3, name: "title_words", revision: "1", sql: "ALTER TABLE ZITEM ADD COLUMN ZTITLEWORDS INTEGER",
                              checks: ["SELECT count(*) = 0 FROM ZITEM WHERE ZTITLEWORDS IS NULL"],
                              willMigrate: { db in seenOld.set(try !db.columns(in: "ZITEM").contains { $0.name == "ZTITLEWORDS" }) },
                              didMigrate: { db in
                                  // Data work SQL alone does badly: count words with Swift.
                                  for row in try Row.fetchAll(db, sql: "SELECT Z_PK, ZTITLE FROM ZITEM") {
                                      let words = (row["ZTITLE"] as String? ?? "").split(separator: " ").count
                                      try db.execute(sql: "UPDATE ZITEM SET ZTITLEWORDS = ? WHERE Z_PK = ?", arguments: [words, row["Z_PK"] as Int64])
                                  }
                              })
        let report = try Migrate.run(fixture.options(stages: [stage]))
        #expect(report.status == .ok && report.result == "migrated", "\(report.failure ?? "")")
        #expect(report.applied.map(\.version) == [1, 2, 3])
        #expect(report.stages.map(\.name) == ["lock", "preflight", "snapshot", "apply", "verify"])
        #expect(seenOld.get(), "willMigrate saw the old schema")
        #expect(try fixture.version() == 3)
        let history = try readStore(fixture.store) { try MigrationHistory.read($0) }
        #expect(history.map(\.name) == ["add_priority", "upper_categories", "title_words"])
        #expect(history.allSatisfy { $0.snapshotId == report.snapshot })
        #expect(try readStore(fixture.store) { try Int.fetchOne($0, sql: "SELECT min(ZTITLEWORDS) FROM ZITEM") } == 6, "\"Item N:\" and four words")
        let snapshots = try SnapshotSummary.list(repository: fixture.repo)
        // Checked as a safety snapshot is (the packs it wrote read back), not reassembled: no verification record.
        #expect(snapshots.first?.tags == ["pre-migrate", "version-0"] && snapshots.first?.lastVerified == nil)
        #expect(MigrationJournal.read(StoreFile(unchecked: fixture.store)) == nil)
        // Nothing pending: up to date, no new snapshot.
        let again = try Migrate.run(fixture.options(stages: [stage]))
        #expect(again.result == "up to date")
        #expect(try SnapshotSummary.list(repository: fixture.repo).count == 1)
    }

    @Test("a failing second step with --rollback-on-failure: exit 3, the store equals the pre-migration snapshot row for row and is back in WAL mode, the failed state is kept aside")
    func rollbackOnFailure() throws {
        let fixture = try MigrationFixture()
        try fixture.write("0001_add_priority.sql", MigrationFixture.addPriority)
        try fixture.write("0002_broken.sql", "UPDATE ZCATEGORY SET ZNAME = 'x';\nINSERT INTO no_such_table VALUES (1);")
        let originalDump = try logicalDigest(fixture.store)
        let report = try Migrate.run(fixture.options(rollback: true))
        #expect(report.status == .rolledBack)
        #expect(report.applied.map(\.version) == [1], "the first step had applied")
        #expect(report.failure?.contains("0002_broken") == true && report.failure?.contains("no such table") == true, "\(report.failure ?? "")")
        #expect(report.rollback?.verified == true && report.rollback?.error == nil)
        #expect(try logicalDigest(fixture.store) == originalDump)
        // Back in WAL mode, as the store was: the header's read/write versions are 2 again.
        #expect(StoreFile.isWALHeader(try FileProbe.shared.header(of: fixture.store)))
        #expect(try readStore(fixture.store) { try String.fetchOne($0, sql: "PRAGMA journal_mode") } == "wal")
        #expect(try fixture.version() == 0)
        #expect(MigrationJournal.read(StoreFile(unchecked: fixture.store)) == nil)
        // The failed state is kept aside as evidence, and still opens: step 1 applied, step 2 not.
        let kept = try #require(report.rollback?.failedStateKeptAt)
        #expect(kept.hasPrefix(fixture.store + ".failed-migration-"))
        #expect(!kept.hasSuffix("-wal") && !kept.hasSuffix("-shm"), "the database file is named, not a sidecar")
        #expect(try readStore(kept) { try MigrationHistory.version($0) } == 1)
        // Its name taken (a failure earlier in the same second): the set gets one suffix, so its
        // -wal is `<kept>-2-wal`, the name SQLite reads with it (it was `<kept>-wal-2`, never read:
        // found by a helper, whose second failed migration in a second kept its commits there).
        let now = Date()
        for second in 0..<10 {
            let taken = fixture.store + ".failed-migration-" + Timestamp.compact(now.addingTimeInterval(Double(second)))
            if !FileManager.default.fileExists(atPath: taken) { #expect(FileManager.default.createFile(atPath: taken, contents: Data("taken".utf8))) }
        }
        let again = try Migrate.run(fixture.options(rollback: true))
        #expect(again.status == .rolledBack)
        let second = try #require(again.rollback?.failedStateKeptAt)
        #expect(second.hasSuffix("-2"), "\(second)")
        let folder = FileSystem.parent(of: fixture.store)
        let names = try FileManager.default.contentsOfDirectory(atPath: folder)
        #expect(!names.contains { $0.contains("-wal-") || $0.contains("-shm-") }, "\(names.sorted())")
        // Every kept -wal sits beside its database, under the name SQLite reads it by.
        for name in names where name.contains(".failed-migration-") && name.hasSuffix("-wal") {
            #expect(names.contains(String(name.dropLast("-wal".count))), "\(name) has no database: \(names.sorted())")
        }
        #expect(try readStore(second) { try MigrationHistory.version($0) } == 1)
    }

    @Test("the rollback itself fails (the snapshot was damaged meanwhile): exit 4, the store untouched at the last good migration, the journal kept")
    func rollbackFails() throws {
        let fixture = try MigrationFixture()
        try fixture.write("0001_add_priority.sql", MigrationFixture.addPriority)
        let snapshots = (fixture.repo as NSString).appendingPathComponent("snapshots")
        // Migration 2 finds the pre-migrate archive damaged on disk (a bad sector), then fails.
        let damaging = Migration(version: 2, name: "fails_after_damage", revision: "1", sql: MigrationFixture.upperCategories,
                                 didMigrate: { _ in
                                     let archive = try #require(try FileManager.default.contentsOfDirectory(atPath: snapshots).first)
                                     let handle = try #require(FileHandle(forUpdatingAtPath: (snapshots as NSString).appendingPathComponent(archive)))
                                     try handle.seek(toOffset: 2_000)
                                     try handle.write(contentsOf: Data(repeating: 0x5A, count: 4_096))
                                     try handle.close()
                                     throw StoreOpsError(.failure, "the new data does not fit")
                                 })
        let report = try Migrate.run(fixture.options(rollback: true, stages: [damaging]))
        #expect(report.status == .rollbackFailed)
        #expect(report.result == "rollback failed")
        let rollback = try #require(report.rollback)
        #expect(rollback.error != nil && rollback.verified == false)
        #expect(rollback.storeUntouched == true)
        #expect(rollback.versionNow == 1)
        #expect(try fixture.version() == 1, "migration 1 committed, migration 2 rolled back in its transaction")
        #expect(try readStore(fixture.store) { try String.fetchAll($0, sql: "PRAGMA quick_check") } == ["ok"])
        #expect(MigrationJournal.read(StoreFile(unchecked: fixture.store)) != nil, "the interrupted state stays visible")
    }

    @Test("the store's disk fills up during the first migration (an 8 MiB tmpfs): nothing was committed, so nothing is rolled back: 74, journal gone, status not interrupted; when a later one fills it, the earlier one is rolled back",
          .enabled(if: TempMount.isAvailable), arguments: [false, true])
    func diskFullDuringApply(afterAGoodOne: Bool) throws {
        let mount = try #require(TempMount(kilobytes: 8 * 1024))
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 1_000, journalMode: "wal")
        let onMount = mount.file("Tasks.sqlite")
        try FileManager.default.copyItem(atPath: store, toPath: onMount)
        let original = try logicalDigest(onMount)
        let migrations = folder.file("migrations")
        try FileManager.default.createDirectory(atPath: migrations, withIntermediateDirectories: false)
        let filler = afterAGoodOne ? "0002_filler.sql" : "0001_filler.sql"
        if afterAGoodOne {
            try Data("CREATE TABLE ZSMALL (Z_PK INTEGER PRIMARY KEY);\n".utf8).write(to: URL(fileURLWithPath: migrations + "/0001_small.sql"))
        }
        try Data("""
            CREATE TABLE ZFILLER AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000)
                SELECT x AS Z_PK, randomblob(100) AS ZDATA FROM c;
            """.utf8).write(to: URL(fileURLWithPath: migrations + "/" + filler))
        let report = try Migrate.run(.init(store: onMount, migrations: migrations, repository: try folder.repository("snaps"), rollbackOnFailure: true))
        #expect(report.failure?.contains("full") == true || report.failure?.contains("space") == true, "\(report.failure ?? "")")
        #expect(report.failureHint?.contains("free space on the volume of \(mount.path)") == true, "\(report.failureHint ?? "")")
        if afterAGoodOne {
            // Migration 1 committed: there is something to roll back (on the full disk it may fail, leaving the store untouched).
            #expect([ExitStatus.rolledBack, .rollbackFailed].contains(report.status))
            if report.status == .rollbackFailed { #expect(report.rollback?.storeUntouched == true, "\(report.rollback?.error ?? "")") }
        } else {
            #expect(report.status == .ioError && report.result == "failed" && report.rollback == nil && report.nothingCommitted == true,
                    "\(report.status) \(report.result) \(report.rollback?.error ?? "")")
            #expect(report.rollbackCommand == nil)
            #expect(MigrationJournal.read(StoreFile(unchecked: onMount)) == nil, "nothing was interrupted: the journal is gone")
            #expect(try logicalDigest(onMount) == original, "the failed migration's transaction left nothing")
        }
        #expect(try readStore(onMount) { try String.fetchAll($0, sql: "PRAGMA quick_check") } == ["ok"])
    }

    @Test("without --rollback-on-failure: the failing migration leaves nothing; the store stays at the last good one; the rollback command is given")
    func stopAtLastGood() throws {
        let fixture = try MigrationFixture()
        try fixture.write("0001_add_priority.sql", MigrationFixture.addPriority)
        try fixture.write("0002_upper_categories.sql", MigrationFixture.upperCategories)
        try fixture.write("0002_upper_categories.verify.sql", "SELECT count(*) = 0 FROM ZCATEGORY WHERE ZNAME != lower(ZNAME);")
        let report = try Migrate.run(fixture.options())
        #expect(report.status == .failure && report.result == "failed")
        #expect(report.failure?.contains("0002_upper_categories.verify.sql check 1 failed") == true, "\(report.failure ?? "")")
        #expect(try fixture.version() == 1)
        #expect(try readStore(fixture.store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZCATEGORY WHERE ZNAME = upper(ZNAME)") } == 0,
                "the failing migration's changes were rolled back with its transaction")
        #expect(report.rollbackCommand == "storectl rollback \(fixture.store) --repo \(fixture.repo) --to \(report.snapshot!)")
    }

    @Test("a Core Data entity losing rows fails the migration, unless it says so")
    func countDrop() throws {
        let fixture = try MigrationFixture()
        try fixture.write("0001_drop_notes.sql", "DELETE FROM ZITEM WHERE Z_ENT = 4;")
        let report = try Migrate.run(fixture.options())
        #expect(report.failure?.contains("drops Core Data rows: Note") == true, "\(report.failure ?? "")")
        #expect(report.failureHint?.contains("-- storectl: allow-count-drop Note") == true)
        // Allowed to drop notes, but their attachments would point at nothing: verify refuses it.
        try fixture.write("0001_drop_notes.sql", "-- storectl: allow-count-drop Note\nDELETE FROM ZITEM WHERE Z_ENT = 4;")
        let dangling = try Migrate.run(fixture.options(rollback: true))
        #expect(dangling.result == "rolled back" && dangling.failure?.contains("at removed ZITEM rows") == true, "\(dangling.failure ?? "")")
        try fixture.write("0001_drop_notes.sql", """
            -- storectl: allow-count-drop Note, Attachment
            DELETE FROM ZATTACHMENT WHERE ZITEM IN (SELECT Z_PK FROM ZITEM WHERE Z_ENT = 4);
            DELETE FROM ZITEM WHERE Z_ENT = 4;
            """)
        // The notes' tag links (Z_2TAGS) would name removed items: refused too (it migrated).
        let links = try Migrate.run(fixture.options(rollback: true))
        #expect(links.result == "rolled back" && links.failure?.contains("at removed ZITEM rows (join table Z_2TAGS)") == true, "\(links.failure ?? "")")
        try fixture.write("0001_drop_notes.sql", """
            -- storectl: allow-count-drop Note, Attachment
            DELETE FROM ZATTACHMENT WHERE ZITEM IN (SELECT Z_PK FROM ZITEM WHERE Z_ENT = 4);
            DELETE FROM Z_2TAGS WHERE Z_2ITEMS IN (SELECT Z_PK FROM ZITEM WHERE Z_ENT = 4);
            DELETE FROM ZITEM WHERE Z_ENT = 4;
            """)
        let allowed = try Migrate.run(fixture.options())
        #expect(allowed.result == "migrated", "\(allowed.failure ?? "")")
        #expect(allowed.countsAfter?["Note"] == 0 && allowed.countsBefore?["Note"] ?? 0 > 0)

        // An entity allowed takes its sub-entities with it, as `changes` does (Note is an Item).
        let other = try MigrationFixture()
        try other.write("0001_drop_notes.sql", """
            -- storectl: allow-count-drop Item, Attachment
            DELETE FROM ZATTACHMENT WHERE ZITEM IN (SELECT Z_PK FROM ZITEM WHERE Z_ENT = 4);
            DELETE FROM Z_2TAGS WHERE Z_2ITEMS IN (SELECT Z_PK FROM ZITEM WHERE Z_ENT = 4);
            DELETE FROM ZITEM WHERE Z_ENT = 4;
            """)
        let byParent = try Migrate.run(other.options())
        #expect(byParent.result == "migrated", "\(byParent.failure ?? "")")
    }

    @Test("drift: an applied migration that was edited is refused (65); so is a missing one")
    func drift() throws {
        let fixture = try MigrationFixture()
        try fixture.write("0001_add_priority.sql", MigrationFixture.addPriority)
        _ = try Migrate.run(fixture.options())
        try fixture.write("0001_add_priority.sql", MigrationFixture.addPriority + "\n-- a harmless-looking edit")
        try fixture.write("0002_upper_categories.sql", MigrationFixture.upperCategories)
        let error = #expect(throws: StoreOpsError.self) { try Migrate.run(fixture.options()) }
        #expect(error?.status == .badData)
        #expect(error?.message.contains("drifted: 0001_add_priority was applied") == true, "\(error?.message ?? "")")
        let status = try MigrationStatus.run(store: fixture.store, migrations: fixture.migrations)
        #expect(status.plan.drifted.count == 1 && status.plan.pending.map(\.version) == [2])
        unlink((fixture.migrations as NSString).appendingPathComponent("0001_add_priority.sql"))
        #expect((#expect(throws: StoreOpsError.self) { try Migrate.run(fixture.options()) })?.message.contains("missing: 0001_add_priority") == true)
        let missing = try MigrationStatus.run(store: fixture.store, migrations: fixture.migrations)
        #expect(missing.plan.missingFiles == [1] && missing.plan.missing.first?.contains("put it back") == true)

        // Another file with the applied number (`1_priority.sql`): named as such, not as an edit.
        try fixture.write("1_priority.sql", MigrationFixture.upperCategories)
        let reused = #expect(throws: StoreOpsError.self) { try Migrate.run(fixture.options()) }
        #expect(reused?.message.contains("version 1 was applied as 0001_add_priority") == true, "\(reused?.message ?? "")")
        #expect(reused?.message.contains("number a new migration above the store's version 1") == true)
        // The applied file renamed, its content the same: the same migration, not a blocker.
        unlink((fixture.migrations as NSString).appendingPathComponent("1_priority.sql"))
        try fixture.write("1_priority.sql", MigrationFixture.addPriority)
        #expect(try MigrationStatus.run(store: fixture.store, migrations: fixture.migrations).plan.blockers.isEmpty)
    }

    @Test("a damaged store is refused as preflight refuses it (exit 2, quick_check named), though the check is the safety snapshot's: nothing changed, no snapshot recorded")
    func damagedStore() throws {
        let fixture = try MigrationFixture(items: 5_000)
        try fixture.write("0001_add_priority.sql", MigrationFixture.addPriority)
        // A leaf of an index no remaining preflight check reads (the orphans check reads the
        // tables and their to-one columns' indexes): only quick_check finds it.
        let leaf = try fixture.lastLeaf(of: "ZITEM_Z_ENT_INDEX")
        #expect(leaf > 2)
        try fixture.scribble(page: leaf, from: 8)
        let before = try Hashing.sha256(ofFile: fixture.store)
        let error = #expect(throws: StoreOpsError.self) { try Migrate.run(fixture.options()) }
        #expect(error?.status == .checksFailed, "\(error?.description ?? "")")
        #expect(error?.message.contains("preflight failed; nothing was changed") == true && error?.message.contains("integrity.quick_check") == true,
                "\(error?.message ?? "")")
        #expect(try Hashing.sha256(ofFile: fixture.store) == before)
        #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.repo + "/snapshots").isEmpty, "no snapshot recorded")
        #expect(MigrationJournal.read(try StoreFile(existing: fixture.store)) == nil)
        // Damage a check the preflight still runs reads first (a table the orphans check scans):
        // refused the same way, the message saying the store is damaged rather than quoting SQL.
        let second = try MigrationFixture(items: 5_000)
        try second.write("0001_add_priority.sql", MigrationFixture.addPriority)
        try second.scribble(page: try second.lastLeaf(of: "ZITEM"))
        let refused = #expect(throws: StoreOpsError.self) { try Migrate.run(second.options()) }
        #expect(refused?.status == .checksFailed, "\(refused?.description ?? "")")
        #expect(refused?.message.contains("coredata.orphans: could not check: reading the to-one references: the database is damaged") == true && refused?.message.contains("SELECT") == false, "\(refused?.message ?? "")")
    }

    @Test("a store unchanged since its last snapshot, damaged behind the file's back (same size and time): the safety snapshot reuses its parent and reads no page, so migrate runs quick_check itself and refuses (exit 2)")
    func damagedUnderUnchangedSnapshot() throws {
        let fixture = try MigrationFixture(items: 5_000)
        try fixture.write("0001_add_priority.sql", MigrationFixture.addPriority)
        let leaf = try fixture.lastLeaf(of: "ZITEM_Z_ENT_INDEX")   // the -wal goes: the store is its file alone
        Thread.sleep(forTimeInterval: 0.2)
        let parent = try SnapshotCreate.run(store: fixture.store, options: .init(repository: fixture.repo))
        #expect(!parent.unchanged)
        var info = stat()
        #expect(stat(fixture.store, &info) == 0)
        try fixture.scribble(page: leaf, from: 8)
        var times = [info.st_atim, info.st_mtim]
        #expect(utimensat(AT_FDCWD, fixture.store, &times, 0) == 0, "the file's time put back")
        let error = #expect(throws: StoreOpsError.self) { try Migrate.run(fixture.options()) }
        #expect(error?.status == .checksFailed && error?.message.contains("integrity.quick_check") == true, "\(error?.description ?? "")")
        #expect(try fixture.version() == 0)
    }

    @Test("statements that cannot run in a transaction are refused unless the file says no-transaction")
    func nonTransactional() throws {
        let fixture = try MigrationFixture()
        try fixture.write("0001_vacuum.sql", "UPDATE ZTAG SET ZNAME = upper(ZNAME);\nVACUUM;")
        let error = #expect(throws: StoreOpsError.self) { try Migrate.run(fixture.options()) }
        #expect(error?.message.contains("VACUUM cannot run inside a transaction") == true)
        #expect(try fixture.version() == 0)
        #expect(snapshotCount(fixture.repo) == 0, "nothing happened, not even a snapshot")
        try fixture.write("0001_vacuum.sql", "-- storectl: no-transaction\nUPDATE ZTAG SET ZNAME = upper(ZNAME);\nVACUUM;")
        let report = try Migrate.run(fixture.options())
        #expect(report.result == "migrated", "\(report.failure ?? "")")
    }

    @Test("dry-run prints the plan with lint warnings and changes nothing")
    func dryRun() throws {
        let fixture = try MigrationFixture()
        try DatabaseQueue(path: fixture.store).write { db in
            try db.execute(sql: "CREATE TABLE lists (id INTEGER PRIMARY KEY); CREATE TABLE entries (id INTEGER PRIMARY KEY, list INTEGER REFERENCES lists(id) ON DELETE CASCADE)")
        }
        try fixture.write("0001_rebuild_lists.sql", """
            CREATE TABLE lists_new (id INTEGER PRIMARY KEY, name TEXT);
            INSERT INTO lists_new (id) SELECT id FROM lists;
            DROP TABLE lists;
            ALTER TABLE lists_new RENAME TO lists;
            ALTER TABLE ZITEM DROP COLUMN ZDUEDATE;
            """)
        let before = try Hashing.sha256(ofFile: fixture.store)
        var options = fixture.options()
        options.dryRun = true
        let report = try Migrate.run(options)
        #expect(report.result == "planned")
        let warnings = report.plan.pending.first?.warnings ?? []
        #expect(warnings.contains { $0.hasPrefix("DROP TABLE lists") })
        #expect(warnings.contains { $0.contains("entries references lists with ON DELETE CASCADE") })
        #expect(warnings.contains { $0.hasPrefix("DROP COLUMN in ZITEM") })
        #expect(warnings.contains { $0.hasPrefix("rebuilds table lists") })
        #expect(try Hashing.sha256(ofFile: fixture.store) == before)
        #expect(snapshotCount(fixture.repo) == 0)

        // A repository the run could not open fails its dry run too (66, with the init hint).
        options.repository = fixture.folder.file("no-such-repo")
        let missing = #expect(throws: StoreOpsError.self) { try Migrate.run(options) }
        #expect(missing?.status == .noInput && missing?.hint?.contains("repo init") == true, "\(String(describing: missing))")
        #expect(try Hashing.sha256(ofFile: fixture.store) == before)
    }

    @Test("the kill switch thrown mid-run: stop at the next safe point, roll back, exit 3")
    func killSwitch() throws {
        let fixture = try MigrationFixture()
        let store = StoreFile(unchecked: fixture.store)
        let original = try logicalDigest(fixture.store)
        try fixture.write("0001_add_priority.sql", MigrationFixture.addPriority)
        // An operator throws the switch while migration 2 runs.
        let operatorStage = Migration(version: 2, name: "operator_panics", revision: "1", sql: MigrationFixture.upperCategories,
                                      didMigrate: { _ in try KillSwitch.engage(store, reason: "test") })
        try fixture.write("0003_more.sql", "UPDATE ZTAG SET ZNAME = 'x';")
        let report = try Migrate.run(fixture.options(stages: [operatorStage]))
        #expect(report.status == .rolledBack)
        #expect(report.failure?.hasPrefix("stopped: the kill switch") == true)
        #expect(report.applied.map(\.version) == [1, 2])
        #expect(try logicalDigest(fixture.store) == original)
        #expect(KillSwitch.release(store))
    }

    @Test("the kill switch already thrown: stopped before any change, exit 3, no snapshot, the file untouched")
    func killSwitchBeforeStart() throws {
        let fixture = try MigrationFixture()
        let store = StoreFile(unchecked: fixture.store)
        let before = try Hashing.sha256(ofFile: fixture.store)
        try fixture.write("0001_add_priority.sql", MigrationFixture.addPriority)
        try KillSwitch.engage(store, reason: "test")
        defer { _ = KillSwitch.release(store) }
        let report = try Migrate.run(fixture.options(rollback: true))
        #expect(report.result == "stopped")
        #expect(report.status == .rolledBack)
        #expect(report.snapshot == nil && report.applied.isEmpty)
        #expect(try Hashing.sha256(ofFile: fixture.store) == before)
        #expect(snapshotCount(fixture.repo) == 0)
    }

    @Test("another job holding the store: 75, nothing done")
    func lockContention() throws {
        let fixture = try MigrationFixture()
        try fixture.write("0001_add_priority.sql", MigrationFixture.addPriority)
        let lock = try JobLock.acquire(path: StoreFile(unchecked: fixture.store).jobLockPath, job: "purge")
        defer { lock.release() }
        #expect((#expect(throws: StoreOpsError.self) { try Migrate.run(fixture.options()) })?.status == .busy)
        #expect(snapshotCount(fixture.repo) == 0)
    }

    @Test("the app has the store open: 75 and nothing done, unless --force; preflight --for migrate fails as migrate would (warns with --force)")
    func refusedWhileOpen() throws {
        let fixture = try MigrationFixture()
        try fixture.write("0001_add_priority.sql", MigrationFixture.addPriority)
        let ready = fixture.folder.file("held")
        let holder = try ChildProcess.Running(Binaries.lab, ["hold", fixture.store, "--mode", "read", "--seconds", "30", "--ready-file", ready])
        defer { holder.signal(SIGTERM); _ = holder.wait() }
        #expect(ChildProcess.waitFor(file: ready))
        let before = try Hashing.sha256(ofFile: fixture.store)
        let error = #expect(throws: StoreOpsError.self) { try Migrate.run(fixture.options()) }
        #expect(error?.status == .busy)
        #expect(error?.message.contains("pid \(holder.pid)") == true)
        #expect(try Hashing.sha256(ofFile: fixture.store) == before)
        #expect(snapshotCount(fixture.repo) == 0)
        let check = try Preflight.run(store: fixture.store, options: .init(operation: .migrate)).checks.first { $0.id == "lock.writer" }
        #expect(check?.status == .fail && check?.advice?.contains("75") == true)
        let forcedCheck = try Preflight.run(store: fixture.store, options: .init(operation: .migrate, force: true)).checks.first { $0.id == "lock.writer" }
        #expect(forcedCheck?.status == .warn)

        var forced = fixture.options()
        forced.force = true
        #expect(try Migrate.run(forced).status == .ok)
        #expect(try fixture.version() == 1)
    }

    @Test("rollback after the fact restores the snapshot taken before the run that applied the newest migration, after a safety snapshot; nothing to roll back on a store never migrated")
    func rollbackLater() throws {
        let fixture = try MigrationFixture()
        let original = try logicalDigest(fixture.store)
        try fixture.write("0001_add_priority.sql", MigrationFixture.addPriority)
        _ = try Migrate.run(fixture.options())
        let migrated = try logicalDigest(fixture.store)
        let result = try Rollback.run(.init(store: fixture.store, repository: fixture.repo))
        #expect(result.verified == true && result.version == 0)
        #expect(try logicalDigest(fixture.store) == original)
        let safety = try #require(result.safetySnapshot)
        let kept = fixture.folder.file("kept.sqlite")
        _ = try SnapshotRestore.run(.init(repository: fixture.repo, id: safety, target: .file(kept)))
        #expect(try logicalDigest(kept) == migrated)
        // A store no migration was applied to: nothing to roll back, and nothing changes.
        let none = try MigrationFixture()
        let untouched = try logicalDigest(none.store)
        let nothing = try Rollback.run(.init(store: none.store, repository: fixture.repo))
        #expect(nothing.nothingToRollBack && nothing.restored == nil && nothing.verified == nil && nothing.safetySnapshot == nil)
        #expect(try logicalDigest(none.store) == untouched)
    }

    @Test("bad input: a missing store or folder (66), a file that is not a store, misnamed, clashing or orphaned files (65); nothing touched",
          arguments: ["no store", "not a store", "no folder", "bad name", "same version", "verify without migration"])
    func badInput(_ case_: String) throws {
        let fixture = try MigrationFixture()
        try fixture.write("0001_add_priority.sql", MigrationFixture.addPriority)
        var options = fixture.options(rollback: true)
        var expected = ExitStatus.badData
        var mentions = ""
        switch case_ {
        case "no store":
            options.store = fixture.folder.file("Missing.sqlite"); expected = .noInput; mentions = "Missing.sqlite"
        case "not a store":
            options.store = fixture.folder.file("notes.txt"); mentions = "notes.txt"
            try Data(String(repeating: "not a database\n", count: 400).utf8).write(to: URL(fileURLWithPath: options.store))
        case "no folder":
            options.migrations = fixture.folder.file("nowhere"); expected = .noInput; mentions = "nowhere"
        case "bad name":
            try fixture.write("add_tags.sql", "SELECT 1;"); mentions = "NNNN_name.sql"
        case "same version":
            try fixture.write("0001_other.sql", "SELECT 1;"); mentions = "both have version 1"
        default:
            try fixture.write("0002_gone.verify.sql", "SELECT 1;"); mentions = "has no migration 0002_gone.sql"
        }
        let before = try Hashing.sha256(ofFile: fixture.store)
        let error = #expect(throws: StoreOpsError.self) { try Migrate.run(options) }
        #expect(error?.status == expected, "\(error?.message ?? "")")
        #expect(error?.message.contains(mentions) == true, "\(error?.message ?? "")")
        #expect(try Hashing.sha256(ofFile: fixture.store) == before)
        #expect(try fixture.version() == 0)
        #expect(snapshotCount(fixture.repo) == 0, "no snapshot was taken")
    }

    @Test("--to stops at a version; going down is refused (64)")
    func toVersion() throws {
        let fixture = try MigrationFixture()
        try fixture.write("0001_add_priority.sql", MigrationFixture.addPriority)
        try fixture.write("0002_upper_categories.sql", MigrationFixture.upperCategories)
        #expect(try Migrate.run(fixture.options(to: 1)).applied.map(\.version) == [1])
        #expect((#expect(throws: StoreOpsError.self) { try Migrate.run(fixture.options(to: 0)) })?.status == .usage)
    }

    @Test("migrate holds its repository from the lock stage to the end: a prune during the migration is refused (75), so the pre-migrate snapshot it would roll back to cannot go; rollback is one road")
    func repositoryHeldThroughTheRun() throws {
        let fixture = try MigrationFixture()
        try fixture.write("0001_upper_categories.sql", MigrationFixture.upperCategories)
        let pruned = Locked<StoreOps.ExitStatus?>(nil)
        let repo = fixture.repo
        let stage = Migration(version: 2, name: "prune_meanwhile", revision: "1", sql: "UPDATE ZTAG SET ZNAME = lower(ZNAME)",
                              didMigrate: { _ in
                                  do { _ = try SnapshotPrune.run(.init(repository: repo, policy: .init(last: 1))) } catch let error as StoreOpsError {
                                      pruned.set(error.status)
                                  }
                              })
        let report = try Migrate.run(fixture.options(stages: [stage]))
        #expect(report.status == .ok, "\(report.failure ?? "")")
        #expect(pruned.get() == .busy, "the prune met the migration's lock: \(String(describing: pruned.get()))")
        // Now the prune goes through; rollback walks one road: lock, preflight, snapshot, swap, commit.
        let result = try Rollback.run(.init(store: fixture.store, repository: fixture.repo))
        #expect(result.restored == report.snapshot && result.version == 0)
        #expect(result.stages.map(\.name) == ["lock", "preflight", "snapshot", "swap", "commit"], "\(result.stages.map(\.name))")
    }
}

/// A value a @Sendable closure can set.
final class Locked<T: Sendable>: @unchecked Sendable {
    private var value: T
    private let lock = NSLock()
    init(_ value: T) { self.value = value }
    func set(_ new: T) { lock.lock(); value = new; lock.unlock() }
    func get() -> T { lock.lock(); defer { lock.unlock() }; return value }
}
