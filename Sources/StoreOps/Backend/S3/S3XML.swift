import Foundation

/// The little XML S3 answers with (ListObjectsV2, errors, multipart uploads): elements found by
/// name, text unescaped. S3's responses are flat and regular, so this is enough, and it keeps
/// libxml2 out of the binary.
enum S3XML {
    /// The text of every `<tag>…</tag>` in `text`, in order.
    static func values(_ tag: String, in text: Substring) -> [String] {
        blocks(tag, in: text).map { unescape(String($0)) }
    }

    static func value(_ tag: String, in text: Substring) -> String? { values(tag, in: text).first }

    /// The inside of every `<tag>…</tag>` (or `<tag attr…>…</tag>`).
    static func blocks(_ tag: String, in text: Substring) -> [Substring] {
        var out: [Substring] = []
        var rest = text[...]
        let close = "</\(tag)>"
        while let open = rest.range(of: "<\(tag)") {
            guard let end = rest[open.upperBound...].firstIndex(of: ">") else { break }
            let head = rest[open.upperBound..<end]
            // `<Key>` must not match `<KeyCount>`.
            guard head.isEmpty || head.first == " " else { rest = rest[end...]; continue }
            if rest[..<end].hasSuffix("/") { out.append(""); rest = rest[rest.index(after: end)...]; continue }
            let bodyStart = rest.index(after: end)
            guard let closing = rest[bodyStart...].range(of: close) else { break }
            out.append(rest[bodyStart..<closing.lowerBound])
            rest = rest[closing.upperBound...]
        }
        return out
    }

    static func unescape(_ text: String) -> String {
        guard text.contains("&") else { return text }
        var out = ""
        var rest = text[...]
        while let amp = rest.firstIndex(of: "&") {
            out += rest[..<amp]
            guard let semi = rest[amp...].firstIndex(of: ";") else { out += rest[amp...]; return out }
            let entity = rest[rest.index(after: amp)..<semi]
            switch entity {
            case "amp": out += "&"
            case "lt": out += "<"
            case "gt": out += ">"
            case "quot": out += "\""
            case "apos": out += "'"
            default:
                var scalar: UInt32?
                if entity.hasPrefix("#x") { scalar = UInt32(entity.dropFirst(2), radix: 16) } else if entity.hasPrefix("#") { scalar = UInt32(entity.dropFirst()) }
                if let scalar, let u = UnicodeScalar(scalar) { out.unicodeScalars.append(u) } else { out += rest[amp...semi] }
            }
            rest = rest[rest.index(after: semi)...]
        }
        return out + rest
    }
}
