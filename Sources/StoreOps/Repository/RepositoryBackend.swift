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
    /// Removes the object (no error when it is already gone).
    func remove(_ key: String, point: String) throws
    /// Every object under `prefix` (e.g. `index/`, `data/`), with its size.
    func list(_ prefix: String) throws -> [(key: String, size: UInt64)]
    /// Makes the folders a new repository needs (local), or nothing.
    func prepare() throws
    /// Removes what dead writers left (local: temp files), returning what was removed.
    func removeStale() -> [String]
    /// How many objects to move at once (local: 1, in order; S3: `STORECTL_S3_PARALLEL`).
    var parallelTransfers: Int { get }
}

extension RepositoryBackend {
    public var parallelTransfers: Int { 1 }

    /// The object's human name: `<location>/<key>`.
    func describe(_ key: String) -> String { "\(location)/\(key)" }
}
