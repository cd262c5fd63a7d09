import Foundation

/// Milestones: a chain's state at a point, as a snapshot record, made from the repository alone.
///
///     snapshots/<id>                                              the record (tags replicate, milestone)
///     points/<store>/<chain>/milestone-<from>-<to>-<first ms>-<last ms>   names it
///
/// A restore at a point reads its chain's base and every commit since (through digests). An hour
/// into a busy chain that is most of the restore: digests of overlapping spans hold the same
/// pages again and again. A milestone bounds it: after each digest of rank `rank` (about ten
/// minutes), the follower writes a snapshot record whose map is its parent's (the base, or the
/// last milestone, at point `from - 1`) with the digest's pages over it. It reads nothing from
/// the store (no read transaction, nothing the app notices) and stores only pages the repository
/// does not hold yet, so the next base (made against it) has less to add too. A restore at a
/// later point restores the milestone as it would a snapshot and replays only what came after it.
///
/// Write order: the record's packs and index, the record, then the marker (a marker names a
/// durable record). A follower killed before the marker leaves a record no marker names: prune
/// removes it. A restore that cannot read a milestone (its marker or record missing or damaged)
/// reads its chain's base instead: milestones, like digests, only save time.
///
/// A milestone is made only over a span with no external-data file added or removed (its files
/// are its parent's), from a parent the follower wrote, or found when it took the chain up; so after
/// such a span the chain has no further milestones until its next base. (Not "checkpoints": that
/// is what SQLite calls moving the -wal into the database, which this tool talks about throughout.)
public enum PointMilestone {
    /// The level in a `SegmentName` (its key says `milestone`).
    public static let level = 4
    /// The digests after which a milestone is written (rank 2: over ten merges, about ten minutes).
    static let rank = Int(ProcessInfo.processInfo.environment["STORECTL_TEST_MILESTONE_RANK"] ?? "") ?? 2

    /// The marker's content (sealed as its name's identity).
    struct Marker: Codable {
        var format = "storectl-milestone"
        var record: String
    }

    /// Where the follower stands in a chain: the record of its last milestone (or the base, at
    /// point 0) and that record's map (read when the first milestone needs it).
    struct Parent {
        var chain: String
        var point: Int
        var record: PagedSnapshotRecord
        var map: PageMap.Loaded?
    }

    /// Writes the milestone at `digest.to` over `parent` (the state at `digest.from - 1`): its
    /// packs, index and record, then its marker. Returns the new parent, or nil when the span
    /// cannot make one (files added or removed, the digest not usable).
    static func write(_ digest: PointDigest.Builder, over parent: Parent, store: String, repository: PagedRepository, level compression: Int?) throws -> Parent? {
        guard digest.usable, digest.tracked, digest.files.isEmpty, digest.removedBefore.isEmpty, digest.removeNext.isEmpty,
              digest.notCarried.isEmpty, parent.chain == digest.chain, parent.point + 1 == digest.from, digest.count != Int.max,
              let pageSize = digest.template?.pageSize else { return nil }
        let map = try parent.map ?? BlobLocator.pageMap(of: parent.record, in: repository)
        let work = PagedSnapshotWork(store: StoreFile(unchecked: store), repository: repository, tags: ["replicate", "milestone"],
                                     level: compression, reuseUnchanged: false)
        work.milestone = .init(chain: digest.chain, point: digest.to, time: digest.lastTime)
        work.recordPoint = "replicate.milestone.record"
        work.takeParent(parent.record, map: map)
        let pageCount = digest.count
        let source = Manifest.Source(path: store, journalMode: "wal", pageSize: pageSize, pageCount: pageCount,
                                     fileBytes: UInt64(pageCount) * UInt64(pageSize), walBytes: 0)
        do {
            var pages = digest.pages.keys.sorted().map { (page: $0, bytes: digest.pages[$0]?.bytes ?? []) }
            // Grown past 1 GiB within the span: the lock-byte page, which SQLite never writes, is
            // a page of zeros (as in a snapshot and a point).
            let lockBytePage = UInt32(LockState.pendingByte / pageSize + 1)
            let keep = min(digest.lowest, parent.record.pages.pageCount)
            if Int(lockBytePage) > keep, Int(lockBytePage) <= pageCount, digest.pages[lockBytePage] == nil {
                pages.append((page: lockBytePage, bytes: [UInt8](repeating: 0, count: pageSize)))
                pages.sort { $0.page < $1.page }
            }
            try work.copyMilestone(pageSize: pageSize, pageCount: pageCount, keep: keep, pages: pages, source: source)
            try work.check()
            try work.commit()
        } catch {
            work.abandon()
            throw error
        }
        guard let record = work.record else { throw StoreOpsError(.failure, "the milestone was not recorded") }
        let name = SegmentName(store: digest.store, chain: digest.chain, level: Self.level, from: digest.from, to: digest.to,
                               firstTime: digest.firstTime, lastTime: digest.lastTime)
        try repository.backend.write(name.key, try repository.sealer.seal(try JSON.encode(Marker(record: record.id)), as: name.identity),
                                     point: "replicate.milestone.marker")
        return Parent(chain: digest.chain, point: digest.to, record: record, map: work.committedMap())
    }

    /// The record a marker names, checked to be the milestone the marker says (65 otherwise).
    public static func record(_ name: SegmentName, in repository: PagedRepository) throws -> PagedSnapshotRecord {
        let what = "milestone \(repository.backend.describe(name.key))"
        guard let sealed = try repository.backend.read(name.key) else { throw StoreOpsError(.badData, "\(what) is listed but cannot be read") }
        let plain = try repository.sealer.open(sealed, as: name.identity, what: what)
        guard let marker = try? JSON.decoder().decode(Marker.self, from: plain), marker.format == "storectl-milestone" else {
            throw StoreOpsError(.badData, "\(what) is not a milestone marker", hint: Sealer.damagedHint)
        }
        // Read by its exact key (the marker names it whole: no listing, no prefix match), once its
        // id is one (it comes from the repository: never a path of its own).
        guard SnapshotID.isPlausible(marker.record) else {
            throw StoreOpsError(.badData, "\(what) names \"\(marker.record)\", which is not a snapshot id", hint: Sealer.damagedHint)
        }
        guard let sealedRecord = try repository.backend.read(PagedSnapshotRecord.key(marker.record)) else {
            throw StoreOpsError(.noInput, "\(what) names snapshot \(marker.record), which is not in \(repository.location)")
        }
        let record = try PagedSnapshotRecord.open(sealedRecord, id: marker.record, sealer: repository.sealer, location: repository.location)
        guard let milestone = record.milestone, milestone.chain == name.chain, milestone.point == name.to, milestone.time == name.lastTime else {
            throw StoreOpsError(.badData, "\(what) names snapshot \(marker.record), which is not the milestone of point \(name.to) of chain \(name.chain)",
                                hint: Sealer.damagedHint)
        }
        return record
    }

    /// The milestone a restore at `time` starts from: the latest whose point is at most the
    /// last commit wanted and after which the chain's segments go on from its next point (or
    /// which is at the chain's last point).
    static func usable(_ milestones: [SegmentName], segments: [SegmentName], time: Int64) -> SegmentName? {
        let starts = Set(segments.map(\.from))
        let last = segments.last?.to ?? 0
        return milestones.filter { $0.lastTime <= time && (starts.contains($0.to + 1) || $0.to == last) }
            .max { ($0.to, $0.lastTime) < ($1.to, $1.lastTime) }
    }
}
