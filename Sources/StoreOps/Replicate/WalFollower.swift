import Foundation
import GRDB

/// Follows one store's `-wal`: what the app committed since the cursor, read as frames, with
/// nothing written to the store and a read transaction held only while new frames are read.
///
/// **Which state a read sees.** The wal-index header (the `-shm`'s first 48 bytes: last frame,
/// its checksum, salts, the database's size) is read before a read transaction begins and again
/// after: if they agree, no commit happened in between, so the transaction's snapshot is exactly
/// the frames up to that last frame (`pinned`). While it is held the app's checkpoints cannot copy
/// later frames into the database file nor restart the -wal under it.
///
/// **Continuity.** Within a generation (the -wal's salts), the frames after the cursor chain to
/// it by checksum, up to the pinned last frame, whose checksum must be the wal-index's. Across a
/// restart or truncation, the wal-index's commit counter (+1 per commit, kept by a restart) says
/// how many commits were made since the cursor: the new generation's frames and the old one's
/// frames still in the file after the cursor (same file, the cursor's frame intact, a checksum
/// chain from it) must account for every one (see `crossGeneration`). Anything else is a gap: the
/// caller takes a new base and records it.
final class WalFollower {
    let store: StoreFile
    private(set) var cursor: WalCursor?
    private let wal: WalFileReader
    private var connection: DatabaseQueue?
    private var databaseIdentity: (dev: UInt64, ino: UInt64)?
    private var walIdentity: (dev: UInt64, ino: UInt64)?
    /// Transactions begun until the header read before and after agreed (the last read).
    private(set) var pinAttempts = 0
    /// Whether the cursor's commit counter was read through the connection this follower still
    /// holds. While a connection is open, SQLite never rebuilds the wal-index (only the first
    /// connection to open a store recovers it, which resets the counter) nor deletes the -wal on
    /// the app's close (the closing connection is not the last); so only then do two counters
    /// compare. A cursor taken up from a segment is not, until a read of the same generation.
    private var changeTrusted = false
    /// Why it is not: a resume (nothing was followed before it), not files changed under a connection.
    private var untrustedByResume = false
    /// The most pages the store was seen to have (its base's count, then its commits'): with
    /// the file's size and the pages the -wal holds, the bound of a commit's page count.
    private var knownPages = 0

    /// A commit frame's database size (the wal-index's page count) beyond every page the file
    /// and the -wal hold, by more than this, is damage: never followed, and never used to size
    /// anything (a base sized by 2,891,548,815 pages asked for 92 GB). Growth writes every new
    /// page to the -wal (all but the lock-byte page), so a real count stays within one page.
    static let pageSlack = 65_536

    /// The most pages the store can have now: its file's, the -wal's highest page (`walPages`),
    /// and the most seen before.
    func heldPages(walPages: Dictionary<UInt32, UInt32>.Keys, pageSize: Int) -> Int {
        let filePages = Int((FileSystem.size(of: store.path) ?? 0) / UInt64(max(512, pageSize)))
        return max(filePages, knownPages, Int(walPages.max() ?? 0))
    }

    /// Why `pageCount` (of a commit at `frame`, or the wal-index's) cannot be the store's, or nil.
    func implausible(pageCount: Int, frame: UInt32?, held: Int) -> String? {
        guard pageCount > held + Self.pageSlack else { return nil }
        let which = frame.map { "its commit at frame \($0)" } ?? "its wal-index"
        return "the -wal of \(store.path) is damaged: \(which) says the database has \(Format.count(pageCount)) pages, and its file and -wal hold \(Format.count(held))"
    }
    /// The most frames' bytes one read takes in (the commits' pages are held until written): a
    /// follower further behind than this (stopped for a long time while the app's checkpoints
    /// could not run) takes a new base instead, which costs what changed, not what was written.
    var catchUpLimit = 256 << 20

    /// The frames from `from` to `last`, when more than `catchUpLimit` bytes: why not to read them.
    private func tooFarBehind(_ frames: UInt32, pageSize: Int) -> String? {
        let bytes = Int(frames) * (max(512, pageSize) + 24)
        guard bytes > catchUpLimit else { return nil }
        return "storectl was \(Format.bytes(bytes)) of -wal frames behind (more than the \(Format.bytes(catchUpLimit)) it reads at once)"
    }

    init(store: StoreFile) {
        self.store = store
        wal = WalFileReader(path: store.walPath)
    }

    /// The database file's state from a stat taken just before the last read that found the
    /// store at `cursor` with nothing committed after it (nil: no such read since the cursor was
    /// set otherwise). A segment written at that cursor records it (`PointSegment.databaseState`).
    private(set) var confirmedState: (cursor: WalCursor, state: DatabaseFileState)?

    /// The state a resumed chain's last confirmation recorded (`resume`).
    private var resumedState: DatabaseFileState?

    /// Waits (at most 50 ms) until the database file's times are before the coarse clock's
    /// present tick, so that the state the next read records tells any later write apart.
    func waitForDistinctTimes() {
        for _ in 0..<10 {
            guard let state = DatabaseFileState(of: store.path), !state.distinguishesLaterWrites else { return }
            usleep(5_000)
        }
    }

    deinit { close() }

    func close() {
        try? connection?.close()
        connection = nil
        connectionIdentity = nil
        changeTrusted = false
        untrustedByResume = false
        confirmedState = nil
        wal.close()
    }

    /// Resumes from a cursor recorded earlier (the last durable segment).
    /// - Parameter pages: the store's page count at that segment's last commit (or its chain's
    ///   base): growth in the -wal before the cursor counts toward what the store may hold.
    /// - Parameter confirmed: the chain's last confirmation (its stop, newest point or alive
    ///   marker): the database file held its state then.
    /// - Parameter state: the database file's state that confirmation recorded, if it did.
    func resume(at cursor: WalCursor, databaseIdentity: (dev: UInt64, ino: UInt64)?, walIdentity: (dev: UInt64, ino: UInt64)?, pages: Int = 0,
                confirmed: Date? = nil, state: DatabaseFileState? = nil) {
        self.cursor = cursor
        knownPages = pages
        self.databaseIdentity = databaseIdentity
        self.walIdentity = walIdentity
        resumedAfter = confirmed
        resumedState = state
        confirmedState = nil
        changeTrusted = false
        untrustedByResume = true
    }

    /// Set by `resume`: the chain's last confirmation.
    private var resumedAfter: Date?

    var identities: (database: (dev: UInt64, ino: UInt64)?, wal: (dev: UInt64, ino: UInt64)?) { (databaseIdentity, walIdentity) }

    /// Puts the cursor back where it was before a base that was not recorded (its chain goes on).
    /// - Parameter identities: the files that cursor is of. The base's read may have opened others
    ///   (the store replaced just before it): those are not taken for the cursor's, and the
    ///   wal-index's counter is not trusted until a read proves it (a review: the old file's cursor
    ///   was read against the new file's -wal, and could continue the old chain with its commits).
    func rewind(to cursor: WalCursor?, identities: (database: (dev: UInt64, ino: UInt64)?, wal: (dev: UInt64, ino: UInt64)?)? = nil) {
        self.cursor = cursor
        lastIndex = nil
        confirmedState = nil
        if let identities {
            func same(_ x: (dev: UInt64, ino: UInt64)?, _ y: (dev: UInt64, ino: UInt64)?) -> Bool { x?.dev == y?.dev && x?.ino == y?.ino }
            if !same(identities.database, databaseIdentity) { changeTrusted = false; untrustedByResume = false }
            databaseIdentity = identities.database
            walIdentity = identities.wal
        }
    }

    enum Capture {
        /// The commits since the cursor (none: nothing new); `at`: when the last of them was the
        /// store's committed state.
        case commits([WalCommit], at: Date)
        /// Continuity cannot be proven, for this reason; the commits read before it was found.
        case gap(String)
        /// One commit was checkpointed away before it was read and nothing was committed after
        /// it: the database file holds exactly its state. The next point is a base read whole
        /// (`image(expectingChange:)` checks that no commit came in between), no gap.
        /// `at`: the read that found it (the commit was made before it; none after it, the base
        /// checks): the base stands for that commit from then on.
        case wholeRead(String, change: UInt32, at: Date)
    }

    enum NotFollowable: Error { case reason(String) }

    // MARK: - The pinned read

    private func indexHeader() -> WalFormat.IndexHeader? { WalFormat.IndexHeader.current(of: store) }

    /// The file (device, inode) the connection was opened on.
    private var connectionIdentity: (dev: UInt64, ino: UInt64)?

    /// The connection, opened again when the store's path names another file than the one it was
    /// opened on (the store replaced: a read transaction on the old file would pin nothing of
    /// the new one, whose pages and -wal are read by path, and whose -shm nobody may have made).
    private func openConnection() throws -> DatabaseQueue {
        if let connection {
            if let connectionIdentity, let now = FileSystem.identity(of: store.path), now != connectionIdentity {
                close()
            } else {
                return connection
            }
        }
        let before = FileSystem.identity(of: store.path)
        let queue = try StoreConnection.open(store.path, access: .readOnly, busyTimeout: 1, label: "storectl.replicate")
        connection = queue
        connectionIdentity = before
        return queue
    }

    /// Runs `body` inside a read transaction whose snapshot is the wal-index header it is given,
    /// taken at the time it is given. 75 when the app commits so fast that 200 tries disagree.
    func pinned<T>(_ body: (WalFormat.IndexHeader, Date) throws -> T) throws -> T {
        let header = try FileProbe.shared.header(of: store.path)
        guard StoreFile.isWALHeader(header) else {
            throw NotFollowable.reason("\(store.path) is not in WAL mode (journal_mode=\(header.count >= 20 ? "delete or truncate" : "unknown"))")
        }
        let queue = try openConnection()
        return try queue.inDatabase { db in
            var unreadableIndex = 0
            for attempt in 0..<200 {
                pinAttempts = attempt + 1
                let before = indexHeader()
                if before == nil { unreadableIndex += 1 }
                do {
                    try db.beginTransaction(.deferred)
                    _ = try Int.fetchOne(try db.cachedStatement(sql: "SELECT count(*) FROM sqlite_master"))
                } catch {
                    if db.isInsideTransaction { try? db.rollback() }
                    if let error = error as? DatabaseError, [.SQLITE_BUSY, .SQLITE_LOCKED].contains(error.resultCode) {
                        usleep(1000)
                        continue
                    }
                    throw StoreOpsError.sqlite(error, doing: "reading \(store.path)")
                }
                let time = Date()
                let after = indexHeader()
                if let before, let after, before == after {
                    defer { try? db.commit() }
                    return try body(after, time)
                }
                try? db.commit()
                usleep(UInt32(min(attempt, 20)) * 50)
            }
            if unreadableIndex == 200 {
                // No -shm to read (or none whole): the store is being swapped (a restore or
                // rollback in place sets its -wal and -shm aside), or every process closed it.
                throw StoreOpsError(.busy, "\(store.path)'s wal-index (-shm) could not be read in 200 attempts: it is being replaced, or the store was closed",
                                    hint: "storectl tries again at the next interval")
            }
            throw StoreOpsError(.busy, "\(store.path) changed during each of 200 attempts to read it at one point in time",
                                hint: "the app is committing without pause; storectl tries again at the next interval")
        }
    }

    // MARK: - Base

    /// The store's state at one point: the database file's pages with the -wal's frames up to the
    /// pinned last frame laid over them, handed to `copy` in order under the read transaction
    /// (pages read with `read(first page, count, into)`). Sets the cursor there.
    struct Image {
        var time: Date
        var change: UInt32
        /// With `catchingUp`: the commits from that cursor to the base's state (nil: the -wal
        /// no longer continues it).
        var catchUp: [WalCommit]?
    }

    func image(catchingUp from: WalCursor? = nil,
               _ copy: (_ pageSize: Int, _ pageCount: Int, _ time: Date,
                        _ read: (Int, Int, UnsafeMutableRawBufferPointer) throws -> Void) throws -> Void) throws -> Image {
        for _ in 0..<5 {
            do { return try imageOnce(catchingUp: from, copy) } catch is WalFileReader.FrameMoved {
                continue   // the app restarted the -wal while its frames were read: read again
            }
        }
        throw StoreOpsError(.busy, "the -wal of \(store.path) was restarted during each of 5 reads of the store", hint: "storectl tries again")
    }

    private func imageOnce(catchingUp from: WalCursor?,
                           _ copy: (_ pageSize: Int, _ pageCount: Int, _ time: Date,
                                    _ read: (Int, Int, UnsafeMutableRawBufferPointer) throws -> Void) throws -> Void) throws -> Image {
        return try pinned { index, time in
            // The file the pinned transaction reads (checked again after the copy).
            guard let identity = connectionIdentity, FileSystem.identity(of: store.path).map({ $0 == identity }) == true else {
                throw WalFileReader.FrameMoved()
            }
            // The commits between `from` and this state, read in the same pinned transaction.
            var catchUp: [WalCommit]?
            if let from, from.headerRead, from.sameGeneration(salt1: index.salt1, salt2: index.salt2), index.lastFrame >= from.frame,
               tooFarBehind(index.lastFrame - from.frame, pageSize: index.pageSize) == nil, FileSystem.identity(of: store.path).map({ $0 == (databaseIdentity ?? $0) }) == true, try wal.open() {
                let walk = try wal.walk(from: from, limit: index.lastFrame)
                if walk.cursor.frame == index.lastFrame, walk.cursor.checksum == index.frameChecksum { catchUp = walk.commits }
            } else if let from, !from.headerRead, changeTrusted, from.change == index.change, from.sameGeneration(salt1: index.salt1, salt2: index.salt2),
                      index.lastFrame == from.frame, FileSystem.identity(of: store.path).map({ $0 == (databaseIdentity ?? $0) }) == true {
                // A generation with no frame yet (an idle store whose -wal is empty: the app
                // truncated it, or closed its last connection) and the same commit count as at the
                // cursor: nothing was committed since, as a capture would say. (It was a gap, "the
                // -wal no longer continued the chain", at every base of an idle store.)
                catchUp = []
            }
            var cursor = WalCursor(announced: index)
            var latest: [UInt32: UInt32] = [:]
            let walOpen = try wal.open()
            if index.lastFrame > 0 {
                guard walOpen, let header = try wal.header(), header.salt1 == index.salt1, header.salt2 == index.salt2,
                      header.pageSize == index.pageSize else {
                    throw StoreOpsError(.busy, "the -wal of \(store.path) does not match its wal-index yet", hint: "storectl tries again")
                }
                let walk = try wal.walk(from: WalCursor(header: header), limit: index.lastFrame, keepPages: false)
                guard walk.cursor.frame == index.lastFrame, walk.cursor.checksum == index.frameChecksum else {
                    throw StoreOpsError(.badData, "the -wal of \(store.path) does not hold the frames its wal-index names (frame \(walk.cursor.frame) of \(index.lastFrame))",
                                        hint: "run `storectl preflight \(store.path)`")
                }
                cursor = walk.cursor
                latest = walk.latest.filter { $0.value <= index.lastFrame }
            } else if walOpen, let header = try wal.header(), header.salt1 == index.salt1, header.salt2 == index.salt2 {
                cursor = WalCursor(header: header)
            }
            // A wal-index over a -wal with no frame yet may not know the page size or count: the
            // database file's header does (its in-header size, valid when its version-valid-for
            // number equals its change counter; https://sqlite.org/fileformat2.html#in_header_database_size).
            var pageSize = index.pageSize
            var pageCount = Int(index.pages)
            if index.lastFrame == 0, pageSize == 0 || pageCount == 0 {
                let db = try FileProbe.shared.header(of: store.path)
                pageSize = StoreFile.pageSize(fromHeader: db)
                let inHeader = db.count >= 100 && db[24..<28] == db[92..<96] ? Int(WalFormat.be32(db, 28)) : 0
                pageCount = inHeader > 0 ? inHeader : Int((FileSystem.size(of: store.path) ?? 0) / UInt64(max(1, pageSize)))
                cursor.pageSize = pageSize
            }
            if let why = implausible(pageCount: pageCount, frame: nil, held: heldPages(walPages: latest.keys, pageSize: pageSize)) {
                throw StoreOpsError(.badData, why, hint: "run `storectl preflight \(store.path)`; the app's SQLite may not read it either")
            }
            let header = cursor.header
            try copy(pageSize, pageCount, time) { first, count, buffer in
                try FileProbe.shared.read(store.path, into: buffer, at: (first - 1) * pageSize)
                for i in 0..<count {
                    guard let frame = latest[UInt32(first + i)] else { continue }
                    try wal.readPage(frame: frame, header: header,
                                     into: UnsafeMutableRawBufferPointer(rebasing: buffer[(i * pageSize)..<((i + 1) * pageSize)]))
                }
                if first == 1, buffer.count >= 100 { Self.normalizePage1(buffer) }
            }
            // The store replaced while it was read: read the new one.
            guard FileSystem.identity(of: store.path).map({ $0 == identity }) == true else { throw WalFileReader.FrameMoved() }
            // A restart writes the -wal's header before any frame: the same header now means
            // every frame read was this generation's.
            if index.lastFrame > 0 {
                guard let now = try wal.header(), now.salt1 == index.salt1, now.salt2 == index.salt2 else { throw WalFileReader.FrameMoved() }
            }
            cursor.change = index.change
            self.cursor = cursor
            confirmedState = nil
            changeTrusted = true
            knownPages = pageCount
            databaseIdentity = identity
            walIdentity = wal.identity
            return Image(time: time, change: index.change, catchUp: catchUp)
        }
    }

    /// Page 1 as a self-contained database has it: file format read/write versions 1 (rollback
    /// journal), as `PageSink.page1()` stores every snapshot's, so a point restores to a file that
    /// needs no -wal and its pages keep one content id however they were captured.
    static func normalizePage1(_ page: UnsafeMutableRawBufferPointer) {
        if page[18] == 2 { page[18] = 1 }
        if page[19] == 2 { page[19] = 1 }
    }

    // MARK: - Following

    /// The wal-index header at the last capture: unchanged, nothing was committed (one read of
    /// 96 bytes, no transaction).
    private var lastIndex: [UInt8]?

    /// What was committed since the cursor.
    /// - Parameter holding: called inside the pinned read after commits were read (a base being
    ///   packed takes a new boundary hold there).
    func capture(holding: (() -> Void)? = nil) throws -> Capture {
        guard let before = cursor else { return .gap("no base") }
        // Taken before the read: a commit made after the wal-index was read is not claimed, and
        // a write to the database file after the read changes the state recorded.
        let readAt = Date()
        let state = DatabaseFileState(of: store.path)
        let now = try? FileProbe.shared.read(store.shmPath, count: 96, at: 0)
        // Before the unchanged case: a file moved over an idle store leaves the -shm as it was,
        // and every read confirmed the old file's last point up to now (a review).
        guard let identity = state.map({ (dev: $0.device, ino: $0.inode) }) ?? FileSystem.identity(of: store.path) else {
            confirmedState = nil
            return .gap("\(store.path) is gone")
        }
        if let databaseIdentity, databaseIdentity != identity {
            confirmedState = nil
            close()   // the next base opens the new file
            lastIndex = nil
            return .gap("the store's file was replaced")
        }
        // (Not when a hold is to be taken: it must be taken inside a pinned read, at the cursor's state.)
        if holding == nil, let now, let lastIndex, now == lastIndex, changeTrusted {
            confirmedState = state.map { (before, $0) }
            return .commits([], at: readAt)
        }
        confirmedState = nil
        do {
            return try pinned { index, time in
                let capture = try read(index, time)
                if case .commits = capture {
                    lastIndex = index.raw + index.raw
                    if let cursor = self.cursor { confirmedState = state.map { (cursor, $0) } }
                    holding?()
                } else {
                    lastIndex = nil
                }
                return capture
            }
        } catch NotFollowable.reason(let why) {
            return .gap(why)
        }
    }

    private func read(_ index: WalFormat.IndexHeader, _ time: Date) throws -> Capture {
        guard let cursor else { return .gap("no base") }
        guard index.pageSize == cursor.pageSize || index.pageSize == 0 || cursor.pageSize == 0 else {
            return .gap("the page size changed from \(cursor.pageSize) to \(index.pageSize) bytes")
        }
        guard let changeThen = cursor.change else { return .gap("the follower's position has no commit count") }
        // A commit count that went back (further than commits could wrap it): the wal-index was
        // made again, the -wal and -shm replaced (a restore or rollback in place swaps them) or
        // rebuilt; how many commits came between is not known. (It was read as 4 billion.)
        if changeTrusted, index.change &- changeThen > UInt32(Int32.max) {
            return .gap("the store's -wal and -shm were replaced: the wal-index's commit count went back from \(changeThen) to \(index.change)")
        }
        let made = Int(index.change &- changeThen)
        if !cursor.sameGeneration(salt1: index.salt1, salt2: index.salt2) {
            // Not trusted: since a resume (not followed meanwhile), or since the connection was
            // opened again on files that changed under it (a trial's -wal and -shm removed, then
            // the store moved over: this was said "while storectl was not following").
            guard changeTrusted else {
                return .gap(untrustedByResume ? "the -wal was restarted while storectl was not following the store"
                                                : "the -wal was restarted where its commits cannot be counted (its files were removed or replaced)")
            }
            return try crossGeneration(from: cursor, to: index, made: made, time: time)
        }
        guard index.lastFrame >= cursor.frame else {
            return .gap("the -wal's generation went back from frame \(cursor.frame) to \(index.lastFrame)")
        }
        guard index.lastFrame > cursor.frame else {
            guard made == 0 || !changeTrusted else { return .gap("\(made) commits are counted but no frame was added") }
            // Taken up with an empty -wal, as it was at the stop: an app that committed, then
            // checkpointed and closed its last connection meanwhile (the -wal emptied or removed,
            // its wal-index made again) leaves no frame to read, only a database file written
            // since. The file's state as the last confirmation recorded it says so, whatever the
            // clock did meanwhile: the same size, modification and change times, nothing was
            // written. (Where none was recorded, or the file was written too close to that stat
            // for its times to tell a later write apart: a modification time after that
            // confirmation.)
            if !changeTrusted, cursor.frame == 0, let recorded = resumedState, recorded.distinguishesLaterWrites {
                guard let now = DatabaseFileState(of: store.path) else { return .gap("\(store.path) cannot be read (\(String(cString: strerror(errno))))") }
                if !now.sameFile(as: recorded) {
                    return .gap("the store's file was written while storectl was not following it (\(now.differences(from: recorded))), and its -wal holds no frame of what was committed")
                }
            } else if !changeTrusted, cursor.frame == 0, let after = resumedAfter {
                var info = stat()
                guard stat(store.path, &info) == 0 else { return .gap("\(store.path) cannot be read (\(String(cString: strerror(errno))))") }
                let modified = Date(timeIntervalSince1970: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
                if modified > after {
                    return .gap("the store's file was written at \(Timestamp.iso(modified)), after \(Timestamp.iso(after)), while storectl was not following it, and its -wal holds no frame of what was committed")
                }
            }
            self.cursor?.change = index.change
            changeTrusted = true
            return .commits([], at: time)
        }
        guard try wal.open(), let walIdentity, let now = wal.identity, walIdentity == now || cursor.frame == 0 else {
            return .gap("the -wal was removed and made again")
        }
        var from = cursor
        if !from.headerRead {
            guard let header = try wal.header(), header.salt1 == from.salt1, header.salt2 == from.salt2 else {
                return .gap("the -wal's header does not match its wal-index")
            }
            from = WalCursor(header: header)
        }
        if let why = tooFarBehind(index.lastFrame - cursor.frame, pageSize: cursor.pageSize) { return .gap(why) }
        var walk = try wal.walk(from: from, limit: index.lastFrame)
        guard walk.cursor.frame == index.lastFrame, walk.cursor.checksum == index.frameChecksum else {
            return .gap("the -wal's frames after frame \(cursor.frame) do not chain to the wal-index's last frame \(index.lastFrame)")
        }
        // Within a generation the chain itself proves continuity; the counter is a second check
        // when it can be compared.
        guard walk.commits.count == made || !changeTrusted else {
            return .gap("the wal-index counts \(made) commits since the last read, the -wal holds \(walk.commits.count)")
        }
        if let why = implausibleCommit(walk) { return .gap(why) }
        walk.cursor.change = index.change
        changeTrusted = true
        self.cursor = walk.cursor
        self.walIdentity = wal.identity
        return .commits(walk.commits, at: time)
    }

    /// The first commit of a walk whose page count cannot be the store's (see `implausible`);
    /// else the walk's commits raise `knownPages`.
    private func implausibleCommit(_ walk: WalFileReader.Walk) -> String? {
        // The bound is worked out only when a commit needs it (a stat of the file, once a walk).
        var held: Int?
        for commit in walk.commits where Int(commit.pageCount) > knownPages + Self.pageSlack {
            let bound = held ?? heldPages(walPages: walk.latest.keys, pageSize: cursor?.pageSize ?? 0)
            held = bound
            if let why = implausible(pageCount: Int(commit.pageCount), frame: commit.frame, held: bound) { return why }
        }
        knownPages = max(knownPages, walk.commits.map { Int($0.pageCount) }.max() ?? 0)
        return nil
    }

    /// The -wal was restarted since the cursor. The wal-index's commit counter says how many
    /// commits were made since (`made`); the new generation's frames hold some of them, the old
    /// generation's frames after the cursor (when the file still holds them: a restart rewrites
    /// from the start, only a truncation removes them) the rest. If together they account for
    /// every one, nothing was missed; otherwise it is a gap.
    private func crossGeneration(from cursor: WalCursor, to index: WalFormat.IndexHeader, made: Int, time: Date) throws -> Capture {
        var next = WalCursor(announced: index)
        next.change = index.change
        var fresh: [WalCommit] = []
        let walOpen = try wal.open()
        if index.lastFrame > 0 {
            guard walOpen, let header = try wal.header(), header.salt1 == index.salt1, header.salt2 == index.salt2 else {
                return .gap("the -wal's header does not match its wal-index after a restart")
            }
            if let why = tooFarBehind(index.lastFrame, pageSize: index.pageSize) { return .gap(why) }
            var walk = try wal.walk(from: WalCursor(header: header), limit: index.lastFrame)
            guard walk.cursor.frame == index.lastFrame, walk.cursor.checksum == index.frameChecksum else {
                return .gap("the restarted -wal's frames do not chain to the wal-index's last frame \(index.lastFrame)")
            }
            if let why = implausibleCommit(walk) { return .gap(why) }
            walk.cursor.change = index.change
            fresh = walk.commits
            next = walk.cursor
        }
        var tail: [WalCommit] = []
        let missing = made - fresh.count
        if missing > 0 {
            // The old generation's last frames, if they are still there (same file, the cursor's
            // frame intact, a chain of exactly the missing commits after it).
            if walOpen, let walIdentity, let now = wal.identity, walIdentity == now, cursor.headerRead, try wal.frameIntact(cursor) {
                // The old generation's frames after the cursor, as far as they chain, bounded like
                // any read: walked up to the budget, not judged by the file's size. A -wal that
                // once grew large (a base held the app's checkpoints back through an outage; an
                // app's long read) keeps its size after a restart, its stale frames included: every
                // restart was then "too far behind", a gap and a base, until the writer stopped (a trial).
                let frameBytes = max(512, cursor.pageSize) + 24
                let budget = UInt32(clamping: max(1, catchUpLimit / frameBytes))
                let old = try wal.walk(from: cursor, limit: cursor.frame &+ budget > cursor.frame ? cursor.frame + budget : UInt32.max)
                if old.endFound == .limit, old.commits.count < missing {
                    return .gap(tooFarBehind(budget &+ 1, pageSize: cursor.pageSize) ?? "storectl was too far behind the -wal")
                }
                if let why = implausibleCommit(old) { return .gap(why) }
                tail = old.commits
            }
            if tail.count != missing, missing == 1, fresh.isEmpty {
                return .wholeRead("the -wal was truncated before its last commit was read; that commit's state is read from the database file",
                                  change: index.change, at: time)
            }
            guard tail.count == missing else {
                // No count: the wal-index's is not one storectl can check, and it said far fewer
                // than were lost (trials: 265 where some 2,500 were, 89 where some 3,350 were); the
                // gap's span says how long nothing is claimed.
                return .gap("the -wal was restarted and commits were checkpointed away before they were read")
            }
        } else if missing < 0 {
            return .gap("the wal-index counts \(made) commits since the last read, the restarted -wal holds \(fresh.count)")
        }
        self.cursor = next
        self.walIdentity = wal.identity
        changeTrusted = true
        return .commits(tail + fresh, at: time)
    }
}

/// A database file's size, modification and change times, as a stat gave them, and the coarse
/// clock when it was taken (ns since 1970). Two equal states of one file (its identity is checked
/// apart) mean it was not written in between, whatever the clock did, provided a write after the
/// first stat could not have been given the times it already had: the kernel stamps a write with
/// its coarse clock, so a file last written before the coarse clock's present tick gets a later
/// time from any later write (`distinguishesLaterWrites`). `utimensat` sets the modification
/// time but not the change time.
struct DatabaseFileState: Equatable, Sendable {
    var size: Int64
    var modified: Int64
    var changed: Int64
    var takenAt: Int64
    var device: UInt64 = 0
    var inode: UInt64 = 0

    init?(of path: String) {
        var clock = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &clock)
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        size = Int64(info.st_size)
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
        modified = Self.ns(info.st_mtim)
        changed = Self.ns(info.st_ctim)
        takenAt = Self.ns(clock)
    }

    init?(recorded fields: [Int64]?) {
        guard let fields, fields.count == 4 else { return nil }
        size = fields[0]; modified = fields[1]; changed = fields[2]; takenAt = fields[3]
    }

    var recorded: [Int64] { [size, modified, changed, takenAt] }

    static func ns(_ t: timespec) -> Int64 { Int64(t.tv_sec) &* 1_000_000_000 &+ Int64(t.tv_nsec) }

    /// The file's times were before the coarse clock's tick when this was taken: a later write
    /// is stamped later (a write in that same tick could have been given the same times).
    var distinguishesLaterWrites: Bool { max(modified, changed) < takenAt }

    func sameFile(as other: DatabaseFileState) -> Bool {
        size == other.size && modified == other.modified && changed == other.changed
    }

    /// What differs from `other`, for a message.
    func differences(from other: DatabaseFileState) -> String {
        var out: [String] = []
        if size != other.size { out.append("its size went from \(Format.bytes(Int(other.size))) to \(Format.bytes(Int(size)))") }
        if modified != other.modified { out.append("modified at \(Timestamp.iso(Self.date(modified))), recorded \(Timestamp.iso(Self.date(other.modified)))") }
        if changed != other.changed { out.append("its inode changed at \(Timestamp.iso(Self.date(changed))), recorded \(Timestamp.iso(Self.date(other.changed)))") }
        return out.joined(separator: "; ")
    }

    static func date(_ ns: Int64) -> Date { Date(timeIntervalSince1970: Double(ns) / 1e9) }
}
