import Foundation
import GRDB
import GRDBSQLite
import Logging

/// Integrity checks of a database, as a manifest's verification record.
public enum Verifier {
    public static func verify(_ db: Database, level: VerifyLevel) throws -> Manifest.Verification {
        switch level {
        case .none:
            return Manifest.Verification(level: .none, ok: true, messages: [])
        case .quick:
            let messages = try StoreConnection.integrityMessages(db, pragma: "quick_check")
            return Manifest.Verification(level: .quick, ok: messages == ["ok"], messages: messages)
        case .full:
            let messages = try StoreConnection.integrityMessages(db, pragma: "integrity_check")
            let foreignKeys = try StoreConnection.foreignKeyViolations(db)
            var all = messages
            if foreignKeys.count > 0 {
                all.append("foreign_key_check: \(foreignKeys.count) violation(s): " + foreignKeys.samples.joined(separator: ", "))
            }
            return Manifest.Verification(level: .full, ok: messages == ["ok"] && foreignKeys.count == 0, messages: all)
        }
    }
}
