import Foundation
import TOMLKit

extension Policy {
    /// Reads and validates a policy file.
    ///
    /// ```swift
    /// let policy = try Policy.load("/etc/storectl/tasks.toml")
    /// ```
    ///
    /// - Throws: 66 when the file is missing or unreadable; 65 listing every problem (file, line,
    ///   key, what is expected) when it is malformed.
    public static func load(_ path: String) throws -> Policy {
        let file = FileSystem.absolute(path)
        guard FileSystem.kind(of: file) == .file else {
            throw StoreOpsError(.noInput, "\(file): no such policy file")
        }
        // A store given where its policy goes (`run snapshot --policy Notes.sqlite`): known from
        // its first 16 bytes, not read whole.
        if let head = FileHandle(forReadingAtPath: file).flatMap({ handle in defer { try? handle.close() }; return try? handle.read(upToCount: 16) }),
           head == Data("SQLite format 3\0".utf8) {
            throw StoreOpsError(.badData, "\(file) is an SQLite database, not a policy file (TOML)",
                                hint: "pass the policy file (`--policy app.toml`), which names the store in its [store] path; `storectl policy check FILE` checks one")
        }
        guard let data = FileManager.default.contents(atPath: file) else {
            throw StoreOpsError(.noInput, "\(file): cannot be read", hint: "check its permissions")
        }
        guard let source = String(data: data, encoding: .utf8) else {
            throw StoreOpsError(.badData, "\(file): not UTF-8 text", hint: "a policy is a TOML text file saved as UTF-8")
        }
        switch parse(source: source, file: file) {
        case .success(let policy): return policy
        case .failure(let problems): throw problems.storeOpsError
        }
    }

    /// Parses policy text; `file` names it in messages and anchors relative paths.
    public static func parse(source: String, file: String) -> Result<Policy, PolicyProblems> {
        let root: TOMLTable
        do {
            root = try TOMLTable(string: source)
        } catch let error as TOMLParseError {
            return .failure(PolicyProblems(file: file, problems: [.init(line: error.source.begin.line, key: "(syntax)", message: error.description)]))
        } catch {
            return .failure(PolicyProblems(file: file, problems: [.init(line: nil, key: "(syntax)", message: "\(error)")]))
        }
        let sink = ProblemSink(lines: TOMLLines(source: source))
        let folder = FileSystem.parent(of: file)
        let reader = TableReader(root, path: [], sink: sink)

        var storeSection: StoreSection?
        if let store = reader.table("store", required: true) {
            let path = store.string("path", required: true)
            let busy = store.duration("busy_timeout", maximum: 7 * 86_400) ?? DurationText(seconds: 5, text: "5s")   // as --timeout: SQLite takes milliseconds as an Int32
            store.finish(known: ["path", "busy_timeout"])
            if let path { storeSection = StoreSection(path: resolve(path, in: folder), busyTimeout: busy) }
        }

        var rules: [PurgeRule] = []
        for (index, rule) in (reader.tables("purge") ?? []).enumerated() {
            if let parsed = parseRule(rule, index: index, sink: sink) { rules.append(parsed) }
        }
        let names = rules.map(\.name)
        for name in Set(names) where names.filter({ $0 == name }).count > 1 {
            sink.add(["purge"], "two rules are named \"\(name)\"; give each rule its own name")
        }

        var snapshot: SnapshotSection?
        if let section = reader.table("snapshot") {
            snapshot = parseSnapshot(section, folder: folder, sink: sink)
        }
        let schedule = reader.table("schedule").map { parseSchedule($0, snapshot: snapshot, folder: folder, sink: sink) }
        let replicate = reader.table("replicate").map { parseReplicate($0, snapshot: snapshot, schedule: schedule, folder: folder) }
        reader.finish(known: ["store", "purge", "snapshot", "schedule", "replicate"])

        guard sink.problems.isEmpty, let storeSection else {
            // Unknown keys first: a misspelt section or key is usually why something is "missing".
            let unknown = sink.problems.filter { $0.message.hasPrefix("unknown key") }
            return .failure(PolicyProblems(file: file, problems: unknown + sink.problems.filter { !$0.message.hasPrefix("unknown key") }))
        }
        return .success(Policy(file: file, store: storeSection, rules: rules, snapshot: snapshot, schedule: schedule, replicate: replicate))
    }

    /// `[replicate]`: intervals and points retention; the repository and password are `[snapshot]`'s.
    static func parseReplicate(_ section: TableReader, snapshot: SnapshotSection?, schedule: ScheduleSection?, folder: String) -> ReplicateSection {
        let sync = section.duration("sync_interval") ?? DurationText(seconds: 1, text: "1s")
        if sync.seconds < 0.05 || sync.seconds > 3600 { section.problem("sync_interval", "must be between 50ms and 1h") }
        let base = section.duration("base_interval") ?? DurationText(seconds: 3600, text: "1h")
        let merge = section.duration("merge_interval", allowZero: true) ?? DurationText(seconds: 60, text: "1m")
        let heartbeat = section.duration("heartbeat", allowZero: true) ?? DurationText(seconds: 60, text: "1m")
        let keep = section.duration("keep_points") ?? DurationText(seconds: 86_400, text: "1d")
        // Unset, each is at least the one before it; set, it must be.
        let givenMinutes = section.duration("keep_point_minutes")
        let minutes = givenMinutes ?? (keep.seconds > 7 * 86_400 ? keep : DurationText(seconds: 7 * 86_400, text: "7d"))
        let givenBases = section.duration("keep_point_bases")
        let bases = givenBases ?? (minutes.seconds > 30 * 86_400 ? minutes : DurationText(seconds: 30 * 86_400, text: "30d"))
        if givenMinutes != nil, minutes.seconds < keep.seconds {
            section.problem("keep_point_minutes", "is shorter than keep_points: a minute's last commit is kept after every commit, not before")
        }
        if givenBases != nil, bases.seconds < max(keep.seconds, minutes.seconds) {
            section.problem("keep_point_bases", "is shorter than keep_points or keep_point_minutes: bases are kept after the others, not before")
        }
        if snapshot == nil { section.problem("sync_interval", "[replicate] needs a [snapshot] section naming the repository the points go to") }
        let status = section.string("status_file").map { written($0, in: folder) }
        let metrics = section.string("metrics").map { written($0, in: folder) } ?? schedule?.metrics
        let spool = section.string("spool").map { resolve($0, in: folder) }
        let spoolLimit = section.size("spool_limit")
        section.finish(known: ["sync_interval", "base_interval", "merge_interval", "heartbeat", "keep_points", "keep_point_minutes", "keep_point_bases", "status_file", "metrics",
                               "spool", "spool_limit"])
        var parsed = ReplicateSection(syncInterval: sync, baseInterval: base, mergeInterval: merge, keepPoints: keep, keepPointMinutes: minutes, keepPointBases: bases,
                                      statusFile: status, metrics: metrics)
        parsed.heartbeat = heartbeat
        parsed.spool = spool
        parsed.spoolLimit = spoolLimit
        return parsed
    }

    static func resolve(_ path: String, in folder: String) -> String {
        path.hasPrefix("/") ? FileSystem.absolute(path) : FileSystem.absolute((folder as NSString).appendingPathComponent(path))
    }

    /// Where a job writes (its log, metrics, status file): absolute, its symbolic links kept, so
    /// that `PolicyTrust` judges the path a job opens, link by link (resolved here, a link another
    /// user planted as the log was followed before any check saw it: a trial).
    static func written(_ path: String, in folder: String) -> String {
        let absolute = path.hasPrefix("/") ? path : ((folder.hasPrefix("/") ? folder : FileManager.default.currentDirectoryPath + "/" + folder) as NSString).appendingPathComponent(path)
        // Not `standardizingPath`: Foundation's resolves the links. `..` taken as text, as
        // `resolve` does for the other paths.
        var parts: [Substring] = []
        for part in absolute.split(separator: "/") where part != "." {
            if part == ".." { _ = parts.popLast() } else { parts.append(part) }
        }
        return "/" + parts.joined(separator: "/")
    }

    static let ruleKeys = ["name", "table", "entity", "deleted_flag", "deleted_at", "time_format", "retention", "batch_size",
                           "max_rows", "max_runtime", "pause", "max_fraction", "on_deny"]

    static func parseRule(_ rule: TableReader, index: Int, sink: ProblemSink) -> PurgeRule? {
        let before = sink.problems.count
        let table = rule.string("table")
        let entity = rule.string("entity")
        var target: PurgeRule.Target?
        switch (table, entity) {
        case (let table?, nil): target = .table(table)
        case (nil, let entity?): target = .entity(entity)
        case (.some, .some): rule.problem("table", "give either table or entity, not both")
        case (nil, nil): rule.problem("table", "missing: name the table (table = \"ZITEM\") or the Core Data entity (entity = \"Task\")")
        }
        let flag = rule.string("deleted_flag")
        let deletedAt = rule.string("deleted_at")
        if flag == nil, deletedAt == nil {
            rule.problem("deleted_at", "missing: name the soft-delete flag column (deleted_flag) and/or the deleted-at column (deleted_at)")
        }
        var format = PurgeRule.TimeFormat.coredata
        if let text = rule.string("time_format") {
            if let value = PurgeRule.TimeFormat(rawValue: text) { format = value } else {
                rule.problem("time_format", "\"\(text)\" is not a time format; expected one of \(PurgeRule.TimeFormat.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", "))")
            }
        } else if deletedAt != nil {
            rule.problem("time_format", "missing: how \(deletedAt!) stores time: \"coredata\" (seconds since 2001), \"unix\", \"unix_ms\" or \"iso8601\"")
        }
        let retention = rule.duration("retention")
        if deletedAt != nil, retention == nil, rule.has("retention") == false {
            rule.problem("retention", "missing: how long deleted rows are kept, e.g. \"30d\"")
        }
        if deletedAt == nil, rule.has("retention") {
            rule.problem("retention", "needs deleted_at: without a deleted-at time there is nothing to count the retention from")
        }
        let batch = rule.int("batch_size", in: 1...100_000) ?? 1000
        let maxRows = rule.int("max_rows", in: 1...Int.max)
        let maxRuntime = rule.duration("max_runtime")
        let pause = rule.duration("pause", allowZero: true)?.seconds ?? 0
        let fraction = rule.double("max_fraction", in: 0...1, openLow: true)
        var onDeny = PurgeRule.OnDeny.keep
        if let text = rule.string("on_deny") {
            if let value = PurgeRule.OnDeny(rawValue: text) { onDeny = value } else {
                rule.problem("on_deny", "\"\(text)\" is not an answer; expected \"keep\" (list the rows deny rules keep, the run succeeds) or \"fail\" (the run exits 2)")
            }
        }
        let name = rule.string("name") ?? table ?? entity ?? "purge[\(index)]"
        rule.finish(known: ruleKeys)
        guard sink.problems.count == before, let target else { return nil }
        return PurgeRule(name: name, target: target, deletedFlag: flag, deletedAt: deletedAt, timeFormat: format,
                         retention: retention, batchSize: batch, maxRows: maxRows, maxRuntime: maxRuntime, pause: pause,
                         maxFraction: fraction, onDeny: onDeny, line: sink.lines.line(["purge", "\(index)"]))
    }

    /// `[schedule]`: cron expressions checked, the sections the jobs need present.
    static func parseSchedule(_ section: TableReader, snapshot: SnapshotSection?, folder: String, sink: ProblemSink) -> ScheduleSection {
        var value = ScheduleSection(purge: section.string("purge"), snapshot: section.string("snapshot"),
                                    maintain: section.string("maintain"), jitter: section.duration("jitter", maximum: DurationText.maximumJitter),
                                    log: section.string("log").map { written($0, in: folder) },
                                    metrics: section.string("metrics").map { written($0, in: folder) })
        if let bytes = section.size("log_max_size") { value.logMaxBytes = bytes }
        if let keep = section.int("log_keep", in: 1...100) { value.logKeep = keep }
        for key in ["purge", "snapshot", "maintain"] {
            value.lines[key] = sink.lines.line(["schedule", key])
            let expression = key == "purge" ? value.purge : key == "snapshot" ? value.snapshot : value.maintain
            if let expression {
                do { _ = try CronExpression(expression) } catch let error as CronExpression.ParseError {
                    section.problem(key, "\(error.field): \(error.problem) (in \"\(expression)\")")
                } catch {}
            }
        }
        if value.snapshot != nil || value.maintain != nil, snapshot == nil {
            section.problem(value.snapshot != nil ? "snapshot" : "maintain", "needs a [snapshot] section naming the repository")
        }
        if value.maintain != nil, snapshot?.retention == nil {
            section.problem("maintain", "needs [snapshot.retention]: maintain prunes the repository by it")
        }
        section.finish(known: ["purge", "snapshot", "maintain", "jitter", "log", "metrics", "log_max_size", "log_keep"])
        return value
    }

    static func parseSnapshot(_ section: TableReader, folder: String, sink: ProblemSink) -> SnapshotSection? {
        let repository = section.string("repository", required: true)
        let before = section.bool("before_purge") ?? false
        // A repository always compresses with zstd; the key is still read so that a policy written
        // for format 1 says what changed instead of failing as an unknown key.
        if let text = section.string("compression"), text != "zstd" {
            section.problem("compression", "\"\(text)\": a repository compresses with zstd (format 1's gzip, xz and none are gone); remove the key")
        }
        var level = section.int("level", in: Int.min...Int.max)
        if let given = level, let range = Compression.zstd.levels, !range.contains(given) {
            section.problem("level", "\(given) is out of range for zstd; expected \(range.lowerBound)...\(range.upperBound)")
            level = nil
        }
        let tags = section.strings("tags") ?? []
        do { try SnapshotCreate.validate(tags: tags) } catch let error as StoreOpsError { section.problem("tags", error.message) } catch {}
        var retention: RetentionPolicy?
        if let keep = section.table("retention") {
            var policy = RetentionPolicy(last: keep.int("keep_last", in: -1...Int.max), hourly: keep.int("keep_hourly", in: -1...Int.max),
                                         daily: keep.int("keep_daily", in: -1...Int.max), weekly: keep.int("keep_weekly", in: -1...Int.max),
                                         monthly: keep.int("keep_monthly", in: -1...Int.max), yearly: keep.int("keep_yearly", in: -1...Int.max),
                                         within: keep.duration("keep_within"))
            policy.tags = keep.strings("keep_tags") ?? []
            policy.safety = keep.duration("keep_safety", allowZero: true)
            keep.finish(known: ["keep_last", "keep_hourly", "keep_daily", "keep_weekly", "keep_monthly", "keep_yearly", "keep_within", "keep_tags", "keep_safety"])
            if policy.isEmpty { keep.problem("keep_last", "an empty retention would remove every snapshot; set at least one keep_* rule") }
            if policy.tags.contains(where: { $0.trimmingCharacters(in: .whitespaces).isEmpty }) {
                keep.problem("keep_tags", "an empty tag keeps nothing, so every snapshot it was meant to keep would be removed")
            }
            retention = policy
        }
        var password: PasswordSource?
        let passwordFile = section.string("password_file"), passwordCommand = section.string("password_command")
        switch (passwordFile, passwordCommand) {
        case (let file?, nil): password = .file(resolve(file, in: folder))
        case (nil, let command?): password = .command(command, folder: FileSystem.absolute(folder))
        case (_?, _?): section.problem("password_command", "give password_file or password_command, not both")
        case (nil, nil): break
        }
        section.finish(known: ["repository", "before_purge", "compression", "level", "tags", "retention", "password_file", "password_command"])
        guard let repository else { return nil }
        return SnapshotSection(repository: S3Backend.isS3(repository) ? repository : resolve(repository, in: folder), beforePurge: before,
                               level: level, tags: tags, retention: retention, passwordSource: password)
    }
}

