import Foundation
import CStoreSupport
import Logging
import Synchronization

/// `storectl replicate`: follows stores' -wal files into a format-2 repository, so every commit
/// it sees is a point to restore (`snapshot restore --at`). See `WalFollower` for what it reads
/// and what it can prove, `PointSegment` for what it writes.
///
/// One loop: wake on a change in a store's folder (inotify) or every `pollInterval`; read what
/// each store committed; every `syncInterval`, write each store's new commits as one segment
/// (a point is durable once its segment is). A store whose continuity cannot be proven gets a new
/// base (an incremental snapshot: it costs what changed) and the gap is recorded; every
/// `baseInterval` a new base bounds what a restore reads. SIGINT/SIGTERM: read and write what is
/// left, mark each chain stopped, exit.
public enum Replicate {
    static let logger = Logger(label: "storectl.replicate")

    /// Where a base's scratch copy goes (`TMPDIR`), or nil to pack the base straight from its
    /// pinned read. A base read whole pins the store's state while every page is hashed (and, for
    /// a first base, compressed): 5.4 s for the 1.2 GiB bench store, its app's `-wal` growing
    /// from 4 to 41 MiB meanwhile. With a copy, the pin lasts as long as writing the pages to it.
    /// A copy is made only when it stays in the page cache (`PageSpill.fitsInPageCache`: never
    /// written, so it costs no disk; a larger one, written back, is not measured here) and
    /// `TMPDIR` has room; else streamed as before. `STORECTL_TEST_NO_SPILL=1` streams always.
    static func baseScratch(_ store: StoreFile) -> String? {
        guard ProcessInfo.processInfo.environment["STORECTL_TEST_NO_SPILL"] == nil else { return nil }
        let bytes = (FileSystem.size(of: store.path) ?? 0) + (FileSystem.size(of: store.walPath) ?? 0)
        let scratch = FileSystem.absolute(NSTemporaryDirectory())
        PageSpill.removeStale(in: scratch)   // copies of bases whose process was killed
        guard PageSpill.fitsInPageCache(bytes), PageSpill.fits(bytes, in: scratch) else { return nil }
        return scratch
    }

    public struct Options: Sendable {
        public var stores: [String]
        public var repository: String
        public var password: PasswordSource = .resolve(file: nil)
        public var syncInterval: TimeInterval = 1
        public var pollInterval: TimeInterval = 0.25
        public var baseInterval: TimeInterval = 3600
        /// A chain's durable segments are merged into one object once the oldest is this old (or
        /// they reach 16 MiB), so a restore reads few objects; 0: never.
        public var mergeInterval: TimeInterval = 60
        /// A digest after each merge, and over every ten digests (`PointDigest`), so a restore at
        /// a point reads few objects however long the chain; `STORECTL_TEST_NO_DIGESTS=1` (tests,
        /// benchmarks) writes none.
        public var digests = ProcessInfo.processInfo.environment["STORECTL_TEST_NO_DIGESTS"] != "1"
        /// A milestone (`PointMilestone`) after each digest of rank 2 (about ten minutes), so a
        /// restore replays at most that much on top of a snapshot; needs digests.
        public var milestones = true
        public var level: Int?
        /// A base packed from its scratch copy (no read held) does so on lanes in the idle class,
        /// so the app's commits never wait for a core behind them (`IOPace.politely`); false:
        /// full speed. (A base streamed from its read always runs at full speed: it holds the -wal.)
        public var pace = true
        /// The most -wal a read takes in at once (see `WalFollower.catchUpLimit`).
        public var catchUpLimit = 256 << 20
        /// How long the drain after a stop may take (systemd's default stop timeout is 30 s):
        /// what is not written by then is reported (exit 74), never claimed.
        /// `STORECTL_REPLICATE_DRAIN_SECONDS` sets it (tests).
        public var drainSeconds: TimeInterval = ProcessInfo.processInfo.environment["STORECTL_REPLICATE_DRAIN_SECONDS"].flatMap(Double.init) ?? 20
        /// While a store is idle (everything read is durable), an "alive" marker at most this often
        /// says the follower confirmed no commit came since its last point, so `restore --at` a
        /// time up to it is answered (past it: 66, as nothing confirmed it); 0: none.
        public var heartbeatInterval: TimeInterval = 60
        /// Stop after this long (`--for`); nil: until a signal.
        public var duration: TimeInterval?
        /// Rewritten (atomically) every sync interval and at the end: each store's figures, for
        /// `storectl replicate status --status FILE`.
        public var statusFile: String?
        /// The policy files the status file and metrics folder come from (for messages; nil: the
        /// command line's).
        public var outputsNamedIn: String?
        /// A folder of node_exporter's textfile collector: one `.prom` file per store, every sync.
        public var metricsFolder: String?
        /// Where the commits that wait for a repository that cannot be written go past
        /// `spoolMemory` (`CommitSpool`; nil: the system's temp folder, `TMPDIR`).
        public var spoolFolder: String?
        /// The most commits (their pages' bytes, in memory and in the spool file together) that
        /// wait; past it they are dropped and a gap recorded.
        public var spoolLimit = 1 << 30
        /// `spoolFolder`, or the system's temp folder, absolute.
        var resolvedSpoolFolder: String { FileSystem.absolute(spoolFolder ?? NSTemporaryDirectory()) }
        /// The waiting commits kept in memory before the oldest go to the spool file.
        /// `STORECTL_TEST_SPOOL_MEMORY_BYTES` sets it (tests).
        public var spoolMemory = ProcessInfo.processInfo.environment["STORECTL_TEST_SPOOL_MEMORY_BYTES"].flatMap(Int.init) ?? 64 << 20

        /// Each store's policy's JSON job log (`--policy` with `[schedule] log`), by store path:
        /// the CLI appends the run's line there when it stops (`ReplicateJobLog`).
        public var jobLogs: [String: JobLog] = [:]

        public struct JobLog: Sendable {
            public var path: String
            public var policy: String
            public var maxBytes: UInt64
            public var keep: Int
        }

        public init(stores: [String], repository: String) {
            self.stores = stores
            self.repository = repository
        }
    }

    public struct Gap: Codable, Sendable, Equatable {
        public var at: Date
        public var reason: String
    }

    public struct StoreSummary: Codable, Sendable {
        public var store: String
        public var chain: String?
        /// Points made durable by this run.
        public var points = 0
        public var segments = 0
        public var bases: [String] = []
        public var gaps: [Gap] = []
        public var uploadedBytes: UInt64 = 0
        public var requests = 0
        /// Bytes of waiting commits in the spool file now (`CommitSpool`), and the most this run
        /// (both nil while nothing went to it).
        public var spooledBytes: Int?
        public var spooledPeakBytes: Int?
        /// Points kept in the outbox (`SegmentOutbox`: the repository did not take them), now and
        /// the most this run (nil while nothing went there), and those an earlier run kept that
        /// this one wrote at its start.
        public var keptPoints: Int?
        public var keptPeakPoints: Int?
        public var keptSent: Int?
        public var lastDurable: Date?
        /// Seconds from seeing a commit to its segment being durable: the largest, and the 99th percentile.
        public var maxLagSeconds: Double = 0
        public var p99LagSeconds: Double = 0
        public var resumed = false
        /// External-data files recorded with the points (appeared, went).
        public var filesAdded = 0
        public var filesRemoved = 0
        /// External-data names seen but not carried (too large, unreadable, a folder).
        public var filesNotCarried = 0
        /// Merged objects and digests written (on their own thread; their bytes and requests are
        /// counted in `uploadedBytes` and `requests`).
        public var merges = 0
        public var digests = 0
        /// Milestones written (`PointMilestone`), on the merge thread too.
        public var milestones = 0
        /// Commits read and not durable yet (while following: waiting for the next write or a
        /// retry; at the end: never written, so no point holds them).
        public var waiting: Int?
        /// The last failure to write points, while it lasts (nil once a write succeeds).
        public var lastError: String?
        /// Commits were dropped (`dropWaiting`: more waited than the spool limit, the spool file
        /// could not take them, kept points were lost): why, until the new base that records the
        /// gap is in, so an operator learns of the gap while the outage lasts, not once it is over.
        public var gapPending: String?
        /// Why no chain follows the store (its first base failed, and is retried), while it lasts:
        /// none of its commits is protected. At the end of a run, the command fails with it.
        public var notFollowed: String?
        /// The exit status that failure maps to (65 a damaged store, 75 a busy one, …); 0 when the
        /// run was stopped (SIGTERM, SIGINT) while the first base was made: said, not a failure.
        public var notFollowedStatus: Int32?
        /// The chain broke (a gap, a -wal truncated before its last commit was read) and the base
        /// that would take it up again could not be made (the repository failing): since when
        /// nothing the app commits is protected, why, and the base's failure; until a base is in,
        /// and in the stopped run's file (a trial: status said "0 gaps" and exited 0 throughout).
        public var notProtected: String?
    }

    public struct Summary: Codable, Sendable {
        public var repository: String
        public var stores: [StoreSummary]
        public var stoppedBy: String
        /// Commits read but never written (every store's), when it stopped: points end before them.
        public var unwritten: Int { state == "stopped" ? stores.reduce(0) { $0 + ($1.waiting ?? 0) } : 0 }
        /// Points kept in the outbox and not written to the repository (every store's), when it
        /// stopped: the next run writes them first.
        public var kept: Int { state == "stopped" ? stores.reduce(0) { $0 + ($1.keptPoints ?? 0) } : 0 }
        /// While following: "following"; at the end: "stopped".
        public var state = "stopped"
        /// The repository's id (its follow locks are named after it): `replicate status` tells a
        /// follower that is gone without reading the repository.
        public var repositoryID: String?
        public var pid = getpid()
        public var updatedAt = Date()
    }

    /// Follows until a signal (or `duration`).
    ///
    /// - Throws: 66 no store or repository, 65 a store that is not in WAL mode or a damaged
    ///   repository, 77 wrong password. Failures while following are retried (and counted) rather
    ///   than thrown: the loop keeps the stores it can.
    public static func run(_ options: Options, events: (@Sendable (String) -> Void)? = nil) throws -> Summary {
        guard options.syncInterval >= 0.05, options.syncInterval <= 3600 else {
            throw StoreOpsError(.usage, "--sync-interval must be between 0.05 s and 1 h")
        }
        // A spool this small drops commits beside a healthy repository (what one sync's uploads
        // take to answer), a gap each time, blamed on the repository (a trial: 11 in 55 s at 100 KiB).
        guard options.spoolLimit >= Self.minimumSpoolLimit else {
            throw StoreOpsError(.usage, "\(options.outputsNamedIn.map { "[replicate] spool_limit (\($0))" } ?? "--spool-limit") \(Format.bytes(UInt64(max(0, options.spoolLimit)))) is below \(Format.bytes(UInt64(Self.minimumSpoolLimit))): "
                                + "the commits of one sync waiting for a repository that answers would be dropped, a gap each time",
                                hint: "leave it out (1 GiB), or give at least \(Format.bytes(UInt64(Self.minimumSpoolLimit)))")
        }
        guard !options.stores.isEmpty else { throw StoreOpsError(.usage, "name at least one store to follow") }
        _ = try PageSpill.setting()   // a base's scratch copy: a misspelt setting is said, not ignored
        // A signal starts a drain (what was read is written, by `finishBy`), not an abort.
        ProcessSignals.drains = true
        defer { ProcessSignals.drains = false }
        var replicas: [Replica] = []
        for path in options.stores {
            let store = try StoreFile(existing: path)
            try PagedSnapshotRecord.checkRecordable(path: store.path)
            guard StoreFile.isWALHeader(try FileProbe.shared.header(of: store.path)) else {
                throw StoreOpsError(.badData, "\(store.path) is not in WAL mode: storectl replicate follows a store's -wal",
                                    hint: "switch it with `PRAGMA journal_mode=WAL` (the app's next open keeps it), or take scheduled snapshots instead")
            }
            guard !replicas.contains(where: { $0.store.path.isExactly(store.path) }) else { continue }
            // The one-follower lock and the -wal are found by this name: a follower of another
            // name of the same file (a hard link) is not seen by it, nor does it see the -wal
            // of an app that opens that other name.
            var file = stat()
            if stat(store.path, &file) == 0, file.st_nlink > 1 {
                logger.warning("the store file has \(file.st_nlink) hard links: this follows the -wal of \(store.path) and is one follower only under this name; every process must open the store by one name",
                               metadata: ["store": "\(store.path)"])
            }
            let replica = Replica(store: store)
            replica.follower.catchUpLimit = ReplicateTesting.catchUpLimit ?? options.catchUpLimit
            replicas.append(replica)
        }
        try checkOutputs(options)
        // A spool file named for a moment (file systems without O_TMPFILE) by a follower killed then.
        _ = PendingFile.removeStale(in: options.resolvedSpoolFolder, prefix: "storectl-replicate-spool")
        let repository = try PagedRepository.open(at: options.repository, password: options.password, missing: .initHint)
        // One follower per store and repository: a second one would write the same chain's
        // points under the same names as the first (seen by a user: "already exists with other
        // content", and points the first reported written listed as not followed).
        var locks: [JobLock] = []
        for replica in replicas {
            let path = followLockPath(store: replica.store.path, repository: repository.config.id)
            do {
                locks.append(try JobLock.acquire(path: path, job: "replicate into \(repository.location)"))
            } catch is JobLock.Busy {
                let holder = JobLock.currentHolder(path: path)
                throw StoreOpsError(.busy, "\(replica.store.path) is already followed into \(repository.location)"
                                    + (holder.map { " by pid \($0.pid) since \(Timestamp.iso($0.since))" } ?? ""),
                                    hint: "stop that replicate first (SIGTERM), or follow the store into another repository; the lock is \(path)")
            }
        }
        let loop = try Loop(options: options, repository: repository, replicas: replicas, events: events)
        return try withExtendedLifetime(locks) { try loop.run() }
    }

    /// The smallest `spoolLimit` taken (`STORECTL_TEST_MIN_SPOOL_LIMIT` lowers it: a test of
    /// what a limit outgrown does).
    static let minimumSpoolLimit = ProcessInfo.processInfo.environment["STORECTL_TEST_MIN_SPOOL_LIMIT"].flatMap(Int.init) ?? 16 << 20

    /// The lock a follower holds on a store for one repository: an flock on a sidecar beside the
    /// store (never the database), named after the repository's id, so a store can be followed
    /// into two repositories by two processes, never into one by two.
    static func followLockPath(store: String, repository id: String) -> String {
        "\(store).storectl-replicate-\(id.prefix(12))"
    }

    /// The status file and the metrics folder, checked before anything is followed (a bad one
    /// was a warning every second before): the status file's folder exists, and the file itself is
    /// missing or a status file of a replicate (anything else, the store itself included, is
    /// never overwritten); the metrics folder exists and is writable.
    static func checkOutputs(_ options: Options) throws {
        if let file = options.statusFile {
            let path = FileSystem.absolute(file)
            let folder = FileSystem.parent(of: path)
            let named = options.outputsNamedIn.map { "[replicate] status_file \(file) (\($0))" } ?? "--status-file \(file)"
            guard FileSystem.kind(of: folder) == .directory, access(folder, W_OK) == 0 else {
                throw StoreOpsError(.cannotCreate, "\(named): the folder \(folder) does not exist or is not writable",
                                    hint: "create it (mkdir -p \(folder)) or name a file in another folder")
            }
            switch FileSystem.kind(of: path) {
            case .missing: break
            case .file:
                let data = FileManager.default.contents(atPath: path) ?? Data()
                guard (try? JSON.decoder().decode(Summary.self, from: data)) != nil else {
                    throw StoreOpsError(.cannotCreate, "\(named): the file exists and is not a status file of storectl replicate; it is left alone",
                                        hint: "name a new file (for example \(FileSystem.name(of: path)).status.json), or remove this one if it is yours")
                }
            default:
                throw StoreOpsError(.cannotCreate, "\(named) is a folder or a special file", hint: "name a file")
            }
            if options.stores.contains(where: { FileSystem.absolute($0) == path }) {
                throw StoreOpsError(.usage, "\(named) is a store being followed")
            }
            // A run killed between writing the file and renaming it left its temporary.
            PendingFile.removeStale(in: folder, prefix: FileSystem.name(of: path))
        }
        if let folder = options.metricsFolder {
            guard FileSystem.kind(of: folder) == .directory, access(folder, W_OK) == 0 else {
                throw StoreOpsError(.cannotCreate, "\(options.outputsNamedIn.map { "the metrics folder \(folder) (\($0))" } ?? "--metrics \(folder)"): not a writable folder",
                                    hint: "create it (mkdir -p \(folder)), the folder node_exporter's --collector.textfile.directory names")
            }
            for store in options.stores {
                PendingFile.removeStale(in: folder, prefix: FileSystem.name(of: ReplicateMetrics.file(folder: folder, store: FileSystem.absolute(store))))
            }
        }
        if let folder = options.spoolFolder {
            guard FileSystem.kind(of: folder) == .directory, access(folder, W_OK) == 0 else {
                throw StoreOpsError(.cannotCreate, "\(options.outputsNamedIn.map { "[replicate] spool \(folder) (\($0))" } ?? "--spool \(folder)"): not a writable folder",
                                    hint: "create it (mkdir -p \(folder)) on a volume with room for --spool-limit of waiting commits")
            }
        }
    }

    // MARK: - One store

    final class Replica: @unchecked Sendable {
        let store: StoreFile
        let host = ProcessInfo.processInfo.hostName
        let key: String
        let follower: WalFollower
        var chain: String?
        var baseTime = Date()
        /// The next point number of the chain.
        var next = 1
        /// Commits read and not yet durable, each with the cursor after the read that found it;
        /// `spooled`: its pages are in the spool file, not in `pages`.
        var pending: [Waiting] = []
        /// The waiting commits' pages past the memory bound (`CommitSpool`), made at first need.
        var spool: CommitSpool?
        /// The bytes of the pending commits' pages in the spool file (`pendingBytes`: in memory).
        var spooledBytes = 0
        /// Sealed segments the repository did not take, kept in the outbox (`SegmentOutbox`),
        /// oldest first: they go out before anything else (their points are numbered).
        var parked: [Parked] = []
        var parkedBytes: Int { parked.reduce(0) { $0 + $1.bytes } }
        var parkedPoints: Int { parked.reduce(0) { $0 + $1.name.to - $1.name.from + 1 } }
        /// Why keeping in the outbox last failed (said once until it is different or keeping works).
        var outboxFailure: String?
        /// Why making a base last failed, and how many tries failed in a row (said once until it
        /// is different; the base that works says how many tries it took).
        var baseFailure: (cause: String, tries: Int)?
        /// The segments an earlier run kept could not be written at the start (`start`): why (said
        /// once until it is different), and how many tries failed. Until they are written the
        /// store is not followed (its next points are numbered after them); the run's other
        /// stores are. Tried again, backing off up to 30 s.
        var outboxStart: (cause: String, tries: Int)?
        /// Its start (`sendOutbox`) runs on the `starts` thread: the main loop leaves it alone.
        var starting = false
        /// The run stopped while its start wrote them (the rest stay kept for the next run).
        var startStopped = false
        /// The kept segment being written (its sealed bytes, offered to the merge once durable).
        var sendingParked: Data?
        /// The newest point's time in this chain (ms): times never go back within a chain, even
        /// when the clock does.
        var lastTime: Int64 = 0
        var pendingBytes = 0
        /// Commits read from the store by this run (the main loop's way to know a read found one).
        var commitsRead = 0
        var pendingCursor: WalCursor?
        var seenAt: [Date] = []
        var lags: [Double] = []
        var lastDurableTime: Int64?
        /// The time (ms) of the last read that proved every commit before it is a point of the
        /// chain (durable, or waiting in `pending`): how far a clean stop says the chain covers.
        /// A commit made after it was not read, so it is never claimed (a stop marker at the time
        /// of the stop claimed the commits between the last read and the stop: seen by a user).
        var confirmedTime: Int64?
        /// The process's stops (SIGCONT received) and the machine's time suspended, as this
        /// store's reads last saw them (`stalled`).
        var pauses = Pauses.now
        var needsBase: (kind: String, reason: String, change: UInt32?)? = ("start", "storectl began following the store", nil)
        /// The first read that found the commit a continued base is to stand for (see `.wholeRead`).
        var wholeReadAt: Date?
        /// The confirmed time (ms) the last alive marker named (`heartbeat`), and the chain's
        /// alive markers in the repository (the upload thread's: the newest stays).
        var lastHeartbeat: Int64 = 0
        let aliveKeys = Mutex<[String]>([])
        /// The batch the uploader is writing.
        /// `putBack`: the batch as it goes back in front of `pending` if the write fails (its
        /// spooled commits still in the spool file); `bytes`/`spooled`: its share of the bounds.
        /// `parkable`: kept in the outbox if its write fails (not a base's catch-up, which is
        /// written whole or not at all).
        var inFlight: (batch: [Waiting], putBack: [Waiting], seen: [Date], from: Int, to: Int, bytes: Int, spooled: Int,
                       name: SegmentName, sealed: Data, segment: PointSegment, parkable: Bool)?
        /// When the batch in flight was handed to the uploader (see `keepBehindHungWrite`).
        var inFlightSince = Date.distantPast
        /// Whether a spool reference is kept anywhere (the spool file may be emptied when not).
        var refersToSpool: Bool { spooledBytes > 0 || inFlight?.putBack.contains { $0.spooled != nil } == true }
        /// Durable level-0 segments of the chain not merged yet (as sealed), consecutive, oldest first.
        var mergeable: [(name: SegmentName, sealed: Data)] = []
        var mergeableBytes = 0
        /// What the held segments' commits leave (`PointDigest`), written after their merge.
        var digest: PointDigest.Builder?
        var uploading = false
        var uploadFailures = 0
        var uploadRetryAfter = Date.distantPast
        /// A new base every interval is not tried before this: its last try could not get the old
        /// chain's commits written in time (a server that stopped answering).
        var baseNotBefore = Date.distantPast
        var summary: StoreSummary
        var retryAfter = Date.distantPast
        /// The store's external-data folder as last recorded (nil until the chain's base or a
        /// resume says what the repository holds).
        var external: ExternalFolderWatch?
        /// A read transaction opened inside a base's pinned read and held until the next capture
        /// has read what the app committed meanwhile (the base's commit and upload take seconds).
        /// While a reader holds a read mark the app's checkpoints cannot restart the -wal, so
        /// those commits cannot be checkpointed away unread: without it, an hour of a writer
        /// committing every 2 ms lost 656 commits to a gap at the hourly base. (When the -wal
        /// was wholly checkpointed, SQLite gives the reader no mark; then nothing was unread.)
        var boundaryHold: ReadHold?

        init(store: StoreFile) {
            self.store = store
            key = PointSegment.storeKey(host: host, path: store.path)
            follower = WalFollower(store: store)
            summary = StoreSummary(store: store.path)
        }

        /// The follower's identities and confirmed state as they stood when the reads beside a
        /// base began: the catch-up's segments are made then, on the base's thread, while the
        /// reading thread's captures change the follower's own.
        var followerFacts: (identities: (database: (dev: UInt64, ino: UInt64)?, wal: (dev: UInt64, ino: UInt64)?),
                            confirmed: (cursor: WalCursor, state: DatabaseFileState)?)?

        func segment(level: Int, from: Int, to: Int, cursor: WalCursor, commits: [PointSegment.Commit]) -> PointSegment {
            let ids = followerFacts?.identities ?? follower.identities
            let confirmedState = followerFacts.map { $0.confirmed } ?? follower.confirmedState
            var segment = PointSegment(host: host, path: store.path, chain: chain ?? "", level: level, from: from, to: to, pageSize: cursor.pageSize,
                                       cursor: cursor, databaseIdentity: ids.database.map { [$0.dev, $0.ino] },
                                       walIdentity: ids.wal.map { [$0.dev, $0.ino] }, commits: commits, opening: nil, closed: nil, baseTime: nil)
            if external != nil, level < PointTimeline.stoppedLevel { segment.externalData = true }
            if let confirmed = confirmedState, confirmed.cursor.samePosition(as: cursor) { segment.databaseState = confirmed.state.recorded }
            return segment
        }
    }

    static func ms(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

    // MARK: - The loop

    /// A segment kept in the outbox (see `Replica.parked`); `seen`: when its commits were read.
    struct Parked {
        var name: SegmentName
        var path: String
        var bytes: Int
        var seen: [Date]
    }

    /// A commit read and not yet durable (see `Replica.pending`).
    typealias Waiting = (commit: PointSegment.Commit, pages: [[UInt8]], cursor: WalCursor, spooled: CommitSpool.Ref?)

    /// The page bytes of waiting commits, held in memory and in the spool file.
    static func held(_ entries: some Sequence<Waiting>) -> (memory: Int, spooled: Int) {
        entries.reduce(into: (memory: 0, spooled: 0)) { total, entry in
            if let ref = entry.spooled { total.spooled += ref.bytes } else { total.memory += entry.pages.reduce(0) { $0 + $1.count } }
        }
    }

    final class Loop: @unchecked Sendable {
        let options: Options
        let repository: PagedRepository
        let replicas: [Replica]
        let events: (@Sendable (String) -> Void)?
        let zstd: ZstdFrames
        /// Commits held for a repository that cannot be written to (in memory and the spool
        /// file), before a gap is recorded instead.
        var spoolLimit: Int { options.spoolLimit }
        /// The most page bytes one segment takes from what waits (at least one read's commits):
        /// a backlog goes out a segment at a time, read back from the spool as it goes.
        /// `STORECTL_TEST_SEGMENT_BYTES` sets it (tests).
        static let segmentBytes = ProcessInfo.processInfo.environment["STORECTL_TEST_SEGMENT_BYTES"].flatMap(Int.init) ?? 16 << 20
        /// The most commits left waiting when a base every interval begins (they are written with
        /// its catch-up: beside a base streamed from its read, while the app's checkpoints are held back).
        static let catchUpBytes = min(segmentBytes, 4 << 20)
        /// The least time between two reads of a store's new commits: an app committing every few
        /// milliseconds is read in batches, not at every commit (each read is a read transaction,
        /// the wal-index and the files' states; at 500 commits a second that was most of the
        /// follower's CPU: 15-17% of a core at 0 ms, 6-7% at 20 ms, the writer's p99 the same).
        /// A commit after a quiet spell is still read at once. `STORECTL_TEST_CAPTURE_SPACING_MS`.
        /// Every segment through the outbox (kept, then written, then removed): the crash tests' way to reach its fault points.
        static let parkAlways = ProcessInfo.processInfo.environment["STORECTL_TEST_OUTBOX_ALWAYS"] == "1"
        /// Segments the repository did not take (`SegmentOutbox`).
        let outbox: SegmentOutbox
        /// The first and last waits before reading again after a change that showed no commit.
        static let settleFirst: TimeInterval = 0.005
        static let settleLast: TimeInterval = 0.160
        /// The wait before the next read after one that `found` commits or not, woken by a change
        /// (`woke`) or not: none after commits, or a quiet spell; else 5, 10, 20 … 160 ms, then none.
        static func settle(after settle: TimeInterval?, found: Bool, woke: Bool) -> TimeInterval? {
            guard !found, woke || settle != nil else { return nil }
            let next = settle.map { $0 * 2 } ?? settleFirst
            return next > settleLast ? nil : next
        }
        static let captureSpacing: TimeInterval = ProcessInfo.processInfo.environment["STORECTL_TEST_CAPTURE_SPACING_MS"].flatMap(Double.init).map { $0 / 1000 } ?? 0.020
        let uploads = DispatchQueue(label: "storectl.replicate.upload")
        /// Merges run on their own thread: a point's upload never waits for one.
        let merges = DispatchQueue(label: "storectl.replicate.merge")
        /// The merge thread's own compressor (digests are sealed there).
        let mergeZstd: ZstdFrames
        let completed = Mutex<[(Replica, Result<Int, any Error>)]>([])
        /// Stores' starts that write what an earlier run kept (`start`), and what they did.
        let starts = DispatchQueue(label: "storectl.replicate.start")
        let startsDone = Mutex<[(Replica, OutboxSent)]>([])
        /// The run is stopping (a start's writing of kept segments ends between two).
        let stopping = Atomic<Bool>(false)
        /// How long a write of points may take before what the app commits meanwhile is kept in
        /// the outbox behind it (`keepBehindHungWrite`): two sync intervals, at least 1 s.
        var keepBehindAfter: TimeInterval { max(1, 2 * options.syncInterval) }
        /// `STORECTL_TEST_OUTBOX_SEND_DELAY_MS`: a pause before each kept segment a start writes
        /// (tests: a long backlog going out while the run's other stores are followed).
        static let outboxSendDelay = ProcessInfo.processInfo.environment["STORECTL_TEST_OUTBOX_SEND_DELAY_MS"].flatMap(UInt32.init).map { $0 * 1000 }
        /// What the merge thread wrote, per store key: merges, digests, bytes, requests.
        let background = Mutex<[String: (merges: Int, digests: Int, milestones: Int, bytes: UInt64, requests: Int)]>([:])

        func count(_ store: String, merges: Int = 0, digests: Int = 0, milestones: Int = 0, bytes: Int, requests: Int) {
            background.withLock { all in
                var entry = all[store] ?? (0, 0, 0, 0, 0)
                entry.merges += merges
                entry.digests += digests
                entry.milestones += milestones
                entry.bytes += UInt64(bytes)
                entry.requests += requests
                all[store] = entry
            }
        }

        init(options: Options, repository: PagedRepository, replicas: [Replica], events: (@Sendable (String) -> Void)?) throws {
            self.options = options
            self.repository = repository
            self.replicas = replicas
            self.events = events
            zstd = try ZstdFrames(level: 3)
            mergeZstd = try ZstdFrames(level: 3)
            outbox = SegmentOutbox(spoolFolder: options.resolvedSpoolFolder, repositoryID: repository.config.id)
        }

        func say(_ text: String) {
            Replicate.logger.info("\(text)")
            events?(text)
        }

        func run() throws -> Summary {
            for replica in replicas { start(replica) }
            // Folders and names by their bytes (two folders whose names differ in Unicode form only
            // are two folders).
            var folders: [String: String] = [:]
            for replica in replicas { let folder = FileSystem.parent(of: replica.store.path); folders[folder.exactKey] = folder }
            let watcher = FolderWatcher(folders: Array(folders.values))
            let databaseNames = Set(replicas.map { FileSystem.name(of: $0.store.path) })
            let started = Date()
            var nextSync = Date().addingTimeInterval(options.syncInterval)
            var stoppedBy = "duration"
            // A change in a store's folder that the read after it did not find as a commit: the
            // app writes its -wal frames, then syncs them, and only then publishes the commit in
            // the wal-index (which no inotify event shows). Read again after the capture pause
            // and 5 ms more, then 10, 20 … up to 160 ms, not a whole poll interval later: a
            // trial's points were dated 270 ms after their commits (the read at the wake and the
            // one after the 20 ms pause found nothing, then a 250 ms poll).
            var woke = false
            var settle: TimeInterval?
            while true {
                if let signal = ProcessSignals.received {
                    stoppedBy = signal == SIGTERM ? "SIGTERM" : "SIGINT"
                    break
                }
                if let duration = options.duration, Date().timeIntervalSince(started) >= duration { break }
                let began = Date()
                settleUploads()
                settleStarts()
                let before = replicas.map(\.commitsRead)
                for replica in replicas { step(replica) }
                settle = Self.settle(after: settle, found: zip(before, replicas).contains(where: { $0 != $1.commitsRead }), woke: woke)
                // A backlog (the repository answers again) goes out a segment after another, not
                // one a sync interval.
                for replica in replicas where !replica.uploading && (replica.spooledBytes > 0 || replica.pendingBytes >= Self.segmentBytes
                                                                     || (!replica.parked.isEmpty && Date() >= replica.uploadRetryAfter)) {
                    flush(replica)
                }
                if Date() >= nextSync {
                    for replica in replicas {
                        flush(replica)
                        merge(replica, now: false)
                        heartbeat(replica)
                    }
                    report(state: "following", stoppedBy: "")
                    nextSync = Date().addingTimeInterval(options.syncInterval)
                }
                // At most one read every `captureSpacing`: an app committing every millisecond is
                // read in batches, not at every commit. Unless a database file is written meanwhile:
                // that is a checkpoint copying frames into it, after which the app may truncate or
                // restart its -wal; read at once, as before the spacing, so the frames are read first.
                let spent = Date().timeIntervalSince(began)
                var changed = false
                if spent < Self.captureSpacing {
                    changed = watcher.pause(seconds: Self.captureSpacing - spent, unlessWritten: databaseNames)
                }
                // Until the next poll or sync, and no later than the end of `--for` (a run of
                // 100 ms lasted a whole poll interval, 250 ms).
                var wait = min(options.pollInterval, nextSync.timeIntervalSinceNow)
                if let settle { wait = min(wait, settle) }
                if let duration = options.duration { wait = min(wait, duration - Date().timeIntervalSince(started)) }
                woke = changed ? true : watcher.wait(seconds: max(0.001, wait))
            }
            // Drain: what was committed up to now, written; each chain marked stopped. Bounded
            // (systemd's stop timeout is 30 s by default): requests retry until then, no later.
            // A signal ends a start's backlog between two segments; the end of `--for` does not
            // (what an earlier run kept goes out, and the store is taken up, as before).
            if stoppedBy != "duration" { stopping.store(true, ordering: .relaxed) }
            ProcessSignals.acknowledge()
            ProcessSignals.finishBy = Date().addingTimeInterval(options.drainSeconds)
            defer { ProcessSignals.finishBy = nil }
            // The stores not starting are drained first (one kept segment over a slow link could
            // use the drain's time); then the starts are waited for, and a store a start took up
            // is drained in turn.
            func drain(_ replica: Replica) {
                if replica.needsBase == nil {
                    // The stop marker records the database file's state for the next run to
                    // compare (`DatabaseFileState`): a file written in the clock's present tick
                    // could not tell a later write apart, so the last read waits for the next one.
                    replica.follower.waitForDistinctTimes()
                    capture(replica)
                }
                flushAll(replica)
                keepWaiting(replica)
                merge(replica, now: true)
                if replica.pending.isEmpty, replica.chain != nil, let cursor = replica.follower.cursor {
                    let now = Replicate.ms(Date())
                    var marker = replica.segment(level: PointTimeline.stoppedLevel, from: replica.next - 1, to: replica.next - 1, cursor: cursor, commits: [])
                    marker.closed = true
                    // Covered up to the last read that proved continuity (not to now: what was
                    // committed since was not read; after a gap found and no base made, that
                    // read was before the gap).
                    marker.baseTime = min(now, max(replica.confirmedTime ?? 0, replica.lastDurableTime ?? 0))
                    // With points kept in the outbox (the repository did not take them), or when
                    // the repository does not take the marker itself, it is kept there too, after
                    // them: the next start writes it once they are written, and the stop reads as
                    // a stop, not as a follower killed (no marker in the repository claims the
                    // time after its last durable point before then).
                    let written = replica.parked.isEmpty && (try? write(marker, pages: [], replica: replica, point: "replicate.stopped")) != nil
                    if !written, let sealed = try? marker.seal(pages: [], sealer: repository.sealer, zstd: zstd, name: marker.name) {
                        _ = try? outbox.keep(marker.name, sealed)
                    }
                }
                replica.follower.close()
            }
            let starting = replicas.filter(\.starting)
            for replica in replicas where !replica.starting { drain(replica) }
            starts.sync {}
            settleStarts()
            for replica in starting { drain(replica) }
            merges.sync {}
            // Stopped before its first base was in (a SIGTERM in the first half second): no point
            // of it exists. It said "every commit seen was written", exit 0, and its status file
            // nothing: a store never protected that nothing reported (a trial).
            for replica in replicas where replica.chain == nil && replica.summary.notFollowed == nil && replica.parked.isEmpty {
                replica.summary.notFollowed = "stopped by \(stoppedBy) before its first base was in the repository: no point of it was made by this run"
                replica.summary.notFollowedStatus = 0   // as asked: said, not a failure of the run
            }
            let unwritten = replicas.filter { !$0.pending.isEmpty || $0.inFlight != nil || !$0.parked.isEmpty }
            if unwritten.isEmpty {
                // A store still waiting for its kept points was not followed: nothing of it was "seen".
                let waiting = replicas.filter { $0.outboxStart != nil || $0.startStopped || $0.chain == nil }.map(\.store.path)
                if stoppedBy != "duration" {
                    say("stopped by \(stoppedBy); every commit seen was written"
                        + (waiting.isEmpty ? "" : "; NOT followed (stopped before its first base was in, or before the points an earlier run kept were all written): " + waiting.joined(separator: ", ")))
                }
            } else {
                for replica in unwritten {
                    let why = replica.summary.lastError ?? "the repository could not be written"
                    var parts: [String] = []
                    let kept = replica.parkedPoints
                    if kept > 0 {
                        parts.append("\(Format.plural(kept, "point", "points")) not written to \(repository.location) (\(why)) \(kept == 1 ? "is" : "are") kept in \(outbox.folder): "
                                     + "the next `storectl replicate` of this store into this repository writes them first")
                    }
                    let count = replica.pending.count + (replica.inFlight?.batch.count ?? 0)
                    if count > 0 {
                        let last = kept > 0 ? "the kept points end before them"
                            : replica.lastDurableTime.map { "its points end at \(Timestamp.iso(PointRestore.date($0)))" } ?? "no point of this run is durable"
                        parts.append("\(Format.plural(count, "commit", "commits")) read but NOT written to \(repository.location) (\(why)): \(last), and no later time is claimed")
                    }
                    let text = "\(replica.store.path): " + parts.joined(separator: "; ")
                    if events != nil { say(text) } else if count > 0 { Replicate.logger.error("\(text)") } else { Replicate.logger.warning("\(text)") }
                }
            }
            // A store whose chain broke (a gap, a -wal truncated before its last commit was
            // read) and that no base followed (the repository failing): what the app committed
            // since its last point is in no point, whatever "every commit seen" says; after the
            // points kept in the outbox too.
            for replica in replicas where replica.chain != nil && replica.outboxStart == nil && !replica.startStopped {
                guard let need = replica.needsBase, need.kind != "compaction", need.kind != "start" else { continue }
                replica.summary.notProtected = notProtected(replica, reason: need.reason, cause: replica.baseFailure?.cause ?? replica.summary.lastError)
                let text = "\(replica.store.path): NOT protected \(replica.summary.notProtected ?? need.reason); the next run makes a base"
                if events != nil { say(text) } else { Replicate.logger.warning("\(text)") }
            }
            return report(state: "stopped", stoppedBy: stoppedBy)
        }

        /// Since when a broken chain leaves the store unprotected, and why (`StoreSummary.notProtected`).
        func notProtected(_ replica: Replica, reason: String, cause: String?) -> String {
            // After the points kept in the outbox too (the next run writes them first).
            let newest = [replica.lastDurableTime, replica.parked.last?.name.lastTime].compactMap { $0 }.max()
            let last = newest.map { "after \(Timestamp.iso(PointRestore.date($0))): " } ?? ""
            return last + reason + "; no base could be made since" + (cause.map { " (\($0))" } ?? "")
        }

        /// The summary, written to the status file and the metrics folder when asked (a failure to
        /// write them is logged, not fatal: following matters more than reporting).
        @discardableResult
        func report(state: String, stoppedBy: String) -> Summary {
            var summary = Summary(repository: repository.location, stores: replicas.map { finalSummary($0) }, stoppedBy: stoppedBy)
            summary.state = state
            summary.repositoryID = repository.config.id
            if let file = options.statusFile {
                do {
                    let pending = try PendingFile(finalPath: FileSystem.absolute(file), label: "replicate.status")
                    try pending.write(try JSON.encode(summary))
                    try pending.commit(replacing: true)
                } catch {
                    Replicate.logger.warning("the status file cannot be written", metadata: ["file": "\(file)", "error": "\(describe(error))"])
                }
            }
            if let folder = options.metricsFolder {
                for store in summary.stores {
                    do { try ReplicateMetrics.write(store, up: state == "following", folder: folder) } catch {
                        Replicate.logger.warning("the metrics cannot be written", metadata: ["folder": "\(folder)", "error": "\(describe(error))"])
                    }
                }
            }
            return summary
        }

        func finalSummary(_ replica: Replica) -> StoreSummary {
            var summary = replica.summary
            summary.chain = replica.chain
            if let extra = background.withLock({ $0[replica.key] }) {
                summary.merges = extra.merges
                summary.digests = extra.digests
                summary.milestones = extra.milestones
                summary.uploadedBytes += extra.bytes
                summary.requests += extra.requests
            }
            summary.waiting = replica.pending.count + (replica.inFlight?.batch.count ?? 0)
            let sorted = replica.lags.sorted()
            summary.maxLagSeconds = sorted.last ?? 0
            summary.p99LagSeconds = sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * 0.99))]
            return summary
        }


        /// Takes up the store's newest chain where its last durable segment left off, if the
        /// -wal still continues it; otherwise the first step makes a base.
        func resume(_ replica: Replica) {
            do {
                let timeline = try PointTimeline.load(repository, store: replica.key)
                // What a merge killed before its removals left, in any of the store's chains: a
                // merge of a chain's last segments runs after its next base (a run killed then
                // is taken up in the new chain, and the old one's leftovers stayed for a prune).
                // Harmless if left (no restore reads them; prune removes them too): a failure here stops nothing.
                do { try tidyMerges(timeline.chains(of: replica.key)) } catch {
                    Replicate.logger.info("segments an interrupted merge left were not removed (the next run or a prune removes them)", metadata: [
                        "store": "\(replica.store.path)", "error": "\((error as? StoreOpsError)?.message ?? "\(error)")"])
                }
                guard let chain = timeline.chains(of: replica.key).max(by: { $0.baseTime < $1.baseTime }),
                      let last = chain.segments.last,
                      let sealed = try repository.backend.read(last.key) else { return }
                guard let (segment, _, _) = try PointSegment.openAll(sealed, name: last, sealer: repository.sealer, zstd: zstd, location: repository.location).last else { return }
                guard segment.path.isExactly(replica.store.path) else { return }
                func identity(_ pair: [UInt64]?) -> (dev: UInt64, ino: UInt64)? { pair.flatMap { $0.count == 2 ? ($0[0], $0[1]) : nil } }
                // The page count it had then (growth before the cursor may still be in the -wal only).
                let pages = segment.commits.last.map { Int($0.pageCount) } ?? ((try? repository.record(chain.id))?.pages.pageCount ?? 0)
                replica.follower.resume(at: segment.cursor, databaseIdentity: identity(segment.databaseIdentity), walIdentity: identity(segment.walIdentity), pages: pages,
                                        confirmed: Date(timeIntervalSince1970: Double(chain.confirmedUntil) / 1000),
                                        state: chain.confirmingState(last: segment, in: repository, zstd: zstd))
                replica.chain = chain.id
                replica.baseTime = Date(timeIntervalSince1970: Double(chain.baseTime) / 1000)
                replica.next = last.to + 1
                replica.lastDurableTime = chain.lastTime
                // The chain's last point is durable: said from the start (a resumed idle chain's
                // status said none and its metric 0, which a "last durable too old" alert took for
                // a follower that never wrote: a trial).
                replica.summary.lastDurable = Date(timeIntervalSince1970: Double(chain.lastTime) / 1000)
                replica.lastTime = chain.lastTime
                replica.confirmedTime = chain.lastTime
                replica.pendingCursor = segment.cursor
                replica.aliveKeys.withLock { $0 = chain.alive.map(\.key) }
                // The external-data files the chain holds by now: its base's, and what its segments added and removed.
                // A segment that cannot be read here: the base's files, and the rest carried again.
                let base = try repository.record(chain.id)
                let files = (try? PointFiles.replay(chain, base: base, in: repository, zstd: zstd).settled.mapValues(\.bytes))
                    ?? base.externalFileSet.mapValues(\.bytes)
                replica.external = ExternalFolderWatch(folder: replica.store.externalDataPath, known: files)
                // Milestones go on from the chain's last one that reads (or its base), when its next digest of their rank starts right after it.
                var parent = PointMilestone.Parent(chain: chain.id, point: 0, record: base, map: nil)
                for marker in chain.milestones.reversed() where marker.to <= last.to {
                    guard let record = try? PointMilestone.record(marker, in: repository) else { continue }
                    parent = PointMilestone.Parent(chain: chain.id, point: marker.to, record: record, map: nil)
                    break
                }
                merges.async { [self, parent] in self.milestoneParents[replica.key] = parent }
                try takeUpMerges(chain, replica: replica)
                switch try replica.follower.capture() {
                case .gap(let why), .wholeRead(let why, _, _):
                    // A chain with no stop marker last: its follower was killed (or its machine
                    // went down); said with the gap, as a clean stop is ("storectl was stopped, then").
                    let unclean = chain.stopped ? "" : "storectl replicate was not running (killed, or its machine went down), then: "
                    replica.needsBase = ("gap", unclean + why, nil)
                case .commits(let commits, let at):
                    replica.needsBase = nil
                    replica.summary.resumed = true
                    // Not following from the last durable point until now: no commit is claimed in between.
                    var marker = replica.segment(level: PointTimeline.resumedLevel, from: last.to, to: last.to, cursor: segment.cursor, commits: [])
                    marker.baseTime = nil
                    let name = SegmentName(store: replica.key, chain: chain.id, level: PointTimeline.resumedLevel, from: last.to, to: last.to,
                                           // From the last confirmation: the last point, a clean stop at it, or
                                           // an alive marker at it (a killed follower's heartbeats said no
                                           // commit came until then; from its last commit instead, the restart
                                           // took back times restores had given: a trial).
                                           firstTime: min(max(chain.confirmedUntil, chain.markers.last(where: { $0.level == PointTimeline.stoppedLevel })?.firstTime ?? 0),
                                                          Replicate.ms(at)),
                                           lastTime: Replicate.ms(at))
                    marker.span = [name.firstTime, name.lastTime]
                    try writeMarker(marker, name: name, replica: replica)
                    say("\(replica.store.path): resumed chain \(chain.id) at point \(last.to) (\(Format.plural(commits.count, "commit", "commits")) since)")
                    replica.pauses = Pauses.now   // the resume marker says it was not following until now
                    if add(commits, at: at, to: replica) { confirm(replica, at: at) }
                }
            } catch {
                replica.needsBase = ("gap", "the store's last chain could not be resumed (\(describe(error)))", nil)
            }
        }

        func describe(_ error: any Error) -> String {
            (error as? StoreOpsError)?.message ?? "\(error)"
        }

        func step(_ replica: Replica) {
            guard !replica.starting, Date() >= replica.retryAfter else { return }
            if replica.outboxStart != nil {
                start(replica)
                return
            }
            // A base every interval, unless the repository is failing (the commits are spooled
            // meanwhile; the base follows once they are written). It used to wait here for a
            // moment with nothing pending and no upload under way, flushing at every wake
            // meanwhile: beside a busy app that wrote a tiny segment per commit read, for most of
            // the interval (24,621 segments in 8 minutes with a base every minute).
            // Nor while a backlog goes out (the catch-up flush empties it, reading the -wal between segments).
            if replica.needsBase == nil, Date().timeIntervalSince(replica.baseTime) >= options.baseInterval, Date() >= replica.uploadRetryAfter, Date() >= replica.baseNotBefore,
               replica.spooledBytes == 0, replica.parked.isEmpty, replica.pendingBytes < Self.segmentBytes {
                replica.needsBase = ("compaction", "a new base every \(Format.duration(options.baseInterval))", nil)
            }
            // A base every interval put off (the repository failing or busy with the old chain's
            // commits) reads the app's commits as any step does: it returned before the read, so
            // while an upload hung (a server that stopped answering), nothing was read, and the
            // app's checkpoints restarted the -wal under it (a gap, 886 commits in a trial).
            if let need = replica.needsBase, !baseStep(replica, need) { return }
            capture(replica)
        }

        /// A broken chain's base put off while the repository fails (its kept segments go
        /// first): not protected meanwhile, in the status file (not for an upload merely under way).
        func heldBack(_ replica: Replica, _ need: (kind: String, reason: String, change: UInt32?)) {
            guard need.kind == "gap" || need.kind == "continued", replica.chain != nil,
                  replica.uploadFailures > 0 || !replica.parked.isEmpty else { return }
            replica.summary.notProtected = notProtected(replica, reason: need.reason, cause: replica.summary.lastError ?? replica.baseFailure?.cause)
        }

        /// Makes the base `need` asks for, or puts it off. False when the step is done; true when
        /// it goes on to read the app's commits (a base every interval, put off).
        func baseStep(_ replica: Replica, _ need: (kind: String, reason: String, change: UInt32?)) -> Bool {
            // Kept segments wait for a repository that failed: the pause holds (the main loop
            // sends them once it is over), rather than three tries every poll.
            if !replica.parked.isEmpty, Date() < replica.uploadRetryAfter {
                if need.kind == "compaction" { replica.needsBase = nil; return true }
                heldBack(replica, need)
                return false
            }
            // While the repository fails, the old chain's last commits go out on the upload
            // thread, not here: waiting for them (each try seconds against a server gone away)
            // held the loop, the status file unwritten and every other store unread, for as
            // long as segments moved from memory to the outbox (39 s in a trial). The base
            // follows once they are written.
            if replica.uploadFailures > 0 || !replica.parked.isEmpty || replica.uploading {
                if need.kind == "compaction" {
                    replica.needsBase = nil
                    return true
                } else if !replica.uploading {
                    flush(replica)
                }
                heldBack(replica, need)
                return false
            }
            // The old chain's last commits go first (now: a base read later than needed would
            // hold commits no point holds); the new chain begins after them. Waited for a few
            // seconds at most: against a server that stopped answering just then, the wait
            // held every read of the -wal for as long as it was away.
            guard Date() >= replica.baseNotBefore else { return false }
            let limit = min(5, max(2, 4 * options.syncInterval))
            let until = Date().addingTimeInterval(limit)
            var ready: Bool
            if need.kind == "compaction" {
                // The app's commits are read while the old chain's go out: against a bucket
                // answering in 80 ms that write took half a second, the app's -wal restarted
                // twice meanwhile (200 commits/s), and every base every interval was a gap of
                // ~100 commits (a trial). What was read meanwhile goes with the base's catch-up.
                guard drainReading(replica, until: until) else { return false }
                // What is left goes with the base's catch-up, written while the app's checkpoints
                // are held back: a little (what was read during the last upload), in memory, and
                // never towards a repository that is failing (a review).
                ready = !replica.uploading && replica.parked.isEmpty && replica.uploadFailures == 0 && replica.spooledBytes == 0
                    && replica.pendingBytes < Self.catchUpBytes
            } else {
                for _ in 0..<3 where Date() < until && (replica.uploading || !replica.pending.isEmpty || !replica.parked.isEmpty) {
                    flushAll(replica, until: until)
                }
                ready = !replica.uploading && replica.pending.isEmpty && replica.parked.isEmpty
            }
            guard ready else {
                // Not written: a base every interval waits for the repository (tried again
                // once uploads succeed, and not before a while); a gap's base keeps being
                // needed (tried again in a moment: the loop writes or keeps meanwhile).
                replica.baseNotBefore = Date().addingTimeInterval(need.kind == "compaction" ? min(30, 5 * limit) : max(1, options.syncInterval))
                if need.kind == "compaction" { replica.needsBase = nil; return true }
                return false
            }
            makeBase(replica, kind: need.kind, reason: need.reason, expectingChange: need.change)
            return false
        }

        /// Writes what waits before a base every interval, reading the app's commits between
        /// waits for the upload (a poll interval at most): they wait for the base's catch-up.
        /// Done once an upload ends with only what was read during it waiting, or at `until`.
        /// False when a read found the chain broken (the base a gap's or a continued one, as
        /// `needsBase` says now, made at the next step).
        func drainReading(_ replica: Replica, until: Date) -> Bool {
            while Date() < until {
                flush(replica)
                let tookAll = replica.pending.isEmpty
                guard replica.uploading else {
                    // Nothing went out: nothing waits, or the repository pauses (the base is put
                    // off), or what waited was just kept in the outbox (sent at the next flush).
                    if replica.parked.isEmpty || replica.uploadFailures > 0 || Date() < replica.uploadRetryAfter { return true }
                    continue
                }
                while replica.uploading, Date() < until {
                    finishUploads(by: min(until, Date().addingTimeInterval(options.pollInterval)))
                    guard readWhileWriting(replica) else { return false }
                    if ProcessSignals.received != nil {
                        // A stop: no base; the loop drains (and reads once more, which it does only
                        // for a store that needs no base).
                        if replica.needsBase?.kind == "compaction" { replica.needsBase = nil }
                        return false
                    }
                }
                settleUploads()
                if replica.uploadFailures > 0 || (tookAll && replica.parked.isEmpty) { return true }
            }
            return true
        }

        /// What a read of the -wal found, into the chain: false when it broke it (a gap, said at
        /// once and put in the status file, or a whole read: `needsBase` says which; or commits
        /// that `add` dropped, setting the gap's base itself).
        func take(_ outcome: WalFollower.Capture, of replica: Replica) -> Bool {
            switch outcome {
            case .commits(let commits, let at):
                guard add(commits, at: at, to: replica) else { return false }
                confirm(replica, at: at)
                return true
            case .gap(let why):
                say("\(replica.store.path): \(why); a new base follows")
                replica.needsBase = ("gap", why, nil)
                // In the status file now (`replicate status`: A GAP), not only once the base
                // records it: against a server gone away that is minutes later (a trial's
                // status said 0 gaps while stderr had said one).
                replica.summary.gapPending = why
                return false
            case .wholeRead(let why, let change, let at):
                replica.needsBase = ("continued", why, change)
                replica.wholeReadAt = replica.wholeReadAt ?? at
                return false
            }
        }

        /// One read of the app's commits into the chain while an upload goes on; false when it found
        /// the chain broken (`take`). A read that fails (busy) is tried again at the next.
        func readWhileWriting(_ replica: Replica) -> Bool {
            guard let outcome = try? replica.follower.capture() else { return true }
            return take(outcome, of: replica)
        }

        func capture(_ replica: Replica) {
            do {
                let outcome = try replica.follower.capture()
                replica.boundaryHold = nil   // what the app committed since the base is read now (or its loss known)
                _ = take(outcome, of: replica)
                // A gap or a whole read: its base is the next step (dropped commits wait for the loop's).
                if case .commits = outcome { return }
                step(replica)
            } catch {
                replica.boundaryHold = nil
                Replicate.logger.warning("reading the store failed; trying again", metadata: ["store": "\(replica.store.path)", "error": "\(describe(error))"])
                replica.retryAfter = Date().addingTimeInterval(options.pollInterval)
            }
        }

        /// While everything read is durable, an "alive" marker (at most every `heartbeatInterval`)
        /// names the last read that proved no commit came since the chain's last point: restores
        /// answer a time up to it, and refuse one after it (the follower may have stopped, or
        /// may not have written what it read). Written on the upload thread after the points
        /// before it; the previous marker of the chain is removed once the new one is durable.
        func heartbeat(_ replica: Replica) {
            guard options.heartbeatInterval > 0, let chain = replica.chain, replica.needsBase == nil, replica.pending.isEmpty, replica.parked.isEmpty,
                  !replica.uploading, replica.inFlight == nil, let confirmed = replica.confirmedTime,
                  let cursor = replica.follower.cursor, confirmed > max(replica.lastDurableTime ?? 0, replica.lastHeartbeat),
                  confirmed - replica.lastHeartbeat >= Int64(options.heartbeatInterval * 1000) else { return }
            replica.lastHeartbeat = confirmed
            let point = replica.next - 1
            var marker = replica.segment(level: PointTimeline.aliveLevel, from: point, to: point, cursor: cursor, commits: [])
            marker.baseTime = confirmed
            let name = SegmentName(store: replica.key, chain: chain, level: PointTimeline.aliveLevel, from: point, to: point, firstTime: confirmed, lastTime: confirmed)
            let sealed: Data
            do { sealed = try marker.seal(pages: [], sealer: repository.sealer, zstd: zstd, name: name) } catch { return }
            uploads.async { [self] in
                do {
                    let hold = try RepositoryHold.take(repository, operation: "replicate", exclusive: false, wait: false, sweep: false)
                    defer { hold.release() }
                    try repository.backend.write(name.key, sealed, point: "replicate.alive")
                    let before = replica.aliveKeys.withLock { keys -> [String] in defer { keys = [name.key] }; return keys.filter { $0 != name.key } }
                    for key in before { try repository.backend.remove(key, point: "replicate.alive.remove") }
                    count(replica.key, bytes: sealed.count, requests: 1 + before.count)
                } catch {
                    Replicate.logger.warning("writing the follower's alive marker failed; restores claim up to its last point meanwhile",
                                             metadata: ["store": "\(replica.store.path)", "error": "\(describe(error))"])
                }
            }
        }

        /// A commit is dated by the read that finds it: it came after the read before. When that
        /// read is long past (the follower was stopped with SIGSTOP or Ctrl-Z, its machine or
        /// container suspended, or it was starved), the commits found could have come at any
        /// time since, and dated now a restore in between would answer an older state as the
        /// store's: why they cannot be dated (nil: the read before is recent enough, within
        /// `stallLimit`).
        func stalled(_ replica: Replica) -> String? {
            let now = Pauses.now
            defer { replica.pauses = now }
            let since = replica.confirmedTime.map { " since \(Timestamp.iso(Date(timeIntervalSince1970: Double($0) / 1000)))" } ?? ""
            // A SIGCONT only with a real stop (the ticker saw its threads stand still): systemd
            // sends one after every SIGTERM (systemd.kill(5)), as timeout(1) does, and a trial's
            // unit stop recorded a false gap and "NOT protected" for it. (A stop under 250 ms is
            // not told: the commits found are dated that much late at most.)
            if now.continued != replica.pauses.continued, now.stops != replica.pauses.stops {
                return "storectl replicate was stopped (SIGSTOP, SIGTSTP: Ctrl-Z) and continued\(since): the commits found cannot be dated"
            }
            let suspended = Double(now.suspendedNanoseconds - replica.pauses.suspendedNanoseconds) / 1e9
            if suspended > 0.5 {
                return "the machine was suspended for \(Format.duration(suspended))\(since): the commits found cannot be dated"
            }
            return nil
        }

        /// Records that every commit before `at` was read (see `Replica.confirmedTime`).
        func confirm(_ replica: Replica, at: Date) {
            replica.confirmedTime = max(replica.confirmedTime ?? 0, Replicate.ms(at))
        }

        /// Holds the commits read for the next segment; false when they had to be dropped (the
        /// spool is full: a gap follows).
        @discardableResult
        func add(_ commits: [WalCommit], at: Date, to replica: Replica, cursor after: WalCursor? = nil) -> Bool {
            guard !commits.isEmpty, let cursor = after ?? replica.follower.cursor else { return true }
            if let why = stalled(replica) {
                // Not dated: a gap (a base follows), never points at the wrong time.
                say("\(replica.store.path): \(why); a new base follows")
                replica.needsBase = ("gap", why, nil)
                replica.summary.gapPending = why
                return false
            }
            let time = max(Replicate.ms(at), replica.lastTime)
            replica.lastTime = time
            replica.commitsRead += commits.count
            for commit in commits {
                var pages: [UInt32] = []
                var ids: [ContentID] = []
                var bytes: [[UInt8]] = []
                for (page, content) in commit.pages {
                    var content = content
                    if page == 1 { content.withUnsafeMutableBytes { WalFollower.normalizePage1($0) } }
                    pages.append(page)
                    ids.append(repository.sealer.contentID(content))
                    replica.pendingBytes += content.count
                    bytes.append(content)
                }
                replica.pending.append((PointSegment.Commit(time: time, frame: commit.frame, pageCount: commit.pageCount, pages: pages, ids: ids), bytes, cursor, nil))
                replica.seenAt.append(at)
            }
            replica.pendingCursor = cursor
            var full: String?
            if replica.pendingBytes + replica.spooledBytes + replica.parkedBytes + (replica.inFlight.map { $0.bytes + $0.spooled } ?? 0) > spoolLimit {
                full = "more than \(Format.bytes(UInt64(spoolLimit))) of commits (the spool limit) waited for the repository, slow or away"
            } else if replica.pendingBytes > options.spoolMemory {
                full = spoolOut(replica)
            }
            if let full {
                say("\(replica.store.path): \(Format.bytes(UInt64(replica.pendingBytes + replica.spooledBytes))) of commits could not be written; they are dropped and a gap recorded")
                dropWaiting(replica, gap: full)
                return false
            }
            return true
        }

        /// Forgets the commits that wait (memory, spool file and the status's count of it).
        func clearWaiting(_ replica: Replica) {
            replica.pending = []
            replica.seenAt = []
            replica.pendingBytes = 0
            replica.spooledBytes = 0
            if !replica.refersToSpool { replica.spool?.reset() }
            if replica.summary.spooledBytes != nil { replica.summary.spooledBytes = 0 }
        }

        /// Drops the commits that wait; a gap follows (a new base, `why` recorded), and nothing
        /// after the last durable point is claimed.
        func dropWaiting(_ replica: Replica, gap why: String) {
            clearWaiting(replica)
            replica.needsBase = ("gap", why, nil)
            replica.summary.gapPending = why
            replica.confirmedTime = replica.lastDurableTime
        }

        /// Commits read while a base was made that could not be read back from their spool
        /// file: a gap follows what was handed on.
        func unreadable(_ replica: Replica) {
            let why = "the commits read while a base was made could not be read back from their spool file"
            replica.needsBase = ("gap", why, nil)
            replica.summary.gapPending = why
        }

        /// Moves the oldest waiting commits held in memory to the spool file until half the
        /// memory bound is left; why not, when the spool file cannot take them (nil: done).
        func spoolOut(_ replica: Replica) -> String? {
            let spool = replica.spool ?? CommitSpool(folder: options.resolvedSpoolFolder)
            replica.spool = spool
            for k in replica.pending.indices where replica.pending[k].spooled == nil {
                guard replica.pendingBytes > options.spoolMemory / 2 else { break }
                let pages = replica.pending[k].pages
                do {
                    let ref = try spool.append(pages)
                    replica.pending[k].spooled = ref
                    replica.pending[k].pages = []
                    replica.pendingBytes -= ref.bytes
                    replica.spooledBytes += ref.bytes
                } catch {
                    return "the commits waiting for the repository could not be spooled to \(spool.folder) (\(describe(error)))"
                }
            }
            replica.summary.spooledBytes = replica.spooledBytes
            replica.summary.spooledPeakBytes = max(replica.summary.spooledPeakBytes ?? 0, replica.spooledBytes)
            return nil
        }

        /// Hands the store's new commits to the uploader as one segment (a point is durable once
        /// it is written). One upload per store at a time, on its own thread: reading goes on
        /// while the repository is slow or away; what waits is bounded by `spoolLimit`.
        /// - Parameter whole: everything that waits in one segment (a base's catch-up, which must be
        ///   written all or not at all: the follower rewinds before it when it is not).
        func flush(_ replica: Replica, whole: Bool = false) {
            settleUploads()
            if !whole { keepBehindHungWrite(replica) }
            // While a kept segment is being written (tried again and again while the repository
            // fails: seconds a try), what waits is kept behind it all the same, at every sync: it
            // waited in memory meanwhile, lost to a kill -9 (a trial: 69 commits, 6 s).
            let keepingBehind = replica.uploading && replica.sendingParked != nil && !whole
            guard !replica.uploading || keepingBehind, replica.chain != nil else { return }
            let retrying = Date() < replica.uploadRetryAfter
            // What the repository did not take goes first, in order.
            if !keepingBehind, !replica.parked.isEmpty, !retrying {
                sendParked(replica)
                return
            }
            // While the repository fails (and behind kept segments), what waits is kept in the
            // outbox a segment at a time, numbered, instead of in memory; not a base's catch-up
            // (written whole or not at all: when it is not, the follower rewinds before it, or,
            // beside a copied base whose reads went on, the old chain keeps it as it waits).
            let park = !whole && (keepingBehind || retrying || !replica.parked.isEmpty || Self.parkAlways)
            guard !replica.pending.isEmpty, !retrying || park else { return }
            // A segment's worth from the front, cut only where a read's commits end (a segment's
            // cursor is its last read's: a resume there must find every commit before it written).
            var taken = 0, takenBytes = 0
            while taken < replica.pending.count {
                let entry = replica.pending[taken]
                if !whole, taken > 0, takenBytes >= Self.segmentBytes, entry.cursor != replica.pending[taken - 1].cursor { break }
                takenBytes += entry.spooled?.bytes ?? Replicate.held([entry]).memory
                taken += 1
            }
            let original = Array(replica.pending[0..<taken])
            var batch = original
            do {
                for k in batch.indices {
                    guard let ref = batch[k].spooled else { continue }
                    guard let spool = replica.spool else { throw StoreOpsError(.failure, "no spool file") }
                    batch[k].pages = try spool.read(ref)
                }
            } catch {
                Replicate.logger.warning("reading waiting commits back from the spool failed; tried again", metadata: ["store": "\(replica.store.path)", "error": "\(describe(error))"])
                replica.uploadRetryAfter = Date().addingTimeInterval(1)
                return
            }
            let cursor = batch[batch.count - 1].cursor
            let seen = Array(replica.seenAt.prefix(taken))
            var filesAdded = false
            // The external-data folder, read after every commit of the batch was: a file that
            // appeared goes with its first commit (a commit naming it came after it was written),
            // one that went with its last (the points before may still name it).
            if var watch = replica.external, !batch.isEmpty {
                // Files past a read's budget (64 MiB) are read next, for this same batch: its
                // commits may name them (left to the next batch, a point restored without them,
                // saying nothing). Past four reads, what is still left is said not carried with
                // this batch (its points take the files from the store's next snapshot, and say so).
                let budget = ReplicateTesting.filesBudget
                var change = watch.scan(budget: budget)
                for _ in 0..<3 where !change.deferred.isEmpty { change.append(watch.scan(budget: budget)) }
                if !change.deferred.isEmpty {
                    batch[0].commit.notCarried = (batch[0].commit.notCarried ?? []) + change.deferred
                    replica.summary.filesNotCarried += change.deferred.count
                    let text = "\(replica.store.path): \(Format.plural(change.deferred.count, "external-data file", "external-data files")) written at once past the \(Format.bytes(UInt64(4 * budget))) a segment carries: carried with a later commit; points until then take them from the store's next snapshot"
                    if events != nil { say(text) } else { Replicate.logger.warning("\(text)") }
                }
                replica.external = watch
                if !change.isEmpty {
                    if !change.added.isEmpty {
                        // A name that went and came back (a batch sent again): present from its first commit on.
                        let names = Set(change.added.map(\.file.name))
                        for k in batch.indices where batch[k].commit.removed != nil {
                            batch[k].commit.removed?.removeAll { names.contains($0) }
                            if batch[k].commit.removed?.isEmpty == true { batch[k].commit.removed = nil }
                        }
                        for k in replica.pending.indices.dropFirst(taken) where replica.pending[k].commit.removed != nil {
                            replica.pending[k].commit.removed?.removeAll { names.contains($0) }
                            if replica.pending[k].commit.removed?.isEmpty == true { replica.pending[k].commit.removed = nil }
                        }
                        batch[0].commit.files = (batch[0].commit.files ?? []) + change.added.map(\.file)
                        batch[0].pages += change.added.map(\.bytes)
                        filesAdded = true
                        // Not counted against the spool's bound for commits (a scan reads at most 64 MiB of files at once).
                        replica.summary.filesAdded += change.added.count
                    }
                    if !change.notCarried.isEmpty {
                        batch[0].commit.notCarried = (batch[0].commit.notCarried ?? []) + change.notCarried.map(\.name)
                        replica.summary.filesNotCarried += change.notCarried.count
                        for (name, reason) in change.notCarried {
                            // A warning even with --quiet (what a cron job or a unit logs).
                            let text = "\(replica.store.path): the external-data file \(name) is not carried with the points (\(reason)); points from here take the files their base lacks from the store's next snapshot"
                            if events != nil { say(text) } else { Replicate.logger.warning("\(text)") }
                        }
                    }
                    if !change.removed.isEmpty {
                        // With the last commit read (the scan came after it): later commits than
                        // this segment's may still name the file, so it goes with the last that waits.
                        if taken < replica.pending.count {
                            let last = replica.pending.count - 1
                            replica.pending[last].commit.removed = (replica.pending[last].commit.removed ?? []) + change.removed
                        } else {
                            batch[batch.count - 1].commit.removed = (batch[batch.count - 1].commit.removed ?? []) + change.removed
                        }
                        replica.summary.filesRemoved += change.removed.count
                    }
                }
            }
            // As the batch goes back if its write fails: the scan's changes kept, spooled commits
            // left in the spool (the first in memory when it carries files the scan found).
            var putBack = batch
            for k in putBack.indices {
                if let ref = original[k].spooled, !(k == 0 && filesAdded) {
                    putBack[k].pages = []
                    putBack[k].spooled = ref
                } else {
                    putBack[k].spooled = nil
                }
            }
            let (memoryBytes, spooled) = Replicate.held(putBack)
            let from = replica.next, to = replica.next + batch.count - 1
            let segment = replica.segment(level: 0, from: from, to: to, cursor: cursor, commits: batch.map(\.commit))
            let sealed: Data
            let (inMemory, wasSpooled) = Replicate.held(original)
            do { sealed = try segment.seal(pages: batch.flatMap(\.pages), sealer: repository.sealer, zstd: zstd) } catch {
                Replicate.logger.warning("sealing points failed", metadata: ["store": "\(replica.store.path)", "error": "\(describe(error))"])
                // Kept as the scan left them (the files it found go with them next time).
                replica.pending.replaceSubrange(0..<taken, with: putBack)
                replica.pendingBytes += memoryBytes - inMemory
                replica.spooledBytes += spooled - wasSpooled
                replica.uploadRetryAfter = Date().addingTimeInterval(1)
                return
            }
            if park {
                do {
                    let path = try outbox.keep(segment.name, sealed)
                    replica.pending.removeFirst(taken)
                    replica.seenAt.removeFirst(min(taken, replica.seenAt.count))
                    replica.pendingBytes -= inMemory
                    replica.spooledBytes -= wasSpooled
                    kept(replica, Parked(name: segment.name, path: path, bytes: sealed.count, seen: seen))
                    return
                } catch {
                    // Said once (and again when the cause changes), not at every sync it fails.
                    // Judged without the file's name (each segment's differs: a trial's log
                    // said it again at every sync of a full disk).
                    let cause = describe(error)
                    let same = NSRegularExpression.escapedPattern(for: outbox.folder) + #"/\S+"#
                    let kind = cause.replacingOccurrences(of: same, with: "…", options: .regularExpression)
                    if replica.outboxFailure != kind {
                        replica.outboxFailure = kind
                        Replicate.logger.warning("keeping points in the outbox failed; they wait in memory and in the spool file", metadata: [
                            "store": "\(replica.store.path)", "folder": "\(outbox.folder)", "error": "\(cause)"])
                    }
                    if retrying || keepingBehind {
                        // They wait in memory (and the spool file) as before, for the next try.
                        // Never written beside a kept segment being written: a second upload in
                        // flight took the first's place (`inFlight`), and its batch was lost while
                        // the next was numbered from the same point (a trial: an S3 outage with a
                        // full outbox dropped commits, and later points named pages no segment held).
                        replica.pending.replaceSubrange(0..<taken, with: putBack)
                        replica.pendingBytes += memoryBytes - inMemory
                        replica.spooledBytes += spooled - wasSpooled
                        return
                    }
                }
            }
            replica.pending.removeFirst(taken)
            replica.seenAt.removeFirst(min(taken, replica.seenAt.count))
            replica.pendingBytes -= inMemory
            replica.spooledBytes -= wasSpooled
            var template = segment
            template.commits = []
            replica.inFlight = (batch, putBack, seen, from, to, memoryBytes, spooled, segment.name, sealed, template, !whole)
            replica.inFlightSince = Date()
            replica.uploading = true
            let name = segment.name
            uploads.async { [self] in
                let outcome: Result<Int, any Error> = Result {
                    try writeSegment(name, sealed)
                    return sealed.count
                }
                completed.withLock { $0.append((replica, outcome)) }
            }
        }

        /// A write of the points in flight that has not ended after `keepBehindAfter`, to a
        /// repository silent as long (a server that holds its connection without answering: up
        /// to a request's timeout, 30 s by
        /// default, and more behind an alive marker's write waiting so on the same queue) is kept
        /// in the outbox as it is, and goes on as the first kept segment's write: what the app
        /// commits meanwhile is kept behind it at every sync, as behind any kept segment, rather
        /// than waiting in memory for the write to fail (lost to a kill -9; 228 commits in a CI
        /// run 9-12 s into a hung server). Its write's end settles the kept segment (written:
        /// removed from the outbox; failed: tried again as kept ones are).
        func keepBehindHungWrite(_ replica: Replica) {
            let waited = Date().timeIntervalSince(replica.inFlightSince)
            // A bucket that answers, however slowly, is not kept behind (each kept segment is a
            // write of its own: through a bucket taking 500 ms a request, kept at every sync they
            // went out slower than they came, 752 kept after 20 s in a test): only one silent as long.
            guard replica.uploading, replica.sendingParked == nil, replica.parked.isEmpty, let flight = replica.inFlight, flight.parkable,
                  waited >= keepBehindAfter, (repository.backend.silentFor ?? waited) >= keepBehindAfter else { return }
            // Not kept (the outbox cannot be written): it stays in flight, and what waits in memory.
            guard let path = try? outbox.keep(flight.name, flight.sealed) else {
                replica.inFlightSince = .distantFuture   // not tried again for this write (each try rewrote it, at every sync)
                return
            }
            replica.inFlight = nil
            replica.sendingParked = flight.sealed
            kept(replica, Parked(name: flight.name, path: path, bytes: flight.sealed.count, seen: flight.seen))
            Replicate.logger.debug("a write in flight kept in the outbox", metadata: ["store": "\(replica.store.path)", "segment": "\(flight.name.key)",
                                                                                   "waited": "\(Format.duration(Date().timeIntervalSince(replica.inFlightSince)))"])
        }

        /// Writes a level-0 segment (on the uploader's queue). A write reported failed that had
        /// stored the object (its answer lost), then the same cut sealed again (a new nonce, so
        /// other bytes under the same key): the object there, opening as this very segment (same
        /// chain, points and times), is what this one holds, and counts as written. Without
        /// this, a batch put back after such a failure (the outbox could not keep it) and cut
        /// again the same way would be refused as "exists with other content" at every try.
        func writeSegment(_ name: SegmentName, _ sealed: Data) throws {
            let hold = try RepositoryHold.take(repository, operation: "replicate", exclusive: false, wait: false, sweep: false)
            defer { hold.release() }
            do {
                try repository.backend.write(name.key, sealed, point: "replicate.segment")
            } catch {
                guard let there = try? repository.backend.read(name.key), let zstd = try? ZstdFrames(level: 1),
                      (try? PointSegment.openAll(there, name: name, sealer: repository.sealer, zstd: zstd, location: repository.location)) != nil
                else { throw error }
            }
            // The test hook: written, but the answer lost and the server gone before it could be read back.
            if FaultInjection.answerLost("replicate.segment") {
                throw StoreOpsError(.ioError, "the answer to writing \(name.key) was lost (STORECTL_TEST_LOST_ANSWER)")
            }
        }

        /// Takes in what the uploader finished: durable points, or a batch to send again.
        func settleUploads() {
            let done = completed.withLock { list -> [(Replica, Result<Int, any Error>)] in defer { list = [] }; return list }
            for (replica, outcome) in done {
                replica.uploading = false
                if let sealed = replica.sendingParked {
                    replica.sendingParked = nil
                    settleParked(replica, outcome, sealed: sealed)
                    continue
                }
                guard let flight = replica.inFlight else { continue }
                replica.inFlight = nil
                switch outcome {
                case .success(let bytes):
                    let now = Date()
                    for seen in flight.seen { replica.lags.append(now.timeIntervalSince(seen)) }
                    if replica.lags.count > 100_000 { replica.lags.removeFirst(replica.lags.count - 100_000) }
                    replica.summary.points += flight.batch.count
                    replica.summary.segments += 1
                    replica.summary.uploadedBytes += UInt64(bytes)
                    replica.summary.requests += 1
                    if let last = flight.batch.last?.commit.time {
                        replica.summary.lastDurable = Date(timeIntervalSince1970: Double(last) / 1000)
                        replica.lastDurableTime = last
                    }
                    replica.next = flight.to + 1
                    if !replica.refersToSpool { replica.spool?.reset() }
                    if replica.summary.spooledBytes != nil { replica.summary.spooledBytes = replica.spooledBytes }
                    replica.uploadFailures = 0
                    replica.summary.lastError = nil
                    offer(replica, name: flight.name, sealed: flight.sealed) { digest in
                        // Each commit's pages, then the bytes of the files it carries.
                        for (k, entry) in flight.batch.enumerated() {
                            let count = entry.commit.pages.count
                            digest.add(entry.commit, point: flight.from + k, of: flight.segment, pageAt: { entry.pages[$0] },
                                       fileAt: { count + $0 < entry.pages.count ? entry.pages[count + $0] : nil })
                        }
                    }
                case .failure(let error):
                    if flight.parkable, let path = try? outbox.keep(flight.name, flight.sealed) {
                        // Kept on disk as it is, numbered: it goes out first once the repository answers.
                        kept(replica, Parked(name: flight.name, path: path, bytes: flight.sealed.count, seen: flight.seen))
                    } else {
                        // Back in front of what came since, numbered again at the next try.
                        replica.pending = flight.putBack + replica.pending
                        replica.seenAt = flight.seen + replica.seenAt
                        replica.pendingBytes += flight.bytes
                        replica.spooledBytes += flight.spooled
                    }
                    failed(replica, error)
                }
            }
        }

        /// An upload failed: tried again after a pause that grows with each failure in a row (at most 30 s).
        func failed(_ replica: Replica, _ error: any Error) {
            replica.uploadFailures += 1
            replica.summary.lastError = describe(error)
            replica.uploadRetryAfter = Date().addingTimeInterval(min(30, 0.5 * Double(1 << min(6, replica.uploadFailures))))
            Replicate.logger.warning("writing points failed; they wait for the next try", metadata: [
                "store": "\(replica.store.path)", "waiting": "\(replica.pending.count)", "kept": "\(replica.parkedPoints)", "error": "\(describe(error))"])
        }

        /// A segment written to the outbox joins `Replica.parked`: its points are numbered, and the
        /// commits it holds no longer need the spool file.
        func kept(_ replica: Replica, _ item: Parked) {
            replica.outboxFailure = nil
            replica.parked.append(item)
            replica.next = item.name.to + 1
            if !replica.refersToSpool { replica.spool?.reset() }
            if replica.summary.spooledBytes != nil { replica.summary.spooledBytes = replica.spooledBytes }
            parkedChanged(replica)
        }

        /// The status's count of kept points (`Replica.parked`), once anything was kept.
        func parkedChanged(_ replica: Replica) {
            let points = replica.parkedPoints
            guard points > 0 || replica.summary.keptPoints != nil else { return }
            replica.summary.keptPoints = points
            replica.summary.keptPeakPoints = max(replica.summary.keptPeakPoints ?? 0, points)
        }

        /// Writes the oldest kept segment (`Replica.parked`); `settleParked` takes the outcome.
        func sendParked(_ replica: Replica) {
            guard let item = replica.parked.first else { return }
            let sealed: Data
            do { sealed = try outbox.read(item.path) } catch {
                // A read that failed (no descriptor, an I/O error) is tried again after the pause.
                guard FileSystem.kind(of: item.path) == .missing else {
                    failed(replica, error)
                    return
                }
                // Gone: the points after it cannot follow on from it. What was kept and what
                // waits is dropped, a gap recorded, and a new base follows; the chain's next
                // point is this one's again (nothing after it was written).
                let why = "the points kept in \(item.path) are gone"
                say("\(replica.store.path): \(why); they and the commits after them are dropped and a gap recorded")
                for later in replica.parked { try? outbox.remove(later.path) }
                replica.next = item.name.from
                replica.parked = []
                parkedChanged(replica)
                dropWaiting(replica, gap: why)
                return
            }
            replica.sendingParked = sealed
            replica.uploading = true
            uploads.async { [self] in
                let outcome: Result<Int, any Error> = Result {
                    try writeSegment(item.name, sealed)
                    return sealed.count
                }
                completed.withLock { $0.append((replica, outcome)) }
            }
        }

        /// A kept segment written (its points durable, its file removed), or not (tried again).
        func settleParked(_ replica: Replica, _ outcome: Result<Int, any Error>, sealed: Data) {
            guard let item = replica.parked.first else { return }
            switch outcome {
            case .success(let bytes):
                replica.parked.removeFirst()
                do { try outbox.remove(item.path) } catch {
                    // The next start finds the same object written and removes the file then.
                    Replicate.logger.warning("removing a kept segment that was written failed", metadata: ["file": "\(item.path)", "error": "\(describe(error))"])
                }
                if replica.parked.isEmpty { outbox.removeIfEmpty() }
                let now = Date()
                for seen in item.seen { replica.lags.append(now.timeIntervalSince(seen)) }
                if replica.lags.count > 100_000 { replica.lags.removeFirst(replica.lags.count - 100_000) }
                replica.summary.points += item.name.to - item.name.from + 1
                replica.summary.segments += 1
                replica.summary.uploadedBytes += UInt64(bytes)
                replica.summary.requests += 1
                replica.summary.lastDurable = Date(timeIntervalSince1970: Double(item.name.lastTime) / 1000)
                replica.lastDurableTime = item.name.lastTime
                replica.uploadFailures = 0
                replica.summary.lastError = nil
                parkedChanged(replica)
                // Merged with the rest (its commits' pages are not in memory: that merge has no digest).
                offer(replica, name: item.name, sealed: sealed)
            case .failure(let error):
                failed(replica, error)
            }
        }

        /// A store's start: what an earlier run kept goes out first (`sendOutbox`), then the chain
        /// is taken up (`resume`). The kept segments are written on a thread of their own
        /// (`starts`): up to the spool's bound (1 GiB) of them after a long outage, minutes over a
        /// slow link, or a full S3 deadline a try while the server is away; written on the main
        /// loop, that held every other store of the run unread meanwhile (their -wal's frames
        /// checkpointed away unread: gaps), and the run's first store held back the others' start.
        /// The store itself is not followed until they are written (following on would number
        /// points the kept ones hold). When they cannot be (the repository's disk is full, a kept
        /// file cannot be read), it is tried again, backing off up to 30 s; the run's other
        /// stores are followed meanwhile.
        func start(_ replica: Replica) {
            guard !replica.starting else { return }
            let kept = outbox.kept(store: replica.key)
            if kept.isEmpty, replica.outboxStart == nil {
                resume(replica)
                return
            }
            replica.starting = true
            if replica.outboxStart == nil {
                // Said in the status file and `replicate status` meanwhile (not a failure).
                let segments = kept.filter { $0.name.level == 0 }.count
                replica.summary.notFollowed = segments == 0 ? "writing the stop marker an earlier run kept in \(outbox.folder) first"
                    : "writing the \(Format.plural(segments, "segment", "segments")) of points an earlier run kept in \(outbox.folder) first"
                replica.summary.notFollowedStatus = 0
            }
            let key = replica.key, store = replica.store.path
            starts.async { [self] in
                let sent = sendOutbox(key: key, store: store)
                startsDone.withLock { $0.append((replica, sent)) }
            }
        }

        /// What a start's `sendOutbox` did, taken in by the main loop (`settleStarts`).
        struct OutboxSent {
            var sent = 0, points = 0, bytes: UInt64 = 0
            var lastDurable: Int64?
            /// Kept segments that did not continue their chain, removed (their file names).
            var dropped: [String] = []
            /// Kept segments whose points their chain holds already, removed (their file names).
            var alreadyThere: [String] = []
            var failure: (any Error)?
            /// Ended by the run's stop: between two segments, or a request under way failed
            /// after a signal (the rest stay kept).
            var stopped = false
        }

        /// Takes in the starts that finished: their kept points counted and said, then the store
        /// followed (`resume`), or its failure said and tried again (see `start`). A start the
        /// run's stop ended leaves the store not followed and its kept points where they are for
        /// the next run: no failure, unless an earlier try failed.
        func settleStarts() {
            let done = startsDone.withLock { list -> [(Replica, OutboxSent)] in defer { list = [] }; return list }
            for (replica, sent) in done {
                replica.starting = false
                if sent.points > 0 {
                    replica.summary.keptSent = (replica.summary.keptSent ?? 0) + sent.points
                    replica.summary.uploadedBytes += sent.bytes
                    replica.summary.requests += sent.sent
                    replica.summary.points += sent.points
                    replica.summary.segments += sent.sent
                    if let last = sent.lastDurable { replica.summary.lastDurable = Date(timeIntervalSince1970: Double(last) / 1000) }
                    say("\(replica.store.path): \(Format.plural(sent.points, "point", "points")) an earlier run kept while the repository did not take them written (\(Format.plural(sent.sent, "segment", "segments")))")
                }
                if !sent.alreadyThere.isEmpty {
                    let count = sent.alreadyThere.count
                    let text = "\(replica.store.path): \(Format.plural(count, "kept segment's points are", "kept segments' points are")) in \(repository.location) already "
                        + "(written before the run that kept \(count == 1 ? "it" : "them") stopped, or by a later run that followed on without \(outbox.folder)); removed from the outbox: \(sent.alreadyThere.joined(separator: ", "))"
                    if events != nil { say(text) } else { Replicate.logger.notice("\(text)") }
                }
                if !sent.dropped.isEmpty {
                    let count = sent.dropped.count
                    let text = "\(replica.store.path): \(Format.plural(count, "kept segment does", "kept segments do")) not continue \(count == 1 ? "its" : "their") chain in \(repository.location) "
                        + "(the chain was pruned, or followed on by a run that did not see \(outbox.folder)) and \(count == 1 ? "was" : "were") removed: \(sent.dropped.joined(separator: ", "))"
                    if events != nil { say(text) } else { Replicate.logger.warning("\(text)") }
                }
                // A store whose earlier tries failed, stopped before this one wrote anything, keeps
                // their failure (what the run ends with); one that wrote some, or finished as the
                // run stopped, is no failure.
                if sent.stopped, replica.outboxStart != nil, sent.sent == 0 { continue }
                if sent.stopped {
                    replica.outboxStart = nil
                    let left = outbox.kept(store: replica.key).count
                    replica.summary.notFollowed = left == 0
                        ? "the run stopped as the points an earlier run kept were written: the next run takes the store up"
                        : "the run stopped while the points an earlier run kept were being written: "
                            + "\(Format.plural(left, "segment stays", "segments stay")) in \(outbox.folder), written first by the next run"
                    replica.summary.notFollowedStatus = 0
                    replica.startStopped = true
                    continue
                }
                if let error = sent.failure {
                    let failure = StoreOpsError.wrapping(error) ?? StoreOpsError(.ioError, "\(error)")
                    let tries = (replica.outboxStart?.tries ?? 0) + 1
                    let pause = min(30, 0.5 * Double(1 << min(6, tries)))
                    // The cause without the names that change at every try (a lock object's random id
                    // in "writing …/locks/9f3a…: no space left"): said once while it is the same.
                    let cause = "\(failure.kind): " + failure.message.replacing(/[0-9a-f]{8,}/, with: "#")
                    if replica.outboxStart?.cause != cause {
                        let text = "\(replica.store.path): \(failure.message); it is not followed until they are (tried again, backing off up to 30 s)"
                            + (replicas.count > 1 ? "; the other stores are followed" : "")
                        if events != nil { say(text) } else { Replicate.logger.warning("\(text)") }
                    }
                    replica.outboxStart = (cause, tries)
                    replica.summary.notFollowed = "\(failure.message) (they stay there and go out first once the repository takes them)"
                    replica.summary.notFollowedStatus = failure.status.rawValue
                    replica.retryAfter = Date().addingTimeInterval(pause)
                    continue
                }
                if let failed = replica.outboxStart {
                    // At the level its failure was said (a journal at the default level showed "not followed" and never its end).
                    let text = "\(replica.store.path): the points an earlier run kept were written after \(Format.plural(failed.tries, "failed try", "failed tries")); the store is followed"
                    if events != nil { say(text) } else { Replicate.logger.warning("\(text)") }
                    replica.outboxStart = nil
                }
                replica.summary.notFollowed = nil
                replica.summary.notFollowedStatus = nil
                outbox.removeIfEmpty()
                resume(replica)
            }
        }

        /// At the start (on the `starts` thread: it touches no replica): the segments an earlier
        /// run kept in the outbox (the repository did not take them) are written first, each where
        /// it continues its chain in the repository; `resume` then takes the chain up after them.
        /// One that cannot continue its chain (the chain was pruned, or followed on by a run that
        /// did not see the outbox) is removed, and said. When the repository does not take them
        /// the failure is returned (`settleStarts` tries again): what is left stays in the outbox;
        /// what was written and removed before it is counted. The run's stop ends it between two
        /// segments.
        func sendOutbox(key: String, store: String) -> OutboxSent {
            var result = OutboxSent()
            let kept = outbox.kept(store: key)
            guard !kept.isEmpty else { return result }
            do {
                let zstd = try ZstdFrames(level: 1)
                var next: [String: Int] = [:]
                let timeline: PointTimeline
                do { timeline = try PointTimeline.load(repository, store: key) } catch {
                    let cause = StoreOpsError.wrapping(error) ?? StoreOpsError(.ioError, "\(error)")
                    throw StoreOpsError(cause.kind, "\(Format.plural(kept.count, "segment", "segments")) of points an earlier run kept in \(outbox.folder) "
                                        + "cannot go out: the store's points in \(repository.location) cannot be read (\(cause.message))")
                }
                for chain in timeline.chains(of: key) { next[chain.id] = chain.points }
                for (k, item) in kept.enumerated() {
                    if let delay = Self.outboxSendDelay { usleep(delay) }
                    if stopping.load(ordering: .relaxed) {
                        result.stopped = true
                        return result
                    }
                    let sealed: Data
                    do { sealed = try outbox.read(item.path) } catch {
                        guard FileSystem.kind(of: item.path) == .missing else {
                            throw StoreOpsError(.ioError, "the points an earlier run kept in \(item.path) cannot be read (\((error as? StoreOpsError)?.message ?? "\(error)"))")
                        }
                        continue
                    }
                    func opens() -> Bool {
                        (try? PointSegment.openAll(sealed, name: item.name, sealer: repository.sealer, zstd: zstd, location: repository.location)) != nil
                    }
                    /// Written under a shared hold; a failure names what was kept (`what`).
                    func send(_ what: String) throws {
                        do {
                            let hold = try RepositoryHold.take(repository, operation: "replicate", exclusive: false, wait: false, sweep: false)
                            defer { hold.release() }
                            try repository.backend.write(item.name.key, sealed, point: "replicate.outbox.send")
                        } catch {
                            let cause = StoreOpsError.wrapping(error) ?? StoreOpsError(.ioError, "\(error)")
                            throw StoreOpsError(cause.kind, "\(what) an earlier run kept in \(outbox.folder) could not be written to \(repository.location): \(cause.message)")
                        }
                        result.sent += 1
                        result.bytes += UInt64(sealed.count)
                    }
                    if item.name.level == PointTimeline.stoppedLevel {
                        // A clean stop's marker, kept after its chain's points (`drain`): written
                        // when it follows the chain's last point; else (the chain went on, or the
                        // points before it were dropped) it says nothing true any more.
                        if next[item.name.chain] == item.name.to + 1, opens() { try send("the stop marker") }
                        try outbox.remove(item.path)
                        continue
                    }
                    if let expected = next[item.name.chain], expected > item.name.to {
                        // The chain holds these points already: written by the run that kept them (it
                        // was stopped before it removed the file), and maybe merged since, or by a
                        // later run that followed on without this outbox. Removed, and said (the
                        // README says so; it was silent).
                        result.alreadyThere.append(FileSystem.name(of: item.path))
                        try outbox.remove(item.path)
                        continue
                    }
                    guard next[item.name.chain] == item.name.from, opens() else {
                        result.dropped.append(FileSystem.name(of: item.path))
                        try outbox.remove(item.path)
                        continue
                    }
                    try send("\(Format.plural(kept.count - k, "segment", "segments")) of points")
                    try outbox.remove(item.path)
                    next[item.name.chain] = item.name.to + 1
                    result.points += item.name.to - item.name.from + 1
                    result.lastDurable = item.name.lastTime
                }
            } catch {
                result.failure = error
                // A signal ends a request under way (it failed for that, most likely).
                result.stopped = stopping.load(ordering: .relaxed) || ProcessSignals.received != nil
            }
            return result
        }

        /// A durable level-0 segment, held for the chain's next merge. A merge's members are
        /// consecutive: a segment that does not follow what is held (or is too large to merge:
        /// it is read as it is) merges what is held first.
        /// - Parameter feed: gives the merge's digest the segment's commits; nil (a segment that
        ///   cannot be opened): the merge has no digest.
        func offer(_ replica: Replica, name: SegmentName, sealed: Data, due: Bool = true,
                   feed: ((inout PointDigest.Builder) -> Void)? = nil) {
            guard options.mergeInterval > 0 else { return }
            if let last = replica.mergeable.last?.name, last.chain != name.chain || last.to + 1 != name.from { merge(replica, now: true) }
            guard sealed.count < PointMerge.memberBytes else {
                merge(replica, now: true)
                return
            }
            if replica.mergeable.isEmpty { replica.digest = options.digests ? PointDigest.Builder(store: replica.key, chain: name.chain, from: name.from) : nil }
            if var digest = replica.digest {
                replica.digest = nil   // one owner while it grows: its pages are not copied
                if let feed { feed(&digest) } else { digest.usable = false }
                replica.digest = digest
            }
            replica.mergeable.append((name, sealed))
            replica.mergeableBytes += sealed.count
            if replica.mergeableBytes >= PointMerge.mergeBytes { merge(replica, now: true) } else if due { merge(replica, now: false) }
        }

        /// Merges the held segments into one level-1 object when the oldest is `mergeInterval`
        /// old (`now`: at once): written, read back and opened, then the segments it holds are
        /// removed. Killed in between, both are listed; the merged one is read, and the next run
        /// (or a prune) removes the others. A failed merge leaves the segments as they are.
        func merge(_ replica: Replica, now: Bool) {
            guard let oldest = replica.mergeable.first?.name else { return }
            guard now || Replicate.ms(Date()) - oldest.firstTime >= Int64(options.mergeInterval * 1000) else { return }
            // One segment alone waits for the next (unless the chain ends: then it stays as it is).
            guard now || replica.mergeable.count >= 2 else { return }
            let held = replica.mergeable
            let digest = replica.digest
            replica.mergeable = []
            replica.mergeableBytes = 0
            replica.digest = nil
            guard held.count >= 2 else { return }
            merges.async { [self] in
                do {
                    let (name, sealed) = try PointMerge.seal(held, sealer: repository.sealer)
                    let hold = try RepositoryHold.take(repository, operation: "replicate", exclusive: false, wait: false, sweep: false)
                    defer { hold.release() }
                    try repository.backend.write(name.key, sealed, point: "replicate.merge")
                    guard let back = try repository.backend.read(name.key) else {
                        throw StoreOpsError(.ioError, "the merged segment \(repository.backend.describe(name.key)) cannot be read back")
                    }
                    _ = try PointMerge.members(back, name: name, sealer: repository.sealer, location: repository.location)
                    for member in held { try repository.backend.remove(member.name.key, point: "replicate.merge.remove") }
                    count(replica.key, merges: 1, bytes: sealed.count, requests: 2 + held.count)
                } catch {
                    Replicate.logger.warning("merging points failed; their segments stay as they are", metadata: [
                        "store": "\(replica.store.path)", "segments": "\(held.count)", "error": "\(describe(error))"])
                    return
                }
                if let digest, digest.from == held[0].name.from, digest.to == held[held.count - 1].name.to {
                    writeDigest(digest, store: replica.store.path, rank: 1)
                }
            }
        }

        /// Per store: the digests of each rank written since the last of the next rank began,
        /// consecutive (touched on the merge thread only).
        var ladders: [String: [[SegmentName]]] = [:]
        /// Per store: its chain's last milestone or base (what the next milestone is made over;
        /// touched on the merge thread only).
        var milestoneParents: [String: PointMilestone.Parent] = [:]

        /// The milestone over a digest of `PointMilestone.rank` just written, when the follower
        /// holds the state its span starts from. A failure costs only speed (restores replay the
        /// chain from its base or last milestone), and ends the chain's milestones until its next base.
        func writeMilestone(_ digest: PointDigest.Builder, store: String) {
            guard let parent = milestoneParents[digest.store] else { return }
            milestoneParents[digest.store] = nil
            do {
                guard let next = try PointMilestone.write(digest, over: parent, store: store, repository: repository, level: options.level) else { return }
                milestoneParents[digest.store] = next
                count(digest.store, milestones: 1, bytes: Int(next.record.added.storedBytes), requests: 3)
                Replicate.logger.debug("milestone written", metadata: ["store": "\(store)", "point": "\(next.point)", "record": "\(next.record.id)"])
            } catch {
                Replicate.logger.warning("writing a milestone failed; restores replay the chain from its base or last milestone instead", metadata: [
                    "store": "\(store)", "points": "\(digest.from)-\(digest.to)", "error": "\(describe(error))"])
            }
        }

        /// Writes a digest (read back and opened first: a restore takes it instead of what it
        /// spans), then one of the next rank over every `fanIn` consecutive ones of this rank.
        /// A failure is logged and costs only speed: restores replay the segments instead.
        func writeDigest(_ digest: PointDigest.Builder, store: String, rank: Int) {
            do {
                guard let (name, sealed) = try digest.seal(sealer: repository.sealer, zstd: mergeZstd) else { return }
                let hold = try RepositoryHold.take(repository, operation: "replicate", exclusive: false, wait: false, sweep: false)
                defer { hold.release() }
                try repository.backend.write(name.key, sealed, point: "replicate.digest")
                guard let back = try repository.backend.read(name.key) else {
                    throw StoreOpsError(.ioError, "the digest \(repository.backend.describe(name.key)) cannot be read back")
                }
                _ = try PointSegment.open(back, name: name, sealer: repository.sealer, zstd: mergeZstd, location: repository.location)
                count(name.store, digests: 1, bytes: sealed.count, requests: 2)
                if rank == PointMilestone.rank, options.milestones { writeMilestone(digest, store: store) }
                guard rank < PointDigest.maxRank else { return }   // the top rank is not digested further
                var ladder = ladders[name.store] ?? []
                while ladder.count < rank { ladder.append([]) }
                if let last = ladder[rank - 1].last, last.chain != name.chain || last.to + 1 != name.from { ladder[rank - 1] = [] }
                ladder[rank - 1].append(name)
                let full = ladder[rank - 1].count >= PointDigest.fanIn ? ladder[rank - 1] : nil
                if full != nil { ladder[rank - 1] = [] }
                ladders[name.store] = ladder
                guard let full, let first = full.first else { return }
                var next = PointDigest.Builder(store: first.store, chain: first.chain, from: first.from)
                for part in full {
                    guard let sealed = try repository.backend.read(part.key) else { return }
                    let (segment, pages, files) = try PointSegment.open(sealed, name: part, sealer: repository.sealer, zstd: mergeZstd, location: repository.location)
                    next.add(segment, name: part, pages: pages, files: files)
                }
                hold.release()
                writeDigest(next, store: store, rank: rank + 1)
            } catch {
                Replicate.logger.warning("writing a digest of points failed; restores read their segments instead", metadata: [
                    "store": "\(store)", "points": "\(digest.from)-\(digest.to)", "error": "\(describe(error))"])
            }
        }

        /// At a resume: removes the segments a merge killed before its removals left (each is
        /// covered by the merged one written before them, and no restore reads it).
        func tidyMerges(_ chains: [PointTimeline.Chain]) throws {
            let leftovers = chains.flatMap { $0.redundant.filter { $0.level == 0 } }
            guard !leftovers.isEmpty else { return }
            let hold = try RepositoryHold.take(repository, operation: "replicate", exclusive: false, wait: false, sweep: false)
            defer { hold.release() }
            for name in leftovers { try repository.backend.remove(name.key, point: "replicate.merge.tidy") }
        }

        /// At a resume: takes the chain's unmerged segments up again (those of runs too short to
        /// merge them), merging them now.
        func takeUpMerges(_ chain: PointTimeline.Chain, replica: Replica) throws {
            guard options.mergeInterval > 0 else { return }
            let tail = chain.segments.dropFirst().reversed().prefix { $0.level == 0 }.reversed().suffix(600)
            guard tail.count >= 2 else { return }
            for name in tail {
                guard let sealed = try repository.backend.read(name.key) else { continue }
                // Opened too, for the merge's digest (a segment that does not open is merged as it is, with no digest).
                let opened = options.digests ? try? PointSegment.open(sealed, name: name, sealer: repository.sealer, zstd: zstd, location: repository.location) : nil
                offer(replica, name: name, sealed: sealed, due: false, feed: opened.map { segment, pages, files in { $0.add(segment, pages: pages, files: files) } })
            }
            merge(replica, now: true)
        }

        /// Writes what waits, a segment after another, until nothing does, a write fails, or the
        /// stop's time comes (a backlog read back from the spool is more than one segment).
        /// `until`: the uploads are waited for until then at most (then it returns, what is under
        /// way going on).
        func flushAll(_ replica: Replica, until: Date? = nil) {
            guard finishUploads(by: until) else { return }
            replica.uploadRetryAfter = .distantPast
            while !replica.pending.isEmpty || !replica.parked.isEmpty {
                let before = (replica.pending.count, replica.parked.count)
                flush(replica)
                guard finishUploads(by: until) else { return }
                // Progress: fewer waiting, or fewer kept with none waiting more (a kept one written,
                // or what waited kept when the repository failed).
                if replica.pending.count >= before.0 && replica.parked.count >= before.1 { break }
                if let finishBy = ProcessSignals.finishBy, Date() >= finishBy { break }
                if ProcessSignals.received != nil, ProcessSignals.finishBy == nil { break }   // the loop drains it, within its time
            }
        }

        /// The drain's last step: what still waits (the repository failed, or the drain's time ran
        /// out) is kept in the outbox, whatever the time: keeping is local and quick, and the
        /// next run writes it first. Not before a chain exists (nothing can be numbered).
        func keepWaiting(_ replica: Replica) {
            guard replica.chain != nil, !replica.pending.isEmpty, !replica.uploading else { return }
            let pause = replica.uploadRetryAfter
            replica.uploadRetryAfter = .distantFuture   // `flush` keeps rather than writes
            defer { replica.uploadRetryAfter = pause }
            while !replica.pending.isEmpty {
                let before = replica.pending.count
                flush(replica)
                if replica.pending.count >= before { break }   // the outbox cannot take them: said as unwritten
            }
        }

        /// Waits for the uploads under way (the drain at the end); with `until`, until then at
        /// most (false: still under way).
        @discardableResult
        func finishUploads(by until: Date? = nil) -> Bool {
            if let until {
                let done = DispatchSemaphore(value: 0)
                uploads.async { done.signal() }
                guard done.wait(timeout: .now() + max(0, until.timeIntervalSinceNow)) == .success else { return false }
            } else {
                uploads.sync {}
            }
            settleUploads()
            return true
        }

        func write(_ segment: PointSegment, pages: [[UInt8]], replica: Replica, point: String) throws {
            try writeMarker(segment, name: segment.name, replica: replica, pages: pages, point: point)
        }

        func writeMarker(_ segment: PointSegment, name: SegmentName, replica: Replica, pages: [[UInt8]] = [], point: String = "replicate.marker") throws {
            let sealed = try segment.seal(pages: pages, sealer: repository.sealer, zstd: zstd, name: name)
            let hold = try RepositoryHold.take(repository, operation: "replicate", exclusive: false, wait: false, sweep: false)
            defer { hold.release() }
            try repository.backend.write(name.key, sealed, point: point)
            replica.summary.uploadedBytes += UInt64(sealed.count)
            replica.summary.requests += 1
        }

        /// Writes what waits now (the old chain's last commits before a new chain opens).
        func flushNow(_ replica: Replica) throws {
            if let delay = ReplicateTesting.catchUpWriteDelay { usleep(delay) }
            finishUploads()
            replica.uploadRetryAfter = .distantPast
            flush(replica, whole: true)
            finishUploads()
            guard replica.pending.isEmpty, !replica.uploading else {
                throw StoreOpsError(.ioError, "the chain's last commits could not be written to \(repository.location)")
            }
        }

        /// A new chain: a base read from the store (an incremental snapshot) and its opening segment.
        /// A base every interval ("compaction") continues the chain only if the commits since its
        /// last point, read in the base's own pinned read, are written to it first.
        func makeBase(_ replica: Replica, kind: String, reason: String, expectingChange: UInt32? = nil) {
            var kind = kind
            var reason = reason
            var expectingChange = expectingChange
            // A base every interval: the repository's hold and catalog are taken on a thread of
            // their own while this one goes on reading the app's commits into the old chain. Taken
            // here, against a server that stopped answering just then, they held every read for
            // as long as it was away (15 s in a trial), and the app's checkpoints restarted the
            // -wal under it: 886 commits no point holds, a gap.
            // Every kind of base waits so (a gap's reads nothing meanwhile: its base reads the
            // whole store), the status file rewritten every sync meanwhile (it froze while a gap's
            // base waited on a server gone away: `replicate status` showed no gap).
            // The base's own preparation (the indexes listed and read, its parent's map: several
            // requests, each 80 ms against a slow bucket) is read on that thread too, so the app's
            // commits go on being read meanwhile (its -wal restarts about twice a second at 200
            // commits/s: two restarts unread are a gap).
            var prepared: Result<(RepositoryHold, PagedSnapshotWork), any Error>?
            do {
                final class Box: @unchecked Sendable {
                    let lock = NSLock()
                    var result: Result<(RepositoryHold, PagedSnapshotWork), any Error>?
                    var abandoned = false
                    let done = DispatchSemaphore(value: 0)
                }
                let box = Box()
                let repository = self.repository
                let (store, level) = (replica.store, options.level)
                Thread.detachNewThread {
                    let result = Result { () throws -> (RepositoryHold, PagedSnapshotWork) in
                        let hold = try RepositoryHold.take(repository, operation: "replicate", exclusive: false, wait: false)
                        do {
                            let work = PagedSnapshotWork(store: store, repository: repository, tags: ["replicate"], level: level, reuseUnchanged: false)
                            try work.prepare(records: try repository.catalog().records)
                            return (hold, work)
                        } catch { hold.release(); throw error }
                    }
                    box.lock.withLock {
                        // Given up on (a stop): the hold is let go here, nobody else has it.
                        if box.abandoned { if case .success(let taken) = result { taken.0.release() } } else { box.result = result }
                    }
                    box.done.signal()
                }
                var reading = kind == "compaction"
                var nextReport = Date().addingTimeInterval(options.syncInterval)
                while box.done.wait(timeout: .now() + options.pollInterval) == .timedOut {
                    // A stop asked for is not held up by a server that does not answer.
                    if let signal = ProcessSignals.received {
                        let given = box.lock.withLock { () -> Bool in
                            guard box.result == nil else { return false }
                            box.abandoned = true
                            return true
                        }
                        if given {
                            prepared = .failure(StoreOpsError(.signal(signal), "stopped by \(ProcessSignals.name(signal)) while the base waited for the repository"))
                        }
                        break
                    }
                    if Date() >= nextReport {
                        report(state: "following", stoppedBy: "")
                        nextReport = Date().addingTimeInterval(options.syncInterval)
                    }
                    guard reading else { continue }
                    switch try? replica.follower.capture() {
                    case .commits(let commits, let at)?:
                        if add(commits, at: at, to: replica) {
                            confirm(replica, at: at)
                        } else {
                            // Dropped (stalled, or the spool full): a gap, as `add` says; never
                            // points after them as if they had been written.
                            reading = false
                            if let need = replica.needsBase, need.kind == "gap" { (kind, reason) = ("gap", need.reason) }
                        }
                    case .gap(let why)?:
                        (kind, reason, reading) = ("gap", why, false)
                        replica.needsBase = ("gap", why, nil)   // should the base fail: the next one is a gap's
                        replica.summary.gapPending = why
                    case .wholeRead(let why, let change, let at)?:
                        (kind, reason, expectingChange, reading) = ("continued", why, change, false)
                        replica.wholeReadAt = replica.wholeReadAt ?? at
                        if replica.needsBase?.kind != "gap" { replica.needsBase = ("continued", why, change) }
                    case nil: reading = false
                    }
                }
                if prepared == nil { prepared = box.lock.withLock { box.result } }
            }
            var rewindTo = replica.follower.cursor
            let identitiesBefore = replica.follower.identities
            let pendingBefore = replica.pending.count
            let externalBefore = replica.external
            do {
                guard let prepared else { throw StoreOpsError(.failure, "the base's repository hold was not taken") }
                let (hold, work) = try prepared.get()
                defer { hold.release() }
                // The test hook: a slow preparation seen from here (nothing read meanwhile), so a
                // test shows the read just below is needed.
                if let delay = ReplicateTesting.basePrepareDelay { usleep(delay) }
                // What the app committed since the last read is read now, just before the base's
                // own read: else the app's checkpoints can restart the -wal twice in that time and
                // discard commits no point holds (a gap at one of three boundaries, 20 minutes
                // into SeaweedFS with a base every 5 minutes, before this).
                if kind == "compaction" {
                    switch try replica.follower.capture() {
                    case .commits(let commits, let at):
                        if add(commits, at: at, to: replica) { confirm(replica, at: at) }
                        else if let need = replica.needsBase, need.kind == "gap" { (kind, reason) = ("gap", need.reason) }
                    case .gap(let why):
                        (kind, reason) = ("gap", why)
                        // Should this base fail: the next one is a gap's (it stayed a compaction's).
                        replica.needsBase = ("gap", why, nil)
                        replica.summary.gapPending = why
                    case .wholeRead(let why, let change, let at):
                        (kind, reason, expectingChange) = ("continued", why, change)
                        replica.wholeReadAt = replica.wholeReadAt ?? at
                        if replica.needsBase?.kind != "gap" { replica.needsBase = ("continued", why, change) }
                    }
                }
                // A whole read after commits were read into the old chain (while the base waited,
                // or while the old chain's last ones went out before a base every interval: a
                // review): those commits are not written (the base drops what waits), so the span
                // is a gap, never a continuation that claims them.
                if kind == "continued", replica.pending.count > 0 {
                    (kind, reason) = ("gap", "\(reason); commits read while the base waited for the repository were not written")
                }
                // The catch-up starts where the reads so far ended (the capture just above moved
                // the cursor: from `rewindTo` it would read those commits twice).
                let catchUpFrom = replica.follower.cursor
                let time: Date
                // The new chain's first point's time: the base's read, but see below.
                var baseAt: Date?
                var boundary: ReadHold?
                // The pinned read lasts as long as copying the pages into a scratch copy, not as
                // long as hashing and packing them: the app's -wal cannot be reset under it.
                let spillTo = Replicate.baseScratch(replica.store)
                var spilled: (copy: PageSpill, source: Manifest.Source)?
                defer { spilled?.copy.close() }
                // A base packed from its copy: its own cursor, and what was read of the app's
                // commits meanwhile (needed once the new chain is open, or by the old one).
                var baseCursor: WalCursor?
                var packing: BaseReads?
                var committed = false
                // The old chain's last commits (the catch-up), added to it and written once the
                // reads beside a copied base go on; kept by the old chain if their write fails then.
                var catchUpToWrite = false
                var catchUpKept = false
                /// What was read beside the base, to the chain (the new one, or the old one going on);
                /// a gap after what could not be read back from its spool file.
                func handOn(_ reads: BaseReads) {
                    let whole = reads.forEach { commits, at, cursor in
                        guard add(commits, at: at, to: replica, cursor: cursor) else { return false }
                        confirm(replica, at: at)
                        return true
                    }
                    if !whole { unreadable(replica) }
                    reads.release()
                }
                /// A base not made after all: the follower goes back to where the old chain ends.
                func takeBackReads() {
                    if kind == "compaction", let early = packing, !early.isEmpty, early.afterBase == nil, rewindTo.map({ $0 == baseCursor }) == true {
                        // The old chain goes on (it ends at the base's state): what was read while
                        // the base was packed and committed is its next commits, not read again
                        // (the app may have restarted the -wal meanwhile: no hold kept it).
                        handOn(early)
                    } else {
                        replica.follower.rewind(to: rewindTo, identities: identitiesBefore)
                    }
                }
                do {
                    let image = try replica.follower.image(catchingUp: kind == "compaction" ? catchUpFrom : nil) { pageSize, pageCount, _, read in
                        let source = Manifest.Source(path: replica.store.path, journalMode: "wal", pageSize: pageSize, pageCount: pageCount,
                                                     fileBytes: FileSystem.size(of: replica.store.path) ?? 0,
                                                     walBytes: FileSystem.size(of: replica.store.walPath) ?? 0)
                        spilled?.copy.close()   // a read the -wal's restart made start again
                        spilled = nil
                        if let spillTo, PagedSnapshotRecord.isPageSize(pageSize), pageCount > 0 {
                            // The external-data files the pages name, read now as they are.
                            try work.prepareCopy(pageSize: pageSize, pageCount: pageCount)
                            let copy = try PageSpill(scratch: spillTo, id: work.id, pageSize: pageSize, pageCount: pageCount)
                            spilled = (copy, source)
                            try copy.fill(pageCount: pageCount, read: read)
                            Replicate.logger.debug("a base's pages copied", metadata: ["store": "\(replica.store.path)", "copy": "\(copy.file.tempPath)",
                                                                                      "kept": copy.inPageCache ? "in the page cache" : "written back as made"])
                        } else {
                            try work.copyPages(pageSize: pageSize, pageCount: pageCount, source: source, read: read, progress: nil)
                        }
                        // Still inside the pinned read: the -wal has not restarted since the base's state.
                        boundary = try? ReadHold(path: replica.store.path, busyMilliseconds: 100)
                    }
                    time = image.time
                    // A continuation is one only if the base holds that one commit and no later one.
                    if let expectingChange, image.change != expectingChange {
                        kind = "gap"
                        reason = "the -wal was truncated before its last commit was read, and more were committed before the database file was read"
                    }
                    // A continuation's base stands for its commit from the read that found it, not
                    // from its own read, which can come minutes later (the repository away): a
                    // restore in between answered the state before that commit.
                    if kind == "continued", let found = replica.wholeReadAt, found < time { baseAt = found }
                    if kind == "compaction" {
                        if let commits = image.catchUp {
                            add(commits, at: time, to: replica)
                            if spilled != nil {
                                // Written below, once the reads go on without the hold: a write
                                // (to a slow or silent bucket: up to a request's deadline) held
                                // here held back every checkpoint of the app meanwhile.
                                catchUpToWrite = true
                            } else {
                                try flushNow(replica)
                                rewindTo = replica.follower.cursor   // the old chain now ends where the base begins
                            }
                        } else {
                            kind = "gap"
                            reason = "the -wal no longer continued the chain when the new base was read"
                        }
                    }
                    if let spilled {
                        // The store is no longer held: its pages are packed from the copy on one
                        // lane while the other reads what the app commits as usual (woken by the
                        // -wal's writes; kept for the new chain). The boundary hold goes with the
                        // first of those reads (any reader holds the -wal: it cannot restart under
                        // it); the reads go on while the base is checked and committed, and a last
                        // read after the commit takes a new one, held until the new chain's
                        // opening is written and the loop's next read.
                        baseCursor = replica.follower.cursor
                        let reads = BaseReads(replica: replica, boundary: boundary, limit: spoolLimit, memoryLimit: options.spoolMemory, spoolFolder: options.resolvedSpoolFolder)
                        packing = reads
                        boundary = nil
                        let poll = options.pollInterval
                        // A thread of its own (not a shared pool's lane, which one core would run only after the packing).
                        let readingDone = DispatchSemaphore(value: 0)
                        let watcher = FolderWatcher(folders: [reads.replica.store.folder])
                        let reader = Thread {
                            defer { readingDone.signal() }
                            // As the loop: a change the read did not find as a commit (the app
                            // writes its -wal frames before it publishes the commit in the
                            // wal-index, which no inotify event shows) is read again 5, 10, 20 …
                            // 160 ms later, not at the next event or poll. Without it a commit
                            // could wait for the app's next write unread, and a TRUNCATE checkpoint
                            // 100 ms after it took it first: a gap (a test's catch-up write of 4 s).
                            var settle: TimeInterval?
                            var woke = false
                            while !reads.lock.withLock({ reads.packed }), reads.reading {
                                let before = reads.early.count
                                reads.read(holding: false)
                                settle = Loop.settle(after: settle, found: reads.early.count != before, woke: woke)
                                woke = watcher.wait(seconds: min(poll, settle ?? poll))
                            }
                        }
                        // The catch-up's segments are made from the follower as it stands now.
                        replica.followerFacts = (replica.follower.identities, replica.follower.confirmedState)
                        // The first read here, at once: it lets the boundary hold go (a thread
                        // that starts late under load kept it meanwhile).
                        reads.read(holding: false)
                        reader.start()
                        do {
                            defer {
                                reads.lock.withLock { reads.packed = true }
                                watcher.wake()   // the reader ends now, not after its poll interval (250 ms a base)
                                readingDone.wait()
                                replica.followerFacts = nil
                            }
                            if catchUpToWrite {
                                // The old chain's last commits, written with the reads going on
                                // (the first takes the boundary hold and lets it go). Should the
                                // write fail, they stay the old chain's (the follower has read on:
                                // no rewind can read them again), and the reads are its next ones.
                                rewindTo = baseCursor   // the old chain ends where the base begins (the reads go on from there)
                                do { try flushNow(replica) } catch {
                                    catchUpKept = true
                                    throw error
                                }
                            }
                            // Packed from the copy, no read held: the hashing, compressing and
                            // writing on lanes in the idle class (`IOPace.politely`), this thread
                            // too (it reads the copy into them), so the app keeps the cores it
                            // wants; the reading thread and the loop stay in the normal class.
                            // (A base streamed from its read is not: that would hold the -wal longer.)
                            let pack = {
                                try work.copyPages(pageSize: spilled.copy.pageSize, pageCount: spilled.copy.pageCount, source: spilled.source,
                                                   read: spilled.copy.read, progress: nil, externalDataPacked: true)
                            }
                            if options.pace { try IOPace.politely(pack) } else { try pack() }
                            spilled.copy.close()
                            // Checked and committed with the reads still going on, no hold kept:
                            // through a repository that answers slowly or not at all the commit
                            // takes as long as its retries (35 s in a trial), and a hold kept
                            // meanwhile held back every checkpoint of the app (its -wal grew to
                            // 277 MiB). The reads keep each commit the app makes as before.
                            try work.check()
                            try work.commit()
                            committed = true
                        }
                        // The last read takes the hold kept until the chain's opening is written (a few tries: a read can be busy).
                        var held = false
                        for _ in 0..<3 where reads.reading && !held { held = reads.read(holding: true) }
                        boundary = reads.boundary
                        Replicate.logger.debug("a base packed from its scratch copy", metadata: ["store": "\(replica.store.path)",
                                               "commits read meanwhile": "\(reads.commitCount)", "reads": "\(reads.early.count)"])
                        // No read got one: a hold taken now still keeps the -wal from restarting from here on.
                        if !held, boundary == nil, reads.afterBase == nil { boundary = try? ReadHold(path: replica.store.path, busyMilliseconds: 100) }
                    }
                    if !committed {
                        try work.check()
                        try work.commit()
                    }
                } catch {
                    work.abandon()
                    if !catchUpKept, replica.pending.count > pendingBefore {
                        let dropped = Replicate.held(replica.pending[pendingBefore...])
                        replica.pendingBytes -= dropped.memory
                        replica.spooledBytes -= dropped.spooled
                        replica.pending.removeLast(replica.pending.count - pendingBefore)
                        if replica.seenAt.count > pendingBefore { replica.seenAt.removeLast(replica.seenAt.count - pendingBefore) }
                    }
                    // The catch-up's files are carried again with it (at worst twice, never lost);
                    // a catch-up kept by the old chain carries them already.
                    if !catchUpKept { replica.external = externalBefore }
                    takeBackReads()
                    throw error
                }
                guard let record = work.record, let cursor = baseCursor ?? replica.follower.cursor else { throw StoreOpsError(.failure, "the base was not recorded") }
                let previous = replica.chain
                let afterTime = replica.lastDurableTime
                let (nextBefore, baseTimeBefore, lastTimeBefore) = (replica.next, replica.baseTime, replica.lastTime)
                merge(replica, now: true)   // the old chain's last segments
                let pointTime = baseAt ?? time
                replica.chain = record.id
                replica.baseTime = pointTime
                replica.next = 1
                clearWaiting(replica)
                replica.pendingCursor = cursor
                replica.lastTime = Replicate.ms(pointTime)
                var opening = replica.segment(level: 0, from: 0, to: 0, cursor: cursor, commits: [])
                opening.opening = .init(kind: kind, reason: reason, after: previous, afterTime: afterTime)
                opening.baseTime = Replicate.ms(pointTime)
                let sealed = try opening.seal(pages: [], sealer: repository.sealer, zstd: zstd, name: opening.name)
                do { try repository.backend.write(opening.name.key, sealed, point: "replicate.opening") } catch {
                    // A base no chain opens is only a snapshot; take it back rather than leave one per retry.
                    try? repository.backend.remove(PagedSnapshotRecord.key(record.id), point: "replicate.opening.undo")
                    replica.chain = previous
                    (replica.next, replica.baseTime, replica.lastTime) = (nextBefore, baseTimeBefore, lastTimeBefore)
                    takeBackReads()
                    throw error
                }
                replica.summary.uploadedBytes += record.added.storedBytes + UInt64(sealed.count)
                replica.summary.requests += 2
                replica.summary.bases.append(record.id)
                replica.summary.notFollowed = nil
                replica.summary.notFollowedStatus = nil
                // The repository took the base: a write failure said before is over (with nothing
                // kept waiting for it), or an idle store's status said "writing fails" until its
                // next commit went out.
                if replica.parked.isEmpty { replica.summary.lastError = nil }
                if kind == "gap" { replica.summary.gaps.append(Gap(at: time, reason: reason)) }
                replica.summary.gapPending = nil
                replica.summary.notProtected = nil
                replica.lastDurableTime = Replicate.ms(pointTime)
                replica.confirmedTime = Replicate.ms(time)   // no commit came up to the base's read
                replica.needsBase = nil
                if kind != "compaction" { replica.wholeReadAt = nil }
                replica.boundaryHold = boundary
                // What was read while the base was packed opens the new chain.
                if let packing { handOn(packing) }
                if let afterBase = packing?.afterBase, replica.needsBase == nil { replica.needsBase = afterBase }
                // A base follows at once (no capture clears the hold on that way): nothing to hold for.
                if replica.needsBase != nil { replica.boundaryHold = nil }
                // The chain's milestones start over from its new base (on the merge thread, after the old chain's last merges).
                let chainID = record.id
                merges.async { [self] in self.milestoneParents[replica.key] = PointMilestone.Parent(chain: chainID, point: 0, record: record, map: nil) }
                replica.external = ExternalFolderWatch(folder: replica.store.externalDataPath, known: record.externalFileSet.mapValues(\.bytes))
                say("\(replica.store.path): base \(record.id) (\(kind): \(reason)), \(Format.bytes(record.added.storedBytes)) added")
                if let failed = replica.baseFailure {
                    Replicate.logger.notice("a base was made after \(Format.plural(failed.tries, "failed try", "failed tries"))", metadata: ["store": "\(replica.store.path)", "base": "\(record.id)"])
                    replica.baseFailure = nil
                }
            } catch {
                // Stopped (SIGTERM, SIGINT) while the base was made: a stop asked for, not a store
                // that could not be followed; the run ends as any stop does (0), saying so.
                if case .signal? = StoreOpsError.wrapping(error)?.kind, let signal = ProcessSignals.received {
                    let first = replica.summary.bases.isEmpty && !replica.summary.resumed
                    let why = "stopped by \(ProcessSignals.name(signal)) while its \(first ? "first " : "")base was made"
                        + (first ? ": nothing of it is protected yet; the next run makes it" : ": the next run makes it")
                    say("\(replica.store.path): \(why)")
                    // Still not followed, and the status file, the job log and the metrics say so; with
                    // status 0 it does not make the run a failure (a stop was asked for).
                    if first {
                        replica.summary.notFollowed = why
                        replica.summary.notFollowedStatus = 0
                    }
                    replica.retryAfter = Date().addingTimeInterval(max(1, options.syncInterval))
                    return
                }
                // The chain broke and no base takes it up yet: in the status file while it lasts.
                if kind == "gap" || kind == "continued", replica.chain != nil {
                    replica.summary.notProtected = notProtected(replica, reason: reason, cause: describe(error))
                }
                // Never followed in this run: no base made, no chain taken up (a resume that
                // found a gap or failed sets the chain, yet follows nothing).
                if replica.summary.bases.isEmpty, !replica.summary.resumed {
                    replica.summary.notFollowed = "its first base failed: \(describe(error))"
                    replica.summary.notFollowedStatus = StoreOpsError.wrapping(error)?.status.rawValue ?? ExitStatus.failure.rawValue
                }
                // Said once for each cause (a store that stays unreadable would otherwise log
                // every sync interval); the count goes on.
                // Compared without the random names in it (a lock object's, a temporary's): the
                // same full disk read as a new cause at every retry (a trial).
                let cause = describe(error)
                func shape(_ text: String) -> String { text.replacing(/[0-9a-f]{8,}|tmp-storectl-[0-9]+-L?[0-9a-z]+/, with: "#") }
                if replica.baseFailure.map({ shape($0.cause) }) != shape(cause) {
                    Replicate.logger.warning("making a base failed; trying again, backing off from \(Format.duration(max(1, options.syncInterval))) to 30 s (said again only when the cause changes)",
                                             metadata: ["store": "\(replica.store.path)", "error": "\(cause)"])
                }
                replica.baseFailure = (cause, (replica.baseFailure?.tries ?? 0) + 1)
                // Backing off (up to 30 s) while it keeps failing: each try against a repository
                // gone away holds the loop for its retries.
                let tries = replica.baseFailure?.tries ?? 1
                let backOff = Date().addingTimeInterval(min(30, max(1, options.syncInterval) * Double(1 << min(5, tries - 1))))
                if kind == "compaction", replica.needsBase?.kind == "compaction" {
                    // A base every interval: the old chain goes on, and so do its reads (the loop
                    // did not read at all meanwhile, and the app's checkpoints could take unread
                    // commits: a gap); the base is tried again after the back-off.
                    replica.needsBase = nil
                    replica.baseNotBefore = backOff
                } else {
                    replica.retryAfter = backOff
                }
            }
        }
    }
}

/// What a base packed from its scratch copy reads of the app's commits meanwhile (on a thread of
/// its own, while the base is packed and committed, then once more after it), for the new chain.
/// Past `memoryLimit` of pages the oldest reads go to a spool file of their own (`CommitSpool`:
/// unnamed, gone with the process), as waiting commits do: a base committed through a repository
/// that answers slowly reads on as long as it takes, up to `limit` in all (then a gap).
private final class BaseReads: @unchecked Sendable {
    /// One read's commits: in memory, or their pages in the spool file.
    struct Batch {
        var commits: [WalCommit]
        var spooled: [(frame: UInt32, pageCount: UInt32, pages: [UInt32], ref: CommitSpool.Ref)]?
        var at: Date
        var cursor: WalCursor
        var bytes: Int
    }
    let lock = NSLock()
    var packed = false
    private(set) var early: [Batch] = []
    var reading = true
    var afterBase: (kind: String, reason: String, change: UInt32?)?
    var boundary: ReadHold?
    /// The pages held in `early` (memory and spool file): past `limit` they are dropped and a gap follows.
    var bytes = 0
    private var inMemory = 0
    /// The first read still in memory (those before it are in the spool file).
    private var firstInMemory = 0
    let limit: Int
    let memoryLimit: Int
    let spoolFolder: String
    private var spool: CommitSpool?
    let replica: Replicate.Replica

    init(replica: Replicate.Replica, boundary: ReadHold?, limit: Int, memoryLimit: Int, spoolFolder: String) {
        (self.replica, self.boundary, self.limit, self.memoryLimit, self.spoolFolder) = (replica, boundary, limit, memoryLimit, spoolFolder)
    }

    var isEmpty: Bool { early.isEmpty }
    var commitCount: Int { early.reduce(0) { $0 + ($1.spooled?.count ?? $1.commits.count) } }

    /// Each read's commits in order, read back from the spool file where they went there; stops
    /// when `body` says so. False when a spooled read cannot be read back (what follows it is
    /// not handed on either).
    func forEach(_ body: ([WalCommit], Date, WalCursor) -> Bool) -> Bool {
        for index in early.indices {   // by index: a copy of the array iterated would hold every batch to the end
            let batch = early[index]
            var commits = batch.commits
            if let spooled = batch.spooled {
                guard let spool else { return false }
                do {
                    commits = try spooled.map { item in
                        let pages = try spool.read(item.ref)
                        return WalCommit(frame: item.frame, pageCount: item.pageCount, pages: Array(zip(item.pages, pages)))
                    }
                } catch {
                    Replicate.logger.warning("reading the commits read while a base was made back from their spool file failed", metadata: [
                        "store": "\(replica.store.path)", "error": "\(error)"])
                    return false
                }
            }
            guard body(commits, batch.at, batch.cursor) else { return true }
            early[index].commits = []   // handed on: not held twice meanwhile
        }
        return true
    }

    /// Lets go of what was read (the spool file too).
    func release() {
        early = []
        spool = nil
        (bytes, inMemory, firstInMemory) = (0, 0, 0)
    }

    /// Drops what was read: a gap follows the base, so (read without taking the hold) the
    /// boundary hold goes too, as at a gap the follower finds.
    private func dropAll(_ why: String, holding: Bool) {
        reading = false
        release()
        afterBase = ("gap", why, nil)
        if !holding { boundary = nil }
    }

    /// One read of the app's commits (on the reading thread, then once more after the
    /// packing); with `holding`, whether it took the hold.
    @discardableResult
    func read(holding: Bool) -> Bool {
        guard reading else { return false }
        var hold: ReadHold?
        let outcome = try? replica.follower.capture(holding: holding ? { hold = try? ReadHold(path: self.replica.store.path, busyMilliseconds: 100) } : nil)
        switch outcome {
        case .commits(let commits, let at)?:
            if let cursor = replica.follower.cursor, !commits.isEmpty {
                let size = commits.reduce(0) { $0 + $1.pages.reduce(0) { $0 + $1.1.count } }
                early.append(Batch(commits: commits, spooled: nil, at: at, cursor: cursor, bytes: size))
                bytes += size
                inMemory += size
                if bytes > limit {
                    dropAll("more than \(Format.bytes(UInt64(limit))) of commits were read while a base was made", holding: holding)
                    return false
                }
                // Past the memory's share, the oldest reads in memory to the spool file, down to half of it.
                if inMemory > memoryLimit {
                    while inMemory > memoryLimit / 2, firstInMemory < early.count {
                        let k = firstInMemory
                        do {
                            let file = spool ?? CommitSpool(folder: spoolFolder)
                            spool = file
                            early[k].spooled = try early[k].commits.map { commit in
                                (commit.frame, commit.pageCount, commit.pages.map(\.page), try file.append(commit.pages.map(\.bytes)))
                            }
                        } catch {
                            dropAll("the commits read while a base was made could not be kept in the spool file (\(error))", holding: holding)
                            return false
                        }
                        early[k].commits = []
                        inMemory -= early[k].bytes
                        firstInMemory += 1
                    }
                }
            }
            if !holding { boundary = nil } else if let hold {
                boundary = hold
                return true
            }
        case .gap(let why)?:
            reading = false
            afterBase = ("gap", why, nil)
            if !holding { boundary = nil }   // the chain is broken here: nothing to hold the -wal for
        case .wholeRead(let why, let change, let at)?:
            reading = false
            if !holding { boundary = nil }
            afterBase = ("continued", why, change)
            replica.wholeReadAt = replica.wholeReadAt ?? at
        case nil:
            // A read that failed (busy: an app committing without pause): the next one tries
            // again, the hold kept meanwhile (let go, the app's checkpoints could restart the -wal
            // under unread commits). An app's TRUNCATE checkpoint waiting on the hold does not
            // fail it (`WalFollowerPinTests`).
            break
        }
        return false
    }
}

/// Wakes the loop when something changes in the stores' folders (inotify: the -wal is written at
/// every commit), or after a timeout, or when another thread calls `wake()`.
final class FolderWatcher: @unchecked Sendable {
    private let fd: Int32
    /// A pipe `wake()` writes to and `wait` polls beside the folders: a thread waiting out its
    /// poll interval ends at once when there is no more to wait for (a base's packing done),
    /// not up to a whole interval later.
    private let wakeRead: Int32, wakeWrite: Int32

    init(folders: [String]) {
        var descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        if descriptor >= 0 {
            let mask = UInt32(IN_MODIFY | IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_CLOSE_WRITE)
            for folder in folders where inotify_add_watch(descriptor, folder, mask) < 0 {
                Glibc.close(descriptor)
                descriptor = -1
                break
            }
        }
        fd = descriptor
        var ends: [Int32] = [-1, -1]
        if pipe(&ends) == 0 {
            for end in ends {
                _ = fcntl(end, F_SETFD, FD_CLOEXEC)
                _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            }
        } else {
            ends = [-1, -1]
        }
        wakeRead = ends[0]
        wakeWrite = ends[1]
    }

    deinit {
        for descriptor in [fd, wakeRead, wakeWrite] where descriptor >= 0 { Glibc.close(descriptor) }
    }

    /// Ends a `wait` under way in another thread (or the next one) at once.
    func wake() {
        guard wakeWrite >= 0 else { return }
        var byte: UInt8 = 1
        _ = Glibc.write(wakeWrite, &byte, 1)
    }

    /// Sleeps `seconds`, or less when a file named in `urgent` is written meanwhile. Returns
    /// whether anything in the folders changed meanwhile (then no event is left to wait for: the
    /// caller reads at once). Without inotify: a plain sleep, and false (the caller's poll
    /// interval paces the reads, as before).
    func pause(seconds: TimeInterval, unlessWritten urgent: Set<String>) -> Bool {
        guard fd >= 0 else {
            Waits.sleep(seconds)
            return false
        }
        let end = Date().addingTimeInterval(seconds)
        var changed = false
        var buffer = [UInt8](repeating: 0, count: 8192)
        while true {
            let left = end.timeIntervalSinceNow
            guard left > 0 else { return changed }
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&entry, 1, Waits.pollMilliseconds(left)) > 0 else { continue }
            while true {
                let count = read(fd, &buffer, buffer.count)
                guard count > 0 else { break }
                changed = true
                // struct inotify_event: wd, mask, cookie, len (4 bytes each), then len bytes of name.
                var offset = 0
                while offset + 16 <= count {
                    let length = buffer.withUnsafeBytes { Int($0.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self)) }
                    let nameEnd = min(count, offset + 16 + length)
                    let name = String(decoding: buffer[(offset + 16)..<nameEnd].prefix { $0 != 0 }, as: UTF8.self)
                    if urgent.contains(name) { return true }
                    offset += 16 + length
                }
            }
        }
    }

    /// Waits until something in the folders changes, `wake()` is called, or `seconds` pass
    /// (without inotify: until a wake or the time). Returns whether a change in the folders
    /// ended it.
    @discardableResult
    func wait(seconds: TimeInterval) -> Bool {
        var entries = [fd, wakeRead].filter { $0 >= 0 }.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        guard !entries.isEmpty else {
            Waits.sleep(seconds)
            return false
        }
        _ = poll(&entries, nfds_t(entries.count), Waits.pollMilliseconds(seconds))
        var buffer = [UInt8](repeating: 0, count: 8192)
        var changed = false
        for descriptor in [fd, wakeRead] where descriptor >= 0 {
            while read(descriptor, &buffer, buffer.count) > 0 { if descriptor == fd { changed = true } }
        }
        return changed
    }
}

extension Replicate.Options {
    /// The options of `storectl replicate --policy FILE...`: each policy's store, into the
    /// repository of its `[snapshot]` section (one repository for all), with its `[replicate]`
    /// settings (those of the first policy that has the section).
    ///
    /// - Throws: 65 for a policy that does not parse, 64 when a policy has no `[snapshot]` or the
    ///   policies name different repositories.
    public static func from(policies files: [String]) throws -> Replicate.Options {
        // The service runs what a policy names (its password_command) as its user, root's by default.
        let loaded = try files.map { file -> Policy in
            try PolicyTrust.check(file)
            let policy = try Policy.load(file)
            try PolicyTrust.checkCommand(of: policy)
            return policy
        }
        return try from(loaded: loaded)
    }

    /// The same, of policies already loaded.
    public static func from(loaded policies: [Policy]) throws -> Replicate.Options {
        guard let first = policies.first else { throw StoreOpsError(.usage, "name at least one policy file") }
        var repository: String?
        for policy in policies {
            guard let snapshot = policy.snapshot else {
                throw StoreOpsError(.usage, "\(policy.file) has no [snapshot] section: replicate needs its repository (and password)",
                                    hint: "add [snapshot] repository = \"…\" (and [replicate] for its settings)")
            }
            if let repository, repository != snapshot.repository {
                throw StoreOpsError(.usage, "the policies name two repositories (\(repository) and \(snapshot.repository)); one replicate follows stores into one repository",
                                    hint: "run one storectl replicate per repository")
            }
            repository = snapshot.repository
        }
        var options = Replicate.Options(stores: policies.map(\.store.path), repository: repository ?? "")
        options.password = first.snapshot?.password ?? .resolve(file: nil)
        for policy in policies {
            guard let schedule = policy.schedule, let log = schedule.log else { continue }
            options.jobLogs[policy.store.path] = .init(path: log, policy: policy.file, maxBytes: schedule.logMaxBytes, keep: schedule.logKeep)
        }
        if let section = policies.compactMap(\.replicate).first {
            options.syncInterval = section.syncInterval.seconds
            options.baseInterval = section.baseInterval.seconds
            options.mergeInterval = section.mergeInterval.seconds
            options.heartbeatInterval = section.heartbeat.seconds
            options.statusFile = section.statusFile
            options.metricsFolder = section.metrics
            options.spoolFolder = section.spool
            if let limit = section.spoolLimit { options.spoolLimit = Int(clamping: limit) }
            options.outputsNamedIn = policies.filter { $0.replicate != nil }.map(\.file).joined(separator: ", ")
        }
        return options
    }
}

/// Test hooks (environment), never set in production.
enum ReplicateTesting {
    /// `STORECTL_TEST_CATCH_UP_LIMIT`: the most -wal bytes a read takes in at once (256 MiB), lower.
    static let catchUpLimit: Int? = ProcessInfo.processInfo.environment["STORECTL_TEST_CATCH_UP_LIMIT"].flatMap { Int($0) }
    /// `STORECTL_TEST_BASE_PREPARE_DELAY_MS`: a base's repository preparation takes this much
    /// longer (a slow bucket), so a test can make the app's checkpoints run inside that window.
    static let basePrepareDelay: useconds_t? = ProcessInfo.processInfo.environment["STORECTL_TEST_BASE_PREPARE_DELAY_MS"]
        .flatMap { UInt32($0) }.map { $0 * 1000 }
    /// `STORECTL_TEST_CATCH_UP_WRITE_DELAY_MS`: the old chain's last commits, written before a base
    /// every interval opens the new chain, take this much longer to write (a slow or silent bucket),
    /// so a test can run the app's checkpoints inside that write.
    static let catchUpWriteDelay: useconds_t? = ProcessInfo.processInfo.environment["STORECTL_TEST_CATCH_UP_WRITE_DELAY_MS"]
        .flatMap { UInt32($0) }.map { $0 * 1000 }
    /// `STORECTL_TEST_FILES_BUDGET_BYTES`: what one read of the external-data folder reads at most
    /// (64 MiB), so a test can write more than a read takes with small files.
    static let filesBudget: Int = ProcessInfo.processInfo.environment["STORECTL_TEST_FILES_BUDGET_BYTES"].flatMap { Int($0) } ?? 64 << 20
}

/// What `Replicator.stalled` compares: SIGCONTs received (the process was stopped and continued)
/// and the machine's time suspended (CLOCK_BOOTTIME ahead of CLOCK_MONOTONIC). A stopped or
/// suspended follower reads nothing, and the commits it finds next came at unknown times.
/// (A container frozen by its cgroup gets no signal and no clock jump: not detected.)
struct Pauses: Equatable {
    var continued: Int
    var suspendedNanoseconds: Int64
    /// Stops seen (`storectl_stops`): a SIGCONT that came with the process standing still.
    var stops: Int
    static var now: Pauses {
        let continued = Int(storectl_continued_count())   // (starts the ticker on the first call)
        return Pauses(continued: continued, suspendedNanoseconds: storectl_suspended_ns(), stops: Int(storectl_stops()))
    }
}
