import Foundation
import Synchronization

/// Runs two jobs at once, one per core, and returns both results (or the first error, `a`'s
/// before `b`'s). Used where a check of a file and another pass over it (hashing, packing) can
/// overlap: both read a file that was just written, from the page cache.
public func inParallel<A: Sendable, B: Sendable>(_ a: @Sendable () throws -> A, _ b: @Sendable () throws -> B) throws -> (A, B) {
    let results = Mutex<(a: Result<A, any Error>?, b: Result<B, any Error>?)>((nil, nil))
    DispatchQueue.concurrentPerform(iterations: 2) { lane in
        if lane == 0 {
            let value = Result { try a() }
            results.withLock { $0.a = value }
        } else {
            let value = Result { try b() }
            results.withLock { $0.b = value }
        }
    }
    let (a, b) = results.withLock { ($0.a!, $0.b!) }
    return (try a.get(), try b.get())
}
