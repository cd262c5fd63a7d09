import Foundation

/// `storectl repo convert OLD --repo NEW`: brings every snapshot of an older repository (format 1,
/// one archive per snapshot; or format 2 of layout 1) into a format-2 repository of today's
/// layout that `repo init` made, oldest first, keeping ids, times, hosts, source paths and tags.
///
/// Each snapshot is unpacked from OLD with every check a restore makes, streamed into NEW as it
/// is (deduplicated against the snapshots already brought over), committed, and then reassembled
/// from NEW and compared byte for byte with what OLD held: a snapshot counts as converted only
/// then. OLD is only read. A run killed anywhere is run again: what it committed is found,
/// verified and not written twice; what it had not committed is removed by the next run.
/// A snapshot OLD cannot give back whole is reported (exit 2) and the others are still converted.
public enum RepositoryConvert {
    public struct Options: Sendable {
        public var source: String
        public var sourcePassword: PasswordSource
        public var target: String
        public var password: PasswordSource
        public var scratch: String?

        public init(source: String, sourcePassword: PasswordSource, target: String, password: PasswordSource) {
            self.source = source
            self.sourcePassword = sourcePassword
            self.target = target
            self.password = password
        }
    }

    public struct Report: Sendable, Codable {
        public var source: String
        public var sourceKind: String
        public var target: String
        /// Brought over and verified by this run.
        public var converted: [SnapshotImport.Result] = []
        /// Already in the target from an earlier run: verified again.
        public var alreadyThere: [String] = []
        /// Not brought over: the old repository cannot give them back whole (id and why).
        public var failed: [Failure] = []
        /// Worth knowing, not a failure: format-1 archives no catalog entry names (left by a
        /// create or prune that was interrupted: format 1 does not count them as snapshots).
        public var notes: [String] = []
        public var ok: Bool { failed.isEmpty }
    }

    public struct Failure: Sendable, Codable, Equatable {
        public var id: String
        public var problem: String
    }

    /// How a convert ended: ok, or checks found problems (2) naming what was not brought over.
    public static func ending(of report: Report) -> Ending {
        guard !report.ok else { return .ok }
        return Ending(.checksFailed, error: StoreOpsError(.checksFailed, "\(Format.plural(report.failed.count, "snapshot was", "snapshots were")) not converted from \(report.source)",
                                                          hint: "the others were; `storectl snapshot verify --all --repo \(report.source)` tells what is damaged"))
    }

    /// - Throws: 64 when OLD and NEW are one repository, 65 for a NEW that is not today's format 2,
    ///   66 for a missing one, 77 for a wrong password, 74/75 as the repositories' I/O does.
    public static func run(_ options: Options, progress: ProgressHandler? = nil) throws -> Report {
        guard !options.source.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw StoreOpsError(.usage, "no repository to convert named", hint: "storectl repo convert OLD --repo NEW")
        }
        let pipeline = Pipeline(operation: "repo convert", progress: progress)
        var road = PlannedRoad<HeldSource, Report>(
            lock: .none, actName: "convert",
            preflight: { pipeline in
                try HeldSource(options.source, password: options.sourcePassword, sameAsNew: options.sourcePassword == options.password,
                               target: try pipeline.repository)
            },
            act: { pipeline, source in
                defer { source.release() }
                return try convert(source.repository, into: try pipeline.repository, scratch: options.scratch, progress: progress)
            })
        road.repository = .init(options.target, password: options.password, exclusive: false)
        road.abandon = { source in source.release() }
        return try pipeline.walk(road).get()
    }

    /// The old repository, opened and locked for the run (the preflight's plan).
    final class HeldSource {
        let repository: OldRepository
        let release: () -> Void

        /// `sameAsNew`: no password of its own was given for the old repository (the new one's is
        /// tried): a wrong one's hint says how to give it.
        init(_ location: String, password: PasswordSource, sameAsNew: Bool, target: PagedRepository) throws {
            do {
                repository = try OldRepository.open(location, password: password)
            } catch var error as StoreOpsError {
                // The hints the repository gives name the options of the one a command works on
                // (--repo, --password-file); here it is the other one.
                switch error.kind {
                case .wrongPassword:
                    error.message = "the repository to convert: " + error.message
                    error.hint = sameAsNew
                        ? "the password tried on it is the new repository's (no --old-password-file was given, or the same file): pass --old-password-file FILE with the old repository's password"
                        : "check what the file given with --old-password-file holds"
                case .noInput where !S3Backend.isS3(location) && FileSystem.kind(of: FileSystem.absolute(location)) == .missing:
                    error.hint = "check OLD, the repository to convert (the first argument): a folder, or s3://BUCKET/PREFIX"
                default: break
                }
                throw error
            }
            guard repository.location != target.location else {
                throw StoreOpsError(.usage, "\(target.location) is both the repository to convert and the one to convert into",
                                    hint: "make a new repository with `storectl repo init --repo NEW` and convert into it")
            }
            release = try repository.hold()
        }
    }

    /// Every snapshot of `source`, oldest first, into `target`.
    static func convert(_ source: OldRepository, into target: PagedRepository, scratch base: String?, progress: ProgressHandler?) throws -> Report {
        var report = Report(source: source.location, sourceKind: source.kind, target: target.location)
        let snapshots = try oldestFirst(source, into: &report)
        for (n, snapshot) in snapshots.enumerated() {
            try ProcessSignals.checkpoint("converting \(source.location)")
            progress?(.stage("\(snapshot.id) (\(n + 1) of \(snapshots.count))"))
            let (needed, overflow) = snapshot.bytes.multipliedReportingOverflow(by: 3)
            guard !overflow, snapshot.bytes < 1 << 50 else {
                report.failed.append(Failure(id: snapshot.id, problem: "its record gives an impossible size (\(snapshot.bytes) bytes)"))
                continue
            }
            let scratch = try SnapshotImport.Scratch(in: base, label: "convert", needing: needed)
            defer { scratch.discard() }
            let database: String
            do {
                let targets = try scratch.targets(for: nil)
                try snapshot.extract(targets)
                database = try scratch.stage(databaseNamed: FileSystem.name(of: snapshot.manifest.database.path))
            } catch let error as StoreOpsError where error.status == .badData {
                report.failed.append(Failure(id: snapshot.id, problem: error.message))
                continue
            }
            let result = try SnapshotImport.bringIn(database: database, origin: snapshot.manifest, into: target, scratch: scratch, progress: progress)
            if result.alreadyThere { report.alreadyThere.append(result.id) } else { report.converted.append(result) }
        }
        return report
    }

    /// One snapshot of the old repository: its manifest and how to unpack it, checked.
    struct OldSnapshot {
        var id: String
        var manifest: Manifest
        var bytes: UInt64
        var extract: (SnapshotExtraction.Targets) throws -> Void
    }

    /// Every snapshot of the old repository, oldest first; damaged catalog entries are reported.
    static func oldestFirst(_ repository: OldRepository, into report: inout Report) throws -> [OldSnapshot] {
        var out: [OldSnapshot] = []
        switch repository {
        case .formatOne(let archives):
            let (records, damaged, orphaned) = archives.catalog()
            report.failed += damaged.map { Failure(id: $0.id, problem: "its catalog entry \($0.file) \($0.problem)") }
            report.notes += orphaned
            for record in records {
                guard let id = record.snapshot?.id else { continue }
                let external = record.externalData?.totalBytes ?? 0
                let (bytes, overflow) = record.database.bytes.addingReportingOverflow(external)
                out.append(OldSnapshot(id: id, manifest: record, bytes: overflow ? .max : bytes) { targets in
                    try SnapshotExtraction.run(record, repository: archives, into: targets, level: .quick)
                })
            }
        case .paged(let paged):
            let (records, damaged) = try paged.catalog()
            report.failed += damaged.map { Failure(id: $0.id, problem: $0.problem) }
            for record in records {
                let external = record.files.reduce(UInt64(0)) { $0 &+ min($1.bytes, 1 << 50) }
                let (bytes, overflow) = record.manifest.database.bytes.addingReportingOverflow(external)
                out.append(OldSnapshot(id: record.id, manifest: record.manifest, bytes: overflow ? .max : bytes) { targets in
                    try PagedExtraction.run(record, repository: paged, into: targets, level: .quick, fileHash: false)
                })
            }
        }
        return out.sorted { ($0.manifest.startedAt, $0.id) < ($1.manifest.startedAt, $1.id) }
    }
}

/// The repository `repo convert` reads: format 1, or format 2 of either layout (layout 2 is
/// simply copied).
enum OldRepository {
    case formatOne(FormatOneRepository)
    case paged(PagedRepository)

    /// - Throws: 66 when there is nothing at `location`, 65 when it is not a repository.
    static func open(_ location: String, password: PasswordSource) throws -> OldRepository {
        if !S3Backend.isS3(location) {
            let absolute = FileSystem.absolute(location)
            if FileSystem.kind(of: absolute) == .directory, FormatOneRepository.isOne(absolute) {
                return .formatOne(try FormatOneRepository.open(absolute))
            }
        }
        return .paged(try PagedRepository.open(try RepositoryLocation.backend(location, missing: .lookAround), password: password, oldLayout: true))
    }

    var location: String {
        switch self {
        case .formatOne(let archives): return archives.path
        case .paged(let paged): return paged.location
        }
    }

    var kind: String {
        switch self {
        case .formatOne: return "format 1"
        case .paged(let paged): return paged.config.idBytes == 16 ? "format 2" : "format 2, layout 1"
        }
    }

    /// Takes its lock for the run (format 1: its writers' flock; format 2: a shared lock) and
    /// returns what releases it. Nothing is removed from it: convert only reads.
    func hold() throws -> () -> Void {
        switch self {
        case .formatOne(let archives):
            let lock = try archives.lock(job: "repo convert (reading)")
            return { lock.release() }
        case .paged(let paged):
            let hold = try RepositoryHold.take(paged, operation: "repo convert (reading)", exclusive: false, wait: false, readOnly: true, readsOnly: true)
            return { hold.release() }
        }
    }
}
