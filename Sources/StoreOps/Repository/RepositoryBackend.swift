import Foundation

/// Where a format-2 repository's objects live: a local folder (`LocalBackend`) or an
/// S3-compatible bucket. Objects are named by keys such as `config`, `keys/<id>`,
/// `data/<xx>/<pack id>`, `index/<id>`, `snapshots/<id>`, `locks/<id>`.
///
/// Every write is whole and durable before it returns (local: temp name, fsync, rename, fsync
/// of the folder): an object exists complete or not at all.
public protocol RepositoryBackend: Sendable {
    /// How objects are named in messages (a folder path, an `s3://` URL).
    var location: String { get }
    /// The object, or nil when it does not exist.
    func read(_ key: String) throws -> Data?
    /// `length` bytes at `offset` of the object (exit 65 when the object is shorter).
    func read(_ key: String, offset: UInt64, length: Int) throws -> Data
    /// The object's size, or nil when it does not exist.
    func size(_ key: String) throws -> UInt64?
    /// Writes the whole object durably. `point` names the fault points of the steps.
    func write(_ key: String, _ data: Data, point: String) throws
    /// The first half of `write`: takes the bytes (local: into a temp file, so the caller's
    /// memory is free again); `StagedWrite.commit` makes the object durable and visible. The
    /// same fault points, in the same order, as `write`.
    func stage(_ key: String, _ data: Data, point: String) throws -> StagedWrite
    /// Removes the object (no error when it is already gone).
    func remove(_ key: String, point: String) throws
    /// Every object under `prefix` (e.g. `index/`, `data/`), with its size.
    func list(_ prefix: String) throws -> [(key: String, size: UInt64)]
    /// Makes the folders a new repository needs (local), or nothing.
    func prepare() throws
    /// Removes what dead writers left (local: temp files), returning what was removed.
    func removeStale() -> [String]
    /// How many objects to move at once (local: 4, so that their fsyncs overlap; S3:
    /// `STORECTL_S3_PARALLEL`).
    var parallelTransfers: Int { get }
    /// How many readers a restore runs at once (local: 2, one per core; S3: `STORECTL_S3_PARALLEL`).
    var parallelReads: Int { get }
}

/// An object taken by `RepositoryBackend.stage`, not yet durable or visible.
public struct StagedWrite {
    private let finish: () throws -> Void
    public init(commit: @escaping () throws -> Void) { finish = commit }
    /// Makes the object durable and visible (local: fsync, rename, fsync of the folder).
    public func commit() throws { try finish() }
}

extension RepositoryBackend {
    public var parallelTransfers: Int { 1 }
    public var parallelReads: Int { 2 }

    /// By default the whole write happens at commit, holding the bytes until then (S3).
    public func stage(_ key: String, _ data: Data, point: String) throws -> StagedWrite {
        StagedWrite { try self.write(key, data, point: point) }
    }

    /// The object's human name: `<location>/<key>`.
    func describe(_ key: String) -> String { "\(location)/\(key)" }
}
