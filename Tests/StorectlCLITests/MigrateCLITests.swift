import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

/// A sample store with three migrations, through the real binary.
struct MigrationCLIFixture {
    let folder: TempFolder
    let store: String
    let migrations: String
    let repo: String

    init(items: Int = 2_000, slow: Bool = false) throws {
        folder = try TempFolder()
        store = try makeStore(folder, items: items)
        migrations = folder.file("migrations")
        // Format 2, plain: the pre-migrate snapshot and the rollback go through pages.
        repo = try folder.repository("snaps")
        try FileManager.default.createDirectory(atPath: migrations, withIntermediateDirectories: false)
        let files = [
            "0001_add_priority.sql": "ALTER TABLE ZITEM ADD COLUMN ZPRIORITYLABEL VARCHAR;\nUPDATE ZITEM SET ZPRIORITYLABEL = 'p' || ZPRIORITY;",
            "0001_add_priority.verify.sql": "SELECT count(*) = 0 FROM ZITEM WHERE ZPRIORITYLABEL IS NULL;",
            "0002_numbers.sql": slow
                ? "CREATE TABLE numbers AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) SELECT x FROM c;"
                : "CREATE TABLE numbers (x INTEGER);\nINSERT INTO numbers VALUES (1), (2), (3);",
            "0003_upper_categories.sql": "UPDATE ZCATEGORY SET ZNAME = upper(ZNAME);",
        ]
        for (name, sql) in files {
            try Data(sql.utf8).write(to: URL(fileURLWithPath: (migrations as NSString).appendingPathComponent(name)))
        }
    }

    func migrate(_ extra: [String] = [], environment: [String: String]? = nil) throws -> ChildProcess.Result {
        try ChildProcess.run(Binaries.storectl, ["migrate", store, "--migrations", migrations, "--repo", repo] + extra, environment: environment)
    }

    var journal: String { store + ".storectl-migration.json" }
}

@Suite("storectl migrate and rollback, end to end", .onTestThreads)
struct MigrateCLITests {
    @Test("dry run, migrate, status, rollback: output and exit statuses")
    func tour() throws {
        let fixture = try MigrationCLIFixture()
        let dry = try fixture.migrate(["--dry-run"])
        #expect(dry.status == 0 && dry.stdout.hasPrefix("plan for \(fixture.store): version 0 -> 3 (dry run: nothing changed)"))
        #expect(dry.stdout.contains("0001_add_priority  sha256 ") && dry.stdout.contains("1 check"))
        let run = try fixture.migrate()
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("applied 0003_upper_categories") && run.stdout.hasSuffix("result: migrated\n"))
        let status = try storectl("migrate", "status", fixture.store, "--migrations", fixture.migrations)
        #expect(status.status == 0 && status.stdout.contains("version 3") && status.stdout.contains("applied  0002_numbers"))
        #expect(try fixture.migrate().stdout == "\(fixture.store) is up to date at version 3\n")
        let rollback = try storectl("rollback", fixture.store, "--repo", fixture.repo)
        #expect(rollback.status == 0 && rollback.stdout.contains("(version 0)"), "\(rollback.stderr)")
        #expect(try storectl("rollback", fixture.store).status == 64, "--repo is required")
    }

    @Test("a rollback killed after its swap, before it said so, and run again: it says the store is already rolled back (exit 0) instead of rolling back the run before as well; the run after that does roll that one back")
    func rollbackRunAgainAfterKill() throws {
        let fixture = try MigrationCLIFixture()
        #expect(try fixture.migrate(["--to", "1"]).status == 0)
        #expect(try fixture.migrate().status == 0)
        let killed = try ChildProcess.run(Binaries.storectl, ["rollback", fixture.store, "--repo", fixture.repo],
                                          environment: ["STORECTL_FAULT_POINT": "swap.done"])
        #expect(killed.status == 137, "\(killed.stderr)")
        let again = try storectl("rollback", fixture.store, "--repo", fixture.repo)
        #expect(again.status == 0 && again.stdout.hasPrefix("already rolled back: \(fixture.store) is at version 1;")
                && again.stdout.contains("nothing more was rolled back"), "\(again.stdout)\(again.stderr)")
        #expect(FileSystem.kind(of: fixture.store + ".storectl-rollback.json") == .missing)
        let status = try storectl("migrate", "status", fixture.store, "--migrations", fixture.migrations)
        #expect(status.stdout.contains("version 1"), "\(status.stdout)")
        // Asked again, it rolls back the run before.
        let before = try storectl("rollback", fixture.store, "--repo", fixture.repo)
        #expect(before.status == 0 && before.stdout.contains("(version 0)"), "\(before.stdout)\(before.stderr)")
        // Killed before its swap: the file it left is stale (the version is the one it started
        // from), and the next run rolls back.
        #expect(try fixture.migrate().status == 0)
        let early = try ChildProcess.run(Binaries.storectl, ["rollback", fixture.store, "--repo", fixture.repo],
                                         environment: ["STORECTL_FAULT_POINT": "rollback.intent.rename"])
        #expect(early.status == 137 && FileSystem.kind(of: fixture.store + ".storectl-rollback.json") == .file, "\(early.stderr)")
        let after = try storectl("rollback", fixture.store, "--repo", fixture.repo)
        #expect(after.status == 0 && after.stdout.contains("rolled back") && after.stdout.contains("(version 0)"), "\(after.stdout)\(after.stderr)")
        #expect(FileSystem.kind(of: fixture.store + ".storectl-rollback.json") == .missing)
        // Killed after its swap, then the store migrated again (a partial run): the file no
        // longer describes the store, and the next rollback undoes that run.
        #expect(try fixture.migrate().status == 0)
        let swapped = try ChildProcess.run(Binaries.storectl, ["rollback", fixture.store, "--repo", fixture.repo],
                                           environment: ["STORECTL_FAULT_POINT": "swap.done"])
        #expect(swapped.status == 137, "\(swapped.stderr)")
        #expect(try fixture.migrate(["--to", "2"]).status == 0)
        let migrated = try storectl("rollback", fixture.store, "--repo", fixture.repo)
        #expect(migrated.status == 0 && migrated.stdout.hasPrefix("rolled back") && migrated.stdout.contains("(version 0)"), "\(migrated.stdout)\(migrated.stderr)")
        #expect(FileSystem.kind(of: fixture.store + ".storectl-rollback.json") == .missing)
    }

    @Test("a failure after a migration committed: with --rollback-on-failure exits 3; without it exits 1 and prints the rollback command; when nothing committed, 1 with nothing to roll back and no journal left")
    func failures() throws {
        let fixture = try MigrationCLIFixture()
        #expect(try fixture.migrate().status == 0, "migrations 1-3")
        // The run's first migration fails: nothing committed, so nothing is rolled back, with or without the option.
        try Data("INSERT INTO nowhere VALUES (1);".utf8).write(to: URL(fileURLWithPath: fixture.migrations + "/0004_bad.sql"))
        let before = try storeDigest(fixture.store)
        for options in [[], ["--rollback-on-failure"]] {
            let first = try fixture.migrate(options)
            #expect(first.status == 1, "\(options): \(first.stdout)")
            #expect(first.stdout.contains("FAILED: 0004_bad.sql statement 1 of 1 (`INSERT INTO nowhere VALUES (1);`): ") && first.stdout.contains("nothing was committed") && !first.stdout.contains("storectl rollback"),
                    "\(first.stdout)")
            #expect(try storeDigest(fixture.store) == before)
            let status = try storectl("migrate", "status", fixture.store, "--migrations", fixture.migrations)
            #expect(!status.stdout.contains("INTERRUPTED"), "\(status.stdout)")
        }
        // A good migration first, then the bad one.
        try FileManager.default.moveItem(atPath: fixture.migrations + "/0004_bad.sql", toPath: fixture.migrations + "/0005_bad.sql")
        try Data("UPDATE ZCATEGORY SET ZNAME = ZNAME;".utf8).write(to: URL(fileURLWithPath: fixture.migrations + "/0004_touch.sql"))
        let stopped = try fixture.migrate()
        #expect(stopped.status == 1)
        #expect(stopped.stdout.contains("FAILED: 0005_bad.sql statement 1 of 1") && stopped.stdout.contains("storectl rollback \(fixture.store) --repo "))
        // 0004 is applied now; 0006 commits, then 0007 fails.
        try Data("UPDATE ZCATEGORY SET ZCOLOR = ZCOLOR;".utf8).write(to: URL(fileURLWithPath: fixture.migrations + "/0006_touch.sql"))
        try FileManager.default.moveItem(atPath: fixture.migrations + "/0005_bad.sql", toPath: fixture.migrations + "/0007_bad.sql")
        let rolled = try fixture.migrate(["--rollback-on-failure"])
        #expect(rolled.status == 3, "\(rolled.stdout)")
        #expect(rolled.stdout.contains("the store is the pre-migration snapshot (checked before the swap)"))
        // Rollback after a rolled-back run is not a no-op: it undoes the last run that succeeded
        // (0004, version 4 -> 3), then the one before (0001-0003 -> 0), then says there is nothing left.
        let afterFailed = try storectl("rollback", fixture.store, "--repo", fixture.repo)
        #expect(afterFailed.status == 0 && afterFailed.stdout.contains("(version 3)"), "\(afterFailed.stdout)\(afterFailed.stderr)")
        let again = try storectl("rollback", fixture.store, "--repo", fixture.repo)
        #expect(again.status == 0 && again.stdout.contains("(version 0)"), "\(again.stdout)\(again.stderr)")
        let atZero = try storeDigest(fixture.store)
        let nothing = try storectl("rollback", fixture.store, "--repo", fixture.repo)
        #expect(nothing.status == 0 && nothing.stdout.contains("nothing to roll back: no migration has been applied to \(fixture.store) (version 0)"), "\(nothing.stdout)\(nothing.stderr)")
        #expect(try storeDigest(fixture.store) == atZero, "nothing to roll back changed the store")
    }

    static let points = ["after-lock", "after-snapshot", "after-journal", "after-commit-1", "before-commit-2",
                         "after-commit-3", "before-verify", "before-journal-removal"]

    @Test("kill -9 at any point: the next run says what happened; storectl rollback restores the pre-migrate state", arguments: points)
    func killed(_ point: String) throws {
        let fixture = try MigrationCLIFixture()
        let original = try storeDigest(fixture.store)
        let killed = try fixture.migrate(environment: ["STORECTL_FAULT_POINT": point])
        #expect(killed.status == 137, "\(point): \(killed.stderr)")
        let interrupted = !["after-lock", "after-snapshot"].contains(point)
        #expect(FileManager.default.fileExists(atPath: fixture.journal) == interrupted)
        if interrupted {
            let preflight = try storectl("preflight", fixture.store)
            #expect(preflight.status == 2 && preflight.stdout.contains("fail  migration.interrupted"))
            let again = try fixture.migrate()
            #expect(again.status == 1 && again.stderr.contains("was interrupted") && again.stderr.contains("storectl rollback \(fixture.store) --repo"))
            let rollback = try storectl("rollback", fixture.store, "--repo", fixture.repo)
            #expect(rollback.status == 0 && rollback.stdout.contains("the interrupted migration is cleared"), "\(rollback.stderr)")
            #expect(!FileManager.default.fileExists(atPath: fixture.journal))
        }
        #expect(try storeDigest(fixture.store) == original, "back to (or still at) the state before the migration")
        #expect(try fixture.migrate().status == 0, "and the migration can run again")
    }

    @Test("a run killed at its verify stage, then --resume: what the interrupted run applied is verified against its pre-migrate snapshot (it said up to date, 0, with an undeclared change in the store); undeclared: 2, the store and the journal as they were (rollback restores); declared: 0, saying so")
    func resumeVerifies() throws {
        let fixture = try MigrationCLIFixture()
        #expect(try fixture.migrate().status == 0, "migrations 1-3")
        let before = try storeDigest(fixture.store)
        let sneaky = "-- storectl: changes Category\nUPDATE ZCATEGORY SET ZCOLOR = 'resumed';\nUPDATE ZITEM SET ZTITLE = 'undeclared' WHERE Z_PK = 1;\n"
        try Data(sneaky.utf8).write(to: URL(fileURLWithPath: fixture.migrations + "/0004_color.sql"))
        #expect(try fixture.migrate(environment: ["STORECTL_FAULT_POINT": "before-verify"]).status == 137)
        let applied = try storeDigest(fixture.store)
        let resumed = try fixture.migrate(["--resume"])
        #expect(resumed.status == 2 && resumed.stderr.contains("were never verified") && resumed.stderr.contains("ZTITLE changed in 1 object"), "\(resumed.status) \(resumed.stdout) \(resumed.stderr)")
        #expect(FileManager.default.fileExists(atPath: fixture.journal), "the interruption stays recorded")
        #expect(try storeDigest(fixture.store) == applied, "the resume changed nothing")
        let rollback = try storectl("rollback", fixture.store, "--repo", fixture.repo)
        #expect(rollback.status == 0, "\(rollback.stderr)")
        #expect(try storeDigest(fixture.store) == before)
        // Declared: verified and done.
        try Data("-- storectl: changes Category\nUPDATE ZCATEGORY SET ZCOLOR = 'resumed';\n".utf8).write(to: URL(fileURLWithPath: fixture.migrations + "/0004_color.sql"))
        #expect(try fixture.migrate(environment: ["STORECTL_FAULT_POINT": "before-verify"]).status == 137)
        let good = try fixture.migrate(["--resume"])
        #expect(good.status == 0 && good.stdout.contains("verified against the pre-migrate snapshot") && good.stdout.contains("Category"), "\(good.stdout) \(good.stderr)")
        #expect(!FileManager.default.fileExists(atPath: fixture.journal))
        // The app wrote after the crash (its rows differ from the snapshot too): --force keeps
        // the store as it is, the findings said, not held against it.
        try Data("-- storectl: changes Category\nUPDATE ZCATEGORY SET ZCOLOR = 'again';\n".utf8).write(to: URL(fileURLWithPath: fixture.migrations + "/0005_again.sql"))
        #expect(try fixture.migrate(environment: ["STORECTL_FAULT_POINT": "before-verify"]).status == 137)
        try DatabaseQueue(path: fixture.store).write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'the app' WHERE Z_PK = 2") }
        let refused = try fixture.migrate(["--resume"])
        #expect(refused.status == 2 && refused.stderr.contains("--resume --force"), "\(refused.stderr)")
        let forced = try fixture.migrate(["--resume", "--force"])
        #expect(forced.status == 0 && forced.stdout.contains("NOT VERIFIED (--force)") && forced.stdout.contains("ZTITLE changed in 1 object"), "\(forced.stdout) \(forced.stderr)")
        #expect(!FileManager.default.fileExists(atPath: fixture.journal))
    }

    @Test("a run killed between two migrations, then --resume with the rest pending: what the killed run committed is verified against its pre-migrate snapshot before anything more is applied (a trial: its undeclared change was kept, \"migrated\", exit 0, and rollback's snapshot held it); undeclared: 2, nothing applied, rollback restores the store before the run; declared: the rest applied, 0, saying both")
    func resumeWithPendingVerifiesWhatWasCommitted() throws {
        let fixture = try MigrationCLIFixture()
        #expect(try fixture.migrate().status == 0, "migrations 1-3")
        let before = try storeDigest(fixture.store)
        let sneaky = "-- storectl: changes Category\nUPDATE ZCATEGORY SET ZCOLOR = 'resumed';\nUPDATE ZITEM SET ZTITLE = 'undeclared' WHERE Z_PK = 1;\n"
        try Data(sneaky.utf8).write(to: URL(fileURLWithPath: fixture.migrations + "/0004_color.sql"))
        try Data("-- storectl: changes Category\nUPDATE ZCATEGORY SET ZCOLOR = 'five';\n".utf8).write(to: URL(fileURLWithPath: fixture.migrations + "/0005_five.sql"))
        #expect(try fixture.migrate(environment: ["STORECTL_FAULT_POINT": "after-commit-4"]).status == 137)
        let killed = try storeDigest(fixture.store)
        let resumed = try fixture.migrate(["--resume"])
        #expect(resumed.status == 2 && resumed.stderr.contains("were never verified") && resumed.stderr.contains("version 3 -> 4, of the run's 3 -> 5")
                && resumed.stderr.contains("ZTITLE changed in 1 object"), "\(resumed.status) \(resumed.stdout) \(resumed.stderr)")
        #expect(try storeDigest(fixture.store) == killed, "nothing more applied")
        #expect(FileManager.default.fileExists(atPath: fixture.journal), "the interruption stays recorded")
        #expect(try storectl("rollback", fixture.store, "--repo", fixture.repo).status == 0)
        #expect(try storeDigest(fixture.store) == before, "the store before the killed run")
        // Declared: what was committed verified, the rest applied.
        try Data("-- storectl: changes Category\nUPDATE ZCATEGORY SET ZCOLOR = 'resumed';\n".utf8).write(to: URL(fileURLWithPath: fixture.migrations + "/0004_color.sql"))
        #expect(try fixture.migrate(environment: ["STORECTL_FAULT_POINT": "after-commit-4"]).status == 137)
        let good = try fixture.migrate(["--resume"])
        #expect(good.status == 0 && good.stdout.contains("resumed: the interrupted run's migrations verified against the pre-migrate snapshot")
                && good.stdout.contains("applied 0005_five"), "\(good.stdout) \(good.stderr)")
        #expect(!FileManager.default.fileExists(atPath: fixture.journal))
    }

    @Test("a migration that inserts an object without raising Core Data's key counter (Z_PRIMARYKEY.Z_MAX), or changes the store's UUID undeclared, is refused and rolled back (3; a trial's was \"migrated\", exit 0, and preflight failed the store after); one that raises the counter passes")
    func coreDataKeepingAfterMigrations() throws {
        for (sql, refusal) in [
            ("-- storectl: changes Category\nINSERT INTO ZCATEGORY (Z_PK, Z_ENT, Z_OPT, ZNAME) SELECT max(Z_PK) + 1, (SELECT Z_ENT FROM ZCATEGORY LIMIT 1), 1, 'new' FROM ZCATEGORY;\n",
             "key counters are behind the keys in use"),
            ("-- storectl: changes Category\nUPDATE Z_METADATA SET Z_UUID = 'AAAAAAAA-0000-0000-0000-000000000000';\n", "changed the store's UUID"),
            ("-- storectl: changes Category\nINSERT INTO ZCATEGORY (Z_PK, Z_ENT, Z_OPT, ZNAME) SELECT max(Z_PK) + 1, (SELECT Z_ENT FROM ZCATEGORY LIMIT 1), 1, 'new' FROM ZCATEGORY;\n"
             + "UPDATE Z_PRIMARYKEY SET Z_MAX = (SELECT max(Z_PK) FROM ZCATEGORY) WHERE Z_NAME = 'Category';\n", ""),
        ] {
            let fixture = try MigrationCLIFixture()
            #expect(try fixture.migrate().status == 0, "migrations 1-3")
            let before = try storeDigest(fixture.store)
            try Data(sql.utf8).write(to: URL(fileURLWithPath: fixture.migrations + "/0004_more.sql"))
            // The dry run finds it too (it said 0), and says the run would roll back.
            let dry = try fixture.migrate(["--dry-run"])
            if refusal.isEmpty {
                #expect(dry.status == 0, "\(dry.stdout) \(dry.stderr)")
            } else {
                #expect(dry.status == 2 && dry.stdout.contains(refusal) && dry.stdout.contains("roll back to its snapshot at its verify stage (exit 3)"), "\(refusal): \(dry.status) \(dry.stdout) \(dry.stderr)")
            }
            let run = try fixture.migrate()
            if refusal.isEmpty {
                #expect(run.status == 0, "\(run.stdout) \(run.stderr)")
                #expect(try storectl("preflight", fixture.store).status == 0)
            } else {
                #expect(run.status == 3 && (run.stdout + run.stderr).contains(refusal), "\(refusal): \(run.status) \(run.stdout) \(run.stderr)")
                #expect(try storeDigest(fixture.store) == before, "rolled back")
            }
        }
    }

    @Test("a trigger the migration itself makes (or rewrites) is the migration's: what it writes is undeclared (3, rolled back; a trial's was \"migrated\", the trigger excused as the store's own), in the dry run too; the same write through a trigger the store had before is the schema's")
    func aMigrationsOwnTriggerIsNotTheSchemas() throws {
        let make = "CREATE TRIGGER sneaky AFTER UPDATE OF ZNAME ON ZCATEGORY BEGIN UPDATE ZITEM SET ZTITLE = 'hacked'; END;\n"
        for (sql, rewrite, allowed) in [
            (make + "UPDATE ZCATEGORY SET ZNAME = ZNAME || '!' WHERE Z_PK = 1;\n", false, false),
            // Made and dropped again inside the run: not in the schema after it either.
            (make + "UPDATE ZCATEGORY SET ZNAME = ZNAME || '!' WHERE Z_PK = 1;\nDROP TRIGGER sneaky;\n", false, false),
            // The store's own trigger, rewritten by the migration to write more.
            ("DROP TRIGGER own;\n" + make.replacingOccurrences(of: "sneaky", with: "own") + "UPDATE ZCATEGORY SET ZNAME = ZNAME || '!' WHERE Z_PK = 1;\n", true, false),
            // The store's own trigger, left as it was.
            ("UPDATE ZCATEGORY SET ZNAME = ZNAME || '!' WHERE Z_PK = 1;\n", true, true),
        ] {
            let fixture = try MigrationCLIFixture()
            #expect(try fixture.migrate().status == 0, "migrations 1-3")
            if rewrite {
                try DatabaseQueue(path: fixture.store).write { db in
                    try db.execute(sql: "CREATE TABLE AUDIT (n INTEGER)")
                    try db.execute(sql: "CREATE TRIGGER own AFTER UPDATE OF ZNAME ON ZCATEGORY BEGIN INSERT INTO AUDIT VALUES (new.Z_PK); END")
                }
            }
            let before = try storeDigest(fixture.store)
            try Data(("-- storectl: changes Category.name\n" + sql).utf8).write(to: URL(fileURLWithPath: fixture.migrations + "/0004_names.sql"))
            let dry = try fixture.migrate(["--dry-run"])
            let run = try fixture.migrate()
            if allowed {
                #expect(dry.status == 0, "\(dry.stdout) \(dry.stderr)")
                #expect(run.status == 0, "\(run.stdout) \(run.stderr)")
            } else {
                #expect(dry.status == 2 && dry.stdout.contains("NOT DECLARED"), "\(sql): \(dry.status) \(dry.stdout) \(dry.stderr)")
                #expect(run.status == 3 && run.stdout.contains("(ZITEM): ZTITLE changed"), "\(sql): \(run.status) \(run.stdout) \(run.stderr)")
                #expect(try storeDigest(fixture.store) == before, "rolled back")
            }
        }
    }

    @Test("a migration that rewrites Core Data's record of the model (Z_METADATA: version hashes, Z_VERSION; Z_MODELCACHE) without declaring it is rolled back (3) and its dry run says NOT DECLARED naming the table; declared, it passes (a trial: an undeclared rewrite passed)")
    func modelRecordsAreDeclared() throws {
        for (sql, declared, allowed, table) in [
            ("UPDATE Z_METADATA SET Z_VERSION = Z_VERSION + 1;\n", "Category.name", false, "Z_METADATA"),
            ("DELETE FROM Z_MODELCACHE;\n", "Category.name", false, "Z_MODELCACHE"),
            ("UPDATE Z_METADATA SET Z_VERSION = Z_VERSION + 1;\n", "Category.name, Z_METADATA", true, "Z_METADATA"),
        ] {
            let fixture = try MigrationCLIFixture()
            #expect(try fixture.migrate().status == 0, "migrations 1-3")
            let before = try storeDigest(fixture.store)
            try Data("-- storectl: changes \(declared)\nUPDATE ZCATEGORY SET ZNAME = ZNAME || '!' WHERE Z_PK = 1;\n\(sql)".utf8)
                .write(to: URL(fileURLWithPath: fixture.migrations + "/0004_model.sql"))
            let dry = try fixture.migrate(["--dry-run"])
            let run = try fixture.migrate()
            if allowed {
                #expect(dry.status == 0 && run.status == 0, "\(dry.stdout) \(run.stdout) \(run.stderr)")
            } else {
                #expect(dry.status == 2 && dry.stdout.contains("NOT DECLARED") && dry.stdout.contains("table \(table) rewritten"), "\(sql): \(dry.status) \(dry.stdout) \(dry.stderr)")
                #expect(run.status == 3 && run.stdout.contains("table \(table) rewritten"), "\(sql): \(run.status) \(run.stdout) \(run.stderr)")
                #expect(try storeDigest(fixture.store) == before, "rolled back")
            }
        }
    }

    @Test("what the store's own triggers write when a declared change fires them (an R-tree and its shadow tables, as Photos has) is the schema's, not an undeclared change (a trial's declared Photos migration was rolled back for it); the R-tree written by a migration whose declared changes fire no trigger is refused")
    func triggerConsequencesAreTheSchemas() throws {
        let fixture = try MigrationCLIFixture()
        #expect(try fixture.migrate().status == 0, "migrations 1-3")
        try DatabaseQueue(path: fixture.store).write { db in
            try db.execute(sql: "CREATE VIRTUAL TABLE Z_RT_Category_box USING rtree(id, minX, maxX)")
            try db.execute(sql: "CREATE TRIGGER Z_RT_Category_UPDATE AFTER UPDATE OF ZNAME ON ZCATEGORY BEGIN INSERT OR REPLACE INTO Z_RT_Category_box VALUES (new.Z_PK, length(new.ZNAME), length(new.ZNAME) + 1); END")
            // A derived count, kept by a trigger that UPDATEs (a review: the pattern missed `UPDATE t`),
            // and a literal naming another table, which no statement writes.
            try db.execute(sql: "CREATE TABLE Z_TALLY (n INTEGER)")
            try db.execute(sql: "INSERT INTO Z_TALLY VALUES (0)")
            try db.execute(sql: "CREATE TABLE Z_UNTOUCHED (n INTEGER)")
            try db.execute(sql: "CREATE TRIGGER Z_TALLY_UPDATE AFTER UPDATE ON ZCATEGORY BEGIN UPDATE Z_TALLY SET n = n + 1; SELECT CASE WHEN 0 THEN RAISE(ABORT, 'delete from Z_UNTOUCHED first') END; END")
        }
        try Data("-- storectl: changes Category\nUPDATE ZCATEGORY SET ZNAME = ZNAME || '!';\n".utf8).write(to: URL(fileURLWithPath: fixture.migrations + "/0004_names.sql"))
        let dry = try fixture.migrate(["--dry-run"])
        #expect(dry.status == 0 && !dry.stdout.contains("NOT DECLARED"), "\(dry.stdout) \(dry.stderr)")
        let run = try fixture.migrate()
        #expect(run.status == 0, "\(run.stdout) \(run.stderr)")
        let boxes = try DatabaseQueue(path: fixture.store).read { try Int.fetchOne($0, sql: "SELECT count(*) FROM Z_RT_Category_box") }
        #expect((boxes ?? 0) > 0, "the trigger wrote the R-tree")
        // A declared table written without a value changed (a data fix run twice: Photos' favourite
        // set where it was set) fires its triggers all the same: what they write is the schema's
        // (it was "undeclared", and the run rolled back).
        try Data("-- storectl: changes Category.name\nUPDATE ZCATEGORY SET ZNAME = ZNAME WHERE Z_PK = 1;\n".utf8).write(to: URL(fileURLWithPath: fixture.migrations + "/0005_same.sql"))
        let tally = { try DatabaseQueue(path: fixture.store).read { try Int.fetchOne($0, sql: "SELECT n FROM Z_TALLY") } }
        let tallyBefore = try tally()
        let same = try fixture.migrate()
        #expect(same.status == 0 && !same.stdout.contains("NOT DECLARED"), "\(same.stdout) \(same.stderr)")
        #expect(try tally() == tallyBefore.map { $0 + 1 }, "the trigger wrote its table, and the migration stayed")
        try Data("-- storectl: changes Item\nINSERT INTO Z_RT_Category_box VALUES (999999, 1, 2);\n".utf8).write(to: URL(fileURLWithPath: fixture.migrations + "/0006_box.sql"))
        let refused = try fixture.migrate()
        #expect(refused.status == 3 && (refused.stdout + refused.stderr).contains("Z_RT_Category_box"), "\(refused.status) \(refused.stdout) \(refused.stderr)")
        // A table only named in a literal of a trigger on a declared table is not the schema's to write.
        try Data("-- storectl: changes Category\nUPDATE ZCATEGORY SET ZNAME = ZNAME || '?';\nINSERT INTO Z_UNTOUCHED VALUES (1);\n".utf8)
            .write(to: URL(fileURLWithPath: fixture.migrations + "/0006_box.sql"))
        let literal = try fixture.migrate()
        #expect(literal.status == 3 && (literal.stdout + literal.stderr).contains("Z_UNTOUCHED"), "\(literal.status) \(literal.stdout) \(literal.stderr)")
    }

    @Test("killed before its first migration committed, beside an app that went on committing: rollback restores nothing (the run committed nothing; restoring its snapshot would take the app's commits out of the store), clears the journal, and says so; with a no-transaction migration pending it cannot prove that and restores")
    func interruptedBeforeAnyCommit() throws {
        for noTransaction in [false, true] {
            let fixture = try MigrationCLIFixture()
            if noTransaction {
                try Data("-- storectl: no-transaction\nVACUUM;".utf8)
                    .write(to: URL(fileURLWithPath: (fixture.migrations as NSString).appendingPathComponent("0002_numbers.sql")))
            }
            let killed = try fixture.migrate(environment: ["STORECTL_FAULT_POINT": "after-journal"])
            #expect(killed.status == 137, "\(killed.stderr)")
            // The app, after the kill: a commit of its own.
            try DatabaseQueue(path: fixture.store).write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'the app wrote this' WHERE Z_PK = 1") }
            let rollback = try storectl("rollback", fixture.store, "--repo", fixture.repo, "--json")
            #expect(rollback.status == 0, "\(rollback.stderr)")
            let result = try JSON.decoder().decode(Rollback.Result.self, from: Data(rollback.stdout.utf8))
            #expect(result.interruptedRunCommittedNothing == !noTransaction && result.nothingToRollBack == !noTransaction && result.clearedInterruptedMigration)
            #expect((result.safetySnapshot == nil) == !noTransaction, "a restore makes a safety snapshot; none without one")
            let title = try DatabaseQueue(path: fixture.store).read { try String.fetchOne($0, sql: "SELECT ZTITLE FROM ZITEM WHERE Z_PK = 1") }
            #expect((title == "the app wrote this") == !noTransaction, "\(noTransaction): \(title ?? "")")
            #expect(!FileManager.default.fileExists(atPath: fixture.journal))
            #expect(try fixture.migrate().status == 0, "and the migration can run again")
        }
        let text = try MigrationCLIFixture()
        #expect(try text.migrate(environment: ["STORECTL_FAULT_POINT": "after-journal"]).status == 137)
        let said = try storectl("rollback", text.store, "--repo", text.repo)
        #expect(said.status == 0 && said.stdout.contains("is at version 0, where the interrupted migration started (none of its migrations is in it); the interrupted migration is cleared"), "\(said.stdout)")
        // The hint names the interrupted run's snapshot, the one `--to` would put back.
        let named = said.stdout.components(separatedBy: "to restore its snapshot anyway: --to ").last?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        #expect(try SnapshotSummary.list(repository: text.repo).contains { $0.id == named }, "\(said.stdout)")
    }

    @Test("migrate --wait waits for the app's connections to close (75 at once without it), up to --timeout; past it, 75 all the same")
    func waitsForTheApp() throws {
        let fixture = try MigrationCLIFixture()
        let held = fixture.folder.file("held")
        // The holder stays until the test lets it go (a 2 s hold could end before a loaded
        // machine's second run looked).
        let holder = try ChildProcess.Running(Binaries.lab, ["hold", fixture.store, "--mode", "read", "--seconds", "120", "--ready-file", held])
        #expect(ChildProcess.waitFor(file: held))
        let refused = try fixture.migrate()
        #expect(refused.status == 75 && refused.stderr.contains("pid \(holder.pid)"), "\(refused.stderr)")
        // A dry run says so (a trial's said nothing, 0, where the run is 75), and ends as a dry run does.
        let dry = try fixture.migrate(["--dry-run"])
        #expect(dry.status == 0 && dry.stdout.contains("NOW A RUN WOULD NOT GO: \(fixture.store) is open by another process (pid \(holder.pid))"), "\(dry.stdout)")
        let short = try fixture.migrate(["--wait", "--timeout", "0.3"])
        #expect(short.status == 75, "\(short.stdout)\(short.stderr)")
        // Its progress line says what it waits for (drawn here with STORECTL_PROGRESS=always).
        let waiting = try ChildProcess.Running(Binaries.storectl, ["migrate", fixture.store, "--migrations", fixture.migrations, "--repo", fixture.repo, "--wait"],
                                               environment: ["STORECTL_PROGRESS": "always"])
        #expect(waitUntil { waiting.stderrSoFar.contains("waiting for the app (pid \(holder.pid)) to close the store, for at most") }, "\(waiting.stderrSoFar)")
        #expect(waiting.isRunning, "it waits while the app has the store open")
        holder.signal(SIGTERM)
        _ = holder.wait()
        let waited = waiting.wait()
        #expect(waited.status == 0, "\(waited.stdout)\(waited.stderr)")
        #expect(try DatabaseQueue(path: fixture.store).read { try MigrationHistory.version($0) } == 3)
    }

    @Test("a migration without a transaction (VACUUM) between two others, with and without --force: migrated, each applied once; without --force the run's write lock is taken again after it")
    func noTransactionBetweenOthers() throws {
        for force in [false, true] {
            let fixture = try MigrationCLIFixture()
            try Data("-- storectl: no-transaction\nVACUUM;".utf8)
                .write(to: URL(fileURLWithPath: (fixture.migrations as NSString).appendingPathComponent("0002_numbers.sql")))
            let run = try fixture.migrate(force ? ["--force", "--json"] : ["--json"])
            #expect(run.status == 0, "force \(force): \(run.stdout)\(run.stderr)")
            let report = try JSON.decoder().decode(Migrate.Report.self, from: Data(run.stdout.utf8))
            #expect(report.applied.map(\.version) == [1, 2, 3], "\(report.applied)")
            #expect(try DatabaseQueue(path: fixture.store).read { try MigrationHistory.version($0) } == 3)
            #expect(!FileManager.default.fileExists(atPath: fixture.journal))
        }
    }

    @Test("under the run's write lock the -wal starts over once it holds more than the threshold (checkpointed after the migration, the run's transaction begun again): three migrations that each rewrite every item leave a -wal of about one migration's pages, not three")
    func walStartsOverUnderTheLock() throws {
        func peakWal(threshold: Int) throws -> Int {
            let fixture = try MigrationCLIFixture(items: 20_000)
            for name in try FileManager.default.contentsOfDirectory(atPath: fixture.migrations) {
                try FileManager.default.removeItem(atPath: (fixture.migrations as NSString).appendingPathComponent(name))
            }
            for k in 1...3 {
                try Data("UPDATE ZITEM SET ZTITLE = ZTITLE || '\(k)';".utf8)
                    .write(to: URL(fileURLWithPath: (fixture.migrations as NSString).appendingPathComponent("000\(k)_rewrite.sql")))
            }
            let running = try ChildProcess.Running(Binaries.storectl, ["migrate", fixture.store, "--migrations", fixture.migrations, "--repo", fixture.repo],
                                                   environment: ["STORECTL_TEST_WAL_RESTART_BYTES": "\(threshold)"])
            // SQLite keeps the -wal's length while the store is open: its largest size is the most it held.
            var peak = 0
            while running.isRunning {
                peak = max(peak, Int(FileSystem.size(of: fixture.store + "-wal") ?? 0))
                usleep(1_000)
            }
            let run = running.wait()
            #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
            return peak
        }
        let restarting = try peakWal(threshold: 1), growing = try peakWal(threshold: 1 << 40)
        #expect(restarting > 0 && restarting * 2 < growing, "-wal \(restarting) bytes starting over after each migration, \(growing) never")
    }

    @Test("a rollback killed just after its failed state's -wal got its kept name, beside an older kept -wal that has the plain name: recovery keeps the database under the suffix the run chose, so the two stay a pair (it chose again, and paired the database with the older -wal)")
    func keptSetStaysPairedAfterRecovery() throws {
        let fixture = try MigrationCLIFixture()
        try Data("UPDATE ZCATEGORY SET ZNAME = upper(ZNAME);\nSELECT * FROM no_such_table;".utf8)
            .write(to: URL(fileURLWithPath: (fixture.migrations as NSString).appendingPathComponent("0003_upper_categories.sql")))
        // An earlier failed state's -wal, kept without its database, under every name this run may pick.
        let started = Date()
        for second in 0..<30 {
            try Data("an older kept -wal".utf8).write(to: URL(fileURLWithPath: fixture.store + ".failed-migration-\(Timestamp.compact(started.addingTimeInterval(Double(second))))-wal"))
        }
        let killed = try fixture.migrate(["--rollback-on-failure"], environment: ["STORECTL_FAULT_POINT": "swap.keep.wal"])
        #expect(killed.status == 137, "\(killed.stdout)\(killed.stderr)")
        let recovered = try storectl("recover", fixture.store)
        #expect(recovered.status == 0, "\(recovered.stdout)\(recovered.stderr)")
        let folder = FileSystem.parent(of: fixture.store), name = FileSystem.name(of: fixture.store)
        let kept = try FileManager.default.contentsOfDirectory(atPath: folder)
            .filter { $0.hasPrefix(name + ".failed-migration-") && !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") }
        #expect(kept.count == 1, "\(kept)")
        let wal = (folder as NSString).appendingPathComponent((kept.first ?? "") + "-wal")
        let walBytes = (try? Data(contentsOf: URL(fileURLWithPath: wal))) ?? Data()
        #expect(!walBytes.isEmpty && walBytes != Data("an older kept -wal".utf8), "the kept database's -wal is the run's own: \(kept)")
    }

    @Test("SIGTERM (at a safe point or inside a long statement), or `storectl killswitch engage` from another process, mid-run: rolled back, exit 3",
          arguments: ["SIGTERM", "SIGTERM in a statement", "engage"])
    func stoppedMidRun(_ how: String) throws {
        let fixture = try MigrationCLIFixture(slow: true)
        let original = try storeDigest(fixture.store)
        let running = try ChildProcess.Running(Binaries.storectl, ["migrate", fixture.store, "--migrations", fixture.migrations, "--repo", fixture.repo])
        // The journal appears once the pre-migrate snapshot is verified, just before the first change.
        #expect(ChildProcess.waitFor(file: fixture.journal, timeout: 30))
        if how.hasPrefix("SIGTERM") {
            // 0002 builds a 3,000,000-row table in one statement (about a second): 0.3 s in, it is running.
            if how.hasSuffix("statement") { usleep(300_000) }
            running.signal(SIGTERM)
        } else {
            #expect(try storectl("killswitch", "engage", fixture.store, "--reason", "test").status == 0)
        }
        let result = running.wait()
        #expect(result.status == 3, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("result: rolled back"), "\(result.stdout)")
        #expect(try storeDigest(fixture.store) == original)
        #expect(!FileManager.default.fileExists(atPath: fixture.journal))
        if how == "engage" { #expect(try storectl("killswitch", "release", fixture.store).status == 0) }
    }

    @Test("a new user's trial of migrate: a check that writes is refused and its migration not kept; a .SQL file is refused, not skipped; an empty folder is said so; VACUUM's refusal names the directive; a rehearsal with an undeclared change ends 'checks failed' in its JSON too; a kill switch in no folder is 66")
    func newUsersTrial() throws {
        func write(_ folder: String, _ files: [String: String]) throws {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            for (name, sql) in files { try Data(sql.utf8).write(to: URL(fileURLWithPath: (folder as NSString).appendingPathComponent(name))) }
        }
        let fixture = try MigrationCLIFixture()
        let original = try storeDigest(fixture.store)
        func migrate(_ folder: String, _ extra: [String] = []) throws -> ChildProcess.Result {
            try ChildProcess.run(Binaries.storectl, ["migrate", fixture.store, "--migrations", folder, "--repo", fixture.repo] + extra)
        }
        // A check that writes: its UPDATE … RETURNING passed, and its write was committed.
        let writing = fixture.folder.file("writing")
        try write(writing, ["0001_x.sql": "UPDATE ZTAG SET ZNAME = ZNAME || '!';",
                            "0001_x.verify.sql": "UPDATE ZCATEGORY SET ZNAME = 'changed by a check' WHERE Z_PK = 1 RETURNING 1;"])
        let refused = try migrate(writing, ["--rollback-on-failure"])
        #expect(refused.status != 0 && refused.stdout.contains("check 1 writes to the store") && refused.stdout.contains("a check may only read"),
                "\(refused.status) \(refused.stdout) \(refused.stderr)")
        #expect(try storeDigest(fixture.store) == original, "neither the check's write nor the migration kept")
        // `0002_y.SQL` was skipped without a word.
        let upper = fixture.folder.file("upper")
        try write(upper, ["0001_a.sql": "UPDATE ZTAG SET ZNAME = ZNAME;", "0002_y.SQL": "UPDATE ZTAG SET ZNAME = ZNAME;"])
        let odd = try migrate(upper, ["--dry-run"])
        #expect(odd.status == 65 && odd.stderr.contains("0002_y.SQL") && odd.stderr.contains("mv "), "\(odd.status) \(odd.stderr)")
        // An empty folder: up to date at version 0, and said why.
        let empty = fixture.folder.file("empty")
        try write(empty, [:])
        let none = try migrate(empty)
        #expect(none.status == 0 && none.stderr.contains("holds no migrations"), "\(none.status) \(none.stderr)")
        // VACUUM: the hint names the directive that runs it.
        let vacuum = fixture.folder.file("vacuum")
        try write(vacuum, ["0001_vac.sql": "VACUUM;"])
        let vac = try migrate(vacuum, ["--dry-run"])
        #expect(vac.status == 65 && vac.stderr.contains("-- storectl: no-transaction"), "\(vac.status) \(vac.stderr)")
        // A rehearsal that changes what is not declared: exit 2, and its JSON's ending says why.
        let undeclared = fixture.folder.file("undeclared")
        try write(undeclared, ["0001_titles.sql": "-- storectl: changes Item.ZTITLE\nUPDATE ZITEM SET ZTITLE = ZTITLE || '!' WHERE Z_PK <= 10;\nUPDATE ZCATEGORY SET ZNAME = 'red' WHERE Z_PK = 3;"])
        let dry = try migrate(undeclared, ["--dry-run", "--json"])
        #expect(dry.status == 2, "\(dry.stderr)")
        let ending = try #require(try JSONSerialization.jsonObject(with: Data(dry.stdout.utf8)) as? [String: Any])["ending"] as? [String: Any]
        #expect(ending?["outcome"] as? String != "ok" && (ending?["error"] as? [String: Any])?["status"] as? Int == 2, "\(dry.stdout)")
        // A kill switch that could never be thrown.
        let nowhere = try migrate(fixture.migrations, ["--kill-switch", fixture.folder.file("no/such/folder/ks")])
        #expect(nowhere.status == 66 && nowhere.stderr.contains("could never be thrown"), "\(nowhere.status) \(nowhere.stderr)")
        #expect(try storeDigest(fixture.store) == original)
    }

    @Test("kill -9 from outside at random moments of a slow migration, then rollback", arguments: [0.4, 0.9, 1.6])
    func killedFromOutside(_ delay: Double) throws {
        let fixture = try MigrationCLIFixture(slow: true)
        let original = try storeDigest(fixture.store)
        let running = try ChildProcess.Running(Binaries.storectl, ["migrate", fixture.store, "--migrations", fixture.migrations, "--repo", fixture.repo])
        usleep(useconds_t(delay * 1_000_000))
        running.signal(SIGKILL)
        let status = running.wait().status
        if FileManager.default.fileExists(atPath: fixture.journal) {
            #expect(try storectl("rollback", fixture.store, "--repo", fixture.repo).status == 0)
            #expect(try storeDigest(fixture.store) == original)
        } else if status == 137 {
            #expect(try storeDigest(fixture.store) == original, "killed before the journal: nothing changed")
        }
        #expect(try storectl("preflight", fixture.store).stdout.contains("migration.interrupted") == false)
    }
}

/// SHA-256 of a store's logical content: its schema and every table's rows, read-only.
func storeDigest(_ path: String) throws -> String {
    var config = Configuration()
    config.readonly = true
    let queue = try DatabaseQueue(path: path, configuration: config)
    defer { try? queue.close() }
    return try queue.inDatabase { db in
        var text = ""
        for row in try Row.fetchAll(db, sql: "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name") {
            text += "\(row)\n"
            guard (row["type"] as String) == "table" else { continue }
            text += try StoreState.rows(db, table: row["name"])
        }
        return Hashing.sha256(Data(text.utf8))
    }
}
