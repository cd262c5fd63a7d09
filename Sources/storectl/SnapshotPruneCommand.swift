import ArgumentParser
import Foundation
import StoreOps

struct SnapshotPruneCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "prune",
        abstract: "Remove the snapshots a retention policy does not keep (restic forget semantics).",
        discussion: reflow("""
            The rules apply to each store on its own (its host and path; --group-by chooses otherwise): in a repository
            shared by several stores, --keep-last 1 keeps the newest snapshot of each. Rules are OR-ed; each of the hourly,
            daily, weekly, monthly and yearly rules keeps the newest snapshot of each of the N most recent periods that have
            snapshots (UTC periods); --keep-within counts back from the newest snapshot of the store, not from now.
            A count of -1 means no limit. The newest snapshot of a store whose last verification passed is never removed.
            An empty policy, an empty tag and a blank --store or --host are refused (64).
            """))

    @Option(help: "The snapshot repository.") var repo: String
    @OptionGroup var password: PasswordOption
    @Option(parsing: .unconditional, help: "Keep the N newest snapshots (-1: all).") var keepLast: Int?
    @Option(parsing: .unconditional, help: "Keep the newest snapshot of each of the N most recent hours that have one (-1: no limit).") var keepHourly: Int?
    @Option(parsing: .unconditional, help: "The same per day.") var keepDaily: Int?
    @Option(parsing: .unconditional, help: "The same per ISO week.") var keepWeekly: Int?
    @Option(parsing: .unconditional, help: "The same per month.") var keepMonthly: Int?
    @Option(parsing: .unconditional, help: "The same per year.") var keepYearly: Int?
    @Option(parsing: .unconditional, help: "Keep every snapshot within this duration of the newest, e.g. 2d, 12h, 1y.") var keepWithin: String?
    @Option(help: "Keep every snapshot with this tag (repeatable).") var keepTag: [String] = []
    @Option(parsing: .unconditional, help: "Keep the safety snapshots storectl takes before it changes a store (tags pre-migrate, pre-restore, pre-purge) this long after they were taken, whatever the rules (default 7d; 0: as the rules say).") var keepSafety: String?
    @Option(help: ArgumentHelp("Apply the rules to each group of snapshots with the same host, path and/or tags (comma-separated), or none to the whole repository at once.",
                               valueName: "fields")) var groupBy = "host,path"
    @Option(help: "Only the snapshots of this store (its path, as `snapshot list` shows it).") var store: String?
    @Option(help: "Only the snapshots taken on this host.") var host: String?
    @Option(help: "Points in time (storectl replicate): keep every commit for this long (default 1d).") var keepPoints: String?
    @Option(help: "Points in time: then keep the last commit of each minute for this long (default 7d).") var keepPointMinutes: String?
    @Option(help: "Points in time: then keep only each chain's base (one point per base interval) for this long (default 30d).") var keepPointBases: String?
    @Flag(help: "List what would be kept and removed, with reasons; remove nothing.") var dryRun = false
    @Flag(help: "When no snapshot is listed, collect every pack: the repository holds none (an empty listing is otherwise not believed).") var empty = false
    @Flag(help: "Wait for another writer instead of exiting 75.") var wait = false
    @Flag(help: "Print the decisions as JSON.") var json = false

    func run() throws {
        var within: DurationText?
        if let keepWithin {
            switch DurationText.parse(keepWithin) {
            case .success(let value): within = value
            case .failure(let error): throw StoreOpsError(.usage, "--keep-within: \(error)")
            }
        }
        var safety: DurationText?
        if let keepSafety {
            switch DurationText.parse(keepSafety, allowZero: true) {
            case .success(let value): safety = value
            case .failure(let error): throw StoreOpsError(.usage, "--keep-safety: \(error)")
            }
        }
        let policy = RetentionPolicy(last: keepLast, hourly: keepHourly, daily: keepDaily, weekly: keepWeekly,
                                     monthly: keepMonthly, yearly: keepYearly, within: within, tags: keepTag, safety: safety)
        var options = SnapshotPrune.Options(repository: repo, policy: policy, dryRun: dryRun, wait: wait, password: password.source,
                                            groupBy: try SnapshotGrouping.parse(groupBy), filter: try SnapshotFilter.parse(store: store, host: host))
        func seconds(_ text: String, _ option: String) throws -> TimeInterval {
            switch DurationText.parse(text) {
            case .success(let value): return value.seconds
            case .failure(let error): throw StoreOpsError(.usage, "\(option): \(error)")
            }
        }
        let everyCommit = try keepPoints.map { try seconds($0, "--keep-points") } ?? PointRetention().everyCommit
        let minutes = try keepPointMinutes.map { try seconds($0, "--keep-point-minutes") } ?? PointRetention().minutes
        let bases = try keepPointBases.map { try seconds($0, "--keep-point-bases") } ?? PointRetention().bases
        options.empty = empty
        options.points = PointRetention(everyCommit: everyCommit, minutes: minutes, bases: bases,
                                        explicit: keepPoints != nil || keepPointMinutes != nil || keepPointBases != nil)
        let progress = TerminalProgress.stepHandler("snapshot prune", quiet: json)
        let result = try SnapshotPrune.run(options, progress: progress?.1)
        progress?.0.finish()
        for note in result.clockNotes {
            FileHandle.standardError.write(Data("storectl: warning: \(note)\n".utf8))
        }
        for tag in result.unmatchedTags {
            FileHandle.standardError.write(Data("storectl: warning: no snapshot carries the tag \(tag.debugDescription) (--keep-tag keeps none by it)\n".utf8))
        }
        // Records pruned, but no data collected (a damaged index or record): the space stays taken
        // until `repo repair`; a scheduled prune that ended 0 so looked healthy. 65 after the report.
        let uncollected = !dryRun && result.garbage?.needsRepair == true
        if json {
            print(jsonReport(result))
            if uncollected { throw Finished(status: .badData) }
            return
        }
        var group: String?
        for decision in result.decisions where dryRun || !decision.keep {
            if !(decision.group ?? "").isExactly(group ?? "") || (decision.group == nil) != (group == nil) {
                group = decision.group
                print("store \(decision.group ?? "?")")
            }
            let verb = decision.keep ? "keep  " : (dryRun ? "remove" : "removed")
            print("\(verb) \(decision.id)  \(decision.reasons.joined(separator: ", "))")
        }
        var pointsOf: String?
        for decision in result.points where dryRun || decision.action != "keep" {
            if !decision.store.isExactly(pointsOf ?? "") || pointsOf == nil {   // not under the last snapshot group's header
                pointsOf = decision.store
                print("points of \(decision.store)")
            }
            let done = ["thin": "thinned", "bases": "thinned to its base", "remove": "removed"]
            let verb = decision.action == "keep" ? "keep  " : (dryRun ? (decision.action == "bases" ? "thin to its base" : decision.action) : done[decision.action] ?? decision.action)
            print("\(verb) points \(Timestamp.iso(decision.from)) to \(Timestamp.iso(decision.to)) of \(decision.store) (chain \(decision.chain))  \(decision.reason)")
        }
        // Milestones (a chain's snapshots restores start from) go with their chain's thinning or
        // removal: named, as `--json` names them (the text said "removed 0 snapshots").
        for id in result.milestones {
            print("\(dryRun ? "remove" : "removed") \(id)  a milestone no kept chain's marker names (its points were thinned or removed)")
        }
        // Under a header of their own: after the last store's group they read as that store's
        // (which store a damaged entry is of cannot be read from it).
        if !result.damaged.isEmpty { print("damaged catalog entries (of no store that can be told)") }
        for entry in result.damaged {
            print("keep   \(entry.id)  its catalog entry is damaged, so it is never pruned: \(entry.problem)")
        }
        let kept = result.decisions.filter(\.keep).count
        var summary = "\(dryRun ? "would keep" : "kept") \(kept)" + (result.damaged.isEmpty ? "" : " (and \(result.damaged.count) damaged)")
            + ", \(dryRun ? "would remove" : "removed") \(result.decisions.count - kept)"
        // A chain's base goes with its points (it is not among the snapshots decided above).
        let chains = result.points.filter { $0.action == "remove" }.count, thinned = result.points.filter { $0.action == "thin" || $0.action == "bases" }.count
        if chains + thinned + result.milestones.count > 0 {
            var parts: [String] = []
            if chains > 0 { parts.append("\(Format.plural(chains, "chain", "chains")) of points with \(chains == 1 ? "its" : "their") base") }
            if thinned > 0 { parts.append("\(Format.plural(thinned, "span", "spans")) of points thinned") }
            if !result.milestones.isEmpty { parts.append(Format.plural(result.milestones.count, "milestone", "milestones")) }
            summary += " snapshots; \(dryRun ? "would remove" : "removed") \(parts.joined(separator: ", "))"
        }
        if let garbage = result.garbage {
            if let skipped = garbage.skipped {
                summary += (result.pointBytes > 0 ? "; \(dryRun ? "would free" : "freed") points \(Format.bytes(result.pointBytes))" : "") + "; no data collected: \(skipped)"
            } else {
                summary += "; \(dryRun ? "would free" : "freed") \(Format.bytes(garbage.freedBytes + result.pointBytes))"
                    + (result.pointBytes > 0 ? ": points \(Format.bytes(result.pointBytes)), packs \(Format.bytes(garbage.freedBytes))" : "")
                    + (dryRun ? (garbage.unindexedPacks > 0 ? " (and \(Format.plural(garbage.unindexedPacks, "pack", "packs")) no index lists, not counted: "
                                 + "a writer may be filling \(garbage.unindexedPacks == 1 ? "it" : "them"); the prune removes what a dead writer left)" : "")
                       : " (\(Format.plural(garbage.deletedPacks, "pack", "packs")) deleted, \(garbage.repackedPacks) repacked, \(garbage.unindexedPacks) unindexed removed)")
            }
        }
        print(summary)
        if uncollected { throw Finished(status: .badData) }
    }
}
