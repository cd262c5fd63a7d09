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

    init(level: Int) throws {
        guard let c = ZSTD_createCCtx(), let d = ZSTD_createDCtx() else { throw StoreOpsError(.failure, "zstd: out of memory") }
        compressor = c
        decompressor = d
        self.level = Int32(level)
        ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, self.level)
        ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1)
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

    func compress(_ input: UnsafeRawBufferPointer) throws -> Data {
        // Into uninitialised memory (a `Data(count:)` would zero the whole bound first), handed
        // to the `Data` without a copy.
        let bound = ZSTD_compressBound(input.count)
        guard let buffer = malloc(max(1, bound)) else { throw StoreOpsError(.failure, "zstd: out of memory") }
        let written = ZSTD_compress2(compressor, buffer, bound, input.baseAddress, input.count)
        guard ZSTD_isError(written) == 0 else {
            free(buffer)
            throw StoreOpsError(.failure, "zstd: \(String(cString: ZSTD_getErrorName(written)))")
        }
        return Data(bytesNoCopy: realloc(buffer, max(1, written)) ?? buffer, count: written, deallocator: .free)
    }

    /// Decompresses a frame into memory this object reuses and hands it to `body` as a `Data`
    /// that is valid only during the call (whatever outlives it must be copied out).
    func withDecompressed<R>(_ input: Data, rawLength: Int, what: String, _ body: (Data) throws -> R) throws -> R {
        let needed = max(1, rawLength)
        if scratchBytes < needed {
            free(scratch)
            scratch = malloc(needed)
            scratchBytes = scratch == nil ? 0 : needed
        }
        guard let buffer = scratch else { throw StoreOpsError(.failure, "zstd: out of memory") }
        try decompress(input, into: buffer, rawLength: rawLength, what: what)
        return try body(Data(bytesNoCopy: buffer, count: rawLength, deallocator: .none))
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
        guard ZSTD_isError(produced) == 0, produced == rawLength else {
            let why = ZSTD_isError(produced) != 0 ? String(cString: ZSTD_getErrorName(produced)) : "\(produced) bytes instead of \(rawLength)"
            throw StoreOpsError(.badData, "\(what) does not decompress (\(why)); it is damaged", hint: Sealer.damagedHint)
        }
    }
}
