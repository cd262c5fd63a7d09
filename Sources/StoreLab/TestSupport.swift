import Foundation
import StoreOps

/// A temporary folder, removed when the value goes away.
public final class TempFolder: @unchecked Sendable {
    public let path: String

    public init(_ label: String = "storectl-test") throws {
        let base = (NSTemporaryDirectory() as NSString).appendingPathComponent("\(label)-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        path = FileSystem.absolute(base)
    }

    public func file(_ name: String) -> String { (path as NSString).appendingPathComponent(name) }

    /// A new snapshot repository in the folder (`storectl repo init`): format 1, or format 2
    /// encrypted with the password in `password` (a file written beside it; scrypt's cost lowered
    /// to keep tests fast) or plain.
    public func repository(_ name: String = "repo", format: Int = 1, encrypted: Bool = true) throws -> String {
        var options = RepositoryInit.Options(location: file(name), format: format, encrypted: encrypted,
                                             password: .file(try passwordFile()))
        options.kdfN = 1 << 10
        return try RepositoryInit.run(options).location
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

    deinit { try? FileManager.default.removeItem(atPath: path) }
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
    public final class Running: @unchecked Sendable {
        public let process = Process()
        private let out: TempFolder

        public init(_ executable: String, _ arguments: [String], environment: [String: String]? = nil,
                    currentDirectory: String? = nil) throws {
            out = try TempFolder("storectl-child")
            _ = FileManager.default.createFile(atPath: out.file("stdout"), contents: nil)
            _ = FileManager.default.createFile(atPath: out.file("stderr"), contents: nil)
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
            if let environment {
                process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
            }
            if let currentDirectory { process.currentDirectoryURL = URL(fileURLWithPath: currentDirectory) }
            process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out.file("stdout")))
            process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: out.file("stderr")))
            process.standardInput = FileHandle.nullDevice
            try process.run()
        }

        public var pid: Int32 { process.processIdentifier }

        /// What the child has printed on stdout so far.
        public var stdoutSoFar: String { (try? String(contentsOfFile: out.file("stdout"), encoding: .utf8)) ?? "" }

        public func signal(_ number: Int32) { kill(process.processIdentifier, number) }

        public func wait() -> Result {
            process.waitUntilExit()
            let status = process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
            return Result(status: status,
                          stdout: (try? String(contentsOfFile: out.file("stdout"), encoding: .utf8)) ?? "",
                          stderr: (try? String(contentsOfFile: out.file("stderr"), encoding: .utf8)) ?? "")
        }
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
