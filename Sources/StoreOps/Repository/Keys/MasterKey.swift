import Crypto
import Foundation

/// The secret of an encrypted repository: a key that seals every object (AES-256-GCM) and a key
/// that makes content ids (HMAC-SHA-256), so the same page in two repositories has different ids.
/// Random, made once by `repo init`; every key file wraps the same master key under its password.
public struct MasterKey: Sendable, Equatable {
    /// The 64 bytes a key file seals: the encryption key, then the identity key.
    let bytes: Data

    public var encryption: SymmetricKey { SymmetricKey(data: bytes.prefix(32)) }
    public var identity: SymmetricKey { SymmetricKey(data: bytes.suffix(32)) }

    /// A new random master key.
    public static func random() -> MasterKey {
        var generator = SystemRandomNumberGenerator()
        return MasterKey(exactly: Data((0..<64).map { _ in UInt8.random(in: 0...255, using: &generator) }))
    }

    init?(bytes: Data) {
        guard bytes.count == 64 else { return nil }
        self.init(exactly: bytes)
    }

    private init(exactly bytes: Data) { self.bytes = Data(bytes) }
}
