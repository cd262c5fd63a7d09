import Foundation

/// `storectl snapshot prune`: removes the snapshots a retention policy does not keep.
public enum SnapshotPrune {
    public struct Options: Sendable {
        public var repository: String
        public var policy: RetentionPolicy
        public var dryRun = false
        public var wait = false

        public init(repository: String, policy: RetentionPolicy, dryRun: Bool = false, wait: Bool = false) {
            self.repository = repository
            self.policy = policy
            self.dryRun = dryRun
            self.wait = wait
        }
    }

    public struct Result: Sendable, Codable {
        public var dryRun: Bool
        public var decisions: [RetentionDecision]
        public var removed: [String]
        /// Catalog entries that cannot be read: kept (never removed as if expired), reported.
        public var damaged: [SnapshotRepository.DamagedEntry] = []
    }

    /// - Throws: 64 for an empty policy (it would remove everything), 75 when another writer
    ///   holds the repository.
    public static func run(_ options: Options) throws -> Result {
        try options.policy.validate()
        guard !options.policy.isEmpty else {
            throw StoreOpsError(.usage, "refusing to prune with an empty policy: it would remove every snapshot",
                                hint: "pass at least one --keep-* option")
        }
        let repository = try SnapshotRepository.open(options.repository)
        let lock = options.dryRun ? nil : try repository.lockForWriting(job: "snapshot prune", wait: options.wait)
        defer { lock?.release() }
        if !options.dryRun { repository.removeStray() }
        let (records, damaged) = repository.catalog()
        let candidates = records.compactMap { record -> RetentionCandidate? in
            guard let facts = record.snapshot else { return nil }
            return RetentionCandidate(id: facts.id, time: record.startedAt, tags: facts.tags,
                                      verified: repository.lastVerification(facts.id)?.ok == true)
        }
        let decisions = Retention.apply(options.policy, to: candidates)
        var removed: [String] = []
        if !options.dryRun {
            for decision in decisions where !decision.keep {
                guard let record = records.first(where: { $0.snapshot?.id == decision.id }) else { continue }
                try repository.remove(record)
                removed.append(decision.id)
            }
        }
        return Result(dryRun: options.dryRun, decisions: decisions, removed: removed, damaged: damaged)
    }
}

