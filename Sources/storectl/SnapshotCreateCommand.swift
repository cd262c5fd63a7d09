import ArgumentParser
import Foundation
import StoreOps

struct SnapshotCreateCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Take a consistent snapshot of a live store into the repository.")

    @Argument(help: "The store.") var store: String
    @Option(help: "The snapshot repository (`storectl repo init` makes one).") var repo: String
    @OptionGroup var password: PasswordOption
    @Option(name: .customLong("tag"), help: "A tag (repeatable).") var tags: [String] = []
    @Option(parsing: .unconditional, help: "zstd's level (1-19, default 3).") var level: Int?
    @Option(parsing: .unconditional, help: "Seconds to keep retrying while the store is locked.") var timeout: Double = 60
    @Flag(help: "Wait for another writer of the repository instead of exiting 75.") var wait = false
    @Flag(help: "Print the result as JSON.") var json = false
    @Flag(help: "Write at full speed: no paced writes, no lowered CPU priority (the app's commits may wait behind the snapshot).") var noPace = false

    func run() throws {
        IOPace.configure(paced: !noPace)
        let started = Date()
        let progress = TerminalProgress.handler("snapshot create", quiet: json)
        defer { progress?.0.finish() }
        let result = try SnapshotCreate.run(store: store, options: .init(repository: repo, tags: tags,
                                                                          level: level, timeout: timeout, wait: wait, password: password.source),
                                            progress: progress?.1)
        progress?.0.finish()
        if let was = result.parentStoreUUID, let parent = result.parent {
            // Said in JSON runs too (a cron job's log): retention decides by host and path.
            FileHandle.standardError.write(Data(("storectl: warning: \(store) is another Core Data store than the one its earlier snapshots are of "
                + "(store UUID \(result.record.coreData?.metadata.uuid ?? "?") here, \(was) in \(parent)): the old store moved or this one was made anew. "
                + "Prune groups snapshots by host and path: the old store's snapshots now count as this one's, and rules such as --keep-last may remove them (a --dry-run shows which)\n").utf8))
        }
        if json { print(jsonReport(result)); return }
        let record = result.record
        let raw = record.database.bytes + (record.externalData?.totalBytes ?? 0)
        let tags = record.snapshot?.tags ?? []
        print("snapshot \(result.id): added \(Format.bytes(result.addedBytes ?? 0)) to \(result.archive.components(separatedBy: "/snapshots/").first ?? result.archive) "
              + "for a \(Format.bytes(raw)) store\(result.parent.map { " (against \($0))" } ?? " (first of this store)"), "
              + (result.unchanged ? "unchanged since it (no page read), " : "quick_check ok, ")
              // The command's own time, not the record's (its copy's): a create that waited on a
              // stalled server for 21 s said 0.83s.
              + "\(Format.duration(Date().timeIntervalSince(started)))\(tags.isEmpty ? "" : ", tags \(tags.joined(separator: ","))")")
    }
}
