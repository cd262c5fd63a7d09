import CLibArchive
import Crypto
import Foundation

/// Streams files into a compressed tar archive with libarchive, writing to a file descriptor.
///
/// Every byte libarchive hands to the write callback is hashed on its way to the file, so the
/// archive's SHA-256 is known when it is closed without reading it again; each added file is
/// hashed as it is read, for the manifest.
final class ArchiveWriter {
    private let archive: OpaquePointer
    private let sink: Sink
    private var closed = false

    /// Where libarchive's output goes: through zstd (when storectl compresses itself) to the file,
    /// with a running SHA-256, a byte count and write-behind.
    final class Sink {
        let fd: Int32
        var hasher = SHA256()
        var bytes: UInt64 = 0
        var error: StoreOpsError?
        let writeBehind: WriteBehind?
        let path: String
        var zstd: ZstdSink?
        init(fd: Int32, path: String) {
            self.fd = fd
            self.path = path
            writeBehind = WriteBehind(path: path, pace: nil)   // no app shares this file's disk time with an export
        }

        /// Takes bytes from libarchive: compressed already, or to be compressed here.
        func take(_ chunk: UnsafeRawBufferPointer) throws {
            if let zstd { try zstd.write(chunk) } else { try store(chunk) }
        }

        /// Writes final (compressed) bytes to the file and the hash.
        func store(_ chunk: UnsafeRawBufferPointer) throws {
            try FileSystem.writeAll(fd, chunk, path: path)
            hasher.update(bufferPointer: chunk)
            bytes += UInt64(chunk.count)
            writeBehind?.advance()
        }
    }

    /// - Parameters:
    ///   - fd: an open, empty file; the caller closes it.
    ///   - threads: compressor threads (zstd and xz).
    init(fd: Int32, path: String, compression: Compression, level: Int?, threads: Int) throws {
        guard let archive = archive_write_new() else { throw StoreOpsError(.failure, "libarchive: out of memory") }
        self.archive = archive
        sink = Sink(fd: fd, path: path)
        // From here a throw runs `deinit`, which frees the handle: it has one owner.
        closed = true
        do {
            try check(archive_write_set_format_pax_restricted(archive), "choosing the tar format")
            switch compression {
            case .zstd:
                // Compressed by ZstdSink, so its memory is bounded (see there).
                let sink = self.sink
                sink.zstd = try ZstdSink(level: level ?? 3, workers: threads) { try sink.store($0) }
            case .gzip: try check(archive_write_add_filter_gzip(archive), "choosing gzip")
            case .xz: try check(archive_write_add_filter_xz(archive), "choosing xz")
            case .none: break
            }
            if let level, compression == .gzip || compression == .xz {
                try check(archive_write_set_filter_option(archive, nil, "compression-level", "\(level)"), "setting level \(level)")
            }
            if threads > 1, compression == .xz {
                // Best effort: a libarchive built without threaded xz keeps one thread.
                _ = archive_write_set_filter_option(archive, nil, "threads", "\(threads)")
            }
            try check(archive_write_set_bytes_per_block(archive, 64 << 10), "setting the block size")
            try check(archive_write_set_bytes_in_last_block(archive, 1), "setting the last block")
            let context = Unmanaged.passUnretained(sink).toOpaque()
            try check(archive_write_open2(archive, context, nil, { _, context, buffer, length in
                let sink = Unmanaged<ArchiveWriter.Sink>.fromOpaque(context!).takeUnretainedValue()
                do {
                    try sink.take(UnsafeRawBufferPointer(start: buffer, count: length))
                } catch {
                    sink.error = (error as? StoreOpsError) ?? StoreOpsError(.failure, "\(error)")
                    return -1
                }
                return length
            }, nil, nil), "opening the archive")
        }
        closed = false
    }

    deinit {
        if !closed { archive_write_close(archive) }
        archive_write_free(archive)
    }

    /// Adds the regular file at `path` as `name` and returns its size and SHA-256.
    func addFile(_ path: String, as name: String, progress: ((UInt64) -> Void)? = nil) throws -> (UInt64, String) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "reading \(path)", side: .input) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw StoreOpsError.posix(errno, doing: "reading \(path)", side: .input) }
        try writeHeader(name: name, size: Int64(info.st_size), mtime: info.st_mtim.tv_sec)
        var total: UInt64 = 0
        let (read, sha256) = try Hashing.streamHashing(fd: fd, path: path) { chunk in
            try ProcessSignals.checkpoint("packing \(name)")
            try writeData(chunk, name: name)
            total += UInt64(chunk.count)
            progress?(total)
        }
        guard read == UInt64(info.st_size) else {
            throw StoreOpsError(.failure, "\(path) changed size while it was packed")
        }
        try check(archive_write_finish_entry(archive), "finishing \(name)")
        return (read, sha256)
    }

    /// Adds `data` as the regular file `name`.
    func addData(_ data: Data, as name: String) throws {
        try writeHeader(name: name, size: Int64(data.count), mtime: time(nil))
        try data.withUnsafeBytes { try writeData($0, name: name) }
        try check(archive_write_finish_entry(archive), "finishing \(name)")
    }

    /// Closes the archive (flushing the compressor) and returns its size and SHA-256.
    func finish() throws -> (bytes: UInt64, sha256: String) {
        closed = true
        try check(archive_write_close(archive), "closing the archive")
        try sink.zstd?.finish()
        return (sink.bytes, Hashing.hex(sink.hasher.finalize()))
    }

    private func writeHeader(name: String, size: Int64, mtime: time_t) throws {
        guard let entry = archive_entry_new() else { throw StoreOpsError(.failure, "libarchive: out of memory") }
        defer { archive_entry_free(entry) }
        archive_entry_set_pathname_utf8(entry, name)
        archive_entry_set_filetype(entry, ArchiveEntryRules.FileType.regular.rawValue)
        archive_entry_set_perm(entry, 0o600)
        archive_entry_set_size(entry, size)
        archive_entry_set_mtime(entry, mtime, 0)
        try check(archive_write_header(archive, entry), "adding \(name)")
    }

    private func writeData(_ chunk: UnsafeRawBufferPointer, name: String) throws {
        var offset = 0
        while offset < chunk.count {
            let n = archive_write_data(archive, chunk.baseAddress! + offset, chunk.count - offset)
            guard n > 0 else { try check(Int32(n == 0 ? ARCHIVE_FATAL : Int32(n)), "writing \(name)"); return }
            offset += n
        }
    }

    private func check(_ status: Int32, _ doing: String) throws {
        guard status < ARCHIVE_OK else { return }
        if status == ARCHIVE_WARN { return }
        if let error = sink.error { throw error }
        let message = archive_error_string(archive).map { String(cString: $0) } ?? "status \(status)"
        throw StoreOpsError(.failure, "libarchive: \(doing): \(message)")
    }
}
