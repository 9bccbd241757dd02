/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* zone-seal-read.c: the seal's read-back, then the finish and the flush.
 * Calls zone-state.c and zone-service-device.c. */

#include <stdint.h>

#include "sha256.h"
#include "zbd.h"
#include "zone-service-internal.h"

/* The seal's read-back of zone z against sha256 (64 hex digits), then the
 * finish and the flush; done hears the outcome. New, it only holds the
 * request: zone_seal_submit() starts it (once the last block is out, and
 * after a verification behind the appends in flight), zone_seal_fail()
 * ends it with r without reading. */
SealJob *zone_seal_new(ZoneDevice *d, uint32_t z, const char *sha256, ZoneDoneFn done, void *userdata);
void zone_seal_submit(SealJob *j);
void zone_seal_fail(SealJob *j, int r, const char *what);

/* Worker side: reads [from, to) of the zone at start and hashes it into
 * sha, the next chunk read while this one is hashed (where hashing is the
 * slower, as without SHA extensions, the read-back then costs nothing).
 * The seal's, and the verification's behind the appends (zone-verify.c). */
int zone_read_hash(Zbd *zbd, uint64_t start, uint64_t from, uint64_t to, Sha256 *sha);
