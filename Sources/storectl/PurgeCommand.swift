import ArgumentParser
import Foundation
import StoreOps

struct PurgeCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "purge",
        abstract: "Delete expired soft-deleted rows as a policy says, in small batches that never stall the app.",
        discussion: reflow("""
            Takes the store's job lock (exit 75 if held). Optionally snapshots first (the purge does not start if that
            fails). Each batch is its own short BEGIN IMMEDIATE transaction; between batches the kill switch
            (`storectl killswitch engage STORE`, or --kill-switch FILE), SIGTERM and the row and time limits are checked.
            Core Data delete rules (cascade, nullify, deny) are honoured from the model cache.
            Exit 0 done, 2 a circuit breaker or a deny rule stopped rows, 1 stopped by the kill switch.
            """))

    @Option(help: "The policy file.") var policy: String
    @Flag(help: "Say what the purge would do (every rule, cascades included), by running it on a scratch copy in TMPDIR; change nothing.") var dryRun = false
    @Option(help: "A kill-switch file: when it exists the purge stops after the current batch.") var killSwitch: String?
    @OptionGroup var password: PasswordOption
    @Flag(help: "Print the report as JSON.") var json = false

    func run() throws {
        let progress = TerminalProgress.handler("purge", quiet: json)
        var options = Purge.Options(policy: policy, dryRun: dryRun, killSwitch: killSwitch)
        options.password = password.override
        let report = try Purge.run(options, progress: progress?.1)
        progress?.0.finish()
        print(json ? jsonReport(report) : Self.render(report))
        // On stderr also with --json (the report is on stdout): a failure always says so.
        if report.ending.outcome == .stopped, let reason = report.ending.stop {
            // Stopped before a batch ran (a kill switch already thrown) changed nothing: said so, not "finished batches are committed".
            let batches = report.rules.reduce(0) { $0 + $1.batches }
            let done = batches == 0 ? "no batch ran: nothing was changed" : "the \(Format.plural(batches, "finished batch is", "finished batches are")) committed, the rest is untouched"
            FileHandle.standardError.write(Data("storectl: purge stopped: \(reason); \(done)\n".utf8))
        } else if [.failed, .checksFailed].contains(report.ending.outcome), let error = report.ending.error {
            FileHandle.standardError.write(Data("storectl: \(error.message)\(error.hint.map { "\n  hint: \($0)" } ?? "")\n".utf8))
        }
        try Finished.check(report.ending)
    }

    static func render(_ report: Purge.Report) -> String {
        var lines = ["purge \(report.store)\(report.dryRun ? " (dry run: nothing changed)" : "")"]
        if let snapshot = report.snapshot {
            lines.append("  snapshot first: \(snapshot) (checked when taken\(report.snapshotPoint.map { "; made from replicate's point \($0), the store as it was" } ?? ""))")
        }
        if let check = report.snapshotCheck { lines.append("  \(check)") }
        if let note = report.dryRunNote { lines.append("  note: \(note)") }
        for reason in report.wouldStop { lines.append("  NOW A RUN WOULD NOT GO: \(reason)") }
        for breaker in report.tripped { lines.append("  REFUSED by the circuit breaker: \(breaker); nothing was deleted") }
        for rule in report.rules {
            let cutoff = rule.cutoff.map { ", deleted before \(Timestamp.iso($0))" } ?? ""
            lines.append("  rule \(rule.name) (\(rule.target) -> \(rule.table)\(cutoff))")
            guard report.tripped.isEmpty else {
                lines.append("    \(Format.count(rule.candidates)) of \(Format.plural(rule.total, "row", "rows")) match")
                continue
            }
            let verb = report.dryRun ? "would delete" : "deleted"
            lines.append("    \(verb) \(Format.count(rule.deleted)) of \(Format.plural(rule.candidates, "row", "rows")) in \(Format.plural(rule.batches, "batch", "batches")), "
                         + "\(Format.duration(rule.seconds))\(rule.deleted > 0 ? ", \(Format.count(Int(rule.rowsPerSecond))) rows/s" : "")")
            for (table, count) in rule.cascaded.sorted(by: { $0.key < $1.key }) { lines.append("    + \(Format.plural(count, "\(table) row", "\(table) rows")) (cascade)") }
            if rule.joinRows > 0 { lines.append("    + \(Format.plural(rule.joinRows, "join-table row", "join-table rows"))") }
            for (table, rows) in rule.triggered.sorted(by: { $0.key < $1.key }) {
                lines.append("    + \(Format.plural(rows, "\(table) row", "\(table) rows")) changed by the store's own triggers or declared actions")
            }
            for (column, count) in rule.nullified.sorted(by: { $0.key < $1.key }) { lines.append("    ~ \(Format.count(count)) \(column) nullified") }
            if rule.verifiedBatches > 0 {
                lines.append("    each batch changed exactly its plan (\(Format.plural(rule.verifiedBatches, "batch", "batches")) checked before commit)")
            }
            if rule.denied > 0 {
                let answer = rule.onDeny == .fail ? "on_deny = \"fail\": the run exits 2" : "on_deny = \"keep\": not a failure"
                lines.append("    ! \(Format.plural(rule.denied, "row", "rows")) kept by deny rules (\(answer); a later run deletes them once nothing links to them)")
                for sample in rule.deniedSamples { lines.append("      \(sample)") }
            }
            if let stopped = rule.stopped { lines.append("    stopped: \(stopped)") }
            for note in rule.notes { lines.append("    note: \(note)") }
        }
        if report.checkpointed { lines.append("  WAL checkpoint (passive) done") }
        if !report.verified.isEmpty {
            let checks = report.verified.filter { $0.hasPrefix("quick_check") }.count
            let references = report.verified.count - checks
            lines.append("  checked after the deletes: quick_check of \(Format.plural(checks, "table", "tables")) written ok"
                         + (references > 0 ? ", no reference left to a deleted row in \(Format.plural(references, "relationship column", "relationship columns"))" : ""))
        }
        return lines.joined(separator: "\n")
    }
}

struct KillswitchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "killswitch",
        abstract: "Ask the storectl jobs running on a store to stop at their next safe point.",
        discussion: "engage creates <store>.storectl-killswitch; purge and migrate check it between batches and steps. release removes it.",
        subcommands: [Engage.self, Release.self, Status.self])

    /// What `--json` prints for the three subcommands (`ok` true; a failure prints the usual error document).
    struct Report: Encodable {
        var ok = true
        var store: String
        var engaged: Bool
        var path: String?
        var content: String?
        var released: Bool?
    }

    struct Engage: ParsableCommand, JSONOutput {
        static let configuration = CommandConfiguration(commandName: "engage", abstract: "Create <store>.storectl-killswitch: purges and migrations stop at their next safe point.")
        @Argument(help: "The store.") var store: String
        @Option(help: "Why (recorded in the file).") var reason: String = ""
        @Flag(help: "Print the result as JSON.") var json = false
        func run() throws {
            let path = try KillSwitch.engage(StoreFile(unchecked: store), reason: reason)
            print(json ? jsonReport(Report(store: FileSystem.absolute(store), engaged: true, path: path, content: KillswitchCommand.content(path)))
                       : "kill switch engaged: \(path)")
        }
    }

    struct Release: ParsableCommand, JSONOutput {
        static let configuration = CommandConfiguration(commandName: "release", abstract: "Remove the kill switch (a leftover one of a deleted store too).")
        @Argument(help: "The store.") var store: String
        @Flag(help: "Print the result as JSON.") var json = false
        func run() throws {
            let released = KillSwitch.release(StoreFile(unchecked: store))
            print(json ? jsonReport(Report(store: FileSystem.absolute(store), engaged: false, released: released))
                       : released ? "kill switch released" : "the kill switch was not engaged")
        }
    }

    struct Status: ParsableCommand, JSONOutput {
        static let configuration = CommandConfiguration(commandName: "status", abstract: "Say whether the kill switch is engaged, and why.")
        @Argument(help: "The store.") var store: String
        @Flag(help: "Print the result as JSON.") var json = false
        func run() throws {
            // A store that does not exist has no switch to report on: 66, not "not engaged" (release
            // stays unchecked, so a leftover switch of a deleted store can still be removed).
            let store = try StoreFile(existing: store)
            let engaged = KillSwitch(store: store).engaged
            if json {
                print(jsonReport(Report(store: store.path, engaged: engaged != nil, path: engaged, content: engaged.flatMap(KillswitchCommand.content))))
            } else if let engaged {
                print("engaged: \(engaged): \(KillswitchCommand.content(engaged) ?? "")")
            } else {
                print("not engaged")
            }
        }
    }

    static func content(_ path: String) -> String? {
        (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
