import CHTTP
import Foundation
import Synchronization

/// SIGINT and SIGTERM turned into a flag that long operations poll between steps.
///
/// The handler only stores the signal number (async-signal-safe); the operation notices it at its
/// next safe point, removes its temp files and throws an error whose exit status is 128 + signal.
/// SQLite work in progress is stopped through a progress handler that reads the same flag.
public enum ProcessSignals {
    private static let flag = Atomic<Int32>(0)

    /// Installs the handlers. The CLI calls this once at start-up.
    ///
    /// A process inherits its parent's blocked-signal mask; launched from a thread that blocks
    /// signals (a dispatch worker, some supervisors), SIGTERM would never arrive and the job could
    /// not be stopped cleanly. So the two signals are also unblocked here.
    public static func install() {
        signal(SIGINT) { number in ProcessSignals.flag.store(number, ordering: .relaxed); storectl_http_signalled() }
        signal(SIGTERM) { number in ProcessSignals.flag.store(number, ordering: .relaxed); storectl_http_signalled() }
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGINT)
        sigaddset(&set, SIGTERM)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    /// The signal received so far, if any.
    public static var received: Int32? {
        let value = flag.load(ordering: .relaxed)
        return value == 0 ? nil : value
    }

    /// Records a signal as if it had been delivered (tests, and callers embedding the library).
    public static func raise(_ number: Int32) {
        flag.store(number, ordering: .relaxed)
        storectl_http_signalled()
    }

    /// The stop a signal asked for is being carried out (a migration's rollback): forget the
    /// signal so the work that carries it out is not itself interrupted by it. A further signal
    /// interrupts that work too (its steps are atomic).
    public static func acknowledge() {
        flag.store(0, ordering: .relaxed)
        storectl_http_signal_cleared()
    }

    private static let drainingFlag = Atomic<Bool>(false)

    /// The process drains after a signal (replicate: it writes what it read, by `finishBy`):
    /// requests in flight are not cut at the signal. Otherwise a transfer running when SIGINT or
    /// SIGTERM arrives is aborted at once, and one begun after it (clean-up) gets a few seconds.
    public static var drains: Bool {
        get { drainingFlag.load(ordering: .relaxed) }
        set {
            drainingFlag.store(newValue, ordering: .relaxed)
            storectl_http_draining(newValue ? 1 : 0)
        }
    }

    /// Throws if a signal arrived; call between steps.
    public static func checkpoint(_ doing: @autoclosure () -> String) throws {
        if let number = received {
            throw StoreOpsError(.signal(number), "\(doing()): interrupted by \(name(number)); temporary files were removed")
        }
    }

    private static let finishByMs = Atomic<Int64>(0)

    /// When a stopping process must be done (a drain after SIGTERM: systemd's stop timeout
    /// follows); requests that retry give up by then instead of backing off past it. Nil: none.
    public static var finishBy: Date? {
        get {
            let ms = finishByMs.load(ordering: .relaxed)
            return ms == 0 ? nil : Date(timeIntervalSince1970: Double(ms) / 1000)
        }
        set {
            let ms = newValue.map { max(1, Int64($0.timeIntervalSince1970 * 1000)) } ?? 0
            finishByMs.store(ms, ordering: .relaxed)
            // A request to a server that holds the connection without answering ends then too.
            storectl_http_abort_at(ms)
        }
    }

    public static func name(_ number: Int32) -> String {
        switch number {
        case SIGINT: return "SIGINT"
        case SIGTERM: return "SIGTERM"
        default: return "signal \(number)"
        }
    }
}
