/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* zone-verify.c: reading zones back. Verification behind the appends, the
 * seal's read-back (with the finish and the flush), and the sealed
 * objects' Read, Verify and scrub. Calls zone-state.c and
 * zone-service-device.c. */

#include <stdint.h>

#include "zone-service-internal.h"

/* Starts a verification job if enough has landed and none runs. */
void zone_verify_kick(ZoneDevice *d, uint32_t z);
/* Drops what the verification behind the appends had hashed. */
void zone_verify_forget(ZoneSlot *x);

/* The seal's read-back of zone z against sha256 (64 hex digits), then the
 * finish and the flush; done hears the outcome. New, it only holds the
 * request: zone_seal_submit() starts it (once the last block is out),
 * zone_seal_fail() ends it with r without reading. */
SealJob *zone_seal_new(ZoneDevice *d, uint32_t z, const char *sha256, ZoneDoneFn done, void *userdata);
void zone_seal_submit(SealJob *j);
void zone_seal_fail(SealJob *j, int r, const char *what);

/* The scrub's timer (ScrubIntervalSec=), for the service's start and
 * reload. */
int zone_scrub_timer_add(ZoneService *s);
void zone_scrub_timer_reset(ZoneService *s);
