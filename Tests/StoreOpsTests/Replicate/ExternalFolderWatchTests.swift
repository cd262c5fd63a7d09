import Foundation
import StoreLab
@testable import StoreOps
import Testing

@Suite("replicate's view of the external-data folder")
struct ExternalFolderWatchTests {
    @Test("a new file is carried once; a file read while still being written is read again once it grows; a removed file and a removed folder are reported; a settled, unchanged folder costs no listing")
    func scan() throws {
        let folder = try TempFolder("storectl-external-watch")
        let external = folder.file("_EXTERNAL_DATA")
        try FileManager.default.createDirectory(atPath: external, withIntermediateDirectories: true)
        let x = (external as NSString).appendingPathComponent("X")
        try Data("part".utf8).write(to: URL(fileURLWithPath: x))
        var watch = ExternalFolderWatch(folder: external, known: ["BASE": 3])
        try Data("abc".utf8).write(to: URL(fileURLWithPath: (external as NSString).appendingPathComponent("BASE")))
        var change = watch.scan()
        #expect(change.added.map(\.file.name) == ["X"] && change.added.first?.bytes == Array("part".utf8) && change.removed.isEmpty)
        change = watch.scan()
        #expect(change.isEmpty, "nothing changed: nothing carried again")
        // The app was still writing X: it grows, the folder's listing does not change.
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: x))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(" and the rest".utf8))
        try handle.close()
        change = watch.scan()
        #expect(change.added.map(\.file.name) == ["X"] && change.added.first?.file.bytes == 17, "\(change.added.map(\.file))")
        #expect(change.added.first?.file.sha256 == Hashing.sha256(Data("part and the rest".utf8)))
        try FileManager.default.removeItem(atPath: x)
        change = watch.scan()
        #expect(change.removed == ["X"] && change.added.isEmpty)
        // A folder whose mtime is older than the settle time and unchanged is not listed: a file
        // written behind its back with the old mtime restored is not seen (what the stat saves).
        let old = Date().addingTimeInterval(-60)
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: external)
        #expect(watch.scan().isEmpty)
        try Data("hidden".utf8).write(to: URL(fileURLWithPath: (external as NSString).appendingPathComponent("Y")))
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: external)
        #expect(watch.scan().isEmpty, "the folder's mtime says nothing changed")
        try FileManager.default.setAttributes([.modificationDate: Date()], ofItemAtPath: external)
        #expect(watch.scan().added.map(\.file.name) == ["Y"])
        try FileManager.default.removeItem(atPath: external)
        #expect(watch.scan().removed == ["BASE", "Y"])
    }
}
