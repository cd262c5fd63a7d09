import Foundation

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
        let key = PackBuilder.key(pack)
        let what = "frame at byte \(frame.offset) of pack \(repository.backend.describe(key))"
        let sealed = try repository.backend.read(key, offset: frame.offset, length: Int(frame.sealedLength))
        let compressed = try repository.sealer.open(sealed, as: frame.identity, what: what)
        return try zstd.decompress(compressed, rawLength: Int(frame.rawLength), what: what)
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
        return Data(bytes)
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
        for locations in byFrame.values {
            guard let first = locations.first else { continue }
            let plain = try readFrame(first.frame, pack: first.pack, repository: repository, zstd: zstd)
            for location in locations {
                out[location.blob.id] = try extract(location.blob, from: plain, sealer: repository.sealer,
                                                    what: "pack \(repository.backend.describe(PackBuilder.key(location.pack)))")
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
        return try PageMap.assemble(record.pages, what: context) { id, type in
            guard let data = blobs[id] else { throw StoreOpsError(.badData, "\(context): its \(type.name) \(id.hex.prefix(12))… was not read") }
            return data
        }
    }

    static func missingBlob(_ id: ContentID, type: BlobType, context: String, repository: PagedRepository,
                            damaged: [RepositoryIndex.Damaged]) -> StoreOpsError {
        let because = damaged.isEmpty ? "" : " (unreadable index: \(damaged.map { "\($0.key) \($0.problem)" }.joined(separator: "; ")))"
        return StoreOpsError(.badData, "\(context): its \(type.name) \(id.hex.prefix(16))… is in no index of \(repository.location)\(because)",
                             hint: "`storectl repo check --repo \(repository.location)` lists what is missing; restore another snapshot")
    }
}
