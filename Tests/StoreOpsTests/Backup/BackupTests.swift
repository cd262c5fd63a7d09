import Foundation
import GRDB
import GRDBSQLite
import StoreLab
import StoreOps
import Testing

@Suite("backup: consistent copies of live stores")
struct BackupTests {
    @Test("a WAL store's newest commits, present only in its -wal, are in the copy")
    func walOnlyCommitsAreCopied() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 1_000)
        // An app connection that never checkpoints: the new rows live only in the -wal.
        var config = Configuration()
        config.prepareDatabase { db in try db.execute(sql: "PRAGMA wal_autocheckpoint = 0") }
        let app = try DatabaseQueue(path: store, configuration: config)
        try app.write { db in
            for pk in 5_001...5_500 {
                try db.execute(sql: "INSERT INTO ZITEM (Z_PK, Z_ENT, Z_OPT, ZTITLE) VALUES (?, 3, 1, 'wal only')", arguments: [pk])
            }
        }
        // The main file alone does not have them.
        let mainOnly = folder.file("main-only.sqlite")
        try FileManager.default.copyItem(atPath: store, toPath: mainOnly)
        #expect(try rowCount(mainOnly) == 1_000)
        #expect((FileSystem.size(of: store + "-wal") ?? 0) > 0)

        let result = try Backup.run(source: store, options: .init(output: folder.file("copy.sqlite")))
        #expect(try rowCount(result.path) == 1_500)
        #expect(result.restarts == 0)
        try app.close()
    }

    @Test("a copy is one self-contained private file with a manifest that matches it")
    func copyIsSelfContainedAndDescribed() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        let output = folder.file("backup.sqlite")
        let result = try Backup.run(source: store, options: .init(output: output))

        let header = try #require(FileManager.default.contents(atPath: output))
        #expect(header[18] == 1 && header[19] == 1, "journal_mode=DELETE in the header")
        #expect(!FileManager.default.fileExists(atPath: output + "-wal"))
        #expect(!FileManager.default.fileExists(atPath: output + "-shm"))
        #expect(permissions(output) == 0o600)
        #expect(permissions(result.manifestPath) == 0o600)
        #expect(result.manifestPath == folder.file("backup.manifest.json"))

        let manifest = try JSON.decoder().decode(Manifest.self, from: try Data(contentsOf: URL(fileURLWithPath: result.manifestPath)))
        #expect(try JSON.encode(manifest) == (try JSON.encode(result.manifest)))
        #expect(manifest.database.sha256 == (try Hashing.sha256(ofFile: output)))
        #expect(manifest.database.bytes == FileSystem.size(of: output))
        #expect(manifest.source.journalMode == "wal")
        #expect(manifest.source.path == store)
        #expect(manifest.verify.level == .quick && manifest.verify.ok && manifest.verify.messages == ["ok"])
        #expect(manifest.tool.sqliteVersion == StoreConnection.sqliteVersion)
        let coreData = try #require(manifest.coreData)
        #expect(coreData.entityCounts["Task"]! + coreData.entityCounts["Note"]! == 2_000)
        #expect(coreData.entityCounts["Category"] == 50)
        #expect(coreData.metadata.modelVersionHashes.count == SampleModel.entities.count)
        #expect(coreData.metadata.frameworkVersion == 1447)
        #expect(try logicalDigest(output) == (try logicalDigest(store)))
        #expect(leftovers(folder.path).isEmpty)
    }

    @Test("a copy made while another process commits every 2 ms is the store at one moment")
    func copyWhileAnotherProcessWrites() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 40_000)
        let ready = folder.file("writer.ready")
        let writer = try ChildProcess.Running(Binaries.lab, ["writer", store, "--interval-ms", "2", "--ready-file", ready])
        defer { writer.signal(SIGTERM); _ = writer.wait() }
        #expect(ChildProcess.waitFor(file: ready))
        usleep(100_000)

        let before = try rowCount(store)
        let result = try Backup.run(source: store, options: .init(output: folder.file("copy.sqlite"), verify: .full))
        let after = try rowCount(store)
        let copied = try rowCount(result.path)

        #expect(before <= copied && copied <= after, "copy \(copied) between \(before) and \(after)")
        #expect(after > before, "the writer kept committing during the copy")
        #expect(result.restarts == 0)
        #expect(result.manifest.verify.ok)
        // The copy is internally consistent: Z_MAX follows the rows the writer inserted.
        let zMax = try readStore(result.path) { try Int.fetchOne($0, sql: "SELECT Z_MAX FROM Z_PRIMARYKEY WHERE Z_ENT = 2") }
        #expect(zMax == (try readStore(result.path) { try Int.fetchOne($0, sql: "SELECT max(Z_PK) FROM ZITEM") }))
    }

    @Test("under a writer committing every 2 ms, stepping without a held read transaction keeps restarting; storectl finishes without one")
    func finishesWhereTheShellBackupLivelocks() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 120_000)
        let ready = folder.file("writer.ready")
        let writer = try ChildProcess.Running(Binaries.lab, ["writer", store, "--interval-ms", "2", "--ready-file", ready])
        defer { writer.signal(SIGTERM); _ = writer.wait() }
        #expect(ChildProcess.waitFor(file: ready))

        // What the sqlite3 shell's .backup does: 100 pages per step, no read transaction held.
        // Every commit between two steps restarts it (on the 1 GiB benchmark store it never
        // finishes; on this small store a starved writer can leave it a gap, so only the restarts
        // are asserted here).
        let naive = try naiveBackup(store, to: folder.file("naive.sqlite"), pagesPerStep: 100, giveUpAfter: 3)
        #expect(naive.restarts > 0, "\(naive)")

        let started = Date()
        let result = try Backup.run(source: store, options: .init(output: folder.file("storectl.sqlite")))
        #expect(Date().timeIntervalSince(started) < 10)
        #expect(result.restarts == 0)
        #expect(result.manifest.verify.ok)
    }

    @Test("rollback-journal mode: the copy finishes under a writer, taking the lock in short steps")
    func rollbackJournalModeUnderAWriter() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 20_000, journalMode: "delete")
        let ready = folder.file("writer.ready")
        let writer = try ChildProcess.Running(Binaries.lab, ["writer", store, "--interval-ms", "5", "--ready-file", ready])
        #expect(ChildProcess.waitFor(file: ready))
        let before = try rowCount(store)
        let result = try Backup.run(source: store, options: .init(output: folder.file("copy.sqlite"), timeout: 30))
        let after = try rowCount(store)
        writer.signal(SIGTERM)
        let stats = try JSONDecoder().decode(WriteLoad.Stats.self, from: Data(writer.wait().stdout.utf8))

        let copied = try rowCount(result.path)
        #expect(before <= copied && copied <= after)
        #expect(result.manifest.source.journalMode == "delete")
        #expect(result.manifest.verify.ok)
        #expect(stats.errors == 0, "the writer never failed: \(stats.lastError ?? "")")
    }

    @Test("an existing folder as output gets <stem>-<UTC timestamp>.sqlite and its manifest")
    func folderOutputIsNamedByTime() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        let backups = folder.file("backups")
        try FileManager.default.createDirectory(atPath: backups, withIntermediateDirectories: false)
        let result = try Backup.run(source: store, options: .init(output: backups))
        let name = FileSystem.name(of: result.path)
        #expect(name.range(of: #"^Tasks-\d{8}T\d{6}Z\.sqlite$"#, options: .regularExpression) != nil, "\(name)")
        #expect(FileSystem.name(of: result.manifestPath) == name.replacingOccurrences(of: ".sqlite", with: ".manifest.json"))
        #expect(Set(try FileManager.default.contentsOfDirectory(atPath: backups)) == [name, FileSystem.name(of: result.manifestPath)])
    }

    @Test("an existing output is refused (73) unless --force, and then replaced")
    func existingOutput() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        let output = folder.file("copy.sqlite")
        try Data("precious".utf8).write(to: URL(fileURLWithPath: output))
        let error = #expect(throws: StoreOpsError.self) { try Backup.run(source: store, options: .init(output: output)) }
        #expect(error?.status == .cannotCreate)
        #expect(try String(contentsOfFile: output, encoding: .utf8) == "precious")

        _ = try Backup.run(source: store, options: .init(output: output, overwrite: true))
        #expect(try rowCount(output) == 2_000)
        #expect(leftovers(folder.path).isEmpty)
    }

    @Test("Core Data external binary data is copied along and listed with checksums")
    func externalDataIsCopied() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, externalFiles: 3)
        let out = folder.file("out")
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: false)
        let result = try Backup.run(source: store, options: .init(output: out))
        let external = try #require(result.manifest.externalData)
        #expect(external.files.count == 3)
        let stem = (FileSystem.name(of: result.path) as NSString).deletingPathExtension
        #expect(external.folder == ".\(stem)_SUPPORT/_EXTERNAL_DATA")
        for file in external.files {
            let copied = (out as NSString).appendingPathComponent(file.path)
            #expect(try Hashing.sha256(ofFile: copied) == file.sha256)
            #expect(permissions(copied) == 0o600)
            let original = (StoreFile(unchecked: store).externalDataPath as NSString).appendingPathComponent(FileSystem.name(of: file.path))
            #expect(try Hashing.sha256(ofFile: original) == file.sha256)
        }
        #expect(leftovers(out).isEmpty)
    }

    @Test("the source is never changed: same bytes, no journal-mode change, no tables added")
    func sourceIsUntouched() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        let before = try Hashing.sha256(ofFile: store)
        let tablesBefore = try readStore(store) { try String.fetchAll($0, sql: "SELECT name FROM sqlite_master ORDER BY name") }
        _ = try Backup.run(source: store, options: .init(output: folder.file("copy.sqlite"), verify: .full))
        #expect(try Hashing.sha256(ofFile: store) == before)
        #expect(try readStore(store) { try String.fetchAll($0, sql: "SELECT name FROM sqlite_master ORDER BY name") } == tablesBefore)
        #expect(try readStore(store) { try String.fetchOne($0, sql: "PRAGMA journal_mode") } == "wal")
    }

    @Test("progress is reported with pages done out of the total", arguments: [VerifyLevel.quick, .full, .none])
    func progressAndVerifyLevels(_ level: VerifyLevel) throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 20_000)
        var updates: [ProgressUpdate] = []
        let result = try Backup.run(source: store, options: .init(output: folder.file("copy.sqlite"), verify: level)) { if case .step(let update) = $0 { updates.append(update) } }
        #expect(!updates.isEmpty)
        #expect(updates.last?.done == updates.last?.total)
        #expect(updates.last?.total == UInt64(result.manifest.source.pageCount))
        #expect(result.manifest.verify.level == level)
        #expect(result.manifest.verify.ok)
    }

    /// The shell's `.backup` loop: step, and on a restart keep going; give up after `seconds`.
    func naiveBackup(_ source: String, to destination: String, pagesPerStep: Int32, giveUpAfter seconds: Double) throws -> (finished: Bool, restarts: Int, steps: Int) {
        var src: OpaquePointer?
        var dst: OpaquePointer?
        guard sqlite3_open_v2(source, &src, SQLITE_OPEN_READONLY, nil) == SQLITE_OK,
              sqlite3_open(destination, &dst) == SQLITE_OK else { throw StoreOpsError(.failure, "open failed") }
        defer { sqlite3_close(src); sqlite3_close(dst) }
        let backup = sqlite3_backup_init(dst, "main", src, "main")
        defer { sqlite3_backup_finish(backup) }
        var restarts = 0
        var steps = 0
        var copiedBefore: Int32 = 0
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let rc = sqlite3_backup_step(backup, pagesPerStep)
            steps += 1
            if rc == SQLITE_DONE { return (true, restarts, steps) }
            if rc == SQLITE_BUSY || rc == SQLITE_LOCKED { usleep(100_000); continue }
            let copied = sqlite3_backup_pagecount(backup) - sqlite3_backup_remaining(backup)
            if copied <= copiedBefore { restarts += 1 }
            copiedBefore = copied
        }
        return (false, restarts, steps)
    }
}
