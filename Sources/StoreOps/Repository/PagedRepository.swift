import Foundation
import Synchronization

/// A format-2 repository: content-addressed pages in encrypted packs (see
/// `docs/repository-format.md` for every object's byte layout).
///
///     config                 what the repository is (plain JSON, written last by init)
///     keys/<id>              the master key, wrapped by a password (encrypted repositories)
///     data/<xx>/<pack id>    packs: sealed zstd frames of blobs (pages, page maps, file chunks)
///     index/<id>             sealed lists of what each pack holds
///     snapshots/<id>         sealed snapshot records: the commit point of a snapshot
///     locks/<id>             who is using the repository (shared or exclusive)
///     verified/<id>.json     when each snapshot was last verified (local only)
public final class PagedRepository: Sendable {
    public static let formatVersion = 2
    public let backend: any RepositoryBackend
    public let config: RepositoryConfig
    public let sealer: Sealer
    /// The key file that opened it (encrypted repositories).
    public let keyID: String?

    init(backend: any RepositoryBackend, config: RepositoryConfig, sealer: Sealer, keyID: String?) {
        self.backend = backend
        self.config = config
        self.sealer = sealer
        self.keyID = keyID
    }

    public var location: String { backend.location }

    /// What a plain repository's commands print once.
    public var plainWarning: String? {
        config.isEncrypted ? nil : "the repository \(location) is NOT encrypted (made with --insecure-no-encryption)"
    }

    // MARK: - Opening

    /// Opens the repository, asking `password` only if it is encrypted. A repository of layout 1
    /// (256-bit content ids, as the first format-2 builds made them) is opened only to be
    /// converted (`oldLayout`); anything else is told to convert it first.
    ///
    /// - Throws: 66 when there is no repository, 65 when it is damaged, newer, or of layout 1,
    ///   77 when no key opens with the password.
    public static func open(_ backend: any RepositoryBackend, password: PasswordSource, oldLayout: Bool = false) throws -> PagedRepository {
        Sealer.opened.withLock { $0.insert(backend.location) }
        guard let config = try RepositoryConfig.read(from: backend) else {
            throw StoreOpsError(.noInput, "there is no storectl repository at \(backend.location)",
                                hint: "check --repo, or make one with `storectl repo init --repo \(backend.location)`")
        }
        guard config.idBytes == 16 || oldLayout else {
            throw StoreOpsError(.badData, "\(backend.location) is a format-2 repository of layout 1 (made by an earlier storectl), which this storectl only converts",
                                hint: RepositoryLocation.convertHint(backend.location))
        }
        guard config.isEncrypted else {
            let repository = PagedRepository(backend: backend, config: config, sealer: Sealer(master: nil, idBytes: config.idBytes), keyID: nil)
            repository.plainWarning.map(Notices.say)
            return repository
        }
        let secret = try password.read(purpose: "password for \(backend.location)")
        // scrypt (32 MiB, ~0.3 s) once per repository, password and key files in a run: a key
        // file changed or removed since is opened afresh.
        var keyBytes = Data(secret)
        for (key, size) in try backend.list("keys/") where size < 1 << 20 { keyBytes.append(try backend.read(key) ?? Data()) }
        let cacheKey = "\(backend.location)\u{0}\(config.id)\u{0}\(Hashing.sha256(keyBytes))"
        let (master, keyID): (MasterKey, String)
        do {
            (master, keyID) = try unlocked.withLock { $0[cacheKey] } ?? unlock(backend, config: config, password: secret)
        } catch let error as StoreOpsError where error.kind == .wrongPassword && error.message.hasPrefix("wrong password") {
            // A key made from a CRLF password file by a storectl before it read such files right.
            guard let legacy = password.legacyFileLine, let opened = try? unlock(backend, config: config, password: legacy) else {
                throw StoreOpsError(error.kind, error.message, hint: password.wrongPasswordHint)
            }
            (master, keyID) = opened
        }
        unlocked.withLock { $0[cacheKey] = (master, keyID) }
        return PagedRepository(backend: backend, config: config, sealer: Sealer(master: master, idBytes: config.idBytes), keyID: keyID)
    }

    /// Master keys this run has unlocked, by repository and the digest of password and key files.
    private static let unlocked = Mutex<[String: (MasterKey, String)]>([:])

    /// Every key file of the repository, read and parsed (damaged ones reported, not fatal).
    static func keyFiles(_ backend: any RepositoryBackend) throws -> (keys: [KeyFile], damaged: [(key: String, problem: String)]) {
        var keys: [KeyFile] = []
        var damaged: [(key: String, problem: String)] = []
        for (key, size) in try backend.list("keys/") {
            guard size < 1 << 20, let data = try backend.read(key) else { damaged.append((key, "is not a key file (size \(size))")); continue }
            do {
                let file = try JSON.decoder().decode(KeyFile.self, from: data)
                guard file.format == "storectl-key", file.formatVersion <= 1, "keys/\(file.id)" == key else {
                    damaged.append((key, "does not describe key \(FileSystem.name(of: key))"))
                    continue
                }
                keys.append(file)
            } catch {
                damaged.append((key, "is damaged (\(JSON.describe(error)))"))
            }
        }
        return (keys, damaged)
    }

    /// The master key the password opens, checked against `config`.
    static func unlock(_ backend: any RepositoryBackend, config: RepositoryConfig, password: Data) throws -> (MasterKey, String) {
        let (keys, damaged) = try keyFiles(backend)
        var problems: [String] = damaged.map { "\(backend.describe($0.key)) \($0.problem)" }
        var tried = 0   // key files whose parameters were valid, so the password was really tried
        for file in keys {
            let master: MasterKey?
            do { master = try file.open(password: password) } catch let error as StoreOpsError {
                problems.append(error.message)
                continue
            }
            tried += 1
            guard let master else { continue }
            guard let check = config.keyCheck.flatMap({ Data(base64Encoded: $0) }),
                  (try? Sealer(master: master).open(check, as: config.checkIdentity, what: "config")) == config.checkPlaintext else {
                throw StoreOpsError(.badData, "key \(file.id) opens with this password but does not belong to the repository \(backend.location) (its key check fails)",
                                    hint: "the key file or config was copied from another repository or changed")
            }
            return (master, file.id)
        }
        if tried == 0 {
            throw StoreOpsError(.badData, "the encrypted repository \(backend.location) has no readable key file\(problems.isEmpty ? "" : ": " + problems.joined(separator: "; "))",
                                hint: "restore keys/ from a copy of the repository")
        }
        if !problems.isEmpty {
            // The password may be a damaged key's: damage (65), not a wrong password (77).
            throw StoreOpsError(.badData, "no readable key of \(backend.location) opens with this password (\(Format.plural(tried, "key", "keys")) tried), and a key file is damaged, so it may be this password's: \(problems.joined(separator: "; "))",
                                hint: "restore keys/ from a copy of the repository; if the password is wrong, check --password-file, STORECTL_PASSWORD_FILE or STORECTL_PASSWORD_COMMAND")
        }
        throw StoreOpsError(.wrongPassword, "wrong password: none of the \(Format.plural(tried, "key", "keys")) of \(backend.location) opens with it",
                            hint: "check --password-file, STORECTL_PASSWORD_FILE or STORECTL_PASSWORD_COMMAND")
    }

    // MARK: - Init

    public struct InitOptions: Sendable {
        public var encrypted = true
        /// scrypt's N (tests lower it).
        public var kdfN = KeyFile.defaultN
        public init(encrypted: Bool = true, kdfN: Int = KeyFile.defaultN) {
            self.encrypted = encrypted
            self.kdfN = kdfN
        }
    }

    /// Writes a new repository's key and, last, its `config`.
    static func initialize(_ backend: any RepositoryBackend, password: Data?, options: InitOptions) throws -> PagedRepository {
        let id = (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        var config = RepositoryConfig(id: id, encryption: options.encrypted ? "aes-256-gcm" : "none",
                                      contentIDs: RepositoryConfig.contentIDs(encrypted: options.encrypted, idBytes: 16),
                                      createdAt: Timestamp.now())
        try backend.prepare()
        var master: MasterKey?
        var keyID: String?
        if options.encrypted {
            guard let password else { throw StoreOpsError(.usage, "an encrypted repository needs a password") }
            let key = MasterKey.random()
            let file = try KeyFile.make(key, password: password, n: options.kdfN)
            try backend.write("keys/\(file.id)", try JSON.encode(file), point: "repo.init.key")
            config.keyCheck = try Sealer(master: key).seal(config.checkPlaintext, as: config.checkIdentity).base64EncodedString()
            (master, keyID) = (key, file.id)
        }
        try backend.write(RepositoryConfig.key, try JSON.encode(config), point: "repo.init.config")
        return PagedRepository(backend: backend, config: config, sealer: Sealer(master: master, idBytes: config.idBytes), keyID: keyID)
    }
}
