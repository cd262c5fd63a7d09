import Foundation

/// Writes sealed frames into packs and packs into the repository, from any thread: a pack is
/// written (durably) when it reaches `PackBuilder.targetBytes`, and an index file listing the
/// packs written so far goes out every `indexEvery` packs and at `finish`. So a pack is listed
/// by an index within minutes of being written, and nothing refers to a pack before both are
/// durable.
final class PackWriter: @unchecked Sendable {
    let repository: PagedRepository
    let indexEvery: Int
    private let lock = NSLock()
    private var builder = PackBuilder()
    private var pending = IndexFile()
    private(set) var packsWritten: [(id: ContentID, contents: PackContents, bytes: UInt64)] = []
    private(set) var indexesWritten: [String] = []
    private(set) var storedBytes: UInt64 = 0
    private(set) var blobs = 0
    private(set) var rawBytes: UInt64 = 0

    init(repository: PagedRepository, indexEvery: Int = 64) {
        self.repository = repository
        self.indexEvery = indexEvery
    }

    func add(_ frame: SealedFrame) throws {
        try lock.withLock {
            builder.add(frame)
            blobs += frame.blobs.count
            rawBytes += UInt64(frame.rawLength)
            if builder.isFull { try flushPack() }
        }
    }

    /// Every blob this writer took: in packs written, and in the pack being filled.
    func blobsTaken() -> [ContentID] {
        lock.withLock {
            packsWritten.flatMap { $0.contents.frames.flatMap { $0.blobs.map(\.id) } } + builder.contents.frames.flatMap { $0.blobs.map(\.id) }
        }
    }

    /// Writes what is left: the last pack and an index of every pack not yet indexed.
    func finish() throws {
        try lock.withLock {
            if !builder.isEmpty { try flushPack() }
            if !pending.isEmpty { try flushIndex() }
        }
    }

    private func flushPack() throws {
        let (id, data, contents) = try builder.finish(sealer: repository.sealer)
        try repository.backend.write(PackBuilder.key(id), data, point: "pack.write")
        packsWritten.append((id, contents, UInt64(data.count)))
        storedBytes += UInt64(data.count)
        pending.packs.append((id, contents))
        if pending.packs.count >= indexEvery { try flushIndex() }
    }

    private func flushIndex() throws {
        let (key, data) = try pending.encode(sealer: repository.sealer)
        try repository.backend.write(key, data, point: "index.write")
        indexesWritten.append(key)
        storedBytes += UInt64(data.count)
        pending = IndexFile()
    }
}
