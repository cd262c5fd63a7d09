import Foundation
import StoreOps

/// Draws an operation's progress on stderr when stderr is a terminal (never in cron mail, a pipe
/// or a file): one line, rewritten in place, that says which stage runs and how far its step is
/// (count, percent, rate, ETA), with the time the stage has taken, so a stage that reports nothing
/// itself (an integrity check, a migration's statement) still visibly runs. The line is cleared
/// before anything else is printed; nothing of it stays on the screen.
///
/// `STORECTL_PROGRESS=always` draws it when stderr is not a terminal (for a terminal recorder, or
/// a test), `never` never does.
final class TerminalProgress: @unchecked Sendable {
    private let lock = NSLock()
    private var lastDraw = Date.distantPast
    private var drawn = false
    private var stage: String?
    private var stageStarted = Date()
    private var step: ProgressUpdate?
    private var timer: DispatchSourceTimer?
    private let interval: TimeInterval = 0.1
    private let title: String

    /// The line being drawn, if any: cleared before an error or a warning is printed.
    nonisolated(unsafe) static weak var current: TerminalProgress?

    /// Clears the progress line, if one is drawn, before other text goes to stderr.
    static func clearForText() { current?.finish() }

    init(title: String) {
        self.title = title
        let timer = DispatchSource.makeTimerSource(queue: .global(qos: .utility))
        timer.schedule(deadline: .now() + 0.5, repeating: 0.5)
        timer.setEventHandler { [weak self] in self?.tick() }
        timer.resume()
        self.timer = timer
        Self.current = self
    }

    deinit { timer?.cancel() }

    /// True when stderr is a terminal, or `STORECTL_PROGRESS=always`.
    static var isAvailable: Bool {
        switch ProcessInfo.processInfo.environment["STORECTL_PROGRESS"] {
        case "always": return true
        case "never": return false
        default: return isatty(STDERR_FILENO) == 1
        }
    }

    /// A handler for the library, or nil when stderr is not a terminal (or `quiet`, with --json).
    static func handler(_ title: String, quiet: Bool = false) -> (TerminalProgress, ProgressHandler)? {
        guard isAvailable, !quiet else { return nil }
        let progress = TerminalProgress(title: title)
        return (progress, { progress.handle($0) })
    }

    /// The same for a library call that reports one step's progress.
    static func stepHandler(_ title: String, quiet: Bool = false) -> (TerminalProgress, StepHandler)? {
        guard isAvailable, !quiet else { return nil }
        let progress = TerminalProgress(title: title)
        return (progress, { progress.handle(.step($0)) })
    }

    func handle(_ event: ProgressEvent) {
        lock.lock()
        defer { lock.unlock() }
        switch event {
        case .stage(let name):
            stage = name
            stageStarted = Date()
            step = nil
            draw(force: true)
        case .note(let line):
            // A line worth telling (a migration applied) is shown as the current state; the
            // command's own report lists it afterwards, so nothing is printed twice.
            stage = line
            stageStarted = Date()
            step = nil
            draw(force: true)
        case .step(let update):
            step = update
            // The last update of a step, and a migration's statements (a few, each possibly long), always show.
            let finished = update.total.map { update.done >= $0 } ?? false
            draw(force: finished || update.unit == .statements)
        }
    }

    private func tick() {
        lock.lock()
        defer { lock.unlock() }
        guard timer != nil, Date().timeIntervalSince(lastDraw) >= 0.45 else { return }
        draw(force: true)
    }

    /// The line as it stands (for tests of the wording, through `STORECTL_PROGRESS=always`).
    func line(now: Date = Date()) -> String {
        var parts = [title]
        if let stage { parts.append(stage) }
        if let update = step {
            let elapsed = max(now.timeIntervalSince(update.startedAt), 0.001)
            var text = stage.map { $0.hasSuffix(update.phase) } == true ? "" : update.phase
            if let fraction = update.fraction { text += String(format: " %5.1f%%", fraction * 100) }
            if update.unit == .bytes {
                text += "  \(Format.bytes(update.done))" + (update.total.map { " of \(Format.bytes($0))" } ?? "")
            } else {
                text += "  \(Format.count(update.done))"
                if let total = update.total { text += "/\(Format.count(total))" }
                text += " \(update.unit.rawValue)"
            }
            if update.bytes > 0 {
                text += "  \(Format.bytes(UInt64(Double(update.bytes) / elapsed)))/s"
            } else if update.done > 0, update.unit != .statements {
                text += "  \(Format.count(Int(Double(update.done) / elapsed))) \(update.unit.rawValue)/s"
            }
            if let fraction = update.fraction, fraction > 0.01, fraction < 1, elapsed > 1 {
                text += "  ETA \(Format.duration(elapsed * (1 - fraction) / fraction))"
            }
            parts.append(text.trimmingCharacters(in: .whitespaces))
        }
        let seconds = Int(now.timeIntervalSince(stageStarted))
        if seconds >= 1 { parts.append("\(seconds)s") }
        return parts.joined(separator: "  ")
    }

    private func draw(force: Bool) {
        let now = Date()
        guard force || now.timeIntervalSince(lastDraw) >= interval else { return }
        lastDraw = now
        var text = line(now: now)
        // Never wider than the terminal: a wrapped line cannot be rewritten in place.
        var size = winsize()
        if ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 10, text.count >= Int(size.ws_col) {
            text = String(text.prefix(Int(size.ws_col) - 2)) + "…"
        }
        FileHandle.standardError.write(Data(("\r\u{1B}[2K" + text).utf8))
        drawn = true
    }

    /// A line of the command's report printed now (stdout), above the progress line, which is
    /// drawn again below it.
    func interject(_ text: String) {
        lock.lock()
        defer { lock.unlock() }
        if drawn { FileHandle.standardError.write(Data("\r\u{1B}[2K".utf8)) }
        print(text)
        fflush(nil)   // every stream: stdout is not reachable from here under strict concurrency
        if drawn { draw(force: true) }
    }

    /// Stops drawing and clears the line.
    func finish() {
        lock.lock()
        defer { lock.unlock() }
        timer?.cancel()
        timer = nil
        guard drawn else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[2K".utf8))
        drawn = false
    }
}

/// A help text written across source lines, as one paragraph per blank-line-separated block:
/// ArgumentParser wraps it to the terminal's width (80 columns in a pipe), so it is not broken
/// twice. Lines that start with a space (tables, lists) are kept as they are.
func reflow(_ text: String) -> String {
    var paragraphs: [String] = []
    var current = ""
    // The standard library's splitting, not Foundation's (every command's help is reflowed at
    // each start, to build the command tree: Foundation's bridging cost 1.5 ms of a start). On
    // scalars, as Foundation split ("\r\n" is one Character) and judged blank lines (spaces and tabs).
    for part in text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false) {
        let line = String(Substring(part))
        if part.allSatisfy({ $0 == "\t" || $0.properties.generalCategory == .spaceSeparator }) {
            if !current.isEmpty { paragraphs.append(current); current = "" }
            paragraphs.append("")
        } else if line.hasPrefix(" ") || line.hasPrefix("- ") || line.hasPrefix("* ") || line == line.uppercased() && line.count > 3 {
            if !current.isEmpty { paragraphs.append(current); current = "" }
            paragraphs.append(line)
        } else {
            current += current.isEmpty ? line : " " + line
        }
    }
    if !current.isEmpty { paragraphs.append(current) }
    return paragraphs.joined(separator: "\n")
}
