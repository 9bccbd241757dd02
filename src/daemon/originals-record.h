/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleanup.h"
#include "device.h"
#include "knobs.h"

/* The originals of a managed device on record in the runtime directory
 * (/run/blkmqd/originals/SYSNAME.json), so that an instance started after
 * a crash (kill -9, the watchdog, Restart=on-failure) knows the values from
 * before the first instance changed anything, and a later stop puts those
 * back. One JSON file per device, written whole to a temporary file and
 * renamed over the old one (a reader sees the old or the new record, never
 * half of one); no fsync: the directory is a tmpfs that a reboot empties
 * (and a reboot resets the disks anyway), and what a SIGKILL interrupts is
 * already in the page cache. The functions touch only their arguments, so
 * they run on any thread. */

/* A value blkmqd changed, as it was before: what restore puts back. */
typedef struct Original {
        Knob knob;
        char *attr;
        char *path;
        char *value;
        char *scheduler; /* iosched tunables: the scheduler it belongs to */
        bool implied;    /* changed as a side effect of the scheduler switch (nr_requests) */
        /* Who put it on record (originals-record.h): 0 until this instance
         * wrote it; another pid: adopted from an earlier instance. */
        int pid;
        uint64_t recorded_usec; /* CLOCK_REALTIME */
} Original;

/* What says "this is the same disk": all of it must match for a record to
 * be adopted. diskseq changes when a loop device is attached again or
 * media is replaced; devnum when the name went to another disk. */
typedef struct OriginalsIdentity {
        char *sysname;
        char *devnum;       /* "MAJOR:MINOR" */
        uint64_t diskseq;   /* 0: unknown (kernels before 5.15) */
        char *id;           /* device_info's stable identity */
        char *serial;
        char *wwn;
        char *backing_file; /* loop devices */
} OriginalsIdentity;

typedef struct OriginalsRecord {
        char *path;
        OriginalsIdentity identity;
        int pid;               /* the instance that last wrote the record */
        uint64_t written_usec; /* CLOCK_REALTIME */
        Original *originals;   /* each with the pid and time of the instance that recorded it */
        size_t n_originals;
} OriginalsRecord;

int originals_identity_from_info(const DeviceInfo *info, OriginalsIdentity *ret);
void originals_identity_done(OriginalsIdentity *id);
/* NULL if the identities match, else why not ("diskseq 7 → 9: ..."). */
const char *originals_identity_mismatch(const OriginalsIdentity *recorded, const OriginalsIdentity *now,
                                        char *buf, size_t size);

/* The record file of sysname in dir (allocated). */
char *originals_record_path(const char *dir, const char *sysname);
/* Writes the record (originals whose pid is 0 are put on record as this
 * process's, at now); with n == 0 removes it. */
int originals_record_write(const char *dir, const OriginalsIdentity *id, const Original *o, size_t n);
int originals_record_remove(const char *dir, const char *sysname);
/* Parses one record file; a file that is not a record of ours is -EBADMSG
 * with *ret_error saying what is wrong. */
int originals_record_load(const char *path, OriginalsRecord **ret, char **ret_error);
OriginalsRecord *originals_record_free(OriginalsRecord *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(OriginalsRecord *, originals_record_free)
/* Every record in dir (created if missing); refuses (logs, naming the
 * file) those that do not parse. */
int originals_record_scan(const char *dir, OriginalsRecord ***ret, size_t *ret_n);

/* "attr=value\n" of each original in order: what two sets are compared by. */
char *originals_signature(const Original *o, size_t n);
