import Foundation
import GRDB
import StoreLab
@testable import StoreOps
import Testing

/// A small encrypted format-2 repository, made once and checked in byte for byte
/// (`Tests/Fixtures/repository-golden`): its config, a key file, a pack, an index, and a snapshot
/// record whose page map is a blob of the pack. Today's code must decode every object of it and
/// restore the snapshot to the same bytes, so a change to the format cannot pass unnoticed: the
/// format is what users' repositories hold, and `docs/repository-format.md` describes it.
///
/// `STORECTL_WRITE_GOLDEN=1 swift test --filter GoldenRepository` writes the fixture again (only
/// for a deliberate change of format, which also needs a new format version and a way to read the
/// old one).
@Suite("golden repository: checked-in bytes of every object kind decode and restore")
struct GoldenRepositoryTests {
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/repository-golden").path
    static let password = "golden fixture password"

    struct Expected: Codable, Equatable {
        var snapshot: String
        var databaseSHA256: String
        var pages: Int
        var pageSize: Int
        var objects: [String: String]   // key -> SHA-256 of its bytes
    }

    /// A copy to open (opening writes a lock object; the checked-in folder stays as it is).
    func copy(in folder: TempFolder) throws -> String {
        let target = folder.file("repo")
        try FileManager.default.copyItem(atPath: Self.fixture + "/repo", toPath: target)
        for name in ["locks", "verified"] { try? FileManager.default.createDirectory(atPath: target + "/" + name, withIntermediateDirectories: true) }
        return target
    }

    @Test("every object kind decodes with today's code (config, key file, index, pack header, sealed record, page map), and the snapshot restores to the recorded bytes")
    func decodeAndRestore() throws {
        if ProcessInfo.processInfo.environment["STORECTL_WRITE_GOLDEN"] == "1" { try write() }
        let expected = try JSONDecoder().decode(Expected.self, from: try Data(contentsOf: URL(fileURLWithPath: Self.fixture + "/expected.json")))
        let folder = try TempFolder()
        let passwordFile = folder.file("pw")
        try Data((Self.password + "\n").utf8).write(to: URL(fileURLWithPath: passwordFile))
        let location = try copy(in: folder)
        let backend = LocalBackend(root: location)

        // The bytes are the ones checked in.
        var objects: [String: String] = [:]
        for (key, _) in try backend.list("") { objects[key] = Hashing.sha256(try #require(try backend.read(key))) }
        #expect(objects == expected.objects)

        // config and key file.
        let config = try #require(try RepositoryConfig.read(from: backend))
        #expect(config.isEncrypted && config.idBytes == 16 && config.compression == "zstd")
        let keys = try PagedRepository.keyFiles(backend)
        #expect(keys.damaged.isEmpty && keys.keys.count == 1)
        let key = try #require(keys.keys.first)
        #expect(key.kdf.name == "scrypt" && key.kdf.n == 1 << 10 && key.kdf.r == 8 && key.kdf.p == 1)
        #expect(try key.open(password: Data(Self.password.utf8)) != nil)
        #expect(try key.open(password: Data("another password".utf8)) == nil)

        // index, pack header, sealed record, page map.
        let repository = try PagedRepository.open(backend, password: .file(passwordFile))
        let indexKeys = try backend.list("index/").map(\.key)
        #expect(indexKeys.count == 1)
        let index = try IndexFile.decode(try #require(try backend.read(indexKeys[0])), key: indexKeys[0], sealer: repository.sealer, location: location)
        #expect(index.packs.count == 1)
        let pack = try #require(index.packs.first)
        let header = try PackBuilder.readHeader(backend, id: pack.id, sealer: repository.sealer)
        #expect(header == pack.contents.withoutIDs)
        let sealedRecord = try #require(try backend.read(PagedSnapshotRecord.key(expected.snapshot)))
        let record = try PagedSnapshotRecord.open(sealedRecord, id: expected.snapshot, sealer: repository.sealer, location: location)
        #expect(record.id == expected.snapshot && record.pages.pageSize == expected.pageSize)
        let map = try BlobLocator.pageMap(of: record, in: repository)
        #expect(map.ids.count == expected.pages)
        let blobs = Set(pack.contents.frames.flatMap { $0.blobs.map(\.id) })
        #expect(map.ids.allSatisfy { blobs.contains($0) }, "every page of the map is a blob of the pack")

        // The whole snapshot, through the command's path: the same bytes.
        var options = SnapshotRestore.Options(repository: location, id: expected.snapshot, target: .file(folder.file("restored.sqlite")))
        options.password = .file(passwordFile)
        _ = try SnapshotRestore.run(options)
        #expect(try Hashing.sha256(ofFile: folder.file("restored.sqlite")) == expected.databaseSHA256)
        let check = try RepositoryCheck.run(.init(location: location, password: .file(passwordFile), readData: true))
        #expect(check.problems.isEmpty, "\(check.problems)")
    }

    /// Makes the fixture: a 40-item sample store, a repository with the cheapest scrypt the
    /// format allows, one snapshot.
    func write() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 40)
        let passwordFile = folder.file("pw")
        try Data((Self.password + "\n").utf8).write(to: URL(fileURLWithPath: passwordFile))
        try? FileManager.default.removeItem(atPath: Self.fixture)
        try FileManager.default.createDirectory(atPath: Self.fixture, withIntermediateDirectories: true)
        var initOptions = RepositoryInit.Options(location: Self.fixture + "/repo", password: .file(passwordFile))
        initOptions.kdfN = 1 << 10
        _ = try RepositoryInit.run(initOptions)
        let created = try SnapshotCreate.run(store: store, options: .init(repository: Self.fixture + "/repo", password: .file(passwordFile)))
        let backend = LocalBackend(root: Self.fixture + "/repo")
        let record = try PagedSnapshotRecord.open(try #require(try backend.read(PagedSnapshotRecord.key(created.id))), id: created.id,
                                                  sealer: try PagedRepository.open(backend, password: .file(passwordFile)).sealer, location: backend.location)
        // The bytes a restore gives (the store's own header may differ: a restored file is made
        // to stand alone), recorded once; a later restore must give the same.
        var restore = SnapshotRestore.Options(repository: Self.fixture + "/repo", id: created.id, target: .file(folder.file("restored.sqlite")))
        restore.password = .file(passwordFile)
        _ = try SnapshotRestore.run(restore)
        for (key, _) in try backend.list("locks/") { try backend.remove(key, point: "golden.lock") }
        for (key, _) in try backend.list("verified/") { try backend.remove(key, point: "golden.verified") }
        var objects: [String: String] = [:]
        for (key, _) in try backend.list("") { objects[key] = Hashing.sha256(try #require(try backend.read(key))) }
        let expected = Expected(snapshot: created.id, databaseSHA256: try Hashing.sha256(ofFile: folder.file("restored.sqlite")),
                                pages: record.pages.pageCount, pageSize: record.pages.pageSize, objects: objects)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(expected).write(to: URL(fileURLWithPath: Self.fixture + "/expected.json"))
    }
}
