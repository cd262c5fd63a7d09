import CStoreSupport
import Foundation
import StoreOps
import Synchronization

/// A temporary folder, removed when the value goes away, or when the process exits (a folder
/// held by a static, a child's output of a process never waited for, the shared server's data:
/// each test run left ~80 MB in the temporary folder before).
public final class TempFolder: @unchecked Sendable {
    public let path: String

    public init(_ label: String = "storectl-test") throws {
        TestWatchdog.arm()
        let base = (NSTemporaryDirectory() as NSString).appendingPathComponent("\(label)-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        path = FileSystem.absolute(base)
        _ = Self.sweepAtExit
        _ = Self.live.withLock { $0.insert(path) }
    }

    /// The folders not yet removed; `sweep` removes them at exit (after the shared server stops).
    private static let live = Mutex<Set<String>>([])
    /// Registered once, by the first folder (a static's initialiser runs once, whatever the threads).
    private static let sweepAtExit: Void = { atexit { TempFolder.sweep() } }()

    static func sweep() {
        SharedS3.stopAtExit()
        let left = live.withLock { live -> Set<String> in defer { live = [] }; return live }
        for path in left {
            // A test that made a folder read-only to see a write refused may not have undone it.
            if (try? FileManager.default.removeItem(atPath: path)) == nil {
                makeWritable(path)
                try? FileManager.default.removeItem(atPath: path)
            }
        }
    }

    public func file(_ name: String) -> String { (path as NSString).appendingPathComponent(name) }

    /// A new snapshot repository in the folder (`storectl repo init`): plain, or encrypted with the
    /// password in `password` (a file written beside it; scrypt's cost lowered to keep tests fast).
    public func repository(_ name: String = "repo", encrypted: Bool = false) throws -> String {
        var options = RepositoryInit.Options(location: file(name), encrypted: encrypted, password: .file(try passwordFile()))
        options.kdfN = 1 << 10
        return try RepositoryInit.run(options).location
    }

    /// A copy of a repository an earlier build wrote (`Tests/Fixtures/old-repositories/<name>`:
    /// `format-1` or `layout-1`), with the empty folders git does not keep.
    public func oldRepository(_ name: String, as label: String? = nil) throws -> String {
        let target = file(label ?? name)
        let result = try ChildProcess.run("/bin/cp", ["-R", (OldRepositories.folder as NSString).appendingPathComponent(name), target])
        guard result.status == 0 else { throw StoreOpsError(.failure, "copying the fixture \(name): \(result.stderr)") }
        for folder in name == "format-1" ? ["verified", "snapshots", "catalog"] : ["verified", "locks", "keys", "data", "index", "snapshots"] {
            try FileManager.default.createDirectory(atPath: (target as NSString).appendingPathComponent(folder), withIntermediateDirectories: true)
        }
        return target
    }

    /// A password file in the folder (`password`), made on first use.
    public func passwordFile(_ text: String = "correct horse battery staple") throws -> String {
        let path = file("password")
        if !FileManager.default.fileExists(atPath: path) { try Data((text + "\n").utf8).write(to: URL(fileURLWithPath: path)) }
        return path
    }

    /// Names in the folder, hidden ones included.
    public func contents() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
    }

    /// Every folder under `path` readable, writable and searchable by its owner.
    private static func makeWritable(_ path: String) {
        chmod(path, 0o700)
        let files = FileManager.default.enumerator(atPath: path)
        while let name = files?.nextObject() as? String {
            let full = (path as NSString).appendingPathComponent(name)
            var info = stat()
            if lstat(full, &info) == 0, info.st_mode & S_IFMT == S_IFDIR { chmod(full, 0o700) }
        }
    }

    deinit {
        // Left in `live` when it cannot be removed now: the sweep at exit tries harder.
        if (try? FileManager.default.removeItem(atPath: path)) != nil || !FileManager.default.fileExists(atPath: path) {
            _ = Self.live.withLock { $0.remove(path) }
        }
    }
}

/// The repositories earlier builds wrote (`Tests/Fixtures/old-repositories`): what each snapshot
/// restored to then.
public enum OldRepositories {
    public static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Tests/Fixtures/old-repositories").path

    public struct Snapshot: Decodable, Sendable {
        public var repository: String
        public var id: String
        public var tags: [String]
        /// SHA-256 of the database, and of each external-data file by name.
        public var database: String
        public var external: [String: String]
    }

    /// The snapshots of `format-1` or `layout-1`, oldest first.
    public static func expected(_ repository: String) throws -> [Snapshot] {
        let data = try Data(contentsOf: URL(fileURLWithPath: (folder as NSString).appendingPathComponent("expected.json")))
        return try JSONDecoder().decode([Snapshot].self, from: data).filter { $0.repository == repository }
    }
}

/// A real tmpfs of a given size (a small disk to fill), or nil when this process may not mount.
public final class TempMount: @unchecked Sendable {
    public let path: String
    private let folder: TempFolder

    public init?(kilobytes: Int, readOnly: Bool = false) {
        guard getuid() == 0, let folder = try? TempFolder("storectl-mount") else { return nil }
        self.folder = folder
        path = folder.path
        let options = "size=\(kilobytes)k,mode=0777" + (readOnly ? ",ro" : "")
        guard let result = try? ChildProcess.run("/bin/mount", ["-t", "tmpfs", "-o", options, "tmpfs", path]),
              result.status == 0 else { return nil }
    }

    public func file(_ name: String) -> String { (path as NSString).appendingPathComponent(name) }

    deinit { _ = try? ChildProcess.run("/bin/umount", ["-l", path]) }

    /// True when tmpfs mounts work here (root, with the capability).
    public static let isAvailable: Bool = TempMount(kilobytes: 64) != nil
}

/// Runs programs for tests and benchmarks. Output goes to files, not pipes, so a child that
/// prints a lot can never block on a full pipe while we wait for it.
public enum ChildProcess {
    public struct Result: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
    }

    /// Runs to completion.
    public static func run(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
                           currentDirectory: String? = nil) throws -> Result {
        let running = try Running(executable, arguments, environment: environment, currentDirectory: currentDirectory)
        return running.wait()
    }

    /// A child process running in the background.
    ///
    /// Started with posix_spawn and waited for with waitpid, not with Foundation's `Process`:
    /// on Linux, `Process` learns that a child exited when a socket it handed the child reaches
    /// end-of-file, so a child that another thread spawned at the same moment can inherit that
    /// socket and keep it open, and `waitUntilExit` then waits for the wrong process (for ever,
    /// when that one is the SeaweedFS server shared by the whole run). Here a child inherits no
    /// descriptor beyond 0, 1 and 2, and waiting asks the kernel about the child itself.
    public final class Running: @unchecked Sendable {
        public let pid: Int32
        public let executable: String
        public let arguments: [String]
        private let out: TempFolder
        private let reaped = Mutex<Int32?>(nil)

        public init(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
                    currentDirectory: String? = nil) throws {
            self.executable = executable
            self.arguments = arguments
            let out = try TempFolder("storectl-child")
            self.out = out
            var variables = ProcessInfo.processInfo.environment
            // Keys the children write cost scrypt N 2^10, not 2^15 (see `KeyFile.defaultN`).
            if variables["STORECTL_TEST_KDF_N"] == nil { variables["STORECTL_TEST_KDF_N"] = "1024" }
            if let environment { variables.merge(environment) { $1 } }
            let argv = [executable] + arguments
            let envp = variables.map { "\($0.key)=\($0.value)" }
            var pid: Int32 = 0
            let rc = withCStrings(argv) { argv in
                withCStrings(envp) { envp in
                    storectl_spawn(executable, argv, envp, currentDirectory, out.file("stdout"), out.file("stderr"), &pid)
                }
            }
            guard rc == 0 else {
                throw StoreOpsError(.noInput, "cannot start \(executable): \(String(cString: strerror(rc)))")
            }
            self.pid = pid
        }

        /// What the child has printed on stdout so far.
        public var stdoutSoFar: String { (try? String(contentsOfFile: out.file("stdout"), encoding: .utf8)) ?? "" }

        /// What the child has printed on stderr so far.
        public var stderrSoFar: String { (try? String(contentsOfFile: out.file("stderr"), encoding: .utf8)) ?? "" }

        public func signal(_ number: Int32) {
            if isRunning { kill(pid, number) }
        }

        /// False once the child has exited.
        public var isRunning: Bool { status(waitingMilliseconds: 0) == nil }

        /// The child's status (its exit code, or 128 + the signal that ended it) once it has
        /// exited, waiting up to `waitingMilliseconds` (-1: no limit); nil while it runs.
        private func status(waitingMilliseconds: Int32) -> Int32? {
            if let known = reaped.withLock({ $0 }) { return known }
            var raw: Int32 = 0
            switch storectl_wait_child(pid, waitingMilliseconds, &raw) {
            case 1:
                let code = (raw & 0x7f) == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
                return reaped.withLock { value in
                    if value == nil { value = code }
                    return value
                }
            case 0:
                return nil
            default:
                // Reaped meanwhile by another thread waiting on this child: its answer.
                return reaped.withLock { $0 } ?? 255
            }
        }

        /// Waits for the child to exit. A child still running after `deadline` seconds is a hang,
        /// not a slow run: its threads' stacks are printed when `reportingHang` (so a CI log says
        /// where it hung), it is killed, and the result says so in `stderr` (status 137).
        public func wait(deadline: TimeInterval = ChildProcess.deadline, reportingHang: Bool = true) -> Result {
            var hung = false
            var code = status(waitingMilliseconds: Int32(deadline * 1000))
            if code == nil {
                hung = true
                if reportingHang {
                    TestWatchdog.report("a child ran longer than \(Int(deadline)) s: \(executable) \(arguments.joined(separator: " "))",
                                        pids: [pid])
                }
                kill(pid, SIGKILL)
                code = status(waitingMilliseconds: -1)
            }
            return Result(status: code ?? 255,
                          stdout: (try? String(contentsOfFile: out.file("stdout"), encoding: .utf8)) ?? "",
                          stderr: ((try? String(contentsOfFile: out.file("stderr"), encoding: .utf8)) ?? "")
                            + (hung ? "\n[test harness: killed after \(Int(deadline)) s]" : ""))
        }
    }

    /// Runs `body` with `strings` as a NULL-terminated array of C strings.
    static func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
        let pointers = strings.map { strdup($0) } + [nil]
        defer { for pointer in pointers { free(pointer) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }

    /// How long a child may run before the tests call it hung: `STORECTL_TEST_CHILD_DEADLINE`
    /// seconds, 600 by default (the longest child of the suite takes about 15 s).
    public static var deadline: TimeInterval {
        ProcessInfo.processInfo.environment["STORECTL_TEST_CHILD_DEADLINE"].flatMap(TimeInterval.init) ?? 600
    }

    /// Waits until `path` exists (a child's "ready" file), up to `timeout` seconds.
    public static func waitFor(file path: String, timeout: TimeInterval = 20) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if FileManager.default.fileExists(atPath: path) { return true }
            usleep(10_000)
        }
        return false
    }
}

/// The built `storectl` and `storectl-lab` executables, found beside the running test bundle
/// (or in `STORECTL_BIN_DIR`).
public enum Binaries {
    public static var directory: String {
        if let dir = ProcessInfo.processInfo.environment["STORECTL_BIN_DIR"] { return dir }
        let me = FileSystem.absolute(CommandLine.arguments[0])
        var folder = FileSystem.parent(of: me)
        // A test bundle may be a folder (…/storectlPackageTests.xctest/Contents/MacOS/…).
        while !FileManager.default.fileExists(atPath: (folder as NSString).appendingPathComponent("storectl")), folder != "/" {
            folder = FileSystem.parent(of: folder)
        }
        return folder
    }

    public static var storectl: String { (directory as NSString).appendingPathComponent("storectl") }
    public static var lab: String { (directory as NSString).appendingPathComponent("storectl-lab") }
}

/// How many snapshots the repository lists (0 when there is none): "no snapshot was taken".
public func snapshotCount(_ repository: String) -> Int {
    let password = ((repository as NSString).deletingLastPathComponent as NSString).appendingPathComponent("password")
    return (try? SnapshotSummary.list(repository: repository, password: .file(password)))?.count ?? 0
}

/// Turns a hung test run into a failed one that says where it hung. Armed by the first
/// `TempFolder` when `STORECTL_TEST_WATCHDOG` names a number of seconds (`make test` sets it):
/// when the run is still going after that long, every thread of this process and of its children
/// is printed (with gdb when it is installed, else the kernel's wait channels) and the process
/// exits with status 1. A CI job then ends with a failure and a stack, not a silent time-out.
public enum TestWatchdog {
    private static let armed: Void = {
        guard let text = ProcessInfo.processInfo.environment["STORECTL_TEST_WATCHDOG"], let seconds = Double(text), seconds > 0 else { return }
        let thread = Thread {
            Thread.sleep(forTimeInterval: seconds)
            // This process's threads, and those of its storectl children (not SeaweedFS's).
            let children = descendants(of: getpid()).filter {
                ((try? String(contentsOfFile: "/proc/\($0)/comm", encoding: .utf8)) ?? "").hasPrefix("storectl")
            }
            report("the test run is still going after \(Int(seconds)) s (STORECTL_TEST_WATCHDOG)", pids: [getpid()] + children)
            _exit(1)   // not exit: atexit handlers could wait on locks the hung threads hold
        }
        thread.stackSize = 1 << 20
        thread.start()
    }()

    public static func arm() { _ = armed }

    /// Prints `why`, the process tree, and every thread's stack of each of `pids`, on stderr.
    public static func report(_ why: String, pids: [Int32]) {
        var text = "\n=== storectl tests: \(why)\n"
        if let tree = try? ChildProcess.run("/bin/ps", ["-e", "-o", "pid,ppid,stat,etime,wchan:20,args", "--forest"]) { text += tree.stdout }
        FileHandle.standardError.write(Data(text.utf8))
        let gdb = ["/usr/bin/gdb", "/usr/local/bin/gdb"].first { FileManager.default.isExecutableFile(atPath: $0) }
        for pid in pids {
            var stacks = "=== threads of \(pid)\n"
            if let gdb, let result = try? runBriefly(gdb, ["-p", "\(pid)", "-batch", "-nx", "-ex", "set pagination off", "-ex", "thread apply all bt 30"]) {
                stacks += result
            } else {
                let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
                for task in tasks.sorted() {
                    let wchan = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/wchan", encoding: .utf8)) ?? "?"
                    let name = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8)) ?? "?"
                    stacks += "  \(task) \(name.trimmingCharacters(in: .whitespacesAndNewlines)) waits in \(wchan)\n"
                }
            }
            FileHandle.standardError.write(Data(stacks.utf8))
        }
    }

    /// gdb attached from this process (it would stop us if we waited on it without a limit).
    private static func runBriefly(_ executable: String, _ arguments: [String]) throws -> String {
        try ChildProcess.Running(executable, arguments).wait(deadline: 120, reportingHang: false).stdout
    }

    static func descendants(of root: Int32) -> [Int32] {
        var parents: [Int32: [Int32]] = [:]
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(entry),
                  let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, let parent = Int32(fields[1]) { parents[parent, default: []].append(pid) }
        }
        var found: [Int32] = []
        var queue = [root]
        while let next = queue.popLast() {
            for child in parents[next] ?? [] { found.append(child); queue.append(child) }
        }
        return found
    }
}
