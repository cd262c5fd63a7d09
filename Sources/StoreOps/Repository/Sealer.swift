import Crypto
import Foundation

/// Seals and opens the objects of a repository, and makes the content ids of what it stores.
///
/// Encrypted: AES-256-GCM with a random 96-bit nonce per object, the object's identity (its kind
/// and name, e.g. `pack:3f2a…` or `snapshot:20261122T…`) as associated data, so a sealed object
/// moved under another name fails to open. Layout: `nonce (12) | ciphertext | tag (16)`. Content
/// ids are HMAC-SHA-256 under the repository's identity key. Plain (`--insecure-no-encryption`):
/// objects are stored as they are and content ids are SHA-256.
public struct Sealer: Sendable {
    public let master: MasterKey?
    public var isEncrypted: Bool { master != nil }

    public static let overhead = 12 + 16

    public init(master: MasterKey?) { self.master = master }

    /// The content id of `bytes`: 32 bytes (hex in names).
    public func contentID(_ bytes: UnsafeRawBufferPointer) -> ContentID {
        if let master {
            var hmac = HMAC<SHA256>(key: master.identity)
            hmac.update(data: bytes)
            return ContentID(Data(hmac.finalize()))
        }
        return ContentID(Data(SHA256.hash(data: bytes)))
    }

    public func contentID(_ data: Data) -> ContentID { data.withUnsafeBytes { contentID($0) } }

    /// Seals `plaintext` as the object `identity` ("kind:name").
    public func seal(_ plaintext: Data, as identity: String) throws -> Data {
        guard let master else { return plaintext }
        do {
            let box = try AES.GCM.seal(plaintext, using: master.encryption, authenticating: Data(identity.utf8))
            guard let combined = box.combined else { throw StoreOpsError(.failure, "AES-GCM produced no combined box") }
            return combined
        } catch let error as StoreOpsError { throw error } catch {
            throw StoreOpsError(.failure, "sealing \(identity): \(error)")
        }
    }

    /// Opens the object `identity`; a box that fails authentication (damaged, tampered with, or
    /// sealed under another key or name) is exit 65 naming it.
    public func open(_ sealed: Data, as identity: String) throws -> Data {
        guard let master else { return sealed }
        guard sealed.count >= Self.overhead else {
            throw StoreOpsError(.badData, "\(identity): \(sealed.count) bytes, shorter than a sealed object", hint: Self.damagedHint)
        }
        do {
            return try AES.GCM.open(try AES.GCM.SealedBox(combined: sealed), using: master.encryption, authenticating: Data(identity.utf8))
        } catch {
            throw StoreOpsError(.badData, "\(identity) fails authentication: it is damaged, was changed, or belongs to another repository",
                                hint: Self.damagedHint)
        }
    }

    static let damagedHint = "`storectl repo check --read-data` lists every damaged object; restore from another snapshot or repository"
}

/// A content id: the HMAC-SHA-256 (or SHA-256) of what is stored.
public struct ContentID: Hashable, Sendable, Comparable, CustomStringConvertible, Codable {
    public let bytes: Data
    public init(_ bytes: Data) { self.bytes = bytes }

    public init?(hex: String) {
        guard hex.count == 64 else { return nil }
        var data = Data(capacity: 32)
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            guard let byte = UInt8(hex[index..<next], radix: 16) else { return nil }
            data.append(byte)
            index = next
        }
        bytes = data
    }

    public var hex: String { bytes.map { String(format: "%02x", $0) }.joined() }
    public var description: String { hex }
    public static func < (a: ContentID, b: ContentID) -> Bool { a.bytes.lexicographicallyPrecedes(b.bytes) }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let id = ContentID(hex: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a content id: \(text)"))
        }
        self = id
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(hex)
    }
}
