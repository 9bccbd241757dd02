/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* zbd-tool: a small CLI over src/zbd/zbd.h for the vm suite (and by hand):
 * drives the kernel backend on a real zoned block device, the NVMe ZNS
 * passthrough backend with --backend nvme (DEV is /dev/nvmeXnY; zone appends
 * go to /dev/ngXnY), or the emulation with -e, through the project's
 * io_uring pool.
 *
 *   zbd-tool [--backend kernel|nvme|emu] [-e [-a MAX_ACTIVE] [-o MAX_OPEN]] [-s SYSFS_DIR]
 *            DEV COMMAND [ARGS]
 *
 *   limits                    key=value lines (ZbdLimits)
 *   report [ZONE [N]]         one line per zone
 *   reset|open|close|finish ZONE
 *   append ZONE BYTES [SEED]  BYTES of a pattern at the zone's write pointer,
 *                             in zbd_chunk_max() writes, one in flight
 *   write ZONE OFF BYTES      one write at zone start + OFF, wherever the
 *                             write pointer is (to see what the device says)
 *   verify ZONE OFF BYTES [SEED]  the pattern reads back at zone start + OFF
 *   zeros ZONE OFF BYTES      reads back as zeros
 *   qappend ZONE BYTES PIECE QD [SEED]
 *                             BYTES in appends of PIECE bytes (each split
 *                             by the tool at zbd_chunk_max()), up to QD in
 *                             flight at once, all to the one zone; then
 *                             checks that the offsets the backend reports
 *                             are distinct and cover [wp, wp + BYTES)
 *                             exactly, and reads every append back. Prints
 *                             bytes/s. With nvme the device picks the
 *                             offsets; kernel/emu write at the tracked wp
 *                             and so need QD 1.
 *   rawappend ZONE BYTES      nvme: one Zone Append of BYTES as the pool
 *                             sends it, past prep_append()'s limit check
 *                             (what the kernel says to a command above it)
 *   rawappend-scattered ZONE BYTES
 *                             the same from a buffer whose every 4 KiB is
 *                             one and the same physical page: one DMA
 *                             segment per page (queue/max_segments)
 *   flush                     zbd_flush(): prints write_back=yes|no (as
 *                             queue/write_cache says) and flushes the
 *                             device's write cache where it is write back
 *
 * ZONE is a zone index. The last line is always "result=OK" or
 * "result=ENAME" (the errno's name); exit 0, 1 on an error, 2 on usage.
 * -e: DEV is an emulation file, created if missing (16 zones of 64 MiB,
 * capacity 60 MiB, the recipe's geometry). */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/param.h>
#include <unistd.h>
#include <time.h>

#include "cleanup.h"
#include "log.h"
#include "uring-pool.h"
#include "util.h"
#include "zbd.h"

static const char *cond_name(ZoneCond c) {
        switch (c) {
        case ZONE_COND_NOT_WP: return "NOT_WP";
        case ZONE_COND_EMPTY: return "EMPTY";
        case ZONE_COND_IMP_OPEN: return "IMP_OPEN";
        case ZONE_COND_EXP_OPEN: return "EXP_OPEN";
        case ZONE_COND_CLOSED: return "CLOSED";
        case ZONE_COND_READONLY: return "READONLY";
        case ZONE_COND_FULL: return "FULL";
        case ZONE_COND_OFFLINE: return "OFFLINE";
        }
        return "?";
}

static const char *type_name(ZoneType t) {
        switch (t) {
        case ZONE_TYPE_CONVENTIONAL: return "CONV";
        case ZONE_TYPE_SEQWRITE_REQ: return "SWR";
        case ZONE_TYPE_SEQWRITE_PREF: return "SWP";
        }
        return "?";
}

static int result(int r) {
        const char *name = r < 0 ? strerrorname_np(-r) : NULL;

        if (r >= 0)
                printf("result=OK\n");
        else if (name)
                printf("result=%s\n", name);
        else
                printf("result=%d\n", r);
        return r < 0 ? 1 : 0;
}

static uint8_t pat(uint64_t off, unsigned seed) {
        uint64_t x = (off / 8 + 1 + seed) * UINT64_C(0x9e3779b97f4a7c15);
        return (uint8_t) (x >> (8 * (off % 8)));
}

static uint64_t mono_usec(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

static int parse_u64(const char *s, uint64_t *ret) {
        int r = parse_size(s, ret);

        if (r < 0)
                fprintf(stderr, "zbd-tool: bad number: %s\n", s);
        return r;
}

static void print_zone(uint64_t i, const Zone *z) {
        printf("zone=%" PRIu64 " start=%" PRIu64 " len=%" PRIu64 " cap=%" PRIu64 " wp=%" PRIu64
               " wp_rel=%" PRIu64 " type=%s cond=%s\n",
               i, z->start, z->len, z->capacity, z->wp, z->wp - z->start, type_name(z->type),
               cond_name(z->cond));
}

typedef struct Waiter {
        unsigned n;
} Waiter;

static void done_cb(UringReq *req, void *userdata) {
        ((Waiter *) userdata)->n++;
}

/* One write through the pool, as the allocator will do it. */
static int pool_write(Zbd *z, UringPool *p, sd_event *e, uint64_t zone_start, uint64_t off, const void *buf,
                      uint32_t len) {
        Waiter w = {};
        UringReq req = { .cpu = -1, .done = done_cb, .userdata = &w };
        uint64_t landed;
        int r;

        r = z->ops->prep_append(z, zone_start, off, buf, len, &req);
        if (r < 0)
                return r;
        r = uring_pool_submit(p, &req);
        if (r < 0)
                return r;
        while (w.n == 0) {
                r = sd_event_run(e, UINT64_MAX);
                if (r < 0)
                        return r;
        }
        r = z->ops->append_result(z, &req, &landed);
        if (r < 0)
                return r;
        return landed == off ? 0 : -EIO;
}

static int cmd_append(Zbd *z, uint64_t zone_start, uint64_t bytes, unsigned seed, bool at_wp, uint64_t off) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        _cleanup_(uring_pool_freep) UringPool *p = NULL;
        _cleanup_free_ uint8_t *buf = NULL;
        uint32_t chunk = zbd_chunk_max(z);
        uint64_t t0, usec, done = 0, writes = 0;
        Zone zone;
        int r;

        r = zbd_report_zone(z, zone_start, &zone);
        if (r < 0)
                return r;
        if (at_wp)
                off = zone.wp;
        else
                off += zone_start;
        if (bytes % z->limits.block_size || chunk == 0)
                return -EINVAL;
        if (posix_memalign((void **) &buf, 4096, chunk) != 0)
                return -ENOMEM;
        r = sd_event_new(&e);
        if (r < 0)
                return r;
        r = uring_pool_new(&p, e, 1, NULL, 0);
        if (r < 0)
                return r;
        t0 = mono_usec();
        while (done < bytes) {
                uint32_t n = bytes - done < chunk ? (uint32_t) (bytes - done) : chunk;

                for (uint32_t i = 0; i < n; i++)
                        buf[i] = pat(off + done + i, seed);
                r = pool_write(z, p, e, zone_start, off + done, buf, n);
                if (r < 0)
                        break;
                done += n;
                writes++;
        }
        usec = mono_usec() - t0;
        printf("written=%" PRIu64 " writes=%" PRIu64 " chunk=%" PRIu32 " usec=%" PRIu64 " MiBps=%.1f\n", done,
               writes, chunk, usec, usec ? (double) done / (double) usec * 1e6 / 1048576.0 : 0.0);
        if (r >= 0 && zbd_report_zone(z, zone_start, &zone) >= 0)
                print_zone(zone_start / z->limits.zone_size, &zone);
        return r;
}

/* ---- qappend: several appends in flight to one zone ---------------------- */

typedef struct QPiece {
        uint64_t stream; /* position in the data stream (pattern key) */
        uint32_t len;
        uint64_t landed; /* absolute offset the backend reports */
} QPiece;

typedef struct QRun QRun;
typedef struct QSlot {
        QRun *run;
        UringReq req;
        uint8_t *buf;
        size_t piece;
} QSlot;

struct QRun {
        Zbd *z;
        QPiece *pieces;
        size_t n_done, inflight;
        int error;
        uint16_t nvme_status;
};

static void q_done(UringReq *req, void *userdata) {
        QSlot *sl = userdata;
        QRun *q = sl->run;
        uint64_t off = 0;
        int r;

        q->inflight--;
        r = q->z->ops->append_result(q->z, req, &off);
        if (r < 0) {
                if (q->error == 0) {
                        q->error = r;
                        q->nvme_status = req->nvme_status;
                }
                sl->piece = SIZE_MAX;
                return;
        }
        q->pieces[sl->piece].landed = off;
        q->n_done++;
        sl->piece = SIZE_MAX;
}

static int cmp_landed(const void *a, const void *b) {
        const QPiece *x = a, *y = b;

        return x->landed < y->landed ? -1 : x->landed > y->landed;
}

static int cmd_qappend(Zbd *z, uint64_t zone_start, uint64_t bytes, uint64_t piece, unsigned qd, unsigned seed) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        _cleanup_(uring_pool_freep) UringPool *p = NULL;
        _cleanup_free_ QPiece *pieces = NULL;
        _cleanup_free_ QSlot *slots = NULL;
        _cleanup_free_ uint8_t *rbuf = NULL;
        uint32_t chunk = zbd_chunk_max(z);
        uint64_t t0, usec, wp0, pos = 0, expect;
        size_t n = 0, next = 0, split = 0;
        bool contiguous = true, in_order = true, complete;
        QRun q = { .z = z };
        Zone zone;
        int r;

        if (qd == 0 || qd > 64 || piece == 0 || bytes == 0 || bytes % z->limits.block_size ||
            piece % z->limits.block_size || chunk == 0)
                return -EINVAL;
        r = zbd_report_zone(z, zone_start, &zone);
        if (r < 0)
                return r;
        wp0 = zone.wp;
        /* The pieces: BYTES in PIECE-sized appends, each split at the
         * backend's largest command. */
        for (uint64_t s = 0; s < bytes; s += piece) {
                uint64_t plen = MIN(piece, bytes - s);

                n += (plen + chunk - 1) / chunk;
                split += plen > chunk;
        }
        pieces = calloc(n, sizeof *pieces);
        slots = calloc(qd, sizeof *slots);
        if (!pieces || !slots)
                return -ENOMEM;
        n = 0;
        for (uint64_t s = 0; s < bytes; s += piece) {
                uint64_t plen = MIN(piece, bytes - s);

                for (uint64_t o = 0; o < plen; o += chunk)
                        pieces[n++] = (QPiece) { .stream = s + o, .len = (uint32_t) MIN((uint64_t) chunk, plen - o),
                                                 .landed = UINT64_MAX };
        }
        q.pieces = pieces;
        for (unsigned i = 0; i < qd; i++) {
                slots[i] = (QSlot) { .run = &q, .piece = SIZE_MAX };
                if (posix_memalign((void **) &slots[i].buf, 4096, chunk) != 0) {
                        r = -ENOMEM;
                        goto out;
                }
        }
        r = sd_event_new(&e);
        if (r < 0)
                goto out;
        r = uring_pool_new(&p, e, 1, NULL, 0);
        if (r < 0)
                goto out;

        t0 = mono_usec();
        while (q.n_done < n && (q.error == 0 || q.inflight > 0)) {
                for (unsigned i = 0; i < qd && next < n && q.error == 0; i++) {
                        QSlot *sl = &slots[i];
                        QPiece *pc = &pieces[next];

                        if (sl->piece != SIZE_MAX)
                                continue;
                        for (uint32_t k = 0; k < pc->len; k++)
                                sl->buf[k] = pat(pc->stream + k, seed);
                        sl->req = (UringReq) { .cpu = -1, .done = q_done, .userdata = sl };
                        /* wp: what QD 1 would see; nvme ignores it. */
                        r = z->ops->prep_append(z, zone_start, wp0 + pc->stream, sl->buf, pc->len, &sl->req);
                        if (r >= 0)
                                r = uring_pool_submit(p, &sl->req);
                        if (r < 0) {
                                q.error = r;
                                break;
                        }
                        sl->piece = next++;
                        q.inflight++;
                }
                if (q.inflight == 0)
                        break;
                r = sd_event_run(e, UINT64_MAX);
                if (r < 0) {
                        q.error = r;
                        break;
                }
        }
        usec = mono_usec() - t0;
        complete = q.n_done == n && usec > 0;
        printf("qappend bytes=%" PRIu64 " piece=%" PRIu64 " chunk=%" PRIu32 " appends=%zu split=%zu qd=%u done=%zu "
               "usec=%" PRIu64 " Bps=%" PRIu64 " MiBps=%.1f\n",
               bytes, piece, chunk, n, split, qd, q.n_done, usec,
               complete ? (uint64_t) ((double) bytes * 1e6 / (double) usec) : 0,
               complete ? (double) bytes / (double) usec * 1e6 / 1048576.0 : 0.0);
        if (q.error < 0) {
                /* nvme_sc: SCT << 8 | SC, without the CRD/More/DNR bits */
                if (q.nvme_status)
                        printf("nvme_status=0x%x nvme_sc=0x%x\n", (unsigned) q.nvme_status,
                               (unsigned) q.nvme_status & 0x7ffU);
                r = q.error;
                goto out;
        }

        /* In stream order, did they land in order? Then by offset: distinct,
         * no gaps, exactly [wp0, wp0 + bytes). */
        for (size_t i = 1; i < n; i++)
                if (pieces[i].landed < pieces[i - 1].landed)
                        in_order = false;
        qsort(pieces, n, sizeof *pieces, cmp_landed);
        expect = wp0;
        for (size_t i = 0; i < n; i++) {
                if (pieces[i].landed != expect)
                        contiguous = false;
                expect = pieces[i].landed + pieces[i].len;
        }
        printf("landed first=%" PRIu64 " end=%" PRIu64 " want=[%" PRIu64 ",%" PRIu64 ") contiguous=%s in_order=%s\n",
               pieces[0].landed - zone_start, expect - zone_start, wp0 - zone_start, wp0 + bytes - zone_start,
               contiguous && expect == wp0 + bytes ? "yes" : "no", in_order ? "yes" : "no");
        if (!contiguous || expect != wp0 + bytes) {
                r = -EILSEQ;
                goto out;
        }

        /* Every append reads back at the offset the backend reported. */
        if (posix_memalign((void **) &rbuf, 4096, chunk) != 0) {
                r = -ENOMEM;
                goto out;
        }
        for (size_t i = 0; i < n; i++) {
                r = z->ops->read(z, pieces[i].landed, rbuf, pieces[i].len);
                if (r < 0)
                        goto out;
                for (uint32_t k = 0; k < pieces[i].len; k++)
                        if (rbuf[k] != pat(pieces[i].stream + k, seed)) {
                                printf("mismatch at %" PRIu64 " (stream %" PRIu64 ")\n", pieces[i].landed + k,
                                       pieces[i].stream + k);
                                r = -EILSEQ;
                                goto out;
                        }
                pos += pieces[i].len;
        }
        printf("verified=%" PRIu64 "\n", pos);
        if (zbd_report_zone(z, zone_start, &zone) >= 0)
                print_zone(zone_start / z->limits.zone_size, &zone);
        r = 0;
out:
        /* The pool is freed before the buffers: it waits for what is in flight. */
        p = uring_pool_free(p);
        for (unsigned i = 0; slots && i < qd; i++)
                free(slots[i].buf);
        return r;
}

/* One Zone Append of bytes, built by prep_append() for one block and then
 * widened: what the kernel answers to a command above the limits. */
static int cmd_rawappend(Zbd *z, uint64_t zone_start, uint64_t bytes, bool scattered) {
        _cleanup_(sd_event_unrefp) sd_event *e = NULL;
        _cleanup_(uring_pool_freep) UringPool *p = NULL;
        _cleanup_free_ uint8_t *buf = NULL;
        _cleanup_close_ int mfd = -EBADF;
        uint8_t *map = MAP_FAILED;
        Waiter w = {};
        UringReq req = { .cpu = -1, .done = done_cb, .userdata = &w };
        uint32_t bs = z->limits.block_size;
        uint64_t landed;
        int r;

        if (!streq(z->ops->name, "nvme") || bytes == 0 || bytes % bs || bytes > UINT32_MAX)
                return -EINVAL;
        if (scattered) {
                /* One physical page mapped at every 4 KiB of the buffer: no
                 * two neighbours are physically contiguous, so the kernel
                 * needs one DMA segment per page (queue/max_segments). */
                if (bytes % 4096)
                        return -EINVAL;
                mfd = memfd_create("zbd-tool", MFD_CLOEXEC);
                if (mfd < 0 || ftruncate(mfd, 4096) < 0)
                        return -errno;
                map = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                if (map == MAP_FAILED)
                        return -errno;
                for (uint64_t o = 0; o < bytes; o += 4096)
                        if (mmap(map + o, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, mfd, 0) == MAP_FAILED) {
                                r = -errno;
                                munmap(map, bytes);
                                return r;
                        }
                memset(map, 0xa5, 4096);
        } else {
                if (posix_memalign((void **) &buf, 4096, bytes) != 0)
                        return -ENOMEM;
                memset(buf, 0xa5, bytes);
        }
        r = z->ops->prep_append(z, zone_start, zone_start, scattered ? map : buf, bs, &req);
        if (r < 0)
                return r;
        req.len = (uint32_t) bytes;
        req.nvme.cdw12 = (uint32_t) (bytes / bs - 1);
        r = sd_event_new(&e);
        if (r < 0)
                return r;
        r = uring_pool_new(&p, e, 1, NULL, 0);
        if (r < 0)
                return r;
        r = uring_pool_submit(p, &req);
        while (r >= 0 && w.n == 0)
                r = sd_event_run(e, UINT64_MAX);
        if (r >= 0) {
                printf("rawappend bytes=%" PRIu64 " scattered=%s res=%d nvme_status=0x%x\n", bytes,
                       scattered ? "yes" : "no", req.res, (unsigned) req.nvme_status);
                r = z->ops->append_result(z, &req, &landed);
                if (r >= 0)
                        printf("landed=%" PRIu64 "\n", landed - zone_start);
        }
        if (map != MAP_FAILED)
                munmap(map, bytes);
        return r;
}

static int cmd_verify(Zbd *z, uint64_t zone_start, uint64_t off, uint64_t bytes, unsigned seed, bool zeros) {
        _cleanup_free_ uint8_t *buf = NULL;
        uint64_t t0 = mono_usec();
        int r;

        if (bytes > SIZE_MAX || posix_memalign((void **) &buf, 4096, bytes ? bytes : 1) != 0)
                return -ENOMEM;
        off += zone_start;
        r = z->ops->read(z, off, buf, bytes);
        if (r < 0)
                return r;
        for (uint64_t i = 0; i < bytes; i++) {
                uint8_t want = zeros ? 0 : pat(off + i, seed);

                if (buf[i] != want) {
                        printf("mismatch at %" PRIu64 ": 0x%02x, expected 0x%02x\n", off + i, buf[i], want);
                        return -EILSEQ;
                }
        }
        printf("read=%" PRIu64 " usec=%" PRIu64 "\n", bytes, mono_usec() - t0);
        return 0;
}

static int usage(void) {
        fprintf(stderr, "usage: zbd-tool [--backend kernel|nvme|emu] [-e [-a MAX_ACTIVE] [-o MAX_OPEN]] [-s SYSFS_DIR] DEV "
                        "limits|report|reset|open|close|finish|flush|append|write|verify|zeros|qappend|rawappend[-scattered] [ARGS]\n");
        return 2;
}

int main(int argc, char *argv[]) {
        Zbd *z = NULL;
        static const struct option longopts[] = {
                { "backend", required_argument, NULL, 'b' },
                {}
        };
        const char *sysdir = NULL, *dev, *cmd, *backend = "kernel";
        bool emu = false;
        uint64_t zone = 0, a = 0, b = 0, n, seed = 1;
        uint32_t max_active = 0, max_open = 0;
        int c, r;

        log_set_max_level(getenv("ZBD_TOOL_DEBUG") ? LOG_DEBUG : LOG_WARNING);
        while ((c = getopt_long(argc, argv, "ea:o:s:", longopts, NULL)) >= 0)
                switch (c) {
                case 'b':
                        if (!streq(optarg, "kernel") && !streq(optarg, "nvme") && !streq(optarg, "emu"))
                                return usage();
                        backend = optarg;
                        emu = streq(optarg, "emu");
                        break;
                case 'e': emu = true; break;
                case 'a': max_active = (uint32_t) strtoul(optarg, NULL, 10); break;
                case 'o': max_open = (uint32_t) strtoul(optarg, NULL, 10); break;
                case 's': sysdir = optarg; break;
                default: return usage();
                }
        if (argc - optind < 2)
                return usage();
        dev = argv[optind];
        cmd = argv[optind + 1];
        argv += optind + 2;
        argc -= optind + 2;

        if (emu)
                r = zbd_emu_open(dev, 64 << 20, 60 << 20, 16, max_open, max_active, &z);
        else if (streq(backend, "nvme"))
                r = zbd_nvme_open(dev, sysdir, &z);
        else
                r = zbd_kernel_open(dev, sysdir, &z);
        if (r < 0) {
                fprintf(stderr, "zbd-tool: open %s: %s\n", dev, strerror(-r));
                return result(r);
        }
        /* ZONE as the first argument of most commands. */
        if (argc >= 1 && !streq(cmd, "limits") && !streq(cmd, "flush")) {
                if (parse_u64(argv[0], &zone) < 0)
                        goto bad;
                if (zone >= z->limits.nr_zones && !streq(cmd, "report")) {
                        fprintf(stderr, "zbd-tool: zone %" PRIu64 " out of range\n", zone);
                        goto bad;
                }
        }
        if ((argc >= 2 && parse_u64(argv[1], &a) < 0) || (argc >= 3 && parse_u64(argv[2], &b) < 0))
                goto bad;

        if (streq(cmd, "limits")) {
                const ZbdLimits *l = &z->limits;

                printf("backend=%s\nnr_zones=%" PRIu64 "\nzone_size=%" PRIu64 "\nmax_open=%" PRIu32
                       "\nmax_active=%" PRIu32 "\nzone_append_max=%" PRIu32 "\nmax_write=%" PRIu32
                       "\nblock_size=%" PRIu32 "\nchunk_max=%" PRIu32 "\n",
                       z->ops->name, l->nr_zones, l->zone_size, l->max_open, l->max_active, l->zone_append_max,
                       l->max_write, l->block_size, zbd_chunk_max(z));
                r = 0;
        } else if (streq(cmd, "flush")) {
                printf("write_back=%s\n", z->write_back ? "yes" : "no");
                r = zbd_flush(z);
        } else if (streq(cmd, "report")) {
                _cleanup_free_ Zone *zones = NULL;

                n = argc >= 2 ? a : z->limits.nr_zones;
                zones = calloc(n ? n : 1, sizeof *zones);
                if (!zones)
                        r = -ENOMEM;
                else {
                        size_t got = n;

                        r = z->ops->report(z, zone * z->limits.zone_size, zones, &got);
                        for (size_t i = 0; r >= 0 && i < got; i++)
                                print_zone(zone + i, &zones[i]);
                }
        } else if (argc < 1)
                goto bad;
        else if (streq(cmd, "reset"))
                r = z->ops->reset(z, zone * z->limits.zone_size);
        else if (streq(cmd, "open"))
                r = z->ops->open_zone(z, zone * z->limits.zone_size);
        else if (streq(cmd, "close"))
                r = z->ops->close_zone(z, zone * z->limits.zone_size);
        else if (streq(cmd, "finish"))
                r = z->ops->finish(z, zone * z->limits.zone_size);
        else if (streq(cmd, "append") && argc >= 2) {
                if (argc >= 3)
                        seed = b;
                r = cmd_append(z, zone * z->limits.zone_size, a, (unsigned) seed, true, 0);
        } else if (streq(cmd, "write") && argc >= 3)
                r = cmd_append(z, zone * z->limits.zone_size, b, 1, false, a);
        else if (streq(cmd, "verify") && argc >= 3) {
                if (argc >= 4 && parse_u64(argv[3], &seed) < 0)
                        goto bad;
                r = cmd_verify(z, zone * z->limits.zone_size, a, b, (unsigned) seed, false);
        } else if (streq(cmd, "zeros") && argc >= 3)
                r = cmd_verify(z, zone * z->limits.zone_size, a, b, 0, true);
        else if (streq(cmd, "qappend") && argc >= 4) {
                uint64_t qd;

                if (parse_u64(argv[3], &qd) < 0 || (argc >= 5 && parse_u64(argv[4], &seed) < 0))
                        goto bad;
                r = cmd_qappend(z, zone * z->limits.zone_size, a, b, (unsigned) MIN(qd, 1000), (unsigned) seed);
        } else if ((streq(cmd, "rawappend") || streq(cmd, "rawappend-scattered")) && argc >= 2)
                r = cmd_rawappend(z, zone * z->limits.zone_size, a, streq(cmd, "rawappend-scattered"));
        else
                goto bad;
        zbd_free(z);
        return result(r);
bad:
        zbd_free(z);
        return usage();
}
