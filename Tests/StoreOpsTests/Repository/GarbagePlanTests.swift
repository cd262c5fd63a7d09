import Foundation
@testable import StoreOps
import Testing

/// The pure half of prune's garbage collection, table-driven: indexes, live sets and `data/`
/// listings made by hand in, plans out. No repository is opened.
@Suite("garbage plan: keep, repack, remove")
struct GarbagePlanTests {
    /// An id whose first byte is `n` (ids sort by their bytes, so pack `n` sorts by `n`).
    static func id(_ n: UInt8) -> ContentID {
        ContentID(hex: (n < 16 ? "0" : "") + String(n, radix: 16) + String(repeating: "0", count: 62))!
    }

    /// A frame of blobs `ids` laid end to end, each `length` raw bytes, at `offset` in its pack.
    static func frame(_ ids: [UInt8], length: UInt32 = 100, offset: UInt64 = 0) -> FrameEntry {
        let blobs = ids.enumerated().map { BlobEntry(type: .page, id: id($1), offset: UInt32($0) * length, length: length) }
        return FrameEntry(offset: offset, sealedLength: 50 * UInt32(ids.count), rawLength: length * UInt32(ids.count), blobs: blobs)
    }

    static func pack(_ frames: [[UInt8]]) -> PackContents {
        PackContents(frames: frames.enumerated().map { frame($1, offset: UInt64($0) * 1000) })
    }

    /// An index of `packs` (pack id → its frames' blob ids), in one file, and a listing of
    /// `data/` holding each at `size` bytes.
    static func repository(_ packs: [UInt8: [[UInt8]]], size: UInt64 = 1000) -> (GarbagePlan.Index, [String: UInt64]) {
        var index = GarbagePlan.Index(files: ["index/aa"])
        var stored: [String: UInt64] = [:]
        for (n, frames) in packs {
            index.packs[id(n)] = pack(frames)
            stored[PackBuilder.key(id(n))] = size
        }
        return (index, stored)
    }

    static func live(_ ids: [UInt8]) -> Set<ContentID> { Set(ids.map(id)) }

    @Test("a pack with nothing alive is removed, one at least half alive kept, one less than half alive repacked")
    func decisions() {
        // Blobs 1x belong to pack 1, 2x to pack 2 and so on; four blobs of 100 bytes each.
        let (index, stored) = Self.repository([
            1: [[10, 11], [12, 13]],   // nothing alive
            2: [[20, 21], [22, 23]],   // 2 of 4 alive: exactly half, kept (repacked only below half)
            3: [[30, 31], [32, 33]],   // 1 of 4 alive
            4: [[40, 41], [42, 43]],   // all alive
        ])
        let plan = GarbagePlan.make(index: index, live: Self.live([20, 23, 32, 40, 41, 42, 43]), stored: stored)
        #expect(plan.packs.map(\.id) == [1, 2, 3, 4].map(Self.id), "by id")
        #expect(plan.removed.map(\.id) == [Self.id(1)])
        #expect(plan.kept.map(\.id) == [Self.id(2), Self.id(4)])
        #expect(plan.repacked.map(\.id) == [Self.id(3)])
        #expect(plan.packs.map(\.liveBytes) == [0, 200, 100, 400])
        #expect(plan.unindexed.isEmpty && plan.oldIndexes == ["index/aa"])
    }

    @Test("a repacked pack carries exactly its live blobs, frame by frame; frames with none are not read; a blob two repacked packs hold is carried once, by the first")
    func carry() {
        let (index, stored) = Self.repository([
            5: [[50, 51, 52, 53], [54, 55, 56, 57], [58, 59, 60, 99]],   // 99 is also in pack 6
            6: [[61, 62, 63, 99], [64, 65, 66, 67]],
        ])
        let plan = GarbagePlan.make(index: index, live: Self.live([51, 53, 99, 64]), stored: stored)
        #expect(plan.repacked.map(\.id) == [Self.id(5), Self.id(6)])
        let five = plan.packs[0].carry, six = plan.packs[1].carry
        #expect(five.map(\.frame.offset) == [0, 2000], "the middle frame holds nothing alive")
        #expect(five.map { $0.blobs.map(\.id) } == [[Self.id(51), Self.id(53)], [Self.id(99)]])
        #expect(five[0].blobs.map(\.offset) == [100, 300], "the blobs' places in the frame, as the index says")
        #expect(six.map(\.frame.offset) == [1000], "99 went with pack 5: pack 6's first frame is not read")
        #expect(six.flatMap(\.blobs).map(\.id) == [Self.id(64)])
        #expect(plan.removed.isEmpty && plan.packsToRemove == [Self.id(5), Self.id(6)], "nothing is dead; both go once repacked")
    }

    @Test("a live blob two packs hold is alive in one only: after a prune interrupted once it had repacked (its new pack all alive, the old ones still indexed), the old packs go and the new one stays; each prune repacked them again before, and the copies were never reclaimed (a trial: +37%)")
    func copiesInTwoPacks() {
        let (index, stored) = Self.repository([
            1: [[10, 11, 12, 13]],   // old: 10 alive (a quarter: it was repacked)
            2: [[20, 21, 22, 23]],   // old: 21 alive
            3: [[10, 21]],           // the interrupted prune's new pack: both, all alive
            4: [[40, 41, 10]],       // kept on its own (40, 41), and a copy of 10
        ])
        let plan = GarbagePlan.make(index: index, live: Self.live([10, 21, 40, 41]), stored: stored)
        #expect(plan.kept.map(\.id) == [Self.id(3), Self.id(4)])
        #expect(plan.removed.map(\.id) == [Self.id(1), Self.id(2)], "only copies of blobs pack 3 keeps")
        #expect(plan.repacked.isEmpty)
        #expect(plan.packs.map(\.liveBytes) == [0, 0, 200, 200], "10 is alive in pack 3 only")
        // The same blob in a repacked pack and a kept one: not carried again.
        let (other, otherStored) = Self.repository([5: [[50, 51, 52, 53, 54, 55]], 6: [[60, 50]]])
        let second = GarbagePlan.make(index: other, live: Self.live([50, 60]), stored: otherStored)
        #expect(second.kept.map(\.id) == [Self.id(6)] && second.removed.map(\.id) == [Self.id(5)] && second.repacked.isEmpty)
        // A blob whose home would be repacked while a kept pack holds it stays in the kept pack
        // (a review: copied again, the duplicate stayed for good).
        let (third, thirdStored) = Self.repository([1: [[10, 11]], 2: [[10, 11, 12, 13]], 3: [[12, 30, 31, 32, 33, 34]]])
        let rehomed = GarbagePlan.make(index: third, live: Self.live([10, 11, 12, 30, 31, 32]), stored: thirdStored)
        #expect(rehomed.kept.map(\.id) == [Self.id(1), Self.id(3)] && rehomed.removed.map(\.id) == [Self.id(2)] && rehomed.repacked.isEmpty,
                "\(rehomed.packs.map { ($0.id.hex.prefix(2), $0.action) })")
        // A pack data/ does not list (lost) is no blob's home while a listed pack holds it (a
        // review: the listed copy went, and `repo repair` could no longer get it back).
        var (lost, lostStored) = Self.repository([7: [[70, 71]], 8: [[70, 80, 81, 82]]])
        lostStored.removeValue(forKey: PackBuilder.key(Self.id(7)))
        let withLost = GarbagePlan.make(index: lost, live: Self.live([70, 71, 80]), stored: lostStored)
        let eight = withLost.packs.first { $0.id == Self.id(8) }
        #expect(eight?.action == .keep && eight?.liveBytes == 200, "70 is alive in the listed pack: \(withLost.packs.map { ($0.id.hex.prefix(2), $0.action, $0.liveBytes) })")
    }

    @Test("packs in data/ no index lists are removed, by key; an indexed pack missing from data/ counts 0 bytes")
    func unindexed() {
        var (index, stored) = Self.repository([7: [[70]], 8: [[80]]])
        stored.removeValue(forKey: PackBuilder.key(Self.id(8)))
        stored[PackBuilder.key(Self.id(0xf0))] = 333
        stored[PackBuilder.key(Self.id(0x0f))] = 111
        index.files = ["index/bb", "index/aa"]
        let plan = GarbagePlan.make(index: index, live: Self.live([70]), stored: stored)
        #expect(plan.unindexed == [.init(key: PackBuilder.key(Self.id(0x0f)), storedBytes: 111),
                                   .init(key: PackBuilder.key(Self.id(0xf0)), storedBytes: 333)])
        #expect(plan.packs.map(\.storedBytes) == [1000, 0])
        #expect(plan.oldIndexes == ["index/bb", "index/aa"], "in listing order")
        let report = plan.report(dryRun: false)
        #expect(report.unindexedPacks == 2 && report.deletedPacks == 1 && report.livePacks == 1)
        #expect(report.freedBytes == 444 && report.keptBytes == 1000)
        // A dry run shares the repository with writers: unindexed packs are counted, their bytes not promised.
        let dry = plan.report(dryRun: true)
        #expect(dry.unindexedPacks == 2 && dry.freedBytes == 0)
    }

    @Test("the report: a real run frees each repacked pack whole, a dry run estimates on raw sizes; dead packs go before repacked ones")
    func report() {
        let (index, stored) = Self.repository([
            1: [[10, 11, 12, 13]],   // a quarter alive: repacked
            2: [[20, 21]],           // dead
            3: [[30, 31]],           // kept
            4: [[40, 41, 42, 43]],   // dead
        ], size: 4000)
        let plan = GarbagePlan.make(index: index, live: Self.live([10, 30, 31]), stored: stored)
        #expect(plan.packsToRemove == [Self.id(2), Self.id(4), Self.id(1)], "dead ones by id, then repacked ones by id")
        let real = plan.report(dryRun: false)
        #expect(real == PagedGarbage.Report(livePacks: 1, deletedPacks: 2, repackedPacks: 1, unindexedPacks: 0, removedIndexes: 0,
                                            freedBytes: 3 * 4000, keptBytes: 4000, skipped: nil))
        let dry = plan.report(dryRun: true)
        #expect(dry.freedBytes == 2 * 4000 + 3000, "three quarters of the repacked pack")
        #expect(dry.keptBytes == real.keptBytes && dry.repackedPacks == 1)
    }

    @Test("every live blob survives: in a kept pack or carried exactly once; a removed pack holds nothing alive but copies kept elsewhere (random repositories)",
          arguments: 1...20)
    func liveBlobsSurvive(seed: UInt64) {
        var random = SplitMix(seed: seed)
        var packs: [UInt8: [[UInt8]]] = [:]
        for n in 1...12 {
            // Blob ids from a small pool, so packs share blobs.
            packs[UInt8(n)] = (0..<Int(random.next() % 3 + 1)).map { _ in (0..<Int(random.next() % 4 + 1)).map { _ in UInt8(random.next() % 40) } }
        }
        let (index, stored) = Self.repository(packs)
        let live = Set((0..<40).filter { _ in random.next() % 3 == 0 }.map { Self.id(UInt8($0)) })
        let plan = GarbagePlan.make(index: index, live: live, stored: stored)
        let keptBlobs = Set(plan.kept.flatMap { $0.contents.frames.flatMap { $0.blobs.map(\.id) } })
        let carried = plan.repacked.flatMap { $0.carry.flatMap { $0.blobs.map(\.id) } }
        #expect(Set(carried).count == carried.count, "carried once")
        #expect(Set(carried).isSubset(of: live), "only live blobs are carried")
        let indexedLive = live.filter { blob in packs.values.joined().joined().contains { Self.id($0) == blob } }
        #expect(indexedLive.allSatisfy { keptBlobs.contains($0) || carried.contains($0) })
        // A removed pack holds nothing alive, or only copies of live blobs that stay elsewhere.
        #expect(plan.removed.allSatisfy { $0.liveBytes == 0 && $0.contents.frames.allSatisfy { $0.blobs.allSatisfy { !live.contains($0.id) || keptBlobs.contains($0.id) || carried.contains($0.id) } } })
        #expect(plan.packs.count == packs.count && plan.packs.map(\.id) == plan.packs.map(\.id).sorted())
    }
}

/// A seeded generator, so a failing case can be run again.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
