import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

@Suite("storectl policy, purge and killswitch, end to end", .onTestThreads)
struct PurgeCLITests {
    func policy(_ folder: TempFolder, store: String, rule: String = "entity = \"Item\"\ndeleted_flag = \"ZISDELETED\"\ndeleted_at = \"ZDELETEDAT\"\ntime_format = \"coredata\"\nretention = \"30d\"") throws -> String {
        let path = folder.file("tasks.toml")
        try Data("[store]\npath = \"\(store)\"\n[[purge]]\nname = \"items\"\n\(rule)\n".utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test("policy check: ok lines; the first bad file fails with exit 65 and all its problems")
    func check() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let good = try policy(folder, store: store)
        let ok = try storectl("policy", "check", good)
        #expect(ok.status == 0 && ok.stdout.hasPrefix("ok    \(good)  (1 rule, names checked against the store"))
        let dir = folder.file("policies")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false)
        try Data("[store]\npath = \"\(store)\"\n[[purge]]\ntable = \"ZTASK; DROP TABLE ZCATEGORY\"\ndeleted_flag = \"X\"\nwhen = 3\n".utf8)
            .write(to: URL(fileURLWithPath: dir + "/a-bad.toml"))
        try Data("[store]\npath = \"x\"\n[[purge]]\ntable = \"T\"\nretention = 30\n".utf8).write(to: URL(fileURLWithPath: dir + "/b-bad.toml"))
        let bad = try storectl("policy", "check", dir)
        #expect(bad.status == 65)
        #expect(bad.stdout.contains("FAIL  \(dir)/a-bad.toml"))
        #expect(bad.stdout.contains("\(dir)/a-bad.toml:6: purge[0].when: unknown key"))
        #expect(!bad.stdout.contains("b-bad.toml"), "stops at the first file with errors")
        let injection = folder.file("injection.toml")
        try Data("[store]\npath = \"\(store)\"\n[[purge]]\ntable = \"ZTASK; DROP TABLE ZCATEGORY\"\ndeleted_flag = \"X\"\n".utf8)
            .write(to: URL(fileURLWithPath: injection))
        let names = try storectl("policy", "check", injection)
        #expect(names.status == 65)
        #expect(names.stdout.contains("\(injection):4: purge[0].table: no table \"ZTASK; DROP TABLE ZCATEGORY\""), "\(names.stdout)")
        #expect(try storectl("policy", "check", folder.file("none.toml")).status == 66)
    }

    @Test("durations are bounded where they are parsed: a retention over 100 years fails policy check (65); 100 years computes in every time format for explain and a dry run; --jitter over a day is 64")
    func durationBounds() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 300)
        let rule = { (retention: String, format: String) in
            "entity = \"Item\"\ndeleted_flag = \"ZISDELETED\"\ndeleted_at = \"ZDELETEDAT\"\ntime_format = \"\(format)\"\nretention = \"\(retention)\""
        }
        for huge in ["1000000000y", "101y", "99999999999999999999d"] {
            let path = try policy(folder, store: store, rule: rule(huge, "coredata"))
            let check = try storectl("policy", "check", path)
            #expect(check.status == 65 && check.stdout.contains("longer than 100 years"), "\(huge): \(check.stdout)\(check.stderr)")
            #expect(try storectl("purge", "--policy", path, "--dry-run").status == 65)
            #expect(try storectl("policy", "explain", path).status == 65)
        }
        // Each format on a store whose deletion times are written in it (a store's own times read
        // in another format are refused: below).
        let written = ["coredata": "ZDELETEDAT", "unix": "ZDELETEDAT + 978307200", "unix_ms": "(ZDELETEDAT + 978307200) * 1000",
                       "iso8601": "strftime('%Y-%m-%dT%H:%M:%SZ', ZDELETEDAT + 978307200, 'unixepoch')"]
        for format in ["coredata", "unix", "unix_ms", "iso8601"] {
            let copy = try TempFolder()
            let converted = try makeStore(copy, items: 300)
            try DatabaseQueue(path: converted).write { try $0.execute(sql: "UPDATE ZITEM SET ZDELETEDAT = \(written[format]!) WHERE ZDELETEDAT IS NOT NULL") }
            let path = try policy(copy, store: converted, rule: rule("100y", format))
            for arguments in [["policy", "check", path], ["policy", "explain", path], ["purge", "--policy", path, "--dry-run"]] {
                let result = try ChildProcess.run(Binaries.storectl, arguments)
                #expect(result.status == 0, "\(format) \(arguments[1]): \(result.status) \(result.stdout) \(result.stderr)")
            }
        }
        // A Core Data store's seconds since 2001 read as unix time are all in 1970-1996: every
        // soft-deleted row would be past its retention (a trial's check said ok). Refused (65),
        // naming the format that fits; numbers read as ISO-8601 would match nothing.
        for (format, says) in [("unix", "is time_format \"coredata\"?"), ("unix_ms", "is time_format \"coredata\"?"), ("iso8601", "holds numbers, not ISO-8601 text")] {
            let path = try policy(folder, store: store, rule: rule("30d", format))
            let check = try storectl("policy", "check", path)
            #expect(check.status == 65 && check.stdout.contains("time_format") && check.stdout.contains(says), "\(format): \(check.status) \(check.stdout)")
            #expect(try storectl("purge", "--policy", path, "--dry-run").status == 65)
        }
        // A sentinel beside real times (Core Data's distantFuture, year 4001) is no wrong format.
        let sentinelFolder = try TempFolder()
        let sentinel = try makeStore(sentinelFolder, items: 300)
        try DatabaseQueue(path: sentinel).write {
            try $0.execute(sql: "UPDATE ZITEM SET ZDELETEDAT = 63113904000 WHERE Z_PK = (SELECT min(Z_PK) FROM ZITEM WHERE ZISDELETED != 0)")
        }
        let sentinelCheck = try storectl("policy", "check", try policy(sentinelFolder, store: sentinel, rule: rule("30d", "coredata")))
        #expect(sentinelCheck.status == 0, "\(sentinelCheck.stdout)")
        for jitter in ["2d", "1000000d", "-5m"] {
            let run = try storectl("run", "purge", "--policy", try policy(folder, store: store), "--jitter", jitter)
            #expect(run.status == 64, "--jitter \(jitter): \(run.status) \(run.stderr)")
        }
    }

    @Test("policy explain shows the SQL, the cutoff in UTC and local time, and the counts")
    func explain() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let result = try storectl("policy", "explain", try policy(folder, store: store), environment: ["TZ": "Europe/Paris"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("rule items: entity Item -> ZITEM"))
        #expect(result.stdout.contains("each batch:  SELECT rowid FROM \"ZITEM\" WHERE rowid > ? AND \"ZISDELETED\" != 0"))
        #expect(result.stdout.range(of: #"cutoff:      \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d .+\), bound as \d+\.\d+"#,
                                        options: .regularExpression) != nil, "\(result.stdout)")
        #expect(result.stdout.contains("ZATTACHMENT rows (cascade)"))
        #expect(result.stdout.contains("follows      Item.attachments (cascade)"))
    }

    @Test("purge: a dry run changes nothing; a real run reports; --json; the kill switch command")
    func purge() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let path = try policy(folder, store: store)
        let before = try Hashing.sha256(ofFile: store)
        let dry = try storectl("purge", "--policy", path, "--dry-run")
        #expect(dry.status == 0 && dry.stdout.contains("(dry run: nothing changed)") && dry.stdout.contains("would delete"))
        #expect(try Hashing.sha256(ofFile: store) == before)

        #expect(try storectl("killswitch", "engage", store, "--reason", "maintenance").stdout.hasPrefix("kill switch engaged: \(store).storectl-killswitch"))
        #expect(try storectl("killswitch", "status", store).stdout.contains("maintenance"))
        let stopped = try storectl("purge", "--policy", path)
        #expect(stopped.status == 1 && stopped.stderr.contains("the kill switch"))
        #expect(try storectl("killswitch", "release", store).stdout == "kill switch released\n")

        let real = try storectl("purge", "--policy", path, "--json")
        #expect(real.status == 0, "\(real.stderr)")
        let report = try JSON.decoder().decode(Purge.Report.self, from: Data(real.stdout.utf8))
        #expect(report.rules[0].deleted == report.rules[0].candidates && report.rules[0].deleted > 0)
        #expect(real.stderr.isEmpty)
        #expect(try storectl("purge", "--policy", folder.file("missing.toml")).status == 66)
    }

    @Test("the dry run says what the run will do: each rule's counts equal the run's (a later rule sees what earlier ones delete); the store unchanged, nothing left in TMPDIR; no room for a copy: per-rule counts and a note")
    func dryRunPredictsTheRun() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder, items: 20_000)
        let policy = folder.file("tasks.toml")
        let example = try String(contentsOfFile: (ReadmeTranscriptTests.packageRoot as NSString).appendingPathComponent("examples/policies/tasks.toml"), encoding: .utf8)
        try Data(example.replacingOccurrences(of: "password_file = \"pw\"", with: "").utf8).write(to: URL(fileURLWithPath: policy))
        let scratch = try TempFolder()
        let before = try Hashing.sha256(ofFile: store)
        let dry = try ChildProcess.run(Binaries.storectl, ["purge", "--policy", policy, "--dry-run", "--json"], environment: ["TMPDIR": scratch.path])
        #expect(dry.status == 0, "\(dry.stderr)")
        let predicted = try JSON.decoder().decode(Purge.Report.self, from: Data(dry.stdout.utf8))
        #expect(predicted.dryRun && predicted.dryRunNote == nil && predicted.store == store)
        #expect(try Hashing.sha256(ofFile: store) == before, "the dry run changed the store")
        #expect(try FileManager.default.contentsOfDirectory(atPath: scratch.path).isEmpty, "left in TMPDIR")
        let real = try storectl("purge", "--policy", policy, "--json")
        let done = try JSON.decoder().decode(Purge.Report.self, from: Data(real.stdout.utf8))
        #expect(real.status == dry.status)
        #expect(done.rules.count == 3 && predicted.rules.count == 3)
        for (would, did) in zip(predicted.rules, done.rules) {
            #expect(would.deleted == did.deleted && would.cascaded == did.cascaded && would.nullified == did.nullified
                    && would.joinRows == did.joinRows && would.denied == did.denied, "\(would.name): predicted \(would), did \(did)")
        }
        #expect(done.rules[1].nullified.values.reduce(0, +) > 0, "the example must exercise a later rule over an earlier one's deletes")

        // No room in TMPDIR for the copy: counted per rule, and it says so.
        if let small = TempMount(kilobytes: 256) {
            let otherFolder = try TempFolder()
            let other = try makeStore(otherFolder, items: 20_000)
            try Data(example.replacingOccurrences(of: "password_file = \"pw\"", with: "").replacingOccurrences(of: "path = \"Tasks.sqlite\"", with: "path = \"\(other)\"").utf8)
                .write(to: URL(fileURLWithPath: policy))
            let fallback = try ChildProcess.run(Binaries.storectl, ["purge", "--policy", policy, "--dry-run"], environment: ["TMPDIR": small.path])
            #expect(fallback.stdout.contains("note: no room for a scratch copy in \(small.path)"), "\(fallback.stdout)\(fallback.stderr)")
        }
    }

    @Test("purge: another job holding the lock gives 75 at once")
    func lock() throws {
        let folder = try TempFolder()
        let store = try makeStore(folder)
        let path = try policy(folder, store: store)
        let ready = folder.file("locked")
        let holder = try ChildProcess.Running("/bin/sh", ["-c", "exec 9>>'\(store).storectl-lock' && flock -n 9 && touch '\(ready)' && exec sleep 120"])
        defer { holder.signal(SIGKILL); _ = holder.wait() }
        #expect(ChildProcess.waitFor(file: ready))
        let result = try storectl("purge", "--policy", path)
        #expect(result.status == 75)
        #expect(result.stderr.contains("skipped: another job holds the lock"))
    }
}
