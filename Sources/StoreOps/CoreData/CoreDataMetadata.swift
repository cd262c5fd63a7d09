import Foundation
import GRDB

/// What a Core Data / SwiftData store says about itself in `Z_METADATA.Z_PLIST`.
public struct CoreDataMetadata: Sendable, Codable, Equatable {
    public var storeType: String?
    public var frameworkVersion: Int?
    public var uuid: String?
    /// Entity name -> version hash (base64, as Core Data's model files write it).
    public var modelVersionHashes: [String: String]
    public var modelVersionIdentifiers: [String]
    public var modelVersionHashesDigest: String?
    public var modelVersionChecksum: String?
}
