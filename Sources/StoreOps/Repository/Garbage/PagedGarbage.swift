import Foundation

/// Prune's second half in a format-2 repository: after snapshot records are removed, the blobs
/// no remaining snapshot refers to are collected. The caller holds the repository exclusively.
///
/// What to do is decided by `GarbagePlan.make` (no I/O); `execute` does it in this order, so that
/// a crash at any step leaves every listed snapshot restorable:
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
        /// The reason is damage `repo repair` puts right (an index damaged or lost): the prune
        /// ends 65 until it is run. A damaged record (or one a newer storectl wrote) is not: it
        /// is said, and the prune ends 0 (a repository shared with a newer storectl would fail
        /// every night otherwise).
        public var needsRepair = false
    }

    /// A pack is repacked when less than this share of its bytes is alive.
    static let repackBelow = 0.5

    /// - Parameter excluding: snapshots to count as gone (a dry run's expired ones).
    /// - Parameter kept: snapshots the caller saw and keeps: each must be in the collector's own
    ///   listing, or nothing is collected (74: the listings disagree).
    /// - Parameter emptied: the caller removed snapshots this run; only then is a repository
    ///   whose listing shows none while its indexes list packs collected (an empty listing by
    ///   mistake, a trial's, took every pack and index, exit 0).
    /// - Parameter gone: snapshots the caller removed before (a listing may still show them).
    public static func collect(_ repository: PagedRepository, dryRun: Bool, excluding: Set<String> = [], kept: Set<String> = [],
                               gone: Set<String> = [], emptied: Bool = false, progress: StepHandler? = nil) throws -> Report {
        switch try survey(repository, excluding: excluding, kept: kept, gone: dryRun ? [] : gone, emptied: emptied) {
        case .skipped(let why, let repairable):
            var report = Report()
            report.skipped = why
            report.needsRepair = repairable
            return report
        case .planned(let plan):
            var report = plan.report(dryRun: dryRun)
            if !dryRun { try execute(plan, in: repository, report: &report) }
            return report
        }
    }

    /// What `survey` found: a plan, or why no data may be removed and whether `repo repair`
    /// puts that right.
    enum Survey {
        case planned(GarbagePlan)
        case skipped(String, repairable: Bool)
    }

    /// Reads what the plan is made from (records, indexes, the live blobs, `data/`), refusing when
    /// any of it is damaged or a snapshot needs what no index lists.
    static func survey(_ repository: PagedRepository, excluding: Set<String>, kept: Set<String> = [], gone: Set<String> = [], emptied: Bool = false) throws -> Survey {
        var (records, damaged) = try repository.catalog(listedMustRead: true, gone: gone)
        let seen = Set(records.map(\.id) + damaged.map(\.id))
        if let missing = kept.sorted().first(where: { !seen.contains($0) }) {
            throw StoreOpsError(.ioError, "snapshot \(missing), which this prune keeps, is not in the repository's listing any more: its listings disagree (a lagging or inconsistent server), so no data was removed",
                                hint: "run the prune again later; `storectl snapshot list --repo \(repository.location)` shows what it lists")
        }
        records.removeAll { excluding.contains($0.id) }
        guard damaged.isEmpty else {
            // What to do, said where a nightly prune's log shows it (it only said that nothing was removed).
            let keys = damaged.filter { !$0.problem.contains(RepositoryRepair.newerNote) }.map { repository.backend.describe(PagedSnapshotRecord.key($0.id)) }
            guard !keys.isEmpty else {   // written by a newer storectl: that storectl's prune collects
                return .skipped("\(Format.plural(damaged.count, "snapshot record is", "snapshot records are")) of a newer storectl (\(damaged.map(\.id).joined(separator: ", "))): what they refer to is unknown here, so no data was removed (a newer storectl's prune collects)", repairable: false)
            }
            return .skipped("\(Format.plural(damaged.count, "snapshot record is", "snapshot records are")) damaged (\(damaged.map(\.id).joined(separator: ", "))): what they refer to is unknown, so no data was removed; "
                            + "put back a good copy of \(keys.joined(separator: ", ")) from a copy of the repository, or, if it is lost for good (its snapshot cannot be restored without it), "
                            + "move it out of the repository: the next prune collects again (with `--empty` if it was the only one)", repairable: false)
        }
        // Everything the index says, pack by pack (a pack listed twice is one pack).
        let (index, indexDamage) = try readIndex(repository)
        guard indexDamage.isEmpty else {
            return .skipped("an index is damaged (\(indexDamage.map(\.described).joined(separator: "; "))): run `storectl repo repair` first; no data was removed", repairable: true)
        }
        // No snapshot listed, every pack garbage: believed only when this run removed the last
        // ones (it saw them). Otherwise the listing may have come back empty by mistake.
        if records.isEmpty, damaged.isEmpty, !index.packs.isEmpty, !emptied {
            return .skipped("no snapshot is listed in \(repository.location), yet its indexes list \(Format.plural(index.packs.count, "pack", "packs")): "
                            + "a listing that came back empty by mistake would have every pack taken, so no data was removed "
                            + "(if the repository really holds no snapshot, all of it is garbage: `storectl snapshot prune --repo \(repository.location) --empty` collects it)", repairable: false)
        }
        // A snapshot needing what no index lists (an index lost or damaged on disk) means the
        // unindexed packs may hold it: nothing is removed until `repo repair` re-indexes them.
        let live: Set<ContentID>
        do { live = try liveBlobs(records, packs: index.packs, repository: repository) } catch let error as StoreOpsError where error.status == .badData {
            return .skipped("\(error.message): run `storectl repo repair` first; no data was removed", repairable: true)
        }
        if let missing = index.firstUnlisted(live) {
            return .skipped("a snapshot needs blob \(missing.hex.prefix(16))…, which no index lists: run `storectl repo repair` first; no data was removed", repairable: true)
        }
        let stored = Dictionary(uniqueKeysWithValues: try repository.backend.list("data/").map { ($0.key, $0.size) })
        return .planned(GarbagePlan.make(index: index, live: live, stored: stored))
    }

    /// Every readable index's packs (the first entry of a pack listed twice) and the index files
    /// listing them, in listing order; and the indexes that could not be read.
    static func readIndex(_ repository: PagedRepository) throws -> (GarbagePlan.Index, [RepositoryIndex.Damaged]) {
        var index = GarbagePlan.Index()
        let damaged = try RepositoryIndex.scan(repository) { key, pack, contents in
            if index.files.last != key { index.files.append(key) }
            if index.packs[pack] == nil { index.packs[pack] = contents }
        }
        return (index, damaged)
    }

    /// Carries `plan` out, steps 1 to 4 in order (see the type's comment); adds to `report` what
    /// only writing tells (the new packs' and index's bytes, the indexes removed).
    static func execute(_ plan: GarbagePlan, in repository: PagedRepository, report: inout Report) throws {
        // 1. Live blobs of mostly-dead packs into new packs.
        let repacked = try repack(plan.repacked, in: repository)
        report.keptBytes += repacked.storedBytes
        // Freed is net, as a dry run estimates it: the repacked packs go whole, and their live
        // blobs come back in the new packs (a trial's dry run said 842 KiB, the run 891).
        report.freedBytes = report.freedBytes >= repacked.storedBytes ? report.freedBytes - repacked.storedBytes : 0
        // 2. One index of every pack that stays.
        var index = IndexFile()
        index.packs = plan.kept.map { (id: $0.id, contents: $0.contents) }
        var newIndexes = repacked.indexes
        if !index.isEmpty {
            let (key, data) = try index.encode(sealer: repository.sealer)
            try repository.backend.write(key, data, point: "prune.index.write")
            newIndexes.append(key)
            report.keptBytes += UInt64(data.count)
        }
        // 3. The old indexes.
        for key in plan.oldIndexes where !newIndexes.contains(key) {
            try repository.backend.remove(key, point: "prune.index.remove")
            report.removedIndexes += 1
        }
        // 4. Packs nothing lists any more.
        for id in plan.packsToRemove { try repository.backend.remove(PackBuilder.key(id), point: "prune.pack.remove") }
        for stray in plan.unindexed { try repository.backend.remove(stray.key, point: "prune.pack.remove-unindexed") }
    }

    /// Step 1: each pack's carried blobs, read frame by frame and written into new packs, which
    /// one index lists (written last, by `finish`). Returns the indexes written and the bytes of
    /// the new packs and index.
    static func repack(_ packs: [GarbagePlan.Pack], in repository: PagedRepository) throws -> (indexes: [String], storedBytes: UInt64) {
        let writer = PackWriter(repository: repository, indexEvery: .max)
        let zstd = try ZstdFrames(level: 3)
        for pack in packs {
            try ProcessSignals.checkpoint("repacking \(repository.location)")
            try copy(pack, into: writer, repository: repository, zstd: zstd)
        }
        try writer.finish()
        return (writer.indexesWritten, writer.storedBytes)
    }

    /// One repacked pack's carried blobs into `writer`, in frames of about `PageStream.frameBytes`
    /// compressed in chunks, b-tree interior pages in frames of their own (as `PageStream` packs
    /// them: a diff reads those frames and only the chunks it needs of the others).
    private static func copy(_ pack: GarbagePlan.Pack, into writer: PackWriter, repository: PagedRepository, zstd: ZstdFrames) throws {
        var pending: [[(BlobType, ContentID, Data)]] = [[], []]   // other blobs, interior pages
        var pendingBytes = [0, 0]
        func flush(_ k: Int) throws {
            guard !pending[k].isEmpty else { return }
            try writer.add(try SealedFrame.make(blobs: pending[k], zstd: zstd, sealer: repository.sealer, chunkBytes: PageStream.chunkBytes))
            pending[k] = []
            pendingBytes[k] = 0
        }
        for carry in pack.carry {
            let plain = try BlobLocator.readFrame(carry.frame, pack: pack.id, repository: repository, zstd: zstd)
            for blob in carry.blobs {
                let bytes = try BlobLocator.extract(blob, from: plain, sealer: repository.sealer,
                                                    what: "pack \(repository.backend.describe(PackBuilder.key(pack.id)))")
                // Page 1 cannot be told from its content (its header comes first): with the rest.
                let k = blob.type == .page && bytes.withUnsafeBytes({ InteriorPages.looksInterior($0, page: 2) }) ? 1 : 0
                pending[k].append((blob.type, blob.id, bytes))
                pendingBytes[k] += bytes.count
                if pendingBytes[k] >= PageStream.frameBytes { try flush(k) }
            }
        }
        try flush(1)
        try flush(0)
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
