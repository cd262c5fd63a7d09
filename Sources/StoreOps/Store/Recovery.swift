import Foundation

/// `storectl recover PATH`: finishes what an interrupted storectl run left at a store or a copy,
/// so it is exactly in one state again. Every command that touches a store does the same first;
/// this is the explicit way (after a crash, before starting the app).
public enum Recovery {
    public struct Result: Sendable, Codable {
        public var path: String
        /// The interrupted swap that was finished (or undone), if there was one.
        public var swap: StoreSwap.Outcome?
        /// Temporary files of dead storectl processes removed from the folder.
        public var removedTemporaryFiles: [String]
        /// An interrupted migration needs a person's decision; recover does not make it.
        public var interruptedMigration: MigrationJournal?
        /// `recover FOLDER`: the interrupted swaps of stores in it, each finished as for the store.
        public var inFolder: [Result]?
        /// `recover FOLDER`: temporary files of storectl runs still going (left alone), with their pids.
        public var running: [RunningFile]?
    }

    public struct RunningFile: Sendable, Codable, Equatable {
        public var path: String
        public var pid: Int32
    }

    /// What every command that touches a store does first: finish an interrupted swap of it (so
    /// it is in one state again) and remove temporary files that dead storectl runs left beside it.
    /// Takes the store's job lock for the swap unless the caller holds it (a swap in progress holds
    /// it: then exit 75).
    @discardableResult
    public static func prepare(_ store: StoreFile, lockHeld: Bool) throws -> StoreSwap.Outcome? {
        var outcome: StoreSwap.Outcome?
        if StoreSwap.pending(target: store.path) {
            let lock = lockHeld ? nil : try JobLock.acquire(path: store.jobLockPath, job: "recover")
            defer { lock?.release() }
            outcome = try StoreSwap.recover(target: store.path)
        }
        PendingFile.removeStale(besideStore: store)
        return outcome
    }

    /// - Throws: 75 while another storectl job holds the store (a swap in progress), 65 when a swap
    ///   record is unreadable (nothing is guessed), 66 when neither the path, nor a record of it,
    ///   nor a temporary file made for it exists.
    public static func run(path: String) throws -> Result {
        let store = StoreFile(unchecked: path)
        guard FileSystem.kind(of: store.folder) == .directory else {
            throw StoreOpsError(.noInput, "the folder \(store.folder) does not exist", hint: "check the path")
        }
        if FileSystem.kind(of: store.path) == .missing, !StoreSwap.pending(target: store.path) {
            // A backup or restore --to killed before its swap record: only its temporary files are
            // left, named for the file it was making (the database, its manifest, its external data).
            let manifest = (store.folder as NSString).appendingPathComponent("\((store.name as NSString).deletingPathExtension).manifest.json")
            let made = [store.path, store.supportPath, manifest].flatMap(PendingFile.temporaries(of:))
            guard !made.isEmpty else {
                throw StoreOpsError(.noInput, "\(store.path): no such file, and no interrupted operation recorded for it", hint: "check the path")
            }
            // No job lock: none is taken for a file that does not exist (it would leave a lock file
            // beside nothing). Only the files of processes that no longer run are removed.
            let removed = PendingFile.removeStale(in: store.folder)
            let alive = made.filter { FileSystem.kind(of: $0) != .missing }
            if let running = alive.first, !made.contains(where: removed.contains) {
                throw StoreOpsError(.busy, "a storectl run (pid \(PendingFile.temporaryOwner(FileSystem.name(of: running)).map(String.init) ?? "?")) is still making \(store.path): \(running)",
                                    hint: "wait for it to finish")
            }
            removeStaleScratch()
            return Result(path: store.path, swap: nil, removedTemporaryFiles: removed, interruptedMigration: nil)
        }
        if FileSystem.kind(of: store.path) == .directory {
            // A folder (a backup folder, a --scratch folder): what dead storectl runs left in it,
            // and their verification scratch copies in the temp folder. No lock file is made.
            let folder = FileSystem.absolute(path)
            // A store in it whose swap was interrupted (the folder named after a crash): each is
            // finished as `recover STORE` would, under its job lock.
            let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
            let stores = names.filter { $0.hasSuffix(StoreSwap.journalSuffix) }.sorted()
                .map { (folder as NSString).appendingPathComponent(String($0.dropLast(StoreSwap.journalSuffix.count))) }
            let inFolder = try stores.map { try run(path: $0) }
            let removed = PendingFile.removeStale(in: folder) + removeStaleScratch()
            // What is left of storectl's temporary files belongs to runs still going: said, not
            // touched (a trial's `recover FOLDER` beside a running backup said "nothing to recover").
            let running = ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted().compactMap { name -> RunningFile? in
                let path = (folder as NSString).appendingPathComponent(name)
                guard let pid = PendingFile.temporaryOwner(name), PendingFile.isRunning(path) else { return nil }
                return RunningFile(path: path, pid: pid)
            }
            return Result(path: folder, swap: nil, removedTemporaryFiles: removed, interruptedMigration: nil, inFolder: inFolder.isEmpty ? nil : inFolder,
                          running: running.isEmpty ? nil : running)
        }
        if !StoreSwap.pending(target: store.path), isNotADatabase(store.path) {
            // Not a database (a password file, a policy, an export archive): no swap can be
            // pending for it and no job runs on it, so no job lock (and no lock file) is taken;
            // the temporary files of dead runs in its folder go, as for a store.
            let removed = PendingFile.removeStale(in: store.folder)
            return Result(path: store.path, swap: nil, removedTemporaryFiles: removed, interruptedMigration: nil)
        }
        // Nothing pending and no lock file (no storectl job ever ran on it: a backup, a restored
        // copy): nothing to finish, and no lock file left beside it (a trial found one beside every
        // copy it recovered). A job starting meanwhile makes its lock file before any swap, and a
        // swap is finished only under the lock.
        guard StoreSwap.pending(target: store.path) || FileSystem.kind(of: store.jobLockPath) != .missing else {
            let removed = PendingFile.removeStale(besideStore: store) + removeStaleScratch()
            return Result(path: store.path, swap: nil, removedTemporaryFiles: removed, interruptedMigration: MigrationJournal.read(store))
        }
        let lock = try JobLock.acquire(path: store.jobLockPath, job: "recover")
        defer { lock.release() }
        let swap = try StoreSwap.recover(target: store.path)
        // Scratch copies of killed verifications (a killed migrate's) and first snapshots in the
        // temp folder, counted with the rest (a trial's recover removed one and said "nothing to recover").
        let removed = PendingFile.removeStale(besideStore: store) + removeStaleScratch()
        return Result(path: store.path, swap: swap, removedTemporaryFiles: removed, interruptedMigration: MigrationJournal.read(store))
    }

    /// What killed runs left in the temp folder: verification copies and first snapshots' copies.
    @discardableResult
    static func removeStaleScratch() -> [String] {
        PendingFile.removeStale(in: NSTemporaryDirectory(), prefix: SnapshotVerify.scratchPrefix)
            + PendingFile.removeStale(in: NSTemporaryDirectory(), prefix: PageSpill.scratchPrefix)
            + PendingFile.removeStale(in: NSTemporaryDirectory(), prefix: OverlayPages.scratchName)
    }

    /// A file that certainly is not a SQLite database: readable, with a first byte, and a header
    /// that is not SQLite's. An unreadable, empty or damaged store is not certain: it is recovered
    /// as a store (under its lock), as before.
    static func isNotADatabase(_ path: String) -> Bool {
        guard FileSystem.kind(of: path) == .file, let header = try? FileProbe.shared.header(of: path), !header.isEmpty else { return false }
        let magic = Array("SQLite format 3\0".utf8)
        return !zip(header, magic).allSatisfy { $0 == $1 }
    }
}
