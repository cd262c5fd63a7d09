import Foundation
import Synchronization

/// What SQLite's own locks say about other processes using a store.
public struct LockState: Sendable, Codable, Equatable {
    /// A process holding the write lock right now (a write transaction in progress), if any.
    public var writerPID: Int32?
    /// A process with the store open (WAL mode only: every connection holds a read lock on the
    /// -shm's DMS byte), if any. `nil` in rollback mode, where idle connections hold no lock.
    public var openByPID: Int32?

    // Offsets from SQLite's os_unix.c and wal.c: the rollback-mode lock bytes live at the 1 GiB
    // "pending byte"; WAL-mode locks are bytes 120... of the -shm file.
    static let pendingByte = 0x4000_0000
    static let walWriteLockByte = 120
    static let walDMSByte = 128

    /// Reads the lock state of a store; other processes' locks are only looked at, never taken.
    public static func read(_ store: StoreFile, walMode: Bool) throws -> LockState {
        let probe = FileProbe.shared
        if walMode {
            guard FileSystem.kind(of: store.shmPath) == .file else { return LockState() }
            // A writer holds an exclusive lock on WAL_WRITE_LOCK; a shared query conflicts only with it.
            let writer = try probe.conflictingHolder(path: store.shmPath, type: Int32(F_RDLCK), start: walWriteLockByte, length: 1)
            // Every open connection holds a shared lock on the DMS byte; an exclusive query finds one.
            let open = try probe.conflictingHolder(path: store.shmPath, type: Int32(F_WRLCK), start: walDMSByte, length: 1)
            return LockState(writerPID: writer, openByPID: open)
        } else {
            // RESERVED (pending+1) and PENDING (pending) are only ever write-locked, by a writer.
            let writer = try probe.conflictingHolder(path: store.path, type: Int32(F_RDLCK), start: pendingByte, length: 2)
            // EXCLUSIVE is a write lock on the shared range.
            let exclusive = try probe.conflictingHolder(path: store.path, type: Int32(F_RDLCK), start: pendingByte + 2, length: 510)
            return LockState(writerPID: writer ?? exclusive, openByPID: nil)
        }
    }

    /// Another process writing to the store or (WAL mode) having it open, if any: what an
    /// in-place restore or a migration must not run under.
    public static func otherUser(of store: StoreFile) throws -> Int32? {
        let locks = try read(store, walMode: StoreFile.isWALHeader(try FileProbe.shared.header(of: store.path)))
        return locks.writerPID ?? locks.openByPID
    }
}
