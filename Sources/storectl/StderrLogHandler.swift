import Foundation
import Logging
import StoreOps

/// Warnings (and, with STORECTL_LOG_LEVEL, debug lines) on stderr as an operator reads them: the
/// time, the level and the logger, what happened, then its details in parentheses. swift-log's
/// stream handler put the details first and the library's module name (`[StoreOps]`) before the
/// message.
struct StderrLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .warning
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let all = metadata.merging(event.metadata ?? [:]) { $1 }
        let details = all.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ")
        let line = "\(Timestamp.iso(Date())) \(event.level) \(label): \(event.message)\(details.isEmpty ? "" : " (\(details))")\n"
        // One write(2) of the whole line: never a trap when stderr is closed (FileHandle's write
        // is), and not interleaved with other threads' lines.
        let bytes = Array(line.utf8)
        _ = bytes.withUnsafeBytes { Glibc.write(2, $0.baseAddress, $0.count) }
    }
}
