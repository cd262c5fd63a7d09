import Foundation
import GRDB
import StoreLab
@testable import StoreOps
import Testing

/// What `storectl diff` says of each kind of Core Data change, one by one: a to-one moved, a blob
/// replaced, an ordered relationship's positions, a to-many without an inverse, the bookkeeping
/// it leaves out unless asked (Z_OPT bumps, persistent history), and the model's own changes.
@Suite("diff: each kind of Core Data change")
struct StoreDiffShapesTests {
    func edit(_ path: String, _ sql: String, _ arguments: StatementArguments = []) throws {
        let queue = try DatabaseQueue(path: path)
        try queue.write { try $0.execute(sql: sql, arguments: arguments) }
        try queue.close()
    }

    func pair(_ fixture: Fixture, _ folder: TempFolder) throws -> (String, String) {
        let other = try TempFolder()
        let a = try fixture.copy(into: folder)
        let b = folder.file("edited-" + FileSystem.name(of: a))
        let copied = try fixture.copy(into: other)
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: copied + suffix) {
            try FileManager.default.moveItem(atPath: copied + suffix, toPath: b + suffix)
        }
        return (a, b)
    }

    func diff(_ a: String, _ b: String, bookkeeping: Bool = false) throws -> StoreDiff.Report {
        var options = StoreDiff.Options(a: .file(a), b: .file(b))
        options.bookkeeping = bookkeeping
        return try StoreDiff.run(options)
    }

    @Test("Notes: a note moved to another folder is the relationship `folder` (ICFolder 1 → ICFolder 25) and a new reference; a blob replaced is shown by size and SHA-256; a Z_OPT bump and a persistent-history row (ATRANSACTION, entity 16002) are counted, not listed, unless --bookkeeping")
    func toOneBlobAndBookkeeping() throws {
        let folder = try TempFolder()
        let (a, b) = try pair(.notes, folder)
        let (note, other, blob, folders) = try DatabaseQueue(path: a).read { db in
            let notes = try Int64.fetchAll(db, sql: """
                SELECT Z_PK FROM ZICCLOUDSYNCINGOBJECT WHERE Z_ENT = (SELECT Z_ENT FROM Z_PRIMARYKEY WHERE Z_NAME = 'ICNote')
                AND ZFOLDER IS NOT NULL AND ZREPLICAIDTONOTESVERSIONDATA IS NOT NULL ORDER BY Z_PK
                """)
            let folders = try Int64.fetchAll(db, sql: "SELECT Z_PK FROM ZICCLOUDSYNCINGOBJECT WHERE Z_ENT = (SELECT Z_ENT FROM Z_PRIMARYKEY WHERE Z_NAME = 'ICFolder') ORDER BY Z_PK")
            let blob = try Data.fetchOne(db, sql: "SELECT ZREPLICAIDTONOTESVERSIONDATA FROM ZICCLOUDSYNCINGOBJECT WHERE Z_PK = ?", arguments: [notes.first])
            return (notes.first, notes.dropFirst().first, blob, folders)
        }
        let pk = try #require(note), bumped = try #require(other), old = try #require(blob)
        let folderBefore = try DatabaseQueue(path: a).read { try Int64.fetchOne($0, sql: "SELECT ZFOLDER FROM ZICCLOUDSYNCINGOBJECT WHERE Z_PK = ?", arguments: [pk]) }
        let target = try #require(folders.first { $0 != folderBefore })
        try edit(b, """
            UPDATE ZICCLOUDSYNCINGOBJECT SET ZFOLDER = ?, ZREPLICAIDTONOTESVERSIONDATA = x'00010203' WHERE Z_PK = ?;
            UPDATE ZICCLOUDSYNCINGOBJECT SET Z_OPT = Z_OPT + 1 WHERE Z_PK = ?;
            INSERT INTO ATRANSACTION (Z_ENT, Z_OPT, ZAUTHOR) VALUES (16002, 1, 'test');
            """, [target, pk, bumped])

        let report = try diff(a, b)
        #expect(!report.same && report.entities.count == 1, "\(report.entities.map { $0.entity ?? $0.table })")
        let notes = try #require(report.entities.first { $0.entity == "ICNote" })
        #expect(notes.changed == 1 && notes.attributes == ["folder": 1, "replicaIDToNotesVersionData": 1], "\(notes.attributes)")
        let values = try #require(notes.objects.first { $0.object == "ICNote \(pk)" }?.values)
        let moved = try #require(values.first { $0.name == "folder" })
        #expect(moved.before == "ICFolder \(folderBefore ?? -1)" && moved.after == "ICFolder \(target)", "\(moved)")
        let digest = Hashing.sha256Digest(old).map { String(format: "%02x", $0) }.joined().prefix(12)
        let replaced = try #require(values.first { $0.name == "replicaIDToNotesVersionData" })
        #expect(replaced.before == "<\(old.count) bytes, sha256 \(digest)…>", "\(replaced)")
        #expect(replaced.after == "<4 bytes, sha256 054edec1d021…>", "\(replaced)")
        #expect(report.newReferences.contains { $0.relationship == "ICNote.folder" && $0.key == target && $0.destinationTable == "ZICCLOUDSYNCINGOBJECT" })
        // Left out, counted: the bump and the history row (before, ATRANSACTION was listed as an
        // entity of its own: Z_PRIMARYKEY's Z_ENT, the rowid, was read as NULL and renumbered).
        #expect(report.bookkeeping.optBumps == 1 && report.bookkeeping.rows == 1 && report.bookkeeping.tables == ["ATRANSACTION"], "\(report.bookkeeping)")
        #expect(!report.bookkeeping.shown)

        let shown = try diff(a, b, bookkeeping: true)
        #expect(shown.bookkeeping.shown)
        let history = try #require(shown.entities.first { $0.table == "ATRANSACTION" })
        #expect(history.entity == nil && history.added == 1, "a bookkeeping table is listed as a table: \(history)")
        let notesShown = try #require(shown.entities.first { $0.entity == "ICNote" })
        #expect(notesShown.changed == 2 && notesShown.attributes["Z_OPT"] == 1, "\(notesShown.attributes)")
        #expect(notesShown.objects.first { $0.object == "ICNote \(bumped)" }?.values.map(\.name) == ["Z_OPT"])
    }

    @Test("Photos: an ordered relationship's position column is named after the relationship (`parentFolder (order)`); a link of an ordered many-to-many only moved is one link reordered with its positions, not one removed and one added; declaring the relationship allows both")
    func orderedRelationships() throws {
        let folder = try TempFolder()
        let (a, b) = try pair(.photos, folder)
        let (album, position, link) = try DatabaseQueue(path: a).read { db in
            let album = try Row.fetchOne(db, sql: "SELECT Z_PK, Z_FOK_PARENTFOLDER FROM ZGENERICALBUM WHERE Z_FOK_PARENTFOLDER IS NOT NULL ORDER BY Z_PK LIMIT 1")
            let link = try Row.fetchOne(db, sql: "SELECT rowid, Z_26ALBUMS, Z_34ASSETS, Z_FOK_34ASSETS FROM Z_26ASSETS ORDER BY rowid LIMIT 1")
            return (album?[0] as Int64?, album?[1] as Int64?, link)
        }
        let pk = try #require(album), was = try #require(position), row = try #require(link)
        let (rowid, albumOfLink, asset, order): (Int64, Int64, Int64, Int64) = (row[0], row[1], row[2], row[3])
        try edit(b, """
            UPDATE ZGENERICALBUM SET Z_FOK_PARENTFOLDER = Z_FOK_PARENTFOLDER + 7 WHERE Z_PK = ?;
            UPDATE Z_26ASSETS SET Z_FOK_34ASSETS = Z_FOK_34ASSETS + 1000 WHERE rowid = ?;
            """, [pk, rowid])
        let report = try diff(a, b)
        let albums = report.entities.filter { $0.table == "ZGENERICALBUM" }
        #expect(albums.count == 1 && albums.first?.attributes == ["parentFolder (order)": 1], "\(albums.map(\.attributes))")
        let moved = try #require(albums.first?.objects.first)
        #expect(moved.values.count == 1 && moved.values.first?.before == "\(was)" && moved.values.first?.after == "\(was + 7)", "\(moved)")
        let links = try #require(report.links.first { $0.table == "Z_26ASSETS" })
        #expect(links.added == 0 && links.removed == 0 && links.reordered == 1, "\(links)")
        #expect(links.links.map(\.change) == ["reordered"])
        #expect(links.links.first?.link.hasSuffix("Album \(albumOfLink) ↔ GenericAsset \(asset) (position \(order) → \(order + 1000))") == true
                || links.links.first?.link.contains("(position \(order) → \(order + 1000))") == true, "\(links.links)")
        #expect(report.summary.text.contains("\(links.relationship): 0 links added, 0 removed, 1 reordered"), "\(report.summary.text)")
        // Declared: the to-one (its position goes with it) and the many-to-many.
        let lineage = albums.first?.lineage ?? []
        #expect(lineage.contains("GenericAlbum"))
        #expect(StoreDiff.undeclared(report, declared: ["GenericAlbum.parentFolder", links.relationship]).isEmpty,
                "\(StoreDiff.undeclared(report, declared: ["GenericAlbum.parentFolder", links.relationship]))")
        let undeclared = StoreDiff.undeclared(report, declared: [])
        #expect(undeclared.contains { $0.contains("parentFolder (order) changed in 1 object") } && undeclared.contains { $0.hasSuffix("1 reordered") }, "\(undeclared)")

        // A link removed and another added stay what they are.
        try edit(b, "DELETE FROM Z_26ASSETS WHERE rowid = ?", [rowid])
        let removed = try #require(try diff(a, b).links.first { $0.table == "Z_26ASSETS" })
        #expect(removed.removed == 1 && removed.added == 0 && removed.reordered == 0, "\(removed)")
    }

    @Test("a to-many without an inverse (the hidden column Z1ASSETCONTRIBUTORS of the destination) is named after its owner's relationship: LibraryScope.assetContributors, LibraryScope 1 → LibraryScope 2")
    func toManyWithoutInverse() throws {
        let store = try PhotosShapedStore()
        let b = store.folder.file("b.sqlite")
        try FileManager.default.copyItem(atPath: store.path, toPath: b)
        try edit(b, "UPDATE ZGENERICASSET SET Z1ASSETCONTRIBUTORS = 2 WHERE Z_PK = 1")
        let report = try diff(store.path, b)
        let assets = try #require(report.entities.first { $0.table == "ZGENERICASSET" })
        #expect(assets.entity == "Asset" && assets.changed == 1 && assets.attributes == ["LibraryScope.assetContributors": 1], "\(assets)")
        let value = try #require(assets.objects.first?.values.first)
        #expect(value.before == "LibraryScope 1" && value.after == "LibraryScope 2", "\(value)")
        #expect(report.model.isEmpty && report.schema.isEmpty)
    }

    @Test("the model: a delete rule changed in Z_MODELCACHE and an entity's version hash changed in Z_METADATA are named (relationship, before → after; which entity's hash); the rows alone are the same")
    func modelChanges() throws {
        let cascade = try PhotosShapedStore(contributorsRule: .cascade)
        let nullify = try PhotosShapedStore(contributorsRule: .nullify, albumsOptional: false)
        // The version hashes of the second: one entity's hash changed.
        let plist = try DatabaseQueue(path: nullify.path).read { try Data.fetchOne($0, sql: "SELECT Z_PLIST FROM Z_METADATA") }
        let stored = try #require(plist)
        var metadata = try #require(try PropertyListSerialization.propertyList(from: stored, format: nil) as? [String: Any])
        var hashes = try #require(metadata["NSStoreModelVersionHashes"] as? [String: Data])
        let entity = try #require(hashes.keys.sorted().first)
        hashes[entity] = Data(repeating: 7, count: 32)
        metadata["NSStoreModelVersionHashes"] = hashes
        try edit(nullify.path, "UPDATE Z_METADATA SET Z_PLIST = ?", [try PropertyListSerialization.data(fromPropertyList: metadata, format: .binary, options: 0)])

        let report = try diff(cascade.path, nullify.path)
        #expect(!report.same && report.entities.isEmpty && report.links.isEmpty && report.schema.isEmpty, "\(report.summary.text)")
        #expect(report.model.contains("version hash changed: \(entity)"), "\(report.model)")
        #expect(report.model.contains { $0.hasPrefix("relationship LibraryScope.assetContributors: ") && $0.contains("delete rule cascade, optional → ") && $0.hasSuffix("delete rule nullify, optional") },
                "\(report.model)")
        // NSIsOptional of a relationship: GenericAsset.albums made required (and listed again under
        // the sub-entity Asset, as Core Data's model cache does).
        #expect(report.model.contains("relationship GenericAsset.albums: to-many Album, inverse assets, delete rule nullify, optional → to-many Album, inverse assets, delete rule nullify, required"), "\(report.model)")
        #expect(report.model.count == 4, "nothing else in the model differs: \(report.model)")
        #expect(report.summary.text.contains("model: "), "\(report.summary.text)")
    }

    @Test("rows held to be paired by key are bounded (Options.pairingBudget): a table of TEXT keys whose rowids all moved (what VACUUM does to a table without INTEGER PRIMARY KEY) is one row changed with the whole budget; with a small one, the rows held are paired as before and the rows beyond it are listed as added and removed and counted in `unpaired`")
    func pairingBudget() throws {
        let folder = try TempFolder()
        let a = folder.file("a.sqlite"), b = folder.file("b.sqlite")
        try edit(a, "CREATE TABLE t (code TEXT PRIMARY KEY, v); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 400) INSERT INTO t SELECT 'k' || (1000 + i), i FROM c")
        // The same rows one rowid down (rowid r holds the key rowid r + 1 held; the last the
        // first's), one value changed: each rowid's old key removed, its new key added.
        try edit(b, "CREATE TABLE t (code TEXT PRIMARY KEY, v); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 400) INSERT INTO t SELECT 'k' || (1000 + i % 400 + 1), i % 400 + 1 FROM c; UPDATE t SET v = -1 WHERE code = 'k1007'")
        let whole = try diff(a, b)
        let rows = try #require(whole.entities.first { $0.table == "t" })
        #expect(rows.changed == 1 && rows.added == 0 && rows.removed == 0 && whole.unpaired.isEmpty, "\(rows.changed) \(rows.added) \(rows.removed) \(whole.unpaired)")
        var options = StoreDiff.Options(a: .file(a), b: .file(b))
        options.pairingBudget = 20_000
        let bounded = try StoreDiff.run(options)
        let t = try #require(bounded.entities.first { $0.table == "t" })
        let unpaired = bounded.unpaired["t.code"] ?? 0
        #expect(unpaired > 100 && unpaired < 790, "\(bounded.unpaired)")
        // The halves come in rowid order (removed k1001, added k1002, removed k1002, ...) and the
        // first ones are held: all pair but the first and perhaps the last held. A held row lost
        // or listed twice moves `listed - unpaired` out of 1...2.
        let listed = t.added + t.removed
        #expect((1...2).contains(listed - unpaired) && t.added + t.removed + 2 * t.changed <= 800, "\(t.added) \(t.removed) \(t.changed) \(unpaired)")
        #expect(t.changed == 1, "k1007 is paired under the budget: \(t.changed)")
    }

    @Test("--key on a store whose objects were renumbered with their references (an export and re-import): a to-one that points at the same object under its new Z_PK, and a many-to-many link between the same two objects, are not changes (counted as bookkeeping); a to-one moved and a link removed for real still are")
    func renumberedReferences() throws {
        let folder = try TempFolder()
        let a = try sampleStore(in: folder, name: "a.sqlite", items: 300, journalMode: "delete")
        let b = folder.file("b.sqlite")
        try FileManager.default.copyItem(atPath: a, toPath: b)
        let (withCategory, links, tags, categories, moved) = try readStore(a) { db in
            (try Int.fetchOne(db, sql: "SELECT count(*) FROM ZITEM WHERE ZCATEGORY IS NOT NULL") ?? 0,
             try Int.fetchOne(db, sql: "SELECT count(*) FROM Z_2TAGS") ?? 0,
             try Int.fetchOne(db, sql: "SELECT count(*) FROM ZTAG") ?? 0,
             try Int.fetchOne(db, sql: "SELECT count(*) FROM ZCATEGORY") ?? 0,
             try Int.fetchOne(db, sql: "SELECT min(Z_PK) FROM ZITEM WHERE ZCATEGORY = 1") ?? 0)
        }
        try #require(withCategory > 10 && links > 10 && moved > 0)
        try edit(b, """
            UPDATE ZTAG SET Z_PK = Z_PK + 1000; UPDATE Z_2TAGS SET Z_6TAGS = Z_6TAGS + 1000;
            UPDATE ZCATEGORY SET Z_PK = Z_PK + 1000; UPDATE ZITEM SET ZCATEGORY = ZCATEGORY + 1000 WHERE ZCATEGORY IS NOT NULL;
            UPDATE ZITEM SET ZCATEGORY = 1002 WHERE Z_PK = \(moved);
            DELETE FROM Z_2TAGS WHERE rowid = (SELECT min(rowid) FROM Z_2TAGS);
            """)
        var options = StoreDiff.Options(a: .file(a), b: .file(b))
        options.keys = ["Tag.name", "Category.name"]
        let report = try StoreDiff.run(options)
        #expect(!report.entities.contains { $0.entity == "Tag" || $0.entity == "Category" }, "\(report.entities.map(\.table))")
        #expect(report.bookkeeping.renumbered == tags + categories, "\(report.bookkeeping)")
        let items = report.entities.filter { $0.table == "ZITEM" }
        #expect(items.reduce(0) { $0 + $1.changed } == 1 && items.allSatisfy { $0.added == 0 && $0.removed == 0 }, "\(items.map { "\($0.entity ?? "") \($0.changed) \($0.added) \($0.removed)" })")
        #expect(items.flatMap(\.objects).first?.values.map(\.name) == ["category"], "\(items.flatMap(\.objects))")
        // The old number is named with what it became: the object moved from Category 1 (now 1001) to 1002.
        #expect(items.flatMap(\.objects).first?.values.first.map { "\($0.before ?? "") → \($0.after ?? "")" } == "Category 1 (now 1001) → Category 1002", "\(items.flatMap(\.objects))")
        let tagLinks = try #require(report.links.first { $0.table == "Z_2TAGS" })
        #expect(tagLinks.removed == 1 && tagLinks.added == 0 && tagLinks.reordered == 0, "\(tagLinks.removed) \(tagLinks.added)")
        #expect(report.bookkeeping.references == (withCategory - 1) + (links - 1), "\(report.bookkeeping.references) of \(withCategory - 1) + \(links - 1)")
        // With --bookkeeping those links are listed (they were only counted): the same two
        // objects, the tag's old number named.
        options.bookkeeping = true
        let listed = try #require(try StoreDiff.run(options).links.first { $0.table == "Z_2TAGS" })
        #expect(listed.renumbered == links - 1 && listed.removed == 1 && listed.added == 0, "\(listed.renumbered) \(listed.removed) \(listed.added)")
        let shown = listed.links.filter { $0.change == "renumbered" }
        #expect(shown.count == links - 1 && shown.allSatisfy { $0.link.contains("Tag 10") && $0.link.contains("(was Item ") },
                "\(shown.prefix(3).map(\.link))")
        options.bookkeeping = false
        // --entity shows part of the same result: the renumbering of entities it does not show
        // still counts (a Task's category compared through Category's renumbering).
        options.entities = ["Task"]
        let tasks = try StoreDiff.run(options)
        #expect(tasks.entities.map(\.entity) == ["Task"] && tasks.entities.first?.changed == items.first { $0.entity == "Task" }?.changed,
                "\(tasks.entities.map { "\($0.entity ?? "") \($0.changed)" })")
        options.entities = []
        // Numbers reused: Categories 1 and 2 swap their Z_PKs (the items follow). Each Z_PK then
        // holds another object on each side: paired by the key, the same store.
        let c = folder.file("c.sqlite")
        try FileManager.default.copyItem(atPath: a, toPath: c)
        try edit(c, """
            UPDATE ZCATEGORY SET Z_PK = -1 WHERE Z_PK = 1; UPDATE ZCATEGORY SET Z_PK = 1 WHERE Z_PK = 2; UPDATE ZCATEGORY SET Z_PK = 2 WHERE Z_PK = -1;
            UPDATE ZITEM SET ZCATEGORY = CASE ZCATEGORY WHEN 1 THEN 2 WHEN 2 THEN 1 ELSE ZCATEGORY END;
            """)
        options.b = .file(c)
        let swapped = try StoreDiff.run(options)
        #expect(swapped.same && swapped.bookkeeping.renumbered == 2 && swapped.bookkeeping.references > 0,
                "\(swapped.entities.map { "\($0.entity ?? "") \($0.changed) \($0.added) \($0.removed)" }) \(swapped.bookkeeping)")
        // The same swap with the items left as they were: an item whose category number stayed 1
        // now names the other category, a change, whether its row changed otherwise (its title) or
        // is the same bytes on both sides (read for it: it was warned of, not compared).
        let e = folder.file("e.sqlite")
        try FileManager.default.copyItem(atPath: a, toPath: e)
        try edit(e, """
            UPDATE ZCATEGORY SET Z_PK = -1 WHERE Z_PK = 1; UPDATE ZCATEGORY SET Z_PK = 1 WHERE Z_PK = 2; UPDATE ZCATEGORY SET Z_PK = 2 WHERE Z_PK = -1;
            UPDATE ZITEM SET ZTITLE = ZTITLE || ' (edited)' WHERE Z_PK = \(moved);
            """)
        options.b = .file(e)
        let stale = try StoreDiff.run(options)
        let pointing = try readStore(a) { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM WHERE ZCATEGORY IN (1, 2)") ?? 0 }
        let staleItems = stale.entities.filter { $0.table == "ZITEM" }
        #expect(staleItems.reduce(0) { $0 + $1.changed } == pointing && !stale.same, "\(staleItems.map { ($0.entity ?? "", $0.changed) })")
        let edited = staleItems.flatMap(\.objects).filter { $0.values.contains { $0.name == "ZTITLE" } }
        #expect(edited.count == 1 && edited.first?.values.map(\.name).sorted() == ["ZTITLE", "category"], "\(edited)")
        #expect(edited.first?.values.first { $0.name == "category" }.map { "\($0.before ?? "") → \($0.after ?? "")" } == "Category 1 (now 2) → Category 1", "\(edited)")
        // Every category and tag renumbered away (+1000), the items and links left pointing at the
        // old numbers (a trial's diff said "same", exit 0): every such item is changed, naming
        // nothing now, and every link one removed and one added.
        let v = folder.file("v.sqlite")
        try FileManager.default.copyItem(atPath: a, toPath: v)
        try edit(v, "UPDATE ZCATEGORY SET Z_PK = Z_PK + 1000; UPDATE ZTAG SET Z_PK = Z_PK + 1000; UPDATE Z_PRIMARYKEY SET Z_MAX = Z_MAX + 1000 WHERE Z_NAME IN ('Category', 'Tag')")
        options.b = .file(v)
        options.limit = 100_000
        let vacated = try StoreDiff.run(options)
        let vacatedItems = vacated.entities.filter { $0.table == "ZITEM" }
        #expect(!vacated.same && vacatedItems.reduce(0) { $0 + $1.changed } == withCategory, "\(vacatedItems.map { ($0.entity ?? "", $0.changed) })")
        #expect(vacatedItems.flatMap(\.objects).allSatisfy { $0.values.first?.after?.hasSuffix("(no object has that number now)") == true })
        let vacatedLinks = vacated.links.first { $0.table == "Z_2TAGS" }
        #expect(vacatedLinks?.removed == links && vacatedLinks?.added == links, "\(String(describing: vacatedLinks.map { ($0.removed, $0.added) })) of \(links)")
        #expect(vacated.bookkeeping.renumbered == categories + tags, "\(vacated.bookkeeping)")
        // A key the first side does not have yet (a column added, then filled): the same objects
        // gaining it, changed, not removed and added.
        let d = folder.file("d.sqlite")
        try FileManager.default.copyItem(atPath: a, toPath: d)
        try edit(d, "ALTER TABLE ZCATEGORY ADD COLUMN ZUUID VARCHAR; UPDATE ZCATEGORY SET ZUUID = 'u-' || Z_PK")
        options.b = .file(d)
        options.keys = ["Category.ZUUID"]
        let gained = try StoreDiff.run(options)
        let gainedCategories = gained.entities.first { $0.table == "ZCATEGORY" }
        #expect(gainedCategories?.changed == categories && gainedCategories?.added == 0 && gainedCategories?.removed == 0,
                "\(String(describing: gainedCategories.map { ($0.changed, $0.added, $0.removed) }))")
        options.keys = ["Tag.name", "Category.name"]
        // Without --key every reference is a change (and every tag and category removed and added).
        let unkeyed = try StoreDiff.run(StoreDiff.Options(a: .file(a), b: .file(b)))
        #expect((unkeyed.links.first { $0.table == "Z_2TAGS" }?.added ?? 0) == links - 1)
        #expect(unkeyed.entities.filter { $0.table == "ZITEM" }.reduce(0) { $0 + $1.changed } == withCategory, "every item with a category points at a new Z_PK")
    }

    @Test("a plain store's sqlite_sequence is data, not bookkeeping: rewound (deleted AUTOINCREMENT numbers given out again) it is a change, paired by table name (a trial's diff said \"same\"); a migration that adds rows to a declared AUTOINCREMENT table may raise it, one declaring nothing may not rewind it")
    func autoincrementSequence() throws {
        let folder = try TempFolder()
        let a = folder.file("a.sqlite")
        try edit(a, "CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, v); INSERT INTO t (v) VALUES (1), (2), (3); DELETE FROM t WHERE id = 3")
        let rewound = folder.file("rewound.sqlite"), grown = folder.file("grown.sqlite")
        try FileManager.default.copyItem(atPath: a, toPath: rewound)
        try FileManager.default.copyItem(atPath: a, toPath: grown)
        try edit(rewound, "UPDATE sqlite_sequence SET seq = 2")
        try edit(grown, "INSERT INTO t (v) VALUES (4)")
        let back = try StoreDiff.run(StoreDiff.Options(a: .file(a), b: .file(rewound)))
        let sequence = try #require(back.entities.first { $0.table == "sqlite_sequence" }, "\(back.entities.map(\.table))")
        #expect(!back.same && sequence.changed == 1 && sequence.objects.first?.values.first.map { "\($0.before ?? "") → \($0.after ?? "")" } == "3 → 2")
        let queue = try DatabaseQueue(path: rewound)
        let nothing = try queue.read { try Migrate.allowing([], consequencesIn: back, db: $0) }
        #expect(StoreDiff.undeclared(back, declared: nothing) == ["table sqlite_sequence: seq changed in 1 row"], "\(StoreDiff.undeclared(back, declared: nothing))")
        let up = try StoreDiff.run(StoreDiff.Options(a: .file(a), b: .file(grown)))
        let allowed = try DatabaseQueue(path: grown).read { try Migrate.allowing(["t"], consequencesIn: up, db: $0) }
        #expect(!up.same && StoreDiff.undeclared(up, declared: allowed).isEmpty, "\(StoreDiff.undeclared(up, declared: allowed))")
        #expect(StoreDiff.undeclared(up, declared: ["t"]) == ["table sqlite_sequence: seq changed in 1 row"])
    }


    @Test("values equal only when stored the same: -0.0 is not 0.0, and an é of one code point is not e with a combining accent (a trial's diff said \"same\" for the first; Swift's == for text takes the two for one)")
    func storedValuesCompared() throws {
        let folder = try TempFolder()
        let a = folder.file("a.sqlite"), b = folder.file("b.sqlite")
        try edit(a, "CREATE TABLE t (id INTEGER PRIMARY KEY, x, y TEXT); INSERT INTO t VALUES (1, 0.0, 'caf\u{E9}'), (2, 1.5, 'same')")
        try FileManager.default.copyItem(atPath: a, toPath: b)
        try edit(b, "UPDATE t SET x = -0.0 WHERE id = 1; UPDATE t SET y = 'cafe\u{301}' WHERE id = 1")
        let report = try StoreDiff.run(StoreDiff.Options(a: .file(a), b: .file(b)))
        let t = try #require(report.entities.first { $0.table == "t" })
        #expect(!report.same && t.changed == 1 && t.attributes == ["x": 1, "y": 1], "\(t.attributes)")
        #expect(try StoreDiff.run(StoreDiff.Options(a: .file(a), b: .file(a))).same)
    }

}
