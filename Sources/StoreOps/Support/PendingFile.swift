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
    public private(set) var isCommitted = false

    static let marker = ".tmp-storectl-"

    /// Creates the temp file (`O_CREAT|O_EXCL`, mode 0600) or temp folder (0700) next to `finalPath`.
    public init(finalPath: String, directory: Bool = false) throws {
        self.finalPath = finalPath
        self.isDirectory = directory
        let folder = FileSystem.parent(of: finalPath)
        let random = String(UInt32.random(in: 0...UInt32.max), radix: 36)
        tempPath = (folder as NSString).appendingPathComponent(
            ".\(FileSystem.name(of: finalPath))\(Self.marker)\(getpid())-\(random)")
        if directory {
            guard mkdir(tempPath, 0o700) == 0 else {
                throw StoreOpsError.posix(errno, doing: "creating a temporary folder in \(folder)", side: .output)
            }
        } else {
            let fd = open(tempPath, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0o600)
            guard fd >= 0 else {
                throw StoreOpsError.posix(errno, doing: "creating a temporary file in \(folder)", side: .output)
            }
            close(fd)
        }
    }

    /// Writes `data` to the temp file (whole-file replace); for small files such as manifests.
    public func write(_ data: Data) throws {
        let fd = open(tempPath, O_WRONLY | O_TRUNC | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "opening \(tempPath)", side: .output) }
        defer { close(fd) }
        try data.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = Foundation.write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    throw StoreOpsError.posix(errno, doing: "writing \(finalPath)", side: .output)
                }
                offset += n
            }
        }
    }

    /// fsyncs the temp artifact, renames it to the final name and fsyncs the folder.
    ///
    /// - Parameter replacing: replace an existing final file (otherwise an existing one is exit 73).
    public func commit(replacing: Bool = false) throws {
        precondition(!isCommitted, "commit twice")
        if isDirectory { try syncTree(tempPath) } else { try FileSystem.sync(tempPath) }
        if replacing {
            try FileSystem.rename(tempPath, finalPath)
        } else {
            try FileSystem.renameNoReplace(tempPath, finalPath)
        }
        isCommitted = true
        try FileSystem.sync(FileSystem.parent(of: finalPath), directory: true)
    }

    /// Removes the temp artifact and SQLite's sidecars of it. Safe to call more than once.
    public func discard() {
        guard !isCommitted else { return }
        FileSystem.remove(tempPath)
        for suffix in ["-journal", "-wal", "-shm"] { unlink(tempPath + suffix) }
    }

    deinit { discard() }

    private func syncTree(_ root: String) throws {
        let enumerator = FileManager.default.enumerator(atPath: root)
        while let relative = enumerator?.nextObject() as? String {
            let path = (root as NSString).appendingPathComponent(relative)
            try FileSystem.sync(path, directory: FileSystem.kind(of: path) == .directory)
        }
        try FileSystem.sync(root, directory: true)
    }

    /// Deletes temp artifacts left in `folder` by storectl processes that no longer run.
    ///
    /// - Returns: the paths removed.
    @discardableResult
    public static func removeStale(in folder: String) -> [String] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return [] }
        var removed: [String] = []
        for name in names where name.hasPrefix(".") {
            guard let range = name.range(of: marker) else { continue }
            let rest = name[range.upperBound...]
            guard let pid = Int32(rest.prefix { $0.isNumber }), !FileSystem.processIsAlive(pid) else { continue }
            let path = (folder as NSString).appendingPathComponent(name)
            FileSystem.remove(path)
            removed.append(path)
        }
        return removed
    }
}
