import ArgumentParser
import CStoreSupport
import Foundation
import Logging
import StoreOps

@main
struct Storectl: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "storectl",
        abstract: "Keep SQLite and Core Data stores safe in production: backups, preflight checks, snapshots, migrations, purges.",
        discussion: reflow("""
            Every operation either completes and is verified, or leaves the store exactly as it was.

            EXIT STATUS
            \(ExitStatus.documented.map { "  \(String($0.0.rawValue).rightPadded(to: 4)) \($0.1)" }.joined(separator: "\n"))

            Set STORECTL_LOG_LEVEL=debug for a trace on stderr.
            """),
        version: StoreOpsVersion.report,
        subcommands: [BackupCommand.self, PreflightCommand.self, SnapshotCommand.self, RepoCommand.self, KeyCommand.self, PolicyCommand.self, PurgeCommand.self,
                      KillswitchCommand.self, RunCommand.self, ScheduleCommand.self, MigrateCommand.self, RollbackCommand.self,
                      RecoverCommand.self, ReplicateCommand.self, DiffCommand.self])

    static func main() {
        // Two malloc arenas, not eight per core: the snapshot workers allocate pages on several
        // threads, and glibc's per-thread arenas held ~20 MiB more at peak on a 1 GiB store.
        // Blocks of 1 MiB and more (packs, maps) are mmapped and given back when freed: glibc's
        // sliding threshold otherwise keeps them in the arenas, 9 MiB more at peak (measured on
        // the bench store). Frames of new pages (1 MiB) are mmapped too: about 250 a GiB.
        storectl_tune_malloc(2, 1 << 20)
        ProcessSignals.install()
        Notices.install {
            TerminalProgress.clearForText()
            FileHandle.standardError.write(Data("storectl: warning: \($0)\n".utf8))
        }
        if CommandLine.arguments.contains("--json") {
            // Even a crash (a bug) leaves a JSON error on stdout for the machine reading it.
            storectl_install_crash_report()
            FaultInjection.crashIfAsked()
        }
        LoggingSystem.bootstrap { label in
            var handler = StderrLogHandler(label: label)
            handler.logLevel = ProcessInfo.processInfo.environment["STORECTL_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .warning
            return handler
        }
        var command: (any ParsableCommand)?
        do {
            try checkArgumentsAreUTF8()
            var parsed = try parseWithTypos()
            command = parsed
            let kind = type(of: parsed)
            if !kind.configuration.subcommands.isEmpty, kind.configuration.defaultSubcommand == nil {
                // `storectl` or `storectl snapshot` alone: what to run is missing, which is a usage
                // error (64) for a script, not a success; the help goes to stderr with it.
                let names = kind.configuration.subcommands.map { $0._commandName }.joined(separator: ", ")
                FileHandle.standardError.write(Data((helpMessage(for: kind) + "\nstorectl: name a subcommand (\(names))\n").utf8))
                Foundation.exit(ExitStatus.usage.rawValue)
            }
            try parsed.run()
            let status = finishOutput(0)
            if status != 0 { Foundation.exit(status) }
        } catch {
            exit(with: error, json: (command as? JSONOutput)?.json ?? CommandLine.arguments.contains("--json"), command: command)
        }
    }

    /// `parseAsRoot`, except that a mistyped option is named as such. ArgumentParser runs a
    /// command's `validate()` before it reports an unknown option or an extra argument, so
    /// `restore --at -1m --stor A.sqlite --to x` (a typo of --store, its value then taken as the
    /// snapshot id) was reported as "pass a snapshot id or --at TIME (not both)", the typo never
    /// named (found by a helper trying storectl as a new user). A validation failure is parsed
    /// again with the commands' checks off: an unknown option or unexpected argument found then
    /// is what is reported; otherwise the validation's own message.
    static func parseWithTypos() throws -> any ParsableCommand {
        try checkSubcommandNames(Array(CommandLine.arguments.dropFirst()))
        do {
            return try parseAsRoot()
        } catch let first where exitCode(for: first) == .validationFailure {
            ValidationGate.off = true
            defer { ValidationGate.off = false }
            do { _ = try parseAsRoot() } catch let typo where exitCode(for: typo) == .validationFailure {
                // A required option mistyped fails decoding ("missing expected argument
                // '--policy <policy>'") before ArgumentParser looks for unknown options: looked
                // for here (`purge --polcy FILE`, found by a helper).
                if let unknown = unknownOption(Array(CommandLine.arguments.dropFirst())) { throw unknown }
                throw typo
            } catch {}
            throw first
        }
    }

    /// The first `--name` the command named by `arguments` does not know (its help lists every
    /// option it takes), as ArgumentParser says it, with the nearest known one; nil when none.
    static func unknownOption(_ arguments: [String]) -> StoreOpsError? {
        var command: any ParsableCommand.Type = Storectl.self
        var words = arguments[...]
        while let word = words.first, !word.hasPrefix("-") {
            guard let next = subcommand(word, of: command) else { break }
            command = next
            words = words.dropFirst()
        }
        if let fallback = command.configuration.defaultSubcommand { command = fallback }
        // Hidden options too (`repo init --format`): a usage error beside one named it "unknown" (found by a reviewing helper).
        let help = helpMessage(for: command, includeHidden: true, columns: 10_000)
        guard let pattern = try? Regex("--[a-z0-9][a-z0-9-]*") else { return nil }
        var known = Set(help.matches(of: pattern).map { String(help[$0.range]) })
        known.formUnion(["--help", "--version", "--generate-completion-script", "--experimental-dump-help"])
        for word in words {
            if word == "--" { break }
            guard word.hasPrefix("--"), word.count > 2 else { continue }
            let name = String(word.split(separator: "=", maxSplits: 1).first ?? "")
            guard !known.contains(name) else { continue }
            var nearest: (name: String, distance: Int)?
            for option in known.sorted() {
                let distance = RepositoryLocation.editDistance(option, name)
                if distance < (nearest?.distance ?? Int.max) { nearest = (option, distance) }
            }
            var message = "unknown option '\(name)'"
            if let nearest, nearOption(name, nearest.name) { message += ". Did you mean '\(nearest.name)'?" }
            let usage = usageString(for: command)
            return StoreOpsError(.usage, message + "\n  usage: \(usage)", hint: "see `\(commandName(ofUsage: usage)) --help`")
        }
        return nil
    }

    /// Whether `known` is near enough to the unknown option `typed` to be what was meant: at most
    /// a third of the name's letters edited (at least one): `--polcy`, `--stor`, `--migration`
    /// yes, `--quiet` for `--wait` no.
    static func nearOption(_ typed: String, _ known: String) -> Bool {
        RepositoryLocation.editDistance(known, typed) <= max(1, (typed.count - 2) / 3)
    }

    /// The subcommand of `command` that `word` names (its name or an alias).
    static func subcommand(_ word: String, of command: any ParsableCommand.Type) -> (any ParsableCommand.Type)? {
        command.configuration.subcommands.first { $0._commandName == word || $0.configuration.aliases.contains(word) }
    }

    /// The command a usage line is for: its words before the first argument or option.
    static func commandName(ofUsage usage: String) -> String {
        usage.split(separator: " ").prefix { word in !word.hasPrefix("<") && !word.hasPrefix("[") && !word.hasPrefix("-") }.joined(separator: " ")
    }

    /// A mistyped subcommand, named as one. ArgumentParser said `unexpected argument 'lst'` for
    /// `storectl snapshot lst`, and `unknown option '--repo'` when options followed, blaming a
    /// right word; `storectl replicate stats --repo R` (follow is replicate's default) went on to
    /// follow a store named "stats" and ended 66 "no such file". Walks the subcommands named
    /// first: a word that names none where one is needed, or (under a default subcommand) a word
    /// with no "/" that is no file and is a letter or two from a subcommand's name, is a usage
    /// error (64) naming the closest subcommand.
    static func checkSubcommandNames(_ arguments: [String]) throws {
        var command: any ParsableCommand.Type = Storectl.self
        var path = ["storectl"]
        for word in arguments {
            let subcommands = command.configuration.subcommands
            guard !word.hasPrefix("-"), word != "help", !subcommands.isEmpty else { return }
            if let next = subcommand(word, of: command) {
                command = next
                path.append(word)
                continue
            }
            let names = subcommands.map { $0._commandName }
            let closest = names.map { ($0, RepositoryLocation.editDistance($0, word)) }.min { $0.1 < $1.1 }
            let near = closest.flatMap { $0.1 <= 2 && word.count >= 3 ? $0.0 : nil }
            if command.configuration.defaultSubcommand != nil {
                // Most likely the default subcommand's argument (a store's path): only a near miss
                // that names no file is taken for a mistyped subcommand.
                guard let near, !word.contains("/"), FileSystem.kind(of: word) == .missing else { return }
                throw StoreOpsError(.usage, "'\(word)' is neither a file nor a subcommand of `\(path.joined(separator: " "))`: did you mean `\(path.joined(separator: " ")) \(near)`?",
                                    hint: "see `\(path.joined(separator: " ")) --help`")
            }
            throw StoreOpsError(.usage, "`\(path.joined(separator: " "))` has no subcommand '\(word)'" + (near.map { ": did you mean `\(path.joined(separator: " ")) \($0)`?" } ?? " (it has \(names.joined(separator: ", ")))"),
                                hint: "see `\(path.joined(separator: " ")) --help`")
        }
    }

    /// Linux file names may be any bytes; Swift's command-line strings replace invalid UTF-8, which
    /// would name another file ("no such file" for one that exists). Such an argument is refused,
    /// naming it, rather than misread.
    static func checkArgumentsAreUTF8() throws {
        for index in 1..<Int(CommandLine.argc) {
            guard let raw = CommandLine.unsafeArgv[index] else { continue }
            let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(raw).assumingMemoryBound(to: UInt8.self), count: strlen(raw))
            guard let offset = Validate.firstInvalidUTF8(bytes) else { continue }
            let shown = bytes.map { $0 < 0x80 && $0 >= 0x20 ? String(UnicodeScalar($0)) : String(format: "\\x%02x", $0) }.joined()
            throw StoreOpsError(.usage, "argument \(index) is not valid UTF-8 (byte \(offset)): \(shown)",
                                hint: "storectl needs UTF-8 paths: rename the file, or pass a symbolic link with a UTF-8 name")
        }
    }

    /// The one place errors become exit statuses and messages.
    static func exit(with error: any Error, json: Bool, command: (any ParsableCommand)? = nil) -> Never {
        TerminalProgress.clearForText()
        // A report was printed; the library's ending decided the status.
        if let finished = error as? Finished { Foundation.exit(finishOutput(finished.status.rawValue)) }
        guard var failure = StoreOpsError.wrapping(error) ?? argumentError(error, command: command) else {
            // --help, --version (0) and explicit ExitCode results.
            Storectl.exit(withError: error)
        }
        // A usage error the library found in a value (`--keep-within 3x`, `--level 25`) is said as
        // ArgumentParser's are: the command's usage line and its --help.
        if failure.status == .usage, !failure.refusal, !failure.message.contains("\n  usage: "), let command {
            let usage = usageString(for: type(of: command))
            failure.message += "\n  usage: \(usage)"
            failure.hint = failure.hint ?? "see `\(commandName(ofUsage: usage)) --help`"
        }
        if json {
            // The usage line goes in a field of its own: `message` says what was wrong, alone.
            let parts = failure.message.components(separatedBy: "\n  usage: ")
            print(jsonReport(ErrorReport(status: failure.status.rawValue, message: parts[0], hint: failure.hint,
                                         usage: parts.count > 1 ? parts.dropFirst().joined(separator: "\n  usage: ") : nil)))
        }
        FileHandle.standardError.write(Data("storectl: \(failure)\n".utf8))
        Foundation.exit(finishOutput(failure.status.rawValue))
    }

    /// Output that could not be written (stdout on a full disk, `/dev/full`) is an I/O error
    /// (74), said on stderr: a report or `--json` lost must not end as a silent 0 (same) or 2
    /// (different). A failure's own status (65, 75, a rollback's 3 or 4) is kept: it says more.
    static func finishOutput(_ status: Int32) -> Int32 {
        let failed = storectl_finish_stdout()
        guard failed != 0 else { return status }
        let why = String(cString: strerror(failed))
        FileHandle.standardError.write(Data("storectl: cannot write the output to stdout: \(why)\n  hint: check where stdout goes (a full disk, a file it cannot grow)\n".utf8))
        return status == 0 || status == ExitStatus.checksFailed.rawValue ? ExitStatus.ioError.rawValue : status
    }
}

extension Storectl {
    /// A command-line error from ArgumentParser in storectl's own style (`storectl: what`, then the
    /// usage and a hint naming the command's --help), exit 64; nil for --help, --version and
    /// ExitCode results, which ArgumentParser prints itself.
    static func argumentError(_ error: any Error, command: (any ParsableCommand)?) -> StoreOpsError? {
        guard exitCode(for: error) == .validationFailure else { return nil }
        var message = Storectl.message(for: error).trimmingCharacters(in: .whitespacesAndNewlines)
        if message.hasPrefix("Error: ") { message.removeFirst("Error: ".count) }
        if let first = message.first, first.isUppercase, message.dropFirst().first?.isLowercase == true {
            message = first.lowercased() + message.dropFirst()
        }
        // ArgumentParser offers the nearest option however far it is (`--quiet`: "did you mean
        // '--wait'?"): kept only when it is near (`nearOption`).
        if let match = message.firstMatch(of: /unknown option '(--[^']+)'\. Did you mean '(--[^']+)'\?/), !nearOption(String(match.1), String(match.2)) {
            message.replaceSubrange(match.range, with: "unknown option '\(match.1)'")
        }
        // `--keep-points -1h`: the value that follows looks like an option, so ArgumentParser says
        // the value is missing; say what it read and how to pass it.
        if let match = message.firstMatch(of: /missing value for '(--[^ ']+)/) {
            let arguments = CommandLine.arguments
            if let at = arguments.firstIndex(of: String(match.1)), at + 1 < arguments.count {
                let next = arguments[at + 1]
                if next.count > 1, next.hasPrefix("-"), next.dropFirst().first?.isNumber == true {
                    message += " ('\(next)' after it reads as an option; `\(match.1)=\(next)` passes it as the value)"
                }
            }
        }
        // The usage of the command that was parsed (a ValidationError from its run), else the one
        // ArgumentParser names in its own message (a parse error).
        let usage = command.map { usageString(for: type(of: $0)) }
            ?? fullMessage(for: error).components(separatedBy: "\n").first { $0.hasPrefix("Usage: ") }.map { String($0.dropFirst("Usage: ".count)) }
        let name = usage.map(commandName(ofUsage:)) ?? "storectl"
        if let usage { message += "\n  usage: \(usage)" }
        return StoreOpsError(.usage, message, hint: "see `\(name) --help`")
    }
}

/// Off while `parseWithTypos` looks for a mistyped option behind a validation failure: every
/// command's `validate()` returns at once then. Only the main thread parses, before anything runs.
enum ValidationGate {
    nonisolated(unsafe) static var off = false
}

/// Commands with a `--json` flag: errors are then also reported as JSON on stdout.
protocol JSONOutput {
    var json: Bool { get }
}

struct ErrorReport: Encodable {
    var ok = false
    var status: Int32
    var message: String
    var hint: String?
    /// A usage error's usage line (64), apart from `message`.
    var usage: String?
    var s3 = S3Traffic.sinceStart()
}


extension VerifyLevel: ExpressibleByArgument {}
extension Preflight.Operation: ExpressibleByArgument {}

/// A report that ends in a failure carries it in the same document: `ok` false, and the failure's
/// `status`, `message` and `hint` beside the report's own fields (`ok` true when none).
func jsonReport(_ value: some Encodable, failure: StoreOpsError?, pretty: Bool = true) -> String {
    guard case .object(var fields) = JSONValue.encoding(value) else { return jsonReport(value) }
    fields["ok"] = .bool(failure == nil)
    if let failure {
        fields["status"] = .int(failure.status.rawValue)
        fields["message"] = .string(failure.message)
        fields["hint"] = .text(failure.hint)
    }
    return jsonReport(JSONValue.object(fields), pretty: pretty)
}

/// A command's result as JSON, with what the run asked of S3 (`s3`: requests by kind, retries,
/// bytes sent and received) when it reached a bucket.
func jsonReport(_ value: some Encodable, pretty: Bool = true) -> String {
    guard let traffic = S3Traffic.sinceStart(), case .object(var fields) = JSONValue.encoding(value) else { return JSON.string(value, pretty: pretty) }
    fields["s3"] = JSONValue.encoding(traffic)
    return JSON.string(JSONValue.object(fields), pretty: pretty)
}
