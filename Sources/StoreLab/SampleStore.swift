import Foundation
import GRDB
import StoreOps

/// Generates Core Data-shaped sample stores (see `SampleModel`) for the demo, tests and benchmarks.
///
/// Deterministic for a given seed. A fifth of the items (by default) are soft-deleted
/// (`ZISDELETED = 1`, `ZDELETEDAT` in Core Data reference-date seconds), spread over the last
/// `deletedSpanDays` days, so most of them are past a 30-day retention.
public enum SampleStore {
    public struct Options: Sendable {
        public var items = 10_000
        public var categories = 50
        public var tags = 20
        public var deletedFraction = 0.2
        public var deletedSpanDays = 180.0
        /// "wal" or "delete".
        public var journalMode = "wal"
        /// Characters of body text per item (the knob for store size: ~250 B/row at 120).
        public var bodyLength = 120
        /// Files to put in `.<stem>_SUPPORT/_EXTERNAL_DATA/`.
        public var externalFiles = 0
        public var seed: UInt64 = 42
        public var now = Date()
        /// `Z_METADATA.Z_UUID`; random when nil.
        public var uuid: String?

        public init() {}
    }

    public struct Summary: Sendable, Codable {
        public var path: String
        public var items: Int
        public var softDeleted: Int
        public var categories: Int
        public var attachments: Int
        public var bytes: UInt64
    }

    /// Creates the store at `path` (which must not exist).
    public static func create(at path: String, options: Options = Options()) throws -> Summary {
        guard FileSystem.kind(of: path) == .missing else {
            throw StoreOpsError(.cannotCreate, "\(path) already exists", hint: "remove it or choose another path")
        }
        var rng = SplitMix64(seed: options.seed)
        var config = Configuration()
        config.label = "storectl-lab.make-store"
        let queue = try DatabaseQueue(path: path, configuration: config)
        let nowRef = options.now.timeIntervalSince1970 - CoreDataStore.referenceDateOffset
        var softDeleted = 0
        var attachments = 0
        try queue.inDatabase { db in
            try db.execute(sql: "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -65536")
            try db.execute(sql: SampleModel.schema)
            try db.inTransaction {
                let uuid = options.uuid ?? UUID().uuidString
                try db.execute(sql: "INSERT INTO Z_METADATA (Z_VERSION, Z_UUID, Z_PLIST) VALUES (1, ?, ?)",
                               arguments: [uuid, try SampleModel.metadataPlist(uuid: uuid)])
                try db.execute(sql: "INSERT INTO Z_MODELCACHE (Z_CONTENT) VALUES (?)", arguments: [try SampleModel.modelCache()])

                let category = try db.makeStatement(sql: "INSERT INTO ZCATEGORY VALUES (?, 1, 1, ?, ?, ?, ?)")
                for pk in 1...max(1, options.categories) {
                    let deleted = pk % 10 == 0
                    try category.execute(arguments: [pk, deleted ? 1 : 0, deleted ? nowRef - Double(pk) * 86_400 : nil,
                                                     ["red", "green", "blue", "amber"][pk % 4], "Category \(pk)"])
                }
                // The last two tags are soft-deleted long ago; only the very last is linked to no item.
                let tag = try db.makeStatement(sql: "INSERT INTO ZTAG VALUES (?, 6, 1, ?, ?, ?)")
                let tagCount = max(1, options.tags)
                for pk in 1...tagCount {
                    let deleted = pk >= tagCount - 1 && tagCount > 2
                    try tag.execute(arguments: [pk, deleted ? 1 : 0, deleted ? nowRef - 90 * 86_400 : nil, "tag-\(pk)"])
                }

                let item = try db.makeStatement(sql: "INSERT INTO ZITEM VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)")
                let attachment = try db.makeStatement(sql: "INSERT INTO ZATTACHMENT VALUES (?, 5, 1, ?, ?, ?, ?)")
                let tagLink = try db.makeStatement(sql: "INSERT OR IGNORE INTO Z_2TAGS VALUES (?, ?)")
                let words = Lorem.words
                for pk in 1...max(1, options.items) {
                    let ent = rng.next() % 10 < 7 ? 3 : 4
                    let createdAt = nowRef - Double(rng.next() % (400 * 86_400))
                    let isDeleted = Double(rng.next() % 1_000_000) / 1_000_000 < options.deletedFraction
                    let deletedAt: Double? = isDeleted
                        ? max(createdAt, nowRef - Double(rng.next() % UInt64(max(1, options.deletedSpanDays * 86_400))))
                        : nil
                    if isDeleted { softDeleted += 1 }
                    let categoryPK: Int? = rng.next() % 20 == 0 ? nil : Int(rng.next() % UInt64(max(1, options.categories))) + 1
                    var title = "Item \(pk):"
                    for _ in 0..<4 { title += " " + words[Int(rng.next() % UInt64(words.count))] }
                    var body = ""
                    // utf8.count (the words are ASCII): a String's count walks it whole, and this loop ran it for every word.
                    while body.utf8.count < options.bodyLength { body += words[Int(rng.next() % UInt64(words.count))] + " " }
                    try item.execute(arguments: [pk, ent, isDeleted ? 1 : 0, Int(rng.next() % 4), categoryPK, createdAt,
                                                 deletedAt, ent == 3 ? createdAt + 7 * 86_400 : nil, title, body])
                    if pk % 10 == 0 {
                        attachments += 1
                        try attachment.execute(arguments: [attachments, 64, pk, "file-\(pk).bin", Data(repeating: UInt8(pk % 251), count: 64)])
                    }
                    if pk % 5 == 0 {
                        // Tags 1...n-1 are linked; the last tag never is.
                        try tagLink.execute(arguments: [pk, Int(rng.next() % UInt64(max(1, options.tags - 1))) + 1])
                    }
                }
                for entity in SampleModel.entities {
                    let max: Int = switch entity.name {
                    case "Category": max(1, options.categories)
                    case "Item": max(1, options.items)
                    case "Attachment": attachments
                    case "Tag": max(1, options.tags)
                    default: 0
                    }
                    try db.execute(sql: "INSERT INTO Z_PRIMARYKEY VALUES (?, ?, ?, ?)",
                                   arguments: [entity.ent, entity.name, entity.superEnt, max])
                }
                return .commit
            }
            try db.execute(sql: "PRAGMA journal_mode = \(options.journalMode == "wal" ? "WAL" : "DELETE")")
        }
        try queue.close()
        if options.externalFiles > 0 {
            let store = StoreFile(unchecked: path)
            try FileManager.default.createDirectory(atPath: store.externalDataPath, withIntermediateDirectories: true)
            for i in 0..<options.externalFiles {
                let name = UUID(uuid: (UInt8(i), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1)).uuidString
                let data = Data((0..<(4096 + i * 100)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i) })
                try data.write(to: URL(fileURLWithPath: (store.externalDataPath as NSString).appendingPathComponent(name)))
            }
        }
        return Summary(path: FileSystem.absolute(path), items: options.items, softDeleted: softDeleted,
                       categories: options.categories, attachments: attachments, bytes: FileSystem.size(of: path) ?? 0)
    }
}

/// A small, fast, seedable PRNG (SplitMix64): reproducible sample data.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

enum Lorem {
    static let words = """
        alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec \
        romeo sierra tango uniform victor whiskey xray yankee zulu groceries invoice meeting dentist garden \
        laundry report review deploy backup restore migrate purge schedule call email budget travel flight \
        hotel booking renew passport insurance taxes receipt project roadmap sprint retro design sketch
        """.split(separator: " ").map(String.init)
}
