import ArgumentParser
import StoreOps

struct SnapshotCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "snapshot",
        abstract: "Snapshots of a store in a repository: create, list, show, verify, restore, export, import, prune.",
        discussion: reflow("""
            A repository is a folder made by `storectl repo init` (format 2, page-level and encrypted, by default).
            create, restore, verify and export share it; prune needs it alone: a conflicting user makes a command
            exit 75 at once (or wait with --wait).
            """),
        subcommands: [SnapshotCreateCommand.self, SnapshotListCommand.self, SnapshotShowCommand.self,
                      SnapshotVerifyCommand.self, SnapshotRestoreCommand.self, SnapshotExportCommand.self, SnapshotImportCommand.self, SnapshotPruneCommand.self])
}

