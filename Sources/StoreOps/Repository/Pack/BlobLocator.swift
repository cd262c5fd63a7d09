import Foundation
import Synchronization

/// Where blobs are, from the repository's indexes, and reading them back: each frame read once,
/// opened (authenticated), decompressed, and every blob checked against its content id.
struct BlobLocation: Sendable {
    var pack: ContentID
    var frame: FrameEntry
    var blob: BlobEntry
}

enum BlobLocator {
    /// The locations of `wanted` (the first index entry found for each), and the index files
    /// that could not be read. Blobs not found are absent from the result.
    static func locate(_ wanted: Set<ContentID>, in repository: PagedRepository) throws -> (found: [ContentID: BlobLocation], damaged: [RepositoryIndex.Damaged]) {
        var found: [ContentID: BlobLocation] = [:]
        guard !wanted.isEmpty else { return ([:], []) }
        let damaged = try RepositoryIndex.scan(repository) { _, pack, contents in
            for frame in contents.frames {
                for blob in frame.blobs where found[blob.id] == nil && wanted.contains(blob.id) {
                    found[blob.id] = BlobLocation(pack: pack, frame: frame, blob: blob)
                }
            }
        }
        return (found, damaged)
    }

    /// Reads one frame and returns its plaintext (authenticated and decompressed).
    static func readFrame(_ frame: FrameEntry, pack: ContentID, repository: PagedRepository, zstd: ZstdFrames) throws -> Data {
        let sealed = try repository.backend.read(PackBuilder.key(pack), offset: frame.offset, length: Int(frame.sealedLength))
        return try openFrame(sealed, frame: frame, pack: pack, repository: repository, zstd: zstd)
    }

    /// A frame's plaintext from its sealed bytes (authenticated and decompressed).
    static func openFrame(_ sealed: Data, frame: FrameEntry, pack: ContentID, repository: PagedRepository, zstd: ZstdFrames) throws -> Data {
        let (compressed, what) = try unseal(sealed, frame: frame, pack: pack, repository: repository)
        return try zstd.decompress(compressed, rawLength: Int(frame.rawLength), what: what)
    }

    /// A frame's compressed bytes, authenticated, and how messages name it.
    private static func unseal(_ sealed: Data, frame: FrameEntry, pack: ContentID, repository: PagedRepository) throws -> (Data, String) {
        let what = "frame at byte \(frame.offset) of pack \(repository.backend.describe(PackBuilder.key(pack)))"
        return (try repository.sealer.open(sealed, as: repository.sealer.frameIdentity(frame.blobs.map(\.id)), what: what), what)
    }

    /// Frames of one pack read together: one ranged read from `offset`, `length` bytes long,
    /// covering the frames `members` (positions in the caller's list).
    struct Span: Sendable {
        var pack: ContentID
        var offset: UInt64
        var length: Int
        var members: [Int]
    }

    /// Groups frames (sorted by pack, then offset) into spans of at most `maxSpan` bytes whose
    /// frames are at most `maxGap` bytes apart: a bucket answers a few large ranged GETs much
    /// faster than many small ones (and bills them per request). Memory: one span per reader.
    static func spans(_ frames: [(pack: ContentID, frame: FrameEntry)], maxSpan: Int = 4 << 20, maxGap: Int = 256 << 10) -> [Span] {
        var out: [Span] = []
        for (i, item) in frames.enumerated() {
            let start = item.frame.offset, end = item.frame.offset + UInt64(item.frame.sealedLength)
            if var last = out.last, last.pack == item.pack, start >= last.offset + UInt64(last.length),
               start - (last.offset + UInt64(last.length)) <= UInt64(maxGap), end - last.offset <= UInt64(maxSpan) {
                last.length = Int(end - last.offset)
                last.members.append(i)
                out[out.count - 1] = last
            } else {
                out.append(Span(pack: item.pack, offset: start, length: Int(item.frame.sealedLength), members: [i]))
            }
        }
        return out
    }

    /// Reads `frames` (sorted by pack, then offset: neighbours of a pack in one read) on the
    /// backend's lanes (two on a folder, a bucket's transfers to its bound), each frame opened
    /// once; `body(member, plaintext)` runs on the lane that read it (its `Data` is valid only during
    /// the call). The first error stops every lane and is thrown; `checkpoint` names what a signal
    /// interrupts (checked before each read).
    ///
    /// `only`: for a frame (its index in `frames`), the plaintext byte ranges `body` reads; only
    /// the chunks holding them are decompressed (nil: the whole frame). Returns the plaintext
    /// bytes decompressed.
    @discardableResult
    static func readOnLanes(_ frames: [(pack: ContentID, frame: FrameEntry)], repository: PagedRepository, checkpoint: String,
                            only: ((Int) -> [Range<Int>]?)? = nil, _ body: (Int, Data) throws -> Void) throws -> Int {
        let spans = spans(frames)
        let next = Mutex(0)
        let failure = Mutex<(any Error)?>(nil)
        let decompressed = Mutex(0)
        onLanes(min(repository.backend.parallelReads, max(1, spans.count))) { _ in
            do {
                let zstd = try ZstdFrames(level: 3)
                defer { decompressed.withLock { $0 += zstd.bytesDecompressed } }
                let buffer = ReadBuffer()
                while failure.withLock({ $0 == nil }) {
                    let i = next.withLock { value -> Int in defer { value += 1 }; return value }
                    guard i < spans.count else { return }
                    try ProcessSignals.checkpoint(checkpoint)
                    try read(spans[i], frames: frames, repository: repository, zstd: zstd, reusing: buffer, only: only, body)
                }
            } catch {
                failure.withLock { if $0 == nil { $0 = error } }
            }
        }
        if let error = failure.withLock({ $0 }) { throw error }
        return decompressed.withLock { $0 }
    }

    /// Reads a span and hands each member frame's plaintext to `body`, in memory `zstd` reuses:
    /// the `Data` is valid only during the call (copy out what must outlive it).
    static func read(_ span: Span, frames: [(pack: ContentID, frame: FrameEntry)], repository: PagedRepository, zstd: ZstdFrames,
                     reusing buffer: ReadBuffer = ReadBuffer(), only: ((Int) -> [Range<Int>]?)? = nil,
                     _ body: (Int, Data) throws -> Void) throws {
        try repository.backend.withRange(PackBuilder.key(span.pack), offset: span.offset, length: span.length, reusing: buffer) { data in
            for member in span.members {
                let frame = frames[member].frame
                let start = data.startIndex + Int(frame.offset - span.offset)
                guard start >= data.startIndex, start + Int(frame.sealedLength) <= data.endIndex else {
                    throw StoreOpsError(.badData, "frame at byte \(frame.offset) of pack \(repository.backend.describe(PackBuilder.key(span.pack))) lies outside what was read")
                }
                let sealed = data[start..<(start + Int(frame.sealedLength))]
                let (compressed, what) = try unseal(sealed, frame: frame, pack: span.pack, repository: repository)
                try zstd.withDecompressed(compressed, rawLength: Int(frame.rawLength), only: only?(member), what: what) { try body(member, $0) }
            }
        }
    }

    /// Reads every frame of `pack` (neighbours in one read) and checks every blob in it against
    /// its id; `frameDone` follows each frame. Throws at the first problem (65).
    static func checkPack(_ pack: ContentID, frames: [FrameEntry], repository: PagedRepository, zstd: ZstdFrames,
                          frameDone: (FrameEntry) -> Void = { _ in }) throws {
        let what = "pack \(repository.backend.describe(PackBuilder.key(pack)))"
        let located = frames.map { (pack: pack, frame: $0) }
        for span in spans(located) {
            try read(span, frames: located, repository: repository, zstd: zstd) { member, plain in
                let frame = located[member].frame
                for blob in frame.blobs { _ = try extract(blob, from: plain, sealer: repository.sealer, what: what) }
                frameDone(frame)
            }
        }
    }

    /// The blob's bytes inside its frame's plaintext, checked against its id.
    static func extract(_ blob: BlobEntry, from plain: Data, sealer: Sealer, what: String) throws -> Data {
        let start = plain.startIndex + Int(blob.offset)
        guard start + Int(blob.length) <= plain.endIndex else {
            throw StoreOpsError(.badData, "\(what): blob \(blob.id.hex.prefix(12))… lies outside its frame", hint: Sealer.damagedHint)
        }
        let bytes = plain[start..<(start + Int(blob.length))]
        guard bytes.withUnsafeBytes({ sealer.contentID($0) }) == blob.id else {
            throw StoreOpsError(.badData, "\(what): blob \(blob.id.hex.prefix(12))… does not match its content id", hint: Sealer.damagedHint)
        }
        return bytes.withUnsafeBytes { Data($0) }   // a copy: `plain` may be reused memory
    }

    /// Reads the given blobs (all must be locatable), checking each; 65 naming what is missing.
    static func read(_ ids: [(ContentID, BlobType)], from repository: PagedRepository, context: String) throws -> [ContentID: Data] {
        let (found, damaged) = try locate(Set(ids.map(\.0)), in: repository)
        return try read(ids, at: found, in: repository, context: context, damaged: damaged)
    }

    /// Reads the given blobs from locations already known (each frame once), checking each.
    static func read(_ ids: [(ContentID, BlobType)], at found: [ContentID: BlobLocation], in repository: PagedRepository, context: String,
                     damaged: [RepositoryIndex.Damaged] = []) throws -> [ContentID: Data] {
        if let missing = ids.first(where: { found[$0.0] == nil }) {
            throw missingBlob(missing.0, type: missing.1, context: context, repository: repository, damaged: damaged)
        }
        let zstd = try ZstdFrames(level: 3)
        var out: [ContentID: Data] = [:]
        var byFrame: [String: [BlobLocation]] = [:]
        for (id, _) in ids where out[id] == nil {
            guard let location = found[id] else { continue }
            byFrame["\(location.pack.hex)@\(location.frame.offset)", default: []].append(location)
        }
        // Each frame once; neighbouring frames of a pack in one read.
        var groups: [[BlobLocation]] = byFrame.values.filter { !$0.isEmpty }
        groups.sort { (a: [BlobLocation], b: [BlobLocation]) -> Bool in
            a[0].pack == b[0].pack ? a[0].frame.offset < b[0].frame.offset : a[0].pack < b[0].pack
        }
        var frames: [(pack: ContentID, frame: FrameEntry)] = []
        for group in groups { frames.append((group[0].pack, group[0].frame)) }
        for span in spans(frames) {
            try read(span, frames: frames, repository: repository, zstd: zstd) { member, plain in
                for location in groups[member] {
                    out[location.blob.id] = try extract(location.blob, from: plain, sealer: repository.sealer,
                                                        what: "pack \(repository.backend.describe(PackBuilder.key(location.pack)))")
                }
            }
        }
        return out
    }

    /// A snapshot's page ids: its map blobs read (from `locations` when the caller has them, else
    /// through the indexes) and assembled, checked against the map's digest.
    static func pageMap(of record: PagedSnapshotRecord, in repository: PagedRepository, locations: [ContentID: BlobLocation]? = nil,
                        damaged: [RepositoryIndex.Damaged] = []) throws -> PageMap.Loaded {
        let context = "snapshot \(record.id)"
        let wanted = record.pages.typedBlobs
        let blobs = try locations.map { try read(wanted, at: $0, in: repository, context: context, damaged: damaged) }
            ?? read(wanted, from: repository, context: context)
        return try PageMap.assemble(record.pages, idBytes: repository.sealer.idBytes, what: context) { id, type in
            guard let data = blobs[id] else { throw StoreOpsError(.badData, "\(context): its \(type.name) \(id.hex.prefix(12))… was not read") }
            return data
        }
    }

    static func missingBlob(_ id: ContentID, type: BlobType, context: String, repository: PagedRepository,
                            damaged: [RepositoryIndex.Damaged]) -> StoreOpsError {
        let because = damaged.isEmpty ? "" : " (unreadable index: \(damaged.map(\.described).joined(separator: "; ")))"
        return StoreOpsError(.badData, "\(context): its \(type.name) \(id.hex.prefix(16))… is in no index of \(repository.location)\(because)",
                             hint: "`storectl repo repair --repo \(repository.location)` rebuilds the indexes from the packs (lost or damaged index files); "
                                + "`storectl repo check --repo \(repository.location)` lists what is still missing after it; restore another snapshot")
    }
}
