import Foundation

/// The parts of SQLite's WAL format the follower reads (https://sqlite.org/fileformat2.html#walformat,
/// and the wal-index header of https://sqlite.org/walformat.html).
///
///     -wal header (32 bytes, big-endian): magic 0x377f0682|0x377f0683, version 3007000, page size,
///         checkpoint sequence, salt-1, salt-2, checksum-1, checksum-2 (of the first 24 bytes)
///     frame header (24 bytes): page number, database size in pages after a commit (0 otherwise),
///         salt-1, salt-2, checksum-1, checksum-2 (cumulative: the previous frame's, or the
///         header's, continued over the first 8 bytes of this header and the page)
///
/// A frame counts only when its salts are the header's and its checksum continues the chain;
/// the frames up to the last such commit frame are what SQLite itself recovers from a -wal.
enum WalFormat {
    static let headerBytes = 32
    static let frameHeaderBytes = 24
    static let version: UInt32 = 3_007_000

    struct Header: Equatable {
        var bigEndianChecksum: Bool
        var pageSize: Int
        var checkpointSequence: UInt32
        var salt1: UInt32
        var salt2: UInt32
        var checksum: Checksum

        /// Parses and checks a -wal header (nil: not one, or its checksum fails: an empty or
        /// half-written -wal, which holds no frame).
        static func parse(_ bytes: [UInt8]) -> Header? {
            guard bytes.count >= WalFormat.headerBytes else { return nil }
            let magic = be32(bytes, 0)
            guard magic & 0xFFFF_FFFE == 0x377F_0682, be32(bytes, 4) == WalFormat.version else { return nil }
            let raw = Int(be32(bytes, 8))
            let pageSize = raw == 1 ? 65536 : raw
            guard PagedSnapshotRecord.isPageSize(pageSize) else { return nil }
            let bigEndian = magic & 1 == 1
            var sum = Checksum()
            bytes.withUnsafeBytes { sum.add(UnsafeRawBufferPointer(rebasing: $0[0..<24]), bigEndian: bigEndian) }
            guard sum == Checksum(s0: be32(bytes, 24), s1: be32(bytes, 28)) else { return nil }
            return Header(bigEndianChecksum: bigEndian, pageSize: pageSize, checkpointSequence: be32(bytes, 12),
                          salt1: be32(bytes, 16), salt2: be32(bytes, 20), checksum: sum)
        }

        var frameBytes: Int { WalFormat.frameHeaderBytes + pageSize }

        /// Where frame `n` (1-based) starts.
        func offset(ofFrame n: UInt32) -> Int { WalFormat.headerBytes + (Int(n) - 1) * frameBytes }
    }

    /// SQLite's WAL checksum: two 32-bit sums over pairs of 32-bit words, in the byte order the
    /// magic number names.
    struct Checksum: Equatable, Codable, Sendable {
        var s0: UInt32 = 0
        var s1: UInt32 = 0

        mutating func add(_ bytes: UnsafeRawBufferPointer, bigEndian: Bool) {
            var (a, b) = (s0, s1)
            var i = 0
            let n = bytes.count & ~7
            if bigEndian {
                while i < n {
                    a = a &+ UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: i, as: UInt32.self)) &+ b
                    b = b &+ UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: i + 4, as: UInt32.self)) &+ a
                    i += 8
                }
            } else {
                while i < n {
                    a = a &+ UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: i, as: UInt32.self)) &+ b
                    b = b &+ UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: i + 4, as: UInt32.self)) &+ a
                    i += 8
                }
            }
            (s0, s1) = (a, b)
        }
    }

    /// The wal-index header: the first 48 bytes of the -shm, written twice by SQLite (second copy
    /// first) and trusted only when both copies agree. Native byte order; the salts are copied
    /// from the -wal header as they are there (big-endian).
    struct IndexHeader: Equatable {
        var change: UInt32
        var pageSize: Int
        var lastFrame: UInt32
        var pages: UInt32
        var frameChecksum: Checksum
        var salt1: UInt32
        var salt2: UInt32
        var raw: [UInt8]

        /// The store's wal-index header as its -shm holds it now (nil: no -shm, or the copies disagree).
        static func current(of store: StoreFile) -> IndexHeader? {
            (try? FileProbe.shared.read(store.shmPath, count: 96, at: 0)).flatMap(parse)
        }

        /// Every frame of the store's -wal is in its database file (the checkpoint info's
        /// `nBackfill`, after the two header copies, equals the header's last frame): a reader
        /// whose transaction began before this was read sees exactly the database file, and no
        /// checkpoint can change it while that reader lasts (a checkpoint backfills no frame past
        /// a reader's mark, nor any frame while a reader of the file alone holds its read lock).
        static func backfilled(of store: StoreFile) -> Bool {
            guard let bytes = try? FileProbe.shared.read(store.shmPath, count: 100, at: 0), bytes.count >= 100, let header = parse(bytes) else { return false }
            return ne32(bytes, 96) == header.lastFrame
        }

        static func parse(_ bytes: [UInt8]) -> IndexHeader? {
            guard bytes.count >= 96, bytes[0..<48] == bytes[48..<96], bytes[12] == 1 else { return nil }
            let raw = Int(ne16(bytes, 14))
            return IndexHeader(change: ne32(bytes, 8), pageSize: raw == 1 ? 65536 : raw, lastFrame: ne32(bytes, 16),
                               pages: ne32(bytes, 20), frameChecksum: Checksum(s0: ne32(bytes, 24), s1: ne32(bytes, 28)),
                               salt1: be32(bytes, 32), salt2: be32(bytes, 36), raw: Array(bytes[0..<48]))
        }
    }

    static func be32(_ b: [UInt8], _ i: Int) -> UInt32 {
        UInt32(b[i]) << 24 | UInt32(b[i + 1]) << 16 | UInt32(b[i + 2]) << 8 | UInt32(b[i + 3])
    }

    static func be32(_ b: UnsafeRawBufferPointer, _ i: Int) -> UInt32 {
        UInt32(bigEndian: b.loadUnaligned(fromByteOffset: i, as: UInt32.self))
    }

    static func ne32(_ b: [UInt8], _ i: Int) -> UInt32 {
        b.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: i, as: UInt32.self) }
    }

    static func ne16(_ b: [UInt8], _ i: Int) -> UInt16 {
        b.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: i, as: UInt16.self) }
    }
}

/// Where a follower stands in a store's -wal: after frame `frame` (a commit frame, or 0) of the
/// generation the salts name, with the chain's checksum there.
struct WalCursor: Codable, Equatable, Sendable {
    var salt1: UInt32
    var salt2: UInt32
    var checkpointSequence: UInt32
    var frame: UInt32
    var checksum: WalFormat.Checksum
    var pageSize: Int
    var bigEndianChecksum: Bool
    /// The wal-index's commit counter (`iChange`) at this frame: SQLite adds one at every commit
    /// and nothing else changes it (a restart keeps it), so a later header's counter says how many
    /// commits were made since, whatever happened to the -wal in between.
    var change: UInt32?
    /// False while the generation's -wal header has not been read (a generation the wal-index
    /// announces before its first frame is written): `checksum` is then not yet the chain's start.
    var headerRead: Bool

    init(header: WalFormat.Header) {
        salt1 = header.salt1
        salt2 = header.salt2
        checkpointSequence = header.checkpointSequence
        frame = 0
        checksum = header.checksum
        pageSize = header.pageSize
        bigEndianChecksum = header.bigEndianChecksum
        headerRead = true
    }

    /// A generation known only from the wal-index (no frame of it written yet).
    init(announced index: WalFormat.IndexHeader) {
        salt1 = index.salt1
        salt2 = index.salt2
        checkpointSequence = 0
        frame = 0
        checksum = WalFormat.Checksum()
        pageSize = index.pageSize
        bigEndianChecksum = false
        headerRead = false
    }

    /// The header the generation's frames are checked against.
    var header: WalFormat.Header {
        WalFormat.Header(bigEndianChecksum: bigEndianChecksum, pageSize: pageSize, checkpointSequence: checkpointSequence,
                         salt1: salt1, salt2: salt2, checksum: checksum)
    }

    func sameGeneration(salt1: UInt32, salt2: UInt32) -> Bool { self.salt1 == salt1 && self.salt2 == salt2 }

    /// The same place in the same generation (the commit counter aside: it is learnt later).
    func samePosition(as other: WalCursor) -> Bool {
        salt1 == other.salt1 && salt2 == other.salt2 && frame == other.frame && checksum == other.checksum
    }
}

/// Frames read from a -wal: the commits among them, each with the pages its frames wrote (the
/// last version of each page within the commit).
struct WalCommit {
    /// The commit frame's number.
    var frame: UInt32
    /// The database's size in pages after the commit.
    var pageCount: UInt32
    var pages: [(page: UInt32, bytes: [UInt8])]
}

/// Reads a -wal through a descriptor of its own. SQLite takes no POSIX lock on the -wal (its
/// WAL locks are on the -shm, its database locks on the database file), so closing this
/// descriptor cannot drop a lock a connection of this process holds (see `FileProbe`).
final class WalFileReader {
    let path: String
    private(set) var fd: Int32 = -1
    private(set) var identity: (dev: UInt64, ino: UInt64)?

    init(path: String) { self.path = path }
    deinit { close() }

    func close() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
        identity = nil
    }

    /// Opens the -wal (again, when it was replaced since); false when there is none.
    func open() throws -> Bool {
        guard let now = FileSystem.identity(of: path) else {
            close()
            return false
        }
        if fd >= 0, let identity, identity == now { return true }
        close()
        let opened = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard opened >= 0 else {
            if errno == ENOENT { return false }
            throw StoreOpsError.posix(errno, doing: "reading \(path)", side: .input)
        }
        var info = stat()
        guard fstat(opened, &info) == 0 else {
            let code = errno
            Glibc.close(opened)
            throw StoreOpsError.posix(code, doing: "reading \(path)", side: .input)
        }
        fd = opened
        identity = (UInt64(info.st_dev), UInt64(info.st_ino))
        return true
    }

    var size: UInt64 {
        var info = stat()
        guard fd >= 0, fstat(fd, &info) == 0 else { return 0 }
        return UInt64(info.st_size)
    }

    func read(count: Int, at offset: Int) throws -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, count - done, off_t(offset + done)) }
            if n < 0, errno == EINTR { continue }
            guard n >= 0 else { throw StoreOpsError.posix(errno, doing: "reading \(path)", side: .input) }
            if n == 0 { break }
            done += n
        }
        return Array(buffer.prefix(done))
    }

    func header() throws -> WalFormat.Header? {
        WalFormat.Header.parse(try read(count: WalFormat.headerBytes, at: 0))
    }

    /// The page frame `n` of the generation `header` describes holds, into `buffer`. The frame
    /// must still carry that generation's salts (a restart rewrites frames from the start):
    /// otherwise `FrameMoved`, and the caller reads again.
    func readPage(frame n: UInt32, header: WalFormat.Header, into buffer: UnsafeMutableRawBufferPointer) throws {
        let offset = header.offset(ofFrame: n) + WalFormat.frameHeaderBytes
        var done = 0
        while done < buffer.count {
            let got = pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset + done))
            if got < 0, errno == EINTR { continue }
            guard got > 0 else { throw FrameMoved() }
            done += got
        }
        let frameHeader = try read(count: WalFormat.frameHeaderBytes, at: header.offset(ofFrame: n))
        guard frameHeader.count == WalFormat.frameHeaderBytes, WalFormat.be32(frameHeader, 8) == header.salt1,
              WalFormat.be32(frameHeader, 12) == header.salt2 else { throw FrameMoved() }
    }

    /// A frame was rewritten (the -wal restarted or truncated) while it was read.
    struct FrameMoved: Error {}

    /// Whether frame `n` is still the one the chain ended with at `cursor` (same salts, same checksum).
    func frameIntact(_ cursor: WalCursor) throws -> Bool {
        guard cursor.frame > 0 else {
            guard let header = try header() else { return false }
            return header.salt1 == cursor.salt1 && header.salt2 == cursor.salt2
        }
        let h = try read(count: WalFormat.frameHeaderBytes, at: cursor.header.offset(ofFrame: cursor.frame))
        guard h.count == WalFormat.frameHeaderBytes else { return false }
        return WalFormat.be32(h, 8) == cursor.salt1 && WalFormat.be32(h, 12) == cursor.salt2
            && WalFormat.Checksum(s0: WalFormat.be32(h, 16), s1: WalFormat.be32(h, 20)) == cursor.checksum
    }

    /// What follows `cursor` in the chain, up to frame `limit` (nil: as far as the chain goes):
    /// the commits, the cursor after the last of them, and the first frame number past the
    /// chain's end (`end`: the frame that does not continue it) with what was found there.
    struct Walk {
        var commits: [WalCommit] = []
        /// The frame holding each page's last version in the chain read (every frame, committed or not).
        var latest: [UInt32: UInt32] = [:]
        var cursor: WalCursor
        var end: UInt32
        var endFound: EndFound
    }

    enum EndFound: Equatable {
        /// The file ends exactly at a frame boundary there.
        case endOfFile
        /// A partial frame (a -wal truncated mid-frame, or a frame being written).
        case partial
        /// A whole frame with other salts (an older or a newer generation's).
        case otherSalts(UInt32, UInt32)
        /// This generation's salts, but the checksum does not continue the chain.
        case brokenChain
        /// `limit` was reached.
        case limit
    }

    /// - Parameter stopAtFirstCommit: stop after the first commit frame (a restore's own
    ///   transaction, not the app's commits after it), as if `limit` were there.
    func walk(from cursor: WalCursor, limit: UInt32?, keepPages: Bool = true, stopAtFirstCommit: Bool = false) throws -> Walk {
        let header = cursor.header
        var walk = Walk(cursor: cursor, end: cursor.frame + 1, endFound: .limit)
        var sum = cursor.checksum
        var frame = cursor.frame
        var pending: [UInt32: [UInt8]] = [:]
        var order: [UInt32] = []
        let frameBytes = header.frameBytes
        let batchFrames = max(1, (1 << 20) / frameBytes)
        while true {
            if let limit, frame >= limit { walk.endFound = .limit; break }
            let want = limit.map { min(batchFrames, Int($0 - frame)) } ?? batchFrames
            let bytes = try read(count: want * frameBytes, at: header.offset(ofFrame: frame + 1))
            var stop: EndFound?
            bytes.withUnsafeBytes { raw in
                var at = 0
                while at < want * frameBytes {
                    guard raw.count - at >= frameBytes else { stop = raw.count == at ? .endOfFile : .partial; return }
                    let h = UnsafeRawBufferPointer(rebasing: raw[at..<(at + WalFormat.frameHeaderBytes)])
                    let salt1 = WalFormat.be32(h, 8), salt2 = WalFormat.be32(h, 12)
                    guard salt1 == header.salt1, salt2 == header.salt2 else { stop = .otherSalts(salt1, salt2); return }
                    var next = sum
                    next.add(UnsafeRawBufferPointer(rebasing: h[0..<8]), bigEndian: header.bigEndianChecksum)
                    let page = UnsafeRawBufferPointer(rebasing: raw[(at + WalFormat.frameHeaderBytes)..<(at + frameBytes)])
                    next.add(page, bigEndian: header.bigEndianChecksum)
                    guard next == WalFormat.Checksum(s0: WalFormat.be32(h, 16), s1: WalFormat.be32(h, 20)) else { stop = .brokenChain; return }
                    sum = next
                    frame += 1
                    let pageNumber = WalFormat.be32(h, 0)
                    walk.latest[pageNumber] = frame
                    if keepPages {
                        if pending[pageNumber] == nil { order.append(pageNumber) }
                        pending[pageNumber] = Array(page)
                    }
                    let commitSize = WalFormat.be32(h, 4)
                    if commitSize != 0 {
                        if keepPages {
                            walk.commits.append(WalCommit(frame: frame, pageCount: commitSize,
                                                          pages: order.map { ($0, pending[$0] ?? []) }))
                        }
                        pending = [:]
                        order = []
                        walk.cursor.frame = frame
                        walk.cursor.checksum = sum
                        if stopAtFirstCommit { stop = .limit; return }
                    }
                    at += frameBytes
                }
            }
            if let stop { walk.endFound = stop; break }
        }
        walk.end = frame + 1
        return walk
    }
}
