import Foundation

/// Who runs storectl, for lock and key records: the account name of the real user id (cron and
/// `env -i` runs have no USER), else the number.
enum UserName {
    static var current: String {
        if let entry = getpwuid(getuid()), let name = entry.pointee.pw_name { return String(cString: name) }
        return ProcessInfo.processInfo.environment["USER"] ?? String(getuid())
    }

    /// The user `uid` names (its number when the password database has none).
    static func name(of uid: uid_t) -> String {
        if let entry = getpwuid(uid), let name = entry.pointee.pw_name { return String(cString: name) }
        return "uid \(uid)"
    }
}
