/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "cleanup.h"

/* The write limits the kernel reports below queue/ where it has them
 * (write streams: 6.16 and later; atomic writes: 6.11): reported, never
 * tuned (blkmqctl show, the Zones interface's devices). */
typedef enum WriteLimit {
        WRITE_LIMIT_MAX_STREAMS,
        WRITE_LIMIT_STREAM_GRANULARITY,
        WRITE_LIMIT_ATOMIC_MAX,
        WRITE_LIMIT_ATOMIC_UNIT_MIN,
        WRITE_LIMIT_ATOMIC_UNIT_MAX,
        WRITE_LIMIT_ATOMIC_BOUNDARY,
        _WRITE_LIMIT_MAX,
} WriteLimit;

typedef struct WriteLimits {
        int64_t v[_WRITE_LIMIT_MAX]; /* -1: the kernel has no such attribute */
} WriteLimits;

/* "queue/max_write_streams" */
const char *write_limit_attr(WriteLimit l);
/* The varlink field: "maxWriteStreams" */
const char *write_limit_key(WriteLimit l);
/* All absent. */
void write_limits_none(WriteLimits *ret);
/* Reads them from blockdir (a device's directory below /sys/block). */
void write_limits_read(const char *blockdir, WriteLimits *ret);
/* The kernel has at least one of them. */
bool write_limits_any(const WriteLimits *w);

/* What blkmqd knows about one whole-disk block device: identity and the
 * facts policies match on. Built from the device's sysfs directory plus the
 * udev properties of the event (when udev has a database entry for it). */
typedef struct DeviceInfo {
        char *sysname;      /* nvme0n1 */
        char *blockdir;     /* <sysfs root>/block/nvme0n1: where queue/ lives */
        char *devnode;      /* /dev/nvme0n1, NULL for hidden path devices */
        char *id;           /* stable identity, see device_info_identity() */
        char *zoned;        /* none, host-aware, host-managed */
        char *driver;       /* kernel driver of the nearest parent that has one */
        char *transport;    /* nvme, scsi, ata, usb, virtio, loop, null_blk, mmc, ... */
        char *model;
        char *vendor;       /* SCSI/ATA vendor; NULL where sysfs and udev have none (NVMe) */
        char *firmware;     /* firmware revision: NVMe firmware_rev, SCSI rev, or udev's ID_REVISION */
        char *serial;
        char *wwn;
        char *backing_file; /* loop devices */
        char *devnum;       /* "MAJOR:MINOR" (sysfs dev), NULL if unknown */
        char *scheduler;    /* active when the info was read; NULL if bio-based */
        /* What operators name stacks by (udev's properties, else sysfs;
         * NULL where the device is no such thing): */
        char *dm_name;      /* DM_NAME, dm/name */
        char *dm_uuid;      /* DM_UUID, dm/uuid: LVM-..., CRYPT-..., mpath-... */
        char *volume;       /* "VG/LV": DM_VG_NAME/DM_LV_NAME, else split from an LVM- device's dm name */
        char *crypt;        /* the dm-crypt mapping's name (DM_UUID CRYPT-...) */
        char *mpath_wwid;   /* the multipath map's WWID (DM_UUID mpath-WWID) */
        char *md_name;      /* MD_NAME (mdadm's "HOST:NAME" as udev has it) */
        char *md_level;     /* MD_LEVEL, md/level: raid1, raid0, raid10, ... */
        char **properties;  /* udev KEY=VALUE */
        WriteLimits write_limits;
        uint64_t size;      /* bytes */
        uint64_t diskseq;   /* the media's sequence number (Linux 5.15+), 0 unknown */
        uint32_t logical_block_size; /* bytes, 512 if unknown */
        int stat_fd;        /* <blockdir>/stat, opened where the info was read; -EBADF if not */
        unsigned nsid;      /* NVMe namespace id, 0 if none */
        int rotational;     /* -1 unknown */
        bool hidden;        /* NVMe multipath per-path disk */
        bool bio_based;     /* no blk-mq scheduler (e.g. multipath head, dm) */
} DeviceInfo;

/* blockdir is the device's directory below /sys/block (or a fake tree);
 * properties may be NULL. */
int device_info_load(const char *blockdir, char *const *properties, DeviceInfo **ret);
DeviceInfo *device_info_free(DeviceInfo *d);
DEFINE_TRIVIAL_CLEANUP_FUNC(DeviceInfo *, device_info_free)
const char *device_info_property(const DeviceInfo *d, const char *key);
