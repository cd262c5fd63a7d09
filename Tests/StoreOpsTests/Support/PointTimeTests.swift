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
}
