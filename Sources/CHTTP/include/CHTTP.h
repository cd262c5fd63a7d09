#ifndef STORECTL_CHTTP_H
#define STORECTL_CHTTP_H

#include <stddef.h>

/// One HTTP/1.1 exchange through libcurl's easy interface, for S3 repositories.
///
/// A handle (`storectl_http_new`) keeps its connections alive between requests; use a handle
/// from one thread at a time. The request body is sent straight from the caller's memory; the
/// response body is gathered into one malloc'd buffer, sized from Content-Length up front.

typedef struct storectl_http_response {
    long status;              ///< the final response's status, 0 when none came
    char *headers;            ///< the final response's header lines, "name: value\r\n"…, NUL-terminated (malloc'd)
    size_t headers_length;
    unsigned char *body;      ///< malloc'd; the caller takes it (free), or storectl_http_response_free
    size_t body_length;
    size_t body_capacity;
    int error_code;           ///< 0, or one of STORECTL_HTTP_* below when no response came
    char error[256];          ///< libcurl's words for the failure
} storectl_http_response;

enum {
    STORECTL_HTTP_OK = 0,
    STORECTL_HTTP_TIMED_OUT = 1,
    STORECTL_HTTP_REFUSED = 2,
    STORECTL_HTTP_CONNECTION_LOST = 3,
    STORECTL_HTTP_HOST_NOT_FOUND = 4,
    STORECTL_HTTP_TLS = 5,         ///< the server's certificate is not trusted
    STORECTL_HTTP_OTHER = 6,
    STORECTL_HTTP_TOO_LARGE = 7,   ///< the body grew past `max_body`: the transfer was stopped
};

/// NULL when libcurl is loaded and initialised (the first call loads it), else why it cannot be.
const char *storectl_http_unavailable(void);
/// A new handle, or NULL when libcurl cannot make one (or is unavailable).
void *storectl_http_new(void);
void storectl_http_free(void *handle);

/// Sends `method` to `url` with the `count` header lines ("Name: value"), and `body` when
/// `body_length` > 0 (HEAD asks for no body). `idle_ms`: give up when no byte moves for this
/// long (and when connecting takes longer); `total_ms`: give up after this long in all.
/// `ca_file`: a CA bundle for https (NULL: the system's). `max_body`: the largest answer taken
/// (a larger one stops the transfer, STORECTL_HTTP_TOO_LARGE). Fills `out`; returns its error_code.
/// Aborts transfers still running at this time (ms since 1970), and those started after it; 0: none.
void storectl_http_abort_at(long long ms);
/// SIGINT or SIGTERM arrived (async-signal-safe): transfers begun before it are aborted, unless the
/// process drains. `cleared`: the signal was acknowledged (a rollback carries the stop out).
void storectl_http_signalled(void);
void storectl_http_signal_cleared(void);
void storectl_http_draining(int on);
/// When any transfer last moved a byte either way (ms since 1970; 0: none yet).
long long storectl_http_moved_at(void);

int storectl_http_perform(void *handle, const char *method, const char *url,
                          const char *const *headers, size_t count,
                          const void *body, size_t body_length,
                          long idle_ms, long total_ms, const char *ca_file, size_t max_body,
                          storectl_http_response *out);

/// Frees what `out` still holds (headers, and the body unless taken: set it to NULL to take it).
void storectl_http_response_free(storectl_http_response *out);

#endif
