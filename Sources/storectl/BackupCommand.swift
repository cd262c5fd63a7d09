import ArgumentParser
import Foundation
import StoreOps

struct BackupCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "An online, consistent, verified copy of a live store.",
        discussion: reflow("""
            Copies the store as of one moment while other processes keep writing. In WAL mode one read
            transaction is held for the whole copy, so writers are never blocked and the copy never
            restarts. The copy is a single self-contained file (journal_mode=DELETE), mode 0600, written
            under a temporary name, verified, fsynced and renamed; a manifest (<name>.manifest.json) is
            written beside it. Core Data external data (.<store>_SUPPORT/_EXTERNAL_DATA) is copied along.
            """))

    @Argument(help: "The store to copy.")
    var source: String

    @Option(name: .shortAndLong, help: "A file path, or an existing folder (the copy is then <stem>-<UTC timestamp>.sqlite).")
    var output: String

    @Option(help: "How to check the copy: quick (PRAGMA quick_check), full (integrity_check + foreign_key_check), none.")
    var verify: VerifyLevel = .quick

    @Option(parsing: .unconditional, help: "Seconds to keep retrying while the store is locked before giving up with exit 75.")
    var timeout: Double = 60

    @Flag(help: "Replace the output file if it exists.")
    var force = false

    @Flag(help: "Wait while a restore, migration or purge of the store runs, instead of exiting 75.")
    var wait = false

    @Flag(help: "Print the result as JSON on stdout.")
    var json = false

    @Flag(help: "Copy at full speed: no paced writes, no lowered CPU priority (the app's commits may wait behind the copy).")
    var noPace = false

    func run() throws {
        IOPace.configure(paced: !noPace)
        let progress = TerminalProgress.handler("backup", quiet: json)
        defer { progress?.0.finish() }
        var options = Backup.Options(output: output, verify: verify, timeout: timeout, overwrite: force)
        options.wait = wait
        let result = try Backup.run(source: source, options: options, progress: progress?.1)
        progress?.0.finish()
        if let signal = ProcessSignals.received {
            // Its swap had begun: finished rather than stopped half way (a signal then said nothing).
            FileHandle.standardError.write(Data("storectl: \(ProcessSignals.name(signal)) came while the backup was being put in place: too late to stop; it was finished\n".utf8))
        }
        print(json ? jsonReport(result) : Self.summary(result))
    }

    static func summary(_ result: Backup.Result) -> String {
        let m = result.manifest
        var extras = ["source \(m.source.journalMode)"]
        if let coreData = m.coreData { extras.append(Format.plural(coreData.entityCounts.count, "entity", "entities")) }
        if let external = m.externalData { extras.append(Format.plural(external.files.count, "external file", "external files")) }
        let verify = m.verify.level == .none ? "not verified" : "\(m.verify.level == .quick ? "quick_check" : "integrity_check") ok"
        return "backup ok: \(result.path)  \(Format.bytes(m.database.bytes)), \(Format.count(m.database.pageCount ?? 0)) pages, "
            + "\(verify), sha256 \((m.database.sha256 ?? "").prefix(12))…, \(Format.duration(m.durationSeconds)) (\(extras.joined(separator: ", ")))"
    }
}
