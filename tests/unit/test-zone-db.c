/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The zone record store against a real SQLite file in a temporary directory
 * under the build directory: schema creation, reopen and version checks;
 * round trips of every field with and without NULLs; upserts; constraint
 * violations reported to the callback without failing the rest of the group;
 * ordering; group commit; durability seen through a second connection; free
 * with pending writes; a child killed right after a callback; and a
 * small benchmark (printed, never asserted). */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "cleanup.h"
#include "util.h"
#include "zone-db.h"

#define DEV "wwn:nvme.1b36-deadbeef-QEMU NVMe Ctrl-00000001"
#define DEV2 "emu:/var/tmp/zoned.img"

typedef struct Fixture {
        char dir[64];
        char path[128];
        sd_event *e;
} Fixture;

typedef struct Call {
        unsigned n;   /* callbacks run */
        int r[4096];  /* their results, in callback order */
        unsigned seq[4096];
} Call;

typedef struct Tag {
        Call *call;
        unsigned seq;
} Tag;

static void on_done(int r, void *userdata) {
        Call *c = userdata;

        if (c->n < ELEMENTSOF(c->r))
                c->r[c->n] = r;
        c->n++;
}

static void on_done_tagged(int r, void *userdata) {
        Tag *t = userdata;
        Call *c = t->call;

        if (c->n < ELEMENTSOF(c->r)) {
                c->r[c->n] = r;
                c->seq[c->n] = t->seq;
        }
        c->n++;
}

static void rm_rf_dir(const char *dir) {
        DIR *d = opendir(dir);
        struct dirent *de;

        if (!d)
                return;
        while ((de = readdir(d))) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                (void) unlinkat(dirfd(d), de->d_name, 0);
        }
        closedir(d);
        (void) rmdir(dir);
}

static int setup(void **state) {
        Fixture *f = calloc(1, sizeof *f);

        assert_non_null(f);
        /* cwd under meson test: the build directory, a real file system. */
        strcpy(f->dir, "zone-db-test.XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        snprintf(f->path, sizeof f->path, "%s/zones.db", f->dir);
        assert_int_equal(sd_event_new(&f->e), 0);
        *state = f;
        return 0;
}

static int teardown(void **state) {
        Fixture *f = *state;

        sd_event_unref(f->e);
        rm_rf_dir(f->dir);
        free(f);
        return 0;
}

static void run_until(Fixture *f, const unsigned *counter, unsigned target) {
        uint64_t deadline = now_usec(CLOCK_MONOTONIC) + 30 * 1000000ULL;

        while (*counter < target) {
                assert_true(now_usec(CLOCK_MONOTONIC) < deadline);
                assert_true(sd_event_run(f->e, 1000000) >= 0);
        }
}

static ZoneDb *open_db(Fixture *f) {
        ZoneDb *db = NULL;

        assert_int_equal(zone_db_open(&db, f->e, f->path), 0);
        assert_non_null(db);
        return db;
}

static void put_device_sync(Fixture *f, ZoneDb *db, const char *id, uint64_t zone_size, uint32_t nr) {
        Call c = {};

        assert_int_equal(zone_db_put_device(db, id, zone_size, nr, on_done, &c), 0);
        run_until(f, &c.n, 1);
        assert_int_equal(c.r[0], 0);
}

static int put_sync(Fixture *f, ZoneDb *db, const ZoneRecord *rec) {
        Call c = {};

        assert_int_equal(zone_db_put(db, rec, on_done, &c), 0);
        run_until(f, &c.n, 1);
        return c.r[0];
}

static ZoneRecord simple(const char *dev, uint32_t idx, const char *state) {
        return (ZoneRecord) {
                .device_id = (char *) dev,
                .zone_index = idx,
                .state = (char *) state,
                .owner_uid = ZONE_DB_UID_INVALID,
                .updated_usec = 1000 + idx,
        };
}

/* A second, independent connection: what another process would see. */
static int64_t ext_query_int(const char *path, const char *sql) {
        sqlite3 *s = NULL;
        sqlite3_stmt *st = NULL;
        int64_t v = -1;

        assert_int_equal(sqlite3_open_v2(path, &s, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_prepare_v2(s, sql, -1, &st, NULL), SQLITE_OK);
        if (sqlite3_step(st) == SQLITE_ROW)
                v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        assert_int_equal(sqlite3_close(s), SQLITE_OK);
        return v;
}

static void ext_exec(const char *path, const char *sql) {
        sqlite3 *s = NULL;

        assert_int_equal(sqlite3_open_v2(path, &s, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_exec(s, sql, NULL, NULL, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_close(s), SQLITE_OK);
}

static void test_schema_create_reopen(void **state) {
        Fixture *f = *state;
        ZoneDb *db = open_db(f);
        ZoneDbDevice d = {};
        ZoneRecord *v = NULL;
        size_t n = 99;
        struct stat st;

        assert_int_equal(stat(f->path, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);
        assert_int_equal(zone_db_load_device(db, DEV, &v, &n), 0);
        assert_int_equal(n, 0);
        free(v);
        assert_int_equal(zone_db_get_device(db, DEV, &d), -ENOENT);
        put_device_sync(f, db, DEV, 64ULL << 20, 32);
        db = zone_db_free(db);
        assert_null(db);

        assert_int_equal(ext_query_int(f->path, "PRAGMA user_version"), ZONE_DB_SCHEMA_VERSION);
        assert_int_equal(ext_query_int(f->path, "PRAGMA application_id"), 0x626c6b7a);
        assert_int_equal(ext_query_int(f->path, "SELECT count(*) FROM sqlite_master WHERE type = 'table'"), 2);
        {
                sqlite3 *s = NULL;
                sqlite3_stmt *st2 = NULL;

                assert_int_equal(sqlite3_open_v2(f->path, &s, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
                assert_int_equal(sqlite3_prepare_v2(s, "PRAGMA journal_mode", -1, &st2, NULL), SQLITE_OK);
                assert_int_equal(sqlite3_step(st2), SQLITE_ROW);
                assert_string_equal((const char *) sqlite3_column_text(st2, 0), "wal");
                sqlite3_finalize(st2);
                sqlite3_close(s);
        }

        /* Reopen: no migration, the data is there. */
        db = open_db(f);
        assert_int_equal(zone_db_get_device(db, DEV, &d), 0);
        assert_string_equal(d.id, DEV);
        assert_int_equal(d.zone_size, 64ULL << 20);
        assert_int_equal(d.nr_zones, 32);
        assert_true(d.first_seen_usec > 0 && d.first_seen_usec == d.last_seen_usec);
        {
                uint64_t first = d.first_seen_usec;

                zone_db_device_done(&d);
                usleep(2000);
                put_device_sync(f, db, DEV, 128ULL << 20, 16);
                assert_int_equal(zone_db_get_device(db, DEV, &d), 0);
                assert_int_equal(d.first_seen_usec, first);
                assert_true(d.last_seen_usec > first);
                assert_int_equal(d.zone_size, 128ULL << 20);
                assert_int_equal(d.nr_zones, 16);
                zone_db_device_done(&d);
        }
        zone_db_free(db);

        /* A newer schema is refused, as is a file that is somebody else's. */
        ext_exec(f->path, "PRAGMA user_version = 99");
        assert_int_equal(zone_db_open(&db, f->e, f->path), -EPROTONOSUPPORT);
        ext_exec(f->path, "PRAGMA user_version = 1; PRAGMA application_id = 42");
        assert_int_equal(zone_db_open(&db, f->e, f->path), -EMEDIUMTYPE);
        {
                char p[160];
                _cleanup_close_ int fd = -EBADF;

                snprintf(p, sizeof p, "%s/junk.db", f->dir);
                fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
                assert_true(fd >= 0);
                assert_int_equal(write(fd, "this is not a database, it is a text file of some length......\n", 64), 64);
                assert_int_not_equal(zone_db_open(&db, f->e, p), 0);
        }
        snprintf(f->path, sizeof f->path, "%s/no/such/dir/zones.db", f->dir);
        assert_int_equal(zone_db_open(&db, f->e, f->path), -ENOENT);
}

static void assert_record_equal(const ZoneRecord *a, const ZoneRecord *b) {
        assert_string_equal(a->device_id, b->device_id);
        assert_int_equal(a->zone_index, b->zone_index);
        assert_string_equal(a->state, b->state);
        assert_true(streq_ptr(a->lease, b->lease));
        assert_int_equal(a->owner_uid, b->owner_uid);
        assert_true(streq_ptr(a->label, b->label));
        assert_int_equal(a->bytes_written, b->bytes_written);
        assert_true(streq_ptr(a->sha256, b->sha256));
        assert_int_equal(a->reset_count, b->reset_count);
        assert_int_equal(a->allocated_usec, b->allocated_usec);
        assert_int_equal(a->sealed_usec, b->sealed_usec);
        assert_int_equal(a->updated_usec, b->updated_usec);
        assert_true(streq_ptr(a->note, b->note));
}

static void test_round_trip(void **state) {
        Fixture *f = *state;
        ZoneDb *db = open_db(f);
        ZoneRecord full = {
                .device_id = (char *) DEV,
                .zone_index = UINT32_MAX - 1,
                .state = (char *) "sealed",
                .lease = (char *) "lease-7f3a",
                .owner_uid = 4242,
                .label = (char *) "firmware \"v2\" ☃ 'quoted'",
                .bytes_written = UINT64_MAX, /* bit-exact through a signed column */
                .sha256 = (char *) "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                .reset_count = UINT32_MAX,
                .allocated_usec = 1700000000000001ULL,
                .sealed_usec = 1700000000000002ULL,
                .updated_usec = 1700000000000003ULL,
                .note = (char *) "note",
        };
        ZoneRecord empty = {
                .device_id = (char *) DEV,
                .zone_index = 0,
                .state = (char *) "free",
                .owner_uid = ZONE_DB_UID_INVALID,
        };
        ZoneRecord root = simple(DEV2, 3, "allocated");
        ZoneRecord *v = NULL;
        size_t n = 0;

        root.owner_uid = 0; /* uid 0 is not "none" */
        root.label = (char *) "";
        put_device_sync(f, db, DEV, 1ULL << 40, UINT32_MAX);
        put_device_sync(f, db, DEV2, 4096, 4);
        assert_int_equal(put_sync(f, db, &full), 0);
        assert_int_equal(put_sync(f, db, &empty), 0);
        assert_int_equal(put_sync(f, db, &root), 0);

        /* NULLs are NULLs on disk, not 0 or "". */
        assert_int_equal(ext_query_int(f->path, "SELECT count(*) FROM zones WHERE zone_index = 0 AND lease IS NULL"
                                                " AND owner_uid IS NULL AND label IS NULL AND sha256 IS NULL"
                                                " AND allocated_usec IS NULL AND sealed_usec IS NULL AND note IS NULL"),
                         1);
        assert_int_equal(ext_query_int(f->path, "SELECT owner_uid FROM zones WHERE zone_index = 3"), 0);
        assert_int_equal(ext_query_int(f->path, "SELECT zone_index FROM zones WHERE state = 'sealed'"), UINT32_MAX - 1);

        assert_int_equal(zone_db_load_device(db, DEV, &v, &n), 0);
        assert_int_equal(n, 2);
        assert_record_equal(&v[0], &empty); /* ordered by zone_index */
        assert_record_equal(&v[1], &full);
        zone_records_free(v, n);
        assert_int_equal(zone_db_load_device(db, DEV2, &v, &n), 0);
        assert_int_equal(n, 1);
        assert_record_equal(&v[0], &root);
        zone_records_free(v, n);
        assert_int_equal(zone_db_load_device(db, "wwn:unknown", &v, &n), 0);
        assert_int_equal(n, 0);
        free(v);

        /* Argument errors are returned, and no callback follows. */
        {
                Call c = {};
                ZoneRecord bad = simple(NULL, 0, "free");

                assert_int_equal(zone_db_put(db, &bad, on_done, &c), -EINVAL);
                bad = simple(DEV, 0, NULL);
                assert_int_equal(zone_db_put(db, &bad, on_done, &c), -EINVAL);
                assert_int_equal(zone_db_put_device(db, NULL, 0, 0, on_done, &c), -EINVAL);
                assert_int_equal(zone_db_pending(db), 0);
                assert_int_equal(c.n, 0);
        }
        zone_db_free(db);

        /* And after a reopen. */
        db = open_db(f);
        assert_int_equal(zone_db_load_device(db, DEV, &v, &n), 0);
        assert_int_equal(n, 2);
        assert_record_equal(&v[1], &full);
        zone_records_free(v, n);
        zone_db_free(db);
}

static void test_upsert(void **state) {
        Fixture *f = *state;
        ZoneDb *db = open_db(f);
        ZoneRecord a = simple(DEV, 5, "writing"), b = simple(DEV, 5, "free");
        ZoneRecord *v = NULL;
        size_t n = 0;

        put_device_sync(f, db, DEV, 4096, 8);
        a.lease = (char *) "L1";
        a.label = (char *) "fw";
        a.owner_uid = 1000;
        a.allocated_usec = 77;
        a.bytes_written = 12345;
        assert_int_equal(put_sync(f, db, &a), 0);
        b.reset_count = 1;
        assert_int_equal(put_sync(f, db, &b), 0);

        assert_int_equal(zone_db_load_device(db, DEV, &v, &n), 0);
        assert_int_equal(n, 1);
        assert_record_equal(&v[0], &b); /* every field overwritten, NULLs too */
        zone_records_free(v, n);
        assert_int_equal(ext_query_int(f->path, "SELECT count(*) FROM zones"), 1);

        /* The lease is free again: another zone may take it. */
        a.zone_index = 6;
        assert_int_equal(put_sync(f, db, &a), 0);
        zone_db_free(db);
}

static void test_constraints(void **state) {
        Fixture *f = *state;
        ZoneDb *db = open_db(f);
        ZoneRecord good1 = simple(DEV, 1, "allocated"), bad = simple(DEV, 2, "borrowed");
        ZoneRecord good3 = simple(DEV, 3, "sealed"), dup = simple(DEV, 4, "allocated");
        ZoneRecord orphan = simple("wwn:never-seen", 0, "free");
        ZoneRecord *v = NULL;
        Call c = {};
        size_t n = 0;

        good1.lease = (char *) "LEASE";
        dup.lease = (char *) "LEASE";
        /* All queued before the loop runs: one group, in which the bad ones
         * fail alone. */
        assert_int_equal(zone_db_put_device(db, DEV, 4096, 8, on_done, &c), 0);
        assert_int_equal(zone_db_put(db, &good1, on_done, &c), 0);
        assert_int_equal(zone_db_put(db, &bad, on_done, &c), 0);
        assert_int_equal(zone_db_put(db, &good3, on_done, &c), 0);
        assert_int_equal(zone_db_put(db, &dup, on_done, &c), 0);
        assert_int_equal(zone_db_put(db, &orphan, on_done, &c), 0);
        assert_int_equal(zone_db_pending(db), 6);
        run_until(f, &c.n, 6);
        assert_int_equal(zone_db_pending(db), 0);
        assert_int_equal(c.r[0], 0);
        assert_int_equal(c.r[1], 0);
        assert_int_equal(c.r[2], -EINVAL); /* CHECK (state IN ...) */
        assert_int_equal(c.r[3], 0);
        assert_int_equal(c.r[4], -EEXIST); /* lease UNIQUE */
        assert_int_equal(c.r[5], -ENODEV); /* no such device */

        assert_int_equal(zone_db_load_device(db, DEV, &v, &n), 0);
        assert_int_equal(n, 2);
        assert_int_equal(v[0].zone_index, 1);
        assert_int_equal(v[1].zone_index, 3);
        zone_records_free(v, n);
        zone_db_free(db);
}

static void test_ordering(void **state) {
        Fixture *f = *state;
        ZoneDb *db = open_db(f);
        ZoneRecord *v = NULL;
        Tag tags[200];
        Call *c = calloc(1, sizeof *c);
        size_t n = 0;

        assert_non_null(c);
        put_device_sync(f, db, DEV, 4096, 8);
        /* 200 puts over the same 2 zones, some while the loop runs (so they
         * straddle transactions); the last put of each zone wins. */
        for (unsigned i = 0; i < ELEMENTSOF(tags); i++) {
                ZoneRecord r = simple(DEV, i % 2, i % 3 ? "writing" : "allocated");
                char label[32];

                snprintf(label, sizeof label, "put-%u", i);
                r.label = label;
                r.bytes_written = i;
                tags[i] = (Tag) { .call = c, .seq = i };
                assert_int_equal(zone_db_put(db, &r, on_done_tagged, &tags[i]), 0);
                if (i % 50 == 49)
                        assert_true(sd_event_run(f->e, 0) >= 0);
        }
        run_until(f, &c->n, ELEMENTSOF(tags));
        for (unsigned i = 0; i < ELEMENTSOF(tags); i++) {
                assert_int_equal(c->r[i], 0);
                assert_int_equal(c->seq[i], i); /* callbacks in submission order */
        }
        assert_int_equal(zone_db_load_device(db, DEV, &v, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(v[0].label, "put-198");
        assert_int_equal(v[0].bytes_written, 198);
        assert_string_equal(v[1].label, "put-199");
        assert_int_equal(v[1].bytes_written, 199);
        zone_records_free(v, n);
        zone_db_free(db);
        free(c);
}

static void test_group_commit(void **state) {
        Fixture *f = *state;
        ZoneDb *db = open_db(f);
        Call *c = calloc(1, sizeof *c);
        uint64_t before;

        assert_non_null(c);
        put_device_sync(f, db, DEV, 4096, 1000);
        before = zone_db_commits(db);
        for (unsigned i = 0; i < 1000; i++) {
                ZoneRecord r = simple(DEV, i, "allocated");
                assert_int_equal(zone_db_put(db, &r, on_done, c), 0);
        }
        run_until(f, &c->n, 1000);
        for (unsigned i = 0; i < 1000; i++)
                assert_int_equal(c->r[i], 0);
        print_message("group commit: 1000 puts in %" PRIu64 " transactions\n", zone_db_commits(db) - before);
        assert_true(zone_db_commits(db) - before < 100);
        assert_true(zone_db_commits(db) - before >= 1);
        assert_int_equal(ext_query_int(f->path, "SELECT count(*) FROM zones"), 1000);
        zone_db_free(db);
        free(c);
}

typedef struct DurCheck {
        const char *path;
        uint32_t idx;
        int64_t seen;
        unsigned n;
} DurCheck;

static void on_done_check(int r, void *userdata) {
        DurCheck *d = userdata;
        char sql[96];

        assert_int_equal(r, 0);
        /* Inside the callback: another connection already sees the row. */
        snprintf(sql, sizeof sql, "SELECT count(*) FROM zones WHERE zone_index = %u", d->idx);
        d->seen = ext_query_int(d->path, sql);
        d->n++;
}

static void test_durability(void **state) {
        Fixture *f = *state;
        ZoneDb *db = open_db(f);
        DurCheck d[3];

        put_device_sync(f, db, DEV, 4096, 8);
        for (unsigned i = 0; i < ELEMENTSOF(d); i++) {
                ZoneRecord r = simple(DEV, i, "allocated");

                d[i] = (DurCheck) { .path = f->path, .idx = i, .seen = -1 };
                assert_int_equal(zone_db_put(db, &r, on_done_check, &d[i]), 0);
        }
        for (unsigned i = 0; i < ELEMENTSOF(d); i++) {
                run_until(f, &d[i].n, 1);
                assert_int_equal(d[i].seen, 1);
        }
        zone_db_free(db);
}

typedef struct Chain {
        ZoneDb *db;
        unsigned n, chained;
        int last_r;
} Chain;

static void on_done_chain(int r, void *userdata) {
        Chain *ch = userdata;

        ch->n++;
        ch->last_r = r;
        /* A callback run during zone_db_free() queues one more write. */
        if (!ch->chained) {
                ZoneRecord z = simple(DEV, 999, "releasing");

                ch->chained = 1;
                assert_int_equal(zone_db_put(ch->db, &z, on_done_chain, ch), 0);
        }
}

static void test_free_pending(void **state) {
        Fixture *f = *state;
        ZoneDb *db = open_db(f);
        Call *c = calloc(1, sizeof *c);
        Chain ch = { .db = db };
        ZoneRecord *v = NULL;
        size_t n = 0;

        assert_non_null(c);
        assert_int_equal(zone_db_put_device(db, DEV, 4096, 1000, on_done, c), 0);
        for (unsigned i = 0; i < 300; i++) {
                ZoneRecord r = simple(DEV, i, "writing");
                assert_int_equal(zone_db_put(db, &r, on_done, c), 0);
        }
        {
                ZoneRecord r = simple(DEV, 998, "bogus");
                assert_int_equal(zone_db_put(db, &r, on_done, c), 0);
        }
        {
                ZoneRecord r = simple(DEV, 997, "sealed");
                assert_int_equal(zone_db_put(db, &r, on_done_chain, &ch), 0);
        }
        assert_int_equal(zone_db_pending(db), 303);
        zone_db_free(db); /* without ever running the loop */
        assert_int_equal(c->n, 302);
        for (unsigned i = 0; i < 301; i++)
                assert_int_equal(c->r[i], 0);
        assert_int_equal(c->r[301], -EINVAL);
        assert_int_equal(ch.n, 2);
        assert_int_equal(ch.last_r, 0);

        db = open_db(f);
        assert_int_equal(zone_db_load_device(db, DEV, &v, &n), 0);
        assert_int_equal(n, 302);
        assert_int_equal(v[300].zone_index, 997);
        assert_int_equal(v[301].zone_index, 999);
        assert_string_equal(v[301].state, "releasing");
        zone_records_free(v, n);
        zone_db_free(db);
        free(c);
}

/* The child keeps CRASH_WINDOW puts in flight (each callback queues the
 * next), tells the parent every acknowledged index, and dies right after
 * the CRASH_AT-th callback (SIGKILL from the parent): no free, no close, no
 * checkpoint, transactions still running on the store thread. */
#define CRASH_PUTS 3000
#define CRASH_WINDOW 300
#define CRASH_AT 700

typedef struct Crash {
        ZoneDb *db;
        int fd;
        unsigned n;
        uint32_t next;
} Crash;

static Crash crash;

static void crash_put_next(void);

static void on_done_crash(int r, void *userdata) {
        uint32_t idx = (uint32_t) (uintptr_t) userdata;

        if (r < 0)
                _exit(3);
        if (write(crash.fd, &idx, sizeof idx) != sizeof idx)
                _exit(4);
        if (++crash.n == CRASH_AT)
                /* The parent SIGKILLs us now. Like _exit() (every thread
                 * at once, no close, no checkpoint), but from outside, so
                 * not even valgrind's leak check runs on the store we
                 * abandon on purpose. The store thread commits on
                 * meanwhile: more rows than acknowledged are fine. */
                for (;;)
                        pause();
        crash_put_next();
}

static void crash_put_next(void) {
        ZoneRecord r;
        char lease[32];

        if (crash.next >= CRASH_PUTS)
                return;
        r = simple(DEV, crash.next, "allocated");
        snprintf(lease, sizeof lease, "lease-%u", crash.next);
        r.lease = lease;
        if (zone_db_put(crash.db, &r, on_done_crash, (void *) (uintptr_t) crash.next) < 0)
                _exit(2);
        crash.next++;
}

static _Noreturn void crash_child(const char *path, int fd) {
        sd_event *e = NULL;

        crash.fd = fd;
        if (sd_event_new(&e) < 0 || zone_db_open(&crash.db, e, path) < 0)
                _exit(2);
        if (zone_db_put_device(crash.db, DEV, 4096, CRASH_PUTS, NULL, NULL) < 0)
                _exit(2);
        for (unsigned i = 0; i < CRASH_WINDOW; i++)
                crash_put_next();
        for (;;)
                if (sd_event_run(e, UINT64_MAX) < 0)
                        _exit(2);
}

static void test_crash_safety(void **state) {
        Fixture *f = *state;
        uint32_t acked[CRASH_PUTS];
        size_t n_acked = 0;
        ZoneRecord *v = NULL;
        size_t n = 0;
        int p[2], status;
        pid_t pid;
        ZoneDb *db;

        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                close(p[0]);
                crash_child(f->path, p[1]);
        }
        close(p[1]);
        for (;;) {
                ssize_t k = read(p[0], &acked[n_acked], sizeof acked[0]);
                if (k == 0)
                        break;
                assert_int_equal(k, sizeof acked[0]);
                assert_true(++n_acked <= CRASH_AT);
                if (n_acked == CRASH_AT)
                        assert_int_equal(kill(pid, SIGKILL), 0);
        }
        close(p[0]);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (WIFEXITED(status))
                fail_msg("child exited with %d", WEXITSTATUS(status));
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), SIGKILL);
        assert_int_equal(n_acked, CRASH_AT);

        /* The WAL was left behind (no clean close): recovery on open. */
        db = open_db(f);
        assert_int_equal(zone_db_load_device(db, DEV, &v, &n), 0);
        print_message("crash: %zu acknowledged, %zu rows after recovery\n", n_acked, n);
        assert_true(n >= n_acked);
        assert_true(n <= CRASH_AT + CRASH_WINDOW - 1); /* queued at most */
        for (size_t i = 0; i < n_acked; i++) {
                uint32_t idx = acked[i];
                char lease[32];

                assert_true(idx < n);
                assert_int_equal(v[idx].zone_index, idx); /* rows are a prefix: in order */
                snprintf(lease, sizeof lease, "lease-%u", idx);
                assert_string_equal(v[idx].lease, lease);
                assert_string_equal(v[idx].state, "allocated");
        }
        zone_records_free(v, n);
        zone_db_free(db);
        {
                sqlite3 *s = NULL;
                sqlite3_stmt *st = NULL;

                assert_int_equal(sqlite3_open_v2(f->path, &s, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
                assert_int_equal(sqlite3_prepare_v2(s, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
                assert_int_equal(sqlite3_step(st), SQLITE_ROW);
                assert_string_equal((const char *) sqlite3_column_text(st, 0), "ok");
                sqlite3_finalize(st);
                sqlite3_close(s);
        }
}

/* ":memory:": the store in memory, for tests of what uses it. Each store
 * its own: what one committed the loop's reads see, another store does not. */
static void test_in_memory(void **state) {
        Fixture *f = *state;
        ZoneDb *db = NULL, *other = NULL;
        ZoneRecord *recs = NULL, rec = simple(DEV, 3, "sealed");
        ZoneDbDevice dev = {};
        size_t n = 99;
        struct stat st;

        assert_int_equal(zone_db_open(&db, f->e, ":memory:"), 0);
        assert_int_equal(zone_db_open(&other, f->e, ":memory:"), 0);
        assert_true(stat(":memory:", &st) < 0 && errno == ENOENT); /* no file of that name */
        put_device_sync(f, db, DEV, 1 << 20, 8);
        rec.sha256 = (char *) "00ff";
        assert_int_equal(put_sync(f, db, &rec), 0);

        assert_int_equal(zone_db_load_device(db, DEV, &recs, &n), 0);
        assert_int_equal(n, 1);
        assert_int_equal(recs[0].zone_index, 3);
        assert_string_equal(recs[0].state, "sealed");
        assert_string_equal(recs[0].sha256, "00ff");
        zone_records_free(recs, n);
        assert_int_equal(zone_db_get_device(db, DEV, &dev), 0);
        assert_int_equal(dev.nr_zones, 8);
        zone_db_device_done(&dev);

        assert_int_equal(zone_db_load_device(other, DEV, &recs, &n), 0);
        assert_int_equal(n, 0);
        free(recs);
        assert_int_equal(zone_db_get_device(other, DEV, &dev), -ENOENT);
        zone_db_free(other);
        zone_db_free(db);
}

static void test_benchmark(void **state) {
        Fixture *f = *state;
        ZoneDb *db = open_db(f);
        Call *c = calloc(1, sizeof *c);
        const unsigned N = 20000, SEQ = 200;
        uint64_t t0, t1, commits;

        assert_non_null(c);
        put_device_sync(f, db, DEV, 4096, N);

        /* Pipelined: queue everything, wait for all callbacks. */
        commits = zone_db_commits(db);
        t0 = now_usec(CLOCK_MONOTONIC);
        for (unsigned i = 0; i < N; i++) {
                ZoneRecord r = simple(DEV, i, "sealed");
                r.sha256 = (char *) "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
                assert_int_equal(zone_db_put(db, &r, on_done, c), 0);
        }
        run_until(f, &c->n, N);
        t1 = now_usec(CLOCK_MONOTONIC);
        print_message("bench: %u pipelined puts in %.3f s: %.0f puts/s, %" PRIu64 " commits\n", N,
                      (t1 - t0) / 1e6, N * 1e6 / (double) (t1 - t0), zone_db_commits(db) - commits);

        /* One at a time: each put waits for its own fsync. */
        commits = zone_db_commits(db);
        t0 = now_usec(CLOCK_MONOTONIC);
        for (unsigned i = 0; i < SEQ; i++) {
                ZoneRecord r = simple(DEV, i, "free");
                assert_int_equal(put_sync(f, db, &r), 0);
        }
        t1 = now_usec(CLOCK_MONOTONIC);
        print_message("bench: %u sequential puts in %.3f s: %.0f puts/s (%.2f ms per durable commit), %" PRIu64
                      " commits\n",
                      SEQ, (t1 - t0) / 1e6, SEQ * 1e6 / (double) (t1 - t0), (t1 - t0) / 1e3 / SEQ,
                      zone_db_commits(db) - commits);
        zone_db_free(db);
        free(c);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_schema_create_reopen, setup, teardown),
                cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
                cmocka_unit_test_setup_teardown(test_upsert, setup, teardown),
                cmocka_unit_test_setup_teardown(test_constraints, setup, teardown),
                cmocka_unit_test_setup_teardown(test_ordering, setup, teardown),
                cmocka_unit_test_setup_teardown(test_group_commit, setup, teardown),
                cmocka_unit_test_setup_teardown(test_durability, setup, teardown),
                cmocka_unit_test_setup_teardown(test_free_pending, setup, teardown),
                cmocka_unit_test_setup_teardown(test_crash_safety, setup, teardown),
                cmocka_unit_test_setup_teardown(test_in_memory, setup, teardown),
                cmocka_unit_test_setup_teardown(test_benchmark, setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
