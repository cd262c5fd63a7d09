#ifndef STORECTL_CSQLITESINK_H
#define STORECTL_CSQLITESINK_H

#include <sqlite3.h>

/// A destination database that is not a file: SQLite's backup API copies a store into a
/// connection opened on the "storectl-sink" VFS, and every page the pager writes is handed to
/// `write` (page number from 1, its bytes) instead of reaching a disk. Page 1 is kept (SQLite
/// rewrites it when the copy commits) and read back from `storectl_sink_page1` afterwards.
///
/// The sink never holds more than page 1: if SQLite ever asks to read back another page it has
/// written (it does not, for a backup into an empty database with journal_mode=OFF), the read
/// fails with SQLITE_IOERR_READ and `storectl_sink_problem` says so: the copy fails, it is never
/// silently wrong.
typedef int (*storectl_sink_write_fn)(void *context, unsigned int pgno, const void *data, int size);

typedef struct storectl_sink storectl_sink;

/// A new sink calling `write(context, ...)` for every page but page 1.
storectl_sink *storectl_sink_new(storectl_sink_write_fn write, void *context);
void storectl_sink_free(storectl_sink *sink);

/// Opens a connection whose main database is the sink (registers the VFS on first use).
/// Returns an SQLite result code; `*db` must be closed with sqlite3_close_v2 even on failure.
int storectl_sink_open(storectl_sink *sink, sqlite3 **db);

/// The last bytes written to page 1 (NULL before any), and their size.
const unsigned char *storectl_sink_page1(const storectl_sink *sink, int *size);

/// The extent of the database the sink received: the highest offset written, less truncations.
long long storectl_sink_size(const storectl_sink *sink);

/// What went wrong inside the sink (an unexpected read back, a write of an odd size), or NULL.
const char *storectl_sink_problem(const storectl_sink *sink);

#endif
