import Foundation
@testable import StoreOps
import Testing

/// The pure parts of purging and migrating, table-driven: schemas and rows made by hand in, plans
/// and decisions out. No store is opened.
enum Shapes {
    static func schema(_ tables: [String: [String]], withoutRowid: Set<String> = [], foreignKeys: [StoreSchema.ForeignKey] = [],
                       entities: [(Int, String, Int, String?)] = [], relationships: [CoreDataModel.Relationship]? = nil) -> StoreSchema {
        var coreData: CoreDataStore?
        if !entities.isEmpty {
            let list = entities.map { CoreDataEntity(ent: $0.0, name: $0.1, superEnt: $0.2, rootEnt: $0.0, max: 100, table: $0.3) }
            let names = Dictionary(uniqueKeysWithValues: entities.map { ($0.0, $0.1) })
            let model = relationships.map { CoreDataModel(superentity: Dictionary(uniqueKeysWithValues: entities.map { ($0.1, names[$0.2]) }),
                                                          relationships: $0) }
            coreData = CoreDataStore(metadata: CoreDataMetadata(modelVersionHashes: [:], modelVersionIdentifiers: []), entities: list,
                                     model: model, modelUnavailableReason: model == nil ? "the store has no Z_MODELCACHE table" : nil)
        }
        return StoreSchema(tables: tables.mapValues { $0.map { .init(name: $0, type: $0 == "Z_PK" ? "INTEGER" : "") } },
                           withoutRowid: withoutRowid, foreignKeys: foreignKeys, coreData: coreData)
    }

    static let bookkeeping: [String: [String]] = ["Z_PRIMARYKEY": ["Z_ENT", "Z_NAME", "Z_SUPER", "Z_MAX"], "Z_METADATA": ["Z_VERSION", "Z_UUID", "Z_PLIST"]]

    /// The sample task manager: Item (abstract) with Task and Note, attachments (cascade), tags (many-to-many).
    static let tasks = schema(bookkeeping.merging([
        "ZITEM": ["Z_PK", "Z_ENT", "Z_OPT", "ZISDELETED", "ZDELETEDAT", "ZCATEGORY"],
        "ZATTACHMENT": ["Z_PK", "Z_ENT", "Z_OPT", "ZITEM"],
        "ZTAG": ["Z_PK", "Z_ENT", "Z_OPT", "ZISDELETED"],
        "Z_2TAGS": ["Z_2ITEMS", "Z_6TAGS"],
        "LOOKUP": ["code", "label"],
    ]) { $1 }, withoutRowid: ["LOOKUP"], entities: [
        (2, "Item", 0, "ZITEM"), (3, "Task", 2, "ZITEM"), (4, "Note", 2, "ZITEM"), (5, "Attachment", 0, "ZATTACHMENT"), (6, "Tag", 0, "ZTAG"),
    ], relationships: [
        .init(entity: "Item", name: "attachments", destination: "Attachment", inverse: "item", isToMany: true, deleteRule: .cascade),
        .init(entity: "Attachment", name: "item", destination: "Item", inverse: "attachments", isToMany: false, deleteRule: .nullify),
        .init(entity: "Item", name: "tags", destination: "Tag", inverse: "items", isToMany: true, deleteRule: .nullify),
        .init(entity: "Tag", name: "items", destination: "Item", inverse: "tags", isToMany: true, deleteRule: .deny),
    ])

    /// Photos' shapes: a many-to-many declared on Album (26) for its sub-entities, listed again under
    /// them, and a to-many without an inverse (a hidden column in the destination).
    static let photos = schema(bookkeeping.merging([
        "ZGENERICALBUM": ["Z_PK", "Z_ENT", "Z_OPT", "ZTRASHED"],
        "ZGENERICASSET": ["Z_PK", "Z_ENT", "Z_OPT", "Z1CONTRIBUTORS"],
        "ZLIBRARYSCOPE": ["Z_PK", "Z_ENT", "Z_OPT", "ZISDELETED"],
        "Z_26ASSETS": ["Z_26ALBUMS", "Z_34ASSETS"],
    ]) { $1 }, entities: [
        (1, "LibraryScope", 0, "ZLIBRARYSCOPE"), (25, "GenericAlbum", 0, "ZGENERICALBUM"), (26, "Album", 25, "ZGENERICALBUM"),
        (27, "SharedAlbum", 26, "ZGENERICALBUM"), (34, "GenericAsset", 0, "ZGENERICASSET"),
    ], relationships: [
        .init(entity: "Album", name: "assets", destination: "GenericAsset", inverse: "albums", isToMany: true, deleteRule: .nullify),
        .init(entity: "SharedAlbum", name: "assets", destination: "GenericAsset", inverse: "albums", isToMany: true, deleteRule: .nullify),
        .init(entity: "GenericAsset", name: "albums", destination: "Album", inverse: "assets", isToMany: true, deleteRule: .nullify),
        .init(entity: "LibraryScope", name: "contributors", destination: "GenericAsset", inverse: nil, isToMany: true, deleteRule: .cascade),
    ])

    static func policy(_ rule: String) throws -> Policy {
        try Policy.parse(source: "[store]\npath = \"/nowhere/Store.sqlite\"\n\n[[purge]]\nname = \"r\"\n\(rule)\n", file: "/nowhere/p.toml").get()
    }
}

@Suite("planning, pure: schemas in, plans out")
struct PlanningTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var schema: StoreSchema
        var rule: String
        /// The table and Z_ENT filter of the plan, or nil when it is refused.
        var table: String?
        var filter: [Int] = []
        /// Statements the batches may run (their targets), or a part of the refusal.
        var writes: [String] = []
        var problem: String?
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "an abstract entity: its table, every row, cascades, joins", schema: Shapes.tasks,
             rule: "entity = \"Item\"\ndeleted_flag = \"ZISDELETED\"", table: "ZITEM",
             writes: ["DELETE ZITEM", "DELETE ZATTACHMENT", "DELETE Z_2TAGS"]),
        Case(name: "a sub-entity: its Z_ENT only", schema: Shapes.tasks, rule: "entity = \"Task\"\ndeleted_flag = \"ZISDELETED\"",
             table: "ZITEM", filter: [3], writes: ["DELETE ZITEM", "DELETE ZATTACHMENT", "DELETE Z_2TAGS"]),
        Case(name: "a table rule on a Core Data table follows the delete rules too", schema: Shapes.tasks,
             rule: "table = \"ztag\"\ndeleted_flag = \"ZISDELETED\"", table: "ZTAG", writes: ["DELETE ZTAG", "DELETE Z_2TAGS"]),
        Case(name: "a join table named after the declaring entity, the model listing it twice", schema: Shapes.photos,
             rule: "entity = \"SharedAlbum\"\ndeleted_flag = \"ZTRASHED\"", table: "ZGENERICALBUM", filter: [27],
             writes: ["DELETE ZGENERICALBUM", "DELETE Z_26ASSETS"]),
        Case(name: "a to-many without an inverse: the hidden column in the destination", schema: Shapes.photos,
             rule: "entity = \"LibraryScope\"\ndeleted_flag = \"ZISDELETED\"", table: "ZLIBRARYSCOPE",
             writes: ["DELETE ZLIBRARYSCOPE", "DELETE ZGENERICASSET", "DELETE Z_26ASSETS"]),
        Case(name: "bookkeeping is never purged", schema: Shapes.tasks, rule: "table = \"Z_PRIMARYKEY\"\ndeleted_flag = \"Z_MAX\"",
             problem: "bookkeeping and is never purged"),
        Case(name: "an unknown column names the real ones", schema: Shapes.tasks, rule: "entity = \"Tag\"\ndeleted_flag = \"ZGONE\"",
             problem: "no column \"ZGONE\" in ZTAG; columns: Z_PK, Z_ENT, Z_OPT, ZISDELETED"),
        Case(name: "a WITHOUT ROWID table", schema: Shapes.tasks, rule: "table = \"LOOKUP\"\ndeleted_flag = \"code\"",
             problem: "WITHOUT ROWID"),
        Case(name: "an unknown entity lists the entities", schema: Shapes.tasks, rule: "entity = \"Project\"\ndeleted_flag = \"ZISDELETED\"",
             problem: "no entity \"Project\" in Z_PRIMARYKEY; entities: Item, Task, Note, Attachment, Tag"),
        Case(name: "an entity rule on a plain store", schema: Shapes.schema(["t": ["a"]]), rule: "entity = \"Item\"\ndeleted_flag = \"a\"",
             problem: "is not a Core Data store"),
    ]

    @Test("purge plans", arguments: cases)
    func plan(_ test: Case) throws {
        let result = PurgePlanner.plan(try Shapes.policy(test.rule), schema: test.schema, now: Date(timeIntervalSince1970: 1_800_000_000))
        switch result {
        case .success(let targets):
            let target = try #require(targets.first)
            #expect(test.problem == nil, "planned although \(test.problem ?? "")")
            #expect(target.table == test.table)
            #expect(target.entityFilter == test.filter)
            let writes = target.writes.map { "\($0.sql.split(separator: " ").first ?? "") \($0.table ?? "")" }
            #expect(Set(writes) == Set(test.writes), "\(writes)")
            #expect(target.graph.map { $0.unresolved(from: test.filter.isEmpty ? [2, 6, 25, 1] : test.filter) }?.isEmpty ?? true)
        case .failure(let problems):
            #expect(test.table == nil, "refused: \(problems)")
            #expect(problems.problems.contains { $0.message.contains(test.problem ?? "?") }, "\(problems.problems.map(\.message))")
        }
    }

    @Test("without a model cache, only the named rows go, and the plan says so")
    func noModel() throws {
        let schema = Shapes.schema(Shapes.bookkeeping.merging(["ZITEM": ["Z_PK", "Z_ENT", "ZISDELETED"]]) { $1 },
                                   entities: [(2, "Item", 0, "ZITEM")], relationships: nil)
        let target = try #require(try PurgePlanner.plan(try Shapes.policy("entity = \"Item\"\ndeleted_flag = \"ZISDELETED\""), schema: schema,
                                                       now: Date()).get().first)
        #expect(target.graph == nil)
        #expect(target.writes.map(\.table) == ["ZITEM"])
        #expect(target.notes.first?.contains("only rows of ZITEM are deleted") == true)
    }

    @Test("the circuit breaker", arguments: [(10, 100, 0.5, false), (51, 100, 0.5, true), (50, 100, 0.5, false), (5, 0, 0.1, false), (9, 10, nil, false)]
          as [(Int, Int, Double?, Bool)])
    func breaker(_ candidates: Int, _ total: Int, _ limit: Double?, _ trips: Bool) throws {
        var rule = try Shapes.policy("table = \"t\"\ndeleted_flag = \"a\"").rules[0]
        rule.maxFraction = limit
        #expect((CircuitBreaker.trips(rule: rule, candidates: candidates, total: total) != nil) == trips)
    }
}

/// Rows by hand: what the store would answer.
struct RowsByHand: ClosureRows {
    var ents: [String: [Int64: Int]]
    /// "TABLE.COLUMN" -> (row, value) pairs.
    var pairs: [String: [(Int64, Int64)]]

    func entities(of pks: [Int64], in table: String) throws -> [Int: Set<Int64>] {
        var result: [Int: Set<Int64>] = [:]
        for pk in pks { result[ents[table]?[pk] ?? 0, default: []].insert(pk) }
        return result
    }

    func rows(for effect: DeleteGraph.Effect, from pks: [Int64], in table: String) throws -> [(column: String, pairs: [(Int64, Int64)])] {
        let wanted = Set(pks)
        switch effect.kind {
        case .referencedBy(let other, let columns, _, _):
            return columns.map { column in (column, (pairs["\(other).\(column)"] ?? []).filter { wanted.contains($0.1) }) }
        case .references(let columns, _):
            return columns.map { column in (column, (pairs["\(table).\(column)"] ?? []).filter { wanted.contains($0.0) }) }
        case .join(let joinTable, let own, _, _):
            return [(own, (pairs["\(joinTable).\(own)"] ?? []).filter { wanted.contains($0.0) })]
        }
    }
}

@Suite("a batch's closure, pure over the rows fetched for it")
struct BatchClosureTests {
    let graph = try! DeleteGraph(schema: Shapes.tasks)

    @Test("cascades, joins and nullified references")
    func closure() throws {
        let rows = RowsByHand(ents: ["ZITEM": [1: 3, 2: 4], "ZATTACHMENT": [10: 5, 11: 5]],
                              pairs: ["ZATTACHMENT.ZITEM": [(10, 1), (11, 2), (12, 9)], "Z_2TAGS.Z_2ITEMS": [(1, 5), (7, 6)]])
        let closure = try BatchClosure(roots: [1, 2], table: "ZITEM", graph: graph, rows: rows)
        #expect(Set(closure.deletes["ZITEM"]?.keys ?? [:].keys) == [1, 2])
        #expect(Set(closure.deletes["ZATTACHMENT"]?.keys ?? [:].keys) == [10, 11])
        #expect(Set(closure.joins.values.flatMap(\.keys)) == [1])
        #expect(closure.denied.isEmpty)
    }

    @Test("a deny keeps its root, and every root sharing a related row with it")
    func deny() throws {
        // Tag 5 is linked to item 1: a tag purge keeps it (Tag.items is deny); tag 6 shares nothing.
        let rows = RowsByHand(ents: ["ZTAG": [5: 6, 6: 6]], pairs: ["Z_2TAGS.Z_6TAGS": [(5, 1)]])
        let closure = try BatchClosure(roots: [5, 6], table: "ZTAG", graph: graph, rows: rows)
        #expect(Set(closure.denied.keys) == [5])
        #expect(closure.denied[5]?.contains("still linked to ZITEM row 1") == true)
    }
}

@Suite("a migration's lint, pure over the schema")
struct MigrationLintTests {
    @Test("DROP TABLE of a table others reference ON DELETE CASCADE is named; DROP COLUMN too")
    func lint() throws {
        let schema = Shapes.schema(["parent": ["id"], "child": ["id", "parent_id"]],
                                   foreignKeys: [.init(table: "child", parent: "parent", onDelete: "CASCADE")])
        let migration = Migration(version: 1, name: "rebuild", revision: "1",
                                  sql: "DROP TABLE parent; ALTER TABLE child DROP COLUMN parent_id")
        var plan = MigrationPlan.make([migration], history: [])
        plan.lint([migration], schema: schema)
        let warnings = plan.pending.first?.warnings ?? []
        #expect(warnings.contains { $0.hasPrefix("DROP TABLE parent") })
        #expect(warnings.contains { $0.contains("child references parent with ON DELETE CASCADE") }, "\(warnings)")
        #expect(warnings.contains { $0.hasPrefix("DROP COLUMN in child") })
    }
}
