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
    /// The version the snapshot puts back (the highest applied before the run it undoes).
    var toVersion: Int
    /// The staged database's device and inode, which the swap's rename puts at the store's path
    /// (nil through SQLite, `--live`: the file stays).
    var device: UInt64?
    var inode: UInt64?
    /// The writer's start (clock ticks since boot) and boot: a process with its pid that started
    /// at another tick is another process (absent in files of a storectl before these).
    var startTicks: UInt64? = ProcessIdentity.ownStartTicks
    var boot: String? = ProcessIdentity.boot

    /// Whether the store is as that run left it after its swap: at `toVersion`, below
    /// `fromVersion`, and (a swap) the very file it installed. A store migrated or restored since
    /// is not; nor is one the run never swapped (killed before: the file is stale).
    func finished(store: StoreFile, version: Int) -> Bool {
        guard version == toVersion, version < fromVersion else { return false }
        guard let device, let inode else { return true }
        guard let now = FileSystem.identity(of: store.path) else { return false }
        return now.dev == device && now.ino == inode
    }

    /// The run that wrote it is still running (it is about to say what it did; a `rollback
    /// --wait` that got the store's lock after it must not take its file for a stopped run's).
    var runnerAlive: Bool {
        host == ProcessInfo.processInfo.hostName && pid != getpid() && (boot == nil || ProcessIdentity.boot == nil || boot == ProcessIdentity.boot)
            && ProcessIdentity.isRunning(pid, startTicks: startTicks)
    }

    static func path(for store: StoreFile) -> String { store.path + ".storectl-rollback.json" }

    static func read(_ store: StoreFile) -> RollbackIntent? {
        FileManager.default.contents(atPath: path(for: store)).flatMap { try? JSON.decoder().decode(RollbackIntent.self, from: $0) }
    }

    func write(_ store: StoreFile) throws {
        let file = try PendingFile(finalPath: Self.path(for: store), label: "rollback.intent")
        try file.write(try JSON.encode(self))
        try file.commit(replacing: true)
    }

    /// Removes the file if this process wrote it (a run that started meanwhile writes its own);
    /// with `unlessSwapped`, only while the store is still at the version the run started from
    /// (an error after the swap leaves it: the next run must know the swap was done).
    static func removeOwn(_ store: StoreFile, unlessSwapped: Bool = false) {
        guard let intent = read(store), intent.pid == getpid(), intent.host == ProcessInfo.processInfo.hostName else { return }
        if unlessSwapped {
            guard let version = try? Migrate.readOnly(store, timeout: 10, { try MigrationHistory.version($0) }), version == intent.fromVersion else { return }
        }
        try? remove(store)
    }

    static func remove(_ store: StoreFile) throws {
        guard FileSystem.kind(of: path(for: store)) != .missing else { return }
        try FileSystem.removeFile(path(for: store), point: "rollback.intent.remove")
        try FileSystem.sync(store.folder, directory: true, point: "rollback.intent.remove.sync-folder")
    }
}
