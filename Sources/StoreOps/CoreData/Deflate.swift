import CZlib
import Foundation

/// Raw DEFLATE (RFC 1951, no zlib header), the encoding of Core Data's `Z_MODELCACHE.Z_CONTENT`.
public enum Deflate {
    /// Inflates raw DEFLATE data.
    ///
    /// - Parameter limit: refuse to produce more than this many bytes (a corrupt or hostile blob
    ///   cannot make us allocate without bound).
    /// - Throws: exit 65 when the data is not valid raw DEFLATE.
    public static func inflate(_ input: Data, limit: Int = 256 << 20) throws -> Data {
        var stream = z_stream()
        guard storectl_inflate_init_raw(&stream) == Z_OK else {
            throw StoreOpsError(.failure, "zlib: cannot initialise inflate")
        }
        defer { inflateEnd(&stream) }
        var output = Data()
        let chunk = 64 << 10
        var buffer = [UInt8](repeating: 0, count: chunk)
        var status: Int32 = Z_OK
        try input.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            stream.next_in = UnsafeMutablePointer(mutating: raw.bindMemory(to: Bytef.self).baseAddress)
            stream.avail_in = uInt(raw.count)
            repeat {
                let produced: Int = buffer.withUnsafeMutableBufferPointer { out in
                    stream.next_out = out.baseAddress
                    stream.avail_out = uInt(chunk)
                    status = CZlib.inflate(&stream, Z_NO_FLUSH)
                    return chunk - Int(stream.avail_out)
                }
                guard status == Z_OK || status == Z_STREAM_END || (status == Z_BUF_ERROR && produced > 0) else {
                    let detail = stream.msg.map { String(cString: $0) } ?? "zlib status \(status)"
                    throw StoreOpsError(.badData, "not valid raw DEFLATE data (\(detail))")
                }
                output.append(contentsOf: buffer[0..<produced])
                guard output.count <= limit else {
                    throw StoreOpsError(.badData, "inflated data exceeds \(Format.bytes(limit))")
                }
                if status == Z_BUF_ERROR || (produced == 0 && stream.avail_in == 0 && status != Z_STREAM_END) {
                    throw StoreOpsError(.badData, "raw DEFLATE data ends early (truncated)")
                }
            } while status != Z_STREAM_END
        }
        return output
    }

    /// Compresses to raw DEFLATE (used to build sample stores with a model cache).
    public static func deflate(_ input: Data, level: Int32 = 6) throws -> Data {
        var stream = z_stream()
        guard storectl_deflate_init_raw(&stream, level) == Z_OK else {
            throw StoreOpsError(.failure, "zlib: cannot initialise deflate")
        }
        defer { deflateEnd(&stream) }
        var output = Data()
        let chunk = 64 << 10
        var buffer = [UInt8](repeating: 0, count: chunk)
        var status: Int32 = Z_OK
        input.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            stream.next_in = UnsafeMutablePointer(mutating: raw.bindMemory(to: Bytef.self).baseAddress)
            stream.avail_in = uInt(raw.count)
            repeat {
                let produced: Int = buffer.withUnsafeMutableBufferPointer { out in
                    stream.next_out = out.baseAddress
                    stream.avail_out = uInt(chunk)
                    status = CZlib.deflate(&stream, Z_FINISH)
                    return chunk - Int(stream.avail_out)
                }
                output.append(contentsOf: buffer[0..<produced])
            } while status == Z_OK
        }
        guard status == Z_STREAM_END else { throw StoreOpsError(.failure, "zlib: deflate failed (\(status))") }
        return output
    }
}
