import Foundation
import GRDB

/// The file beside a store while a migration runs: if the process dies, the next migrate,
/// rollback or preflight finds it and says where the pre-migration snapshot is.
public struct MigrationJournal: Sendable, Codable, Equatable {
    public var pid: Int32
    public var host: String
    public var startedAt: Date
    public var store: String
    public var repository: String
    public var snapshotId: String
    public var fromVersion: Int
    public var toVersion: Int
    /// The migrations folder the run was given (absent in journals of older versions).
    public var migrations: String?
    /// Whether a pending migration runs without a transaction (its statements commit one by
    /// one, so the history's version proves nothing about it); absent in older journals.
    public var noTransactionPending: Bool? = nil

    public static func path(for store: StoreFile) -> String { store.path + ".storectl-migration.json" }

    public static func read(_ store: StoreFile) -> MigrationJournal? {
        FileManager.default.contents(atPath: path(for: store)).flatMap { try? JSON.decoder().decode(MigrationJournal.self, from: $0) }
    }

    func write(_ store: StoreFile) throws {
        let file = try PendingFile(finalPath: Self.path(for: store), label: "migrate.journal")
        try file.write(try JSON.encode(self))
        try file.commit(replacing: true)
    }

    static func remove(_ store: StoreFile) throws {
        guard FileSystem.kind(of: path(for: store)) != .missing else { return }
        try FileSystem.removeFile(path(for: store), point: "migrate.journal.remove")
        try FileSystem.sync(store.folder, directory: true, point: "migrate.journal.remove.sync-folder")
    }

    /// What an operator should do about an interrupted migration.
    public var advice: String {
        "a migration (pid \(pid) on \(host), started \(Timestamp.iso(startedAt)), version \(fromVersion) -> \(toVersion)) was interrupted; "
            + "its pre-migrate snapshot is \(snapshotId) in \(repository). To go back: storectl rollback \(store) --repo \(repository); "
            + "to keep the store as it is and go on: storectl migrate apply \(store) --migrations \(migrations ?? "DIR") --repo \(repository) --resume"
    }
}
