import Foundation
import StoreLab
@testable import StoreOps
import Testing

@Suite("replicate waits no longer than it must")
struct ReplicateWaitTests {
    /// With a poll interval of 5 s, a run of 200 ms that takes a base ends in well under 5 s: the
    /// thread reading the app's commits while the base is packed is woken when the packing ends
    /// (it waited out its poll interval: every base cost up to 250 ms), and the loop's last wait
    /// ends with `--for` (a 100 ms run lasted a whole poll interval). Before: at least 5 s.
    @Test("a run with a base ends with its duration, not after a poll interval")
    func baseAndDurationDoNotWaitAPollInterval() throws {
        let folder = try TempFolder("storectl-replicate-wait")
        let store = try sampleStore(in: folder, items: 300)
        let repo = try folder.repository()
        var options = Replicate.Options(stores: [store], repository: repo)
        options.password = .file(try folder.passwordFile())
        options.pollInterval = 5
        options.duration = 0.2
        // Unpaced: a paced base runs in the idle class, which a loaded machine starves for seconds.
        options.pace = false
        let started = ContinuousClock.now
        let summary = try Replicate.run(options)
        let took = ContinuousClock.now - started
        #expect(summary.stores.first?.bases.count == 1, "the run took a base: \(summary.stores.first?.bases ?? [])")
        #expect(took < .seconds(4.5), "a 200 ms run with a 5 s poll interval took \(took)")
    }
}
