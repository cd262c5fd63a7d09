import Crypto
import Foundation

public enum Hashing {
    /// SHA-256 of a file as lowercase hex, in constant memory.
    ///
    /// The file is mapped 4 MiB at a time and each window unmapped after hashing: hashing from
    /// the mapping skips the copy read(2) makes into a buffer (about a fifth faster on a file in
    /// the page cache), and the window bounds what the mapping adds to the resident set.
    ///
    /// Never on a store a connection of this process may have open: closing the descriptor would
    /// drop that connection's locks (use `FileProbe.sha256(of:)`).
    public static func sha256(ofFile path: String) throws -> String {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "reading \(path) to hash it", side: .input) }
        defer { close(fd) }
        return try sha256(fd: fd, path: path)
    }

    /// SHA-256 of the file open as `fd`, from its start, without moving its offset.
    static func sha256(fd: Int32, path: String) throws -> String {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw StoreOpsError.posix(errno, doing: "reading \(path) to hash it", side: .input) }
        let size = Int(info.st_size)
        var hasher = SHA256()
        let window = 4 << 20
        var offset = 0
        while offset < size {
            let length = min(window, size - offset)
            guard let mapped = mmap(nil, length, PROT_READ, MAP_PRIVATE, fd, off_t(offset)), mapped != MAP_FAILED else {
                throw StoreOpsError.posix(errno, doing: "reading \(path) to hash it", side: .input)
            }
            _ = madvise(mapped, length, MADV_SEQUENTIAL)
            hasher.update(bufferPointer: UnsafeRawBufferPointer(start: mapped, count: length))
            munmap(mapped, length)
            offset += length
        }
        return hex(hasher.finalize())
    }

    /// Reads `fd` to its end in 1 MiB chunks, hashing each and handing it to `body` (which may
    /// write it somewhere); returns the bytes read and their SHA-256. Every chunk but the last is
    /// a whole 1 MiB (short reads are filled up), so a chunk holds whole pages of any page size.
    static func streamHashing(fd: Int32, path: String, side: StoreOpsError.Side = .input,
                              _ body: (UnsafeRawBufferPointer) throws -> Void) throws -> (UInt64, String) {
        var hasher = SHA256()
        var total: UInt64 = 0
        let size = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
        defer { buffer.deallocate() }
        var ended = false
        while !ended {
            var filled = 0
            while filled < size {
                let n = read(fd, buffer.baseAddress! + filled, size - filled)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw StoreOpsError.posix(errno, doing: "reading \(path)", side: side)
                }
                if n == 0 { ended = true; break }
                filled += n
            }
            guard filled > 0 else { break }
            let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<filled])
            hasher.update(bufferPointer: chunk)
            try body(chunk)
            total += UInt64(filled)
        }
        return (total, hex(hasher.finalize()))
    }

    public static func sha256(_ data: some DataProtocol) -> String { hex(SHA256.hash(data: data)) }

    /// The 32 raw bytes of a SHA-256 digest.
    public static func sha256Digest(_ data: some DataProtocol) -> Data { Data(SHA256.hash(data: data)) }

    static func hex(_ digest: SHA256.Digest) -> String {
        digest.map { String(format: "%02x", $0) }.joined()
    }
}
