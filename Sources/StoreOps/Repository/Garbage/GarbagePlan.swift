import Foundation

/// What a garbage collection of a format-2 repository does, decided with no I/O from what the
/// indexes list, which blobs the remaining snapshots use and what `data/` holds.
/// `PagedGarbage.collect` reads those, asks `make`, and carries the plan out in its crash-safe
/// order (`PagedGarbage.execute`).
///
/// Every pack an index lists is kept (most of it is alive), repacked (less than `repackBelow` of
/// its raw bytes is alive: its live blobs are carried into new packs, then it goes) or removed
/// (nothing in it is alive); every pack in `data/` that no index lists is removed. A live blob
/// that several packs hold is alive in one of them only (its home).
struct GarbagePlan: Sendable, Equatable {
    /// What the readable indexes list: every pack once (the first entry read wins), and the
    /// index files that list at least one pack, in listing order.
    struct Index: Sendable, Equatable {
        var packs: [ContentID: PackContents] = [:]
        var files: [String] = []

        /// A live blob no index lists, if any: then an unindexed pack may hold it, and nothing
        /// may be removed until `repo repair` indexes it again.
        func firstUnlisted(_ live: Set<ContentID>) -> ContentID? {
            let indexed = Set(packs.values.flatMap { $0.frames.flatMap { $0.blobs.map(\.id) } })
            return live.first { !indexed.contains($0) }
        }
    }

    /// Blobs to copy out of one frame of a repacked pack (the frame is read once).
    struct Carry: Sendable, Equatable {
        var frame: FrameEntry
        /// In frame order; over the whole plan each live blob is carried once.
        var blobs: [BlobEntry]
    }

    enum Action: Sendable, Equatable {
        case keep
        /// The frames to read and the blobs to copy from each (only frames with something to carry).
        case repack(carry: [Carry])
        case remove
    }

    struct Pack: Sendable, Equatable {
        var id: ContentID
        var contents: PackContents
        /// Its size in `data/` (0 when the listing lacks it).
        var storedBytes: UInt64
        /// Raw bytes of its live blobs.
        var liveBytes: UInt64
        var action: Action

        var carry: [Carry] {
            if case .repack(let carry) = action { return carry }
            return []
        }

        /// What repacking frees, estimated on raw sizes (a dry run's guess).
        var estimatedFreedBytes: UInt64 {
            // The share no blob still uses, within 0...1 whatever a damaged index says.
            let unused = min(1, max(0, 1 - Double(liveBytes) / Double(max(1, contents.rawBytes))))
            let estimate = Double(storedBytes) * unused
            return estimate >= 1.8e19 ? storedBytes : min(storedBytes, UInt64(estimate))
        }
    }

    /// A pack in `data/` that no index lists: left by a writer that died before indexing it.
    struct Stray: Sendable, Equatable {
        var key: String
        var storedBytes: UInt64
    }

    /// Every indexed pack, by id.
    var packs: [Pack] = []
    /// By key.
    var unindexed: [Stray] = []
    /// The index files read, in listing order: removed once the new index is written (unless
    /// one of them is the new index).
    var oldIndexes: [String] = []

    var kept: [Pack] { packs.filter { $0.action == .keep } }
    var repacked: [Pack] { packs.filter { if case .repack = $0.action { return true } else { return false } } }
    var removed: [Pack] { packs.filter { $0.action == .remove } }

    /// The indexed packs to remove once no index lists them: dead ones, then repacked ones
    /// (each group by id).
    var packsToRemove: [ContentID] { removed.map(\.id) + repacked.map(\.id) }

    /// The plan. - Precondition: every blob of `live` is indexed (`Index.firstUnlisted` is nil):
    /// `collect` refuses before asking otherwise, since an unindexed pack may hold it.
    /// - Parameter stored: every object under `data/` and its size.
    static func make(index: Index, live: Set<ContentID>, stored: [String: UInt64],
                     repackBelow: Double = PagedGarbage.repackBelow) -> GarbagePlan {
        var plan = GarbagePlan(oldIndexes: index.files)
        // Each live blob counts in one pack only, its home: a blob two packs hold (a prune
        // interrupted after repacking, its old packs still indexed; two writers storing the same
        // page at once) kept every pack holding it alive, and each later prune repacked the old
        // one again, so the copies were never reclaimed (+37% after one interrupted prune, a
        // trial). The home is the pack most alive counting every live blob it holds (then by
        // id): an interrupted prune's new pack, all alive, takes its blobs from the old ones.
        // A pack that `data/` does not list (lost) is a home only for what no listed pack holds
        // (a review: a listed copy would otherwise go with a pack that is not there).
        let sorted = index.packs.sorted(by: { $0.key < $1.key })
        let present = sorted.map { stored[PackBuilder.key($0.key)] != nil }
        func liveBytes(_ contents: PackContents, counting: (BlobEntry) -> Bool) -> UInt64 {
            contents.frames.reduce(UInt64(0)) { sum, frame in sum + frame.blobs.filter(counting).reduce(0) { $0 + UInt64($1.length) } }
        }
        let shares = sorted.map { Double(liveBytes($0.value) { live.contains($0.id) }) / Double(max(1, $0.value.rawBytes)) }
        let order = sorted.indices.sorted { a, b in
            present[a] != present[b] ? present[a] : shares[a] != shares[b] ? shares[a] > shares[b] : a < b
        }
        // Each live blob's home, as the index of its pack in `sorted` (4 bytes, not a 32-byte id:
        // a repository of millions of blobs).
        var home: [ContentID: Int32] = [:]
        for k in order {
            for frame in sorted[k].value.frames {
                for blob in frame.blobs where live.contains(blob.id) && home[blob.id] == nil { home[blob.id] = Int32(k) }
            }
        }
        /// Enough of a pack is alive to keep it as it is.
        func aliveEnough(_ live: UInt64, of contents: PackContents) -> Bool {
            live > 0 && Double(live) >= repackBelow * Double(max(1, contents.rawBytes))
        }
        func kept(_ k: Int) -> Bool { aliveEnough(liveBytes(sorted[k].value) { home[$0.id] == Int32(k) }, of: sorted[k].value) }
        // A blob homed in a pack to be repacked that a kept pack also holds stays there rather
        // than being copied again (kept packs only gain by it, so stay kept).
        let keeps = sorted.indices.map(kept)
        for k in sorted.indices where keeps[k] && present[k] {
            for frame in sorted[k].value.frames {
                for blob in frame.blobs {
                    guard let at = home[blob.id], Int(at) != k, !keeps[Int(at)] else { continue }
                    home[blob.id] = Int32(k)
                }
            }
        }
        var carried = Set<ContentID>()
        for (k, (id, contents)) in sorted.enumerated() {
            let homed = { (blob: BlobEntry) in home[blob.id] == Int32(k) }
            let liveBytes = liveBytes(contents, counting: homed)
            let action: Action
            if liveBytes == 0 {
                action = .remove
            } else if aliveEnough(liveBytes, of: contents) {
                action = .keep
            } else {
                action = .repack(carry: carry(contents, homed: homed, carried: &carried))
            }
            plan.packs.append(Pack(id: id, contents: contents, storedBytes: stored[PackBuilder.key(id)] ?? 0,
                                   liveBytes: liveBytes, action: action))
        }
        let indexedKeys = Set(index.packs.keys.map(PackBuilder.key))
        plan.unindexed = stored.keys.filter { !indexedKeys.contains($0) }.sorted().map { Stray(key: $0, storedBytes: stored[$0] ?? 0) }
        return plan
    }

    /// The live blobs whose home is `contents` not carried yet (earlier in it), frame by frame;
    /// frames with none are left out (not read).
    private static func carry(_ contents: PackContents, homed: (BlobEntry) -> Bool, carried: inout Set<ContentID>) -> [Carry] {
        var out: [Carry] = []
        for frame in contents.frames {
            let blobs = frame.blobs.filter { homed($0) && carried.insert($0.id).inserted }
            if !blobs.isEmpty { out.append(Carry(frame: frame, blobs: blobs)) }
        }
        return out
    }

    /// The report as far as it is known before any I/O. A real run frees every repacked pack
    /// whole (`execute` adds what its new packs and index take to `keptBytes` and takes the new
    /// packs' bytes off `freedBytes`); a dry run estimates what repacking frees on raw sizes.
    func report(dryRun: Bool) -> PagedGarbage.Report {
        var report = PagedGarbage.Report()
        let (kept, repacked, removed) = (self.kept, self.repacked, self.removed)
        report.livePacks = kept.count
        report.deletedPacks = removed.count
        report.repackedPacks = repacked.count
        report.unindexedPacks = unindexed.count
        report.keptBytes = kept.saturatingSum(\.storedBytes)
        // A dry run shares the repository with writers: a pack no index lists may be one being
        // filled, so it is counted (unindexedPacks) but its bytes are not promised.
        report.freedBytes = removed.saturatingSum(\.storedBytes).saturatingAdd(dryRun ? 0 : unindexed.saturatingSum(\.storedBytes))
        for pack in repacked { report.freedBytes = report.freedBytes.saturatingAdd(dryRun ? pack.estimatedFreedBytes : pack.storedBytes) }
        return report
    }
}
