import Foundation
import StoreLab
import StoreOps
import Testing

/// Every ```console block of README.md and docs/*.md is run, and its output compared with what
/// the block shows (a transcript test, in the style of cram), so an example cannot go stale.
///
/// A block is preceded by an HTML comment (invisible on GitHub) that says how to run it:
///
///     <!-- transcript root=/tmp/rd session=repo needs=s3
///     storectl-lab make-store Tasks.sqlite --items 20000 >/dev/null
///     -->
///
/// - `root`: the folder the example's paths show; the scratch folder's path is replaced by it.
/// - `session`: blocks of one session share their folder, exported variables and functions, in
///   the order they appear (a later block goes on from the state an earlier one left).
/// - `needs=s3`: the shared SeaweedFS server's credentials and endpoint are in the environment.
/// - The lines up to `-->`: a bash script run first in the folder (its output is not compared).
///
/// Each `$ ` line is run by bash in that folder, stdout and stderr together; the lines up to the
/// next `$ ` are what it must print. Compared after normalising both sides: snapshot ids and
/// timestamps, times, hex digests, sizes, durations and other numbers (except exit statuses: a
/// line `exit N`), and runs of spaces (column widths follow the numbers). A `…` in an expected
/// line matches any text; a line that is only `…` matches any number of lines.
@Suite("README examples are true", .onTestThreads)
struct ReadmeTranscriptTests {
    struct Block: CustomStringConvertible {
        var file: String
        var line: Int
        var root: String
        var session: String?
        var needsS3 = false
        var setup: String
        var commands: [(command: String, expected: [String])]
        var description: String { "\(FileSystem.name(of: file)):\(line)" }
    }

    static let packageRoot: String = {
        var url = URL(fileURLWithPath: #filePath)
        while url.path != "/" {
            url.deleteLastPathComponent()
            if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) { return url.path }
        }
        return FileManager.default.currentDirectoryPath
    }()

    static var documents: [String] {
        let docs = (packageRoot as NSString).appendingPathComponent("docs")
        let pages = ((try? FileManager.default.contentsOfDirectory(atPath: docs)) ?? []).filter { $0.hasSuffix(".md") }.sorted()
        return [(packageRoot as NSString).appendingPathComponent("README.md")] + pages.map { (docs as NSString).appendingPathComponent($0) }
    }

    /// The console blocks of a document, and the problems of those without a directive.
    static func blocks(of file: String) throws -> (blocks: [Block], problems: [String]) {
        let lines = try String(contentsOfFile: file, encoding: .utf8).components(separatedBy: "\n")
        var blocks: [Block] = [], problems: [String] = []
        var index = 0
        while index < lines.count {
            guard lines[index].hasPrefix("```console") else { index += 1; continue }
            let start = index
            var body: [String] = []
            index += 1
            while index < lines.count, !lines[index].hasPrefix("```") { body.append(lines[index]); index += 1 }
            index += 1
            // The directive: an HTML comment ending on the line above the block.
            var above = start - 1
            while above >= 0, lines[above].trimmingCharacters(in: .whitespaces).isEmpty { above -= 1 }
            guard above >= 0, lines[above].trimmingCharacters(in: .whitespaces) == "-->" || lines[above].hasSuffix("-->"),
                  let open = (0...above).reversed().first(where: { lines[$0].hasPrefix("<!-- transcript") }) else {
                problems.append("\(FileSystem.name(of: file)):\(start + 1): a console block without a `<!-- transcript … -->` directive above it")
                continue
            }
            var header = lines[open].dropFirst("<!-- transcript".count).trimmingCharacters(in: .whitespaces)
            var setupLines = open < above ? Array(lines[(open + 1)...above]) : []
            if header.hasSuffix("-->") { header = String(header.dropLast(3)); setupLines = [] } else if !setupLines.isEmpty { setupLines.removeLast() }
            var block = Block(file: file, line: start + 1, root: "/tmp/rd", setup: setupLines.joined(separator: "\n"), commands: [])
            for field in header.split(separator: " ") {
                let parts = field.split(separator: "=", maxSplits: 1).map(String.init)
                switch (parts.first, parts.count == 2 ? parts[1] : nil) {
                case ("root", let value?): block.root = value
                case ("session", let value?): block.session = value
                case ("needs", "s3"): block.needsS3 = true
                default: problems.append("\(block): unknown directive field \(field)")
                }
            }
            for line in body {
                if line.hasPrefix("$ ") {
                    block.commands.append((String(line.dropFirst(2)), []))
                } else if !block.commands.isEmpty {
                    block.commands[block.commands.count - 1].expected.append(line)
                } else {
                    problems.append("\(block): output before the first `$ ` command")
                }
            }
            blocks.append(block)
        }
        return (blocks, problems)
    }

    // MARK: - Normalising

    static let rules: [(NSRegularExpression, String)] = [
        (#"\b\d{8}T\d{6}Z(-\d+)?(-[0-9a-f]{6})?\b"#, "<ID>"),
        (#"\b\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?Z?( [A-Z]{3,4})?( UTC)?"#, "<TIME>"),
        (#"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun) <TIME>"#, "<TIME>"),
        // A shortened hash is hex even when its first 12 digits hold no letter (one in 280 does:
        // `sha256 906342212913…` was read as a number).
        (#"\b[0-9a-f]{12,}…"#, "<HEX>"),
        (#"\b(?=[0-9]*[a-f])[0-9a-f]{8,}\b…?"#, "<HEX>"),
        // A key id is 16 hex digits, all of them decimal once in 1,850 (`key 5186290032564768`
        // failed a CI run); no count or size here runs to 16 digits.
        (#"\b[0-9a-f]{16,}\b"#, "<HEX>"),
        (#"[A-Za-z0-9+/]{40,}={0,2}"#, "<B64>"),
        (#"\b\d[\d,]*(\.\d+)? ?(B|KiB|MiB|GiB|TiB)\b"#, "<SIZE>"),
        (#"\b\d+(\.\d+)?(ms|s|m|h)\b"#, "<DUR>"),
        (#"\b\d+(\.\d+)?x\b"#, "<N>x"),
        (#"(?<!exit )(?<![\w<])\d[\d,]*(\.\d+)?(?![\w>])"#, "<N>"),
        (#"[ \t]+"#, " "),
    ].map { (try! NSRegularExpression(pattern: $0.0), $0.1) }

    static func trimmed(_ line: String) -> String { line.trimmingCharacters(in: .whitespaces) }

    static func normalise(_ line: String) -> String {
        var text = line
        for (pattern, replacement) in rules {
            text = pattern.stringByReplacingMatches(in: text, range: NSRange(text.startIndex..., in: text), withTemplate: replacement)
        }
        return text.trimmingCharacters(in: .whitespaces)
    }

    /// Whether `actual` lines match `expected` ones (both normalised; `…` wildcards in expected).
    static func matches(_ expected: [String], _ actual: [String]) -> Bool {
        let patterns: [NSRegularExpression?] = expected.map { line in
            guard line != "…" else { return nil }
            let escaped = NSRegularExpression.escapedPattern(for: line).replacingOccurrences(of: "…", with: ".*")
            return try? NSRegularExpression(pattern: "^" + escaped + "$")
        }
        func lineMatches(_ pattern: NSRegularExpression?, _ text: String) -> Bool {
            guard let pattern else { return true }
            return pattern.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
        }
        // match[i][j]: expected[i...] matches actual[j...].
        var memo: [Int: Bool] = [:]
        func match(_ i: Int, _ j: Int) -> Bool {
            let key = i * (actual.count + 1) + j
            if let known = memo[key] { return known }
            let result: Bool
            if i == expected.count {
                result = j == actual.count
            } else if expected[i] == "…" {
                result = match(i + 1, j) || (j < actual.count && match(i, j + 1))
            } else {
                result = j < actual.count && lineMatches(patterns[i], actual[j]) && match(i + 1, j + 1)
            }
            memo[key] = result
            return result
        }
        return match(0, 0)
    }

    // MARK: - Running

    /// Runs one bash script in `folder` with the session's saved variables and functions, saving
    /// them again afterwards; returns its output lines (stdout and stderr together).
    static func bash(_ body: String, block: Block, in folder: String, environment: [String: String]) throws -> (status: Int32, lines: [String]) {
        let state = (folder as NSString).appendingPathComponent(".transcript-state")
        // `$?` carries over from the previous command (a block may `echo "exit $?"` on its own line).
        let script = "cd \(quote(folder))\n[ -f .transcript-state ] && . ./.transcript-state\n(exit ${TRANSCRIPT_STATUS:-0})\n\(body)\n"
            + "export TRANSCRIPT_STATUS=$?\n{ export -p; declare -f; } > \(quote(state))\nexit $TRANSCRIPT_STATUS\n"
        let path = (folder as NSString).appendingPathComponent(".transcript.sh")
        try Data(script.utf8).write(to: URL(fileURLWithPath: path))
        let result = try ChildProcess.run("/bin/bash", ["--norc", "--noprofile", path], environment: environment, currentDirectory: folder)
        var lines = (result.stdout + result.stderr).components(separatedBy: "\n")
        if lines.last == "" { lines.removeLast() }
        return (result.status, lines.map { line in
            var text = line.replacingOccurrences(of: folder, with: block.root)
            // A process killed with SIGKILL: what an interactive shell prints for it.
            if text.contains(".transcript.sh: line "), text.contains(" Killed ") { return "Killed" }
            // The examples were made on a host called vm, with storectl installed in /usr/local/bin.
            text = text.replacingOccurrences(of: binaries + "/storectl", with: "/usr/local/bin/storectl")
            let host = ProcessInfo.processInfo.hostName
            if !host.isEmpty, host != "vm" {
                for (from, to) in [("@\(host)", "@vm"), (" on \(host),", " on vm,"), ("store \(host):", "store vm:"), (" on \(host))", " on vm)")] {
                    text = text.replacingOccurrences(of: from, with: to)
                }
            }
            return text
        })
    }

    static let binaries = FileSystem.parent(of: FileSystem.absolute(Binaries.storectl))

    static func quote(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }

    /// Ids and digests the example shows, paired with the ones this run printed in the same
    /// places, so a later command that names one (`snapshot export 20261122T202003Z-e91e77`) is
    /// run with the real one.
    static let tokenPattern = try! NSRegularExpression(pattern: #"\b\d{8}T\d{6}Z(-\d+)?-[0-9a-f]{6}\b|\b[0-9a-f]{16}\b"#)

    static func tokens(_ line: String) -> [String] {
        tokenPattern.matches(in: line, range: NSRange(line.startIndex..., in: line)).compactMap { Range($0.range, in: line).map { String(line[$0]) } }
    }

    static func learnTokens(expected: [String], actual: [String], into known: inout [String: String]) {
        var from = 0
        for line in expected where line != "…" && !tokens(line).isEmpty {
            guard let pattern = try? NSRegularExpression(pattern: "^" + NSRegularExpression.escapedPattern(for: normalise(line)).replacingOccurrences(of: "…", with: ".*") + "$") else { continue }
            guard let found = actual[from...].firstIndex(where: { let text = normalise($0); return pattern.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil }) else { continue }
            from = found + 1
            let shown = tokens(line), printed = tokens(actual[found])
            if shown.count == printed.count { for (a, b) in zip(shown, printed) where known[a] == nil { known[a] = b } }
        }
    }

    /// A command with the example's ids replaced by this run's (an id prefix of 10 or more
    /// characters by the whole id it stands for).
    static func substitute(_ command: String, _ known: [String: String]) -> String {
        var text = command
        let words = Set(text.split(whereSeparator: { " \"'=".contains($0) }).map(String.init))
        for word in words where word.count >= 10 {
            if let real = known[word] ?? known.first(where: { $0.key.hasPrefix(word) })?.value { text = text.replacingOccurrences(of: word, with: real) }
        }
        return text
    }

    @Test("every console block has a directive, and prints what it shows")
    func everyBlock() throws {
        var all: [Block] = []
        for document in Self.documents {
            let (blocks, problems) = try Self.blocks(of: document)
            for problem in problems { Issue.record(Comment(rawValue: problem)) }
            all += blocks
        }
        #expect(all.count >= 15, "found only \(all.count) console blocks")
        var base = ["PATH": "\(Self.binaries):/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TZ": "UTC", "LC_ALL": "C.UTF-8", "COLUMNS": "80",
                    "STORECTL_TRANSCRIPT_EXAMPLES": (Self.packageRoot as NSString).appendingPathComponent("examples"),
                    // Repositories earlier builds wrote, for the `repo convert` example.
                    "STORECTL_TRANSCRIPT_FIXTURES": (Self.packageRoot as NSString).appendingPathComponent("Tests/Fixtures/old-repositories"),
                    // Never the machine's crontab: a block that installs jobs names its stand-in.
                    "STORECTL_CRONTAB": "/nonexistent/storectl-transcript/crontab"]
        for name in ["STORECTL_PASSWORD_FILE", "STORECTL_PASSWORD_COMMAND", "STORECTL_PROGRESS", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3",
                     "AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_REGION", "STORECTL_FAULT_POINT"] {
            base[name] = ""
        }
        let only = ProcessInfo.processInfo.environment["STORECTL_TRANSCRIPT_ONLY"]   // e.g. "README.md:305", while editing
        var sessions: [String: (TempFolder, [String: String])] = [:]
        for block in all {
            if let only, !only.split(separator: ",").contains(where: { String($0) == block.description }) { continue }
            let folder: TempFolder
            var known: [String: String] = [:]
            if let session = block.session, let existing = sessions[session] { (folder, known) = existing } else { folder = try TempFolder() }
            var environment = base
            if block.needsS3 {
                guard SharedS3.wanted else { continue }
                environment.merge(try SharedS3.environment()) { $1 }
            }
            let setup = try Self.bash("{\n:\n\(block.setup)\n} >/dev/null 2>&1", block: block, in: folder.path, environment: environment)
            guard setup.status == 0 else {
                Issue.record(Comment(rawValue: "\(block): its setup failed (\(setup.status))"))
                continue
            }
            for (command, expected) in block.commands {
                let run = Self.substitute(command, known)
                let output = try Self.bash("{\n\(run)\n} 2>&1", block: block, in: folder.path, environment: environment).lines
                // What `sqlite3` prints of a store is data the block's setup made: compared as
                // printed (numbers included), so a stale count in a transcript is caught.
                let exact = command.hasPrefix("sqlite3 ")
                let want = exact ? expected.map(Self.trimmed) : expected.map(Self.normalise)
                let got = exact ? output.map(Self.trimmed) : output.map(Self.normalise)
                if Self.matches(want, got) {
                    Self.learnTokens(expected: expected, actual: output, into: &known)
                } else {
                    Issue.record(Comment(rawValue: """
                        \(block) `$ \(command)` printed something else.
                        --- expected (normalised)
                        \(want.joined(separator: "\n"))
                        --- printed (normalised)
                        \(got.joined(separator: "\n"))
                        --- printed
                        \(output.joined(separator: "\n"))
                        """))
                }
            }
            if let session = block.session { sessions[session] = (folder, known) }
        }
    }

    @Test("the normalising and matching rules themselves")
    func rulesWork() {
        #expect(Self.normalise("snapshot 20261122T202001Z-a7dcc9: added 1.7 MiB, 0.06s, 1,312 blobs") == "snapshot <ID>: added <SIZE>, <DUR>, <N> blobs")
        #expect(Self.normalise("exit 66") == "exit 66" && Self.normalise("exit 2") != Self.normalise("exit 0"))
        #expect(Self.normalise("sha256 5e368313415f…, key e8455abecb72ea1f") == "sha256 <HEX>, key <HEX>")
        #expect(Self.normalise("sha256 906342212913…, 0.53s") == "sha256 <HEX>, <DUR>")
        #expect(Self.normalise("key 5186290032564768") == Self.normalise("key e8455abecb72ea1f"))
        #expect(Self.matches(["a", "…", "d"], ["a", "b", "c", "d"]) && Self.matches(["a", "…"], ["a"]) && !Self.matches(["a", "d"], ["a", "b", "d"]))
        #expect(Self.matches(["x … z"], ["x y y z"]) && !Self.matches(["x … z"], ["x y y"]))
    }
}
