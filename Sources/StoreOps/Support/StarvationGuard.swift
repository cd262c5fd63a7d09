import CStoreSupport
import Foundation
import Logging
import Synchronization

/// Keeps a paced copy in the idle scheduling class (`IOPace.politeThread`) only while it still
/// gets the CPU it wants.
///
/// A thread of the idle class runs only on a core no other thread wants. On a machine whose cores
/// the app keeps busy, a copy there would get nearly nothing and never end, holding its read
/// transaction (the store's -wal grows). So a thread of its own, in the normal class, reads every
/// thread's scheduler statistics (`/proc/self/task/*/schedstat`: time run, time spent waiting for
/// a core) four times a second; when, over the last second, this process's threads waited for a
/// core more than half a second and ran less than a tenth of one, it moves every thread to nice
/// 10 with a 0.1 ms slice, for the rest of the run, and new threads start there too. Threads that
/// wait on the disk or the network do not count as waiting for a core. Where those statistics
/// cannot be read, threads are never put in the idle class.
enum StarvationGuard {
    private static let state = Mutex(State.off)
    private enum State { case off, watching, raised }

    static let logger = Logger(label: "storectl.pace")

    /// Sampling period; a decision looks at the last `window` samples.
    static let period: TimeInterval = 0.25
    static let window = 4

    /// True while threads may be put in the idle class.
    static var watching: Bool { state.withLock { $0 == .watching } }

    /// The guard moved the threads to nice 10 (for tests and the debug log).
    static var raised: Bool { state.withLock { $0 == .raised } }

    /// Starts watching, once per process; does nothing where scheduler statistics are not readable.
    static func start() {
        let started = state.withLock { value -> Bool in
            guard value == .off, sample() != nil else { return false }
            value = .watching
            return true
        }
        guard started else { return }
        let thread = Thread {
            // Created from a thread that may already be idle-class: this one must not be.
            _ = storectl_polite_thread(0, 0)
            watch()
        }
        thread.stackSize = 256 << 10
        thread.name = "storectl-pace-guard"
        thread.start()
    }

    /// Run and wait times of all this process's threads, in nanoseconds; nil when unreadable.
    static func sample() -> (run: UInt64, wait: UInt64)? {
        guard let tids = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task") else { return nil }
        var run: UInt64 = 0
        var wait: UInt64 = 0
        var read = 0
        for tid in tids {
            // "run_ns wait_ns timeslices\n"; a thread that ended meanwhile is skipped.
            guard let text = try? String(contentsOfFile: "/proc/self/task/\(tid)/schedstat", encoding: .ascii) else { continue }
            let fields = text.split(separator: " ")
            guard fields.count >= 2, let r = UInt64(fields[0]), let w = UInt64(fields[1]) else { continue }
            run += r
            wait += w
            read += 1
        }
        return read > 0 ? (run, wait) : nil
    }

    /// Whether samples `from` -> `to`, `seconds` apart, show a process starved of CPU.
    static func starved(from: (run: UInt64, wait: UInt64), to: (run: UInt64, wait: UInt64), seconds: TimeInterval) -> Bool {
        let ran = Double(to.run &- from.run) / 1e9
        let waited = Double(to.wait &- from.wait) / 1e9
        return waited > seconds / 2 && ran < seconds / 10
    }

    private static func watch() {
        var samples: [(run: UInt64, wait: UInt64)] = []
        while true {
            Thread.sleep(forTimeInterval: period)
            guard let now = sample() else { continue }
            samples.append(now)
            if samples.count > window + 1 { samples.removeFirst() }
            guard samples.count == window + 1,
                  starved(from: samples[0], to: now, seconds: period * Double(window)) else { continue }
            raise()
            return
        }
    }

    /// Every thread of the process to nice 10 with a 0.1 ms slice, and new ones after them.
    static func raise() {
        state.withLock { $0 = .raised }
        let tids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        var moved = 0
        for tid in tids.compactMap({ Int32($0) }) where storectl_polite_thread_of(tid, 10, 100_000) == 0 { moved += 1 }
        logger.debug("the copy was starved of CPU in the idle class; its threads now run at nice 10", metadata: ["threads": "\(moved)"])
    }
}
