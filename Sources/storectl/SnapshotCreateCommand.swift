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
    @Option(help: "zstd (default, both cores), gzip, xz or none.") var compression: Compression = .zstd
    @Option(parsing: .unconditional, help: "Compression level (zstd 1-19, default 3; gzip 1-9; xz 0-9).") var level: Int?
    @Option(parsing: .unconditional, help: "Seconds to keep retrying while the store is locked.") var timeout: Double = 60
    @Flag(help: "Wait for another writer of the repository instead of exiting 75.") var wait = false
    @Flag(help: "Print the result as JSON.") var json = false

    func run() throws {
        let progress = TerminalProgress.handler("snapshot create", quiet: json)
        defer { progress?.0.finish() }
        let result = try SnapshotCreate.run(store: store, options: .init(repository: repo, tags: tags, compression: compression,
                                                                          level: level, timeout: timeout, wait: wait, password: password.source),
                                            progress: progress?.1)
        progress?.0.finish()
        if json { print(jsonReport(result)); return }
        let record = result.record
        let raw = record.database.bytes + (record.externalData?.totalBytes ?? 0)
        if result.format == 2 {
            let tags = record.snapshot?.tags ?? []
            print("snapshot \(result.id): added \(Format.bytes(result.addedBytes ?? 0)) to \(result.archive.components(separatedBy: "/snapshots/").first ?? result.archive) "
                  + "for a \(Format.bytes(raw)) store\(result.parent.map { " (against \($0))" } ?? " (first of this store)"), "
                  + "quick_check ok, \(Format.duration(record.durationSeconds))\(tags.isEmpty ? "" : ", tags \(tags.joined(separator: ","))")")
            return
        }
        let archive = record.snapshot?.archive
        let ratio = String(format: "%.1fx", Double(raw) / Double(max(1, archive?.bytes ?? 1)))
        let tags = record.snapshot?.tags ?? []
        let tagText = tags.isEmpty ? "" : ", tags \(tags.joined(separator: ","))"
        print("snapshot \(result.id): \(result.archive)  \(Format.bytes(archive?.bytes ?? 0)) (\(ratio) of \(Format.bytes(raw))), "
              + "quick_check ok, \(Format.duration(record.durationSeconds))\(tagText)")
    }
}
