import Foundation
import GRDB
import StoreLab
import StoreOps
import Testing

/// Writes `text` as a policy file in `folder`.
func writePolicy(_ text: String, in folder: TempFolder, name: String = "policy.toml") throws -> String {
    let path = folder.file(name)
    try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    return path
}

@Suite("retention policy files")
struct PolicyTests {
    @Test("every example in Policies/ loads and validates")
    func examples() throws {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Policies").path
        let files = try PolicyCheck.files([folder])
        #expect(files.count >= 4)
        for file in files {
            let result = try PolicyCheck.check(file)
            #expect(result.ok, "\(file): \(result.problems)")
            #expect(result.rules >= 1)
        }
    }

    @Test("the Core Data example also validates against a real store, names and delete rules included")
    func coreDataExampleAgainstStore() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Policies/tasks-coredata.toml")
        var text = try String(contentsOf: example, encoding: .utf8)
        text = text.replacingOccurrences(of: "path = \"../demo/Tasks.sqlite\"", with: "path = \"\(store)\"")
        let result = try PolicyCheck.check(try writePolicy(text, in: folder))
        #expect(result.ok && result.checkedAgainstStore, "\(result.problems)")
    }

    @Test("the Notes example validates against a copy of the real Notes store")
    func notesExampleAgainstFixture() throws {
        let folder = try TempFolder()
        let store = try Fixture.notes.copy(into: folder)
        let text = try String(contentsOfFile: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Policies/notes-flag-only.toml").path, encoding: .utf8)
            .replacingOccurrences(of: "/srv/notes/NoteStore.sqlite", with: store)
        let result = try PolicyCheck.check(try writePolicy(text, in: folder))
        #expect(result.ok && result.checkedAgainstStore, "\(result.problems)")
    }

    @Test("a complete policy parses into its parts; relative paths are taken from the file's folder")
    func parsesEverything() throws {
        let folder = try TempFolder()
        let path = try writePolicy("""
            [store]
            path = "Tasks.sqlite"
            busy_timeout = "2s"
            [[purge]]
            name = "items"
            entity = "Item"
            deleted_flag = "ZISDELETED"
            deleted_at = "ZDELETEDAT"
            time_format = "unix_ms"
            retention = "1d12h"
            batch_size = 250
            max_rows = 1000
            max_runtime = "90s"
            pause = "20ms"
            max_fraction = 0.3
            [snapshot]
            repository = "snaps"
            before_purge = true
            compression = "zstd"
            level = 9
            tags = ["nightly"]
            [snapshot.retention]
            keep_last = 2
            keep_within = "3d"
            keep_tags = ["pre-migrate"]
            [schedule]
            purge = "30 3 * * *"
            jitter = "5m"
            log = "jobs.jsonl"
            """, in: folder)
        let policy = try Policy.load(path)
        #expect(policy.store.path == folder.file("Tasks.sqlite"))
        #expect(policy.store.busyTimeout.seconds == 2)
        let rule = try #require(policy.rules.first)
        #expect(rule.name == "items" && rule.target == .entity("Item") && rule.timeFormat == .unixMs)
        #expect(rule.retention?.seconds == 129_600 && rule.batchSize == 250 && rule.maxRows == 1000)
        #expect(rule.maxRuntime?.seconds == 90 && rule.pause == 0.02 && rule.maxFraction == 0.3)
        #expect(rule.line == 4)
        let snapshot = try #require(policy.snapshot)
        #expect(snapshot.repository == folder.file("snaps") && snapshot.beforePurge && snapshot.level == 9)
        #expect(snapshot.retention == RetentionPolicy(last: 2, within: try DurationText.parse("3d").get(), tags: ["pre-migrate"]))
        #expect(policy.schedule?.purge == "30 3 * * *" && policy.schedule?.log == folder.file("jobs.jsonl"))
    }

    @Test("a store given where its policy goes is named as such (65 with the option that takes it), not \"not UTF-8 text\" (a trial: `run snapshot --policy NoteStore.sqlite`)")
    func storeGivenAsPolicy() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 10)
        let error = #expect(throws: StoreOpsError.self) { try Policy.load(store) }
        #expect(error?.status == .badData && error?.message.contains("is an SQLite database, not a policy file") == true && error?.hint?.contains("--policy") == true,
                "\(String(describing: error))")
    }

    @Test("a duration that may be zero takes a bare 0 (a trial wrote keep_safety = 0 and was told it has no unit); any other bare number is still refused (malformed)")
    func zeroDurationNeedsNoUnit() throws {
        let folder = try TempFolder()
        let path = try writePolicy("""
            [store]
            path = "Tasks.sqlite"
            [snapshot]
            repository = "snaps"
            [snapshot.retention]
            keep_last = 2
            keep_safety = 0
            [replicate]
            heartbeat = 0
            """, in: folder)
        let policy = try Policy.load(path)
        #expect(policy.snapshot?.retention?.safety?.seconds == 0)
        #expect(policy.replicate?.heartbeat.seconds == 0)
    }

    @Test("a policy's repository may be an s3:// URL: kept as written, not made a path beside the policy")
    func s3Repository() throws {
        let folder = try TempFolder()
        let path = folder.file("fleet.toml")
        try "[store]\npath = \"Tasks.sqlite\"\n[snapshot]\nrepository = \"s3://fleet/hosts/db-7\"\npassword_file = \"pw\"\n"
            .write(toFile: path, atomically: true, encoding: .utf8)
        #expect(try Policy.load(path).snapshot?.repository == "s3://fleet/hosts/db-7")
    }

    /// Each malformed policy: exit 65, the line and key, what is expected.
    @Test("malformed policies are refused with the line, the key and what is expected", arguments: [
        ("[store]\npath = \"x.sqlite\"\ncolour = \"blue\"", "3: store.colour: unknown key; expected one of: path, busy_timeout"),
        ("[store]\npath = \"x.sqlite\"\n[[purge]]\ntable = \"T\"\ndeleted_at = \"D\"\ntime_format = \"unix\"\nretention = \"30\"",
         "7: purge[0].retention: \"30\" has no unit"),
        ("[store]\npath = \"x.sqlite\"\n[[purge]]\ntable = \"T\"\ndeleted_flag = \"F\"\nbatch_size = \"500\"",
         "6: purge[0].batch_size: expected an integer, got the string \"500\""),
        ("[store]\npath = \"x.sqlite\"\n[[purge]]\ntable = \"T\"\ndeleted_flag = \"F\"\nbatch_size = 0", "6: purge[0].batch_size: 0 is out of range; expected 1...100000"),
        // SQLite takes the busy timeout in milliseconds as an Int32: 30 days trapped in GRDB.
        ("[store]\npath = \"x.sqlite\"\nbusy_timeout = \"30d\"", "3: store.busy_timeout: \"30d\" is longer than"),
        ("[store]\npath = \"x.sqlite\"\n[[purge]]\ntable = \"T\"\ndeleted_at = \"D\"\nretention = \"30d\"",
         "purge[0].time_format: missing: how D stores time"),
        ("[store]\npath = \"x.sqlite\"\n[[purge]]\ntable = \"T\"\ndeleted_at = \"D\"\ntime_format = \"epoch\"\nretention = \"1d\"",
         "6: purge[0].time_format: \"epoch\" is not a time format; expected one of \"coredata\", \"unix\", \"unix_ms\", \"iso8601\""),
        ("[store]\npath = \"x.sqlite\"\n[[purge]]\ntable = \"T\"", "purge[0].deleted_at: missing: name the soft-delete flag column"),
        ("[store]\npath = \"x.sqlite\"\n[[purge]]\ndeleted_flag = \"F\"", "purge[0].table: missing: name the table"),
        ("[store]\npath = \"x.sqlite\"\n[[purge]]\ntable = \"T\"\nentity = \"E\"\ndeleted_flag = \"F\"", "4: purge[0].table: give either table or entity, not both"),
        ("[store]\npath = \"x.sqlite\"\n[[purge]]\ntable = \"T\"\ndeleted_flag = \"F\"\nretention = \"3d\"", "6: purge[0].retention: needs deleted_at"),
        ("[store]\npath = \"x.sqlite\"\n[[purge]]\ntable = \"T\"\ndeleted_flag = \"F\"\nmax_fraction = 1.5", "6: purge[0].max_fraction: 1.5 is out of range"),
        ("[[purge]]\ntable = \"T\"\ndeleted_flag = \"F\"", "store: missing: expected a [store] table"),
        ("[store]\npath = \"x.sqlite\"\n[snapshot]\nbefore_purge = true", "snapshot.repository: missing"),
        ("[store]\npath = \"x.sqlite\"\n[snapshot]\nrepository = \"r\"\n[snapshot.retention]\nkeep_dayly = 3", "6: snapshot.retention.keep_dayly: unknown key"),
        ("[store]\npath = \"x.sqlite\"\n[snapshot]\nrepository = \"r\"\n[snapshot.retention]\nkeep_safety = 3", "6: snapshot.retention.keep_safety: expected a duration string such as \"30d\" (a bare number has no unit), got the integer 3"),
        ("[store]\npath = \"x.sqlite\"\n[snapshot]\nrepository = \"r\"\nlevel = 42", "5: snapshot.level: 42 is out of range for zstd; expected 1...19"),
        ("[store]\npath = \"x.sqlite\"\n[snapshot]\nrepository = \"r\"\ncompression = \"gzip\"", "5: snapshot.compression: \"gzip\": a repository compresses with zstd"),
        ("[store]\npath = = \"x\"", "(syntax)"),
        ("[store]\npath = \"x.sqlite\"\n[replicate]\nsync_interval = \"1s\"", "needs a [snapshot] section naming the repository the points go to"),
        ("[store]\npath = \"x.sqlite\"\n[snapshot]\nrepository = \"r\"\n[replicate]\nkeep_points = \"2d\"\nkeep_point_bases = \"1d\"", "replicate.keep_point_bases: is shorter than keep_points"),
        ("[store]\npath = \"x.sqlite\"\n[snapshot]\nrepository = \"r\"\n[replicate]\nsync_interval = \"10ms\"", "replicate.sync_interval: must be between 50ms and 1h"),
        ("[store]\npath = \"x.sqlite\"\n[snapshot]\nrepository = \"r\"\n[replicate]\nsync = \"1s\"", "replicate.sync"),
    ] as [(String, String)])
    func malformed(_ text: String, _ expected: String) throws {
        let folder = try TempFolder()
        let path = try writePolicy(text, in: folder)
        let error = #expect(throws: StoreOpsError.self) { try Policy.load(path) }
        #expect(error?.status == .badData)
        #expect(error?.message.contains("\(path):") == true)
        #expect(error?.message.contains(expected) == true, "\(error?.message ?? "")")
    }

    @Test("[replicate] left empty, and `replicate` with no options: the documented defaults (sync every 1 s, a base every hour, merges every minute, a heartbeat a minute, a 1 GiB spool, points kept a day)")
    func replicateDefaults() throws {
        let folder = try TempFolder()
        let path = try writePolicy("[store]\npath = \"Tasks.sqlite\"\n[snapshot]\nrepository = \"snaps\"\n[replicate]\n", in: folder)
        let section = try #require(try Policy.load(path).replicate)
        #expect(section.syncInterval.seconds == 1 && section.baseInterval.seconds == 3600 && section.mergeInterval.seconds == 60)
        #expect(section.heartbeat.seconds == 60 && section.keepPoints.seconds == 86_400)
        let fromPolicy = try Replicate.Options.from(policies: [path])
        let plain = Replicate.Options(stores: ["Tasks.sqlite"], repository: "snaps")
        for options in [fromPolicy, plain] {
            #expect(options.syncInterval == 1 && options.baseInterval == 3600 && options.mergeInterval == 60)
            #expect(options.heartbeatInterval == 60 && options.spoolLimit == 1 << 30)
        }
    }

    @Test("[replicate]: defaults, its settings in replicate's options (repository and password from [snapshot]), a service unit for systemd, and points retention for maintain")
    func replicateSection() throws {
        let folder = try TempFolder()
        let path = try writePolicy("""
            [store]
            path = "Tasks.sqlite"
            [snapshot]
            repository = "snaps"
            password_file = "pw"
            [replicate]
            sync_interval = "500ms"
            merge_interval = "0"
            heartbeat = "15s"
            status_file = "status.json"
            spool = "spool"
            spool_limit = "4GiB"
            [schedule]
            metrics = "metrics"
            """, in: folder)
        let policy = try Policy.load(path)
        let section = try #require(policy.replicate)
        #expect(section.spool == folder.file("spool") && section.spoolLimit == 4 << 30)
        #expect(section.syncInterval.seconds == 0.5 && section.baseInterval.seconds == 3600)
        #expect(section.keepPoints.seconds == 86_400 && section.keepPointBases.seconds == 30 * 86_400)
        #expect(section.metrics == folder.file("metrics") && section.statusFile == folder.file("status.json"))
        let options = try Replicate.Options.from(policies: [path])
        #expect(options.stores == [folder.file("Tasks.sqlite")] && options.repository == folder.file("snaps"))
        #expect(options.password == .file(folder.file("pw")) && options.syncInterval == 0.5 && options.statusFile == folder.file("status.json"))
        #expect(options.mergeInterval == 0 && section.mergeInterval.text == "0")
        #expect(options.heartbeatInterval == 15 && section.heartbeat.text == "15s")
        #expect(options.spoolFolder == folder.file("spool") && options.spoolLimit == 4 << 30)
        let badLimit = try writePolicy("[store]\npath = \"b.sqlite\"\n[snapshot]\nrepository = \"snaps\"\n[replicate]\nspool_limit = \"lots\"", in: folder, name: "bad.toml")
        let refused = #expect(throws: StoreOpsError.self) { try Policy.load(badLimit) }
        #expect(refused?.status == .badData && refused?.message.contains("spool_limit") == true && refused?.message.contains("not a size") == true, "\(refused?.message ?? "")")
        let units = SystemdUnits.replicateUnits([policy], executable: "/usr/bin/storectl")
        #expect(units.map(\.name) == ["storectl-policy-replicate.service"])
        #expect(units.first?.contents.contains("ExecStart=/usr/bin/storectl replicate --policy \(path) --quiet") == true, "\(units.first?.contents ?? "")")
        #expect(units.first?.contents.contains("Restart=always") == true)
        let other = try writePolicy("[store]\npath = \"b.sqlite\"\n[snapshot]\nrepository = \"elsewhere\"", in: folder, name: "other.toml")
        let error = #expect(throws: StoreOpsError.self) { try Replicate.Options.from(policies: [path, other]) }
        #expect(error?.status == .usage && error?.message.contains("two repositories") == true)
    }

    @Test("all problems of a file are listed at once")
    func allProblems() throws {
        let folder = try TempFolder()
        let path = try writePolicy("[store]\npath = \"x\"\nfoo = 1\n[[purge]]\ntable = \"T\"\ndeleted_flag = \"F\"\npause = \"soon\"\nbar = 2", in: folder)
        let error = #expect(throws: StoreOpsError.self) { try Policy.load(path) }
        #expect(error?.message.contains("3 problems") == true, "\(error?.message ?? "")")
    }

    @Test("a missing policy file is 66")
    func missingFile() throws {
        let folder = try TempFolder()
        #expect((#expect(throws: StoreOpsError.self) { try Policy.load(folder.file("none.toml")) })?.status == .noInput)
    }
}

@Suite("policies against the store: names are checked, never pasted")
struct PolicySchemaTests {
    func problems(_ rule: String, store: String, folder: TempFolder) throws -> [String] {
        let path = try writePolicy("[store]\npath = \"\(store)\"\n[[purge]]\n\(rule)", in: folder)
        return try PolicyCheck.check(path).problems
    }

    @Test("unknown tables and columns, protected tables, injection attempts", arguments: [
        ("table = \"ZTASK; DROP TABLE ZCATEGORY\"\ndeleted_flag = \"ZISDELETED\"", "no table \"ZTASK; DROP TABLE ZCATEGORY\""),
        ("table = \"ZITEM\\\"; DROP TABLE ZCATEGORY; --\"\ndeleted_flag = \"ZISDELETED\"", "no table"),
        ("table = \"ZNOPE\"\ndeleted_flag = \"ZISDELETED\"", "no table \"ZNOPE\""),
        ("table = \"ZITEM\"\ndeleted_flag = \"ZISDELETED) OR 1=1 --\"", "no column \"ZISDELETED) OR 1=1 --\" in ZITEM"),
        ("table = \"ZITEM\"\ndeleted_flag = \"ZGONE\"", "no column \"ZGONE\" in ZITEM"),
        ("entity = \"Robot\"\ndeleted_flag = \"ZISDELETED\"", "no entity \"Robot\" in Z_PRIMARYKEY; entities:"),
        // A near name is offered (a typo among fifty entities is hard to spot in the list).
        ("entity = \"Itme\"\ndeleted_flag = \"ZISDELETED\"", "no entity \"Itme\" in Z_PRIMARYKEY (did you mean \"Item\"?); entities:"),
        ("table = \"ZITEM\"\ndeleted_flag = \"ZISDELETD\"", "no column \"ZISDELETD\" in ZITEM (did you mean \"ZISDELETED\"?); columns:"),
        ("table = \"ZITME\"\ndeleted_flag = \"ZISDELETED\"", "(did you mean \"ZITEM\"?); tables:"),
        // A mistyped name does not hide the rule's other problems: they are checked against the
        // nearest name, so one round lists them all (a trial needed three rounds).
        ("entity = \"Itme\"\ndeleted_flag = \"ZISDELTED\"", "no column \"ZISDELTED\" in ZITEM (did you mean \"ZISDELETED\"?)"),
        ("entity = \"Itme\"\ndeleted_flag = \"ZISDELTED\"", "no entity \"Itme\" in Z_PRIMARYKEY (did you mean \"Item\"?)"),
        ("table = \"ZITME\"\ndeleted_flag = \"ZGONE\"", "no column \"ZGONE\" in ZITEM"),
        ("table = \"Z_PRIMARYKEY\"\ndeleted_flag = \"Z_MAX\"", "is Core Data's, SQLite's or storectl's own bookkeeping"),
        ("table = \"Z_METADATA\"\ndeleted_flag = \"Z_VERSION\"", "bookkeeping"),
        ("table = \"sqlite_master\"\ndeleted_flag = \"rootpage\"", "no table"),
    ] as [(String, String)])
    func refused(_ rule: String, _ expected: String) throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        let before = try Hashing.sha256(ofFile: store)
        let found = try problems(rule, store: store, folder: folder)
        #expect(found.contains { $0.contains(expected) }, "\(found)")
        #expect(found.allSatisfy { $0.contains(":5: ") || $0.contains(":4: ") }, "the line is given: \(found)")
        #expect(try Hashing.sha256(ofFile: store) == before)
        #expect(try readStore(store) { try $0.tableExists("ZCATEGORY") })
    }

    @Test("names are matched case-insensitively and used with their real spelling")
    func realNames() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder)
        #expect(try problems("table = \"zitem\"\ndeleted_flag = \"zisdeleted\"", store: store, folder: folder).isEmpty)
    }
}
