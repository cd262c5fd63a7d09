import Foundation
import GRDB
import StoreLab
import StoreOps

/// The real Core Data stores from Apple's apps (see Tests/Fixtures/coredata/README.md).
enum Fixture: String, CaseIterable {
    case notes = "notes-macos15/NoteStore-macOS-15-Seqoia.sqlite"
    case photos = "photos-10.15.7/Photos.sqlite"

    static var root: String {
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return repo.appendingPathComponent("Tests/Fixtures/coredata").path
    }

    /// Copies the store with its -wal/-shm into `folder` (opening a fixture in place would
    /// checkpoint its WAL and change it) and returns the copy's path.
    func copy(into folder: TempFolder) throws -> String {
        let source = (Fixture.root as NSString).appendingPathComponent(rawValue)
        let target = folder.file(FileSystem.name(of: source))
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: source + suffix) {
            try FileManager.default.copyItem(atPath: source + suffix, toPath: target + suffix)
            chmod(target + suffix, 0o644)
        }
        return target
    }
}

/// Makes a sample store in `folder`.
func sampleStore(in folder: TempFolder, name: String = "Tasks.sqlite", items: Int = 2_000,
                 journalMode: String = "wal", externalFiles: Int = 0) throws -> String {
    var options = SampleStore.Options()
    options.items = items
    options.journalMode = journalMode
    options.externalFiles = externalFiles
    return try SampleStore.create(at: folder.file(name), options: options).path
}

/// Reads through a fresh read-only connection.
func readStore<T>(_ path: String, _ body: (Database) throws -> T) throws -> T {
    var config = Configuration()
    config.readonly = true
    config.busyMode = .timeout(10)
    let queue = try DatabaseQueue(path: path, configuration: config)
    defer { try? queue.close() }
    return try queue.inDatabase(body)
}

func rowCount(_ path: String, _ table: String = "ZITEM") throws -> Int {
    try readStore(path) { try Int.fetchOne($0, sql: "SELECT count(*) FROM \(quoteIdentifier(table))") ?? -1 }
}

/// SHA-256 of a logical dump (every table's rows in rowid order), independent of page layout.
func logicalDigest(_ path: String) throws -> String {
    try readStore(path) { db in
        var text = ""
        let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        for table in tables {
            text += "## \(table)\n"
            text += try StoreState.rows(db, table: table)
        }
        return Hashing.sha256(Data(text.utf8))
    }
}

/// Files of a folder that look like leftovers of a failed run (storectl temp names, sidecars).
func leftovers(_ folder: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).filter { $0.contains(".tmp-storectl-") }
}

func permissions(_ path: String) -> Int {
    ((try? FileManager.default.attributesOfItem(atPath: path)[.posixPermissions]) as? Int) ?? -1
}

