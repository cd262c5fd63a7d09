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

