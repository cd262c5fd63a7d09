#include "CHTTP.h"

// Called through pointers (below): no type-checking macros in the way.
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <stdatomic.h>
#include <time.h>

// A stopping process's deadline (ms since 1970; 0 none): a transfer still running then is
// aborted from its progress callback, so a drain ends when it must even while a server holds a
// connection open without answering.
static _Atomic long long abort_at_ms = 0;

void storectl_http_abort_at(long long ms) { atomic_store(&abort_at_ms, ms); }

// When SIGINT or SIGTERM arrived (ms; 0: none), unless the process drains (replicate finishes
// what it read first, by `abort_at_ms`): a transfer running then is aborted at once, not left to
// wait out its idle timeout for a server that answers nothing.
static _Atomic long long signalled_at_ms = 0;
static _Atomic int draining = 0;

static long long now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);   // async-signal-safe
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

void storectl_http_signalled(void) { atomic_store(&signalled_at_ms, now_ms()); }
void storectl_http_signal_cleared(void) { atomic_store(&signalled_at_ms, 0); }
void storectl_http_draining(int on) { atomic_store(&draining, on); }

// libcurl is loaded by the first S3 request, not linked: linked, it and the thirty-odd libraries
// it needs (TLS, Kerberos, LDAP, SSH, IDN...) were loaded and bound at every start of storectl,
// about 6 ms of each (an empty program linked with it starts in 7.3 ms, without in 1.1 ms), and
// most runs never reach S3. The package still depends on libcurl4.
static struct {
    CURLcode (*global_init)(long);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *);
    void (*easy_reset)(CURL *);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_perform)(CURL *);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    const char *(*easy_strerror)(CURLcode);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
} lib;

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static int global_ok = 0;
static char unavailable[240];   // why libcurl cannot be used ("" when it can, or before trying)

static void global_init(void) {
    void *handle = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        snprintf(unavailable, sizeof unavailable, "S3 needs libcurl (install libcurl4): libcurl.so.4 could not be loaded: %s", why ? why : "not found");
        return;
    }
#define BIND(field, name) \
    if (!(lib.field = (__typeof__(lib.field))dlsym(handle, name))) { \
        snprintf(unavailable, sizeof unavailable, "S3 needs libcurl (install libcurl4): libcurl.so.4 has no %s", name); \
        dlclose(handle); \
        memset(&lib, 0, sizeof lib); \
        return; \
    }
    BIND(global_init, "curl_global_init")
    BIND(easy_init, "curl_easy_init")
    BIND(easy_cleanup, "curl_easy_cleanup")
    BIND(easy_reset, "curl_easy_reset")
    BIND(easy_setopt, "curl_easy_setopt")
    BIND(easy_perform, "curl_easy_perform")
    BIND(easy_getinfo, "curl_easy_getinfo")
    BIND(easy_strerror, "curl_easy_strerror")
    BIND(slist_append, "curl_slist_append")
    BIND(slist_free_all, "curl_slist_free_all")
#undef BIND
    if (lib.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(unavailable, sizeof unavailable, "libcurl could not be initialised (curl_global_init failed)");
        return;   // libcurl stays loaded: what it initialised may still refer to it
    }
    global_ok = 1;
}

const char *storectl_http_unavailable(void) {
    pthread_once(&global_once, global_init);
    return global_ok ? NULL : unavailable;
}

void *storectl_http_new(void) {
    pthread_once(&global_once, global_init);
    if (!global_ok) return NULL;
    return lib.easy_init();
}

void storectl_http_free(void *handle) {
    if (handle && global_ok) lib.easy_cleanup((CURL *)handle);
}

void storectl_http_response_free(storectl_http_response *out) {
    free(out->headers);
    free(out->body);
    out->headers = NULL;
    out->body = NULL;
    out->headers_length = out->body_length = out->body_capacity = 0;
}

/// Grows `*buffer` (of `*capacity`) to hold `needed` bytes; 0 when memory runs out.
static int reserve(unsigned char **buffer, size_t *capacity, size_t needed) {
    if (needed <= *capacity) return 1;
    size_t grown = *capacity < 16384 ? 16384 : *capacity;
    while (grown < needed) grown = grown > ((size_t)-1) / 2 ? needed : grown * 2;
    unsigned char *moved = realloc(*buffer, grown);
    if (!moved) return 0;
    *buffer = moved;
    *capacity = grown;
    return 1;
}

/// What the callbacks see of one exchange.
struct exchange {
    storectl_http_response *out;
    int head;               ///< a HEAD: its Content-Length is the object's, and no body follows
    size_t max_body;
    int too_large;
    long long started_ms;   ///< when the transfer began
    curl_off_t moved;       ///< bytes received and sent so far, as the progress callback last saw
    long long idle_ms;      ///< no byte either way for this long ends the transfer
    long long last_ms;      ///< when this transfer last moved a byte (its start before any)
    int idled;              ///< ended by `idle_ms`
};

// When a transfer last moved a byte either way (ms since 1970; 0: none yet). A request waiting
// for an answer while another's bytes flow is not a sign of a silent endpoint.
static _Atomic long long moved_at_ms = 0;
long long storectl_http_moved_at(void) { return atomic_load(&moved_at_ms); }

static int on_progress(void *data, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)dltotal; (void)ultotal;
    struct exchange *exchange = data;
    long long now = now_ms();
    if (exchange && dlnow + ulnow != exchange->moved) {
        exchange->moved = dlnow + ulnow;
        exchange->last_ms = now;
        atomic_store(&moved_at_ms, now);
    }
    long long signalled = atomic_load(&signalled_at_ms);
    // Begun before the signal: cut. Begun after it (a stopping command's clean-up, a lock given
    // back): it runs, within the short time the caller gives it.
    if (signalled != 0 && !atomic_load(&draining) && exchange && exchange->started_ms <= signalled) return 1;
    long long at = atomic_load(&abort_at_ms);
    if (at != 0 && now >= at) return 1;
    // The idle limit, measured here on the wall clock: libcurl's low-speed check starts counting
    // only once it has measured a speed, and on a loaded machine ended a 4 s wait after 5.9 s.
    if (exchange && exchange->idle_ms > 0 && now - exchange->last_ms >= exchange->idle_ms) {
        exchange->idled = 1;
        return 1;
    }
    return 0;
}

static size_t on_body(char *data, size_t size, size_t count, void *user) {
    struct exchange *exchange = user;
    storectl_http_response *out = exchange->out;
    size_t length = size * count;
    if (out->body_length + length > exchange->max_body) {   // aborts the transfer (CURLE_WRITE_ERROR)
        exchange->too_large = 1;
        return 0;
    }
    if (!reserve(&out->body, &out->body_capacity, out->body_length + length)) return 0;
    memcpy(out->body + out->body_length, data, length);
    out->body_length += length;
    return length;
}

static size_t on_header(char *data, size_t size, size_t count, void *user) {
    struct exchange *exchange = user;
    storectl_http_response *out = exchange->out;
    size_t length = size * count;
    // A new status line (after a 100 Continue, say): only the final response's headers count.
    if (length >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        out->headers_length = 0;
        out->body_length = 0;
    } else if (!exchange->head && length > 15 && strncasecmp(data, "content-length:", 15) == 0) {
        // Room for the whole body at once: no copying as it grows. Bounded, so that a lying
        // header cannot make us reserve gigabytes up front.
        unsigned long long announced = strtoull(data + 15, NULL, 10);
        if (announced > 0 && announced <= (256ull << 20) && announced <= exchange->max_body)
            if (!reserve(&out->body, &out->body_capacity, (size_t)announced)) return 0;
    }
    char *moved = realloc(out->headers, out->headers_length + length + 1);   // headers are few
    if (!moved) return 0;
    out->headers = moved;
    memcpy(out->headers + out->headers_length, data, length);
    out->headers_length += length;
    out->headers[out->headers_length] = 0;
    return length;
}

static int classify(CURLcode code) {
    switch (code) {
    case CURLE_OK: return STORECTL_HTTP_OK;
    case CURLE_OPERATION_TIMEDOUT: return STORECTL_HTTP_TIMED_OUT;
    case CURLE_COULDNT_CONNECT: return STORECTL_HTTP_REFUSED;
    case CURLE_COULDNT_RESOLVE_HOST: case CURLE_COULDNT_RESOLVE_PROXY: return STORECTL_HTTP_HOST_NOT_FOUND;
    case CURLE_GOT_NOTHING: case CURLE_SEND_ERROR: case CURLE_RECV_ERROR: case CURLE_PARTIAL_FILE:
        return STORECTL_HTTP_CONNECTION_LOST;
    // The certificate is not trusted (or the CA file is unusable): no retry will change that. A
    // handshake that fails otherwise (CURLE_SSL_CONNECT_ERROR) may be a dropped connection.
    case CURLE_PEER_FAILED_VERIFICATION: case CURLE_SSL_CACERT_BADFILE: case CURLE_SSL_CERTPROBLEM:
        return STORECTL_HTTP_TLS;
    default: return STORECTL_HTTP_OTHER;
    }
}

int storectl_http_perform(void *handle, const char *method, const char *url,
                          const char *const *headers, size_t count,
                          const void *body, size_t body_length,
                          long idle_ms, long total_ms, const char *ca_file, size_t max_body,
                          storectl_http_response *out) {
    memset(out, 0, sizeof *out);
    long long started = now_ms();
    struct exchange exchange = { out, strcmp(method, "HEAD") == 0, max_body, 0, started, 0, idle_ms, started, 0 };
    CURL *curl = handle;
    if (!curl) {
        out->error_code = STORECTL_HTTP_OTHER;
        snprintf(out->error, sizeof out->error, "%s", global_ok ? "libcurl could not make a handle" : unavailable);
        return out->error_code;
    }
    lib.easy_reset(curl);   // every option back to its default; the connections stay open

    struct curl_slist *list = NULL;
    for (size_t i = 0; i < count; i++) {
        struct curl_slist *longer = lib.slist_append(list, headers[i]);
        if (!longer) { lib.slist_free_all(list); out->error_code = STORECTL_HTTP_OTHER; snprintf(out->error, sizeof out->error, "out of memory"); return out->error_code; }
        list = longer;
    }
    // No "Expect: 100-continue" round trip before a body; no form content type of curl's own.
    list = lib.slist_append(list, "Expect:");
    list = lib.slist_append(list, "Accept:");
    int has_type = 0;
    for (size_t i = 0; i < count; i++) if (strncasecmp(headers[i], "content-type:", 13) == 0) has_type = 1;
    if (!has_type) list = lib.slist_append(list, "Content-Type:");

    char error[CURL_ERROR_SIZE];
    error[0] = 0;
    lib.easy_setopt(curl, CURLOPT_URL, url);
    lib.easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
    lib.easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);             // threads: no SIGALRM for timeouts
    lib.easy_setopt(curl, CURLOPT_HTTPHEADER, list);
    lib.easy_setopt(curl, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    lib.easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);       // a redirect is reported, not followed
    lib.easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    lib.easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, idle_ms);
    // A backstop only: `on_progress` ends an idle transfer at `idle_ms` (libcurl calls it at least
    // once a second while it waits).
    lib.easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    lib.easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, (idle_ms + 999) / 1000 + 2);
    lib.easy_setopt(curl, CURLOPT_TIMEOUT_MS, total_ms);
    lib.easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    lib.easy_setopt(curl, CURLOPT_XFERINFODATA, &exchange);
    lib.easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    lib.easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);
    lib.easy_setopt(curl, CURLOPT_BUFFERSIZE, 256L * 1024);    // fewer, larger reads of big bodies
    lib.easy_setopt(curl, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
    if (ca_file) lib.easy_setopt(curl, CURLOPT_CAINFO, ca_file);
    lib.easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    lib.easy_setopt(curl, CURLOPT_WRITEDATA, &exchange);
    lib.easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    lib.easy_setopt(curl, CURLOPT_HEADERDATA, &exchange);

    if (strcmp(method, "HEAD") == 0) {
        lib.easy_setopt(curl, CURLOPT_NOBODY, 1L);
    } else if (strcmp(method, "GET") == 0) {
        lib.easy_setopt(curl, CURLOPT_HTTPGET, 1L);
    } else if (body_length == 0 && strcmp(method, "DELETE") == 0) {
        lib.easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    } else {
        // The body goes out from the caller's memory as it is (no copy), with its length.
        lib.easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_length);
        lib.easy_setopt(curl, CURLOPT_POSTFIELDS, body_length > 0 ? body : "");
        lib.easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    }

    // A peer that closes the connection must not kill the process with SIGPIPE (libcurl sends
    // with MSG_NOSIGNAL, but a TLS library may not): blocked in this thread for the transfer, and
    // one raised meanwhile is taken before the mask is restored.
    sigset_t pipe_only, previous;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &previous);
    CURLcode code = lib.easy_perform(curl);
    sigset_t pending;
    if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
        struct timespec now = { 0, 0 };
        sigtimedwait(&pipe_only, NULL, &now);
    }
    pthread_sigmask(SIG_SETMASK, &previous, NULL);

    lib.slist_free_all(list);
    lib.easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &out->status);
    if (exchange.too_large) {
        out->error_code = STORECTL_HTTP_TOO_LARGE;
        snprintf(out->error, sizeof out->error, "the answer is over %zu bytes", max_body);
        out->status = 0;
    } else if (code == CURLE_ABORTED_BY_CALLBACK && exchange.idled) {
        out->error_code = STORECTL_HTTP_TIMED_OUT;
        snprintf(out->error, sizeof out->error, "no byte moved for %.1f s", (double)(now_ms() - exchange.last_ms) / 1000);
        out->status = 0;
    } else if (code == CURLE_ABORTED_BY_CALLBACK) {
        // Only `on_progress` aborts: a signal, or a drain's end (libcurl says "Callback aborted").
        out->error_code = STORECTL_HTTP_OTHER;
        snprintf(out->error, sizeof out->error, "cut short: the process is stopping");
        out->status = 0;
    } else if (code != CURLE_OK) {
        out->error_code = classify(code);
        snprintf(out->error, sizeof out->error, "%s", error[0] ? error : lib.easy_strerror(code));
        out->status = 0;
    }
    return out->error_code;
}
