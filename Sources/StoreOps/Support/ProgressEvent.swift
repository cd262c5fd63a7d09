import Foundation

/// What a running operation reports: a stage starting, how far a long step is, a line worth
/// telling (a migration applied). The one progress type of every operation.
public enum ProgressEvent: Sendable {
    case stage(String)
    case step(ProgressUpdate)
    case note(String)
}
