import Foundation

public struct RetentionCandidate: Sendable, Equatable {
    public var id: String
    public var time: Date
    public var tags: [String]
    /// Its last verification passed.
    public var verified: Bool

    public init(id: String, time: Date, tags: [String] = [], verified: Bool = false) {
        self.id = id
        self.time = time
        self.tags = tags
        self.verified = verified
    }
}
