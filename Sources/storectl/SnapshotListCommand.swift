import ArgumentParser
import Foundation
import StoreOps

struct SnapshotListCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List the snapshots, newest first.")

    @Option(help: "The snapshot repository.") var repo: String
    @OptionGroup var password: PasswordOption
    @Option(help: "Only the snapshots of this store (its path).") var store: String?
    @Option(help: "Only the snapshots taken on this host.") var host: String?
    @Flag(help: "Print the list as JSON.") var json = false
    @Flag(help: "List only the points in time `storectl replicate` recorded (covered spans, gaps); without it the snapshots come first, then the points.") var points = false
    @Flag(help: "Also list the milestones `storectl replicate` writes (each followed store's state every ten minutes; folded into one line otherwise).") var milestones = false

    func run() throws {
        let filter = try SnapshotFilter.parse(store: store, host: host)
        if points {
            let stores = try StorePoints.list(repository: repo, password: password.source, filter: filter)
            print(json ? jsonReport(stores) : Self.render(stores))
            return
        }
        guard !json else {
            print(jsonReport(try SnapshotSummary.list(repository: repo, password: password.source, filter: filter).filter { milestones || $0.milestone == nil }))
            return
        }
        let (all, stores) = try SnapshotSummary.listWithPoints(repository: repo, password: password.source, filter: filter)
        let rows = all.filter { milestones || $0.milestone == nil }
        var text = Self.render(rows)
        if all.count > rows.count {
            text += "\n(\(Format.plural(all.count - rows.count, "milestone", "milestones")) of storectl replicate not shown: --milestones lists them)"
        }
        if !stores.isEmpty { text += "\n\n" + Self.render(stores) }
        print(text)
    }

    static func render(_ stores: [StorePoints]) -> String {
        guard !stores.isEmpty else { return "no points in time (storectl replicate records them)" }
        func time(_ date: Date) -> String { Timestamp.iso(date).replacingOccurrences(of: "T", with: " ") }
        var lines: [String] = []
        for entry in stores {
            lines.append("points in time of \(entry.store) (\(entry.host)): \(entry.pointsAtLeast ? "at least " : "")\(Format.plural(entry.points, "point", "points"))")
            for span in entry.spans {
                let to = span.to.map { time($0) } ?? "…"
                let what: String
                switch span.kind {
                case "covered":
                    // A span with no commit in it (followed while the app was idle) is no "every commit: 0 points".
                    what = span.points == 0 ? "no commit (followed, the app idle) in chain \(span.chain ?? "")"
                        : "every commit" + (span.points.map { ": \(Format.plural($0, "point", "points")) in chain \(span.chain ?? "")" } ?? "")
                // A chain thinned to its base says so, as its JSON does (it was "the last commit of each minute").
                case "thinned": what = (span.reason ?? "the last commit of each minute") + (span.points.map { ": \(span.pointsAtLeast == true ? "at least " : "")\(Format.plural($0, "point", "points")) in chain \(span.chain ?? "")" } ?? "")
                case "gap", "unconfirmed": what = span.reason ?? ""
                default: what = span.reason ?? "storectl replicate was stopped"
                }
                lines.append("  \(span.kind.rightPadded(to: 12))  \(time(span.from))  to  \(to.rightPadded(to: 24))  \(what)")
            }
        }
        return lines.joined(separator: "\n")
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
            cells.enumerated().map { $1.rightPadded(to: widths[$0]) }.joined(separator: "  ")
                .trimmingCharacters(in: .whitespaces)
        }
        return ([render(header)] + lines.map(render)).joined(separator: "\n")
    }
}
