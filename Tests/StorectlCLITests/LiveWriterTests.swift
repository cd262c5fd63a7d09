import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

/// Operations on a store an app is writing to, many times over: their failures are races.
@Suite("under a live writer, many times", .onTestThreads)
struct LiveWriterTests {
    /// The writer's commit log: key and the time its COMMIT returned.
    func commits(_ log: String) throws -> [(key: Int64, at: Double)] {
        try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 2, let key = Int64(fields[0]), let at = Double(fields[1]) else { return nil }
            return (key, at)
        }
    }

    func firstError(_ stderr: String) -> String {
        String(stderr.split(separator: "\n").first { !$0.contains("warning:") } ?? "")
    }

    func read<T>(_ path: String, _ body: (Database) throws -> T) throws -> T {
        let queue = try DatabaseQueue(path: path, configuration: { var c = Configuration(); c.readonly = true; return c }())
        defer { try? queue.close() }
        return try queue.inDatabase(body)
    }

    @Test("50 first format-2 snapshots of a store under a writer committing every 2 ms: every one exits 0, and every one restored passes integrity_check and holds exactly a prefix of the writer's commits that includes all committed before it started")
    func firstSnapshots() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 20_000)
        let password = try folder.passwordFile()
        let environment = ["STORECTL_PASSWORD_FILE": password]
        // Every tenth repository encrypted (each command derives its key with scrypt: ~1 s in a
        // debug build), the others plain: the same copy and check, 50 times in ~30 s.
        let encrypted = folder.file("empty-encrypted"), plain = folder.file("empty-plain")
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", encrypted], environment: environment).status == 0)
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", plain, "--insecure-no-encryption"]).status == 0)
        let base = try read(store) { try Int64.fetchOne($0, sql: "SELECT Z_MAX FROM Z_PRIMARYKEY WHERE Z_ENT = 2") } ?? 0
        let log = folder.file("commits.log")
        let ready = folder.file("ready")
        // Checkpoints every 100 pages (about every 50 commits): a snapshot that lost its read lock
        // has pages copied over it or the WAL restarted under it within its first 100 ms.
        let writer = try ChildProcess.Running(Binaries.lab, ["writer", store, "--interval-ms", "2", "--ready-file", ready,
                                                             "--commit-log", log, "--autocheckpoint", "100"])
        defer { writer.signal(SIGTERM); _ = writer.wait() }
        #expect(ChildProcess.waitFor(file: ready))
        var failures: [String] = []
        for run in 1...50 {
            let repo = folder.file("repo-\(run)")
            #expect(try ChildProcess.run("/bin/cp", ["-a", run % 10 == 0 ? encrypted : plain, repo]).status == 0)
            let started = Date().timeIntervalSince1970
            let created = try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo, "--json"], environment: environment)
            guard created.status == 0 else {
                failures.append("run \(run): snapshot create exited \(created.status): \(firstError(created.stderr))")
                continue
            }
            let result = try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(created.stdout.utf8))
            #expect(result.parent == nil, "a first snapshot")
            let restored = folder.file("restored-\(run).sqlite")
            let restore = try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, result.id, "--to", restored], environment: environment)
            guard restore.status == 0 else {
                failures.append("run \(run): restore exited \(restore.status): \(firstError(restore.stderr))")
                continue
            }
            let (check, keys, max, items) = try read(restored) { db in
                (try String.fetchAll(db, sql: "PRAGMA integrity_check"),
                 try Int64.fetchAll(db, sql: "SELECT Z_PK FROM ZITEM WHERE Z_PK > ? ORDER BY Z_PK", arguments: [base]),
                 try Int64.fetchOne(db, sql: "SELECT Z_MAX FROM Z_PRIMARYKEY WHERE Z_ENT = 2") ?? 0,
                 try Int.fetchOne(db, sql: "SELECT count(*) FROM ZITEM") ?? 0)
            }
            let logged = try commits(log)   // read after the restore: every row the snapshot holds was logged by now
            let before = logged.filter { $0.at < started }.map(\.key)
            let expected = Array(logged.map(\.key).prefix(keys.count))
            if check != ["ok"] { failures.append("run \(run): integrity_check \(check.prefix(3))") }
            if keys != expected { failures.append("run \(run): the restored rows are not a prefix of the writer's commits (\(keys.count) rows, first differing at \(zip(keys, expected).map { $0 != $1 }.firstIndex(of: true) ?? -1))") }
            if keys.count < before.count { failures.append("run \(run): \(before.count) rows were committed before the snapshot started, it holds \(keys.count)") }
            if max != (keys.last ?? base) { failures.append("run \(run): Z_MAX \(max) but the last row \(keys.last ?? base): two tables from two points in time") }
            let counts = result.record.coreData?.entityCounts ?? [:]
            if (counts["Task"] ?? 0) + (counts["Note"] ?? 0) != items {
                failures.append("run \(run): the manifest's counts \(counts) are not the restored store's \(items) items")
            }
            try? FileManager.default.removeItem(atPath: restored)
            try? FileManager.default.removeItem(atPath: repo)
        }
        #expect(failures.count == 0, "\(failures.count) of 50 failed:\n\(failures.prefix(10).joined(separator: "\n"))")
        #expect(try commits(log).count > 500, "the writer kept committing throughout")
    }
}
