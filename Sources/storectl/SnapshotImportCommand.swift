import ArgumentParser
import StoreOps

struct SnapshotImportCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Bring a snapshot archive (from `snapshot export`) into a repository, keeping its id, time and tags.",
        discussion: reflow("""
            The archive is checked entry by entry (names, sizes, the SHA-256 of every file and of the database, \
            quick_check), stored page by page as it is, then reassembled from the repository and compared byte for byte \
            before it counts. Importing a snapshot the repository already holds verifies it and writes nothing.
            """))

    @Argument(help: "The archive (*.tar.zst) to import.") var file: String
    @Option(help: "The snapshot repository (format 2).") var repo: String
    @OptionGroup var password: PasswordOption
    @Option(help: "Where the archive is unpacked on its way (default: TMPDIR).") var scratch: String?
    @Flag(help: "Print the result as JSON.") var json = false

    func run() throws {
        try FileSystem.checkScratch(scratch)
        let progress = TerminalProgress.handler("snapshot import", quiet: json)
        var options = SnapshotImport.Options(file: file, repository: repo, password: password.source)
        options.scratch = scratch
        let result = try SnapshotImport.run(options, progress: progress?.1)
        progress?.0.finish()
        if json { print(jsonReport(result)); return }
        let what = "\(result.id) (\(Timestamp.iso(result.startedAt)), \(result.host):\(result.source)\(result.tags.isEmpty ? "" : ", tags \(result.tags.joined(separator: ","))"))"
        print(result.alreadyThere ? "already in \(result.repository): \(what), verified; nothing was written"
                                  : "imported \(what) into \(result.repository): added \(Format.bytes(result.addedBytes)), verified")
    }
}
