import Foundation
import GRDB
import StoreLab
@testable import StoreOps
import Synchronization
import Testing

@Suite("the follower's pinned read beside an app's checkpoint")
struct WalFollowerPinTests {
    /// The premise of the reads beside a base: their first read lets the base's boundary hold go.
    /// Were a read refused while an app's checkpoint waits on that hold, the hold would stay until
    /// the app's busy timeout failed its checkpoint.
    @Test("a read begun while an app's TRUNCATE checkpoint waits on an older read (a base's hold) is not refused; once the hold goes, the checkpoint completes (it waited for it)")
    func pinBesideAWaitingCheckpoint() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 50)
        var configuration = Configuration()
        configuration.busyMode = .timeout(5)
        let app = try DatabaseQueue(path: store, configuration: configuration)
        try app.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'a' WHERE Z_PK = 1") }
        var hold: ReadHold? = try ReadHold(path: store, busyMilliseconds: 100)
        try app.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'b' WHERE Z_PK = 1") }
        let answered = Mutex<(Int?, TimeInterval)?>(nil)
        let done = DispatchSemaphore(value: 0)
        let checkpointer = try DatabaseQueue(path: store, configuration: configuration)
        Thread.detachNewThread {
            let started = Date()
            let busy = try? checkpointer.inDatabase { try Row.fetchOne($0, sql: "PRAGMA wal_checkpoint(TRUNCATE)") }?[0] as Int?
            answered.withLock { $0 = (busy, Date().timeIntervalSince(started)) }
            done.signal()
        }
        usleep(300_000)   // the checkpoint waits on the hold meanwhile
        #expect(answered.withLock { $0 } == nil, "the checkpoint did not wait for the hold")
        let follower = WalFollower(store: StoreFile(unchecked: store))
        let started = Date()
        let frames = try follower.pinned { header, _ in header.lastFrame }
        #expect(Date().timeIntervalSince(started) < 1 && frames > 0, "\(frames) frames")
        hold = nil
        _ = hold
        #expect(done.wait(timeout: .now() + 10) == .success)
        let (busy, waited) = try #require(answered.withLock { $0 })
        #expect(busy == 0 && waited >= 0.25, "busy \(String(describing: busy)) after \(waited) s")
        #expect(FileSystem.size(of: store + "-wal") == 0)
    }
}
