import Foundation

/// Waits whose length comes from outside (a policy's `pause`, a `--sync-interval`, a heartbeat):
/// converted without a trap. `usleep(UInt32(seconds * 1e6))` trapped past 71 minutes and
/// `poll`'s `Int32` milliseconds past 24.8 days, both within what a duration may say (100 years).
enum Waits {
    /// `seconds` as `poll`'s timeout: at least `floor` ms, at most `Int32.max` (24.8 days; a
    /// longer wait is woken by then and waits again), 0 for NaN or less.
    static func pollMilliseconds(_ seconds: TimeInterval, floor: Int32 = 1) -> Int32 {
        guard seconds.isFinite else { return seconds > 0 ? Int32.max : floor }
        let ms = (seconds * 1000).rounded(.up)
        return ms >= Double(Int32.max) ? Int32.max : max(floor, Int32(max(0, ms)))
    }

    /// Sleeps `seconds` (nothing for NaN or less). A signal ends it early, as it ended `usleep`:
    /// callers check `ProcessSignals` after it.
    static func sleep(_ seconds: TimeInterval) {
        guard seconds > 0 else { return }   // NaN too
        let capped = min(seconds, 100 * 365 * 86_400)   // DurationText.maximumSeconds
        var request = timespec(tv_sec: Int(capped.rounded(.down)), tv_nsec: Int((capped - capped.rounded(.down)) * 1e9))
        var left = timespec()
        _ = nanosleep(&request, &left)
    }
}
