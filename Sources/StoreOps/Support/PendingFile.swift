import Foundation

/// A file (or folder) being produced under a hidden temporary name in its final folder.
///
/// The rule for everything storectl writes: create the temp name with mode 0600, fill it, verify
/// it, fsync it, rename it to the final name, fsync the folder. Until `commit` the artifact has a
/// name no reader takes for a finished one (`.<final>.tmp-storectl-<pid>-<random>`), and `discard`
/// (or a later run's `removeStale`) deletes it, with SQLite's own `-journal`/`-wal`/`-shm` beside it.
public final class PendingFile {
    public let finalPath: String
    public let tempPath: String
    public let isDirectory: Bool
    /// Names this artifact's fault points: `<label>.create`, `.sync`, `.rename`, `.sync-folder`, `.discard`.
    public let label: String
    public private(set) var isCommitted = false

    static let marker = ".tmp-storectl-"

    /// Creates the temp file (`O_CREAT|O_EXCL`, mode 0600) or temp folder (0700) next to `finalPath`.
    public init(finalPath: String, directory: Bool = false, label: String) throws {
        self.finalPath = finalPath
        self.isDirectory = directory
        self.label = label
        let folder = FileSystem.parent(of: finalPath)
        let random = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        tempPath = (folder as NSString).appendingPathComponent(Self.temporaryPrefix(for: finalPath) + "\(getpid())-\(random)")
        if directory {
            try FileSystem.makeDirectory(tempPath, point: "\(label).create")
        } else {
            close(try FileSystem.create(tempPath, point: "\(label).create"))
        }
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
        try FileSystem.sync(FileSystem.parent(of: finalPath), directory: true, point: "\(label).sync-folder")
    }

    /// Another owner (a `StoreSwap` journal) is responsible for the temp artifact from now on:
    /// it is no longer discarded when this value goes away.
    public func handOver() { isCommitted = true }

    /// Removes the temp artifact and SQLite's sidecars of it. Safe to call more than once.
    public func discard() {
        guard !isCommitted else { return }
        isCommitted = true
        FileSystem.remove(tempPath, point: "\(label).discard")
        for suffix in ["-journal", "-wal", "-shm"] { FileSystem.remove(tempPath + suffix, point: "\(label).discard-sidecar") }
    }

    deinit { discard() }

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

    /// Whether `name` is a storectl temporary name (`.<final>.tmp-storectl-<pid>-<random>`), and its pid.
    static func temporaryOwner(_ name: String) -> Int32? {
        guard name.hasPrefix("."), let range = name.range(of: marker) else { return nil }
        return Int32(name[range.upperBound...].prefix { $0.isNumber })
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
            guard let pid = temporaryOwner(name), !FileSystem.processIsAlive(pid) else { continue }
            let path = (folder as NSString).appendingPathComponent(name)
            guard !protected.contains(path) else { continue }
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
