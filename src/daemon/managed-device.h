/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "policy.h"
#include "tune.h"

/* A block device the manager manages: its state, the originals that
 * restore puts back, and the log lines of its jobs (managed-device.c). */

typedef struct Manager Manager;

/* A value blkmqd changed, as it was before: what restore puts back. */
typedef struct Original {
        Knob knob;
        char *attr;
        char *path;
        char *value;
        char *scheduler; /* iosched tunables: the scheduler it belongs to */
        bool implied;    /* changed as a side effect of the scheduler switch (nr_requests) */
} Original;

typedef struct Device {
        Manager *manager;
        char *sysname;
        DeviceInfo *info;
        Resolved resolved;
        Original *originals;
        size_t n_originals;
        TuneJob *last;       /* the last finished job */
        uint64_t last_usec;  /* CLOCK_REALTIME when it finished */
        bool busy;           /* a job is in flight */
        bool dirty;          /* apply again once the job is back */
        bool urgent;         /* its next job goes ahead of the queue (a call waits for it) */
        bool removed;        /* gone; freed when the job is back */
        unsigned n_jobs;
        unsigned n_failed_jobs;
        unsigned generation; /* bumped when another disk appears under the name (its identity changed) */
} Device;


void device_forget_originals(Device *d);
Original *device_find_original(Device *d, const char *attr);
/* Records the value before each entry j changed (or adjusted) for its own
 * key, and those it moved as a side effect (a scheduler switch resets
 * nr_requests; both move queue/async_depth: marked implied); drops the
 * originals that a put-back entry of j restored. */
void device_record_originals(Device *d, const TuneJob *j);
/* After a restore: drops the iosched originals of a scheduler no longer
 * active (nothing left to put them back into). */
void device_prune_originals(Device *d);
/* Logs each change, adjustment, failure and skip of j once (a problem the
 * device's previous job reported already goes to debug), and the summary. */
void device_log_results(Device *d, const TuneJob *j);
