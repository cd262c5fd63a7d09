import Foundation
import Synchronization

/// Named fault points: every step storectl takes that renames, removes, creates or fsyncs a file
/// (and a few semantic moments, such as a migration's commit) calls `reach(_:)` with its name,
/// right after the step.
///
/// Test hooks read the environment once; both are no-ops when unset:
/// - `STORECTL_FAULT_TRACE=FILE` appends every point reached to FILE, one `name#k` per line
///   (`k`: the k-th time this run reached `name`). A run with it set is how a test lists the
///   points of an operation: the list is what the code does, not a table kept beside it.
/// - `STORECTL_FAULT_POINT=name` or `name#k` kills the process with SIGKILL at the first (k-th)
///   time it reaches `name`: no cleanup runs, as in a power cut or `kill -9`.
///
/// The file-system primitives in `FileSystem` take the point name as a required argument, so no
/// durable step can be written without one (a test also scans the sources for raw calls).
public enum FaultInjection {
    private static let target = point(named: "STORECTL_FAULT_POINT")
    /// A fourth hook: `STORECTL_TEST_SIGNAL_AT=name` (or `name#k`) sends the process SIGTERM
    /// when it reaches `name`, as an operator's `kill` at that instant would (the process goes on
    /// and handles it as it handles any SIGTERM).
    private static let signalTarget = point(named: "STORECTL_TEST_SIGNAL_AT")

    /// A fifth: `STORECTL_TEST_PAUSE_AT=name:ms` (or `name#k:ms`) sleeps `ms` milliseconds when
    /// it reaches `name`, so that a test can put another process into the instant after a step
    /// (an app opening the store between two renames of a swap) every time, not once in a while.
    /// With `STORECTL_TEST_PAUSE_UNTIL=FILE` the pause ends as soon as FILE exists (`ms` is then
    /// a cap): a test gives the other process all the time a loaded machine needs, and no more.
    private static let pauseUntil: String? = {
        guard let path = ProcessInfo.processInfo.environment["STORECTL_TEST_PAUSE_UNTIL"], !path.isEmpty else { return nil }
        return path
    }()

    private static let pauseTarget: (name: String, occurrence: Int, microseconds: UInt32)? = {
        guard let spec = ProcessInfo.processInfo.environment["STORECTL_TEST_PAUSE_AT"], let colon = spec.lastIndex(of: ":"),
              let ms = UInt32(spec[spec.index(after: colon)...]), ms <= 600_000 else { return nil }
        let place = String(spec[..<colon])
        if let hash = place.lastIndex(of: "#"), let k = Int(place[place.index(after: hash)...]), k > 0 {
            return (String(place[..<hash]), k, ms * 1000)
        }
        return (place, 1, ms * 1000)
    }()

    /// `name` or `name#k` from the environment variable `variable` (k: the k-th time, 1 if not given).
    private static func point(named variable: String) -> (name: String, occurrence: Int)? {
        guard let spec = ProcessInfo.processInfo.environment[variable], !spec.isEmpty else { return nil }
        if let hash = spec.lastIndex(of: "#"), let k = Int(spec[spec.index(after: hash)...]), k > 0 {
            return (String(spec[..<hash]), k)
        }
        return (spec, 1)
    }

    private static let traceFD: Int32? = {
        guard let path = ProcessInfo.processInfo.environment["STORECTL_FAULT_TRACE"], !path.isEmpty else { return nil }
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        return fd >= 0 ? fd : nil
    }()

    private static let counts = Mutex<[String: Int]>([:])

    /// A third hook, for a write whose answer is lost (the object stored, the caller told it
    /// failed, as through a connection cut after the server did the request):
    /// `STORECTL_TEST_LOST_ANSWER=name` or `name#k` makes `answerLost(name)` true the first (k-th)
    /// time it is asked; the caller then throws as the failed write would.
    private static let lostAnswer = point(named: "STORECTL_TEST_LOST_ANSWER")
    private static let answers = Mutex<[String: Int]>([:])

    /// Whether the answer to the write just done at `name` is to be lost (see `lostAnswer`).
    public static func answerLost(_ name: String) -> Bool {
        guard let lostAnswer, lostAnswer.name == name else { return false }
        let k = answers.withLock { table -> Int in
            table[name, default: 0] += 1
            return table[name] ?? 0
        }
        return k == lostAnswer.occurrence
    }

    /// True when either hook is set (callers never need to check; `reach` is cheap either way).
    public static var isActive: Bool { target != nil || traceFD != nil || signalTarget != nil }

    /// A test hook for the crash report: `STORECTL_TEST_CRASH=1` traps here, as a bug would.
    public static func crashIfAsked() {
        if ProcessInfo.processInfo.environment["STORECTL_TEST_CRASH"] == "1" {
            let values: [Int] = []
            _ = values[Int(getpid())]   // an out-of-bounds index: Swift traps (SIGILL/SIGTRAP)
        }
    }

    /// Marks that the process has just completed the step `name`.
    public static func reach(_ name: String) {
        guard target != nil || traceFD != nil || signalTarget != nil || pauseTarget != nil else { return }
        let k = counts.withLock { table -> Int in
            table[name, default: 0] += 1
            return table[name]!
        }
        if let fd = traceFD {
            let line = Array("\(name)#\(k)\n".utf8)
            _ = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        }
        if let target, target.name == name, target.occurrence == k {
            kill(getpid(), SIGKILL)
            pause()
        }
        if let pauseTarget, pauseTarget.name == name, pauseTarget.occurrence == k {
            if let pauseUntil {
                let until = Date().addingTimeInterval(Double(pauseTarget.microseconds) / 1_000_000)
                while access(pauseUntil, F_OK) != 0, Date() < until { usleep(5_000) }
            } else {
                usleep(pauseTarget.microseconds)
            }
        }
        if let signalTarget, signalTarget.name == name, signalTarget.occurrence == k {
            kill(getpid(), SIGTERM)
            // The handler records it (on its own thread): the step after this one sees it.
            let until = Date().addingTimeInterval(2)
            while ProcessSignals.received == nil, Date() < until { usleep(1_000) }
        }
    }
}
