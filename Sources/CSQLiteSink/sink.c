#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "CSQLiteSink.h"

struct storectl_sink {
    storectl_sink_write_fn write;
    void *context;
    int page_size;
    unsigned char *page1;
    int page1_size;
    sqlite3_int64 size;
    char problem[256];
};

typedef struct {
    sqlite3_file base;
    storectl_sink *sink;
} sink_file;

storectl_sink *storectl_sink_new(storectl_sink_write_fn write, void *context) {
    storectl_sink *sink = calloc(1, sizeof(storectl_sink));
    if (sink == NULL) return NULL;
    sink->write = write;
    sink->context = context;
    return sink;
}

void storectl_sink_free(storectl_sink *sink) {
    if (sink == NULL) return;
    free(sink->page1);
    free(sink);
}

const unsigned char *storectl_sink_page1(const storectl_sink *sink, int *size) {
    *size = sink->page1_size;
    return sink->page1;
}

long long storectl_sink_size(const storectl_sink *sink) { return sink->size; }

const char *storectl_sink_problem(const storectl_sink *sink) {
    return sink->problem[0] ? sink->problem : NULL;
}

static int sink_close(sqlite3_file *file) { (void)file; return SQLITE_OK; }

static int sink_read(sqlite3_file *file, void *buffer, int amount, sqlite3_int64 offset) {
    storectl_sink *sink = ((sink_file *)file)->sink;
    if (sink->page1 != NULL && offset >= 0 && offset + amount <= sink->page1_size) {
        memcpy(buffer, sink->page1 + offset, (size_t)amount);
        return SQLITE_OK;
    }
    if (offset >= sink->size) {
        memset(buffer, 0, (size_t)amount);
        return SQLITE_IOERR_SHORT_READ;
    }
    snprintf(sink->problem, sizeof sink->problem,
             "SQLite read back %d bytes at offset %lld of the streamed copy, which the sink does not keep", amount, (long long)offset);
    return SQLITE_IOERR_READ;
}

static int sink_write(sqlite3_file *file, const void *buffer, int amount, sqlite3_int64 offset) {
    storectl_sink *sink = ((sink_file *)file)->sink;
    if (amount < 512 || (amount & (amount - 1)) != 0 || offset % amount != 0 || (sink->page_size != 0 && amount != sink->page_size)) {
        snprintf(sink->problem, sizeof sink->problem, "SQLite wrote %d bytes at offset %lld, not one whole page", amount, (long long)offset);
        return SQLITE_IOERR_WRITE;
    }
    sink->page_size = amount;
    unsigned int pgno = (unsigned int)(offset / amount) + 1;
    if (pgno == 1) {
        if (sink->page1 == NULL) {
            sink->page1 = malloc((size_t)amount);
            if (sink->page1 == NULL) return SQLITE_NOMEM;
        }
        memcpy(sink->page1, buffer, (size_t)amount);
        sink->page1_size = amount;
    } else if (sink->write(sink->context, pgno, buffer, amount) != 0) {
        if (!sink->problem[0]) snprintf(sink->problem, sizeof sink->problem, "the page consumer refused page %u", pgno);
        return SQLITE_IOERR_WRITE;
    }
    if (offset + amount > sink->size) sink->size = offset + amount;
    return SQLITE_OK;
}

static int sink_truncate(sqlite3_file *file, sqlite3_int64 size) {
    storectl_sink *sink = ((sink_file *)file)->sink;
    if (size < sink->size) sink->size = size;
    return SQLITE_OK;
}

static int sink_sync(sqlite3_file *file, int flags) { (void)file; (void)flags; return SQLITE_OK; }

static int sink_file_size(sqlite3_file *file, sqlite3_int64 *size) {
    *size = ((sink_file *)file)->sink->size;
    return SQLITE_OK;
}

static int sink_lock(sqlite3_file *file, int level) { (void)file; (void)level; return SQLITE_OK; }
static int sink_check_reserved(sqlite3_file *file, int *out) { (void)file; *out = 0; return SQLITE_OK; }
static int sink_file_control(sqlite3_file *file, int op, void *arg) { (void)file; (void)op; (void)arg; return SQLITE_NOTFOUND; }
static int sink_sector_size(sqlite3_file *file) { (void)file; return 4096; }
static int sink_device_characteristics(sqlite3_file *file) { (void)file; return 0; }

static const sqlite3_io_methods sink_methods = {
    1, sink_close, sink_read, sink_write, sink_truncate, sink_sync, sink_file_size,
    sink_lock, sink_lock, sink_check_reserved, sink_file_control, sink_sector_size, sink_device_characteristics,
    NULL, NULL, NULL, NULL, NULL, NULL
};

static sqlite3_vfs *sink_default_vfs;

static int sink_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags, int *out_flags) {
    (void)vfs;
    void *pointer = NULL;
    file->pMethods = NULL;
    // Only the main database lives in the sink; journal_mode=OFF means no journal is ever asked for.
    if (!(flags & SQLITE_OPEN_MAIN_DB) || name == NULL || sscanf(name, "storectl-sink:%p", &pointer) != 1 || pointer == NULL) {
        return SQLITE_CANTOPEN;
    }
    ((sink_file *)file)->sink = (storectl_sink *)pointer;
    file->pMethods = &sink_methods;
    if (out_flags) *out_flags = flags;
    return SQLITE_OK;
}

static int sink_delete(sqlite3_vfs *vfs, const char *name, int sync) { (void)vfs; (void)name; (void)sync; return SQLITE_OK; }

static int sink_access(sqlite3_vfs *vfs, const char *name, int flags, int *out) {
    (void)vfs; (void)name; (void)flags;
    *out = 0;
    return SQLITE_OK;
}

static int sink_full_pathname(sqlite3_vfs *vfs, const char *name, int size, char *out) {
    (void)vfs;
    if ((int)strlen(name) >= size) return SQLITE_CANTOPEN;
    strcpy(out, name);
    return SQLITE_OK;
}

static int sink_randomness(sqlite3_vfs *vfs, int n, char *out) { (void)vfs; return sink_default_vfs->xRandomness(sink_default_vfs, n, out); }
static int sink_sleep(sqlite3_vfs *vfs, int microseconds) { (void)vfs; return sink_default_vfs->xSleep(sink_default_vfs, microseconds); }
static int sink_current_time(sqlite3_vfs *vfs, double *out) { (void)vfs; return sink_default_vfs->xCurrentTime(sink_default_vfs, out); }
static int sink_last_error(sqlite3_vfs *vfs, int n, char *out) { (void)vfs; (void)n; (void)out; return 0; }

static sqlite3_vfs sink_vfs = {
    1, sizeof(sink_file), 512, NULL, "storectl-sink", NULL,
    sink_open, sink_delete, sink_access, sink_full_pathname,
    NULL, NULL, NULL, NULL,
    sink_randomness, sink_sleep, sink_current_time, sink_last_error,
    NULL, NULL, NULL, NULL
};

static pthread_once_t sink_once = PTHREAD_ONCE_INIT;
static int sink_registered = SQLITE_ERROR;

static void sink_register(void) {
    sink_default_vfs = sqlite3_vfs_find(NULL);
    if (sink_default_vfs == NULL) return;
    sink_registered = sqlite3_vfs_register(&sink_vfs, 0);
}

int storectl_sink_open(storectl_sink *sink, sqlite3 **db) {
    *db = NULL;
    pthread_once(&sink_once, sink_register);
    if (sink_registered != SQLITE_OK) return sink_registered;
    char name[64];
    snprintf(name, sizeof name, "storectl-sink:%p", (void *)sink);
    return sqlite3_open_v2(name, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, "storectl-sink");
}

/* A connection whose close must not checkpoint the store or delete its -wal/-shm by name
 * (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, a variadic call Swift cannot make). */
int storectl_db_no_checkpoint_on_close(sqlite3 *db) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)0);
}
