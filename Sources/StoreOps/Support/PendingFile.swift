import Foundation

/// A file (or folder) being produced under a hidden temporary name in its final folder.
///
/// The rule for everything storectl writes: create the temp name with mode 0600, fill it, verify
/// it, fsync it, rename it to the final name, fsync the folder. Until `commit` the artifact has a
/// name no reader takes for a finished one (`.<final>.tmp-storectl-<pid>-L<random>`), and `discard`
/// (or a later run's `removeStale`) deletes it, with SQLite's own `-journal`/`-wal`/`-shm` beside it.
///
/// Whose it is: the making process holds an flock(2) on the temporary artifact until it is
/// renamed, discarded or handed over. A later run judges a temporary by that lock, not by the pid
/// in its name: in a container every run is pid 1, so a killed run's files carried a live pid for
/// ever (a `backup --output FIXED` refused 75 on every later run). The pid is still the rule for
/// names made by storectl before the lock (no `L` before the random part), for a file system whose
/// flock does not work, and for a name made a moment ago (its maker may not have locked it yet).
public final class PendingFile {
    public let finalPath: String
    public let tempPath: String
    public let isDirectory: Bool
    /// Names this artifact's fault points: `<label>.create`, `.sync`, `.rename`, `.sync-folder`, `.discard`.
    public let label: String
    public private(set) var isCommitted = false
    /// The descriptor holding this artifact's flock while it is this run's; -1 once released.
    private var lockFD: Int32 = -1

    static let marker = ".tmp-storectl-"
    /// Between the pid and the random part of a name whose maker holds its lock.
    static let lockedTag = "L"

    /// Creates the temp file (`O_CREAT|O_EXCL`, mode 0600) or temp folder (0700) next to `finalPath`.
    public init(finalPath: String, directory: Bool = false, label: String) throws {
        self.finalPath = finalPath
        self.isDirectory = directory
        self.label = label
        let folder = FileSystem.parent(of: finalPath)
        // Locked only where flock is the file system's own (network file systems imitate it
        // with byte-range locks that can fight SQLite's, or refuse it on a read-only descriptor):
        // elsewhere the name carries no `L` and is judged by its pid, as before.
        let locking = FileSystem.hasLocalFlock(folder)
        tempPath = (folder as NSString).appendingPathComponent(Self.temporaryPrefix(for: finalPath) + Self.ownerPart(locked: locking))
        guard Self.registry.withLock({ Self.ownPaths.insert(tempPath).inserted }) else {
            throw StoreOpsError(.failure, "\(tempPath) is already being made by this process")
        }
        do {
            if directory {
                try FileSystem.makeDirectory(tempPath, point: "\(label).create")
                if locking {
                    lockFD = open(tempPath, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                    if lockFD < 0 {
                        let err = errno
                        FileSystem.remove(tempPath, point: "\(label).discard")
                        throw StoreOpsError.posix(err, doing: "opening \(tempPath)", side: .output)
                    }
                }
            } else {
                let fd = try FileSystem.create(tempPath, point: "\(label).create")
                if locking { lockFD = fd } else { close(fd) }
            }
            // Blocking: another run's probe (`lockState`) holds it for an instant at most. A name
            // with `L` must be locked while its maker runs (a later run would take it for a
            // killed run's): if it cannot be, the artifact is not made.
            if lockFD >= 0 {
                var locked = flock(lockFD, LOCK_EX) == 0
                while !locked, errno == EINTR { locked = flock(lockFD, LOCK_EX) == 0 }
                if !locked {
                    let err = errno
                    close(lockFD)
                    lockFD = -1
                    FileSystem.remove(tempPath, point: "\(label).discard")
                    throw StoreOpsError.posix(err, doing: "locking \(tempPath)", side: .output)
                }
            }
        } catch {
            Self.registry.withLock { _ = Self.ownPaths.remove(tempPath) }
            throw error
        }
    }

    /// `<pid>-L<random>`: the part of a temporary name after `.<final>.tmp-storectl-`.
    static func ownerPart(locked: Bool) -> String {
        "\(getpid())-\(locked ? lockedTag : "")\(String(UInt32.random(in: 0...UInt32.max), radix: 36))"
    }

    /// The temporaries this process is making now: never probed (opening and closing a file this
    /// process has open in SQLite would drop SQLite's POSIX locks on it) and never removed.
    private static let registry = NSLock()
    nonisolated(unsafe) private static var ownPaths = Set<String>()

    /// Gives up this artifact's lock: after its rename, its removal, or once another owner (a swap
    /// record) answers for it. Closing the descriptor is safe then: no SQLite connection of this
    /// process has the file open (each caller closes its own before committing or handing over).
    private func releaseLock() {
        Self.registry.withLock { _ = Self.ownPaths.remove(tempPath) }
        if lockFD >= 0 { close(lockFD) }
        lockFD = -1
    }

    /// The descriptor holding the artifact's flock, for a caller that keeps holding it past the
    /// commit (a swap record, locked for the swap's whole life); -1 where no lock could be taken.
    public func takeLock() -> Int32 {
        let fd = lockFD
        lockFD = -1
        return fd
    }

    /// Writes `data` to the temp file (whole-file replace); for small files such as manifests.
    public func write(_ data: Data, paced: Bool = false) throws {
        let fd = open(tempPath, O_WRONLY | O_TRUNC | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "opening \(tempPath)", side: .output) }
        defer { close(fd) }
        try data.withUnsafeBytes { raw in
            // A repository's object (a pack of a first snapshot) written and written back a
            // chunk at a time at `IOPace.current` (`IOPace.write`), or at once.
            if paced, let pace = IOPace.current {
                try pace.write(fd, raw, path: finalPath)
            } else {
                try FileSystem.writeAll(fd, raw, path: finalPath)
            }
        }
    }

    /// fsyncs the temp artifact (the whole tree for a folder), without renaming it.
    public func sync() throws {
        if isDirectory { try FileSystem.syncTree(tempPath, point: "\(label).sync") } else { try FileSystem.sync(tempPath, point: "\(label).sync") }
    }

    /// fsyncs the temp artifact, renames it to the final name and fsyncs the folder.
    ///
    /// - Parameter replacing: replace an existing final file (otherwise an existing one is exit 73).
    public func commit(replacing: Bool = false) throws {
        precondition(!isCommitted, "commit twice")
        try sync()
        if replacing {
            try FileSystem.rename(tempPath, finalPath, point: "\(label).rename")
        } else {
            try FileSystem.renameNoReplace(tempPath, finalPath, point: "\(label).rename")
        }
        isCommitted = true
        releaseLock()
        try FileSystem.sync(FileSystem.parent(of: finalPath), directory: true, point: "\(label).sync-folder")
    }

    /// Another owner (a `StoreSwap` journal) is responsible for the temp artifact from now on:
    /// it is no longer discarded when this value goes away.
    public func handOver() {
        isCommitted = true
    }

    /// After the swap that was handed this artifact: its lock goes (the file is at its final name,
    /// or back at this one after an undo). Held until then, so no run takes a staged file for a
    /// killed run's before it is installed.
    public func releaseAfterSwap() { releaseLock() }

    /// A handed-over artifact a swap undid (back at its temporary name, owned by no record): removed.
    public func reclaim() {
        isCommitted = false
        discard()
    }

    /// Removes the temp artifact and SQLite's sidecars of it. Safe to call more than once.
    public func discard() {
        guard !isCommitted else { return }
        isCommitted = true
        FileSystem.remove(tempPath, point: "\(label).discard")
        for suffix in ["-journal", "-wal", "-shm"] { FileSystem.remove(tempPath + suffix, point: "\(label).discard-sidecar") }
        releaseLock()
    }

    deinit {
        discard()
        releaseLock()
    }

    /// The start of every temporary name made for `finalPath`: `.<final name>.tmp-storectl-`. A long
    /// final name is shortened (the temp name adds ~30 bytes), so the temp file can be made
    /// whenever the final name is a valid name.
    static func temporaryPrefix(for finalPath: String) -> String {
        ".\(shortened(FileSystem.name(of: finalPath)))\(marker)"
    }

    /// The part of a final name a temporary name keeps: its first 200 bytes, whole characters.
    static func shortened(_ name: String) -> String {
        var short = ""
        for character in name {
            guard short.utf8.count + character.utf8.count <= 200 else { break }
            short.append(character)
        }
        return short
    }

    /// The temporary files and folders in `finalPath`'s folder made for it, by any process
    /// (SQLite's sidecars of a temporary database included).
    public static func temporaries(of finalPath: String) -> [String] {
        let folder = FileSystem.parent(of: finalPath)
        let prefix = temporaryPrefix(for: finalPath)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return names.filter { $0.hasPrefix(prefix) }.map { (folder as NSString).appendingPathComponent($0) }
    }

    /// Whether `name` is a storectl temporary name (`.<final>.tmp-storectl-<pid>-…`), and its pid.
    static func temporaryOwner(_ name: String) -> Int32? {
        guard name.hasPrefix("."), let range = name.range(of: marker) else { return nil }
        return Int32(name[range.upperBound...].prefix { $0.isNumber })
    }

    /// Whether the temporary at `path` (or its database, for SQLite's `-journal`/`-wal`/`-shm` of
    /// one) belongs to a run still going: this process's own; one whose maker holds its flock; a
    /// name made a moment ago (`youngFor`: its maker may not have locked it yet); and where the lock
    /// says nothing (a name of an older storectl, a file system without flock), one whose pid runs.
    public static func isRunning(_ path: String, youngFor seconds: TimeInterval = 5) -> Bool {
        let name = FileSystem.name(of: path)
        guard let range = name.range(of: marker), let pid = temporaryOwner(name) else { return false }
        var main = path
        for suffix in ["-journal", "-wal", "-shm"] where path.hasSuffix(suffix) {
            let candidate = String(path.dropLast(suffix.count))
            if FileSystem.name(of: candidate).contains(marker) { main = candidate }
        }
        if registry.withLock({ ownPaths.contains(main) }) { return true }
        let rest = name[range.upperBound...].drop { $0.isNumber }
        let locked = rest.hasPrefix("-" + lockedTag)
        if locked {
            switch lockState(main) {
            case .held: return true
            case .free: break
            case .unknown: return FileSystem.processIsAlive(pid)
            case .foreign: return false
            }
            // Free: its maker is gone, or made it a moment ago and is about to lock it.
            guard FileSystem.processIsAlive(pid) else { return false }
            var info = stat()
            guard lstat(main, &info) == 0 || lstat(path, &info) == 0 else { return false }
            let modified = TimeInterval(info.st_mtim.tv_sec) + TimeInterval(info.st_mtim.tv_nsec) / 1e9
            let age = Date().timeIntervalSince1970 - modified
            return age >= 0 && age < seconds   // a date ahead (a clock stepped back) is no proof of youth
        }
        return FileSystem.processIsAlive(pid)
    }

    /// `foreign`: not a file or a folder (a device, a FIFO, a link), so no run's.
    enum LockState { case held, free, unknown, foreign }

    /// Tries the flock of a temporary made by another process (never one of this process's own:
    /// see `ownPaths`), without following a link or blocking on a FIFO.
    static func lockState(_ path: String) -> LockState {
        // Only what storectl makes is probed: a file or a folder. Anything else under such a name
        // (a device, a FIFO, a link) is no run's, and is not opened.
        var info = stat()
        guard lstat(path, &info) == 0 else { return errno == ENOENT ? .free : .unknown }
        let kind = info.st_mode & S_IFMT
        guard kind == S_IFREG || kind == S_IFDIR else { return .foreign }
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        guard fd >= 0 else { return errno == ENOENT ? .free : .unknown }
        defer { close(fd) }
        if flock(fd, LOCK_EX | LOCK_NB) == 0 { return .free }
        return errno == EWOULDBLOCK ? .held : .unknown
    }

    /// Deletes temp artifacts left in `folder` by storectl processes that no longer run, except
    /// those an interrupted `StoreSwap` still needs (its journal names them).
    ///
    /// - Parameter prefix: only names that start with `.<prefix>` (a shared folder such as /tmp);
    ///   a final name as the prefix is shortened as its temporaries' names are.
    /// - Parameter journalsIn: the folder whose swap records name what must stay (default `folder`).
    /// - Returns: the paths removed.
    @discardableResult
    public static func removeStale(in folder: String, prefix: String? = nil, journalsIn: String? = nil) -> [String] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return [] }
        let protected = StoreSwap.protectedPaths(in: journalsIn ?? folder)
        var removed: [String] = []
        let start = prefix.map { "." + shortened($0) }
        for name in names {
            if let start, !name.hasPrefix(start) { continue }
            guard temporaryOwner(name) != nil else { continue }
            let path = (folder as NSString).appendingPathComponent(name)
            guard !protected.contains(path), !isRunning(path) else { continue }
            if FileSystem.remove(path, point: "stale.remove") { removed.append(path) }
        }
        // The emptied folders of swaps killed after their record went.
        if prefix == nil { removed += StoreSwap.removeFinishedMarks(in: folder, names: names) }
        return removed
    }

    /// What dead runs left beside a store: in its folder, and a restore's staged external data
    /// inside its support folder (`SnapshotRestore.stage`).
    @discardableResult
    public static func removeStale(besideStore store: StoreFile) -> [String] {
        var removed = removeStale(in: store.folder)
        if FileSystem.kind(of: store.supportPath) == .directory {
            removed += removeStale(in: store.supportPath, prefix: StoreFile.externalDataFolderName, journalsIn: store.folder)
        }
        return removed
    }
}
