import Foundation
import CSQLiteSink
import GRDBSQLite

/// The store's own write lock, held through SQLite (`BEGIN IMMEDIATE` on a connection of its own)
/// while an in-place restore keeps the current store and swaps the restored one in: no other
/// process can commit between the safety snapshot and the swap, so every commit the app was
/// told succeeded is in the safety snapshot, or made after the swap, in the restored store.
///
/// Without it, an app that opens the store for each write (a CLI, a PHP request, a cron script)
/// committed between the two, unseen by the "is it open?" check made before them: the safety
/// snapshot did not hold the commit and the swap threw it away (a new user's trial lost 2 of 10
/// restores' worth so). Readers are not held back (WAL mode; in rollback mode the lock is
/// RESERVED, which readers do not wait on).
///
/// Its connection never checkpoints or deletes the -wal/-shm when it closes: it closes after the
/// swap, when those names may already be the restored store's (SQLite deletes them by name).
final class WriteGate: @unchecked Sendable {
    private var db: OpaquePointer?
    let path: String

    private let busyMilliseconds: Int32
    /// When `take()` last took the lock (how long the app's commits have waited since).
    private(set) var takenAt: Date?

    /// - Parameters:
    ///   - busyMilliseconds: how long to wait for a commit under way to finish.
    ///   - take: take the lock now; false opens the connection only (`take()` later: migrate
    ///     opens it while its own connection still holds the lock, then hands the lock over).
    init(path: String, busyMilliseconds: Int32, take: Bool = true) throws {
        self.path = path
        self.busyMilliseconds = busyMilliseconds
        var handle: OpaquePointer?
        let rc = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nil)
        guard rc == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(handle)
            throw StoreOpsError.fromResultCode(rc, message: message, doing: "opening \(path) to hold its write lock")
        }
        db = handle
        _ = storectl_db_no_checkpoint_on_close(handle)
        var persist: Int32 = 1
        _ = sqlite3_file_control(handle, "main", SQLITE_FCNTL_PERSIST_WAL, &persist)
        WriteGate.waitForLock(handle, milliseconds: busyMilliseconds)
        if take { try self.take() }
    }

    /// SQLite's busy handler for a wait on the store's lock that a signal ends (SQLite's own
    /// `busy_timeout` sleeps through SIGTERM for the whole timeout): tries again every 2 ms until
    /// `milliseconds` have passed.
    static func waitForLock(_ connection: OpaquePointer, milliseconds: Int32) {
        sqlite3_busy_handler(connection, { context, count in
            let limit = Int(bitPattern: context)
            if ProcessSignals.received != nil || Int(count) * 2 >= limit { return 0 }
            usleep(2_000)
            return 1
        }, UnsafeMutableRawPointer(bitPattern: max(1, Int(milliseconds))))
    }

    /// Takes the lock (`BEGIN IMMEDIATE`); on failure the connection is closed.
    func take() throws {
        guard let handle = db else { throw StoreOpsError(.failure, "the write lock's connection to \(path) is closed") }
        let begun = sqlite3_exec(handle, "BEGIN IMMEDIATE", nil, nil, nil)
        guard begun == SQLITE_OK else {
            let message = String(cString: sqlite3_errmsg(handle))
            sqlite3_close_v2(handle)
            db = nil
            // The busy handler gives up on a signal: that is a stop, not another writer.
            if let signal = ProcessSignals.received { throw Pipeline.Stop(reason: .signal(signal)) }
            if begun & 0xff == SQLITE_BUSY || begun & 0xff == SQLITE_LOCKED {
                throw StoreOpsError(.busy, "another process kept writing to \(path) for \(Format.duration(Double(busyMilliseconds) / 1000)); nothing was changed",
                                    hint: "try again when the app is idle")
            }
            throw StoreOpsError.fromResultCode(begun, message: message, doing: "taking the write lock of \(path)")
        }
        takenAt = Date()
    }

    /// `PRAGMA data_version` on the gate's connection (nil if it cannot be read): it changes when
    /// another connection commits, so one read before the lock is handed to the gate and one once
    /// `take()` holds it tell whether anybody committed in between.
    func dataVersion() -> Int? {
        guard let handle = db else { return nil }
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(handle, "PRAGMA data_version", -1, &statement, nil) == SQLITE_OK, let statement else { return nil }
        defer { sqlite3_finalize(statement) }
        guard sqlite3_step(statement) == SQLITE_ROW else { return nil }
        return Int(sqlite3_column_int64(statement, 0))
    }

    /// Lets go of the lock (nothing was written) and hands the open connection to the caller, who
    /// closes it (a restore through SQLite's backup API, whose destination must have no
    /// transaction open: it takes the lock again at its first step).
    func handOff() -> OpaquePointer? {
        guard let handle = db else { return nil }
        sqlite3_exec(handle, "ROLLBACK", nil, nil, nil)
        db = nil
        return handle
    }

    /// Lets go of the lock (nothing was written: the transaction is rolled back) and closes.
    func release() {
        guard let db else { return }
        sqlite3_exec(db, "ROLLBACK", nil, nil, nil)
        sqlite3_close_v2(db)
        self.db = nil
    }

    deinit { release() }
}
