import Foundation
import StoreLab
@testable import StoreOps
import Testing

@Suite("point segments: version 3 (binary commits) and the versions before it")
struct PointSegmentTests {
    /// A repository with one chain of a store a writer changed while `replicate` followed it,
    /// with an external-data file carried by a commit (the commit's JSON extra).
    func followedRepository(mergeInterval: String = "0", churn: String = "1.5") throws -> (TempFolder, PagedRepository) {
        let folder = try TempFolder("storectl-segments")
        let store = try sampleStore(in: folder, items: 500)
        let repo = try folder.repository()
        let env = ["STORECTL_PASSWORD_FILE": try folder.passwordFile()]
        let follower = try ChildProcess.Running(Binaries.storectl, ["replicate", store, "--repo", repo, "--quiet", "--merge-interval", mergeInterval], environment: env)
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, (try? PointTimeline.load(try PagedRepository.open(at: repo, password: .file(folder.file("password")))).chains.isEmpty) ?? true {
            usleep(50_000)
        }
        let support = StoreFile(unchecked: store).externalDataPath
        try FileManager.default.createDirectory(atPath: support, withIntermediateDirectories: true)
        try Data(repeating: 7, count: 5_000).write(to: URL(fileURLWithPath: (support as NSString).appendingPathComponent("A1B2C3")))
        let writer = try ChildProcess.Running(Binaries.lab, ["churn", store, "--log", folder.file("churn.log"), "--duration", churn, "--seed", "4"])
        #expect(writer.wait().status == 0)
        usleep(1_500_000)
        follower.signal(SIGTERM)
        let followed = follower.wait()
        #expect(followed.status == 0, "\(followed.stderr)")
        return (folder, try PagedRepository.open(at: repo, password: .file(folder.file("password"))))
    }

    @Test("every segment replicate wrote is version 3; sealed again as version 1-2 (commits in JSON, ids in hex) or 3 it opens to the same commits, pages and files; a version from a newer storectl is refused with what to do")
    func versions() throws {
        let (folder, repository) = try followedRepository()
        defer { withExtendedLifetime(folder) {} }   // the folder goes when its value does
        let zstd = try ZstdFrames(level: 3)
        let chains = try PointTimeline.load(repository).chains
        var commits = 0, withFiles = 0, legacyVersions = Set<Int>()
        for chain in chains {
            for name in chain.segments.dropFirst() {
                let sealed = try #require(try repository.backend.read(name.key))
                let (segment, pages, files) = try PointSegment.open(sealed, name: name, sealer: repository.sealer, zstd: zstd, location: repository.location)
                #expect(segment.version == PointSegment.currentVersion)
                // Each page is the one its id names (read from the binary table).
                let ids = segment.commits.flatMap(\.ids)
                #expect(ids.count == pages.count)
                for (i, page) in pages.enumerated() where i < ids.count {
                    #expect(page.withUnsafeBytes { repository.sealer.contentID($0) } == ids[i], "page \(i) of \(name.key)")
                }
                commits += segment.commits.count
                withFiles += segment.commits.filter { $0.files?.isEmpty == false }.count
                // The body: per commit its pages, then its files' bytes.
                var body: [[UInt8]] = []
                var nextPage = 0, nextFile = 0
                for commit in segment.commits {
                    for _ in commit.pages { body.append(pages[nextPage]); nextPage += 1 }
                    for _ in commit.files ?? [] { body.append([UInt8](files[nextFile])); nextFile += 1 }
                }
                for legacy in [true, false] {
                    let again = try segment.seal(pages: body, sealer: repository.sealer, zstd: zstd, name: name, legacyVersion: legacy)
                    let (reopened, reopenedPages, reopenedFiles) = try PointSegment.open(again, name: name, sealer: repository.sealer, zstd: zstd, location: repository.location)
                    if legacy { legacyVersions.insert(reopened.version) }
                    #expect(reopened.commits == segment.commits)
                    #expect(Array(reopenedPages) == Array(pages))
                    #expect(reopenedFiles == files)
                }
            }
        }
        #expect(commits > 20, "the writer's commits were not followed")
        #expect(withFiles >= 1, "no commit carried the external-data file")
        #expect(legacyVersions == [1, 2])
        // A segment from a newer storectl.
        let chain = try #require(chains.first)
        let name = try #require(chain.segments.dropFirst().first)
        let (segment, segmentPages, _) = try PointSegment.open(try #require(try repository.backend.read(name.key)), name: name, sealer: repository.sealer, zstd: zstd, location: repository.location)
        // A segment of the first commit alone, well formed but for what each case breaks: its
        // table, then the commit's pages.
        let first = try #require(segment.commits.first)
        let one = SegmentName(store: name.store, chain: name.chain, level: 0, from: segment.from, to: segment.from, firstTime: first.time, lastTime: first.time)
        func sealed(version: Int, commits: [PointSegment.Commit] = [], table: (inout BinaryWriter) -> Void) throws -> Data {
            var header = segment
            header.version = version
            header.to = header.from
            header.commits = commits
            let json = try JSON.encode(header)
            var plain = BinaryWriter(capacity: 0)
            plain.u32(UInt32(json.count))
            plain.bytes(json)
            table(&plain)
            for k in 0..<first.pages.count { plain.bytes(Data(segmentPages[k])) }
            var framed = BinaryWriter(capacity: 0)
            framed.u32(UInt32(plain.data.count))
            var out = framed.data
            out.append(try plain.data.withUnsafeBytes { try zstd.compress($0) })
            return try repository.sealer.seal(out, as: one.identity)
        }
        func refused(_ data: Data, _ what: String) -> StoreOpsError? {
            do {
                _ = try PointSegment.open(data, name: one, sealer: repository.sealer, zstd: zstd, location: repository.location)
                Issue.record("\(what): opened")
                return nil
            } catch let error as StoreOpsError {
                #expect(error.status == .badData, "\(what): \(error)")
                return error
            } catch {
                Issue.record("\(what): \(error)")
                return nil
            }
        }
        let newer = refused(try sealed(version: PointSegment.currentVersion + 1) { _ in }, "a newer version")
        #expect(newer?.message.contains("version \(PointSegment.currentVersion + 1)") == true && newer?.hint?.contains("newer storectl") == true, "\(String(describing: newer))")
        // Damaged or hostile version-3 tables: 65, never a crash or a huge allocation; the
        // well-formed one opens to the commit.
        func commit(_ w: inout BinaryWriter, point: UInt64 = 0, n: UInt32? = nil, extra: Data = Data()) {
            w.u64(UInt64(first.time)); w.u64(point); w.u32(first.frame); w.u32(first.pageCount)
            w.u32(n ?? UInt32(first.pages.count))
            for page in first.pages { w.u32(page) }
            for id in first.ids { w.id(id, bytes: repository.sealer.idBytes) }
            w.u32(UInt32(extra.count)); w.bytes(extra)
        }
        let good = try PointSegment.open(try sealed(version: 3) { w in w.u32(1); commit(&w) }, name: one, sealer: repository.sealer, zstd: zstd, location: repository.location)
        #expect(good.0.commits.first?.ids == first.ids && good.0.commits.first?.pages == first.pages && good.0.commits.count == 1)
        _ = refused(try sealed(version: 3) { $0.u32(1); $0.u32(7) }, "a table cut short")
        _ = refused(try sealed(version: 3) { $0.u32(UInt32.max) }, "a count past the bytes left")
        _ = refused(try sealed(version: 3) { w in w.u32(1); commit(&w, n: UInt32.max) }, "a page count past the bytes left")
        _ = refused(try sealed(version: 3) { w in w.u32(1); commit(&w, point: UInt64.max) }, "a point past Int")
        _ = refused(try sealed(version: 3) { w in w.u32(1); commit(&w, extra: Data("{x".utf8)) }, "damaged extra JSON")
        _ = refused(try sealed(version: 3, commits: [first]) { w in w.u32(1); commit(&w) }, "commits in the JSON and the table")
    }

    @Test("a chain whose commit grew the store without the new pages (a batch before it lost): `repo check --read-data` names the chain, the page and the first point that does not restore, and a restore at that point fails 65 as it predicts; before it, restores; a whole chain checks ok (a trial: an outage lost a batch, later points failed 65 and the check said ok)")
    func pagesNoCommitHolds() throws {
        let (folder, repository) = try followedRepository()
        defer { withExtendedLifetime(folder) {} }
        let zstd = try ZstdFrames(level: 3)
        let repo = folder.file("repo")
        let env = ["STORECTL_PASSWORD_FILE": folder.file("password")]
        let whole = try ChildProcess.run(Binaries.storectl, ["repo", "check", "--repo", repo, "--read-data"], environment: env)
        #expect(whole.status == 0, "\(whole.stdout) \(whole.stderr)")
        // The last segment's last commit says two more pages than it carries.
        let chain = try #require(PointTimeline.load(repository).chains.last)
        let name = try #require(chain.segments.dropFirst().last)
        let (segment, pages, files) = try PointSegment.open(try #require(try repository.backend.read(name.key)), name: name, sealer: repository.sealer, zstd: zstd, location: repository.location)
        #expect(files.isEmpty || segment.commits.contains { $0.files?.isEmpty == false })
        var damaged = segment
        let last = damaged.commits.count - 1
        damaged.commits[last].pageCount += 2
        try reseal(damaged, name: name, pages: Array(pages), files: files, original: segment, repository: repository, repo: repo)
        let point = damaged.commits[last].point ?? (segment.from + last)
        let pageCount = Int(segment.commits[last].pageCount)
        let check = try ChildProcess.run(Binaries.storectl, ["repo", "check", "--repo", repo, "--read-data"], environment: env)
        #expect(check.status == 2 && check.stdout.contains("page \(pageCount + 1) of point \(point)") && check.stdout.contains("chain \(chain.id)"),
                "\(check.status) \(check.stdout) \(check.stderr)")
        let atPoint = Timestamp.iso(PointRestore.date(damaged.commits[last].time))
        let refused = try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, "--at", atPoint, "--to", folder.file("at.sqlite")], environment: env)
        #expect(refused.status == 65 && refused.stderr.contains("has no content id"), "\(refused.status) \(refused.stderr)")
        // The newest commit before it in time (commits read together share their millisecond).
        if let earlier = damaged.commits.last(where: { $0.time < damaged.commits[last].time }) {
            let before = Timestamp.iso(PointRestore.date(earlier.time))
            let restored = try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, "--at", before, "--to", folder.file("before.sqlite")], environment: env)
            #expect(restored.status == 0, "\(restored.stderr)")
        }
    }

    /// Seals `segment` again under `name` with `pages` and `files` as it was opened (each commit's
    /// pages, then its files), over the object in `repo`.
    func reseal(_ segment: PointSegment, name: SegmentName, pages: [[UInt8]], files: [Data], original: PointSegment,
                repository: PagedRepository, repo: String) throws {
        var body: [[UInt8]] = []
        var nextPage = 0, nextFile = 0
        for commit in original.commits {
            for _ in commit.pages { body.append(pages[nextPage]); nextPage += 1 }
            for _ in commit.files ?? [] { body.append([UInt8](files[nextFile])); nextFile += 1 }
        }
        let sealed = try segment.seal(pages: body, sealer: repository.sealer, zstd: try ZstdFrames(level: 3), name: name)
        try sealed.write(to: URL(fileURLWithPath: (repo as NSString).appendingPathComponent(name.key)))
    }

    @Test("a digest that opens but does not say what the commits it spans leave (its page count, or a page's content id): `repo check --read-data` and `snapshot verify --all` name the digest object and the points that read it; the same chain with its digests as written checks ok (a fuzz run: a re-sealed digest passed both, and restores through it were refused naming the base)")
    func digestThatDoesNotSayItsCommits() throws {
        let (folder, repository) = try followedRepository(mergeInterval: "1s", churn: "3")
        defer { withExtendedLifetime(folder) {} }
        let zstd = try ZstdFrames(level: 3)
        let repo = folder.file("repo")
        let env = ["STORECTL_PASSWORD_FILE": folder.file("password")]
        let chain = try #require(PointTimeline.load(repository).chains.last)
        let digest = try #require(chain.digests.first, "no digest was written: \(chain.segments.map(\.key))")
        let whole = try ChildProcess.run(Binaries.storectl, ["repo", "check", "--repo", repo, "--read-data"], environment: env)
        #expect(whole.status == 0, "\(whole.stdout) \(whole.stderr)")
        let original = try #require(try repository.backend.read(digest.key))
        let (segment, pages, files) = try PointSegment.open(original, name: digest, sealer: repository.sealer, zstd: zstd, location: repository.location)
        #expect(segment.digest == true && segment.commits.count == 1)
        for damage in ["page count", "content id"] {
            var damaged = segment
            if damage == "page count" {
                damaged.commits[0].pageCount += 100
            } else {
                // Another page's id (and bytes) in a page's place: it opens, every page matches its id.
                guard damaged.commits[0].pages.count >= 2 else { continue }
                damaged.commits[0].ids[0] = damaged.commits[0].ids[1]
            }
            var body = Array(pages)
            if damage == "content id" { body[0] = body[1] }
            try reseal(damaged, name: digest, pages: body, files: files, original: segment, repository: repository, repo: repo)
            for command in [["repo", "check", "--repo", repo, "--read-data"], ["snapshot", "verify", "--repo", repo, "--all"]] {
                let check = try ChildProcess.run(Binaries.storectl, command, environment: env)
                let said = check.stdout + check.stderr
                // repo check: 2 (problems found); snapshot verify: 65 (what it verifies is damaged).
                #expect(check.status == (command[0] == "repo" ? 2 : 65) && said.contains(digest.key) && said.contains("does not say what the commits it spans leave")
                        && said.contains("restores at point \(digest.to) and later"), "\(damage) \(command[0]): \(check.status) \(said)")
                if damage == "page count" { #expect(said.contains("says \(Format.count(Int(damaged.commits[0].pageCount))) pages"), "\(said)") }
            }
            if damage == "page count" {
                // A restore through it is refused (pages no source holds), and its hint says it was read through a digest.
                let at = Timestamp.iso(PointRestore.date(digest.lastTime))
                let refused = try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, "--at", at, "--to", folder.file("through.sqlite")], environment: env)
                #expect(refused.status == 65 && refused.stderr.contains("read through 1 digest") && refused.stderr.contains("--read-data"), "\(refused.status) \(refused.stderr)")
            }
            try original.write(to: URL(fileURLWithPath: (repo as NSString).appendingPathComponent(digest.key)))
        }
        let again = try ChildProcess.run(Binaries.storectl, ["repo", "check", "--repo", repo, "--read-data"], environment: env)
        #expect(again.status == 0, "\(again.stdout) \(again.stderr)")
    }

    @Test("a commit holding a page number no database of its size can have: a restore refuses the points from it (65 naming the segment and the page) where it dropped the page without a word and restored other content, and `repo check --read-data` names it; a point before it restores")
    func commitPageNoDatabaseCanHave() throws {
        let (folder, repository) = try followedRepository()
        defer { withExtendedLifetime(folder) {} }
        let zstd = try ZstdFrames(level: 3)
        let repo = folder.file("repo")
        let env = ["STORECTL_PASSWORD_FILE": folder.file("password")]
        let chain = try #require(PointTimeline.load(repository).chains.last)
        let name = try #require(chain.segments.dropFirst().last)
        let (segment, pages, files) = try PointSegment.open(try #require(try repository.backend.read(name.key)), name: name, sealer: repository.sealer, zstd: zstd, location: repository.location)
        let last = segment.commits.count - 1
        var damaged = segment
        try #require(!damaged.commits[last].pages.isEmpty)
        damaged.commits[last].pages[0] = 4_000_000_000
        try reseal(damaged, name: name, pages: Array(pages), files: files, original: segment, repository: repository, repo: repo)
        let point = segment.commits[last].point ?? (segment.from + last)
        let check = try ChildProcess.run(Binaries.storectl, ["repo", "check", "--repo", repo, "--read-data"], environment: env)
        #expect(check.status == 2 && check.stdout.contains("point \(point)") && check.stdout.contains("holds page 4000000000"), "\(check.status) \(check.stdout) \(check.stderr)")
        let atPoint = Timestamp.iso(PointRestore.date(segment.commits[last].time))
        let refused = try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, "--at", atPoint, "--to", folder.file("at.sqlite")], environment: env)
        #expect(refused.status == 65 && refused.stderr.contains("holds page 4000000000"), "\(refused.status) \(refused.stderr)")
        if let earlier = segment.commits.last(where: { $0.time < segment.commits[last].time }) {
            let before = Timestamp.iso(PointRestore.date(earlier.time))
            let restored = try ChildProcess.run(Binaries.storectl, ["snapshot", "restore", "--repo", repo, "--at", before, "--to", folder.file("before.sqlite")], environment: env)
            #expect(restored.status == 0, "\(restored.stderr)")
        }
    }
}
