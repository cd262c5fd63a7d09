import Foundation

/// Takes the pages SQLite's backup API writes into the sink (`PageSink`), on the backup's
/// thread, and turns them into blobs on worker threads: each page's content id (HMAC-SHA-256),
/// then, for pages whose content the repository does not hold yet, zstd frames of about
/// `frameBytes` of *new* pages only (gathered across batches, so a snapshot whose changes are
/// scattered still compresses its new pages together) that `PackWriter` seals into packs.
///
/// The map starts as the parent snapshot's ids (when there is one): a page whose id equals the
/// parent's at the same number is unchanged and costs nothing; a page whose content is anywhere
/// else in the parent or already in this run (`PageTable`), or in any blob an index of the
/// repository lists (`indexed`: another store's snapshots), is not stored again.
///
/// B-tree interior pages (`InteriorPages.looksInterior`) are gathered apart from the other new
/// pages, into frames of their own, and every page's kind is recorded (`interiorPages`): a diff
/// then reads the few frames holding them instead of every frame (they are spread over the whole
/// file), and of the other frames only the chunks holding pages that differ (`chunkBytes`).
///
/// Memory: 32 bytes a page for the map, 8–16 for the table, 8 for each new page the writer took,
/// at most `maxInFlight` batches of `batchBytes`, and the new pages being gathered into the next
/// frame.
final class PageStream: @unchecked Sendable {
    let sealer: Sealer
    let writer: PackWriter
    let level: Int
    let hasParent: Bool
    /// Pages handed to a worker at a time (hashing).
    static let batchBytes = 128 << 10
    /// New pages compressed together: measured on the bench store, zstd level 3 in independent
    /// chunks of 128 KiB gives 3.07x, 512 KiB 3.18x, 2 MiB 3.23x (the whole file 3.25x). A first
    /// snapshot of it in layout 2 stores 1.046x format 1's bytes with 512 KiB frames, 1.038x with
    /// 1 MiB at the same peak memory, 1.031x with 2 MiB at 4 MiB more peak memory.
    static let frameBytes = 1 << 20
    /// A frame's pages are compressed in independent zstd frames of this many bytes (whole
    /// pages), so that a reader needing a few of its pages decompresses only theirs
    /// (`ZstdFrames.withDecompressed(_:rawLength:only:what:_:)`). Measured on the bench store
    /// (its first 128 MiB, zstd level 3): 1 MiB in one piece 3.12x, in chunks of 256 KiB 3.10x,
    /// 128 KiB 2.99x, 64 KiB 2.94x, 32 KiB 2.89x. 64 KiB chunks made a first snapshot 1.10x a
    /// compressed copy of the store (bench/repository.sh; its target is 1.05x, met at 1.04x with
    /// 1 MiB frames); 256 KiB cost under 1%. 5,000 leaves scattered over a 1 GiB store lie in
    /// three quarters of its 256 KiB chunks (a diff decompresses those), in every 1 MiB frame.
    static let chunkBytes = 256 << 10
    /// `chunkBytes` in whole pages of `pageSize`.
    static func chunkBytes(pageSize: Int) -> Int { max(pageSize, chunkBytes / max(1, pageSize) * max(1, pageSize)) }
    static let maxInFlight = 4

    private let lock = NSLock()
    private var ids: [ContentID]
    private var changedPages = Bitset(count: 0)
    /// Unchanged pages whose blob no index listed, stored again by this run (under `lock`).
    private var storedAgain = Set<ContentID>()
    private var receivedPages = Bitset(count: 0)
    private var table: PageTable
    private var failure: (any Error)?
    private var compressors: [ZstdFrames] = []
    private(set) var storedPages = 0
    private(set) var pageSize = 0
    /// Pages that look like b-tree interior pages, of those received or kept from the parent.
    private var interiorBits = Bitset(count: 0)
    /// The parent's (for pages kept from it, `keepParent`); nil: unknown, and so is this map's.
    private let parentInterior: Bitset?
    /// The blobs the repository's indexes list (sorted): a page found there is not stored again.
    private let indexed: [IndexedID]
    private var interiorKnown = true

    // The backup thread's batch.
    private var batch = Data()
    private var batchPages: [UInt32] = []
    // New pages gathered across batches for the next frame (under `lock`): their bytes end to
    // end, copied once from the batch, and their ids.
    private var gathered = Data()
    private var gatheredIDs: [ContentID] = []
    private var gatheredInterior = Data()
    private var gatheredInteriorIDs: [ContentID] = []
    private let queue = DispatchQueue(label: "storectl.page-stream", attributes: .concurrent)
    private let group = DispatchGroup()
    private let slots = DispatchSemaphore(value: PageStream.maxInFlight)

    /// - Parameters:
    ///   - parent: the parent snapshot's page ids (page p at p - 1), or empty.
    ///   - expectedPages: the store's page count, to size the map and table once.
    ///   - parentInterior: the parent's interior pages (`InteriorPages`), for pages kept from it.
    init(sealer: Sealer, writer: PackWriter, level: Int, parent: [ContentID], expectedPages: Int, indexed: [IndexedID] = [], parentInterior: Bitset? = nil) {
        self.indexed = indexed
        self.sealer = sealer
        self.parentInterior = parentInterior
        self.writer = writer
        self.level = level
        hasParent = !parent.isEmpty
        ids = parent
        let pages = max(parent.count, expectedPages) + 16
        if ids.count < pages { ids += [ContentID](repeating: .zero, count: pages - ids.count) }
        table = PageTable(pages: pages)
        writer.expect(blobs: pages)
        ids.withUnsafeBufferPointer { buffer in
            for (i, id) in parent.enumerated() where table.find(id, in: buffer) == nil {
                table.insert(id, page: UInt32(i + 1), ids: buffer)
            }
        }
    }

    var error: (any Error)? { lock.withLock { failure } }

    private func fail(_ error: any Error) {
        lock.withLock { if failure == nil { failure = error } }
    }

    /// Pages 1…`count` keep the parent's ids (a milestone: only the pages that changed are
    /// streamed).
    func keepParent(through count: Int) {
        guard count > 0 else { return }
        lock.withLock {
            for p in 1...count {
                receivedPages[p] = true
                if let parentInterior { interiorBits[p] = parentInterior[p] }
            }
            if parentInterior == nil { interiorKnown = false }
        }
    }

    // MARK: - The backup thread

    /// One page from the sink. Returns false to make the copy stop (a worker failed).
    func receive(page: UInt32, bytes: UnsafeRawBufferPointer) -> Bool {
        if error != nil { return false }
        if pageSize == 0 {
            pageSize = bytes.count
            batch.reserveCapacity(max(Self.batchBytes, pageSize))
        }
        batch.append(contentsOf: bytes)
        batchPages.append(page)
        if batch.count >= Self.batchBytes { dispatch() }
        return true
    }

    private func dispatch() {
        guard !batchPages.isEmpty else { return }
        let (data, pages) = (batch, batchPages)
        batch = Data()
        batch.reserveCapacity(max(Self.batchBytes, pageSize))
        batchPages = []
        slots.wait()
        group.enter()
        queue.async {
            IOPace.politeThread()
            defer {
                IOPace.ordinaryThread()
                self.slots.signal()
                self.group.leave()
            }
            do { try self.process(data, pages: pages) } catch { self.fail(error) }
        }
    }

    /// Sends the last batch and waits for every worker; then the map is final.
    func drain() throws {
        dispatch()
        group.wait()
        if let failure = error { throw failure }
        let (rest, interior) = lock.withLock { (takeGathered(), takeGathered(interior: true)) }
        try compress(interior.bytes, ids: interior.ids)
        try compress(rest.bytes, ids: rest.ids)
    }

    // MARK: - Workers

    private func process(_ data: Data, pages: [UInt32]) throws {
        let size = data.count / pages.count
        let pageIDs: [ContentID] = data.withUnsafeBytes { raw in
            (0..<pages.count).map { i in sealer.contentID(UnsafeRawBufferPointer(rebasing: raw[(i * size)..<((i + 1) * size)])) }
        }
        let interior: [Bool] = data.withUnsafeBytes { raw in
            pages.indices.map { i in InteriorPages.looksInterior(UnsafeRawBufferPointer(rebasing: raw[(i * size)..<((i + 1) * size)]), page: pages[i]) }
        }
        var store: [Int] = []
        var full: [(bytes: Data, ids: [ContentID])] = []
        lock.withLock {
            for (i, page) in pages.enumerated() {
                let p = Int(page)
                let id = pageIDs[i]
                if p > ids.count { ids += [ContentID](repeating: .zero, count: p - ids.count + 1024) }
                receivedPages[p] = true
                interiorBits[p] = interior[i]
                if hasParent, ids[p - 1] == id {   // unchanged since the parent
                    // Stored, unless no index lists its blob (a damaged frame `repo repair` left
                    // out, a pack gone): then it is stored again, once (it was taken as stored,
                    // and the snapshot failed its check at the end, every time).
                    if IndexedID.contains(indexed, id) || !storedAgain.insert(id).inserted { continue }
                    store.append(i)
                    continue
                }
                changedPages[p] = true
                // Look up before the page takes its new id: the page must not find itself.
                let found = ids.withUnsafeBufferPointer { table.find(id, in: $0) }
                ids[p - 1] = id
                if let found {
                    // Content another page has: one that changed in this run holds it (stored by
                    // this run, or found stored as here), or the parent's page does, stored if an
                    // index lists it, else stored again, once (content moved from a page whose
                    // frame `repo repair` left out: it was taken as stored, and every create
                    // failed its check at the end).
                    if changedPages[Int(found)] || IndexedID.contains(indexed, id) || !storedAgain.insert(id).inserted { continue }
                    store.append(i)
                    continue
                }
                // Stored already by another snapshot (another store's, a copy of this one at another
                // path, this store's before its parent): an index lists it, the map names it.
                if IndexedID.contains(indexed, id) { continue }
                ids.withUnsafeBufferPointer { table.insert(id, page: page, ids: $0) }
                store.append(i)
            }
            storedPages += store.count
            if store.contains(where: { !interior[$0] }), gathered.isEmpty { gathered.reserveCapacity(Self.frameBytes + Self.batchBytes) }
            data.withUnsafeBytes { raw in
                for i in store {
                    let bytes = UnsafeRawBufferPointer(rebasing: raw[(i * size)..<((i + 1) * size)])
                    if interior[i] {
                        gatheredInterior.append(contentsOf: bytes)
                        gatheredInteriorIDs.append(pageIDs[i])
                    } else {
                        gathered.append(contentsOf: bytes)
                        gatheredIDs.append(pageIDs[i])
                    }
                }
            }
            if gathered.count >= Self.frameBytes { full.append(takeGathered()) }
            if gatheredInterior.count >= Self.frameBytes { full.append(takeGathered(interior: true)) }
        }
        for frame in full { try compress(frame.bytes, ids: frame.ids) }
    }

    private func takeGathered(interior: Bool = false) -> (bytes: Data, ids: [ContentID]) {
        if interior {
            defer { gatheredInterior = Data(); gatheredInteriorIDs = [] }
            return (gatheredInterior, gatheredInteriorIDs)
        }
        defer { gathered = Data(); gatheredIDs = [] }
        return (gathered, gatheredIDs)
    }

    /// Compresses and seals new pages (`bytes`: the pages end to end) as one frame and hands it
    /// to the pack writer.
    private func compress(_ bytes: Data, ids: [ContentID]) throws {
        guard !ids.isEmpty else { return }
        let zstd = try takeCompressor()
        defer { lock.withLock { compressors.append(zstd) } }
        try writer.add(try SealedFrame.make(pages: bytes, ids: ids, zstd: zstd, sealer: sealer))
    }

    private func takeCompressor() throws -> ZstdFrames {
        if let reused = lock.withLock({ compressors.popLast() }) { return reused }
        return try ZstdFrames(level: level)
    }

    // MARK: - After the copy

    /// The final ids of pages 1…`pageCount`, after checking that every one of them arrived
    /// (once: the stream gives up its map).
    func finalIDs(pageCount: Int) throws -> [ContentID] {
        try lock.withLock {
            for p in 1...max(1, pageCount) where pageCount > 0 && !receivedPages[p] {
                throw StoreOpsError(.failure, "the streamed copy never received page \(p) of \(pageCount); nothing was recorded")
            }
            // Moved out, not copied (32 bytes a page); the table is no longer needed either.
            var final: [ContentID] = []
            swap(&final, &ids)
            table = PageTable(pages: 0)
            compressors = []
            if final.count > pageCount { final.removeLast(final.count - pageCount) }
            if final.count < pageCount { final += [ContentID](repeating: .zero, count: pageCount - final.count) }
            return final
        }
    }

    /// The pages of 1…`pageCount` that look like b-tree interior pages, or nil when that is not
    /// known for every one (pages kept from a parent that did not record its own).
    func interiorPages(pageCount: Int) -> InteriorPages? {
        lock.withLock { interiorKnown ? InteriorPages(interiorBits, pageCount: pageCount) : nil }
    }

    /// Pages whose content differs from the parent's.
    var changed: Bitset { lock.withLock { changedPages } }
}
