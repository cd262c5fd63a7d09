import Synchronization

/// Things the user must be told whatever the command (a plain, unencrypted repository), said
/// once per run. The library reports them here; the CLI decides how they are shown (stderr).
public enum Notices {
    private static let state = Mutex<(handler: (@Sendable (String) -> Void)?, said: Set<String>)>((nil, []))

    /// Installs where notices go (the CLI: standard error).
    public static func install(_ handler: @escaping @Sendable (String) -> Void) {
        state.withLock { $0.handler = handler }
    }

    /// Says `message` unless it was said already in this run.
    static func say(_ message: String) {
        let handler: (@Sendable (String) -> Void)? = state.withLock { state in
            state.said.insert(message).inserted ? state.handler : nil
        }
        handler?(message)
    }
}
