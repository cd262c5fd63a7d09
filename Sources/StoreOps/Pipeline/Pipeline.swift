import Foundation

/// The road every operation that copies or changes a store, or writes to a repository, walks,
/// written once:
///
///     lock -> preflight -> snapshot -> act -> verify -> commit   (on a failure or a stop: roll back)
///
/// An operation declares which stages it has (a `Road`); how they are chained, timed, reported,
/// stopped and ended is here. Between stages, and at the act stage's own safe points
/// (`checkpoint()`), the kill switch and SIGINT/SIGTERM are checked. Every run ends with one
/// `Ending`, whose `status` is the exit status.
///
/// - The **lock** stage takes the store's job lock (an flock on `<store>.storectl-lock`): shared for
///   operations that only copy the store (backup, snapshot create: they may run beside each
///   other), exclusive for those that change it (restore in place, migrate, rollback, purge, the
///   scheduled jobs). A lock held elsewhere ends the run as `skipped` (75), or is waited for. Then
///   an interrupted swap of the store is finished and dead runs' temporary files are removed.
///   Then, when the road names one, the repository's lock (`RepositoryHold`: shared or
///   exclusive), always after the store's, so no two roads can wait for each other.
/// - The preflight returns the plan the act carries out (a typed hand-off, not a captured optional).
/// - A stop before the act stage changes nothing. A stop or a failure during act or verify rolls
///   back when the road has a rollback stage (always for a stop; for a failure when asked).
public final class Pipeline {
    /// A stop asked for at a safe point (kill switch, signal).
    public struct Stop: Error, Sendable, Equatable {
        public var reason: StopReason
        /// The stage it stopped before, when it stopped at a stage's start.
        public var stage: String?
        /// Thrown where the run had changed nothing yet (a wait inside a stage, before its act):
        /// the message says so.
        public var unchanged: Bool

        public init(reason: StopReason, stage: String? = nil, unchanged: Bool = false) {
            self.reason = reason
            self.stage = stage
            self.unchanged = unchanged
        }
    }

    /// A refusal by the operation's own rules (a circuit breaker): nothing was changed.
    public struct Refusal: Error, Sendable { public var error: StoreOpsError }

    public enum LockMode: Sendable, Equatable {
        /// Copies the store: beside other copies, never beside a change.
        case shared
        /// Changes the store: alone.
        case exclusive
        /// The caller (a scheduled job running its steps) already holds it.
        case held
        /// No lock and no recovery: a read-only look (a dry run).
        case none
    }

    /// A repository a road reads or writes: opened and locked in the lock stage, after the store.
    public struct RepositoryNeed: Sendable {
        public var location: String
        public var password: PasswordSource
        /// Alone (prune, repair, key changes), or beside other users (create, restore, export, import).
        public var exclusive: Bool
        public var missing: RepositoryLocation.Missing = .lookAround
        /// Leave the packs a dead writer left unindexed (repair indexes them).
        public var keepingUnindexed = false
        /// Remove nothing (no sweep of what dead writers left): a dry run's look.
        public var readOnly = false
        /// Only reads the repository: read without a lock where none can be written (`RepositoryHold.take`).
        public var readsOnly = false

        public init(_ location: String, password: PasswordSource, exclusive: Bool, missing: RepositoryLocation.Missing = .lookAround) {
            self.location = location
            self.password = password
            self.exclusive = exclusive
            self.missing = missing
        }
    }

    public let operation: String
    /// The store the road copies or changes; nil for a road over a repository alone.
    public let store: StoreFile?
    public private(set) var stages: [StageTiming] = []
    let killSwitch: KillSwitch?
    let progress: ProgressHandler?
    private var jobLock: JobLock?
    /// The repository and its lock, once the lock stage took them.
    private(set) var hold: RepositoryHold?

    public init(operation: String, store: StoreFile, killSwitch: KillSwitch? = nil, progress: ProgressHandler? = nil) {
        self.operation = operation
        self.store = store
        self.killSwitch = killSwitch
        self.progress = progress
    }

    /// A road over a repository alone (prune, repair, key changes, export, import, convert, a
    /// restore to a new file).
    public init(operation: String, progress: ProgressHandler? = nil) {
        self.operation = operation
        self.store = nil
        self.killSwitch = nil
        self.progress = progress
    }

    deinit {
        jobLock?.release()
        hold?.release()
    }

    /// The repository the lock stage opened and locked (a road that names one).
    var repository: PagedRepository {
        get throws {
            guard let hold else { throw StoreOpsError(.failure, "\(operation): the road names no repository") }
            return hold.repository
        }
    }

    // MARK: - Stages

    /// The stage running (or the last one begun).
    private(set) var current: String?

    /// Runs one stage: a stop asked for before it starts ends the run there; its time is recorded.
    @discardableResult
    public func stage<T>(_ name: String, checkingStop: Bool = true, _ body: () throws -> T) throws -> T {
        if checkingStop, let reason = stopRequested { throw Stop(reason: reason, stage: name) }
        progress?(.stage(name))
        current = name
        let started = Date()
        defer { stages.append(StageTiming(name: name, seconds: Date().timeIntervalSince(started))) }
        return try body()
    }

    /// A stage that cannot fail (a rollback records its own failure).
    func stageNoThrow<T>(_ name: String, _ body: () -> T) -> T {
        progress?(.stage(name))
        let started = Date()
        defer { stages.append(StageTiming(name: name, seconds: Date().timeIntervalSince(started))) }
        return body()
    }

    /// A safe point: throws `Stop` when the kill switch is thrown or a signal has arrived.
    public func checkpoint() throws {
        if let reason = stopRequested { throw Stop(reason: reason) }
    }

    /// What asks the run to stop now, if anything.
    public var stopRequested: StopReason? {
        if let thrown = killSwitch?.engaged { return .killSwitch(thrown) }
        if let signal = ProcessSignals.received { return .signal(signal) }
        return nil
    }

    public func note(_ text: String) { progress?(.note(text)) }

    /// This run's progress handler passing on only the steps of an operation run inside a stage
    /// (a safety snapshot's copy), not its own stages.
    public var stepsOnly: ProgressHandler? {
        progress.map { handler in { event in if case .step = event { handler(event) } } }
    }
    public func step(_ update: ProgressUpdate) { progress?(.step(update)) }

    /// Takes the store's job lock (`JobLock.Busy` when held elsewhere and not waiting), then
    /// finishes an interrupted swap of the store and removes dead runs' temporary files; then the
    /// repository's lock, when one is named.
    /// - Parameter waitLimit: with `wait`, how long at most to wait for the store's lock.
    public func lock(_ mode: LockMode, wait: Bool = false, waitLimit: TimeInterval? = nil, repository: RepositoryNeed? = nil) throws {
        try stage("lock") {
            try lockStore(mode, wait: wait, waitLimit: waitLimit)
            if let need = repository {
                let opened = try PagedRepository.open(at: need.location, password: need.password, missing: need.missing)
                hold = try RepositoryHold.take(opened, operation: operation, exclusive: need.exclusive, wait: wait,
                                               keepingUnindexed: need.keepingUnindexed, readOnly: need.readOnly, readsOnly: need.readsOnly)
            }
        }
    }

    private func lockStore(_ mode: LockMode, wait: Bool, waitLimit: TimeInterval? = nil) throws {
        guard let store else { return }
        switch mode {
        case .none:
            break
        case .held:
            try Recovery.prepare(store, lockHeld: true)
        case .exclusive:
            jobLock = try takeJobLock(store, wait: wait, waitLimit: waitLimit, shared: false)
            FaultInjection.reach("after-lock")
            try Recovery.prepare(store, lockHeld: true)
        case .shared:
            // A swap must be finished alone: a reader takes the lock exclusively for that moment,
            // before its shared lock (flock cannot turn one into the other without a gap).
            try Recovery.prepare(store, lockHeld: false)
            jobLock = try takeJobLock(store, wait: wait, shared: true)
            if StoreSwap.pending(target: store.path) {   // a swap started and died in that gap
                throw StoreOpsError(.busy, "\(store.path) is being restored", hint: "try again in a moment")
            }
        }
    }

    /// The store's job lock; a signal while waiting for it is a stop in the lock stage that changed nothing.
    private func takeJobLock(_ store: StoreFile, wait: Bool, waitLimit: TimeInterval? = nil, shared: Bool) throws -> JobLock {
        do {
            return try JobLock.acquire(path: store.jobLockPath, job: operation, wait: wait, waitLimit: waitLimit, shared: shared,
                                       waiting: progress.map { handler in { handler(.note($0)) } })
        } catch let error as StoreOpsError {
            if case .signal(let number) = error.kind { throw Stop(reason: .signal(number), unchanged: true) }
            throw error
        }
    }

    /// Releases the job lock and the repository's (also done when the pipeline goes away).
    public func unlock() {
        jobLock?.release()
        jobLock = nil
        hold?.release()
        hold = nil
    }

    // MARK: - The road

    /// Walks `road`; never throws: every way it can end is in the result's `ending`.
    public func walk<Plan, Value>(_ road: PlannedRoad<Plan, Value>) -> Walked<Value> {
        var walked = Walked<Value>(ending: .ok)
        let rollsBack = road.rollback != nil
        var planned: Plan?
        defer { if walked.ending.outcome != .ok, let planned { road.abandon?(planned) } }
        let plan: Plan
        do {
            try lock(road.lock, wait: road.wait, repository: road.repository)
            if let preflight = road.preflight {
                plan = try stage("preflight") { try preflight(self) }
            } else if let nothing = () as? Plan {
                plan = nothing
            } else {
                throw StoreOpsError(.failure, "\(operation): a road that needs a plan has no preflight")
            }
            planned = plan
            if let snapshot = road.snapshot { walked.snapshot = try stage("snapshot") { try snapshot(self, plan) } }
        } catch {
            walked.ending = Self.ending(error, rollsBack: rollsBack)
            if let stop = error as? Stop, let said = said(stop, changed: rollsBack, snapshot: walked.snapshot != nil) ?? saidWithin(stop) {
                walked.ending.error = ErrorRecord(said)
            }
            walked.stages = stages
            return walked
        }
        do {
            let value = try stage(road.actName) { try road.act(self, plan) }
            walked.value = value
            if let verify = road.verify { try stage("verify") { try verify(self, value) } }
            if let commit = road.commit {
                if let name = road.commitName { try stage(name, checkingStop: false) { try commit(self, value) } } else { try commit(self, value) }
            }
            walked.ending = road.settle?(self, value) ?? .ok
        } catch {
            // A statement interrupted by a signal (the progress handler) is a stop like one at a safe point.
            let stop = (error as? Stop)?.reason ?? ProcessSignals.received.map { StopReason.signal($0) }
            // A road that rolls back does so on a stop (its report says what became of the store).
            let cause = (error as? Stop).flatMap { said($0, changed: rollsBack || $0.stage != road.actName, snapshot: walked.snapshot != nil,
                                                         kept: rollsBack ? nil : road.keptAfterAct) ?? saidWithin($0) }
                ?? (error is Stop ? nil : StoreOpsError.wrapping(error))
            var ending = stop.map { Ending(.stopped, stop: $0, error: cause, rollsBack: rollsBack) } ?? Self.ending(error, rollsBack: rollsBack)
            if let failureKind = road.failureKind, stop == nil, let own = StoreOpsError.wrapping(error) {
                ending = Ending(.failed, error: StoreOpsError(failureKind(own), own.message, hint: own.hint), rollsBack: rollsBack)
            }
            walked.ending = ending
            if let rollback = road.rollback, stop != nil || (road.rollbackOnFailure && road.rollbackNeeded?() != false) {
                // A SIGINT/SIGTERM asked for this rollback: it must not interrupt it too.
                if case .signal? = stop { ProcessSignals.acknowledge() }
                let result = stageNoThrow("rollback") { rollback(self, ending) }
                // The ending keeps the failure that asked for the rollback; a failed rollback says why in
                // the operation's own report (it is returned here for operations that have none).
                walked.ending = Ending(result == nil ? .rolledBack : .rollbackFailed, stop: stop,
                                       error: ending.error.map { StoreOpsError(status: ExitStatus(rawValue: $0.status), $0.message, hint: $0.hint) } ?? result,
                                       rollsBack: true)
            }
        }
        walked.stages = stages
        return walked
    }

    /// What a stop at a stage's start says: the operation, the stage, why, and, when it came
    /// before the act of a road that does not roll back, that it changed nothing.
    /// `changed`: no such claim can be made; `kept`: what a road that changed the store and does
    /// not roll back keeps (`PlannedRoad.keptAfterAct`).
    func said(_ stop: Stop, changed: Bool, snapshot: Bool, kept: String? = nil) -> StoreOpsError? {
        guard let stage = stop.stage else { return nil }
        let state = changed ? kept.map { "; \($0)" } ?? "" : snapshot ? "; the store was not changed (the snapshot taken stays)" : "; nothing was changed"
        let status: ExitStatus = if case .signal(let number) = stop.reason { .signal(number) } else { .failure }
        return StoreOpsError(status: status, "\(operation) stopped before its \(stage) stage: \(stop.reason)\(state)")
    }

    /// What a stop inside a stage that had changed nothing says (it said only `stopped: SIGTERM
    /// was received`, after `restore --in-place --wait` waited for the app).
    func saidWithin(_ stop: Stop) -> StoreOpsError? {
        guard stop.stage == nil, stop.unchanged else { return nil }
        let status: ExitStatus = if case .signal(let number) = stop.reason { .signal(number) } else { .failure }
        return StoreOpsError(status: status, "\(operation) stopped during its \(current ?? "first") stage: \(stop.reason); nothing was changed")
    }

    static func ending(_ error: any Error, rollsBack: Bool) -> Ending {
        if let refusal = error as? Refusal { return Ending(.refused, error: refusal.error, rollsBack: rollsBack) }
        if let own = error as? StoreOpsError, own.status == .checksFailed { return Ending(.checksFailed, error: own, rollsBack: rollsBack) }
        return Ending.from(error, rollsBack: rollsBack)
    }
}

