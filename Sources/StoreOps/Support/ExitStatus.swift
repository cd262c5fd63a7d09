/// How a storectl run ended, as a process exit status (sysexits style).
///
/// This is the one table of exit statuses: the CLI maps every error to one of these in a single
/// place, and the README and `storectl --help` list the same rows.
public struct ExitStatus: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }

    /// Everything completed and was verified.
    public static let ok = ExitStatus(rawValue: 0)
    /// The operation failed for a reason not listed below.
    public static let failure = ExitStatus(rawValue: 1)
    /// The operation ran, and its checks found problems (preflight, verify, circuit breaker).
    public static let checksFailed = ExitStatus(rawValue: 2)
    /// A migration failed and the store was rolled back to its snapshot.
    public static let rolledBack = ExitStatus(rawValue: 3)
    /// A rollback failed: the store needs a person.
    public static let rollbackFailed = ExitStatus(rawValue: 4)
    /// The command line was wrong.
    public static let usage = ExitStatus(rawValue: 64)
    /// Bad data: a corrupt store, a malformed policy or archive.
    public static let badData = ExitStatus(rawValue: 65)
    /// An input is missing or unreadable.
    public static let noInput = ExitStatus(rawValue: 66)
    /// An output cannot be created.
    public static let cannotCreate = ExitStatus(rawValue: 73)
    /// An I/O error, a full disk included.
    public static let ioError = ExitStatus(rawValue: 74)
    /// Busy or locked: try again later.
    public static let busy = ExitStatus(rawValue: 75)
    /// No key of an encrypted repository opens with the password given (sysexits' EX_NOPERM).
    public static let wrongPassword = ExitStatus(rawValue: 77)

    /// Stopped by signal `number` after cleaning up (128 + N: 130 for Ctrl-C, 143 for SIGTERM).
    public static func signal(_ number: Int32) -> ExitStatus { ExitStatus(rawValue: 128 + number) }

    /// The rows of the documented table, in order.
    public static let documented: [(ExitStatus, String)] = [
        (.ok, "ok: completed and verified"),
        (.failure, "failure"),
        (.checksFailed, "checks found problems"),
        (.rolledBack, "migration failed, the store was rolled back"),
        (.rollbackFailed, "rollback failed: the store needs a person"),
        (.usage, "usage error"),
        (.badData, "bad data: corrupt store, malformed policy or archive"),
        (.noInput, "input missing or unreadable"),
        (.cannotCreate, "cannot create output"),
        (.ioError, "I/O error: disk full, or a repository in object storage unreachable"),
        (.busy, "busy or locked: try later"),
        (.wrongPassword, "wrong password, or access denied by the object store"),
        (ExitStatus(rawValue: 130), "interrupted (128 + signal: 130 Ctrl-C, 143 SIGTERM); temp files removed"),
    ]

    public var description: String { String(rawValue) }
}

extension ExitStatus {
    /// The signal a 128+N status stands for.
    static func signalNumber(_ status: ExitStatus) -> StopReason? {
        status.rawValue > 128 && status.rawValue < 160 ? .signal(status.rawValue - 128) : nil
    }
}
