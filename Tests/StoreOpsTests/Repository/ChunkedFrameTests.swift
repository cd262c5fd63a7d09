import Foundation
@testable import StoreOps
import Testing

@Suite("page frames in chunks, and a snapshot's interior pages")
struct ChunkedFrameTests {
    /// Pages that compress (repeated text with their number), as a store's would.
    func pages(_ count: Int, size: Int = 4096) -> Data {
        var data = Data()
        for p in 0..<count {
            var page = [UInt8](repeating: 0, count: size)
            let text = Array("page \(p) of a store, some text that repeats; ".utf8)
            for i in 0..<size { page[i] = text[i % text.count] }
            data.append(contentsOf: page)
        }
        return data
    }

    @Test("a frame compressed in chunks decompresses whole as one stream (as readers that know nothing of chunks read it), and a part decompresses only the chunks holding it, to the same bytes there")
    func chunks() throws {
        let zstd = try ZstdFrames(level: 3)
        let raw = pages(256)
        let chunked = try raw.withUnsafeBytes { try zstd.compress($0, chunkBytes: PageStream.chunkBytes(pageSize: 4096)) }
        let single = try raw.withUnsafeBytes { try zstd.compress($0) }
        #expect(chunked.count != single.count)
        #expect(try zstd.decompress(chunked, rawLength: raw.count, what: "test") == raw)
        let before = zstd.bytesDecompressed
        // Pages 3 and 200: the two chunks holding them.
        let chunk = PageStream.chunkBytes(pageSize: 4096)
        #expect(raw.count / chunk >= 4)
        let wanted = [3 * 4096..<(4 * 4096), 200 * 4096..<(201 * 4096)]
        try zstd.withDecompressed(chunked, rawLength: raw.count, only: wanted, what: "test") { plain in
            for range in wanted { #expect(plain[range] == raw[range]) }
        }
        // Each chunk up to the last page wanted in it: page 3 of the first (4 pages), page 200 of
        // the fourth, its ninth (9 pages).
        #expect(chunk == 64 * 4096 && zstd.bytesDecompressed - before == (4 + 9) * 4096)
        // Pages at a chunk's end, and a range across two chunks: those chunks whole, the same bytes.
        let across = [63 * 4096..<(65 * 4096), 255 * 4096..<(256 * 4096)]
        let acrossBefore = zstd.bytesDecompressed
        try zstd.withDecompressed(chunked, rawLength: raw.count, only: across, what: "test") { plain in
            for range in across { #expect(plain[range] == raw[range]) }
        }
        #expect(zstd.bytesDecompressed - acrossBefore == chunk + 4096 + chunk)
        // Prefixes and whole chunks of one frame in turn, many times: the context is reset between.
        for round in 0..<20 {
            let page = (round * 37) % 256
            let one = [page * 4096..<((page + 1) * 4096)]
            try zstd.withDecompressed(chunked, rawLength: raw.count, only: one + across, what: "test") { plain in
                for range in one + across { #expect(plain[range] == raw[range], "round \(round), page \(page)") }
            }
        }
        // A frame of one zstd frame (every frame written before chunks): whole, whatever is wanted.
        let whole = zstd.bytesDecompressed
        try zstd.withDecompressed(single, rawLength: raw.count, only: wanted, what: "test") { plain in
            for range in wanted { #expect(plain[range] == raw[range]) }
        }
        #expect(zstd.bytesDecompressed - whole == raw.count)
        // Chunks that do not add up to the frame's length, or a damaged chunk: 65, naming it.
        for (input, length) in [(chunked, raw.count + 4096), (chunked.prefix(chunked.count - 100), raw.count)] {
            #expect(throws: StoreOpsError.self) {
                try zstd.withDecompressed(Data(input), rawLength: length, only: wanted, what: "frame X") { _ in }
            }
        }
    }

    @Test("interior pages: a list round-trips through its record form; one for another page count, or damaged, is no list (nil), never a trap")
    func interiorList() throws {
        var bits = Bitset(count: 300_001)
        let chosen = [1, 2, 3, 130, 131, 16_511, 200_000, 300_000]
        for p in chosen { bits[p] = true }
        let list = InteriorPages(bits, pageCount: 300_000)
        let decoded = try #require(list.bitset(pageCount: 300_000))
        #expect((1...300_000).filter { decoded[$0] } == chosen)
        #expect(list.bitset(pageCount: 299_999) == nil)
        let record = try JSONDecoder().decode(InteriorPages.self, from: try JSONEncoder().encode(list))
        #expect(record == list)
        for json in [#"{"pages": 10, "gaps": "not base64!"}"#, #"{"pages": 10, "gaps": "/////w=="}"#, #"{"pages": 2, "gaps": "AQEB"}"#,
                     #"{"pages": "ten"}"#, #"12"#, #"{}"#, #"{"pages": 10, "gaps": "gA=="}"#] {
            let odd = try JSONDecoder().decode(InteriorPages.self, from: Data(json.utf8))
            #expect(odd.bitset(pageCount: 10) == nil && odd.bitset(pageCount: 2) == nil, "\(json)")
        }
        // Page 1's kind byte follows its 100-byte header.
        var page1 = [UInt8](repeating: 0, count: 4096)
        page1[0] = 0x05
        #expect(!page1.withUnsafeBytes { InteriorPages.looksInterior($0, page: 1) })
        page1[100] = 0x05
        #expect(page1.withUnsafeBytes { InteriorPages.looksInterior($0, page: 1) })
        #expect([UInt8]([0x02, 0, 0]).withUnsafeBytes { InteriorPages.looksInterior($0, page: 9) })
        #expect(![UInt8]([0x0D, 0, 0]).withUnsafeBytes { InteriorPages.looksInterior($0, page: 9) })
    }
}
