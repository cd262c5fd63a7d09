import Foundation

/// `storectl rollback`: back to the state before a migration, after the fact (the new app version
/// misbehaves) or after an interrupted migration.
public enum Rollback {
    public struct Options: Sendable {
        public var store: String
        public var repository: String
        /// A snapshot id; default: the interrupted migration's snapshot, else the snapshot taken
        /// before the run that applied the store's newest migration (its history row names it).
        public var to: String?
        /// A point in time instead (`storectl replicate`'s points of this store): the newest at or before it.
        public var at: Date?
        /// Go ahead although another process has the store open.
        public var force = false
        public var wait = false
        /// Where an encrypted repository's password comes from.
        public var password: PasswordSource = .resolve(file: nil)
        /// Beside the running app: the snapshot written into the store through SQLite under its
        /// write lock (`snapshot restore --in-place --live`), not its files replaced.
        public var live = false
        /// The caller says what the run did and then calls `said(store:)`, which removes the run's
        /// `RollbackIntent` (the command line: a kill before its output must leave the file).
        /// Otherwise it is removed at the end of the run.
        public var keepsIntentUntilSaid = false

        public init(store: String, repository: String, to: String? = nil, force: Bool = false, wait: Bool = false) {
            self.store = store
            self.repository = repository
            self.to = to
            self.force = force
            self.wait = wait
        }
    }

    public struct Result: Sendable, Codable {
        /// The snapshot (or point) put back; nil when nothing was (`nothingToRollBack`,
        /// `interruptedRunCommittedNothing`).
        public var restored: String?
        /// `--at`: the time of the point put back (`restored` is its label).
        public var restoredPointTime: Date?
        public var safetySnapshot: String?
        /// The safety snapshot was made from this point of `storectl replicate` (the store's state
        /// then), not by reading the store.
        public var safetySnapshotPoint: String?
        /// An interrupted migration's journal was found and cleared.
        public var clearedInterruptedMigration: Bool
        /// The store's version (highest applied migration) after the rollback.
        public var version: Int
        /// The restored store's SHA-256 equals the snapshot's (nil when nothing was restored); with
        /// `live`, every page read back from the transaction's frames equals the snapshot's.
        public var verified: Bool?
        /// `--live`: written through SQLite; how long the app's commits could wait for it.
        public var throughSQLite: Bool?
        public var writeLockSeconds: Double?
        /// A signal that came once the restore through SQLite was committing: it was finished.
        public var signalAfterCommit: String?
        public var stages: [StageTiming]
        /// Nothing was put back (exit 0, as `migrate` says "up to date"): no migration was applied
        /// to the store (version 0) and none was interrupted (a rollback killed after its swap is
        /// finished by the next run's recovery and then finds this), or the interrupted run
        /// committed nothing (`interruptedRunCommittedNothing` says so; a trial read both false).
        public var nothingToRollBack = false
        /// The interrupted migration committed nothing (the store's version is the one it started
        /// from, and none of its migrations runs without a transaction): the store is as it was
        /// before the run, with what the app wrote since; the journal is cleared, nothing restored.
        public var interruptedRunCommittedNothing = false
        /// With `interruptedRunCommittedNothing`: the interrupted run's pre-migrate snapshot (what
        /// `--to` would put back, if the operator wants it anyway).
        public var interruptedRunSnapshot: String?
        /// An earlier `rollback` to the default target was stopped after its swap, before it said
        /// so (its `RollbackIntent` was left, and the store's version is below the one it started
        /// from): nothing more was rolled back; `restored` is the snapshot that run put back.
        public var earlierRunFinished = false
    }

    /// - Throws: 66 when there is no pre-migrate snapshot of the store, 75 when the store is in
    ///   use or locked, 65 when the snapshot is damaged (nothing changed), 4 when the restore
    ///   succeeded but its content does not match the snapshot.
    public static func run(_ options: Options, progress: ProgressHandler? = nil) throws -> Result {
        let store = StoreFile(unchecked: options.store)
        // The store first: a typo must not be answered about snapshots (nor leave a lock file beside
        // nothing). A damaged store is a fine rollback target, so only its presence is checked; a
        // swap never leaves the database's name missing, so an interrupted one is not lost here.
        switch FileSystem.kind(of: store.path) {
        case .file: break
        case .missing where !StoreSwap.pending(target: store.path):
            throw StoreOpsError(.noInput, "\(store.path): no such store; nothing was rolled back",
                                hint: "check the path; to put a snapshot where no store is: storectl snapshot restore --repo \(options.repository) ID --in-place \(store.path) --create")
        case .missing: break
        default:
            throw StoreOpsError(.noInput, "\(store.path) is not a store file; nothing was rolled back", hint: "pass the store's database file")
        }
        // One road, whose act is the restore's swap: the store alone, then the repository shared;
        // the preflight picks the snapshot and stages it checked; the safety snapshot; the swap;
        // the interrupted migration's journal removed.
        let pipeline = Pipeline(operation: "rollback", store: store, progress: progress)
        var road = PlannedRoad<Plan, (Plan, SnapshotRestore.Result?)>(
            lock: .exclusive, wait: options.wait, actName: options.live ? "write" : "swap",
            preflight: { pipeline in try prepare(options, store: store, in: pipeline, progress: progress) },
            act: { _, plan in
                guard let restore = plan.restore else { return (plan, nil) }
                if let intent = plan.intent { try intent.write(store) }
                try restore.swap()
                return (plan, try restore.result())
            })
        road.repository = .init(options.repository, password: options.password, exclusive: false)
        road.snapshot = { _, plan in try plan.restore?.keepCurrent() ?? "" }
        road.commit = { _, done in
            if done.0.journal != nil { try MigrationJournal.remove(store) }
            // One an earlier run left (finished, or stopped before its swap), or this run's unless
            // the caller removes it once it has said what the run did.
            if !(options.keepsIntentUntilSaid && done.0.intent != nil) { try RollbackIntent.remove(store) }
        }
        let walked = pipeline.walk(road)
        let plan: Plan, result: SnapshotRestore.Result?
        do { (plan, result) = try walked.get() } catch {
            // An error says what happened: the next run starts afresh, unless the swap was done
            // (an error after it: the next run must not roll back one more run).
            RollbackIntent.removeOwn(store, unlessSwapped: true)
            throw error
        }
        let version = try Migrate.readOnly(store, timeout: 10) { try MigrationHistory.version($0) }
        var rolled = Result(restored: result == nil ? nil : plan.id, safetySnapshot: result?.safetySnapshot, safetySnapshotPoint: result?.safetySnapshotPoint, clearedInterruptedMigration: plan.journal != nil,
                            version: version, verified: result?.verified, stages: walked.stages, nothingToRollBack: result == nil,
                            interruptedRunCommittedNothing: plan.committedNothing)
        if plan.committedNothing { rolled.interruptedRunSnapshot = plan.journal?.snapshotId }
        if let earlier = plan.earlier {
            rolled.restored = earlier.snapshotId
            rolled.nothingToRollBack = false
            rolled.earlierRunFinished = true
        }
        rolled.restoredPointTime = plan.earlier == nil && options.at != nil ? result?.pointTime : nil
        rolled.throughSQLite = result?.throughSQLite
        rolled.writeLockSeconds = result?.writeLockSeconds
        rolled.signalAfterCommit = result?.signalAfterCommit
        return rolled
    }

    /// After the caller said what the run did (`Options.keepsIntentUntilSaid`): removes its intent file.
    public static func said(store: String) {
        RollbackIntent.removeOwn(StoreFile(unchecked: store))
    }

    /// What the preflight hands the act: the snapshot to go back to, staged and checked beside the
    /// store (nil: nothing to roll back), and the interrupted migration's journal.
    struct Plan {
        var id: String
        var journal: MigrationJournal?
        var restore: SnapshotRestore.InPlace?
        var committedNothing = false
        /// Written just before the swap (a rollback to the default target): see `RollbackIntent`.
        var intent: RollbackIntent?
        /// The earlier run that `RollbackIntent` says put `id` back (nothing to do now).
        var earlier: RollbackIntent?
    }

    static func prepare(_ options: Options, store: StoreFile, in pipeline: Pipeline, progress: ProgressHandler?) throws -> Plan {
        let journal = MigrationJournal.read(store)
        // Restoring the run's snapshot would take out of the store what the app committed since
        // (a trial: 43 of 48 commits moved into the safety snapshot) to undo nothing.
        if options.to == nil, options.at == nil, let journal, committedNothing(journal, store: store) {
            return Plan(id: "", journal: journal, restore: nil, committedNothing: true)
        }
        // Through SQLite the restore commits before the journal is removed: a kill between the two
        // leaves the journal, and the next rollback must see from the store that it is done (its
        // version back at the run's first, `committedNothing`), not restore over the app's newer
        // commits. A run with a migration outside a transaction cannot be told so.
        if options.live, let journal, journal.noTransactionPending != false {
            throw StoreOpsError.refused("the interrupted migration of \(store.path) has a migration that runs outside a transaction (`-- storectl: no-transaction`): after a kill, a rollback through SQLite could not tell from the store whether it had finished; nothing was rolled back",
                                        hint: "stop the app and roll back without --live")
        }
        // A rollback to the default target that was stopped after its swap, before it said so:
        // the same command again would roll back the run before (the store's history now names
        // that run's snapshot). Its intent file and a version below the one it started from say
        // it is done. (A version not below it: stopped before its swap; the file is stale.)
        let defaultTarget = options.to == nil && options.at == nil && journal == nil
        let history = defaultTarget ? try Migrate.readOnly(store, timeout: 10) { try MigrationHistory.read($0) } : nil
        let version = history.map { $0.map(\.version).max() ?? 0 }
        if defaultTarget, let earlier = RollbackIntent.read(store), let version, !earlier.runnerAlive, earlier.finished(store: store, version: version) {
            return Plan(id: earlier.snapshotId, journal: nil, restore: nil, earlier: earlier)
        }
        var id = ""
        if options.at == nil {
            guard let target = try target(options, store: store, journal: journal, in: try pipeline.repository) else {
                return Plan(id: "", journal: journal, restore: nil)
            }
            id = target
        }
        var restore = SnapshotRestore.Options(repository: options.repository, id: id, target: .inPlace(store.path),
                                              force: options.force, wait: options.wait)
        restore.at = options.at   // a point of this store instead (`--at`)
        if options.at != nil { restore.pointStore = store.path }
        restore.jobLockHeld = true
        restore.password = options.password
        restore.clearsMigrationJournal = journal != nil
        restore.live = options.live
        // The snapshot the store's own journal or history names is its own, wherever the store
        // and whatever the host's name now.
        if options.at == nil {
            let named = [journal?.snapshotId] + ((try? Migrate.readOnly(store, timeout: 10) { try MigrationHistory.read($0) }) ?? []).map(\.snapshotId)
            restore.ownSnapshot = named.contains(id)
        }
        let inPlace = SnapshotRestore.InPlace(store: store, options: restore)
        inPlace.progress = progress
        inPlace.hold = pipeline.hold
        try inPlace.check()
        var intent: RollbackIntent?
        if let history, let version {
            // The version the snapshot puts back: the highest applied before the run it undoes
            // (the history rows that name its snapshot).
            let first = history.filter { $0.snapshotId == id }.map(\.version).min() ?? version
            let to = history.map(\.version).filter { $0 < first }.max() ?? 0
            let staged = options.live ? nil : inPlace.staged.flatMap { FileSystem.identity(of: $0.database.tempPath) }
            intent = RollbackIntent(pid: getpid(), host: ProcessInfo.processInfo.hostName, startedAt: Date(), snapshotId: id,
                                    fromVersion: version, toVersion: to, device: staged?.dev, inode: staged?.ino)
        }
        return Plan(id: options.at == nil ? id : inPlace.target?.point ?? "", journal: journal, restore: inPlace, intent: intent)
    }

    /// Whether the store holds nothing of the interrupted run: each migration writes its history
    /// row in its own transaction, so a version still the run's first says none committed (or a
    /// rollback of it already swapped the snapshot in), unless one runs without a transaction (its
    /// statements commit one by one): the journal says so, as the run had it (a journal of an older
    /// version, without it: not proven).
    static func committedNothing(_ journal: MigrationJournal, store: StoreFile) -> Bool {
        guard journal.noTransactionPending == false else { return false }
        guard let version = try? Migrate.readOnly(store, timeout: 10, { try MigrationHistory.version($0) }) else { return false }
        return version == journal.fromVersion
    }

    /// The snapshot to go back to: `--to`, else the interrupted migration's, else the one taken
    /// before the run that applied the store's newest migration. Not simply the newest
    /// `pre-migrate` snapshot: after a run that failed and was rolled back, that one is the failed
    /// run's own (the store as it is now), and restoring it would change nothing.
    static func target(_ options: Options, store: StoreFile, journal: MigrationJournal?, in repository: PagedRepository) throws -> String? {
        if let to = options.to { return try repository.record(to).id }
        if let journal { return journal.snapshotId }
        let history = try Migrate.readOnly(store, timeout: 10) { try MigrationHistory.read($0) }
        guard let newest = history.max(by: { $0.version < $1.version }) else { return nil }
        guard let id = newest.snapshotId, !id.isEmpty else {
            throw StoreOpsError(.noInput, "the history of \(store.path) names no snapshot taken before \(String(format: "%04d", newest.version))_\(newest.name)",
                                hint: "name one with --to (storectl snapshot list --repo \(repository.location))")
        }
        do { return try repository.record(id).id } catch let error as StoreOpsError where error.status == .noInput {
            throw StoreOpsError(.noInput, "the snapshot \(id), taken before \(String(format: "%04d", newest.version))_\(newest.name) was applied, is not in \(repository.location) (pruned, or another repository)",
                                hint: "name another with --to (storectl snapshot list --repo \(repository.location))")
        }
    }
}
