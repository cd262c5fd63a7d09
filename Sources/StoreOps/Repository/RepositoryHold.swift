/// An opened repository and the lock this run holds on it (shared for snapshot create, restore,
/// verify and export; exclusive for prune, repair and key changes). Taking it also removes what
/// dead runs left: temp files, unfinished uploads, and packs a dead writer never indexed.
final class RepositoryHold: @unchecked Sendable {
    let repository: PagedRepository
    private var lock: RepositoryLock?
    private(set) var removedStray: [String] = []

    private init(repository: PagedRepository) { self.repository = repository }

    /// The one way a run takes a repository's lock. `keepingUnindexed`: leave the packs a dead
    /// writer left unindexed (repair indexes them instead). `readOnly`: remove nothing (a
    /// repository convert only reads).
    static func take(_ repository: PagedRepository, operation: String, exclusive: Bool, wait: Bool,
                     keepingUnindexed: Bool = false, readOnly: Bool = false, sweep: Bool = true) throws -> RepositoryHold {
        let hold = RepositoryHold(repository: repository)
        let lock = try RepositoryLock.acquire(repository.backend, exclusive: exclusive, operation: operation, wait: wait, removingStale: !readOnly)
        hold.lock = lock
        // `sweep: false`: a follower's writes every second, which leave the sweeping to the runs between.
        guard !readOnly, sweep else { return hold }
        // What dead writers left: temp files (local), and multipart uploads that never finish
        // (S3: only when no one else holds the repository, since a live writer's upload looks the
        // same).
        hold.removedStray = (try? repository.backend.removeAbandoned(alone: lock.othersLive == 0)) ?? []
        // A dead writer's lock was found: the packs it wrote but never indexed go now, when no one
        // else is using the repository (else the next prune takes them).
        if lock.removedStale > 0, !keepingUnindexed {
            hold.removedStray += (try? PagedGarbage.removeUnindexed(repository, ownLock: lock.key)) ?? []
        }
        return hold
    }

    func release() {
        lock?.release()
        lock = nil
    }

    deinit { release() }
}
