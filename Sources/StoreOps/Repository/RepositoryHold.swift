/// An opened repository and the lock this run holds on it: format 1's flock on `.lock` (writers
/// exclusive), format 2's lock object (shared for snapshot create and restore, exclusive for
/// prune and key changes). Taking it also removes what dead runs left (temp files; format 1:
/// unlisted archives).
final class RepositoryHold: @unchecked Sendable {
    let repository: OpenedRepository
    private var jobLock: JobLock?
    private var objectLock: RepositoryLock?
    private(set) var removedStray: [String] = []

    private init(repository: OpenedRepository) { self.repository = repository }

    /// The one way a run takes a repository's lock. `keepingUnindexed`: leave the packs a dead
    /// writer left unindexed (repair indexes them instead).
    static func take(_ repository: OpenedRepository, operation: String, exclusive: Bool, wait: Bool,
                     keepingUnindexed: Bool = false) throws -> RepositoryHold {
        let hold = RepositoryHold(repository: repository)
        switch repository {
        case .archives(let archives):
            hold.jobLock = try archives.lockForWriting(job: operation, wait: wait)
            hold.removedStray = archives.removeStray()
        case .paged(let paged):
            let lock = try RepositoryLock.acquire(paged.backend, exclusive: exclusive, operation: operation, wait: wait)
            hold.objectLock = lock
            // What dead writers left: temp files (local), and multipart uploads that never finish
            // (S3: only when no one else holds the repository, since a live writer's upload
            // looks the same).
            hold.removedStray = (try? paged.backend.removeAbandoned(alone: lock.othersLive == 0)) ?? []
            // A dead writer's lock was found: the packs it wrote but never indexed go now, when no
            // one else is using the repository (else the next prune takes them).
            if lock.removedStale > 0, !keepingUnindexed { hold.removedStray += (try? PagedGarbage.removeUnindexed(paged, ownLock: lock.key)) ?? [] }
        }
        return hold
    }

    func release() {
        jobLock?.release()
        jobLock = nil
        objectLock?.release()
        objectLock = nil
    }

    deinit { release() }
}
