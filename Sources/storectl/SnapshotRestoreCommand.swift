import ArgumentParser
import StoreOps

struct SnapshotRestoreCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Restore a snapshot to a new file (--to) or in place of a store (--in-place).",
        discussion: """
            The snapshot is verified while it is unpacked beside the target, its database checked, then swapped in
            atomically. In place: refused while another process has the store open (unless --force); a safety
            snapshot of the current store is taken first (tag pre-restore); the old store's -wal/-shm are removed so
            SQLite cannot replay them onto the restored file; the external-data folder is replaced with the snapshot's.
            """)

    @Option(help: "The snapshot repository.") var repo: String
    @Argument(help: "The snapshot id (or a unique prefix).") var id: String
    @Option(help: "Restore to this new file.") var to: String?
    @Option(help: "Restore in place of this store.") var inPlace: String?
    @Flag(help: "In place: go ahead although the store is open; move a damaged store aside instead of snapshotting it.") var force = false
    @Flag(help: "Wait for locks instead of exiting 75.") var wait = false
    @Flag(help: "Print the result as JSON.") var json = false

    func validate() throws {
        if (to == nil) == (inPlace == nil) { throw ValidationError("pass exactly one of --to PATH or --in-place STORE") }
    }

    func run() throws {
        let target: SnapshotRestore.Target = to.map { .file($0) } ?? .inPlace(inPlace!)
        let result = try SnapshotRestore.run(.init(repository: repo, id: id, target: target, force: force, wait: wait))
        if json { print(JSON.string(result)); return }
        var line = "restored \(result.id) to \(result.restoredTo)"
        if result.externalFiles > 0 { line += " with \(result.externalFiles) external files" }
        if let safety = result.safetySnapshot { line += "; the previous store is snapshot \(safety) (tag pre-restore)" }
        if !result.movedAside.isEmpty { line += "; the damaged store was moved to \(result.movedAside.joined(separator: ", "))" }
        if !result.removedSidecars.isEmpty { line += "; removed \(result.removedSidecars.map { String($0.split(separator: "-").last ?? "") }.joined(separator: ", "))" }
        print(line)
    }
}
