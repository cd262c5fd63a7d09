import CLibArchive
import CZstd
import Foundation

/// How a copy is checked before it counts.
public enum VerifyLevel: String, Sendable, Codable, CaseIterable {
    /// `PRAGMA quick_check`: every page and b-tree, without cross-checking indexes (the default).
    case quick
    /// `PRAGMA integrity_check` and `PRAGMA foreign_key_check`.
    case full
    /// No check (the copy is still hashed).
    case none
}
