import Foundation

/// Keeps the job log and its `.out` file from growing without bound: once a file is larger than
/// `maxBytes`, it becomes `<file>.1` (`.1` becomes `.2`, ... the oldest, `.<keep>`, is replaced).
///
/// storectl rotates its own files rather than ship a logrotate configuration: the log's path comes
/// from each policy (logrotate cannot know it), the crontab may be a user's (no root to write
/// `/etc/logrotate.d`), and minimal Debian systems have no logrotate. Rotation happens when a run
/// starts (`.out`) and before a record is appended (the JSON log), under an flock of the file, so
/// two runs never rotate it twice. A run whose stdout is the `.out` being rotated keeps writing to
/// it under its new name (`.out.1`).
public enum LogRotation {
    public static let defaultMaxBytes: UInt64 = 10 << 20
    public static let defaultKeep = 5

    public static func rotateIfNeeded(_ path: String, maxBytes: UInt64, keep: Int) {
        guard keep >= 1, let size = FileSystem.size(of: path), size > maxBytes else { return }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        guard flock(fd, LOCK_EX) == 0 else { return }
        defer { flock(fd, LOCK_UN) }
        // Another run may have rotated it while we waited for the lock: then this is no longer `path`.
        var opened = stat()
        guard fstat(fd, &opened) == 0, let now = FileSystem.identity(of: path), now.ino == UInt64(opened.st_ino),
              (FileSystem.size(of: path) ?? 0) > maxBytes else { return }
        for index in stride(from: keep - 1, through: 1, by: -1) where FileSystem.kind(of: "\(path).\(index)") == .file {
            try? FileSystem.rename("\(path).\(index)", "\(path).\(index + 1)", point: "joblog.rotate.shift")
        }
        try? FileSystem.rename(path, "\(path).1", point: "joblog.rotate")
    }
}
