import Foundation
import Crypto

/// `storectl repo check [--read-data]`: is every listed snapshot whole? Reads only what it must:
/// the config, key files, indexes, each pack's own header (compared with the index), every
/// snapshot record and page map, and that each blob a snapshot needs is indexed. With
/// `--read-data` every frame of every pack is also read, authenticated, decompressed and each
/// blob checked against its content id. Nothing is written.
public enum RepositoryCheck {
    public struct Options: Sendable {
        public var location: String
        public var password: PasswordSource
        public var readData = false

        public init(location: String, password: PasswordSource, readData: Bool = false) {
            self.location = location
            self.password = password
            self.readData = readData
        }
    }

    public struct Report: Sendable, Codable {
        public var location: String
        public var format: Int
        public var encrypted: Bool
        public var snapshots = 0
        public var packs = 0
        public var indexes = 0
        public var blobs = 0
        /// Points in time (`storectl replicate`): segments and the chains they form.
        public var pointSegments = 0
        public var pointChains = 0
        public var readData = false
        /// Damage: a listed snapshot may not restore. Exit 2.
        public var problems: [String] = []
        /// The snapshots a problem names as not restoring whole (its record, or blobs it needs).
        public var damagedSnapshots: [String] = []
        /// Worth knowing, not damage (stale locks, packs a dead writer left unindexed).
        public var notes: [String] = []
        public var ok: Bool { problems.isEmpty }
    }

    /// How a check ended: ok, or checks failed (2) with the problems.
    public static func ending(of report: Report) -> Ending {
        guard !report.ok else { return .ok }
        return Ending(.checksFailed, error: StoreOpsError(.checksFailed, "\(Format.plural(report.problems.count, "problem", "problems")) in \(report.location)"))
    }

    public static func run(_ options: Options, progress: StepHandler? = nil) throws -> Report {
        let repository = try PagedRepository.open(at: options.location, password: options.password)
        let hold = try RepositoryHold.take(repository, operation: "repo check", exclusive: false, wait: false, readsOnly: true)
        defer { hold.release() }
        var report = try check(repository, readData: options.readData, progress: progress)
        if !hold.removedStray.isEmpty {
            // Taking the repository cleans up what dead runs left (a killed writer's or prune's
            // packs no index lists, unfinished uploads): said, not done in silence.
            // Some come back described already (a path, an s3:// name), some as keys.
            let shown = hold.removedStray.prefix(5).map { $0.hasPrefix("/") || $0.contains("://") ? $0 : repository.backend.describe($0) }.joined(separator: ", ")
            report.notes.insert("removed \(Format.plural(hold.removedStray.count, "object", "objects")) a dead run left (no index or snapshot uses them): \(shown)\(hold.removedStray.count > 5 ? ", and \(hold.removedStray.count - 5) more" : "")", at: 0)
        }
        return report
    }

    static func check(_ repository: PagedRepository, readData: Bool, progress: StepHandler?) throws -> Report {
        var report = Report(location: repository.location, format: 2, encrypted: repository.config.isEncrypted, readData: readData)
        try checkKeysAndLocks(repository, into: &report)
        let indexes = try scanIndexes(repository, into: &report)
        var damagedPacks: [ContentID: Int] = [:]
        let stored = try checkPacks(repository, indexes: indexes, damagedPacks: &damagedPacks, into: &report)
        var files: [FileChunksKey: [String]] = [:]
        let needs = try checkSnapshots(repository, indexes: indexes, files: &files, into: &report)
        try checkPoints(repository, readData: readData, into: &report)
        if readData {
            try readEveryPack(repository, indexes: indexes, stored: stored, damagedPacks: &damagedPacks, progress: progress, into: &report)
            try reassembleFiles(files, repository: repository, indexes: indexes, damagedPacks: damagedPacks, progress: progress, into: &report)
        }
        attribute(damagedPacks, needs: needs, into: &report)
        // A problem found once per index that lists it (a missing pack in ten indexes) is said once.
        var seen = Set<String>()
        report.problems = report.problems.filter { seen.insert($0).inserted }
        return report
    }

    /// The packs each snapshot reads from (where restore finds its blobs: the first index entry).
    typealias PackNeeds = [(snapshot: String, packs: Set<ContentID>)]

    /// Names, on each damaged pack's problem line, the snapshots that read blobs from it, and
    /// adds them to `damagedSnapshots` (the one place a pack's damage and a snapshot meet).
    static func attribute(_ damagedPacks: [ContentID: Int], needs: PackNeeds, into report: inout Report) {
        guard !damagedPacks.isEmpty else { return }
        for (pack, line) in damagedPacks.sorted(by: { $0.value < $1.value }) where line < report.problems.count {
            let reaching = needs.filter { $0.packs.contains(pack) }.map(\.snapshot)
            if reaching.isEmpty {
                report.problems[line] += " (no snapshot listed reads from it)"
                continue
            }
            let names = reaching.prefix(5).joined(separator: ", ") + (reaching.count > 5 ? ", and \(reaching.count - 5) more" : "")
            report.problems[line] += "; \(Format.plural(reaching.count, "snapshot reads", "snapshots read")) from it: \(names)"
            for id in reaching where !report.damagedSnapshots.contains(id) { report.damagedSnapshots.append(id) }
        }
    }

    /// Every chain of points has its base; with `readData`, every segment opens (authenticated)
    /// and every page in it matches its content id.
    private static func checkPoints(_ repository: PagedRepository, readData: Bool, into report: inout Report) throws {
        let timeline = try PointTimeline.load(repository)
        let snapshots = Set(try repository.backend.list("snapshots/").map { String($0.key.dropFirst("snapshots/".count)) })
        let zstd = try ZstdFrames(level: 3)
        for chain in timeline.chains {
            report.pointChains += 1
            report.pointSegments += chain.segments.count + chain.markers.count + chain.digests.count
            report.problems += wholeness(of: chain, in: repository, snapshots: snapshots)
            if !chain.redundant.isEmpty {
                report.notes.append("chain \(chain.id): \(Format.plural(chain.redundant.count, "segment", "segments")) a merge or prune left (unused)")
            }
            // A milestone's marker names its record (the record itself is checked with the snapshots);
            // one that does not is read around by restores, so it is a note, not a problem.
            for name in chain.milestones {
                do { _ = try PointMilestone.record(name, in: repository) } catch let error as StoreOpsError where error.status == .badData || error.status == .noInput {
                    report.notes.append("chain \(chain.id): milestone at point \(name.to) is not used (\(error.message)); restores start from an earlier one or the base")
                }
            }
            guard readData else { continue }
            report.problems += try readSegments(of: chain, in: repository, zstd: zstd).problems
        }
        for chain in timeline.chains {
            if let problem = try hole(in: chain, repository: repository) { report.problems.append(problem) }
        }
        for chain in try orphanChains(in: repository, timeline: timeline) {
            report.problems.append(orphanProblem(chain))
        }
    }

    /// Segments past a hole in their chain (one before them missing, with no marker naming it:
    /// `wholeness` says that case). Judged on one listing of the chain (a running replicate adds
    /// segments after the timeline was loaded: past its last point, but not past a hole): a
    /// segment whose points do not follow any listed segment's. `snapshot verify --all` asks too
    /// (a trial: a middle segment removed, repo check 2, verify "ok" for the chain's first points).
    static func hole(in chain: PointTimeline.Chain, repository: PagedRepository) throws -> String? {
        guard chain.missingThrough == nil else { return nil }
        let listed = try repository.backend.list("points/\(chain.store)/\(chain.id)/").compactMap { SegmentName.parse($0.key) }
            .filter { $0.level < PointTimeline.stoppedLevel && $0.level != PointDigest.level && $0.level != PointMilestone.level }
        // Swept in order of their first point: a segment starting past every point the ones
        // before it cover follows a hole (a merge's leftover members sit inside its range).
        var covered = -1
        for segment in listed.sorted(by: { ($0.from, $0.to) < ($1.from, $1.to) }) {
            if segment.from > covered + 1 {
                let (before, first) = (covered + 1, segment.from)
                let stranded = listed.filter { $0.from >= first }
                return "chain \(chain.id): points \(before)…\(first - 1) are not in \(repository.location) (a segment is missing), so \(Format.plural(stranded.count, "segment", "segments")) after them restore nothing: a restore after point \(max(0, before - 1)) in this chain is refused"
            }
            covered = max(covered, segment.to)
        }
        return nil
    }

    /// Chains whose segments are there without their opening segment: their points are lost. A
    /// replicate writes a chain's opening first, and prune removes it last (after the segments
    /// from the end back), so no run cut short leaves this; the opening was removed.
    /// Judged on one listing (a chain a running replicate opens meanwhile has its opening in it:
    /// the opening is written first).
    static func orphanChains(in repository: PagedRepository, timeline: PointTimeline) throws -> [String] {
        var chains: [String: (chain: String, opened: Bool)] = [:]
        for (key, _) in try repository.backend.list("points/") {
            guard let name = SegmentName.parse(key) else { continue }
            let id = "\(name.store)/\(name.chain)"
            let opening = name.level == 0 && name.from == 0 && name.to == 0
            chains[id] = (name.chain, (chains[id]?.opened ?? false) || opening)
        }
        return chains.values.filter { !$0.opened }.map(\.chain).sorted()
    }

    static func orphanProblem(_ chain: String) -> String {
        "chain \(chain) has segments but no opening segment: none of its points restores (its opening was removed: "
            + "a replicate writes it first and prune removes it last), and `snapshot list --points` does not show it"
    }

    /// What a chain lacks without reading its segments: its base snapshot, a segment a marker names.
    static func wholeness(of chain: PointTimeline.Chain, in repository: PagedRepository, snapshots: Set<String>) -> [String] {
        var problems: [String] = []
        if !snapshots.contains(chain.id) {
            problems.append("the points of chain \(chain.id) have no base (snapshot \(chain.id) is missing): none of them restores")
        }
        if let missing = chain.missingThrough {
            problems.append("chain \(chain.id): points \(chain.points)…\(missing) are not in \(repository.location) (a segment is missing): a restore after \(Timestamp.iso(PointRestore.date(chain.lastTime))) in this chain is refused; earlier points restore")
        }
        return problems
    }

    /// Reads every segment (and digest) of a chain: each opens (authenticated) and every page in
    /// it matches its content id. Returns the problems, each naming the first point it costs, and
    /// the store's path as the first segment read records it.
    static func readSegments(of chain: PointTimeline.Chain, in repository: PagedRepository, zstd: ZstdFrames) throws -> (problems: [String], store: String?) {
        var problems: [String] = []
        var store: String?
        // Every page of every point has a source: the base, or a commit at or before it (a
        // restore refuses a page neither holds, 65). Replayed as a restore applies the chain's
        // segments (the opening aside); a trial's outage lost a batch, and later points named
        // pages nothing held, while this check read every segment and said ok.
        var coverage = try? PageCoverage(chain: chain, in: repository)
        let applied = Set(chain.segments.dropFirst().map(\.key))
        // Each digest against what the commits it spans leave (a restore reads the digest
        // instead of them: one that opens but says other pages restores wrong, or is refused
        // with the chain's base named).
        var digests = DigestReplay(chain.digests)
        // The stop, resume and alive markers too: what restores claim after a point rests on them
        // (their names' times are checked against what they seal).
        for name in chain.segments + chain.digests + chain.markers + chain.alive {
            let lost = name.level == PointTimeline.resumedLevel
                ? "a restore after point \(name.to) of chain \(chain.id) cannot tell the span no commit is claimed in"
                : name.level >= PointTimeline.stoppedLevel
                ? "a restore after point \(name.to) of chain \(chain.id) is not claimed by it"
                : "points \(name.from)… of chain \(chain.id) (from \(Timestamp.iso(PointRestore.date(name.firstTime)))) do not restore; --at before it does"
            do {
                guard let sealed = try repository.backend.read(name.key) else {
                    // A running replicate's merge removes the segments it merged (under a shared
                    // hold, as this read): gone from the listing too, it was merged, not lost.
                    let folder = (name.key as NSString).deletingLastPathComponent + "/"
                    if try repository.backend.list(folder).contains(where: { $0.key == name.key }) {
                        problems.append("point segment \(repository.backend.describe(name.key)) is listed but cannot be read: \(lost)")
                    }
                    // Its commits are not replayed: pages it grew would be taken for lost.
                    if applied.contains(name.key) { coverage = nil }
                    continue
                }
                for (segment, pages, _) in try PointSegment.openAll(sealed, name: name, sealer: repository.sealer, zstd: zstd, location: repository.location) {
                    store = store ?? segment.path
                    let ids = segment.commits.flatMap(\.ids)
                    for (i, page) in pages.enumerated() where i >= ids.count || repository.sealer.contentID(page) != ids[i] {
                        problems.append("point segment \(repository.backend.describe(name.key)) (points \(segment.from)-\(segment.to)): page \(i + 1) does not match its content id: \(lost)")
                        break
                    }
                    if applied.contains(name.key), let problem = coverage?.apply(segment, name: name, in: repository) {
                        problems.append(problem)
                        coverage = nil   // one problem a chain: the points after it fail the same way
                    }
                    if applied.contains(name.key) {
                        digests.feed(segment)
                    } else if name.level == PointDigest.level, let problem = digests.compare(segment, name: name, in: repository) {
                        problems.append(problem)
                    }
                }
            } catch let error as StoreOpsError where error.status == .badData {
                problems.append("\(error.message): \(lost)")
                if applied.contains(name.key) { coverage = nil }
            }
        }
        return (problems, store)
    }

    /// What each digest of a chain should say, replayed from the commits its span holds (fed in
    /// order, as the check reads the chain's segments), kept as a hash of the digest's commit
    /// as the follower seals it (`PointDigest.Builder`) and the figures a problem names. A span
    /// whose commits are not all there (thinned, a segment missing) is not judged.
    struct DigestReplay {
        struct Expected { var fingerprint: [UInt8]; var pageCount: UInt32; var pages: Int; var truncatedTo: UInt32? }
        private var open: [SegmentName: PointDigest.Builder] = [:]
        private var pending: [SegmentName]
        private(set) var expected: [SegmentName: Expected] = [:]

        init(_ digests: [SegmentName]) { pending = digests.sorted { $0.from < $1.from } }

        mutating func feed(_ segment: PointSegment) {
            for (k, commit) in segment.commits.enumerated() {
                let point = commit.point ?? (segment.from + k)
                while let next = pending.first, next.from <= point {
                    pending.removeFirst()
                    if next.from == point { open[next] = PointDigest.Builder(store: next.store, chain: next.chain, from: next.from) }
                }
                for name in Array(open.keys) {
                    open[name]?.add(commit, point: point, of: segment, pageAt: { _ in [] }, fileAt: { _ in [] })
                    guard point >= name.to, let builder = open.removeValue(forKey: name) else { continue }
                    if builder.usable, builder.to == name.to, let commit = builder.commit() {
                        expected[name] = Expected(fingerprint: Self.fingerprint(commit), pageCount: commit.pageCount, pages: commit.pages.count,
                                                  truncatedTo: commit.truncatedTo)
                    }
                }
            }
        }

        /// The problem with a digest that does not say what its commits leave, or nil.
        func compare(_ digest: PointSegment, name: SegmentName, in repository: PagedRepository) -> String? {
            guard let want = expected[name], digest.commits.count == 1, let got = digest.commits.first else { return nil }
            guard Self.fingerprint(got) != want.fingerprint else { return nil }
            var what: [String] = []
            if got.pageCount != want.pageCount { what.append("says \(Format.count(Int(got.pageCount))) pages, they leave \(Format.count(Int(want.pageCount)))") }
            if got.truncatedTo != want.truncatedTo {
                what.append("says the fewest pages within it were \(got.truncatedTo.map { Format.count(Int($0)) } ?? "its last count"), they leave \(want.truncatedTo.map { Format.count(Int($0)) } ?? "its last count")")
            }
            if got.pages.count != want.pages { what.append("holds \(Format.count(got.pages.count)) pages, they wrote \(Format.count(want.pages))") }
            if what.isEmpty { what.append("names other pages, content ids or external-data files than they leave") }
            return "digest \(repository.backend.describe(name.key)) (points \(name.from)-\(name.to)) does not say what the commits it spans leave (it \(what.joined(separator: "; "))): "
                + "restores at point \(name.to) and later read it instead of them (and restore other content, or are refused); "
                + "remove that object (a digest is optional: restores then replay its commits)"
        }

        /// What a restore takes from a digest's commit: its page count and fewest pages, every
        /// page and content id, and the external-data files present at its end and gone after it.
        static func fingerprint(_ commit: PointSegment.Commit) -> [UInt8] {
            var hasher = SHA256()
            func add(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { hasher.update(bufferPointer: $0) } }
            func add(_ text: String) { add(UInt32(text.utf8.count)); hasher.update(data: Data(text.utf8)) }
            add(commit.pageCount)
            add(commit.truncatedTo.map { $0 &+ 1 } ?? 0)
            let order = commit.pages.indices.sorted { commit.pages[$0] < commit.pages[$1] }
            add(UInt32(order.count))
            for i in order where i < commit.ids.count {
                add(commit.pages[i])
                withUnsafeBytes(of: commit.ids[i].words) { hasher.update(bufferPointer: $0) }
            }
            let files = (commit.files ?? []).sorted { $0.name < $1.name }
            add(UInt32(files.count))
            for file in files { add(file.name); add(UInt32(truncatingIfNeeded: file.bytes)); add(file.sha256) }
            let removed = Set(commit.removed ?? []).sorted()
            add(UInt32(removed.count))
            for name in removed { add(name) }
            return Array(hasher.finalize())
        }
    }

    /// The pages a chain's points have so far, replayed commit by commit from the base's count:
    /// a commit that grows the store must carry every new page (SQLite writes each; the lock-byte
    /// page aside), or the points from it name a page nothing holds.
    struct PageCoverage {
        var count: Int
        var missing = Set<Int>()
        let lockBytePage: Int
        let chain: String

        init(chain: PointTimeline.Chain, in repository: PagedRepository) throws {
            let base = try repository.record(chain.id)
            count = base.pages.pageCount
            lockBytePage = LockState.pendingByte / base.pages.pageSize + 1
            self.chain = chain.id
        }

        /// Applies a segment's commits; the first point left with a page no source holds, as a problem.
        mutating func apply(_ segment: PointSegment, name: SegmentName, in repository: PagedRepository) -> String? {
            for (k, commit) in segment.commits.enumerated() {
                let point = commit.point ?? (segment.from + k)
                let pageCount = Int(commit.pageCount)
                if let page = commit.impossiblePage(countBefore: count) {
                    return "chain \(chain): point \(point) (\(repository.backend.describe(name.key))) holds page \(page), which a database of \(Format.count(max(count, pageCount))) pages cannot have: points from \(point) do not restore; --at before \(Timestamp.iso(PointRestore.date(commit.time))) does"
                }
                if let floor = commit.truncatedTo.map(Int.init), count > floor {
                    missing = missing.filter { $0 <= floor }
                    count = floor
                }
                if count > pageCount {
                    missing = missing.filter { $0 <= pageCount }
                    count = pageCount
                }
                if count < pageCount {
                    guard pageCount - count <= commit.pages.count + WalFollower.pageSlack else {
                        return "chain \(chain): point \(point) (\(repository.backend.describe(name.key))) says \(Format.count(pageCount)) pages, far more than it and the points before hold: points from \(point) do not restore; --at before \(Timestamp.iso(PointRestore.date(commit.time))) does"
                    }
                    for page in (count + 1)...pageCount where page != lockBytePage { missing.insert(page) }
                    count = pageCount
                }
                for page in commit.pages where Int(page) <= pageCount { missing.remove(Int(page)) }
                if let page = missing.min() {
                    return "chain \(chain): page \(page) of point \(point) (\(repository.backend.describe(name.key))) is in neither the base nor a commit of the chain (a batch of commits before it was lost): points from \(point) do not restore until a commit writes that page again; --at before \(Timestamp.iso(PointRestore.date(commit.time))) does"
                }
            }
            return nil
        }
    }

    /// What the indexes say: each pack's contents, where each blob is, and which blobs are pages
    /// as restore takes them (an index entry of type page whose length is the page size).
    struct IndexedBlobs {
        var packs: [ContentID: PackContents] = [:]
        var locations: [ContentID: BlobLocation] = [:]
        var pageLengths: [ContentID: UInt32] = [:]
        var damaged: [RepositoryIndex.Damaged] = []
    }

    private static func checkKeysAndLocks(_ repository: PagedRepository, into report: inout Report) throws {
        if repository.config.isEncrypted {
            report.problems += try PagedRepository.keyFiles(repository.backend).damaged.map { "key file \(repository.backend.describe($0.key)) \($0.problem)" }
        }
        for lock in try RepositoryLock.list(repository.backend) where lock.stale {
            report.notes.append("stale lock \(repository.backend.describe(lock.key)) (\(lock.record.map { "\($0.operation) by pid \($0.pid) on \($0.host)" } ?? "unreadable")): the next writer removes it")
        }
    }

    private static func scanIndexes(_ repository: PagedRepository, into report: inout Report) throws -> IndexedBlobs {
        var found = IndexedBlobs()
        var conflicts: [String] = []
        found.damaged = try RepositoryIndex.scan(repository) { key, pack, contents in
            if let known = found.packs[pack], known != contents {
                conflicts.append("pack \(pack.hex.prefix(16))… is described differently by two indexes (one is \(key))")
            }
            found.packs[pack] = contents
            for frame in contents.frames { for blob in frame.blobs {
                if found.locations[blob.id] == nil { found.locations[blob.id] = BlobLocation(pack: pack, frame: frame, blob: blob) }
                if blob.type == .page { found.pageLengths[blob.id] = blob.length }
            } }
        }
        report.problems += conflicts
        report.indexes = try repository.backend.list("index/").count
        report.problems += found.damaged.map { damaged in
            let named = damaged.problem.hasPrefix("index ") ? damaged.problem : "index \(repository.backend.describe(damaged.key)): \(damaged.problem)"
            return "\(named) (`storectl repo repair --repo \(repository.location)` rebuilds the index from the packs)"
        }
        report.blobs = found.locations.count
        return found
    }

    /// Each indexed pack exists and its own header agrees; unindexed ones are noted. Returns the
    /// packs stored.
    private static func checkPacks(_ repository: PagedRepository, indexes: IndexedBlobs, damagedPacks: inout [ContentID: Int],
                                   into report: inout Report) throws -> Set<String> {
        let stored = Set(try repository.backend.list("data/").map(\.key))
        report.packs = stored.count
        for (pack, contents) in indexes.packs.sorted(by: { $0.key < $1.key }) {
            let key = PackBuilder.key(pack)
            guard stored.contains(key) else {
                damagedPacks[pack] = report.problems.count
                report.problems.append("pack \(repository.backend.describe(key)) is listed by an index but missing")
                continue
            }
            do {
                // In a bucket, a header that does not open is read once more (damage on the way).
                let header: PackContents
                do { header = try PackBuilder.readHeader(repository.backend, id: pack, sealer: repository.sealer) } catch let first as StoreOpsError
                    where first.status == .badData && !(repository.backend is LocalBackend) {
                    header = try PackBuilder.readHeader(repository.backend, id: pack, sealer: repository.sealer)
                    report.notes.append("\(first.message); read again, it was whole: the damage was on the way, not in the repository")
                }
                // Layout 2's header lists no ids: the index's are checked against the blobs by --read-data.
                if header != contents.withoutIDs {
                    damagedPacks[pack] = report.problems.count
                    report.problems.append("pack \(repository.backend.describe(key)): its header and the index disagree")
                }
            } catch let error as StoreOpsError where error.status == .badData {
                damagedPacks[pack] = report.problems.count
                report.problems.append(error.message)
            }
        }
        let unindexed = stored.subtracting(indexes.packs.keys.map(PackBuilder.key))
        if !unindexed.isEmpty {
            report.notes.append("\(Format.plural(unindexed.count, "pack is", "packs are")) in no index (left by a writer that stopped before indexing them, or their index was lost): if a snapshot needs them, `storectl repo repair` indexes them; otherwise `storectl snapshot prune` removes them")
        }
        return stored
    }

    /// Every record opens; every blob it needs is indexed (pages as pages of its page size).
    /// An external-data file as records name it: the same chunks and SHA-256 are read once
    /// however many snapshots hold the file.
    struct FileChunksKey: Hashable {
        var file: PagedSnapshotRecord.FileChunks
        func hash(into hasher: inout Hasher) { hasher.combine(file.sha256); hasher.combine(file.bytes); hasher.combine(file.chunks) }
        static func == (a: Self, b: Self) -> Bool { a.file.sha256 == b.file.sha256 && a.file.bytes == b.file.bytes && a.file.chunks == b.file.chunks }
    }

    /// `--read-data`: each external-data file reassembled from its chunks (read again, one at a
    /// time) and its SHA-256 compared with its record's, as a restore does: a chunk's id says the
    /// chunk is whole, not that the record names the right ones in the right order. Files whose
    /// chunks are in a damaged pack are said with the pack.
    private static func reassembleFiles(_ files: [FileChunksKey: [String]], repository: PagedRepository, indexes: IndexedBlobs,
                                        damagedPacks: [ContentID: Int], progress: StepHandler?, into report: inout Report) throws {
        guard !files.isEmpty else { return }
        let started = Date()
        var done: UInt64 = 0
        let zstd = try ZstdFrames(level: 3)
        for (key, snapshots) in files.sorted(by: { $0.value[0] == $1.value[0] ? $0.key.file.path < $1.key.file.path : $0.value[0] < $1.value[0] }) {
            if key.file.chunks.contains(where: { indexes.locations[$0].map { damagedPacks[$0.pack] != nil } ?? true }) { continue }
            try ProcessSignals.checkpoint("checking \(repository.location)")
            progress?(ProgressUpdate(phase: "reassembling external-data files", done: done, total: UInt64(files.count), unit: .files, bytes: 0, startedAt: started))
            done += 1
            do {
                try PagedExtraction.writeFiles([key.file], repository: repository, into: nil, context: "snapshot \(snapshots[0])",
                                               locations: indexes.locations, zstd: zstd)
            } catch let error as StoreOpsError where error.status == .badData {
                let others = snapshots.count > 1 ? " (\(Format.plural(snapshots.count - 1, "other snapshot holds", "other snapshots hold")) it too: \(snapshots.dropFirst().prefix(5).joined(separator: ", ")))" : ""
                report.problems.append(error.message + others)
                for id in snapshots where !report.damagedSnapshots.contains(id) { report.damagedSnapshots.append(id) }
            }
        }
    }

    private static func checkSnapshots(_ repository: PagedRepository, indexes: IndexedBlobs, files: inout [FileChunksKey: [String]],
                                       into report: inout Report) throws -> PackNeeds {
        var needs: PackNeeds = []
        let (records, damagedRecords) = try repository.catalog()
        report.snapshots = records.count + damagedRecords.count
        report.problems += damagedRecords.map { "snapshot \($0.id): \($0.problem)" }
        report.damagedSnapshots += damagedRecords.map(\.id)
        for record in records {
            // The map's and the files' packs are known from the record alone (a map that cannot be
            // read still names the pack that holds it); the pages' once the map is read.
            var packs = Set(record.otherBlobs.compactMap { indexes.locations[$0.0]?.pack })
            defer { needs.append((record.id, packs)) }
            do {
                let ids = try BlobLocator.pageMap(of: record, in: repository, locations: indexes.locations, damaged: indexes.damaged).ids
                for id in Set(ids) { if let at = indexes.locations[id] { packs.insert(at.pack) } }
                var missing = 0
                var first: ContentID?
                for id in Set(ids) where indexes.pageLengths[id].map({ Int($0) != record.pages.pageSize }) ?? true {
                    missing += 1
                    first = first ?? id
                }
                for (id, _) in record.otherBlobs where indexes.locations[id] == nil {
                    missing += 1
                    first = first ?? id
                }
                if let first {
                    report.problems.append("snapshot \(record.id): \(Format.plural(missing, "blob is", "blobs are")) in no index as restore needs \(missing == 1 ? "it" : "them") (first \(first.hex.prefix(16))…)")
                    report.damagedSnapshots.append(record.id)
                }
                // Each external-data file's size is what its chunks hold (restore refuses it otherwise).
                for file in record.files {
                    files[FileChunksKey(file: file), default: []].append(record.id)
                    let lengths = file.chunks.compactMap { indexes.locations[$0]?.blob.length }
                    guard lengths.count == file.chunks.count else { continue }
                    let held = lengths.reduce(UInt64(0)) { $0 + UInt64($1) }
                    if held != file.bytes {
                        report.problems.append("snapshot \(record.id): external-data file \(file.path) is recorded as \(Format.count(file.bytes)) bytes, its chunks hold \(Format.count(held))")
                        if !report.damagedSnapshots.contains(record.id) { report.damagedSnapshots.append(record.id) }
                    }
                }
            } catch let error as StoreOpsError where error.status == .badData {
                report.problems.append(error.message)
                report.damagedSnapshots.append(record.id)
            }
        }
        return needs
    }

    /// `--read-data`: every frame of every stored, indexed pack read, authenticated,
    /// decompressed and checked against its content ids.
    private static func readEveryPack(_ repository: PagedRepository, indexes: IndexedBlobs, stored: Set<String>,
                                      damagedPacks: inout [ContentID: Int], progress: StepHandler?, into report: inout Report) throws {
        let zstd = try ZstdFrames(level: 3)
        let started = Date()
        let total = indexes.packs.values.reduce(UInt64(0)) { $0 + $1.frames.reduce(0) { $0 + UInt64($1.sealedLength) } }
        var done: UInt64 = 0
        for (pack, contents) in indexes.packs.sorted(by: { $0.key < $1.key }) where stored.contains(PackBuilder.key(pack)) {
            progress?(ProgressUpdate(phase: "reading every pack", done: done, total: total, unit: .bytes, bytes: done, startedAt: started))
            try ProcessSignals.checkpoint("checking \(repository.location)")
            // Neighbouring frames in one read (one request per 4 MiB in a bucket); the first
            // problem of a pack ends its reading.
            do {
                try BlobLocator.checkPack(pack, frames: contents.frames, repository: repository, zstd: zstd) { done += UInt64($0.sealedLength) }
            } catch let error as StoreOpsError where error.status == .badData {
                // In a bucket, read once more before calling it damaged (bytes damaged on the way
                // made a healthy repository "damaged", a trial); said either way.
                if !(repository.backend is LocalBackend),
                   (try? BlobLocator.checkPack(pack, frames: contents.frames, repository: repository, zstd: zstd)) != nil {
                    report.notes.append("\(error.message); read again, it was whole: the damage was on the way, not in the repository")
                    continue
                }
                if damagedPacks[pack] == nil { damagedPacks[pack] = report.problems.count }
                report.problems.append(error.message)
            }
        }
    }
}
