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

    /// The descriptor this probe keeps for `path`'s file (opened now if it has none): for a reader
    /// that must not close one (`FilePages` reading a live store beside this process's connections).
    func descriptor(for path: String) throws -> Int32 {
        guard let fd = try descriptorIfPresent(for: path) else {
            throw StoreOpsError.posix(ENOENT, doing: "opening \(path)", side: .input)
        }
        return fd
    }

    /// `descriptor(for:)`, or nil when `path` names no file (removed since the caller looked).
    func descriptorIfPresent(for path: String) throws -> Int32? {
        guard let id = FileSystem.identity(of: path) else {
            if errno == ENOENT { return nil }
            throw StoreOpsError.posix(errno, doing: "opening \(path)", side: .input)
        }
        let key = Key(dev: id.dev, ino: id.ino)
        return try descriptors.withLock { table in
            if let fd = table[key] { return fd }
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                if errno == ENOENT { return nil }
                throw StoreOpsError.posix(errno, doing: "opening \(path)", side: .input)
            }
            // Filed under the file it opened, which is not the one looked at when the name was
            // given to another file in between (a -shm made again): filed under the other's
            // number, it would be read for every later file given that number. (Never closed,
            // even when the table has one for it already: see the type's comment.)
            var opened = stat()
            guard fstat(fd, &opened) == 0 else { return fd }
            let openedKey = Key(dev: UInt64(opened.st_dev), ino: UInt64(opened.st_ino))
            if let kept = table[openedKey] { return kept }
            table[openedKey] = fd
            return fd
        }
    }

    /// The first 100 bytes of a file (fewer if it is shorter).
    public func header(of path: String) throws -> [UInt8] {
        try read(path, count: 100, at: 0)
    }

    /// Up to `count` bytes of a file from `offset` (fewer at its end), through the descriptor this
    /// probe keeps: the only way storectl reads a store's `-shm` or `-wal` while a connection of
    /// its own has the store open.
    public func read(_ path: String, count: Int, at offset: Int) throws -> [UInt8] {
        let fd = try descriptor(for: path)
        var buffer = [UInt8](repeating: 0, count: count)
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, count, off_t(offset)) }
        guard n >= 0 else { throw StoreOpsError.posix(errno, doing: "reading \(path)", side: .input) }
        return Array(buffer.prefix(n))
    }

    /// Fills `buffer` from `offset` (zeros past the file's end); returns the bytes read.
    @discardableResult
    func read(_ path: String, into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws -> Int {
        let fd = try descriptor(for: path)
        var done = 0
        while done < buffer.count {
            let n = pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset + done))
            if n < 0, errno == EINTR { continue }
            guard n >= 0 else { throw StoreOpsError.posix(errno, doing: "reading \(path)", side: .input) }
            if n == 0 { break }
            done += n
        }
        if done < buffer.count { (buffer.baseAddress! + done).initializeMemory(as: UInt8.self, repeating: 0, count: buffer.count - done) }
        return done
    }

    /// SHA-256 of a whole store file, through the kept descriptor (see the type's comment).
    public func sha256(of path: String) throws -> String {
        try Hashing.sha256(fd: try descriptor(for: path), path: path)
    }

    /// The process holding a lock that conflicts with `type` on bytes `start..<start+length`, if any.
    /// `conflictingHolder` on a descriptor the caller holds (a file whose path may since name
    /// another file); nil also when the probe fails.
    static func conflictingHolder(fd: Int32, type: Int32, start: Int, length: Int) -> Int32? {
        var lock = flock()
        lock.l_type = Int16(type)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = off_t(start)
        lock.l_len = off_t(length)
        guard fcntl(fd, F_GETLK, &lock) == 0 else { return nil }
        return lock.l_type == Int16(F_UNLCK) ? nil : lock.l_pid
    }

    func conflictingHolder(path: String, type: Int32, start: Int, length: Int) throws -> Int32? {
        try conflictingHolder(fd: try descriptor(for: path), path: path, type: type, start: start, length: length)
    }

    /// The same through `fd`, a descriptor this probe keeps for `path`.
    func conflictingHolder(fd: Int32, path: String, type: Int32, start: Int, length: Int) throws -> Int32? {
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

