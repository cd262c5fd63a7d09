import Foundation

/// Human-readable figures for tables and one-line summaries.
public enum Format {
    /// The name among `names` closest to `name` (case aside), when it is near enough to be what
    /// was meant (at most 2 edits, or a third of the name's length): for "did you mean".
    public static func nearest(_ name: String, among names: some Sequence<String>) -> String? {
        let target = name.lowercased()
        let best = names.min { (RepositoryLocation.editDistance($0.lowercased(), target), $0) < (RepositoryLocation.editDistance($1.lowercased(), target), $1) }
        return best.flatMap { RepositoryLocation.editDistance($0.lowercased(), target) <= max(2, name.count / 3) ? $0 : nil }
    }

    /// " (did you mean "X"?)" for `nearest`, or "".
    public static func didYouMean(_ name: String, among names: some Sequence<String>) -> String {
        nearest(name, among: names).map { " (did you mean \($0.debugDescription)?)" } ?? ""
    }

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
        // A figure read from outside (a record, a status file) is never converted past Int's range.
        guard seconds.isFinite, abs(seconds) < 1e12 else { return seconds.isFinite ? String(format: "%.3gs", seconds) : "?" }
        if seconds < 10 { return String(format: "%.2fs", seconds) }
        if seconds < 60 { return String(format: "%.1fs", seconds) }
        let total = Int(seconds.rounded())
        if total < 3600 { return String(format: "%dm%02ds", total / 60, total % 60) }
        return String(format: "%dh%02dm", total / 3600, (total % 3600) / 60)
    }

    /// 5 -> "5", -5.5 -> "-5.5": a number as typed.
    /// `repo stats`' " (5.4x smaller)", or " (1.9x larger)" when a repository holds more than
    /// its snapshots as whole copies (chains of points, packs a prune will collect; it said
    /// "(0.5x smaller)"); "" when either is 0.
    public static func storedRatio(logical: UInt64, stored: UInt64) -> String {
        guard stored > 0, logical > 0 else { return "" }
        let factor = Double(logical) / Double(stored)
        return factor >= 1 ? String(format: " (%.1fx smaller)", factor) : String(format: " (%.1fx larger)", 1 / factor)
    }

    public static func number(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }

    public static func percent(_ fraction: Double) -> String { String(format: "%.1f%%", fraction * 100) }

    /// The first `first` items and how many more: "a, b, c, and 4 more".
    public static func list(_ items: [String], first: Int = 5, separator: String = ", ") -> String {
        items.prefix(first).joined(separator: separator) + (items.count > first ? "\(separator)and \(items.count - first) more" : "")
    }

    /// "1 entity", "2 entities", "1,000 rows": singular only for one.
    public static func plural<T: BinaryInteger>(_ value: T, _ one: String, _ many: String) -> String {
        "\(count(value)) \(value == 1 ? one : many)"
    }
}

