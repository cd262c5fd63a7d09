import Foundation

/// A snapshot repository of either format, opened: format 1 (one archive per snapshot, readable
/// with bsdtar) or format 2 (content-addressed pages, encrypted by default).
public enum OpenedRepository: Sendable {
    case archives(SnapshotRepository)
    case paged(PagedRepository)

    public var location: String {
        switch self {
        case .archives(let repository): return repository.path
        case .paged(let repository): return repository.location
        }
    }

    /// A folder as an absolute path; an `s3://` URL as it is.
    public static func normalize(_ location: String) -> String {
        S3Backend.isS3(location) ? location : FileSystem.absolute(location)
    }

    public var format: Int {
        switch self {
        case .archives: return 1
        case .paged: return 2
        }
    }

    /// Opens the repository at `location` (a folder), asking for the password only when it is an
    /// encrypted format-2 repository.
    ///
    /// - Throws: 66 when there is no repository (with the `repo init` command to make one), 65
    ///   when the folder is something else or damaged, 77 for a wrong password.
    public static func open(_ location: String, password: PasswordSource) throws -> OpenedRepository {
        if S3Backend.isS3(location) {
            let backend = try S3Backend(url: location)
            guard try backend.read(RepositoryConfig.key) != nil else {
                if try backend.list("").isEmpty {
                    throw StoreOpsError(.noInput, "there is no snapshot repository at \(backend.location)",
                                        hint: "make one first: `storectl repo init --repo \(backend.location)` (storectl does not make repositories implicitly)")
                }
                throw StoreOpsError(.badData, "\(backend.location) holds objects but no config: it is not a storectl repository",
                                    hint: "check --repo (a repository needs a prefix of its own)")
            }
            return .paged(try PagedRepository.open(backend, password: password))
        }
        let absolute = FileSystem.absolute(location)
        switch FileSystem.kind(of: absolute) {
        case .missing:
            throw StoreOpsError(.noInput, "there is no snapshot repository at \(absolute)",
                                hint: "make one first: `storectl repo init --repo \(absolute)` (storectl does not make repositories implicitly)")
        case .directory: break
        default:
            throw StoreOpsError(.badData, "\(absolute) is not a folder, so not a snapshot repository")
        }
        if FileSystem.kind(of: (absolute as NSString).appendingPathComponent(SnapshotRepository.markerName)) != .missing {
            return .archives(try SnapshotRepository.open(absolute))
        }
        let backend = LocalBackend(root: absolute)
        if FileSystem.kind(of: backend.path(RepositoryConfig.key)) == .missing {
            let contents = ((try? FileManager.default.contentsOfDirectory(atPath: absolute)) ?? []).filter { !$0.hasPrefix(".") }
            if contents.isEmpty {
                throw StoreOpsError(.noInput, "\(absolute) is an empty folder, not a snapshot repository yet",
                                    hint: "make one first: `storectl repo init --repo \(absolute)`")
            }
            throw StoreOpsError(.badData, "\(absolute) is not a storectl snapshot repository (no config or \(SnapshotRepository.markerName))",
                                hint: "check --repo")
        }
        return .paged(try PagedRepository.open(backend, password: password))
    }
}
