// The pre-update hook's declarations are compiled only with this defined; the library that
// storectl links (Debian's libsqlite3) is built with it.
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include "CSQLiteSink.h"

struct storectl_watch {
    sqlite3 *db;
    storectl_row_fn each;
    void *context;
    int replaced;
};

static void on_change(void *context, sqlite3 *db, int op, const char *schema, const char *table,
                      sqlite3_int64 old_key, sqlite3_int64 new_key) {
    storectl_watch *watch = context;
    storectl_row_change change = {
        .schema = schema, .table = table, .op = op, .depth = sqlite3_preupdate_depth(db),
        .old_key = old_key, .new_key = new_key, .columns = sqlite3_preupdate_count(db), .db = db,
    };
    watch->each(watch->context, &change);
}

storectl_watch *storectl_watch_start(sqlite3 *db, storectl_row_fn each, void *context) {
    storectl_watch *watch = calloc(1, sizeof(storectl_watch));
    if (watch == NULL) return NULL;
    watch->db = db; watch->each = each; watch->context = context;
    watch->replaced = sqlite3_preupdate_hook(db, on_change, watch) != NULL;
    return watch;
}

int storectl_watch_replaced(const storectl_watch *watch) { return watch == NULL ? 0 : watch->replaced; }

int storectl_watch_end_checked(storectl_watch *watch) {
    if (watch == NULL) return 0;
    int ours = sqlite3_preupdate_hook(watch->db, NULL, NULL) == watch;
    free(watch);
    return ours;
}

void storectl_watch_end(storectl_watch *watch) {
    if (watch == NULL) return;
    sqlite3_preupdate_hook(watch->db, NULL, NULL);
    free(watch);
}

static int read_value(sqlite3_value *value, sqlite3_int64 *out) {
    *out = 0;
    if (value == NULL) return 0;
    int type = sqlite3_value_type(value);
    if (type == SQLITE_INTEGER) *out = sqlite3_value_int64(value);
    return type;
}

int storectl_row_old(sqlite3 *db, int column, sqlite3_int64 *value) {
    sqlite3_value *old = NULL;
    if (sqlite3_preupdate_old(db, column, &old) != SQLITE_OK) { *value = 0; return 0; }
    return read_value(old, value);
}

int storectl_row_new(sqlite3 *db, int column, sqlite3_int64 *value) {
    sqlite3_value *new = NULL;
    if (sqlite3_preupdate_new(db, column, &new) != SQLITE_OK) { *value = 0; return 0; }
    return read_value(new, value);
}

int storectl_row_changed(sqlite3 *db, int column) {
    sqlite3_value *old = NULL, *new = NULL;
    if (sqlite3_preupdate_old(db, column, &old) != SQLITE_OK || sqlite3_preupdate_new(db, column, &new) != SQLITE_OK) return 1;
    if (old == NULL || new == NULL) return old != new;
    int type = sqlite3_value_type(old);
    if (type != sqlite3_value_type(new)) return 1;
    switch (type) {
    case SQLITE_NULL: return 0;
    case SQLITE_INTEGER: return sqlite3_value_int64(old) != sqlite3_value_int64(new);
    case SQLITE_FLOAT: {
        double a = sqlite3_value_double(old), b = sqlite3_value_double(new);
        return memcmp(&a, &b, sizeof a) != 0;
    }
    default: {
        const void *a = type == SQLITE_TEXT ? (const void *)sqlite3_value_text(old) : sqlite3_value_blob(old);
        int na = sqlite3_value_bytes(old);
        const void *b = type == SQLITE_TEXT ? (const void *)sqlite3_value_text(new) : sqlite3_value_blob(new);
        int nb = sqlite3_value_bytes(new);
        return na != nb || (na > 0 && (a == NULL || b == NULL || memcmp(a, b, (size_t)na) != 0));
    }
    }
}

unsigned long long storectl_row_changed_mask(sqlite3 *db, int columns) {
    unsigned long long mask = 0;
    for (int column = 0; column < columns; column++) {
        if (storectl_row_changed(db, column)) mask |= 1ULL << (column < 63 ? column : 63);
    }
    return mask;
}
