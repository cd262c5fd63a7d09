/// One snapshot being made, in either repository format: what `SnapshotCreate` walks through
/// the pipeline's act (copy), verify (check) and commit stages.
protocol SnapshotWork: AnyObject {
    func copy(timeout: TimeInterval, checkFreeSpace: Bool, progress: StepHandler?) throws
    func check() throws
    func commit() throws
    func result() throws -> SnapshotCreate.Result
    /// Removes what an unfinished snapshot wrote.
    func abandon()
}

import Foundation
