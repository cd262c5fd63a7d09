import Foundation

/// Where a repository is (a folder, or an `s3://` URL) and how to open what is there.
public enum RepositoryLocation {
    /// A folder as an absolute path; an `s3://` URL as it is.
    public static func normalize(_ location: String) -> String {
        S3Backend.isS3(location) ? location : FileSystem.absolute(location)
    }

    /// A blank --repo (an unset variable) is 64, not the current folder.
    public static func refuseBlank(_ location: String) throws {
        guard location.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else { return }
        throw StoreOpsError(.usage, "--repo is blank", hint: "name the repository's folder or s3://bucket/prefix (an unset variable gives an empty value)")
    }

    /// What to suggest when there is no repository at the location: commands that make snapshots
    /// suggest `repo init`; commands that only read are more likely given a mistyped --repo, so
    /// they are told the repositories that do exist next to it.
    public enum Missing: Sendable {
        case initHint
        case lookAround
    }

    /// How to bring an older repository's snapshots into today's format.
    static func convertHint(_ location: String) -> String {
        "make a new repository (`storectl repo init --repo NEW`) and bring its snapshots over with `storectl repo convert \(location) --repo NEW`"
    }

    /// The backend at `location`, checked to hold a repository of today's format (66 none, 65
    /// something else, or a format-1 repository, with the command that converts it).
    static func backend(_ location: String, missing: Missing) throws -> any RepositoryBackend {
        try refuseBlank(location)
        if S3Backend.isS3(location) {
            let backend = try S3Backend(url: location)
            guard try backend.read(RepositoryConfig.key) != nil else {
                let listed = try backend.list("")
                if listed.isEmpty {
                    throw StoreOpsError(.noInput, "there is no snapshot repository at \(backend.location)",
                                        hint: missing == .initHint
                                            ? "make one first: `storectl repo init --repo \(backend.location)` (storectl does not make repositories implicitly)"
                                            : "check --repo (the bucket and prefix)")
                }
                // The repositories below it, by their configs (a new machine's operator named the
                // bucket's top prefix and had to list the bucket by hand to find them).
                let suffix = "/" + RepositoryConfig.key
                let below = listed.map(\.key).filter { $0.hasSuffix(suffix) && !$0.contains("/data/") && !$0.contains("/index/") }
                    .map { "\(backend.location)/\($0.dropLast(suffix.count))" }.sorted()
                throw StoreOpsError(.badData, "\(backend.location) holds objects but no config: it is not a storectl repository"
                                    + (below.isEmpty ? "" : "; repositories below it: " + Format.list(below, first: 10)),
                                    hint: below.isEmpty ? "check --repo (a repository needs a prefix of its own)" : "name one of them with --repo")
            }
            return backend
        }
        let absolute = FileSystem.absolute(location)
        switch FileSystem.kind(of: absolute) {
        case .missing:
            throw StoreOpsError(.noInput, "there is no snapshot repository at \(absolute)", hint: missingHint(absolute, missing))
        case .directory: break
        default:
            // A store's path given as --repo is the usual cause (a new user's trial).
            throw StoreOpsError(.badData, "\(absolute) is not a folder, so not a snapshot repository",
                                hint: "--repo names a repository's folder, not a store" + { $0.isEmpty ? "" : "; repositories next to it: " + $0.joined(separator: ", ") }(nearbyRepositories(absolute)))
        }
        if access(absolute, R_OK | X_OK) != 0, errno == EACCES {
            // Not "empty" (its files cannot be listed): a service user other than the one that
            // made the repository is the usual cause.
            throw StoreOpsError(.noInput, "cannot read the repository \(absolute): permission denied\(ownerAndMode(absolute).map { " (\($0))" } ?? "")",
                                hint: "run storectl as the user that owns it, or give this user (uid \(getuid())) read access to the folder and its files")
        }
        if FormatOneRepository.isOne(absolute) {
            throw StoreOpsError(.badData, "\(absolute) is a format-1 repository (made by an earlier storectl), which this storectl only converts",
                                hint: convertHint(absolute))
        }
        let backend = LocalBackend(root: absolute)
        if FileSystem.kind(of: backend.path(RepositoryConfig.key)) == .missing {
            let contents = ((try? FileManager.default.contentsOfDirectory(atPath: absolute)) ?? []).filter { !$0.hasPrefix(".") }
            if contents.isEmpty {
                throw StoreOpsError(.noInput, "\(absolute) is an empty folder, not a snapshot repository yet", hint: missingHint(absolute, missing))
            }
            // A repository's folders without its config: a config lost (it is the repository's
            // identity and key check), said as the damaged-config message says what to do.
            let looksLikeOne = ["data", "index", "keys", "snapshots"].allSatisfy { contents.contains($0) }
            throw StoreOpsError(.badData, "\(absolute) is not a storectl snapshot repository (it has no config)"
                                + (looksLikeOne ? ", though it has a repository's folders (data, index, keys, snapshots): its config is missing" : ""),
                                hint: looksLikeOne ? "put back the config from a copy of the repository (a backup, another copy of the folder): without it nothing in it can be opened"
                                    : missing == .initHint ? "check --repo" : missingHint(absolute, missing))
        }
        return backend
    }

    /// "owner root, mode 0700" of a path, for permission errors.
    static func ownerAndMode(_ path: String) -> String? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        let owner = getpwuid(info.st_uid).flatMap { $0.pointee.pw_name.map { String(cString: $0) } } ?? "uid \(info.st_uid)"
        return "owner \(owner), mode \(String(format: "%04o", info.st_mode & 0o7777))"
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
                || FormatOneRepository.isOne(path)
        }
        return repositories.sorted { (editDistance($0, name), $0) < (editDistance($1, name), $1) }
            .prefix(5).map { (parent as NSString).appendingPathComponent($0) }
    }

    public static func editDistance(_ a: String, _ b: String) -> Int {
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

extension PagedRepository {
    /// Opens the repository at `location` (a folder or an `s3://` URL), asking for the password
    /// only when it is encrypted.
    ///
    /// - Throws: 66 when there is no repository (with the `repo init` command to make one), 65
    ///   when the folder is something else, damaged, or an older format (naming `repo convert`),
    ///   77 for a wrong password.
    public static func open(at location: String, password: PasswordSource,
                            missing: RepositoryLocation.Missing = .lookAround) throws -> PagedRepository {
        try open(try RepositoryLocation.backend(location, missing: missing), password: password)
    }
}
