import Foundation
import GRDB

/// A first snapshot of a live store, without holding the app's `-wal` for the whole snapshot.
///
/// A first snapshot hashes and compresses every page, which takes about 2.5x as long as reading
/// them. Streamed straight from the read transaction (`PageSink` into `PageStream`), the
/// transaction lasts that whole time, and the app's `-wal` cannot be reset under it: each of its
/// commits grows the file into new blocks (on ext4 without a journal, three trips to the disk
/// instead of one). Measured on the 1 GiB bench store, a writer committing every 2 ms: its p99
/// commit 3.9-4.5 ms (alone 0.5-0.7) during a first snapshot; 1.1-1.3 ms during a paced backup
/// followed by a snapshot of the copy.
///
/// So the pages the backup API writes go to a scratch copy of the store first (a real SQLite
/// file, page p at its place, written back a pace chunk at a time like a backup's). The read
/// transaction ends when the copy is complete, as a backup's does; then the pages are hashed and
/// packed from the copy (in the page cache: it was just written) while `quick_check` and the
/// Core Data counts run on it, on the other core: it holds exactly the pages streamed.
///
/// Measured (stop 50, alternating rounds under that writer): packing while the copy was still
/// being made did not help (p99 2.5-4.2 ms, single commits up to 83 ms); one after the other,
/// with the copy written back paced, 1.7-2.7 ms, most of it while the copy was written and while
/// its 1 GiB of blocks were freed; with the copy left in the page cache (never written: ext4
/// allocates no block for it, and removing it frees nothing on the disk), **0.96-1.18 ms (alone
/// 0.55-0.62) in 1.11x the time** of streaming. So a copy that fits well below the kernel's
/// background writeback threshold stays in the page cache (`fitsInPageCache`); a larger one is
/// written back as it is made and freed a slice at a time.
///
/// The copy is a `PendingFile` in the scratch folder (mode 0600), never committed: removed at
/// the end, or by the next snapshot (or `storectl recover`) if the process was killed.
final class PageSpill: @unchecked Sendable {
    let file: PendingFile
    let pageSize: Int
    private let fd: Int32
    private let writeBehind: WriteBehind?
    private let lock = NSLock()
    private var failed: (any Error)?
    private var checkOutcome: Result<(Manifest.Verification, Manifest.CoreDataFacts?), any Error>?
    private let checkGroup = DispatchGroup()
    private var closed = false

    static let scratchPrefix = "storectl-spill-"

    /// - Parameter scratch: the folder of the copy (`TMPDIR`).
    init(scratch: String, id: String, pageSize: Int, pageCount: Int) throws {
        file = try PendingFile(finalPath: (scratch as NSString).appendingPathComponent("\(Self.scratchPrefix)\(id).sqlite"), label: "snapshot.spill")
        fd = open(file.tempPath, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else {
            let code = errno
            file.discard()
            throw StoreOpsError.posix(code, doing: "opening the scratch copy \(file.tempPath)", side: .output)
        }
        self.pageSize = pageSize
        // In the page cache only when it fits well below the kernel's background writeback
        // threshold: it is then never written (ext4 allocates no block for it), and removing it
        // costs nothing. A larger copy is written back a pace chunk at a time, as a backup's.
        inPageCache = Self.fitsInPageCache(UInt64(pageCount) * UInt64(pageSize))
        writeBehind = IOPace.current == nil || inPageCache ? nil : WriteBehind(path: file.tempPath)
    }

    /// Whether the copy stays in the page cache (`fitsInPageCache`) rather than written back as it is made.
    let inPageCache: Bool

    /// Whether `bytes` of dirty pages stay under half the kernel's background writeback
    /// threshold (`vm.dirty_background_bytes`, else `vm.dirty_background_ratio` of the memory
    /// available): the kernel then writes none of them back, and no writer is throttled for them.
    /// `STORECTL_SPILL_CACHE=off|on` decides instead (tests, benchmarks).
    static func fitsInPageCache(_ bytes: UInt64, environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        if let chosen = (try? setting(environment: environment)) ?? nil { return chosen }
        func number(_ path: String) -> UInt64? {
            (try? String(contentsOfFile: path, encoding: .ascii)).flatMap { UInt64($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        }
        var threshold = number("/proc/sys/vm/dirty_background_bytes") ?? 0
        if threshold == 0 {
            guard let ratio = number("/proc/sys/vm/dirty_background_ratio"),
                  let meminfo = try? String(contentsOfFile: "/proc/meminfo", encoding: .ascii),
                  let line = meminfo.split(separator: "\n").first(where: { $0.hasPrefix("MemAvailable:") }),
                  let kilobytes = line.split(separator: " ").dropFirst().first.flatMap({ UInt64($0) }) else { return false }
            threshold = kilobytes * 1024 / 100 * ratio
        }
        return bytes <= threshold / 2
    }

    /// `STORECTL_SPILL_CACHE`: `on` keeps a scratch copy in the page cache, `off` writes it back
    /// paced, unset lets the memory rule decide; anything else is a usage error (64), not ignored.
    static func setting(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Bool? {
        switch environment["STORECTL_SPILL_CACHE"] {
        case nil, "": return nil
        case "on": return true
        case "off": return false
        case let other?:
            throw StoreOpsError(.usage, "STORECTL_SPILL_CACHE=\(other): it takes on or off",
                                hint: "on keeps a first snapshot's scratch copy in the page cache, off writes it back paced; unset, the memory available decides")
        }
    }

    deinit {
        close()
        Glibc.close(fd)
    }

    /// What stopped writing the copy, if anything.
    var failure: (any Error)? { lock.withLock { failed } }

    /// Copies left by snapshots that were killed.
    @discardableResult
    static func removeStale(in scratch: String) -> [String] { PendingFile.removeStale(in: scratch, prefix: scratchPrefix) }

    /// Whether a spilled snapshot of `bytes` fits in `scratch` (with the usual margin).
    static func fits(_ bytes: UInt64, in scratch: String) -> Bool {
        (try? SpaceRequirement.require(bytes + SpaceRequirement.margin(bytes), at: scratch, purpose: "a scratch copy")) != nil
    }

    /// The bytes a paced copy should write between two `advance` calls.
    var pacedChunk: Int64? { writeBehind?.pacedChunk }

    // MARK: - Inside the read transaction

    /// One page from the sink, written to the copy at its place. False stops the copy.
    func accept(page: UInt32, bytes: UnsafeRawBufferPointer) -> Bool {
        do {
            try write(bytes, at: off_t(page - 1) * off_t(pageSize))
            return true
        } catch {
            lock.withLock { if failed == nil { failed = error } }
            return false
        }
    }

    /// After each backup step: paces the copy's writeback.
    func advance() { writeBehind?.advance() }

    /// Page 1 as the sink kept it, and the copy's length in pages, once `complete`.
    private(set) var page1: [UInt8] = []
    private(set) var pageCount = 0

    /// The copy is complete: page 1 (as the sink kept it) and the file's length. The copy is a
    /// whole database from here on.
    func complete(page1: [UInt8], pageCount: Int) throws {
        self.page1 = page1
        self.pageCount = pageCount
        try page1.withUnsafeBytes { try write($0, at: 0) }
        guard ftruncate(fd, off_t(pageCount) * off_t(pageSize)) == 0 else {
            throw StoreOpsError.posix(errno, doing: "writing the scratch copy \(file.tempPath)", side: .output)
        }
        writeBehind?.drain()
    }

    private func write(_ bytes: UnsafeRawBufferPointer, at offset: off_t) throws {
        try FileSystem.writeAll(fd, bytes, at: offset, path: "the scratch copy \(file.tempPath) (a first snapshot's pages on their way; TMPDIR)")
    }

    /// A base of `storectl replicate`: the store's state as its pinned read hands it over (`read`:
    /// pages in order, a megabyte at a time, page 1 as a self-contained database has it), written
    /// to the copy at its place; the copy is complete after it.
    func fill(pageCount: Int, read: (Int, Int, UnsafeMutableRawBufferPointer) throws -> Void) throws {
        var first: [UInt8] = []
        try inRuns(from: 1, through: pageCount, doing: "copying the pages of the store") { page, count, run in
            try read(page, count, run)
            try write(UnsafeRawBufferPointer(run), at: off_t(page - 1) * off_t(pageSize))
            if page == 1 { first = Array(UnsafeRawBufferPointer(run)[0..<pageSize]) }
            advance()
        }
        try complete(page1: first, pageCount: pageCount)
    }

    /// Pages `first`…`last` a megabyte at a time: `body(page, count, run)` with a buffer of
    /// `count` pages from `page` on.
    private func inRuns(from first: Int, through last: Int, doing: String,
                        _ body: (Int, Int, UnsafeMutableRawBufferPointer) throws -> Void) throws {
        let runPages = max(1, (1 << 20) / pageSize)
        var buffer = [UInt8](repeating: 0, count: runPages * pageSize)
        var page = first
        while page <= last {
            try ProcessSignals.checkpoint(doing)
            let count = min(runPages, last - page + 1)
            try buffer.withUnsafeMutableBytes { raw in try body(page, count, UnsafeMutableRawBufferPointer(rebasing: raw[0..<(count * pageSize)])) }
            page += count
        }
    }

    // MARK: - After it

    /// Pages `first`… of the complete copy into `buffer` (a base's pages, read back to be packed).
    func read(_ first: Int, _ count: Int, _ buffer: UnsafeMutableRawBufferPointer) throws {
        try FileSystem.readAll(fd, UnsafeMutableRawBufferPointer(rebasing: buffer[0..<(count * pageSize)]), at: off_t(first - 1) * off_t(pageSize),
                               doing: "reading back the scratch copy \(file.tempPath)")
    }

    /// Streams pages 2…`pageCount` from the complete copy, in order, a megabyte at a time,
    /// leaving out `skipping` (the lock-byte page, which the caller streams with page 1).
    func stream(into stream: PageStream, skipping: Int, progress: StepHandler?) throws {
        let started = Date()
        try inRuns(from: 2, through: pageCount, doing: "packing the pages of the scratch copy") { page, count, run in
            try read(page, count, run)
            for i in 0..<count where page + i != skipping {
                guard stream.receive(page: UInt32(page + i), bytes: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(run)[(i * pageSize)..<((i + 1) * pageSize)])) else { break }
            }
            if let failure = stream.error { throw failure }
            progress?(ProgressUpdate(phase: "pages", done: UInt64(page + count - 1), total: UInt64(pageCount), unit: .pages,
                                     bytes: UInt64(page + count - 1) * UInt64(pageSize), startedAt: started))
        }
    }

    /// `quick_check` and the Core Data counts of the complete copy, on a thread of their own
    /// while the pages are packed; `checkResult` waits for them.
    func startCheck() {
        checkGroup.enter()
        DispatchQueue.global().async { [self] in
            IOPace.politeThread()
            defer { IOPace.ordinaryThread(); checkGroup.leave() }
            let outcome = Result {
                try onCopy { db -> (Manifest.Verification, Manifest.CoreDataFacts?) in
                    let verification = try Verifier.verify(db, level: .quick)
                    return (verification, verification.ok ? try ConsistentCopy.coreDataFacts(db) : nil)
                }
            }
            lock.withLock { checkOutcome = outcome }
        }
    }

    func checkResult() -> Result<(Manifest.Verification, Manifest.CoreDataFacts?), any Error>? {
        checkGroup.wait()
        return lock.withLock { checkOutcome }
    }

    /// Runs `body` on a read-only connection to the complete copy.
    func onCopy<T>(_ body: (Database) throws -> T) throws -> T {
        let copy = try StoreConnection.open(file.tempPath, access: .readOnly, busyTimeout: 1, label: "storectl.spill-check")
        defer { try? copy.close() }
        return try copy.inDatabase { try body($0) }
    }

    /// Waits for the check, frees the copy's blocks and removes it. Safe to call more than once.
    func close() {
        checkGroup.wait()
        guard lock.withLock({ () -> Bool in defer { closed = true }; return !closed }) else { return }
        shrink()
        file.discard()
    }

    /// Frees the copy's blocks 32 MiB at a time, from its end, before it is removed: removing a
    /// 1 GiB file at once frees all its blocks in one go, and the app's commits waited up to
    /// 24 ms behind it (ext4); a slice at a time, at most 6 ms.
    private func shrink() {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return }
        var size = Int64(info.st_size)
        let step: Int64 = 32 << 20
        while size > 0 {
            size = max(0, size - step)
            guard ftruncate(fd, off_t(size)) == 0 else { return }
            usleep(1_000)
        }
    }
}
