import Foundation

/// The Core Data delete rules of a store, resolved to its tables and columns: for each entity,
/// what deleting one of its rows does to related rows.
///
/// - cascade: the related rows are deleted too (and their own rules apply).
/// - nullify: the related rows' reference is cleared and their `Z_OPT` bumped (Core Data's
///   optimistic-locking counter, so the app sees the change).
/// - deny: the row is not deleted while related rows exist.
/// - many-to-many: the join table's rows for the deleted row always go.
///
/// A relationship that cannot be mapped to columns is a problem, reported before anything is
/// deleted: storectl never guesses where a reference lives.
public struct DeleteGraph: Sendable {
    public enum Action: String, Sendable, Codable { case cascade, nullify, deny }

    public struct Effect: Sendable {
        public enum Kind: Sendable {
            /// Rows of `table` (of `entities`) whose `columns` hold a deleted row's Z_PK.
            case referencedBy(table: String, columns: [String], entities: [Int], bumpsOpt: Bool)
            /// The deleted row's own `columns` hold the Z_PK of a row of `destination`.
            case references(columns: [String], destination: String)
            /// A many-to-many join table: `own` holds the deleted row's Z_PK, `other` the other side's.
            case join(table: String, own: String, other: String, otherTable: String)
        }
        /// "Entity.relationship".
        public var relationship: String
        public var action: Action?
        public var kind: Kind

        /// The table cascades reach through this effect.
        var cascadeTable: String? {
            guard action == .cascade else { return nil }
            switch kind {
            case .referencedBy(let table, _, _, _): return table
            case .references(_, let destination): return destination
            case .join(_, _, _, let otherTable): return otherTable
            }
        }
    }

    /// Z_ENT -> what deleting a row of that entity does.
    public private(set) var effects: [Int: [Effect]] = [:]
    /// Z_ENT -> relationships that could not be mapped.
    public private(set) var problems: [Int: [String]] = [:]
    /// Table -> the Z_ENT values living in it.
    public private(set) var entitiesOf: [String: [Int]] = [:]

    /// Maps the model's relationships onto the store's tables.
    ///
    /// Core Data names a relationship's storage after the entity that *declares* it, for all its
    /// sub-entities: a many-to-many declared on an abstract `GenericAlbum` (entity 29) lives in
    /// `Z_29ASSETS` whatever album entity a row is; a to-many without an inverse is a hidden column
    /// `Z29<NAME>` in the destination's table. Compiled models may also list an inherited
    /// relationship again under each sub-entity; the declaring entity is the topmost ancestor that
    /// has a relationship of that name.
    public init(schema: StoreSchema) throws {
        guard let store = schema.coreData, let model = store.model else {
            throw StoreOpsError(.badData, "the store has no readable model cache")
        }
        for entity in store.entities { if let table = entity.table { entitiesOf[table, default: []].append(entity.ent) } }
        var toOne: [String: [String]] = [:]   // "Entity.name" -> its columns
        for column in CoreDataCensus.toOneColumns(store: store, columnsOf: schema.columns(of:)).columns {
            for label in column.relationships { toOne[label, default: []].append(column.column) }
        }
        func realTable(_ name: String) -> String? { schema.table(name) }
        func columns(of table: String) -> [String] { schema.columns(of: table) }
        func family(_ name: String) -> [Int] { store.entity(named: name).map { store.family(of: $0.ent).map(\.ent) } ?? [] }
        /// The entity numbers a relationship's storage may be named after, the declaring entity first.
        func declaringEnts(_ name: String, of entity: String) -> [Int] {
            model.ancestors(of: entity).reversed()
                .filter { ancestor in model.relationships.contains { $0.entity == ancestor && $0.name == name } }
                .compactMap { store.entity(named: $0)?.ent }
        }

        for entity in store.entities where entity.table != nil && entity.ent < 16_000 {
            var list: [Effect] = []
            var problemSet: [String] = []
            // One declaration per name: the nearest (a sub-entity's own copy or override first).
            var seen = Set<String>()
            var chosen: [CoreDataModel.Relationship] = []
            for ancestor in model.ancestors(of: entity.name) {
                for relationship in model.relationships where relationship.entity == ancestor && seen.insert(relationship.name).inserted {
                    chosen.append(relationship)
                }
            }
            for relationship in chosen {
                let declaredBy = declaringEnts(relationship.name, of: entity.name)
                let topName = model.ancestors(of: entity.name).reversed().first { ancestor in
                    model.relationships.contains { $0.entity == ancestor && $0.name == relationship.name }
                } ?? relationship.entity
                let label = "\(topName).\(relationship.name)"
                func problem(_ text: String) { if !problemSet.contains("\(label): \(text)") { problemSet.append("\(label): \(text)") } }
                let action: Action? = switch relationship.deleteRule {
                case .cascade: .cascade
                case .nullify: .nullify
                case .deny: .deny
                case .noAction: nil
                }
                guard let destination = store.entity(named: relationship.destination), let destinationTable = destination.table else {
                    if action != nil { problem("its destination \(relationship.destination) has no table") }
                    continue
                }
                let inverse = relationship.inverse.flatMap { model.relationship($0, of: relationship.destination) }
                let ownLabels = Set(model.ancestors(of: entity.name).map { "\($0).\(relationship.name)" })
                if !relationship.isToMany {
                    let own = ownLabels.flatMap { toOne[$0] ?? [] }
                    switch action {
                    case .cascade?, .deny?:
                        guard !own.isEmpty else { problem("no column found for this to-one relationship"); continue }
                        list.append(Effect(relationship: label, action: action, kind: .references(columns: Array(Set(own)).sorted(), destination: destinationTable)))
                    case .nullify?:
                        // Only a one-to-one keeps a reference on the other side to clear.
                        if let inverse, !inverse.isToMany {
                            let back = inverseColumns(inverse, model: model, toOne: toOne)
                            guard !back.isEmpty else { problem("no column found for its inverse \(inverse.entity).\(inverse.name)"); continue }
                            list.append(Effect(relationship: label, action: .nullify,
                                               kind: .referencedBy(table: destinationTable, columns: back, entities: family(inverse.entity),
                                                                   bumpsOpt: columns(of: destinationTable).contains("Z_OPT"))))
                        }
                    case nil:
                        continue
                    }
                    continue
                }
                guard let inverse else {
                    // No inverse: Core Data keeps the link as a hidden column Z<declaring entity><NAME> in
                    // the destination's table (e.g. Z3LIBRARYSCOPEASSETCONTRIBUTORS), holding this row's Z_PK.
                    let wanted = declaredBy.map { "Z\($0)\(relationship.name.uppercased())" }
                    let available = columns(of: destinationTable)
                    let hidden = wanted.compactMap { name in available.first { $0.caseInsensitiveCompare(name) == .orderedSame } }
                    guard let column = hidden.first else {
                        if action != nil {
                            problem("a to-many relationship without an inverse, but \(destinationTable) has no column \(wanted.first ?? "Z<n>\(relationship.name.uppercased())")")
                        }
                        continue
                    }
                    if let action {
                        list.append(Effect(relationship: label, action: action,
                                           kind: .referencedBy(table: destinationTable, columns: [column], entities: family(relationship.destination),
                                                               bumpsOpt: available.contains("Z_OPT"))))
                    }
                    continue
                }
                if !inverse.isToMany {
                    let back = inverseColumns(inverse, model: model, toOne: toOne)
                    guard !back.isEmpty else {
                        if action != nil { problem("no column found for its inverse \(inverse.entity).\(inverse.name)") }
                        continue
                    }
                    if let action {
                        list.append(Effect(relationship: label, action: action,
                                           kind: .referencedBy(table: destinationTable, columns: back, entities: family(inverse.entity),
                                                               bumpsOpt: columns(of: destinationTable).contains("Z_OPT"))))
                    }
                    continue
                }
                // Many-to-many: a join table Z_<ent><NAME> named after one side's declaring entity; its
                // columns are named after the relationship pointing at each side (see the fixtures'
                // Z_1KEYWORDS: Z_1ASSETATTRIBUTES, Z_37KEYWORDS; Photos' Z_26ASSETS: Z_26ALBUMS, Z_34ASSETS).
                let inverseDeclaredBy = declaringEnts(inverse.name, of: inverse.entity)
                guard !declaredBy.isEmpty, !inverseDeclaredBy.isEmpty else {
                    problem("cannot find the entities of its join table")
                    continue
                }
                let name = relationship.name.uppercased()
                let inverseName = inverse.name.uppercased()
                let candidates = declaredBy.map { "Z_\($0)\(name)" } + inverseDeclaredBy.map { "Z_\($0)\(inverseName)" }
                guard let joinTable = candidates.lazy.compactMap(realTable).first else {
                    problem("no join table \(candidates.joined(separator: " or "))")
                    continue
                }
                let joinColumns = columns(of: joinTable)
                func column(_ prefixes: [String]) -> String? {
                    for prefix in prefixes {
                        let matches = joinColumns.filter { column in
                            let upper = column.uppercased()
                            return upper == prefix || (upper.hasPrefix(prefix) && upper.dropFirst(prefix.count).allSatisfy(\.isNumber))
                        }
                        if matches.count == 1 { return matches[0] }
                    }
                    return nil
                }
                guard let own = column(declaredBy.map { "Z_\($0)\(inverseName)" }), let other = column(inverseDeclaredBy.map { "Z_\($0)\(name)" }) else {
                    problem("cannot tell the columns of join table \(joinTable) apart (\(joinColumns.joined(separator: ", ")))")
                    continue
                }
                list.append(Effect(relationship: label, action: action,
                                   kind: .join(table: joinTable, own: own, other: other, otherTable: destinationTable)))
            }
            effects[entity.ent] = list
            if !problemSet.isEmpty { problems[entity.ent] = problemSet }
        }
    }

    /// The to-one columns of `inverse` (declared on its entity or any ancestor, or copied to it).
    private func inverseColumns(_ inverse: CoreDataModel.Relationship, model: CoreDataModel, toOne: [String: [String]]) -> [String] {
        let labels = model.ancestors(of: inverse.entity).map { "\($0).\(inverse.name)" }
        return Array(Set(labels.flatMap { toOne[$0] ?? [] })).sorted()
    }

    /// Problems of the entities a purge of `roots` reaches (through cascades): reported as
    /// policy problems, so nothing is deleted while a delete rule cannot be honoured.
    public func unresolved(from roots: [Int]) -> [String] {
        var seen = Set<Int>()
        var frontier = roots
        var found: [String] = []
        while let ent = frontier.popLast() {
            guard seen.insert(ent).inserted else { continue }
            found += problems[ent] ?? []
            for effect in effects[ent] ?? [] {
                if let table = effect.cascadeTable { frontier += entitiesOf[table] ?? [] }
            }
        }
        return Array(Set(found)).sorted()
    }

    /// Every statement purge batches of `roots` (rows of `rootTable`) can run: deletes from the
    /// root table and every table cascades reach, join-table deletes, nullifying updates. A pure
    /// function of the graph, in the shapes `BatchClosure` runs (for `TriggerLint`).
    public func writes(from roots: [Int], rootTable: String) -> [TriggerLint.Write] {
        var writes: [TriggerLint.Write] = [BatchClosure.deleteStatement(rootTable)]
        var seen = Set<Int>()
        var frontier = roots
        while let ent = frontier.popLast() {
            guard seen.insert(ent).inserted else { continue }
            for effect in effects[ent] ?? [] {
                switch (effect.kind, effect.action) {
                case (.referencedBy(let table, let columns, let entities, let bumpsOpt), .nullify?):
                    writes += columns.map { BatchClosure.nullifyStatement(table: table, column: $0, entities: entities, bumpsOpt: bumpsOpt) }
                case (.join(let table, let own, _, _), _):
                    writes.append(BatchClosure.joinDeleteStatement(table: table, column: own))
                default:
                    break
                }
                if let table = effect.cascadeTable {
                    writes.append(BatchClosure.deleteStatement(table))
                    frontier += entitiesOf[table] ?? []
                }
            }
        }
        var unique: [TriggerLint.Write] = []
        for write in writes where !unique.contains(write) { unique.append(write) }
        return unique
    }

    /// One line per followed relationship of `ent`, for `policy explain`.
    public func describe(_ ent: Int) -> [String] {
        (effects[ent] ?? []).map { effect in
            let rule = "\(effect.relationship) (\(effect.action?.rawValue ?? "no action"))"
            switch effect.kind {
            case .referencedBy(let table, let columns, _, let bumpsOpt):
                let rows = "the \(table) rows whose \(columns.joined(separator: "/")) point here"
                switch effect.action {
                case .cascade?: return "\(rule): deletes \(rows)"
                case .nullify?: return "\(rule): sets \(columns.joined(separator: "/")) to NULL in \(rows)\(bumpsOpt ? " and bumps their Z_OPT" : "")"
                case .deny?: return "\(rule): keeps a row while there are \(rows)"
                case nil: return "\(rule): nothing"
                }
            case .references(let columns, let destination):
                let row = "the \(destination) row its \(columns.joined(separator: "/")) points to"
                return effect.action == .deny ? "\(rule): keeps a row while \(row) exists" : "\(rule): deletes \(row)"
            case .join(let table, let own, _, let otherTable):
                let base = "\(rule): removes its rows in join table \(table) (\(own))"
                switch effect.action {
                case .cascade?: return base + " and deletes the linked \(otherTable) rows"
                case .deny?: return "\(rule): keeps a row while it is linked to \(otherTable) rows in \(table)"
                default: return base
                }
            }
        }
    }
}
