import Foundation

/// How long the points in time `storectl replicate` records are kept, by age, per store:
/// every commit for `everyCommit` (1 day by default), then the last commit of each minute until
/// `minutes` (7 days), then only each chain's base (one point every base interval: an hour by
/// default) until `bases` (30 days), then nothing. A store's newest chain is never touched (it
/// may be the one being followed).
public struct PointRetention: Sendable, Codable, Equatable {
    public var everyCommit: TimeInterval = 86_400
    public var minutes: TimeInterval = 7 * 86_400
    public var bases: TimeInterval = 30 * 86_400
    /// Set when the user gave any (a prune with only these is not an empty policy).
    public var explicit = false
    /// The period whose last commit thinning keeps (a minute; shorter in tests).
    public var period: TimeInterval = ProcessInfo.processInfo.environment["STORECTL_TEST_THIN_PERIOD_MS"].flatMap { Double($0) }.map { $0 / 1000 } ?? 60

    public init(everyCommit: TimeInterval = 86_400, minutes: TimeInterval = 7 * 86_400, bases: TimeInterval = 30 * 86_400, explicit: Bool = false) {
        self.everyCommit = everyCommit
        self.minutes = max(minutes, everyCommit)
        self.bases = max(bases, self.minutes)
        self.explicit = explicit
    }

    public struct Decision: Sendable, Codable, Equatable {
        public var store: String
        public var chain: String
        public var from: Date
        public var to: Date
        /// "keep", "thin" (to the last commit of each minute, in one segment), "bases" (segments
        /// removed, the base kept), "remove" (both).
        public var action: String
        public var reason: String
        /// The segment keys removed (thin: those the thinned segment replaces; bases, remove),
        /// opening last.
        public var segments: [String]
    }

    /// - Parameter continued: whether the next chain continued this one from a point past its base
    ///   (its opening says so): only such a chain is cut to its base, where the next one's
    ///   opening keeps where it ended.
    func decide(_ timeline: PointTimeline, records: [PagedSnapshotRecord], filter: SnapshotFilter, now: Date = Date(),
                continued: (_ next: PointTimeline.Chain, _ chain: PointTimeline.Chain) -> Bool = { _, _ in true }) throws -> [Decision] {
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
                // Removal order: the segments from the highest point down (a prune cut short
                // leaves a shorter chain, never one with a hole), what a merge or thinning left,
                // the markers, and last the opening (without it the chain is not listed).
                // Digests go first: a restore only reads one where the segments it spans are there.
                // Milestones before them (a marker gone, prune removes its record too).
                let data = chain.milestones.map(\.key) + chain.digests.map(\.key) + chain.segments.dropFirst().sorted { ($0.from, $0.level) > ($1.from, $1.level) }.map(\.key)
                let extras = chain.redundant.map(\.key).sorted() + chain.markers.map(\.key).sorted() + chain.alive.map(\.key).sorted()
                let opening = chain.segments.first.map(\.key)
                var decision = Decision(store: base.manifest.source.path, chain: chain.id, from: PointRestore.date(chain.baseTime),
                                        to: PointRestore.date(chain.lastTime), action: "keep", reason: "", segments: [])
                if i == chains.count - 1 {
                    decision.reason = "the store's newest chain"
                } else if age <= everyCommit {
                    decision.reason = "every commit within \(Format.duration(everyCommit))"
                } else if age <= minutes {
                    decision.reason = "the last commit of each minute after \(Format.duration(everyCommit)), within \(Format.duration(minutes))"
                    let thinned = chain.segments.contains { $0.level == PointThinning.level }
                    if !thinned, chain.segments.count > 1 {
                        decision.action = "thin"
                        decision.segments = data + chain.redundant.map(\.key).sorted()
                    }
                } else if age <= bases, !(data + extras).isEmpty, !continued(chains[i + 1], chain) {
                    // Cut to its base, a chain the next did not continue (a gap between them) would
                    // lose where it ended (its markers go too): listed as its base and a gap "replicate
                    // was not running" over minutes it was followed, and a restore there refused so
                    // (a trial). Kept thinned instead, until it is removed.
                    decision.reason = "the last commit of each minute, not its base alone (the next chain began after a gap: its base would not say where it ended), within \(Format.duration(bases))"
                    let thinned = chain.segments.contains { $0.level == PointThinning.level }
                    if !thinned, chain.segments.count > 1 {
                        decision.action = "thin"
                        decision.segments = data + chain.redundant.map(\.key).sorted()
                    }
                } else if age <= bases {
                    // Every segment but the opening goes; the opening stays so the base is still a point.
                    decision.segments = data + extras
                    decision.action = decision.segments.isEmpty ? "keep" : "bases"
                    decision.reason = "only its base after \(Format.duration(minutes)), within \(Format.duration(bases))"
                } else {
                    decision.segments = data + extras + (opening.map { [$0] } ?? [])
                    decision.action = "remove"
                    decision.reason = "older than \(Format.duration(bases))"
                }
                // Digests of a thinned chain span points it no longer has (a thinning cut short left them).
                let staleDigests = chain.segments.contains { $0.level == PointThinning.level } ? (chain.milestones + chain.digests).map(\.key) : []
                if decision.action == "keep", !chain.redundant.isEmpty || !staleDigests.isEmpty {
                    // What a thinning killed before its removals left: the thinned segment is read instead.
                    decision.action = "tidy"
                    decision.segments = staleDigests + chain.redundant.map(\.key).sorted()
                    decision.reason += "; \(Format.plural(chain.redundant.count + staleDigests.count, "segment", "segments")) a cut-short thinning left removed"
                }
                out.append(decision)
            }
        }
        return out.sorted { ($0.store, $0.from) < ($1.store, $1.from) }
    }
}

/// Thinning a chain to the last commit of each minute: its segments read in order, each kept
/// commit given every page the commits of its minute wrote (the last version of each), all in
/// one level-2 segment over the same points, written before the segments it replaces are
/// removed (a prune killed in between leaves both; the longer one is read, the others are
/// listed as redundant and removed by the next prune).
enum PointThinning {
    static let level = 2

    /// The most a thinned segment holds before the next one begins.
    static let segmentBytes = ProcessInfo.processInfo.environment["STORECTL_TEST_THIN_SEGMENT_BYTES"].flatMap { Int($0) } ?? 128 << 20   // tests: several thinned segments

    /// Writes the thinned segments (each read back and opened before anything is removed) and
    /// returns their names; nil when there was nothing to thin.
    static func thin(_ chain: PointTimeline.Chain, in repository: PagedRepository, period: TimeInterval = 60) throws -> [SegmentName]? {
        let periodMs = max(1, Int64((period * 1000).rounded()))
        let zstd = try ZstdFrames(level: 3)
        guard let first = chain.segments.dropFirst().first, let end = chain.segments.last else { return nil }
        var template: PointSegment?
        var written: [SegmentName] = []
        var kept: [PointSegment.Commit] = []
        var keptPages: [[UInt8]] = []
        var keptBytes = 0
        var start = first.from
        var minute: Int64?
        var pending: [UInt32: (id: ContentID, bytes: [UInt8])] = [:]
        // External-data files of the period's commits: every file that appeared (in order), and
        // every one that went, both moved to the kept commit (a removal then takes effect after
        // it: a kept point may hold a file already gone, never lack one it names).
        var pendingFiles: [(file: PointSegment.FileAdd, bytes: [UInt8])] = []
        var pendingRemoved: [String] = []
        var pendingOversized: [String] = []
        var tracked = true
        var last: PointSegment.Commit?
        var lastPoint = 0
        var lastCursor: WalCursor?
        func write(to: Int) throws {
            guard var segment = template, !kept.isEmpty else { return }
            segment.level = level
            segment.from = start
            segment.to = to
            segment.commits = kept
            segment.opening = nil
            segment.closed = nil
            segment.thinned = Int(period.rounded())
            segment.externalData = tracked ? true : nil
            if let lastCursor { segment.cursor = lastCursor }
            let name = SegmentName(store: chain.store, chain: chain.id, level: level, from: start, to: to,
                                   firstTime: kept.first?.time ?? 0, lastTime: kept.last?.time ?? 0)
            try repository.backend.write(name.key, try segment.seal(pages: keptPages, sealer: repository.sealer, zstd: zstd, name: name),
                                         point: "prune.points.thin")
            // Read back and opened before what it replaces goes.
            guard let back = try repository.backend.read(name.key) else {
                throw StoreOpsError(.ioError, "the thinned segment \(repository.backend.describe(name.key)) cannot be read back")
            }
            _ = try PointSegment.open(back, name: name, sealer: repository.sealer, zstd: zstd, location: repository.location)
            written.append(name)
            kept = []
            keptPages = []
            keptBytes = 0
            start = to + 1
        }
        func emit() throws {
            guard var commit = last else { return }
            let pages = pending.keys.sorted()
            commit.pages = pages
            commit.ids = pages.map { pending[$0]?.id ?? .zero }
            commit.point = lastPoint
            for page in pages { let bytes = pending[page]?.bytes ?? []; keptBytes += bytes.count; keptPages.append(bytes) }
            commit.files = pendingFiles.isEmpty ? nil : pendingFiles.map(\.file)
            commit.removed = pendingRemoved.isEmpty ? nil : pendingRemoved
            commit.notCarried = pendingOversized.isEmpty ? nil : pendingOversized
            for file in pendingFiles { keptBytes += file.bytes.count; keptPages.append(file.bytes) }
            kept.append(commit)
            pending = [:]
            pendingFiles = []
            pendingRemoved = []
            pendingOversized = []
            if keptBytes >= segmentBytes { try write(to: lastPoint) }
        }
        for name in chain.segments.dropFirst() {
            try ProcessSignals.checkpoint("thinning points")
            guard let sealed = try repository.backend.read(name.key) else {
                throw StoreOpsError(.badData, "point segment \(repository.backend.describe(name.key)) is listed but cannot be read", hint: Sealer.damagedHint)
            }
            for (segment, pages, contents) in try PointSegment.openAll(sealed, name: name, sealer: repository.sealer, zstd: zstd, location: repository.location) {
                if template == nil { template = segment }
                if segment.externalData != true { tracked = false }
                var next = 0
                var files = contents.makeIterator()
                for (k, commit) in segment.commits.enumerated() {
                    let bucket = commit.time / periodMs
                    if let minute, bucket != minute { try emit() }
                    minute = bucket
                    for file in commit.files ?? [] {
                        guard let bytes = files.next() else { break }
                        pendingFiles.removeAll { $0.file.name == file.name }
                        pendingRemoved.removeAll { $0 == file.name }
                        pendingFiles.append((file, [UInt8](bytes)))
                    }
                    for name in commit.removed ?? [] where !pendingRemoved.contains(name) { pendingRemoved.append(name) }
                    pendingOversized += commit.notCarried ?? []
                    for (i, page) in commit.pages.enumerated() { pending[page] = (commit.ids[i], pages[next + i]) }
                    next += commit.pages.count
                    last = commit
                    lastPoint = commit.point ?? (segment.from + k)
                    // A period whose external-data files outgrow a thinned segment keeps this commit
                    // too (one more point), so no segment grows past what one may hold.
                    if pendingFiles.reduce(0, { $0 + $1.bytes.count }) >= segmentBytes { try emit() }
                }
                lastCursor = segment.cursor
            }
        }
        try emit()
        try write(to: end.to)
        return written.isEmpty ? nil : written
    }
}
