import Foundation
@testable import StoreOps
import Testing

/// The page reader on hand-made bytes: what SQLite writes decodes, what it cannot write is a 65.
@Suite("SQLite's format read from raw pages")
struct SQLitePagesTests {
    /// A 9-byte varint holding `value`.
    func varint9(_ value: UInt64) -> [UInt8] {
        var out: [UInt8] = []
        var rest = value >> 8
        for _ in 0..<8 { out.insert(UInt8(rest & 0x7F) | 0x80, at: 0); rest >>= 7 }
        out.append(UInt8(value & 0xFF))
        return out
    }

    @Test("a record of each serial type decodes; a 9-byte varint reads all 64 bits")
    func record() throws {
        // header: size 7, types: NULL, 1-byte int, float, 0, 1, text(3), blob(2)
        let record: [UInt8] = [8, 0, 1, 7, 8, 9, 19, 16, 0xFE] + [0x3F, 0xF0, 0, 0, 0, 0, 0, 0] + Array("abc".utf8) + [1, 2]
        let values = try SQLitePages.record(record, encoding: 1, what: "test")
        #expect(values == [.null, .integer(-2), .real(1.0), .integer(0), .integer(1), .text("abc"), .blob([1, 2])])
        var at = 0
        let bytes = varint9(0xFFFF_FFFF_FFFF_FFFF)
        #expect(try SQLitePages.varint(bytes, &at, limit: bytes.count, what: "test") == -1 && at == 9)
    }

    @Test("hostile records are 65, never a trap: a serial type near Int64.min, a reserved type, values past the end, a header larger than the record")
    func hostile() throws {
        let huge = varint9(0x8000_0000_0000_0003)   // Int64.min + 3: (type - 12) / 2 would overflow
        let cases: [[UInt8]] = [
            [UInt8(1 + huge.count)] + huge,
            [2, 10],
            [2, 0x81, 0x00, 1, 2],   // a blob of 58 bytes in 5
            [0x7F, 1, 1],
            [],
        ]
        for bytes in cases {
            #expect(throws: StoreOpsError.self) { try SQLitePages.record(bytes, encoding: 1, what: "test") }
        }
    }

    @Test("a header with an impossible page size or reserved space, and a page shorter than its size, are 65")
    func header() throws {
        var page = [UInt8](repeating: 0, count: 100)
        page.replaceSubrange(0..<16, with: Array("SQLite format 3\0".utf8))
        page[16] = 0x10; page[17] = 0x00   // 4096
        #expect(try SQLitePages.Header.parse(page, what: "test").pageSize == 4096)
        page[16] = 0x02; page[20] = 255   // 512-byte pages with 255 reserved: 257 usable, under SQLite's 480
        #expect(throws: StoreOpsError.self) { try SQLitePages.Header.parse(page, what: "test") }
        page[20] = 0; page[16] = 0x03; page[17] = 0x00   // 768: not a power of two
        #expect(throws: StoreOpsError.self) { try SQLitePages.Header.parse(page, what: "test") }
        #expect(throws: StoreOpsError.self) { try SQLitePages.BTreePage(number: 2, bytes: [0x0D] + [UInt8](repeating: 0, count: 100), usable: 4096, what: "test") }
    }
}
