import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

@Suite("preflight")
struct PreflightTests {
    @Test("a healthy sample store passes every check, with its entity counts")
    func healthyStore() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 3_000)
        let report = try Preflight.run(store: store, options: .init(full: true))
        #expect(report.passed)
        #expect(report.checks.allSatisfy { $0.status == .ok }, "\(report.checks.filter { $0.status != .ok }.map { "\($0.id): \($0.summary) \($0.details)" })")
        let ids = Set(report.checks.map(\.id))
        for id in ["lock.writer", "lock.job", "store.size", "store.journal", "store.freelist", "store.user_version",
                   "space.destination", "space.temp", "integrity.quick_check", "integrity.integrity_check",
                   "integrity.foreign_key_check", "coredata.metadata", "coredata.entities", "coredata.z_max", "coredata.orphans"] {
            #expect(ids.contains(id), "missing check \(id)")
        }
        let counts = Dictionary(uniqueKeysWithValues: (report.entities ?? []).map { ($0.entity, $0.rows) })
        #expect(counts["Task"]!! + counts["Note"]!! == 3_000)
        #expect(counts["Item"] == 0, "the abstract root has no rows of its own")
        #expect(counts["Category"] == 50)
        #expect(report.check("coredata.orphans")?.summary == "0 orphans in 2 to-one relationship columns, 2 many-to-many link columns")
    }

    @Test("orphaned to-one relationships fail the check, naming the column and count")
    func orphans() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        try DatabaseQueue(path: store).write { db in
            try db.execute(sql: "UPDATE ZITEM SET ZCATEGORY = 9999 WHERE Z_PK IN (1, 2, 3)")
            try db.execute(sql: "DELETE FROM ZITEM WHERE Z_PK = 10")   // attachment 1 points at item 10
        }
        let report = try Preflight.run(store: store)
        #expect(!report.passed)
        let check = try #require(report.check("coredata.orphans"))
        #expect(check.status == .fail)
        #expect(check.details.contains("ZITEM.ZCATEGORY -> ZCATEGORY: 3 (Item.category)"))
        #expect(check.details.contains("ZATTACHMENT.ZITEM -> ZITEM: 1 (Attachment.item)"))
        // Many-to-many links too (a join table's rows were not looked at): item 10's tag links,
        // and a link written to a tag that never was.
        let linksOfTen = try DatabaseQueue(path: store).read { try Int.fetchOne($0, sql: "SELECT count(*) FROM Z_2TAGS WHERE Z_2ITEMS = 10") } ?? 0
        try DatabaseQueue(path: store).write { try $0.execute(sql: "INSERT INTO Z_2TAGS (Z_2ITEMS, Z_6TAGS) VALUES (1, 9999)") }
        let again = try #require(try Preflight.run(store: store).check("coredata.orphans"))
        #expect(again.status == .fail && again.details.contains("Z_2TAGS.Z_6TAGS -> ZTAG: 1 (Item.tags)"), "\(again.details)")
        if linksOfTen > 0 { #expect(again.details.contains("Z_2TAGS.Z_2ITEMS -> ZITEM: \(linksOfTen) (Item.tags)"), "\(again.details)") }
        #expect(again.summary.contains("links to missing objects") || again.summary.contains("link to a missing object"), "\(again.summary)")
    }

    @Test("Z_MAX below max(Z_PK) fails the check")
    func keyCounter() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        try DatabaseQueue(path: store).write { db in try db.execute(sql: "UPDATE Z_PRIMARYKEY SET Z_MAX = 10 WHERE Z_NAME = 'Item'") }
        let report = try Preflight.run(store: store)
        let check = try #require(report.check("coredata.z_max"))
        #expect(check.status == .fail)
        #expect(check.details == ["Item (ZITEM): Z_MAX 10 < max(Z_PK) 2000"])
    }

    @Test("checks of a store under a live writer see consistent snapshots (no false Z_MAX or orphan failures)")
    func liveWriterNoFalseFailures() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 20_000)
        let ready = folder.file("writer.ready")
        let writer = try ChildProcess.Running(Binaries.lab, ["writer", store, "--interval-ms", "1", "--ready-file", ready])
        defer { writer.signal(SIGTERM); _ = writer.wait() }
        #expect(ChildProcess.waitFor(file: ready))
        for _ in 0..<15 {
            let report = try Preflight.run(store: store)
            #expect(report.check("coredata.z_max")?.status == .ok, "\(report.check("coredata.z_max")?.details ?? [])")
            #expect(report.check("coredata.orphans")?.status == .ok)
        }
    }

    @Test("a process in a write transaction is named (WAL and rollback modes)", arguments: ["wal", "delete"])
    func writerIsSeen(_ mode: String) throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, journalMode: mode)
        let ready = folder.file("held")
        let holder = try ChildProcess.Running(Binaries.lab, ["hold", store, "--mode", "write", "--seconds", "30", "--ready-file", ready])
        defer { holder.signal(SIGTERM); _ = holder.wait() }
        #expect(ChildProcess.waitFor(file: ready))
        let report = try Preflight.run(store: store)
        let check = try #require(report.check("lock.writer"))
        #expect(check.status == .warn)
        #expect(check.summary == "pid \(holder.pid) holds a write transaction right now")
        #expect(report.passed, "a writer is a warning, not a failure")
    }

    @Test("a held job lock fails a migrate/purge preflight and warns for a backup")
    func jobLock() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        let ready = folder.file("held")
        let holder = try ChildProcess.Running(Binaries.lab, ["job-lock", store, "--job", "purge", "--seconds", "30", "--ready-file", ready])
        defer { holder.signal(SIGTERM); _ = holder.wait() }
        #expect(ChildProcess.waitFor(file: ready))
        #expect(try Preflight.run(store: store, options: .init(operation: .backup)).check("lock.job")?.status == .warn)
        let migrate = try Preflight.run(store: store, options: .init(operation: .migrate))
        #expect(migrate.check("lock.job")?.status == .fail)
        #expect(migrate.check("lock.job")?.summary.contains("storectl purge (pid \(holder.pid))") == true)
        #expect(!migrate.passed)
        // The lock of the process running the preflight is its own: not a conflict.
        holder.signal(SIGTERM)
        _ = holder.wait()
        let own = try JobLock.acquire(path: StoreFile(unchecked: store).jobLockPath, job: "migrate")
        defer { own.release() }
        #expect(try Preflight.run(store: store, options: .init(operation: .migrate)).check("lock.job")?.summary == "held by this run (storectl migrate)")
    }

    @Test("a destination without room fails space.destination, with the figures", .enabled(if: TempMount.isAvailable))
    func spaceShortfall() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 10_000)
        let mount = try #require(TempMount(kilobytes: 512))
        let report = try Preflight.run(store: store, options: .init(operation: .snapshot, destination: mount.path))
        let check = try #require(report.check("space.destination"))
        #expect(check.status == .fail)
        #expect(check.summary.contains("512.0 KiB free"))
        #expect(!report.passed)
    }

    @Test("operations need different amounts of space")
    func spaceModel() {
        let info = StoreInfo(path: "/x", journalMode: "wal", pageSize: 4096, pageCount: 262_144, freelistCount: 0, userVersion: 0,
                             fileBytes: 1 << 30, walBytes: 0, sqliteVersion: "3")
        let gib: UInt64 = 1 << 30
        let backup = SpaceRequirement.need(.backup, info: info)
        let snapshot = SpaceRequirement.need(.snapshot, info: info)
        let migrate = SpaceRequirement.need(.migrate, info: info)
        let purge = SpaceRequirement.need(.purge, info: info)
        #expect(backup.destination == gib + gib / 20 + (4 << 20))
        #expect(snapshot.destination == 2 * gib + gib / 20 + (4 << 20))
        #expect(migrate.storeVolume == gib + gib / 20 + (4 << 20))
        #expect(migrate.temp == gib / 4)
        #expect(purge.destination == 0)
        let purgeNeed: UInt64 = gib / 10 + (4 << 20)
        #expect(purge.storeVolume == purgeNeed)
    }

    @Test("a damaged store fails the integrity check (exit 2, not a crash)")
    func damagedStore() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 5_000, journalMode: "delete")
        let handle = try #require(FileHandle(forWritingAtPath: store))
        try handle.seek(toOffset: UInt64(20 * 4096))
        handle.write(Data(repeating: 0xEE, count: 4 * 4096))
        try handle.close()
        let report = try Preflight.run(store: store)
        #expect(report.check("integrity.quick_check")?.status == .fail)
        #expect(!report.passed)
    }

    @Test("a large WAL is a warning; a plain (non-Core Data) store has no Core Data checks")
    func plainStoreAndLargeWAL() throws {
        let folder = try TempFolder()
        let path = folder.file("plain.sqlite")
        var config = Configuration()
        config.prepareDatabase { db in try db.execute(sql: "PRAGMA wal_autocheckpoint = 0") }
        let app = try DatabaseQueue(path: path, configuration: config)
        try app.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA journal_mode = WAL")
            try db.execute(sql: "CREATE TABLE t (x BLOB)")
        }
        try app.write { db in
            for _ in 0..<80 { try db.execute(sql: "INSERT INTO t VALUES (zeroblob(1000000))") }
        }
        let report = try Preflight.run(store: path)
        #expect(report.check("store.journal")?.status == .warn)
        #expect(report.entities == nil)
        #expect(!report.checks.contains { $0.id.hasPrefix("coredata.") })
        try app.close()
    }

    @Test("bad input: missing store 66, not SQLite 65, missing destination 73")
    func badInput() throws {
        let folder = try TempFolder()
        #expect((#expect(throws: StoreOpsError.self) { try Preflight.run(store: folder.file("missing")) })?.status == .noInput)
        try Data("hello".utf8).write(to: URL(fileURLWithPath: folder.file("x.sqlite")))
        #expect((#expect(throws: StoreOpsError.self) { try Preflight.run(store: folder.file("x.sqlite")) })?.status == .badData)
        let store = try sampleStore(in: folder)
        let error = #expect(throws: StoreOpsError.self) {
            try Preflight.run(store: store, options: .init(destination: folder.file("nowhere")))
        }
        #expect(error?.status == .cannotCreate)
    }

    @Test("preflight never writes to the store")
    func readOnly() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        let before = try Hashing.sha256(ofFile: store)
        _ = try Preflight.run(store: store, options: .init(operation: .migrate, full: true))
        #expect(try Hashing.sha256(ofFile: store) == before)
        #expect(!FileManager.default.fileExists(atPath: StoreFile(unchecked: store).jobLockPath))
    }
}
