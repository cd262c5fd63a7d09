import Foundation
import StoreLab
@testable import StoreOps
import Testing

/// The one exit map, as tables: every kind of failure, every way a run ends, and every error the
/// road turns into an ending, with the status it exits with.
@Suite("exit map: kinds, endings and errors to exit statuses")
struct ExitMapTests {
    typealias Kind = StoreOpsError.Kind

    @Test("every kind of failure has its documented status, and a recorded status reads back as a kind with the same status")
    func kinds() {
        let table: [(Kind, Int32)] = [
            (.failure, 1), (.checksFailed, 2), (.rolledBack, 3), (.rollbackFailed, 4), (.usage, 64), (.badData, 65),
            (.noInput, 66), (.cannotCreate, 73), (.ioError, 74), (.noSpace, 74), (.unreachable, 74), (.busy, 75),
            (.wrongPassword, 77), (.signal(2), 130), (.signal(15), 143),
        ]
        for (kind, status) in table {
            #expect(ExitMap.status(of: kind).rawValue == status, "\(kind)")
            #expect(StoreOpsError(kind, "x").status.rawValue == status, "\(kind)")
            #expect(ExitMap.status(of: ExitMap.kind(of: ExitStatus(rawValue: status))).rawValue == status, "\(status) round trip")
        }
        // Every documented status is one a kind maps to (ok aside).
        let reachable = Set(table.map(\.1))
        for (status, _) in ExitStatus.documented where status != .ok {
            #expect(reachable.contains(status.rawValue), "\(status) documented but no kind maps to it")
        }
        // What the errno and SQLite mappings say a full disk is.
        #expect(StoreOpsError.posix(ENOSPC, doing: "x", side: .output).kind == .noSpace)
        #expect(StoreOpsError.fromResultCode(13 /* SQLITE_FULL */, message: "", doing: "x").kind == .noSpace)
        #expect(StoreOpsError.posix(ENOENT, doing: "x", side: .input).kind == .noInput)
        #expect(StoreOpsError.posix(ENOENT, doing: "x", side: .output).kind == .cannotCreate)
    }

    @Test("Ending: outcome x stop x rollback stage x error -> status")
    func endings() {
        let table: [(Ending, Int32)] = [
            (.ok, 0),
            (Ending(.checksFailed, error: StoreOpsError(.checksFailed, "x")), 2),
            (Ending(.refused, error: StoreOpsError(.checksFailed, "breaker")), 2),
            (Ending(.skipped, error: StoreOpsError(.busy, "locked")), 75),
            (Ending(.rolledBack, error: StoreOpsError(.failure, "x"), rollsBack: true), 3),
            (Ending(.rollbackFailed, error: StoreOpsError(.rollbackFailed, "x"), rollsBack: true), 4),
            (Ending(.failed), 1),
            (Ending(.failed, error: StoreOpsError(.badData, "x")), 65),
            (Ending(.failed, error: StoreOpsError(.noSpace, "x")), 74),
            (Ending(.failed, error: StoreOpsError(.unreachable, "x")), 74),
            (Ending(.failed, error: StoreOpsError(.wrongPassword, "x")), 77),
            (Ending(.stopped, stop: .signal(15)), 143),
            (Ending(.stopped, stop: .signal(2)), 130),
            (Ending(.stopped, stop: .killSwitch("/k")), 1),
            (Ending(.stopped, stop: .maxRows(10)), 1),
            (Ending(.stopped, stop: .maxRuntime(60)), 1),
            (Ending(.stopped, stop: .signal(15), rollsBack: true), 3),
            (Ending(.stopped, stop: .killSwitch("/k"), rollsBack: true), 3),
        ]
        for (ending, status) in table {
            #expect(ending.status.rawValue == status, "\(ending.outcome) \(String(describing: ending.stop)) rollsBack \(ending.rollsBack)")
            // An ending that is not ok throws an error with the same status.
            if status != 0 { #expect(ending.thrown?.status.rawValue == status, "\(ending.outcome)") } else { #expect(ending.thrown == nil) }
        }
        #expect(Set(table.map(\.0.outcome)) == Set(Outcome.allCases), "every outcome is in the table")
    }

    @Test("an error thrown on the road becomes an ending: which outcome, which status")
    func errorsToEndings() {
        let table: [(any Error, Bool, Outcome, Int32)] = [
            (StoreOpsError(.badData, "x"), false, .failed, 65),
            (StoreOpsError(.noSpace, "x"), false, .failed, 74),
            (StoreOpsError(.checksFailed, "x"), false, .checksFailed, 2),
            (Pipeline.Refusal(error: StoreOpsError(.checksFailed, "breaker")), false, .refused, 2),
            (JobLock.Busy(error: StoreOpsError(.busy, "locked")), false, .skipped, 75),
            (Pipeline.Stop(reason: .signal(15)), false, .stopped, 143),
            (Pipeline.Stop(reason: .killSwitch("/k")), false, .stopped, 1),
            (Pipeline.Stop(reason: .signal(15)), true, .stopped, 3),
            (StoreOpsError(.signal(2), "interrupted"), false, .stopped, 130),
            (DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "x")), false, .failed, 65),
            (CocoaError(.fileNoSuchFile), false, .failed, 1),
        ]
        for (error, rollsBack, outcome, status) in table {
            let ending = Pipeline.ending(error, rollsBack: rollsBack)
            #expect(ending.outcome == outcome && ending.status.rawValue == status, "\(error): \(ending.outcome) \(ending.status)")
        }
    }

    @Test("a stop between the act and verify: a road that commits as it goes says what it keeps; one whose act leaves nothing says nothing was changed only before its act")
    func stopAfterTheAct() throws {
        let folder = try TempFolder("storectl-road")
        let store = StoreFile(unchecked: folder.file("Tasks.sqlite"))
        let thrown = folder.file("stop")
        func walk(kept: String?) -> Ending {
            let pipeline = Pipeline(operation: "purge", store: store, killSwitch: KillSwitch(store: store, extra: thrown))
            var road = Road<Int>(lock: .none, actName: "purge") { _ in
                // The kill switch thrown while the act's last batch ran: the next stage's start sees it.
                FileManager.default.createFile(atPath: thrown, contents: Data())
                return 1
            }
            road.verify = { (_: Pipeline, _: Int) in Issue.record("the verify stage ran after the stop") }
            road.keptAfterAct = kept
            defer { try? FileManager.default.removeItem(atPath: thrown) }
            return pipeline.walk(road).ending
        }
        let keeping = walk(kept: "the batches it committed are kept")
        #expect(keeping.outcome == .stopped && keeping.status.rawValue == 1)
        let message = keeping.error?.message ?? "no message"
        #expect(message.hasPrefix("purge stopped before its verify stage: the kill switch \(thrown) was thrown") && message.hasSuffix("; the batches it committed are kept"),
                "\(message)")
        // Without a claim, none is made (it cannot say "nothing was changed" after an act).
        let silent = walk(kept: nil).error?.message ?? "no message"
        #expect(silent.hasPrefix("purge stopped before its verify stage") && !silent.contains("nothing was changed") && !silent.contains("kept"), "\(silent)")
    }
}
