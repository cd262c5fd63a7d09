import Foundation
import Logging
import Synchronization

/// The pages a point changed on top of its chain's base: the point's page ids (what restore
/// checks the file against) and the last version of each page its commits wrote (held in
/// memory up to a budget, the rest in a scratch file: `OverlayPages`).
struct PointOverlay {
    var ids: [ContentID]
    var pages: OverlayPages
    var pageSize: Int
    /// External-data files the base does not hold, from the store's next snapshot after the
    /// point (its next base, or a scheduled one), for chains whose segments do not carry files
    /// (written by a storectl before 1.x did): Core Data writes each file under a new name
    /// before the commit that refers to it, so a name the base lacks is a file written since.
    var files: [PagedSnapshotRecord.FileChunks] = []
    /// The snapshot those came from; nil: none was taken after the point.
    var filesFrom: String?
    /// The base's files the point no longer has (names), and the files the chain's segments
    /// carried that it has (name, bytes): the external-data folder at the point.
    var removedBaseFiles: Set<String> = []
    var carriedFiles: [Carried] = []

    /// A file a segment carries: where it is, and what it must be.
    struct Carried: Equatable {
        var name: String
        var bytes: Int
        var sha256: String
        var segment: SegmentName
        var index: Int
    }
    /// Every segment up to the point carried the folder's changes: the files are complete.
    var tracked = false

    /// The base's manifest as the point is: its database's size, and the external-data files a
    /// restore of the point writes (what `--json` reports, and what a restore makes room for).
    func manifest(of base: PagedSnapshotRecord) -> Manifest {
        var manifest = base.manifest
        manifest.database.bytes = UInt64(ids.count) * UInt64(pageSize)
        let set = fileSet(base: base)
        if set.isEmpty {
            manifest.externalData = nil
        } else {
            let folder = manifest.externalData?.folder
                ?? "store/" + StoreFile.externalDataRelativePath(forDatabaseNamed: FileSystem.name(of: manifest.source.path))
            let files = set.sorted { $0.key < $1.key }.map { Manifest.FileRecord(path: "\(folder)/\($0.key)", bytes: $0.value.bytes, sha256: $0.value.sha256) }
            manifest.externalData = .init(folder: folder, files: files, totalBytes: files.reduce(0) { let (sum, over) = $0.addingReportingOverflow($1.bytes); return over ? .max : sum })
        }
        return manifest
    }

    /// The external-data files a restore of the point writes, by name: (bytes, SHA-256).
    func fileSet(base: PagedSnapshotRecord) -> [String: (bytes: UInt64, sha256: String)] {
        var out = base.externalFileSet.filter { !removedBaseFiles.contains($0.key) }
        for file in files { out[file.externalKey] = (file.bytes, file.sha256) }
        for file in carriedFiles { out[file.name] = (UInt64(file.bytes), file.sha256) }
        return out
    }

    /// Writes the pages over the base's, then sizes the file to the point's page count.
    func apply(to path: String) throws {
        let fd = open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "writing \(path)", side: .output) }
        defer { close(fd) }
        guard ftruncate(fd, off_t(ids.count) * off_t(pageSize)) == 0 else { throw StoreOpsError.posix(errno, doing: "sizing \(path)", side: .output) }
        try pages.write(into: fd, path: path, upTo: ids.count)
    }
}

/// An opened segment handed from the lane that opened it to the one applying it.
final class OpenedSegment: @unchecked Sendable {
    let segment: PointSegment
    let pages: SegmentPages
    init(_ opened: (PointSegment, SegmentPages, [Data])) {
        segment = opened.0
        pages = opened.1
    }
}

/// `snapshot restore --at TIME`: which point that is, and what to lay over its chain's base.
public enum PointRestore {
    struct Target {
        var record: PagedSnapshotRecord
        var overlay: PointOverlay?
        var point: String?
        var time: Date?
        var reads: SnapshotRestore.PointReads?
        /// `--at` fell where retention thinned the points: commits between the point answered and
        /// the time asked may not be kept.
        var thinned = false

        /// `body`'s damage (the point's database fails its check, a page is not its id), with a
        /// hint naming the digests the point was read through: one that opens but says other
        /// pages than its commits is found by `repo check --read-data`, not by the restore.
        func namingDigests<T>(_ repository: PagedRepository, _ body: () throws -> T) throws -> T {
            do { return try body() } catch var error as StoreOpsError where error.status == .badData && (reads?.digests ?? 0) > 0
                && (error.message.contains("has no content id") || error.message.contains("the database it reassembles to fails")) {
                let through = "the point was read through \(Format.plural(reads?.digests ?? 0, "digest", "digests")) of its chain: `storectl repo check --repo \(repository.location) --read-data` compares each with the commits it spans (remove a damaged one and restores replay its commits)"
                error.hint = through + (error.hint.map { "; " + $0 } ?? "")
                throw error
            }
        }
    }

    /// The snapshot `options.id` names, or with `options.at`, the newest point at or before it.
    static func target(_ options: SnapshotRestore.Options, in repository: PagedRepository) throws -> Target {
        let label = options.at == nil ? SnapshotID.pointLabel(options.id) : nil
        guard options.at != nil || label != nil else { return Target(record: try repository.record(options.id)) }
        // The point's pages beyond the memory budget go to a scratch file beside the restored
        // database (the volume that must have room for it anyway; `diff --at`: TMPDIR).
        let destination: String
        switch options.target {
        case .file(let path), .inPlace(let path): destination = FileSystem.parent(of: FileSystem.absolute(path))
        }
        // Refused before the point is read (the restore itself would refuse it after).
        switch FileSystem.kind(of: destination) {
        case .directory: break
        case .missing: throw StoreOpsError(.cannotCreate, "the folder \(destination) does not exist", hint: "create it first (storectl makes no folders), or restore --to a file in another folder")
        default: throw StoreOpsError(.cannotCreate, "\(destination) is not a folder")
        }
        if let label { return try resolve(repository, label: label, scratch: destination) }
        var inPlace: String?
        if case .inPlace(let path) = options.target { inPlace = path }
        return try resolve(repository, at: options.at ?? Date(), store: options.pointStore, host: options.pointHost, scratch: destination, inPlace: inPlace)
    }

    /// The point a label names (`<chain>@<number>`, as restore and diff print it): that point
    /// exactly, of whichever store it is (66 when its chain is not in the repository, or
    /// retention thinned that point away).
    static func resolve(_ repository: PagedRepository, label: (chain: String, number: Int), scratch: String) throws -> Target {
        let name = "\(label.chain)@\(label.number)"
        let timeline = try PointTimeline.load(repository)
        guard let chain = timeline.chains.first(where: { $0.id == label.chain }) else {
            throw StoreOpsError(.noInput, "no chain of points based on snapshot \(label.chain) in \(repository.location) (point \(name))",
                                hint: "`storectl snapshot list --repo \(repository.location)` shows the points each store has")
        }
        // A time at or after the point and within its chain: the end of the segment holding it.
        let segment = chain.segments.first { $0.from <= label.number && label.number <= $0.to }
        guard label.number < chain.points, let segment else {
            throw StoreOpsError(.noInput, "point \(name) is not in \(repository.location): chain \(label.chain) has points 0…\(chain.points - 1)",
                                hint: "`storectl snapshot list --repo \(repository.location)` shows the points each store has")
        }
        let time = label.number == 0 ? chain.baseTime : max(chain.baseTime, segment.lastTime)
        let target = try resolve(repository, at: date(time), store: nil, host: nil, scratch: scratch, point: (chain.store, label.number), chain: chain.id)
        guard target.point == name || (label.number == 0 && target.point == nil && target.record.id == label.chain) else {
            throw StoreOpsError(.noInput, "point \(name) is no longer in \(repository.location) (retention kept \(target.point ?? target.record.id) before it)",
                                hint: "restore \(target.point ?? target.record.id), or a point by its time: --at TIME")
        }
        return target
    }

    /// TMPDIR, or /tmp.
    static var temporaryFolder: String {
        FileSystem.absolute(ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp")
    }

    /// The store a point restore is about: named; else, in place, the store it replaces (another
    /// store's points over it would replace it with that store's data: only when named); else
    /// the only one with points.
    static func storeKey(_ repository: PagedRepository, timeline: PointTimeline, store: String?, host: String?, inPlace: String? = nil) throws -> String {
        if store == nil, let inPlace, !timeline.chains.isEmpty {
            let key = PointSegment.storeKey(host: host ?? ProcessInfo.processInfo.hostName, path: FileSystem.absolute(inPlace))
            guard timeline.chains.contains(where: { $0.store == key }) else {
                let stores = StorePoints.names(in: repository)
                throw StoreOpsError(.usage, "\(repository.location) holds no points of \(FileSystem.absolute(inPlace)), the store to restore in place"
                                    + (stores.isEmpty ? "" : "; its points are of " + Format.list(stores)),
                                    hint: "name the store whose point to put there with --store (and --host, for a store followed on another host, such as the one this machine replaces); or restore --to a new file")
            }
            return key
        }
        if let store {
            let path = FileSystem.absolute(store)
            let key = PointSegment.storeKey(host: host ?? ProcessInfo.processInfo.hostName, path: path)
            guard timeline.chains.contains(where: { $0.store == key }) else {
                let listed = try StorePoints.list(repository)
                let hosts = listed.filter { $0.store == path }.map(\.host).sorted()
                if host == nil, !hosts.isEmpty {
                    // The store was followed on another host (the machine this one replaces): it
                    // said "no points of X; its points are of X (host vm)" and never --host.
                    throw StoreOpsError(.noInput, "\(repository.location) holds no points of \(path) from this host (\(ProcessInfo.processInfo.hostName)); "
                                        + "its points of \(path) are from host " + Format.list(hosts),
                                        hint: "add --host \(hosts.count == 1 ? hosts[0] : "HOST") (the host that followed it)")
                }
                let stores = listed.map { "\($0.store) (host \($0.host))" }.sorted()
                throw StoreOpsError(.noInput, "\(repository.location) holds no points of \(path)\(host.map { " from host \($0)" } ?? "")"
                                    + (stores.isEmpty ? "" : "; its points are of " + Format.list(stores)),
                                    hint: "`storectl snapshot list --repo \(repository.location)` shows each store's points")
            }
            return key
        }
        if let host {
            // A host named without a store: the store of that host (a mistyped --host restored
            // the only store there was, of another host, exit 0: a trial).
            let listed = try StorePoints.list(repository)
            let ofHost = listed.filter { $0.host == host }
            guard let only = ofHost.first, ofHost.count == 1 else {
                let stores = listed.map { "\($0.store) (host \($0.host))" }.sorted()
                if ofHost.isEmpty {
                    throw StoreOpsError(.noInput, "\(repository.location) holds no points from host \(host)" + (stores.isEmpty ? "" : "; its points are of " + Format.list(stores)),
                                        hint: "check --host (`storectl snapshot list --repo \(repository.location) --points` shows each store's host)")
                }
                throw StoreOpsError(.usage, "\(repository.location) holds points of \(ofHost.count) stores from host \(host): name one with --store",
                                    hint: "its stores: " + Format.list(ofHost.map { "\($0.store) (host \($0.host))" }.sorted()))
            }
            return PointSegment.storeKey(host: host, path: only.store)
        }
        let keys = Set(timeline.chains.map(\.store))
        guard let only = keys.first else {
            throw StoreOpsError(.noInput, "\(repository.location) holds no points in time",
                                hint: "`storectl replicate STORE --repo \(repository.location)` records them")
        }
        guard keys.count == 1 else {
            let stores = StorePoints.names(in: repository)
            throw StoreOpsError(.usage, "\(repository.location) holds points of \(keys.count) stores: name one with --store",
                                hint: stores.isEmpty ? "`storectl snapshot list --repo \(repository.location) --points` shows them" : "its stores: " + Format.list(stores))
        }
        return only
    }

    /// Opens the marker that confirms `chain` up to `until` (a stop or the newest alive marker):
    /// 65 naming it when it cannot be read or its name is not its content's.
    static func confirmMarker(of chain: PointTimeline.Chain, until: Int64, in repository: PagedRepository) throws {
        let candidates = (chain.markers.filter { $0.level == PointTimeline.stoppedLevel } + chain.alive).filter { $0.lastTime == until || $0.firstTime == until }
        guard var marker = candidates.last else { return }
        var sealed = try repository.backend.read(marker.key)
        if sealed == nil, marker.level == PointTimeline.aliveLevel {
            // A running follower replaced it (the next one written, then this one removed): the
            // newer one confirms at least as much.
            let folder = (marker.key as NSString).deletingLastPathComponent + "/"
            if let newer = try repository.backend.list(folder).compactMap({ SegmentName.parse($0.key) })
                .filter({ $0.level == PointTimeline.aliveLevel && $0.to == marker.to && $0.lastTime >= until }).max(by: { $0.lastTime < $1.lastTime }) {
                marker = newer
                sealed = try repository.backend.read(newer.key)
            }
        }
        guard let sealed else {
            throw StoreOpsError(.noInput, "the marker \(repository.backend.describe(marker.key)) that confirms chain \(chain.id) after its last point is gone (a running replicate replaced it?)",
                                hint: "try again, or --at \(Timestamp.iso(date(chain.lastTime))) or earlier")
        }
        _ = try PointSegment.open(sealed, name: marker, sealer: repository.sealer, zstd: try ZstdFrames(level: 3), location: repository.location)
    }

    /// Opens the stop and resume markers at the point a time `t` follows (the last point of the
    /// data segment holding t, or the point before it): whether t was followed, or fell in a span
    /// no commit is claimed in, rests on their names' times (65 when one was renamed). Bounded:
    /// markers name the point they were written at, and only a restart adds them.
    static func confirmSpans(of chain: PointTimeline.Chain, at t: Int64, in repository: PagedRepository) throws {
        let holding = chain.segments.dropFirst().last { $0.firstTime <= t }
        let points = holding.map { ($0.from - 1)...$0.to } ?? 0...0
        let zstd = try ZstdFrames(level: 3)
        for marker in chain.markers where points.contains(marker.to) {
            guard let sealed = try repository.backend.read(marker.key) else {
                throw StoreOpsError(.noInput, "the marker \(repository.backend.describe(marker.key)) of chain \(chain.id) is gone (a prune removed the chain meanwhile?)",
                                    hint: "try again; `storectl snapshot list --repo \(repository.location) --points` shows what is there")
            }
            _ = try PointSegment.open(sealed, name: marker, sealer: repository.sealer, zstd: zstd, location: repository.location)
        }
    }

    /// A digest the restore planned to read could not be read or opened: the point is read again
    /// without it (digests only save time).
    struct DigestUnusable: Error {
        var name: SegmentName
        var error: any Error
    }

    /// A milestone the restore planned to start from could not be read: it starts from an
    /// earlier one, or the chain's base (milestones only save time).
    struct MilestoneUnusable: Error {
        var name: SegmentName
        var error: any Error
    }

    /// `STORECTL_TEST_IGNORE_DIGESTS=1` (tests, benchmarks): every point is replayed from its segments.
    static let ignoreDigests = ProcessInfo.processInfo.environment["STORECTL_TEST_IGNORE_DIGESTS"] == "1"
    /// `STORECTL_TEST_IGNORE_MILESTONES=1` (tests, benchmarks): every point is read from its chain's base.
    static let ignoreMilestones = ProcessInfo.processInfo.environment["STORECTL_TEST_IGNORE_MILESTONES"] == "1"

    /// - Parameter scratch: where the point's pages go past the memory budget (`OverlayPages`).
    /// - Parameter inPlace: the store a restore in place replaces (whose points are meant when no
    ///   store is named).
    /// - Parameter point: an exact point instead of the newest at `at`: its store's key and number
    ///   (`at` is then that point's time; what comes after it at the same millisecond is left out).
    /// - Parameter chain: with `point`, the chain it is in (by its base's id), not the one `at` falls in.
    static func resolve(_ repository: PagedRepository, at: Date, store: String?, host: String?, scratch: String, inPlace: String? = nil,
                        point exact: (key: String, number: Int)? = nil, chain chainID: String? = nil) throws -> Target {
        var skipping: Set<SegmentName> = []
        while true {
            do {
                return try resolve(repository, at: at, store: store, host: host, scratch: scratch, inPlace: inPlace, exact: exact, chainID: chainID, skipping: skipping)
            } catch let unusable as DigestUnusable {
                SnapshotRestore.logger.warning("a digest of points cannot be read; the points it spans are read instead", metadata: [
                    "digest": "\(repository.backend.describe(unusable.name.key))", "error": "\((unusable.error as? StoreOpsError)?.message ?? "\(unusable.error)")"])
                skipping.insert(unusable.name)
            } catch let unusable as MilestoneUnusable {
                SnapshotRestore.logger.warning("a milestone cannot be read; the point is read from an earlier one or its chain's base instead", metadata: [
                    "milestone": "\(repository.backend.describe(unusable.name.key))", "error": "\((unusable.error as? StoreOpsError)?.message ?? "\(unusable.error)")"])
                skipping.insert(unusable.name)
            }
        }
    }

    static func resolve(_ repository: PagedRepository, at: Date, store: String?, host: String?, scratch: String, inPlace: String?,
                        exact: (key: String, number: Int)? = nil, chainID: String? = nil, skipping: Set<SegmentName>) throws -> Target {
        let started = Date()
        func stage(_ what: String, _ metadata: Logger.Metadata = [:]) {
            SnapshotRestore.logger.debug("\(what)", metadata: metadata.merging(["ms": "\(Int(Date().timeIntervalSince(started) * 1000))"]) { a, _ in a })
        }
        let timeline = try PointTimeline.load(repository)
        stage("points listed")
        let key = try exact?.key ?? storeKey(repository, timeline: timeline, store: store, host: host, inPlace: inPlace)
        // An exact point: nothing numbered after it is applied, whatever its time.
        let through = exact?.number ?? Int.max
        let chains = timeline.chains(of: key)
        // `--at latest`: the last time the store's newest chain is confirmed at (its newest point,
        // alive marker or clean stop), which a restore may claim (`now` after a kill is refused, and
        // a DR drill copied the time from that refusal's hint).
        let at = at == Self.latest ? date(chains.last?.confirmedUntil ?? 0) : at
        let t = Replicate.ms(at)
        let when = Timestamp.iso(at)
        // A chain named (a point's label): that one, also where the next chain's base has the
        // same time as its last points (a compaction's catch-up commits are stamped so).
        guard let chain = chainID.map({ id in chains.first { $0.id == id } }) ?? chains.last(where: { $0.baseTime <= t }) else {
            let first = chains.first.map { " (the first is at \(Timestamp.iso(date($0.baseTime))))" } ?? ""
            // The store named (a user trying two sides' times could not tell which store this was).
            let named = store.map { FileSystem.absolute($0) } ?? inPlace.map { FileSystem.absolute($0) }
            let stores = named == nil ? StorePoints.names(in: repository) : []
            let label = named ?? (stores.count == 1 ? stores[0] : "this store")
            throw StoreOpsError(.noInput, "no point of \(label) at or before \(when)\(first)",
                                hint: "`storectl snapshot list --repo \(repository.location)` shows the points")
        }
        // After a chain's last point and before the next chain's base: the next chain says whether
        // it continued this one (a base every interval, or one commit read whole) and from which
        // point; a chain thinned by prune keeps fewer points, and `--at` there gives the newest kept.
        // A chain stopped cleanly at its last point was followed, with no commit, up to the stop
        // (the marker names the point it stopped at: not so when a segment before it is missing).
        let followedUntil = chain.confirmedUntil
        if t > chain.lastTime, followedUntil > chain.lastTime {
            // The time after the last point is claimed on a stop or alive marker's word: it is
            // opened, and its name's times must be what it seals (a renamed marker moves a claim).
            try confirmMarker(of: chain, until: followedUntil, in: repository)
        }
        if let later = chains.first(where: { $0.baseTime > t }), t > followedUntil,
           let reason = try continuityBreak(from: chain, to: later, in: repository) {
            throw StoreOpsError(.noInput, "\(when) falls in a gap from \(Timestamp.iso(date(followedUntil))) to \(Timestamp.iso(date(later.baseTime))) (\(reason)): no commit between is claimed",
                                hint: "try --at \(Timestamp.iso(date(followedUntil))) or --at \(Timestamp.iso(date(later.baseTime)))")
        }
        // Past the last point found, when a marker names later ones: those segments are missing,
        // and the state after that point is not known.
        if let missing = chain.missingThrough, t > chain.lastTime {
            throw StoreOpsError(.noInput, "\(when) is after point \(chain.points - 1) of chain \(chain.id) (\(Timestamp.iso(date(chain.lastTime)))), "
                                + "and its points \(chain.points)…\(missing) are not in \(repository.location) (a segment is missing): no commit after it is claimed",
                                hint: "try --at \(Timestamp.iso(date(chain.lastTime))) or earlier; `storectl repo check --repo \(repository.location)` checks the rest")
        }
        try confirmSpans(of: chain, at: t, in: repository)
        let unfollowed = chain.unfollowed
        if let i = unfollowed.firstIndex(where: { $0.from < t && ($0.to.map { t < $0 } ?? true) }) {
            // Spans that meet (a stop, then a follower killed after it resumed) are one to a
            // reader: the hint names times outside all of them (it named one the next refused).
            var (first, last) = (i, i)
            while first > 0, unfollowed[first - 1].to == unfollowed[first].from { first -= 1 }
            while last + 1 < unfollowed.count, let end = unfollowed[last].to, unfollowed[last + 1].from == end { last += 1 }
            let (from, to) = (unfollowed[first].from, unfollowed[last].to)
            let until = to.map { " to \(Timestamp.iso(date($0)))" } ?? " on"
            throw StoreOpsError(.noInput, "\(when) is in a span when storectl replicate was not following the store (from \(Timestamp.iso(date(from)))\(until)): no commit in it is claimed",
                                hint: "try --at \(Timestamp.iso(date(from)))\(to.map { " or --at \(Timestamp.iso(date($0)))" } ?? "")")
        }
        // The store's newest chain, not stopped: its follower said nothing of the time after its
        // last point or alive marker. It may have been killed, or be unable to write what it
        // read (a commit after the last point would then be missing from the answer), so that
        // time is not claimed.
        if !chains.contains(where: { $0.baseTime > chain.baseTime }), !chain.stopped, t > followedUntil {
            let last = Timestamp.iso(date(followedUntil))
            throw StoreOpsError(.noInput, "\(when) is after \(last), the last time the follower of this store confirmed its points (its newest point or alive marker): a commit after it may be in no point, so none is claimed",
                                hint: "try --at \(last) (the store as it was then); a running `storectl replicate` confirms at every point it writes and, while the store is idle, every --heartbeat (\(Format.duration(Replicate.Options(stores: [], repository: "").heartbeatInterval)) unless it was given another); `storectl replicate status` says whether it still runs")
        }
        // The latest milestone at or before the point, when the chain has one: the restore replays
        // only what came after it (`PointMilestone`).
        var start: (name: SegmentName, record: PagedSnapshotRecord)?
        if !ignoreMilestones, let name = PointMilestone.usable(chain.milestones.filter { !skipping.contains($0) && $0.to <= through },
                                                                   segments: Array(chain.segments.dropFirst()), time: t) {
            do {
                let record = try PointMilestone.record(name, in: repository)
                start = (name, record)
            } catch { throw MilestoneUnusable(name: name, error: error) }
        }
        let base = try start?.record ?? repository.record(chain.id)
        var ids: [ContentID]
        do { ids = try BlobLocator.pageMap(of: base, in: repository).ids } catch {
            if let start { throw MilestoneUnusable(name: start.name, error: error) }
            throw error
        }
        stage("base's map read", ["milestone": "\(start?.record.id ?? "none")"])
        let pages = OverlayPages(pageSize: base.pages.pageSize, folder: scratch)
        var point = start?.name.to ?? 0
        var time = start?.name.lastTime ?? chain.baseTime
        let zstd = try ZstdFrames(level: 3)
        // Segments are read a window at a time, the window's objects at once (a bucket answers
        // many requests in parallel; an hour of one-second segments is 3,600 objects), then
        // applied in order: memory stays a window's worth.
        let segments = Array(chain.segments.dropFirst().prefix { $0.firstTime <= t }.filter { $0.from > point })
        // Digests instead of what they span, where they fit (`PointDigest.plan`).
        let wanted = ignoreDigests ? segments : PointDigest.plan(chain.digests.filter { !skipping.contains($0) && $0.from > point && $0.to <= through }, segments: segments, time: t)
        let window = max(4, repository.backend.parallelReads * 4)
        var fetched: [Int: Data] = [:]
        func sealed(_ index: Int) throws -> Data {
            if fetched[index] == nil {
                // A window of small objects, or as many merged ones (up to 16 MiB each) as are read at once.
                var batch: [Int] = []
                var merged = 0
                for k in index..<min(wanted.count, index + window) {
                    if wanted[k].level > 0 { merged += 1 }
                    if merged > max(1, repository.backend.parallelReads), !batch.isEmpty { break }
                    batch.append(k)
                }
                let found = Mutex<[Int: Result<Data?, any Error>]>([:])
                let next = Mutex(0)
                onLanes(min(batch.count, max(1, repository.backend.parallelReads * 2))) { _ in
                    while true {
                        let k = next.withLock { value -> Int in defer { value += 1 }; return value }
                        guard k < batch.count else { return }
                        let result = Result { try repository.backend.read(wanted[batch[k]].key) }
                        found.withLock { $0[batch[k]] = result }
                    }
                }
                fetched = [:]
                for (k, result) in found.withLock({ $0 }) {
                    if wanted[k].level == PointDigest.level {
                        do {
                            guard let data = try result.get() else { throw StoreOpsError(.badData, "listed but cannot be read") }
                            fetched[k] = data
                        } catch { throw DigestUnusable(name: wanted[k], error: error) }
                        continue
                    }
                    guard let data = try result.get() else {
                        throw StoreOpsError(.badData, "point segment \(repository.backend.describe(wanted[k].key)) is listed but cannot be read", hint: Sealer.damagedHint)
                    }
                    fetched[k] = data
                }
            }
            guard let data = fetched.removeValue(forKey: index) else { throw StoreOpsError(.failure, "point segment \(wanted[index].key) was not read") }
            return data
        }
        var files = PointFiles(base: base)
        var reads = SnapshotRestore.PointReads()
        reads.milestone = start?.record.id
        let lockBytePage = LockState.pendingByte / base.pages.pageSize + 1
        let zeroPageID = repository.sealer.contentID([UInt8](repeating: 0, count: base.pages.pageSize))
        // The segments to open, in order: each object's, a merged object's members one by one.
        // Two are opened at once (decompressing is most of the work; the other core is idle
        // here), then applied in order: at most two segments' pages in memory.
        var units: [(outer: SegmentName, member: SegmentName, sealed: Data)] = []
        var nextObject = 0
        nonisolated(unsafe) let zstds = [zstd, try ZstdFrames(level: 3)]   // one per lane
        nonisolated(unsafe) let sealer = repository.sealer
        let location = repository.location
        var carriedIndex = 0
        var currentObject: SegmentName?
        reading: while true {
            while units.count < 2, nextObject < wanted.count {
                let name = wanted[nextObject]
                let object = try sealed(nextObject)
                nextObject += 1
                let members = name.level == PointMerge.level ? try PointMerge.members(object, name: name, sealer: repository.sealer, location: repository.location)
                                                              : [(name: name, sealed: object)]
                units += members.map { (outer: name, member: $0.name, sealed: $0.sealed) }
            }
            guard !units.isEmpty else { break }
            // A large digest (minutes of pages: tens of MiB once opened) is opened alone, so memory
            // holds at most one beside the overlay however long the history.
            let alone = units.prefix(2).contains { $0.member.level == PointDigest.level && $0.sealed.count > PointDigest.openAloneBytes }
            let batch = Array(units.prefix(alone ? 1 : 2))
            units.removeFirst(batch.count)
            let opened: [OpenedSegment]
            nonisolated(unsafe) let pair = batch
            @Sendable func open(_ k: Int) throws -> OpenedSegment {
                do {
                    return OpenedSegment(try PointSegment.open(pair[k].sealed, name: pair[k].member, sealer: sealer, zstd: zstds[k], location: location))
                } catch where pair[k].member.level == PointDigest.level {
                    throw DigestUnusable(name: pair[k].member, error: error)
                }
            }
            if batch.count == 2 {
                let (a, b) = try inParallel({ try open(0) }, { try open(1) })
                opened = [a, b]
            } else {
                opened = [try open(0)]
            }
            for (u, unit) in opened.enumerated() {
                let name = batch[u].outer
                if currentObject != name { currentObject = name; carriedIndex = 0 }
                let (segment, bytes) = (unit.segment, unit.pages)
                if segment.pageSize != base.pages.pageSize, name.level == PointDigest.level {
                    throw DigestUnusable(name: name, error: StoreOpsError(.badData, "page size \(segment.pageSize), its base \(base.pages.pageSize)"))
                }
                guard segment.pageSize == base.pages.pageSize else {
                    throw StoreOpsError(.badData, "point segment \(name.key) has page size \(segment.pageSize), its base \(base.pages.pageSize)", hint: Sealer.damagedHint)
                }
                // Of a page written more than once by the commits applied here, only its last version
                // is put in the overlay (each would be written over by the next): at 500 commits a
                // second the same few pages are rewritten by nearly every commit.
                var lastVersion: [UInt32: Int] = [:]
                if segment.commits.count > 1 {
                    var flat = 0
                    for (k, commit) in segment.commits.enumerated() {
                        if commit.time > t || (commit.point ?? (segment.from + k)) > through { break }
                        for (i, page) in commit.pages.enumerated() where Int(page) <= Int(commit.pageCount) && page >= 1 { lastVersion[page] = flat + i }
                        flat += commit.pages.count
                    }
                }
                var next = 0
                for (k, commit) in segment.commits.enumerated() {
                    if commit.time > t || (commit.point ?? (segment.from + k)) > through { break reading }
                    files.apply(commit, of: segment, name: name, index: &carriedIndex)
                    let pageCount = Int(commit.pageCount)
                    // A page past where the commit can reach would be dropped as a truncated
                    // one (the point silently without it): damage, refused.
                    if let page = commit.impossiblePage(countBefore: ids.count) {
                        let error = StoreOpsError(.badData, "point segment \(repository.backend.describe(name.key)) is damaged: its commit at point \(commit.point ?? (segment.from + k)) holds page \(page), which a database of \(Format.count(max(ids.count, pageCount))) pages cannot have",
                                                  hint: Sealer.damagedHint)
                        if name.level == PointDigest.level { throw DigestUnusable(name: name, error: error) }
                        throw error
                    }
                    // A digest: the pages its span dropped (and did not write again) are gone.
                    if let floor = commit.truncatedTo.map(Int.init), ids.count > floor { ids.removeLast(ids.count - floor) }
                    if ids.count > pageCount { ids.removeLast(ids.count - pageCount) }
                    if ids.count < pageCount {
                        // Every page a commit grows the store by is in it (SQLite writes each new
                        // page), the lock-byte page aside: a count far beyond them is damage,
                        // refused before anything is allocated for it.
                        let grown = commit.pages.reduce(0) { $0 + (Int($1) > ids.count && Int($1) <= pageCount ? 1 : 0) }
                        guard pageCount - ids.count <= grown + WalFollower.pageSlack else {
                            let error = StoreOpsError(.badData, "point segment \(name.key) is damaged: its commit at point \(commit.point ?? (segment.from + k)) says \(Format.count(pageCount)) pages, \(Format.count(pageCount - ids.count - grown)) more than it and the points before hold",
                                                      hint: Sealer.damagedHint)
                            if name.level == PointDigest.level { throw DigestUnusable(name: name, error: error) }
                            throw error
                        }
                        // Grown past 1 GiB: the lock-byte page is one SQLite never writes (so no
                        // commit carries it); a snapshot holds it as a page of zeros, and so does
                        // the point (the restored file is sized to the page count: zeros there).
                        let before = ids.count
                        ids += [ContentID](repeating: .zero, count: pageCount - ids.count)
                        if before < lockBytePage, lockBytePage <= pageCount { ids[lockBytePage - 1] = zeroPageID }
                    }
                    for (i, page) in commit.pages.enumerated() where Int(page) <= pageCount && page >= 1 {
                        ids[Int(page) - 1] = commit.ids[i]
                        if lastVersion.isEmpty || lastVersion[page] == next + i { try pages.set(page, bytes[next + i]) }
                    }
                    next += commit.pages.count
                    reads.commits += 1
                    point = commit.point ?? (segment.from + k)
                    time = commit.time
                }
            }
        }
        _ = zstds
        stage("point read", ["segments": "\(wanted.count)", "digests": "\(wanted.filter { $0.level == PointDigest.level }.count)", "held_pages": "\(pages.heldCount)", "scratch_pages": "\(pages.pagesInFile)"])
        reads.digests = wanted.filter { $0.level == PointDigest.level }.count
        reads.segments = wanted.count - reads.digests
        // Asked after the point answered, where retention thinned: the first segment ending after
        // the time asked is a thinned one (it kept each minute's last commit: one before the time
        // asked may be gone, in it or before its first), or the chain was thinned to its base.
        var thinned = time < t && chain.segments.dropFirst().first(where: { $0.lastTime > t })?.level == PointThinning.level
        if !thinned, time < t, chain.segments.count == 1, let next = chains.first(where: { $0.baseTime > chain.baseTime }) {
            thinned = (try? opening(of: next, in: repository))?.thinnedEnd(of: chain) != nil
        }
        guard reads.commits > 0 else { return Target(record: base, overlay: nil, point: "\(chain.id)@\(point)", time: date(time), reads: reads, thinned: thinned) }
        var overlay = PointOverlay(ids: ids, pages: pages, pageSize: base.pages.pageSize)
        let baseNames = Set(base.files.map(\.externalKey))
        overlay.removedBaseFiles = baseNames.filter { name in if case .base = files.files[name] { false } else { true } }
        overlay.carriedFiles = files.files.compactMap { name, source in
            if case .carried(let bytes, let sha, let segment, let index) = source {
                PointOverlay.Carried(name: name, bytes: bytes, sha256: sha, segment: segment, index: index)
            } else { nil }
        }.sorted { $0.name < $1.name }
        overlay.tracked = files.tracked
        // Segments written before they carried files: the files written since the base come
        // from the store's next snapshot after the point.
        if !files.tracked, let (later, from) = try filesWrittenSince(base, before: time, in: repository) {
            let have = Set(files.files.keys)
            overlay.files = later.filter { !have.contains($0.externalKey) }
            overlay.filesFrom = from
        }
        return Target(record: base, overlay: overlay, point: "\(chain.id)@\(point)", time: date(time), reads: reads, thinned: thinned)
    }

    /// The external-data files a point needs that its chain's base does not hold: those of the
    /// store's first snapshot after the point (same host and path) whose names the base lacks.
    /// Points carry the pages the app committed, not its external files; a file written after
    /// the base and removed before that snapshot is in neither (the README says so). A file
    /// written after the point comes along too, unreferenced: Core Data leaves such files alone.
    /// Nil when no snapshot of the store was taken after the point.
    static func filesWrittenSince(_ base: PagedSnapshotRecord, before time: Int64,
                                  in repository: PagedRepository) throws -> (files: [PagedSnapshotRecord.FileChunks], from: String)? {
        let have = Set(base.files.map(\.path.exactKey))
        // Records in the order their ids say they were taken, from a second before the point:
        // usually one or two are opened, not the whole catalog.
        let ids = try repository.backend.list("snapshots/").map { String($0.key.dropFirst("snapshots/".count)) }
            .compactMap { id in SnapshotID.time(of: id).map { (id, $0) } }
            .filter { Replicate.ms($0.1) >= time - 1_000 }
            .sorted { $0.1 < $1.1 }
        for (id, _) in ids {
            guard let record = try? repository.record(id) else { continue }   // a damaged one is verify's to report
            guard record.manifest.host.isExactly(base.manifest.host), record.manifest.source.path.isExactly(base.manifest.source.path),
                  Replicate.ms(record.manifest.startedAt) > time else { continue }
            return (record.files.filter { !have.contains($0.path.exactKey) }, record.id)
        }
        return nil
    }

    static func date(_ ms: Int64) -> Date { Date(timeIntervalSince1970: Double(ms) / 1000) }

    /// Why no point is claimed between `chain`'s last point and `later`'s base, or nil when
    /// `later` continued `chain` from exactly its last point (or `chain` was thinned by prune).
    static func continuityBreak(from chain: PointTimeline.Chain, to later: PointTimeline.Chain, in repository: PagedRepository) throws -> String? {
        guard let opening = try opening(of: later, in: repository) else { return "the next chain's opening cannot be read" }
        guard opening.kind == "compaction" || opening.kind == "continued" else { return opening.reason }
        let thinned = chain.segments.count == 1 || chain.segments.contains { $0.level == PointThinning.level }
        guard opening.afterTime == chain.lastTime || thinned else {
            return "the chain's last points are not in the repository (the next chain continued from a later point)"
        }
        return nil
    }

    static func opening(of chain: PointTimeline.Chain, in repository: PagedRepository) throws -> PointSegment.Opening? {
        guard let name = chain.segments.first, let sealed = try repository.backend.read(name.key) else { return nil }
        return try PointSegment.open(sealed, name: name, sealer: repository.sealer, zstd: try ZstdFrames(level: 3), location: repository.location).0.opening
    }
}

extension PointRestore {
    /// `--at latest`: the newest time the store's points are confirmed at (resolved against the
    /// store's newest chain when the point is looked up).
    public static let latest = Date.distantFuture

    /// A time as `--at` takes it: RFC 3339 (`2026-11-24T19:30:00Z`, `…+01:00`, with or without
    /// fractions of a second), a duration before now (`-5m`, `-1h30m`, `-250ms`), `now`, or `latest`.
    public static func parseTime(_ text: String, now: Date = Date()) throws -> Date {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        // Quoted only where it would not show as itself (empty, or with spaces).
        let shown = text.isEmpty || text.contains(" ") ? text.debugDescription : text
        if trimmed.lowercased() == "now" { return now }   // what the README's operators type (the same as -0s)
        if trimmed.lowercased() == "latest" { return latest }
        if trimmed.hasPrefix("-") {
            switch DurationText.parse(String(trimmed.dropFirst()), allowZero: true) {
            case .success(let duration): return now.addingTimeInterval(-duration.seconds)
            case .failure(let error):
                // DurationText's own example ("write e.g. 10d") is a duration, which --at takes with a minus.
                var problem = error.problem
                if let number = Int(trimmed.dropFirst()) { problem = "has no unit (write e.g. -\(number)s, -\(number)m or -\(number)h)" }
                throw StoreOpsError(.usage, "--at \(shown) \(problem)", hint: "write a time like 2026-11-24T19:30:00Z or a duration before now like -5m")
            }
        }
        // A duration without its minus (10s, +10s): a time before now is meant, and written -10s.
        if case .success = DurationText.parse(String(trimmed.drop { $0 == "+" }), allowZero: true), trimmed.first?.isNumber == true || trimmed.hasPrefix("+") {
            let duration = String(trimmed.drop { $0 == "+" })
            throw StoreOpsError(.usage, "--at \(shown) is a duration, not a time: a time before now is written -\(duration)",
                                hint: "write -\(duration) (that long before now), or a time like 2026-11-24T19:30:00Z")
        }
        // RFC 3339 allows a space for the "T" (section 5.6), and `snapshot list` prints times so.
        var candidate = trimmed
        if candidate.count > 11, let space = candidate.index(candidate.startIndex, offsetBy: 10, limitedBy: candidate.endIndex), candidate[space] == " ",
           candidate[..<space].allSatisfy({ $0.isASCII && ($0.isNumber || $0 == "-") }) {
            candidate.replaceSubrange(space...space, with: "T")
        }
        // RFC 3339 allows "t" and "z" too (section 5.6).
        if candidate.count > 11, candidate.prefix(10).allSatisfy({ $0.isASCII && ($0.isNumber || $0 == "-") }) {
            candidate = candidate.replacingOccurrences(of: "t", with: "T").replacingOccurrences(of: "z", with: "Z")
        }
        if let field = outOfRange(candidate) {
            // Parsed leniently a 47th hour is two days later, 30 February is 2 March: a typo must
            // not restore (or roll back to) another moment.
            throw StoreOpsError(.usage, "--at \(shown) is not a time: its \(field) is out of range", hint: "write a time like 2026-11-24T19:30:00Z (RFC 3339) or a duration before now like -5m")
        }
        guard let date = Timestamp.parseISO(candidate, rounding: false) else {
            if Timestamp.parseISO(candidate + "Z") != nil {
                throw StoreOpsError(.usage, "--at \(shown) has no time zone", hint: "add Z for UTC (\(candidate)Z) or an offset such as +01:00")
            }
            throw StoreOpsError(.usage, "--at \(shown) is not a time", hint: "write a time like 2026-11-24T19:30:00Z (RFC 3339) or a duration before now like -5m")
        }
        // Down to the millisecond points are dated in (through whole microseconds: "…21.462Z" is
        // 21.461999… as a Double): a time asked with more digits never answers a point after it
        // (rounded, 21.4615 answered a point of 21.462); one with three is the same Date as before.
        let ms = ((date.timeIntervalSince1970 * 1_000_000).rounded() / 1000).rounded(.down)
        return Date(timeIntervalSince1970: ms / 1000)
    }

    /// The field of an RFC 3339 time that is out of range (a month 13, 30 February, hour 24,
    /// minute or second 60, an offset past 23:59), or nil (in range, or not shaped so at all:
    /// the parser says that).
    static func outOfRange(_ text: String) -> String? {
        let digits = Array(text.utf8)
        func number(_ start: Int, _ count: Int) -> Int? {
            guard start + count <= digits.count else { return nil }
            var value = 0
            for byte in digits[start..<(start + count)] {
                guard byte >= 48, byte <= 57 else { return nil }
                value = value * 10 + Int(byte - 48)
            }
            return value
        }
        guard digits.count >= 19, let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
              let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2) else { return nil }
        guard (1...12).contains(month) else { return "month" }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
        guard (1...days).contains(day) else { return "day" }
        guard hour <= 23 else { return "hour" }
        guard minute <= 59 else { return "minute" }
        guard second <= 59, digits.count == 19 || !(48...57).contains(digits[19]) else { return "second" }
        // The offset: the last six characters, ±hh:mm.
        if let sign = digits.last.flatMap({ _ in digits.count >= 25 ? digits[digits.count - 6] : nil }), sign == 43 || sign == 45,
           let offsetHours = number(digits.count - 5, 2), let offsetMinutes = number(digits.count - 2, 2) {
            guard offsetHours <= 23, offsetMinutes <= 59 else { return "offset" }
        }
        return nil
    }
}
