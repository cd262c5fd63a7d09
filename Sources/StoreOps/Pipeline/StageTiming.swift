import Foundation

/// How long one stage took: every report carries them.
public struct StageTiming: Sendable, Codable, Equatable {
    public var name: String
    public var seconds: Double
    public init(name: String, seconds: Double) {
        self.name = name
        // To the millisecond: the job log and --json show 0.638, not 0.637520432472229.
        self.seconds = (seconds * 1000).rounded() / 1000
    }
}
