import Foundation
import GRDB
import GRDBSQLite

/// The error every StoreOps API throws: what went wrong (`kind`, one catalogue for every area)
/// and where, and what to do. Its exit status is not stored: `ExitMap.status(of:)` derives it from
/// the kind, the one place a kind of failure becomes a number.
///
/// Messages name the file, key or snapshot involved; `hint` says what the operator can do next.
public struct StoreOpsError: Error, CustomStringConvertible, Sendable {
    /// What went wrong. The cases are named as the statuses they map to, so a reader sees the
    /// status at the throw site; a few say more than the status does (`noSpace`, `unreachable`).
    public enum Kind: Hashable, Sendable {
        /// Something not listed below.
        case failure
        /// The operation's own checks found problems (damage listed, a breaker, a refusal).
        case checksFailed
        case rolledBack
        case rollbackFailed
        /// The command line or an option is wrong.
        case usage
        /// A corrupt store, repository object, archive or policy; an id held by something else.
        case badData
        /// An input (store, repository, snapshot, file) is missing or unreadable.
        case noInput
        /// An output cannot be made (exists, read-only, no folder, no permission).
        case cannotCreate
        /// An I/O error.
        case ioError
        /// A full disk or quota (ENOSPC, EDQUOT, SQLITE_FULL, a free-space check).
        case noSpace
        /// Object storage that does not answer, after its retries and deadline.
        case unreachable
        /// Busy or locked by someone else: try again later.
        case busy
        /// No key opens with the password; access denied by object storage.
        case wrongPassword
        /// Interrupted by signal N.
        case signal(Int32)
    }

    public var kind: Kind
    public var message: String
    public var hint: String?
    /// The preflight check this failure is the finding of, when it is one (`integrity.quick_check`
    /// for a snapshot whose source fails it): a caller that skipped that check can report it as its own.
    public var check: String?
    /// A usage error (64) that is a refusal of what this store or snapshot cannot take (another
    /// store's snapshot, `--live` into a rollback-journal store), not a mistyped command line:
    /// said without the command's usage line.
    public var refusal = false
    /// The exit status this error ends a run with.
    public var status: ExitStatus { ExitMap.status(of: kind) }

    public init(_ kind: Kind, _ message: String, hint: String? = nil) {
        self.kind = kind
        self.message = message
        self.hint = hint
    }

    /// A refusal (64, `refusal`): the request is understood, and this store or snapshot cannot take it.
    public static func refused(_ message: String, hint: String? = nil) -> StoreOpsError {
        var error = StoreOpsError(.usage, message, hint: hint)
        error.refusal = true
        return error
    }

    /// An error rebuilt from a recorded status (an `ErrorRecord`, an ending).
    public init(status: ExitStatus, _ message: String, hint: String? = nil) {
        self.init(ExitMap.kind(of: status), message, hint: hint)
    }

    public var description: String {
        hint.map { "\(message)\n  hint: \($0)" } ?? message
    }

    /// Which side of an operation a SQLite error happened on; it decides 66 versus 73.
    public enum Side: Sendable { case input, output }

    /// Translates a SQLite (GRDB) error into a StoreOpsError with an exit status and advice.
    ///
    /// - Parameters:
    ///   - error: the error thrown by GRDB or built from a raw result code.
    ///   - doing: what we were doing, e.g. "copying pages from /data/app.sqlite".
    ///   - side: whether the file involved is one we read or one we write.
    public static func sqlite(_ error: any Error, doing: String, side: Side = .input) -> StoreOpsError {
        if let own = error as? StoreOpsError { return own }
        if error is RowDecodingError {
            return StoreOpsError(.badData, "\(doing): the store holds a value of an unexpected type (\(error))",
                                 hint: "the store was edited outside its app; `storectl preflight --full` shows its problems")
        }
        guard let dbError = error as? DatabaseError else {
            return StoreOpsError(.failure, "\(doing): \(error)")
        }
        let text = dbError.message ?? "\(dbError.resultCode)"
        return fromResultCode(dbError.extendedResultCode.rawValue, message: text, doing: doing, side: side)
    }

    /// SQLITE_READONLY_ROLLBACK: a read-only connection met a hot rollback journal.
    public static let hotJournalCode = SQLITE_READONLY | (3 << 8)
    /// What such an error says (the preflight recognises it by this).
    static let hotJournalText = "left by a writer that stopped mid-transaction, and a read-only open cannot roll it back"

    /// The error for a read-only open that met a hot rollback journal (74): what it is and how to
    /// roll it back; `store` names the journal and its size where the caller knows the path.
    static func hotJournal(_ doing: String, store: String? = nil) -> StoreOpsError {
        let journal = store.map { path in "\(path)-journal" + (FileSystem.size(of: path + "-journal").map { ", \(Format.bytes($0))" } ?? "") } ?? "its -journal"
        return StoreOpsError(.ioError, "\(doing): the store has a hot rollback journal (\(journal)) \(hotJournalText)",
                             hint: "the app's next open rolls it back; or, as the store's owner, `sqlite3 \(store ?? "STORE") 'PRAGMA quick_check'` does (any read-write open does); then run this again")
    }

    /// The error any library failure becomes at the command line: itself, a SQLite error with its
    /// documented status, or a failure (1) carrying its text.
    public static func wrapping(_ error: any Error, doing: String = "storectl") -> StoreOpsError? {
        if let own = error as? StoreOpsError { return own }
        if let busy = error as? JobLock.Busy { return busy.error }
        if let refusal = error as? Pipeline.Refusal { return refusal.error }
        if let stop = error as? Pipeline.Stop {
            if case .signal(let number) = stop.reason { return StoreOpsError(.signal(number), "stopped: \(stop.reason)") }
            return StoreOpsError(.failure, "stopped: \(stop.reason)")
        }
        if error is DatabaseError || error is RowDecodingError { return sqlite(error, doing: doing) }
        if error is DecodingError || error is EncodingError { return StoreOpsError(.badData, "\(doing): \(error)") }
        return nil
    }

    /// Builds the error for a raw SQLite result code (for C API calls GRDB does not wrap).
    public static func fromResultCode(_ code: Int32, message: String, doing: String, side: Side = .input) -> StoreOpsError {
        if code == hotJournalCode { return hotJournal(doing) }
        switch code & 0xff {
        case SQLITE_BUSY, SQLITE_LOCKED:
            return StoreOpsError(.busy, "\(doing): the store is busy (\(message))",
                                 hint: "another process holds a lock; try again later or raise --timeout")
        case SQLITE_CORRUPT, SQLITE_NOTADB:
            return StoreOpsError(.badData, "\(doing): the database is damaged or not a SQLite database (\(message))",
                                 hint: "run `storectl preflight --full` on it, and restore from a backup if it is corrupt")
        case SQLITE_FULL:
            // sqlite3_errmsg() can say "not an error" here once the statement was reset: not repeated.
            return StoreOpsError(.noSpace, "\(doing): no space left on the device",
                                 hint: "free space on the destination volume, or choose another destination")
        case SQLITE_IOERR:
            return StoreOpsError(.ioError, "\(doing): I/O error (\(message))")
        case SQLITE_CANTOPEN:
            return side == .input
                ? StoreOpsError(.noInput, "\(doing): cannot open (\(message))", hint: "check that the file exists and is readable")
                : StoreOpsError(.cannotCreate, "\(doing): cannot create (\(message))", hint: "check that the folder exists and is writable")
        case SQLITE_PERM, SQLITE_READONLY, SQLITE_AUTH:
            return side == .input
                ? StoreOpsError(.noInput, "\(doing): permission denied (\(message))")
                : StoreOpsError(.cannotCreate, "\(doing): permission denied (\(message))")
        case SQLITE_INTERRUPT:
            let signal = ProcessSignals.received ?? SIGINT
            return StoreOpsError(.signal(signal), "\(doing): interrupted by \(ProcessSignals.name(signal))")
        case SQLITE_ERROR where message.contains("unsupported file format") || message.contains("malformed database schema"):
            // A header (the file's, or page 1 in its -wal) SQLite will not read: the data, not the run.
            return StoreOpsError(.badData, "\(doing): SQLite cannot read the database (\(message))",
                                 hint: "run `storectl preflight --full` on it; a store its app can no longer open is restored from a backup or a point")
        default:
            return StoreOpsError(.failure, "\(doing): \(message) (SQLite error \(code))")
        }
    }

    /// An error from a libc call, with `errno` translated to the documented status.
    public static func posix(_ err: Int32, doing: String, side: Side) -> StoreOpsError {
        let text = String(cString: strerror(err))
        switch err {
        case ENOSPC, EDQUOT:
            return StoreOpsError(.noSpace, "\(doing): " + (err == ENOSPC ? "no space left on the device" : "no space left under the disk quota (\(text))"),
                                 hint: "free space on the destination volume, or choose another destination")
        case ENOENT, ENOTDIR:
            return side == .input
                ? StoreOpsError(.noInput, "\(doing): \(text)")
                : StoreOpsError(.cannotCreate, "\(doing): \(text)", hint: "check that the folder exists")
        case EACCES, EPERM, EROFS:
            return side == .input
                ? StoreOpsError(.noInput, "\(doing): \(text)", hint: "check the file's permissions")
                : StoreOpsError(.cannotCreate, "\(doing): \(text)", hint: "check that the folder is writable")
        case EEXIST:
            return StoreOpsError(.cannotCreate, "\(doing): \(text)")
        case ENAMETOOLONG:
            return StoreOpsError(side == .input ? .noInput : .cannotCreate, "\(doing): the name is too long (\(text))",
                                 hint: "a file name may have at most 255 bytes and a path 4,095: choose a shorter one")
        case EIO:
            return StoreOpsError(.ioError, "\(doing): \(text)")
        default:
            return StoreOpsError(side == .input ? .noInput : .ioError, "\(doing): \(text)")
        }
    }
}
