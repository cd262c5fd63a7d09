import Crypto
import Foundation

/// `index/<id>`: what a set of packs holds, so readers need not open every pack. Sealed as
/// `index`; its name is the SHA-256 (hex) of its sealed bytes. Plaintext:
///
///     "SIX2" (layout 1) or "SIX3" (layout 2) | u32 packCount | per pack: 32-byte pack id | PackContents
///
/// Writers add an index for their packs after the packs are durable and before any snapshot
/// refers to them; prune writes a new index of what survives before removing old indexes, and
/// removes packs only after that.
struct IndexFile: Sendable {
    static let magic: StaticString = "SIX2"
    static let compactMagic: StaticString = "SIX3"
    static let identity = "index"

    var packs: [(id: ContentID, contents: PackContents)] = []

    var isEmpty: Bool { packs.isEmpty }

    func encode(sealer: Sealer) throws -> (key: String, data: Data) {
        var writer = BinaryWriter()
        writer.magic(Self.compactMagic)
        writer.u32(UInt32(packs.count))
        for pack in packs {
            writer.id(pack.id, bytes: 32)
            pack.contents.encode(into: &writer)
        }
        let sealed = try sealer.seal(writer.data, as: Self.identity)
        let id = SHA256.hash(data: sealed).withUnsafeBytes { ContentID(bytes: $0) } ?? .zero
        return ("index/\(id.hex)", sealed)
    }

    static func decode(_ sealed: Data, key: String, sealer: Sealer, location: String) throws -> IndexFile {
        let what = "index \(location)/\(key)"
        let expected = String(key.dropFirst("index/".count))
        let actual = (SHA256.hash(data: sealed).withUnsafeBytes { ContentID(bytes: $0) } ?? .zero).hex
        guard actual == expected else {
            throw StoreOpsError(.badData, "\(what) is damaged: its content does not match its name (SHA-256 \(actual.prefix(12))…)", hint: Sealer.damagedHint)
        }
        let plain = try sealer.open(sealed, as: identity, what: what)
        var reader = BinaryReader(plain, what: what)
        try reader.expectMagic(sealer.isCompact ? compactMagic : magic)
        let count = try reader.count(itemBytes: 36)
        var file = IndexFile()
        file.packs.reserveCapacity(count)
        for _ in 0..<count {
            let id = try reader.id(bytes: 32)
            file.packs.append((id, try PackContents.decode(from: &reader, packSize: nil, compact: sealer.isCompact)))
        }
        guard reader.isAtEnd else { throw StoreOpsError(.badData, "\(what) is damaged: \(reader.remaining) bytes follow its last pack", hint: Sealer.damagedHint) }
        return file
    }
}

/// Reading every index of a repository.
enum RepositoryIndex {
    /// A damaged or unreadable index file, reported by `scan` instead of stopping it.
    struct Damaged: Sendable {
        var key: String
        var problem: String
        /// The problem, naming the index once (a decoding error names it already).
        var described: String { problem.contains(key) ? problem : "\(key) \(problem)" }
    }

    /// Calls `visit` with every pack every readable index lists, and returns the index files
    /// that could not be read.
    @discardableResult
    static func scan(_ repository: PagedRepository, visit: (String, ContentID, PackContents) throws -> Void) throws -> [Damaged] {
        var damaged: [Damaged] = []
        for (key, size) in try repository.backend.list("index/") {
            guard size < 1 << 30 else { damaged.append(.init(key: key, problem: "is \(Format.bytes(size)), not an index")); continue }
            let file: IndexFile
            do {
                guard let data = try repository.backend.read(key) else { continue }   // removed by a prune meanwhile
                file = try IndexFile.decode(data, key: key, sealer: repository.sealer, location: repository.location)
            } catch let error as StoreOpsError where error.status == .badData {
                damaged.append(.init(key: key, problem: error.message))
                continue
            }
            for pack in file.packs { try visit(key, pack.id, pack.contents) }
        }
        return damaged
    }
}
