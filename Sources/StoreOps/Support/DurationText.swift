import Foundation

/// Durations written for people: "30d", "12h", "2w", "1y6w", "90m", "45s", "250ms".
///
/// Units: ms, s, m (minutes), h, d, w (weeks = 7d), y (years = 365d). A number needs a unit
/// ("30" alone is refused: thirty what?), and units can be combined largest first ("1d12h").
/// Months are not offered: their length varies; write "30d" or "4w".
public struct DurationText: Sendable, Codable, Equatable, CustomStringConvertible {
    public let seconds: TimeInterval
    public let text: String

    static let units: [(String, TimeInterval)] = [("y", 365 * 86_400), ("w", 7 * 86_400), ("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1), ("ms", 0.001)]

    /// The longest duration accepted anywhere: 100 years. Every duration is bounded here, where it
    /// is parsed, so whatever a policy check accepts, every computation with it (a date that
    /// far back, a sleep, a count of seconds as an integer) stays in range.
    public static let maximumSeconds: TimeInterval = 100 * 365 * 86_400
    /// A job's random start delay spreads jobs out; one over a day would skip runs.
    public static let maximumJitter: TimeInterval = 86_400

    /// Parses `text`, or explains what is wrong with it.
    ///
    /// - Parameter allowZero: accept "0s" (a pause of nothing); durations of retention are never zero.
    /// - Parameter maximum: the longest this duration may be (default 100 years; a jitter: a day).
    public static func parse(_ text: String, allowZero: Bool = false, maximum: TimeInterval = maximumSeconds) -> Result<DurationText, DurationError> {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard !trimmed.isEmpty else { return .failure(.init(text: text, problem: "is empty")) }
        if trimmed.hasPrefix("-") { return .failure(.init(text: text, problem: "is negative: a duration is a length of time, 0 or more")) }
        // Nothing is nothing in any unit.
        if allowZero, trimmed == "0" { return .success(DurationText(seconds: 0, text: trimmed)) }
        if !allowZero, !trimmed.isEmpty, trimmed.allSatisfy({ $0 == "0" }) { return .failure(.init(text: text, problem: "must be more than zero")) }
        var total: TimeInterval = 0
        var lastUnitIndex = -1
        var rest = Substring(trimmed)
        while !rest.isEmpty {
            let number = rest.prefix { $0.isASCII && $0.isNumber }
            rest = rest.dropFirst(number.count)
            let unit = rest.prefix { $0.isASCII && $0.isLetter }
            rest = rest.dropFirst(unit.count)
            if unit.isEmpty {
                if let other = rest.first {
                    return .failure(.init(text: text, problem: "has an unexpected character '\(other)'"))
                }
                return .failure(.init(text: text, problem: lastUnitIndex < 0 ? "has no unit (write e.g. \(number)d or \(number)h)" : "ends with a number without a unit"))
            }
            guard let index = units.firstIndex(where: { $0.0 == unit }) else {
                return .failure(.init(text: text, problem: "has an unknown unit '\(unit)'"))
            }
            guard let value = Double(number), !number.isEmpty else {
                return .failure(.init(text: text, problem: "has a unit '\(unit)' without a number before it"))
            }
            guard index > lastUnitIndex else {
                return .failure(.init(text: text, problem: "repeats a unit or puts a smaller unit first"))
            }
            total += value * units[index].1
            lastUnitIndex = index
        }
        guard total > 0 || allowZero else { return .failure(.init(text: text, problem: "is zero")) }
        guard total <= min(maximum, maximumSeconds) else {
            return .failure(.init(text: text, problem: "is longer than \(maximum >= maximumSeconds ? "100 years" : Format.duration(maximum))"))
        }
        return .success(DurationText(seconds: total, text: trimmed))
    }

    public init(seconds: TimeInterval, text: String) {
        self.seconds = seconds
        self.text = text
    }

    public var description: String { text }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        switch Self.parse(text) {
        case .success(let value): self = value
        case .failure(let error):
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.description))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(text)
    }
}

