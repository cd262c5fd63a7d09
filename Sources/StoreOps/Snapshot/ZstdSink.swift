import CZstd
import Foundation

/// Compresses a byte stream with zstd, in a bounded amount of memory, on several cores.
///
/// libarchive's own zstd filter (3.6) can use worker threads but cannot size their jobs: zstd then
/// makes each job four times the window, and two workers at level 3 cost about 50 MiB. Here the
/// job size is set (`ZSTD_c_jobSize`), which keeps both the speed of two workers and the memory of
/// one. Frames carry zstd's content checksum, so a decompressor detects damage by itself.
final class ZstdSink {
    private let context: OpaquePointer
    private let output: UnsafeMutableRawBufferPointer
    private let emit: (UnsafeRawBufferPointer) throws -> Void

    /// - Parameters:
    ///   - emit: receives the compressed bytes, in order.
    init(level: Int, workers: Int, jobBytes: Int = 2 << 20, emit: @escaping (UnsafeRawBufferPointer) throws -> Void) throws {
        guard let context = ZSTD_createCCtx() else { throw StoreOpsError(.failure, "zstd: out of memory") }
        self.context = context
        self.emit = emit
        output = UnsafeMutableRawBufferPointer.allocate(byteCount: ZSTD_CStreamOutSize(), alignment: 16)
        try set(ZSTD_c_compressionLevel, Int32(level))
        try set(ZSTD_c_checksumFlag, 1)
        if workers > 1 {
            // A zstd built without threads refuses nbWorkers; it then compresses on this thread.
            if ZSTD_isError(ZSTD_CCtx_setParameter(context, ZSTD_c_nbWorkers, Int32(workers))) == 0 {
                try set(ZSTD_c_jobSize, Int32(jobBytes))
            }
        }
    }

    deinit {
        ZSTD_freeCCtx(context)
        output.deallocate()
    }

    /// Compresses `bytes` (output may be held back until later calls or `finish`).
    func write(_ bytes: UnsafeRawBufferPointer) throws {
        var input = ZSTD_inBuffer(src: bytes.baseAddress, size: bytes.count, pos: 0)
        while input.pos < input.size {
            try step(&input, ZSTD_e_continue)
        }
    }

    /// Ends the frame, flushing everything still held.
    func finish() throws {
        var input = ZSTD_inBuffer(src: nil, size: 0, pos: 0)
        while try step(&input, ZSTD_e_end) != 0 {}
    }

    @discardableResult
    private func step(_ input: inout ZSTD_inBuffer, _ mode: ZSTD_EndDirective) throws -> Int {
        var out = ZSTD_outBuffer(dst: output.baseAddress, size: output.count, pos: 0)
        let remaining = ZSTD_compressStream2(context, &out, &input, mode)
        if ZSTD_isError(remaining) != 0 {
            throw StoreOpsError(.failure, "zstd: \(String(cString: ZSTD_getErrorName(remaining)))")
        }
        if out.pos > 0 { try emit(UnsafeRawBufferPointer(rebasing: output[0..<out.pos])) }
        return remaining
    }

    private func set(_ parameter: ZSTD_cParameter, _ value: Int32) throws {
        let status = ZSTD_CCtx_setParameter(context, parameter, value)
        if ZSTD_isError(status) != 0 {
            throw StoreOpsError(.failure, "zstd: \(String(cString: ZSTD_getErrorName(status)))")
        }
    }
}
