import ArgumentParser
import Foundation
import StoreOps

struct PreflightCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "preflight",
        abstract: "Check a store before anything risky: space, integrity, state, locks, Core Data consistency.",
        discussion: reflow("""
            Read-only. Prints one line per check (ok / warn / fail / skip with its figure), then the
            Core Data entity counts. Exits 0 when every check passes (warnings pass), 2 when one fails.
            """))

    @Argument(help: "The store to check.")
    var store: String

    @Option(name: .customLong("for"), help: "The operation to check for: backup, snapshot, migrate or purge (sets the space figures).")
    var operation: Preflight.Operation = .backup

    @Option(help: "Where the operation will write (backup folder, snapshot repository). Default: the store's folder.")
    var dest: String?

    @Flag(help: "Also run integrity_check and foreign_key_check (slower than quick_check).")
    var full = false

    @Option(parsing: .unconditional, help: "Seconds to wait for another process's lock.")
    var timeout: Double = 10

    @Flag(help: "With --for migrate: check for `migrate --force` (the app having the store open is a warning, not a failure).")
    var force = false

    @Flag(help: "Print the report as JSON on stdout.")
    var json = false

    func validate() throws {
        guard !ValidationGate.off else { return }
        if force, operation != .migrate { throw ValidationError("--force is for --for migrate (as `migrate --force`)") }
    }

    func run() throws {
        let progress = TerminalProgress.handler("preflight", quiet: json)
        let report = try Preflight.run(store: store, options: .init(operation: operation, destination: dest, full: full, timeout: timeout, force: force),
                                       progress: progress?.1)
        progress?.0.finish()
        print(json ? jsonReport(report) : Self.render(report))
        try Finished.check(report.ending)
    }

    /// The human-readable table: one line per check, then the entity counts.
    static func render(_ report: PreflightReport) -> String {
        let (store, operation, destination, checks, entities, passed, durationSeconds) = (report.store, report.operation, report.destination, report.checks, report.entities, report.passed, report.durationSeconds)
        var lines = ["preflight \(store)  (for \(operation.rawValue) -> \(destination))"]
        let width = max(24, checks.map(\.id.count).max() ?? 0)
        for check in checks {
            let label = check.id.rightPadded(to: width)
            lines.append("  \(check.status.rawValue.rightPadded(to: 5)) \(label)  \(check.summary)")
            for detail in check.details { lines.append("        \(String(repeating: " ", count: width))    \(detail)") }
            if let advice = check.advice, check.status >= .warn {
                lines.append("        \(String(repeating: " ", count: width))    -> \(advice)")
            }
        }
        if let entities, !entities.isEmpty {
            lines.append("")
            lines.append("  entities (Core Data)")
            let nameWidth = max(12, entities.map(\.entity.count).max() ?? 0)
            for entity in entities {
                let rows = entity.rows.map { Format.count($0) } ?? "no table"
                let table = entity.table.map { "  \($0)" } ?? ""
                lines.append("    \(entity.entity.rightPadded(to: nameWidth))  \(rows.leftPadded(to: 12))\(table)")
            }
        }
        let counts = Dictionary(grouping: checks, by: \.status).mapValues(\.count)
        let tally = [Check.Status.ok, .warn, .fail, .skip].compactMap { s in counts[s].map { "\($0) \(s.rawValue)" } }
        lines.append("")
        lines.append("result: \(passed ? "ok" : "FAILED") (\(tally.joined(separator: ", ")); \(Format.duration(durationSeconds)))")
        return lines.joined(separator: "\n")
    }
}
