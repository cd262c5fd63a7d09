import Foundation

/// The one exit map: what went wrong (`StoreOpsError.Kind`) and how a run ended (`Ending`) become
/// exit statuses here and nowhere else. `ExitMapTests` pins both tables.
public enum ExitMap {
    /// The status of a kind of failure.
    public static func status(of kind: StoreOpsError.Kind) -> ExitStatus {
        switch kind {
        case .failure: .failure
        case .checksFailed: .checksFailed
        case .rolledBack: .rolledBack
        case .rollbackFailed: .rollbackFailed
        case .usage: .usage
        case .badData: .badData
        case .noInput: .noInput
        case .cannotCreate: .cannotCreate
        case .ioError, .noSpace, .unreachable: .ioError
        case .busy: .busy
        case .wrongPassword: .wrongPassword
        case .signal(let number): .signal(number)
        }
    }

    /// The kind a recorded status stands for (the coarse kind where several share a status).
    public static func kind(of status: ExitStatus) -> StoreOpsError.Kind {
        let coarse: [StoreOpsError.Kind] = [.checksFailed, .rolledBack, .rollbackFailed, .usage, .badData, .noInput, .cannotCreate,
                                            .ioError, .busy, .wrongPassword]
        if let kind = coarse.first(where: { self.status(of: $0) == status }) { return kind }
        if case .signal(let number)? = ExitStatus.signalNumber(status) { return .signal(number) }
        return .failure
    }

    /// The status of a run's ending (outcome x stop x rollback x error):
    ///
    /// | outcome | status |
    /// |---|---|
    /// | ok | 0 |
    /// | checks failed, refused | 2 |
    /// | skipped (locked) | 75 |
    /// | rolled back | 3 |
    /// | rollback failed | 4 |
    /// | failed | its error's status (1 without one) |
    /// | stopped, with a rollback stage | 3 |
    /// | stopped by signal N | 128 + N |
    /// | stopped by the kill switch or a limit | 1 |
    public static func status(of ending: Ending) -> ExitStatus {
        switch ending.outcome {
        case .ok: return .ok
        case .checksFailed, .refused: return .checksFailed
        case .skipped: return .busy
        case .rolledBack: return .rolledBack
        case .rollbackFailed: return .rollbackFailed
        case .failed: return ending.error.map { ExitStatus(rawValue: $0.status) } ?? .failure
        case .stopped:
            if ending.rollsBack { return .rolledBack }
            switch ending.stop {
            case .signal(let number)?: return .signal(number)
            default: return .failure   // the kill switch (or a limit): what was done is committed, the rest untouched
            }
        }
    }
}
