import Foundation

/// The entities and relationships of a Core Data model, as read from a store's `Z_MODELCACHE`.
///
/// Only what storectl needs: entity inheritance, and for every relationship its owner,
/// destination, inverse, cardinality and delete rule.
public struct CoreDataModel: Sendable, Equatable {
    /// NSDeleteRule as stored in the archive.
    public enum DeleteRule: Int, Sendable, Codable {
        case noAction = 0, nullify = 1, cascade = 2, deny = 3

        public var name: String {
            switch self {
            case .noAction: "no action"
            case .nullify: "nullify"
            case .cascade: "cascade"
            case .deny: "deny"
            }
        }
    }

    public struct Relationship: Sendable, Equatable, Codable {
        /// The entity that declares the relationship.
        public var entity: String
        public var name: String
        public var destination: String
        public var inverse: String?
        public var isToMany: Bool
        public var isOrdered: Bool
        public var deleteRule: DeleteRule

        public init(entity: String, name: String, destination: String, inverse: String?,
                    isToMany: Bool, isOrdered: Bool = false, deleteRule: DeleteRule) {
            self.entity = entity
            self.name = name
            self.destination = destination
            self.inverse = inverse
            self.isToMany = isToMany
            self.isOrdered = isOrdered
            self.deleteRule = deleteRule
        }
    }

    /// Entity name -> its superentity's name (nil for a root).
    public var superentity: [String: String?]
    public var relationships: [Relationship]

    public init(superentity: [String: String?], relationships: [Relationship]) {
        self.superentity = superentity
        self.relationships = relationships
    }

    /// The relationship `name` declared by `entity` or one of its superentities.
    public func relationship(_ name: String, of entity: String) -> Relationship? {
        for e in ancestors(of: entity) {
            if let found = relationships.first(where: { $0.entity == e && $0.name == name }) { return found }
        }
        return nil
    }

    /// `entity`, its superentity, its superentity's... (a cycle in a damaged model ends the walk).
    public func ancestors(of entity: String) -> [String] {
        var chain = [entity]
        while let parent = superentity[chain.last!] ?? nil, !chain.contains(parent), chain.count < 64 { chain.append(parent) }
        return chain
    }

    /// Parses the `Z_CONTENT` blob of `Z_MODELCACHE`: raw DEFLATE of a keyed-archive binary plist.
    ///
    /// - Throws: exit 65 when the blob does not inflate or is not a model archive.
    public static func parse(modelCache blob: Data) throws -> CoreDataModel {
        let archive = try KeyedArchive(plist: try Deflate.inflate(blob))
        var names: [Int: String] = [:]
        var superentity: [String: String?] = [:]
        let entityIndices = archive.indices(ofClass: "NSEntityDescription")
        for index in entityIndices {
            guard let object = archive.objects[index] as? [String: Any],
                  let name = archive.string(object["NSEntityName"]) else { continue }
            names[index] = name
        }
        for index in entityIndices {
            guard let name = names[index], let object = archive.objects[index] as? [String: Any] else { continue }
            superentity[name] = KeyedArchive.uid(object["NSSuperentity"]).flatMap { names[$0] }
        }
        guard !superentity.isEmpty else {
            throw StoreOpsError(.badData, "the model cache holds no entity descriptions")
        }
        var relationships: [Relationship] = []
        for index in archive.indices(ofClass: "NSRelationshipDescription") {
            guard let object = archive.objects[index] as? [String: Any],
                  let name = archive.string(object["NSPropertyName"]),
                  let owner = KeyedArchive.uid(object["NSEntity"]).flatMap({ names[$0] }),
                  let destination = KeyedArchive.uid(object["NSDestinationEntity"]).flatMap({ names[$0] })
                    ?? archive.string(object["_NSDestinationEntityName"])
            else { continue }
            let maxCount = (object["NSMaxCount"] as? Int) ?? 0
            let rule = DeleteRule(rawValue: (object["NSDeleteRule"] as? Int) ?? 0) ?? .noAction
            relationships.append(Relationship(
                entity: owner, name: name, destination: destination,
                inverse: archive.string(object["_NSInverseRelationshipName"]),
                isToMany: maxCount != 1,
                isOrdered: (object["NSIsOrdered"] as? Bool) ?? false,
                deleteRule: rule))
        }
        relationships.sort { ($0.entity, $0.name) < ($1.entity, $1.name) }
        return CoreDataModel(superentity: superentity, relationships: relationships)
    }
}
