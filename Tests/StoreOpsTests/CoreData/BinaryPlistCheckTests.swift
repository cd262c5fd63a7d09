import Foundation
import GRDB
import StoreLab
@testable import StoreOps
import Testing

/// Foundation's binary plist parser crashes the process on some damaged plists (found by the
/// damaged-pages diff test: SIGSEGV bridging what it parsed). The structure is checked first.
@Suite("damaged binary plists are refused before Foundation parses them")
struct BinaryPlistCheckTests {
    /// `bplist00`, the objects, a one-byte offset table, the trailer.
    static func plist(objects: [[UInt8]], top: Int = 0) -> Data {
        var bytes = Array("bplist00".utf8)
        var offsets: [UInt8] = []
        for object in objects { offsets.append(UInt8(bytes.count)); bytes += object }
        let table = bytes.count
        bytes += offsets
        bytes += [0, 0, 0, 0, 0, 0, 1, 1]
        for value in [objects.count, top, table] { bytes += (0..<8).reversed().map { UInt8((value >> ($0 * 8)) & 0xFF) } }
        return Data(bytes)
    }

    @Test("an array that contains itself, a set, a non-string key, a reference past the end, a length past the end: each a problem; Foundation's own plists pass")
    func structure() throws {
        #expect(BinaryPlistCheck.problem(Self.plist(objects: [[0xA1, 0x00]]))?.contains("contains itself") == true)
        #expect(BinaryPlistCheck.problem(Self.plist(objects: [[0xA1, 0x01], [0xA1, 0x00]]))?.contains("contains itself") == true)
        #expect(BinaryPlistCheck.problem(Self.plist(objects: [[0xC1, 0x01], [0x10, 0x05]])) != nil, "a set")
        #expect(BinaryPlistCheck.problem(Self.plist(objects: [[0xD1, 0x01, 0x01], [0x10, 0x05]]))?.contains("key") == true)
        #expect(BinaryPlistCheck.problem(Self.plist(objects: [[0xA1, 0x07]])) != nil, "a reference to no object")
        #expect(BinaryPlistCheck.problem(Self.plist(objects: [[0x5F, 0x10, 0x7F, 0x41]])) != nil, "a string longer than the data")
        #expect(BinaryPlistCheck.problem(Self.plist(objects: [[0xA2, 0x01, 0x01], [0x51, 0x41]])) == nil, "an object referred to twice is not a cycle")
        // An offset table said to begin near 2^64: the bound was a sum that overflowed (a trap).
        var far = [UInt8](Self.plist(objects: [[0x51, 0x41]]))
        for i in 0..<8 { far[far.count - 8 + i] = i == 7 ? 0xF0 : 0xFF }
        #expect(BinaryPlistCheck.problem(Data(far))?.contains("trailer points outside") == true)
        let real: [String: Any] = ["$objects": ["$null", ["a": 1, "b": [1.5, "x", Data([1, 2, 3])]], "é"], "$top": ["root": 1], "$version": 100_000]
        let data = try PropertyListSerialization.data(fromPropertyList: real, format: .binary, options: 0)
        #expect(BinaryPlistCheck.problem(data) == nil)
        #expect(BinaryPlistCheck.problem(Data("<?xml version=\"1.0\"?><plist/>".utf8)) == nil, "XML is Foundation's to read")
        #expect(throws: StoreOpsError.self) { try KeyedArchive(plist: Self.plist(objects: [[0xA1, 0x00]])) }
    }

    @Test("the real stores' model caches and metadata pass; 400 damaged copies of Notes' model archive (fixed seed) are read or refused, never a crash")
    func realAndDamaged() throws {
        for fixture in Fixture.allCases {
            let folder = try TempFolder()
            let store = try fixture.copy(into: folder)
            let (cache, metadata) = try DatabaseQueue(path: store).read { db in
                (try Data.fetchOne(db, sql: "SELECT Z_CONTENT FROM Z_MODELCACHE"), try Data.fetchOne(db, sql: "SELECT Z_PLIST FROM Z_METADATA"))
            }
            let archive = try Deflate.inflate(try #require(cache))
            #expect(BinaryPlistCheck.problem(archive) == nil, "\(fixture)")
            #expect(BinaryPlistCheck.problem(try #require(metadata)) == nil, "\(fixture)")
            guard fixture == .notes else { continue }
            var seed: UInt64 = 0x5EED
            func next() -> Int { seed = seed &* 6364136223846793005 &+ 1442695040888963407; return Int(seed >> 33) }
            var refused = 0
            for _ in 0..<400 {
                var damaged = [UInt8](archive)
                let at = next() % (damaged.count - 16)
                for i in 0..<(1 + next() % 16) { damaged[at + i] = UInt8(next() & 0xFF) }
                do { _ = try KeyedArchive(plist: Data(damaged)) } catch { refused += 1 }
            }
            #expect(refused > 0, "the damage was seen")
        }
    }
}
