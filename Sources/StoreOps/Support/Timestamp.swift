import Foundation

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
        // A time read from outside (a store's date column, a damaged record) may be anything: one
        // past year 9999, infinite or NaN is shown as its number, never converted (which traps).
        let interval = date.timeIntervalSince1970
        guard interval.isFinite, abs(interval) < 253_402_300_800 else { return "\(interval) s since 1970 (not a calendar time)" }
        let millis = Int64((interval * 1000).rounded())
        var seconds = time_t(millis >= 0 ? millis / 1000 : (millis - 999) / 1000)
        let fraction = Int(millis - Int64(seconds) * 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                      parts.tm_hour, parts.tm_min, parts.tm_sec, fraction)
    }

    /// - Parameter rounding: to the nearest millisecond (what records store); false: as written
    ///   (`--at`, whose digits past the millisecond must never reach a later point).
    public static func parseISO(_ text: String) -> Date? { parseISO(text, rounding: true) }

    public static func parseISO(_ text: String, rounding: Bool) -> Date? {
        let parsed = (try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text))
            ?? (try? Date.ISO8601FormatStyle().parse(text))
        return rounding ? parsed.map(rounded) : parsed
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
