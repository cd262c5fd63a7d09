import Foundation

/// `storectl repo repair`: rebuilds the index from the packs themselves when an index file is
/// damaged or lost. Every pack whose header opens (layout 2: and whose every frame opens, since
/// its blobs' ids are recomputed from their bytes) is listed in one new index; then the old index
/// files are removed. Packs that are damaged are reported and kept as a readable old index
/// describes them (or left out, when none does: `repo check` then names the snapshots that need them). Takes the repository exclusively.
public enum RepositoryRepair {
    public struct Report: Sendable, Codable {
        public var location: String
        public var packsIndexed = 0
        public var damagedPacks: [String] = []
        public var removedIndexes = 0
        public var newIndex: String?
    }

    public static func run(location: String, password: PasswordSource, wait: Bool = false) throws -> Report {
        guard case .paged(let repository) = try OpenedRepository.open(location, password: password) else {
            throw StoreOpsError(.usage, "\(FileSystem.absolute(location)) is a format-1 repository: it has no index to repair",
                                hint: "`storectl snapshot verify --all` checks its archives")
        }
        let lock = try RepositoryLock.acquire(repository.backend, exclusive: true, operation: "repo repair", wait: wait)
        defer { lock.release() }
        var report = Report(location: repository.location)
        // What the readable indexes say, for packs whose own header is damaged.
        var known: [ContentID: PackContents] = [:]
        try RepositoryIndex.scan(repository) { _, pack, contents in known[pack] = contents }
        var index = IndexFile()
        let zstd = try ZstdFrames(level: 3)
        for (key, _) in try repository.backend.list("data/") {
            try ProcessSignals.checkpoint("repairing \(repository.location)")
            guard let id = ContentID(hex: FileSystem.name(of: key)), PackBuilder.key(id) == key else {
                report.damagedPacks.append("\(repository.backend.describe(key)): not a pack name")
                continue
            }
            do {
                index.packs.append((id, try PackBuilder.readContents(repository, id: id, zstd: zstd)))
            } catch let error as StoreOpsError where error.status == .badData {
                report.damagedPacks.append(error.message)
                if let contents = known[id] { index.packs.append((id, contents)) }   // an index still describes it
            }
        }
        let old = try repository.backend.list("index/").map(\.key)
        if !index.isEmpty {
            let (key, data) = try index.encode(sealer: repository.sealer)
            try repository.backend.write(key, data, point: "repair.index.write")
            report.newIndex = key
        }
        report.packsIndexed = index.packs.count
        for key in old where key != report.newIndex {
            try repository.backend.remove(key, point: "repair.index.remove")
            report.removedIndexes += 1
        }
        return report
    }
}
