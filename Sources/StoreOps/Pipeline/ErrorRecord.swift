import Foundation

/// A StoreOpsError as reports carry it (JSON).
public struct ErrorRecord: Sendable, Codable, Equatable {
    public var status: Int32
    public var message: String
    public var hint: String?
    public init(_ error: StoreOpsError) {
        status = error.status.rawValue
        message = error.message
        hint = error.hint
    }
}
