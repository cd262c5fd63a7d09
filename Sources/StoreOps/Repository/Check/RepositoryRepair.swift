import Foundation
import Logging

/// `storectl repo repair`: rebuilds the index from the packs themselves when an index file is
/// damaged or lost. Every pack whose header opens (layout 2: and whose every frame opens, since
/// its blobs' ids are recomputed from their bytes) is listed in one new index; then the old index
/// files are removed. Packs that are damaged are reported and kept as a readable old index
/// describes them (or left out, when none does). Afterwards every snapshot is checked against the
/// new index: one that needs a blob no readable pack holds is named in `unrestorable`, and the
/// command exits 2 (a repair that leaves snapshots unrestorable has not repaired them). Takes the
/// repository exclusively.
public enum RepositoryRepair {
    static let logger = Logger(label: "storectl.repair")
    /// What a record a newer storectl wrote says when opened.
    static let newerNote = "this storectl reads up to"
    public struct Report: Sendable, Codable {
        public var location: String
        public var packsIndexed = 0
        public var damagedPacks: [String] = []
        public var removedIndexes = 0
        public var newIndex: String?
        /// Frames of damaged packs left out of the new index (they do not open, or a blob in them
        /// is not what its id says), and their blobs: the next snapshot of those pages stores them again.
        public var droppedFrames = 0
        public var droppedBlobs = 0
        /// Whole frames of damaged packs copied into new packs (the damaged packs leave the
        /// index, and prune removes them).
        public var copiedFrames = 0
        /// Snapshot records a newer storectl wrote: not checked here (that storectl's repair
        /// checks them), not marked FAILED, not a failure.
        public var newerRecords: [String] = []
        /// Snapshots that still cannot be restored, and why (a blob they need is only in a damaged pack).
        public var unrestorable: [String] = []
    }

    /// 2 when a snapshot is left unrestorable; damaged packs no snapshot needs are not a failure
    /// (prune removes them).
    public static func ending(of report: Report) -> Ending {
        guard !report.unrestorable.isEmpty else { return .ok }
        return Ending(.checksFailed, error: StoreOpsError(.checksFailed,
            "\(Format.plural(report.unrestorable.count, "snapshot", "snapshots")) of \(report.location) cannot be restored after the repair: a blob they need is in no readable pack",
            hint: "the damaged frames' blobs are out of the index now, so the next snapshot of the store stores those pages again (and a snapshot that needs only pages stored again is restorable again); restore another snapshot meanwhile (`storectl snapshot list`); if a copy of the repository holds the damaged packs, copy them back and run repair again"))
    }

    public static func run(location: String, password: PasswordSource, wait: Bool = false, progress: ProgressHandler? = nil) throws -> Report {
        let pipeline = Pipeline(operation: "repo repair", progress: progress)
        var road = Road<Report>(lock: .none, wait: wait, actName: "repair") { pipeline in try repair(try pipeline.repository, progress: progress) }
        // Alone; the packs a dead writer left unindexed stay: they are what repair indexes.
        road.repository = .init(location, password: password, exclusive: true)
        road.repository?.keepingUnindexed = true
        return try pipeline.walk(road).get()
    }

    static func repair(_ repository: PagedRepository, progress: ProgressHandler?) throws -> Report {
        var report = Report(location: repository.location)
        // What the readable indexes say, for packs whose own header is damaged.
        var known: [ContentID: PackContents] = [:]
        progress?(.stage("read the indexes"))
        try RepositoryIndex.scan(repository) { _, pack, contents in known[pack] = contents }
        var index = IndexFile()
        var damaged = Set<ContentID>()
        let zstd = try ZstdFrames(level: 3)
        // The index files before this repair writes any (they go once the new one is written).
        let old = try repository.backend.list("index/").map(\.key)
        // What is whole of damaged packs an index describes, copied into new packs below.
        var salvage: [GarbagePlan.Pack] = []
        /// Whether a frame opens and its every blob is what its id says. Only damage says no: an
        /// unreachable server, a read error or a stop throws (it said no, and the repair then
        /// dropped good frames from the only index that described them).
        func isWhole(_ frame: FrameEntry, of pack: ContentID) throws -> Bool {
            try ProcessSignals.checkpoint("repairing \(repository.location)")
            let plain: Data
            do { plain = try BlobLocator.readFrame(frame, pack: pack, repository: repository, zstd: zstd) } catch let error as StoreOpsError where error.status == .badData {
                return false
            }
            for blob in frame.blobs {
                do { _ = try BlobLocator.extract(blob, from: plain, sealer: repository.sealer, what: "") } catch let error as StoreOpsError where error.status == .badData {
                    return false
                }
            }
            return true
        }
        let packs = try repository.backend.list("data/")
        progress?(.stage("read every pack"))
        let started = Date()
        var read: UInt64 = 0, bytes: UInt64 = 0
        for (key, size) in packs {
            try ProcessSignals.checkpoint("repairing \(repository.location)")
            defer {
                read += 1
                bytes += size
                progress?(.step(ProgressUpdate(phase: "read every pack", done: read, total: UInt64(packs.count), unit: .files, bytes: bytes, startedAt: started)))
            }
            guard let id = ContentID(hex: FileSystem.name(of: key)), PackBuilder.key(id) == key else {
                report.damagedPacks.append("\(repository.backend.describe(key)): not a pack name")
                continue
            }
            do {
                index.packs.append((id, try PackBuilder.readContents(repository, id: id, zstd: zstd)))
            } catch let error as StoreOpsError where error.status == .badData {
                report.damagedPacks.append(error.message)
                damaged.insert(id)
                // An index still describes it: its frames that still open, and whose every blob is
                // what its id says, are copied into new packs (below) and the damaged pack leaves
                // the index (prune removes it); a damaged frame's blobs go from the index, so the
                // next snapshot stores those pages again (listed, every later snapshot reused
                // them, passed its create, and could not be restored; and `repo check` said ok).
                // (Listing the whole frames of the damaged pack itself left `repo check` saying
                // that its header and the index disagree, for good.)
                if let contents = known[id] {
                    var carry: [GarbagePlan.Carry] = []
                    for frame in contents.frames where try isWhole(frame, of: id) { carry.append(.init(frame: frame, blobs: frame.blobs)) }
                    report.droppedFrames += contents.frames.count - carry.count
                    report.droppedBlobs += contents.blobCount - carry.reduce(0) { $0 + $1.blobs.count }
                    if !carry.isEmpty {
                        salvage.append(GarbagePlan.Pack(id: id, contents: contents, storedBytes: size, liveBytes: 0, action: .repack(carry: carry)))
                        report.copiedFrames += carry.count
                    }
                }
            }
        }
        // The whole frames of damaged packs, into new packs (written and indexed by the copy;
        // the new index below lists them too, and the copy's own index goes with the old ones).
        var copyIndexes: [String] = []
        if !salvage.isEmpty {
            progress?(.stage("copy the whole frames of damaged packs"))
            copyIndexes = try PagedGarbage.repack(salvage, in: repository).indexes
            for key in copyIndexes {
                guard let sealed = try repository.backend.read(key) else {
                    throw StoreOpsError(.ioError, "the index \(repository.backend.describe(key)) this repair just wrote cannot be read back", hint: "run storectl repo repair again")
                }
                index.packs += try IndexFile.decode(sealed, key: key, sealer: repository.sealer, location: repository.location).packs
            }
        }
        progress?(.stage("check every snapshot against the new index"))
        // The new index lists only frames that were read and checked: all of it is readable.
        (report.unrestorable, report.newerRecords) = try unrestorable(repository, index: index, anyDamaged: !damaged.isEmpty)
        // Each one's last verification is this finding: `snapshot list` says FAILED, and the
        // store's next snapshot does not take an unrestorable one's map as its own (an unchanged
        // store's snapshot reuses its parent's map without reading a page). Recorded before the
        // old indexes go: killed between the two, no unrestorable snapshot is left unmarked.
        for problem in report.unrestorable where problem.hasPrefix("snapshot ") {
            let id = String(problem.dropFirst("snapshot ".count).prefix { $0 != ":" })
            do {
                try repository.recordVerification(id, .init(at: Timestamp.now(), ok: false, level: .quick, problem: "repo repair: " + problem))
            } catch {
                logger.warning("could not record snapshot \(id)'s finding as its last verification: \(error)")
            }
        }
        if !index.isEmpty {
            let (key, data) = try index.encode(sealer: repository.sealer)
            try repository.backend.write(key, data, point: "repair.index.write")
            report.newIndex = key
        }
        report.packsIndexed = index.packs.count
        for key in old + copyIndexes where key != report.newIndex {
            try repository.backend.remove(key, point: "repair.index.remove")
            report.removedIndexes += 1
        }
        return report
    }

    /// The snapshots some of whose blobs the new index does not list (it lists only frames that
    /// were read and checked), or whose record or map cannot be read. `anyDamaged`: a pack was
    /// damaged (said when a map is missing).
    /// Also the records a newer storectl wrote (`newer`: not damage, not checked here), from the
    /// same read of the catalog.
    static func unrestorable(_ repository: PagedRepository, index: IndexFile, anyDamaged: Bool) throws -> (problems: [String], newer: [String]) {
        var locations: [ContentID: BlobLocation] = [:]
        var pageLengths: [ContentID: UInt32] = [:]
        for (pack, contents) in index.packs {
            for frame in contents.frames { for blob in frame.blobs {
                if locations[blob.id] == nil { locations[blob.id] = BlobLocation(pack: pack, frame: frame, blob: blob) }
                if blob.type == .page { pageLengths[blob.id] = blob.length }
            } }
        }
        let (records, damagedRecords) = try repository.catalog()
        // A newer storectl's record is not damage (its storectl reads it): not marked FAILED.
        let newer = damagedRecords.filter { $0.problem.contains(Self.newerNote) }.map { "snapshot \($0.id): \($0.problem)" }
        var problems = damagedRecords.filter { !$0.problem.contains(Self.newerNote) }.map { "snapshot \($0.id): \($0.problem)" }
        for record in records {
            // The map itself in a damaged pack: say so, not that it is in no index (it is, in the
            // new one, but not in a readable pack).
            let unreadableMap = record.pages.blobs.filter { locations[$0] == nil }.count
            if unreadableMap > 0 {
                let held = !anyDamaged ? "no pack in the repository holds it (the one that did is missing)" : "a damaged pack listed above held it, or a missing one"
                problems.append("snapshot \(record.id): its page map (\(Format.plural(unreadableMap, "chunk", "chunks"))) is in no readable pack: \(held)")
                continue
            }
            do {
                let ids = try BlobLocator.pageMap(of: record, in: repository, locations: locations, damaged: []).ids
                let missing = Set(ids).filter { pageLengths[$0].map { Int($0) != record.pages.pageSize } ?? true }.count
                    + record.otherBlobs.filter { locations[$0.0] == nil }.count
                if missing > 0 {
                    problems.append("snapshot \(record.id): \(Format.plural(missing, "blob it needs is", "blobs it needs are")) in no readable pack")
                }
            } catch let error as StoreOpsError where error.status == .badData {
                problems.append(error.message.hasPrefix("snapshot \(record.id)") ? error.message : "snapshot \(record.id): \(error.message)")
            }
        }
        return (problems.sorted(), newer)
    }
}
