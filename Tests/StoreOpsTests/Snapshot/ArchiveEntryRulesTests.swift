import Foundation
import StoreOps
import Testing

@Suite("archive entry rules (pure)")
struct ArchiveEntryRulesTests {
    let expected: Set<String> = ["manifest.json", "store/Tasks.sqlite"]
    let regular = ArchiveEntryRules.FileType.regular.rawValue

    @Test func acceptsListedFiles() {
        #expect(ArchiveEntryRules.problem(name: "store/Tasks.sqlite", fileType: regular, symlinkTarget: nil, hardlinkTarget: nil, expected: expected) == nil)
    }

    @Test(arguments: [
        ("/etc/passwd", ArchiveEntryRules.FileType.regular, nil, nil, "an absolute path"),
        ("store/../../escape", .regular, nil, nil, "a path with '..'"),
        ("..", .regular, nil, nil, "a path with '..'"),
        ("store/link", .symlink, "/etc/shadow", nil, "a symbolic link"),
        ("store/Tasks.sqlite", .regular, nil, "../../outside", "a hard link"),
        ("store/dev", .characterDevice, nil, nil, "a device file"),
        ("store/blk", .blockDevice, nil, nil, "a device file"),
        ("store/pipe", .fifo, nil, nil, "a FIFO"),
        ("store/extra.bin", .regular, nil, nil, "the manifest does not list"),
        ("store", .directory, nil, nil, "an unexpected folder"),
        ("", .regular, nil, nil, "without a name"),
    ] as [(String, ArchiveEntryRules.FileType, String?, String?, String)])
    func refuses(_ name: String, _ type: ArchiveEntryRules.FileType, _ symlink: String?, _ hardlink: String?, _ problem: String) {
        let found = ArchiveEntryRules.problem(name: name, fileType: type.rawValue, symlinkTarget: symlink, hardlinkTarget: hardlink, expected: expected)
        #expect(found?.contains(problem) == true, "\(name): \(found ?? "accepted")")
    }
}
