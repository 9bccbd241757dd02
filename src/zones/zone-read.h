/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* zone-read.c: a sealed object read back. Its job (every reader's: Read,
 * Verify and the scrub), what the read found, kept with the zone, and the
 * Read engine: the object into a client's descriptor on a work pool
 * thread. Verify and the scrub read through the io_uring pool instead
 * (zone-read-pool.c), and end the same way, in zone_read_done(). Calls
 * zone-state.c and zone-service-device.c. */

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "zone-service-internal.h"

/* A reader's next step, called last, once the job is freed and its
 * device settled: r is how the read ended. */
typedef void (*ZoneReadEndFn)(void *userdata, int r);

typedef struct ReadJob {
        ZoneDevice *dev;
        uint32_t zone;
        Zbd *zbd;
        uint64_t start, size;
        int fd;                 /* the client's, or -1: hash only (through the pool) */
        ZoneOp zop;             /* Read: cancelled when the client goes away */
        ZoneDoneFn done;        /* Read */
        ZoneProgressFn progress;
        void *userdata;
        ZoneReadEndFn end;      /* Verify, the scrub: their next step */
        void *end_data;
        sd_event_source *tick;  /* Read with "more": progress */
        _Atomic uint64_t bytes; /* read so far (worker writes, loop reads) */
        _Atomic bool cancel;    /* the client went away */
        char expected[65], actual[65];
        const char *what;
        bool ran;
        int r;
} ReadJob;

/* A job reading zone z of d (its sealed object) back, checked against
 * its SHA-256; NULL without memory. Hash only (fd -1) until the caller
 * sets more. */
ReadJob *zone_read_job_new(ZoneDevice *d, uint32_t z);

/* Read: j's object into j->fd on pool, hashed on the way; j->done hears
 * the outcome, j->progress (if set) the bytes so far, and j->zop cancels
 * it. On failure, j is still the caller's. */
int zone_read_submit(ReadJob *j, WorkPool *pool);

/* The end of every read (a work pool completion): the zone's reader
 * released, what it found kept (scrub result, log, alert, record), done
 * told, j freed, then j->end. */
void zone_read_done(void *data, void *userdata);
