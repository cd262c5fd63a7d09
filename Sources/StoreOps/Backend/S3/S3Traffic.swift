import Foundation
import Synchronization

/// What this run asked of S3: requests by kind (GET, PUT, HEAD, LIST, DELETE and the multipart
/// steps), retries, and bytes sent and received. `--json` reports it with every command that
/// reached a bucket; the benchmark prints it.
public struct S3Traffic: Codable, Sendable, Equatable {
    public var requests: [String: Int] = [:]
    public var retries = 0
    public var bytesSent: UInt64 = 0
    public var bytesReceived: UInt64 = 0
    /// Index objects and snapshot records read from the local cache instead of the bucket.
    public var cachedReads = 0

    public var totalRequests: Int { requests.values.reduce(0, +) }

    private static let current = Mutex(S3Traffic())

    /// This process's traffic so far, or nil when it never reached S3.
    public static func sinceStart() -> S3Traffic? {
        let value = current.withLock { $0 }
        return value.requests.isEmpty && value.cachedReads == 0 ? nil : value
    }

    static func cacheHit() { current.withLock { $0.cachedReads += 1 } }

    static func record(_ kind: String, sent: Int, received: Int, retry: Bool) {
        current.withLock {
            $0.requests[kind, default: 0] += 1
            $0.bytesSent += UInt64(sent)
            $0.bytesReceived += UInt64(received)
            if retry { $0.retries += 1 }
        }
    }
}
