import ArgumentParser
import Foundation
import StoreOps

struct RepoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "repo",
        abstract: "Make and look after snapshot repositories: init, check, stats, repair, convert.",
        discussion: reflow("""
            A repository stores each database page once, content-addressed, zstd-compressed and encrypted
            (AES-256-GCM, keyed content ids) in packs. storectl never makes a repository implicitly: `snapshot create`
            into a missing one exits 66. A repository made by an earlier storectl (format 1, or format 2 of layout 1)
            is brought into a new one with `repo convert`.
            """),
        subcommands: [RepoInitCommand.self, RepoCheckCommand.self, RepoStatsCommand.self, RepoRepairCommand.self, RepoConvertCommand.self])
}

struct RepoInitCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(commandName: "init", abstract: "Make a new, empty snapshot repository.")

    @Option(help: "The folder to make it in (new, or empty).") var repo: String
    @Option(help: ArgumentHelp("Always 2 (accepted for scripts written when there was a format 1).", visibility: .hidden)) var format = 2
    @Flag(help: "Without encryption: anyone who can read the folder can read the snapshots.") var insecureNoEncryption = false
    @OptionGroup var password: PasswordOption
    @Flag(help: "Print the result as JSON.") var json = false

    func run() throws {
        guard format == 2 else {
            throw StoreOpsError(.usage, "--format \(format): storectl makes repositories of format 2 only",
                                hint: "leave out --format; `storectl snapshot export` writes one snapshot as a plain .tar.zst any tool can read")
        }
        let result = try RepositoryInit.run(.init(location: repo, encrypted: !insecureNoEncryption, password: password.source))
        if json { print(jsonReport(result)); return }
        let what = result.encrypted ? "format 2, encrypted (AES-256-GCM), key \(result.keyID ?? "?")" : "format 2, NOT encrypted"
        print("created repository \(result.location): \(what)")
    }
}

struct RepoCheckCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "check", abstract: "Check that every snapshot of the repository is whole (exit 2 when not).",
        discussion: "Reads indexes, pack headers, records and page maps; --read-data also reads and authenticates every byte of every pack. When no other process holds the repository, it first removes what a writer that died left (its lock, packs it never indexed), as the next writer would, and says so in a note.")

    @Option(help: "The snapshot repository.") var repo: String
    @Flag(help: "Read, authenticate and check every blob of every pack.") var readData = false
    @OptionGroup var password: PasswordOption
    @Flag(help: "Print the report as JSON.") var json = false

    func run() throws {
        let progress = TerminalProgress.stepHandler("repo check", quiet: json)
        let report = try RepositoryCheck.run(.init(location: repo, password: password.source, readData: readData), progress: progress?.1)
        progress?.0.finish()
        if json { print(jsonReport(report)) } else {
            for problem in report.problems { print("PROBLEM \(problem)") }
            for note in report.notes { print("note    \(note)") }
            var scope = ", \(Format.plural(report.packs, "pack", "packs")), \(Format.plural(report.indexes, "index", "indexes")), \(Format.count(report.blobs)) blobs"
            if report.pointChains > 0 {
                scope += ", \(Format.plural(report.pointChains, "chain", "chains")) of points (\(Format.plural(report.pointSegments, "segment", "segments")))"
            }
            let checked = "\(Format.plural(report.snapshots, "snapshot", "snapshots"))\(scope)\(report.readData ? ", every byte read" : "")"
            if report.ok {
                print("ok: \(checked)")
            } else {
                // What is damaged first; what was checked after it.
                let named = report.damagedSnapshots
                let which = named.isEmpty ? "" : "\(named.count) of \(Format.plural(report.snapshots, "snapshot", "snapshots")) may not restore ("
                    + named.prefix(5).joined(separator: ", ") + (named.count > 5 ? ", and \(named.count - 5) more" : "") + "); "
                // Damage to a pack or an index names no snapshot: which ones it reaches, verify says.
                let unattributed = report.problems.count > named.count ? " (`snapshot verify --all` names every snapshot the others reach)" : ""
                print("DAMAGED: \(which)\(Format.plural(report.problems.count, "problem", "problems")) listed above\(unattributed); checked \(checked)")
            }
        }
        try Finished.check(RepositoryCheck.ending(of: report))
    }
}

struct RepoStatsCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(commandName: "stats", abstract: "What the repository holds, and what storing pages once saves.")

    @Option(help: "The snapshot repository.") var repo: String
    @OptionGroup var password: PasswordOption
    @Flag(help: "Print the figures as JSON.") var json = false

    func run() throws {
        let report = try RepositoryStats.run(location: repo, password: password.source)
        if json {
            print(jsonReport(report))
            try Finished.check(RepositoryStats.ending(of: report))
            return
        }
        var lines = [
            "repository  \(report.location) (format \(report.format), \(report.encrypted ? "encrypted" : "NOT encrypted"))",
            "snapshots   \(report.snapshots), \(Format.bytes(report.logicalBytes)) as whole copies",
            "stored      \(Format.bytes(report.storedBytes))" + Format.storedRatio(logical: report.logicalBytes, stored: report.storedBytes),
        ]
        lines.append("packs       \(report.packs), \(Format.plural(report.indexes, "index", "indexes"))")
        let kinds = report.blobsByType.sorted { $0.key < $1.key }.map { "\(Format.count($0.value)) \($0.key)s" }.joined(separator: ", ")
        lines.append("blobs       \(Format.count(report.blobs)) (\(Format.bytes(report.blobBytes)) uncompressed): \(kinds)")
        for damaged in report.damaged { lines.append("DAMAGED     \(damaged): not counted") }
        print(lines.joined(separator: "\n"))
        try Finished.check(RepositoryStats.ending(of: report))
    }
}

struct RepoRepairCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "repair", abstract: "Rebuild a repository's index from its packs (after a damaged or lost index).")

    @Option(help: "The snapshot repository.") var repo: String
    @Flag(help: "Wait for other users of the repository instead of exiting 75.") var wait = false
    @OptionGroup var password: PasswordOption
    @Flag(help: "Print the report as JSON.") var json = false

    func run() throws {
        let progress = TerminalProgress.handler("repo repair", quiet: json)
        let report = try RepositoryRepair.run(location: repo, password: password.source, wait: wait, progress: progress?.1)
        progress?.0.finish()
        if json { print(jsonReport(report)) } else {
            for damaged in report.damagedPacks { print("damaged \(damaged)") }
            for snapshot in report.unrestorable { print("UNRESTORABLE \(snapshot)") }
            for snapshot in report.newerRecords { print("note    \(snapshot): written by a newer storectl, not checked here (that storectl's repair checks it)") }
            print("indexed \(Format.plural(report.packsIndexed, "pack", "packs")) in \(report.newIndex ?? "no index"), removed \(Format.plural(report.removedIndexes, "old index", "old indexes"))")
            if report.droppedFrames > 0 {
                print("left out of the index: \(Format.plural(report.droppedFrames, "damaged frame", "damaged frames")) (\(Format.plural(report.droppedBlobs, "blob", "blobs"))); "
                      + "the next snapshot of their pages stores them again")
            }
            if report.copiedFrames > 0 {
                print("copied \(Format.plural(report.copiedFrames, "whole frame", "whole frames")) of the damaged \(report.damagedPacks.count == 1 ? "pack" : "packs") into new packs; "
                      + "the damaged \(report.damagedPacks.count == 1 ? "pack is" : "packs are") in no index now, and `storectl snapshot prune` removes \(report.damagedPacks.count == 1 ? "it" : "them")")
            }
        }
        try Finished.check(RepositoryRepair.ending(of: report))
    }
}

struct RepoConvertCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "convert",
        abstract: "Bring every snapshot of an older repository (format 1, or format 2 of layout 1) into a new one.",
        discussion: reflow("""
            The new repository is one `repo init` made. Snapshots keep their ids, times, hosts, source paths and tags; each \
            is unpacked with every check a restore makes, stored, then reassembled from the new repository and compared byte \
            for byte before it counts. The old repository's snapshots are only read. Run it again after an interruption: what \
            was brought over is verified and not written twice. Exit 2 names the snapshots the old repository could not give \
            back whole (the others are converted).
            """))

    @Argument(help: "The repository to convert (a folder, or s3://BUCKET/PREFIX).") var old: String
    @Option(help: "The new repository (made by `storectl repo init`).") var repo: String
    @OptionGroup var password: PasswordOption
    @Option(help: ArgumentHelp("A file whose first line is the old repository's password (format 2 only; default: the new one's).", valueName: "file"))
    var oldPasswordFile: String?
    @Option(help: "Where each snapshot is unpacked on its way (default: TMPDIR).") var scratch: String?
    @Flag(help: "Print the report as JSON.") var json = false

    func run() throws {
        try FileSystem.checkScratch(scratch)
        let progress = TerminalProgress.handler("repo convert", quiet: json)
        var options = RepositoryConvert.Options(source: old, sourcePassword: oldPasswordFile.map { .file($0) } ?? password.source,
                                                target: repo, password: password.source)
        options.scratch = scratch
        let report = try RepositoryConvert.run(options, progress: progress?.1)
        progress?.0.finish()
        if json { print(jsonReport(report)) } else {
            for result in report.converted {
                print("converted \(result.id)  \(Timestamp.iso(result.startedAt))  \(result.host):\(result.source)  added \(Format.bytes(result.addedBytes))\(result.tags.isEmpty ? "" : "  tags \(result.tags.joined(separator: ","))")")
            }
            for id in report.alreadyThere { print("present   \(id)  (brought over by an earlier run; verified again)") }
            for failure in report.failed { print("FAILED    \(failure.id): \(failure.problem)") }
            for note in report.notes { print("note      \(note)") }
            let total = report.converted.count + report.alreadyThere.count
            print("\(report.ok ? "ok" : "INCOMPLETE"): \(Format.plural(total, "snapshot", "snapshots")) of \(report.source) (\(report.sourceKind)) in \(report.target), each verified\(report.failed.isEmpty ? "" : "; \(report.failed.count) not converted")")
        }
        try Finished.check(RepositoryConvert.ending(of: report))
    }
}
