/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "zone-append.h"
#include "zone-service-internal.h"
#include "zone-service.h"
#include "zone-state.h"
#include "zone-seal-read.h"
#include "zones.h"

/* Seal: the two engines in turn. The zone's partial last block is written
 * out, padded (zone-append.c), then the zone is read back, compared,
 * finished and flushed (zone-seal-read.c). Neither engine knows the other
 * for it: this file hands the one's end to the other. */

static void seal_flushed(int r, const char *what, void *userdata) {
        SealJob *j = userdata;

        if (r < 0)
                zone_seal_fail(j, r, what);
        else
                zone_seal_submit(j);
}

int zone_service_seal(ZoneService *s, const char *lease, const char *sha256, uid_t uid, ZoneDoneFn done,
                      void *userdata) {
        ZoneResult res = {};
        SealJob *j;
        ZoneDevice *d;
        uint32_t z;

        if (strlen(sha256) != 64 || strspn(sha256, "0123456789abcdefABCDEF") != 64) {
                res.parameter = "sha256";
                zone_done_error(done, userdata, &res, ZONE_ERROR_INVALID_PARAMETER);
                return 0;
        }
        if (!zone_lease_checks(s, lease, uid, &d, &z, &res))
                return zone_done(done, userdata, &res), 0;
        if (d->slots[z].state != ZONE_STATE_WRITING || d->slots[z].bytes_written == 0) {
                res.lease = lease;
                res.state = zone_state_to_string(d->slots[z].state);
                zone_done_error(done, userdata, &res, ZONE_ERROR_WRONG_STATE);
                return 0;
        }
        j = zone_seal_new(d, z, sha256, done, userdata);
        if (!j)
                return -ENOMEM;
        d->slots[z].busy = true;
        if (d->slots[z].tail_len)
                /* The partial last block goes out first, padded. */
                zone_append_flush(d, z, seal_flushed, j);
        else
                zone_seal_submit(j);
        return 0;
}
