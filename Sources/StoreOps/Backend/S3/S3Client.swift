import CHTTP
import Crypto
import Foundation
import Synchronization

/// Signed requests to one bucket, with retries: 5xx, 429 and S3's SlowDown/RequestTimeout,
/// timeouts and dropped connections are retried with exponential backoff and full jitter (up to
/// `settings.retries` times); a 4xx that cannot succeed is not. Every request is counted in
/// `S3Traffic`.
///
/// HTTP goes through libcurl's easy interface (`CHTTP`), one blocking call per request on the
/// caller's thread: the repository's backend is synchronous and its callers already run their
/// transfers on threads of their own. Bodies go out from the caller's memory and come back in
/// one buffer; idle handles (and so their open connections) are kept for the next request.
/// (FoundationNetworking's URLSession, used before, drives the same libcurl through its multi
/// interface on a dispatch event loop, at about 3.5 s more CPU per GiB uploaded.)
final class S3Client: Sendable {
    let settings: S3Settings
    let bucket: String
    /// `s3://bucket/prefix`, for messages.
    let location: String
    private let handles: HandlePool
    /// Since when the endpoint has answered no request of this client. Shared by every request,
    /// parallel ones included, so that together they give up within `settings.deadline` of the
    /// last answer, not each after its own retries (or its own timeout: an attempt that starts
    /// while another has waited 10 s for an answer gets the deadline's rest, not all of it).
    private let silence = Mutex(Silence())

    struct Silence {
        /// Since when the attempts that failed since the last answer had waited: the earliest
        /// (nil: none failed).
        var failedSince: Date?
        /// When each attempt in flight started waiting (its start, or the last answer after it).
        var waiting: [Int: Date] = [:]
        var nextAttempt = 0
        /// When any transfer last moved a byte (libcurl's process-wide record; a test gives its own).
        var movedAt: @Sendable () -> Date? = Silence.lastMoved

        /// Since when nothing was answered, as far as the attempts failed or in flight show. An
        /// attempt in flight waits only since any transfer last moved a byte (a long upload's
        /// bytes flowing, or an answer's, show the endpoint alive).
        func since(_ now: Date) -> Date? {
            let inFlight = waiting.values.min().map(sinceMoved)
            return [failedSince, inFlight].compactMap { $0 }.min().map { min($0, now) }
        }
        /// `start`, or when a transfer last moved a byte, whichever is later.
        func sinceMoved(_ start: Date) -> Date {
            movedAt().map { max(start, $0) } ?? start
        }
        @Sendable static func lastMoved() -> Date? {
            let moved = storectl_http_moved_at()
            return moved > 0 ? Date(timeIntervalSince1970: Double(moved) / 1000) : nil
        }
        mutating func start(_ now: Date) -> Int {
            nextAttempt += 1
            waiting[nextAttempt] = now
            return nextAttempt
        }
        /// An answer: nothing has been waiting longer than since now.
        mutating func answered(_ attempt: Int, _ now: Date) {
            waiting[attempt] = nil
            failedSince = nil
            for key in waiting.keys { waiting[key] = now }
        }
        /// An attempt that got no answer: silent since it began, or since its (or any) bytes last
        /// moved (an upload that streamed for minutes, then lost its connection). The earliest of
        /// the failed attempts counts, whatever order they failed in: a short attempt started
        /// late (given the deadline's rest) often fails before the long one started first.
        mutating func failed(_ attempt: Int) {
            if let waited = waiting[attempt].map(sinceMoved) { failedSince = min(failedSince ?? waited, waited) }
            waiting[attempt] = nil
        }
    }

    struct Response: Sendable {
        var status: Int
        var headers: [String: String]
        var body: Data

        /// S3's error code (`NoSuchKey`, `SlowDown`…), from the XML body.
        var code: String? { S3XML.value("Code", in: Substring(String(decoding: body.prefix(4096), as: UTF8.self))) }
        var message: String? { S3XML.value("Message", in: Substring(String(decoding: body.prefix(4096), as: UTF8.self))) }
        var summary: String { "HTTP \(status)\(code.map { " \($0)" } ?? "")\(message.map { ": \($0)" } ?? "")" }
    }

    /// When a stopping process must be done (`ProcessSignals.finishBy`; a test gives its own).
    private let finishBy: @Sendable () -> Date?

    init(settings: S3Settings, bucket: String, location: String, finishBy: @escaping @Sendable () -> Date? = { ProcessSignals.finishBy }) {
        self.settings = settings
        self.bucket = bucket
        self.location = location
        self.finishBy = finishBy
        handles = HandlePool(keep: settings.parallel + 2)
    }

    /// Since when the endpoint has answered nothing, as the attempts failed or in flight show
    /// (nil: nothing is waiting and nothing failed since the last answer).
    var silentSince: Date? { silence.withLock { $0.since(Date()) } }

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
        // libcurl is loaded by the first request: without it no request can be made, so none is tried.
        if let unavailable = storectl_http_unavailable() {
            throw StoreOpsError(.failure, "\(what): \(String(cString: unavailable))")
        }
        let digest = Hashing.sha256Digest(body)
        let payloadHash = body.isEmpty ? SigV4.emptyPayload : digest.map { String(format: "%02x", $0) }.joined()
        var extra = extra
        if checksum { extra["x-amz-checksum-sha256"] = digest.base64EncodedString() }
        let queryText = query.map { "\(SigV4.encode($0.0, slash: true))=\(SigV4.encode($0.1, slash: true))" }.joined(separator: "&")
        let url = "\(scheme)://\(host)\(SigV4.encode(path(key), slash: false))\(queryText.isEmpty ? "" : "?" + queryText)"
        guard URL(string: url) != nil, !url.utf8.contains(where: { $0 < 0x21 || $0 == 0x7f }) else {
            throw StoreOpsError(.usage, "cannot make a URL of \(url)", hint: "check the bucket name and the endpoint")
        }
        let signer = SigV4(credentials: settings.credentials, region: settings.region)
        var attempt = 0
        var lastProblem = ""
        let started = Date()
        while true {
            let attemptStarted = Date()
            // No byte for `timeout` ends an attempt; within the deadline's rest, so the last attempt
            // does not run past it.
            let silent = silence.withLock { $0.since(attemptStarted) }.map { attemptStarted.timeIntervalSince($0) } ?? 0
            var idle = settings.deadline > 0 ? max(1, min(settings.timeout, settings.deadline - silent)) : settings.timeout
            if ProcessSignals.received != nil, !ProcessSignals.drains {
                // Stopping on a signal: what runs now is clean-up (a lock given back), worth a
                // few seconds, not a full timeout against a server that answers nothing.
                idle = min(idle, 3)
            }
            if let finishBy = finishBy() {
                // The stop's time has come: no new attempt (each would wait out its timeout).
                guard finishBy.timeIntervalSinceNow > 0 else {
                    throw StoreOpsError(.unreachable, "repository unreachable: \(location): \(kind) \(what) not tried: the process is stopping"
                                        + (lastProblem.isEmpty ? "" : "; last: \(lastProblem)") + " (endpoint \(settings.endpoint))")
                }
                idle = max(1, min(idle, finishBy.timeIntervalSinceNow))
            }
            let lines = signedHeaders(extra, signer: signer, method: method, key: key, query: query, payloadHash: payloadHash)
            // In flight from here (nothing between this and the outcome below throws).
            let attemptID = silence.withLock { $0.start(attemptStarted) }
            let outcome = perform(method: method, url: url, headers: lines, body: body, idle: idle)
            if case .answered = outcome { silence.withLock { $0.answered(attemptID, Date()) } } else {
                silence.withLock { $0.failed(attemptID) }
            }
            S3Traffic.record(kind, sent: body.count, received: outcome.response?.body.count ?? 0, retry: attempt > 0)
            switch outcome {
            case .answered(let response):
                // BadDigest: the body was damaged on the way; it is sent again from memory.
                // 409 ConditionalRequestConflict: another conditional write of the key is in flight.
                let retryable = response.status >= 500 || response.status == 429 || response.status == 408
                    || (response.status == 409 && response.code == "ConditionalRequestConflict")
                    || (response.status == 400 && ["RequestTimeout", "SlowDown", "BadDigest", "XAmzContentSHA256Mismatch"].contains(response.code ?? ""))
                if !retryable { return try judge(response, kind: kind, what: what) }
                lastProblem = response.summary
            case .failed(let problem):
                // An https endpoint whose server speaks plain HTTP: OpenSSL reads its HTTP answer as
                // a TLS record ("wrong version number", "packet length too long"). No retry changes that.
                if url.hasPrefix("https://"), problem.contains("wrong version number") || problem.contains("packet length too long") {
                    throw StoreOpsError(.unreachable, "repository unreachable: \(location): \(kind) \(what): the endpoint \(settings.endpoint) does not speak TLS (\(problem))",
                                        hint: "if the server serves plain HTTP, give the endpoint as http://… (AWS_ENDPOINT_URL_S3, or endpoint_url in the profile)")
                }
                lastProblem = problem
            case .untrusted(let problem):
                // A certificate that is not trusted stays untrusted: no retry.
                throw StoreOpsError(.unreachable, "repository unreachable: \(location): \(kind) \(what): \(problem) (endpoint \(settings.endpoint))",
                                    hint: "if the endpoint's certificate is signed by a CA of your own, set AWS_CA_BUNDLE (or ca_bundle in the profile) to a PEM file of it")
            case .tooLarge:
                throw StoreOpsError(.badData, "\(location): the answer to \(kind) \(what) is over \(Format.bytes(settings.maxAnswer)), larger than any object storectl writes",
                                    hint: "check --repo: the prefix may hold objects that are not a storectl repository")
            }
            attempt += 1
            try waitBeforeRetry(attempt: attempt, started: started, lastProblem: lastProblem, kind: kind, what: what)
        }
    }

    /// The request's header lines, signed (SigV4), at this attempt's time.
    private func signedHeaders(_ extra: [String: String], signer: SigV4, method: String, key: String?, query: [(String, String)],
                               payloadHash: String) -> [String] {
        var headers = extra
        headers["host"] = host
        headers["x-amz-date"] = SigV4.amzDate(Date())
        headers["x-amz-content-sha256"] = payloadHash
        if let token = settings.credentials.sessionToken { headers["x-amz-security-token"] = token }
        var lines = headers.filter { $0.key != "host" }.map { "\($0.key): \($0.value)" }
        lines.append("Authorization: " + signer.authorization(method: method, path: path(key), query: query, headers: headers, payloadHash: payloadHash))
        return lines
    }

    /// Sleeps a jittered exponential backoff before attempt `attempt + 1`, or throws 74 when the
    /// retries or the deadline are spent.
    private func waitBeforeRetry(attempt: Int, started: Date, lastProblem: String, kind: String, what: String) throws {
        // Stopping on a signal (no drain): no second attempt.
        if !ProcessSignals.drains { try ProcessSignals.checkpoint("\(kind) \(what) (last: \(lastProblem))") }
        let ceiling = min(settings.maxBackoff, settings.backoff * pow(2, Double(attempt - 1)))
        let delay = Double.random(in: 0...ceiling)
        let now = Date()
        let silentFor = silence.withLock { $0.since(now) }.map { now.timeIntervalSince($0) } ?? 0
        let pastDeadline = settings.deadline > 0 && silentFor + delay >= settings.deadline
        if let finishBy = ProcessSignals.finishBy, Date().addingTimeInterval(delay) >= finishBy {
            throw StoreOpsError(.unreachable, "repository unreachable: \(location): \(kind) \(what) failed \(Format.plural(attempt, "time", "times")); not tried again: the process is stopping; last: \(lastProblem) (endpoint \(settings.endpoint))")
        }
        guard attempt <= settings.retries, !pastDeadline else {
            // A server that answers every try with SlowDown (or 429, 503) is reachable and asks
            // for fewer requests: said so (it read "check that the endpoint is up", a trial).
            if lastProblem.contains("SlowDown") || lastProblem.hasPrefix("HTTP 429") || lastProblem.hasPrefix("HTTP 503") {
                throw StoreOpsError(.unreachable, "repository busy: \(location): \(kind) \(what) was refused \(Format.plural(attempt, "time", "times")) in \(String(format: "%.1f", Date().timeIntervalSince(started))) s by a server asking for fewer requests; last: \(lastProblem) (endpoint \(settings.endpoint))",
                                    hint: "try again later, or send fewer requests and wait longer between tries (STORECTL_S3_PARALLEL lower, STORECTL_S3_RETRIES and STORECTL_S3_BACKOFF_MS higher)"
                                        + (["GET", "HEAD", "LIST"].contains(kind) ? "; nothing was changed by this read" : "; a write whose answer never came may still be stored: prune once the endpoint answers again"))
            }
            // Both figures are wall time: this request's attempts, and how long the endpoint has
            // answered nothing at all (any request of this run).
            // The next try's wait would have passed the deadline: said so, not as if it had come.
            let why = !pastDeadline ? "" : silentFor >= settings.deadline
                ? "; no answer from the endpoint for \(String(format: "%.1f", silentFor)) s (deadline \(Format.duration(settings.deadline)), STORECTL_S3_DEADLINE)"
                : "; no answer from the endpoint for \(String(format: "%.1f", silentFor)) s, and the next try would come after the deadline (\(Format.duration(settings.deadline)), STORECTL_S3_DEADLINE)"
            throw StoreOpsError(.unreachable, "repository unreachable: \(location): \(kind) \(what) failed \(Format.plural(attempt, "time", "times")) in \(String(format: "%.1f", Date().timeIntervalSince(started))) s\(why); last: \(lastProblem) (endpoint \(settings.endpoint))",
                                hint: "check that the endpoint is up and reachable from this host"
                                    // Said of a write only: a restore's failed GET left nothing (a drill found it alarming mid-incident).
                                    + (["GET", "HEAD", "LIST"].contains(kind) ? "; nothing was changed by this read" : "; a write whose answer never came may still be stored when the server catches up (a snapshot record landing late needs the packs a prune would take meanwhile): prune once the endpoint answers again and `snapshot list` shows what landed; what names no snapshot then, prune removes"))
        }
        let deadline = Date().addingTimeInterval(delay)
        while Date() < deadline {
            try ProcessSignals.checkpoint("retrying \(kind) \(what)")
            Thread.sleep(forTimeInterval: min(0.05, max(0, deadline.timeIntervalSinceNow)))
        }
    }

    /// 403 and a missing bucket end the run here, with what to check.
    private func judge(_ response: Response, kind: String, what: String) throws -> Response {
        switch (response.status, response.code) {
        case (403, _):
            throw StoreOpsError(.wrongPassword, "access denied to the bucket \(bucket) (\(kind) \(what)): \(response.summary)",
                                hint: "check the credentials (from \(settings.credentialSource); or AWS_PROFILE), that they may read and write s3://\(bucket)"
                                    + (response.code == "SignatureDoesNotMatch" || response.code == "AuthorizationHeaderMalformed"
                                        ? ", and the region (AWS_REGION, now \(settings.region)): a request signed for another region is refused too" : ""))
        case (400, "AuthorizationHeaderMalformed"):
            throw StoreOpsError(.wrongPassword, "the bucket \(bucket) refused the request's signature (\(kind) \(what)): \(response.summary)",
                                hint: "set AWS_REGION to the bucket's region (now \(settings.region)), or check the credentials (from \(settings.credentialSource))")
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

    /// How long one request may take in all before it is given up as timed out (each request
    /// is also given up when no byte moves for `settings.timeout`).
    var hardLimit: TimeInterval { max(600, settings.timeout * 20) + 60 }

    enum Outcome {
        case answered(Response)
        /// No answer; retried.
        case failed(String)
        /// The endpoint's certificate is not trusted; not retried.
        case untrusted(String)
        /// The answer grew past `settings.maxAnswer`; not retried.
        case tooLarge

        var response: Response? { if case .answered(let response) = self { response } else { nil } }
    }

    private func perform(method: String, url: String, headers: [String], body: Data, idle: TimeInterval) -> Outcome {
        let handle = handles.take()
        defer { handles.give(handle) }
        var out = storectl_http_response()
        defer { storectl_http_response_free(&out) }
        let code: Int32 = withCStrings(headers) { lines in
            body.withUnsafeBytes { bytes in
                storectl_http_perform(handle, method, url, lines, lines.count, bytes.baseAddress, bytes.count,
                                      Int((idle * 1000).rounded(.up)), Int(hardLimit * 1000), settings.caBundle, settings.maxAnswer, &out)
            }
        }
        guard code == Int32(STORECTL_HTTP_OK), out.status > 0 else {
            let detail = withUnsafeBytes(of: out.error) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            switch Int(code) {
            case Int(STORECTL_HTTP_TLS): return .untrusted(Self.describe(code: code, detail: detail))
            case Int(STORECTL_HTTP_TOO_LARGE): return .tooLarge
            default: return .failed(Self.describe(code: code, detail: detail))
            }
        }
        var fields: [String: String] = [:]
        if let text = out.headers {
            for line in String(decoding: UnsafeRawBufferPointer(start: text, count: out.headers_length), as: UTF8.self).split(separator: "\r\n") {
                guard let colon = line.firstIndex(of: ":") else { continue }
                fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
        }
        // The body's buffer becomes the Data, without a copy.
        var data = Data()
        if let bytes = out.body, out.body_length > 0 {
            data = Data(bytesNoCopy: bytes, count: out.body_length, deallocator: .free)
            out.body = nil
        }
        return .answered(Response(status: out.status, headers: fields, body: data))
    }

    static func describe(code: Int32, detail: String) -> String {
        switch Int(code) {
        case Int(STORECTL_HTTP_TIMED_OUT): return "timed out (\(detail))"
        case Int(STORECTL_HTTP_REFUSED): return "connection refused"
        case Int(STORECTL_HTTP_CONNECTION_LOST): return "connection lost mid-request (\(detail))"
        case Int(STORECTL_HTTP_HOST_NOT_FOUND): return "host not found (\(detail))"
        case Int(STORECTL_HTTP_TLS): return "TLS: the server's certificate is not trusted: \(detail)"
        default: return detail.isEmpty ? "no HTTP response" : detail
        }
    }

    /// Base64 of the body's MD5: S3 rejects a body that does not match (BadDigest).
    static func contentMD5(_ body: Data) -> String { Data(Insecure.MD5.hash(data: body)).base64EncodedString() }
}

/// Idle libcurl handles: a request takes one (or makes one) and gives it back, so connections
/// stay open between requests; at most `keep` are kept.
private final class HandlePool: Sendable {
    /// A libcurl easy handle, used by one thread at a time (the pool hands each out once).
    private struct Handle: @unchecked Sendable { let raw: UnsafeMutableRawPointer }
    private let idle = Mutex<[Handle]>([])
    private let keep: Int

    init(keep: Int) { self.keep = keep }

    deinit { idle.withLock { $0.forEach { storectl_http_free($0.raw) } } }

    /// A handle; nil only when libcurl cannot make one (the request then fails and is retried).
    func take() -> UnsafeMutableRawPointer? {
        if let handle = idle.withLock({ $0.popLast() }) { return handle.raw }
        return storectl_http_new()
    }

    func give(_ raw: UnsafeMutableRawPointer?) {
        guard let raw else { return }
        let kept = idle.withLock { list -> Bool in
            guard list.count < keep else { return false }
            list.append(Handle(raw: raw))
            return true
        }
        if !kept { storectl_http_free(raw) }
    }
}

/// Calls `body` with the strings as a C array of NUL-terminated strings.
private func withCStrings<R>(_ strings: [String], _ body: ([UnsafePointer<CChar>?]) -> R) -> R {
    let copies = strings.map { strdup($0) }
    defer { copies.forEach { free($0) } }
    return body(copies.map { UnsafePointer($0) })
}
