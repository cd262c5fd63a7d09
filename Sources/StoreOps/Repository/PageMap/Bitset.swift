/// A set of page numbers (1…), one bit each.
struct Bitset {
    private var words: [UInt64]

    init(count: Int) { words = [UInt64](repeating: 0, count: (count + 64) / 64) }

    subscript(_ i: Int) -> Bool {
        get { i >= 0 && i / 64 < words.count && words[i / 64] & (1 << UInt64(i % 64)) != 0 }
        set {
            guard i >= 0 else { return }
            if i / 64 >= words.count { words += [UInt64](repeating: 0, count: i / 64 - words.count + 1) }
            if newValue { words[i / 64] |= 1 << UInt64(i % 64) } else { words[i / 64] &= ~(1 << UInt64(i % 64)) }
        }
    }

    var count: Int { words.reduce(0) { $0 + $1.nonzeroBitCount } }
}
