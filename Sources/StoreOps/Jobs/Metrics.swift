import Foundation

/// Prometheus metrics for node_exporter's textfile collector: one `.prom` file per store and job,
/// replaced atomically (written under a name the collector ignores, then renamed), as the
/// collector's documentation asks.
public enum Metrics {
    /// The file for a store's job: `storectl-<store name>-<short hash of its path>-<job>.prom`.
    public static func file(folder: String, store: String, job: ScheduledJob) -> String {
        let name = ((FileSystem.name(of: store) as NSString).deletingPathExtension)
            .map { $0.isLetter || $0.isNumber ? $0 : "_" }
        let hash = Hashing.sha256(Data(store.utf8)).prefix(8)
        return (folder as NSString).appendingPathComponent("storectl-\(String(name))-\(hash)-\(job.rawValue).prom")
    }

    /// Writes the metrics of `record`, carrying the last success time and the purged-rows counter
    /// over from the previous file.
    public static func write(_ record: JobRun.Record, folder: String) throws {
        let store = record.store ?? record.policy
        let path = file(folder: folder, store: store, job: record.job)
        let previous = values(in: (try? String(contentsOfFile: path, encoding: .utf8)) ?? "")
        let labels = "{job=\"\(record.job.rawValue)\",store=\"\(escape(store))\"}"
        let ok = record.exitCode == 0
        let lastSuccess = ok ? record.end.timeIntervalSince1970 : previous["storectl_job_last_success_timestamp_seconds"] ?? 0
        let purged = (previous["storectl_purged_rows_total"] ?? 0) + Double(record.rowsPurged ?? 0)
        let snapshotBytes = record.snapshotBytes.map { Double($0) } ?? previous["storectl_snapshot_bytes"] ?? 0
        var metrics: [(String, String, String, Double)] = [
            ("storectl_job_last_success_timestamp_seconds", "gauge", "When the job last succeeded (Unix time).", lastSuccess),
            ("storectl_job_last_run_timestamp_seconds", "gauge", "When the job last ran (Unix time).", record.end.timeIntervalSince1970),
            ("storectl_job_duration_seconds", "gauge", "How long the last run took.", record.durationSeconds),
            ("storectl_job_exit_code", "gauge", "The last run's exit status (0 ok, 75 skipped, see storectl --help).", Double(record.exitCode)),
            ("storectl_purged_rows_total", "counter", "Rows purged by this job since its metrics file was created.", purged),
            // The bytes the snapshot added (0: unchanged). Its HELP text stays as first published:
            // node_exporter refuses one metric with two HELP texts across files (an upgrade
            // leaves the other jobs' files with the old one until they run).
            ("storectl_snapshot_bytes", "gauge", "Size of the last snapshot archive this job made.", snapshotBytes),
        ]
        // A purge's gauge, carried over from the last file when this run did not get to the
        // purge (skipped, failed before it), so an alert on it does not flap.
        let keptName = "storectl_purge_rows_kept_by_deny"
        if let kept = record.rowsKeptByDeny.map(Double.init) ?? ([.purge, .maintain].contains(record.job) ? previous[keptName] : nil) {
            metrics.append((keptName, "gauge", "Rows the last purge's deny rules kept (still linked; listed in its report).", kept))
        }
        var text = ""
        for (name, type, help, value) in metrics {
            text += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name)\(labels) \(format(value))\n"
        }
        // What a run killed between writing its file and renaming it left (the collector ignores
        // it, but nothing else would ever remove it: found by the crash test).
        PendingFile.removeStale(in: folder, prefix: FileSystem.name(of: path))
        let pending = try PendingFile(finalPath: path, label: "metrics.file")
        try pending.write(Data(text.utf8))
        chmod(pending.tempPath, 0o644)
        try pending.commit(replacing: true)
    }

    static func format(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(format: "%.3f", value)
    }

    /// Label values escape backslash, double quote and newline (the exposition format's rule).
    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\n", with: "\\n")
    }

    static func values(in text: String) -> [String: Double] {
        var result: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let brace = line.firstIndex(of: "{"), let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            result[String(line[..<brace])] = value
        }
        return result
    }
}
