import Crypto
import Foundation
import GRDB
import StoreOps

/// A writer whose every commit can be checked by content: transactions at random intervals that
/// insert, update and delete rows of `churn`, and record in `churn_meta` which commit they are.
/// After each commit it appends "<seq> <unix time began> <unix time returned> <content hash>" to
/// a log, the hash being `ChurnLoad.contentHash` of the rows as they then are. A restored copy
/// of any point names its commit (`churn_meta.seq`) and must hash to the logged value.
///
/// Also, at random (`checkpointEvery` commits on average), `wal_checkpoint(PASSIVE|RESTART|TRUNCATE)`
/// and (`vacuumEvery`) `VACUUM`, as apps do.
public enum ChurnLoad {
    public struct Options: Sendable {
        public var maxIntervalMs = 5.0
        public var duration: TimeInterval = 5
        public var log: String
        public var seed: UInt64 = 1
        public var checkpointEvery: Int?
        public var vacuumEvery: Int?
        public var autocheckpoint: Int?
        public init(log: String) { self.log = log }
    }

    public struct Stats: Sendable, Codable {
        public var commits: Int
        public var errors: Int
        public var checkpoints: Int
        public var vacuums: Int
        public var lastError: String?
    }

    /// SHA-256 (hex) of every row of `churn` in id order, as "id|v|n\n".
    public static func contentHash(_ db: Database) throws -> String {
        var hasher = SHA256()
        let rows = try Row.fetchCursor(db, sql: "SELECT id, v, n FROM churn ORDER BY id")
        while let row = try rows.next() {
            let id: Int64 = row[0]
            let v: String = row[1]
            let n: Int64 = row[2]
            hasher.update(data: Data("\(id)|\(v)|\(n)\n".utf8))
        }
        return hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }

    public static func run(store path: String, options: Options) throws -> Stats {
        var config = Configuration()
        config.busyMode = .timeout(5)
        config.label = "storectl-lab.churn"
        let queue = try DatabaseQueue(path: path, configuration: config)
        try queue.inDatabase { db in
            if let pages = options.autocheckpoint { try db.execute(sql: "PRAGMA wal_autocheckpoint = \(pages)") }
            try db.execute(sql: "CREATE TABLE IF NOT EXISTS churn (id INTEGER PRIMARY KEY, v TEXT NOT NULL, n INTEGER NOT NULL)")
            try db.execute(sql: "CREATE TABLE IF NOT EXISTS churn_meta (k INTEGER PRIMARY KEY CHECK (k = 1), seq INTEGER NOT NULL)")
            try db.execute(sql: "INSERT OR IGNORE INTO churn_meta (k, seq) VALUES (1, 0)")
        }
        let log = open(options.log, O_WRONLY | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard log >= 0 else { throw StoreOpsError.posix(errno, doing: "opening \(options.log)", side: .output) }
        defer { close(log) }
        var random = SplitMix(seed: options.seed)
        var stats = Stats(commits: 0, errors: 0, checkpoints: 0, vacuums: 0)
        let start = Date()
        var seq = try queue.inDatabase { try Int.fetchOne($0, sql: "SELECT seq FROM churn_meta") ?? 0 }
        while ProcessSignals.received == nil, Date().timeIntervalSince(start) < options.duration {
            usleep(UInt32(random.next(below: UInt64(max(1, options.maxIntervalMs * 1000)))))
            let began = Date().timeIntervalSince1970
            do {
                let hash = try queue.inDatabase { db -> String in
                    try db.execute(sql: "BEGIN IMMEDIATE")
                    do {
                        let maxID = try Int64.fetchOne(db, sql: "SELECT max(id) FROM churn") ?? 0
                        for _ in 0..<(1 + random.next(below: 4)) {
                            switch random.next(below: 10) {
                            case 0..<5:
                                let size = 20 + Int(random.next(below: 600))
                                try db.execute(sql: "INSERT INTO churn (v, n) VALUES (?, ?)",
                                               arguments: [String(repeating: "abcdefghij", count: size / 10 + 1).prefix(size).description, Int64(random.next(below: 1_000_000))])
                            case 5..<8 where maxID > 0:
                                try db.execute(sql: "UPDATE churn SET n = n + 1, v = v || 'u' WHERE id = ?", arguments: [Int64(1 + random.next(below: UInt64(maxID)))])
                            case 8..<10 where maxID > 0:
                                try db.execute(sql: "DELETE FROM churn WHERE id = ?", arguments: [Int64(1 + random.next(below: UInt64(maxID)))])
                            default: break
                            }
                        }
                        try db.execute(sql: "UPDATE churn_meta SET seq = ? WHERE k = 1", arguments: [seq + 1])
                        let hash = try contentHash(db)
                        try db.execute(sql: "COMMIT")
                        return hash
                    } catch {
                        try? db.execute(sql: "ROLLBACK")
                        throw error
                    }
                }
                seq += 1
                stats.commits += 1
                let line = Array(String(format: "%d %.6f %.6f %@\n", seq, began, Date().timeIntervalSince1970, hash).utf8)
                _ = line.withUnsafeBytes { write(log, $0.baseAddress, $0.count) }
            } catch {
                stats.errors += 1
                stats.lastError = "\(error)"
            }
            if let every = options.checkpointEvery, random.next(below: UInt64(every)) == 0 {
                let mode = ["PASSIVE", "RESTART", "TRUNCATE"][Int(random.next(below: 3))]
                if (try? queue.inDatabase({ try $0.execute(sql: "PRAGMA wal_checkpoint(\(mode))") })) != nil { stats.checkpoints += 1 }
            }
            if let every = options.vacuumEvery, random.next(below: UInt64(every)) == 0 {
                if (try? queue.inDatabase({ try $0.execute(sql: "VACUUM") })) != nil { stats.vacuums += 1 }
            }
        }
        return stats
    }

    /// One logged commit.
    public struct Logged: Sendable {
        public var seq: Int
        public var began: Double
        public var returned: Double
        public var hash: String
    }

    public static func readLog(_ path: String) throws -> [Int: Logged] {
        var out: [Int: Logged] = [:]
        for line in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n") {
            let f = line.split(separator: " ")
            guard f.count == 4, let seq = Int(f[0]), let began = Double(f[1]), let returned = Double(f[2]) else { continue }
            out[seq] = Logged(seq: seq, began: began, returned: returned, hash: String(f[3]))
        }
        return out
    }
}

/// A small seeded generator (SplitMix64), so a test's load and choices can be replayed.
public struct SplitMix: RandomNumberGenerator, Sendable {
    var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func next(below bound: UInt64) -> UInt64 { bound == 0 ? 0 : next() % bound }
}
