/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* zone-verify.c: verification behind the appends: what has landed is read
 * back and hashed while later data is still being written, so that the
 * seal (zone-seal-read.c) reads back only the rest. Calls zone-state.c,
 * zone-service-device.c and zone-seal-read.c (a seal that waited for it). */

#include <stdint.h>

#include "zone-service-internal.h"

/* Starts a verification job if enough has landed and none runs. */
void zone_verify_kick(ZoneDevice *d, uint32_t z);
