import Foundation

/// How much free space an operation needs, and the check that refuses to start without it.
///
/// The figures are deliberately simple and printed with every check, so an operator can see why:
/// - backup: the copy (page_count x page_size, plus external data) + margin, in the destination;
/// - snapshot: twice that in the repository (the temporary copy and the archive coexist while
///   packing; an incompressible store makes an archive as big as the copy);
/// - migrate: a snapshot in the repository, plus the store's size again on its own volume (a
///   table rebuild writes a new copy of the table, and the journal/WAL holds the old pages);
/// - purge: a tenth of the store on its own volume for the WAL/journal of the batches;
/// - everywhere: margin = 5% + 4 MiB, and 64 MiB of SQLite temp space (1/4 of the store for
///   migrate: index builds sort there).
public enum SpaceRequirement {
    public struct Need: Sendable, Equatable {
        public var destination: UInt64
        public var storeVolume: UInt64
        public var temp: UInt64
    }

    public static func margin(_ bytes: UInt64) -> UInt64 { bytes / 20 + (4 << 20) }

    public static func need(_ operation: Preflight.Operation, info: StoreInfo, extraBytes: UInt64 = 0) -> Need {
        let copy = info.logicalBytes + info.walBytes / 2 + extraBytes
        switch operation {
        case .backup:
            return Need(destination: copy + margin(copy), storeVolume: 0, temp: 64 << 20)
        case .snapshot:
            return Need(destination: 2 * copy + margin(copy), storeVolume: 0, temp: 64 << 20)
        case .migrate:
            return Need(destination: 2 * copy + margin(copy), storeVolume: info.logicalBytes + margin(info.logicalBytes),
                        temp: max(64 << 20, info.logicalBytes / 4))
        case .purge:
            return Need(destination: 0, storeVolume: info.logicalBytes / 10 + margin(0), temp: 64 << 20)
        }
    }

    /// Throws exit 74 when `folder`'s volume has less than the operation needs there.
    public static func require(_ operation: Preflight.Operation, info: StoreInfo, extraBytes: UInt64 = 0,
                               at folder: String, purpose: String) throws {
        try require(need(operation, info: info, extraBytes: extraBytes).destination, at: folder, purpose: purpose)
    }

    /// The one free-space check every operation makes before it writes: 73 on a read-only file
    /// system or one that stores nothing (/proc), 74 with less than `bytes` free (or no inodes) on `folder`'s volume, naming both
    /// figures and what to do.
    public static func require(_ bytes: UInt64, at folder: String, purpose: String,
                               hint: String = "free space there, or choose a destination on another volume") throws {
        let space = try FileSystem.space(at: folder)
        guard !space.readOnly || bytes == 0 else {
            throw StoreOpsError(.cannotCreate, "\(folder) is on a read-only file system: nothing can be written there for \(purpose)",
                                hint: "choose a destination on a writable volume, or remount it read-write")
        }
        guard space.totalBytes > 0 || bytes == 0 else {
            // A file system with no blocks at all (/proc, /sys): not full, not storage.
            throw StoreOpsError(.cannotCreate, "\(folder) is on a file system that stores nothing (such as /proc or /sys): nothing can be written there for \(purpose)",
                                hint: "choose a destination on a storage volume")
        }
        guard space.availableBytes >= bytes else {
            throw StoreOpsError(.noSpace,
                "not enough space for \(purpose): \(Format.bytes(space.availableBytes)) free in \(folder), \(Format.bytes(bytes)) needed",
                hint: hint)
        }
        guard space.availableInodes >= 16 else {
            throw StoreOpsError(.noSpace, "no free inodes in \(folder) for \(purpose) (\(space.availableInodes) left)")
        }
    }

    /// Whether `bytes` fit on `folder`'s volume (for work that has another way when they do not).
    public static func fits(_ bytes: UInt64, at folder: String) -> Bool {
        (try? require(bytes, at: folder, purpose: "")) != nil
    }

    /// The folder SQLite puts its temporary files in (SQLITE_TMPDIR, TMPDIR, /var/tmp, /usr/tmp, /tmp).
    public static var sqliteTempFolder: String {
        let env = ProcessInfo.processInfo.environment
        let candidates = [env["SQLITE_TMPDIR"], env["TMPDIR"], "/var/tmp", "/usr/tmp", "/tmp"].compactMap { $0 }
        return candidates.first { FileSystem.kind(of: $0) == .directory && access($0, W_OK | X_OK) == 0 } ?? "/tmp"
    }
}
