import Foundation

/// The jobs `storectl run` knows.
public enum ScheduledJob: String, Sendable, Codable, CaseIterable {
    /// A snapshot into the policy's repository.
    case snapshot
    /// The policy's purge.
    case purge
    /// A snapshot, then pruning the repository by the policy's retention, then the purge.
    case maintain
}

/// What runs a scheduled job: its environment differs (`PasswordSource.environment(of:)`).
public enum Scheduler: String, Sendable, Codable {
    case cron, systemd
}
