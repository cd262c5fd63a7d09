import ArgumentParser
import StoreOps

struct SnapshotVerifyCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check snapshots: every page and file read back, authenticated and checked against its content id, the database rebuilt, then quick_check.",
        discussion: "Writes nothing into the repository but each snapshot's \"last verified\" record. Exits 65 if any is damaged.")

    @Option(help: "The snapshot repository.") var repo: String
    @OptionGroup var password: PasswordOption
    @Argument(help: "Snapshot ids (or unique prefixes).") var ids: [String] = []
    @Flag(help: "Verify every snapshot, and every point in time (each segment read and checked).") var all = false
    @Flag(help: "Run integrity_check instead of quick_check.") var full = false
    @Option(help: "Folder to unpack the database in (default: the system's temp folder).") var scratch: String?
    @Flag(help: "Print the outcomes as JSON.") var json = false

    func validate() throws {
        guard !ValidationGate.off else { return }
        if all && !ids.isEmpty { throw ValidationError("pass snapshot ids or --all, not both") }
        if !all && ids.isEmpty { throw ValidationError("name the snapshots to verify, or pass --all") }
    }

    func run() throws {
        try FileSystem.checkScratch(scratch)
        var options = SnapshotVerify.Options(repository: repo, ids: ids, all: all, full: full, scratch: scratch)
        options.password = password.source
        let progress = TerminalProgress.handler("snapshot verify", quiet: json)
        if !json {
            // Each verdict as it is known (a long --all said nothing until its end), above the progress line.
            let shown = progress?.0
            options.each = { outcome in
                if let shown { shown.interject(Self.line(outcome)) } else { print(Self.line(outcome)) }
            }
        }
        let outcomes = try SnapshotVerify.run(options, progress: progress?.1)
        progress?.0.finish()
        if json { print(jsonReport(outcomes)) }
        try Finished.check(SnapshotVerify.ending(of: outcomes))
    }

    static func line(_ outcome: SnapshotVerify.Outcome) -> String {
        let problem = (outcome.problem ?? "").replacingOccurrences(of: "snapshot \(outcome.id): ", with: "")
        if outcome.status != nil {
            // The repository could not be read here: not damage; the run stopped.
            let what = outcome.points == nil ? outcome.id : "points of chain \(outcome.id)"
            return "NOT CHECKED \(what): \(problem)"
        }
        if let points = outcome.points {
            let count = outcome.thinned == true ? "points numbered 0 to \(points - 1), thinned to one a minute" : Format.plural(points, "point", "points")
            let what = "points of \(outcome.store ?? "a store"), chain \(outcome.id) (\(count))"
            return outcome.ok ? "ok      \(what)  (\(Format.duration(outcome.seconds)))" : "DAMAGED \(what): \(problem)"
        }
        let unrecorded = outcome.unrecorded.map { "; NOT RECORDED as verified: \($0)" } ?? ""
        return (outcome.ok ? "ok      \(outcome.id)  (\(Format.duration(outcome.seconds)))" : "DAMAGED \(outcome.id): \(problem)") + unrecorded
    }
}
