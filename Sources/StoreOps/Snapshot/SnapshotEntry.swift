import Foundation

/// A snapshot in a repository of either format, and how to get it back.
public enum SnapshotEntry: Sendable {
    case archive(Manifest, SnapshotRepository)
    case paged(PagedSnapshotRecord, PagedRepository)

    public var manifest: Manifest {
        switch self {
        case .archive(let manifest, _): return manifest
        case .paged(let record, _): return record.manifest
        }
    }

    public var id: String { manifest.snapshot?.id ?? "" }

    /// Unpacks (format 1) or reassembles (format 2) the snapshot into `targets`, checking every
    /// byte on the way and ending with `level`'s integrity check.
    ///
    /// - Returns: the SHA-256 of the database written.
    /// - Throws: 65 naming the snapshot and what is damaged.
    func extract(into targets: SnapshotExtraction.Targets, level: VerifyLevel, progress: ProgressHandler? = nil) throws -> String {
        switch self {
        case .archive(let manifest, let repository):
            progress?(.stage("unpack"))
            try SnapshotExtraction.run(manifest, repository: repository, into: targets, level: level)
            return manifest.database.sha256 ?? ""
        case .paged(let record, let repository):
            return try PagedExtraction.run(record, repository: repository, into: targets, level: level, progress: progress)
        }
    }
}

extension OpenedRepository {
    /// Every snapshot that can be read, newest first, and every damaged entry.
    public func catalog() throws -> (entries: [SnapshotEntry], damaged: [SnapshotRepository.DamagedEntry]) {
        switch self {
        case .archives(let repository):
            let (records, damaged) = repository.catalog()
            return (records.map { .archive($0, repository) }, damaged)
        case .paged(let repository):
            let (records, damaged) = try repository.catalog()
            return (records.map { .paged($0, repository) }, damaged)
        }
    }

    /// The snapshot with this id or unique id prefix (66 none, 64 ambiguous, 65 damaged).
    public func entry(_ id: String) throws -> SnapshotEntry {
        switch self {
        case .archives(let repository): return .archive(try repository.record(id), repository)
        case .paged(let repository): return .paged(try repository.record(id), repository)
        }
    }

    public func lastVerification(_ id: String) -> SnapshotRepository.VerificationRecord? {
        switch self {
        case .archives(let repository): return repository.lastVerification(id)
        case .paged(let repository): return repository.lastVerification(id)
        }
    }

    func recordVerification(_ id: String, _ record: SnapshotRepository.VerificationRecord) throws {
        switch self {
        case .archives(let repository): try repository.recordVerification(id, record)
        case .paged(let repository): try repository.recordVerification(id, record)
        }
    }
}
