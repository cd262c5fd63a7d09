import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

/// Creates a snapshot of a fresh sample store in a fresh (plain) repository.
struct SnapshotFixture {
    let folder: TempFolder
    let store: String
    let repo: String
    let created: SnapshotCreate.Result

    init(items: Int = 2_000, externalFiles: Int = 2, tags: [String] = []) throws {
        folder = try TempFolder()
        store = try sampleStore(in: folder, items: items, externalFiles: externalFiles)
        repo = try folder.repository("repo")
        created = try SnapshotCreate.run(store: store, options: .init(repository: repo, tags: tags))
    }

    var repository: PagedRepository { get throws { try PagedRepository.open(at: repo, password: .resolve(file: nil)) } }
}

@Suite("snapshots: create, list, verify, restore")
struct SnapshotTests {
    @Test("a round trip gives back the store exactly")
    func roundTrip() throws {
        let fixture = try SnapshotFixture(tags: ["nightly", "v2"])
        let list = try SnapshotSummary.list(repository: fixture.repo)
        #expect(list.map(\.id) == [fixture.created.id])
        #expect(list[0].tags == ["nightly", "v2"])
        #expect(list[0].bytes > 0 && list[0].bytes * 2 < list[0].logicalBytes, "sample data compresses: \(list[0].bytes) of \(list[0].logicalBytes)")

        let outcomes = try SnapshotVerify.run(.init(repository: fixture.repo, all: true))
        #expect(outcomes.map(\.ok) == [true], "\(outcomes)")
        #expect(try fixture.repository.lastVerification(fixture.created.id)?.ok == true)

        let target = fixture.folder.file("restored/Tasks.sqlite")
        try FileManager.default.createDirectory(atPath: fixture.folder.file("restored"), withIntermediateDirectories: false)
        let restored = try SnapshotRestore.run(.init(repository: fixture.repo, id: fixture.created.id, target: .file(target)))
        #expect(restored.externalFiles == 2)
        #expect(try logicalDigest(target) == (try logicalDigest(fixture.store)))
        #expect(try rowCount(target) == (try rowCount(fixture.store)))
        let original = StoreFile(unchecked: fixture.store).externalDataPath
        let copy = StoreFile(unchecked: target).externalDataPath
        for name in try FileManager.default.contentsOfDirectory(atPath: original) {
            #expect(try Hashing.sha256(ofFile: (copy as NSString).appendingPathComponent(name))
                    == (try Hashing.sha256(ofFile: (original as NSString).appendingPathComponent(name))))
        }
        #expect(leftovers(fixture.folder.file("restored")).isEmpty)
    }

    @Test("the manifest records everything a backup's does, plus the snapshot's facts")
    func manifest() throws {
        let fixture = try SnapshotFixture(tags: ["t"])
        let record = fixture.created.record
        let facts = try #require(record.snapshot)
        #expect(record.kind == "snapshot")
        #expect(facts.compression == .zstd && facts.level == 3 && facts.tags == ["t"] && facts.format == 2 && facts.archive == nil)
        #expect(record.database.path == "store/Tasks.sqlite")
        #expect(record.coreData?.entityCounts["Category"] == 50)
        #expect(record.externalData?.files.count == 2)
        #expect(record.verify.ok && record.verify.level == .quick)
        #expect(try fixture.repository.record(fixture.created.id).manifest.database == record.database)
    }

    @Test("a snapshot taken while another process commits every 2 ms is the store at one moment")
    func createWhileWriting() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 30_000)
        let ready = folder.file("ready")
        let writer = try ChildProcess.Running(Binaries.lab, ["writer", store, "--interval-ms", "2", "--ready-file", ready])
        defer { writer.signal(SIGTERM); _ = writer.wait() }
        #expect(ChildProcess.waitFor(file: ready))
        let before = try rowCount(store)
        let created = try SnapshotCreate.run(store: store, options: .init(repository: try folder.repository()))
        let after = try rowCount(store)
        let target = folder.file("restored.sqlite")
        _ = try SnapshotRestore.run(.init(repository: folder.file("repo"), id: created.id, target: .file(target)))
        let copied = try rowCount(target)
        #expect(before <= copied && copied <= after && before < after, "\(before) <= \(copied) <= \(after)")
        #expect(created.record.coreData?.entityCounts["Task"].map { $0 + created.record.coreData!.entityCounts["Note"]! } == copied)
    }

    @Test("ids: unique prefixes work; unknown, ambiguous and path-like ids are refused")
    func ids() throws {
        let fixture = try SnapshotFixture()
        let repo = try fixture.repository
        #expect(try repo.record(String(fixture.created.id.prefix(19))).id == fixture.created.id)
        #expect((#expect(throws: StoreOpsError.self) { try repo.record("19990101T000000Z-000000") })?.status == .noInput)
        #expect((#expect(throws: StoreOpsError.self) { try repo.record("../../etc/passwd") })?.status == .noInput)
        _ = try SnapshotCreate.run(store: fixture.store, options: .init(repository: fixture.repo))
        #expect((#expect(throws: StoreOpsError.self) { try repo.record("2") })?.status == .usage)
    }

    @Test("bad input: not a repository 65, missing repository 66, bad level or tag 64")
    func badInput() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        let notRepo = folder.file("stuff")
        try FileManager.default.createDirectory(atPath: notRepo, withIntermediateDirectories: false)
        _ = FileManager.default.createFile(atPath: (notRepo as NSString).appendingPathComponent("photo.jpg"), contents: Data([1]))
        let error = #expect(throws: StoreOpsError.self) { try SnapshotCreate.run(store: store, options: .init(repository: notRepo)) }
        #expect(error?.status == .badData)
        #expect(error?.message.contains("is not a storectl snapshot repository") == true)
        #expect(try FileManager.default.contentsOfDirectory(atPath: notRepo) == ["photo.jpg"])
        #expect((#expect(throws: StoreOpsError.self) { try SnapshotSummary.list(repository: folder.file("none")) })?.status == .noInput)
        #expect((#expect(throws: StoreOpsError.self) { try SnapshotSummary.list(repository: notRepo) })?.status == .badData)
        #expect((#expect(throws: StoreOpsError.self) {
            try SnapshotCreate.run(store: store, options: .init(repository: folder.file("r"), level: 20))
        })?.status == .usage)
        #expect((#expect(throws: StoreOpsError.self) {
            try SnapshotCreate.run(store: store, options: .init(repository: folder.file("r"), tags: ["no spaces"]))
        })?.status == .usage)
        #expect((#expect(throws: StoreOpsError.self) { try SnapshotVerify.run(.init(repository: folder.file("none"), all: true)) })?.status == .noInput)
    }
}
