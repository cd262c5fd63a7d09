import Foundation

/// Threads of their own for the longest tests, which spend their time waiting on child processes.
///
/// Swift Testing runs a synchronous test on the cooperative pool, which has one thread per core:
/// on two cores, a test waiting on `storectl` runs (or sleeping while a server restarts) keeps one
/// of the only two threads, and the suite's wall time grew to ~10 minutes with a core often idle.
/// `TestThreads.heavy.run { ... }` moves the body onto these threads (the same task, so
/// `#expect` still reports to its test) and frees the pool thread for the other tests. The number
/// of threads bounds how many such bodies run at once.
@available(macOS 15.0, *)
final class TestThreads: TaskExecutor, @unchecked Sendable {
    /// The kill-at-every-fault-point scenarios: two at a time beside the pool's tests (three
    /// made the suite 414 s but starved a replicate test of its one-second bases on a fresh machine).
    static let heavy = TestThreads(count: 2, name: "storectl-heavy-test")

    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []

    init(count: Int, name: String) {
        for index in 0..<count {
            let thread = Thread { [unowned self] in self.work() }
            thread.name = "\(name)-\(index)"
            thread.stackSize = 8 << 20
            thread.start()
        }
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    private func work() {
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            let job = jobs.removeFirst()
            condition.unlock()
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }

    /// Runs `body` on one of these threads, in the calling task.
    func run<T: Sendable>(_ body: () throws -> T) async throws -> T {
        try await withTaskExecutorPreference(self) { try body() }
    }
}
