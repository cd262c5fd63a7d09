import Foundation

/// Prune's second half in a format-2 repository: after snapshot records are removed, the blobs
/// no remaining snapshot refers to are collected. The caller holds the repository exclusively.
///
/// Order, so that a crash at any step leaves every listed snapshot restorable:
/// 1. packs that are mostly garbage have their live blobs copied into new packs, indexed (the
///    old packs stay, so blobs are briefly in two places);
/// 2. one new index of every pack that stays is written;
/// 3. the old index files are removed;
/// 4. only then are dead, repacked and unindexed packs removed: no index refers to them any more.
public enum PagedGarbage {
    public struct Report: Sendable, Codable, Equatable {
        public var livePacks = 0
        public var deletedPacks = 0
        public var repackedPacks = 0
        /// Packs no index lists: left by writers that died before indexing them.
        public var unindexedPacks = 0
        public var removedIndexes = 0
        public var freedBytes: UInt64 = 0
        /// Bytes the repository holds after (packs and indexes).
        public var keptBytes: UInt64 = 0
        /// Why nothing was collected, when nothing could be.
        public var skipped: String?
    }

    /// A pack is repacked when less than this share of its bytes is alive.
    static let repackBelow = 0.5

    /// - Parameter excluding: snapshots to count as gone (a dry run's expired ones).
    public static func collect(_ repository: PagedRepository, dryRun: Bool, excluding: Set<String> = [],
                               progress: StepHandler? = nil) throws -> Report {
        var report = Report()
        var (records, damaged) = try repository.catalog()
        records.removeAll { excluding.contains($0.id) }
        guard damaged.isEmpty else {
            report.skipped = "\(Format.plural(damaged.count, "snapshot record is", "snapshot records are")) damaged (\(damaged.map(\.id).joined(separator: ", "))): what they refer to is unknown, so no data was removed"
            return report
        }
        // Everything the index says, pack by pack (a pack listed twice is one pack).
        var packs: [ContentID: PackContents] = [:]
        var indexKeys: [String] = []
        let indexDamage = try RepositoryIndex.scan(repository) { key, pack, contents in
            if indexKeys.last != key { indexKeys.append(key) }
            if packs[pack] == nil { packs[pack] = contents }
        }
        guard indexDamage.isEmpty else {
            report.skipped = "an index is damaged (\(indexDamage.map { "\($0.key): \($0.problem)" }.joined(separator: "; "))): run `storectl repo repair` first; no data was removed"
            return report
        }
        // A snapshot needing what no index lists (an index lost or damaged on disk) means the
        // unindexed packs may hold it: nothing is removed until `repo repair` re-indexes them.
        let live: Set<ContentID>
        do { live = try liveBlobs(records, packs: packs, repository: repository) } catch let error as StoreOpsError where error.status == .badData {
            report.skipped = "\(error.message): run `storectl repo repair` first; no data was removed"
            return report
        }
        let indexedBlobs = Set(packs.values.flatMap { $0.frames.flatMap { $0.blobs.map(\.id) } })
        if let missing = live.first(where: { !indexedBlobs.contains($0) }) {
            report.skipped = "a snapshot needs blob \(missing.hex.prefix(16))…, which no index lists: run `storectl repo repair` first; no data was removed"
            return report
        }
        let stored = Dictionary(uniqueKeysWithValues: try repository.backend.list("data/").map { ($0.key, $0.size) })

        var keep: [(ContentID, PackContents)] = []
        var repack: [(ContentID, PackContents)] = []
        var remove: [ContentID] = []
        for (id, contents) in packs.sorted(by: { $0.key < $1.key }) {
            let size = stored[PackBuilder.key(id)] ?? 0
            let liveRaw = contents.frames.reduce(UInt64(0)) { sum, frame in sum + frame.blobs.filter { live.contains($0.id) }.reduce(0) { $0 + UInt64($1.length) } }
            if liveRaw == 0 {
                remove.append(id)
                report.freedBytes += size
            } else if Double(liveRaw) < repackBelow * Double(max(1, contents.rawBytes)) {
                repack.append((id, contents))
            } else {
                keep.append((id, contents))
                report.keptBytes += size
            }
        }
        let indexedKeys = Set(packs.keys.map(PackBuilder.key))
        let unindexedIDs = stored.keys.filter { !indexedKeys.contains($0) }.sorted()
        report.unindexedPacks = unindexedIDs.count
        report.freedBytes += unindexedIDs.reduce(0) { $0 + (stored[$1] ?? 0) }
        report.deletedPacks = remove.count
        report.repackedPacks = repack.count
        report.livePacks = keep.count
        if dryRun {
            // Repacking frees what the packs hold beyond their live blobs (estimated on raw sizes).
            for (id, contents) in repack {
                let size = stored[PackBuilder.key(id)] ?? 0
                let liveRaw = contents.frames.reduce(UInt64(0)) { $0 + $1.blobs.filter { live.contains($0.id) }.reduce(0) { $0 + UInt64($1.length) } }
                report.freedBytes += UInt64(Double(size) * (1 - Double(liveRaw) / Double(max(1, contents.rawBytes))))
            }
            return report
        }

        // 1. Live blobs of mostly-dead packs into new packs.
        let writer = PackWriter(repository: repository, indexEvery: .max)
        let zstd = try ZstdFrames(level: 3)
        var copied = Set<ContentID>()
        for (id, contents) in repack {
            try ProcessSignals.checkpoint("repacking \(repository.location)")
            var pending: [(BlobType, ContentID, Data)] = []
            var pendingBytes = 0
            func flush() throws {
                guard !pending.isEmpty else { return }
                try writer.add(try SealedFrame.make(blobs: pending, zstd: zstd, sealer: repository.sealer))
                pending = []
                pendingBytes = 0
            }
            for frame in contents.frames where frame.blobs.contains(where: { live.contains($0.id) && !copied.contains($0.id) }) {
                let plain = try BlobLocator.readFrame(frame, pack: id, repository: repository, zstd: zstd)
                for blob in frame.blobs where live.contains(blob.id) && copied.insert(blob.id).inserted {
                    let bytes = try BlobLocator.extract(blob, from: plain, sealer: repository.sealer,
                                                        what: "pack \(repository.backend.describe(PackBuilder.key(id)))")
                    pending.append((blob.type, blob.id, bytes))
                    pendingBytes += bytes.count
                    if pendingBytes >= PageStream.frameBytes { try flush() }
                }
            }
            try flush()
            report.freedBytes += stored[PackBuilder.key(id)] ?? 0
        }
        try writer.finish()
        report.keptBytes += writer.storedBytes
        // 2. One index of every pack that stays.
        var index = IndexFile()
        index.packs = keep
        var newIndexes = writer.indexesWritten
        if !index.isEmpty {
            let (key, data) = try index.encode(sealer: repository.sealer)
            try repository.backend.write(key, data, point: "prune.index.write")
            newIndexes.append(key)
            report.keptBytes += UInt64(data.count)
        }
        // 3. The old indexes.
        for key in indexKeys where !newIndexes.contains(key) {
            try repository.backend.remove(key, point: "prune.index.remove")
            report.removedIndexes += 1
        }
        // 4. Packs nothing lists any more.
        for id in remove + repack.map(\.0) { try repository.backend.remove(PackBuilder.key(id), point: "prune.pack.remove") }
        for key in unindexedIDs { try repository.backend.remove(key, point: "prune.pack.remove-unindexed") }
        return report
    }

    /// Removes the packs no index lists, left by writers that died before indexing them, when no
    /// live lock but `ownLock` exists. Safe beside new writers: the packs are listed first and the
    /// locks last, and a writer takes its lock before it writes any pack, so a pack listed here
    /// whose writer is alive shows up as that writer's lock.
    static func removeUnindexed(_ repository: PagedRepository, ownLock: String) throws -> [String] {
        let packs = try repository.backend.list("data/").map(\.key)
        guard !packs.isEmpty else { return [] }
        let (records, damagedRecords) = try repository.catalog()
        guard damagedRecords.isEmpty else { return [] }
        var indexed = Set<String>()
        var all: [ContentID: PackContents] = [:]
        let damaged = try RepositoryIndex.scan(repository) { _, pack, contents in
            indexed.insert(PackBuilder.key(pack))
            all[pack] = all[pack] ?? contents
        }
        guard damaged.isEmpty else { return [] }
        let others = try RepositoryLock.list(repository.backend).filter { $0.key != ownLock && !$0.stale }
        guard others.isEmpty else { return [] }
        let unindexed = packs.filter { !indexed.contains($0) }
        guard !unindexed.isEmpty else { return [] }
        // An unindexed pack may still hold what a snapshot needs (its index lost): only a pack
        // holding nothing a snapshot uses that is not also indexed elsewhere goes; if a map
        // cannot be read, none does.
        let live = try liveBlobs(records, packs: all, repository: repository)
        let indexedBlobs = Set(all.values.flatMap { $0.frames.flatMap { $0.blobs.map(\.id) } })
        var removed: [String] = []
        let zstd = try ZstdFrames(level: 3)
        for key in unindexed {
            guard let id = ContentID(hex: FileSystem.name(of: key)),
                  let header = try? PackBuilder.readContents(repository, id: id, zstd: zstd),
                  !header.frames.contains(where: { $0.blobs.contains { live.contains($0.id) && !indexedBlobs.contains($0.id) } }) else { continue }
            try repository.backend.remove(key, point: "cleanup.pack.remove-unindexed")
            removed.append(repository.backend.describe(key))
        }
        return removed
    }

    /// Every blob a snapshot refers to: its map blobs, file chunks and the pages its map lists.
    static func liveBlobs(_ records: [PagedSnapshotRecord], packs: [ContentID: PackContents], repository: PagedRepository) throws -> Set<ContentID> {
        var live = Set<ContentID>()
        var locations: [ContentID: BlobLocation] = [:]
        let wanted = Set(records.flatMap(\.pages.blobs))
        for (pack, contents) in packs {
            for frame in contents.frames { for blob in frame.blobs where wanted.contains(blob.id) && locations[blob.id] == nil {
                locations[blob.id] = BlobLocation(pack: pack, frame: frame, blob: blob)
            } }
        }
        for record in records {
            for (id, _) in record.otherBlobs { live.insert(id) }
            live.formUnion(try BlobLocator.pageMap(of: record, in: repository, locations: locations).ids)
        }
        return live
    }
}
