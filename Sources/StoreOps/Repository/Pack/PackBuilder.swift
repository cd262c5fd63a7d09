import Crypto
import Foundation

/// A frame ready to go into a pack: sealed bytes and the blobs its plaintext holds.
struct SealedFrame: Sendable {
    var sealed: Data
    var rawLength: UInt32
    var blobs: [BlobEntry]

    /// Compresses and seals `blobs` (type, id, bytes) as one frame.
    static func make(_ blobs: [(type: BlobType, id: ContentID, bytes: UnsafeRawBufferPointer)], zstd: ZstdFrames,
                     sealer: Sealer) throws -> SealedFrame {
        var raw = Data(capacity: blobs.reduce(0) { $0 + $1.bytes.count })
        var entries: [BlobEntry] = []
        entries.reserveCapacity(blobs.count)
        for blob in blobs {
            entries.append(BlobEntry(type: blob.type, id: blob.id, offset: UInt32(raw.count), length: UInt32(blob.bytes.count)))
            raw.append(contentsOf: blob.bytes)
        }
        let compressed = try raw.withUnsafeBytes { try zstd.compress($0) }
        let sealed = try sealer.seal(compressed, as: sealer.frameIdentity(entries.map(\.id)))
        return SealedFrame(sealed: sealed, rawLength: UInt32(raw.count), blobs: entries)
    }

    /// The same, for pages of one size laid end to end in `pages` (no copy before compression),
    /// compressed in chunks of whole pages (`PageStream.chunkBytes`).
    static func make(pages: Data, ids: [ContentID], zstd: ZstdFrames, sealer: Sealer) throws -> SealedFrame {
        let size = ids.isEmpty ? 0 : pages.count / ids.count
        let entries = ids.enumerated().map { BlobEntry(type: .page, id: $1, offset: UInt32($0 * size), length: UInt32(size)) }
        let compressed = try pages.withUnsafeBytes { try zstd.compress($0, chunkBytes: PageStream.chunkBytes(pageSize: size)) }
        let sealed = try sealer.seal(compressed, as: sealer.frameIdentity(ids))
        return SealedFrame(sealed: sealed, rawLength: UInt32(pages.count), blobs: entries)
    }

    /// The same, for blobs held as `Data` (`chunkBytes`: compressed in independent chunks).
    static func make(blobs: [(BlobType, ContentID, Data)], zstd: ZstdFrames, sealer: Sealer, chunkBytes: Int? = nil) throws -> SealedFrame {
        var raw = Data()
        var entries: [BlobEntry] = []
        for (type, id, bytes) in blobs {
            entries.append(BlobEntry(type: type, id: id, offset: UInt32(raw.count), length: UInt32(bytes.count)))
            raw.append(bytes)
        }
        let compressed = try raw.withUnsafeBytes { try zstd.compress($0, chunkBytes: chunkBytes) }
        let sealed = try sealer.seal(compressed, as: sealer.frameIdentity(entries.map(\.id)))
        return SealedFrame(sealed: sealed, rawLength: UInt32(raw.count), blobs: entries)
    }
}

/// Gathers sealed frames into packs of about `targetBytes`:
///
///     frame 0 | frame 1 | … | sealed header | u32 sealed header length | "SPK2"
///
/// The header (sealed as `pack-header`) is "SPH2" and the pack's `PackContents` (layout 1), or
/// "SPH3" and its contents without ids (layout 2: the index lists them; `repo repair` recomputes
/// them from the blobs). A pack is named by the SHA-256 of all its bytes:
/// `data/<first two hex digits>/<64 hex digits>`.
struct PackBuilder {
    static let targetBytes = 4 << 20
    static let maxFrameRaw: UInt32 = 16 << 20
    static let trailerMagic: StaticString = "SPK2"
    static let headerMagic: StaticString = "SPH2"
    static let compactHeaderMagic: StaticString = "SPH3"
    static let headerIdentity = "pack-header"

    private(set) var body = Data()
    private(set) var contents = PackContents()
    /// The pack's id is hashed as frames arrive, so finishing a pack costs only its header.
    private var hasher = SHA256()

    var isEmpty: Bool { contents.frames.isEmpty }
    var isFull: Bool { body.count >= Self.targetBytes }

    mutating func add(_ frame: SealedFrame) {
        if body.isEmpty { body.reserveCapacity(Self.targetBytes + Self.targetBytes / 4) }
        contents.frames.append(FrameEntry(offset: UInt64(body.count), sealedLength: UInt32(frame.sealed.count),
                                          rawLength: frame.rawLength, blobs: frame.blobs))
        body.append(frame.sealed)
        hasher.update(data: frame.sealed)
    }

    /// The finished pack: its id, bytes and contents; the builder is empty again.
    mutating func finish(sealer: Sealer) throws -> (id: ContentID, data: Data, contents: PackContents) {
        var header = BinaryWriter()
        header.magic(Self.compactHeaderMagic)
        contents.encode(into: &header, ids: false)
        var tail = try sealer.seal(header.data, as: Self.headerIdentity)
        var trailer = BinaryWriter()
        trailer.u32(UInt32(tail.count))
        trailer.magic(Self.trailerMagic)
        tail.append(trailer.data)
        hasher.update(data: tail)
        let id = hasher.finalize().withUnsafeBytes { ContentID(bytes: $0) } ?? .zero
        // Taken out of the builder first, so appending the tail does not copy the pack.
        var pack = Data()
        swap(&pack, &body)
        pack.append(tail)
        let finished = (id, pack, contents)
        contents = PackContents()
        hasher = SHA256()
        return finished
    }

    static func key(_ id: ContentID) -> String {
        let hex = id.hex
        return "data/\(hex.prefix(2))/\(hex)"
    }

    /// Reads a pack's own header (`repo check` compares it with the index). In layout 2 every
    /// id is zero (see `readContents`).
    static func readHeader(_ backend: any RepositoryBackend, id: ContentID, sealer: Sealer) throws -> PackContents {
        let key = Self.key(id)
        guard let size = try backend.size(key) else {
            throw StoreOpsError(.badData, "pack \(backend.describe(key)) is missing", hint: Sealer.damagedHint)
        }
        guard size >= 8 else { throw StoreOpsError(.badData, "pack \(backend.describe(key)) is truncated (\(size) bytes)", hint: Sealer.damagedHint) }
        var trailer = BinaryReader(try backend.read(key, offset: size - 8, length: 8), what: "the trailer of pack \(backend.describe(key))")
        let headerLength = UInt64(try trailer.u32())
        try trailer.expectMagic(trailerMagic)
        guard headerLength + 8 <= size else {
            throw StoreOpsError(.badData, "pack \(backend.describe(key)) is damaged: its header length \(headerLength) exceeds the pack", hint: Sealer.damagedHint)
        }
        let sealed = try backend.read(key, offset: size - 8 - headerLength, length: Int(headerLength))
        let plain = try sealer.open(sealed, as: headerIdentity, what: "the header of pack \(backend.describe(key))")
        var reader = BinaryReader(plain, what: "the header of pack \(backend.describe(key))")
        try reader.expectMagic(sealer.isCompact ? compactHeaderMagic : headerMagic)
        return try PackContents.decode(from: &reader, packSize: size - 8 - headerLength, compact: sealer.isCompact, ids: false)
    }

    /// A pack's contents with every blob's id, from the pack alone: its header, and in layout 2
    /// every frame opened, authenticated and decompressed, and its blobs hashed (what `repo
    /// repair` and prune's clean-up of unindexed packs need; reads the whole pack).
    static func readContents(_ repository: PagedRepository, id: ContentID, zstd: ZstdFrames) throws -> PackContents {
        var contents = try readHeader(repository.backend, id: id, sealer: repository.sealer)
        guard repository.sealer.isCompact else { return contents }
        let located = contents.frames.map { (pack: id, frame: $0) }
        for span in BlobLocator.spans(located) {
            try BlobLocator.read(span, frames: located, repository: repository, zstd: zstd) { member, plain in
                for b in contents.frames[member].blobs.indices {
                    let blob = contents.frames[member].blobs[b]
                    let start = plain.startIndex + Int(blob.offset)
                    contents.frames[member].blobs[b].id = plain[start..<(start + Int(blob.length))].withUnsafeBytes { repository.sealer.contentID($0) }
                }
            }
        }
        return contents
    }
}
