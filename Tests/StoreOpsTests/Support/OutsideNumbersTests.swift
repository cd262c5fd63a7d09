import Foundation
import GRDB
import StoreLab
@testable import StoreOps
import Testing

/// Numbers that come from outside (a policy, a server's listing, a store's -shm) converted and
/// summed without a trap: each of these trapped or read past its array before.
@Suite("numbers from outside: no trap")
struct OutsideNumbersTests {
    @Test("waits longer than usleep's 71 minutes or poll's 24.8 days are bounded, not a trap; NaN and negatives wait nothing")
    func waits() {
        #expect(Waits.pollMilliseconds(30 * 86_400) == Int32.max)
        #expect(Waits.pollMilliseconds(100 * 365 * 86_400) == Int32.max)
        #expect(Waits.pollMilliseconds(.infinity) == Int32.max)
        #expect(Waits.pollMilliseconds(.nan) == 1)
        #expect(Waits.pollMilliseconds(-5) == 1)
        #expect(Waits.pollMilliseconds(0.0101) == 11)
        let started = Date()
        Waits.sleep(-1)
        Waits.sleep(.nan)
        Waits.sleep(0.05)
        let took = Date().timeIntervalSince(started)
        #expect(took >= 0.045 && took < 1, "\(took)")
    }

    @Test("byte counts a listing or a record states are summed saturating; an S3 size past 5 TiB is the server's error (74), not a sum")
    func sums() throws {
        #expect([UInt64.max - 1, 5, 7].saturatingSum { $0 } == UInt64.max)
        #expect([1, 2, 3].saturatingSum { UInt64($0) } == 6)
        #expect(UInt64.max.saturatingAdd(1) == UInt64.max)
        let settings = try S3Settings.resolve(bucket: "bucket", environment: ["AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b", "AWS_ENDPOINT_URL": "http://127.0.0.1:9"])
        let backend = S3Backend(bucket: "bucket", prefix: "repo", settings: settings)
        #expect(try S3Backend.checkSize(5 << 40, of: "data/x", in: backend) == 5 << 40)
        let error = #expect(throws: StoreOpsError.self) { try S3Backend.checkSize(UInt64.max, of: "data/x", in: backend) }
        #expect(error?.status == .ioError && error?.message.contains("more than an S3 object can be") == true, "\(String(describing: error))")
    }

    @Test("a -shm of 98 bytes (the header's two copies, not the checkpoint info) is not read past its end")
    func shortShm() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 50)
        let app = try DatabaseQueue(path: store)
        try app.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'x' WHERE Z_PK = 1") }
        let shm = try Data(contentsOf: URL(fileURLWithPath: store + "-shm"))
        try app.close()
        let copy = folder.file("copy.sqlite")
        try FileManager.default.copyItem(atPath: store, toPath: copy)
        try shm.prefix(98).write(to: URL(fileURLWithPath: copy + "-shm"))
        #expect(WalFormat.IndexHeader.backfilled(of: StoreFile(unchecked: copy)) == false)
        #expect(WalFormat.IndexHeader.current(of: StoreFile(unchecked: copy)) != nil, "the header itself is whole")
    }

    @Test("repo stats' ratio says larger when the repository holds more than its snapshots as whole copies")
    func storedRatio() {
        #expect(Format.storedRatio(logical: 540, stored: 100) == " (5.4x smaller)")
        #expect(Format.storedRatio(logical: 405, stored: 757) == " (1.9x larger)")
        #expect(Format.storedRatio(logical: 0, stored: 10) == "")
        #expect(Format.storedRatio(logical: 10, stored: 0) == "")
    }
}

@Suite("replicate status: a stopped run's kept points")
struct KeptWrittenTests {
    @Test("kept points count as written only when the repository covers from the run's last durable point to its stop with no gap; a later run with another spool leaves a gap, and they stay a problem")
    func keptWritten() {
        let t0 = Date(timeIntervalSince1970: 1_000_000), durable = t0.addingTimeInterval(10), stop = t0.addingTimeInterval(20)
        func entry(_ spans: [StorePoints.Span], newest: Date) -> StorePoints { StorePoints(store: "s", host: "h", spans: spans, newestPoint: newest) }
        let whole = StorePoints.Span(kind: "covered", from: t0, to: t0.addingTimeInterval(30), points: 9, chain: "a")
        #expect(ReplicateStatus.keptWritten(entry([whole], newest: t0.addingTimeInterval(19)), since: durable, stopped: stop))
        #expect(!ReplicateStatus.keptWritten(entry([whole], newest: durable), since: durable, stopped: stop), "nothing after the last durable point")
        let first = StorePoints.Span(kind: "covered", from: t0, to: durable, points: 4, chain: "a")
        let gap = StorePoints.Span(kind: "gap", from: durable, to: t0.addingTimeInterval(25), reason: "commits no point holds")
        let next = StorePoints.Span(kind: "covered", from: t0.addingTimeInterval(25), to: t0.addingTimeInterval(40), points: 3, chain: "b")
        #expect(!ReplicateStatus.keptWritten(entry([first, gap, next], newest: t0.addingTimeInterval(40)), since: durable, stopped: stop))
        let unfollowed = StorePoints.Span(kind: "not followed", from: durable, to: t0.addingTimeInterval(25), reason: "stopped")
        #expect(!ReplicateStatus.keptWritten(entry([first, unfollowed, next], newest: t0.addingTimeInterval(40)), since: durable, stopped: stop))
        #expect(!ReplicateStatus.keptWritten(entry([whole], newest: t0.addingTimeInterval(19)), since: nil, stopped: stop))
    }
}
