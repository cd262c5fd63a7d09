import Foundation
import GRDB
import StoreLab
@testable import StoreOps
import Testing

@Suite("source fingerprint")
struct SourceFingerprintTests {
    /// Sets the database file's modification time to `secondsAgo` before now.
    func touch(_ path: String, secondsAgo: Double) {
        let when = Date().timeIntervalSince1970 - secondsAgo
        var times = [timespec(tv_sec: Int(when), tv_nsec: Int((when - floor(when)) * 1e9)),
                     timespec(tv_sec: Int(when), tv_nsec: Int((when - floor(when)) * 1e9))]
        _ = utimensat(AT_FDCWD, path, &times, 0)
    }

    @Test("a WAL store with no frame in any -wal is its file: the same fingerprint with the -wal missing or empty, not trusted later while the file was written in the last 100 ms, another after a write")
    func walWithoutFrames() throws {
        let folder = try TempFolder()
        let path = folder.file("s.sqlite")
        let queue = try DatabaseQueue(path: path)
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA journal_mode = WAL")
            try db.execute(sql: "CREATE TABLE t (x)")
            try db.execute(sql: "INSERT INTO t VALUES (1)")
        }
        try queue.close()   // the last connection: checkpointed, -wal and -shm removed
        let store = StoreFile(unchecked: path)
        #expect(FileSystem.kind(of: store.walPath) == .missing)
        // Written "just now": a time half a second ahead stays under 100 ms old however long this
        // thread is descheduled before the look (10 ms ago was not, once, on a loaded machine).
        touch(path, secondsAgo: -0.5)
        let fresh = try #require(SourceFingerprint.take(store))
        #expect(fresh.walIndex == "empty" && !fresh.settled, "written within 100 ms: not to be trusted later")
        var whole = [timespec(tv_sec: Int(Date().timeIntervalSince1970) - 5, tv_nsec: 0), timespec(tv_sec: Int(Date().timeIntervalSince1970) - 5, tv_nsec: 0)]
        _ = utimensat(AT_FDCWD, path, &whole, 0)
        #expect(SourceFingerprint.take(store)?.settled == false, "a whole-second time (a coarse file system): never trusted")
        touch(path, secondsAgo: 1)
        let closed = try #require(SourceFingerprint.take(store))
        #expect(closed.walIndex == "empty" && closed.settled && closed != fresh)
        // A reader opens it (an empty -wal and a new -shm appear): the same state.
        let reader = try DatabaseQueue(path: path, configuration: { var c = Configuration(); c.readonly = true; return c }())
        _ = try reader.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM t") }
        #expect(FileSystem.size(of: store.walPath) == 0)
        #expect(SourceFingerprint.take(store) == closed)
        try reader.close()
        // A commit: frames in the -wal, then (last close) in the file with a new time.
        let writer = try DatabaseQueue(path: path)
        try writer.write { try $0.execute(sql: "INSERT INTO t VALUES (2)") }
        let framed = try #require(SourceFingerprint.take(store))
        #expect(framed.walIndex != "empty" && framed != closed)
        try writer.close()
        #expect(FileSystem.kind(of: store.walPath) == .missing)
        Thread.sleep(forTimeInterval: 0.15)
        let written = try #require(SourceFingerprint.take(store))
        #expect(written.walIndex == "empty" && written != closed, "the file's time moved with the checkpoint at close")
    }
}
