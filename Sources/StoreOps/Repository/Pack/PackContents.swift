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

    /// Layout 1's identity of a frame: `frame:` and the SHA-256 (hex) of its blobs' ids, in
    /// order (`Sealer.frameIdentity` chooses by layout).
    static func identity(_ ids: [ContentID]) -> String {
        var hasher = SHA256()
        for id in ids { withUnsafeBytes(of: id.words) { hasher.update(bufferPointer: $0) } }
        return "frame:" + (hasher.finalize().withUnsafeBytes { ContentID(bytes: $0) } ?? .zero).hex
    }
}

/// What a pack holds: its frames. The same encoding is a pack's header and a pack's entry in
/// an index file.
///
/// Layout 1:
///
///     u32 frameCount
///     per frame: u64 offset | u32 sealedLength | u32 rawLength | u32 blobCount
///                per blob: u8 type | 32-byte id | u32 offset | u32 length
///
/// Layout 2 (blobs lie end to end from the start of their frame's plaintext and fill it, so a
/// run of blobs of one type and length is written once; a pack's header leaves out the ids,
/// which its index lists):
///
///     u32 frameCount
///     per frame: u64 offset | u32 sealedLength | u32 rawLength | u32 runCount
///                per run: u8 type | u32 blobLength | u32 blobCount | (index only) blobCount × 16-byte id
public struct PackContents: Sendable, Equatable {
    public var frames: [FrameEntry] = []

    public var blobCount: Int { frames.reduce(0) { $0 + $1.blobs.count } }
    public var rawBytes: UInt64 { frames.reduce(0) { $0 + UInt64($1.rawLength) } }

    /// The same contents with every id zero: what a layout-2 pack header holds.
    var withoutIDs: PackContents {
        var copy = self
        for f in copy.frames.indices { for b in copy.frames[f].blobs.indices { copy.frames[f].blobs[b].id = .zero } }
        return copy
    }

    /// Layout 2 (storectl writes no other; layout 1 is only decoded, for `repo convert`).
    func encode(into writer: inout BinaryWriter, ids: Bool = true) {
        writer.u32(UInt32(frames.count))
        for frame in frames {
            writer.u64(frame.offset)
            writer.u32(frame.sealedLength)
            writer.u32(frame.rawLength)
            let runs = Self.runs(frame.blobs)
            writer.u32(UInt32(runs.count))
            for run in runs {
                let first = frame.blobs[run.lowerBound]
                writer.u8(first.type.rawValue)
                writer.u32(first.length)
                writer.u32(UInt32(run.count))
                if ids { for blob in frame.blobs[run] { writer.id(blob.id, bytes: 16) } }
            }
        }
    }

    /// Runs of neighbouring blobs of one type and length.
    static func runs(_ blobs: [BlobEntry]) -> [Range<Int>] {
        var out: [Range<Int>] = []
        var start = 0
        for i in blobs.indices where i > start && (blobs[i].type != blobs[start].type || blobs[i].length != blobs[start].length) {
            out.append(start..<i)
            start = i
        }
        if start < blobs.count { out.append(start..<blobs.count) }
        return out
    }

    /// No frame starts beyond 1 TiB into a pack (storectl's are tens of MiB).
    static let maxOffset: UInt64 = 1 << 40

    private static func frameOutOfPlace(_ reader: BinaryReader, _ f: Int, _ offset: UInt64, _ sealedLength: UInt32) -> StoreOpsError {
        StoreOpsError(.badData, "\(reader.what) is damaged: frame \(f) (offset \(offset), \(sealedLength) bytes) is out of place",
                      hint: Sealer.damagedHint)
    }

    /// Decodes and checks what `encode` wrote: frames inside `packSize` (when known) and in
    /// order, blobs inside their frame's plaintext, known blob types. Layout 2 without `ids`
    /// (a pack header) gives every blob the id zero.
    static func decode(from reader: inout BinaryReader, packSize: UInt64?, compact: Bool, ids: Bool = true) throws -> PackContents {
        let frameCount = try reader.count(itemBytes: 20)
        var frames: [FrameEntry] = []
        frames.reserveCapacity(frameCount)
        var end: UInt64 = 0
        for f in 0..<frameCount {
            let offset = try reader.u64()
            let sealedLength = try reader.u32()
            let rawLength = try reader.u32()
            let count = try reader.count(itemBytes: compact ? 9 : 41)
            // Bounded before any sum: a pack is megabytes, and an offset near 2^63 or 2^64 (read
            // from outside) must neither overflow here nor become an Int later.
            guard offset >= end, offset <= Self.maxOffset, packSize.map({ offset + UInt64(sealedLength) <= $0 }) ?? true,
                  rawLength <= PackBuilder.maxFrameRaw else {
                throw frameOutOfPlace(reader, f, offset, sealedLength)
            }
            end = offset + UInt64(sealedLength)
            var blobs: [BlobEntry] = []
            if compact {
                var at: UInt64 = 0
                for _ in 0..<count {
                    let rawType = try reader.u8()
                    let length = try reader.u32()
                    let n = ids ? try reader.count(itemBytes: 16) : Int(try reader.u32())
                    guard let type = BlobType(rawValue: rawType), length > 0, at + UInt64(length) * UInt64(n) <= UInt64(rawLength) else {
                        throw StoreOpsError(.badData, "\(reader.what) is damaged: a run of \(n) blobs of frame \(f) overruns the frame or is of unknown type \(rawType)",
                                            hint: Sealer.damagedHint)
                    }
                    blobs.reserveCapacity(blobs.count + min(n, 4096))
                    for _ in 0..<n {
                        let id = ids ? try reader.id(bytes: 16) : .zero
                        blobs.append(BlobEntry(type: type, id: id, offset: UInt32(at), length: length))
                        at += UInt64(length)
                    }
                }
                guard at == UInt64(rawLength) else {
                    throw StoreOpsError(.badData, "\(reader.what) is damaged: the blobs of frame \(f) hold \(at) bytes, not its \(rawLength)",
                                        hint: Sealer.damagedHint)
                }
            } else {
                blobs.reserveCapacity(count)
                for _ in 0..<count {
                    let rawType = try reader.u8()
                    let id = try reader.id(bytes: 32)
                    let blobOffset = try reader.u32()
                    let length = try reader.u32()
                    guard let type = BlobType(rawValue: rawType), UInt64(blobOffset) + UInt64(length) <= UInt64(rawLength) else {
                        throw StoreOpsError(.badData, "\(reader.what) is damaged: blob \(id.hex.prefix(12))… of frame \(f) is out of place or of unknown type \(rawType)",
                                            hint: Sealer.damagedHint)
                    }
                    blobs.append(BlobEntry(type: type, id: id, offset: blobOffset, length: length))
                }
            }
            frames.append(FrameEntry(offset: offset, sealedLength: sealedLength, rawLength: rawLength, blobs: blobs))
        }
        return PackContents(frames: frames)
    }
}
