import Foundation
import GRDB

/// `quick_check` and the entity counts of a WAL store on a second connection, while the first
/// streams its pages, when both are certain to read the same point in time.
///
/// Debian's libsqlite3 has no `sqlite3_snapshot_open`, so the second read transaction cannot be
/// pinned to the first one's snapshot. Instead: the WAL index header (the first 48 bytes of the
/// `-shm` file: its change counter, last frame and salts) is read before the first connection
/// begins and again after the second has begun; every commit and every WAL reset changes it, so
/// if both reads agree, no commit happened in between and both transactions see the same pages.
/// If they differ (the app wrote in that instant), the check runs afterwards on the first
/// connection, as before.
final class ParallelSourceCheck: @unchecked Sendable {
    private let group = DispatchGroup()
    private let begun = DispatchSemaphore(value: 0)
    private let decided = DispatchSemaphore(value: 0)
    private var go = false
    private var outcome: Result<(Manifest.Verification, Manifest.CoreDataFacts?), any Error>?
    private(set) var running = false

    /// The WAL index header now, or nil (no `-shm`, too short, unreadable, or caught mid-update).
    ///
    /// Read through `FileProbe`'s descriptor, which is never closed. Opening and closing a
    /// descriptor of the `-shm` here would drop every POSIX lock this process holds on it
    /// (close(2): "all of the locks held by the process on the file are released"), and the WAL
    /// read locks of the streaming connection and the check's connection are such locks: the
    /// app's next checkpoint could then copy newer pages over the ones the snapshot was reading,
    /// or restart the WAL under it. That is how a first snapshot of a live store once failed
    /// quick_check on its own connection ("database disk image is malformed").
    ///
    /// SQLite writes the header twice, the second copy first (wal.c, walIndexWriteHdr), and a
    /// reader trusts it only when both copies agree; so do we: a torn read is "changed".
    static func walHeader(_ store: StoreFile) -> Data? {
        guard let bytes = try? FileProbe.shared.read(store.shmPath, count: 96, at: 0), bytes.count == 96,
              bytes[0..<48] == bytes[48..<96] else { return nil }
        return Data(bytes[0..<48])
    }

    /// Starts the check if the second connection's snapshot provably equals the one taken after
    /// `before` was read; returns whether it runs.
    func start(_ store: StoreFile, before: Data) -> Bool {
        guard let queue = try? StoreConnection.open(store.path, access: .readOnly, busyTimeout: 1, label: "storectl.source-check") else {
            return false
        }
        group.enter()
        DispatchQueue.global().async {
            IOPace.politeThread()
            defer {
                IOPace.ordinaryThread()
                try? queue.close()
                self.group.leave()
            }
            queue.inDatabase { db in
                do {
                    try db.beginTransaction(.deferred)
                    _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master")
                } catch {
                    self.begun.signal()
                    return
                }
                defer { try? db.commit() }
                self.begun.signal()
                self.decided.wait()
                guard self.go else { return }
                do {
                    let verification = try Verifier.verify(db, level: .quick)
                    let facts = verification.ok ? try ConsistentCopy.coreDataFacts(db) : nil
                    self.outcome = .success((verification, facts))
                } catch {
                    self.outcome = .failure(error)
                }
            }
        }
        begun.wait()
        go = Self.walHeader(store).map { $0 == before } ?? false
        SnapshotCreate.logger.debug("quick_check beside the stream", metadata: ["runs": "\(go)"])
        decided.signal()
        running = go
        if !go { group.wait() }
        return go
    }

    /// Waits for the check; nil when it did not run (or could not finish: the caller checks itself).
    func result() -> Result<(Manifest.Verification, Manifest.CoreDataFacts?), any Error>? {
        guard running else { return nil }
        group.wait()
        return outcome
    }
}
