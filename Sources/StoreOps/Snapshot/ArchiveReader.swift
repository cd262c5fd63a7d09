import CLibArchive
import Crypto
import Foundation

/// Reads a tar archive (any compression libarchive knows) entry by entry, hashing the archive
/// file's bytes as libarchive consumes them, so one pass both extracts and checks the archive.
final class ArchiveReader {
    struct Entry {
        var name: String
        /// `S_IFREG`, `S_IFDIR`, `S_IFLNK`, ... from the entry's header.
        var fileType: UInt32
        var size: Int64
        var symlinkTarget: String?
        var hardlinkTarget: String?
    }

    private let archive: OpaquePointer
    private let source: Source
    let path: String

    final class Source {
        let fd: Int32
        var hasher = SHA256()
        var bytes: UInt64 = 0
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        var error: StoreOpsError?
        let path: String
        init(fd: Int32, path: String) {
            self.fd = fd
            self.path = path
        }
        deinit {
            buffer.deallocate()
            close(fd)
        }
    }

    /// Opens `path`. Only the tar format is enabled: nothing else is a storectl archive.
    init(path: String) throws {
        self.path = path
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "opening \(path)", side: .input) }
        source = Source(fd: fd, path: path)
        guard let archive = archive_read_new() else { throw StoreOpsError(.failure, "libarchive: out of memory") }
        self.archive = archive
        archive_read_support_filter_all(archive)
        archive_read_support_format_tar(archive)
        let context = Unmanaged.passUnretained(source).toOpaque()
        let status = archive_read_open(archive, context, nil, { _, context, bufferOut in
            let source = Unmanaged<ArchiveReader.Source>.fromOpaque(context!).takeUnretainedValue()
            while true {
                let n = read(source.fd, source.buffer.baseAddress, source.buffer.count)
                if n < 0 {
                    if errno == EINTR { continue }
                    source.error = StoreOpsError.posix(errno, doing: "reading \(source.path)", side: .input)
                    return -1
                }
                source.hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: source.buffer[0..<n]))
                source.bytes += UInt64(n)
                bufferOut?.pointee = UnsafeRawPointer(source.buffer.baseAddress)
                return n
            }
        }, nil)
        // On failure `deinit` frees the handle (every property is set, so it runs): one owner.
        guard status >= ARCHIVE_WARN else { throw damaged("cannot be opened as an archive") }
    }

    deinit { archive_read_free(archive) }

    /// The next entry's header, or nil at the end of the archive.
    func next() throws -> Entry? {
        var entry: OpaquePointer?
        let status = archive_read_next_header(archive, &entry)
        if status == ARCHIVE_EOF { return nil }
        guard status >= ARCHIVE_WARN, let entry else { throw damaged("a damaged entry header") }
        let name = archive_entry_pathname_utf8(entry).map { String(cString: $0) }
            ?? archive_entry_pathname(entry).map { String(cString: $0) } ?? ""
        return Entry(name: name,
                     fileType: UInt32(archive_entry_filetype(entry)),
                     size: archive_entry_size_is_set(entry) != 0 ? archive_entry_size(entry) : -1,
                     symlinkTarget: archive_entry_symlink(entry).map { String(cString: $0) },
                     hardlinkTarget: archive_entry_hardlink(entry).map { String(cString: $0) })
    }

    /// Streams the current entry's data to `sink`, block by block.
    func readData(_ sink: (UnsafeRawBufferPointer) throws -> Void) throws {
        var block: UnsafeRawPointer?
        var size = 0
        var offset: Int64 = 0
        var expected: Int64 = 0
        while true {
            let status = archive_read_data_block(archive, &block, &size, &offset)
            if status == ARCHIVE_EOF { return }
            guard status >= ARCHIVE_WARN else { throw damaged("damaged data") }
            guard offset == expected else { throw damaged("a sparse or out-of-order entry") }
            if size > 0, let block { try sink(UnsafeRawBufferPointer(start: block, count: size)) }
            expected += Int64(size)
        }
    }

    /// Reads to the end of the file (past the end-of-archive marker) and returns its SHA-256.
    func finishHashing() throws -> (bytes: UInt64, sha256: String) {
        while true {
            let n = read(source.fd, source.buffer.baseAddress, source.buffer.count)
            if n < 0 {
                if errno == EINTR { continue }
                throw StoreOpsError.posix(errno, doing: "reading \(path)", side: .input)
            }
            if n == 0 { break }
            source.hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: source.buffer[0..<n]))
            source.bytes += UInt64(n)
        }
        return (source.bytes, Hashing.hex(source.hasher.finalize()))
    }

    private func damaged(_ what: String) -> StoreOpsError {
        if let error = source.error { return error }
        let detail = archive_error_string(archive).map { String(cString: $0) } ?? "unknown error"
        return StoreOpsError(.badData, "\(path): \(what) (\(detail))")
    }
}
