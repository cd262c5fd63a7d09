import Foundation

/// Segments of points the repository did not take (a bucket whose server went away, a full
/// disk), kept on disk until it does: `storectl-outbox-<repository id>/` in the spool folder.
///
/// While the repository fails, what the follower reads goes into a sealed segment (encrypted as
/// in the repository, its points numbered) every sync interval, written here (temp name, fsync,
/// rename, folder fsync) instead of waiting in memory. They go out first, in order, once the
/// repository answers; each file is removed once its object is written. A follower stopped or
/// killed meanwhile loses none of them: the next start (`Replicate.Loop.sendOutbox`) writes them
/// before it takes the chain up, from the last of them. Before, a follower killed during an
/// outage recorded a gap from its last durable point, however long the outage had lasted.
///
/// A file is named after its segment's key (`points/<store>/<chain>/<name>` as
/// `<store>.<chain>.<name>`), so the next run knows its store, chain and points without reading it.
final class SegmentOutbox {
    let folder: String

    init(spoolFolder: String, repositoryID: String) {
        folder = (spoolFolder as NSString).appendingPathComponent("storectl-outbox-\(repositoryID.prefix(12))")
    }

    static func fileName(_ name: SegmentName) -> String {
        String(name.key.dropFirst("points/".count)).replacingOccurrences(of: "/", with: ".")
    }

    static func segmentName(ofFile file: String) -> SegmentName? {
        let parts = file.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        return SegmentName.parse("points/" + parts.joined(separator: "/"))
    }

    func path(of name: SegmentName) -> String { (folder as NSString).appendingPathComponent(Self.fileName(name)) }

    /// Writes a sealed segment durably; its path.
    @discardableResult
    func keep(_ name: SegmentName, _ sealed: Data) throws -> String {
        if FileSystem.kind(of: folder) != .directory {
            try FileSystem.makeDirectory(folder, existingOK: true, point: "replicate.outbox.folder")
            try FileSystem.sync(FileSystem.parent(of: folder), directory: true, point: "replicate.outbox.folder-sync")
        }
        let file = try PendingFile(finalPath: path(of: name), label: "replicate.outbox")
        do {
            try file.write(sealed)
            try file.commit(replacing: true)
        } catch {
            file.discard()
            throw error
        }
        return file.finalPath
    }

    /// The store's kept segments, by their first point; a dead run's temporary files removed first.
    func kept(store: String) -> [(name: SegmentName, path: String)] {
        _ = PendingFile.removeStale(in: folder)
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return [] }
        return names.compactMap { file -> (SegmentName, String)? in
            guard let name = Self.segmentName(ofFile: file), name.store == store,
                  name.level == 0 || name.level == PointTimeline.stoppedLevel else { return nil }
            return (name, (folder as NSString).appendingPathComponent(file))
        }
        // A stop marker (`PointTimeline.stoppedLevel`, from its chain's last point) after the
        // segment ending there.
        .sorted { ($0.0.chain, $0.0.from, $0.0.level) < ($1.0.chain, $1.0.from, $1.0.level) }
    }

    /// A kept segment's bytes; a failure names its errno (the same at every try: the start
    /// says a kept segment that cannot be read once, not once per errno left over).
    func read(_ path: String) throws -> Data {
        let doing = "reading the kept segment \(path)"
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: doing, side: .input) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw StoreOpsError.posix(errno, doing: doing, side: .input) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw StoreOpsError.posix(info.st_mode & S_IFMT == S_IFDIR ? EISDIR : EINVAL, doing: doing, side: .input) }
        var data = Data(count: Int(info.st_size))
        try data.withUnsafeMutableBytes { try FileSystem.readAll(fd, $0, at: 0, doing: doing, side: .input) }
        return data
    }

    func remove(_ path: String) throws {
        try FileSystem.removeFile(path, point: "replicate.outbox.remove")
    }

    /// Removes the folder once nothing is kept in it (an outage over leaves no trace). A folder
    /// with anything in it (another run's segment or temporary file) stays; a run that keeps a
    /// segment as it goes makes it again.
    func removeIfEmpty() {
        FileSystem.removeEmptyDirectory(folder, point: "replicate.outbox.remove-folder")
    }
}
