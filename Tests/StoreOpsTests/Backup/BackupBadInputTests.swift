import Foundation
import StoreLab
import StoreOps
import Testing

/// Every bad input: a clear message, the documented exit status, the source untouched, no file left.
@Suite("backup: bad input")
struct BackupBadInputTests {
    /// Runs a backup expected to fail; checks the status, the source bytes and the output folder.
    func expectFailure(_ status: StoreOps.ExitStatus, source: String, output: String, timeout: TimeInterval = 60,
                       checkFreeSpace: Bool = true, mentions: String? = nil,
                       sourceLocation: SourceLocation = #_sourceLocation) throws {
        let sourceBefore = FileSystem.kind(of: source) == .file ? try? Hashing.sha256(ofFile: source) : nil
        let outputFolder = FileSystem.kind(of: output) == .directory ? output : FileSystem.parent(of: output)
        let outputBefore = (try? FileManager.default.contentsOfDirectory(atPath: outputFolder)) ?? []
        var options = Backup.Options(output: output, timeout: timeout)
        options.checkFreeSpace = checkFreeSpace
        let error = #expect(throws: StoreOpsError.self, sourceLocation: sourceLocation) {
            try Backup.run(source: source, options: options)
        }
        #expect(error?.status == status, "\(error?.description ?? "no error")", sourceLocation: sourceLocation)
        if let mentions {
            #expect(error?.message.contains(mentions) == true, "\(error?.message ?? "") should mention \(mentions)", sourceLocation: sourceLocation)
        }
        if let sourceBefore {
            #expect(try Hashing.sha256(ofFile: source) == sourceBefore, "the source changed", sourceLocation: sourceLocation)
        }
        // The store's job lock sidecar (backups take it shared) is not something the backup left.
        let outputAfter = ((try? FileManager.default.contentsOfDirectory(atPath: outputFolder)) ?? []).filter { !$0.hasSuffix(".storectl-lock") }
        #expect(Set(outputAfter).subtracting(outputBefore).isEmpty, "left behind: \(Set(outputAfter).subtracting(outputBefore))",
                sourceLocation: sourceLocation)
    }

    @Test("a missing source: 66") func missingSource() throws {
        let folder = try TempFolder()
        try expectFailure(.noInput, source: folder.file("nope.sqlite"), output: folder.file("out.sqlite"), mentions: "no such file")
    }

    @Test("a folder as source: 66") func folderSource() throws {
        let folder = try TempFolder()
        try expectFailure(.noInput, source: folder.path, output: folder.file("out.sqlite"), mentions: "is a folder")
    }

    @Test("a file that is not SQLite: 65") func notSQLite() throws {
        let folder = try TempFolder()
        let path = folder.file("notes.txt")
        try Data(String(repeating: "just some text\n", count: 100).utf8).write(to: URL(fileURLWithPath: path))
        try expectFailure(.badData, source: path, output: folder.file("out.sqlite"), mentions: "not a SQLite database")
    }

    @Test("a file shorter than the SQLite header: 65") func shorterThanHeader() throws {
        let folder = try TempFolder()
        let path = folder.file("short.sqlite")
        try Data("SQLite format 3\0abc".utf8).write(to: URL(fileURLWithPath: path))
        try expectFailure(.badData, source: path, output: folder.file("out.sqlite"), mentions: "truncated")
    }

    @Test("a truncated store: 65, the copy fails verification and is removed") func truncatedStore() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 5_000, journalMode: "delete")
        let size = try #require(FileSystem.size(of: store))
        #expect(truncate(store, off_t(size / 2)) == 0)
        try expectFailure(.badData, source: store, output: folder.file("out.sqlite"))
    }

    @Test("a store with corrupted pages: 65") func corruptStore() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 5_000, journalMode: "delete")
        // Overwrite the middle of the file (b-tree pages of ZITEM) with garbage.
        let handle = try #require(FileHandle(forWritingAtPath: store))
        try handle.seek(toOffset: UInt64(8 * 4096))
        handle.write(Data(repeating: 0xEE, count: 6 * 4096))
        try handle.close()
        try expectFailure(.badData, source: store, output: folder.file("out.sqlite"))
    }

    @Test("an output folder that does not exist: 73") func missingOutputFolder() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        try expectFailure(.cannotCreate, source: store, output: folder.file("no/such/folder/out.sqlite"), mentions: "does not exist")
    }

    @Test("an output folder that is not writable: 73", .enabled(if: TempMount.isAvailable || getuid() != 0))
    func readOnlyOutputFolder() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        if getuid() == 0 {
            // root ignores permission bits; a read-only file system stops it.
            let mount = try #require(TempMount(kilobytes: 1024, readOnly: true))
            try expectFailure(.cannotCreate, source: store, output: mount.file("out.sqlite"), mentions: "not writable")
        } else {
            let locked = folder.file("locked")
            try FileManager.default.createDirectory(atPath: locked, withIntermediateDirectories: false)
            chmod(locked, 0o555)
            defer { chmod(locked, 0o755) }
            try expectFailure(.cannotCreate, source: store, output: (locked as NSString).appendingPathComponent("out.sqlite"), mentions: "not writable")
        }
    }

    @Test("the output is the source itself: 64") func outputIsSource() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        try expectFailure(.usage, source: store, output: store, mentions: "the source store itself")
        // Through another path to the same file.
        try expectFailure(.usage, source: store, output: folder.path + "/./Tasks.sqlite", mentions: "the source store itself")
    }

    @Test("not enough space on the destination (a 1 MiB tmpfs): 74 before anything is written", .enabled(if: TempMount.isAvailable))
    func notEnoughSpace() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 10_000)
        let mount = try #require(TempMount(kilobytes: 1024))
        try expectFailure(.ioError, source: store, output: mount.file("out.sqlite"), mentions: "not enough space")
        #expect((try FileManager.default.contentsOfDirectory(atPath: mount.path)).isEmpty)
    }

    @Test("the disk fills up in the middle of the copy: 74, the partial copy is removed", .enabled(if: TempMount.isAvailable))
    func diskFullMidCopy() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 10_000)
        let mount = try #require(TempMount(kilobytes: 1024))
        try expectFailure(.ioError, source: store, output: mount.file("out.sqlite"), checkFreeSpace: false, mentions: "no space left")
        #expect((try FileManager.default.contentsOfDirectory(atPath: mount.path)).isEmpty)
    }

    @Test("rollback mode, a long write transaction holds the store: 75 after --timeout")
    func lockedByLongWriteTransaction() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, journalMode: "delete")
        let ready = folder.file("held")
        let holder = try ChildProcess.Running(Binaries.lab, ["hold", store, "--mode", "exclusive", "--seconds", "30", "--ready-file", ready])
        defer { holder.signal(SIGTERM); _ = holder.wait() }
        #expect(ChildProcess.waitFor(file: ready))
        let started = Date()
        try expectFailure(.busy, source: store, output: folder.file("out.sqlite"), timeout: 1, mentions: "locked")
        #expect(Date().timeIntervalSince(started) < 10)
    }
}
