import Foundation

/// Checks a binary property list's structure before Foundation parses it. A store's
/// `Z_MODELCACHE` and `Z_METADATA` plists are outside data, and on Linux Foundation's parser
/// crashes the process on some damaged ones (a damaged model cache page made `storectl diff` die
/// with SIGSEGV while bridging what it had parsed). The format (Apple's `bplist00`: a header, the
/// objects, an offset table, a 32-byte trailer) is checked here: every offset and length within
/// the data, every reference to an existing object, dictionary keys strings, no set (Core Data
/// writes none), and no object containing itself, directly or not.
enum BinaryPlistCheck {
    /// Nil when `data` is a well-formed binary plist, or not a binary plist at all (Foundation
    /// parses XML ones); otherwise what is wrong.
    static func problem(_ data: Data) -> String? {
        let bytes = [UInt8](data)
        guard bytes.count >= 8, Array(bytes[0..<6]) == Array("bplist".utf8) else { return nil }
        guard bytes.count >= 8 + 32 + 1 else { return "a binary plist too short for its trailer" }
        let trailer = bytes.count - 32
        let offsetSize = Int(bytes[trailer + 6]), refSize = Int(bytes[trailer + 7])
        guard (1...8).contains(offsetSize), (1...8).contains(refSize) else { return "a binary plist with offset size \(offsetSize), reference size \(refSize)" }
        func uint(_ at: Int, _ size: Int) -> UInt64? {
            guard at >= 0, size >= 1, size <= 8, at + size <= bytes.count else { return nil }
            var value: UInt64 = 0
            for i in 0..<size { value = value << 8 | UInt64(bytes[at + i]) }
            return value
        }
        guard let count64 = uint(trailer + 8, 8), let top64 = uint(trailer + 16, 8), let table64 = uint(trailer + 24, 8),
              count64 > 0, count64 <= UInt64(bytes.count), top64 < count64, table64 >= 8, table64 <= UInt64(trailer),
              table64 + count64 * UInt64(offsetSize) <= UInt64(trailer) else {
            return "a binary plist whose trailer points outside it"
        }
        let count = Int(count64), table = Int(table64)
        var offsets = [Int](repeating: 0, count: count)
        for i in 0..<count {
            guard let offset = uint(table + i * offsetSize, offsetSize), offset >= 8, offset < table64 else {
                return "a binary plist whose object \(i) lies outside it"
            }
            offsets[i] = Int(offset)
        }

        // Each object's extent (kind, the references it holds), checked once.
        enum Kind { case scalar, string, array, dictionary }
        func object(_ index: Int) -> (kind: Kind, refs: [Int])? {
            let at = offsets[index]
            let marker = bytes[at], high = marker >> 4, low = Int(marker & 0x0F)
            // A length in the low nibble, or 0xF and an integer object after the marker.
            func length() -> (count: Int, start: Int)? {
                guard low == 0x0F else { return (low, at + 1) }
                guard at + 1 < table, bytes[at + 1] >> 4 == 0x1 else { return nil }
                let size = 1 << Int(bytes[at + 1] & 0x0F)
                guard size <= 8, let value = uint(at + 2, size), value <= UInt64(table) else { return nil }
                return (Int(value), at + 2 + size)
            }
            func fits(_ start: Int, _ bytesNeeded: Int) -> Bool { bytesNeeded >= 0 && start + bytesNeeded <= table }
            switch high {
            case 0x0: return [0x00, 0x08, 0x09, 0x0F].contains(marker) ? (.scalar, []) : nil
            case 0x1: return low <= 4 && fits(at + 1, 1 << low) ? (.scalar, []) : nil
            case 0x2: return (low == 2 || low == 3) && fits(at + 1, 1 << low) ? (.scalar, []) : nil
            case 0x3: return marker == 0x33 && fits(at + 1, 8) ? (.scalar, []) : nil
            case 0x4: return length().flatMap { fits($0.start, $0.count) ? (.scalar, []) : nil }
            case 0x5:
                guard let (n, start) = length(), fits(start, n), bytes[start..<(start + n)].allSatisfy({ $0 < 0x80 }) else { return nil }
                return (.string, [])
            case 0x6: return length().flatMap { fits($0.start, $0.count * 2) ? (.string, []) : nil }
            case 0x8: return fits(at + 1, low + 1) ? (.scalar, []) : nil
            case 0xA, 0xD:
                guard let (n, start) = length() else { return nil }
                let total = (high == 0xD ? 2 : 1) * n
                guard fits(start, total * refSize) else { return nil }
                var refs: [Int] = []
                refs.reserveCapacity(total)
                for i in 0..<total {
                    guard let ref = uint(start + i * refSize, refSize), ref < count64 else { return nil }
                    refs.append(Int(ref))
                }
                return (high == 0xD ? .dictionary : .array, refs)
            default: return nil   // sets (0xC) and unassigned markers
            }
        }

        // Depth-first from the top object: every reachable object well formed, no cycle.
        var state = [UInt8](repeating: 0, count: count)   // 0 unseen, 1 on the path, 2 done
        var kinds = [Kind?](repeating: nil, count: count)
        var stack: [(index: Int, refs: [Int], next: Int)] = []
        func enter(_ index: Int) -> String? {
            guard let parsed = object(index) else { return "a binary plist whose object \(index) is damaged" }
            kinds[index] = parsed.kind
            if parsed.kind == .dictionary {
                let keys = parsed.refs.count / 2
                for key in parsed.refs.prefix(keys) {
                    guard let kind = kinds[key] ?? object(key)?.kind, kind == .string else { return "a binary plist with a dictionary key that is not a string" }
                }
            }
            state[index] = 1
            stack.append((index, parsed.refs, 0))
            return nil
        }
        if let problem = enter(Int(top64)) { return problem }
        while let last = stack.last {
            if last.next == last.refs.count {
                state[last.index] = 2
                stack.removeLast()
                continue
            }
            let child = last.refs[last.next]
            stack[stack.count - 1].next += 1
            switch state[child] {
            case 1: return "a binary plist with an object that contains itself"
            case 2: continue
            default: if let problem = enter(child) { return problem }
            }
        }
        return nil
    }
}
