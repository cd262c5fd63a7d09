import Foundation
import Synchronization

/// `storectl snapshot verify`: checks archives without writing into the repository, except the
/// "last verified" record of each snapshot checked.
public enum SnapshotVerify {
    public struct Options: Sendable {
        public var repository: String
        public var ids: [String] = []
        public var all = false
        /// `integrity_check` instead of `quick_check` on the database inside.
        public var full = false
        /// Where the database is unpacked for the check (default: the system's temp folder,
        /// never the repository).
        public var scratch: String?
        /// Where an encrypted repository's password comes from.
        public var password: PasswordSource = .resolve(file: nil)
        /// Called with each outcome as it is known (a terminal shows each verdict as it comes,
        /// not all of them at the end of a long run); `run` returns them all too.
        public var each: (@Sendable (Outcome) -> Void)?

        public init(repository: String, ids: [String] = [], all: Bool = false, full: Bool = false, scratch: String? = nil) {
            self.repository = repository
            self.ids = ids
            self.all = all
            self.full = full
            self.scratch = scratch
        }
    }

    public struct Outcome: Sendable, Codable, Equatable {
        public var id: String
        public var ok: Bool
        public var problem: String?
        public var seconds: Double
        /// Set for a chain of points (`storectl replicate`), whose id is the chain's: how many
        /// points it holds. `--all` reads every segment of every chain.
        public var points: Int?
        /// The store a chain of points follows (its path as recorded), for a chain's outcome.
        public var store: String?
        /// Set when the snapshot or chain could not be checked (74: the repository could not be
        /// read, the scratch folder is full): not damage. The run stops there; `problem` says
        /// so and what was not reached.
        public var status: Int32?
        /// Set when the snapshot was checked but its "last verified" record could not be written
        /// (the repository went away after reading it): why. `ok` is still the check's verdict.
        public var unrecorded: String?
        /// A chain of points thinned by prune: `points` is its point numbering (the newest
        /// point's number + 1), not how many it still holds.
        public var thinned: Bool?
        /// The exit status of what stopped the record (74 I/O, 66 the repository's folder gone).
        public var unrecordedStatus: Int32?

        public init(id: String, ok: Bool, problem: String? = nil, seconds: Double, points: Int? = nil, store: String? = nil, status: Int32? = nil) {
            self.id = id
            self.ok = ok
            self.problem = problem
            self.seconds = seconds
            self.points = points
            self.store = store
            self.status = status
        }
    }

    /// Not damage: what stops a verification (an unreachable server, a full scratch folder, a
    /// pack the process may not read).
    /// The outcomes so far are kept and reported with it.
    static func stopsVerification(_ error: any Error) -> StoreOpsError? {
        guard let failure = error as? StoreOpsError, [.ioError, .noInput, .busy].contains(failure.status) else { return nil }
        return failure
    }

    static func notReached(_ snapshots: Int, points: Bool) -> String {
        var parts: [String] = []
        if snapshots > 0 { parts.append(Format.plural(snapshots, "more snapshot", "more snapshots")) }
        if points { parts.append("the points") }
        return parts.isEmpty ? "" : "; not checked: \(parts.joined(separator: " and "))"
    }

    /// Verifies the named snapshots (or all). A damaged snapshot is an outcome, not a thrown
    /// error, so every snapshot asked for is checked; the CLI exits 65 if any failed.
    ///
    /// - Throws: 66 for an unknown id, 64 when neither ids nor `all` are given, 74 when the
    ///   scratch folder has no room.
    public static func run(_ options: Options, progress: ProgressHandler? = nil) throws -> [Outcome] {
        guard options.all || !options.ids.isEmpty else {
            throw StoreOpsError(.usage, "name the snapshots to verify, or pass --all")
        }
        // A road over the repository (shared, so a prune cannot remove packs while they are read;
        // verify writes only the "last verified" records): the preflight picks the snapshots.
        let pipeline = Pipeline(operation: "snapshot verify", progress: progress)
        var road = PlannedRoad<(records: [PagedSnapshotRecord], damaged: [DamagedEntry]), [Outcome]>(
            lock: .none, actName: "verify",
            preflight: { pipeline in
                let repository = try pipeline.repository
                let catalog = try repository.catalog()
                return (options.all ? catalog.records : try options.ids.map { try repository.record($0) }, options.all ? catalog.damaged : [])
            },
            act: { pipeline, chosen in try verify(chosen.records, damaged: chosen.damaged, in: try pipeline.repository, options: options, progress: progress) })
        road.repository = .init(options.repository, password: options.password, exclusive: false)
        // Only its verdicts are written (said beside the verdict when they cannot be).
        road.repository?.readsOnly = true
        return try pipeline.walk(road).get()
    }

    static func verify(_ records: [PagedSnapshotRecord], damaged: [DamagedEntry], in repository: PagedRepository, options: Options,
                       progress: ProgressHandler?) throws -> [Outcome] {
        let scratch = FileSystem.absolute(options.scratch ?? NSTemporaryDirectory())
        // Scratch copies of runs that were killed (a killed migrate's verify) go first.
        PendingFile.removeStale(in: scratch, prefix: scratchPrefix)
        let level: VerifyLevel = options.full ? .full : .quick
        var outcomes: [Outcome] = []
        func add(_ more: [Outcome]) {
            outcomes += more
            for outcome in more { options.each?(outcome) }
        }
        for (n, snapshot) in records.enumerated() {
            let id = snapshot.id
            let started = Date()
            do {
                add([try verify(snapshot, in: repository, scratch: scratch, level: level,
                                count: records.count > 1 ? " (\(n + 1) of \(records.count))" : "", progress: progress)])
            } catch {
                guard let stop = stopsVerification(error) else { throw error }
                // The repository cannot be read (or the scratch folder is full): what was checked
                // is reported, this snapshot is not called damaged, the rest is named as not checked.
                add([Outcome(id: id, ok: false, problem: stop.message + notReached(records.count - n - 1, points: options.all),
                             seconds: Date().timeIntervalSince(started), status: stop.status.rawValue)])
                // Damage already known (catalog entries that do not open) is reported all the same.
                add(options.all ? damagedOutcomes(damaged) : [])
                return outcomes
            }
        }
        if options.all {
            // Damaged catalog entries are part of "all": reported, never skipped silently.
            add(damagedOutcomes(damaged))
            // So are the points: every segment of every chain read, authenticated, each page
            // checked against its id (what `repo check --read-data` does for them).
            add(try verifyPoints(in: repository, progress: progress))
        }
        return outcomes
    }

    static func damagedOutcomes(_ damaged: [DamagedEntry]) -> [Outcome] {
        damaged.map { entry in
            Outcome(id: entry.id, ok: false, problem: entry.problem.contains(entry.file) ? entry.problem : "its catalog entry \(entry.file) \(entry.problem)", seconds: 0)
        }
    }

    /// One snapshot: unpacked into the scratch folder, checked, its "last verified" record written.
    static func verify(_ snapshot: PagedSnapshotRecord, in repository: PagedRepository, scratch: String, level: VerifyLevel, count: String,
                       progress: ProgressHandler?) throws -> Outcome {
        let record = snapshot.manifest, id = snapshot.id
        let started = Date()
        let needed = record.database.bytes + SpaceRequirement.margin(record.database.bytes)
        try SpaceRequirement.require(needed, at: scratch, purpose: "unpacking snapshot \(id)", hint: "pass --scratch with a folder on a larger volume")
        var problem: String?
        // In a bucket, damage is read again once before it is recorded: bytes damaged on the way
        // (a proxy, a flaky link) made a healthy repository "FAILED" until the next verify (a trial).
        var tries = repository.backend is LocalBackend ? 1 : 2
        while tries > 0 {
            tries -= 1
            do {
                let database = try PendingFile(finalPath: (scratch as NSString).appendingPathComponent("\(scratchPrefix)\(id).sqlite"), label: "verify.scratch")
                defer { database.discard() }
                _ = try PagedExtraction.run(snapshot, repository: repository, into: .init(database: database.tempPath, externalFolder: nil), level: level,
                                            fileHash: false, progress: progress.map { handler in { event in
                                          if case .stage(let name) = event { handler(.stage("\(id)\(count) \(name)")) } else { handler(event) } } })
                if problem != nil {
                    SnapshotCreate.logger.warning("snapshot \(id) read whole on a second try: the first read's damage was on the way, not in the repository", metadata: ["first": "\(problem ?? "")"])
                    problem = nil
                }
                break
            } catch let error as StoreOpsError where error.status == .badData {
                problem = error.message
            }
        }
        var unrecorded: String?
        var unrecordedStatus: Int32?
        do {
            try repository.recordVerification(id, .init(at: Timestamp.now(), ok: problem == nil, level: level, problem: problem))
        } catch {
            // The check's verdict stands; that it could not be recorded is said beside it (a
            // snapshot found intact and not recorded is not "not checked"), as where nothing can
            // be written (a read-only volume or key: verified without a lock).
            let cannotWrite = (error as? StoreOpsError).flatMap { RepositoryHold.cannotWrite($0) ? $0 : nil }
            guard let stop = stopsVerification(error) ?? cannotWrite else { throw error }
            unrecorded = stop.message
            unrecordedStatus = stop.status.rawValue
        }
        var outcome = Outcome(id: id, ok: problem == nil, problem: problem, seconds: Date().timeIntervalSince(started))
        outcome.unrecorded = unrecorded
        outcome.unrecordedStatus = unrecordedStatus
        return outcome
    }

    static func verifyPoints(in repository: PagedRepository, progress: ProgressHandler?) throws -> [Outcome] {
        let timeline = try PointTimeline.load(repository)
        // A chain without its opening segment is listed nowhere else: its points are lost.
        let orphans = try RepositoryCheck.orphanChains(in: repository, timeline: timeline).map {
            Outcome(id: $0, ok: false, problem: RepositoryCheck.orphanProblem($0), seconds: 0, points: 0)
        }
        guard !timeline.chains.isEmpty else { return orphans }
        let snapshots = Set(try repository.backend.list("snapshots/").map { String($0.key.dropFirst("snapshots/".count)) })
        let zstd = try ZstdFrames(level: 3)
        var outcomes: [Outcome] = []
        for (n, chain) in timeline.chains.enumerated() {
            progress?(.stage("points: chain \(n + 1) of \(timeline.chains.count)"))
            let started = Date()
            var read: (problems: [String], store: String?)
            do {
                read = try RepositoryCheck.readSegments(of: chain, in: repository, zstd: zstd)
                if let hole = try RepositoryCheck.hole(in: chain, repository: repository) { read.problems.insert(hole, at: 0) }
            } catch {
                guard let stop = stopsVerification(error) else { throw error }
                let rest = timeline.chains.count - n - 1
                outcomes.append(Outcome(id: chain.id, ok: false,
                                        problem: stop.message + (rest > 0 ? "; not checked: \(Format.plural(rest, "more chain", "more chains"))" : ""),
                                        seconds: Date().timeIntervalSince(started), points: chain.points, status: stop.status.rawValue))
                return outcomes
            }
            let problems = RepositoryCheck.wholeness(of: chain, in: repository, snapshots: snapshots) + read.problems
            var outcome = Outcome(id: chain.id, ok: problems.isEmpty, problem: problems.isEmpty ? nil : problems.joined(separator: "; "),
                                  seconds: Date().timeIntervalSince(started), points: chain.points, store: read.store)
            if chain.segments.contains(where: { $0.level == PointThinning.level }) { outcome.thinned = true }
            outcomes.append(outcome)
        }
        return outcomes + orphans
    }

    /// How a verification ended: ok, or failed (65) naming the damaged snapshots.
    ///
    /// Damage found is 65 even when the run then stopped on an I/O error (the message names both);
    /// a run stopped with nothing damaged before it ends with the stop's status (74).
    public static func ending(of outcomes: [Outcome]) -> Ending {
        let damaged = outcomes.filter { !$0.ok && $0.status == nil && $0.points == nil }.map(\.id)
        let chains = outcomes.filter { !$0.ok && $0.status == nil && $0.points != nil }.map(\.id)
        let stopped = outcomes.first { $0.status != nil }
        let unrecorded = outcomes.filter { $0.unrecorded != nil }
        guard !damaged.isEmpty || !chains.isEmpty || stopped != nil || !unrecorded.isEmpty else { return .ok }
        var parts: [String] = []
        if !damaged.isEmpty { parts.append("\(Format.plural(damaged.count, "snapshot is", "snapshots are")) damaged: \(damaged.joined(separator: ", "))") }
        if !chains.isEmpty { parts.append("\(Format.plural(chains.count, "chain of points is", "chains of points are")) damaged: \(chains.joined(separator: ", "))") }
        if let stopped { parts.append("could not check \(stopped.points == nil ? "snapshot" : "the chain of points") \(stopped.id): \(stopped.problem ?? "")") }
        if let first = unrecorded.first, stopped == nil {
            parts.append("checked, but the \"last verified\" record of \(unrecorded.map(\.id).joined(separator: ", ")) could not be written: \(first.unrecorded ?? "")")
        }
        let status: ExitStatus = damaged.isEmpty && chains.isEmpty ? ExitStatus(rawValue: stopped?.status ?? unrecorded.first?.unrecordedStatus ?? ExitStatus.ioError.rawValue) : .badData
        return Ending(.failed, error: StoreOpsError(status: status, parts.joined(separator: "; "),
                                                    hint: stopped == nil && unrecorded.isEmpty ? nil : "the outcomes above were checked; run it again once the repository can be read"
                                                        + (unrecorded.isEmpty ? "" : " (prune keeps a store's newest snapshot recorded as verified)")))
    }

    static let scratchPrefix = "storectl-verify-"

    /// The check of a format-2 safety snapshot this run just made (migrate's, purge's): its record
    /// opens, its page map assembles to its digest (the create already resolved every page and
    /// file chunk to an indexed blob), and every pack it wrote is read back whole, each frame
    /// authenticated and each blob checked against its id. What it shares with earlier snapshots was checked when those were written
    /// (and by `repo check --read-data`); the store's own `quick_check` ran on the very pages that
    /// were stored, inside the read transaction they came from. A full reassembly is `snapshot
    /// verify`.
    ///
    /// - Returns: nil when it holds, else what is wrong.
    public static func justMade(_ created: SnapshotCreate.Result, repository location: String, password: PasswordSource) throws -> String? {
        let repository = try PagedRepository.open(at: location, password: password)
        let hold = try RepositoryHold.take(repository, operation: "snapshot verify", exclusive: false, wait: false)
        defer { hold.release() }
        return try justMade(created, in: repository)
    }

    /// The same, in a repository this run already holds (the road's).
    static func justMade(_ created: SnapshotCreate.Result, in repository: PagedRepository) throws -> String? {
        let packs = created.packsWritten ?? []
        do {
            let record = try repository.record(created.id)
            let context = "snapshot \(record.id)"
            let ids = try BlobLocator.pageMap(of: record, in: repository).ids
            // Every page and file chunk resolving to an indexed blob was checked by the create
            // itself, moments ago, in this process; the map must still cover every page.
            guard ids.count == record.pages.pageCount else {
                throw StoreOpsError(.badData, "\(context): its page map holds \(ids.count) pages, not \(record.pages.pageCount)")
            }
            // A pack's header lists no ids, so the blobs are checked against the ids the index
            // lists for them (and the header must agree with the index on the rest).
            var indexed: [ContentID: PackContents] = [:]
            let wanted = Set(packs.compactMap { ContentID(hex: FileSystem.name(of: $0)) })
            try RepositoryIndex.scan(repository) { _, pack, contents in if wanted.contains(pack) { indexed[pack] = contents } }
            let checks: [(key: String, pack: ContentID)] = packs.compactMap { key in ContentID(hex: FileSystem.name(of: key)).map { (key, $0) } }
            for (key, pack) in checks where indexed[pack] == nil {
                throw StoreOpsError(.badData, "\(context): pack \(repository.backend.describe(key)), which it wrote, is in no index")
            }
            // Two lanes (a first snapshot's packs are ~30% of the store, read back, decompressed and
            // hashed whole): half the stage's time on two cores. The first problem found is reported.
            let next = Atomic<Int>(0)
            let failure = Mutex<(any Error)?>(nil)
            let found = indexed
            onLanes(min(2, checks.count)) { _ in
                do {
                    let zstd = try ZstdFrames(level: 3)
                    while failure.withLock({ $0 == nil }) {
                        let index = next.add(1, ordering: .relaxed).oldValue
                        guard index < checks.count, let contents = found[checks[index].pack] else { return }
                        let (key, pack) = checks[index]
                        let header = try PackBuilder.readHeader(repository.backend, id: pack, sealer: repository.sealer)
                        guard contents.withoutIDs == header else {
                            throw StoreOpsError(.badData, "\(context): pack \(repository.backend.describe(key)): its header and the index disagree")
                        }
                        try BlobLocator.checkPack(pack, frames: contents.frames, repository: repository, zstd: zstd)
                    }
                } catch {
                    failure.withLock { if $0 == nil { $0 = error } }
                }
            }
            if let error = failure.withLock({ $0 }) { throw error }
            return nil
        } catch let error as StoreOpsError where error.status == .badData {
            return error.message
        }
    }

    static func checkDatabase(_ path: String, level: VerifyLevel) throws -> Manifest.Verification {
        let queue = try StoreConnection.open(path, access: .readOnly, label: "storectl.snapshot-verify")
        defer { try? queue.close() }
        return queue.inDatabase { db in
            do { return try Verifier.verify(db, level: level) } catch {
                return Manifest.Verification(level: level, ok: false, messages: [StoreOpsError.sqlite(error, doing: "checking").message])
            }
        }
    }
}
