import Foundation
import GRDB
import GRDBSQLite
import Logging

/// The consistent-copy engine: a point-in-time copy of a live store, page for page, through the
/// SQLite online backup API, that never blocks writers in WAL mode and never livelocks.
///
/// SQLite documents why a naive stepped backup restarts forever under a steady writer
/// (https://sqlite.org/c3ref/backup_finish.html, sqlite3_backup_step()):
/// "Because the source database is not locked between calls to sqlite3_backup_step(), the source
/// database may be modified mid-way through the backup process. If the source database is modified
/// by an external process or via a database connection other than the one being used by the backup
/// operation, then the backup will be automatically restarted by the next call to
/// sqlite3_backup_step()."
///
/// - WAL mode: we open a read transaction on the source connection first and hold it for the whole
///   copy, so the source *is* locked between steps, by a WAL read lock that blocks no writer
///   (https://sqlite.org/wal.html: "readers do not block writers and a writer does not block
///   readers"). Every step then reads the same snapshot: the copy never restarts, progress is
///   real, and the copy is the store as of the moment the transaction began, `-wal` content
///   included.
/// - Rollback-journal mode: a held shared lock would stop writers from committing, so each step
///   holds it only for one bounded chunk. SQLITE_BUSY/SQLITE_LOCKED are retried until `timeout`
///   passes without progress (then exit 75). If writers restart the copy, the chunk doubles each
///   time, so a busy store still finishes, at the cost of longer (still bounded) lock holds.
///
/// The copy is converted to `journal_mode=DELETE` (the backup API copies the WAL flag of a WAL
/// source into the header), so it is one self-contained file.
public enum ConsistentCopy {
    public struct Options: Sendable {
        /// Give up (exit 75) after this long without progress because the store stays locked.
        public var timeout: TimeInterval = 60
        /// Bytes copied per backup step (turned into pages using the store's page size). A paced
        /// copy written back as it is made (`writeBehind`, `IOPace.current`) steps one pace chunk
        /// at a time instead: each step's writeback then overlaps the next step's copying.
        public var bytesPerStep = 4 << 20
        /// Write the copy back to disk as it is made (see `WriteBehind`). Off for a scratch copy
        /// that is read once and deleted (a snapshot's): it need never reach the disk at all.
        public var writeBehind = true
        public init(timeout: TimeInterval = 60, writeBehind: Bool = true) {
            self.timeout = timeout
            self.writeBehind = writeBehind
        }
    }

    /// What a finished copy knows about its source and how the copy went.
    public struct Copied: Sendable {
        public var source: Manifest.Source
        public var startedAt: Date
        public var steps: Int
        public var restarts: Int
        public var busyRetries: Int
    }

    /// What the checks of a finished copy found.
    public struct Inspection: Sendable {
        public var pageSize: Int
        public var pageCount: Int
        public var verification: Manifest.Verification
    }

    static let logger = Logger(label: "storectl.copy")

    /// Copies `store` into `destination` (an existing empty file) and converts it to a
    /// self-contained `journal_mode=DELETE` file. Check it with `verify(_:level:store:alongside:)`.
    ///
    /// ```swift
    /// let copied = try ConsistentCopy.copy(StoreFile(existing: "app.sqlite"), to: tempPath, options: .init())
    /// let (inspection, sha) = try ConsistentCopy.verify(tempPath, level: .quick, store: store) {
    ///     try Hashing.sha256(ofFile: tempPath)
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - onSnapshot: called once the copy's point in time is fixed (WAL: the read transaction is
    ///     held) with the store's figures at that point, before any page is copied: the place to
    ///     check free space and to copy files that must match the snapshot (external data).
    ///   - progress: called after every step.
    /// - Throws: `StoreOpsError`: 75 when the store stays locked past `timeout`, 65 when the
    ///   source is damaged, 74 on a full disk, 128+N on a signal.
    public static func copy(_ store: StoreFile, to destination: String, options: Options,
                            onSnapshot: (StoreInfo) throws -> Void = { _ in },
                            progress: StepHandler? = nil) throws -> Copied {
        let target = try StoreConnection.open(destination, access: .readWrite, busyTimeout: 1, side: .output, label: "storectl.copy")
        let writeBehind = options.writeBehind ? WriteBehind(path: destination) : nil   // closed after `target`, see its comment
        var options = options
        if let chunk = writeBehind?.pacedChunk { options.bytesPerStep = Int(chunk) }
        let copied = try holdingSnapshot(of: store, options: options, onSnapshot: onSnapshot) { src, info, stats in
            try target.inDatabase { dst in
                // The copy is a scratch file until it is verified and renamed: no journal, no
                // per-commit fsync; it is fsynced once, as a whole, before the rename.
                try dst.execute(sql: "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF")
                try stepBackup(from: src, to: dst.sqliteConnection, store: store, pageSize: info.pageSize, options: options,
                               stats: &stats, progress: { update in
                                   writeBehind?.advance()
                                   progress?(update)
                               })
                if src.isInsideTransaction { try src.commit() }   // release the snapshot as soon as possible
                // One self-contained file: the header says WAL if the source was WAL.
                let mode = try String.fetchOne(dst, sql: "PRAGMA journal_mode = DELETE")
                guard mode?.lowercased() == "delete" else {
                    throw StoreOpsError(.failure, "could not switch the copy to journal_mode=DELETE (got \(mode ?? "nothing"))")
                }
                writeBehind?.drain()   // paced: the final fsync finds nothing left to write
            }
        }
        do { try target.close() } catch {
            throw StoreOpsError.sqlite(error, doing: "closing the copy \(destination)", side: .output)
        }
        withExtendedLifetime(writeBehind) {}
        logger.debug("copy converted and closed", metadata: ["ms": "\(Int(Date().timeIntervalSince(copied.startedAt) * 1000))"])
        return copied
    }

    /// Opens `store` read-only, fixes a point in time (WAL: a read transaction held until `body`
    /// returns; rollback journal: only the figures are read, each backup step then locks briefly),
    /// calls `onSnapshot` with the store's figures and then `body` with the source connection.
    static func holdingSnapshot(of store: StoreFile, options: Options, onSnapshot: (StoreInfo) throws -> Void,
                                body: (Database, StoreInfo, inout CopyStats) throws -> Void) throws -> Copied {
        let startedAt = Date()
        var stats = CopyStats()
        // Short busy timeouts, retried here until `timeout`: a SQLite busy wait cannot be
        // interrupted, our loop notices signals between attempts.
        let source = try retryingBusy(timeout: options.timeout, doing: "opening \(store.path)", retries: &stats.busyRetries) {
            try StoreConnection.open(store.path, access: .readOnly, busyTimeout: 0.2, label: "storectl.source")
        }
        defer { try? source.close() }
        var sourceRecord: Manifest.Source?
        try source.inDatabase { src in
            let journalMode = try retryingBusy(timeout: options.timeout, doing: "reading \(store.path)", retries: &stats.busyRetries) {
                (try String.fetchOne(src, sql: "PRAGMA journal_mode") ?? "delete").lowercased()
            }
            stats.holdingSnapshot = journalMode == "wal"
            if stats.holdingSnapshot {
                try retryingBusy(timeout: options.timeout, doing: "starting a read transaction on \(store.path)", retries: &stats.busyRetries) {
                    do {
                        try src.beginTransaction(.deferred)
                        // The first read inside the transaction takes the WAL read lock: the snapshot.
                        _ = try Int.fetchOne(src, sql: "SELECT count(*) FROM sqlite_master")
                    } catch {
                        if src.isInsideTransaction { try? src.rollback() }
                        throw error
                    }
                }
            }
            defer { if src.isInsideTransaction { try? src.commit() } }
            let info = try retryingBusy(timeout: options.timeout, doing: "reading \(store.path)", retries: &stats.busyRetries) {
                try StoreInfo.read(src, store: store)
            }
            sourceRecord = Manifest.Source(path: store.path, journalMode: info.journalMode, pageSize: info.pageSize,
                                           pageCount: info.pageCount, fileBytes: info.fileBytes, walBytes: info.walBytes)
            try onSnapshot(info)
            logger.debug("snapshot fixed", metadata: ["ms": "\(Int(Date().timeIntervalSince(startedAt) * 1000))", "pages": "\(info.pageCount)"])
            try body(src, info, &stats)
        }
        guard let sourceRecord else { throw StoreOpsError(.failure, "the copy of \(store.path) did not start") }
        return Copied(source: sourceRecord, startedAt: startedAt, steps: stats.steps, restarts: stats.restarts,
                      busyRetries: stats.busyRetries)
    }

    /// How a copy went, step by step.
    struct CopyStats {
        var steps = 0
        var restarts = 0
        var busyRetries = 0
        /// WAL: the read transaction holds the point in time for the whole copy.
        var holdingSnapshot = false
    }

    /// Runs SQLite's backup API from `src` into the connection `dst` until done, retrying busy
    /// steps (exit 75 after `timeout` without progress) and doubling the step after a restart.
    static func stepBackup(from src: Database, to dst: OpaquePointer?, store: StoreFile, pageSize: Int, options: Options,
                           stats: inout CopyStats, progress: StepHandler?) throws {
        let startedAt = Date()
        let timeout = options.timeout
        guard let backup = sqlite3_backup_init(dst, "main", src.sqliteConnection, "main") else {
            let message = String(cString: sqlite3_errmsg(dst))
            throw StoreOpsError.fromResultCode(sqlite3_errcode(dst), message: message,
                                               doing: "starting the copy of \(store.path)", side: .output)
        }
        var finished = false
        defer { if !finished { sqlite3_backup_finish(backup) } }

        var pagesPerStep = Int32(max(16, options.bytesPerStep / max(512, pageSize)))
        var copiedBefore: Int32 = 0
        var bestCopied: Int32 = 0
        var lastProgress = Date()
        var backoff: useconds_t = 1_000
        while true {
            try ProcessSignals.checkpoint("copy of \(store.path)")
            let rc = sqlite3_backup_step(backup, pagesPerStep)
            switch rc {
            case SQLITE_OK, SQLITE_DONE:
                stats.steps += 1
                backoff = 1_000
                let total = sqlite3_backup_pagecount(backup)
                let copied = total - sqlite3_backup_remaining(backup)
                if rc == SQLITE_OK, stats.steps > 1, copied <= copiedBefore {
                    // Another process changed the store between steps and SQLite started over.
                    stats.restarts += 1
                    pagesPerStep = pagesPerStep > Int32.max / 2 ? Int32.max : pagesPerStep * 2
                    logger.debug("copy restarted by a writer; now \(pagesPerStep) pages per step")
                }
                copiedBefore = copied
                if copied > bestCopied {
                    bestCopied = copied
                    lastProgress = Date()
                }
                progress?(ProgressUpdate(phase: "copy", done: UInt64(copied), total: UInt64(total), unit: .pages,
                                         bytes: UInt64(copied) * UInt64(pageSize), startedAt: startedAt))
                if rc == SQLITE_DONE {
                    finished = true
                    return try finish(backup, into: dst, store: store)
                }
            case SQLITE_BUSY, SQLITE_LOCKED:
                stats.busyRetries += 1
                if Date().timeIntervalSince(lastProgress) > timeout {
                    throw StoreOpsError(.busy,
                        "\(store.path) stayed locked by another process for \(Format.duration(timeout)) (a long write transaction?); the copy was abandoned",
                        hint: "try again when the store is quieter, or raise --timeout")
                }
                usleep(backoff)
                backoff = min(backoff * 2, 50_000)
            default:
                finished = true
                throw abandon(backup, code: rc, into: dst, store: store)
            }
        }
    }

    private static func finish(_ backup: OpaquePointer, into dst: OpaquePointer?, store: StoreFile) throws {
        let finishCode = sqlite3_backup_finish(backup)
        guard finishCode == SQLITE_OK else {
            throw StoreOpsError.fromResultCode(finishCode, message: String(cString: sqlite3_errmsg(dst)),
                                               doing: "finishing the copy of \(store.path)", side: .output)
        }
    }

    /// "SQLITE_IOERR_XXX, SQLITE_NOMEM, or SQLITE_READONLY ... errors are considered fatal": the
    /// copy is finished (released) and the error names the side at fault.
    private static func abandon(_ backup: OpaquePointer, code rc: Int32, into dst: OpaquePointer?, store: StoreFile) -> StoreOpsError {
        let message = String(cString: sqlite3_errmsg(dst))
        sqlite3_backup_finish(backup)
        let side: StoreOpsError.Side = (rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB ? .input : .output
        return StoreOpsError.fromResultCode(rc, message: message, doing: "copying pages of \(store.path)", side: side)
    }

    /// Checks a finished copy on one core while `alongside` (hashing it, packing it) runs on
    /// the other. Both read a file that was just written, so from the page cache.
    ///
    /// - Throws: exit 65 when the check fails (the backup API copies pages exactly, so the source
    ///   itself is damaged), or whatever `alongside` throws.
    public static func verify<T: Sendable>(_ path: String, level: VerifyLevel, store: StoreFile,
                                           alongside: @Sendable () throws -> T) throws -> (Inspection, T) {
        let (inspection, other) = try inParallel({
            try onCopy(path, store: store, doing: "verifying") { db in
                Inspection(pageSize: try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 0,
                           pageCount: try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0,
                           verification: try Verifier.verify(db, level: level))
            }
        }, alongside)
        guard inspection.verification.ok else {
            throw StoreOpsError(.badData,
                "the copy of \(store.path) failed \(level == .full ? "integrity_check/foreign_key_check" : "quick_check"): \(inspection.verification.messages.prefix(3).joined(separator: "; "))",
                hint: "the backup API copies pages exactly, so the source store itself is damaged: run `storectl preflight --full \(store.path)`")
        }
        return (inspection, other)
    }

    /// The Core Data facts of a copy (model hashes, rows per entity), or nil for a plain store.
    public static func coreDataFacts(of path: String, store: StoreFile) throws -> Manifest.CoreDataFacts? {
        try onCopy(path, store: store, doing: "counting the entities of") { try coreDataFacts($0) }
    }

    /// The Core Data model facts and entity counts of an open database (nil: not a Core Data store).
    static func coreDataFacts(_ db: Database) throws -> Manifest.CoreDataFacts? {
        guard let coreData = try CoreDataStore.read(db), let counts = try CoreDataCensus.countsByEntity(db) else { return nil }
        return Manifest.CoreDataFacts(metadata: coreData.metadata, entityCounts: counts)
    }

    /// Runs `body` on a read-only connection to the copy, mapping SQLite errors.
    static func onCopy<T>(_ path: String, store: StoreFile, doing: String, _ body: (Database) throws -> T) throws -> T {
        let copy = try StoreConnection.open(path, access: .readOnly, label: "storectl.verify")
        defer { try? copy.close() }
        return try copy.inDatabase { db in
            do { return try body(db) } catch let error as StoreOpsError { throw error } catch {
                throw StoreOpsError.sqlite(error, doing: "\(doing) the copy of \(store.path)")
            }
        }
    }

    /// Runs `body`, retrying SQLITE_BUSY/SQLITE_LOCKED until `timeout` has passed (then exit 75).
    static func retryingBusy<T>(timeout: TimeInterval, doing: String, retries: inout Int, _ body: () throws -> T) throws -> T {
        let deadline = Date().addingTimeInterval(timeout)
        var backoff: useconds_t = 1_000
        while true {
            let busy: String
            do {
                return try body()
            } catch let error as DatabaseError where error.resultCode == .SQLITE_BUSY || error.resultCode == .SQLITE_LOCKED {
                busy = error.message ?? "busy"
            } catch let error as StoreOpsError where error.status == .busy {
                // Its message may already say what was being done: not twice.
                busy = error.message.hasPrefix("\(doing): ") ? String(error.message.dropFirst(doing.count + 2)) : error.message
            } catch let error as StoreOpsError {
                throw error
            } catch {
                throw StoreOpsError.sqlite(error, doing: doing)
            }
            retries += 1
            try ProcessSignals.checkpoint(doing)
            guard Date() < deadline else {
                throw StoreOpsError(.busy, "\(doing): the store stayed locked for \(Format.duration(timeout)) (\(busy))",
                                    hint: "another process holds a long write transaction; try again later, or raise --timeout")
            }
            usleep(backoff)
            backoff = min(backoff * 2, 50_000)
        }
    }
}

