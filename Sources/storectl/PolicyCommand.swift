import ArgumentParser
import Foundation
import StoreOps

struct PolicyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "policy",
        abstract: "Check and explain retention policy files.",
        subcommands: [PolicyCheckCommand.self, PolicyExplainCommand.self])
}

struct PolicyCheckCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Validate policy files, and that the runs they describe could start now.",
        discussion: reflow("""
            Exits 65 at the first file with errors, listing every error of that file (file, line, key, what is expected).
            Then, for each file, everything its runs need, as they would run: the jobs [schedule] names as cron or
            systemd runs them (no terminal, no environment: the password must come from the policy), else its purge
            by hand. The store and its folder, the repository (reachable, initialised, opened with that password),
            [snapshot.retention] for maintain, the job log and metrics folders. Exits 2 listing every problem.
            --file-only checks the files alone (names against the store when it is reachable).
            """))

    @Argument(help: "Policy files, or folders of *.toml files.") var paths: [String]
    @Flag(help: "Check the files alone: syntax, keys, values, and names against the store when it is reachable.") var fileOnly = false
    @OptionGroup var password: PasswordOption
    @Flag(help: "Print the results as JSON.") var json = false

    func run() throws {
        var results: [PolicyCheck.FileResult] = []
        for file in try PolicyCheck.files(paths) {
            let result = try PolicyCheck.check(file, readiness: !fileOnly, password: password.override)
            results.append(result)
            if !result.ok { break }
        }
        if json {
            print(jsonReport(results))
        } else {
            for result in results {
                if result.ok {
                    let names = result.checkedAgainstStore ? "names checked against the store" : "store not reachable: names not checked"
                    if let readiness = result.readiness, !readiness.ok {
                        print("FAIL  \(result.file)  (\(result.rules) rule\(result.rules == 1 ? "" : "s"), \(names))")
                        print(ReadinessText.lines(readiness).joined(separator: "\n"))
                    } else {
                        let ready = result.readiness.map { r in
                            let what = r.jobs.map(\.rawValue) + (r.replicateChecked ? ["the replicate service"] : [])
                            return what.isEmpty ? "" : "; ready to run \(what.joined(separator: ", ")): \(r.ready.joined(separator: ", "))"
                        } ?? ""
                        print("ok    \(result.file)  (\(result.rules) rule\(result.rules == 1 ? "" : "s"), \(names)\(ready))")
                    }
                    for note in result.readiness?.notes ?? [] { print("  note: \(note)") }
                } else {
                    print("FAIL  \(result.file)")
                    for problem in result.problems { print("  \(problem)") }
                }
            }
        }
        try Finished.check(PolicyCheck.ending(of: results))
    }
}

struct PolicyExplainCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "explain",
        abstract: "For each rule: the SQL it runs, the cutoff (UTC and local), and what it would delete now.")

    @Argument(help: "The policy file.") var file: String
    @Flag(help: "Print the explanation as JSON.") var json = false

    func run() throws {
        let explanations = try PolicyCheck.explain(file)
        if json { print(jsonReport(explanations)); return }
        for rule in explanations {
            print("rule \(rule.name): \(rule.target) -> \(rule.table)")
            print("  each batch:  \(rule.sql)")
            if let utc = rule.cutoffUTC, let local = rule.cutoffLocal {
                print("  cutoff:      \(utc) (\(local)), bound as \(rule.cutoffValue ?? "")")
            }
            let fraction = rule.total > 0 ? " (\(Format.percent(Double(rule.candidates) / Double(rule.total))) of \(Format.count(rule.total)))" : ""
            print("  would delete \(Format.plural(rule.candidates, "row", "rows")) now\(fraction)")
            for (table, count) in rule.cascaded.sorted(by: { $0.key < $1.key }) { print("    + \(Format.plural(count, "\(table) row", "\(table) rows")) (cascade)") }
            if rule.joinRows > 0 { print("    + \(Format.plural(rule.joinRows, "join-table row", "join-table rows"))") }
            for (column, count) in rule.nullified.sorted(by: { $0.key < $1.key }) { print("    ~ \(Format.count(count)) \(column) references nullified") }
            if rule.denied > 0 { print("    ! \(Format.plural(rule.denied, "row", "rows")) kept by deny rules") }
            for relationship in rule.relationships { print("  follows      \(relationship)") }
            for note in rule.notes { print("  note:        \(note)") }
        }
    }
}

/// How `policy check` and `schedule …` print what a run would fail on.
enum ReadinessText {
    static func lines(_ report: JobReadiness.Report) -> [String] {
        var lines: [String] = []
        for problem in report.problems {
            lines.append("  \(problem.check.rightPadded(to: 12)) \(problem.message)")
            if let hint = problem.hint { lines.append("  \(String(repeating: " ", count: 12)) -> \(hint)") }
        }
        return lines
    }

    /// Checks the policies' scheduled jobs as cron or systemd will run them; prints every problem
    /// on stderr and throws 2 when there is one. `skip`: say so and go on.
    /// `replicateService`: for `schedule systemd`, which writes the `[replicate]` service's unit.
    static func requireReady(_ policies: [Policy], skip: Bool, replicateService: Bool = false, scheduler: Scheduler = .cron) throws {
        guard !skip else {
            FileHandle.standardError.write(Data("storectl: warning: --skip-checks: the jobs were not checked; `storectl policy check` says what a run needs\n".utf8))
            return
        }
        let reports = policies.map { JobReadiness.check($0, context: .scheduled(scheduler), replicateService: replicateService) }
        for report in reports {
            for note in report.notes { FileHandle.standardError.write(Data("storectl: note: \(report.policy): \(note)\n".utf8)) }
        }
        let failing = reports.filter { !$0.ok }
        guard !failing.isEmpty else { return }
        var text = ""
        for report in failing {
            text += "storectl: \(report.policy): \(report.failingText) would fail when run by cron or systemd:\n"
            text += lines(report).joined(separator: "\n") + "\n"
        }
        FileHandle.standardError.write(Data(text.utf8))
        try Finished.check(JobReadiness.ending(of: reports))
    }
}
