import Foundation
import Testing
@testable import StoreOps

/// The silence every request of a client shares (`S3Client.Silence`): how long the endpoint has
/// answered nothing, which shortens each attempt's wait toward the deadline. An attempt counts
/// only once it is sent.
@Suite("S3: the shared silence of a client's requests")
struct S3SilenceTests {
    /// A loopback port nothing listens on (bound, then closed): connections to it are refused at once.
    func closedPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(fd >= 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        #expect(bound)
        return Int(UInt16(bigEndian: address.sin_port))
    }

    func client(port: Int, finishBy: @escaping @Sendable () -> Date?) -> S3Client {
        var settings = S3Settings(credentials: .init(accessKey: "test", secretKey: "test"), credentialSource: "test", region: "us-east-1",
                                  endpoint: "http://127.0.0.1:\(port)", pathStyle: true, parallel: 1, retries: 0, timeout: 5,
                                  multipartThreshold: 0, partSize: 0)
        settings.backoff = 0.01
        return S3Client(settings: settings, bucket: "bucket", location: "s3://bucket", finishBy: finishBy)
    }

    @Test("a request refused because the process is stopping was never sent: it leaves the client's silence as it was (it stayed counted as in flight, and every later request got a 1 s timeout after a quiet spell); one sent and refused by the endpoint counts from when it was sent")
    func refusedBeforeSending() throws {
        let port = try closedPort()
        let stopping = client(port: port, finishBy: { Date().addingTimeInterval(-1) })
        #expect(stopping.silentSince == nil)
        do {
            _ = try stopping.send("GET", method: "GET", key: "k", what: "k")
            Issue.record("a request was tried by a process past its stop")
        } catch let error as StoreOpsError {
            #expect(error.status.rawValue == 74 && error.message.contains("not tried: the process is stopping"), "\(error.message)")
        }
        #expect(stopping.silentSince == nil, "a request never sent counts as waiting since \(String(describing: stopping.silentSince))")

        let running = client(port: port, finishBy: { nil })
        let before = Date()
        #expect(throws: StoreOpsError.self) { _ = try running.send("GET", method: "GET", key: "k", what: "k") }
        let since = try #require(running.silentSince)
        #expect(since >= before.addingTimeInterval(-0.001) && since <= Date(), "\(since) vs \(before)")
    }

    @Test("the silence is the earliest failed attempt's wait, in whatever order they fail: a short attempt started late (given the deadline's rest) that fails before the long one started first does not move the silence later (CI: the first thread retried and ended 7.08 s in with a 4 s deadline)")
    func earliestFailedAttemptCounts() {
        let zero = Date(timeIntervalSince1970: 1_000_000)
        var silence = S3Client.Silence()
        silence.movedAt = { nil }
        let first = silence.start(zero)
        let second = silence.start(zero.addingTimeInterval(2.5))
        #expect(silence.since(zero.addingTimeInterval(3)) == zero)
        silence.failed(second)   // its 1.5 s ran out first
        #expect(silence.since(zero.addingTimeInterval(4.5)) == zero, "the first attempt still waits since 0")
        silence.failed(first)
        #expect(silence.since(zero.addingTimeInterval(5)) == zero, "silent since \(String(describing: silence.since(zero.addingTimeInterval(5)))), not since 0")
        // Bytes that moved after an attempt began: that attempt waits only since then.
        var moving = S3Client.Silence()
        moving.movedAt = { zero.addingTimeInterval(1) }
        let waiting = moving.start(zero)
        #expect(moving.since(zero.addingTimeInterval(2)) == zero.addingTimeInterval(1))
        moving.failed(waiting)
        #expect(moving.failedSince == zero.addingTimeInterval(1))
        // An answer ends the silence; an attempt still in flight waits from the answer on.
        let later = moving.start(zero.addingTimeInterval(2))
        let answered = moving.start(zero.addingTimeInterval(2))
        moving.movedAt = { nil }
        moving.answered(answered, zero.addingTimeInterval(3))
        #expect(moving.failedSince == nil && moving.since(zero.addingTimeInterval(4)) == zero.addingTimeInterval(3))
        moving.failed(later)
        #expect(moving.since(zero.addingTimeInterval(5)) == zero.addingTimeInterval(3))
    }

    @Test("an https endpoint whose server speaks plain HTTP fails at once, saying so and naming http:// (a trial: it was retried for the whole deadline as if the server were down)")
    func httpsAgainstPlainHTTP() throws {
        // A plain-HTTP server on loopback: every connection gets an HTTP answer, whatever it sent.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(fd >= 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        } && listen(fd, 8) == 0
        #expect(listening)
        let port = Int(UInt16(bigEndian: address.sin_port))
        let server = Thread {
            while true {
                let connection = accept(fd, nil, nil)
                guard connection >= 0 else { return }
                var buffer = [UInt8](repeating: 0, count: 4096)
                _ = read(connection, &buffer, buffer.count)
                let answer = Array("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8)
                _ = write(connection, answer, answer.count)
                close(connection)
            }
        }
        server.start()
        defer { shutdown(fd, Int32(SHUT_RDWR)); close(fd) }

        var settings = S3Settings(credentials: .init(accessKey: "test", secretKey: "test"), credentialSource: "test", region: "us-east-1",
                                  endpoint: "https://127.0.0.1:\(port)", pathStyle: true, parallel: 1, retries: 6, timeout: 5,
                                  multipartThreshold: 0, partSize: 0)
        settings.backoff = 0.5
        let client = S3Client(settings: settings, bucket: "bucket", location: "s3://bucket", finishBy: { nil })
        let started = Date()
        do {
            _ = try client.send("GET", method: "GET", key: "k", what: "k")
            Issue.record("a request to a plain-HTTP server over https succeeded")
        } catch let error as StoreOpsError {
            #expect(error.status.rawValue == 74 && error.message.contains("does not speak TLS") && (error.hint ?? "").contains("http://"),
                    "\(error.message) / \(error.hint ?? "")")
        }
        #expect(Date().timeIntervalSince(started) < 2, "retried for \(Date().timeIntervalSince(started)) s")
    }
}
