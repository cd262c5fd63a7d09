import Foundation
import Synchronization
import StoreLab
@testable import StoreOps
import Testing

/// glibc 2.34's posix_spawn_file_actions_addclosefrom_np, which Swift's Glibc module does not show.
@_silgen_name("posix_spawn_file_actions_addclosefrom_np")
func spawnActionsCloseFrom(_ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ from: Int32) -> Int32

@Suite("support: atomic files, job lock, formatting")
struct SupportTests {
    @Test("a killed process not yet reaped (a zombie) is not alive: its temporaries are stale (recover right after a kill -9 left them, saying nothing to recover)")
    func zombieIsNotAlive() throws {
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sleep"), strdup("30"), nil]
        defer { for p in argv { free(p) } }
        // Only stdin, stdout and stderr go to the child: the test process's other descriptors (a
        // store another test has open) would be open in it, and a restore's fence saw it as the
        // app (a CI run's rollback test failed so, 75).
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        #expect(spawnActionsCloseFrom(&actions, 3) == 0)
        #expect(posix_spawn(&pid, "/bin/sleep", &actions, nil, argv, environ) == 0)
        #expect(FileSystem.processIsAlive(pid))
        let folder = try TempFolder()
        let stale = folder.file(".Tasks.sqlite.tmp-storectl-\(pid)-1")
        try Data("x".utf8).write(to: URL(fileURLWithPath: stale))
        kill(pid, SIGKILL)
        // Not reaped (no waitpid yet): a zombie until then.
        var zombie = false
        for _ in 0..<200 where !zombie { zombie = FileSystem.isZombie(pid); if !zombie { usleep(10_000) } }
        #expect(zombie)
        #expect(!FileSystem.processIsAlive(pid))
        PendingFile.removeStale(in: folder.path, prefix: "Tasks.sqlite")
        #expect(!FileManager.default.fileExists(atPath: stale), "a zombie's temporary is stale")
        var status: Int32 = 0
        _ = waitpid(pid, &status, 0)
        #expect(!FileSystem.processIsAlive(pid))
    }

    @Test("a pending file is invisible until committed, private, and gone if discarded")
    func pendingFile() throws {
        let folder = try TempFolder()
        let final = folder.file("artifact.bin")
        do {
            let pending = try PendingFile(finalPath: final, label: "test.file")
            try pending.write(Data("hello".utf8))
            #expect(permissions(pending.tempPath) == 0o600)
            #expect(FileSystem.name(of: pending.tempPath).hasPrefix(".artifact.bin.tmp-storectl-\(getpid())-"))
            #expect(!FileManager.default.fileExists(atPath: final))
            // Dropped without commit: removed.
        }
        #expect(folder.contents().isEmpty)

        let pending = try PendingFile(finalPath: final, label: "test.file")
        try pending.write(Data("hello".utf8))
        try pending.commit()
        #expect(try String(contentsOfFile: final, encoding: .utf8) == "hello")
        #expect(folder.contents() == ["artifact.bin"])
    }

    @Test("commit refuses to replace an existing file unless asked")
    func commitNoReplace() throws {
        let folder = try TempFolder()
        let final = folder.file("a")
        try Data("old".utf8).write(to: URL(fileURLWithPath: final))
        let pending = try PendingFile(finalPath: final, label: "test.file")
        try pending.write(Data("new".utf8))
        #expect((#expect(throws: StoreOpsError.self) { try pending.commit() })?.status == .cannotCreate)
        #expect(try String(contentsOfFile: final, encoding: .utf8) == "old")
        try pending.commit(replacing: true)
        #expect(try String(contentsOfFile: final, encoding: .utf8) == "new")
    }

    @Test("temp files of dead processes are removed; those of live ones are kept")
    func staleTempFiles() throws {
        let folder = try TempFolder()
        // A pid that is certainly not running: a child that has exited.
        let child = try ChildProcess.run("/bin/true", [])
        #expect(child.status == 0)
        let dead = folder.file(".x.sqlite.tmp-storectl-999999999-abc")
        let deadWAL = dead + "-wal"
        let live = folder.file(".y.sqlite.tmp-storectl-\(getpid())-def")
        for path in [dead, deadWAL, live, folder.file("keep.sqlite")] {
            _ = FileManager.default.createFile(atPath: path, contents: Data())
        }
        let removed = PendingFile.removeStale(in: folder.path)
        #expect(Set(removed.map { FileSystem.name(of: $0) }) == [FileSystem.name(of: dead), FileSystem.name(of: deadWAL)])
        #expect(Set(folder.contents()) == [FileSystem.name(of: live), "keep.sqlite"])
    }

    @Test("a temporary is judged by its maker's flock, not by the pid in its name (in a container every run is pid 1): an unlocked one of a live pid goes once it is a minute old; a locked one, a young one, this process's own, and an older storectl's (no lock tag) stay")
    func temporariesJudgedByTheirLock() throws {
        let folder = try TempFolder()
        let live = getppid()   // running, and not the maker of any of these
        #expect(FileSystem.processIsAlive(live))
        let old = Date(timeIntervalSinceNow: -120)
        func make(_ name: String, aged: Bool) throws -> String {
            let path = folder.file(name)
            _ = FileManager.default.createFile(atPath: path, contents: Data())
            if aged { try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: path) }
            return path
        }
        let killed = try make(".a.sqlite.tmp-storectl-\(live)-Lk1", aged: true)
        let killedWAL = try make(".a.sqlite.tmp-storectl-\(live)-Lk1-wal", aged: true)
        let orphanSHM = try make(".e.sqlite.tmp-storectl-\(live)-Lk5-shm", aged: true)
        let held = try make(".b.sqlite.tmp-storectl-\(live)-Lk2", aged: true)
        let heldWAL = try make(".b.sqlite.tmp-storectl-\(live)-Lk2-wal", aged: true)
        let young = try make(".c.sqlite.tmp-storectl-\(live)-Lk3", aged: false)
        let older = try make(".d.sqlite.tmp-storectl-\(live)-k4", aged: true)
        // Another holder of `held`'s lock (another open file description: flock conflicts even
        // inside one process, as between two).
        let holder = open(held, O_RDONLY | O_CLOEXEC)
        #expect(holder >= 0 && flock(holder, LOCK_EX | LOCK_NB) == 0)
        defer { close(holder) }
        // A FIFO under such a name is no run's: removed without being opened (an open would block).
        let fifo = folder.file(".h.sqlite.tmp-storectl-\(live)-Lk6")
        #expect(mkfifo(fifo, 0o600) == 0)
        let own = try PendingFile(finalPath: folder.file("f.sqlite"), label: "test.file")
        let ownFolder = try PendingFile(finalPath: folder.file("g.folder"), directory: true, label: "test.folder")
        // This process's own, even with its lock let go: never probed, never removed.
        let unlocked = try PendingFile(finalPath: folder.file("i.sqlite"), label: "test.file")
        close(unlocked.takeLock())
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: unlocked.tempPath)
        #expect(FileSystem.name(of: own.tempPath).contains("-\(getpid())-L"))
        // Named for this process, aged: still this run's own (never probed, never removed).
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: own.tempPath)

        let removed = PendingFile.removeStale(in: folder.path)
        #expect(Set(removed) == [killed, killedWAL, orphanSHM, fifo], "\(removed)")
        for path in [held, heldWAL, young, older, own.tempPath, ownFolder.tempPath, unlocked.tempPath] {
            #expect(FileManager.default.fileExists(atPath: path), "\(path)")
        }
        // Another process sees this one's artifacts as locked, and the unlocked young one as young.
        #expect(PendingFile.lockState(own.tempPath) == .held)
        #expect(PendingFile.lockState(ownFolder.tempPath) == .held)
        #expect(PendingFile.lockState(young) == .free)
        #expect(!PendingFile.isRunning(young, youngFor: 0), "an unlocked name of a running pid, once past the instant of its making")
        unlocked.discard()
        try own.commit()
        // Polled: a child another test spawns at this instant shares this process's open file
        // descriptions (the lock's among them) from its fork until its exec closes them (CI saw
        // `.held` once). A lock kept past the commit stays held, and fails this.
        #expect(Self.within(2) { PendingFile.lockState(folder.file("f.sqlite")) == .free }, "the lock goes with the commit")
        ownFolder.discard()
        // Once its holder lets go, the held one is a killed run's.
        flock(holder, LOCK_UN)
        var stale: Set<String> = []
        #expect(Self.within(2) {
            stale.formUnion(PendingFile.removeStale(in: folder.path))
            return stale == [held, heldWAL]
        }, "\(stale)")
    }

    /// Whether `condition` holds within `seconds`, asked every 10 ms.
    static func within(_ seconds: TimeInterval, _ condition: () -> Bool) -> Bool {
        let end = Date(timeIntervalSinceNow: seconds)
        while true {
            if condition() { return true }
            if Date() > end { return false }
            usleep(10_000)
        }
    }

    @Test("a final name over 200 bytes: its dead temporaries are found by that name as a prefix")
    func staleTempFilesOfALongName() throws {
        let folder = try TempFolder()
        let long = String(repeating: "é", count: 120) + ".prom"   // 245 bytes
        let other = "other.prom"
        // A dead run's temporaries of both, made as PendingFile names them (the long one shortened).
        let dead = "\(PendingFile.temporaryPrefix(for: folder.file(long)))999999999-abc"
        let deadOther = "\(PendingFile.temporaryPrefix(for: folder.file(other)))999999999-def"
        #expect(!dead.hasPrefix("." + long))
        for name in [dead, deadOther] { _ = FileManager.default.createFile(atPath: folder.file(name), contents: Data()) }
        #expect(PendingFile.removeStale(in: folder.path, prefix: long).map { FileSystem.name(of: $0) } == [dead])
        #expect(Set(folder.contents()) == [deadOther])
    }

    @Test("the job lock: a second taker gets 75 naming the holder; released on exit, even kill -9")
    func jobLock() throws {
        let folder = try TempFolder()
        let path = folder.file("store.sqlite.storectl-lock")
        let lock = try JobLock.acquire(path: path, job: "migrate")
        // A busy lock is a value the pipeline ends a run as "skipped" with, carrying its message.
        let error = (#expect(throws: JobLock.Busy.self) { try JobLock.acquire(path: path, job: "purge") })?.error
        #expect(error?.status == .busy)
        #expect(error?.message.contains("another job (migrate) holds the lock since") == true)
        #expect(error?.message.contains("pid \(getpid())") == true)
        #expect(JobLock.currentHolder(path: path)?.job == "migrate")
        #expect(permissions(path) == 0o600)
        lock.release()
        #expect(JobLock.currentHolder(path: path) == nil)

        // Another process takes it (holding a read lock on a store is irrelevant here: flock on the
        // sidecar), and is killed: the lock is free again.
        let ready = folder.file("ready")
        let script = "exec 9>>'\(path)' && flock -n 9 && touch '\(ready)' && exec sleep 30"
        let holder = try ChildProcess.Running("/bin/sh", ["-c", script])
        #expect(ChildProcess.waitFor(file: ready))
        #expect(throws: JobLock.Busy.self) { try JobLock.acquire(path: path, job: "purge") }
        holder.signal(SIGKILL)
        _ = holder.wait()
        let again = try JobLock.acquire(path: path, job: "purge")
        again.release()
    }

    @Test("a job starting while another process asks whether the lock is held (preflight, purge's dry run, replicate status take it for an instant) is not told busy: 1,000 takes beside a prober in a tight loop all succeed (before, a take that met the probe failed 75)")
    func jobLockBesideProbes() throws {
        let folder = try TempFolder()
        let path = folder.file("store.sqlite.storectl-lock")
        try JobLock.acquire(path: path, job: "create").release()
        let stop = Atomic<Bool>(false)
        let probes = Atomic<Int>(0)
        let prober = Thread {
            while !stop.load(ordering: .relaxed) {
                _ = JobLock.isHeld(path: path)
                probes.add(1, ordering: .relaxed)
            }
        }
        prober.start()
        defer { stop.store(true, ordering: .relaxed) }
        while probes.load(ordering: .relaxed) < 100 { usleep(1_000) }
        var busy = 0
        for k in 0..<1_000 {
            do { try JobLock.acquire(path: path, job: "purge", shared: k % 2 == 0).release() } catch is JobLock.Busy { busy += 1 }
        }
        #expect(busy == 0, "\(busy) of 1,000 takes were told busy beside \(probes.load(ordering: .relaxed)) probes")
        // A real holder is still busy at once (within the moment a take waits).
        let lock = try JobLock.acquire(path: path, job: "migrate")
        let started = Date()
        #expect(throws: JobLock.Busy.self) { try JobLock.acquire(path: path, job: "purge") }
        #expect(Date().timeIntervalSince(started) < 5)
        lock.release()
    }

    @Test("figures for humans", arguments: [
        (UInt64(0), "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (1 << 30, "1.0 GiB"),
    ])
    func bytes(_ value: UInt64, _ text: String) {
        #expect(Format.bytes(value) == text)
    }

    @Test func countsAndDurations() {
        #expect(Format.count(1_234_567) == "1,234,567")
        #expect(Format.count(12) == "12")
        #expect(Format.duration(0.5) == "0.50s")
        #expect(Format.duration(125) == "2m05s")
    }

    @Test func compactTimestamp() {
        // 2026-11-22T03:15:00Z
        #expect(Timestamp.compact(Date(timeIntervalSince1970: 1_795_317_300)) == "20261122T031500Z")
        #expect(Timestamp.parseISO(Timestamp.iso(Date(timeIntervalSince1970: 1_795_317_300.25)))?.timeIntervalSince1970 == 1_795_317_300.25)
    }
}
