import ArgumentParser
import StoreOps

/// `--password-file` for every command that opens a repository. The password itself is never an
/// argument (it would show in `ps` and in shell history).
struct PasswordOption: ParsableArguments {
    @Option(help: ArgumentHelp("A file whose first line is the repository's password (else STORECTL_PASSWORD_FILE, STORECTL_PASSWORD_COMMAND, or a prompt).",
                               valueName: "file"))
    var passwordFile: String?

    var source: PasswordSource { .resolve(file: passwordFile) }

    /// Only what the command line says: for commands whose policy may name a source of its own
    /// (the command line wins over the policy, the policy over the environment).
    var override: PasswordSource? { passwordFile.map { .file($0) } }
}
