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

/// What one batch of a purge changed, recorded by SQLite's session extension (compiled into
/// Debian's libsqlite3; its declarations are behind SQLITE_ENABLE_SESSION, so they are reached
/// through these wrappers). Tables without a PRIMARY KEY are not recorded by sessions.
typedef struct storectl_session storectl_session;

/// One change: its table, SQLITE_INSERT/UPDATE/DELETE, the column count, which columns are the
/// primary key, and per column the old and new values' types (0: not given — an UPDATE's
/// unchanged column, or the new side of a DELETE) and their integer values.
typedef struct {
    const char *table;
    int op;
    /// Made by a trigger or a foreign-key action, not by the statement itself.
    int indirect;
    int columns;
    const unsigned char *primary_key;
    const int *old_type;
    const sqlite3_int64 *old_value;
    const int *new_type;
    const sqlite3_int64 *new_value;
} storectl_change;

typedef int (*storectl_change_fn)(void *context, const storectl_change *change);

/// Starts recording every table of `main` on `db`; NULL when the session cannot be made (`*rc`).
storectl_session *storectl_session_start(sqlite3 *db, int *rc);
/// Calls `each` for every change recorded so far (stops when it returns non-zero); SQLITE_OK or an error.
int storectl_session_changes(storectl_session *session, storectl_change_fn each, void *context);
void storectl_session_end(storectl_session *session);

#endif
