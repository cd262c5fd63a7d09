import Foundation

/// `storectl snapshot prune`: removes the snapshots a retention policy does not keep, and in a
/// format-2 repository then collects the data no remaining snapshot refers to (`PagedGarbage`).
public enum SnapshotPrune {
    public struct Options: Sendable {
        public var repository: String
        public var policy: RetentionPolicy
        public var dryRun = false
        public var wait = false
        /// Where an encrypted repository's password comes from.
        public var password: PasswordSource = .resolve(file: nil)
        /// The rules are applied to each group on its own: by default each store (host and path).
        public var groupBy: SnapshotGrouping = .store
        /// Only these snapshots are considered; the others are neither listed nor removed.
        public var filter: SnapshotFilter = .all

        public init(repository: String, policy: RetentionPolicy, dryRun: Bool = false, wait: Bool = false,
                    password: PasswordSource = .resolve(file: nil), groupBy: SnapshotGrouping = .store, filter: SnapshotFilter = .all) {
            self.groupBy = groupBy
            self.filter = filter
            self.repository = repository
            self.policy = policy
            self.dryRun = dryRun
            self.wait = wait
            self.password = password
        }
    }

    public struct Result: Sendable, Codable {
        public var dryRun: Bool
        /// By group (a store, by default), newest first within each.
        public var decisions: [RetentionDecision]
        public var removed: [String]
        /// How the snapshots were grouped (`host,path` by default).
        public var groupBy: String = SnapshotGrouping.store.description
        /// Tags of `--keep-tag` that no considered snapshot carries (a typo keeps nothing).
        public var unmatchedTags: [String] = []
        /// Catalog entries that cannot be read: kept (never removed as if expired), reported.
        public var damaged: [SnapshotRepository.DamagedEntry] = []
        /// Format 2: what garbage collection did (or, with --dry-run, would do: `freedBytes`).
        public var garbage: PagedGarbage.Report?
    }

    /// - Throws: 64 for an empty policy (it would remove everything), 75 when another writer
    ///   holds the repository (format 2: any other user, since prune needs it alone).
    public static func run(_ options: Options, progress: StepHandler? = nil) throws -> Result {
        try options.policy.validate()
        guard !options.policy.isEmpty else {
            throw StoreOpsError(.usage, "refusing to prune with an empty policy: it would remove every snapshot",
                                hint: "pass at least one --keep-* option")
        }
        let opened = try OpenedRepository.open(options.repository, password: options.password)
        // A dry run of format 1 reads without a lock (as before); format 2 needs the repository
        // still for a dry run too, or its byte count could name packs a writer is filling.
        let hold = options.dryRun && opened.format == 1 ? nil
            : try RepositoryHold.take(opened, operation: "snapshot prune", exclusive: true, wait: options.wait)
        defer { hold?.release() }
        let (entries, damaged) = try opened.catalog()
        let candidates = entries.compactMap { entry -> RetentionCandidate? in
            let manifest = entry.manifest
            guard let facts = manifest.snapshot, options.filter.matches(host: manifest.host, path: manifest.source.path) else { return nil }
            return RetentionCandidate(id: facts.id, time: manifest.startedAt, tags: facts.tags,
                                      verified: opened.lastVerification(facts.id)?.ok == true, host: manifest.host, path: manifest.source.path)
        }
        let decisions = Retention.apply(options.policy, to: candidates, groupBy: options.groupBy)
        var removed: [String] = []
        var result = Result(dryRun: options.dryRun, decisions: decisions, removed: [], damaged: damaged)
        result.groupBy = options.groupBy.description
        result.unmatchedTags = options.policy.tags.filter { tag in !candidates.contains { $0.tags.contains(tag) } }
        let expired = Set(decisions.filter { !$0.keep }.map(\.id))
        switch opened {
        case .archives(let repository):
            if !options.dryRun {
                for case .archive(let record, _) in entries where expired.contains(record.snapshot?.id ?? "") {
                    try repository.remove(record)
                    removed.append(record.snapshot?.id ?? "")
                }
            }
        case .paged(let repository):
            if !options.dryRun {
                for id in expired.sorted() {
                    try ProcessSignals.checkpoint("pruning \(repository.location)")
                    try repository.backend.remove(PagedSnapshotRecord.key(id), point: "prune.record.remove")
                    try? repository.backend.remove(repository.verifiedKey(id), point: "prune.verified.remove")
                    removed.append(id)
                }
            }
            // A dry run counts what would be freed once the expired records are gone.
            result.garbage = try PagedGarbage.collect(repository, dryRun: options.dryRun, excluding: options.dryRun ? expired : [],
                                                      progress: progress)
        }
        result.removed = removed
        return result
    }
}
