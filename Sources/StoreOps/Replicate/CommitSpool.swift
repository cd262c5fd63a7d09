import Foundation

/// Where `storectl replicate` keeps the pages of commits that wait for a repository it cannot
/// write (a bucket whose server went away, a full disk): past `Replicate.Options.spoolMemory` of
/// them in memory, the oldest go to an unnamed file in the spool folder, appended, and are read
/// back a segment at a time as the repository answers again. The app never waits for any of it:
/// its commits are read from the `-wal` as always.
///
/// The file has no name (O_TMPFILE; where the file system cannot make one, a name removed at
/// once): nothing is left behind whatever ends the process. It holds what waits between two
/// syncs: once a write to the repository has failed, each sync keeps what waits in the outbox
/// (`SegmentOutbox`), sealed and fsynced, which a follower killed meanwhile does not lose. The
/// file is emptied (truncated) whenever no waiting commit is in it any more.
final class CommitSpool {
    /// Where a waiting commit's pages are in the file.
    struct Ref: Sendable, Equatable {
        var offset: Int64
        var lengths: [Int]
        var bytes: Int { lengths.reduce(0, +) }
    }

    let folder: String
    private var fd: Int32 = -1
    /// The file's size: where the next commit's pages go.
    private(set) var end: Int64 = 0

    init(folder: String) {
        self.folder = folder
    }

    deinit { if fd >= 0 { close(fd) } }

    /// Appends one commit's pages. Throws (74 for a full disk) when they cannot be written: the
    /// caller drops what waits and records a gap.
    func append(_ pages: [[UInt8]]) throws -> Ref {
        if fd < 0 {
            fd = try FileSystem.createUnnamed(in: folder, fallbackName: "storectl-replicate-spool", doing: "creating the spool file for commits that wait",
                                              point: "replicate.spool")
        }
        let ref = Ref(offset: end, lengths: pages.map(\.count))
        var at = end
        for page in pages {
            try page.withUnsafeBytes { try FileSystem.writeAll(fd, $0, at: off_t(at), path: "the spool file in \(folder)") }
            at += Int64(page.count)
        }
        end = at
        return ref
    }

    /// The pages `ref` names, as they were appended.
    func read(_ ref: Ref) throws -> [[UInt8]] {
        guard fd >= 0 else { throw StoreOpsError(.failure, "the spool file in \(folder) is not open") }
        var at = ref.offset
        return try ref.lengths.map { length in
            var page = [UInt8](repeating: 0, count: length)
            if length > 0 {
                try page.withUnsafeMutableBytes { try FileSystem.readAll(fd, $0, at: off_t(at), doing: "reading the spool file in \(folder) back") }
            }
            at += Int64(length)
            return page
        }
    }

    /// Empties the file: call only when no `Ref` into it is kept.
    func reset() {
        guard fd >= 0, end > 0 else { return }
        if ftruncate(fd, 0) == 0 { end = 0 }
    }
}
