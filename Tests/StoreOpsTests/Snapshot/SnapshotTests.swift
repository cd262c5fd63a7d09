import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

/// Creates a snapshot of a fresh sample store in a fresh repository.
struct SnapshotFixture {
    let folder: TempFolder
    let store: String
    let repo: String
    let created: SnapshotCreate.Result

    init(items: Int = 2_000, externalFiles: Int = 2, compression: Compression = .zstd, tags: [String] = [], format: Int = 1) throws {
        folder = try TempFolder()
        store = try sampleStore(in: folder, items: items, externalFiles: externalFiles)
        repo = try folder.repository("repo", format: format)
        created = try SnapshotCreate.run(store: store, options: .init(repository: repo, tags: tags, compression: compression,
                                                                      password: .file(try folder.passwordFile())))
    }

    var repository: SnapshotRepository { try! SnapshotRepository.open(repo) }
    var archive: String { created.archive }
    var catalogEntry: String { (repo as NSString).appendingPathComponent("catalog/\(created.id).json") }

    /// Replaces the archive with `data` and makes the catalog agree about its size and SHA-256, so
    /// that only what is inside the archive can give it away.
    func replaceArchive(with data: Data) throws {
        try data.write(to: URL(fileURLWithPath: archive))
        var record = try JSON.decoder().decode(Manifest.self, from: try Data(contentsOf: URL(fileURLWithPath: catalogEntry)))
        record.snapshot?.archive?.bytes = UInt64(data.count)
        record.snapshot?.archive?.sha256 = Hashing.sha256(data)
        try JSON.encode(record).write(to: URL(fileURLWithPath: catalogEntry))
    }

    /// The archive's entries, for rebuilding it with changes.
    func entries() throws -> [ArchiveFixture.Entry] {
        try ArchiveFixture.read(archive).map { ArchiveFixture.Entry($0.name, .file($0.data)) }
    }

    func rebuild(_ entries: [ArchiveFixture.Entry]) throws {
        let path = folder.file("rebuilt.tar.gz")
        try ArchiveFixture.write(entries, to: path)
        try replaceArchive(with: try Data(contentsOf: URL(fileURLWithPath: path)))
    }
}

@Suite("snapshots: create, list, verify, restore")
struct SnapshotTests {
    @Test("a round trip gives back the store exactly", arguments: Compression.allCases)
    func roundTrip(_ compression: Compression) throws {
        let fixture = try SnapshotFixture(compression: compression, tags: ["nightly", "v2"])
        #expect(fixture.archive.hasSuffix(".\(compression.fileExtension)"))
        let list = try SnapshotSummary.list(repository: fixture.repo)
        #expect(list.map(\.id) == [fixture.created.id])
        #expect(list[0].tags == ["nightly", "v2"])
        if compression != .none { #expect(list[0].ratio > 2, "sample data compresses: \(list[0].ratio)") }

        let outcomes = try SnapshotVerify.run(.init(repository: fixture.repo, all: true))
        #expect(outcomes.map(\.ok) == [true], "\(outcomes)")
        #expect(fixture.repository.lastVerification(fixture.created.id)?.ok == true)

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
        #expect(record.kind == "snapshot" && record.formatVersion == 1)
        #expect(facts.compression == .zstd && facts.level == 3 && facts.tags == ["t"])
        #expect(facts.archive?.sha256 == (try Hashing.sha256(ofFile: fixture.archive)))
        #expect(facts.archive?.bytes == FileSystem.size(of: fixture.archive))
        #expect(record.database.path == "store/Tasks.sqlite")
        #expect(record.coreData?.entityCounts["Category"] == 50)
        #expect(record.externalData?.files.count == 2)
        #expect(record.verify.ok && record.verify.level == .quick)
        // Inside the archive: the same manifest, without the archive record; as the last entry.
        let entries = try ArchiveFixture.read(fixture.archive)
        #expect(entries.last?.name == "manifest.json")
        let inner = try JSON.decoder().decode(Manifest.self, from: entries.last!.data)
        #expect(inner.snapshot?.archive == nil)
        #expect(inner.database == record.database)
    }

    @Test("the repository: marker, private modes, one catalog entry per snapshot")
    func repositoryLayout() throws {
        let fixture = try SnapshotFixture()
        _ = try SnapshotCreate.run(store: fixture.store, options: .init(repository: fixture.repo))
        #expect(permissions(fixture.repo) == 0o700)
        for sub in ["snapshots", "catalog", "verified"] { #expect(permissions((fixture.repo as NSString).appendingPathComponent(sub)) == 0o700) }
        #expect(permissions(fixture.archive) == 0o600)
        #expect(permissions(fixture.catalogEntry) == 0o600)
        #expect(try FileManager.default.contentsOfDirectory(atPath: (fixture.repo as NSString).appendingPathComponent("catalog")).count == 2)
        #expect(leftovers((fixture.repo as NSString).appendingPathComponent("snapshots")).isEmpty)
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

    @Test("leftovers of an interrupted create are never listed and are removed by the next writer")
    func strays() throws {
        let fixture = try SnapshotFixture()
        let snapshots = (fixture.repo as NSString).appendingPathComponent("snapshots")
        // An archive renamed into place whose catalog entry was never written, and a temp file of a dead process.
        let orphan = (snapshots as NSString).appendingPathComponent("20261122T000000Z-abcdef.tar.zst")
        let temp = (snapshots as NSString).appendingPathComponent(".20261122T000001Z-abcdef.tar.zst.tmp-storectl-999999999-x")
        for path in [orphan, temp] { _ = FileManager.default.createFile(atPath: path, contents: Data("partial".utf8)) }
        #expect(try SnapshotSummary.list(repository: fixture.repo).count == 1)
        let second = try SnapshotCreate.run(store: fixture.store, options: .init(repository: fixture.repo))
        #expect(Set(second.removedStray) == [orphan, temp])
        #expect(!FileManager.default.fileExists(atPath: orphan) && !FileManager.default.fileExists(atPath: temp))
        #expect(try SnapshotSummary.list(repository: fixture.repo).count == 2)
    }

    @Test("ids: unique prefixes work; unknown, ambiguous and path-like ids are refused")
    func ids() throws {
        let fixture = try SnapshotFixture()
        let repo = fixture.repository
        #expect(try repo.record(String(fixture.created.id.prefix(19))).snapshot?.id == fixture.created.id)
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
            try SnapshotCreate.run(store: store, options: .init(repository: folder.file("r"), compression: .gzip, level: 12))
        })?.status == .usage)
        #expect((#expect(throws: StoreOpsError.self) {
            try SnapshotCreate.run(store: store, options: .init(repository: folder.file("r"), tags: ["no spaces"]))
        })?.status == .usage)
        #expect((#expect(throws: StoreOpsError.self) { try SnapshotVerify.run(.init(repository: folder.file("none"), all: true)) })?.status == .noInput)
    }

    @Test("a full disk during create: 74, nothing listed, no partial file", .enabled(if: TempMount.isAvailable))
    func fullDisk() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 10_000)
        let mount = try #require(TempMount(kilobytes: 2048))
        let repo = try RepositoryInit.run(.init(location: mount.file("repo"), format: 1)).location
        let refused = #expect(throws: StoreOpsError.self) { try SnapshotCreate.run(store: store, options: .init(repository: repo)) }
        #expect(refused?.status == .ioError)
        var options = SnapshotCreate.Options(repository: repo)
        options.checkFreeSpace = false
        let full = #expect(throws: StoreOpsError.self) { try SnapshotCreate.run(store: store, options: options) }
        #expect(full?.status == .ioError, "\(full?.description ?? "")")
        // The repository is as it was: no snapshot, no partial file.
        #expect(try SnapshotSummary.list(repository: repo).isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: (repo as NSString).appendingPathComponent("snapshots")).isEmpty)
        // Into an existing repository: nothing listed, no partial file.
        var small = SnapshotCreate.Options(repository: repo)
        small.checkFreeSpace = false
        _ = try SnapshotCreate.run(store: try sampleStore(in: folder, name: "Small.sqlite", items: 10), options: small)
        #expect((#expect(throws: StoreOpsError.self) { try SnapshotCreate.run(store: store, options: options) })?.status == .ioError)
        #expect(try SnapshotSummary.list(repository: repo).count == 1)
        #expect(try FileManager.default.contentsOfDirectory(atPath: (repo as NSString).appendingPathComponent("snapshots")).count == 1)
    }

    @Test("prune removes what the policy does not keep, catalog entry and archive; dry-run removes nothing")
    func prune() throws {
        let fixture = try SnapshotFixture()
        for _ in 0..<3 { _ = try SnapshotCreate.run(store: fixture.store, options: .init(repository: fixture.repo)) }
        let ids = try SnapshotSummary.list(repository: fixture.repo).map(\.id)
        let dry = try SnapshotPrune.run(.init(repository: fixture.repo, policy: .init(last: 2), dryRun: true))
        #expect(dry.removed.isEmpty && dry.decisions.filter { !$0.keep }.count == 2)
        #expect(try SnapshotSummary.list(repository: fixture.repo).count == 4)
        let result = try SnapshotPrune.run(.init(repository: fixture.repo, policy: .init(last: 2)))
        #expect(result.removed == Array(ids.suffix(2)))
        #expect(try SnapshotSummary.list(repository: fixture.repo).map(\.id) == Array(ids.prefix(2)))
        #expect(try FileManager.default.contentsOfDirectory(atPath: (fixture.repo as NSString).appendingPathComponent("snapshots")).count == 2)
        #expect((#expect(throws: StoreOpsError.self) { try SnapshotPrune.run(.init(repository: fixture.repo, policy: .init())) })?.status == .usage)
    }
}
