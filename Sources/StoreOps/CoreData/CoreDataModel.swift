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
        /// NSIsOptional (a required to-one must be set; a required to-many needs one object or
        /// more); nil where it was not known (a model described before this was read).
        public var isOptional: Bool?

        public init(entity: String, name: String, destination: String, inverse: String?,
                    isToMany: Bool, isOrdered: Bool = false, deleteRule: DeleteRule, isOptional: Bool? = nil) {
            self.entity = entity
            self.name = name
            self.destination = destination
            self.inverse = inverse
            self.isToMany = isToMany
            self.isOrdered = isOrdered
            self.deleteRule = deleteRule
            self.isOptional = isOptional
        }
    }

    /// An attribute: its declaring entity, name, NSAttributeType and optionality.
    public struct Attribute: Sendable, Equatable, Codable {
        public var entity: String
        public var name: String
        /// NSAttributeType's raw value (700 string, 900 date, 1000 binary...).
        public var type: Int
        public var isOptional: Bool

        public init(entity: String, name: String, type: Int, isOptional: Bool = true) {
            self.entity = entity
            self.name = name
            self.type = type
            self.isOptional = isOptional
        }

        /// The type's name, as the model editor shows it.
        public var typeName: String {
            switch type {
            case 100: "Integer 16"
            case 200: "Integer 32"
            case 300: "Integer 64"
            case 400: "Decimal"
            case 500: "Double"
            case 600: "Float"
            case 700: "String"
            case 800: "Boolean"
            case 900: "Date"
            case 1000: "Binary Data"
            case 1100: "UUID"
            case 1200: "URI"
            case 1800: "Transformable"
            case 2000: "Object ID"
            case 2100: "Composite"
            default: "type \(type)"
            }
        }
    }

    /// Entity name -> its superentity's name (nil for a root).
    public var superentity: [String: String?]
    public var relationships: [Relationship]
    /// Sorted by entity, then name.
    public var attributes: [Attribute]
    /// Entity name -> its uniqueness constraints (each a list of property names), when declared.
    public var uniquenessConstraints: [String: [[String]]]

    public init(superentity: [String: String?], relationships: [Relationship], attributes: [Attribute] = [],
                uniquenessConstraints: [String: [[String]]] = [:]) {
        self.superentity = superentity
        self.relationships = relationships
        self.attributes = attributes
        self.uniquenessConstraints = uniquenessConstraints
    }

    /// The attribute `name` declared by `entity` or one of its superentities.
    public func attribute(_ name: String, of entity: String) -> Attribute? {
        for e in ancestors(of: entity) {
            if let found = attributes.first(where: { $0.entity == e && $0.name == name }) { return found }
        }
        return nil
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
                deleteRule: rule,
                isOptional: (object["NSIsOptional"] as? Bool) ?? true))
        }
        relationships.sort { ($0.entity, $0.name) < ($1.entity, $1.name) }
        var attributes: [Attribute] = []
        for index in archive.indices(ofClass: "NSAttributeDescription") {
            guard let object = archive.objects[index] as? [String: Any],
                  let name = archive.string(object["NSPropertyName"]),
                  let owner = KeyedArchive.uid(object["NSEntity"]).flatMap({ names[$0] }) else { continue }
            attributes.append(Attribute(entity: owner, name: name, type: (object["NSAttributeType"] as? Int) ?? 0,
                                        isOptional: (object["NSIsOptional"] as? Bool) ?? true))
        }
        attributes.sort { ($0.entity, $0.name) < ($1.entity, $1.name) }
        var constraints: [String: [[String]]] = [:]
        for index in entityIndices {
            guard let name = names[index], let object = archive.objects[index] as? [String: Any],
                  let outer = archive.array(object["NSUniquenessConstraints"]) else { continue }
            let lists = outer.compactMap { item in archive.array(item).map { $0.compactMap { archive.string($0) } } }.filter { !$0.isEmpty }
            if !lists.isEmpty { constraints[name] = lists }
        }
        return CoreDataModel(superentity: superentity, relationships: relationships, attributes: attributes, uniquenessConstraints: constraints)
    }
}
