import Crypto
import Foundation

extension StoreDiff {
    /// What a table and its columns mean: a Core Data entity's attributes and relationships, a
    /// many-to-many join table, bookkeeping, or a plain table.
    struct Labels {
        enum TableKind: Equatable {
            case entity
            /// A many-to-many join table: "Entity.relationship".
            case join(String)
            case bookkeeping
            case plain
        }

        enum Column: Equatable {
            case identity, entity, opt
            case attribute(String, type: Int)
            case toOne(String, destination: String)
            /// A to-many without an inverse: a hidden column in the destination's table holding the owner's Z_PK.
            case hiddenToMany(owner: String, name: String)
            /// An ordered relationship's position column.
            case order(String)
            case plain(String)

            var name: String {
                switch self {
                case .identity: "Z_PK"
                case .entity: "Z_ENT"
                case .opt: "Z_OPT"
                case .attribute(let n, _), .toOne(let n, _), .plain(let n): n
                case .hiddenToMany(let owner, let n): "\(owner).\(n)"
                case .order(let n): "\(n) (order)"
                }
            }
        }

        var entityByEnt: [Int: String] = [:]
        var tables: [String: TableKind] = [:]
        var columns: [String: [String: Column]] = [:]
        /// A table several entities share, where more than one of them declares an attribute of
        /// one name (Notes: ICAttachment's, ICNote's and ICFolder's `title` in ZTITLE, ZTITLE1,
        /// ZTITLE2): each entity's own labels, by "table\0entity". Its own column is the
        /// attribute; the others' columns of that name are plain columns for it (a trial's diff
        /// called all three "title" on a folder, and a migration declaring ICFolder.title passed a
        /// write to ICNote's ZTITLE1 on folders).
        var entityColumns: [String: [String: Column]] = [:]
        var coreData: Bool

        /// SQLite's own tables but `sqlite_sequence` (ANALYZE's statistics are derived; the last
        /// AUTOINCREMENT number is not: rewound, deleted numbers are given out again), and
        /// storectl's history. Left out unless asked.
        static func isBookkeeping(_ table: String) -> Bool {
            let lower = table.lowercased()
            return (lower.hasPrefix("sqlite_") && lower != "sqlite_sequence") || table == MigrationHistory.table
        }

        /// The labels of `table`'s columns for a row of `entity`.
        func columns(for table: String, entity: String?) -> [String: Column]? {
            if let entity, let own = entityColumns["\(table)\u{0}\(entity)"] { return own }
            return columns[table]
        }

        init(_ side: DiffSchema) {
            guard let store = side.coreData else {
                coreData = false
                for name in side.layouts.keys {
                    tables[name] = Self.isBookkeeping(name) ? .bookkeeping : .plain
                }
                return
            }
            coreData = true
            for entity in store.entities { entityByEnt[entity.ent] = entity.name }
            let model = store.model
            var entityTables: [String: [CoreDataEntity]] = [:]
            for entity in store.entities {
                guard let table = entity.table else { continue }
                entityTables[table, default: []].append(entity)
            }
            let toOne = CoreDataCensus.toOneColumns(store: store) { side.layouts[$0]?.columns ?? [] }.columns
            for (name, layout) in side.layouts {
                let upper = name.uppercased()
                if DiffSchema.bookkeepingTables.contains(upper) || Self.isBookkeeping(name) {
                    tables[name] = .bookkeeping
                    continue
                }
                if let owners = entityTables[name] {
                    if owners.allSatisfy({ $0.ent >= 16_000 }) { tables[name] = .bookkeeping; continue }
                    tables[name] = .entity
                    var labels: [String: Column] = [:]
                    for column in layout.columns {
                        let c = column.uppercased()
                        if c == "Z_PK" { labels[column] = .identity; continue }
                        if c == "Z_ENT" { labels[column] = .entity; continue }
                        if c == "Z_OPT" { labels[column] = .opt; continue }
                        if let link = toOne.first(where: { $0.table == name && $0.column == column }),
                           let first = link.relationships.first, let dot = first.firstIndex(of: ".") {
                            let entityName = String(first[..<dot]), relName = String(first[first.index(after: dot)...])
                            let destination = model?.relationship(relName, of: entityName)?.destination ?? link.destinationTable
                            labels[column] = .toOne(relName, destination: destination)
                            continue
                        }
                        if c.hasPrefix("Z_FOK_") {
                            // The position of this object in its to-one's ordered inverse, named
                            // after the to-one as the model spells it (`parentFolder`).
                            let suffix = String(c.dropFirst(6))
                            labels[column] = .order(model.flatMap { Self.relationship(suffix, owners: owners, model: $0) }?.name ?? suffix.lowercased())
                            continue
                        }
                        if let model, let attribute = Self.attribute(c, owners: owners, model: model) {
                            labels[column] = .attribute(attribute.name, type: attribute.type)
                            continue
                        }
                        if let model, let hidden = Self.hiddenToMany(c, store: store, model: model) {
                            labels[column] = hidden
                            continue
                        }
                        // No model to say (no Z_MODELCACHE): a column Core Data declared TIMESTAMP
                        // holds a date, in seconds since 2001, shown as one.
                        labels[column] = layout.timestamps.contains(column) ? .attribute(column, type: 900) : .plain(column)
                    }
                    columns[name] = labels
                    if let model {
                        for (entity, own) in Self.ownColumns(owners: owners, store: store, model: model, columns: layout.columns) {
                            var mine = labels
                            for (column, attribute) in own { mine[column] = attribute ?? .plain(column) }
                            entityColumns["\(name)\u{0}\(entity)"] = mine
                        }
                    }
                    continue
                }
                if let relationship = Self.joinRelationship(upper, store: store, model: model) {
                    tables[name] = .join(relationship)
                    continue
                }
                tables[name] = .plain
            }
        }

        /// For each entity stored in a table (and each of its sub-entities there), the columns of
        /// attribute names several of the table's entities declare, each labelled for it: its own
        /// (declared by it or an ancestor) as that attribute, the others nil (plain). Core Data
        /// names them in the order of the declaring entities' numbers (`Z_ENT`): the first
        /// `Z<NAME>`, the next `Z<NAME>1`, `Z<NAME>2`… (Notes: ICAttachment 4 ZTITLE, ICNote 11
        /// ZTITLE1, ICFolder 14 ZTITLE2). Where the columns are not all there so, nothing is said.
        static func ownColumns(owners: [CoreDataEntity], store: CoreDataStore, model: CoreDataModel, columns: [String]) -> [String: [String: Column?]] {
            let present = Dictionary(columns.map { ($0.uppercased(), $0) }, uniquingKeysWith: { x, _ in x })
            let sorted = owners.sorted { $0.ent < $1.ent }
            var declarers: [String: [(entity: String, attribute: CoreDataModel.Attribute)]] = [:]
            for owner in sorted {
                for attribute in model.attributes where attribute.entity == owner.name {
                    declarers[attribute.name.uppercased(), default: []].append((owner.name, attribute))
                }
            }
            var out: [String: [String: Column?]] = [:]
            for (base, list) in declarers where list.count > 1 {
                let names = list.indices.map { "Z" + base + ($0 == 0 ? "" : String($0)) }
                guard names.allSatisfy({ present[$0] != nil }) else { continue }
                for owner in sorted {
                    let lineage = Set(model.ancestors(of: owner.name))
                    for (i, declared) in list.enumerated() {
                        guard let column = present[names[i]] else { continue }
                        out[owner.name, default: [:]][column] = lineage.contains(declared.entity)
                            ? .some(.attribute(declared.attribute.name, type: declared.attribute.type)) : .some(nil)
                    }
                }
            }
            return out
        }

        /// The attribute stored in column `c` (`Z<NAME>`, or `Z<NAME><n>` where sub-entities collide).
        static func attribute(_ c: String, owners: [CoreDataEntity], model: CoreDataModel) -> CoreDataModel.Attribute? {
            for owner in owners {
                for ancestor in model.ancestors(of: owner.name) {
                    for attribute in model.attributes where attribute.entity == ancestor {
                        let base = "Z" + attribute.name.uppercased()
                        if c == base { return attribute }
                        if c.hasPrefix(base), c.dropFirst(base.count).allSatisfy(\.isNumber), c.count > base.count { return attribute }
                    }
                }
            }
            return nil
        }

        /// The relationship of `owners` (or of their superentities) whose name is `upper` in capitals.
        static func relationship(_ upper: String, owners: [CoreDataEntity], model: CoreDataModel) -> CoreDataModel.Relationship? {
            for owner in owners {
                for ancestor in model.ancestors(of: owner.name) {
                    if let found = model.relationships.first(where: { $0.entity == ancestor && $0.name.uppercased() == upper }) { return found }
                }
            }
            return nil
        }

        /// `Z<ent><NAME>`: entity `ent`'s to-many `name` without an inverse.
        static func hiddenToMany(_ c: String, store: CoreDataStore, model: CoreDataModel) -> Column? {
            let digits = c.dropFirst().prefix { $0.isNumber }
            guard c.hasPrefix("Z"), !digits.isEmpty, let ent = Int(digits), let owner = store.entity(ent: ent) else { return nil }
            let name = c.dropFirst(1 + digits.count)
            guard let relationship = model.relationships.first(where: { $0.entity == owner.name && $0.name.uppercased() == name }) else { return nil }
            return .hiddenToMany(owner: owner.name, name: relationship.name)
        }

        /// The entity number a join table's column `Z_<ent><NAME>` holds objects of (its Z_PKs);
        /// nil for an ordered link's `Z_FOK_` position and any other column.
        static func joinEnd(_ column: String) -> Int? {
            let upper = column.uppercased()
            guard upper.hasPrefix("Z_"), !upper.hasPrefix("Z_FOK_") else { return nil }
            let digits = upper.dropFirst(2).prefix { $0.isASCII && $0.isNumber }
            guard !digits.isEmpty, upper.count > digits.count + 2 else { return nil }
            return Int(digits)
        }

        /// `Z_<ent><NAME>`: the join table of entity `ent`'s many-to-many `name`.
        static func joinRelationship(_ upper: String, store: CoreDataStore, model: CoreDataModel?) -> String? {
            guard upper.hasPrefix("Z_") else { return nil }
            let rest = upper.dropFirst(2)
            let digits = rest.prefix { $0.isNumber }
            guard !digits.isEmpty, let ent = Int(digits), let owner = store.entity(ent: ent) else { return nil }
            let name = rest.dropFirst(digits.count)
            guard !name.isEmpty else { return nil }
            if let relationship = model?.relationships.first(where: { $0.entity == owner.name && $0.name.uppercased() == name }) {
                return "\(owner.name).\(relationship.name)"
            }
            return "\(owner.name).\(name.lowercased())"
        }
    }

    /// Turns row changes into entity, link and bookkeeping changes.
    struct Collector {
        let options: Options
        let a: DiffSchema
        let b: DiffSchema
        let diff: PageDiff
        let labelsA: Labels
        let labelsB: Labels
        let filter: Set<String>
        var entities: [String: EntityChanges] = [:]
        var links: [String: LinkChanges] = [:]
        /// With `Options.written`: what another process changed (rows and columns the migration's
        /// connection did not write), kept apart.
        var otherEntities: [String: EntityChanges] = [:]
        var otherLinks: [String: LinkChanges] = [:]
        /// The table being compared: whether its rows can be told apart by who wrote them.
        private var attribution: Attribution = .mine

        enum Attribution {
            /// Every difference is the migration's (no record of its writes, or one that cannot
            /// be placed in this table).
            case mine
            /// The record of this table's writes, its columns as SQLite numbers them (by name as
            /// the second side's layout spells them), and their declared defaults.
            case rows(WrittenRows.Table, columns: [String: Int], defaults: [String: SQLitePages.Value])
        }
        var bookkeeping = Bookkeeping()
        var removedKeys: [String: [Int64]] = [:]
        var references: [Reference] = []
        /// A plain table's columns its rows are paired by, when not the rowid: `--key table.column`,
        /// else its declared PRIMARY KEY when that is not the rowid (a TEXT or composite key; both
        /// sides declaring the same). `INSERT OR REPLACE` gives a row a new rowid, and a delete and
        /// an insert may reuse one: paired by rowid, a changed row would read as one removed and
        /// one added, or two unrelated rows as one changed.
        private var plainKeys: [String: [String]] = [:]
        /// Objects added or removed of entities matched by a key attribute (`--key`), matched at the end.
        private var pending: [String: (added: [Stashed], removed: [Stashed])] = [:]
        /// Objects added or removed whose `--key` attribute is NULL (not matched by it), by
        /// "Entity.attribute": said, so a key no object has is not taken for "nothing renumbered".
        private(set) var keyless: [String: Int] = [:]
        /// Objects added or removed whose `--key` value another object added (or removed) shares,
        /// by "Entity.attribute": not matched by it (pairing them would be a guess), and said.
        private(set) var ambiguous: [String: Int] = [:]
        /// Rows not held for pairing once `Options.pairingBudget` was spent, by "Entity.attribute"
        /// or "table.column" (see `StoreDiff.Report.unpaired`).
        private(set) var unpaired: [String: Int] = [:]
        /// What the held rows take, roughly (see `Stashed.bytes`).
        private var heldBytes = 0
        /// With `--key` on a Core Data store: objects renumbered (matched by key), by table: old
        /// Z_PK → new. Filled by `matchKeys`; references to them are compared through it.
        private var renumber: [String: [Int64: Int64]] = [:]
        /// The new numbers of `renumber`, by table: a reference to one of them that was not itself
        /// renumbered named an object no longer there.
        private var renumberedTo: [String: Set<Int64>] = [:]
        /// With `--key` on a Core Data store: the tables of the entities matched by key (where
        /// objects may be renumbered). Changed objects whose references into them changed, and
        /// many-to-many links with an end in them, are held until `renumber` is known (a
        /// reference to a renumbered object is not a change).
        private var keyedTables: Set<String> = []
        /// The rowids of each table's rows the page comparison decoded (`compareReferencesIntoRenumbered`
        /// reads the others).
        private var decodedRows: [String: Set<Int64>] = [:]
        private var heldObjects: [(table: String, entity: String, rowid: Int64, before: [String: SQLitePages.Value], after: [String: SQLitePages.Value], labels: [String: Labels.Column])] = []
        private var heldLinks: [String: (relationship: String, removed: [[String: SQLitePages.Value]], added: [[String: SQLitePages.Value]])] = [:]

        struct Stashed {
            var table: String
            /// nil: a plain table's row, paired by its key (`plainKeys`).
            var entity: String?
            var rowid: Int64
            var key: SQLitePages.Value
            var values: [String: SQLitePages.Value]
            var labels: [String: Labels.Column]?

            /// Roughly what the row takes in memory: its values and a dictionary entry each.
            var bytes: Int { Self.bytes(values) }

            static func bytes(_ values: [String: SQLitePages.Value]) -> Int {
                values.reduce(96) { sum, entry in
                    let payload: Int = switch entry.value {
                    case .text(let t): t.utf8.count
                    case .blob(let b): b.count
                    default: 0
                    }
                    return sum + 64 + entry.key.utf8.count + payload
                }
            }
        }

        /// Takes `size` bytes of the pairing budget, if it has them; else counts the row as
        /// `unpaired` under `what`.
        private mutating func holdOrCount(_ what: String, _ size: Int) -> Bool {
            guard take(size) else {
                unpaired[what, default: 0] += 1
                return false
            }
            return true
        }

        /// Takes `size` bytes of the pairing budget, if it has them.
        private mutating func take(_ size: Int) -> Bool {
            guard heldBytes + size <= options.pairingBudget else { return false }
            heldBytes += size
            return true
        }

        /// The table of the objects a reference column points at: a to-one's destination, a
        /// hidden to-many's owner.
        private func referencedTable(_ label: Labels.Column) -> String? {
            let entity: String
            switch label {
            case .toOne(_, let destination): entity = destination
            case .hiddenToMany(let owner, _): entity = owner
            default: return nil
            }
            return b.coreData?.entity(named: entity)?.table ?? a.coreData?.entity(named: entity)?.table ?? entity
        }

        /// A join table's column's objects' table: `Z_<ent><NAME>` names the entity by number.
        private func joinColumnTable(_ column: String) -> String? {
            guard let ent = Labels.joinEnd(column) else { return nil }
            return b.coreData?.entity(ent: ent)?.table ?? a.coreData?.entity(ent: ent)?.table
        }

        /// Holds a row for pairing by key, unless the budget is spent (then false: the caller
        /// records it as it is).
        private mutating func hold(_ item: Stashed, group: String, added: Bool) -> Bool {
            guard take(item.bytes) else {
                // Named only for a row over the budget (not for every row held).
                let column = keyColumnName(item)
                unpaired["\(item.entity ?? item.table).\(item.labels?[column]?.name ?? column)", default: 0] += 1
                return false
            }
            if added { pending[group, default: ([], [])].added.append(item) } else { pending[group, default: ([], [])].removed.append(item) }
            return true
        }

        init(options: Options, a: DiffSchema, b: DiffSchema, diff: PageDiff) {
            self.options = options
            self.a = a
            self.b = b
            self.diff = diff
            labelsA = Labels(a)
            labelsB = Labels(b)
            filter = Set(options.entities.map { $0.lowercased() })
            bookkeeping.shown = options.bookkeeping
            for key in options.keys {
                guard let name = key.split(separator: ".", maxSplits: 1).first.map(String.init) else { continue }
                for store in [a.coreData, b.coreData].compactMap({ $0 }) {
                    for entity in store.entities where entity.name.caseInsensitiveCompare(name) == .orderedSame {
                        if let table = entity.table { keyedTables.insert(table) }
                    }
                }
            }
            for table in Set(a.layouts.keys).intersection(b.layouts.keys) where labelsA.tables[table] ?? .plain == .plain && labelsB.tables[table] ?? .plain == .plain {
                guard let keyA = Self.plainKey(table, side: a, keys: options.keys), let keyB = Self.plainKey(table, side: b, keys: options.keys),
                      keyA.map({ $0.lowercased() }) == keyB.map({ $0.lowercased() }) else { continue }
                plainKeys[table] = keyB
            }
        }

        /// See `plainKeys`.
        static func plainKey(_ table: String, side: DiffSchema, keys: [String]) -> [String]? {
            guard let layout = side.layouts[table], !layout.withoutRowid else { return nil }
            for key in keys {
                let parts = key.split(separator: ".", maxSplits: 1).map(String.init)
                guard parts.count == 2, parts[0].caseInsensitiveCompare(table) == .orderedSame else { continue }
                if let column = layout.columns.first(where: { $0.caseInsensitiveCompare(parts[1]) == .orderedSame }) { return [column] }
            }
            guard !layout.primaryKey.isEmpty, layout.rowidAlias == nil else { return nil }
            return layout.primaryKey
        }

        /// A plain row's key for pairing (`plainKeys`): the column's value, or the columns' values
        /// in one text with their types (1 and '1' are different keys); nil when a part is NULL
        /// (SQLite lets rows of such a key share NULLs: not a key to pair by).
        static func plainKeyValue(_ row: [String: SQLitePages.Value], columns: [String]) -> SQLitePages.Value? {
            let values = columns.map { row[$0] ?? .null }
            guard !values.contains(.null) else { return nil }
            if values.count == 1 { return values[0] }
            return .text(values.map { value -> String in
                switch value {
                case .null: return "n"
                case .integer(let n): return "i\(n)"
                case .real(let d): return "r\(d.bitPattern)"
                case .text(let t): return "t\(t.utf8.count):\(t)"
                case .blob(let b): return "b\(b.count):" + b.map { String(format: "%02x", $0) }.joined()
                }
            }.joined(separator: "\u{0}"))
        }

        mutating func compareTables() throws {
            func roots(_ s: DiffSchema) -> [String: UInt32] {
                Dictionary(s.entries.filter { $0.type == "table" && $0.rootPage > 0 }.map { ($0.name, $0.rootPage) }, uniquingKeysWith: { x, _ in x })
            }
            let rootsA = roots(a), rootsB = roots(b)
            for table in Set(rootsA.keys).union(rootsB.keys).sorted() {
                let kind = labelsB.tables[table] ?? labelsA.tables[table] ?? .plain
                let sameLayout = a.layouts[table]?.columns == b.layouts[table]?.columns
                // A WITHOUT ROWID table's rows are paired by its primary key when both sides declare the same one.
                let keyA = a.layouts[table].flatMap { $0.withoutRowid ? $0.primaryKey : nil }
                let keyB = b.layouts[table].flatMap { $0.withoutRowid ? $0.primaryKey : nil }
                let keyColumns = keyA != nil && keyA == keyB ? keyA?.count ?? 0 : 0
                attribution = Self.attribution(of: table, written: options.keys.isEmpty ? options.written : nil, a: a, b: b,
                                               rootA: rootsA[table], rootB: rootsB[table])
                // Rows decoded and merged on a thread of their own while this one records them.
                let diff = self.diff, rootA = rootsA[table], rootB = rootsB[table]
                try RowPipe<PageDiff.RowChange>.run(produce: { emit in
                    try diff.compare(rootA: rootA, rootB: rootB, keyColumns: keyColumns, emit)
                }, consume: { change in
                    try self.record(table, kind: kind, change, sameLayout: sameLayout)
                })
            }
        }

        /// A table's rows are told apart by who wrote them only when the record can be placed in
        /// it: not rewritten by the migrations' schema changes (made, dropped, renamed, rebuilt, a
        /// column dropped or renamed: theirs as a whole), on both sides, rowids (not WITHOUT
        /// ROWID), and the first side's columns still numbered as they were (`ADD COLUMN` appends).
        static func attribution(of table: String, written: WrittenRows?, a: DiffSchema, b: DiffSchema, rootA: UInt32?, rootB: UInt32?) -> Attribution {
            guard let written, !written.overflowed, !written.rewritten.contains(table.lowercased()), rootA != nil, rootB != nil,
                  let layoutA = a.layouts[table], let layoutB = b.layouts[table], !layoutA.withoutRowid, !layoutB.withoutRowid,
                  layoutB.columns.count >= layoutA.columns.count,
                  zip(layoutA.columns, layoutB.columns).allSatisfy({ $0.caseInsensitiveCompare($1) == .orderedSame }) else { return .mine }
            return .rows(written.table(table) ?? WrittenRows.Table(),
                         columns: Dictionary(layoutB.columns.enumerated().map { ($1, $0) }, uniquingKeysWith: { x, _ in x }),
                         defaults: Dictionary(zip(layoutB.columns, layoutB.defaults), uniquingKeysWith: { x, _ in x }))
        }

        /// Splits a row's change into the migration's part and another process's: a row added or
        /// removed is the migration's if its connection inserted or deleted it; a changed row's
        /// columns each go to the migration if it changed that column of the row.
        private func split(_ table: String, rowid: Int64, _ before: [String: SQLitePages.Value]?, _ after: [String: SQLitePages.Value]?)
            -> (mine: ([String: SQLitePages.Value]?, [String: SQLitePages.Value]?)?, others: ([String: SQLitePages.Value]?, [String: SQLitePages.Value]?)?) {
            guard case .rows(let written, let columns, let defaults) = attribution else { return ((before, after), nil) }
            guard let before, let after else {
                if written.rows.contains(rowid) { return ((before, after), nil) }
                // An object another process added that the migrations then updated: the object
                // is the other's, the columns the migrations wrote are theirs (from the default).
                if let after {
                    let wrote = after.keys.filter { column in columns[column].map { written.wrote(rowid, column: $0) } ?? false }
                    if !wrote.isEmpty {
                        var was = after
                        for column in wrote { was[column] = defaults[column] ?? .null }
                        if was != after { return ((was, after), (nil, after)) }
                    }
                }
                return (nil, (before, after))
            }
            if written.rows.contains(rowid) { return ((before, after), nil) }
            var mine: [String] = [], others: [String] = []
            for (column, new) in after {
                let old = before[column] ?? defaults[column] ?? .null
                guard old != new else { continue }
                if written.wrote(rowid, column: columns[column]) { mine.append(column) } else { others.append(column) }
            }
            if others.isEmpty { return ((before, after), nil) }
            if mine.isEmpty { return (nil, (before, after)) }
            // Each part: the row as it was with that part's columns changed.
            var mineAfter = after, othersAfter = after
            for column in others { mineAfter[column] = before[column] ?? defaults[column] ?? .null }
            for column in mine { othersAfter[column] = before[column] ?? defaults[column] ?? .null }
            return ((before, mineAfter), (before, othersAfter))
        }

        /// Records into the other process's tallies.
        private mutating func asOthers(_ body: (inout Collector) throws -> Void) rethrows {
            swap(&entities, &otherEntities)
            swap(&links, &otherLinks)
            defer {
                swap(&entities, &otherEntities)
                swap(&links, &otherLinks)
            }
            try body(&self)
        }

        private func decode(_ payload: [UInt8]?, table: String, rowid: Int64, side: DiffSchema, encoding: Int, what: String) throws -> [String: SQLitePages.Value]? {
            guard let payload else { return nil }
            let values = try SQLitePages.record(payload, encoding: encoding, what: "\(what): table \(table), rowid \(rowid)")
            return Dictionary(side.values(of: table, record: values, rowid: rowid), uniquingKeysWith: { x, _ in x })
        }

        private mutating func record(_ table: String, kind: Labels.TableKind, _ change: PageDiff.RowChange, sameLayout: Bool) throws {
            if !keyedTables.isEmpty { decodedRows[table, default: []].insert(change.rowid) }
            let before = try decode(change.before, table: table, rowid: change.rowid, side: a, encoding: diff.headerA.textEncoding, what: diff.a.what)
            let after = try decode(change.after, table: table, rowid: change.rowid, side: b, encoding: diff.headerB.textEncoding, what: diff.b.what)
            switch kind {
            case .bookkeeping:
                bookkeeping.rows += 1
                if !bookkeeping.tables.contains(table) { bookkeeping.tables.append(table) }
                guard options.bookkeeping else { return }
                try recordRow(table, entity: nil, change, before, after, labels: nil)
            case .join(let relationship):
                // A link is both ends': `--entity` of the declaring entity or of its destination shows it.
                let parts = relationship.split(separator: ".", maxSplits: 1).map(String.init)
                let destination = parts.count < 2 ? nil : [b, a].lazy.compactMap {
                    $0.coreData?.model?.relationships.first { $0.entity == parts[0] && $0.name == parts[1] }?.destination
                }.first
                guard wantedEnd(parts.first ?? "", table: table) || destination.map({ wantedEnd($0, table: table) }) == true else { return }
                if case .rows(let written, _, _) = attribution, !written.touched(change.rowid) {
                    asOthers { $0.recordLink(table, relationship: relationship, before, after) }
                } else if !keyedTables.isEmpty, [before, after].contains(where: { row in
                              row?.keys.contains { joinColumnTable($0).map(keyedTables.contains) == true } == true }),
                          holdOrCount("\(relationship) (links)", (before.map(Stashed.bytes) ?? 0) + (after.map(Stashed.bytes) ?? 0)) {
                    // Its ends may be renumbered objects (known at the end, `matchKeys`). Taken
                    // out of the dictionary while it grows (see `links`).
                    var held = heldLinks.removeValue(forKey: table) ?? (relationship, [], [])
                    if let before, before != after { held.removed.append(before) }
                    if let after, before != after { held.added.append(after) }
                    heldLinks[table] = held
                } else {
                    recordLink(table, relationship: relationship, before, after)
                }
            case .entity:
                func entityName(_ values: [String: SQLitePages.Value], _ labels: Labels) -> String {
                    if case .integer(let ent)? = values.first(where: { $0.key.uppercased() == "Z_ENT" })?.value,
                       let name = labels.entityByEnt[Int(ent)] { return name }
                    return table
                }
                // An object is Z_ENT and Z_PK: a row whose Z_ENT changed is one object removed and
                // another added (of the other entity), not a changed attribute.
                var sides = [(before, after)]
                if let before, let after, entityName(before, labelsA) != entityName(after, labelsB) { sides = [(before, nil), (nil, after)] }
                for (was, now) in sides {
                    let labels = now != nil ? labelsB : labelsA
                    let name = entityName(now ?? was ?? [:], labels)
                    let (mine, others) = split(table, rowid: change.rowid, was, now)
                    if let mine { try recordRow(table, entity: name, change, mine.0, mine.1, labels: labels.columns(for: table, entity: name)) }
                    if let others { try asOthers { try $0.recordRow(table, entity: name, change, others.0, others.1, labels: labels.columns(for: table, entity: name)) } }
                }
            case .plain:
                let (mine, others) = split(table, rowid: change.rowid, before, after)
                if let mine { try recordRow(table, entity: nil, change, mine.0, mine.1, labels: nil) }
                if let others { try asOthers { try $0.recordRow(table, entity: nil, change, others.0, others.1, labels: nil) } }
            }
        }

        private mutating func recordLink(_ table: String, relationship: String, _ before: [String: SQLitePages.Value]?, _ after: [String: SQLitePages.Value]?) {
            // Taken out of the dictionary while it changes: a copy left in it would make every
            // append copy the whole list (quadratic in the links).
            var entry = links.removeValue(forKey: table) ?? {
                var made = LinkChanges(relationship: relationship, table: table)
                let parts = relationship.split(separator: ".", maxSplits: 1).map(String.init)
                if parts.count == 2, let r = [b, a].lazy.compactMap({ $0.coreData?.model?.relationships.first { $0.entity == parts[0] && $0.name == parts[1] } }).first {
                    made.inverse = r.inverse.map { "\(r.destination).\($0)" } ?? r.destination
                }
                return made
            }()
            defer { links[table] = entry }
            // The same two objects, only their position in an ordered many-to-many (`Z_FOK_…`) moved.
            if let before, let after, before != after,
               before.filter({ !$0.key.uppercased().hasPrefix("Z_FOK_") }) == after.filter({ !$0.key.uppercased().hasPrefix("Z_FOK_") }) {
                entry.reordered += 1
                addLink(&entry, "reordered", after, before: before)
                return
            }
            if let before, before != after { entry.removed += 1; addLink(&entry, "removed", before) }
            if let after, before != after {
                entry.added += 1
                addLink(&entry, "added", after)
                // Each end of a link written must name an object (a migration's check of the result).
                for (column, value) in after {
                    guard case .integer(let key) = value, let destination = joinColumnTable(column) else { continue }
                    references.append(Reference(relationship: relationship, destinationTable: destination, key: key))
                }
            }
        }

        /// A many-to-many link whose ends are the same two objects, one renumbered (`--bookkeeping`):
        /// "Item 1005 ↔ Tag 3 (was Item 5 ↔ Tag 3)".
        private mutating func recordRenumberedLink(_ table: String, relationship: String, _ before: [String: SQLitePages.Value], _ after: [String: SQLitePages.Value]) {
            recordLink(table, relationship: relationship, nil, nil)
            guard var entry = links.removeValue(forKey: table) else { return }
            defer { links[table] = entry }
            entry.renumbered += 1
            addLink(&entry, "renumbered", after, was: before)
        }

        /// Names for a hint: the first 40, then how many more (a list cut short said nothing of
        /// the rest: Photos' 54 entities stopped at Moment).
        static func listed(_ names: [String]) -> String {
            names.prefix(40).joined(separator: ", ") + (names.count > 40 ? " and \(names.count - 40) more" : "")
        }

        /// `--entity` names that are neither an entity nor a table on either side are a usage error
        /// (64), not an empty "same": a misspelt name must not read as "nothing changed".
        func checkFilter() throws {
            try checkKeys()
            guard !filter.isEmpty else { return }
            var known: [String: String] = [:]
            for schema in [a, b] { for entry in schema.entries where entry.type == "table" { known[entry.name.lowercased()] = entry.name } }
            for labels in [labelsA, labelsB] { for name in labels.entityByEnt.values { known[name.lowercased()] = name } }
            let unknown = options.entities.filter { known[$0.lowercased()] == nil }
            guard unknown.isEmpty else {
                let entities = Set(labelsA.entityByEnt.values).union(labelsB.entityByEnt.values).sorted()
                let tables = Set(known.values).subtracting(entities).filter { !$0.hasPrefix("sqlite_") }.sorted()
                let listed = (entities.isEmpty ? "" : "entities: " + Self.listed(entities) + "; ") + "tables: " + Self.listed(tables)
                let guesses = unknown.map { Format.didYouMean($0, among: entities + tables) }
                let said = zip(unknown, guesses).map { $0 + $1 }.joined(separator: ", ")
                throw StoreOpsError(.usage, "--entity \(said): no entity or table of that name on either side",
                                    hint: listed)
            }
        }

        /// An entity named takes its sub-entities with it (`--entity Item` shows a Task's changes
        /// too when Task is an Item), as Core Data's fetch of an entity does.
        /// The column of an attribute named as the model names it, as the column is named, or as Core
        /// Data names its column (`title`: `ZTITLE`, for a store whose model cannot be read).
        static func column(named name: String, labels: [String: Labels.Column]?, columns: [String]) -> String? {
            if let found = labels?.first(where: { if case .attribute(let n, _) = $0.value { return n.caseInsensitiveCompare(name) == .orderedSame }; return false }) {
                return found.key
            }
            return columns.first { $0.caseInsensitiveCompare(name) == .orderedSame } ?? columns.first { $0.caseInsensitiveCompare("Z" + name) == .orderedSame }
        }

        /// Each `--key Entity.attribute` names an entity (or a plain table) of either side and an
        /// attribute (or column) it has: a misspelt one must not be ignored in silence (64).
        func checkKeys() throws {
            for key in options.keys {
                let parts = key.split(separator: ".", maxSplits: 1).map(String.init)
                guard parts.count == 2 else { throw StoreOpsError(.usage, "--key \(key): name an entity and its attribute, as Entity.attribute") }
                var found = false
                var attributes = Set<String>()
                var entityKnown = false
                for (side, labels) in [(a, labelsA), (b, labelsB)] {
                    var tables: [(table: String, entity: String?)] = []
                    if let store = side.coreData {
                        for entity in store.entities where entity.name.caseInsensitiveCompare(parts[0]) == .orderedSame {
                            entityKnown = true
                            if let table = entity.table { tables.append((table, entity.name)) }
                        }
                    } else if let table = side.layouts.keys.first(where: { $0.caseInsensitiveCompare(parts[0]) == .orderedSame }) {
                        entityKnown = true
                        tables.append((table, nil))
                    }
                    for (table, entity) in tables {
                        let own = labels.columns(for: table, entity: entity)
                        for (_, label) in own ?? [:] {
                            switch label {
                            case .attribute(let name, _), .plain(let name): attributes.insert(name)
                            default: break
                            }
                        }
                        if own == nil { attributes.formUnion(side.layouts[table]?.columns ?? []) }
                        if let column = Self.column(named: parts[1], labels: own, columns: side.layouts[table]?.columns ?? []) {
                            switch own?[column] {
                            case .toOne(let name, let destination)?:
                                throw StoreOpsError(.usage, "--key \(key): \(name) is a relationship (to \(destination)), not an attribute",
                                                    hint: "name an attribute every object has its own value of (a UUID)")
                            case .identity?, .entity?, .opt?:
                                throw StoreOpsError(.usage, "--key \(key): \(column) is Core Data's bookkeeping, not an attribute",
                                                    hint: "objects are matched by Z_PK without --key; name an attribute every object has its own value of (a UUID)")
                            default: found = true
                            }
                        }
                    }
                }
                guard entityKnown else {
                    let names = Set(labelsA.entityByEnt.values).union(labelsB.entityByEnt.values).sorted()
                    // A Core Data store's table named where its entity is meant (`ZTAG.ZNAME`).
                    for side in [b, a] {
                        guard let store = side.coreData else { continue }
                        let owners = store.entities.filter { $0.table?.caseInsensitiveCompare(parts[0]) == .orderedSame }.map(\.name)
                        guard let first = owners.first else { continue }
                        throw StoreOpsError(.usage, "--key \(key): \(parts[0]) is the table of \(owners.joined(separator: ", ")); --key names an entity and its attribute",
                                            hint: "write --key \(first).\(parts[1]) (the attribute as the model or the column names it)")
                    }
                    throw StoreOpsError(.usage, "--key \(key): no entity or table \(parts[0]) on either side\(Format.didYouMean(String(parts[0]), among: names))",
                                        hint: names.isEmpty ? "name a table of the store" : "entities: " + Self.listed(names))
                }
                guard found else {
                    // A to-many relationship has no column of its own to name.
                    for side in [a, b] {
                        guard let model = side.coreData?.model,
                              let entity = model.superentity.keys.first(where: { $0.caseInsensitiveCompare(parts[0]) == .orderedSame }) else { continue }
                        let lineage = Set(model.ancestors(of: entity))
                        if let r = model.relationships.first(where: { lineage.contains($0.entity) && $0.name.caseInsensitiveCompare(parts[1]) == .orderedSame }) {
                            throw StoreOpsError(.usage, "--key \(key): \(r.name) is a relationship (\(r.isToMany ? "to-many" : "to-one") to \(r.destination)), not an attribute",
                                                hint: "name an attribute every object has its own value of (a UUID)")
                        }
                    }
                    // The model's attributes of the entity and its superentities, when there is a
                    // model (a table's columns hold its sibling entities' too); else the columns.
                    var own = Set<String>()
                    for side in [a, b] {
                        guard let model = side.coreData?.model,
                              let entity = model.superentity.keys.first(where: { $0.caseInsensitiveCompare(parts[0]) == .orderedSame }) else { continue }
                        let lineage = Set(model.ancestors(of: entity))
                        own.formUnion(model.attributes.filter { lineage.contains($0.entity) }.map(\.name))
                    }
                    let names = (own.isEmpty ? attributes : own).sorted()
                    throw StoreOpsError(.usage, "--key \(key): \(parts[0]) has no attribute \(parts[1]) on either side",
                                        hint: names.isEmpty ? "" : "its attributes: " + Format.list(names, first: 60))
                }
            }
        }

        /// A link's end: wanted as `wanted` says, and also when `--entity` names a sub-entity of
        /// it (a link of GenericAsset's relationship may be an Asset's: `--entity Asset` said
        /// "same" while such links changed). Which end object is of the sub-entity is not known
        /// here without reading its row, so such a filter shows the relationship's links whole.
        private func wantedEnd(_ entity: String, table: String) -> Bool {
            if wanted(entity, table: table) { return true }
            for side in [b, a] {
                guard let model = side.coreData?.model else { continue }
                for name in model.superentity.keys where filter.contains(name.lowercased()) && model.ancestors(of: name).contains(entity) { return true }
            }
            return false
        }

        private func wanted(_ entity: String, table: String) -> Bool {
            if filter.isEmpty || filter.contains(entity.lowercased()) || filter.contains(table.lowercased()) { return true }
            for side in [b, a] {
                if let lineage = side.coreData?.model?.ancestors(of: entity), lineage.contains(where: { filter.contains($0.lowercased()) }) { return true }
            }
            return false
        }

        /// `before`: a reordered link's row as it was (its positions shown, before → after).
        private func addLink(_ entry: inout LinkChanges, _ change: String, _ values: [String: SQLitePages.Value],
                             before: [String: SQLitePages.Value]? = nil, was: [String: SQLitePages.Value]? = nil) {
            if let limit = options.limit, entry.links.count >= limit { entry.unlisted += 1; return }
            let labels = labelsB.coreData ? labelsB : labelsA
            func ends(_ values: [String: SQLitePages.Value]) -> String {
                values.keys.sorted().compactMap { column -> String? in
                    guard !column.uppercased().hasPrefix("Z_FOK_") else { return nil }
                    let entity = Labels.joinEnd(column).flatMap { labels.entityByEnt[$0] } ?? column
                    return "\(entity) \(render(values[column] ?? .null, type: nil))"
                }.joined(separator: " ↔ ")
            }
            var link = ends(values)
            if let was { link += " (was \(ends(was)))" }
            if let before {
                let moved = values.keys.sorted().filter { $0.uppercased().hasPrefix("Z_FOK_") && before[$0] != values[$0] }
                link += " (position " + moved.map { "\(render(before[$0] ?? .null, type: nil)) → \(render(values[$0] ?? .null, type: nil))" }
                    .joined(separator: ", ") + ")"
            }
            entry.links.append(LinkChange(change: change, link: link))
        }

        /// The `--key` (or primary key) column a stashed object was matched by, for messages.
        private func keyColumnName(_ item: Stashed) -> String {
            let side = b.layouts[item.table] != nil ? b : a
            if let entity = item.entity {
                return keyColumn(entity: entity, table: item.table, labels: item.labels, side: side) ?? "key"
            }
            return (plainKeys[item.table] ?? []).joined(separator: ", ")
        }

        /// The column holding the `--key` attribute of `entity` (or of one of its superentities), if any.
        private func keyColumn(entity: String, table: String, labels: [String: Labels.Column]?, side: DiffSchema) -> String? {
            let lineage = side.coreData?.model?.ancestors(of: entity) ?? [entity]
            for key in options.keys {
                let parts = key.split(separator: ".", maxSplits: 1).map(String.init)
                guard parts.count == 2, lineage.contains(where: { $0.caseInsensitiveCompare(parts[0]) == .orderedSame }) else { continue }
                if let column = Self.column(named: parts[1], labels: labels, columns: side.layouts[table]?.columns ?? []) { return column }
            }
            return nil
        }

        /// Matches the stashed objects of keyed entities: an object removed and one added with the
        /// same key are the same object (its Z_PK renumbered), compared attribute by attribute.
        mutating func matchKeys() throws {
            // First every group's pairs (and so every renumbered object), then what they record.
            var groups: [(pairs: [(Stashed, Stashed)], added: [Stashed], removed: [Stashed])] = []
            for (_, group) in pending.sorted(by: { $0.key < $1.key }) {
                var removed: [SQLitePages.Value: [Stashed]] = [:]
                for item in group.removed { removed[item.key, default: []].append(item) }
                var addedCount: [SQLitePages.Value: Int] = [:]
                for item in group.added { addedCount[item.key, default: 0] += 1 }
                // A value two objects on one side share is no identity: those objects are listed
                // as added and removed, unmatched.
                var shared = Set(addedCount.filter { $0.value > 1 }.keys)
                shared.formUnion(removed.filter { $0.value.count > 1 }.keys)
                if !shared.isEmpty, let first = group.added.first ?? group.removed.first {
                    let count = group.added.filter { shared.contains($0.key) }.count + group.removed.filter { shared.contains($0.key) }.count
                    let key = keyColumnName(first)
                    let column = first.labels?[key]?.name ?? key
                    ambiguous["\(first.entity ?? first.table).\(column)", default: 0] += count
                }
                var pairs: [(Stashed, Stashed)] = [], added: [Stashed] = []
                for item in group.added {
                    if !shared.contains(item.key), let match = removed[item.key]?.popLast() {
                        pairs.append((match, item))
                        if item.entity != nil, case .integer(let old)? = match.values.first(where: { $0.key.uppercased() == "Z_PK" })?.value,
                           case .integer(let new)? = item.values.first(where: { $0.key.uppercased() == "Z_PK" })?.value, old != new {
                            renumber[item.table, default: [:]][old] = new
                        }
                    } else {
                        added.append(item)
                    }
                }
                groups.append((pairs, added, removed.values.flatMap { $0 }.sorted { $0.rowid < $1.rowid }))
            }
            pending = [:]
            for (table, map) in renumber {
                renumberedTo[table] = Set(map.values)
            }
            for group in groups {
                for (match, item) in group.pairs {
                    try recordRow(item.table, entity: item.entity, PageDiff.RowChange(rowid: item.rowid, before: nil, after: nil),
                                  match.values, item.values, labels: item.labels, matchedKey: item.key)
                }
                for item in group.added {
                    try recordRow(item.table, entity: item.entity, PageDiff.RowChange(rowid: item.rowid, before: nil, after: nil),
                                  nil, item.values, labels: item.labels, matchedKey: .null)
                }
                for item in group.removed {
                    try recordRow(item.table, entity: item.entity, PageDiff.RowChange(rowid: item.rowid, before: nil, after: nil),
                                  item.values, nil, labels: item.labels, matchedKey: .null)
                }
            }
            try resolveHeld()
        }

        /// Rows the page comparison did not decode (the same bytes on both sides) that point, by a
        /// to-one reference or a many-to-many link, at a number an object renumbered under `--key`
        /// left: they named that object, and name nothing (or another object) now. A trial's diff
        /// said "same" with 189 items pointing at categories no longer there. Read only when some
        /// object was renumbered: the referencing tables of the second side, whole.
        mutating func compareReferencesIntoRenumbered() throws {
            let moved = renumber.filter { !$0.value.isEmpty }
            guard !moved.isEmpty else { return }
            for entry in b.entries where entry.type == "table" && entry.rootPage > 0 {
                let table = entry.name
                let kind = labelsB.tables[table] ?? .plain
                let targets: [String: String]   // column → the renumbered table it points into
                switch kind {
                case .entity:
                    targets = (labelsB.columns[table] ?? [:]).compactMapValues { label in referencedTable(label).flatMap { moved[$0] != nil ? $0 : nil } }
                case .join:
                    targets = Dictionary(uniqueKeysWithValues: (b.layouts[table]?.columns ?? []).compactMap { column in
                        joinColumnTable(column).flatMap { moved[$0] != nil ? (column, $0) : nil } })
                default: continue
                }
                guard !targets.isEmpty, b.layouts[table]?.withoutRowid != true else { continue }   // Core Data's tables have rowids
                let decoded = decodedRows[table] ?? []
                attribution = .mine
                try diff.forEachRowOfB(root: entry.rootPage) { rowid, payload in
                    guard !decoded.contains(rowid),
                          let values = try decode(payload, table: table, rowid: rowid, side: b, encoding: diff.headerB.textEncoding, what: diff.b.what),
                          targets.contains(where: { column, target in
                              if case .integer(let o)? = values[column] { return moved[target]?[o] != nil }
                              return false
                          }) else { return }
                    switch kind {
                    case .join(let relationship):
                        // One link removed (to the object the number named) and one added (to the number).
                        var held = heldLinks.removeValue(forKey: table) ?? (relationship, [], [])
                        held.removed.append(values)
                        held.added.append(values)
                        heldLinks[table] = held
                    default:
                        var name = table
                        if case .integer(let ent)? = values.first(where: { $0.key.uppercased() == "Z_ENT" })?.value, let known = labelsB.entityByEnt[Int(ent)] { name = known }
                        try recordRow(table, entity: name, PageDiff.RowChange(rowid: rowid, before: nil, after: nil), values, values,
                                      labels: labelsB.columns(for: table, entity: name), matchedKey: .null)
                    }
                }
            }
            try resolveHeld()
        }

        /// Objects and links held until `renumber` was known, compared through it now.
        private mutating func resolveHeld() throws {
            // Objects held for their references, compared through `renumber` now.
            let objects = heldObjects
            heldObjects = []
            for o in objects {
                try recordRow(o.table, entity: o.entity, PageDiff.RowChange(rowid: o.rowid, before: nil, after: nil), o.before, o.after,
                              labels: o.labels, matchedKey: .null)
            }
            // Links: one removed and one added that are the same two objects once renumbered are
            // no change; the same two objects in another position are reordered.
            for (table, held) in heldLinks.sorted(by: { $0.key < $1.key }) {
                func objects(_ row: [String: SQLitePages.Value]) -> [String: SQLitePages.Value] { row.filter { !$0.key.uppercased().hasPrefix("Z_FOK_") } }
                var added: [[String: SQLitePages.Value]: [[String: SQLitePages.Value]]] = [:]
                for row in held.added { added[objects(row), default: []].append(row) }
                var removedLeft: [[String: SQLitePages.Value]] = []
                for row in held.removed {
                    var translated = row
                    for (column, value) in row {
                        if case .integer(let old) = value, let target = joinColumnTable(column), let new = renumber[target]?[old] { translated[column] = .integer(new) }
                    }
                    if let match = added[objects(translated)]?.popLast() {
                        if match == translated {
                            // The same two objects, an end renumbered: bookkeeping, listed when asked.
                            if translated != row {
                                if options.bookkeeping { recordRenumberedLink(table, relationship: held.relationship, row, match) } else { bookkeeping.references += 1 }
                            }
                        } else {
                            recordLink(table, relationship: held.relationship, translated, match)
                        }
                    } else {
                        removedLeft.append(row)
                    }
                }
                for row in removedLeft { recordLink(table, relationship: held.relationship, row, nil) }
                for row in held.added {
                    if var list = added[objects(row)], let i = list.firstIndex(of: row) {
                        list.remove(at: i)
                        added[objects(row)] = list
                        recordLink(table, relationship: held.relationship, nil, row)
                    }
                }
            }
            heldLinks = [:]
            heldBytes = 0
        }

        private mutating func recordRow(_ table: String, entity: String?, _ change: PageDiff.RowChange, _ before: [String: SQLitePages.Value]?,
                                        _ after: [String: SQLitePages.Value]?, labels: [String: Labels.Column]?,
                                        matchedKey: SQLitePages.Value? = nil) throws {
            // With --key, the objects of a keyed entity's table are paired (and their renumbering
            // learnt) whatever --entity shows: a reference from a shown object to one renumbered
            // must compare through it. Those not shown are dropped once paired (`matchedKey` set).
            let shown = wanted(entity ?? table, table: table)
            guard shown || (matchedKey == nil && keyedTables.contains(table)) else { return }
            if matchedKey == nil, entity == nil, let columns = plainKeys[table] {
                let was = before.flatMap { Self.plainKeyValue($0, columns: columns) }, now = after.flatMap { Self.plainKeyValue($0, columns: columns) }
                if let before, let after, let was, let now, was != now {
                    // One rowid, two rows (one deleted, another inserted in its place): each paired by its key.
                    try recordRow(table, entity: nil, change, before, nil, labels: labels)
                    try recordRow(table, entity: nil, change, nil, after, labels: labels)
                    return
                }
                if (before == nil) != (after == nil), let key = was ?? now, let row = after ?? before {
                    let item = Stashed(table: table, entity: nil, rowid: change.rowid, key: key, values: row, labels: labels)
                    if hold(item, group: "\u{0}\(table)", added: after != nil) { return }
                    return try recordRow(table, entity: nil, change, before, after, labels: labels, matchedKey: .null)
                }
                // A row added or removed with no value for its key (NULL) is not paired by it: said,
                // as an entity's keyless objects are (a plain table's own key counts only when named).
                if (before == nil) != (after == nil), was == nil, now == nil, options.keys.contains(where: { $0.lowercased().hasPrefix(table.lowercased() + ".") }) {
                    keyless["\(table).\(columns.joined(separator: ", "))", default: 0] += 1
                }
            }
            // One Z_PK, two objects (a renumbering reused the number: shifted, swapped): each is
            // paired by its key, as a plain table's rows are.
            // (Both values known: a key column the first side lacks, or a key set where it was
            // NULL, is the same object gaining it.)
            if matchedKey == nil, let entity, let before, let after,
               let column = keyColumn(entity: entity, table: table, labels: labels, side: b),
               let was = before[column], was != .null, let now = after[column], now != .null, was != now {
                try recordRow(table, entity: entity, change, before, nil, labels: labels)
                try recordRow(table, entity: entity, change, nil, after, labels: labels)
                return
            }
            if matchedKey == nil, shown, let entity, (before == nil) != (after == nil),
               let column = keyColumn(entity: entity, table: table, labels: labels, side: after != nil ? b : a),
               let row = after ?? before, (row[column] ?? .null) == .null {
                keyless["\(entity).\(labels?[column]?.name ?? column)", default: 0] += 1
            }
            if matchedKey == nil, let entity, (before == nil) != (after == nil),
               let column = keyColumn(entity: entity, table: table, labels: labels, side: after != nil ? b : a),
               let row = after ?? before, let value = row[column], value != .null {
                let item = Stashed(table: table, entity: entity, rowid: change.rowid, key: value, values: row, labels: labels)
                if hold(item, group: "\(entity)\u{0}\(table)", added: after != nil) { return }
                return try recordRow(table, entity: entity, change, before, after, labels: labels, matchedKey: .null)
            }
            guard shown else { return }
            if matchedKey == nil, !keyedTables.isEmpty, let entity, let before, let after, let labels,
               labels.contains(where: { referencedTable($0.value).map(keyedTables.contains) == true
                   && ((before[$0.key] ?? .null) != .null || (after[$0.key] ?? .null) != .null) }),
               holdOrCount("\(entity) (references)", Stashed.bytes(before) + Stashed.bytes(after)) {
                // A reference changed: perhaps only because the object it points at was renumbered.
                heldObjects.append((table, entity, change.rowid, before, after, labels))
                return
            }
            let key = entity.map { "\($0)\u{0}\(table)" } ?? table
            // Taken out of the dictionary while it changes (see `links` above), put back on every way out.
            let existing = entities.removeValue(forKey: key)
            var entry = existing ?? EntityChanges(entity: entity, table: table)
            var keep = existing != nil   // a new entry is kept only once it records a change
            defer { if keep { entities[key] = entry } }
            if entry.lineage.isEmpty, let entity {
                entry.lineage = ((after != nil ? b : a).coreData?.model?.ancestors(of: entity)) ?? [entity]
            }
            let layout = (after != nil ? b : a).layouts[table]
            var object = objectName(entity: entity, rowid: change.rowid, values: after ?? before ?? [:], layout: layout)
            if let entity, let matchedKey, matchedKey != .null, let before, let after {
                let old = before.first { $0.key.uppercased() == "Z_PK" }.map { render($0.value, type: nil) } ?? "?"
                let new = after.first { $0.key.uppercased() == "Z_PK" }.map { render($0.value, type: nil) } ?? "?"
                object = "\(entity ?? table) \(render(matchedKey, type: nil)) (Z_PK \(old) → \(new))"
            }
            // A plain row paired by --key whose INTEGER PRIMARY KEY changed: renumbered, named by its key.
            var renumberedAlias: String?
            if entity == nil, let matchedKey, matchedKey != .null, let before, let after, let alias = layout?.rowidAlias,
               let aliasName = layout?.columns[alias], let columns = plainKeys[table], !columns.contains(aliasName) {
                renumberedAlias = aliasName
                if before[aliasName] != after[aliasName] {
                    object = "\(columns.joined(separator: ", ")) \(render(matchedKey, type: nil)) (\(aliasName) \(render(before[aliasName] ?? .null, type: nil)) → \(render(after[aliasName] ?? .null, type: nil)))"
                }
            }
            var values: [ValueChange] = []
            let kind: String
            if let before, let after {
                kind = "changed"
                var meaningful = false
                var throughRenumbered = false
                // A column only the second side has (added by ALTER TABLE) reads as its default
                // before; one only the first side has (dropped) is a schema change alone.
                let defaults = b.layouts[table].map { Dictionary(zip($0.columns, $0.defaults), uniquingKeysWith: { x, _ in x }) } ?? [:]
                for column in after.keys.sorted() {
                    let old = before[column] ?? defaults[column] ?? .null, new = after[column] ?? .null
                    let label = labels?[column] ?? .plain(column)
                    if case .integer(let o) = old, let target = referencedTable(label), let map = renumber[target], !map.isEmpty {
                        // A reference into a table whose objects were renumbered under --key: the
                        // object it named is now at its new number (or, when another object took
                        // the number and it was not renumbered, no longer there); the same number
                        // may name another object.
                        let now: Int64? = map[o] ?? (renumberedTo[target]?.contains(o) == true ? nil : o)
                        if case .integer(let n) = new, now == n {
                            // The same object under its new number: bookkeeping, shown with
                            // --bookkeeping (counted, it was never listed: a new user's trial).
                            guard o != n, options.bookkeeping else {
                                if o != n { throughRenumbered = true }
                                continue
                            }
                        }
                    } else {
                        guard old != new, column != renumberedAlias || options.bookkeeping else { continue }
                    }
                    if label == .opt && !options.bookkeeping { continue }
                    if label == .identity && matchedKey != nil && !options.bookkeeping { continue }   // matched by key: its Z_PK was renumbered
                    meaningful = true
                    if label.name.caseInsensitiveCompare(column) != .orderedSame, entry.columns[label.name] == nil { entry.columns[label.name] = column }
                    if case .text(let x) = old, case .text(let y) = new, max(x.count, y.count) > (options.shortValues ? 60 : 4096) {
                        // Long texts are shown from a little before where they first differ (the
                        // first 4,096 characters of two texts that differ after them would read the same).
                        let (a, b) = options.shortValues ? Self.window(x, y) : Self.window(x, y, width: 4096, lead: 200)
                        values.append(ValueChange(name: label.name, before: a, after: b, beforeValue: typed(old), afterValue: typed(new)))
                    } else {
                        var was = render(old, label: label)
                        // An object renumbered under --key is named with its new number too:
                        // "Category 1 (now 1001) → Category 1002" moved, not "1 → 1002".
                        if case .integer(let o) = old, let target = referencedTable(label) {
                            if let now = renumber[target]?[o] { was += " (now \(now))" }
                            else if renumberedTo[target]?.contains(o) == true { was += " (another object is \(o) now)" }
                        }
                        var now = render(new, label: label)
                        // A number a renumbered object left, which no object took: the reference names nothing.
                        if case .integer(let n) = new, let target = referencedTable(label), renumber[target]?[n] != nil,
                           renumberedTo[target]?.contains(n) != true { now += " (no object has that number now)" }
                        values.append(ValueChange(name: label.name, before: was, after: now, beforeValue: typed(old), afterValue: typed(new)))
                    }
                }
                // A column the second side dropped: its values are gone, a change of the data (it
                // was a schema change alone, so a migration dropping Tag.name passed a declaration
                // that did not name it).
                if let columnsB = b.layouts[table]?.columns {
                    for column in before.keys.sorted() where after[column] == nil && !columnsB.contains(column) {
                        guard let old = before[column], old != .null else { continue }
                        let label = labelsA.columns[table]?[column] ?? .plain(column)
                        if [.identity, .entity, .opt].contains(label) { continue }
                        meaningful = true
                        if label.name.caseInsensitiveCompare(column) != .orderedSame, entry.columns[label.name] == nil { entry.columns[label.name] = column }
                        values.append(ValueChange(name: label.name, before: render(old, label: label), after: "(column dropped)", beforeValue: typed(old), afterValue: nil))
                    }
                }
                guard meaningful else {
                    if entity == nil {
                        // A plain row paired by its key, only its rowid changed: renumbered, counted
                        // with the bookkeeping as a Core Data object's Z_PK is (it was left out
                        // uncounted: a diff of a renumbered row said "same", nothing left out).
                        if let alias = renumberedAlias, before[alias] != after[alias] { bookkeeping.renumbered += 1 }
                        return
                    }
                    let renumbered = matchedKey.map { $0 != .null } == true
                        && before.first(where: { $0.key.uppercased() == "Z_PK" })?.value != after.first(where: { $0.key.uppercased() == "Z_PK" })?.value
                    if renumbered { bookkeeping.renumbered += 1 } else if throughRenumbered { bookkeeping.references += 1 } else if before != after { bookkeeping.optBumps += 1 }
                    return
                }
                entry.changed += 1
                for value in values { entry.attributes[value.name, default: 0] += 1 }
            } else {
                kind = after != nil ? "added" : "removed"
                let row = after ?? before ?? [:]
                for column in (layout?.columns ?? row.keys.sorted()) {
                    guard let value = row[column], value != .null else { continue }
                    let label = labels?[column] ?? .plain(column)
                    if labels != nil, [.identity, .entity, .opt].contains(label) { continue }
                    let text = render(value, label: label)
                    values.append(ValueChange(name: label.name, before: after == nil ? text : nil, after: after != nil ? text : nil,
                                              beforeValue: after == nil ? typed(value) : nil, afterValue: after != nil ? typed(value) : nil))
                }
                if after != nil { entry.added += 1 } else { entry.removed += 1 }
            }
            if let limit = options.limit, entry.objects.count >= limit {
                entry.unlisted += 1
            } else {
                entry.objects.append(ObjectChange(change: kind, object: object, values: values))
            }
            keep = true
            noteReferences(table: table, before: before, after: after, labels: labels)
        }

        /// Keeps what a check of the result needs: removed objects' keys, and to-one references the
        /// second side added or changed.
        private mutating func noteReferences(table: String, before: [String: SQLitePages.Value]?, after: [String: SQLitePages.Value]?,
                                             labels: [String: Labels.Column]?) {
            guard let labels else { return }
            if let before, after == nil, case .integer(let pk)? = before.first(where: { $0.key.uppercased() == "Z_PK" })?.value {
                removedKeys[table, default: []].append(pk)
            }
            guard let after else { return }
            for (column, label) in labels {
                guard case .toOne(let name, let destination) = label, case .integer(let target)? = after[column],
                      before?[column] != after[column],
                      let destinationTable = b.coreData?.entity(named: destination)?.table else { continue }
                let owner = after.first { $0.key.uppercased() == "Z_ENT" }.flatMap { entry -> String? in
                    if case .integer(let ent) = entry.value { return labelsB.entityByEnt[Int(ent)] }
                    return nil
                } ?? table
                references.append(Reference(relationship: "\(owner).\(name)", destinationTable: destinationTable, key: target))
            }
        }

        private func objectName(entity: String?, rowid: Int64, values: [String: SQLitePages.Value], layout: DiffSchema.Layout?) -> String {
            if let entity {
                let pk = values.first { $0.key.uppercased() == "Z_PK" }?.value
                if case .integer(let n)? = pk { return "\(entity) \(n)" }
                return "\(entity) rowid \(rowid)"
            }
            if let layout, !layout.primaryKey.isEmpty {
                return layout.primaryKey.map { "\($0) \(render(values[$0] ?? .null, type: nil))" }.joined(separator: ", ")
            }
            return layout?.withoutRowid == true ? "row" : "rowid \(rowid)"
        }

        private func render(_ value: SQLitePages.Value, label: Labels.Column) -> String {
            switch label {
            case .attribute(_, let type): return render(value, type: type)
            case .toOne(_, let destination):
                if case .integer(let n) = value { return "\(destination) \(n)" }
                return render(value, type: nil)
            case .hiddenToMany(let owner, _):
                if case .integer(let n) = value { return "\(owner) \(n)" }
                return render(value, type: nil)
            default: return render(value, type: nil)
            }
        }

        /// Two long texts shown around their first difference: up to `width` characters each, from
        /// `lead` before it, with their lengths.
        static func window(_ x: String, _ y: String, width: Int = 60, lead: Int = 20) -> (String, String) {
            let a = Array(x), b = Array(y)
            var first = 0
            while first < a.count, first < b.count, a[first] == b[first] { first += 1 }
            let start = max(0, first - lead)
            func show(_ c: [Character]) -> String {
                let end = min(c.count, start + width)
                let body = start < end ? String(c[start..<end]) : ""
                return "\(start > 0 ? "…" : "")\(quoted(body))\(end < c.count ? "…" : "") (\(c.count) characters)"
            }
            return (show(a), show(b))
        }

        /// Text from a store, quoted for a terminal: a quote and a backslash escaped, and every
        /// control character (a newline, a carriage return that would overwrite the line, an
        /// escape sequence that would recolour or retitle the terminal, C1 controls) and the
        /// invisible marks that reorder text (bidirectional overrides) shown as escapes.
        static func quoted(_ text: some StringProtocol) -> String {
            var out = "\""
            for scalar in text.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                case "\u{0}"..."\u{1F}", "\u{7F}"..."\u{9F}", "\u{200E}", "\u{200F}", "\u{202A}"..."\u{202E}", "\u{2066}"..."\u{2069}":
                    out += "\\u{" + String(scalar.value, radix: 16) + "}"
                default: out.unicodeScalars.append(scalar)
                }
            }
            return out + "\""
        }

        /// A value for programs, in `--json` only (the text report has no use for it).
        func typed(_ value: SQLitePages.Value) -> TypedValue? {
            options.shortValues ? nil : TypedValue(value)
        }

        /// A value for people: dates (Core Data's seconds since 2001) as UTC times, text quoted and
        /// shortened, blobs by size and SHA-256.
        func render(_ value: SQLitePages.Value, type: Int?) -> String {
            switch value {
            case .null: return "NULL"
            case .integer(let n):
                if type == 900 { return Timestamp.iso(Date(timeIntervalSinceReferenceDate: Double(n))) }
                if type == 800 { return n == 0 ? "false" : "true" }
                return String(n)
            case .real(let d):
                if type == 900 { return Timestamp.iso(Date(timeIntervalSinceReferenceDate: d)) }
                return String(d)
            case .text(let t):
                let max = options.shortValues ? 60 : 4096
                if t.count > max { return "\(Self.quoted(t.prefix(max)))… (\(t.count) characters)" }
                return Self.quoted(t)
            case .blob(let bytes):
                let digest = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined().prefix(12)
                return "<\(bytes.count) bytes, sha256 \(digest)…>"
            }
        }
    }
}
