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
        let source = try OpenedRepository.open(options.source, password: options.sourcePassword)
        let target = try SnapshotImport.openTarget(options.target, password: options.password, command: "repo convert")
        guard source.location != target.location else {
            throw StoreOpsError(.usage, "\(target.location) is both the repository to convert and the one to convert into",
                                hint: "make a new repository with `storectl repo init --repo NEW` and convert into it")
        }
        let sourceHold = try RepositoryHold.take(source, operation: "repo convert (reading)", exclusive: false, wait: false)
        defer { sourceHold.release() }
        let targetHold = try RepositoryHold.take(.paged(target), operation: "repo convert", exclusive: false, wait: false)
        defer { targetHold.release() }
        var report = Report(source: source.location, sourceKind: kind(of: source), target: target.location)
        let snapshots = try oldestFirst(source, into: &report)
        for (n, snapshot) in snapshots.enumerated() {
            try ProcessSignals.checkpoint("converting \(source.location)")
            progress?(.stage("\(snapshot.id) (\(n + 1) of \(snapshots.count))"))
            let (needed, overflow) = snapshot.bytes.multipliedReportingOverflow(by: 3)
            guard !overflow, snapshot.bytes < 1 << 50 else {
                report.failed.append(Failure(id: snapshot.id, problem: "its record gives an impossible size (\(snapshot.bytes) bytes)"))
                continue
            }
            let scratch = try SnapshotImport.Scratch(in: options.scratch, label: "convert", needing: needed)
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

    static func kind(of repository: OpenedRepository) -> String {
        switch repository {
        case .archives: return "format 1"
        case .paged(let paged): return paged.sealer.isCompact ? "format 2" : "format 2, layout 1"
        }
    }

    /// Every snapshot of the old repository, oldest first; damaged catalog entries are reported.
    static func oldestFirst(_ repository: OpenedRepository, into report: inout Report) throws -> [OldSnapshot] {
        var out: [OldSnapshot] = []
        switch repository {
        case .archives(let archives):
            let (records, damaged) = archives.catalog()
            report.failed += damaged.map { Failure(id: $0.id, problem: "its catalog entry \($0.file) \($0.problem)") }
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
                    try PagedExtraction.run(record, repository: paged, into: targets, level: .quick)
                })
            }
        }
        return out.sorted { ($0.manifest.startedAt, $0.id) < ($1.manifest.startedAt, $1.id) }
    }
}
