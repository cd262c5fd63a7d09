import Foundation

/// How an operation ended: one value for every command (backup, snapshot, restore, migrate,
/// rollback, purge, the scheduled jobs).
public enum Outcome: String, Sendable, Codable, CaseIterable {
    /// Completed and verified.
    case ok
    /// Its checks found problems before anything changed (preflight, verification).
    case checksFailed = "checks failed"
    /// Stopped by the kill switch or a signal at a safe point.
    case stopped
    /// Another job held the store's lock: nothing was done (a scheduled run tries again next time).
    case skipped
    /// A rule refused to go on: a circuit breaker, deny rules keeping rows.
    case refused
    /// It failed or was stopped, and the store was put back as it was.
    case rolledBack = "rolled back"
    /// The store could not be put back: it needs a person.
    case rollbackFailed = "rollback failed"
    /// It failed (the error says why, and has its status).
    case failed
}

/// An outcome with what decides its exit status: the error of a failure, the reason of a stop,
/// and whether the operation rolls back (a stop then means "put it back").
public struct Ending: Sendable, Codable, Equatable {
    public var outcome: Outcome
    public var stop: StopReason?
    public var error: ErrorRecord?
    /// The operation declares a rollback stage: a stop asks for a rollback (exit 3 even when there
    /// was nothing to roll back yet).
    public var rollsBack: Bool

    public init(_ outcome: Outcome, stop: StopReason? = nil, error: StoreOpsError? = nil, rollsBack: Bool = false) {
        self.outcome = outcome
        self.stop = stop
        self.error = error.map(ErrorRecord.init)
        self.rollsBack = rollsBack
    }

    public static let ok = Ending(.ok)

    /// The exit status: the one place an outcome becomes one.
    public var status: ExitStatus {
        switch outcome {
        case .ok: return .ok
        case .checksFailed, .refused: return .checksFailed
        case .skipped: return .busy
        case .rolledBack: return .rolledBack
        case .rollbackFailed: return .rollbackFailed
        case .failed: return error.map { ExitStatus(rawValue: $0.status) } ?? .failure
        case .stopped:
            if rollsBack { return .rolledBack }
            switch stop {
            case .signal(let number)?: return .signal(number)
            default: return .failure   // the kill switch (or a limit): what was done is committed, the rest untouched
            }
        }
    }

    /// The ending of an error thrown before or outside the stages (bad input, a lock, a failure).
    public static func from(_ error: any Error, rollsBack: Bool = false) -> Ending {
        if let stop = error as? Pipeline.Stop { return Ending(.stopped, stop: stop.reason, rollsBack: rollsBack) }
        if let busy = error as? JobLock.Busy { return Ending(.skipped, error: busy.error, rollsBack: rollsBack) }
        let own = StoreOpsError.wrapping(error) ?? StoreOpsError(.failure, "\(error)")
        if case .signal(let number)? = ExitStatus.signalNumber(own.status) {
            return Ending(.stopped, stop: .signal(number), error: own, rollsBack: rollsBack)
        }
        return Ending(.failed, error: own, rollsBack: rollsBack)
    }

    /// The error to throw for an ending that is not ok (library callers that want errors).
    public var thrown: StoreOpsError? {
        guard outcome != .ok else { return nil }
        if let error { return StoreOpsError(status, error.message, hint: error.hint) }
        return StoreOpsError(status, stop.map { "stopped: \($0)" } ?? outcome.rawValue)
    }
}

/// A StoreOpsError as reports carry it (JSON).
public struct ErrorRecord: Sendable, Codable, Equatable {
    public var status: Int32
    public var message: String
    public var hint: String?
    public init(_ error: StoreOpsError) {
        status = error.status.rawValue
        message = error.message
        hint = error.hint
    }
}

/// Thrown by the CLI after a report was printed, so the process ends with the report's own
/// status (decided by `Ending.status`) and prints nothing more.
public struct Finished: Error, Sendable {
    public var status: ExitStatus
    public init(status: ExitStatus) { self.status = status }
    /// Throws when the ending's status is not 0.
    public static func check(_ ending: Ending) throws {
        if ending.status != .ok { throw Finished(status: ending.status) }
    }
}

extension ExitStatus {
    /// The signal a 128+N status stands for.
    static func signalNumber(_ status: ExitStatus) -> StopReason? {
        status.rawValue > 128 && status.rawValue < 160 ? .signal(status.rawValue - 128) : nil
    }
}
