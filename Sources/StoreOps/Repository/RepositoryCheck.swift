import Foundation

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
        public var readData = false
        /// Damage: a listed snapshot may not restore. Exit 2.
        public var problems: [String] = []
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
        let opened = try OpenedRepository.open(options.location, password: options.password)
        switch opened {
        case .archives(let repository):
            return try checkArchives(repository, options: options)
        case .paged(let repository):
            let hold = try RepositoryHold.take(opened, operation: "repo check", exclusive: false, wait: false)
            defer { hold.release() }
            return try check(repository, readData: options.readData, progress: progress)
        }
    }

    static func checkArchives(_ repository: SnapshotRepository, options: Options) throws -> Report {
        var report = Report(location: repository.path, format: 1, encrypted: false, readData: options.readData)
        let (records, damaged) = repository.catalog()
        report.snapshots = records.count
        report.problems += damaged.map { "snapshot \($0.id): its catalog entry \($0.file) \($0.problem)" }
        for record in records {
            guard let facts = record.snapshot, let archive = facts.archive else { continue }
            let path = (repository.path as NSString).appendingPathComponent(archive.path)
            let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? UInt64) ?? nil
            if size != archive.bytes {
                report.problems.append("snapshot \(facts.id): its archive \(path) is \(size.map { "\($0) bytes, not \(archive.bytes)" } ?? "missing")")
            }
        }
        if options.readData {
            var verify = SnapshotVerify.Options(repository: repository.path, all: true)
            verify.password = options.password
            for outcome in try SnapshotVerify.run(verify) where !outcome.ok {
                report.problems.append("snapshot \(outcome.id): \(outcome.problem ?? "damaged")")
            }
        }
        return report
    }

    static func check(_ repository: PagedRepository, readData: Bool, progress: StepHandler?) throws -> Report {
        var report = Report(location: repository.location, format: 2, encrypted: repository.config.isEncrypted, readData: readData)
        if repository.config.isEncrypted {
            report.problems += try PagedRepository.keyFiles(repository.backend).damaged.map { "key file \(repository.backend.describe($0.key)) \($0.problem)" }
        }
        for lock in try RepositoryLock.list(repository.backend) where lock.stale {
            report.notes.append("stale lock \(repository.backend.describe(lock.key)) (\(lock.record.map { "\($0.operation) by pid \($0.pid) on \($0.host)" } ?? "unreadable")): the next writer removes it")
        }
        // Indexes.
        var indexed: [ContentID: PackContents] = [:]
        var locations: [ContentID: BlobLocation] = [:]
        // Pages as restore takes them: an index entry of type page whose length is the page size.
        var pageLengths: [ContentID: UInt32] = [:]
        let damagedIndexes = try RepositoryIndex.scan(repository) { key, pack, contents in
            if let known = indexed[pack], known != contents {
                report.problems.append("pack \(pack.hex.prefix(16))… is described differently by two indexes (one is \(key))")
            }
            indexed[pack] = contents
            for frame in contents.frames { for blob in frame.blobs {
                if locations[blob.id] == nil { locations[blob.id] = BlobLocation(pack: pack, frame: frame, blob: blob) }
                if blob.type == .page { pageLengths[blob.id] = blob.length }
            } }
        }
        report.indexes = try repository.backend.list("index/").count
        report.problems += damagedIndexes.map { "index \(repository.backend.describe($0.key)): \($0.problem) (`storectl repo repair` rebuilds the index from the packs)" }
        report.blobs = locations.count
        // Packs: each indexed one exists and its own header agrees; unindexed ones are noted.
        let stored = Set(try repository.backend.list("data/").map(\.key))
        report.packs = stored.count
        for (pack, contents) in indexed.sorted(by: { $0.key < $1.key }) {
            let key = PackBuilder.key(pack)
            guard stored.contains(key) else {
                report.problems.append("pack \(repository.backend.describe(key)) is listed by an index but missing")
                continue
            }
            do {
                let header = try PackBuilder.readHeader(repository.backend, id: pack, sealer: repository.sealer)
                // Layout 2's header lists no ids: the index's are checked against the blobs by --read-data.
                if header != (repository.sealer.isCompact ? contents.withoutIDs : contents) { report.problems.append("pack \(repository.backend.describe(key)): its header and the index disagree") }
            } catch let error as StoreOpsError where error.status == .badData {
                report.problems.append(error.message)
            }
        }
        let unindexed = stored.subtracting(indexed.keys.map(PackBuilder.key))
        if !unindexed.isEmpty {
            report.notes.append("\(Format.plural(unindexed.count, "pack is", "packs are")) in no index (left by a writer that stopped before indexing them, or their index was lost): if a snapshot needs them, `storectl repo repair` indexes them; otherwise `storectl snapshot prune` removes them")
        }
        // Snapshots: every record opens; every blob it needs is indexed.
        let (records, damagedRecords) = try repository.catalog()
        report.snapshots = records.count + damagedRecords.count
        report.problems += damagedRecords.map { "snapshot \($0.id): \($0.problem)" }
        let zstd = try ZstdFrames(level: 3)
        for record in records {
            do {
                let ids = try BlobLocator.pageMap(of: record, in: repository, locations: locations, damaged: damagedIndexes).ids
                var missing = 0
                var first: ContentID?
                for id in Set(ids) where pageLengths[id].map({ Int($0) != record.pages.pageSize }) ?? true {
                    missing += 1
                    first = first ?? id
                }
                for (id, _) in record.otherBlobs where locations[id] == nil {
                    missing += 1
                    first = first ?? id
                }
                if let first {
                    report.problems.append("snapshot \(record.id): \(Format.plural(missing, "blob is", "blobs are")) in no index as restore needs \(missing == 1 ? "it" : "them") (first \(first.hex.prefix(16))…)")
                }
            } catch let error as StoreOpsError where error.status == .badData {
                report.problems.append(error.message)
            }
        }
        // Every byte, when asked.
        if readData {
            let started = Date()
            let total = indexed.values.reduce(UInt64(0)) { $0 + $1.frames.reduce(0) { $0 + UInt64($1.sealedLength) } }
            var done: UInt64 = 0
            for (pack, contents) in indexed.sorted(by: { $0.key < $1.key }) where stored.contains(PackBuilder.key(pack)) {
                progress?(ProgressUpdate(phase: "reading every pack", done: done, total: total, unit: .bytes, bytes: done, startedAt: started))
                try ProcessSignals.checkpoint("checking \(repository.location)")
                // Neighbouring frames in one read (one request per 4 MiB in a bucket); the first
                // problem of a pack ends its reading.
                do {
                    try BlobLocator.checkPack(pack, frames: contents.frames, repository: repository, zstd: zstd) { done += UInt64($0.sealedLength) }
                } catch let error as StoreOpsError where error.status == .badData {
                    report.problems.append(error.message)
                }
            }
        }
        return report
    }
}
