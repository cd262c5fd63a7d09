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

/// Every row a purge batch's transaction changes, as SQLite changes it: its pre-update hook
/// (compiled into Debian's libsqlite3; its declarations are behind SQLITE_ENABLE_PREUPDATE_HOOK,
/// so they are reached through these wrappers). It sees rowid tables, with or without a declared
/// PRIMARY KEY; not WITHOUT ROWID tables nor virtual tables (their shadow tables are seen).
typedef struct storectl_watch storectl_watch;

/// One row about to change: its schema and table (names valid during the callback),
/// SQLITE_INSERT/UPDATE/DELETE, the trigger depth (0: the statement itself; more: a trigger or a
/// foreign-key action), the old and new rowids, and the column count. Its values are read with
/// `storectl_row_old`/`_new`/`_changed` on `db`, during the callback only.
typedef struct {
    const char *schema;
    const char *table;
    int op;
    int depth;
    sqlite3_int64 old_key;
    sqlite3_int64 new_key;
    int columns;
    sqlite3 *db;
} storectl_row_change;

typedef void (*storectl_row_fn)(void *context, const storectl_row_change *change);

/// Calls `each` for every row change on `db` until `storectl_watch_end` (replaces any
/// pre-update hook; NULL when out of memory).
storectl_watch *storectl_watch_start(sqlite3 *db, storectl_row_fn each, void *context);
void storectl_watch_end(storectl_watch *watch);
/// `storectl_watch_end`, saying whether the watch was still the connection's pre-update hook
/// (0: another hook replaced it meanwhile, and changes after that were not seen), and whether
/// another hook was set before the watch began (`replaced`: it is not put back).
int storectl_watch_end_checked(storectl_watch *watch);
int storectl_watch_replaced(const storectl_watch *watch);
/// A column's old / new value during the callback: its SQLite type (0: not readable) and, for
/// integers, the value.
int storectl_row_old(sqlite3 *db, int column, sqlite3_int64 *value);
int storectl_row_new(sqlite3 *db, int column, sqlite3_int64 *value);
/// During an UPDATE's callback: 1 when the column's new value differs from its old one.
int storectl_row_changed(sqlite3 *db, int column);
/// During an UPDATE's callback: bit i set when column i (i < 63) changed, bit 63 when any column
/// from 63 on did (one call a row instead of one a column).
unsigned long long storectl_row_changed_mask(sqlite3 *db, int columns);

/* Closing `db` will not checkpoint the store nor delete its -wal/-shm (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE). */
int storectl_db_no_checkpoint_on_close(sqlite3 *db);

#endif
