import Foundation
import GRDB
import GRDBSQLite

/// One migration: a versioned SQL file (`0001_add_priority.sql`, with an optional
/// `0001_add_priority.verify.sql`), or a Swift stage with `willMigrate`/`didMigrate` closures for
/// data changes SQL alone cannot express (like SwiftData's custom `MigrationStage`).
///
/// Directives in SQL comments of a file:
/// - `-- storectl: no-transaction`: statements that cannot run in a transaction (VACUUM, a
///   journal_mode change) are allowed, and the file runs without one.
/// - `-- storectl: allow-count-drop Item, Task`: these Core Data entities may lose rows.
public struct Migration: Sendable {
    public var version: Int
    public var name: String
    /// The SQL, split into statements.
    public var statements: [String]
    /// Queries that must each return one row whose first column is true (1).
    public var checks: [String]
    public var willMigrate: (@Sendable (Database) throws -> Void)?
    public var didMigrate: (@Sendable (Database) throws -> Void)?
    public var noTransaction: Bool
    public var allowCountDrop: Set<String>
    /// What the migration declares it changes in the data (`-- storectl: changes Entity.attribute,
    /// Entity`): verified against the diff of the run; nil when it declares nothing.
    public var declaredChanges: Set<String>?
    /// SHA-256 of the file (and of its .verify.sql), or of a Swift stage's declared revision.
    public var checksum: String
    /// Where it came from, for messages.
    public var source: String

    /// A Swift stage. `revision` identifies its code: change it when you change the closures, or
    /// the history will not notice (closures cannot be hashed).
    ///
    /// ```swift
    /// let split = Migration(version: 3, name: "split_names", revision: "1",
    ///                       sql: "ALTER TABLE person ADD COLUMN first TEXT; ALTER TABLE person ADD COLUMN last TEXT",
    ///                       didMigrate: { db in /* fill first/last from name with Swift code */ })
    /// ```
    public init(version: Int, name: String, revision: String, sql: String = "", checks: [String] = [],
                allowCountDrop: Set<String> = [], declaredChanges: Set<String>? = nil, willMigrate: (@Sendable (Database) throws -> Void)? = nil,
                didMigrate: (@Sendable (Database) throws -> Void)? = nil) {
        self.version = version
        self.name = name
        statements = SQLScript.statements(sql)
        self.checks = checks
        self.willMigrate = willMigrate
        self.didMigrate = didMigrate
        noTransaction = false
        self.allowCountDrop = allowCountDrop
        self.declaredChanges = declaredChanges
        checksum = Hashing.sha256(Data("swift-stage:\(version):\(name):\(revision):\(sql):\(checks.joined(separator: ";"))".utf8))
        source = "Swift stage \(version)_\(name)"
    }

    init(version: Int, name: String, statements: [String], checks: [String], noTransaction: Bool,
         allowCountDrop: Set<String>, declaredChanges: Set<String>? = nil, checksum: String, source: String) {
        self.version = version
        self.name = name
        self.statements = statements
        self.checks = checks
        self.noTransaction = noTransaction
        self.allowCountDrop = allowCountDrop
        self.declaredChanges = declaredChanges
        self.checksum = checksum
        self.source = source
    }

    /// Reads `NNNN_name.sql` files (and their `.verify.sql`) from a folder, in version order.
    ///
    /// - Throws: 66 when the folder is missing, 65 for a file name without a version, two files
    ///   with one version, or a verify file without its migration.
    public static func load(folder: String) throws -> [Migration] {
        let absolute = FileSystem.absolute(folder)
        switch FileSystem.kind(of: absolute) {
        case .directory: break
        case .missing:
            throw StoreOpsError(.noInput, "the migrations folder \(absolute) does not exist", hint: "check --migrations")
        case .file:
            throw StoreOpsError(.noInput, "--migrations \(absolute) is a file, not a folder",
                                hint: "pass the folder that holds the NNNN_name.sql files (\(FileSystem.parent(of: absolute))?)")
        case .other:
            throw StoreOpsError(.noInput, "--migrations \(absolute) is not a folder", hint: "pass the folder that holds the NNNN_name.sql files")
        }
        let all = try FileManager.default.contentsOfDirectory(atPath: absolute)
        // `0002_y.SQL` was skipped without a word: a migration that never runs, and a plan that
        // looked complete. Any other spelling of the extension is refused.
        if let odd = all.sorted().first(where: { $0.lowercased().hasSuffix(".sql") && !$0.hasSuffix(".sql") }) {
            let fixed = String(odd.dropLast(4)) + ".sql"
            throw StoreOpsError(.badData, "\(absolute)/\(odd): a migration's file name ends in .sql (lower case); this one would not run",
                                hint: "rename it: mv '\(absolute)/\(odd)' '\(absolute)/\(fixed)'")
        }
        let names = all.filter { $0.hasSuffix(".sql") }.sorted()
        var migrations: [Migration] = []
        var seen: [Int: String] = [:]
        for name in names where !name.hasSuffix(".verify.sql") {
            let stem = String(name.dropLast(4))
            let digits = stem.prefix { $0.isNumber }
            guard !digits.isEmpty, let version = Int(digits), stem.dropFirst(digits.count).first == "_" else {
                throw StoreOpsError(.badData, "\(absolute)/\(name): a migration's name must be NNNN_name.sql (e.g. 0001_add_priority.sql)")
            }
            if let other = seen[version] {
                throw StoreOpsError(.badData, "\(absolute): \(other) and \(name) both have version \(version)")
            }
            seen[version] = name
            let path = (absolute as NSString).appendingPathComponent(name)
            guard let data = FileManager.default.contents(atPath: path) else {
                throw StoreOpsError(.noInput, "\(path) cannot be read", hint: "check its permissions")
            }
            if let offset = Validate.firstInvalidUTF8(data) {
                throw StoreOpsError(.badData, "\(path) is not UTF-8 text: byte \(offset) (0x\(String(format: "%02x", data[data.startIndex + offset]))) is invalid",
                                    hint: "save the migration as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)")
            }
            let text = String(decoding: data, as: UTF8.self)
            let verifyPath = (absolute as NSString).appendingPathComponent("\(stem).verify.sql")
            let verifyData = FileManager.default.contents(atPath: verifyPath)
            if let verifyData, let offset = Validate.firstInvalidUTF8(verifyData) {
                throw StoreOpsError(.badData, "\(verifyPath) is not UTF-8 text: byte \(offset) is invalid", hint: "save it as UTF-8")
            }
            let verifyText = verifyData.map { String(decoding: $0, as: UTF8.self) } ?? ""
            let directives = SQLScript.directives(text)
            migrations.append(Migration(
                version: version, name: String(stem.dropFirst(digits.count + 1)), statements: SQLScript.statements(text),
                checks: SQLScript.statements(verifyText), noTransaction: directives.noTransaction,
                allowCountDrop: directives.allowCountDrop, declaredChanges: directives.changes,
                checksum: Hashing.sha256(data + (verifyData ?? Data())), source: path))
        }
        for name in names where name.hasSuffix(".verify.sql") {
            let stem = String(name.dropLast(11))
            if !names.contains("\(stem).sql") {
                throw StoreOpsError(.badData, "\(absolute)/\(name) has no migration \(stem).sql")
            }
        }
        return migrations
    }

    /// Statements this migration cannot run inside a transaction, with why.
    public var refusedStatements: [String] {
        guard !noTransaction else { return [] }
        return statements.compactMap { statement in
            let words = SQLScript.leadingWords(statement, count: 2)
            switch words.first {
            case "VACUUM": return "VACUUM cannot run inside a transaction"
            case "BEGIN", "COMMIT", "END", "ROLLBACK":
                return "\(words[0]): storectl runs each migration in its own transaction; remove it"
            case "ATTACH", "DETACH": return "\(words[0]) cannot run inside a transaction"
            case "PRAGMA":
                let pragma = words.count > 1 ? words[1] : ""
                if pragma.hasPrefix("JOURNAL_MODE") { return "PRAGMA journal_mode cannot change inside a transaction" }
                if pragma.hasPrefix("FOREIGN_KEYS") { return "PRAGMA foreign_keys has no effect inside a transaction (storectl turns them off for every migration)" }
                return nil
            default: return nil
            }
        }
    }
}

