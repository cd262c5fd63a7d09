import Foundation

/// Thrown by the CLI after a report was printed, so the process ends with the report's own
/// status (decided by `Ending.status`) and prints nothing more.
public struct Finished: Error, Sendable {
    public var status: ExitStatus
    public init(status: ExitStatus) { self.status = status }
    /// Throws when the ending's status is not 0.
    public static func check(_ ending: Ending) throws {
        if ending.status != .ok { throw Finished(status: ending.status) }
    }
}
