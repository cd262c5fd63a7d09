import Foundation
import GRDB

/// A Core Data store's metadata, entity table and (when cached) model, read without Core Data.
///
/// Facts this relies on (see ../shared/fixtures/coredata/README.md, confirmed on real stores from
/// Notes and Photos): sub-entities share their root's table and are told apart by `Z_ENT`;
/// `Z_MAX` on a root must be at least `max(Z_PK)`; dates are seconds since 2001-01-01.
public struct CoreDataStore: Sendable {
    public var metadata: CoreDataMetadata
    /// Sorted by `Z_ENT`.
    public var entities: [CoreDataEntity]
    /// The relationship graph, when `Z_MODELCACHE` is present and readable.
    public var model: CoreDataModel?
    /// Why `model` is nil, when it is.
    public var modelUnavailableReason: String?

    /// Seconds between the Unix epoch and Core Data's reference date, 2001-01-01T00:00:00Z.
    public static let referenceDateOffset: Double = 978_307_200

    public static func isCoreData(_ db: Database) throws -> Bool {
        try db.tableExists("Z_METADATA") && db.tableExists("Z_PRIMARYKEY")
    }

    /// Reads the store's Core Data facts, or nil when it is not a Core Data store.
    ///
    /// - Throws: exit 65 when `Z_METADATA` or `Z_PRIMARYKEY` exist but cannot be read.
    public static func read(_ db: Database) throws -> CoreDataStore? {
        guard try isCoreData(db) else { return nil }
        let metadata = try readMetadata(db)
        let entities = try readEntities(db)
        var model: CoreDataModel?
        var reason: String?
        if try db.tableExists("Z_MODELCACHE") {
            if let blob = try Data.fetchOne(db, sql: "SELECT CAST(Z_CONTENT AS BLOB) FROM Z_MODELCACHE LIMIT 1"), !blob.isEmpty {
                do { model = try CoreDataModel.parse(modelCache: blob) } catch let error as StoreOpsError {
                    reason = "Z_MODELCACHE is unreadable: \(error.message)"
                }
            } else {
                reason = "Z_MODELCACHE is empty"
            }
        } else {
            reason = "the store has no Z_MODELCACHE table"
        }
        return CoreDataStore(metadata: metadata, entities: entities, model: model, modelUnavailableReason: reason)
    }

    public func entity(named name: String) -> CoreDataEntity? { entities.first { $0.name == name } }
    public func entity(ent: Int) -> CoreDataEntity? { entities.first { $0.ent == ent } }

    /// The entity and all its sub-entities, at any depth.
    public func family(of ent: Int) -> [CoreDataEntity] {
        var result: [CoreDataEntity] = []
        var frontier = [ent]
        var seen = Set<Int>()
        while let next = frontier.popLast() {
            // Z_SUPER may form a cycle in a damaged store: each entity is visited once.
            guard seen.insert(next).inserted, let entity = entity(ent: next) else { continue }
            result.append(entity)
            frontier.append(contentsOf: entities.filter { $0.superEnt == next }.map(\.ent))
        }
        return result.sorted { $0.ent < $1.ent }
    }

    static func readMetadata(_ db: Database) throws -> CoreDataMetadata {
        guard let row = try Row.fetchOne(db, sql: "SELECT CAST(Z_UUID AS TEXT), CAST(Z_PLIST AS BLOB) FROM Z_METADATA LIMIT 1") else {
            throw StoreOpsError(.badData, "Z_METADATA is empty: the store has no Core Data metadata row")
        }
        var result = CoreDataMetadata(uuid: row.text(0), modelVersionHashes: [:], modelVersionIdentifiers: [])
        guard case .blob(let blob) = (row[1] as DatabaseValue).storage, !blob.isEmpty else { return result }
        if let problem = BinaryPlistCheck.problem(blob) {
            throw StoreOpsError(.badData, "Z_METADATA.Z_PLIST is not a readable property list (\(problem))")
        }
        guard let plist = try? PropertyListSerialization.propertyList(from: blob, options: [], format: nil) as? [String: Any] else {
            throw StoreOpsError(.badData, "Z_METADATA.Z_PLIST is not a property list")
        }
        result.storeType = plist["NSStoreType"] as? String
        result.frameworkVersion = (plist["NSPersistenceFrameworkVersion"] as? NSNumber)?.intValue
        result.modelVersionHashesDigest = plist["NSStoreModelVersionHashesDigest"] as? String
        result.modelVersionChecksum = plist["NSStoreModelVersionChecksumKey"] as? String
        result.modelVersionIdentifiers = (plist["NSStoreModelVersionIdentifiers"] as? [Any])?.compactMap { $0 as? String } ?? []
        if let hashes = plist["NSStoreModelVersionHashes"] as? [AnyHashable: Any] {
            for (key, value) in hashes {
                guard let name = key as? String, let data = value as? Data else { continue }
                result.modelVersionHashes[name] = data.base64EncodedString()
            }
        }
        return result
    }

    static func readEntities(_ db: Database) throws -> [CoreDataEntity] {
        // Cast in SQL: a value of another type (a key written as text by a database browser) reads
        // as a number instead of trapping the decoder.
        let rows = try Row.fetchAll(db, sql: """
            SELECT CAST(Z_ENT AS INTEGER), CAST(Z_NAME AS TEXT), CAST(Z_SUPER AS INTEGER), CAST(Z_MAX AS INTEGER)
            FROM Z_PRIMARYKEY ORDER BY CAST(Z_ENT AS INTEGER)
            """)
        var entities = try rows.map { row in
            let ent = Int(clamping: try row.optionalInteger(0, "Z_PRIMARYKEY.Z_ENT") ?? 0)
            return CoreDataEntity(ent: ent, name: row.text(1) ?? "", superEnt: Int(clamping: try row.optionalInteger(2, "Z_PRIMARYKEY.Z_SUPER") ?? 0),
                                  rootEnt: ent, max: Int(clamping: try row.optionalInteger(3, "Z_PRIMARYKEY.Z_MAX") ?? 0), table: nil)
        }
        let byEnt = Dictionary(entities.map { ($0.ent, $0) }, uniquingKeysWith: { first, _ in first })
        let tables = Set(try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'"))
        for i in entities.indices {
            var root = entities[i]
            var hops = 0
            while root.superEnt != 0, root.superEnt != root.ent, let parent = byEnt[root.superEnt], hops < 64 {
                root = parent
                hops += 1
            }
            entities[i].rootEnt = root.ent
            let upper = root.name.uppercased()
            // Persistent-history entities (Z_ENT >= 16000: CHANGE, TRANSACTION, ...) live in A-tables.
            entities[i].table = ["Z" + upper, "A" + upper].first { tables.contains($0) }
        }
        return entities
    }
}
