/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* zone-scrub.c: the scrub, its timer and which object is due. Calls
 * zone-read.c and zone-read-pool.c. */

#include "zone-service-internal.h"

/* The scrub's timer (ScrubIntervalSec=), for the service's start and
 * reload. */
int zone_scrub_timer_add(ZoneService *s);
void zone_scrub_timer_reset(ZoneService *s);
