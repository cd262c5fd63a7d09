import Foundation

public struct DurationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var text: String
    public var problem: String
    public var description: String {
        "\"\(text)\" \(problem); expected a number and a unit: ms, s, m (minutes), h, d, w or y, e.g. \"30d\", \"12h\", \"2w\""
    }
}
