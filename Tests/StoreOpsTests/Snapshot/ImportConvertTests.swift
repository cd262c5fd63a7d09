import Foundation
import GRDB
import StoreLab
@testable import StoreOps
import Testing

/// `snapshot import` (an exported archive into a repository) and `repo convert` (a format-1 or a
/// layout-1 repository into today's format 2): ids, times, hosts, sources and tags kept; every
/// snapshot restores to the bytes the old one did; a second run writes nothing; damage is refused
/// or reported, never brought over.
@Suite("snapshot import and repo convert")
struct ImportConvertTests {
    let folder: TempFolder
    let store: String
    let password: PasswordSource

    init() throws {
        folder = try TempFolder()
        store = try sampleStore(in: folder, items: 1_500, externalFiles: 2)
        password = .file(try folder.passwordFile())
    }

    func restore(_ repo: String, _ id: String, _ name: String) throws -> (database: String, external: [String: Data]) {
        var options = SnapshotRestore.Options(repository: repo, id: id, target: .file(folder.file(name)))
        options.password = password
        _ = try SnapshotRestore.run(options)
        let support = StoreFile(unchecked: folder.file(name)).externalDataPath
        var external: [String: Data] = [:]
        for file in (try? FileManager.default.contentsOfDirectory(atPath: support)) ?? [] {
            external[file] = FileManager.default.contents(atPath: (support as NSString).appendingPathComponent(file))
        }
        return (try Hashing.sha256(ofFile: folder.file(name)), external)
    }

    func change(_ sql: String) throws {
        let queue = try DatabaseQueue(path: store)
        try queue.write { try $0.execute(sql: sql) }
        try queue.close()
    }

    func summaries(_ repo: String) throws -> [String] {
        try SnapshotSummary.list(repository: repo, password: password).map { "\($0.id) \(Timestamp.iso($0.time)) \($0.host) \($0.store) \($0.tags)" }.sorted()
    }

    /// Every object and its SHA-256, locks aside.
    func contents(_ repo: String) throws -> [String: String] {
        let backend = LocalBackend(root: repo)
        var out: [String: String] = [:]
        for (key, _) in try backend.list("") where !key.hasPrefix("locks/") { out[key] = Hashing.sha256(try #require(try backend.read(key))) }
        return out
    }

    /// `count` snapshots of the store, each tagged `\(tag)N`, with scattered changes between them.
    func chain(in repo: String, count: Int, tag: String, every modulo: Int) throws -> [String] {
        var ids: [String] = []
        for round in 0..<count {
            ids.append(try SnapshotCreate.run(store: store, options: .init(repository: repo, tags: ["\(tag)\(round)"], password: password)).id)
            try change("UPDATE ZITEM SET ZTITLE = ZTITLE || '\(round)' WHERE Z_PK % \(modulo) = \(round % modulo)")
        }
        return ids
    }

    /// Converts `old` into `new`, unpacking in the test's folder.
    func convert(_ old: String, into new: String) throws -> RepositoryConvert.Report {
        var options = RepositoryConvert.Options(source: old, sourcePassword: password, target: new, password: password)
        options.scratch = folder.path
        return try RepositoryConvert.run(options)
    }

    @Test("an exported snapshot imported into another repository keeps its id, time, host, source and tags and restores to the same bytes; a second import writes nothing; another snapshot under the same id is refused naming what differs")
    func importRoundTrip() throws {
        let a = try folder.repository("a", encrypted: true)
        let b = try folder.repository("b", encrypted: true)
        let first = try SnapshotCreate.run(store: store, options: .init(repository: a, tags: ["nightly"], password: password))
        try change("UPDATE ZITEM SET ZTITLE = ZTITLE || '!' WHERE Z_PK % 9 = 0")
        let second = try SnapshotCreate.run(store: store, options: .init(repository: a, tags: ["weekly", "x"], password: password))
        for id in [first.id, second.id] {
            let archive = folder.file("\(id).tar.zst")
            let exported = try SnapshotExport.run(.init(repository: a, id: id, output: archive, password: password))
            #expect(exported.stages.map(\.name) == ["lock", "preflight", "export", "commit"], "each a road over the repository")
            var options = SnapshotImport.Options(file: archive, repository: b, password: password)
            options.scratch = folder.path
            let result = try SnapshotImport.run(options)
            #expect(result.id == id && !result.alreadyThere && result.addedBytes > 0)
            #expect(result.stages?.map(\.name) == ["lock", "preflight", "import"])
            #expect(try restore(b, id, "b-\(id).sqlite") == (try restore(a, id, "a-\(id).sqlite")))
        }
        #expect(try summaries(b) == (try summaries(a)))
        // Verified by the import, and listed so (LAST VERIFIED said never).
        #expect(try SnapshotSummary.list(repository: b, password: password).allSatisfy { $0.lastVerified?.ok == true && $0.lastVerified?.level == .quick })
        // The second imported snapshot was stored against the first: only what changed was added.
        let records = try PagedRepository.open(LocalBackend(root: b), password: password).catalog().records
        let secondRecord = try #require(records.first { $0.id == second.id })
        #expect(secondRecord.parent == first.id, "deduplicated against the snapshot imported before it")
        // Again: verified, nothing written, no scratch left.
        let before = try contents(b)
        var again = SnapshotImport.Options(file: folder.file("\(first.id).tar.zst"), repository: b, password: password)
        again.scratch = folder.path
        let result = try SnapshotImport.run(again)
        #expect(result.alreadyThere && result.addedBytes == 0)
        #expect(try contents(b).filter { !$0.key.hasPrefix("verified/") } == before.filter { !$0.key.hasPrefix("verified/") })
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).allSatisfy { !$0.contains(".tmp-storectl-") })
        // Under a held id, with other tags: refused, naming what differs on both sides.
        try craft(folder.file("\(first.id).tar.zst"), folder.file("retagged.tar.zst"), field: "tags", json: "[\"other\"]")
        again.file = folder.file("retagged.tar.zst")
        do {
            _ = try SnapshotImport.run(again)
            Issue.record("a different snapshot under a held id was imported")
        } catch let error as StoreOpsError {
            #expect(error.status == .badData && error.message.contains("already holds a different snapshot \(first.id): tags nightly there, other in the archive"), "\(error.message)")
        }
    }

    @Test("damaged or foreign archives are refused with 65 (66 when missing), nothing is listed and no scratch is left; a format-1 repository is told to convert")
    func importRefusals() throws {
        let a = try folder.repository("a", encrypted: true)
        let b = try folder.repository("b", encrypted: true)
        let id = try SnapshotCreate.run(store: store, options: .init(repository: a, password: password)).id
        let archive = folder.file("good.tar.zst")
        _ = try SnapshotExport.run(.init(repository: a, id: id, output: archive, password: password))
        let good = try Data(contentsOf: URL(fileURLWithPath: archive))
        var cases: [(String, Data?, StoreOps.ExitStatus, String)] = [
            ("missing.tar.zst", nil, .noInput, "does not exist"),
            ("truncated.tar.zst", good.prefix(good.count / 2), .badData, "good"),
            ("text.tar.zst", Data("not an archive at all".utf8), .badData, "not a readable snapshot archive"),
        ]
        var flipped = good
        flipped[good.count / 3] ^= 0x55
        cases.append(("flipped.tar.zst", flipped, .badData, "good"))
        for (name, bytes, status, mentions) in cases {
            let path = folder.file(name)
            if let bytes { try bytes.write(to: URL(fileURLWithPath: path)) }
            var options = SnapshotImport.Options(file: path, repository: b, password: password)
            options.scratch = folder.path
            do {
                _ = try SnapshotImport.run(options)
                Issue.record("\(name): imported")
            } catch let error as StoreOpsError {
                #expect(error.status == status, "\(name): \(error.message)")
                if mentions != "good" { #expect(error.message.contains(mentions), "\(name): \(error.message)") }
            }
            #expect(try summaries(b).isEmpty, "\(name)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).allSatisfy { !$0.contains(".tmp-storectl-") })
    }

    /// Rewrites one field of the snapshot facts in an exported archive's manifest.json (an
    /// archive carries no MAC: anyone can craft one); a field starting with / is a path from the top.
    func craft(_ archive: String, _ output: String, field: String, json: String) throws {
        let script = """
        import io, json, subprocess, sys, tarfile
        src, dst, field, value = sys.argv[1:5]
        raw = subprocess.run(['zstd', '-d', '-c', '-q', src], capture_output=True, check=True).stdout
        tin = tarfile.open(fileobj=io.BytesIO(raw))
        out = io.BytesIO()
        tout = tarfile.open(fileobj=out, mode='w', format=tarfile.PAX_FORMAT)
        for m in tin.getmembers():
            data = tin.extractfile(m).read() if m.isfile() else None
            if m.name == 'manifest.json':
                j = json.loads(data); path = field[1:].split('/') if field.startswith('/') else ['snapshot', field]
                o = j
                for k in path[:-1]: o = o[k]
                o[path[-1]] = json.loads(value); data = json.dumps(j).encode(); m.size = len(data)
            tout.addfile(m, io.BytesIO(data) if data is not None else None)
        tout.close()
        open(dst, 'wb').write(subprocess.run(['zstd', '-c', '-q'], input=out.getvalue(), capture_output=True, check=True).stdout)
        """
        let result = try ChildProcess.run("/usr/bin/python3", ["-c", script, archive, output, field, json])
        #expect(result.status == 0, "\(result.stderr)")
    }

    @Test("bad arguments: an empty archive or old repository name is 64, a missing one 66, a scratch folder that does not exist 73; nothing is written")
    func badArguments() throws {
        let a = try folder.repository("a", encrypted: true)
        let id = try SnapshotCreate.run(store: store, options: .init(repository: a, password: password)).id
        let archive = folder.file("good.tar.zst")
        _ = try SnapshotExport.run(.init(repository: a, id: id, output: archive, password: password))
        let b = try folder.repository("b", encrypted: true)
        func expect(_ status: StoreOps.ExitStatus, _ body: () throws -> Void) {
            do { try body(); Issue.record("expected \(status.rawValue), and it succeeded") } catch let error as StoreOpsError {
                #expect(error.status == status, "\(error.message)")
            } catch { Issue.record("\(error)") }
        }
        expect(.usage) { _ = try SnapshotImport.run(.init(file: "", repository: b, password: password)) }
        expect(.noInput) { _ = try SnapshotImport.run(.init(file: folder.file("nothing.tar.zst"), repository: b, password: password)) }
        expect(.noInput) { _ = try SnapshotImport.run(.init(file: archive, repository: folder.file("no-repo"), password: password)) }
        var scratchless = SnapshotImport.Options(file: archive, repository: b, password: password)
        scratchless.scratch = folder.file("no-such-folder")
        expect(.cannotCreate) { _ = try SnapshotImport.run(scratchless) }
        expect(.noInput) { _ = try convert(folder.file("no-old-repo"), into: b) }
        expect(.usage) { _ = try convert(" ", into: b) }
        // The hints name the options of the repository to convert, not --repo and --password-file.
        do {
            _ = try convert(folder.file("no-old-repo"), into: b)
        } catch let error as StoreOpsError { #expect(error.hint?.contains("check OLD, the repository to convert") == true, "\(error.description)") }
        let other = folder.file("other-password")
        try Data("another password\n".utf8).write(to: URL(fileURLWithPath: other))
        let c = try RepositoryInit.run({ var o = RepositoryInit.Options(location: folder.file("c"), password: .file(other)); o.kdfN = 1 << 10; return o }()).location
        do {
            _ = try RepositoryConvert.run(.init(source: c, sourcePassword: password, target: b, password: password))
            Issue.record("the new repository's password opened the old one")
        } catch let error as StoreOpsError {
            #expect(error.status == .wrongPassword && error.message.hasPrefix("the repository to convert: ") && error.hint?.contains("pass --old-password-file FILE") == true,
                    "\(error.description)")
        }
        var options = RepositoryConvert.Options(source: a, sourcePassword: password, target: b, password: password)
        options.scratch = folder.file("no-such-folder")
        expect(.cannotCreate) { _ = try RepositoryConvert.run(options) }
        #expect(try summaries(b).isEmpty)
    }

    @Test("a crafted manifest never crashes the import: a level zstd does not take is stored at the default; a tag storectl would not write, an id it would not write (\"2\", a prefix, a bad time), a host or store path with a newline or an escape, a duration of 1e300 s are 65 and nothing is listed")
    func craftedManifest() throws {
        let a = try folder.repository("a", encrypted: true)
        let b = try folder.repository("b", encrypted: true)
        let id = try SnapshotCreate.run(store: store, options: .init(repository: a, password: password)).id
        let archive = folder.file("good.tar.zst")
        _ = try SnapshotExport.run(.init(repository: a, id: id, output: archive, password: password))
        try craft(archive, folder.file("level.tar.zst"), field: "level", json: "99999999999999")
        var options = SnapshotImport.Options(file: folder.file("level.tar.zst"), repository: b, password: password)
        options.scratch = folder.path
        let result = try SnapshotImport.run(options)
        #expect(result.id == id && !result.alreadyThere)
        #expect(try restore(b, id, "b.sqlite") == (try restore(a, id, "a.sqlite")))
        try craft(archive, folder.file("tag.tar.zst"), field: "tags", json: "[\"no spaces allowed\"]")
        options.file = folder.file("tag.tar.zst")
        let c = try folder.repository("c", encrypted: true)
        options.repository = c
        do {
            _ = try SnapshotImport.run(options)
            Issue.record("a tag storectl would not write was imported")
        } catch let error as StoreOpsError {
            #expect(error.status == .badData, "\(error.message)")
        }
        #expect(try summaries(c).isEmpty)
        // Fields list, show and prune print, and figures they convert: refused, naming what.
        let crafted: [(field: String, json: String, said: String)] = [
            ("id", "\"2\"", "no valid id"), ("id", "\"\(id.prefix(12))\"", "no valid id"), ("id", "\"20261399T250000Z-abcdef\"", "no valid id"),
            ("/host", "\"evil\\nstore vm:/etc/passwd\"", "names a host"), ("/host", "\"\\u001b[31mred\"", "names a host"),
            ("/source/path", "\"/srv/a\\nkeep   20261122T031500Z-7f3a9c\"", "names a store path"),
            ("/durationSeconds", "1e300", "durationSeconds"),
            // A later time (prune keeps the newest): one its id does not give, and one in the future with an id to match.
            ("/startedAt", "\"9999-01-01T00:00:00.000Z\"", "not the time in its id"),
        ]
        for (n, (field, json, said)) in crafted.enumerated() {
            let file = folder.file("crafted-\(n).tar.zst")
            try craft(archive, file, field: field, json: json)
            options.file = file
            do {
                _ = try SnapshotImport.run(options)
                Issue.record("\(field) = \(json) was imported")
            } catch let error as StoreOpsError {
                #expect(error.status == .badData && error.message.contains(said), "\(field) = \(json): \(error.message)")
            }
            #expect(try summaries(c).isEmpty, "\(field) = \(json)")
        }
        // A negative duration (the clock stepped back during the copy) is a real record: imported.
        try craft(archive, folder.file("stepped-back.tar.zst"), field: "/durationSeconds", json: "-2.5")
        var stepped = options
        stepped.file = folder.file("stepped-back.tar.zst")
        stepped.repository = try folder.repository("d", encrypted: true)
        #expect(try SnapshotImport.run(stepped).id == id)
        // A time in the future with an id to match it.
        try craft(archive, folder.file("future-id.tar.zst"), field: "id", json: "\"20991231T000000Z-abcdef\"")
        try craft(folder.file("future-id.tar.zst"), folder.file("future.tar.zst"), field: "/startedAt", json: "\"2099-12-31T00:00:00.250Z\"")
        options.file = folder.file("future.tar.zst")
        do {
            _ = try SnapshotImport.run(options)
            Issue.record("a snapshot taken in 2099 was imported")
        } catch let error as StoreOpsError {
            #expect(error.status == .badData && error.message.contains("in the future"), "\(error.message)")
        }
        #expect(try summaries(c).isEmpty)
    }

    /// What the old repository says of each snapshot: id, time, host, source and tags.
    func oldIdentities(_ old: String) throws -> [String] {
        let manifests: [Manifest]
        if FormatOneRepository.isOne(old) {
            manifests = try FormatOneRepository.open(old).catalog().records
        } else {
            manifests = try PagedRepository.open(LocalBackend(root: old), password: password, oldLayout: true).catalog().records.map(\.manifest)
        }
        return manifests.map { "\($0.snapshot?.id ?? "") \(Timestamp.iso($0.startedAt)) \($0.host) \($0.source.path) \($0.snapshot?.tags ?? [])" }.sorted()
    }

    /// Every snapshot of `new` restores to the bytes the build that wrote the old repository restored.
    func expectSameBytes(_ new: String, as expected: [OldRepositories.Snapshot]) throws {
        for snapshot in expected {
            let restored = try restore(new, snapshot.id, "\(FileSystem.name(of: new))-\(snapshot.id).sqlite")
            #expect(restored.database == snapshot.database, "\(snapshot.id)")
            #expect(restored.external.mapValues { Hashing.sha256($0 ?? Data()) } == snapshot.external, "\(snapshot.id)")
        }
    }

    @Test("a format-1 repository an earlier build wrote, converted: every snapshot, oldest first, with its id, time and tags, restores to the bytes that build restored; a second run writes nothing; a damaged archive is reported (2) and the others converted; an archive without its catalog entry (an interrupted create or prune) is a note naming the import that brings it in")
    func convertFormatOne() throws {
        let old = try folder.oldRepository("format-1", as: "old")
        let expected = try OldRepositories.expected("format-1")
        let ids = expected.map(\.id)
        let new = try folder.repository("new", encrypted: true)
        let report = try convert(old, into: new)
        #expect(report.ok && report.converted.map(\.id) == ids && report.sourceKind == "format 1")
        #expect(try summaries(new) == (try oldIdentities(old)))
        try expectSameBytes(new, as: expected)
        #expect(report.converted[1].addedBytes < report.converted[0].addedBytes / 2, "later snapshots add only what changed: \(report.converted.map(\.addedBytes))")

        let before = try contents(new)
        let again = try convert(old, into: new)
        #expect(again.ok && again.converted.isEmpty && again.alreadyThere == ids)
        #expect(try contents(new).filter { !$0.key.hasPrefix("verified/") } == before.filter { !$0.key.hasPrefix("verified/") })

        // A damaged archive in the old repository: reported, not brought over; the rest converted.
        let damaged = try folder.oldRepository("format-1", as: "damaged")
        let archive = (damaged as NSString).appendingPathComponent("snapshots/\(ids[0]).tar.zst")
        var bytes = try Data(contentsOf: URL(fileURLWithPath: archive))
        bytes[bytes.count / 2] ^= 0xff
        try bytes.write(to: URL(fileURLWithPath: archive))
        let target = try folder.repository("target", encrypted: true)
        let partial = try convert(damaged, into: target)
        #expect(partial.failed.map(\.id) == [ids[0]] && partial.converted.map(\.id) == Array(ids.dropFirst()))
        #expect(RepositoryConvert.ending(of: partial).status == .checksFailed)
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).allSatisfy { !$0.contains(".tmp-storectl-") })

        // An archive whose catalog entry is gone (an interrupted create or prune in format 1): a
        // note naming it and how to bring it in, never skipped in silence, not a failure; the
        // import it names brings it in whole.
        let orphaned = try folder.oldRepository("format-1", as: "orphaned")
        try FileManager.default.removeItem(atPath: (orphaned as NSString).appendingPathComponent("catalog/\(ids[1]).json"))
        let into = try folder.repository("into", encrypted: true)
        let skipped = try convert(orphaned, into: into)
        let note = try #require(skipped.notes.first)
        #expect(skipped.failed.isEmpty && skipped.notes.count == 1 && note.contains("\(ids[1]).tar.zst has no catalog entry")
                && note.contains("storectl snapshot import"), "\(skipped.notes) \(skipped.failed)")
        #expect(RepositoryConvert.ending(of: skipped).status == .ok && !skipped.converted.map(\.id).contains(ids[1]))
        var brought = SnapshotImport.Options(file: (orphaned as NSString).appendingPathComponent("snapshots/\(ids[1]).tar.zst"), repository: into, password: password)
        brought.scratch = folder.path
        #expect(try SnapshotImport.run(brought).id == ids[1])
        try expectSameBytes(into, as: expected)
    }

    @Test("a layout-1 repository an earlier build wrote, converted into layout 2: the same snapshots, restoring to the bytes that build restored; into itself or into an old repository is refused")
    func convertLayoutOne() throws {
        let old = try folder.oldRepository("layout-1", as: "old")
        let expected = try OldRepositories.expected("layout-1")
        let new = try folder.repository("new", encrypted: true)
        let report = try convert(old, into: new)
        #expect(report.ok && report.converted.map(\.id) == expected.map(\.id) && report.sourceKind == "format 2, layout 1")
        #expect(try summaries(new) == (try oldIdentities(old)))
        try expectSameBytes(new, as: expected)
        #expect(try PagedRepository.open(LocalBackend(root: new), password: password).sealer.isCompact)

        for (target, status) in [(new, StoreOps.ExitStatus.usage), (old, .badData)] {
            do {
                _ = try RepositoryConvert.run(.init(source: new, sourcePassword: password, target: target, password: password))
                Issue.record("converted into \(target)")
            } catch let error as StoreOpsError {
                #expect(error.status == status, "\(error.message)")
            }
        }
    }

    @Test("every command but convert refuses a format-1 or a layout-1 repository with 65 naming repo convert, before asking a password, and changes nothing in it",
          arguments: ["format-1", "layout-1"])
    func oldRepositoriesRefused(_ name: String) throws {
        let old = try folder.oldRepository(name, as: "old")
        func files() -> [String: String] {
            var out: [String: String] = [:]
            for path in FileManager.default.subpaths(atPath: old) ?? [] {
                let full = (old as NSString).appendingPathComponent(path)
                if FileSystem.kind(of: full) == .file { out[path] = (try? Hashing.sha256(ofFile: full)) ?? "?" }
            }
            return out
        }
        let before = files()
        let id = try OldRepositories.expected(name)[0].id
        // A password source that fails if it is asked: the refusal comes first.
        let asked = PasswordSource.command("exit 9")
        let archive = folder.file("x.tar.zst")
        try Data("not read".utf8).write(to: URL(fileURLWithPath: archive))
        let attempts: [(String, () throws -> Void)] = [
            ("list", { _ = try SnapshotSummary.list(repository: old, password: asked) }),
            ("create", { _ = try SnapshotCreate.run(store: store, options: .init(repository: old, password: asked)) }),
            ("restore", { _ = try SnapshotRestore.run(.init(repository: old, id: id, target: .file(folder.file("r.sqlite")))) }),
            ("verify", { _ = try SnapshotVerify.run(.init(repository: old, all: true)) }),
            ("prune", { _ = try SnapshotPrune.run(.init(repository: old, policy: .init(last: 1), password: asked)) }),
            ("export", { _ = try SnapshotExport.run(.init(repository: old, id: id, output: folder.file("e.tar.zst"), password: asked)) }),
            ("import", { _ = try SnapshotImport.run(.init(file: archive, repository: old, password: asked)) }),
            ("check", { _ = try RepositoryCheck.run(.init(location: old, password: asked)) }),
            ("stats", { _ = try RepositoryStats.run(location: old, password: asked) }),
            ("repair", { _ = try RepositoryRepair.run(location: old, password: asked) }),
        ]
        for (what, attempt) in attempts {
            do {
                try attempt()
                Issue.record("\(what) accepted \(name)")
            } catch let error as StoreOpsError {
                #expect(error.status == .badData && (error.hint ?? "").contains("storectl repo convert \(old) --repo NEW"),
                        "\(what): \(error.status.rawValue) \(error.message) \(error.hint ?? "")")
            }
        }
        #expect(files() == before)
    }
}
