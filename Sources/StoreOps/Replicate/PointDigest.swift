import Foundation

/// Digests: what a span of a chain's points left, as one commit, so that a restore at a point
/// an hour into a chain reads a few digests and the one merged object holding its point instead
/// of every page version the app wrote since the base.
///
///     points/<store>/<chain>/digest-<from>-<to>-<first ms>-<last ms>
///
/// A digest is a segment (version 3, `digest: true`) holding one commit numbered `to`: every page
/// the span's commits wrote, each at its last version and content id, the database's page count
/// after the span (and the fewest it had within it: `truncatedTo`), and the external-data files
/// the span left (`files` present at its end, `removedBefore` gone within it, `removed` gone after
/// its last commit). Applied over the state before `from`, it gives exactly the state a replay of
/// points `from`…`to` gives: the same page ids and pages, the same files.
///
/// The follower writes one after each merge (level 1: about a minute) from the commits it still
/// holds, and one over every `fanIn` consecutive digests of a rank (read back from the
/// repository), so a restore an hour into a chain reads at most ~`fanIn` digests of each rank and
/// one merged object. Digests are optional: a restore uses one only where it ends just before a
/// segment it would read next (or at the point itself) and no later than the time asked; a
/// digest lost, never written (a follower killed first) or damaged is read around by replaying
/// the segments. A storectl that predates digests does not parse their keys and ignores them.
public enum PointDigest {
    /// The level in a `SegmentName` (its key says `digest`).
    public static let level = 3
    /// Consecutive digests of one rank that make one of the next.
    static let fanIn = 10
    /// The highest rank written: rank 3 spans ~100 merges (about 100 minutes), past a chain's
    /// hourly base.
    static let maxRank = 3
    /// A span whose last page versions pass this is not digested (it is replayed instead).
    static let maxBytes = 128 << 20
    /// A restore opens a digest sealed larger than this on its own (not two at once).
    static let openAloneBytes = 1 << 20

    /// What a span's commits leave, fed commit by commit in order (or digest by digest).
    struct Builder {
        var store: String
        var chain: String
        var from: Int
        var to: Int = 0
        var firstTime: Int64 = 0
        var lastTime: Int64 = 0
        var template: PointSegment?
        var pages: [UInt32: (id: ContentID, bytes: [UInt8])] = [:]
        var pageBytes = 0
        /// The page count after the last commit fed, and the fewest within the span (Int.max: none yet).
        var count = Int.max
        var lowest = Int.max
        var frame: UInt32 = 0
        /// Files present at the span's end that it added, in the order they were added.
        var files: [(file: PointSegment.FileAdd, bytes: [UInt8])] = []
        /// Names gone within the span (before its last commit's removals).
        var removedBefore: [String] = []
        /// The last commit's removals (they take effect after it).
        var removeNext: [String] = []
        var notCarried: [String] = []
        var tracked = true
        var commits = 0
        /// False once the span cannot be digested (too large, a commit not fed): nothing is written.
        var usable = true

        init(store: String, chain: String, from: Int) {
            self.store = store
            self.chain = chain
            self.from = from
        }

        /// One commit of the span, numbered `point` (the next after the last fed); or a digest's
        /// commit, spanning `first`…`point`.
        /// - Parameters:
        ///   - pageAt: its pages' bytes, in the order of `commit.pages`.
        ///   - fileAt: its files' bytes, in the order of `commit.files`.
        mutating func add(_ commit: PointSegment.Commit, first: Int? = nil, point: Int, of segment: PointSegment,
                          pageAt: (Int) -> [UInt8], fileAt: (Int) -> [UInt8]?) {
            guard usable else { return }
            guard first ?? point == (commits == 0 ? from : to + 1), point >= first ?? point, commit.pages.count == commit.ids.count else { usable = false; return }
            if template == nil {
                template = segment
                if commits == 0, firstTime == 0 { firstTime = commit.time }
            }
            if segment.externalData != true { tracked = false }
            // Removals due before this commit's files, as `PointFiles.apply` takes them.
            for name in removeNext + (commit.removedBefore ?? []) {
                files.removeAll { $0.file.name == name }
                if !removedBefore.contains(name) { removedBefore.append(name) }
            }
            removeNext = commit.removed ?? []
            for (k, file) in (commit.files ?? []).enumerated() {
                guard let bytes = fileAt(k) else { usable = false; return }
                files.removeAll { $0.file.name == file.name }
                files.append((file, bytes))
            }
            notCarried += commit.notCarried ?? []
            // The page count: a commit (or a digest's truncation) below the count before it drops
            // the pages past it, as a replay does; the fewest within the span is kept.
            let floor = Int(min(commit.truncatedTo ?? commit.pageCount, commit.pageCount))
            lowest = min(lowest, count, floor)
            if floor < count {
                pages = pages.filter { Int($0.key) <= floor }
                pageBytes = pages.values.reduce(0) { $0 + $1.bytes.count }
            }
            for (i, page) in commit.pages.enumerated() where page >= 1 && page <= commit.pageCount {
                let bytes = pageAt(i)
                if let old = pages[page] { pageBytes -= old.bytes.count }
                pages[page] = (commit.ids[i], bytes)
                pageBytes += bytes.count
            }
            count = Int(commit.pageCount)
            frame = commit.frame
            lastTime = commit.time
            to = point
            commits += 1
            if pageBytes + files.reduce(0, { $0 + $1.bytes.count }) > PointDigest.maxBytes {
                usable = false
                pages = [:]
                files = []
            }
        }

        /// Feeds every commit of an opened segment (a level-0 one, a merge's member, or a digest
        /// read as `name`: its first time is its name's).
        mutating func add(_ segment: PointSegment, name: SegmentName? = nil, pages: SegmentPages, files: [Data]) {
            if commits == 0, let name { firstTime = name.firstTime }
            var next = 0
            var fileIndex = 0
            for (k, commit) in segment.commits.enumerated() {
                let first = next
                let firstFile = fileIndex
                add(commit, first: segment.digest == true ? segment.from : nil, point: commit.point ?? (segment.from + k), of: segment,
                    pageAt: { pages[first + $0] },
                    fileAt: { firstFile + $0 < files.count ? [UInt8](files[firstFile + $0]) : nil })
                next += commit.pages.count
                fileIndex += commit.files?.count ?? 0
            }
        }

        var name: SegmentName {
            SegmentName(store: store, chain: chain, level: PointDigest.level, from: from, to: to, firstTime: firstTime, lastTime: lastTime)
        }

        /// The digest's one commit: what the span's commits leave.
        func commit() -> PointSegment.Commit? {
            guard usable, commits >= 2 else { return nil }
            let order = pages.keys.sorted()
            var commit = PointSegment.Commit(time: lastTime, point: to, frame: frame, pageCount: UInt32(count), pages: order,
                                             ids: order.map { pages[$0]?.id ?? .zero })
            commit.files = files.isEmpty ? nil : files.map(\.file)
            commit.removed = removeNext.isEmpty ? nil : removeNext
            commit.removedBefore = removedBefore.isEmpty ? nil : removedBefore
            commit.notCarried = notCarried.isEmpty ? nil : notCarried
            // A span that never had fewer pages than it ends with needs no truncation.
            commit.truncatedTo = lowest < count ? UInt32(lowest) : nil
            return commit
        }

        /// The digest, sealed; nil when the span cannot be digested (or holds fewer than two commits).
        func seal(sealer: Sealer, zstd: ZstdFrames) throws -> (SegmentName, Data)? {
            guard var segment = template, let commit = commit() else { return nil }
            let order = commit.pages
            segment.level = PointDigest.level
            segment.from = from
            segment.to = to
            segment.commits = [commit]
            segment.opening = nil
            segment.closed = nil
            segment.thinned = nil
            segment.digest = true
            segment.baseTime = nil
            segment.externalData = tracked ? true : nil
            let bytes = order.map { pages[$0]?.bytes ?? [] } + files.map(\.bytes)
            return (name, try segment.seal(pages: bytes, sealer: sealer, zstd: zstd, name: name))
        }
    }

    /// What a restore reads for the point at or before `time` in `segments` (the chain's, from
    /// its first, up to the one holding that point): at each segment, the longest digest that
    /// starts there, ends just before a later segment (or with the last) and holds no commit after
    /// `time`, instead of the segments it spans; else the segment itself.
    static func plan(_ digests: [SegmentName], segments: [SegmentName], time: Int64) -> [SegmentName] {
        guard let last = segments.last, !digests.isEmpty else { return segments }
        var startIndex: [Int: Int] = [:]
        for (k, segment) in segments.enumerated() { startIndex[segment.from] = k }
        let byFrom = Dictionary(grouping: digests.filter { $0.lastTime <= time && ($0.to == last.to || startIndex[$0.to + 1] != nil) }, by: \.from)
        var out: [SegmentName] = []
        var k = 0
        while k < segments.count {
            if let best = byFrom[segments[k].from]?.max(by: { $0.to < $1.to }) {
                out.append(best)
                k = best.to == last.to ? segments.count : (startIndex[best.to + 1] ?? segments.count)
            } else {
                out.append(segments[k])
                k += 1
            }
        }
        return out
    }

    /// The rank of a digest among `digests` of its chain: 1 for one no other digest lies within,
    /// else one more than the highest rank of those within it (spans equal to its own do not count).
    public static func rank(of digest: SegmentName, among digests: [SegmentName]) -> Int {
        // Narrowest spans first: each rank is known before any span holding it is looked at.
        var ranks: [ClosedRange<Int>: Int] = [:]
        let spans = Set(digests.map { $0.from...$0.to } + [digest.from...digest.to]).sorted { $0.count < $1.count }
        for span in spans {
            let inside = spans.filter { $0 != span && $0.count <= span.count && span.contains($0.lowerBound) && span.contains($0.upperBound) }
            ranks[span] = 1 + (inside.compactMap { ranks[$0] }.max() ?? 0)
        }
        return ranks[digest.from...digest.to] ?? 1
    }
}
