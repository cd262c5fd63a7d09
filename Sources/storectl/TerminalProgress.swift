import Foundation
import StoreOps

/// Draws an operation's progress on stderr when stderr is a terminal (never in cron mail or a
/// pipe): a step's progress on one line, at most ten times a second, and the lines worth telling.
final class TerminalProgress {
    private var lastDraw = Date.distantPast
    private var drawn = false
    private let interval: TimeInterval = 0.1

    /// True when stderr is a terminal.
    static var isAvailable: Bool { isatty(STDERR_FILENO) == 1 }

    /// A handler for the library, or nil when stderr is not a terminal (or `quiet`, with --json).
    static func handler(quiet: Bool = false) -> (TerminalProgress, ProgressHandler)? {
        guard isAvailable, !quiet else { return nil }
        let progress = TerminalProgress()
        return (progress, { progress.handle($0) })
    }

    /// The same for a library call that reports one step's progress.
    static func stepHandler(quiet: Bool = false) -> (TerminalProgress, StepHandler)? {
        guard isAvailable, !quiet else { return nil }
        let progress = TerminalProgress()
        return (progress, { progress.draw($0) })
    }

    func handle(_ event: ProgressEvent) {
        switch event {
        case .stage: break
        case .note(let line):
            finish()
            FileHandle.standardError.write(Data("  \(line)\n".utf8))
        case .step(let update): draw(update)
        }
    }

    func draw(_ update: ProgressUpdate) {
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
            line += "  ETA \(Format.duration(elapsed * (1 - fraction) / fraction))"
        }
        FileHandle.standardError.write(Data(("\r\u{1B}[2K" + line).utf8))
        drawn = true
    }

    /// Clears the progress line.
    func finish() {
        guard drawn else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[2K".utf8))
        drawn = false
    }
}
