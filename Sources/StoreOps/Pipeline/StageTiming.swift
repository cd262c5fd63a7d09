import Foundation

/// How long one stage took: every report carries them.
public struct StageTiming: Sendable, Codable, Equatable {
    public var name: String
    public var seconds: Double
    public init(name: String, seconds: Double) {
        self.name = name
        self.seconds = seconds
    }
}
