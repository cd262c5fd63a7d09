import Foundation
import GRDB

/// `storectl policy check` and `storectl policy explain`.
public enum PolicyCheck {
    /// The outcome for one file.
    public struct FileResult: Sendable, Codable {
        public var file: String
        public var ok: Bool
        /// Every problem of the file (empty when ok).
        public var problems: [String]
        /// Whether table and column names were checked against the store (it was reachable).
        public var checkedAgainstStore: Bool
        public var rules: Int
        /// Whether the runs it describes could start now (the store, the repository and its
        /// password, the log and metrics folders); nil when only the file was checked.
        public var readiness: JobReadiness.Report?
    }

    /// Policy files under `paths` (files, or folders whose `*.toml` are taken), sorted.
    public static func files(_ paths: [String]) throws -> [String] {
        var result: [String] = []
        for path in paths {
            let absolute = FileSystem.absolute(path)
            switch FileSystem.kind(of: absolute) {
            case .file: result.append(absolute)
            case .directory:
                let names = try FileManager.default.contentsOfDirectory(atPath: absolute).filter { $0.hasSuffix(".toml") }.sorted()
                result += names.map { (absolute as NSString).appendingPathComponent($0) }
            default:
                throw StoreOpsError(.noInput, "\(absolute): no such policy file or folder")
            }
        }
        return result
    }

    /// Validates one file, and its names against its store when the store can be opened.
    /// Bad data (65) when a file has problems.
    public static func ending(of results: [FileResult]) -> Ending {
        if let bad = results.first(where: { !$0.ok }) {
            return Ending(.failed, error: StoreOpsError(.badData, "\(bad.file): \(Format.plural(bad.problems.count, "problem", "problems"))"))
        }
        return JobReadiness.ending(of: results.compactMap(\.readiness))
    }

    /// Validates one file, then (`readiness`) whether its runs could start now: the jobs its
    /// `[schedule]` names as cron or systemd would run them, else its purge as a person would.
    public static func check(_ file: String, readiness: Bool, password: PasswordSource? = nil) throws -> FileResult {
        var result = try check(file)
        guard readiness, result.ok else { return result }
        let policy = try Policy.load(file)
        let scheduled = JobReadiness.scheduledJobs(policy)
        if !scheduled.isEmpty {
            result.readiness = JobReadiness.check(policy, jobs: scheduled, context: .scheduled(.cron))
        } else {
            let jobs: [ScheduledJob] = policy.rules.isEmpty ? (policy.snapshot == nil ? [] : [.snapshot]) : [.purge]
            result.readiness = JobReadiness.check(policy, jobs: jobs, context: .manual(password))
        }
        return result
    }

    public static func check(_ file: String) throws -> FileResult {
        let policy: Policy
        do { policy = try Policy.load(file) } catch let error as StoreOpsError where error.status == .badData {
            return FileResult(file: file, ok: false, problems: error.message.split(separator: "\n").dropFirst().map {
                $0.trimmingCharacters(in: .whitespaces) }, checkedAgainstStore: false, rules: 0)
        }
        let store: StoreFile
        do { store = try StoreFile(existing: policy.store.path) } catch let error as StoreOpsError where error.status == .badData {
            // There, and not a SQLite database (a text file, a truncated copy): said, not "not
            // reachable" with the names unchecked and exit 0.
            return FileResult(file: policy.file, ok: false, problems: ["\(policy.file): [store] path: \(error.message)"], checkedAgainstStore: false,
                              rules: policy.rules.count)
        } catch {
            return FileResult(file: policy.file, ok: true, problems: [], checkedAgainstStore: false, rules: policy.rules.count)
        }
        let queue = try StoreConnection.open(store.path, access: .readOnly, label: "storectl.policy")
        defer { try? queue.close() }
        return try queue.inDatabase { db in
            switch try PurgePlanner.resolve(policy, db: db) {
            case .success:
                return FileResult(file: policy.file, ok: true, problems: [], checkedAgainstStore: true, rules: policy.rules.count)
            case .failure(let problems):
                return FileResult(file: policy.file, ok: false, problems: problems.problems.map { "\(policy.file):\($0)" },
                                  checkedAgainstStore: true, rules: policy.rules.count)
            }
        }
    }

    /// What `policy explain` shows for a rule.
    public struct Explanation: Sendable, Codable {
        public var name: String
        public var target: String
        public var table: String
        /// The statement each batch selects with, and the value bound for the cutoff.
        public var sql: String
        public var cutoffValue: String?
        public var cutoffUTC: String?
        public var cutoffLocal: String?
        public var candidates: Int
        public var total: Int
        /// Rows deleted with them through cascades, and references nullified, as the dry run counts them.
        public var cascaded: [String: Int]
        public var nullified: [String: Int]
        public var joinRows: Int
        public var denied: Int
        public var relationships: [String]
        public var notes: [String]
    }

    /// Explains each rule of a policy against its store (read-only).
    /// What each rule's circuit breaker would say of the store now (nil where it would not trip):
    /// counts only, on a read-only connection (`explain` runs a whole dry run).
    static func breakerTrips(_ policy: Policy, now: Date = Date()) throws -> [String] {
        let store = try StoreFile(existing: policy.store.path)
        let queue = try StoreConnection.open(store.path, access: .readOnly, busyTimeout: policy.store.busyTimeout.seconds, label: "storectl.breaker-check")
        defer { try? queue.close() }
        return try queue.inDatabase { db in
            guard case .success(let targets) = try PurgePlanner.resolve(policy, db: db, now: now) else { return [] }
            return try targets.compactMap { target in
                let counts = try target.counts(db)
                return CircuitBreaker.trips(rule: target.rule, candidates: counts.candidates, total: counts.total)
            }
        }
    }

    public static func explain(_ file: String, now: Date = Date()) throws -> [Explanation] {
        let policy = try Policy.load(file)
        let store = try StoreFile(existing: policy.store.path)
        let queue = try StoreConnection.open(store.path, access: .readOnly, busyTimeout: policy.store.busyTimeout.seconds,
                                             label: "storectl.explain")
        defer { try? queue.close() }
        let targets = try queue.inDatabase { db -> [PurgeTarget] in
            switch try PurgePlanner.resolve(policy, db: db, now: now) {
            case .success(let targets): return targets
            case .failure(let problems): throw problems.storeOpsError
            }
        }
        var options = Purge.Options(policy: file, dryRun: true)
        options.now = now
        let dry = try Purge.run(options)
        return try queue.inDatabase { db in
            try targets.enumerated().map { index, target in
                let counts = try target.counts(db)
                let local = DateFormatter()
                local.dateFormat = "yyyy-MM-dd HH:mm:ss zzz"
                let report = dry.rules.indices.contains(index) ? dry.rules[index] : nil
                let roots = target.entityFilter.isEmpty ? (target.graph?.entitiesOf[target.table] ?? []) : target.entityFilter
                return Explanation(
                    name: target.rule.name, target: target.rule.target.description, table: target.table,
                    sql: target.batchSelectSQL, cutoffValue: target.cutoff.map { target.rule.timeFormat.value(of: $0) },
                    cutoffUTC: target.cutoff.map(Timestamp.iso), cutoffLocal: target.cutoff.map { local.string(from: $0) },
                    candidates: counts.candidates, total: counts.total, cascaded: report?.cascaded ?? [:],
                    nullified: report?.nullified ?? [:], joinRows: report?.joinRows ?? 0, denied: report?.denied ?? 0,
                    relationships: roots.flatMap { target.graph?.describe($0) ?? [] }.uniqued(), notes: target.notes)
            }
        }
    }
}

extension Array where Element: Hashable {
    func uniqued() -> [Element] {
        var seen = Set<Element>()
        return filter { seen.insert($0).inserted }
    }
}
