import Foundation
import Synchronization

/// A format-2 repository in an S3-compatible bucket, under a prefix: `s3://BUCKET/PREFIX`.
///
/// - Objects that never change (config, keys, packs, indexes, snapshot records) are written with
///   `If-None-Match: *`: a second writer can never replace one. A 412 (it is there already) is
///   success when the object there has our size: the same content-addressed bytes a retried
///   request had already stored. Locks and verification notes are overwritten.
/// - Every PUT carries its body's SHA-256 twice: signed (`x-amz-content-sha256`) and as
///   `x-amz-checksum-sha256`, which the server checks, so a body damaged on the way is refused
///   (and sent again). Parts carry `Content-MD5`. Objects over `settings.multipartThreshold` go up
///   in parts.
/// - An S3 PUT is atomic: the object exists whole or not at all, as the local rename gives.
public final class S3Backend: RepositoryBackend {
    public let bucket: String
    /// Without leading or trailing slashes; "" for the bucket's root.
    public let prefix: String
    let client: S3Client
    public var silentFor: TimeInterval? { client.silentSince.map { max(0, Date().timeIntervalSince($0)) } ?? 0 }
    let cache: S3ObjectCache?
    /// What this process's latest listing of each cached prefix showed: a cached copy is used
    /// only for a key in it, so a record or index removed since (by a prune elsewhere) is read
    /// from the bucket, and found missing there, never from the cache.
    private let listed = Mutex<[String: Set<String>]>([:])
    public let location: String
    public var parallelTransfers: Int { client.settings.parallel }
    public var parallelReads: Int { max(2, client.settings.parallel) }

    public init(bucket: String, prefix: String, settings: S3Settings) {
        self.bucket = bucket
        self.prefix = prefix
        let location = "s3://\(bucket)\(prefix.isEmpty ? "" : "/" + prefix)"
        self.location = location
        self.client = S3Client(settings: settings, bucket: bucket, location: location)
        self.cache = S3ObjectCache(endpoint: settings.endpoint, location: location)
    }

    /// Opens `s3://BUCKET[/PREFIX]` with the settings from the environment and AWS files.
    public convenience init(url: String) throws {
        let (bucket, prefix) = try Self.parse(url)
        self.init(bucket: bucket, prefix: prefix, settings: try S3Settings.resolve(bucket: bucket))
    }

    /// The repository whose prefix holds this one's (`s3://b/repo` for `s3://b/repo/sub`), if
    /// any: its `config` under an ancestor prefix. A repository inside another is listed as the
    /// outer one's unknown objects, and the outer one's prune and check see them.
    func enclosingRepository() throws -> String? {
        let parts = prefix.split(separator: "/")
        for depth in 0..<parts.count {
            let ancestor = parts[0..<depth].joined(separator: "/")
            let key = ancestor.isEmpty ? RepositoryConfig.key : "\(ancestor)/\(RepositoryConfig.key)"
            // Credentials scoped to the new prefix may not read above it (403): not known, not refused.
            let response: S3Client.Response
            do { response = try client.send("GET", method: "GET", key: key, what: "s3://\(bucket)/\(key)") } catch let error as StoreOpsError where error.kind == .wrongPassword {
                continue
            }
            if response.status == 200, RepositoryConfig.namesItself(response.body) {
                return "s3://\(bucket)\(ancestor.isEmpty ? "" : "/" + ancestor)"
            }
        }
        return nil
    }

    public static func isS3(_ location: String) -> Bool { location.lowercased().hasPrefix("s3://") }

    /// - Throws: 64 for a malformed URL or bucket name.
    public static func parse(_ url: String) throws -> (bucket: String, prefix: String) {
        let rest = url.dropFirst(5)
        let parts = rest.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        let bucket = String(parts.first ?? "")
        func alphanumeric(_ c: Character?) -> Bool { c.map { $0.isASCII && ($0.isLowercase || $0.isNumber) } ?? false }
        guard (3...63).contains(bucket.count), bucket.allSatisfy({ alphanumeric($0) || $0 == "-" || $0 == "." }),
              alphanumeric(bucket.first), alphanumeric(bucket.last) else {
            throw StoreOpsError(.usage, "--repo \(url): \"\(bucket)\" is not an S3 bucket name (3 to 63 lower-case letters, digits, dots and hyphens)",
                                hint: "write it as s3://BUCKET/PREFIX")
        }
        let prefix = parts.count > 1 ? String(parts[1]).split(separator: "/").joined(separator: "/") : ""
        if prefix.split(separator: "/").contains(where: { $0 == ".." || $0 == "." }) || prefix.utf8.count > 512 {
            throw StoreOpsError(.usage, "--repo \(url): the prefix \"\(prefix)\" may not hold . or .. segments or exceed 512 bytes")
        }
        return (bucket, prefix)
    }

    func objectKey(_ key: String) -> String { prefix.isEmpty ? key : "\(prefix)/\(key)" }


    public func read(_ key: String) throws -> Data? {
        let prefix = S3ObjectCache.prefix(of: key)
        let cached = prefix == nil ? nil : cache
        if let cached, let prefix, listed.withLock({ $0[prefix]?.contains(key) ?? false }), let copy = cached.read(key) {
            S3Traffic.cacheHit()
            return copy
        }
        let response = try client.send("GET", method: "GET", key: objectKey(key), what: describe(key))
        switch response.status {
        case 200:
            cached?.store(key, response.body)
            return response.body
        case 404: return nil
        default: throw unexpected(response, "reading", key)
        }
    }

    public func read(_ key: String, offset: UInt64, length: Int) throws -> Data {
        guard length > 0 else { return Data() }
        let response = try client.send("GET", method: "GET", key: objectKey(key), headers: ["range": "bytes=\(offset)-\(offset + UInt64(length) - 1)"],
                                       what: describe(key))
        switch response.status {
        case 206, 200:
            let body = response.status == 200 ? response.body.dropFirst(Int(clamping: offset)).prefix(length) : response.body
            guard body.count == length else {
                throw StoreOpsError(.badData, "\(describe(key)) is damaged: \(length) bytes at \(offset) were asked for and \(body.count) came back; it is shorter than its index says",
                                    hint: Sealer.damagedHint)
            }
            return Data(body)
        case 404: throw StoreOpsError(.badData, "\(describe(key)) is missing", hint: Sealer.damagedHint)
        case 416:
            throw StoreOpsError(.badData, "\(describe(key)) is damaged: it ends before byte \(offset + UInt64(length)) that its index names", hint: Sealer.damagedHint)
        default: throw unexpected(response, "reading", key)
        }
    }

    /// The largest object S3 stores (5 TiB): a size past it is the server's mistake, refused
    /// before sums and offsets are made of it.
    static let largestObject: UInt64 = 5 << 40

    static func checkSize(_ size: UInt64, of key: String, in backend: S3Backend) throws -> UInt64 {
        guard size <= largestObject else {
            throw StoreOpsError(.ioError, "\(backend.describe(key)): the server says it is \(size) bytes, more than an S3 object can be (5 TiB)",
                                hint: "the endpoint \(backend.client.settings.endpoint) does not answer as S3 does")
        }
        return size
    }

    public func size(_ key: String) throws -> UInt64? {
        let response = try client.send("HEAD", method: "HEAD", key: objectKey(key), what: describe(key))
        switch response.status {
        case 200: return try response.headers["content-length"].flatMap { UInt64($0) }.map { try Self.checkSize($0, of: key, in: self) }
        case 404: return nil
        default: throw unexpected(response, "reading the size of", key)
        }
    }

    public func write(_ key: String, _ data: Data, point: String) throws {
        let conditional = !RepositoryKeyRules.isReplaceable(key)
        if data.count > client.settings.multipartThreshold {
            try writeInParts(key, data, point: point, conditional: conditional)
        } else {
            var headers = ["content-type": "application/octet-stream"]
            if conditional { headers["if-none-match"] = "*" }
            let response = try client.send("PUT", method: "PUT", key: objectKey(key), headers: headers, body: data, checksum: true, what: describe(key))
            try accept(response, key: key, data: data)
        }
        if S3ObjectCache.handles(key) { cache?.store(key, data) }
        FaultInjection.reach("\(point).put")
    }

    /// 200: written. 412: it exists; fine when it holds these bytes (a retry of a request that
    /// had succeeded, or a content-addressed object written twice), 65 when it holds others.
    private func accept(_ response: S3Client.Response, key: String, data: Data) throws {
        switch response.status {
        case 200, 201, 204: return
        case 412, 409: try requireSame(key, data)
        case 400 where response.code == "BadDigest" || response.code == "XAmzContentSHA256Mismatch":
            throw StoreOpsError(.ioError, "\(describe(key)) was damaged on the way every time it was sent, and the server refused it (\(response.summary))",
                                hint: "check the network path to \(client.settings.endpoint), then run the command again")
        default:
            throw unexpected(response, "writing", key)
        }
    }

    /// An immutable key that exists: its bytes (read past the index cache) must be `data`'s.
    private func requireSame(_ key: String, _ data: Data) throws {
        guard let there = try size(key), there == UInt64(data.count) else { throw RepositoryKeyRules.conflict(describe(key)) }
        let response = try client.send("GET", method: "GET", key: objectKey(key), what: describe(key))
        guard response.status == 200, response.body == data else { throw RepositoryKeyRules.conflict(describe(key)) }
    }

    private func writeInParts(_ key: String, _ data: Data, point: String, conditional: Bool) throws {
        if conditional, try size(key) != nil {
            return try requireSame(key, data)
        }
        let object = objectKey(key)
        let uploadID = try beginUpload(key)
        FaultInjection.reach("\(point).upload-started")
        do {
            var etags: [String] = []
            var offset = 0
            var part = 1
            while offset < data.count {
                let end = min(data.count, offset + client.settings.partSize)
                let body = data.subdata(in: offset..<end)
                let response = try client.send("UploadPart", method: "PUT", key: object, query: [("partNumber", "\(part)"), ("uploadId", uploadID)],
                                               headers: ["content-md5": S3Client.contentMD5(body)], body: body, what: "\(describe(key)) part \(part)")
                guard response.status == 200, let etag = response.headers["etag"] else { throw unexpected(response, "writing a part of", key) }
                etags.append(etag)
                FaultInjection.reach("\(point).part")
                offset = end
                part += 1
            }
            let list = etags.enumerated().map { "<Part><PartNumber>\($0.offset + 1)</PartNumber><ETag>\($0.element)</ETag></Part>" }.joined()
            let body = Data("<CompleteMultipartUpload>\(list)</CompleteMultipartUpload>".utf8)
            let done = try client.send("CompleteMultipartUpload", method: "POST", key: object, query: [("uploadId", uploadID)],
                                       headers: ["content-md5": S3Client.contentMD5(body)], body: body, what: describe(key))
            // S3 may answer 200 with an error in the body.
            guard done.status == 200, done.code == nil || S3XML.value("ETag", in: Substring(String(decoding: done.body, as: UTF8.self))) != nil else {
                throw unexpected(done, "finishing the upload of", key)
            }
        } catch {
            _ = try? client.send("AbortMultipartUpload", method: "DELETE", key: object, query: [("uploadId", uploadID)], what: describe(key))
            throw error
        }
    }

    /// Starts a multipart upload of `key` and returns its id (`write` finishes it; tests leave
    /// one unfinished, as a killed run would).
    public func beginUpload(_ key: String) throws -> String {
        let started = try client.send("CreateMultipartUpload", method: "POST", key: objectKey(key), query: [("uploads", "")], what: describe(key))
        guard started.status == 200, let uploadID = S3XML.value("UploadId", in: Substring(String(decoding: started.body, as: UTF8.self))) else {
            throw unexpected(started, "starting the upload of", key)
        }
        return uploadID
    }

    public func remove(_ key: String, point: String) throws {
        let response = try client.send("DELETE", method: "DELETE", key: objectKey(key), what: describe(key))
        guard [200, 204, 404].contains(response.status) else { throw unexpected(response, "removing", key) }
        if S3ObjectCache.handles(key) { cache?.remove(key) }
        FaultInjection.reach(point)
    }

    public func list(_ prefix: String) throws -> [(key: String, size: UInt64)] {
        var out: [(key: String, size: UInt64)] = []
        var token: String?
        var tokens = Set<String>()
        let root = self.prefix.isEmpty ? "" : self.prefix + "/"
        repeat {
            var query = [("list-type", "2"), ("prefix", root + prefix)]
            if let pageSize = client.settings.listPageSize { query.append(("max-keys", "\(pageSize)")) }
            if let token { query.append(("continuation-token", token)) }
            let response = try client.send("LIST", method: "GET", key: nil, query: query, what: "\(location)/\(prefix)")
            guard response.status == 200 else { throw unexpected(response, "listing", prefix) }
            let text = Substring(String(decoding: response.body, as: UTF8.self))
            for entry in S3XML.blocks("Contents", in: text) {
                guard let key = S3XML.value("Key", in: entry), key.hasPrefix(root) else { continue }
                let relative = String(key.dropFirst(root.count))
                guard !relative.isEmpty, !relative.hasSuffix("/") else { continue }
                out.append((relative, try Self.checkSize(S3XML.value("Size", in: entry).flatMap { UInt64($0) } ?? 0, of: relative, in: self)))
            }
            token = nil
            if S3XML.value("IsTruncated", in: text) == "true" {
                guard let next = S3XML.value("NextContinuationToken", in: text), !next.isEmpty else {
                    throw StoreOpsError(.ioError, "listing \(location)/\(prefix): the server says the listing goes on but gives no continuation token",
                                        hint: "the endpoint \(client.settings.endpoint) does not speak ListObjectsV2 as S3 does")
                }
                // A token given before: the listing goes round (a trial's gateway sent 2,675
                // requests in two minutes, and the deadline never came: the server answered).
                guard tokens.insert(next).inserted else {
                    throw StoreOpsError(.ioError, "listing \(location)/\(prefix): the server gave the same continuation token twice, so its listing does not advance (\(out.count) keys so far)",
                                        hint: "the endpoint \(client.settings.endpoint) does not page ListObjectsV2 as S3 does; try again, or report it to the storage's operator")
                }
                token = next
            }
        } while token != nil
        if S3ObjectCache.prefixes.contains(prefix) {
            let keys = out.map(\.key)
            listed.withLock { $0[prefix] = Set(keys) }
            cache?.keep(only: keys, under: prefix)
        }
        return out.sorted { $0.key < $1.key }
    }

    /// Checks the bucket answers (66 when it does not exist, 77 when access is denied).
    public func prepare() throws { _ = try list("config") }

    /// Unfinished multipart uploads, only when no one else holds the repository (a live
    /// writer's upload must be left alone).
    public func removeAbandoned(alone: Bool) throws -> [String] { alone ? try abortUploads() : [] }

    /// The multipart uploads in progress under the prefix: (object key, upload id), every page
    /// (from the markers the server gives, or the last upload listed when it gives none).
    public func pendingUploads() throws -> [(key: String, id: String)] {
        let root = prefix.isEmpty ? "" : prefix + "/"
        var out: [(key: String, id: String)] = []
        var marker: (key: String, id: String)?
        while true {
            var query = [("uploads", ""), ("prefix", root)]
            if let marker { query += [("key-marker", marker.key), ("upload-id-marker", marker.id)] }
            let response = try client.send("ListMultipartUploads", method: "GET", key: nil, query: query, what: "\(location) uploads")
            guard response.status == 200 else { throw unexpected(response, "listing the unfinished uploads of", "") }
            let text = Substring(String(decoding: response.body, as: UTF8.self))
            let page: [(key: String, id: String)] = S3XML.blocks("Upload", in: text).compactMap { upload in
                guard let key = S3XML.value("Key", in: upload), let id = S3XML.value("UploadId", in: upload) else { return nil }
                return (key, id)
            }
            out += page.filter { upload in !out.contains { $0 == upload } }
            guard S3XML.value("IsTruncated", in: text) == "true", let last = page.last else { return out }
            let next = (key: S3XML.value("NextKeyMarker", in: text) ?? last.key, id: S3XML.value("NextUploadIdMarker", in: text) ?? last.id)
            guard marker.map({ $0 != next }) ?? true else { return out }
            marker = next
        }
    }

    /// Aborts every multipart upload in progress under the prefix: call only when no other
    /// writer can be using the repository. Returns what was aborted.
    public func abortUploads() throws -> [String] {
        var aborted: [String] = []
        for (key, id) in try pendingUploads() {
            let done = try client.send("AbortMultipartUpload", method: "DELETE", key: key, query: [("uploadId", id)], what: "s3://\(bucket)/\(key)")
            if [200, 204, 404].contains(done.status) { aborted.append("s3://\(bucket)/\(key) (unfinished upload)") }
        }
        return aborted
    }

    /// Makes a bucket: for tests and benchmarks (storectl's commands never create buckets).
    public static func createBucket(_ name: String, settings: S3Settings) throws {
        let client = S3Client(settings: settings, bucket: name, location: "s3://\(name)")
        let response = try client.send("CreateBucket", method: "PUT", key: nil, what: "s3://\(name)")
        guard [200, 409].contains(response.status) else {
            throw StoreOpsError(.ioError, "creating the bucket \(name) failed: \(response.summary)")
        }
    }

    private func unexpected(_ response: S3Client.Response, _ doing: String, _ key: String) -> StoreOpsError {
        StoreOpsError(.ioError, "\(doing) \(describe(key)) failed: \(response.summary)",
                      hint: "check the endpoint \(client.settings.endpoint) and the bucket's permissions")
    }
}
