/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"
#include "knobs.h"
#include "log.h"
#include "sysfs.h"
#include "util.h"

static const struct {
        const char *attr, *key;
} write_limit_table[_WRITE_LIMIT_MAX] = {
        [WRITE_LIMIT_MAX_STREAMS] = { "queue/max_write_streams", "maxWriteStreams" },
        [WRITE_LIMIT_STREAM_GRANULARITY] = { "queue/write_stream_granularity", "writeStreamGranularity" },
        [WRITE_LIMIT_ATOMIC_MAX] = { "queue/atomic_write_max_bytes", "atomicWriteMaxBytes" },
        [WRITE_LIMIT_ATOMIC_UNIT_MIN] = { "queue/atomic_write_unit_min_bytes", "atomicWriteUnitMinBytes" },
        [WRITE_LIMIT_ATOMIC_UNIT_MAX] = { "queue/atomic_write_unit_max_bytes", "atomicWriteUnitMaxBytes" },
        [WRITE_LIMIT_ATOMIC_BOUNDARY] = { "queue/atomic_write_boundary_bytes", "atomicWriteBoundaryBytes" },
};

const char *write_limit_attr(WriteLimit l) {
        return l >= 0 && l < _WRITE_LIMIT_MAX ? write_limit_table[l].attr : NULL;
}

const char *write_limit_key(WriteLimit l) {
        return l >= 0 && l < _WRITE_LIMIT_MAX ? write_limit_table[l].key : NULL;
}

void write_limits_none(WriteLimits *ret) {
        for (size_t i = 0; i < _WRITE_LIMIT_MAX; i++)
                ret->v[i] = -1;
}

void write_limits_read(const char *blockdir, WriteLimits *ret) {
        write_limits_none(ret);
        for (size_t i = 0; blockdir && i < _WRITE_LIMIT_MAX; i++) {
                _cleanup_free_ char *p = path_join(blockdir, write_limit_table[i].attr);
                long long n;

                if (p && sysfs_read_int(p, &n) >= 0 && n >= 0)
                        ret->v[i] = n;
        }
}

bool write_limits_any(const WriteLimits *w) {
        for (size_t i = 0; i < _WRITE_LIMIT_MAX; i++)
                if (w->v[i] >= 0)
                        return true;
        return false;
}

DeviceInfo *device_info_free(DeviceInfo *d) {
        if (!d)
                return NULL;
        free(d->sysname);
        free(d->blockdir);
        free(d->devnode);
        free(d->id);
        free(d->zoned);
        free(d->driver);
        free(d->transport);
        free(d->model);
        free(d->vendor);
        free(d->firmware);
        free(d->serial);
        free(d->wwn);
        free(d->backing_file);
        free(d->devnum);
        free(d->scheduler);
        free(d->dm_name);
        free(d->dm_uuid);
        free(d->volume);
        free(d->crypt);
        free(d->mpath_wwid);
        free(d->md_name);
        free(d->md_level);
        strv_free(d->properties);
        if (d->stat_fd >= 0)
                close(d->stat_fd);
        free(d);
        return NULL;
}

const char *device_info_property(const DeviceInfo *d, const char *key) {
        size_t n = strlen(key);
        STRV_FOREACH(p, d->properties)
                if (strncmp(*p, key, n) == 0 && (*p)[n] == '=')
                        return *p + n + 1;
        return NULL;
}

static char *read_attr(const char *dir, const char *attr) {
        _cleanup_free_ char *p = path_join(dir, attr);
        char *v = NULL;

        if (!p || sysfs_read(p, &v) < 0)
                return NULL;
        /* Model and serial attributes are space padded. */
        char *s = strstrip(v);
        if (s != v)
                memmove(v, s, strlen(s) + 1);
        if (!*v)
                v = mfree(v);
        return v;
}

static char *dup_or_null(const char *s) {
        return s && *s ? strdup(s) : NULL;
}

static char *find_driver(const char *blockdir) {
        /* The namespace's "device" is the controller (a class device), whose
         * own "device" is the PCI function with the driver: walk up a bit. */
        static const char *const links[] = { "device/driver", "device/device/driver", "device/device/device/driver" };
        for (size_t i = 0; i < ELEMENTSOF(links); i++) {
                _cleanup_free_ char *p = path_join(blockdir, links[i]);
                char buf[PATH_MAX];
                ssize_t n;

                if (!p)
                        return NULL;
                n = readlink(p, buf, sizeof buf - 1);
                if (n < 0)
                        continue;
                buf[n] = 0;
                const char *b = strrchr(buf, '/');
                return strdup(b ? b + 1 : buf);
        }
        return NULL;
}

static const char *transport_from_name(const char *sysname, const char *id_bus) {
        static const struct { const char *prefix; const char *transport; } t[] = {
                { "nvme", "nvme" }, { "loop", "loop" }, { "vd", "virtio" }, { "nullb", "null_blk" },
                { "mmcblk", "mmc" }, { "dm-", "dm" }, { "md", "md" }, { "zram", "zram" },
                { "xvd", "xen" }, { "nbd", "nbd" }, { "rbd", "rbd" }, { "ublkb", "ublk" },
                { "pmem", "pmem" },
        };
        for (size_t i = 0; i < ELEMENTSOF(t); i++)
                if (strncmp(sysname, t[i].prefix, strlen(t[i].prefix)) == 0)
                        return t[i].transport;
        if (id_bus)
                return id_bus; /* ata, scsi, usb, ieee1394 */
        if (strncmp(sysname, "sd", 2) == 0)
                return "scsi";
        return NULL;
}

/* The identity that survives renames: WWN/WWID where the kernel or udev
 * gives one, else serial (+ namespace), else a loop device's backing file,
 * else the name. A multipath path disk shares the WWID with its head, so it
 * gets a suffix. */
static int device_info_identity(DeviceInfo *d) {
        int r;

        if (d->wwn)
                r = asprintf(&d->id, "wwn:%s%s", d->wwn, d->hidden ? ":path" : "");
        else if (d->serial && d->nsid)
                r = asprintf(&d->id, "serial:%s:ns%u%s", d->serial, d->nsid, d->hidden ? ":path" : "");
        else if (d->serial)
                r = asprintf(&d->id, "serial:%s", d->serial);
        else if (d->backing_file)
                r = asprintf(&d->id, "loop:%s", d->backing_file);
        else
                r = asprintf(&d->id, "name:%s", d->sysname);
        if (r < 0) {
                d->id = NULL;
                return -ENOMEM;
        }
        return 0;
}

/* The queue's figures and the kinds of device it is. */
static int device_info_load_attrs(DeviceInfo *d, const char *blockdir) {
        _cleanup_free_ char *sched = NULL, *v = NULL;
        long long n;

        v = read_attr(blockdir, "queue/rotational");
        if (v && safe_atolli(v, &n) >= 0)
                d->rotational = !!n;
        v = mfree(v);

        d->zoned = read_attr(blockdir, "queue/zoned");
        if (!d->zoned && !(d->zoned = strdup("none")))
                return -ENOMEM;

        v = read_attr(blockdir, "size");
        if (v && safe_atolli(v, &n) >= 0 && n >= 0)
                d->size = (uint64_t) n * 512;
        v = mfree(v);

        v = read_attr(blockdir, "diskseq");
        if (v && safe_atolli(v, &n) >= 0 && n > 0)
                d->diskseq = (uint64_t) n;
        v = mfree(v);

        d->logical_block_size = 512;
        v = read_attr(blockdir, "queue/logical_block_size");
        if (v && safe_atolli(v, &n) >= 0 && n >= 512 && n <= 65536)
                d->logical_block_size = (uint32_t) n;
        v = mfree(v);

        /* Held open for the probes' I/O statistics: a read of an open
         * sysfs file takes no lookup, and a lookup waits on the kernfs lock
         * that every attach and detach takes for writing. It does not keep
         * the device from going away (reads then fail). */
        _cleanup_free_ char *st = path_join(blockdir, "stat");
        if (!st)
                return -ENOMEM;
        d->stat_fd = open(st, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (d->stat_fd < 0)
                d->stat_fd = -EBADF;

        v = read_attr(blockdir, "hidden");
        d->hidden = v && streq(v, "1");
        v = mfree(v);

        v = read_attr(blockdir, "nsid");
        if (v && safe_atolli(v, &n) >= 0 && n > 0 && n <= UINT_MAX)
                d->nsid = (unsigned) n;
        v = mfree(v);

        sched = read_attr(blockdir, "queue/scheduler");
        d->bio_based = !sched || !strchr(sched, '[');
        if (sched)
                d->scheduler = scheduler_active(sched);

        d->backing_file = read_attr(blockdir, "loop/backing_file");
        d->devnum = read_attr(blockdir, "dev");
        write_limits_read(blockdir, &d->write_limits);
        return 0;
}

/* Model, serial, WWN, driver and transport: what [Device] sections match
 * on, from sysfs or udev's properties. */
static int device_info_load_names(DeviceInfo *d, const char *blockdir) {
        const char *s;

        /* The kernel's model string keeps its blanks; udev's ID_MODEL has
         * them as '_': prefer the former, so that one glob fits both. */
        d->model = read_attr(blockdir, "device/model");
        if (!d->model && (s = device_info_property(d, "ID_MODEL"))) {
                d->model = strdup(s);
                for (char *c = d->model; c && *c; c++)
                        if (*c == '_')
                                *c = ' ';
        }

        /* Vendor and firmware: what tells disks of one model apart when a
         * setting is shipped to a fleet (blkmqctl export). NVMe has no
         * vendor string in sysfs (only PCI ids), SCSI and ATA do. */
        d->vendor = read_attr(blockdir, "device/vendor");
        if (!d->vendor && (s = device_info_property(d, "ID_VENDOR"))) {
                d->vendor = strdup(s);
                for (char *c = d->vendor; c && *c; c++)
                        if (*c == '_')
                                *c = ' ';
        }
        d->firmware = read_attr(blockdir, "device/firmware_rev");
        if (!d->firmware)
                d->firmware = read_attr(blockdir, "device/rev");
        if (!d->firmware)
                d->firmware = dup_or_null(device_info_property(d, "ID_REVISION"));

        s = device_info_property(d, "ID_SERIAL_SHORT");
        d->serial = s ? strdup(s) : read_attr(blockdir, "device/serial");
        if (!d->serial)
                d->serial = read_attr(blockdir, "serial"); /* virtio */

        d->wwn = read_attr(blockdir, "wwid");
        if (!d->wwn)
                d->wwn = read_attr(blockdir, "device/wwid");
        if (!d->wwn && (s = device_info_property(d, "ID_WWN"))) {
                const char *ext = device_info_property(d, "ID_WWN_VENDOR_EXTENSION");
                if (asprintf(&d->wwn, "%s%s", s, strempty(ext)) < 0)
                        return -ENOMEM;
        }

        d->driver = find_driver(blockdir);
        s = transport_from_name(d->sysname, device_info_property(d, "ID_BUS"));
        d->transport = dup_or_null(s);
        return 0;
}

/* An LV's dm name is VG-LV with each '-' inside either name doubled
 * (dmsetup splitname): the single '-' divides them. */
static char *split_lvm_name(const char *dm_name) {
        _cleanup_free_ char *vg = NULL, *lv = NULL;
        char *r = NULL;
        size_t n = strlen(dm_name);

        for (size_t i = 0; i < n; i++) {
                if (dm_name[i] != '-')
                        continue;
                if (dm_name[i + 1] == '-') {
                        i++;
                        continue;
                }
                vg = strndup(dm_name, i);
                lv = strdup(dm_name + i + 1);
                if (!vg || !lv)
                        return NULL;
                for (char *c = vg, *w = vg; ; c++) {
                        *w++ = *c;
                        if (!*c)
                                break;
                        if (*c == '-' && c[1] == '-')
                                c++;
                }
                for (char *c = lv, *w = lv; ; c++) {
                        *w++ = *c;
                        if (!*c)
                                break;
                        if (*c == '-' && c[1] == '-')
                                c++;
                }
                if (asprintf(&r, "%s/%s", vg, lv) < 0)
                        return NULL;
                return r;
        }
        return NULL;
}

/* The names of a device-mapper or md device: udev's properties where the
 * database has them (its dm and lvm rules), else what sysfs says. */
static int device_info_load_stack_names(DeviceInfo *d, const char *blockdir) {
        const char *s, *vg, *lv;

        d->dm_name = dup_or_null(device_info_property(d, "DM_NAME"));
        if (!d->dm_name)
                d->dm_name = read_attr(blockdir, "dm/name");
        d->dm_uuid = dup_or_null(device_info_property(d, "DM_UUID"));
        if (!d->dm_uuid)
                d->dm_uuid = read_attr(blockdir, "dm/uuid");

        vg = device_info_property(d, "DM_VG_NAME");
        lv = device_info_property(d, "DM_LV_NAME");
        if (vg && *vg && lv && *lv) {
                if (asprintf(&d->volume, "%s/%s", vg, lv) < 0) {
                        d->volume = NULL;
                        return -ENOMEM;
                }
        } else if (d->dm_name && d->dm_uuid && strncmp(d->dm_uuid, "LVM-", 4) == 0 &&
                   !strchr(d->dm_uuid + 4, '-'))
                /* an LV itself ("LVM-" and the ids); its sub-LVs (stripes
                 * of a RAID LV, a thin pool's data) have a "-suffix" */
                d->volume = split_lvm_name(d->dm_name);

        if (d->dm_uuid && strncmp(d->dm_uuid, "CRYPT-", 6) == 0 && d->dm_name)
                d->crypt = strdup(d->dm_name);
        if (d->dm_uuid && strncmp(d->dm_uuid, "mpath-", 6) == 0)
                d->mpath_wwid = dup_or_null(d->dm_uuid + 6);

        d->md_name = dup_or_null(device_info_property(d, "MD_NAME"));
        s = device_info_property(d, "MD_LEVEL");
        d->md_level = s ? dup_or_null(s) : read_attr(blockdir, "md/level");
        return 0;
}

int device_info_load(const char *blockdir, char *const *properties, DeviceInfo **ret) {
        _cleanup_(device_info_freep) DeviceInfo *d = NULL;
        const char *s;
        int r;

        d = calloc(1, sizeof *d);
        if (!d)
                return -ENOMEM;
        d->rotational = -1;
        d->stat_fd = -EBADF;
        d->blockdir = strdup(blockdir);
        s = strrchr(blockdir, '/');
        d->sysname = strdup(s ? s + 1 : blockdir);
        if (!d->blockdir || !d->sysname)
                return -ENOMEM;
        if (properties) {
                d->properties = strv_copy(properties);
                if (!d->properties)
                        return -ENOMEM;
        }

        /* A device without queue/ is no request queue we can tune. */
        _cleanup_free_ char *q = path_join(blockdir, "queue");
        if (!q)
                return -ENOMEM;
        if (access(q, F_OK) < 0)
                return -errno;

        s = device_info_property(d, "DEVNAME");
        d->devnode = dup_or_null(s);

        r = device_info_load_attrs(d, blockdir);
        if (r < 0)
                return r;
        r = device_info_load_names(d, blockdir);
        if (r < 0)
                return r;
        r = device_info_load_stack_names(d, blockdir);
        if (r < 0)
                return r;

        r = device_info_identity(d);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(d);
        return 0;
}
