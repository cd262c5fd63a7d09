import Foundation
import StoreLab
@testable import StoreOps
import Testing

@Suite("replicate's view of the external-data folder")
struct ExternalFolderWatchTests {
    let old = Date().addingTimeInterval(-60)

    func put(_ text: String, _ name: String, in folder: String, aged: Bool = false) throws {
        let path = (folder as NSString).appendingPathComponent(name)
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        if aged { try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: path) }
    }

    @Test("a new file is carried once; a file read while still being written is read again once it grows; a removed file and a removed folder are reported; a settled, unchanged folder costs no listing")
    func scan() throws {
        let folder = try TempFolder("storectl-external-watch")
        let external = folder.file("_EXTERNAL_DATA")
        try FileManager.default.createDirectory(atPath: external, withIntermediateDirectories: true)
        let x = (external as NSString).appendingPathComponent("X")
        try put("part", "X", in: external)
        try put("abc", "BASE", in: external, aged: true)
        var watch = ExternalFolderWatch(folder: external, known: ["BASE": 3])
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
        // A folder listed long after its mtime, and unchanged since, is not listed again: a file
        // written behind its back with the old mtime put back is not seen (what the stat saves).
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: external)
        #expect(watch.scan().isEmpty)
        try put("hidden", "Y", in: external)
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: external)
        #expect(watch.scan().isEmpty, "the folder's mtime says nothing changed")
        try FileManager.default.setAttributes([.modificationDate: Date()], ofItemAtPath: external)
        #expect(watch.scan().added.map(\.file.name) == ["Y"])
        try FileManager.default.removeItem(atPath: external)
        #expect(watch.scan().removed == ["BASE", "Y"])
    }

    @Test("what one read leaves over (the byte budget) is carried by the next even though the folder did not change; a known file whose size differs from the record (read by the base while being written) is read again at the first listing; a file too large is reported once, not carried")
    func leftovers() throws {
        let folder = try TempFolder("storectl-external-watch")
        let external = folder.file("_EXTERNAL_DATA")
        try FileManager.default.createDirectory(atPath: external, withIntermediateDirectories: true)
        try put(String(repeating: "a", count: 100), "A", in: external, aged: true)
        try put(String(repeating: "b", count: 100), "B", in: external, aged: true)
        try put("whole now", "BASE", in: external, aged: true)
        try put(String(repeating: "c", count: 500), "C", in: external, aged: true)
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: external)
        var watch = ExternalFolderWatch(folder: external, known: ["BASE": 4])
        let first = watch.scan(budget: 150, maxFile: 400)
        // A (100 bytes) and BASE (9, its record says 4) fit in 150; B waits; C is too large.
        #expect(first.added.map(\.file.name) == ["A", "BASE"] && first.added.last?.file.bytes == 9 && first.notCarried.map(\.name) == ["C"],
                "\(first.added.map(\.file)) \(first.notCarried)")
        let second = watch.scan(budget: 150, maxFile: 400)
        #expect(second.added.map(\.file.name) == ["B"] && second.notCarried.isEmpty, "\(second.added.map(\.file.name))")
        #expect(watch.scan(budget: 150, maxFile: 400).isEmpty)
        // A subfolder and a symbolic link are reported once as not carried (a point then takes
        // the next snapshot's files, and says so), not left out without a word.
        try FileManager.default.createDirectory(atPath: (external as NSString).appendingPathComponent("sub"), withIntermediateDirectories: false)
        try FileManager.default.createSymbolicLink(atPath: (external as NSString).appendingPathComponent("link"), withDestinationPath: "A")
        let odd = watch.scan(budget: 150, maxFile: 400)
        #expect(odd.added.isEmpty && odd.notCarried.map(\.name) == ["link", "sub"], "\(odd.notCarried)")
        #expect(odd.notCarried.first?.reason.contains("symbolic link") == true && odd.notCarried.last?.reason.contains("a folder") == true)
        #expect(watch.scan(budget: 150, maxFile: 400).isEmpty, "reported once")
    }
}
