/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sha256.h"
#include "zbd.h"

/* The zone allocator's decisions, as pure functions of their inputs: which
 * zone to hand out, what a record becomes when the device's zone report and
 * the database disagree, when resets are due. The device's report is the
 * truth about write pointers; the database is the truth about ownership. */

typedef enum ZoneState {
        ZONE_STATE_FREE,
        ZONE_STATE_ALLOCATED, /* leased, nothing written yet */
        ZONE_STATE_WRITING,
        ZONE_STATE_SEALED,    /* verified, finished */
        ZONE_STATE_RELEASING, /* reset queued */
        ZONE_STATE_FAILED,    /* did not verify, or disagrees with the device: never reused silently */
        _ZONE_STATE_MAX,
} ZoneState;

const char *zone_state_to_string(ZoneState s);
int zone_state_from_string(const char *s); /* -EINVAL */

struct AppendOp;
struct SealJob;
struct VerifyJob;

/* One zone as the zone service holds it: the allocator's view (the first
 * fields, what zone_pick() and zone_reconcile() look at), the rest of its
 * record, and what runs on it. Only the zone service (the files of
 * zone-service-internal.h) writes a slot; others read them through const
 * pointers. */
typedef struct ZoneSlot {
        uint32_t index;
        ZoneState state;
        Zone zone;               /* the device's view, from the last report */
        uint64_t bytes_written;  /* by the record */
        uint32_t reset_count;
        bool lease_held;

        /* The rest of the record (zone-db.h's ZoneRecord) */
        char *lease;
        uint32_t owner_uid;      /* ZONE_DB_UID_INVALID: none */
        char *label;
        char *sha256;
        uint64_t allocated_usec, sealed_usec;
        char *note;
        uint64_t scrub_usec;     /* CLOCK_REALTIME of the last check; 0: none since start */
        int scrub_result;        /* of it: 0, -EBADMSG (mismatch), -errno */

        /* What runs on the zone (the zone service's, on the loop thread) */
        struct AppendOp *append; /* in flight */
        bool busy;               /* sealing */
        bool releasing;          /* a Release waits for its record to be durable */
        unsigned readers;        /* Read, Verify or the scrub reading the sealed object */
        /* The last partial block of what was appended so far: zones are
         * written in whole blocks, so it waits for more data or the seal. */
        uint8_t *tail;
        uint32_t tail_len;
        /* Verification behind the appends (zone-verify.c). */
        Sha256 vsha;
        uint64_t verified;
        struct VerifyJob *verify; /* in flight */
        struct SealJob *seal_wait; /* a seal waiting for it */
        unsigned verify_gen;      /* bumped when the zone is reset under a lease */
} ZoneSlot;

/* Picks the zone for a new lease of size bytes: an empty sequential zone in
 * state free, with the fewest resets (wear spreads), lowest index on ties.
 * Counts zones that hold or will hold an active resource (allocated,
 * writing) against max_active. Returns the slot index, or
 *   -EFBIG      size exceeds every zone's capacity (multi-zone objects are not supported)
 *   -EUSERS     the open/active limit is reached
 *   -ENOSPC     no free zone (releasing ones may become free after their reset)
 */
int zone_pick(const ZoneSlot *slots, size_t n, const ZbdLimits *limits, uint64_t size);

/* Start-up reconciliation of one record with the device's zone. Returns the
 * state the record must take and, in *ret_reason, why it changed (NULL if
 * unchanged):
 *   writing (the daemon died mid-write)         → releasing (partial data is reclaimed by a reset)
 *   allocated, device empty                      → free (the lease did not survive the restart)
 *   allocated, device not empty                  → releasing
 *   sealed, device FULL with the data            → sealed
 *   sealed, write pointer disagrees              → failed (flagged, never reused silently)
 *   free, device not empty                       → releasing (not handed out until reset)
 *   releasing                                    → releasing (the reset is done again)
 *   failed                                       → failed
 *   any, zone offline/read-only                  → failed */
ZoneState zone_reconcile(const ZoneSlot *slot, const char **ret_reason);

/* Resets are deferred and batched: due when this many zones wait, or when
 * an allocation found no free zone. */
bool zone_resets_due(const ZoneSlot *slots, size_t n, unsigned batch, bool allocation_starved);
