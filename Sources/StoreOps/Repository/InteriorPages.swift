import Foundation

/// A snapshot's b-tree interior pages (`interior` in its record): the pages whose kind byte is
/// 0x02 or 0x05, recorded as the snapshot is made (`PageStream`), where every page passes by.
///
/// Only `storectl diff` uses it, as a hint: its walks need every interior page, and they are
/// spread over the whole file, so without it every frame of a snapshot is opened to find them;
/// with it, only the frames holding them (`PageStream` packs them apart) and the chunks holding
/// the pages that differ. A page the hint misses is read when a walk needs it, and every page
/// read is checked against its content id, so a wrong hint costs time, never a wrong answer.
/// A record without it (made before it existed, or a milestone whose parent has none) is read
/// as before.
///
/// In the record: `{ "pages": N, "gaps": "<base64>" }`, the page numbers ascending as unsigned
/// LEB128 gaps from 0. A value that does not decode is ignored (the record stays readable).
public struct InteriorPages: Sendable, Codable, Equatable {
    /// The page count it covers.
    var pages: Int
    var gaps: String

    init(_ bits: Bitset, pageCount: Int) {
        var bytes: [UInt8] = []
        var last = 0
        for p in stride(from: 1, through: pageCount, by: 1) where bits[p] {
            var gap = UInt64(p - last)
            last = p
            while gap >= 0x80 {
                bytes.append(UInt8(gap & 0x7F) | 0x80)
                gap >>= 7
            }
            bytes.append(UInt8(gap))
        }
        pages = pageCount
        gaps = Data(bytes).base64EncodedString()
    }

    /// Whether a page looks like a b-tree interior page: its kind byte (after page 1's 100-byte
    /// header) is 0x02 (index) or 0x05 (table).
    @inline(__always)
    static func looksInterior(_ bytes: UnsafeRawBufferPointer, page: UInt32) -> Bool {
        let at = page == 1 ? 100 : 0
        guard at < bytes.count else { return false }
        return bytes[at] == 0x02 || bytes[at] == 0x05
    }

    /// The pages as bits (page p at p), or nil when it is not for `pageCount` pages or does not
    /// decode.
    func bitset(pageCount: Int) -> Bitset? {
        guard pages == pageCount, pageCount >= 0, let data = Data(base64Encoded: gaps) else { return nil }
        var bits = Bitset(count: pageCount + 1)
        var page = 0, gap: UInt64 = 0, shift: UInt64 = 0
        for byte in data {
            guard shift < 63 else { return nil }
            gap |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 != 0 { shift += 7; continue }
            guard gap > 0, gap <= UInt64(pageCount - page) else { return nil }
            page += Int(gap)
            bits[page] = true
            gap = 0
            shift = 0
        }
        return shift == 0 ? bits : nil
    }

    enum CodingKeys: String, CodingKey { case pages, gaps }

    public init(from decoder: any Decoder) throws {
        // Never fails the record: a value of the wrong shape is an empty hint that `bitset`
        // refuses (pages -1).
        let container = try? decoder.container(keyedBy: CodingKeys.self)
        pages = (try? container?.decode(Int.self, forKey: .pages)) ?? -1
        gaps = (try? container?.decode(String.self, forKey: .gaps)) ?? ""
    }
}
