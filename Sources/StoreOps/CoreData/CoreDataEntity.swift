import Foundation
import GRDB

/// One row of `Z_PRIMARYKEY`: an entity, its parent, and where its rows live.
public struct CoreDataEntity: Sendable, Codable, Equatable {
    public var ent: Int
    public var name: String
    /// `Z_SUPER`: 0 for a root entity.
    public var superEnt: Int
    public var rootEnt: Int
    /// `Z_MAX`: the last primary key handed out (kept on root entities).
    public var max: Int
    /// The table holding its rows: the root entity's `Z<NAME>` (history entities: `A<NAME>`).
    public var table: String?

    public var isRoot: Bool { superEnt == 0 }
}
