import ArgumentParser
import Foundation
import StoreOps

struct ReplicateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replicate",
        abstract: "Follow stores' -wal into a repository: every commit seen becomes a point to restore (snapshot restore --at).",
        subcommands: [ReplicateFollowCommand.self, ReplicateStatusCommand.self],
        defaultSubcommand: ReplicateFollowCommand.self)
}

struct ReplicateFollowCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "follow",
        abstract: "Follow stores' -wal into a repository: every commit seen becomes a point to restore (snapshot restore --at).",
        discussion: reflow("""
            Runs until SIGTERM or SIGINT (or for --for), then writes what it has read and marks each store's points
            stopped. It reads each store's -wal as a file and holds a read transaction only while it reads new frames:
            it writes nothing to the store, adds no table and runs no checkpoint (it holds the app's checkpoints back only
            for those reads, and while a new base is read). Every
            --sync-interval the commits read are written to the repository as one object per store: a point is
            durable from then on. Where it cannot prove that no commit was missed (the -wal truncated or removed before
            its last frames were read, the store replaced, storectl not running), it takes a new base (an incremental
            snapshot: it costs what changed) and records a gap, which is never listed as a point. Started again, it
            takes up each store's points where they stopped if the -wal still continues them.
            """))

    @Argument(help: "The stores to follow (in WAL mode).") var stores: [String] = []
    @Option(help: "The repository (format 2; a folder or s3://bucket/prefix).") var repo: String?
    @Option(help: "Follow the store of this policy file into its [snapshot] repository with its [replicate] settings (repeatable; instead of STORE and --repo).") var policy: [String] = []
    @OptionGroup var password: PasswordOption
    @Option(parsing: .unconditional, help: "How often new commits are written to the repository (e.g. 1s, 500ms; default 1s).") var syncInterval: String?
    @Option(parsing: .unconditional, help: "How often a new base is taken, bounding what a restore reads (e.g. 1h, the default).") var baseInterval: String?
    @Option(parsing: .unconditional, help: "Merge a chain's segments into one object once the oldest is this old (e.g. 1m, the default; 0 never): a restore reads fewer objects.") var mergeInterval: String?
    @Option(parsing: .unconditional, help: "While a store is idle, confirm this often that no commit came since its last point (e.g. 1m, the default; 0 never): restores answer a time up to the last confirmation.") var heartbeat: String?
    @Option(parsing: .unconditional, help: "Stop after this long (e.g. 10m) instead of waiting for a signal.") var `for`: String?
    @Option(parsing: .unconditional, help: "zstd's level for the pages of bases and milestones (1-19, default 3; segments use 3).") var level: Int?
    @Flag(help: "Make bases at full speed: their hashing and compressing not in the idle CPU class (the app's commits may wait for a core behind them).") var noPace = false
    @Flag(help: "Print the summary as JSON when it stops.") var json = false
    @Flag(help: "Say nothing while following (the summary is still printed at the end).") var quiet = false
    @Option(help: "Rewrite this JSON file every sync interval with each store's figures (for `replicate status`).") var statusFile: String?
    @Option(help: "Write Prometheus metrics into this folder (node_exporter's textfile collector) every sync interval.") var metrics: String?
    @Option(help: "Where commits wait while the repository cannot be written, past 64 MiB in memory (default: TMPDIR).") var spool: String?
    @Option(parsing: .unconditional, help: "The most commits that wait (e.g. 4GiB; default 1GiB); past it they are dropped and a gap recorded.") var spoolLimit: String?

    func validate() throws {
        guard !ValidationGate.off else { return }
        if policy.isEmpty, stores.isEmpty || repo == nil { throw ValidationError("name the stores and --repo, or --policy FILE") }
        if !policy.isEmpty, !stores.isEmpty || repo != nil { throw ValidationError("give --policy or stores with --repo, not both") }
    }

    func run() throws {
        var options: Replicate.Options
        if policy.isEmpty {
            options = Replicate.Options(stores: stores, repository: repo ?? "")
            options.password = password.source
        } else {
            options = try Replicate.Options.from(policies: policy)
            if let given = password.override { options.password = given }
        }
        if let syncInterval { options.syncInterval = try duration(syncInterval, "--sync-interval", allowZero: false) }
        if let baseInterval { options.baseInterval = try duration(baseInterval, "--base-interval", allowZero: false) }
        if let mergeInterval { options.mergeInterval = try duration(mergeInterval, "--merge-interval", allowZero: true) }
        options.duration = try `for`.map { try duration($0, "--for", allowZero: false) }
        if let heartbeat { options.heartbeatInterval = try duration(heartbeat, "--heartbeat", allowZero: true) }
        if let level { options.level = try Compression.zstd.validatedLevel(level) }
        options.pace = !noPace
        if statusFile != nil || metrics != nil { options.outputsNamedIn = nil }
        if let statusFile { options.statusFile = statusFile }
        if let metrics { options.metricsFolder = metrics }
        if let spool { options.spoolFolder = spool }
        if let spoolLimit { options.spoolLimit = try Self.size(spoolLimit, "--spool-limit") }
        let say: @Sendable (String) -> Void = { line in FileHandle.standardError.write(Data("storectl replicate: \(line)\n".utf8)) }
        let started = Date()
        let summary = try Replicate.run(options, events: quiet || json ? nil : say)
        let failure = Self.failure(of: summary)
        for problem in ReplicateJobLog.append(summary, logs: options.jobLogs, start: started, exitCode: failure?.status.rawValue ?? 0, error: failure?.message) {
            FileHandle.standardError.write(Data("storectl: warning: \(problem)\n".utf8))
        }
        if json {
            // One JSON document, success or not: the summary, with the failure's status, message
            // and hint beside it (`ok` false) when the run ends in one.
            print(jsonReport(summary, failure: failure))
        } else {
            printSummary(summary)
        }
        if let failure {
            if json {
                FileHandle.standardError.write(Data("storectl: \(failure)\n".utf8))
                throw Finished(status: failure.status)
            }
            throw failure
        }
    }

    /// How a run that stopped ends: a store never followed (its first base failed: damage, a lock,
    /// a missing file, with the first such store's status, each named), or commits read and never
    /// written; nil when every commit read is in a point.
    static func failure(of summary: Replicate.Summary) -> StoreOpsError? {
        // Status 0: stopped (SIGTERM) while the first base was made, as asked; said, not a failure.
        let unfollowed = summary.stores.filter { $0.notFollowed != nil && $0.notFollowedStatus != 0 }
        if let first = unfollowed.first {
            return StoreOpsError(status: ExitStatus(rawValue: first.notFollowedStatus ?? ExitStatus.failure.rawValue),
                                 unfollowed.map { "never followed \($0.store): \($0.notFollowed ?? "")" }.joined(separator: "; "),
                                 hint: "no commit of \(unfollowed.count == 1 ? "it" : "them") is protected; fix what the message names (`storectl preflight STORE` checks a store) and run again")
        }
        if summary.unwritten > 0 {
            return StoreOpsError(.ioError, "stopped with \(Format.plural(summary.unwritten, "commit", "commits")) read but not written to \(summary.repository): no point holds them",
                                 hint: "the lines above name each store and where its points end; the next run takes the store up from there (a gap, unless the -wal still holds those commits)")
        }
        if summary.kept > 0 {
            return StoreOpsError(.ioError, "stopped with \(Format.plural(summary.kept, "point", "points")) not written to \(summary.repository): kept on this machine (the spool folder's storectl-outbox-*), restores do not see them yet",
                                 hint: "the next `storectl replicate` of the same store into the same repository, with the same spool folder (`--spool`, or its policy's `spool`), writes them first")
        }
        return nil
    }

    private func printSummary(_ summary: Replicate.Summary) {
        for store in summary.stores {
            // Points as `snapshot list` and `replicate status` count them: a base is a point too
            // (point 0 of its chain); "2 points, 1 base" beside the list's "3 points" read as a
            // point lost (a helper trying it as a new user).
            var line = "\(store.store): \(Format.plural(store.points + store.bases.count, "point", "points")) ("
            if !store.bases.isEmpty { line += "\(Format.plural(store.bases.count, "base", "bases")), " }
            line += "\(Format.plural(store.points, "commit", "commits")) in \(Format.plural(store.segments, "segment", "segments")))"
            if !store.gaps.isEmpty { line += ", \(Format.plural(store.gaps.count, "gap", "gaps"))" }
            if store.filesAdded + store.filesRemoved + store.filesNotCarried > 0 {
                line += ", external-data files \(store.filesAdded) added, \(store.filesRemoved) removed"
                if store.filesNotCarried > 0 { line += ", \(store.filesNotCarried) NOT carried (see the warnings)" }
            }
            line += String(format: ", lag p99 %.2f s, max %.2f s", store.p99LagSeconds, store.maxLagSeconds)
            if let sent = store.keptSent, sent > 0 { line += "; \(Format.plural(sent, "point", "points")) an earlier run kept written first" }
            if let kept = store.keptPoints, kept > 0 { line += "; \(Format.plural(kept, "point", "points")) KEPT on this machine, not in the repository yet" }
            if store.notFollowed != nil { line += "; NOT FOLLOWED (below)" }
            print(line)
        }
    }

    static func size(_ text: String, _ option: String) throws -> Int {
        guard let bytes = ByteSize.parse(text) else {
            throw StoreOpsError(.usage, "\(option) \(text.debugDescription) is not a size of at least 4 KiB", hint: "write e.g. 4GiB, 500M or 1G")
        }
        return Int(clamping: bytes)
    }

    private func duration(_ text: String, _ option: String, allowZero: Bool) throws -> TimeInterval {
        switch DurationText.parse(text, allowZero: allowZero) {
        case .success(let value): return value.seconds
        case .failure(let error): throw ValidationError("\(option) \(text) \(error.problem)")
        }
    }
}

struct ReplicateStatusCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Each store's points in the repository and, with --status-file, how a running replicate is doing.")

    @Option(help: "The repository (default: the one --status-file names).") var repo: String?
    @OptionGroup var password: PasswordOption
    @Option(help: "The status file a running `storectl replicate --status-file` rewrites.") var statusFile: String?
    @Option(help: "The store, repository, password and status file of this policy file (as `replicate --policy` follows it; the other options override it).") var policy: String?
    @Option(help: "Only this store (its path, as `snapshot list` shows it).") var store: String?
    @Option(help: "Only the stores followed on this host (a host retired without a clean stop stays STALE: leave it out).") var host: String?
    @Option(parsing: .unconditional, help: "A store whose chain is not stopped and has confirmed nothing (no point, no alive marker) for longer is STALE, exit 2 (default 3m: three heartbeats; 0: never).") var staleAfter: String?
    @Flag(help: "Print the report as JSON.") var json = false

    func run() throws {
        var staleSeconds = ReplicateStatus.defaultStaleAfter
        if let staleAfter {
            switch DurationText.parse(staleAfter, allowZero: true) {
            case .success(let value): staleSeconds = value.seconds
            case .failure(let error): throw ValidationError("--stale-after \(staleAfter) \(error.problem)")
            }
        }
        var (repo, statusFile, store, passwordSource) = (self.repo, self.statusFile, self.store, password.source)
        if let policy {
            // What `replicate --policy` follows: the policy's store into its [snapshot] repository,
            // with its password and its [replicate] status file (an operator's trial: status had
            // no --policy, so every path had to be copied out of the file).
            // Not a job's trust checks (a status run as root on the app's policy file was refused,
            // a review): only where the policy's password_command would run.
            let loaded = try Policy.load(policy)
            if password.override == nil, case .command? = loaded.snapshot?.passwordSource {
                try PolicyTrust.check(policy)
                try PolicyTrust.checkCommand(of: loaded)
            }
            let options = try Replicate.Options.from(loaded: [loaded])
            repo = repo ?? options.repository
            statusFile = statusFile ?? options.statusFile
            store = store ?? options.stores.first
            passwordSource = password.override ?? options.password
        }
        let report = try ReplicateStatus.run(repository: repo, password: passwordSource, statusFile: statusFile, staleAfter: staleSeconds,
                                             filter: try SnapshotFilter.parse(store: store, host: host))
        if json { print(jsonReport(report)) } else { render(report) }
        try Finished.check(ReplicateStatus.ending(of: report))
    }

    private func render(_ report: ReplicateStatus.Report) {
        if let state = report.state {
            let when = report.updatedAt.map { Timestamp.iso($0) } ?? "?"
            let stale = report.gone == true ? ": GONE, its follow lock is free (killed, or its host restarted)"
                : report.stale ? ": STALE, no status written for over a minute (the process is stuck or gone)" : ""
            print("replicate \(state) (pid \(report.pid.map(String.init) ?? "?"), status written \(when))\(stale)")
        }
        if let problem = report.repositoryError {
            print(report.repositorySkipped == true ? "repository not read (\(problem)): the status file's figures only; "
                  + (problem.hasPrefix("no S3 credentials") ? "the bucket's credentials and a password list its points" : "a password (--password-file) lists its points")
                  : "repository NOT READ: \(problem)")
        }
        if report.stores.isEmpty { print("no points in time in \(report.repository)") }
        for store in report.stores {
            // The repository not read: its figures are not known (not "0 points").
            var line = "\(store.store) (\(store.host)): "
            if report.repositoryError == nil {
                line += "\(Format.plural(store.points, "point", "points")), newest \(store.newestPoint.map { Timestamp.iso($0) } ?? "none")"
                line += ", \(Format.plural(store.gaps, "gap", "gaps")), \(Format.plural(store.chains, "chain", "chains"))"
            } else {
                line += "points in the repository not known"
            }
            if store.stale == true, let since = store.unconfirmedSince {
                line += "; STALE: nothing confirmed since \(Timestamp.iso(since)) (\(Format.duration(Date().timeIntervalSince(since))) ago) and its chain is not stopped: "
                    + "its follower is stuck or gone (a follower confirms at least every --heartbeat, 1m by default; one run with --heartbeat 0 says nothing while the store is idle: --stale-after 0)"
            }
            if let live = store.live {
                line += "; this run: \(Format.plural(live.points + live.bases.count, "point", "points"))" + String(format: ", lag p99 %.2f s, max %.2f s, ", live.p99LagSeconds, live.maxLagSeconds)
                line += "\(Format.bytes(live.uploadedBytes)) in \(Format.plural(live.requests, "request", "requests")), \(Format.plural(live.bases.count, "base", "bases")), \(Format.plural(live.gaps.count, "gap", "gaps"))"
                if let why = live.notFollowed { line += "; NOT FOLLOWED: \(why)" }
                if let why = live.gapPending {
                    line += "; A GAP: commits were dropped (\(why)); " + (report.state == "stopped"
                        ? "the run stopped before recording it: the next run records a gap unless the -wal still holds them"
                        : "the next base records it, as soon as the store can be read and the repository written")
                }
                if let why = live.notProtected, store.writtenSince != true, store.baseSince != true {
                    line += "; NOT PROTECTED \(why): " + (report.state == "stopped" ? "the next run makes a base" : "a base is made as soon as the store can be read and the repository written")
                }
                if store.writtenSince == true, (live.keptPoints ?? 0) > 0 || (live.waiting ?? 0) > 0 {
                    // A later run wrote since this status file: what this run kept went first.
                    line += "; when this run stopped, \(Format.plural(live.keptPoints ?? 0, "point was", "points were")) kept on this machine"
                        + ((live.waiting ?? 0) > 0 ? " and \(Format.plural(live.waiting ?? 0, "commit", "commits")) waiting" : "")
                        + "; a later run has written since (newest point \(store.newestPoint.map { Timestamp.iso($0) } ?? "?")), kept points first: `snapshot list --points` shows any gap"
                } else if let kept = live.keptPoints, kept > 0 {
                    line += "; \(Format.plural(kept, "point", "points")) KEPT on this machine, not in the repository yet ("
                        + (live.lastError.map { "writing them failed: \($0); " } ?? "") + "the next write, or the next run, sends them first)"
                }
                if let waiting = live.waiting, waiting > 0, store.writtenSince != true {
                    if report.gone == true {
                        // The status file is as of its last sync: what the dead process wrote after
                        // it is in the repository (the newest point above), not "not durable yet".
                        line += "; \(Format.plural(waiting, "commit was", "commits were")) waiting at its last status (\(report.updatedAt.map { Timestamp.iso($0) } ?? "?")): "
                            + (report.repositoryError == nil ? "the newest point above is the last it wrote" : "whether it wrote them before it died, the repository says")
                    } else if report.state == "stopped" {
                        // The run is over: they will not be written (the next run records a gap
                        // unless the -wal still holds them).
                        line += "; \(Format.plural(waiting, "commit", "commits")) read and NEVER WRITTEN (the run stopped\(live.lastError.map { ": \($0)" } ?? ""))"
                    } else if let error = live.lastError {
                        line += "; \(Format.plural(waiting, "commit", "commits")) read and NOT durable yet (writing them failed: \(error))"
                    } else {
                        line += "; \(Format.plural(waiting, "commit", "commits")) read, not durable yet"
                    }
                }
            }
            print(line)
        }
    }
}
