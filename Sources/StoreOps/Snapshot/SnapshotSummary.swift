import Foundation

/// One line of `storectl snapshot list`.
public struct SnapshotSummary: Sendable, Codable {
    public var id: String
    public var time: Date
    /// The store's path on the host that took the snapshot.
    public var store: String
    /// The host that took it ("" for a damaged entry).
    public var host: String = ""
    /// Format 1: the archive's size on disk; format 2: the bytes the snapshot added.
    public var bytes: UInt64
    /// Uncompressed (database + external data) over archive size.
    public var ratio: Double
    public var tags: [String]
    public var lastVerified: SnapshotRepository.VerificationRecord?
    /// Set when the catalog entry cannot be read: what is wrong with it.
    public var damaged: String?
    /// The repository format: 1 (`bytes` is the archive's size) or 2 (`bytes` is what the
    /// snapshot added to the repository: its new packs and index).
    public var format = 1
    /// The database and external data the snapshot holds, uncompressed.
    public var logicalBytes: UInt64 = 0

    /// The repository's snapshots, newest first, damaged catalog entries included (marked; a
    /// filter leaves them out, as their store cannot be known).
    public static func list(repository path: String, password: PasswordSource = .resolve(file: nil),
                            filter: SnapshotFilter = .all) throws -> [SnapshotSummary] {
        let repository = try OpenedRepository.open(path, password: password)
        let (entries, damaged) = try repository.catalog()
        var rows: [SnapshotSummary] = entries.compactMap { entry in
            let record = entry.manifest
            guard let facts = record.snapshot, filter.matches(host: record.host, path: record.source.path) else { return nil }
            let raw = record.database.bytes + (record.externalData?.totalBytes ?? 0)
            // Format 1: the archive's size; format 2: what the snapshot added to the repository.
            let bytes = facts.archive?.bytes ?? facts.addedBytes ?? 0
            return SnapshotSummary(id: facts.id, time: record.startedAt, store: record.source.path, host: record.host, bytes: bytes,
                                   ratio: facts.format == 2 || bytes == 0 ? 0 : Double(raw) / Double(bytes), tags: facts.tags,
                                   lastVerified: repository.lastVerification(facts.id), format: facts.format ?? 1,
                                   logicalBytes: raw)
        }
        if filter.isAll { rows += damaged.map { entry in
            SnapshotSummary(id: entry.id, time: SnapshotID.time(of: entry.id) ?? Date(timeIntervalSince1970: 0), store: "?",
                            bytes: 0, ratio: 0, tags: [], lastVerified: nil, damaged: entry.problem)
        } }
        return rows.sorted { ($0.time, $0.id) > ($1.time, $1.id) }
    }
}
