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
        abstract: "Validate policy files (and their names against the store when it is reachable).",
        discussion: "Exits 65 at the first file with errors, listing every error of that file (file, line, key, what is expected).")

    @Argument(help: "Policy files, or folders of *.toml files.") var paths: [String]
    @Flag(help: "Print the results as JSON.") var json = false

    func run() throws {
        var results: [PolicyCheck.FileResult] = []
        for file in try PolicyCheck.files(paths) {
            let result = try PolicyCheck.check(file)
            results.append(result)
            if !result.ok { break }
        }
        if json {
            print(jsonReport(results))
        } else {
            for result in results {
                if result.ok {
                    print("ok    \(result.file)  (\(result.rules) rule\(result.rules == 1 ? "" : "s"), "
                          + (result.checkedAgainstStore ? "names checked against the store)" : "store not reachable: names not checked)"))
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
