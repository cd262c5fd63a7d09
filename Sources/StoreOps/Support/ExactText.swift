import Foundation

/// Names compared as the bytes they are. A Linux file name is bytes, but Swift's `String` `==`
/// (and its hash) take canonically equivalent text for the same: `café` written with é (NFC) and
/// with e and a combining accent (NFD) are two folders on disk and one string, so two stores were
/// one store to retention (one's snapshots removed as the other's), to a parent's choice, to an
/// in-place restore's same-store check, and to `replicate` (the second store never followed).
extension String {
    /// Whether the two are the same bytes.
    public func isExactly(_ other: String) -> Bool { utf8.elementsEqual(other.utf8) }

    /// A key for dictionaries and sets whose equality is the bytes': the text itself when ASCII,
    /// else every byte past ASCII (and `%`) escaped as `%XX`.
    public var exactKey: String {
        guard utf8.contains(where: { $0 >= 0x80 || $0 == 0x25 }) else { return self }
        var out = ""
        out.reserveCapacity(utf8.count + 16)
        for byte in utf8 {
            if byte >= 0x80 || byte == 0x25 { out += String(format: "%%%02X", byte) } else { out.unicodeScalars.append(Unicode.Scalar(byte)) }
        }
        return out
    }
}
