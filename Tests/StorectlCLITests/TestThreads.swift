import Foundation
import Testing

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

    /// The end-to-end suites' tests (`.onTestThreads`): most of their time is spent waiting on
    /// child processes, servers and clocks. On the pool's two threads they ran two at a time with
    /// the cores 60-85% idle, and the crash test, queued behind them, started its scenarios only
    /// after most of them had run (a local run: 747 s, the crash test's work in the last 200 s).
    static let waiting = TestThreads(count: 4, name: "storectl-waiting-test")

    /// The real-cron test alone (`.onOwnThread`): it sleeps through cron's minute ticks, and
    /// queued behind the other suites' tests on `waiting` it started after ~300 s (a CI run).
    static let own = TestThreads(count: 1, name: "storectl-own-thread-test")

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

/// Runs each test of the suite it marks on `TestThreads.waiting` instead of the pool's threads
/// (the same task: `#expect` reports to its test; a synchronous test's body runs on that thread).
/// For synchronous tests only: child tasks inherit the preference, so an async test that blocked
/// a waiting thread on a task group or `async let` of its own could hang once all four are busy.
struct OnTestThreads: SuiteTrait, TestTrait, TestScoping {
    var isRecursive: Bool { true }
    /// Which threads: `TestThreads.waiting` unless said.
    var threads: @Sendable () -> TestThreads = { TestThreads.waiting }

    func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? { testCase == nil ? nil : self }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        guard #available(macOS 15.0, *) else { return try await function() }
        try await withTaskExecutorPreference(threads()) { try await function() }
    }
}

extension Trait where Self == OnTestThreads {
    /// See `OnTestThreads`.
    static var onTestThreads: Self { OnTestThreads() }
    /// On `TestThreads.own`: a thread no other suite queues on.
    static var onOwnThread: Self { OnTestThreads(threads: { TestThreads.own }) }
}
