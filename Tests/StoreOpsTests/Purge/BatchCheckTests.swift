import Foundation
import GRDB
import GRDBSQLite
import StoreLab
@testable import StoreOps
import Testing

/// Every row a purge batch changes (SQLite's pre-update hook) held against its plan before it commits.
@Suite("purge: each batch changes exactly its plan")
struct BatchCheckTests {
    func policy(_ store: String, _ rules: String, folder: TempFolder) throws -> String {
        try writePolicy("[store]\npath = \"\(store)\"\n\(rules)\n", in: folder)
    }

    static let items = "[[purge]]\nname = \"items\"\nentity = \"Item\"\ndeleted_flag = \"ZISDELETED\"\ndeleted_at = \"ZDELETEDAT\"\ntime_format = \"coredata\"\nretention = \"30d\"\nbatch_size = 200"

    @Test("a store with audit triggers: every batch verified; what the triggers wrote is counted apart, per table, with or without a primary key")
    func verifiedWithTrigger() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 3_000)
        try DatabaseQueue(path: store).write { db in
            try db.execute(sql: """
                CREATE TABLE audit (id INTEGER PRIMARY KEY, item INTEGER);
                CREATE TRIGGER audit_item AFTER DELETE ON ZITEM BEGIN INSERT INTO audit (item) VALUES (OLD.Z_PK); END;
                CREATE TABLE audit_log (item INTEGER, at REAL);
                CREATE TRIGGER audit_log_item AFTER DELETE ON ZITEM BEGIN INSERT INTO audit_log VALUES (OLD.Z_PK, 0); END;
                CREATE TABLE counters (name TEXT, n INTEGER);
                INSERT INTO counters VALUES ('purged', 0);
                CREATE TRIGGER count_item AFTER DELETE ON ZITEM BEGIN UPDATE counters SET n = n + 1 WHERE name = 'purged'; END;
                """)
        }
        let report = try Purge.run(.init(policy: try policy(store, Self.items, folder: folder)))
        let rule = try #require(report.rules.first)
        #expect(rule.deleted > 0 && rule.batches > 1)
        #expect(rule.verifiedBatches == rule.batches, "\(rule.verifiedBatches) of \(rule.batches)")
        #expect(rule.triggered["audit"] == rule.deleted, "\(rule.triggered)")
        // A table without a primary key is seen too (SQLite's session extension, used before, skipped it).
        #expect(rule.triggered["audit_log"] == rule.deleted, "\(rule.triggered)")
        // Rows, not changes: the one counter row, updated at every delete of every batch, is one row.
        #expect(rule.triggered["counters"] == 1, "\(rule.triggered)")
        #expect(try readStore(store) { try Int.fetchOne($0, sql: "SELECT n FROM counters") } == rule.deleted)
        // What the triggers wrote is checked after the purge like what the purge wrote.
        for table in ["audit", "audit_log", "counters"] {
            #expect(report.verified.contains("quick_check(\(table)) ok"), "\(report.verified)")
        }
    }

    @Test("a virtual table's shadow tables (an R-tree kept by a trigger, as Photos keeps one): written at trigger depth 0 by the module, counted apart, the purge verified")
    func rtreeShadowTables() throws {
        let folder = try TempFolder()
        let store = folder.file("app.sqlite")
        try DatabaseQueue(path: store).write { db in
            try db.execute(sql: """
                CREATE TABLE places (id INTEGER PRIMARY KEY, deleted INTEGER, x REAL);
                CREATE VIRTUAL TABLE place_box USING rtree(id, minx, maxx);
                CREATE TRIGGER place_gone AFTER DELETE ON places BEGIN DELETE FROM place_box WHERE id = OLD.id; END;
                WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 500)
                INSERT INTO places SELECT i, i % 2, i FROM n;
                INSERT INTO place_box SELECT id, x, x + 1 FROM places;
                """)
        }
        let report = try Purge.run(.init(policy: try policy(store, "[[purge]]\ntable = \"places\"\ndeleted_flag = \"deleted\"\nbatch_size = 100", folder: folder)))
        #expect(report.status == .ok, "\(report.ending.error?.message ?? "")")
        let rule = try #require(report.rules.first)
        #expect(rule.deleted == 250 && rule.verifiedBatches == rule.batches)
        // At least one change per deleted entry (the module also moves entries when it condenses nodes).
        #expect((rule.triggered["place_box_rowid"] ?? 0) >= 250, "\(rule.triggered)")
        #expect(try readStore(store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM place_box") } == 250)
    }

    @Test("a trigger that keeps one planned row (RAISE(IGNORE)): that batch is rolled back and the purge fails (2), naming the row; the batches before it stay")
    func plannedRowKept() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 3_000)
        let doomed = try readStore(store) { db in
            try Int64.fetchAll(db, sql: "SELECT Z_PK FROM ZITEM WHERE ZISDELETED != 0 ORDER BY Z_PK")
        }
        let cutoff = Date().timeIntervalSince1970 - CoreDataStore.referenceDateOffset - 30 * 86_400
        _ = doomed
        let expired = try readStore(store) { db in
            try Int64.fetchAll(db, sql: "SELECT Z_PK FROM ZITEM WHERE ZISDELETED != 0 AND ZDELETEDAT <= ? ORDER BY Z_PK", arguments: [cutoff])
        }
        let kept = try #require(expired.dropFirst(250).first, "a row of the second batch")
        try DatabaseQueue(path: store).write { db in
            try db.execute(sql: "CREATE TRIGGER keep BEFORE DELETE ON ZITEM WHEN OLD.Z_PK = \(kept) BEGIN SELECT RAISE(IGNORE); END")
        }
        let before = try readStore(store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM") ?? 0 }
        let report = try Purge.run(.init(policy: try policy(store, Self.items, folder: folder)))
        #expect(report.status == .checksFailed)
        #expect(report.ending.error?.message.contains("ZITEM: 1 planned row not deleted (\(kept))") == true, "\(report.ending.error?.message ?? "")")
        #expect(report.rules.first?.verifiedBatches == report.rules.first?.batches)
        let after = try readStore(store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM") ?? 0 }
        #expect(after < before, "the batches before the failing one were committed")
        #expect(try readStore(store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM WHERE Z_PK = ?", arguments: [kept]) } == 1)
    }

    @Test("a trigger that puts a planned row back after its delete (a trial's purge said every row was deleted, all still there): that batch is rolled back and the purge fails (2), naming the row")
    func plannedRowPutBack() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 3_000)
        let cutoff = Date().timeIntervalSince1970 - CoreDataStore.referenceDateOffset - 30 * 86_400
        let expired = try readStore(store) { db in
            try Int64.fetchAll(db, sql: "SELECT Z_PK FROM ZITEM WHERE ZISDELETED != 0 AND ZDELETEDAT <= ? ORDER BY Z_PK", arguments: [cutoff])
        }
        let back = try #require(expired.dropFirst(250).first, "a row of the second batch")
        try DatabaseQueue(path: store).write { db in
            try db.execute(sql: """
                CREATE TRIGGER resurrect AFTER DELETE ON ZITEM WHEN OLD.Z_PK = \(back)
                BEGIN INSERT INTO ZITEM (Z_PK, Z_ENT, Z_OPT, ZTITLE) VALUES (OLD.Z_PK, OLD.Z_ENT, OLD.Z_OPT, OLD.ZTITLE); END
                """)
        }
        let report = try Purge.run(.init(policy: try policy(store, Self.items, folder: folder)))
        #expect(report.status == .checksFailed)
        #expect(report.ending.error?.message.contains("ZITEM: 1 planned row deleted and inserted again (by a trigger?) (\(back))") == true, "\(report.ending.error?.message ?? "")")
        #expect(try readStore(store) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM WHERE Z_PK = ?", arguments: [back]) } == 1)
    }

    @Test("the rules themselves: an unplanned delete, an update of another column, an insert and a planned row left are problems; indirect changes and virtual tables' shadow tables are counted")
    func rules() {
        var effects = BatchClosure.Effects()
        effects.deleted = ["ZITEM": [1, 2]]
        effects.nullifiedIDs = ["ZITEM.ZCATEGORY": [7]]
        let columns = ["ZITEM": ["Z_PK", "Z_ENT", "Z_OPT", "ZCATEGORY", "ZTITLE"]]
        func change(_ table: String, _ op: Int32, indirect: Bool = false, old: [(Int32, Int64)], new: [(Int32, Int64)] = []) -> BatchCheck.Change {
            BatchCheck.Change(table: table, op: op, indirect: indirect, primaryKey: [true] + Array(repeating: false, count: max(old.count, new.count) - 1),
                              old: old.map { (type: $0.0, value: $0.1) }, new: (new.isEmpty ? old.map { _ in (0, 0) } : new).map { (type: $0.0, value: $0.1) })
        }
        let pk = { (n: Int64) in [(SQLITE_INTEGER, n), (0, 0), (0, 0), (0, 0), (0, 0)] }
        let exact = [change("ZITEM", SQLITE_DELETE, old: pk(1)), change("ZITEM", SQLITE_DELETE, old: pk(2)),
                     change("ZITEM", SQLITE_UPDATE, old: [(SQLITE_INTEGER, 9), (0, 0), (SQLITE_INTEGER, 1), (SQLITE_INTEGER, 7), (0, 0)],
                            new: [(0, 0), (0, 0), (SQLITE_INTEGER, 2), (SQLITE_NULL, 0), (0, 0)]),
                     change("audit", SQLITE_INSERT, indirect: true, old: [(0, 0)], new: [(SQLITE_INTEGER, 1)]),
                     change("Z_RT_x_node", SQLITE_UPDATE, old: [(SQLITE_INTEGER, 1), (0, 0)], new: [(0, 0), (SQLITE_BLOB, 0)])]
        let ok = BatchCheck.unplanned(exact, effects: effects, columns: { columns[$0] ?? [] }, shadowTables: ["Z_RT_x_node"])
        #expect(ok.problems.isEmpty, "\(ok.problems)")
        #expect(ok.indirect == ["audit": 1, "Z_RT_x_node": 1])
        let wrong = [change("ZITEM", SQLITE_DELETE, old: pk(1)), change("ZITEM", SQLITE_DELETE, old: pk(3)),
                     change("ZITEM", SQLITE_UPDATE, old: [(SQLITE_INTEGER, 9), (0, 0), (0, 0), (SQLITE_INTEGER, 7), (SQLITE_TEXT, 0)],
                            new: [(0, 0), (0, 0), (0, 0), (SQLITE_NULL, 0), (SQLITE_TEXT, 0)]),
                     change("ZTAG", SQLITE_INSERT, old: [(0, 0)], new: [(SQLITE_INTEGER, 5)])]
        let problems = BatchCheck.unplanned(wrong, effects: effects, columns: { columns[$0] ?? [] }).problems
        #expect(problems.contains("ZITEM: row 3 deleted, which the plan does not name"), "\(problems)")
        #expect(problems.contains("ZITEM: row 9 updated (ZCATEGORY, ZTITLE), which the plan does not name"), "\(problems)")
        #expect(problems.contains("ZTAG: a row inserted, which a purge never does"), "\(problems)")
        #expect(problems.contains("ZITEM: 1 planned row not deleted (2)"), "\(problems)")
    }
}
