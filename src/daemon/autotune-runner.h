/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "manager.h"
#include "strbuf.h"

/* The trial runner of closed-loop tuning: the I/O driver of the trial engine
 * (trial-engine.h decides, autotune.c's statistics under it), and of the
 * watch between trials (autotune-watch.c, over trial-watch.h). It lives on
 * the event loop thread like everything the Manager owns; the Trial calls
 * are api-manager.c's, told of each trial's progress and end by a listener.
 * Candidates are applied by the Manager's ordinary tune path: the runner
 * only overlays the candidate on a device's resolved policy
 * (autotuner_overlay(), called by device_apply()) and asks for an apply, so
 * the sysfs writes run on the work pool in knob order and every change is
 * recorded as an original that restore and stop put back. Between applies
 * it reads /sys/block/X/stat (a small read, on the loop) at epoch ends. */

typedef struct AutoTuner AutoTuner;
struct Prober;

int autotuner_new(AutoTuner **ret, Manager *m, struct Prober *prober);
AutoTuner *autotuner_free(AutoTuner *t);

/* Manager events: applied jobs drive trials; removal ends them; hotplug may
 * start one. */
void autotuner_event(AutoTuner *t, ManagerEventType type, Device *d);

/* A trial of one device. forced: an operator asked (no dwell, no per-device
 * cap; the global cap holds). -EBUSY: one runs already (its news tells
 * its end); -EPERM with why: refused. */
int autotuner_start(AutoTuner *t, Device *d, bool forced, char *why, size_t why_size);

/* The news of a device's trial, for whoever answers for it (api-manager.c
 * holds the Trial calls): an epoch measured; the trial over (its setting
 * in place, or ended from outside: a restore, the device gone). The
 * trial's state is autotuner_trial_json() then. */
typedef enum AutoTrialNews {
        AUTOTUNER_TRIAL_PROGRESS,
        AUTOTUNER_TRIAL_DONE,
} AutoTrialNews;
typedef void (*AutoTrialListener)(Device *d, int news, void *userdata); /* news: an AutoTrialNews */
void autotuner_set_listener(AutoTuner *t, AutoTrialListener listener, void *userdata);
/* A trial of d runs, or its chosen setting is on its way: a DONE will come. */
bool autotuner_trial_pending(AutoTuner *t, const Device *d);
/* The device's trial as Trial gives it (an empty object: none). */
json_t *autotuner_trial_json(AutoTuner *t, const Device *d);

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
