import Foundation

public struct RetentionDecision: Sendable, Codable, Equatable {
    public var id: String
    public var time: Date
    public var keep: Bool
    /// Why it is kept ("daily snapshot", "within 2d of the newest", ...), or why removed.
    public var reasons: [String]
    /// The group the rules were applied in (`SnapshotGrouping.label`): a store, by default.
    public var group: String?
}
