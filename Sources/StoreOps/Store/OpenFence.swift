import Foundation
import CStoreSupport
import Logging
import Synchronization

/// Keeps new SQLite connections off a database file that a swap is about to replace, and tells
/// who else has the file open at all.
///
/// SQLite binds a connection to the database file's inode when it opens it, and to the `-wal`
/// and `-shm` by name only later, at its first read. A process that opened the store just before
/// the swap's renames and reads just after them pairs the replaced file with the restored
/// store's `-wal` and `-shm` (its commits are frames built on the old pages, written into the
/// new store), or, between the renames, with a fresh `-shm` of its own (its commit lands in
/// files the swap sets aside: acknowledged, and not in the store). CI lost such a commit once in
/// many runs; a loaded machine showed it 1 in 8.
///
/// Every connection takes a read lock on the file's PENDING byte on its way to its SHARED lock,
/// before it touches the `-wal` or `-shm` (os_unix.c `unixLock`). A write lock on that byte,
/// held on the file being replaced, turns every such attempt into SQLITE_BUSY, which the
/// app's busy handler waits out or reports: an error it sees, not a commit lost. Connections
/// that already hold SHARED are not affected (WAL mode: they wait on the store's write lock,
/// which the gate holds, on the old `-shm`, and the restore waits for them to let go).
///
/// The descriptor is closed only after the store's other connections of this process (the
/// gate) are closed: closing any descriptor of a file drops every POSIX lock this process holds
/// on it, the gate's SHARED lock with it (and the gate's close drops the fence's byte: the gate
/// is closed last, at the end of the swap). Letting the fence go (`lift`) only unlocks its byte.
final class OpenFence {
    private static let logger = Logger(label: "storectl.restore")
    private static let unreadableSaid = Mutex(false)

    private var fd: Int32
    let path: String
    let device: UInt64
    let inode: UInt64
    private(set) var raised = false

    /// Opens the file (read-write: a write lock needs it); nil when this user cannot (a store
    /// file it may not write: no app of this user writes it either).
    init?(path: String) {
        let fd = open(path, O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        var info = stat()
        guard fstat(fd, &info) == 0 else { Foundation.close(fd); return nil }
        self.fd = fd
        self.path = path
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
    }

    /// Takes the write lock on the PENDING byte. A connection taking its SHARED lock holds a read
    /// lock there for a moment: tried again for up to `seconds`. False when it could not be had.
    @discardableResult
    func raise(seconds: Double = 2) -> Bool {
        guard fd >= 0 else { return false }
        if raised { return true }
        let until = Date().addingTimeInterval(seconds)
        while true {
            if setLock(Int16(F_WRLCK)) { raised = true; return true }
            guard errno == EAGAIN || errno == EACCES || errno == EINTR, Date() < until else { return false }
            usleep(1_000)
        }
    }

    /// Unlocks the byte (the descriptor stays open: see the type's comment).
    func lift() {
        guard fd >= 0, raised else { return }
        _ = setLock(Int16(F_UNLCK))
        raised = false
    }

    /// Closes the descriptor; call only once this process's other connections to the file are closed.
    func close() {
        guard fd >= 0 else { return }
        Foundation.close(fd)
        fd = -1
        raised = false
    }

    deinit { close() }

    private func setLock(_ type: Int16) -> Bool {
        var lock = flock()
        lock.l_type = type
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = off_t(LockState.pendingByte)
        lock.l_len = 1
        return fcntl(fd, F_SETLK, &lock) == 0
    }

    /// A process (followers aside) holding a SHARED lock on the file: in WAL mode, every connection
    /// from its first read on, including one that has not looked at the -shm yet.
    func sharedHolder() -> Int32? {
        guard fd >= 0, let pid = FileProbe.conflictingHolder(fd: fd, type: Int32(F_WRLCK), start: LockState.pendingByte + 2, length: 510) else { return nil }
        guard LockState.isFollower(pid) else { return pid }
        // F_GETLK names one holder: when that is a follower, every holder is looked at.
        return LockState.holders(of: path, byte: LockState.pendingByte + 2)?.first { $0 != getpid() && !LockState.isFollower($0) }
    }

    /// One open descriptor of the file in another process.
    struct Descriptor: Hashable {
        let pid: Int32
        let number: Int32
    }

    /// The descriptors other processes (followers aside) have open on this file.
    func otherDescriptors() -> [Descriptor] {
        OpenFence.descriptors(device: device, inode: inode).filter { !LockState.isFollower($0.pid) }
    }

    /// Processes (this one aside) with a connection on this file: a lock on its SHARED range, or,
    /// given the descriptor of its `-shm`, on that file's DMS byte (which every connection in WAL
    /// mode holds from its first read until it closes). Empty when /proc/locks cannot be read.
    func connected(shm: Int32) -> Set<Int32> {
        var info = stat()
        let shmFile = shm >= 0 && fstat(shm, &info) == 0 ? (dev: UInt64(info.st_dev), ino: UInt64(info.st_ino)) : nil
        return OpenFence.connected(database: (device, inode), shm: shmFile)
    }

    /// Processes with a connection on `store` now: a lock on its SHARED range or its `-shm`'s DMS byte.
    static func connected(to store: StoreFile) -> Set<Int32> {
        guard let database = FileSystem.identity(of: store.path) else { return [] }
        return connected(database: database, shm: FileSystem.identity(of: store.shmPath))
    }

    private static func connected(database: (dev: UInt64, ino: UInt64), shm: (dev: UInt64, ino: UInt64)?) -> Set<Int32> {
        var pids = Set(LockState.holders(device: database.dev, inode: database.ino, byte: LockState.pendingByte + 2) ?? [])
        if let shm { pids.formUnion(LockState.holders(device: shm.dev, inode: shm.ino, byte: LockState.walDMSByte) ?? []) }
        pids.remove(getpid())
        return pids
    }

    /// The descriptors processes other than this one have open on `device`/`inode` (from
    /// /proc/<pid>/fd: another user's processes are seen only by root).
    static func descriptors(device: UInt64, inode: UInt64) -> [Descriptor] {
        let room = 4096
        var pids = [Int32](repeating: 0, count: room), numbers = [Int32](repeating: 0, count: room)
        let found = pids.withUnsafeMutableBufferPointer { p in
            numbers.withUnsafeMutableBufferPointer { n in storectl_open_descriptors(device, inode, p.baseAddress, n.baseAddress, Int32(room)) }
        }
        if found < 0, !unreadableSaid.withLock({ said in defer { said = true }; return said }) {
            logger.notice("/proc cannot be read: which processes have the store open is not seen (a restore in place waits only for those holding SQLite's locks)")
        }
        guard found > 0 else { return [] }
        return (0..<Int(min(found, Int32(room)))).map { Descriptor(pid: pids[$0], number: numbers[$0]) }
    }
}

/// The descriptors of a store's database file that other processes keep open without a
/// connection (no lock): a reader that is not SQLite, a process that keeps a descriptor. Such a
/// descriptor is neither refused nor waited for by an in-place restore.
///
/// A per-write app looks the same in any one look: its connection between its open and its
/// first lock has a descriptor and no lock, and its next connection gets the same descriptor
/// number. So a descriptor is quiet only while every look, from the restore's start on, finds
/// it open, on the same file, in a process holding no lock on the store: looked at every 20 ms
/// (`settle` waits for at least five looks over 100 ms). Taken once, the exemption let a
/// per-write app's fenced connection through, and the restored store failed `integrity_check`
/// in a loaded run of the whole suite.
final class QuietDescriptors: @unchecked Sendable {
    private let store: StoreFile
    private let device: UInt64
    private let inode: UInt64
    private let state = Mutex<(quiet: Set<OpenFence.Descriptor>, looks: Int, started: Date)>(([], 0, Date()))
    private let stopping = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)
    private var watching = false

    /// Lists them (the first look) and goes on looking in the background; nil when the file is gone.
    init?(store: StoreFile) {
        guard let file = FileSystem.identity(of: store.path) else { return nil }
        self.store = store
        device = file.dev
        inode = file.ino
        let before = OpenFence.connected(to: store)
        let open = OpenFence.descriptors(device: device, inode: inode)
        let after = OpenFence.connected(to: store)
        let quiet = Set(open.filter { !before.contains($0.pid) && !after.contains($0.pid) && !LockState.isFollower($0.pid) })
        state.withLock { $0 = (quiet, 1, Date()) }
        guard !quiet.isEmpty else { return }
        watching = true
        Thread.detachNewThread { [self] in
            while !stopping.load(ordering: .relaxed) {
                usleep(20_000)
                if look() { break }
            }
            done.signal()
        }
    }

    /// One look (the locks read before and after the descriptors); true when nothing is left to watch.
    @discardableResult
    private func look() -> Bool {
        let before = OpenFence.connected(to: store)
        let open = state.withLock { $0.quiet }.filter { descriptor in
            var info = stat()
            return stat("/proc/\(descriptor.pid)/fd/\(descriptor.number)", &info) == 0 && UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
        }
        let after = OpenFence.connected(to: store)
        let still = open.filter { !before.contains($0.pid) && !after.contains($0.pid) }
        return state.withLock { current in
            current.quiet.formIntersection(still)
            current.looks += 1
            return current.quiet.isEmpty
        }
    }

    /// The quiet descriptors now, after at least five looks over 100 ms since the first (waits
    /// for them, only while there is anything quiet to look at), the last one taken here (the
    /// thread's may be 20 ms old, or more on a loaded machine).
    func settled() -> Set<OpenFence.Descriptor> {
        guard watching else { return current }
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline, !stopping.load(ordering: .relaxed) {
            let (quiet, looks, started) = state.withLock { ($0.quiet, $0.looks, $0.started) }
            if quiet.isEmpty || (looks >= 5 && Date().timeIntervalSince(started) >= 0.1) { break }
            usleep(10_000)
        }
        look()
        return current
    }

    /// The quiet descriptors now (no wait): after `settled`, the set only shrinks.
    var current: Set<OpenFence.Descriptor> { state.withLock { $0.quiet } }

    /// Stops looking (the set stays as it is).
    func stop() {
        guard watching, !stopping.exchange(true, ordering: .relaxed) else { return }
        done.wait()
    }

    deinit { stop() }
}
