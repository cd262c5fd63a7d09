import Foundation

/// Whether a scheduled run may trust a policy file: what it names runs as the job's user (its
/// `password_command`, the stores it deletes rows from, the repository it writes, the log it
/// appends to), so a file another user can write, or replace through a folder or a symbolic link
/// on its path, lets that user act as the job's (a trial installed root's jobs from a
/// world-writable policy). Cron refuses crontabs in `/etc/cron.d` for the same reason, and sshd's
/// StrictModes walks the path (`secure_filename`). The rule, for the policy's path as written, each
/// part from `/` down (a symbolic link: its owner, then the path it names, walked the same way):
/// - owned by the job's user or by root;
/// - writable by no other user: not by every user; not by its group, unless the group is the job
///   user's own (a user private group: named after the user, its primary group, no other member)
///   and the job is not root's; a folder writable by others is allowed when sticky (as /tmp is: no
///   one can rename another user's file there).
/// The `password_command` is held to the same rule: it must be plain words (no quoting, `$`,
/// `;`, redirection, globbing or leading assignments: a script does what a shell line would), and
/// every file it names (its program, found as the shell will find it, and each word that names a
/// path, such as an interpreter's script) must pass. Checked before the file is read: no one the
/// rule does not allow can change what is read after.
public enum PolicyTrust {
    /// Why a job run by `uid` must not run the policy `file`, or nil.
    public static func problem(_ file: String, uid: uid_t = geteuid()) -> String? {
        secure(absolute(file), uid: uid)
    }

    /// What a shell line may hold to be checked word by word: plain words.
    static let shellSpecials = Set(";&|$`'\"<>(){}[]*?~!#\\\n")

    /// Why a job run by `uid` must not run what `policy`'s `password_command` runs, or nil (no
    /// command, or every file it names passes). `path`: the PATH its shell will search (cron's,
    /// systemd's, or this process's when it is the scheduled run itself).
    public static func commandProblem(_ policy: Policy, uid: uid_t = geteuid(), path: String? = nil) -> String? {
        guard case .command(let command, let given)? = policy.snapshot?.passwordSource else { return nil }
        if let special = command.first(where: { shellSpecials.contains($0) }) {
            return "its password_command \(command.debugDescription) holds \(String(special).debugDescription): a scheduled run takes plain words only "
                + "(a program and its arguments), so that every file it runs can be checked; put the rest in a script"
        }
        let words = command.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        guard let first = words.first else { return nil }
        if first.contains("=") {
            return "its password_command \(command.debugDescription) begins with a variable assignment: a scheduled run takes plain words only; put it in a script"
        }
        let folder = given ?? FileSystem.parent(of: policy.file)
        let searched = (path ?? ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":").map(String.init).filter { $0.hasPrefix("/") }
        for (index, word) in words.enumerated() {
            var named: String?
            if word.contains("/") {
                named = word.hasPrefix("/") ? word : (folder as NSString).appendingPathComponent(word)
            } else if index == 0 {
                // The program, found as the shell finds it: the first folder of its PATH that has it.
                named = searched.map { ($0 as NSString).appendingPathComponent(word) }.first { FileManager.default.isExecutableFile(atPath: $0) }
            } else {
                // An argument naming a file beside the policy (`cat password`).
                let beside = (folder as NSString).appendingPathComponent(word)
                if FileSystem.kind(of: beside) != .missing { named = beside }
            }
            guard var named else { continue }
            named = "/" + named.split(separator: "/").filter { $0 != "." }.joined(separator: "/")
            if let why = secure(named, uid: uid) {
                return "its password_command names \(named): \(why)"
            }
        }
        return nil
    }

    /// Why a job run by `uid` would refuse to append to the job log `path` (or its `.out`), or
    /// nil: it appends only to a plain file of its own or root's, with one name (a symbolic link
    /// planted as root's job log had root append its line to whatever the link named: a trial).
    /// The job still does its work; only the log line is refused (the run ends 73 saying so).
    public static func logFileProblem(_ path: String, uid: uid_t = geteuid()) -> String? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return logFileProblem(path, info: info, uid: uid)
    }

    static func logFileProblem(_ path: String, info: stat, uid: uid_t) -> String? {
        switch info.st_mode & S_IFMT {
        case S_IFLNK: return "\(path) is a symbolic link: a job appends its log only to a plain file (another user could point a link at any file)"
        case S_IFREG: break
        default: return "\(path) is not a plain file"
        }
        if info.st_uid != 0, info.st_uid != uid { return "\(path) is owned by \(UserName.name(of: info.st_uid)), not by \(runner(uid)) or root" }
        if info.st_nlink > 1 { return "\(path) has \(info.st_nlink) names (a hard link: another user's name for some other file)" }
        return nil
    }

    /// A note for `policy check`: the password file every user can write (anyone can change it).
    public static func passwordFileNote(_ policy: Policy) -> String? {
        guard case .file(let file)? = policy.snapshot?.passwordSource else { return nil }
        var info = stat()
        guard stat(file, &info) == 0, info.st_mode & S_IWOTH != 0 else { return nil }
        return "the password file \(file) is writable by every user (`chmod o-rwx \(file)`)"
    }

    /// `problem`, as the error a scheduled run ends with (65), with what to do.
    public static func check(_ file: String, uid: uid_t = geteuid()) throws {
        guard let why = problem(file, uid: uid) else { return }
        throw refusal(absolute(file), why, uid: uid)
    }

    /// `commandProblem` (this process's PATH: the scheduled run's own), as the error a run ends with (65).
    public static func checkCommand(of policy: Policy, uid: uid_t = geteuid()) throws {
        guard let why = commandProblem(policy, uid: uid) else { return }
        throw refusal(policy.file, why, uid: uid)
    }

    static func refusal(_ file: String, _ why: String, uid: uid_t) -> StoreOpsError {
        StoreOpsError(.badData, "refused to run the policy \(file): \(why) (a job runs what it names, its password_command too, as \(runner(uid)))",
                      hint: "give it to the user the job runs as and take the others' write access (`chown USER FILE; chmod go-w FILE`, and the same for the folders above it), as cron asks of /etc/cron.d")
    }

    static func runner(_ uid: uid_t) -> String { uid == 0 ? "root" : UserName.name(of: uid) }

    /// `path` made absolute against the current folder, its symbolic links kept (they are walked).
    static func absolute(_ path: String) -> String {
        path.hasPrefix("/") ? path : (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(path)
    }

    /// Walks `path` from `/` down, each part as written: the first part another user could change
    /// (or replace, or point elsewhere), or nil. A part that does not exist ends the walk: the
    /// folder it would be made in passed, so only an allowed user could make it.
    static func secure(_ path: String, uid: uid_t, depth: Int = 0) -> String? {
        guard depth < 32 else { return "\(path): too many symbolic links" }
        let parts = path.split(separator: "/").map(String.init).filter { $0 != "." }
        var current = "/"
        var info = stat()
        if lstat("/", &info) == 0, let why = problem(path: "/", info: info, what: "the folder /", uid: uid) { return why }
        for (index, part) in parts.enumerated() {
            if part == ".." { current = FileSystem.parent(of: current); continue }
            let next = current == "/" ? "/" + part : current + "/" + part
            guard lstat(next, &info) == 0 else { return nil }
            if info.st_mode & S_IFMT == S_IFLNK {
                if info.st_uid != 0, info.st_uid != uid {
                    return "the symbolic link \(next) is owned by \(UserName.name(of: info.st_uid)), who can point it elsewhere"
                }
                guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: next) else { return "\(next): a symbolic link that cannot be read" }
                let rest = parts[(index + 1)...].joined(separator: "/")
                let base = target.hasPrefix("/") ? target : (current as NSString).appendingPathComponent(target)
                return secure(rest.isEmpty ? base : base + "/" + rest, uid: uid, depth: depth + 1)
            }
            let isLast = index == parts.count - 1
            if let why = problem(path: next, info: info, what: isLast ? next : "its folder \(next)", uid: uid) { return why }
            current = next
        }
        return nil
    }

    /// Why another user could change `path` (whose lstat is `info`), or nil.
    static func problem(path: String, info: stat, what: String, uid: uid_t) -> String? {
        if info.st_uid != 0, info.st_uid != uid {
            return "\(what) is owned by \(UserName.name(of: info.st_uid)), who can change what a job run as \(runner(uid)) does"
        }
        let isFolder = info.st_mode & S_IFMT == S_IFDIR
        if isFolder, info.st_mode & S_ISVTX != 0 { return nil }
        if info.st_mode & S_IWOTH != 0 { return "\(what) is writable by every user" }
        if info.st_mode & S_IWGRP != 0, !(uid != 0 && isPrivateGroup(info.st_gid, of: uid)) {
            return "\(what) is writable by its group (\(GroupName.name(of: info.st_gid)))" + (uid == 0 ? ", and the job runs as root" : ", which is not \(runner(uid))'s own")
        }
        return nil
    }

    /// A user private group: named after `uid`'s user, its primary group, no other member listed,
    /// and no other user's primary group.
    static func isPrivateGroup(_ gid: gid_t, of uid: uid_t) -> Bool {
        guard let user = getpwuid(uid), user.pointee.pw_gid == gid, let group = getgrgid(gid),
              String(cString: group.pointee.gr_name) == String(cString: user.pointee.pw_name),
              group.pointee.gr_mem?.pointee == nil else { return false }
        setpwent()
        defer { endpwent() }
        while let entry = getpwent() {
            if entry.pointee.pw_gid == gid, entry.pointee.pw_uid != uid { return false }
        }
        return true
    }
}

enum GroupName {
    static func name(of gid: gid_t) -> String {
        if let entry = getgrgid(gid), let name = entry.pointee.gr_name { return String(cString: name) }
        return "gid \(gid)"
    }
}
