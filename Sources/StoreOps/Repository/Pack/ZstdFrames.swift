import CZstd
import Foundation

/// One-shot zstd compression of a pack's frames, with contexts kept for reuse (one per thread).
/// Frames carry zstd's content checksum (written, not verified on reading: see `init`).
final class ZstdFrames {
    private let compressor: OpaquePointer
    private let decompressor: OpaquePointer
    let level: Int32
    /// Reused by `withDecompressed`: a frame's plaintext (1 MiB of pages) in fresh memory each
    /// time cost a page fault per 4 KiB, 262,000 of them for a 1 GiB restore.
    private var scratch: UnsafeMutableRawPointer?
    private var scratchBytes = 0

    /// - Parameter checksum: write zstd's content checksum (an XXH64 of every byte; what stays in
    ///   memory for a moment, checked otherwise, does without it).
    init(level: Int, checksum: Bool = true) throws {
        guard let c = ZSTD_createCCtx(), let d = ZSTD_createDCtx() else { throw StoreOpsError(.failure, "zstd: out of memory") }
        compressor = c
        decompressor = d
        self.level = Int32(level)
        ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, self.level)
        ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, checksum ? 1 : 0)
        // Reading, zstd's checksum is not verified (an XXH64 over every byte, about a tenth of
        // the decompression's time): a frame is authenticated as a whole before it is
        // decompressed (AES-GCM; a plain repository's by SHA-256) and every blob taken from it
        // is checked against its content id, so a damaged frame is caught either way. zstd's
        // ZSTD_d_forceIgnoreChecksum (experimentalParam3, 1002; zstd 1.4.7 and later): a
        // library that refuses it verifies as before.
        _ = ZSTD_DCtx_setParameter(d, ZSTD_dParameter(rawValue: 1002), 1)
    }

    deinit {
        ZSTD_freeCCtx(compressor)
        ZSTD_freeDCtx(decompressor)
        free(scratch)
    }

    /// Compresses `input` as one zstd frame or, with `chunkBytes`, as independent zstd frames of
    /// `chunkBytes` each (the last shorter) laid end to end. Either decompresses in one call
    /// (zstd reads concatenated frames as one stream: readers that know nothing of chunks read
    /// them as before); chunks also let a reader that needs a few pages of a frame decompress
    /// only the chunks holding them (`withDecompressed(_:rawLength:only:what:_:)` with `only`).
    func compress(_ input: UnsafeRawBufferPointer, chunkBytes: Int? = nil) throws -> Data {
        // Into uninitialised memory (a `Data(count:)` would zero the whole bound first), handed
        // to the `Data` without a copy.
        let chunk = max(1, min(chunkBytes ?? input.count, input.count))
        let chunks = max(1, (input.count + chunk - 1) / chunk)
        let bound = ZSTD_compressBound(chunk) * chunks
        guard let buffer = malloc(max(1, bound)) else { throw StoreOpsError(.failure, "zstd: out of memory") }
        var written = 0
        for c in 0..<chunks {
            let start = c * chunk, count = min(chunk, input.count - start)
            let n = ZSTD_compress2(compressor, buffer + written, bound - written, input.baseAddress.map { $0 + start }, count)
            guard ZSTD_isError(n) == 0 else {
                free(buffer)
                throw StoreOpsError(.failure, "zstd: \(String(cString: ZSTD_getErrorName(n)))")
            }
            written += n
        }
        return Data(bytesNoCopy: realloc(buffer, max(1, written)) ?? buffer, count: written, deallocator: .free)
    }

    /// Raw bytes decompressed by this object (`withDecompressed`), for a reader's statistics.
    private(set) var bytesDecompressed = 0

    /// Decompresses a frame into memory this object reuses and hands it to `body` as a `Data`
    /// that is valid only during the call (whatever outlives it must be copied out).
    ///
    /// `wanted`: only the zstd frames (chunks, see `compress(_:chunkBytes:)`) holding a byte of
    /// these ranges are decompressed, and the rest of the plaintext is unwritten and must not be
    /// read; a frame written as one chunk, or whose chunks do not say their size, is
    /// decompressed whole, as with nil. The chunks must add up to `rawLength` (65 naming `what`
    /// otherwise).
    func withDecompressed<R>(_ input: Data, rawLength: Int, only wanted: [Range<Int>]? = nil, what: String,
                             _ body: (Data) throws -> R) throws -> R {
        let needed = max(1, rawLength)
        if scratchBytes < needed {
            free(scratch)
            scratch = malloc(needed)
            scratchBytes = scratch == nil ? 0 : needed
        }
        guard let buffer = scratch else { throw StoreOpsError(.failure, "zstd: out of memory") }
        if let wanted, let chunks = try chunks(of: input, rawLength: rawLength, what: what) {
            let sorted = wanted.filter { !$0.isEmpty }.sorted { $0.lowerBound < $1.lowerBound }
            var w = 0
            try input.withUnsafeBytes { source in
                guard let base = source.baseAddress else { return }
                for chunk in chunks {
                    while w < sorted.count, sorted[w].upperBound <= chunk.raw.lowerBound { w += 1 }
                    guard w < sorted.count, sorted[w].lowerBound < chunk.raw.upperBound else { continue }
                    // The chunk up to the last wanted byte in it: zstd decodes a chunk block by
                    // block (up to 128 KiB of plaintext each), so a page in a 256 KiB chunk's
                    // first half costs half of it.
                    var end = chunk.raw.lowerBound
                    for range in sorted[w...] {
                        guard range.lowerBound < chunk.raw.upperBound else { break }
                        end = max(end, min(range.upperBound, chunk.raw.upperBound))
                    }
                    if end == chunk.raw.upperBound {
                        let produced = ZSTD_decompressDCtx(decompressor, buffer + chunk.raw.lowerBound, chunk.raw.count,
                                                           base + chunk.source.lowerBound, chunk.source.count)
                        try Self.check(produced, expected: chunk.raw.count, what: what)
                    } else {
                        try decompressPrefix(base + chunk.source.lowerBound, count: chunk.source.count,
                                             into: buffer + chunk.raw.lowerBound, prefix: end - chunk.raw.lowerBound, what: what)
                    }
                    bytesDecompressed += end - chunk.raw.lowerBound
                }
            }
        } else {
            try decompress(input, into: buffer, rawLength: rawLength, what: what)
            bytesDecompressed += rawLength
        }
        return try body(Data(bytesNoCopy: buffer, count: rawLength, deallocator: .none))
    }

    /// The first `prefix` bytes of the plaintext of the zstd frame at `source` (`count` bytes),
    /// which holds more: decoded as a stream that stops once they are out. 65 naming `what` when
    /// the frame is damaged or ends before them.
    private func decompressPrefix(_ source: UnsafeRawPointer, count: Int, into target: UnsafeMutableRawPointer, prefix: Int, what: String) throws {
        ZSTD_DCtx_reset(decompressor, ZSTD_reset_session_only)
        var input = ZSTD_inBuffer(src: source, size: count, pos: 0)
        var output = ZSTD_outBuffer(dst: target, size: prefix, pos: 0)
        while output.pos < output.size {
            let before = (input.pos, output.pos)
            let left = ZSTD_decompressStream(decompressor, &output, &input)
            guard ZSTD_isError(left) == 0 else { throw Self.damaged(what, String(cString: ZSTD_getErrorName(left))) }
            // Done (0), or no progress with all input taken: the frame holds fewer bytes than
            // its header said.
            if output.pos < output.size, left == 0 || (input.pos == before.0 && output.pos == before.1) {
                throw Self.damaged(what, "a chunk ends after \(output.pos) bytes of the \(prefix) wanted")
            }
        }
    }

    /// Where each zstd frame (chunk) of `input` lies in it and in the plaintext; nil when it is
    /// one chunk or a chunk does not say its size (then it is decompressed whole).
    private func chunks(of input: Data, rawLength: Int, what: String) throws -> [(source: Range<Int>, raw: Range<Int>)]? {
        try input.withUnsafeBytes { source in
            guard let base = source.baseAddress else { return nil }
            var chunks: [(source: Range<Int>, raw: Range<Int>)] = []
            var at = 0, rawAt = 0
            while at < source.count {
                let size = ZSTD_findFrameCompressedSize(base + at, source.count - at)
                guard ZSTD_isError(size) == 0 else { throw Self.damaged(what, String(cString: ZSTD_getErrorName(size))) }
                let content = ZSTD_getFrameContentSize(base + at, size)
                guard content != ZSTD_CONTENTSIZE_UNKNOWN, content != ZSTD_CONTENTSIZE_ERROR,
                      content <= UInt64(rawLength - rawAt) else { return nil }
                chunks.append((at..<(at + size), rawAt..<(rawAt + Int(content))))
                at += size
                rawAt += Int(content)
            }
            guard rawAt == rawLength else { throw Self.damaged(what, "its chunks hold \(rawAt) bytes instead of \(rawLength)") }
            return chunks.count > 1 ? chunks : nil
        }
    }

    private static func damaged(_ what: String, _ why: String) -> StoreOpsError {
        StoreOpsError(.badData, "\(what) does not decompress (\(why)); it is damaged", hint: Sealer.damagedHint)
    }

    /// 65 naming `what` unless zstd produced exactly `expected` bytes.
    private static func check(_ produced: Int, expected: Int, what: String) throws {
        guard ZSTD_isError(produced) == 0, produced == expected else {
            throw damaged(what, ZSTD_isError(produced) != 0 ? String(cString: ZSTD_getErrorName(produced)) : "\(produced) bytes instead of \(expected)")
        }
    }

    /// Decompresses a frame that must hold exactly `rawLength` bytes; anything else is damage
    /// (exit 65 naming `what`).
    func decompress(_ input: Data, rawLength: Int, what: String) throws -> Data {
        // Into uninitialised memory, as `compress` does: zstd writes every byte it reports.
        guard let buffer = malloc(max(1, rawLength)) else { throw StoreOpsError(.failure, "zstd: out of memory") }
        do {
            try decompress(input, into: buffer, rawLength: rawLength, what: what)
        } catch {
            free(buffer)
            throw error
        }
        return Data(bytesNoCopy: buffer, count: rawLength, deallocator: .free)
    }

    /// Decompresses `input` into `buffer` (room for `rawLength` bytes); 65 naming `what` unless
    /// it holds exactly `rawLength` bytes.
    private func decompress(_ input: Data, into buffer: UnsafeMutableRawPointer, rawLength: Int, what: String) throws {
        let produced = input.withUnsafeBytes { source in
            ZSTD_decompressDCtx(decompressor, buffer, rawLength, source.baseAddress, source.count)
        }
        try Self.check(produced, expected: rawLength, what: what)
    }
}
