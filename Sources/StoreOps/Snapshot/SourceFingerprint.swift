import Foundation

/// What says, without reading a store, that nothing was committed to it since a snapshot: its
/// database file (device and inode), and in WAL mode the wal-index header's salts, commit counter
/// (`iChange`: +1 per commit), last frame and page count; in rollback mode the header's change
/// counter (+1 per commit), the file's size and modification time. Plus the external-data files'
/// names, sizes and modification times. A snapshot records the fingerprint its read began and
/// ended with when the two agree; the next snapshot of the store whose fingerprint is the same
/// reuses its map and check without reading a page.
struct SourceFingerprint: Codable, Equatable, Sendable {
    var device: UInt64
    var inode: UInt64
    /// WAL mode: salt-1, salt-2, commit counter, last frame, pages (hex of the wal-index header's
    /// fields), or "empty" when the -wal is missing or empty (the file alone is the content).
    var walIndex: String?
    /// Rollback mode: the header's change counter, the file's size and modification time (ns).
    var changeCounter: UInt32?
    var fileBytes: UInt64?
    var modifiedNanoseconds: Int64?
    /// The file's status change time (ns): a write moves it, and nothing can set it back, where
    /// the modification time can be (`touch -d`, a copy keeping times: a store written and its
    /// time put back was "unchanged (no page read)" and its snapshot held the old content). nil
    /// in records made before it was kept (then never equal: read once).
    var statusChangedNanoseconds: Int64?
    /// SHA-256 of every external-data file's relative path, size and modification time (nil: no folder).
    var external: String?
    /// When it was taken (seconds since 1970); not compared.
    var takenAt: Double?

    static func == (a: SourceFingerprint, b: SourceFingerprint) -> Bool {
        a.device == b.device && a.inode == b.inode && a.walIndex == b.walIndex && a.changeCounter == b.changeCounter
            && a.fileBytes == b.fileBytes && a.modifiedNanoseconds == b.modifiedNanoseconds && a.external == b.external
            && a.statusChangedNanoseconds != nil && a.statusChangedNanoseconds == b.statusChangedNanoseconds
    }

    /// Whether a store found in this state later may be taken to be unchanged since. With no
    /// frame in any -wal, a write shows only as the file's new time, and one within the clock's
    /// tick (a few ms) of the time seen would look the same: so only when the file's last write
    /// was at least 100 ms before this was taken. (A state with frames: the wal-index changes at
    /// every commit.)
    /// A time with no fraction of a second is taken to come from a file system that keeps whole
    /// seconds (ext3, FAT, some network file systems), where two writes a second apart look the
    /// same: never trusted (such a store is read again by each snapshot).
    var settled: Bool {
        guard walIndex == "empty" else { return true }
        // (The modification time: a write moves both; a status change time newer than it comes
        // from a chmod or a time set by hand, and a write after it moves the modification time.)
        guard let takenAt, let modified = modifiedNanoseconds, modified % 1_000_000_000 != 0 else { return false }
        return takenAt - Double(modified) / 1e9 >= 0.1
    }

    /// The -wal's size, 0 when there is none; nil when it cannot be told (an error other than ENOENT).
    private static func walBytes(_ store: StoreFile) -> UInt64? {
        var info = stat()
        if stat(store.walPath, &info) == 0 { return UInt64(info.st_size) }
        return errno == ENOENT ? 0 : nil
    }

    /// The store's fingerprint now, or nil when one cannot be read (no -shm yet, a torn header).
    static func take(_ store: StoreFile) -> SourceFingerprint? {
        // Whether the -wal holds no frame is looked at before the file's stat and again after a
        // second one: an app committing and then closing (its checkpoint writes the file and
        // removes the -wal) between the stat and one look would otherwise pair the file's old
        // time with "no frame".
        let walBefore = walBytes(store)
        var info = stat()
        guard stat(store.path, &info) == 0, let header = try? FileProbe.shared.header(of: store.path), header.count >= 100 else { return nil }
        var print = SourceFingerprint(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
        print.takenAt = Date().timeIntervalSince1970
        // The database file's size and time in both modes: in WAL mode the wal-index alone is not
        // enough, because the app's last connection closing checkpoints into the file and removes
        // the -wal and -shm, and the next open builds a new wal-index whose counter starts again.
        print.fileBytes = UInt64(info.st_size)
        print.modifiedNanoseconds = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
        print.statusChangedNanoseconds = Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec)
        if StoreFile.isWALHeader(header) {
            if walBefore == 0 {
                var again = stat()
                guard walBytes(store) == 0, stat(store.path, &again) == 0, again.st_ino == info.st_ino, again.st_size == info.st_size,
                      again.st_mtim.tv_sec == info.st_mtim.tv_sec, again.st_mtim.tv_nsec == info.st_mtim.tv_nsec,
                      again.st_ctim.tv_sec == info.st_ctim.tv_sec, again.st_ctim.tv_nsec == info.st_ctim.tv_nsec else { return nil }
                // No -wal, or an empty one: no frame anywhere, so the database file alone is the
                // content (its identity, size and time). The wal-index says nothing more: an app
                // that closes the store removes both, and the next open builds a new one, so
                // reading it would make every snapshot after such a close read the whole store.
                // (`settled` says when this may be trusted later.)
                print.walIndex = "empty"
            } else {
                guard let bytes = try? FileProbe.shared.read(store.shmPath, count: 96, at: 0), let index = WalFormat.IndexHeader.parse(bytes) else { return nil }
                print.walIndex = String(format: "%08x%08x%08x%08x%08x", index.salt1, index.salt2, index.change, index.lastFrame, index.pages)
            }
        } else {
            guard FileSystem.kind(of: store.walPath) == .missing, FileSystem.kind(of: store.journalPath) == .missing else { return nil }
            print.changeCounter = WalFormat.be32(header, 24)
        }
        let folder = store.externalDataPath
        if FileSystem.kind(of: folder) == .directory {
            var lines: [String] = []
            for relative in (FileManager.default.subpaths(atPath: folder) ?? []).sorted() {
                var file = stat()
                guard stat((folder as NSString).appendingPathComponent(relative), &file) == 0 else { return nil }
                lines.append("\(relative)\u{0}\(file.st_size)\u{0}\(file.st_mtim.tv_sec).\(file.st_mtim.tv_nsec)\u{0}\(file.st_mode)")
            }
            print.external = Hashing.sha256(Data(lines.joined(separator: "\n").utf8))
        }
        return print
    }
}
