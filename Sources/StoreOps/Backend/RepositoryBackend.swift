import Foundation

/// Where a format-2 repository's objects live: a local folder (`LocalBackend`) or an
/// S3-compatible bucket (`S3Backend`). Objects are named by keys such as `config`, `keys/<id>`,
/// `data/<xx>/<pack id>`, `index/<id>`, `snapshots/<id>`, `locks/<id>`, `verified/<id>.json`:
/// at most three `/`-separated segments, none starting with a dot.
///
/// The contract, which `BackendContractTests` checks on every implementation (a folder, a real
/// SeaweedFS, and SeaweedFS behind a proxy that cuts connections, loses answers and damages
/// bodies):
/// - **Whole and durable.** A write is whole and durable before it returns (local: temp name,
///   fsync, rename, fsync of the folder; S3: a PUT the server acknowledged, or a finished
///   multipart upload): an object exists complete or not at all, whatever kills the writer.
/// - **Immutable keys are never replaced.** Every key but `locks/…` and `verified/…`
///   (`isReplaceable`) is written once. Writing one that exists with the same bytes succeeds
///   and changes nothing (a retry, or a content-addressed object written twice); with other
///   bytes it fails with 65, "already exists with other content", and the object is unchanged.
///   Of concurrent writers of one absent immutable key with different bytes, exactly one
///   succeeds. Replaceable keys are replaced whole; concurrent writers leave one of them.
/// - **Missing objects.** `read(key)` and `size(key)` return nil; a ranged read throws 65
///   ("is missing"); `remove` succeeds.
/// - **Ranges.** `read(key, offset:, length:)` returns exactly `length` bytes or throws 65 when
///   the object ends first (a range partly or wholly past the end). A length of 0 returns no
///   bytes without asking the storage.
/// - **Listing.** `list(prefix)` takes a folder (`""` or a prefix ending in `/`) and returns
///   every object under it at any depth, with its size, sorted by key, gathering every page of
///   a paginated listing (74 when a server says there is more and does not say where).
/// - **Abandoned writes.** `removeAbandoned(alone:)` removes what writers that died left behind
///   (local: their temp files, any time; S3: unfinished multipart uploads, only when `alone`,
///   since a live writer's upload looks the same).
/// - **Errors.** 74 when the storage cannot be reached (after retries), 77 when access is
///   denied, 66 when the bucket or folder does not exist, 65 for damage.
public protocol RepositoryBackend: Sendable {
    /// How objects are named in messages (a folder path, an `s3://` URL).
    var location: String { get }
    /// The object, or nil when it does not exist.
    func read(_ key: String) throws -> Data?
    /// Exactly `length` bytes at `offset` of the object (65 when it is missing or shorter).
    func read(_ key: String, offset: UInt64, length: Int) throws -> Data
    /// The same bytes handed to `body`, in memory `buffer` keeps from one call to the next (a
    /// reader going through a pack's frames; the `Data` is valid only during the call). By
    /// default `read(key, offset:, length:)`.
    func withRange<R>(_ key: String, offset: UInt64, length: Int, reusing buffer: ReadBuffer, _ body: (Data) throws -> R) throws -> R
    /// The object's size, or nil when it does not exist.
    func size(_ key: String) throws -> UInt64?
    /// Writes the whole object durably (see the contract for a key that exists). `point`
    /// names the fault points of the steps.
    func write(_ key: String, _ data: Data, point: String) throws
    /// The first half of `write`: takes the bytes (local: into a temp file, so the caller's
    /// memory is free again); `StagedWrite.commit` makes the object durable and visible. The
    /// same fault points, in the same order, as `write`.
    func stage(_ key: String, _ data: Data, point: String) throws -> StagedWrite
    /// Removes the object (no error when it is already gone).
    func remove(_ key: String, point: String) throws
    /// Every object under the folder `prefix` (`""`, `index/`, `data/`), with its size, by key.
    func list(_ prefix: String) throws -> [(key: String, size: UInt64)]
    /// Makes the folders a new repository needs (local), or checks the bucket answers (S3).
    func prepare() throws
    /// Removes what dead writers left and returns what was removed: temp files (local, any
    /// time); unfinished uploads (S3, only when `alone`: no other live holder of the repository).
    func removeAbandoned(alone: Bool) throws -> [String]
    /// How many objects to move at once (local: 4, so that their fsyncs overlap; S3:
    /// `STORECTL_S3_PARALLEL`).
    var parallelTransfers: Int { get }
    /// How many readers a restore runs at once (local: 2, one per core; S3: `STORECTL_S3_PARALLEL`).
    var parallelReads: Int { get }
    /// How long the storage has answered nothing while requests wait for it (S3: since the
    /// attempts failed or in flight last saw an answer; 0 while it answers, however slowly);
    /// nil for storage that cannot tell (a folder: a write ends or fails, and how long it has
    /// taken is all there is to go by).
    var silentFor: TimeInterval? { get }
}

/// Which keys may be written again with other bytes: the lock records (refreshed) and the
/// last verification of each snapshot. Everything else is written once.
public enum RepositoryKeyRules {
    public static func isReplaceable(_ key: String) -> Bool { key.hasPrefix("locks/") || key.hasPrefix("verified/") }

    /// 65: an immutable key exists with other bytes.
    static func conflict(_ what: String) -> StoreOpsError {
        StoreOpsError(.badData, "\(what) already exists with other content; storectl never replaces an object of a repository",
                      hint: "two repositories may share this folder or prefix by mistake: check --repo")
    }
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
    public var silentFor: TimeInterval? { nil }

    /// By default the whole write happens at commit, holding the bytes until then (S3).
    public func stage(_ key: String, _ data: Data, point: String) throws -> StagedWrite {
        StagedWrite { try self.write(key, data, point: point) }
    }

    public func withRange<R>(_ key: String, offset: UInt64, length: Int, reusing buffer: ReadBuffer, _ body: (Data) throws -> R) throws -> R {
        try body(read(key, offset: offset, length: length))
    }

    /// The object's human name: `<location>/<key>`.
    func describe(_ key: String) -> String { "\(location)/\(key)" }
}

/// Memory one reader reuses for ranged reads (`RepositoryBackend.withRange`): grown to the
/// largest range asked for, never shrunk, freed with it. Not shared between threads.
public final class ReadBuffer {
    private(set) var memory = UnsafeMutableRawBufferPointer(start: nil, count: 0)

    public init() {}

    /// At least `count` bytes (their content undefined).
    func reserve(_ count: Int) -> UnsafeMutableRawBufferPointer {
        if memory.count < count {
            memory.deallocate()
            memory = UnsafeMutableRawBufferPointer.allocate(byteCount: count, alignment: 16)
        }
        return UnsafeMutableRawBufferPointer(rebasing: memory[0..<count])
    }

    deinit { memory.deallocate() }
}
