/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "manager.h"
#include "strbuf.h"

/* The trial runner of closed-loop tuning: the I/O driver of the trial engine
 * (autotune-engine.h decides, autotune.h's statistics under it), and of the
 * watch between trials (autotune-watch.c, over autotune-lookout.h). It lives on
 * the event loop thread like everything the Manager owns; the Trial calls
 * are api-manager.c's, told of each trial's progress and end by a listener.
 * Candidates are applied by the Manager's ordinary tune path: the runner
 * only overlays the candidate on a device's resolved policy
 * (autotune_runner_overlay(), called by device_apply()) and asks for an apply, so
 * the sysfs writes run on the work pool in knob order and every change is
 * recorded as an original that restore and stop put back. Between applies
 * it reads /sys/block/X/stat (a small read, on the loop) at epoch ends. */

typedef struct AutotuneRunner AutotuneRunner;
struct Prober;

int autotune_runner_new(AutotuneRunner **ret, Manager *m, struct Prober *prober);
AutotuneRunner *autotune_runner_free(AutotuneRunner *t);

/* Manager events: applied jobs drive trials; removal ends them; hotplug may
 * start one. */
void autotune_runner_event(AutotuneRunner *t, ManagerEventType type, Device *d);

/* A trial of one device. forced: an operator asked (no dwell, no per-device
 * cap; the global cap holds). -EBUSY: one runs already (its news tells
 * its end); -EPERM with why: refused. */
int autotune_runner_start(AutotuneRunner *t, Device *d, bool forced, char *why, size_t why_size);

/* The news of a device's trial, for whoever answers for it (api-manager.c
 * holds the Trial calls): an epoch measured; the trial over (its setting
 * in place, or ended from outside: a restore, the device gone). The
 * trial's state is autotune_runner_trial_json() then. */
typedef enum AutotuneTrialNews {
        AUTOTUNE_RUNNER_TRIAL_PROGRESS,
        AUTOTUNE_RUNNER_TRIAL_DONE,
} AutotuneTrialNews;
typedef void (*AutotuneTrialListenerFn)(Device *d, int news, void *userdata); /* news: an AutotuneTrialNews */
void autotune_runner_set_listener(AutotuneRunner *t, AutotuneTrialListenerFn listener, void *userdata);
/* A trial of d runs, or its chosen setting is on its way: a DONE will come. */
bool autotune_runner_trial_pending(AutotuneRunner *t, const Device *d);
/* The device's trial as Trial gives it (an empty object: none). */
json_t *autotune_runner_trial_json(AutotuneRunner *t, const Device *d);

/* Puts the candidate under trial, or the setting a trial chose, over r.
 * Caller: device_apply() after policy_resolve(), and Explain. */
void autotune_runner_overlay(AutotuneRunner *t, Device *d, Resolved *r);

/* Restore (of d, or NULL: all) ends running trials without a final apply
 * and forgets what trials chose. */
void autotune_runner_forget(AutotuneRunner *t, Device *d);

/* GetDevice's "autotune" object, NULL if the device has no Auto* policy
 * and no trial ran. */
json_t *autotune_runner_device_json(AutotuneRunner *t, const Device *d);
/* One sentence for explain, NULL if nothing to say. */
char *autotune_runner_explain(AutotuneRunner *t, const Device *d);
/* Prometheus text: blkmqd_autotune_* families. */
void autotune_runner_metrics(AutotuneRunner *t, StrBuf *sb);
