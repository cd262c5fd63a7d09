import Foundation
import GRDB

/// What a migration run would do: decided from values, without I/O.
public struct MigrationPlan: Sendable, Codable {
    public struct Pending: Sendable, Codable {
        public var version: Int
        public var name: String
        public var checksum: String
        public var statements: Int
        public var checks: Int
        public var noTransaction: Bool
        public var warnings: [String]
        public var refused: [String]
        public var source: String
    }

    public var current: Int
    public var target: Int
    public var applied: [MigrationHistory.Entry]
    public var pending: [Pending]
    /// Applied migrations whose file changed since ("0002_split_names: applied with …").
    public var drifted: [String]
    /// Applied migrations that are not in the folder.
    public var missing: [String]
    /// The versions of applied migrations whose file is not in the folder (listed in `missing`).
    public var missingFiles: [Int] = []

    /// Problems that stop a run before anything happens.
    public var blockers: [String] {
        drifted.map { "drifted: \($0)" } + missing.map { "missing: \($0)" }
            + pending.flatMap { migration in migration.refused.map { "\(Self.label(migration.version, migration.name)): \($0)" } }
    }

    /// How a migration is named in messages: as its file is (`0001_add_priority`).
    static func label(_ version: Int, _ name: String) -> String { String(format: "%04d", version) + "_" + name }

    public static func make(_ migrations: [Migration], history: [MigrationHistory.Entry], to: Int? = nil) -> MigrationPlan {
        let current = history.map(\.version).max() ?? 0
        let byVersion = Dictionary(migrations.map { ($0.version, $0) }, uniquingKeysWith: { first, _ in first })
        var drifted: [String] = []
        var missing: [String] = []
        var missingFiles: [Int] = []
        for entry in history {
            guard let migration = byVersion[entry.version] else {
                missing.append("\(label(entry.version, entry.name)) (applied \(Timestamp.iso(entry.appliedAt))) has no file in the folder: "
                               + "put it back as it was applied (the store's history keeps its sha256 \(entry.sha256.prefix(12))…)")
                missingFiles.append(entry.version)
                continue
            }
            if migration.name != entry.name, migration.checksum != entry.sha256 {
                // Another file with an applied version's number (`1_x.sql` after `0001_add.sql`).
                drifted.append("version \(entry.version) was applied as \(label(entry.version, entry.name)) (\(Timestamp.iso(entry.appliedAt))), "
                               + "but \(migration.source), another migration, now has that number. Put the file of \(label(entry.version, entry.name)) back, "
                               + "and number a new migration above the store's version \(current)")
            } else if migration.checksum != entry.sha256 {
                drifted.append("\(label(entry.version, entry.name)) was applied \(Timestamp.iso(entry.appliedAt)) with sha256 \(entry.sha256.prefix(12))…; "
                               + "\(migration.source) now has \(migration.checksum.prefix(12))…. An applied migration must not be edited: add a new one")
            }
        }
        let appliedVersions = Set(history.map(\.version))
        let target = to ?? migrations.map(\.version).max() ?? current
        let pending = migrations.filter { !appliedVersions.contains($0.version) && $0.version <= target }.sorted { $0.version < $1.version }
        for migration in pending where migration.version < current {
            missing.append("\(label(migration.version, migration.name)) is older than the store's version \(current) but was never applied")
        }
        var plan = MigrationPlan(current: current, target: max(target, current), applied: history,
                             pending: pending.map { migration in
                                 Pending(version: migration.version, name: migration.name, checksum: migration.checksum,
                                         statements: migration.statements.count, checks: migration.checks.count,
                                         noTransaction: migration.noTransaction, warnings: [], refused: migration.refusedStatements,
                                         source: migration.source)
                             }, drifted: drifted, missing: missing)
        plan.missingFiles = missingFiles
        return plan
    }

    /// Adds lint warnings that need the store's schema (DROP TABLE / DROP COLUMN, rebuilds of
    /// tables that others reference with ON DELETE CASCADE): a pure function of the schema.
    mutating func lint(_ migrations: [Migration], schema: StoreSchema) {
        var cascading: [String: [String]] = [:]   // parent table -> children referencing it ON DELETE CASCADE
        for key in schema.foreignKeys where key.onDelete == "CASCADE" { cascading[key.parent.uppercased(), default: []].append(key.table) }
        for index in pending.indices {
            guard let migration = migrations.first(where: { $0.version == pending[index].version }) else { continue }
            var warnings: [String] = []
            var dropped = Set<String>()
            for statement in migration.statements {
                let words = SQLScript.leadingWords(statement, count: 6)
                let spelled = SQLScript.leadingWords(statement, count: 6, uppercased: false)
                if words.starts(with: ["DROP", "TABLE"]) {
                    let position = words.dropFirst(2).first == "IF" ? 4 : 2
                    let table = (spelled.count > position ? spelled[position] : "?").trimmingCharacters(in: CharacterSet(charactersIn: "\"`[]"))
                    dropped.insert(table.uppercased())
                    warnings.append("DROP TABLE \(table): its rows are gone after this migration (the pre-migrate snapshot keeps them)")
                    if let children = cascading[table.uppercased()] {
                        warnings.append("\(children.joined(separator: ", ")) reference\(children.count == 1 ? "s" : "") \(table) with ON DELETE CASCADE: "
                                        + "with foreign keys on, dropping or rebuilding \(table) deletes their rows (storectl runs migrations with foreign keys off)")
                    }
                }
                if words.starts(with: ["ALTER", "TABLE"]), words.contains("DROP") {
                    warnings.append("DROP COLUMN in \(spelled.dropFirst(2).first ?? "?"): the column's data is gone after this migration")
                }
                if words.starts(with: ["ALTER", "TABLE"]), words.contains("RENAME"),
                   let range = statement.range(of: "RENAME TO", options: .caseInsensitive) {
                    let renamed = statement[range.upperBound...].trimmingCharacters(in: CharacterSet(charactersIn: " ;\"`[]\n"))
                    if dropped.contains(renamed.uppercased()) {
                        warnings.append("rebuilds table \(renamed) (create, copy, drop, rename): follow https://sqlite.org/lang_altertable.html#otheralter")
                    }
                }
            }
            pending[index].warnings = warnings
        }
    }

    /// Refuses statements that would fire triggers calling functions only the app registers
    /// (`TriggerLint`): outside the app they would fail mid-migration.
    mutating func refuseTriggerCalls(_ migrations: [Migration], store: String) throws {
        for index in pending.indices {
            guard let migration = migrations.first(where: { $0.version == pending[index].version }) else { continue }
            let writes = migration.statements.map { TriggerLint.Write(table: nil, sql: $0) }
            for problem in try TriggerLint.check(store: store, writes: writes) {
                pending[index].refused.append("\(problem); \(TriggerLint.hint)")
            }
        }
    }
}

