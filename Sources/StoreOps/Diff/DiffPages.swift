import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// One side of a diff as pages: a database file, or a snapshot or point in a repository.
protocol DiffPages: AnyObject {
    /// How messages name this side.
    var what: String { get }
    var pageSize: Int { get }
    var pageCount: Int { get }
    /// The pages asked for (numbers from 1 to `pageCount`), by number.
    func read(_ pages: [UInt32]) throws -> [UInt32: [UInt8]]
    /// Page `page`'s content id when the other side's can be compared with it without reading
    /// either (both in one repository), else nil.
    func contentID(_ page: UInt32) -> ContentID?
    /// Pages read so far.
    var pagesRead: Int { get }
}

/// A database file read page by page while a read transaction keeps it still: in rollback mode
/// the shared lock keeps writers out; in WAL mode the file is read only when the transaction
/// reads nothing from the `-wal` (then no checkpoint may write into the file until it ends).
final class FilePages: DiffPages {
    let what: String
    let path: String
    let pageSize: Int
    let pageCount: Int
    private(set) var pagesRead = 0
    fileprivate let fd: Int32
    /// False for a live store's file: read through `FileProbe`'s kept descriptor, never closed
    /// (closing one would drop every fcntl lock this process holds on the file: the read hold's,
    /// and the write lock `migrate` holds while its verify stage runs this diff).
    private let ownsDescriptor: Bool
    private let connection: ReadHold?

    /// Why a file cannot be read as it is (its `-wal` holds committed pages): the caller reads a
    /// consistent copy instead.
    struct NeedsCopy: Error {}

    /// - Parameter hold: take a read transaction on the file through SQLite (a store); false for
    ///   a private copy no one else opens.
    init(path: String, what: String, hold: Bool) throws {
        self.path = path
        self.what = what
        var connection: ReadHold?
        if hold {
            let held = try ReadHold(path: path)
            // Read after the transaction started: a -wal still empty now was empty when it
            // started (while it lasts no checkpoint can reset a -wal it reads from). One whose
            // every frame is checkpointed into the file (most live stores between writes: SQLite
            // keeps the -wal's length) holds nothing the file does not.
            if held.journalMode == "wal", FileSystem.size(of: path + "-wal") ?? 0 > 32,
               !WalFormat.IndexHeader.backfilled(of: StoreFile(unchecked: path)) { throw NeedsCopy() }
            connection = held
        }
        self.connection = connection
        ownsDescriptor = !hold
        let fd = hold ? try FileProbe.shared.descriptor(for: path) : open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "opening \(path)", side: .input) }
        func closeOwn() { if !hold { close(fd) } }
        var first = [UInt8](repeating: 0, count: 100)
        let got = first.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 100, 0) }
        guard got == 100 else {
            closeOwn()
            throw StoreOpsError(.badData, "\(what) is not a SQLite database (\(got < 0 ? "unreadable" : "\(got) bytes"))")
        }
        let header: SQLitePages.Header
        do { header = try SQLitePages.Header.parse(first, what: what) } catch {
            closeOwn()
            throw error
        }
        self.fd = fd
        pageSize = header.pageSize
        var info = stat()
        fstat(fd, &info)
        // The header's count, as SQLite reads it (a file grown in chunks is longer); else the
        // file's length. A count past the file's end is a damaged store, to SQLite too.
        let filePages = Int(info.st_size) / header.pageSize
        if let counted = header.databaseSize, Int(counted) > filePages {
            closeOwn()
            throw SQLitePages.damaged(what, "its header counts \(counted) pages, the file holds \(filePages)")
        }
        pageCount = header.databaseSize.map { Int($0) } ?? filePages
        // SQLite's own limit (page numbers are 32 bits); checked before anything is sized by it.
        guard pageCount < Int(UInt32.max) else {
            closeOwn()
            throw StoreOpsError(.badData, "\(what) has \(pageCount) pages, more than SQLite's page numbers can address")
        }
    }

    deinit {
        if ownsDescriptor { close(fd) }
        _ = connection
    }

    func read(_ pages: [UInt32]) throws -> [UInt32: [UInt8]] {
        var out: [UInt32: [UInt8]] = [:]
        out.reserveCapacity(pages.count)
        for page in pages where out[page] == nil {
            out[page] = try readOne(page)
        }
        return out
    }

    func readOne(_ page: UInt32) throws -> [UInt8] {
        let bytes = try readUncounted(page)
        pagesRead += 1
        return bytes
    }

    /// Page `page`, not counted as read by this side (read for another side it stands in for).
    func readUncounted(_ page: UInt32) throws -> [UInt8] {
        guard page >= 1, Int(page) <= pageCount else {
            throw StoreOpsError(.badData, "\(what): page \(page) is past its end (\(pageCount) pages)")
        }
        var bytes = [UInt8](repeating: 0, count: pageSize)
        let size = pageSize
        let got = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, size, off_t(Int(page) - 1) * off_t(size)) }
        guard got == pageSize else { throw StoreOpsError.posix(got < 0 ? errno : EIO, doing: "reading page \(page) of \(path)", side: .input) }
        return bytes
    }

    /// Which pages of two files (same page size) hold the same bytes: read a megabyte at a time
    /// from both, on two lanes. Pages past either file's end are not the same.
    static func samePages(_ a: FilePages, _ b: FilePages) throws -> [Bool] {
        let count = min(a.pageCount, b.pageCount), size = a.pageSize
        let chunkPages = max(1, (1 << 20) / size)
        let chunks = (count + chunkPages - 1) / chunkPages
        let out = Mutex([Bool](repeating: false, count: count))
        let next = Mutex(0)
        let failure = Mutex<(any Error)?>(nil)
        onLanes(2) { _ in
            var x = [UInt8](repeating: 0, count: chunkPages * size), y = x
            while true {
                let chunk = next.withLock { value -> Int in defer { value += 1 }; return value }
                guard chunk < chunks, failure.withLock({ $0 == nil }) else { return }
                let first = chunk * chunkPages, pages = min(chunkPages, count - first), bytes = pages * size
                let offset = off_t(first) * off_t(size)
                let gotA = x.withUnsafeMutableBytes { pread(a.fd, $0.baseAddress, bytes, offset) }
                let gotB = y.withUnsafeMutableBytes { pread(b.fd, $0.baseAddress, bytes, offset) }
                guard gotA == bytes, gotB == bytes else {
                    failure.withLock { $0 = StoreOpsError(.ioError, "reading \(gotA == bytes ? b.path : a.path) at byte \(offset): short read") }
                    return
                }
                var same = [Bool](repeating: false, count: pages)
                x.withUnsafeBytes { rx in
                    y.withUnsafeBytes { ry in
                        for i in 0..<pages { same[i] = memcmp(rx.baseAddress! + i * size, ry.baseAddress! + i * size, size) == 0 }
                    }
                }
                out.withLock { all in for i in 0..<pages { all[first + i] = same[i] } }
            }
        }
        if let error = failure.withLock({ $0 }) { throw error }
        a.pagesRead += count
        b.pagesRead += count
        return out.withLock { $0 }
    }

    /// Set when the other side is a repository's: this file's pages get that repository's
    /// content ids (all computed at the first ask, on two lanes), so unchanged pages compare
    /// without decompressing the snapshot's.
    var sealer: Sealer?
    private var ids: [ContentID]?
    private var hashFailed = false

    func contentID(_ page: UInt32) -> ContentID? {
        guard let sealer, page >= 1, Int(page) <= pageCount, !hashFailed else { return nil }
        if ids == nil {
            ids = hashAll(sealer)
            hashFailed = ids == nil
        }
        return ids?[Int(page) - 1]
    }

    private func hashAll(_ sealer: Sealer) -> [ContentID]? {
        let count = pageCount, size = pageSize, fd = self.fd
        let chunkPages = max(1, (1 << 20) / size)
        let chunks = (count + chunkPages - 1) / chunkPages
        let out = Mutex([ContentID](repeating: .zero, count: count))
        let next = Mutex(0)
        let failed = Mutex(false)
        onLanes(2) { _ in
            var buffer = [UInt8](repeating: 0, count: chunkPages * size)
            while true {
                let chunk = next.withLock { value -> Int in defer { value += 1 }; return value }
                guard chunk < chunks, !failed.withLock({ $0 }) else { return }
                let first = chunk * chunkPages, pages = min(chunkPages, count - first)
                let got = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, pages * size, off_t(first) * off_t(size)) }
                guard got == pages * size else { failed.withLock { $0 = true }; return }
                var local: [ContentID] = []
                local.reserveCapacity(pages)
                buffer.withUnsafeBytes { raw in
                    for i in 0..<pages { local.append(sealer.contentID(UnsafeRawBufferPointer(rebasing: raw[(i * size)..<((i + 1) * size)]))) }
                }
                out.withLock { ids in for (i, id) in local.enumerated() { ids[first + i] = id } }
            }
        }
        guard !failed.withLock({ $0 }) else { return nil }
        pagesRead += count
        return out.withLock { $0 }
    }
}

/// A read transaction held on a store through SQLite's C API (GRDB ends every access's
/// transaction), read-only, waiting up to 5 s for a writer's lock.
final class ReadHold {
    private var db: OpaquePointer?
    let journalMode: String

    /// - Parameter busyMilliseconds: how long to wait for a lock (the diff waits for a writer; the
    ///   replicate loop does not).
    init(path: String, busyMilliseconds: Int32 = 5000) throws {
        var handle: OpaquePointer?
        let rc = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil)
        db = handle
        func fail(_ rc: Int32, _ doing: String) -> StoreOpsError {
            if [SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_PERM].contains(rc & 0xff), let problem = StoreConnection.sidecarProblem(path) { return problem }
            // A hot rollback journal (a writer stopped mid-transaction): a read-only open must roll
            // it back before anything is read, and cannot. Only the extended code says so.
            if handle.map({ sqlite3_extended_errcode($0) }) == StoreOpsError.hotJournalCode { return .hotJournal("\(doing) \(path)", store: path) }
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            // The shared mapping decides busy and bad data (a header SQLite will not read included);
            // anything else reading a file is an I/O error here.
            let mapped = StoreOpsError.fromResultCode(rc, message: message, doing: doing).kind
            let status: StoreOpsError.Kind = mapped == .busy || mapped == .badData ? mapped : .ioError
            var detail = ""
            if status == .badData, let short = StoreFile.shortfall(of: path) {
                detail = "; it is truncated: its header counts \(Format.count(Int(short.pages))) pages of \(short.pageSize) bytes, the file holds \(Format.bytes(short.size))"
            }
            let hint: String? = status == .busy ? "another process holds the store's lock; try again"
                : status == .badData ? "`storectl preflight --full \(path)` says what is damaged; restore it from a backup or snapshot" : nil
            return StoreOpsError(status, "\(doing) \(path): \(message)\(detail)", hint: hint)
        }
        guard rc == SQLITE_OK, let handle else {
            let error = fail(rc, "opening")
            sqlite3_close_v2(handle)
            db = nil
            throw error
        }
        sqlite3_busy_timeout(handle, busyMilliseconds)
        var mode = ""
        for sql in ["BEGIN DEFERRED", "SELECT count(*) FROM sqlite_master", "PRAGMA journal_mode"] {
            var statement: OpaquePointer?
            var rc = sqlite3_prepare_v2(handle, sql, -1, &statement, nil)
            if rc == SQLITE_OK {
                rc = sqlite3_step(statement)
                if rc == SQLITE_ROW, sql.hasPrefix("PRAGMA"), let text = sqlite3_column_text(statement, 0) { mode = String(cString: text).lowercased() }
                if rc == SQLITE_ROW || rc == SQLITE_DONE { rc = SQLITE_OK }
            }
            sqlite3_finalize(statement)
            guard rc == SQLITE_OK else {
                let error = fail(rc, "reading")
                sqlite3_close_v2(handle)
                db = nil
                throw error
            }
        }
        journalMode = mode
    }

    deinit {
        guard let db else { return }
        sqlite3_exec(db, "ROLLBACK", nil, nil, nil)
        sqlite3_close_v2(db)
    }
}

/// A snapshot, or a point laid over its chain's base, read from its repository: the map gives
/// each page's content id; pages are read from their frames (each frame once a batch, opened and
/// checked) only when the diff needs them.
///
/// Memory: until the side is located its map is held as ids (32 bytes a page); `locate` keeps
/// instead where each page's blob is (6 bytes a page), and a page's id is then its index entry's
/// (the indexes' frames are held anyway to read the pages). Two sides of a 1 GiB store held 25
/// MiB of maps and lookup tables through the whole diff; located, 3 MiB.
final class RepositoryPages: DiffPages {
    let what: String
    let repository: PagedRepository
    let pageSize: Int
    let pageCount: Int
    /// The snapshot (a point's chain base).
    let record: PagedSnapshotRecord
    private let overlay: OverlayPages?
    /// The external-data files, by name (a point's: what its restore writes, `PointOverlay.fileSet`).
    let files: [String: (bytes: UInt64, sha256: String)]
    /// The map's ids, until located (then empty: see `contentID`).
    private var ids: [ContentID]
    /// Per page: where its blob is, as (frame + 1, blob); frame 0: in no index (its id in `unlocated`).
    private var frameOf: [UInt32] = []
    private var blobOf: [UInt16] = []
    private var frames: [(pack: ContentID, frame: FrameEntry)] = []
    private var unlocated: [UInt32: ContentID] = [:]
    private var located = false
    private(set) var pagesRead = 0
    private(set) var framesRead = 0
    /// Plaintext bytes decompressed to read them (only the chunks holding the pages needed).
    private(set) var bytesDecompressed = 0
    /// The snapshot's b-tree interior pages as its record lists them (`InteriorPages`), when it
    /// does and no point's pages lie over it.
    private let interiorHint: Bitset?
    /// Pages kept by `prefetch`: interior b-tree pages (read again and again by the walks), and
    /// the pages it was asked for (each decoded once), compressed: the bench pair's 5,300 kept
    /// leaves grew the resident set by 26 MiB as they are, by 8-15 MiB compressed, for about
    /// 0.05 s of compressing and decompressing in a run of 1 s.
    private var cache: [UInt32: [UInt8]] = [:]
    private var packed: [UInt32: Data] = [:]
    private var unpacker: ZstdFrames?

    /// Kept pages decompressed.
    private func unpack(_ list: [(UInt32, Data)]) throws -> [UInt32: [UInt8]] {
        let zstd = try unpacker ?? ZstdFrames(level: 1)
        unpacker = zstd
        var out: [UInt32: [UInt8]] = [:]
        out.reserveCapacity(list.count)
        for (page, compressed) in list {
            out[page] = [UInt8](try zstd.decompress(compressed, rawLength: pageSize, what: "\(what): page \(page) as kept"))
        }
        return out
    }

    /// A file diffed against this side (its pages hashed with this repository's key): a page
    /// whose content id is the same at the same number in the file is read from the file (a
    /// `pread`) instead of from its frame (decompressed with the rest of the frame). A file
    /// against a snapshot then reads only the frames holding pages that differ, not every frame
    /// for the b-tree interior pages the walks need (the snapshot before a migration: a handful
    /// instead of all). Each page so read is hashed again and must match.
    var standIn: FilePages?

    /// Page `page` has the same content in `standIn`.
    func sharedWithStandIn(_ page: UInt32) -> Bool {
        guard let standIn, let id = standIn.contentID(page), let mine = contentID(page) else { return false }
        return id == mine
    }

    /// - Parameter locations: where the map's blobs are, when the caller found them (with the
    ///   index files it could not read, for the message when one is missing).
    init(record: PagedSnapshotRecord, overlay: PointOverlay?, repository: PagedRepository, what: String,
         locations: [ContentID: BlobLocation]? = nil, damaged: [RepositoryIndex.Damaged] = []) throws {
        self.what = what
        self.repository = repository
        self.record = record
        pageSize = record.pages.pageSize
        ids = try overlay?.ids ?? BlobLocator.pageMap(of: record, in: repository, locations: locations, damaged: damaged).ids
        guard ids.count < Int(UInt32.max) else { throw StoreOpsError(.badData, "\(what): its map lists \(ids.count) pages, more than SQLite can address") }
        pageCount = ids.count
        self.overlay = overlay?.pages
        interiorHint = overlay == nil && record.pages.pageCount == ids.count ? record.interior?.bitset(pageCount: ids.count) : nil
        files = overlay?.fileSet(base: record) ?? record.externalFileSet
    }

    func contentID(_ page: UInt32) -> ContentID? {
        guard page >= 1, Int(page) <= pageCount else { return nil }
        let p = Int(page) - 1
        guard located else { return ids[p] }
        let frame = frameOf[p]
        guard frame > 0 else { return unlocated[page] }
        return frames[Int(frame) - 1].frame.blobs[Int(blobOf[p])].id
    }

    /// Finds where the pages of every side are, in one pass over the repository's indexes, and
    /// lets go of each side's ids.
    static func locate(_ sides: [RepositoryPages]) throws {
        let pending = sides.filter { !$0.located }
        guard !pending.isEmpty, let repository = pending.first?.repository, pending.count <= 64 else {
            for side in sides where !side.located { try locate([side]) }
            return
        }
        // Every blob of every index is looked up in each side's table: the tables and what is
        // filled in are taken out of the sides for the scan (a class's properties in this loop
        // cost an access check and a retain each, more than the lookups themselves). Each side
        // is its own work (its table, its arrays): the sides are looked up on lanes of their
        // own, a batch of packs at a time, in the scan's order (as one lane would).
        final class Side: @unchecked Sendable {   // one lane's at a time
            let table: PagesByID
            var frameOf: [UInt32]
            var blobOf: [UInt16]
            var frames: [(pack: ContentID, frame: FrameEntry)] = []
            init(_ pages: RepositoryPages) {
                table = PagesByID(pages.ids)
                frameOf = [UInt32](repeating: 0, count: pages.pageCount)
                blobOf = [UInt16](repeating: 0, count: pages.pageCount)
            }
            func visit(_ packs: [(ContentID, PackContents)]) {
                // Out of the object for the loop (see above), uniquely held, then back.
                let table = self.table
                var frameOf = self.frameOf, blobOf = self.blobOf, frames = self.frames
                self.frameOf = []; self.blobOf = []; self.frames = []
                defer { self.frameOf = frameOf; self.blobOf = blobOf; self.frames = frames }
                for (pack, contents) in packs {
                    for frame in contents.frames {
                        var listed = false
                        for (b, blob) in frame.blobs.enumerated() where blob.type == .page && b <= Int(UInt16.max) {
                            guard var page = table.first(blob.id), frameOf[page] == 0 else { continue }
                            if !listed {
                                frames.append((pack, frame))
                                listed = true
                            }
                            while true {   // every page with this id (pages repeat: empty ones, copies)
                                frameOf[page] = UInt32(frames.count)
                                blobOf[page] = UInt16(b)
                                guard let next = table.next(after: page) else { break }
                                page = next
                            }
                        }
                    }
                }
            }
        }
        let work = Mutex<[Side?]>(Array(repeating: nil, count: pending.count))
        onLanes(min(2, pending.count)) { lane in
            for s in stride(from: lane, to: pending.count, by: 2) {
                let side = Side(pending[s])
                work.withLock { $0[s] = side }
            }
        }
        let sides = work.withLock { $0.compactMap { $0 } }
        var batch: [(ContentID, PackContents)] = []
        func visit() {
            let packs = batch
            batch.removeAll(keepingCapacity: true)
            onLanes(min(2, sides.count)) { lane in
                for s in stride(from: lane, to: sides.count, by: 2) { sides[s].visit(packs) }
            }
        }
        _ = try RepositoryIndex.scan(repository) { _, pack, contents in
            batch.append((pack, contents))
            if batch.count >= 64 { visit() }
        }
        if !batch.isEmpty { visit() }
        let frameOf = sides.map(\.frameOf), blobOf = sides.map(\.blobOf), frames = sides.map(\.frames)
        for (s, side) in pending.enumerated() {
            var unlocated: [UInt32: ContentID] = [:]
            for p in frameOf[s].indices where frameOf[s][p] == 0 { unlocated[UInt32(p + 1)] = side.ids[p] }
            side.frameOf = frameOf[s]
            side.blobOf = blobOf[s]
            side.frames = frames[s]
            side.unlocated = unlocated
            side.located = true
            side.ids = []
        }
    }

    /// How many frames hold these pages (located sides).
    func framesHolding(_ pages: Set<UInt32>) -> Int {
        var frames = Set<UInt32>()
        for page in pages where page >= 1 && Int(page) <= frameOf.count { frames.insert(frameOf[Int(page) - 1]) }
        return frames.count
    }

    /// One pass over every frame holding a page of either side (sides of one repository,
    /// located): each frame read and opened once, and kept from it every b-tree interior page
    /// (the walks need them all, and they are spread over the whole file) and the pages in each
    /// side's `also` (the leaves that differ). The pages kept are checked against their ids.
    static func prefetch(_ sides: [(pages: RepositoryPages, also: Set<UInt32>)]) throws {
        guard let repository = sides.first?.pages.repository else { return }
        for side in sides where !side.pages.located { try locate([side.pages]) }
        var member: [String: Int] = [:]   // "pack@offset" -> its place in `list`
        var list: [(pack: ContentID, frame: FrameEntry)] = []
        // What each side's check needs, out of its class (see `locate`): for each frame of the
        // list, the side's pages it holds (a frame's pages listed together, `start` to `start`
        // of the next), the pages it asked for as bits, and whether a file stands in for it.
        struct Lookup {
            let pageSize: Int
            let blobOf: [UInt16]
            var inList: [Int32]   // the side's frame -> its member of `list`, -1: not read
            var start: [Int32] = []
            var pages: [UInt32] = []
            let also: Bitset
            let standIn: RepositoryPages?   // only when a file stands in (`sharedWithStandIn`)
            let hint: Bitset?   // the record's interior pages: then only the pages needed are looked at

            /// With the record's list, whether page `n` is needed (else every page is looked at).
            @inline(__always)
            func needs(_ n: UInt32) -> Bool {
                guard let hint else { return true }
                return also[Int(n)] || hint[Int(n)] && standIn?.sharedWithStandIn(n) != true
            }
        }
        var lookups: [Lookup] = []
        for side in sides {
            let pages = side.pages
            var also = Bitset(count: pages.pageCount + 1)
            for page in side.also where Int(page) <= pages.pageCount { also[Int(page)] = true }
            let hint = pages.interiorHint
            var wanted = [Bool](repeating: pages.standIn == nil && hint == nil, count: pages.frames.count)
            if pages.standIn != nil || hint != nil {
                // Only the frames holding a page needed: one that differs, or an interior page
                // (all of them without the record's list) the file does not have (those it has
                // are read from it).
                for p in 0..<pages.pageCount where pages.frameOf[p] > 0 {
                    let n = p + 1
                    if also[n] || (hint?[n] ?? true) && !pages.sharedWithStandIn(UInt32(n)) {
                        wanted[Int(pages.frameOf[p]) - 1] = true
                    }
                }
            }
            var inList = [Int32](repeating: -1, count: pages.frames.count)
            for (f, item) in pages.frames.enumerated() where wanted[f] {
                let key = "\(item.pack.hex)@\(item.frame.offset)"
                if let m = member[key] { inList[f] = Int32(m); continue }
                member[key] = list.count
                inList[f] = Int32(list.count)
                list.append(item)
            }
            lookups.append(Lookup(pageSize: pages.pageSize, blobOf: pages.blobOf, inList: inList, also: also,
                                  standIn: pages.standIn == nil ? nil : pages, hint: hint))
        }
        // Each side's pages by the member of `list` holding them (a counting sort).
        for (s, side) in sides.enumerated() {
            var counts = [Int32](repeating: 0, count: list.count + 1)
            let frameOf = side.pages.frameOf, inList = lookups[s].inList
            for p in frameOf.indices where frameOf[p] > 0 {
                let m = inList[Int(frameOf[p]) - 1]
                if m >= 0 { counts[Int(m) + 1] += 1 }
            }
            for m in 0..<list.count { counts[m + 1] += counts[m] }
            var next = counts
            var pages = [UInt32](repeating: 0, count: Int(counts[list.count]))
            for p in frameOf.indices where frameOf[p] > 0 {
                let m = inList[Int(frameOf[p]) - 1]
                guard m >= 0 else { continue }
                pages[Int(next[Int(m)])] = UInt32(p + 1)
                next[Int(m)] += 1
            }
            lookups[s].start = counts
            lookups[s].pages = pages
            lookups[s].inList = []
        }
        // What of each frame is decompressed: the chunks holding the pages needed, when every
        // side reading it knows its interior pages; else all of it.
        var ranges = [[Range<Int>]?](repeating: [], count: list.count)
        for lookup in lookups {
            for m in list.indices where ranges[m] != nil {
                let pages = lookup.pages[Int(lookup.start[m])..<Int(lookup.start[m + 1])]
                guard !pages.isEmpty else { continue }
                guard lookup.hint != nil else { ranges[m] = nil; continue }
                for number in pages where lookup.needs(number) {
                    let b = Int(lookup.blobOf[Int(number) - 1])
                    guard b < list[m].frame.blobs.count else { continue }
                    let blob = list[m].frame.blobs[b]
                    ranges[m]?.append(Int(blob.offset)..<(Int(blob.offset) + Int(blob.length)))
                }
            }
        }
        // Read in pack order.
        let order = list.indices.sorted { list[$0].pack == list[$1].pack ? list[$0].frame.offset < list[$1].frame.offset : list[$0].pack < list[$1].pack }
        let sorted = order.map { list[$0] }
        let kept = Mutex<[[UInt32: [UInt8]]]>(Array(repeating: [:], count: sides.count))
        let keptPacked = Mutex<[[UInt32: Data]]>(Array(repeating: [:], count: sides.count))
        final class Packer: @unchecked Sendable {   // used by one lane at a time
            let zstd: ZstdFrames
            // zstd's fast level -3 and no checksum: the leaves are held only until the tables are
            // compared, each checked against its content id before it was packed (level 1 with a
            // checksum: 70 ms more CPU on the bench pair, the same peak memory).
            init() throws { zstd = try ZstdFrames(level: -3, checksum: false) }
        }
        let packers = Mutex<[Packer]>([])   // one a lane, reused
        let decompressed = try BlobLocator.readOnLanes(sorted, repository: repository, checkpoint: "comparing", only: { ranges[order[$0]] }) { index, plain in
            let m = order[index]
            var found: [[UInt32: [UInt8]]] = Array(repeating: [:], count: sides.count)
            var foundPacked: [[UInt32: Data]] = Array(repeating: [:], count: sides.count)
            var checked: [Int: [UInt8]] = [:]   // by blob
            var packedBlobs: [Int: Data] = [:]
            let packer = try packers.withLock { $0.popLast() } ?? Packer()
            defer { packers.withLock { $0.append(packer) } }
            let frame = sorted[index].frame
            let what = "pack \(repository.backend.describe(PackBuilder.key(sorted[index].pack)))"
            try plain.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
                for s in lookups.indices {
                    let lookup = lookups[s]
                    for i in Int(lookup.start[m])..<Int(lookup.start[m + 1]) {
                        let number = lookup.pages[i]
                        guard lookup.needs(number) else { continue }   // not decompressed
                        let b = Int(lookup.blobOf[Int(number) - 1])
                        guard b < frame.blobs.count else { continue }
                        let blob = frame.blobs[b]
                        guard Int(blob.length) == lookup.pageSize else { continue }
                        let at = Int(blob.offset) + (number == 1 ? 100 : 0)
                        let interior = at < raw.count && (raw[at] == 0x05 || raw[at] == 0x02) && lookup.standIn?.sharedWithStandIn(number) != true
                        guard interior || lookup.also[Int(number)] else { continue }
                        if interior {
                            if checked[b] == nil {
                                checked[b] = [UInt8](try BlobLocator.extract(blob, from: plain, sealer: repository.sealer, what: what))
                            }
                            found[s][number] = checked[b]
                        } else {
                            if packedBlobs[b] == nil {
                                let bytes = try BlobLocator.extract(blob, from: plain, sealer: repository.sealer, what: what)
                                packedBlobs[b] = try bytes.withUnsafeBytes { try packer.zstd.compress($0) }
                            }
                            foundPacked[s][number] = packedBlobs[b]
                        }
                    }
                }
            }
            kept.withLock { all in for s in found.indices { all[s].merge(found[s]) { a, _ in a } } }
            keptPacked.withLock { all in for s in foundPacked.indices { all[s].merge(foundPacked[s]) { a, _ in a } } }
        }
        let all = kept.withLock { $0 }, allPacked = keptPacked.withLock { $0 }
        for (s, side) in sides.enumerated() {
            side.pages.cache.merge(all[s]) { a, _ in a }
            side.pages.packed.merge(allPacked[s]) { a, _ in a }
            if s == 0 {   // one pass for both sides: counted once
                side.pages.framesRead += list.count
                side.pages.bytesDecompressed += decompressed
            }
            side.pages.pagesRead += all[s].count + allPacked[s].count
        }
    }

    /// `read` is called from a `ReadAhead` thread while the diff's own thread may read an
    /// overflow page of the same side: one read at a time.
    private let reading = NSLock()

    func read(_ pages: [UInt32]) throws -> [UInt32: [UInt8]] {
        reading.lock()
        defer { reading.unlock() }
        var out: [UInt32: [UInt8]] = [:]
        var wanted: [Int: [(page: UInt32, blob: Int)]] = [:]   // frame -> pages
        var toUnpack: [(UInt32, Data)] = []
        for page in pages where out[page] == nil {
            guard page >= 1, Int(page) <= pageCount else {
                throw StoreOpsError(.badData, "\(what): page \(page) is past its end (\(pageCount) pages)")
            }
            if let bytes = try overlay?.page(page) ?? cache[page] { out[page] = bytes; continue }
            if let compressed = packed[page] { toUnpack.append((page, compressed)); continue }
            if sharedWithStandIn(page), let file = standIn {
                let bytes = try file.readUncounted(page)
                if bytes.withUnsafeBytes({ self.repository.sealer.contentID($0) }) == contentID(page) {
                    out[page] = bytes
                    pagesRead += 1
                    continue
                }
            }
            if !located { try Self.locate([self]) }
            let frame = frameOf[Int(page) - 1]
            guard frame > 0 else {
                let id = unlocated[page].map { "\($0.hex.prefix(16))… " } ?? ""
                throw StoreOpsError(.badData, "\(what): page \(page)'s content \(id)is in no index of \(repository.location)",
                                    hint: "`storectl repo check --repo \(repository.location)` lists what is missing")
            }
            wanted[Int(frame) - 1, default: []].append((page, Int(blobOf[Int(page) - 1])))
        }
        if !toUnpack.isEmpty { out.merge(try unpack(toUnpack)) { a, _ in a } }
        guard !wanted.isEmpty else { return out }
        let order = wanted.keys.sorted { frames[$0].pack == frames[$1].pack ? frames[$0].frame.offset < frames[$1].frame.offset : frames[$0].pack < frames[$1].pack }
        let list = order.map { frames[$0] }
        let results = Mutex<[UInt32: [UInt8]]>([:])
        let repository = self.repository
        let pageSize = self.pageSize
        let ranges: [[Range<Int>]] = order.indices.map { member in
            (wanted[order[member]] ?? []).compactMap { entry in
                guard entry.blob < list[member].frame.blobs.count else { return nil }
                let blob = list[member].frame.blobs[entry.blob]
                return Int(blob.offset)..<(Int(blob.offset) + Int(blob.length))
            }
        }
        bytesDecompressed += try BlobLocator.readOnLanes(list, repository: repository, checkpoint: "comparing", only: { ranges[$0] }) { member, plain in
            var got: [(UInt32, [UInt8])] = []
            for (page, b) in wanted[order[member]] ?? [] {
                let blob = list[member].frame.blobs[b]
                guard Int(blob.length) == pageSize else { throw StoreOpsError(.badData, "a page blob of \(repository.location) is \(blob.length) bytes, not \(pageSize)") }
                let data = try BlobLocator.extract(blob, from: plain, sealer: repository.sealer,
                                                   what: "pack \(repository.backend.describe(PackBuilder.key(list[member].pack)))")
                got.append((page, [UInt8](data)))
            }
            results.withLock { for (page, bytes) in got { $0[page] = bytes } }
        }
        framesRead += list.count
        let read = results.withLock { $0 }
        pagesRead += read.count
        out.merge(read) { a, _ in a }
        return out
    }
}
