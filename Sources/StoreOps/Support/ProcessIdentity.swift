import Foundation

/// Which process made something. A pid alone does not say: pids are reused, and in a container
/// storectl is the same pid (often 1) on every run, so a killed run's temporary files looked
/// owned by the next run for ever (refused 75, never removed).
public enum ProcessIdentity {
    /// Clocks may have been stepped between a process's start and now: a process is taken for one
    /// that started after something was made only when it started this much later.
    static let slack: TimeInterval = 10

    /// When the process with this pid started, on the wall clock; nil when unknown.
    static func startTime(of pid: Int32) -> Date? {
        guard pid > 0, let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        // Fields after the command's closing parenthesis: state is field 3, starttime field 22
        // (clock ticks since boot, suspend included: CLOCK_BOOTTIME).
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 19, let ticks = Double(fields[19]) else { return nil }
        let perSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
        guard perSecond > 0 else { return nil }
        var real = timespec(), boot = timespec()
        guard clock_gettime(CLOCK_REALTIME, &real) == 0, clock_gettime(CLOCK_BOOTTIME, &boot) == 0 else { return nil }
        let bootedAt = (Double(real.tv_sec) + Double(real.tv_nsec) / 1e9) - (Double(boot.tv_sec) + Double(boot.tv_nsec) / 1e9)
        return Date(timeIntervalSince1970: bootedAt + ticks / perSecond)
    }

    /// Whether a process with this pid is alive and could be the one that made, or last changed,
    /// something at `time`: one that started after then (plus `slack`) is another process that
    /// was given the same pid.
    public static func couldBeOwner(_ pid: Int32, at time: Date) -> Bool {
        guard FileSystem.processIsAlive(pid) else { return false }
        guard let started = startTime(of: pid) else { return true }
        return started.timeIntervalSince(time) <= slack
    }

    /// `couldBeOwner(_:at:)` for a file or folder named for its maker's pid, at the last change of
    /// its status (its making, any write, its rename).
    public static func couldOwn(_ pid: Int32, path: String) -> Bool {
        var info = stat()
        guard lstat(path, &info) == 0 else { return FileSystem.processIsAlive(pid) }
        return couldBeOwner(pid, at: Date(timeIntervalSince1970: Double(info.st_ctim.tv_sec) + Double(info.st_ctim.tv_nsec) / 1e9))
    }

    /// This boot of this machine: a process of another boot is gone.
    public static let boot: String? = (try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8))
        .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.flatMap { $0.isEmpty ? nil : $0 }

    /// This process's pid namespace (`pid:[4026531836]`): a pid of another namespace (another
    /// container on the same host name) says nothing here.
    public static let pidNamespace: String? = {
        var buffer = [CChar](repeating: 0, count: 256)
        let n = readlink("/proc/self/ns/pid", &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }()
}
