import CStoreSupport
import Foundation
import Synchronization

/// How storectl writes big files while an app commits on the same disk.
///
/// An app in WAL mode fsyncs its `-wal` at every commit (`synchronous=FULL`). A copy that keeps
/// the disk's queue full (SQLite's backup API writing a 1 GiB file, a first snapshot's packs)
/// makes those fsyncs wait behind the copy's writes, and on two cores its hashing and
/// compressing delay the app's thread too. Measured here (bench/pace.sh), a writer's p99 commit
/// went from 0.6–1.0 ms alone to 4 ms during a backup and 6 ms during a first snapshot. I/O
/// priority does nothing on a virtio disk (its scheduler is usually `none`); nice 19 helped
/// little alone. What helps: **one chunk of writes in flight at a time** (a backup's copy goes on
/// while its last chunk is written back, see `WriteBehind`; a pack is written and written back a
/// chunk at a time, waiting for each, `write`), with the copy at a lower CPU priority.
///
/// `--no-pace` (backup, snapshot create) writes at full speed instead, for maintenance windows.
public struct IOPace: Sendable, Equatable {
    /// The bytes written back at once.
    public var chunk: Int64 = IOPace.defaultChunk

    public init(chunk: Int64 = IOPace.defaultChunk) {
        self.chunk = chunk
    }

    /// 256 KiB (`STORECTL_TEST_PACE_CHUNK_KIB` sets another size, for the benchmarks' trials).
    /// Measured (bench/pace.sh, the 1 GiB store, a writer committing every 2 ms, its repository
    /// in the store's folder, medians of 3 rounds, stop 91): with 1 MiB chunks the writer's p99
    /// commit was +2.51 ms during a first snapshot (+0.89 backup, +0.20 next snapshot); with
    /// 256 KiB +0.16 (+0.24, +0.33), in 1.09x (1.03x, 1.08x) the `--no-pace` time. By hand, the
    /// packing stage alone: p99 3.0-3.1 ms at 1 MiB, 0.54-0.72 at 256 KiB, 0.45-0.57 at 64 KiB,
    /// in the same time (6.2-6.5 s). (With the repository in another folder of the same disk the
    /// 1 MiB chunks cost only +0.4 ms: the disk's queue behind the app's fsync is what is paid.)
    public static let defaultChunk: Int64 = ProcessInfo.processInfo.environment["STORECTL_TEST_PACE_CHUNK_KIB"]
        .flatMap { Int64($0) }.map { max(4, min($0, 65_536)) << 10 } ?? 256 << 10

    private static let setting = Mutex<IOPace?>(IOPace())
    private static let inFlight = Mutex(())

    /// The pace of this process's copies; nil: full speed. Set once, early (the CLI's `--no-pace`).
    public static var current: IOPace? {
        get { setting.withLock { $0 } }
        set { setting.withLock { $0 = newValue } }
    }

    /// `backup` and `snapshot create`: paced writes and polite threads (below), or full speed.
    /// Call before any other thread starts.
    public static func configure(paced: Bool) {
        current = paced ? IOPace() : nil
        polite.withLock { $0 = paced }
        if paced { StarvationGuard.start() }
        politeThread()
    }

    private static let polite = Mutex(false)
    /// `politely` scopes open now (replicate: its bases' work, not its main loop).
    private static let scopes = Mutex(0)

    /// Runs `body` polite (below), on the calling thread and the lanes it starts, though the
    /// process is not: a long-running process whose own loop must keep the normal class
    /// (replicate, which reads the app's commits as they come) does the heavy work of a base this
    /// way. Each thread goes back to what it had when its work item ends (`ordinaryThread`): pool
    /// threads are shared with the loop's other work, and the caller goes on with it.
    public static func politely<T>(_ body: () throws -> T) rethrows -> T {
        StarvationGuard.start()
        scopes.withLock { $0 += 1 }
        defer {
            let last = scopes.withLock { value -> Bool in
                value -= 1
                return value == 0
            }
            // A thread made by a polite one is born polite (dispatch makes its pool's threads from
            // the thread that queues work) and may never run polite work to be put back after:
            // with no scope left, every thread still in the idle class goes back to the normal one.
            if last, !polite.withLock({ $0 }) { StarvationGuard.leaveIdleClass() }
        }
        politeThread()
        defer { ordinaryThread() }
        return try body()
    }

    /// Makes the calling thread yield the CPU to the app, when `configure(paced: true)`: the idle
    /// scheduling class (SCHED_IDLE), so it runs only on a core no other thread wants. Measured on
    /// two cores, a first snapshot of the 1 GiB bench store under a writer committing every 2 ms:
    /// the writer's p99 commit 1.4-1.8 ms (alone 0.4) in the idle class, 3.4-5.5 ms at nice 10
    /// with a 0.1 ms slice (the writer waited up to 4 ms for a core: `perf sched`), in about the
    /// same time. An idle-class copy on a machine whose cores the app keeps busy would never end,
    /// though, holding its read transaction (the -wal grows): `StarvationGuard` watches for that
    /// and moves every thread to nice 10 with a 0.1 ms slice (what `politeThread` then gives new
    /// ones), as it also does where it cannot watch. Every lane calls this as it starts (a thread's
    /// scheduling is its own).
    public static func politeThread() {
        let whole = polite.withLock { $0 }
        guard whole || scopes.withLock({ $0 > 0 }) else { return }
        let watching = StarvationGuard.watching
        // For a scope, only where threads can be put back (the guard watches only then: see
        // `StarvationGuard`): else a pool thread would stay at nice 10 for the loop's later work.
        // What the thread had is kept, to go back to (unknown: it stays as it is).
        if !whole, !watching || storectl_keep_thread_sched() != 0 { return }
        if watching {
            _ = storectl_idle_thread()
        } else {
            niceThread(0)
        }
    }

    /// Where a lane's work item ends: a thread made polite for a `politely` scope back to the
    /// class and nice value it had (leaving the idle class needs CAP_SYS_NICE or an RLIMIT_NICE
    /// of 20, which the guard checked before watching; without them no thread is made polite for
    /// a scope, and a base runs at full speed). Nothing for a process that is polite as a whole.
    public static func ordinaryThread() {
        _ = storectl_restore_thread_sched()
    }

    /// Thread `tid` (0: the calling one) at nice 10 with a 0.1 ms slice; whether it worked.
    @discardableResult
    static func niceThread(_ tid: Int32) -> Bool {
        storectl_polite_thread(tid, 10, 100_000) == 0
    }

    /// Writes `bytes` to `fd` (at its offset, from the start of a new file) a chunk at a time,
    /// each written back and waited for before the next is written, so its fsync finds nothing
    /// left to write and the file never holds more than a chunk of dirty pages. An app whose
    /// `-wal` grows makes three trips to the disk at every commit (its pages, then the inode and
    /// allocation bitmaps), each queued behind what else is in flight: a 16 MiB pack written whole
    /// and then written back a chunk at a time made the writer's p99 commit 5 ms during a first
    /// snapshot, this 2.9-3.8 ms (1.5 and 0.9-1.1 ms when its `-wal` did not grow). Failures of the
    /// write-back are ignored: the fsync still makes the file durable (and reports what failed).
    func write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
        var at = 0
        while at < bytes.count {
            let n = min(Int(chunk), bytes.count - at)
            try FileSystem.writeAll(fd, UnsafeRawBufferPointer(rebasing: bytes[at..<(at + n)]), path: path)
            Self.inFlight.withLock { _ in _ = storectl_sync_file_range(fd, Int64(at), Int64(n), 1) }
            at += n
        }
    }
}

/// Keeps a large file being written from piling up dirty pages in the kernel's page cache.
///
/// Copying a 1 GiB store dirties 1 GiB of page cache in seconds. The kernel then throttles every
/// process that writes (the app's next WAL commit included) and the final fsync flushes it all at
/// once: commits stall for hundreds of milliseconds. PostgreSQL meets the same problem with
/// checkpoints and solves it the same way (checkpoint_flush_after, https://www.postgresql.org/docs/current/runtime-config-wal.html):
/// "attempt to force the OS to issue these writes to the underlying storage. Doing so will limit
/// the amount of dirty data in the kernel's page cache, reducing the likelihood of stalls when an
/// fsync is issued at the end".
///
/// Paced (`IOPace.current`, the default): the writer writes one pace chunk (256 KiB) per step, and
/// after each step waits for the writeback of the step before it and starts this one's. So one
/// chunk is on its way to the disk while the next is copied: the disk's queue never holds more
/// than a chunk of ours for an app's fsync to wait behind, and the copy takes the time of a
/// full-speed one. Measured on the 1 GiB bench store under a writer committing every 2 ms
/// (5 alternating rounds): 2.04 s and the writer's p99 commit 1.08 ms (alone 0.40), where writing
/// each chunk back and waiting for it before copying on took 2.58 s at 1.05 ms, and full speed
/// 2.03 s at 2.90 ms. Full speed: writeback of what was written starts and only data older than
/// `window` is waited for. On systems without sync_file_range(2) this does nothing and the final
/// fsync does it all.
final class WriteBehind {
    private let fd: Int32
    private let window: Int64
    private let pace: IOPace?
    private var started: Int64 = 0
    private var settled: Int64 = 0
    /// Paced: the range whose writeback the last `advance` started, waited for by the next.
    private var inFlight: Range<Int64> = 0..<0

    /// Opens `path` read-only for the life of this value; close it only after every SQLite
    /// connection to the file is closed (closing a descriptor drops the process's POSIX locks).
    init?(path: String, window: Int64 = 64 << 20, pace: IOPace? = IOPace.current) {
        fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        self.window = window
        self.pace = pace
    }

    /// Paced: the bytes the writer should write between two `advance` calls.
    var pacedChunk: Int64? { pace?.chunk }

    private var size: Int64? {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        return Int64(info.st_size)
    }

    /// Call after writing more of the file.
    func advance() {
        guard let size else { return }
        if pace != nil {
            settle()
            if size > started {
                _ = storectl_sync_file_range(fd, started, size - started, 0)
                inFlight = started..<size
                started = size
            }
            return
        }
        if size > started {
            _ = storectl_sync_file_range(fd, started, size - started, 0)
            started = size
        }
        if size - settled > window {
            let until = size - window / 2
            _ = storectl_sync_file_range(fd, settled, until - settled, 1)
            settled = until
        }
    }

    /// Paced: waits until the range in flight is written back.
    private func settle() {
        guard !inFlight.isEmpty else { return }
        _ = storectl_sync_file_range(fd, inFlight.lowerBound, Int64(inFlight.count), 1)
        inFlight = 0..<0
    }

    /// Paced: writes back what the last writes left and waits for it (the final fsync then has
    /// nothing left to do).
    func drain() {
        guard pace != nil else { return }
        advance()
        settle()
    }

    deinit { close(fd) }
}
