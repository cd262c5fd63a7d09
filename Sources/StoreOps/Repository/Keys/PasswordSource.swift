import Foundation
import Synchronization

/// Where a repository's password comes from: never a command-line argument (it would show in `ps`
/// and in shell history). In order: `--password-file FILE`, `STORECTL_PASSWORD_FILE`,
/// `STORECTL_PASSWORD_COMMAND` (its first line of output), a prompt on the terminal.
public enum PasswordSource: Sendable, Hashable {
    case file(String)
    /// A shell command; `folder`: the policy file's folder, where a policy's command runs (cron
    /// and systemd run jobs elsewhere: `cat pw` beside the policy must work as `policy check`
    /// found it); nil: STORECTL_PASSWORD_COMMAND, run where storectl runs.
    case command(String, folder: String? = nil)
    case prompt
    /// No password can be had, and why (a scheduled run's policy names none: cron has no terminal
    /// and none of the operator's environment). Reading it fails with 64 and that reason.
    case unavailable(String)

    /// The source the options and the environment name.
    public static func resolve(file: String?, environment: [String: String] = ProcessInfo.processInfo.environment) -> PasswordSource {
        if let file { return .file(file) }
        if let file = environment["STORECTL_PASSWORD_FILE"], !file.isEmpty { return .file(file) }
        if let command = environment["STORECTL_PASSWORD_COMMAND"], !command.isEmpty { return .command(command) }
        return .prompt
    }

    /// Reads the password (its first line).
    ///
    /// - Parameter confirm: a prompt asks twice (a new password).
    /// - Throws: 66 for a missing or unreadable file, 1 for a failing command, 64 when there is no
    ///   terminal to ask on, and for an empty password.
    public func read(purpose: String, confirm: Bool = false) throws -> Data {
        // A run that opens the repository more than once (migrate: its snapshot, the check, a
        // rollback) asks, or runs the command, once. New passwords are never remembered.
        // (Not while a scheduled run is imitated: what this shell's run gave is no proof.)
        let imitating = Self.scheduled.withLock { $0 != nil }
        if !confirm, !imitating, let known = Self.remembered.withLock({ $0[self] }) { return known }
        let password = try readOnce(purpose: purpose, confirm: confirm)
        if !confirm, !imitating { Self.remembered.withLock { $0[self] = password } }
        return password
    }

    private static let remembered = Mutex<[PasswordSource: Data]>([:])

    /// The environment a password command gets while a scheduled run is imitated (`asScheduled`).
    private static let scheduled = Mutex<[String: String]?>(nil)

    /// What cron gives a job: PATH=/usr/bin:/bin, HOME, USER, LOGNAME and SHELL of this user,
    /// nothing of this shell's environment.
    public static var cronEnvironment: [String: String] { environment(of: .cron) }

    /// What `scheduler` gives a job: cron's PATH is /usr/bin:/bin, with HOME, USER, LOGNAME and
    /// SHELL of this user; systemd's services get /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:
    /// /sbin:/bin (a command in /usr/local/bin, refused by a check as cron's, runs there: a trial)
    /// and no HOME, USER or LOGNAME (systemd.exec(5) sets them only for units with `User=`, and the
    /// units storectl writes have none).
    public static func environment(of scheduler: Scheduler) -> [String: String] {
        if scheduler == .systemd { return ["PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"] }
        var environment = ["PATH": "/usr/bin:/bin", "SHELL": "/bin/sh"]
        if let entry = getpwuid(geteuid()) {
            let name = String(cString: entry.pointee.pw_name)
            environment["HOME"] = String(cString: entry.pointee.pw_dir)
            environment["USER"] = name
            environment["LOGNAME"] = name
        }
        return environment
    }

    /// Runs `body` with password commands given `cronEnvironment`, as `policy check` and
    /// `schedule install` check a job (a trial's command, found through this shell's PATH, passed
    /// the check and failed its first scheduled run, 127).
    public static func asScheduled<T>(by scheduler: Scheduler = .cron, _ body: () throws -> T) rethrows -> T {
        Self.scheduled.withLock { $0 = environment(of: scheduler) }
        defer { Self.scheduled.withLock { $0 = nil } }
        return try body()
    }

    /// Where a password that opened no key came from, and so what to check: the file or the
    /// command that gave it, not every place a password could come from.
    public var wrongPasswordHint: String {
        switch self {
        case .file(let path):
            "the password was read from \(FileSystem.absolute(path)) (--password-file wins over a policy's password_file, "
                + "which wins over STORECTL_PASSWORD_FILE): check what that file holds"
        case .command(let command, let folder):
            "the password was the first line printed by `\(command)` (\(folder.map { "the policy's password_command, run in \($0)" } ?? "STORECTL_PASSWORD_COMMAND")): check what it prints"
        case .prompt: "the password typed opens no key of this repository: try again, or pass --password-file"
        case .unavailable: "check --password-file, STORECTL_PASSWORD_FILE or STORECTL_PASSWORD_COMMAND"
        }
    }

    private func readOnce(purpose: String, confirm: Bool) throws -> Data {
        let text: String
        switch self {
        case .file(let path):
            let absolute = FileSystem.absolute(path)
            // A pipe (`--password-file <(pass show repo)`) or a device (/dev/null) is read as a
            // stream: FileManager reads regular files only ("Input/output error" before).
            let streamed = FileSystem.kind(of: absolute) == .other ? FileHandle(forReadingAtPath: absolute).map { $0.readDataToEndOfFile() } : nil
            guard let data = streamed ?? FileManager.default.contents(atPath: absolute) else {
                // What is wrong with it, and where its name came from when that is the environment
                // (a variable set long ago is not where one looks first).
                let why: String
                switch FileSystem.kind(of: absolute) {
                case .missing: why = "does not exist"
                case .directory: why = "is a folder, not a file"
                default:
                    let fd = open(absolute, O_RDONLY | O_CLOEXEC)
                    let code = fd < 0 ? errno : EIO
                    if fd >= 0 { close(fd) }
                    why = "cannot be read (\(String(cString: strerror(code))))"
                }
                let fromEnvironment = ProcessInfo.processInfo.environment["STORECTL_PASSWORD_FILE"].map { !$0.isEmpty && FileSystem.absolute($0) == absolute } ?? false
                throw StoreOpsError(.noInput, "the password file \(absolute)\(fromEnvironment ? " (named by STORECTL_PASSWORD_FILE)" : "") \(why)",
                                    hint: fromEnvironment ? "fix the path in STORECTL_PASSWORD_FILE, or pass --password-file" : "check the path and its permissions")
            }
            text = String(decoding: data, as: UTF8.self)
        case .command(let command, let folder):
            text = try Self.run(command, in: folder)
        case .prompt:
            text = try Self.prompt("\(purpose): ", confirm: confirm)
        case .unavailable(let why):
            throw StoreOpsError(.usage, "no password: \(why)",
                                hint: "name password_file or password_command under [snapshot] in the policy")
        }
        // The first line, however it ends: a String's "\r\n" is one Character, so splitting on
        // "\n" kept a CRLF file's whole text, line ending and all (77: a Windows-edited file).
        let line = text.components(separatedBy: CharacterSet(charactersIn: "\r\n")).first ?? ""
        guard !line.isEmpty else {
            // Where it came from: an empty file (or an empty first line) is named.
            let from: String = switch self {
            case .file(let path): " (the first line of \(FileSystem.absolute(path)))"
            case .command(let command, _): " (the first line `\(command)` printed)"
            default: ""
            }
            throw StoreOpsError(.usage, "the password is empty\(from)", hint: "a repository's password may not be empty")
        }
        return Data(line.utf8)
    }

    /// A password file's first line as a storectl before the CRLF fix read it (a file ending in
    /// "\r\n" gave its whole text, line ending included), when that differs: a repository made
    /// with such a file has a key for it, tried after the password opens none.
    public var legacyFileLine: Data? {
        guard case .file(let path) = self, let data = FileManager.default.contents(atPath: FileSystem.absolute(path)) else { return nil }
        let text = String(decoding: data, as: UTF8.self)
        let old = String(text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
            .trimmingCharacters(in: CharacterSet(charactersIn: "\r"))
        let new = text.components(separatedBy: CharacterSet(charactersIn: "\r\n")).first ?? ""
        return old != new && !old.isEmpty ? Data(old.utf8) : nil
    }

    /// How long a password command may take (`STORECTL_PASSWORD_COMMAND_TIMEOUT`, seconds; 60).
    /// A value that is not a number of seconds above 0 is refused (64): it was ignored, and the
    /// command given 60 s where its setter meant otherwise.
    static func commandTimeout() throws -> TimeInterval {
        guard let text = ProcessInfo.processInfo.environment["STORECTL_PASSWORD_COMMAND_TIMEOUT"] else { return 60 }
        guard let seconds = TimeInterval(text.trimmingCharacters(in: .whitespaces)), seconds.isFinite, seconds > 0, seconds <= 86_400 else {
            throw StoreOpsError(.usage, "STORECTL_PASSWORD_COMMAND_TIMEOUT=\(text.debugDescription) is not a number of seconds (above 0, at most 86400)",
                                hint: "set it to e.g. 30, or unset it for the default, 60")
        }
        return seconds
    }

    static func run(_ command: String, in folder: String? = nil) throws -> String {
        let what = folder.map { "the policy's password_command (run in \($0))" } ?? "STORECTL_PASSWORD_COMMAND"
        let timeout = try commandTimeout()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", command]
        if let environment = Self.scheduled.withLock({ $0 }) { process.environment = environment }
        if let folder { process.currentDirectoryURL = URL(fileURLWithPath: folder, isDirectory: true) }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardInput = FileHandle.nullDevice
        do { try process.run() } catch {
            throw StoreOpsError(.failure, "\(what) cannot be run: \(error)")
        }
        // Read on a thread of its own, so that a command that hangs (a password manager waiting
        // for a prompt no one sees under cron) neither ignores Ctrl-C or SIGTERM nor holds a
        // job's store lock forever: stopped at a signal (exit 128 + it) or after `commandTimeout`.
        final class Output: @unchecked Sendable { var data = Data() }
        let output = Output()
        let done = DispatchSemaphore(value: 0)
        let reader = pipe.fileHandleForReading
        DispatchQueue.global().async {
            output.data = reader.readDataToEndOfFile()
            done.signal()
        }
        let deadline = Date().addingTimeInterval(timeout)
        func stop() {
            let pid = process.processIdentifier
            if getpgid(pid) == pid { kill(-pid, SIGKILL) } else { kill(pid, SIGKILL) }
        }
        while done.wait(timeout: .now() + 0.1) == .timedOut {
            if let signal = ProcessSignals.received {
                stop()
                throw StoreOpsError(.signal(signal), "stopped by \(ProcessSignals.name(signal)) while the password command ran")
            }
            if Date() >= deadline {
                stop()
                throw StoreOpsError(.failure, "the password command did not finish within \(Format.duration(timeout))",
                                    hint: "run it by hand; a command that asks on a terminal cannot answer under cron (STORECTL_PASSWORD_COMMAND_TIMEOUT sets the limit in seconds)")
            }
        }
        let data = output.data
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            if Self.scheduled.withLock({ $0 != nil }) {
                throw StoreOpsError(.failure, "\(what) exited \(process.terminationStatus) when run as a scheduled job runs it (PATH=/usr/bin:/bin, no variables of this shell)",
                                    hint: "name the command by its full path, and let it find what it needs without this shell's variables; try it with `env -i HOME=$HOME PATH=/usr/bin:/bin sh -c '\(command)'`")
            }
            throw StoreOpsError(.failure, "\(what) exited \(process.terminationStatus)", hint: "run it by hand\(folder.map { " in \($0)" } ?? "") to see why")
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// Whether a prompt could ask (this process has a controlling terminal).
    public static var terminalAvailable: Bool {
        let fd = open("/dev/tty", O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { return false }
        close(fd)
        return true
    }

    /// Asks on /dev/tty with echo off.
    static func prompt(_ question: String, confirm: Bool) throws -> String {
        let fd = open("/dev/tty", O_RDWR | O_CLOEXEC)
        guard fd >= 0 else {
            throw StoreOpsError(.usage, confirm ? "no new password: there is no terminal to ask on" : "no password: there is no terminal to ask on",
                                hint: confirm ? "give the new password in a file: --new-password-file FILE (or STORECTL_NEW_PASSWORD_FILE) for `key add` and `key passwd`, --password-file FILE for `repo init`"
                                    : "pass --password-file FILE, or set STORECTL_PASSWORD_FILE or STORECTL_PASSWORD_COMMAND")
        }
        defer { close(fd) }
        func ask(_ text: String) -> String {
            var original = termios()
            tcgetattr(fd, &original)
            var silent = original
            silent.c_lflag &= ~tcflag_t(ECHO)
            tcsetattr(fd, TCSAFLUSH, &silent)
            defer {
                tcsetattr(fd, TCSAFLUSH, &original)
                _ = "\n".withCString { write(fd, $0, 1) }
            }
            _ = text.withCString { write(fd, $0, strlen($0)) }
            var bytes: [UInt8] = []
            var byte: UInt8 = 0
            while Foundation.read(fd, &byte, 1) == 1, byte != 0x0A, bytes.count < 4096 { bytes.append(byte) }
            return String(decoding: bytes, as: UTF8.self)
        }
        let first = ask(question)
        if confirm, ask("again: ") != first {
            throw StoreOpsError(.usage, "the two passwords differ; nothing was changed")
        }
        return first
    }
}
