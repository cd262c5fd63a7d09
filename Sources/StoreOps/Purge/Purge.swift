import Foundation
import GRDB
import Logging

/// `storectl purge`: deletes the soft-deleted rows a policy's rules have expired, in small
/// batches that never stall the app, honouring Core Data's delete rules.
public enum Purge {
    public struct Options: Sendable {
        public var policy: String
        /// Count what each rule would delete (cascades included) and change nothing.
        public var dryRun = false
        /// Another kill-switch file (the store's own, `<store>.storectl-killswitch`, always counts).
        public var killSwitch: String?
        /// The moment retention counts back from (tests pin it).
        public var now = Date()
        /// The caller (`storectl run`) already holds the store's job lock.
        public var jobLockHeld = false
        /// Skip the policy's snapshot-before-purge (`storectl run maintain` has just taken one).
        public var skipSnapshot = false

        public init(policy: String, dryRun: Bool = false, killSwitch: String? = nil) {
            self.policy = policy
            self.dryRun = dryRun
            self.killSwitch = killSwitch
        }
    }

    public struct RuleReport: Sendable, Codable {
        public var name: String
        public var target: String
        public var table: String
        public var cutoff: Date?
        /// Rows matching when the run started, and the rows they were chosen among.
        public var candidates: Int
        public var total: Int
        public var deleted = 0
        public var cascaded: [String: Int] = [:]
        public var nullified: [String: Int] = [:]
        public var joinRows = 0
        public var denied = 0
        public var deniedSamples: [String] = []
        public var batches = 0
        public var seconds = 0.0
        public var stopped: StopReason?
        public var notes: [String] = []

        public var rowsPerSecond: Double { seconds > 0 ? Double(deleted) / seconds : 0 }
    }

    public struct Report: Sendable, Codable {
        public var policy: String
        public var store: String
        public var dryRun: Bool
        /// The snapshot taken first, if the policy asks for one.
        public var snapshot: String?
        public var rules: [RuleReport] = []
        /// Circuit breakers that refused the run (nothing was deleted).
        public var tripped: [String] = []
        public var stopped: StopReason?
        public var checkpointed = false

        /// 0 done; 2 a circuit breaker or a deny rule stopped rows; 1 stopped by the kill switch;
        /// 128+N stopped by signal N (finished batches stay committed).
        public var status: ExitStatus {
            if !tripped.isEmpty || rules.contains(where: { $0.denied > 0 }) { return .checksFailed }
            switch stopped {
            case .signal(let number)?: return .signal(number)
            case .killSwitch?: return .failure
            default: return .ok
            }
        }
    }

    static let logger = Logger(label: "storectl.purge")

    /// Rest after each batch, as a fraction of the time the batch held the write lock.
    static let yieldFactor = 0.5

    /// Runs the policy's purge.
    ///
    /// - Throws: 66/65 for a missing or malformed policy or store, 75 when another job holds the
    ///   store's lock or the app holds its write lock past `busy_timeout`, and the snapshot's
    ///   errors when the snapshot taken first fails (nothing is deleted then). Outcomes that are
    ///   not errors (circuit breaker, deny, kill switch, signal) are in the report's `status`.
    public static func run(_ options: Options, progress: ProgressHandler? = nil) throws -> Report {
        let policy = try Policy.load(options.policy)
        let store = try StoreFile(existing: policy.store.path)
        guard !policy.rules.isEmpty else {
            throw StoreOpsError(.badData, "\(policy.file) has no [[purge]] rules", hint: "add a [[purge]] table, see Policies/README.md")
        }
        let lock = options.dryRun || options.jobLockHeld ? nil : try JobLock.acquire(path: store.jobLockPath, job: "purge")
        defer { lock?.release() }
        if !options.dryRun { try Recovery.prepare(store, lockHeld: true) }
        var report = Report(policy: policy.file, store: store.path, dryRun: options.dryRun)
        let killSwitch = KillSwitch(store: store, extra: options.killSwitch)
        if let thrown = killSwitch.engaged {
            report.stopped = .killSwitch(thrown)
            return report
        }

        let queue = try StoreConnection.open(store.path, access: options.dryRun ? .readOnly : .readWrite,
                                             busyTimeout: policy.store.busyTimeout.seconds, label: "storectl.purge")
        defer { try? queue.close() }
        let targets = try queue.inDatabase { db -> [PurgeTarget] in
            // Batches revisit the same index pages: a 32 MiB page cache instead of SQLite's 2 MiB.
            try db.execute(sql: "PRAGMA cache_size = -32768")
            if !options.dryRun {
                try db.execute(sql: "PRAGMA foreign_keys = ON")   // honour declared ON DELETE actions
                // "WAL mode is always consistent with synchronous=NORMAL" (https://sqlite.org/pragma.html#pragma_synchronous):
                // a batch committed just before a power cut may be lost, never half-applied, and the
                // next run purges it again. It saves an fsync per batch.
                if try String.fetchOne(db, sql: "PRAGMA journal_mode")?.lowercased() == "wal" {
                    try db.execute(sql: "PRAGMA synchronous = NORMAL")
                }
            }
            switch try PurgePlanner.resolve(policy, db: db, now: options.now) {
            case .success(let targets): return targets
            case .failure(let problems): throw problems.storeOpsError
            }
        }
        // Every circuit breaker before anything is deleted (or snapshotted).
        for target in targets {
            let (candidates, total): (Int, Int)
            do { (candidates, total) = try queue.inDatabase { try target.counts($0) } } catch {
                throw StoreOpsError.sqlite(error, doing: "counting the rows of rule \(target.rule.name) in \(target.table)")
            }
            var rule = RuleReport(name: target.rule.name, target: target.rule.target.description, table: target.table,
                                  cutoff: target.cutoff, candidates: candidates, total: total, notes: target.notes)
            if let limit = target.rule.maxFraction, total > 0, Double(candidates) / Double(total) > limit {
                report.tripped.append("rule \(target.rule.name): \(Format.count(candidates)) of \(Format.count(total)) rows "
                    + "(\(Format.percent(Double(candidates) / Double(total)))) would go, above max_fraction \(Format.percent(limit))")
            }
            report.rules.append(rule)
        }
        guard report.tripped.isEmpty else { return report }

        if !options.dryRun, !options.skipSnapshot, let snapshot = policy.snapshot, snapshot.beforePurge {
            let created = try SnapshotCreate.run(store: store.path, options: .init(
                repository: snapshot.repository, tags: snapshot.tags.isEmpty ? ["pre-purge"] : snapshot.tags,
                compression: snapshot.compression, level: snapshot.level))
            report.snapshot = created.id
        }

        let started = Date()
        for (index, target) in targets.enumerated() {
            try purge(target, into: &report.rules[index], queue: queue, options: options, killSwitch: killSwitch, progress: progress)
            if let stopped = report.rules[index].stopped, !stopped.isLimit {
                report.stopped = stopped
                break
            }
        }
        if !options.dryRun {
            // Let the WAL shrink back without ever waiting on the app (PASSIVE never blocks).
            try queue.inDatabase { db in
                if try String.fetchOne(db, sql: "PRAGMA journal_mode")?.lowercased() == "wal" {
                    _ = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(PASSIVE)")
                    report.checkpointed = true
                }
            }
        }
        logger.debug("purge finished", metadata: ["seconds": "\(Date().timeIntervalSince(started))"])
        return report
    }

    static func purge(_ target: PurgeTarget, into rule: inout RuleReport, queue: DatabaseQueue, options: Options,
                      killSwitch: KillSwitch, progress: ProgressHandler?) throws {
        let started = Date()
        let arguments = target.condition.arguments
        let select = target.batchSelectSQL
        let confirmSQL = "SELECT rowid FROM \(quoteIdentifier(target.table)) WHERE rowid IN (SELECT value FROM json_each(?)) AND \(target.condition.sql) ORDER BY rowid"
        var cursor: Int64 = 0
        defer { rule.seconds = Date().timeIntervalSince(started) }
        while true {
            if let signal = ProcessSignals.received { rule.stopped = .signal(signal); return }
            if let thrown = killSwitch.engaged { rule.stopped = .killSwitch(thrown); return }
            if let max = target.rule.maxRows, rule.deleted >= max { rule.stopped = .maxRows(max); return }
            if let limit = target.rule.maxRuntime, Date().timeIntervalSince(started) >= limit.seconds {
                rule.stopped = .maxRuntime(limit.seconds)
                return
            }
            let size = min(target.rule.batchSize, target.rule.maxRows.map { $0 - rule.deleted } ?? Int.max)
            var batchArguments: StatementArguments = [cursor]
            _ = batchArguments.append(contentsOf: arguments)
            _ = batchArguments.append(contentsOf: [size])
            let batchStarted = Date()
            var lockHeld: TimeInterval = 0
            let done: Bool = try queue.inDatabase { db in
                do {
                    // Candidates are found outside the write lock: the scan costs the app nothing.
                    let ids = try Int64.fetchAll(db, sql: select, arguments: batchArguments)
                    guard let last = ids.last else { return true }
                    cursor = last
                    let locked = Date()
                    try db.execute(sql: options.dryRun ? "BEGIN" : "BEGIN IMMEDIATE")
                    // Under the lock, keep those that still match (the app may have changed them since).
                    var recheck: StatementArguments = [BatchClosure.json(ids)]
                    _ = recheck.append(contentsOf: arguments)
                    let confirmed = try Int64.fetchAll(db, sql: confirmSQL, arguments: recheck)
                    let closure = try BatchClosure(roots: confirmed, table: target.table, graph: target.graph, db: db)
                    let effects = options.dryRun ? try closure.count(db: db) : try closure.apply(db: db)
                    try db.execute(sql: options.dryRun ? "ROLLBACK" : "COMMIT")
                    if !options.dryRun { FaultInjection.reach("purge.batch-committed") }
                    lockHeld = Date().timeIntervalSince(locked)
                    rule.batches += 1
                    rule.deleted += effects.roots
                    rule.joinRows += effects.joinRows
                    for (table, count) in effects.cascaded { rule.cascaded[table, default: 0] += count }
                    for (column, count) in effects.nullified { rule.nullified[column, default: 0] += count }
                    rule.denied += closure.denied.count
                    for (pk, reason) in closure.denied.sorted(by: { $0.key < $1.key }) where rule.deniedSamples.count < 10 {
                        rule.deniedSamples.append("\(target.table) row \(pk): \(reason)")
                    }
                    return ids.count < size
                } catch {
                    if db.isInsideTransaction { try? db.execute(sql: "ROLLBACK") }
                    throw StoreOpsError.sqlite(error, doing: "purging \(target.table) (rule \(target.rule.name))", side: .output)
                }
            }
            logger.trace("batch", metadata: ["n": "\(rule.batches)", "ms": "\(Int(Date().timeIntervalSince(batchStarted) * 1000))"])
            progress?(ProgressUpdate(phase: "purge \(target.rule.name)", done: UInt64(rule.deleted), total: UInt64(max(rule.candidates, rule.deleted)),
                                     unit: .rows, bytes: 0, startedAt: started))
            if done { return }
            // The app's writers poll for the lock (SQLite's busy handler sleeps 1, 2, 5, 10, 15, 20,
            // 25... ms between tries), so a purge that takes the lock again at once starves them: in
            // the benchmark, commits waited up to 2 s. After each batch storectl rests at least half as
            // long as it held the lock (and at least `pause`), so the lock is free a third of the time
            // or more and a waiting commit gets in within a few of its tries.
            let rest = options.dryRun ? target.rule.pause : max(target.rule.pause, lockHeld * Self.yieldFactor)
            if rest > 0 { usleep(useconds_t(rest * 1_000_000)) }
        }
    }
}

extension StopReason {
    /// max_rows and max_runtime end a rule as planned; the other reasons end the run.
    public var isLimit: Bool {
        switch self {
        case .maxRows, .maxRuntime: true
        default: false
        }
    }
}
