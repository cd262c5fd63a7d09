import ArgumentParser
import StoreOps

struct SnapshotListCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List the snapshots, newest first.")

    @Option(help: "The snapshot repository.") var repo: String
    @Flag(help: "Print the list as JSON.") var json = false

    func run() throws {
        let rows = try SnapshotSummary.list(repository: repo)
        print(json ? JSON.string(rows) : SnapshotSummary.renderTable(rows))
    }
}
