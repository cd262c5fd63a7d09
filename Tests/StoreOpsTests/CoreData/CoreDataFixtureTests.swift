import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

/// Real stores written by Apple's Notes (macOS 15) and Photos (macOS 10.15.7).
@Suite("Core Data: real stores from Apple's apps")
struct CoreDataFixtureTests {
    @Test("Notes: metadata, 23 entities in 10 tables, counts, model cache, no orphans")
    func notes() throws {
        let folder = try TempFolder()
        let store = try Fixture.notes.copy(into: folder)
        let report = try Preflight.run(store: store)
        #expect(report.passed, "\(report.checks.filter { $0.status != .ok }.map { "\($0.id): \($0.summary) \($0.details)" })")
        let counts = Dictionary(uniqueKeysWithValues: (report.entities ?? []).map { ($0.entity, $0) })
        #expect(counts.count == 23)
        #expect(counts["ICNote"]?.rows == 9)
        #expect(counts["ICNote"]?.table == "ZICCLOUDSYNCINGOBJECT")
        #expect(counts["ICFolder"]?.rows == 6)
        #expect(counts["ICCloudState"]?.rows == 33)
        #expect(counts["CHANGE"]?.table == "ACHANGE")
        #expect(counts["CHANGE"]?.rows == 248)
        #expect(report.check("coredata.orphans")?.summary == "0 orphans in 33 to-one relationship columns")

        let coreData = try #require(try readStore(store) { try CoreDataStore.read($0) })
        #expect(coreData.metadata.frameworkVersion == 1447)
        #expect(coreData.metadata.storeType == "SQLite")
        #expect(coreData.metadata.modelVersionHashes.count == 20)
        #expect(coreData.metadata.modelVersionHashes.values.allSatisfy { Data(base64Encoded: $0)?.count == 32 })
        #expect(coreData.metadata.uuid == "09FBEB4A-5B24-424E-814B-4AE8E757FB83")
        let model = try #require(coreData.model)
        #expect(model.relationships.count == 78)
        #expect(model.superentity["ICAccount"] == "ICNoteContainer")
        #expect(model.superentity["ICNoteContainer"] == "ICCloudSyncingObject")
        let folderRelation = try #require(model.relationship("folder", of: "ICNote"))
        #expect(folderRelation.destination == "ICFolder" && !folderRelation.isToMany && folderRelation.deleteRule == .nullify)
        let attachments = try #require(model.relationship("attachments", of: "ICAccount"))
        #expect(attachments.isToMany && attachments.deleteRule == .cascade && attachments.inverse == "account")
        // Numbered twin columns of a relationship name shared by sub-entities are all mapped.
        let columns = try readStore(store) { try CoreDataCensus.toOneColumns($0, store: coreData) }.columns
        let accountColumns = columns.filter { column in
            column.table == "ZICCLOUDSYNCINGOBJECT" && column.relationships.allSatisfy { $0.hasSuffix(".account") }
        }.map(\.column)
        #expect(Set(accountColumns) == Set(["ZACCOUNT"] + (1...8).map { "ZACCOUNT\($0)" }))
    }

    @Test("Photos: 57 entities, 166 relationships, a live -wal, no orphans")
    func photos() throws {
        let folder = try TempFolder()
        let store = try Fixture.photos.copy(into: folder)
        let report = try Preflight.run(store: store, options: .init(full: true))
        #expect(report.passed, "\(report.checks.filter { $0.status != .ok }.map { "\($0.id): \($0.summary) \($0.details)" })")
        #expect(report.entities?.count == 57)
        #expect(report.check("coredata.orphans")?.status == .ok)
        let coreData = try #require(try readStore(store) { try CoreDataStore.read($0) })
        #expect(coreData.metadata.frameworkVersion == 977)
        #expect(coreData.metadata.modelVersionHashes.count == 54)
        #expect(coreData.model?.relationships.count == 166)
        #expect(coreData.model?.relationships.filter(\.isOrdered).count == 11)
    }

    @Test("Photos: the backup contains the commits that live only in its -wal")
    func photosWALContentIsCopied() throws {
        let folder = try TempFolder()
        let store = try Fixture.photos.copy(into: folder)
        let mainOnly = folder.file("main-only.sqlite")
        try FileManager.default.copyItem(atPath: store, toPath: mainOnly)
        let result = try Backup.run(source: store, options: .init(output: folder.file("backup.sqlite"), verify: .full))
        #expect(result.manifest.source.walBytes > 0)
        // The main file alone differs from the store seen through its -wal; the backup equals the latter.
        #expect(try logicalDigest(mainOnly) != (try logicalDigest(store)))
        #expect(try logicalDigest(result.path) == (try logicalDigest(store)))
        #expect(result.manifest.coreData?.entityCounts.count == 57)
    }

    @Test("Notes: a backup records the model hashes and entity counts")
    func notesBackupManifest() throws {
        let folder = try TempFolder()
        let store = try Fixture.notes.copy(into: folder)
        let result = try Backup.run(source: store, options: .init(output: folder.file("backup.sqlite")))
        let facts = try #require(result.manifest.coreData)
        #expect(facts.metadata.modelVersionHashes.count == 20)
        #expect(facts.entityCounts["ICNote"] == 9)
        #expect(facts.entityCounts["TRANSACTION"] == 70)
    }
}

@Suite("Core Data: model cache and raw DEFLATE")
struct CoreDataModelTests {
    @Test("the sample store's model cache reads back as the model it was built from")
    func sampleModelRoundTrip() throws {
        let model = try CoreDataModel.parse(modelCache: try SampleModel.modelCache())
        #expect(model.relationships == SampleModel.relationships.sorted { ($0.entity, $0.name) < ($1.entity, $1.name) })
        #expect(model.superentity["Task"] == "Item")
        #expect(model.superentity["Item"] == .some(nil))
    }

    @Test("raw DEFLATE round-trips; damaged input is bad data (65)")
    func deflate() throws {
        let text = Data(String(repeating: "storectl keeps stores safe. ", count: 500).utf8)
        let packed = try Deflate.deflate(text)
        #expect(packed.count < text.count / 10)
        #expect(try Deflate.inflate(packed) == text)
        let truncated = packed.prefix(packed.count / 2)
        #expect((#expect(throws: StoreOpsError.self) { try Deflate.inflate(truncated) })?.status == .badData)
        #expect((#expect(throws: StoreOpsError.self) { try Deflate.inflate(Data(repeating: 0xFF, count: 64)) })?.status == .badData)
        #expect((#expect(throws: StoreOpsError.self) { try Deflate.inflate(packed, limit: 100) })?.status == .badData)
    }

    @Test("a store without a model cache skips the orphan check and says why")
    func noModelCache() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        try DatabaseQueue(path: store).write { try $0.execute(sql: "DROP TABLE Z_MODELCACHE") }
        let report = try Preflight.run(store: store)
        #expect(report.check("coredata.orphans")?.status == .skip)
        #expect(report.check("coredata.orphans")?.summary == "relationships unknown: the store has no Z_MODELCACHE table")
        #expect(report.passed)
    }

    @Test("a garbage model cache is reported, not fatal")
    func garbageModelCache() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        try DatabaseQueue(path: store).write { try $0.execute(sql: "UPDATE Z_MODELCACHE SET Z_CONTENT = x'00112233'") }
        let report = try Preflight.run(store: store)
        #expect(report.check("coredata.orphans")?.status == .skip)
        #expect(report.check("coredata.orphans")?.summary.contains("Z_MODELCACHE is unreadable") == true)
    }
}
