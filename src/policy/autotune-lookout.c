/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The lookout: the watch's decisions between trials as a pure function of
 * its ticks (autotune-lookout.h): recall, the promise, the workload-change
 * detector and periodic trials. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "autotune-lookout.h"
#include "util.h"

void autotune_lookout_init(AutotuneLookout *w) {
        *w = (AutotuneLookout) { .fallback_index = -1 };
}

void autotune_lookout_promise(AutotuneLookout *w, const AutotuneEngine *trial, uint64_t now) {
        autotune_promise_make(&trial->policy, trial->series, trial->summary, trial->n_cand, trial->decision.winner,
                              &w->promise);
        w->has_promise = w->promising = true;
        w->promise_state = AUTOTUNE_PROMISE_WATCHING;
        w->promise_until = now + AUTOTUNE_PROMISE_USEC;
        w->n_promise_e = 0;
        w->fell_back = false;
        snprintf(w->promise_why, sizeof w->promise_why, "watching the chosen setting on the workload");
}

void autotune_lookout_remembered(AutotuneLookout *w, const AutotuneSignature *sig) {
        w->sig = w->prev_sig = *sig;
        w->has_sig = w->has_prev_sig = true;
        w->changed_samples = 0;
}

void autotune_lookout_restart(AutotuneLookout *w) {
        w->watch_mono = w->recall_mono = 0;
}

void autotune_lookout_forget(AutotuneLookout *w) {
        w->promising = false;
        w->has_sig = w->has_prev_sig = false;
        w->watch_mono = w->recall_mono = 0;
        w->changed_samples = 0;
}

/* A workload seen before is back (its signature is near one that a trial
 * chose for, and away from the one in force): its setting goes in at once,
 * with no trial and no dwell time. Not AUTOTUNE_LOOKOUT_RECALL_NONE: the change
 * detector has nothing to start. */
static AutotuneLookoutRecall recall(AutotuneLookout *w, const AutotuneLookoutInput *in, const AutotuneSignature *sig,
                                    int *ret_index) {
        const AutotunePolicy *p = in->policy;
        int i;

        if (!p->remember || !in->memory || in->n_memory == 0 ||
            (i = autotune_memory_find(in->memory, in->n_memory, sig, p->min_iops)) < 0)
                return AUTOTUNE_LOOKOUT_RECALL_NONE;
        /* It ran the interval before too: what is in force stays (a
         * trial's choice, or a restore's static keys until the workload
         * changes). At start the first interval counts as an arrival: the
         * daemon put the originals back when it stopped. */
        if (w->has_prev_sig && autotune_memory_find(in->memory, in->n_memory, &w->prev_sig, p->min_iops) == i)
                return AUTOTUNE_LOOKOUT_RECALL_KNOWN;
        w->sig = *sig;
        w->has_sig = true;
        w->changed_samples = 0;
        if (in->has_choice && autotune_candidate_equal(in->choice, &in->memory[i].cand))
                return AUTOTUNE_LOOKOUT_RECALL_KNOWN;
        w->promising = false; /* the trial's promise was of another workload */
        *ret_index = i;
        return AUTOTUNE_LOOKOUT_RECALL_APPLY;
}

/* After a change: one more watch interval of the chosen setting, judged
 * against the bound the trial admitted it under. Broken: it falls back to
 * the trial's admissible candidate with the most margin (the setting
 * before the trial if none), and the broken one is left out of the next
 * trials for an hour. */
static AutotuneLookoutPromise promise_tick(AutotuneLookout *w, AutotuneEngine *trial, const AutotuneLookoutInput *in,
                                      const AutotuneEpochFigures *e) {
        char why[256];

        if (!in->has_choice) {
                w->promising = false; /* restored, or the Auto* keys went: nothing of it is in force */
                return AUTOTUNE_LOOKOUT_PROMISE_QUIET;
        }
        if (w->n_promise_e < AUTOTUNE_PROMISE_MAX_INTERVALS)
                w->promise_e[w->n_promise_e++] = *e;
        AutotunePromiseState st = autotune_promise_check(&trial->policy, &w->promise, w->promise_e, w->n_promise_e, why,
                                                     sizeof why);
        if (st != AUTOTUNE_PROMISE_WATCHING)
                snprintf(w->promise_why, sizeof w->promise_why, "%s", why);
        w->promise_state = st;
        if (st == AUTOTUNE_PROMISE_BROKEN) {
                int fb = autotune_fallback(&trial->policy, trial->summary, trial->n_cand, trial->decision.winner);
                w->promising = false;
                w->fell_back = true;
                w->fallback_index = fb;
                w->fallback = trial->cand[fb >= 0 ? fb : 0];
                w->fallback.baseline = false;
                autotune_tripped_add(trial->tripped, &trial->n_tripped, &trial->cand[trial->decision.winner], in->now);
                return AUTOTUNE_LOOKOUT_PROMISE_BROKEN;
        }
        if (in->now >= w->promise_until) {
                w->promising = false;
                return AUTOTUNE_LOOKOUT_PROMISE_HELD;
        }
        return AUTOTUNE_LOOKOUT_PROMISE_QUIET;
}

/* Every tick: a workload seen before (recall()), from the figures of that
 * interval. Every watch interval: the promise, periodic trials
 * (AutoTrialIntervalSec=) and the workload-change detector
 * (AutoTrialOnWorkloadChange=): the signature of the last interval against
 * the one after the last trial; three changed intervals in a row start a
 * trial. */
AutotuneLookoutVerdict autotune_lookout_tick(AutotuneLookout *w, AutotuneEngine *trial, const AutotuneLookoutInput *in,
                                             uint64_t tick_usec, uint64_t watch_usec) {
        const AutotunePolicy *p = in->policy;
        AutotuneLookoutVerdict v = { .recall_index = -1 };
        uint64_t now = in->now;
        AutotuneEpochFigures e;
        AutotuneSignature sig;

        if (w->recall_mono) {
                autotune_epoch_figures(&w->recall_stat, &in->stat, now - w->recall_mono, &e);
                autotune_signature(&e, &sig);
                v.recall = e.valid ? recall(w, in, &sig, &v.recall_index) : AUTOTUNE_LOOKOUT_RECALL_NONE;
                w->prev_sig = sig;
                w->has_prev_sig = e.valid;
                w->known_workload = v.recall != AUTOTUNE_LOOKOUT_RECALL_NONE;
                if (v.recall == AUTOTUNE_LOOKOUT_RECALL_APPLY) {
                        v.recall_sig = sig;
                        w->recall_stat = w->watch_stat = in->stat;
                        w->recall_mono = w->watch_mono = now;
                        return v;
                }
        }
        w->recall_stat = in->stat;
        w->recall_mono = now;
        /* The rest every watch interval (a tick may come a little early). */
        if (w->watch_mono && now + tick_usec / 2 < w->watch_mono + watch_usec)
                return v;
        bool start = false;
        const char *reason = NULL;
        if (w->watch_mono) {
                autotune_epoch_figures(&w->watch_stat, &in->stat, now - w->watch_mono, &e);
                autotune_signature(&e, &sig);
                if (w->promising)
                        v.promise = promise_tick(w, trial, in, &e);
                if (!w->has_sig) {
                        w->sig = sig;
                        w->has_sig = true;
                } else if (p->on_workload_change && !w->known_workload &&
                           autotune_workload_changed(&w->sig, &sig, p->min_iops)) {
                        if (++w->changed_samples >= 3 && sig.iops >= p->min_iops) {
                                start = true;
                                reason = "workload changed";
                        }
                } else
                        w->changed_samples = 0;
                if (start) {
                        w->sig = sig;
                        trial->n_tripped = 0; /* another workload: what tripped may do well now */
                }
        }
        w->watch_stat = in->stat;
        w->watch_mono = now;
        if (!start && p->interval_usec && in->last_trial_mono && now >= in->last_trial_mono + p->interval_usec) {
                start = true;
                reason = "AutoTrialIntervalSec=";
        }
        if (!start)
                return v;
        w->changed_samples = 0;
        v.start = reason;
        return v;
}
