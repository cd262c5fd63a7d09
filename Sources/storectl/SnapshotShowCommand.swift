import ArgumentParser
import Foundation
import StoreOps

struct SnapshotShowCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(commandName: "show", abstract: "Show a snapshot's manifest.")

    @Option(help: "The snapshot repository.") var repo: String
    @OptionGroup var password: PasswordOption
    @Argument(help: "The snapshot id (or a unique prefix).") var id: String
    @Flag(help: "Print the manifest as JSON.") var json = false

    func run() throws {
        let repository = try PagedRepository.open(at: repo, password: password.source)
        let record = try repository.record(id).manifest
        if json { print(jsonReport(record)); return }
        let facts = record.snapshot
        var lines = [
            "snapshot   \(facts?.id ?? "?")",
            "taken      \(Timestamp.iso(record.startedAt)) on \(record.host), \(Format.duration(record.durationSeconds))",
            "store      \(record.source.path) (\(record.source.journalMode), \(Format.count(record.source.pageCount)) pages of \(record.source.pageSize) B)",
            "database   \(record.database.path)  \(Format.bytes(record.database.bytes))  sha256 \(record.database.sha256 ?? "none (every page is checked against its content id)")",
            "pages      added \(Format.bytes(facts?.addedBytes ?? 0)) to the repository, \(facts?.parent.map { "against \($0)" } ?? "the first of this store")",
            "compressed \(facts?.compression.rawValue ?? "?")\(facts?.level.map { " level \($0)" } ?? "")",
            "tags       \(facts?.tags.joined(separator: ", ") ?? "")",
            // Replicate's bases and milestones are not checked when taken (no read held for it); a restore of them checks.
            "checked    " + (record.verify.level == .none ? (facts?.tags.contains("replicate") == true ? "not when taken (a replicate base or milestone: a restore of it runs quick_check)" : "not when taken (--verify none)")
                             : "when taken: \(record.verify.level == .full ? "integrity_check" : "quick_check") \(record.verify.ok ? "ok" : "FAILED")"),
            "verified   " + (repository.lastVerification(facts?.id ?? "").map { "\(Timestamp.iso($0.at)) \($0.ok ? "ok" : "FAILED: \($0.problem ?? "")")" } ?? "never"),
        ]
        if let external = record.externalData {
            lines.append("external   \(Format.plural(external.files.count, "file", "files")), \(Format.bytes(external.totalBytes)) in \(external.folder)")
        }
        if let coreData = record.coreData {
            lines.append("core data  framework \(coreData.metadata.frameworkVersion.map(String.init) ?? "?"), "
                         + Format.plural(coreData.metadata.modelVersionHashes.count, "model hash", "model hashes"))
            // Names as long as they are (Photos has CloudSharedAlbumInvitationRecord), counts aligned.
            let width = max(24, coreData.entityCounts.keys.map(\.count).max() ?? 0)
            for (entity, rows) in coreData.entityCounts.sorted(by: { $0.key < $1.key }) {
                lines.append("           \(entity.rightPadded(to: width)) \(Format.count(rows).leftPadded(to: 11))")
            }
        }
        print(lines.joined(separator: "\n"))
    }
}
