import Foundation

/// One progress report of a long step: how far, out of how much, since when.
public struct ProgressUpdate: Sendable {
    public enum Unit: String, Sendable { case pages, bytes, rows, files }
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

/// A callback the library calls with progress; the CLI draws it on a terminal, tests ignore it.
public typealias ProgressHandler = (ProgressUpdate) -> Void

/// Draws progress on one line of a terminal's stderr, at most ten times a second.
///
/// `storectl` uses it only when stderr is a terminal, so cron mail and pipes stay clean.
public final class TerminalProgress {
    private var lastDraw = Date.distantPast
    private var drawn = false
    private let interval: TimeInterval = 0.1

    public init() {}

    /// True when stderr is a terminal.
    public static var isAvailable: Bool { isatty(STDERR_FILENO) == 1 }

    public func update(_ update: ProgressUpdate) {
        let now = Date()
        let finished = update.total.map { update.done >= $0 } ?? false
        guard finished || now.timeIntervalSince(lastDraw) >= interval else { return }
        lastDraw = now
        let elapsed = max(now.timeIntervalSince(update.startedAt), 0.001)
        var line = "\(update.phase)"
        if let fraction = update.fraction { line += String(format: " %5.1f%%", fraction * 100) }
        line += "  \(Format.count(update.done))"
        if let total = update.total { line += "/\(Format.count(total))" }
        line += " \(update.unit.rawValue)"
        if update.bytes > 0 {
            line += "  \(Format.bytes(UInt64(Double(update.bytes) / elapsed)))/s"
        } else if update.done > 0 {
            line += "  \(Format.count(Int(Double(update.done) / elapsed))) \(update.unit.rawValue)/s"
        }
        if let fraction = update.fraction, fraction > 0, fraction < 1 {
            let eta = elapsed * (1 - fraction) / fraction
            line += "  ETA \(Format.duration(eta))"
        }
        FileHandle.standardError.write(Data(("\r\u{1B}[2K" + line).utf8))
        drawn = true
    }

    /// Clears the progress line.
    public func finish() {
        guard drawn else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[2K".utf8))
        drawn = false
    }
}
