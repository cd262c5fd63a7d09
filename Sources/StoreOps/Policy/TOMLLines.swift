import Foundation

/// Finds the line of a key in TOML source text, for error messages (TOMLKit reports positions
/// only for syntax errors). Understands `[table]`, `[[array.of.tables]]`, `key = ...` and dotted
/// keys; anything else simply has no line.
struct TOMLLines {
    private var lines: [String: Int] = [:]

    init(source: String) {
        var current: [String] = []
        var arrayCounts: [String: Int] = [:]
        for (index, raw) in source.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces)
            let number = index + 1
            if line.hasPrefix("[[") , let end = line.range(of: "]]") {
                let name = String(line[line.index(line.startIndex, offsetBy: 2)..<end.lowerBound]).trimmingCharacters(in: .whitespaces)
                let position = arrayCounts[name, default: 0]
                arrayCounts[name] = position + 1
                current = name.split(separator: ".").map(String.init) + ["\(position)"]
                lines[current.joined(separator: ".")] = number
            } else if line.hasPrefix("["), let end = line.firstIndex(of: "]") {
                let name = String(line[line.index(after: line.startIndex)..<end]).trimmingCharacters(in: .whitespaces)
                // A sub-table of the last array element: [purge.limits] after [[purge]].
                var path = name.split(separator: ".").map(String.init)
                if let arrayName = path.first, let count = arrayCounts[arrayName], path.count > 1 {
                    path.insert("\(count - 1)", at: 1)
                }
                current = path
                lines[current.joined(separator: ".")] = number
            } else if let equals = line.firstIndex(of: "="), !line.hasPrefix("#") {
                let key = line[..<equals].trimmingCharacters(in: .whitespaces)
                    .split(separator: ".").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "\"' ")) }
                lines[(current + key).joined(separator: ".")] = number
            }
        }
    }

    /// The line of the key at `path` (e.g. ["purge", "0", "retention"]), or of its table.
    func line(_ path: [String]) -> Int? {
        var path = path
        while !path.isEmpty {
            if let line = lines[path.joined(separator: ".")] { return line }
            path.removeLast()
        }
        return nil
    }
}
