import Foundation
import StoreLab
import StoreOps
import Testing

/// `--help` reads well in a pipe (80 columns) and argument errors look like storectl's own.
@Suite("help and argument errors", .onTestThreads)
struct HelpTests {
    /// Every command path, from the SUBCOMMANDS sections of the help screens.
    static func commandPaths() throws -> [[String]] {
        var paths: [[String]] = [[]], queue: [[String]] = [[]]
        while let path = queue.popLast() {
            let help = try ChildProcess.run(Binaries.storectl, path + ["--help"])
            guard let section = help.stdout.components(separatedBy: "SUBCOMMANDS:\n").dropFirst().first else { continue }
            for line in section.components(separatedBy: "\n") {
                // "  name    abstract": a subcommand starts two spaces in; wrapped abstracts are deeper.
                guard line.hasPrefix("  "), !line.hasPrefix("   "), let name = line.split(separator: " ").first, name != "See" else { continue }
                let child = path + [String(name)]
                paths.append(child)
                queue.append(child)
            }
        }
        return paths
    }

    @Test("every --help: no line over 80 columns but the usage line, and no paragraph broken twice")
    func helpFitsAndFlows() throws {
        let paths = try Self.commandPaths()
        #expect(paths.count >= 30, "\(paths)")
        for path in paths {
            let help = try ChildProcess.run(Binaries.storectl, path + ["--help"])
            #expect(help.status == 0)
            let lines = help.stdout.components(separatedBy: "\n")
            for line in lines where !line.hasPrefix("USAGE:") && line.count > 80 {
                Issue.record("storectl \(path.joined(separator: " ")) --help: a line of \(line.count) columns: \(line)")
            }
            let prose = lines.prefix { !$0.hasPrefix("USAGE:") }
            for (line, next) in zip(prose, prose.dropFirst()) where !line.isEmpty && !line.hasPrefix(" ") && line.count < 50
                && next.first?.isLowercase == true {
                Issue.record("storectl \(path.joined(separator: " ")) --help: ragged: \"\(line)\" then \"\(next)\"")
            }
        }
    }

    @Test("an argument error reads like storectl's own: what, the usage, a hint; exit 64; JSON with --json")
    func argumentErrors() throws {
        let missing = try storectl("purge")
        #expect(missing.status == 64)
        #expect(missing.stderr == """
            storectl: missing expected argument '--policy <policy>'
              usage: storectl purge --policy <policy> [--dry-run] [--kill-switch <kill-switch>] [--password-file <file>] [--json]
              hint: see `storectl purge --help`

            """, "\(missing.stderr)")
        let validation = try storectl("snapshot", "restore", "--repo", "r", "x")
        #expect(validation.status == 64 && validation.stderr.hasPrefix("storectl: pass exactly one of --to PATH or --in-place STORE\n  usage: storectl snapshot restore ")
                && validation.stderr.contains("hint: see `storectl snapshot restore --help`"), "\(validation.stderr)")
        let json = try storectl("purge", "--json")
        #expect(json.status == 64 && json.stdout.contains("\"status\" : 64") && json.stdout.contains("missing expected argument"), "\(json.stdout)")
        // The usage line in a field of its own, not in the message.
        let fields = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        #expect((fields?["message"] as? String) == "missing expected argument '--policy <policy>'"
                && (fields?["usage"] as? String)?.hasPrefix("storectl purge --policy <policy>") == true, "\(json.stdout)")
        for arguments in [["bogus"], ["backup"], ["run", "snapshot", "--policy", "p", "--jitter", "soon"]] {
            let result = try ChildProcess.run(Binaries.storectl, arguments)
            #expect(result.status == 64 && result.stderr.hasPrefix("storectl: ") && !result.stderr.contains("Error:"), "\(arguments): \(result.stderr)")
        }
        #expect(try storectl("--help").status == 0 && (try storectl("--version")).stdout.hasPrefix("storectl "))
    }

    /// The synopsis blocks of the README: the first plain ``` block after each heading that names a
    /// `storectl` command, one logical line per command (continuations are indented).
    static func synopses() throws -> [(line: String, path: [String])] {
        let readme = try String(contentsOfFile: (ReadmeTranscriptTests.packageRoot as NSString).appendingPathComponent("README.md"), encoding: .utf8)
        let lines = readme.components(separatedBy: "\n")
        var result: [String] = []
        var index = 0
        while index < lines.count {
            defer { index += 1 }
            guard lines[index].hasPrefix("## "), lines[index].contains("`storectl") else { continue }
            var fence = index + 1
            while fence < lines.count, !lines[fence].hasPrefix("```"), !lines[fence].hasPrefix("## ") { fence += 1 }
            guard fence < lines.count, lines[fence] == "```" else { continue }
            var body = fence + 1
            while body < lines.count, lines[body] != "```" {
                if lines[body].hasPrefix("storectl ") { result.append(lines[body]) }
                else if lines[body].hasPrefix(" "), !result.isEmpty { result[result.count - 1] += " " + lines[body].trimmingCharacters(in: .whitespaces) }
                body += 1
            }
        }
        let known = Set(try commandPaths())
        return result.map { line in
            var path: [String] = []
            for word in line.split(separator: " ").dropFirst() {
                let name = word.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
                guard known.contains(path + [name]) else { break }
                path.append(name)
            }
            return (line, path)
        }
    }

    static let optionPattern = try! NSRegularExpression(pattern: #"--[a-z][a-z0-9-]*"#)

    static func options(_ text: String) -> Set<String> {
        Set(optionPattern.matches(in: text, range: NSRange(text.startIndex..., in: text)).compactMap { Range($0.range, in: text).map { String(text[$0]) } })
    }

    @Test("the README's synopses name exactly the options each command's --help lists")
    func synopsesMatchHelp() throws {
        let synopses = try Self.synopses()
        #expect(synopses.count >= 25, "\(synopses.map(\.line))")
        for (line, path) in synopses {
            guard !path.isEmpty else { Issue.record("README synopsis names no command: \(line)"); continue }
            let help = try ChildProcess.run(Binaries.storectl, path + ["--help"]).stdout
            let optionLines = help.components(separatedBy: "OPTIONS:").dropFirst().joined().components(separatedBy: "\n").filter { $0.hasPrefix("  -") }
            let offered = Self.options(optionLines.joined(separator: "\n")).subtracting(["--help", "--version"])
            let shown = Self.options(line)
            for missing in offered.subtracting(shown).sorted() { Issue.record("README synopsis of storectl \(path.joined(separator: " ")) lacks \(missing): \(line)") }
            for stale in shown.subtracting(offered).sorted() { Issue.record("README synopsis of storectl \(path.joined(separator: " ")) shows \(stale), which --help does not list: \(line)") }
        }
    }
}
