import CLibArchive
import Foundation
import StoreOps

/// Builds tar archives entry by entry, hostile ones included, for the tests of verify and restore.
public enum ArchiveFixture {
    public enum Kind: Sendable {
        case file(Data)
        /// A regular file of this many zero bytes, written in chunks (a size bomb).
        case zeros(Int)
        case directory
        case symlink(String)
        case hardlink(String)
        case characterDevice
        case fifo
    }

    public struct Entry: Sendable {
        public var name: String
        public var kind: Kind
        public init(_ name: String, _ kind: Kind) {
            self.name = name
            self.kind = kind
        }
    }

    /// Writes `entries` in order to a gzip-compressed pax tar at `path`.
    public static func write(_ entries: [Entry], to path: String) throws {
        guard let archive = archive_write_new() else { throw StoreOpsError(.failure, "libarchive: out of memory") }
        defer { archive_write_free(archive) }
        archive_write_set_format_pax_restricted(archive)
        archive_write_add_filter_gzip(archive)
        guard archive_write_open_filename(archive, path) == ARCHIVE_OK else {
            throw StoreOpsError(.failure, "cannot write \(path)")
        }
        for item in entries {
            guard let entry = archive_entry_new() else { continue }
            defer { archive_entry_free(entry) }
            archive_entry_set_pathname(entry, item.name)
            archive_entry_set_perm(entry, 0o644)
            var data = Data()
            switch item.kind {
            case .file(let contents):
                archive_entry_set_filetype(entry, ArchiveEntryRules.FileType.regular.rawValue)
                archive_entry_set_size(entry, Int64(contents.count))
                data = contents
            case .zeros(let count):
                archive_entry_set_filetype(entry, ArchiveEntryRules.FileType.regular.rawValue)
                archive_entry_set_size(entry, Int64(count))
                guard archive_write_header(archive, entry) == ARCHIVE_OK else { throw StoreOpsError(.failure, "libarchive refused \(item.name)") }
                let chunk = [UInt8](repeating: 0, count: 1 << 20)
                var left = count
                while left > 0 {
                    let n = min(left, chunk.count)
                    _ = chunk.withUnsafeBytes { archive_write_data(archive, $0.baseAddress, n) }
                    left -= n
                }
                continue
            case .directory:
                archive_entry_set_filetype(entry, ArchiveEntryRules.FileType.directory.rawValue)
            case .symlink(let target):
                archive_entry_set_filetype(entry, ArchiveEntryRules.FileType.symlink.rawValue)
                archive_entry_set_symlink(entry, target)
            case .hardlink(let target):
                archive_entry_set_filetype(entry, ArchiveEntryRules.FileType.regular.rawValue)
                archive_entry_set_hardlink(entry, target)
            case .characterDevice:
                archive_entry_set_filetype(entry, ArchiveEntryRules.FileType.characterDevice.rawValue)
                archive_entry_set_rdev(entry, dev_t(0x0103))
            case .fifo:
                archive_entry_set_filetype(entry, ArchiveEntryRules.FileType.fifo.rawValue)
            }
            guard archive_write_header(archive, entry) == ARCHIVE_OK else {
                throw StoreOpsError(.failure, "libarchive refused \(item.name): \(String(cString: archive_error_string(archive)))")
            }
            if !data.isEmpty { _ = data.withUnsafeBytes { archive_write_data(archive, $0.baseAddress, $0.count) } }
        }
        archive_write_close(archive)
    }

    /// The entries of an archive with their contents (regular files only), in order.
    public static func read(_ path: String) throws -> [(name: String, data: Data)] {
        guard let archive = archive_read_new() else { throw StoreOpsError(.failure, "libarchive: out of memory") }
        defer { archive_read_free(archive) }
        archive_read_support_filter_all(archive)
        archive_read_support_format_all(archive)
        guard archive_read_open_filename(archive, path, 1 << 16) == ARCHIVE_OK else {
            throw StoreOpsError(.failure, "cannot read \(path)")
        }
        var result: [(String, Data)] = []
        var entry: OpaquePointer?
        while archive_read_next_header(archive, &entry) == ARCHIVE_OK {
            let name = String(cString: archive_entry_pathname(entry))
            var data = Data()
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            while true {
                let n = buffer.withUnsafeMutableBytes { archive_read_data(archive, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                data.append(contentsOf: buffer[0..<n])
            }
            result.append((name, data))
        }
        return result
    }
}
