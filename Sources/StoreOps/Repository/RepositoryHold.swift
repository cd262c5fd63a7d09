import Foundation
import Logging

/// An opened repository and the lock this run holds on it (shared for snapshot create, restore,
/// verify and export; exclusive for prune, repair and key changes). Taking it also removes what
/// dead runs left: temp files, unfinished uploads, and packs a dead writer never indexed.
final class RepositoryHold: @unchecked Sendable {
    static let logger = Logger(label: "storectl.repository")
    let repository: PagedRepository
    private var lock: RepositoryLock?
    private(set) var removedStray: [String] = []

    private init(repository: PagedRepository) { self.repository = repository }

    /// The one way a run takes a repository's lock. `keepingUnindexed`: leave the packs a dead
    /// writer left unindexed (repair indexes them instead). `readOnly`: remove nothing (a
    /// repository convert only reads).
    ///
    /// `readsOnly`: the run only reads the repository (a restore, an export, a verify or check, a
    /// dry run). When its lock cannot be written because the repository cannot be written at all
    /// (its volume full or mounted read-only, no write permission, a read-only key), it reads
    /// without one, saying so: a restore is wanted most when the disk is full or the repository is
    /// an offline copy mounted read-only, and a lock is only there so that no prune removes what
    /// it reads; a prune meanwhile makes the read fail (every page is checked against its content
    /// id), never gives other data. `withoutLock` says why, then.
    static func take(_ repository: PagedRepository, operation: String, exclusive: Bool, wait: Bool,
                     keepingUnindexed: Bool = false, readOnly: Bool = false, sweep: Bool = true, readsOnly: Bool = false) throws -> RepositoryHold {
        let hold = RepositoryHold(repository: repository)
        let lock: RepositoryLock
        do {
            lock = try RepositoryLock.acquire(repository.backend, exclusive: exclusive, operation: operation, wait: wait, removingStale: !readOnly)
        } catch let error as StoreOpsError where readsOnly && !exclusive && Self.cannotWrite(error) {
            hold.withoutLock = error.message
            Self.logger.warning("reading \(repository.location) without a lock: \(error.message); a prune running meanwhile could remove what \(operation) reads (it would then fail, never give other data)")
            return hold
        }
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

    /// Why this run reads without a lock (see `take`'s `readsOnly`), or nil.
    private(set) var withoutLock: String?

    /// A lock write refused because nothing can be written there: a full volume, a read-only one,
    /// no write permission (a folder, or object storage's access denied for a read-only key).
    static func cannotWrite(_ error: StoreOpsError) -> Bool {
        switch error.kind {
        case .noSpace, .cannotCreate: return true
        case .wrongPassword: return error.message.lowercased().contains("access denied") || error.message.contains("AccessDenied")
        default: return false
        }
    }

    func release() {
        lock?.release()
        lock = nil
    }

    deinit { release() }
}
