import ArgumentParser
import Foundation
import Synchronization
import StoreLab
import StoreOps

/// Test and demo companion of storectl: makes sample stores and plays the app writing to them.
@main
struct StorectlLab: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "storectl-lab",
        abstract: "Sample stores and write load for storectl's demo, tests and benchmarks.",
        discussion: "Every command stops, as on SIGTERM, when the process that started it exits: a writer started with & ends when the shell or script that started it exits (so that a test or a benchmark that dies leaves no writer behind).",
        subcommands: [MakeStore.self, Writer.self, Churn.self, Hold.self, JobLockHold.self, Latency.self, WALCommits.self, S3Bucket.self, S3Stagger.self])

    static func main() {
        ProcessSignals.install()
        stopWhenOrphaned()
        do {
            var command = try parseAsRoot()
            try command.run()
        } catch let error as StoreOpsError {
            FileHandle.standardError.write(Data("storectl-lab: \(error)\n".utf8))
            Foundation.exit(error.status.rawValue)
        } catch {
            exit(withError: error)
        }
    }
}

/// A writer or lock holder whose parent (a test, a bench script) died without stopping it would
/// write on for hours: when the parent goes away, stop as if SIGTERM had arrived.
private func stopWhenOrphaned() {
    let parent = getppid()
    Thread.detachNewThread {
        while getppid() == parent { usleep(200_000) }
        ProcessSignals.raise(SIGTERM)
    }
}

struct MakeStore: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "make-store", abstract: "Generate a Core Data-shaped sample store.")

    @Argument var path: String
    @Option(help: "Number of items (Task and Note rows).") var items = 10_000
    @Option(help: "Fraction of items soft-deleted.") var deletedFraction = 0.2
    @Option(help: "Soft deletions are spread over this many past days.") var deletedSpanDays = 180.0
    @Option(help: "wal or delete.") var journalMode = "wal"
    @Option(help: "Characters of body text per item (~250 bytes per row at 120).") var bodyLength = 120
    @Option(help: "Files to create in the store's _EXTERNAL_DATA folder.") var externalFiles = 0
    @Option var seed: UInt64 = 42

    func run() throws {
        var options = SampleStore.Options()
        options.items = items
        options.deletedFraction = deletedFraction
        options.deletedSpanDays = deletedSpanDays
        options.journalMode = journalMode
        options.bodyLength = bodyLength
        options.externalFiles = externalFiles
        options.seed = seed
        print(JSON.string(try SampleStore.create(at: path, options: options)))
    }
}

struct Writer: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Commit a small transaction every --interval-ms until --duration or SIGTERM (or its parent process exits), then print latency stats as JSON.")

    @Argument var path: String
    @Option var intervalMs = 2.0
    @Option(help: "Seconds to run (default: until SIGINT/SIGTERM).") var duration: Double?
    @Option(help: "File touched after the first commit.") var readyFile: String?
    @Option(help: "Write one line per commit (\"<unix time> <latency s>\") to this file at the end.") var latencyLog: String?
    @Option(help: "Append one line per commit as it returns (\"<key> <unix time>\") to this file.") var commitLog: String?
    @Option(help: "PRAGMA wal_autocheckpoint for the writer (SQLite's default: 1000 pages).") var autocheckpoint: Int?
    @Flag(help: "Open the store for each commit and close it after; titles end \" #n\" and the commit log's key is n.") var reopen = false
    @Flag(help: "Titles end \" #n\" and the commit log's key is n (n: the commit's number in this run), the store kept open.") var numbered = false
    @Option(help: "Seconds a commit waits for the store's lock before it fails (default 5).") var busyTimeout = 5.0

    func run() throws {
        var options = WriteLoad.Options()
        options.busyTimeout = busyTimeout
        options.reopen = reopen
        options.numbered = numbered
        options.interval = intervalMs / 1000
        options.duration = duration
        options.readyFile = readyFile
        options.latencyLog = latencyLog
        options.commitLog = commitLog
        options.autocheckpoint = autocheckpoint
        print(JSON.string(try WriteLoad.run(store: path, options: options)))
    }
}

struct Churn: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Insert, update and delete rows at random intervals (until --duration, SIGTERM, or its parent process exits), logging each commit's content hash (\"<seq> <began> <returned> <sha256>\").")

    @Argument var path: String
    @Option var log: String
    @Option var duration = 5.0
    @Option var maxIntervalMs = 5.0
    @Option var seed: UInt64 = 1
    @Option(help: "Run wal_checkpoint(PASSIVE|RESTART|TRUNCATE) after one commit in N, at random.") var checkpointEvery: Int?
    @Option(help: "VACUUM after one commit in N, at random.") var vacuumEvery: Int?
    @Option var autocheckpoint: Int?

    func run() throws {
        var options = ChurnLoad.Options(log: log)
        options.duration = duration
        options.maxIntervalMs = maxIntervalMs
        options.seed = seed
        options.checkpointEvery = checkpointEvery
        options.vacuumEvery = vacuumEvery
        options.autocheckpoint = autocheckpoint
        print(JSON.string(try ChurnLoad.run(store: path, options: options)))
    }
}

struct Hold: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Hold a lock on a store (write, exclusive or read) for some seconds.")

    @Argument var path: String
    @Option var mode: String = "write"
    @Option var seconds = 10.0
    @Option var readyFile: String?

    func run() throws {
        guard let mode = LockHolder.Mode(rawValue: mode) else { throw ValidationError("--mode must be write, exclusive or read") }
        try LockHolder.hold(store: path, mode: mode, seconds: seconds, readyFile: readyFile)
    }
}

struct Latency: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Commit latency statistics of a writer's --latency-log within a time window.")

    @Argument var log: String
    @Option(help: "Unix time the window starts.") var from: Double = 0
    @Option(help: "Unix time the window ends.") var to: Double = .infinity

    func run() throws {
        print(JSON.string(try WriteLoad.Stats.fromLog(log, from: from, to: to), pretty: false))
    }
}

struct S3Bucket: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "s3-bucket", abstract: "Create a bucket (AWS_* settings, as storectl reads them): storectl itself never does.")

    @Argument var name: String
    @Option(help: "Seconds to keep asking while the answer is an I/O error (5xx, a bare 404, no connection: a server just started, its filer not ready yet).") var wait = 30.0

    func run() throws {
        try SeaweedServer.createBucket(name, settings: try S3Settings.resolve(bucket: name), waiting: wait)
    }
}

struct S3Stagger: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "s3-stagger",
                                                    abstract: "GET one key from several threads, each starting STAGGER seconds after the one before (AWS_* and STORECTL_S3_* settings); prints when each ended and how.")

    @Argument var bucket: String
    @Argument var key: String
    @Option var threads = 2
    @Option var stagger = 1.0

    func run() throws {
        let backend = S3Backend(bucket: bucket, prefix: "", settings: try S3Settings.resolve(bucket: bucket))
        let started = Date()
        let ended = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: threads) { index in
            Thread.sleep(forTimeInterval: Double(index) * stagger)
            let outcome: String
            do { outcome = try backend.read(key) == nil ? "missing" : "read" } catch let error as StoreOpsError {
                outcome = "\(error.status.rawValue) \(error.message)"
            } catch { outcome = "\(error)" }
            ended.withLock { $0.append(String(format: "%d %.2f %@", index, Date().timeIntervalSince(started), outcome)) }
        }
        for line in ended.withLock({ $0 }).sorted() { print(line) }
    }
}

struct JobLockHold: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "job-lock", abstract: "Hold a store's storectl job lock, as a running job would.")

    @Argument var path: String
    @Option var job = "purge"
    @Option var seconds = 10.0
    @Option var readyFile: String?
    @Flag(help: "Hold it shared, as a backup or a snapshot does.") var shared = false

    func run() throws {
        let lock = try JobLock.acquire(path: StoreFile(unchecked: path).jobLockPath, job: job, shared: shared)
        if let readyFile { _ = FileManager.default.createFile(atPath: readyFile, contents: Data("held\n".utf8)) }
        let until = Date().addingTimeInterval(seconds)
        while Date() < until, ProcessSignals.received == nil { usleep(10_000) }
        lock.release()
    }
}

struct WALCommits: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wal-commits",
        abstract: "Commit N updates to a WAL store, then die (SIGKILL) so they live only in its -wal.")

    @Argument var path: String
    @Option var count = 200

    func run() throws {
        let queue = try StoreState.commitToWALOnly(path, count: count)
        // The connection stays open until the process dies, so SQLite never checkpoints the -wal.
        _ = withExtendedLifetime(queue) { kill(getpid(), SIGKILL) }
    }
}
