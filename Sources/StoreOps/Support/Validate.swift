import Foundation

/// Checks of option values the CLI and the library share: a bad value is refused (64) naming the
/// option, before anything happens.
public enum Validate {
    /// A timeout in seconds: 0 to a week.
    public static func timeout(_ seconds: TimeInterval, option: String = "--timeout") throws {
        guard seconds.isFinite, seconds >= 0, seconds <= 7 * 86_400 else {
            throw StoreOpsError(.usage, "\(option) \(Format.number(seconds)): expected seconds from 0 to 604800 (a week)")
        }
    }

    /// The longest name of a file storectl makes: its manifest (`.manifest.json`) and swap record
    /// (`.storectl-swap.json`) beside it must fit in 255 bytes too.
    public static let maxOutputNameBytes = 200

    /// An output's file name is short enough (73 naming the output otherwise).
    public static func outputName(_ path: String, option: String = "--output") throws {
        let name = FileSystem.name(of: path)
        let bytes = name.utf8.count
        guard bytes <= maxOutputNameBytes else {
            throw StoreOpsError(.cannotCreate, "\(option): the output name \(name.prefix(40))… is \(bytes) bytes long; storectl needs at most \(maxOutputNameBytes)",
                                hint: "the manifest and the journal beside it get longer names, and a file name may have at most 255 bytes: choose a shorter name")
        }
    }

    /// A folder storectl is about to write into can be written: 73 naming it, and saying so when
    /// it is on a read-only file system (whose free space reads 0, which a space check would
    /// otherwise report as a full disk).
    public static func writableFolder(_ folder: String, option: String = "--output") throws {
        guard access(folder, W_OK | X_OK) != 0 else { return }
        let error = errno
        if error == EROFS {
            throw StoreOpsError(.cannotCreate, "\(folder) is on a read-only file system", hint: "choose an \(option) on a writable volume")
        }
        throw StoreOpsError.posix(error, doing: "writing into \(folder)", side: .output)
    }

    /// The byte offset of the first byte that is not valid UTF-8, or nil when all of it is.
    public static func firstInvalidUTF8(_ bytes: some Collection<UInt8>) -> Int? {
        var offset = 0
        var iterator = bytes.makeIterator()
        var pending: [UInt8] = []
        func width(_ lead: UInt8) -> Int? {
            switch lead {
            case 0x00...0x7F: 1
            case 0xC2...0xDF: 2
            case 0xE0...0xEF: 3
            case 0xF0...0xF4: 4
            default: nil
            }
        }
        while let byte = iterator.next() {
            if pending.isEmpty {
                guard let n = width(byte) else { return offset }
                if n > 1 { pending = [byte] }
            } else {
                guard byte & 0xC0 == 0x80 else { return offset - pending.count }
                pending.append(byte)
                if let n = width(pending[0]), pending.count == n {
                    // Overlong forms and surrogates are invalid too.
                    let scalar = String(decoding: pending, as: UTF8.self)
                    if scalar.unicodeScalars.first?.value == 0xFFFD { return offset - pending.count + 1 }
                    pending = []
                }
            }
            offset += 1
        }
        return pending.isEmpty ? nil : offset - pending.count
    }
}
