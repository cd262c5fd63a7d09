import Crypto
import Foundation

/// Points in time, as `storectl replicate` records them in a format-2 repository.
///
///     points/<store>/<chain>/<level>-<from>-<to>-<first ms>-<last ms>
///
/// A **chain** starts at a base: a snapshot record (tag `replicate`) of the store at one point,
/// whose id names the chain. Its **segments** hold the commits that followed, in order: commit
/// `n` of the chain is its point `n` (the base is point 0). A segment is one sealed object:
///
///     u32 json bytes | json (`PointSegment`) | [version 3: the commits, below] |
///     per commit: the pages it wrote, then the external-data files that appeared by it
///
/// Up to version 2 the commits are in the JSON (each page's content id in hex); from version 3
/// (what this storectl writes) the JSON's `commits` is empty and they follow it in binary, which
/// a restore reads ~10x faster (decoding the JSON was most of a restore at a point):
///
///     u32 count | per commit: u64 time (ms) | u64 point + 1 (0: none) | u32 frame | u32 page count |
///                             u32 n | n x u32 page | n x content id (the repository's 16 or 32 bytes) |
///                             u32 json bytes | json (`Commit.Extra`: files, removed, notCarried; 0 bytes: none)
///
/// compressed with zstd, then sealed as `points:<store>/<chain>/<level>-<from>-<to>`, so it
/// opens only under its own key. Level 0 segments are written every sync interval; a level 1
/// segment (`PointMerge`) holds consecutive level-0 ones as they were sealed, written while
/// following once a minute's worth is durable (those it holds are then removed; a reader that
/// finds both uses the merged one), so a restore reads at most a minute's small objects and one
/// per minute before. `from`…`to` are the points it holds, the times are the first and
/// last point's (milliseconds since 1970, UTC). The chain's first segment (`0-0-0-…`) holds no
/// commit: it says why the chain began (storectl started, or the gap it follows).
///
/// A chain is continuous by construction: the follower starts a new one (with a new base) as
/// soon as it cannot prove that no commit was missed. Between chains is a gap.
struct PointSegment: Codable, Equatable {
    var format = "storectl-points"
    var version = 1
    /// The newest segment version this storectl reads and writes.
    static let currentVersion = 3
    var host: String
    var path: String
    var chain: String
    var level: Int
    /// The first and last point held (the opening segment: 0 and 0).
    var from: Int
    var to: Int
    var pageSize: Int
    /// Where the follower stood after the last commit (what a restarted follower resumes from).
    var cursor: WalCursor
    var databaseIdentity: [UInt64]?
    var walIdentity: [UInt64]?
    /// The database file's size, modification and change times (ns) and the coarse clock (ns),
    /// from a stat taken just before the read that found the store at `cursor` with nothing
    /// committed after it (`DatabaseFileState`). A follower resumed at an empty -wal compares the
    /// file with it: equal, nothing was written while no follower ran. Absent in segments a
    /// storectl before it wrote, and where no such read preceded the segment.
    var databaseState: [Int64]?
    var commits: [Commit]
    /// The opening segment: why the chain began.
    var opening: Opening?
    /// The follower stopped cleanly after this segment: what follows is not followed.
    var closed: Bool?
    /// A thinned segment (level 2): only the last commit of each this-many seconds is kept, each
    /// with every page its period wrote; its commits carry their own point numbers.
    var thinned: Int?
    /// The follower watched the store's external-data folder for these commits: their `files`
    /// and `removed` are complete (absent in segments written before storectl did so).
    var externalData: Bool?
    /// A digest (`PointDigest`): one commit, numbered `to`, with what the span's commits left.
    var digest: Bool?
    /// A resume marker's span (ms): its name's first and last times (the stop before it, when it
    /// resumed), sealed so a renamed one is found. Absent in markers a storectl before it wrote:
    /// those are not checked.
    var span: [Int64]?

    struct Commit: Codable, Equatable {
        /// When the follower saw this commit as the store's committed state or before (ms).
        var time: Int64
        /// Its point number (thinned segments; otherwise `from` plus its place).
        var point: Int?
        var frame: UInt32
        var pageCount: UInt32
        var pages: [UInt32]
        /// The content id of each page, as restore checks it (hex in a version 1-2 segment's JSON).
        var ids: [ContentID]
        /// External-data files that appeared in the store's folder by this commit (their bytes
        /// follow its pages): the folder is read after the commits a segment holds were read, and
        /// Core Data writes a file before the commit naming it, so a point has every file it names.
        var files: [FileAdd]? = nil
        /// External-data files gone from the folder after this commit: points after it lack them.
        var removed: [String]? = nil
        /// External-data names that appeared by this commit but could not be carried (too large,
        /// unreadable, a folder): points from here on take the files their base lacks from the
        /// store's next snapshot, and a restore says so when there is none.
        var notCarried: [String]? = nil
        /// A digest's commit (`PointDigest`): external-data files gone within its span, removed
        /// before its `files` are added (its `removed` are those gone after its last commit).
        var removedBefore: [String]? = nil
        /// A digest's commit: the fewest pages the database had within its span (the pages past
        /// it that no later commit of the span wrote are gone, as a replay of the span leaves them).
        var truncatedTo: UInt32? = nil

        /// What a version 3 segment keeps of a commit in JSON: the rarely present lists.
        struct Extra: Codable {
            var files: [FileAdd]?
            var removed: [String]?
            var notCarried: [String]?
            var removedBefore: [String]? = nil
            var truncatedTo: UInt32? = nil
            var isEmpty: Bool { files == nil && removed == nil && notCarried == nil && removedBefore == nil && truncatedTo == nil }
        }

        /// A page number no commit over `countBefore` pages can hold, or nil. A commit may hold
        /// pages past its own count (spilled before the transaction shrank the file), but every
        /// page past the count before it is one it grew the file by: it cannot lie further than
        /// all its pages (and the lock-byte page's slack) reach. Page 0 does not exist.
        func impossiblePage(countBefore: Int) -> UInt32? {
            // Twice the larger count: pages of a transaction that grew the file far past its
            // cache and shrank it again may lie beyond the pages it spilled (a review).
            let reach = 2 * max(countBefore, Int(pageCount)) + pages.count + WalFollower.pageSlack
            return pages.first { $0 == 0 || Int($0) > reach }
        }
    }

    struct FileAdd: Codable, Equatable {
        /// The file's name in the external-data folder.
        var name: String
        var bytes: Int
        var sha256: String
    }

    /// The largest external-data file a segment carries (a larger one waits for the next base).
    static let maxFileBytes = 256 << 20

    struct Opening: Codable, Equatable {
        /// "start" (first chain of the store), "resume", "gap", "compaction".
        var kind: String
        var reason: String
        /// The chain this one follows, and its last point's time (ms), when there is one.
        var after: String?
        var afterTime: Int64?

        /// Where `previous` ended when retention thinned it to its base (`prune
        /// --keep-point-bases`): the point this chain continued it from, when past its base.
        func thinnedEnd(of previous: PointTimeline.Chain) -> Int64? {
            guard previous.segments.count == 1 else { return nil }
            return continues(previous)
        }

        /// The point of `previous` this chain continued from (its time), when it did, past its base.
        func continues(_ previous: PointTimeline.Chain) -> Int64? {
            guard kind == "continued" || kind == "compaction", after == nil || after == previous.id,
                  let afterTime, afterTime > previous.baseTime else { return nil }
            return afterTime
        }
    }

    static func storeKey(host: String, path: String) -> String {
        let digest = SHA256.hash(data: Data("\(host)\u{0}\(path)".utf8))
        return digest.prefix(8).map { String(format: "%02x", $0) }.joined()
    }

    var storeKey: String { Self.storeKey(host: host, path: path) }
    /// The opening segment's time: the base's (ms).
    var baseTime: Int64?

    var name: SegmentName {
        SegmentName(store: storeKey, chain: chain, level: level, from: from, to: to, firstTime: commits.first?.time ?? baseTime ?? 0,
                    lastTime: commits.last?.time ?? baseTime ?? 0)
    }

    /// Seals the segment with its contents: per commit, its pages' bytes, then its files' bytes.
    /// - Parameter legacyVersion: write version 1 or 2 (the commits in the JSON), as a storectl
    ///   before version 3 did; tests use it to check that such segments still open.
    func seal(pages: [[UInt8]], sealer: Sealer, zstd: ZstdFrames, name: SegmentName? = nil, legacyVersion: Bool = false) throws -> Data {
        var segment = self
        var table = BinaryWriter(capacity: 0)
        if legacyVersion {
            // Version 2 only where a commit carries files: a storectl that cannot read them refuses
            // the segment ("use a newer storectl") instead of restoring a point without its files.
            segment.version = commits.contains(where: { $0.files?.isEmpty == false || $0.removed?.isEmpty == false || $0.notCarried?.isEmpty == false }) ? 2 : 1
        } else {
            segment.version = Self.currentVersion
            segment.commits = []
            table = BinaryWriter(capacity: 4 + commits.reduce(0) { $0 + 32 + $1.pages.count * (4 + sealer.idBytes) })
            table.u32(UInt32(commits.count))
            for commit in commits {
                table.u64(UInt64(bitPattern: commit.time))
                table.u64(commit.point.map { UInt64($0) + 1 } ?? 0)
                table.u32(commit.frame)
                table.u32(commit.pageCount)
                table.u32(UInt32(commit.pages.count))
                for page in commit.pages { table.u32(page) }
                for id in commit.ids { table.id(id, bytes: sealer.idBytes) }
                let extra = Commit.Extra(files: commit.files, removed: commit.removed, notCarried: commit.notCarried,
                                         removedBefore: commit.removedBefore, truncatedTo: commit.truncatedTo)
                if extra.isEmpty {
                    table.u32(0)
                } else {
                    let json = try JSON.encode(extra)
                    table.u32(UInt32(json.count))
                    table.bytes(json)
                }
            }
        }
        let json = try JSON.encode(segment)
        let total = 4 + json.count + table.data.count + pages.reduce(0) { $0 + $1.count }
        guard total < 1 << 30 else { throw StoreOpsError(.failure, "a point segment of \(Format.bytes(total)) is over the 1 GiB a segment may hold") }
        var plain = BinaryWriter(capacity: total)
        plain.u32(UInt32(json.count))
        plain.bytes(json)
        plain.bytes(table.data)
        for page in pages { plain.bytes(Data(page)) }
        let raw = plain.data
        var framed = BinaryWriter(capacity: 8)
        framed.u32(UInt32(raw.count))
        var out = framed.data
        out.append(try raw.withUnsafeBytes { try zstd.compress($0) })
        return try sealer.seal(out, as: (name ?? self.name).identity)
    }

    /// Opens a segment read from `name`'s key: the segment, its pages (each commit's, in order),
    /// and the bytes of the external-data files its commits carry (in order).
    static func open(_ sealed: Data, name: SegmentName, sealer: Sealer, zstd: ZstdFrames, location: String) throws -> (PointSegment, SegmentPages, [Data]) {
        let what = "point segment \(location)/\(name.key)"
        let framed = try sealer.open(sealed, as: name.identity, what: what)
        var reader = BinaryReader(framed, what: what)
        let rawLength = Int(try reader.u32())
        guard rawLength <= 1 << 30 else { throw StoreOpsError(.badData, "\(what) claims \(rawLength) bytes", hint: Sealer.damagedHint) }
        let raw = try zstd.decompress(Data(framed.dropFirst(4)), rawLength: rawLength, what: what)
        var body = BinaryReader(raw, what: what)
        let jsonLength = Int(try body.u32())
        let json = try body.bytes(jsonLength)
        var segment: PointSegment
        do { segment = try JSON.decoder().decode(PointSegment.self, from: json) } catch {
            throw StoreOpsError(.badData, "\(what) is damaged (\(JSON.describe(error)))", hint: Sealer.damagedHint)
        }
        guard segment.format == "storectl-points", segment.version <= currentVersion else {
            throw StoreOpsError(.badData, "\(what) is not a point segment this storectl reads (version \(segment.version))", hint: "use a newer storectl")
        }
        if segment.version >= 3 {
            guard segment.commits.isEmpty else { throw StoreOpsError(.badData, "\(what) holds its commits twice", hint: Sealer.damagedHint) }
            segment.commits = try readCommits(&body, idBytes: sealer.idBytes, what: what)
        }
        guard segment.chain == name.chain, segment.storeKey == name.store, segment.level == name.level, segment.from == name.from,
              segment.to == name.to, PagedSnapshotRecord.isPageSize(segment.pageSize),
              segment.cursor.pageSize == segment.pageSize || segment.cursor.pageSize == 0, segment.cursor.frame < UInt32.max else {
            throw StoreOpsError(.badData, "\(what) describes \(segment.name.key), not itself", hint: Sealer.damagedHint)
        }
        // The times in a key are not sealed (a listing reads them without opening anything): they
        // must be the content's, or a renamed object would move what a restore claims. (A resume
        // marker's are in its `span`: its first time is the stop before it; digests are checked
        // below.)
        let sealedTimes: (first: Int64, last: Int64)?
        switch name.level {
        case PointDigest.level, PointMilestone.level: sealedTimes = nil
        case PointTimeline.resumedLevel: sealedTimes = segment.span.map { ($0.first ?? -1, $0.count == 2 ? $0[1] : -1) }
        default: sealedTimes = (segment.name.firstTime, segment.name.lastTime)
        }
        if let own = sealedTimes, own.first != name.firstTime || own.last != name.lastTime {
            throw StoreOpsError(.badData, "\(what): its name's times (\(name.firstTime)-\(name.lastTime) ms) are not its content's (\(own.first)-\(own.last) ms): it was renamed",
                                hint: Sealer.damagedHint)
        }
        // A segment of commits holds one per point it names (a thinned one fewer, each numbered; a
        // digest one, numbered its last).
        if name.level == PointDigest.level {
            // Its key's last time is its commit's (a restore picks digests by their keys' times).
            guard segment.digest == true, name.from > 0, segment.commits.count == 1, segment.commits[0].point == name.to,
                  segment.commits[0].time == name.lastTime,
                  segment.commits[0].truncatedTo.map({ $0 <= segment.commits[0].pageCount }) ?? true else {
                throw StoreOpsError(.badData, "\(what) is not a digest of points \(name.from)-\(name.to)", hint: Sealer.damagedHint)
            }
        } else if segment.digest != nil {
            throw StoreOpsError(.badData, "\(what) is a digest under another name", hint: Sealer.damagedHint)
        } else if name.level < PointTimeline.stoppedLevel, name.from > 0 {
            let numbered = segment.commits.allSatisfy { commit in commit.point.map { $0 >= name.from && $0 <= name.to } ?? true }
            guard numbered, segment.thinned != nil ? segment.commits.count <= name.to - name.from + 1 : segment.commits.count == name.to - name.from + 1 else {
                throw StoreOpsError(.badData, "\(what) holds \(segment.commits.count) commits for points \(name.from)-\(name.to)", hint: Sealer.damagedHint)
            }
        }
        var pages = SegmentPages(raw: raw, pageSize: segment.pageSize)
        var files: [Data] = []
        for commit in segment.commits {
            guard commit.pages.count == commit.ids.count, commit.pageCount > 0, commit.pageCount <= 1 << 28, commit.time >= 0,
                  commit.pages.allSatisfy({ $0 >= 1 }) else {
                throw StoreOpsError(.badData, "\(what): commit at frame \(commit.frame) is inconsistent", hint: Sealer.damagedHint)
            }
            for _ in commit.pages {
                pages.offsets.append(body.offset)
                _ = try body.bytes(segment.pageSize)   // a slice, not a copy: checks the page is there
            }
            for file in commit.files ?? [] {
                guard PagedSnapshotRecord.isExternalFileName(file.name), file.bytes >= 0, file.bytes <= maxFileBytes else {
                    throw StoreOpsError(.badData, "\(what): commit at frame \(commit.frame) names the external-data file \(file.name.debugDescription) of \(file.bytes) bytes", hint: Sealer.damagedHint)
                }
                let bytes = try body.bytes(file.bytes)
                guard Hashing.hex(SHA256.hash(data: bytes)) == file.sha256 else {
                    throw StoreOpsError(.badData, "\(what): the external-data file \(file.name) does not match its SHA-256", hint: Sealer.damagedHint)
                }
                files.append(Data(bytes))
            }
            for removed in (commit.removed ?? []) + (commit.removedBefore ?? []) where !PagedSnapshotRecord.isExternalFileName(removed) {
                throw StoreOpsError(.badData, "\(what): commit at frame \(commit.frame) removes the external-data file \(removed.debugDescription)", hint: Sealer.damagedHint)
            }
        }
        guard body.isAtEnd else { throw StoreOpsError(.badData, "\(what): bytes follow its last page", hint: Sealer.damagedHint) }
        return (segment, pages, files)
    }
}

extension PointSegment {
    /// A version 3 segment's commits (its binary table); counts are checked against the bytes left.
    static func readCommits(_ body: inout BinaryReader, idBytes: Int, what: String) throws -> [Commit] {
        let count = try body.count(itemBytes: 32)
        var commits: [Commit] = []
        commits.reserveCapacity(count)
        for _ in 0..<count {
            let time = Int64(bitPattern: try body.u64())
            let point = try body.u64()
            let frame = try body.u32()
            let pageCount = try body.u32()
            let n = try body.count(itemBytes: 4 + idBytes)
            var pages: [UInt32] = []
            pages.reserveCapacity(n)
            for _ in 0..<n { pages.append(try body.u32()) }
            var ids: [ContentID] = []
            ids.reserveCapacity(n)
            for _ in 0..<n { ids.append(try body.id(bytes: idBytes)) }
            guard point < UInt64(Int.max) else { throw StoreOpsError(.badData, "\(what): a commit names point \(point - 1)", hint: Sealer.damagedHint) }
            var commit = Commit(time: time, point: point == 0 ? nil : Int(point - 1), frame: frame, pageCount: pageCount, pages: pages, ids: ids)
            let extraBytes = try body.count(itemBytes: 1)
            if extraBytes > 0 {
                let extra: Commit.Extra
                do { extra = try JSON.decoder().decode(Commit.Extra.self, from: try body.bytes(extraBytes)) } catch let error as StoreOpsError { throw error } catch {
                    throw StoreOpsError(.badData, "\(what) is damaged (\(JSON.describe(error)))", hint: Sealer.damagedHint)
                }
                commit.files = extra.files
                commit.removed = extra.removed
                commit.notCarried = extra.notCarried
                commit.removedBefore = extra.removedBefore
                commit.truncatedTo = extra.truncatedTo
            }
            commits.append(commit)
        }
        return commits
    }
}

/// The pages an opened segment holds, in order (each commit's): read from its decompressed bytes
/// when asked, not copied out all at once (a second's segment of a busy store holds thousands).
struct SegmentPages: RandomAccessCollection {
    let raw: Data
    let pageSize: Int
    /// Where each page starts in `raw`.
    var offsets: [Int] = []

    init(raw: Data, pageSize: Int) {
        self.raw = raw
        self.pageSize = pageSize
    }

    var startIndex: Int { 0 }
    var endIndex: Int { offsets.count }

    subscript(index: Int) -> [UInt8] {
        let start = offsets[index]
        return [UInt8](raw[start..<(start + pageSize)])
    }
}

extension PointSegment {
    /// Opens any segment of commits: a level-1 merge's members in order, or the segment itself.
    static func openAll(_ sealed: Data, name: SegmentName, sealer: Sealer, zstd: ZstdFrames, location: String) throws -> [(PointSegment, SegmentPages, [Data])] {
        guard name.level == PointMerge.level else { return [try open(sealed, name: name, sealer: sealer, zstd: zstd, location: location)] }
        return try PointMerge.members(sealed, name: name, sealer: sealer, location: location).map {
            try open($0.sealed, name: $0.name, sealer: sealer, zstd: zstd, location: location)
        }
    }
}

/// Level 1: consecutive level-0 segments of one chain in one object, each as it was sealed (it
/// still opens only under its own key, so nothing is compressed twice):
///
///     u32 count | per member: u32 key bytes | key | u32 sealed bytes | sealed segment
///
/// sealed as the merged segment's own key. The members must cover exactly its points, in order.
public enum PointMerge {
    public static let level = 1
    /// A merge holds at most this much (sealed); a level-0 segment this size or larger is left as it is.
    static let mergeBytes = 16 << 20
    static let memberBytes = 4 << 20

    static func name(of members: [SegmentName]) -> SegmentName? {
        guard let first = members.first, let last = members.last else { return nil }
        return SegmentName(store: first.store, chain: first.chain, level: level, from: first.from, to: last.to,
                           firstTime: first.firstTime, lastTime: last.lastTime)
    }

    static func seal(_ members: [(name: SegmentName, sealed: Data)], sealer: Sealer) throws -> (SegmentName, Data) {
        guard let name = name(of: members.map(\.name)) else { throw StoreOpsError(.failure, "nothing to merge") }
        var plain = BinaryWriter(capacity: members.reduce(8) { $0 + 6 + $1.name.key.utf8.count + $1.sealed.count })
        plain.u32(UInt32(members.count))
        for member in members {
            let key = Data(member.name.key.utf8)
            plain.u32(UInt32(key.count))
            plain.bytes(key)
            plain.u32(UInt32(member.sealed.count))
            plain.bytes(member.sealed)
        }
        return (name, try sealer.seal(plain.data, as: name.identity))
    }

    static func members(_ sealed: Data, name: SegmentName, sealer: Sealer, location: String) throws -> [(name: SegmentName, sealed: Data)] {
        let what = "point segment \(location)/\(name.key)"
        let plain = try sealer.open(sealed, as: name.identity, what: what)
        var reader = BinaryReader(plain, what: what)
        let count = try reader.count(itemBytes: 8)
        guard count >= 1, count <= name.to - name.from + 1 else {
            throw StoreOpsError(.badData, "\(what) claims \(count) segments for points \(name.from)-\(name.to)", hint: Sealer.damagedHint)
        }
        var out: [(name: SegmentName, sealed: Data)] = []
        var next = name.from
        for _ in 0..<count {
            let keyLength = Int(try reader.u32())
            guard keyLength <= 200 else { throw StoreOpsError(.badData, "\(what) is damaged (a key of \(keyLength) bytes)", hint: Sealer.damagedHint) }
            guard let key = String(data: try reader.bytes(keyLength), encoding: .utf8), let member = SegmentName.parse(key),
                  member.store == name.store, member.chain == name.chain, member.level == 0, member.from == next, member.to <= name.to else {
                throw StoreOpsError(.badData, "\(what): its segment \(out.count + 1) is not the next of its points", hint: Sealer.damagedHint)
            }
            let length = Int(try reader.u32())
            out.append((member, Data(try reader.bytes(length))))
            next = member.to + 1
        }
        guard next == name.to + 1, reader.isAtEnd else {
            throw StoreOpsError(.badData, "\(what): its segments do not hold exactly points \(name.from)-\(name.to)", hint: Sealer.damagedHint)
        }
        // Its key's times are its first and last member's (each member's are checked when opened).
        guard out.first?.name.firstTime == name.firstTime, out.last?.name.lastTime == name.lastTime else {
            throw StoreOpsError(.badData, "\(what): its name's times are not its segments' (it was renamed)", hint: Sealer.damagedHint)
        }
        return out
    }
}

/// A segment's key, parsed.
public struct SegmentName: Equatable, Hashable, Sendable {
    public var store: String
    public var chain: String
    public var level: Int
    public var from: Int
    public var to: Int
    public var firstTime: Int64
    public var lastTime: Int64

    /// Point numbers fit the key's ten digits; times are milliseconds between 1970 and 2200.
    static let maxPoint = 9_999_999_999
    static let maxTime: Int64 = 7_258_118_400_000

    public var key: String {
        func digits(_ n: Int) -> String { let text = String(n); return String(repeating: "0", count: max(0, 10 - text.count)) + text }
        return "points/\(store)/\(chain)/\(levelText)-\(digits(from))-\(digits(to))-\(firstTime)-\(lastTime)"
    }

    /// A digest's keys say `digest` where others say their level: a storectl that does not read
    /// digests does not parse their keys, so it never takes one for a segment of its chain.
    var levelText: String {
        level == PointDigest.level ? "digest" : level == PointMilestone.level ? "milestone" : level == PointTimeline.aliveLevel ? "alive" : String(level)
    }

    var identity: String { "points:\(store)/\(chain)/\(levelText)-\(from)-\(to)" }

    static func parse(_ key: String) -> SegmentName? {
        let parts = key.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "points", parts[1].count == 16, parts[1].allSatisfy(\.isHexDigit),
              SnapshotID.isPlausible(String(parts[2])) else { return nil }
        let fields = parts[3].split(separator: "-")
        let named = ["digest": PointDigest.level, "milestone": PointMilestone.level, "alive": PointTimeline.aliveLevel]
        guard fields.count == 5, let level = named[String(fields[0])] ?? Int(fields[0]).flatMap({ named.values.contains($0) ? nil : $0 }),
              let from = Int(fields[1]), let to = Int(fields[2]),
              let first = Int64(fields[3]), let last = Int64(fields[4]), level >= 0, level <= 9 || level == PointTimeline.aliveLevel, from >= 0, to >= from, to <= maxPoint,
              first >= 0, last >= first, last <= maxTime else { return nil }
        return SegmentName(store: String(parts[1]), chain: String(parts[2]), level: level, from: from, to: to, firstTime: first, lastTime: last)
    }
}

/// Every chain of points in a repository, from segment keys alone (no object is read).
public struct PointTimeline: Sendable {
    public struct Chain: Sendable {
        public var store: String
        public var id: String
        /// The segments to read, in order (merged ones instead of what they cover), the opening first.
        public var segments: [SegmentName]
        public var baseTime: Int64
        public var lastTime: Int64
        public var points: Int { (segments.last?.to ?? 0) + 1 }
        /// Segments a merge made redundant (left by a merge interrupted before it removed them).
        public var redundant: [SegmentName]
        /// Digests of spans of the chain (`PointDigest`), by their first point.
        public var digests: [SegmentName] = []
        /// Milestones of the chain (`PointMilestone`), by their point.
        public var milestones: [SegmentName] = []
        /// Level 8: the follower stopped cleanly at `firstTime`; level 9: it was not following
        /// from `firstTime` to `lastTime` (it resumed the chain then).
        public var markers: [SegmentName] = []
        /// Alive markers (`heartbeat`): the follower confirmed, at `lastTime`, that no commit
        /// came after point `to`. Oldest first; a follower keeps one (a kill can leave two).
        public var alive: [SegmentName] = []

        /// The highest point a stop, resume or alive marker names beyond the segments found (a
        /// segment missing: removed by hand, or lost): nil when the segments reach every named point.
        public var missingThrough: Int? {
            let named = (markers + alive).map(\.to).max() ?? 0
            return named > points - 1 ? named : nil
        }

        /// How far the chain is known to cover: its last point, a clean stop at it, or the
        /// newest alive marker at it (no commit came before that time).
        public var confirmedUntil: Int64 {
            // The newest clean stop at the last point, also when a resume came after it and was
            // killed before it wrote a point (the stop's claim stands; the listing said so and
            // restore refused it).
            let stop = lastStop?.firstTime
            let heard = alive.filter { $0.to == points - 1 }.map(\.lastTime).max()
            return max(lastTime, stop ?? 0, heard ?? 0)
        }

        /// The newest stop marker at the chain's last point.
        var lastStop: SegmentName? {
            markers.filter { $0.level == PointTimeline.stoppedLevel && $0.to == points - 1 }.max { $0.firstTime < $1.firstTime }
        }

        /// Stopped cleanly (its last marker a stop): no follower is expected to add to it.
        public var stopped: Bool { markers.last?.level == PointTimeline.stoppedLevel }

        /// The database file's state the chain's last confirmation recorded (its stop marker, its
        /// newest alive marker, or its last segment `last`, whichever is latest), when it was
        /// recorded at `last`'s cursor; nil otherwise (a marker that cannot be read included).
        /// What a resumed follower, and a safety snapshot taken from the chain's last point,
        /// hold the file against.
        func confirmingState(last: PointSegment, in repository: PagedRepository, zstd: ZstdFrames) -> DatabaseFileState? {
            let until = confirmedUntil
            var source = last
            if until > lastTime {
                let stop = lastStop.flatMap { $0.firstTime == until ? $0 : nil }
                guard let name = stop ?? alive.last(where: { $0.to == points - 1 && $0.lastTime == until }),
                      let sealed = try? repository.backend.read(name.key),
                      let (marker, _, _) = try? PointSegment.open(sealed, name: name, sealer: repository.sealer, zstd: zstd, location: repository.location) else { return nil }
                source = marker
            }
            guard source.cursor.samePosition(as: last.cursor) else { return nil }
            return DatabaseFileState(recorded: source.databaseState)
        }

        /// The spans of this chain in which no commit is claimed: from a clean stop to the next
        /// resume (or on), and each resume's span; `point`: the chain's last point before it;
        /// `stopped`: it began with a clean stop (else the follower was killed or its machine
        /// went down, and the span runs from its last confirmation to the resume).
        var unfollowed: [(from: Int64, to: Int64?, point: Int, stopped: Bool)] {
            var spans: [(from: Int64, to: Int64?, point: Int, stopped: Bool)] = []
            for marker in markers {
                if marker.level == PointTimeline.resumedLevel {
                    if let open = spans.last, open.to == nil { spans[spans.count - 1].to = marker.lastTime } else {
                        // A follower killed after it resumed from a clean stop: this resume's span
                        // begins at that stop, over the span said already; it begins where that
                        // one ended (the listing showed the time between as covered).
                        var from = marker.firstTime
                        if let previous = spans.last?.to, from < previous { from = previous }
                        guard from < marker.lastTime else { continue }
                        spans.append((from, marker.lastTime, marker.to, false))
                    }
                } else {
                    spans.append((marker.firstTime, nil, marker.to, true))
                }
            }
            return spans
        }
    }

    static let stoppedLevel = 8
    static let resumedLevel = 9
    /// Its keys say `alive` (a storectl before them does not parse them, so never reads one as a stop).
    static let aliveLevel = 10

    public var chains: [Chain]

    public static func load(_ repository: PagedRepository, store: String? = nil) throws -> PointTimeline {
        var byChain: [String: [SegmentName]] = [:]
        for (key, _) in try repository.backend.list(store.map { "points/\($0)/" } ?? "points/") {
            guard let name = SegmentName.parse(key) else { continue }
            byChain["\(name.store)/\(name.chain)", default: []].append(name)
        }
        var chains: [Chain] = []
        for (_, names) in byChain {
            guard let opening = names.first(where: { $0.level == 0 && $0.from == 0 && $0.to == 0 }) else { continue }   // not begun
            // The path of consecutive segments from point 1 that reaches furthest (a tie goes to
            // fewer, higher-level segments: what a thinning or merge wrote); what it leaves out but
            // covers is redundant (written before its replacement's removals finished); what lies
            // past its end is left alone (a hole, never read as if continuous).
            let data = names.filter { $0.from > 0 && $0.level < Self.stoppedLevel && $0.level != PointDigest.level && $0.level != PointMilestone.level }.sorted { ($0.from, $0.to) < ($1.from, $1.to) }
            var best: [Int: [SegmentName]] = [0: []]
            for segment in data {
                guard let before = best[segment.from - 1] else { continue }
                let path = before + [segment]
                if let current = best[segment.to] {
                    let better = path.count < current.count || (path.count == current.count && path.map(\.level).reduce(0, +) > current.map(\.level).reduce(0, +))
                    if better { best[segment.to] = path }
                } else {
                    best[segment.to] = path
                }
            }
            let end = best.keys.max() ?? 0
            let chosen: [SegmentName] = [opening] + (best[end] ?? [])
            var redundant: [SegmentName] = []
            let markers = names.filter { $0.level == Self.stoppedLevel || $0.level == Self.resumedLevel }.sorted { $0.lastTime < $1.lastTime }
            let alive = names.filter { $0.level == Self.aliveLevel }.sorted { $0.lastTime < $1.lastTime }
            let used = Set(chosen + markers)
            for name in data where !used.contains(name) && name.to <= end { redundant.append(name) }
            let digests = names.filter { $0.level == PointDigest.level }.sorted { ($0.from, $0.to) < ($1.from, $1.to) }
            let milestones = names.filter { $0.level == PointMilestone.level }.sorted { ($0.to, $0.lastTime) < ($1.to, $1.lastTime) }
            chains.append(Chain(store: opening.store, id: opening.chain, segments: chosen, baseTime: opening.firstTime,
                                lastTime: chosen.last?.lastTime ?? opening.firstTime, redundant: redundant, digests: digests,
                                milestones: milestones, markers: markers, alive: alive))
        }
        chains.sort { ($0.store, $0.baseTime, $0.id) < ($1.store, $1.baseTime, $1.id) }
        return PointTimeline(chains: chains)
    }

    func chains(of store: String) -> [Chain] { chains.filter { $0.store == store } }
}

/// What `snapshot list` says of a store's points: the spans covered (every commit in them a
/// point) and what lies between (a gap, or a span storectl was not following).
public struct StorePoints: Sendable, Codable {
    public var store: String
    public var host: String
    public var spans: [Span]
    /// The newest point's time (a covered span may go on past it: the follower was watching, and
    /// no commit came, until it stopped).
    public var newestPoint: Date?
    public var points: Int { spans.filter { $0.kind == "covered" || $0.kind == "thinned" }.reduce(0) { $0 + ($1.points ?? 0) } }
    /// `points` is a lower bound (a thinned span's count is).
    public var pointsAtLeast: Bool { spans.contains { $0.pointsAtLeast == true } }

    public struct Span: Sendable, Codable {
        /// "covered" (every commit a point), "thinned" (the last commit of each minute), "gap"
        /// (continuity could not be proven), "not followed" (storectl was stopped; open-ended
        /// when `to` is nil), "unconfirmed" (after the newest chain's last point or alive marker,
        /// while it is not stopped: its follower may be running, or gone).
        public var kind: String
        public var from: Date
        public var to: Date?
        public var points: Int?
        public var chain: String?
        public var reason: String?
        /// A thinned span's `points` is a lower bound: the base, the points of its segments not
        /// thinned, and one for each thinned segment (each holds one commit a minute at least;
        /// how many, only reading it says).
        public var pointsAtLeast: Bool?
    }

    /// Every store's points in the repository.
    public static func list(repository path: String, password: PasswordSource = .resolve(file: nil),
                            filter: SnapshotFilter = .all) throws -> [StorePoints] {
        let repository = try PagedRepository.open(at: path, password: password)
        let points = try list(repository, filter: filter)
        if points.isEmpty, !filter.isAll, try SnapshotSummary.list(repository, filter: filter).isEmpty {
            try SnapshotSummary.requireMatch(repository, filter: filter, points: points)
        }
        return points
    }

    /// Each store with points, as "PATH (host H)", sorted: for messages (none when they cannot be listed).
    static func names(in repository: PagedRepository) -> [String] {
        ((try? list(repository)) ?? []).map { "\($0.store) (host \($0.host))" }.sorted()
    }

    static func list(_ repository: PagedRepository, filter: SnapshotFilter = .all) throws -> [StorePoints] {
        let timeline = try PointTimeline.load(repository)
        let zstd = try ZstdFrames(level: 3)
        var out: [StorePoints] = []
        for key in Set(timeline.chains.map(\.store)).sorted() {
            var entry: StorePoints?
            var previous: PointTimeline.Chain?
            for chain in timeline.chains(of: key) {
                guard let name = chain.segments.first, let sealed = try repository.backend.read(name.key) else { continue }
                let opening = try PointSegment.open(sealed, name: name, sealer: repository.sealer, zstd: zstd, location: repository.location).0
                guard filter.matches(host: opening.host, path: opening.path) else { break }
                if entry == nil { entry = StorePoints(store: opening.path, host: opening.host, spans: []) }
                // A chain thinned to its base (`prune --keep-point-bases`) said "covered X to X, 1
                // point": the chain after it names the point it continued from, the old chain's
                // end, so the span up to there is listed as thinned (a restore there answers the base).
                if let previous, let end = opening.opening?.thinnedEnd(of: previous),
                   let i = entry?.spans.lastIndex(where: { $0.chain == previous.id && ($0.kind == "covered" || $0.kind == "thinned") }),
                   entry?.spans[i].to.map({ Replicate.ms($0) <= previous.baseTime }) ?? true {
                    entry?.spans[i].kind = "thinned"
                    entry?.spans[i].to = PointRestore.date(end)
                    entry?.spans[i].reason = "retention kept only its base"
                }
                if let previous, let last = entry?.spans.last(where: { $0.kind == "covered" || $0.kind == "thinned" }),
                   let reason = try PointRestore.continuityBreak(from: previous, to: chain, in: repository) {
                    if let open = entry?.spans.indices.last, entry?.spans[open].kind == "not followed", entry?.spans[open].to == nil {
                        // Stopped cleanly, then a chain that could not continue this one: from the
                        // stop to its base is a gap (what restore says of a time in it), and why.
                        entry?.spans[open].kind = "gap"
                        entry?.spans[open].to = PointRestore.date(chain.baseTime)
                        entry?.spans[open].reason = "storectl was stopped, then: \(reason)"
                    } else {
                        entry?.spans.append(Span(kind: "gap", from: last.to ?? last.from, to: PointRestore.date(chain.baseTime), reason: reason))
                    }
                }
                previous = chain
                let newest = max(entry?.newestPoint ?? .distantPast, PointRestore.date(chain.lastTime))
                entry?.newestPoint = newest
                let chainStart = entry?.spans.count ?? 0
                // The chain's covered spans, cut where it was not followed.
                let kind = chain.segments.contains { $0.level == PointThinning.level } ? "thinned" : "covered"
                var from = chain.baseTime
                var points = 0
                let unfollowed = chain.unfollowed
                // A thinned segment holds fewer points than it spans: its name cannot say how many.
                for segment in chain.segments.dropFirst() where segment.level != PointThinning.level { points += segment.to - segment.from + 1 }
                // Points per covered span, from the point numbers the stop and resume markers name
                // (the base is point 0); a thinned chain's count, on its first span.
                let perSpan = kind == "covered"
                var before = -1
                for span in unfollowed where span.from >= from {
                    let count = perSpan ? max(0, min(span.point, chain.points - 1) - before) : nil
                    // None between two spans not followed (a stop, then a follower killed after it resumed).
                    if span.from > from || (count ?? 1) > 0 {
                        entry?.spans.append(Span(kind: kind, from: PointRestore.date(from), to: PointRestore.date(span.from), points: count, chain: chain.id))
                    }
                    entry?.spans.append(Span(kind: "not followed", from: PointRestore.date(span.from), to: span.to.map(PointRestore.date),
                                             reason: span.stopped ? "storectl replicate was stopped"
                                                : "storectl replicate was not running (killed, or its machine went down) until it resumed"))
                    before = max(before, min(span.point, chain.points - 1))
                    guard let to = span.to else { from = .max; break }
                    from = to
                }
                // Not after a resume nothing confirmed since (a follower killed between its resume
                // marker and its first segment): the store at the resume held commits no point
                // holds, and restore refuses that time (the listing said "covered" there).
                if from != .max, chain.confirmedUntil >= from {
                    entry?.spans.append(Span(kind: kind, from: PointRestore.date(from), to: PointRestore.date(chain.confirmedUntil),
                                             points: perSpan ? max(0, chain.points - 1 - before) : nil, chain: chain.id))
                }
                if !perSpan, let index = entry?.spans.firstIndex(where: { $0.chain == chain.id }) {
                    entry?.spans[index].points = points + 1 + chain.segments.dropFirst().filter { $0.level == PointThinning.level }.count
                    entry?.spans[index].pointsAtLeast = true
                }
                // A stop or resume marker names points the segments found do not reach (a segment
                // removed or lost): nothing after the last point found is covered, as restore says.
                if let missing = chain.missingThrough, var spans = entry?.spans[chainStart...].map({ $0 }) {
                    let cut = PointRestore.date(chain.lastTime)
                    spans = spans.compactMap { span in
                        guard span.kind == "covered" || span.kind == "thinned" else { return span }
                        guard span.from <= cut else { return nil }
                        var span = span
                        if let to = span.to, to > cut { span.to = cut }
                        return span
                    }
                    let next = spans.first { $0.kind == "not followed" && $0.from > cut }?.from
                    let gap = Span(kind: "gap", from: cut, to: next, chain: chain.id,
                                   reason: "points \(chain.points)…\(missing) of chain \(chain.id) are not in the repository (a segment is missing)")
                    let at = (spans.lastIndex { $0.kind == "covered" || $0.kind == "thinned" }).map { $0 + 1 } ?? 0
                    spans.insert(gap, at: at)
                    entry?.spans.replaceSubrange(chainStart..., with: spans)
                }
            }
            // The newest chain, not stopped: what came after its last confirmation is not claimed
            // (what `restore --at` refuses there).
            if let newest = previous, !newest.stopped, newest.missingThrough == nil, entry != nil {
                entry?.spans.append(Span(kind: "unconfirmed", from: PointRestore.date(newest.confirmedUntil), to: nil, chain: newest.id,
                                         reason: "not confirmed yet: a running replicate confirms at each point and while the store is idle; a stopped one no longer does"))
            }
            if let entry { out.append(entry) }
        }
        return out
    }
}
