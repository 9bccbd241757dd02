/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The emulated zoned device's state file, PATH.zones (see zbd-emu.c for the
 * semantics and the crash-safety argument):
 *
 * PATH holds the data (sparse: nr_zones × zone_size bytes, holes
 * read as zeros). PATH.zones holds the zone state:
 *
 *   [0, 4096)     header: magic, version, geometry, crc32 (EmuHeader). Written
 *                 once, when the emulation is created, to PATH.zones.XXXXXX,
 *                 fsync'd and renamed into place (RENAME_NOREPLACE) with the
 *                 directory fsync'd: a crash leaves either no state file or a
 *                 complete one.
 *   4096 + 64·i   zone i: two 32-byte record slots (EmuRecord: sequence
 *                 number, write pointer, condition, zone index, crc32).
 *                 Update n of a zone goes to slot n & 1 with one pwrite; on
 *                 open the valid record with the highest sequence wins. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "zbd-emu-internal.h"

static uint32_t crc32_buf(const void *p, size_t n) {
        const uint8_t *b = p;
        uint32_t c = 0xFFFFFFFFU;

        for (size_t i = 0; i < n; i++) {
                c ^= b[i];
                for (int k = 0; k < 8; k++)
                        c = (c >> 1) ^ (0xEDB88320U & (0U - (c & 1U)));
        }
        return ~c;
}

static EmuRecord record_make(uint32_t zone, uint64_t seq, uint64_t wp, ZoneCond cond) {
        EmuRecord rec = { .seq = seq, .wp = wp, .zone = zone, .cond = (uint32_t) cond };

        rec.crc = crc32_buf(&rec, offsetof(EmuRecord, crc));
        return rec;
}

static off_t record_offset(uint32_t zone, uint64_t seq) {
        return (off_t) EMU_HDR_SIZE + (off_t) zone * EMU_ZONE_STRIDE + (off_t) (seq & 1) * EMU_REC_SIZE;
}

int emu_record_write(EmuZbd *e, uint32_t i) {
        EmuZone *zn = &e->zones[i];
        EmuRecord rec = record_make(i, zn->seq + 1, zn->wp, zn->cond);
        ssize_t n;

        n = pwrite(e->meta_fd, &rec, sizeof rec, record_offset(i, rec.seq));
        if (n < 0)
                return log_error_errno(errno, "zbd-emu: writing the record of zone %" PRIu32 ": %m", i);
        if (n != (ssize_t) sizeof rec)
                return log_error_errno(EIO, "zbd-emu: short write of the record of zone %" PRIu32, i);
        zn->seq = rec.seq;
        return 0;
}

int emu_fsync_parent(const char *path) {
        _cleanup_free_ char *dir = strdup(path);
        _cleanup_close_ int fd = -EBADF;
        char *slash;

        if (!dir)
                return -ENOMEM;
        slash = strrchr(dir, '/');
        if (!slash)
                strcpy(dir, ".");
        else if (slash == dir)
                dir[1] = 0;
        else
                *slash = 0;
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || fsync(fd) < 0)
                return -errno;
        return 0;
}

static int write_all(int fd, const void *buf, size_t len) {
        const uint8_t *p = buf;

        while (len > 0) {
                ssize_t n = write(fd, p, len);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += n;
                len -= (size_t) n;
        }
        return 0;
}

int emu_meta_create(const char *meta_path, const ZbdEmuConfig *c, uint32_t block_size) {
        size_t size = EMU_HDR_SIZE + (size_t) c->nr_zones * EMU_ZONE_STRIDE;
        _cleanup_free_ uint8_t *buf = calloc(1, size);
        _cleanup_free_ char *tmp = NULL;
        _cleanup_close_ int fd = -EBADF;
        EmuHeader h = {
                .version = EMU_VERSION,
                .header_size = EMU_HDR_SIZE,
                .zone_size = c->zone_size,
                .zone_capacity = c->zone_capacity,
                .nr_zones = c->nr_zones,
                .nr_conv = c->nr_conv,
                .block_size = block_size,
                .max_open = c->max_open,
                .max_active = c->max_active,
        };
        int r;

        if (!buf || asprintf(&tmp, "%s.XXXXXX", meta_path) < 0)
                return -ENOMEM;
        memcpy(h.magic, EMU_MAGIC, sizeof h.magic);
        h.crc = crc32_buf(&h, offsetof(EmuHeader, crc));
        memcpy(buf, &h, sizeof h);
        for (uint32_t i = 0; i < c->nr_zones; i++) {
                EmuRecord rec = record_make(i, 1, 0, i < c->nr_conv ? ZONE_COND_NOT_WP : ZONE_COND_EMPTY);

                memcpy(buf + record_offset(i, 1), &rec, sizeof rec);
        }
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return log_error_errno(errno, "zbd-emu: creating %s: %m", tmp);
        r = write_all(fd, buf, size);
        if (r >= 0 && fsync(fd) < 0)
                r = -errno;
        if (r >= 0 && renameat2(AT_FDCWD, tmp, AT_FDCWD, meta_path, RENAME_NOREPLACE) < 0) {
                r = -errno;
                if (r == -EINVAL) { /* file system without RENAME_NOREPLACE */
                        r = link(tmp, meta_path) < 0 ? -errno : 0;
                        (void) unlink(tmp);
                }
        }
        if (r < 0) {
                (void) unlink(tmp);
                return r;
        }
        return emu_fsync_parent(meta_path);
}

/* Reads and checks the state file's header: magic, CRC, version, a sane
 * geometry that matches what was asked for, and room for every zone's
 * records. */
static int meta_header_load(EmuZbd *e, const ZbdEmuConfig *c, const char *meta_path, EmuHeader *ret) {
        EmuHeader h;
        struct stat st;
        ssize_t n;

        n = pread(e->meta_fd, &h, sizeof h, 0);
        if (n < 0)
                return -errno;
        if (n != (ssize_t) sizeof h || memcmp(h.magic, EMU_MAGIC, sizeof h.magic) != 0 ||
            h.crc != crc32_buf(&h, offsetof(EmuHeader, crc)))
                return log_error_errno(EBADMSG, "zbd-emu: %s: not a zone state file", meta_path);
        if (h.version != EMU_VERSION || h.header_size != EMU_HDR_SIZE || h.block_size != EMU_BLOCK)
                return log_error_errno(EPROTONOSUPPORT, "zbd-emu: %s: version %" PRIu32 " not supported",
                                       meta_path, h.version);
        if (h.zone_size == 0 || h.zone_size % EMU_BLOCK || h.zone_capacity == 0 ||
            h.zone_capacity > h.zone_size || h.zone_capacity % EMU_BLOCK || h.nr_zones == 0 ||
            h.nr_conv > h.nr_zones || h.zone_size > UINT64_MAX / h.nr_zones)
                return log_error_errno(EBADMSG, "zbd-emu: %s: bad geometry", meta_path);
        if ((c->zone_size && c->zone_size != h.zone_size) ||
            (c->zone_capacity && c->zone_capacity != h.zone_capacity) ||
            (c->nr_zones && c->nr_zones != h.nr_zones) || (c->nr_conv && c->nr_conv != h.nr_conv))
                return log_error_errno(EINVAL,
                                       "zbd-emu: %s holds %" PRIu32 " zones of %" PRIu64 " (capacity %" PRIu64
                                       ", %" PRIu32 " conventional), not what was asked for",
                                       meta_path, h.nr_zones, h.zone_size, h.zone_capacity, h.nr_conv);
        /* The records of every zone must be there: a truncated (or lying)
         * state file is refused before its geometry sizes an allocation. */
        if (fstat(e->meta_fd, &st) < 0)
                return -errno;
        if ((uint64_t) st.st_size < EMU_HDR_SIZE + (uint64_t) h.nr_zones * EMU_ZONE_STRIDE)
                return log_error_errno(EBADMSG,
                                       "zbd-emu: %s is truncated: %" PRIu64 " bytes, where %" PRIu32
                                       " zones need %" PRIu64 "; restore it, or remove it and its data file "
                                       "to start over empty",
                                       meta_path, (uint64_t) st.st_size, h.nr_zones,
                                       EMU_HDR_SIZE + (uint64_t) h.nr_zones * EMU_ZONE_STRIDE);
        *ret = h;
        return 0;
}

/* A zone's state from the newer valid one of its two records (zone i's
 * stride in recs). -EBADMSG: neither is valid. */
static int zone_load(const uint8_t *recs, uint32_t i, const EmuHeader *h, EmuZone *zn) {
        EmuRecord best = {};

        for (unsigned s = 0; s < 2; s++) {
                EmuRecord rec;

                memcpy(&rec, recs + (size_t) i * EMU_ZONE_STRIDE + s * EMU_REC_SIZE, sizeof rec);
                if (rec.seq == 0 || (rec.seq & 1) != s || rec.zone != i ||
                    rec.crc != crc32_buf(&rec, offsetof(EmuRecord, crc)) || rec.wp > h->zone_capacity ||
                    rec.wp % EMU_BLOCK)
                        continue;
                if (rec.seq > best.seq)
                        best = rec;
        }
        if (best.seq == 0)
                return -EBADMSG;
        zn->seq = best.seq;
        zn->wp = best.wp;
        if (i < h->nr_conv) {
                zn->cond = ZONE_COND_NOT_WP;
                zn->wp = 0;
                return 0;
        }
        switch (best.cond) {
        case ZONE_COND_FULL:
                zn->cond = ZONE_COND_FULL;
                zn->wp = h->zone_capacity;
                break;
        case ZONE_COND_READONLY:
        case ZONE_COND_OFFLINE:
                zn->cond = (ZoneCond) best.cond;
                break;
        default:
                /* Open zones are closed by a power cycle; the write pointer
                 * alone tells EMPTY, CLOSED and FULL apart. */
                zn->cond = zn->wp == 0 ? ZONE_COND_EMPTY : zn->wp == h->zone_capacity ? ZONE_COND_FULL : ZONE_COND_CLOSED;
        }
        return 0;
}

int emu_meta_load(EmuZbd *e, const ZbdEmuConfig *c, const char *meta_path) {
        _cleanup_free_ uint8_t *buf = NULL;
        EmuHeader h = {};
        size_t size;
        ssize_t n;
        int r;

        r = meta_header_load(e, c, meta_path, &h);
        if (r < 0)
                return r;
        e->zone_size = h.zone_size;
        e->capacity = h.zone_capacity;
        e->nr_zones = h.nr_zones;
        e->nr_conv = h.nr_conv;

        size = (size_t) h.nr_zones * EMU_ZONE_STRIDE;
        buf = malloc(size);
        e->zones = calloc(h.nr_zones, sizeof *e->zones);
        if (!buf || !e->zones)
                return -ENOMEM;
        n = pread(e->meta_fd, buf, size, EMU_HDR_SIZE);
        if (n < 0)
                return -errno;
        if ((size_t) n < size)
                memset(buf + n, 0, size - (size_t) n); /* missing records: invalid */

        for (uint32_t i = 0; i < h.nr_zones; i++) {
                if (zone_load(buf, i, &h, &e->zones[i]) < 0)
                        return log_error_errno(EBADMSG, "zbd-emu: %s: zone %" PRIu32 " has no valid record",
                                               meta_path, i);
                if (e->zones[i].cond == ZONE_COND_CLOSED)
                        e->n_active++;
        }
        return 0;
}
