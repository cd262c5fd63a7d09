import Foundation

/// A format-1 repository, read only to be converted (`storectl repo convert`); storectl no longer
/// writes them, and every other command refuses one (65, naming `repo convert`):
///
///     REPO/                          mode 0700
///       storectl-repo.json           marks the folder as a repository (format and version)
///       snapshots/<id>.tar.zst       the archives (mode 0600)
///       catalog/<id>.json            one manifest per snapshot
///       verified/<id>.json           when each snapshot was last verified
///       .lock                        writers held an flock on it
///
/// Its writers wrote the archive first and the catalog entry last, so a listed snapshot's archive
/// is complete. A converting run holds the flock so that an older storectl cannot prune beside it.
public final class FormatOneRepository: Sendable {
    public let path: String
    static let markerName = "storectl-repo.json"
    static let formatVersion = 1

    struct Marker: Codable {
        var format = "storectl-snapshot-repository"
        var formatVersion = FormatOneRepository.formatVersion
        var createdAt: Date
    }

    var catalogFolder: String { (path as NSString).appendingPathComponent("catalog") }
    var lockPath: String { (path as NSString).appendingPathComponent(".lock") }

    private init(path: String) { self.path = path }

    /// Whether the folder `absolute` is a format-1 repository (it has the marker).
    static func isOne(_ absolute: String) -> Bool {
        FileSystem.kind(of: (absolute as NSString).appendingPathComponent(markerName)) != .missing
    }

    /// Opens an existing format-1 repository.
    ///
    /// - Throws: 65 when it is not one or was written by a newer storectl.
    static func open(_ absolute: String) throws -> FormatOneRepository {
        let repo = FormatOneRepository(path: absolute)
        try repo.checkMarker()
        return repo
    }

    private func checkMarker() throws {
        let markerPath = (path as NSString).appendingPathComponent(Self.markerName)
        guard let data = FileManager.default.contents(atPath: markerPath) else {
            throw StoreOpsError(.badData, "\(path) is not a storectl snapshot repository (no \(Self.markerName))",
                                hint: "check --repo")
        }
        guard let marker = try? JSON.decoder().decode(Marker.self, from: data), marker.format == "storectl-snapshot-repository" else {
            throw StoreOpsError(.badData, "\(markerPath) is not a storectl repository marker")
        }
        guard marker.formatVersion <= Self.formatVersion else {
            throw StoreOpsError(.badData, "\(path) is a version \(marker.formatVersion) repository; this storectl reads up to version \(Self.formatVersion)",
                                hint: "use a newer storectl")
        }
    }

    // MARK: - Catalog

    /// Every readable catalog entry (newest first), every damaged one, and what to say of each
    /// archive no entry names.
    func catalog() -> (records: [Manifest], damaged: [DamagedEntry], orphaned: [String]) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: catalogFolder)) ?? []
        var records: [Manifest] = []
        var damaged: [DamagedEntry] = []
        for name in names.sorted() where name.hasSuffix(".json") && !name.hasPrefix(".") {
            let file = (catalogFolder as NSString).appendingPathComponent(name)
            let id = String(name.dropLast(5))
            func bad(_ problem: String) { damaged.append(DamagedEntry(id: id, file: file, problem: problem)) }
            guard let data = FileManager.default.contents(atPath: file) else { bad("cannot be read"); continue }
            guard data.count < 64 << 20 else { bad("is \(Format.bytes(UInt64(data.count))), not a catalog entry"); continue }
            struct Header: Decodable { var format: String?; var formatVersion: Int? }
            // The format and version first: a newer manifest is "use a newer storectl", not garbage.
            if let header = try? JSON.decoder().decode(Header.self, from: data), header.format == "storectl-manifest",
               let version = header.formatVersion, version > Manifest.currentFormatVersion {
                bad("has format version \(version); this storectl reads up to \(Manifest.currentFormatVersion) (use a newer storectl)")
                continue
            }
            let record: Manifest
            do { record = try JSON.decoder().decode(Manifest.self, from: data) } catch {
                bad("is not a valid manifest (\(JSON.describe(error)))")
                continue
            }
            guard record.format == "storectl-manifest" else { bad("is not a storectl manifest (format \(record.format.debugDescription))"); continue }
            guard record.formatVersion <= Manifest.currentFormatVersion else {
                bad("has format version \(record.formatVersion); this storectl reads up to \(Manifest.currentFormatVersion) (use a newer storectl)")
                continue
            }
            guard let facts = record.snapshot, facts.id == id, SnapshotID.isPlausible(id), facts.archive != nil else {
                bad("does not describe snapshot \(id) (its id or archive record is missing or different)")
                continue
            }
            records.append(record)
        }
        records.sort { ($0.startedAt, $0.snapshot?.id ?? "") > ($1.startedAt, $1.snapshot?.id ?? "") }
        // An archive with no catalog entry: format 1 writes the entry last and a prune removes it
        // first, so this is what an interrupted create or prune left, not a snapshot. Said (a note),
        // never skipped in silence: it carries its manifest, so `snapshot import` brings it in if wanted.
        let entries = Set(names.filter { $0.hasSuffix(".json") }.map { String($0.dropLast(5)) })
        let archives = (path as NSString).appendingPathComponent("snapshots")
        var orphaned: [String] = []
        for name in ((try? FileManager.default.contentsOfDirectory(atPath: archives)) ?? []).sorted() where !name.hasPrefix(".") {
            guard let dot = name.firstIndex(of: "."), name.contains(".tar") else { continue }
            let id = String(name[..<dot])
            guard SnapshotID.isPlausible(id), !entries.contains(id) else { continue }
            let file = (archives as NSString).appendingPathComponent(name)
            orphaned.append("archive \(file) has no catalog entry (left by a create or prune that was interrupted: format 1 does not count it as a snapshot), so it was not converted; if it is wanted, `storectl snapshot import \(file) --repo REPO` brings it in")
        }
        return (records, damaged, orphaned)
    }

    func archivePath(_ record: Manifest) -> String {
        (path as NSString).appendingPathComponent(record.snapshot?.archive?.path ?? "")
    }

    /// Takes its writers' flock (75 at once when an older storectl is writing it).
    func lock(job: String) throws -> JobLock {
        try JobLock.acquire(path: lockPath, job: job, wait: false)
    }
}
