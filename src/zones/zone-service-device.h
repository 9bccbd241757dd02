/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* zone-service-device.c: the service's devices (added, gone, re-plugged,
 * reconciled) and the batched resets of their zones. Calls zone-state.c
 * only; when resets made zones free it tells ZoneService.zones_freed. */

#include <stdbool.h>

#include "zbd.h"
#include "zone-service-internal.h"

/* Adds (or re-attaches) device id on backend zbd (taken), reconciling its
 * zone report with its records. */
int zone_device_add(ZoneService *s, const char *id, const char *sysname, const char *backend, Zbd *zbd);
void zone_device_free(ZoneDevice *d);
/* A device that went away lets go of its backend once nothing runs on it,
 * and takes a re-plug that arrived meanwhile. */
void zone_device_settle(ZoneDevice *d);
/* Resets the released zones of d when zone_resets_due() says so. */
void zone_maybe_reset(ZoneDevice *d, bool starved);
