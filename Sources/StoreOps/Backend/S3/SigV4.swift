import Crypto
import Foundation

/// AWS Signature Version 4 for S3 requests, header-signed: the canonical request, the string to
/// sign and the signing key, as AWS's "Signature Calculations for the Authorization Header"
/// describes them. Checked against AWS's published S3 examples (`SigV4Tests`) and a real server.
///
/// The payload is always signed by its SHA-256 (`x-amz-content-sha256`), so the server rejects a
/// body changed in transit as well as a forged request.
public struct SigV4: Sendable {
    public struct Credentials: Sendable, Equatable {
        public var accessKey: String
        public var secretKey: String
        public var sessionToken: String?

        public init(accessKey: String, secretKey: String, sessionToken: String? = nil) {
            self.accessKey = accessKey
            self.secretKey = secretKey
            self.sessionToken = sessionToken
        }
    }

    public var credentials: Credentials
    public var region: String
    public var service = "s3"

    public init(credentials: Credentials, region: String) {
        self.credentials = credentials
        self.region = region
    }

    /// SHA-256 of an empty body, hex.
    public static let emptyPayload = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// `20130524T000000Z`.
    public static func amzDate(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        return String(format: "%04d%02d%02dT%02d%02d%02dZ", c.year ?? 0, c.month ?? 0, c.day ?? 0, c.hour ?? 0, c.minute ?? 0, c.second ?? 0)
    }

    /// The Authorization header's value for a request. `headers` must hold every header to be
    /// signed, `host`, `x-amz-date` and `x-amz-content-sha256` among them; `path` is the
    /// request's path before encoding (`/bucket/key`).
    public func authorization(method: String, path: String, query: [(String, String)], headers: [String: String],
                              payloadHash: String) -> String {
        let (signed, scope, signature) = sign(method: method, path: path, query: query, headers: headers, payloadHash: payloadHash)
        return "AWS4-HMAC-SHA256 Credential=\(credentials.accessKey)/\(scope),SignedHeaders=\(signed),Signature=\(signature)"
    }

    func credentialScope(date: String) -> String { "\(date.prefix(8))/\(region)/\(service)/aws4_request" }

    /// (signed header names, credential scope, signature hex).
    func sign(method: String, path: String, query: [(String, String)], headers: [String: String],
              payloadHash: String) -> (String, String, String) {
        let canonical = canonicalRequest(method: method, path: path, query: query, headers: headers, payloadHash: payloadHash)
        let amzDate = headers.first { $0.key.lowercased() == "x-amz-date" }?.value ?? ""
        let scope = credentialScope(date: amzDate)
        let toSign = ["AWS4-HMAC-SHA256", amzDate, scope,
                      Hashing.sha256(Data(canonical.request.utf8))].joined(separator: "\n")
        var key = SymmetricKey(data: Data("AWS4\(credentials.secretKey)".utf8))
        for part in [String(amzDate.prefix(8)), region, service, "aws4_request"] {
            key = SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(part.utf8), using: key)))
        }
        let signature = HMAC<SHA256>.authenticationCode(for: Data(toSign.utf8), using: key)
        return (canonical.signedHeaders, scope, signature.map { String(format: "%02x", $0) }.joined())
    }

    func canonicalRequest(method: String, path: String, query: [(String, String)], headers: [String: String],
                          payloadHash: String) -> (request: String, signedHeaders: String) {
        var pairs: [(name: String, value: String)] = []
        for (name, value) in query { pairs.append((Self.encode(name, slash: true), Self.encode(value, slash: true))) }
        pairs.sort { (a: (name: String, value: String), b: (name: String, value: String)) -> Bool in
            a.name == b.name ? a.value < b.value : a.name < b.name
        }
        let canonicalQuery = pairs.map { (pair: (name: String, value: String)) -> String in pair.name + "=" + pair.value }.joined(separator: "&")
        let normalized = headers.map { (key: $0.key.lowercased(), value: Self.trim($0.value)) }.sorted { $0.key < $1.key }
        let canonicalHeaders = normalized.map { "\($0.key):\($0.value)\n" }.joined()
        let signedHeaders = normalized.map(\.key).joined(separator: ";")
        let request = [method, Self.encode(path, slash: false), canonicalQuery, canonicalHeaders, signedHeaders, payloadHash]
            .joined(separator: "\n")
        return (request, signedHeaders)
    }

    /// URI-encodes as SigV4 wants: every byte but A-Z a-z 0-9 - . _ ~ as %XX (upper-case hex);
    /// `/` kept in paths (`slash: false`), encoded in query names and values.
    public static func encode(_ text: String, slash: Bool) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(Character(UnicodeScalar(byte)))
            case UInt8(ascii: "/") where !slash:
                out.append("/")
            default:
                out += String(format: "%%%02X", byte)
            }
        }
        return out
    }

    /// Header values: leading and trailing spaces removed, runs of spaces made one.
    static func trim(_ value: String) -> String {
        value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
    }
}
