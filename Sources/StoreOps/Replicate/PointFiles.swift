import Crypto
import Foundation

/// A store's external-data files at a point: its chain's base's files, then each commit's
/// additions and removals in order (`PointSegment.Commit.files`/`removed`). A removal takes
/// effect after the commit carrying it: the follower saw the file gone when it read the folder
/// after that commit, so that commit (and those before it) may still name it.
struct PointFiles {
    enum Source {
        /// Held by the base snapshot (read from its packs).
        case base(PagedSnapshotRecord.FileChunks)
        /// Carried by a segment: the segment's key and the file's place among the files it
        /// carries (its members' in order, for a merged one), read again when it is written.
        case carried(bytes: Int, sha256: String, segment: SegmentName, index: Int)

        var bytes: UInt64 {
            switch self {
            case .base(let file): file.bytes
            case .carried(let bytes, _, _, _): UInt64(bytes)
            }
        }

        var sha256: String {
            switch self {
            case .base(let file): file.sha256
            case .carried(_, let sha, _, _): sha
            }
        }
    }

    /// By name in the external-data folder.
    private(set) var files: [String: Source] = [:]
    private var removeNext: [String] = []
    /// Every commit applied came from a segment whose follower watched the folder (false: older
    /// segments; their files are known only from a later snapshot).
    private(set) var tracked = true

    init(base: PagedSnapshotRecord) {
        for file in base.files { files[file.externalKey] = .base(file) }
    }

    /// Applies one commit of the segment read as `name`: the previous commit's removals, then
    /// this one's files (`index`: the place of the next file the segment carries).
    mutating func apply(_ commit: PointSegment.Commit, of segment: PointSegment, name: SegmentName, index: inout Int) {
        for name in removeNext { files[name] = nil }
        for name in commit.removedBefore ?? [] { files[name] = nil }   // a digest's: gone within its span
        removeNext = commit.removed ?? []
        if segment.externalData != true || commit.notCarried?.isEmpty == false { tracked = false }
        for file in commit.files ?? [] {
            files[file.name] = .carried(bytes: file.bytes, sha256: file.sha256, segment: name, index: index)
            index += 1
        }
    }

    /// The files after the last commit's removals too (what the folder held when it was read).
    var settled: [String: Source] {
        var out = files
        for name in removeNext { out[name] = nil }
        return out
    }

    /// Reads a chain's segments in order (a resumed follower's view of the folder: names and sizes).
    static func replay(_ chain: PointTimeline.Chain, base: PagedSnapshotRecord, in repository: PagedRepository, zstd: ZstdFrames) throws -> PointFiles {
        var state = PointFiles(base: base)
        for name in chain.segments.dropFirst() {
            guard let sealed = try repository.backend.read(name.key) else {
                throw StoreOpsError(.badData, "point segment \(repository.backend.describe(name.key)) is listed but cannot be read", hint: Sealer.damagedHint)
            }
            var index = 0
            for (segment, _, _) in try PointSegment.openAll(sealed, name: name, sealer: repository.sealer, zstd: zstd, location: repository.location) {
                for commit in segment.commits { state.apply(commit, of: segment, name: name, index: &index) }
            }
        }
        return state
    }

    /// Writes carried files into `folder`: each segment holding some read once (memory: one
    /// segment, however many files the chain carried); each file checked against its SHA-256.
    static func write(_ carried: [PointOverlay.Carried], into folder: String, repository: PagedRepository, context: String) throws {
        let zstd = try ZstdFrames(level: 3)
        let bySegment = Dictionary(grouping: carried, by: \.segment)
        for segment in bySegment.keys.sorted(by: { $0.key < $1.key }) {
            try ProcessSignals.checkpoint("restoring \(context)")
            guard let sealed = try repository.backend.read(segment.key) else {
                throw StoreOpsError(.badData, "\(context): point segment \(repository.backend.describe(segment.key)) is listed but cannot be read", hint: Sealer.damagedHint)
            }
            let contents = try PointSegment.openAll(sealed, name: segment, sealer: repository.sealer, zstd: zstd, location: repository.location).flatMap(\.2)
            for file in bySegment[segment] ?? [] {
                guard PagedSnapshotRecord.isExternalFileName(file.name), file.index >= 0, file.index < contents.count,
                      contents[file.index].count == file.bytes, Hashing.sha256(contents[file.index]) == file.sha256 else {
                    throw StoreOpsError(.badData, "\(context): the external-data file \(file.name.debugDescription) is not where point segment \(segment.key) says", hint: Sealer.damagedHint)
                }
                let fd = try FileSystem.create((folder as NSString).appendingPathComponent(file.name), point: "restore.external-file")
                defer { close(fd) }
                try contents[file.index].withUnsafeBytes { try FileSystem.writeAll(fd, $0, path: file.name) }
            }
        }
    }
}

/// What the follower knows of a store's external-data folder, and what changed in it since.
///
/// Reading it costs one `stat` of the folder when nothing changed: the folder's own mtime moves
/// when a name is added or removed. That is trusted only when the last listing came at least
/// `settle` after the mtime it saw (a coarse clock can give a later change the same mtime) and
/// left nothing for later; a file changed within `settle` of being read is looked at again until
/// it is older (it may have been read while the app was still writing it). The first listing
/// (a new base, a resume) also looks at every known name: one the base or the chain recorded
/// while it was still being written (another size now, or changing still) is read again.
/// Measured: 0.16 ms a read of a settled folder of 20,000 files, 27 ms when one file was added.
struct ExternalFolderWatch {
    let folder: String
    /// Name to size, as last read (and recorded).
    private(set) var known: [String: UInt64]
    /// The folder's mtime at the last listing, and when that listing was (ns since 1970).
    private var folderTime: Int64?
    private var listedAt: Int64 = 0
    /// Files read within `settle` of their mtime: name to that mtime.
    private var recent: [String: Int64] = [:]
    /// Names that could not be carried (too large, unreadable, a folder), reported once each:
    /// name to what was reported. Unreadable files are tried again at every read.
    private var uncarried: [String: String] = [:]
    private var unreadable: Set<String> = []
    static let settle: Int64 = 2_000_000_000

    init(folder: String, known: [String: UInt64]) {
        self.folder = folder
        self.known = known
    }

    struct Change {
        var added: [(file: PointSegment.FileAdd, bytes: [UInt8])] = []
        var removed: [String] = []
        /// Names that appeared but cannot be carried, and why (too large, unreadable, a folder).
        var notCarried: [(name: String, reason: String)] = []
        /// New files left for the next read: past this read's budget.
        var deferred: [String] = []
        var isEmpty: Bool { added.isEmpty && removed.isEmpty && notCarried.isEmpty }

        /// This read's changes, then `later`'s (the next read, of what this one left).
        mutating func append(_ later: Change) {
            let names = Set(later.added.map(\.file.name))
            removed.removeAll { names.contains($0) }
            added += later.added
            removed += later.removed
            notCarried += later.notCarried
            deferred = later.deferred
        }
        var bytes: Int { added.reduce(0) { $0 + $1.bytes.count } }
    }

    private static func nanoseconds(_ time: timespec) -> Int64 { Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec) }

    private static func now() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return nanoseconds(time)
    }

    private enum Read { case bytes([UInt8]), failed(Int32) }

    /// The whole file, or the errno that stopped reading it (EFBIG: over `limit`).
    private static func contents(_ path: String, limit: Int) -> Read {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return .failed(errno) }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                return .failed(errno)
            }
            if n == 0 { return .bytes(out) }
            out.append(contentsOf: chunk[0..<n])
            if out.count > limit { return .failed(EFBIG) }
        }
    }

    private mutating func notCarried(_ name: String, _ reason: String, into change: inout Change) {
        if uncarried[name] != reason { change.notCarried.append((name, reason)) }
        uncarried[name] = reason
    }

    /// Reads the folder: files that appeared (or changed), read whole, and names that went. At
    /// most `budget` bytes are read at once (one file at least); what is left over, or gone
    /// between the listing and the read, is not recorded as known and is looked for again at the
    /// next read.
    mutating func scan(budget: Int = 64 << 20, maxFile: Int = PointSegment.maxFileBytes) -> Change {
        var change = Change()
        let now = Self.now()
        var info = stat()
        guard stat(folder, &info) == 0 else {
            // No folder (yet, or any more): every known file is gone. Any other error: next time.
            if errno == ENOENT || errno == ENOTDIR {
                change.removed = known.keys.sorted()
                known = [:]
                recent = [:]
                uncarried = [:]
                unreadable = []
            }
            folderTime = nil
            return change
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR else { folderTime = nil; return change }
        let changed = Self.nanoseconds(info.st_mtim)
        let first = folderTime == nil
        let listing = changed != folderTime || listedAt - changed < Self.settle
        if !listing && recent.isEmpty && unreadable.isEmpty { return change }
        var names: [String]
        var complete = true
        if listing {
            guard let listed = try? FileManager.default.contentsOfDirectory(atPath: folder) else {
                folderTime = nil
                return change
            }
            let present = Set(listed)
            // Names in a subfolder (a base's: only files directly in the folder are watched) stay as they are.
            change.removed = known.keys.filter { !present.contains($0) && !$0.contains("/") }.sorted()
            for name in change.removed { known[name] = nil; recent[name] = nil }
            for name in uncarried.keys where !present.contains(name) { uncarried[name] = nil; unreadable.remove(name) }
            names = first ? listed : listed.filter { known[$0] == nil || recent[$0] != nil || unreadable.contains($0) }
            folderTime = changed
            listedAt = now
        } else {
            names = Array(Set(recent.keys).union(unreadable))
        }
        var spent = 0
        for name in names.sorted() where PagedSnapshotRecord.isExternalFileName(name) {
            let path = (folder as NSString).appendingPathComponent(name)
            var file = stat()
            guard lstat(path, &file) == 0 else {
                recent[name] = nil
                continue
            }
            guard (file.st_mode & S_IFMT) == S_IFREG else {
                let kind = (file.st_mode & S_IFMT) == S_IFDIR ? "a folder" : (file.st_mode & S_IFMT) == S_IFLNK ? "a symbolic link" : "not a regular file"
                notCarried(name, "\(kind) (only files directly in \(StoreFile.externalDataFolderName) are carried)", into: &change)
                continue
            }
            let modified = Self.nanoseconds(file.st_mtim)
            let size = UInt64(file.st_size)
            let settled = now - modified >= Self.settle
            if known[name] == size, recent[name] == modified || (recent[name] == nil && settled) {
                if settled { recent[name] = nil }
                continue
            }
            if first, known[name] == size, recent[name] == nil {
                recent[name] = modified   // recorded at its size: watched until it settles, read again if it changes
                continue
            }
            if size > UInt64(maxFile) {
                notCarried(name, "\(Format.bytes(size)), over the \(Format.bytes(maxFile)) a point carries", into: &change)
                continue
            }
            guard spent == 0 || spent + Int(size) <= budget else {
                complete = false
                change.deferred.append(name)
                continue
            }
            let bytes: [UInt8]
            switch Self.contents(path, limit: maxFile) {
            case .bytes(let read): bytes = read
            case .failed(ENOENT):
                complete = false   // gone since it was listed
                continue
            case .failed(EFBIG):
                notCarried(name, "over the \(Format.bytes(maxFile)) a point carries", into: &change)
                continue
            case .failed(let code):
                unreadable.insert(name)
                notCarried(name, "cannot be read: \(String(cString: strerror(code)))", into: &change)
                continue
            }
            unreadable.remove(name)
            uncarried[name] = nil
            spent += bytes.count
            change.added.append((PointSegment.FileAdd(name: name, bytes: bytes.count, sha256: Hashing.hex(SHA256.hash(data: bytes))), bytes))
            known[name] = UInt64(bytes.count)
            recent[name] = settled ? nil : modified
        }
        // Something left for later: the next read lists the folder again, whatever its mtime says.
        if !complete { folderTime = nil }
        return change
    }
}
