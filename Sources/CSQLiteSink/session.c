// The session extension's declarations are compiled only with these defined; the library that
// storectl links (Debian's libsqlite3) is built with both.
#define SQLITE_ENABLE_SESSION 1
#define SQLITE_ENABLE_PREUPDATE_HOOK 1
#include <sqlite3.h>
#include <stdlib.h>
#include "CSQLiteSink.h"

struct storectl_session {
    sqlite3_session *session;
};

storectl_session *storectl_session_start(sqlite3 *db, int *rc) {
    storectl_session *out = calloc(1, sizeof(storectl_session));
    if (out == NULL) { *rc = SQLITE_NOMEM; return NULL; }
    *rc = sqlite3session_create(db, "main", &out->session);
    if (*rc == SQLITE_OK) *rc = sqlite3session_attach(out->session, NULL);
    if (*rc != SQLITE_OK) {
        if (out->session) sqlite3session_delete(out->session);
        free(out);
        return NULL;
    }
    return out;
}

int storectl_session_changes(storectl_session *session, storectl_change_fn each, void *context) {
    int size = 0;
    void *blob = NULL;
    int rc = sqlite3session_changeset(session->session, &size, &blob);
    if (rc != SQLITE_OK) return rc;
    sqlite3_changeset_iter *iter = NULL;
    rc = sqlite3changeset_start(&iter, size, blob);
    if (rc != SQLITE_OK) { sqlite3_free(blob); return rc; }
    int *types = NULL;
    sqlite3_int64 *values = NULL;
    int capacity = 0;
    while ((rc = sqlite3changeset_next(iter)) == SQLITE_ROW) {
        storectl_change change = {0};
        rc = sqlite3changeset_op(iter, &change.table, &change.columns, &change.op, &change.indirect);
        if (rc != SQLITE_OK) break;
        int columns = 0;
        unsigned char *pk = NULL;
        rc = sqlite3changeset_pk(iter, &pk, &columns);
        if (rc != SQLITE_OK) break;
        change.primary_key = pk;
        if (change.columns > capacity) {
            capacity = change.columns;
            free(types); free(values);
            types = calloc((size_t)capacity * 2, sizeof(int));
            values = calloc((size_t)capacity * 2, sizeof(sqlite3_int64));
            if (types == NULL || values == NULL) { rc = SQLITE_NOMEM; break; }
        }
        for (int i = 0; i < change.columns; i++) {
            sqlite3_value *old = NULL, *new = NULL;
            types[i] = 0; values[i] = 0; types[capacity + i] = 0; values[capacity + i] = 0;
            if (change.op != SQLITE_INSERT && sqlite3changeset_old(iter, i, &old) == SQLITE_OK && old != NULL) {
                types[i] = sqlite3_value_type(old);
                values[i] = sqlite3_value_int64(old);
            }
            if (change.op != SQLITE_DELETE && sqlite3changeset_new(iter, i, &new) == SQLITE_OK && new != NULL) {
                types[capacity + i] = sqlite3_value_type(new);
                values[capacity + i] = sqlite3_value_int64(new);
            }
        }
        change.old_type = types;
        change.old_value = values;
        change.new_type = types + capacity;
        change.new_value = values + capacity;
        int stop = each(context, &change);
        if (stop != 0) { rc = stop; break; }   // the caller's error, not a partial success
    }
    if (rc == SQLITE_DONE) rc = SQLITE_OK;
    free(types); free(values);
    int finalized = sqlite3changeset_finalize(iter);
    sqlite3_free(blob);
    return rc == SQLITE_OK ? finalized : rc;
}

void storectl_session_end(storectl_session *session) {
    if (session == NULL) return;
    sqlite3session_delete(session->session);
    free(session);
}
