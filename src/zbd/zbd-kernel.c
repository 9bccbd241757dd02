/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The kernel's zoned block device interface: limits from sysfs, zone
 * report and management with the linux/blkzoned.h ioctls, data as plain
 * O_DIRECT writes at the write pointer through the io_uring pool (there is
 * no io_uring zone-append opcode for block devices).
 *
 * The device is opened O_RDWR | O_DIRECT, never O_EXCL: blkzone, ZenFS and
 * friends open zoned devices exclusively, and a daemon holding the device
 * for its whole life would lock them out (DESIGN.md, "Kernel facts").
 * Nothing here caches zone state: the device's report is the truth.
 *
 * Errors are the kernel's, as negative errno: the active-zone limit comes
 * back as -EOVERFLOW, the open-zone limit as -ETOOMANYREFS, a write the
 * device refuses (not at the write pointer, past the capacity, into a full
 * zone) as -EIO in req->res.
 *
 * Why not libzbd (Debian's libzbd-dev, 2.0.x), which wraps these ioctls:
 * weighed, and kept out of the daemon.
 *  - What it would give: zbd_open() (zone model, sizes, limits from sysfs
 *    and ioctls), zbd_report_zones()/zbd_list_zones() with condition
 *    filters, zbd_reset_zones()/open/close/finish over zone ranges. That is
 *    what this file does in ~150 lines, with the same capacity handling
 *    (BLK_ZONE_REP_CAPACITY) and the runt-zone end.
 *  - What it would cost: libzbd keeps each device's info in a process-wide
 *    table indexed by fd, zbd_fdi[1024], without a lock. zbd_open() stores
 *    into it without checking the fd (lib/zbd.c; no bound check in
 *    bookworm's 2.0.4 either), and every other call rejects an fd of 1024
 *    or more. blkmqd raises RLIMIT_NOFILE for 4096 varlink connections
 *    (src/daemon/blkmqd.c), so a disk hotplugged while many clients are
 *    connected gets such an fd: a write past the table, then "Invalid file
 *    descriptor". Being global and unlocked, the table also makes an open
 *    on one thread race with zone calls on another. libzbd reports errors
 *    as -1 with errno in some calls and -errno in others, and prints its
 *    own messages to stderr, beside blkmqd's log. And it would be one more
 *    library in the daemon and in the VM tests' initramfs, under
 *    LGPL-3.0-or-later (blkmqd is LGPL-2.1-or-later).
 *  - O_EXCL is not the issue: zbd_open() adds no flags of its own, and the
 *    zbd tool opens O_RDONLY for a report.
 * So the ioctls stay here, and libzbd is used where it is strong: vm-zones
 * and vm-zbd run zbd-utils' `zbd report` in the guest as an independent
 * check that every zone's condition and write pointer are what blkmqctl
 * zones and this file say (tests/vm/guest/zones-kernel.sh, zbd-kernel.sh). */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/blkzoned.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "sysfs.h"
#include "uring-pool.h"
#include "util.h"
#include "zbd.h"

#define REPORT_BATCH 128U

typedef struct KernelZbd {
        uint64_t dev_size; /* bytes (BLKGETSIZE64) */
} KernelZbd;

static int read_u64_attr(const char *blockdir, const char *attr, bool optional, uint64_t *ret) {
        _cleanup_free_ char *p = path_join(blockdir, attr);
        long long v;
        int r;

        if (!p)
                return -ENOMEM;
        r = sysfs_read_int(p, &v);
        if (r == -ENOENT && optional) {
                *ret = 0;
                return 0;
        }
        if (r < 0)
                return log_debug_errno(r, "zbd: %s: %m", p);
        if (v < 0)
                return -ERANGE;
        *ret = (uint64_t) v;
        return 0;
}

static void zone_from_blk(const struct blk_zone *b, bool has_cap, Zone *out) {
        out->start = b->start << 9;
        out->len = b->len << 9;
        out->capacity = has_cap && b->capacity ? b->capacity << 9 : out->len;
        out->type = (ZoneType) b->type;
        out->cond = (ZoneCond) b->cond;
        switch (out->cond) {
        case ZONE_COND_FULL:
        case ZONE_COND_READONLY:
        case ZONE_COND_OFFLINE:
                /* NVMe reports start + len for full zones (the driver sets
                 * it), and no valid wp at all for read-only and offline
                 * ones: normalize to "nothing left to write". */
                out->wp = out->start + out->capacity;
                break;
        case ZONE_COND_NOT_WP:
                out->wp = out->start; /* conventional: no write pointer */
                break;
        default:
                out->wp = b->wp << 9;
        }
}

static int kernel_report(Zbd *z, uint64_t offset, Zone *zones, size_t *n) {
        KernelZbd *k = z->backend;
        _cleanup_free_ struct blk_zone_report *rep = NULL;
        size_t want = *n, got = 0;
        uint64_t sector = offset >> 9;

        *n = 0;
        if (want == 0 || offset >= k->dev_size)
                return 0;
        rep = malloc(sizeof *rep + REPORT_BATCH * sizeof(struct blk_zone));
        if (!rep)
                return -ENOMEM;
        while (got < want && (sector << 9) < k->dev_size) {
                size_t batch = want - got < REPORT_BATCH ? want - got : REPORT_BATCH;
                bool has_cap;

                memset(rep, 0, sizeof *rep);
                rep->sector = sector;
                rep->nr_zones = (uint32_t) batch;
                if (ioctl(z->fd, BLKREPORTZONE, rep) < 0)
                        return log_debug_errno(errno, "zbd: %s: BLKREPORTZONE at sector %" PRIu64 ": %m",
                                               z->path, sector);
                if (rep->nr_zones == 0)
                        break;
                /* The kernel sets the flag on the way out when the zones'
                 * capacity field is valid (5.9+); before that, capacity = len. */
                has_cap = rep->flags & BLK_ZONE_REP_CAPACITY;
                for (uint32_t i = 0; i < rep->nr_zones && got < want; i++)
                        zone_from_blk(&rep->zones[i], has_cap, &zones[got++]);
                sector = rep->zones[rep->nr_zones - 1].start + rep->zones[rep->nr_zones - 1].len;
        }
        *n = got;
        return 0;
}

static int zone_range(Zbd *z, uint64_t zone_start, struct blk_zone_range *range) {
        KernelZbd *k = z->backend;
        uint64_t len;

        if (zone_start % z->limits.zone_size || zone_start >= k->dev_size)
                return -EINVAL;
        /* The last zone may be smaller ("runt" zone): end at capacity. */
        len = k->dev_size - zone_start < z->limits.zone_size ? k->dev_size - zone_start : z->limits.zone_size;
        *range = (struct blk_zone_range) { .sector = zone_start >> 9, .nr_sectors = len >> 9 };
        return 0;
}

static int zone_mgmt(Zbd *z, unsigned long req, const char *what, uint64_t zone_start) {
        struct blk_zone_range range;
        int r;

        r = zone_range(z, zone_start, &range);
        if (r < 0)
                return r;
        if (ioctl(z->fd, req, &range) < 0)
                return log_debug_errno(errno, "zbd: %s: %s zone at %" PRIu64 ": %m", z->path, what, zone_start);
        return 0;
}

static int kernel_reset(Zbd *z, uint64_t zone_start) {
        return zone_mgmt(z, BLKRESETZONE, "reset", zone_start);
}

static int kernel_open_zone(Zbd *z, uint64_t zone_start) {
        return zone_mgmt(z, BLKOPENZONE, "open", zone_start);
}

static int kernel_close_zone(Zbd *z, uint64_t zone_start) {
        return zone_mgmt(z, BLKCLOSEZONE, "close", zone_start);
}

static int kernel_finish(Zbd *z, uint64_t zone_start) {
        return zone_mgmt(z, BLKFINISHZONE, "finish", zone_start);
}

/* Durability. Writes go O_DIRECT (no page cache of ours), zone
 * management through the ioctls, which the block layer sends without
 * REQ_PREFLUSH or REQ_FUA: on a device with a volatile write cache a
 * completed write, and a reset or finish, may still be lost in a power
 * cut. The NVMe Flush command "commits data and metadata associated with
 * the namespace to non-volatile media"; neither the NVM nor the ZNS
 * command set says a Zone Management Send completion is itself durable
 * while a volatile write cache is enabled, so a reset or finish is
 * followed by a flush before anything is acknowledged on it. fdatasync()
 * of the block device is blkdev_fsync(): its (empty) page cache, then
 * blkdev_issue_flush(), a REQ_PREFLUSH the block layer turns into the
 * device's flush (NVMe Flush, SCSI SYNCHRONIZE CACHE) and drops as a no-op
 * where queue/write_cache is "write through". The flush counters of
 * /sys/block/X/stat (fields 16, 17) count it. */
static int kernel_flush(Zbd *z) {
        if (fdatasync(z->fd) < 0)
                return log_debug_errno(errno, "zbd: %s: fdatasync: %m", z->path);
        return 0;
}

/* queue/write_cache: "write back" (the default where it cannot be read:
 * a flush too many costs a little, one too few loses data). */
static bool read_write_back(const char *blockdir) {
        _cleanup_free_ char *p = path_join(blockdir, "queue/write_cache"), *v = NULL;

        if (!p || sysfs_read(p, &v) < 0)
                return true;
        return !streq(v, "write through");
}

static int kernel_prep_append(Zbd *z, uint64_t zone_start, uint64_t wp, const void *buf, uint32_t len,
                              UringReq *req) {
        KernelZbd *k = z->backend;
        const ZbdLimits *l = &z->limits;

        /* What can be checked without a report: alignment and bounds. The
         * write pointer and capacity are the device's to check (-EIO). */
        if (!buf || !req || len == 0 || len % l->block_size || len > l->max_write ||
            zone_start % l->zone_size || wp % l->block_size || wp < zone_start ||
            wp - zone_start + len > l->zone_size || wp + len > k->dev_size)
                return -EINVAL;
        zbd_prep_write(z, wp, buf, len, req);
        return 0;
}

static int kernel_append_result(Zbd *z, const UringReq *req, uint64_t *ret_offset) {
        if (req->res < 0)
                return req->res;
        /* A short write on a zoned device moved the write pointer by an
         * unknown amount as far as the caller's bookkeeping goes: report
         * the zone again. */
        if ((uint32_t) req->res != req->len)
                return -EIO;
        if (ret_offset)
                *ret_offset = req->offset;
        return 0;
}

static int kernel_read(Zbd *z, uint64_t offset, void *buf, size_t len) {
        KernelZbd *k = z->backend;
        uint32_t bs = z->limits.block_size;
        bool aligned = (uintptr_t) buf % bs == 0 && offset % bs == 0 && len % bs == 0;
        _cleanup_free_ uint8_t *bounce = NULL;
        uint64_t a_off, a_end;
        uint8_t *dst;
        size_t a_len, done = 0;

        if (!buf || offset > k->dev_size || len > k->dev_size - offset)
                return -EINVAL;
        if (len == 0)
                return 0;
        /* O_DIRECT: unaligned requests go through an aligned bounce buffer. */
        a_off = offset - offset % bs;
        a_end = offset + len;
        a_end += (bs - a_end % bs) % bs;
        a_len = a_end - a_off;
        if (aligned)
                dst = buf;
        else {
                if (posix_memalign((void **) &bounce, 4096, a_len) != 0)
                        return -ENOMEM;
                dst = bounce;
        }
        while (done < a_len) {
                ssize_t n = pread(z->fd, dst + done, a_len - done, (off_t) (a_off + done));

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return log_debug_errno(errno, "zbd: %s: read at %" PRIu64 ": %m", z->path, a_off + done);
                }
                if (n == 0)
                        return -EIO;
                done += (size_t) n;
        }
        if (!aligned)
                memcpy(buf, bounce + (offset - a_off), len);
        return 0;
}

static int kernel_read_fd(Zbd *z) {
        return z->fd;
}

static void kernel_free(Zbd *z) {
        free(z->backend);
        z->backend = NULL;
}

static const ZbdOps kernel_ops = {
        .name = "kernel",
        .report = kernel_report,
        .reset = kernel_reset,
        .open_zone = kernel_open_zone,
        .close_zone = kernel_close_zone,
        .finish = kernel_finish,
        .flush = kernel_flush,
        .prep_append = kernel_prep_append,
        .append_result = kernel_append_result,
        .read = kernel_read,
        .read_fd = kernel_read_fd,
        .free = kernel_free,
};

static int read_limits(const char *blockdir, ZbdLimits *l) {
        _cleanup_free_ char *zp = path_join(blockdir, "queue/zoned");
        _cleanup_free_ char *model = NULL;
        uint64_t chunk, v;
        int r;

        if (!zp)
                return -ENOMEM;
        r = sysfs_read(zp, &model);
        if (r < 0)
                return r;
        if (!streq(model, "host-managed") && !streq(model, "host-aware"))
                return -EMEDIUMTYPE; /* not zoned */

        r = read_u64_attr(blockdir, "queue/nr_zones", false, &l->nr_zones);
        if (r < 0)
                return r;
        r = read_u64_attr(blockdir, "queue/chunk_sectors", false, &chunk);
        if (r < 0)
                return r;
        if (chunk == 0 || (chunk & (chunk - 1)) || l->nr_zones == 0)
                return -EINVAL; /* the kernel wants power-of-two zone sizes */
        l->zone_size = chunk << 9;
        r = read_u64_attr(blockdir, "queue/max_open_zones", true, &v);
        if (r < 0)
                return r;
        l->max_open = v > UINT32_MAX ? UINT32_MAX : (uint32_t) v;
        r = read_u64_attr(blockdir, "queue/max_active_zones", true, &v);
        if (r < 0)
                return r;
        l->max_active = v > UINT32_MAX ? UINT32_MAX : (uint32_t) v;
        r = read_u64_attr(blockdir, "queue/zone_append_max_bytes", true, &v);
        if (r < 0)
                return r;
        l->zone_append_max = v > UINT32_MAX ? UINT32_MAX : (uint32_t) v;
        r = read_u64_attr(blockdir, "queue/max_sectors_kb", false, &v);
        if (r < 0)
                return r;
        if (v == 0 || v > UINT32_MAX / 1024)
                return -EINVAL;
        l->max_write = (uint32_t) (v * 1024);
        r = read_u64_attr(blockdir, "queue/logical_block_size", false, &v);
        if (r < 0)
                return r;
        if (v < 512 || v > 65536 || (v & (v - 1)))
                return -EINVAL;
        l->block_size = (uint32_t) v;
        return 0;
}

int zbd_kernel_open(const char *devnode, const char *blockdir, Zbd **ret) {
        _cleanup_free_ char *dir = NULL;
        _cleanup_close_ int fd = -EBADF;
        KernelZbd *k;
        Zbd *z;
        struct stat st;
        uint64_t size;
        int r;

        if (!devnode || !ret)
                return -EINVAL;
        fd = open(devnode, O_RDWR | O_DIRECT | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return log_debug_errno(errno, "zbd: open %s: %m", devnode);
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISBLK(st.st_mode))
                return -ENOTBLK;
        if (blockdir)
                dir = strdup(blockdir);
        else if (asprintf(&dir, "/sys/dev/block/%u:%u", major(st.st_rdev), minor(st.st_rdev)) < 0)
                dir = NULL;
        if (!dir)
                return -ENOMEM;
        if (ioctl(fd, BLKGETSIZE64, &size) < 0)
                return -errno;

        z = calloc(1, sizeof *z);
        k = calloc(1, sizeof *k);
        if (!z || !k) {
                free(z);
                free(k);
                return -ENOMEM;
        }
        z->ops = &kernel_ops;
        z->backend = k;
        z->fd = -EBADF;
        k->dev_size = size;
        r = read_limits(dir, &z->limits);
        if (r < 0) {
                zbd_free(z);
                return log_debug_errno(r, "zbd: %s (%s): no zoned limits: %m", devnode, dir);
        }
        if (z->limits.max_write % z->limits.block_size) {
                zbd_free(z);
                return -EINVAL;
        }
        z->path = strdup(devnode);
        if (!z->path) {
                zbd_free(z);
                return -ENOMEM;
        }
        z->fd = TAKE_FD(fd);
        z->write_back = read_write_back(dir);
        log_debug("zbd: %s: kernel backend, %" PRIu64 " zones of %" PRIu64 " bytes, max open %u active %u, "
                  "max write %u, zone append max %u, block %u, write cache %s",
                  devnode, z->limits.nr_zones, z->limits.zone_size, z->limits.max_open,
                  z->limits.max_active, z->limits.max_write, z->limits.zone_append_max,
                  z->limits.block_size, z->write_back ? "write back" : "write through");
        *ret = z;
        return 0;
}
