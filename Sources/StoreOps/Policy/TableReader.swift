import Foundation
import TOMLKit

/// Strict, typed access to one TOML table: every key read is recorded, the rest are unknown.
final class TableReader {
    let table: TOMLTable
    let path: [String]
    let sink: ProblemSink
    private var used = Set<String>()

    init(_ table: TOMLTable, path: [String], sink: ProblemSink) {
        self.table = table
        self.path = path
        self.sink = sink
    }

    func problem(_ key: String, _ message: String) { sink.add(path + [key], message) }

    func has(_ key: String) -> Bool { table.keys.contains(key) }

    private func value(_ key: String, required: Bool, expected: String) -> TOMLValueConvertible? {
        used.insert(key)
        guard let value = table[key] else {
            if required { problem(key, "missing: expected \(expected)") }
            return nil
        }
        return value
    }

    private func wrongType(_ key: String, _ value: TOMLValueConvertible, expected: String) {
        problem(key, "expected \(expected), got \(Self.describe(value))")
    }

    static func describe(_ value: TOMLValueConvertible) -> String {
        switch value.type {
        case .string: "the string \"\(value.string ?? "")\""
        case .int: "the integer \(value.int ?? 0)"
        case .double: "the number \(value.double ?? 0)"
        case .bool: "\(value.bool ?? false)"
        case .array: "an array"
        case .table: "a table"
        default: "a \(value.type)"
        }
    }

    func string(_ key: String, required: Bool = false) -> String? {
        guard let value = value(key, required: required, expected: "a string") else { return nil }
        guard let text = value.string else { wrongType(key, value, expected: "a string"); return nil }
        guard !text.isEmpty else { problem(key, "must not be empty"); return nil }
        return text
    }

    func bool(_ key: String) -> Bool? {
        guard let value = value(key, required: false, expected: "true or false") else { return nil }
        guard let flag = value.bool else { wrongType(key, value, expected: "true or false"); return nil }
        return flag
    }

    func int(_ key: String, in range: ClosedRange<Int>) -> Int? {
        guard let value = value(key, required: false, expected: "an integer") else { return nil }
        guard value.type == .int, let number = value.int else { wrongType(key, value, expected: "an integer"); return nil }
        guard range.contains(number) else {
            problem(key, "\(number) is out of range; expected \(range.upperBound == Int.max ? "at least \(range.lowerBound)" : "\(range.lowerBound)...\(range.upperBound)")")
            return nil
        }
        return number
    }

    func double(_ key: String, in range: ClosedRange<Double>, openLow: Bool = false) -> Double? {
        guard let value = value(key, required: false, expected: "a number") else { return nil }
        let number: Double
        switch value.type {
        case .double: number = value.double ?? 0
        case .int: number = Double(value.int ?? 0)
        default: wrongType(key, value, expected: "a number"); return nil
        }
        guard range.contains(number), !(openLow && number == range.lowerBound) else {
            problem(key, "\(number) is out of range; expected more than \(range.lowerBound) and at most \(range.upperBound), e.g. 0.25")
            return nil
        }
        return number
    }

    /// A size: bytes as an integer, or a string with a unit ("10MiB", "500K", "1G"; binary units).
    func size(_ key: String) -> UInt64? {
        guard let value = value(key, required: false, expected: "a size") else { return nil }
        if value.type == .int, let number = value.int {
            guard number >= 4096 else { problem(key, "\(number) bytes is too small; expected at least 4096, e.g. \"10MiB\""); return nil }
            return UInt64(number)
        }
        guard let text = value.string else { wrongType(key, value, expected: "a size such as \"10MiB\""); return nil }
        guard let bytes = ByteSize.parse(text) else {
            problem(key, "\(text.debugDescription) is not a size of at least 4 KiB; write e.g. \"10MiB\", \"500K\" or \"1G\"")
            return nil
        }
        return bytes
    }

    func duration(_ key: String, allowZero: Bool = false, maximum: TimeInterval = DurationText.maximumSeconds) -> DurationText? {
        guard let value = value(key, required: false, expected: "a duration") else { return nil }
        // `= 0` where zero is allowed (off): zero needs no unit (a trial wrote `keep_safety = 0`).
        if allowZero, value.type == .int, value.int == 0, case .success(let zero) = DurationText.parse("0", allowZero: true, maximum: maximum) {
            return zero
        }
        guard let text = value.string else {
            wrongType(key, value, expected: "a duration string such as \"30d\" (a bare number has no unit)")
            return nil
        }
        switch DurationText.parse(text, allowZero: allowZero, maximum: maximum) {
        case .success(let duration): return duration
        case .failure(let error): problem(key, error.description); return nil
        }
    }

    func strings(_ key: String) -> [String]? {
        guard let value = value(key, required: false, expected: "an array of strings") else { return nil }
        guard let array = value.array else { wrongType(key, value, expected: "an array of strings"); return nil }
        var result: [String] = []
        for element in array {
            guard let text = element.string else { wrongType(key, element, expected: "an array of strings"); return nil }
            result.append(text)
        }
        return result
    }

    func table(_ key: String, required: Bool = false) -> TableReader? {
        guard let value = value(key, required: required, expected: "a [\((path + [key]).joined(separator: "."))] table") else { return nil }
        guard let table = value.table else { wrongType(key, value, expected: "a table"); return nil }
        return TableReader(table, path: path + [key], sink: sink)
    }

    func tables(_ key: String) -> [TableReader]? {
        guard let value = value(key, required: false, expected: "[[\(key)]] tables") else { return nil }
        guard let array = value.array else { wrongType(key, value, expected: "[[\(key)]] tables"); return nil }
        var result: [TableReader] = []
        for (index, element) in array.enumerated() {
            guard let table = element.table else { wrongType(key, element, expected: "[[\(key)]] tables"); continue }
            result.append(TableReader(table, path: path + [key, "\(index)"], sink: sink))
        }
        return result
    }

    /// Reports every key not read as unknown, naming the keys this table accepts.
    func finish(known: [String]) {
        for key in table.keys.sorted() where !used.contains(key) {
            // A typo ("snapshto") names the key it was meant to be.
            let near = known.filter { !table.keys.contains($0) }.min { RepositoryLocation.editDistance(key, $0) < RepositoryLocation.editDistance(key, $1) }
            let meant = near.flatMap { RepositoryLocation.editDistance(key, $0) <= 2 ? "did you mean \"\($0)\"? " : nil } ?? ""
            problem(key, "unknown key; \(meant)expected one of: \(known.joined(separator: ", "))")
        }
    }
}

/// A size as people write it: "10MiB", "500K", "1G" (binary units), "4096B".
public enum ByteSize {
    /// The bytes, or nil when `text` is not a size of at least 4 KiB.
    public static func parse(_ text: String) -> UInt64? {
        let units: [(String, UInt64)] = [("GIB", 1 << 30), ("MIB", 1 << 20), ("KIB", 1 << 10), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10), ("B", 1)]
        let upper = text.uppercased().trimmingCharacters(in: .whitespaces)
        guard let (unit, factor) = units.first(where: { upper.hasSuffix($0.0) }),
              let number = UInt64(upper.dropLast(unit.count).trimmingCharacters(in: .whitespaces)), number > 0,
              number.multipliedReportingOverflow(by: factor).overflow == false, number * factor >= 4096 else { return nil }
        return number * factor
    }
}
