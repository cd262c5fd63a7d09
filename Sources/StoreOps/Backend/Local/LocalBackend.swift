import Foundation

/// A repository in a local folder: each object one file, mode 0600, folders 0700.
public struct LocalBackend: RepositoryBackend {
    public let root: String
    public var location: String { root }

    public init(root: String) { self.root = FileSystem.absolute(root) }

    func path(_ key: String) -> String { (root as NSString).appendingPathComponent(key) }

    public func read(_ key: String) throws -> Data? { try readFile(path(key)) }

    /// A whole file, or nil when it does not exist.
    private func readFile(_ file: String) throws -> Data? {
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw StoreOpsError.posix(errno, doing: "reading \(file)", side: .input)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw StoreOpsError.posix(errno, doing: "reading \(file)", side: .input) }
        guard info.st_size < 1 << 31 else {
            throw StoreOpsError(.badData, "\(file) is \(Format.bytes(UInt64(info.st_size))), larger than any object storectl writes")
        }
        return try readExactly(fd, file: file, offset: 0, length: Int(info.st_size))
    }

    public func read(_ key: String, offset: UInt64, length: Int) throws -> Data {
        guard length > 0 else { return Data() }
        return try withOpenObject(key) { fd, file in try readExactly(fd, file: file, offset: offset, length: length) }
    }

    /// `body(fd, file)` with the object open for a ranged read: 65 when it is missing.
    private func withOpenObject<R>(_ key: String, _ body: (Int32, String) throws -> R) throws -> R {
        let file = path(key)
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { throw StoreOpsError(.badData, "\(file) is missing", hint: Sealer.damagedHint) }
            throw StoreOpsError.posix(errno, doing: "reading \(file)", side: .input)
        }
        defer { close(fd) }
        return try body(fd, file)
    }

    /// Read into `buffer`'s memory: a reader going through a pack's frames (a restore, a diff)
    /// reads hundreds of megabytes, and fresh memory for each range cost page faults and
    /// zeroing (0.1 s of CPU on a diff of two snapshots of a 1 GiB store).
    public func withRange<R>(_ key: String, offset: UInt64, length: Int, reusing buffer: ReadBuffer, _ body: (Data) throws -> R) throws -> R {
        guard length > 0 else { return try body(Data()) }
        let memory = buffer.reserve(length)
        try withOpenObject(key) { fd, file in try Self.readExactly(fd, into: memory, file: file, offset: offset) }
        guard let base = memory.baseAddress else { return try body(Data()) }
        return try body(Data(bytesNoCopy: base, count: length, deallocator: .none))
    }

    private func readExactly(_ fd: Int32, file: String, offset: UInt64, length: Int) throws -> Data {
        var data = Data(count: length)
        try data.withUnsafeMutableBytes { try Self.readExactly(fd, into: $0, file: file, offset: offset) }
        return data
    }

    private static func readExactly(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, file: String, offset: UInt64) throws {
        let length = buffer.count
        guard length > 0, let base = buffer.baseAddress else { return }
        var done = 0
        while done < length {
            let n = pread(fd, base + done, length - done, off_t(offset) + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                throw StoreOpsError.posix(errno, doing: "reading \(file)", side: .input)
            }
            if n == 0 {
                throw StoreOpsError(.badData, "\(file) is damaged: it ends at byte \(offset + UInt64(done)), \(length - done) bytes short of what its index says",
                                    hint: Sealer.damagedHint)
            }
            done += n
        }
    }

    public func size(_ key: String) throws -> UInt64? {
        FileSystem.kind(of: path(key)) == .file ? FileSystem.size(of: path(key)) : nil
    }

    /// Four objects at once: a pack's write costs little CPU but two fsyncs (the file, its
    /// folder), and overlapping them is what keeps a first snapshot from waiting on the disk.
    public var parallelTransfers: Int { 4 }

    public func write(_ key: String, _ data: Data, point: String) throws {
        try stage(key, data, point: point).commit()
    }

    /// Writes the temp file now (the bytes go to the page cache); fsync, rename and the folder's
    /// fsync happen at `commit`.
    public func stage(_ key: String, _ data: Data, point: String) throws -> StagedWrite {
        let final = path(key)
        let folder = FileSystem.parent(of: final)
        if FileSystem.kind(of: folder) == .missing {
            // Every missing folder from the outermost down (`points/<store>/<chain>/` has two
            // levels), each made durable in its parent before the next.
            var missing: [String] = []
            var at = folder
            while FileSystem.kind(of: at) == .missing, at.count > root.count {
                missing.append(at)
                at = FileSystem.parent(of: at)
            }
            for created in missing.reversed() {
                try FileSystem.makeDirectory(created, existingOK: true, point: "\(point).folder")
                try FileSystem.sync(FileSystem.parent(of: created), directory: true, point: "\(point).folder-sync")
            }
        } else {
            // The same points either way: whether `data/<xx>` exists depends on a pack's (random)
            // id, and a crash test kills a second run at the points a first one listed.
            FaultInjection.reach("\(point).folder")
            FaultInjection.reach("\(point).folder-sync")
        }
        let file = try PendingFile(finalPath: final, label: point)
        try file.write(data, paced: data.count >= 1 << 20)
        if RepositoryKeyRules.isReplaceable(key) { return StagedWrite { try file.commit(replacing: true) } }
        return StagedWrite { try commitOnce(file, key: key, point: point) }
    }

    /// An immutable key: renamed into place only when absent (atomically: renameat2's
    /// RENAME_NOREPLACE, or link(2)). When it exists, the same bytes are success (the temp file
    /// goes, the same fault points are reached) and other bytes are 65, the object unchanged.
    private func commitOnce(_ file: PendingFile, key: String, point: String) throws {
        do {
            try file.commit(replacing: false)
        } catch let error as StoreOpsError where error.status == .cannotCreate && FileSystem.kind(of: path(key)) == .file {
            let same = try readFile(path(key)) == readFile(file.tempPath)
            file.discard()
            guard same else { throw RepositoryKeyRules.conflict(describe(key)) }
            // The object may be a killed writer's whose rename was never made durable: the
            // folder's fsync makes it so before anything that refers to it is written.
            FaultInjection.reach("\(point).rename")
            try FileSystem.sync(FileSystem.parent(of: path(key)), directory: true, point: "\(point).sync-folder")
        }
    }

    public func remove(_ key: String, point: String) throws {
        let file = path(key)
        guard FileSystem.kind(of: file) != .missing else { return }
        try FileSystem.removeFile(file, point: point)
        try FileSystem.sync(FileSystem.parent(of: file), directory: true, point: "\(point).sync")
    }

    public func list(_ prefix: String) throws -> [(key: String, size: UInt64)] {
        var out: [(key: String, size: UInt64)] = []
        func walk(_ relative: String, depth: Int) throws {
            let folder = path(relative)
            guard FileSystem.kind(of: folder) == .directory else { return }
            let names: [String]
            do { names = try FileManager.default.contentsOfDirectory(atPath: folder) } catch {
                throw StoreOpsError(.ioError, "cannot list \(folder): \(error.localizedDescription)")
            }
            for name in names.sorted() where !name.hasPrefix(".") {
                let key = relative.isEmpty ? name : "\(relative)/\(name)"
                switch FileSystem.kind(of: path(key)) {
                case .directory where depth < 2: try walk(key, depth: depth + 1)
                case .file: out.append((key, FileSystem.size(of: path(key)) ?? 0))
                default: break
                }
            }
        }
        let folder = prefix.hasSuffix("/") ? String(prefix.dropLast()) : prefix
        try walk(folder, depth: 0)
        return out
    }

    public func prepare() throws {
        for folder in ["keys", "data", "index", "snapshots", "locks", "verified"] {
            try FileSystem.makeDirectory(path(folder), existingOK: true, point: "repo.init.folder")
        }
        try FileSystem.sync(root, directory: true, point: "repo.init.folder-sync")
    }

    /// Temp files whose writer is dead, whoever else holds the repository (`alone` is not needed:
    /// a temp file names its process).
    public func removeAbandoned(alone: Bool) throws -> [String] { removeStale() }

    public func removeStale() -> [String] {
        var removed = PendingFile.removeStale(in: root)
        for folder in ["keys", "index", "snapshots", "locks", "verified"] { removed += PendingFile.removeStale(in: path(folder)) }
        let data = path("data")
        for name in ((try? FileManager.default.contentsOfDirectory(atPath: data)) ?? []) {
            removed += PendingFile.removeStale(in: (data as NSString).appendingPathComponent(name))
        }
        // points/<store>/<chain>/
        let points = path("points")
        for store in ((try? FileManager.default.contentsOfDirectory(atPath: points)) ?? []) {
            let storeFolder = (points as NSString).appendingPathComponent(store)
            removed += PendingFile.removeStale(in: storeFolder)
            for chain in ((try? FileManager.default.contentsOfDirectory(atPath: storeFolder)) ?? []) {
                removed += PendingFile.removeStale(in: (storeFolder as NSString).appendingPathComponent(chain))
            }
        }
        return removed
    }
}
