/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The watch between trials: a tick every AUTOTUNE_RECALL_INTERVAL_USEC reads
 * each watched device's /sys/block/X/stat and hands it to the lookout
 * (autotune-lookout.c, pure), then carries out what it decided: a workload seen
 * before gets its setting back (recall), a chosen setting that broke its
 * bound falls back, a changed workload or AutoTrialIntervalSec= starts a
 * trial. It also makes and frees the tuner, whose timer it is. The trials
 * themselves are autotune-runner.c's. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune-report.h"
#include "autotune-runner.h"
#include "autotune-state.h"
#include "log.h"
#include "util.h"

/* A workload seen before is back: entry i of the disk's memory. */
static void recall_apply(AutotuneDevice *a, const AutotunePolicy *p, int i, const AutotuneSignature *sig) {
        const AutotuneMemoryDisk *mem = autotune_memory_disk(a->tuner, a->device, false);
        char w[AUTOTUNE_CANDIDATE_STRMAX], hm[16], origin[128], text[768];

        if (!mem || i < 0 || (size_t) i >= mem->n)
                return;
        const AutotuneMemory *e = &mem->m[i];
        /* The static keys are in force (the trial before kept them) and
         * already are what the workload's trial chose: recalled, but
         * nothing changes on the disk. */
        bool same = !a->has_choice && autotune_in_force(a, p, &e->cand);
        autotune_candidate_format(&e->cand, w, sizeof w);
        a->recalled_usec = now_usec(CLOCK_REALTIME);
        a->n_recalls++;
        snprintf(origin, sizeof origin, "workload seen by the trial at %s", autotune_clock_hm(e->realtime_usec, hm));
        snprintf(text, sizeof text,
                 "%s, recalled at %s: the workload (reads %.0f %% of I/Os, %.0f KiB, %.0f I/Os per second, %.1f in "
                 "flight) is one the trial at %s chose it for; no trial. AutoTune= wins over the static keys of these "
                 "knobs.",
                 w, autotune_clock_hm(a->recalled_usec, hm), sig->read_share * 100, sig->avg_kb, sig->iops, sig->depth,
                 autotune_clock_hm(e->realtime_usec, (char[16]) {}));
        if (same) {
                autotune_install_choice(a, &e->cand, origin, text, 0);
                log_info("%s: a workload seen before is back: %s, as the trial at %s chose for it, is in force "
                         "already.", a->device->sysname, w, autotune_clock_hm(e->realtime_usec, hm));
                autotune_emit(a);
                return;
        }
        autotune_install_choice(a, &e->cand, origin, text, now_usec(CLOCK_MONOTONIC));
        log_info("%s: a workload seen before is back: %s, as the trial at %s chose for it (no trial).",
                 a->device->sysname, w, autotune_clock_hm(e->realtime_usec, hm));
        (void) autotune_apply(a);
        autotune_emit(a);
}

/* The chosen setting broke the bound the trial chose it under: the watch
 * fell back; say so (log, Monitor, explain, GetDevice) and put the
 * fallback in place. */
static void promise_broken(AutotuneDevice *a, uint64_t now) {
        AutotuneRunner *t = a->tuner;
        const AutotuneLookout *wa = &a->watch;
        const AutotuneEngine *e = &a->trial;
        char w[AUTOTUNE_CANDIDATE_STRMAX], f[AUTOTUNE_CANDIDATE_STRMAX], hm[16], origin[128], text[768];

        autotune_candidate_format(&e->cand[e->decision.winner], w, sizeof w);
        autotune_candidate_format(&wa->fallback, f, sizeof f);
        /* the workload's memory gets the fallback, not the broken choice */
        AutotuneMemoryDisk *m = e->policy.remember ? autotune_memory_disk(t, a->device, true) : NULL;
        if (m) {
                autotune_memory_record(m->m, &m->n, &wa->promise.sig, &wa->fallback, now_usec(CLOCK_REALTIME));
                (void) autotune_memory_save(t);
        }
        snprintf(origin, sizeof origin, "fallback at %s", autotune_clock_hm(now_usec(CLOCK_REALTIME), hm));
        if (snprintf(text, sizeof text,
                     "%s, fallen back to at %s: %s, chosen by the trial, broke the bound it was chosen under: %.200s. "
                     "%s is the trial's candidate that kept the bound with the most margin%s.",
                     f, hm, w, wa->promise_why, f,
                     wa->fallback_index >= 0 ? "" : " (none did: the setting before the trial)") < 0)
                text[0] = 0;
        autotune_install_choice(a, &wa->fallback, origin, text, now);
        log_warning("%s: %s broke the bound the trial chose it under (%s); falling back to %s.", a->device->sysname, w,
                    wa->promise_why, f);
        (void) autotune_apply(a);
        autotune_emit(a);
}

static int on_watch(sd_event_source *s, uint64_t usec, void *userdata) {
        AutotuneRunner *t = userdata;
        Manager *m = t->manager;
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        char why[256];

        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                const AutotunePolicy *p;
                if (d->removed || !(p = autotune_device_policy(t, d)) || !p->enabled)
                        continue;
                const AutotuneMemoryDisk *mem = p->remember ? autotune_memory_disk(t, d, false) : NULL;
                AutotuneDevice *known = autotune_find(t, d);
                if (!p->interval_usec && !p->on_workload_change && (!mem || mem->n == 0) &&
                    !(known && known->watch.promising))
                        continue;
                AutotuneDevice *a = autotune_get(t, d);
                if (!a || autotune_running(a) || a->trial.phase == AUTOTUNE_TRIAL_FINISHING)
                        continue;
                AutotuneLookoutInput in = {
                        .policy = p,
                        .memory = mem ? mem->m : NULL,
                        .n_memory = mem ? mem->n : 0,
                        .has_choice = a->has_choice,
                        .choice = &a->choice,
                        .last_trial_mono = a->started_mono,
                        .now = now,
                };
                if (autotune_read_stat(d, &in.stat) < 0)
                        continue;
                AutotuneLookoutVerdict v = autotune_lookout_tick(&a->watch, &a->trial, &in,
                                                                 AUTOTUNE_RECALL_INTERVAL_USEC,
                                                                 AUTOTUNE_WATCH_INTERVAL_USEC);
                if (v.recall == AUTOTUNE_LOOKOUT_RECALL_APPLY) {
                        recall_apply(a, p, v.recall_index, &v.recall_sig);
                        continue;
                }
                if (v.promise == AUTOTUNE_LOOKOUT_PROMISE_BROKEN)
                        promise_broken(a, now);
                else if (v.promise == AUTOTUNE_LOOKOUT_PROMISE_HELD)
                        log_info("%s: the chosen setting %s: %s.", d->sysname,
                                 a->watch.promise_state == AUTOTUNE_PROMISE_HOLDS
                                         ? "kept the trial's bound"
                                         : "was not judged (too little of the workload)",
                                 a->watch.promise_why);
                if (!v.start)
                        continue;
                int r = autotune_runner_start(t, d, false, why, sizeof why);
                if (r == 0)
                        log_info("%s: trial started: %s.", d->sysname, v.start);
                else if (r == -EPERM)
                        log_debug("%s: %s, but no trial: %s.", d->sysname, v.start, why);
        }
        /* On the tick's own schedule, not from now, and with 1 ms of
         * slack (not a tenth of a tick): a recall comes within two ticks
         * of the workload's return, which is 10 s only if the ticks are
         * 5 s apart, not 5 s plus the timer's slack and this pass. */
        uint64_t next = usec + AUTOTUNE_RECALL_INTERVAL_USEC;
        sd_event_source_set_time(s, next > now_usec(CLOCK_MONOTONIC)
                                            ? next
                                            : now_usec(CLOCK_MONOTONIC) + AUTOTUNE_RECALL_INTERVAL_USEC);
        sd_event_source_set_enabled(s, SD_EVENT_ON);
        return 0;
}

int autotune_runner_new(AutotuneRunner **ret, Manager *m, Prober *prober) {
        AutotuneRunner *t = calloc(1, sizeof *t);
        int r;

        if (!t)
                return -ENOMEM;
        t->manager = m;
        t->prober = prober;
        r = sd_event_add_time_relative(m->event, &t->watch, CLOCK_MONOTONIC, AUTOTUNE_RECALL_INTERVAL_USEC, 1000,
                                       on_watch, t);
        if (r < 0) {
                free(t);
                return r;
        }
        *ret = t;
        return 0;
}

AutotuneRunner *autotune_runner_free(AutotuneRunner *t) {
        if (!t)
                return NULL;
        while (t->devices)
                autotune_device_free(t, t->devices);
        sd_event_source_disable_unref(t->watch);
        autotune_memory_free(t);
        free(t);
        return NULL;
}
