import Foundation
import GRDB
import StoreLab
@testable import StoreOps
import Testing

/// `migrate --force`: the diff of the pre-migrate state and the result holds the app's writes too;
/// the rows and columns the migrations' connection wrote (SQLite's pre-update hook) tell its
/// changes from the app's, row by row and column by column.
@Suite("a migration's own writes told from another process's")
struct WrittenRowsTests {
    func items(_ entities: [StoreDiff.EntityChanges]) -> (added: Int, removed: Int, changed: Int, attributes: [String: Int]) {
        let rows = entities.filter { $0.table == "ZITEM" }
        return (rows.reduce(0) { $0 + $1.added }, rows.reduce(0) { $0 + $1.removed }, rows.reduce(0) { $0 + $1.changed },
                rows.reduce(into: [:]) { all, e in all.merge(e.attributes, uniquingKeysWith: +) })
    }

    @Test("rows the migration's connection inserted, deleted or changed (per column) are its; the app's rows, and the app's columns of a row both wrote, are the others'; a table the migration rebuilt, or whose column it dropped and added again, is its as a whole (with auto-vacuum too, which gives a rebuilt table its old root page back)",
          arguments: [0, 2])
    func attribution(autoVacuum: Int) throws {
        let folder = try TempFolder()
        let a = try sampleStore(in: folder, name: "a.sqlite", items: 200, journalMode: "delete")
        if autoVacuum > 0 {
            let queue = try DatabaseQueue(path: a)
            try queue.writeWithoutTransaction { try $0.execute(sql: "PRAGMA auto_vacuum = \(autoVacuum); VACUUM") }
            #expect(try queue.read { try Int.fetchOne($0, sql: "PRAGMA auto_vacuum") } == autoVacuum)
            try queue.close()
        }
        let b = folder.file("b.sqlite")
        try FileManager.default.copyItem(atPath: a, toPath: b)
        let migration = try DatabaseQueue(path: b)
        let app = try DatabaseQueue(path: b)
        let recorder = try #require(try migration.inDatabase { WriteRecorder($0) })
        let tag = try #require(try app.read { try Int64.fetchOne($0, sql: "SELECT min(Z_PK) FROM ZTAG") })
        let linked = try app.read { try Set(Int64.fetchAll($0, sql: "SELECT Z_2ITEMS FROM Z_2TAGS WHERE Z_6TAGS = ?", arguments: [tag])) }
        let unlinked = try #require((1...200).map(Int64.init).first { !linked.contains($0) })
        try app.write { db in
            try db.execute(sql: """
                UPDATE ZITEM SET ZTITLE = 'by the app' WHERE Z_PK BETWEEN 1 AND 5;
                INSERT INTO ZITEM (Z_PK, Z_ENT, Z_OPT, ZISDELETED, ZPRIORITY, ZTITLE) VALUES (10001, 3, 1, 0, 1, 'the app''s');
                DELETE FROM ZITEM WHERE Z_PK = 150;
                UPDATE ZTAG SET ZNAME = 'renamed by the app' WHERE Z_PK = \(tag);
                """)
            try db.execute(sql: "INSERT INTO Z_2TAGS VALUES (?, ?)", arguments: [unlinked, tag])
        }
        let categories = try app.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZCATEGORY WHERE ZNAME IS NOT NULL") } ?? 0
        let tagRoot = try app.read { try Int.fetchOne($0, sql: "SELECT rootpage FROM sqlite_master WHERE name = 'ZTAG'") }
        try migration.inDatabase { db in
            // One statement at a time, as migrate runs them (each schema change noted).
            for sql in [
                "BEGIN",
                "UPDATE ZITEM SET ZPRIORITY = ZPRIORITY + 10 WHERE Z_PK BETWEEN 1 AND 10",
                "DELETE FROM ZITEM WHERE Z_PK = 160",
                // An object the app added: the object is the app's, this column the migration's.
                "UPDATE ZITEM SET ZDUEDATE = 5 WHERE Z_PK = 10001",
                // SQLite rewrites every row for these without the hook: every name is NULL after.
                "ALTER TABLE ZCATEGORY DROP COLUMN ZNAME",
                "ALTER TABLE ZCATEGORY ADD COLUMN ZNAME VARCHAR",
                "INSERT INTO ZCATEGORY (Z_PK, Z_ENT, Z_OPT, ZNAME) VALUES (900, 1, 1, 'by the migration')",
                "CREATE TABLE ZTAG_new (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZISDELETED INTEGER, ZDELETEDAT TIMESTAMP, ZNAME VARCHAR)",
                "INSERT INTO ZTAG_new SELECT * FROM ZTAG",
                "DROP TABLE ZTAG",
                "ALTER TABLE ZTAG_new RENAME TO ZTAG",
                "COMMIT",
            ] { try recorder.execute(sql, in: db) }
        }
        if autoVacuum > 0 {
            let root = try app.read { try Int.fetchOne($0, sql: "SELECT rootpage FROM sqlite_master WHERE name = 'ZTAG'") }
            #expect(root == tagRoot, "auto-vacuum gave the rebuilt table its old root page (what a root-page comparison would miss)")
        }
        // After the migration: the app writes the column the migration wrote, on another row.
        try app.write { try $0.execute(sql: "UPDATE ZITEM SET ZPRIORITY = 99 WHERE Z_PK = 20") }
        let written = try migration.inDatabase { _ in recorder.stop() }
        #expect(!written.overflowed)
        try migration.close()
        try app.close()

        var options = StoreDiff.Options(a: .file(a), b: .file(b))
        options.written = written
        let report = try StoreDiff.run(options)
        let others = try #require(report.others)
        let mine = items(report.entities), theirs = items(others.entities)
        #expect(mine.changed == 11 && mine.added == 0 && mine.removed == 1 && mine.attributes == ["ZPRIORITY": 10, "ZDUEDATE": 1],
                "the migration's: \(report.summary.text)")
        #expect(report.entities.contains { $0.table == "ZCATEGORY" && $0.added == 1 && $0.changed == categories && $0.attributes == ["ZNAME": categories] },
                "the dropped and added column's names: \(report.summary.text)")
        #expect(written.rewritten.isSuperset(of: ["zcategory", "ztag", "ztag_new"]) && !written.rewritten.contains("zitem"), "\(written.rewritten)")
        #expect(theirs.changed == 6 && theirs.added == 1 && theirs.removed == 1 && theirs.attributes == ["ZTITLE": 5, "ZPRIORITY": 1],
                "the app's: \(others.summary.text)")
        // The app renamed a tag before the migration rebuilt the table: the rebuilt table is the migration's.
        #expect(report.entities.contains { $0.table == "ZTAG" && $0.changed == 1 }, "\(report.summary.text)")
        #expect(!others.entities.contains { $0.table == "ZTAG" })
        #expect(others.links.contains { $0.relationship == "Item.tags" && $0.added == 1 } && report.links.isEmpty,
                "\(others.summary.text) / \(report.summary.text)")
        // Held against a declaration: the migration's removal and due date, not the app's titles, object or link.
        let outside = StoreDiff.undeclared(report, declared: ["Item.ZPRIORITY", "Category", "Tag"])
        #expect(outside.count == 2 && outside.contains { $0.hasSuffix("(ZITEM): 1 removed") } && outside.contains { $0.hasSuffix("ZDUEDATE changed in 1 object") },
                "\(outside)")

        // Without the record: everything is counted as one change set, as before.
        let whole = try StoreDiff.run(StoreDiff.Options(a: .file(a), b: .file(b)))
        let all = items(whole.entities)
        #expect(whole.others == nil && all.changed == 11 && all.added == 1 && all.removed == 2, "\(whole.summary.text)")
        #expect(whole.entities.contains { $0.table == "ZCATEGORY" && $0.changed == categories })
    }

    @Test("a record past its limit is given up: every difference counts as the migration's")
    func overflow() throws {
        let folder = try TempFolder()
        let a = try sampleStore(in: folder, name: "a.sqlite", items: 50, journalMode: "delete")
        let b = folder.file("b.sqlite")
        try FileManager.default.copyItem(atPath: a, toPath: b)
        let migration = try DatabaseQueue(path: b)
        let recorder = try #require(try migration.inDatabase { WriteRecorder($0) })
        // Rowids 4,096 apart: a chunk each, past the limit.
        try migration.write { db in
            try db.execute(sql: "CREATE TABLE spread (x)")
            for i in 0...Int64(WrittenRows.limit) { try db.execute(sql: "INSERT INTO spread (rowid, x) VALUES (?, 1)", arguments: [i * 4096]) }
        }
        let app = try DatabaseQueue(path: b)
        try app.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'by the app' WHERE Z_PK = 1") }
        let written = try migration.inDatabase { _ in recorder.stop() }
        #expect(written.overflowed)
        var options = StoreDiff.Options(a: .file(a), b: .file(b))
        options.written = written
        let report = try StoreDiff.run(options)
        #expect(report.others?.entities.isEmpty == true && items(report.entities).changed == 1, "the app's change is counted as the migration's")
    }
}
