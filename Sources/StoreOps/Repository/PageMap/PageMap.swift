import Crypto
import Foundation

/// Which blob holds each page of a snapshot's database: a base (the ids of pages 1…baseCount,
/// in chunks of `chunkPages` ids, each chunk a `mapChunk` blob) and a delta against it (a
/// `mapDelta` blob of (page, id) pairs, pages past the base included). An unchanged store's next
/// snapshot has the same chunks and delta, so it stores no new map blob at all; a store with
/// scattered changes stores only a delta. When the delta grows past `PageMap.rebaseAfter(_:)`
/// entries, the next snapshot writes a new base (its unchanged chunks are shared with the old).
///
/// Blob layouts (little-endian; an id is 16 bytes in layout 2, 32 in layout 1):
///
///     mapChunk: n × id                          (n = chunkPages, less in the last chunk)
///     mapDelta: u32 count | count × (u32 page | id), pages strictly ascending
///
/// The digest is the SHA-256 of the ids of pages 1…pageCount, each in its `idBytes` bytes.
public struct PageMapRef: Sendable, Codable, Equatable {
    public var pageSize: Int
    public var pageCount: Int
    public var chunkPages: Int
    public var baseCount: Int
    public var base: [ContentID]
    public var delta: ContentID?
    public var deltaCount: Int
    /// SHA-256 (hex) of the ids of pages 1…pageCount in order: what the map must assemble to.
    public var digest: String

    /// Every map blob this map refers to.
    public var blobs: [ContentID] { base + (delta.map { [$0] } ?? []) }

    /// The same, with their types.
    var typedBlobs: [(ContentID, BlobType)] { base.map { ($0, .mapChunk) } + (delta.map { [($0, .mapDelta)] } ?? []) }
}

enum PageMap {
    static let chunkPages = 2048

    /// More delta entries than this and the next snapshot writes a new base.
    static func rebaseAfter(_ pageCount: Int) -> Int { max(4096, pageCount / 16) }

    static func encodeChunk(_ ids: ArraySlice<ContentID>, idBytes: Int) -> Data {
        var writer = BinaryWriter(capacity: ids.count * idBytes)
        for id in ids { writer.id(id, bytes: idBytes) }
        return writer.data
    }

    static func decodeChunk(_ data: Data, expected: Int, idBytes: Int, what: String) throws -> [ContentID] {
        guard data.count == expected * idBytes else {
            throw StoreOpsError(.badData, "\(what) holds \(data.count) bytes, not the \(expected) ids its snapshot says", hint: Sealer.damagedHint)
        }
        var reader = BinaryReader(data, what: what)
        return try (0..<expected).map { _ in try reader.id(bytes: idBytes) }
    }

    static func encodeDelta(_ entries: [(page: UInt32, id: ContentID)], idBytes: Int) -> Data {
        var writer = BinaryWriter(capacity: 4 + entries.count * (4 + idBytes))
        writer.u32(UInt32(entries.count))
        for entry in entries {
            writer.u32(entry.page)
            writer.id(entry.id, bytes: idBytes)
        }
        return writer.data
    }

    static func decodeDelta(_ data: Data, pageCount: Int, idBytes: Int, what: String) throws -> [(page: UInt32, id: ContentID)] {
        var reader = BinaryReader(data, what: what)
        let count = try reader.count(itemBytes: 4 + idBytes)
        var entries: [(page: UInt32, id: ContentID)] = []
        entries.reserveCapacity(count)
        var last: UInt32 = 0
        for _ in 0..<count {
            let page = try reader.u32()
            guard page > last, Int(page) <= max(pageCount, 1) << 1 else {
                throw StoreOpsError(.badData, "\(what) is damaged: page \(page) is out of order or out of range", hint: Sealer.damagedHint)
            }
            last = page
            entries.append((page, try reader.id(bytes: idBytes)))
        }
        guard reader.isAtEnd else { throw StoreOpsError(.badData, "\(what) is damaged: bytes follow its last entry", hint: Sealer.damagedHint) }
        return entries
    }

    /// SHA-256 (hex) of ids in order, each in its first `idBytes` bytes.
    static func digest(_ ids: UnsafeBufferPointer<ContentID>, idBytes: Int) -> String {
        var hasher = SHA256()
        if idBytes >= 32 {
            hasher.update(bufferPointer: UnsafeRawBufferPointer(ids))
        } else {
            // Through a small buffer: one update per 64 KiB, not per id.
            var buffer = [UInt8](repeating: 0, count: 4096 * idBytes)
            var start = 0
            while start < ids.count {
                let n = min(4096, ids.count - start)
                buffer.withUnsafeMutableBytes { out in
                    for i in 0..<n {
                        withUnsafeBytes(of: ids[start + i].words) { out.baseAddress!.advanced(by: i * idBytes).copyMemory(from: $0.baseAddress!, byteCount: idBytes) }
                    }
                    hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: out.prefix(n * idBytes)))
                }
                start += n
            }
        }
        let digest = hasher.finalize().withUnsafeBytes { ContentID(bytes: $0) } ?? .zero
        return digest.hex
    }

    /// A map's pages, and what its delta changed: the delta's entries and, for those within
    /// the base, the base's id of the page (a next snapshot's delta needs them).
    struct Loaded {
        var ids: [ContentID]
        var delta: [(page: UInt32, id: ContentID)]
        var baseOfDelta: [UInt32: ContentID]
    }

    /// Assembles the ids of every page from the map's blobs (fetched by `blob`), checking counts
    /// and the digest.
    static func assemble(_ map: PageMapRef, idBytes: Int, what: String, blob: (ContentID, BlobType) throws -> Data) throws -> Loaded {
        guard map.pageCount >= 0, map.pageCount <= 1 << 31, map.baseCount >= 0, map.baseCount <= 1 << 31, map.chunkPages > 0, map.chunkPages <= 1 << 31,
              map.base.count == (map.baseCount + map.chunkPages - 1) / map.chunkPages else {
            throw StoreOpsError(.badData, "\(what): its page map is inconsistent (\(map.base.count) chunks for \(map.baseCount) pages)", hint: Sealer.damagedHint)
        }
        // The ids are allocated as the blobs supply them, never for the counts the record claims
        // (a record saying 2^31 pages must not cost 64 GiB before its chunks are found short).
        var ids: [ContentID] = []
        ids.reserveCapacity(min(map.baseCount, 1 << 20))
        for (k, chunkID) in map.base.enumerated() {
            let start = k * map.chunkPages
            let n = min(map.chunkPages, map.baseCount - start)
            let chunk = try decodeChunk(try blob(chunkID, .mapChunk), expected: n, idBytes: idBytes, what: "map chunk \(chunkID.hex.prefix(12))… of \(what)")
            ids.append(contentsOf: chunk)
        }
        var entries: [(page: UInt32, id: ContentID)] = []
        var baseOfDelta: [UInt32: ContentID] = [:]
        if let delta = map.delta {
            entries = try decodeDelta(try blob(delta, .mapDelta), pageCount: map.pageCount, idBytes: idBytes, what: "map delta \(delta.hex.prefix(12))… of \(what)")
            guard entries.count == map.deltaCount else {
                throw StoreOpsError(.badData, "\(what): its map delta has \(entries.count) entries, the snapshot says \(map.deltaCount)", hint: Sealer.damagedHint)
            }
        }
        // Each page past the base has its id in an entry of the delta: what the blobs hold bounds
        // the count before anything is allocated for it.
        let held = ids.count + entries.reduce(0) { $0 + (Int($1.page) > map.baseCount ? 1 : 0) }
        guard map.pageCount <= held else {
            throw StoreOpsError(.badData, "\(what): its page map says \(map.pageCount) pages, its blobs hold ids for \(held)", hint: Sealer.damagedHint)
        }
        if ids.count < map.pageCount { ids.append(contentsOf: repeatElement(ContentID.zero, count: map.pageCount - ids.count)) }
        if map.delta != nil {
            for entry in entries where Int(entry.page) <= ids.count {
                if Int(entry.page) <= map.baseCount { baseOfDelta[entry.page] = ids[Int(entry.page) - 1] }
                ids[Int(entry.page) - 1] = entry.id
            }
        }
        ids.removeLast(ids.count - map.pageCount)
        let found = ids.withUnsafeBufferPointer { digest($0, idBytes: idBytes) }
        guard found == map.digest else {
            throw StoreOpsError(.badData, "\(what): its page map assembles to digest \(found.prefix(12))…, not the \(map.digest.prefix(12))… it was made with",
                                hint: Sealer.damagedHint)
        }
        return Loaded(ids: ids, delta: entries, baseOfDelta: baseOfDelta)
    }
}

extension PageMap {
    /// A new snapshot's map, and its map blobs (the caller stores those the repository lacks).
    ///
    /// With a parent of the same page size, the delta is the parent's delta updated with the
    /// pages that changed (an entry whose page is back to the base's content dropped); past
    /// `rebaseAfter` entries, or without a parent, the map gets a new base (chunks equal to the
    /// parent's are shared).
    ///
    /// The map's blobs go to `emit` one at a time as they are made (a new base of a 1 GiB store
    /// is 8 MiB of ids: never held whole).
    static func next(ids: [ContentID], pageSize: Int, changed: Bitset, parent: (ref: PageMapRef, loaded: Loaded)?, idBytes: Int,
                     contentID: (Data) -> ContentID, emit: (BlobType, ContentID, Data) throws -> Void) rethrows -> PageMapRef {
        let pageCount = ids.count
        let digest = ids.withUnsafeBufferPointer { PageMap.digest($0, idBytes: idBytes) }
        if let parent, parent.ref.pageSize == pageSize, parent.ref.chunkPages == chunkPages, parent.ref.baseCount > 0 {
            var entries: [UInt32: ContentID] = [:]
            for entry in parent.loaded.delta where Int(entry.page) <= pageCount { entries[entry.page] = entry.id }
            if pageCount > 0 {
                for p in 1...pageCount where changed[p] {
                    let page = UInt32(p)
                    if let base = parent.loaded.baseOfDelta[page], base == ids[p - 1] {
                        entries[page] = nil   // back to the base's content
                    } else {
                        entries[page] = ids[p - 1]
                    }
                }
            }
            if entries.count <= rebaseAfter(pageCount) {
                let sorted = entries.sorted { $0.key < $1.key }.map { (page: $0.key, id: $0.value) }
                var deltaID: ContentID?
                if !sorted.isEmpty {
                    let data = encodeDelta(sorted, idBytes: idBytes)
                    let id = contentID(data)
                    deltaID = id
                    try emit(.mapDelta, id, data)
                }
                return PageMapRef(pageSize: pageSize, pageCount: pageCount, chunkPages: chunkPages, baseCount: parent.ref.baseCount,
                                  base: parent.ref.base, delta: deltaID, deltaCount: sorted.count, digest: digest)
            }
        }
        var base: [ContentID] = []
        for start in stride(from: 0, to: pageCount, by: chunkPages) {
            let data = encodeChunk(ids[start..<min(pageCount, start + chunkPages)], idBytes: idBytes)
            let id = contentID(data)
            base.append(id)
            try emit(.mapChunk, id, data)
        }
        return PageMapRef(pageSize: pageSize, pageCount: pageCount, chunkPages: chunkPages, baseCount: pageCount,
                          base: base, delta: nil, deltaCount: 0, digest: digest)
    }
}
