import Crypto
import _CryptoExtras
import Foundation

/// One way into an encrypted repository: the master key sealed under a key derived from a
/// password with scrypt. A repository has one key file per password (`storectl key add`);
/// removing one (`key remove`) revokes that password without re-encrypting anything.
///
/// `keys/<id>` holds JSON: `{ "format": "storectl-key", "formatVersion": 1, "id", "created",
/// "host", "user", "kdf": { "name": "scrypt", "n", "r", "p", "salt" (base64, 32 bytes) },
/// "sealed" (base64 of AES-256-GCM `nonce | ciphertext | tag` of the 64-byte master key, with
/// `key:<id>` as associated data) }`.
public struct KeyFile: Sendable, Codable, Equatable {
    public struct Derivation: Sendable, Codable, Equatable {
        public var name = "scrypt"
        public var n: Int
        public var r: Int
        public var p: Int
        public var salt: String
    }

    public var format = "storectl-key"
    public var formatVersion = 1
    public var id: String
    public var created: Date
    public var host: String
    public var user: String
    public var kdf: Derivation
    public var sealed: String

    /// scrypt's cost: N = 2^15, r = 8, p = 1 (about 32 MiB and a tenth of a second), as restic uses.
    ///
    /// The tests' child processes lower it with `STORECTL_TEST_KDF_N` (a power of two from
    /// `minimumN` to 2^15; anything else is ignored): a repository the tests make with `repo init`
    /// is opened by many storectl runs, and at 2^15 each paid 0.1 s of CPU and 32 MiB (44 CPU
    /// seconds of a suite run, 1,422 runs). It only ever lowers the cost of keys *written*; what a
    /// key file asks for is read from the file.
    public static let defaultN: Int = {
        let standard = 1 << 15
        guard let text = ProcessInfo.processInfo.environment["STORECTL_TEST_KDF_N"], let n = Int(text),
              n >= minimumN, n <= standard, n & (n - 1) == 0 else { return standard }
        return n
    }()
    /// The most a key file may ask for: what `repo init` and `key add` write (N 2^15, r 8, p 1:
    /// 32 MiB). Anyone who can write the repository's `keys/` could otherwise make every command,
    /// every scheduled job, allocate gigabytes and spin for half a minute before "wrong password"
    /// (N 2^22 took 4.2 GB and 17-25 s). Larger values are refused as a damaged key file.
    public static let maximumN = 1 << 15, maximumR = 8, maximumP = 1
    /// The fewest: below N 2^10 a key file protects nothing (tests use 2^10).
    public static let minimumN = 1 << 10

    /// Seals `master` under `password`.
    public static func make(_ master: MasterKey, password: Data, n: Int = defaultN) throws -> KeyFile {
        let id = Data((0..<8).map { _ in UInt8.random(in: 0...255) }).map { String(format: "%02x", $0) }.joined()
        let salt = Data((0..<32).map { _ in UInt8.random(in: 0...255) })
        let kdf = Derivation(n: n, r: 8, p: 1, salt: salt.base64EncodedString())
        let wrapping = try derive(password, kdf: kdf)
        let box = try AES.GCM.seal(master.bytes, using: wrapping, authenticating: Data("key:\(id)".utf8))
        guard let combined = box.combined else { throw StoreOpsError(.failure, "AES-GCM produced no combined box") }
        return KeyFile(id: id, created: Timestamp.now(), host: ProcessInfo.processInfo.hostName,
                       user: UserName.current, kdf: kdf, sealed: combined.base64EncodedString())
    }

    /// The master key, or nil when `password` is not this key's.
    ///
    /// - Throws: 65 when the key file itself is damaged (parameters out of range, not base64).
    public func open(password: Data) throws -> MasterKey? {
        let wrapping = try Self.derive(password, kdf: kdf, file: id)
        guard let sealedBytes = Data(base64Encoded: sealed), sealedBytes.count == 64 + Sealer.encryptedOverhead else {
            throw StoreOpsError(.badData, "key \(id): its sealed master key is damaged", hint: "use another key of the repository")
        }
        guard let box = try? AES.GCM.SealedBox(combined: sealedBytes),
              let bytes = try? AES.GCM.open(box, using: wrapping, authenticating: Data("key:\(id)".utf8)) else { return nil }
        return MasterKey(bytes: bytes)
    }

    /// scrypt with the file's parameters, refusing values a damaged or hostile file could use to
    /// exhaust memory or time.
    static func derive(_ password: Data, kdf: Derivation, file: String = "new") throws -> SymmetricKey {
        // Checked before anything is derived or allocated; N·r·128 bytes is at most 32 MiB.
        guard kdf.name == "scrypt", (minimumN...maximumN).contains(kdf.n), kdf.n & (kdf.n - 1) == 0, (1...maximumR).contains(kdf.r),
              (1...maximumP).contains(kdf.p), let salt = Data(base64Encoded: kdf.salt), salt.count >= 16 else {
            throw StoreOpsError(.badData, "key file keys/\(file): its key derivation parameters are not ones storectl writes (\(kdf.name) N \(kdf.n), r \(kdf.r), p \(kdf.p); storectl writes scrypt N 2^15, r 8, p 1 and reads N from 2^10 to 2^15, r up to 8, p 1, and a salt of 16 bytes or more); nothing was derived",
                                hint: "the key file is damaged or was written by someone else; use another key of the repository (`storectl key list`), and check who can write the repository's keys/")
        }
        do {
            return SymmetricKey(data: try scrypt(password, salt: salt, n: kdf.n, r: kdf.r, p: kdf.p, bytes: 32))
        } catch {
            throw StoreOpsError(.failure, "deriving the key of \(file): \(error)")
        }
    }

    /// scrypt (RFC 7914) as key files use it: N is scrypt's cost ("rounds" in swift-crypto).
    public static func scrypt(_ password: Data, salt: Data, n: Int, r: Int, p: Int, bytes: Int) throws -> Data {
        try KDF.Scrypt.deriveKey(from: password, salt: salt, outputByteCount: bytes, rounds: n, blockSize: r,
                                 parallelism: p, maxMemory: 64 << 20).withUnsafeBytes { Data($0) }
    }
}
