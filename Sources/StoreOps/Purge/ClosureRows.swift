import Foundation
import GRDB

/// Where a batch's closure gets its rows: the only I/O of `BatchClosure`. `DatabaseRows` reads a
/// store; tests give rows by hand.
protocol ClosureRows {
    /// Rows of `table` grouped by Z_ENT (all under 0 when the table has no Z_ENT column).
    func entities(of pks: [Int64], in table: String) throws -> [Int: Set<Int64>]
    /// The pairs `effect` follows from `pks` (rows of `table`), per column, as `BatchClosure.follow` reads them.
    func rows(for effect: DeleteGraph.Effect, from pks: [Int64], in table: String) throws -> [(column: String, pairs: [(Int64, Int64)])]
}
