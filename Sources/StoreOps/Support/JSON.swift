import Foundation

/// The JSON conventions of every file and `--json` output: sorted keys, ISO dates, no escaped slashes.
public enum JSON {
    public static func encoder(pretty: Bool = true) -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(Timestamp.iso(date))
        }
        return encoder
    }

    public static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = Timestamp.parseISO(text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "not an ISO-8601 date: \(text)")
            }
            return date
        }
        return decoder
    }

    public static func encode(_ value: some Encodable, pretty: Bool = true) throws -> Data {
        try encoder(pretty: pretty).encode(value)
    }

    public static func string(_ value: some Encodable, pretty: Bool = true) -> String {
        (try? encode(value, pretty: pretty)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    /// A decoding error in a sentence (the key path and what was wrong), not Foundation's dump.
    public static func describe(_ error: any Error) -> String {
        guard let decoding = error as? DecodingError else { return "\(error)" }
        func path(_ context: DecodingError.Context) -> String {
            let keys = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
            return keys.isEmpty ? "" : " at \(keys)"
        }
        switch decoding {
        case .dataCorrupted(let context): return "not valid JSON\(path(context))"
        case .keyNotFound(let key, let context): return "no \(key.stringValue)\(path(context))"
        case .typeMismatch(_, let context): return "\(context.debugDescription.lowercased())\(path(context))"
        case .valueNotFound(_, let context): return "a missing value\(path(context))"
        @unknown default: return "\(error)"
        }
    }
}
