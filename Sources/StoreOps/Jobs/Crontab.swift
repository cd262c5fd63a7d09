import Foundation

/// The jobs scheduled by `[schedule]` in policy files, as crontab lines in a marked block that
/// `storectl schedule install` merges into a user's crontab (replacing only its own block).
public enum Crontab {
    public static let begin = "# BEGIN storectl (managed by `storectl schedule install`; edit the policy files, then install again)"
    public static let end = "# END storectl"

    /// One scheduled job of a policy.
    public struct Job: Sendable, Codable, Equatable {
        public var job: ScheduledJob
        public var policy: String
        public var store: String
        public var expression: String
        public var jitter: DurationText?
        public var log: String?

        public init(job: ScheduledJob, policy: String, store: String, expression: String, jitter: DurationText? = nil, log: String? = nil) {
            self.job = job
            self.policy = policy
            self.store = store
            self.expression = expression
            self.jitter = jitter
            self.log = log
        }
    }

    /// The scheduled jobs of `policies`, in order.
    public static func jobs(_ policies: [Policy]) -> [Job] {
        policies.flatMap { policy -> [Job] in
            guard let schedule = policy.schedule else { return [] }
            let pairs: [(ScheduledJob, String?)] = [(.snapshot, schedule.snapshot), (.purge, schedule.purge), (.maintain, schedule.maintain)]
            return pairs.compactMap { job, expression in
                expression.map { Job(job: job, policy: policy.file, store: policy.store.path, expression: $0,
                                     jitter: schedule.jitter, log: schedule.log) }
            }
        }
    }

    /// The block: markers, and per job a comment and the line.
    ///
    /// Paths are single-quoted for /bin/sh and `%` is escaped (cron turns a bare `%` into a
    /// newline). Output goes to `<log>.out` beside the JSON job log, which `storectl run` writes itself.
    public static func block(_ jobs: [Job], executable: String) -> [String] {
        var lines = [begin]
        for job in jobs {
            lines.append("# storectl \(job.job.rawValue): \(job.policy) (store \(job.store))")
            lines.append("\(job.expression) \(command(job, executable: executable))")
        }
        lines.append(end)
        return lines
    }

    /// What cron runs for `job` (its line after the expression).
    public static func command(_ job: Job, executable: String) -> String {
        var command = "\(quote(executable)) run \(job.job.rawValue) --policy \(quote(job.policy))"
        if let jitter = job.jitter { command += " --jitter \(jitter.text)" }
        if let log = job.log { command += " >> \(quote(log + ".out")) 2>&1" }
        return command
    }

    /// Whether `job` is in `existing` (a crontab's text) as `schedule install` writes it now:
    /// "installed", "differs" (a line of that policy and job, another one: installed by an
    /// older storectl or before the policy changed), or "not installed".
    public static func state(of job: Job, in existing: String, executable: String) -> String {
        let lines = existing.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let range = try? blockRange(lines) else { return "not installed" }
        let inner = Array(lines[range])
        if inner.contains("\(job.expression) \(command(job, executable: executable))") { return "installed" }
        let comment = "# storectl \(job.job.rawValue): \(job.policy) (store "
        return inner.contains { $0.hasPrefix(comment) } ? "differs" : "not installed"
    }

    static func quote(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: "'\\''").replacingOccurrences(of: "%", with: "\\%") + "'"
    }

    /// `existing` with its storectl block replaced by `block` (or the block appended), other lines kept.
    ///
    /// - Throws: exit 65 when the crontab has an unbalanced or doubled storectl block.
    public static func merge(_ existing: String, block: [String]) throws -> String {
        var lines = existing.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if lines.last == "" { lines.removeLast() }
        if let range = try blockRange(lines) {
            lines.replaceSubrange(range, with: block)
        } else {
            lines += block
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// `existing` with `jobs` installed: its storectl block keeps the jobs of other policies
    /// installed before (one policy installed after another replaced the first's jobs, silently),
    /// and those of the policies `jobs` names are replaced. Returns the text and the policies
    /// whose jobs were kept.
    public static func install(_ jobs: [Job], into existing: String, executable: String) throws -> (text: String, kept: [String]) {
        let policies = Set(jobs.map(\.policy.exactKey))
        let (others, kept, _) = try installed(in: existing) { !policies.contains($0.exactKey) }
        let block = [begin] + others + Array(self.block(jobs, executable: executable).dropFirst().dropLast()) + [end]
        return (try merge(existing, block: block), kept)
    }

    /// `existing` without the jobs of `policies` (the whole block once none is left); the policies
    /// whose jobs were there.
    public static func uninstall(_ policies: [String], from existing: String) throws -> (text: String, removed: [String]) {
        let named = Set(policies.map(\.exactKey))
        let (others, _, removed) = try installed(in: existing) { !named.contains($0.exactKey) }
        guard !others.isEmpty else { return (try remove(existing), removed) }
        return (try merge(existing, block: [begin] + others + [end]), removed)
    }

    /// The block's job lines (each with its comment) of the policies `keep` accepts, those
    /// policies in order, and the others it names.
    static func installed(in existing: String, keep: (String) -> Bool) throws -> (lines: [String], policies: [String], others: [String]) {
        var lines = existing.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if lines.last == "" { lines.removeLast() }
        guard let range = try blockRange(lines) else { return ([], [], []) }
        let inner = Array(lines[range].dropFirst().dropLast())
        var kept: [String] = [], policies: [String] = [], others: [String] = []
        var i = 0
        while i < inner.count {
            guard let policy = policy(ofComment: inner[i]), i + 1 < inner.count else { i += 1; continue }
            if keep(policy) {
                kept += [inner[i], inner[i + 1]]
                if !policies.contains(policy) { policies.append(policy) }
            } else if !others.contains(policy) {
                others.append(policy)
            }
            i += 2
        }
        return (kept, policies, others)
    }

    /// The policies whose jobs `existing`'s storectl block holds, in order.
    public static func policies(in existing: String) throws -> [String] {
        try installed(in: existing) { _ in false }.others
    }

    /// The policy a job's comment names: `# storectl <job>: <policy> (store <store>)`.
    static func policy(ofComment line: String) -> String? {
        guard line.hasPrefix("# storectl "), let colon = line.range(of: ": "), let store = line.range(of: " (store ", options: .backwards),
              colon.upperBound <= store.lowerBound else { return nil }
        return String(line[colon.upperBound..<store.lowerBound])
    }

    /// `existing` without its storectl block.
    public static func remove(_ existing: String) throws -> String {
        var lines = existing.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if lines.last == "" { lines.removeLast() }
        if let range = try blockRange(lines) { lines.removeSubrange(range) }
        return lines.isEmpty ? "" : lines.joined(separator: "\n") + "\n"
    }

    static func blockRange(_ lines: [String]) throws -> ClosedRange<Int>? {
        let begins = lines.indices.filter { lines[$0].hasPrefix("# BEGIN storectl") }
        let ends = lines.indices.filter { lines[$0] == end }
        if begins.isEmpty, ends.isEmpty { return nil }
        guard begins.count == 1, ends.count == 1, begins[0] < ends[0] else {
            throw StoreOpsError(.badData, "the crontab's storectl block is damaged (\(begins.count) BEGIN, \(ends.count) END markers)",
                                hint: "fix it by hand with `crontab -e`, then install again")
        }
        return begins[0]...ends[0]
    }

    /// Reads a user's crontab (`crontab -l`); empty when the user has none.
    public static func read(user: String?) throws -> String {
        let result = try runCrontab(["-l"] + (user.map { ["-u", $0] } ?? []), input: nil)
        if result.status == 0 { return result.stdout }
        if result.stderr.contains("no crontab for") { return "" }
        throw StoreOpsError(.failure, "crontab -l failed: \(result.stderr.trimmingCharacters(in: .whitespacesAndNewlines))")
    }

    /// Replaces a user's crontab (`crontab -`).
    public static func write(_ text: String, user: String?) throws {
        let result = try runCrontab((user.map { ["-u", $0] } ?? []) + ["-"], input: text)
        guard result.status == 0 else {
            throw StoreOpsError(.failure, "crontab - failed: \(result.stderr.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
    }

    static func runCrontab(_ arguments: [String], input: String?) throws -> (status: Int32, stdout: String, stderr: String) {
        // STORECTL_CRONTAB: another crontab command (the README's examples run against a stand-in,
        // never the machine's real crontab).
        let override = ProcessInfo.processInfo.environment["STORECTL_CRONTAB"].flatMap { $0.isEmpty ? nil : FileSystem.absolute($0) }
        guard let crontab = (override.map { [$0] } ?? ["/usr/bin/crontab", "/bin/crontab"]).first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            if let override {
                throw StoreOpsError(.noInput, "STORECTL_CRONTAB names \(override), which is not an executable file", hint: "point it at a crontab command, or unset it to use the system's")
            }
            throw StoreOpsError(.noInput, "the crontab command is not installed", hint: "install cron (apt-get install cron), or use `storectl schedule systemd`")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: crontab)
        process.arguments = arguments
        let stdin = Pipe()
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        if let input {
            // A crontab that exits without reading (no permission to write the user's table) must
            // not kill storectl with SIGPIPE (141, no message): the write fails quietly (EPIPE),
            // and its exit status and words are what is reported.
            // Blocked in this thread only (a write's SIGPIPE goes to the thread that wrote), then
            // taken if it came: nothing else in the process sees the disposition change.
            var pipeOnly = sigset_t(), previous = sigset_t()
            sigemptyset(&pipeOnly)
            sigaddset(&pipeOnly, SIGPIPE)
            pthread_sigmask(SIG_BLOCK, &pipeOnly, &previous)
            defer {
                var pending = sigset_t()
                if sigpending(&pending) == 0, sigismember(&pending, SIGPIPE) == 1 {
                    var none = timespec()
                    _ = sigtimedwait(&pipeOnly, nil, &none)
                }
                pthread_sigmask(SIG_SETMASK, &previous, nil)
            }
            let fd = stdin.fileHandleForWriting.fileDescriptor
            var bytes = Array(input.utf8)[...]
            while !bytes.isEmpty {
                let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { break }
                bytes = bytes.dropFirst(n)
            }
        }
        try stdin.fileHandleForWriting.close()
        // Read both pipes before waiting, so a large crontab cannot fill a pipe and hang both sides.
        let out = stdout.fileHandleForReading.readDataToEndOfFile()
        let err = stderr.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
    }
}


/// Whether a cron daemon runs on this machine (a process named cron, crond, cronie, fcron,
/// anacron's companion aside): `schedule install` warns when none does.
public enum CronDaemon {
    static var names: Set<String> {
        // A test names daemons that are not running (STORECTL_TEST_CRON_DAEMONS=none).
        if let test = ProcessInfo.processInfo.environment["STORECTL_TEST_CRON_DAEMONS"] { return Set(test.split(separator: ",").map(String.init)) }
        return ["cron", "crond", "cronie", "fcron", "dcron"]
    }

    /// Whether to look: not with a stand-in crontab command (STORECTL_CRONTAB: the README's
    /// examples, a container), unless a test asks.
    public static var checked: Bool {
        let environment = ProcessInfo.processInfo.environment
        return environment["STORECTL_TEST_CRON_DAEMONS"] != nil || environment["STORECTL_CRONTAB"] == nil
    }

    public static var isRunning: Bool {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return true }
        // /proc mounted with hidepid: another user's processes (cron's, root's) are not listed,
        // so their absence says nothing. Said running (no warning) rather than warned falsely.
        if getuid() != 0, procHidesOtherUsers() { return true }
        for entry in entries where entry.allSatisfy(\.isNumber) {
            guard let comm = try? String(contentsOfFile: "/proc/\(entry)/comm", encoding: .utf8) else { continue }
            if names.contains(comm.trimmingCharacters(in: .whitespacesAndNewlines)) { return true }
        }
        return false
    }

    /// Whether /proc is mounted with `hidepid` (1, 2, `noaccess`, `invisible`: not `0`/`off`).
    public static func procHidesOtherUsers(mounts: String? = try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8)) -> Bool {
        for line in (mounts ?? "").split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard fields.count >= 4, fields[1] == "/proc", fields[2] == "proc" else { continue }
            for option in fields[3].split(separator: ",") where option.hasPrefix("hidepid=") {
                if !["hidepid=0", "hidepid=off"].contains(String(option)) { return true }
            }
        }
        return false
    }
}
