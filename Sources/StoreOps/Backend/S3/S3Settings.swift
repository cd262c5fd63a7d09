import Foundation
import Synchronization

/// Where an `s3://` repository lives and how to reach it, read the way AWS's own tools read it:
/// environment first (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
/// `AWS_REGION`/`AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL_S3`/`AWS_ENDPOINT_URL`), then the profile
/// (`AWS_PROFILE`, else `default`) in `~/.aws/credentials` and `~/.aws/config` (or
/// `AWS_SHARED_CREDENTIALS_FILE`/`AWS_CONFIG_FILE`); `AWS_CA_BUNDLE` (or `ca_bundle`) for https.
///
/// storectl's own knobs: `STORECTL_S3_ADDRESSING=path|virtual` (default: path-style for IP and
/// localhost endpoints and for buckets with dots, else virtual-hosted; `addressing_style` in the
/// profile's `s3` section is read too), `STORECTL_S3_PARALLEL` (transfers at once, default 4),
/// `STORECTL_S3_RETRIES` (default 6), `STORECTL_S3_TIMEOUT` (seconds without progress before a
/// request is given up and retried, default 30), `STORECTL_S3_PART_MB` (multipart part size,
/// default 16; objects over twice that go up in parts), `STORECTL_S3_BACKOFF_MS` (the first
/// retry's delay ceiling, default 200; doubled each retry, up to 10 s), `STORECTL_S3_DEADLINE` (seconds
/// the endpoint may answer nothing at all, across requests and retries, before the run gives up;
/// default 60, 0 for no deadline). `STORECTL_TEST_S3_PART_BYTES` lowers the
/// part size below S3's 5 MiB minimum, for tests on servers that allow it.
///
/// The secret key and session token are never printed: `description` shows the key id only.
public struct S3Settings: Sendable, CustomStringConvertible {
    public var credentials: SigV4.Credentials
    /// Where the credentials came from (for messages): "AWS_ACCESS_KEY_ID", "profile default".
    public var credentialSource: String
    public var region: String
    /// scheme://host[:port], no trailing slash.
    public var endpoint: String
    public var pathStyle: Bool
    public var parallel: Int
    public var retries: Int
    public var timeout: TimeInterval
    /// How long the endpoint may answer nothing at all before the run gives up (74), across every
    /// request and retry (`STORECTL_S3_DEADLINE`, default 60 s; 0: only `retries` limits it).
    public var deadline: TimeInterval = 60
    /// Objects larger than this go up in parts (S3's multipart upload).
    public var multipartThreshold: Int
    public var partSize: Int
    /// First retry's mean delay; each retry doubles it (full jitter), up to `maxBackoff`.
    public var backoff: TimeInterval = 0.2
    public var maxBackoff: TimeInterval = 10
    /// CA certificates for an https endpoint (`AWS_CA_BUNDLE`, or `ca_bundle` in the profile);
    /// nil: the system's.
    public var caBundle: String?
    /// The largest answer taken from the server (1 GiB; `STORECTL_TEST_S3_MAX_ANSWER` lowers it
    /// for tests): no object storectl writes comes near it, and a server that sends more cannot
    /// make storectl exhaust its memory.
    public var maxAnswer = 1 << 30
    /// Keys per page of a listing (`max-keys`); nil: the server's default (1,000 on S3). Tests
    /// lower it (`STORECTL_TEST_S3_LIST_KEYS`) so that a small repository's listing has pages.
    public var listPageSize: Int?

    public var description: String {
        "endpoint \(endpoint), region \(region), \(pathStyle ? "path-style" : "virtual-hosted"), key \(credentials.accessKey) (\(credentialSource))"
    }

    /// Settings a program embedding the library supplies instead of the process environment
    /// (credentials, endpoint, `STORECTL_S3_*`, `STORECTL_CACHE_DIR`): read over it wherever
    /// the S3 settings are resolved. Changing the environment itself (`setenv`) while other
    /// threads run is a data race in glibc (a reader can crash on a reallocated `environ`); this
    /// is not. The tests give their shared server's credentials this way.
    public static let overrides = Mutex<[String: String]>([:])

    /// The process environment with `overrides` over it.
    public static var environment: [String: String] {
        ProcessInfo.processInfo.environment.merging(overrides.withLock { $0 }) { $1 }
    }

    /// - Throws: 64 when no credentials are found or a setting is malformed.
    public static func resolve(bucket: String, environment: [String: String] = S3Settings.environment) throws -> S3Settings {
        let aws = try AWSProfile(environment: environment)
        let env = aws.env
        let (credentials, source) = try aws.credentials(for: bucket)
        let region = env["AWS_REGION"] ?? env["AWS_DEFAULT_REGION"] ?? aws.setting("region") ?? "us-east-1"
        let (endpoint, scheme, pathStyle) = try aws.endpoint(region: region, bucket: bucket)
        func number(_ name: String, _ fallback: Int, _ range: ClosedRange<Int>) throws -> Int {
            guard let text = env[name] else { return fallback }
            guard let value = Int(text), range.contains(value) else {
                throw StoreOpsError(.usage, "\(name)=\(text): expected a whole number from \(range.lowerBound) to \(range.upperBound)")
            }
            return value
        }
        var settings = S3Settings(credentials: credentials, credentialSource: source, region: region, endpoint: endpoint, pathStyle: pathStyle,
                          parallel: try number("STORECTL_S3_PARALLEL", 4, 1...64),
                          retries: try number("STORECTL_S3_RETRIES", 6, 0...100),
                          timeout: TimeInterval(try number("STORECTL_S3_TIMEOUT", 30, 1...3600)),
                          multipartThreshold: 0, partSize: 0)
        .withParts(try number("STORECTL_S3_PART_MB", 16, 5...5120) << 20, testBytes: env["STORECTL_TEST_S3_PART_BYTES"].flatMap { Int($0) })
        settings.backoff = Double(try number("STORECTL_S3_BACKOFF_MS", 200, 1...60_000)) / 1000
        settings.deadline = TimeInterval(try number("STORECTL_S3_DEADLINE", 60, 0...86_400))
        if let limit = env["STORECTL_TEST_S3_MAX_ANSWER"].flatMap({ Int($0) }), limit > 0 { settings.maxAnswer = limit }
        if let keys = env["STORECTL_TEST_S3_LIST_KEYS"].flatMap({ Int($0) }), keys > 0 { settings.listPageSize = keys }
        if scheme == "https", let bundle = env["AWS_CA_BUNDLE"] ?? aws.setting("ca_bundle") {
            guard FileSystem.kind(of: bundle) == .file else {
                throw StoreOpsError(.noInput, "the CA bundle \(bundle) (\(env["AWS_CA_BUNDLE"] != nil ? "AWS_CA_BUNDLE" : "ca_bundle in \(aws.configFile)")) is not a file",
                                    hint: "point it at a PEM file of CA certificates, or unset it to use the system's")
            }
            settings.caBundle = bundle
        }
        return settings
    }
}

/// The environment (empty values dropped) and the AWS profile it names, read from
/// ~/.aws/credentials (sections named by the profile) and ~/.aws/config ("profile NAME", but
/// "default").
private struct AWSProfile {
    let env: [String: String]
    let profile: String
    let credentialsFile: String
    let configFile: String
    let fromCredentials: [String: String]
    let fromConfig: [String: String]

    init(environment: [String: String]) throws {
        env = environment.filter { !$0.value.isEmpty }
        let home = env["HOME"] ?? NSHomeDirectory()
        profile = env["AWS_PROFILE"] ?? env["AWS_DEFAULT_PROFILE"] ?? "default"
        credentialsFile = env["AWS_SHARED_CREDENTIALS_FILE"] ?? "\(home)/.aws/credentials"
        configFile = env["AWS_CONFIG_FILE"] ?? "\(home)/.aws/config"
        let credentialsINI = try AWSProfileFile.read(credentialsFile)
        let configINI = try AWSProfileFile.read(configFile)
        fromCredentials = credentialsINI[profile] ?? [:]
        fromConfig = configINI[profile == "default" ? "default" : "profile \(profile)"] ?? configINI[profile] ?? [:]
    }

    func setting(_ name: String) -> String? { fromCredentials[name] ?? fromConfig[name] }

    /// The keys (the environment's first, then the profile's) and where they came from; 64 when
    /// neither names them.
    func credentials(for bucket: String) throws -> (SigV4.Credentials, String) {
        if let id = env["AWS_ACCESS_KEY_ID"], let secret = env["AWS_SECRET_ACCESS_KEY"] {
            return (.init(accessKey: id, secretKey: secret, sessionToken: env["AWS_SESSION_TOKEN"]), "AWS_ACCESS_KEY_ID")
        }
        if let id = setting("aws_access_key_id"), let secret = setting("aws_secret_access_key") {
            return (.init(accessKey: id, secretKey: secret, sessionToken: setting("aws_session_token")),
                    "profile \(profile) in \(fromCredentials["aws_access_key_id"] != nil ? credentialsFile : configFile)")
        }
        // 64 without the command's usage line: the command line is right, the environment lacks keys.
        throw StoreOpsError.refused("no S3 credentials for s3://\(bucket): neither AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY nor the profile \(profile) in \(credentialsFile) names them",
                                    hint: "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or set AWS_PROFILE to a profile of \(credentialsFile)")
    }

    /// The endpoint (no trailing slash), its scheme, and whether buckets go in the path.
    func endpoint(region: String, bucket: String) throws -> (String, String, Bool) {
        var endpoint = env["AWS_ENDPOINT_URL_S3"] ?? env["AWS_ENDPOINT_URL"] ?? fromConfig["s3.endpoint_url"] ?? setting("endpoint_url")
            ?? "https://s3.\(region).amazonaws.com"
        while endpoint.hasSuffix("/") { endpoint.removeLast() }
        guard let url = URL(string: endpoint), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = url.host, !host.isEmpty, url.path.isEmpty || url.path == "/" else {
            throw StoreOpsError(.usage, "the S3 endpoint \(endpoint) is not an http:// or https:// URL of a host (with an optional port, no path)",
                                hint: "check AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or endpoint_url in \(configFile)")
        }
        let addressing = (env["STORECTL_S3_ADDRESSING"] ?? fromConfig["s3.addressing_style"] ?? "auto").lowercased()
        switch addressing {
        case "path": return (endpoint, scheme, true)
        case "virtual": return (endpoint, scheme, false)
        case "auto":
            let pathStyle = host == "localhost" || host.allSatisfy { $0.isNumber || $0 == "." } || host.contains(":") || bucket.contains(".")
            return (endpoint, scheme, pathStyle)
        default:
            throw StoreOpsError(.usage, "STORECTL_S3_ADDRESSING=\(addressing): use path, virtual or auto")
        }
    }
}

extension S3Settings {
    func withParts(_ bytes: Int, testBytes: Int?) -> S3Settings {
        var copy = self
        copy.partSize = max(1024, testBytes ?? bytes)
        copy.multipartThreshold = 2 * copy.partSize
        return copy
    }
}

/// The INI-like files of the AWS tools: `[section]`, `name = value`, and nested
/// settings (`s3 =` followed by indented `name = value` lines, returned as `s3.name`).
enum AWSProfileFile {
    static func read(_ path: String) throws -> [String: [String: String]] {
        guard FileSystem.kind(of: path) != .missing else { return [:] }
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            throw StoreOpsError(.noInput, "\(path) cannot be read as UTF-8 text", hint: "check its permissions and contents")
        }
        return parse(text)
    }

    static func parse(_ text: String) -> [String: [String: String]] {
        var sections: [String: [String: String]] = [:]
        var current: String?
        var nested: String?
        for raw in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline) {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            if line.hasPrefix("["), line.hasSuffix("]") {
                current = line.dropFirst().dropLast().trimmingCharacters(in: .whitespaces)
                nested = nil
                continue
            }
            guard let section = current, let equals = line.firstIndex(of: "=") else { continue }
            let name = line[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            let value = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            let indented = raw.first == " " || raw.first == "\t"
            if indented, let parent = nested {
                sections[section, default: [:]]["\(parent).\(name)"] = value
            } else if value.isEmpty {
                nested = name
            } else {
                nested = nil
                sections[section, default: [:]][name] = value
            }
        }
        return sections
    }
}
