/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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

typedef struct ZoneSlot {
        uint32_t index;
        ZoneState state;
        Zone zone;               /* the device's view, from the last report */
        uint64_t bytes_written;  /* by the record */
        uint32_t reset_count;
        bool lease_held;
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
