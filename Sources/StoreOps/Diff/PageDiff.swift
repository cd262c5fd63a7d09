import Foundation

/// Compares two databases page by page and decodes only what can differ.
///
/// A row can only differ where a page differs: for each table, both sides' b-trees are walked
/// through their interior pages; a leaf that is a leaf of that table on both sides, at the same
/// page number, with the same content, holds the same rows on both sides and is skipped. The rows
/// of the other leaves are merged by rowid (they come out in rowid order) and compared as raw
/// records; only rows that differ are decoded. Where both sides are in one repository, "same
/// content" is the map's content id: unchanged pages are never read.
///
/// Overflow pages are the one place a row can change without its leaf changing (a long value
/// rewritten into the same overflow page numbers). Every page that differs must therefore be
/// accounted for — a table's b-tree page, an index page, a freelist page, an overflow page of a
/// row that was decoded, a pointer-map page — and when one is not, the tables are compared again
/// leaf by leaf. Two files have no content ids: their shared leaves are compared byte for byte,
/// and a shared leaf's overflow chains with them.
final class PageDiff {
    struct SchemaEntry: Sendable, Equatable {
        var type: String
        var name: String
        var table: String
        var rootPage: UInt32
        var sql: String?
    }

    /// A row that differs: before (nil: added) and after (nil: removed), as raw records.
    struct RowChange {
        var rowid: Int64
        var before: [UInt8]?
        var after: [UInt8]?
    }

    let a: any DiffPages
    let b: any DiffPages
    let headerA: SQLitePages.Header
    let headerB: SQLitePages.Header
    private(set) var schemaA: [SchemaEntry] = []
    private(set) var schemaB: [SchemaEntry] = []
    /// How pages were found equal: "content ids", "bytes" (two files), or "every page" (no way: all compared).
    let method: String
    private(set) var leavesSkipped = 0
    private(set) var leavesDecoded = 0
    /// Set when a differing page could not be accounted for and the tables were compared leaf by leaf.
    private(set) var fellBackReason: String?
    /// Seconds spent reading leaves (the first side's, the second's waited for), for the debug log.
    private(set) var leafReadSeconds = 0.0

    // Accounting: the pages each side's walks and decoding explained.
    private var explainedA = PageSet()
    private var explainedB = PageSet()
    private var compareAllLeaves = false
    /// Page p (p - 1) differs between the sides, or exists on one only.
    private var differs: [Bool] = []
    /// Interior pages the same on both sides, read once: kind and children.
    private var sharedInterior: [UInt32: (SQLitePages.PageKind, [UInt32])] = [:]

    init(_ a: any DiffPages, _ b: any DiffPages) throws {
        self.a = a
        self.b = b
        if let ra = a as? RepositoryPages, let rb = b as? RepositoryPages, ra.repository === rb.repository {
            method = "content ids"
            let t = Date()
            try RepositoryPages.locate([ra, rb])
            StoreDiff.logger.debug("pages located", metadata: ["ms": "\(Int(Date().timeIntervalSince(t) * 1000))", "memory": "\(ProcessMemory.text())"])
        } else if let repository = (a as? RepositoryPages) ?? (b as? RepositoryPages), let file = (a as? FilePages) ?? (b as? FilePages) {
            // A file against a snapshot: the file's pages get the repository's ids.
            file.sealer = repository.repository.sealer
            repository.standIn = file
            method = "content ids"
        } else if a is FilePages, b is FilePages {
            method = "bytes"
        } else {
            method = "every page"   // two repositories: their ids are keyed apart
        }
        headerA = try SQLitePages.Header.parse(try Self.page(1, of: a), what: a.what)
        headerB = try SQLitePages.Header.parse(try Self.page(1, of: b), what: b.what)
        for (side, header) in [(a, headerA), (b, headerB)] where header.pageSize != side.pageSize {
            throw StoreOpsError(.badData, "\(side.what): its header says pages of \(header.pageSize) bytes, its \(side is FilePages ? "file" : "snapshot record") \(side.pageSize)")
        }
        differs = try Self.differingPages(a, b, method: method)
        // Sides in a repository: one pass over their frames keeps every interior page and the
        // pages that differ (the leaves to decode), instead of reading frames level by level.
        var prefetch: [(pages: RepositoryPages, also: Set<UInt32>)] = []
        for side in [a, b] {
            guard let pages = side as? RepositoryPages else { continue }
            var also = Set<UInt32>()
            for p in differs.indices where differs[p] && p < pages.pageCount { also.insert(UInt32(p + 1)) }
            // Differing pages are kept up to 32 MiB; beyond, the leaves are read as they are decoded.
            if also.count * pages.pageSize > 32 << 20 { also = [] }
            if !prefetch.contains(where: { $0.pages === pages }) { prefetch.append((pages, also)) }
        }
        // Only the side whose differing pages are spread over more frames keeps them (an older
        // snapshot's, scattered through its first frames); the other's sit together in a few
        // new frames and are read when decoded, for less memory at the same time.
        if prefetch.count == 2 {
            let spread = prefetch.map { $0.pages.framesHolding($0.also) }
            prefetch[spread[0] >= spread[1] ? 1 : 0].also = []
        }
        if !prefetch.isEmpty, method != "every page" {
            let t = Date()
            try RepositoryPages.prefetch(prefetch)
            StoreDiff.logger.debug("frames read once: interior and differing pages kept", metadata: ["ms": "\(Int(Date().timeIntervalSince(t) * 1000))", "memory": "\(ProcessMemory.text())"])
        }
        schemaA = try schema(a, header: headerA, explained: &explainedA)
        schemaB = try schema(b, header: headerB, explained: &explainedB)
    }

    /// Which pages differ: by content id, or two files compared a megabyte at a time on two lanes.
    static func differingPages(_ a: any DiffPages, _ b: any DiffPages, method: String) throws -> [Bool] {
        let count = max(a.pageCount, b.pageCount)
        var out = [Bool](repeating: true, count: count)
        switch method {
        case "content ids":
            for p in 0..<min(a.pageCount, b.pageCount) {
                if let x = a.contentID(UInt32(p + 1)), x == b.contentID(UInt32(p + 1)) { out[p] = false }
            }
        case "bytes":
            guard let fa = a as? FilePages, let fb = b as? FilePages, fa.pageSize == fb.pageSize else { return out }
            let same = try FilePages.samePages(fa, fb)
            for p in 0..<same.count where same[p] { out[p] = false }
        default:
            break
        }
        return out
    }

    /// Whether page `page` has the same content on both sides.
    @inline(__always)
    func isShared(_ page: UInt32) -> Bool {
        page >= 1 && Int(page) <= differs.count && !differs[Int(page) - 1]
    }

    static func page(_ number: UInt32, of side: any DiffPages) throws -> [UInt8] {
        guard let bytes = try side.read([number])[number] else { throw StoreOpsError(.badData, "\(side.what): page \(number) could not be read") }
        return bytes
    }

    // MARK: - Schema

    private func schema(_ side: any DiffPages, header: SQLitePages.Header, explained: inout PageSet) throws -> [SchemaEntry] {
        let tree = try walk(side, root: 1, header: header, explained: &explained)
        var out: [SchemaEntry] = []
        try rows(side, leaves: tree.leaves, header: header, explained: &explained) { _, payload in
            let values = try SQLitePages.record(payload, encoding: header.textEncoding, what: "\(side.what): sqlite_master")
            func text(_ i: Int) -> String? { if i < values.count, case .text(let t) = values[i] { return t }; return nil }
            var root: UInt32 = 0
            if values.count > 3, case .integer(let n) = values[3], n > 0, n <= Int64(UInt32.max) { root = UInt32(n) }
            out.append(SchemaEntry(type: text(0) ?? "", name: text(1) ?? "", table: text(2) ?? "", rootPage: root, sql: text(4)))
        }
        return out
    }

    /// Every entry of the table rooted at `root` on side A (`onA`) or B: for small tables (Core Data's bookkeeping).
    func allRows(onA: Bool, root: UInt32) throws -> [(Int64, [UInt8])] {
        var out: [(Int64, [UInt8])] = []
        if onA {
            let tree = try walk(a, root: root, header: headerA, explained: &explainedA)
            try rows(a, leaves: tree.leaves, header: headerA, explained: &explainedA) { out.append(($0, $1)) }
        } else {
            let tree = try walk(b, root: root, header: headerB, explained: &explainedB)
            try rows(b, leaves: tree.leaves, header: headerB, explained: &explainedB) { out.append(($0, $1)) }
        }
        return out
    }

    /// Every entry of the table rooted at `root` on side B, one at a time (any size of table).
    func forEachRowOfB(root: UInt32, _ body: (Int64, [UInt8]) throws -> Void) throws {
        let tree = try walk(b, root: root, header: headerB, explained: &explainedB)
        try rows(b, leaves: tree.leaves, header: headerB, explained: &explainedB, body)
    }

    // MARK: - Walking b-trees

    struct Tree {
        var kind: SQLitePages.PageKind?
        /// Leaves in key order (index b-trees: every page, since interior cells hold entries too).
        var leaves: [UInt32] = []
    }

    /// The pages of the b-tree rooted at `root`, level by level (each level read in one batch).
    /// Leaves are not read: a b-tree's leaves are all at one depth, so a level whose first page is
    /// a leaf is all leaves (decoding checks each). An interior page the same on both sides is
    /// read once.
    func walk(_ side: any DiffPages, root: UInt32, header: SQLitePages.Header, explained: inout PageSet) throws -> Tree {
        var tree = Tree()
        var level: [UInt32] = [root]
        var seen = Bitset(count: side.pageCount + 1)   // a bit a page: a Set of 250,000 leaves cost more than the walk
        var depth = 0
        while !level.isEmpty {
            depth += 1
            guard depth < 64 else { throw StoreOpsError(.badData, "\(side.what): the b-tree rooted at page \(root) is deeper than SQLite makes them (a loop?)") }
            for page in level {
                guard page >= 1, Int(page) <= side.pageCount, !seen[Int(page)] else {
                    throw StoreOpsError(.badData, "\(side.what): the b-tree rooted at page \(root) refers to page \(page) \(page >= 1 && Int(page) <= side.pageCount ? "twice" : "past the file's end")")
                }
                seen[Int(page)] = true
            }
            // The first page says whether this level is leaves.
            let firstKind = try kind(of: level[0], side: side, header: header)
            if tree.kind == nil { tree.kind = firstKind }
            if firstKind.isLeaf {
                for number in level { explained.insert(number) }
                tree.leaves.append(contentsOf: level)
                break
            }
            let unread = level.filter { sharedInterior[$0] == nil || !isShared($0) }
            let bytes = try side.read(unread)
            var next: [UInt32] = []
            for number in level {
                let kind: SQLitePages.PageKind, children: [UInt32]
                if isShared(number), let known = sharedInterior[number] {
                    (kind, children) = known
                } else {
                    guard let raw = bytes[number] else { throw StoreOpsError(.badData, "\(side.what): page \(number) could not be read") }
                    let page = try SQLitePages.BTreePage(number: number, bytes: raw, usable: header.usable, what: side.what)
                    kind = page.kind
                    children = try page.children()
                    if isShared(number), !kind.isLeaf { sharedInterior[number] = (kind, children) }
                }
                guard kind.isTable == (tree.kind?.isTable ?? true), !kind.isLeaf else {
                    throw StoreOpsError(.badData, "\(side.what): page \(number) is not the kind of b-tree page its parent says (a leaf among interior pages, or another b-tree's)")
                }
                explained.insert(number)
                if !kind.isTable { tree.leaves.append(number) }   // index interior cells are entries
                next.append(contentsOf: children)
            }
            level = next
        }
        if tree.kind?.isTable == false { tree.leaves.sort() }
        return tree
    }

    private func kind(of number: UInt32, side: any DiffPages, header: SQLitePages.Header) throws -> SQLitePages.PageKind {
        if isShared(number), let known = sharedInterior[number] { return known.0 }
        let raw = try Self.page(number, of: side)
        return try SQLitePages.BTreePage(number: number, bytes: raw, usable: header.usable, what: side.what).kind
    }

    /// The entries of `leaves` in order: (rowid, full payload) for table leaves, (0, payload) for
    /// index pages. Pages are read 512 at a time.
    func rows(_ side: any DiffPages, leaves: [UInt32], header: SQLitePages.Header, explained: inout PageSet,
              expectTable: Bool? = nil, read already: [UInt32: [UInt8]]? = nil, _ body: (Int64, [UInt8]) throws -> Void) throws {
        var start = 0
        while start < leaves.count {
            let batch = Array(leaves[start..<min(leaves.count, start + 512)])
            start += batch.count
            let t = Date()
            let bytes = try already ?? side.read(batch)
            leafReadSeconds += Date().timeIntervalSince(t)
            for number in batch {
                guard let raw = bytes[number] else { throw StoreOpsError(.badData, "\(side.what): page \(number) could not be read") }
                let page = try SQLitePages.BTreePage(number: number, bytes: raw, usable: header.usable, what: side.what)
                guard page.kind != .tableInterior, page.kind.isTable == (expectTable ?? page.kind.isTable) else {
                    throw StoreOpsError(.badData, "\(side.what): page \(number) is not the kind of page its b-tree's leaves are")
                }
                for i in 0..<page.cellCount {
                    try ProcessSignals.checkpoint("comparing")
                    let cell = try page.cell(i)
                    try body(cell.rowid, try payload(of: cell, on: page, side: side, header: header, explained: &explained))
                }
            }
        }
    }

    func payload(of cell: SQLitePages.BTreePage.Cell, on page: SQLitePages.BTreePage, side: any DiffPages, header: SQLitePages.Header,
                 explained: inout PageSet) throws -> [UInt8] {
        var out = Array(page.bytes[cell.localStart..<(cell.localStart + cell.localSize)])
        guard cell.payloadSize > cell.localSize else { return out }
        // A payload claiming more overflow pages than the file has is damage, not a read.
        let perPage = header.usable - 4
        let needed = (cell.payloadSize - cell.localSize + perPage - 1) / perPage
        guard needed <= side.pageCount else {
            throw SQLitePages.damaged(side.what, "a cell of page \(page.number) claims \(cell.payloadSize) bytes, more than the file holds")
        }
        out.reserveCapacity(cell.payloadSize)
        var next = cell.overflow
        var visited = Set<UInt32>()
        while out.count < cell.payloadSize {
            guard next >= 1, Int(next) <= side.pageCount, visited.insert(next).inserted else {
                throw SQLitePages.damaged(side.what, "an overflow chain from page \(page.number) leads to page \(next)"
                                          + (visited.contains(next) ? " again (a loop)" : Int(next) > side.pageCount ? ", past its \(side.pageCount) pages" : ""))
            }
            let bytes = try Self.page(next, of: side)
            guard bytes.count >= header.usable else { throw SQLitePages.damaged(side.what, "overflow page \(next) is short") }
            explained.insert(next)
            let take = min(cell.payloadSize - out.count, perPage)
            out.append(contentsOf: bytes[4..<(4 + take)])
            next = SQLitePages.be32(bytes, 0)
        }
        return out
    }

    // MARK: - Comparing a table

    /// The rows of one table (root pages on each side; nil where the side has no such table) that
    /// differ, in rowid order for rowid tables; for WITHOUT ROWID tables (index b-trees) the
    /// entries only one side has: an entry removed and one added with the same first `keyColumns`
    /// values (the primary key, which such a record holds first) are one row changed, the rest
    /// removed and added.
    func compare(rootA: UInt32?, rootB: UInt32?, keyColumns: Int = 0, _ body: (RowChange) throws -> Void) throws {
        let treeA = try rootA.map { try walk(a, root: $0, header: headerA, explained: &explainedA) } ?? Tree()
        let treeB = try rootB.map { try walk(b, root: $0, header: headerB, explained: &explainedB) } ?? Tree()
        let isTable = (treeA.kind ?? treeB.kind)?.isTable ?? true
        if let kindA = treeA.kind, let kindB = treeB.kind, kindA.isTable != kindB.isTable {
            // A rowid table on one side, WITHOUT ROWID on the other: every row removed and added.
            leavesDecoded += treeA.leaves.count + treeB.leaves.count
            try rows(a, leaves: treeA.leaves, header: headerA, explained: &explainedA, expectTable: kindA.isTable) { rowid, payload in
                try body(RowChange(rowid: rowid, before: payload, after: nil))
            }
            try rows(b, leaves: treeB.leaves, header: headerB, explained: &explainedB, expectTable: kindB.isTable) { rowid, payload in
                try body(RowChange(rowid: rowid, before: nil, after: payload))
            }
            return
        }
        let (onlyA, onlyB) = try unshared(treeA.leaves, treeB.leaves)
        if isTable {
            try mergeRows(onlyA, onlyB, body)
        } else {
            var counts: [[UInt8]: Int] = [:]
            try rows(a, leaves: onlyA, header: headerA, explained: &explainedA, expectTable: false) { _, payload in counts[payload, default: 0] += 1 }
            try rows(b, leaves: onlyB, header: headerB, explained: &explainedB, expectTable: false) { _, payload in counts[payload, default: 0] -= 1 }
            var removed: [[UInt8]] = [], added: [[UInt8]] = []
            for (payload, count) in counts.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) where count != 0 {
                for _ in 0..<abs(count) { if count > 0 { removed.append(payload) } else { added.append(payload) } }
            }
            // Paired by primary key (a record that does not decode stays unpaired: the caller
            // reports it with its side's name).
            func key(_ payload: [UInt8], _ encoding: Int) -> [SQLitePages.Value]? {
                guard keyColumns > 0, let values = try? SQLitePages.record(payload, encoding: encoding, what: ""), values.count >= keyColumns else { return nil }
                return Array(values.prefix(keyColumns))
            }
            var addedByKey: [[SQLitePages.Value]: [Int]] = [:]
            for (i, payload) in added.enumerated() { if let k = key(payload, headerB.textEncoding) { addedByKey[k, default: []].append(i) } }
            var paired = Set<Int>()
            for payload in removed {
                if let k = key(payload, headerA.textEncoding), var candidates = addedByKey[k], let match = candidates.first {
                    candidates.removeFirst()
                    addedByKey[k] = candidates
                    paired.insert(match)
                    try body(RowChange(rowid: 0, before: payload, after: added[match]))
                } else {
                    try body(RowChange(rowid: 0, before: payload, after: nil))
                }
            }
            for (i, payload) in added.enumerated() where !paired.contains(i) { try body(RowChange(rowid: 0, before: nil, after: payload)) }
        }
    }

    /// The leaves of each side that are not the same leaf, with the same content, on the other.
    private func unshared(_ leavesA: [UInt32], _ leavesB: [UInt32]) throws -> ([UInt32], [UInt32]) {
        guard !compareAllLeaves else {
            leavesDecoded += leavesA.count + leavesB.count
            return (leavesA, leavesB)
        }
        var inB = PageSet()
        for page in leavesB { inB.insert(page) }
        var shared = PageSet()
        var sharedCount = 0
        for page in leavesA where inB.contains(page) && isShared(page) {
            shared.insert(page)
            sharedCount += 1
        }
        leavesSkipped += sharedCount * 2
        let onlyA = leavesA.filter { !shared.contains($0) }
        let onlyB = leavesB.filter { !shared.contains($0) }
        leavesDecoded += onlyA.count + onlyB.count
        return (onlyA, onlyB)
    }

    /// Two records byte for byte (`memcmp`: Array's `==` compared them a byte at a time, 17 ms of
    /// the bench pair's 400,000 rows).
    static func same(_ x: [UInt8], _ y: [UInt8]) -> Bool {
        x.count == y.count && x.withUnsafeBufferPointer { a in y.withUnsafeBufferPointer { b in
            guard let pa = a.baseAddress, let pb = b.baseAddress else { return a.count == 0 }
            return memcmp(pa, pb, a.count) == 0
        } }
    }

    /// Merges two rowid-ordered streams of rows and reports the rows that differ.
    private func mergeRows(_ leavesA: [UInt32], _ leavesB: [UInt32], _ body: (RowChange) throws -> Void) throws {
        // B's rows are gathered a batch of leaves at a time and merged against A's as A streams.
        var pendingB: [(Int64, [UInt8])] = []
        var indexB = 0
        var nextLeafB = 0
        // A snapshot's leaves are read (frames opened, pages checked) a batch ahead on a thread of
        // their own while this one decodes: 55-65 ms of the bench diff's 120 ms of decoding.
        let batchesB = stride(from: 0, to: leavesB.count, by: 512).map { Array(leavesB[$0..<min(leavesB.count, $0 + 512)]) }
        let ahead = (b as? RepositoryPages).flatMap { pages in batchesB.count > 1 ? ReadAhead(batchesB, read: { try pages.read($0) }) : nil }
        defer { ahead?.cancel() }
        var takenB = 0
        func fillB() throws {
            guard indexB >= pendingB.count, nextLeafB < leavesB.count else { return }
            let batch = batchesB[takenB]
            let t = Date()
            let bytes = try ahead?.take(takenB)
            leafReadSeconds += Date().timeIntervalSince(t)
            takenB += 1
            nextLeafB += batch.count
            pendingB.removeAll(keepingCapacity: true)
            indexB = 0
            try rows(b, leaves: batch, header: headerB, explained: &explainedB, expectTable: true, read: bytes) { rowid, payload in pendingB.append((rowid, payload)) }
            if pendingB.isEmpty { try fillB() }
        }
        try fillB()
        try rows(a, leaves: leavesA, header: headerA, explained: &explainedA, expectTable: true) { rowid, payload in
            while true {
                try fillB()
                guard indexB < pendingB.count else { break }
                let (rowB, payloadB) = pendingB[indexB]
                if rowB < rowid {
                    try body(RowChange(rowid: rowB, before: nil, after: payloadB))
                    indexB += 1
                } else if rowB == rowid {
                    if !Self.same(payloadB, payload) { try body(RowChange(rowid: rowid, before: payload, after: payloadB)) }
                    indexB += 1
                    return
                } else {
                    break
                }
            }
            try body(RowChange(rowid: rowid, before: payload, after: nil))
        }
        while true {
            try fillB()
            guard indexB < pendingB.count else { break }
            try body(RowChange(rowid: pendingB[indexB].0, before: nil, after: pendingB[indexB].1))
            indexB += 1
        }
    }

    // MARK: - Accounting

    /// With content ids: whether every page that differs was explained by the walks and rows
    /// read; when not, `compareAllLeaves` is set and the caller compares again. Only index,
    /// freelist and pointer-map pages are read here, the index pages only where they differ.
    func accountForDifferences() throws -> Bool {
        guard !compareAllLeaves else { return true }
        var unexplained: [UInt32] = []
        for p in differs.indices where differs[p] { unexplained.append(UInt32(p + 1)) }
        guard !unexplained.isEmpty else { return true }
        let freeA = try freelist(a, header: headerA), freeB = try freelist(b, header: headerB)
        func remaining(_ side: any DiffPages, _ header: SQLitePages.Header, _ explained: PageSet, _ free: Set<UInt32>,
                       _ schema: [SchemaEntry]) throws -> [UInt32] {
            let candidates = unexplained.filter { p in
                Int(p) <= side.pageCount && !explained.contains(p) && !free.contains(p) && p != Self.lockBytePage(header)
            }
            var left: [UInt32] = []
            var zeros: [UInt32] = []
            var start = 0
            while start < candidates.count {
                let batch = Array(candidates[start..<min(candidates.count, start + 256)])
                start += batch.count
                let bytes = try side.read(batch)
                for p in batch {
                    guard let raw = bytes[p] else { left.append(p); continue }
                    if Self.isPointerMap(p, header: header) {
                        // Derived data, not compared; but one that no longer reads as a pointer map
                        // is damage (a trial's random bytes in page 2 were "same").
                        try Self.checkPointerMap(p, raw, side: side, header: header)
                        continue
                    }
                    let offset = p == 1 ? 100 : 0
                    let type = raw[offset]
                    // An index page (its type byte; an overflow page starting so would point past the file's end).
                    if type == 0x02 || type == 0x0A, (UInt32(type) << 24) > UInt32(side.pageCount) {
                        // One that does not read as a b-tree page is damage, not an index's change.
                        _ = try SQLitePages.BTreePage(number: p, bytes: raw, usable: header.usable, what: side.what)
                        continue
                    }
                    // Page 1 and the lock-byte page's neighbourhood aside, an all-zero page is free
                    // space, unless a b-tree holds it (checked below).
                    if raw.allSatisfy({ $0 == 0 }) { zeros.append(p); continue }
                    left.append(p)
                }
            }
            if !zeros.isEmpty { try checkZeroPages(zeros, side: side, header: header, schema: schema) }
            return left
        }
        let leftA = try remaining(a, headerA, explainedA, freeA, schemaA)
        let leftB = try remaining(b, headerB, explainedB, freeB, schemaB)
        guard leftA.isEmpty, leftB.isEmpty else {
            let page = (leftA + leftB).min() ?? 0
            fellBackReason = "page \(page) differs and is no table's, index's or free page, nor a decoded row's overflow: every leaf compared"
            compareAllLeaves = true
            return false
        }
        return true
    }

    /// All-zero pages that differ: free space, unless a b-tree of the side holds one (a zeroed
    /// index page was taken for free space, and two files one of which was damaged were "same").
    /// Every b-tree of the side is walked (its interior pages: about 1% of a store), only when
    /// there are such pages.
    private func checkZeroPages(_ zeros: [UInt32], side: any DiffPages, header: SQLitePages.Header, schema: [SchemaEntry]) throws {
        let wanted = Set(zeros)
        for entry in schema where entry.rootPage > 0 && (entry.type == "table" || entry.type == "index") {
            var visited = PageSet()
            let tree = try walk(side, root: entry.rootPage, header: header, explained: &visited)
            if let page = zeros.first(where: { visited.contains($0) }) ?? tree.leaves.first(where: { wanted.contains($0) }) {
                throw StoreOpsError(.badData, "\(side.what) is damaged: page \(page) is all zeros, and the b-tree of \(entry.type) \(entry.name) holds it",
                                    hint: Self.damageHint)
            }
        }
    }

    private static let damageHint = "`storectl preflight --full` (integrity_check) tells what else is damaged; restore the store from a snapshot or a backup"

    /// A pointer-map page (auto-vacuum stores) whose entries cannot be SQLite's: 65 naming the side.
    private static func checkPointerMap(_ page: UInt32, _ raw: [UInt8], side: any DiffPages, header: SQLitePages.Header) throws {
        let entries = header.usable / 5
        for i in 0..<entries where Int(page) + 1 + i <= side.pageCount {
            let type = raw[5 * i]
            guard type <= 5 else {
                throw StoreOpsError(.badData, "\(side.what) is damaged: pointer-map page \(page) has an entry of type \(type) (for page \(Int(page) + 1 + i)); SQLite writes 1 to 5",
                                    hint: Self.damageHint)
            }
        }
    }

    /// SQLite's pointer-map pages (btree.c, ptrmapPageno): every (usable / 5 + 1)th page from 2,
    /// moved to the next page where one would fall on the lock-byte page.
    private static func isPointerMap(_ page: UInt32, header: SQLitePages.Header) -> Bool {
        guard header.largestRootPage != 0, page >= 2 else { return false }
        let span = UInt32(header.usable / 5 + 1)
        var map = (page - 2) / span * span + 2
        if map == lockBytePage(header) { map += 1 }
        return map == page
    }

    /// The page holding the byte at 1 GiB that SQLite's locks use: never written, never a page of
    /// the database.
    private static func lockBytePage(_ header: SQLitePages.Header) -> UInt32 {
        UInt32((1 << 30) / max(512, header.pageSize) + 1)
    }

    private func freelist(_ side: any DiffPages, header: SQLitePages.Header) throws -> Set<UInt32> {
        var out = Set<UInt32>()
        var trunk = header.freelistTrunk
        var hops = 0
        while trunk != 0, Int(trunk) <= side.pageCount, hops <= side.pageCount {
            hops += 1
            out.insert(trunk)
            let bytes = try Self.page(trunk, of: side)
            let count = Int(SQLitePages.be32(bytes, 4))
            guard count <= (header.usable - 8) / 4 else { break }
            for i in 0..<count { out.insert(SQLitePages.be32(bytes, 8 + 4 * i)) }
            trunk = SQLitePages.be32(bytes, 0)
        }
        return out
    }
}

/// A side's batches of pages read one or two ahead of the caller on a thread of its own (the
/// caller decodes batch i while batch i + 1 is read). The reader must be safe to call while the
/// caller reads the same side (`RepositoryPages.read` takes its lock). An error is handed to
/// whoever takes that batch; `cancel` (or the caller's end) stops the thread after its current batch.
final class ReadAhead: @unchecked Sendable {
    private let condition = NSCondition()
    private var ready: [Int: Result<[UInt32: [UInt8]], any Error>] = [:]
    private var taking = 0
    private var cancelled = false

    /// - Parameter read: called on the read-ahead thread only (and must tolerate the caller's
    ///   own reads of the same side meanwhile, see above).
    init(_ batches: [[UInt32]], read: @escaping ([UInt32]) throws -> [UInt32: [UInt8]]) {
        final class Reader: @unchecked Sendable {
            let read: ([UInt32]) throws -> [UInt32: [UInt8]]
            init(_ read: @escaping ([UInt32]) throws -> [UInt32: [UInt8]]) { self.read = read }
        }
        let reader = Reader(read)
        let thread = Thread { [self] in
            IOPace.politeThread()
            defer { IOPace.ordinaryThread() }
            for i in batches.indices {
                condition.lock()
                while !cancelled && i > taking + 1 { condition.wait() }
                let stop = cancelled
                condition.unlock()
                if stop { return }
                let result = Result { try reader.read(batches[i]) }
                condition.lock()
                ready[i] = result
                condition.broadcast()
                condition.unlock()
                if case .failure = result { return }
            }
        }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// Batch `i` (taken in order, each once), waiting for it.
    func take(_ i: Int) throws -> [UInt32: [UInt8]] {
        condition.lock()
        defer { condition.unlock() }
        taking = i
        condition.broadcast()
        while ready[i] == nil { condition.wait() }
        let result = ready.removeValue(forKey: i)
        return try result?.get() ?? [:]
    }

    func cancel() {
        condition.lock()
        cancelled = true
        condition.broadcast()
        condition.unlock()
    }
}

/// Runs a producer on a thread of its own and hands what it emits, in order and in batches, to a
/// consumer on the caller's thread: the diff decodes and merges a table's rows on one core while
/// the other records what they mean (the two halves of comparing a table took about the same
/// time one after the other). The producer never outlives `run`: an error on either side stops
/// both and is thrown (the consumer's first), and `run` returns only after the producer's thread
/// has ended, so whatever it mutated may be read after.
final class RowPipe<Item: Sendable>: @unchecked Sendable {
    private let condition = NSCondition()
    private var batches: [[Item]] = []
    private var finished = false
    private var failure: (any Error)?
    private var cancelled = false
    private var threadEnded = false
    /// Called on the producer's thread only.
    private var produce: ((_ emit: (Item) throws -> Void) throws -> Void)?

    private struct Cancelled: Error {}

    /// `produce` gets an `emit` to call for each item, on the producer's thread (it must touch
    /// nothing `consume` touches); `consume` runs on the caller's thread, in the order emitted.
    static func run(batch: Int = 256, depth: Int = 4,
                    produce: @escaping (_ emit: (Item) throws -> Void) throws -> Void, consume: (Item) throws -> Void) throws {
        let pipe = RowPipe<Item>()
        pipe.produce = produce
        let thread = Thread {
            var pending: [Item] = []
            pending.reserveCapacity(batch)
            let outcome = Result {
                try pipe.produce? { item in
                    pending.append(item)
                    if pending.count >= batch {
                        try pipe.push(pending, depth: depth)
                        pending.removeAll(keepingCapacity: true)
                    }
                }
                if !pending.isEmpty { try pipe.push(pending, depth: depth) }
            }
            pipe.condition.lock()
            if case .failure(let error) = outcome, !(error is Cancelled) {
                // What it emitted before it failed comes first.
                if !pending.isEmpty { pipe.batches.append(pending) }
                pipe.failure = error
            }
            pipe.finished = true
            pipe.threadEnded = true
            pipe.condition.broadcast()
            pipe.condition.unlock()
        }
        thread.stackSize = 8 << 20
        thread.start()
        defer {
            pipe.condition.lock()
            pipe.cancelled = true
            pipe.condition.broadcast()
            while !pipe.threadEnded { pipe.condition.wait() }
            pipe.condition.unlock()
        }
        while let items = try pipe.take() {
            for item in items { try consume(item) }
        }
    }

    private func push(_ items: [Item], depth: Int) throws {
        condition.lock()
        defer { condition.unlock() }
        while batches.count >= depth && !cancelled { condition.wait() }
        if cancelled { throw Cancelled() }
        batches.append(items)
        condition.broadcast()
    }

    /// The next batch, nil once the producer is done; its error when it failed.
    private func take() throws -> [Item]? {
        condition.lock()
        defer { condition.unlock() }
        while batches.isEmpty && !finished { condition.wait() }
        if !batches.isEmpty {
            let items = batches.removeFirst()
            condition.broadcast()
            return items
        }
        if let failure { throw failure }
        return nil
    }
}

/// Page numbers, one bit each (the pages a side's walks and decoding explained).
struct PageSet {
    private var bits = Bitset(count: 0)
    mutating func insert(_ page: UInt32) { bits[Int(page)] = true }
    func contains(_ page: UInt32) -> Bool { bits[Int(page)] }
}
