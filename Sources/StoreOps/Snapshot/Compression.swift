import Foundation

/// How a snapshot archive is compressed.
public enum Compression: String, Sendable, Codable, CaseIterable {
    case zstd, gzip, xz, none

    /// The archive file's extension.
    public var fileExtension: String {
        switch self {
        case .zstd: "tar.zst"
        case .gzip: "tar.gz"
        case .xz: "tar.xz"
        case .none: "tar"
        }
    }

    public var defaultLevel: Int? {
        switch self {
        case .zstd: 3
        case .gzip: 6
        case .xz: 6
        case .none: nil
        }
    }

    public var levels: ClosedRange<Int>? {
        switch self {
        case .zstd: 1...19
        case .gzip: 1...9
        case .xz: 0...9
        case .none: nil
        }
    }

    /// Checks `level` for this compression (exit 64 when out of range).
    public func validatedLevel(_ level: Int?) throws -> Int? {
        guard let level else { return defaultLevel }
        guard let levels else {
            throw StoreOpsError(.usage, "--level does not apply to --compression none")
        }
        guard levels.contains(level) else {
            throw StoreOpsError(.usage, "--level \(level) is out of range for \(rawValue) (\(levels.lowerBound)...\(levels.upperBound))")
        }
        return level
    }
}
