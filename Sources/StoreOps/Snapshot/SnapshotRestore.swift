import Foundation
import Logging

/// `storectl snapshot restore`: puts a verified snapshot back, as a new file or in place of a store.
public enum SnapshotRestore {
    static let logger = Logger(label: "storectl.restore")
    public enum Target: Sendable, Equatable {
        /// A new file (refused if it exists).
        case file(String)
        /// In place of a store: a safety snapshot of it first, then an atomic swap.
        case inPlace(String)
    }

    public struct Options: Sendable {
        public var repository: String
        public var id: String
        public var target: Target
        /// In place: go ahead although another process has the store open, and, when the current
        /// store is too damaged for a safety snapshot, move it aside instead.
        public var force = false
        /// Wait for the repository's and the store's locks instead of exiting 75.
        public var wait = false
        public var timeout: TimeInterval = 60
        /// The caller (a migration rolling back) already holds the store's job lock.
        public var jobLockHeld = false
        /// How the current store is kept before it is replaced (in place).
        public var keepCurrent: KeepCurrent = .snapshot

        public enum KeepCurrent: Sendable, Equatable {
            /// A safety snapshot (tag pre-restore) in the repository.
            case snapshot
            /// Renamed aside with this suffix (`<store><suffix>`, -wal and -shm too): instant, for a
            /// migration's rollback, whose failed state is only evidence.
            case moveAside(suffix: String)
        }

        public init(repository: String, id: String, target: Target, force: Bool = false, wait: Bool = false) {
            self.repository = repository
            self.id = id
            self.target = target
            self.force = force
            self.wait = wait
        }
    }

    public struct Result: Sendable, Codable {
        public var id: String
        public var restoredTo: String
        /// In place: the `pre-restore` snapshot of the store as it was.
        public var safetySnapshot: String?
        /// In place with --force on a damaged store: where the damaged files were moved.
        public var movedAside: [String]
        /// In place: the old store's -wal/-shm/-journal that were removed.
        public var removedSidecars: [String]
        public var externalFiles: Int
        public var record: Manifest
    }

    /// Verifies the snapshot while unpacking it beside the target, checks the database, then
    /// swaps it into place.
    ///
    /// - Throws: 66 unknown id, 65 damaged snapshot (nothing changed), 73 target not creatable or
    ///   existing, 74 no room, 75 store open by another process or locked.
    public static func run(_ options: Options) throws -> Result {
        let repository = try SnapshotRepository.open(options.repository)
        let lock = try repository.lockForWriting(job: "snapshot restore", wait: options.wait)
        defer { lock.release() }
        let record = try repository.record(options.id)
        switch options.target {
        case .file(let path):
            return try restoreToNewFile(record, repository: repository, path: FileSystem.absolute(path))
        case .inPlace(let path):
            return try restoreInPlace(record, repository: repository, store: StoreFile(unchecked: path), options: options)
        }
    }

    /// Unpacked and checked, not yet in place.
    struct Staged {
        var database: PendingFile
        var support: PendingFile?
        var externalFiles: Int
    }

    static func stage(_ record: Manifest, repository: SnapshotRepository, at finalPath: String) throws -> Staged {
        let folder = FileSystem.parent(of: finalPath)
        switch FileSystem.kind(of: folder) {
        case .directory: break
        case .missing: throw StoreOpsError(.cannotCreate, "the folder \(folder) does not exist")
        default: throw StoreOpsError(.cannotCreate, "\(folder) is not a folder")
        }
        guard access(folder, W_OK | X_OK) == 0 else {
            throw StoreOpsError(.cannotCreate, "the folder \(folder) is not writable")
        }
        let external = record.externalData?.totalBytes ?? 0
        let needed = record.database.bytes + external + SpaceRequirement.margin(record.database.bytes)
        let space = try FileSystem.space(at: folder)
        guard space.availableBytes >= needed else {
            throw StoreOpsError(.ioError, "not enough space in \(folder) to restore: \(Format.bytes(space.availableBytes)) free, \(Format.bytes(needed)) needed")
        }
        PendingFile.removeStale(in: folder)
        let database = try PendingFile(finalPath: finalPath)
        var support: PendingFile?
        var externalFolder: String?
        if record.externalData != nil {
            let stem = (FileSystem.name(of: finalPath) as NSString).deletingPathExtension
            let pending = try PendingFile(finalPath: (folder as NSString).appendingPathComponent(".\(stem)_SUPPORT"), directory: true)
            let inner = (pending.tempPath as NSString).appendingPathComponent("_EXTERNAL_DATA")
            guard mkdir(inner, 0o700) == 0 else { throw StoreOpsError.posix(errno, doing: "creating \(inner)", side: .output) }
            externalFolder = inner
            support = pending
        }
        let started = Date()
        try SnapshotExtraction.run(record, repository: repository, into: .init(database: database.tempPath, externalFolder: externalFolder),
                                   level: .quick)
        logger.debug("unpacked and checked", metadata: ["ms": "\(Int(Date().timeIntervalSince(started) * 1000))"])
        return Staged(database: database, support: support, externalFiles: record.externalData?.files.count ?? 0)
    }

    static func restoreToNewFile(_ record: Manifest, repository: SnapshotRepository, path: String) throws -> Result {
        guard FileSystem.kind(of: path) == .missing else {
            throw StoreOpsError(.cannotCreate, "\(path) already exists",
                                hint: "restore to a new path, or use --in-place to replace a store (with a safety snapshot)")
        }
        let support = (FileSystem.parent(of: path) as NSString)
            .appendingPathComponent(".\((FileSystem.name(of: path) as NSString).deletingPathExtension)_SUPPORT")
        if record.externalData != nil, FileSystem.kind(of: support) != .missing {
            throw StoreOpsError(.cannotCreate, "\(support) already exists: the restored store's external data would go there",
                                hint: "restore to another name, or move that folder away first")
        }
        let staged = try stage(record, repository: repository, at: path)
        if let support = staged.support { try support.commit() }
        try staged.database.commit()
        return Result(id: record.snapshot?.id ?? "", restoredTo: path, safetySnapshot: nil, movedAside: [], removedSidecars: [],
                      externalFiles: staged.externalFiles, record: record)
    }

    /// `<store>-wal` becomes `<store><suffix>-wal`: a moved-aside pair still opens together.
    static func asideName(_ path: String, of store: StoreFile, suffix: String) -> String {
        store.path + suffix + path.dropFirst(store.path.count)
    }

    static func restoreInPlace(_ record: Manifest, repository: SnapshotRepository, store: StoreFile, options: Options) throws -> Result {
        let jobLock = options.jobLockHeld ? nil : try JobLock.acquire(path: store.jobLockPath, job: "snapshot restore", wait: options.wait)
        defer { jobLock?.release() }
        let exists = FileSystem.kind(of: store.path) == .file
        if exists, !options.force {
            if let pid = try LockState.otherUser(of: store) {
                throw StoreOpsError(.busy, "\(store.path) is open by another process (pid \(pid)); nothing was changed",
                                    hint: "stop the app first, or pass --force to restore anyway")
            }
        }
        var safety: String?
        var movedAside: [String] = []
        var asideSuffix: String?
        if case .moveAside(let suffix) = options.keepCurrent { asideSuffix = suffix }
        if exists, asideSuffix == nil {
            do {
                let created = try SnapshotCreate.create(store: try StoreFile(existing: store.path), in: repository, tags: ["pre-restore"],
                                                        compression: .zstd, level: nil, timeout: options.timeout,
                                                        checkFreeSpace: true, progress: nil)
                safety = created.id
            } catch let error as StoreOpsError where error.status == .badData {
                guard options.force else {
                    throw StoreOpsError(.badData, "the current store cannot be snapshotted (\(error.message)); nothing was changed",
                                        hint: "pass --force to restore anyway: the damaged store is then moved aside, not deleted")
                }
            }
        }
        let staged = try stage(record, repository: repository, at: store.path)
        if exists {
            // The app's user must be able to open its restored store: same owner and mode as before.
            try FileSystem.copyOwnership(from: store.path, to: staged.database.tempPath)
            if let support = staged.support { try FileSystem.copyOwnership(from: store.path, to: support.tempPath) }
        }

        // The swap. From here on the old store is safe in the safety snapshot (or moved aside).
        if exists, safety == nil {
            let suffix = asideSuffix ?? ".damaged-\(Timestamp.compact(Date()))"
            for path in [store.path, store.walPath, store.shmPath, store.journalPath] where FileSystem.kind(of: path) == .file {
                let aside = asideName(path, of: store, suffix: suffix)
                try FileSystem.rename(path, aside)
                movedAside.append(aside)
            }
        }
        // A -wal or hot -journal left beside the restored file would be replayed onto it. Those of
        // the old store are in the safety snapshot; without an old store (an earlier run died between
        // its renames) they are all that is left of something, so they are moved aside, not deleted.
        var removed: [String] = []
        let orphanSuffix = ".orphaned-\(Timestamp.compact(Date()))"
        for sidecar in [store.walPath, store.shmPath, store.journalPath] where FileSystem.kind(of: sidecar) == .file {
            if !exists {
                let aside = asideName(sidecar, of: store, suffix: orphanSuffix)
                try FileSystem.rename(sidecar, aside)
                movedAside.append(aside)
                continue
            }
            guard unlink(sidecar) == 0 else { throw StoreOpsError.posix(errno, doing: "removing \(sidecar)", side: .output) }
            removed.append(sidecar)
        }
        try staged.database.commit(replacing: true)
        // External data: the restored store gets the snapshot's folder (or none), atomically.
        let supportPath = (store.folder as NSString).appendingPathComponent(".\(store.stem)_SUPPORT")
        var oldSupport: String?
        if FileSystem.kind(of: supportPath) == .directory {
            let aside = (store.folder as NSString).appendingPathComponent(".\(store.stem)_SUPPORT\(PendingFile.marker)\(getpid())-old")
            try FileSystem.rename(supportPath, aside)
            oldSupport = aside
        }
        if let support = staged.support { try support.commit() }
        if let oldSupport { FileSystem.remove(oldSupport) }
        try FileSystem.sync(store.folder, directory: true)
        return Result(id: record.snapshot?.id ?? "", restoredTo: store.path, safetySnapshot: safety, movedAside: movedAside,
                      removedSidecars: removed, externalFiles: staged.externalFiles, record: record)
    }
}
