/// Which page holds a given content, for dedup while pages stream in: an open-addressing table
/// of page numbers keyed by their ids' first 8 bytes, every hit confirmed against the whole id
/// in the map (`ids`). 4 bytes a slot, at least 2 slots a page (at most half full, so a lookup
/// probes 1.5 slots on average): 8–16 bytes a page beside the map's 32.
///
/// Entries are never removed. An entry whose page has since received other content no longer
/// confirms, and lookups go on probing past it; the worst that can happen is a page stored twice.
struct PageTable {
    private var slots: [UInt32]
    private var mask: Int
    private(set) var count = 0

    init(pages: Int) {
        var capacity = 1024
        while capacity < pages * 2 { capacity <<= 1 }
        slots = [UInt32](repeating: 0, count: capacity)
        mask = capacity - 1
    }

    // Ids are HMAC or SHA-256 outputs: their first bytes are already uniformly spread.
    private func start(_ id: ContentID) -> Int { Int(truncatingIfNeeded: id.prefix64) & mask }

    /// A page whose current id (in `ids`, page p at p - 1) is `id`, or nil.
    func find(_ id: ContentID, in ids: UnsafeBufferPointer<ContentID>) -> UInt32? {
        var i = start(id)
        while true {
            let page = slots[i]
            if page == 0 { return nil }
            if Int(page) <= ids.count, ids[Int(page) - 1] == id { return page }
            i = (i + 1) & mask
        }
    }

    /// Records that `page` holds `id` (grows when half full).
    mutating func insert(_ id: ContentID, page: UInt32, ids: UnsafeBufferPointer<ContentID>) {
        if (count + 1) * 2 > slots.count { grow(ids: ids) }
        var i = start(id)
        while slots[i] != 0 { i = (i + 1) & mask }
        slots[i] = page
        count += 1
    }

    private mutating func grow(ids: UnsafeBufferPointer<ContentID>) {
        let old = slots
        slots = [UInt32](repeating: 0, count: old.count * 2)
        mask = slots.count - 1
        count = 0
        for page in old where page != 0 && Int(page) <= ids.count {
            var i = start(ids[Int(page) - 1])
            while slots[i] != 0 { i = (i + 1) & mask }
            slots[i] = page
            count += 1
        }
    }
}
