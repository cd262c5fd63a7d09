import Foundation
import StoreLab
import StoreOps
import Testing

/// A repository shared by several stores, as the README invites and S3 fleets do.
@Suite("a repository shared by two stores")
struct SharedRepositoryTests {
    enum Kind: String, CaseIterable, CustomStringConvertible {
        case pagedLocal, pagedS3
        var description: String { rawValue }
        static var all: [Kind] { Place.all.contains(.s3) ? allCases : [.pagedLocal] }
    }

    @Test("prune --keep-last 1 keeps each store's newest snapshot and removes only the older one of the store that has two; a filter and the whole-repository grouping do what they say",
          arguments: Kind.all)
    func perStorePrune(kind: Kind) throws {
        let fixture = try PagedFixture(items: 500, externalFiles: 0, place: kind == .pagedS3 ? .s3 : .local)
        let folder = fixture.folder, a = fixture.store, repo = fixture.repo
        let b = try sampleStore(in: folder, name: "B.sqlite", items: 300)
        let password = PasswordSource.file(try folder.passwordFile())
        func create(_ store: String) throws -> String {
            try SnapshotCreate.run(store: store, options: .init(repository: repo, password: password)).id
        }
        let onlyB = try create(b)
        let oldA = try create(a)
        Thread.sleep(forTimeInterval: 1.1)   // ids and times to the second
        let newA = try create(a)
        func prune(_ policy: RetentionPolicy, dryRun: Bool = false, groupBy: SnapshotGrouping = .store, filter: SnapshotFilter = .all) throws -> SnapshotPrune.Result {
            try SnapshotPrune.run(.init(repository: repo, policy: policy, dryRun: dryRun, password: password, groupBy: groupBy, filter: filter))
        }
        let host = ProcessInfo.processInfo.hostName
        let dry = try prune(.init(last: 1), dryRun: true)
        #expect(Set(dry.decisions.compactMap(\.group)) == ["\(host):\(a)", "\(host):\(b)"])
        #expect(dry.decisions.filter { !$0.keep }.map(\.id) == [oldA])
        #expect(try SnapshotSummary.list(repository: repo, password: password).count == 3, "a dry run removes nothing")
        // Only B's snapshots are looked at: nothing of A's is touched even with the whole repository as one group.
        let filtered = try prune(.init(last: 1), groupBy: .repository, filter: .init(path: b))
        #expect(filtered.decisions.map(\.id) == [onlyB] && filtered.removed.isEmpty)
        let pruned = try prune(.init(last: 1))
        #expect(pruned.removed == [oldA])
        #expect(pruned.stages.map(\.name) == ["lock", "preflight", "prune"], "the decisions are the preflight's plan, carried out by the act")
        let left = try SnapshotSummary.list(repository: repo, password: password)
        #expect(Set(left.map(\.id)) == [newA, onlyB], "the other store's only snapshot is kept")
        #expect(try SnapshotSummary.list(repository: repo, password: password, filter: .init(path: b)).map(\.id) == [onlyB])
        #expect(left.allSatisfy { $0.host == host })
        // One group, the newest of all, asked for by name: still not B's only snapshot (a store is
        // never left without a snapshot that passed its check; it went before).
        let whole = try prune(.init(last: 1), groupBy: .repository)
        #expect(whole.removed.isEmpty && whole.decisions.first { $0.id == onlyB }?.reasons == ["the newest snapshot of its store that passed its check (a store keeps one at least)"],
                "\(whole.decisions)")
        // Both stores' remaining snapshots restore (prune collected only what was unreferenced).
        var restore = SnapshotRestore.Options(repository: repo, id: newA, target: .file(folder.file("restored.sqlite")))
        restore.password = password
        _ = try SnapshotRestore.run(restore)
    }

    @Test("an empty --keep-tag is refused with 64 before anything is read or removed")
    func emptyTag() throws {
        let folder = try TempFolder()
        let store = try sampleStore(in: folder, items: 300)
        let repo = try folder.repository("repo", encrypted: true)
        let password = PasswordSource.file(try folder.passwordFile())
        _ = try SnapshotCreate.run(store: store, options: .init(repository: repo, password: password))
        for tags in [[""], ["nightly", " "]] {
            let error = #expect(throws: StoreOpsError.self) {
                try SnapshotPrune.run(.init(repository: repo, policy: .init(tags: tags), password: password))
            }
            #expect(error?.status == .usage && error?.message.contains("empty tag") == true)
        }
        #expect(try SnapshotSummary.list(repository: repo, password: password).count == 1)
    }
}
