import Foundation
import CSQLiteSink
import GRDBSQLite
import Logging
import Synchronization

/// `snapshot restore --in-place --live`: the staged snapshot written into the store through
/// SQLite's backup API (https://sqlite.org/backup.html), as the sqlite3 shell's `.restore` does,
/// instead of its files replaced. The app keeps its connections: its readers go on, its commits
/// wait for the one write transaction the backup makes, and its next transaction sees the
/// restored content (the backup bumps the schema cookie, so its cached schema is read again).
/// No inode is swapped, so no client can be left on replaced files, however it opens the store.
///
/// Crash safety is SQLite's own: every page goes into the `-wal` in one transaction, which is
/// there after its commit frame is written and not before (a kill -9 before leaves frames no
/// reader uses). The price: the `-wal` grows to the store's size (SQLite reuses it afterwards;
/// a passive checkpoint moves the pages into the database file as far as the app's readers let
/// it), and the database's pages are written twice.
///
/// What was committed is verified: the transaction's own frames are read back from the `-wal`
/// (their salts and checksum chain followed from where the `-wal` stood when the backup took the
/// lock) and every page compared with the staged, checked snapshot. A read transaction of our
/// own, begun before the commit, keeps those frames where they are meanwhile (no checkpoint
/// can move past it, so no writer can restart the `-wal` over them).
enum LiveRestore {
    static let logger = Logger(label: "storectl.restore")

    /// A commit by another process landed between the moment the write lock was handed to the
    /// backup and the moment the backup took it: nothing was written; the caller tries again
    /// with a new safety snapshot (that commit is not in the one it took).
    struct Interfered: Error {}

    struct Outcome: Sendable {
        /// The `-wal`'s size after the restore and its passive checkpoint.
        var walBytes: UInt64
        /// Every frame of the `-wal` was in the database file after the checkpoint.
        var checkpointed: Bool
        /// How long the store's write lock was held (the app's commits waited), from its taking
        /// (before the safety snapshot when that was taken under it) to the backup's commit.
        var lockHeld: TimeInterval
    }

    /// The first 100 bytes of the staged copy (a private file; stores are read through `FileProbe`).
    static func firstBytes(of path: String) throws -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "reading \(path)", side: .input) }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 100)
        let got = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 100, 0) }
        guard got == 100 else { throw StoreOpsError(.badData, "\(path): not a SQLite database (\(got) bytes of header)") }
        return bytes
    }

    /// Refuses a store the backup API cannot restore into as it is, before anything is staged.
    static func preflight(store: StoreFile, record: Manifest) throws {
        let header = try FileProbe.shared.header(of: store.path)
        guard StoreFile.isWALHeader(header) else {
            throw StoreOpsError.refused("--live restores into a store in WAL mode; \(store.path) is in rollback-journal mode",
                                hint: "stop the app and run it again without --live")
        }
        // The store's folder, its -wal and -shm writable by this user (SQLite's backup would fail
        // at its first step, after the safety snapshot).
        for (path, what) in [(FileSystem.parent(of: store.path), "its folder"), (store.path, "the store"), (store.walPath, "its -wal"), (store.shmPath, "its -shm")]
        where FileSystem.kind(of: path) != .missing && access(path, W_OK) != 0 {
            throw StoreOpsError(.cannotCreate, "\(path) (\(what)) is not writable by \(UserName.current): a restore through SQLite writes into the store",
                                hint: "run storectl as the store's owner (the app's user)")
        }
        let external = store.externalDataPath
        if FileSystem.kind(of: external) == .directory, !((try? FileManager.default.contentsOfDirectory(atPath: external)) ?? []).isEmpty {
            throw StoreOpsError.refused("\(store.path) has external-data files (\(external)), which a restore through SQLite cannot put back or take away beside the app",
                                hint: "stop the app and run it again without --live (its files and folder are swapped together)")
        }
        if record.externalData != nil {
            throw StoreOpsError.refused("the snapshot holds external-data files, which a restore through SQLite cannot put in place beside the app",
                                hint: "stop the app and run it again without --live (its files and folder are swapped together)")
        }
        let current = StoreFile.pageSize(fromHeader: header)
        let wanted = record.database.pageSize ?? record.source.pageSize
        guard current == wanted else {
            throw StoreOpsError.refused("the snapshot's pages are \(wanted) bytes and \(store.path)'s \(current): SQLite cannot change a WAL store's page size through its backup API",
                                hint: "stop the app and run it again without --live")
        }
        // The staged copy, and a -wal that grows to the store's size.
        let bytes = record.database.bytes
        try SpaceRequirement.require(bytes * 2 + SpaceRequirement.margin(bytes), at: FileSystem.parent(of: store.path),
                                     purpose: "a restore through SQLite (the staged copy, and a -wal of the store's size)",
                                     hint: "free space on that volume first, or stop the app and run it again without --live")
    }

    /// The pages the backup will copy from the staged copy, checked against the store before the
    /// safety snapshot: a header count SQLite trusts must be the file's (the backup copies that
    /// many: a mismatch would be found only after the commit), and the text encoding must be the
    /// store's (an app's open connection keeps the encoding it loaded its schema with, and fails
    /// every statement after a restore that changed it).
    static func stagedPageCount(_ staged: String, against store: StoreFile) throws -> Int {
        let header = try SQLitePages.Header.parse(try firstBytes(of: staged), what: "the staged snapshot \(staged)")
        let filePages = Int(FileSystem.size(of: staged) ?? 0) / header.pageSize
        guard filePages > 0, header.databaseSize.map({ Int($0) == filePages }) ?? true else {
            throw StoreOpsError(.badData, "the staged snapshot \(staged) holds \(filePages) pages and its header counts \(header.databaseSize.map { "\($0)" } ?? "none"); nothing was changed",
                                hint: "restore it --to a file and run `sqlite3 FILE 'PRAGMA integrity_check'`")
        }
        let current = try SQLitePages.Header.parse(try FileProbe.shared.header(of: store.path), what: store.path)
        guard current.textEncoding == header.textEncoding else {
            let names = [1: "UTF-8", 2: "UTF-16le", 3: "UTF-16be"]
            throw StoreOpsError.refused("the snapshot's text encoding is \(names[header.textEncoding] ?? "unknown") and \(store.path)'s \(names[current.textEncoding] ?? "unknown"): "
                                + "an app's open connection cannot read a store whose encoding changed under it; nothing was changed",
                                hint: "stop the app and run it again without --live")
        }
        return filePages
    }

    /// A test hook: `PRAGMA user_version = N` committed from a connection of its own in the window
    /// between the lock's hand-off and the backup's first step, once a process
    /// (`STORECTL_TEST_LIVE_SLIP_USER_VERSION=N`).
    private static let slip = Mutex<Int?>(ProcessInfo.processInfo.environment["STORECTL_TEST_LIVE_SLIP_USER_VERSION"].flatMap { Int($0) })

    /// Writes the staged database at `staged` (`pageCount` pages: `stagedPageCount`; closed,
    /// checked) into `store`, whose write lock `gate` holds, and verifies what was committed.
    /// - Parameters:
    ///   - committed: set once the backup's transaction is committed (an error after it is about
    ///     its read-back: the store is the restored one).
    ///   - safety: the safety snapshot's id, which an error after the commit names.
    static func apply(staged: String, pageCount: Int, into store: StoreFile, gate: WriteGate, safety: String?,
                      committed: inout Bool, progress: ProgressHandler?) throws -> Outcome {
        guard let before = WalFormat.IndexHeader.current(of: store) else {
            throw StoreOpsError(.failure, "\(store.shmPath): its wal-index header cannot be read while the restore holds the write lock")
        }
        let locked = gate.takenAt ?? Date()
        guard let handle = gate.handOff() else { throw StoreOpsError(.failure, "the write lock's connection to \(store.path) is closed") }
        defer { sqlite3_close_v2(handle) }
        // Every commit of this connection durable when it returns, whatever the build's default
        // (`synchronous=NORMAL` in WAL mode fsyncs at checkpoints only): a restore reported done
        // must survive a power cut, and its staged copy is gone after it.
        sqlite3_exec(handle, "PRAGMA synchronous = FULL", nil, nil, nil)
        if let version = slip.withLock({ value -> Int? in defer { value = nil }; return value }) {
            var other: OpaquePointer?
            if sqlite3_open_v2(store.path, &other, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK { sqlite3_exec(other, "PRAGMA user_version = \(version)", nil, nil, nil) }
            sqlite3_close_v2(other)
        }
        var source: OpaquePointer?
        let opened = sqlite3_open_v2(staged, &source, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil)
        defer { sqlite3_close_v2(source) }
        guard opened == SQLITE_OK, let source else {
            throw StoreOpsError.fromResultCode(opened, message: source.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory",
                                               doing: "opening the staged snapshot \(staged)")
        }
        guard let backup = sqlite3_backup_init(handle, "main", source, "main") else {
            throw StoreOpsError.fromResultCode(sqlite3_errcode(handle), message: String(cString: sqlite3_errmsg(handle)),
                                               doing: "starting SQLite's backup into \(store.path)", side: .output)
        }
        var finished = false
        defer { if !finished { sqlite3_backup_finish(backup) } }
        func failure(_ rc: Int32, _ doing: String) -> Error {
            // The busy handler gives up on a signal: that is a stop, not another writer.
            if let signal = ProcessSignals.received { return Pipeline.Stop(reason: .signal(signal)) }
            if rc & 0xff == SQLITE_BUSY || rc & 0xff == SQLITE_LOCKED {
                return StoreOpsError(.busy, "another process kept writing to \(store.path) while the restore waited for its write lock",
                                     hint: "try again when the app is idle")
            }
            // The backup's own code: the destination connection's message may be another call's.
            return StoreOpsError.fromResultCode(rc, message: String(cString: sqlite3_errstr(rc)), doing: doing, side: .output)
        }
        // Step 0 copies nothing: it takes the store's write lock (the busy handler the gate set
        // waits for a commit under way) and opens the transaction the pages go into.
        var rc = sqlite3_backup_step(backup, 0)
        guard rc == SQLITE_OK || rc == SQLITE_DONE else { throw failure(rc, "taking \(store.path)'s write lock for the restore") }
        FaultInjection.reach("restore.live.locked")
        guard let at = WalFormat.IndexHeader.current(of: store) else {
            throw StoreOpsError(.failure, "\(store.shmPath): its wal-index header cannot be read while the restore holds the write lock")
        }
        // SQLite adds one to the wal-index's commit counter at every commit and at nothing else.
        guard at.change == before.change else { throw Interfered() }
        let pin = try Pin(store.path)
        let started = Date()
        // 16 MiB a step at 4 KiB pages (a test sets fewer, to kill between two steps).
        let chunk = max(1, ProcessInfo.processInfo.environment["STORECTL_TEST_LIVE_CHUNK_PAGES"].flatMap { Int32($0) } ?? 4096)
        var reported = false
        while true {
            if let signal = ProcessSignals.received { throw Pipeline.Stop(reason: .signal(signal)) }
            rc = sqlite3_backup_step(backup, chunk)
            // The step that copies the last page commits the transaction before it returns DONE.
            if rc == SQLITE_DONE { committed = true; break }
            guard rc == SQLITE_OK else { throw failure(rc, "copying the snapshot into \(store.path)") }
            if !reported { FaultInjection.reach("restore.live.copying"); reported = true }
            let total = Int(sqlite3_backup_pagecount(backup)), left = Int(sqlite3_backup_remaining(backup))
            progress?(.step(ProgressUpdate(phase: "write into the store through SQLite", done: UInt64(total - left), total: UInt64(total),
                                           unit: .pages, bytes: UInt64((total - left) * at.pageSize), startedAt: started)))
        }
        finished = true
        rc = sqlite3_backup_finish(backup)
        guard rc == SQLITE_OK else { throw failure(rc, "finishing SQLite's backup into \(store.path)") }
        FaultInjection.reach("restore.live.committed")
        let lockHeld = Date().timeIntervalSince(locked)
        logger.debug("written through SQLite", metadata: ["ms": "\(Int(Date().timeIntervalSince(started) * 1000))", "pages": "\(pageCount)", "lock held (ms)": "\(Int(lockHeld * 1000))"])
        do { try verify(store: store, from: at, staged: staged, pageCount: pageCount, progress: progress) } catch {
            // Committed: whatever stopped the read-back, the store is no longer what it was.
            throw StoreOpsError(.failure, "the restore through SQLite was committed into \(store.path), but reading it back failed: \((error as? StoreOpsError)?.message ?? "\(error)")",
                                hint: safety.map { "the store's state before it is the safety snapshot \($0): restore that (or this snapshot again without --live) with the app stopped" }
                                    ?? "restore this snapshot again without --live, with the app stopped")
        }
        pin.release()
        // Into the database file as far as the app's readers allow, never waiting for them.
        var logFrames: Int32 = 0, backfilled: Int32 = 0
        let checkpoint = sqlite3_wal_checkpoint_v2(handle, "main", SQLITE_CHECKPOINT_PASSIVE, &logFrames, &backfilled)
        FaultInjection.reach("restore.live.checkpointed")
        return Outcome(walBytes: FileSystem.size(of: store.walPath) ?? 0,
                       checkpointed: checkpoint == SQLITE_OK && logFrames >= 0 && backfilled == logFrames, lockHeld: lockHeld)
    }

    /// A read transaction on a connection of its own: while it lasts, no checkpoint backfills a
    /// frame past the -wal's end when it began, so no writer restarts the -wal over the frames
    /// committed after that.
    final class Pin {
        private var db: OpaquePointer?
        init(_ path: String) throws {
            var handle: OpaquePointer?
            let rc = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil)
            guard rc == SQLITE_OK, let handle else {
                sqlite3_close_v2(handle)
                throw StoreOpsError.fromResultCode(rc, message: "opening a reader", doing: "opening \(path) to read back the restore")
            }
            db = handle
            let begun = sqlite3_exec(handle, "BEGIN; SELECT count(*) FROM sqlite_master;", nil, nil, nil)
            guard begun == SQLITE_OK else {
                let message = String(cString: sqlite3_errmsg(handle))
                release()
                throw StoreOpsError.fromResultCode(begun, message: message, doing: "starting a read transaction on \(path)")
            }
        }
        func release() {
            guard let db else { return }
            sqlite3_exec(db, "COMMIT", nil, nil, nil)
            sqlite3_close_v2(db)
            self.db = nil
        }
        deinit { release() }
    }

    /// Header bytes of page 1 the backup sets in the store, not copied: the file format versions
    /// (2 in WAL mode), the change counter and the page count (the commit frame's count is
    /// checked instead), the schema cookie (one more than the store's), and the
    /// version-valid-for number and SQLite's version that wrote it.
    static let ownHeaderBytes: [Range<Int>] = [18..<20, 24..<32, 40..<44, 92..<100]

    /// Reads the transaction just committed back from the `-wal`: its frames follow the chain on
    /// from `at` (or start a new generation: the backup's first write restarted the `-wal`), the
    /// commit frame says `pageCount` pages, and every page's last version in it is the staged one.
    static func verify(store: StoreFile, from at: WalFormat.IndexHeader, staged: String, pageCount: Int, progress: ProgressHandler?) throws {
        func wrong(_ what: String) -> StoreOpsError { StoreOpsError(.failure, what) }
        let reader = WalFileReader(path: store.walPath)
        guard try reader.open(), let header = try reader.header() else { throw wrong("\(store.walPath) is gone") }
        var cursor = WalCursor(header: header)
        if header.salt1 == at.salt1, header.salt2 == at.salt2, at.lastFrame > 0 {
            cursor.frame = at.lastFrame
            cursor.checksum = at.frameChecksum
        }
        let walk = try reader.walk(from: cursor, limit: nil, keepPages: false, stopAtFirstCommit: true)
        guard walk.cursor.frame > cursor.frame else { throw wrong("the restore's commit is not found in \(store.walPath) after frame \(cursor.frame)") }
        let commitHeader = try reader.read(count: WalFormat.frameHeaderBytes, at: header.offset(ofFrame: walk.cursor.frame))
        let committedPages = commitHeader.count == WalFormat.frameHeaderBytes ? Int(WalFormat.be32(commitHeader, 4)) : -1
        guard committedPages == pageCount else { throw wrong("the restore's commit says \(committedPages) pages, the snapshot has \(pageCount)") }
        let fd = open(staged, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "reading \(staged)", side: .input) }
        defer { close(fd) }
        let size = header.pageSize
        // SQLite never uses the page holding the lock byte at 1 GiB (the backup skips it).
        let pendingPage = 0x4000_0000 / size + 1
        let mine = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
        let theirs = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 16)
        defer { mine.deallocate(); theirs.deallocate() }
        let started = Date()
        for page in 1...max(1, pageCount) where page != pendingPage {
            guard let frame = walk.latest[UInt32(page)] else { throw wrong("page \(page) is not among the restore's frames") }
            do { try reader.readPage(frame: frame, header: header, into: theirs) } catch is WalFileReader.FrameMoved {
                throw wrong("the restore's frame \(frame) was rewritten before it was read back")
            }
            guard pread(fd, mine.baseAddress, size, off_t(page - 1) * off_t(size)) == size else {
                throw StoreOpsError.posix(errno == 0 ? EIO : errno, doing: "reading page \(page) of \(staged)", side: .input)
            }
            if page == 1 {
                for range in ownHeaderBytes { for i in range { mine[i] = 0; theirs[i] = 0 } }
            }
            guard let a = mine.baseAddress, let b = theirs.baseAddress, memcmp(a, b, size) == 0 else {
                throw wrong("page \(page) in \(store.walPath) (frame \(frame)) differs from the snapshot's")
            }
            if page % 8192 == 0 {
                progress?(.step(ProgressUpdate(phase: "read the restore back", done: UInt64(page), total: UInt64(pageCount),
                                               unit: .pages, bytes: UInt64(page * size), startedAt: started)))
            }
        }
    }
}
