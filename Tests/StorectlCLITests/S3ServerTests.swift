import Foundation
import StoreLab
import StoreOps
import Testing

/// What only a bucket has: multipart uploads, conditional writes, the server going away, a
/// network that drops and refuses requests. Everything else about S3 repositories is the format-2
/// suite, which runs on both backends.
@Suite("S3: a real SeaweedFS server, faults between it and storectl", .onTestThreads, .enabled(if: Place.all.contains(.s3)), .serialized)
struct S3ServerTests {
    func repository(_ folder: TempFolder, _ label: String = "repo") throws -> String {
        var options = RepositoryInit.Options(location: try SharedS3.newLocation(label), password: .file(try folder.passwordFile()))
        options.kdfN = 1 << 10
        return try RepositoryInit.run(options).location
    }

    func run(_ arguments: [String], _ folder: TempFolder, _ environment: [String: String] = [:]) throws -> ChildProcess.Result {
        try ChildProcess.run(Binaries.storectl, arguments, environment: try SharedS3.environment()
            .merging(["STORECTL_PASSWORD_FILE": try folder.passwordFile(), "TMPDIR": folder.path]) { $1 }.merging(environment) { $1 })
    }

    func startProxy(_ options: [String]) throws -> (proxy: ChildProcess.Running, port: String) { try SharedS3.startFaultProxy(options) }

    /// An endpoint on loopback that accepts connections and never answers (listening when this returns).
    func silentListener(_ folder: TempFolder) throws -> (ChildProcess.Running, Int) {
        let port = try SeaweedServer.freePorts(1)[0]
        let ready = folder.file("listening")
        let listener = try ChildProcess.Running("/usr/bin/env", ["python3", "-c", """
            import socket, sys, time
            s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(64)
            open(sys.argv[2], "w").close()
            held = []
            while True:
                c, _ = s.accept(); held.append(c)
            """, String(port), ready])
        #expect(ChildProcess.waitFor(file: ready))
        return (listener, port)
    }

    @Test("large objects go up in parts and read back whole; an immutable object is never replaced; a dead run's unfinished upload is aborted by the next run alone")
    func multipartAndConditional() throws {
        let folder = try TempFolder()
        let repo = try repository(folder)
        let (bucket, prefix) = try S3Backend.parse(repo)
        var settings = try S3Settings.resolve(bucket: bucket)
        settings.partSize = 5 << 20
        settings.multipartThreshold = 10 << 20
        let backend = S3Backend(bucket: bucket, prefix: prefix, settings: settings)
        let before = S3Traffic.sinceStart()?.requests["UploadPart"] ?? 0
        var big = Data(count: 11 << 20)
        big.withUnsafeMutableBytes { raw in for i in stride(from: 0, to: raw.count, by: 4096) { raw[i] = UInt8(truncatingIfNeeded: i / 4096 &* 31) } }
        try backend.write("data/00/test-large", big, point: "test.large")
        #expect((S3Traffic.sinceStart()?.requests["UploadPart"] ?? 0) - before == 3, "11 MiB in 5 MiB parts")
        #expect(try backend.read("data/00/test-large") == big)
        #expect(try backend.read("data/00/test-large", offset: 6 << 20, length: 4096) == big[(6 << 20)..<((6 << 20) + 4096)])
        try backend.write("data/00/test-large", big, point: "test.large")   // the same bytes again: fine (a retry)

        // An object that exists with other content is refused (65), never overwritten.
        try backend.write("index/test-small", Data("one".utf8), point: "test.small")
        try backend.write("index/test-small", Data("one".utf8), point: "test.small")
        let clash = #expect(throws: StoreOpsError.self) { try backend.write("index/test-small", Data("three".utf8), point: "test.small") }
        #expect(clash?.status == .badData && clash?.message.contains("already exists") == true)
        #expect(try backend.read("index/test-small") == Data("one".utf8))
        try backend.remove("index/test-small", point: "test.remove")
        try backend.remove("data/00/test-large", point: "test.remove")

        // A run killed mid-upload leaves an unfinished multipart upload; the next run that holds
        // the repository alone aborts it.
        let store = try sampleStore(in: folder, items: 200)
        _ = try SnapshotCreate.run(store: store, options: .init(repository: repo, password: .file(try folder.passwordFile())))
        _ = try backend.beginUpload("data/ab/unfinished")
        #expect(try backend.pendingUploads().count == 1)
        let created = try run(["snapshot", "create", store, "--repo", repo], folder)
        #expect(created.status == 0, "\(created.stderr)")
        #expect(try backend.pendingUploads().isEmpty)
    }

    @Test("indexes and snapshot records are read from the local cache once seen: a second snapshot GETs neither; a damaged copy is dropped and fetched again; a pruned record's copy goes")
    func objectCache() throws {
        let folder = try TempFolder()
        let repo = try repository(folder)
        let store = try sampleStore(in: folder, items: 2_000)
        let cache = folder.file("cache")
        func report(_ arguments: [String], _ environment: [String: String] = [:]) throws -> [String: Any] {
            let result = try run(arguments + ["--json"], folder, ["STORECTL_CACHE_DIR": cache].merging(environment) { $1 })
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
            return try #require(report["s3"] as? [String: Any])
        }
        func create() throws -> [String: Any] {
            // The file's time moved (its pages did not): a snapshot that reads the store and its
            // indexes, where an untouched store's would reuse its parent and read no index at all.
            try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(Double.random(in: 1...1000))], ofItemAtPath: store)
            return try report(["snapshot", "create", store, "--repo", repo])
        }
        func copies(_ kind: String) -> [String] { (FileManager.default.subpaths(atPath: cache) ?? []).filter { $0.contains("/\(kind)_") }.sorted() }
        func gets(_ report: [String: Any]) -> Int { (report["requests"] as? [String: Any])?["GET"] as? Int ?? 0 }
        _ = try create()
        let second = try create()
        #expect((second["cachedReads"] as? Int ?? 0) >= 2, "the index and the first record: \(second)")
        #expect(copies("index").count == 1 && copies("snapshots").count == 2, "\(copies("index")) \(copies("snapshots"))")

        // A damaged copy: dropped, the index fetched from the bucket (and kept again), the snapshot made.
        let copy = cache + "/" + copies("index")[0]
        let intact = try Data(contentsOf: URL(fileURLWithPath: copy))
        var bytes = intact
        bytes[bytes.count / 2] ^= 0xFF
        try bytes.write(to: URL(fileURLWithPath: copy))
        _ = try create()
        #expect(try Data(contentsOf: URL(fileURLWithPath: copy)) == intact, "the damaged copy was not replaced by the index from the bucket")

        // More records: reading them all (repo stats) GETs none of them; each copy used is one GET fewer.
        for _ in 0..<4 { _ = try create() }
        let records = copies("snapshots")
        #expect(records.count == 7, "\(records)")
        let cached = try report(["repo", "stats", "--repo", repo])
        let uncached = try report(["repo", "stats", "--repo", repo], ["STORECTL_CACHE_DIR": "off"])
        let hits = cached["cachedReads"] as? Int ?? 0
        #expect(hits >= 7 && gets(uncached) - gets(cached) == hits, "cached \(cached), not \(uncached)")

        // A prune run elsewhere (no cache) removes records: the next listing here drops their copies.
        _ = try report(["snapshot", "prune", "--repo", repo, "--keep-last", "2"], ["STORECTL_CACHE_DIR": "off"])
        let after = try report(["repo", "stats", "--repo", repo])
        #expect(copies("snapshots").count == 2 && (after["cachedReads"] as? Int ?? 0) >= 2, "\(copies("snapshots")) \(after)")
        #expect(try run(["repo", "check", "--repo", repo], folder, ["STORECTL_CACHE_DIR": cache]).status == 0)
    }

    @Test("bad input for a bucket repository: each a clear message and its status, nothing written")
    func badInput() throws {
        let folder = try TempFolder()
        let repo = try repository(folder)
        let backend = try S3Backend(url: repo)
        let before = try backend.list("").map(\.key)
        let cases: [([String], [String: String], Int32, String)] = [
            (["repo", "init", "--repo", repo], [:], 73, "already a storectl repository"),
            (["repo", "init", "--repo", repo + "/../x"], [:], 64, "may not hold . or .. segments"),
            (["repo", "init", "--format", "1", "--repo", "s3://\(SharedS3.bucket)/format-one"], [:], 64, "format 2 only"),
            (["snapshot", "list", "--repo", repo], ["STORECTL_S3_ADDRESSING": "sideways"], 64, "STORECTL_S3_ADDRESSING=sideways"),
            (["snapshot", "list", "--repo", repo], ["STORECTL_S3_PARALLEL": "0"], 64, "STORECTL_S3_PARALLEL=0"),
            (["snapshot", "list", "--repo", repo], ["AWS_ENDPOINT_URL_S3": "ftp://host/path"], 64, "not an http:// or https:// URL"),
            (["snapshot", "list", "--repo", "s3://Bad_Bucket/x"], [:], 64, "is not an S3 bucket name"),
            // An answer larger than any object storectl writes (1 GiB; lowered here) is refused
            // as it arrives, not gathered into memory.
            (["snapshot", "list", "--repo", repo], ["STORECTL_TEST_S3_MAX_ANSWER": "64"], 65, "larger than any object storectl writes"),
        ]
        for (arguments, environment, status, message) in cases {
            let result = try run(arguments, folder, environment)
            #expect(result.status == status && result.stderr.contains(message), "\(arguments) \(environment): \(result.status) \(result.stderr)")
        }
        // A prefix holding something else is not made a repository.
        let other = "s3://\(SharedS3.bucket)/not-empty-\(UUID().uuidString.prefix(8).lowercased())"
        try S3Backend(url: other).write("photos/1.jpg", Data("jpeg".utf8), point: "test.write")
        let refused = try run(["repo", "init", "--repo", other], folder)
        #expect(refused.status == 73 && refused.stderr.contains("is not empty (it holds photos/1.jpg)"), "\(refused.stderr)")
        #expect(try S3Backend(url: other).list("").map(\.key) == ["photos/1.jpg"])
        // A prefix inside the repository's is not made one (a trial: it was, and its objects were
        // the outer repository's unknown objects).
        let inside = try run(["repo", "init", "--repo", repo + "/inner/deeper"], folder)
        #expect(inside.status == 73 && inside.stderr.contains("is inside the repository \(repo)"), "\(inside.stderr)")
        #expect(try backend.list("").map(\.key) == before, "nothing written to the repository")
        // The bucket's prefix above two repositories (a new machine's operator knows the bucket):
        // the repositories below it are named (it said only "not a storectl repository").
        let top = "s3://\(SharedS3.bucket)/dr-\(UUID().uuidString.prefix(8).lowercased())"
        for name in ["db1", "db2"] {
            #expect(try run(["repo", "init", "--repo", "\(top)/prod/\(name)"], folder).status == 0)
        }
        let above = try run(["snapshot", "list", "--repo", top], folder)
        #expect(above.status == 65 && above.stderr.contains("repositories below it: \(top)/prod/db1, \(top)/prod/db2"), "\(above.status) \(above.stderr)")
    }

    @Test("a read-only key (Read and List, no Write): restore, verify and `repo check` read without a lock and say so (they were 77 on the lock's PUT); a snapshot or a prune is still refused 77 naming access denied")
    func readOnlyKey() throws {
        let folder = try TempFolder()
        let repo = try repository(folder)
        let store = try sampleStore(in: folder, items: 300)
        #expect(try run(["snapshot", "create", store, "--repo", repo], folder).status == 0)
        let id = try #require(try PagedRepository.open(at: repo, password: .file(folder.passwordFile())).catalog().records.compactMap { $0.manifest.snapshot?.id }.first)
        let reader = ["AWS_ACCESS_KEY_ID": SeaweedServer.readerKey, "AWS_SECRET_ACCESS_KEY": SeaweedServer.readerSecret]
        let restored = try run(["snapshot", "restore", "--repo", repo, id, "--to", folder.file("restored.sqlite")], folder, reader)
        #expect(restored.status == 0 && restored.stderr.contains("without a lock"), "\(restored.status) \(restored.stderr)")
        #expect(FileManager.default.fileExists(atPath: folder.file("restored.sqlite")))
        let check = try run(["repo", "check", "--repo", repo, "--read-data"], folder, reader)
        #expect(check.status == 0 && check.stderr.contains("without a lock"), "\(check.status) \(check.stderr)")
        let verify = try run(["snapshot", "verify", "--repo", repo, id], folder, reader)
        // Verified; that the verdict could not be written is said beside it.
        #expect(verify.stdout.contains("ok") && verify.stdout.contains("NOT RECORDED"), "\(verify.status) \(verify.stdout) \(verify.stderr)")
        let create = try run(["snapshot", "create", store, "--repo", repo], folder, reader)
        #expect(create.status == 77 && create.stderr.contains("access denied"), "\(create.status) \(create.stderr)")
        let prune = try run(["snapshot", "prune", "--repo", repo, "--keep-last", "1"], folder, reader)
        #expect(prune.status == 77 && prune.stderr.contains("access denied"), "\(prune.status) \(prune.stderr)")
    }

    @Test("the server unreachable: 74 naming the repository, after the retries; the store untouched, nothing left behind")
    func unreachable() throws {
        let folder = try TempFolder()
        let repo = try repository(folder)
        let store = try sampleStore(in: folder, items: 500)
        let digest = try Hashing.sha256(ofFile: store)
        let closed = try SeaweedServer.freePorts(1)[0]
        let started = Date()
        let result = try run(["snapshot", "create", store, "--repo", repo], folder,
                             ["AWS_ENDPOINT_URL_S3": "http://127.0.0.1:\(closed)", "STORECTL_S3_RETRIES": "3", "STORECTL_S3_BACKOFF_MS": "50"])
        #expect(result.status == 74, "\(result.stderr)")
        #expect(result.stderr.contains("repository unreachable: \(repo)") && result.stderr.contains("connection refused"), "\(result.stderr)")
        #expect(Date().timeIntervalSince(started) < 20)
        #expect(try Hashing.sha256(ofFile: store) == digest)
        #expect(leftovers(folder.path).isEmpty, "\(leftovers(folder.path))")
        // Bad credentials: 77, naming the bucket and what to check; a missing bucket: 66.
        let denied = try run(["snapshot", "list", "--repo", repo], folder, ["AWS_SECRET_ACCESS_KEY": "not-the-secret"])
        #expect(denied.status == 77 && denied.stderr.contains("access denied to the bucket \(SharedS3.bucket)"), "\(denied.stderr)")
        #expect(!denied.stderr.contains("not-the-secret") && !denied.stderr.contains(SeaweedServer.secretKey), "a secret was printed")
        let missing = try run(["snapshot", "list", "--repo", "s3://no-such-bucket-here/x"], folder)
        #expect(missing.status == 66 && missing.stderr.contains("does not exist"), "\(missing.stderr)")
    }

    @Test("an endpoint that accepts connections and never answers: 74 once the deadline passes (not after every retry's full timeout), the message's times are wall times")
    func silentEndpoint() throws {
        let folder = try TempFolder()
        let repo = try repository(folder)
        let (listener, port) = try silentListener(folder)
        defer { listener.signal(SIGKILL); _ = listener.wait() }
        let started = Date()
        let result = try run(["snapshot", "list", "--repo", repo], folder,
                             ["AWS_ENDPOINT_URL_S3": "http://127.0.0.1:\(port)", "STORECTL_S3_TIMEOUT": "2", "STORECTL_S3_DEADLINE": "5"])
        let wall = Date().timeIntervalSince(started)
        #expect(result.status == 74, "\(result.stderr)")
        #expect(result.stderr.contains("no answer from the endpoint for") && result.stderr.contains("STORECTL_S3_DEADLINE"), "\(result.stderr)")
        #expect(wall < 12, "gave up after \(wall) s with a 5 s deadline (6 retries of 2 s would take over 14 s)")
        // The seconds the message names are no more than the wall time.
        let said = result.stderr.matches(of: /in (\d+\.\d) s/).compactMap { Double($0.1) }
        #expect(!said.isEmpty && said.allSatisfy { $0 <= wall + 0.1 }, "\(said) vs \(wall): \(result.stderr)")
    }

    @Test("Ctrl-C or SIGTERM while a request waits for an endpoint that accepts connections and never answers: the command stops within seconds (130, 143), not after the request's 30 s timeout")
    func signalWhileEndpointIsSilent() throws {
        let folder = try TempFolder()
        let repo = try repository(folder)
        let (listener, port) = try silentListener(folder)
        defer { listener.signal(SIGKILL); _ = listener.wait() }
        let environment = try SharedS3.environment().merging(["STORECTL_PASSWORD_FILE": try folder.passwordFile(), "TMPDIR": folder.path,
                                                             "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:\(port)"]) { $1 }
        for (arguments, signal, status) in [(["snapshot", "list", "--repo", repo], SIGINT, Int32(130)),
                                            (["snapshot", "restore", "20261125T011206Z-cd1e69", "--repo", repo, "--to", folder.file("r.sqlite")], SIGTERM, 143)] {
            let running = try ChildProcess.Running(Binaries.storectl, arguments, environment: environment)
            usleep(1_500_000)   // its first request is waiting for an answer
            let signalled = Date()
            running.signal(signal)
            let result = running.wait()
            let took = Date().timeIntervalSince(signalled)
            #expect(result.status == status && took < 6, "\(arguments[1]): \(result.status) after \(took) s: \(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: folder.file("r.sqlite")))
        }
    }

    @Test("the deadline holds across parallel requests: one that starts while another has waited for an answer gets the deadline's rest, not a whole timeout")
    func deadlineAcrossParallelRequests() throws {
        let folder = try TempFolder()
        let (listener, port) = try silentListener(folder)
        defer { listener.signal(SIGKILL); _ = listener.wait() }
        let environment = try SharedS3.environment().merging(["AWS_ENDPOINT_URL_S3": "http://127.0.0.1:\(port)", "STORECTL_S3_DEADLINE": "4",
                                                             "STORECTL_S3_TIMEOUT": "30"]) { $1 }
        // The second GET starts 3 s into the first one's wait: before, it waited its own 4 s
        // (the deadline, as if the endpoint had just answered) and ended 7 s in. (6 s below leaves
        // a loaded machine 2 s past the deadline.)
        let result = try ChildProcess.run(Binaries.lab, ["s3-stagger", SharedS3.bucket, "config", "--threads", "2", "--stagger", "3"],
                                          environment: environment)
        let lines: [[String]] = result.stdout.split(separator: "\n").map { line in line.split(separator: " ", maxSplits: 3).map { String($0) } }
        #expect(result.status == 0 && lines.count == 2, "\(result.stdout) \(result.stderr)")
        for line in lines where line.count == 4 {
            #expect(line[2] == "74" && (Double(line[1]) ?? 99) < 6, "thread \(line[0]) ended at \(line[1]) s: \(line[3])")
        }
    }

    @Test("bytes damaged on the way (the first read of each pack flipped by a proxy) do not make a whole repository damaged: repo check --read-data and snapshot verify read again, pass, and record no FAILED (a trial: one bad read was recorded as damage until the next verify)")
    func damageOnTheWayIsReadAgain() throws {
        let folder = try TempFolder()
        let repo = try repository(folder)
        let store = try sampleStore(in: folder, items: 2_000)
        #expect(try run(["snapshot", "create", store, "--repo", repo], folder).status == 0)
        for command in [["repo", "check", "--repo", repo, "--read-data"], ["snapshot", "verify", "--repo", repo, "--all"]] {
            let (proxy, port) = try startProxy(["--damage-first-read"])
            defer { proxy.signal(SIGKILL); _ = proxy.wait() }
            let checked = try run(command, folder, ["AWS_ENDPOINT_URL_S3": "http://127.0.0.1:\(port)", "STORECTL_CACHE_DIR": "off"])
            #expect(checked.status == 0, "\(command[0]): \(checked.status) \(checked.stdout) \(checked.stderr)")
            #expect((checked.stdout + checked.stderr).contains("second try") || (checked.stdout + checked.stderr).contains("read again"), "\(command[0]): \(checked.stdout) \(checked.stderr)")
        }
        #expect(!(try run(["snapshot", "list", "--repo", repo], folder).stdout.contains("FAILED")))
    }

    @Test("a server that answers every try with 503 SlowDown is said to be busy, asking for fewer requests (74, with the settings that send fewer), not unreachable (a trial was told to check that the endpoint is up)")
    func throttledEveryTimeIsBusy() throws {
        let folder = try TempFolder()
        let repo = try repository(folder)
        let store = try sampleStore(in: folder, items: 200)
        let (proxy, port) = try startProxy(["--slowdown", "1"])
        defer { proxy.signal(SIGKILL); _ = proxy.wait() }
        let created = try run(["snapshot", "create", store, "--repo", repo], folder,
                              ["AWS_ENDPOINT_URL_S3": "http://127.0.0.1:\(port)", "STORECTL_S3_RETRIES": "2", "STORECTL_S3_BACKOFF_MS": "10"])
        #expect(created.status == 74 && created.stderr.contains("repository busy") && created.stderr.contains("STORECTL_S3_PARALLEL"), "\(created.status) \(created.stderr)")
    }

    @Test("a listing that gives the same continuation token again (a gateway's listing that never advances) is 74 at once, naming it; it went round until killed (2,675 requests in two minutes, a trial: the server answered, so no deadline came)")
    func listingThatDoesNotAdvance() throws {
        let folder = try TempFolder()
        let repo = try repository(folder)
        let store = try sampleStore(in: folder, items: 200)
        #expect(try run(["snapshot", "create", store, "--repo", repo], folder).status == 0)
        let (proxy, port) = try startProxy(["--loop-list"])
        defer { proxy.signal(SIGKILL); _ = proxy.wait() }
        let started = Date()
        let listed = try run(["snapshot", "list", "--repo", repo], folder, ["AWS_ENDPOINT_URL_S3": "http://127.0.0.1:\(port)", "STORECTL_S3_RETRIES": "2"])
        #expect(listed.status == 74 && listed.stderr.contains("the same continuation token twice"), "\(listed.status) \(listed.stderr)")
        #expect(Date().timeIntervalSince(started) < 30)
    }

    @Test("a proxy that answers 503 SlowDown, cuts connections mid-request, damages bodies and loses answers to requests the server did: create and restore succeed through retries; the repository checks clean")
    func faultyNetwork() throws {
        let folder = try TempFolder()
        let repo = try repository(folder)
        let store = try sampleStore(in: folder, items: 20_000)
        let (proxy, port) = try startProxy(["--slowdown", "0.08", "--cut", "0.08", "--lost", "0.08", "--corrupt", "0.08", "--seed", "7"])
        defer { proxy.signal(SIGKILL); _ = proxy.wait() }
        let faulty = ["AWS_ENDPOINT_URL_S3": "http://127.0.0.1:\(port)", "STORECTL_S3_RETRIES": "12", "STORECTL_S3_BACKOFF_MS": "20", "STORECTL_S3_PARALLEL": "4"]
        let created = try run(["snapshot", "create", store, "--repo", repo, "--json"], folder, faulty)
        #expect(created.status == 0, "\(created.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(created.stdout.utf8)) as? [String: Any])
        let traffic = try #require(report["s3"] as? [String: Any])
        #expect((traffic["retries"] as? Int ?? 0) > 0, "no fault was met: \(traffic)")
        let id = try #require(report["id"] as? String)
        let restored = try run(["snapshot", "restore", id, "--repo", repo, "--to", folder.file("restored.sqlite")], folder, faulty)
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(try logicalDigest(folder.file("restored.sqlite")) == (try logicalDigest(store)))
        let check = try run(["repo", "check", "--repo", repo, "--read-data"], folder)
        #expect(check.status == 0, "\(check.stdout) \(check.stderr)")
    }

    @Test("https: an endpoint whose certificate AWS_CA_BUNDLE names carries a whole round trip; untrusted, it is 74 at once naming TLS and AWS_CA_BUNDLE; a bundle that is not a file is 66")
    func tls() throws {
        guard let probe = try? ChildProcess.run("/usr/bin/python3", ["-c", "import cryptography"]), probe.status == 0 else {
            try #require(ProcessInfo.processInfo.environment["STORECTL_REQUIRE_S3"] == nil, "python3-cryptography is missing (make test installs it)")
            return
        }
        let folder = try TempFolder()
        let repo = try repository(folder)
        let store = try sampleStore(in: folder, items: 2_000)
        let ca = folder.file("proxy-ca.pem")
        let (proxy, port) = try startProxy(["--tls", ca])
        defer { proxy.signal(SIGKILL); _ = proxy.wait() }
        let https = ["AWS_ENDPOINT_URL_S3": "https://127.0.0.1:\(port)", "STORECTL_S3_RETRIES": "3", "STORECTL_S3_BACKOFF_MS": "20"]

        let trusted = https.merging(["AWS_CA_BUNDLE": ca]) { $1 }
        let created = try run(["snapshot", "create", store, "--repo", repo, "--json"], folder, trusted)
        #expect(created.status == 0, "\(created.stderr)")
        let id = try #require((try? JSONSerialization.jsonObject(with: Data(created.stdout.utf8)) as? [String: Any])?["id"] as? String)
        let restored = try run(["snapshot", "restore", id, "--repo", repo, "--to", folder.file("restored.sqlite")], folder, trusted)
        #expect(restored.status == 0, "\(restored.stderr)")
        #expect(try logicalDigest(folder.file("restored.sqlite")) == (try logicalDigest(store)))

        // The system's CAs do not know the proxy's certificate: refused before any request is
        // answered, and not retried.
        let system = FileSystem.kind(of: "/etc/ssl/certs/ca-certificates.crt") == .file ? "/etc/ssl/certs/ca-certificates.crt" : ""
        let started = Date()
        let untrusted = try run(["snapshot", "list", "--repo", repo], folder, https.merging(["AWS_CA_BUNDLE": system]) { $1 })
        #expect(untrusted.status == 74, "\(untrusted.stdout) \(untrusted.stderr)")
        #expect(untrusted.stderr.contains("repository unreachable") && untrusted.stderr.contains("TLS") && untrusted.stderr.contains("AWS_CA_BUNDLE"), "\(untrusted.stderr)")
        #expect(Date().timeIntervalSince(started) < 20)

        let missing = try run(["snapshot", "list", "--repo", repo], folder, https.merging(["AWS_CA_BUNDLE": folder.file("no-such.pem")]) { $1 })
        #expect(missing.status == 66 && missing.stderr.contains("no-such.pem") && missing.stderr.contains("AWS_CA_BUNDLE"), "\(missing.stderr)")
    }

}

/// The server itself killed, stopped or gone: each test runs a SeaweedFS of its own, so these run
/// beside the rest of the suite rather than after it (serialized, each test of the suite above
/// queues for the pool's threads behind everything started before it: the suite's ~100 s, most
/// of it these three waiting through retries, ended the whole run 90 s after every other suite).
@Suite("S3: the server itself killed, stopped or gone", .onTestThreads, .enabled(if: Place.all.contains(.s3)))
struct S3ServerLossTests {
    @Test("the server gone for good mid-snapshot (its index written, its record not): 74 after the record's retries, without a DELETE of every pack it wrote (abandoning stops at the first failure); nothing listed; with the server back the next create and the check are clean")
    func serverGoneMidSnapshot() throws {
        let folder = try TempFolder()
        let server = try SeaweedServer()
        defer { server.stop() }
        try server.createBucket("gone")
        let environment = server.environment().merging(["STORECTL_PASSWORD_FILE": try folder.passwordFile(), "TMPDIR": folder.path, "STORECTL_S3_RETRIES": "3"]) { $1 }
        let repo = "s3://gone/repo"
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", repo], environment: environment).status == 0)
        let store = try sampleStore(in: folder, items: 30_000)
        let trace = folder.file("trace"), resume = folder.file("resume")
        let create = try ChildProcess.Running(Binaries.storectl, ["snapshot", "create", store, "--repo", repo, "--json"], environment: environment.merging([
            "STORECTL_TEST_PAUSE_AT": "index.write.put#1:60000", "STORECTL_TEST_PAUSE_UNTIL": resume, "STORECTL_FAULT_TRACE": trace]) { $1 })
        #expect(waitUntil(60) { ((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").contains("index.write.put#1") })
        server.kill()
        #expect(FileManager.default.createFile(atPath: resume, contents: nil))
        let started = Date()
        let result = create.wait()
        let took = Date().timeIntervalSince(started)
        let report = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
        let requests = (report?["s3"] as? [String: Any])?["requests"] as? [String: Any]
        let deletes = requests?["DELETE"] as? Int ?? 0, puts = requests?["PUT"] as? Int ?? 0
        // Counted per attempt (four each here): the index's removal and the lock's. Before, the
        // index and each pack too, each waiting out its retries (a bucket's 60 s deadline then).
        #expect(result.status == 74 && deletes <= 8 && puts >= 3, "\(result.status) after \(took) s, \(deletes) DELETEs of \(puts) PUTs: \(result.stdout) \(result.stderr)")
        try server.restart()
        // A restarted server answers S3 only once its volume server has joined: waited for.
        var list = try ChildProcess.run(Binaries.storectl, ["snapshot", "list", "--repo", repo, "--json"], environment: environment)
        _ = waitUntil(60, every: 0.5) {
            list = try ChildProcess.run(Binaries.storectl, ["snapshot", "list", "--repo", repo, "--json"], environment: environment)
            return list.status == 0
        }
        #expect((try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [Any])?.isEmpty == true, "\(list.stdout) \(list.stderr)")
        let again = try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo], environment: environment)
        #expect(again.status == 0, "\(again.stderr)")
        let check = try ChildProcess.run(Binaries.storectl, ["repo", "check", "--repo", repo, "--read-data"], environment: environment)
        #expect(check.status == 0, "\(check.stdout) \(check.stderr)")
    }

    @Test("the server stopped (SIGSTOP) while the snapshot's record is sent, continued after the run gave up (74): the requests it held then land; the snapshot is listed whole or not at all (the run removed its index after sending the record, and the record landed: listed, unrestorable)")
    func recordAnswerNeverCame() throws {
        let folder = try TempFolder()
        let server = try SeaweedServer()
        defer { server.resume(); server.stop() }
        try server.createBucket("held")
        let environment = server.environment().merging(["STORECTL_PASSWORD_FILE": try folder.passwordFile(), "TMPDIR": folder.path,
                                                        "STORECTL_S3_RETRIES": "2", "STORECTL_S3_TIMEOUT": "2", "STORECTL_S3_DEADLINE": "6"]) { $1 }
        let repo = "s3://held/repo"
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", repo], environment: environment).status == 0)
        let store = try sampleStore(in: folder, items: 3_000)
        let trace = folder.file("trace"), resume = folder.file("resume")
        // Paused once its index is written, before the record is sent.
        let create = try ChildProcess.Running(Binaries.storectl, ["snapshot", "create", store, "--repo", repo], environment: environment.merging([
            "STORECTL_TEST_PAUSE_AT": "index.write.put#1:60000", "STORECTL_TEST_PAUSE_UNTIL": resume, "STORECTL_FAULT_TRACE": trace]) { $1 })
        #expect(waitUntil(60) { ((try? String(contentsOfFile: trace, encoding: .utf8)) ?? "").contains("index.write.put#1") })
        server.pause()
        #expect(FileManager.default.createFile(atPath: resume, contents: nil))
        let result = create.wait()
        #expect(result.status == 74, "\(result.status) \(result.stderr)")
        #expect(result.stderr.contains("was sent and its answer never came"), "said: \(result.stderr)")
        server.resume()
        sleep(3)   // what the server held is handled now
        var list = try ChildProcess.run(Binaries.storectl, ["snapshot", "list", "--repo", repo, "--json"], environment: environment)
        _ = waitUntil(60, every: 0.5) {
            list = try ChildProcess.run(Binaries.storectl, ["snapshot", "list", "--repo", repo, "--json"], environment: environment)
            return list.status == 0
        }
        #expect(list.status == 0, "\(list.stderr)")
        let check = try ChildProcess.run(Binaries.storectl, ["repo", "check", "--repo", repo, "--read-data"], environment: environment)
        #expect(check.status == 0, "listed whole or not at all: \(list.stdout) \(check.stdout) \(check.stderr)")
        let listed = (try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [[String: Any]]) ?? []
        if let id = listed.first?["id"] as? String {
            let verify = try ChildProcess.run(Binaries.storectl, ["snapshot", "verify", "--repo", repo, id], environment: environment)
            #expect(verify.status == 0, "\(verify.stdout) \(verify.stderr)")
        }
    }

    @Test("the server killed and restarted mid-snapshot: the run completes through its retries or exits 74 with nothing listed; the next run and the check are clean")
    func serverRestart() throws {
        let folder = try TempFolder()
        let server = try SeaweedServer()
        try server.createBucket("restart")
        let environment = server.environment().merging(["STORECTL_PASSWORD_FILE": try folder.passwordFile(), "TMPDIR": folder.path,
                                                        "STORECTL_S3_RETRIES": "10", "STORECTL_S3_BACKOFF_MS": "300", "STORECTL_S3_TIMEOUT": "5"]) { $1 }
        let repo = "s3://restart/repo"
        #expect(try ChildProcess.run(Binaries.storectl, ["repo", "init", "--repo", repo], environment: environment).status == 0)
        let store = try sampleStore(in: folder, items: 30_000)
        let create = try ChildProcess.Running(Binaries.storectl, ["snapshot", "create", store, "--repo", repo], environment: environment)
        Thread.sleep(forTimeInterval: 0.6)
        server.kill()
        Thread.sleep(forTimeInterval: 1)
        try server.restart()
        let result = create.wait()
        let list = try ChildProcess.run(Binaries.storectl, ["snapshot", "list", "--repo", repo, "--json"], environment: environment)
        let listed = try JSONSerialization.jsonObject(with: Data(list.stdout.utf8)) as? [Any] ?? []
        if result.status == 0 {
            #expect(listed.count == 1)
        } else {
            #expect(result.status == 74 && listed.isEmpty, "\(result.status): \(result.stderr)")
        }
        let again = try ChildProcess.run(Binaries.storectl, ["snapshot", "create", store, "--repo", repo], environment: environment)
        #expect(again.status == 0, "\(again.stderr)")
        let check = try ChildProcess.run(Binaries.storectl, ["repo", "check", "--repo", repo, "--read-data"], environment: environment)
        #expect(check.status == 0, "\(check.stdout) \(check.stderr)")
        server.stop()
    }
}

private func sampleStore(in folder: TempFolder, items: Int) throws -> String {
    var options = SampleStore.Options()
    options.items = items
    options.externalFiles = 2
    return try SampleStore.create(at: folder.file("Tasks.sqlite"), options: options).path
}

private func logicalDigest(_ path: String) throws -> String { try StoreState.digest(path, journalMode: false) }

/// storectl's temporaries under `path`.
private func leftovers(_ path: String) -> [String] {
    (FileManager.default.subpaths(atPath: path) ?? []).filter { $0.contains(".tmp-storectl-") || $0.contains(".storectl-swap") }
}
