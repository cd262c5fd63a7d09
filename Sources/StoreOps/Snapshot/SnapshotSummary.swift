import Foundation

/// One line of `storectl snapshot list`.
public struct SnapshotSummary: Sendable, Codable {
    public var id: String
    public var time: Date
    /// The store's path on the host that took the snapshot.
    public var store: String
    /// The host that took it ("" for a damaged entry).
    public var host: String = ""
    /// The bytes the snapshot added to the repository (its new packs and index).
    public var bytes: UInt64
    /// Always 0 (kept in `--json`: format 1's uncompressed size over its archive's).
    public var ratio: Double
    public var tags: [String]
    public var lastVerified: VerificationRecord?
    /// Set when the catalog entry cannot be read: what is wrong with it.
    public var damaged: String?
    /// The repository format (always 2; kept in `--json`).
    public var format = PagedRepository.formatVersion
    /// The database and external data the snapshot holds, uncompressed.
    public var logicalBytes: UInt64 = 0
    /// Set for a milestone of `storectl replicate` (its chain's state every ten minutes, made from
    /// the repository): `snapshot list` folds these unless asked (`--milestones`).
    public var milestone: PagedSnapshotRecord.Milestone?

    /// The repository's snapshots, newest first, damaged catalog entries included (marked; a
    /// filter leaves them out, as their store cannot be known).
    public static func list(repository path: String, password: PasswordSource = .resolve(file: nil),
                            filter: SnapshotFilter = .all) throws -> [SnapshotSummary] {
        let repository = try PagedRepository.open(at: path, password: password)
        let rows = try list(repository, filter: filter)
        if rows.isEmpty { try requireMatch(repository, filter: filter, points: try StorePoints.list(repository, filter: filter)) }
        return rows
    }

    /// The snapshots and the points in time, from one opening of the repository.
    public static func listWithPoints(repository path: String, password: PasswordSource = .resolve(file: nil),
                                      filter: SnapshotFilter = .all) throws -> ([SnapshotSummary], [StorePoints]) {
        let repository = try PagedRepository.open(at: path, password: password)
        let rows = try list(repository, filter: filter), points = try StorePoints.list(repository, filter: filter)
        if rows.isEmpty { try requireMatch(repository, filter: filter, points: points) }
        return (rows, points)
    }

    /// A `--store`/`--host` that matches no snapshot and no point of a repository that holds some:
    /// 66 listing its stores (a typo would otherwise list nothing and exit 0, as if the store
    /// had never been protected). An empty repository lists nothing, as without the filter.
    static func requireMatch(_ repository: PagedRepository, filter: SnapshotFilter, points: [StorePoints]) throws {
        guard !filter.isAll, points.isEmpty else { return }
        let snapshots = try list(repository, filter: .all).filter { $0.damaged == nil }
        let stores = Set(snapshots.map { "\($0.store) (host \($0.host))" } + StorePoints.names(in: repository)).sorted()
        guard !stores.isEmpty else { return }
        throw filter.matchesNothing(in: repository.location, stores: stores)
    }

    static func list(_ repository: PagedRepository, filter: SnapshotFilter) throws -> [SnapshotSummary] {
        let (records, damaged) = try repository.catalog()
        var rows: [SnapshotSummary] = records.compactMap { snapshot in
            let record = snapshot.manifest
            guard let facts = record.snapshot, filter.matches(host: record.host, path: record.source.path) else { return nil }
            let raw = record.database.bytes + (record.externalData?.totalBytes ?? 0)   // bounded where the record is opened
            return SnapshotSummary(id: facts.id, time: record.startedAt, store: record.source.path, host: record.host, bytes: facts.addedBytes ?? 0,
                                   ratio: 0, tags: facts.tags, lastVerified: repository.lastVerification(facts.id), logicalBytes: raw,
                                   milestone: snapshot.milestone)
        }
        if filter.isAll { rows += damaged.map { entry in
            SnapshotSummary(id: entry.id, time: SnapshotID.time(of: entry.id) ?? Date(timeIntervalSince1970: 0), store: "?",
                            bytes: 0, ratio: 0, tags: [], lastVerified: nil, damaged: entry.problem)
        } }
        return rows.sorted { ($0.time, $0.id) > ($1.time, $1.id) }
    }
}
