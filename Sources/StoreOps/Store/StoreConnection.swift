import Foundation
import GRDB
import GRDBSQLite

/// Opens GRDB connections to stores the way every storectl operation needs them.
public enum StoreConnection {
    public enum Access: Sendable { case readOnly, readWrite }

    /// Opens `path` with a busy timeout and an interrupt check on SIGINT/SIGTERM.
    ///
    /// Read-only connections open with `SQLITE_OPEN_READONLY`, so closing them never checkpoints a
    /// WAL store or deletes its `-wal` (a read-write close by the last connection would), and they
    /// cannot change the store whatever runs on them.
    ///
    /// - Parameters:
    ///   - busyTimeout: how long SQLite waits on another process's lock before SQLITE_BUSY.
    ///   - side: whether failures to open are about an input (66) or an output (73).
    public static func open(_ path: String, access: Access, busyTimeout: TimeInterval = 5,
                            side: StoreOpsError.Side = .input, label: String = "storectl",
                            holdsTransactions: Bool = false) throws -> DatabaseQueue {
        var config = Configuration()
        // migrate keeps the store's write lock (a transaction) across its stages.
        config.allowsUnsafeTransactions = holdsTransactions
        config.readonly = access == .readOnly
        config.busyMode = .timeout(busyTimeout)
        config.label = label
        // Keep the store's own semantics: don't switch foreign key enforcement on for it.
        config.foreignKeysEnabled = false
        config.prepareDatabase { db in
            StoreConnection.installInterruptCheck(db)
        }
        // A store on a read-only mount: SQLite cannot create a WAL store's -wal/-shm there. With no
        // -wal (or an empty one) every commit is in the database file and nothing can write
        // through this mount, so it is opened immutable (https://sqlite.org/uri.html#uriimmutable:
        // "SQLite assumes that the database file cannot be changed, even by a different process").
        // With a -wal holding frames, a plain read-only open is the only correct one.
        let readOnlyVolume = (try? FileSystem.space(at: FileSystem.parent(of: FileSystem.absolute(path))))?.readOnly == true
        var opened = path
        if access == .readOnly, readOnlyVolume, (FileSystem.size(of: path + "-wal") ?? 0) == 0,
           let encoded = FileSystem.absolute(path).addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) {
            opened = "file:\(encoded)?immutable=1"
        }
        do {
            return try DatabaseQueue(path: opened, configuration: config)
        } catch let error as DatabaseError where readOnlyVolume && [.SQLITE_CANTOPEN, .SQLITE_READONLY].contains(error.resultCode) {
            throw StoreOpsError(access == .readOnly ? .noInput : .cannotCreate,
                                "\(path) is on a read-only file system\(access == .readOnly ? ", and SQLite cannot create the -shm its -wal needs there" : ": it cannot be changed")",
                                hint: access == .readOnly ? "copy the store with its -wal to a writable folder, or remount read-write" : "remount it read-write, or work on a copy")
        } catch let error as DatabaseError where [.SQLITE_CANTOPEN, .SQLITE_READONLY].contains(error.resultCode) {
            throw sidecarProblem(path, side: side) ?? StoreOpsError.sqlite(error, doing: "opening \(path)", side: side)
        } catch {
            throw StoreOpsError.sqlite(error, doing: "opening \(path)", side: side)
        }
    }

    /// Why SQLite cannot read a WAL store as this user, when that is the reason: it must open (or
    /// create) the store's -shm to read it, and the store's folder is not writable by this user
    /// while the -shm is missing or not writable by it. nil otherwise.
    public static func sidecarProblem(_ path: String, side: StoreOpsError.Side = .input) -> StoreOpsError? {
        let folder = FileSystem.parent(of: FileSystem.absolute(path))
        guard let header = try? FileProbe.shared.header(of: path), StoreFile.isWALHeader(header),
              access(folder, W_OK | X_OK) != 0, access(path + "-shm", R_OK | W_OK) != 0 else { return nil }
        let owner = RepositoryLocation.ownerAndMode(folder).map { " (\($0))" } ?? ""
        return StoreOpsError(side == .input ? .noInput : .cannotCreate, "\(path) is in WAL mode, and SQLite reads such a store through its -shm, which \(UserName.current) "
                             + "can neither open nor create: the folder \(folder)\(owner) is not writable by this user",
                             hint: "run storectl as the store's owner (the app's user), or copy the store with its -wal to a folder this user can write")
    }

    /// Makes long statements (quick_check, COUNT on a large table) stop with SQLITE_INTERRUPT once
    /// a signal has been received. `sqlite3_progress_handler`: "If the progress callback returns
    /// non-zero, the operation is interrupted" (https://sqlite.org/c3ref/progress_handler.html).
    static func installInterruptCheck(_ db: Database) {
        sqlite3_progress_handler(db.sqliteConnection, 10_000, { _ in
            ProcessSignals.received == nil ? 0 : 1
        }, nil)
    }

    /// Runs a `PRAGMA <name>_check`-style statement and returns its messages (["ok"] when clean).
    /// One message a line: SQLite can return several problems in one row, joined by newlines under
    /// a "*** in database main ***" heading, which is left out.
    public static func integrityMessages(_ db: Database, pragma: String, limit: Int = 20) throws -> [String] {
        lines(try String.fetchAll(db, sql: "PRAGMA \(pragma)(\(limit))"))
    }

    /// `PRAGMA <pragma>(table)` for one table the schema names (quoted), one message a line.
    public static func integrityMessages(_ db: Database, pragma: String, table: String) throws -> [String] {
        lines(try String.fetchAll(db, sql: "PRAGMA \(pragma)(\(table.quotedDatabaseIdentifier))"))
    }

    static func lines(_ rows: [String]) -> [String] {
        rows.flatMap { $0.split(separator: "\n", omittingEmptySubsequences: true).map(String.init) }
            .filter { !($0.hasPrefix("*** in database ") && $0.hasSuffix(" ***")) }
    }

    /// Rows reported by `PRAGMA foreign_key_check`, rendered as text.
    public static func foreignKeyViolations(_ db: Database, limit: Int = 20) throws -> (count: Int, samples: [String]) {
        let rows = try Row.fetchCursor(db, sql: "PRAGMA foreign_key_check")
        var count = 0
        var samples: [String] = []
        while let row = try rows.next() {
            count += 1
            if samples.count < limit {
                let table = row.text(0) ?? "?"
                let rowid = try? row.optionalInteger(1, "rowid")
                let parent = row.text(2) ?? "?"
                samples.append("\(table) rowid \(rowid.flatMap { $0 }.map(String.init) ?? "?") -> \(parent)")
            }
        }
        return (count, samples)
    }

    /// The linked SQLite library's version, e.g. "3.40.1".
    public static var sqliteVersion: String { String(cString: sqlite3_libversion()) }
}

extension Row {
    /// The integer in column `index`, or a 65 naming `what` when the store holds something else
    /// there (text in a key column, a blob): a value read from a store never traps.
    func integer(_ index: Int, _ what: @autoclosure () -> String) throws -> Int64 {
        let value = self[index] as DatabaseValue
        switch value.storage {
        case .int64(let n): return n
        case .double(let d) where d == d.rounded() && abs(d) < 9.2e18: return Int64(d)
        default:
            throw StoreOpsError(.badData, "\(what()): expected an integer, found \(Self.describe(value))",
                                hint: "the store was edited outside Core Data; `storectl preflight --full` shows its problems")
        }
    }

    /// The integer in column `index`, nil for NULL, 65 for anything else.
    func optionalInteger(_ index: Int, _ what: @autoclosure () -> String) throws -> Int64? {
        (self[index] as DatabaseValue).isNull ? nil : try integer(index, what())
    }

    /// The text in column `index` (numbers rendered as text), nil for NULL or a blob.
    func text(_ index: Int) -> String? {
        switch (self[index] as DatabaseValue).storage {
        case .string(let s): return s
        case .int64(let n): return String(n)
        case .double(let d): return String(d)
        default: return nil
        }
    }

    static func describe(_ value: DatabaseValue) -> String {
        switch value.storage {
        case .null: return "NULL"
        case .int64(let n): return "\(n)"
        case .double(let d): return "\(d)"
        case .string(let s): return "text \(s.prefix(40).debugDescription)"
        case .blob(let b): return "a blob of \(b.count) bytes"
        }
    }
}

/// Quotes an SQL identifier: `name` -> `"name"`, doubling embedded quotes.
///
/// Only ever applied to names that were first checked against the store's real schema.
public func quoteIdentifier(_ name: String) -> String {
    "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}
