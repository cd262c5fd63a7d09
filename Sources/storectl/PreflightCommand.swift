import ArgumentParser
import Foundation
import StoreOps

struct PreflightCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "preflight",
        abstract: "Check a store before anything risky: space, integrity, state, locks, Core Data consistency.",
        discussion: """
            Read-only. Prints one line per check (ok / warn / fail / skip with its figure), then the
            Core Data entity counts. Exits 0 when every check passes (warnings pass), 2 when one fails.
            """)

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

    @Flag(help: "Print the report as JSON on stdout.")
    var json = false

    func run() throws {
        let report = try Preflight.run(store: store, options: .init(operation: operation, destination: dest, full: full, timeout: timeout))
        print(json ? JSON.string(report) : report.renderTable())
        if !report.passed { throw ExitCode(ExitStatus.checksFailed.rawValue) }
    }
}
