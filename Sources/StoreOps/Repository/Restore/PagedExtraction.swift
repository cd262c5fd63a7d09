import CStoreSupport
import Crypto
import Foundation
import Synchronization

/// Reassembles a format-2 snapshot: its map, then every frame holding one of its pages read
/// once (on two cores), opened (authenticated) and decompressed, each page written where the map
/// puts it; the external-data files chunk by chunk, each checked against its size and SHA-256;
/// and last the database's integrity check on one core while the other reads the file back
/// once, for its SHA-256 and to check every page against the id the map gives it.
///
/// Memory: the map (32 bytes a page), the pages by id (12), which ids were found (1), the frames
/// to read, and the frames being read.
enum PagedExtraction {
    /// - Parameter fileHash: also the whole file's SHA-256 (an export's manifest, an import's
    ///   comparison). Every page is checked against its id either way, which proves the file is
    ///   the snapshot's; the SHA-256 is a second pass over every byte, as costly as the ids, and a
    ///   restore needs none (its swap's record names the file by inode, size and mtime).
    /// - Returns: the SHA-256 of the reassembled database (nil: not asked for).
    /// - Throws: 65 naming the snapshot and the object when anything is missing or damaged.
    @discardableResult
    static func run(_ record: PagedSnapshotRecord, repository: PagedRepository, into targets: SnapshotExtraction.Targets,
                    level: VerifyLevel, overlay: PointOverlay? = nil, fileHash: Bool = true, progress: ProgressHandler? = nil) throws -> String? {
        let context = "snapshot \(record.id)"
        var check = SnapshotExtraction.Damage(id: record.id, repository: repository.location,
                                              hint: "`storectl repo check --repo \(repository.location) --read-data` names every snapshot the damage reaches; "
                                                  + "restore one it does not name, if there is one (`storectl snapshot list --repo \(repository.location)`), "
                                                  + "and run `storectl repo repair` so that the next snapshot stores those pages again")
        check.object = "the repository"
        let started = Date()
        func stage(_ what: String) {
            SnapshotRestore.logger.debug("\(what)", metadata: ["ms": "\(Int(Date().timeIntervalSince(started) * 1000))"])
        }
        var ids: [ContentID]
        do {
            ids = try BlobLocator.pageMap(of: record, in: repository).ids
            stage("page map read")
            progress?(.stage("pages"))
            try writePages(ids, pageSize: record.pages.pageSize, repository: repository, to: targets.database, context: context,
                           progress: progress.map { handler in { handler(.step($0)) } })
            stage("pages written")
            if let overlay {
                progress?(.stage("points"))
                try overlay.apply(to: targets.database)
                ids = overlay.ids
                stage("points applied")
            }
            // A point's files: the base's it still has, those its segments carried, and (chains
            // whose segments carry none) those written since that a later snapshot holds.
            let removed = overlay?.removedBaseFiles ?? []
            let files = record.files.filter { !removed.contains($0.externalKey) } + (overlay?.files ?? [])
            if !files.isEmpty || overlay?.carriedFiles.isEmpty == false { progress?(.stage("external data")) }
            try writeFiles(files, repository: repository, into: targets.externalFolder, context: context)
            if let folder = targets.externalFolder, let carried = overlay?.carriedFiles, !carried.isEmpty {
                try PointFiles.write(carried, into: folder, repository: repository, context: context)
            }
        } catch let error as StoreOpsError where error.status == .badData && !error.message.hasPrefix(context) {
            throw check.damaged(error.message)
        }
        // The integrity check on one core; on the other, the file read back once: its SHA-256,
        // and every page checked against the id the map gives it. (Checking each page as it was
        // written kept both cores busy then and left this one idle during the integrity check.)
        // The page ids are shared: the hashing lane checks them chunk by chunk from the start as
        // it reads, the checking lane from the end once its check is done, until they meet (the
        // SHA-256 and the ids are twice the work of quick_check alone; so both lanes end together).
        // `level` none: the pages alone (the caller knows the same bytes passed the check before).
        let pageSize = record.pages.pageSize
        progress?(.stage(level == .none ? "page hashes" : level == .full ? "integrity_check and page hashes" : "quick_check and page hashes"))
        let pages = PageCheck(path: targets.database, ids: ids, pageSize: pageSize, repository: repository, context: context)
        // Without the SHA-256: both lanes check ids from the end, the second from the start of
        // the integrity check, and the file's size is checked apart.
        if !fileHash { try pages.checkSize() }
        let (result, sha) = try inParallel({ () throws -> Manifest.Verification in
                                               let result = level == .none ? Manifest.Verification(level: .none, ok: true, messages: [])
                                                                           : try SnapshotVerify.checkDatabase(targets.database, level: level)
                                               try pages.checkFromEnd()
                                               return result
                                           },
                                           { () throws -> String? in
                                               guard fileHash else { try pages.checkFromEnd(); return nil }
                                               return try pages.hashAndCheckFromStart()
                                           })
        stage("checked and hashed")
        guard result.ok else {
            throw StoreOpsError(.badData, "\(context): the database it reassembles to fails \(level == .full ? "integrity_check" : "quick_check"): \(result.messages.prefix(3).joined(separator: "; "))")
        }
        return sha
    }

    /// One frame to read, and which of its blobs go where (`wanted`: a blob, and the first page
    /// holding its id; `PagesByID` chains the others).
    private struct FrameJob {
        var pack: ContentID
        var frame: FrameEntry
        var wanted: [(blob: Int, first: Int)] = []
    }

    private static func writePages(_ ids: [ContentID], pageSize: Int, repository: PagedRepository, to path: String,
                                   context: String, progress: StepHandler?) throws {
        guard PagedSnapshotRecord.isPageSize(pageSize) else {
            throw StoreOpsError(.badData, "\(context): page size \(pageSize) is not one SQLite uses")
        }
        // The pages by id: a hash table from each distinct id to the first page holding it, and
        // from each page to the next page with the same id (ascending), so a blob found in an
        // index is matched to its pages in one probe.
        let pagesByID = PagesByID(ids)
        let frames = try framesToRead(ids, pagesByID: pagesByID, pageSize: pageSize, repository: repository, context: context)
        nonisolated(unsafe) let report = progress   // called under `written`'s lock, one lane at a time

        let fd = open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "writing \(path)", side: .output) }
        defer { close(fd) }
        guard ftruncate(fd, off_t(ids.count) * off_t(pageSize)) == 0 else {
            throw StoreOpsError.posix(errno, doing: "sizing \(path)", side: .output)
        }
        let startedAt = Date()
        // Neighbouring frames of a pack are read together (at most 4 MiB at once per lane).
        let framesToRead = frames.map { (pack: $0.pack, frame: $0.frame) }
        let written = Mutex(0)
        let writeBehindPages = max(1, (32 << 20) / pageSize)
        try BlobLocator.readOnLanes(framesToRead, repository: repository, checkpoint: "restoring \(context)") { member, plain in
            let pages = try place(plain, of: frames[member], pagesByID: pagesByID, pageSize: pageSize, fd: fd, path: path,
                                  repository: repository, context: context)
            let flushNow = written.withLock { value -> Bool in
                let before = value
                value += pages
                report?(ProgressUpdate(phase: "pages", done: UInt64(value), total: UInt64(ids.count), unit: .pages,
                                       bytes: UInt64(value) * UInt64(pageSize), startedAt: startedAt))
                return before / writeBehindPages != value / writeBehindPages
            }
            // Write-behind: start the disk on what is written so far (pages land in any
            // order), so the final fsync does not flush the whole database at once.
            if flushNow { _ = storectl_sync_file_range(fd, 0, 0, 0) }
        }
    }

    /// The frames holding the snapshot's pages, each once, in pack and offset order; 65 naming
    /// the first page no index holds.
    private static func framesToRead(_ ids: [ContentID], pagesByID: PagesByID, pageSize: Int, repository: PagedRepository,
                                     context: String) throws -> [FrameJob] {
        var located = [Bool](repeating: false, count: ids.count)
        var jobs: [FrameJob] = []
        let damaged = try RepositoryIndex.scan(repository) { _, pack, contents in
            for frame in contents.frames {
                var job: FrameJob?
                for (b, blob) in frame.blobs.enumerated() where blob.type == .page {
                    guard let first = pagesByID.first(blob.id), !located[first] else { continue }
                    guard Int(blob.length) == pageSize else { continue }
                    located[first] = true
                    if job == nil { job = FrameJob(pack: pack, frame: frame) }
                    job?.wanted.append((b, first))
                }
                if let job { jobs.append(job) }
            }
        }
        for page in 0..<ids.count where !located[page] && pagesByID.first(ids[page]) == page {
            throw BlobLocator.missingBlob(ids[page], type: .page, context: "\(context), page \(page + 1)", repository: repository, damaged: damaged)
        }
        jobs.sort { $0.pack == $1.pack ? $0.frame.offset < $1.frame.offset : $0.pack < $1.pack }
        return jobs
    }

    /// Writes the pages an opened frame holds to every place the map puts them; pages that
    /// follow each other both in the frame and in the file go out in one write (a first
    /// snapshot's frames hold runs of pages in file order). Returns how many pages were written.
    private static func place(_ plain: Data, of job: FrameJob, pagesByID: PagesByID, pageSize: Int, fd: Int32, path: String,
                              repository: PagedRepository, context: String) throws -> Int {
        var pages = 0
        var run: (start: Int, page: UInt32, count: Int)?
        func flush() throws {
            guard let current = run else { return }
            try plain.withUnsafeBytes { raw in
                let slice = UnsafeRawBufferPointer(rebasing: raw[current.start..<(current.start + current.count * pageSize)])
                try FileSystem.writeAll(fd, slice, at: off_t(current.page) * off_t(pageSize), path: path)
            }
            run = nil
        }
        for (b, first) in job.wanted {
            let blob = job.frame.blobs[b]
            let start = Int(blob.offset)
            guard Int(blob.length) == pageSize, start + pageSize <= plain.count else {
                throw StoreOpsError(.badData, "\(context): a page blob lies outside its frame in pack \(repository.backend.describe(PackBuilder.key(job.pack)))",
                                    hint: Sealer.damagedHint)
            }
            // Checked against its id once the whole file is written (`checkPages`).
            var next: Int? = first
            while let index = next {
                let page = UInt32(index)
                if let current = run, current.page + UInt32(current.count) == page, current.start + current.count * pageSize == start {
                    run?.count += 1
                } else {
                    try flush()
                    run = (start, page, 1)
                }
                next = pagesByID.next(after: index)
                pages += 1
            }
        }
        try flush()
        return pages
    }

    /// The restored file read back: its SHA-256 (one lane, in order), and every page checked
    /// against the id the map gives it, in chunks of 1 MiB claimed from the start by the hashing
    /// lane and from the end by the other (`checkFromEnd`) until none is left. A frame that opens
    /// but holds other pages than its index says, or a page written to the wrong place, fails the
    /// restore: 65 naming the page and its pack.
    final class PageCheck: @unchecked Sendable {   // shared by two lanes: `claims` is the only state they both change
        let path: String
        let ids: [ContentID]
        let pageSize: Int
        let repository: PagedRepository
        let context: String
        let chunkPages: Int
        /// Chunks below `front` are the hashing lane's, from `back` on the other lane's.
        private let claims: Mutex<(front: Int, back: Int)>
        /// Pages checked so far, by both lanes (each page once).
        private let checked = Mutex(0)
        var pagesChecked: Int { checked.withLock { $0 } }

        init(path: String, ids: [ContentID], pageSize: Int, repository: PagedRepository, context: String) {
            self.path = path
            self.ids = ids
            self.pageSize = pageSize
            self.repository = repository
            self.context = context
            chunkPages = max(1, (1 << 20) / pageSize)   // `Hashing.streamHashing`'s chunks
            claims = Mutex((0, (ids.count + chunkPages - 1) / chunkPages))
        }

        /// The file's SHA-256, checking the ids of each chunk not yet claimed by the other lane.
        func hashAndCheckFromStart() throws -> String {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "reading \(path) back", side: .output) }
            defer { close(fd) }
            var page = 0
            let (_, sha) = try Hashing.streamHashing(fd: fd, path: path, side: .output) { chunk in
                // Whole 1 MiB chunks but the last: whole pages, unless the file ends mid-page.
                guard chunk.count % pageSize == 0, page + chunk.count / pageSize <= ids.count else {
                    throw StoreOpsError(.ioError, "\(path) is not the \(ids.count) pages of \(pageSize) bytes it was restored as")
                }
                let index = page / chunkPages
                let mine = claims.withLock { claims -> Bool in
                    guard index < claims.back else { return false }
                    claims.front = index + 1
                    return true
                }
                if mine { try check(chunk, from: page) }
                page += chunk.count / pageSize
            }
            guard page == ids.count else {
                throw StoreOpsError(.ioError, "\(path) ends before its page \(page + 1): it was cut short while being restored")
            }
            return sha
        }

        /// The file holds exactly the pages it was restored as (`hashAndCheckFromStart` finds it
        /// too, reading it whole).
        func checkSize() throws {
            let expected = UInt64(ids.count) * UInt64(pageSize)
            guard let size = FileSystem.size(of: path) else { throw StoreOpsError.posix(errno, doing: "reading \(path) back", side: .output) }
            guard size == expected else {
                throw StoreOpsError(.ioError, "\(path) is \(Format.bytes(size)), not the \(ids.count) pages of \(pageSize) bytes it was restored as")
            }
        }

        /// Checks the ids of the last chunks not yet claimed, one after another back to the front.
        func checkFromEnd() throws {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "reading \(path) back", side: .output) }
            defer { close(fd) }
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkPages * pageSize, alignment: 16)
            defer { buffer.deallocate() }
            while true {
                let index = claims.withLock { claims -> Int? in
                    guard claims.back > claims.front else { return nil }
                    claims.back -= 1
                    return claims.back
                }
                guard let index else { return }
                let first = index * chunkPages
                let count = min(chunkPages, ids.count - first) * pageSize
                var filled = 0
                while filled < count {
                    let n = pread(fd, buffer.baseAddress! + filled, count - filled, off_t(first) * off_t(pageSize) + off_t(filled))
                    if n < 0, errno == EINTR { continue }
                    if n < 0 { throw StoreOpsError.posix(errno, doing: "reading \(path) back", side: .output) }
                    // The hashing lane says where it ends, reading the file in order.
                    guard n > 0 else { throw StoreOpsError(.ioError, "\(path) ends before its page \(first + filled / pageSize + 1): it was cut short while being restored") }
                    filled += n
                }
                try check(UnsafeRawBufferPointer(rebasing: buffer[0..<count]), from: first)
            }
        }

        /// Pages `first`… of the file, in `chunk`, against their ids.
        private func check(_ chunk: UnsafeRawBufferPointer, from first: Int) throws {
            defer { checked.withLock { $0 += chunk.count / pageSize } }
            for k in 0..<(chunk.count / pageSize) {
                let page = first + k
                let id = ids[page]
                guard repository.sealer.contentID(UnsafeRawBufferPointer(rebasing: chunk[(k * pageSize)..<((k + 1) * pageSize)])) == id else {
                    // Where the expected page came from: a pack's frame, or (a point's page) a segment of points.
                    if id == .zero {
                        throw StoreOpsError(.badData, "\(context): page \(page + 1) has no content id: neither the base nor a commit of the point's chain holds it",
                                            hint: "`storectl repo check --repo \(repository.location) --read-data` checks the chain; restore an earlier point or a snapshot")
                    }
                    guard let located = try? BlobLocator.locate([id], in: repository).found[id] else {
                        throw StoreOpsError(.badData, "\(context): page \(page + 1) does not match its content id \(id.hex.prefix(12))… (a page of a segment of points, or a pack no index lists)",
                                            hint: Sealer.damagedHint)
                    }
                    throw StoreOpsError(.badData, "\(context): page \(page + 1) does not match its content id \(id.hex.prefix(12))… (pack \(repository.backend.describe(PackBuilder.key(located.pack)))): a frame holds other pages than its index says",
                                        hint: Sealer.damagedHint)
                }
            }
        }
    }

    /// - Parameter locations: where the chunks are, when the caller knows (`repo check` read
    ///   the indexes already: scanning them again for each file read every index once a file).
    static func writeFiles(_ files: [PagedSnapshotRecord.FileChunks], repository: PagedRepository, into folder: String?,
                           context: String, locations: [ContentID: BlobLocation]? = nil, zstd given: ZstdFrames? = nil) throws {
        guard !files.isEmpty else { return }
        // Located once; read one chunk (one frame, at most 1 MiB) at a time: memory stays bounded
        // however large the external data is.
        let wanted = Set(files.flatMap(\.chunks))
        let found: [ContentID: BlobLocation]
        if let locations {
            found = locations
        } else {
            let located = try BlobLocator.locate(wanted, in: repository)
            found = located.found
            if let missing = wanted.first(where: { found[$0] == nil }) {
                throw BlobLocator.missingBlob(missing, type: .fileChunk, context: context, repository: repository, damaged: located.damaged)
            }
        }
        let zstd = try given ?? ZstdFrames(level: 3)
        // The frame read last: a file's chunks lie one after another in a frame (read once).
        var last: (pack: ContentID, offset: UInt64, plain: Data)?
        func chunk(_ id: ContentID) throws -> Data? {
            guard let location = found[id] else { return nil }
            let plain: Data
            if let last, last.pack == location.pack, last.offset == UInt64(location.frame.offset) {
                plain = last.plain
            } else {
                plain = try BlobLocator.readFrame(location.frame, pack: location.pack, repository: repository, zstd: zstd)
                last = (location.pack, UInt64(location.frame.offset), plain)
            }
            return try BlobLocator.extract(location.blob, from: plain, sealer: repository.sealer,
                                           what: "pack \(repository.backend.describe(PackBuilder.key(location.pack)))")
        }
        for file in files {
            try ProcessSignals.checkpoint("restoring \(context)")
            guard let relative = file.externalPath else {
                throw StoreOpsError(.badData, "\(context): refusing the external-data file name \(file.path.debugDescription)")
            }
            var fd: Int32 = -1
            if let folder {
                // A file in a subfolder goes back into it (each part checked to be one name).
                var parent = folder
                for part in relative.split(separator: "/").dropLast() {
                    parent = (parent as NSString).appendingPathComponent(String(part))
                    if FileSystem.kind(of: parent) != .directory {
                        try FileSystem.makeDirectory(parent, existingOK: true, point: "restore.external-subfolder")
                    }
                }
                fd = try FileSystem.create((folder as NSString).appendingPathComponent(relative), point: "restore.external-file")
            }
            defer { if fd >= 0 { close(fd) } }
            var hasher = SHA256()
            var total: UInt64 = 0
            for id in file.chunks {
                guard let data = try chunk(id) else { throw StoreOpsError(.badData, "\(context): a chunk of \(file.path) was not read") }
                hasher.update(data: data)
                total += UInt64(data.count)
                guard total <= file.bytes else { throw StoreOpsError(.badData, "\(context): \(file.path) holds more than the \(file.bytes) bytes its record says") }
                if fd >= 0 { try data.withUnsafeBytes { try FileSystem.writeAll(fd, $0, path: file.path) } }
            }
            let sha = Hashing.hex(hasher.finalize())
            guard total == file.bytes, sha == file.sha256 else {
                // Shortened where the two differ in their first 12 digits (a fuzz run's differed in the last).
                let (got, want) = sha.prefix(12) == file.sha256.prefix(12) ? (sha, file.sha256) : (sha.prefix(12) + "…", file.sha256.prefix(12) + "…")
                throw StoreOpsError(.badData, "\(context): \(file.path) reassembles to \(total) bytes with SHA-256 \(got), its record says \(file.bytes) bytes, \(want)")
            }
        }
    }
}

/// The pages of a map grouped by content id, for a restore: an open-addressing table (keyed by
/// an id's first 8 bytes, which are uniformly distributed: ids are HMACs) from each distinct id
/// to the first page holding it, and for each page the next page with the same id, in ascending
/// order. 8 bytes a page in the table (at most half full) and 4 in the chain.
struct PagesByID {
    private let ids: [ContentID]  // the map (shared, not copied)
    private var slots: [UInt32]   // first page + 1; 0: empty
    private var chain: [UInt32]   // next page with the same id + 1; 0: none
    private let mask: Int

    init(_ ids: [ContentID]) {
        self.ids = ids
        var size = 16
        while size < ids.count * 2 { size <<= 1 }
        let mask = size - 1
        self.mask = mask
        var slots = [UInt32](repeating: 0, count: size)
        var chain = [UInt32](repeating: 0, count: ids.count)
        ids.withUnsafeBufferPointer { ids in
            // From the last page down, each page becomes the head of its id's chain: the chain
            // ends up in ascending order.
            for page in stride(from: ids.count - 1, through: 0, by: -1) {
                let id = ids[page]
                var slot = Int(truncatingIfNeeded: id.prefix64) & mask
                while slots[slot] != 0, ids[Int(slots[slot] - 1)] != id { slot = (slot + 1) & mask }
                chain[page] = slots[slot]
                slots[slot] = UInt32(page + 1)
            }
        }
        self.slots = slots
        self.chain = chain
    }

    /// The first page whose id is `id`, or nil.
    func first(_ id: ContentID) -> Int? {
        var slot = Int(truncatingIfNeeded: id.prefix64) & mask
        while slots[slot] != 0 {
            let page = Int(slots[slot] - 1)
            if ids[page] == id { return page }
            slot = (slot + 1) & mask
        }
        return nil
    }

    /// The next page after `page` with the same id, or nil.
    func next(after page: Int) -> Int? {
        let next = chain[page]
        return next == 0 ? nil : Int(next - 1)
    }
}
