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

    @Test("a process is a record's writer only with the start (clock ticks since boot) the record holds: another start is a reused pid, whatever the wall clock did; a dead pid is gone; without a start (an older record) the pid decides")
    func startTicks() throws {
        let sleeper = try ChildProcess.Running("/bin/sleep", ["30"])
        defer { sleeper.signal(SIGKILL); _ = sleeper.wait() }
        let ticks = try #require(ProcessIdentity.startTicks(of: sleeper.pid))
        #expect(ProcessIdentity.ownStartTicks.map { $0 <= ticks } == true, "it started after this process")
        #expect(ProcessIdentity.isRunning(sleeper.pid, startTicks: ticks))
        #expect(!ProcessIdentity.isRunning(sleeper.pid, startTicks: ticks - 1), "another start: another process with that pid")
        #expect(ProcessIdentity.isRunning(sleeper.pid, startTicks: nil))
        #expect(!ProcessIdentity.isRunning(try deadPID(), startTicks: nil))
        #expect(ProcessIdentity.boot != nil && ProcessIdentity.pidNamespace?.hasPrefix("pid:[") == true)
        #expect(ProcessIdentity.bootedAt().map { $0 < Date() } == true)
    }

    @Test("a repository lock of this host name is stale when no process has its pid or the one that has it started at another tick; of another pid namespace (another container of the same name), or of another boot that may be another machine of that name, only its age decides, unless it was made well before this boot")
    func repositoryLocks() throws {
        let sleeper = try ChildProcess.Running("/bin/sleep", ["30"])
        defer { sleeper.signal(SIGKILL); _ = sleeper.wait() }
        let dead = try deadPID()
        let now = Date()
        let ticks = try #require(ProcessIdentity.startTicks(of: sleeper.pid))
        func record(pid: Int32, ticks: UInt64? = nil, created: Date = now, refreshed: Date = now, boot: String? = ProcessIdentity.boot,
                    namespace: String? = ProcessIdentity.pidNamespace) -> RepositoryLock.Record {
            RepositoryLock.Record(host: ProcessInfo.processInfo.hostName, pid: pid, user: "x", exclusive: true, operation: "snapshot prune",
                                  created: created, refreshed: refreshed, boot: boot, pidNamespace: namespace, startTicks: ticks)
        }
        #expect(!RepositoryLock.isStale(record(pid: sleeper.pid, ticks: ticks)), "its live holder")
        #expect(!RepositoryLock.isStale(record(pid: sleeper.pid, ticks: ticks, created: now.addingTimeInterval(-86400))), "however its clock was set")
        #expect(RepositoryLock.isStale(record(pid: dead)), "a dead holder's")
        #expect(RepositoryLock.isStale(record(pid: sleeper.pid, ticks: ticks + 100)), "a pid reused by a process that started at another tick")
        #expect(!RepositoryLock.isStale(record(pid: dead, created: now.addingTimeInterval(-30 * 86400), boot: "another-boot")),
                "another boot, refreshed since this one began (made long before): perhaps another machine of this name, whose holder lives")
        let booted = try #require(ProcessIdentity.bootedAt())
        let before = booted.addingTimeInterval(-(RepositoryLock.refreshEvery + 600))
        #expect(RepositoryLock.isStale(record(pid: dead, created: before, refreshed: before, boot: "another-boot"), now: before.addingTimeInterval(60)),
                "not refreshed since well before this boot: an earlier boot's (judged at once, not by its age)")
        #expect(!RepositoryLock.isStale(record(pid: dead, namespace: "pid:[1]")), "another namespace's: its pid is not looked up here")
        #expect(RepositoryLock.isStale(record(pid: dead, namespace: "pid:[1]"), now: now.addingTimeInterval(RepositoryLock.staleAfter + 1)), "but it ages out")
        #expect(RepositoryLock.isStale(record(pid: dead, boot: nil, namespace: nil)), "a lock of an older storectl: by its pid, as before")
    }
}
