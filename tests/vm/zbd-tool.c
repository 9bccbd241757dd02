/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* zbd-tool: a small CLI over src/zbd.h for the vm suite (and by hand):
 * drives the kernel backend on a real zoned block device, or the emulation
 * with -e, through the project's io_uring pool.
 *
 *   zbd-tool [-e [-a MAX_ACTIVE] [-o MAX_OPEN]] [-s SYSFS_DIR] DEV COMMAND [ARGS]
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
 *
 * ZONE is a zone index. The last line is always "result=OK" or
 * "result=ENAME" (the errno's name); exit 0, 1 on an error, 2 on usage.
 * -e: DEV is an emulation file, created if missing (16 zones of 64 MiB,
 * capacity 60 MiB, the recipe's geometry). */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
        fprintf(stderr, "usage: zbd-tool [-e [-a MAX_ACTIVE] [-o MAX_OPEN]] [-s SYSFS_DIR] DEV "
                        "limits|report|reset|open|close|finish|append|write|verify|zeros [ARGS]\n");
        return 2;
}

int main(int argc, char *argv[]) {
        Zbd *z = NULL;
        const char *sysdir = NULL, *dev, *cmd;
        bool emu = false;
        uint64_t zone = 0, a = 0, b = 0, n, seed = 1;
        uint32_t max_active = 0, max_open = 0;
        int c, r;

        log_set_max_level(getenv("ZBD_TOOL_DEBUG") ? LOG_DEBUG : LOG_WARNING);
        while ((c = getopt(argc, argv, "ea:o:s:")) >= 0)
                switch (c) {
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
        else
                r = zbd_kernel_open(dev, sysdir, &z);
        if (r < 0) {
                fprintf(stderr, "zbd-tool: open %s: %s\n", dev, strerror(-r));
                return result(r);
        }
        /* ZONE as the first argument of most commands. */
        if (argc >= 1 && !streq(cmd, "limits")) {
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
        else
                goto bad;
        zbd_free(z);
        return result(r);
bad:
        zbd_free(z);
        return usage();
}
