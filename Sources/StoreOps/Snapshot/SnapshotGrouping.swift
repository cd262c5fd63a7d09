import Foundation

/// Which snapshots belong to one store, for retention and for listing.
///
/// Retention is applied to each group on its own: in a repository shared by several stores (or
/// several hosts), `--keep-last 1` keeps the newest snapshot *of each store*. A store is the host
/// that took the snapshot and the store's path there, as restic groups by host and paths by
/// default. `--group-by` chooses other fields; `--group-by none` applies the rules to the whole
/// repository at once (what prune did before, which removed other stores' snapshots).
public struct SnapshotGrouping: Sendable, Codable, Equatable, CustomStringConvertible {
    public var host: Bool
    public var path: Bool
    public var tags: Bool

    public init(host: Bool, path: Bool, tags: Bool = false) {
        self.host = host
        self.path = path
        self.tags = tags
    }

    /// host and path: one group per store.
    public static let store = SnapshotGrouping(host: true, path: true)
    /// One group: the rules see every snapshot of the repository together.
    public static let repository = SnapshotGrouping(host: false, path: false)

    /// Parses `host,path`, `path`, `host`, `host,path,tags`, ... or `none` (the whole repository).
    /// A blank value is refused: `--group-by "$G"` with G unset must not prune across stores.
    /// - Throws: 64 naming the unknown field.
    public static func parse(_ text: String) throws -> SnapshotGrouping {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.isEmpty {
            throw StoreOpsError(.usage, "--group-by is empty",
                                hint: "leave it out (each store on its own), or say --group-by none to apply the rules to the whole repository at once")
        }
        if trimmed == "none" { return .repository }
        var grouping = SnapshotGrouping.repository
        for field in trimmed.split(separator: ",", omittingEmptySubsequences: false).map({ $0.trimmingCharacters(in: .whitespaces) }) {
            switch field {
            case "host": grouping.host = true
            case "path", "paths", "store": grouping.path = true
            case "tag", "tags": grouping.tags = true
            default:
                throw StoreOpsError(.usage, "--group-by \(text.debugDescription): unknown field \(field.debugDescription)",
                                    hint: "use a comma-separated list of host, path and tags (default host,path: each store on its own), or none for the whole repository")
            }
        }
        return grouping
    }

    public var description: String {
        let fields = [host ? "host" : nil, path ? "path" : nil, tags ? "tags" : nil].compactMap { $0 }
        return fields.isEmpty ? "none" : fields.joined(separator: ",")
    }

    /// The group a snapshot belongs to, by its fields' bytes (the label can be the same for two).
    public func key(host snapshotHost: String, path snapshotPath: String, tags snapshotTags: [String]) -> String {
        [host ? snapshotHost.exactKey : "", path ? snapshotPath.exactKey : "",
         tags ? snapshotTags.map(\.exactKey).sorted().joined(separator: "\u{1}") : ""].joined(separator: "\u{0}")
    }

    /// The group a snapshot belongs to, as people read it: `host:/path/Store.sqlite`, a path, a
    /// host, `tags a,b`, or `the whole repository`.
    public func label(host snapshotHost: String, path snapshotPath: String, tags snapshotTags: [String]) -> String {
        var parts: [String] = []
        switch (host, path) {
        case (true, true): parts.append("\(snapshotHost):\(snapshotPath)")
        case (true, false): parts.append(snapshotHost)
        case (false, true): parts.append(snapshotPath)
        case (false, false): break
        }
        if tags { parts.append(snapshotTags.isEmpty ? "no tags" : "tags " + snapshotTags.sorted().joined(separator: ",")) }
        return parts.isEmpty ? "the whole repository" : parts.joined(separator: " ")
    }
}

/// Which snapshots a command looks at: those of one host and/or one store path.
public struct SnapshotFilter: Sendable, Codable, Equatable {
    public var host: String?
    /// The store's path as recorded (absolute).
    public var path: String?

    public init(host: String? = nil, path: String? = nil) {
        self.host = host
        self.path = path
    }

    public static let all = SnapshotFilter()

    /// `--store PATH` and `--host NAME` as typed: the path made absolute the way `snapshot create`
    /// records it; blank values are 64 (an unset variable in a cron line must not mean "all").
    public static func parse(store: String?, host: String?) throws -> SnapshotFilter {
        if let store, store.trimmingCharacters(in: .whitespaces).isEmpty {
            throw StoreOpsError(.usage, "--store is empty", hint: "name the store's path as `snapshot list` shows it, or leave --store out")
        }
        if let host, host.trimmingCharacters(in: .whitespaces).isEmpty {
            throw StoreOpsError(.usage, "--host is empty", hint: "name a host as `snapshot list` shows it, or leave --host out")
        }
        return SnapshotFilter(host: host, path: store.map { StoreFile(unchecked: $0).path })
    }

    public func matches(host snapshotHost: String, path snapshotPath: String) -> Bool {
        (host.map { $0.isExactly(snapshotHost) } ?? true) && (path.map { $0.isExactly(snapshotPath) } ?? true)
    }

    public var isAll: Bool { host == nil && path == nil }

    /// 66 for a filter no snapshot or point matches (a typo would otherwise say nothing), naming
    /// the stores there (`stores`: "PATH (host H)").
    func matchesNothing(in location: String, stores: [String], hint extra: String = "") -> StoreOpsError {
        let what = [path.map { "store \($0)" }, host.map { "host \($0)" }].compactMap { $0 }.joined(separator: " on ")
        return StoreOpsError(.noInput, "no snapshot or point in \(location) is of \(what)",
                             hint: stores.isEmpty ? "the repository holds no snapshot" : "its stores: " + Format.list(stores) + extra)
    }
}
