import Crypto
import Foundation
import Synchronization
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Signed requests to one bucket, with retries: 5xx, 429 and S3's SlowDown/RequestTimeout,
/// timeouts and dropped connections are retried with exponential backoff and full jitter (up to
/// `settings.retries` times); a 4xx that cannot succeed is not. Every request is counted in
/// `S3Traffic`.
///
/// HTTP goes through FoundationNetworking's URLSession (libcurl underneath): it ships with the
/// toolchain, keeps connections alive, and a blocking call per request fits the repository's
/// synchronous backend, whose callers already run their transfers on their own threads.
final class S3Client: Sendable {
    let settings: S3Settings
    let bucket: String
    /// `s3://bucket/prefix`, for messages.
    let location: String
    private let session: URLSession

    struct Response: Sendable {
        var status: Int
        var headers: [String: String]
        var body: Data

        /// S3's error code (`NoSuchKey`, `SlowDown`…), from the XML body.
        var code: String? { S3XML.value("Code", in: Substring(String(decoding: body.prefix(4096), as: UTF8.self))) }
        var message: String? { S3XML.value("Message", in: Substring(String(decoding: body.prefix(4096), as: UTF8.self))) }
        var summary: String { "HTTP \(status)\(code.map { " \($0)" } ?? "")\(message.map { ": \($0)" } ?? "")" }
    }

    init(settings: S3Settings, bucket: String, location: String) {
        self.settings = settings
        self.bucket = bucket
        self.location = location
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpMaximumConnectionsPerHost = settings.parallel + 2
        configuration.timeoutIntervalForRequest = settings.timeout
        configuration.timeoutIntervalForResource = max(600, settings.timeout * 20)
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.urlCache = nil
        configuration.httpShouldSetCookies = false
        session = URLSession(configuration: configuration)
    }

    deinit { session.finishTasksAndInvalidate() }

    /// The URL path (unencoded) of an object key, or of the bucket when `key` is nil.
    func path(_ key: String?) -> String {
        let object = key ?? ""
        return settings.pathStyle ? "/\(bucket)/\(object)" : "/\(object)"
    }

    var host: String {
        let base = String(settings.endpoint.drop { $0 != ":" }.dropFirst(3))   // after "scheme://"
        return settings.pathStyle ? base : "\(bucket).\(base)"
    }

    var scheme: String { settings.endpoint.lowercased().hasPrefix("https:") ? "https" : "http" }

    /// Sends one request, retrying what may succeed later. Returns every response that is not
    /// retried (the caller reads 200, 204, 206, 404, 412…); throws 74 when the server stays
    /// unreachable, 77 for 403, 66 when the bucket does not exist.
    /// `checksum`: send the body's SHA-256 as `x-amz-checksum-sha256` too, which the server
    /// checks against what it received (the signed `x-amz-content-sha256` is not checked by every
    /// server: SeaweedFS 4.48 accepts a wrong one).
    func send(_ kind: String, method: String, key: String?, query: [(String, String)] = [], headers extra: [String: String] = [:],
              body: Data = Data(), checksum: Bool = false, what: String) throws -> Response {
        let digest = Hashing.sha256Digest(body)
        let payloadHash = body.isEmpty ? SigV4.emptyPayload : digest.map { String(format: "%02x", $0) }.joined()
        var extra = extra
        if checksum { extra["x-amz-checksum-sha256"] = digest.base64EncodedString() }
        let queryText = query.map { "\(SigV4.encode($0.0, slash: true))=\(SigV4.encode($0.1, slash: true))" }.joined(separator: "&")
        let urlText = "\(scheme)://\(host)\(SigV4.encode(path(key), slash: false))\(queryText.isEmpty ? "" : "?" + queryText)"
        guard let url = URL(string: urlText) else {
            throw StoreOpsError(.usage, "cannot make a URL of \(urlText)", hint: "check the bucket name and the endpoint")
        }
        let signer = SigV4(credentials: settings.credentials, region: settings.region)
        var attempt = 0
        var lastProblem = ""
        let started = Date()
        while true {
            var headers = extra
            headers["host"] = host
            headers["x-amz-date"] = SigV4.amzDate(Date())
            headers["x-amz-content-sha256"] = payloadHash
            if let token = settings.credentials.sessionToken { headers["x-amz-security-token"] = token }
            var request = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: settings.timeout)
            request.httpMethod = method
            for (name, value) in headers where name != "host" { request.setValue(value, forHTTPHeaderField: name) }
            request.setValue(signer.authorization(method: method, path: path(key), query: query, headers: headers, payloadHash: payloadHash),
                             forHTTPHeaderField: "Authorization")
            if !body.isEmpty { request.httpBody = body }
            let outcome = perform(request)
            S3Traffic.record(kind, sent: body.count, received: outcome.response?.body.count ?? 0, retry: attempt > 0)
            if let response = outcome.response {
                // BadDigest: the body was damaged on the way; it is sent again from memory.
                let retryable = response.status >= 500 || response.status == 429 || response.status == 408
                    || (response.status == 400 && ["RequestTimeout", "SlowDown", "BadDigest", "XAmzContentSHA256Mismatch"].contains(response.code ?? ""))
                if !retryable { return try judge(response, kind: kind, what: what) }
                lastProblem = response.summary
            } else {
                lastProblem = outcome.error ?? "no response"
            }
            attempt += 1
            guard attempt <= settings.retries else {
                throw StoreOpsError(.ioError, "repository unreachable: \(location): \(kind) \(what) failed \(Format.plural(attempt, "time", "times")) over \(String(format: "%.1f", Date().timeIntervalSince(started))) s; last: \(lastProblem) (endpoint \(settings.endpoint))",
                                    hint: "check that the endpoint is up and reachable from this host; nothing was changed in the store, and the next run cleans up what this one left")
            }
            let ceiling = min(settings.maxBackoff, settings.backoff * pow(2, Double(attempt - 1)))
            let delay = Double.random(in: 0...ceiling)
            let deadline = Date().addingTimeInterval(delay)
            while Date() < deadline {
                try ProcessSignals.checkpoint("retrying \(kind) \(what)")
                Thread.sleep(forTimeInterval: min(0.05, max(0, deadline.timeIntervalSinceNow)))
            }
        }
    }

    /// 403 and a missing bucket end the run here, with what to check.
    private func judge(_ response: Response, kind: String, what: String) throws -> Response {
        switch (response.status, response.code) {
        case (403, _):
            throw StoreOpsError(.wrongPassword, "access denied to the bucket \(bucket) (\(kind) \(what)): \(response.summary)",
                                hint: "check the credentials (from \(settings.credentialSource); or AWS_PROFILE) and that they may read and write s3://\(bucket)")
        case (404, "NoSuchBucket"):
            throw StoreOpsError(.noInput, "the bucket \(bucket) does not exist at \(settings.endpoint)",
                                hint: "create the bucket first (storectl never creates buckets), or check the name and AWS_ENDPOINT_URL_S3")
        case (301, _), (307, _):
            throw StoreOpsError(.usage, "the bucket \(bucket) answers from another endpoint or region: \(response.summary)",
                                hint: "set AWS_REGION to the bucket's region (now \(settings.region)) or AWS_ENDPOINT_URL_S3")
        default:
            return response
        }
    }

    /// How long one request may take in all before it is given up as timed out, even if the HTTP
    /// layer never answers (its own timeouts are per idle period and per resource).
    var hardLimit: TimeInterval { max(600, settings.timeout * 20) + 60 }

    private func perform(_ request: URLRequest) -> (response: Response?, error: String?) {
        let outcome = Mutex<(response: Response?, error: String?)>((nil, nil))
        let done = DispatchSemaphore(value: 0)
        let task = session.dataTask(with: request) { data, response, error in
            if let http = response as? HTTPURLResponse, error == nil {
                var headers: [String: String] = [:]
                for (name, value) in http.allHeaderFields {
                    if let name = name as? String, let value = value as? String { headers[name.lowercased()] = value }
                }
                let answer = Response(status: http.statusCode, headers: headers, body: data ?? Data())
                outcome.withLock { $0.response = answer }
            } else {
                let problem = error.map { Self.describe($0) } ?? "no HTTP response"
                outcome.withLock { $0.error = problem }
            }
            done.signal()
        }
        task.resume()
        // A request whose completion never comes must not hang the run: give it up (a retry
        // follows, or exit 74), whatever the HTTP layer does later.
        if done.wait(timeout: .now() + hardLimit) == .timedOut {
            task.cancel()
            if done.wait(timeout: .now() + 5) == .timedOut {
                return (nil, "no answer within \(Int(hardLimit)) s")
            }
        }
        return outcome.withLock { ($0.response, $0.error) }
    }

    static func describe(_ error: any Error) -> String {
        if let url = error as? URLError {
            switch url.code {
            case .timedOut: return "timed out"
            case .cannotConnectToHost: return "connection refused"
            case .networkConnectionLost: return "connection lost mid-request"
            case .cannotFindHost, .dnsLookupFailed: return "host not found"
            default: return url.localizedDescription
            }
        }
        return error.localizedDescription
    }

    /// Base64 of the body's MD5: S3 rejects a body that does not match (BadDigest).
    static func contentMD5(_ body: Data) -> String { Data(Insecure.MD5.hash(data: body)).base64EncodedString() }
}
