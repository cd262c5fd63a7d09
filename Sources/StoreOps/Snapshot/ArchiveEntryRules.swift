import Foundation

/// What an entry of a snapshot archive may be. A pure function, so the rules are tested alone.
///
/// libarchive's secure-extraction flags (`ARCHIVE_EXTRACT_SECURE_SYMLINKS`, `_NODOTDOT`,
/// `_NOABSOLUTEPATHS`) guard `archive_write_disk`, which resolves entry names against the
/// process's working directory. storectl goes further: it never hands an entry's name to the file
/// system. Every entry is checked by these rules (the same three, plus hard links, device files
/// and anything the manifest does not list) before any of its data is read, and data is written
/// only to temporary paths storectl builds itself.
public enum ArchiveEntryRules {
    /// File-type bits of a tar header (the POSIX `S_IF*` values libarchive's `AE_IF*` use).
    public enum FileType: UInt32, Sendable {
        case regular = 0o100000
        case directory = 0o040000
        case symlink = 0o120000
        case characterDevice = 0o020000
        case blockDevice = 0o060000
        case fifo = 0o010000
        case socket = 0o140000
    }

    /// Why the entry must be refused, or nil when it is acceptable.
    public static func problem(name: String, fileType: UInt32, symlinkTarget: String?, hardlinkTarget: String?,
                               expected: Set<String>) -> String? {
        if name.isEmpty { return "an entry without a name" }
        if name.hasPrefix("/") { return "an absolute path: \(name)" }
        if name.contains("\0") || name.contains("\\") { return "a name with NUL or backslash: \(name.debugDescription)" }
        let components = name.split(separator: "/", omittingEmptySubsequences: false)
        if components.contains("..") { return "a path with '..': \(name)" }
        if let target = hardlinkTarget, !target.isEmpty { return "a hard link: \(name) -> \(target)" }
        if let target = symlinkTarget, !target.isEmpty { return "a symbolic link: \(name) -> \(target)" }
        switch FileType(rawValue: fileType) {
        case .regular: break
        case .symlink: return "a symbolic link: \(name)"
        case .characterDevice, .blockDevice: return "a device file: \(name)"
        case .fifo: return "a FIFO: \(name)"
        case .socket: return "a socket: \(name)"
        case .directory: return expected.contains(name) ? nil : "an unexpected folder: \(name)"
        case nil: return "an entry of unknown type \(String(fileType, radix: 8)): \(name)"
        }
        if !expected.contains(name) { return "a file the manifest does not list: \(name)" }
        return nil
    }
}
