import Crypto
import Foundation
import GRDB

/// One format-2 snapshot, from the parent's map to the sealed record.
///
/// What is checked at create time (the "verified before it counts" promise for format 2):
/// - the source is read inside one read transaction (WAL), so every page comes from one point
///   in time; the backup API hands every page to the stream exactly once, and a page missing
///   from the stream fails the snapshot;
/// - `quick_check` runs on the source inside that same read transaction, so it checks exactly
///   the pages that were streamed (skipped only when every page equals the parent's: the
///   parent's check then holds);
/// - every page's content id is computed from its bytes; every new blob is compressed, sealed
///   and written in a pack that is fsynced before the index that lists it, which is fsynced
///   before the record;
/// - every page of the new map resolves to a blob this run wrote or an index lists;
/// - the record is written last: a snapshot is listed only when all of the above held.
final class PagedSnapshotWork {
    let store: StoreFile
    let repository: PagedRepository
    let tags: [String]
    let level: Int
    let startedAt: Date
    let id: String
    /// A snapshot brought in from elsewhere (`snapshot import`, `repo convert`): its id, times,
    /// host and source are kept, and its pages are read from a verified file.
    let origin: Manifest?
    let writer: PackWriter
    var parent: PagedSnapshotRecord?
    private var parentMap: PageMap.Loaded?
    /// The page blobs the indexes list, by their first 128 bits (the whole id of a repository
    /// made now): sorted, 16 bytes a blob. A page found here is not stored again.
    private var indexed: [IndexedID] = []
    /// The external-data chunks the indexes list, the same way.
    private var indexedChunks: [IndexedID] = []
    private var indexDamage: [RepositoryIndex.Damaged] = []
    private var stream: PageStream?
    private var pageSize = 0
    private var copied: ConsistentCopy.Copied?
    private var verification: Manifest.Verification?
    private var coreData: Manifest.CoreDataFacts?
    private var files: [PagedSnapshotRecord.FileChunks] = []
    private(set) var finalIDs: [ContentID] = []
    private var newFileChunks = Set<ContentID>()
    private(set) var record: PagedSnapshotRecord?
    private var committed = false
    /// The record's write was begun: if it failed, whether it landed is not known (see `abandon`).
    private var recordSent = false
    /// Nothing was committed to the store since the parent (`SourceFingerprint`): its map, files
    /// and check are this snapshot's, and no page is read.
    private(set) var reusesParent = false
    private var fingerprint: SourceFingerprint?

    /// Whether an unchanged store may reuse its parent (not a replicate base: its pages must be
    /// those of the follower's own pinned read).
    let reuseUnchanged: Bool
    /// A milestone of `storectl replicate` (`PointMilestone`): which chain and point it holds.
    var milestone: PagedSnapshotRecord.Milestone?
    /// The fault point of the record's write.
    var recordPoint = "snapshot.record"

    init(store: StoreFile, repository: PagedRepository, tags: [String], level: Int?, origin: Manifest? = nil, reuseUnchanged: Bool = true) {
        self.reuseUnchanged = reuseUnchanged
        self.store = store
        self.repository = repository
        self.tags = tags
        self.level = level ?? 3
        self.origin = origin
        startedAt = origin?.startedAt ?? Timestamp.now()
        id = origin?.snapshot?.id ?? SnapshotID.make(at: startedAt)
        writer = PackWriter(repository: repository)
    }

    var externalRoot: String { "store/" + StoreFile.externalDataRelativePath(forDatabaseNamed: store.name) }

    /// The parent (the newest snapshot of this store from this host), its map, and what the
    /// indexes hold.
    func prepare(records: [PagedSnapshotRecord]) throws {
        if origin == nil { try PagedSnapshotRecord.checkRecordable(path: store.path) }
        let host = origin?.host ?? ProcessInfo.processInfo.hostName
        let path = origin?.source.path ?? store.path
        // An import's: the newest taken before it (an older archive imported is not after the
        // store's newest snapshot: prune counts a snapshot as taken after its parent).
        let before = origin?.startedAt
        parent = records.first { record in
            record.manifest.host.isExactly(host) && record.manifest.source.path.isExactly(path) && record.id != id
                && (before.map { record.manifest.startedAt < $0 } ?? true)
        }
        // Not a parent whose last verification failed (`snapshot verify`, or `repo repair` that
        // left it unrestorable): its map would be this snapshot's, as broken.
        if origin == nil, reuseUnchanged, let parent, let print = parent.source, print.settled, parent.manifest.verify.ok, parent.manifest.verify.level != .none,
           repository.lastVerification(parent.id)?.ok != false, SourceFingerprint.take(store) == print {
            reusesParent = true
            fingerprint = print
            return
        }
        var wanted = Set<ContentID>()
        if let parent { wanted.formUnion(parent.pages.blobs) }
        var locations: [ContentID: BlobLocation] = [:]
        indexDamage = try RepositoryIndex.scan(repository) { _, pack, contents in
            for frame in contents.frames {
                for blob in frame.blobs {
                    switch blob.type {
                    case .page: indexed.append(IndexedID(blob.id))
                    case .fileChunk: indexedChunks.append(IndexedID(blob.id))
                    default: break
                    }
                    if wanted.contains(blob.id), locations[blob.id] == nil { locations[blob.id] = BlobLocation(pack: pack, frame: frame, blob: blob) }
                }
            }
        }
        indexed.sort()
        indexedChunks.sort()
        guard let parent else { return }
        do {
            parentMap = try BlobLocator.pageMap(of: parent, in: repository, locations: locations, damaged: indexDamage)
        } catch let error as StoreOpsError where error.status == .badData {
            // A damaged parent is not fatal: this snapshot is made from scratch instead.
            SnapshotCreate.logger.warning("the parent snapshot's map cannot be read; storing every page again", metadata: ["problem": "\(error.message)"])
            self.parent = nil
            parentMap = nil
        }
    }

    /// Whether an index lists a blob of this id (another store's snapshot, an older one of this
    /// store's): a page with it is not stored again.
    func isIndexed(_ id: ContentID) -> Bool { IndexedID.contains(indexed, id) }

    /// A milestone's parent, given rather than found: the chain's base or last milestone and its
    /// map (no index is scanned: the parent's blobs count as present, its record being durable
    /// and the follower's shared hold keeping any prune away while this one is written).
    func takeParent(_ record: PagedSnapshotRecord, map: PageMap.Loaded) {
        parent = record
        parentMap = map
        indexed = map.ids.map(IndexedID.init).sorted()
        indexedChunks = record.files.flatMap { $0.chunks.map(IndexedID.init) }.sorted()
        files = record.files
    }

    /// A milestone's pages: pages 1…`keep` as the parent has them, `pages` (ascending, each a
    /// page's bytes) over them; the page count `pageCount`. A page that neither gives fails it
    /// (nothing is recorded).
    func copyMilestone(pageSize: Int, pageCount: Int, keep: Int, pages: [(page: UInt32, bytes: [UInt8])], source: Manifest.Source) throws {
        var bytes: [UInt32: [UInt8]] = [:]
        for (page, content) in pages { bytes[page] = content }
        try copyMilestone(pageSize: pageSize, pageCount: pageCount, keep: keep, pages: pages.map(\.page), source: source) { bytes[$0] ?? [] }
    }

    /// The same, each page's bytes read when it is stored (`read`), so they need not all be in
    /// memory at once (a snapshot made from a point: `PointSnapshot`).
    func copyMilestone(pageSize: Int, pageCount: Int, keep: Int, pages: [UInt32], source: Manifest.Source,
                       verification note: String = "pages as the app committed them (checked when restored)",
                       read: (UInt32) throws -> [UInt8]) throws {
        guard let parentMap, let parent, parent.pages.pageSize == pageSize, pageCount > 0 else {
            throw StoreOpsError(.failure, "a milestone needs its parent's map with the same page size")
        }
        self.pageSize = pageSize
        let stream = PageStream(sealer: repository.sealer, writer: writer, level: level, parent: parentMap.ids, expectedPages: pageCount, indexed: indexed,
                                parentInterior: parent.interior?.bitset(pageCount: parent.pages.pageCount))
        self.stream = stream
        stream.keepParent(through: min(keep, pageCount, parentMap.ids.count))
        for page in pages where Int(page) <= pageCount && page >= 1 {
            let bytes = try read(page)
            guard bytes.count == pageSize else { throw StoreOpsError(.badData, "page \(page) of a milestone is \(bytes.count) bytes, not \(pageSize)") }
            guard bytes.withUnsafeBytes({ stream.receive(page: page, bytes: $0) }) else { break }
        }
        try stream.drain()
        finalIDs = try stream.finalIDs(pageCount: pageCount)
        verification = Manifest.Verification(level: .none, ok: true, messages: [note])
        coreData = nil
        copied = ConsistentCopy.Copied(source: source, startedAt: startedAt, steps: 0, restarts: 0, busyRetries: 0)
    }

    // MARK: - Copy

    /// Streams the store's pages into packs while its snapshot is held, then checks the source
    /// inside the same read transaction.
    func copy(timeout: TimeInterval, progress: StepHandler?) throws {
        _ = try PageSpill.setting()   // a misspelt setting is said, not ignored
        if reusesParent, let parent {
            // Unchanged since the parent (checked in `prepare`, under the same locks): its pages.
            pageSize = parent.pages.pageSize
            verification = parent.manifest.verify
            coreData = parent.manifest.coreData
            files = parent.files
            copied = ConsistentCopy.Copied(source: parent.manifest.source, startedAt: startedAt, steps: 0, restarts: 0, busyRetries: 0)
            // The copy stage as every snapshot shows it, done at once.
            let pages = UInt64(parent.pages.pageCount)
            for done in [0, pages] {
                progress?(ProgressUpdate(phase: "copy", done: done, total: pages, unit: .pages, bytes: done * UInt64(pageSize), startedAt: startedAt))
            }
            return
        }
        let before = SourceFingerprint.take(store)
        var after: SourceFingerprint??
        defer {
            // The read saw exactly the state both ends agree on (WAL: the same commit counter).
            // A spilled copy's end is the end of its read transaction, not of the snapshot.
            if let before, (after ?? SourceFingerprint.take(store)) == before { fingerprint = before }
        }
        var options = ConsistentCopy.Options(timeout: timeout, writeBehind: false)
        // A first snapshot, paced, with room for a scratch copy: the read transaction lasts as
        // long as copying the pages, not as long as packing them (`PageSpill`).
        let scratch = FileSystem.absolute(NSTemporaryDirectory())
        let spillable = parent == nil && IOPace.current != nil && spillAllowed
            && PageSpill.fits((FileSystem.size(of: store.path) ?? 0) + (FileSystem.size(of: store.walPath) ?? 0), in: scratch)
        PageSpill.removeStale(in: scratch)   // copies of snapshots that were killed
        var spill: PageSpill?
        defer { spill?.close() }
        // Without a parent nearly every page is new and the check cannot be skipped: run it on a
        // second connection while the pages stream, when that provably reads the same pages.
        // A connection held open from before the header is read to after the second connection
        // began keeps the -shm (and so the header) in place throughout.
        let guardian = parent == nil && !spillable ? try? StoreConnection.open(store.path, access: .readOnly, busyTimeout: 1, label: "storectl.shm-guard") : nil
        defer { try? guardian?.close() }
        _ = try? guardian?.inDatabase { try Int.fetchOne($0, sql: "SELECT count(*) FROM sqlite_master") }
        let header = guardian == nil ? nil : ParallelSourceCheck.walHeader(store)
        let parallel = ParallelSourceCheck()
        copied = try ConsistentCopy.holdingSnapshot(of: store, options: options, onSnapshot: { info in
            self.pageSize = info.pageSize
            if self.parent?.pages.pageSize != info.pageSize {   // VACUUMed to another page size: start afresh
                self.parent = nil
                self.parentMap = nil
            }
            try self.packExternalData()
        }) { src, info, stats in
            let stream = PageStream(sealer: repository.sealer, writer: writer, level: level, parent: parentMap?.ids ?? [],
                                    expectedPages: info.pageCount, indexed: self.indexed)
            self.stream = stream
            if spillable, stats.holdingSnapshot {
                let copy = try PageSpill(scratch: scratch, id: id, pageSize: info.pageSize, pageCount: info.pageCount)
                spill = copy
                try copyThroughSpill(src, copy, info: info, options: &options, stats: &stats, progress: progress)
                after = .some(SourceFingerprint.take(store))
                if src.isInsideTransaction { try src.commit() }   // the app's -wal is free again
                SnapshotCreate.logger.debug("pages copied through a scratch copy; the store's read transaction ended",
                                            metadata: ["ms": "\(Int(Date().timeIntervalSince(startedAt) * 1000))", "copy": "\(copy.file.tempPath)",
                                                       "kept": copy.inPageCache ? "in the page cache" : "written back as made"])
                return
            }
            if let header, stats.holdingSnapshot { _ = parallel.start(store, before: header) }
            defer { _ = parallel.result() }   // a failed copy still waits for the check's connection to close
            let sink = try PageSink(stream: stream, pageSize: info.pageSize)
            defer { sink.close() }
            do {
                try ConsistentCopy.stepBackup(from: src, to: sink.db, store: store, pageSize: info.pageSize, options: options,
                                              stats: &stats, progress: progress)
            } catch {
                // The stream's own failure (a full disk writing a pack) says more than SQLite's I/O error.
                if let failure = stream.error { throw failure }
                if let problem = sink.problem { throw StoreOpsError(.failure, "streaming the pages of \(store.path): \(problem)") }
                throw error
            }
            guard let page1 = sink.page1() else { throw StoreOpsError(.failure, "the streamed copy of \(store.path) has no page 1") }
            try finishStream(stream, page1: page1, pageCount: sink.pageCount(pageSize: info.pageSize), pageSize: info.pageSize)
            try checkSource(src, parallel: parallel.result())
        }
        if let spill, let stream {
            // The store is no longer held: the copy is checked while its last pages are packed.
            spill.startCheck()
            try spill.stream(into: stream, skipping: LockState.pendingByte / pageSize + 1, progress: progress)
            try finishStream(stream, page1: spill.page1, pageCount: spill.pageCount, pageSize: pageSize)
            SnapshotCreate.logger.debug("pages packed from the scratch copy", metadata: ["ms": "\(Int(Date().timeIntervalSince(startedAt) * 1000))"])
            let outcome = spill.checkResult()
            try spill.onCopy { db in try checkSource(db, parallel: outcome) }
            SnapshotCreate.logger.debug("the scratch copy checked", metadata: ["ms": "\(Int(Date().timeIntervalSince(startedAt) * 1000))"])
            spill.close()
            SnapshotCreate.logger.debug("the scratch copy removed", metadata: ["ms": "\(Int(Date().timeIntervalSince(startedAt) * 1000))"])
        }
    }

    /// Whether a first snapshot may go through a scratch copy (tests turn it off to compare).
    var spillAllowed = ProcessInfo.processInfo.environment["STORECTL_TEST_NO_SPILL"] == nil

    /// The backup API into `spill` (page by page, paced like a backup's), inside the read transaction.
    private func copyThroughSpill(_ src: Database, _ spill: PageSpill, info: StoreInfo, options: inout ConsistentCopy.Options,
                                  stats: inout ConsistentCopy.CopyStats, progress: StepHandler?) throws {
        let sink = try PageSink(pageSize: info.pageSize) { page, bytes in spill.accept(page: page, bytes: bytes) }
        defer { sink.close() }
        if let chunk = spill.pacedChunk { options.bytesPerStep = Int(chunk) }
        do {
            try ConsistentCopy.stepBackup(from: src, to: sink.db, store: store, pageSize: info.pageSize, options: options,
                                          stats: &stats, progress: { update in
                                              spill.advance()
                                              progress?(update)
                                          })
        } catch {
            if let failure = spill.failure { throw failure }
            if let problem = sink.problem { throw StoreOpsError(.failure, "streaming the pages of \(store.path): \(problem)") }
            throw error
        }
        guard let page1 = sink.page1() else { throw StoreOpsError(.failure, "the streamed copy of \(store.path) has no page 1") }
        try spill.complete(page1: page1, pageCount: sink.pageCount(pageSize: info.pageSize))
    }

    /// Page 1 and the lock-byte page after the others, then the map is final. The lock-byte page
    /// (the page holding byte 2^30) of a store over 1 GiB: SQLite never writes it, so the backup
    /// never copies it (https://sqlite.org/fileformat2.html#lockbyte). The map records it as
    /// zeros, which is what a copy made by the backup API holds.
    private func finishStream(_ stream: PageStream, page1: [UInt8], pageCount: Int, pageSize: Int) throws {
        _ = page1.withUnsafeBytes { stream.receive(page: 1, bytes: $0) }
        let lockBytePage = LockState.pendingByte / pageSize + 1
        if pageCount >= lockBytePage {
            _ = [UInt8](repeating: 0, count: pageSize).withUnsafeBytes { stream.receive(page: UInt32(lockBytePage), bytes: $0) }
        }
        try stream.drain()
        finalIDs = try stream.finalIDs(pageCount: pageCount)
    }

    /// A brought-in snapshot: the pages of a verified file that nothing else writes (the
    /// extracted database of an archive or an old repository), read in order and streamed as
    /// they are, so the snapshot restores to the same bytes; then its external data and checks.
    func copyFile(progress: StepHandler?) throws {
        let fd = open(store.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "reading \(store.path)", side: .input) }
        defer { close(fd) }
        let bytes = FileSystem.size(of: store.path) ?? 0
        var header = [UInt8](repeating: 0, count: 100)
        guard pread(fd, &header, 100, 0) == 100 else { throw StoreOpsError(.badData, "\(store.path) is too short to be a SQLite database") }
        pageSize = StoreFile.pageSize(fromHeader: header)
        guard PagedSnapshotRecord.isPageSize(pageSize), bytes % UInt64(pageSize) == 0, bytes > 0 else {
            throw StoreOpsError(.badData, "\(store.path) is not a whole SQLite database (page size \(pageSize), \(bytes) bytes)")
        }
        let pageCount = Int(bytes / UInt64(pageSize))
        if parent?.pages.pageSize != pageSize {
            parent = nil
            parentMap = nil
        }
        try packExternalData()
        let stream = PageStream(sealer: repository.sealer, writer: writer, level: level, parent: parentMap?.ids ?? [], expectedPages: pageCount, indexed: indexed)
        self.stream = stream
        let started = Date()
        let chunkPages = max(1, (1 << 20) / pageSize)
        var buffer = [UInt8](repeating: 0, count: chunkPages * pageSize)
        var page = 0
        while page < pageCount {
            try ProcessSignals.checkpoint("reading \(store.path)")
            let count = min(chunkPages, pageCount - page)
            let length = count * pageSize
            try buffer.withUnsafeMutableBytes { raw in
                var done = 0
                while done < length {
                    let n = pread(fd, raw.baseAddress! + done, length - done, off_t(page * pageSize + done))
                    if n < 0, errno == EINTR { continue }
                    guard n > 0 else { throw StoreOpsError.posix(n < 0 ? errno : EIO, doing: "reading \(store.path)", side: .input) }
                    done += n
                }
                for i in 0..<count {
                    let slice = UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(raw)[(i * pageSize)..<((i + 1) * pageSize)])
                    guard stream.receive(page: UInt32(page + i + 1), bytes: slice) else { break }
                }
            }
            if let failure = stream.error { throw failure }
            page += count
            progress?(ProgressUpdate(phase: "pages", done: UInt64(page), total: UInt64(pageCount), unit: .pages,
                                     bytes: UInt64(page) * UInt64(pageSize), startedAt: started))
        }
        try stream.drain()
        finalIDs = try stream.finalIDs(pageCount: pageCount)
        let connection = try StoreConnection.open(store.path, access: .readOnly, busyTimeout: 1, label: "storectl.import")
        defer { try? connection.close() }
        try connection.inDatabase { db in try checkSource(db) }
        copied = ConsistentCopy.Copied(source: origin?.source ?? .init(path: store.path, journalMode: "delete", pageSize: pageSize, pageCount: pageCount,
                                                                      fileBytes: bytes, walBytes: 0),
                                       startedAt: startedAt, steps: 0, restarts: 0, busyRetries: 0)
    }

    /// A base of `storectl replicate`: pages the follower reads from the store's file and -wal
    /// (`read(first page, count, into)`), in order, inside its pinned read transaction. The
    /// transaction lasts only as long as the read: no `quick_check` here (a point is checked when
    /// it is restored), so the manifest says `verify.level: none`.
    func copyPages(pageSize: Int, pageCount: Int, source: Manifest.Source,
                   read: (Int, Int, UnsafeMutableRawBufferPointer) throws -> Void, progress: StepHandler?, externalDataPacked: Bool = false) throws {
        try prepareCopy(pageSize: pageSize, pageCount: pageCount, packExternalData: !externalDataPacked)
        let stream = PageStream(sealer: repository.sealer, writer: writer, level: level, parent: parentMap?.ids ?? [], expectedPages: pageCount, indexed: indexed)
        self.stream = stream
        let started = Date()
        let chunkPages = max(1, (1 << 20) / pageSize)
        var buffer = [UInt8](repeating: 0, count: chunkPages * pageSize)
        var page = 0
        while page < pageCount {
            try ProcessSignals.checkpoint("reading \(store.path)")
            let count = min(chunkPages, pageCount - page)
            try buffer.withUnsafeMutableBytes { raw in
                let slice = UnsafeMutableRawBufferPointer(rebasing: raw[0..<(count * pageSize)])
                try read(page + 1, count, slice)
                for i in 0..<count {
                    guard stream.receive(page: UInt32(page + i + 1), bytes: UnsafeRawBufferPointer(rebasing: slice[(i * pageSize)..<((i + 1) * pageSize)])) else { break }
                }
            }
            if let failure = stream.error { throw failure }
            page += count
            progress?(ProgressUpdate(phase: "pages", done: UInt64(page), total: UInt64(pageCount), unit: .pages,
                                     bytes: UInt64(page) * UInt64(pageSize), startedAt: started))
        }
        try stream.drain()
        finalIDs = try stream.finalIDs(pageCount: pageCount)
        verification = Manifest.Verification(level: .none, ok: true, messages: ["pages as the app committed them (checked when restored)"])
        coreData = nil
        copied = ConsistentCopy.Copied(source: source, startedAt: startedAt, steps: 0, restarts: 0, busyRetries: 0)
    }

    /// `quick_check` and the entity counts, on the source inside the read transaction the pages
    /// came from; inherited from the parent when no page changed.
    private func checkSource(_ src: Database, parallel: Result<(Manifest.Verification, Manifest.CoreDataFacts?), any Error>? = nil) throws {
        let changed = stream?.changed.count ?? finalIDs.count
        if let parent, changed == 0, finalIDs.count == parent.pages.pageCount, parent.manifest.verify.ok {
            verification = Manifest.Verification(level: .quick, ok: true, messages: ["ok"])
            coreData = parent.manifest.coreData
            return
        }
        let result: Manifest.Verification
        var parallelFacts: Manifest.CoreDataFacts??
        if case .success(let (verification, facts)) = parallel {
            result = verification
            parallelFacts = .some(facts)
        } else {
            do { result = try Verifier.verify(src, level: .quick) } catch {
                var failed = StoreOpsError.sqlite(error, doing: "checking \(store.path) while it was streamed")
                if failed.kind == .badData { failed.check = "integrity.quick_check" }   // damage quick_check could not get past
                throw failed
            }
        }
        guard result.ok else {
            var damaged = StoreOpsError(.badData, "\(store.path) fails quick_check: \(result.messages.prefix(3).joined(separator: "; ")); no snapshot was recorded",
                                        hint: "the store itself is damaged: run `storectl preflight --full \(store.path)`")
            damaged.check = "integrity.quick_check"
            throw damaged
        }
        verification = result
        if let facts = parallelFacts {
            coreData = facts
            return
        }
        do {
            coreData = try ConsistentCopy.coreDataFacts(src)
        } catch let error as StoreOpsError { throw error } catch {
            var failed = StoreOpsError.sqlite(error, doing: "counting the entities of \(store.path)")
            if failed.kind == .badData { failed.check = "coredata.entities" }
            throw failed
        }
    }

    /// The external-data files, chunked (1 MiB), while the snapshot is held.
    /// The page size (a parent of another one is dropped) and, unless already done, the store's
    /// external-data files: a base going through a scratch copy packs them inside its pinned read
    /// (the files its pages name), its pages after it.
    func prepareCopy(pageSize: Int, pageCount: Int, packExternalData pack: Bool = true) throws {
        guard PagedSnapshotRecord.isPageSize(pageSize), pageCount > 0 else {
            throw StoreOpsError(.badData, "\(store.path) has page size \(pageSize) and \(pageCount) pages: not a database to follow")
        }
        self.pageSize = pageSize
        if parent?.pages.pageSize != pageSize {
            parent = nil
            parentMap = nil
        }
        if pack { try packExternalData() }
    }

    private func packExternalData() throws {
        files = []   // a read made again (the -wal restarted under it) lists the files again, once
        let source = store.externalDataPath
        guard FileSystem.kind(of: source) == .directory else { return }
        if let bad = FileSystem.nonUTF8Names(under: source).first {
            throw StoreOpsError(.badData, "the external-data file \(bad) has a name that is not valid UTF-8; it cannot be copied faithfully, so nothing was copied",
                                hint: "rename it (Core Data names these files by UUID)")
        }
        let zstd = try ZstdFrames(level: level)
        let enumerator = FileManager.default.enumerator(atPath: source)
        while let relative = enumerator?.nextObject() as? String {
            try ProcessSignals.checkpoint("packing external data")
            let path = (source as NSString).appendingPathComponent(relative)
            guard FileSystem.kind(of: path) == .file else { continue }
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                if errno == ENOENT { continue }   // deleted by the app since it was listed
                throw StoreOpsError.posix(errno, doing: "reading \(path)", side: .input)
            }
            defer { close(fd) }
            var chunks: [ContentID] = []
            var pending = Data()
            func emit() throws {
                guard !pending.isEmpty else { return }
                let chunkID = repository.sealer.contentID(pending)
                chunks.append(chunkID)
                // Stored already: by any snapshot an index lists (the parent, another store's). A
                // chunk of the parent's no index lists (a frame `repo repair` left out) is stored
                // again: taken as stored, every create of the store failed its check at the end.
                if !IndexedID.contains(indexedChunks, chunkID), newFileChunks.insert(chunkID).inserted {
                    let frame = try pending.withUnsafeBytes { try SealedFrame.make([(.fileChunk, chunkID, $0)], zstd: zstd, sealer: repository.sealer) }
                    try writer.add(frame)
                }
                pending = Data()
            }
            let (bytes, sha) = try Hashing.streamHashing(fd: fd, path: path) { chunk in
                var rest = chunk
                while !rest.isEmpty {
                    let take = min(rest.count, (1 << 20) - pending.count)
                    pending.append(contentsOf: UnsafeRawBufferPointer(rebasing: rest[0..<take]))
                    rest = UnsafeRawBufferPointer(rebasing: rest[take...])
                    if pending.count == 1 << 20 { try emit() }
                }
            }
            try emit()
            files.append(.init(path: "\(externalRoot)/\(relative)", bytes: bytes, sha256: sha, chunks: chunks))
        }
        files.sort { $0.path < $1.path }
    }

    // MARK: - Check and commit

    /// Every page and every other blob of the new snapshot resolves to a blob this run wrote or
    /// an index lists.
    func check() throws {
        guard let verification, verification.ok else { throw StoreOpsError(.failure, "the snapshot was not checked") }
        if reusesParent { return }   // the parent's blobs, listed, under the shared lock no prune can take
        let written = writer.blobsTaken()
        func contains(_ sorted: [UInt64], _ value: UInt64) -> Bool {
            var low = 0, high = sorted.count
            while low < high {
                let mid = (low + high) / 2
                if sorted[mid] < value { low = mid + 1 } else { high = mid }
            }
            return low < sorted.count && sorted[low] == value
        }
        func present(_ id: ContentID) -> Bool { contains(written, id.prefix64) || isIndexed(id) }
        for (p, pageID) in finalIDs.enumerated() where !present(pageID) {
            throw BlobLocator.missingBlob(pageID, type: .page, context: "page \(p + 1) of the new snapshot of \(store.path)",
                                          repository: repository, damaged: indexDamage)
        }
        for file in files { for chunk in file.chunks where !contains(written, chunk.prefix64) && !IndexedID.contains(indexedChunks, chunk) && !newFileChunks.contains(chunk) {
            throw BlobLocator.missingBlob(chunk, type: .fileChunk, context: "\(file.path) of the new snapshot", repository: repository, damaged: indexDamage)
        } }
    }

    /// Map blobs, the last pack and index, then the sealed record: the snapshot counts.
    /// `beforeRecord` runs once everything but the record is durable (import and convert verify
    /// the snapshot there): a throw leaves it unrecorded.
    func commit() throws { try commit(beforeRecord: nil) }

    func commit(beforeRecord: ((PagedSnapshotRecord) throws -> Void)?) throws {
        guard let copied, let verification else { throw StoreOpsError(.failure, "nothing was copied") }
        let existing = Set(parent?.pages.blobs ?? [])
        let zstd = try ZstdFrames(level: level)
        if reusesParent, parent == nil { throw StoreOpsError(.failure, "the parent snapshot went away") }
        let map = try reusesParent ? parent!.pages : PageMap.next(ids: finalIDs, pageSize: pageSize, changed: stream?.changed ?? Bitset(count: 0),
                                   parent: parent.flatMap { p in parentMap.map { (p.pages, $0) } }, idBytes: repository.sealer.idBytes,
                                   contentID: { self.repository.sealer.contentID($0) }) { type, id, data in
            guard !existing.contains(id) else { return }
            try writer.add(try data.withUnsafeBytes { try SealedFrame.make([(type, id, $0)], zstd: zstd, sealer: repository.sealer) })
        }
        try writer.finish()
        let externalRecords = files.map { Manifest.FileRecord(path: $0.path, bytes: $0.bytes, sha256: $0.sha256) }
        let pageCount = reusesParent ? map.pageCount : finalIDs.count
        var manifest = Manifest.of(kind: "snapshot", copied: copied, database: "store/\(store.name)",
                                   bytes: UInt64(pageCount) * UInt64(pageSize), sha256: nil,
                                   inspection: .init(pageSize: pageSize, pageCount: pageCount, verification: verification),
                                   external: files.isEmpty ? nil : (externalRoot, externalRecords), coreData: coreData, startedAt: startedAt,
                                   snapshot: .init(id: id, tags: tags, compression: .zstd, level: level, archive: nil, format: 2,
                                                   parent: parent?.id, addedBytes: writer.storedBytes))
        if let origin {
            // Brought in: when and where it was taken, and by what, stay as they were.
            manifest.host = origin.host
            manifest.tool = origin.tool
            manifest.finishedAt = origin.finishedAt
            manifest.durationSeconds = origin.durationSeconds
            manifest.coreData = origin.coreData ?? manifest.coreData
        }
        var record = PagedSnapshotRecord(manifest: manifest, pages: map, files: files, parent: parent?.id,
                                         added: .init(blobs: writer.blobs, rawBytes: writer.rawBytes, storedBytes: writer.storedBytes))
        record.source = fingerprint
        record.milestone = milestone
        record.interior = reusesParent ? parent?.interior : stream?.interiorPages(pageCount: pageCount)
        if ProcessInfo.processInfo.environment["STORECTL_TEST_NO_INTERIOR_PAGES"] != nil { record.interior = nil }   // a record as made before it existed
        try beforeRecord?(record)
        let sealed = try record.seal(repository.sealer)
        recordSent = true
        try repository.backend.write(PagedSnapshotRecord.key(id), sealed, point: recordPoint)
        committed = true
        self.record = record
    }

    /// The committed record's map as `BlobLocator.pageMap` would load it, from what this run
    /// holds (a milestone's is the next one's parent: no index is read for it); nil when it
    /// cannot be told here (then it is loaded from the repository).
    func committedMap() -> PageMap.Loaded? {
        guard let record, committed, !reusesParent else { return nil }
        let ref = record.pages
        guard ref.pageCount == finalIDs.count else { return nil }
        guard let parent, let parentMap, ref.base == parent.pages.base, ref.baseCount == parent.pages.baseCount else {
            // A new base: every id in its chunks, no delta.
            return ref.delta == nil && ref.baseCount == finalIDs.count ? PageMap.Loaded(ids: finalIDs, delta: [], baseOfDelta: [:]) : nil
        }
        guard parentMap.ids.count >= ref.baseCount else { return nil }
        var delta: [(page: UInt32, id: ContentID)] = []
        var baseOfDelta: [UInt32: ContentID] = [:]
        for p in stride(from: 1, through: finalIDs.count, by: 1) {
            let page = UInt32(p)
            guard p <= ref.baseCount else { delta.append((page, finalIDs[p - 1])); continue }
            let base = parentMap.baseOfDelta[page] ?? parentMap.ids[p - 1]
            if finalIDs[p - 1] != base {
                delta.append((page, finalIDs[p - 1]))
                baseOfDelta[page] = base
            }
        }
        return delta.count == ref.deltaCount ? PageMap.Loaded(ids: finalIDs, delta: delta, baseOfDelta: baseOfDelta) : nil
    }

    /// A snapshot that did not commit takes its packs and indexes with it (nothing refers to
    /// them; the run holds the repository's lock, so no other run uses them either).
    ///
    /// The first removal that fails ends it: the repository is not answering (the usual reason a
    /// snapshot did not commit), and each further removal would wait out its own retries (a create
    /// cut by a server gone away took ~50 s more to report it, 35 DELETEs). What is left, packs and
    /// indexes no record names (an index never outlives the packs it lists: indexes go first),
    /// prune removes (a later writer removes packs a dead writer left unindexed).
    ///
    /// A record sent whose answer never came (a server that stopped answering, a timeout) may
    /// land after all: then nothing is taken back, since a record whose index was removed after
    /// it lists a snapshot that cannot be restored (seen with a SeaweedFS stopped during the
    /// record's PUT: the PUT went through once it ran again, after the index's DELETE).
    func abandon() {
        guard !committed else { return }
        // A folder's write is a rename: it happened or not. A bucket's request may be in flight.
        if recordSent, !(repository.backend is LocalBackend) {
            SnapshotCreate.logger.warning("the record of snapshot \(id) was sent and its answer never came: it may be written after all, so its packs and index are left in \(repository.location) (whole if `snapshot list` shows it; otherwise `snapshot prune` removes them)")
            return
        }
        writer.settle()
        // The same for an index sent whose answer never came: landing after its packs were
        // removed, it listed packs that were gone, and every later snapshot reused their pages
        // (created "ok", none restorable: a trial's gateway held one index PUT 15 s). Its packs
        // stay; prune collects them with the index once no record names them.
        if writer.indexMayLand, !(repository.backend is LocalBackend) {
            SnapshotCreate.logger.warning("an index of snapshot \(id) was sent and its answer never came: it may be written after all, so the packs it lists are left in \(repository.location) (`snapshot prune` removes them once no snapshot uses them)")
            return
        }
        do {
            for key in writer.indexesWritten { try repository.backend.remove(key, point: "snapshot.abandon.index") }
            for pack in writer.packsWritten { try repository.backend.remove(PackBuilder.key(pack.id), point: "snapshot.abandon.pack") }
        } catch {
            SnapshotCreate.logger.debug("abandoning the snapshot's objects stopped at the first failure", metadata: ["error": "\(error)"])
        }
    }
}

extension PagedSnapshotWork {
    func copy(timeout: TimeInterval, checkFreeSpace: Bool, progress: StepHandler?) throws {
        try copy(timeout: timeout, progress: progress)
    }

    func result() throws -> SnapshotCreate.Result {
        guard let record else { throw StoreOpsError(.failure, "the snapshot did not finish") }
        var result = SnapshotCreate.Result(id: id, archive: repository.backend.describe(PagedSnapshotRecord.key(id)), record: record.manifest,
                                           addedBytes: record.added.storedBytes, parent: record.parent,
                                           packsWritten: writer.packsWritten.map { PackBuilder.key($0.id) }, removedStray: [], unchanged: reusesParent)
        if let was = parent?.manifest.coreData?.metadata.uuid, let now = record.manifest.coreData?.metadata.uuid, was != now {
            result.parentStoreUUID = was
        }
        return result
    }
}

/// A blob's id as the indexes list it, by its first 128 bits (a repository's whole id since the
/// 16-byte layout; of an older 32-byte id, 128 bits no two pages share by chance).
struct IndexedID: Comparable, Sendable {
    let high: UInt64, low: UInt64

    init(_ id: ContentID) { (high, low) = (id.words.0, id.words.1) }

    static func < (a: IndexedID, b: IndexedID) -> Bool { (a.high, a.low) < (b.high, b.low) }

    /// Whether `sorted` holds `id`.
    static func contains(_ sorted: [IndexedID], _ id: ContentID) -> Bool {
        let key = IndexedID(id)
        var low = 0, high = sorted.count
        while low < high {
            let mid = (low + high) / 2
            if sorted[mid] < key { low = mid + 1 } else { high = mid }
        }
        return low < sorted.count && sorted[low] == key
    }
}
