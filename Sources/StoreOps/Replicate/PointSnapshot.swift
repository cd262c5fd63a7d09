import Foundation
import Logging

/// A safety snapshot made from a point instead of the store (migrate's, purge's, and a restore
/// in place's or a rollback's of the state it replaces).
///
/// A safety snapshot reads the whole store: seconds a GiB, and the app's disk meanwhile. When
/// `storectl replicate` follows the store into the same repository, the store as it is now is
/// usually its newest point already. The point is taken instead when that is proved, not
/// assumed, from what the store's files say now, without reading its pages:
///
/// - nobody but followers has the store open (no app connection that could commit meanwhile);
/// - the wal-index names the same -wal generation (salts), the same last frame and the same
///   running checksum of its frames as the point's cursor, and the same commit counter: no commit
///   after it, and the same frames before it (the checksum chains every frame of the generation);
/// - the database file and the -wal are the files the follower read (device and inode).
///
/// A follower writes its points every `sync_interval` (1 s by default): a commit made just
/// before may not be durable yet, so while a follower has the store open the check is made
/// again for up to `wait` seconds. Otherwise (no follower, another chain, a gap, external-data
/// files added or removed since the point's base or milestone, anything that cannot be read) the
/// caller reads the store as before: this only ever saves time.
///
/// The snapshot is a record like a milestone's: the point's base (or last milestone) as its
/// parent, the pages the commits since then wrote over it, stored where the repository lacks
/// them; the ids it computes must equal the point's, or nothing is recorded.
enum PointSnapshot {
    static var logger: Logger { SnapshotCreate.logger }

    /// Seconds to wait for a running follower to make the store's last commit durable
    /// (`STORECTL_POINT_WAIT`, 0 to 60; default 3: three sync intervals at the default).
    static var wait: TimeInterval {
        if let text = ProcessInfo.processInfo.environment["STORECTL_POINT_WAIT"], let seconds = Double(text), seconds >= 0, seconds <= 60 { return seconds }
        return 3
    }

    /// `STORECTL_POINT_SNAPSHOTS=0`: safety snapshots always read the store.
    static let disabled = ProcessInfo.processInfo.environment["STORECTL_POINT_SNAPSHOTS"] == "0"

    /// The point that is the store's state now.
    struct Fresh {
        var key: String
        var chain: String
        var number: Int
        var time: Int64
        var id: String { "\(chain)@\(number)" }
    }

    /// Makes the snapshot from the store's fresh point, or returns nil (nothing written) when
    /// there is none or it cannot be used.
    ///
    /// `writeLockHeld`: the caller holds the store's write lock (a restore in place, a rollback):
    /// no app can commit, so an app that has the store open does not disqualify the point; and
    /// while one has it open, every moment of waiting for the follower is a moment its commits
    /// wait, so the wait is no longer than reading the store would take (at 256 MiB/s: a small
    /// store is read at once; a trial waited 3 s under the lock to read a 2,000-item store in
    /// milliseconds). With no app there, the wait costs nobody and stays whole.
    /// Without it, an app that has the store open (not a follower) ends the wait: while it can
    /// commit, no point is provably the store's state.
    static func make(store: StoreFile, in hold: RepositoryHold, tags: [String], level: Int?, writeLockHeld: Bool = false) -> SnapshotCreate.Result? {
        let repository = hold.repository
        var patience = wait
        if writeLockHeld, let open = (try? LockState.read(store, walMode: true))?.openByPID, !LockState.isFollower(open) {
            patience = min(patience, Double(FileSystem.size(of: store.path) ?? 0) / Double(256 << 20))
        }
        let deadline = Date().addingTimeInterval(patience)
        var found: Result<Fresh, Stale>
        while true {
            do { found = try find(store, in: repository, writeLockHeld: writeLockHeld) } catch {
                logger.debug("no point used for the safety snapshot", metadata: ["store": "\(store.path)", "error": "\(error)"])
                return nil
            }
            if case .failure(let stale) = found, stale.openByApp { break }
            if case .success = found { break }
            if Date() >= deadline || !followed(store) { break }
            usleep(200_000)
        }
        let fresh: Fresh
        switch found {
        case .success(let point): fresh = point
        case .failure(let stale):
            logger.debug("no point used for the safety snapshot", metadata: ["store": "\(store.path)", "why": "\(stale.reason)"])
            return nil
        }
        do {
            return try make(from: fresh, store: store, in: repository, tags: tags, level: level)
        } catch {
            logger.notice("the store's newest point could not be made a snapshot; the store is read instead", metadata: [
                "store": "\(store.path)", "point": "\(fresh.id)", "error": "\((error as? StoreOpsError)?.message ?? "\(error)")"])
            return nil
        }
    }

    /// A `storectl replicate` has the store open (it may not have written its last commit yet).
    static func followed(_ store: StoreFile) -> Bool {
        guard let holders = LockState.holders(of: store.shmPath, byte: LockState.walDMSByte) else { return false }
        return holders.contains { $0 != getpid() && LockState.isFollower($0) }
    }

    /// The store's newest point, when it is provably the store's state now; else why not.
    static func find(_ store: StoreFile, in repository: PagedRepository, writeLockHeld: Bool = false) throws -> Result<Fresh, Stale> {
        guard StoreFile.isWALHeader(try FileProbe.shared.header(of: store.path)) else { return .failure(Stale("the store is not in WAL mode")) }
        let locks = try LockState.read(store, walMode: true)
        if let pid = locks.writerPID { return .failure(Stale("pid \(pid) is writing to the store")) }
        if !writeLockHeld, let pid = locks.openByPID { return .failure(Stale("pid \(pid) has the store open", openByApp: !LockState.isFollower(pid))) }
        guard let index = WalFormat.IndexHeader.current(of: store) else {
            return .failure(Stale("the wal-index cannot be read"))
        }
        let path = FileSystem.absolute(store.path)
        let key = PointSegment.storeKey(host: ProcessInfo.processInfo.hostName, path: path)
        let timeline = try PointTimeline.load(repository, store: key)
        guard let chain = timeline.chains(of: key).max(by: { $0.baseTime < $1.baseTime }) else { return .failure(Stale("no point of the store")) }
        if let missing = chain.missingThrough { return .failure(Stale("points up to \(missing) of chain \(chain.id) are missing")) }
        guard let last = chain.segments.last, let sealed = try repository.backend.read(last.key) else { return .failure(Stale("the chain's last segment cannot be read")) }
        let zstd = try ZstdFrames(level: 3)
        guard let (segment, _, _) = try PointSegment.openAll(sealed, name: last, sealer: repository.sealer, zstd: zstd, location: repository.location).last,
              segment.path.isExactly(path) || segment.path.isExactly(store.path) else { return .failure(Stale("the chain's last segment is of another path")) }
        let cursor = segment.cursor
        if !cursor.headerRead {
            // A point read with no frame in the -wal (a base read from the file alone): the
            // wal-index may have been made again since, as empty as it was, over a file written
            // meanwhile. The file's size and times, as recorded then, must still be its own.
            guard cursor.frame == 0, index.lastFrame == 0,
                  let recorded = chain.confirmingState(last: segment, in: repository, zstd: zstd), recorded.distinguishesLaterWrites,
                  let now = DatabaseFileState(of: store.path), now.sameFile(as: recorded) else {
                return .failure(Stale("point \(chain.id)@\(last.to) was read from the file alone, and the file's state then is not known to be its state now"))
            }
        }
        guard cursor.salt1 == index.salt1, cursor.salt2 == index.salt2, cursor.frame == index.lastFrame,
              cursor.frame == 0 || cursor.checksum == index.frameChecksum, cursor.change == index.change,
              cursor.pageSize == index.pageSize || index.pageSize == 0 else {
            return .failure(Stale("point \(chain.id)@\(last.to) is at frame \(cursor.frame) of -wal generation \(cursor.salt1), commit \(cursor.change.map(String.init) ?? "?"); "
                                  + "the store at frame \(index.lastFrame) of \(index.salt1), commit \(index.change)"))
        }
        func same(_ recorded: [UInt64]?, _ now: (dev: UInt64, ino: UInt64)?) -> Bool {
            guard let recorded, recorded.count == 2, let now else { return false }
            return recorded[0] == now.dev && recorded[1] == now.ino
        }
        guard same(segment.databaseIdentity, FileSystem.identity(of: store.path)) else { return .failure(Stale("the store's file is not the one the point was read from")) }
        if let wal = FileSystem.identity(of: store.walPath) {
            guard same(segment.walIdentity, wal) else { return .failure(Stale("the -wal is not the one the point was read from")) }
        } else if cursor.frame != 0 { return .failure(Stale("the -wal is gone")) }
        // The wal-index can lag the -wal itself: an app killed after writing a commit's frames
        // and before updating the index leaves a commit the next connection recovers from the
        // file (and an app in exclusive locking mode keeps its index in memory). No commit may
        // follow the point in the -wal.
        let wal = WalFileReader(path: store.walPath)
        defer { wal.close() }
        if try wal.open() {
            var from: WalCursor?
            if cursor.headerRead {
                guard try wal.frameIntact(cursor), let header = try wal.header(), header.salt1 == cursor.salt1, header.salt2 == cursor.salt2 else {
                    return .failure(Stale("the -wal is not at the point's frame any more"))
                }
                from = cursor
            } else if let header = try wal.header() {
                from = WalCursor(header: header)
            }
            if let from {
                // (Without its pages a walk counts no commits; its cursor moves to the last one.)
                let walk = try wal.walk(from: from, limit: nil, keepPages: false)
                if walk.cursor.frame > from.frame {
                    return .failure(Stale("the -wal holds commits after the point (to frame \(walk.cursor.frame)) that the wal-index does not show"))
                }
            }
        }
        let time = segment.commits.last?.time ?? last.lastTime
        return .success(Fresh(key: key, chain: chain.id, number: last.to, time: time))
    }

    struct Stale: Error {
        var reason: String
        /// An app (not a follower) has the store open and may commit: waiting does not help.
        var openByApp = false
        init(_ reason: String, openByApp: Bool = false) {
            self.reason = reason
            self.openByApp = openByApp
        }
    }

    /// The point's state as a snapshot record over its base or milestone.
    static func make(from fresh: Fresh, store: StoreFile, in repository: PagedRepository, tags: [String], level: Int?) throws -> SnapshotCreate.Result {
        let target = try PointRestore.resolve(repository, at: PointRestore.date(fresh.time), store: nil, host: nil,
                                              scratch: PointRestore.temporaryFolder, point: (fresh.key, fresh.number))
        guard target.point == fresh.id else {
            throw StoreOpsError(.failure, "the point read is \(target.point ?? target.record.id), not \(fresh.id)")
        }
        let parent = target.record
        let map = try BlobLocator.pageMap(of: parent, in: repository)
        let pageSize = parent.pages.pageSize
        let ids = target.overlay?.ids ?? map.ids
        if let overlay = target.overlay {
            // Its external-data files must be its parent's: a point with files added or removed
            // since is read from the store instead.
            guard overlay.tracked, overlay.removedBaseFiles.isEmpty, overlay.carriedFiles.isEmpty, overlay.files.isEmpty else {
                throw StoreOpsError(.failure, "external-data files changed since the point's base")
            }
        }
        let zeroPage = [UInt8](repeating: 0, count: pageSize)
        let zeroID = repository.sealer.contentID(zeroPage)
        let keep = min(map.ids.count, ids.count)
        var changed: [UInt32] = []
        for p in 0..<ids.count where p >= keep || ids[p] != map.ids[p] { changed.append(UInt32(p + 1)) }
        let work = PagedSnapshotWork(store: store, repository: repository, tags: tags, level: level, reuseUnchanged: false)
        work.takeParent(parent, map: map)
        work.recordPoint = "snapshot.from-point.record"
        let source = Manifest.Source(path: store.path, journalMode: "wal", pageSize: pageSize, pageCount: ids.count,
                                     fileBytes: UInt64(ids.count) * UInt64(pageSize), walBytes: 0)
        do {
            try work.copyMilestone(pageSize: pageSize, pageCount: ids.count, keep: keep, pages: changed, source: source,
                                   verification: "made from point \(fresh.id) of storectl replicate, the store's state then and when it was taken (no page of the store read; checked when restored)") { page in
                if let bytes = try target.overlay?.pages.page(page) { return bytes }
                guard ids[Int(page) - 1] == zeroID else { throw StoreOpsError(.failure, "page \(page) of the point is not held") }
                return zeroPage
            }
            guard work.finalIDs == ids else { throw StoreOpsError(.failure, "the pages stored are not the point's") }
            try work.check()
            try work.commit()
        } catch {
            work.abandon()
            throw error
        }
        var result = try work.result()
        result.point = fresh.id
        return result
    }
}
