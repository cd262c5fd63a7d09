import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

/// The swap's recovery beyond a plain kill: files that vanished, and an app that opened the store
/// before anyone recovered it.
@Suite("store swap: recovery when the world changed after the crash", .onTestThreads)
struct StoreSwapTests {
    @Test("a staged file gone before recovery: the swap is undone, the old store comes back exactly")
    func undo() throws {
        let fixture = try Scenarios.storeWithSnapshot()
        try fixture.walCommits(120)
        let before = try fixture.digest()
        let killed = try fixture.run(["snapshot", "restore", "--repo", fixture.repo, fixture.snapshot, "--in-place", fixture.store],
                                     ["STORECTL_FAULT_POINT": "swap.aside.database"])
        #expect(killed.status == 137)
        // Someone cleans up "temporary" files by hand: the staged database goes.
        let staged = try #require(fixture.folder.contents().first { $0.hasPrefix(".Tasks.sqlite.tmp-storectl-") })
        try FileManager.default.removeItem(atPath: fixture.folder.file(staged))
        let recovered = try fixture.run(["recover", fixture.store])
        #expect(recovered.status == 0, "\(recovered.stderr)")
        #expect(recovered.stdout.contains("undid the interrupted restore"), "\(recovered.stdout)")
        #expect(try fixture.digest() == before, "the old store, -wal commits included, is back")
        #expect(fixture.leftovers([fixture.folder.path]).isEmpty, "\(fixture.leftovers([fixture.folder.path]))")
    }

    @Test("recover FOLDER after a crash finishes the interrupted swap of a store in it, as recover STORE would")
    func recoverFolderFinishesSwaps() throws {
        let fixture = try Scenarios.storeWithSnapshot()
        let killed = try fixture.run(["snapshot", "restore", "--repo", fixture.repo, fixture.snapshot, "--in-place", fixture.store],
                                     ["STORECTL_FAULT_POINT": "swap.aside.database"])
        #expect(killed.status == 137)
        #expect(StoreSwap.pending(target: fixture.store))
        let recovered = try fixture.run(["recover", fixture.folder.path])
        #expect(recovered.status == 0 && recovered.stdout.contains("the interrupted restore of \(fixture.store)"), "\(recovered.stdout)\(recovered.stderr)")
        #expect(!StoreSwap.pending(target: fixture.store))
        #expect(try fixture.run(["preflight", fixture.store]).status == 0)
    }

    @Test("recover on a backup target that a killed backup never made: its dead run's temporary files go (0); then 66; a live run's are kept (75)")
    func recoverNeverMadeTarget() throws {
        let fixture = try Scenarios.storeWithSnapshot()
        let target = fixture.out + "/b.sqlite"
        let killed = try fixture.run(["backup", fixture.store, "--output", target], ["STORECTL_FAULT_POINT": "backup.database.sync"])
        #expect(killed.status == 137)
        let left = PendingFile.temporaries(of: target)
        #expect(!left.isEmpty, "the killed backup left its copy")
        let recovered = try fixture.run(["recover", target])
        #expect(recovered.status == 0 && recovered.stdout.contains("removed"), "\(recovered.status) \(recovered.stdout)\(recovered.stderr)")
        #expect(PendingFile.temporaries(of: target).isEmpty && fixture.leftovers([fixture.out]).isEmpty, "\(fixture.leftovers([fixture.out]))")
        #expect(FileSystem.kind(of: target + ".storectl-lock") == .missing, "no lock file beside a file that does not exist")
        #expect(try fixture.run(["recover", target]).status == 66, "nothing left: no such file")
        // A temporary file of a process that is running (this test): kept, 75.
        let live = fixture.out + "/.b.sqlite.tmp-storectl-\(getpid())-live"
        try Data("x".utf8).write(to: URL(fileURLWithPath: live))
        let busy = try fixture.run(["recover", target])
        #expect(busy.status == 75 && FileSystem.kind(of: live) == .file, "\(busy.status) \(busy.stderr)")
    }

    @Test("recover on a file that is not a store makes no lock file beside it; on a folder it removes what dead runs left there (a killed verify's scratch copy)")
    func recoverNonStoreAndFolder() throws {
        let fixture = try Scenarios.storeWithSnapshot()
        let password = fixture.out + "/pw"
        try Data("secret\n".utf8).write(to: URL(fileURLWithPath: password))
        // A copy no storectl job ran on (a backup): recovered without a lock file left beside it.
        let copy = fixture.out + "/copy.sqlite"
        #expect(try fixture.run(["backup", fixture.store, "--output", copy]).status == 0)
        let onCopy = try fixture.run(["recover", copy])
        #expect(onCopy.status == 0 && onCopy.stdout.contains("nothing to recover"), "\(onCopy.stdout)\(onCopy.stderr)")
        #expect(FileSystem.kind(of: copy + ".storectl-lock") == .missing, "a lock file beside a recovered copy")
        let onFile = try fixture.run(["recover", password])
        #expect(onFile.status == 0 && onFile.stdout.contains("nothing to recover"), "\(onFile.status) \(onFile.stdout)\(onFile.stderr)")
        #expect(FileSystem.kind(of: password + ".storectl-lock") == .missing, "a lock file beside a password file")
        // A verification killed with its scratch copy in a --scratch folder (pid 999999: no such process).
        let scratch = fixture.out + "/scratch"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: false)
        let left = scratch + "/.storectl-verify-x.sqlite.tmp-storectl-999999-abc"
        try Data("x".utf8).write(to: URL(fileURLWithPath: left))
        let onFolder = try fixture.run(["recover", scratch])
        #expect(onFolder.status == 0 && onFolder.stdout.contains("removed 1 temporary file"), "\(onFolder.status) \(onFolder.stdout)\(onFolder.stderr)")
        #expect(FileSystem.kind(of: left) == .missing)
        #expect(FileSystem.kind(of: scratch + ".storectl-lock") == .missing && FileSystem.kind(of: fixture.out + "/.storectl-lock") == .missing)
        // A run still going (this test's pid): its file is left alone, and said so (a trial: "nothing to recover").
        let live = scratch + "/.b.sqlite.tmp-storectl-\(getpid())-live"
        try Data("x".utf8).write(to: URL(fileURLWithPath: live))
        let beside = try fixture.run(["recover", scratch])
        #expect(beside.status == 0 && beside.stdout.contains("left alone: 1 temporary file of storectl runs still going (pid \(getpid()))")
                && !beside.stdout.contains("nothing to recover"), "\(beside.stdout)")
        #expect(FileSystem.kind(of: live) == .file)
    }

    @Test("a restore killed after its database was put in place (no SHA-256 of it is taken: every page was checked against its id): recovery verifies the file in place is the one staged by its inode, size and modification time, for --to and --in-place of a WAL store alike; a file written since is not verified")
    func recoveryVerifiesTheInstalledFile() throws {
        for written in [false, true] {
            let fixture = try Scenarios.storeWithSnapshot()
            let copy = fixture.folder.file("copy.sqlite")
            for (target, args) in [(fixture.store, ["--in-place", fixture.store]), (copy, ["--to", copy])] {
                let killed = try fixture.run(["snapshot", "restore", "--repo", fixture.repo, fixture.snapshot] + args, ["STORECTL_FAULT_POINT": "swap.sync-folder"])
                #expect(killed.status == 137, "\(killed.stderr)")
                let journal = try JSON.decoder().decode(StoreSwap.Journal.self, from: Data(contentsOf: URL(fileURLWithPath: StoreSwap.journalPath(for: target))))
                #expect(journal.expectedSHA256 == nil && journal.expectedFile?.count == 2, "\(journal)")
                if written {
                    let handle = try #require(FileHandle(forWritingAtPath: target))
                    try handle.seekToEnd()
                    try handle.write(contentsOf: Data(repeating: 0, count: 4096))
                    try handle.close()
                }
                let recovered = try fixture.run(["recover", target, "--json"])
                #expect(recovered.status == 0, "\(recovered.stderr)")
                let swap = try #require(try JSON.decoder().decode(Recovery.Result.self, from: Data(recovered.stdout.utf8)).swap)
                #expect(swap.direction == "forward" && swap.verified == !written, "\(target) written: \(written): \(swap)")
                if !written { #expect(try fixture.run(["preflight", target]).status == 0) }
            }
        }
    }

    @Test("the app wrote to the store after the crash and before recovery: the restore finishes, what the app wrote is kept beside it")
    func appWroteInBetween() throws {
        let fixture = try Scenarios.storeWithSnapshot()
        try fixture.walCommits(120)
        let killed = try fixture.run(["snapshot", "restore", "--repo", fixture.repo, fixture.snapshot, "--in-place", fixture.store],
                                     ["STORECTL_FAULT_POINT": "swap.aside.database"])
        #expect(killed.status == 137)
        try fixture.walCommits(30)   // the app, started too early, commits to the old database
        let recovered = try fixture.run(["recover", fixture.store, "--json"])
        #expect(recovered.status == 0, "\(recovered.stderr)")
        let result = try JSON.decoder().decode(Recovery.Result.self, from: Data(recovered.stdout.utf8))
        let swap = try #require(result.swap)
        #expect(swap.direction == "forward")
        #expect(try fixture.digest(journalMode: false) == fixture.extra["snapshotContent"])
        let wal = try #require(swap.intruders.first { $0.hasSuffix("-wal") })
        #expect((FileSystem.size(of: wal) ?? 0) > 0, "the app's commits are kept")
        #expect(swap.kept.contains { $0.hasPrefix(fixture.store + ".replaced-") }, "and the old database they belong with: \(swap.kept)")
        #expect(fixture.leftovers([fixture.folder.path]).isEmpty)
    }
    @Test("the app opened the store after the crash, committed and closed it (no -wal left in the way): the restore finishes and the old files, holding that commit, are kept beside the store and said so (they were discarded with the commit)")
    func appClosedCleanlyInBetween() throws {
        let fixture = try Scenarios.storeWithSnapshot()
        let killed = try fixture.run(["snapshot", "restore", "--repo", fixture.repo, fixture.snapshot, "--in-place", fixture.store],
                                     ["STORECTL_FAULT_POINT": "swap.aside.database"])
        #expect(killed.status == 137)
        let app = try DatabaseQueue(path: fixture.store)
        try app.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'after the crash' WHERE Z_PK = 1") }
        try app.close()
        #expect(FileSystem.kind(of: fixture.store + "-wal") == .missing, "the app's close checkpointed its commit into the database file")
        let recovered = try fixture.run(["recover", fixture.store])
        #expect(recovered.status == 0, "\(recovered.stderr)")
        #expect(recovered.stdout.contains("warning: another process wrote to \(fixture.store)") && recovered.stdout.contains(".replaced-"), "\(recovered.stdout)")
        #expect(try fixture.digest(journalMode: false) == fixture.extra["snapshotContent"], "the restore finished")
        let kept = try #require(try FileManager.default.contentsOfDirectory(atPath: fixture.folder.path).first { $0.hasPrefix("Tasks.sqlite.replaced-") && !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") })
        let title = try DatabaseQueue(path: fixture.folder.file(kept), configuration: { var c = Configuration(); c.readonly = true; return c }())
            .read { try String.fetchOne($0, sql: "SELECT ZTITLE FROM ZITEM WHERE Z_PK = 1") }
        #expect(title == "after the crash", "the app's commit is in the kept old database")
    }

    @Test("an interrupted restore is not finished (nor undone) under an app that has the store open again: recover and snapshot create refuse (75) and change nothing (both went on, and the app's acknowledged commits went into files set aside); once it has closed the store, recover finishes")
    func notUnderAnOpenApp() throws {
        let fixture = try Scenarios.storeWithSnapshot()
        let killed = try fixture.run(["snapshot", "restore", "--repo", fixture.repo, fixture.snapshot, "--in-place", fixture.store],
                                     ["STORECTL_FAULT_POINT": "swap.aside.database"])
        #expect(killed.status == 137)
        let app = try DatabaseQueue(path: fixture.store)
        _ = try app.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM") }
        // From here until the app closes, this process opens none of the store's files: closing
        // any descriptor of a file drops every POSIX lock the process holds on it (the app's).
        let before = try FileManager.default.contentsOfDirectory(atPath: fixture.folder.path).sorted()
        let recovered = try fixture.run(["recover", fixture.store])
        #expect(recovered.status == 75 && recovered.stderr.contains("has the store open") && recovered.stderr.contains("nothing was changed"), "\(recovered.status) \(recovered.stderr)")
        let created = try fixture.run(["snapshot", "create", fixture.store, "--repo", fixture.repo])
        #expect(created.status == 75, "\(created.status) \(created.stdout) \(created.stderr)")
        #expect(StoreSwap.pending(target: fixture.store))
        #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.folder.path).sorted() == before, "nothing moved")
        try app.close()
        let finished = try fixture.run(["recover", fixture.store])
        #expect(finished.status == 0 && finished.stdout.contains("finished the interrupted restore"), "\(finished.stdout) \(finished.stderr)")
        #expect(try fixture.digest(journalMode: false) == fixture.extra["snapshotContent"])
    }
    @Test("killed with every file already moved (only the old files' disposal left): recovery finishes under an app that has the store open again (nothing it uses moves), not 75")
    func onlyDisposalLeftUnderAnOpenApp() throws {
        let fixture = try Scenarios.storeWithSnapshot()
        let killed = try fixture.run(["snapshot", "restore", "--repo", fixture.repo, fixture.snapshot, "--in-place", fixture.store],
                                     ["STORECTL_FAULT_POINT": "swap.discard-old"])
        #expect(killed.status == 137, "\(killed.stderr)")
        #expect(StoreSwap.pending(target: fixture.store))
        let app = try DatabaseQueue(path: fixture.store)
        _ = try app.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM ZITEM") }
        let recovered = try fixture.run(["recover", fixture.store])
        #expect(recovered.status == 0 && recovered.stdout.contains("finished the interrupted restore"), "\(recovered.status) \(recovered.stdout) \(recovered.stderr)")
        try app.close()
        #expect(!StoreSwap.pending(target: fixture.store))
        #expect(try fixture.digest(journalMode: false) == fixture.extra["snapshotContent"])
    }

    @Test("killed in the old files' disposal (the aside folder marked, or removed), a -wal the app made since that got the number of the old -wal's inode (a removed file's number is free for the next file) is not taken for the old one: recovery finishes under the open app, 0, and the app's commit stays in its -wal", arguments: ["swap.discard-old.mark", "swap.discard-old.mark.sync", "swap.discard-old"])
    func disposalWithAReusedInode(point: String) throws {
        let fixture = try Scenarios.storeChangedSinceSnapshot()
        // This test process keeps a descriptor of the store (the fixture's snapshot was taken in
        // it); a child another test forks in the instant before its exec holds a copy, which the
        // restore's fence rightly counts as an opener (75): tried again then.
        var killed = try fixture.run(["snapshot", "restore", "--repo", fixture.repo, fixture.snapshot, "--in-place", fixture.store],
                                     ["STORECTL_FAULT_POINT": point])
        for _ in 0..<3 where killed.status == 75 && killed.stderr.contains("was opened by another process") {
            killed = try fixture.run(["snapshot", "restore", "--repo", fixture.repo, fixture.snapshot, "--in-place", fixture.store],
                                     ["STORECTL_FAULT_POINT": point])
        }
        #expect(killed.status == 137, "\(killed.stderr)")
        let app = try DatabaseQueue(path: fixture.store)
        try app.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'the app after the crash' WHERE Z_PK = 1") }
        let wal = fixture.store + "-wal"
        var info = stat()
        #expect(lstat(wal, &info) == 0)
        let appWAL = (dev: UInt64(info.st_dev), ino: UInt64(info.st_ino))
        // What the file system may do: the app's -wal given the number the old -wal's inode had.
        let record = fixture.store + ".storectl-swap.json"
        var journal = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: record))) as? [String: Any] ?? [:]
        var steps = journal["steps"] as? [[String: Any]] ?? []
        let index = try #require(steps.firstIndex { ($0["from"] as? String) == wal && ($0["kind"] as? String) != "install" }, "\(steps)")
        steps[index]["inode"] = appWAL.ino
        steps[index]["device"] = appWAL.dev
        journal["steps"] = steps
        try JSONSerialization.data(withJSONObject: journal).write(to: URL(fileURLWithPath: record))
        let recovered = try fixture.run(["recover", fixture.store])
        #expect(recovered.status == 0 && recovered.stdout.contains("finished the interrupted restore"), "\(recovered.status) \(recovered.stdout) \(recovered.stderr)")
        #expect(lstat(wal, &info) == 0 && UInt64(info.st_ino) == appWAL.ino, "the app's -wal stays at its name")
        #expect(try app.read { try String.fetchOne($0, sql: "SELECT ZTITLE FROM ZITEM WHERE Z_PK = 1") } == "the app after the crash")
        try app.close()
        #expect(!StoreSwap.pending(target: fixture.store))
        #expect(fixture.leftovers([fixture.folder.path]).isEmpty, "\(fixture.leftovers([fixture.folder.path]))")
        let title = try DatabaseQueue(path: fixture.store).read { try String.fetchOne($0, sql: "SELECT ZTITLE FROM ZITEM WHERE Z_PK = 1") }
        #expect(title == "the app after the crash", "the app's commit is in the store")
    }

    @Test("a recovery killed while it kept the old files beside the store (its -wal kept, its database still aside), because the app had committed in the way: the next recovery keeps the rest too (it discarded the old database, and the app's commits in the kept -wal lost the database they belong to)")
    func keepingResumed() throws {
        let fixture = try Scenarios.storeWithSnapshot()
        try fixture.walCommits(120)
        let killed = try fixture.run(["snapshot", "restore", "--repo", fixture.repo, fixture.snapshot, "--in-place", fixture.store],
                                     ["STORECTL_FAULT_POINT": "swap.aside.database"])
        #expect(killed.status == 137)
        try fixture.walCommits(30)   // the app, started too early, commits to the old database
        let first = try fixture.run(["recover", fixture.store], ["STORECTL_FAULT_POINT": "swap.keep.wal"])
        #expect(first.status == 137, "\(first.status) \(first.stderr)")
        let second = try fixture.run(["recover", fixture.store, "--json"])
        #expect(second.status == 0, "\(second.stderr)")
        let names = try FileManager.default.contentsOfDirectory(atPath: fixture.folder.path)
        let keptDatabase = names.filter { $0.hasPrefix("Tasks.sqlite.replaced-") && !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm") }
        #expect(keptDatabase.count == 1, "the old database is kept beside its kept -wal: \(names.sorted())")
        #expect(names.contains { $0.hasPrefix("Tasks.sqlite.replaced-") && $0.hasSuffix("-wal") }, "\(names.sorted())")
        #expect(try fixture.digest(journalMode: false) == fixture.extra["snapshotContent"], "the restore finished")
        #expect(fixture.leftovers([fixture.folder.path]).isEmpty, "\(fixture.leftovers([fixture.folder.path]))")
    }

    @Test("killed after the record of a finished disposal went, before its emptied folder did: the next recover (of the store, or of its folder) removes the folder and has nothing to recover")
    func emptiedFolderLeft() throws {
        for folderWide in [false, true] {
            let fixture = try Scenarios.storeWithSnapshot()
            let killed = try fixture.run(["snapshot", "restore", "--repo", fixture.repo, fixture.snapshot, "--in-place", fixture.store],
                                         ["STORECTL_FAULT_POINT": "swap.done"])
            #expect(killed.status == 137)
            #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.folder.path).contains { $0.contains(".storectl-gone-") })
            let recovered = try fixture.run(["recover", folderWide ? fixture.folder.path : fixture.store])
            #expect(recovered.status == 0, "\(recovered.stderr)")
            #expect(fixture.leftovers([fixture.folder.path]).isEmpty, "\(fixture.leftovers([fixture.folder.path]))")
            #expect(try fixture.digest(journalMode: false) == fixture.extra["snapshotContent"])
        }
    }

    @Test("a backup to a fixed name killed in its swap: the next backup to that name finishes it first (then refuses, 73, as for any existing output), leaving no record or folder (it refused at once and left both)")
    func backupToAFixedNameFinishesTheKilledSwap() throws {
        let fixture = try Scenarios.storeWithSnapshot()
        let output = fixture.folder.file("backups")
        #expect(mkdir(output, 0o755) == 0)
        let target = output + "/fixed.sqlite"
        let killed = try fixture.run(["backup", fixture.store, "--output", target], ["STORECTL_FAULT_POINT": "swap.install.database"])
        #expect(killed.status == 137, "\(killed.stderr)")
        #expect(StoreSwap.pending(target: target))
        let next = try fixture.run(["backup", fixture.store, "--output", target])
        #expect(next.status == 73 && next.stderr.contains("already exists"), "\(next.status) \(next.stderr)")
        #expect(!StoreSwap.pending(target: target))
        #expect(fixture.leftovers([output]).isEmpty, "\(fixture.leftovers([output]))")
        #expect(try DatabaseQueue(path: target).read { try String.fetchOne($0, sql: "PRAGMA quick_check") } == "ok")
    }

    @Test("a backup to a fixed name killed in a container (its temporary named for a pid that is running again, as pid 1 is on every run there): the next backup removes the killed run's file by its free lock and finishes, not 75 for ever")
    func killedTemporaryOfAReusedPid() throws {
        let fixture = try Scenarios.storeWithSnapshot()
        let output = fixture.folder.file("backups")
        #expect(mkdir(output, 0o755) == 0)
        let target = output + "/fixed.sqlite"
        let killed = try fixture.run(["backup", fixture.store, "--output", target], ["STORECTL_FAULT_POINT": "backup.database.sync"])
        #expect(killed.status == 137, "\(killed.stderr)")
        let left = leftoversIn(output)
        #expect(left.count == 3, "\(left)")   // the database, its manifest, its external-data folder
        // The same files as a run of pid N left them, where N runs again (this test process).
        for name in left {
            guard let range = name.range(of: ".tmp-storectl-") else { continue }
            let reused = output + "/" + String(name[..<range.upperBound]) + "\(getpid())" + name[range.upperBound...].drop { $0.isNumber }
            #expect(rename(output + "/" + name, reused) == 0)
            try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -120)], ofItemAtPath: reused)
        }
        let next = try fixture.run(["backup", fixture.store, "--output", target])
        #expect(next.status == 0, "\(next.status) \(next.stderr)")
        #expect(fixture.leftovers([output]).isEmpty, "\(fixture.leftovers([output]))")
        #expect(try DatabaseQueue(path: target).read { try String.fetchOne($0, sql: "PRAGMA quick_check") } == "ok")
    }

    @Test("a marked-folder name planted in a shared folder as a symbolic link to another folder: the next recover (or backup) there removes the link's name at most, never what the other folder holds")
    func plantedMarkIsNotFollowed() throws {
        let folder = try TempFolder()
        let victim = folder.file("victim")
        #expect(mkdir(victim, 0o755) == 0)
        try Data("keep me".utf8).write(to: URL(fileURLWithPath: victim + "/precious.txt"))
        let shared = folder.file("shared")
        #expect(mkdir(shared, 0o755) == 0)
        #expect(symlink(victim, shared + "/.a.sqlite.storectl-gone-1") == 0)
        let recovered = try storectl("recover", shared)
        #expect(recovered.status == 0, "\(recovered.stderr)")
        #expect(FileManager.default.fileExists(atPath: victim + "/precious.txt"), "the link's target is left whole")
    }
}
