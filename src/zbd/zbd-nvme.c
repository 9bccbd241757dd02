/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* NVMe ZNS through passthrough: data as NVMe Zone Append commands (opcode
 * 0x7d) sent with IORING_OP_URING_CMD / NVME_URING_CMD_IO on the
 * namespace's generic char device /dev/ngXnY (the io_uring pool's
 * URING_OP_NVME_IO), the device choosing where each lands: several appends
 * may be in flight to one zone, and the write pointer the caller tracks is
 * not used (DESIGN.md, "Kernel facts").
 *
 * Everything else is the kernel's zoned block interface on /dev/nvmeXnY: a
 * kernel backend (zbd-kernel.c) opened on the block device does report,
 * reset, open, close, finish and the verify reads, and gives the limits
 * (sysfs); this backend adds what only the NVMe side knows, through libnvme
 * on the char device: the namespace id, the LBA format (block size; formats
 * with metadata are refused), the ZNS zone size as a cross-check, and the
 * Zone Append Size Limit (ZASL) for zone_append_max.
 *
 * zone_append_max = the smallest non-zero of: ZASL (units of the 4 KiB
 * controller page, as the kernel reads it; 0 means MDTS), the block
 * device's zone_append_max_bytes, max_hw_sectors_kb (passthrough commands
 * are bounded by it: QEMU's 1 MiB append is EINVAL on 6.1), and
 * max_segments pages, rounded down to the block size. The last one because
 * a passthrough command is mapped from user memory as it is, never split:
 * each physically discontiguous page is one DMA segment, and above
 * max_segments the kernel says EINVAL. On 6.1's nvme-pci that is 127, so
 * 512 KiB from a page-aligned buffer works only when some of its pages
 * happen to be physically adjacent (a fresh VM: usually; a long-running
 * daemon: not reliably); 508 KiB always works. Seen in the vm suite with a
 * buffer of one physical page mapped 128 times (zbd-tool
 * rawappend-scattered). Buffers must be page-aligned for the same reason
 * (and the NVMe virt boundary). max_write stays max_sectors_kb.
 *
 * libnvme answers 0, -1 with errno, or an NVMe status > 0: converted to
 * -errno where called (a status to nvme_status_to_errno(), or -EOPNOTSUPP
 * where it means "not ZNS"). zbd_nvme_open() returns -EOPNOTSUPP for
 * anything that cannot do zone append passthrough (not an nvmeXnY node, not
 * zoned, not ZNS, no generic char device, metadata formats, no append
 * limit): the allocator then uses the kernel backend. On 6.1 identify and
 * passthrough I/O need CAP_SYS_ADMIN (-EACCES/-EPERM otherwise).
 *
 * prep_append() sets fd (the char device), op (URING_OP_NVME_IO), flags 0,
 * offset (the zone start, for append_result's check; the pool does not use
 * it), len, buf and nvme (opcode, nsid, ZSLBA in cdw10/11, NLB - 1 in
 * cdw12). Errors in append_result(): what the pool reports, and for an NVMe
 * status what the kernel's block layer makes of the same status, so the
 * allocator sees the kernel backend's errors: Too Many Active Zones
 * -EOVERFLOW, Too Many Open Zones -ETOOMANYREFS, everything else (Zone Is
 * Full, Zone Boundary Error, read-only/offline zones) -EIO. */

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fs.h>
#include <nvme/ioctl.h>
#include <nvme/types.h>
#include <nvme/util.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/param.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "sysfs.h"
#include "test-hooks.h"
#include "uring-pool.h"
#include "util.h"
#include "zbd.h"

#define NVME_CTRL_PAGE_SIZE 4096U /* the unit of ZASL as the kernel uses it */

typedef struct NvmeZbd {
        Zbd *kz;            /* kernel backend on /dev/nvmeXnY */
        uint32_t nsid;
        unsigned lba_shift;
        uint64_t dev_size;  /* bytes */
        uint32_t page_size; /* buffers are aligned to it */
        /* Fault injection (test_misplace_append(), test-hooks.h): the Nth
         * append result reports its data one append further on. */
        uint64_t misplace_at, n_results;
} NvmeZbd;

/* libnvme's 0 / -1 + errno / NVMe status > 0 → 0 / -errno. */
static int ns_errno(int r, const char *what, const char *path) {
        int e;

        if (r == 0)
                return 0;
        if (r < 0) {
                e = errno > 0 ? errno : EIO;
                return log_debug_errno(e, "zbd: %s: %s: %m", path, what);
        }
        e = nvme_status_to_errno(r, false);
        if (e == 0)
                e = EIO;
        log_debug("zbd: %s: %s: NVMe status 0x%x (%s)", path, what, (unsigned) r, nvme_status_to_string(r, false));
        return -e;
}

static int ns_report(Zbd *z, uint64_t offset, Zone *zones, size_t *n) {
        NvmeZbd *v = z->backend;

        return v->kz->ops->report(v->kz, offset, zones, n);
}

static int ns_reset(Zbd *z, uint64_t zone_start) {
        NvmeZbd *v = z->backend;

        return v->kz->ops->reset(v->kz, zone_start);
}

static int ns_open_zone(Zbd *z, uint64_t zone_start) {
        NvmeZbd *v = z->backend;

        return v->kz->ops->open_zone(v->kz, zone_start);
}

static int ns_close_zone(Zbd *z, uint64_t zone_start) {
        NvmeZbd *v = z->backend;

        return v->kz->ops->close_zone(v->kz, zone_start);
}

static int ns_finish(Zbd *z, uint64_t zone_start) {
        NvmeZbd *v = z->backend;

        return v->kz->ops->finish(v->kz, zone_start);
}

/* The flush goes to the block device, as the kernel backend's: the
 * appends are passthrough commands on /dev/ngXnY, but they reach the same
 * namespace's cache, and fdatasync() of /dev/nvmeXnY sends that namespace
 * an NVMe Flush (nsid: the block device's) only where queue/write_cache
 * says "write back". A Flush through the passthrough ring would need its
 * own completion path and be sent even to a device without a volatile
 * cache; the kernel's is blocking, which the worker thread allows. */
static int ns_flush(Zbd *z) {
        NvmeZbd *v = z->backend;

        return v->kz->ops->flush(v->kz);
}

static int ns_read(Zbd *z, uint64_t offset, void *buf, size_t len) {
        NvmeZbd *v = z->backend;

        return v->kz->ops->read(v->kz, offset, buf, len);
}

static int ns_read_fd(Zbd *z) {
        NvmeZbd *v = z->backend;

        return v->kz->ops->read_fd(v->kz);
}

static int ns_prep_append(Zbd *z, uint64_t zone_start, uint64_t wp, const void *buf, uint32_t len,
                            UringReq *req) {
        NvmeZbd *v = z->backend;
        const ZbdLimits *l = &z->limits;
        uint64_t zslba;

        /* wp is not used: the device picks the offset. Whether the zone has
         * room is the device's to say (Zone Boundary Error, Zone Is Full:
         * -EIO in the completion). */
        if (!buf || !req || len == 0 || len % l->block_size || len > l->zone_append_max ||
            (uintptr_t) buf % v->page_size || zone_start % l->zone_size || zone_start >= v->dev_size)
                return -EINVAL;
        zslba = zone_start >> v->lba_shift;
        req->fd = z->fd;
        req->op = URING_OP_NVME_IO;
        req->flags = 0;
        req->offset = zone_start;
        req->len = len;
        req->buf = (void *) buf; /* only read from: a host-to-device transfer */
        req->nvme = (UringNvmeCmd) {
                .opcode = nvme_zns_cmd_append,
                .nsid = v->nsid,
                .cdw10 = (uint32_t) zslba,
                .cdw11 = (uint32_t) (zslba >> 32),
                .cdw12 = (len >> v->lba_shift) - 1, /* NLB, 0-based; no FUA, no PI */
        };
        return 0;
}

static int ns_prep_stream(Zbd *z, uint64_t zone_start, const void *buf, uint32_t len, uint32_t part_len,
                          UringStream *s) {
        NvmeZbd *v = z->backend;
        int r;

        if (!s || part_len == 0 || part_len % z->limits.block_size || part_len % v->page_size)
                return -EINVAL;
        /* Checked as one append of the first part; the rest shares it all. */
        r = ns_prep_append(z, zone_start, zone_start, buf, MIN(part_len, len), &s->req);
        if (r < 0)
                return r;
        if (len % z->limits.block_size)
                return -EINVAL;
        s->req.op = URING_OP_NVME_STREAM;
        s->req.len = len;
        s->part_len = part_len;
        s->lba_shift = v->lba_shift;
        return 0;
}

static int ns_append_result(Zbd *z, const UringReq *req, uint64_t *ret_offset) {
        NvmeZbd *v = z->backend;
        uint64_t off;

        if (req->res == -EIO && req->nvme_status) {
                unsigned sct = (req->nvme_status >> NVME_SCT_SHIFT) & NVME_SCT_MASK;
                unsigned sc = req->nvme_status & NVME_SC_MASK;

                log_debug("zbd: %s: zone append to %" PRIu64 ": NVMe status 0x%x (%s)", z->path, req->offset,
                          (unsigned) req->nvme_status, nvme_status_to_string(req->nvme_status, false));
                if (sct == NVME_SCT_CMD_SPECIFIC && sc == NVME_SC_ZNS_TOO_MANY_ACTIVE)
                        return -EOVERFLOW;
                if (sct == NVME_SCT_CMD_SPECIFIC && sc == NVME_SC_ZNS_TOO_MANY_OPENS)
                        return -ETOOMANYREFS;
                return -EIO;
        }
        if (req->res < 0)
                return req->res;
        if ((uint32_t) req->res != req->len || req->result64 > (UINT64_MAX >> v->lba_shift))
                return -EIO;
        off = req->result64 << v->lba_shift;
        /* Where the device says it put the data: inside the zone asked for. */
        if (off < req->offset || off - req->offset > z->limits.zone_size ||
            req->len > z->limits.zone_size - (off - req->offset)) {
                log_debug("zbd: %s: zone append to %" PRIu64 " landed at %" PRIu64 ", outside the zone", z->path,
                          req->offset, off);
                return -EIO;
        }
        if (v->misplace_at && ++v->n_results == v->misplace_at) {
                log_warning("zbd: %s: fault injection: append result %" PRIu64 " reported at %" PRIu64
                            " instead of %" PRIu64 ".", z->path, v->n_results, off + req->len, off);
                off += req->len;
        }
        if (ret_offset)
                *ret_offset = off;
        return 0;
}

static void ns_free(Zbd *z) {
        NvmeZbd *v = z->backend;

        if (v)
                zbd_free(v->kz);
        free(v);
        z->backend = NULL;
}

static const ZbdOps ns_ops = {
        .name = "nvme",
        .report = ns_report,
        .reset = ns_reset,
        .open_zone = ns_open_zone,
        .close_zone = ns_close_zone,
        .finish = ns_finish,
        .flush = ns_flush,
        .prep_append = ns_prep_append,
        .prep_stream = ns_prep_stream,
        .append_result = ns_append_result,
        .read = ns_read,
        .read_fd = ns_read_fd,
        .free = ns_free,
};

static int read_attr_u64(const char *dir, const char *attr, uint64_t *ret) {
        _cleanup_free_ char *p = path_join(dir, attr);
        long long v;
        int r;

        if (!p)
                return -ENOMEM;
        r = sysfs_read_int(p, &v);
        if (r < 0)
                return r;
        if (v < 0)
                return -ERANGE;
        *ret = (uint64_t) v;
        return 0;
}

/* /dev/ngXnY for /dev/nvmeXnY, checked against /sys/class/nvme-generic
 * (5.13+): the node is that char device. Returns the open fd. */
static int open_generic(const char *sysname, char **ret_path) {
        _cleanup_free_ char *ng = NULL, *node = NULL, *sysdev = NULL, *devstr = NULL;
        _cleanup_close_ int fd = -EBADF;
        unsigned ctrl, ns, maj, min;
        struct stat st;
        int n = 0, r;

        if (sscanf(sysname, "nvme%un%u%n", &ctrl, &ns, &n) != 2 || sysname[n] != '\0')
                return log_debug_errno(EOPNOTSUPP, "zbd: %s is not an NVMe namespace (nvmeXnY)", sysname);
        if (asprintf(&ng, "ng%un%u", ctrl, ns) < 0)
                return -ENOMEM;
        sysdev = path_join("/sys/class/nvme-generic", ng, "dev");
        node = path_join("/dev", ng);
        if (!sysdev || !node)
                return -ENOMEM;
        r = sysfs_read(sysdev, &devstr);
        if (r < 0)
                return log_debug_errno(r == -ENOENT ? -EOPNOTSUPP : r, "zbd: %s: no generic char device (%s): %m",
                                       sysname, sysdev);
        if (sscanf(devstr, "%u:%u", &maj, &min) != 2)
                return -EINVAL;
        fd = open(node, O_RDWR | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return log_debug_errno(errno, "zbd: open %s: %m", node);
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISCHR(st.st_mode) || st.st_rdev != makedev(maj, min))
                return log_debug_errno(ENODEV, "zbd: %s is not the char device %u:%u of %s", node, maj, min,
                                       sysname);
        *ret_path = TAKE_PTR(node);
        return TAKE_FD(fd);
}

/* The namespace's LBA format in use (fmt): data only (no metadata, which
 * appends would need a buffer for), the block device's block size. */
static int check_lba_format(int ngfd, uint32_t nsid, const char *ng_path, const Zbd *kz, struct nvme_id_ns *id,
                            uint8_t *ret_fmt) {
        uint8_t fmt;
        uint32_t bs;
        int r;

        r = ns_errno(nvme_identify_ns(ngfd, nsid, id), "identify namespace", ng_path);
        if (r < 0)
                return r;
        nvme_id_ns_flbas_to_lbaf_inuse(id->flbas, &fmt);
        if (fmt > id->nlbaf || fmt >= ELEMENTSOF(id->lbaf))
                return -EINVAL;
        if (id->lbaf[fmt].ds < 9 || id->lbaf[fmt].ds > 16)
                return log_debug_errno(EINVAL, "zbd: %s: LBA data size 2^%u", ng_path, id->lbaf[fmt].ds);
        if (le16toh(id->lbaf[fmt].ms) != 0)
                /* Appends would need a metadata buffer (or carry it inline). */
                return log_debug_errno(EOPNOTSUPP, "zbd: %s: LBA format %u has %u bytes of metadata", ng_path, fmt,
                                       le16toh(id->lbaf[fmt].ms));
        bs = UINT32_C(1) << id->lbaf[fmt].ds;
        if (bs != kz->limits.block_size)
                return log_debug_errno(EINVAL, "zbd: %s: LBA size %u, but the block device's is %u", ng_path, bs,
                                       kz->limits.block_size);
        *ret_fmt = fmt;
        return 0;
}

/* A ZNS namespace (not another zoned command set) whose zone size is the
 * block device's; fills zctrl (ZASL). */
static int check_zns(int ngfd, uint32_t nsid, const char *ng_path, const Zbd *kz, const struct nvme_id_ns *id,
                     uint8_t fmt, struct nvme_zns_id_ns *zid, struct nvme_zns_id_ctrl *zctrl) {
        uint64_t zsze;
        int r;

        r = nvme_zns_identify_ns(ngfd, nsid, zid);
        if (r > 0) {
                /* Invalid Field / Invalid Namespace: not a ZNS namespace (a
                 * zoned one of another command set, e.g. ZAC behind NVMe). */
                (void) ns_errno(r, "ZNS identify namespace", ng_path);
                return -EOPNOTSUPP;
        }
        r = ns_errno(r, "ZNS identify namespace", ng_path);
        if (r < 0)
                return r;
        zsze = le64toh(zid->lbafe[fmt].zsze);
        if (zsze == 0 || zsze > (UINT64_MAX >> id->lbaf[fmt].ds) || zsze << id->lbaf[fmt].ds != kz->limits.zone_size)
                return log_debug_errno(EINVAL, "zbd: %s: ZNS zone size %" PRIu64 " LBAs, the block device's %" PRIu64
                                       " bytes", ng_path, zsze, kz->limits.zone_size);
        r = nvme_zns_identify_ctrl(ngfd, zctrl);
        if (r > 0) {
                (void) ns_errno(r, "ZNS identify controller", ng_path);
                return -EOPNOTSUPP;
        }
        return ns_errno(r, "ZNS identify controller", ng_path);
}

/* The append limit: ZASL (0: MDTS, which max_hw_sectors_kb already is),
 * zone_append_max_bytes, max_hw_sectors_kb, max_segments pages; a
 * multiple of the block size, 0 if none is known. */
static uint32_t append_limit(const Zbd *kz, const char *dir, uint8_t zasl, uint32_t bs, long page,
                             uint64_t *ret_hw_kb, uint64_t *ret_segs) {
        uint64_t hw_kb = 0, segs = 0;
        uint32_t am = kz->limits.zone_append_max;

        if (zasl && zasl < 20) {
                uint64_t zasl_bytes = (uint64_t) NVME_CTRL_PAGE_SIZE << zasl;

                if (am == 0 || zasl_bytes < am)
                        am = (uint32_t) zasl_bytes; /* < 4 GiB: zasl < 20 */
        }
        if (read_attr_u64(dir, "queue/max_hw_sectors_kb", &hw_kb) >= 0 && hw_kb > 0 && hw_kb < UINT32_MAX / 1024 &&
            (am == 0 || hw_kb * 1024 < am))
                am = (uint32_t) (hw_kb * 1024);
        if (read_attr_u64(dir, "queue/max_segments", &segs) >= 0 && segs > 0 && segs < UINT32_MAX / (uint64_t) page &&
            (am == 0 || segs * (uint64_t) page < am))
                am = (uint32_t) (segs * (uint64_t) page);
        *ret_hw_kb = hw_kb;
        *ret_segs = segs;
        return am - am % bs;
}

/* The block device's sysfs directory: blockdir, or found from its dev_t. */
static int block_sysfs_dir(const Zbd *kz, const char *blockdir, char **ret) {
        struct stat st;
        char *dir;

        if (blockdir)
                dir = strdup(blockdir);
        else if (fstat(kz->fd, &st) < 0)
                return -errno;
        else if (asprintf(&dir, "/sys/dev/block/%u:%u", major(st.st_rdev), minor(st.st_rdev)) < 0)
                dir = NULL;
        if (!dir)
                return -ENOMEM;
        *ret = dir;
        return 0;
}

/* The character node and the block node must be the same namespace. */
static int same_namespace(int ngfd, const char *ng_path, int blkfd, const char *devnode, uint32_t *ret_nsid) {
        uint32_t nsid = 0, blk_nsid = 0;
        int r;

        r = ns_errno(nvme_get_nsid(ngfd, &nsid), "namespace id", ng_path);
        if (r < 0)
                return r;
        r = ns_errno(nvme_get_nsid(blkfd, &blk_nsid), "namespace id", devnode);
        if (r < 0)
                return r;
        if (nsid != blk_nsid)
                return log_debug_errno(ENODEV, "zbd: %s is nsid %u, %s nsid %u", devnode, blk_nsid, ng_path, nsid);
        *ret_nsid = nsid;
        return 0;
}

/* Identify Namespace (the LBA format in use) and the ZNS identify pages:
 * the LBA shift and the controller's zone append size limit. */
static int identify_zns(int ngfd, uint32_t nsid, const char *ng_path, const Zbd *kz, uint8_t *ret_lba_shift,
                        uint8_t *ret_zasl) {
        _cleanup_free_ struct nvme_id_ns *id = NULL;
        _cleanup_free_ struct nvme_zns_id_ns *zid = NULL;
        _cleanup_free_ struct nvme_zns_id_ctrl *zctrl = NULL;
        uint8_t fmt = 0;
        int r;

        id = calloc(1, sizeof *id);
        zid = calloc(1, sizeof *zid);
        zctrl = calloc(1, sizeof *zctrl);
        if (!id || !zid || !zctrl)
                return -ENOMEM;
        r = check_lba_format(ngfd, nsid, ng_path, kz, id, &fmt);
        if (r < 0)
                return r;
        r = check_zns(ngfd, nsid, ng_path, kz, id, fmt, zid, zctrl);
        if (r < 0)
                return r;
        *ret_lba_shift = id->lbaf[fmt].ds;
        *ret_zasl = zctrl->zasl;
        return 0;
}

int zbd_nvme_open(const char *devnode, const char *blockdir, Zbd **ret) {
        _cleanup_free_ char *real = NULL, *ng_path = NULL, *dir = NULL;
        _cleanup_close_ int ngfd = -EBADF;
        _cleanup_(zbd_freep) Zbd *kz = NULL;
        _cleanup_free_ Zbd *z = NULL;
        _cleanup_free_ NvmeZbd *v = NULL;
        const char *sysname;
        uint32_t nsid = 0, bs, am;
        uint64_t hw_kb, segs, size;
        long page = sysconf(_SC_PAGESIZE);
        uint8_t lba_shift = 0, zasl = 0;
        int r;

        if (!devnode || !ret)
                return -EINVAL;
        real = realpath(devnode, NULL);
        if (!real)
                return log_debug_errno(errno, "zbd: %s: %m", devnode);
        sysname = strrchr(real, '/') ? strrchr(real, '/') + 1 : real;

        r = open_generic(sysname, &ng_path);
        if (r < 0)
                return r;
        ngfd = r;

        r = zbd_kernel_open(devnode, blockdir, &kz);
        if (r == -EMEDIUMTYPE)
                return log_debug_errno(EOPNOTSUPP, "zbd: %s is not zoned", devnode);
        if (r < 0)
                return r;
        r = block_sysfs_dir(kz, blockdir, &dir);
        if (r < 0)
                return r;
        if (ioctl(kz->fd, BLKGETSIZE64, &size) < 0)
                return -errno;
        r = same_namespace(ngfd, ng_path, kz->fd, devnode, &nsid);
        if (r < 0)
                return r;
        r = identify_zns(ngfd, nsid, ng_path, kz, &lba_shift, &zasl);
        if (r < 0)
                return r;
        bs = UINT32_C(1) << lba_shift;

        if (page <= 0)
                page = 4096;
        am = append_limit(kz, dir, zasl, bs, page, &hw_kb, &segs);
        if (am == 0)
                return log_debug_errno(EOPNOTSUPP, "zbd: %s: no zone append limit", ng_path);

        z = calloc(1, sizeof *z);
        v = calloc(1, sizeof *v);
        if (!z || !v || !(z->path = strdup(devnode)))
                return -ENOMEM;
        v->nsid = nsid;
        v->lba_shift = lba_shift;
        v->dev_size = size;
        v->page_size = (uint32_t) page;
        v->misplace_at = test_misplace_append(devnode);
        z->ops = &ns_ops;
        z->limits = kz->limits;
        z->limits.zone_append_max = am;
        z->write_back = kz->write_back;
        z->fd = TAKE_FD(ngfd);
        log_debug("zbd: %s: nvme backend on %s (nsid %u), %" PRIu64 " zones of %" PRIu64 " bytes, max open %u "
                  "active %u, max write %u, zone append max %u (ZASL %u, zone_append_max_bytes %u, "
                  "max_hw_sectors_kb %" PRIu64 ", max_segments %" PRIu64 "), block %u",
                  devnode, ng_path, nsid, z->limits.nr_zones, z->limits.zone_size, z->limits.max_open,
                  z->limits.max_active, z->limits.max_write, am, zasl, kz->limits.zone_append_max, hw_kb,
                  segs, bs);
        v->kz = TAKE_PTR(kz);
        z->backend = TAKE_PTR(v);
        *ret = TAKE_PTR(z);
        return 0;
}
