import Foundation
import Synchronization

/// Runs two jobs at once, one per core, and returns both results (or the first error, `a`'s
/// before `b`'s). Used where a check of a file and another pass over it (hashing, packing) can
/// overlap: both read a file that was just written, from the page cache.
public func inParallel<A: Sendable, B: Sendable>(_ a: @Sendable () throws -> A, _ b: @Sendable () throws -> B) throws -> (A, B) {
    let results = Mutex<(a: Result<A, any Error>?, b: Result<B, any Error>?)>((nil, nil))
    DispatchQueue.concurrentPerform(iterations: 2) { lane in
        IOPace.politeThread()
        defer { IOPace.ordinaryThread() }   // a lane may be the caller's own thread
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

/// Runs `body(lane)` on `count` threads at once (the caller's among them) and returns when all
/// are done. Unlike `concurrentPerform`, whose width is the number of cores, every lane gets a
/// thread: lanes that mostly wait on the network (S3 transfers) overlap their waits.
public func onLanes(_ count: Int, _ body: (Int) -> Void) {
    final class Box: @unchecked Sendable { var work: ((Int) -> Void)? }
    withoutActuallyEscaping(body) { body in
        // The threads hold the box, not the closure: it is gone before the closure must be.
        let box = Box()
        box.work = body
        let group = DispatchGroup()
        for lane in 1..<max(1, count) {
            group.enter()
            let thread = Thread {
                IOPace.politeThread()
                defer { IOPace.ordinaryThread() }
                box.work?(lane)
                group.leave()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        body(0)
        group.wait()
        box.work = nil
    }
}
