import ArgumentParser
import StoreOps

struct SnapshotCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "snapshot",
        abstract: "Snapshots of a store in a repository: create, list, show, verify, restore, export, import, prune.",
        discussion: reflow("""
            A repository is a folder or an S3 prefix (s3://BUCKET/PREFIX) made by `storectl repo init` (page-level,
            encrypted by default); it holds snapshots and, from `storectl replicate`, points in time. create, restore,
            verify, export and prune --dry-run share it; prune needs it alone: a conflicting user makes a command
            exit 75 at once (or wait with --wait).
            """),
        subcommands: [SnapshotCreateCommand.self, SnapshotListCommand.self, SnapshotShowCommand.self,
                      SnapshotVerifyCommand.self, SnapshotRestoreCommand.self, SnapshotExportCommand.self, SnapshotImportCommand.self, SnapshotPruneCommand.self])
}

