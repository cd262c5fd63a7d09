import Foundation

/// `storectl repo init`: makes a new repository (format 2, encrypted unless
/// `--insecure-no-encryption`) in a new or empty folder, or under an empty bucket prefix.
public enum RepositoryInit {
    public struct Options: Sendable {
        public var location: String
        public var encrypted = true
        public var password: PasswordSource
        /// scrypt's N for the first key (tests lower it to keep fast).
        public var kdfN = KeyFile.defaultN

        public init(location: String, encrypted: Bool = true, password: PasswordSource = .resolve(file: nil)) {
            self.location = location
            self.encrypted = encrypted
            self.password = password
        }
    }

    public struct Result: Sendable, Codable {
        public var location: String
        /// Always 2 (kept in `--json` for scripts that read it).
        public var format = PagedRepository.formatVersion
        public var encrypted: Bool
        public var id: String?
        public var keyID: String?
    }

    /// - Throws: 73 when something is already there, 64 for an empty password.
    public static func run(_ options: Options) throws -> Result {
        try RepositoryLocation.refuseBlank(options.location)
        if S3Backend.isS3(options.location) { return try initializeRemote(options) }
        let absolute = FileSystem.absolute(options.location)
        let kind = try checkTarget(absolute)
        let password = options.encrypted ? try options.password.read(purpose: "new password for \(absolute)", confirm: true) : nil
        let parent = FileSystem.parent(of: absolute)
        PendingFile.removeStale(in: parent, prefix: FileSystem.name(of: absolute))
        let staging = try PendingFile(finalPath: absolute, directory: true, label: "repo.init")
        let made = try PagedRepository.initialize(LocalBackend(root: staging.tempPath), password: password,
                                                  options: .init(encrypted: options.encrypted, kdfN: options.kdfN))
        try staging.commit(replacing: kind == .directory)
        return Result(location: absolute, encrypted: options.encrypted, id: made.config.id, keyID: made.keyID)
    }

    /// In a bucket: the prefix must hold nothing but what an interrupted `repo init` left (key
    /// files, no config). The config goes last: until it exists, there is no repository.
    static func initializeRemote(_ options: Options) throws -> Result {
        let backend = try S3Backend(url: options.location)
        try backend.prepare()
        if let outer = try backend.enclosingRepository() {
            throw StoreOpsError(.cannotCreate, "\(backend.location) is inside the repository \(outer): a repository needs a prefix of its own, outside any other",
                                hint: "choose a prefix beside it, not under it (s3://\(backend.bucket)/NEW-PREFIX), or use \(outer) as it is")
        }
        let there = try backend.list("")
        if there.contains(where: { $0.key == RepositoryConfig.key }) {
            throw StoreOpsError(.cannotCreate, "\(backend.location) is already a storectl repository", hint: "use it as it is, or choose another prefix")
        }
        if let other = there.first(where: { !$0.key.hasPrefix("keys/") }) {
            throw StoreOpsError(.cannotCreate, "\(backend.location) is not empty (it holds \(other.key)): a repository needs a prefix of its own",
                                hint: "choose another prefix, s3://\(backend.bucket)/NEW-PREFIX")
        }
        let password = options.encrypted ? try options.password.read(purpose: "new password for \(backend.location)", confirm: true) : nil
        for leftover in there { try backend.remove(leftover.key, point: "repo.init.leftover") }
        let made = try PagedRepository.initialize(backend, password: password, options: .init(encrypted: options.encrypted, kdfN: options.kdfN))
        return Result(location: backend.location, encrypted: options.encrypted, id: made.config.id, keyID: made.keyID)
    }

    /// A new repository may go at a missing path (in an existing folder) or in an empty folder,
    /// outside any other repository.
    static func checkTarget(_ absolute: String) throws -> FileSystem.Kind {
        let kind = FileSystem.kind(of: absolute)
        if let outer = enclosingRepository(absolute) {
            throw StoreOpsError(.cannotCreate, "cannot create the repository \(absolute): it is inside the repository \(outer)",
                                hint: "choose a folder outside it (a repository's folders are its own: its prune and check would see this one's files)")
        }
        switch kind {
        case .missing:
            let parent = FileSystem.parent(of: absolute)
            guard FileSystem.kind(of: parent) == .directory else {
                throw StoreOpsError(.cannotCreate, "cannot create the repository \(absolute): \(parent) does not exist")
            }
        case .directory:
            let contents = ((try? FileManager.default.contentsOfDirectory(atPath: absolute)) ?? []).filter { !$0.hasPrefix(".") }
            if contents.contains(FormatOneRepository.markerName) || contents.contains(RepositoryConfig.key) {
                throw StoreOpsError(.cannotCreate, "\(absolute) is already a storectl repository", hint: "use it as it is, or choose another --repo")
            }
            guard contents.isEmpty else {
                throw StoreOpsError(.cannotCreate, "\(absolute) is not empty: a repository goes in a new or empty folder",
                                    hint: "choose an empty or new folder for --repo")
            }
        default:
            throw StoreOpsError(.cannotCreate, "\(absolute) exists and is not a folder")
        }
        return kind
    }

    /// The nearest folder above `absolute` that is a storectl repository (format 2's `config`
    /// naming itself so, or format 1's marker), if any.
    static func enclosingRepository(_ absolute: String) -> String? {
        var folder = FileSystem.parent(of: absolute)
        while true {
            let config = (folder as NSString).appendingPathComponent(RepositoryConfig.key)
            if FileSystem.kind(of: config) == .file, let handle = FileHandle(forReadingAtPath: config) {
                let head = (try? handle.read(upToCount: 4096)) ?? Data()
                try? handle.close()
                if RepositoryConfig.namesItself(head) { return folder }
            }
            if FileSystem.kind(of: (folder as NSString).appendingPathComponent(FormatOneRepository.markerName)) != .missing { return folder }
            let up = FileSystem.parent(of: folder)
            if up == folder || folder == "/" || folder == "." { return nil }
            folder = up
        }
    }
}
