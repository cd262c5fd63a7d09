#include <zlib.h>

/// inflateInit2 and deflateInit2 are function-like macros Swift cannot import.
/// windowBits -15 selects raw DEFLATE (no zlib header), the format of Core Data's Z_MODELCACHE.
static inline int storectl_inflate_init_raw(z_stream *stream) {
    return inflateInit2(stream, -15);
}

static inline int storectl_deflate_init_raw(z_stream *stream, int level) {
    return deflateInit2(stream, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
}
