import Foundation

/// `storectl snapshot prune`: removes the snapshots a retention policy does not keep, then
/// collects the data no remaining snapshot refers to (`PagedGarbage`).
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
        /// How long points in time stay: every commit, then only each chain's base.
        public var points = PointRetention()
        /// `--empty`: when no snapshot is listed, collect every pack (the repository is known to
        /// hold none). Without it only a prune that removed the last ones itself does: a listing
        /// that came back empty by mistake took every pack (a trial).
        public var empty = false

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
        /// Snapshots dated out of order with their parents, or ahead of this host's clock: a host's
        /// clock was wrong (each is counted as newer than its parent whatever its date).
        public var clockNotes: [String] = []
        /// Catalog entries that cannot be read: kept (never removed as if expired), reported.
        public var damaged: [DamagedEntry] = []
        /// What garbage collection did (or, with --dry-run, would do: `freedBytes`).
        public var garbage: PagedGarbage.Report?
        /// How long each stage took (lock, preflight: the decisions, prune: records and garbage).
        public var stages: [StageTiming] = []
        /// What became of each chain of points in time (`storectl replicate`).
        public var points: [PointRetention.Decision] = []
        /// Milestones (`PointMilestone`) that go: their chain's points were thinned or removed,
        /// or no marker names them (a follower killed between the two).
        public var milestones: [String] = []
        /// Bytes the points' own objects (segments, digests, milestones' markers under `points/`)
        /// freed, or with --dry-run would free (a chain thinned writes back one commit a minute:
        /// somewhat less). Packs are counted in `garbage`; a chain's base's pages mostly stay,
        /// shared with the store's other snapshots.
        public var pointBytes: UInt64 = 0
    }

    /// - Throws: 64 for an empty policy (it would remove everything), 75 when another writer
    ///   uses the repository (prune needs it alone).
    public static func run(_ options: Options, progress: StepHandler? = nil) throws -> Result {
        try options.policy.validate()
        guard !options.policy.isEmpty || options.points.explicit else {
            throw StoreOpsError(.usage, "refusing to prune with an empty policy: it would remove every snapshot",
                                hint: "pass at least one --keep-* option")
        }
        // A dry run only reads (its lock record aside): it shares the repository with writers (a
        // snapshot, a replicate running for days), sweeps nothing, and leaves the packs no index
        // lists out of its byte count, since a writer may be filling them. The preflight decides; the act removes the records, then
        // collects.
        let pipeline = Pipeline(operation: "snapshot prune")
        var road = PlannedRoad<Result, Result>(lock: .none, wait: options.wait, actName: "prune",
                                               preflight: { pipeline in try decide(options, in: try pipeline.repository) },
                                               act: { pipeline, decided in
                                                   do { return try carryOut(decided, options, in: try pipeline.repository, progress: progress) } catch let error as StoreOpsError where error.kind == .noSpace {
                                                       // A prune has no destination to choose (the generic hint said to): it
                                                       // writes a little (thinned segments, a new index) before it may delete.
                                                       var said = error
                                                       guard said.hint?.contains("choose another destination") ?? true else { throw said }
                                                       said.hint = "the repository's volume is full: a prune writes a thinned segment or a new index before it deletes anything; free a few MiB on that volume outside the repository (or grow it) and run it again (what it did is kept, nothing is half done). Never delete files inside the repository by hand"
                                                       throw said
                                                   }
                                               })
        road.repository = .init(options.repository, password: options.password, exclusive: !options.dryRun)
        road.repository?.readOnly = options.dryRun
        road.repository?.readsOnly = options.dryRun
        let walked = pipeline.walk(road)
        var result = try walked.get()
        result.stages = walked.stages
        return result
    }

    /// Each snapshot's time for the rules: its date, or, when a snapshot made after it (a child:
    /// its parent is this one) is dated before it, just before its earliest such child. A snapshot
    /// made after another of its store is the newer one whatever the clocks said: one dated ahead
    /// (its host's clock was a day fast) was kept by `--keep-last 1` over the store's real newest,
    /// which went. The misdated one moves back, not its children forward: the children keep
    /// their own dates and buckets (a year-ahead snapshot would otherwise have pulled all later
    /// history into one day). Said in `notes`, as are dates ahead of this host's clock.
    static func lineageTimes(_ records: [(id: String, parent: String?, time: Date)], now: Date = Date()) -> (times: [String: Date], notes: [String]) {
        var byID: [String: (id: String, parent: String?, time: Date)] = [:]
        for record in records { byID[record.id] = record }
        // Depth in the lineage (no recursion: a chain of parents may be thousands long; a loop
        // is cut where it closes).
        var depth: [String: Int] = [:]
        for id in byID.keys where depth[id] == nil {
            var path: [String] = []
            var seen = Set<String>()
            var next: String? = id
            while let current = next, depth[current] == nil, byID[current] != nil, seen.insert(current).inserted {
                path.append(current)
                next = byID[current]?.parent
            }
            var d = next.flatMap { depth[$0] } ?? -1
            for current in path.reversed() { d += 1; depth[current] = d }
        }
        var times = byID.mapValues(\.time)
        var notes: [String] = []
        // Children before their parents: a parent's time is final once every child has pulled it.
        for id in byID.keys.sorted(by: { (depth[$0] ?? 0, $0) > (depth[$1] ?? 0, $1) }) {
            guard let parent = byID[id]?.parent, let parentTime = times[parent], let time = times[id],
                  (depth[parent] ?? 0) < (depth[id] ?? 0), parentTime >= time else { continue }
            // Only a parent that is the misdated one: dated ahead of this host's clock, or with a
            // child dated after the parent's own parent. A child dated before even that (an old
            // archive an older storectl imported with the newest snapshot as its parent) is the
            // odd one: moving the parent back would pull the whole lineage before it into the past.
            let grandparentTime = byID[parent]?.parent.flatMap { times[$0] }
            guard (byID[parent]?.time ?? parentTime).timeIntervalSince(now) > 300 || grandparentTime.map({ time > $0 }) == true else { continue }
            times[parent] = time.addingTimeInterval(-0.001)
            notes.append("\(parent) is dated \(Timestamp.iso(byID[parent]?.time ?? parentTime)), not before \(id) (\(Timestamp.iso(byID[id]?.time ?? time))), taken after it: a clock was wrong; it is counted as the older")
        }
        for (id, record) in byID where record.time.timeIntervalSince(now) > 300 {
            notes.append("\(id) is dated \(Timestamp.iso(record.time)), ahead of this host's clock (\(Timestamp.iso(now))): the clock of the host that took it, or this one's, is wrong")
        }
        return (times, Array(Set(notes)).sorted())
    }

    /// What the rules keep and remove (the act's plan).
    static func decide(_ options: Options, in repository: PagedRepository) throws -> Result {
        let (records, damaged) = try repository.catalog()
        // The bases of chains of points follow the points' retention, not the snapshots'.
        let timeline = try PointTimeline.load(repository)
        let points = try options.points.decide(timeline, records: records, filter: options.filter) { next, chain in
            // One read of the next chain's opening; unreadable, the chain is not cut to its base.
            ((try? PointRestore.opening(of: next, in: repository)) ?? nil)?.continues(chain) != nil
        }
        let bases = Set(points.map(\.chain))
        // Milestones follow their chain: kept while its every commit is, and while a marker names them.
        let milestones = records.filter { $0.milestone != nil && options.filter.matches(host: $0.manifest.host, path: $0.manifest.source.path) }
        let removing = Set(points.flatMap(\.segments))
        let keeping = Set(points.filter { $0.action == "keep" || $0.action == "tidy" }.map(\.chain))
        var named = Set<String>()
        for chain in timeline.chains where keeping.contains(chain.id) {
            for marker in chain.milestones where !removing.contains(marker.key) { named.insert("\(chain.id)@\(marker.to)@\(marker.lastTime)") }
        }
        let expiredMilestones = milestones.filter { record in
            guard let c = record.milestone else { return false }
            return !named.contains("\(c.chain)@\(c.point)@\(c.time)")
        }.map(\.id)
        let (lineageTime, clockNotes) = lineageTimes(records.compactMap { record in
            record.manifest.snapshot.map { (id: $0.id, parent: record.parent, time: record.manifest.startedAt) }
        })
        let candidates = records.compactMap { record -> RetentionCandidate? in
            let manifest = record.manifest
            guard let facts = manifest.snapshot, !bases.contains(facts.id), record.milestone == nil,
                  options.filter.matches(host: manifest.host, path: manifest.source.path) else { return nil }
            // Checked: its last `snapshot verify` passed, or (never verified since) its check when
            // it was taken did: a store keeps one such at least (a store whose one snapshot was
            // never verified lost it to a grouping that pools stores, `--group-by tags`).
            let last = repository.lastVerification(facts.id)
            return RetentionCandidate(id: facts.id, time: lineageTime[facts.id] ?? manifest.startedAt, tags: facts.tags, verified: last?.ok == true,
                                      checked: last.map(\.ok) ?? (manifest.verify.ok && manifest.verify.level != .none),
                                      host: manifest.host, path: manifest.source.path)
        }
        if !options.filter.isAll, points.isEmpty,
           !records.contains(where: { options.filter.matches(host: $0.manifest.host, path: $0.manifest.source.path) }) {
            // A mistyped --store or --host would otherwise prune nothing and say nothing.
            let stores = Set(records.map { "\($0.manifest.source.path) (host \($0.manifest.host))" }).sorted()
            throw options.filter.matchesNothing(in: repository.location, stores: stores, hint: " (as `snapshot list` shows them)")
        }
        let decisions = options.policy.isEmpty ? candidates.map { RetentionDecision(id: $0.id, time: $0.time, keep: true, reasons: ["no snapshot rule given"], group: nil) }
            : Retention.apply(options.policy, to: candidates, groupBy: options.groupBy)
        var result = Result(dryRun: options.dryRun, decisions: decisions, removed: [], damaged: damaged)
        result.points = points
        result.milestones = expiredMilestones.sorted()
        result.groupBy = options.groupBy.description
        result.clockNotes = clockNotes
        result.unmatchedTags = options.policy.tags.filter { tag in !candidates.contains { $0.tags.contains(tag) } }
        return result
    }

    /// Removes the expired records (unless a dry run), then collects what no kept snapshot uses.
    static func carryOut(_ decided: Result, _ options: Options, in repository: PagedRepository, progress: StepHandler?) throws -> Result {
        var result = decided
        var expired = Set(decided.decisions.filter { !$0.keep }.map(\.id))
        expired.formUnion(decided.points.filter { $0.action == "remove" }.map(\.chain))
        expired.formUnion(decided.milestones)
        // What the points' objects hold: garbage collection counts packs, never these. Listed
        // once, before anything is removed, and only the folders of the chains that change.
        let removing = decided.points.filter { $0.action != "keep" }.flatMap(\.segments)
        var sizes: [String: UInt64] = [:]
        for folder in Set(removing.map { key in key.lastIndex(of: "/").map { String(key[...$0]) } ?? key }).sorted() {
            for (key, size) in try repository.backend.list(folder) { sizes[key] = size }
        }
        if options.dryRun {
            result.pointBytes = removing.saturatingSum { sizes[$0] ?? 0 }
        }
        var removedBytes: UInt64 = 0, writtenBytes: UInt64 = 0
        var chainsTouched = 0
        // A thinning that found no room (its segment is written before what it replaces goes):
        // the rest of the prune goes on, which frees space, and the run then fails saying so (a
        // trial's prune on a nearly full volume removed nothing, the expired snapshots included).
        var thinningFailed: StoreOpsError?
        do {
            do { try remove() } catch let error as StoreOpsError where thinningFailed != nil && error.kind == .noSpace {
                // Collecting found no room either: both said.
                throw StoreOpsError(.noSpace, "thinning points found no room, nor did what came after it: \(error.message)", hint: error.hint)
            }
            if let thinningFailed {
                throw StoreOpsError(.noSpace, "thinning points found no room: \(thinningFailed.message)",
                                    hint: "the rest was done" + (result.garbage.map { $0.freedBytes > 0 ? " (\(Format.bytes($0.freedBytes)) freed)" : "" } ?? "")
                                        + "; the same prune run again, with that room (or a few MiB freed outside the repository), thins what is left")
            }
        } catch where !result.removed.isEmpty || chainsTouched > 0 {
            // The server went away (or a signal came) part way: what is gone is said, never
            // "nothing was changed" (an S3 outage's generic hint), so the operator knows which
            // snapshots no longer restore.
            let error = StoreOpsError.wrapping(error, doing: "snapshot prune") ?? StoreOpsError(.failure, "\(error)")
            let records = result.removed.isEmpty ? "" : "\(Format.plural(result.removed.count, "snapshot", "snapshots")) (\(result.removed.joined(separator: ", ")))"
            let chains = chainsTouched == 0 ? "" : "\(records.isEmpty ? "" : " and ")points of \(Format.plural(chainsTouched, "chain", "chains")) (thinned or removed)"
            let again = error.status == .ioError && error.kind != .noSpace ? "run the same prune again once the repository answers" : "run the same prune again"
            throw StoreOpsError(error.kind, "\(error.message); before that, this prune removed \(records)\(chains)",
                                hint: "\(again): it finishes and collects what they used" + (error.hint.map { " (\($0))" } ?? ""))
        }
        return result

        func remove() throws {
            if !options.dryRun {
                // Points first, each chain from its last segment back to its opening: a prune cut
                // short leaves a shorter chain, never a chain with a hole.
                for decision in decided.points where decision.action != "keep" {
                    var writtenKeys = Set<String>()
                    if decision.action == "thin" {
                        let timeline = try PointTimeline.load(repository, store: nil)
                        guard let chain = timeline.chains.first(where: { $0.id == decision.chain }) else { continue }
                        // A thinning cut short (killed, or out of room part way) left thinned
                        // segments the originals still cover: they go first. Written again under the
                        // same key, one was then removed as redundant (a hole), or, sealed with
                        // another nonce, refused as another object under its key (a review).
                        for leftover in chain.redundant where leftover.level == PointThinning.level {
                            try ProcessSignals.checkpoint("pruning \(repository.location)")
                            try repository.backend.remove(leftover.key, point: "prune.points.remove")
                        }
                        let thinned: [SegmentName]?
                        do { thinned = try PointThinning.thin(chain, in: repository, period: options.points.period) } catch let error as StoreOpsError where error.kind == .noSpace {
                            thinningFailed = thinningFailed ?? error
                            continue   // this chain stays whole; the next run thins it
                        }
                        guard let written = thinned else { continue }
                        writtenKeys = Set(written.map(\.key))
                        // The thinned segments written count against what their removal frees.
                        writtenBytes = writtenBytes.saturatingAdd(written.saturatingSum { ((try? repository.backend.size($0.key)) ?? nil) ?? 0 })
                    }
                    var counted = false
                    for key in decision.segments where !writtenKeys.contains(key) {
                        try ProcessSignals.checkpoint("pruning \(repository.location)")
                        try repository.backend.remove(key, point: "prune.points.remove")
                        if !counted, decision.action != "tidy" { chainsTouched += 1; counted = true }   // a tidy loses no point
                        removedBytes = removedBytes.saturatingAdd(sizes[key] ?? 0)
                        result.pointBytes = removedBytes > writtenBytes ? removedBytes - writtenBytes : 0
                    }
                }
                for id in expired.sorted() {
                    try ProcessSignals.checkpoint("pruning \(repository.location)")
                    try repository.backend.remove(PagedSnapshotRecord.key(id), point: "prune.record.remove")
                    try? repository.backend.remove(repository.verifiedKey(id), point: "prune.verified.remove")
                    result.removed.append(id)
                }
            }
            // A dry run counts what would be freed once the expired records are gone.
            result.garbage = try PagedGarbage.collect(repository, dryRun: options.dryRun, excluding: options.dryRun ? expired : [],
                                                      kept: Set(decided.decisions.filter(\.keep).map(\.id)).subtracting(expired),
                                                      gone: Set(result.removed), emptied: !expired.isEmpty || options.empty, progress: progress)
        }
    }
}
