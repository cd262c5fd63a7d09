import CStoreSupport
import Foundation

/// Small, explicit wrappers over the POSIX calls the durability rules need.
public enum FileSystem {
    /// Writes all of `chunk` to `fd` (short writes and EINTR retried); ENOSPC and the like
    /// become an output-side I/O error naming `path`.
    static func writeAll(_ fd: Int32, _ chunk: UnsafeRawBufferPointer, path: String) throws {
        var offset = 0
        while offset < chunk.count {
            let n = write(fd, chunk.baseAddress! + offset, chunk.count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                throw StoreOpsError.posix(errno, doing: "writing \(path)", side: .output)
            }
            offset += n
        }
    }

    /// Writes all of `chunk` at `offset` (pwrite(2)), from any thread.
    static func writeAll(_ fd: Int32, _ chunk: UnsafeRawBufferPointer, at offset: off_t, path: String) throws {
        var done = 0
        while done < chunk.count {
            let n = pwrite(fd, chunk.baseAddress! + done, chunk.count - done, offset + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                throw StoreOpsError.posix(errno, doing: "writing \(path)", side: .output)
            }
            done += n
        }
    }

    /// Fills `buffer` from `fd` at `offset` (pread(2), short reads and EINTR retried), from any
    /// thread; an error or an end before it is filled is an I/O error `doing` names.
    static func readAll(_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer, at offset: off_t, doing: String,
                        side: StoreOpsError.Side = .output) throws {
        var done = 0
        while done < buffer.count {
            let n = pread(fd, buffer.baseAddress! + done, buffer.count - done, offset + off_t(done))
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { throw StoreOpsError.posix(n < 0 ? errno : EIO, doing: doing, side: side) }
            done += n
        }
    }

    /// Free bytes and inodes available to an unprivileged writer on the volume holding `path`.
    public struct Space: Sendable, Codable, Equatable {
        public var availableBytes: UInt64
        public var availableInodes: UInt64
        public var totalBytes: UInt64
        /// Mounted read-only (its free space reads as what it is, often 0; nothing can be written).
        public var readOnly = false
    }

    public static func space(at path: String) throws -> Space {
        var info = statvfs()
        guard statvfs(path, &info) == 0 else {
            var error = StoreOpsError.posix(errno, doing: "reading free space of \(path)", side: .output)
            // A scratch folder nobody named on the command line comes from TMPDIR: say so.
            if let tmp = ProcessInfo.processInfo.environment["TMPDIR"], !tmp.isEmpty,
               absolute(path) == absolute(tmp) || absolute(path).hasPrefix(absolute(tmp) + "/") {
                error.message += " (the scratch folder TMPDIR names)"
                error.hint = "set TMPDIR to a folder that exists and has room, or create \(tmp)"
            }
            throw error
        }
        let unit = UInt64(info.f_frsize)
        return Space(availableBytes: UInt64(info.f_bavail) * unit,
                     availableInodes: UInt64(info.f_favail),
                     totalBytes: UInt64(info.f_blocks) * unit, readOnly: info.f_flag & UInt(ST_RDONLY) != 0)
    }

    public enum Kind: Sendable { case missing, file, directory, other }

    public static func kind(of path: String) -> Kind {
        var info = stat()
        guard stat(path, &info) == 0 else { return .missing }
        switch info.st_mode & S_IFMT {
        case S_IFREG: return .file
        case S_IFDIR: return .directory
        default: return .other
        }
    }

    public static func size(of path: String) -> UInt64? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return UInt64(info.st_size)
    }

    /// Device and inode, to tell whether two paths name the same file.
    public static func identity(of path: String) -> (dev: UInt64, ino: UInt64)? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return (UInt64(info.st_dev), UInt64(info.st_ino))
    }

    /// An absolute, normalised path (symlinks of existing parents resolved).
    /// A `--scratch DIR` the user named: an existing, writable folder, else 73 naming the option
    /// (a scratch folder that is not there surfaced as "reading free space of DIR").
    public static func checkScratch(_ path: String?, option: String = "--scratch") throws {
        guard let path else { return }
        switch kind(of: path) {
        case .missing:
            throw StoreOpsError(.cannotCreate, "\(option) \(path): no such folder",
                                hint: "create it (mkdir -p \(path)), or name another folder with room for the scratch copy")
        case .directory:
            guard access(path, W_OK) == 0 else {
                throw StoreOpsError(.cannotCreate, "\(option) \(path): a folder this user (uid \(getuid())) cannot write to",
                                    hint: "name a folder this user can write to, with room for the scratch copy")
            }
        default:
            throw StoreOpsError(.cannotCreate, "\(option) \(path): a file, not a folder",
                                hint: "name a folder with room for the scratch copy (\(option) takes a folder, not a file)")
        }
    }

    public static func absolute(_ path: String) -> String {
        let url = URL(fileURLWithPath: path, relativeTo: URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
        return url.standardizedFileURL.resolvingSymlinksInPath().path
    }

    public static func parent(of path: String) -> String {
        (path as NSString).deletingLastPathComponent.isEmpty ? "." : (path as NSString).deletingLastPathComponent
    }

    public static func name(of path: String) -> String { (path as NSString).lastPathComponent }

    // MARK: - Durable steps
    //
    // Every call that creates, renames, links, removes or fsyncs goes through one of these, and
    // each names its fault point (see `FaultInjection`): the point is reached right after the step.

    /// Creates the regular file `path` (`O_CREAT | O_EXCL`, never an existing one) and returns a
    /// descriptor opened with `flags` (default: write-only). The caller closes it.
    public static func create(_ path: String, mode: mode_t = 0o600, flags: Int32 = O_WRONLY, point: String) throws -> Int32 {
        let fd = open(path, flags | O_CREAT | O_EXCL | O_CLOEXEC, mode)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "creating \(path)", side: .output) }
        FaultInjection.reach(point)
        return fd
    }

    /// A new file `to` (mode 0600, created at fault point `point`) holding `from`'s bytes:
    /// copy_file_range where the kernel can, read and write where it cannot. Not synced: for
    /// scratch copies that are removed after use (`FileManager.copyItem` kept the source's mode,
    /// so a dry run's copy of a 0644 store in /tmp was readable by everyone).
    static func copyNewFile(_ from: String, to: String, point: String) throws {
        let input = open(from, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw StoreOpsError.posix(errno, doing: "reading \(from)", side: .input) }
        defer { close(input) }
        let output = try create(to, point: point)
        defer { close(output) }
        var info = stat()
        guard fstat(input, &info) == 0 else { throw StoreOpsError.posix(errno, doing: "reading \(from)", side: .input) }
        var done: Int64 = 0
        let length = Int64(info.st_size)
        copying: while done < length {
            let copied = storectl_copy_range(input, done, output, done, min(length - done, 1 << 30))
            if copied > 0 { done += copied; continue }
            // 0 before the end: a file system that cannot copy this way says so with 0 (as Go and
            // Rust take it); read and write the rest.
            guard copied == 0 || [EXDEV, ENOSYS, EINVAL, EOPNOTSUPP].contains(errno) else {
                throw StoreOpsError.posix(errno, doing: "copying \(from) to \(to)", side: .output)
            }
            // Read and write the rest.
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            while true {
                let n = pread(input, &buffer, buffer.count, off_t(done))
                guard n >= 0 else { throw StoreOpsError.posix(errno, doing: "reading \(from)", side: .input) }
                guard n > 0 else { break copying }
                try buffer.withUnsafeBytes { try writeAll(output, UnsafeRawBufferPointer(rebasing: $0[0..<n]), at: off_t(done), path: to) }
                done += Int64(n)
            }
        }
        guard done == length else {
            throw StoreOpsError(.ioError, "copying \(from) to \(to): \(done) of \(length) bytes copied", hint: "check the disk and run it again")
        }
    }

    /// A read-write regular file in `folder` with no name (O_TMPFILE, mode 0600): nothing is left
    /// behind, whatever ends the process. Where the file system cannot make one, a file under a
    /// temporary name (`PendingFile`'s, for `fallbackName`) whose name is removed at once; a
    /// kill between the two leaves a name `PendingFile.removeStale` removes from that folder
    /// (a restore's folder: each restore there does). Fault points `<point>.create` and (the
    /// fallback) `<point>.unlink`.
    static func createUnnamed(in folder: String, fallbackName: String, doing: String, point: String) throws -> Int32 {
        let unnamed = storectl_open_unnamed(folder, 0o600)
        if unnamed >= 0 {
            FaultInjection.reach("\(point).create")
            return unnamed
        }
        let err = errno
        guard [EOPNOTSUPP, EISDIR, EINVAL, ENOSYS].contains(err) else {
            throw StoreOpsError.posix(err, doing: "\(doing) in \(folder)", side: .output)
        }
        let path = (folder as NSString).appendingPathComponent(PendingFile.temporaryPrefix(for: fallbackName) + PendingFile.ownerPart(locked: hasLocalFlock(folder)))
        let fd = try create(path, flags: O_RDWR, point: "\(point).create")
        guard remove(path, point: "\(point).unlink") else {
            let err = errno
            close(fd)
            throw StoreOpsError.posix(err, doing: "\(doing) in \(folder) (removing the name of \(path), left behind: remove it by hand)", side: .output)
        }
        return fd
    }

    /// Whether flock(2) in `folder` is the file system's own: a local file system's (ext4, XFS,
    /// Btrfs, tmpfs, overlayfs, ZFS, F2FS, ramfs), independent of SQLite's POSIX locks. NFS and
    /// SMB imitate it with byte-range locks (which can conflict with SQLite's, or are refused on a
    /// read-only descriptor), so they are not.
    static func hasLocalFlock(_ folder: String) -> Bool {
        let type = storectl_fs_type(folder)
        let local: Set<Int64> = [0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994, 0x794C_7630, 0x2FC1_2FC1, 0xF2F5_2010, 0x8584_58F6]
        return local.contains(Int64(type))
    }

    /// Opens `path` for appending, creating it when missing (job logs, lock files).
    public static func openCreating(_ path: String, mode: mode_t, flags: Int32, point: String) throws -> Int32 {
        let existed = kind(of: path) != .missing
        let fd = open(path, flags | O_CREAT | O_CLOEXEC, mode)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "opening \(path)", side: .output) }
        if !existed { FaultInjection.reach(point) }
        return fd
    }

    /// Creates a folder (`mode` 0700 by default). - Parameter existingOK: an existing folder is fine.
    public static func makeDirectory(_ path: String, mode: mode_t = 0o700, existingOK: Bool = false, point: String) throws {
        if mkdir(path, mode) != 0 {
            let err = errno
            guard err == EEXIST, existingOK, kind(of: path) == .directory else {
                throw StoreOpsError.posix(err, doing: "creating the folder \(path)", side: .output)
            }
            return
        }
        FaultInjection.reach(point)
    }

    /// Writes `data` to a new file (`O_EXCL`, `mode`), without syncing it (callers that need the
    /// file durable sync it, or write it through `PendingFile`).
    public static func writeNewFile(_ path: String, _ data: Data, mode: mode_t = 0o600, point: String) throws {
        let fd = try create(path, mode: mode, point: point)
        defer { close(fd) }
        try data.withUnsafeBytes { try writeAll(fd, $0, path: path) }
    }

    /// fsync(2) an existing file or folder.
    public static func sync(_ path: String, directory: Bool = false, point: String) throws {
        let fd = open(path, directory ? (O_RDONLY | O_DIRECTORY | O_CLOEXEC) : (O_RDONLY | O_CLOEXEC))
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "opening \(path) to sync it", side: .output) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw StoreOpsError.posix(errno, doing: "syncing \(path)", side: .output) }
        FaultInjection.reach(point)
    }

    /// fsync(2) an open descriptor.
    public static func sync(fd: Int32, path: String, point: String) throws {
        guard fsync(fd) == 0 else { throw StoreOpsError.posix(errno, doing: "syncing \(path)", side: .output) }
        FaultInjection.reach(point)
    }

    /// fsyncs every file and folder under `root`, then `root` itself.
    public static func syncTree(_ root: String, point: String) throws {
        let enumerator = FileManager.default.enumerator(atPath: root)
        while let relative = enumerator?.nextObject() as? String {
            let path = (root as NSString).appendingPathComponent(relative)
            let isDirectory = kind(of: path) == .directory
            let fd = open(path, isDirectory ? (O_RDONLY | O_DIRECTORY | O_CLOEXEC) : (O_RDONLY | O_CLOEXEC))
            guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "opening \(path) to sync it", side: .output) }
            defer { close(fd) }
            guard fsync(fd) == 0 else { throw StoreOpsError.posix(errno, doing: "syncing \(path)", side: .output) }
        }
        try sync(root, directory: true, point: point)
    }

    /// Renames `from` to `to` without replacing an existing `to` (EEXIST becomes exit 73).
    ///
    /// Uses renameat2(RENAME_NOREPLACE); on a file system without it, falls back to link(2) +
    /// unlink(2), which is equally atomic and equally refuses to replace.
    public static func renameNoReplace(_ from: String, _ to: String, point: String) throws {
        if storectl_rename_noreplace(from, to) == 0 {
            FaultInjection.reach(point)
            return
        }
        let err = errno
        if err == EEXIST || err == ENOTEMPTY {
            throw StoreOpsError(.cannotCreate, "\(to) already exists", hint: "choose another name, or remove it first")
        }
        guard err == EINVAL || err == ENOSYS || err == ENOTSUP else {
            throw StoreOpsError.posix(err, doing: "renaming \(from) to \(to)", side: .output)
        }
        guard kind(of: from) != .directory else {
            // link(2) cannot link folders: check, then rename (the folder names are our own).
            guard kind(of: to) == .missing else {
                throw StoreOpsError(.cannotCreate, "\(to) already exists", hint: "choose another name, or remove it first")
            }
            try rename(from, to, point: point)
            return
        }
        guard Foundation.link(from, to) == 0 else {
            let linkErr = errno
            if linkErr == EEXIST {
                throw StoreOpsError(.cannotCreate, "\(to) already exists", hint: "choose another name, or remove it first")
            }
            throw StoreOpsError.posix(linkErr, doing: "renaming \(from) to \(to)", side: .output)
        }
        unlink(from)
        FaultInjection.reach(point)
    }

    /// rename(2), replacing `to` atomically if it exists.
    public static func rename(_ from: String, _ to: String, point: String) throws {
        guard Foundation.rename(from, to) == 0 else {
            throw StoreOpsError.posix(errno, doing: "renaming \(from) to \(to)", side: .output)
        }
        FaultInjection.reach(point)
    }

    /// link(2): a second name for an existing file.
    public static func link(_ from: String, _ to: String, point: String) throws {
        guard Foundation.link(from, to) == 0 else {
            throw StoreOpsError.posix(errno, doing: "linking \(from) as \(to)", side: .output)
        }
        FaultInjection.reach(point)
    }

    /// Removes a file or a folder tree; missing is fine. Returns whether something was removed.
    @discardableResult
    public static func remove(_ path: String, point: String) -> Bool {
        switch kind(of: path) {
        case .missing:
            // A dangling symbolic link is "missing" to stat(2) but still a name to remove.
            guard unlink(path) == 0 else { return false }
        case .directory:
            guard (try? FileManager.default.removeItem(atPath: path)) != nil else { return false }
        default:
            guard unlink(path) == 0 else { return false }
        }
        FaultInjection.reach(point)
        return true
    }

    /// Removes everything in a folder (the folder stays); a missing folder is fine, a failure
    /// is thrown naming what could not be removed.
    public static func emptyDirectory(_ path: String, point: String, eachPoint: String? = nil) throws {
        let names: [String]
        do { names = try FileManager.default.contentsOfDirectory(atPath: path) } catch {
            if kind(of: path) == .missing { return }
            throw StoreOpsError(.ioError, "cannot list \(path): \(error.localizedDescription)")
        }
        for name in names {
            let child = (path as NSString).appendingPathComponent(name)
            if kind(of: child) == .directory {
                do { try FileManager.default.removeItem(atPath: child) } catch {
                    throw StoreOpsError(.ioError, "cannot remove \(child): \(error.localizedDescription)")
                }
            } else if unlink(child) != 0, errno != ENOENT {
                throw StoreOpsError.posix(errno, doing: "removing \(child)", side: .output)
            }
            if let eachPoint { FaultInjection.reach(eachPoint) }
        }
        FaultInjection.reach(point)
    }

    /// Removes a folder only if it is empty (anything in it is kept). Returns whether it was removed.
    @discardableResult
    public static func removeEmptyDirectory(_ path: String, point: String) -> Bool {
        guard rmdir(path) == 0 else { return false }
        FaultInjection.reach(point)
        return true
    }

    /// Removes a file; missing is fine, any other failure is thrown.
    public static func removeFile(_ path: String, point: String) throws {
        guard unlink(path) == 0 else {
            if errno == ENOENT { return }
            throw StoreOpsError.posix(errno, doing: "removing \(path)", side: .output)
        }
        FaultInjection.reach(point)
    }

    /// Gives `path` (and, for a folder, everything in it) the owner, group and permission bits of
    /// `reference`: a store restored in place must stay usable by the app's user. Folders keep
    /// their search bit when the reference is a file.
    public static func copyOwnership(from reference: String, to path: String) throws {
        var info = stat()
        guard stat(reference, &info) == 0 else { return }
        let fileMode = info.st_mode & 0o7777
        func apply(_ target: String, isDirectory: Bool) throws {
            if getuid() == 0, chown(target, info.st_uid, info.st_gid) != 0 {
                throw StoreOpsError.posix(errno, doing: "setting the owner of \(target)", side: .output)
            }
            let mode = isDirectory ? fileMode | ((fileMode & 0o444) >> 2) : fileMode
            guard chmod(target, mode_t(mode)) == 0 else {
                throw StoreOpsError.posix(errno, doing: "setting the permissions of \(target)", side: .output)
            }
        }
        let isDirectory = kind(of: path) == .directory
        try apply(path, isDirectory: isDirectory)
        guard isDirectory, let enumerator = FileManager.default.enumerator(atPath: path) else { return }
        while let relative = enumerator.nextObject() as? String {
            let child = (path as NSString).appendingPathComponent(relative)
            try apply(child, isDirectory: kind(of: child) == .directory)
        }
    }

    /// Names under `root` (at any depth) that are not valid UTF-8, shown with their bad bytes
    /// escaped. Foundation decodes such names lossily, so they would name no file: callers refuse
    /// them rather than skip a file silently.
    public static func nonUTF8Names(under root: String, depth: Int = 0) -> [String] {
        guard depth < 32, let folder = opendir(root) else { return [] }
        defer { closedir(folder) }
        var found: [String] = []
        while let entry = readdir(folder) {
            let bytes: [UInt8] = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
            if bytes == [0x2E] || bytes == [0x2E, 0x2E] { continue }
            if Validate.firstInvalidUTF8(bytes) != nil {
                found.append((root as NSString).appendingPathComponent(
                    bytes.map { $0 < 0x80 && $0 >= 0x20 ? String(UnicodeScalar($0)) : String(format: "\\x%02x", $0) }.joined()))
                continue
            }
            if entry.pointee.d_type == UInt8(DT_DIR) {
                found += nonUTF8Names(under: (root as NSString).appendingPathComponent(String(decoding: bytes, as: UTF8.self)), depth: depth + 1)
            }
        }
        return found
    }

    /// Whether a process with this pid exists (used to tell stale temp files from live ones). A
    /// zombie (killed, not yet reaped by its parent) is not: it will never finish what it began
    /// (`recover` right after a kill -9 said "nothing to recover" and left its temporaries).
    public static func processIsAlive(_ pid: Int32) -> Bool {
        guard pid > 0, kill(pid, 0) == 0 || errno == EPERM else { return false }
        return !isZombie(pid)
    }

    /// Linux's /proc/PID/stat says Z (or X, dead) after the command's closing parenthesis.
    static func isZombie(_ pid: Int32) -> Bool {
        let state = ProcessIdentity.statFields(of: pid)?.first
        return state == "Z" || state == "X"
    }
}

/// This process's memory, for debug lines: resident now and its peak, in MiB (/proc/self/status).
enum ProcessMemory {
    static func text() -> String {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return "?" }
        func mib(_ key: String) -> String {
            guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(key) }),
                  let kb = line.split(separator: " ").dropFirst().first(where: { Int($0) != nil }).flatMap({ Int($0) }) else { return "?" }
            return String(format: "%.1f", Double(kb) / 1024)
        }
        return "\(mib("VmRSS:")) MiB (peak \(mib("VmHWM:"))), cpu \(cpuMilliseconds()) ms"
    }

    /// CPU time this process has used so far (user and system, every thread), in milliseconds.
    static func cpuMilliseconds() -> Int {
        var usage = rusage()
        guard getrusage(RUSAGE_SELF.rawValue, &usage) == 0 else { return -1 }
        return (Int(usage.ru_utime.tv_sec) + Int(usage.ru_stime.tv_sec)) * 1000 + (Int(usage.ru_utime.tv_usec) + Int(usage.ru_stime.tv_usec)) / 1000
    }
}
