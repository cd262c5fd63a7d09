import CLibArchive
import CZstd
import Foundation

/// The description of every copy storectl makes (a backup, a snapshot): what was copied, from
/// where, when, how big, its SHA-256, how it was verified and, for Core Data stores, the model
/// hashes and entity counts of the copy. Backups write it beside the copy as
/// `<name>.manifest.json`; snapshots carry it inside their archive.
///
/// `formatVersion` lets later formats add fields without breaking readers of old manifests:
/// readers accept any version they know and refuse newer ones with a clear message.
public struct Manifest: Sendable, Codable, Equatable {
    public static let currentFormatVersion = 1

    public var format = "storectl-manifest"
    public var formatVersion = Manifest.currentFormatVersion
    /// "backup" or "snapshot".
    public var kind: String
    public var tool: Tool
    public var host: String
    public var source: Source
    public var database: FileRecord
    public var externalData: ExternalData?
    public var startedAt: Date
    public var finishedAt: Date
    public var durationSeconds: Double
    public var verify: Verification
    public var coreData: CoreDataFacts?
    /// Snapshots only: id, tags, compression and (in the catalog copy) the archive.
    public var snapshot: SnapshotFacts?

    public struct Tool: Sendable, Codable, Equatable {
        public var name = "storectl"
        public var version = StoreOpsVersion.current
        public var sqliteVersion = StoreConnection.sqliteVersion
    }

    /// The store as it was when the copy started.
    public struct Source: Sendable, Codable, Equatable {
        public var path: String
        public var journalMode: String
        public var pageSize: Int
        public var pageCount: Int
        public var fileBytes: UInt64
        public var walBytes: UInt64
    }

    /// One file of the copy, with its size and SHA-256.
    public struct FileRecord: Sendable, Codable, Equatable {
        /// Path relative to the manifest's folder (or the archive root).
        public var path: String
        public var bytes: UInt64
        /// Absent only for the database of a format-2 snapshot: its pages are streamed in the
        /// order SQLite writes them, so no whole-file hash exists when it is made; every page is
        /// checked against its content id instead (and `pages.digest` covers their order).
        public var sha256: String?
        public var pageSize: Int?
        public var pageCount: Int?
        public var journalMode: String?
    }

    /// Core Data's external binary data copied along with the store.
    public struct ExternalData: Sendable, Codable, Equatable {
        /// Folder relative to the manifest's folder, e.g. ".Tasks-2026..._SUPPORT/_EXTERNAL_DATA".
        public var folder: String
        public var files: [FileRecord]
        public var totalBytes: UInt64
    }

    public struct Verification: Sendable, Codable, Equatable {
        public var level: VerifyLevel
        public var ok: Bool
        public var messages: [String]
    }

    public struct SnapshotFacts: Sendable, Codable, Equatable {
        public var id: String
        public var tags: [String]
        public var compression: Compression
        public var level: Int?
        /// The archive file (format 1). Absent from the copy inside the archive (it cannot hash
        /// itself), and from format-2 snapshots, which have no archive.
        public var archive: FileRecord?
        /// The repository format the snapshot is in: absent for 1 (an archive), 2 (pages).
        public var format: Int?
        /// Format 2: the snapshot it was made against.
        public var parent: String?
        /// Format 2: bytes it added to the repository (new packs and index).
        public var addedBytes: UInt64?

        public init(id: String, tags: [String], compression: Compression, level: Int?, archive: FileRecord?,
                    format: Int? = nil, parent: String? = nil, addedBytes: UInt64? = nil) {
            self.id = id
            self.tags = tags
            self.compression = compression
            self.level = level
            self.archive = archive
            self.format = format
            self.parent = parent
            self.addedBytes = addedBytes
        }
    }

    public struct CoreDataFacts: Sendable, Codable, Equatable {
        public var metadata: CoreDataMetadata
        /// Entity name -> rows (only entities with a table).
        public var entityCounts: [String: Int]
    }
}

extension Manifest {
    /// The manifest of a verified copy: backups and snapshots build theirs here.
    ///
    /// - Parameters:
    ///   - database: the copy's path as the manifest records it (a name, or `store/<name>` in an archive).
    ///   - external: the folder (relative) and records of the external data copied along, if any.
    static func of(kind: String, copied: ConsistentCopy.Copied, database: String, bytes: UInt64, sha256: String?,
                   inspection: ConsistentCopy.Inspection, external: (folder: String, files: [FileRecord])?,
                   coreData: CoreDataFacts?, startedAt: Date, snapshot: SnapshotFacts? = nil) -> Manifest {
        let finishedAt = Timestamp.now()
        return Manifest(
            kind: kind, tool: .init(), host: ProcessInfo.processInfo.hostName, source: copied.source,
            database: .init(path: database, bytes: bytes, sha256: sha256, pageSize: inspection.pageSize,
                            pageCount: inspection.pageCount, journalMode: "delete"),
            externalData: external.map { .init(folder: $0.folder, files: $0.files, totalBytes: $0.files.reduce(0) { $0 + $1.bytes }) },
            startedAt: startedAt, finishedAt: finishedAt, durationSeconds: finishedAt.timeIntervalSince(startedAt),
            verify: inspection.verification, coreData: coreData, snapshot: snapshot)
    }
}


extension Manifest {
    /// Sizes in a record or an archive's manifest are at most this (SQLite's largest database is
    /// 2^32 pages of 64 KiB = 2^48 bytes); totals over many files at most `maxTotal`. Anything
    /// larger is damage (or a forged manifest), refused before it reaches a sum or a conversion.
    static let maxBytes: UInt64 = 1 << 50
    static let maxTotal: UInt64 = 1 << 60

    /// Refuses (65, naming the field) figures no storectl writes and that would overflow the sums
    /// and conversions made of them (sizes, counts, the duration).
    /// What `snapshot import` holds an archive to, every record is held to where it is opened:
    /// a manifest format this storectl reads; a host and store path without control characters
    /// (list, show and prune print them: one could forge lines of their output); a time that is
    /// the id's (storectl makes the id from it: prune keeps the newest, and a forged later time
    /// would keep it and remove the store's own). Not "at most a day ahead": that reads this
    /// host's clock, and a reader whose clock is behind (a machine booted before its clock
    /// synced) would call every good snapshot damaged; import checks it once, when one comes in.
    func checkIdentity(id: String, what: String) throws {
        guard formatVersion >= 1, formatVersion <= Manifest.currentFormatVersion else {
            throw StoreOpsError(.badData, "\(what): its manifest has format \(formatVersion); this storectl reads up to \(Manifest.currentFormatVersion)",
                                hint: "use a newer storectl")
        }
        for (field, text) in [("host", host), ("store path", source.path)] where Self.hasControlCharacter(text) {
            throw StoreOpsError(.badData, "\(what) names a \(field) storectl would not write: \(text.debugDescription)", hint: Sealer.damagedHint)
        }
        guard let idTime = SnapshotID.time(of: id), abs(startedAt.timeIntervalSince(idTime) - 0.5) <= 2.5 else {
            throw StoreOpsError(.badData, "\(what) says it was taken at \(Timestamp.iso(startedAt)), which is not the time in its id", hint: Sealer.damagedHint)
        }
    }

    static func hasControlCharacter(_ text: String) -> Bool {
        text.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }

    func checkFigures(what: String) throws {
        func refuse(_ field: String, _ value: String) -> StoreOpsError {
            StoreOpsError(.badData, "\(what): its \(field) \(value) is out of range", hint: Sealer.damagedHint)
        }
        // Negative when the clock stepped back during the copy: a real record, kept.
        guard durationSeconds.isFinite, abs(durationSeconds) <= 1e9 else { throw refuse("durationSeconds", "\(durationSeconds)") }
        for (field, value) in [("source.fileBytes", source.fileBytes), ("source.walBytes", source.walBytes), ("database.bytes", database.bytes)] where value > Self.maxBytes {
            throw refuse(field, "\(value)")
        }
        for (field, value) in [("source.pageSize", source.pageSize), ("source.pageCount", source.pageCount),
                               ("database.pageSize", database.pageSize ?? 0), ("database.pageCount", database.pageCount ?? 0)]
        where value < 0 || value > 1 << 32 {
            throw refuse(field, "\(value)")
        }
        if let external = externalData {
            guard external.totalBytes <= Self.maxTotal else { throw refuse("externalData.totalBytes", "\(external.totalBytes)") }
            for file in external.files where file.bytes > Self.maxBytes { throw refuse("externalData file \(file.path.debugDescription) bytes", "\(file.bytes)") }
        }
        if let added = snapshot?.addedBytes, added > Self.maxTotal { throw refuse("snapshot.addedBytes", "\(added)") }
        for (entity, count) in coreData?.entityCounts ?? [:] where count < 0 || count > 1 << 48 {
            throw refuse("coreData.entityCounts[\(entity.debugDescription)]", "\(count)")
        }
    }
}
