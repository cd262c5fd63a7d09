import ArgumentParser
import Foundation
import StoreOps

struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run a scheduled job (what cron and systemd call): snapshot, purge or maintain.",
        discussion: reflow("""
            maintain = snapshot, then prune this store's snapshots (this host, this path) by the policy's [snapshot.retention], then purge.
            Takes the store's job lock without waiting: if another job holds it, exits 75 at once
            ("skipped: another job holds the lock since ..., pid ..."). Quiet on success; one line on stderr on failure.
            Appends one JSON line per run to the policy's [schedule] log, and writes Prometheus metrics into its
            [schedule] metrics folder (node_exporter textfile collector).
            """))

    @Argument(help: "snapshot, purge or maintain.") var job: ScheduledJob
    @Option(help: "The policy file.") var policy: String
    @Option(parsing: .unconditional, help: "Wait a random time up to this before starting (e.g. 5m), to spread jobs out.") var jitter: String?
    @OptionGroup var password: PasswordOption
    @Flag(help: "Print the run's record as JSON on stdout (also on success).") var json = false

    func run() throws {
        var wait: TimeInterval = 0
        if let jitter {
            switch DurationText.parse(jitter, allowZero: true, maximum: DurationText.maximumJitter) {
            case .success(let value): wait = value.seconds
            case .failure(let error): throw ValidationError("--jitter: \(error)")
            }
        }
        var options = JobRun.Options(job: job, policy: policy, jitter: wait, password: password.override)
        // On a terminal, the wait is said (cron's runs stay quiet): up to the whole jitter of silence otherwise.
        if isatty(STDERR_FILENO) == 1 { options.announce = { FileHandle.standardError.write(Data("storectl: \($0)\n".utf8)) } }
        let record = JobRun.run(options)
        // The record (the job log's line), with the fields every command's --json has: `ok`, and on
        // a failure `status`, `message`, `hint` (a trial's script read `.ok` and found none).
        let failure = record.exitCode == 0 ? nil
            : StoreOpsError(status: ExitStatus(rawValue: record.exitCode), record.error ?? record.outcome, hint: record.hint)
        if json { print(jsonReport(record, failure: failure, pretty: false)) }
        if let failure {
            FileHandle.standardError.write(Data("storectl: \(job.rawValue) (\(record.store ?? policy)): \(failure.message)\n".utf8))
            if let hint = failure.hint { FileHandle.standardError.write(Data("  hint: \(hint)\n".utf8)) }
            throw Finished(status: ExitStatus(rawValue: record.exitCode))
        }
    }
}

extension ScheduledJob: ExpressibleByArgument {}
