/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* zone-append.c: the append engine (Append). Calls zone-state.c,
 * zone-service-device.c, and zone-verify.c to start the verification of
 * what landed. */

#include <stdint.h>

#include "zone-service-internal.h"

/* How the write of the last block ended: r < 0 (what failed) or 0. */
typedef void (*ZoneFlushedFn)(int r, const char *what, void *userdata);

/* Writes out the zone's partial last block, padded, then calls flushed. */
void zone_append_flush(ZoneDevice *d, uint32_t z, ZoneFlushedFn flushed, void *userdata);
