import Foundation

/// A content id: the HMAC-SHA-256 (encrypted repositories) or SHA-256 (plain ones) of a blob,
/// 32 bytes held inline (no allocation: a snapshot's page map holds one per page).
///
/// Repositories of layout 2 use the first 16 bytes of that digest (`Sealer.idBytes`); such an
/// id is held with its last 16 bytes zero and is written as 32 hex digits. Pack and index names
/// (SHA-256 of a whole object) are always whole.
public struct ContentID: Hashable, Sendable, Comparable, CustomStringConvertible, Codable {
    // The 32 bytes in order, as four words loaded from memory (so `withUnsafeBytes(of:)` gives
    // the bytes back in order on any machine).
    var words: (UInt64, UInt64, UInt64, UInt64)

    public static let byteCount = 32
    static let zero = ContentID(words: (0, 0, 0, 0))

    init(words: (UInt64, UInt64, UInt64, UInt64)) { self.words = words }

    /// The id in the first 32 bytes of `bytes` (nil when there are fewer).
    public init?(bytes: UnsafeRawBufferPointer) {
        guard bytes.count >= 32, let base = bytes.baseAddress else { return nil }
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &words) { $0.copyMemory(from: UnsafeRawBufferPointer(start: base, count: 32)) }
        self.words = words
    }

    public init?<D: DataProtocol>(data: D) {
        let bytes = Array(data.prefix(32))
        guard bytes.count == 32 else { return nil }
        guard let id = bytes.withUnsafeBytes({ ContentID(bytes: $0) }) else { return nil }
        self = id
    }

    /// 64 hex digits, or 32 (a 16-byte id: the rest zero).
    public init?(hex: String) {
        let utf8 = Array(hex.utf8)
        guard utf8.count == 64 || utf8.count == 32 else { return nil }
        var bytes = [UInt8](repeating: 0, count: 32)
        for i in 0..<(utf8.count / 2) {
            guard let high = Self.nibble(utf8[2 * i]), let low = Self.nibble(utf8[2 * i + 1]) else { return nil }
            bytes[i] = high << 4 | low
        }
        guard let id = bytes.withUnsafeBytes({ ContentID(bytes: $0) }) else { return nil }
        self = id
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: return c - 0x30
        case 0x61...0x66: return c - 0x61 + 10
        default: return nil
        }
    }

    /// The 32 bytes.
    public var bytes: [UInt8] { withUnsafeBytes(of: words) { Array($0) } }
    public var data: Data { withUnsafeBytes(of: words) { Data($0) } }

    /// True when the last 16 bytes are zero: a layout-2 id of 16 bytes.
    var isShort: Bool { words.2 == 0 && words.3 == 0 }

    /// The id cut to its first `bytes` bytes (16 or 32), the rest zero.
    func truncated(to bytes: Int) -> ContentID { bytes >= 32 ? self : ContentID(words: (words.0, words.1, 0, 0)) }

    /// 64 hex digits; 32 for a 16-byte id.
    public var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        let count = isShort ? 16 : 32
        var out = [UInt8](repeating: 0, count: 2 * count)
        withUnsafeBytes(of: words) { raw in
            for (i, byte) in raw.prefix(count).enumerated() {
                out[2 * i] = digits[Int(byte >> 4)]
                out[2 * i + 1] = digits[Int(byte & 0x0f)]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The first 8 bytes as a number: a compact key for lookups (always confirmed on the whole id).
    var prefix64: UInt64 { words.0 }

    public var description: String { hex }

    public static func == (a: ContentID, b: ContentID) -> Bool {
        a.words.0 == b.words.0 && a.words.1 == b.words.1 && a.words.2 == b.words.2 && a.words.3 == b.words.3
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(words.0)
        hasher.combine(words.1)
    }

    /// Byte order (as the hex sorts).
    public static func < (a: ContentID, b: ContentID) -> Bool {
        // Each word as the number its bytes spell in order: numeric order is byte order.
        let x = (UInt64(bigEndian: a.words.0), UInt64(bigEndian: a.words.1), UInt64(bigEndian: a.words.2), UInt64(bigEndian: a.words.3))
        let y = (UInt64(bigEndian: b.words.0), UInt64(bigEndian: b.words.1), UInt64(bigEndian: b.words.2), UInt64(bigEndian: b.words.3))
        return x < y
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let id = ContentID(hex: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a content id: \(text.prefix(80))"))
        }
        self = id
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(hex)
    }
}
