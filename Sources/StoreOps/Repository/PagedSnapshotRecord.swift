import Foundation

/// `snapshots/<id>`: a format-2 snapshot, sealed as `snapshot:<id>`. Written after every blob it
/// refers to is in a durable pack listed by a durable index: a listed snapshot is complete.
///
/// ```json
/// { "format": "storectl-snapshot", "version": 2,
///   "manifest": { …the manifest, as a format-1 snapshot's… },
///   "pages": { "pageSize", "pageCount", "chunkPages", "baseCount", "base": [ids],
///              "delta": id | null, "deltaCount", "digest" },
///   "files": [ { "path", "bytes", "sha256", "chunks": [ids] } ],
///   "parent": "<snapshot id>" | null,
///   "added": { "blobs", "rawBytes", "storedBytes" },
///   "interior": { "pages", "gaps" } (optional: `InteriorPages`) }
/// ```
public struct PagedSnapshotRecord: Sendable, Codable, Equatable {
    public var format = "storectl-snapshot"
    public var version = 2
    public var manifest: Manifest
    public var pages: PageMapRef
    public var files: [FileChunks]
    /// The snapshot whose map and blobs this one was made against (nil: made from scratch).
    public var parent: String?
    public var added: Added
    /// The store's state as its read began and ended (absent when a commit came in between, and
    /// in records made before it existed): the next snapshot of an unchanged store reuses this one.
    var source: SourceFingerprint?
    /// A milestone of `storectl replicate` (`PointMilestone`): the state of its chain at one
    /// point, made from the repository (its parent's map and a digest's pages), not from the store.
    public var milestone: Milestone?
    /// Its b-tree interior pages, for `storectl diff` (absent in records made before it existed
    /// and where it is not known: see `InteriorPages`).
    var interior: InteriorPages?

    public struct Milestone: Sendable, Codable, Equatable {
        /// The chain's id (its base's snapshot id).
        public var chain: String
        /// The point (commit number after the base) whose state this is.
        public var point: Int
        /// That commit's time, in milliseconds since 1970.
        public var time: Int64
    }

    public struct FileChunks: Sendable, Codable, Equatable {
        public var path: String
        public var bytes: UInt64
        public var sha256: String
        public var chunks: [ContentID]

        /// Its path below the external-data folder (`PagedSnapshotRecord.externalPath`).
        var externalPath: String? { PagedSnapshotRecord.externalPath(path) }
        /// The same, or its last name for a damaged record (which `checkRestorable` refuses).
        var externalKey: String { externalPath ?? FileSystem.name(of: path) }
    }

    /// What this snapshot added to the repository.
    public struct Added: Sendable, Codable, Equatable {
        public var blobs: Int
        /// Uncompressed bytes of the new blobs.
        public var rawBytes: UInt64
        /// Bytes of new packs and the index (the record itself aside).
        public var storedBytes: UInt64
    }

    public var id: String { manifest.snapshot?.id ?? "" }

    static func key(_ id: String) -> String { "snapshots/\(id)" }
    static func identity(_ id: String) -> String { "snapshot:\(id)" }

    /// Every blob the snapshot needs, besides its pages (map blobs and file chunks).
    var otherBlobs: [(ContentID, BlobType)] {
        pages.typedBlobs + files.flatMap { $0.chunks.map { ($0, .fileChunk) } }
    }

    func seal(_ sealer: Sealer) throws -> Data {
        try sealer.seal(try JSON.encode(self), as: Self.identity(id))
    }

    /// Opens and checks a record; 65 naming it when it is damaged, sealed under another name, or newer.
    static func open(_ sealed: Data, id: String, sealer: Sealer, location: String) throws -> PagedSnapshotRecord {
        let what = "snapshot record \(location)/\(key(id))"
        let plain = try sealer.open(sealed, as: identity(id), what: what)
        struct Header: Decodable { var format: String?; var version: Int? }
        guard let header = try? JSON.decoder().decode(Header.self, from: plain), header.format == "storectl-snapshot" else {
            throw StoreOpsError(.badData, "\(what) is not a snapshot record", hint: Sealer.damagedHint)
        }
        guard let version = header.version, version <= 2 else {
            throw StoreOpsError(.badData, "\(what) has version \(header.version ?? 0); this storectl reads up to 2", hint: "use a newer storectl")
        }
        let record: PagedSnapshotRecord
        do { record = try JSON.decoder().decode(PagedSnapshotRecord.self, from: plain) } catch {
            throw StoreOpsError(.badData, "\(what) is damaged (\(JSON.describe(error)))", hint: Sealer.damagedHint)
        }
        guard record.id == id, record.manifest.snapshot?.format == 2 else {
            throw StoreOpsError(.badData, "\(what) describes snapshot \(record.id), not \(id)", hint: Sealer.damagedHint)
        }
        try record.checkRestorable(what: what)
        return record
    }

    /// A store whose path has a control character (a tab, a newline) is not snapshotted: every
    /// record is refused where it is opened with one (list, show and prune print the path), so it
    /// is refused before anything is written (64), not recorded and then called damaged.
    public static func checkRecordable(path: String) throws {
        guard Manifest.hasControlCharacter(path) else { return }
        throw StoreOpsError(.usage, "the store's path \(path.debugDescription) has a control character, which a snapshot record may not hold (listings print it)",
                            hint: "rename the folder or file, or name the store through a symbolic link without one")
    }

    /// What restore refuses in a record before it reads any blob, checked where every record is
    /// opened: so `repo check` reports (and prune, verify, restore and a child snapshot all see) the
    /// same damage, never "ok" for a snapshot restore then refuses.
    func checkRestorable(what: String) throws {
        try manifest.checkFigures(what: what)
        try manifest.checkIdentity(id: id, what: what)
        for file in files where file.bytes > Manifest.maxBytes {
            throw StoreOpsError(.badData, "\(what): its file \(file.path.debugDescription) says \(file.bytes) bytes, out of range", hint: Sealer.damagedHint)
        }
        guard added.blobs >= 0, added.rawBytes <= Manifest.maxTotal, added.storedBytes <= Manifest.maxTotal else {
            throw StoreOpsError(.badData, "\(what): its added figures (\(added.blobs) blobs, \(added.rawBytes) and \(added.storedBytes) bytes) are out of range", hint: Sealer.damagedHint)
        }
        guard Self.isPageSize(pages.pageSize) else {
            throw StoreOpsError(.badData, "\(what): page size \(pages.pageSize) is not one SQLite uses (a power of two from 512 to 65536)",
                                hint: Sealer.damagedHint)
        }
        for file in files {
            guard file.externalPath != nil else {
                throw StoreOpsError(.badData, "\(what): refusing the external-data file name \(file.path.debugDescription)", hint: Sealer.damagedHint)
            }
        }
    }

    /// The external-data files by their path below the folder: (bytes, SHA-256).
    var externalFileSet: [String: (bytes: UInt64, sha256: String)] {
        Dictionary(files.map { ($0.externalKey, ($0.bytes, $0.sha256)) }, uniquingKeysWith: { a, _ in a })
    }

    /// A page size SQLite uses.
    static func isPageSize(_ size: Int) -> Bool { size >= 512 && size <= 65536 && size & (size - 1) == 0 }

    /// A name restore may create in the external-data folder.
    static func isExternalFileName(_ name: String) -> Bool { !name.isEmpty && name != "." && name != ".." && !name.contains("/") }

    /// Where a recorded external-data file goes: its path below the store's `_EXTERNAL_DATA`
    /// folder (`name`, or `sub/name` for a file in a subfolder), nil when a part of it is not a
    /// name (empty, `.`, `..`).
    static func externalPath(_ recorded: String) -> String? {
        let parts = recorded.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        let tail = parts.firstIndex(of: StoreFile.externalDataFolderName).map { parts[($0 + 1)...] } ?? parts.suffix(1)
        guard !tail.isEmpty, tail.allSatisfy(isExternalFileName) else { return nil }
        return tail.joined(separator: "/")
    }
}
