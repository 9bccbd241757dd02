/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleanup.h"

/* Zoned block device backends behind one ops table, in the manner of fio's
 * zbd: the kernel's zoned block ioctls, NVMe ZNS passthrough, and zones
 * emulated over a regular file. All offsets and sizes are in bytes.
 *
 * Control operations (report, reset, open, close, finish) block and run on
 * a worker thread, never on the event loop. Data goes through the io_uring
 * pool: prep_append() fills a UringReq the caller submits. */

typedef enum ZoneType {
        ZONE_TYPE_CONVENTIONAL = 1,
        ZONE_TYPE_SEQWRITE_REQ = 2,
        ZONE_TYPE_SEQWRITE_PREF = 3,
} ZoneType;

/* Values as in linux/blkzoned.h. */
typedef enum ZoneCond {
        ZONE_COND_NOT_WP = 0x0,
        ZONE_COND_EMPTY = 0x1,
        ZONE_COND_IMP_OPEN = 0x2,
        ZONE_COND_EXP_OPEN = 0x3,
        ZONE_COND_CLOSED = 0x4,
        ZONE_COND_READONLY = 0xD,
        ZONE_COND_FULL = 0xE,
        ZONE_COND_OFFLINE = 0xF,
} ZoneCond;

typedef struct Zone {
        uint64_t start;    /* bytes */
        uint64_t len;      /* zone size */
        uint64_t capacity; /* writable bytes, <= len */
        uint64_t wp;       /* write pointer (absolute bytes); start + capacity when full */
        ZoneType type;
        ZoneCond cond;
} Zone;

#define zone_is_empty(z) ((z)->cond == ZONE_COND_EMPTY)
#define zone_is_full(z) ((z)->cond == ZONE_COND_FULL)
#define zone_is_open(z) ((z)->cond == ZONE_COND_IMP_OPEN || (z)->cond == ZONE_COND_EXP_OPEN)
/* Open or closed: holds one of the device's active resources. */
#define zone_is_active(z) (zone_is_open(z) || (z)->cond == ZONE_COND_CLOSED)
#define zone_is_seq(z) ((z)->type != ZONE_TYPE_CONVENTIONAL)
#define zone_is_usable(z) ((z)->cond != ZONE_COND_OFFLINE && (z)->cond != ZONE_COND_READONLY)
static inline uint64_t zone_remaining(const Zone *z) {
        uint64_t end = z->start + z->capacity;
        return z->wp >= end ? 0 : end - z->wp;
}
static inline uint64_t zone_written(const Zone *z) {
        return z->wp > z->start ? z->wp - z->start : 0;
}

typedef struct ZbdLimits {
        uint64_t nr_zones;
        uint64_t zone_size;
        uint32_t max_open;   /* 0: no limit */
        uint32_t max_active; /* 0: no limit */
        uint32_t zone_append_max; /* bytes per append command; 0: no zone append */
        uint32_t max_write;  /* bytes per regular write (max_sectors_kb) */
        uint32_t block_size; /* logical block size: writes are multiples of it */
} ZbdLimits;

typedef struct Zbd Zbd;
struct UringReq;
struct UringStream;

typedef struct ZbdOps {
        const char *name; /* "kernel", "nvme", "emulated" */
        /* Fills *zones (at most *n) from the zone containing offset on;
         * *n becomes the number filled (0 past the end). */
        int (*report)(Zbd *z, uint64_t offset, Zone *zones, size_t *n);
        int (*reset)(Zbd *z, uint64_t zone_start);
        int (*open_zone)(Zbd *z, uint64_t zone_start);
        int (*close_zone)(Zbd *z, uint64_t zone_start);
        int (*finish)(Zbd *z, uint64_t zone_start);
        /* Makes every write and zone management command completed before
         * it durable, out of the device's volatile write cache: kernel and
         * nvme an fdatasync of the block device (the kernel sends the
         * device a flush, an NVMe Flush, and skips it where
         * queue/write_cache says "write through"), the emulation an
         * fdatasync of its files. Blocking, worker threads only; called
         * through zbd_flush(). */
        int (*flush)(Zbd *z);
        /* Prepares one write of len bytes (<= the backend's chunk limit,
         * a multiple of block_size) into the zone at zone_start, at the
         * write pointer wp the caller tracks (kernel, emulated: a regular
         * write at wp, one in flight per zone; nvme: a zone append, several
         * in flight, the device picks the offset). */
        int (*prep_append)(Zbd *z, uint64_t zone_start, uint64_t wp, const void *buf, uint32_t len,
                           struct UringReq *req);
        /* Optional (zone-append backends): one object of len bytes into
         * the zone as a stream of appends of part_len bytes each (see
         * UringStream); sets s->req (fd, op, flags, offset = zone_start,
         * len, buf, nvme), part_len and lba_shift; depth, cpu, done,
         * userdata and parts are the caller's. Each part's outcome goes
         * through append_result() as a request with offset, len, res,
         * result64 and nvme_status set; offset is the zone start, or for
         * a write stream (URING_OP_WRITE_STREAM: the emulated backend,
         * writing at the write pointer) the part's own (its result64). */
        int (*prep_stream)(Zbd *z, uint64_t zone_start, const void *buf, uint32_t len, uint32_t part_len,
                           struct UringStream *s);
        /* After the request completed: the offset the data landed at. */
        int (*append_result)(Zbd *z, const struct UringReq *req, uint64_t *ret_offset);
        /* Blocking read for verification. */
        int (*read)(Zbd *z, uint64_t offset, void *buf, size_t len);
        /* The descriptor regular reads of the data go to (offset = the
         * byte offset): the block device (O_DIRECT), the emulation file.
         * For zbd_prep_read(). */
        int (*read_fd)(Zbd *z);
        void (*free)(Zbd *z);
} ZbdOps;

struct Zbd {
        const ZbdOps *ops;
        ZbdLimits limits;
        char *path;       /* /dev/nvme0n1, the emulation file */
        int fd;           /* O_RDWR | O_DIRECT while writing; see zbd_*_open() */
        /* The device may keep completed writes in a volatile cache:
         * queue/write_cache says "write back" (or cannot be read); the
         * emulation: always (the file's page cache, the host disk's). A
         * completion is then no promise of durability until a flush. */
        bool write_back;
        void *backend;    /* backend private */
};

/* Writes of one append: the backend's largest command. */
static inline uint32_t zbd_chunk_max(const Zbd *z) {
        if (z->limits.zone_append_max && z->ops && z->ops->name[0] == 'n')
                return z->limits.zone_append_max;
        return z->limits.max_write;
}

int zbd_kernel_open(const char *devnode, const char *blockdir, Zbd **ret);
int zbd_emu_open(const char *path, uint64_t zone_size, uint64_t zone_capacity, uint32_t nr_zones,
                 uint32_t max_open, uint32_t max_active, Zbd **ret);
int zbd_nvme_open(const char *devnode, const char *blockdir, Zbd **ret);
void zbd_free(Zbd *z);
DEFINE_TRIVIAL_CLEANUP_FUNC(Zbd *, zbd_free)

/* --- Added by the zbd backends (zbd.c, zbd-emu.c) ------------------------
 * Generic report helpers over ops->report, and the emulation's full
 * configuration: zbd_emu_open() has no way to ask for conventional zones or
 * a write size, which the emulation offers.
 * Backends normalize Zone.wp: start + capacity for FULL, READONLY and
 * OFFLINE zones (the NVMe driver reports start + len for full zones),
 * start for conventional zones. prep_append() sets fd, op, flags (0),
 * offset, len and buf of the request; cpu, done, userdata are the caller's. */

/* The request of a regular write of len bytes at offset (what prep_append()
 * sets), for the backends that write at the write pointer. */
void zbd_prep_write(Zbd *z, uint64_t offset, const void *buf, uint32_t len, struct UringReq *req);
/* The request of a regular read of len bytes at offset into buf, for the
 * io_uring pool (fd, op, flags, offset, len, buf; the rest is the
 * caller's). buf 4096-aligned, offset and len multiples of the block size
 * (the block devices are opened O_DIRECT), inside the device: else -EINVAL. */
int zbd_prep_read(Zbd *z, uint64_t offset, void *buf, uint32_t len, struct UringReq *req);
/* Reads [offset, offset + len) of z in chunks of bufsize bytes (a multiple
 * of 4096; the last chunk may be shorter) and hands each to consume, in
 * order, while a helper thread reads the next one: the reads overlap the
 * consumer's work (hashing). Blocking, for worker threads; the helper runs
 * at the caller's I/O priority. Returns 0, the first read error, or
 * consume's first negative return (nothing is consumed after it). */
typedef int (*zbd_consume_t)(const uint8_t *buf, size_t n, void *userdata);
int zbd_read_each(Zbd *z, uint64_t offset, uint64_t len, size_t bufsize, zbd_consume_t consume, void *userdata);

/* ops->flush where z->write_back (else 0: completion is durability).
 * Blocking, for worker threads. A failure is final for what it was to
 * cover: the device may have dropped those writes from its cache, so a
 * later flush that succeeds says nothing about them (the fsync lesson).
 * Fault injection for tests without a disk that can fail:
 * test_fail_flush() (test-hooks.h). */
int zbd_flush(Zbd *z);

/* The zone containing offset; -ENXIO past the end. */
int zbd_report_zone(Zbd *z, uint64_t offset, Zone *ret);
/* All zones, as a malloc'd array of limits.nr_zones entries (fewer if the
 * device reports fewer). */
int zbd_report_all(Zbd *z, Zone **ret, size_t *ret_n);

typedef struct ZbdEmuConfig {
        uint64_t zone_size;     /* bytes, multiple of 4096; 0 on reopen: as stored */
        uint64_t zone_capacity; /* <= zone_size, multiple of 4096; 0 on reopen: as stored */
        uint32_t nr_zones;      /* 0 on reopen: as stored */
        uint32_t nr_conv;       /* the first nr_conv zones are conventional; 0 on reopen: as stored */
        uint32_t max_open;      /* 0: no limit; always taken from here, never from the file */
        uint32_t max_active;    /* 0: no limit; likewise */
        uint32_t max_write;     /* bytes per write (limits.max_write); 0: 512 KiB */
} ZbdEmuConfig;
int zbd_emu_open_config(const char *path, const ZbdEmuConfig *c, Zbd **ret);
