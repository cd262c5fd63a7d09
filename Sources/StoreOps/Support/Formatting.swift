import Foundation

/// Human-readable figures for tables and one-line summaries.
public enum Format {
    /// 1536 -> "1.5 KiB"; exact bytes below 1 KiB.
    public static func bytes(_ value: UInt64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var amount = Double(value)
        var unit = 0
        while amount >= 1024, unit < units.count - 1 {
            amount /= 1024
            unit += 1
        }
        return unit == 0 ? "\(value) B" : String(format: "%.1f %@", amount, units[unit])
    }

    public static func bytes(_ value: Int) -> String { bytes(UInt64(max(0, value))) }

    /// 1234567 -> "1,234,567".
    public static func count<T: BinaryInteger>(_ value: T) -> String {
        let digits = String(value.magnitude)
        var out = ""
        for (i, ch) in digits.enumerated() {
            if i > 0, (digits.count - i) % 3 == 0 { out.append(",") }
            out.append(ch)
        }
        return (value < 0 ? "-" : "") + out
    }

    /// Seconds -> "0.42s", "12.3s", "3m05s", "1h02m".
    public static func duration(_ seconds: Double) -> String {
        if seconds < 10 { return String(format: "%.2fs", seconds) }
        if seconds < 60 { return String(format: "%.1fs", seconds) }
        let total = Int(seconds.rounded())
        if total < 3600 { return String(format: "%dm%02ds", total / 60, total % 60) }
        return String(format: "%dh%02dm", total / 3600, (total % 3600) / 60)
    }

    /// 5 -> "5", -5.5 -> "-5.5": a number as typed.
    public static func number(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }

    public static func percent(_ fraction: Double) -> String { String(format: "%.1f%%", fraction * 100) }

    /// "1 entity", "2 entities", "1,000 rows": singular only for one.
    public static func plural<T: BinaryInteger>(_ value: T, _ one: String, _ many: String) -> String {
        "\(count(value)) \(value == 1 ? one : many)"
    }
}

/// Timestamps: ISO-8601 UTC with milliseconds for records, compact for file names.
public enum Timestamp {
    /// Now, to the millisecond: what records store, so a record read back equals the one written.
    public static func now() -> Date { rounded(Date()) }

    public static func rounded(_ date: Date) -> Date {
        Date(timeIntervalSince1970: (date.timeIntervalSince1970 * 1000).rounded() / 1000)
    }

    /// "2026-11-22T03:15:00.123Z" (rounded to the millisecond; Foundation's formatter truncates,
    /// which makes format(parse(x)) drift by a millisecond).
    public static func iso(_ date: Date) -> String {
        let millis = Int64((date.timeIntervalSince1970 * 1000).rounded())
        var seconds = time_t(millis >= 0 ? millis / 1000 : (millis - 999) / 1000)
        let fraction = Int(millis - Int64(seconds) * 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                      parts.tm_hour, parts.tm_min, parts.tm_sec, fraction)
    }

    public static func parseISO(_ text: String) -> Date? {
        let parsed = (try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text))
            ?? (try? Date.ISO8601FormatStyle().parse(text))
        return parsed.map(rounded)
    }

    /// "20261122T031500Z": sorts by time, safe in file names on every file system.
    public static func compact(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(format: "%04d%02d%02dT%02d%02d%02dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                      parts.tm_hour, parts.tm_min, parts.tm_sec)
    }
}

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
}
