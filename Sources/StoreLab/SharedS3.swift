import Foundation
import StoreOps
import Synchronization

/// Where a test's repository lives: a local folder, or a prefix of a bucket on the shared
/// SeaweedFS server. The repository tests run on both.
public enum Place: String, Sendable, CaseIterable, CustomStringConvertible {
    case local, s3
    public var description: String { rawValue }

    /// Both when SeaweedFS is installed (`make test` installs it and sets STORECTL_REQUIRE_S3=1,
    /// so a missing server fails there instead of skipping).
    public static let all: [Place] = SharedS3.wanted ? [.local, .s3] : [.local]
}

/// One SeaweedFS server for the whole test run, one bucket, a new prefix per repository (as a
/// fleet shares a bucket). Its credentials and endpoint go into `S3Settings.overrides`, which the
/// library reads over the environment, as it reads the environment in production.
public enum SharedS3 {
    public static let bucket = "storectl-tests"
    public static var wanted: Bool { SeaweedServer.isAvailable || ProcessInfo.processInfo.environment["STORECTL_REQUIRE_S3"] == "1" }

    static let started: Result<SeaweedServer, any Error> = Result {
        let server = try SeaweedServer()
        // Not setenv: other threads read the environment meanwhile (spawning children), and
        // glibc's setenv may move it under them.
        S3Settings.overrides.withLock { $0.merge(settings(server)) { $1 } }
        try server.createBucket(bucket)
        running.withLock { $0 = server }
        return server
    }

    /// The server once started: stopped at the process's exit (its data folder is removed after).
    private static let running = Mutex<SeaweedServer?>(nil)

    /// Stops the shared server, if one was started, and removes the run's index cache.
    static func stopAtExit() {
        running.withLock { $0 }?.stop()
        try? FileManager.default.removeItem(atPath: cacheFolder)
    }

    /// The index cache of every test run's storectl (not the home folder's).
    public static let cacheFolder = (NSTemporaryDirectory() as NSString).appendingPathComponent("storectl-test-cache-\(getpid())")

    public static func server() throws -> SeaweedServer { try started.get() }

    /// `s3://storectl-tests/<new prefix>`.
    public static func newLocation(_ label: String = "repo") throws -> String {
        _ = try server()
        return "s3://\(bucket)/\(label)-\(UUID().uuidString.prefix(12).lowercased())"
    }

    /// Starts `Tests/tools/s3-fault-proxy.py` in front of the shared server with `options`
    /// (`--slowdown P --cut P --lost P --corrupt P --seed N --tls CA`); returns it (the caller
    /// stops it: SIGKILL, then wait) and the port it listens on.
    public static func startFaultProxy(_ options: [String]) throws -> (proxy: ChildProcess.Running, port: String) {
        let server = try server()
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Tests/tools/s3-fault-proxy.py").path
        let proxy = try ChildProcess.Running("/usr/bin/python3", [script, "\(server.port)"] + options)
        var port = ""
        let deadline = Date().addingTimeInterval(10)
        while port.isEmpty, Date() < deadline {
            port = proxy.stdoutSoFar.trimmingCharacters(in: .whitespacesAndNewlines)
            Thread.sleep(forTimeInterval: 0.05)
        }
        guard !port.isEmpty else {
            proxy.signal(SIGKILL)
            _ = proxy.wait()
            throw StoreOpsError(.failure, "the fault proxy did not start (\(script))")
        }
        return (proxy, port)
    }

    /// What a storectl child process needs to reach the server.
    public static func environment() throws -> [String: String] { settings(try server()) }

    /// The server's credentials and endpoint, fewer retries, and the run's index cache.
    private static func settings(_ server: SeaweedServer) -> [String: String] {
        server.environment().merging(["STORECTL_S3_RETRIES": "3", "STORECTL_CACHE_DIR": cacheFolder]) { $1 }
    }
}
