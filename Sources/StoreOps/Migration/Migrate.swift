import Foundation
import GRDB
import GRDBSQLite
import Logging

/// `storectl migrate`: lock, preflight, snapshot, apply, verify; on a failure (with
/// `--rollback-on-failure`) or when the kill switch is thrown, roll back to the snapshot.
public enum Migrate {
    public struct Options: Sendable {
        public var store: String
        /// A folder of NNNN_name.sql files (and .verify.sql).
        public var migrations: String?
        /// Swift stages, merged with the folder's migrations by version.
        public var stages: [Migration] = []
        public var repository: String
        /// Migrate up to this version (default: the newest).
        public var to: Int?
        public var rollbackOnFailure = false
        public var dryRun = false
        public var killSwitch: String?
        /// Accept the state an interrupted migration left and go on.
        public var resume = false
        /// Seconds to wait for the app's write lock.
        public var timeout: TimeInterval = 30
        /// Migrate although another process has the store open (its writes after the snapshot
        /// are lost if the migration rolls back).
        public var force = false
        /// Wait for the store's job lock, and up to `timeout` for the app's connections to close
        /// (an app that opens the store for each write), instead of exiting 75.
        public var wait = false
        /// Where an encrypted repository's password comes from.
        public var password: PasswordSource = .resolve(file: nil)
        /// Verify with `integrity_check` of the whole file, not only of the tables the run touched.
        public var fullCheck = false
        /// Where `--dry-run` makes its two scratch copies (default: TMPDIR).
        public var scratch: String?
        /// `--dry-run` rehearses on the store as it was at this time (`storectl replicate`'s point
        /// of this store in `repository`) instead of on a copy of the store as it is.
        public var dryRunAt: Date?

        public init(store: String, migrations: String?, repository: String, stages: [Migration] = [], to: Int? = nil,
                    rollbackOnFailure: Bool = false, dryRun: Bool = false, killSwitch: String? = nil, resume: Bool = false) {
            self.store = store
            self.migrations = migrations
            self.repository = repository
            self.stages = stages
            self.to = to
            self.rollbackOnFailure = rollbackOnFailure
            self.dryRun = dryRun
            self.killSwitch = killSwitch
            self.resume = resume
        }
    }

    public struct Applied: Sendable, Codable, Equatable {
        public var version: Int
        public var name: String
        public var seconds: Double
    }

    public struct RollbackInfo: Sendable, Codable {
        public var snapshotId: String
        public var seconds: Double
        /// The restored store's SHA-256 equals the snapshot's: the pre-migration content.
        public var verified: Bool
        /// The failed state, renamed aside (`<store>.failed-migration-<time>`, its -wal too).
        public var failedStateKeptAt: String?
        public var error: String?
        /// When the rollback failed: whether it failed before touching the store (the same file is
        /// still in place), and then the store's version (its last fully applied migration).
        public var storeUntouched: Bool?
        public var versionNow: Int?
        /// A process still had the replaced store open when the rollback let go of the store's
        /// lock (`--timeout` passed): what it commits goes to the kept failed state.
        public var replacedStillOpenBy: Int32?
        /// When the rollback did not start: what to do before running it again (printed before the command).
        public var advice: String?
    }

    public struct Report: Sendable, Codable {
        public var store: String
        public var repository: String
        public var dryRun: Bool
        public var plan: MigrationPlan
        /// In words: "up to date", "planned", "migrated", "failed", "rolled back", "rollback failed",
        /// or "stopped" (the kill switch or a signal before anything changed: nothing to roll back).
        public var result: String
        public var snapshot: String?
        /// The pre-migrate snapshot was made from this point of `storectl replicate`, the store's
        /// state then, instead of reading the store (`PointSnapshot`).
        public var snapshotPoint: String?
        public var snapshotEstimateBytes: UInt64?
        public var applied: [Applied] = []
        public var stages: [StageTiming] = []
        public var countsBefore: [String: Int]?
        public var countsAfter: [String: Int]?
        /// What the run changed, from the diff of the pre-migrate snapshot and the result (a dry
        /// run: of a copy before and after the migrations ran on it).
        public var changes: StoreDiff.Summary?
        /// `--resume` of a run interrupted with its migrations applied: what their verify, run
        /// then, found (the journal's pre-migrate snapshot against the store).
        public var resumeVerified: String?
        /// Changes outside what the migrations declare (`-- storectl: changes ...`): the run fails
        /// and rolls back (unless `othersWrote`: then they are listed, not held against it).
        public var undeclared: [String]?
        /// Names a declaration gives that are no entity or table of the store before or after
        /// (a typo: the change it meant is then "not declared"), with the closest name.
        public var unknownDeclared: [String]?
        /// Another process committed to the store during the run (`--force`; without it, only in
        /// the microseconds the run's write lock is free: after a commit, or for a migration
        /// without a transaction). The migrations'
        /// connection records the rows and columns it writes (SQLite's pre-update hook), so
        /// `changes` holds only what they changed and `others` what other processes did; when
        /// the record could not be kept (`attributed` false), `changes` holds both.
        public var othersWrote: Bool?
        /// A migration failed after others committed, and their changes could not be checked
        /// against what they declare (why).
        public var declarationsUnchecked: String?
        /// What other processes changed during the run (`--force`: not held against a declaration).
        public var others: StoreDiff.Summary?
        /// Whether each difference was attributed to the migrations or to others (`--force` records it).
        public var attributed: Bool?
        /// `--dry-run`: the migration that failed on the copy and why (the real run would fail
        /// there: roll back with --rollback-on-failure, 3, else 1). The exit is 2, the plan printed.
        public var rehearsalFailure: String?
        /// `--dry-run`: the rehearsal failed what the verify stage checks (the run rolls back, 3).
        public var rehearsalFailedAtVerify: Bool?
        /// `--dry-run`: what would stop a real run now (another process has the store open, a
        /// job holds its lock, the kill switch is engaged); the dry run itself ends as it would.
        public var wouldStop: [String]?
        /// `--dry-run --at`: the point the rehearsal started from, and its time.
        public var rehearsedPoint: String?
        public var rehearsedPointTime: Date?
        /// The integrity check the verify stage ran: "integrity_check" (the whole file) or
        /// "quick_check(T)" of each table the run touched, and "index I: one entry per row" for each
        /// index it made or changed.
        public var checked: [String]?
        public var failure: String?
        /// What to do about the failure, when known.
        public var failureHint: String?
        public var rollback: RollbackInfo?
        /// Without --rollback-on-failure: the command that restores the pre-migration state.
        public var rollbackCommand: String?
        /// A failure before any migration committed: the store is as it was, nothing was rolled back.
        public var nothingCommitted: Bool?
        /// How it ended; its status is the exit status (1 failed, 3 rolled back or stopped, 4 rollback failed).
        public var ending: Ending = .ok

        public var outcome: Outcome { ending.outcome }
        public var status: ExitStatus { ending.status }
    }

    static let logger = Logger(label: "storectl.migrate")

    /// Plans and (unless `dryRun`) runs the migration, walking the pipeline: lock (exclusive),
    /// preflight (nobody else has the store open, no interrupted run, the plan, `storectl
    /// preflight --for migrate`), snapshot (made and verified, then the crash journal), apply (one
    /// transaction per migration; the kill switch and signals between them), verify
    /// (`integrity_check`, `foreign_key_check`, Core Data counts), commit (the journal goes); on a
    /// stop, or a failure with `rollbackOnFailure`, rollback.
    ///
    /// - Throws: before anything changes: 66/65 for a missing or bad store or migrations folder,
    ///   65 for drifted/missing/refused migrations, 75 when another job holds the store, 2 when
    ///   preflight fails, 1 when an interrupted migration must be dealt with first, the snapshot's
    ///   errors. Outcomes after the snapshot (migrated, failed, rolled back, rollback failed) are
    ///   in the report's `ending`.
    public static func run(_ options: Options, progress: ProgressHandler? = nil) throws -> Report {
        try Validate.timeout(options.timeout)
        if options.dryRunAt != nil, !options.dryRun {
            throw StoreOpsError(.usage, "--at is for --dry-run: it names the point a rehearsal starts from",
                                hint: "add --dry-run, or use `storectl rollback --at` to go back to a point")
        }
        let store = try StoreFile(existing: options.store)
        let migrations = try load(options)
        try KillSwitch.checkExtra(options.killSwitch)
        if let to = options.to, to < 1 {
            throw StoreOpsError(.usage, "--to \(to) is out of range: migration versions are 1 or more", hint: "name the version of an existing migration file")
        }
        if let to = options.to, !migrations.contains(where: { $0.version == to }) {
            throw StoreOpsError(.usage, "--to \(to): there is no migration \(to) (versions: \(migrations.map { String($0.version) }.joined(separator: ", ")))",
                                hint: "name the version of an existing migration file")
        }
        if !options.dryRun, (try? FileSystem.space(at: store.folder))?.readOnly == true {
            throw StoreOpsError(.cannotCreate, "\(store.path) is on a read-only file system: migrate rewrites the store",
                                hint: "remount it read-write, or migrate a copy (`storectl migrate --dry-run` shows the plan)")
        }
        let session = Session(store: store, migrations: migrations, options: options)
        if let journal = MigrationJournal.read(store), !options.resume || options.dryRun {
            throw StoreOpsError(.failure, journal.advice)
        }
        // A rehearsal from a point plans from the point's own history (in `rehearse`).
        let planned = options.dryRunAt != nil ? session.report.plan : try session.makePlan(checkingJournal: false)
        if options.dryRun || planned.pending.isEmpty {
            if let journal = MigrationJournal.read(store) {   // --resume with nothing left to apply: the journal goes
                let lock = try JobLock.acquire(path: store.jobLockPath, job: "migrate")
                defer { lock.release() }
                // The interrupted run applied its migrations and was stopped before its verify
                // stage ended: they are verified now, as that stage would have (they were taken as
                // they were: a run killed at its verify and resumed passed an undeclared change).
                // What the killed run committed (nothing, when the store is still at the version it
                // started from: then what differs is the app's, not the run's).
                if !options.dryRun, planned.current > journal.fromVersion { try session.verifyResumed(journal, through: planned.current) }
                try MigrationJournal.remove(store)
            }
            return try session.planOnly()
        }
        let killSwitch = KillSwitch(store: store, extra: options.killSwitch)
        let pipeline = Pipeline(operation: "migrate", store: store, killSwitch: killSwitch, progress: progress)
        var road = Road<Session>(lock: .exclusive, wait: options.wait, actName: "apply") { pipeline in
            try session.apply(pipeline)
            return session
        }
        // The store alone, then the repository shared (for the safety snapshot, in the lock stage).
        road.repository = .init(options.repository, password: options.password, exclusive: false, missing: .initHint)
        road.preflight = { pipeline in try session.preflight(pipeline) }
        road.snapshot = { pipeline, _ in try session.snapshot(pipeline) }
        road.verify = { pipeline, session in try session.verify(pipeline) }
        road.commit = { _, session in try session.finish() }
        road.commitName = nil
        road.rollback = { pipeline, _ in session.rollBack(in: pipeline.hold) }
        // Migrations that declare what they change are verified by meaning, and a verify stage
        // that fails (a change they do not declare, a relationship left dangling) rolls them back;
        // a failure while they are applied (a SQL error) rolls back with --rollback-on-failure
        // only, as without a declaration (the store at its last good migration, exit 1).
        road.rollbackOnFailure = options.rollbackOnFailure || session.declared != nil
        road.rollbackNeeded = { (options.rollbackOnFailure || session.verifying) && !session.nothingCommitted() }
        // A failure leaves the store at its last good migration (1); a full disk before anything
        // committed keeps its own status (74): the store is exactly as it was.
        road.failureKind = { error in
            [.noSpace, .ioError].contains(error.kind) && session.nothingCommitted() ? error.kind : .failure
        }
        return try session.report(after: pipeline.walk(road))
    }

    /// One migration run: the plan, the snapshot, what was applied, the report.
    final class Session {
        let store: StoreFile
        let migrations: [Migration]
        let options: Options
        var report: Report
        var queue: DatabaseQueue?
        /// `--force`: `PRAGMA data_version` of the run's connection when it was opened (before the
        /// safety snapshot); it changes only when another connection commits.
        var dataVersion: Int?
        /// `--force`: the rows and columns the migrations' connection writes.
        var recorder: WriteRecorder?
        /// Without `--force`, the store's write lock is held by the run's connection (`BEGIN
        /// IMMEDIATE`) from before the safety snapshot to the end of the verify stage, and each
        /// migration runs inside it: an app that opens the store for each write (the preflight
        /// cannot see it) waits for the run to commit, or sees its busy timeout pass; its commits
        /// are never taken for the migrations' change, rolled back with them or lost.
        var gated: Bool { !options.force }
        /// The connection's `foreign_keys` before the run set it off (it is a no-op inside a
        /// transaction, and migrations run inside the lock's).
        var foreignKeys: Bool?

        deinit {
            // The hook is removed while its connection is open (the two go in no set order).
            if let recorder, let queue { _ = try? queue.inDatabase { _ in recorder.stop() } }
        }

        init(store: StoreFile, migrations: [Migration], options: Options) {
            self.store = store
            self.migrations = migrations
            self.options = options
            report = Report(store: store.path, repository: RepositoryLocation.normalize(options.repository), dryRun: options.dryRun,
                            plan: MigrationPlan.make([], history: []), result: "planned")
        }

        /// Plans from the store's history; refuses (65) what cannot run, (64) going down.
        @discardableResult
        func makePlan(checkingJournal: Bool) throws -> MigrationPlan {
            let journal = checkingJournal ? MigrationJournal.read(store) : nil
            if let journal, !options.resume { throw StoreOpsError(.failure, journal.advice) }
            let plan = try plan(of: store, subject: "the store",
                                hint: "storectl rollback \(store.path) --repo \(options.repository) restores a pre-migrate snapshot")
            report.plan = plan
            if let journal {
                // What the interrupted run committed before it was killed is verified against its
                // own pre-migrate snapshot first, as its verify stage would have: the rest is
                // verified against this run's new snapshot, which holds those migrations' changes
                // as they were (a trial's resume kept an undeclared change, "migrated", exit 0).
                if plan.current > journal.fromVersion { try verifyResumed(journal, through: plan.current) }
                try MigrationJournal.remove(store)
            }
            return plan
        }

        /// The plan for `file`'s history (the store, or a point of it restored for a rehearsal);
        /// refuses (65) what cannot run, (64) going down.
        func plan(of file: StoreFile, subject: String, hint downHint: String) throws -> MigrationPlan {
            let migrations = self.migrations, to = options.to
            var plan = try readOnly(file, timeout: options.timeout) { db -> MigrationPlan in
                var plan = MigrationPlan.make(migrations, history: try MigrationHistory.read(db), to: to)
                plan.lint(migrations, schema: try StoreSchema.read(db))
                return plan
            }
            try plan.refuseTriggerCalls(migrations, store: file.path)
            if let to, to < plan.current {
                throw StoreOpsError(.usage, "\(subject) is at version \(plan.current); migrate does not go down to \(to)", hint: downHint)
            }
            guard plan.blockers.isEmpty else {
                // A statement that cannot run in a transaction (VACUUM): the way to run it, not the history.
                let outside = plan.pending.contains { $0.refused.contains { $0.contains("cannot run inside a transaction") } }
                throw StoreOpsError(.badData, "the migrations cannot run on \(subject); nothing was changed:\n  " + plan.blockers.joined(separator: "\n  "),
                                    hint: outside
                                        ? "put `-- storectl: no-transaction` in that migration (it then runs outside a transaction, alone; a failure is undone from the pre-migrate snapshot)"
                                        : "storectl migrate status \(store.path) --migrations \(options.migrations ?? "DIR") shows the history")
            }
            return plan
        }

        /// Dry run, or nothing pending: the plan, nothing changed.
        func planOnly() throws -> Report {
            if options.dryRunAt != nil {
                try rehearse()
            } else if options.dryRun, !report.plan.pending.isEmpty {
                // The run's safety snapshot goes there: a repository the run could not open (none,
                // not initialised, the wrong password) fails its dry run too.
                _ = try PagedRepository.open(at: options.repository, password: options.password, missing: .initHint)
                report.snapshotEstimateBytes = try readOnly(store, timeout: options.timeout) { try StoreInfo.read($0, store: store) }.logicalBytes
                try rehearse()
            }
            report.result = report.plan.pending.isEmpty ? "up to date" : "planned"
            if options.dryRun, !report.plan.pending.isEmpty {
                var stops = Purge.wouldStop(store, killSwitch: options.killSwitch, before: "its first migration")
                if !options.force, let pid = try? LockState.otherUser(of: store) {
                    stops.append("\(store.path) is open by another process (pid \(pid)): the run would refuse (75) until it closes the store (or --wait for it, or --force)")
                }
                report.wouldStop = stops.isEmpty ? nil : stops
            }
            return report
        }

        /// A dry run's rehearsal: the pending migrations run on a consistent copy in the scratch
        /// folder (their checks too), and the copy before is compared with the copy after. The
        /// store is only read; both copies are removed.
        func rehearse() throws {
            let folder = FileSystem.absolute(options.scratch ?? (ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp"))
            let bytes = FileSystem.size(of: store.path) ?? 0
            try SpaceRequirement.require(bytes * 2 + SpaceRequirement.margin(bytes), at: folder, purpose: "the dry run's two copies of the store",
                                         hint: "free space there, or pass --scratch DIR")
            // What a killed dry run left there goes first (its owner's pid is in the name).
            PendingFile.removeStale(in: folder, prefix: "storectl-migrate-dry-run-")
            let first = try PendingFile(finalPath: (folder as NSString).appendingPathComponent("storectl-migrate-dry-run-before.sqlite"), label: "migrate.dry-run.before")
            let second = try PendingFile(finalPath: (folder as NSString).appendingPathComponent("storectl-migrate-dry-run-after.sqlite"), label: "migrate.dry-run.after")
            var before = first.tempPath
            let after = second.tempPath
            defer {
                for file in [first, second] {
                    for suffix in ["-wal", "-shm", "-journal"] { FileSystem.remove(file.tempPath + suffix, point: "migrate.dry-run.sidecar.remove") }
                    file.discard()
                }
            }
            var point: PendingFile?
            defer { point?.discard() }
            if let at = options.dryRunAt {
                // The point, restored (and verified) into a scratch folder of its own; the plan
                // comes from its history, which may be behind the store's.
                let box = try PendingFile(finalPath: (folder as NSString).appendingPathComponent("storectl-migrate-dry-run-point"), directory: true,
                                          label: "migrate.dry-run.point")
                point = box
                let restored = (box.tempPath as NSString).appendingPathComponent(store.name)
                var restore = SnapshotRestore.Options(repository: options.repository, id: "", target: .file(restored))
                restore.at = at
                restore.pointStore = store.path
                restore.password = options.password
                restore.timeout = options.timeout
                let result = try SnapshotRestore.run(restore)
                report.rehearsedPoint = result.point
                report.rehearsedPointTime = result.pointTime
                before = restored
                let plan = try plan(of: try StoreFile(existing: before), subject: "the point \(result.point ?? "") of \(store.path)",
                                    hint: "name a later version, or an earlier point")
                report.plan = plan
                // What the real run's snapshot would hold: the store as it is, not the point.
                report.snapshotEstimateBytes = try readOnly(store, timeout: options.timeout) { try StoreInfo.read($0, store: store) }.logicalBytes
                guard !plan.pending.isEmpty else { return }
            } else {
                _ = try ConsistentCopy.copy(store, to: before, options: .init(timeout: options.timeout, writeBehind: false))
            }
            _ = FileSystem.remove(after, point: "migrate.dry-run.after.replace")
            try FileSystem.copyNewFile(before, to: after, point: "migrate.dry-run.after.copy")
            let queue = try StoreConnection.open(after, access: .readWrite, busyTimeout: options.timeout, side: .output, label: "storectl.migrate-dry-run")
            let pipeline = Pipeline(operation: "migrate --dry-run")
            var current: Migration?
            do {
                for migration in migrations where report.plan.pending.contains(where: { $0.version == migration.version }) {
                    current = migration
                    try queue.inDatabase { try Migrate.apply(migration, db: $0, snapshot: nil, pipeline: pipeline) }
                }
                try queue.close()
            } catch let error as StoreOpsError where current != nil && Self.isFinding(error) {
                // What the rehearsal is there to find: a migration that fails (its SQL, its checks, a
                // data-loss guard). The plan is still the answer, with the failure; a copy that could
                // not be written or a signal is the run's own failure.
                try? queue.close()
                let name = current.map { String(format: "%04d_%@", $0.version, $0.name) } ?? "?"
                // The message names the migration already when it comes from it ("0002_bad.sql statement 2 …").
                let message = error.message.hasPrefix(name) ? error.message : "\(name): \(error.message)"
                report.rehearsalFailure = message
                report.failure = "the rehearsal on a copy failed: \(message)"
                report.failureHint = error.hint
                // The run ends 2 (what a check that found a problem ends with), the plan printed.
                report.ending = Ending(.checksFailed, error: StoreOpsError(.checksFailed, report.failure ?? "", hint: error.hint))
                return
            } catch let error as StoreOpsError {
                try? queue.close()
                throw StoreOpsError(error.kind, "on a copy of the store (dry run; the store is unchanged): \(error.message)", hint: error.hint)
            }
            var diffOptions = StoreDiff.Options(a: .file(before), b: .file(after))
            diffOptions.limit = 0
            // SQL cannot change external-data files; the point's restore has them, the copy not.
            diffOptions.externalData = false
            let diff = try StoreDiff.run(diffOptions)
            report.changes = diff.summary
            // The verify stage's relationship check, on the copy after: a rehearsal that said 0
            // where the run rolls back (an object still pointed at, a key written to nothing) was
            // no rehearsal.
            let dangling = try Migrate.readOnly(StoreFile(unchecked: after), timeout: options.timeout) { try Migrate.danglingReferences(diff, db: $0) }
            /// A check of the verify stage that the copy fails: the run rolls back there (3) with
            /// declarations or --rollback-on-failure, else fails (1) with the store migrated.
            func failsAtVerify(_ message: String, advice: String) {
                let rollsBack = declared != nil || options.rollbackOnFailure
                report.rehearsalFailure = message
                report.rehearsalFailedAtVerify = rollsBack
                report.failure = "the rehearsal on a copy failed: \(message)"
                report.failureHint = (rollsBack ? "the run would roll back (3) at its verify stage"
                                      : "the run would fail (1) at its verify stage, the store left migrated (with --rollback-on-failure it rolls back, 3)") + "; " + advice
                report.ending = Ending(.checksFailed, error: StoreOpsError(.checksFailed, report.failure ?? "", hint: report.failureHint))
            }
            if !dangling.isEmpty {
                failsAtVerify("relationships no longer resolve: " + dangling.joined(separator: "; "), advice: "change the migration so every reference still names an object")
            }
            // What Core Data needs of the result, as the verify stage checks it.
            if report.rehearsalFailure == nil {
                let uuidBefore = try? Migrate.readOnly(StoreFile(unchecked: before), timeout: options.timeout) { try CoreDataStore.read($0)?.metadata.uuid }
                do {
                    try Migrate.readOnly(StoreFile(unchecked: after), timeout: options.timeout) {
                        try Migrate.checkCoreDataKeeping($0, uuidBefore: uuidBefore, declared: declared)
                    }
                } catch let error as StoreOpsError where error.kind == .checksFailed {
                    failsAtVerify(error.message, advice: error.hint ?? "")
                }
            }
            if let declared {
                let allowed = try Migrate.readOnly(StoreFile(unchecked: after), timeout: options.timeout) { try Migrate.allowing(declared, consequencesIn: diff, db: $0, statements: self.statements(of: report.plan.pending.map(\.version))) }
                let outside = StoreDiff.undeclared(diff, declared: allowed)
                if !outside.isEmpty {
                    report.undeclared = outside
                    // The real run rolls back (3) at its verify stage: the rehearsal's ending says
                    // so, as for any other check it fails (`--json` said outcome "ok", exit 2).
                    if report.rehearsalFailure == nil {
                        failsAtVerify("the migrations change what they do not declare (`-- storectl: changes \(declared.sorted().joined(separator: ", "))`): "
                                      + "\(outside.count) difference\(outside.count == 1 ? "" : "s") (NOT DECLARED below; `undeclared` in --json)",
                                      advice: "declare what they change, or change only what is declared")
                    }
                }
                let known = ((try? Migrate.readOnly(StoreFile(unchecked: before), timeout: options.timeout, Migrate.names)) ?? [])
                    .union((try? Migrate.readOnly(StoreFile(unchecked: after), timeout: options.timeout, Migrate.names)) ?? [])
                // Both sides are at hand: a member the migration removed is still known.
                let unknown = known.isEmpty ? [] : Migrate.unknown(declared, known: known, members: true)
                if !unknown.isEmpty { report.unknownDeclared = unknown }
            }
        }

        /// A failure of a migration on the rehearsal's copy that the real run would meet too (its
        /// SQL, its checks, a guard), not the copy's own trouble (space, I/O, a lock, a signal).
        static func isFinding(_ error: StoreOpsError) -> Bool {
            [.failure, .badData, .checksFailed].contains(error.kind)
        }

        /// Under the lock: nobody else has the store open, no interrupted run, the plan again,
        /// and preflight's checks (space for the snapshot, integrity, locks).
        func preflight(_ pipeline: Pipeline) throws {
            // With --wait, the look that ends the wait is the one that lets the run go on (a second
            // look after it refused when the app opened the store between the two).
            // The wait's deadline runs from here, whether or not the app has the store open now:
            // the preflight below waits for one that opens it meanwhile, up to the same deadline.
            if options.wait, waitDeadline == nil { waitDeadline = Date().addingTimeInterval(options.timeout) }
            while !options.force, let pid = try LockState.otherUser(of: store) {
                if options.wait, !LockState.isFollower(pid), Date() < waitDeadline ?? .distantFuture {
                    waitUntilClosed(pipeline)
                    if let signal = ProcessSignals.received { throw Pipeline.Stop(reason: .signal(signal)) }
                    continue
                }
                throw StoreOpsError(.busy, "\(store.path) is open by another process (pid \(pid))"
                                    + (options.wait ? " after \(Format.duration(options.timeout)) of waiting for it to close the store" : "") + "; nothing was changed",
                                    hint: "stop the app first: a rollback would discard what it writes after the snapshot, and it would run "
                                        + "against a schema it does not know (--force migrates anyway)")
            }
            // The connection the migrations run on, opened now: what another process commits
            // after the snapshot stage starts moves its data_version (read there), so the verify
            // stage knows whether the diff holds writes that are not the migrations'; without
            // --force it holds the store's write lock from then on (`gate()`).
            self.queue = try StoreConnection.open(store.path, access: .readWrite, busyTimeout: options.timeout, label: "storectl.migrate", holdsTransactions: gated)
            try makePlan(checkingJournal: true)
            // A repository in a bucket: the space checks are the store's own volume's.
            let folder = S3Backend.isS3(report.repository) ? store.folder
                : FileSystem.kind(of: report.repository) == .directory ? report.repository : FileSystem.parent(of: report.repository)
            // quick_check and the entity counts: the safety snapshot's, next (one read of the file, not two).
            var preflight = try Preflight.run(store: store.path, options: .init(operation: .migrate, destination: folder, sourceCheckedBySnapshot: true, force: options.force))
            // With --wait, an app that opened the store since the check above is waited for too.
            while options.wait, !preflight.passed, preflight.checks.filter({ $0.status == .fail }).allSatisfy({ $0.id == "lock.writer" }),
                  let deadline = waitDeadline, Date() < deadline, ProcessSignals.received == nil {
                waitUntilClosed(pipeline)
                if let signal = ProcessSignals.received { throw Pipeline.Stop(reason: .signal(signal)) }
                preflight = try Preflight.run(store: store.path, options: .init(operation: .migrate, destination: folder, sourceCheckedBySnapshot: true, force: options.force))
            }
            guard preflight.passed else {
                let failing = preflight.checks.filter { $0.status == .fail }
                // The app opened the store since the check above: busy (75), as that check says.
                if failing.allSatisfy({ $0.id == "lock.writer" }), let first = failing.first {
                    // Said as the first check says it (one wording for one refusal).
                    let open = (try? LockState.otherUser(of: store)).map { "\(store.path) is open by another process (pid \($0))" }
                        ?? "\(store.path): \(first.summary)"
                    throw StoreOpsError(.busy, open + (options.wait ? " after \(Format.duration(options.timeout)) of waiting for it to close the store" : "")
                                        + "; nothing was changed",
                                        hint: "stop the app first: a rollback would discard what it writes after the snapshot, and it would run "
                                            + "against a schema it does not know (--force migrates anyway)")
                }
                let failed = failing.map { "\($0.id): \($0.summary)" }
                throw StoreOpsError(.checksFailed, "preflight failed; nothing was changed:\n  " + failed.joined(separator: "\n  "),
                                    hint: "storectl preflight \(store.path) --for migrate --dest \(folder) shows every check")
            }
        }

        /// With --wait: when the app's connections went away (`--timeout` from the first wait).
        private var waitDeadline: Date?
        /// Core Data's store UUID (`Z_METADATA`) when the safety snapshot was taken.
        var storeUUID: String?

        /// Until no other process has the store open, or `--timeout` passed since the first wait.
        func waitUntilClosed(_ pipeline: Pipeline) {
            let deadline = waitDeadline ?? Date().addingTimeInterval(options.timeout)
            waitDeadline = deadline
            LockState.waitUntilClosed(store, until: deadline) { pipeline.note(LockState.waitingNote($0, until: deadline)) }
        }

        /// A verified snapshot, or nothing changes; then the crash journal names it.
        func snapshot(_ pipeline: Pipeline) throws -> String {
            // The write lock first (without --force): no other commit from here to the end of verify.
            if gated { try gate(first: true) }
            // Just before the snapshot's read: a commit in between is in the snapshot and counted
            // here too (a moment's window); one after it is in the diff and counted.
            if let queue { dataVersion = try queue.inDatabase { try Int.fetchOne($0, sql: "PRAGMA data_version") } }
            let created: SnapshotCreate.Result
            do {
                // Another process may commit while the run goes on (--force): the snapshot is then
                // read (its data_version above says when), never taken from a point.
                created = try SnapshotCreate.inside(pipeline, tags: ["pre-migrate", "version-\(report.plan.current)"], level: nil,
                                                    fromPoint: !options.force, progress: { pipeline.step($0) })
            } catch let error as StoreOpsError where error.check != nil {
                // The preflight's own check, run by the snapshot (see preflight()): refused as preflight refuses.
                throw StoreOpsError(.checksFailed, "preflight failed; nothing was changed:\n  \(error.check ?? ""): \(error.message)",
                                    hint: error.hint)
            }
            report.snapshotPoint = created.point
            if created.unchanged || created.point != nil {
                // Nothing committed since the store's last snapshot: this one is that one's; or it
                // was made from replicate's point of the store as it is (no page read, so no check
                // ran now). The preflight left quick_check to the snapshot: run it.
                pipeline.note(created.point.map { "snapshot made from point \($0); quick_check" } ?? "quick_check (the safety snapshot read no page)")
                try Migrate.quickCheck(store, timeout: options.timeout, refused: "nothing was changed")
            }
            if let problem = try SnapshotVerify.justMade(created, in: try pipeline.repository) {
                throw StoreOpsError(.badData, "the pre-migrate snapshot \(created.id) failed verification (\(problem)); nothing was changed")
            }
            report.snapshot = created.id
            if let queue { storeUUID = try? queue.inDatabase { try CoreDataStore.read($0)?.metadata.uuid } }
            FaultInjection.reach("after-snapshot")
            try MigrationJournal(pid: getpid(), host: ProcessInfo.processInfo.hostName, startedAt: Timestamp.now(), store: store.path,
                                 repository: report.repository, snapshotId: created.id, fromVersion: report.plan.current,
                                 toVersion: report.plan.target, migrations: options.migrations.map { FileSystem.absolute($0) },
                                 noTransactionPending: migrations.contains { m in m.noTransaction && report.plan.pending.contains { $0.version == m.version } }).write(store)
            FaultInjection.reach("after-journal")
            return created.id
        }

        /// Takes the store's write lock on the run's connection (`BEGIN IMMEDIATE`), unless it is
        /// held (or `--force`): before the safety snapshot (`first`), and after each migration
        /// (when `relock` lost it to another process, or the migration ran without a
        /// transaction). `foreign_keys` goes off first: it cannot change inside the transaction
        /// the migrations run in.
        /// - Parameter waitedOut: the lock was waited for already (a migration's `BEGIN IMMEDIATE`
        ///   after its commit got no lock within `--timeout`): not waited for a second time.
        func gate(first: Bool = false, waitedOut: Bool = false) throws {
            guard gated, let queue else { return }
            try queue.inDatabase { db in
                guard !db.isInsideTransaction else { return }
                if waitedOut, let connection = db.sqliteConnection {
                    // Once more without waiting (a failure that was not a busy store is said as itself).
                    sqlite3_busy_handler(connection, nil, nil)
                    let rc = sqlite3_exec(connection, "BEGIN IMMEDIATE", nil, nil, nil)
                    WriteGate.waitForLock(connection, milliseconds: Int32(min(options.timeout, 3600) * 1000))
                    if rc == SQLITE_OK { return }
                    guard rc & 0xff == SQLITE_BUSY || rc & 0xff == SQLITE_LOCKED else {
                        throw StoreOpsError.fromResultCode(rc, message: String(cString: sqlite3_errmsg(connection)), doing: "taking the store's lock again")
                    }
                    if let signal = ProcessSignals.received { throw Pipeline.Stop(reason: .signal(signal)) }
                    throw StoreOpsError(.busy, "another process kept writing to \(store.path) for \(Format.duration(options.timeout)) after a migration",
                                        hint: "stop the app first: it writes to the store while it is migrated")
                }
                if foreignKeys == nil {
                    // A wait for the lock that SIGTERM or the kill switch's signal ends.
                    if let connection = db.sqliteConnection { WriteGate.waitForLock(connection, milliseconds: Int32(min(options.timeout, 3600) * 1000)) }
                    foreignKeys = try Bool.fetchOne(db, sql: "PRAGMA foreign_keys") ?? false
                    try db.execute(sql: "PRAGMA foreign_keys = OFF")
                    // A commit would checkpoint after it let the lock go (milliseconds with the lock
                    // free): the verify stage checkpoints instead.
                    try db.execute(sql: "PRAGMA wal_autocheckpoint = 0")
                }
                do {
                    try db.execute(sql: "BEGIN IMMEDIATE")
                } catch let error as DatabaseError where [.SQLITE_BUSY, .SQLITE_LOCKED].contains(error.resultCode) {
                    // The wait ended on a signal: a stop, not a busy store.
                    if let signal = ProcessSignals.received { throw Pipeline.Stop(reason: .signal(signal)) }
                    throw StoreOpsError(.busy, "another process kept writing to \(store.path) for \(Format.duration(options.timeout))"
                                        + (first ? "; nothing was changed" : " after a migration"),
                                        hint: first ? "stop the app first (it writes to the store), or raise --timeout"
                                            : "stop the app first: it writes to the store while it is migrated")
                }
            }
        }

        /// Lets the write lock go: what the run wrote in it is committed (`commit`) or not.
        func ungate(commit: Bool) throws {
            guard let queue else { return }
            try queue.inDatabase { db in
                guard db.isInsideTransaction else { return }
                try db.execute(sql: commit ? "COMMIT" : "ROLLBACK")
            }
        }

        /// A migration committed, or one without a transaction started: the store may differ from
        /// the safety snapshot.
        private var changed = false
        /// The verify stage began: with declarations, its failure rolls the run back.
        var verifying = false
        private var provedUnchanged: Bool?

        /// Provably nothing was committed: no migration committed, none without a transaction began,
        /// no transaction is left open, and the history's version is still the one before (each
        /// migration writes its history row inside its own transaction). Decided once, while the
        /// connection is still open (a closed one proves nothing).
        func nothingCommitted() -> Bool {
            if let provedUnchanged { return provedUnchanged }
            var proved = !changed
            if proved, let queue {
                // Nothing of the migrations' in it: the write lock's transaction is let go.
                if gated { try? ungate(commit: false) }
                proved = (try? queue.inDatabase { db in
                    try !db.isInsideTransaction && MigrationHistory.version(db) == report.plan.current
                }) ?? false
            }
            provedUnchanged = proved
            return proved
        }

        /// Each pending migration in its own transaction; the kill switch and signals between them.
        func apply(_ pipeline: Pipeline) throws {
            let queue = try self.queue ?? StoreConnection.open(store.path, access: .readWrite, busyTimeout: options.timeout, label: "storectl.migrate", holdsTransactions: gated)
            self.queue = queue
            report.countsBefore = try queue.inDatabase { try CoreDataCensus.countsByEntity($0) }
            if options.force, recorder == nil { recorder = try queue.inDatabase { WriteRecorder($0) } }
            for migration in migrations where report.plan.pending.contains(where: { $0.version == migration.version }) {
                try pipeline.checkpoint()
                let started = Date()
                // VACUUM and the like cannot run in a transaction: the lock goes for its statements
                // (see `Migrate.apply`; said in the README).
                if migration.noTransaction { changed = true }
                do {
                    try queue.inDatabase { try Migrate.apply(migration, db: $0, snapshot: report.snapshot, pipeline: pipeline, recorder: recorder) }
                } catch let error as StoreOpsError where error.status == .ioError {
                    let full = StoreOpsError(error.kind, error.message, hint: "free space on the volume of \(store.folder) (the migration's changes and "
                                             + "SQLite's journal go there), then migrate again")
                    if committedDeclare(failing: migration) != nil {
                        report.declarationsUnchecked = "the changes of the migrations that committed before it were not checked against their declarations (the disk is full)"
                    }
                    throw full
                } catch {
                    try checkCommittedDeclarations(pipeline, failure: error, failing: migration)
                    throw error
                }
                changed = true
                report.applied.append(Applied(version: migration.version, name: migration.name, seconds: Date().timeIntervalSince(started)))
                // Taken again at the commit (see `Migrate.relock`), waiting for it as long as
                // `--timeout` when another process got it first: without it now, that wait ran out.
                try gate(waitedOut: gated && !(try queue.inDatabase { $0.isInsideTransaction }))
                if gated { try checkpointKeepingLock(queue) }
                pipeline.note("applied \(String(format: "%04d", migration.version))_\(migration.name)")
                FaultInjection.reach("after-commit-\(migration.version)")
            }
            FaultInjection.reach("before-verify")
        }

        /// Under the run's lock nothing checkpoints (autocheckpoint is off: it would run with the
        /// lock let go), so the -wal would hold every migration's pages until verify (three that
        /// each rewrite 4 GB: 12 GB of -wal, where the space check counted one store). After each
        /// migration a connection of its own checkpoints (PASSIVE: no write lock needed), and the
        /// run's transaction begins again (empty: `ROLLBACK`, then `BEGIN IMMEDIATE`, microseconds
        /// apart) so that it reads a -wal wholly checkpointed, and the next migration's first write
        /// starts the -wal over from its beginning. Only once the -wal holds `walRestartBytes`:
        /// each relock is a moment the lock is free (microseconds; under load, when the process
        /// is preempted between the two calls, longer: an app waiting for the lock got in there
        /// twice in some 100 runs beside per-write apps, three runs at once on two cores), and most migrations write far less.
        func checkpointKeepingLock(_ queue: DatabaseQueue) throws {
            if let header = WalFormat.IndexHeader.current(of: store),
               Int(header.lastFrame) * (header.pageSize + 24) < Migrate.walRestartBytes { return }
            guard passiveCheckpoint() else { return }
            try queue.inDatabase { db in if db.isInsideTransaction { try Migrate.relock(db, "ROLLBACK", doing: "taking the store's lock again") } }
            // Without it now, the relock's wait (as long as `--timeout`) ran out: not waited for again.
            try gate(waitedOut: !(try queue.inDatabase { $0.isInsideTransaction }))
        }

        /// A PASSIVE checkpoint through a connection of its own (the run's holds the lock's
        /// transaction, in which no checkpoint can run); false when it could not be opened.
        @discardableResult
        func passiveCheckpoint() -> Bool {
            guard let checkpointer = try? StoreConnection.open(store.path, access: .readWrite, busyTimeout: 0.2, label: "storectl.migrate-checkpoint") else { return false }
            _ = try? checkpointer.inDatabase { try Row.fetchOne($0, sql: "PRAGMA wal_checkpoint(PASSIVE)") }
            try? checkpointer.close()
            return true
        }

        /// A migration failed after others of this run committed, without --rollback-on-failure:
        /// the store stays at the last of them, so what they changed is held against what they
        /// declare, as the verify stage would have. A change they do not declare rolls the run back
        /// (as one found at the verify stage does: exit 3); before, it stayed in the store, and the
        /// next run, which checks only its own migrations, never saw it (found by a helper trying
        /// the README). Not under --force, where the verify stage tells others' writes apart.
        func checkCommittedDeclarations(_ pipeline: Pipeline, failure: any Error, failing: Migration) throws {
            // A stop (a signal, the kill switch) rolls the run back anyway.
            guard !(failure is Pipeline.Stop), ProcessSignals.received == nil else { return }
            guard !options.rollbackOnFailure, !options.force, let queue, let snapshot = report.snapshot, let hold = pipeline.hold,
                  let declared = committedDeclare(failing: failing) else { return }
            func unchecked(_ why: String) {
                report.declarationsUnchecked = "the changes of the migrations that committed before it were not checked against their declarations: \(why)"
            }
            // Only while the run holds the store: else the diff would hold another process's
            // commits against the migrations (a lock the failing migration could not take back
            // for --timeout, with the app writing meanwhile), and roll them back with it.
            if gated, (try? queue.inDatabase({ $0.isInsideTransaction })) != true {
                return unchecked("the run no longer holds the store's write lock (another process may have written)")
            }
            if let before = dataVersion, let now = try? queue.inDatabase({ try Int.fetchOne($0, sql: "PRAGMA data_version") }), now != before {
                return unchecked("another process committed to the store during the run, while its write lock was let go; its writes cannot be told from the migrations'")
            }
            let outside: [String]
            do {
                pipeline.note("diff against the pre-migrate snapshot: the migrations that committed before the failure")
                // Under the run's lock a connection of its own checkpoints (see `verify`).
                if gated { passiveCheckpoint() }
                var diffOptions = StoreDiff.Options(a: .snapshot(snapshot), b: .file(store.path))
                diffOptions.repository = report.repository
                diffOptions.limit = 0
                let diff = try StoreDiff.run(diffOptions, repository: hold.repository)
                let allowed = try readOnly(store, timeout: options.timeout) { try Migrate.allowing(declared, consequencesIn: diff, db: $0, statements: self.statements(of: report.applied.map(\.version) + (failing.noTransaction ? [failing.version] : []))) }
                outside = StoreDiff.undeclared(diff, declared: allowed)
            } catch {
                // The check could not be made (a full disk, a signal): the failure is reported as
                // it is, and says the committed migrations' declarations were not checked.
                return unchecked(StoreOpsError.wrapping(error)?.message ?? "\(error)")
            }
            guard !outside.isEmpty else { return }
            report.undeclared = outside
            verifying = true   // what a verify stage's failure does: the run rolls back
            let said = StoreOpsError.wrapping(failure)
            throw StoreOpsError(.checksFailed, (said?.message ?? "\(failure)")
                                + "; and the migrations that committed before it changed what they do not declare (`-- storectl: changes \(declared.sorted().joined(separator: ", "))`): "
                                + outside.prefix(5).joined(separator: "; ") + (outside.count > 5 ? "; and \(outside.count - 5) more" : ""),
                                hint: "declare it in the migration (`-- storectl: changes Entity.attribute`), or fix the migration"
                                    + (said?.hint.map { "; for the failing one: \($0)" } ?? "; then fix the failing one"))
        }

        /// What the migrations of this run that committed declare (their union), or nil when none
        /// committed or none of them declares: `failing`'s too when it runs without a transaction
        /// (its statements before the one that failed are committed).
        func committedDeclare(failing: Migration) -> Set<String>? {
            var committed = migrations.filter { m in report.applied.contains { $0.version == m.version } }
            if failing.noTransaction { committed.append(failing) }
            return Self.declarations(of: committed)
        }

        /// The statements of this run's migrations of these versions (what `allowing` takes the
        /// declared tables they write from: not every file in the folder, whose applied or
        /// later migrations did not run now).
        func statements(of versions: [Int]) -> [String] {
            let wanted = Set(versions)
            return migrations.filter { wanted.contains($0.version) }.flatMap(\.statements)
        }

        /// What `migrations` declare they change (their union), or nil when none declares.
        static func declarations(of migrations: [Migration]) -> Set<String>? {
            let sets = migrations.compactMap(\.declaredChanges)
            return sets.isEmpty ? nil : sets.reduce(into: Set<String>()) { $0.formUnion($1) }
        }

        /// `--resume` of a run interrupted with every migration applied: the store is compared
        /// with the run's pre-migrate snapshot (the journal names it) and held against what the
        /// migrations it applied declare; relationships must still resolve, and the store pass
        /// `quick_check`. Throws 2 with what is wrong (nothing is changed; the journal stays, so
        /// that `rollback` still knows the snapshot).
        func verifyResumed(_ journal: MigrationJournal, through: Int? = nil) throws {
            let last = min(through ?? journal.toVersion, journal.toVersion)
            let applied = migrations.filter { $0.version > journal.fromVersion && $0.version <= last }
            let go = "the store is as the interrupted run left it, and the interruption stays recorded"
            let hint = "go back with `storectl rollback \(store.path) --repo \(journal.repository)` (restores \(journal.snapshotId)), or fix the store and run --resume again; "
                + "if the app has written to the store since the crash (its writes differ from the snapshot too), --resume --force keeps the store as it is, unverified"
            let unverified = "--resume --force keeps the store as it is, unverified (the findings are listed, not held against it)"
            let diff: StoreDiff.Report
            do {
                let repository = try PagedRepository.open(at: journal.repository, password: options.password, missing: .initHint)
                var diffOptions = StoreDiff.Options(a: .snapshot(journal.snapshotId), b: .file(store.path))
                diffOptions.repository = journal.repository
                diffOptions.limit = 0
                diff = try StoreDiff.run(diffOptions, repository: repository)
            } catch let error as StoreOpsError where options.force {
                report.resumeVerified = "NOT VERIFIED (--force): the pre-migrate snapshot \(journal.snapshotId) could not be compared: \(error.message)"
                return
            } catch let error as StoreOpsError {
                throw StoreOpsError(status: error.status, "the interrupted run's migrations were never verified, and the pre-migrate snapshot \(journal.snapshotId) in \(journal.repository) cannot be compared now: \(error.message)",
                                    hint: (error.hint.map { $0 + "; or " } ?? "") + unverified)
            }
            var problems: [String] = []
            let declared = Self.declarations(of: applied)
            if let declared {
                let allowed = try readOnly(store, timeout: options.timeout) { try Migrate.allowing(declared, consequencesIn: diff, db: $0, statements: applied.flatMap(\.statements)) }
                let outside = StoreDiff.undeclared(diff, declared: allowed)
                if !outside.isEmpty {
                    report.undeclared = outside
                    problems.append("they changed what they do not declare (`-- storectl: changes \(declared.sorted().joined(separator: ", "))`): "
                                    + outside.prefix(5).joined(separator: "; ") + (outside.count > 5 ? "; and \(outside.count - 5) more" : ""))
                }
            }
            let dangling = try readOnly(store, timeout: options.timeout) { try Migrate.danglingReferences(diff, db: $0) }
            if !dangling.isEmpty { problems.append("relationships point at objects that do not exist: " + dangling.prefix(5).joined(separator: "; ")) }
            let messages = try readOnly(store, timeout: options.timeout) { try StoreConnection.integrityMessages($0, pragma: "quick_check") }
            if messages != ["ok"] { problems.append("quick_check: " + messages.prefix(3).joined(separator: "; ")) }
            do {
                try readOnly(store, timeout: options.timeout) { try Migrate.checkCoreDataKeeping($0, uuidBefore: nil, declared: declared) }
            } catch let error as StoreOpsError where error.kind == .checksFailed {
                problems.append(error.message)
            }
            report.changes = diff.summary
            if !problems.isEmpty, options.force {
                // The app may have written since the crash: its rows differ from the snapshot too.
                report.resumeVerified = "NOT VERIFIED (--force), against the pre-migrate snapshot \(journal.snapshotId): " + problems.joined(separator: "; ")
                return
            }
            guard problems.isEmpty else {
                let range = last == journal.toVersion ? "version \(journal.fromVersion) -> \(journal.toVersion)"
                    : "version \(journal.fromVersion) -> \(last), of the run's \(journal.fromVersion) -> \(journal.toVersion); nothing more was applied"
                throw StoreOpsError(.checksFailed, "the interrupted run's migrations (\(range)) were never verified, and verified now against the pre-migrate snapshot \(journal.snapshotId): "
                                    + problems.joined(separator: "; ") + "; \(go)", hint: hint)
            }
            report.resumeVerified = "the interrupted run's migrations verified against the pre-migrate snapshot \(journal.snapshotId): \(diff.summary.text)"
        }

        /// What the pending migrations declare they change (their union), or nil when none declares.
        var declared: Set<String>? {
            Self.declarations(of: migrations.filter { m in report.plan.pending.contains { $0.version == m.version } })
        }

        /// The meaning first: the diff of the pre-migrate snapshot and the store (its `-wal`
        /// checkpointed: migrate holds the store), summarised in the report and the last history
        /// row, and held against what the migrations declare. Then `quick_check` of the tables the
        /// run touched and an entry count of the indexes it made (`integrity_check` of the whole
        /// file with `fullCheck`, or when there is no snapshot to compare with),
        /// `foreign_key_check`, and the Core Data counts.
        func verify(_ pipeline: Pipeline) throws {
            guard let queue else { return }
            var touched: [String]?
            var newIndexes = Set<String>()
            verifying = true
            // The kill switch and signals are heeded here too (the diff of a large store takes seconds).
            try pipeline.checkpoint()
            if let snapshot = report.snapshot, let hold = pipeline.hold {
                pipeline.note("diff against the pre-migrate snapshot")
                if let before = dataVersion, let now = try? queue.inDatabase({ try Int.fetchOne($0, sql: "PRAGMA data_version") }), now != before {
                    report.othersWrote = true
                }
                // Emptying the -wal lets the diff read the file itself; a reader the app holds
                // (--force) would keep TRUNCATE waiting for the whole busy timeout, so it gets a
                // fifth of a second and the diff reads a consistent copy instead. Under the run's
                // lock (a checkpoint cannot run inside its transaction) a connection of its own
                // checkpoints every frame into the file (PASSIVE: it needs no write lock); the
                // diff reads a -wal so checkpointed as the file itself.
                let timeout = Int32(min(options.timeout * 1000, Double(Int32.max)))
                if gated {
                    passiveCheckpoint()
                } else {
                    _ = try? queue.inDatabase { db in
                        sqlite3_busy_timeout(db.sqliteConnection, 200)
                        defer { sqlite3_busy_timeout(db.sqliteConnection, timeout) }
                        try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
                    }
                }
                var diffOptions = StoreDiff.Options(a: .snapshot(snapshot), b: .file(store.path))
                diffOptions.repository = report.repository
                diffOptions.limit = 0
                var written: WrittenRows?
                if let recorder {
                    written = try queue.inDatabase { _ in recorder.stop() }
                    if written?.overflowed == false { diffOptions.written = written }
                    self.recorder = nil
                }
                var diff = try StoreDiff.run(diffOptions, repository: hold.repository)
                try pipeline.checkpoint()
                // Told apart only when another process did commit (asked again after the diff's
                // read): else a difference the record does not place is the migrations', as
                // without --force.
                if report.othersWrote != true, let before = dataVersion,
                   let now = try? queue.inDatabase({ try Int.fetchOne($0, sql: "PRAGMA data_version") }), now != before {
                    report.othersWrote = true
                }
                if report.othersWrote != true, diffOptions.written != nil {
                    if diff.others?.summary.same == false {
                        diffOptions.written = nil
                        diff = try StoreDiff.run(diffOptions, repository: hold.repository)
                    }
                    diff.others = nil
                }
                if written != nil, report.othersWrote == true { report.attributed = diff.others != nil }
                report.changes = diff.summary
                if let others = diff.others?.summary, !others.same { report.others = others }
                let attributed = diff.others != nil
                touched = Migrate.touchedTables(diff)
                newIndexes = Set(diff.schema.filter { $0.type == "index" && $0.change != "removed" }.map(\.name))
                // What Core Data needs of the result first: a changed UUID or key counters behind
                // say more than "Z_METADATA rewritten" among the undeclared changes (which the
                // report keeps all the same).
                if let declared {
                    let outside = StoreDiff.undeclared(diff, declared: try queue.inDatabase { try Migrate.allowing(declared, consequencesIn: diff, db: $0, statements: self.statements(of: report.applied.map(\.version))) })
                    if !outside.isEmpty { report.undeclared = outside }
                }
                try queue.inDatabase { try Migrate.checkCoreDataKeeping($0, uuidBefore: storeUUID, declared: declared) }
                if let declared {
                    let known = ((try? queue.inDatabase(Migrate.names)) ?? []).union(Array((report.countsBefore ?? [:]).keys))
                        .union(diff.schema.filter { $0.change == "removed" }.map(\.name))
                    let unknown = known.isEmpty ? [] : Migrate.unknown(declared, known: known)
                    if !unknown.isEmpty { report.unknownDeclared = unknown }
                    let outside = StoreDiff.undeclared(diff, declared: try queue.inDatabase { try Migrate.allowing(declared, consequencesIn: diff, db: $0, statements: self.statements(of: report.applied.map(\.version))) })
                    // Without --force another process could commit only in the microseconds the
                    // run's lock was let go (a migration without a transaction, the commit before
                    // verify): that is not held to excuse a change (fail closed, rolled back).
                    if !outside.isEmpty, report.othersWrote == true, !attributed, options.force {
                        // Another process wrote meanwhile (--force): these may be its rows, not
                        // the migrations'. Listed; a rollback would discard its writes.
                        report.undeclared = outside
                        pipeline.note("not held against the declaration: another process wrote during the run (--force)")
                    } else if !outside.isEmpty {
                        report.undeclared = outside
                        let others = report.othersWrote == true && !attributed
                            ? " (another process also committed to the store during the run, while its write lock was let go: some of this may be its writes, which the rollback keeps in the failed state)" : ""
                        throw StoreOpsError(.checksFailed, "the migrations changed what they do not declare (`-- storectl: changes \(declared.sorted().joined(separator: ", "))`)\(others): "
                                            + outside.prefix(5).joined(separator: "; ") + (outside.count > 5 ? "; and \(outside.count - 5) more" : "")
                                            + (unknown.isEmpty ? "" : ". The declaration names what the store does not have: " + unknown.joined(separator: "; ")),
                                            hint: "declare it in the migration (`-- storectl: changes Entity.attribute`), or fix the migration")
                    }
                }
                let dangling = try queue.inDatabase { db in try Migrate.danglingReferences(diff, db: db) }
                if !dangling.isEmpty {
                    throw StoreOpsError(.badData, "after the migrations, relationships point at objects that do not exist: " + dangling.prefix(5).joined(separator: "; "),
                                        hint: "the migration removed objects others still refer to, or wrote keys that do not exist")
                }
                if let last = report.applied.last {
                    let text = attributed ? diff.summary.text + (report.others.map { "; other processes meanwhile: \($0.text)" } ?? "")
                        : diff.summary.text + (report.othersWrote == true ? " (with what other processes wrote during the run\(options.force ? ": --force" : "")" + ")" : "")
                    try queue.inDatabase { db in try MigrationHistory.recordChanges(db, version: last.version, text: text) }
                }
            }
            try queue.inDatabase { db in
                let existing = Set(try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'"))
                let tables = (options.fullCheck ? nil : touched)?.filter { existing.contains($0) }
                if let tables {
                    // quick_check of each table the run touched (its b-trees, records and
                    // constraints: 1.2 s for the bench store's 4M-row table, where integrity_check
                    // of it takes 12.9 s), and each index it made or changed holding one entry
                    // per row (a partial index aside); the diff is the check of the meaning.
                    var checked: [String] = []
                    for table in tables {
                        let messages = try String.fetchAll(db, sql: "PRAGMA quick_check(\(quoteIdentifier(table)))")
                        guard messages == ["ok"] else {
                            throw StoreOpsError(.badData, "quick_check(\(table)) after the migrations: \(messages.prefix(3).joined(separator: "; "))")
                        }
                        checked.append("quick_check(\(table))")
                    }
                    let indexes = try Row.fetchAll(db, sql: "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
                    for index in indexes {
                        guard let name = index.text(0), let table = index.text(1), let sql = index.text(2),
                              newIndexes.contains(name), !sql.uppercased().contains(" WHERE ") else { continue }
                        let rows = try Int.fetchOne(db, sql: "SELECT count(*) FROM \(quoteIdentifier(table)) NOT INDEXED") ?? 0
                        let entries = try Int.fetchOne(db, sql: "SELECT count(*) FROM \(quoteIdentifier(table)) INDEXED BY \(quoteIdentifier(name))") ?? 0
                        guard rows == entries else {
                            throw StoreOpsError(.badData, "index \(name) holds \(entries) entries for \(rows) rows of \(table) after the migrations")
                        }
                        checked.append("index \(name): one entry per row")
                    }
                    report.checked = checked
                } else {
                    report.checked = ["integrity_check"]
                    let messages = try StoreConnection.integrityMessages(db, pragma: "integrity_check")
                    guard messages == ["ok"] else {
                        throw StoreOpsError(.badData, "integrity_check after the migrations: \(messages.prefix(3).joined(separator: "; "))")
                    }
                }
                let violations = try StoreConnection.foreignKeyViolations(db)
                guard violations.count == 0 else {
                    throw StoreOpsError(.badData, "foreign_key_check after the migrations: \(violations.count) violation(s): \(violations.samples.prefix(3).joined(separator: ", "))")
                }
                report.countsAfter = try CoreDataCensus.countsByEntity(db)
                try Migrate.checkCoreDataKeeping(db, uuidBefore: storeUUID, declared: declared)
            }
        }

        /// The recorder's hook goes before its connection closes (it is the connection's); what
        /// is left uncommitted in the write lock's transaction is not wanted (a failed verify's
        /// history note), and `foreign_keys` is put back.
        func closeQueue() {
            if let recorder, let queue { _ = try? queue.inDatabase { _ in recorder.stop() } }
            recorder = nil
            try? ungate(commit: false)
            if let foreignKeys, let queue { _ = try? queue.inDatabase { try $0.execute(sql: "PRAGMA foreign_keys = \(foreignKeys ? "ON" : "OFF")") } }
            try? queue?.close()
        }

        func finish() throws {
            // The verify stage's history note, and the lock let go: the app's waiting commits go on,
            // on the migrated store.
            try ungate(commit: true)
            closeQueue()
            FaultInjection.reach("before-journal-removal")
            try MigrationJournal.remove(store)
        }

        func rollBack(in hold: RepositoryHold?) -> StoreOpsError? {
            // The run's write lock is handed to the rollback (a connection of its own, opened while
            // the run's still holds it, takes it the moment the run's lets go): an app that opens
            // the store for each write commits to the restored store, not to the failed state
            // moved aside (the restore's staging takes seconds for a large store). Opened first:
            // its `data_version` now, read again once it holds the lock, tells whether anybody
            // committed in between (into the failed state), and the run's own check below covers
            // what came before (their windows overlap: a run that lost its lock earlier is covered).
            var handOver: WriteGate?
            var handOverError: Error?
            var versionBeforeHandOver: Int?
            if gated, report.snapshot != nil {
                do {
                    handOver = try WriteGate(path: store.path, busyMilliseconds: Int32(min(options.timeout, 3600) * 1000), take: false)
                    versionBeforeHandOver = handOver?.dataVersion()
                } catch { handOverError = error }
            }
            // Another process committed during the run (a no-transaction migration lets go of the
            // lock; --force takes none): asked now, before the rollback moves its commits aside
            // with the failed state, so the report can say so.
            if report.othersWrote != true, let before = dataVersion, let queue,
               let now = try? queue.inDatabase({ try Int.fetchOne($0, sql: "PRAGMA data_version") }), now != before {
                report.othersWrote = true
            }
            if let recorder, let queue { _ = try? queue.inDatabase { _ in recorder.stop() } }
            recorder = nil
            if let gate = handOver, let queue {
                // Let go and taken again back to back, straight through SQLite's C API (the lock is
                // free for microseconds, as between two migrations: `relock`). The signal that asked
                // for this rollback is acknowledged already; a second one ends the wait, and then
                // there is no swap (below).
                do {
                    try queue.inDatabase { db in
                        if db.isInsideTransaction {
                            let rc = sqlite3_exec(db.sqliteConnection, "ROLLBACK", nil, nil, nil)
                            // A failed ROLLBACK that still ended the transaction lets the gate try.
                            if rc != SQLITE_OK, db.isInsideTransaction {
                                throw StoreOpsError.fromResultCode(rc, message: String(cString: sqlite3_errmsg(db.sqliteConnection)), doing: "letting go of the run's lock for the rollback")
                            }
                        }
                        FaultInjection.reach("rollback.lock-let-go")
                        try gate.take()
                    }
                    // Either read failing proves nothing: said as a possible slip.
                    let now = gate.dataVersion()
                    if versionBeforeHandOver == nil || now == nil || now != versionBeforeHandOver { report.othersWrote = true }
                } catch {
                    handOverError = error
                    handOver = nil
                }
            } else {
                handOver = nil
                try? ungate(commit: false)
            }
            closeQueue()
            guard let snapshot = report.snapshot else { return nil }   // stopped before anything changed
            if gated, handOver == nil {
                // No swap without the lock: an app's commit during it would land in the failed state.
                var info = RollbackInfo(snapshotId: snapshot, seconds: 0, verified: false)
                let busy = (handOverError as? StoreOpsError)?.kind == .busy
                let why = busy ? "another process held the store's write lock for \(Format.duration(min(options.timeout, 3600))) (--timeout)"
                    : handOverError is Pipeline.Stop ? "a second signal stopped its wait for the store's write lock"
                    : (handOverError as? StoreOpsError)?.message ?? handOverError.map { "\($0)" } ?? "the store's write lock could not be taken"
                info.error = "the rollback holds the store's write lock for its swap and could not take it: \(why); it did not start"
                info.advice = "stop the app (it writes to the store), then"
                info.storeUntouched = true
                info.versionNow = try? Migrate.readOnly(store, timeout: 10) { try MigrationHistory.version($0) }
                report.rollback = info
                return StoreOpsError(.rollbackFailed, info.error ?? "", hint: "stop the app, then: storectl rollback \(store.path) --repo \(report.repository) --to \(snapshot)")
            }
            let info = Migrate.rollBack(store: store, hold: hold, snapshot: snapshot, gate: handOver, timeout: options.timeout)
            handOver?.release()
            report.rollback = info
            guard info.error == nil, info.verified else { return StoreOpsError(.rollbackFailed, info.error ?? "the rollback could not be checked") }
            try? MigrationJournal.remove(store)
            return nil
        }

        /// The report of a walk; what failed before anything changed is thrown, as bad input is.
        func report(after walked: Walked<Session>) throws -> Report {
            let unchanged = walked.ending.outcome == .failed && nothingCommitted()
            closeQueue()
            report.stages = walked.stages
            report.ending = walked.ending
            let error = walked.ending.error
            switch walked.ending.outcome {
            case .ok:
                report.result = "migrated"
                return report
            case .stopped where report.snapshot == nil:
                report.result = "stopped"
                report.failure = "stopped before any change (nothing to roll back): \(walked.ending.stop?.description ?? "")"
                return report
            case .failed where report.snapshot == nil, .skipped, .checksFailed:
                // Nothing changed: refused like bad input (75 locked, 65 drift, 2 preflight, 1 journal).
                throw walked.ending.thrown ?? StoreOpsError(.failure, "migrate failed")
            default:
                break
            }
            report.failure = walked.ending.stop.map { "stopped: \($0)" } ?? error?.message
            report.failureHint = error?.hint
            switch walked.ending.outcome {
            case .rolledBack: report.result = "rolled back"
            case .rollbackFailed: report.result = "rollback failed"
            default:
                // Each migration is its own transaction: the failing one left nothing behind.
                try? MigrationJournal.remove(store)
                report.result = "failed"
                if unchanged {
                    // Nothing committed: the store is as it was; there is nothing to roll back, and a
                    // full disk keeps its own status (74).
                    report.nothingCommitted = true
                } else {
                    report.rollbackCommand = "storectl rollback \(store.path) --repo \(report.repository) --to \(report.snapshot ?? "")"
                }
            }
            return report
        }
    }

    /// `declared`, and the tables the store's own triggers write when a table the declaration
    /// covers changes (transitively), with the shadow tables of the virtual tables among them:
    /// what the schema does in turn is not the migration's to declare (Photos' R-tree triggers
    /// rewrite `Z_RT_…_node` when an asset's moment changes; a trial's declared migration was
    /// rolled back for it). `purge` counts such changes as the schema's the same way.
    static func allowing(_ declared: Set<String>, consequencesIn diff: StoreDiff.Report, db: Database, statements: [String] = []) throws -> Set<String> {
        let names = Set(declared.map { $0.lowercased() })
        func covered(_ scope: String) -> Bool {
            let lower = scope.lowercased()
            return names.contains(lower) || names.contains { $0.hasPrefix(lower + ".") }
        }
        // The statement, then the table (a schema name before it skipped): INSERT [OR x] INTO t,
        // REPLACE INTO t, UPDATE [OR x] t, DELETE FROM t.
        let target = try Regex(#"(?i)\b(?:INSERT\s+(?:OR\s+\w+\s+)?INTO|REPLACE\s+INTO|UPDATE(?:\s+OR\s+\w+)?|DELETE\s+FROM)\s+(?:["`\[]?[A-Za-z_][A-Za-z0-9_$]*["`\]]?\s*\.\s*)?["`\[]?([A-Za-z_][A-Za-z0-9_$]*)"#)
        // String literals and comments hold no statement (`RAISE(ABORT, 'delete from X first')`).
        let noise = try Regex(#"'(?:[^']|'')*'|--[^\n]*|/\*[\s\S]*?\*/"#)
        var frontier = Set(diff.entities.filter { e in (e.lineage + [e.entity].compactMap { $0 } + [e.table]).contains(where: covered) }.map { $0.table.lowercased() })
        // A declared table the migrations wrote without changing a value (an UPDATE setting what
        // was there: a data fix run twice) fires its triggers all the same, and what they write is
        // the declared change's (Photos' R-tree trigger rewrote its node, and the run rolled back).
        let coreData = try CoreDataStore.read(db)
        for statement in statements {
            for match in statement.replacing(noise, with: " ").matches(of: target) {
                guard let table = match.output[1].substring.map(String.init) else { continue }
                let entities = coreData?.entities.filter { $0.table?.lowercased() == table.lowercased() }.map(\.name) ?? []
                if covered(table) || entities.contains(where: covered) { frontier.insert(table.lowercased()) }
            }
        }
        guard !frontier.isEmpty else { return declared }
        // Rows added to a declared AUTOINCREMENT table raise its number in `sqlite_sequence`.
        var declared = declared
        if diff.entities.contains(where: { $0.entity == nil && frontier.contains($0.table.lowercased()) && $0.added > 0 }) { declared.insert("sqlite_sequence") }
        // The store's own triggers: as they were before the run. One the migration made (or
        // rewrote) is the migration's, and what it writes must be declared (a trial's migration
        // made a trigger that rewrote another table and was excused by it).
        let madeOrRewritten = Set(diff.schema.filter { $0.type == "trigger" && $0.change != "removed" }.map { $0.name.lowercased() })
        var triggers = try Row.fetchAll(db, sql: "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger' AND sql IS NOT NULL")
            .compactMap { row -> (on: String, sql: String)? in
                guard let name = row[0] as String?, let on = row[1] as String?, let sql = row[2] as String?,
                      !madeOrRewritten.contains(name.lowercased()) else { return nil }
                return (on.lowercased(), sql)
            }
        triggers += diff.schema.filter { $0.type == "trigger" && $0.change != "added" }
            .compactMap { change in change.before.map { (change.table.lowercased(), $0) } }
        let tables = try Row.fetchAll(db, sql: "SELECT name, sql FROM sqlite_master WHERE type = 'table'")
            .compactMap { row -> (name: String, module: String?)? in
                guard let name = row[0] as String? else { return nil }
                let sql = ((row[1] as String?) ?? "").uppercased()
                guard sql.hasPrefix("CREATE VIRTUAL TABLE"), let using = sql.range(of: " USING ") else { return (name, nil) }
                return (name, String(sql[using.upperBound...].prefix { $0.isLetter || $0.isNumber }).lowercased())
            }
        // The shadow tables each module makes (`V_node` of an R-tree, …): by module, not by any name
        // that starts so (`docs_archive` beside an FTS table `docs` is no shadow table).
        let shadows: [String: [String]] = ["rtree": ["node", "parent", "rowid"], "rtree_i32": ["node", "parent", "rowid"], "geopoly": ["node", "parent", "rowid"],
                                           "fts5": ["data", "idx", "content", "docsize", "config"],
                                           "fts4": ["content", "segments", "segdir", "docsize", "stat"], "fts3": ["content", "segments", "segdir", "docsize", "stat"]]
        var allowed = Set<String>()
        var seen = frontier
        while !frontier.isEmpty {
            var next = Set<String>()
            for trigger in triggers where frontier.contains(trigger.on) {
                // The body: after BEGIN (the header names the table the trigger is on).
                let sql = trigger.sql.replacing(noise, with: " ")
                guard let begin = sql.range(of: "BEGIN", options: .caseInsensitive) else { continue }
                for match in sql[begin.upperBound...].matches(of: target) {
                    guard let name = match.output[1].substring.map(String.init) else { continue }
                    var written = [name]
                    // A virtual table's module writes its shadow tables (`V_node`, `V_content`, …).
                    if let virtual = tables.first(where: { $0.module != nil && $0.name.lowercased() == name.lowercased() }), let module = virtual.module {
                        let suffixes = Set((shadows[module] ?? []).map { "\(virtual.name.lowercased())_\($0)" })
                        written += tables.filter { $0.module == nil && suffixes.contains($0.name.lowercased()) }.map(\.name)
                    }
                    for table in written where !seen.contains(table.lowercased()) {
                        seen.insert(table.lowercased())
                        next.insert(table.lowercased())
                        allowed.insert(table)
                    }
                }
            }
            frontier = next
        }
        return declared.union(allowed)
    }

    /// What Core Data needs of the store after a migration: every root entity's key counter
    /// (`Z_PRIMARYKEY.Z_MAX`) at least its largest `Z_PK` (else Core Data gives out keys in use:
    /// a trial's migration inserted a row without raising it, "migrated", and `preflight` failed the
    /// store right after), and the store's UUID in `Z_METADATA` unchanged unless a migration declares
    /// `Z_METADATA` (Core Data and its sync take a new UUID for another store). 2 naming what is wrong.
    static func checkCoreDataKeeping(_ db: Database, uuidBefore: String?, declared: Set<String>?) throws {
        guard let coreData = try CoreDataStore.read(db) else { return }
        let problems = try CoreDataCensus.keyCounterProblems(db, store: coreData).filter { $0.maxPK > $0.zMax }
        if !problems.isEmpty {
            let first = problems[0]
            throw StoreOpsError(.checksFailed, "after the migrations, Core Data's key counters are behind the keys in use: "
                                + problems.prefix(5).map { "\($0.entity): \($0.summary)" }.joined(separator: "; ")
                                + " (Core Data would give out keys that objects already have)",
                                hint: "a migration that inserts rows raises its entity's counter too: `UPDATE Z_PRIMARYKEY SET Z_MAX = (SELECT max(Z_PK) FROM \(first.table)) WHERE Z_NAME = '\(first.entity)'`")
        }
        let names = Set((declared ?? []).map { $0.lowercased() })
        if let uuidBefore, let now = coreData.metadata.uuid, now != uuidBefore, !names.contains("z_metadata"), !names.contains("z_metadata.z_uuid") {
            throw StoreOpsError(.checksFailed, "the migrations changed the store's UUID in Z_METADATA (\(uuidBefore) -> \(now)): Core Data and its sync take it for another store",
                                hint: "leave Z_UUID as it is; a migration that means to change it declares `-- storectl: changes Z_METADATA`")
        }
    }

    /// Relationships that no longer resolve because of what the run changed, in words: to-one
    /// columns still pointing at an object the run removed, and references the run wrote to
    /// objects that do not exist. Proportional to the change (index lookups by key).
    static func danglingReferences(_ diff: StoreDiff.Report, db: Database) throws -> [String] {
        guard let store = try CoreDataStore.read(db) else { return [] }
        var problems: [String] = []
        // To-one columns, and the ends of many-to-many links (a join table's row naming a removed
        // object passed, as did a link written to an object that never was).
        let columns = try CoreDataCensus.toOneColumns(db, store: store).columns.map { ($0, false) }
            + CoreDataCensus.joinColumns(db, store: store).map { ($0, true) }
        for (table, keys) in diff.removedKeys.sorted(by: { $0.key < $1.key }) where !keys.isEmpty {
            for (column, isLink) in columns where column.destinationTable == table {
                let count = try Int.fetchOne(db, sql: """
                    SELECT count(*) FROM \(quoteIdentifier(column.table)) WHERE \(quoteIdentifier(column.column)) IN (SELECT value FROM json_each(?))
                    """, arguments: [BatchClosure.json(keys)]) ?? 0
                if count > 0 {
                    let what = isLink ? (count == 1 ? "link still points" : "links still point") : (count == 1 ? "object still points" : "objects still point")
                    problems.append("\(column.relationships.joined(separator: ", ")): \(count) \(what) at removed \(table) rows" + (isLink ? " (join table \(column.table))" : ""))
                }
            }
        }
        let byDestination = Dictionary(grouping: diff.newReferences, by: \.destinationTable)
        for (table, references) in byDestination.sorted(by: { $0.key < $1.key }) {
            let keys = Set(references.map(\.key))
            guard try db.tableExists(table) else { continue }
            let found = try Int.fetchOne(db, sql: "SELECT count(*) FROM \(quoteIdentifier(table)) WHERE Z_PK IN (SELECT value FROM json_each(?))",
                                         arguments: [BatchClosure.json(keys)]) ?? 0
            if found < keys.count {
                let names = Set(references.map(\.relationship)).sorted().joined(separator: ", ")
                problems.append("\(names): \(keys.count - found) key\(keys.count - found == 1 ? "" : "s") written that no \(table) row has")
            }
        }
        return problems
    }

    /// The tables a run touched: rows changed (or links), or its schema entry or one of its
    /// indexes' added, removed or changed.
    static func touchedTables(_ diff: StoreDiff.Report) -> [String] {
        var tables = Set(diff.entities.map(\.table)).union(diff.links.map(\.table))
        for change in diff.schema { tables.insert(change.table) }
        return tables.sorted()
    }

    /// One migration in one transaction, with its history row and its checks inside it.
    /// - Parameter recorder: `--force`: what the migrations' connection writes; each statement's
    ///   schema change is noted (the tables it rewrote), and what the hook cannot see (a migration
    ///   outside a transaction, Swift code that changed the schema) gives the record up.
    static func apply(_ migration: Migration, db: Database, snapshot: String?, pipeline: Pipeline, recorder: WriteRecorder? = nil) throws {
        let label = "\(String(format: "%04d", migration.version))_\(migration.name)"
        let started = Date()
        // SQLite's procedure for schema changes (https://sqlite.org/lang_altertable.html#otheralter):
        // foreign keys off outside the transaction, foreign_key_check before commit, restore after.
        // Inside the run's write lock (migrate without --force), the transaction is begun and
        // foreign keys are off already (see `Session.gate`); the migration commits and the lock is
        // taken again at once through SQLite's C API (`relock`): another process can take it only
        // in the microseconds between the two (a commit through GRDB and a second call gave a
        // writer committing every 3 ms the lock in 1 run of 20), and a commit it makes then is
        // seen by `data_version` at the verify stage.
        let gated = db.isInsideTransaction
        /// The lock was waited for as long as `--timeout` and not got: not waited for again here.
        var lockWaitedOut = false
        let foreignKeys = try Bool.fetchOne(db, sql: "PRAGMA foreign_keys") ?? false
        if !gated { try db.execute(sql: "PRAGMA foreign_keys = OFF") }
        defer { if !gated { try? db.execute(sql: "PRAGMA foreign_keys = \(foreignKeys ? "ON" : "OFF")") } }
        do {
            if !migration.noTransaction, !gated { try db.execute(sql: "BEGIN IMMEDIATE") }
            if migration.noTransaction { recorder?.giveUp() }   // VACUUM and the like rewrite rows unseen
            let before = try entityCounts(db)
            if let recorder, let code = migration.willMigrate { try recorder.run(code, in: db) } else { try migration.willMigrate?(db) }
            pipeline.note("apply \(label)")
            // Without a transaction (VACUUM cannot run in one) inside the run's lock: it is let go
            // just before the first statement and taken again just after the last, each statement
            // straight through SQLite's C API, so another process can commit only in the
            // microseconds between two calls (the whole migration's run through GRDB, with the
            // lock let go around it, let a per-write app in for 4 of 17 VACUUM migrations).
            let unlocked = gated && migration.noTransaction
            if unlocked { try exec(db, "COMMIT", doing: "\(label): letting the store's lock go for a migration without a transaction") }
            for (index, statement) in migration.statements.enumerated() {
                if migration.noTransaction { try pipeline.checkpoint() }
                pipeline.step(ProgressUpdate(phase: "apply \(label)", done: UInt64(index), total: UInt64(migration.statements.count),
                                             unit: .statements, bytes: 0, startedAt: started))
                do {
                    if unlocked {
                        let rc = sqlite3_exec(db.sqliteConnection, statement, nil, nil, nil)
                        if rc != SQLITE_OK {
                            throw DatabaseError(resultCode: ResultCode(rawValue: rc), message: String(cString: sqlite3_errmsg(db.sqliteConnection)), sql: statement)
                        }
                    } else if let recorder { try recorder.execute(statement, in: db) } else { try db.execute(sql: statement) }
                } catch let error as DatabaseError {
                    // Which file and statement (a migration of forty statements said only `near "UPDAT"`; found by a helper).
                    throw StoreOpsError.sqlite(error, doing: "\(label).sql statement \(index + 1) of \(migration.statements.count) (`\(Self.opening(of: statement))`)", side: .output)
                }
            }
            if unlocked {
                // The statements changed the schema behind GRDB's back (its cache is read by the checks below).
                db.clearSchemaCache()
                // Taken again at once (waiting as long as `--timeout`): the checks and the history
                // row are written inside it. Not taken: the migration fails as a busy store.
                let rc = sqlite3_exec(db.sqliteConnection, "BEGIN IMMEDIATE", nil, nil, nil)
                if rc != SQLITE_OK {
                    lockWaitedOut = true
                    if let signal = ProcessSignals.received { throw Pipeline.Stop(reason: .signal(signal)) }
                    guard rc & 0xff == SQLITE_BUSY || rc & 0xff == SQLITE_LOCKED else {
                        throw StoreOpsError.fromResultCode(rc, message: String(cString: sqlite3_errmsg(db.sqliteConnection)), doing: "\(label): taking the store's lock again")
                    }
                    throw StoreOpsError(.busy, "another process kept writing to the store after the migration's statements, for as long as --timeout; the migration's statements are committed, its history row is not",
                                        hint: "stop the app first: it writes to the store while it is migrated")
                }
            }
            if let recorder, let code = migration.didMigrate { try recorder.run(code, in: db) } else { try migration.didMigrate?(db) }
            pipeline.note("\(label): foreign_key_check, checks, counts")
            let violations = try StoreConnection.foreignKeyViolations(db)
            guard violations.count == 0 else {
                throw StoreOpsError(.badData, "\(label) leaves \(violations.count) row(s) whose foreign keys point nowhere: \(violations.samples.prefix(3).joined(separator: ", "))")
            }
            for (index, check) in migration.checks.enumerated() {
                let rows: [Row]
                do {
                    // A check reads: one that would write (an UPDATE … RETURNING passed, and its
                    // write was committed with the migration) is refused before it runs.
                    let statement = try db.makeStatement(sql: check)
                    guard statement.isReadonly else {
                        throw StoreOpsError(.badData, "\(label).verify.sql check \(index + 1) writes to the store (`\(Self.opening(of: check))`): a check may only read",
                                            hint: "make it a SELECT; changes belong in \(label).sql")
                    }
                    rows = try Row.fetchAll(statement)
                } catch let error as DatabaseError {
                    // A failure in the checks file, not the migration (it said `0002_v: near "SELEC"`).
                    throw StoreOpsError.sqlite(error, doing: "\(label).verify.sql check \(index + 1) of \(migration.checks.count) (`\(Self.opening(of: check))`)", side: .output)
                }
                let value: DatabaseValue? = rows.first.flatMap { $0.databaseValues.first }
                let passed = rows.count == 1 && (value.flatMap { Bool.fromDatabaseValue($0) } ?? false)
                guard passed else {
                    throw StoreOpsError(.badData, "\(label).verify.sql check \(index + 1) failed: `\(check)` returned "
                                        + (rows.count == 1 ? "\(value ?? .null)" : "\(rows.count) rows"))
                }
            }
            if let before {
                let after = try entityCounts(db) ?? [:]
                // An entity allowed takes its sub-entities with it, as `changes` does (allowing
                // Item and deleting a Note failed with "add allow-count-drop Note").
                let model = migration.allowCountDrop.isEmpty ? nil : (try? CoreDataStore.read(db))??.model
                func allowed(_ entity: String) -> Bool {
                    (model?.ancestors(of: entity) ?? [entity]).contains { migration.allowCountDrop.contains($0) }
                }
                let dropped = before.filter { entity, rows in (after[entity] ?? 0) < rows && !allowed(entity) }
                guard dropped.isEmpty else {
                    let details = dropped.keys.sorted().map { "\($0) \(before[$0]!) -> \(after[$0] ?? 0)" }.joined(separator: ", ")
                    throw StoreOpsError(.badData, "\(label) drops Core Data rows: \(details)",
                                        hint: "if that is intended, add `-- storectl: allow-count-drop \(dropped.keys.sorted().joined(separator: ", "))` to the migration")
                }
            }
            try MigrationHistory.record(db, .init(version: migration.version, name: migration.name, sha256: migration.checksum,
                                                  appliedAt: Timestamp.now(), durationMs: Int(Date().timeIntervalSince(started) * 1000),
                                                  snapshotId: snapshot))
            FaultInjection.reach("before-commit-\(migration.version)")
            if gated {
                if db.isInsideTransaction { try relock(db, "COMMIT", doing: "\(label): committing") }
            } else if !migration.noTransaction {
                try db.execute(sql: "COMMIT")
            }
        } catch {
            if gated {
                // This migration's changes go, the lock stays (a rollback to the safety snapshot
                // may follow); when SQLite rolled the transaction back itself (an interrupt, a full
                // disk, a failed commit), the lock again at once.
                if db.isInsideTransaction { try? relock(db, "ROLLBACK", doing: "\(label): rolling back") } else if !lockWaitedOut { try? db.execute(sql: "BEGIN IMMEDIATE") }
            } else if db.isInsideTransaction {
                try? db.execute(sql: "ROLLBACK")
            }
            if error is Pipeline.Stop { throw error }
            if let own = error as? StoreOpsError { throw StoreOpsError(own.kind, own.message.hasPrefix(label) ? own.message : "\(label): \(own.message)", hint: own.hint) }
            throw StoreOpsError.sqlite(error, doing: label, side: .output)
        }
    }

    /// What migrate's -wal may hold before a checkpoint lets it start over (`checkpointKeepingLock`).
    /// (`STORECTL_TEST_WAL_RESTART_BYTES` sets it for a test.)
    static let walRestartBytes = ProcessInfo.processInfo.environment["STORECTL_TEST_WAL_RESTART_BYTES"].flatMap { Int($0) } ?? 64 << 20

    /// One statement straight through SQLite's C API (no GRDB work around it); its error thrown.
    static func exec(_ db: Database, _ sql: String, doing: String) throws {
        let rc = sqlite3_exec(db.sqliteConnection, sql, nil, nil, nil)
        guard rc == SQLITE_OK else { throw StoreOpsError.fromResultCode(rc, message: String(cString: sqlite3_errmsg(db.sqliteConnection)), doing: doing) }
    }

    /// Ends the transaction (`end`: COMMIT or ROLLBACK) and takes the write lock again at once,
    /// straight through SQLite's C API, so that the lock is free only between the two calls
    /// (microseconds). A failed end is thrown, once any transaction it left open is rolled back
    /// and the lock taken again if it can be; a lock not taken again is left to the caller's
    /// `Session.gate(waitedOut:)`, which tries once more without waiting again and says why.
    static func relock(_ db: Database, _ end: String, doing: String) throws {
        let connection = db.sqliteConnection
        let rc = sqlite3_exec(connection, end, nil, nil, nil)
        guard rc == SQLITE_OK else {
            let message = String(cString: sqlite3_errmsg(connection))
            if sqlite3_get_autocommit(connection) == 0 { sqlite3_exec(connection, "ROLLBACK", nil, nil, nil) }
            sqlite3_exec(connection, "BEGIN IMMEDIATE", nil, nil, nil)
            throw StoreOpsError.fromResultCode(rc, message: message, doing: doing)
        }
        sqlite3_exec(connection, "BEGIN IMMEDIATE", nil, nil, nil)
    }

    /// A statement's first words, whitespace collapsed, for a message naming it.
    static func opening(of statement: String) -> String {
        // Its comment lines left out (a directive quoted before the statement read as if the
        // statement were commented out: `-- storectl: changes Tag SELECT …`).
        let code = statement.split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("--") }.joined(separator: "\n")
        let words = (code.contains { !$0.isWhitespace } ? code : statement).split(whereSeparator: \.isWhitespace).joined(separator: " ")
        return words.count > 60 ? String(words.prefix(60)) + "…" : words
    }

    /// Restores the snapshot in place, as a stage of migrate's road (which holds the store's lock
    /// and the repository), and checks the store's SHA-256 against the snapshot's: the
    /// pre-migration content, byte for byte.
    /// - Parameter gate: the store's write lock, held until the swap is done (see `Session.rollBack`).
    static func rollBack(store: StoreFile, hold: RepositoryHold?, snapshot: String, gate: WriteGate? = nil, timeout: TimeInterval = 60) -> RollbackInfo {
        let started = Date()
        var info = RollbackInfo(snapshotId: snapshot, seconds: 0, verified: false)
        let identity = FileSystem.identity(of: store.path)
        do {
            guard let hold else { throw StoreOpsError(.failure, "the repository is not held: nothing to restore from") }
            var options = SnapshotRestore.Options(repository: hold.repository.location, id: snapshot, target: .inPlace(store.path), force: true, wait: true)
            options.jobLockHeld = true
            // The failed state is evidence only: renamed aside (instant) rather than snapshotted.
            options.keepCurrent = .moveAside(suffix: ".failed-migration-\(Timestamp.compact(Date()))")
            options.clearsMigrationJournal = true
            options.ownSnapshot = true   // the run's own, just taken
            options.gate = gate
            options.timeout = timeout
            let result = try SnapshotRestore.inPlace(options, in: hold)
            // The database file's kept name: `<store>.failed-migration-<time>`, its -wal and -shm
            // beside it with their suffix, the external-data folder under its own name.
            info.failedStateKeptAt = result.movedAside.first { kept in
                kept.hasPrefix(store.path + ".failed-migration-") && !["-wal", "-shm", "-journal"].contains { kept.hasSuffix($0) }
            } ?? result.movedAside.first
            info.verified = result.verified
            info.replacedStillOpenBy = result.replacedStillOpenBy
        } catch {
            info.error = (error as? StoreOpsError)?.message ?? "\(error)"
            if let identity, let now = FileSystem.identity(of: store.path), identity == now {
                info.storeUntouched = true
                info.versionNow = try? readOnly(store, timeout: 10) { try MigrationHistory.version($0) }
            } else {
                info.storeUntouched = false
            }
        }
        info.seconds = Date().timeIntervalSince(started)
        return info
    }

    static func load(_ options: Options) throws -> [Migration] {
        var all = try options.migrations.map(Migration.load) ?? []
        for stage in options.stages {
            if let clash = all.first(where: { $0.version == stage.version }) {
                throw StoreOpsError(.badData, "version \(stage.version) is both \(clash.source) and \(stage.source)")
            }
            all.append(stage)
        }
        guard !all.isEmpty || options.migrations != nil else {
            throw StoreOpsError(.usage, "no migrations: pass --migrations DIR")
        }
        return all.sorted { $0.version < $1.version }
    }

    static func entityCounts(_ db: Database) throws -> [String: Int]? { try CoreDataCensus.countsByEntity(db) }

    /// The tables of a store and, for a Core Data store, its entities: what a declaration may name;
    /// and their members as `scope.member`: every table's columns, every entity's table's columns
    /// and, with a model cache, the attributes and relationships of the entities sharing that
    /// table. Without a model, a join table `Z_<n><NAME>` makes `*.<NAME>` (any entity's).
    static func names(_ db: Database) throws -> Set<String> {
        let tables = Set(try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'"))
        var names = tables
        var columns: [String: [String]] = [:]
        for table in tables {
            let list = ((try? db.columns(in: table)) ?? []).map(\.name)
            columns[table] = list
            for column in list { names.insert("\(table).\(column)") }
        }
        // Core Data's entities by name from Z_PRIMARYKEY (one row each), not a count of every table.
        guard tables.contains("Z_PRIMARYKEY"), let store = try? CoreDataStore.read(db) else {
            let entities = tables.contains("Z_PRIMARYKEY") ? ((try? String.fetchAll(db, sql: "SELECT Z_NAME FROM Z_PRIMARYKEY WHERE Z_NAME IS NOT NULL")) ?? []) : []
            return names.union(entities)
        }
        var membersOfTable: [String: Set<String>] = [:]
        if let model = store.model {
            let tableOf = Dictionary(store.entities.compactMap { e in e.table.map { (e.name, $0) } }, uniquingKeysWith: { x, _ in x })
            for a in model.attributes { if let t = tableOf[a.entity] { membersOfTable[t, default: []].insert(a.name) } }
            for r in model.relationships { if let t = tableOf[r.entity] { membersOfTable[t, default: []].insert(r.name) } }
        } else {
            for table in tables where table.hasPrefix("Z_") {
                let rest = table.dropFirst(2)
                let digits = rest.prefix { $0.isASCII && $0.isNumber }
                if !digits.isEmpty, digits.count < rest.count { names.insert("*.\(rest.dropFirst(digits.count))") }
            }
        }
        for entity in store.entities where !entity.name.isEmpty {
            names.insert(entity.name)
            guard let table = entity.table else { continue }
            for column in columns[table] ?? [] { names.insert("\(entity.name).\(column)") }
            for member in membersOfTable[table] ?? [] { names.insert("\(entity.name).\(member)") }
        }
        return names
    }

    /// The declared names (`Entity`, `Entity.attribute`, `table.column`) whose entity or table is
    /// none of `known` (case aside), each with the closest known name when one is near; with
    /// `members`, also those whose entity or table is known but has no such attribute,
    /// relationship or column (`known` holds them as `scope.member`, see `names`).
    static func unknown(_ declared: Set<String>, known: Set<String>, members: Bool = false) -> [String] {
        let scopes = known.filter { !$0.contains(".") }
        let lowered = Set(known.map { $0.lowercased() })
        func closest(_ name: String, among: [String]) -> String? { Format.nearest(name, among: among) }
        return declared.sorted().compactMap { name in
            let parts = name.split(separator: ".", maxSplits: 1).map(String.init)
            let scope = parts.first ?? name
            guard lowered.contains(scope.lowercased()) else {
                return "\(name): no entity or table \(scope)" + (closest(scope, among: Array(scopes)).map { " (did you mean \($0)?)" } ?? "")
            }
            // A hidden to-many (`Asset.LibraryScope.assetContributors`) or an order column
            // (`parentFolder (order)`), as the diff names them, is not checked.
            guard members, parts.count == 2, !parts[1].contains("."), !parts[1].contains(" (") else { return nil }
            let member = parts[1], prefix = scope.lowercased() + "."
            let own = known.filter { $0.lowercased().hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) }
            // An attribute as the model names it, where the model is not at hand: its column is
            // Core Data's "Z" + the name upper-cased (`Item.title`: ZTITLE), as the diff matches it.
            guard !own.isEmpty, !lowered.contains(name.lowercased()), !lowered.contains(prefix + "z" + member.lowercased()),
                  !lowered.contains("*." + member.lowercased()) else { return nil }
            return "\(name): \(scope) has no attribute, relationship or column \(member)" + (closest(member, among: own.sorted()).map { " (did you mean \(scope).\($0)?)" } ?? "")
        }
    }

    /// `quick_check` of the store, where a safety snapshot read no page of it (so checked nothing):
    /// 2, as the preflight refuses, naming the first problems and saying `refused`.
    static func quickCheck(_ store: StoreFile, timeout: TimeInterval, refused: String) throws {
        let messages = try readOnly(store, timeout: timeout) { db in
            do { return try StoreConnection.integrityMessages(db, pragma: "quick_check") } catch {
                let failed = StoreOpsError.sqlite(error, doing: "quick_check of \(store.path)")
                guard failed.kind == .badData else { throw failed }
                return [failed.message]
            }
        }
        guard messages == ["ok"] else {
            throw StoreOpsError(.checksFailed, "preflight failed; \(refused):\n  integrity.quick_check: \(store.path) fails quick_check: "
                                + messages.prefix(3).joined(separator: "; "),
                                hint: "the store itself is damaged: run `storectl preflight --full \(store.path)`")
        }
    }

    static func readOnly<T>(_ store: StoreFile, timeout: TimeInterval, _ body: (Database) throws -> T) throws -> T {
        let queue = try StoreConnection.open(store.path, access: .readOnly, busyTimeout: timeout, label: "storectl.migrate-plan")
        defer { try? queue.close() }
        return try queue.inDatabase { db in
            do { return try body(db) } catch let error as StoreOpsError { throw error } catch {
                throw StoreOpsError.sqlite(error, doing: "reading \(store.path)")
            }
        }
    }
}

