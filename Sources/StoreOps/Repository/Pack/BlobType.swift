/// What a blob in a pack holds.
public enum BlobType: UInt8, Sendable, Codable, CaseIterable {
    /// One database page.
    case page = 1
    /// A run of a page map's ids (`PageMap`): its base, in chunks.
    case mapChunk = 2
    /// A page map's changes against its base.
    case mapDelta = 3
    /// Up to 1 MiB of an external-data file.
    case fileChunk = 4

    var name: String {
        switch self {
        case .page: return "page"
        case .mapChunk: return "map chunk"
        case .mapDelta: return "map delta"
        case .fileChunk: return "file chunk"
        }
    }
}
