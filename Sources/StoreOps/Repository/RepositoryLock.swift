import Foundation

/// Who uses a format-2 repository: one object `locks/<random id>` per holder, shared (snapshot
/// create, restore, verify write-backs) or exclusive (prune, key changes). Lock objects work the
/// same on a folder and in a bucket, where flock does not exist.
///
/// A lock survives its holder's death until it is found stale: a lock of this host whose process
/// is gone, or any lock not refreshed for 30 minutes (holders rewrite theirs every 5 minutes).
/// Stale locks are removed by whoever finds them.
public final class RepositoryLock: @unchecked Sendable {
    public struct Record: Sendable, Codable, Equatable {
        public var format = "storectl-lock"
        public var host: String
        public var pid: Int32
        public var user: String
        public var exclusive: Bool
        public var operation: String
        public var created: Date
        public var refreshed: Date
        /// The holder's boot of its machine and its pid namespace (absent in locks of a storectl
        /// before these): a pid is looked at only from the same boot and namespace.
        public var boot: String?
        public var pidNamespace: String?
        /// The holder's start in clock ticks since boot (absent in locks of an older storectl).
        public var startTicks: UInt64?
    }

    /// A lock that conflicts with the one wanted.
    public struct Conflict: Sendable {
        public var key: String
        public var record: Record
    }

    static let staleAfter: TimeInterval = 30 * 60
    static let refreshEvery: TimeInterval = 5 * 60

    let backend: any RepositoryBackend
    public let key: String
    private(set) var record: Record
    private var timer: DispatchSourceTimer?
    private let queue = DispatchQueue(label: "storectl.repository-lock")
    private var released = false
    /// Locks of dead holders this one removed on its way in: their unfinished work may be left.
    private(set) var removedStale = 0
    /// Live locks of others (shared or exclusive) seen when this one was taken.
    private(set) var othersLive = 0

    private init(backend: any RepositoryBackend, key: String, record: Record) {
        self.backend = backend
        self.key = key
        self.record = record
    }

    deinit { release() }

    /// Takes the lock. Without `wait`, a conflicting lock is exit 75 naming its holder; with it,
    /// storectl retries (a signal stops it).
    /// - Parameter removingStale: remove the stale locks found (false for a run that changes
    ///   nothing: a dry run; the dead writer's lock is the evidence the next writer cleans up by).
    public static func acquire(_ backend: any RepositoryBackend, exclusive: Bool, operation: String, wait: Bool,
                               removingStale: Bool = true) throws -> RepositoryLock {
        while true {
            let id = (0..<8).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
            let now = Timestamp.now()
            let record = Record(host: ProcessInfo.processInfo.hostName, pid: getpid(),
                                user: UserName.current,
                                exclusive: exclusive, operation: operation, created: now, refreshed: now,
                                boot: ProcessIdentity.boot, pidNamespace: ProcessIdentity.pidNamespace, startTicks: ProcessIdentity.ownStartTicks)
            let lock = RepositoryLock(backend: backend, key: "locks/\(id)", record: record)
            do { try backend.write(lock.key, try JSON.encode(record), point: "lock.write") } catch let error as StoreOpsError where error.kind == .noSpace {
                // Even a prune, the command that frees space, needs a little room first: its lock,
                // then a new index of what stays, before a pack may be deleted.
                throw StoreOpsError(.noSpace, "the repository's volume is full: \(operation) cannot write its lock (\(error.message))",
                                    hint: "free a few MiB on that volume outside the repository (or grow it); then `storectl snapshot prune` can remove snapshots and delete their packs. Never delete files inside the repository by hand")
            }
            let conflicts = try lock.conflicts(removingStale: removingStale)
            guard let first = conflicts.first else {
                lock.startRefreshing()
                return lock
            }
            lock.release()
            guard wait else {
                let holder = first.record
                // Where its pid cannot be looked up here (another container of this host name,
                // another boot), only its age frees it: said, with when.
                let sameHost = holder.host == ProcessInfo.processInfo.hostName
                let judgedByAge = !sameHost
                    || ProcessIdentity.writerGone(pid: holder.pid, startTicks: holder.startTicks, boot: holder.boot, pidNamespace: holder.pidNamespace, refreshed: holder.refreshed, refreshEvery: refreshEvery) == nil
                let where_ = "on \(holder.host)" + (sameHost && judgedByAge ? ", in another pid namespace or boot (a container)" : "")
                let expires = Timestamp.iso(holder.refreshed.addingTimeInterval(staleAfter))
                throw StoreOpsError(.busy, "the repository \(backend.location) is locked \(holder.exclusive ? "exclusively" : "(shared)") by \(holder.operation) (pid \(holder.pid) \(where_), since \(Timestamp.iso(holder.created)))",
                                    hint: judgedByAge
                                        ? "try again later, or pass --wait; its process cannot be looked up from here, so if it died its lock is stale once not refreshed for 30 minutes (at \(expires) unless refreshed; `locks/` in the repository holds it)"
                                        : "try again later, or pass --wait; a lock whose holder died is removed once found stale (its process gone on this host, or not refreshed for 30 minutes)")
            }
            try ProcessSignals.checkpoint("waiting for the lock of \(backend.location)")
            usleep(useconds_t.random(in: 200_000...1_000_000))
        }
    }

    /// Other live locks that conflict with this one; stale ones are removed on the way.
    func conflicts(removingStale: Bool = true) throws -> [Conflict] {
        var found: [Conflict] = []
        othersLive = 0
        for (key, size) in try backend.list("locks/") where key != self.key {
            guard size < 1 << 16, let data = try backend.read(key),
                  let other = try? JSON.decoder().decode(Record.self, from: data) else {
                continue   // being written, or not a lock: neither blocks anyone
            }
            if Self.isStale(other) {
                guard removingStale else { continue }
                try? backend.remove(key, point: "lock.remove-stale")
                removedStale += 1
                continue
            }
            othersLive += 1
            if record.exclusive || other.exclusive { found.append(Conflict(key: key, record: other)) }
        }
        return found
    }

    static func isStale(_ record: Record, now: Date = Date()) -> Bool {
        if record.host == ProcessInfo.processInfo.hostName,
           ProcessIdentity.writerGone(pid: record.pid, startTicks: record.startTicks, boot: record.boot, pidNamespace: record.pidNamespace, refreshed: record.refreshed, refreshEvery: refreshEvery) == true {
            // Of this host name: gone when no process has its pid, or the one that has it started
            // at another tick (a reused pid). A lock of another pid namespace (a container given
            // the same host name), or of another boot that may be another machine of that name,
            // is judged by its age only (one not refreshed since well before this boot is of an earlier one).
            return true
        }
        return now.timeIntervalSince(record.refreshed) > staleAfter
    }

    private func startRefreshing() {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + Self.refreshEvery, repeating: Self.refreshEvery)
        timer.setEventHandler { [weak self] in
            guard let self, !self.released else { return }
            self.record.refreshed = Timestamp.now()
            if let data = try? JSON.encode(self.record) { try? self.backend.write(self.key, data, point: "lock.refresh") }
        }
        timer.resume()
        self.timer = timer
    }

    /// Removes the lock object (again: a no-op).
    public func release() {
        queue.sync {
            guard !released else { return }
            released = true
            timer?.cancel()
            try? backend.remove(key, point: "lock.remove")
        }
    }

    /// Every lock of the repository, stale or not (`repo locks`).
    public static func list(_ backend: any RepositoryBackend) throws -> [(key: String, record: Record?, stale: Bool)] {
        try backend.list("locks/").map { key, _ in
            let record = (try? backend.read(key)).flatMap { $0 }.flatMap { try? JSON.decoder().decode(Record.self, from: $0) }
            return (key, record, record.map { isStale($0) } ?? false)
        }
    }
}
