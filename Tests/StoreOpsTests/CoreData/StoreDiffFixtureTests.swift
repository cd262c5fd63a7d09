import Foundation
import GRDB
import StoreLab
@testable import StoreOps
import Testing

/// `storectl diff` on the real stores from Apple's apps: edits made with SQL are named by entity,
/// object, attribute and relationship; nothing crashes.
@Suite("diff of real Core Data stores")
struct StoreDiffFixtureTests {
    func edit(_ path: String, _ sql: String) throws {
        let queue = try DatabaseQueue(path: path)
        try queue.write { try $0.execute(sql: sql) }
        try queue.close()
    }

    func pair(_ fixture: Fixture, _ folder: TempFolder) throws -> (String, String) {
        let a = try fixture.copy(into: folder)
        let other = try TempFolder()
        let b = try fixture.copy(into: other)
        let moved = folder.file("edited-" + FileSystem.name(of: b))
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: b + suffix) {
            try FileManager.default.moveItem(atPath: b + suffix, toPath: moved + suffix)
        }
        return (a, moved)
    }

    @Test("Notes: a note's title changed, a note deleted and a Z_OPT bump are told apart: ICNote 1 changed (title), 1 removed; the bump only counted")
    func notes() throws {
        let folder = try TempFolder()
        let (a, b) = try pair(.notes, folder)
        let same = try StoreDiff.run(StoreDiff.Options(a: .file(a), b: .file(b)))
        #expect(same.same && same.entities.isEmpty && same.model.isEmpty)
        let notes = try DatabaseQueue(path: b).read { db in
            try Int64.fetchAll(db, sql: "SELECT Z_PK FROM ZICCLOUDSYNCINGOBJECT WHERE Z_ENT = (SELECT Z_ENT FROM Z_PRIMARYKEY WHERE Z_NAME = 'ICNote') ORDER BY Z_PK")
        }
        #expect(notes.count >= 3)
        try edit(b, """
            UPDATE ZICCLOUDSYNCINGOBJECT SET ZTITLE1 = 'Changed by the test' WHERE Z_PK = \(notes[0]);
            DELETE FROM ZICCLOUDSYNCINGOBJECT WHERE Z_PK = \(notes[1]);
            UPDATE ZICCLOUDSYNCINGOBJECT SET Z_OPT = Z_OPT + 1 WHERE Z_PK = \(notes[2]);
            """)
        let report = try StoreDiff.run(StoreDiff.Options(a: .file(a), b: .file(b)))
        #expect(!report.same)
        #expect(report.a.coreData && report.b.coreData)
        let note = try #require(report.entities.first { $0.entity == "ICNote" }, "\(report.entities.map { $0.entity ?? $0.table })")
        #expect(note.changed == 1 && note.removed == 1 && note.added == 0)
        #expect(note.attributes == ["title": 1])
        // A declaration may name the attribute as the model does or as its column (ZTITLE1, not ZTITLE).
        var onlyTitle = report
        onlyTitle.entities = report.entities.map { var e = $0; e.removed = 0; return e }
        #expect(StoreDiff.undeclared(onlyTitle, declared: ["ICNote.title"]).isEmpty)
        #expect(StoreDiff.undeclared(onlyTitle, declared: ["ICNote.ZTITLE1"]).isEmpty, "\(StoreDiff.undeclared(onlyTitle, declared: ["ICNote.ZTITLE1"]))")
        #expect(StoreDiff.undeclared(onlyTitle, declared: ["ICNote.snippet"]) == ["ICNote (ZICCLOUDSYNCINGOBJECT): title changed in 1 object"])
        let changed = try #require(note.objects.first { $0.change == "changed" })
        #expect(changed.object == "ICNote \(notes[0])")
        #expect(changed.values.first?.after == "\"Changed by the test\"")
        #expect(note.objects.contains { $0.change == "removed" && $0.object == "ICNote \(notes[1])" })
        #expect(report.entities.count == 1, "nothing else: \(report.entities.map { $0.entity ?? $0.table })")
        #expect(report.bookkeeping.optBumps == 1)
        #expect(report.schema.isEmpty && report.model.isEmpty)
    }

    @Test("Notes: one table, three entities' own `title` columns (ICAttachment ZTITLE, ICNote ZTITLE1, ICFolder ZTITLE2, numbered in Z_ENT order): each entity's rows label only their own as title; another's column written on a folder is named as the column, and a declaration of ICFolder.title does not cover it (a trial's migration passed)")
    func sharedTableTitles() throws {
        let folder = try TempFolder()
        let (a, b) = try pair(.notes, folder)
        let (folderPK, notePK) = try DatabaseQueue(path: b).read { db in
            (try Int64.fetchOne(db, sql: "SELECT min(Z_PK) FROM ZICCLOUDSYNCINGOBJECT WHERE Z_ENT = (SELECT Z_ENT FROM Z_PRIMARYKEY WHERE Z_NAME = 'ICFolder')") ?? 0,
             try Int64.fetchOne(db, sql: "SELECT min(Z_PK) FROM ZICCLOUDSYNCINGOBJECT WHERE Z_ENT = (SELECT Z_ENT FROM Z_PRIMARYKEY WHERE Z_NAME = 'ICNote')") ?? 0)
        }
        try edit(b, """
            UPDATE ZICCLOUDSYNCINGOBJECT SET ZTITLE2 = ZTITLE2 || '!', ZTITLE1 = 'x' WHERE Z_PK = \(folderPK);
            UPDATE ZICCLOUDSYNCINGOBJECT SET ZTITLE1 = ZTITLE1 || '!' WHERE Z_PK = \(notePK);
            """)
        let report = try StoreDiff.run(StoreDiff.Options(a: .file(a), b: .file(b)))
        let folders = try #require(report.entities.first { $0.entity == "ICFolder" })
        let notes = try #require(report.entities.first { $0.entity == "ICNote" })
        #expect(folders.attributes == ["title": 1, "ZTITLE1": 1] && folders.columns == ["title": "ZTITLE2"], "\(folders.attributes) \(folders.columns)")
        #expect(notes.attributes == ["title": 1] && notes.columns == ["title": "ZTITLE1"], "\(notes.attributes) \(notes.columns)")
        #expect(StoreDiff.undeclared(report, declared: ["ICFolder.title", "ICNote.title"]) == ["ICFolder (ZICCLOUDSYNCINGOBJECT): ZTITLE1 changed in 1 object"],
                "\(StoreDiff.undeclared(report, declared: ["ICFolder.title", "ICNote.title"]))")
        #expect(StoreDiff.undeclared(report, declared: ["ICFolder.ZTITLE2", "ICFolder.ZTITLE1", "ICNote.ZTITLE1"]).isEmpty)
        // --key by a folder's own title reads ZTITLE2 (the table's first `title` is ICAttachment's).
        var keyed = StoreDiff.Options(a: .file(a), b: .file(a))
        keyed.keys = ["ICFolder.title"]
        #expect(try StoreDiff.run(keyed).same)
    }

    @Test("Photos (a live -wal read from a consistent copy): a link removed from a many-to-many join table and an attribute changed are named; the same store is the same")
    func photos() throws {
        let folder = try TempFolder()
        let (a, b) = try pair(.photos, folder)
        let same = try StoreDiff.run(StoreDiff.Options(a: .file(a), b: .file(b)))
        #expect(same.same, "\(same.entities.map { $0.entity ?? $0.table })")
        #expect(same.a.copied, "Photos.sqlite-wal holds committed pages")
        let (join, asset) = try DatabaseQueue(path: b).read { db -> (String?, Int64?) in
            let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'Z_[0-9]*' ORDER BY name")
            let join = try tables.first { try Int.fetchOne(db, sql: "SELECT count(*) FROM \(quoteIdentifier($0))") ?? 0 > 0 }
            return (join, try Int64.fetchOne(db, sql: "SELECT min(Z_PK) FROM ZGENERICASSET"))
        }
        let table = try #require(join)
        let pk = try #require(asset)
        try edit(b, """
            DELETE FROM \(quoteIdentifier(table)) WHERE rowid = (SELECT min(rowid) FROM \(quoteIdentifier(table)));
            UPDATE ZGENERICASSET SET ZFAVORITE = 1 - ZFAVORITE WHERE Z_PK = \(pk);
            """)
        let report = try StoreDiff.run(StoreDiff.Options(a: .file(a), b: .file(b)))
        let links = try #require(report.links.first { $0.table == table })
        #expect(links.removed == 1 && links.added == 0)
        #expect(links.relationship.contains("."), "Entity.relationship: \(links.relationship)")
        let assets = report.entities.filter { $0.table == "ZGENERICASSET" }
        #expect(assets.reduce(0) { $0 + $1.changed } == 1)
        #expect(assets.first?.attributes.keys.contains("favorite") == true, "\(assets.first?.attributes ?? [:])")
    }

    @Test("--key ICNote.identifier: notes whose Z_PK was renumbered are matched by their identifier, and only the one whose title changed is reported; without it, every note is removed and added")
    func renumbered() throws {
        let folder = try TempFolder()
        let (a, b) = try pair(.notes, folder)
        let ent = try DatabaseQueue(path: b).read { try Int.fetchOne($0, sql: "SELECT Z_ENT FROM Z_PRIMARYKEY WHERE Z_NAME = 'ICNote'") } ?? 0
        let count = try DatabaseQueue(path: b).read { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZICCLOUDSYNCINGOBJECT WHERE Z_ENT = ?", arguments: [ent]) } ?? 0
        try edit(b, """
            UPDATE ZICCLOUDSYNCINGOBJECT SET Z_PK = Z_PK + 100000 WHERE Z_ENT = \(ent);
            UPDATE ZICCLOUDSYNCINGOBJECT SET ZTITLE1 = 'Renamed' WHERE Z_PK = (SELECT min(Z_PK) FROM ZICCLOUDSYNCINGOBJECT WHERE Z_ENT = \(ent));
            """)
        var options = StoreDiff.Options(a: .file(a), b: .file(b))
        options.entities = ["ICNote"]
        let plain = try StoreDiff.run(options)
        let byPK = try #require(plain.entities.first { $0.entity == "ICNote" })
        #expect(byPK.added == count && byPK.removed == count && byPK.changed == 0)
        options.keys = ["ICNote.identifier"]
        let keyed = try StoreDiff.run(options)
        let byKey = try #require(keyed.entities.first { $0.entity == "ICNote" })
        #expect(byKey.added == 0 && byKey.removed == 0 && byKey.changed == 1, "\(byKey.added) \(byKey.removed) \(byKey.changed)")
        #expect(byKey.attributes == ["title": 1])
        #expect(byKey.objects.first?.object.contains("(Z_PK ") == true, "\(byKey.objects.first?.object ?? "")")
        // The others are the same objects renumbered: counted as that, never as Z_OPT bumps.
        #expect(keyed.bookkeeping.renumbered == count - 1 && keyed.bookkeeping.optBumps == 0,
                "\(keyed.bookkeeping.renumbered) renumbered, \(keyed.bookkeeping.optBumps) Z_OPT bumps, \(count) notes")
        #expect(keyed.keyless.isEmpty, "\(keyed.keyless)")
        // Note data pointing at its note under the note's new number: counted with the bookkeeping,
        // not a change; listed with --bookkeeping (it was counted and never listed).
        let d = folder.file("references.sqlite")
        try FileManager.default.copyItem(atPath: b, toPath: d)
        try edit(d, "UPDATE ZICNOTEDATA SET ZNOTE = ZNOTE + 100000 WHERE ZNOTE IS NOT NULL")
        let pointing = try DatabaseQueue(path: d).read { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZICNOTEDATA WHERE ZNOTE IS NOT NULL") } ?? 0
        var references = StoreDiff.Options(a: .file(a), b: .file(d))
        references.keys = ["ICNote.identifier"]
        references.entities = ["ICNoteData"]
        let counted = try StoreDiff.run(references)
        #expect(pointing > 0 && counted.entities.allSatisfy { $0.changed == 0 } && counted.bookkeeping.references == pointing,
                "\(counted.bookkeeping.references) of \(pointing): \(counted.entities.map { "\($0.table) ~\($0.changed)" })")
        references.bookkeeping = true
        let listed = try StoreDiff.run(references).entities.filter { $0.table == "ZICNOTEDATA" }
        #expect(listed.reduce(0) { $0 + $1.changed } == pointing && listed.flatMap(\.objects).allSatisfy { $0.values.contains { $0.before?.contains("(now 1") == true } },
                "\(listed.flatMap(\.objects).map { "\($0.object): \($0.values.map { "\($0.name) \($0.before ?? "") → \($0.after ?? "")" })" })")
        // A key the added objects have no value for matches nothing: said, not silent.
        let c = folder.file("keyless.sqlite")
        try FileManager.default.copyItem(atPath: b, toPath: c)
        try edit(c, "UPDATE ZICCLOUDSYNCINGOBJECT SET ZIDENTIFIER = NULL WHERE Z_ENT = \(ent)")
        var blank = options
        blank.b = .file(c)
        let unmatched = try StoreDiff.run(blank)
        let none = try #require(unmatched.entities.first { $0.entity == "ICNote" })
        #expect(none.added == count && none.removed == count, "\(none.added) \(none.removed)")
        #expect(unmatched.keyless == ["ICNote.identifier": count], "\(unmatched.keyless)")
        // A key naming no entity, or no attribute of it, is a usage error, not ignored.
        for bad in ["ICNoet.identifier", "ICNote.identifer"] {
            options.keys = [bad]
            #expect(throws: StoreOpsError.self, "\(bad)") { try StoreDiff.run(options) }
            do { _ = try StoreDiff.run(options) } catch let error as StoreOpsError { #expect(error.status == .usage && error.message.contains(bad), "\(error.message)") }
        }
    }

    @Test("--entity names an entity with its sub-entities (as Core Data fetches them): a changed object of a sub-entity is shown under the parent's name, and not under an unrelated entity's")
    func entityTakesItsSubentities() throws {
        let folder = try TempFolder()
        let (a, b) = try pair(.notes, folder)
        let names = try DatabaseQueue(path: b).read { try [String: Int](uniqueKeysWithValues: Row.fetchAll($0, sql: "SELECT Z_NAME, Z_SUPER FROM Z_PRIMARYKEY").map { ($0[0], $0[1]) }) }
        let ent = try DatabaseQueue(path: b).read { try Int.fetchOne($0, sql: "SELECT Z_ENT FROM Z_PRIMARYKEY WHERE Z_NAME = 'ICNote'") } ?? 0
        let parent = try #require(try DatabaseQueue(path: b).read { try String.fetchOne($0, sql: "SELECT Z_NAME FROM Z_PRIMARYKEY WHERE Z_ENT = ?", arguments: [names["ICNote"] ?? 0]) },
                                  "ICNote has a superentity")
        try edit(b, "UPDATE ZICCLOUDSYNCINGOBJECT SET ZTITLE1 = 'Renamed' WHERE Z_PK = (SELECT min(Z_PK) FROM ZICCLOUDSYNCINGOBJECT WHERE Z_ENT = \(ent))")
        var options = StoreDiff.Options(a: .file(a), b: .file(b))
        options.entities = [parent]
        let byParent = try StoreDiff.run(options)
        #expect(byParent.entities.contains { $0.entity == "ICNote" && $0.changed == 1 }, "\(byParent.entities.map { "\($0.entity ?? "") \($0.changed)" })")
        let unrelated = try #require(names.keys.first { $0 != "ICNote" && $0 != parent && names[$0] == 0 && $0 != "ICCloudSyncingObject" })
        options.entities = [unrelated]
        let other = try StoreDiff.run(options)
        #expect(!other.entities.contains { $0.entity == "ICNote" }, "\(unrelated)")
    }
}
