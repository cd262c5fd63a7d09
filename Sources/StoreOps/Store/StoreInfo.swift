import Foundation
import GRDB

/// The physical state of a store: journal mode, pages, free list, WAL, user_version.
public struct StoreInfo: Sendable, Codable, Equatable {
    public var path: String
    public var journalMode: String
    public var pageSize: Int
    public var pageCount: Int
    public var freelistCount: Int
    public var userVersion: Int
    public var fileBytes: UInt64
    public var walBytes: UInt64
    public var sqliteVersion: String

    public init(path: String, journalMode: String, pageSize: Int, pageCount: Int, freelistCount: Int, userVersion: Int,
                fileBytes: UInt64, walBytes: UInt64, sqliteVersion: String) {
        self.path = path
        self.journalMode = journalMode
        self.pageSize = pageSize
        self.pageCount = pageCount
        self.freelistCount = freelistCount
        self.userVersion = userVersion
        self.fileBytes = fileBytes
        self.walBytes = walBytes
        self.sqliteVersion = sqliteVersion
    }

    /// page_count x page_size: what a copy of the store occupies.
    public var logicalBytes: UInt64 { UInt64(pageSize) * UInt64(pageCount) }
    public var isWAL: Bool { journalMode == "wal" }
    public var freelistRatio: Double { pageCount == 0 ? 0 : Double(freelistCount) / Double(pageCount) }

    /// Reads the figures through an open connection (inside a transaction if the caller holds one).
    public static func read(_ db: Database, store: StoreFile) throws -> StoreInfo {
        StoreInfo(
            path: store.path,
            journalMode: (try String.fetchOne(db, sql: "PRAGMA journal_mode") ?? "unknown").lowercased(),
            pageSize: try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 0,
            pageCount: try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0,
            // The header's u32, which SQLite returns signed: 0xFFFFFFFF in a damaged header is -1.
            freelistCount: Int(UInt32(truncatingIfNeeded: try Int.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0)),
            userVersion: try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0,
            fileBytes: FileSystem.size(of: store.path) ?? 0,
            walBytes: FileSystem.size(of: store.walPath) ?? 0,
            sqliteVersion: StoreConnection.sqliteVersion)
    }
}
