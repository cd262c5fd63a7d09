import ArgumentParser
import StoreOps

struct SnapshotCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "snapshot",
        abstract: "Compressed snapshots of a store in a repository: create, list, show, verify, restore, prune.",
        discussion: """
            A repository is a folder (mode 0700) made by the first `snapshot create`. Writers (create, restore,
            prune) take its lock and exit 75 at once if another holds it (or wait with --wait); readers take none.
            """,
        subcommands: [SnapshotCreateCommand.self, SnapshotListCommand.self, SnapshotShowCommand.self,
                      SnapshotVerifyCommand.self, SnapshotRestoreCommand.self, SnapshotPruneCommand.self])
}

extension Compression: ExpressibleByArgument {}
