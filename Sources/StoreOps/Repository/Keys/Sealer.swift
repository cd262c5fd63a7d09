import Crypto
import Foundation
import Synchronization

/// Seals and opens the objects of a format-2 repository, and makes the content ids of what it
/// stores.
///
/// Encrypted: AES-256-GCM with a random 96-bit nonce per object and the object's identity (its
/// kind and name, e.g. `snapshot:20261122T…` or `frame:<digest of its blob ids>`) as associated
/// data, so a sealed object put under another name fails to open. Layout:
/// `nonce (12) | ciphertext | tag (16)`. Content ids are HMAC-SHA-256 under the identity key.
///
/// Plain (`repo init --insecure-no-encryption`): `plaintext | SHA-256(identity | 0x00 | plaintext)`,
/// so damage is still found (not tampering: anyone can recompute the check), and content ids are
/// SHA-256.
///
/// Layout 2 (`idBytes` 16, what `repo init` makes now): content ids are the first 16 bytes
/// of that digest, and frames are sealed as `frame` (their pack header lists no ids).
// @unchecked: HMAC<SHA256> is a value (copied before each use) that swift-crypto does not mark Sendable.
public struct Sealer: @unchecked Sendable {
    public let master: MasterKey?
    public var isEncrypted: Bool { master != nil }
    private let keyedHash: HMAC<SHA256>?
    /// 16 (layout 2) or 32 (layout 1): the bytes of a content id, and so the repository's layout.
    public let idBytes: Int
    /// Layout 2: 16-byte ids, pack headers without ids, indexes in runs (`docs/repository-format.md`).
    public var isCompact: Bool { idBytes == 16 }

    /// Bytes a sealed object has beyond its plaintext.
    public var overhead: Int { isEncrypted ? Self.encryptedOverhead : 32 }
    public static let encryptedOverhead = 12 + 16

    public init(master: MasterKey?, idBytes: Int = 16) {
        self.master = master
        self.idBytes = idBytes == 32 ? 32 : 16
        keyedHash = master.map { HMAC<SHA256>(key: $0.identity) }
    }

    /// The content id of `bytes`.
    public func contentID(_ bytes: UnsafeRawBufferPointer) -> ContentID {
        let id: ContentID
        if var hmac = keyedHash {
            hmac.update(data: bytes)
            id = hmac.finalize().withUnsafeBytes { ContentID(bytes: $0) } ?? .zero
        } else {
            id = SHA256.hash(data: bytes).withUnsafeBytes { ContentID(bytes: $0) } ?? .zero
        }
        return id.truncated(to: idBytes)
    }

    /// The identity a frame holding `ids` is sealed as: layout 1, `frame:` and the SHA-256 (hex)
    /// of its blobs' ids in order (a frame moved elsewhere, or listed with other blobs, fails to
    /// open); layout 2, `frame` (its header lists no ids, so `repo repair` can open it; every
    /// blob read is still checked against the id it is read for).
    func frameIdentity(_ ids: @autoclosure () -> [ContentID]) -> String {
        isCompact ? "frame" : FrameEntry.identity(ids())
    }

    public func contentID(_ data: Data) -> ContentID { data.withUnsafeBytes { contentID($0) } }
    public func contentID(_ bytes: [UInt8]) -> ContentID { bytes.withUnsafeBytes { contentID($0) } }

    /// Seals `plaintext` as the object `identity`.
    public func seal(_ plaintext: Data, as identity: String) throws -> Data {
        guard let master else {
            var out = plaintext
            out.append(Self.plainCheck(plaintext, identity: identity))
            return out
        }
        do {
            let box = try AES.GCM.seal(plaintext, using: master.encryption, authenticating: Data(identity.utf8))
            guard let combined = box.combined else { throw StoreOpsError(.failure, "AES-GCM produced no combined box") }
            return combined
        } catch let error as StoreOpsError { throw error } catch {
            throw StoreOpsError(.failure, "sealing \(identity): \(error)")
        }
    }

    /// Opens the object `identity`, named `what` in errors (its key or file); a box that fails
    /// authentication (damaged, tampered with, or sealed under another key or name) is exit 65.
    public func open(_ sealed: Data, as identity: String, what: String) throws -> Data {
        guard sealed.count >= overhead else {
            throw StoreOpsError(.badData, "\(what): \(sealed.count) bytes, too short to be a sealed object; it is damaged", hint: Self.damagedHint)
        }
        guard let master else {
            let plaintext = sealed.prefix(sealed.count - 32)
            guard Self.plainCheck(plaintext, identity: identity) == sealed.suffix(32) else {
                throw StoreOpsError(.badData, "\(what) fails its checksum: it is damaged or was changed", hint: Self.damagedHint)
            }
            return Data(plaintext)
        }
        do {
            return try AES.GCM.open(try AES.GCM.SealedBox(combined: sealed), using: master.encryption, authenticating: Data(identity.utf8))
        } catch {
            throw StoreOpsError(.badData, "\(what) fails authentication: it is damaged, was changed, or belongs to another repository",
                                hint: Self.damagedHint)
        }
    }

    static func plainCheck<D: DataProtocol>(_ plaintext: D, identity: String) -> Data {
        var hasher = SHA256()
        hasher.update(data: Data(identity.utf8))
        hasher.update(data: Data([0]))
        hasher.update(data: plaintext)
        return Data(hasher.finalize())
    }

    /// The repositories this process opened: a damage hint names the repository when there is one.
    static let opened = Mutex<Set<String>>([])

    static var damagedHint: String {
        let locations = opened.withLock { $0 }
        let repo = locations.count == 1 ? " --repo \(locations.first ?? "")" : ""
        return "`storectl repo check\(repo) --read-data` lists every damaged object (`storectl repo repair\(repo)` rebuilds a damaged index); restore another snapshot or point"
    }
}
