import Foundation

/// Whether a scheduled run may trust a policy file: what it names runs as the job's user (its
/// `password_command`, the stores it deletes rows from, the repository it writes), so a file
/// another user can write, or replace through its folder, lets that user act as the job's
/// (a trial installed root's jobs from a world-writable policy). Cron refuses crontabs in
/// `/etc/cron.d` for the same reason (owned by root, writable by no one else); the rule here:
/// - the file is owned by the job's user or by root, and no other user can write it;
/// - its folder is owned by the job's user or by root, and no other user can write it (unless it
///   is sticky, as /tmp is: there no one can rename another user's file);
/// - for root's jobs, "no other user" includes the file's and the folder's group; for another
///   user's, a group-writable file is allowed (Debian gives each user a group of their own).
public enum PolicyTrust {
    /// Why a job run by `uid` must not run `file`, or nil.
    public static func problem(_ file: String, uid: uid_t = geteuid()) -> String? {
        let path = FileSystem.absolute(file)
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }   // Missing: loading it says so.
        let runner = uid == 0 ? "root" : UserName.name(of: uid)
        let strictGroup = uid == 0
        func writers(_ info: stat, what: String, sticky: Bool) -> String? {
            if info.st_uid != 0, info.st_uid != uid {
                return "\(what) is owned by \(UserName.name(of: info.st_uid)), who can change what a job run as \(runner) does"
            }
            guard !sticky || info.st_mode & S_ISVTX == 0 else { return nil }
            if info.st_mode & S_IWOTH != 0 { return "\(what) is writable by every user" }
            if strictGroup, info.st_mode & S_IWGRP != 0 {
                return "\(what) is writable by its group (\(GroupName.name(of: info.st_gid))), and the job runs as root"
            }
            return nil
        }
        if let why = writers(info, what: path, sticky: false) { return why }
        let folder = FileSystem.parent(of: path)
        var folderInfo = stat()
        guard stat(folder, &folderInfo) == 0 else { return nil }
        return writers(folderInfo, what: "its folder \(folder)", sticky: true)
    }

    /// `problem` as the error a scheduled run ends with (65), with what to do.
    public static func check(_ file: String, uid: uid_t = geteuid()) throws {
        guard let why = problem(file, uid: uid) else { return }
        throw StoreOpsError(.badData, "refused to run the policy \(FileSystem.absolute(file)): \(why) (a job runs what it names, its password_command too, as \(uid == 0 ? "root" : UserName.name(of: uid)))",
                            hint: "give it to the user the job runs as and take the others' write access (`chown USER FILE; chmod go-w FILE` and the same for its folder), as cron asks of /etc/cron.d")
    }
}

enum GroupName {
    static func name(of gid: gid_t) -> String {
        if let entry = getgrgid(gid), let name = entry.pointee.gr_name { return String(cString: name) }
        return "gid \(gid)"
    }
}
