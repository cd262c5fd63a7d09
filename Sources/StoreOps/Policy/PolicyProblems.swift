import Foundation
import GRDB

/// A policy file's problems: every one, with file, line, key and what is expected.
public struct PolicyProblems: Error, Sendable, CustomStringConvertible {
    public struct Problem: Sendable, Equatable, CustomStringConvertible {
        public var line: Int?
        public var key: String
        public var message: String
        public var description: String { "\(line.map { "\($0): " } ?? " ")\(key): \(message)" }
    }

    public var file: String
    public var problems: [Problem]

    public var description: String {
        "\(file): \(problems.count) problem\(problems.count == 1 ? "" : "s")\n" + problems.map { "  \(file):\($0)" }.joined(separator: "\n")
    }

    /// As the error every command reports: exit 65.
    public var storeOpsError: StoreOpsError {
        StoreOpsError(.badData, description, hint: "fix the policy file; `storectl policy check \(file)` re-checks it")
    }
}
