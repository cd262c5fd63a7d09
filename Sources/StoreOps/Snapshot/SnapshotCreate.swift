import Foundation
import Logging

/// `storectl snapshot create`: a consistent copy of a store, page by page, into a repository:
/// only the pages no earlier snapshot stored are added.
public enum SnapshotCreate {
    public struct Options: Sendable {
        public var repository: String
        public var tags: [String] = []
        /// zstd's level (1...19); nil for 3.
        public var level: Int?
        /// Seconds without progress on a locked store before giving up (exit 75).
        public var timeout: TimeInterval = 60
        /// Wait for another writer of the repository instead of exiting 75.
        public var wait = false
        /// Check free space first (tests turn it off to reach a real ENOSPC).
        public var checkFreeSpace = true
        /// The caller (a migration, a purge, a scheduled job) holds the store's job lock.
        public var storeLockHeld = false
        /// Where an encrypted repository's password comes from.
        public var password: PasswordSource = .resolve(file: nil)

        public init(repository: String, tags: [String] = [], level: Int? = nil,
                    timeout: TimeInterval = 60, wait: Bool = false, password: PasswordSource = .resolve(file: nil)) {
            self.repository = repository
            self.tags = tags
            self.level = level
            self.timeout = timeout
            self.wait = wait
            self.password = password
        }
    }

    public struct Result: Sendable, Codable {
        public var id: String
        /// The snapshot record's object key.
        public var archive: String
        public var record: Manifest
        /// The repository's format (always 2; kept in `--json`).
        public var format = PagedRepository.formatVersion
        /// Bytes added to the repository (new packs and index), and the parent.
        public var addedBytes: UInt64?
        public var parent: String?
        /// The packs this snapshot wrote (what a safety snapshot's check reads back).
        public var packsWritten: [String]?
        /// Temp files, dead writers' uploads and unindexed packs of interrupted runs removed first.
        public var removedStray: [String]
        /// How long each stage took (lock, preflight, copy, verify, commit).
        public var stages: [StageTiming] = []
        /// Nothing was committed to the store since the parent: its pages and check were reused,
        /// no page was read.
        public var unchanged = false
        /// Made from this point of `storectl replicate` (`<chain>@<n>`), the store's state when
        /// the snapshot was taken, not from the store: no page was read (`PointSnapshot`).
        public var point: String?
        /// The parent's Core Data store UUID when it is not this snapshot's: another store now
        /// lives at this path (the old one moved, or was made anew), and prune groups the two.
        public var parentStoreUUID: String?
    }

    static let logger = Logger(label: "storectl.snapshot")

    /// Creates a snapshot of `store` in an existing repository (`storectl repo init` makes one),
    /// walking the pipeline: lock (shared with backups and other snapshots, never beside a change
    /// of the store), preflight (the repository opened and locked), copy, verify, commit (the last
    /// pack and index, then the sealed record).
    ///
    /// ```swift
    /// let result = try SnapshotCreate.run(store: "/srv/app/Tasks.sqlite", options: .init(repository: "/snapshots", tags: ["nightly"]))
    /// ```
    ///
    /// - Throws: 75 when another writer holds the repository or a change holds the store, 74 when
    ///   there is no room, 65/66 for a bad store or repository, 64 for a bad tag or level, 77 for
    ///   a wrong password.
    public static func run(store path: String, options: Options, progress: ProgressHandler? = nil) throws -> Result {
        let level = try Compression.zstd.validatedLevel(options.level)
        try Validate.timeout(options.timeout)
        try validate(tags: options.tags)
        let store = try StoreFile(existing: path)
        let pipeline = Pipeline(operation: "snapshot create", store: store, progress: progress)
        var road = PlannedRoad<PagedSnapshotWork, PagedSnapshotWork>(
            lock: options.storeLockHeld ? .held : .shared, wait: options.wait, actName: "copy",
            preflight: { pipeline in try makeWork(store: store, in: try pipeline.repository, tags: options.tags, level: level) },
            act: { pipeline, work in
                try work.copy(timeout: options.timeout, checkFreeSpace: options.checkFreeSpace, progress: { pipeline.step($0) })
                return work
            })
        road.repository = .init(options.repository, password: options.password, exclusive: false, missing: .initHint)
        road.verify = { _, work in try work.check() }
        road.commit = { _, work in try work.commit() }
        road.abandon = { work in work.abandon() }
        let walked = pipeline.walk(road)
        var result = try walked.get().result()
        result.removedStray = pipeline.hold?.removedStray ?? []
        result.stages = walked.stages
        return result
    }

    static func validate(tags: [String]) throws {
        for tag in tags {
            let allowed = !tag.isEmpty && tag.count <= 64 && tag.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "._:-".contains($0)) }
            if !allowed {
                throw StoreOpsError(.usage, "tag \"\(tag)\": use 1 to 64 letters, digits, '.', '_', ':' or '-'")
            }
        }
    }

    static func makeWork(store: StoreFile, in repository: PagedRepository, tags: [String], level: Int?) throws -> PagedSnapshotWork {
        let work = PagedSnapshotWork(store: store, repository: repository, tags: tags, level: level)
        try work.prepare(records: try repository.catalog().records)
        return work
    }

    /// A safety snapshot taken in another road's snapshot stage (migrate, purge, a scheduled job):
    /// the store's lock and the repository's are that road's, taken in its lock stage; no road of
    /// its own is walked.
    /// With `fromPoint`, the store's newest point of `storectl replicate` is taken instead of
    /// reading the store when it provably is the store's state now (`PointSnapshot`; `point` in
    /// the result says so): then no page was read and no check of the store ran.
    static func inside(_ pipeline: Pipeline, tags: [String], level: Int?, fromPoint: Bool = false, progress: StepHandler?) throws -> Result {
        guard let store = pipeline.store, let hold = pipeline.hold else {
            throw StoreOpsError(.failure, "\(pipeline.operation): a safety snapshot needs the store and the repository locked")
        }
        try validate(tags: tags)
        var result = try create(store: store, in: hold, tags: tags, level: try Compression.zstd.validatedLevel(level),
                                timeout: 60, checkFreeSpace: true, fromPoint: fromPoint, progress: progress)
        result.removedStray = hold.removedStray
        return result
    }

    /// Creates the snapshot; the caller holds the repository (and the store's lock): a restore's
    /// safety snapshot.
    static func create(store: StoreFile, in hold: RepositoryHold, tags: [String], level: Int?,
                       timeout: TimeInterval, checkFreeSpace: Bool, fromPoint: Bool = false, writeLockHeld: Bool = false, progress: StepHandler?) throws -> Result {
        if fromPoint, !PointSnapshot.disabled, let made = PointSnapshot.make(store: store, in: hold, tags: tags, level: level, writeLockHeld: writeLockHeld) { return made }
        let work = try makeWork(store: store, in: hold.repository, tags: tags, level: level)
        do {
            try work.copy(timeout: timeout, checkFreeSpace: checkFreeSpace, progress: progress)
            try work.check()
            try work.commit()
        } catch {
            work.abandon()
            throw error
        }
        return try work.result()
    }
}
