import ArgumentParser
import Foundation
import StoreOps

struct KeyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "key",
        abstract: "The passwords of an encrypted repository: list, add, remove, passwd.",
        discussion: reflow("""
            Each key wraps the repository's one master key under one password (scrypt), so adding or removing a key
            re-encrypts nothing. The new password comes from --new-password-file, STORECTL_NEW_PASSWORD_FILE, or a prompt.
            """),
        subcommands: [KeyListCommand.self, KeyAddCommand.self, KeyRemoveCommand.self, KeyPasswdCommand.self])
}

/// Where a new password comes from: never an argument.
struct NewPasswordOption: ParsableArguments {
    @Option(help: ArgumentHelp("A file whose first line is the new password (else STORECTL_NEW_PASSWORD_FILE, or a prompt).", valueName: "file"))
    var newPasswordFile: String?

    var source: PasswordSource {
        if let newPasswordFile { return .file(newPasswordFile) }
        if let file = ProcessInfo.processInfo.environment["STORECTL_NEW_PASSWORD_FILE"], !file.isEmpty { return .file(file) }
        return .prompt
    }
}

struct KeyListCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List the repository's keys.")
    @Option(help: "The snapshot repository.") var repo: String
    @OptionGroup var password: PasswordOption
    @Flag(help: "Print the keys as JSON.") var json = false

    func run() throws {
        let keys = try RepositoryKeys.list(.init(location: repo, password: password.source))
        if json { print(jsonReport(keys)); return }
        for key in keys {
            print("\(key.current ? "*" : " ") \(key.id)  \(Timestamp.iso(key.created).prefix(19).replacingOccurrences(of: "T", with: " "))  \(key.user)@\(key.host)")
        }
    }
}

struct KeyAddCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(commandName: "add", abstract: "Add a key for a new password.")
    @Option(help: "The snapshot repository.") var repo: String
    @OptionGroup var password: PasswordOption
    @OptionGroup var newPassword: NewPasswordOption
    @Flag(help: "Wait for other users of the repository instead of exiting 75.") var wait = false
    @Flag(help: "Print the result as JSON.") var json = false

    func run() throws {
        let id = try RepositoryKeys.add(.init(location: repo, password: password.source, newPassword: newPassword.source, wait: wait))
        print(json ? jsonReport(["added": id]) : "added key \(id)")
    }
}

struct KeyRemoveCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(commandName: "remove", abstract: "Remove a key (not the one whose password is given).")
    @Option(help: "The snapshot repository.") var repo: String
    @Argument(help: "The key id (`storectl key list`).") var id: String
    @OptionGroup var password: PasswordOption
    @Flag(help: "Wait for other users of the repository instead of exiting 75.") var wait = false
    @Flag(help: "Print the result as JSON.") var json = false

    func run() throws {
        // The whole id (the argument may be its start).
        let removed = try RepositoryKeys.remove(.init(location: repo, password: password.source, wait: wait), id: id)
        print(json ? jsonReport(["removed": removed]) : "removed key \(removed)")
    }
}

struct KeyPasswdCommand: ParsableCommand, JSONOutput {
    static let configuration = CommandConfiguration(commandName: "passwd", abstract: "Change the password: a new key replaces the one it opens.")
    @Option(help: "The snapshot repository.") var repo: String
    @OptionGroup var password: PasswordOption
    @OptionGroup var newPassword: NewPasswordOption
    @Flag(help: "Wait for other users of the repository instead of exiting 75.") var wait = false
    @Flag(help: "Print the result as JSON.") var json = false

    func run() throws {
        let (added, removed) = try RepositoryKeys.passwd(.init(location: repo, password: password.source, newPassword: newPassword.source, wait: wait))
        print(json ? jsonReport(["added": added, "removed": removed]) : "added key \(added), removed key \(removed)")
    }
}
