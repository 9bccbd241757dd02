/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The emulated zoned backend (src/zbd/zbd-emu.c) over files in the build
 * directory, data through a real io_uring pool: geometry and report,
 * sequential writes, the write pointer and its persistence, the write rules
 * (at the wp, within capacity), finish and reset, open/active accounting
 * with implicit opens, conventional zones, and crash safety (a child killed
 * with SIGKILL between a write's completion and its record, a torn record).
 * No root needed. */

#include <errno.h>
#include <fcntl.h>
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
#include <unistd.h>

#include <cmocka.h>

#include "cleanup.h"
#include "uring-pool.h"
#include "zbd.h"

#define MiB (UINT64_C(1) << 20)
#define KiB (UINT64_C(1) << 10)
#define ZSIZE MiB
#define ZCAP (768 * KiB)
#define NZONES 8U
#define CHUNK (128 * KiB)

typedef struct Fixture {
        char dir[64];
        char path[96];
        sd_event *e;
        UringPool *pool;
} Fixture;

typedef struct Waiter {
        unsigned n;
} Waiter;

static uint8_t pat(uint64_t off, unsigned seed) {
        uint64_t x = (off + 1 + seed) * UINT64_C(0x9e3779b97f4a7c15);
        return (uint8_t) ((x >> 56) ^ (off >> 12) ^ seed);
}

static uint8_t *pat_buf(uint64_t off, size_t len, unsigned seed) {
        uint8_t *b = NULL;

        assert_int_equal(posix_memalign((void **) &b, 4096, len), 0);
        for (size_t i = 0; i < len; i++)
                b[i] = pat(off + i, seed);
        return b;
}

static bool is_pat(const uint8_t *b, uint64_t off, size_t len, unsigned seed) {
        for (size_t i = 0; i < len; i++)
                if (b[i] != pat(off + i, seed))
                        return false;
        return true;
}

static bool is_zero(const uint8_t *b, size_t len) {
        for (size_t i = 0; i < len; i++)
                if (b[i])
                        return false;
        return true;
}

static int setup(void **state) {
        Fixture *f = calloc(1, sizeof *f);

        assert_non_null(f);
        /* The build directory (cwd under meson test): a real file system
         * with O_DIRECT and hole punching, unlike tmpfs for O_DIRECT. */
        strcpy(f->dir, "zbd-emu-test.XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        snprintf(f->path, sizeof f->path, "%s/zns", f->dir);
        assert_int_equal(sd_event_new(&f->e), 0);
        assert_int_equal(uring_pool_new(&f->pool, f->e, 1, NULL, 0), 0);
        *state = f;
        return 0;
}

static int teardown(void **state) {
        Fixture *f = *state;
        char p[128];

        uring_pool_free(f->pool);
        sd_event_unref(f->e);
        (void) unlink(f->path);
        snprintf(p, sizeof p, "%s.zones", f->path);
        (void) unlink(p);
        assert_int_equal(rmdir(f->dir), 0);
        free(f);
        return 0;
}

static Zbd *emu(Fixture *f, uint32_t max_open, uint32_t max_active) {
        Zbd *z = NULL;

        assert_int_equal(zbd_emu_open(f->path, ZSIZE, ZCAP, NZONES, max_open, max_active, &z), 0);
        assert_non_null(z);
        return z;
}

static void done_cb(UringReq *req, void *userdata) {
        ((Waiter *) userdata)->n++;
}

/* One write through the pool: prep, submit, wait, append_result. */
static int zwrite(Fixture *f, Zbd *z, uint64_t zone_start, uint64_t wp, const void *buf, uint32_t len) {
        Waiter w = {};
        UringReq req = { .cpu = -1, .done = done_cb, .userdata = &w };
        uint64_t off = UINT64_MAX;
        int r;

        r = z->ops->prep_append(z, zone_start, wp, buf, len, &req);
        if (r < 0)
                return r;
        assert_int_equal(req.op, URING_OP_WRITE);
        assert_int_equal(req.offset, wp);
        assert_int_equal(req.len, len);
        assert_int_equal(uring_pool_submit(f->pool, &req), 0);
        for (unsigned i = 0; w.n == 0 && i < 300; i++)
                assert_true(sd_event_run(f->e, 100 * 1000) >= 0);
        assert_int_equal(w.n, 1);
        r = z->ops->append_result(z, &req, &off);
        if (r >= 0)
                assert_int_equal(off, wp);
        return r;
}

/* Appends len bytes of pattern seed at the zone's write pointer, in CHUNKs. */
static void fill(Fixture *f, Zbd *z, uint64_t zone_start, uint64_t len, unsigned seed) {
        Zone zone;

        assert_int_equal(zbd_report_zone(z, zone_start, &zone), 0);
        for (uint64_t done = 0; done < len; done += CHUNK) {
                uint32_t n = (uint32_t) (len - done < CHUNK ? len - done : CHUNK);
                _cleanup_free_ uint8_t *b = pat_buf(zone.wp + done, n, seed);

                assert_int_equal(zwrite(f, z, zone_start, zone.wp + done, b, n), 0);
        }
}

static Zone rep(Zbd *z, unsigned i) {
        Zone zone;

        assert_int_equal(zbd_report_zone(z, (uint64_t) i * ZSIZE, &zone), 0);
        return zone;
}

static void test_geometry_report(void **state) {
        Fixture *f = *state;
        Zbd *z = emu(f, 2, 3);
        _cleanup_free_ Zone *zones = NULL;
        Zone few[3];
        size_t n = 0;
        struct stat st;

        assert_string_equal(z->ops->name, "emulated");
        assert_int_equal(z->limits.nr_zones, NZONES);
        assert_int_equal(z->limits.zone_size, ZSIZE);
        assert_int_equal(z->limits.max_open, 2);
        assert_int_equal(z->limits.max_active, 3);
        assert_int_equal(z->limits.zone_append_max, 0);
        assert_int_equal(z->limits.block_size, 4096);
        assert_int_equal(z->limits.max_write, 512 * KiB);
        assert_int_equal(zbd_chunk_max(z), 512 * KiB);
        assert_true(z->fd >= 0);
        assert_int_equal(stat(f->path, &st), 0);
        assert_int_equal(st.st_size, NZONES * ZSIZE);
        assert_true(st.st_blocks * 512 < (blkcnt_t) MiB); /* sparse */

        assert_int_equal(zbd_report_all(z, &zones, &n), 0);
        assert_int_equal(n, NZONES);
        for (unsigned i = 0; i < NZONES; i++) {
                assert_int_equal(zones[i].start, i * ZSIZE);
                assert_int_equal(zones[i].len, ZSIZE);
                assert_int_equal(zones[i].capacity, ZCAP);
                assert_int_equal(zones[i].wp, i * ZSIZE);
                assert_int_equal(zones[i].type, ZONE_TYPE_SEQWRITE_REQ);
                assert_int_equal(zones[i].cond, ZONE_COND_EMPTY);
                assert_int_equal(zone_remaining(&zones[i]), ZCAP);
        }
        /* From the zone containing an offset on, at most *n. */
        n = 3;
        assert_int_equal(z->ops->report(z, 6 * ZSIZE + 12345, few, &n), 0);
        assert_int_equal(n, 2);
        assert_int_equal(few[0].start, 6 * ZSIZE);
        assert_int_equal(few[1].start, 7 * ZSIZE);
        n = 3;
        assert_int_equal(z->ops->report(z, NZONES * ZSIZE, few, &n), 0);
        assert_int_equal(n, 0);
        assert_int_equal(zbd_report_zone(z, NZONES * ZSIZE, few), -ENXIO);
        zbd_free(z);
}

static void test_sequential_writes_persist(void **state) {
        Fixture *f = *state;
        Zbd *z = emu(f, 0, 0);
        _cleanup_free_ uint8_t *rb = malloc(3 * CHUNK);
        Zone zone;

        assert_non_null(rb);
        fill(f, z, ZSIZE, 3 * CHUNK, 1);
        zone = rep(z, 1);
        assert_int_equal(zone.wp, ZSIZE + 3 * CHUNK);
        assert_int_equal(zone.cond, ZONE_COND_IMP_OPEN);
        assert_int_equal(zone_written(&zone), 3 * CHUNK);
        assert_int_equal(z->ops->read(z, ZSIZE, rb, 3 * CHUNK), 0);
        assert_true(is_pat(rb, ZSIZE, 3 * CHUNK, 1));
        /* Past the write pointer: zeros. */
        assert_int_equal(z->ops->read(z, ZSIZE + 3 * CHUNK, rb, CHUNK), 0);
        assert_true(is_zero(rb, CHUNK));
        zbd_free(z);

        /* Reopened as after a power cycle: the write pointer is kept, the
         * open zone is CLOSED; geometry comes from the file (0 = as stored). */
        assert_int_equal(zbd_emu_open(f->path, 0, 0, 0, 0, 0, &z), 0);
        assert_int_equal(z->limits.nr_zones, NZONES);
        zone = rep(z, 1);
        assert_int_equal(zone.wp, ZSIZE + 3 * CHUNK);
        assert_int_equal(zone.cond, ZONE_COND_CLOSED);
        assert_int_equal(zone.capacity, ZCAP);
        assert_int_equal(z->ops->read(z, ZSIZE, rb, 3 * CHUNK), 0);
        assert_true(is_pat(rb, ZSIZE, 3 * CHUNK, 1));
        /* Writing on from there reopens it implicitly. */
        fill(f, z, ZSIZE, CHUNK, 1);
        zone = rep(z, 1);
        assert_int_equal(zone.wp, ZSIZE + 4 * CHUNK);
        assert_int_equal(zone.cond, ZONE_COND_IMP_OPEN);
        zbd_free(z);

        /* Geometry that does not match the file: refused. */
        assert_int_equal(zbd_emu_open(f->path, 2 * ZSIZE, ZCAP, NZONES, 0, 0, &z), -EINVAL);
}

/* A stream of writes at the write pointer (emu_prep_stream): the parts
 * land in order from the write pointer, each moved through append_result()
 * with its own offset; a stream past the capacity or of a bad shape is
 * refused before any I/O, and one that starts where the write pointer is
 * not fails as a write would. */
static void test_stream(void **state) {
        Fixture *f = *state;
        Zbd *z = emu(f, 0, 0);
        const uint32_t len = 3 * CHUNK + 8192;
        _cleanup_free_ uint8_t *b = pat_buf(2 * ZSIZE + CHUNK, len, 5), *rb = malloc(len);
        UringStreamPart parts[4];
        UringStream st = {};
        Waiter w = {};
        Zone zone;

        assert_non_null(rb);
        fill(f, z, 2 * ZSIZE, CHUNK, 5); /* the stream goes on from there */
        assert_int_equal(z->ops->prep_stream(z, 2 * ZSIZE, b, len, CHUNK + 512, &st), -EINVAL);
        assert_int_equal(z->ops->prep_stream(z, 2 * ZSIZE, b, len + 100, CHUNK, &st), -EINVAL);
        assert_int_equal(z->ops->prep_stream(z, 2 * ZSIZE, b, ZCAP, CHUNK, &st), -EIO); /* past the capacity */
        assert_int_equal(z->ops->prep_stream(z, 2 * ZSIZE, b, len, CHUNK, &st), 0);
        assert_int_equal(st.req.op, URING_OP_WRITE_STREAM);
        assert_int_equal(st.req.offset, 2 * ZSIZE + CHUNK);
        assert_int_equal(st.req.len, len);
        assert_int_equal(uring_stream_parts(&st), 4);
        st.depth = 1;
        st.parts = parts;
        st.req.cpu = -1;
        st.req.done = done_cb;
        st.req.userdata = &w;
        assert_int_equal(uring_pool_submit(f->pool, &st.req), 0);
        for (unsigned i = 0; w.n == 0 && i < 300; i++)
                assert_true(sd_event_run(f->e, 100 * 1000) >= 0);
        assert_int_equal(st.req.res, (int) len);
        for (uint32_t i = 0; i < 4; i++) {
                uint32_t n = i < 3 ? CHUNK : 8192;
                UringReq t = { .offset = parts[i].result64, .len = n, .res = parts[i].res };
                uint64_t off = 0;

                assert_int_equal(parts[i].result64, 2 * ZSIZE + CHUNK + (uint64_t) i * CHUNK);
                assert_int_equal(z->ops->append_result(z, &t, &off), 0);
                assert_int_equal(off, parts[i].result64);
                assert_int_equal(rep(z, 2).wp, off + n);
        }
        assert_int_equal(z->ops->read(z, 2 * ZSIZE + CHUNK, rb, len), 0);
        assert_true(is_pat(rb, 2 * ZSIZE + CHUNK, len, 5));
        /* A part fed out of order is refused as a stray write. */
        {
                UringReq t = { .offset = 2 * ZSIZE, .len = CHUNK, .res = (int) CHUNK };
                assert_int_equal(z->ops->append_result(z, &t, NULL), -EIO);
        }
        zbd_free(z);

        /* Reopened: the write pointer the parts moved to was recorded. */
        assert_int_equal(zbd_emu_open(f->path, 0, 0, 0, 0, 0, &z), 0);
        zone = rep(z, 2);
        assert_int_equal(zone.wp, 2 * ZSIZE + CHUNK + len);
        zbd_free(z);
}

typedef struct Collect {
        uint8_t *buf;
        size_t n, calls, fail_at;
} Collect;

static int collect(const uint8_t *buf, size_t n, void *userdata) {
        Collect *c = userdata;

        if (++c->calls == c->fail_at)
                return -EUCLEAN;
        memcpy(c->buf + c->n, buf, n);
        c->n += n;
        return 0;
}

/* zbd_read_each(): every chunk in order, the last one short, read ahead on
 * a helper thread; the consumer's error stops it; a read error comes back. */
static void test_read_each(void **state) {
        Fixture *f = *state;
        Zbd *z = emu(f, 0, 0);
        const uint64_t len = 5 * CHUNK + 4096;
        _cleanup_free_ uint8_t *all = malloc(len);
        Collect c = { .buf = all };

        assert_non_null(all);
        fill(f, z, 3 * ZSIZE, 6 * CHUNK, 9);
        assert_int_equal(zbd_read_each(z, 3 * ZSIZE, len, CHUNK, collect, &c), 0);
        assert_int_equal(c.n, len);
        assert_int_equal(c.calls, 6);
        assert_true(is_pat(all, 3 * ZSIZE, len, 9));
        /* One chunk: no helper, the same result. */
        c = (Collect) { .buf = all };
        assert_int_equal(zbd_read_each(z, 3 * ZSIZE + CHUNK, 4096, CHUNK, collect, &c), 0);
        assert_int_equal(c.n, 4096);
        assert_true(is_pat(all, 3 * ZSIZE + CHUNK, 4096, 9));
        c = (Collect) { .buf = all, .fail_at = 3 };
        assert_int_equal(zbd_read_each(z, 3 * ZSIZE, len, CHUNK, collect, &c), -EUCLEAN);
        assert_int_equal(c.calls, 3);
        assert_int_equal(c.n, 2 * CHUNK);
        /* Past the end of the device: the read fails, after what came before. */
        c = (Collect) { .buf = all };
        assert_int_equal(zbd_read_each(z, NZONES * ZSIZE - CHUNK, 2 * CHUNK, CHUNK, collect, &c), -EINVAL);
        assert_int_equal(c.n, CHUNK);
        assert_int_equal(zbd_read_each(z, 0, CHUNK, 1000, collect, &c), -EINVAL);
        zbd_free(z);
}

/* zbd_prep_read(): a read the io_uring pool can do (Verify, the scrub),
 * whole blocks into an aligned buffer, inside the device; else -EINVAL. */
static void test_prep_read(void **state) {
        Fixture *f = *state;
        Zbd *z = emu(f, 0, 0);
        uint8_t *buf = NULL;
        UringReq req = {};
        Waiter w = {};

        assert_int_equal(posix_memalign((void **) &buf, 4096, 2 * CHUNK), 0);
        fill(f, z, 2 * ZSIZE, CHUNK + 4096, 5);
        assert_int_equal(zbd_prep_read(z, 2 * ZSIZE + 4096, buf, CHUNK, &req), 0);
        assert_int_equal(req.op, URING_OP_READ);
        assert_int_equal(req.offset, 2 * ZSIZE + 4096);
        assert_int_equal(req.len, CHUNK);
        req.cpu = -1;
        req.done = done_cb;
        req.userdata = &w;
        req.ioprio = URING_IOPRIO_IDLE;
        assert_int_equal(uring_pool_submit(f->pool, &req), 0);
        for (unsigned i = 0; w.n == 0 && i < 300; i++)
                assert_true(sd_event_run(f->e, 100 * 1000) >= 0);
        assert_int_equal(req.res, (int) CHUNK);
        assert_true(is_pat(buf, 2 * ZSIZE + 4096, CHUNK, 5));

        assert_int_equal(zbd_prep_read(z, 2 * ZSIZE, buf + 512, 4096, &req), -EINVAL); /* unaligned buffer */
        assert_int_equal(zbd_prep_read(z, 2 * ZSIZE + 100, buf, 4096, &req), -EINVAL); /* not a block */
        assert_int_equal(zbd_prep_read(z, 2 * ZSIZE, buf, 4000, &req), -EINVAL);
        assert_int_equal(zbd_prep_read(z, 2 * ZSIZE, buf, 0, &req), -EINVAL);
        assert_int_equal(zbd_prep_read(z, NZONES * ZSIZE - 4096, buf, 8192, &req), -EINVAL); /* past the end */
        assert_int_equal(zbd_prep_read(z, NZONES * ZSIZE - 4096, buf, 4096, &req), 0);
        free(buf);
        zbd_free(z);
}

static void test_write_rules(void **state) {
        Fixture *f = *state;
        Zbd *z = emu(f, 0, 0);
        _cleanup_free_ uint8_t *b = pat_buf(0, 2 * CHUNK, 2);
        UringReq req = {};
        Zone zone;

        fill(f, z, 0, CHUNK, 2);
        /* Not at the write pointer: behind, ahead, unaligned. */
        assert_int_equal(z->ops->prep_append(z, 0, 0, b, 4096, &req), -EINVAL);
        assert_int_equal(z->ops->prep_append(z, 0, CHUNK + 4096, b, 4096, &req), -EINVAL);
        assert_int_equal(z->ops->prep_append(z, 0, CHUNK, b, 100, &req), -EINVAL);
        assert_int_equal(z->ops->prep_append(z, 0, CHUNK + 512, b, 4096, &req), -EINVAL);
        assert_int_equal(z->ops->prep_append(z, 0, CHUNK, b, 1024 * KiB, &req), -EINVAL); /* > max_write */
        assert_int_equal(z->ops->prep_append(z, 12345, CHUNK, b, 4096, &req), -EINVAL);   /* not a zone start */
        assert_int_equal(z->ops->prep_append(z, NZONES * ZSIZE, 0, b, 4096, &req), -EINVAL);
        assert_int_equal(z->ops->prep_append(z, 0, CHUNK, NULL, 4096, &req), -EINVAL);
        assert_int_equal(rep(z, 0).wp, CHUNK);

        /* Capacity: fill up to 8 KiB before it, then a write across it. */
        fill(f, z, 0, ZCAP - CHUNK - 8192, 2);
        zone = rep(z, 0);
        assert_int_equal(zone_remaining(&zone), 8192);
        assert_int_equal(zwrite(f, z, 0, zone.wp, b, 3 * 4096), -EIO);
        assert_int_equal(zwrite(f, z, 0, zone.wp, b, 8192), 0);
        zone = rep(z, 0);
        assert_int_equal(zone.cond, ZONE_COND_FULL);
        assert_int_equal(zone.wp, ZCAP);
        assert_true(zone_is_full(&zone));
        assert_int_equal(zone_remaining(&zone), 0);
        /* Full: any write is an I/O error, as on the device. */
        assert_int_equal(zwrite(f, z, 0, ZCAP, b, 4096), -EIO);
        zbd_free(z);

        z = emu(f, 0, 0);
        assert_int_equal(rep(z, 0).cond, ZONE_COND_FULL);
        zbd_free(z);
}

static void test_finish_reset(void **state) {
        Fixture *f = *state;
        Zbd *z = emu(f, 0, 0);
        _cleanup_free_ uint8_t *rb = malloc(ZSIZE);
        struct stat st1, st2;
        Zone zone;

        assert_non_null(rb);
        fill(f, z, 2 * ZSIZE, 2 * CHUNK, 3);
        fill(f, z, 3 * ZSIZE, 2 * CHUNK, 4);
        /* finish: FULL, wp = start + capacity, the rest reads as zeros */
        assert_int_equal(z->ops->finish(z, 2 * ZSIZE), 0);
        zone = rep(z, 2);
        assert_int_equal(zone.cond, ZONE_COND_FULL);
        assert_int_equal(zone.wp, 2 * ZSIZE + ZCAP);
        assert_int_equal(z->ops->finish(z, 2 * ZSIZE), 0); /* again: nothing to do */
        assert_int_equal(z->ops->read(z, 2 * ZSIZE, rb, ZSIZE), 0);
        assert_true(is_pat(rb, 2 * ZSIZE, 2 * CHUNK, 3));
        assert_true(is_zero(rb + 2 * CHUNK, ZSIZE - 2 * CHUNK));
        /* finish of an empty zone is fine too */
        assert_int_equal(z->ops->finish(z, 4 * ZSIZE), 0);
        assert_int_equal(rep(z, 4).cond, ZONE_COND_FULL);

        /* reset: EMPTY, data punched out (zeros, blocks freed) */
        assert_int_equal(stat(f->path, &st1), 0);
        assert_int_equal(z->ops->reset(z, 2 * ZSIZE), 0);
        assert_int_equal(stat(f->path, &st2), 0);
        assert_true(st2.st_blocks < st1.st_blocks);
        zone = rep(z, 2);
        assert_int_equal(zone.cond, ZONE_COND_EMPTY);
        assert_int_equal(zone.wp, 2 * ZSIZE);
        assert_int_equal(z->ops->read(z, 2 * ZSIZE, rb, ZSIZE), 0);
        assert_true(is_zero(rb, ZSIZE));
        assert_int_equal(z->ops->reset(z, 2 * ZSIZE), 0); /* again: nothing to do */
        /* the neighbour is untouched */
        assert_int_equal(z->ops->read(z, 3 * ZSIZE, rb, 2 * CHUNK), 0);
        assert_true(is_pat(rb, 3 * ZSIZE, 2 * CHUNK, 4));
        /* and the zone takes writes from its start again */
        fill(f, z, 2 * ZSIZE, CHUNK, 5);
        assert_int_equal(rep(z, 2).wp, 2 * ZSIZE + CHUNK);
        assert_int_equal(z->ops->reset(z, 5 * ZSIZE + 4096), -EINVAL);
        zbd_free(z);

        /* All of it durable. */
        z = emu(f, 0, 0);
        assert_int_equal(rep(z, 2).wp, 2 * ZSIZE + CHUNK);
        assert_int_equal(rep(z, 4).cond, ZONE_COND_FULL);
        assert_int_equal(rep(z, 4).wp, 4 * ZSIZE + ZCAP);
        assert_int_equal(z->ops->reset(z, 4 * ZSIZE), 0);
        zbd_free(z);
        z = emu(f, 0, 0);
        assert_int_equal(rep(z, 4).cond, ZONE_COND_EMPTY);
        assert_int_equal(z->ops->read(z, 2 * ZSIZE, rb, CHUNK), 0);
        assert_true(is_pat(rb, 2 * ZSIZE, CHUNK, 5));
        zbd_free(z);
}

static void test_max_active(void **state) {
        Fixture *f = *state;
        Zbd *z = emu(f, 0, 3);
        _cleanup_free_ uint8_t *b = pat_buf(0, 4096, 6);

        /* Three zones active: one written (implicit open), one explicitly
         * opened, one written and closed. */
        assert_int_equal(zwrite(f, z, 0, 0, b, 4096), 0);
        assert_int_equal(z->ops->open_zone(z, ZSIZE), 0);
        assert_int_equal(rep(z, 1).cond, ZONE_COND_EXP_OPEN);
        assert_int_equal(zwrite(f, z, 2 * ZSIZE, 2 * ZSIZE, b, 4096), 0);
        assert_int_equal(z->ops->close_zone(z, 2 * ZSIZE), 0);
        assert_int_equal(rep(z, 2).cond, ZONE_COND_CLOSED);

        /* A fourth: EOVERFLOW, by write or by open, nothing changes. */
        assert_int_equal(zwrite(f, z, 3 * ZSIZE, 3 * ZSIZE, b, 4096), -EOVERFLOW);
        assert_int_equal(z->ops->open_zone(z, 4 * ZSIZE), -EOVERFLOW);
        assert_int_equal(rep(z, 3).cond, ZONE_COND_EMPTY);
        assert_int_equal(rep(z, 4).cond, ZONE_COND_EMPTY);
        /* Zones already active go on: the closed one reopens by writing. */
        assert_int_equal(zwrite(f, z, 2 * ZSIZE, 2 * ZSIZE + 4096, b, 4096), 0);
        assert_int_equal(rep(z, 2).cond, ZONE_COND_IMP_OPEN);

        /* Closing an explicitly opened, unwritten zone makes it CLOSED: it
         * keeps its active resource (as QEMU's ZNS namespace does). */
        assert_int_equal(z->ops->close_zone(z, ZSIZE), 0);
        assert_int_equal(rep(z, 1).cond, ZONE_COND_CLOSED);
        assert_int_equal(rep(z, 1).wp, ZSIZE);
        assert_int_equal(zwrite(f, z, 3 * ZSIZE, 3 * ZSIZE, b, 4096), -EOVERFLOW);
        /* Resetting it frees the slot. */
        assert_int_equal(z->ops->reset(z, ZSIZE), 0);
        assert_int_equal(rep(z, 1).cond, ZONE_COND_EMPTY);
        assert_int_equal(zwrite(f, z, 3 * ZSIZE, 3 * ZSIZE, b, 4096), 0);
        assert_int_equal(z->ops->open_zone(z, 4 * ZSIZE), -EOVERFLOW);
        /* Finish and reset free slots too. */
        assert_int_equal(z->ops->finish(z, 0), 0);
        assert_int_equal(z->ops->open_zone(z, 4 * ZSIZE), 0);
        assert_int_equal(z->ops->open_zone(z, 5 * ZSIZE), -EOVERFLOW);
        assert_int_equal(z->ops->reset(z, 3 * ZSIZE), 0);
        assert_int_equal(z->ops->open_zone(z, 5 * ZSIZE), 0);
        zbd_free(z);

        /* Closed zones stay active across a reopen: zones 2 (written) count,
         * 4 and 5 (opened, never written) came back EMPTY. */
        z = emu(f, 0, 2);
        assert_int_equal(rep(z, 2).cond, ZONE_COND_CLOSED);
        assert_int_equal(rep(z, 4).cond, ZONE_COND_EMPTY);
        assert_int_equal(z->ops->open_zone(z, 6 * ZSIZE), 0);
        assert_int_equal(z->ops->open_zone(z, 7 * ZSIZE), -EOVERFLOW);
        zbd_free(z);
}

static void test_implicit_open_accounting(void **state) {
        Fixture *f = *state;
        Zbd *z = emu(f, 2, 4);
        _cleanup_free_ uint8_t *b = pat_buf(0, 4096, 7);

        /* max_open 2: a third implicit open closes the least recently
         * used implicitly open zone. */
        assert_int_equal(zwrite(f, z, 0, 0, b, 4096), 0);
        assert_int_equal(zwrite(f, z, ZSIZE, ZSIZE, b, 4096), 0);
        assert_int_equal(zwrite(f, z, 0, 4096, b, 4096), 0); /* zone 0 used last */
        assert_int_equal(zwrite(f, z, 2 * ZSIZE, 2 * ZSIZE, b, 4096), 0);
        assert_int_equal(rep(z, 0).cond, ZONE_COND_IMP_OPEN);
        assert_int_equal(rep(z, 1).cond, ZONE_COND_CLOSED);
        assert_int_equal(rep(z, 2).cond, ZONE_COND_IMP_OPEN);

        /* Explicit opens are never closed implicitly. */
        assert_int_equal(z->ops->open_zone(z, 0), 0);        /* IMP → EXP, no new resource */
        assert_int_equal(z->ops->open_zone(z, 3 * ZSIZE), 0); /* closes zone 2 implicitly */
        assert_int_equal(rep(z, 0).cond, ZONE_COND_EXP_OPEN);
        assert_int_equal(rep(z, 2).cond, ZONE_COND_CLOSED);
        assert_int_equal(rep(z, 3).cond, ZONE_COND_EXP_OPEN);
        /* Two explicitly open, two closed: 4 active (= max), 2 open (= max). */
        assert_int_equal(zwrite(f, z, ZSIZE, ZSIZE + 4096, b, 4096), -ETOOMANYREFS);
        assert_int_equal(z->ops->open_zone(z, 4 * ZSIZE), -EOVERFLOW);
        assert_int_equal(rep(z, 1).cond, ZONE_COND_CLOSED);
        /* Writing into an explicitly open zone keeps it explicitly open. */
        assert_int_equal(zwrite(f, z, 3 * ZSIZE, 3 * ZSIZE, b, 4096), 0);
        assert_int_equal(rep(z, 3).cond, ZONE_COND_EXP_OPEN);

        /* Close state transitions: an open zone closes, closing a closed
         * zone is a no-op, an empty or full one cannot be closed. */
        assert_int_equal(z->ops->close_zone(z, 0), 0);
        assert_int_equal(rep(z, 0).cond, ZONE_COND_CLOSED);
        assert_int_equal(z->ops->close_zone(z, 0), 0);
        assert_int_equal(z->ops->close_zone(z, 5 * ZSIZE), -EIO);
        assert_int_equal(zwrite(f, z, ZSIZE, ZSIZE + 4096, b, 4096), 0); /* one open slot again */
        assert_int_equal(rep(z, 1).cond, ZONE_COND_IMP_OPEN);
        assert_int_equal(z->ops->finish(z, ZSIZE), 0);
        assert_int_equal(z->ops->close_zone(z, ZSIZE), -EIO);
        assert_int_equal(z->ops->open_zone(z, ZSIZE), -EIO); /* full */
        /* zone 1 finished: 3 active (0, 2 closed, 3 open), 1 open */
        assert_int_equal(z->ops->open_zone(z, 5 * ZSIZE), 0);
        assert_int_equal(z->ops->open_zone(z, 6 * ZSIZE), -EOVERFLOW);
        zbd_free(z);
}

static void test_conventional(void **state) {
        Fixture *f = *state;
        ZbdEmuConfig c = { .zone_size = ZSIZE, .zone_capacity = ZCAP, .nr_zones = 4, .nr_conv = 2,
                           .max_active = 1, .max_write = 64 * KiB };
        _cleanup_free_ uint8_t *b = pat_buf(ZSIZE + 256 * KiB, 64 * KiB, 8);
        _cleanup_free_ uint8_t *rb = malloc(64 * KiB);
        Zbd *z = NULL;
        Zone zone;

        assert_non_null(rb);
        assert_int_equal(zbd_emu_open_config(f->path, &c, &z), 0);
        assert_int_equal(z->limits.max_write, 64 * KiB);
        zone = rep(z, 1);
        assert_int_equal(zone.type, ZONE_TYPE_CONVENTIONAL);
        assert_int_equal(zone.cond, ZONE_COND_NOT_WP);
        assert_int_equal(zone.capacity, ZSIZE);
        assert_false(zone_is_seq(&zone));
        assert_int_equal(rep(z, 2).type, ZONE_TYPE_SEQWRITE_REQ);
        assert_int_equal(rep(z, 2).capacity, ZCAP);
        /* Anywhere, any order, no resources taken. */
        assert_int_equal(zwrite(f, z, ZSIZE, ZSIZE + 256 * KiB, b, 64 * KiB), 0);
        assert_int_equal(zwrite(f, z, ZSIZE, ZSIZE, b, 4096), 0);
        assert_int_equal(zwrite(f, z, ZSIZE, 2 * ZSIZE - 4096, b, 8192), -EINVAL); /* crosses the zone */
        assert_int_equal(z->ops->read(z, ZSIZE + 256 * KiB, rb, 64 * KiB), 0);
        assert_true(is_pat(rb, ZSIZE + 256 * KiB, 64 * KiB, 8));
        assert_int_equal(z->ops->reset(z, ZSIZE), -EINVAL);
        assert_int_equal(z->ops->finish(z, 0), -EINVAL);
        assert_int_equal(z->ops->open_zone(z, 0), -EINVAL);
        assert_int_equal(z->ops->open_zone(z, 2 * ZSIZE), 0);
        assert_int_equal(z->ops->open_zone(z, 3 * ZSIZE), -EOVERFLOW);
        zbd_free(z);

        /* Stored: reopening with plain zbd_emu_open() keeps the layout. */
        assert_int_equal(zbd_emu_open(f->path, ZSIZE, 0, 0, 0, 0, &z), 0);
        assert_int_equal(rep(z, 0).type, ZONE_TYPE_CONVENTIONAL);
        assert_int_equal(z->ops->read(z, ZSIZE + 256 * KiB, rb, 64 * KiB), 0);
        assert_true(is_pat(rb, ZSIZE + 256 * KiB, 64 * KiB, 8));
        zbd_free(z);
}

static void test_stale_completion(void **state) {
        Fixture *f = *state;
        Zbd *z = emu(f, 0, 0);
        _cleanup_free_ uint8_t *b = pat_buf(0, CHUNK, 9);
        _cleanup_free_ uint8_t *rb = malloc(CHUNK);
        UringReq req = {}, req2 = {};
        uint64_t off;

        assert_non_null(rb);
        /* The caller's rule is one write in flight per zone; a second one
         * prepared at the same wp is refused when it completes. (Simulated
         * completions: the data is written by hand.) */
        assert_int_equal(z->ops->prep_append(z, 0, 0, b, CHUNK, &req), 0);
        assert_int_equal(z->ops->prep_append(z, 0, 0, b, CHUNK, &req2), 0);
        assert_int_equal(pwrite(req.fd, b, CHUNK, 0), (ssize_t) CHUNK);
        req.res = req2.res = (int) CHUNK;
        assert_int_equal(z->ops->append_result(z, &req, &off), 0);
        assert_int_equal(off, 0);
        assert_int_equal(z->ops->append_result(z, &req2, &off), -EIO);
        assert_int_equal(rep(z, 0).wp, CHUNK);
        /* An I/O error leaves the write pointer alone. */
        assert_int_equal(z->ops->prep_append(z, 0, CHUNK, b, CHUNK, &req), 0);
        req.res = -EIO;
        assert_int_equal(z->ops->append_result(z, &req, &off), -EIO);
        assert_int_equal(rep(z, 0).wp, CHUNK);
        assert_int_equal(rep(z, 0).cond, ZONE_COND_IMP_OPEN);

        /* Reset while a write was in flight: the late data is discarded. */
        assert_int_equal(z->ops->prep_append(z, 0, CHUNK, b, CHUNK, &req), 0);
        assert_int_equal(z->ops->reset(z, 0), 0);
        assert_int_equal(pwrite(req.fd, b, CHUNK, CHUNK), (ssize_t) CHUNK);
        req.res = (int) CHUNK;
        assert_int_equal(z->ops->append_result(z, &req, &off), -EIO);
        assert_int_equal(rep(z, 0).wp, 0);
        assert_int_equal(rep(z, 0).cond, ZONE_COND_EMPTY);
        assert_int_equal(z->ops->read(z, CHUNK, rb, CHUNK), 0);
        assert_true(is_zero(rb, CHUNK));
        zbd_free(z);
}

static void test_exclusive_and_foreign(void **state) {
        Fixture *f = *state;
        Zbd *z = emu(f, 0, 0), *z2 = NULL;
        char other[128];
        int fd;

        /* One user at a time. */
        assert_int_equal(zbd_emu_open(f->path, ZSIZE, ZCAP, NZONES, 0, 0, &z2), -EBUSY);
        zbd_free(z);
        assert_int_equal(zbd_emu_open(f->path, ZSIZE, ZCAP, NZONES, 0, 0, &z2), 0);
        zbd_free(z2);

        /* Somebody's file without zone state is not taken over. */
        snprintf(other, sizeof other, "%s/other", f->dir);
        fd = open(other, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "data", 4), 4);
        close(fd);
        assert_int_equal(zbd_emu_open(other, ZSIZE, ZCAP, NZONES, 0, 0, &z2), -EEXIST);
        assert_int_equal(unlink(other), 0);
        /* And a new one needs its geometry. */
        assert_int_equal(zbd_emu_open(other, 0, 0, 0, 0, 0, &z2), -EINVAL);
        assert_int_equal(zbd_emu_open(other, ZSIZE, ZSIZE + 4096, NZONES, 0, 0, &z2), -EINVAL);
        assert_int_equal(zbd_emu_open(other, ZSIZE, ZCAP, NZONES, 4, 2, &z2), -EINVAL);
        assert_int_equal(access(other, F_OK), -1);

        /* A file made beforehand with `truncate -s`: it holds nothing, so
         * it is taken over (the user's obvious intent)... */
        fd = open(other, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, (off_t) NZONES * ZSIZE), 0);
        close(fd);
        assert_int_equal(zbd_emu_open(other, ZSIZE, ZCAP, NZONES, 0, 0, &z2), 0);
        zbd_free(z2);
        z2 = NULL;
        /* ...but not one larger than the zones asked for (it is not this
         * geometry's: its end would be lost). */
        char meta[160];
        snprintf(meta, sizeof meta, "%s.zones", other);
        assert_int_equal(unlink(meta), 0);
        assert_int_equal(truncate(other, (off_t) NZONES * ZSIZE * 2), 0);
        assert_int_equal(zbd_emu_open(other, ZSIZE, ZCAP, NZONES, 0, 0, &z2), -EEXIST);
        assert_int_equal(unlink(other), 0);
}

/* The child's state, global so that valgrind (when it traces children)
 * finds it reachable in the killed child. */
static Zbd *crash_z;
static uint8_t *crash_buf;

/* One write as the pool would run it: prep, the write on the fd the
 * request names (the emulation's O_DIRECT | O_DSYNC data fd), the result. */
static int crash_write(uint64_t wp, const uint8_t *b, UringReq *req) {
        ssize_t n;

        if (crash_z->ops->prep_append(crash_z, 5 * ZSIZE, wp, b, CHUNK, req) < 0)
                return -1;
        n = pwrite(req->fd, req->buf, req->len, (off_t) req->offset);
        req->res = n < 0 ? -errno : (int) n;
        return req->res == (int) CHUNK ? 0 : -1;
}

/* In a child process (this program, exec'd): a recorded write of CHUNK
 * into zone 5, then a second write that completes, and SIGKILL before
 * append_result() records it. */
_Noreturn static void crash_child(const char *path) {
        UringReq req = {};

        if (zbd_emu_open(path, 0, 0, 0, 0, 0, &crash_z) < 0 ||
            posix_memalign((void **) &crash_buf, 4096, 2 * CHUNK) != 0)
                _exit(2);
        for (size_t i = 0; i < 2 * CHUNK; i++)
                crash_buf[i] = pat(5 * ZSIZE + i, 10);
        if (crash_write(5 * ZSIZE, crash_buf, &req) < 0 || crash_z->ops->append_result(crash_z, &req, NULL) < 0)
                _exit(3);
        if (crash_write(5 * ZSIZE + CHUNK, crash_buf + CHUNK, &req) < 0)
                _exit(4);
        raise(SIGKILL); /* the data is written, its record is not */
        _exit(5);
}

static void test_crash_kill9(void **state) {
        Fixture *f = *state;
        Zbd *z = emu(f, 0, 0);
        _cleanup_free_ uint8_t *rb = malloc(2 * CHUNK);
        char self[4096];
        int status = 0;
        ssize_t n;
        pid_t pid;
        Zone zone;

        assert_non_null(rb);
        zbd_free(z);
        /* The child is this program again, exec'd: a fresh process, as a
         * crashing daemon would be (and nothing inherited from this one's
         * threads for valgrind to report). */
        n = readlink("/proc/self/exe", self, sizeof self - 1);
        assert_true(n > 0);
        self[n] = 0;
        fflush(NULL);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                execl(self, self, "--crash-child", f->path, (char *) NULL);
                _exit(127);
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), SIGKILL);

        /* Reopened: the write pointer is that of the recorded write, the
         * unrecorded data beyond it is gone (reads zeros). */
        z = emu(f, 0, 0);
        zone = rep(z, 5);
        assert_int_equal(zone.wp, 5 * ZSIZE + CHUNK);
        assert_int_equal(zone.cond, ZONE_COND_CLOSED);
        assert_int_equal(z->ops->read(z, 5 * ZSIZE, rb, 2 * CHUNK), 0);
        assert_true(is_pat(rb, 5 * ZSIZE, CHUNK, 10));
        assert_true(is_zero(rb + CHUNK, CHUNK));
        /* Writing on at the write pointer works. */
        fill(f, z, 5 * ZSIZE, CHUNK, 10);
        assert_int_equal(z->ops->read(z, 5 * ZSIZE, rb, 2 * CHUNK), 0);
        assert_true(is_pat(rb, 5 * ZSIZE, 2 * CHUNK, 10));
        zbd_free(z);
}

static void test_crash_torn_record(void **state) {
        Fixture *f = *state;
        Zbd *z = emu(f, 0, 0);
        _cleanup_free_ uint8_t *rb = malloc(3 * CHUNK);
        char meta[128];
        uint64_t seq[2], wp[2];
        unsigned newest;
        uint8_t junk = 0xA5;
        int fd;
        Zone zone;

        assert_non_null(rb);
        fill(f, z, 6 * ZSIZE, 3 * CHUNK, 11);
        zbd_free(z);

        /* The state file: 4096-byte header, then 64 bytes per zone, two
         * 32-byte record slots {seq, wp, ...crc}. Tear the newest record
         * of zone 6. */
        snprintf(meta, sizeof meta, "%s.zones", f->path);
        fd = open(meta, O_RDWR | O_CLOEXEC);
        assert_true(fd >= 0);
        for (unsigned s = 0; s < 2; s++) {
                off_t off = 4096 + 6 * 64 + s * 32;

                assert_int_equal(pread(fd, &seq[s], 8, off), 8);
                assert_int_equal(pread(fd, &wp[s], 8, off + 8), 8);
        }
        newest = seq[1] > seq[0];
        assert_int_equal(wp[newest], 3 * CHUNK);
        assert_int_equal(wp[!newest], 2 * CHUNK);
        assert_int_equal(pwrite(fd, &junk, 1, 4096 + 6 * 64 + newest * 32 + 9), 1);
        close(fd);

        /* The older record wins: conservative, and the third chunk, no
         * longer covered by the write pointer, reads as zeros. */
        z = emu(f, 0, 0);
        zone = rep(z, 6);
        assert_int_equal(zone.wp, 6 * ZSIZE + 2 * CHUNK);
        assert_int_equal(zone.cond, ZONE_COND_CLOSED);
        assert_int_equal(z->ops->read(z, 6 * ZSIZE, rb, 3 * CHUNK), 0);
        assert_true(is_pat(rb, 6 * ZSIZE, 2 * CHUNK, 11));
        assert_true(is_zero(rb + 2 * CHUNK, CHUNK));
        zbd_free(z);

        /* Both records gone: refused, not guessed. */
        fd = open(meta, O_RDWR | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(pwrite(fd, &junk, 1, 4096 + 6 * 64 + 9), 1);
        assert_int_equal(pwrite(fd, &junk, 1, 4096 + 6 * 64 + 32 + 9), 1);
        close(fd);
        assert_int_equal(zbd_emu_open(f->path, 0, 0, 0, 0, 0, &z), -EBADMSG);
}

/* CRC-32 (IEEE 802.3, reflected), table-driven: an oracle independent of
 * the bitwise one in src/zbd/zbd-emu.c. */
static uint32_t crc32_test(const void *p, size_t n) {
        static uint32_t table[256];
        const uint8_t *b = p;
        uint32_t c = ~0U;

        if (!table[1])
                for (uint32_t i = 0; i < 256; i++) {
                        uint32_t v = i;
                        for (int k = 0; k < 8; k++)
                                v = v & 1 ? 0xEDB88320U ^ (v >> 1) : v >> 1;
                        table[i] = v;
                }
        while (n--)
                c = table[(c ^ *b++) & 0xff] ^ (c >> 8);
        return ~c;
}

/* A state file cut short (a copy that stopped, a disk that filled): the
 * header's geometry asks for more records than the file holds. Refused,
 * before the geometry sizes anything (found by fuzz-zone-record: a header
 * claiming 2^32 zones had blkmqd ask for 256 GiB). */
static void test_truncated_state(void **state) {
        Fixture *f = *state;
        Zbd *z = emu(f, 0, 0);
        char meta[128];
        uint32_t lie = UINT32_MAX;
        int fd;

        zbd_free(z);
        snprintf(meta, sizeof meta, "%s.zones", f->path);
        assert_int_equal(truncate(meta, 4096 + (NZONES - 1) * 64), 0);
        assert_int_equal(zbd_emu_open(f->path, 0, 0, 0, 0, 0, &z), -EBADMSG);

        /* A header that lies about the zone count, its crc made right. */
        assert_int_equal(truncate(meta, 4096 + NZONES * 64), 0);
        fd = open(meta, O_RDWR | O_CLOEXEC);
        assert_true(fd >= 0);
        uint8_t h[64];
        assert_int_equal(pread(fd, h, sizeof h, 0), (ssize_t) sizeof h);
        memcpy(h + 40, &lie, 4); /* nr_zones, after magic[16], version, header_size, zone_size, zone_capacity */
        uint32_t crc = crc32_test(h, 60);
        memcpy(h + 60, &crc, 4);
        assert_int_equal(pwrite(fd, h, sizeof h, 0), (ssize_t) sizeof h);
        close(fd);
        assert_int_equal(zbd_emu_open(f->path, 0, 0, 0, 0, 0, &z), -EBADMSG);
}

int main(int argc, char *argv[]) {
        if (argc == 3 && streq(argv[1], "--crash-child"))
                crash_child(argv[2]);

        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_geometry_report, setup, teardown),
                cmocka_unit_test_setup_teardown(test_sequential_writes_persist, setup, teardown),
                cmocka_unit_test_setup_teardown(test_write_rules, setup, teardown),
                cmocka_unit_test_setup_teardown(test_stream, setup, teardown),
                cmocka_unit_test_setup_teardown(test_read_each, setup, teardown),
                cmocka_unit_test_setup_teardown(test_prep_read, setup, teardown),
                cmocka_unit_test_setup_teardown(test_finish_reset, setup, teardown),
                cmocka_unit_test_setup_teardown(test_max_active, setup, teardown),
                cmocka_unit_test_setup_teardown(test_implicit_open_accounting, setup, teardown),
                cmocka_unit_test_setup_teardown(test_conventional, setup, teardown),
                cmocka_unit_test_setup_teardown(test_stale_completion, setup, teardown),
                cmocka_unit_test_setup_teardown(test_exclusive_and_foreign, setup, teardown),
                cmocka_unit_test_setup_teardown(test_crash_kill9, setup, teardown),
                cmocka_unit_test_setup_teardown(test_crash_torn_record, setup, teardown),
                cmocka_unit_test_setup_teardown(test_truncated_state, setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
