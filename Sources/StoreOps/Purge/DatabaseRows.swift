import Foundation
import GRDB

/// `ClosureRows` from a store, set-wise: a query per relationship column, never one per row.
struct DatabaseRows: ClosureRows {
    let db: Database

    func entities(of pks: [Int64], in table: String) throws -> [Int: Set<Int64>] {
        guard try db.columns(in: table).contains(where: { $0.name.uppercased() == "Z_ENT" }) else { return [0: Set(pks)] }
        var result: [Int: Set<Int64>] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT Z_PK, Z_ENT FROM \(quoteIdentifier(table)) WHERE Z_PK IN (SELECT value FROM json_each(?))",
                                    arguments: [BatchClosure.json(pks)]) {
            result[Int(clamping: try row.optionalInteger(1, "\(table).Z_ENT") ?? 0), default: []].insert(try row.integer(0, "\(table).Z_PK"))
        }
        return result
    }

    func rows(for effect: DeleteGraph.Effect, from pks: [Int64], in table: String) throws -> [(column: String, pairs: [(Int64, Int64)])] {
        let ids = BatchClosure.json(pks)
        var result: [(column: String, pairs: [(Int64, Int64)])] = []
        switch effect.kind {
        case .referencedBy(let other, let columns, let entities, _):
            let scope = entities.isEmpty ? "" : " AND Z_ENT IN (\(entities.map(String.init).joined(separator: ", ")))"
            for column in columns {
                result.append((column, try Row.fetchAll(db, sql: """
                    SELECT Z_PK, \(quoteIdentifier(column)) FROM \(quoteIdentifier(other))
                    WHERE \(quoteIdentifier(column)) IN (SELECT value FROM json_each(?))\(scope)
                    """, arguments: [ids]).map { (try $0.integer(0, "\(other).Z_PK"), try $0.integer(1, "\(other).\(column)")) }))
            }
        case .references(let columns, let destination):
            for column in columns {
                result.append((column, try Row.fetchAll(db, sql: """
                    SELECT s.Z_PK, s.\(quoteIdentifier(column)) FROM \(quoteIdentifier(table)) AS s
                    JOIN \(quoteIdentifier(destination)) AS d ON d.Z_PK = s.\(quoteIdentifier(column))
                    WHERE s.Z_PK IN (SELECT value FROM json_each(?))
                    """, arguments: [ids]).map { (try $0.integer(0, "\(table).Z_PK"), try $0.integer(1, "\(table).\(column)")) }))
            }
        case .join(let joinTable, let own, let other, _):
            result.append((own, try Row.fetchAll(db, sql: """
                SELECT \(quoteIdentifier(own)), \(quoteIdentifier(other)) FROM \(quoteIdentifier(joinTable))
                WHERE \(quoteIdentifier(own)) IN (SELECT value FROM json_each(?))
                """, arguments: [ids]).map { (try $0.integer(0, "\(joinTable).\(own)"), try $0.integer(1, "\(joinTable).\(other)")) }))
        }
        return result
    }
}
