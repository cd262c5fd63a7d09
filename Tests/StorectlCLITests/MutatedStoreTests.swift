import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

/// A way to damage a Core Data store, as database browsers, scripts and bad migrations do.
struct StoreMutation: Sendable, CustomTestStringConvertible {
    var name: String
    var apply: @Sendable (Database) throws -> Void
    var testDescription: String { name }

    init(_ name: String, _ sql: String) {
        self.name = name
        apply = { try $0.execute(sql: sql) }
    }

    init(_ name: String, apply: @escaping @Sendable (Database) throws -> Void) {
        self.name = name
        self.apply = apply
    }

    static func plist(_ value: Any) -> Data {
        (try? PropertyListSerialization.data(fromPropertyList: value, format: .binary, options: 0)) ?? Data()
    }

    static let all: [StoreMutation] = [
        StoreMutation("Z_PK declared TEXT with text keys, Z_MAX 0 (a table rebuilt by a database browser)", """
            CREATE TABLE ZITEM_NEW (Z_PK TEXT PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZISDELETED INTEGER, ZPRIORITY INTEGER,
                ZCATEGORY INTEGER, ZCREATEDAT TIMESTAMP, ZDELETEDAT TIMESTAMP, ZDUEDATE TIMESTAMP, ZTITLE VARCHAR, ZBODY VARCHAR);
            INSERT INTO ZITEM_NEW SELECT CAST(Z_PK AS TEXT), Z_ENT, Z_OPT, ZISDELETED, ZPRIORITY, ZCATEGORY, ZCREATEDAT, ZDELETEDAT,
                ZDUEDATE, ZTITLE, ZBODY FROM ZITEM;
            DROP TABLE ZITEM;
            ALTER TABLE ZITEM_NEW RENAME TO ZITEM;
            UPDATE Z_PRIMARYKEY SET Z_MAX = 0 WHERE Z_NAME = 'Item';
            """),
        StoreMutation("text in Z_ENT", "UPDATE ZITEM SET Z_ENT = 'three' WHERE Z_PK % 7 = 0"),
        StoreMutation("NULLs in Z_PRIMARYKEY", "UPDATE Z_PRIMARYKEY SET Z_MAX = NULL, Z_SUPER = NULL WHERE Z_ENT = 3; UPDATE Z_PRIMARYKEY SET Z_NAME = NULL WHERE Z_ENT = 5"),
        StoreMutation("text in Z_PRIMARYKEY", "UPDATE Z_PRIMARYKEY SET Z_MAX = 'many', Z_SUPER = 'none' WHERE Z_ENT = 2"),
        StoreMutation("a blob in Z_PRIMARYKEY.Z_NAME", "UPDATE Z_PRIMARYKEY SET Z_NAME = x'00ff10' WHERE Z_ENT = 6"),
        StoreMutation("a cycle of superentities", "UPDATE Z_PRIMARYKEY SET Z_SUPER = 4 WHERE Z_ENT = 2; UPDATE Z_PRIMARYKEY SET Z_SUPER = 2 WHERE Z_ENT = 4; UPDATE Z_PRIMARYKEY SET Z_SUPER = 3 WHERE Z_ENT = 3"),
        StoreMutation("an entity listed twice", "INSERT INTO Z_PRIMARYKEY VALUES (7, 'Item', 0, 5)"),
        StoreMutation("huge and negative numbers", "UPDATE Z_PRIMARYKEY SET Z_MAX = 9223372036854775807 WHERE Z_ENT = 1; UPDATE Z_PRIMARYKEY SET Z_ENT = -1 WHERE Z_ENT = 6; UPDATE ZITEM SET ZPRIORITY = -9223372036854775808"),
        StoreMutation("the header's freelist count 0xFFFFFFFF (SQLite reports it as -1)") { db in
            try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
            let path = try String.fetchOne(db, sql: "SELECT file FROM pragma_database_list WHERE name = 'main'") ?? ""
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
            defer { try? handle.close() }
            try handle.seek(toOffset: 36)
            try handle.write(contentsOf: Data([0xFF, 0xFF, 0xFF, 0xFF]))
        },
        StoreMutation("garbage in Z_METADATA.Z_PLIST", "UPDATE Z_METADATA SET Z_PLIST = randomblob(300)"),
        StoreMutation("text in Z_METADATA.Z_PLIST", "UPDATE Z_METADATA SET Z_PLIST = 'not a plist', Z_UUID = 42"),
        StoreMutation("a plist of the wrong shape") { db in
            try db.execute(sql: "UPDATE Z_METADATA SET Z_PLIST = ?", arguments: [plist(["NSStoreType", 3, ["x"]])])
        },
        StoreMutation("a plist with values of the wrong types") { db in
            let value: [String: Any] = ["NSStoreType": 7, "NSPersistenceFrameworkVersion": "new", "NSStoreModelVersionHashes": ["Item": "text", "Tag": 5],
                                        "NSStoreModelVersionIdentifiers": "one"]
            try db.execute(sql: "UPDATE Z_METADATA SET Z_PLIST = ?", arguments: [plist(value)])
        },
        StoreMutation("an empty Z_METADATA", "DELETE FROM Z_METADATA"),
        StoreMutation("no Z_METADATA", "DROP TABLE Z_METADATA"),
        StoreMutation("no Z_PRIMARYKEY", "DROP TABLE Z_PRIMARYKEY"),
        StoreMutation("a truncated Z_MODELCACHE", "UPDATE Z_MODELCACHE SET Z_CONTENT = substr(Z_CONTENT, 1, length(Z_CONTENT) / 2)"),
        StoreMutation("random bytes in Z_MODELCACHE", "UPDATE Z_MODELCACHE SET Z_CONTENT = randomblob(700)"),
        StoreMutation("text in Z_MODELCACHE", "UPDATE Z_MODELCACHE SET Z_CONTENT = 'not deflate'"),
        StoreMutation("an empty Z_MODELCACHE", "DELETE FROM Z_MODELCACHE"),
        StoreMutation("no Z_MODELCACHE", "DROP TABLE Z_MODELCACHE"),
        StoreMutation("a model cache that is a plist but no archive") { db in
            try db.execute(sql: "UPDATE Z_MODELCACHE SET Z_CONTENT = ?", arguments: [try Deflate.deflate(plist(["$objects": [1, "two", ["$class": 9]]]))])
        },
        StoreMutation("text and blobs in relationship columns", "UPDATE ZITEM SET ZCATEGORY = 'c' || ZCATEGORY WHERE Z_PK % 5 = 0; UPDATE ZATTACHMENT SET ZITEM = x'00ff'"),
        StoreMutation("reals in relationship columns", "UPDATE ZITEM SET ZCATEGORY = ZCATEGORY + 0.5"),
        StoreMutation("text in a join table", "UPDATE Z_2TAGS SET Z_6TAGS = 'tag' WHERE rowid % 3 = 0"),
        StoreMutation("an entity's table missing", "DROP TABLE ZATTACHMENT"),
        StoreMutation("text in the deleted-at column", "UPDATE ZITEM SET ZDELETEDAT = 'yesterday' WHERE ZISDELETED = 1 AND Z_PK % 2 = 0"),
    ]

    /// Three mutations at once, chosen by a seeded generator: combinations no list foresees.
    static func combinations(count: Int, seed: UInt64) -> [StoreMutation] {
        var rng = SplitMix64(seed: seed)
        return (0..<count).map { _ in
            let picked = (0..<3).map { _ in all[Int(rng.next() % UInt64(all.count))] }
            return StoreMutation(picked.map(\.name).joined(separator: " + ")) { db in
                for mutation in picked { try? mutation.apply(db) }
            }
        }
    }
}

@Suite("no store crashes storectl: mutated Core Data stores through every read path", .onTestThreads)
struct MutatedStoreTests {
    static let documented: Set<Int32> = [0, 1, 2, 3, 4, 64, 65, 66, 73, 74, 75]

    @Test("preflight, backup, snapshot, purge --dry-run and migrate lint end with a documented status and JSON, never a trap",
          arguments: StoreMutation.all + StoreMutation.combinations(count: 10, seed: 2026))
    func mutated(_ mutation: StoreMutation) throws {
        let folder = try TempFolder()
        var options = SampleStore.Options()
        options.items = 200
        options.externalFiles = 1
        let store = try SampleStore.create(at: folder.file("Tasks.sqlite"), options: options).path
        let queue = try DatabaseQueue(path: store)
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA foreign_keys = OFF")
            try mutation.apply(db)
        }
        try queue.close()
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

            [[purge]]
            name = "tags"
            table = "ZTAG"
            deleted_flag = "ZISDELETED"
            """.utf8).write(to: URL(fileURLWithPath: folder.file("policy.toml")))
        let migrations = folder.file("migrations")
        try FileManager.default.createDirectory(atPath: migrations, withIntermediateDirectories: false)
        try Data("UPDATE ZTAG SET ZNAME = upper(ZNAME);\nDELETE FROM ZATTACHMENT WHERE Z_PK < 0;".utf8)
            .write(to: URL(fileURLWithPath: migrations + "/0001_upper.sql"))

        // Format 2 (plain, so no password): every page of the mutated store goes through the page stream.
        let snaps = try folder.repository("snaps")
        let commands: [[String]] = [
            ["preflight", store, "--full", "--json"],
            ["backup", store, "--output", folder.file("copy.sqlite"), "--json"],
            ["diff", folder.file("copy.sqlite"), store, "--json"],
            ["snapshot", "create", store, "--repo", snaps, "--json"],
            ["policy", "check", folder.file("policy.toml"), "--json"],
            ["purge", "--policy", folder.file("policy.toml"), "--dry-run", "--json"],
            ["migrate", store, "--migrations", migrations, "--repo", snaps, "--dry-run", "--json"],
        ]
        for command in commands {
            let result = try ChildProcess.run(Binaries.storectl, command)
            let what = "\(mutation.name): storectl \(command.prefix(2).joined(separator: " ")) exited \(result.status)"
            #expect(Self.documented.contains(result.status), "\(what): \(result.stderr.prefix(600))")
            let parsed = try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8))
            #expect(parsed != nil, "\(what): stdout is not JSON: \(result.stdout.prefix(300))")
            // Failures say so on stderr; check results (preflight 2, policy check 65) are the output itself.
            if result.status != 0, result.status != 2, command.prefix(2) != ["policy", "check"] {
                #expect(result.stderr.hasPrefix("storectl: "), "\(what): no message: \(result.stderr.prefix(300)) \(result.stdout.prefix(300))")
            }
        }
    }

    @Test("a header SQLite will not read (schema format 99, as a -wal's page 1 or a newer SQLite may leave it): preflight, backup, snapshot create and diff say so with 65 (bad data), not 1 or 74")
    func unsupportedFileFormat() throws {
        let folder = try TempFolder()
        var options = SampleStore.Options()
        options.items = 50
        let store = try SampleStore.create(at: folder.file("Tasks.sqlite"), options: options).path
        let copy = folder.file("copy.sqlite")
        try FileManager.default.copyItem(atPath: store, toPath: copy)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: store))
        try handle.seek(toOffset: 44)
        try handle.write(contentsOf: Data([0, 0, 0, 99]))
        try handle.close()
        let snaps = try folder.repository("snaps")
        for command in [["preflight", store], ["backup", store, "--output", folder.file("b.sqlite")], ["snapshot", "create", store, "--repo", snaps], ["diff", copy, store]] {
            let result = try ChildProcess.run(Binaries.storectl, command)
            #expect(result.status == 65 && result.stderr.contains("unsupported file format"), "\(command.prefix(2)): \(result.status) \(result.stderr)")
        }
    }

    @Test("the real case: Z_PK rebuilt as TEXT, Z_MAX 0 with rows: preflight reports both problems (2), it does not crash")
    func textKeys() throws {
        let folder = try TempFolder()
        var options = SampleStore.Options()
        options.items = 57
        let store = try SampleStore.create(at: folder.file("Tasks.sqlite"), options: options).path
        let queue = try DatabaseQueue(path: store)
        try queue.writeWithoutTransaction { db in try StoreMutation.all[0].apply(db) }
        try queue.close()
        let result = try ChildProcess.run(Binaries.storectl, ["preflight", store, "--json"])
        #expect(result.status == 2, "\(result.stderr)")
        let report = try JSON.decoder().decode(PreflightReport.self, from: Data(result.stdout.utf8))
        let check = try #require(report.check("coredata.z_max"))
        #expect(check.status == .fail)
        #expect(check.details.contains { $0.contains("Z_MAX 0 < max(Z_PK) 57") }, "\(check.details)")
        #expect(check.details.contains { $0.contains("Z_PK is declared TEXT, not INTEGER") && $0.contains("57 keys are not stored as integers") },
                "\(check.details)")
    }

    @Test("a crash (a bug) still prints a JSON error with --json, and the backtrace on stderr")
    func crashReport() throws {
        let result = try ChildProcess.run(Binaries.storectl, ["preflight", "/nonexistent", "--json"], environment: ["STORECTL_TEST_CRASH": "1"])
        #expect(result.status > 128)
        let line = try #require(result.stdout.split(separator: "\n").last)
        let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        #expect(object?["ok"] as? Bool == false)
        #expect(object?["status"] as? Int == Int(result.status))
        #expect((object?["message"] as? String)?.contains("stopped unexpectedly") == true)
    }
}
