import ArgumentParser
import CStoreSupport
import Foundation
import StoreOps

struct DiffCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(
        commandName: "diff",
        abstract: "Show what changed between two stores, backups, snapshots or points, in Core Data's terms.",
        discussion: reflow("""
            Each side is a store or a backup file, a snapshot id (or unique prefix) with --repo, or a point recorded by
            `storectl replicate` (--at TIME, given once or twice; points come first). For a Core Data or SwiftData store:
            objects added, removed and changed per entity (identity Z_ENT + Z_PK), the attributes and relationships that
            changed with before and after values, many-to-many links, external-data files, and the model's entities,
            attributes, relationships, constraints and version hashes from Z_MODELCACHE; Core Data's bookkeeping (Z_OPT
            bumps, Z_PRIMARYKEY, persistent history) is counted but left out unless --bookkeeping. For a plain SQLite
            store: the schema (and user_version, application_id), then rows by primary key (a TEXT or composite one too;
            --key table.column names another), or by rowid when there is none.

            Read-only on every side. Only pages that differ are decoded: two snapshots of one repository are compared by
            their maps' content ids without reading unchanged pages. A live store is read in one read transaction (from a
            consistent copy in TMPDIR, or --scratch, when its -wal holds committed pages).

            Exit 0 when the sides are the same, 2 when they differ (like diff(1)).
            """))

    @Argument(help: "The sides: files, or snapshot ids with --repo.") var sides: [String] = []
    @Option(parsing: .unconditionalSingleValue, help: "A side that is the point in time recorded at or before TIME (RFC 3339, or before now: -5m); twice for two points.") var at: [String] = []
    @Option(help: "The snapshot repository (for snapshot ids and points).") var repo: String?
    @OptionGroup var password: PasswordOption
    @Option(help: "With --at: the store whose points (when the repository has points of several).") var store: [String] = []
    @Option(help: "With --at and --store: the host that followed it (default: this one).") var host: [String] = []
    @Option(help: "Only these entities or tables (repeat, or separate with commas).") var entity: [String] = []
    @Option(help: ArgumentHelp("Match the objects of an entity by this attribute (e.g. a UUID) instead of Z_PK, for stores whose keys were renumbered (repeat for several).",
                               valueName: "Entity.attribute")) var key: [String] = []
    @Option(parsing: .unconditional, help: "List at most N objects per entity (counts stay complete). Default 10, or all with --json.") var limit: Int?
    @Flag(help: "Also show Core Data's bookkeeping: Z_OPT bumps, Z_PRIMARYKEY, Z_METADATA, the model cache, persistent history.") var bookkeeping = false
    @Option(help: "Where a live store's consistent copy is made (default: TMPDIR).") var scratch: String?
    @Flag(help: "Print every difference as JSON.") var json = false

    func validate() throws {
        guard !ValidationGate.off else { return }
        guard at.count + sides.count == 2 else {
            throw ValidationError("name two sides: two files or snapshot ids, or --at TIME and one of them, or --at twice (got \(at.count + sides.count))")
        }
        if let limit, limit < 0 { throw ValidationError("--limit must be 0 or more") }
        // Both --at sides are points of one store: a second --store was silently the one used.
        for (name, values) in [("--store", store), ("--host", host)] where values.count > 1 {
            throw ValidationError("\(name) given \(values.count) times (\(values.joined(separator: ", "))): both points of a diff are of one store; "
                                  + "to compare two stores' points, restore one (`storectl snapshot restore --at TIME --store S --to FILE`) and diff the file against the other's --at")
        }
        // A blank side (an unset variable) would otherwise be the current folder.
        if sides.contains(where: { $0.trimmingCharacters(in: .whitespaces).isEmpty }) {
            throw ValidationError("a blank side: name a store, a backup file, or a snapshot id with --repo")
        }
        // A blank name (an unset variable) would otherwise mean "every entity".
        for item in entity where item.split(separator: ",", omittingEmptySubsequences: false).contains(where: { $0.trimmingCharacters(in: .whitespaces).isEmpty }) {
            throw ValidationError("--entity \(item.debugDescription): a blank entity name; name an entity or table (e.g. --entity Item)")
        }
        for item in key where item.split(separator: ".").count != 2 {
            throw ValidationError("--key \(item): name an entity and its attribute, as Entity.attribute (e.g. Note.identifier)")
        }
    }

    func run() throws {
        try FileSystem.checkScratch(scratch)
        // A diff reads a frame (up to 4 MiB with its neighbours), opens it and decompresses it,
        // over and over: memory given back after each was 0.1 s of 1.5 s in page faults on the
        // bench store's two snapshots (3 MiB more at peak kept instead).
        storectl_keep_freed_memory(16 << 20)
        // Refused even where no side needs the repository (two files).
        if let repo { try RepositoryLocation.refuseBlank(repo) }
        var resolved: [StoreDiff.Side] = try at.map { .point(try PointRestore.parseTime($0)) }
        for side in sides {
            // A point's label (`<chain>@<number>`, as restore and diff print it) is a point.
            if FileSystem.kind(of: side) == .missing, SnapshotID.pointLabel(side) != nil {
                guard repo != nil else {
                    throw StoreOpsError(.usage, "\(side) is a point: it needs --repo", hint: "storectl diff --repo DIR \(side) …")
                }
                resolved.append(.snapshot(side))
                continue
            }
            // With --repo, a name that is no file is a snapshot id, unless it cannot be one (ids
            // are digits, T, Z, - and hex): a mistyped store then says "no such file".
            let idShaped = !side.contains("/") && side.count >= 9 && side.prefix(8).allSatisfy(\.isNumber) && Array(side)[8] == "T"
            if repo != nil, FileSystem.kind(of: side) == .missing, !side.contains("/"), side.allSatisfy({ "0123456789TZ-abcdef".contains($0) }) {
                resolved.append(.snapshot(side))
            } else if let repo, FileSystem.kind(of: side) == .missing, idShaped {
                // A mistyped id (a letter past f) is not "no such file" (a new user was told to check the store's path).
                throw StoreOpsError(.noInput, "\"\(side)\" is not a snapshot id, nor a file", hint: "`storectl snapshot list --repo \(repo)` shows the ids")
            } else if repo == nil, FileSystem.kind(of: side) == .missing, idShaped {
                throw StoreOpsError(.noInput, "\(side): no such file, and no --repo to find a snapshot of that id in",
                                    hint: "name the repository: storectl diff --repo DIR \(side) …")
            } else if let repo, FileSystem.kind(of: side) == .missing, !side.contains("/") {
                // With --repo, a name that is neither: both are said (it said "no such file" alone).
                throw StoreOpsError(.noInput, "\"\(side)\" is no file, nor a snapshot id (ids look like 20261124T145654Z-c2a1cb)",
                                    hint: "`storectl snapshot list --repo \(repo)` shows the ids; a store or backup file is named by its path")
            } else {
                resolved.append(.file(side))
            }
        }
        var options = StoreDiff.Options(a: resolved[0], b: resolved[1])
        options.repository = repo
        options.password = password.source
        options.pointStore = store.first
        options.pointHost = host.first
        options.entities = entity.flatMap { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } }.filter { !$0.isEmpty }
        options.limit = limit ?? (json ? nil : 10)
        options.bookkeeping = bookkeeping
        options.keys = key
        options.scratch = scratch
        options.shortValues = !json
        let progress = TerminalProgress.handler("diff", quiet: json)
        let report = try StoreDiff.run(options, progress: progress?.1)
        progress?.0.finish()
        if json {
            print(jsonReport(report))
        } else {
            print(Self.text(report, countsOnly: limit == 0, limit: options.limit))
        }
        if !report.same { throw Finished(status: .checksFailed) }
    }

    /// `countsOnly` (`--limit 0`): no "… and N more" under each entity (no object was asked for).
    static func text(_ r: StoreDiff.Report, countsOnly: Bool = false, limit: Int? = nil) -> String {
        var lines: [String] = []
        func side(_ s: StoreDiff.SideSummary) -> String {
            "\(s.kind == "file" ? "" : s.kind + " ")\(s.name) (\(Format.count(s.pages)) pages\(s.coreData ? ", Core Data" : "")\(s.copied ? ", read from a consistent copy" : ""))"
        }
        lines.append("a: \(side(r.a))")
        lines.append("b: \(side(r.b))")
        if r.same {
            lines.append("same" + (r.bookkeeping.rows + r.bookkeeping.optBumps + r.bookkeeping.renumbered + r.bookkeeping.references > 0 ? " (" + bookkeepingLine(r.bookkeeping) + ")" : ""))
        }
        if !r.schema.isEmpty {
            lines.append("schema: \(Format.plural(r.schema.count, "change", "changes"))")
            for change in r.schema {
                let mark = change.change == "added" ? "+" : change.change == "removed" ? "-" : "~"
                let columns = [change.columnsAdded.map { "columns added: " + $0.joined(separator: ", ") },
                               change.columnsRemoved.map { "columns removed: " + $0.joined(separator: ", ") }].compactMap { $0 }
                lines.append("  \(mark) \(change.type) \(change.name)" + (change.type == "pragma" ? " \(change.before ?? "") → \(change.after ?? "")" : "")
                             + (columns.isEmpty ? "" : " (" + columns.joined(separator: "; ") + ")"))
            }
        }
        if !r.model.isEmpty {
            lines.append("model: \(Format.plural(r.model.count, "change", "changes"))")
            for line in r.model { lines.append("  \(line)") }
        }
        for e in r.entities {
            var counts = ["\(e.added) added", "\(e.removed) removed", "\(e.changed) changed"]
            if !e.attributes.isEmpty {
                counts[2] += " (" + e.attributes.sorted { $0.value == $1.value ? $0.key < $1.key : $0.value > $1.value }
                    .prefix(6).map { "\($0.key) \($0.value)" }.joined(separator: ", ") + ")"
            }
            lines.append("\(e.entity.map { "\($0) (\(e.table))" } ?? "table \(e.table)"): \(counts.joined(separator: ", "))")
            for o in e.objects {
                let mark = o.change == "added" ? "+" : o.change == "removed" ? "-" : "~"
                let values = o.values.map { v -> String in
                    switch (v.before, v.after) {
                    case (let x?, let y?): return "\(v.name) \(x) → \(y)"
                    case (nil, let y?): return "\(v.name) \(y)"
                    case (let x?, nil): return "\(v.name) \(x)"
                    default: return v.name
                    }
                }
                // Added and removed objects show their first values (--json has them all), the ones
                // that say which object it is first (a title, a name, an identifier).
                let telling = ["title", "name", "identifier", "uuid", "subject"]
                // The key the object is named by is not repeated ("+ id 387: id 387; …").
                let pairs = Array(zip(o.values, values)).filter { o.change == "changed" || $0.1 != o.object }
                let says = { (v: StoreDiff.ValueChange) in telling.contains { v.name.lowercased().contains($0) } }
                let ordered = (pairs.filter { says($0.0) } + pairs.filter { !says($0.0) }).map(\.1)
                let shown = o.change == "changed" ? values : Array(ordered.prefix(6)) + (ordered.count > 6 ? ["…"] : [])
                lines.append("  \(mark) \(o.object)" + (shown.isEmpty ? "" : ": " + shown.joined(separator: "; ")))
            }
            if e.unlisted > 0, !countsOnly { lines.append("  … and \(Format.count(e.unlisted)) more (--limit, --json)") }
        }
        for l in r.links {
            lines.append("\(l.relationship) (\(l.table)): \(Format.plural(l.added, "link", "links")) added, \(l.removed) removed"
                         + (l.reordered > 0 ? ", \(l.reordered) reordered" : "") + (l.renumbered > 0 ? ", \(l.renumbered) with an end renumbered" : ""))
            for link in l.links { lines.append("  \(link.change == "added" ? "+" : link.change == "removed" ? "-" : "~") \(link.link)") }
            if l.unlisted > 0, !countsOnly { lines.append("  … and \(Format.count(l.unlisted)) more (--limit, --json)") }
        }
        if !r.externalData.isEmpty {
            lines.append("external data: \(Format.plural(r.externalData.count, "file", "files")) \(r.externalData.count == 1 ? "differs" : "differ")")
            // Listed as objects are (--limit; none for --limit 0), a change by size and hash.
            let shown = countsOnly ? [] : Array(r.externalData.prefix(limit ?? r.externalData.count))
            for f in shown {
                func side(_ bytes: UInt64?, _ sha: String?) -> String { bytes.map { Format.bytes($0) + (sha.map { " " + $0.prefix(12) } ?? "") } ?? "-" }
                lines.append("  \(f.change == "added" ? "+" : f.change == "removed" ? "-" : "~") \(f.path) (\(side(f.before, f.beforeSHA256)) → \(side(f.after, f.afterSHA256)))")
            }
            if r.externalData.count > shown.count, !countsOnly { lines.append("  … and \(Format.count(r.externalData.count - shown.count)) more (--limit, --json)") }
        }
        if !r.same, r.bookkeeping.rows + r.bookkeeping.optBumps + r.bookkeeping.renumbered + r.bookkeeping.references > 0, !r.bookkeeping.shown {
            lines.append(bookkeepingLine(r.bookkeeping))
        }
        var tail = "compared by \(r.stats.method): \(Format.count(r.stats.leavesDecoded)) leaf pages decoded, \(Format.count(r.stats.leavesSkipped)) skipped as the same (both sides counted)"
        tail += ", \(String(format: "%.2f", r.stats.seconds)) s"
        if let fallback = r.stats.fallback { tail += " (\(fallback))" }
        lines.append(tail)
        return lines.joined(separator: "\n")
    }

    static func bookkeepingLine(_ b: StoreDiff.Bookkeeping) -> String {
        var parts: [String] = []
        if b.rows > 0 { parts.append("\(Format.plural(b.rows, "bookkeeping row", "bookkeeping rows")) (\(b.tables.joined(separator: ", ")))") }
        // Objects whose only change is Z_OPT (a bump beside a real change is that change's: it
        // said "Z_OPT bumps", which read as every bump, and a new user missed one).
        if b.optBumps > 0 { parts.append("\(Format.plural(b.optBumps, "object", "objects")) changed only by Z_OPT") }
        if b.renumbered > 0 { parts.append("\(Format.plural(b.renumbered, "object", "objects")) renumbered under --key") }
        if b.references > 0 { parts.append("\(Format.plural(b.references, "object or link", "objects and links")) changed only by pointing at renumbered objects") }
        return parts.joined(separator: " and ") + (b.shown ? "" : " left out: --bookkeeping shows them")
    }
}
