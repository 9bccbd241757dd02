/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Inside the zone service: its state, the types every file of the service
 * shares, and nothing else (no functions: each file's own header says
 * what it offers, and tools/check-layers holds the files to no circle of
 * calls). The files, lowest first:
 *   zone-state.c           results, records, lookups, lease checks and the
 *                          state transitions the engines ask for;
 *   zone-service-device.c  devices added, gone, re-plugged, reconciled, and
 *                          their batched resets;
 *   zone-seal-read.c       the seal's read-back, finish and flush;
 *   zone-verify.c          verification behind the appends;
 *   zone-read.c            a sealed object read back: the job, what it
 *                          found, the Read engine (into a descriptor);
 *   zone-read-pool.c       Verify's and the scrub's reads (io_uring pool);
 *   zone-scrub.c           the scrub's timer, the object due;
 *   zone-object.c          objects by lease or label: Find, Read, Verify;
 *   zone-append.c          the append engine;
 *   zone-seal.c            Seal: the append engine's last block, then the
 *                          read-back;
 *   zone-lease.c           the service's life, allocation and release.
 * Nothing outside src/zones includes it. */

#include "uring-pool.h"
#include "work-pool.h"
#include "zbd.h"
#include "zone-db.h"
#include "conf.h"
#include "device.h"
#include "zone-service-types.h"

struct ZoneDevice {
        ZoneService *service;
        char *id;
        char *sysname; /* NULL while gone */
        const char *backend;
        Zbd *zbd;
        ZoneSlot *slots;
        size_t n;
        bool resetting;
        bool gone;      /* removed; zbd is dropped once in-flight operations end */
        char *readd[3]; /* sysname, devnode, blockdir of a re-plug that came while busy */
        WriteLimits write_limits; /* of its block device (kernel, nvme); none emulated */
};

typedef struct PendingAlloc PendingAlloc;

struct ZoneService {
        sd_event *event;
        ZonesConfig config;
        UringPool *uring;
        WorkPool *work;
        WorkPool *verifier; /* SCHED_IDLE: verification behind the appends */
        bool freeing;
        bool stopping;  /* zone_service_stop(): no new reads or hash jobs */
        ZoneDb *db;
        ZoneDevice **devs;
        size_t n_devs;
        PendingAlloc *pending;
        sd_event_source *scrub_timer;
        bool scrubbing;           /* one scrub read at a time */
        uint64_t start_usec;      /* CLOCK_REALTIME at start: scrub ages count from here at most */
        uint64_t scrubbed, scrub_errors; /* objects checked, mismatches and read errors found */
        ZoneAlertFn alert_cb;
        void *alert_userdata;
        /* Told when resets made zones free (zone-service-device.c), so that
         * waiting allocations go on (zone-lease.c). */
        void (*zones_freed)(ZoneService *s);
};

/* Every cancellable operation starts with one. */
struct ZoneOp {
        void (*cancel)(ZoneOp *op);
};

typedef struct SealJob SealJob;

/* Only a lease's owner or root may use it. */
static inline bool zone_uid_may(uid_t uid, const ZoneSlot *x) {
        return uid == 0 || uid == x->owner_uid;
}
