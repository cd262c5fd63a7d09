import Crypto
import Foundation

/// Core Data's external binary data (`.<stem>_SUPPORT/_EXTERNAL_DATA/`): large attribute values
/// Core Data keeps as files beside the store, named by UUID and never modified in place.
public enum ExternalDataFolder {
    /// Copies every regular file under `source` into `destination` (created), hashing as it goes.
    ///
    /// - Returns: one record per file, paths relative to `relativeRoot`.
    ///
    /// - Throws: 65 when a name under `source` is not valid UTF-8: such a file could not be copied
    ///   faithfully, and is refused rather than left out of the copy without a word.
    public static func copy(from source: String, to destination: String, relativeRoot: String, label: String) throws -> [Manifest.FileRecord] {
        if let bad = FileSystem.nonUTF8Names(under: source).first {
            throw StoreOpsError(.badData, "the external-data file \(bad) has a name that is not valid UTF-8; it cannot be copied faithfully, so nothing was copied",
                                hint: "rename it (Core Data names these files by UUID)")
        }
        try FileSystem.makeDirectory(destination, existingOK: true, point: "\(label).external-folder")
        var records: [Manifest.FileRecord] = []
        let enumerator = FileManager.default.enumerator(atPath: source)
        while let relative = enumerator?.nextObject() as? String {
            try ProcessSignals.checkpoint("copying external data")
            let from = (source as NSString).appendingPathComponent(relative)
            let to = (destination as NSString).appendingPathComponent(relative)
            switch FileSystem.kind(of: from) {
            case .directory:
                try FileSystem.makeDirectory(to, existingOK: true, point: "\(label).external-subfolder")
            case .file:
                let (bytes, sha) = try copyFile(from, to, label: label)
                records.append(Manifest.FileRecord(path: (relativeRoot as NSString).appendingPathComponent(relative),
                                                   bytes: bytes, sha256: sha))
            case .missing:
                continue   // deleted by the app since it was listed: it is not part of the snapshot
            case .other:
                continue
            }
        }
        return records.sorted { $0.path < $1.path }
    }

    /// Copies one file (mode 0600), returning its size and SHA-256.
    static func copyFile(_ from: String, _ to: String, label: String) throws -> (UInt64, String) {
        let input = open(from, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw StoreOpsError.posix(errno, doing: "reading \(from)", side: .input) }
        defer { close(input) }
        let output = try FileSystem.create(to, point: "\(label).external-file")
        defer { close(output) }
        return try Hashing.streamHashing(fd: input, path: from) { try FileSystem.writeAll(output, $0, path: to) }
    }

    /// Total size of the regular files under `path` (0 when it does not exist).
    public static func size(of path: String) -> UInt64 {
        guard let enumerator = FileManager.default.enumerator(atPath: path) else { return 0 }
        var total: UInt64 = 0
        while let relative = enumerator.nextObject() as? String {
            total += FileSystem.size(of: (path as NSString).appendingPathComponent(relative)) ?? 0
        }
        return total
    }
}
