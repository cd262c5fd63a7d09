import Foundation
import GRDB
import StoreOps

/// A second process's steady write load: one small transaction every `interval`, like an app,
/// with each commit's latency measured (BEGIN IMMEDIATE through COMMIT).
///
/// On a sample store it inserts Core Data-style `Task` rows (taking `Z_PK` from `Z_MAX`, as Core
/// Data does); on any other store it appends to a `lab_load` table it creates.
public enum WriteLoad {
    public struct Options: Sendable {
        public var interval: TimeInterval = 0.002
        public var duration: TimeInterval?
        public var busyTimeout: TimeInterval = 5
        /// Touched after the first commit, so a test knows the load is running.
        public var readyFile: String?
        /// Written at the end: one line per commit, "<unix time it began> <latency seconds>", so a
        /// benchmark can take the statistics of exactly the window it cares about.
        public var latencyLog: String?
        /// Appended to as each commit returns: one line per commit, "<key> <unix time>" (the
        /// row's `Z_PK` on a sample store, its id in `lab_load` otherwise), so a test knows
        /// exactly which rows were committed before any instant.
        public var commitLog: String?
        /// `PRAGMA wal_autocheckpoint` of the writer's connection (SQLite's default: 1000 pages).
        public var autocheckpoint: Int?
        /// Open the store for each commit and close it after (a CLI, a script, a request): each
        /// title then ends with " #n", the commit's number in this run, and the commit log's key
        /// is n (the store's keys restart after an in-place restore; n does not).
        public var reopen = false
        /// Titles end " #n" and the commit log's key is n (the commit's number in this run), as
        /// with `reopen`, for a connection kept open (the primary key may repeat after a restore).
        public var numbered = false
        public init() {}
    }

    public struct Stats: Sendable, Codable {
        public var commits: Int
        public var errors: Int
        public var durationSeconds: Double
        public var p50Ms: Double
        public var p99Ms: Double
        public var maxMs: Double
        public var meanMs: Double
        public var lastError: String?

        /// Statistics of the commits in a latency log that began within `from...to` (unix seconds).
        public static func fromLog(_ path: String, from: Double = 0, to: Double = .infinity) throws -> Stats {
            let text = try String(contentsOfFile: path, encoding: .utf8)
            var latencies: [Double] = []
            var first = Double.infinity
            var last = 0.0
            for line in text.split(separator: "\n") {
                let fields = line.split(separator: " ")
                guard fields.count == 2, let at = Double(fields[0]), let latency = Double(fields[1]), at >= from, at <= to else { continue }
                latencies.append(latency)
                first = min(first, at)
                last = max(last, at)
            }
            return Stats(latencies: latencies, errors: 0, duration: latencies.isEmpty ? 0 : last - first, lastError: nil)
        }

        public init(latencies: [Double], errors: Int, duration: Double, lastError: String?) {
            let sorted = latencies.sorted()
            func percentile(_ p: Double) -> Double {
                sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * p).rounded()))] * 1000
            }
            commits = sorted.count
            self.errors = errors
            durationSeconds = duration
            p50Ms = percentile(0.5)
            p99Ms = percentile(0.99)
            maxMs = (sorted.last ?? 0) * 1000
            meanMs = sorted.isEmpty ? 0 : sorted.reduce(0, +) / Double(sorted.count) * 1000
            self.lastError = lastError
        }
    }

    /// Runs until `duration` passes or a SIGINT/SIGTERM arrives, then returns the statistics.
    public static func run(store path: String, options: Options) throws -> Stats {
        var config = Configuration()
        config.busyMode = .timeout(options.busyTimeout)
        config.label = "storectl-lab.writer"
        var queue = try DatabaseQueue(path: path, configuration: config)
        if let pages = options.autocheckpoint {
            try queue.inDatabase { try $0.execute(sql: "PRAGMA wal_autocheckpoint = \(pages)") }
        }
        var commitLog: Int32 = -1
        if let file = options.commitLog {
            commitLog = open(file, O_WRONLY | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard commitLog >= 0 else { throw StoreOpsError.posix(errno, doing: "opening \(file)", side: .output) }
        }
        defer { if commitLog >= 0 { close(commitLog) } }
        let sample = try queue.inDatabase { db in
            let isSample = try db.tableExists("ZITEM") && db.tableExists("Z_PRIMARYKEY")
            if !isSample {
                try db.execute(sql: "CREATE TABLE IF NOT EXISTS lab_load (id INTEGER PRIMARY KEY, at REAL, payload BLOB)")
            }
            return isSample
        }
        var latencies: [Double] = []
        var beganAt: [Double] = []
        latencies.reserveCapacity(100_000)
        beganAt.reserveCapacity(100_000)
        var errors = 0
        var lastError: String?
        let start = Date()
        var next = start
        var ready = false
        let payload = Data(repeating: 0xA5, count: 200)
        var number: Int64 = 0
        if options.reopen { try queue.close() }
        while ProcessSignals.received == nil {
            if let duration = options.duration, Date().timeIntervalSince(start) >= duration { break }
            let began = Date()
            number += 1
            do {
                if options.reopen { queue = try DatabaseQueue(path: path, configuration: config) }
                defer { if options.reopen { try? queue.close() } }
                let key = try queue.inDatabase { db -> Int64 in
                    try db.execute(sql: "BEGIN IMMEDIATE")
                    do {
                        let key: Int64
                        if sample {
                            let pk = (try Int.fetchOne(db, sql: "SELECT Z_MAX FROM Z_PRIMARYKEY WHERE Z_ENT = 2") ?? 0) + 1
                            let now = Date().timeIntervalSince1970 - CoreDataStore.referenceDateOffset
                            try db.execute(sql: """
                                INSERT INTO ZITEM (Z_PK, Z_ENT, Z_OPT, ZISDELETED, ZPRIORITY, ZCATEGORY, ZCREATEDAT, ZTITLE, ZBODY)
                                VALUES (?, 3, 1, 0, 1, 1, ?, ?, ?)
                                """, arguments: [pk, now, "written by the load \(pk)" + (options.reopen || options.numbered ? " #\(number)" : ""), String(repeating: "x", count: 150)])
                            try db.execute(sql: "UPDATE Z_PRIMARYKEY SET Z_MAX = ? WHERE Z_ENT = 2", arguments: [pk])
                            key = options.reopen || options.numbered ? number : Int64(pk)
                        } else {
                            try db.execute(sql: "INSERT INTO lab_load (at, payload) VALUES (?, ?)",
                                           arguments: [Date().timeIntervalSince1970, payload])
                            key = db.lastInsertedRowID
                        }
                        try db.execute(sql: "COMMIT")
                        return key
                    } catch {
                        try? db.execute(sql: "ROLLBACK")
                        throw error
                    }
                }
                if commitLog >= 0 {
                    let line = Array(String(format: "%lld %.6f\n", key, Date().timeIntervalSince1970).utf8)
                    _ = line.withUnsafeBytes { write(commitLog, $0.baseAddress, $0.count) }
                }
                latencies.append(Date().timeIntervalSince(began))
                beganAt.append(began.timeIntervalSince1970)
                if !ready, let file = options.readyFile {
                    _ = FileManager.default.createFile(atPath: file, contents: Data("ready\n".utf8))
                    ready = true
                }
            } catch {
                errors += 1
                lastError = "\(error)"
            }
            next = next.addingTimeInterval(options.interval)
            let wait = next.timeIntervalSinceNow
            if wait > 0 { usleep(useconds_t(wait * 1_000_000)) } else { next = Date() }
        }
        try? queue.close()
        if let log = options.latencyLog {
            let lines = zip(beganAt, latencies).map { String(format: "%.6f %.6f\n", $0, $1) }.joined()
            try Data(lines.utf8).write(to: URL(fileURLWithPath: log))
        }
        return Stats(latencies: latencies, errors: errors, duration: Date().timeIntervalSince(start), lastError: lastError)
    }
}

/// Holds a lock on a store for a while, like an app in the middle of a long transaction.
public enum LockHolder {
    public enum Mode: String, Sendable, CaseIterable {
        /// BEGIN IMMEDIATE plus a write: the write lock (RESERVED in rollback mode).
        case write
        /// BEGIN EXCLUSIVE plus a write: in rollback mode no one else can even read.
        case exclusive
        /// A read transaction.
        case read
    }

    /// Takes the lock, touches `readyFile`, waits `seconds` (or a signal), rolls back.
    public static func hold(store path: String, mode: Mode, seconds: TimeInterval, readyFile: String?) throws {
        let queue = try DatabaseQueue(path: path)
        try queue.inDatabase { db in
            switch mode {
            case .read:
                try db.execute(sql: "BEGIN")
                _ = try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master")
            case .write, .exclusive:
                try db.execute(sql: mode == .write ? "BEGIN IMMEDIATE" : "BEGIN EXCLUSIVE")
                try db.execute(sql: "CREATE TABLE IF NOT EXISTS lab_hold (x)")
                try db.execute(sql: "INSERT INTO lab_hold VALUES (1)")
            }
            if let readyFile { _ = FileManager.default.createFile(atPath: readyFile, contents: Data("held\n".utf8)) }
            let until = Date().addingTimeInterval(seconds)
            while Date() < until, ProcessSignals.received == nil { usleep(10_000) }
            try db.execute(sql: "ROLLBACK")
        }
        try queue.close()
    }
}
