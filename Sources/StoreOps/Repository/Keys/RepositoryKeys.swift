import Foundation
import Logging

/// `storectl key list|add|remove|passwd`: the passwords that open an encrypted format-2
/// repository. Each key file wraps the same master key under one password, so adding or removing
/// one re-encrypts nothing. Changes take the repository exclusively; a new key file is written
/// (durably) before an old one is removed, so a crash leaves one key or the other, never none.
public enum RepositoryKeys {
    public struct Entry: Sendable, Codable {
        public var id: String
        public var created: Date
        public var host: String
        public var user: String
        /// The key this run opened the repository with.
        public var current: Bool
    }

    public struct Options: Sendable {
        public var location: String
        public var password: PasswordSource
        /// Where the new password comes from (`key add`, `key passwd`).
        public var newPassword: PasswordSource
        public var wait = false
        /// scrypt's N for a new key (tests lower it).
        public var kdfN = KeyFile.defaultN

        public init(location: String, password: PasswordSource, newPassword: PasswordSource = .prompt, wait: Bool = false) {
            self.location = location
            self.password = password
            self.newPassword = newPassword
            self.wait = wait
        }
    }

    /// Opens the encrypted repository (64 for a plain repository: it has no keys).
    static func open(_ options: Options) throws -> PagedRepository {
        try encrypted(try PagedRepository.open(at: options.location, password: options.password))
    }

    static func encrypted(_ repository: PagedRepository) throws -> PagedRepository {
        guard repository.config.isEncrypted else {
            throw StoreOpsError(.usage, "\(repository.location) is not encrypted (made with --insecure-no-encryption): it has no keys")
        }
        return repository
    }

    /// A key change as a road: the repository alone (lock), checked to have keys (preflight), the change.
    static func change<T>(_ options: Options, _ operation: String, _ body: @escaping (PagedRepository) throws -> T) throws -> T {
        let pipeline = Pipeline(operation: operation)
        var road = PlannedRoad<PagedRepository, T>(lock: .none, wait: options.wait, actName: "change",
                                                   preflight: { pipeline in try encrypted(try pipeline.repository) },
                                                   act: { _, repository in try body(repository) })
        road.repository = .init(options.location, password: options.password, exclusive: true)
        return try pipeline.walk(road).get()
    }

    public static func list(_ options: Options) throws -> [Entry] {
        let repository = try open(options)
        let files = try PagedRepository.keyFiles(repository.backend)
        // A key file that cannot be read is said (it was left out without a word; repo check names it).
        for (key, problem) in files.damaged {
            Logger(label: "storectl.key").warning("\(repository.backend.describe(key)) \(problem): not listed; the password it held no longer opens the repository (put back a copy of it, or remove it with the password of another key)")
        }
        return files.keys
            .map { Entry(id: $0.id, created: $0.created, host: $0.host, user: $0.user, current: $0.id == repository.keyID) }
            .sorted { ($0.created, $0.id) < ($1.created, $1.id) }
    }

    /// Adds a key for a new password; returns its id.
    public static func add(_ options: Options) throws -> String {
        try change(options, "key add") { repository in
            try write(repository, password: try options.newPassword.read(purpose: "new password for \(repository.location)", confirm: true),
                      keys: try PagedRepository.keyFiles(repository.backend).keys, options: options, point: "key.add")
        }
    }

    /// Replaces the key this run opened with one for a new password.
    public static func passwd(_ options: Options) throws -> (added: String, removed: String) {
        try change(options, "key passwd") { repository in
            guard let old = repository.keyID else { throw StoreOpsError(.failure, "no key opened \(repository.location)") }
            let password = try options.newPassword.read(purpose: "new password for \(repository.location)", confirm: true)
            // A passwd killed between adding the new key and removing the old one left both: the
            // same command again finishes it, the key the new password opens to the same master key
            // standing in for the one it would add. Only a key this user made on this host after
            // the old one: another person's key with the same password is refused as before (two
            // people sharing a key would lose it together at the next passwd or remove).
            let keys = try PagedRepository.keyFiles(repository.backend).keys
            let oldCreated = keys.first { $0.id == old }?.created ?? .distantFuture
            let added: String
            if let master = repository.sealer.master, let left = keys.first(where: {
                $0.id != old && $0.host == ProcessInfo.processInfo.hostName && $0.user == UserName.current && $0.created >= oldCreated
                    && (try? $0.open(password: password)) == master
            }) {
                added = left.id
            } else {
                added = try write(repository, password: password, keys: keys, options: options, point: "key.passwd.add")
            }
            try repository.backend.remove("keys/\(old)", point: "key.passwd.remove")
            return (added, old)
        }
    }

    /// Removes a key (never the one used to open the repository, so one that works always stays).
    /// `id`: a key's id or the start of one (as snapshot ids are given), naming one key.
    /// Returns the whole id of the key removed.
    @discardableResult
    public static func remove(_ options: Options, id given: String) throws -> String {
        try change(options, "key remove") { repository in
            let lowered = given.lowercased()
            guard (1...16).contains(lowered.count), lowered.allSatisfy(\.isHexDigit) else {
                throw StoreOpsError(.usage, "\"\(given)\" is not a key id (16 hex digits, or the start of them)",
                                    hint: "`storectl key list --repo \(repository.location)` shows them")
            }
            let ids = try repository.backend.list("keys/").map { FileSystem.name(of: $0.key) }
            let matches = ids.contains(lowered) ? [lowered] : ids.filter { $0.hasPrefix(lowered) }
            guard matches.count <= 1 else {
                throw StoreOpsError(.usage, "\"\(given)\" starts \(matches.count) key ids: \(matches.sorted().joined(separator: ", "))",
                                    hint: "give more of the id, enough to name one key")
            }
            guard let id = matches.first else {
                throw StoreOpsError(.noInput, "the repository \(repository.location) has no key \(given)", hint: "`storectl key list --repo \(repository.location)` shows them")
            }
            guard id != repository.keyID else {
                throw StoreOpsError(.usage, "key \(id) is the one this password opens; removing it could lock you out",
                                    hint: "open the repository with another key's password to remove this one, or use `storectl key passwd`")
            }
            guard try repository.backend.size("keys/\(id)") != nil else {
                throw StoreOpsError(.noInput, "the repository \(repository.location) has no key \(id)", hint: "`storectl key list` shows them")
            }
            try repository.backend.remove("keys/\(id)", point: "key.remove")
            return id
        }
    }

    /// - Parameter keys: the repository's key files, as the caller listed them.
    private static func write(_ repository: PagedRepository, password: Data, keys: [KeyFile], options: Options, point: String) throws -> String {
        guard let master = repository.sealer.master else { throw StoreOpsError(.failure, "the repository is not open") }
        // Two keys for one password would make removing "the old password" leave it working.
        for existing in keys where (try? existing.open(password: password)) != nil {
            let which = existing.id == repository.keyID ? "the key this run opened the repository with (\(existing.id))" : "key \(existing.id)"
            throw StoreOpsError(.usage, "the new password already opens \(which); a second key for it is not made",
                                hint: point == "key.passwd.add" && existing.id == repository.keyID
                                    ? "choose a password other than the current one" : "choose another password, or keep using that key")
        }
        let file = try KeyFile.make(master, password: password, n: options.kdfN)
        try repository.backend.write("keys/\(file.id)", try JSON.encode(file), point: point)
        return file.id
    }
}
