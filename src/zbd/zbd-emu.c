/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Zones emulated over a regular file, with a ZNS device's semantics: for
 * hosts and tests without a zoned device.
 *
 * Files. PATH holds the data (sparse: nr_zones × zone_size bytes, holes
 * read as zeros); PATH.zones the zone state, two crc'd records per zone
 * (its layout: zbd-emu-meta.c).
 *
 * Crash safety. The invariant: the recorded write pointer is never beyond
 * data that reached the file.
 *   - Writes: the data is written first (the io_uring request), the record
 *     only in append_result(), after the completion. A kill -9 in between
 *     leaves the record behind the data: the zone reopens with the older
 *     write pointer (conservative). The data fd is O_DSYNC, so a completed
 *     write is on stable storage, block allocation included, before its
 *     record can be written: the same holds across a power cut. Records of
 *     writes are not fsync'd (they may lag; lagging is safe).
 *   - Reset: the EMPTY record is written and fdatasync'd before the data is
 *     punched out. Finish: the FULL record is fdatasync'd before returning.
 *   - The data file's size and name are fsync'd when it is created or
 *     grown; flush() (the seal's, the reset batch's) fdatasyncs both files.
 *   - A torn or garbage record fails its crc and the other slot (older,
 *     lower or equal write pointer unless a durable reset/finish came in
 *     between, which was fsync'd as a whole) is used.
 *   - Open repairs: data found beyond a zone's recorded write pointer (a
 *     write whose record was lost) is punched out, so reads past the write
 *     pointer return zeros as on a device.
 *   Open zones come back CLOSED (EMPTY if nothing was written), as after a
 *   device power cycle; open/close transitions are never written.
 *
 * Semantics (matching the 6.1 kernel + QEMU ZNS where they can be checked,
 * see tests/vm/guest/zbd-kernel.sh):
 *   - prep_append() checks what a device would: a write not at the write
 *     pointer is -EINVAL (a caller bug, caught before any I/O; the kernel
 *     reports the device's "Zone Invalid Write" as -EIO in req->res); a write
 *     past the capacity or into a full zone is -EIO (as the kernel);
 *     an implicit open needing an active resource beyond max_active is
 *     -EOVERFLOW, beyond max_open with no implicitly open zone to close is
 *     -ETOOMANYREFS (the kernel's BLK_STS_ZONE_{ACTIVE,OPEN}_RESOURCE).
 *     It opens the zone (EMPTY/CLOSED → IMP_OPEN, closing the least recently
 *     used implicitly open zone if max_open is reached), as a device does
 *     when the write arrives.
 *   - The write pointer moves in append_result(), which the caller calls on
 *     the loop thread after the completion: one write in flight per zone.
 *     A completion whose offset is no longer the write pointer (the zone was
 *     reset or finished meanwhile, or two writes were in flight) is -EIO and
 *     its data is punched out again.
 *   - open/close/finish/reset as ZNS: explicit open takes resources like an
 *     implicit one; close of an open zone → CLOSED, keeping its active
 *     resource even if nothing was written (as QEMU); close of a closed zone
 *     is a no-op, of an EMPTY or FULL one -EIO, open of a FULL one -EIO;
 *     finish (from any state) → FULL with wp = start + capacity; reset →
 *     EMPTY, data punched (reads return zeros). Conventional zones: reads
 *     and writes anywhere, management is -EINVAL.
 *
 * Threads: control operations run on worker threads, prep_append and
 * append_result on the loop thread; one mutex guards the zone table and is
 * never held across fsync or hole punching (a zone being reset or finished
 * is marked busy meanwhile: writes to it get -EBUSY). */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/param.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "uring-pool.h"
#include "zbd.h"
#include "zbd-emu-internal.h"

static bool zone_conv(const EmuZbd *e, uint32_t i) {
        return i < e->nr_conv;
}

static uint64_t zone_cap(const EmuZbd *e, uint32_t i) {
        return zone_conv(e, i) ? e->zone_size : e->capacity;
}

static bool cond_open(ZoneCond c) {
        return c == ZONE_COND_IMP_OPEN || c == ZONE_COND_EXP_OPEN;
}

static bool cond_active(ZoneCond c) {
        return cond_open(c) || c == ZONE_COND_CLOSED;
}

static int write_zeros(int fd, uint64_t off, uint64_t len) {
        _cleanup_free_ void *zeros = calloc(1, EMU_ZERO_CHUNK);

        if (!zeros)
                return -ENOMEM;
        while (len > 0) {
                size_t n = len < EMU_ZERO_CHUNK ? (size_t) len : EMU_ZERO_CHUNK;
                ssize_t w = pwrite(fd, zeros, n, (off_t) off);

                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                off += (uint64_t) w;
                len -= (uint64_t) w;
        }
        return fdatasync(fd) < 0 ? -errno : 0;
}

/* Makes [off, off + len) read as zeros. Any locking is the caller's. */
static int punch(EmuZbd *e, uint64_t off, uint64_t len) {
        if (len == 0)
                return 0;
        if (fallocate(e->rfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t) off, (off_t) len) == 0)
                return 0;
        if (errno != EOPNOTSUPP && errno != ENOSYS)
                return log_error_errno(errno, "zbd-emu: punching [%" PRIu64 ", +%" PRIu64 "): %m", off, len);
        return write_zeros(e->rfd, off, len);
}

/* Under the lock: zone i gives up its open and active resources. */
static void release(EmuZbd *e, uint32_t i) {
        ZoneCond c = e->zones[i].cond;

        if (cond_open(c))
                e->n_open--;
        if (cond_active(c))
                e->n_active--;
}

/* Under the lock: an open zone becomes CLOSED and keeps its active
 * resource, even with nothing written: what QEMU's ZNS namespace does
 * (checked in tests/vm/guest/zbd-kernel.sh). null_blk and ZBC disks go to
 * EMPTY instead; an allocator that frees a slot must reset or finish. */
static void close_open_zone(EmuZbd *e, uint32_t i) {
        e->n_open--;
        e->zones[i].cond = ZONE_COND_CLOSED;
}

/* Under the lock: room for one more open zone besides i, closing the least
 * recently used implicitly open zone if the limit is reached. */
static int make_open_room(EmuZbd *e, uint32_t i) {
        uint32_t victim = UINT32_MAX;

        if (e->max_open == 0 || e->n_open < e->max_open)
                return 0;
        for (uint32_t j = e->nr_conv; j < e->nr_zones; j++)
                if (j != i && e->zones[j].cond == ZONE_COND_IMP_OPEN &&
                    (victim == UINT32_MAX || e->zones[j].lru < e->zones[victim].lru))
                        victim = j;
        if (victim == UINT32_MAX)
                return -ETOOMANYREFS; /* every open zone was opened explicitly */
        close_open_zone(e, victim);
        return 0;
}

/* Under the lock: zone i (EMPTY or CLOSED) becomes open, taking resources. */
static int take_open(EmuZbd *e, uint32_t i, ZoneCond to) {
        EmuZone *zn = &e->zones[i];
        int r;

        switch (zn->cond) {
        case ZONE_COND_EMPTY:
                if (e->max_active && e->n_active >= e->max_active)
                        return -EOVERFLOW;
                r = make_open_room(e, i);
                if (r < 0)
                        return r;
                e->n_active++;
                e->n_open++;
                break;
        case ZONE_COND_CLOSED:
                r = make_open_room(e, i);
                if (r < 0)
                        return r;
                e->n_open++;
                break;
        case ZONE_COND_IMP_OPEN:
        case ZONE_COND_EXP_OPEN:
                break;
        default:
                return -EIO;
        }
        if (!(zn->cond == ZONE_COND_EXP_OPEN && to == ZONE_COND_IMP_OPEN))
                zn->cond = to;
        zn->lru = ++e->lru_clock;
        return 0;
}

/* zone_start → index; -EINVAL unless it is a zone's first byte. */
static int zone_index(const Zbd *z, uint64_t zone_start, uint32_t *ret) {
        const EmuZbd *e = z->backend;

        if (zone_start % e->zone_size || zone_start / e->zone_size >= e->nr_zones)
                return -EINVAL;
        *ret = (uint32_t) (zone_start / e->zone_size);
        return 0;
}

static void zone_fill(const EmuZbd *e, uint32_t i, Zone *out) {
        const EmuZone *zn = &e->zones[i];
        uint64_t start = (uint64_t) i * e->zone_size;

        out->start = start;
        out->len = e->zone_size;
        out->capacity = zone_cap(e, i);
        if (zone_conv(e, i)) {
                out->type = ZONE_TYPE_CONVENTIONAL;
                out->cond = ZONE_COND_NOT_WP;
                out->wp = start;
        } else {
                out->type = ZONE_TYPE_SEQWRITE_REQ;
                out->cond = zn->cond;
                out->wp = zn->cond == ZONE_COND_FULL ? start + e->capacity : start + zn->wp;
        }
}

static int emu_report(Zbd *z, uint64_t offset, Zone *zones, size_t *n) {
        EmuZbd *e = z->backend;
        size_t want = *n, got = 0;
        uint64_t i = offset / e->zone_size;

        pthread_mutex_lock(&e->lock);
        for (; i < e->nr_zones && got < want; i++)
                zone_fill(e, (uint32_t) i, &zones[got++]);
        pthread_mutex_unlock(&e->lock);
        *n = got;
        return 0;
}

static int emu_open_zone(Zbd *z, uint64_t zone_start) {
        EmuZbd *e = z->backend;
        uint32_t i;
        int r;

        r = zone_index(z, zone_start, &i);
        if (r < 0 || zone_conv(e, i))
                return -EINVAL;
        pthread_mutex_lock(&e->lock);
        if (e->zones[i].busy)
                r = -EBUSY;
        else
                r = take_open(e, i, ZONE_COND_EXP_OPEN);
        pthread_mutex_unlock(&e->lock);
        return r;
}

static int emu_close_zone(Zbd *z, uint64_t zone_start) {
        EmuZbd *e = z->backend;
        EmuZone *zn;
        uint32_t i;
        int r;

        r = zone_index(z, zone_start, &i);
        if (r < 0 || zone_conv(e, i))
                return -EINVAL;
        pthread_mutex_lock(&e->lock);
        zn = &e->zones[i];
        if (zn->busy)
                r = -EBUSY;
        else if (cond_open(zn->cond))
                close_open_zone(e, i);
        else if (zn->cond != ZONE_COND_CLOSED)
                r = -EIO; /* EMPTY, FULL, ...: ZNS "invalid zone state transition" */
        pthread_mutex_unlock(&e->lock);
        return r;
}

/* Reset (to EMPTY) or finish (to FULL): record durably, then punch. */
static int emu_reset_or_finish(Zbd *z, uint64_t zone_start, bool reset) {
        EmuZbd *e = z->backend;
        EmuZone *zn, saved;
        uint32_t i;
        int r;

        r = zone_index(z, zone_start, &i);
        if (r < 0 || zone_conv(e, i))
                return -EINVAL;
        pthread_mutex_lock(&e->lock);
        zn = &e->zones[i];
        if (zn->busy) {
                pthread_mutex_unlock(&e->lock);
                return -EBUSY;
        }
        if (zn->cond == ZONE_COND_READONLY || zn->cond == ZONE_COND_OFFLINE) {
                pthread_mutex_unlock(&e->lock);
                return -EIO;
        }
        if ((reset && zn->cond == ZONE_COND_EMPTY) || (!reset && zn->cond == ZONE_COND_FULL)) {
                pthread_mutex_unlock(&e->lock);
                return 0;
        }
        saved = *zn;
        release(e, i);
        zn->cond = reset ? ZONE_COND_EMPTY : ZONE_COND_FULL;
        zn->wp = reset ? 0 : e->capacity;
        r = emu_record_write(e, i);
        if (r < 0) {
                /* Nothing changed on disk: take the resources back. */
                *zn = saved;
                if (cond_open(zn->cond))
                        e->n_open++;
                if (cond_active(zn->cond))
                        e->n_active++;
                pthread_mutex_unlock(&e->lock);
                return r;
        }
        zn->busy = true;
        pthread_mutex_unlock(&e->lock);

        if (fdatasync(e->meta_fd) < 0)
                r = log_error_errno(errno, "zbd-emu: %s: fdatasync of the zone state: %m", z->path);
        /* Only once the record is durable: a crash now leaves an EMPTY
         * record over old data, which the next open punches. */
        if (r >= 0 && reset)
                r = punch(e, zone_start, e->zone_size);

        pthread_mutex_lock(&e->lock);
        zn->busy = false;
        pthread_mutex_unlock(&e->lock);
        return r;
}

static int emu_reset(Zbd *z, uint64_t zone_start) {
        return emu_reset_or_finish(z, zone_start, true);
}

static int emu_finish(Zbd *z, uint64_t zone_start) {
        return emu_reset_or_finish(z, zone_start, false);
}

static int emu_prep_append(Zbd *z, uint64_t zone_start, uint64_t wp, const void *buf, uint32_t len,
                           UringReq *req) {
        EmuZbd *e = z->backend;
        EmuZone *zn;
        uint64_t end;
        uint32_t i;
        int r;

        r = zone_index(z, zone_start, &i);
        if (r < 0)
                return r;
        if (!buf || !req || len == 0 || len % EMU_BLOCK || len > z->limits.max_write || wp % EMU_BLOCK ||
            wp < zone_start)
                return -EINVAL;
        end = zone_start + zone_cap(e, i);

        pthread_mutex_lock(&e->lock);
        zn = &e->zones[i];
        if (zone_conv(e, i))
                r = wp >= end || len > end - wp ? -EINVAL : 0;
        else if (zn->busy)
                r = -EBUSY;
        else if (zn->cond == ZONE_COND_FULL || zn->cond == ZONE_COND_READONLY ||
                 zn->cond == ZONE_COND_OFFLINE)
                r = -EIO;
        else if (wp != zone_start + zn->wp)
                r = -EINVAL; /* "unaligned write" */
        else if (len > end - wp)
                r = -EIO;    /* past the zone capacity */
        else
                r = take_open(e, i, ZONE_COND_IMP_OPEN);
        pthread_mutex_unlock(&e->lock);
        if (r < 0)
                return r;

        zbd_prep_write(z, wp, buf, len, req);
        return 0;
}

/* One object as a stream of writes at the write pointer, part_len bytes
 * each, on one io_uring worker (URING_OP_WRITE_STREAM), one in flight: the
 * worker starts the next write as one completes, without a trip through the
 * loop thread. The caller feeds every part, in order, to append_result()
 * with its offset (the part's result64): the write pointer moves as with
 * single writes, the record after the data. Checked as one write of the
 * first part, and the whole must fit the capacity. */
static int emu_prep_stream(Zbd *z, uint64_t zone_start, const void *buf, uint32_t len, uint32_t part_len,
                           UringStream *s) {
        EmuZbd *e = z->backend;
        uint64_t wp;
        uint32_t i;
        int r;

        r = zone_index(z, zone_start, &i);
        if (r < 0)
                return r;
        if (!s || part_len == 0 || part_len % EMU_BLOCK || part_len > z->limits.max_write || len % EMU_BLOCK ||
            zone_conv(e, i))
                return -EINVAL;
        pthread_mutex_lock(&e->lock);
        wp = e->zones[i].wp;
        pthread_mutex_unlock(&e->lock);
        if (len > zone_cap(e, i) - wp)
                return -EIO;
        r = emu_prep_append(z, zone_start, zone_start + wp, buf, MIN(part_len, len), &s->req);
        if (r < 0)
                return r;
        s->req.op = URING_OP_WRITE_STREAM;
        s->req.len = len;
        s->part_len = part_len;
        s->lba_shift = 0;
        return 0;
}

static int emu_append_result(Zbd *z, const UringReq *req, uint64_t *ret_offset) {
        EmuZbd *e = z->backend;
        EmuZone *zn;
        uint64_t start, done;
        uint32_t i;
        int r = 0;

        if (req->offset / e->zone_size >= e->nr_zones)
                return -EINVAL;
        i = (uint32_t) (req->offset / e->zone_size);
        start = (uint64_t) i * e->zone_size;
        if (zone_conv(e, i)) {
                if (req->res < 0)
                        return req->res;
                if ((uint32_t) req->res != req->len)
                        return -EIO;
                if (ret_offset)
                        *ret_offset = req->offset;
                return 0;
        }
        if (req->res < 0)
                return req->res; /* the zone stays open, the write pointer where it was */
        done = (uint64_t) req->res - (uint64_t) req->res % EMU_BLOCK;

        pthread_mutex_lock(&e->lock);
        zn = &e->zones[i];
        if (zn->busy || zn->cond == ZONE_COND_FULL || req->offset != start + zn->wp ||
            done > e->capacity - zn->wp) {
                /* Reset or finished while in flight, or a second write in
                 * flight: what landed beyond the write pointer must read
                 * as zeros again. */
                bool beyond = zn->cond == ZONE_COND_FULL || req->offset >= start + zn->wp;
                uint64_t wp = start + zn->wp;

                pthread_mutex_unlock(&e->lock);
                log_debug("zbd-emu: %s: write at %" PRIu64 " completed, zone write pointer at %" PRIu64,
                          z->path, req->offset, wp);
                if (beyond)
                        (void) punch(e, req->offset, req->len);
                return -EIO;
        }
        if (done > 0) {
                if (zn->cond == ZONE_COND_EMPTY) {
                        /* Reset while in flight and the write landed at
                         * the zone start: it has data now, so it holds an
                         * active resource (possibly one over max_active). */
                        zn->cond = ZONE_COND_CLOSED;
                        e->n_active++;
                }
                zn->wp += done;
                zn->lru = ++e->lru_clock;
                if (zn->wp == e->capacity) {
                        release(e, i);
                        zn->cond = ZONE_COND_FULL;
                }
                r = emu_record_write(e, i);
        }
        pthread_mutex_unlock(&e->lock);
        if (r < 0)
                return r;
        if (done != req->len)
                return -EIO; /* short write: the write pointer moved by what landed */
        if (ret_offset)
                *ret_offset = req->offset;
        return 0;
}

static int emu_read(Zbd *z, uint64_t offset, void *buf, size_t len) {
        EmuZbd *e = z->backend;
        uint64_t total = (uint64_t) e->nr_zones * e->zone_size;
        size_t done = 0;

        if (!buf || offset > total || len > total - offset)
                return -EINVAL;
        while (done < len) {
                ssize_t n = pread(e->rfd, (uint8_t *) buf + done, len - done, (off_t) (offset + done));

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0) { /* past the end of a short file: zeros */
                        memset((uint8_t *) buf + done, 0, len - done);
                        break;
                }
                done += (size_t) n;
        }
        return 0;
}

/* The pool's reads (Verify, the scrub) go around the page cache where the
 * file system allows it: what they read is then what the disk holds, the
 * request's I/O priority reaches the disk (a buffered read's readahead goes
 * out at the reading thread's), and scrubbing every object does not push
 * the workload's pages out of the cache. */
/* The data is written O_DSYNC (a completion is durable, allocation
 * included) and the records of resets and finishes are fdatasync'd before
 * they return: nothing is left for a flush to do but what a different
 * file system or a FUSE server might not honour in O_DSYNC. It is an
 * fdatasync of both files all the same, so a seal and a reset make their
 * durability explicit here as on a device, a failure of it reaches the
 * caller, and a disk under test sees the flush where a device would. */
static int emu_flush(Zbd *z) {
        EmuZbd *e = z->backend;

        if (fdatasync(z->fd) < 0)
                return log_debug_errno(errno, "zbd-emu: %s: fdatasync: %m", z->path);
        if (fdatasync(e->meta_fd) < 0)
                return log_debug_errno(errno, "zbd-emu: %s: fdatasync of the zone state: %m", z->path);
        return 0;
}

static int emu_read_fd(Zbd *z) {
        EmuZbd *e = z->backend;

        return e->direct ? z->fd : e->rfd;
}

static void emu_free(Zbd *z) {
        EmuZbd *e = z->backend;

        if (!e)
                return;
        if (e->meta_fd >= 0)
                close(e->meta_fd); /* drops the flock */
        if (e->rfd >= 0)
                close(e->rfd);
        pthread_mutex_destroy(&e->lock);
        free(e->zones);
        free(e);
        z->backend = NULL;
}

static const ZbdOps emu_ops = {
        .name = "emulated",
        .report = emu_report,
        .reset = emu_reset,
        .open_zone = emu_open_zone,
        .close_zone = emu_close_zone,
        .finish = emu_finish,
        .flush = emu_flush,
        .prep_append = emu_prep_append,
        .prep_stream = emu_prep_stream,
        .append_result = emu_append_result,
        .read = emu_read,
        .read_fd = emu_read_fd,
        .free = emu_free,
};

/* Data beyond a zone's recorded write pointer (a write whose record was
 * lost in a crash, a reset interrupted before its punch) goes. */
static int repair(EmuZbd *e, const char *path) {
        for (uint32_t i = e->nr_conv; i < e->nr_zones; i++) {
                const EmuZone *zn = &e->zones[i];
                uint64_t start = (uint64_t) i * e->zone_size, from = start + zn->wp, end = start + e->zone_size;
                off_t d;
                int r;

                if (zn->cond == ZONE_COND_FULL)
                        from = start + e->capacity;
                if (from >= end)
                        continue;
                d = lseek(e->rfd, (off_t) from, SEEK_DATA);
                if (d < 0) {
                        if (errno == ENXIO)
                                continue; /* holes up to the end of the file */
                        d = (off_t) from; /* no SEEK_DATA here: punch anyway */
                }
                if ((uint64_t) d >= end)
                        continue;
                log_info("zbd-emu: %s: zone %" PRIu32 " has data beyond its write pointer %" PRIu64
                         " (a write not recorded before a crash): discarding it", path, i, zn->wp);
                r = punch(e, from, end - from);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int data_open(Zbd *z, EmuZbd *e, bool may_create) {
        uint64_t size = (uint64_t) e->nr_zones * e->zone_size;
        struct stat st;
        int fd, r;

        e->rfd = open(z->path, O_RDWR | O_CLOEXEC | O_NOCTTY);
        if (e->rfd < 0 && errno == ENOENT) {
                if (!may_create)
                        return log_error_errno(ENOENT, "zbd-emu: %s is gone but its zones hold data", z->path);
                e->rfd = open(z->path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_CREAT | O_EXCL, 0600);
        }
        if (e->rfd < 0)
                return log_error_errno(errno, "zbd-emu: open %s: %m", z->path);
        if (fstat(e->rfd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        if ((uint64_t) st.st_size < size) {
                /* The size is metadata that no O_DSYNC write of the data
                 * makes durable by itself where it lies within it: synced
                 * here, with the file's name, before any zone is used. */
                if (ftruncate(e->rfd, (off_t) size) < 0)
                        return log_error_errno(errno, "zbd-emu: sizing %s: %m", z->path);
                if (fsync(e->rfd) < 0)
                        return log_error_errno(errno, "zbd-emu: fsync of %s: %m", z->path);
                r = emu_fsync_parent(z->path);
                if (r < 0)
                        return log_error_errno(r, "zbd-emu: fsync of the directory of %s: %m", z->path);
        }

        /* Writes: O_DIRECT where the file system has it (not tmpfs), and
         * O_DSYNC so a completion means durable, allocation included,
         * before append_result() records the write pointer. */
        fd = open(z->path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_DIRECT | O_DSYNC);
        if (fd < 0 && errno == EINVAL) {
                log_debug("zbd-emu: %s: no O_DIRECT on this file system, buffered writes", z->path);
                fd = open(z->path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_DSYNC);
        }
        else
                e->direct = fd >= 0;
        if (fd < 0)
                return log_error_errno(errno, "zbd-emu: open %s: %m", z->path);
        z->fd = fd;
        return 0;
}

/* Never take over somebody's data: a data file without state can only be
 * somebody's (the state is created first). One that holds nothing (sparse,
 * as after `truncate -s 64M`) and is no larger than the zones is adopted;
 * anything else is refused, saying what to do. */
static int check_adoptable(const char *path, const ZbdEmuConfig *c) {
        struct stat st;

        if (stat(path, &st) == 0 && st.st_size > 0) {
                uint64_t want = (uint64_t) c->nr_zones * c->zone_size;
                int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
                off_t data = fd < 0 ? 0 : lseek(fd, 0, SEEK_DATA);
                bool empty = fd >= 0 && data < 0 && errno == ENXIO;

                if (fd >= 0)
                        close(fd);
                if (!S_ISREG(st.st_mode) || !empty || (uint64_t) st.st_size > want)
                        return log_error_errno(EEXIST,
                                               "zbd-emu: %s exists and is not an emulated zoned device (%s); "
                                               "point Emulate= at a path that does not exist (blkmqd creates "
                                               "it), or remove the file if it is yours to lose",
                                               path,
                                               !S_ISREG(st.st_mode) ? "not a regular file"
                                               : !empty             ? "it holds data"
                                                                    : "larger than the zones asked for");
                log_info("zbd-emu: %s exists, holds no data and fits %" PRIu32 " zones of %" PRIu64
                         " bytes: taking it over.", path, c->nr_zones, c->zone_size);
        }
        return 0;
}

/* No state file yet: checks the geometry and the data file, and creates
 * the state. Returns 1 if it made it, 0 if another process just did. */
static int meta_create_new(const char *path, const char *meta_path, const ZbdEmuConfig *c) {
        int r;

        if (c->zone_size == 0 || c->zone_size % EMU_BLOCK || c->zone_capacity == 0 ||
            c->zone_capacity % EMU_BLOCK || c->zone_capacity > c->zone_size || c->nr_zones == 0 ||
            c->nr_conv > c->nr_zones || c->zone_size > UINT64_MAX / c->nr_zones)
                return -EINVAL;
        r = check_adoptable(path, c);
        if (r < 0)
                return r;
        r = emu_meta_create(meta_path, c, EMU_BLOCK);
        if (r < 0 && r != -EEXIST)
                return log_error_errno(r, "zbd-emu: creating %s: %m", meta_path);
        return r == 0;
}

int zbd_emu_open_config(const char *path, const ZbdEmuConfig *c, Zbd **ret) {
        _cleanup_free_ char *meta_path = NULL;
        _cleanup_(zbd_freep) Zbd *z = NULL;
        uint32_t max_write;
        bool created = false, all_empty = true;
        EmuZbd *e;
        int r;

        if (!path || !c || !ret)
                return -EINVAL;
        max_write = c->max_write ? c->max_write : EMU_MAX_WRITE_DEFAULT;
        if (max_write % EMU_BLOCK || (c->max_open && c->max_active && c->max_open > c->max_active))
                return -EINVAL;
        if (asprintf(&meta_path, "%s.zones", path) < 0)
                return -ENOMEM;

        z = calloc(1, sizeof *z);
        if (!z)
                return -ENOMEM;
        z->fd = -EBADF;
        e = calloc(1, sizeof *e);
        if (!e)
                return -ENOMEM;
        e->meta_fd = e->rfd = -EBADF;
        pthread_mutex_init(&e->lock, NULL);
        z->ops = &emu_ops;
        z->write_back = true;
        z->backend = e;
        z->path = strdup(path);
        if (!z->path)
                return -ENOMEM;

        e->meta_fd = open(meta_path, O_RDWR | O_CLOEXEC | O_NOCTTY);
        if (e->meta_fd < 0 && errno == ENOENT) {
                r = meta_create_new(path, meta_path, c);
                if (r < 0)
                        return r;
                created = r > 0;
                e->meta_fd = open(meta_path, O_RDWR | O_CLOEXEC | O_NOCTTY);
        }
        if (e->meta_fd < 0)
                return log_error_errno(errno, "zbd-emu: open %s: %m", meta_path);
        if (flock(e->meta_fd, LOCK_EX | LOCK_NB) < 0) {
                r = errno == EWOULDBLOCK ? -EBUSY : -errno;
                return log_error_errno(r, "zbd-emu: %s is in use by another process", path);
        }
        r = emu_meta_load(e, c, meta_path);
        if (r < 0)
                return r;
        for (uint32_t i = e->nr_conv; i < e->nr_zones; i++)
                if (e->zones[i].cond != ZONE_COND_EMPTY)
                        all_empty = false;
        r = data_open(z, e, all_empty);
        if (r < 0)
                return r;
        r = repair(e, path);
        if (r < 0)
                return r;

        e->max_open = c->max_open;
        e->max_active = c->max_active;
        z->limits = (ZbdLimits) {
                .nr_zones = e->nr_zones,
                .zone_size = e->zone_size,
                .max_open = c->max_open,
                .max_active = c->max_active,
                .zone_append_max = 0, /* no zone append: regular writes at the wp */
                .max_write = max_write,
                .block_size = EMU_BLOCK,
        };
        log_debug("zbd-emu: %s: %s, %" PRIu32 " zones of %" PRIu64 " (capacity %" PRIu64 ", %" PRIu32
                  " conventional), max open %" PRIu32 " active %" PRIu32 ", %" PRIu32 " active now",
                  path, created ? "created" : "opened", e->nr_zones, e->zone_size, e->capacity, e->nr_conv,
                  e->max_open, e->max_active, e->n_active);
        *ret = TAKE_PTR(z);
        return 0;
}

int zbd_emu_open(const char *path, uint64_t zone_size, uint64_t zone_capacity, uint32_t nr_zones,
                 uint32_t max_open, uint32_t max_active, Zbd **ret) {
        ZbdEmuConfig c = {
                .zone_size = zone_size,
                .zone_capacity = zone_capacity,
                .nr_zones = nr_zones,
                .max_open = max_open,
                .max_active = max_active,
        };

        return zbd_emu_open_config(path, &c, ret);
}
