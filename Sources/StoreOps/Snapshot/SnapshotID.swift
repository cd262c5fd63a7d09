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

    /// A point's label, `<chain's base snapshot id>@<number>`, taken apart (nil: not one).
    public static func pointLabel(_ text: String) -> (chain: String, number: Int)? {
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        guard parts.count == 2, isWellFormed(String(parts[0])), parts[1].allSatisfy(\.isASCII), let number = Int(parts[1]), number >= 0 else { return nil }
        return (String(parts[0]), number)
    }

    /// A point's label as restore and diff print it (`20261122T031500Z-7f3a9c@12`: its chain's
    /// base snapshot and its number there) given where a snapshot id was expected: 64 saying how
    /// a point is named on the command line (by its time), nil for anything else.
    public static func pointLabelGiven(_ text: String, repository: String?) -> StoreOpsError? {
        guard let (chain, number) = pointLabel(text) else { return nil }
        let list = repository.map { "`storectl snapshot list --repo \($0)`" } ?? "`storectl snapshot list --repo REPO`"
        return StoreOpsError(.usage, "\"\(text)\" is a point (number \(number) of the chain based on snapshot \(chain)), not a snapshot id",
                             hint: "name a point by its time: --at TIME (restore and diff print each point's time beside its label; \(list) shows the times each store is covered)")
    }
}
