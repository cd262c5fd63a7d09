import Foundation
@testable import StoreOps
import Synchronization
import Testing

/// The diff decodes a table's rows on one thread while the caller's records them (`RowPipe`).
@Suite("the diff's row pipe: in order, errors from either side, never a producer left running")
struct RowPipeTests {
    struct Boom: Error, Equatable { var side: String }

    @Test("every item reaches the consumer once, in the order emitted, across batch and queue limits")
    func order() throws {
        for (count, batch, depth) in [(0, 4, 1), (1, 4, 1), (1_000, 1, 1), (10_000, 256, 4), (10_007, 7, 2)] {
            var seen: [Int] = []
            try RowPipe<Int>.run(batch: batch, depth: depth, produce: { emit in
                for i in 0..<count { try emit(i) }
            }, consume: { seen.append($0) })
            #expect(seen == Array(0..<count), "\(count) items in batches of \(batch)")
        }
    }

    @Test("the producer's error is thrown after what it emitted before it; the consumer's stops the producer, which has ended when run returns")
    func errors() throws {
        var seen: [Int] = []
        #expect(throws: Boom(side: "producer")) {
            try RowPipe<Int>.run(batch: 8, depth: 2, produce: { emit in
                for i in 0..<100 { try emit(i) }
                throw Boom(side: "producer")
            }, consume: { seen.append($0) })
        }
        #expect(seen == Array(0..<100))

        // The consumer fails at the 10th item of an endless producer: run throws that error, and
        // the producer is not emitting any more once it has returned.
        let emitted = Atomic<Int>(0)
        #expect(throws: Boom(side: "consumer")) {
            var taken = 0
            try RowPipe<Int>.run(batch: 4, depth: 2, produce: { emit in
                var i = 0
                while true {
                    try emit(i)
                    emitted.add(1, ordering: .relaxed)
                    i += 1
                }
            }, consume: { _ in
                taken += 1
                if taken == 10 { throw Boom(side: "consumer") }
            })
        }
        let after = emitted.load(ordering: .relaxed)
        usleep(50_000)
        #expect(emitted.load(ordering: .relaxed) == after, "the producer still ran after run returned")
        #expect(after < 10 + 4 * 3 + 4, "the producer ran ahead of the consumer by more than the queue holds: \(after)")
    }
}
