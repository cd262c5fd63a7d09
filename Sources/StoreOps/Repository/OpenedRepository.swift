import Foundation

/// A snapshot repository of either format, opened: format 1 (one archive per snapshot, readable
/// with bsdtar) or format 2 (content-addressed pages, encrypted by default).
public enum OpenedRepository: Sendable {
    case archives(SnapshotRepository)
    case paged(PagedRepository)

    public var location: String {
        switch self {
        case .archives(let repository): return repository.path
        case .paged(let repository): return repository.location
        }
    }

    /// A folder as an absolute path; an `s3://` URL as it is.
    public static func normalize(_ location: String) -> String {
        S3Backend.isS3(location) ? location : FileSystem.absolute(location)
    }

    /// Whether a password was needed to open it (an encrypted format-2 repository).
    public var isEncrypted: Bool {
        if case .paged(let repository) = self { return repository.config.isEncrypted }
        return false
    }

    /// What to suggest when there is no repository at the location: commands that make snapshots
    /// suggest `repo init`; commands that only read are more likely given a mistyped --repo, so
    /// they are told the repositories that do exist next to it.
    public enum Missing: Sendable {
        case initHint
        case lookAround
    }

    public var format: Int {
        switch self {
        case .archives: return 1
        case .paged: return 2
        }
    }

    /// Opens the repository at `location` (a folder), asking for the password only when it is an
    /// encrypted format-2 repository.
    ///
    /// - Throws: 66 when there is no repository (with the `repo init` command to make one), 65
    ///   when the folder is something else or damaged, 77 for a wrong password.
    public static func open(_ location: String, password: PasswordSource, missing: Missing = .lookAround) throws -> OpenedRepository {
        if S3Backend.isS3(location) {
            let backend = try S3Backend(url: location)
            guard try backend.read(RepositoryConfig.key) != nil else {
                if try backend.list("").isEmpty {
                    throw StoreOpsError(.noInput, "there is no snapshot repository at \(backend.location)",
                                        hint: missing == .initHint
                                            ? "make one first: `storectl repo init --repo \(backend.location)` (storectl does not make repositories implicitly)"
                                            : "check --repo (the bucket and prefix)")
                }
                throw StoreOpsError(.badData, "\(backend.location) holds objects but no config: it is not a storectl repository",
                                    hint: "check --repo (a repository needs a prefix of its own)")
            }
            return .paged(try PagedRepository.open(backend, password: password))
        }
        let absolute = FileSystem.absolute(location)
        switch FileSystem.kind(of: absolute) {
        case .missing:
            throw StoreOpsError(.noInput, "there is no snapshot repository at \(absolute)", hint: missingHint(absolute, missing))
        case .directory: break
        default:
            throw StoreOpsError(.badData, "\(absolute) is not a folder, so not a snapshot repository")
        }
        if FileSystem.kind(of: (absolute as NSString).appendingPathComponent(SnapshotRepository.markerName)) != .missing {
            return .archives(try SnapshotRepository.open(absolute))
        }
        let backend = LocalBackend(root: absolute)
        if FileSystem.kind(of: backend.path(RepositoryConfig.key)) == .missing {
            let contents = ((try? FileManager.default.contentsOfDirectory(atPath: absolute)) ?? []).filter { !$0.hasPrefix(".") }
            if contents.isEmpty {
                throw StoreOpsError(.noInput, "\(absolute) is an empty folder, not a snapshot repository yet", hint: missingHint(absolute, missing))
            }
            throw StoreOpsError(.badData, "\(absolute) is not a storectl snapshot repository (no config or \(SnapshotRepository.markerName))",
                                hint: "check --repo")
        }
        return .paged(try PagedRepository.open(backend, password: password))
    }

    static func missingHint(_ absolute: String, _ missing: Missing) -> String {
        if missing == .initHint {
            return "make one first: `storectl repo init --repo \(absolute)` (storectl does not make repositories implicitly)"
        }
        let nearby = nearbyRepositories(absolute)
        if nearby.isEmpty { return "check --repo: no repository was found next to it in \(FileSystem.parent(of: absolute)) either" }
        return "check --repo; repositories next to it: " + nearby.joined(separator: ", ")
    }

    /// Repositories in the folder `absolute` would be in, the names closest to its name first (at most 5).
    static func nearbyRepositories(_ absolute: String) -> [String] {
        let parent = FileSystem.parent(of: absolute), name = FileSystem.name(of: absolute)
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: parent) else { return [] }
        let repositories = entries.filter { entry in
            guard !entry.hasPrefix("."), entry != name else { return false }
            let path = (parent as NSString).appendingPathComponent(entry)
            guard FileSystem.kind(of: path) == .directory else { return false }
            return FileSystem.kind(of: (path as NSString).appendingPathComponent(RepositoryConfig.key)) == .file
                || FileSystem.kind(of: (path as NSString).appendingPathComponent(SnapshotRepository.markerName)) != .missing
        }
        return repositories.sorted { (editDistance($0, name), $0) < (editDistance($1, name), $1) }
            .prefix(5).map { (parent as NSString).appendingPathComponent($0) }
    }

    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        guard !a.isEmpty else { return b.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in stride(from: 1, through: b.count, by: 1) {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}
