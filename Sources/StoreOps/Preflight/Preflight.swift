import Foundation
import GRDB

/// `storectl preflight`: whether it is safe to go on with an operation on a store, and why not.
///
/// Read-only: the store is opened with `SQLITE_OPEN_READONLY`, other processes' locks are only
/// inspected (`F_GETLK`). (Like any SQLite reader, opening a WAL store whose `-wal`/`-shm` do not
/// exist creates them empty; they are never removed, since another process may be using them.)
public enum Preflight {
    /// The operation a preflight is for; it decides the space figures and which locks matter.
    public enum Operation: String, Sendable, Codable, CaseIterable {
        case backup, snapshot, migrate, purge
    }

    public struct Options: Sendable {
        public var operation: Operation = .backup
        /// Where the operation writes (backup folder, snapshot repository); default: the store's folder.
        public var destination: String?
        /// Adds `integrity_check` and `foreign_key_check` to `quick_check`.
        public var full = false
        /// Seconds to wait for another process's lock before reporting the store as busy.
        public var timeout: TimeInterval = 10
        /// The caller's safety snapshot runs `quick_check` and the entity counts on the store next,
        /// inside the read transaction its pages come from (and refuses a store that fails): the
        /// preflight leaves both out rather than reading the whole file twice (migrate's, where the
        /// store is locked and nobody writes in between).
        public var sourceCheckedBySnapshot = false
        /// For a migration: it runs with `--force`, so another process having the store open is a
        /// warning, not the refusal (75) it is otherwise.
        public var force = false

        public init(operation: Operation = .backup, destination: String? = nil, full: Bool = false, timeout: TimeInterval = 10,
                    sourceCheckedBySnapshot: Bool = false, force: Bool = false) {
            self.force = force
            self.operation = operation
            self.destination = destination
            self.full = full
            self.timeout = timeout
            self.sourceCheckedBySnapshot = sourceCheckedBySnapshot
        }
    }

    /// Runs every check that applies and returns the report (it does not throw for failed checks).
    ///
    /// - Throws: exit 66/65 when the store is missing or not a SQLite database, 75 when it stays
    ///   locked past the timeout, 73 when the destination does not exist.
    public static func run(store path: String, options: Options = Options(), progress: ProgressHandler? = nil) throws -> PreflightReport {
        let startedAt = Timestamp.now()
        try Validate.timeout(options.timeout)
        let store = try StoreFile(existing: path)
        let destination = FileSystem.absolute(options.destination ?? store.folder)
        guard FileSystem.kind(of: destination) == .directory else {
            throw StoreOpsError(.cannotCreate, "the destination \(destination) is not an existing folder",
                                hint: "create it, or pass another --dest")
        }
        var checks: [Check] = []

        // Locks first, before this process opens a connection of its own.
        let walHeader = StoreFile.isWALHeader(try FileProbe.shared.header(of: store.path))
        let locks = try LockState.read(store, walMode: walHeader)
        checks.append(writerCheck(locks, operation: options.operation, force: options.force))
        checks.append(jobLockCheck(store, operation: options.operation))
        if options.operation == .migrate || options.operation == .purge, let engaged = KillSwitch(store: store).engaged {
            // The two that honour it stop at their first stage while it is engaged.
            let record = (try? String(contentsOfFile: engaged, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
            checks.append(Check("killswitch", .fail, "the kill switch \(engaged) is engaged\(record.map { $0.isEmpty ? "" : " (\($0))" } ?? ""): "
                                + "\(options.operation.rawValue) would stop before changing anything",
                                advice: "storectl killswitch release \(store.path) lets runs go on"))
        }
        if StoreSwap.pending(target: store.path) {
            checks.append(Check("store.swap", .fail, "an interrupted restore left \(StoreSwap.journalPath(for: store.path)): the store's files are between two states",
                                advice: "storectl recover \(store.path) finishes it (restore, migrate, rollback, purge, backup and snapshot do so first)"))
        }
        if let journal = MigrationJournal.read(store), journal.pid != getpid() {
            checks.append(Check("migration.interrupted", .fail, "an interrupted migration left \(MigrationJournal.path(for: store))",
                                advice: journal.advice))
        }

        var entities: [CoreDataCensus.EntityCount]?
        func report() -> PreflightReport {
            PreflightReport(store: store.path, operation: options.operation, destination: destination, checks: checks,
                            entities: entities, startedAt: startedAt, durationSeconds: Date().timeIntervalSince(startedAt))
        }
        let queue: DatabaseQueue
        do {
            queue = try StoreConnection.open(store.path, access: .readOnly, busyTimeout: options.timeout, label: "storectl.preflight")
        } catch {
            // A SQLite file SQLite cannot open (its schema unreadable, the file cut short): what
            // preflight is there to say, as a failed check, not an error that sends the operator back here.
            guard let damaged = unreadable(store, error) ?? hotJournal(store, error) ?? locked(store, error, locks: locks, timeout: options.timeout) else { throw error }
            checks.append(damaged)
            return report()
        }
        defer { try? queue.close() }
        try queue.inDatabase { db in
            let info: StoreInfo
            do { info = try StoreInfo.read(db, store: store) } catch {
                if let hot = hotJournal(store, error) ?? locked(store, error, locks: locks, timeout: options.timeout) {
                    checks.append(hot)
                    return
                }
                guard let damaged = unreadable(store, error) else { throw StoreOpsError.sqlite(error, doing: "reading \(store.path)") }
                checks.append(damaged)
                checks.append(contentsOf: integrityChecks(db, full: options.full, progress: progress))
                return
            }
            checks.append(contentsOf: stateChecks(info, store: store, locks: locks))
            checks.append(contentsOf: try spaceChecks(info, store: store, operation: options.operation, destination: destination))
            let bySnapshot = options.sourceCheckedBySnapshot && !options.full
            if !bySnapshot { checks.append(contentsOf: integrityChecks(db, full: options.full, progress: progress)) }
            progress?(.stage("Core Data checks"))
            let coreData = coreDataChecks(db, counting: !bySnapshot)
            checks.append(contentsOf: coreData.checks)
            entities = coreData.entities
        }
        return report()
    }

    /// The failed check for a store that stayed locked past the timeout (a rollback-journal
    /// writer's commit, an app in `locking_mode=EXCLUSIVE`, a `BEGIN EXCLUSIVE`): nothing could be
    /// read, so the report says that and who holds it rather than ending with an error alone.
    static func locked(_ store: StoreFile, _ error: Error, locks: LockState, timeout: Double) -> Check? {
        let busy = switch error {
        case let error as DatabaseError: [.SQLITE_BUSY, .SQLITE_LOCKED].contains(error.resultCode)
        case let error as StoreOpsError: error.kind == .busy
        default: false
        }
        guard busy else { return nil }
        let holder = (locks.writerPID ?? locks.openByPID).map { " (pid \($0) has it open)" } ?? ""
        return Check("store.locked", .fail, "the store stayed locked for \(Format.duration(timeout))\(holder): another process holds it exclusively "
                     + "(a rollback-journal commit, locking_mode=EXCLUSIVE or BEGIN EXCLUSIVE), so nothing could be read: "
                     + "the integrity, space and Core Data checks did not run",
                     advice: "run it again when that transaction ends, or wait longer with --timeout; a backup or snapshot now would wait as long and exit 75",
                     figures: ["timeoutSeconds": .number(timeout)])
    }

    /// The failed check for a rollback-mode store with a hot journal (a writer stopped
    /// mid-transaction): nothing can be read read-only until a read-write open rolls it back.
    static func hotJournal(_ store: StoreFile, _ error: Error) -> Check? {
        let hot = switch error {
        case let error as DatabaseError: error.extendedResultCode.rawValue == StoreOpsError.hotJournalCode
        case let error as StoreOpsError: error.message.contains(StoreOpsError.hotJournalText)
        default: false
        }
        guard hot else { return nil }
        let bytes = FileSystem.size(of: store.journalPath) ?? 0
        return Check("store.journal", .fail, "hot rollback journal of \(Format.bytes(bytes)) present: a writer stopped mid-transaction, and nothing can be read read-only until it is rolled back",
                     advice: "the app's next open rolls it back (or, as the store's owner, `sqlite3 \(store.path) 'PRAGMA quick_check'`); then run this again. Copy the store only with its -journal",
                     figures: ["journalBytes": .int(Int(bytes))])
    }

    /// The failed check for a store SQLite reports damaged (SQLITE_CORRUPT) when opening or reading
    /// it; nil for any other error (a lock stays 75). Its header is SQLite's: `StoreFile(existing:)`
    /// refused anything else (65). Says when the file is shorter than its header claims.
    static func unreadable(_ store: StoreFile, _ error: Error) -> Check? {
        let corrupt: Bool
        switch error {
        case let error as DatabaseError: corrupt = error.resultCode == .SQLITE_CORRUPT
        case let error as StoreOpsError:
            // StoreConnection.open maps SQLITE_CORRUPT to this wording (a schema a newer SQLite wrote is "malformed database schema": not damage).
            corrupt = error.kind == .badData && error.message.contains("(database disk image is malformed)")
        default: corrupt = false
        }
        guard corrupt else { return nil }
        let message = (error as? StoreOpsError)?.message ?? StoreOpsError.sqlite(error, doing: "opening \(store.path)").message
        var details = [message]
        var summary = "SQLite cannot read the store: it is damaged"
        if let short = StoreFile.shortfall(of: store.path) {
            summary = "SQLite cannot read the store: the file is cut short (\(Format.bytes(short.size)); its header counts "
                + "\(Format.plural(Int(short.pages), "page", "pages")) of \(Format.bytes(short.pageSize)), \(Format.bytes(short.pages * UInt64(short.pageSize))))"
            details.append("a copy that stopped early, or a disk that filled while it was written")
        }
        return Check("store.readable", .fail, summary, details: details,
                     advice: "do not migrate or purge it; restore it from a backup, a snapshot or a point (`storectl snapshot restore --repo REPO --at TIME --in-place \(store.path)`)")
    }

    // MARK: - Locks

    static func writerCheck(_ locks: LockState, operation: Operation, force: Bool = false) -> Check {
        writerCheckText(locks, operation: operation, force: force).with(["writerPid": .int(locks.writerPID), "openByPid": .int(locks.openByPID)])
    }

    static func writerCheckText(_ locks: LockState, operation: Operation, force: Bool = false) -> Check {
        if operation == .migrate, let pid = locks.writerPID ?? locks.openByPID {
            // A check that passes where the run it checks for would refuse is worse than none.
            return force
                ? Check("lock.writer", .warn, "pid \(pid) has the store open (--force: migrating anyway)",
                        advice: "a rollback discards what it writes after the safety snapshot, and it runs against a schema it does not know")
                : Check("lock.writer", .fail, "pid \(pid) has the store open",
                        advice: "stop the app first: migrate refuses (75) while another process has the store open, since a rollback would discard its writes (--force migrates anyway)")
        }
        if let pid = locks.writerPID {
            return Check("lock.writer", .warn, "pid \(pid) holds a write transaction right now",
                         advice: "a backup in WAL mode is unaffected; in rollback mode it waits for the commit")
        }
        let open = locks.openByPID.map { ", open by pid \($0)" } ?? ""
        return Check("lock.writer", .ok, "no write transaction in progress\(open)")
    }

    static func jobLockCheck(_ store: StoreFile, operation: Operation) -> Check {
        let holder = JobLock.currentHolder(path: store.jobLockPath)
        return jobLockCheckText(holder, operation: operation)
            .with(["holderPid": .int(holder?.pid), "job": .text(holder?.job), "since": .text(holder.map { Timestamp.iso($0.since) })])
    }

    static func jobLockCheckText(_ holder: JobLock.Holder?, operation: Operation) -> Check {
        guard let holder else {
            return Check("lock.job", .ok, "no storectl job holds the store")
        }
        if holder.pid == getpid() {
            return Check("lock.job", .ok, "held by this run (storectl \(holder.job))")
        }
        let exclusive = operation == .migrate || operation == .purge
        return Check("lock.job", exclusive ? .fail : .warn,
                     "storectl \(holder.job) (pid \(holder.pid)) holds the job lock since \(Timestamp.iso(holder.since))",
                     advice: exclusive ? "wait for it to finish: \(operation.rawValue) would exit 75" : "a copy runs alongside it")
    }

    // MARK: - State

    static func stateChecks(_ info: StoreInfo, store: StoreFile, locks: LockState) -> [Check] {
        var checks: [Check] = []
        checks.append(Check("store.size", .ok,
            "\(Format.bytes(info.logicalBytes)) (\(Format.count(info.pageCount)) pages x \(Format.count(info.pageSize)) B), file \(Format.bytes(info.fileBytes)), SQLite \(info.sqliteVersion)").with(["pageSize": .int(info.pageSize), "pageCount": .int(info.pageCount),
                   "logicalBytes": .int(info.logicalBytes), "fileBytes": .int(info.fileBytes), "sqliteVersion": .text(info.sqliteVersion)]))
        checks.append(Check("store.user_version", .ok, "\(info.userVersion)", figures: ["userVersion": .int(info.userVersion)]))
        // SQLite finds a database's -wal and -journal by its name: two names for one file (hard
        // links) mean two processes can use different journals for it, and one's crash leaves
        // the other reading a half-written file (https://sqlite.org/howtocorrupt.html, 2.5).
        // Said only when there is more than one.
        var file = stat()
        if stat(store.path, &file) == 0, file.st_nlink > 1 {
            checks.append(Check("store.links", .warn, "the store file has \(file.st_nlink) hard links (names)",
                                advice: "SQLite finds the -wal and -journal by name: every process must open the store by the same name, and a follower (replicate) by another name does not see the app's -wal; remove the other names",
                                figures: ["links": .int(Int(file.st_nlink))]))
        }

        let freeBytes = UInt64(info.freelistCount) * UInt64(info.pageSize)
        let freelist = "\(Format.count(info.freelistCount)) free pages (\(Format.percent(info.freelistRatio)), \(Format.bytes(freeBytes)))"
        let freeFigures: [String: JSONValue] = ["freePages": .int(info.freelistCount), "freeBytes": .int(freeBytes), "ratio": .number(info.freelistRatio)]
        if info.freelistRatio > 0.25, freeBytes > 16 << 20 {
            checks.append(Check("store.freelist", .warn, freelist,
                                advice: "copies carry the free pages too; VACUUM in a maintenance window would reclaim them", figures: freeFigures))
        } else {
            checks.append(Check("store.freelist", .ok, freelist, figures: freeFigures))
        }

        let journalFigures: [String: JSONValue] = ["journalMode": .text(info.journalMode), "walBytes": .int(info.walBytes),
                                                   "journalBytes": .int(FileSystem.size(of: store.journalPath) ?? 0)]
        defer { checks[checks.count - 1].figures = journalFigures }
        if info.isWAL {
            let large: UInt64 = 64 << 20
            checks.append(info.walBytes > large
                ? Check("store.journal", .warn, "wal, -wal is \(Format.bytes(info.walBytes))",
                        advice: "a long-running reader is holding checkpoints back; the WAL is copied too and slows reads")
                : Check("store.journal", .ok, "wal, -wal is \(Format.bytes(info.walBytes))"))
        } else {
            let journalBytes = FileSystem.size(of: store.journalPath) ?? 0
            if journalBytes > 0, locks.writerPID == nil, info.journalMode != "persist" {
                checks.append(Check("store.journal", .warn, "\(info.journalMode), hot journal of \(Format.bytes(journalBytes)) present",
                                    advice: "a writer crashed mid-transaction; the next read-write open rolls it back"))
            } else {
                checks.append(Check("store.journal", .ok, "\(info.journalMode) (readers and the committing writer take turns; copies step in short chunks)"))
            }
        }
        return checks
    }

    // MARK: - Space

    static func spaceChecks(_ info: StoreInfo, store: StoreFile, operation: Operation, destination: String) throws -> [Check] {
        let externalBytes = ExternalDataFolder.size(of: store.externalDataPath)
        let need = SpaceRequirement.need(operation, info: info, extraBytes: externalBytes)
        var checks: [Check] = []
        func check(_ id: String, _ folder: String, _ needed: UInt64) throws {
            let space = try FileSystem.space(at: folder)
            let summary = "\(Format.bytes(space.availableBytes)) free, \(Format.bytes(needed)) needed (\(folder)); \(Format.count(space.availableInodes)) inodes"
            let figures: [String: JSONValue] = ["folder": .text(folder), "availableBytes": .int(space.availableBytes),
                                                "neededBytes": .int(needed), "availableInodes": .int(space.availableInodes)]
            if space.availableBytes < needed || space.availableInodes < 16 {
                checks.append(Check(id, .fail, summary, advice: "free space there, or choose a destination on another volume", figures: figures))
            } else {
                checks.append(Check(id, .ok, summary, figures: figures))
            }
        }
        if need.destination > 0 { try check("space.destination", destination, need.destination) }
        if need.storeVolume > 0 { try check("space.store", store.folder, need.storeVolume) }
        try check("space.temp", SpaceRequirement.sqliteTempFolder, need.temp)
        return checks
    }

    // MARK: - Integrity

    static func integrityChecks(_ db: Database, full: Bool, progress: ProgressHandler? = nil) -> [Check] {
        var checks: [Check] = []
        func run(_ id: String, _ pragma: String) {
            progress?(.stage(pragma))
            do {
                let messages = try StoreConnection.integrityMessages(db, pragma: pragma)
                let figures: [String: JSONValue] = ["problems": .int(messages == ["ok"] ? 0 : messages.count),
                                                    "messages": .array(messages.map { .string($0) })]
                checks.append(messages == ["ok"]
                    ? Check(id, .ok, "ok", figures: figures)
                    : Check(id, .fail, "\(Format.plural(messages.count, "problem", "problems"))\(messages.count >= 20 ? " (the first 20)" : "")", details: messages,
                            advice: "the store is damaged: do not migrate or purge it; restore from a backup", figures: figures))
            } catch let error as DatabaseError where error.resultCode == .SQLITE_CORRUPT {
                // SQLite gave up part way (a page it cannot walk). Busy, I/O, a signal: "could not run", below.
                checks.append(tableByTable(db, id: id, pragma: pragma, stopped: error.message ?? StoreOpsError.sqlite(error, doing: pragma).message))
            } catch {
                checks.append(Check(id, .fail, "could not run: \(StoreOpsError.sqlite(error, doing: pragma).message)",
                                    advice: "the store is damaged or unreadable"))
            }
        }
        run("integrity.quick_check", "quick_check")
        guard full else { return checks }
        run("integrity.integrity_check", "integrity_check")
        progress?(.stage("foreign_key_check"))
        do {
            let violations = try StoreConnection.foreignKeyViolations(db)
            let figures: [String: JSONValue] = ["violations": .int(violations.count), "samples": .array(violations.samples.map { .string($0) })]
            checks.append(violations.count == 0
                ? Check("integrity.foreign_key_check", .ok, "no violations", figures: figures)
                : Check("integrity.foreign_key_check", .fail, Format.plural(violations.count, "violation", "violations"), details: violations.samples,
                        advice: "rows reference parents that do not exist; fix them before a migration", figures: figures))
        } catch {
            checks.append(Check("integrity.foreign_key_check", .fail, "could not run: \(error)"))
        }
        return checks
    }

    /// `id`'s check run table by table after SQLite stopped on damage over the whole file: which
    /// tables are damaged and which read whole (names from `sqlite_master`, quoted). A busy store,
    /// an I/O error or a signal on a table is not that table's damage: the walk stops there, saying so.
    static func tableByTable(_ db: Database, id: String, pragma: String, stopped: String) -> Check {
        let tables = (try? String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")) ?? []
        guard !tables.isEmpty else { return Check(id, .fail, "could not run: \(stopped)", advice: "the store is damaged or unreadable") }
        var details: [String] = [], damaged: [String] = [], whole = 0
        for table in tables {
            do {
                let messages = try StoreConnection.integrityMessages(db, pragma: pragma, table: table)
                guard messages != ["ok"] else { whole += 1; continue }
                damaged.append(table)
                details += messages.prefix(5).map { "\(table): \($0)" }
            } catch let error as DatabaseError where error.resultCode == .SQLITE_CORRUPT {
                damaged.append(table)
                details.append("\(table): \(error.message ?? StoreOpsError.sqlite(error, doing: "\(pragma)(\(table))").message)")
            } catch {
                details.append("\(table) and the tables after it not checked: \(StoreOpsError.sqlite(error, doing: "\(pragma)(\(table))").message)")
                break
            }
        }
        let found = damaged.isEmpty ? "\(Format.plural(whole, "table", "tables")) ok"
            : "damaged: \(damaged.joined(separator: ", ")), \(Format.plural(whole, "other table", "other tables")) ok"
        return Check(id, .fail, "SQLite stopped on damage (\(stopped)); table by table: \(found)", details: details,
                     advice: "the store is damaged: do not migrate or purge it; restore from a backup, a snapshot or a point",
                     figures: ["damagedTables": .array(damaged.map { .string($0) })])
    }

    // MARK: - Core Data

    static func coreDataChecks(_ db: Database, counting: Bool = true) -> (checks: [Check], entities: [CoreDataCensus.EntityCount]?) {
        let store: CoreDataStore
        do {
            guard let found = try CoreDataStore.read(db) else { return ([], nil) }
            store = found
        } catch {
            let message = (error as? StoreOpsError)?.message ?? "\(error)"
            return ([Check("coredata.metadata", .fail, "Core Data tables present but unreadable: \(message)")], nil)
        }
        guard counting else { return ([metadataCheck(store.metadata), keyCheck(db, store: store), orphanCheck(db, store: store)], nil) }
        let (entitiesCheck, entities) = entityCheck(db, store: store)
        return ([metadataCheck(store.metadata), entitiesCheck, keyCheck(db, store: store), orphanCheck(db, store: store)], entities)
    }

    static func metadataCheck(_ meta: CoreDataMetadata) -> Check {
        let identifiers = meta.modelVersionIdentifiers.filter { !$0.isEmpty }
        return Check("coredata.metadata", .ok,
            "\(meta.storeType ?? "?") store, framework \(meta.frameworkVersion.map(String.init) ?? "?"), \(meta.modelVersionHashes.count) entity hashes"
            + (identifiers.isEmpty ? "" : ", model \(identifiers.joined(separator: ","))")
            + (meta.modelVersionHashesDigest.map { ", digest \($0.prefix(12))…" } ?? "")).with(["metadata": .encoding(meta)])
    }

    static func entityCheck(_ db: Database, store: CoreDataStore) -> (Check, [CoreDataCensus.EntityCount]?) {
        do {
            let counts = try CoreDataCensus.entityCounts(db, store: store)
            let total = counts.compactMap(\.rows).reduce(0, +)
            let missing = counts.filter { $0.table == nil }.map(\.entity)
            return (Check("coredata.entities", .ok, "\(Format.plural(counts.count, "entity", "entities")), \(Format.plural(total, "row", "rows"))",
                          details: missing.isEmpty ? [] : ["no table for: \(missing.joined(separator: ", ")) (entities without rows of their own)"],
                          figures: ["entities": .int(counts.count), "rows": .int(total), "withoutTable": .array(missing.map { .string($0) })]), counts)
        } catch {
            return (Check("coredata.entities", .fail, "could not count: \(StoreOpsError.sqlite(error, doing: "counting entities").message)"), nil)
        }
    }

    static func keyCheck(_ db: Database, store: CoreDataStore) -> Check {
        do {
            let problems = try CoreDataCensus.keyCounterProblems(db, store: store)
            let roots = store.entities.filter(\.isRoot).count
            let figures: [String: JSONValue] = ["rootEntities": .int(roots), "problems": .encoding(problems)]
            return (problems.isEmpty
                ? Check("coredata.z_max", .ok, "Z_MAX >= max(Z_PK) for all \(Format.plural(roots, "root entity", "root entities"))")
                : Check("coredata.z_max", .fail, "\(Format.plural(problems.count, "root entity", "root entities")) with key problems",
                        details: problems.map(\.summary),
                        advice: "Core Data would reuse existing primary keys or fail to read them; the store was edited outside Core Data")).with(figures)
        } catch {
            return Check("coredata.z_max", .fail, "could not check: \(StoreOpsError.sqlite(error, doing: "reading the primary keys").message)",
                         advice: "the store is damaged or unreadable: the integrity checks say where (`--full` runs them all)")
        }
    }

    static func orphanCheck(_ db: Database, store: CoreDataStore) -> Check {
        guard store.model != nil else {
            return Check("coredata.orphans", .skip, "relationships unknown: \(store.modelUnavailableReason ?? "no model cache")")
        }
        do {
            let mapping = try CoreDataCensus.toOneColumns(db, store: store)
            // Many-to-many links too: a link to an object that is gone is the same fault (a
            // join table's rows were not checked, and a migration that left one passed).
            let links = try CoreDataCensus.joinColumns(db, store: store)
            let orphans = try CoreDataCensus.orphans(db, columns: mapping.columns).filter { $0.orphans > 0 }
            let linkOrphans = try CoreDataCensus.orphans(db, columns: links).filter { $0.orphans > 0 }
            let total = orphans.reduce(0) { $0 + $1.orphans }, linkTotal = linkOrphans.reduce(0) { $0 + $1.orphans }
            let figures: [String: JSONValue] = ["columns": .int(mapping.columns.count), "orphans": .int(total),
                                                "byColumn": .encoding(orphans), "skipped": .array(mapping.skipped.map { .string($0) }),
                                                "linkColumns": .int(links.count), "linkOrphans": .int(linkTotal), "byLinkColumn": .encoding(linkOrphans)]
            var details = (orphans + linkOrphans).map { "\($0.table).\($0.column) -> \($0.destinationTable): \(Format.count($0.orphans)) (\($0.relationships.joined(separator: ", ")))" }
            details += mapping.skipped.map { "not checked: \($0)" }
            let linked = links.isEmpty ? "" : ", \(Format.plural(links.count, "many-to-many link column", "many-to-many link columns"))"
            let found = [total > 0 ? Format.plural(total, "orphaned to-one reference", "orphaned to-one references") : nil,
                         linkTotal > 0 ? Format.plural(linkTotal, "link to a missing object", "links to missing objects") : nil].compactMap { $0 }
            return (found.isEmpty
                ? Check("coredata.orphans", .ok, "0 orphans in \(Format.plural(mapping.columns.count, "to-one relationship column", "to-one relationship columns"))\(linked)", details: details)
                : Check("coredata.orphans", .fail, "\(found.joined(separator: " and ")) in \(Format.plural(orphans.count + linkOrphans.count, "column", "columns"))", details: details,
                        advice: "these rows point at objects that no longer exist; Core Data faults on them")).with(figures)
        } catch {
            return Check("coredata.orphans", .fail, "could not check: \(StoreOpsError.sqlite(error, doing: "reading the to-one references").message)",
                         advice: "the store is damaged or unreadable: the integrity checks say where (`--full` runs them all)")
        }
    }

}
