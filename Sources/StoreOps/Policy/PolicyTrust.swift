import Foundation

/// Whether a scheduled run may trust a policy file: what it names runs as the job's user (its
/// `password_command`, the stores it deletes rows from, the repository it writes, the log it
/// appends to), so a file another user can write, or replace through a folder on its path, lets
/// that user act as the job's (a trial installed root's jobs from a world-writable policy). Cron
/// refuses crontabs in `/etc/cron.d` for the same reason, and sshd's StrictModes checks the path up
/// to the file. The rule, for the file, every folder from it up to `/`, and the program its
/// `password_command` runs (and the script an interpreter there is given):
/// - owned by the job's user or by root;
/// - writable by no other user: not by every user; not by its group, unless the group is the
///   job's user's own (Debian's user private group: named after the user, no other member) and
///   the job is not root's; a folder writable by others is allowed when sticky (as /tmp is: no
///   one can rename another user's file there).
/// Checked before the file is read (nothing can change it between the check and the read without
/// being one of the users the check allows).
public enum PolicyTrust {
    /// Why a job run by `uid` must not run the policy `file`, or nil.
    public static func problem(_ file: String, uid: uid_t = geteuid()) -> String? {
        let path = FileSystem.absolute(file)
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }   // Missing: loading it says so.
        return problem(path: path, info: info, what: path, uid: uid) ?? ancestors(of: path, uid: uid)
    }

    /// Why a job run by `uid` must not run what `policy`'s `password_command` runs: its program (the
    /// first word: a path, relative to the policy's folder, or a name found in cron's PATH) and,
    /// when that is an interpreter (sh, bash, python3, …), the script it is given. Nil when fine,
    /// or when the policy has no command.
    public static func commandProblem(_ policy: Policy, uid: uid_t = geteuid()) -> String? {
        guard case .command(let command, let folder)? = policy.snapshot?.passwordSource else { return nil }
        let words = command.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        guard let first = words.first else { return nil }
        var programs = [first]
        let interpreters: Set<String> = ["sh", "bash", "dash", "zsh", "python", "python3", "perl", "ruby", "node", "env"]
        if interpreters.contains((first as NSString).lastPathComponent), let script = words.dropFirst().first(where: { !$0.hasPrefix("-") }) {
            programs.append(script)
        }
        for word in programs {
            let resolved: String?
            if word.contains("/") {
                resolved = word.hasPrefix("/") ? word : ((folder ?? FileSystem.parent(of: policy.file)) as NSString).appendingPathComponent(word)
            } else {
                resolved = ["/usr/bin", "/bin", "/usr/local/bin", "/usr/sbin", "/sbin", "/usr/local/sbin"].map { "\($0)/\(word)" }
                    .first { FileManager.default.isExecutableFile(atPath: $0) }
            }
            guard let resolved else { continue }
            let real = FileSystem.absolute(resolved)
            var info = stat()
            guard stat(real, &info) == 0 else { continue }   // Not there: running it says so.
            let what = "its password_command's \(word == first ? "program" : "script") \(real)"
            if let why = problem(path: real, info: info, what: what, uid: uid) ?? ancestors(of: real, uid: uid) { return why }
        }
        return nil
    }

    /// `problem`, as the error a scheduled run ends with (65), with what to do.
    public static func check(_ file: String, uid: uid_t = geteuid()) throws {
        guard let why = problem(file, uid: uid) else { return }
        throw refusal(FileSystem.absolute(file), why, uid: uid)
    }

    /// `commandProblem`, as the error a scheduled run ends with (65).
    public static func checkCommand(of policy: Policy, uid: uid_t = geteuid()) throws {
        guard let why = commandProblem(policy, uid: uid) else { return }
        throw refusal(policy.file, why, uid: uid)
    }

    static func refusal(_ file: String, _ why: String, uid: uid_t) -> StoreOpsError {
        StoreOpsError(.badData, "refused to run the policy \(file): \(why) (a job runs what it names, its password_command too, as \(runner(uid)))",
                      hint: "give it to the user the job runs as and take the others' write access (`chown USER FILE; chmod go-w FILE`, and the same for the folders above it), as cron asks of /etc/cron.d")
    }

    static func runner(_ uid: uid_t) -> String { uid == 0 ? "root" : UserName.name(of: uid) }

    /// Why another user could change `path` (whose stat is `info`), or nil.
    static func problem(path: String, info: stat, what: String, uid: uid_t) -> String? {
        if info.st_uid != 0, info.st_uid != uid {
            return "\(what) is owned by \(UserName.name(of: info.st_uid)), who can change what a job run as \(runner(uid)) does"
        }
        let isFolder = info.st_mode & S_IFMT == S_IFDIR
        if isFolder, info.st_mode & S_ISVTX != 0 { return nil }
        if info.st_mode & S_IWOTH != 0 { return "\(what) is writable by every user" }
        if info.st_mode & S_IWGRP != 0, !(uid != 0 && isPrivateGroup(info.st_gid, of: uid)) {
            return "\(what) is writable by its group (\(GroupName.name(of: info.st_gid)))" + (uid == 0 ? ", and the job runs as root" : ", which has other members than \(runner(uid))")
        }
        return nil
    }

    /// The folders from `path`'s up to `/`: the first another user could replace it through.
    static func ancestors(of path: String, uid: uid_t) -> String? {
        var folder = FileSystem.parent(of: path)
        while true {
            var info = stat()
            if stat(folder, &info) == 0, let why = problem(path: folder, info: info, what: "its folder \(folder)", uid: uid) { return why }
            let parent = FileSystem.parent(of: folder)
            if parent == folder || folder == "/" { return nil }
            folder = parent
        }
    }

    /// A user private group: named after `uid`'s user, its primary group, and no other member listed.
    static func isPrivateGroup(_ gid: gid_t, of uid: uid_t) -> Bool {
        guard let user = getpwuid(uid), user.pointee.pw_gid == gid, let group = getgrgid(gid),
              String(cString: group.pointee.gr_name) == String(cString: user.pointee.pw_name) else { return false }
        return group.pointee.gr_mem?.pointee == nil
    }
}

enum GroupName {
    static func name(of gid: gid_t) -> String {
        if let entry = getgrgid(gid), let name = entry.pointee.gr_name { return String(cString: name) }
        return "gid \(gid)"
    }
}
