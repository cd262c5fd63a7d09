import Crypto
import Foundation

/// A blob's place in its frame's plaintext.
public struct BlobEntry: Sendable, Equatable {
    public var type: BlobType
    public var id: ContentID
    public var offset: UInt32
    public var length: UInt32
}

/// One sealed zstd frame of a pack: where it is, its sizes, and the blobs its plaintext holds
/// one after another.
public struct FrameEntry: Sendable, Equatable {
    public var offset: UInt64
    public var sealedLength: UInt32
    public var rawLength: UInt32
    public var blobs: [BlobEntry]

    /// The identity a frame is sealed as: `frame:` and the SHA-256 (hex) of its blobs' ids, in
    /// order. A frame moved elsewhere, or listed with other blobs, fails to open.
    public var identity: String { Self.identity(blobs.map(\.id)) }

    static func identity(_ ids: [ContentID]) -> String {
        var hasher = SHA256()
        for id in ids { withUnsafeBytes(of: id.words) { hasher.update(bufferPointer: $0) } }
        return "frame:" + (hasher.finalize().withUnsafeBytes { ContentID(bytes: $0) } ?? .zero).hex
    }
}

/// What a pack holds: its frames. The same encoding is a pack's header and a pack's entry in
/// an index file.
///
///     u32 frameCount
///     per frame: u64 offset | u32 sealedLength | u32 rawLength | u32 blobCount
///                per blob: u8 type | 32-byte id | u32 offset | u32 length
public struct PackContents: Sendable, Equatable {
    public var frames: [FrameEntry] = []

    public var blobCount: Int { frames.reduce(0) { $0 + $1.blobs.count } }
    public var rawBytes: UInt64 { frames.reduce(0) { $0 + UInt64($1.rawLength) } }

    func encode(into writer: inout BinaryWriter) {
        writer.u32(UInt32(frames.count))
        for frame in frames {
            writer.u64(frame.offset)
            writer.u32(frame.sealedLength)
            writer.u32(frame.rawLength)
            writer.u32(UInt32(frame.blobs.count))
            for blob in frame.blobs {
                writer.u8(blob.type.rawValue)
                writer.id(blob.id)
                writer.u32(blob.offset)
                writer.u32(blob.length)
            }
        }
    }

    /// Decodes and checks what `encode` wrote: frames inside `packSize` (when known) and in
    /// order, blobs inside their frame's plaintext, known blob types.
    static func decode(from reader: inout BinaryReader, packSize: UInt64?) throws -> PackContents {
        let frameCount = try reader.count(itemBytes: 20)
        var frames: [FrameEntry] = []
        frames.reserveCapacity(frameCount)
        var end: UInt64 = 0
        for f in 0..<frameCount {
            let offset = try reader.u64()
            let sealedLength = try reader.u32()
            let rawLength = try reader.u32()
            let blobCount = try reader.count(itemBytes: 41)
            guard offset >= end, offset + UInt64(sealedLength) >= offset, packSize.map({ offset + UInt64(sealedLength) <= $0 }) ?? true,
                  rawLength <= PackBuilder.maxFrameRaw else {
                throw StoreOpsError(.badData, "\(reader.what) is damaged: frame \(f) (offset \(offset), \(sealedLength) bytes) is out of place",
                                    hint: Sealer.damagedHint)
            }
            end = offset + UInt64(sealedLength)
            var blobs: [BlobEntry] = []
            blobs.reserveCapacity(blobCount)
            for _ in 0..<blobCount {
                let rawType = try reader.u8()
                let id = try reader.id()
                let blobOffset = try reader.u32()
                let length = try reader.u32()
                guard let type = BlobType(rawValue: rawType), UInt64(blobOffset) + UInt64(length) <= UInt64(rawLength) else {
                    throw StoreOpsError(.badData, "\(reader.what) is damaged: blob \(id.hex.prefix(12))… of frame \(f) is out of place or of unknown type \(rawType)",
                                        hint: Sealer.damagedHint)
                }
                blobs.append(BlobEntry(type: type, id: id, offset: blobOffset, length: length))
            }
            frames.append(FrameEntry(offset: offset, sealedLength: sealedLength, rawLength: rawLength, blobs: blobs))
        }
        return PackContents(frames: frames)
    }
}
