import Foundation

public struct RetentionCandidate: Sendable, Equatable {
    public var id: String
    public var time: Date
    public var tags: [String]
    /// Its last verification passed.
    public var verified: Bool
    /// It passed a check: its last verification, or (never verified since) its check when it was
    /// taken. A store is never left without one (`Retention.apply`).
    public var checked: Bool
    /// The host that took it and the store's path there: which store it is (`SnapshotGrouping`).
    public var host: String
    public var path: String

    public init(id: String, time: Date, tags: [String] = [], verified: Bool = false, checked: Bool? = nil, host: String = "", path: String = "") {
        self.id = id
        self.time = time
        self.tags = tags
        self.verified = verified
        self.checked = checked ?? verified
        self.host = host
        self.path = path
    }
}
