import Foundation
import Synchronization

/// What SQLite's own locks say about other processes using a store.
public struct LockState: Sendable, Codable, Equatable {
    /// A process holding the write lock right now (a write transaction in progress), if any.
    public var writerPID: Int32?
    /// A process with the store open (WAL mode only: every connection holds a read lock on the
    /// -shm's DMS byte), if any. `nil` in rollback mode, where idle connections hold no lock.
    public var openByPID: Int32?

    // Offsets from SQLite's os_unix.c and wal.c: the rollback-mode lock bytes live at the 1 GiB
    // "pending byte"; WAL-mode locks are bytes 120... of the -shm file.
    static let pendingByte = 0x4000_0000
    static let walWriteLockByte = 120
    static let walDMSByte = 128

    /// Reads the lock state of a store; other processes' locks are only looked at, never taken.
    public static func read(_ store: StoreFile, walMode: Bool) throws -> LockState {
        let probe = FileProbe.shared
        if walMode {
            // No -shm: nobody has the store open. The app's last connection removes it as it
            // closes, so it may go between any look and the next (seen on CI: an app opening the
            // store for each write made a migration's lock check fail with 66, "opening …-shm"):
            // gone when opened is the same answer, at that instant.
            guard FileSystem.kind(of: store.shmPath) == .file, let shm = try probe.descriptorIfPresent(for: store.shmPath) else { return LockState() }
            // A writer holds an exclusive lock on WAL_WRITE_LOCK; a shared query conflicts only with it.
            let writer = try probe.conflictingHolder(fd: shm, path: store.shmPath, type: Int32(F_RDLCK), start: walWriteLockByte, length: 1)
            // Every open connection holds a shared lock on the DMS byte; an exclusive query finds one.
            var open = try probe.conflictingHolder(fd: shm, path: store.shmPath, type: Int32(F_WRLCK), start: walDMSByte, length: 1)
            // `storectl replicate` keeps a read-only connection open (it never writes, and holds a
            // read transaction only for the milliseconds it copies new frames): it is not the app.
            // F_GETLK names one holder; when that is a follower, every holder is looked at.
            // The list is trusted only when it names that holder too (it cannot see into other pid
            // namespaces, and a file system whose st_dev differs from the kernel's matches no line),
            // and when storectl itself runs in the first pid namespace; otherwise the follower is named.
            if let pid = open, isFollower(pid), !inChildPIDNamespace, let all = holders(of: store.shmPath, byte: walDMSByte), all.contains(pid) {
                open = all.first { $0 != getpid() && !isFollower($0) }
            }
            return LockState(writerPID: writer, openByPID: open)
        } else {
            // RESERVED (pending+1) and PENDING (pending) are only ever write-locked, by a writer.
            let writer = try probe.conflictingHolder(path: store.path, type: Int32(F_RDLCK), start: pendingByte, length: 2)
            // EXCLUSIVE is a write lock on the shared range.
            let exclusive = try probe.conflictingHolder(path: store.path, type: Int32(F_RDLCK), start: pendingByte + 2, length: 510)
            return LockState(writerPID: writer ?? exclusive, openByPID: nil)
        }
    }

    /// A `storectl replicate` process (its command line says so): it follows stores read-only.
    static func isFollower(_ pid: Int32) -> Bool {
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
        let argv = data.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        guard argv.count >= 2, FileSystem.name(of: argv[0]) == "storectl", argv[1] == "replicate" else { return false }
        return argv.count == 2 || !["status", "--help", "-h"].contains(argv[2])
    }

    /// storectl runs inside a container's pid namespace (/proc/self/status lists more than one
    /// NSpid): /proc/locks may not show processes outside it.
    static let inChildPIDNamespace: Bool = {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return true }
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("NSpid:") }) else { return false }
        return line.split(whereSeparator: { $0 == " " || $0 == "\t" }).count > 2
    }()

    /// Every process holding a POSIX lock on `byte` of `path`, from /proc/locks (nil when it
    /// cannot be read: the caller keeps the one holder F_GETLK named).
    static func holders(of path: String, byte: Int) -> [Int32]? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return holders(device: UInt64(info.st_dev), inode: UInt64(info.st_ino), byte: byte)
    }

    /// `holders(of:byte:)` for the file `device`/`inode` (one renamed or set aside since).
    static func holders(device dev: UInt64, inode: UInt64, byte: Int) -> [Int32]? {
        guard let text = try? String(contentsOfFile: "/proc/locks", encoding: .utf8) else { return nil }
        // Linux prints the device as major:minor in hex (new encoding: 12-bit major, 20-bit minor).
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & ~UInt64(0xfff))
        let minor = (dev & 0xff) | ((dev >> 12) & ~UInt64(0xff))
        var pids: [Int32] = []
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            // "1: POSIX  ADVISORY  READ 1234 08:02:131074 128 128" (a waiting lock has "->" after the
            // number); an open-file-description lock (OFDLCK, pid -1) counts as an unknown holder.
            guard fields.count >= 8, fields[1] == "POSIX" || fields[1] == "OFDLCK" else { continue }
            let place = fields[5].split(separator: ":")
            guard place.count == 3, UInt64(place[0], radix: 16) == major, UInt64(place[1], radix: 16) == minor,
                  UInt64(place[2]) == inode, let pid = Int32(fields[4]), let start = Int(fields[6]) else { continue }
            let end = fields[7] == "EOF" ? Int.max : Int(fields[7]) ?? -1
            if start <= byte, byte <= end { pids.append(pid) }
        }
        return pids
    }

    /// Another process that has the store open, a `storectl replicate` follower aside (it only
    /// reads, and opens the store again within a moment): what `--wait` waits for.
    static func otherOpener(of store: StoreFile) -> Int32? {
        guard let pid = try? otherUser(of: store), !isFollower(pid) else { return nil }
        return pid
    }

    /// Until no other process has the store open (`otherOpener`), or `until`, or a signal.
    /// `waiting` is told once, with the first process found, when there is one to wait for (what
    /// a progress line on a terminal then says while the wait lasts).
    static func waitUntilClosed(_ store: StoreFile, until: Date, waiting: ((Int32) -> Void)? = nil) {
        var told = false
        while Date() < until, ProcessSignals.received == nil, let pid = otherOpener(of: store) {
            if !told {
                told = true
                waiting?(pid)
            }
            usleep(20_000)
        }
    }

    /// What an operation waiting for the app (--wait) says while it waits (its progress note).
    static func waitingNote(_ pid: Int32, until: Date) -> String {
        "waiting for the app (pid \(pid)) to close the store, for at most \(Format.duration(max(0, until.timeIntervalSinceNow)))"
    }

    /// Another process writing to the store or (WAL mode) having it open, if any: what an
    /// in-place restore or a migration must not run under.
    public static func otherUser(of store: StoreFile) throws -> Int32? {
        let locks = try read(store, walMode: StoreFile.isWALHeader(try FileProbe.shared.header(of: store.path)))
        return locks.writerPID ?? locks.openByPID
    }
}
