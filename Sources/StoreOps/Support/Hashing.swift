import Crypto
import Foundation

public enum Hashing {
    /// SHA-256 of a file, read in 1 MiB chunks (constant memory), as lowercase hex.
    public static func sha256(ofFile path: String) throws -> String {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "reading \(path) to hash it", side: .input) }
        defer { close(fd) }
        var hasher = SHA256()
        let chunk = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let n = read(fd, buffer.baseAddress, chunk)
            if n < 0 {
                if errno == EINTR { continue }
                throw StoreOpsError.posix(errno, doing: "reading \(path) to hash it", side: .input)
            }
            if n == 0 { break }
            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        }
        return hex(hasher.finalize())
    }

    public static func sha256(_ data: some DataProtocol) -> String { hex(SHA256.hash(data: data)) }

    /// The 32 raw bytes of a SHA-256 digest.
    public static func sha256Digest(_ data: some DataProtocol) -> Data { Data(SHA256.hash(data: data)) }

    static func hex(_ digest: SHA256.Digest) -> String {
        digest.map { String(format: "%02x", $0) }.joined()
    }
}
