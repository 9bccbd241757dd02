/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the zoned backends share: freeing and report helpers over the ops
 * table. The backends themselves are zbd-kernel.c, zbd-emu.c (zbd-nvme.c). */

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "test-hooks.h"
#include "uring-pool.h"
#include "util.h"
#include "zbd.h"

void zbd_free(Zbd *z) {
        if (!z)
                return;
        /* ops->free releases the backend's private state only; the fd and
         * the path belong to the Zbd. */
        if (z->ops && z->ops->free)
                z->ops->free(z);
        if (z->fd >= 0)
                close(z->fd);
        free(z->path);
        free(z);
}

void zbd_prep_write(Zbd *z, uint64_t offset, const void *buf, uint32_t len, UringReq *req) {
        req->fd = z->fd;
        req->op = URING_OP_WRITE;
        req->flags = 0;
        req->offset = offset;
        req->len = len;
        req->buf = (void *) buf; /* only read from: a write */
}

int zbd_prep_read(Zbd *z, uint64_t offset, void *buf, uint32_t len, UringReq *req) {
        uint32_t bs = z->limits.block_size ? z->limits.block_size : 512;
        uint64_t end = z->limits.nr_zones * z->limits.zone_size;

        if (!z->ops->read_fd || !buf || !req || len == 0 || (uintptr_t) buf % 4096 || offset % bs || len % bs ||
            offset > end || len > end - offset)
                return -EINVAL;
        req->fd = z->ops->read_fd(z);
        req->op = URING_OP_READ;
        req->flags = 0;
        req->offset = offset;
        req->len = len;
        req->buf = buf;
        return 0;
}

int zbd_report_zone(Zbd *z, uint64_t offset, Zone *ret) {
        size_t n = 1;
        int r;

        if (!z || !ret)
                return -EINVAL;
        r = z->ops->report(z, offset, ret, &n);
        if (r < 0)
                return r;
        return n == 1 ? 0 : -ENXIO;
}

int zbd_report_all(Zbd *z, Zone **ret, size_t *ret_n) {
        Zone *zones;
        size_t have = 0, want;
        uint64_t offset = 0;
        int r;

        if (!z || !ret || !ret_n || z->limits.nr_zones == 0 || z->limits.zone_size == 0)
                return -EINVAL;
        want = z->limits.nr_zones;
        zones = calloc(want, sizeof *zones);
        if (!zones)
                return -ENOMEM;
        while (have < want) {
                size_t n = want - have;

                r = z->ops->report(z, offset, zones + have, &n);
                if (r < 0) {
                        free(zones);
                        return r;
                }
                if (n == 0)
                        break;
                have += n;
                offset = zones[have - 1].start + zones[have - 1].len;
        }
        *ret = zones;
        *ret_n = have;
        return 0;
}

int zbd_flush(Zbd *z) {
        int r;

        if (!z)
                return -EINVAL;
        if (!z->write_back)
                return 0;
        if (!z->ops->flush)
                return -EOPNOTSUPP;
        r = test_fail_flush(z->path) ? -EIO : z->ops->flush(z);
        if (r < 0)
                log_error_errno(r, "zbd: %s: flushing the device's write cache failed: %m", z->path);
        return r;
}
