import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

/// A Photos-shaped store: relationships declared on super-entities (stored under the declaring
/// entity's number for every sub-entity), listed again under each sub-entity in the model cache,
/// and a to-many relationship without an inverse (a hidden column in the destination's table).
struct PhotosShapedStore {
    let folder: TempFolder
    let path: String

    static let entities: [SampleModel.Entity] = [
        .init(ent: 1, name: "LibraryScope", superEnt: 0),
        .init(ent: 25, name: "GenericAlbum", superEnt: 0),
        .init(ent: 26, name: "Album", superEnt: 25),
        .init(ent: 27, name: "SharedAlbum", superEnt: 26),
        .init(ent: 34, name: "GenericAsset", superEnt: 0),
        .init(ent: 35, name: "Asset", superEnt: 34),
    ]

    init(contributorsRule: CoreDataModel.DeleteRule = .cascade, inheritedCopies: Bool = true, trigger: String? = nil, albumsOptional: Bool = true) throws {
        folder = try TempFolder()
        path = folder.file("Photos.sqlite")
        let relationships: [CoreDataModel.Relationship] = [
            .init(entity: "Album", name: "assets", destination: "GenericAsset", inverse: "albums", isToMany: true, deleteRule: .nullify),
            .init(entity: "GenericAsset", name: "albums", destination: "Album", inverse: "assets", isToMany: true, deleteRule: .nullify,
                  isOptional: albumsOptional),
            .init(entity: "LibraryScope", name: "assetContributors", destination: "GenericAsset", inverse: nil, isToMany: true,
                  deleteRule: contributorsRule),
        ]
        let cache = try SampleModel.modelCache(entities: Self.entities, relationships: relationships, inheritedCopies: inheritedCopies)
        let queue = try DatabaseQueue(path: path)
        try queue.write { db in
            try db.execute(sql: """
                CREATE TABLE Z_PRIMARYKEY (Z_ENT INTEGER PRIMARY KEY, Z_NAME VARCHAR, Z_SUPER INTEGER, Z_MAX INTEGER);
                CREATE TABLE Z_METADATA (Z_VERSION INTEGER PRIMARY KEY, Z_UUID VARCHAR(255), Z_PLIST BLOB);
                CREATE TABLE Z_MODELCACHE (Z_CONTENT BLOB);
                CREATE TABLE ZLIBRARYSCOPE (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZISDELETED INTEGER);
                CREATE TABLE ZGENERICALBUM (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZTRASHED INTEGER, ZTITLE VARCHAR);
                CREATE TABLE ZGENERICASSET (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZTRASHED INTEGER,
                    Z1ASSETCONTRIBUTORS INTEGER);
                CREATE INDEX ZGENERICASSET_Z1ASSETCONTRIBUTORS_INDEX ON ZGENERICASSET (Z1ASSETCONTRIBUTORS);
                CREATE TABLE Z_26ASSETS (Z_26ALBUMS INTEGER, Z_34ASSETS INTEGER, PRIMARY KEY (Z_26ALBUMS, Z_34ASSETS));
                """)
            for entity in Self.entities {
                try db.execute(sql: "INSERT INTO Z_PRIMARYKEY VALUES (?, ?, ?, 10)", arguments: [entity.ent, entity.name, entity.superEnt])
            }
            try db.execute(sql: "INSERT INTO Z_METADATA VALUES (1, 'UUID', ?)", arguments: [try SampleModel.metadataPlist(uuid: "UUID")])
            try db.execute(sql: "INSERT INTO Z_MODELCACHE VALUES (?)", arguments: [cache])
            // Scope 1 is soft-deleted; it contributed assets 1-3. Albums 1-6, the shared ones (27) even, 2 and 4 trashed.
            try db.execute(sql: "INSERT INTO ZLIBRARYSCOPE VALUES (1, 1, 1, 1), (2, 1, 1, 0)")
            for pk in 1...6 {
                try db.execute(sql: "INSERT INTO ZGENERICALBUM VALUES (?, ?, 1, ?, ?)",
                               arguments: [pk, pk % 2 == 0 ? 27 : 26, pk == 2 || pk == 4 ? 1 : 0, "album \(pk)"])
            }
            for pk in 1...10 {
                try db.execute(sql: "INSERT INTO ZGENERICASSET VALUES (?, 35, 1, 0, ?)", arguments: [pk, pk <= 3 ? 1 : (pk <= 5 ? 2 : nil)])
                try db.execute(sql: "INSERT INTO Z_26ASSETS VALUES (?, ?)", arguments: [1 + pk % 6, pk])
            }
            if let trigger { try db.execute(sql: trigger) }
        }
        try queue.close()
    }

    func policy(_ body: String) throws -> String {
        let file = folder.file("policy-\(UUID().uuidString.prefix(6)).toml")
        try Data("[store]\npath = \"Photos.sqlite\"\n\n\(body)".utf8).write(to: URL(fileURLWithPath: file))
        return file
    }

    func count(_ sql: String) throws -> Int { try readStore(path) { try Int.fetchOne($0, sql: sql) ?? -1 } }
}

@Suite("purge: Core Data shapes from real stores")
struct CoreDataShapesTests {
    @Test("a many-to-many declared on a super-entity lives in Z_<declaring entity><NAME> for every sub-entity, also when the model lists it again under them",
          arguments: [true, false])
    func joinTableOfTheDeclaringEntity(_ inheritedCopies: Bool) throws {
        let store = try PhotosShapedStore(inheritedCopies: inheritedCopies)
        let policy = try store.policy("""
            [[purge]]
            name = "shared"
            entity = "SharedAlbum"
            deleted_flag = "ZTRASHED"
            """)
        let report = try Purge.run(.init(policy: policy))
        #expect(report.status == .ok)
        #expect(report.rules.first?.deleted == 2)
        #expect(report.rules.first?.joinRows == 4, "the trashed shared albums' rows in Z_26ASSETS")
        #expect(try store.count("SELECT count(*) FROM Z_26ASSETS WHERE Z_26ALBUMS IN (2, 4)") == 0)
        #expect(try store.count("SELECT count(*) FROM Z_26ASSETS") == 6)
        let explained = try PolicyCheck.explain(policy)
        #expect(explained.first?.relationships.contains { $0.contains("Album.assets") && $0.contains("Z_26ASSETS (Z_26ALBUMS)") } == true,
                "\(explained.first?.relationships ?? [])")
    }

    @Test("a to-many relationship without an inverse is the hidden column Z<ent><NAME> of the destination: cascade, nullify and deny follow it",
          arguments: [CoreDataModel.DeleteRule.cascade, .nullify, .deny])
    func toManyWithoutInverse(_ rule: CoreDataModel.DeleteRule) throws {
        let store = try PhotosShapedStore(contributorsRule: rule)
        for target in ["entity = \"LibraryScope\"", "table = \"ZLIBRARYSCOPE\""] {
            let check = try PolicyCheck.check(try store.policy("[[purge]]\nname = \"scopes\"\n\(target)\ndeleted_flag = \"ZISDELETED\"\n"))
            #expect(check.ok, "\(target): \(check.problems)")
        }
        let report = try Purge.run(.init(policy: try store.policy("""
            [[purge]]
            name = "scopes"
            entity = "LibraryScope"
            deleted_flag = "ZISDELETED"
            """)))
        switch rule {
        case .cascade:
            #expect(report.status == .ok)
            #expect(report.rules.first?.cascaded["ZGENERICASSET"] == 3)
            #expect(try store.count("SELECT count(*) FROM ZGENERICASSET") == 7)
            #expect(try store.count("SELECT count(*) FROM Z_26ASSETS WHERE Z_34ASSETS <= 3") == 0, "the cascaded assets' join rows go too")
        case .nullify:
            #expect(report.status == .ok)
            #expect(report.rules.first?.nullified["ZGENERICASSET.Z1ASSETCONTRIBUTORS"] == 3)
            #expect(try store.count("SELECT count(*) FROM ZGENERICASSET WHERE Z1ASSETCONTRIBUTORS IS NULL") == 8)
            #expect(try store.count("SELECT max(Z_OPT) FROM ZGENERICASSET WHERE Z_PK <= 3") == 2)
        default:
            #expect(report.status == .ok, "deny keeps the row, listed; not a failure without on_deny = \"fail\"")
            #expect(report.rules.first?.denied == 1)
            #expect(try store.count("SELECT count(*) FROM ZLIBRARYSCOPE") == 2)
        }
        #expect(try store.count("SELECT count(*) FROM ZLIBRARYSCOPE WHERE Z_PK = 1") == (rule == .deny ? 1 : 0))
    }
}

@Suite("triggers that call functions only Core Data registers")
struct CoreDataTriggerTests {
    static let trigger = """
        CREATE TRIGGER ZT_ASSET_DELETE AFTER DELETE ON ZGENERICASSET FOR EACH ROW
        BEGIN SELECT NSCoreDataTriggerUpdateAffectedObjectValue('ZGENERICALBUM', 26, OLD.Z_PK, 'ZCOUNT', 0); END
        """

    @Test("Photos (real store): purging detected faces fires Core Data's triggers: policy check, purge --dry-run and purge refuse (65), naming trigger and function; nothing changes")
    func photos() throws {
        let folder = try TempFolder()
        let store = try Fixture.photos.copy(into: folder)
        let policy = folder.file("faces.toml")
        try Data("""
            [store]
            path = "Photos.sqlite"

            [[purge]]
            name = "faces"
            entity = "DetectedFace"
            deleted_flag = "ZHIDDEN"
            """.utf8).write(to: URL(fileURLWithPath: policy))
        let before = try logicalDigest(store)
        let check = try PolicyCheck.check(policy)
        #expect(!check.ok)
        let text = check.problems.joined(separator: "\n")
        #expect(text.contains("NSCoreDataTriggerUpdateAffectedObjectValue()"), "\(text)")
        #expect(text.contains("ZT_ZPERSON_ZFACECOUNT_ZDETECTEDFACE_DELETE_DECREMENT (on ZDETECTEDFACE)"), "\(text)")
        for dryRun in [true, false] {
            let error = #expect(throws: StoreOpsError.self) { try Purge.run(.init(policy: policy, dryRun: dryRun)) }
            #expect(error?.status == .badData)
            #expect(error?.description.contains("no such function") == true)
        }
        #expect(try logicalDigest(store) == before)
        // Photos' assets: a dry run used to count their cascades, and the real purge then failed
        // half way with "no such function". Now both refuse up front.
        try Data("[store]\npath = \"Photos.sqlite\"\n\n[[purge]]\nentity = \"Asset\"\ndeleted_flag = \"ZCOMPLETE\"\n".utf8)
            .write(to: URL(fileURLWithPath: policy))
        #expect((#expect(throws: StoreOpsError.self) { try Purge.run(.init(policy: policy, dryRun: true)) })?.status == .badData)
    }

    @Test("a trigger reached through a cascade is found too, and a migration that would fire one is refused before anything changes")
    func throughCascadeAndMigration() throws {
        let store = try PhotosShapedStore(contributorsRule: .cascade, trigger: Self.trigger)
        let before = try logicalDigest(store.path)
        let policy = try store.policy("[[purge]]\nname = \"scopes\"\nentity = \"LibraryScope\"\ndeleted_flag = \"ZISDELETED\"\n")
        let error = #expect(throws: StoreOpsError.self) { try Purge.run(.init(policy: policy)) }
        #expect(error?.status == .badData)
        #expect(error?.description.contains("writing ZGENERICASSET fires trigger ZT_ASSET_DELETE (on ZGENERICASSET)") == true, "\(error?.description ?? "")")
        // Purging albums reaches no asset deletes: no trigger fires, nothing is refused.
        let albums = try store.policy("[[purge]]\nname = \"albums\"\nentity = \"SharedAlbum\"\ndeleted_flag = \"ZTRASHED\"\n")
        #expect(try PolicyCheck.check(albums).ok)

        let migrations = store.folder.file("migrations")
        try FileManager.default.createDirectory(atPath: migrations, withIntermediateDirectories: false)
        try Data("UPDATE ZGENERICALBUM SET ZTITLE = upper(ZTITLE);\nDELETE FROM ZGENERICASSET WHERE Z_PK = 1;".utf8)
            .write(to: URL(fileURLWithPath: migrations + "/0001_tidy.sql"))
        for dryRun in [true, false] {
            let refused = #expect(throws: StoreOpsError.self) {
                try Migrate.run(.init(store: store.path, migrations: migrations, repository: store.folder.file("snaps"), dryRun: dryRun))
            }
            #expect(refused?.status == .badData)
            #expect(refused?.description.contains("NSCoreDataTriggerUpdateAffectedObjectValue()") == true, "\(refused?.description ?? "")")
        }
        #expect(try logicalDigest(store.path) == before)
        #expect(FileSystem.kind(of: store.folder.file("snaps")) == .missing)
    }
}
