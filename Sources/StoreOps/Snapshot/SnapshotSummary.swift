import Foundation

/// One line of `storectl snapshot list`.
public struct SnapshotSummary: Sendable, Codable {
    public var id: String
    public var time: Date
    public var store: String
    /// The archive's size on disk.
    public var bytes: UInt64
    /// Uncompressed (database + external data) over archive size.
    public var ratio: Double
    public var tags: [String]
    public var lastVerified: SnapshotRepository.VerificationRecord?
    /// Set when the catalog entry cannot be read: what is wrong with it.
    public var damaged: String?

    /// The repository's snapshots, newest first, damaged catalog entries included (marked).
    public static func list(repository path: String) throws -> [SnapshotSummary] {
        let repository = try SnapshotRepository.open(path)
        let (records, damaged) = repository.catalog()
        var rows: [SnapshotSummary] = records.compactMap { record in
            guard let facts = record.snapshot else { return nil }
            let archive = facts.archive?.bytes ?? 0
            let raw = record.database.bytes + (record.externalData?.totalBytes ?? 0)
            return SnapshotSummary(id: facts.id, time: record.startedAt, store: record.source.path, bytes: archive,
                                   ratio: archive == 0 ? 0 : Double(raw) / Double(archive), tags: facts.tags,
                                   lastVerified: repository.lastVerification(facts.id))
        }
        rows += damaged.map { entry in
            SnapshotSummary(id: entry.id, time: SnapshotID.time(of: entry.id) ?? Date(timeIntervalSince1970: 0), store: "?",
                            bytes: 0, ratio: 0, tags: [], lastVerified: nil, damaged: entry.problem)
        }
        return rows.sorted { ($0.time, $0.id) > ($1.time, $1.id) }
    }


}
