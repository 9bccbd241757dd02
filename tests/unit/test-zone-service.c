/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The zone service on its own (src/zones/zone-service.h): no socket, no
 * root. An emulated zoned file in the build directory, the records in an
 * SQLite database in memory (or in a file, for the restart), and the
 * sd-event loop run until each completion arrives. Every legal transition
 * of a lease, every illegal one refused with its named error, and the
 * reconcile of a restart. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cleanup.h"
#include "sha256.h"
#include "uring-pool.h"
#include "work-pool.h"
#include "zone-db.h"
#include "zone-service.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define ZSIZE MiB
#define ZCAP (768 * KiB)
#define NZONES 4U
#define OWNER 1000
#define OTHER 1001

typedef struct Fixture {
        char dir[64];
        char emu[128];
        char db[128];
        sd_event *e;
        UringPool *uring;
        WorkPool *work;
        ZonesConfig config;
        ZoneService *s;
} Fixture;

/* What a completion said. */
typedef struct Got {
        bool done;
        int r;
        ZoneError error;
        char lease[37];
        char state[16];
        char parameter[16];
        char name[128];
        uint32_t zone;
        uint64_t bytes, size, capacity;
        unsigned n_objects;
} Got;

static void on_done(const ZoneResult *res, void *userdata) {
        Got *g = userdata;

        assert_false(g->done); /* exactly once */
        g->done = true;
        g->r = res->r;
        g->error = res->error;
        if (res->lease)
                snprintf(g->lease, sizeof g->lease, "%s", res->lease);
        if (res->state)
                snprintf(g->state, sizeof g->state, "%s", res->state);
        if (res->parameter)
                snprintf(g->parameter, sizeof g->parameter, "%s", res->parameter);
        if (res->name)
                snprintf(g->name, sizeof g->name, "%s", res->name);
        g->zone = res->ref.zone;
        g->bytes = res->bytes;
        g->size = res->size;
        g->capacity = res->capacity;
        g->n_objects = (unsigned) res->n_objects;
        if (res->error == ZONE_ERROR_NONE) {
                assert_int_equal(res->r, 0);
                assert_null(zone_error_to_string(res->error));
        } else {
                assert_true(res->r < 0);
                if (res->error != ZONE_ERROR_CANCELLED)
                        assert_non_null(zone_error_to_string(res->error));
        }
}

static void run_until_done(Fixture *f, Got *g) {
        while (!g->done)
                assert_true(sd_event_run(f->e, UINT64_MAX) >= 0);
}

static void service_open(Fixture *f, const char *database) {
        f->config.database = (char *) database;
        assert_int_equal(work_pool_new(&f->work, f->e, 1), 0);
        assert_int_equal(zone_service_new(&f->s, f->e, &f->config, f->uring, f->work), 0);
}

/* As blkmqd stops: the pools' last callbacks land in a live service. */
static void service_close(Fixture *f) {
        f->work = work_pool_free(f->work);
        f->s = zone_service_free(f->s);
}

static int setup_config(void **state, uint32_t max_active, unsigned reset_batch) {
        Fixture *f = calloc(1, sizeof *f);

        assert_non_null(f);
        /* The build directory (cwd under meson test): O_DIRECT works there. */
        strcpy(f->dir, "zone-service-test.XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        snprintf(f->emu, sizeof f->emu, "%s/zns", f->dir);
        snprintf(f->db, sizeof f->db, "%s/zones.db", f->dir);
        assert_int_equal(sd_event_new(&f->e), 0);
        assert_int_equal(uring_pool_new(&f->uring, f->e, 1, NULL, 0), 0);
        f->config = (ZonesConfig) {
                .emulate = f->emu,
                .zone_size = ZSIZE,
                .zone_capacity = ZCAP,
                .zone_count = NZONES,
                .max_active = max_active,
                .reset_batch = reset_batch,
                .verify_while_writing = true,
                .unique_labels = true,
        };
        service_open(f, ":memory:");
        *state = f;
        return 0;
}

static int setup(void **state) {
        return setup_config(state, 0, 1);
}

/* Released zones wait for their reset until an allocation finds none free. */
static int setup_lazy_reset(void **state) {
        return setup_config(state, 0, 100);
}

static int setup_active_limit(void **state) {
        return setup_config(state, 1, 1);
}

static int teardown(void **state) {
        Fixture *f = *state;
        char p[160];

        service_close(f);
        uring_pool_free(f->uring);
        sd_event_unref(f->e);
        (void) unlink(f->emu);
        snprintf(p, sizeof p, "%s.zones", f->emu);
        (void) unlink(p);
        (void) unlink(f->db);
        snprintf(p, sizeof p, "%s-wal", f->db);
        (void) unlink(p);
        snprintf(p, sizeof p, "%s-shm", f->db);
        (void) unlink(p);
        assert_int_equal(rmdir(f->dir), 0);
        free(f);
        return 0;
}

/* ---- one call each, run to its completion ---- */

static ZoneError allocate(Fixture *f, uint64_t size, const char *label, uid_t uid, Got *g) {
        ZoneAllocRequest req = { .label = label, .size = size };
        ZoneOp *op = NULL;

        *g = (Got) {};
        assert_int_equal(zone_service_allocate(f->s, &req, uid, on_done, g, &op), 0);
        assert_null(op); /* it waits only with a zone being reset */
        run_until_done(f, g);
        return g->error;
}

static uint8_t *pattern(size_t len, unsigned seed) {
        uint8_t *b = malloc(len ? len : 1);

        assert_non_null(b);
        for (size_t i = 0; i < len; i++)
                b[i] = (uint8_t) ((i * 131 + seed * 7 + i / 4096) & 0xff);
        return b;
}

static ZoneError append(Fixture *f, const char *lease, size_t len, unsigned seed, uid_t uid, Got *g) {
        ZoneAppendRequest req = { .lease = lease, .fd = -1, .data = pattern(len, seed), .data_len = len };

        *g = (Got) {};
        assert_int_equal(zone_service_append(f->s, &req, uid, NULL, on_done, g, NULL), 0);
        run_until_done(f, g);
        return g->error;
}

/* The SHA-256 (hex) of the appends of lens[i] bytes with seed i. */
static void sha_of(const size_t *lens, size_t n, char out[SHA256_HEX_SIZE]) {
        _cleanup_sha256_ Sha256 sha = {};
        uint8_t d[SHA256_DIGEST_SIZE];

        assert_int_equal(sha256_init(&sha), 0);
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ uint8_t *b = pattern(lens[i], (unsigned) i);
                sha256_update(&sha, b, lens[i]);
        }
        sha256_final(&sha, d);
        sha256_hex(d, out);
}

static ZoneError seal(Fixture *f, const char *lease, const char *sha, uid_t uid, Got *g) {
        *g = (Got) {};
        assert_int_equal(zone_service_seal(f->s, lease, sha, uid, on_done, g), 0);
        run_until_done(f, g);
        return g->error;
}

static ZoneError release(Fixture *f, const char *lease, uid_t uid, Got *g) {
        *g = (Got) {};
        assert_int_equal(zone_service_release(f->s, lease, uid, on_done, g), 0);
        run_until_done(f, g);
        return g->error;
}

static const ZoneSlot *slot(Fixture *f, uint32_t zone) {
        ZoneDeviceInfo info;
        const ZoneDevice *d = zone_service_device_at(f->s, 0);

        assert_non_null(d);
        assert_null(zone_service_device_at(f->s, 1));
        zone_device_get_info(d, &info);
        assert_int_equal(info.n_zones, NZONES);
        assert_true(zone < info.n_zones);
        return &info.slots[zone];
}

/* Runs the loop until zone is in state st (its reset, in the background). */
static void run_until_state(Fixture *f, uint32_t zone, ZoneState st) {
        while (slot(f, zone)->state != st)
                assert_true(sd_event_run(f->e, UINT64_MAX) >= 0);
}

/* Allocates a zone and appends lens[] (seeds 0, 1, ...) to it. */
static void allocate_and_write(Fixture *f, const char *label, const size_t *lens, size_t n, Got *lease) {
        Got g;

        assert_int_equal(allocate(f, ZCAP, label, OWNER, lease), ZONE_ERROR_NONE);
        for (size_t i = 0; i < n; i++)
                assert_int_equal(append(f, lease->lease, lens[i], (unsigned) i, OWNER, &g), ZONE_ERROR_NONE);
}

/* ---- legal transitions ---- */

static void test_lifecycle(void **state) {
        Fixture *f = *state;
        const size_t lens[] = { 10000, 3 * 4096, 5000 }; /* partial blocks carried between appends */
        char sha[SHA256_HEX_SIZE];
        Got a, g, again;
        uint32_t z, zz;

        assert_int_equal(allocate(f, 64 * KiB, "one", OWNER, &a), ZONE_ERROR_NONE);
        assert_int_equal(strlen(a.lease), 36);
        z = a.zone;
        assert_int_equal(slot(f, z)->state, ZONE_STATE_ALLOCATED);
        assert_string_equal(slot(f, z)->lease, a.lease);
        assert_string_equal(slot(f, z)->label, "one");
        assert_int_equal(slot(f, z)->owner_uid, OWNER);
        assert_ptr_equal(zone_service_find_lease(f->s, a.lease, &zz), zone_service_device_at(f->s, 0));
        assert_int_equal(zz, z);

        size_t total = 0;
        for (size_t i = 0; i < ELEMENTSOF(lens); i++) {
                assert_int_equal(append(f, a.lease, lens[i], (unsigned) i, OWNER, &g), ZONE_ERROR_NONE);
                total += lens[i];
                assert_int_equal(g.bytes, total);
                assert_int_equal(g.zone, z);
                assert_int_equal(slot(f, z)->state, ZONE_STATE_WRITING);
                assert_int_equal(slot(f, z)->bytes_written, total);
        }

        sha_of(lens, ELEMENTSOF(lens), sha);
        assert_int_equal(seal(f, a.lease, sha, OWNER, &g), ZONE_ERROR_NONE);
        assert_int_equal(g.zone, z);
        assert_int_equal(slot(f, z)->state, ZONE_STATE_SEALED);
        assert_string_equal(slot(f, z)->sha256, sha);
        assert_true(zone_device_is_object(zone_service_device_at(f->s, 0), z));

        /* The object reads back to its SHA-256 (Verify, by label). */
        g = (Got) {};
        assert_int_equal(zone_service_verify(f->s, &(ZoneObjectRef) { .label = "one" }, NULL, true, on_done, &g), 0);
        run_until_done(f, &g);
        assert_int_equal(g.error, ZONE_ERROR_NONE);
        assert_int_equal(g.n_objects, 1);
        assert_int_equal(slot(f, z)->scrub_result, 0);
        assert_true(slot(f, z)->scrub_usec > 0);

        assert_int_equal(release(f, a.lease, OWNER, &g), ZONE_ERROR_NONE);
        assert_int_equal(g.zone, z);
        assert_int_equal(slot(f, z)->state, ZONE_STATE_RELEASING);
        assert_null(slot(f, z)->lease);
        assert_null(zone_service_find_lease(f->s, a.lease, &zz));

        /* ResetBatch=1: reset at once, then free again. */
        run_until_state(f, z, ZONE_STATE_FREE);
        assert_int_equal(slot(f, z)->reset_count, 1);
        assert_int_equal(slot(f, z)->bytes_written, 0);
        assert_null(slot(f, z)->sha256);
        assert_null(slot(f, z)->label);
        assert_int_equal(slot(f, z)->zone.wp, slot(f, z)->zone.start);

        /* Free again: it can be leased again (the label too). */
        assert_int_equal(allocate(f, 64 * KiB, "one", OWNER, &again), ZONE_ERROR_NONE);
        assert_string_not_equal(again.lease, a.lease);
}

static void test_release_without_data(void **state) {
        Fixture *f = *state;
        Got a, g;

        assert_int_equal(allocate(f, 4096, NULL, OWNER, &a), ZONE_ERROR_NONE);
        assert_int_equal(release(f, a.lease, OWNER, &g), ZONE_ERROR_NONE);
        assert_int_equal(slot(f, a.zone)->state, ZONE_STATE_RELEASING);
        run_until_state(f, a.zone, ZONE_STATE_FREE);
        assert_int_equal(slot(f, a.zone)->reset_count, 1);
        assert_int_equal(slot(f, a.zone)->owner_uid, ZONE_DB_UID_INVALID);
}

/* Root may use anybody's lease. */
static void test_root_may(void **state) {
        Fixture *f = *state;
        Got a, g;

        assert_int_equal(allocate(f, 4096, NULL, OWNER, &a), ZONE_ERROR_NONE);
        assert_int_equal(append(f, a.lease, 4096, 0, 0, &g), ZONE_ERROR_NONE);
        assert_int_equal(release(f, a.lease, 0, &g), ZONE_ERROR_NONE);
}

/* No zone free but one releasing: the allocation waits for its reset. */
static void test_allocation_waits(void **state) {
        Fixture *f = *state;
        ZoneAllocRequest req = { .size = 4096 };
        Got a[NZONES], g, waited, gone;
        ZoneOp *op = NULL, *op2 = NULL;

        for (unsigned i = 0; i < NZONES; i++)
                assert_int_equal(allocate(f, 4096, NULL, OWNER, &a[i]), ZONE_ERROR_NONE);
        assert_int_equal(allocate(f, 4096, NULL, OWNER, &g), ZONE_ERROR_NO_FREE_ZONE);

        assert_int_equal(release(f, a[2].lease, OWNER, &g), ZONE_ERROR_NONE);
        /* ResetBatch=100: the released zone waits for its reset. */
        assert_int_equal(slot(f, a[2].zone)->state, ZONE_STATE_RELEASING);

        waited = (Got) {};
        assert_int_equal(zone_service_allocate(f->s, &req, OTHER, on_done, &waited, &op), 0);
        assert_false(waited.done);
        assert_non_null(op);
        /* A second one waits too, and its client goes away. */
        gone = (Got) {};
        assert_int_equal(zone_service_allocate(f->s, &req, OTHER, on_done, &gone, &op2), 0);
        assert_non_null(op2);
        zone_op_cancel(op2);

        run_until_done(f, &waited);
        assert_int_equal(waited.error, ZONE_ERROR_NONE);
        assert_int_equal(waited.zone, a[2].zone);
        assert_int_equal(slot(f, a[2].zone)->reset_count, 1);
        assert_int_equal(slot(f, a[2].zone)->owner_uid, OTHER);
        run_until_done(f, &gone);
        assert_int_equal(gone.error, ZONE_ERROR_CANCELLED);
}

/* ---- illegal transitions, each refused by name ---- */

static void test_unknown_lease(void **state) {
        Fixture *f = *state;
        const char *none = "00000000-0000-4000-8000-000000000000";
        char sha[SHA256_HEX_SIZE];
        Got g;

        memset(sha, 'a', 64);
        sha[64] = 0;
        assert_int_equal(append(f, none, 4096, 0, OWNER, &g), ZONE_ERROR_LEASE_NOT_FOUND);
        assert_string_equal(g.lease, none);
        assert_int_equal(g.r, -ENOENT);
        assert_string_equal(zone_error_to_string(g.error), "io.blkmqd.Zones.LeaseNotFound");
        assert_int_equal(seal(f, none, sha, OWNER, &g), ZONE_ERROR_LEASE_NOT_FOUND);
        assert_int_equal(release(f, none, OWNER, &g), ZONE_ERROR_LEASE_NOT_FOUND);
}

static void test_other_uid(void **state) {
        Fixture *f = *state;
        const size_t lens[] = { 8192 };
        char sha[SHA256_HEX_SIZE];
        Got a, g;

        allocate_and_write(f, NULL, lens, 1, &a);
        sha_of(lens, 1, sha);
        assert_int_equal(append(f, a.lease, 4096, 1, OTHER, &g), ZONE_ERROR_PERMISSION_DENIED);
        assert_string_equal(zone_error_to_string(g.error), "org.varlink.service.PermissionDenied");
        assert_int_equal(seal(f, a.lease, sha, OTHER, &g), ZONE_ERROR_PERMISSION_DENIED);
        assert_int_equal(release(f, a.lease, OTHER, &g), ZONE_ERROR_PERMISSION_DENIED);
        /* Nothing changed. */
        assert_int_equal(slot(f, a.zone)->state, ZONE_STATE_WRITING);
        assert_int_equal(slot(f, a.zone)->bytes_written, 8192);
        assert_int_equal(seal(f, a.lease, sha, OWNER, &g), ZONE_ERROR_NONE);
}

static void test_past_capacity(void **state) {
        Fixture *f = *state;
        const size_t lens[] = { ZCAP - 4096 };
        Got a, g;

        allocate_and_write(f, NULL, lens, 1, &a);
        assert_int_equal(append(f, a.lease, 8192, 1, OWNER, &g), ZONE_ERROR_TOO_LARGE);
        assert_int_equal(g.capacity, ZCAP);
        assert_string_equal(zone_error_to_string(g.error), "io.blkmqd.Zones.TooLarge");
        /* What reached the device stays; the lease is usable again. */
        assert_int_equal(slot(f, a.zone)->bytes_written, ZCAP - 4096);
        assert_int_equal(append(f, a.lease, 4096, 1, OWNER, &g), ZONE_ERROR_NONE);
        assert_int_equal(g.bytes, ZCAP);
}

static void test_bad_data(void **state) {
        Fixture *f = *state;
        ZoneAppendRequest req = { .fd = -1, .bad_parameter = "data" };
        Got a, g = {};

        assert_int_equal(allocate(f, 4096, NULL, OWNER, &a), ZONE_ERROR_NONE);
        req.lease = a.lease;
        assert_int_equal(zone_service_append(f->s, &req, OWNER, NULL, on_done, &g, NULL), 0);
        run_until_done(f, &g);
        assert_int_equal(g.error, ZONE_ERROR_INVALID_PARAMETER);
        assert_string_equal(g.parameter, "data");
        assert_int_equal(slot(f, a.zone)->state, ZONE_STATE_ALLOCATED);
}

static void test_seal_mismatch(void **state) {
        Fixture *f = *state;
        const size_t lens[] = { 20000 };
        char sha[SHA256_HEX_SIZE];
        Got a, g;

        allocate_and_write(f, NULL, lens, 1, &a);
        sha_of(lens, 1, sha);
        sha[0] = sha[0] == '0' ? '1' : '0';
        assert_int_equal(seal(f, a.lease, sha, OWNER, &g), ZONE_ERROR_CHECKSUM_MISMATCH);
        assert_string_equal(zone_error_to_string(g.error), "io.blkmqd.Zones.ChecksumMismatch");
        assert_int_equal(slot(f, a.zone)->state, ZONE_STATE_FAILED);
        assert_non_null(slot(f, a.zone)->note);
        /* Failed: no further seal, no append. */
        assert_int_equal(seal(f, a.lease, sha, OWNER, &g), ZONE_ERROR_WRONG_STATE);
        assert_string_equal(g.state, "failed");
        assert_int_equal(append(f, a.lease, 4096, 0, OWNER, &g), ZONE_ERROR_WRONG_STATE);
}

/* ---- the flush before an acknowledgement (BLKMQD_TEST_FAIL_FLUSH) ---- */

/* The seal's flush fails: FlushFailed naming the device, the zone failed
 * (not sealed, no object), recorded so (a restart keeps it failed), and a
 * second Seal does not turn it sealed on a flush that works this time. */
static void test_seal_flush_failed(void **state) {
        Fixture *f = *state;
        const size_t lens[] = { 20000 };
        char sha[SHA256_HEX_SIZE];
        Got a, g;

        service_close(f);
        service_open(f, f->db);
        allocate_and_write(f, "flushed", lens, 1, &a);
        sha_of(lens, 1, sha);
        assert_int_equal(setenv("BLKMQD_TEST_FAIL_FLUSH", "1", 1), 0);
        assert_int_equal(seal(f, a.lease, sha, OWNER, &g), ZONE_ERROR_FLUSH_FAILED);
        assert_int_equal(unsetenv("BLKMQD_TEST_FAIL_FLUSH"), 0);
        assert_string_equal(zone_error_to_string(g.error), "io.blkmqd.Zones.FlushFailed");
        assert_int_equal(g.r, -EIO);
        assert_true(strncmp(g.name, "emu:", 4) == 0);
        assert_int_equal(slot(f, a.zone)->state, ZONE_STATE_FAILED);
        assert_null(slot(f, a.zone)->sha256);
        assert_non_null(strstr(slot(f, a.zone)->note, "flush"));
        assert_false(zone_device_is_object(zone_service_device_at(f->s, 0), a.zone));
        assert_int_equal(seal(f, a.lease, sha, OWNER, &g), ZONE_ERROR_WRONG_STATE);
        assert_string_equal(g.state, "failed");

        service_close(f);
        service_open(f, f->db);
        assert_int_equal(slot(f, a.zone)->state, ZONE_STATE_FAILED);
        assert_string_equal(slot(f, a.zone)->lease, a.lease);
        /* Its holder lets it go: reset, flushed, free. */
        assert_int_equal(release(f, a.lease, OWNER, &g), ZONE_ERROR_NONE);
        run_until_state(f, a.zone, ZONE_STATE_FREE);
}

/* The flush after a batch of resets fails: the zone is not recorded free
 * (it might come back with its data after a power cut) but failed. */
static void test_reset_flush_failed(void **state) {
        Fixture *f = *state;
        const size_t lens[] = { 8192 };
        Got a, g;

        allocate_and_write(f, NULL, lens, 1, &a);
        assert_int_equal(setenv("BLKMQD_TEST_FAIL_FLUSH", "1", 1), 0);
        assert_int_equal(release(f, a.lease, OWNER, &g), ZONE_ERROR_NONE);
        while (slot(f, a.zone)->state == ZONE_STATE_RELEASING)
                assert_true(sd_event_run(f->e, UINT64_MAX) >= 0);
        assert_int_equal(unsetenv("BLKMQD_TEST_FAIL_FLUSH"), 0);
        assert_int_equal(slot(f, a.zone)->state, ZONE_STATE_FAILED);
        assert_non_null(strstr(slot(f, a.zone)->note, "flush"));
        assert_int_equal(slot(f, a.zone)->reset_count, 0);
}

/* A device whose write cache cannot be flushed gets no leases: the
 * emulation is refused when its first flush (at attach) fails. */
static void test_attach_flush_refused(void **state) {
        Fixture *f = *state;

        service_close(f);
        assert_int_equal(setenv("BLKMQD_TEST_FAIL_FLUSH", "1", 1), 0);
        assert_int_equal(work_pool_new(&f->work, f->e, 1), 0);
        f->config.database = (char *) ":memory:";
        assert_int_equal(zone_service_new(&f->s, f->e, &f->config, f->uring, f->work), -EIO);
        assert_null(f->s);
        assert_int_equal(unsetenv("BLKMQD_TEST_FAIL_FLUSH"), 0);
        assert_int_equal(zone_service_new(&f->s, f->e, &f->config, f->uring, f->work), 0);
}

/* Verify reads through the io_uring pool (its read is in the pool as the
 * call returns) and hashes to the end of an object whose last block is
 * partial; a flipped byte there is a mismatch, kept, not repaired. After
 * zone_service_stop() it starts no read: the answer comes, the record of
 * the last check stays. */
static void test_verify_through_pool(void **state) {
        Fixture *f = *state;
        const size_t lens[] = { 300000, 300000, 100001 };
        char sha[SHA256_HEX_SIZE];
        uint64_t at, checked;
        Got a, g;
        int fd;

        allocate_and_write(f, "v", lens, ELEMENTSOF(lens), &a);
        sha_of(lens, ELEMENTSOF(lens), sha);
        assert_int_equal(seal(f, a.lease, sha, OWNER, &g), ZONE_ERROR_NONE);

        g = (Got) {};
        assert_int_equal(zone_service_verify(f->s, &(ZoneObjectRef) { .lease = a.lease }, NULL, false, on_done, &g), 0);
        assert_int_equal(uring_pool_pending(f->uring), 1);
        run_until_done(f, &g);
        assert_int_equal(g.error, ZONE_ERROR_NONE);
        assert_int_equal(g.n_objects, 1);
        assert_int_equal(slot(f, a.zone)->scrub_result, 0);

        at = slot(f, a.zone)->zone.start + 700000; /* in the partial last block */
        fd = open(f->emu, O_RDWR | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(pwrite(fd, "\xa5", 1, (off_t) at), 1);
        close(fd);
        g = (Got) {};
        assert_int_equal(zone_service_verify(f->s, NULL, NULL, true, on_done, &g), 0);
        run_until_done(f, &g);
        assert_int_equal(g.error, ZONE_ERROR_NONE);
        assert_int_equal(g.n_objects, 1);
        assert_int_equal(slot(f, a.zone)->scrub_result, -EBADMSG);
        assert_int_equal(slot(f, a.zone)->state, ZONE_STATE_SEALED);
        checked = slot(f, a.zone)->scrub_usec;

        zone_service_stop(f->s);
        g = (Got) {};
        assert_int_equal(zone_service_verify(f->s, NULL, NULL, true, on_done, &g), 0);
        assert_int_equal(uring_pool_pending(f->uring), 0);
        run_until_done(f, &g);
        assert_int_equal(slot(f, a.zone)->scrub_usec, checked);
        assert_int_equal(slot(f, a.zone)->scrub_result, -EBADMSG);
}

static void test_seal_twice_release_twice(void **state) {
        Fixture *f = *state;
        const size_t lens[] = { 4096 };
        char sha[SHA256_HEX_SIZE];
        Got a, g;

        /* Nothing written yet: no seal. */
        assert_int_equal(allocate(f, 4096, NULL, OWNER, &a), ZONE_ERROR_NONE);
        sha_of(lens, 1, sha);
        assert_int_equal(seal(f, a.lease, sha, OWNER, &g), ZONE_ERROR_WRONG_STATE);
        assert_string_equal(g.state, "allocated");

        assert_int_equal(append(f, a.lease, 4096, 0, OWNER, &g), ZONE_ERROR_NONE);
        assert_int_equal(seal(f, a.lease, sha, OWNER, &g), ZONE_ERROR_NONE);
        assert_int_equal(seal(f, a.lease, sha, OWNER, &g), ZONE_ERROR_WRONG_STATE);
        assert_string_equal(g.state, "sealed");
        assert_string_equal(zone_error_to_string(g.error), "io.blkmqd.Zones.WrongState");
        assert_int_equal(append(f, a.lease, 4096, 1, OWNER, &g), ZONE_ERROR_WRONG_STATE);

        assert_int_equal(release(f, a.lease, OWNER, &g), ZONE_ERROR_NONE);
        assert_int_equal(release(f, a.lease, OWNER, &g), ZONE_ERROR_LEASE_NOT_FOUND);
}

static void test_allocate_refused(void **state) {
        Fixture *f = *state;
        Got a[NZONES], g;

        assert_int_equal(allocate(f, ZCAP + 4096, NULL, OWNER, &g), ZONE_ERROR_TOO_LARGE);
        assert_int_equal(g.size, ZCAP + 4096);
        assert_int_equal(g.capacity, ZCAP);
        g = (Got) {};
        assert_int_equal(zone_service_allocate(f->s, &(ZoneAllocRequest) { .device = "/nowhere", .size = 1 }, OWNER,
                                               on_done, &g, NULL),
                         0);
        assert_true(g.done);
        assert_int_equal(g.error, ZONE_ERROR_NO_SUCH_DEVICE);

        assert_int_equal(allocate(f, 4096, "label", OWNER, &a[0]), ZONE_ERROR_NONE);
        assert_int_equal(allocate(f, 4096, "label", OWNER, &g), ZONE_ERROR_LABEL_EXISTS);
        assert_string_equal(g.lease, a[0].lease);
        for (unsigned i = 1; i < NZONES; i++)
                assert_int_equal(allocate(f, 4096, NULL, OWNER, &a[i]), ZONE_ERROR_NONE);
        /* None free, none being reset: no waiting. */
        assert_int_equal(allocate(f, 4096, NULL, OWNER, &g), ZONE_ERROR_NO_FREE_ZONE);
        assert_string_equal(zone_error_to_string(g.error), "io.blkmqd.Zones.NoFreeZone");
}

static void test_active_limit(void **state) {
        Fixture *f = *state;
        Got a, g;

        assert_int_equal(allocate(f, 4096, NULL, OWNER, &a), ZONE_ERROR_NONE);
        assert_int_equal(allocate(f, 4096, NULL, OWNER, &g), ZONE_ERROR_ZONE_LIMIT_REACHED);
        assert_string_equal(zone_error_to_string(g.error), "io.blkmqd.Zones.ZoneLimitReached");
        /* Released and reset, the zone is no longer active. */
        assert_int_equal(release(f, a.lease, OWNER, &g), ZONE_ERROR_NONE);
        run_until_state(f, a.zone, ZONE_STATE_FREE);
        assert_int_equal(allocate(f, 4096, NULL, OWNER, &g), ZONE_ERROR_NONE);
}

static void test_device_gone(void **state) {
        Fixture *f = *state;
        const size_t lens[] = { 4096 };
        char sha[SHA256_HEX_SIZE];
        ZoneDeviceInfo info;
        Got a, g;

        zone_device_get_info(zone_service_device_at(f->s, 0), &info);
        allocate_and_write(f, NULL, lens, 1, &a);
        sha_of(lens, 1, sha);
        zone_service_device_gone(f->s, NULL); /* the emulation has no sysname */
        assert_int_equal(append(f, a.lease, 4096, 1, OWNER, &g), ZONE_ERROR_DEVICE_GONE);
        assert_string_equal(zone_error_to_string(g.error), "io.blkmqd.Zones.DeviceGone");
        assert_int_equal(seal(f, a.lease, sha, OWNER, &g), ZONE_ERROR_DEVICE_GONE);
        assert_int_equal(release(f, a.lease, OWNER, &g), ZONE_ERROR_DEVICE_GONE);
        g = (Got) {};
        assert_int_equal(zone_service_allocate(f->s, &(ZoneAllocRequest) { .device = info.id, .size = 4096 }, OWNER,
                                               on_done, &g, NULL),
                         0);
        assert_true(g.done);
        assert_int_equal(g.error, ZONE_ERROR_DEVICE_GONE);
        assert_int_equal(allocate(f, 4096, NULL, OWNER, &g), ZONE_ERROR_NO_FREE_ZONE);
        /* The lease and its record stay. */
        assert_int_equal(slot(f, a.zone)->state, ZONE_STATE_WRITING);
        assert_string_equal(slot(f, a.zone)->lease, a.lease);
}

/* ---- restart ---- */

/* The service closed with a zone of each kind, and opened again on the same
 * emulation and records: each as zone_reconcile() says. */
static void test_restart_reconcile(void **state) {
        Fixture *f = *state;
        const size_t lens[] = { 12288, 100 };
        char sha[SHA256_HEX_SIZE];
        Got allocated, writing, sealed, released, g;
        uint32_t z;

        service_close(f);
        f->config.reset_batch = 100; /* the released zone is still releasing at the close */
        service_open(f, f->db);

        assert_int_equal(allocate(f, 4096, "allocated", OWNER, &allocated), ZONE_ERROR_NONE);
        allocate_and_write(f, "writing", lens, 2, &writing);
        allocate_and_write(f, "sealed", lens, 2, &sealed);
        sha_of(lens, 2, sha);
        assert_int_equal(seal(f, sealed.lease, sha, OWNER, &g), ZONE_ERROR_NONE);
        allocate_and_write(f, "released", lens, 1, &released);
        assert_int_equal(release(f, released.lease, OWNER, &g), ZONE_ERROR_NONE);
        assert_int_equal(slot(f, released.zone)->state, ZONE_STATE_RELEASING);
        assert_int_equal(slot(f, writing.zone)->state, ZONE_STATE_WRITING);

        service_close(f);
        service_open(f, f->db);

        /* allocated, device empty → free: the lease did not survive */
        assert_int_equal(slot(f, allocated.zone)->state, ZONE_STATE_FREE);
        assert_null(slot(f, allocated.zone)->lease);
        assert_null(zone_service_find_lease(f->s, allocated.lease, &z));
        /* and nothing of the lease stays on it: no label, no owner */
        assert_null(slot(f, allocated.zone)->label);
        assert_int_equal(slot(f, allocated.zone)->owner_uid, ZONE_DB_UID_INVALID);
        assert_int_equal(slot(f, allocated.zone)->allocated_usec, 0);
        /* writing → releasing: its partial data is reclaimed by a reset */
        assert_int_equal(slot(f, writing.zone)->state, ZONE_STATE_RELEASING);
        assert_null(slot(f, writing.zone)->lease);
        assert_null(slot(f, writing.zone)->label);
        assert_int_equal(slot(f, writing.zone)->owner_uid, ZONE_DB_UID_INVALID);
        assert_non_null(slot(f, writing.zone)->note);
        /* sealed, device full with the data → sealed, lease and SHA-256 kept */
        assert_int_equal(slot(f, sealed.zone)->state, ZONE_STATE_SEALED);
        assert_string_equal(slot(f, sealed.zone)->lease, sealed.lease);
        assert_string_equal(slot(f, sealed.zone)->sha256, sha);
        assert_string_equal(slot(f, sealed.zone)->label, "sealed");
        assert_int_equal(slot(f, sealed.zone)->bytes_written, lens[0] + lens[1]);
        assert_int_equal(slot(f, sealed.zone)->owner_uid, OWNER);
        /* releasing → releasing: the reset is done again */
        assert_int_equal(slot(f, released.zone)->state, ZONE_STATE_RELEASING);

        /* The resets run (started at once: the start is starved), then
         * both are free; the sealed object still reads back. */
        run_until_state(f, writing.zone, ZONE_STATE_FREE);
        run_until_state(f, released.zone, ZONE_STATE_FREE);
        assert_int_equal(slot(f, writing.zone)->reset_count, 1);
        g = (Got) {};
        assert_int_equal(zone_service_verify(f->s, NULL, NULL, true, on_done, &g), 0);
        run_until_done(f, &g);
        assert_int_equal(g.error, ZONE_ERROR_NONE);
        assert_int_equal(g.n_objects, 1);
        assert_int_equal(slot(f, sealed.zone)->scrub_result, 0);
        assert_int_equal(release(f, sealed.lease, OWNER, &g), ZONE_ERROR_NONE);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_lifecycle, setup, teardown),
                cmocka_unit_test_setup_teardown(test_release_without_data, setup, teardown),
                cmocka_unit_test_setup_teardown(test_root_may, setup, teardown),
                cmocka_unit_test_setup_teardown(test_allocation_waits, setup_lazy_reset, teardown),
                cmocka_unit_test_setup_teardown(test_unknown_lease, setup, teardown),
                cmocka_unit_test_setup_teardown(test_other_uid, setup, teardown),
                cmocka_unit_test_setup_teardown(test_past_capacity, setup, teardown),
                cmocka_unit_test_setup_teardown(test_bad_data, setup, teardown),
                cmocka_unit_test_setup_teardown(test_seal_mismatch, setup, teardown),
                cmocka_unit_test_setup_teardown(test_seal_flush_failed, setup, teardown),
                cmocka_unit_test_setup_teardown(test_reset_flush_failed, setup, teardown),
                cmocka_unit_test_setup_teardown(test_attach_flush_refused, setup, teardown),
                cmocka_unit_test_setup_teardown(test_verify_through_pool, setup, teardown),
                cmocka_unit_test_setup_teardown(test_seal_twice_release_twice, setup, teardown),
                cmocka_unit_test_setup_teardown(test_allocate_refused, setup, teardown),
                cmocka_unit_test_setup_teardown(test_active_limit, setup_active_limit, teardown),
                cmocka_unit_test_setup_teardown(test_device_gone, setup, teardown),
                cmocka_unit_test_setup_teardown(test_restart_reconcile, setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
