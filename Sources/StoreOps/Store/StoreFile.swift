import Foundation

/// A SQLite store on disk, validated as an input: it exists, is a regular readable file and starts
/// with the SQLite header. The paths of its `-wal`, `-shm` and `-journal` sidecars hang off it.
public struct StoreFile: Sendable, Hashable {
    /// Absolute path of the database file.
    public let path: String

    public var walPath: String { path + "-wal" }
    public var shmPath: String { path + "-shm" }
    public var journalPath: String { path + "-journal" }
    public var folder: String { FileSystem.parent(of: path) }
    public var name: String { FileSystem.name(of: path) }
    /// The name without its extension: "Tasks" for "Tasks.sqlite".
    public var stem: String { (name as NSString).deletingPathExtension }

    /// Core Data's support folder beside the store: `.<stem>_SUPPORT`.
    public var supportPath: String { Self.supportPath(forDatabase: path) }

    /// Core Data's external binary data folder: `.<stem>_SUPPORT/_EXTERNAL_DATA` beside the store.
    public var externalDataPath: String { (supportPath as NSString).appendingPathComponent(Self.externalDataFolderName) }

    /// The one place the support folder's name is built: `.<stem>_SUPPORT` beside `database`.
    /// A store storectl kept aside as `<store><suffix>` (a migration's failed state, a damaged or
    /// replaced store) keeps its folder as `.<stem><suffix>_SUPPORT`: that one when it is there and
    /// the plain name is not (a diff of the kept state read its attachments as removed).
    public static func supportPath(forDatabase database: String) -> String {
        let name = FileSystem.name(of: database), folder = FileSystem.parent(of: database) as NSString
        let plain = folder.appendingPathComponent(plainSupportName(name))
        // The leftmost of storectl's markers in the name: what precedes it is the store's name.
        let first = keptSuffixes.compactMap { name.range(of: $0) }.filter { $0.lowerBound > name.startIndex }.min { $0.lowerBound < $1.lowerBound }
        if let at = first, let kept = supportPath(folder.appendingPathComponent(plainSupportName(String(name[..<at.lowerBound]))), withSuffix: String(name[at.lowerBound...])),
           FileSystem.kind(of: kept) == .directory, FileSystem.kind(of: plain) == .missing {
            return kept
        }
        return plain
    }

    /// `.<stem>_SUPPORT` for a database named `name`, by its name alone.
    static func plainSupportName(_ name: String) -> String {
        ".\((name as NSString).deletingPathExtension)_SUPPORT"
    }

    public static let externalDataFolderName = "_EXTERNAL_DATA"

    /// `.<stem>_SUPPORT/_EXTERNAL_DATA`, relative to the database's folder (manifests record it so),
    /// by the name alone (no folder is looked at).
    public static func externalDataRelativePath(forDatabaseNamed name: String) -> String {
        "\(plainSupportName(FileSystem.name(of: name)))/\(externalDataFolderName)"
    }

    /// How storectl names a store it keeps aside: `<store>.failed-migration-<time>` and the like.
    static let keptSuffixes = [".failed-migration-", ".damaged-", ".orphaned-", ".replaced-"]

    /// `.<stem>_SUPPORT` kept beside a store under another name: `.<stem><suffix>_SUPPORT`.
    static func supportPath(_ path: String, withSuffix suffix: String) -> String? {
        let name = FileSystem.name(of: path)
        guard name.hasPrefix("."), name.hasSuffix("_SUPPORT") else { return nil }
        return (FileSystem.parent(of: path) as NSString).appendingPathComponent(String(name.dropLast("_SUPPORT".count)) + suffix + "_SUPPORT")
    }

    /// The sidecar file storectl's job lock lives in (never the database file itself).
    public var jobLockPath: String { path + ".storectl-lock" }

    /// Wraps a path without checking it (for outputs and for stores that may not exist yet).
    public init(unchecked path: String) {
        self.path = FileSystem.absolute(path)
    }

    /// Validates `path` as an existing SQLite store.
    ///
    /// - Throws: exit 66 when it is missing, a folder or unreadable; exit 65 when it is not a
    ///   SQLite database (wrong header) or is shorter than a header.
    public init(existing path: String) throws {
        self.init(unchecked: path)
        switch FileSystem.kind(of: self.path) {
        case .missing:
            throw StoreOpsError(.noInput, "\(self.path): no such file", hint: "check the store's path")
        case .directory:
            throw StoreOpsError(.noInput, "\(self.path) is a folder, not a SQLite store file",
                                hint: "pass the database file itself, e.g. \(self.path)/Store.sqlite")
        case .other:
            throw StoreOpsError(.noInput, "\(self.path) is not a regular file")
        case .file:
            break
        }
        let header = try FileProbe.shared.header(of: self.path)
        guard header.count >= 16 else {
            throw StoreOpsError(.badData, "\(self.path) is not a SQLite database (\(header.count) bytes, shorter than the 100-byte header)",
                                hint: "check that this is the store file and that it was copied completely")
        }
        guard header.prefix(16).elementsEqual(Array("SQLite format 3\0".utf8)) else {
            throw StoreOpsError(.badData, "\(self.path) is not a SQLite database (its header is not \"SQLite format 3\")",
                                hint: "check that this is the store file; an encrypted store cannot be read")
        }
        guard header.count >= 100 else {
            throw StoreOpsError(.badData, "\(self.path) is truncated: \(header.count) bytes, shorter than the 100-byte header",
                                hint: "restore the store from a backup")
        }
    }

    /// Page size from the header (bytes 16-17; 1 means 65536).
    public static func pageSize(fromHeader header: [UInt8]) -> Int {
        let raw = Int(header[16]) << 8 | Int(header[17])
        return raw == 1 ? 65536 : raw
    }

    /// When the file at `path` is shorter than its header says: the header's page count (valid when
    /// its version-valid-for number is the change counter) times its page size is more than the
    /// file holds, and there is no `-wal` that could hold the rest. nil otherwise.
    public static func shortfall(of path: String) -> (pages: UInt64, pageSize: Int, size: UInt64)? {
        guard let header = try? FileProbe.shared.header(of: path), header.count >= 100, let size = FileSystem.size(of: path),
              FileSystem.kind(of: path + "-wal") == .missing || FileSystem.size(of: path + "-wal") == 0 else { return nil }
        let pageSize = pageSize(fromHeader: header)
        let pages = header[24..<28] == header[92..<96] ? UInt64(WalFormat.be32(header, 28)) : 0
        guard pageSize > 0, pages * UInt64(pageSize) > size else { return nil }
        return (pages, pageSize, size)
    }

    /// True when the header's read/write versions say WAL (bytes 18 and 19 equal 2).
    public static func isWALHeader(_ header: [UInt8]) -> Bool {
        header.count >= 20 && header[18] == 2 && header[19] == 2
    }
}
