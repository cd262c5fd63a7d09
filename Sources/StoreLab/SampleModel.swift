import Synchronization
import Foundation
import StoreOps

/// The Core Data model of the sample stores: a small task manager.
///
///     Category (1) <-->> Item (2, abstract) --> Task (3), Note (4)
///     Item (2)     <-->> Attachment (5)        Item <<-->> Tag (6)  via join table Z_2TAGS
///
/// Delete rules: Category.items nullify (deleting a category clears its items' ZCATEGORY),
/// Item.category nullify, Item.attachments cascade, Attachment.item nullify, Item.tags nullify,
/// Tag.items deny (a tag still linked to items is not deleted). Categories, items and tags can be
/// soft-deleted (ZISDELETED, ZDELETEDAT).
public enum SampleModel {
    public struct Entity: Sendable {
        public var ent: Int
        public var name: String
        public var superEnt: Int
        public init(ent: Int, name: String, superEnt: Int) {
            self.ent = ent
            self.name = name
            self.superEnt = superEnt
        }
    }

    public static let entities: [Entity] = [
        Entity(ent: 1, name: "Category", superEnt: 0),
        Entity(ent: 2, name: "Item", superEnt: 0),
        Entity(ent: 3, name: "Task", superEnt: 2),
        Entity(ent: 4, name: "Note", superEnt: 2),
        Entity(ent: 5, name: "Attachment", superEnt: 0),
        Entity(ent: 6, name: "Tag", superEnt: 0),
    ]

    public static let relationships: [CoreDataModel.Relationship] = [
        .init(entity: "Category", name: "items", destination: "Item", inverse: "category", isToMany: true, deleteRule: .nullify, isOptional: true),
        .init(entity: "Item", name: "category", destination: "Category", inverse: "items", isToMany: false, deleteRule: .nullify, isOptional: true),
        .init(entity: "Item", name: "attachments", destination: "Attachment", inverse: "item", isToMany: true, deleteRule: .cascade, isOptional: true),
        .init(entity: "Attachment", name: "item", destination: "Item", inverse: "attachments", isToMany: false, deleteRule: .nullify, isOptional: true),
        .init(entity: "Item", name: "tags", destination: "Tag", inverse: "items", isToMany: true, deleteRule: .nullify, isOptional: true),
        .init(entity: "Tag", name: "items", destination: "Item", inverse: "tags", isToMany: true, deleteRule: .deny, isOptional: true),
    ]

    public static let schema = """
        CREATE TABLE Z_PRIMARYKEY (Z_ENT INTEGER PRIMARY KEY, Z_NAME VARCHAR, Z_SUPER INTEGER, Z_MAX INTEGER);
        CREATE TABLE Z_METADATA (Z_VERSION INTEGER PRIMARY KEY, Z_UUID VARCHAR(255), Z_PLIST BLOB);
        CREATE TABLE Z_MODELCACHE (Z_CONTENT BLOB);
        CREATE TABLE ZCATEGORY (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZISDELETED INTEGER,
            ZDELETEDAT TIMESTAMP, ZCOLOR VARCHAR, ZNAME VARCHAR);
        CREATE TABLE ZITEM (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZISDELETED INTEGER, ZPRIORITY INTEGER,
            ZCATEGORY INTEGER, ZCREATEDAT TIMESTAMP, ZDELETEDAT TIMESTAMP, ZDUEDATE TIMESTAMP, ZTITLE VARCHAR, ZBODY VARCHAR);
        CREATE TABLE ZATTACHMENT (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZBYTES INTEGER, ZITEM INTEGER,
            ZFILENAME VARCHAR, ZDATA BLOB);
        CREATE TABLE ZTAG (Z_PK INTEGER PRIMARY KEY, Z_ENT INTEGER, Z_OPT INTEGER, ZISDELETED INTEGER, ZDELETEDAT TIMESTAMP, ZNAME VARCHAR);
        CREATE TABLE Z_2TAGS (Z_2ITEMS INTEGER, Z_6TAGS INTEGER, PRIMARY KEY (Z_2ITEMS, Z_6TAGS));
        CREATE INDEX ZITEM_Z_ENT_INDEX ON ZITEM (Z_ENT);
        CREATE INDEX ZITEM_ZCATEGORY_INDEX ON ZITEM (ZCATEGORY);
        CREATE INDEX ZATTACHMENT_ZITEM_INDEX ON ZATTACHMENT (ZITEM);
        CREATE INDEX Z_2TAGS_Z_6TAGS_INDEX ON Z_2TAGS (Z_6TAGS, Z_2ITEMS);
        """

    /// Version hashes as Core Data stores them: 32 bytes per entity.
    public static var versionHashes: [String: Data] {
        Dictionary(uniqueKeysWithValues: entities.map { entity in
            (entity.name, Hashing.sha256Digest(Data("storectl-sample:\(entity.name):v1".utf8)))
        })
    }

    /// `Z_METADATA.Z_PLIST`: a binary property list like Core Data writes.
    /// Made once per uuid per process, as the model cache is: the serializer writes the
    /// dictionaries in no fixed order, and stores made by one process must be identical byte for
    /// byte (a crash test's fixtures, made again for each run, are compared by content).
    public static func metadataPlist(uuid: String) throws -> Data {
        if let made = madePlists.withLock({ $0[uuid] }) { return made }
        let made = try makeMetadataPlist(uuid: uuid)
        madePlists.withLock { $0[uuid] = made }
        return made
    }

    private static let madePlists = Mutex<[String: Data]>([:])

    private static func makeMetadataPlist(uuid: String) throws -> Data {
        linkArrayBridging()
        let plist: [String: Any] = [
            "NSStoreType": "SQLite",
            "NSPersistenceFrameworkVersion": 1447,
            "NSStoreModelVersionHashesVersion": 3,
            "NSStoreModelVersionIdentifiers": ["TasksModel-2"],
            "NSStoreModelVersionHashes": versionHashes,
            "NSStoreUUID": uuid,
            "_NSAutoVacuumLevel": "2",
        ]
        return try PropertyListSerialization.data(fromPropertyList: plist, format: .binary, options: 0)
    }

    /// `Z_MODELCACHE.Z_CONTENT`: raw DEFLATE of a keyed archive with entity and relationship
    /// descriptions under Core Data's class names and keys.
    ///
    /// Made once per process: the archiver writes dictionaries in no fixed order, and stores made
    /// by one process (a crash test's fixtures) must be identical.
    public static func modelCache() throws -> Data { try madeModelCache.get() }

    private static let madeModelCache = Result { try modelCache(entities: entities, relationships: relationships) }

    /// A model cache for any model (tests build Photos-like shapes with it).
    ///
    /// - Parameter inheritedCopies: also archive every inherited relationship under each
    ///   sub-entity (owner = the sub-entity), as compiled models do for some stores.
    public static func modelCache(entities: [Entity], relationships: [CoreDataModel.Relationship],
                                  inheritedCopies: Bool = false) throws -> Data {
        linkArrayBridging()
        let archived = Dictionary(uniqueKeysWithValues: entities.map { ($0.name, ArchivedEntity(name: $0.name)) })
        for entity in entities where entity.superEnt != 0 {
            guard let parent = entities.first(where: { $0.ent == entity.superEnt }) else { continue }
            archived[entity.name]?.superentity = archived[parent.name]
        }
        var all = relationships
        if inheritedCopies {
            func descendants(_ name: String) -> [String] {
                guard let ent = entities.first(where: { $0.name == name })?.ent else { return [] }
                let children = entities.filter { $0.superEnt == ent }.map(\.name)
                return children + children.flatMap(descendants)
            }
            for r in relationships {
                for sub in descendants(r.entity) {
                    all.append(.init(entity: sub, name: r.name, destination: r.destination, inverse: r.inverse,
                                     isToMany: r.isToMany, deleteRule: r.deleteRule, isOptional: r.isOptional))
                }
            }
        }
        var byKey: [String: ArchivedRelationship] = [:]
        for r in all {
            guard let owner = archived[r.entity], let destination = archived[r.destination] else { continue }
            let relationship = ArchivedRelationship(r, owner: owner, destination: destination)
            byKey["\(r.entity).\(r.name)"] = relationship
            owner.properties[r.name] = relationship
        }
        for r in all {
            if let inverse = r.inverse { byKey["\(r.entity).\(r.name)"]?.inverseObject = byKey["\(r.destination).\(inverse)"] }
        }
        let archiver = NSKeyedArchiver(requiringSecureCoding: false)
        archiver.encode(ArchivedModel(entities: entities.compactMap { archived[$0.name] }), forKey: NSKeyedArchiveRootObjectKey)
        archiver.finishEncoding()
        return try Deflate.deflate(try renamingClasses(archiver.encodedData))
    }

    /// Gives the archived classes Core Data's names. `NSKeyedArchiver.setClassName(_:for:)` would
    /// be the way, but Foundation on Linux stores that mapping under a key its lookup never uses,
    /// so the archive is read back as a property list and its class records are rewritten.
    static func renamingClasses(_ archive: Data) throws -> Data {
        let names = ["ArchivedEntity": "NSEntityDescription", "ArchivedRelationship": "NSRelationshipDescription",
                     "ArchivedModel": "NSManagedObjectModel"]
        guard var plist = try PropertyListSerialization.propertyList(from: archive, options: [], format: nil) as? [String: Any],
              var objects = plist["$objects"] as? [Any] else {
            throw StoreOpsError(.failure, "NSKeyedArchiver produced no $objects")
        }
        for (index, object) in objects.enumerated() {
            guard let record = object as? [String: Any], let name = record["$classname"] as? String,
                  let swiftName = name.split(separator: ".").last, let coreDataName = names[String(swiftName)] else { continue }
            objects[index] = ["$classname": coreDataName, "$classes": [coreDataName, "NSObject"]]
        }
        plist["$objects"] = objects
        return try PropertyListSerialization.data(fromPropertyList: plist, format: .binary, options: 0)
    }
}

final class ArchivedModel: NSObject, NSCoding {
    let entities: [ArchivedEntity]
    init(entities: [ArchivedEntity]) { self.entities = entities }
    required init?(coder: NSCoder) { nil }
    func encode(with coder: NSCoder) {
        coder.encode(NSDictionary(dictionary: Dictionary(uniqueKeysWithValues: entities.map { ($0.name, $0) })), forKey: "NSEntities")
    }
}

final class ArchivedEntity: NSObject, NSCoding {
    let name: String
    var superentity: ArchivedEntity?
    var properties: [String: ArchivedRelationship] = [:]
    init(name: String) { self.name = name }
    required init?(coder: NSCoder) { nil }
    func encode(with coder: NSCoder) {
        coder.encode(name, forKey: "NSEntityName")
        coder.encode(name, forKey: "NSClassNameForEntity")
        if let superentity { coder.encode(superentity, forKey: "NSSuperentity") }
        coder.encode(NSDictionary(dictionary: properties), forKey: "NSProperties")
    }
}

final class ArchivedRelationship: NSObject, NSCoding {
    let description_: CoreDataModel.Relationship
    let owner: ArchivedEntity
    let destination: ArchivedEntity
    var inverseObject: ArchivedRelationship?
    init(_ description: CoreDataModel.Relationship, owner: ArchivedEntity, destination: ArchivedEntity) {
        self.description_ = description
        self.owner = owner
        self.destination = destination
    }
    required init?(coder: NSCoder) { nil }
    func encode(with coder: NSCoder) {
        coder.encode(description_.name, forKey: "NSPropertyName")
        coder.encode(owner, forKey: "NSEntity")
        coder.encode(destination, forKey: "NSDestinationEntity")
        coder.encode(description_.destination, forKey: "_NSDestinationEntityName")
        if let inverse = description_.inverse { coder.encode(inverse, forKey: "_NSInverseRelationshipName") }
        if let inverseObject { coder.encode(inverseObject, forKey: "NSInverseRelationship") }
        coder.encode(description_.deleteRule.rawValue, forKey: "NSDeleteRule")
        coder.encode(description_.isToMany ? 0 : 1, forKey: "NSMaxCount")
        coder.encode(0, forKey: "NSMinCount")
        coder.encode(description_.isOptional ?? true, forKey: "NSIsOptional")
    }
}

/// A binary built with `--static-swift-stdlib` links Foundation from `libFoundation.a`, and the
/// archive member that holds Array's bridging conformance to NSArray (`Array.swift.o`) is
/// referenced by no other member, so the linker left it out: PropertyListSerialization and
/// NSKeyedArchiver then met Swift arrays they could not bridge ("property lists cannot contain
/// objects of type 'Not A Type'", every bench script's store generation). Naming the conformance
/// here links it. (storectl itself only reads property lists, which bridges through types that
/// are linked; the install test reads the model of a store with the static binary.)
@_optimize(none) func linkArrayBridging() {
    let keep: any _ObjectiveCBridgeable.Type = [Any].self
    _ = keep
    _ = [Any]()._bridgeToObjectiveC()
}
