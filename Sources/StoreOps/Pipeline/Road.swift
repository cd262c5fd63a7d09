import Foundation

/// The stages an operation declares, and what each hands the next: the preflight returns the
/// `Plan` the act consumes (a snapshot's work, a purge's batches), the act returns the `Value`
/// verify, commit and settle look at. Only `act` is required; `Road<Value>` is a road whose
/// preflight, if any, hands nothing on.
public struct PlannedRoad<Plan, Value> {
    public var lock: Pipeline.LockMode
    public var wait = false
    /// The repository this road reads or writes, locked in the lock stage after the store (always
    /// that order, so two roads can never wait for each other).
    public var repository: Pipeline.RepositoryNeed?
    public var preflight: ((Pipeline) throws -> Plan)?
    /// Makes the safety snapshot (of what the plan will replace) and returns its id; if it cannot
    /// be made, nothing changes.
    public var snapshot: ((Pipeline, Plan) throws -> String)?
    public var actName: String
    public var act: (Pipeline, Plan) throws -> Value
    public var verify: ((Pipeline, Value) throws -> Void)?
    /// Makes a verified result count (renames it into place, lists it): no stop is honoured any more.
    public var commit: ((Pipeline, Value) throws -> Void)?
    /// How a road that completed ends, decided inside the walk from what the act returned (a purge
    /// stopped at a safe point, deny rules that kept rows, a job's step that was refused); nil: ok.
    /// Nothing rewrites an ending after the walk.
    public var settle: ((Pipeline, Value) -> Ending?)?
    /// The commit's stage name; nil: it is part of the verify stage's time, not a stage of its own.
    public var commitName: String? = "commit"
    /// Puts the store back; returns nil when it did, or why it could not.
    public var rollback: ((Pipeline, Ending) -> StoreOpsError?)?
    /// Roll back on a failure too (a stop always rolls back when there is a rollback stage).
    public var rollbackOnFailure = false
    /// On a failure: whether anything is left to roll back (nil: assume so). Migrate says no when
    /// provably nothing committed, so a failed first migration is a failure, not a rollback.
    public var rollbackNeeded: (() -> Bool)?
    /// What a failure in act, verify or commit becomes, decided inside the walk (migrate: 1, "the
    /// store is at its last good migration", but a full disk before anything committed stays 74).
    public var failureKind: ((StoreOpsError) -> StoreOpsError.Kind)?
    /// Removes what an unfinished plan wrote (a snapshot's packs), when the walk did not end ok.
    public var abandon: ((Plan) -> Void)?
    /// What a stop after the act (before verify or commit) leaves in place, for a road whose act
    /// commits as it goes and does not roll back (purge: "the batches it committed are kept");
    /// said after the stop's reason. Nil: nothing is claimed.
    public var keptAfterAct: String?

    /// A road whose preflight makes the plan its act carries out.
    public init(lock: Pipeline.LockMode, wait: Bool = false, actName: String,
                preflight: @escaping (Pipeline) throws -> Plan, act: @escaping (Pipeline, Plan) throws -> Value) {
        self.lock = lock
        self.wait = wait
        self.actName = actName
        self.preflight = preflight
        self.act = act
    }
}

/// A road whose stages hand on only what the act returns.
public typealias Road<Value> = PlannedRoad<Void, Value>

extension PlannedRoad where Plan == Void {
    public init(lock: Pipeline.LockMode, wait: Bool = false, actName: String, act: @escaping (Pipeline) throws -> Value) {
        self.lock = lock
        self.wait = wait
        self.actName = actName
        self.act = { pipeline, _ in try act(pipeline) }
    }
}
