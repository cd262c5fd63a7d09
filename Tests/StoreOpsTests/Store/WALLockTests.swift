import Foundation
import GRDB
import StoreLab
@testable import StoreOps
import Synchronization
import Testing

/// POSIX advisory locks belong to the process: closing any descriptor of a file drops all of the
/// process's locks on it. A WAL read transaction is such a lock on the `-shm`; losing it lets
/// another process's checkpoint overwrite the pages the transaction is reading.
@Suite("WAL read locks survive storectl's own reads of the -shm")
struct WALLockTests {
    /// Runs Python's sqlite3 on `store` in a child process and returns what it prints.
    func python(_ store: String, _ code: String) throws -> String {
        let result = try ChildProcess.run("/usr/bin/env", ["python3", "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None)\n" + code, store])
        #expect(result.status == 0, "\(result.stderr)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test("reading the WAL index header while a read transaction is held: another process's TRUNCATE checkpoint is still blocked by it")
    func headerKeepsReadLock() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 500)
        let file = try StoreFile(existing: store)
        let reader = try StoreConnection.open(store, access: .readOnly, label: "test.reader")
        defer { try? reader.close() }
        try reader.inDatabase { db in
            try db.beginTransaction(.deferred)
            defer { try? db.rollback() }
            let before = try Int.fetchOne(db, sql: "SELECT count(*) FROM ZITEM")
            // Frames beyond the reader's snapshot: a checkpoint must not copy them into the file.
            _ = try python(store, "for i in range(200): c.execute(\"UPDATE ZITEM SET ZTITLE = 'changed' WHERE Z_PK = ?\", (i + 1,))")
            #expect(ParallelSourceCheck.walHeader(file) != nil)
            #expect(ParallelSourceCheck.walHeader(file) != nil)
            // (busy, frames in the log, frames checkpointed): busy = 1 while our reader holds its mark.
            let checkpoint = try python(store, "print(c.execute('PRAGMA wal_checkpoint(TRUNCATE)').fetchone()[0])")
            #expect(checkpoint == "1", "the checkpoint passed the held read transaction: its lock was dropped")
            #expect(try Int.fetchOne(db, sql: "SELECT count(*) FROM ZITEM") == before)
            #expect(try Int.fetchOne(db, sql: "SELECT count(*) FROM ZITEM WHERE ZTITLE = 'changed'") == 0, "the snapshot still reads its own point in time")
            #expect(try String.fetchOne(db, sql: "PRAGMA quick_check") == "ok")
        }
    }

    @Test("an -shm removed between the look for it and the lock probe (the app's last connection closing) reads as nobody having the store open, not as an error")
    func vanishingShmIsNobodyOpen() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 10)
        let file = try StoreFile(existing: store)
        let stop = Atomic<Bool>(false)
        let stopped = DispatchSemaphore(value: 0)
        let churn = Thread {
            while !stop.load(ordering: .relaxed) {
                FileManager.default.createFile(atPath: file.shmPath, contents: Data(count: 32_768))
                unlink(file.shmPath)
            }
            stopped.signal()
        }
        churn.start()
        defer { stop.store(true, ordering: .relaxed); stopped.wait() }
        // Each -shm the probe opens stays open for the life of the process (see `FileProbe`):
        // the looks stop after 300 of them, so that this test leaves the process its descriptors.
        func descriptors() -> Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0 }
        let before = descriptors()
        var failures: [String] = [], looks = 0
        let deadline = Date().addingTimeInterval(3)
        while Date() < deadline, looks % 64 != 0 || descriptors() < before + 300 {
            looks += 1
            do {
                let state = try LockState.read(file, walMode: true)
                if state.writerPID != nil || state.openByPID != nil { failures.append("a holder named: \(state)") }
            } catch {
                failures.append("\(error)")
            }
        }
        #expect(failures.isEmpty, "\(failures.count) of \(looks) looks failed: \(failures.prefix(3))")
    }
}
