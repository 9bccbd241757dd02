/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "policy.h"
#include "originals-record.h"
#include "tune.h"

/* A block device the manager manages: its state, the originals that
 * restore puts back, and the log lines of its jobs (managed-device.c). */

typedef struct Manager Manager;


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
        char *record_sig;    /* originals_signature() of what its record file holds (NULL: no file) */
        /* Drift (something else wrote a setting blkmqd manages): the
         * "ATTRIBUTE=VALUE" pairs logged already (each is logged once), and
         * the attributes left as the other writer set them (DriftPolicy=keep):
         * neither written nor put back until an apply, a reload or a profile
         * change (manager_forget_drift()). */
        char **drift_logged;
        char **kept;
} Device;


void device_forget_originals(Device *d);
Original *device_find_original(Device *d, const char *attr);
/* Records the value before each entry j changed (or adjusted) for its own
 * key, and those it moved as a side effect (a scheduler switch resets
 * nr_requests; both move queue/async_depth: marked implied); drops the
 * originals that a put-back entry of j restored. */
void device_record_originals(Device *d, const TuneJob *j);
/* The write-ahead record of j's originals: j puts the values it is about to
 * change on record in dir (originals-record.h) on its worker thread, after
 * reading them and before its first write. Cost: one JSON file of under
 * 1 KiB created, written and renamed in a tmpfs (the syscalls measured
 * 160-250 µs on the 2-core CI host under a load of 12; next to a scheduler
 * switch's ~24 ms), on the apply thread, only for a job that is about to
 * change a value not yet on record; nothing on the loop. required (--once):
 * a job whose record cannot be written writes nothing (its entries fail). */
int device_record_ahead(Device *d, TuneJob *j, const char *dir, bool required);
/* After device_record_originals(): makes the record file hold exactly the
 * device's originals (rewritten on the loop only where the job's outcome
 * differs from what its write-ahead assumed: a failure, a restore; removed
 * when none are left). */
void device_record_sync(Device *d, const TuneJob *j, const char *dir);
/* Takes the originals of an earlier instance's record as the device's own. */
void device_adopt_originals(Device *d, Original *o, size_t n);
/* Whether an original came from an earlier instance. */
bool original_adopted(const Original *o);
/* After a restore: drops the iosched originals of a scheduler no longer
 * active (nothing left to put them back into). */
void device_prune_originals(Device *d);
/* Logs each change, adjustment, failure and skip of j once (a problem the
 * device's previous job reported already goes to debug), and the summary. */
void device_log_results(Device *d, const TuneJob *j);
