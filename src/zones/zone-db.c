/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cleanup.h"
#include "log.h"
#include "test-hooks.h"
#include "util.h"
#include "thread-sched.h"
#include "zone-db-schema.h"
#include "zone-db.h"

/* An upper bound on one transaction, so a flood of writes still commits
 * (and calls back) in steps. */
#define ZONE_DB_BATCH_MAX 4096

typedef enum OpType {
        OP_PUT_ZONE,
        OP_PUT_DEVICE,
} OpType;

typedef struct ZoneDbOp {
        struct ZoneDbOp *next;
        OpType type;
        ZoneRecord rec;     /* OP_PUT_ZONE; OP_PUT_DEVICE uses rec.device_id */
        uint64_t zone_size; /* OP_PUT_DEVICE */
        uint32_t nr_zones;
        uint64_t seen_usec;
        zone_db_done_t done;
        void *userdata;
        int r;
} ZoneDbOp;

typedef struct OpList {
        ZoneDbOp *head, *tail;
} OpList;

struct ZoneDb {
        char *path;
        bool in_memory;               /* ":memory:", for tests: nothing is durable */
        sqlite3 *wdb;                 /* the store thread's (the loop's before start and after join) */
        sqlite3 *rdb;                 /* loop thread, reads only */
        sqlite3_stmt *put_zone, *put_device, *begin, *commit, *rollback; /* on wdb */
        int write_error;              /* sticky -EIO after a failed commit; wdb owner only */

        sd_event_source *source;
        int efd;
        pthread_t thread;
        bool thread_started;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        OpList queue;                 /* to run; protected by lock */
        OpList done;                  /* ran, callback not yet called; protected by lock */
        bool stopping;                /* protected by lock */
        uint64_t commits;             /* atomic */
        unsigned delay_ms;            /* test_db_delay_msec(): a slow store, for tests; read-only */

        unsigned pending;             /* loop thread only */
        bool in_callback;             /* loop thread only */
        bool freeing;                 /* loop thread only */
};

#define ZONE_COLUMNS                                                            \
        "device_id, zone_index, state, lease, owner_uid, label, bytes_written," \
        " sha256, reset_count, allocated_usec, sealed_usec, updated_usec, note"

static const char put_zone_sql[] =
        "INSERT INTO zones (" ZONE_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"
        " ON CONFLICT (device_id, zone_index) DO UPDATE SET"
        " state = excluded.state, lease = excluded.lease, owner_uid = excluded.owner_uid,"
        " label = excluded.label, bytes_written = excluded.bytes_written, sha256 = excluded.sha256,"
        " reset_count = excluded.reset_count, allocated_usec = excluded.allocated_usec,"
        " sealed_usec = excluded.sealed_usec, updated_usec = excluded.updated_usec, note = excluded.note";

static const char put_device_sql[] =
        "INSERT INTO devices (id, zone_size, nr_zones, first_seen, last_seen) VALUES (?1, ?2, ?3, ?4, ?4)"
        " ON CONFLICT (id) DO UPDATE SET"
        " zone_size = excluded.zone_size, nr_zones = excluded.nr_zones, last_seen = excluded.last_seen";

static bool op_is_io_error(int rc) {
        return (rc & 0xff) == SQLITE_IOERR;
}

static int64_t u64_to_db(uint64_t v) {
        return (int64_t) v;
}

static void op_free(ZoneDbOp *op) {
        if (!op)
                return;
        zone_record_done(&op->rec);
        free(op);
}

static void list_append(OpList *l, ZoneDbOp *op) {
        op->next = NULL;
        if (l->tail)
                l->tail->next = op;
        else
                l->head = op;
        l->tail = op;
}

static void list_splice(OpList *l, ZoneDbOp *first, ZoneDbOp *last) {
        if (!first)
                return;
        last->next = NULL;
        if (l->tail)
                l->tail->next = first;
        else
                l->head = first;
        l->tail = last;
}

/* --- the writer: the store thread, or the loop thread before start / after join --- */

static int bind_text_or_null(sqlite3_stmt *s, int i, const char *v) {
        return v ? sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(s, i);
}

static int bind_u64_or_null(sqlite3_stmt *s, int i, uint64_t v, bool null) {
        return null ? sqlite3_bind_null(s, i) : sqlite3_bind_int64(s, i, u64_to_db(v));
}

static int step_once(sqlite3_stmt *s) {
        int rc = sqlite3_step(s);

        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static int exec_op(ZoneDb *db, ZoneDbOp *op) {
        const ZoneRecord *z = &op->rec;
        sqlite3_stmt *s;
        int rc = SQLITE_OK;

        switch (op->type) {
        case OP_PUT_ZONE:
                s = db->put_zone;
                if (rc == SQLITE_OK)
                        rc = sqlite3_bind_text(s, 1, z->device_id, -1, SQLITE_STATIC);
                if (rc == SQLITE_OK)
                        rc = sqlite3_bind_int64(s, 2, z->zone_index);
                if (rc == SQLITE_OK)
                        rc = bind_text_or_null(s, 3, z->state);
                if (rc == SQLITE_OK)
                        rc = bind_text_or_null(s, 4, z->lease);
                if (rc == SQLITE_OK)
                        rc = bind_u64_or_null(s, 5, z->owner_uid, z->owner_uid == ZONE_DB_UID_INVALID);
                if (rc == SQLITE_OK)
                        rc = bind_text_or_null(s, 6, z->label);
                if (rc == SQLITE_OK)
                        rc = sqlite3_bind_int64(s, 7, u64_to_db(z->bytes_written));
                if (rc == SQLITE_OK)
                        rc = bind_text_or_null(s, 8, z->sha256);
                if (rc == SQLITE_OK)
                        rc = sqlite3_bind_int64(s, 9, z->reset_count);
                if (rc == SQLITE_OK)
                        rc = bind_u64_or_null(s, 10, z->allocated_usec, z->allocated_usec == 0);
                if (rc == SQLITE_OK)
                        rc = bind_u64_or_null(s, 11, z->sealed_usec, z->sealed_usec == 0);
                if (rc == SQLITE_OK)
                        rc = sqlite3_bind_int64(s, 12, u64_to_db(z->updated_usec));
                if (rc == SQLITE_OK)
                        rc = bind_text_or_null(s, 13, z->note);
                break;
        case OP_PUT_DEVICE:
                s = db->put_device;
                if (rc == SQLITE_OK)
                        rc = sqlite3_bind_text(s, 1, z->device_id, -1, SQLITE_STATIC);
                if (rc == SQLITE_OK)
                        rc = sqlite3_bind_int64(s, 2, u64_to_db(op->zone_size));
                if (rc == SQLITE_OK)
                        rc = sqlite3_bind_int64(s, 3, op->nr_zones);
                if (rc == SQLITE_OK)
                        rc = sqlite3_bind_int64(s, 4, u64_to_db(op->seen_usec));
                break;
        default:
                return SQLITE_MISUSE;
        }
        if (rc != SQLITE_OK) {
                sqlite3_reset(s);
                sqlite3_clear_bindings(s);
                return rc;
        }
        return step_once(s);
}

static void log_sqlite(ZoneDb *db, int rc, const char *what) {
        int r = zone_db_errno(rc);

        /* Constraint violations are the caller's business (it gets r); the
         * store's own trouble is worth a warning. */
        if ((rc & 0xff) == SQLITE_CONSTRAINT)
                log_debug_errno(r, "zone-db: %s: %s", what, sqlite3_errmsg(db->wdb));
        else
                log_warning_errno(r, "zone-db: %s: %s (sqlite %d)", what, sqlite3_errmsg(db->wdb), rc);
}

static void rollback_if_open(ZoneDb *db) {
        if (!sqlite3_get_autocommit(db->wdb)) {
                if (db->rollback)
                        (void) step_once(db->rollback);
                else
                        (void) sqlite3_exec(db->wdb, "ROLLBACK", NULL, NULL, NULL);
        }
}

/* Runs the n ops from first in one transaction, setting each op's r. */
static void run_group(ZoneDb *db, ZoneDbOp *first, size_t n) {
        ZoneDbOp *op;
        size_t i;
        int rc;

        if (db->write_error < 0) {
                for (op = first, i = 0; i < n; op = op->next, i++)
                        op->r = db->write_error;
                return;
        }

        rc = step_once(db->begin);
        if (rc != SQLITE_OK) {
                log_sqlite(db, rc, "BEGIN");
                rollback_if_open(db);
                for (op = first, i = 0; i < n; op = op->next, i++)
                        op->r = zone_db_errno(rc);
                return;
        }

        for (op = first, i = 0; i < n; op = op->next, i++) {
                rc = exec_op(db, op);
                if (rc == SQLITE_OK) {
                        op->r = 0;
                        continue;
                }
                log_sqlite(db, rc, op->type == OP_PUT_ZONE ? "put zone" : "put device");
                if (!sqlite3_get_autocommit(db->wdb)) {
                        /* Only this statement was undone: the rest of the
                         * group goes on. */
                        op->r = zone_db_errno(rc);
                        continue;
                }
                /* SQLite rolled the whole transaction back (I/O error, out of
                 * memory): give every op its own transaction and result. */
                if (n == 1) {
                        op->r = zone_db_errno(rc);
                        if (op_is_io_error(rc))
                                db->write_error = -EIO;
                        return;
                }
                for (op = first, i = 0; i < n; op = op->next, i++)
                        run_group(db, op, 1);
                return;
        }

        rc = step_once(db->commit);
        if (rc != SQLITE_OK) {
                int r = op_is_io_error(rc) ? -EIO : zone_db_errno(rc);

                log_sqlite(db, rc, "COMMIT");
                rollback_if_open(db);
                for (op = first, i = 0; i < n; op = op->next, i++)
                        if (op->r == 0)
                                op->r = r;
                if (op_is_io_error(rc)) {
                        log_error("zone-db: %s: commit failed, failing every later write until reopened.",
                                  db->path);
                        db->write_error = -EIO;
                }
                return;
        }
        __atomic_add_fetch(&db->commits, 1, __ATOMIC_RELAXED);
        log_debug("zone-db: %zu write%s committed in one transaction.", n, n == 1 ? "" : "s");
}

/* Takes up to ZONE_DB_BATCH_MAX ops off the queue. Caller holds the lock. */
static ZoneDbOp *take_batch(ZoneDb *db, ZoneDbOp **ret_last, size_t *ret_n) {
        ZoneDbOp *first = db->queue.head, *last = first;
        size_t n = 1;

        if (!first)
                return NULL;
        while (last->next && n < ZONE_DB_BATCH_MAX) {
                last = last->next;
                n++;
        }
        db->queue.head = last->next;
        if (!db->queue.head)
                db->queue.tail = NULL;
        last->next = NULL;
        *ret_last = last;
        *ret_n = n;
        return first;
}

static void *store_thread(void *arg) {
        ZoneDb *db = arg;

        (void) thread_leave_realtime();
        for (;;) {
                ZoneDbOp *first, *last = NULL;
                uint64_t one = 1;
                size_t n = 0;

                pthread_mutex_lock(&db->lock);
                while (!db->queue.head && !db->stopping)
                        pthread_cond_wait(&db->cond, &db->lock);
                first = take_batch(db, &last, &n);
                pthread_mutex_unlock(&db->lock);
                if (!first)
                        return NULL; /* stopping, and nothing left */

                if (db->delay_ms)
                        (void) usleep(db->delay_ms * 1000U);
                run_group(db, first, n);

                pthread_mutex_lock(&db->lock);
                list_splice(&db->done, first, last);
                pthread_mutex_unlock(&db->lock);
                (void) !write(db->efd, &one, sizeof one);
        }
}

/* --- the loop thread --- */

static void deliver(ZoneDb *db) {
        ZoneDbOp *op;

        pthread_mutex_lock(&db->lock);
        op = db->done.head;
        db->done.head = db->done.tail = NULL;
        pthread_mutex_unlock(&db->lock);

        while (op) {
                ZoneDbOp *next = op->next;

                db->pending--;
                if (op->done) {
                        db->in_callback = true;
                        op->done(op->r, op->userdata);
                        db->in_callback = false;
                }
                op_free(op);
                op = next;
        }
}

static int on_eventfd(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        ZoneDb *db = userdata;
        uint64_t v;

        (void) !read(fd, &v, sizeof v);
        deliver(db);
        return 0;
}

static int enqueue(ZoneDb *db, ZoneDbOp *op) {
        if (db->freeing && !db->in_callback) {
                op_free(op);
                return -ESHUTDOWN;
        }
        pthread_mutex_lock(&db->lock);
        list_append(&db->queue, op);
        pthread_cond_signal(&db->cond);
        pthread_mutex_unlock(&db->lock);
        db->pending++;
        return 0;
}

int zone_db_put(ZoneDb *db, const ZoneRecord *rec, zone_db_done_t done, void *userdata) {
        ZoneDbOp *op;

        if (!db || !rec || !rec->device_id || !rec->state)
                return -EINVAL;
        op = calloc(1, sizeof *op);
        if (!op)
                return -ENOMEM;
        op->type = OP_PUT_ZONE;
        op->done = done;
        op->userdata = userdata;
        op->rec = *rec;
        op->rec.device_id = op->rec.state = op->rec.lease = op->rec.label = NULL;
        op->rec.sha256 = op->rec.note = NULL;
        if (free_and_strdup(&op->rec.device_id, rec->device_id) < 0 ||
            free_and_strdup(&op->rec.state, rec->state) < 0 ||
            free_and_strdup(&op->rec.lease, rec->lease) < 0 ||
            free_and_strdup(&op->rec.label, rec->label) < 0 ||
            free_and_strdup(&op->rec.sha256, rec->sha256) < 0 ||
            free_and_strdup(&op->rec.note, rec->note) < 0) {
                op_free(op);
                return -ENOMEM;
        }
        return enqueue(db, op);
}

int zone_db_put_device(ZoneDb *db, const char *device_id, uint64_t zone_size, uint32_t nr_zones,
                       zone_db_done_t done, void *userdata) {
        ZoneDbOp *op;

        if (!db || !device_id)
                return -EINVAL;
        op = calloc(1, sizeof *op);
        if (!op)
                return -ENOMEM;
        *op = (ZoneDbOp) {
                .type = OP_PUT_DEVICE,
                .zone_size = zone_size,
                .nr_zones = nr_zones,
                .seen_usec = now_usec(CLOCK_REALTIME),
                .done = done,
                .userdata = userdata,
        };
        op->rec.device_id = strdup(device_id);
        if (!op->rec.device_id) {
                op_free(op);
                return -ENOMEM;
        }
        return enqueue(db, op);
}

uint64_t zone_db_commits(ZoneDb *db) {
        return db ? __atomic_load_n(&db->commits, __ATOMIC_RELAXED) : 0;
}

unsigned zone_db_pending(ZoneDb *db) {
        return db ? db->pending : 0;
}

/* --- opening --- */

static int fsync_parent_dir(const char *path) {
        _cleanup_free_ char *copy = strdup(path);
        _cleanup_close_ int fd = -EBADF;

        if (!copy)
                return -ENOMEM;
        fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || fsync(fd) < 0)
                return negative_errno();
        return 0;
}

static int prepare(ZoneDb *db, sqlite3 *s, const char *sql, sqlite3_stmt **ret) {
        int rc = sqlite3_prepare_v3(s, sql, -1, SQLITE_PREPARE_PERSISTENT, ret, NULL);

        if (rc != SQLITE_OK)
                return log_error_errno(zone_db_errno(rc), "zone-db: %s: cannot prepare: %s", db->path,
                                       sqlite3_errmsg(s));
        return 0;
}

/* Creates the file ourselves: 0600 whatever the umask (leases are
 * secrets); SQLite gives -wal and -shm the database's mode. 1 if it made
 * it. */
static int create_file(const char *path) {
        _cleanup_close_ int fd = -EBADF;
        struct stat st;

        if (stat(path, &st) >= 0)
                return 0;
        if (errno != ENOENT)
                return log_error_errno(errno, "zone-db: cannot stat %s: %m", path);
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 && errno != EEXIST)
                return log_error_errno(errno, "zone-db: cannot create %s: %m", path);
        return fd >= 0;
}

/* The writer connection, set up, with its statements; then the loop's own
 * connection for reads: under WAL it reads the last committed snapshot
 * without waiting for the store thread's fsync. In memory, both share one
 * database (a shared cache, named after the store). */
static int open_connections(ZoneDb *db) {
        char uri[64];
        const char *name = db->path;
        int created = 0, r;

        if (db->in_memory) {
                snprintf(uri, sizeof uri, "file:blkmqd-zone-db-%p?mode=memory&cache=shared", (void *) db);
                name = uri;
        } else {
                created = create_file(db->path);
                if (created < 0)
                        return created;
        }
        r = zone_db_connect(name, db->in_memory, &db->wdb);
        if (r < 0)
                return r;
        r = zone_db_setup(db->wdb, db->path, db->in_memory);
        if (r < 0)
                return r;
#ifdef BLKMQD_NEGATIVE_CONTROL_RECORD_UNSYNCED
        /* Only in the test build blkmqd-nc-record-unsynced (tests/integration/
         * meson.build), which the power-cut runs must catch: no commit is
         * fsynced, a record is acknowledged before it is durable. */
        if (!db->in_memory && (r = zone_db_exec(db->wdb, "PRAGMA synchronous = OFF;", db->path)) < 0)
                return r;
#endif
        if (created) {
                /* The new file's name must survive a power cut too. */
                r = fsync_parent_dir(db->path);
                if (r < 0)
                        return log_error_errno(r, "zone-db: cannot sync the directory of %s: %m", db->path);
        }
        if ((r = prepare(db, db->wdb, put_zone_sql, &db->put_zone)) < 0 ||
            (r = prepare(db, db->wdb, put_device_sql, &db->put_device)) < 0 ||
            (r = prepare(db, db->wdb, "BEGIN IMMEDIATE", &db->begin)) < 0 ||
            (r = prepare(db, db->wdb, "COMMIT", &db->commit)) < 0 ||
            (r = prepare(db, db->wdb, "ROLLBACK", &db->rollback)) < 0)
                return r;
        r = zone_db_connect(name, db->in_memory, &db->rdb);
        if (r < 0)
                return r;
        return zone_db_exec(db->rdb, "PRAGMA query_only = ON;", db->path);
}

/* The eventfd the store thread wakes the loop with, and the thread. */
static int start_thread(ZoneDb *db, sd_event *e) {
        sigset_t all, old;
        pthread_attr_t a;
        int r;

        db->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (db->efd < 0)
                return -errno;
        r = sd_event_add_io(e, &db->source, db->efd, EPOLLIN, on_eventfd, db);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(db->source, "zone-db");

        /* The store thread gets no signals: those are for the loop's signalfd. */
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 1024 * 1024);
        r = -pthread_create(&db->thread, &a, store_thread, db);
        pthread_attr_destroy(&a);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r < 0)
                return r;
        db->thread_started = true;
        (void) pthread_setname_np(db->thread, "zone-db");
        return 0;
}

int zone_db_open(ZoneDb **ret, sd_event *e, const char *path) {
        ZoneDb *db;
        int r;

        if (!ret || !e || !path)
                return -EINVAL;
        db = calloc(1, sizeof *db);
        if (!db)
                return -ENOMEM;
        db->efd = -EBADF;
        /* Tests of the zone service's ordering make the store slow. */
        db->delay_ms = test_db_delay_msec();
        pthread_mutex_init(&db->lock, NULL);
        pthread_cond_init(&db->cond, NULL);
        db->in_memory = streq(path, ":memory:");
        db->path = strdup(path);
        if (!db->path) {
                r = -ENOMEM;
                goto fail;
        }
        r = open_connections(db);
        if (r < 0)
                goto fail;
        r = start_thread(db, e);
        if (r < 0)
                goto fail;
        *ret = db;
        return 0;
fail:
        zone_db_free(db);
        return r;
}

ZoneDb *zone_db_free(ZoneDb *db) {
        if (!db)
                return NULL;
        if (db->in_callback) {
                /* Freeing under our own feet would be a use after free. */
                log_error("zone-db: zone_db_free() called from a done callback; leaking the store.");
                return NULL;
        }
        db->freeing = true;

        if (db->thread_started) {
                pthread_mutex_lock(&db->lock);
                db->stopping = true;
                pthread_cond_broadcast(&db->cond);
                pthread_mutex_unlock(&db->lock);
                /* The thread runs the whole queue before it returns. */
                pthread_join(db->thread, NULL);
                db->thread_started = false;
        }

        /* The writer connection is ours now. Callbacks may queue more writes:
         * run them here, until nothing is left. */
        for (;;) {
                ZoneDbOp *first, *last = NULL;
                size_t n = 0;

                deliver(db);
                pthread_mutex_lock(&db->lock);
                first = take_batch(db, &last, &n);
                pthread_mutex_unlock(&db->lock);
                if (!first)
                        break;
                if (db->wdb && db->put_zone)
                        run_group(db, first, n);
                else
                        for (ZoneDbOp *op = first; op; op = op->next)
                                op->r = -ESHUTDOWN;
                pthread_mutex_lock(&db->lock);
                list_splice(&db->done, first, last);
                pthread_mutex_unlock(&db->lock);
        }

        sd_event_source_disable_unref(db->source);
        closep(&db->efd);
        sqlite3_finalize(db->put_zone);
        sqlite3_finalize(db->put_device);
        sqlite3_finalize(db->begin);
        sqlite3_finalize(db->commit);
        sqlite3_finalize(db->rollback);
        /* The reader first: the last connection to close checkpoints the WAL
         * into the database and removes it. */
        if (sqlite3_close(db->rdb) != SQLITE_OK)
                log_warning("zone-db: %s: closing the reader: %s", db->path, sqlite3_errmsg(db->rdb));
        if (sqlite3_close(db->wdb) != SQLITE_OK)
                log_warning("zone-db: %s: closing: %s", db->path, sqlite3_errmsg(db->wdb));
        pthread_mutex_destroy(&db->lock);
        pthread_cond_destroy(&db->cond);
        free(db->path);
        free(db);
        return NULL;
}

/* --- reads (loop thread, start only) --- */

static int column_strdup(sqlite3_stmt *s, int i, char **ret) {
        const unsigned char *t = sqlite3_column_text(s, i);

        if (!t) {
                if (sqlite3_errcode(sqlite3_db_handle(s)) == SQLITE_NOMEM)
                        return -ENOMEM;
                *ret = NULL;
                return 0;
        }
        *ret = strdup((const char *) t);
        return *ret ? 0 : -ENOMEM;
}

static uint64_t column_u64(sqlite3_stmt *s, int i, uint64_t if_null) {
        if (sqlite3_column_type(s, i) == SQLITE_NULL)
                return if_null;
        return (uint64_t) sqlite3_column_int64(s, i);
}

static int read_zone_row(sqlite3_stmt *s, ZoneRecord *z) {
        int r;

        *z = (ZoneRecord) {
                .zone_index = (uint32_t) column_u64(s, 1, 0),
                .owner_uid = (uint32_t) column_u64(s, 4, ZONE_DB_UID_INVALID),
                .bytes_written = column_u64(s, 6, 0),
                .reset_count = (uint32_t) column_u64(s, 8, 0),
                .allocated_usec = column_u64(s, 9, 0),
                .sealed_usec = column_u64(s, 10, 0),
                .updated_usec = column_u64(s, 11, 0),
        };
        if ((r = column_strdup(s, 0, &z->device_id)) < 0 ||
            (r = column_strdup(s, 2, &z->state)) < 0 ||
            (r = column_strdup(s, 3, &z->lease)) < 0 ||
            (r = column_strdup(s, 5, &z->label)) < 0 ||
            (r = column_strdup(s, 7, &z->sha256)) < 0 ||
            (r = column_strdup(s, 12, &z->note)) < 0) {
                zone_record_done(z);
                return r;
        }
        return 0;
}

int zone_db_load_device(ZoneDb *db, const char *device_id, ZoneRecord **ret, size_t *ret_n) {
        sqlite3_stmt *s = NULL;
        ZoneRecord *v = NULL;
        size_t n = 0, allocated = 0;
        int rc, r = 0;

        if (!db || !device_id || !ret || !ret_n)
                return -EINVAL;
        rc = sqlite3_prepare_v2(db->rdb,
                                "SELECT " ZONE_COLUMNS " FROM zones WHERE device_id = ?1 ORDER BY zone_index",
                                -1, &s, NULL);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_text(s, 1, device_id, -1, SQLITE_STATIC);
        while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
                if (n == allocated) {
                        size_t m = allocated ? allocated * 2 : 64;
                        ZoneRecord *t = reallocarray(v, m, sizeof *v);

                        if (!t) {
                                r = -ENOMEM;
                                break;
                        }
                        v = t;
                        allocated = m;
                }
                r = read_zone_row(s, &v[n]);
                if (r < 0)
                        break;
                n++;
                rc = SQLITE_OK;
        }
        if (r == 0 && rc != SQLITE_DONE)
                r = log_error_errno(zone_db_errno(rc), "zone-db: %s: loading %s: %s", db->path, device_id,
                                    sqlite3_errmsg(db->rdb));
        sqlite3_finalize(s);
        if (r < 0) {
                zone_records_free(v, n);
                return r;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

int zone_db_get_device(ZoneDb *db, const char *device_id, ZoneDbDevice *ret) {
        sqlite3_stmt *s = NULL;
        int rc, r;

        if (!db || !device_id || !ret)
                return -EINVAL;
        rc = sqlite3_prepare_v2(db->rdb,
                                "SELECT id, zone_size, nr_zones, first_seen, last_seen FROM devices WHERE id = ?1",
                                -1, &s, NULL);
        if (rc == SQLITE_OK)
                rc = sqlite3_bind_text(s, 1, device_id, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
                rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
                ZoneDbDevice d = {
                        .zone_size = column_u64(s, 1, 0),
                        .nr_zones = (uint32_t) column_u64(s, 2, 0),
                        .first_seen_usec = column_u64(s, 3, 0),
                        .last_seen_usec = column_u64(s, 4, 0),
                };
                r = column_strdup(s, 0, &d.id);
                if (r == 0)
                        *ret = d;
        } else if (rc == SQLITE_DONE)
                r = -ENOENT;
        else
                r = log_error_errno(zone_db_errno(rc), "zone-db: %s: reading device %s: %s", db->path,
                                    device_id, sqlite3_errmsg(db->rdb));
        sqlite3_finalize(s);
        return r;
}

void zone_record_done(ZoneRecord *r) {
        if (!r)
                return;
        r->device_id = mfree(r->device_id);
        r->state = mfree(r->state);
        r->lease = mfree(r->lease);
        r->label = mfree(r->label);
        r->sha256 = mfree(r->sha256);
        r->note = mfree(r->note);
}

void zone_records_free(ZoneRecord *r, size_t n) {
        if (!r)
                return;
        for (size_t i = 0; i < n; i++)
                zone_record_done(&r[i]);
        free(r);
}

void zone_db_device_done(ZoneDbDevice *d) {
        if (d)
                d->id = mfree(d->id);
}
