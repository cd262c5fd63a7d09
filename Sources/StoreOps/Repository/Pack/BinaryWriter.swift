import Foundation

/// Little-endian encoding of a repository's binary objects (pack headers, indexes, page maps).
struct BinaryWriter {
    var data = Data()

    init(capacity: Int = 0) { data.reserveCapacity(capacity) }

    mutating func u8(_ value: UInt8) { data.append(value) }
    mutating func u32(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { data.append(contentsOf: $0) } }
    mutating func u64(_ value: UInt64) { withUnsafeBytes(of: value.littleEndian) { data.append(contentsOf: $0) } }
    /// The id's first `bytes` bytes (16 in layout 2, 32 in layout 1).
    mutating func id(_ value: ContentID, bytes: Int) {
        withUnsafeBytes(of: value.words) { data.append(contentsOf: $0.prefix(bytes)) }
    }
    mutating func bytes(_ value: Data) { data.append(value) }
    mutating func magic(_ text: StaticString) {
        text.withUTF8Buffer { data.append(contentsOf: $0) }
    }
}

/// Reads what `BinaryWriter` wrote, never past the end: a truncated or damaged object is an
/// error naming it (`what`) and the offset, never a crash.
struct BinaryReader {
    let data: Data
    let what: String
    private(set) var offset: Int

    init(_ data: Data, what: String) {
        self.data = data
        self.what = what
        offset = data.startIndex
    }

    var remaining: Int { data.endIndex - offset }
    var isAtEnd: Bool { offset >= data.endIndex }

    private func truncated(_ need: Int) -> StoreOpsError {
        StoreOpsError(.badData, "\(what) is damaged: it ends at byte \(offset - data.startIndex) where \(need) more were expected",
                      hint: Sealer.damagedHint)
    }

    private mutating func take(_ count: Int) throws -> Range<Int> {
        guard count >= 0, remaining >= count else { throw truncated(count) }
        defer { offset += count }
        return offset..<(offset + count)
    }

    mutating func u8() throws -> UInt8 { data[try take(1).lowerBound] }

    mutating func u32() throws -> UInt32 {
        let range = try take(4)
        var value: UInt32 = 0
        withUnsafeMutableBytes(of: &value) { $0.copyBytes(from: data[range]) }
        return UInt32(littleEndian: value)
    }

    mutating func u64() throws -> UInt64 {
        let range = try take(8)
        var value: UInt64 = 0
        withUnsafeMutableBytes(of: &value) { $0.copyBytes(from: data[range]) }
        return UInt64(littleEndian: value)
    }

    /// An id of `bytes` bytes (16 or 32; a 16-byte id is held with its last 16 bytes zero).
    mutating func id(bytes: Int) throws -> ContentID {
        let range = try take(bytes)
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &words) { $0.copyBytes(from: data[range]) }
        return ContentID(words: words)
    }

    mutating func bytes(_ count: Int) throws -> Data { data[try take(count)] }

    mutating func expectMagic(_ text: StaticString) throws {
        let expected = text.withUTF8Buffer { Data($0) }
        let found = try bytes(expected.count)
        guard found == expected else {
            throw StoreOpsError(.badData, "\(what) is not a storectl object of the expected kind (its first bytes are not \(text))",
                                hint: Sealer.damagedHint)
        }
    }

    /// A count read from the object, refused when it could not fit in what is left (each item
    /// at least `itemBytes`): a damaged count never makes storectl allocate gigabytes.
    mutating func count(itemBytes: Int) throws -> Int {
        let n = Int(try u32())
        guard n <= remaining / max(1, itemBytes) else {
            throw StoreOpsError(.badData, "\(what) is damaged: it announces \(n) entries, more than its \(remaining) remaining bytes can hold",
                                hint: Sealer.damagedHint)
        }
        return n
    }
}
