import Foundation

/// Everything a run of a policy's jobs will need, checked before a job is installed (`schedule
/// install`, `crontab`, `systemd`) or by `policy check`: the store, its folder (the job lock file
/// lives there), the repository (reachable, initialised, opened with the password the run will
/// have), the retention rules `maintain` prunes by, and the job log and metrics folders. Each
/// problem is named with what to do, so a job never fails for the first time at 3 a.m.
public enum JobReadiness {
    /// One thing a run would fail on.
    public struct Problem: Sendable, Codable, Equatable {
        /// `store`, `store.folder`, `repository`, `password`, `retention`, `rules`, `log`, `metrics`.
        public var check: String
        public var message: String
        public var hint: String?
        /// The exit status the run would end with.
        public var status: Int32
        /// The jobs it would fail (nil: every job checked).
        public var jobs: [ScheduledJob]?

        public init(check: String, message: String, hint: String? = nil, status: ExitStatus, jobs: [ScheduledJob]? = nil) {
            self.check = check
            self.message = message
            self.hint = hint
            self.status = status.rawValue
            self.jobs = jobs
        }
    }

    /// Whose run is being prepared for: a scheduled one has no terminal and none of the operator's
    /// environment, so its password must come from the policy (or the command line a unit names).
    public enum Context: Sendable {
        /// Run by this scheduler (its PATH differs: cron's is /usr/bin:/bin, systemd's has /usr/local).
        case scheduled(Scheduler)
        /// A run by hand: this password source (`--password-file`), else the policy's, else the
        /// environment's, else a prompt.
        case manual(PasswordSource?)
    }

    public struct Report: Sendable, Codable {
        public var policy: String
        public var jobs: [ScheduledJob]
        /// What was checked and found ready, for the summary line.
        public var ready: [String] = []
        public var problems: [Problem] = []
        /// What would not fail a run but changes what it does now: a purge's kill switch engaged
        /// (the run stops before its first batch), another job holding the store's lock.
        public var notes: [String] = []
        public var ok: Bool { problems.isEmpty }
        /// The jobs that would fail, in the order checked.
        public var failingJobs: [ScheduledJob] {
            jobs.filter { job in problems.contains { $0.jobs?.contains(job) ?? true } }
        }
        /// The policy has `[replicate]` and its service would fail (a problem of its own, or of
        /// the store or repository every run shares).
        public var failsReplicate: Bool {
            // Its own problems (`jobs` empty), and the store's or repository's every run shares
            // (`jobs` nil); not the job log's or metrics', nor a password a check by hand was given.
            replicateChecked && problems.contains { $0.jobs?.isEmpty ?? ["store", "store.folder", "repository", "password", "s3"].contains($0.check) }
        }
        public var replicateChecked = false
        /// What would fail, for a heading: the jobs, and the replicate service.
        public var failingText: String {
            (failingJobs.map(\.rawValue) + (failsReplicate ? ["the replicate service"] : [])).joined(separator: ", ")
        }
    }

    /// The password a run of `policy` in `context` reads.
    public static func password(for policy: Policy, context: Context) -> PasswordSource {
        switch context {
        case .manual(let override):
            return override ?? policy.snapshot?.password ?? .resolve(file: nil)
        case .scheduled:
            return policy.snapshot?.passwordSource ?? .unavailable(
                "\(policy.file) names no password_file or password_command under [snapshot], and a scheduled run has no terminal "
                + "and none of this shell's environment (STORECTL_PASSWORD_FILE) to find one")
        }
    }

    /// Whether each job of `jobs` could run now. `jobs` empty: the jobs the policy schedules.
    /// `replicateService`: also the `[replicate]` service (systemd's; cron never runs it).
    public static func check(_ policy: Policy, jobs requested: [ScheduledJob] = [], context: Context, replicateService: Bool = true) -> Report {
        let jobs = requested.isEmpty ? scheduledJobs(policy) : requested
        var report = Report(policy: policy.file, jobs: jobs)
        func problem(_ check: String, _ message: String, hint: String? = nil, _ status: ExitStatus, jobs: [ScheduledJob]? = nil) {
            report.problems.append(Problem(check: check, message: message, hint: hint, status: status, jobs: jobs))
        }

        // What a scheduler runs, and any policy whose password_command this check would run (the
        // check opens the repository with it: a review's untrusted script ran as root, "ready").
        // A policy for purges by hand without a command is the person's own business.
        let scheduler: Scheduler = { if case .scheduled(let by) = context { return by }; return .cron }()
        let commandPath = PasswordSource.environment(of: policy.replicate != nil && replicateService && !isScheduled(context) ? .systemd : scheduler)["PATH"]
        var hasCommand = false
        if case .command? = policy.snapshot?.passwordSource { hasCommand = true }
        if isScheduled(context) || (policy.replicate != nil && replicateService) || hasCommand,
           let why = PolicyTrust.problem(policy.file) ?? PolicyTrust.commandProblem(policy, path: commandPath) {
            problem("policy", "\(why): a job runs what it names (its password_command) as \(UserName.current)",
                    hint: "`chown \(UserName.current) FILE; chmod go-w FILE` (and the folders above it), as cron asks of /etc/cron.d; a password_command of plain words, the rest in a script", .badData)
            // Nothing more that would run its command (opening the repository does).
            checkStore(policy, jobs: jobs, into: &report)
            return report
        }
        checkStore(policy, jobs: jobs, into: &report)
        if isScheduled(context), let log = policy.schedule?.log {
            for path in [log, log + ".out"] {
                if let why = PolicyTrust.logFileProblem(path) {
                    problem("log", "\(why): the job would refuse to append to it", hint: "remove it (the job makes a plain file there), or point `log` elsewhere", .cannotCreate)
                }
            }
        }
        if let note = PolicyTrust.passwordFileNote(policy) { report.notes.append(note) }
        // An engaged kill switch is an incident in progress, not a problem to refuse installing
        // over; but "ready" alone hid that the purge would stop before its first batch (a trial).
        if jobs.contains(where: { $0 == .purge || $0 == .maintain }), !policy.rules.isEmpty,
           report.problems.allSatisfy({ $0.check != "store" }), let store = try? StoreFile(existing: policy.store.path) {
            report.notes += Purge.wouldStop(store, killSwitch: nil, before: "its first purge batch")
            // A breaker that would trip now is data, not setup: a note, not a refusal (it said ready).
            for trip in (try? PolicyCheck.breakerTrips(policy)) ?? [] {
                report.notes.append("the circuit breaker would refuse the purge if it ran now: \(trip) (`storectl policy explain \(policy.file)` lists what each rule would delete)")
            }
        }

        // The purge rules' names against the store, as `policy check` resolves them: an entity or
        // column the store lacks failed purge and maintain at their first run (installed with 0).
        let purging = jobs.filter { $0 == .purge || $0 == .maintain }
        if !purging.isEmpty, !policy.rules.isEmpty, !report.problems.contains(where: { $0.check == "store" }) {
            do {
                let names = try PolicyCheck.check(policy.file)
                for line in names.problems {
                    problem("rules", line, hint: "`storectl policy check \(policy.file)` says the same; fix the policy", .badData, jobs: purging)
                }
            } catch let error as StoreOpsError {
                problem("rules", "the rules' names could not be checked against \(policy.store.path): \(error.message)", hint: error.hint, error.status, jobs: purging)
            } catch {
                problem("rules", "the rules' names could not be checked against \(policy.store.path): \(error)", .failure, jobs: purging)
            }
        }

        // Purge rules: purge purges (maintain's purge step is skipped without them).
        if jobs.contains(.purge), policy.rules.isEmpty {
            problem("rules", "\(policy.file) has no [[purge]] rules, and purge purges",
                    hint: "add a [[purge]] table, or schedule snapshot and maintain instead", .badData, jobs: [.purge])
        }

        // The repository, when a job opens it.
        let opensRepository = jobs.contains(.snapshot) || jobs.contains(.maintain)
            || (jobs.contains(.purge) && policy.snapshot?.beforePurge == true)
        if opensRepository {
            let opening = jobs.filter { $0 != .purge || policy.snapshot?.beforePurge == true }
            if let section = policy.snapshot {
                let before = report.problems.count
                repository(section, policy: policy, context: context, into: &report)
                for index in before..<report.problems.count { report.problems[index].jobs = opening }
                if jobs.contains(.maintain), section.retention == nil {
                    problem("retention", "\(policy.file) has no [snapshot.retention]: maintain prunes the repository by it",
                            hint: "add [snapshot.retention] (keep_last, keep_daily, ...), or schedule snapshot instead", .badData, jobs: [.maintain])
                }
            } else {
                problem("repository", "\(policy.file) has no [snapshot] section naming the repository, and "
                        + jobs.filter { $0 != .purge }.map(\.rawValue).joined(separator: " and ") + " snapshots",
                        hint: "add [snapshot] repository = \"...\"", .badData, jobs: jobs.filter { $0 != .purge })
            }
        }

        // The [replicate] service, as systemd will start it.
        if policy.replicate != nil, replicateService {
            report.replicateChecked = true
            checkReplicate(policy, repositoryChecked: opensRepository && isScheduled(context), into: &report)
        }

        // An expression no date matches (`0 0 31 2 *`): installed, it never ran, and said nothing.
        if let schedule = policy.schedule {
            for (job, text) in [(ScheduledJob.snapshot, schedule.snapshot), (.purge, schedule.purge), (.maintain, schedule.maintain)] {
                guard jobs.contains(job), let text, let expression = try? CronExpression(text),
                      expression.nextRuns(after: Date(), count: 1).isEmpty else { continue }
                problem("schedule", "[schedule] \(job.rawValue) = \"\(text)\" never runs: no date matches it",
                        hint: "check the day and month fields (`storectl schedule show --policy \(policy.file)` lists the next runs)", .usage, jobs: [job])
            }
        }

        // Where the run reports: its log (and cron's .out beside it) and its metrics.
        if let schedule = policy.schedule {
            if let log = schedule.log {
                if isScheduled(context), PolicyTrust.logFileProblem(log) != nil {
                    // Said above, with what to do (an operator's trial: said twice, the second
                    // time "create the folder", for a log path that was a folder).
                } else if let why = unwritable(file: log) {
                    let hint = switch FileSystem.kind(of: log) {
                    case .missing: "create the folder, or let the job's user write in it"
                    case .file: "let the job's user write it (`chown`), or remove it (the job makes a new one)"
                    default: "point `log` at a file (the job makes it)"
                    }
                    problem("log", "the job log \(log) \(why)", hint: "\(hint); or change [schedule] log in \(policy.file)", .cannotCreate)
                } else {
                    report.ready.append("log")
                }
            }
            if let metrics = schedule.metrics {
                if let why = unwritable(folder: metrics) { problem("metrics", "the metrics folder \(metrics) \(why)", hint: "create it (node_exporter's textfile collector reads it), or fix [schedule] metrics in \(policy.file)", .cannotCreate) } else { report.ready.append("metrics") }
            }
        }
        // The jobs and the service check the repository each (with their passwords): said once.
        report.ready = report.ready.reduce(into: []) { if !$0.contains($1) { $0.append($1) } }
        return report
    }

    /// The store, and its folder: every job takes the job lock, a file beside the store.
    private static func checkStore(_ policy: Policy, jobs: [ScheduledJob], into report: inout Report) {
        func problem(_ check: String, _ message: String, hint: String? = nil, _ status: ExitStatus) {
            report.problems.append(Problem(check: check, message: message, hint: hint, status: status))
        }
        let store = policy.store.path
        switch FileSystem.kind(of: store) {
        case .missing:
            problem("store", "the store \(store) does not exist", hint: "check [store] path in \(policy.file)", .noInput)
        case .file:
            let writes = jobs.contains(.purge) || jobs.contains(.maintain)
            var notDatabase: StoreOpsError?
            if access(store, R_OK) == 0 {
                do { _ = try StoreFile(existing: store) } catch { notDatabase = error as? StoreOpsError }
            }
            if let notDatabase {
                // A text file, a truncated copy: every job fails on it (65).
                problem("store", notDatabase.message, hint: notDatabase.hint ?? "check [store] path in \(policy.file)", .badData)
            } else if access(store, R_OK | (writes ? W_OK : 0)) != 0 {
                problem("store", "the store \(store) cannot be \(writes ? "read and written" : "read") by this user (\(UserName.current))",
                        hint: "run the job as the store's owner", .cannotCreate)
            } else {
                report.ready.append("store")
            }
        default:
            problem("store", "\(store) is not a file", hint: "check [store] path in \(policy.file)", .badData)
        }
        let folder = FileSystem.parent(of: store)
        if FileSystem.kind(of: folder) == .directory {
            if access(folder, W_OK | X_OK) != 0 {
                problem("store.folder", "the store's folder \(folder) is not writable by \(UserName.current): the job lock file "
                        + "\(FileSystem.name(of: store)).storectl-lock cannot be made there", hint: "run the job as the store's owner", .cannotCreate)
            }
        }
        // A lock file this user cannot open (one a root run of an older storectl left, mode 0600)
        // failed every job of the store's owner (73) while the check said ready (a trial).
        let lock = store + ".storectl-lock"
        if FileSystem.kind(of: lock) == .file, access(lock, R_OK | W_OK) != 0 {
            var info = stat()
            let owner = stat(lock, &info) == 0 ? UserName.name(of: info.st_uid) : "another user"
            problem("store.lock", "the job lock file \(lock) is owned by \(owner) and \(UserName.current) cannot open it",
                    hint: "give it to the store's owner (`chown --reference=\(store) \(lock)`), or remove it while no job runs", .cannotCreate)
        }
    }

    static func isScheduled(_ context: Context) -> Bool {
        if case .scheduled = context { return true }
        return false
    }

    /// The `[replicate]` service as systemd runs it (no terminal, none of this shell's variables):
    /// the repository opened with the policy's own password, the store in WAL mode (replicate
    /// follows its -wal), the status file and metrics folder it writes. Its problems have `jobs`
    /// empty: they fail the service, not a scheduled job (`failsReplicate`).
    private static func checkReplicate(_ policy: Policy, repositoryChecked: Bool, into report: inout Report) {
        let before = report.problems.count
        func problem(_ message: String, hint: String? = nil, _ status: ExitStatus) {
            report.problems.append(Problem(check: "replicate", message: message, hint: hint, status: status, jobs: []))
        }
        guard let section = policy.snapshot else {
            problem("\(policy.file) has [replicate] but no [snapshot] section naming the repository it follows the store into",
                    hint: "add [snapshot] repository = \"…\" and password_file", .usage)
            return
        }
        var shared = false
        if !repositoryChecked {
            // (Checked for the jobs already when they run as scheduled; a check by hand had a
            // person's password, which systemd will not have.)
            // The service is systemd's (cron never runs it).
            repository(section, policy: policy, context: .scheduled(.systemd), into: &report)
            for index in (before..<report.problems.count).reversed() {
                let found = report.problems[index]
                if let earlier = report.problems[..<before].firstIndex(where: { $0.check == found.check && $0.message == found.message }) {
                    // The jobs' problem already: it fails the service too (said once).
                    report.problems[earlier].jobs = nil
                    report.problems.remove(at: index)
                    shared = true
                } else {
                    report.problems[index].jobs = []
                }
            }
        }
        let store = policy.store.path
        if FileSystem.kind(of: store) == .file, let header = try? FileProbe.shared.header(of: store), !StoreFile.isWALHeader(header) {
            problem("the store \(store) is not in WAL mode: replicate follows a store's -wal, and the service would exit 65 at every start",
                    hint: "switch it with `PRAGMA journal_mode=WAL` (the app's next open keeps it), or remove [replicate] and schedule snapshots", .badData)
        }
        do {
            try Replicate.checkOutputs(try Replicate.Options.from(loaded: [policy]))
        } catch let error as StoreOpsError {
            problem(error.message, hint: error.hint, error.status)
        } catch {
            problem("\(error)", .failure)
        }
        if report.problems.count == before, !shared { report.ready.append("replicate") }
    }

    /// The S3 settings read from the environment: a scheduled run starts without them.
    static let schedulerLosesVariables: Set<String> = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3",
                                                       "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_CA_BUNDLE"]

    /// The jobs `[schedule]` names.
    public static func scheduledJobs(_ policy: Policy) -> [ScheduledJob] {
        guard let schedule = policy.schedule else { return [] }
        return ScheduledJob.allCases.filter {
            switch $0 {
            case .snapshot: return schedule.snapshot != nil
            case .purge: return schedule.purge != nil
            case .maintain: return schedule.maintain != nil
            }
        }
    }

    static func repository(_ section: Policy.SnapshotSection, policy: Policy, context: Context, into report: inout Report) {
        let source = password(for: policy, context: context)
        do {
            // A password command runs as cron would run it (none of this shell's PATH or variables).
            let opened = try {
                guard case .scheduled(let scheduler) = context, case .command = source else { return try PagedRepository.open(at: section.repository, password: source, missing: .initHint) }
                return try PasswordSource.asScheduled(by: scheduler) { try PagedRepository.open(at: section.repository, password: source, missing: .initHint) }
            }()
            if let local = opened.backend as? LocalBackend, let why = unwritable(repository: local.root) {
                // Opened (read) by this user, but a job writes: a folder made by another user (a
                // repository initialised as root, a job as the app's user) failed the first run (73).
                report.problems.append(Problem(check: "repository", message: "\(section.repository): \(why); a job writes there",
                                               hint: "run the job as the repository's owner, or give the folder to the user it runs as (chown -R)", status: .cannotCreate))
                return
            }
            report.ready.append(opened.config.isEncrypted ? "repository (password ok)" : "repository")
            if case .scheduled = context, S3Backend.isS3(section.repository) {
                // The bucket answered with this shell's settings; cron and systemd will not have them.
                let exported = S3Settings.environment.filter { !$0.value.isEmpty && schedulerLosesVariables.contains($0.key) }.keys.sorted()
                if !exported.isEmpty {
                    report.problems.append(Problem(
                        check: "s3", message: "\(section.repository) was reached with \(exported.joined(separator: ", ")) from this shell's environment, "
                            + "which a scheduled run does not have",
                        hint: "put the credentials and the endpoint in ~/.aws/credentials and ~/.aws/config of the user the job runs as "
                            + "(a profile's `s3 =` endpoint_url), then check again", status: .wrongPassword))
                }
            }
        } catch let error as StoreOpsError where error.message.hasPrefix("no S3 credentials") {
            // The bucket's credentials, not the repository's password; a scheduled run has only
            // what ~/.aws holds for its user, never this shell's variables.
            var hint = error.hint
            if case .scheduled = context {
                hint = "put them in ~/.aws/credentials of the user the job runs as (its [default] profile): a scheduled run has none of this shell's AWS_* variables"
            }
            report.problems.append(Problem(check: "s3", message: error.message, hint: hint, status: error.status))
        } catch let error as StoreOpsError {
            // 64 (no password to be had), 66 (a password file missing) and 77 (wrong) are the password's problems.
            // A password command that fails (exits non-zero, cannot be run, hangs) is the password's too.
            let isPassword = error.status == .wrongPassword || error.status == .usage
                || (error.status == .noInput && error.message.hasPrefix("the password file"))
                || error.message.contains("password_command") || error.message.contains("password command")
                || error.message.contains("STORECTL_PASSWORD_COMMAND")
            report.problems.append(Problem(check: isPassword ? "password" : "repository", message: error.message,
                                           hint: error.hint, status: error.status))
        } catch {
            report.problems.append(Problem(check: "repository", message: "\(section.repository): \(error)", status: .failure))
        }
    }

    /// Why a file cannot be appended to (its folder missing or read-only, or the file itself), or nil.
    static func unwritable(file: String) -> String? {
        switch FileSystem.kind(of: file) {
        case .file: return access(file, W_OK) == 0 ? nil : errno == EROFS ? "is on a read-only file system" : "is not writable by \(UserName.current)"
        case .missing: return unwritable(folder: FileSystem.parent(of: file)).map { "cannot be created: its folder \(FileSystem.parent(of: file)) \($0)" }
        default: return "is not a file"
        }
    }

    /// The first folder of a local repository this user cannot write in (a job makes files in
    /// each: packs in `data/…`, indexes, records, locks, points), or nil.
    static func unwritable(repository root: String) -> String? {
        var folders = [root] + ["data", "index", "snapshots", "locks", "points", "verified"].map { (root as NSString).appendingPathComponent($0) }
        let data = (root as NSString).appendingPathComponent("data")
        folders += ((try? FileManager.default.contentsOfDirectory(atPath: data)) ?? []).sorted().map { (data as NSString).appendingPathComponent($0) }
        for folder in folders where FileSystem.kind(of: folder) == .directory && access(folder, W_OK | X_OK) != 0 {
            return "the folder \(folder) is not writable by \(UserName.current)"
        }
        return nil
    }

    static func unwritable(folder: String) -> String? {
        switch FileSystem.kind(of: folder) {
        case .directory: return access(folder, W_OK | X_OK) == 0 ? nil : errno == EROFS ? "is on a read-only file system" : "is not writable by \(UserName.current)"
        case .missing: return "does not exist"
        default: return "is not a folder"
        }
    }

    /// The problems as a status: 0 when ready, else 2 (checks found problems), as preflight.
    public static func ending(of reports: [Report]) -> Ending {
        let problems = reports.flatMap(\.problems)
        guard !problems.isEmpty else { return .ok }
        return Ending(.refused, error: StoreOpsError(.checksFailed, "\(Format.plural(problems.count, "problem", "problems")) a run would fail on",
                                                     hint: "fix them and check again"))
    }
}
