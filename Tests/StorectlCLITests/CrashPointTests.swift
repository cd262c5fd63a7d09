import Foundation
import GRDB
import StoreLab
import StoreOps
import Synchronization
import Testing

/// One operation's world: a store with commits that live only in its -wal and external data, a
/// snapshot repository, folders for copies, and the operation's own files.
final class CrashFixture: @unchecked Sendable {
    let folder: TempFolder
    let store: String
    let repo: String
    let out: String
    /// TMPDIR of every storectl run: scratch copies left by a killed run show up here.
    let temp: String
    var snapshot = ""
    var extra: [String: String] = [:]
    /// A connection the fixture keeps open (an app that stays up while storectl comes and goes).
    var app: DatabaseQueue?
    /// A `storectl replicate` that follows the store while the operation runs (stopped when the
    /// fixture goes, at the latest).
    var follower: ChildProcess.Running?
    /// The repository's password (it is encrypted).
    let password: PasswordSource
    /// The repository in a folder, or in a bucket of the shared SeaweedFS server (format 2).
    let place: Place
    /// Environment of every storectl run besides the password and TMPDIR (the server, S3 knobs).
    var environment: [String: String] = [:]

    init(items: Int = 300, makeRepository: Bool = true, place: Place = .local, externalFiles: Int = 2) throws {
        self.place = place
        folder = try TempFolder("storectl-crash")
        store = folder.file("Tasks.sqlite")
        var options = SampleStore.Options()
        options.items = items
        options.externalFiles = externalFiles
        // The same store every time: the state after a killed run is compared with the states before
        // and after an uninterrupted run of another fixture.
        options.now = Date(timeIntervalSince1970: 1_780_000_000)
        options.uuid = "0C0FFEE0-0000-4000-8000-000000000000"
        _ = try SampleStore.create(at: store, options: options)
        password = .file(try folder.passwordFile())
        switch place {
        case .local:
            repo = makeRepository ? try folder.repository("snaps", encrypted: true) : folder.file("snaps")
        case .s3:
            var options = RepositoryInit.Options(location: try SharedS3.newLocation("crash"), password: .file(try folder.passwordFile()))
            options.kdfN = 1 << 10
            repo = try RepositoryInit.run(options).location
            environment = try SharedS3.environment()
        }
        out = folder.file("out")
        temp = folder.file("tmp")
        for path in [out, temp] { try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false) }
    }

    /// Commits that only the -wal holds (an app killed after committing).
    func walCommits(_ count: Int) throws {
        let result = try ChildProcess.run(Binaries.lab, ["wal-commits", store, "--count", "\(count)"])
        #expect(result.status == 137 && (FileSystem.size(of: store + "-wal") ?? 0) > 0, "\(result.stderr)")
    }

    /// A new external-data file, so the old and new support folders differ.
    func addExternalFile() throws {
        let path = (StoreFile(unchecked: store).externalDataPath as NSString).appendingPathComponent("ADDED-AFTER-SNAPSHOT")
        try Data("added".utf8).write(to: URL(fileURLWithPath: path))
    }

    deinit { stopFollower() }

    func stopFollower() {
        guard let follower else { return }
        follower.signal(SIGTERM)
        _ = follower.wait()
        self.follower = nil
    }

    func run(_ arguments: [String], _ environment: [String: String] = [:]) throws -> ChildProcess.Result {
        try ChildProcess.run(Binaries.storectl, arguments,
                             environment: self.environment.merging(environment) { $1 }
                                .merging(["TMPDIR": temp, "STORECTL_PASSWORD_FILE": folder.file("password")]) { $1 })
    }

    /// A snapshot of the store by a `storectl snapshot create` child; its id. Not in this process:
    /// here the snapshot's probe would keep a descriptor of the store open for the test process's
    /// life (`FileProbe`), and a child another test spawns holds a copy of it from its fork to its
    /// exec: a restore in place that looked then saw the store "opened by another process" (75;
    /// CI saw it once).
    func createSnapshot() throws -> String {
        let created = try run(["snapshot", "create", store, "--repo", repo, "--json"])
        guard created.status == 0 else { throw StoreOpsError(.failure, "the fixture's snapshot failed (\(created.status)): \(created.stderr)") }
        return try JSON.decoder().decode(SnapshotCreate.Result.self, from: Data(created.stdout.utf8)).id
    }

    func digest(_ path: String? = nil, journalMode: Bool = true) throws -> String {
        try StoreState.digest(path ?? store, journalMode: journalMode)
    }

    /// storectl's temporaries, swap records and aside folders left in `paths` (and their subfolders).
    func leftovers(_ paths: [String]) -> [String] {
        var found: [String] = []
        for path in paths {
            guard let names = FileManager.default.subpaths(atPath: path) else { continue }
            found += names.filter { $0.contains(".tmp-storectl-") || $0.contains(".storectl-swap") || $0.contains(".storectl-gone-") || $0.hasSuffix(".storectl-rollback.json") }.map { "\(path)/\($0)" }
        }
        return found
    }

    /// Every listed snapshot verifies; after the next run, also every blob is indexed and nothing
    /// temporary is left. (A format-1 repository is a convert's source: only read, checked by that
    /// scenario.) Right after the kill only the verify runs: `repo check` takes the repository and
    /// removes what a dead run left (its lock, packs no index names), which is the next run's to
    /// meet and clean, not the test's.
    func expectRepositoryClean(_ point: String, _ phase: String) throws {
        guard place == .s3 || FileSystem.kind(of: (repo as NSString).appendingPathComponent("config")) == .file else { return }
        let verify = try run(["snapshot", "verify", "--repo", repo, "--all"])
        #expect(verify.status == 0, "\(point) \(phase): a listed snapshot does not verify: \(verify.stdout) \(verify.stderr)")
        guard phase == "after the next run" else { return }
        // A damaged catalog entry (a record that does not open) fails both the verify and the check.
        let check = try run(["repo", "check", "--repo", repo, "--json"])
        #expect(check.status == 0, "\(point) \(phase): repo check: \(check.stdout) \(check.stderr)")
        #expect(leftovers([repo]).isEmpty, "\(point): \(leftovers([repo]))")
    }

    /// SHA-256 of every file under `path` but the flock file.
    func files(_ path: String) -> [String: String] {
        var out: [String: String] = [:]
        for name in FileManager.default.subpaths(atPath: path) ?? [] where name != ".lock" {
            let full = (path as NSString).appendingPathComponent(name)
            if FileSystem.kind(of: full) == .file { out[name] = (try? Hashing.sha256(ofFile: full)) ?? "?" }
        }
        return out
    }
}

/// An operation and what must hold when it is killed at any of its fault points.
struct CrashScenario: Sendable, CustomTestStringConvertible {
    /// This scenario under another name, its world prepared further by `prepare` after its own
    /// setup, and the points an uninterrupted run must reach.
    func variant(_ name: String, reaches: [String], _ prepare: @escaping @Sendable (CrashFixture) throws -> Void) -> CrashScenario {
        var scenario = self
        scenario.name = name
        scenario.reaches = reaches
        let setup = self.setup
        scenario.setup = {
            let fixture = try setup()
            try prepare(fixture)
            return fixture
        }
        return scenario
    }

    var name: String
    /// Builds the world before the operation.
    var setup: @Sendable () throws -> CrashFixture
    var command: @Sendable (CrashFixture) -> [String]
    /// The exit status of an uninterrupted run.
    var status: Int32 = 0
    /// Fewer points than this means the trace is broken (a read-only command has few: its scratch copy's).
    var minimumPoints = 5
    /// The state that must be "pre" or "post".
    var observe: @Sendable (CrashFixture) throws -> String
    /// Checked right after the kill, before anything recovers.
    var afterKill: @Sendable (CrashFixture, String) throws -> Void = { _, _ in }
    /// The next run(s): what an operator or the next scheduled job does.
    var next: @Sendable (CrashFixture, Int) throws -> Void
    /// Checked at the end besides pre-or-post, no leftovers and a clean repository.
    var finally: @Sendable (CrashFixture, String) throws -> Void = { _, _ in }
    /// The traced points killed at (all by default). A scenario whose repetitions follow the
    /// clock (a heartbeat) keeps the first ones, which every run reaches.
    var kills: @Sendable (String) -> Bool = { _ in true }
    /// Points an uninterrupted run must reach (what the scenario is there for).
    var reaches: [String] = []
    /// For a world that cannot be copied whole (an app keeps the store open): the paths the runs
    /// write, copied aside after `setup` and put back before each run, the rest (the store the app
    /// holds, which the runs only read) left as `setup` made it. Nil: `setup` for each run.
    var resets: (@Sendable (CrashFixture) -> [String])? = nil
    /// The repository is damaged before the run (what a repair is for): its snapshots are not
    /// expected to verify right after the kill, only after the next run(s).
    var damagedBefore = false

    var testDescription: String { name }
}

/// A scenario's world made once and put back, byte for byte and at the same paths, before each
/// run: the folder is copied aside after `setup`, and each run gets that copy again (the same
/// fixture object, its fields as `setup` left them). A world with an app connection or a follower
/// kept open, or a repository in a bucket, cannot be copied whole: it is made again by `setup` for
/// each run, unless the scenario names what its runs write (`resets`) and only that is put back.
/// (Copied files have new inodes and change times: every run, the traced one included, sees the
/// same copy, so the points listed are the points reached.) Setup was over a third of the crash
/// suite's time (671 -> 389 s alone on 2 cores).
final class CrashWorld {
    private let scenario: CrashScenario
    private let made: CrashFixture?
    /// What is put back: the whole folder, or the paths the runs write.
    private let copied: [String]
    /// `setup`'s first world when it cannot be copied: the first run's.
    private var unused: CrashFixture?
    private let aside: String
    private let snapshot: String, extra: [String: String], environment: [String: String]

    init(_ scenario: CrashScenario) throws {
        self.scenario = scenario
        let fixture = try scenario.setup()
        aside = fixture.folder.path + ".world"
        snapshot = fixture.snapshot
        extra = fixture.extra
        environment = fixture.environment
        let whole = fixture.app == nil && fixture.follower == nil
        guard fixture.place == .local, fixture.follower == nil, whole || scenario.resets != nil,
              ProcessInfo.processInfo.environment["STORECTL_CRASH_SETUP_EACH"] == nil else {
            made = nil; copied = []; unused = fixture; return
        }
        copied = whole ? [fixture.folder.path] : (scenario.resets?(fixture) ?? []) + [fixture.out, fixture.temp]
        try FileManager.default.createDirectory(atPath: aside, withIntermediateDirectories: false)
        for (index, path) in copied.enumerated() {
            let result = try ChildProcess.run("/bin/cp", ["-a", path, (aside as NSString).appendingPathComponent("\(index)")])
            guard result.status == 0 else { throw StoreOpsError(.failure, "copying \(path): \(result.stderr)") }
        }
        made = fixture
    }

    deinit { if made != nil { try? FileManager.default.removeItem(atPath: aside) } }

    /// The world as `setup` made it.
    func fresh() throws -> CrashFixture {
        guard let made else {
            defer { unused = nil }
            return try unused ?? scenario.setup()
        }
        for (index, path) in copied.enumerated() {
            if FileSystem.kind(of: path) != .missing { try FileManager.default.removeItem(atPath: path) }
            let result = try ChildProcess.run("/bin/cp", ["-a", (aside as NSString).appendingPathComponent("\(index)"), path])
            guard result.status == 0 else { throw StoreOpsError(.failure, "putting \(path) back: \(result.stderr)") }
        }
        made.snapshot = snapshot
        made.extra = extra
        made.environment = environment
        return made
    }
}

/// Which fault points the scenarios reach, and which the library names.
enum CrashCoverage {
    /// Every point an uninterrupted run of a scenario reached (names without `#k`).
    static let reached = Mutex<Set<String>>([])

    /// Points no scenario kills at, and why that is right. Each is named in the library and
    /// reached by no uninterrupted scenario run (so a kill there is never tested); the test fails
    /// when one of these gets a scenario (take it off) or a new point has none (give it one).
    static let withoutScenario: [String: String] = [
        // Taken only after something went wrong, on the way back (each path has tests of its own;
        // a kill there leaves what the step before it left, which its next run meets as after a
        // kill at that step).
        "snapshot.abandon.index": "a create or a safety snapshot that failed takes its index back (S3ServerTests.serverGoneMidSnapshot)",
        "snapshot.abandon.pack": "the same, its packs",
        "replicate.opening.undo": "a base whose chain opening could not be written is taken back (a failing write)",
        "restore.safety.forget": "an in-place restore that failed after its safety snapshot forgets that snapshot",
        "swap.undo.\\(step.role)": "a swap undone: a failure between its renames (StoreSwapTests); recovery after a kill goes forward, not back",
        "swap.undo.sync": "the same",
        "swap.undo.aside": "the same",
        "swap.intruder": "a file an app made under the store's name after a crash, moved aside by recovery (StoreSwapTests)",
        "swap.keep.intruder": "the same, kept beside the store",
        // Reached by the run after a kill (what the dead run left), which the crash test checks, not
        // by an uninterrupted run, whose points are the ones killed at.
        "stale.remove": "a dead process's temporary removed (every scenario's next run meets them)",
        "swap.gone.empty": "a disposal's marked folder a kill left after its record went, emptied by the next run (StoreSwapTests.emptiedFolderLeft)",
        "swap.gone.remove": "the same, removed",
        "cleanup.pack.remove-unindexed": "packs no index names, left by a killed create (its next run removes them: snapshot create's scenario checks none is left)",
        "prune.pack.remove-unindexed": "the same, by prune",
        "replicate.merge.tidy": "segments a merge killed before its removals left (replicate (merge)'s next run)",
        "repo.init.leftover": "what a killed `repo init` left under an S3 prefix (its next run)",
        "restore.database.wal-cleanup": "a -wal or -shm a killed restore left beside its target",
        // Conditions a scenario's world does not have.
        "diff.scratch.sidecar.remove": "a scratch copy's -wal/-shm, when SQLite leaves them (it does not for these copies)",
        "migrate.dry-run.sidecar.remove": "the same, migrate --dry-run's copies",
        "purge.dry-run.copy.sidecar.remove": "the same, purge --dry-run's copy",
        "restore.external-subfolder": "an external-data file in a subfolder (Core Data writes them flat)",
        "lock.refresh": "the repository lock rewritten every few minutes of a long operation (the scenarios take seconds)",
        "cache.drop": "an S3 cache copy whose SHA-256 does not match, removed (only saves requests; S3ServerTests)",
        "cache.folder": "the S3 cache's folders, made once per machine, before the crash test's S3 scenarios",
        "verify.scratch": "`snapshot verify`'s scratch restore in TMPDIR (the crash test runs a verify after every kill, not traced), never renamed into place; a killed verify's is removed by the next (removeStale)",
        "replicate.status": "replicate's status file, a PendingFile rewritten as it runs; a killed run's temporary is removed at the next start (ReplicateTests.killedStatusWriteLeavesNothing)",
        "replicate.metrics": "the same, its metrics file",
    ]

    /// The fault points the library names, as patterns over the names a trace lists: the literal
    /// of every `reach("…")` and `point: "…"`, and every `PendingFile`'s `label: "…"` (its steps
    /// are `label.create`, `.sync`, `.rename`, …); an interpolation stands for any text. A traced
    /// name is the pattern's when it is the pattern or a step under it (`pattern.…`).
    static func named(in root: String) throws -> [String: Regex<AnyRegexOutput>] {
        // Every `label: "…"` but the loggers', queues' and connections' (`storectl.…`), and names
        // kept for a later step (`work.recordPoint = "…"`).
        let literal = try Regex(#"(?:reach\(|(?:^|[^A-Za-z])point: |[A-Za-z]Point = |(?:^|[^A-Za-z])label: )"((?:[^"\\]|\\.)*)""#)
        let interpolation = try Regex(#"\\\([^)]*\)"#)
        var out: [String: Regex<AnyRegexOutput>] = [:]
        for relative in FileManager.default.subpaths(atPath: root) ?? [] where relative.hasSuffix(".swift") {
            let text = try String(contentsOfFile: (root as NSString).appendingPathComponent(relative), encoding: .utf8)
            for match in text.matches(of: literal) {
                guard let name = match.output[1].substring.map(String.init), !name.isEmpty else { continue }
                // Built from another name (FileSystem's and PendingFile's own steps): that one is the point.
                if name.hasPrefix("\\(") || name.hasPrefix("storectl.") { continue }
                var pattern = ""
                var rest = Substring(name)
                while let found = rest.firstMatch(of: interpolation) {
                    pattern += NSRegularExpression.escapedPattern(for: String(rest[..<found.range.lowerBound])) + ".+"
                    rest = rest[found.range.upperBound...]
                }
                pattern += NSRegularExpression.escapedPattern(for: String(rest))
                out[name] = try Regex("^" + pattern + #"(\..+)?$"#)
            }
        }
        return out
    }
}

/// Lists the fault points an uninterrupted run of `scenario` reaches (the program lists them
/// itself, through STORECTL_FAULT_TRACE), then kills a fresh run at each one with SIGKILL.
func exhaust(_ scenario: CrashScenario) throws -> Int {
    let world = try CrashWorld(scenario)
    let traced = try world.fresh()
    let pre = try scenario.observe(traced)
    let trace = traced.folder.file("trace")
    let run = try traced.run(scenario.command(traced), ["STORECTL_FAULT_TRACE": trace])
    #expect(run.status == scenario.status, "\(scenario.name): \(run.stderr)")
    let post = try scenario.observe(traced)
    let traceLines = ((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    let points = traceLines.filter(scenario.kills)
    // The points killed at (a scenario's `kills` may leave some of its trace out).
    CrashCoverage.reached.withLock { $0.formUnion(points.map { String($0.split(separator: "#").first ?? "") }) }
    #expect(points.count >= scenario.minimumPoints, "\(scenario.name): \(points)")
    for point in scenario.reaches { #expect(points.contains { $0.hasPrefix(point + "#") }, "\(scenario.name) never reached \(point): \(points)") }

    var clock = ContinuousClock.now, spent: [String: Duration] = [:]
    func lap(_ phase: String) { let now = ContinuousClock.now; spent[phase, default: .zero] += now - clock; clock = now }
    defer {
        if ProcessInfo.processInfo.environment["STORECTL_CRASH_TIMING"] != nil {
            print("crash timing: \(scenario.name): " + spent.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
                  + "; points: " + Dictionary(grouping: points, by: { String($0.split(separator: "#").first ?? "") }).map { "\($0.key) x\($0.value.count)" }.sorted().joined(separator: ", "))
        }
    }
    for (index, point) in points.enumerated() {
        clock = ContinuousClock.now
        let fixture = try world.fresh()
        lap("setup")
        let killed = try fixture.run(scenario.command(fixture), ["STORECTL_FAULT_POINT": point])
        lap("killed")
        #expect(killed.status == 137, "\(scenario.name): not killed at \(point) (the point list is stale?): \(killed.status) \(killed.stderr)")
        try scenario.afterKill(fixture, point)
        if !scenario.damagedBefore { try fixture.expectRepositoryClean(point, "right after the kill") }
        lap("afterKill")
        try scenario.next(fixture, index)
        lap("next")
        fixture.extra["newestPoint"] = nil   // what `observe` finds now, `finally` may reuse (`expectNewestIsStore`)
        let state = try scenario.observe(fixture)
        lap("observe")
        #expect(state == pre || state == post, "\(scenario.name): killed at \(point), the state after the next run is neither before nor after")
        #expect(fixture.leftovers([fixture.folder.path, fixture.out, fixture.temp]).isEmpty,
                "\(scenario.name) \(point): \(fixture.leftovers([fixture.folder.path, fixture.out, fixture.temp]))")
        try fixture.expectRepositoryClean(point, "after the next run")
        try scenario.finally(fixture, point)
        lap("finally")
    }
    return points.count
}

/// Runs a command that must succeed.
@discardableResult
func ok(_ fixture: CrashFixture, _ arguments: [String], status: Int32 = 0, _ point: Int) throws -> ChildProcess.Result {
    var result = try fixture.run(arguments)
    // Refused because another process had the store open, nothing changed (CI once: a process of
    // the test run's own, not storectl's, that had the store's file open during a rollback's
    // look): what an operator does then, once, a second later. Twice is a failure.
    if result.status == 75, status != 75, result.stderr.contains("nothing was changed") {
        print("crash points: point \(point): \(arguments.first ?? "") refused (75), run again: \(result.stderr.prefix(300))")
        usleep(1_000_000)
        result = try fixture.run(arguments)
    }
    #expect(result.status == status, "point \(point): \(arguments.joined(separator: " ")): \(result.stdout) \(result.stderr)")
    return result
}

/// A backup (or restored file) with its final name is complete: manifest or support folder
/// present, database matching.
func expectComplete(_ copy: String, content: String?, external: Int, _ point: String) throws {
    guard FileSystem.kind(of: copy) == .file else { return }
    let support = StoreFile(unchecked: copy).externalDataPath
    let files = (try? FileManager.default.contentsOfDirectory(atPath: support)) ?? []
    #expect(files.count == external, "\(point): \(copy) has its final name but \(files.count) of \(external) external files")
    let manifest = (FileSystem.parent(of: copy) as NSString)
        .appendingPathComponent((FileSystem.name(of: copy) as NSString).deletingPathExtension + ".manifest.json")
    if copy.contains("/backup") {
        let data = try #require(FileManager.default.contents(atPath: manifest), "\(point): \(copy) has its final name but no manifest")
        let decoded = try JSON.decoder().decode(Manifest.self, from: data)
        #expect(decoded.database.sha256 == (try Hashing.sha256(ofFile: copy)), "\(point)")
    }
    if let content { #expect(try StoreState.digest(copy, journalMode: false) == content, "\(point): \(copy) holds other data") }
}

enum Scenarios {
    static let migrations = [
        "0001_add_label.sql": "ALTER TABLE ZITEM ADD COLUMN ZLABEL VARCHAR;\nUPDATE ZITEM SET ZLABEL = 'p' || ZPRIORITY;",
        "0001_add_label.verify.sql": "SELECT count(*) = 0 FROM ZITEM WHERE ZLABEL IS NULL;",
        "0002_index.sql": "CREATE INDEX ZITEM_ZLABEL_INDEX ON ZITEM (ZLABEL);",
    ]

    /// A store migrated by `migrations`, one run per target (nil: every migration).
    static func migrated(runs targets: [Int?] = [nil]) throws -> CrashFixture {
        let fixture = try CrashFixture()
        try writeMigrations(fixture, failing: false)
        var options = Migrate.Options(store: fixture.store, migrations: fixture.extra["migrations"]!, repository: fixture.repo)
        options.password = fixture.password
        for target in targets {
            options.to = target
            #expect(try Migrate.run(options).status == .ok)
        }
        return fixture
    }

    static func writeMigrations(_ fixture: CrashFixture, failing: Bool) throws {
        let folder = fixture.folder.file("migrations")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
        var files = migrations
        if failing { files["0002_index.sql"] = "CREATE INDEX ZITEM_ZLABEL_INDEX ON ZITEM (ZLABEL);\nINSERT INTO no_such_table VALUES (1);" }
        for (name, sql) in files { try Data(sql.utf8).write(to: URL(fileURLWithPath: (folder as NSString).appendingPathComponent(name))) }
        fixture.extra["migrations"] = folder
    }

    static func storeWithSnapshot(place: Place = .local) throws -> CrashFixture {
        let fixture = try CrashFixture(place: place)
        fixture.snapshot = try fixture.createSnapshot()
        fixture.extra["snapshotContent"] = try fixture.digest(journalMode: false)
        return fixture
    }

    /// What a restore in place replaces: a store with a snapshot, then commits still in its
    /// `-wal` and an external-data file the snapshot does not have.
    static func storeChangedSinceSnapshot() throws -> CrashFixture {
        let fixture = try storeWithSnapshot()
        try fixture.walCommits(150)
        try fixture.addExternalFile()
        return fixture
    }

    /// The repository's operations first: they hold the longest scenarios (convert's 107 points,
    /// replicate's), and the two threads finish together when the long ones start early.
    static let all: [CrashScenario] = paged + store + small + (Place.all.contains(.s3) ? remote : [])

    /// The repository's own operations: create, restore both ways, prune with its garbage
    /// collection, import, convert.
    static let paged: [CrashScenario] = [pagedCreate(.local), pagedRestore(.local), restoreInPlace, restoreLive, pagedPrune(.local), importArchive, convert,
                                         replicateBase, replicateResume, replicateSpooled, replicateOutbox, replicateKept, replicateMerge, replicateAlive, pointRestore, pointRestoreInPlace,
                                         prunePoints]

    /// `snapshot restore --at --to` of a point whose segment carries an external-data file the
    /// chain's base does not have (written, then a commit naming it, then followed). The world is
    /// made once (two replicate runs with the app up between them) and copied for every point.
    static let pointTemplate = Result { () throws -> (fixture: CrashFixture, at: String, content: String) in
        let fixture = try CrashFixture()
        try fixture.walCommits(20)
        let app = try followedApp(fixture, replicating(fixture))
        try fixture.addExternalFile()
        try app.inDatabase { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'names ADDED-AFTER-SNAPSHOT' WHERE Z_PK = 2") }
        try ok(fixture, replicating(fixture), 0)
        try app.close()
        fixture.app = nil
        let stores = try StorePoints.list(repository: fixture.repo, password: fixture.password)
        guard let newest = stores.first?.spans.last(where: { $0.kind == "covered" })?.to else { throw StoreOpsError(.failure, "replicate recorded no point") }
        return (fixture, Timestamp.iso(newest), try fixture.digest(journalMode: false))
    }

    /// A copy of `pointTemplate`'s world, every page of a point going through the scratch file.
    static func pointFixture() throws -> CrashFixture {
        let template = try pointTemplate.get()
        let fixture = try CrashFixture(makeRepository: false)
        // No page held in memory: every one goes through the unnamed scratch file (`OverlayPages`).
        fixture.environment["STORECTL_TEST_POINT_MEMORY_BYTES"] = "0"
        // The template's store (its -wal, -shm and support folder) and repository in place of the fresh ones.
        for path in [fixture.store, fixture.store + "-wal", fixture.store + "-shm", StoreFile.supportPath(forDatabase: fixture.store)]
        where FileManager.default.fileExists(atPath: path) { try FileManager.default.removeItem(atPath: path) }
        for (from, to) in [(template.fixture.store, fixture.store), (template.fixture.repo, fixture.repo)]
            + ["-wal", "-shm"].map({ (template.fixture.store + $0, fixture.store + $0) })
            + [(StoreFile.supportPath(forDatabase: template.fixture.store), StoreFile.supportPath(forDatabase: fixture.store))]
        where FileManager.default.fileExists(atPath: from) { try FileManager.default.copyItem(atPath: from, toPath: to) }
        fixture.extra["at"] = template.at
        fixture.extra["pointContent"] = template.content
        fixture.extra["pointStore"] = template.fixture.store   // the store the points are of (this copy is at another path)
        return fixture
    }

    /// `snapshot restore --at --in-place`: the store, changed since the point (a commit), put
    /// back to the point (its external-data files too) through the same swap as a snapshot's.
    /// Killed anywhere, the store is as it was or the point; `recover` or the next command ends it.
    static let pointRestoreInPlace = CrashScenario(
        name: "snapshot restore --at --in-place (the store changed since the point)",
        setup: {
            let fixture = try pointFixture()
            let queue = try DatabaseQueue(path: fixture.store)
            try queue.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'changed after the point' WHERE Z_PK = 3") }
            try queue.close()
            fixture.extra["changedContent"] = try fixture.digest(journalMode: false)
            #expect(fixture.extra["changedContent"] != fixture.extra["pointContent"], "the store did not change after the point")
            return fixture
        },
        command: { ["snapshot", "restore", "--repo", $0.repo, "--at", $0.extra["at"]!, "--store", $0.extra["pointStore"]!, "--in-place", $0.store] },
        observe: { try $0.digest() },
        next: { fixture, index in
            if index % 2 == 0 {
                try ok(fixture, ["recover", fixture.store], index)
            } else {
                // The operator runs it again: it clears what the killed one left beside the store, and ends with the point.
                try ok(fixture, ["snapshot", "restore", "--repo", fixture.repo, "--at", fixture.extra["at"]!, "--store", fixture.extra["pointStore"]!,
                                 "--in-place", fixture.store], index)
                #expect(try fixture.digest(journalMode: false) == fixture.extra["pointContent"], "point \(index): the restore run again did not end at the point")
            }
        },
        finally: { fixture, point in
            #expect(try readJournalMode(fixture.store) == "wal", "\(point): the store is no longer in WAL mode")
            let check = try DatabaseQueue(path: fixture.store).read { try String.fetchAll($0, sql: "PRAGMA quick_check") }
            #expect(check == ["ok"], "\(point): \(check)")
            let content = try fixture.digest(journalMode: false)
            #expect(content == fixture.extra["pointContent"] || content == fixture.extra["changedContent"], "\(point): the store is neither the point nor as it was")
        })

    static let pointRestore = CrashScenario(
        name: "snapshot restore --at --to (a point whose segment carries an external-data file; its pages through the scratch file)",
        setup: { try pointFixture() },
        command: { ["snapshot", "restore", "--repo", $0.repo, "--at", $0.extra["at"]!, "--to", $0.out + "/restored.sqlite"] },
        observe: { try $0.digest() },
        afterKill: { fixture, point in try expectComplete(fixture.out + "/restored.sqlite", content: fixture.extra["pointContent"], external: 3, point) },
        next: { fixture, index in
            try recoverRestore(fixture, target: fixture.out + "/restored.sqlite", index)
            try ok(fixture, ["snapshot", "restore", "--repo", fixture.repo, "--at", fixture.extra["at"]!, "--to", fixture.out + "/again.sqlite"], index)
        },
        finally: { fixture, point in
            try expectComplete(fixture.out + "/restored.sqlite", content: fixture.extra["pointContent"], external: 3, point)
            try expectComplete(fixture.out + "/again.sqlite", content: fixture.extra["pointContent"], external: 3, point)
            #expect(FileSystem.kind(of: fixture.out + "/again.sqlite") == .file, "\(point): the next restore made its file")
        })

    /// The newest point the repository holds, restored and digested ("none" without points);
    /// kept in `extra["newestPoint"]` until the next observation (nothing writes in between).
    static func newestPoint(_ fixture: CrashFixture) throws -> String {
        let found = try restoredNewestPoint(fixture)
        fixture.extra["newestPoint"] = found
        return found
    }

    private static func restoredNewestPoint(_ fixture: CrashFixture) throws -> String {
        let stores = try StorePoints.list(repository: fixture.repo, password: fixture.password)
        guard let span = stores.first?.spans.last(where: { $0.kind == "covered" }), let to = span.to else { return "none" }
        let target = fixture.out + "/point-\(UUID().uuidString.prefix(8)).sqlite"
        let restored = try fixture.run(["snapshot", "restore", "--repo", fixture.repo, "--at", Timestamp.iso(to), "--to", target])
        #expect(restored.status == 0, "\(restored.stderr)")
        defer {
            try? FileManager.default.removeItem(atPath: target)
            try? FileManager.default.removeItem(atPath: StoreFile.supportPath(forDatabase: target))
        }
        return try fixture.digest(target, journalMode: false)
    }

    /// `replicate` for 100 ms (a base, or a resume, then the drain: the same steps however long): the command, and the next run an operator (or systemd) makes.
    static func replicating(_ fixture: CrashFixture) -> [String] { ["replicate", fixture.store, "--repo", fixture.repo, "--for", "100ms", "--quiet"] }

    /// The app stays up (its connection keeps the wal-index from before storectl's first run, so
    /// each later run can take the chain up), commits once, and `replicate` follows it once.
    static func followedApp(_ fixture: CrashFixture, _ replicate: [String]) throws -> DatabaseQueue {
        let app = try DatabaseQueue(path: fixture.store)
        fixture.app = app
        try app.inDatabase { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = ZTITLE || '.' WHERE Z_PK = 1") }
        try ok(fixture, replicate, 0)
        return app
    }

    /// An app followed by `replicate` without merges, then two more runs after `commitsPerRun`
    /// commits each: a chain of unmerged segments. The app (left open) and the replicate command.
    static func followedUnmerged(_ fixture: CrashFixture, commitsPerRun: Int) throws -> (app: DatabaseQueue, replicate: [String]) {
        let unmerged = ["replicate", fixture.store, "--repo", fixture.repo, "--for", "100ms", "--quiet", "--merge-interval", "0"]
        let app = try followedApp(fixture, unmerged)
        for run in 0..<2 {
            for k in 0..<commitsPerRun {
                try app.inDatabase { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = ZTITLE || ? WHERE Z_PK = ?", arguments: ["\(run)", k + 1]) }
            }
            try ok(fixture, unmerged, 0)
        }
        return (app, unmerged)
    }

    /// After the next run the newest point is the store as it is.
    static func expectNewestIsStore(_ fixture: CrashFixture, _ point: String) throws {
        // The observation just made after the next run when it was this one (a restore less a point).
        let newest = try fixture.extra["newestPoint"] ?? newestPoint(fixture), store = try fixture.digest(journalMode: false)
        #expect(newest == store, "\(point): the newest point is the store")
    }

    /// A first `replicate` of a store: its base, the chain's opening, the stop marker.
    static let replicateBase = CrashScenario(
        name: "replicate (base)",
        setup: {
            let fixture = try CrashFixture()
            try fixture.walCommits(40)
            return fixture
        },
        command: { replicating($0) },
        observe: { try newestPoint($0) },
        next: { fixture, index in try ok(fixture, replicating(fixture), index) },
        finally: { fixture, point in try expectNewestIsStore(fixture, point) })

    /// The same with every waiting commit's pages in the spool file (no memory for them), read
    /// back for the segment: the spool file's creation is a fault point too, and nothing of it is
    /// left behind.
    static let replicateSpooled = replicateResume.variant("replicate (resume, commits through the spool file)", reaches: ["replicate.spool.create"]) {
        $0.environment["STORECTL_TEST_SPOOL_MEMORY_BYTES"] = "0"
    }

    /// The same with every segment going through the outbox (kept on disk, written, its file
    /// removed), as while the repository fails: killed anywhere, the next run writes what was
    /// kept first (or finds it written and removes the file) and takes the chain up after it.
    static let replicateOutbox = replicateResume.variant("replicate (resume, segments through the outbox)",
                                                         reaches: ["replicate.outbox.rename", "replicate.outbox.remove"]) {
        $0.environment["STORECTL_TEST_OUTBOX_ALWAYS"] = "1"
    }

    /// A start with a segment an earlier run kept (killed after keeping it, before writing it):
    /// the write of what was kept and the removal of its file, then the chain taken up after it.
    static let replicateKept = replicateOutbox.variant("replicate (a start with a kept segment: written first, its file removed)",
                                                       reaches: ["replicate.outbox.send.rename", "replicate.outbox.remove"]) { fixture in
        let killed = try fixture.run(replicating(fixture), ["STORECTL_FAULT_POINT": "replicate.outbox.sync-folder#1"])
        #expect(killed.status == 137, "the run that keeps a segment was not killed: \(killed.status) \(killed.stderr)")
        let kept = (FileManager.default.subpaths(atPath: fixture.temp) ?? []).filter { $0.hasPrefix("storectl-outbox-") && $0.split(separator: "/").count == 2 }
        #expect(kept.count == 1, "one segment kept: \(kept)")
    }

    /// `replicate` taking up a chain after commits it has not seen: the resume marker, the
    /// segment with the commits, the stop marker. Killed anywhere, the next run takes the chain
    /// up again from its last durable segment: no point missing, none twice.
    static let replicateResume = CrashScenario(
        name: "replicate (resume, commits)",
        setup: {
            let fixture = try CrashFixture()
            // The app commits while storectl is stopped.
            let app = try followedApp(fixture, ["replicate", fixture.store, "--repo", fixture.repo, "--for", "100ms", "--quiet"])
            for k in 0..<40 {
                try app.inDatabase { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = ZTITLE || ? WHERE Z_PK = ?", arguments: ["+", k + 1]) }
            }
            return fixture
        },
        command: { replicating($0) },
        observe: { try newestPoint($0) },
        next: { fixture, index in try ok(fixture, replicating(fixture), index) },
        finally: { fixture, point in
            try expectNewestIsStore(fixture, point)
            let repository = try PagedRepository.open(at: fixture.repo, password: fixture.password)
            let chains = try PointTimeline.load(repository).chains
            #expect(chains.count == 1, "\(point): the chain was taken up, not begun again: \(chains.map(\.id))")
            var next = 1
            for segment in chains.first?.segments.dropFirst() ?? [] {
                #expect(segment.from == next, "\(point): a segment starts at \(segment.from), expected \(next)")
                next = segment.to + 1
            }
            #expect(next - 1 == 40, "\(point): \(next - 1) points, the 40 commits expected")
        },
        // The app keeps the store open and idle; the runs only read it.
        resets: { [$0.repo] })

    /// `replicate` taking up a chain that earlier short runs left in two segments: it merges
    /// them into one (written, read back, then the two removed) before following on, then writes
    /// the merge's digest and a milestone over it (a milestone after every digest here). Killed
    /// anywhere, the next run reads the same points (the newest through the milestone when it
    /// was written), and leaves no segment a merge made redundant.
    static let replicateMerge = CrashScenario(
        name: "replicate (merge, digest, milestone)",
        setup: {
            let fixture = try CrashFixture()
            fixture.environment["STORECTL_TEST_MILESTONE_RANK"] = "1"

            _ = try followedUnmerged(fixture, commitsPerRun: 5)
            return fixture
        },
        command: { replicating($0) },
        minimumPoints: 80,   // the merge's 60 (stop 40), then the milestone's 24
        observe: { try newestPoint($0) },
        next: { fixture, index in try ok(fixture, replicating(fixture), index) },
        finally: { fixture, point in
            try expectNewestIsStore(fixture, point)
            let repository = try PagedRepository.open(at: fixture.repo, password: fixture.password)
            let chains = try PointTimeline.load(repository).chains
            #expect(chains.count == 1, "\(point): \(chains.map(\.id))")
            let segments = chains.first?.segments.dropFirst() ?? []
            #expect(segments.map(\.level) == [PointMerge.level] && segments.first?.to == 10, "\(point): \(segments.map(\.key))")
            #expect(chains.first?.redundant.isEmpty == true, "\(point): left \(chains.first?.redundant.map(\.key) ?? [])")
            // Killed before its marker: no milestone (a record without one is prune's); else the one, over points 1-10.
            #expect((chains.first?.milestones ?? []).allSatisfy { $0.from == 1 && $0.to == 10 } && (chains.first?.milestones.count ?? 0) <= 1,
                    "\(point): \(chains.first?.milestones.map(\.key) ?? [])")
        },
        resets: { [$0.repo] })

    static func thinning(_ fixture: CrashFixture) -> [String] {
        ["snapshot", "prune", "--repo", fixture.repo, "--keep-last", "5", "--keep-points", "1s", "--keep-point-minutes", "1d", "--keep-point-bases", "2d"]
    }

    /// `snapshot prune --keep-points 1s`: an older chain (a gap began a newer one) thinned to the
    /// last commit of each minute (the thinned segment written, then the segments it replaces
    /// removed); the newest chain is left whole. Killed anywhere, the same prune again ends with
    /// the chain thinned, every listed point restorable (verify), and no segment left over.
    static let prunePoints = CrashScenario(
        name: "snapshot prune --keep-points (an older chain thinned)",
        setup: {
            let fixture = try CrashFixture()
            let (app, unmerged) = try followedUnmerged(fixture, commitsPerRun: 3)
            // Commits no follower saw, the -wal truncated: the next run starts a second chain.
            try app.inDatabase { db in
                try db.execute(sql: "UPDATE ZITEM SET ZTITLE = ZTITLE || 'unseen' WHERE Z_PK = 4")
                _ = try Row.fetchAll(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)")
            }
            try app.inDatabase { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = ZTITLE || 'second' WHERE Z_PK = 5") }
            try ok(fixture, unmerged, 0)
            try app.close()
            fixture.app = nil
            usleep(1_100_000)   // the first chain's commits are older than --keep-points
            return fixture
        },
        command: { thinning($0) },
        observe: { fixture in
            try StorePoints.list(repository: fixture.repo, password: fixture.password).flatMap(\.spans)
                .map { "\($0.kind) \(Timestamp.iso($0.from))-\($0.to.map(Timestamp.iso) ?? "")" }.joined(separator: ", ")
        },
        next: { fixture, index in
            try ok(fixture, thinning(fixture), index)
        },
        finally: { fixture, point in
            let spans = try StorePoints.list(repository: fixture.repo, password: fixture.password).flatMap(\.spans).map(\.kind)
            #expect(spans.first == "thinned" && spans.contains("covered"), "\(point): \(spans)")
            let repository = try PagedRepository.open(at: fixture.repo, password: fixture.password)
            let chains = try PointTimeline.load(repository).chains
            #expect(chains.count == 2 && chains.allSatisfy { $0.redundant.isEmpty }, "\(point): \(chains.map { "\($0.id) left \($0.redundant.map(\.key))" })")
            try expectNewestIsStore(fixture, point)
        },
        reaches: ["prune.points.thin.rename", "prune.points.remove"],
        resets: { [$0.repo] })

    /// `replicate` following an idle store with a heartbeat of 100 ms: alive markers, each
    /// written and the one before it removed. Killed at the first two writes and the first
    /// removal (the run's count follows the clock; its other points are replicateResume's), the
    /// chain claims no later time than a marker or point that is there: with the app committing
    /// after the kill, that time restores to the store before the commit and a later one is
    /// refused (66); the next run takes the chain up, its newest point the store as it is.
    static let replicateAlive = CrashScenario(
        name: "replicate (idle: alive markers)",
        setup: {
            let fixture = try CrashFixture()
            // The app stays up and idle (its connection keeps the wal-index, so each run can take the chain up).
            _ = try followedApp(fixture, replicating(fixture))
            return fixture
        },
        command: { ["replicate", $0.store, "--repo", $0.repo, "--for", "3s", "--sync-interval", "100ms", "--heartbeat", "100ms", "--quiet"] },
        minimumPoints: 3,
        // The app commits after each kill (below), so the newest point moves by design: what is
        // checked is the claim, right after the kill, and the next run's newest point.
        observe: { _ in "the claim is checked after the kill" },
        afterKill: { fixture, point in
            let repository = try PagedRepository.open(at: fixture.repo, password: fixture.password)
            let chain = try #require(PointTimeline.load(repository).chains.last, "\(point): the chain is there")
            #expect(chain.alive.count <= 2, "\(point): \(chain.alive.map(\.key))")
            // The app commits after the follower died: the time the chain claims restores to the
            // store before that commit, and a later time is refused (66), not answered with it.
            let before = try fixture.digest(journalMode: false)
            try fixture.app?.inDatabase { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = ZTITLE || ' after the kill' WHERE Z_PK = 3") }
            let target = fixture.out + "/confirmed.sqlite"
            let restored = try fixture.run(["snapshot", "restore", "--repo", fixture.repo, "--at", Timestamp.iso(Date(timeIntervalSince1970: Double(chain.confirmedUntil) / 1000)), "--to", target])
            #expect(restored.status == 0, "\(point): the confirmed time restores: \(restored.stderr)")
            #expect(try fixture.digest(target, journalMode: false) == before, "\(point): to the store as it was then")
            try? FileManager.default.removeItem(atPath: target)
            try? FileManager.default.removeItem(atPath: StoreFile.supportPath(forDatabase: target))
            let later = try fixture.run(["snapshot", "restore", "--repo", fixture.repo, "--at", Timestamp.iso(Date()), "--to", target])
            #expect(later.status == 66 && FileSystem.kind(of: target) == .missing, "\(point): a time after the claim: \(later.status) \(later.stderr)")
        },
        next: { fixture, index in try ok(fixture, replicating(fixture), index) },
        finally: { fixture, point in
            try expectNewestIsStore(fixture, point)
            let repository = try PagedRepository.open(at: fixture.repo, password: fixture.password)
            let chains = try PointTimeline.load(repository).chains
            #expect(chains.count == 1, "\(point): the chain was taken up, not begun again: \(chains.map(\.id))")
        },
        kills: { point in
            let parts = point.split(separator: "#")
            guard parts.count == 2, let k = Int(parts[1]) else { return true }
            // The resume and the stop are replicateResume's; here the markers' own points: every
            // step of the first marker's write, the second's last two (its rename, and the sync
            // after which two markers are there), the first removal's.
            let name = String(parts[0])
            if name.hasPrefix("replicate.alive.remove") { return k == 1 }
            guard name.hasPrefix("replicate.alive.") else { return false }
            return k == 1 || (k == 2 && (name.hasSuffix(".rename") || name.hasSuffix(".sync-folder")))
        })

    /// The snapshots a repository lists, by their tags (ids differ from fixture to fixture).
    static func listed(_ fixture: CrashFixture, _ repo: String) throws -> String {
        try SnapshotSummary.list(repository: repo, password: fixture.password).map { "\($0.tags)" }.sorted().joined(separator: "; ")
    }

    /// Ids, times, hosts, stores and tags: what import and convert keep.
    static func identities(_ fixture: CrashFixture, _ repo: String) throws -> [String] {
        try SnapshotSummary.list(repository: repo, password: fixture.password).map { "\($0.id) \(Timestamp.iso($0.time)) \($0.host) \($0.store) \($0.tags)" }.sorted()
    }

    /// After the next run the new repository holds every snapshot, each verifies, and it checks clean.
    static func expectBroughtOver(_ fixture: CrashFixture, into repo: String, _ point: String) throws {
        let verify = try fixture.run(["snapshot", "verify", "--repo", repo, "--all"])
        #expect(verify.status == 0, "\(point): \(verify.stdout) \(verify.stderr)")
        let check = try fixture.run(["repo", "check", "--repo", repo, "--read-data"])
        #expect(check.status == 0, "\(point): \(check.stdout) \(check.stderr)")
        #expect(fixture.leftovers([repo]).isEmpty, "\(point): \(fixture.leftovers([repo]))")
    }

    static let importArchive = CrashScenario(
        name: "snapshot import",
        setup: {
            let fixture = try storeWithSnapshot()
            let archive = fixture.folder.file("one.tar.zst")
            _ = try SnapshotExport.run(.init(repository: fixture.repo, id: fixture.snapshot, output: archive, password: fixture.password))
            fixture.extra["archive"] = archive
            fixture.extra["other"] = try fixture.folder.repository("other", encrypted: true)
            return fixture
        },
        command: { ["snapshot", "import", $0.extra["archive"] ?? "", "--repo", $0.extra["other"] ?? ""] },
        observe: { try listed($0, $0.extra["other"] ?? "") },
        next: { fixture, index in try ok(fixture, ["snapshot", "import", fixture.extra["archive"] ?? "", "--repo", fixture.extra["other"] ?? ""], index) },
        finally: { fixture, point in
            try expectBroughtOver(fixture, into: fixture.extra["other"] ?? "", point)
            #expect(try identities(fixture, fixture.extra["other"] ?? "") == (try identities(fixture, fixture.repo)), "\(point)")
        })

    /// The format-1 repository an earlier build wrote (three snapshots) into a new one.
    static let convert = CrashScenario(
        name: "repo convert (format 1 into format 2)",
        setup: {
            let fixture = try CrashFixture(makeRepository: false)
            _ = try fixture.folder.oldRepository("format-1", as: "snaps")
            fixture.extra["new"] = try fixture.folder.repository("new", encrypted: true)
            fixture.extra["old"] = "\(fixture.files(fixture.repo).sorted { $0.key < $1.key })"
            return fixture
        },
        command: { ["repo", "convert", $0.repo, "--repo", $0.extra["new"] ?? ""] },
        observe: { try listed($0, $0.extra["new"] ?? "") },
        next: { fixture, index in try ok(fixture, ["repo", "convert", fixture.repo, "--repo", fixture.extra["new"] ?? ""], index) },
        finally: { fixture, point in
            try expectBroughtOver(fixture, into: fixture.extra["new"] ?? "", point)
            let brought = try SnapshotSummary.list(repository: fixture.extra["new"] ?? "", password: fixture.password).map { "\($0.id) \($0.tags)" }.sorted()
            #expect(brought == (try OldRepositories.expected("format-1").map { "\($0.id) \($0.tags)" }.sorted()), "\(point): ids and tags are the old repository's")
            #expect("\(fixture.files(fixture.repo).sorted { $0.key < $1.key })" == fixture.extra["old"], "\(point): the old repository is only read")
        })

    /// The repository's keys and the store's kill switch: small files whose loss or doubling
    /// locks an operator out or lets stopped runs go on.
    static let small: [CrashScenario] = [keyAdd, keyPasswd, keyRemove, exportArchive, killSwitch, killSwitchRelease, repair, repairDamagedFrame, scheduledRun, systemdUnits]

    /// `key remove` of a second key: the key is there or gone, and the same command again removes it.
    static let keyRemove = CrashScenario(
        name: "key remove",
        setup: {
            let fixture = try CrashFixture()
            _ = try writePassword(fixture, "second")
            let keys = (fixture.repo as NSString).appendingPathComponent("keys")
            let before = Set(try FileManager.default.contentsOfDirectory(atPath: keys))
            try ok(fixture, ["key", "add", "--repo", fixture.repo, "--new-password-file", fixture.folder.file("second")], 0)
            guard let id = Set(try FileManager.default.contentsOfDirectory(atPath: keys)).subtracting(before).first else { throw StoreOpsError(.failure, "key add made no key file") }
            fixture.extra["key"] = id
            return fixture
        },
        command: { ["key", "remove", "--repo", $0.repo, $0.extra["key"]!] },
        minimumPoints: 1,
        observe: { try opens($0, ["password", "second"]) },
        next: { fixture, index in
            guard opensWith(fixture, "second") else { return }
            try ok(fixture, ["key", "remove", "--repo", fixture.repo, fixture.extra["key"]!], index)
        },
        reaches: ["key.remove"])

    /// `killswitch release`: the switch is there or gone; the same command again releases it.
    static let killSwitchRelease = CrashScenario(
        name: "killswitch release",
        setup: {
            let fixture = try CrashFixture()
            try ok(fixture, ["killswitch", "engage", fixture.store], 0)
            return fixture
        },
        command: { ["killswitch", "release", $0.store] },
        minimumPoints: 1,
        observe: { FileSystem.kind(of: $0.store + ".storectl-killswitch") == .file ? "engaged" : "released" },
        next: { fixture, index in try ok(fixture, ["killswitch", "release", fixture.store], index) },
        reaches: ["killswitch.remove"])

    /// A policy scheduling the fixture's snapshots, with a job log, a metrics folder, and a
    /// `[replicate]` section (a service unit); its path.
    static func writeJobPolicy(_ fixture: CrashFixture) throws -> String {
        let policy = fixture.folder.file("job.toml")
        try Data("""
            [store]
            path = "\(fixture.store)"

            [snapshot]
            repository = "\(fixture.repo)"
            password_file = "\(fixture.folder.file("password"))"

            [schedule]
            snapshot = "15 * * * *"
            log = "\(fixture.out)/jobs.jsonl"
            metrics = "\(fixture.out)/metrics"
            log_max_size = 4096
            log_keep = 3

            [replicate]
            sync_interval = "1s"

            """.utf8).write(to: URL(fileURLWithPath: policy))
        try FileManager.default.createDirectory(atPath: fixture.out + "/metrics", withIntermediateDirectories: false)
        fixture.extra["policy"] = policy
        return policy
    }

    /// The job log's lines, the rotated files' too (oldest first).
    static func jobLogLines(_ fixture: CrashFixture) -> [String] {
        let log = fixture.out + "/jobs.jsonl"
        return ([3, 2, 1].map { "\(log).\($0)" } + [log]).flatMap { path in
            ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }
    }

    /// `run snapshot`, what cron and systemd call: its job lock, the snapshot, the job log (over
    /// its `log_max_size`, so rotated first, a rotated file shifted) and the metrics file. Killed
    /// anywhere, the next scheduled run leaves every record written before in the log or its
    /// rotated files, each line whole JSON, the newest the next run's success, and the metrics
    /// file whole and saying so.
    static let scheduledRun = CrashScenario(
        name: "run snapshot (a scheduled job: its lock, log rotation, metrics)",
        setup: {
            let fixture = try CrashFixture()
            let policy = try writeJobPolicy(fixture)
            try ok(fixture, ["run", "snapshot", "--policy", policy], 0)
            // Earlier runs' records: the first run's line, numbered, past the log's size, and a
            // rotated file before them.
            let log = fixture.out + "/jobs.jsonl"
            guard let line = jobLogLines(fixture).last, line.hasPrefix("{") else { throw StoreOpsError(.failure, "the first run wrote no job log line") }
            func numbered(_ range: Range<Int>) -> String { range.map { "{\"seed\":\($0)," + line.dropFirst() + "\n" }.joined() }
            try Data(numbered(0..<3).utf8).write(to: URL(fileURLWithPath: log + ".1"))
            var text = numbered(3..<4)
            var next = 4
            while text.utf8.count <= 4096 { text += numbered(next..<(next + 1)); next += 1 }
            try Data(text.utf8).write(to: URL(fileURLWithPath: log))
            fixture.extra["seeds"] = "\(next)"
            // The job's lock file as a first run meets it: not there yet (its creation is a point).
            try FileManager.default.removeItem(atPath: StoreFile(unchecked: fixture.store).jobLockPath)
            try fixture.walCommits(20)
            return fixture
        },
        command: { ["run", "snapshot", "--policy", $0.extra["policy"]!] },
        observe: { try $0.digest() },
        next: { fixture, index in try ok(fixture, ["run", "snapshot", "--policy", fixture.extra["policy"]!], index) },
        finally: { fixture, point in
            let lines = jobLogLines(fixture)
            let records = lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            #expect(records.count == lines.count, "\(point): a job log line is not whole JSON: \(lines)")
            let seeds = Set(records.compactMap { $0["seed"] as? Int })
            #expect(seeds == Set(0..<(Int(fixture.extra["seeds"] ?? "") ?? -1)), "\(point): records written before the run are missing: \(seeds.sorted())")
            #expect(records.last?["exitCode"] as? Int == 0 && records.last?["seed"] == nil, "\(point): the last record is not the next run's success: \(lines.last ?? "")")
            let metrics = (try? FileManager.default.contentsOfDirectory(atPath: fixture.out + "/metrics")) ?? []
            #expect(metrics.count == 1 && metrics.allSatisfy { $0.hasSuffix("-snapshot.prom") }, "\(point): \(metrics)")
            let text = metrics.first.flatMap { try? String(contentsOfFile: fixture.out + "/metrics/" + $0, encoding: .utf8) } ?? ""
            #expect(text.contains("storectl_job_exit_code{") && text.hasSuffix("\n") && text.split(separator: "\n").count == 18, "\(point): the metrics file is not whole: \(text)")
        },
        reaches: ["joblock.create", "joblog.rotate.shift", "joblog.rotate", "joblog.create", "metrics.file.rename"])

    /// `schedule systemd`: each unit is in the folder whole or not at all; the same command again
    /// writes them all.
    static let systemdUnits = CrashScenario(
        name: "schedule systemd",
        setup: {
            let fixture = try CrashFixture()
            _ = try writeJobPolicy(fixture)
            try FileManager.default.createDirectory(atPath: fixture.out + "/units", withIntermediateDirectories: false)
            return fixture
        },
        command: { ["schedule", "systemd", "--policy", $0.extra["policy"]!, "--output", $0.out + "/units"] },
        minimumPoints: 3,
        observe: { $0.files($0.out + "/units").sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") },
        next: { fixture, index in try ok(fixture, ["schedule", "systemd", "--policy", fixture.extra["policy"]!, "--output", fixture.out + "/units"], index) },
        finally: { fixture, point in
            let units = fixture.files(fixture.out + "/units").keys.sorted()
            #expect(units.count == 3 && units.contains { $0.hasSuffix("-replicate.service") }, "\(point): \(units)")
        },
        reaches: ["systemd.unit.rename"])

    /// `repo repair` of a repository with two snapshots' indexes: one new index written, then
    /// the old ones removed; killed between, both list the packs (still clean) and the next
    /// repair ends with one.
    static let repair = CrashScenario(
        name: "repo repair",
        setup: {
            let fixture = try storeWithSnapshot()
            try fixture.walCommits(20)
            _ = try fixture.createSnapshot()
            return fixture
        },
        command: { ["repo", "repair", "--repo", $0.repo] },
        minimumPoints: 4,
        observe: { fixture in
            let indexes = (try? FileManager.default.contentsOfDirectory(atPath: (fixture.repo as NSString).appendingPathComponent("index")))?
                .filter { !$0.hasPrefix(".") }.count ?? -1
            return try listed(fixture, fixture.repo) + "; \(indexes == 1 ? "one index" : "several indexes")"
        },
        next: { fixture, index in try ok(fixture, ["repo", "repair", "--repo", fixture.repo], index) },
        reaches: ["repair.index.write.rename", "repair.index.remove"])

    /// `repo repair` of a pack with one damaged frame an index describes: its whole frames are
    /// copied into a new pack (written, indexed), the new index written, then the old ones (and
    /// the copy's own) removed. Killed anywhere, the next repair (ending 2: the snapshot needs the
    /// dropped frame) and a snapshot of the store (storing those pages again) leave every snapshot
    /// verifying and the repository checking clean.
    static let repairDamagedFrame = CrashScenario(
        name: "repo repair of a damaged frame",
        setup: {
            let fixture = try storeWithSnapshot()
            let data = (fixture.repo as NSString).appendingPathComponent("data")
            let packs = (FileManager.default.subpaths(atPath: data) ?? []).map { (data as NSString).appendingPathComponent($0) }
                .filter { FileSystem.kind(of: $0) == .file }
            let largest = try #require(packs.max { (FileSystem.size(of: $0) ?? 0) < (FileSystem.size(of: $1) ?? 0) })
            var bytes = try Data(contentsOf: URL(fileURLWithPath: largest))
            bytes[bytes.count / 2] ^= 0x5A
            try bytes.write(to: URL(fileURLWithPath: largest))
            return fixture
        },
        command: { ["repo", "repair", "--repo", $0.repo] },
        status: 2,
        minimumPoints: 4,
        observe: { _ in "" },   // the next runs' end state is the test (`expectRepositoryClean`)
        next: { fixture, index in
            _ = try ok(fixture, ["repo", "repair", "--repo", fixture.repo], status: 2, index)
            _ = try ok(fixture, ["snapshot", "create", fixture.store, "--repo", fixture.repo], index)
        },
        reaches: ["pack.write.rename", "index.write.rename", "verify.record.rename", "repair.index.write.rename", "repair.index.remove"],
        damagedBefore: true)

    /// A password file `name` in the fixture's folder.
    static func writePassword(_ fixture: CrashFixture, _ name: String) throws -> String {
        let path = fixture.folder.file(name)
        try Data("the \(name) password\n".utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Which of these passwords (files in the fixture's folder) open the repository, and how
    /// many keys it has.
    static func opens(_ fixture: CrashFixture, _ names: [String]) throws -> String {
        let keys = try FileManager.default.contentsOfDirectory(atPath: (fixture.repo as NSString).appendingPathComponent("keys")).filter { !$0.hasPrefix(".") }
        return names.map { name in
            let opened = (try? PagedRepository.open(at: fixture.repo, password: .file(fixture.folder.file(name)))) != nil
            return "\(name) \(opened ? "opens" : "does not open")"
        }.joined(separator: ", ") + "; \(keys.count) keys"
    }

    static func opensWith(_ fixture: CrashFixture, _ name: String) -> Bool {
        (try? PagedRepository.open(at: fixture.repo, password: .file(fixture.folder.file(name)))) != nil
    }

    static let keyAdd = CrashScenario(
        name: "key add",
        setup: {
            let fixture = try CrashFixture()
            _ = try writePassword(fixture, "second")
            return fixture
        },
        command: { ["key", "add", "--repo", $0.repo, "--new-password-file", $0.folder.file("second")] },
        minimumPoints: 3,
        observe: { try opens($0, ["password", "second"]) },
        next: { fixture, index in
            // What an operator does: tries the new password, and adds the key again if it does not open.
            guard !opensWith(fixture, "second") else { return }
            try ok(fixture, ["key", "add", "--repo", fixture.repo, "--new-password-file", fixture.folder.file("second")], index)
        },
        reaches: ["key.add.rename"])

    /// A second key's password changed (the fixture's own password keeps opening the repository
    /// for the checks every scenario runs). Killed between adding the new key and removing the
    /// old one, both open: the same command again finishes it.
    static let keyPasswd = CrashScenario(
        name: "key passwd",
        setup: {
            let fixture = try CrashFixture()
            _ = try writePassword(fixture, "second")
            _ = try writePassword(fixture, "third")
            let added = try fixture.run(["key", "add", "--repo", fixture.repo, "--new-password-file", fixture.folder.file("second")])
            guard added.status == 0 else { throw StoreOpsError(.failure, "key add: \(added.stderr)") }
            return fixture
        },
        command: { ["key", "passwd", "--repo", $0.repo, "--password-file", $0.folder.file("second"), "--new-password-file", $0.folder.file("third")] },
        minimumPoints: 3,
        observe: { try opens($0, ["password", "second", "third"]) },
        next: { fixture, index in
            guard opensWith(fixture, "second") else { return }
            try ok(fixture, ["key", "passwd", "--repo", fixture.repo, "--password-file", fixture.folder.file("second"),
                             "--new-password-file", fixture.folder.file("third")], index)
        },
        reaches: ["key.passwd.add.rename", "key.passwd.remove"])

    /// `snapshot export`: the archive has its name only once complete; the next export replaces
    /// what a killed one left, and the archive imports.
    static let exportArchive = CrashScenario(
        name: "snapshot export",
        setup: { try storeWithSnapshot() },
        command: { ["snapshot", "export", "--repo", $0.repo, $0.snapshot, "--output", $0.out + "/one.tar.zst"] },
        minimumPoints: 3,
        observe: { FileSystem.kind(of: $0.out + "/one.tar.zst") == .file ? "exported" : "absent" },
        next: { fixture, index in
            guard FileSystem.kind(of: fixture.out + "/one.tar.zst") != .file else { return }
            try ok(fixture, ["snapshot", "export", "--repo", fixture.repo, fixture.snapshot, "--output", fixture.out + "/one.tar.zst"], index)
        },
        finally: { fixture, point in
            let other = try fixture.folder.repository("imported", encrypted: true)
            let imported = try fixture.run(["snapshot", "import", fixture.out + "/one.tar.zst", "--repo", other])
            #expect(imported.status == 0, "\(point): the archive does not import: \(imported.stderr)")
            #expect(try identities(fixture, other) == (try identities(fixture, fixture.repo)), "\(point)")
        },
        reaches: ["export.archive.rename"])

    /// `killswitch engage`: the switch is there, durable, or not at all; a killed engage's
    /// temporary is removed by the next.
    static let killSwitch = CrashScenario(
        name: "killswitch engage",
        setup: { try CrashFixture() },
        command: { ["killswitch", "engage", $0.store] },
        minimumPoints: 3,
        observe: { FileSystem.kind(of: $0.store + ".storectl-killswitch") == .file ? "engaged" : "released" },
        next: { fixture, index in
            guard FileSystem.kind(of: fixture.store + ".storectl-killswitch") != .file else { return }
            try ok(fixture, ["killswitch", "engage", fixture.store], index)
        },
        finally: { fixture, point in
            let text = (try? String(contentsOfFile: fixture.store + ".storectl-killswitch", encoding: .utf8)) ?? ""
            #expect(text.hasPrefix("engaged "), "\(point): the switch's record is whole: \(text)")
        },
        reaches: ["killswitch.rename", "killswitch.sync-folder"])

    /// The same in a bucket (restore in place is the local code past the download).
    static let remote: [CrashScenario] = [pagedCreate(.s3), pagedRestore(.s3), pagedPrune(.s3)]

    static func label(_ place: Place) -> String { place == .s3 ? "S3" : "folder" }

    static func pagedCreate(_ place: Place) -> CrashScenario {
        CrashScenario(
            name: "snapshot create (\(label(place)))",
            setup: {
                let fixture = try storeWithSnapshot(place: place)
                try fixture.walCommits(100)
                return fixture
            },
            command: { ["snapshot", "create", $0.store, "--repo", $0.repo, "--tag", "nightly"] },
            observe: { try $0.digest() },
            next: { fixture, index in try ok(fixture, ["snapshot", "create", fixture.store, "--repo", fixture.repo], index) },
            finally: { fixture, point in
                // The dead writer's packs that no index lists went with the next create (and, in a
                // bucket, no unfinished upload is left).
                if place == .s3 {
                    let pending = try S3Backend(url: fixture.repo).pendingUploads()
                    #expect(pending.isEmpty, "\(point): \(pending)")
                }
                let check = try fixture.run(["repo", "check", "--repo", fixture.repo, "--json"])
                let report = try JSON.decoder().decode(RepositoryCheck.Report.self, from: Data(check.stdout.utf8))
                #expect(report.notes.allSatisfy { !$0.contains("in no index") }, "\(point): \(report.notes)")
            })
    }

    /// Every other point, `storectl recover` on a killed restore's target: 66 when nothing was
    /// left for it (never made), else its dead run's temporary files go (0).
    static func recoverRestore(_ fixture: CrashFixture, target: String, _ index: Int) throws {
        guard index % 2 == 0 else { return }
        let leftovers = PendingFile.temporaries(of: target) + PendingFile.temporaries(of: StoreFile.supportPath(forDatabase: target))
        try ok(fixture, ["recover", target], status: FileSystem.kind(of: target) == .missing
                   && !StoreSwap.pending(target: target) && leftovers.isEmpty ? 66 : 0, index)
        #expect(PendingFile.temporaries(of: target).isEmpty, "recover removed the dead run's temporary files: \(index)")
    }

    static func pagedRestore(_ place: Place) -> CrashScenario {
        CrashScenario(
            name: "snapshot restore --to (\(label(place)))",
            setup: { try storeWithSnapshot(place: place) },
            command: { ["snapshot", "restore", "--repo", $0.repo, $0.snapshot, "--to", $0.out + "/restored.sqlite"] },
            observe: { try $0.digest() },
            afterKill: { fixture, point in try expectComplete(fixture.out + "/restored.sqlite", content: fixture.extra["snapshotContent"], external: 2, point) },
            next: { fixture, index in
                try recoverRestore(fixture, target: fixture.out + "/restored.sqlite", index)
                try ok(fixture, ["snapshot", "restore", "--repo", fixture.repo, fixture.snapshot, "--to", fixture.out + "/again.sqlite"], index)
            },
            finally: { fixture, point in
                try expectComplete(fixture.out + "/restored.sqlite", content: fixture.extra["snapshotContent"], external: 2, point)
                try expectComplete(fixture.out + "/again.sqlite", content: fixture.extra["snapshotContent"], external: 2, point)
            })
    }

    /// After a killed restore in place, the store: the explicit way (`recover`), or simply the
    /// next command that touches it. The repository: its next writer (here a later restore, or a
    /// snapshot) cleans it.
    static func afterRestoreInPlace(_ fixture: CrashFixture, _ index: Int) throws {
        if index % 2 == 0 {
            try ok(fixture, ["recover", fixture.store], index)
            try ok(fixture, ["snapshot", "restore", "--repo", fixture.repo, fixture.snapshot, "--to", fixture.out + "/later.sqlite"], index)
        } else {
            try ok(fixture, ["backup", fixture.store, "--output", fixture.out + "/after.sqlite"], index)
            try ok(fixture, ["snapshot", "create", fixture.store, "--repo", fixture.repo], index)
        }
    }

    static let restoreInPlace = CrashScenario(
        name: "snapshot restore --in-place",
        setup: {
            let fixture = try storeChangedSinceSnapshot()
            // The app's own file in the support folder (in no snapshot): it stays at every point.
            let own = (StoreFile(unchecked: fixture.store).supportPath as NSString).appendingPathComponent("app-own")
            try Data("keep".utf8).write(to: URL(fileURLWithPath: own))
            return fixture
        },
        command: { ["snapshot", "restore", "--repo", $0.repo, $0.snapshot, "--in-place", $0.store] },
        observe: { try $0.digest() },
        next: afterRestoreInPlace,
        finally: { fixture, point in
            let mode = try readJournalMode(fixture.store)
            #expect(mode == "wal", "\(point): the store is no longer in WAL mode")
            let own = (StoreFile(unchecked: fixture.store).supportPath as NSString).appendingPathComponent("app-own")
            #expect(FileManager.default.contents(atPath: own) == Data("keep".utf8), "\(point): the app's own file in the support folder is gone")
        })

    /// `--live`: the snapshot written into the store through SQLite (a store without external
    /// data; commits only its -wal holds). A kill before the backup's commit frame leaves frames
    /// no reader uses; after it, the store is the snapshot's. The backup writes a quarter of the
    /// store at each step here, so that a kill lands between two of them.
    static let restoreLive = CrashScenario(
        name: "snapshot restore --in-place --live",
        setup: {
            let fixture = try CrashFixture(externalFiles: 0)
            fixture.snapshot = try fixture.createSnapshot()
            fixture.extra["snapshotContent"] = try fixture.digest(journalMode: false)
            try fixture.walCommits(150)
            fixture.environment["STORECTL_TEST_LIVE_CHUNK_PAGES"] = "\(max(1, (FileSystem.size(of: fixture.store) ?? 0) / 4096 / 4))"
            return fixture
        },
        command: { ["snapshot", "restore", "--repo", $0.repo, $0.snapshot, "--in-place", $0.store, "--live"] },
        observe: { try $0.digest() },
        next: afterRestoreInPlace,
        finally: { fixture, point in
            #expect(try readJournalMode(fixture.store) == "wal", "\(point): the store is no longer in WAL mode")
            let check = try DatabaseQueue(path: fixture.store).read { try String.fetchAll($0, sql: "PRAGMA integrity_check") }
            #expect(check == ["ok"], "\(point): \(check)")
        },
        reaches: ["restore.live.locked", "restore.live.copying", "restore.live.committed", "restore.live.checkpointed"])

    static func pagedPrune(_ place: Place) -> CrashScenario {
        CrashScenario(
            name: "snapshot prune with garbage collection (\(label(place)))",
            setup: {
                let fixture = try storeWithSnapshot(place: place)
                // Every row rewritten twice: most pages of the first two snapshots become garbage.
                for round in 0..<2 {
                    let queue = try DatabaseQueue(path: fixture.store)
                    try queue.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = ZTITLE || ?", arguments: ["-\(round)"]) }
                    try queue.close()
                    _ = try fixture.createSnapshot()
                }
                fixture.extra["pages"] = String(try RepositoryStats.run(location: fixture.repo, password: fixture.password).blobsByType["page"] ?? 0)
                return fixture
            },
            command: { ["snapshot", "prune", "--repo", $0.repo, "--keep-last", "1"] },
            observe: { "\(try SnapshotSummary.list(repository: $0.repo, password: $0.password).count) listed" },
            next: { fixture, index in try ok(fixture, ["snapshot", "prune", "--repo", fixture.repo, "--keep-last", "1"], index) },
            finally: { fixture, point in
                #expect(try SnapshotSummary.list(repository: fixture.repo, password: fixture.password).count == 1, "\(point)")
                // What the removed snapshots alone used is gone, and the one kept restores.
                let check = try fixture.run(["repo", "check", "--repo", fixture.repo, "--read-data", "--json"])
                #expect(check.status == 0, "\(point): \(check.stdout)")
                let report = try JSON.decoder().decode(RepositoryCheck.Report.self, from: Data(check.stdout.utf8))
                #expect(report.notes.isEmpty, "\(point): \(report.notes)")
                let stats = try RepositoryStats.run(location: fixture.repo, password: fixture.password)
                #expect(stats.blobsByType["page"] ?? 0 < Int(fixture.extra["pages"] ?? "") ?? 0, "\(point): no page was collected: \(stats.blobsByType)")
            })
    }

    /// Operations on the store (their snapshots go into an encrypted repository).
    static let store: [CrashScenario] = [
        CrashScenario(
            name: "backup",
            setup: {
                let fixture = try CrashFixture()
                try fixture.walCommits(100)
                fixture.extra["content"] = try fixture.digest(journalMode: false)
                return fixture
            },
            command: { ["backup", $0.store, "--output", $0.out + "/backup.sqlite"] },
            observe: { try $0.digest() },
            afterKill: { fixture, point in try expectComplete(fixture.out + "/backup.sqlite", content: fixture.extra["content"], external: 2, point) },
            next: { fixture, index in try ok(fixture, ["backup", fixture.store, "--output", fixture.out + "/backup2.sqlite"], index) },
            finally: { fixture, point in
                try expectComplete(fixture.out + "/backup.sqlite", content: fixture.extra["content"], external: 2, point)
                try expectComplete(fixture.out + "/backup2.sqlite", content: fixture.extra["content"], external: 2, point)
            }),
        CrashScenario(
            name: "repo init",
            setup: { try CrashFixture(makeRepository: false) },
            command: { ["repo", "init", "--repo", $0.repo] },
            observe: { FileSystem.kind(of: $0.repo) == .missing ? "no repository" : "a repository" },
            next: { fixture, index in
                // Killed before its config was in place, nothing is at the name and init starts
                // again; killed after, the repository is whole and a second init is refused (73).
                try ok(fixture, ["repo", "init", "--repo", fixture.repo], status: FileSystem.kind(of: fixture.repo) == .missing ? 0 : 73, index)
                try ok(fixture, ["snapshot", "create", fixture.store, "--repo", fixture.repo], index)
            }),
        CrashScenario(
            name: "migrate",
            setup: {
                let fixture = try CrashFixture()
                try writeMigrations(fixture, failing: false)
                return fixture
            },
            command: { ["migrate", $0.store, "--migrations", $0.extra["migrations"]!, "--repo", $0.repo] },
            observe: { try $0.digest() },
            next: { fixture, index in
                try ok(fixture, ["recover", fixture.store], index)
                if FileSystem.kind(of: MigrationJournal.path(for: StoreFile(unchecked: fixture.store))) != .missing {
                    // A person decides: go back, or keep what was applied and go on.
                    if index % 2 == 0 {
                        try ok(fixture, ["rollback", fixture.store, "--repo", fixture.repo], index)
                    } else {
                        try ok(fixture, ["migrate", fixture.store, "--migrations", fixture.extra["migrations"]!, "--repo", fixture.repo, "--resume"], index)
                    }
                } else {
                    // Nothing started, or everything finished: the operator runs it again.
                    try ok(fixture, ["migrate", fixture.store, "--migrations", fixture.extra["migrations"]!, "--repo", fixture.repo], index)
                }
            }),
        CrashScenario(
            name: "migrate --rollback-on-failure (a failing migration rolls back)",
            setup: {
                let fixture = try CrashFixture()
                try writeMigrations(fixture, failing: true)
                return fixture
            },
            command: { ["migrate", $0.store, "--migrations", $0.extra["migrations"]!, "--repo", $0.repo, "--rollback-on-failure"] },
            status: 3,
            observe: { try $0.digest() },
            next: { fixture, index in
                try ok(fixture, ["recover", fixture.store], index)
                if FileSystem.kind(of: MigrationJournal.path(for: StoreFile(unchecked: fixture.store))) != .missing {
                    try ok(fixture, ["rollback", fixture.store, "--repo", fixture.repo], index)
                } else {
                    try ok(fixture, ["migrate", fixture.store, "--migrations", fixture.extra["migrations"]!, "--repo", fixture.repo,
                                     "--rollback-on-failure"], status: 3, index)
                }
            }),
        CrashScenario(
            name: "rollback",
            setup: { try migrated() },
            command: { ["rollback", $0.store, "--repo", $0.repo] },
            observe: { try $0.digest() },
            next: { fixture, index in
                // The explicit recovery first, or straight away the same command again.
                if index % 2 == 0 { try ok(fixture, ["recover", fixture.store], index) }
                try ok(fixture, ["rollback", fixture.store, "--repo", fixture.repo], index)
            }),
        // Two runs applied: killed after its swap, before it said so, the rollback is run again
        // by an operator who does not know it finished, and that run must not roll back the run
        // before too (it did: the store ended at version 0). Its intent file says it is done.
        // The safety snapshot's pack and index writes are the scenario above's.
        CrashScenario(
            name: "rollback (the newer of two runs; run again after a kill)",
            setup: { try migrated(runs: [1, nil]) },
            command: { ["rollback", $0.store, "--repo", $0.repo] },
            observe: { try $0.digest() },
            next: { fixture, index in
                if index % 2 == 0 { try ok(fixture, ["recover", fixture.store], index) }
                let again = try ok(fixture, ["rollback", fixture.store, "--repo", fixture.repo, "--json"], index)
                let result = try JSON.decoder().decode(Rollback.Result.self, from: Data(again.stdout.utf8))
                #expect(result.version == 1, "point \(index): \(again.stdout)")
            },
            // Its intent file is removed after it printed what it did: killed there, the same
            // command again is asked to roll back one more run, and does.
            kills: { !$0.hasPrefix("pack.") && !$0.hasPrefix("index.") && !$0.hasPrefix("rollback.intent.remove") },
            reaches: ["rollback.intent.rename", "swap.done"]),
        // Through SQLite the restore commits before the interrupted migration's journal is
        // removed: killed between the two, the next rollback sees the store back at the run's
        // first version and only clears the journal (never restores over newer commits).
        CrashScenario(
            name: "rollback --live (an interrupted migration's)",
            setup: {
                let fixture = try CrashFixture(externalFiles: 0)
                try writeMigrations(fixture, failing: false)
                let killed = try fixture.run(["migrate", fixture.store, "--migrations", fixture.extra["migrations"]!, "--repo", fixture.repo],
                                             ["STORECTL_FAULT_POINT": "after-commit-1"])
                #expect(killed.status == 137, "\(killed.stderr)")
                fixture.environment["STORECTL_TEST_LIVE_CHUNK_PAGES"] = "\(max(1, (FileSystem.size(of: fixture.store) ?? 0) / 4096 / 4))"
                return fixture
            },
            command: { ["rollback", $0.store, "--repo", $0.repo, "--live"] },
            observe: { try $0.digest() },
            next: { fixture, index in
                if index % 2 == 0 { try ok(fixture, ["recover", fixture.store], index) }
                try ok(fixture, ["rollback", fixture.store, "--repo", fixture.repo, "--live"], index)
                #expect(FileSystem.kind(of: MigrationJournal.path(for: StoreFile(unchecked: fixture.store))) == .missing, "point \(index): the journal is left")
            },
            reaches: ["restore.live.committed", "migrate.journal.remove"]),
        CrashScenario(
            name: "rollback (its safety snapshot made from replicate's point, the follower running)",
            setup: {
                let fixture = try migrated()
                fixture.follower = try ChildProcess.Running(Binaries.storectl, ["replicate", fixture.store, "--repo", fixture.repo, "--quiet", "--for", "60s",
                                                                                "--sync-interval", "100ms", "--merge-interval", "0"],
                                                            environment: fixture.environment.merging(["TMPDIR": fixture.temp, "STORECTL_PASSWORD_FILE": fixture.folder.file("password")]) { $1 })
                // The app's commit after the base: the point the safety snapshot is made from has pages of its own.
                var waited = 0
                while (try? StorePoints.list(repository: fixture.repo, password: fixture.password))?.isEmpty ?? true, waited < 300 { usleep(50_000); waited += 1 }
                let app = try DatabaseQueue(path: fixture.store)
                try app.write { try $0.execute(sql: "UPDATE ZITEM SET ZTITLE = 'followed ' || Z_PK WHERE Z_PK <= 40") }
                try app.close()
                // Up to 30 s for the follower to make it durable (it takes 100 ms unless the machine is loaded).
                fixture.environment["STORECTL_POINT_WAIT"] = "30"
                return fixture
            },
            command: { ["rollback", $0.store, "--repo", $0.repo] },
            observe: { try $0.digest() },
            // The rest of the run is the rollback scenario's.
            afterKill: { fixture, _ in fixture.stopFollower() },
            next: { fixture, index in
                if index % 2 == 0 { try ok(fixture, ["recover", fixture.store], index) }
                try ok(fixture, ["rollback", fixture.store, "--repo", fixture.repo], index)
            },
            kills: { $0.hasPrefix("pack.write") || $0.hasPrefix("index.write") || $0.hasPrefix("snapshot.from-point.") },
            reaches: ["pack.write.rename", "snapshot.from-point.record.rename"]),
        CrashScenario(
            name: "purge (snapshot first)",
            setup: {
                let fixture = try CrashFixture()
                try pushDeletionsAwayFromTheCutoff(fixture.store)
                let policy = fixture.folder.file("policy.toml")
                try Data("""
                    [store]
                    path = "Tasks.sqlite"

                    [[purge]]
                    name = "items"
                    entity = "Item"
                    deleted_flag = "ZISDELETED"
                    deleted_at = "ZDELETEDAT"
                    time_format = "coredata"
                    retention = "30d"
                    batch_size = 15

                    [snapshot]
                    repository = "snaps"
                    before_purge = true
                    """.utf8).write(to: URL(fileURLWithPath: policy))
                fixture.extra["policy"] = policy
                return fixture
            },
            command: { ["purge", "--policy", $0.extra["policy"]!] },
            observe: { try $0.digest() },
            next: { fixture, index in try ok(fixture, ["purge", "--policy", fixture.extra["policy"]!], index) }),
        CrashScenario(
            name: "diff (a live store read from a consistent copy in TMPDIR)",
            setup: { try storeChangedSinceSnapshot() },
            command: { ["diff", "--repo", $0.repo, $0.snapshot, $0.store] },
            status: 2,
            minimumPoints: 2,
            observe: { try $0.digest() },
            // Read-only: the store never changes; the next diff removes a killed one's copy.
            next: { fixture, index in try ok(fixture, ["diff", "--repo", fixture.repo, fixture.snapshot, fixture.store], status: 2, index) }),
        CrashScenario(
            name: "migrate --dry-run (rehearsed on two copies in TMPDIR)",
            setup: {
                let fixture = try CrashFixture()
                try fixture.walCommits(20)
                try writeMigrations(fixture, failing: false)
                return fixture
            },
            command: { ["migrate", $0.store, "--migrations", $0.extra["migrations"]!, "--repo", $0.repo, "--dry-run"] },
            observe: { try $0.digest() },
            next: { fixture, index in
                try ok(fixture, ["migrate", fixture.store, "--migrations", fixture.extra["migrations"]!, "--repo", fixture.repo, "--dry-run"], index)
            }),
        CrashScenario(
            name: "migrate --dry-run --at (rehearsed on a point restored into TMPDIR)",
            setup: {
                let fixture = try CrashFixture()
                try fixture.walCommits(20)
                try writeMigrations(fixture, failing: false)
                try ok(fixture, replicating(fixture), 0)
                let stores = try StorePoints.list(repository: fixture.repo, password: fixture.password)
                let newest = try #require(stores.first?.spans.last(where: { $0.kind == "covered" })?.to, "replicate recorded a point")
                fixture.extra["at"] = Timestamp.iso(newest)
                return fixture
            },
            command: { ["migrate", $0.store, "--migrations", $0.extra["migrations"]!, "--repo", $0.repo, "--dry-run", "--at", $0.extra["at"]!] },
            observe: { try $0.digest() },
            // Read-only for the store and the repository; the next rehearsal removes a killed one's point folder.
            next: { fixture, index in
                try ok(fixture, ["migrate", fixture.store, "--migrations", fixture.extra["migrations"]!, "--repo", fixture.repo, "--dry-run",
                                 "--at", fixture.extra["at"]!], index)
            }),
        CrashScenario(
            name: "purge --dry-run (the purge on a scratch copy in TMPDIR)",
            setup: {
                let fixture = try CrashFixture()
                try pushDeletionsAwayFromTheCutoff(fixture.store)
                let policy = fixture.folder.file("policy.toml")
                try Data("""
                    [store]
                    path = "Tasks.sqlite"

                    [[purge]]
                    name = "items"
                    entity = "Item"
                    deleted_flag = "ZISDELETED"
                    deleted_at = "ZDELETEDAT"
                    time_format = "coredata"
                    retention = "30d"
                    batch_size = 15

                    [[purge]]
                    name = "categories"
                    entity = "Category"
                    deleted_flag = "ZISDELETED"
                    deleted_at = "ZDELETEDAT"
                    time_format = "coredata"
                    retention = "7d"

                    [snapshot]
                    repository = "snaps"
                    before_purge = true
                    """.utf8).write(to: URL(fileURLWithPath: policy))
                fixture.extra["policy"] = policy
                return fixture
            },
            command: { ["purge", "--policy", $0.extra["policy"]!, "--dry-run"] },
            observe: { try $0.digest() },
            // The store never changes; the next dry run removes a killed one's copy from TMPDIR.
            next: { fixture, index in try ok(fixture, ["purge", "--policy", fixture.extra["policy"]!, "--dry-run"], index) }),
    ]

    /// Soft deletions are moved far from the 30-day cutoff (to 2025, or to 2100), and the same for
    /// every fixture: every run, whenever it happens, purges exactly the same rows.
    static func pushDeletionsAwayFromTheCutoff(_ store: String) throws {
        let queue = try DatabaseQueue(path: store)
        try queue.write { db in
            try db.execute(sql: "UPDATE ZITEM SET ZDELETEDAT = CASE WHEN Z_PK % 3 = 0 THEN ? ELSE ? END WHERE ZDELETEDAT IS NOT NULL",
                           arguments: [3_124_137_600.0 - CoreDataStore.referenceDateOffset, 1_735_689_600.0 - CoreDataStore.referenceDateOffset])
        }
        try queue.close()
    }
}

func readJournalMode(_ path: String) throws -> String? {
    var config = Configuration()
    config.readonly = true
    let queue = try DatabaseQueue(path: path, configuration: config)
    defer { try? queue.close() }
    return try queue.read { try String.fetchOne($0, sql: "PRAGMA journal_mode") }
}

@Suite("kill -9 at every fault point of every operation that writes")
struct CrashPointTests {
    /// Rough cost of each scenario's kills (seconds in a run of the whole suite on two cores), to
    /// start the longest first: two threads taking 28 scenarios in list order ended with one
    /// thread idle while the other ran a long one.
    static let cost: [String: Double] = [
        "replicate (merge, digest, milestone)": 66, "replicate (base)": 50, "replicate (resume, segments through the outbox)": 46,
        "replicate (resume, commits)": 39, "repo convert (format 1 into format 2)": 38, "replicate (resume, commits through the spool file)": 36,
        "replicate (a start with a kept segment: written first, its file removed)": 35, "snapshot prune with garbage collection (S3)": 34,
        "migrate --rollback-on-failure (a failing migration rolls back)": 27,
    ]

    /// One test that hands every scenario to the heavy threads at once (child tasks that start
    /// there, never on the pool). As a test case per scenario, each case first needed one of the
    /// pool's two threads to start, queued behind the synchronous tests holding them: the cases
    /// started late, and the crash test, about 320 s of work on each heavy thread, ended last at
    /// 600-720 s.
    @Test("each operation, killed at each of its fault points, leaves its store before or after, and the next run recovers")
    func everyPoint() async throws {
        // STORECTL_CRASH_ONLY=text: only the scenarios whose name contains it (while working on one).
        let only = ProcessInfo.processInfo.environment["STORECTL_CRASH_ONLY"]
        let scenarios = Scenarios.all.filter { only == nil || $0.name.contains(only ?? "") }
            .sorted { (Self.cost[$0.name] ?? 0) > (Self.cost[$1.name] ?? 0) }
        guard #available(macOS 15.0, *) else {
            for scenario in scenarios { _ = try exhaust(scenario) }
            return
        }
        await withTaskGroup(of: (String, Int?).self) { group in
            for scenario in scenarios {
                group.addTask(executorPreference: TestThreads.heavy) {
                    do { return (scenario.name, try exhaust(scenario)) } catch {
                        Issue.record(error, "\(scenario.name)")
                        return (scenario.name, nil)
                    }
                }
            }
            for await (name, count) in group { print("crash points: \(name): \(count.map(String.init) ?? "failed")") }
        }
        // Every fault point the library names is killed at by some scenario, or listed with a reason.
        guard only == nil, Place.all.contains(.s3) else { return }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/StoreOps").path
        let named = try CrashCoverage.named(in: root)
        let reached = CrashCoverage.reached.withLock { $0 }
        let unreached = named.filter { _, pattern in !reached.contains { (try? pattern.wholeMatch(in: $0)) != nil } }.keys.sorted()
        let missing = unreached.filter { CrashCoverage.withoutScenario[$0] == nil }
        #expect(missing.isEmpty, "fault points no crash scenario reaches (give each one, or list it in CrashCoverage.withoutScenario with the reason): \(missing)")
        let covered = CrashCoverage.withoutScenario.keys.filter { !unreached.contains($0) }.sorted()
        #expect(covered.isEmpty, "listed in CrashCoverage.withoutScenario, but a scenario reaches them now (take them off the list): \(covered)")
    }

    @Test("every rename, remove, create and fsync in the library goes through FileSystem, which names a fault point")
    func noUnnamedDurableSteps() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Sources/StoreOps").path
        let calls = try Regex(#"(^|[^A-Za-z0-9_.])(unlink|rename|renameat2|mkdir|fsync|fdatasync|link|rmdir)\s*\("#)
        // Foundation's copies, moves and writes too (a dry run's scratch copy was `copyItem`: no
        // fault point, and the source's mode instead of 0600).
        let words = ["O_CREAT", "removeItem(", "createDirectory(", "createFile(", "Foundation.rename(", "Foundation.link(", "Foundation.unlink(",
                     "copyItem(", "moveItem(", "linkItem(", ".write(to:", "write(toFile:", "replaceItem"]
        let allowed: Set<String> = ["Support/FileSystem.swift", "Support/FaultInjection.swift"]
        var found: [String] = []
        for relative in FileManager.default.subpaths(atPath: root) ?? [] where relative.hasSuffix(".swift") && !allowed.contains(relative) {
            let text = try String(contentsOfFile: (root as NSString).appendingPathComponent(relative), encoding: .utf8)
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let code = line.split(separator: "//", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? ""
                guard !code.trimmingCharacters(in: .whitespaces).hasPrefix("case ") else { continue }
                if code.contains(calls) || words.contains(where: { code.contains($0) }) {
                    found.append("\(relative):\(number + 1): \(line.trimmingCharacters(in: .whitespaces))")
                }
            }
        }
        #expect(found.isEmpty, "durable steps outside FileSystem (no fault point):\n\(found.joined(separator: "\n"))")
    }
}
