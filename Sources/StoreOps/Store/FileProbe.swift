import Foundation
import Synchronization

/// Reads store headers and inspects SQLite's file locks without disturbing them.
///
/// POSIX advisory locks belong to the process, and closing *any* descriptor of a file drops all of
/// the process's locks on it, including the locks SQLite holds through its own descriptors
/// (https://sqlite.org/lockingv3.html, "How To Corrupt Your Database Files", and the unix VFS's
/// comments on "POSIX advisory locks are broken"). So this probe opens each file once, read-only,
/// and keeps the descriptor for the life of the process: it never closes a descriptor of a store
/// that a SQLite connection in this process might have open.
public final class FileProbe: Sendable {
    public static let shared = FileProbe()

    private struct Key: Hashable { var dev: UInt64; var ino: UInt64 }
    private let descriptors = Mutex<[Key: Int32]>([:])

    private func descriptor(for path: String) throws -> Int32 {
        guard let id = FileSystem.identity(of: path) else {
            throw StoreOpsError.posix(errno, doing: "opening \(path)", side: .input)
        }
        let key = Key(dev: id.dev, ino: id.ino)
        return try descriptors.withLock { table in
            if let fd = table[key] { return fd }
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                throw StoreOpsError.posix(errno, doing: "opening \(path)", side: .input)
            }
            table[key] = fd
            return fd
        }
    }

    /// The first 100 bytes of a file (fewer if it is shorter).
    public func header(of path: String) throws -> [UInt8] {
        let fd = try descriptor(for: path)
        var buffer = [UInt8](repeating: 0, count: 100)
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 100, 0) }
        guard n >= 0 else { throw StoreOpsError.posix(errno, doing: "reading \(path)", side: .input) }
        return Array(buffer.prefix(n))
    }

    /// The process holding a lock that conflicts with `type` on bytes `start..<start+length`, if any.
    func conflictingHolder(path: String, type: Int32, start: Int, length: Int) throws -> Int32? {
        let fd = try descriptor(for: path)
        var lock = flock()
        lock.l_type = Int16(type)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = off_t(start)
        lock.l_len = off_t(length)
        guard fcntl(fd, F_GETLK, &lock) == 0 else {
            throw StoreOpsError.posix(errno, doing: "inspecting locks on \(path)", side: .input)
        }
        return lock.l_type == Int16(F_UNLCK) ? nil : lock.l_pid
    }
}

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
