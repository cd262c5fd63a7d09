import Foundation

/// One progress report of a long step: how far, out of how much, since when.
public struct ProgressUpdate: Sendable {
    public enum Unit: String, Sendable { case pages, bytes, rows, files, statements }
    public var phase: String
    public var done: UInt64
    public var total: UInt64?
    public var unit: Unit
    /// Bytes moved so far, for the rate (pages x page size for a copy).
    public var bytes: UInt64
    public var startedAt: Date

    public init(phase: String, done: UInt64, total: UInt64?, unit: Unit, bytes: UInt64, startedAt: Date) {
        self.phase = phase
        self.done = done
        self.total = total
        self.unit = unit
        self.bytes = bytes
        self.startedAt = startedAt
    }

    public var fraction: Double? {
        guard let total, total > 0 else { return nil }
        return min(1, Double(done) / Double(total))
    }
}

/// Where a long step reports how far it is (a part of `ProgressHandler`).
public typealias StepHandler = (ProgressUpdate) -> Void

/// A callback the library calls with progress; the CLI draws it on a terminal, tests ignore it.
public typealias ProgressHandler = (ProgressEvent) -> Void
