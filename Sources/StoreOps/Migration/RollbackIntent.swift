import Foundation

/// The file beside a store while `storectl rollback` (to its default target, the snapshot taken
/// before the newest migration run) swaps: killed after the swap and before it said so, the
/// operator runs the same command again, and it would roll back one more run. The next run finds
/// this file, sees the store's version below the one the stopped run started from, and says the
/// rollback is done instead (nothing more restored).
struct RollbackIntent: Sendable, Codable, Equatable {
    var pid: Int32
    var host: String
    var startedAt: Date
    /// The snapshot the stopped run put back.
    var snapshotId: String
    /// The store's version (its highest applied migration) when that run began.
    var fromVersion: Int

    static func path(for store: StoreFile) -> String { store.path + ".storectl-rollback.json" }

    static func read(_ store: StoreFile) -> RollbackIntent? {
        FileManager.default.contents(atPath: path(for: store)).flatMap { try? JSON.decoder().decode(RollbackIntent.self, from: $0) }
    }

    func write(_ store: StoreFile) throws {
        let file = try PendingFile(finalPath: Self.path(for: store), label: "rollback.intent")
        try file.write(try JSON.encode(self))
        try file.commit(replacing: true)
    }

    /// Removes the file if this process wrote it (a run that started meanwhile writes its own).
    static func removeOwn(_ store: StoreFile) {
        guard let intent = read(store), intent.pid == getpid(), intent.host == ProcessInfo.processInfo.hostName else { return }
        try? remove(store)
    }

    static func remove(_ store: StoreFile) throws {
        guard FileSystem.kind(of: path(for: store)) != .missing else { return }
        try FileSystem.removeFile(path(for: store), point: "rollback.intent.remove")
        try FileSystem.sync(store.folder, directory: true, point: "rollback.intent.remove.sync-folder")
    }
}
