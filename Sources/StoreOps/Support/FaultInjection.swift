import Foundation

/// A test hook: when `STORECTL_FAULT_POINT` names a point the process reaches, it kills itself
/// there with SIGKILL, so crash-safety tests can stop a real process at exactly that moment
/// (no cleanup runs, as in a power cut or `kill -9`). Unset in production: a no-op.
public enum FaultInjection {
    static let point = ProcessInfo.processInfo.environment["STORECTL_FAULT_POINT"]

    public static func reach(_ name: String) {
        guard let point, point == name else { return }
        kill(getpid(), SIGKILL)
        pause()
    }
}
