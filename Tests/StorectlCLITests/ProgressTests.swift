import Foundation
import StoreLab
import StoreOps
import Testing

/// Progress on stderr: every long operation names its stages in order and shows its steps' progress
/// on a terminal; nothing at all when stderr is not one (cron, a pipe), or with --json.
@Suite("progress on a terminal", .onTestThreads)
struct ProgressTests {
    /// The distinct states a progress line showed, in order: its redraws split on CR, the
    /// clear-line escapes and the rate/ETA/elapsed details removed.
    static func states(_ stderr: String) -> [String] {
        var states: [String] = []
        for piece in stderr.components(separatedBy: "\r") {
            let line = piece.replacingOccurrences(of: "\u{1B}[2K", with: "").trimmingCharacters(in: .whitespacesAndNewlines)
            guard !line.isEmpty, !line.hasPrefix("storectl:") else { continue }
            if states.last != line { states.append(line) }
        }
        return states
    }

    /// Whether `expected` appear in `states` in this order (as prefixes of some state each).
    static func inOrder(_ expected: [String], in states: [String]) -> Bool {
        var index = states.startIndex
        for wanted in expected {
            guard let found = states[index...].firstIndex(where: { $0.hasPrefix(wanted) }) else { return false }
            index = found
        }
        return true
    }

    struct World {
        let folder: TempFolder
        let store: String
        let repository: String
        let password: String

        init() throws {
            folder = try TempFolder()
            store = try makeStore(folder, items: 5_000)
            repository = try folder.repository("snaps", encrypted: true)
            password = try folder.passwordFile()
            try FileManager.default.createDirectory(atPath: folder.file("migrations"), withIntermediateDirectories: false)
            try Data("UPDATE ZITEM SET ZTITLE = ZTITLE || '!' WHERE Z_PK % 3 = 0;\nUPDATE ZITEM SET ZTITLE = ZTITLE || '?' WHERE Z_PK % 5 = 0;\n".utf8)
                .write(to: URL(fileURLWithPath: folder.file("migrations/0001_mark.sql")))
        }

        func run(_ arguments: [String], progress: String?) throws -> ChildProcess.Result {
            var environment = ["STORECTL_PASSWORD_FILE": password]
            if let progress { environment["STORECTL_PROGRESS"] = progress }
            return try ChildProcess.run(Binaries.storectl, arguments, environment: environment, currentDirectory: folder.path)
        }
    }

    @Test("each long operation shows its stages in order, and its steps (pages, bytes, statements) with a percentage")
    func stagesInOrder() throws {
        let world = try World()
        let created = try world.run(["snapshot", "create", world.store, "--repo", world.repository, "--json"], progress: nil)
        #expect(created.status == 0, "\(created.stderr)")
        let id = try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(created.stdout.utf8)).id
        try FileManager.default.createDirectory(atPath: world.folder.file("backups"), withIntermediateDirectories: false)
        let cases: [([String], [String])] = [
            (["backup", world.store, "-o", "backups"], ["backup  lock", "backup  preflight", "backup  copy", "backup  copy  100.0%", "backup  verify", "backup  install"]),
            (["snapshot", "create", world.store, "--repo", "snaps"], ["snapshot create  lock", "snapshot create  copy", "snapshot create  verify", "snapshot create  commit"]),
            (["preflight", world.store, "--full"], ["preflight  quick_check", "preflight  integrity_check", "preflight  foreign_key_check", "preflight  Core Data checks"]),
            (["snapshot", "verify", "--repo", "snaps", id], ["snapshot verify  \(id) pages", "snapshot verify  \(id) pages  100.0%", "snapshot verify  \(id) quick_check and page hashes"]),
            // Its source passed quick_check when it was taken: the restored pages against their ids alone, unless --check.
            (["snapshot", "restore", "--repo", "snaps", id, "--to", "copy.sqlite"], ["snapshot restore  pages", "snapshot restore  pages  100.0%", "snapshot restore  page hashes", "snapshot restore  sync"]),
            (["snapshot", "restore", "--repo", "snaps", id, "--to", "checked.sqlite", "--check"], ["snapshot restore  pages", "snapshot restore  quick_check and page hashes", "snapshot restore  sync"]),
            (["snapshot", "export", "--repo", "snaps", id, "--output", "e.tar.zst"], ["snapshot export  pages", "snapshot export  quick_check", "snapshot export  archive (zstd)", "snapshot export  archive (zstd)  100.0%"]),
            (["migrate", "apply", world.store, "--migrations", "migrations", "--repo", "snaps"],
             ["migrate  lock", "migrate  preflight", "migrate  snapshot", "migrate  snapshot  copy", "migrate  apply 0001_mark", "migrate  apply 0001_mark  50.0%  1/2 statements",
              "migrate  0001_mark: foreign_key_check", "migrate  verify"]),
            (["snapshot", "restore", "--repo", "snaps", id, "--in-place", world.store], ["snapshot restore  lock", "snapshot restore  preflight", "snapshot restore  pages",
                                                                                      "snapshot restore  snapshot", "snapshot restore  snapshot  copy", "snapshot restore  swap"]),
            (["repo", "repair", "--repo", "snaps"], ["repo repair  read the indexes", "repo repair  read every pack", "repo repair  read every pack  100.0%",
                                                     "repo repair  check every snapshot against the new index"]),
        ]
        for (arguments, expected) in cases {
            let result = try world.run(arguments, progress: "always")
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            let states = Self.states(result.stderr)
            #expect(Self.inOrder(expected, in: states), "\(arguments):\n\(states.joined(separator: "\n"))")
            // The line is cleared at the end, before the report goes to stdout.
            #expect(result.stderr.hasSuffix("\r\u{1B}[2K"), "\(arguments): the progress line is left on the screen")
            #expect(!result.stdout.contains("\u{1B}"), "\(arguments): escapes on stdout")
        }
        // Not a terminal, and not asked: nothing on stderr. With --json: nothing either, although asked.
        for arguments in [["backup", world.store, "-o", "backups"], ["preflight", world.store, "--full"], ["snapshot", "verify", "--repo", "snaps", id]] {
            let quiet = try world.run(arguments, progress: nil)
            #expect(quiet.status == 0 && quiet.stderr.isEmpty, "\(arguments): \(quiet.stderr)")
            let json = try world.run(arguments + ["--json"], progress: "always")
            #expect(json.status == 0 && json.stderr.isEmpty, "\(arguments) --json: \(json.stderr)")
        }
    }

    @Test("on a real terminal (a pty from script(1)) the line is drawn without being asked; an error clears it first")
    func realTerminal() throws {
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/script"), "util-linux script(1)")
        let world = try World()
        try FileManager.default.createDirectory(atPath: world.folder.file("backups"), withIntermediateDirectories: false)
        func quoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        let command = ([Binaries.storectl, "backup", world.store, "-o", world.folder.file("backups")].map(quoted)).joined(separator: " ")
        let result = try ChildProcess.run("/usr/bin/script", ["-qec", command, "/dev/null"], environment: ["TERM": "xterm"])
        #expect(result.status == 0, "\(result.stdout)")
        #expect(result.stdout.contains("backup  copy") && result.stdout.contains("\u{1B}[2K"), "\(result.stdout)")
        #expect(result.stdout.contains("backup ok: "), "\(result.stdout)")
        // An error after stages were drawn (the output exists: refused in preflight): the line is
        // cleared first, so the message starts at the left margin, alone on its line.
        try Data().write(to: URL(fileURLWithPath: world.folder.file("exists.sqlite")))
        let failing = ([Binaries.storectl, "backup", world.store, "-o", world.folder.file("exists.sqlite")].map(quoted)).joined(separator: " ")
        let failed = try ChildProcess.run("/usr/bin/script", ["-qec", failing, "/dev/null"], environment: ["TERM": "xterm"])
        #expect(failed.stdout.contains("backup  preflight\r\u{1B}[2Kstorectl: \(world.folder.file("exists.sqlite")) already exists"), "\(failed.stdout)")
        // verify --all says each verdict as it comes, above the line (it printed them all at the
        // end of a long run: found by a helper): the first snapshot's before the second's stages.
        var ids: [String] = []
        for _ in 0..<2 {
            let created = try world.run(["snapshot", "create", world.store, "--repo", world.repository, "--json"], progress: nil)
            ids.append(try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(created.stdout.utf8)).id)
        }
        let verifying = ([Binaries.storectl, "snapshot", "verify", "--repo", world.repository, "--all"].map(quoted)).joined(separator: " ")
        let verified = try ChildProcess.run("/usr/bin/script", ["-qec", verifying, "/dev/null"], environment: ["TERM": "xterm", "STORECTL_PASSWORD_FILE": world.password])
        #expect(verified.status == 0, "\(verified.stdout)")
        // (In the order verify takes them, whichever that is.)
        let first = try #require(verified.stdout.range(of: "ok      "), "\(verified.stdout)")
        let second = try #require(verified.stdout.range(of: " (2 of 2)"), "\(verified.stdout)")
        #expect(first.lowerBound < second.lowerBound, "\(verified.stdout)")
        #expect(ids.allSatisfy { verified.stdout.contains("\r\u{1B}[2Kok      \($0)") }, "the line is cleared before each verdict: \(verified.stdout)")
    }
}
