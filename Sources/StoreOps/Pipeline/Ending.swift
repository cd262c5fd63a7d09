import Foundation

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

    /// The exit status (`ExitMap.status(of:)`).
    public var status: ExitStatus { ExitMap.status(of: self) }

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
        if let error { return StoreOpsError(status: status, error.message, hint: error.hint) }
        return StoreOpsError(status: status, stop.map { "stopped: \($0)" } ?? outcome.rawValue)
    }
}
