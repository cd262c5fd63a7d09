import Foundation

/// SQLite's file format, read from raw pages (https://sqlite.org/fileformat2.html): the
/// database header, b-tree pages and their cells, overflow chains and records. Everything here
/// reads bytes that came from outside: a damaged page is an error naming it (exit 65), never a
/// trap.
enum SQLitePages {
    /// A page or record that cannot be what it claims: the side (a store, a backup, a snapshot's
    /// page) is damaged. Says so, and where to look.
    static func damaged(_ what: String, _ detail: String) -> StoreOpsError {
        StoreOpsError(.badData, "\(what) is damaged: \(detail)",
                      hint: "`storectl preflight --full FILE` says which tables of a store or backup are damaged (`storectl snapshot verify ID` for a snapshot); "
                          + "restore it from a backup, a snapshot or a point")
    }

    /// What page 1's first 100 bytes say.
    struct Header: Sendable, Equatable {
        var pageSize: Int
        /// Bytes of each page that b-trees use (page size minus the reserved bytes at the end).
        var usable: Int
        /// 1 UTF-8, 2 UTF-16le, 3 UTF-16be.
        var textEncoding: Int
        var freelistTrunk: UInt32
        var freelistCount: UInt32
        /// Non-zero in auto-vacuum stores (pointer-map pages).
        var largestRootPage: UInt32
        /// `PRAGMA user_version` and `PRAGMA application_id` (many apps keep their schema's
        /// version in the first).
        var userVersion: Int32 = 0
        var applicationID: Int32 = 0
        /// The header's page count, when SQLite would trust it (non-zero, and written by the same
        /// change as the header's change counter); the file may be longer (an app that sets
        /// `SQLITE_FCNTL_CHUNK_SIZE` grows it in chunks).
        var databaseSize: UInt32?

        static func parse(_ page: [UInt8], what: String) throws -> Header {
            guard page.count >= 100, page.starts(with: Array("SQLite format 3\0".utf8)) else {
                throw StoreOpsError(.badData, "\(what) is not a SQLite database (its first page has no SQLite header)")
            }
            let raw = Int(be16(page, 16))
            let pageSize = raw == 1 ? 65_536 : raw
            guard pageSize >= 512, pageSize <= 65_536, pageSize & (pageSize - 1) == 0 else {
                throw SQLitePages.damaged(what, "its header gives page size \(raw)")
            }
            let reserved = Int(page[20])
            guard pageSize - reserved >= 480 else {
                throw SQLitePages.damaged(what, "its header reserves \(reserved) bytes of each \(pageSize)-byte page, more than SQLite allows")
            }
            let encoding = Int(be32(page, 56))
            return Header(pageSize: pageSize, usable: pageSize - reserved, textEncoding: encoding == 0 ? 1 : encoding,
                          freelistTrunk: be32(page, 32), freelistCount: be32(page, 36), largestRootPage: be32(page, 52),
                          userVersion: Int32(bitPattern: be32(page, 60)), applicationID: Int32(bitPattern: be32(page, 68)),
                          databaseSize: be32(page, 28) != 0 && be32(page, 24) == be32(page, 92) ? be32(page, 28) : nil)
        }
    }

    enum PageKind: UInt8 {
        case indexInterior = 0x02, tableInterior = 0x05, indexLeaf = 0x0A, tableLeaf = 0x0D
        var isLeaf: Bool { self == .indexLeaf || self == .tableLeaf }
        var isTable: Bool { self == .tableInterior || self == .tableLeaf }
    }

    /// One b-tree page, parsed lazily from its bytes.
    struct BTreePage {
        let number: UInt32
        let bytes: [UInt8]
        let kind: PageKind
        /// Where the b-tree header starts (100 on page 1).
        let headerOffset: Int
        let cellCount: Int
        let usable: Int
        let what: String

        init(number: UInt32, bytes: [UInt8], usable: Int, what: String) throws {
            self.number = number
            self.bytes = bytes
            self.usable = usable
            self.what = what
            headerOffset = number == 1 ? 100 : 0
            guard bytes.count >= usable else {
                throw SQLitePages.damaged(what, "page \(number) is \(bytes.count) bytes, shorter than its header's page size")
            }
            guard bytes.count >= headerOffset + 12, let kind = PageKind(rawValue: bytes[headerOffset]) else {
                throw SQLitePages.damaged(what, "page \(number) is not a b-tree page (type byte \(bytes.count > headerOffset ? String(bytes[headerOffset]) : "missing"))")
            }
            self.kind = kind
            cellCount = Int(be16(bytes, headerOffset + 3))
            let pointers = headerOffset + (kind.isLeaf ? 8 : 12)
            guard pointers + 2 * cellCount <= usable else {
                throw SQLitePages.damaged(what, "page \(number) claims \(cellCount) cells, more than fit")
            }
        }

        /// Where cell `i` starts.
        func cellOffset(_ i: Int) throws -> Int {
            let offset = Int(be16(bytes, headerOffset + (kind.isLeaf ? 8 : 12) + 2 * i))
            guard offset >= headerOffset + 8, offset < usable else {
                throw SQLitePages.damaged(what, "cell \(i) of page \(number) points outside the page (\(offset))")
            }
            return offset
        }

        /// An interior page's children, in key order (the right-most last).
        func children() throws -> [UInt32] {
            guard !kind.isLeaf else { return [] }
            var out: [UInt32] = []
            out.reserveCapacity(cellCount + 1)
            for i in 0..<cellCount {
                let offset = try cellOffset(i)
                guard offset + 4 <= usable else { throw SQLitePages.damaged(what, "cell \(i) of page \(number) is cut short") }
                out.append(be32(bytes, offset))
            }
            out.append(be32(bytes, headerOffset + 8))
            return out
        }

        /// A leaf cell (table leaf: rowid and payload; index pages: the payload), with how much of
        /// the payload is on this page and the first overflow page.
        struct Cell {
            var rowid: Int64
            var payloadSize: Int
            var localStart: Int
            var localSize: Int
            var overflow: UInt32
        }

        func cell(_ i: Int) throws -> Cell {
            var at = try cellOffset(i)
            if kind == .indexInterior { at += 4 }
            guard kind != .tableInterior else { throw SQLitePages.damaged(what, "page \(number) holds no rows") }
            let size = try varint(bytes, &at, limit: usable, what: what)
            guard size >= 0, size <= 1 << 31 else { throw SQLitePages.damaged(what, "a cell of page \(number) claims \(size) bytes") }
            var rowid: Int64 = 0
            if kind == .tableLeaf { rowid = try varint(bytes, &at, limit: usable, what: what) }
            let payload = Int(size)
            let local = SQLitePages.localSize(payload: payload, usable: usable, table: kind == .tableLeaf)
            guard at + local + (local < payload ? 4 : 0) <= usable else {
                throw SQLitePages.damaged(what, "a cell of page \(number) runs past the page's end")
            }
            let overflow = local < payload ? be32(bytes, at + local) : 0
            return Cell(rowid: rowid, payloadSize: payload, localStart: at, localSize: local, overflow: overflow)
        }
    }

    /// How many bytes of a payload are stored on the b-tree page itself.
    static func localSize(payload: Int, usable: Int, table: Bool) -> Int {
        let maxLocal = table ? usable - 35 : ((usable - 12) * 64 / 255) - 23
        guard payload > maxLocal else { return payload }
        let minLocal = ((usable - 12) * 32 / 255) - 23
        let k = minLocal + (payload - minLocal) % (usable - 4)
        return k <= maxLocal ? k : minLocal
    }

    /// A value of a record.
    /// A value as stored. Equal means the same stored value: reals by their bits (-0.0 is not
    /// 0.0: a trial's diff called them the same), text by its bytes (Swift's `String ==` takes an
    /// é of one code point for e and a combining accent: two different values in the file).
    enum Value: Sendable, Equatable, Hashable {
        case null
        case integer(Int64)
        case real(Double)
        case text(String)
        case blob([UInt8])

        static func == (x: Value, y: Value) -> Bool {
            switch (x, y) {
            case (.null, .null): return true
            case (.integer(let p), .integer(let q)): return p == q
            case (.real(let p), .real(let q)): return p.bitPattern == q.bitPattern
            case (.text(let p), .text(let q)): return p.utf8.elementsEqual(q.utf8)
            case (.blob(let p), .blob(let q)): return p == q
            default: return false
            }
        }

        func hash(into hasher: inout Hasher) {
            switch self {
            case .null: hasher.combine(0 as UInt8)
            case .integer(let n): hasher.combine(1 as UInt8); hasher.combine(n)
            case .real(let r): hasher.combine(2 as UInt8); hasher.combine(r.bitPattern)
            case .text(let t):
                hasher.combine(3 as UInt8)
                var t = t
                t.withUTF8 { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
            case .blob(let b): hasher.combine(4 as UInt8); hasher.combine(b)
            }
        }
    }

    /// Decodes a record (https://sqlite.org/fileformat2.html#record_format).
    static func record(_ payload: [UInt8], encoding: Int, what: String) throws -> [Value] {
        var at = 0
        let headerSize = try varint(payload, &at, limit: payload.count, what: what)
        guard headerSize >= 1, headerSize <= payload.count else { throw SQLitePages.damaged(what, "a record's header claims \(headerSize) bytes") }
        var types: [Int64] = []
        while at < Int(headerSize) { types.append(try varint(payload, &at, limit: Int(headerSize), what: what)) }
        var body = Int(headerSize)
        var values: [Value] = []
        values.reserveCapacity(types.count)
        for type in types {
            let length: Int
            switch type {
            case 0, 8, 9: length = 0
            case 1, 2, 3, 4: length = Int(type)
            case 5: length = 6
            case 6, 7: length = 8
            case 12...: length = Int((type - 12) / 2)
            default: throw SQLitePages.damaged(what, "a record uses serial type \(type), which SQLite does not")
            }
            // Compared without adding (a length near Int.max must not overflow).
            guard length >= 0, length <= payload.count - body else { throw SQLitePages.damaged(what, "a record's values run past its end") }
            switch type {
            case 0: values.append(.null)
            case 8: values.append(.integer(0))
            case 9: values.append(.integer(1))
            case 1...6:
                var n: Int64 = payload[body] & 0x80 != 0 ? -1 : 0
                for i in 0..<length { n = (n << 8) | Int64(payload[body + i]) }
                values.append(.integer(n))
            case 7:
                var bits: UInt64 = 0
                for i in 0..<8 { bits = (bits << 8) | UInt64(payload[body + i]) }
                values.append(.real(Double(bitPattern: bits)))
            default:
                let slice = payload[body..<(body + length)]
                if type % 2 == 0 {
                    values.append(.blob(Array(slice)))
                } else {
                    values.append(.text(text(slice, encoding: encoding)))
                }
            }
            body += length
        }
        return values
    }

    static func text(_ bytes: ArraySlice<UInt8>, encoding: Int) -> String {
        switch encoding {
        case 2, 3:
            var units: [UInt16] = []
            units.reserveCapacity(bytes.count / 2)
            var i = bytes.startIndex
            while i + 1 < bytes.endIndex {
                let a = UInt16(bytes[i]), b = UInt16(bytes[i + 1])
                units.append(encoding == 2 ? a | b << 8 : a << 8 | b)
                i += 2
            }
            return String(decoding: units, as: UTF16.self)
        default:
            return String(decoding: bytes, as: UTF8.self)
        }
    }

    /// A varint (1–9 bytes, big-endian, 7 bits a byte but the ninth).
    @inline(__always)
    static func varint(_ bytes: [UInt8], _ at: inout Int, limit: Int, what: String) throws -> Int64 {
        var value: UInt64 = 0
        for i in 0..<9 {
            guard at < limit, at < bytes.count else { throw SQLitePages.damaged(what, "a varint runs past its page") }
            let byte = bytes[at]
            at += 1
            if i == 8 { return Int64(bitPattern: (value << 8) | UInt64(byte)) }
            value = (value << 7) | UInt64(byte & 0x7F)
            if byte & 0x80 == 0 { break }
        }
        return Int64(bitPattern: value)
    }

    @inline(__always)
    static func be16(_ bytes: [UInt8], _ at: Int) -> UInt16 {
        guard at + 2 <= bytes.count else { return 0 }
        return UInt16(bytes[at]) << 8 | UInt16(bytes[at + 1])
    }

    @inline(__always)
    static func be32(_ bytes: [UInt8], _ at: Int) -> UInt32 {
        guard at + 4 <= bytes.count else { return 0 }
        return UInt32(bytes[at]) << 24 | UInt32(bytes[at + 1]) << 16 | UInt32(bytes[at + 2]) << 8 | UInt32(bytes[at + 3])
    }
}
