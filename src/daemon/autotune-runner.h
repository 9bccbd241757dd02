/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "manager.h"
#include "strbuf.h"

/* The trial runner of closed-loop tuning (the decisions are autotune.c's).
 * It lives on the event loop thread like everything the Manager owns.
 * Candidates are applied by the Manager's ordinary tune path: the runner
 * only overlays the candidate on a device's resolved policy
 * (autotuner_overlay(), called by device_apply()) and asks for an apply, so
 * the sysfs writes run on the work pool in knob order and every change is
 * recorded as an original that restore and stop put back. Between applies
 * it reads /sys/block/X/stat (a small read, on the loop) at epoch ends. */

typedef struct AutoTuner AutoTuner;
struct Prober;
struct VarlinkCall;

int autotuner_new(AutoTuner **ret, Manager *m, struct Prober *prober);
AutoTuner *autotuner_free(AutoTuner *t);

/* Manager events: applied jobs drive trials; removal ends them; hotplug may
 * start one. */
void autotuner_event(AutoTuner *t, ManagerEventType type, Device *d);

/* A trial of one device. forced: an operator asked (no dwell, no per-device
 * cap; the global cap holds). call (may be NULL) gets progress (with
 * "more") and the result; it is referenced. -EBUSY: already running (call
 * joined); -EPERM with why: refused. */
int autotuner_start(AutoTuner *t, Device *d, bool forced, struct VarlinkCall *call, char *why, size_t why_size);

/* Puts the candidate under trial, or the setting a trial chose, over r.
 * Caller: device_apply() after policy_resolve(), and Explain. */
void autotuner_overlay(AutoTuner *t, Device *d, Resolved *r);

/* Restore (of d, or NULL: all) ends running trials without a final apply
 * and forgets what trials chose. */
void autotuner_forget(AutoTuner *t, Device *d);

/* GetDevice's "autotune" object, NULL if the device has no Auto* policy
 * and no trial ran. */
json_t *autotuner_device_json(AutoTuner *t, const Device *d);
/* One sentence for explain, NULL if nothing to say. */
char *autotuner_explain(AutoTuner *t, const Device *d);
/* Prometheus text: blkmqd_autotune_* families. */
void autotuner_metrics(AutoTuner *t, StrBuf *sb);
