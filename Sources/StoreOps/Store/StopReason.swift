import Foundation

/// Why a long job stopped before it finished its work.
public enum StopReason: Sendable, Equatable, Codable, CustomStringConvertible {
    case killSwitch(String)
    case signal(Int32)
    case maxRows(Int)
    case maxRuntime(TimeInterval)

    public var description: String {
        switch self {
        case .killSwitch(let path): "the kill switch \(path) was thrown" + KillSwitch.releaseHint(path)
        case .signal(let number): "\(ProcessSignals.name(number)) was received"
        case .maxRows(let rows): "max_rows (\(rows)) was reached"
        case .maxRuntime(let seconds): "max_runtime (\(Format.duration(seconds))) was reached"
        }
    }
}

extension StopReason {
    /// max_rows and max_runtime end a rule as planned; the other reasons end the run.
    public var isLimit: Bool {
        switch self {
        case .maxRows, .maxRuntime: true
        default: false
        }
    }
}
