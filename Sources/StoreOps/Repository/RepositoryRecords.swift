import Foundation

/// When a snapshot was last verified, and what was found (`verified/<id>` in a repository).
public struct VerificationRecord: Sendable, Codable, Equatable {
    public var at: Date
    public var ok: Bool
    public var level: VerifyLevel
    public var problem: String?
}

/// A snapshot record that cannot be read: listed as damaged, never removed by prune.
public struct DamagedEntry: Sendable, Codable, Equatable {
    /// The id its name gives.
    public var id: String
    /// The object key or file it was read from.
    public var file: String
    public var problem: String
}
