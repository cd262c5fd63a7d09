import ArgumentParser
import Foundation
import StoreOps

struct MigrateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Staged migrations: lock, preflight, snapshot, apply, verify, and roll back on failure.",
        discussion: reflow("""
            `storectl migrate STORE ...` is `storectl migrate apply STORE ...` (apply is the default subcommand);
            `storectl migrate status STORE --migrations DIR` shows what is applied and what is pending.

            Exit 0 migrated (or up to date), 1 a migration failed (the store is at the last migration that fully applied
            and verified; the rollback command is printed; when the first one failed, nothing was committed and nothing is
            rolled back: 1, or 74 for a full disk), 3 failed or stopped and rolled back, 4 the rollback failed,
            75 locked, or another process has the store open (close the app, or --force).
            """),
        subcommands: [MigrateApplyCommand.self, MigrateStatusCommand.self],
        defaultSubcommand: MigrateApplyCommand.self)
}

struct MigrateApplyCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(commandName: "apply", abstract: "Apply the pending migrations (the default).")

    @Argument(help: "The store.") var store: String
    @Option(help: "The folder of NNNN_name.sql migrations.") var migrations: String
    @Option(help: "The snapshot repository for the pre-migrate snapshot.") var repo: String
    @OptionGroup var password: PasswordOption
    @Option(parsing: .unconditional, help: "Migrate up to this version.") var to: Int?
    @Flag(help: "On a failure after a migration committed, restore the pre-migrate snapshot (exit 3); when nothing was committed there is nothing to roll back (exit 1).") var rollbackOnFailure = false
    @Flag(help: "Print the plan and change nothing.") var dryRun = false
    @Option(help: "A kill-switch file: when it exists, stop at the next safe point and roll back.") var killSwitch: String?
    @Flag(help: "After an interrupted migration: keep the store as it is and go on.") var resume = false
    @Flag(help: "Migrate although another process has the store open (a rollback discards its later writes).") var force = false
    @Flag(help: "Wait for the store's job lock, and up to --timeout for the app to close the store, instead of exiting 75.") var wait = false
    @Flag(help: "Verify with integrity_check of the whole file, not quick_check of the tables the migrations touched.") var fullCheck = false
    @Option(help: "Where --dry-run makes its two scratch copies of the store (default: TMPDIR).") var scratch: String?
    @Option(parsing: .unconditional, help: "Seconds to wait for the store's write lock (a commit of the app's under way), and for the app's connections on the replaced store to give up after a rollback's swap.") var timeout: Double = 30
    @Option(parsing: .unconditional, help: "With --dry-run: rehearse on the point `storectl replicate` recorded of the store at or before this time (RFC 3339, or -5m), in --repo, not on a copy of the store as it is.") var at: String?
    @Flag(help: "Print the report as JSON.") var json = false

    func run() throws {
        try FileSystem.checkScratch(scratch)
        var options = Migrate.Options(store: store, migrations: migrations, repository: repo, to: to, rollbackOnFailure: rollbackOnFailure,
                                      dryRun: dryRun, killSwitch: killSwitch, resume: resume)
        options.force = force
        options.wait = wait
        options.timeout = timeout
        options.password = password.source
        options.fullCheck = fullCheck
        options.scratch = scratch
        options.dryRunAt = try at.map { try PointRestore.parseTime($0) }
        let progress = TerminalProgress.handler("migrate", quiet: json)
        let report = try Migrate.run(options, progress: progress?.1)
        progress?.0.finish()
        print(json ? jsonReport(report) : Self.render(report))
        // A folder with no migration in it and a store with none applied: "up to date at version 0"
        // alone read as success (a wrong --migrations, files named otherwise).
        if report.plan.pending.isEmpty, report.plan.applied.isEmpty {
            FileHandle.standardError.write(Data("storectl: note: \(migrations) holds no migrations (NNNN_name.sql files), and \(store) has none applied\n".utf8))
        }
        try Finished.check(report.ending)
        // A rehearsal that failed, or changed what the migrations do not declare: the real run would fail.
        if report.dryRun, report.undeclared?.isEmpty == false { throw Finished(status: .checksFailed) }
    }

    static func render(_ report: Migrate.Report) -> String {
        var lines: [String] = []
        let plan = report.plan
        switch report.result {
        case "up to date":
            if let point = report.rehearsedPoint {
                return "\(report.store) at point \(point) is up to date at version \(plan.current): nothing to rehearse"
            }
            return "\(report.store) is up to date at version \(plan.current)" + (report.resumeVerified.map { "; \($0)" } ?? "")
        case "planned":
            lines.append("plan for \(report.store): version \(plan.current) -> \(plan.target) (dry run: nothing changed)")
            for migration in plan.pending {
                lines.append("  \(String(format: "%04d", migration.version))_\(migration.name)  sha256 \(migration.checksum.prefix(12))…  "
                             + "\(migration.statements) statement\(migration.statements == 1 ? "" : "s")"
                             + (migration.checks > 0 ? ", \(migration.checks) check\(migration.checks == 1 ? "" : "s")" : "")
                             + (migration.noTransaction ? ", no transaction" : ""))
                for warning in migration.warnings { lines.append("    warning: \(warning)") }
            }
            if let bytes = report.snapshotEstimateBytes {
                lines.append("  a pre-migrate snapshot (about \(Format.bytes(bytes)) before compression) goes to \(report.repository)")
            }
            if let point = report.rehearsedPoint {
                lines.append("  rehearsed on point \(point)\(report.rehearsedPointTime.map { " (\(Timestamp.iso($0)))" } ?? "") of \(report.repository)")
            }
            if let failure = report.rehearsalFailure {
                lines.append("  FAILS ON A COPY: \(failure)")
                if let hint = report.failureHint { lines.append("  hint: \(hint)") }
                lines.append(report.rehearsalFailedAtVerify == true
                             ? "  the real run would roll back to its snapshot at its verify stage (exit 3); the store is unchanged"
                             : "  the real run would stop there (with --rollback-on-failure it rolls back to its snapshot, exit 3); the store is unchanged")
            }
            if let changes = report.changes { lines.append("  on a copy it changes: \(changes.text)") }
            for outside in report.undeclared ?? [] { lines.append("  NOT DECLARED: \(outside)") }
            for name in report.unknownDeclared ?? [] { lines.append("  DECLARED, NOT IN THE STORE: \(name)") }
            for reason in report.wouldStop ?? [] { lines.append("  NOW A RUN WOULD NOT GO: \(reason)") }
            return lines.joined(separator: "\n")
        default:
            break
        }
        lines.append("migrate \(report.store): version \(plan.current) -> \(plan.target)")
        if let resumed = report.resumeVerified { lines.append("  resumed: \(resumed)") }
        if let snapshot = report.snapshot {
            lines.append("  snapshot \(snapshot) (pre-migrate, checked when taken\(report.snapshotPoint.map { "; made from replicate's point \($0), the store as it was" } ?? ""))")
        }
        for applied in report.applied {
            lines.append("  applied \(String(format: "%04d", applied.version))_\(applied.name) in \(Format.duration(applied.seconds))")
        }
        if let changes = report.changes {
            let mixed = report.othersWrote == true && report.attributed != true
            lines.append("  changed: \(changes.text == "no change" ? "nothing (no row, no schema)" : changes.text)" + (mixed ? " (with what other processes wrote during the run)" : ""))
        }
        if let others = report.others { lines.append("  other processes changed meanwhile (not the migrations'): \(others.text)") }
        if report.othersWrote == true, report.attributed != true {
            for outside in report.undeclared ?? [] { lines.append("  not declared, perhaps another process's: \(outside)") }
        }
        if let checked = report.checked, !checked.isEmpty { lines.append("  checked: \(checked.joined(separator: ", "))") }
        if let failure = report.failure { lines.append("  FAILED: \(failure)") }
        if let unchecked = report.declarationsUnchecked { lines.append("  NOT CHECKED: \(unchecked)") }
        if let hint = report.failureHint { lines.append("  hint: \(hint)") }
        if let rollback = report.rollback {
            if rollback.error == nil {
                lines.append("  rolled back to \(rollback.snapshotId) in \(Format.duration(rollback.seconds)); the store is the pre-migration snapshot (checked before the swap)")
                if let pid = rollback.replacedStillOpenBy {
                    lines.append("  WARNING: pid \(pid) still had the replaced store open when the rollback let go of its lock (--timeout); "
                                 + "what it commits from now on goes to the kept failed state: restart it")
                }
                if let kept = rollback.failedStateKeptAt {
                    lines.append("  the failed state is kept at \(kept)")
                    // What the app committed during the run is there, not in the restored store.
                    if report.othersWrote == true {
                        lines.append("  WARNING: another process committed to the store during the run"
                                     + (report.others.map { " (\($0.text))" } ?? "") + "; those commits are in the failed state kept at \(kept), not in the restored store, "
                                     + "and an app that keeps the store open goes on committing there until it opens the store again: restart it now")
                    }
                }
            } else {
                lines.append("  ROLLBACK FAILED: \(rollback.error!)")
                if rollback.storeUntouched == true {
                    lines.append("  the rollback did not touch the store: it is at version \(rollback.versionNow.map(String.init) ?? "?"), as the failed run left it")
                    lines.append("  the pre-migrate snapshot is \(rollback.snapshotId) in \(report.repository); \(rollback.advice ?? "once the cause is fixed,") go back with:")
                    lines.append("    storectl rollback \(report.store) --repo \(report.repository) --to \(rollback.snapshotId)")
                } else {
                    lines.append("  the good copy is snapshot \(rollback.snapshotId) in \(report.repository); restore it with:")
                    lines.append("    storectl snapshot restore --repo \(report.repository) \(rollback.snapshotId) --in-place \(report.store) --force")
                }
            }
        }
        if report.nothingCommitted == true {
            lines.append("  nothing was committed: the store is as it was before this run (no rollback was needed); the run's journal is removed")
        }
        if let command = report.rollbackCommand {
            lines.append("  the store is at the last migration that fully applied and verified; to go back to before this run:")
            lines.append("    \(command)")
        }
        if !report.stages.isEmpty { lines.append("  stages: " + report.stages.map { "\($0.name) \(Format.duration($0.seconds))" }.joined(separator: ", ")) }
        lines.append("result: \(report.result)")
        return lines.joined(separator: "\n")
    }
}

struct MigrateStatusCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Applied, pending and drifted migrations.")

    @Argument(help: "The store.") var store: String
    @Option(help: "The folder of NNNN_name.sql migrations.") var migrations: String
    @Flag(help: "Print as JSON.") var json = false

    func run() throws {
        let result = try MigrationStatus.run(store: store, migrations: migrations)
        if json { print(jsonReport(result)); return }
        let plan = result.plan
        print("\(FileSystem.absolute(store)): version \(plan.current)")
        for entry in plan.applied where !plan.missingFiles.contains(entry.version) {
            print("  applied  \(String(format: "%04d", entry.version))_\(entry.name)  \(Timestamp.iso(entry.appliedAt))  snapshot \(entry.snapshotId ?? "-")")
        }
        for migration in plan.pending { print("  pending  \(String(format: "%04d", migration.version))_\(migration.name)") }
        for drift in plan.drifted { print("  DRIFTED  \(drift)") }
        for missing in plan.missing { print("  MISSING  \(missing)") }
        if !plan.blockers.isEmpty {
            print("  (migrate refuses to run until the folder and the store's history agree)")
        }
        if let journal = result.interrupted { print("  INTERRUPTED: \(journal.advice)") }
        try Finished.check(result.ending)
    }
}

struct RollbackCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "rollback",
        abstract: "Restore the state before a migration (the newest pre-migrate snapshot, or --to ID).",
        discussion: "A safety snapshot of the current state is taken first (tag pre-restore). After an interrupted migration, its snapshot is the default.")

    @Argument(help: "The store.") var store: String
    @Option(help: "The snapshot repository.") var repo: String
    @OptionGroup var password: PasswordOption
    @Option(help: "The snapshot to restore (id or unique prefix).") var to: String?
    @Option(parsing: .unconditional, help: "Instead: the point in time `storectl replicate` recorded of the store at or before this time (RFC 3339, or -5m).") var at: String?
    @Flag(help: "Go ahead although another process has the store open.") var force = false
    @Flag(help: "Wait for locks, and up to a minute for the app to close the store, instead of exiting 75.") var wait = false
    @Flag(help: "Beside the running app: write the snapshot into the store through SQLite under its write lock (as `snapshot restore --in-place --live`) instead of replacing its files. WAL stores without external data.") var live = false
    @Flag(help: "Print the result as JSON.") var json = false

    func validate() throws {
        guard !ValidationGate.off else { return }
        if to != nil, at != nil { throw ValidationError("give --to ID or --at TIME, not both") }
        if live, force { throw ValidationError("--live goes ahead beside the app by itself: not with --force") }
    }

    func run() throws {
        if let to, let point = SnapshotID.pointLabelGiven(to, repository: repo) { throw point }
        var options = Rollback.Options(store: store, repository: repo, to: to, force: force, wait: wait)
        options.password = password.source
        options.live = live
        options.at = try at.map { try PointRestore.parseTime($0) }
        // Killed before it says what it did, the next rollback must know it finished: its intent
        // file goes once the output is out (an error: the library kept or removed it).
        options.keepsIntentUntilSaid = true
        let progress = TerminalProgress.handler("rollback", quiet: json)
        let result = try Rollback.run(options, progress: progress?.1)
        defer { fflush(nil); Rollback.said(store: store) }
        progress?.0.finish()
        if let signal = result.signalAfterCommit {
            FileHandle.standardError.write(Data("storectl: \(signal) came while the rollback was being committed into the store: too late to stop; it was finished and read back\n".utf8))
        }
        if json { print(jsonReport(result)); return }
        if result.interruptedRunCommittedNothing {
            print("nothing to roll back: \(FileSystem.absolute(store)) is at version \(result.version), where the interrupted migration started (none of its migrations is in it); "
                  + "the interrupted migration is cleared; to restore its snapshot anyway: --to \(result.interruptedRunSnapshot ?? "ID")")
            return
        }
        if result.earlierRunFinished {
            print("already rolled back: \(FileSystem.absolute(store)) is at version \(result.version); an earlier rollback to snapshot \(result.restored ?? "-") "
                  + "was stopped after it put that snapshot back, before it said so; nothing more was rolled back (to undo the run before as well, run rollback again)")
            return
        }
        if result.nothingToRollBack {
            print("nothing to roll back: no migration has been applied to \(FileSystem.absolute(store)) (version 0); to restore a snapshot anyway: --to ID "
                  + "(`storectl snapshot list --repo \(repo)` lists them)")
            return
        }
        print("rolled back \(FileSystem.absolute(store)) to \(at == nil ? "snapshot" : "point") \(result.restored ?? "-")"
              + (result.restoredPointTime.map { " at \(Timestamp.iso($0))" } ?? "") + " (version \(result.version)); "
              + "the state before the rollback is snapshot \(result.safetySnapshot ?? "-")"
              + (result.safetySnapshotPoint.map { " (made from replicate's point \($0))" } ?? "")
              + (result.throughSQLite == true ? "; written through SQLite (the app's connections stay open; its commits waited up to \(Format.duration(result.writeLockSeconds ?? 0)))" : "")
              + (result.clearedInterruptedMigration ? "; the interrupted migration is cleared" : ""))
    }
}
