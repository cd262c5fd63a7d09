import Foundation
import StoreLab
@testable import StoreOps
import Testing

/// Pids are reused (in a container storectl is the same pid, often 1, on every run): what a
/// killed run left must not look like a live run's for ever.
@Suite("which process made something: a pid alone does not say")
struct ProcessIdentityTests {
    /// The pid of a process that has exited (and been reaped).
    func deadPID() throws -> Int32 {
        let pid = try #require(Int32(try ChildProcess.run("/bin/sh", ["-c", "echo $$"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(!FileSystem.processIsAlive(pid))
        return pid
    }

    @Test("a live process that started after something was made is not its maker; one that started before may be; a dead one is not")
    func startTimes() throws {
        let sleeper = try ChildProcess.Running("/bin/sleep", ["30"])
        defer { sleeper.signal(SIGKILL); _ = sleeper.wait() }
        let started = try #require(ProcessIdentity.startTime(of: sleeper.pid))
        #expect(abs(started.timeIntervalSinceNow) < 5, "its start read from /proc on the wall clock: \(started)")
        #expect(ProcessIdentity.couldBeOwner(sleeper.pid, at: Date()))
        #expect(!ProcessIdentity.couldBeOwner(sleeper.pid, at: Date(timeIntervalSinceNow: -60)), "made a minute before it started: another process's")
        #expect(ProcessIdentity.couldBeOwner(sleeper.pid, at: Date(timeIntervalSinceNow: -3)), "within the clocks' slack: kept for its")
        #expect(!ProcessIdentity.couldBeOwner(try deadPID(), at: Date()))
        #expect(ProcessIdentity.boot != nil && ProcessIdentity.pidNamespace?.hasPrefix("pid:[") == true)
    }

    @Test("a repository lock of this host is stale when its pid's process started after it was made, or it is of an earlier boot; of another pid namespace (another container of the same host name) its pid says nothing: only its age")
    func repositoryLocks() throws {
        let sleeper = try ChildProcess.Running("/bin/sleep", ["30"])
        defer { sleeper.signal(SIGKILL); _ = sleeper.wait() }
        let dead = try deadPID()
        let now = Date()
        func record(pid: Int32, created: Date = now, boot: String? = ProcessIdentity.boot, namespace: String? = ProcessIdentity.pidNamespace) -> RepositoryLock.Record {
            RepositoryLock.Record(host: ProcessInfo.processInfo.hostName, pid: pid, user: "x", exclusive: true, operation: "snapshot prune",
                                  created: created, refreshed: now, boot: boot, pidNamespace: namespace)
        }
        #expect(!RepositoryLock.isStale(record(pid: sleeper.pid)), "its live holder")
        #expect(RepositoryLock.isStale(record(pid: dead)), "a dead holder's")
        #expect(RepositoryLock.isStale(record(pid: sleeper.pid, created: now.addingTimeInterval(-600))), "made before its pid's process started: a reused pid")
        #expect(RepositoryLock.isStale(record(pid: sleeper.pid, boot: "an-earlier-boot")), "of an earlier boot")
        #expect(!RepositoryLock.isStale(record(pid: dead, namespace: "pid:[1]")), "another namespace's: its pid is not looked up here")
        #expect(RepositoryLock.isStale(record(pid: dead, namespace: "pid:[1]"), now: now.addingTimeInterval(RepositoryLock.staleAfter + 1)), "but it ages out")
        #expect(RepositoryLock.isStale(record(pid: dead, boot: nil, namespace: nil)), "a lock of an older storectl: by its pid, as before")
    }
}
