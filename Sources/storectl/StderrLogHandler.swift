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
        FileHandle.standardError.write(Data(line.utf8))
    }
}
