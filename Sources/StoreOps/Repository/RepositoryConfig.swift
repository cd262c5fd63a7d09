import Foundation

/// `config`, the one plain object of a format-2 repository: what it is and how it is sealed.
/// Written last by `repo init` (a folder without it is not a repository yet).
///
/// ```json
/// { "format": "storectl-repository", "version": 2, "id": "<32 hex>",
///   "encryption": "aes-256-gcm" | "none",
///   "contentIDs": "hmac-sha256-128" | "sha256-128" (layout 2) | "hmac-sha256" | "sha256" (layout 1),
///   "compression": "zstd", "createdAt": "…",
///   "keyCheck": "<base64: sealed \"storectl-repository:<id>\" as config:<id>>" }
/// ```
public struct RepositoryConfig: Sendable, Codable, Equatable {
    public var format = "storectl-repository"
    public var version = PagedRepository.formatVersion
    public var id: String
    public var encryption: String
    public var contentIDs: String
    public var compression = "zstd"
    public var createdAt: Date
    /// Encrypted repositories: proves a master key belongs to this repository.
    public var keyCheck: String?

    public var isEncrypted: Bool { encryption != "none" }
    /// 16 (`…-128`: layout 2, what `repo init` makes) or 32 (layout 1, repositories made before
    /// 0.2; still read and written in their own layout).
    public var idBytes: Int { contentIDs.hasSuffix("-128") ? 16 : 32 }

    /// The `contentIDs` of a new repository.
    static func contentIDs(encrypted: Bool, idBytes: Int) -> String {
        (encrypted ? "hmac-sha256" : "sha256") + (idBytes == 16 ? "-128" : "")
    }

    static let key = "config"

    /// Whether `data` names itself a storectl repository's configuration (read whole or not).
    static func namesItself(_ data: Data) -> Bool { data.range(of: Data("\"storectl-repository\"".utf8)) != nil }

    var checkIdentity: String { "config:\(id)" }
    var checkPlaintext: Data { Data("storectl-repository:\(id)".utf8) }

    /// Reads and checks `config`: nil when there is none.
    ///
    /// - Throws: 65 when it is damaged or written by a newer storectl.
    static func read(from backend: any RepositoryBackend) throws -> RepositoryConfig? {
        guard let data = try backend.read(key) else { return nil }
        struct Header: Decodable { var format: String?; var version: Int? }
        guard let header = try? JSON.decoder().decode(Header.self, from: data), header.format == "storectl-repository" else {
            // storectl's own config that no longer reads (cut short, bytes changed): damage, not a wrong --repo.
            if (try? JSONSerialization.jsonObject(with: data)) == nil, namesItself(data) {
                throw StoreOpsError(.badData, "\(backend.describe(key)) is damaged: it is a storectl repository's configuration that no longer reads as JSON (cut short or changed)",
                                    hint: "every command reads it first: put back a copy of this file (it never changes after `repo init`: a backup of the repository, or another copy of it)")
            }
            throw StoreOpsError(.badData, "\(backend.describe(key)) is not a storectl repository configuration", hint: "check --repo")
        }
        guard let version = header.version, version <= PagedRepository.formatVersion else {
            throw StoreOpsError(.badData, "\(backend.location) is a format-\(header.version ?? 0) repository; this storectl reads formats 1 and 2",
                                hint: "use a newer storectl")
        }
        let config: RepositoryConfig
        do { config = try JSON.decoder().decode(RepositoryConfig.self, from: data) } catch {
            throw StoreOpsError(.badData, "\(backend.describe(key)) is damaged (\(JSON.describe(error)))")
        }
        guard ["aes-256-gcm", "none"].contains(config.encryption), [16, 32].contains(where: { config.contentIDs == contentIDs(encrypted: config.isEncrypted, idBytes: $0) }),
              config.compression == "zstd", config.id.count == 32, config.id.allSatisfy(\.isHexDigit) else {
            throw StoreOpsError(.badData, "\(backend.describe(key)) names a cipher, content id or compression this storectl does not know",
                                hint: "use a newer storectl, or check that the file was not changed")
        }
        return config
    }
}
