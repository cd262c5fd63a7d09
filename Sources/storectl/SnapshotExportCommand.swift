import ArgumentParser
import StoreOps

struct SnapshotExportCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write a snapshot as one self-contained .tar.zst (format 1's layout: bsdtar reads it, no password needed).")

    @Option(help: "The snapshot repository.") var repo: String
    @Argument(help: "The snapshot id (or a unique prefix).") var id: String
    @Option(help: "The archive to write (*.tar.zst; must not exist).") var output: String
    @OptionGroup var password: PasswordOption
    @Flag(help: "Print the result as JSON.") var json = false

    func run() throws {
        let progress = TerminalProgress.handler("snapshot export", quiet: json)
        let result = try SnapshotExport.run(.init(repository: repo, id: id, output: output, password: password.source), progress: progress?.1)
        progress?.0.finish()
        print(json ? jsonReport(result) : "exported snapshot \(result.id) to \(result.output) (\(Format.bytes(result.bytes)), database sha256 \(result.databaseSHA256))")
    }
}
