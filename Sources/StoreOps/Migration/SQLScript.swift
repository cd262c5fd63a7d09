import Foundation
import GRDB
import GRDBSQLite

/// Splitting SQL text into statements, and reading storectl's directives.
public enum SQLScript {
    /// The statements of `text`, split where SQLite says a statement is complete
    /// (`sqlite3_complete`, which knows about strings, comments and trigger bodies).
    public static func statements(_ text: String) -> [String] {
        var result: [String] = []
        var current = ""
        for character in text {
            current.append(character)
            if character == ";", sqlite3_complete(current) != 0 {
                let statement = current.trimmingCharacters(in: .whitespacesAndNewlines)
                if !isOnlyComments(statement) { result.append(statement) }
                current = ""
            }
        }
        let rest = current.trimmingCharacters(in: .whitespacesAndNewlines)
        if !rest.isEmpty, !isOnlyComments(rest) { result.append(rest) }
        return result
    }

    /// The first `count` words of a statement, comments skipped (upper-cased unless asked not to).
    public static func leadingWords(_ statement: String, count: Int, uppercased: Bool = true) -> [String] {
        let text = stripComments(statement)
        return (uppercased ? text.uppercased() : text).split(whereSeparator: { $0.isWhitespace || $0 == "(" || $0 == ";" || $0 == "=" })
            .prefix(count).map(String.init)
    }

    static func isOnlyComments(_ text: String) -> Bool {
        stripComments(text).trimmingCharacters(in: CharacterSet.whitespacesAndNewlines.union(CharacterSet(charactersIn: ";"))).isEmpty
    }

    static func stripComments(_ text: String) -> String {
        var out = ""
        var index = text.startIndex
        while index < text.endIndex {
            let rest = text[index...]
            if rest.hasPrefix("--") {
                index = rest.firstIndex(of: "\n") ?? text.endIndex
            } else if rest.hasPrefix("/*") {
                index = rest.range(of: "*/").map { $0.upperBound } ?? text.endIndex
            } else {
                out.append(text[index])
                index = text.index(after: index)
            }
        }
        return out
    }

    struct Directives {
        var noTransaction = false
        var allowCountDrop = Set<String>()
        /// `-- storectl: changes Item.priorityLabel, Tag` (or `changes nothing`): what the
        /// migration may change in the data; nil when it declares nothing.
        var changes: Set<String>?
    }

    static func directives(_ text: String) -> Directives {
        var result = Directives()
        for line in text.split(separator: "\n") {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard trimmed.hasPrefix("--"), let range = trimmed.range(of: "storectl:") else { continue }
            let directive = trimmed[range.upperBound...].trimmingCharacters(in: .whitespaces)
            if directive == "no-transaction" { result.noTransaction = true }
            if directive.hasPrefix("allow-count-drop") {
                let names = directive.dropFirst("allow-count-drop".count).split(whereSeparator: { $0 == "," || $0 == " " })
                result.allowCountDrop.formUnion(names.map(String.init))
            }
            if directive.hasPrefix("changes ") || directive == "changes" {
                let names = directive.dropFirst("changes".count).split(whereSeparator: { $0 == "," || $0 == " " }).map(String.init)
                result.changes = (result.changes ?? []).union(names.filter { $0.lowercased() != "nothing" })
            }
        }
        return result
    }
}
