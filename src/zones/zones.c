/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <string.h>

#include "util.h"
#include "zones.h"

static const char *const state_names[_ZONE_STATE_MAX] = {
        [ZONE_STATE_FREE] = "free",         [ZONE_STATE_ALLOCATED] = "allocated", [ZONE_STATE_WRITING] = "writing",
        [ZONE_STATE_SEALED] = "sealed",     [ZONE_STATE_RELEASING] = "releasing", [ZONE_STATE_FAILED] = "failed",
};

const char *zone_state_to_string(ZoneState s) {
        return (unsigned) s < _ZONE_STATE_MAX ? state_names[s] : NULL;
}

int zone_state_from_string(const char *s) {
        for (int i = 0; i < _ZONE_STATE_MAX; i++)
                if (s && streq(s, state_names[i]))
                        return i;
        return -EINVAL;
}

int zone_pick(const ZoneSlot *slots, size_t n, const ZbdLimits *limits, uint64_t size) {
        size_t active = 0, open = 0;
        bool fits_any = false;
        int best = -1;

        for (size_t i = 0; i < n; i++) {
                const ZoneSlot *s = &slots[i];

                if (!zone_is_seq(&s->zone) || !zone_is_usable(&s->zone))
                        continue;
                if (s->zone.capacity >= size)
                        fits_any = true;
                /* An allocated zone becomes active with its first write. */
                if (s->state == ZONE_STATE_ALLOCATED || s->state == ZONE_STATE_WRITING || zone_is_active(&s->zone))
                        active++;
                if (s->state == ZONE_STATE_ALLOCATED || s->state == ZONE_STATE_WRITING || zone_is_open(&s->zone))
                        open++;
        }
        if (!fits_any || size == 0)
                return -EFBIG;
        if ((limits->max_active && active >= limits->max_active) || (limits->max_open && open >= limits->max_open))
                return -EUSERS;

        for (size_t i = 0; i < n; i++) {
                const ZoneSlot *s = &slots[i];

                if (s->state != ZONE_STATE_FREE || s->lease_held || !zone_is_seq(&s->zone) ||
                    !zone_is_empty(&s->zone) || s->zone.capacity < size)
                        continue;
                if (best < 0 || s->reset_count < slots[best].reset_count)
                        best = (int) i;
        }
        return best >= 0 ? best : -ENOSPC;
}

ZoneState zone_reconcile(const ZoneSlot *slot, const char **ret_reason) {
        const Zone *z = &slot->zone;
        const char *why = NULL;
        ZoneState s = slot->state;

        if (!zone_is_usable(z)) {
                if (s != ZONE_STATE_FAILED)
                        why = "the device reports the zone offline or read-only";
                s = ZONE_STATE_FAILED;
                goto done;
        }
        switch (slot->state) {
        case ZONE_STATE_WRITING:
                why = "a write was interrupted: the partial data is reclaimed by a reset";
                s = ZONE_STATE_RELEASING;
                break;
        case ZONE_STATE_ALLOCATED:
                why = zone_is_empty(z) ? "the lease did not survive the restart"
                                       : "the lease did not survive the restart and the zone holds data";
                s = zone_is_empty(z) ? ZONE_STATE_FREE : ZONE_STATE_RELEASING;
                break;
        case ZONE_STATE_SEALED:
                /* Sealed means verified and finished: FULL, and the record's
                 * byte count within its capacity. */
                if (!zone_is_full(z) || slot->bytes_written == 0 || slot->bytes_written > z->capacity) {
                        why = "sealed, but the device's write pointer disagrees with the record";
                        s = ZONE_STATE_FAILED;
                }
                break;
        case ZONE_STATE_FREE:
                if (!zone_is_empty(z)) {
                        why = "free in the records, but the device holds data: reset before reuse";
                        s = ZONE_STATE_RELEASING;
                }
                break;
        case ZONE_STATE_RELEASING:
        case ZONE_STATE_FAILED:
        default:
                break;
        }
done:
        if (ret_reason)
                *ret_reason = why;
        return s;
}

bool zone_resets_due(const ZoneSlot *slots, size_t n, unsigned batch, bool allocation_starved) {
        size_t waiting = 0;

        for (size_t i = 0; i < n; i++)
                if (slots[i].state == ZONE_STATE_RELEASING)
                        waiting++;
        if (waiting == 0)
                return false;
        return allocation_starved || waiting >= (batch ? batch : 1);
}
