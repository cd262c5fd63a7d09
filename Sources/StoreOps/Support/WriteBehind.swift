import CStoreSupport
import Foundation

/// Keeps a large file being written from piling up dirty pages in the kernel's page cache.
///
/// Copying a 1 GiB store dirties 1 GiB of page cache in seconds. The kernel then throttles every
/// process that writes (the app's next WAL commit included) and the final fsync flushes it all at
/// once: commits stall for hundreds of milliseconds. PostgreSQL meets the same problem with
/// checkpoints and solves it the same way (checkpoint_flush_after, https://www.postgresql.org/docs/current/runtime-config-wal.html):
/// "attempt to force the OS to issue these writes to the underlying storage. Doing so will limit
/// the amount of dirty data in the kernel's page cache, reducing the likelihood of stalls when an
/// fsync is issued at the end". After each chunk we start writeback of what was written and wait
/// only for data older than `window`, so at most about `window` bytes are ever dirty or in flight.
/// On systems without sync_file_range(2) this does nothing and the final fsync does it all.
final class WriteBehind {
    private let fd: Int32
    private let window: Int64
    private var started: Int64 = 0
    private var settled: Int64 = 0

    /// Opens `path` read-only for the life of this value; close it only after every SQLite
    /// connection to the file is closed (closing a descriptor drops the process's POSIX locks).
    init?(path: String, window: Int64 = 64 << 20) {
        fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        self.window = window
    }

    /// Call after writing more of the file.
    func advance() {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return }
        let size = Int64(info.st_size)
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

    deinit { close(fd) }
}
