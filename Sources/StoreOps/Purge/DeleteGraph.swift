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
        let mapper = Mapper(schema: schema, store: store, model: model)
        for entity in store.entities where entity.table != nil && entity.ent < 16_000 {
            var list: [Effect] = []
            var found: [String] = []
            for relationship in mapper.relationships(of: entity.name) {
                switch mapper.effect(of: relationship, for: entity.name) {
                case .success(let effect?): list.append(effect)
                case .success(nil): break
                case .failure(let problem): if !found.contains(problem.text) { found.append(problem.text) }
                }
            }
            effects[entity.ent] = list
            if !found.isEmpty { problems[entity.ent] = found }
        }
    }

    /// A relationship that cannot be mapped to columns, in words.
    struct Unmapped: Error { var text: String }

    /// Maps relationships of the model to the store's tables and columns (pure over the schema).
    private struct Mapper {
        let schema: StoreSchema
        let store: CoreDataStore
        let model: CoreDataModel
        /// "Entity.name" -> its to-one columns.
        let toOne: [String: [String]]

        init(schema: StoreSchema, store: CoreDataStore, model: CoreDataModel) {
            self.schema = schema
            self.store = store
            self.model = model
            var toOne: [String: [String]] = [:]
            for column in CoreDataCensus.toOneColumns(store: store, columnsOf: schema.columns(of:)).columns {
                for label in column.relationships { toOne[label, default: []].append(column.column) }
            }
            self.toOne = toOne
        }

        /// One declaration per name, the nearest first (a sub-entity's own copy or override wins).
        func relationships(of entity: String) -> [CoreDataModel.Relationship] {
            var seen = Set<String>()
            return model.ancestors(of: entity).flatMap { ancestor in
                model.relationships.filter { $0.entity == ancestor && seen.insert($0.name).inserted }
            }
        }

        /// The entity numbers a relationship's storage may be named after, the declaring entity first.
        func declaringEnts(_ name: String, of entity: String) -> [Int] {
            declaringNames(name, of: entity).compactMap { store.entity(named: $0)?.ent }
        }

        func declaringNames(_ name: String, of entity: String) -> [String] {
            model.ancestors(of: entity).reversed().filter { ancestor in model.relationships.contains { $0.entity == ancestor && $0.name == name } }
        }

        func family(_ name: String) -> [Int] { store.entity(named: name).map { store.family(of: $0.ent).map(\.ent) } ?? [] }

        /// What deleting a row of `entity` does through `relationship`: an effect, nothing, or why it cannot be mapped.
        func effect(of relationship: CoreDataModel.Relationship, for entity: String) -> Result<Effect?, Unmapped> {
            let label = "\(declaringNames(relationship.name, of: entity).first ?? relationship.entity).\(relationship.name)"
            let action: Action? = switch relationship.deleteRule {
            case .cascade: .cascade
            case .nullify: .nullify
            case .deny: .deny
            case .noAction: nil
            }
            func unmapped(_ text: String) -> Result<Effect?, Unmapped> { action == nil ? .success(nil) : .failure(Unmapped(text: "\(label): \(text)")) }
            guard let destination = store.entity(named: relationship.destination), let table = destination.table else {
                return unmapped("its destination \(relationship.destination) has no table")
            }
            let inverse = relationship.inverse.flatMap { model.relationship($0, of: relationship.destination) }
            if !relationship.isToMany { return toOneEffect(relationship, inverse: inverse, entity: entity, label: label, action: action, table: table) }
            guard let inverse else { return hiddenColumnEffect(relationship, entity: entity, label: label, action: action, table: table) }
            if !inverse.isToMany {
                let back = inverseColumns(inverse)
                guard !back.isEmpty else { return unmapped("no column found for its inverse \(inverse.entity).\(inverse.name)") }
                guard let action else { return .success(nil) }
                return .success(Effect(relationship: label, action: action, kind: .referencedBy(table: table, columns: back, entities: family(inverse.entity),
                                                                                                bumpsOpt: schema.columns(of: table).contains("Z_OPT"))))
            }
            return joinEffect(relationship, inverse: inverse, entity: entity, label: label, action: action, table: table)
        }

        /// A to-one relationship: its own column (cascade, deny), or a one-to-one's back reference (nullify).
        func toOneEffect(_ relationship: CoreDataModel.Relationship, inverse: CoreDataModel.Relationship?, entity: String, label: String,
                         action: Action?, table: String) -> Result<Effect?, Unmapped> {
            switch action {
            case .cascade?, .deny?:
                let own = Array(Set(model.ancestors(of: entity).flatMap { toOne["\($0).\(relationship.name)"] ?? [] })).sorted()
                guard !own.isEmpty else { return .failure(Unmapped(text: "\(label): no column found for this to-one relationship")) }
                return .success(Effect(relationship: label, action: action, kind: .references(columns: own, destination: table)))
            case .nullify?:
                // Only a one-to-one keeps a reference on the other side to clear.
                guard let inverse, !inverse.isToMany else { return .success(nil) }
                let back = inverseColumns(inverse)
                guard !back.isEmpty else { return .failure(Unmapped(text: "\(label): no column found for its inverse \(inverse.entity).\(inverse.name)")) }
                return .success(Effect(relationship: label, action: .nullify, kind: .referencedBy(table: table, columns: back, entities: family(inverse.entity),
                                                                                                  bumpsOpt: schema.columns(of: table).contains("Z_OPT"))))
            case nil:
                return .success(nil)
            }
        }

        /// A to-many without an inverse: Core Data keeps the link as a hidden column Z<declaring
        /// entity><NAME> in the destination's table (e.g. Z3LIBRARYSCOPEASSETCONTRIBUTORS), holding this row's Z_PK.
        func hiddenColumnEffect(_ relationship: CoreDataModel.Relationship, entity: String, label: String, action: Action?,
                                table: String) -> Result<Effect?, Unmapped> {
            let wanted = declaringEnts(relationship.name, of: entity).map { "Z\($0)\(relationship.name.uppercased())" }
            let available = schema.columns(of: table)
            guard let column = wanted.lazy.compactMap({ name in available.first { $0.caseInsensitiveCompare(name) == .orderedSame } }).first else {
                guard action != nil else { return .success(nil) }
                return .failure(Unmapped(text: "\(label): a to-many relationship without an inverse, but \(table) has no column "
                                         + (wanted.first ?? "Z<n>\(relationship.name.uppercased())")))
            }
            guard let action else { return .success(nil) }
            return .success(Effect(relationship: label, action: action, kind: .referencedBy(table: table, columns: [column],
                                   entities: family(relationship.destination), bumpsOpt: available.contains("Z_OPT"))))
        }

        /// Many-to-many: a join table Z_<ent><NAME> named after one side's declaring entity; its columns are
        /// named after the relationship pointing at each side (the fixtures' Z_1KEYWORDS: Z_1ASSETATTRIBUTES,
        /// Z_37KEYWORDS; Photos' Z_26ASSETS: Z_26ALBUMS, Z_34ASSETS).
        func joinEffect(_ relationship: CoreDataModel.Relationship, inverse: CoreDataModel.Relationship, entity: String, label: String,
                        action: Action?, table: String) -> Result<Effect?, Unmapped> {
            let declaredBy = declaringEnts(relationship.name, of: entity)
            let inverseDeclaredBy = declaringEnts(inverse.name, of: inverse.entity)
            guard !declaredBy.isEmpty, !inverseDeclaredBy.isEmpty else { return .failure(Unmapped(text: "\(label): cannot find the entities of its join table")) }
            let name = relationship.name.uppercased(), inverseName = inverse.name.uppercased()
            let candidates = declaredBy.map { "Z_\($0)\(name)" } + inverseDeclaredBy.map { "Z_\($0)\(inverseName)" }
            guard let joinTable = candidates.lazy.compactMap(schema.table).first else {
                return .failure(Unmapped(text: "\(label): no join table \(candidates.joined(separator: " or "))"))
            }
            let joinColumns = schema.columns(of: joinTable)
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
                return .failure(Unmapped(text: "\(label): cannot tell the columns of join table \(joinTable) apart (\(joinColumns.joined(separator: ", ")))"))
            }
            return .success(Effect(relationship: label, action: action, kind: .join(table: joinTable, own: own, other: other, otherTable: table)))
        }

        /// The to-one columns of `inverse` (declared on its entity or any ancestor, or copied to it).
        func inverseColumns(_ inverse: CoreDataModel.Relationship) -> [String] {
            Array(Set(model.ancestors(of: inverse.entity).flatMap { toOne["\($0).\(inverse.name)"] ?? [] })).sorted()
        }
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
