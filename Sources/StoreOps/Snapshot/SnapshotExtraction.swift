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
    static func run(_ record: Manifest, repository: FormatOneRepository, into targets: Targets, level: VerifyLevel) throws {
        guard let facts = record.snapshot, let archiveRecord = facts.archive else {
            throw StoreOpsError(.badData, "the catalog entry has no archive record")
        }
        let check = Damage(id: facts.id, repository: repository.path)
        let archivePath = repository.archivePath(record)
        guard let size = FileSystem.size(of: archivePath) else { throw check.damaged("its archive \(archivePath) is missing") }
        guard size == archiveRecord.bytes else {
            throw check.damaged("its archive is \(size) bytes, the catalog says \(archiveRecord.bytes) (truncated or replaced)")
        }
        let reader: ArchiveReader
        do { reader = try ArchiveReader(path: archivePath) } catch let error as StoreOpsError {
            throw check.damaged(error.message)
        }
        let innerManifest: Data
        do { innerManifest = try unpack(reader, record: record, into: targets, check: check) } catch let error as StoreOpsError
            where error.status == .badData && !error.message.hasPrefix("snapshot \(facts.id)") {
            throw check.damaged(error.message)
        }
        // The archive's own manifest is the catalog's, less the archive record it cannot contain.
        var catalogCopy = record
        catalogCopy.snapshot?.archive = nil
        guard let inner = try? JSON.decoder().decode(Manifest.self, from: innerManifest) else {
            throw check.damaged("its manifest.json is not a valid manifest")
        }
        guard try JSON.encode(inner) == (try JSON.encode(catalogCopy)) else {
            throw check.damaged("its manifest.json does not match the catalog entry")
        }
        let (archiveBytes, archiveSHA) = try reader.finishHashing()
        guard archiveBytes == archiveRecord.bytes, archiveSHA == archiveRecord.sha256 ?? "" else {
            throw check.damaged("archive checksum mismatch (expected \((archiveRecord.sha256 ?? "none").prefix(12))…, got \(archiveSHA.prefix(12))…)")
        }
        try checkDatabase(targets.database, of: record, level: level, check: check)
    }

    /// What a damaged snapshot's error says.
    struct Damage {
        let id: String
        let repository: String
        var hint: String?
        /// What is damaged: a format-2 snapshot's pages live in the repository's packs, not in an archive.
        var object = "the archive"
        init(id: String, repository: String, hint: String? = nil) {
            self.id = id
            self.repository = repository
            self.hint = hint
        }
        func damaged(_ what: String) -> StoreOpsError {
            StoreOpsError(.badData, "snapshot \(id): \(what); \(object) is damaged",
                          hint: hint ?? "restore an older snapshot: `storectl snapshot list --repo \(repository)`")
        }
    }

    /// A standalone archive (`snapshot export`'s file, or one of a format-1 repository): its
    /// manifest is read first (it is the last entry), checked to describe a snapshot, then the
    /// archive is read again and checked exactly as a repository's archive is, against it.
    /// Returns the manifest.
    ///
    /// - Throws: 65 naming the file and what is wrong (the caller checked that it exists).
    static func runFile(_ path: String, into targets: Targets, level: VerifyLevel,
                        beforeUnpack: ((Manifest) throws -> Void)? = nil) throws -> Manifest {
        let fileDamage = Damage(id: FileSystem.name(of: path), repository: path, hint: "export the snapshot again from its repository")
        func damaged(_ what: String) -> StoreOpsError {
            StoreOpsError(.badData, "\(path): \(what)", hint: "import only archives written by `storectl snapshot export`; export it again if it was damaged on the way")
        }
        var manifestData: Data?
        do {
            let first = try ArchiveReader(path: path)
            while let entry = try first.next() {
                try ProcessSignals.checkpoint("reading \(path)")
                guard entry.name == "manifest.json" else { try first.readData { _ in }; continue }
                var data = Data()
                try first.readData { chunk in
                    data.append(contentsOf: chunk)
                    if data.count > 16 << 20 { throw damaged("its manifest.json is larger than 16 MiB") }
                }
                manifestData = data
            }
        } catch let error as StoreOpsError where error.status == .badData || error.status == .failure {
            throw damaged("not a readable snapshot archive (\(error.message))")
        }
        guard let manifestData else { throw damaged("it has no manifest.json: it is not a snapshot archive") }
        guard let manifest = try? JSON.decoder().decode(Manifest.self, from: manifestData) else { throw damaged("its manifest.json is not a valid manifest") }
        guard manifest.kind == "snapshot", let facts = manifest.snapshot, SnapshotID.isPlausible(facts.id) else {
            throw damaged("its manifest describes a \(manifest.kind), not a snapshot with a valid id")
        }
        guard manifest.database.sha256 != nil, manifest.database.path.hasPrefix("store/"), manifest.database.path.count > 6 else {
            throw damaged("its manifest gives the database no checksum or no place under store/")
        }
        try beforeUnpack?(manifest)
        let check = Damage(id: facts.id, repository: path, hint: fileDamage.hint)
        let reader: ArchiveReader
        do { reader = try ArchiveReader(path: path) } catch let error as StoreOpsError { throw check.damaged(error.message) }
        let inner: Data
        do { inner = try unpack(reader, record: manifest, into: targets, check: check) } catch let error as StoreOpsError
            where error.status == .badData && !error.message.hasPrefix("snapshot \(facts.id)") {
            throw check.damaged(error.message)
        }
        guard inner == manifestData else { throw check.damaged("its manifest.json changed between two reads") }
        try checkDatabase(targets.database, of: manifest, level: level, check: check)
        return manifest
    }

    /// Every entry, checked before its data is read and then against the manifest as it is
    /// unpacked; returns the archive's own manifest.
    private static func unpack(_ reader: ArchiveReader, record: Manifest, into targets: Targets, check: Damage) throws -> Data {
        var expected: [String: Manifest.FileRecord] = [record.database.path: record.database]
        for file in record.externalData?.files ?? [] { expected[file.path] = file }
        let allowed = Set(expected.keys).union(["manifest.json"])
        var seen = Set<String>()
        var innerManifest: Data?
        while let entry = try reader.next() {
            try ProcessSignals.checkpoint("checking snapshot \(check.id)")
            if let problem = ArchiveEntryRules.problem(name: entry.name, fileType: entry.fileType, symlinkTarget: entry.symlinkTarget,
                                                       hardlinkTarget: entry.hardlinkTarget, expected: allowed) {
                throw StoreOpsError(.badData, "snapshot \(check.id): refusing an archive entry: \(problem); nothing was restored",
                                    hint: "this archive was not written by storectl or was tampered with")
            }
            guard seen.insert(entry.name.exactKey).inserted else { throw check.damaged("the archive holds \(entry.name) twice") }
            if entry.name == "manifest.json" {
                var data = Data()
                try reader.readData { chunk in
                    data.append(contentsOf: chunk)
                    if data.count > 16 << 20 { throw check.damaged("manifest.json is larger than 16 MiB") }
                }
                innerManifest = data
                continue
            }
            guard let file = expected[entry.name] else { throw check.damaged("an entry the manifest does not list: \(entry.name)") }
            try unpack(entry, of: file, reader: reader, isDatabase: entry.name == record.database.path, into: targets, check: check)
        }
        let missing = Set(expected.keys).subtracting(seen)
        guard missing.isEmpty else { throw check.damaged("the archive lacks \(missing.sorted().joined(separator: ", "))") }
        guard let innerManifest else { throw check.damaged("the archive has no manifest.json") }
        return innerManifest
    }

    /// One file: its size checked on the header (a size bomb of gigabytes of zeros where the
    /// manifest says megabytes is refused before a byte is written) and while streaming, its hash
    /// (the database's is checked after, alongside its integrity check).
    private static func unpack(_ entry: ArchiveReader.Entry, of file: Manifest.FileRecord, reader: ArchiveReader, isDatabase: Bool,
                               into targets: Targets, check: Damage) throws {
        if entry.size >= 0, UInt64(entry.size) != file.bytes {
            throw check.damaged("\(entry.name) is \(Format.count(entry.size)) bytes in the archive, the manifest says \(Format.count(file.bytes)); nothing was unpacked from it")
        }
        let destination: String? = isDatabase
            ? targets.database
            : targets.externalFolder.map { ($0 as NSString).appendingPathComponent(FileSystem.name(of: entry.name)) }
        let (bytes, sha) = try stream(reader, to: destination, creating: !isDatabase, hashing: !isDatabase, limit: file.bytes) {
            check.damaged("\(entry.name) holds more than the \(Format.count(file.bytes)) bytes the manifest says; reading stopped there")
        }
        guard bytes == file.bytes else { throw check.damaged("\(entry.name) is \(bytes) bytes, the manifest says \(file.bytes)") }
        if !isDatabase, sha != file.sha256 ?? "" {
            throw check.damaged("checksum mismatch in \(entry.name) (expected \((file.sha256 ?? "none").prefix(12))…, got \(sha.prefix(12))…)")
        }
    }

    /// The unpacked database: its SHA-256 against the manifest's and its integrity check, in parallel.
    /// The one restore-and-check step every restore, verification and rollback goes through.
    static func checkDatabase(_ database: String, of record: Manifest, level: VerifyLevel, check: Damage) throws {
        let (result, sha) = try inParallel({ try SnapshotVerify.checkDatabase(database, level: level) },
                                           { try Hashing.sha256(ofFile: database) })
        guard sha == record.database.sha256 ?? "" else {
            throw check.damaged("checksum mismatch in \(record.database.path) (expected \((record.database.sha256 ?? "none").prefix(12))…, got \(sha.prefix(12))…)")
        }
        guard result.ok else {
            throw StoreOpsError(.badData, "snapshot \(check.id): the database inside fails \(level == .full ? "integrity_check" : "quick_check"): \(result.messages.prefix(3).joined(separator: "; "))")
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
        let writeBehind = path.flatMap { WriteBehind(path: $0, pace: nil) }   // a restore writes at full speed
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
