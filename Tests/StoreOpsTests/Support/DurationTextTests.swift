import Foundation
import StoreOps
import Testing

@Suite("durations")
struct DurationTextTests {
    @Test(arguments: [("30d", 2_592_000), ("12h", 43_200), ("2w", 1_209_600), ("1y2d", 31_708_800), ("90m", 5_400), ("45s", 45), ("1d12h", 129_600), ("250ms", 0.25), ("1s500ms", 1.5)] as [(String, Double)])
    func parses(_ text: String, _ seconds: Double) throws {
        #expect(try DurationText.parse(text).get().seconds == seconds)
    }

    @Test(arguments: [("30", "has no unit"), ("", "is empty"), ("5x", "unknown unit 'x'"), ("h", "without a number"),
                      ("2h1d", "smaller unit first"), ("0d", "is zero"), ("1d2", "ends with a number"), ("3days", "unknown unit 'days'"),
                      ("-5s", "is negative"), ("1d-5s", "unexpected character '-'"), ("101y", "longer than 100 years")] as [(String, String)])
    func refuses(_ text: String, _ problem: String) {
        guard case .failure(let error) = DurationText.parse(text) else { Issue.record("\(text) parsed"); return }
        #expect(error.description.contains(problem), "\(error)")
        #expect(error.description.contains("expected a number and a unit"))
    }
}
