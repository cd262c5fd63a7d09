import Foundation
import Testing

/// The maps of the library's folders (README's "How it is built", the comment at the top of
/// `Sources/StoreOps/StoreOps.swift`) name every folder the tree has, so neither can leave one out
/// again (they had left out Repository/ and S3/, a third of the library).
@Suite("folder maps", .onTestThreads)
struct FolderMapTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func folders(under path: String) throws -> [String] {
        let base = root.appendingPathComponent(path).path
        var out: [String] = []
        guard let walker = FileManager.default.enumerator(atPath: base) else { return [] }
        while let relative = walker.nextObject() as? String {
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: (base as NSString).appendingPathComponent(relative), isDirectory: &isFolder), isFolder.boolValue {
                out.append(relative)
            }
        }
        return out.sorted()
    }

    @Test("README's 'How it is built' and StoreOps.swift's map name every folder of Sources/StoreOps")
    func mapsNameEveryFolder() throws {
        let folders = try Self.folders(under: "Sources/StoreOps")
        #expect(folders.count >= 20, "\(folders)")
        let readme = try String(contentsOf: Self.root.appendingPathComponent("README.md"), encoding: .utf8)
        let built = try #require(readme.components(separatedBy: "## How it is built").dropFirst().first)
        let map = try String(contentsOf: Self.root.appendingPathComponent("Sources/StoreOps/StoreOps.swift"), encoding: .utf8)
        for folder in folders {
            let name = (folder as NSString).lastPathComponent
            #expect(built.contains("`\(name)/`"), "README's How it is built does not name \(folder)/")
            #expect(map.contains("\(name)/"), "StoreOps.swift's folder map does not name \(folder)/")
        }
    }
}
