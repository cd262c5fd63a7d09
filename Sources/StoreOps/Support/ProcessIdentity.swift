import Foundation

/// Which process made something. A pid alone does not say: pids are reused (in a container
/// storectl is the same pid, often 1, on every run). A record a process writes (a repository
/// lock, a rollback's intent) carries its boot, its pid namespace and its start in clock ticks
/// since boot: a process with that pid is its writer only with the same start, which no clock
/// step changes.
public enum ProcessIdentity {
    /// The fields after the command's closing parenthesis in /proc/PID/stat (read as bytes: a
    /// command name need not be UTF-8).
    static func statFields(of pid: Int32) -> [Substring]? {
        guard pid > 0, let data = FileManager.default.contents(atPath: "/proc/\(pid)/stat"),
              let close = data.lastIndex(of: UInt8(ascii: ")")) else { return nil }
        let tail = String(decoding: data[data.index(after: close)...], as: UTF8.self)
        return tail.split(separator: " ")
    }

    /// When the process with this pid started, in clock ticks since boot (field 22); nil when
    /// unknown.
    public static func startTicks(of pid: Int32) -> UInt64? {
        guard let fields = statFields(of: pid), fields.count > 19 else { return nil }
        return UInt64(fields[19])
    }

    /// This process's start.
    public static let ownStartTicks: UInt64? = startTicks(of: getpid())

    /// Whether the process that wrote a record (its pid, and its start when the record has it) is
    /// still running: a process with that pid that started at another tick is another process.
    public static func isRunning(_ pid: Int32, startTicks ticks: UInt64?) -> Bool {
        guard FileSystem.processIsAlive(pid) else { return false }
        guard let ticks, let now = startTicks(of: pid) else { return true }
        return now == ticks
    }

    /// When this machine booted, on the wall clock (now less the time since boot, suspend included).
    public static func bootedAt() -> Date? {
        var real = timespec(), boot = timespec()
        guard clock_gettime(CLOCK_REALTIME, &real) == 0, clock_gettime(CLOCK_BOOTTIME, &boot) == 0 else { return nil }
        return Date(timeIntervalSince1970: (Double(real.tv_sec) + Double(real.tv_nsec) / 1e9) - (Double(boot.tv_sec) + Double(boot.tv_nsec) / 1e9))
    }

    /// This boot of this machine.
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

    /// Whether the process a record names (written on this host name) is gone, as far as this
    /// process can tell: nil when it cannot (another pid namespace; another boot that may be
    /// another machine of the same name), then the record's age decides.
    /// - Parameters:
    ///   - refreshed: when its writer last wrote it (its wall clock): a record of another boot
    ///     last written well before this machine booted is of an earlier boot of this machine
    ///     (a live writer refreshes it every `refreshEvery`), gone.
    public static func writerGone(pid: Int32, startTicks ticks: UInt64?, boot recordBoot: String?, pidNamespace namespace: String?,
                                  refreshed: Date, refreshEvery: TimeInterval) -> Bool? {
        if let recordBoot, let boot, recordBoot != boot {
            // Another boot: this machine's earlier one, or another machine given the same name
            // (a cloned VM, two Raspberry Pis) whose holder refreshes it: only a record not
            // refreshed since well before this boot is known gone.
            guard let booted = bootedAt(), refreshed < booted.addingTimeInterval(-(refreshEvery + 300)) else { return nil }
            return true
        }
        if let namespace, let pidNamespace, namespace != pidNamespace { return nil }
        return !isRunning(pid, startTicks: ticks)
    }
}
