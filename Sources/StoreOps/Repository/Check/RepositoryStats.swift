import Foundation

/// `storectl repo stats`: what the repository holds and what its snapshots would take as whole
/// copies (the saving of storing pages once).
public enum RepositoryStats {
    public struct Report: Sendable, Codable {
        public var location: String
        public var format: Int
        public var encrypted: Bool
        public var snapshots = 0
        /// Database and external data of every snapshot, uncompressed: what whole copies hold.
        public var logicalBytes: UInt64 = 0
        /// What the repository takes on disk (format 2: packs, indexes, records; format 1: archives).
        public var storedBytes: UInt64 = 0
        public var packs = 0
        public var indexes = 0
        /// Distinct blobs and their uncompressed bytes.
        public var blobs = 0
        public var blobBytes: UInt64 = 0
        public var blobsByType: [String: Int] = [:]
        /// Indexes and snapshot records that could not be read: the figures leave them out.
        public var damaged: [String] = []
    }

    /// 2 when something could not be read (the figures are then short), as `repo check`.
    public static func ending(of report: Report) -> Ending {
        guard !report.damaged.isEmpty else { return .ok }
        return Ending(.failed, error: StoreOpsError(.checksFailed, "\(Format.plural(report.damaged.count, "object", "objects")) could not be read; the figures leave them out",
                                                    hint: "`storectl repo check --repo \(report.location)` says what is damaged"))
    }

    public static func run(location: String, password: PasswordSource) throws -> Report {
        let repository = try PagedRepository.open(at: location, password: password)
        let (records, damaged) = try repository.catalog()
        var report = Report(location: repository.location, format: PagedRepository.formatVersion, encrypted: repository.config.isEncrypted)
        // The snapshots whose records open (a damaged one is listed apart, "not counted").
        report.snapshots = records.count
        report.logicalBytes = records.saturatingSum { $0.manifest.database.bytes.saturatingAdd($0.manifest.externalData?.totalBytes ?? 0) }
        let backend = repository.backend
        let packs = try backend.list("data/")
        let indexes = try backend.list("index/")
        let snapshots = try backend.list("snapshots/")
        report.packs = packs.count
        report.indexes = indexes.count
        report.storedBytes = (packs + indexes + snapshots).saturatingSum(\.size)
        var seen = Set<ContentID>()
        report.damaged = damaged.map { $0.problem.contains($0.file) ? $0.problem : "snapshot record \($0.file) \($0.problem)" }
        var blobBytes: UInt64 = 0
        var byType: [String: Int] = [:]
        let unreadable = try RepositoryIndex.scan(repository) { _, _, contents in
            for frame in contents.frames { for blob in frame.blobs where seen.insert(blob.id).inserted {
                blobBytes = blobBytes.saturatingAdd(UInt64(blob.length))
                byType[blob.type.name, default: 0] += 1
            } }
        }
        report.blobBytes = blobBytes
        report.blobsByType = byType
        report.damaged += unreadable.map { $0.problem.contains(backend.describe($0.key)) ? $0.problem : "index \(backend.describe($0.key)) \($0.problem)" }
        report.blobs = seen.count
        return report
    }
}
