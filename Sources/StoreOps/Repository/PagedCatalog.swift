import Foundation

extension PagedRepository {
    /// Every snapshot record that opens (newest first) and every one that does not.
    /// - Parameter listedMustRead: the caller holds the repository alone (prune's collector): a
    ///   record listed and then not found is no prune's doing but a listing and reads that
    ///   disagree (a lagging or inconsistent server), 74; the collector must not take the pages
    ///   of a snapshot it could not see (a trial's 404 on one record lost that snapshot's pages).
    /// - Parameter gone: records the caller removed (a listing may still show them for a moment).
    public func catalog(listedMustRead: Bool = false, gone: Set<String> = []) throws -> (records: [PagedSnapshotRecord], damaged: [DamagedEntry]) {
        var records: [PagedSnapshotRecord] = []
        var damaged: [DamagedEntry] = []
        for (key, size) in try backend.list("snapshots/") {
            let id = String(key.dropFirst("snapshots/".count))
            guard SnapshotID.isPlausible(id), !gone.contains(id) else { continue }
            do {
                guard size < 256 << 20 else { throw StoreOpsError(.badData, "is \(Format.bytes(size)), not a snapshot record") }
                guard let sealed = try backend.read(key) else {
                    guard listedMustRead else { continue }   // removed by a prune meanwhile
                    throw StoreOpsError(.ioError, "snapshot record \(backend.describe(key)) is listed, but reading it found nothing: the repository's listing and its reads disagree (a lagging or inconsistent server), so no data was removed",
                                        hint: "run the prune again later; `storectl repo check --repo \(location)` says whether the record is there")
                }
                records.append(try PagedSnapshotRecord.open(sealed, id: id, sealer: sealer, location: location))
            } catch let error as StoreOpsError where error.status == .badData {
                damaged.append(.init(id: id, file: backend.describe(key), problem: error.message))
            }
        }
        records.sort { ($0.manifest.startedAt, $0.id) > ($1.manifest.startedAt, $1.id) }
        return (records, damaged)
    }

    /// The snapshot with this id, or the only one whose id starts with it (66 none, 64 ambiguous,
    /// 65 damaged).
    public func record(_ id: String) throws -> PagedSnapshotRecord {
        guard SnapshotID.isPlausible(id) else {
            if let point = SnapshotID.pointLabelGiven(id, repository: location) { throw point }
            throw StoreOpsError(.noInput, "\"\(id)\" is not a snapshot id", hint: "`storectl snapshot list --repo \(location)` shows the ids")
        }
        let keys = try backend.list("snapshots/").map { String($0.key.dropFirst("snapshots/".count)) }.filter(SnapshotID.isPlausible)
        let matches = keys.contains(id) ? [id] : keys.filter { $0.hasPrefix(id) }
        guard matches.count <= 1 else {
            let sorted = matches.sorted()
            let shown = sorted.prefix(8).joined(separator: ", ") + (sorted.count > 8 ? ", … (\(sorted.count - 8) more)" : "")
            throw StoreOpsError(.usage, "\"\(id)\" matches \(matches.count) snapshots: \(shown)",
                                hint: "give more of the id, enough to name one of them")
        }
        guard let match = matches.first, let sealed = try backend.read(PagedSnapshotRecord.key(match)) else {
            throw StoreOpsError(.noInput, "no snapshot \(id) in \(location)", hint: "`storectl snapshot list --repo \(location)` shows the ids")
        }
        return try PagedSnapshotRecord.open(sealed, id: match, sealer: sealer, location: location)
    }

    func verifiedKey(_ id: String) -> String { "verified/\(id).json" }

    public func lastVerification(_ id: String) -> VerificationRecord? {
        ((try? backend.read(verifiedKey(id))) ?? nil).flatMap { try? JSON.decoder().decode(VerificationRecord.self, from: $0) }
    }

    func recordVerification(_ id: String, _ record: VerificationRecord) throws {
        try backend.write(verifiedKey(id), try JSON.encode(record), point: "verify.record")
    }
}
