import Foundation

/// How long the points in time `storectl replicate` records are kept, by age, per store:
/// every commit for `everyCommit` (1 day by default), then only each chain's base (one point
/// every base interval: an hour by default) until `bases` (30 days), then nothing. A store's
/// newest chain is never touched (it may be the one being followed).
public struct PointRetention: Sendable, Codable, Equatable {
    public var everyCommit: TimeInterval = 86_400
    public var bases: TimeInterval = 30 * 86_400
    /// Set when the user gave either (a prune with only these is not an empty policy).
    public var explicit = false

    public init(everyCommit: TimeInterval = 86_400, bases: TimeInterval = 30 * 86_400, explicit: Bool = false) {
        self.everyCommit = everyCommit
        self.bases = max(bases, everyCommit)
        self.explicit = explicit
    }

    public struct Decision: Sendable, Codable, Equatable {
        public var store: String
        public var chain: String
        public var from: Date
        public var to: Date
        /// "keep" (every commit), "thin" (segments removed, the base kept), "remove" (both).
        public var action: String
        public var reason: String
        /// The segment keys removed (thin, remove), opening last.
        public var segments: [String]
    }

    func decide(_ repository: PagedRepository, records: [PagedSnapshotRecord], filter: SnapshotFilter, now: Date = Date()) throws -> [Decision] {
        let timeline = try PointTimeline.load(repository)
        let byID = Dictionary(records.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        var out: [Decision] = []
        for key in Set(timeline.chains.map(\.store)) {
            let chains = timeline.chains(of: key)
            for (i, chain) in chains.enumerated() {
                guard let base = byID[chain.id] else { continue }   // a chain without its base restores nothing; left to repo check
                guard filter.matches(host: base.manifest.host, path: base.manifest.source.path) else { continue }
                // A chain covers until the next begins (or, the newest, until its last point).
                let end = i + 1 < chains.count ? chains[i + 1].baseTime : chain.lastTime
                let age = now.timeIntervalSince(PointRestore.date(end))
                let everything = chain.segments.map(\.key) + chain.markers.map(\.key) + chain.redundant.map(\.key)
                var decision = Decision(store: base.manifest.source.path, chain: chain.id, from: PointRestore.date(chain.baseTime),
                                        to: PointRestore.date(chain.lastTime), action: "keep", reason: "", segments: [])
                if i == chains.count - 1 {
                    decision.reason = "the store's newest chain"
                } else if age <= everyCommit {
                    decision.reason = "every commit within \(Format.duration(everyCommit))"
                } else if age <= bases {
                    // Every segment but the opening goes; the opening stays so the base is still a point.
                    let opening = chain.segments.first.map(\.key)
                    decision.segments = everything.filter { $0 != opening }.sorted()
                    decision.action = decision.segments.isEmpty ? "keep" : "thin"
                    decision.reason = "only its base after \(Format.duration(everyCommit)), within \(Format.duration(bases))"
                } else {
                    let opening = chain.segments.first.map(\.key)
                    decision.segments = everything.filter { $0 != opening }.sorted() + (opening.map { [$0] } ?? [])
                    decision.action = "remove"
                    decision.reason = "older than \(Format.duration(bases))"
                }
                out.append(decision)
            }
        }
        return out.sorted { ($0.store, $0.from) < ($1.store, $1.from) }
    }
}
