import Crypto
import Foundation

/// Reads a snapshot's archive once and checks everything on the way: every entry against the
/// rules (`ArchiveEntryRules`) and the catalog's manifest before its data is read, every file's
/// size and SHA-256, the archive's own manifest against the catalog's, and the archive's
/// SHA-256. The database is written to a temporary file the caller provides; external data files
/// are written under a temporary folder, or only hashed. Nothing is ever written to a path taken
/// from the archive.
enum SnapshotExtraction {
    struct Targets {
        /// An existing, empty file for the database.
        var database: String
        /// A folder for the external data files, or nil to only hash them.
        var externalFolder: String?
    }

    /// Unpacks and checks everything, ending with `level`'s integrity check of the database,
    /// which runs on one core while the other hashes the unpacked database file.
    ///
    /// - Throws: exit 65 naming the snapshot and what is wrong when anything does not match.
    static func run(_ record: Manifest, repository: SnapshotRepository, into targets: Targets, level: VerifyLevel) throws {
        guard let facts = record.snapshot, let archiveRecord = facts.archive else {
            throw StoreOpsError(.badData, "the catalog entry has no archive record")
        }
        let id = facts.id
        let archivePath = repository.archivePath(record)
        func damaged(_ what: String) -> StoreOpsError {
            StoreOpsError(.badData, "snapshot \(id): \(what); the archive is damaged",
                          hint: "restore an older snapshot: `storectl snapshot list --repo \(repository.path)`")
        }
        guard let size = FileSystem.size(of: archivePath) else { throw damaged("its archive \(archivePath) is missing") }
        guard size == archiveRecord.bytes else {
            throw damaged("its archive is \(size) bytes, the catalog says \(archiveRecord.bytes) (truncated or replaced)")
        }

        var expected: [String: Manifest.FileRecord] = [record.database.path: record.database]
        for file in record.externalData?.files ?? [] { expected[file.path] = file }
        let allowed = Set(expected.keys).union(["manifest.json"])
        var seen = Set<String>()
        var innerManifest: Data?

        let reader: ArchiveReader
        do { reader = try ArchiveReader(path: archivePath) } catch let error as StoreOpsError {
            throw damaged(error.message)
        }
        do {
            while let entry = try reader.next() {
                try ProcessSignals.checkpoint("checking snapshot \(id)")
                if let problem = ArchiveEntryRules.problem(name: entry.name, fileType: entry.fileType, symlinkTarget: entry.symlinkTarget,
                                                           hardlinkTarget: entry.hardlinkTarget, expected: allowed) {
                    throw StoreOpsError(.badData, "snapshot \(id): refusing an archive entry: \(problem); nothing was restored",
                                        hint: "this archive was not written by storectl or was tampered with")
                }
                guard seen.insert(entry.name).inserted else { throw damaged("the archive holds \(entry.name) twice") }
                if entry.name == "manifest.json" {
                    var data = Data()
                    try reader.readData { chunk in
                        data.append(contentsOf: chunk)
                        if data.count > 16 << 20 { throw damaged("manifest.json is larger than 16 MiB") }
                    }
                    innerManifest = data
                    continue
                }
                guard let file = expected[entry.name] else { throw damaged("an entry the manifest does not list: \(entry.name)") }
                // A size bomb (gigabytes of zeros where the manifest says megabytes) is refused on its
                // header, or at the manifest's size at the latest: never unpacked in full.
                if entry.size >= 0, UInt64(entry.size) != file.bytes {
                    throw damaged("\(entry.name) is \(Format.count(entry.size)) bytes in the archive, the manifest says \(Format.count(file.bytes)); nothing was unpacked from it")
                }
                let destination: String? = entry.name == record.database.path
                    ? targets.database
                    : targets.externalFolder.map { ($0 as NSString).appendingPathComponent(FileSystem.name(of: entry.name)) }
                // The database is hashed after unpacking, alongside its integrity check (below).
                let isDatabase = entry.name == record.database.path
                let (bytes, sha) = try stream(reader, to: destination, creating: !isDatabase, hashing: !isDatabase, limit: file.bytes) {
                    damaged("\(entry.name) holds more than the \(Format.count(file.bytes)) bytes the manifest says; reading stopped there")
                }
                guard bytes == file.bytes else { throw damaged("\(entry.name) is \(bytes) bytes, the manifest says \(file.bytes)") }
                if !isDatabase, sha != file.sha256 {
                    throw damaged("checksum mismatch in \(entry.name) (expected \(file.sha256.prefix(12))…, got \(sha.prefix(12))…)")
                }
            }
        } catch let error as StoreOpsError where error.status == .badData && !error.message.hasPrefix("snapshot \(id)") {
            throw damaged(error.message)
        }
        let missing = Set(expected.keys).subtracting(seen)
        guard missing.isEmpty else { throw damaged("the archive lacks \(missing.sorted().joined(separator: ", "))") }
        guard let innerManifest else { throw damaged("the archive has no manifest.json") }

        // The archive's own manifest is the catalog's, less the archive record it cannot contain.
        var catalogCopy = record
        catalogCopy.snapshot?.archive = nil
        guard let inner = try? JSON.decoder().decode(Manifest.self, from: innerManifest) else {
            throw damaged("its manifest.json is not a valid manifest")
        }
        guard try JSON.encode(inner) == (try JSON.encode(catalogCopy)) else {
            throw damaged("its manifest.json does not match the catalog entry")
        }
        let (archiveBytes, archiveSHA) = try reader.finishHashing()
        guard archiveBytes == archiveRecord.bytes, archiveSHA == archiveRecord.sha256 else {
            throw damaged("archive checksum mismatch (expected \(archiveRecord.sha256.prefix(12))…, got \(archiveSHA.prefix(12))…)")
        }
        let database = targets.database
        let (check, sha) = try inParallel({ try SnapshotVerify.checkDatabase(database, level: level) },
                                          { try Hashing.sha256(ofFile: database) })
        guard sha == record.database.sha256 else {
            throw damaged("checksum mismatch in \(record.database.path) (expected \(record.database.sha256.prefix(12))…, got \(sha.prefix(12))…)")
        }
        guard check.ok else {
            throw StoreOpsError(.badData, "snapshot \(id): the database inside fails \(level == .full ? "integrity_check" : "quick_check"): \(check.messages.prefix(3).joined(separator: "; "))")
        }
    }

    /// Streams the current entry to `path` (or only hashes it), returning its size and SHA-256.
    private static func stream(_ reader: ArchiveReader, to path: String?, creating: Bool, hashing: Bool, limit: UInt64,
                               tooLarge: () -> StoreOpsError) throws -> (UInt64, String) {
        var fd: Int32 = -1
        if let path {
            if creating {
                fd = try FileSystem.create(path, point: "restore.external-file")
            } else {
                fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC)
                guard fd >= 0 else { throw StoreOpsError.posix(errno, doing: "writing \(path)", side: .output) }
            }
        }
        defer { if fd >= 0 { close(fd) } }
        let writeBehind = path.flatMap { WriteBehind(path: $0) }
        var hasher = SHA256()
        var total: UInt64 = 0
        try reader.readData { chunk in
            guard total + UInt64(chunk.count) <= limit else { throw tooLarge() }
            if hashing { hasher.update(bufferPointer: chunk) }
            total += UInt64(chunk.count)
            guard fd >= 0 else { return }
            try FileSystem.writeAll(fd, chunk, path: path!)
            writeBehind?.advance()
        }
        return (total, Hashing.hex(hasher.finalize()))
    }
}
