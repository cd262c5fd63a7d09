import Foundation
import ArgumentParser
import StoreOps

struct SnapshotRestoreCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Restore a snapshot to a new file (--to) or in place of a store (--in-place).",
        discussion: reflow("""
            The snapshot is verified while it is unpacked beside the target and its database checked before anything
            else happens. In place: refused while another process has the store open (unless --force) and when no store
            exists there (unless --create); then a safety snapshot of the current store (tag pre-restore), then one
            journaled swap of the database, its -wal/-shm/-journal and the external-data folder, which a crash never
            leaves half done (the next storectl command, or `storectl recover STORE`, finishes it). The store keeps its
            journal mode (a WAL store comes back in WAL mode). --to writes the snapshot's database as stored: in
            rollback-journal mode, as SQLite's backup API writes a copy, whatever the store's mode (an app opening it in
            WAL mode makes it WAL again).
            """))

    @Option(help: "The snapshot repository.") var repo: String
    @OptionGroup var password: PasswordOption
    @Argument(help: "The snapshot id (or a unique prefix); not with --at.") var id: String?
    @Option(parsing: .unconditional, help: "Restore the point in time recorded by `storectl replicate` at or before this time (RFC 3339, or before now: -5m).") var at: String?
    @Option(help: "With --at: the store whose points (when the repository has points of several). In place: the store the snapshot is of, to put another store's snapshot there on purpose (otherwise refused, 64).") var store: String?
    @Option(help: "With --store: the host that followed it, or whose snapshot it is (default: this one).") var host: String?
    @Option(help: "Restore to this new file.") var to: String?
    @Option(help: "Restore in place of this store.") var inPlace: String?
    @Flag(help: "In place: go ahead although the store is open; move a damaged store aside instead of snapshotting it.") var force = false
    @Flag(help: "In place: restore although no store exists at that path (otherwise exit 66).") var create = false
    @Flag(help: "Wait for locks, and (in place) up to a minute for the app to close the store, instead of exiting 75.") var wait = false
    @Option(parsing: .unconditional, help: "In place: seconds to wait for the store's write lock, for the app to close the store (--wait), and after the swap for the app's connections on the replaced store to let go (with --force at most 10 s for one that keeps the store open).") var timeout: Double = 60
    @Flag(help: "In place, beside a running app: write the snapshot into the store through SQLite under its write lock (as sqlite3's .restore does) instead of replacing its files; the app keeps its connections and sees the restored content at its next transaction. WAL stores without external data; the -wal grows to the store's size.") var live = false
    @Flag(help: "Run quick_check on the restored database even when the snapshot's source passed it when the snapshot was taken (every page is checked against its content id either way).") var check = false
    @Flag(help: "Print the result as JSON.") var json = false

    func validate() throws {
        guard !ValidationGate.off else { return }
        if (to == nil) == (inPlace == nil) { throw ValidationError("pass exactly one of --to PATH or --in-place STORE") }
        if (id == nil) == (at == nil) { throw ValidationError("pass a snapshot id or --at TIME (not both)") }
        if live, inPlace == nil { throw ValidationError("--live restores in place: pass --in-place STORE") }
        if live, force { throw ValidationError("--live goes ahead beside the app by itself: not with --force") }
        if live, create { throw ValidationError("--live writes into an existing store: not with --create") }
    }

    func run() throws {
        let target: SnapshotRestore.Target = to.map { .file($0) } ?? .inPlace(inPlace!)
        var options = SnapshotRestore.Options(repository: repo, id: id ?? "", target: target, force: force, wait: wait)
        options.timeout = timeout
        options.password = password.source
        options.at = try at.map { try PointRestore.parseTime($0) }
        options.pointStore = store
        options.pointHost = host
        options.create = create
        options.check = check
        options.live = live
        let progress = TerminalProgress.handler("snapshot restore", quiet: json)
        let result = try SnapshotRestore.run(options, progress: progress?.1)
        progress?.0.finish()
        if let signal = result.signalAfterCommit {
            FileHandle.standardError.write(Data("storectl: \(signal) came while the snapshot was being committed into the store: too late to stop; the restore was finished and read back\n".utf8))
        }
        if json { print(jsonReport(result)); return }
        var line = "restored \(result.id) to \(result.restoredTo)"
        if let point = result.point, let time = result.pointTime {
            // A time relative to now is said as the time it was (`-5m` was resolved to a time the
            // operator never saw: a trial).
            var asked = ""
            if let at, let resolved = options.at {
                let word = at.trimmingCharacters(in: .whitespaces).lowercased()
                if resolved == PointRestore.latest { asked = "; --at latest: the last time its points are confirmed" }
                else if word == "now" || word.hasPrefix("-") { asked = "; --at \(at) was \(Timestamp.iso(resolved))" }
            }
            line = "restored point \(point) (\(Timestamp.iso(time))\(asked)) to \(result.restoredTo)"
        }
        if result.throughSQLite == true {
            line += " through SQLite (the app's connections stay open; its commits waited up to \(Format.duration(result.writeLockSeconds ?? 0)); the -wal holds \(Format.bytes(result.walBytes ?? 0))\(result.checkpointed == true ? ", every frame of it checkpointed" : ", not every frame of it checkpointed yet: the app's checkpoints finish it"))"
        }
        if result.externalFiles > 0 { line += " with \(Format.plural(result.externalFiles, "external file", "external files"))" }
        if let safety = result.safetySnapshot {
            line += "; the previous store is snapshot \(safety) (tag pre-restore\(result.safetySnapshotPoint.map { "; made from replicate's point \($0)" } ?? ""))"
        }
        if !result.movedAside.isEmpty { line += "; the previous files were kept at \(result.movedAside.joined(separator: ", "))" }
        if !result.keptUnexpected.isEmpty { line += "; files found in the way (no store's) were kept at \(result.keptUnexpected.joined(separator: ", "))" }
        if !result.removedSidecars.isEmpty { line += "; removed \(result.removedSidecars.map { String($0.split(separator: "-").last ?? "") }.joined(separator: ", "))" }
        print(line)
        if result.pointThinned == true, let time = result.pointTime {
            print("note: the time asked falls where retention thinned the store's points (one commit a minute kept, or only a chain's base): commits after \(Timestamp.iso(time)) and by then may not be kept")
        }
        if let note = result.externalFilesNote { print("note: \(note)") }
        if let pid = result.replacedStillOpenBy {
            if result.replacedStillOpenDuringSwap == true {
                print("WARNING: pid \(pid) opened the store during the swap and still had the replaced file open when the restore let go of it: restart it now (its next statement would read the replaced file with the restored store's -wal and could damage the restored store)")
            } else {
                print("WARNING: pid \(pid) still had the replaced store open when the restore let go of its lock: its commits from now on go to the replaced files; restart it")
            }
        }
    }
}
