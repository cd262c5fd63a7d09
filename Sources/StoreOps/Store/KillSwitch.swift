import Foundation

/// A file whose existence asks running storectl jobs on a store to stop at their next safe point
/// (between batches, between migration steps). `storectl killswitch engage STORE` creates it for
/// an operator in another shell; jobs also honour `--kill-switch FILE`.
public struct KillSwitch: Sendable {
    public let paths: [String]

    /// The store's own switch (`<store>.storectl-killswitch`) and, if given, another file.
    public init(store: StoreFile, extra: String? = nil) {
        paths = [Self.defaultPath(for: store)] + (extra.map { [FileSystem.absolute($0)] } ?? [])
    }

    public static func defaultPath(for store: StoreFile) -> String { store.path + ".storectl-killswitch" }

    /// A `--kill-switch FILE` whose folder does not exist could never be thrown (a run given
    /// `/nonexistent/ks` went on, its operator believing it had a switch): 66 before anything runs.
    public static func checkExtra(_ extra: String?) throws {
        guard let extra else { return }
        let folder = FileSystem.parent(of: FileSystem.absolute(extra))
        guard FileSystem.kind(of: folder) == .directory else {
            throw StoreOpsError(.noInput, "--kill-switch \(extra): its folder \(folder) does not exist, so the switch could never be thrown; nothing was done",
                                hint: "name a file in an existing folder (it need not exist itself: creating it throws the switch)")
        }
    }

    /// The switch file that is thrown, if any.
    public var engaged: String? { paths.first { FileManager.default.fileExists(atPath: $0) } }

    /// Creates the store's switch file, recording who threw it and when.
    @discardableResult
    ///
    /// - Throws: 66 when there is no store file at that path, 65 when the file is not a SQLite store
    ///   (a typo would otherwise leave a switch that stops nothing), 73 when the file cannot be written.
    public static func engage(_ store: StoreFile, reason: String = "") throws -> String {
        // A SQLite store, checked like every command checks it: a typo that hits another file
        // (a policy, a log) would otherwise engage a switch that stops nothing.
        do { _ = try StoreFile(existing: store.path) } catch let error as StoreOpsError {
            throw StoreOpsError(error.kind, error.message + "; the kill switch was not engaged",
                                hint: error.hint ?? "name the store's database file, the path storectl jobs run on")
        }
        let path = defaultPath(for: store)
        let text = "engaged \(Timestamp.iso(Date())) by pid \(getpid())\(reason.isEmpty ? "" : ": \(reason)")\n"
        if FileSystem.kind(of: path) != .missing { return path }   // already engaged: leave the first record
        // Durable like everything storectl writes (a switch lost to a power cut would let the
        // runs it stopped go on): a temp name, fsynced, renamed, the folder fsynced. A switch
        // engaged by another meanwhile is kept (the first record), and so is this run's outcome.
        PendingFile.removeStale(in: FileSystem.parent(of: path), prefix: FileSystem.name(of: path))   // an engage killed mid-way
        let file = try PendingFile(finalPath: path, label: "killswitch")
        try file.write(Data(text.utf8))
        do {
            try file.commit()
        } catch where FileSystem.kind(of: path) != .missing && !file.isCommitted {
            file.discard()
        }
        return path
    }

    /// How to let runs go on again: the switch stays engaged (and stops every run at its start)
    /// until someone releases it.
    public static func releaseHint(_ path: String) -> String {
        let suffix = ".storectl-killswitch"
        if path.hasSuffix(suffix) {
            return " (it stays engaged: `storectl killswitch release \(path.dropLast(suffix.count))` lets runs go on)"
        }
        return " (it stays engaged: remove \(path) to let runs go on)"
    }

    /// Removes the store's switch file; returns whether it existed.
    @discardableResult
    public static func release(_ store: StoreFile) -> Bool { FileSystem.remove(defaultPath(for: store), point: "killswitch.remove") }
}

