import Foundation
@testable import StoreOps
import Testing

@Suite("--at TIME: the forms a point's time is written in")
struct PointTimeTests {
    @Test("RFC 3339 with a T or a space (as `snapshot list` prints it), an offset, or a duration before now; anything else is 64")
    func forms() throws {
        let t = try PointRestore.parseTime("2026-11-25T07:57:35.122Z")
        #expect(Replicate.ms(t) == 1_795_593_455_122)
        #expect(try PointRestore.parseTime("2026-11-25 07:57:35.122Z") == t)
        #expect(try PointRestore.parseTime(" 2026-11-25T08:57:35.122+01:00 ") == t)
        #expect(try PointRestore.parseTime("2026-11-25t07:57:35.122z") == t, "RFC 3339 allows lowercase t and z")
        let now = Date(timeIntervalSince1970: 1_796_111_855)
        #expect(try PointRestore.parseTime("-5m", now: now) == now.addingTimeInterval(-300))
        #expect(try PointRestore.parseTime("now", now: now) == now && PointRestore.parseTime("NOW", now: now) == now, "what the README's operators type")
        for bad in ["yesterday", "2026-11-25  07:57:35Z", "2026/11/25 07:57:35Z", "07:57:35 2026-11-25"] {
            #expect(throws: StoreOpsError.self, "\(bad)") { try PointRestore.parseTime(bad) }
            #expect((try? PointRestore.parseTime(bad)) == nil)
        }
    }

    @Test("a field out of range is 64 naming it, never rolled over into another moment (hour 47 two days later, 30 February 2 March); the last day of a month, of February in a leap year, and offsets are times")
    func outOfRange() throws {
        let cases = ["2026-11-29T47:35:50Z": "hour", "2026-11-29T23:34:110Z": "second", "2026-02-30T10:00:00Z": "day", "2026-11-31T00:00:00Z": "day",
                     "2026-11-30T24:00:00Z": "hour", "2026-11-30T23:99:00Z": "minute", "2026-13-01T00:00:00Z": "month", "2026-11-00T00:00:00Z": "day",
                     "2025-02-29T00:00:00Z": "day", "2026-11-30T10:00:00+25:00": "offset", "2026-11-30T10:00:00.5+01:60": "offset"]
        for (text, field) in cases {
            do {
                _ = try PointRestore.parseTime(text)
                Issue.record("\(text) was taken for a time")
            } catch let error as StoreOpsError {
                #expect(error.kind == .usage && error.message.contains(field), "\(text): \(error.message)")
            }
        }
        for good in ["2026-11-30T23:59:59.999Z", "2028-02-29T12:00:00Z", "2026-12-31T00:00:00-08:00", "2026-04-30T00:00:00+05:30"] {
            #expect((try? PointRestore.parseTime(good)) != nil, "\(good)")
        }
    }
}
