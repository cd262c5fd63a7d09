import Foundation

/// How a walk ended, with what the act stage produced and the stage timings.
public struct Walked<Value> {
    public var value: Value?
    public var ending: Ending
    public var snapshot: String?
    public var stages: [StageTiming] = []

    init(ending: Ending) { self.ending = ending }

    /// The value, or the ending's error (for operations that return results and throw failures).
    public func get() throws -> Value {
        if let value, ending.outcome == .ok { return value }
        throw ending.thrown ?? StoreOpsError(.failure, "no result")
    }
}
