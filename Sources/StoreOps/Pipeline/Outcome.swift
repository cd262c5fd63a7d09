import Foundation

/// How an operation ended: one value for every command (backup, snapshot, restore, migrate,
/// rollback, purge, the scheduled jobs).
public enum Outcome: String, Sendable, Codable, CaseIterable {
    /// Completed and verified.
    case ok
    /// Its checks found problems before anything changed (preflight, verification).
    case checksFailed = "checks failed"
    /// Stopped by the kill switch or a signal at a safe point.
    case stopped
    /// Another job held the store's lock: nothing was done (a scheduled run tries again next time).
    case skipped
    /// A rule refused to go on: a circuit breaker, deny rules keeping rows.
    case refused
    /// It failed or was stopped, and the store was put back as it was.
    case rolledBack = "rolled back"
    /// The store could not be put back: it needs a person.
    case rollbackFailed = "rollback failed"
    /// It failed (the error says why, and has its status).
    case failed
}

