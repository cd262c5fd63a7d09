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
        /// The repository's password (`--password-file`), over the policy's and the environment's.
        public var password: PasswordSource?
        /// This run is a dry run's, on its scratch copy of the store.
        var inScratchCopy = false

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
        /// The rule's `on_deny`: whether rows its deny rules keep fail the run.
        public var onDeny: PurgeRule.OnDeny = .keep
        public var batches = 0
        /// Batches whose own changes (SQLite's pre-update hook) were exactly their plan.
        public var verifiedBatches = 0
        /// Rows the store's own triggers and declared ON DELETE actions changed, per table.
        public var triggered: [String: Int] = [:]
        public var seconds = 0.0
        public var stopped: StopReason?
        public var notes: [String] = []

        public var rowsPerSecond: Double { seconds > 0 ? Double(deleted) / seconds : 0 }
    }

    public struct Report: Sendable, Codable {
        public var policy: String
        public var store: String
        public var dryRun: Bool
        /// The snapshot taken first (and verified), if the policy asks for one.
        public var snapshot: String?
        /// What that snapshot added to the repository (the job log's `snapshotBytes`, the metrics').
        public var snapshotBytes: UInt64?
        /// That snapshot was made from this point of `storectl replicate` (the store's state then),
        /// not by reading the store (`PointSnapshot`).
        public var snapshotPoint: String?
        /// In a dry run: the repository the run would snapshot into first, opened.
        public var snapshotCheck: String?
        /// In a dry run: why its counts may differ from the run's (nil: it ran the purge on a copy).
        public var dryRunNote: String?
        /// In a dry run: what would stop the real run if it started now (an engaged kill switch,
        /// another job holding the store's lock). The dry run takes no lock and changes nothing,
        /// so neither stops it; it said "ok" where the run would end 1 or 75 (found by a helper).
        public var wouldStop: [String] = []
        public var rules: [RuleReport] = []
        /// Circuit breakers that refused the run (nothing was deleted).
        public var tripped: [String] = []
        public var stopped: StopReason?
        public var checkpointed = false
        /// What was checked after the deletes (quick_check of the tables written, orphans).
        public var verified: [String] = []
        /// How it ended: ok; refused (a breaker, or deny rules keeping rows: 2); stopped (the kill
        /// switch 1, a signal 128+N: finished batches stay committed); failed.
        public var ending: Ending = .ok
        public var stages: [StageTiming] = []

        public var status: ExitStatus { ending.status }
    }

    static let logger = Logger(label: "storectl.purge")

    /// Rest after each batch, as a fraction of the time the batch held the write lock.
    static let yieldFactor = 0.5

    /// Runs the policy's purge, walking the pipeline: lock (exclusive), preflight (the plan,
    /// every rule's circuit breaker), snapshot (when the policy asks: made and verified, or nothing
    /// is deleted), purge (batches), verify (`quick_check` of every table written, and no new
    /// orphaned Core Data references).
    ///
    /// - Throws: 66/65 for a missing or malformed policy or store. Every other way a run ends
    ///   (75 locked, a breaker, deny rules, the kill switch, a signal, a failure) is the report's
    ///   `ending`.
    public static func run(_ options: Options, progress: ProgressHandler? = nil) throws -> Report {
        var policy = try Policy.load(options.policy)
        if let password = options.password { policy.snapshot?.passwordSource = password }
        let store = try StoreFile(existing: policy.store.path)
        guard !policy.rules.isEmpty else {
            throw StoreOpsError(.badData, "\(policy.file) has no [[purge]] rules", hint: "add a [[purge]] table, see Policies/README.md")
        }
        do {
            if options.dryRun, !options.inScratchCopy {
                var report: Report
                if let onCopy = try dryRunOnCopy(policy, store: store, options: options, progress: progress) {
                    report = onCopy
                } else {
                    report = try run(policy, store: store, options: options, progress: progress)
                    report.dryRunNote = "no room for a scratch copy in \(FileSystem.absolute(NSTemporaryDirectory())) (TMPDIR): each rule was counted "
                        + "against the store as it is, so a rule after another may count rows that one deletes first"
                }
                report.wouldStop = wouldStop(store, killSwitch: options.killSwitch)
                return report
            }
            return try run(policy, store: store, options: options, progress: progress)
        } catch var error as StoreOpsError {
            // SQLite's busy and full errors carry generic hints naming what purge does not have (a
            // --timeout, a destination): its wait is the policy's, the volume that filled the store's
            // (or TMPDIR's, for a dry run's copy). A lock held by another storectl job, or the
            // repository's, keeps its own hint.
            if error.kind == .busy, error.message.contains("the store is busy") {
                error.hint = "another process held the store's lock longer than [store] busy_timeout (\(policy.store.busyTimeout.text)) in \(policy.file); "
                    + "try again later, or raise busy_timeout"
            } else if [.noSpace, .ioError].contains(error.kind), error.message.contains("no space left") {
                error.hint = options.dryRun ? "free space in TMPDIR (\(FileSystem.absolute(NSTemporaryDirectory()))), where the dry run copies the store; nothing was changed"
                    : "free space on the store's volume (\(store.folder)); the batches committed before are kept, the rest is untouched"
            }
            throw error
        }
    }

    /// What would stop a real run of this purge now (see `Report.wouldStop`).
    static func wouldStop(_ store: StoreFile, killSwitch extra: String?, before first: String = "its first batch") -> [String] {
        var found: [String] = []
        if let engaged = KillSwitch(store: store, extra: extra).engaged {
            found.append("the kill switch \(engaged) is engaged: the run would stop before \(first) (`storectl killswitch release \(store.path)` lets it go on)")
        }
        if let holder = JobLock.currentHolder(path: store.jobLockPath) {
            found.append("another job (\(holder.job), pid \(holder.pid)) holds the store's job lock: the run would be skipped (75) until it ends")
        }
        return found
    }

    /// The dry run: the purge itself, run on a scratch copy of the store in the temp folder (the
    /// online backup API, one read transaction: the app is not blocked), so it says what the run
    /// will do. Each rule sees what the rules before it deleted: counting each rule against the
    /// store as it is counted, for example, the category references of items an earlier rule
    /// deletes as nullified (1,969 predicted where the run cleared 1,681 on the example store).
    /// Nil when the temp folder has no room for the copy: the caller then counts each rule
    /// alone, and the report says so.
    static func dryRunOnCopy(_ policy: Policy, store: StoreFile, options: Options, progress: ProgressHandler?) throws -> Report? {
        let folder = FileSystem.absolute(NSTemporaryDirectory())
        let bytes = (FileSystem.size(of: store.path) ?? 0) + (FileSystem.size(of: store.walPath) ?? 0)
        let needed = bytes + SpaceRequirement.margin(bytes)
        guard SpaceRequirement.fits(needed, at: folder) else { return nil }
        PendingFile.removeStale(in: folder, prefix: "storectl-purge-dry-run-")
        let copy = try PendingFile(finalPath: (folder as NSString).appendingPathComponent("storectl-purge-dry-run-\(getpid()).sqlite"), label: "purge.dry-run.copy")
        defer {
            copy.discard()
            for suffix in ["-wal", "-shm", "-journal"] { FileSystem.remove(copy.tempPath + suffix, point: "purge.dry-run.copy.sidecar.remove") }
        }
        progress?(.stage("copy"))
        do {
            let source = try StoreConnection.open(store.path, access: .readOnly, busyTimeout: policy.store.busyTimeout.seconds, label: "storectl.purge-dry-run")
            defer { try? source.close() }
            let target = try DatabaseQueue(path: copy.tempPath)
            try source.backup(to: target)
            try target.writeWithoutTransaction { try $0.execute(sql: "PRAGMA journal_mode = DELETE") }
            try target.close()
        } catch {
            throw StoreOpsError.sqlite(error, doing: "copying \(store.path) for the dry run into \(folder)")
        }
        var onCopy = policy
        onCopy.store.path = copy.tempPath
        var copyOptions = options
        copyOptions.dryRun = false
        copyOptions.inScratchCopy = true
        copyOptions.skipSnapshot = true
        copyOptions.jobLockHeld = true
        var report = try run(onCopy, store: StoreFile(unchecked: copy.tempPath), options: copyOptions, progress: progress)
        report.policy = policy.file
        report.store = store.path
        report.dryRun = true
        report.checkpointed = false
        report.verified = []
        // What the real run would do first: open the repository it snapshots into.
        if !options.skipSnapshot, let section = policy.snapshot, section.beforePurge {
            let opened = try PagedRepository.open(at: section.repository, password: section.password, missing: .initHint)
            report.snapshotCheck = "would snapshot into \(opened.location) first (\(opened.config.isEncrypted ? "opened with the password" : "opened"))"
        }
        return report
    }

    static func run(_ policy: Policy, store: StoreFile, options: Options, progress: ProgressHandler?) throws -> Report {
        try KillSwitch.checkExtra(options.killSwitch)
        let killSwitch = KillSwitch(store: store, extra: options.killSwitch)
        let pipeline = Pipeline(operation: "purge", store: store, killSwitch: killSwitch, progress: progress)
        let session = Session(policy: policy, store: store, options: options, killSwitch: killSwitch)
        var road = Road<Session>(lock: options.dryRun ? .none : (options.jobLockHeld ? .held : .exclusive), actName: "purge") { pipeline in
            try session.purgeAll(pipeline)
            return session
        }
        road.preflight = { _ in try session.plan() }
        if !options.skipSnapshot, let section = policy.snapshot, section.beforePurge {
            if options.dryRun {
                // The dry run takes no snapshot, but it opens the repository with the password the
                // run would use: a run that would fail there fails its dry run too.
                road.snapshot = { _, _ in
                    let opened = try PagedRepository.open(at: section.repository, password: section.password, missing: .initHint)
                    session.report.snapshotCheck = "would snapshot into \(opened.location) first (\(opened.config.isEncrypted ? "opened with the password" : "opened"))"
                    return ""
                }
            } else {
                // The store alone, then the repository shared, in the lock stage.
                road.repository = .init(section.repository, password: section.password, exclusive: false, missing: .initHint)
                road.snapshot = { pipeline, _ in try session.snapshot(section, in: pipeline) }
            }
        }
        if !options.dryRun {
            road.verify = { _, session in try session.verifyAfter() }
            road.keptAfterAct = "the batches it committed are kept (the check after them did not run: `storectl preflight` checks the store)"
        }
        // A stop at a safe point ends the batches without throwing (what was deleted is verified
        // first); deny rules are known once the batches ran.
        road.settle = { _, session in
            if let stopped = session.report.stopped { return Ending(.stopped, stop: stopped) }
            // Rows a deny rule keeps are the model's answer, listed in the report; they fail the
            // run only where the rule says `on_deny = "fail"`.
            let failing = session.report.rules.filter { $0.onDeny == .fail && $0.denied > 0 }
            let denied = failing.reduce(0) { $0 + $1.denied }
            return denied > 0 ? Ending(.refused, error: StoreOpsError(.checksFailed, "deny rules kept \(denied) rows (rule \(failing.map(\.name).joined(separator: ", ")): on_deny = \"fail\")")) : nil
        }
        let walked = pipeline.walk(road)
        var report = session.report
        report.snapshot = walked.snapshot.flatMap { $0.isEmpty ? nil : $0 }
        report.stages = walked.stages
        report.ending = walked.ending
        if [.failed, .skipped].contains(walked.ending.outcome), walked.value == nil, walked.snapshot == nil,
                  report.rules.allSatisfy({ $0.batches == 0 }) {
            // Nothing happened (the lock was held, the plan cannot run against the store): thrown, like bad input.
            throw walked.ending.thrown ?? StoreOpsError(.failure, "purge failed")
        }
        return report
    }

    /// One purge run's connection, plan and report.
    final class Session {
        let policy: Policy
        let store: StoreFile
        let options: Options
        let killSwitch: KillSwitch
        var report: Report
        var queue: DatabaseQueue?
        var targets: [PurgeTarget] = []
        /// Rows deleted by this run, by table: what the check after the purge looks for references to.
        var deletedIDs: [String: [Int64]] = [:]

        init(policy: Policy, store: StoreFile, options: Options, killSwitch: KillSwitch) {
            self.policy = policy
            self.store = store
            self.options = options
            self.killSwitch = killSwitch
            report = Report(policy: policy.file, store: store.path, dryRun: options.dryRun)
        }

        /// The plan and every circuit breaker, before anything is deleted (or snapshotted).
        func plan() throws {
            let queue = try StoreConnection.open(store.path, access: options.dryRun ? .readOnly : .readWrite,
                                                 busyTimeout: policy.store.busyTimeout.seconds, label: "storectl.purge")
            self.queue = queue
            targets = try queue.inDatabase { db -> [PurgeTarget] in
                try configure(db)
                switch try PurgePlanner.resolve(policy, db: db, now: options.now) {
                case .success(let targets): return targets
                case .failure(let problems): throw problems.storeOpsError
                }
            }
            for target in targets {
                let (candidates, total): (Int, Int)
                do { (candidates, total) = try queue.inDatabase { try target.counts($0) } } catch {
                    throw StoreOpsError.sqlite(error, doing: "counting the rows of rule \(target.rule.name) in \(target.table)")
                }
                report.rules.append(RuleReport(name: target.rule.name, target: target.rule.target.description, table: target.table,
                                               cutoff: target.cutoff, candidates: candidates, total: total, onDeny: target.rule.onDeny, notes: target.notes))
                if let tripped = CircuitBreaker.trips(rule: target.rule, candidates: candidates, total: total) { report.tripped.append(tripped) }
            }
            guard report.tripped.isEmpty else {
                throw Pipeline.Refusal(error: StoreOpsError(.checksFailed, "the circuit breaker refused the purge: \(report.tripped.joined(separator: "; "))"))
            }
        }

        func configure(_ db: Database) throws {
            // Batches revisit the same index pages: a 32 MiB page cache instead of SQLite's 2 MiB.
            try db.execute(sql: "PRAGMA cache_size = -32768")
            guard !options.dryRun else { return }
            try db.execute(sql: "PRAGMA foreign_keys = ON")   // honour declared ON DELETE actions
            // "WAL mode is always consistent with synchronous=NORMAL" (https://sqlite.org/pragma.html#pragma_synchronous):
            // a batch committed just before a power cut may be lost, never half-applied, and the
            // next run purges it again. It saves an fsync per batch.
            if try String.fetchOne(db, sql: "PRAGMA journal_mode")?.lowercased() == "wal" {
                try db.execute(sql: "PRAGMA synchronous = NORMAL")
            }
        }

        /// The policy's snapshot, verified: if either fails, nothing is deleted.
        func snapshot(_ section: Policy.SnapshotSection, in pipeline: Pipeline) throws -> String {
            let created = try SnapshotCreate.inside(pipeline, tags: section.tags.isEmpty ? ["pre-purge"] : section.tags, level: section.level,
                                                    fromPoint: true, progress: { pipeline.step($0) })
            report.snapshotPoint = created.point
            report.snapshotBytes = created.record.snapshot?.archive?.bytes ?? created.addedBytes
            if created.point != nil, let store = pipeline.store {
                // No page of the store was read, so nothing checked it: quick_check, as the
                // snapshot's read would have, before anything is deleted.
                try Migrate.quickCheck(store, timeout: 30, refused: "nothing was deleted")
            }
            if let problem = try SnapshotVerify.justMade(created, in: try pipeline.repository) {
                throw StoreOpsError(.badData, "the pre-purge snapshot \(created.id) failed verification (\(problem)); nothing was deleted")
            }
            return created.id
        }

        func purgeAll(_ pipeline: Pipeline) throws {
            guard let queue else { throw StoreOpsError(.failure, "no plan") }
            for (index, target) in targets.enumerated() {
                try Purge.purge(target, into: &report.rules[index], queue: queue, options: options, pipeline: pipeline) { effects in
                    for (table, ids) in effects.deleted { self.deletedIDs[table, default: []] += ids }
                }
                if let stopped = report.rules[index].stopped, !stopped.isLimit {
                    report.stopped = stopped
                    break
                }
            }
            // A run that found nothing to delete leaves the store's files as they were (a
            // checkpoint writes the app's -wal into the database file: not this run's business).
            guard !options.dryRun, report.rules.contains(where: { $0.batches > 0 }) else { return }
            // Let the WAL shrink back without ever waiting on the app (PASSIVE never blocks).
            try queue.inDatabase { db in
                if try String.fetchOne(db, sql: "PRAGMA journal_mode")?.lowercased() == "wal" {
                    _ = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(PASSIVE)")
                    report.checkpointed = true
                }
            }
        }

        /// Tables the run wrote to: its rules' tables and every cascade, join and nullify target.
        var writtenTables: [String] {
            var tables = Set<String>()
            for rule in report.rules where rule.batches > 0 {
                tables.insert(rule.table)
                tables.formUnion(rule.cascaded.keys)
                tables.formUnion(rule.nullified.keys.map { String($0.prefix { $0 != "." }) })
                // What the store's triggers and declared actions wrote (virtual tables' shadow tables too).
                tables.formUnion(rule.triggered.keys)
            }
            for target in targets { tables.formUnion(target.writes.compactMap(\.table)) }
            return tables.sorted()
        }

        /// After the deletes: `quick_check` of every table written, and no reference left to a
        /// deleted row through a relationship whose delete rule (cascade, nullify) should have
        /// cleared it: an index lookup per relationship column, not a scan. A failure names the
        /// pre-purge snapshot to go back to.
        func verifyAfter() throws {
            guard let queue else { return }
            let hint = report.snapshot.map { "the store before this purge is snapshot \($0): storectl snapshot restore --in-place" }
                ?? "restore the store from a backup"
            // Two cores: the quick_checks on a second read-only connection, the reference lookups here.
            let (tables, path, checks) = (writtenTables, store.path, referenceChecks())
            let (checked, referenced) = try inParallel({ () throws -> [String] in
                let reader = try StoreConnection.open(path, access: .readOnly, label: "storectl.purge-check")
                defer { try? reader.close() }
                return try tables.map { table in
                    let messages = try reader.inDatabase { try String.fetchAll($0, sql: "PRAGMA quick_check(\(quoteIdentifier(table)))") }
                    guard messages == ["ok"] else {
                        throw StoreOpsError(.badData, "after the purge, quick_check of \(table): \(messages.prefix(3).joined(separator: "; "))", hint: hint)
                    }
                    return "quick_check(\(table)) ok"
                }
            }, { () throws -> [String] in
                try checks.map { (label, sql, ids) in
                    var left = 0
                    for start in stride(from: 0, to: ids.count, by: 10_000) {
                        let chunk = ids[start..<min(ids.count, start + 10_000)]
                        left += try queue.inDatabase { try Int.fetchOne($0, sql: sql, arguments: [BatchClosure.json(chunk)]) ?? 0 }
                    }
                    guard left == 0 else {
                        throw StoreOpsError(.badData, "after the purge, \(Format.plural(left, "row", "rows")) of \(label) still refer to deleted rows", hint: hint)
                    }
                    return "\(label): no reference to a deleted row"
                }
            })
            report.verified += checked + referenced
        }

        /// For every relationship column a cascade or nullify rule clears, the statement counting
        /// rows that still refer to rows this run deleted, and those rows' ids.
        func referenceChecks() -> [(label: String, sql: String, ids: [Int64])] {
            var checks: [String: (String, String, [Int64])] = [:]
            for target in targets {
                guard let graph = target.graph else { continue }
                for (ent, effects) in graph.effects {
                    guard let table = graph.entitiesOf.first(where: { $0.value.contains(ent) })?.key, let ids = deletedIDs[table], !ids.isEmpty else { continue }
                    for effect in effects where effect.action == .cascade || effect.action == .nullify {
                        guard case .referencedBy(let other, let columns, _, _) = effect.kind else { continue }
                        for column in columns {
                            let label = "\(other).\(column)"
                            checks[label] = (label, "SELECT count(*) FROM \(quoteIdentifier(other)) WHERE \(quoteIdentifier(column)) IN (SELECT value FROM json_each(?))", ids)
                        }
                    }
                }
            }
            return checks.keys.sorted().compactMap { checks[$0] }.map { (label: $0.0, sql: $0.1, ids: $0.2) }
        }
    }

    static func purge(_ target: PurgeTarget, into rule: inout RuleReport, queue: DatabaseQueue, options: Options,
                      pipeline: Pipeline, deleted: (BatchClosure.Effects) -> Void) throws {
        let started = Date()
        var cursor: Int64 = 0
        // The rows the store's triggers changed, across batches: a row each batch updates is one row.
        var triggered: [String: Set<Int64>] = [:]
        defer { rule.seconds = Date().timeIntervalSince(started) }
        // What each batch's check needs of the schema, once (a purge holds the store's job lock).
        let tables = options.dryRun ? nil : try queue.inDatabase { try BatchCheck.Tables.read($0) }

        while true {
            if let reason = pipeline.stopRequested ?? target.limitReached(deleted: rule.deleted, since: started) {
                rule.stopped = reason
                return
            }
            let size = min(target.rule.batchSize, target.rule.maxRows.map { $0 - rule.deleted } ?? Int.max)
            let (done, lockHeld) = try batch(target, size: size, cursor: &cursor, into: &rule, queue: queue, dryRun: options.dryRun,
                                             tables: tables, triggered: &triggered, deleted: deleted)
            pipeline.step(ProgressUpdate(phase: "purge \(target.rule.name)", done: UInt64(rule.deleted),
                                         total: UInt64(max(rule.candidates, rule.deleted)), unit: .rows, bytes: 0, startedAt: started))
            if done { return }
            // The app's writers poll for the lock (SQLite's busy handler sleeps 1, 2, 5, 10, 15, 20,
            // 25... ms between tries), so a purge that takes the lock again at once starves them: in
            // the benchmark, commits waited up to 2 s. After each batch storectl rests at least half as
            // long as it held the lock (and at least `pause`), so the lock is free a third of the time
            // or more and a waiting commit gets in within a few of its tries.
            // A dry run's scratch copy has no app to make room for.
            let rest = options.inScratchCopy ? 0 : options.dryRun ? target.rule.pause : max(target.rule.pause, lockHeld * Self.yieldFactor)
            // In slices: a long policy `pause` ends at a signal or an engaged kill switch, not after it.
            let until = Date().addingTimeInterval(rest)
            while until.timeIntervalSinceNow > 0, pipeline.stopRequested == nil {
                Waits.sleep(min(1, until.timeIntervalSinceNow))
            }
        }
    }

    /// One batch: candidates found outside the write lock, then re-checked, closed over the delete
    /// rules and deleted in one short transaction. Returns whether the rule is done, and how long
    /// the write lock was held.
    static func batch(_ target: PurgeTarget, size: Int, cursor: inout Int64, into rule: inout RuleReport, queue: DatabaseQueue,
                      dryRun: Bool, tables: BatchCheck.Tables?, triggered: inout [String: Set<Int64>],
                      deleted: (BatchClosure.Effects) -> Void) throws -> (done: Bool, lockHeld: TimeInterval) {
        var arguments: StatementArguments = [cursor]
        _ = arguments.append(contentsOf: target.condition.arguments)
        _ = arguments.append(contentsOf: [size])
        var lockHeld: TimeInterval = 0
        var last = cursor
        let done: Bool = try queue.inDatabase { db in
            do {
                // Candidates are found outside the write lock: the scan costs the app nothing.
                let ids = try Int64.fetchAll(db, sql: target.batchSelectSQL, arguments: arguments)
                guard let lastID = ids.last else { return true }
                last = lastID
                let locked = Date()
                try db.execute(sql: dryRun ? "BEGIN" : "BEGIN IMMEDIATE")
                // Under the lock, keep those that still match (the app may have changed them since).
                var recheck: StatementArguments = [BatchClosure.json(ids)]
                _ = recheck.append(contentsOf: target.condition.arguments)
                let confirmed = try Int64.fetchAll(db, sql: target.confirmSQL, arguments: recheck)
                let closure = try BatchClosure(roots: confirmed, table: target.table, graph: target.graph, rows: DatabaseRows(db: db))
                let check = try tables.map { try BatchCheck(db, plan: closure.planned(), tables: $0) }
                let effects = dryRun ? try closure.count(db: db) : try closure.apply(db: db)
                if let check {
                    let (problems, indirect) = check.verdict()
                    guard problems.isEmpty else {
                        try db.execute(sql: "ROLLBACK")
                        throw StoreOpsError(.checksFailed, "a batch of rule \(target.rule.name) changed what its plan does not name, and was rolled back "
                                            + "(the batches before it were committed and checked): " + problems.prefix(5).joined(separator: "; "),
                                            hint: "a trigger or a declared action the delete rules do not show? `storectl purge --dry-run` shows the plan")
                    }
                    rule.verifiedBatches += 1
                    for (table, rows) in indirect {
                        triggered[table, default: []].formUnion(rows)
                        rule.triggered[table] = triggered[table]?.count
                    }
                }
                try db.execute(sql: dryRun ? "ROLLBACK" : "COMMIT")
                if !dryRun { FaultInjection.reach("purge.batch-committed") }
                lockHeld = Date().timeIntervalSince(locked)
                rule.record(effects, denied: closure.denied, table: target.table)
                if !dryRun { deleted(effects) }
                return ids.count < size
            } catch {
                if db.isInsideTransaction { try? db.execute(sql: "ROLLBACK") }
                throw StoreOpsError.sqlite(error, doing: "purging \(target.table) (rule \(target.rule.name))", side: .output)
            }
        }
        cursor = last
        return (done, lockHeld)
    }
}

extension Purge.RuleReport {
    mutating func record(_ effects: BatchClosure.Effects, denied: [Int64: String], table: String) {
        batches += 1
        deleted += effects.roots
        joinRows += effects.joinRows
        for (name, count) in effects.cascaded { cascaded[name, default: 0] += count }
        for (column, count) in effects.nullified { nullified[column, default: 0] += count }
        self.denied += denied.count
        for (pk, reason) in denied.sorted(by: { $0.key < $1.key }) where deniedSamples.count < 10 {
            deniedSamples.append("\(table) row \(pk): \(reason)")
        }
    }
}
