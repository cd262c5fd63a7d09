import Foundation

/// Snapshot ids: the UTC time and a random suffix, `20261122T031500Z-7f3a9c`; they sort by time.
public enum SnapshotID {
    public static func make(at date: Date) -> String {
        "\(Timestamp.compact(date))-\(String(format: "%06x", UInt32.random(in: 0...0xFF_FFFF)))"
    }

    /// The time an id's first part gives (`20261122T031500Z`).
    public static func time(of id: String) -> Date? {
        let stamp = String(id.prefix(16))
        guard stamp.count == 16 else { return nil }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        return formatter.date(from: stamp)
    }

    /// Whether `text` is an id as storectl writes them: `20261122T031500Z-7f3a9c` (a valid UTC
    /// time, then 6 to 16 lowercase hex digits). What an archive brings in must be one.
    public static func isWellFormed(_ text: String) -> Bool {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].count == 16, (6...16).contains(parts[1].count),
              parts[1].allSatisfy({ $0.isASCII && ($0.isNumber || ("a"..."f").contains($0)) }),
              parts[0].enumerated().allSatisfy({ i, c in c.isASCII && (i == 8 ? c == "T" : i == 15 ? c == "Z" : c.isNumber) }) else { return false }
        return time(of: text) != nil
    }

    /// Whether `text` could be (a prefix of) an id: digits, T, Z, '-' and hex, nothing that can
    /// name another path.
    public static func isPlausible(_ text: String) -> Bool {
        !text.isEmpty && text.count <= 40 && text.allSatisfy { $0.isASCII && ($0.isHexDigit || $0 == "T" || $0 == "Z" || $0 == "-") }
    }
}
