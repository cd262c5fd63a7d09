import Foundation
@testable import StoreOps
import Testing

/// The keep/remove decisions of `Retention.apply` on hand-made snapshot lists.
@Suite("snapshot retention (pure)")
struct RetentionTests {
    func snap(_ id: String, _ time: String, tags: [String] = [], verified: Bool = false) -> RetentionCandidate {
        RetentionCandidate(id: id, time: Timestamp.parseISO(time)!, tags: tags, verified: verified)
    }

    func kept(_ policy: RetentionPolicy, _ snapshots: [RetentionCandidate]) -> [String] {
        Retention.apply(policy, to: snapshots).filter(\.keep).map(\.id)
    }

    func within(_ text: String) -> DurationText { try! DurationText.parse(text).get() }

    @Test func keepLastKeepsTheNewest() {
        let list = (1...5).map { snap("s\($0)", "2026-11-2\($0)T03:00:00Z") }
        #expect(kept(.init(last: 3), list) == ["s5", "s4", "s3"])
        let decisions = Retention.apply(.init(last: 3), to: list)
        #expect(decisions.first { $0.id == "s1" }?.reasons == ["no rule keeps it"])
        #expect(decisions.first { $0.id == "s5" }?.reasons == ["one of the last 3"])
    }

    @Test("hourly keeps the newest snapshot of each of the N most recent hours that have one")
    func hourlyBuckets() {
        let list = [snap("a", "2026-11-22T10:05:00Z"), snap("b", "2026-11-22T10:55:00Z"), snap("c", "2026-11-22T11:00:00Z"),
                    snap("d", "2026-11-22T11:59:59Z"), snap("e", "2026-11-22T12:30:00Z")]
        #expect(kept(.init(hourly: 2), list) == ["e", "d"])
        #expect(kept(.init(hourly: 3), list) == ["e", "d", "b"])
        #expect(kept(.init(hourly: -1), list) == ["e", "d", "b"], "-1: every hour")
    }

    @Test("daily buckets are UTC days: 23:59 and 00:01 are different days; gaps do not count")
    func dailyBuckets() {
        let list = [snap("mon-late", "2026-11-23T23:59:00Z"), snap("tue-early", "2026-11-24T00:01:00Z"),
                    snap("tue-noon", "2026-11-24T12:00:00Z"), snap("weeks-ago", "2026-10-01T08:00:00Z")]
        #expect(kept(.init(daily: 2), list) == ["tue-noon", "mon-late"])
        // Three days with snapshots, not three calendar days back from the newest: the October one counts.
        #expect(kept(.init(daily: 3), list) == ["tue-noon", "mon-late", "weeks-ago"])
    }

    @Test("weekly buckets are ISO weeks: Sunday and Monday split, a year's last days may be week 53")
    func weeklyBuckets() {
        let list = [snap("sat", "2026-11-21T09:00:00Z"), snap("sun", "2026-11-22T23:00:00Z"), snap("mon", "2026-11-23T01:00:00Z")]
        #expect(kept(.init(weekly: 2), list) == ["mon", "sun"])
        let newYear = [snap("dec31", "2026-12-31T12:00:00Z"), snap("jan3", "2027-01-03T12:00:00Z"), snap("jan4", "2027-01-04T12:00:00Z")]
        #expect(kept(.init(weekly: 2), newYear) == ["jan4", "jan3"], "31 Dec 2026 and 3 Jan 2027 are both in ISO week 2026-W53")
    }

    @Test func monthlyAndYearly() {
        let list = [snap("jan", "2026-01-15T00:00:00Z"), snap("jan-end", "2026-01-31T23:59:59Z"), snap("feb", "2026-02-01T00:00:00Z"),
                    snap("last-year", "2025-06-01T00:00:00Z")]
        #expect(kept(.init(monthly: 2), list) == ["feb", "jan-end"])
        #expect(kept(.init(yearly: 5), list) == ["feb", "last-year"])
    }

    @Test("keep-within counts back from the newest snapshot, not from now")
    func withinFromNewest() {
        // Years ago: with "now" as the reference everything would expire.
        let list = [snap("new", "2020-01-10T00:00:00Z"), snap("edge", "2020-01-08T00:00:00Z"), snap("old", "2020-01-07T23:59:59Z")]
        #expect(kept(.init(within: within("2d")), list) == ["new", "edge"], "exactly 2d before the newest is kept")
        #expect(Retention.apply(.init(within: within("2d")), to: list).first?.reasons == ["within 2d of the newest"])
    }

    @Test("ties: equal times are ordered by id, deterministically")
    func ties() {
        let list = [snap("20261122T030000Z-aaaaaa", "2026-11-22T03:00:00Z"), snap("20261122T030000Z-bbbbbb", "2026-11-22T03:00:00Z")]
        #expect(kept(.init(last: 1), list) == ["20261122T030000Z-bbbbbb"])
        #expect(kept(.init(last: 1), list.reversed()) == ["20261122T030000Z-bbbbbb"])
        #expect(kept(.init(daily: 1), list) == ["20261122T030000Z-bbbbbb"])
    }

    @Test("rules are OR-ed and every reason is given; tags keep")
    func orAndTags() {
        let list = [snap("a", "2026-11-22T03:00:00Z"), snap("b", "2026-11-21T03:00:00Z", tags: ["pre-migrate"]), snap("c", "2026-11-20T03:00:00Z")]
        let decisions = Retention.apply(.init(last: 1, daily: 2, tags: ["pre-migrate"]), to: list)
        #expect(decisions.map(\.keep) == [true, true, false])
        #expect(decisions[0].reasons == ["one of the last 1", "daily snapshot"])
        #expect(decisions[1].reasons == ["tagged pre-migrate", "daily snapshot"])
    }

    @Test("a safety snapshot (pre-migrate, pre-restore, pre-purge) is kept 7 days after it was taken whatever the rules (the next maintain removed a pre-migrate one, rollback's target); keep_safety sets how long, 0 turns it off")
    func safetySnapshotsKeptAWeek() {
        let now = Timestamp.parseISO("2026-11-22T12:00:00Z")!
        let list = [snap("a", "2026-11-22T03:00:00Z"), snap("migrate", "2026-11-21T03:00:00Z", tags: ["pre-migrate"]),
                    snap("restore", "2026-11-20T03:00:00Z", tags: ["pre-restore"]), snap("purge", "2026-11-19T03:00:00Z", tags: ["pre-purge"]),
                    snap("old-migrate", "2026-11-10T03:00:00Z", tags: ["pre-migrate"]), snap("scheduled", "2026-11-21T02:00:00Z", tags: ["scheduled"])]
        let decisions = Retention.apply(.init(last: 1), to: list, groupBy: .store, now: now)
        #expect(decisions.filter(\.keep).map(\.id) == ["a", "migrate", "restore", "purge"], "\(decisions)")
        #expect(decisions.first { $0.id == "migrate" }?.reasons.first?.hasPrefix("a safety snapshot (pre-migrate) younger than 7d") == true)
        let shorter = Retention.apply(.init(last: 1, safety: DurationText(seconds: 2 * 86_400, text: "2d")), to: list, groupBy: .store, now: now)
        #expect(shorter.filter(\.keep).map(\.id) == ["a", "migrate"])
        let off = Retention.apply(.init(last: 1, safety: DurationText(seconds: 0, text: "0")), to: list, groupBy: .store, now: now)
        #expect(off.filter(\.keep).map(\.id) == ["a"])
    }

    @Test("the newest verified snapshot is always kept")
    func newestVerified() {
        let list = [snap("new-unverified", "2026-11-22T03:00:00Z"), snap("verified", "2026-11-21T03:00:00Z", verified: true),
                    snap("older-verified", "2026-11-20T03:00:00Z", verified: true)]
        let decisions = Retention.apply(.init(last: 1), to: list)
        #expect(decisions.filter(\.keep).map(\.id) == ["new-unverified", "verified"])
        #expect(decisions[1].reasons == ["the newest verified snapshot (always kept)"])
    }

    @Test("a grouping wider than the store (none, path) still keeps each store's newest verified snapshot: --group-by none --keep-last 1 over two stores removed the older store's only one")
    func newestVerifiedOfEachStore() {
        var a = snap("store-a", "2026-11-21T03:00:00Z", verified: true), b = snap("store-b", "2026-11-22T03:00:00Z", verified: true)
        a.host = "h1"; a.path = "/srv/A.sqlite"; b.host = "h1"; b.path = "/srv/B.sqlite"
        var c = snap("store-b-older", "2026-11-20T03:00:00Z", verified: true)
        c.host = "h1"; c.path = "/srv/B.sqlite"
        for grouping in [SnapshotGrouping.repository, SnapshotGrouping(host: false, path: false, tags: true)] {
            let decisions = Retention.apply(.init(last: 1), to: [a, b, c], groupBy: grouping)
            #expect(Set(decisions.filter(\.keep).map(\.id)) == ["store-a", "store-b"], "\(decisions)")
            #expect(decisions.first { $0.id == "store-a" }?.reasons == ["the newest verified snapshot of its store (always kept)"])
        }
        // Never verified, but checked when taken: a store keeps one such (--group-by tags removed
        // a store's only snapshot, which `snapshot verify` had never read).
        a.verified = false
        let rescued = Retention.apply(.init(last: 1), to: [a, b, c], groupBy: .repository)
        #expect(rescued.filter(\.keep).map(\.id) == ["store-b", "store-a"], "\(rescued)")
        #expect(rescued.first { $0.id == "store-a" }?.reasons == ["the newest snapshot of its store that passed its check (a store keeps one at least)"])
        // Its check failed (or none was made): the wide grouping's rules decide (what --group-by none is for).
        a.checked = false
        #expect(Retention.apply(.init(last: 1), to: [a, b, c], groupBy: .repository).filter(\.keep).map(\.id) == ["store-b"])
    }

    @Test func emptyPolicies() {
        #expect(RetentionPolicy().isEmpty)
        #expect(RetentionPolicy(last: 0, daily: 0).isEmpty)
        #expect(!RetentionPolicy(tags: ["x"]).isEmpty)
        #expect(throws: StoreOpsError.self) { try RetentionPolicy(daily: -2).validate() }
        #expect(Retention.apply(.init(last: 1), to: []).isEmpty)
    }

    @Test("each store on its own: --keep-last 1 keeps the newest of each store (host and path); the whole repository at once keeps one in all")
    func perStore() {
        func of(_ id: String, _ time: String, host: String, path: String, verified: Bool = false) -> RetentionCandidate {
            RetentionCandidate(id: id, time: Timestamp.parseISO(time)!, verified: verified, host: host, path: path)
        }
        let list = [of("a1", "2026-11-20T03:00:00Z", host: "web1", path: "/srv/A.sqlite"),
                    of("a2", "2026-11-21T03:00:00Z", host: "web1", path: "/srv/A.sqlite"),
                    of("b1", "2026-11-19T03:00:00Z", host: "web1", path: "/srv/B.sqlite"),
                    of("c1", "2026-11-18T03:00:00Z", host: "web2", path: "/srv/A.sqlite", verified: true),
                    of("c2", "2026-11-22T03:00:00Z", host: "web2", path: "/srv/A.sqlite")]
        let decisions = Retention.apply(.init(last: 1), to: list, groupBy: .store)
        #expect(decisions.filter(\.keep).map(\.id) == ["c2", "c1", "a2", "b1"], "the newest of each store, and web2's newest verified")
        #expect(decisions.map(\.group) == ["web2:/srv/A.sqlite", "web2:/srv/A.sqlite", "web1:/srv/A.sqlite", "web1:/srv/A.sqlite", "web1:/srv/B.sqlite"])
        #expect(Retention.apply(.init(last: 1), to: list, groupBy: .repository).filter(\.keep).map(\.id) == ["c2", "c1"])
        let byPath = Retention.apply(.init(last: 1), to: list, groupBy: try! SnapshotGrouping.parse("path"))
        #expect(byPath.filter(\.keep).map(\.id) == ["c2", "c1", "b1"], "one /srv/A.sqlite across both hosts")
        // Two stores whose `host:path` reads the same (host `vm`, path `h:/z/T.sqlite`; host
        // `vm:h`, path `/z/T.sqlite`) are two groups (a trial's were pruned as one).
        let alike = [of("x1", "2026-11-20T03:00:00Z", host: "vm", path: "h:/z/T.sqlite"), of("x2", "2026-11-21T03:00:00Z", host: "vm", path: "h:/z/T.sqlite"),
                     of("y1", "2026-11-22T03:00:00Z", host: "vm:h", path: "/z/T.sqlite"), of("y2", "2026-11-23T03:00:00Z", host: "vm:h", path: "/z/T.sqlite")]
        #expect(Retention.apply(.init(last: 1), to: alike, groupBy: .store).filter(\.keep).map(\.id).sorted() == ["x2", "y2"])
        // within counts back from the newest snapshot of each store, not of the repository.
        let within = Retention.apply(.init(within: self.within("1d")), to: list, groupBy: .store)
        #expect(within.filter(\.keep).map(\.id) == ["c2", "c1", "a2", "a1", "b1"])
    }

    @Test("--group-by parses host, path, tags and none (the whole repository); a blank value (an unset variable) and anything else is 64")
    func groupByParsing() throws {
        #expect(try SnapshotGrouping.parse("host,path") == .store)
        #expect(try SnapshotGrouping.parse("none") == .repository)
        #expect(try SnapshotGrouping.parse("path,tags") == SnapshotGrouping(host: false, path: true, tags: true))
        for bad in ["hosts,pth", "host,,path", "name", "", "  "] {
            #expect(throws: StoreOpsError.self) { try SnapshotGrouping.parse(bad) }
        }
    }

    @Test("values that keep nothing by accident are 64: an empty or blank tag, a blank --store or --host")
    func accidents() throws {
        for tags in [[""], ["  "], ["nightly", ""]] {
            #expect(throws: StoreOpsError.self) { try RetentionPolicy(last: 3, tags: tags).validate() }
        }
        #expect(throws: StoreOpsError.self) { try SnapshotFilter.parse(store: "", host: nil) }
        #expect(throws: StoreOpsError.self) { try SnapshotFilter.parse(store: nil, host: " ") }
        #expect(RetentionPolicy(last: 0).isEmpty)
    }

    @Test("a snapshot made after another of its store (its parent) counts as the newer whatever the dates: one dated a day ahead (its host's clock was fast) was kept by --keep-last 1 over the store's real newest; the misdated one moves back before its earliest child (the children keep their own dates and buckets); both that and a date ahead of this host's clock are said")
    func lineageOverClocks() throws {
        let now = try #require(Timestamp.parseISO("2026-12-04T03:00:00Z"))
        let entries: [(id: String, parent: String?, time: Date)] = [
            ("a", nil, now.addingTimeInterval(-7200)),
            ("fast", "a", now.addingTimeInterval(86400)),        // the clock a day ahead
            ("real", "fast", now.addingTimeInterval(-60)),       // made after it, dated before it
            ("next", "real", now.addingTimeInterval(-30)),
        ]
        let (times, notes) = SnapshotPrune.lineageTimes(entries, now: now)
        #expect(times["a"] == entries[0].time && times["real"] == entries[2].time && times["next"] == entries[3].time, "the children keep their dates")
        let fast = try #require(times["fast"])
        #expect(fast < entries[2].time && fast > entries[0].time, "before its child: \(fast)")
        #expect(notes.count == 2 && notes.contains { $0.hasPrefix("fast is dated") && $0.contains("not before real") }
                && notes.contains { $0.hasPrefix("fast is dated") && $0.contains("ahead of this host's clock") }, "\(notes)")
        let candidates = entries.map { RetentionCandidate(id: $0.id, time: times[$0.id] ?? $0.time) }
        #expect(kept(RetentionPolicy(last: 1), candidates) == ["next"])
        // Two misdated in a row: both move back, in order.
        let two = SnapshotPrune.lineageTimes([("p", nil, now.addingTimeInterval(90000)), ("q", "p", now.addingTimeInterval(86400)), ("r", "q", now)], now: now)
        #expect(two.times["p"]! < two.times["q"]! && two.times["q"]! < now && two.times["r"] == now, "\(two.times)")
        // An old archive an older storectl imported with the store's newest as its parent: no one
        // moves (moving its parent back would pull the whole lineage before 2024).
        let day: TimeInterval = 86400
        let imported = SnapshotPrune.lineageTimes([("p0", nil, now.addingTimeInterval(-3 * day)), ("p1", "p0", now.addingTimeInterval(-2 * day)),
                                                   ("p2", "p1", now.addingTimeInterval(-day)), ("old", "p2", now.addingTimeInterval(-700 * day))], now: now)
        #expect(imported.times["p2"] == now.addingTimeInterval(-day) && imported.times["p1"] == now.addingTimeInterval(-2 * day) && imported.notes.isEmpty, "\(imported)")
        // A loop of parents (a damaged catalog) ends.
        let looped = SnapshotPrune.lineageTimes([("x", "y", now), ("y", "x", now)], now: now)
        #expect(looped.times.count == 2)
    }
}
