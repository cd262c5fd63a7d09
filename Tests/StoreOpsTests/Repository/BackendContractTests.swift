import Foundation
import StoreLab
@testable import StoreOps
import Synchronization
import Testing

/// The backend contract (`RepositoryBackend`'s documentation), checked the same way on every
/// place a repository can live: a local folder, a real SeaweedFS, and SeaweedFS behind the fault
/// proxy (503 SlowDown, connections cut mid-request, answers lost after the server acted,
/// bodies damaged on the way). Modelled on restic's `internal/backend/test`: missing objects,
/// random ranges, ranges past the end, pagination, and concurrent writers of one key.
@Suite("backend contract: one suite on a folder, SeaweedFS, and SeaweedFS through the fault proxy")
struct BackendContractTests {
    enum Kind: String, CaseIterable, CustomStringConvertible, Sendable {
        case local, s3, s3Faulty = "s3-through-fault-proxy"
        var description: String { rawValue }
        static var all: [Kind] { Place.all.contains(.s3) ? allCases : [.local] }
    }

    /// A backend under test, and what keeps it alive (its folder, the proxy).
    final class Subject: @unchecked Sendable {
        let backend: any RepositoryBackend
        let kind: Kind
        private let folder: TempFolder?
        private let proxy: ChildProcess.Running?

        init(_ kind: Kind) throws {
            self.kind = kind
            switch kind {
            case .local:
                let folder = try TempFolder()
                let backend = LocalBackend(root: folder.file("repo"))
                try FileSystem.makeDirectory(backend.root, existingOK: false, point: "test.folder")
                try backend.prepare()
                (self.folder, self.proxy, self.backend) = (folder, nil, backend)
            case .s3, .s3Faulty:
                _ = try SharedS3.server()   // its settings go into S3Settings.environment
                var environment = S3Settings.environment
                var proxy: ChildProcess.Running?
                if kind == .s3Faulty {
                    let started = try SharedS3.startFaultProxy(["--slowdown", "0.06", "--cut", "0.06", "--lost", "0.06", "--corrupt", "0.06", "--seed", "23"])
                    proxy = started.proxy
                    environment.merge(["AWS_ENDPOINT_URL_S3": "http://127.0.0.1:\(started.port)", "STORECTL_S3_RETRIES": "12",
                                       "STORECTL_S3_BACKOFF_MS": "20"]) { $1 }
                }
                let (bucket, prefix) = try S3Backend.parse(try SharedS3.newLocation("contract"))
                var settings = try S3Settings.resolve(bucket: bucket, environment: environment)
                // Parts of 5 MiB (the least S3 takes) from 10 MiB, and small pages, so that a
                // test's few objects go up in parts and list in pages.
                settings.partSize = 5 << 20
                settings.multipartThreshold = 10 << 20
                settings.listPageSize = 7
                (self.folder, self.proxy, self.backend) = (nil, proxy, S3Backend(bucket: bucket, prefix: prefix, settings: settings))
            }
        }

        deinit {
            proxy?.signal(SIGKILL)
            _ = proxy?.wait()
        }
    }

    static func bytes(_ count: Int, seed: UInt64) -> Data {
        var state = seed &* 0x9E37_79B9_7F4A_7C15 | 1
        var bytes = [UInt8](repeating: 0, count: count)
        for i in 0..<count {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            bytes[i] = UInt8(truncatingIfNeeded: state)
        }
        return Data(bytes)
    }

    func expectStatus(_ status: StoreOps.ExitStatus, _ containing: String, _ body: () throws -> Void, sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            try body()
            Issue.record("expected exit \(status.rawValue) (\(containing)), and it succeeded", sourceLocation: sourceLocation)
        } catch let error as StoreOpsError {
            #expect(error.status == status, "\(error.message)", sourceLocation: sourceLocation)
            #expect(error.message.contains(containing), "\(error.message)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("expected a StoreOpsError, got \(error)", sourceLocation: sourceLocation)
        }
    }

    @Test("a missing object: read and size are nil, a ranged read is 65 naming it, remove succeeds, an empty folder lists nothing", arguments: Kind.all)
    func missing(_ kind: Kind) throws {
        let subject = try Subject(kind)
        let backend = subject.backend
        #expect(try backend.read("snapshots/absent") == nil)
        #expect(try backend.size("snapshots/absent") == nil)
        #expect(try backend.size("data") == nil, "a folder is not an object")
        expectStatus(.badData, "is missing") { _ = try backend.read("data/00/absent", offset: 0, length: 10) }
        #expect(try backend.read("data/00/absent", offset: 5, length: 0).isEmpty)
        try backend.remove("snapshots/absent", point: "test.remove")
        try backend.remove("locks/absent", point: "test.remove")
        #expect(try backend.list("snapshots/").isEmpty)
        #expect(try backend.list("data/").isEmpty)
    }

    @Test("whole objects and random ranges read back exactly (across the parts of a multipart upload); a range past the end is 65", arguments: Kind.all)
    func ranges(_ kind: Kind) throws {
        let subject = try Subject(kind)
        let backend = subject.backend
        let data = Self.bytes(11 << 20, seed: 1)   // three parts on S3
        let key = "data/ab/" + String(repeating: "ab", count: 32)
        try backend.write(key, data, point: "test.write")
        #expect(try backend.read(key) == data)
        #expect(try backend.size(key) == UInt64(data.count))
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<40 {
            let offset = Int.random(in: 0..<data.count, using: &generator)
            let length = Int.random(in: 1...min(6 << 20, data.count - offset), using: &generator)
            #expect(try backend.read(key, offset: UInt64(offset), length: length) == data[offset..<(offset + length)], "\(offset)+\(length)")
        }
        #expect(try backend.read(key, offset: UInt64(data.count - 1), length: 1) == data.suffix(1))
        #expect(try backend.read(key, offset: 7, length: 0).isEmpty)
        expectStatus(.badData, key) { _ = try backend.read(key, offset: UInt64(data.count - 10), length: 20) }
        expectStatus(.badData, key) { _ = try backend.read(key, offset: UInt64(data.count + 100), length: 20) }
        // A staged write is invisible until committed, then whole.
        let staged = try backend.stage("data/cd/staged", Self.bytes(1000, seed: 2), point: "test.stage")
        if kind == .local { #expect(try backend.read("data/cd/staged") == nil) }
        try staged.commit()
        #expect(try backend.read("data/cd/staged") == Self.bytes(1000, seed: 2))
    }

    @Test("an immutable key is never replaced: the same bytes again succeed, other bytes are 65 and leave it unchanged; locks/ and verified/ are replaced whole",
          arguments: Kind.all)
    func immutable(_ kind: Kind) throws {
        let subject = try Subject(kind)
        let backend = subject.backend
        for (key, size) in [("snapshots/20261124T000000Z-abcdef", 900), ("config", 200), ("keys/k1", 400), ("data/ef/big", 11 << 20)] {
            let first = Self.bytes(size, seed: 3), other = Self.bytes(size, seed: 4)
            try backend.write(key, first, point: "test.write")
            try backend.write(key, first, point: "test.write")
            try backend.stage(key, first, point: "test.write").commit()
            expectStatus(.badData, "already exists with other content") { try backend.write(key, other, point: "test.write") }
            expectStatus(.badData, "already exists with other content") { try backend.write(key, Self.bytes(size + 1, seed: 3), point: "test.write") }
            #expect(try backend.read(key) == first, "\(key) unchanged")
        }
        #expect(!RepositoryKeyRules.isReplaceable("snapshots/x") && !RepositoryKeyRules.isReplaceable("index/x") && !RepositoryKeyRules.isReplaceable("config"))
        for key in ["locks/own", "verified/20261124T000000Z-abcdef.json"] {
            #expect(RepositoryKeyRules.isReplaceable(key))
            try backend.write(key, Self.bytes(100, seed: 5), point: "test.write")
            try backend.write(key, Self.bytes(60, seed: 6), point: "test.write")
            #expect(try backend.read(key) == Self.bytes(60, seed: 6))
        }
        if kind == .local, let local = backend as? LocalBackend {
            let names = try FileManager.default.contentsOfDirectory(atPath: local.root + "/snapshots")
            #expect(names == ["20261124T000000Z-abcdef"], "no temp file left behind by a refused write")
        }
    }

    @Test("a listing returns every object under a folder at any depth, sorted, with sizes, gathering every page", arguments: Kind.all)
    func listing(_ kind: Kind) throws {
        let subject = try Subject(kind)
        let backend = subject.backend
        var expected: [(key: String, size: UInt64)] = []
        for i in (0..<23).reversed() {
            let key = String(format: "snapshots/20261124T%06dZ-000000", i)
            try backend.write(key, Self.bytes(10 + i, seed: UInt64(i)), point: "test.write")
            expected.append((key, UInt64(10 + i)))
        }
        for (i, folder) in ["0a", "0b", "ff"].enumerated() {
            let key = "data/\(folder)/\(folder)" + String(repeating: "0", count: 62)
            try backend.write(key, Self.bytes(5 + i, seed: 9), point: "test.write")
        }
        try backend.write("index/one", Data("i".utf8), point: "test.write")
        let listsBefore = S3Traffic.sinceStart()?.requests["LIST"] ?? 0
        let snapshots = try backend.list("snapshots/")
        #expect(snapshots.map(\.key) == expected.map(\.key).sorted())
        #expect(snapshots.map(\.size) == expected.sorted { $0.key < $1.key }.map(\.size))
        if kind != .local {
            #expect((S3Traffic.sinceStart()?.requests["LIST"] ?? 0) - listsBefore >= 4, "23 keys at 7 a page: 4 pages")
        }
        let data = try backend.list("data/")
        #expect(data.map(\.key) == ["data/0a/0a" + String(repeating: "0", count: 62), "data/0b/0b" + String(repeating: "0", count: 62),
                                    "data/ff/ff" + String(repeating: "0", count: 62)])
        #expect(data.map(\.size) == [5, 6, 7])
        let all = try backend.list("")
        #expect(all.count == 23 + 3 + 1)
        #expect(all.map(\.key) == all.map(\.key).sorted())
        try backend.remove(expected[0].key, point: "test.remove")
        #expect(try backend.list("snapshots/").count == 22)
        #expect(try backend.read(expected[0].key) == nil)
    }

    @Test("concurrent writers of one key: the same bytes all succeed; other bytes to an absent immutable key, exactly one; a replaceable key ends whole",
          arguments: Kind.all)
    func concurrentWriters(_ kind: Kind) throws {
        let subject = try Subject(kind)
        let backend = subject.backend
        let writers = 8
        func race(_ body: @escaping @Sendable (Int) throws -> Void) -> [Result<Void, any Error>] {
            let results = Mutex<[Int: Result<Void, any Error>]>([:])
            DispatchQueue.concurrentPerform(iterations: writers) { i in
                let outcome = Result { try body(i) }
                results.withLock { $0[i] = outcome }
            }
            return results.withLock { value in (0..<writers).map { value[$0]! } }
        }
        // One content-addressed object written by eight writers at once (a retry storm).
        let same = Self.bytes(150_000, seed: 7)
        let key = "data/aa/" + String(repeating: "aa", count: 32)
        let sameResults = race { _ in try backend.write(key, same, point: "test.race") }
        #expect(sameResults.allSatisfy { if case .success = $0 { true } else { false } }, "\(sameResults.map { "\($0)" })")
        #expect(try backend.read(key) == same)
        // Eight writers of one record with different bytes: exactly one wins, the others are 65.
        let record = "snapshots/20261124T101010Z-race00"
        let different = race { i in try backend.write(record, Self.bytes(500, seed: 100 + UInt64(i)), point: "test.race") }
        let winners = different.indices.filter { if case .success = different[$0] { true } else { false } }
        #expect(winners.count == 1, "\(different)")
        for case .failure(let error) in different {
            #expect((error as? StoreOpsError)?.status == .badData, "\(error)")
        }
        if let winner = winners.first { #expect(try backend.read(record) == Self.bytes(500, seed: 100 + UInt64(winner))) }
        // A lock record rewritten by eight writers: all succeed and one whole version is left.
        let lock = "locks/race"
        let replaced = race { i in try backend.write(lock, Self.bytes(300 + i, seed: 200 + UInt64(i)), point: "test.race") }
        #expect(replaced.allSatisfy { if case .success = $0 { true } else { false } }, "\(replaced)")
        let final = try #require(try backend.read(lock))
        #expect((0..<writers).contains { final == Self.bytes(300 + $0, seed: 200 + UInt64($0)) })
    }

    @Test("abandoned writes: a dead writer's temp file (folder) or unfinished upload (S3, only when alone) is removed; a live one's is kept", arguments: Kind.all)
    func abandoned(_ kind: Kind) throws {
        let subject = try Subject(kind)
        let backend = subject.backend
        if let local = backend as? LocalBackend {
            let dead = try ChildProcess.Running("/bin/true", [])
            _ = dead.wait()
            try FileSystem.makeDirectory(local.root + "/data/ab", existingOK: true, point: "test.folder")
            let stale = local.root + "/data/ab/" + PendingFile.temporaryPrefix(for: "pack") + "\(dead.pid)-1"
            let live = local.root + "/data/ab/" + PendingFile.temporaryPrefix(for: "pack") + "\(getpid())-1"
            #expect(FileManager.default.createFile(atPath: stale, contents: Data("x".utf8)))
            #expect(FileManager.default.createFile(atPath: live, contents: Data("x".utf8)))
            let removed = try backend.removeAbandoned(alone: false)
            #expect(removed == [stale], "\(removed)")
            #expect(FileSystem.kind(of: live) == .file)
            #expect(try backend.list("data/").isEmpty, "temp files are not objects")
        } else if let remote = backend as? S3Backend {
            _ = try remote.beginUpload("data/ab/unfinished")
            #expect(try remote.removeAbandoned(alone: false).isEmpty)
            #expect(try remote.pendingUploads().count == 1)
            let aborted = try remote.removeAbandoned(alone: true)
            #expect(aborted.count == 1 && aborted[0].contains("data/ab/unfinished"), "\(aborted)")
            #expect(try remote.pendingUploads().isEmpty)
            #expect(try backend.read("data/ab/unfinished") == nil)
        }
    }
}
