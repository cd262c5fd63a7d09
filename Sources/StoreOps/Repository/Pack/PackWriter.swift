import Foundation

/// Writes sealed frames into packs and packs into the repository, from any thread: a pack is
/// written (durably) when it reaches `PackBuilder.targetBytes`, and an index file listing the
/// packs written so far goes out every `indexEvery` packs and at `finish`. So a pack is listed
/// by an index within minutes of being written, and nothing refers to a pack before both are
/// durable.
///
/// Packs and indexes are written (and fsynced) in the background while the workers go on hashing
/// and compressing, `parallelTransfers` at once (4 by default, into a folder or a bucket), so at
/// most that many finished packs (4 MiB each) wait. An index is written only after every pack
/// before it is durable (a barrier), and nothing else meanwhile.
final class PackWriter: @unchecked Sendable {
    let repository: PagedRepository
    let indexEvery: Int
    private let lock = NSLock()
    private var builder = PackBuilder()
    private var pending = IndexFile()
    /// The packs written (what an abandoned snapshot removes).
    private(set) var packsWritten: [(id: ContentID, bytes: UInt64)] = []
    /// The first 8 bytes of every blob taken (8 bytes a blob, not the blob's whole entry).
    private var taken: [UInt64] = []
    private(set) var indexesWritten: [String] = []
    private(set) var storedBytes: UInt64 = 0
    private(set) var blobs = 0
    private(set) var rawBytes: UInt64 = 0
    private let io = DispatchQueue(label: "storectl.pack-writer", attributes: .concurrent)
    private let ioSlots: DispatchSemaphore
    private let ioFailure = NSLock()
    private var ioError: (any Error)?
    /// An index's write was staged and its commit has not answered (guarded by `ioFailure`).
    private var indexSent = false

    /// An index every 16 packs (~64 MiB): what waits to be indexed stays small in memory.
    init(repository: PagedRepository, indexEvery: Int = 16) {
        self.repository = repository
        self.indexEvery = indexEvery
        ioSlots = DispatchSemaphore(value: max(1, repository.backend.parallelTransfers))
    }

    func add(_ frame: SealedFrame) throws {
        if let error = ioFailure.withLock({ ioError }) { throw error }
        try lock.withLock {
            builder.add(frame)
            for blob in frame.blobs { taken.append(blob.id.prefix64) }
            blobs += frame.blobs.count
            rawBytes += UInt64(frame.rawLength)
            if builder.isFull { try flushPack() }
        }
    }

    /// The 8-byte prefixes of every blob this writer took (written, or in the pack being filled), sorted.
    func blobsTaken() -> [UInt64] {
        lock.withLock {
            taken.sort()   // in place: at 8 bytes a blob, a sorted copy would be a second map's worth
            return taken
        }
    }

    /// Reserves room for `blobs` entries of `blobsTaken` (untouched room costs no memory).
    func expect(blobs: Int) {
        lock.withLock { taken.reserveCapacity(taken.count + blobs) }
    }

    /// Writes what is left: the last pack and an index of every pack not yet indexed.
    func finish() throws {
        try lock.withLock {
            if !builder.isEmpty { try flushPack() }
            if !pending.isEmpty { try flushIndex() }
        }
        io.sync(flags: .barrier) {}   // every pack and index written
        if let error = ioFailure.withLock({ ioError }) { throw error }
    }

    private func flushPack() throws {
        let (id, data, contents) = try builder.finish(sealer: repository.sealer)
        packsWritten.append((id, UInt64(data.count)))
        storedBytes += UInt64(data.count)
        pending.packs.append((id, contents))
        submit(PackBuilder.key(id), data, point: "pack.write", barrier: false)
        if pending.packs.count >= indexEvery { try flushIndex() }
    }

    private func flushIndex() throws {
        let (key, data) = try pending.encode(sealer: repository.sealer)
        indexesWritten.append(key)
        storedBytes += UInt64(data.count)
        pending = IndexFile()
        submit(key, data, point: "index.write", barrier: true)
    }

    /// Waits until nothing is being written (before an abandoned snapshot removes what it wrote).
    func settle() { io.sync(flags: .barrier) {} }

    /// An index's write was begun and did not answer that it was done: in a bucket it may land
    /// later (a request held by a gateway), listing this writer's packs.
    var indexMayLand: Bool { ioFailure.withLock { indexSent } }

    /// Writes the object in the background; a `barrier` write (an index) waits for everything
    /// submitted before it. Nothing more is written once a write failed. The bytes are let go
    /// once the backend has staged them (a folder: in a temp file), before the slow, durable half
    /// (fsyncs, or the upload), so waiting writes cost no memory.
    private func submit(_ key: String, _ data: Data, point: String, barrier: Bool) {
        final class Bytes: @unchecked Sendable {
            var data: Data?
            init(_ data: Data) { self.data = data }
            func take() -> Data { defer { data = nil }; return data ?? Data() }
        }
        let bytes = Bytes(data)
        ioSlots.wait()
        io.async(flags: barrier ? .barrier : []) {
            IOPace.politeThread()
            defer { IOPace.ordinaryThread(); self.ioSlots.signal() }
            guard self.ioFailure.withLock({ self.ioError == nil }) else { return }
            do {
                let staged = try self.repository.backend.stage(key, bytes.take(), point: point)
                if barrier { self.ioFailure.withLock { self.indexSent = true } }
                try staged.commit()
                // Tests: the index stored, its answer lost (`STORECTL_TEST_LOST_ANSWER=index.write`).
                if barrier, FaultInjection.answerLost("index.write") {
                    throw StoreOpsError(.ioError, "the answer to writing \(key) was lost (STORECTL_TEST_LOST_ANSWER)")
                }
                if barrier { self.ioFailure.withLock { self.indexSent = false } }
            } catch {
                self.ioFailure.withLock { if self.ioError == nil { self.ioError = error } }
            }
        }
    }
}
