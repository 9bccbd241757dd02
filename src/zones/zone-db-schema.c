/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <sqlite3.h>

#include "cleanup.h"
#include "log.h"
#include "util.h"
#include "zone-db-schema.h"

/* "blkz": PRAGMA application_id, so we never migrate somebody else's file. */
#define ZONE_DB_APPLICATION_ID 0x626c6b7a
#define ZONE_DB_BUSY_TIMEOUT_MS 5000

/* Each migration takes the schema from version i to i + 1, in one
 * transaction with the user_version update. Append only. */
static const char *const migrations[] = {
        /* 0 → 1 */
        "CREATE TABLE devices ("
        "  id TEXT PRIMARY KEY NOT NULL,"
        "  zone_size INTEGER NOT NULL,"
        "  nr_zones INTEGER NOT NULL,"
        "  first_seen INTEGER NOT NULL,"
        "  last_seen INTEGER NOT NULL"
        ");"
        "CREATE TABLE zones ("
        "  device_id TEXT NOT NULL REFERENCES devices(id),"
        "  zone_index INTEGER NOT NULL CHECK (zone_index >= 0),"
        "  state TEXT NOT NULL CHECK (state IN ('free','allocated','writing','sealed','releasing','failed')),"
        "  lease TEXT UNIQUE,"
        "  owner_uid INTEGER,"
        "  label TEXT,"
        "  bytes_written INTEGER NOT NULL DEFAULT 0,"
        "  sha256 TEXT,"
        "  reset_count INTEGER NOT NULL DEFAULT 0,"
        "  allocated_usec INTEGER,"
        "  sealed_usec INTEGER,"
        "  updated_usec INTEGER NOT NULL,"
        "  note TEXT,"
        "  PRIMARY KEY (device_id, zone_index)"
        ");",
};
_Static_assert(ELEMENTSOF(migrations) == ZONE_DB_SCHEMA_VERSION, "one migration per schema version");

int zone_db_errno(int rc) {
        switch (rc) {
        case SQLITE_OK:
        case SQLITE_DONE:
        case SQLITE_ROW:
                return 0;
        case SQLITE_CONSTRAINT_UNIQUE:
        case SQLITE_CONSTRAINT_PRIMARYKEY:
                return -EEXIST;
        case SQLITE_CONSTRAINT_FOREIGNKEY:
                return -ENODEV;
        default:
                break;
        }
        switch (rc & 0xff) {
        case SQLITE_CONSTRAINT:
        case SQLITE_MISMATCH:
        case SQLITE_RANGE:
        case SQLITE_TOOBIG:
                return -EINVAL;
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
                return -EBUSY;
        case SQLITE_NOMEM:
                return -ENOMEM;
        case SQLITE_FULL:
                return -ENOSPC;
        case SQLITE_READONLY:
                return -EROFS;
        case SQLITE_PERM:
        case SQLITE_AUTH:
                return -EPERM;
        case SQLITE_CANTOPEN:
                return -EACCES;
        case SQLITE_CORRUPT:
        case SQLITE_NOTADB:
                return -EBADMSG;
        case SQLITE_INTERRUPT:
        case SQLITE_ABORT:
                return -ECANCELED;
        default:
                return -EIO;
        }
}

int zone_db_exec(sqlite3 *s, const char *sql, const char *path) {
        char *err = NULL;
        int rc = sqlite3_exec(s, sql, NULL, NULL, &err);

        if (rc != SQLITE_OK) {
                int r = zone_db_errno(rc);
                log_error_errno(r, "zone-db: %s: \"%.40s...\": %s", path, sql, strna(err));
                sqlite3_free(err);
                return r;
        }
        return 0;
}

static int query_int(sqlite3 *s, const char *sql, int64_t *ret) {
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(s, sql, -1, &st, NULL);

        if (rc == SQLITE_OK) {
                rc = sqlite3_step(st);
                if (rc == SQLITE_ROW) {
                        *ret = sqlite3_column_int64(st, 0);
                        rc = SQLITE_OK;
                } else if (rc == SQLITE_DONE)
                        rc = SQLITE_MISMATCH;
        }
        sqlite3_finalize(st);
        return rc;
}

static int query_text(sqlite3 *s, const char *sql, char **ret) {
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(s, sql, -1, &st, NULL);

        if (rc == SQLITE_OK) {
                rc = sqlite3_step(st);
                if (rc == SQLITE_ROW) {
                        const char *t = (const char *) sqlite3_column_text(st, 0);
                        *ret = strdup(strempty(t));
                        rc = *ret ? SQLITE_OK : SQLITE_NOMEM;
                } else if (rc == SQLITE_DONE)
                        rc = SQLITE_MISMATCH;
        }
        sqlite3_finalize(st);
        return rc;
}

int zone_db_connect(const char *path, bool uri, sqlite3 **ret) {
        sqlite3 *s = NULL;
        int rc, r;

        rc = sqlite3_open_v2(path, &s, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (uri ? SQLITE_OPEN_URI : 0),
                             NULL);
        if (rc != SQLITE_OK) {
                r = zone_db_errno(rc);
                log_error_errno(r, "zone-db: cannot open %s: %s", path, s ? sqlite3_errmsg(s) : sqlite3_errstr(rc));
                sqlite3_close(s);
                return r;
        }
        (void) sqlite3_extended_result_codes(s, 1);
        (void) sqlite3_busy_timeout(s, ZONE_DB_BUSY_TIMEOUT_MS);
        /* Foreign keys are per connection and off by default. */
        r = zone_db_exec(s, "PRAGMA foreign_keys = ON;", path);
        if (r < 0) {
                sqlite3_close(s);
                return r;
        }
        *ret = s;
        return 0;
}

/* WAL: readers (reconcile, an operator's sqlite3) never block the writer,
 * and a commit is one sequential append + one fsync. */
static int setup_journal(sqlite3 *w, const char *path) {
        _cleanup_free_ char *mode = NULL;
        int64_t sync;
        int rc, r;

        rc = query_text(w, "PRAGMA journal_mode = WAL;", &mode);
        if (rc != SQLITE_OK) {
                r = zone_db_errno(rc);
                return log_error_errno(r, "zone-db: %s: cannot set WAL mode: %s", path, sqlite3_errmsg(w));
        }
        if (strcasecmp(mode, "wal") != 0)
                return log_error_errno(EOPNOTSUPP, "zone-db: %s: file system does not allow WAL mode (got %s).",
                                       path, mode);
        /* FULL: the WAL is fsynced at every commit (NORMAL only at checkpoints,
         * which loses the last commits on power loss). The WAL is reset to at
         * most 4 MiB after checkpoints. */
        r = zone_db_exec(w, "PRAGMA synchronous = FULL; PRAGMA journal_size_limit = 4194304;", path);
        if (r < 0)
                return r;
        rc = query_int(w, "PRAGMA synchronous;", &sync);
        if (rc != SQLITE_OK || sync < 2)
                return log_error_errno(EIO, "zone-db: %s: synchronous=FULL did not stick.", path);
        return 0;
}

/* Creates or migrates the schema, in one transaction. */
static int migrate(sqlite3 *w, const char *path) {
        int64_t version, appid;
        int rc, r;

        r = zone_db_exec(w, "BEGIN IMMEDIATE;", path);
        if (r < 0)
                return r;
        rc = query_int(w, "PRAGMA user_version;", &version);
        if (rc == SQLITE_OK)
                rc = query_int(w, "PRAGMA application_id;", &appid);
        if (rc != SQLITE_OK) {
                r = log_error_errno(zone_db_errno(rc), "zone-db: %s: %s", path, sqlite3_errmsg(w));
                goto rollback;
        }
        if (appid != 0 && appid != ZONE_DB_APPLICATION_ID) {
                r = log_error_errno(EMEDIUMTYPE, "zone-db: %s: application_id %#llx, not a blkmqd zone store.",
                                    path, (unsigned long long) appid);
                goto rollback;
        }
        if (version > ZONE_DB_SCHEMA_VERSION) {
                r = log_error_errno(EPROTONOSUPPORT,
                                    "zone-db: %s: schema version %lld is newer than this blkmqd's (%d).",
                                    path, (long long) version, ZONE_DB_SCHEMA_VERSION);
                goto rollback;
        }
        if (version < 0) {
                r = log_error_errno(EBADMSG, "zone-db: %s: bad schema version %lld.", path, (long long) version);
                goto rollback;
        }
        for (int64_t v = version; v < ZONE_DB_SCHEMA_VERSION; v++) {
                char sql[96];

                log_info("zone-db: %s: migrating schema %lld → %lld.", path, (long long) v, (long long) v + 1);
                r = zone_db_exec(w, migrations[v], path);
                if (r < 0)
                        goto rollback;
                snprintf(sql, sizeof sql, "PRAGMA user_version = %lld; PRAGMA application_id = %d;",
                         (long long) v + 1, ZONE_DB_APPLICATION_ID);
                r = zone_db_exec(w, sql, path);
                if (r < 0)
                        goto rollback;
        }
        r = zone_db_exec(w, "COMMIT;", path);
        if (r < 0)
                goto rollback;
        return 0;
rollback:
        if (!sqlite3_get_autocommit(w))
                (void) sqlite3_exec(w, "ROLLBACK", NULL, NULL, NULL);
        return r;
}


int zone_db_setup(sqlite3 *w, const char *path, bool in_memory) {
        int r;

        if (!in_memory) {
                r = setup_journal(w, path);
                if (r < 0)
                        return r;
        }
        return migrate(w, path);
}
