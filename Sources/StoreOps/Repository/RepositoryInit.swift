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

    /// A new repository may go at a missing path (in an existing folder) or in an empty folder.
    static func checkTarget(_ absolute: String) throws -> FileSystem.Kind {
        let kind = FileSystem.kind(of: absolute)
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
}
