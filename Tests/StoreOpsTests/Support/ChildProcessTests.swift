import Foundation
import StoreLab
import Testing

/// The tests' own process runner: what made a CI run hang with Foundation's `Process` must not
/// happen with it.
@Suite("test support: child processes")
struct ChildProcessTests {
    @Test("a child inherits no descriptor beyond 0, 1 and 2, even one opened without close-on-exec")
    func noInheritedDescriptors() throws {
        let folder = try TempFolder()
        let leaky = open(folder.file("open-in-parent"), O_WRONLY | O_CREAT, 0o600)   // no O_CLOEXEC
        try #require(leaky > 2)
        defer { close(leaky) }
        // The shell lists its descriptors through /proc/$$/fd (its own, not ls's).
        let listed = try ChildProcess.run("/bin/sh", ["-c", "ls /proc/$$/fd"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let fds = Set(listed.stdout.split(whereSeparator: \.isNewline).compactMap { Int32($0) })
        #expect(!fds.contains(leaky), "the child holds the parent's descriptor \(leaky): \(fds.sorted())")
        #expect(fds == [0, 1, 2], "the child holds more than stdin, stdout and stderr: \(fds.sorted())")
    }

    @Test("waiting ends when the child exits, though a grandchild it left behind still runs")
    func grandchildDoesNotHoldTheWait() throws {
        // With Foundation's Process on Linux this wait lasted as long as the grandchild: the
        // grandchild kept the socket by which Process learns of the exit.
        let started = Date()
        let result = try ChildProcess.run("/bin/sh", ["-c", "sleep 30 & echo $!"])
        let waited = Date().timeIntervalSince(started)
        #expect(result.status == 0)
        #expect(waited < 10, "the wait took \(waited) s")
        if let grandchild = Int32(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) { kill(grandchild, SIGKILL) }
    }

    @Test("the status is the exit code, or 128 + the signal that ended the child")
    func statuses() throws {
        #expect(try ChildProcess.run("/bin/sh", ["-c", "exit 3"]).status == 3)
        let running = try ChildProcess.Running("/bin/sleep", ["30"])
        #expect(running.isRunning)
        running.signal(SIGKILL)
        #expect(running.wait().status == 128 + SIGKILL)
        #expect(!running.isRunning)
        #expect(throws: (any Error).self) { try ChildProcess.Running("/nonexistent/program", []) }
    }
}
