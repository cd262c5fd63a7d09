import CStoreSupport
import Foundation

/// The last version of each page a point's commits wrote since its chain's base, as
/// `PointRestore.resolve` reads them, segment after segment.
///
/// Up to `budget` bytes of pages are held in memory; past it, the held pages go out to a sparse
/// scratch file laid out like the database (page p at (p - 1) x page size, a later version written
/// over an earlier one) in `folder` (the folder the restore writes to), and memory is free again.
/// So a restore's memory stays flat however long the history behind its point: an hour of a
/// 1 GiB store's churn changes a few hundred MiB of pages, which were all held in memory before.
///
/// The scratch file has no name (O_TMPFILE): nothing is left behind whatever ends the process.
/// Where the file system cannot make an unnamed file (not ext4, xfs, btrfs or tmpfs: some network
/// and FUSE file systems), it is made under a temporary name removed at once; a kill between the
/// two leaves the name, which the next restore into that folder removes (`PendingFile.removeStale`).
final class OverlayPages {
    /// The name its scratch file is made under where the temp folder cannot make an unnamed one.
    static let scratchName = "storectl-point-pages"
    let pageSize: Int
    /// Bytes of pages held in memory before they are written to the scratch file.
    let budget: Int
    /// Where the scratch file goes; nil: every page is held in memory.
    let folder: String?
    private var held: [UInt32: [UInt8]] = [:]
    /// Which pages the scratch file holds (bit p).
    private var inFile: [UInt64] = []
    private var fd: Int32 = -1
    /// Pages written to the scratch file, each counted once (later versions are written over).
    private(set) var pagesInFile = 0

    /// 64 MiB; `STORECTL_TEST_POINT_MEMORY_BYTES` (tests) makes it smaller.
    static var defaultBudget: Int {
        if let text = ProcessInfo.processInfo.environment["STORECTL_TEST_POINT_MEMORY_BYTES"], let bytes = Int(text), bytes >= 0 { return bytes }
        return 64 << 20
    }

    init(pageSize: Int, folder: String?, budget: Int = OverlayPages.defaultBudget) {
        self.pageSize = pageSize
        self.folder = folder
        self.budget = budget
    }

    deinit { if fd >= 0 { close(fd) } }

    var isEmpty: Bool { held.isEmpty && pagesInFile == 0 }

    /// The pages held in memory now (for tests and the debug log).
    var heldCount: Int { held.count }

    /// Page `page`'s newest version so far.
    func set(_ page: UInt32, _ bytes: [UInt8]) throws {
        held[page] = bytes
        if held.count * pageSize > budget { try spill() }
    }

    /// Page `page`'s newest version, or nil when no commit wrote it.
    func page(_ page: UInt32) throws -> [UInt8]? {
        if let bytes = held[page] { return bytes }
        guard has(page) else { return nil }
        var bytes = [UInt8](repeating: 0, count: pageSize)
        try bytes.withUnsafeMutableBytes { try readAll($0, at: offset(page)) }
        return bytes
    }

    /// Writes every page numbered 1...`count` to `target` (the database being restored) at its
    /// place: those in the scratch file first (copied within the kernel), then those held in
    /// memory, which are newer.
    func write(into target: Int32, path: String, upTo count: Int) throws {
        if pagesInFile > 0 {
            var page = 1
            while page <= count {
                guard has(UInt32(page)) else { page += 1; continue }
                var end = page
                while end + 1 <= count, has(UInt32(end + 1)) { end += 1 }
                try copy(from: offset(UInt32(page)), length: (end - page + 1) * pageSize, to: target, path: path)
                page = end + 1
            }
        }
        for (page, bytes) in held.sorted(by: { $0.key < $1.key }) where page >= 1 && Int(page) <= count {
            try bytes.withUnsafeBytes { try FileSystem.writeAll(target, $0, at: offset(page), path: path) }
        }
    }

    private func offset(_ page: UInt32) -> off_t { off_t(Int(page) - 1) * off_t(pageSize) }

    private func has(_ page: UInt32) -> Bool {
        let word = Int(page) >> 6
        return word < inFile.count && inFile[word] & (1 << UInt64(page & 63)) != 0
    }

    /// The held pages go to the scratch file (made on first use), in page order.
    private func spill() throws {
        guard let folder else { return }
        if fd < 0 { fd = try Self.scratchFile(in: folder) }
        for page in held.keys.sorted() where page >= 1 {
            let bytes = held[page] ?? []
            do {
                try bytes.withUnsafeBytes { try FileSystem.writeAll(fd, $0, at: offset(page), path: "the point's scratch file in \(folder)") }
            } catch let error as StoreOpsError where error.kind == .noSpace {
                throw StoreOpsError(.noSpace, "no room in \(folder) for the pages the point changed since its chain's base "
                                    + "(\(Format.bytes(UInt64(pagesInFile) * UInt64(pageSize))) written to a scratch file so far)",
                                    hint: "free space there, or restore to another volume")
            }
            let word = Int(page) >> 6
            if word >= inFile.count { inFile += [UInt64](repeating: 0, count: word + 1 - inFile.count + inFile.count / 2) }
            if inFile[word] & (1 << UInt64(page & 63)) == 0 {
                inFile[word] |= 1 << UInt64(page & 63)
                pagesInFile += 1
            }
        }
        held.removeAll(keepingCapacity: true)
    }

    /// `length` bytes of the scratch file from `start` to the same offset of `target`.
    private func copy(from start: off_t, length: Int, to target: Int32, path: String) throws {
        var done = 0
        while done < length {
            let copied = storectl_copy_range(fd, Int64(start) + Int64(done), target, Int64(start) + Int64(done), Int64(length - done))
            if copied > 0 { done += Int(copied); continue }
            let err = errno
            if copied < 0, err == EINTR { continue }
            // Not within the kernel here (an old kernel, or across file systems): by hand.
            if copied == 0 || (copied < 0 && [ENOSYS, EXDEV, EINVAL, EOPNOTSUPP, EBADF].contains(err)) {
                var buffer = [UInt8](repeating: 0, count: min(1 << 20, length - done))
                while done < length {
                    let want = min(buffer.count, length - done)
                    try buffer.withUnsafeMutableBytes { try readAll(UnsafeMutableRawBufferPointer(rebasing: $0[0..<want]), at: start + off_t(done)) }
                    try buffer.withUnsafeBytes { try FileSystem.writeAll(target, UnsafeRawBufferPointer(rebasing: $0[0..<want]), at: start + off_t(done), path: path) }
                    done += want
                }
                return
            }
            throw StoreOpsError.posix(err, doing: "writing \(path)", side: .output)
        }
    }

    /// Fills `buffer` from the scratch file at `offset` (a short read, or an end before it, is 74).
    private func readAll(_ buffer: UnsafeMutableRawBufferPointer, at offset: off_t) throws {
        try FileSystem.readAll(fd, buffer, at: offset, doing: "reading the point's scratch file in \(folder ?? "?") back")
    }

    /// An unnamed file in `folder`, or one whose name is removed at once.
    static func scratchFile(in folder: String) throws -> Int32 {
        try FileSystem.createUnnamed(in: folder, fallbackName: Self.scratchName, doing: "creating a scratch file for the point's pages", point: "point.scratch")
    }
}
