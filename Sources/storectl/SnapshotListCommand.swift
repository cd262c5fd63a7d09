import ArgumentParser
import StoreOps

struct SnapshotListCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List the snapshots, newest first.")

    @Option(help: "The snapshot repository.") var repo: String
    @OptionGroup var password: PasswordOption
    @Option(help: "Only the snapshots of this store (its path).") var store: String?
    @Option(help: "Only the snapshots taken on this host.") var host: String?
    @Flag(help: "Print the list as JSON.") var json = false

    func run() throws {
        let rows = try SnapshotSummary.list(repository: repo, password: password.source, filter: try SnapshotFilter.parse(store: store, host: host))
        print(json ? jsonReport(rows) : Self.render(rows))
    }

    static func render(_ rows: [SnapshotSummary]) -> String {
        guard !rows.isEmpty else { return "no snapshots" }
        // ADDED is what the snapshot added to the repository (its new pages), OF the whole store it holds.
        // The store's full path (two stores of one name in different folders are different stores),
        // and the host when more than one host's snapshots are listed.
        let hosts = Set(rows.map(\.host).filter { !$0.isEmpty }).count > 1
        let header = ["ID", "TIME (UTC)"] + (hosts ? ["HOST"] : []) + ["STORE", "ADDED", "OF", "TAGS", "LAST VERIFIED"]
        let lines = rows.map { row in
            [row.id, Timestamp.iso(row.time).prefix(19).replacingOccurrences(of: "T", with: " ")] + (hosts ? [row.host] : []) + [row.store,
             Format.bytes(row.bytes), Format.bytes(row.logicalBytes), row.tags.joined(separator: ","),
             row.damaged != nil ? "DAMAGED catalog entry"
                : row.lastVerified.map { "\(Timestamp.iso($0.at).prefix(16).replacingOccurrences(of: "T", with: " ")) \($0.ok ? "ok" : "FAILED")" } ?? "never"]
        }
        let widths = header.indices.map { i in max(header[i].count, lines.map { $0[i].count }.max() ?? 0) }
        func render(_ cells: [String]) -> String {
            cells.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: "  ")
                .trimmingCharacters(in: .whitespaces)
        }
        return ([render(header)] + lines.map(render)).joined(separator: "\n")
    }
}
