import ArgumentParser
import Foundation
import StoreOps

struct ReplicateCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "replicate",
        abstract: "Follow stores' -wal into a repository: every commit seen becomes a point to restore (snapshot restore --at).",
        discussion: reflow("""
            Runs until SIGTERM or SIGINT (or for --for), then writes what it has read and marks each store's points
            stopped. It reads each store's -wal as a file and holds a read transaction only while it reads new frames:
            it writes nothing to the store, adds no table and takes no part in the app's checkpoints. Every
            --sync-interval the commits read are written to the repository as one object per store: a point is
            durable from then on. Where it cannot prove that no commit was missed (the -wal truncated or removed before
            its last frames were read, the store replaced, storectl not running), it takes a new base (an incremental
            snapshot: it costs what changed) and records a gap, which is never listed as a point. Started again, it
            takes up each store's points where they stopped if the -wal still continues them.
            """))

    @Argument(help: "The stores to follow (in WAL mode).") var stores: [String]
    @Option(help: "The repository (format 2; a folder or s3://bucket/prefix).") var repo: String
    @OptionGroup var password: PasswordOption
    @Option(help: "How often new commits are written to the repository (e.g. 1s, 500ms).") var syncInterval = "1s"
    @Option(help: "How often a new base is taken, bounding what a restore reads (e.g. 1h).") var baseInterval = "1h"
    @Option(help: "Stop after this long (e.g. 10m) instead of waiting for a signal.") var `for`: String?
    @Flag(help: "Print the summary as JSON when it stops.") var json = false
    @Flag(help: "Say nothing while following (the summary is still printed at the end).") var quiet = false

    func run() throws {
        var options = Replicate.Options(stores: stores, repository: repo)
        options.password = password.source
        options.syncInterval = try duration(syncInterval, "--sync-interval", allowZero: false)
        options.baseInterval = try duration(baseInterval, "--base-interval", allowZero: false)
        options.duration = try `for`.map { try duration($0, "--for", allowZero: false) }
        let say: @Sendable (String) -> Void = { line in FileHandle.standardError.write(Data("storectl replicate: \(line)\n".utf8)) }
        let summary = try Replicate.run(options, events: quiet || json ? nil : say)
        if json { print(jsonReport(summary)); return }
        for store in summary.stores {
            var line = "\(store.store): \(Format.plural(store.points, "point", "points")) in \(Format.plural(store.segments, "segment", "segments"))"
            if !store.bases.isEmpty { line += ", \(Format.plural(store.bases.count, "base", "bases"))" }
            if !store.gaps.isEmpty { line += ", \(Format.plural(store.gaps.count, "gap", "gaps"))" }
            line += String(format: ", lag p99 %.2f s, max %.2f s", store.p99LagSeconds, store.maxLagSeconds)
            print(line)
        }
    }

    private func duration(_ text: String, _ option: String, allowZero: Bool) throws -> TimeInterval {
        switch DurationText.parse(text, allowZero: allowZero) {
        case .success(let value): return value.seconds
        case .failure(let error): throw ValidationError("\(option) \(text): \(error.problem)")
        }
    }
}
