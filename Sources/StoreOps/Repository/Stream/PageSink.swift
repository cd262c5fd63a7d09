import CSQLiteSink
import Foundation
import GRDBSQLite

/// A destination connection for SQLite's backup API whose pages go to a `PageStream` instead of
/// a file (the "storectl-sink" VFS in CSQLiteSink): a snapshot is packed while the store is
/// read, with no scratch copy on disk.
final class PageSink {
    /// Where each page (but page 1, kept here) goes: false refuses it (the copy then fails).
    typealias Receiver = (UInt32, UnsafeRawBufferPointer) -> Bool
    private final class Target {
        let receive: Receiver
        init(_ receive: @escaping Receiver) { self.receive = receive }
    }
    private let target: Target
    private var sink: OpaquePointer?
    private(set) var db: OpaquePointer?

    convenience init(stream: PageStream, pageSize: Int) throws {
        try self.init(pageSize: pageSize) { page, bytes in stream.receive(page: page, bytes: bytes) }
    }

    init(pageSize: Int, receive: @escaping Receiver) throws {
        target = Target(receive)
        let context = Unmanaged.passUnretained(target).toOpaque()
        guard let sink = storectl_sink_new({ context, page, data, size in
            guard let context, let data else { return 1 }
            let target = Unmanaged<Target>.fromOpaque(context).takeUnretainedValue()
            return target.receive(page, UnsafeRawBufferPointer(start: data, count: Int(size))) ? 0 : 1
        }, context) else { throw StoreOpsError(.failure, "out of memory for the page sink") }
        self.sink = sink
        var handle: OpaquePointer?
        let rc = storectl_sink_open(sink, &handle)
        db = handle
        guard rc == SQLITE_OK, let handle else {
            throw StoreOpsError(.failure, "cannot open the page sink (SQLite result \(rc))")
        }
        // No journal (nothing to roll back: a failed copy is simply not recorded), a small cache
        // (pages leave for the stream as the cache fills), no fsync (there is no file).
        for pragma in ["PRAGMA page_size = \(pageSize)", "PRAGMA journal_mode = OFF", "PRAGMA synchronous = OFF",
                       "PRAGMA cache_size = -512", "PRAGMA locking_mode = EXCLUSIVE"] {
            guard sqlite3_exec(handle, pragma, nil, nil, nil) == SQLITE_OK else {
                throw StoreOpsError(.failure, "setting up the page sink (\(pragma)): \(String(cString: sqlite3_errmsg(handle)))")
            }
        }
    }

    deinit { close() }

    func close() {
        if let db { sqlite3_close_v2(db) }
        db = nil
        if let sink { storectl_sink_free(sink) }
        sink = nil
    }

    /// What the sink itself found wrong (a read back, an odd write), if anything.
    var problem: String? {
        guard let sink, let text = storectl_sink_problem(sink) else { return nil }
        return String(cString: text)
    }

    /// The database's final size in pages.
    func pageCount(pageSize: Int) -> Int {
        guard let sink, pageSize > 0 else { return 0 }
        return Int(storectl_sink_size(sink)) / pageSize
    }

    /// Page 1 as SQLite last wrote it, in rollback-journal mode: bytes 18 and 19 (the file format
    /// write and read versions) are 1, as SQLite itself sets them when a database leaves WAL
    /// mode (https://sqlite.org/fileformat2.html#file_format_version_numbers), so the snapshot
    /// is one self-contained file.
    func page1() -> [UInt8]? {
        guard let sink else { return nil }
        var size: Int32 = 0
        guard let bytes = storectl_sink_page1(sink, &size), size >= 100 else { return nil }
        var page = Array(UnsafeBufferPointer(start: bytes, count: Int(size)))
        if page[18] == 2 { page[18] = 1 }
        if page[19] == 2 { page[19] = 1 }
        return page
    }
}
