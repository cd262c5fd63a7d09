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
    private enum Key: String, CodingKey { case killSwitch, signal, maxRows, maxRuntime }
    /// Reports and history rows before stop 56 held the compiler's form, `{"killSwitch":{"_0":…}}`.
    private enum Synthesized: String, CodingKey { case _0 }

    /// `{"killSwitch": "/path"}`, `{"signal": 15}`, `{"maxRows": 500}`, `{"maxRuntime": 60}`.
    public func encode(to encoder: Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        switch self {
        case .killSwitch(let path): try container.encode(path, forKey: .killSwitch)
        case .signal(let number): try container.encode(number, forKey: .signal)
        case .maxRows(let rows): try container.encode(rows, forKey: .maxRows)
        case .maxRuntime(let seconds): try container.encode(seconds, forKey: .maxRuntime)
        }
    }

    public init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        func value<T: Decodable>(_ key: Key, _ type: T.Type) throws -> T? {
            guard container.contains(key) else { return nil }
            if let plain = try? container.decode(T.self, forKey: key) { return plain }
            return try container.nestedContainer(keyedBy: Synthesized.self, forKey: key).decode(T.self, forKey: ._0)
        }
        if let path = try value(.killSwitch, String.self) { self = .killSwitch(path) }
        else if let number = try value(.signal, Int32.self) { self = .signal(number) }
        else if let rows = try value(.maxRows, Int.self) { self = .maxRows(rows) }
        else if let seconds = try value(.maxRuntime, TimeInterval.self) { self = .maxRuntime(seconds) }
        else { throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a stop reason")) }
    }

    /// max_rows and max_runtime end a rule as planned; the other reasons end the run.
    public var isLimit: Bool {
        switch self {
        case .maxRows, .maxRuntime: true
        default: false
        }
    }
}
