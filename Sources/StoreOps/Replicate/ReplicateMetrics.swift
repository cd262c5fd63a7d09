import Foundation

/// `storectl replicate`'s Prometheus metrics for node_exporter's textfile collector: one file per
/// store (`storectl-<store name>-<short hash of its path>-replicate.prom`), replaced atomically
/// every sync interval.
public enum ReplicateMetrics {
    public static func file(folder: String, store: String) -> String {
        let name = ((FileSystem.name(of: store) as NSString).deletingPathExtension).map { $0.isLetter || $0.isNumber ? $0 : "_" }
        return (folder as NSString).appendingPathComponent("storectl-\(String(name))-\(Hashing.sha256(Data(store.utf8)).prefix(8))-replicate.prom")
    }

    static func write(_ store: Replicate.StoreSummary, up: Bool, folder: String) throws {
        let labels = "{store=\"\(Metrics.escape(store.store))\"}"
        let metrics: [(String, String, String, Double)] = [
            ("storectl_replicate_up", "gauge", "1 while storectl replicate follows the store, 0 once it stopped.", up ? 1 : 0),
            ("storectl_replicate_last_durable_timestamp_seconds", "gauge", "When the newest durable point was the store's state (Unix time).",
             store.lastDurable?.timeIntervalSince1970 ?? 0),
            ("storectl_replicate_lag_p99_seconds", "gauge", "99th percentile of the time from seeing a commit to its point being durable.", store.p99LagSeconds),
            ("storectl_replicate_lag_max_seconds", "gauge", "The longest time from seeing a commit to its point being durable.", store.maxLagSeconds),
            ("storectl_replicate_points_total", "counter", "Points made durable by this run.", Double(store.points)),
            ("storectl_replicate_segments_total", "counter", "Segments written by this run.", Double(store.segments)),
            ("storectl_replicate_digests_total", "counter", "Digests written by this run (what a restore reads instead of the points they span).", Double(store.digests)),
            ("storectl_replicate_milestones_total", "counter", "Milestones written by this run (snapshots of a chain's state a restore starts from).", Double(store.milestones)),
            ("storectl_replicate_bases_total", "counter", "Bases (incremental snapshots) taken by this run.", Double(store.bases.count)),
            ("storectl_replicate_gaps_total", "counter", "Gaps recorded by this run (continuity could not be proven).", Double(store.gaps.count)),
            ("storectl_replicate_uploaded_bytes_total", "counter", "Bytes written to the repository by this run.", Double(store.uploadedBytes)),
            ("storectl_replicate_requests_total", "counter", "Requests to the repository by this run (writes, and the read-backs of merges and digests).", Double(store.requests)),
            ("storectl_replicate_kept_points", "gauge", "Points kept on this machine (the outbox in the spool folder) because the repository did not take them: restores do not see them yet.",
             Double(store.keptPoints ?? 0)),
            ("storectl_replicate_write_failing", "gauge", "1 while writing points to the repository fails (a full disk, a server away): what is read waits in memory or in the outbox, and no restore sees it.",
             store.lastError != nil ? 1 : 0),
            ("storectl_replicate_unwritten_commits", "gauge", "Commits read and not durable yet (in memory: not in the repository, nor in the outbox).", Double(store.waiting ?? 0)),
            ("storectl_replicate_chain_broken", "gauge", "1 while the store's chain is broken (a gap found, or its -wal truncated before its last commit was read) and no base has taken it up: what the app commits is in no point.",
             store.gapPending != nil || store.notProtected != nil ? 1 : 0),
        ]
        var text = ""
        for (name, type, help, value) in metrics {
            text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name)\(labels) \(Metrics.format(value))\n"
        }
        let pending = try PendingFile(finalPath: file(folder: folder, store: store.store), label: "replicate.metrics")
        try pending.write(Data(text.utf8))
        chmod(pending.tempPath, 0o644)
        try pending.commit(replacing: true)
    }
}

/// `storectl replicate status`: each store's points as the repository holds them and, from the
/// status file a running `replicate` rewrites, how it is doing.
public enum ReplicateStatus {
    public struct Store: Sendable, Codable {
        public var store: String
        public var host: String
        public var points: Int
        public var newestPoint: Date?
        public var gaps: Int
        public var chains: Int
        /// From the status file, when given and about this store.
        public var live: Replicate.StoreSummary?
        /// The status file is of a stopped run whose kept points a later run (without this status
        /// file) has written since (`keptWritten`): its "kept" and "waiting" figures are history.
        public var writtenSince: Bool?
        /// The status file is of a stopped run, and a later run has made a base of the store since
        /// (a chain beginning after the file was written): what it said was NOT PROTECTED is
        /// protected again (a review: the later run records a gap from the stopped run's last
        /// point, so `writtenSince` stays false, and the old file said exit 2 for ever).
        public var baseSince: Bool?
        /// The newest chain is not stopped and nothing confirmed it since this time (its last
        /// point or alive marker): its follower is running, or gone.
        public var unconfirmedSince: Date?
        /// `unconfirmedSince` is older than `--stale-after`, and no status file speaks for the
        /// store: its follower is stuck or gone (it said "0 gaps", exit 0, eleven minutes after
        /// the follower was killed: a trial's disaster-recovery drill).
        public var stale: Bool?
    }

    public struct Report: Sendable, Codable {
        public var repository: String
        public var stores: [Store]
        /// From the status file: following or stopped, its pid, and when it was last written.
        public var state: String?
        public var pid: Int32?
        public var updatedAt: Date?
        /// The status file was last written longer ago than a few sync intervals: the process is
        /// probably gone (killed) without saying so.
        public var stale: Bool = false
        /// Set with `stale`: the process's follow locks on this host are free (it is gone, not
        /// only slow to write).
        public var gone: Bool?
        /// The repository could not be read (the status file's figures are shown without it);
        /// the command ends with `repositoryStatus` (74 unreachable, 77 a wrong password, …).
        public var repositoryError: String?
        public var repositoryStatus: Int32?
        /// No password was to be had and the repository was not named (`--status-file` alone):
        /// the status file's figures only, not a failure.
        public var repositorySkipped: Bool?
    }

    /// How `replicate status` ends: the repository's read error's status (74 unreachable, …);
    /// else 2 when the status file shows a follower that is gone (STALE), a store it never
    /// followed, a gap no base has recorded yet, or a stopped run that left commits unwritten; else 0.
    public static func ending(of report: Report) -> Ending {
        if let problem = report.repositoryError, report.repositorySkipped != true {
            return Ending(.failed, error: StoreOpsError(status: ExitStatus(rawValue: report.repositoryStatus ?? ExitStatus.ioError.rawValue), problem,
                                                        hint: "the figures above are the status file's; check that the repository can be read"))
        }
        var problems: [String] = []
        var writeFailures = 0   // of `problems`: a follower whose writes fail (the hint differs)
        if report.stale {
            problems.append("the replicate process (pid \(report.pid.map(String.init) ?? "?")) " + (report.gone == true ? "is gone" : "has not written its status for over a minute"))
        }
        for store in report.stores where store.stale == true {
            let since = store.unconfirmedSince.map { "\(Timestamp.iso($0)) (\(Format.duration(Date().timeIntervalSince($0))) ago)" } ?? "?"
            problems.append("\(store.store) (host \(store.host)): no point or alive marker since \(since), and its chain is not stopped: its follower is stuck or gone")
        }
        for store in report.stores {
            guard let live = store.live else { continue }
            if live.notFollowed != nil { problems.append("\(store.store) is not followed") }
            if store.writtenSince == true { continue }
            // A gap found and no base after it yet: what the app commits is in no point until one
            // is made (a trial: a store moved away, status 0 "following" for a minute and more).
            if let why = live.gapPending, report.state != "stopped", live.notFollowed == nil {
                problems.append("\(store.store): a gap (\(why)): its commits are in no point until a new base records it")
            }
            if let why = live.notProtected, store.baseSince != true, live.notFollowed == nil, live.gapPending == nil || report.state == "stopped" {
                problems.append("\(store.store): NOT protected \(why)")
            }
            // Writing fails while it follows (the repository's disk full, its server away): what is
            // read waits in memory or in the outbox, and no restore sees it. Said and exit 2 (it
            // was 0 with "NOT durable yet", and the metrics green: a trial).
            if report.state == "following", let error = live.lastError {
                writeFailures += 1
                let held = [live.waiting.flatMap { $0 > 0 ? Format.plural($0, "commit", "commits") + " in memory only" : nil },
                            live.keptPoints.flatMap { $0 > 0 ? Format.plural($0, "point", "points") + " kept on this machine" : nil }].compactMap { $0 }
                problems.append("\(store.store): writing to the repository fails (\(error))" + (held.isEmpty ? "" : ": " + held.joined(separator: " and ") + ", not in the repository"))
            }
            if report.state == "stopped", let waiting = live.waiting, waiting > 0 {
                problems.append("\(store.store): \(Format.plural(waiting, "commit was", "commits were")) read and never written")
            }
            if report.state == "stopped", let kept = live.keptPoints, kept > 0 {
                problems.append("\(store.store): \(Format.plural(kept, "point is", "points are")) kept on this machine, not in the repository (the next run writes them first)")
            }
        }
        guard !problems.isEmpty else { return .ok }
        let hint = writeFailures == problems.count
            ? "make the repository writable again (free its disk, bring its server back): the follower retries and sends what it holds first"
            : "start it again (`systemctl restart` its unit, or `storectl replicate`); commits since it stopped are in no point"
                + (writeFailures > 0 ? "; where writing fails, make the repository writable again" : "")
        return Ending(.failed, error: StoreOpsError(.checksFailed, problems.joined(separator: "; "), hint: hint))
    }

    /// - Parameter repository: nil: the one the status file names (the repository it follows into).
    /// - Parameter staleAfter: a store no status file speaks for whose newest chain is not stopped
    ///   and has confirmed nothing for longer is stale (0: never).
    public static func run(repository: String?, password: PasswordSource, statusFile: String?, staleAfter: TimeInterval = defaultStaleAfter,
                           filter: SnapshotFilter = .all, now: Date = Date()) throws -> Report {
        var live: Replicate.Summary?
        if let statusFile {
            guard let data = FileManager.default.contents(atPath: statusFile) else {
                throw StoreOpsError(.noInput, "no status file at \(statusFile)", hint: "pass the --status-file storectl replicate writes")
            }
            do { live = try JSON.decoder().decode(Replicate.Summary.self, from: data) } catch {
                throw StoreOpsError(.badData, "\(statusFile) is not a storectl replicate status file (\(JSON.describe(error)))",
                                    hint: "pass the file a running `storectl replicate --status-file FILE` writes, or --repo alone for what the repository holds")
            }
        }
        guard let location = repository ?? live?.repository else {
            throw StoreOpsError(.usage, "name the repository: --repo, or --status-file of a running replicate (it names its repository)",
                                hint: "storectl replicate status --repo DIR [--status-file FILE]")
        }
        let opened: PagedRepository
        let stores: [StorePoints]
        var unmatched: StoreOpsError?
        do {
            opened = try PagedRepository.open(at: location, password: password)
            stores = try StorePoints.list(opened, filter: filter)
            // A --store or --host that matches nothing, where the repository holds points: 66
            // naming them (it said "no points in time", exit 0: a health check of a mistyped
            // store never alerts), as `snapshot list --points` and a restore say.
            if stores.isEmpty, filter.host != nil || filter.path != nil,
               !(live?.stores ?? []).contains(where: { filter.matches(host: ProcessInfo.processInfo.hostName, path: $0.store) }) {
                let all = try StorePoints.list(opened)
                if !all.isEmpty {
                    let named = [filter.path.map { "store \($0)" }, filter.host.map { "host \($0)" }].compactMap { $0 }.joined(separator: " and ")
                    unmatched = StoreOpsError(.noInput, "\(opened.location) holds no points of \(named); its points are of "
                                        + Format.list(all.map { "\($0.store) (host \($0.host))" }.sorted()),
                                        hint: "check --store and --host (as `storectl snapshot list --repo \(opened.location) --points` shows them)")
                }
            }
        } catch let error as StoreOpsError where live != nil {
            // Unreachable, no password, not readable by this user: what the running replicate
            // said is what an operator needs now; the repository's error decides the exit, unless
            // it was not asked for (--status-file alone) and no password was to be had.
            var report = Report(repository: location, stores: (live?.stores ?? []).map {
                Store(store: $0.store, host: ProcessInfo.processInfo.hostName, points: 0, newestPoint: $0.lastDurable, gaps: $0.gaps.count, chains: 0, live: $0)
            }, state: live?.state, pid: live?.pid, updatedAt: live?.updatedAt)
            report.repositoryError = error.message
            report.repositoryStatus = error.status.rawValue
            // Nor S3 credentials (a monitoring check of an S3 repository's follower has none).
            if repository == nil, error.status == .usage, error.message.hasPrefix("no password") || error.message.hasPrefix("no S3 credentials") {
                report.repositorySkipped = true
            }
            if let live, live.state == "following" {
                let (stale, gone) = staleness(live, repositoryID: live.repositoryID, now: now)
                report.stale = stale
                report.gone = gone ? true : nil
            }
            return report
        }
        if let unmatched { throw unmatched }
        var report = Report(repository: opened.location, stores: stores.map { entry in
            // The status file is this host's follower's: another host's store of the same path
            // (a fleet) is not the one it speaks for (a review: its live figures hid that store's STALE).
            let followed = entry.host == ProcessInfo.processInfo.hostName ? live?.stores.first { $0.store.isExactly(entry.store) } : nil
            let covered = entry.spans.filter { $0.kind == "covered" || $0.kind == "thinned" }   // a thinned chain is a chain (repo check counts it)
            let newest = entry.newestPoint ?? covered.last?.to
            return Store(store: entry.store, host: entry.host, points: entry.points, newestPoint: newest,
                         gaps: entry.spans.filter { $0.kind == "gap" }.count, chains: Set(covered.compactMap(\.chain)).count,
                         live: followed,
                         writtenSince: live?.state == "stopped" && Self.keptWritten(entry, since: followed?.lastDurable, stopped: live?.updatedAt) ? true : nil,
                         baseSince: live.map { live in live.state == "stopped" && covered.contains { $0.from > live.updatedAt } } == true ? true : nil)
        }, state: live?.state, pid: live?.pid, updatedAt: live?.updatedAt)
        for index in report.stores.indices {
            let entry = stores.first { $0.store.isExactly(report.stores[index].store) && $0.host == report.stores[index].host }
            guard let open = entry?.spans.last(where: { $0.kind == "unconfirmed" }) else { continue }
            report.stores[index].unconfirmedSince = open.from
            if report.stores[index].live == nil, staleAfter > 0, now.timeIntervalSince(open.from) > staleAfter {
                report.stores[index].stale = true
            }
        }
        // A store the process follows that has no point yet (its first base failed) is listed too.
        for store in live?.stores ?? [] where !report.stores.contains(where: { $0.store.isExactly(store.store) && $0.host == ProcessInfo.processInfo.hostName })
            && filter.matches(host: ProcessInfo.processInfo.hostName, path: store.store) {
            report.stores.append(Store(store: store.store, host: ProcessInfo.processInfo.hostName, points: 0, newestPoint: nil, gaps: 0, chains: 0, live: store))
        }
        if let live, live.state == "following" {
            let (stale, gone) = staleness(live, repositoryID: opened.config.id, now: now)
            report.stale = stale
            report.gone = gone ? true : nil
        }
        return report
    }

    /// Three heartbeats (1 m by default): a follower confirms at least that often, with a point or an alive marker.
    public static let defaultStaleAfter: TimeInterval = 180

    /// Whether what a stopped run kept (its commits after `lastDurable`, up to its stop) is in the
    /// repository now: a point newer than `lastDurable`, and every instant from it to the stop (or
    /// to the newest point) covered, no gap or unfollowed span there. A later run with the same
    /// spool sends the kept points first and so covers it; one with another spool, or on another
    /// machine, leaves a gap from `lastDurable`, and the kept points stay a problem (exit 2).
    static func keptWritten(_ entry: StorePoints, since lastDurable: Date?, stopped: Date?) -> Bool {
        guard let lastDurable, let stopped, let newest = entry.newestPoint, newest > lastDurable else { return false }
        let end = min(stopped, newest)
        return !entry.spans.contains { span in
            guard span.kind != "covered" && span.kind != "thinned" else { return false }
            return span.from < end && (span.to ?? .distantFuture) > lastDurable
        }
    }

    /// A follower is gone at once when its follow locks (this host's) exist and none is held any
    /// more; else (another host, a storectl without them, the repository not read) stale when it
    /// has not written for a minute.
    static func staleness(_ live: Replicate.Summary, repositoryID: String?, now: Date) -> (stale: Bool, gone: Bool) {
        var released = false
        if let repositoryID {
            let held = live.stores.map { JobLock.isHeld(path: Replicate.followLockPath(store: $0.store, repository: repositoryID)) }
            released = !held.isEmpty && held.allSatisfy { $0 == false }
        }
        return (released || now.timeIntervalSince(live.updatedAt) > 60, released)
    }

}
