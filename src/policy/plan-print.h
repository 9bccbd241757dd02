/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <jansson.h>
#include <stdio.h>

#include "device.h"
#include "policy.h"
#include "tune.h"

/* One rendering of "what blkmqd thinks of this device", shared by
 * --dry-run, --once and the varlink API. */

json_t *device_info_to_json(const DeviceInfo *d);
/* {"maxWriteStreams":…, "atomicWriteMaxBytes":…, …}: the attributes the
 * kernel has, none of those it has not; NULL when it has none of them. */
json_t *write_limits_to_json(const WriteLimits *w);
/* {"device":…, "id":…, …, "matched":[…], "explain":[…], "plan":[…]}; j may be NULL. */
json_t *device_plan_to_json(const DeviceInfo *d, const Resolved *r, const TuneJob *j);
json_t *tune_entry_to_json(const TuneEntry *e, const Resolved *r);
void device_plan_print(FILE *f, const DeviceInfo *d, const Resolved *r, const TuneJob *j);
