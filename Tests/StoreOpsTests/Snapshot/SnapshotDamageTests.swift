import Foundation
import StoreLab
import StoreOps
import Testing

/// Damaged and hostile archives: verify reports exit 65 and what is wrong; restore refuses before
/// writing anything at the target; nothing valid is damaged.
@Suite("snapshots: damaged and hostile archives")
struct SnapshotDamageTests {
    /// Verifies and restores the fixture's snapshot, expecting both to find `problem`.
    func expectDamaged(_ fixture: SnapshotFixture, _ problem: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let outcomes = try SnapshotVerify.run(.init(repository: fixture.repo, ids: [fixture.created.id]))
        #expect(outcomes.first?.ok == false, sourceLocation: sourceLocation)
        #expect(outcomes.first?.problem?.contains(problem) == true, "\(outcomes.first?.problem ?? "no problem found")", sourceLocation: sourceLocation)
        let record = fixture.repository.lastVerification(fixture.created.id)
        #expect(record?.ok == false && record?.problem == outcomes.first?.problem, sourceLocation: sourceLocation)

        let target = fixture.folder.file("target/Tasks.sqlite")
        try? FileManager.default.createDirectory(atPath: fixture.folder.file("target"), withIntermediateDirectories: false)
        let error = #expect(throws: StoreOpsError.self, sourceLocation: sourceLocation) {
            try SnapshotRestore.run(.init(repository: fixture.repo, id: fixture.created.id, target: .file(target)))
        }
        #expect(error?.status == .badData, sourceLocation: sourceLocation)
        #expect(error?.message.contains(problem) == true, "\(error?.message ?? "")", sourceLocation: sourceLocation)
        #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.folder.file("target")).isEmpty,
                "nothing written at the target", sourceLocation: sourceLocation)
        // The store it came from is untouched and still listed snapshots are intact.
        #expect(try rowCount(fixture.store) == 2_000, sourceLocation: sourceLocation)
    }

    @Test func truncatedArchive() throws {
        let fixture = try SnapshotFixture()
        let data = try Data(contentsOf: URL(fileURLWithPath: fixture.archive))
        try data.prefix(data.count / 2).write(to: URL(fileURLWithPath: fixture.archive))
        try expectDamaged(fixture, "truncated or replaced")
    }

    @Test("a truncated archive whose catalog entry was made to agree: the decompressor finds the end missing")
    func truncatedArchiveConsistentCatalog() throws {
        let fixture = try SnapshotFixture()
        let data = try Data(contentsOf: URL(fileURLWithPath: fixture.archive))
        try fixture.replaceArchive(with: data.prefix(data.count * 2 / 3))
        try expectDamaged(fixture, "the archive is damaged")
    }

    @Test("a flipped byte anywhere: in the first block (found while opening), the middle, the end",
          arguments: [0.0, 0.1, 0.33, 0.5, 0.9, 1.0])
    func flippedByte(_ position: Double) throws {
        let fixture = try SnapshotFixture()
        var data = try Data(contentsOf: URL(fileURLWithPath: fixture.archive))
        data[min(data.count - 1, Int(Double(data.count) * position))] ^= 0x40
        try data.write(to: URL(fileURLWithPath: fixture.archive))
        try expectDamaged(fixture, "the archive is damaged")
    }

    @Test func missingArchive() throws {
        let fixture = try SnapshotFixture()
        unlink(fixture.archive)
        try expectDamaged(fixture, "is missing")
    }

    @Test("a manifest inside that does not match the catalog")
    func manifestMismatch() throws {
        let fixture = try SnapshotFixture()
        var entries = try fixture.entries()
        var inner = try JSON.decoder().decode(Manifest.self, from: { if case .file(let d) = entries.last!.kind { return d }; return Data() }())
        inner.snapshot?.tags = ["forged"]
        entries[entries.count - 1] = .init("manifest.json", .file(try JSON.encode(inner)))
        try fixture.rebuild(entries)
        try expectDamaged(fixture, "does not match the catalog entry")
    }

    @Test("a file whose content differs from its manifest checksum")
    func fileChecksumMismatch() throws {
        let fixture = try SnapshotFixture()
        var entries = try fixture.entries()
        let index = try #require(entries.firstIndex { $0.name == "store/Tasks.sqlite" })
        guard case .file(var data) = entries[index].kind else { return }
        data[data.count - 100] ^= 0x01
        entries[index] = .init("store/Tasks.sqlite", .file(data))
        try fixture.rebuild(entries)
        try expectDamaged(fixture, "checksum mismatch in store/Tasks.sqlite")
    }

    @Test("a file listed in the manifest is missing from the archive")
    func missingFile() throws {
        let fixture = try SnapshotFixture()
        var entries = try fixture.entries()
        let external = try #require(entries.firstIndex { $0.name.contains("_EXTERNAL_DATA") })
        entries.remove(at: external)
        try fixture.rebuild(entries)
        try expectDamaged(fixture, "the archive lacks")
    }

    @Test("hostile entries are refused before anything is written", arguments: [
        ("/tmp/storectl-owned", ArchiveFixture.Kind.file(Data("x".utf8)), "an absolute path"),
        ("store/../../escape.txt", .file(Data("x".utf8)), "a path with '..'"),
        ("store/Tasks.sqlite", .symlink("/etc/passwd"), "a symbolic link"),
        ("store/Tasks.sqlite", .hardlink("../../etc/passwd"), "a hard link"),
        ("store/dev", .characterDevice, "a device file"),
        ("store/pipe", .fifo, "a FIFO"),
        ("store/extra.sh", .file(Data("#!/bin/sh".utf8)), "the manifest does not list"),
    ] as [(String, ArchiveFixture.Kind, String)])
    func hostileEntry(_ name: String, _ kind: ArchiveFixture.Kind, _ problem: String) throws {
        let fixture = try SnapshotFixture()
        try fixture.rebuild([.init(name, kind)] + (try fixture.entries()))
        try expectDamaged(fixture, problem)
        #expect(!FileManager.default.fileExists(atPath: "/tmp/storectl-owned"))
        #expect(!FileManager.default.fileExists(atPath: fixture.folder.file("escape.txt")))
    }

    @Test("a corrupt catalog entry is listed as damaged and refused by id (65, naming the file); the rest of the repository works",
          arguments: ["{ not json", #"{"format":"storectl-manifest","formatVersion":99}"#])
    func corruptCatalog(_ content: String) throws {
        let fixture = try SnapshotFixture()
        let good = try SnapshotCreate.run(store: fixture.store, options: .init(repository: fixture.repo))
        try Data(content.utf8).write(to: URL(fileURLWithPath: fixture.catalogEntry))
        let listed = try SnapshotSummary.list(repository: fixture.repo)
        #expect(listed.map(\.id) == [good.id, fixture.created.id])
        #expect(listed.first { $0.id == fixture.created.id }?.damaged != nil)
        let error = #expect(throws: StoreOpsError.self) {
            try SnapshotRestore.run(.init(repository: fixture.repo, id: fixture.created.id, target: .file(fixture.folder.file("x.sqlite"))))
        }
        #expect(error?.status == .badData)
        #expect(error?.message.contains(fixture.catalogEntry) == true, "\(error?.message ?? "")")
        // A good id still restores; verify --all reports the damaged entry; prune never removes it.
        _ = try SnapshotRestore.run(.init(repository: fixture.repo, id: good.id, target: .file(fixture.folder.file("good.sqlite"))))
        let outcomes = try SnapshotVerify.run(.init(repository: fixture.repo, all: true))
        #expect(outcomes.map(\.ok) == [true, false])
        #expect(outcomes.last?.problem?.contains("catalog entry") == true)
        let pruned = try SnapshotPrune.run(.init(repository: fixture.repo, policy: .init(last: 1)))
        #expect(pruned.removed.isEmpty)
        #expect(pruned.damaged.map(\.id) == [fixture.created.id])
        #expect(FileManager.default.fileExists(atPath: fixture.catalogEntry))
    }

    @Test("a size bomb (256 MiB of zeros where the manifest says the database's size) is refused on the entry's header, nothing unpacked")
    func sizeBomb() throws {
        let fixture = try SnapshotFixture(items: 300)
        let database = try #require(fixture.created.record.database.path as String?)
        let entries = try fixture.entries().map { $0.name == database ? ArchiveFixture.Entry($0.name, .zeros(256 << 20)) : $0 }
        try fixture.rebuild(entries)
        let mount = TempMount(kilobytes: 8 << 10)
        let target = (mount?.path ?? fixture.folder.path) + "/restored.sqlite"
        let started = Date()
        let error = #expect(throws: StoreOpsError.self) {
            try SnapshotRestore.run(.init(repository: fixture.repo, id: fixture.created.id, target: .file(target)))
        }
        #expect(error?.status == .badData, "\(error?.description ?? "")")
        #expect(error?.message.contains("268,435,456 bytes in the archive, the manifest says") == true, "\(error?.message ?? "")")
        #expect(Date().timeIntervalSince(started) < 5)
        #expect(!FileManager.default.fileExists(atPath: target))
        if let mount { #expect(try FileManager.default.contentsOfDirectory(atPath: mount.path).isEmpty) }
        let verified = try SnapshotVerify.run(.init(repository: fixture.repo, ids: [fixture.created.id], scratch: mount?.path))
        #expect(verified.first?.ok == false && verified.first?.problem?.contains("the manifest says") == true)
    }

    @Test("restore refuses an existing target (73) and an unwritable folder (73)", .enabled(if: TempMount.isAvailable || getuid() != 0))
    func unwritableTargets() throws {
        let fixture = try SnapshotFixture()
        #expect((#expect(throws: StoreOpsError.self) {
            try SnapshotRestore.run(.init(repository: fixture.repo, id: fixture.created.id, target: .file(fixture.store)))
        })?.status == .cannotCreate)
        if let mount = TempMount(kilobytes: 1024, readOnly: true) {
            #expect((#expect(throws: StoreOpsError.self) {
                try SnapshotRestore.run(.init(repository: fixture.repo, id: fixture.created.id, target: .file(mount.file("x.sqlite"))))
            })?.status == .cannotCreate)
        }
    }
}

@Suite("snapshots: restore in place")
struct SnapshotRestoreInPlaceTests {
    /// The app goes on writing and dies (SIGKILL) with committed frames still in its -wal.
    func appDiesMidWrite(_ fixture: SnapshotFixture) throws {
        let ready = fixture.folder.file("ready")
        let writer = try ChildProcess.Running(Binaries.lab, ["writer", fixture.store, "--interval-ms", "1", "--ready-file", ready])
        #expect(ChildProcess.waitFor(file: ready))
        usleep(300_000)
        writer.signal(SIGKILL)
        _ = writer.wait()
    }

    @Test("a safety snapshot first, stale -wal/-shm removed, content equal to the snapshot")
    func inPlace() throws {
        let fixture = try SnapshotFixture()
        let expected = try logicalDigest(fixture.store)
        try appDiesMidWrite(fixture)
        let store = StoreFile(unchecked: fixture.store)
        #expect((FileSystem.size(of: store.walPath) ?? 0) > 0, "the killed writer left a -wal")
        let changed = try logicalDigest(fixture.store)
        #expect(changed != expected)

        let result = try SnapshotRestore.run(.init(repository: fixture.repo, id: fixture.created.id, target: .inPlace(fixture.store)))
        #expect(result.removedSidecars.contains(store.walPath))
        #expect(!FileManager.default.fileExists(atPath: store.walPath))
        #expect(try logicalDigest(fixture.store) == expected, "the old -wal was not replayed onto the restored file")
        // The safety snapshot holds the state before the restore, -wal content included.
        let safety = try #require(result.safetySnapshot)
        #expect(try fixture.repository.record(safety).snapshot?.tags == ["pre-restore"])
        let before = fixture.folder.file("before.sqlite")
        _ = try SnapshotRestore.run(.init(repository: fixture.repo, id: safety, target: .file(before)))
        #expect(try logicalDigest(before) == changed)
    }

    @Test("a -wal left without its store (a run died between its renames): moved aside, neither deleted nor replayed")
    func orphanedSidecars() throws {
        let fixture = try SnapshotFixture()
        let expected = try logicalDigest(fixture.store)
        try appDiesMidWrite(fixture)
        let store = StoreFile(unchecked: fixture.store)
        let wal = try Hashing.sha256(ofFile: store.walPath)
        try FileSystem.rename(store.path, store.path + ".gone", point: "test.rename")

        #expect((#expect(throws: StoreOpsError.self) {
            try SnapshotRestore.run(.init(repository: fixture.repo, id: fixture.created.id, target: .inPlace(fixture.store)))
        })?.status == .noInput, "no store there: refused unless --create")
        var options = SnapshotRestore.Options(repository: fixture.repo, id: fixture.created.id, target: .inPlace(fixture.store))
        options.create = true
        let result = try SnapshotRestore.run(options)
        #expect(result.removedSidecars.isEmpty)
        let aside = try #require(result.movedAside.first { $0.hasSuffix("-wal") })
        #expect(aside.hasPrefix(store.path + ".orphaned-"))
        #expect(try Hashing.sha256(ofFile: aside) == wal)
        #expect(!FileManager.default.fileExists(atPath: store.walPath))
        #expect(try logicalDigest(fixture.store) == expected)
    }

    @Test("refused (75) while another process has the store open, unless --force; nothing changed")
    func refusedWhileOpen() throws {
        let fixture = try SnapshotFixture()
        let ready = fixture.folder.file("held")
        let holder = try ChildProcess.Running(Binaries.lab, ["hold", fixture.store, "--mode", "read", "--seconds", "30", "--ready-file", ready])
        defer { holder.signal(SIGTERM); _ = holder.wait() }
        #expect(ChildProcess.waitFor(file: ready))
        let before = try Hashing.sha256(ofFile: fixture.store)
        let error = #expect(throws: StoreOpsError.self) {
            try SnapshotRestore.run(.init(repository: fixture.repo, id: fixture.created.id, target: .inPlace(fixture.store)))
        }
        #expect(error?.status == .busy)
        #expect(error?.message.contains("pid \(holder.pid)") == true)
        #expect(try Hashing.sha256(ofFile: fixture.store) == before)
        #expect(try SnapshotSummary.list(repository: fixture.repo).count == 1, "no safety snapshot was taken")
    }

    @Test("the external-data folder becomes the snapshot's; owner and mode of the store are kept")
    func externalDataAndOwnership() throws {
        let fixture = try SnapshotFixture(externalFiles: 2)
        let store = StoreFile(unchecked: fixture.store)
        _ = FileManager.default.createFile(atPath: (store.externalDataPath as NSString).appendingPathComponent("added-later"), contents: Data([7]))
        chmod(store.path, 0o640)
        if getuid() == 0 { chown(store.path, 65534, 65534) }
        _ = try SnapshotRestore.run(.init(repository: fixture.repo, id: fixture.created.id, target: .inPlace(store.path)))
        #expect(try FileManager.default.contentsOfDirectory(atPath: store.externalDataPath).count == 2)
        #expect(permissions(store.path) == 0o640)
        if getuid() == 0 {
            let owner = try FileManager.default.attributesOfItem(atPath: store.path)[.ownerAccountID] as? Int
            #expect(owner == 65534)
        }
        #expect(leftovers(store.folder).isEmpty)
    }

    @Test("a damaged current store: refused without --force; with it, moved aside (never deleted)")
    func damagedCurrentStore() throws {
        let fixture = try SnapshotFixture()
        let handle = try #require(FileHandle(forWritingAtPath: fixture.store))
        try handle.seek(toOffset: 8 * 4096)
        handle.write(Data(repeating: 0xEE, count: 8 * 4096))
        try handle.close()
        let error = #expect(throws: StoreOpsError.self) {
            try SnapshotRestore.run(.init(repository: fixture.repo, id: fixture.created.id, target: .inPlace(fixture.store)))
        }
        #expect(error?.status == .badData)
        #expect(error?.hint?.contains("--force") == true)
        let result = try SnapshotRestore.run(.init(repository: fixture.repo, id: fixture.created.id, target: .inPlace(fixture.store), force: true))
        #expect(result.safetySnapshot == nil)
        let aside = try #require(result.movedAside.first)
        #expect(FileManager.default.fileExists(atPath: aside))
        #expect(try rowCount(fixture.store) == 2_000)
    }
}
