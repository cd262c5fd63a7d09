import Foundation
import StoreLab
import StoreOps
import Testing

/// Which operations may run beside which on one store: copies (backup, snapshot create) take the
/// store's job lock shared, changes (restore in place, migrate, rollback, purge, scheduled jobs)
/// exclusive.
@Suite("the lock matrix: copies beside copies, never beside a change", .onTestThreads)
struct LockMatrixTests {
    struct World {
        let folder: TempFolder
        let store: String
        let repo: String
        let snapshot: String

        init() throws {
            folder = try TempFolder()
            var options = SampleStore.Options()
            options.items = 3_000
            store = try SampleStore.create(at: folder.file("Tasks.sqlite"), options: options).path
            repo = try folder.repository("snaps")
            snapshot = try SnapshotCreate.run(store: store, options: .init(repository: repo)).id
            try FileManager.default.createDirectory(atPath: folder.file("migrations"), withIntermediateDirectories: false)
            try Data("UPDATE ZTAG SET ZNAME = upper(ZNAME);".utf8).write(to: URL(fileURLWithPath: folder.file("migrations/0001_upper.sql")))
        }

        /// Holds the store's job lock from another process, as a running job would.
        func hold(job: String, shared: Bool, seconds: Double = 20) throws -> ChildProcess.Running {
            let ready = folder.file("ready-\(UUID().uuidString.prefix(6))")
            let holder = try ChildProcess.Running(Binaries.lab, ["job-lock", store, "--job", job, "--seconds", "\(seconds)", "--ready-file", ready]
                                                  + (shared ? ["--shared"] : []))
            #expect(ChildProcess.waitFor(file: ready))
            return holder
        }

        func storectl(_ arguments: [String]) throws -> ChildProcess.Result { try ChildProcess.run(Binaries.storectl, arguments) }
    }

    @Test("a backup or a snapshot while a change holds the store: 75 at once, naming it")
    func copyDuringChange() throws {
        let world = try World()
        let holder = try world.hold(job: "migrate", shared: false)
        defer { holder.signal(SIGTERM); _ = holder.wait() }
        for arguments in [["backup", world.store, "-o", world.folder.file("b.sqlite")], ["snapshot", "create", world.store, "--repo", world.repo]] {
            let result = try world.storectl(arguments)
            #expect(result.status == 75, "\(arguments): \(result.stderr)")
            #expect(result.stderr.contains("skipped: another job (migrate) holds the lock"), "\(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: world.folder.file("b.sqlite")))
    }

    @Test("backup --wait waits for the change to finish, then copies")
    func backupWaits() throws {
        let world = try World()
        // The purge holds the lock until the test ends it (a 1.5 s hold measured against the
        // clock failed when the test thread was late).
        let holder = try world.hold(job: "purge", shared: false, seconds: 120)
        let backup = try ChildProcess.Running(Binaries.storectl, ["backup", world.store, "-o", world.folder.file("b.sqlite"), "--wait"])
        usleep(1_000_000)
        #expect(backup.isRunning && !FileManager.default.fileExists(atPath: world.folder.file("b.sqlite")), "it waits for the purge")
        holder.signal(SIGTERM)
        _ = holder.wait()
        let result = backup.wait()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(FileManager.default.fileExists(atPath: world.folder.file("b.sqlite")))
    }

    @Test("a run waiting for the store's job lock (--wait) says on a terminal whose lock it waits for, and SIGINT or SIGTERM ends the wait at once (130 or 143, nothing changed; migrate: stopped, 3); the wait had ignored both until the other job let go (flock restarted after the signal)",
          arguments: ["backup", "snapshot", "migrate", "restore", "rollback"])
    func signalEndsLockWait(command: String) throws {
        let world = try World()
        let before = try StoreState.digest(world.store)
        let holder = try world.hold(job: "purge", shared: false, seconds: 120)
        defer { holder.signal(SIGTERM); _ = holder.wait() }
        let backup = world.folder.file("b.sqlite")
        let arguments: [String] = switch command {
        case "backup": ["backup", world.store, "-o", backup, "--wait"]
        case "snapshot": ["snapshot", "create", world.store, "--repo", world.repo, "--wait"]
        case "migrate": ["migrate", world.store, "--migrations", world.folder.file("migrations"), "--repo", world.repo, "--wait"]
        case "restore": ["snapshot", "restore", "--repo", world.repo, world.snapshot, "--in-place", world.store, "--wait"]
        default: ["rollback", world.store, "--repo", world.repo, "--to", world.snapshot, "--wait"]
        }
        let run = try ChildProcess.Running(Binaries.storectl, arguments, environment: ["STORECTL_PROGRESS": "always"])
        defer { if run.isRunning { run.signal(SIGKILL) }; _ = run.wait() }
        #expect(waitUntil(60) { run.stderrSoFar.contains("waiting for the store's job lock (purge, pid \(holder.pid)") || !run.isRunning },
                "\(command): \(run.stderrSoFar)")
        let number = command == "backup" || command == "restore" ? SIGINT : SIGTERM
        let sent = Date()
        run.signal(number)
        #expect(waitUntil(10, every: 0.05) { !run.isRunning }, "\(command) still waits 10 s after the signal")
        let result = run.wait()
        #expect(Date().timeIntervalSince(sent) < 10 && holder.isRunning)
        if command == "migrate" {   // migrate's stop before any change: `stopped`, 3 (README)
            #expect(result.status == 3 && result.stdout.contains("stopped before any change (nothing to roll back): SIGTERM"), "\(result.status) \(result.stdout) \(result.stderr)")
        } else {
            #expect(result.status == 128 + number && result.stderr.contains("stopped during its lock stage: \(number == SIGINT ? "SIGINT" : "SIGTERM") was received; nothing was changed"),
                    "\(command): \(result.status) \(result.stderr)")
        }
        #expect(try StoreState.digest(world.store) == before)
        #expect(!FileManager.default.fileExists(atPath: backup))
    }

    @Test("copies run beside each other: two backups and a snapshot at once all succeed")
    func copiesTogether() throws {
        let world = try World()
        let holder = try world.hold(job: "backup", shared: true)
        defer { holder.signal(SIGTERM); _ = holder.wait() }
        let first = try ChildProcess.Running(Binaries.storectl, ["backup", world.store, "-o", world.folder.file("b1.sqlite")])
        let second = try ChildProcess.Running(Binaries.storectl, ["backup", world.store, "-o", world.folder.file("b2.sqlite")])
        let third = try ChildProcess.Running(Binaries.storectl, ["snapshot", "create", world.store, "--repo", world.repo])
        for (name, process) in [("b1", first), ("b2", second), ("snapshot", third)] {
            let result = process.wait()
            #expect(result.status == 0, "\(name): \(result.stderr)")
        }
    }

    @Test("a change while a copy runs: restore in place, migrate, rollback and purge get 75, nothing changed")
    func changeDuringCopy() throws {
        let world = try World()
        let before = try StoreState.digest(world.store)
        let holder = try world.hold(job: "backup", shared: true)
        defer { holder.signal(SIGTERM); _ = holder.wait() }
        let policy = world.folder.file("p.toml")
        try Data("[store]\npath = \"Tasks.sqlite\"\n\n[[purge]]\nname = \"tags\"\ntable = \"ZTAG\"\ndeleted_flag = \"ZISDELETED\"\n".utf8)
            .write(to: URL(fileURLWithPath: policy))
        for arguments in [["snapshot", "restore", "--repo", world.repo, world.snapshot, "--in-place", world.store],
                          ["migrate", world.store, "--migrations", world.folder.file("migrations"), "--repo", world.repo],
                          ["rollback", world.store, "--repo", world.repo, "--to", world.snapshot],
                          ["purge", "--policy", policy]] {
            let result = try world.storectl(arguments)
            #expect(result.status == 75, "\(arguments[0]): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains("skipped: another job (backup) holds the lock"), "\(arguments[0]): \(result.stderr)")
        }
        #expect(try StoreState.digest(world.store) == before)
    }
}
