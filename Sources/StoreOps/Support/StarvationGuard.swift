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
/// a core) four times a second; when, over the last second, this process's threads in the idle
/// class waited for a core more than half a second and ran less than a tenth of one, it moves
/// them to nice 10 with a 0.1 ms slice, for the rest of the run, and new polite threads start
/// there too. Threads that wait on the disk or the network do not count as waiting for a core;
/// threads of the normal class (the guard's own, replicate's loop) neither count nor move.
///
/// Threads are put in the idle class only where the guard can watch and can take them out again:
/// the statistics readable (and not all zero: delay accounting off), and leaving the class
/// allowed (Linux lets a thread leave it only with CAP_SYS_NICE or an RLIMIT_NICE of 20: an
/// ordinary user cannot, so is tried once, on a thread of its own, before any is put there).
/// Otherwise they run at nice 10 with the 0.1 ms slice, as before the idle class was used.
enum StarvationGuard {
    private static let state = Mutex(State.off)
    private enum State { case off, watching, raised, unavailable }

    static let logger = Logger(label: "storectl.pace")

    /// Sampling period; a decision looks at the last `window` samples.
    static let period: TimeInterval = 0.25
    static let window = 4

    /// True while threads may be put in the idle class.
    static var watching: Bool { state.withLock { $0 == .watching } }

    /// Starts watching, once per process, where it can (above). Where it cannot, it is not tried
    /// again (replicate starts it at every base).
    static func start() {
        guard state.withLock({ $0 == .off }) else { return }
        let usable = sample()?.values.contains { $0.run > 0 } == true && canLeaveIdleClass()
        let started = state.withLock { value -> Bool in
            guard value == .off else { return false }
            value = usable ? .watching : .unavailable
            return usable
        }
        logger.debug("paced threads", metadata: ["class": "\(started ? "idle, watched" : "nice 10")"])
        guard started else { return }
        let thread = Thread {
            // A thread inherits its creator's class: this one stays in the normal one.
            _ = storectl_polite_thread(0, 0, 0)
            watch()
        }
        thread.stackSize = 256 << 10
        thread.name = "storectl-pace-guard"
        thread.start()
    }

    /// Whether a thread of this process can enter the idle class and leave it again: tried on a
    /// thread of its own, which ends either way.
    static func canLeaveIdleClass() -> Bool {
        // Where the rules say no (an ordinary user), no thread is put there to find out: it could
        // not come back, and on cores others keep busy it would wait long for a core to end on.
        guard storectl_may_leave_idle_class() != 0 else { return false }
        let result = Mutex(false)
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            if storectl_idle_thread() == 0 {
                result.withLock { $0 = storectl_polite_thread(0, 0, 0) == 0 }
            }
            done.signal()
        }
        thread.stackSize = 64 << 10
        thread.start()
        done.wait()
        return result.withLock { $0 }
    }

    /// Each live thread's run and wait times, in nanoseconds, by thread id; nil when unreadable.
    /// `idleOnly`: only the threads in the idle class now (the copy's: a process polite only
    /// for a scope, replicate, keeps its main loop in the normal class), possibly none.
    static func sample(idleOnly: Bool = false) -> [Int32: (run: UInt64, wait: UInt64)]? {
        guard let tids = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task") else { return nil }
        var times: [Int32: (run: UInt64, wait: UInt64)] = [:]
        for name in tids {
            // "run_ns wait_ns timeslices\n"; a thread that ended meanwhile is skipped.
            guard let tid = Int32(name), !idleOnly || storectl_thread_is_idle(tid) != 0,
                  let text = try? String(contentsOfFile: "/proc/self/task/\(name)/schedstat", encoding: .ascii) else { continue }
            let fields = text.split(separator: " ")
            guard fields.count >= 2, let run = UInt64(fields[0]), let wait = UInt64(fields[1]) else { continue }
            times[tid] = (run, wait)
        }
        return times.isEmpty && !idleOnly ? nil : times
    }

    /// Whether samples `from` -> `to`, `seconds` apart, show a process starved of CPU: over the
    /// threads in both (a thread that ended or started between them does not count).
    static func starved(from: [Int32: (run: UInt64, wait: UInt64)], to: [Int32: (run: UInt64, wait: UInt64)], seconds: TimeInterval) -> Bool {
        var ran: UInt64 = 0
        var waited: UInt64 = 0
        for (tid, later) in to {
            guard let earlier = from[tid] else { continue }
            ran += later.run >= earlier.run ? later.run - earlier.run : 0
            waited += later.wait >= earlier.wait ? later.wait - earlier.wait : 0
        }
        return Double(waited) / 1e9 > seconds / 2 && Double(ran) / 1e9 < seconds / 10
    }

    private static func watch() {
        var samples: [[Int32: (run: UInt64, wait: UInt64)]] = []
        while true {
            Thread.sleep(forTimeInterval: period)
            guard let now = sample(idleOnly: true) else { continue }
            samples.append(now)
            if samples.count > window + 1 { samples.removeFirst() }
            guard samples.count == window + 1,
                  starved(from: samples[0], to: now, seconds: period * Double(window)) else { continue }
            raise()
            return
        }
    }

    /// The threads of this process in the idle class now.
    static func idleThreads() -> [Int32] {
        let tids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tids.compactMap { Int32($0) }.filter { storectl_thread_is_idle($0) != 0 }
    }

    /// Every thread of the process in the idle class back in the normal one (nice 0).
    static func leaveIdleClass() {
        for tid in idleThreads() { _ = storectl_polite_thread(tid, 0, 0) }
    }

    /// Every thread of the process in the idle class to nice 10 with a 0.1 ms slice, and new
    /// ones after them.
    static func raise() {
        state.withLock { $0 = .raised }
        var moved = 0
        var failed = 0
        for tid in idleThreads() {
            if IOPace.niceThread(tid) { moved += 1 } else { failed += 1 }
        }
        let metadata: Logger.Metadata = ["threads": "\(moved)", "failed": "\(failed)"]
        if moved == 0 {
            logger.warning("the copy is starved of CPU in the idle class and its threads could not be moved to nice 10", metadata: metadata)
        } else {
            logger.debug("the copy was starved of CPU in the idle class; its threads now run at nice 10", metadata: metadata)
        }
    }
}
