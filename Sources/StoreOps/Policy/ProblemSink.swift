import Foundation
import TOMLKit

/// Collects problems with their lines.
final class ProblemSink {
    let lines: TOMLLines
    var problems: [PolicyProblems.Problem] = []
    init(lines: TOMLLines) { self.lines = lines }

    func add(_ path: [String], _ message: String) {
        let key = path.enumerated().map { index, part in
            index > 0 && Int(part) != nil ? "[\(part)]" : (index > 0 ? ".\(part)" : part)
        }.joined()
        problems.append(.init(line: lines.line(path), key: key, message: message))
    }
}
