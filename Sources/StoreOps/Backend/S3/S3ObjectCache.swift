import Foundation

/// Local copies of a bucket repository's index objects and snapshot records. Neither ever changes
/// once written (both are written with `If-None-Match: *`), so a copy is as good as the object
/// for as long as the bucket lists it. `S3Backend` uses a copy only for a key its own latest
/// listing of that prefix, in this process, showed: each run then GETs only the indexes and
/// records it has not seen (one LIST instead of one GET per object, the request class that
/// dominates object-storage bills), and a record a prune elsewhere removed is never read back
/// from here.
///
/// A copy is the object's bytes plus their SHA-256; one that does not match is dropped and
/// fetched again (and the object is authenticated by its reader either way). Copies of objects
/// the bucket no longer lists are removed when the listing shows it.
///
/// Folder: `STORECTL_CACHE_DIR`, else `$XDG_CACHE_HOME/storectl`, else `~/.cache/storectl`, then
/// `s3/<hash of endpoint and repository>/`. `STORECTL_CACHE_DIR=off` turns it off. Any failure
/// to use it only costs requests, never the operation.
struct S3ObjectCache: Sendable {
    let folder: String

    init?(endpoint: String, location: String, environment: [String: String] = S3Settings.environment) {
        let base: String
        if let explicit = environment["STORECTL_CACHE_DIR"], !explicit.isEmpty {
            guard explicit != "off" else { return nil }
            base = explicit
        } else if let xdg = environment["XDG_CACHE_HOME"], !xdg.isEmpty {
            base = xdg + "/storectl"
        } else if let home = environment["HOME"], !home.isEmpty {
            base = home + "/.cache/storectl"
        } else {
            return nil
        }
        folder = "\(base)/s3/\(Hashing.sha256(Data("\(endpoint)\n\(location)".utf8)).prefix(24))"
    }

    /// The prefixes whose objects are kept: written once, never replaced.
    static let prefixes = ["index/", "snapshots/"]

    /// The cached prefix `key` is under, if any.
    static func prefix(of key: String) -> String? {
        guard !key.contains("..") else { return nil }
        return prefixes.first { key.hasPrefix($0) && key.count > $0.count && !key.dropFirst($0.count).contains("/") }
    }

    static func handles(_ key: String) -> Bool { prefix(of: key) != nil }

    private func path(_ key: String) -> String { folder + "/" + key.replacingOccurrences(of: "/", with: "_") }

    func read(_ key: String) -> Data? {
        guard let data = FileManager.default.contents(atPath: path(key)), data.count >= 32 else { return nil }
        let body = data.prefix(data.count - 32)
        guard Hashing.sha256Digest(body) == data.suffix(32) else {
            try? FileSystem.removeFile(path(key), point: "cache.drop")
            return nil
        }
        return Data(body)
    }

    func store(_ key: String, _ data: Data) {
        do {
            if FileSystem.kind(of: folder) == .missing {
                var partial = ""
                for part in folder.split(separator: "/") {
                    partial += "/" + part
                    if FileSystem.kind(of: partial) == .missing { try FileSystem.makeDirectory(partial, existingOK: true, point: "cache.folder") }
                }
            }
            let file = try PendingFile(finalPath: path(key), label: "cache.write")
            try file.write(data + Hashing.sha256Digest(data))
            try file.commit(replacing: true)
        } catch {}
    }

    func remove(_ key: String) { try? FileSystem.removeFile(path(key), point: "cache.remove") }

    /// Drops copies of objects under `prefix` (one of `prefixes`) that the bucket no longer lists.
    func keep(only listed: [String], under prefix: String) {
        PendingFile.removeStale(in: folder)   // a copy a killed run was writing
        let wanted = Set(listed.map { $0.replacingOccurrences(of: "/", with: "_") })
        let start = prefix.replacingOccurrences(of: "/", with: "_")
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] where name.hasPrefix(start) && !wanted.contains(name) {
            try? FileSystem.removeFile(folder + "/" + name, point: "cache.remove")
        }
    }
}
