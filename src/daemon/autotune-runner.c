/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autotune-report.h"
#include "autotune-runner.h"
#include "autotune-state.h"
#include "autotune.h"
#include "knobs.h"
#include "log.h"
#include "message-id.h"
#include "metrics-text.h"
#include "probe.h"
#include "strbuf.h"
#include "sysfs.h"
#include "util.h"
#include "varlink.h"

#define HOTPLUG_DELAY_USEC 10000000ULL /* a new disk gets its workload first */
#define WATCH_INTERVAL_USEC 10000000ULL /* periodic and workload-change checks */
/* The watch ticks this often: a workload seen before is recalled from the
 * figures of one such interval, so that it is back at its setting within
 * two of them (10 s) of its start; the other checks run every
 * WATCH_INTERVAL_USEC. */
#define RECALL_INTERVAL_USEC 5000000ULL
/* µs: probes run faster during a trial, for a read p99 per epoch (up to
 * 100 probes in an epoch of 2 s; AUTOTUNE_P99_MIN_PROBES make it count). */
#define TRIAL_PROBE_INTERVAL "20000"

const AutoTunePolicy *autotune_device_policy(AutoTuner *t, const Device *d) {
        const Config *c = t->manager->config;
        const AutoTunePolicy *p = NULL;

        /* The last matched [Device] section with Auto* keys wins as a whole. */
        for (size_t i = 0; i < c->n_devices; i++)
                if (c->devices[i].autotune.set && strv_contains(d->resolved.matched, c->devices[i].name))
                        p = &c->devices[i].autotune;
        return p;
}

AutoDevice *autotune_find(AutoTuner *t, const Device *d) {
        for (AutoDevice *a = t->devices; a; a = a->next)
                if (a->device == d)
                        return a;
        return NULL;
}

static AutoDevice *get(AutoTuner *t, Device *d) {
        AutoDevice *a = autotune_find(t, d);
        if (a)
                return a;
        a = calloc(1, sizeof *a);
        if (!a)
                return NULL;
        a->tuner = t;
        a->device = d;
        trial_engine_init(&a->trial, d->sysname);
        a->generation = d->generation;
        a->next = t->devices;
        t->devices = a;
        return a;
}

static void calls_finish(AutoDevice *a, json_t *reply) {
        for (size_t i = 0; i < a->n_calls; i++) {
                if (reply && varlink_call_is_connected(a->calls[i]))
                        (void) varlink_call_reply(a->calls[i], json_incref(reply));
                varlink_call_unref(a->calls[i]);
        }
        a->calls = mfree(a->calls);
        a->n_calls = 0;
        json_decref(reply);
}

static void auto_device_free(AutoTuner *t, AutoDevice *a) {
        for (AutoDevice **p = &t->devices; *p; p = &(*p)->next)
                if (*p == a) {
                        *p = a->next;
                        break;
                }
        a->timer = sd_event_source_disable_unref(a->timer);
        a->hotplug_timer = sd_event_source_disable_unref(a->hotplug_timer);
        calls_finish(a, NULL);
        trial_engine_done(&a->trial);
        free(a->probe0);
        free(a->cand_hist);
        free(a->trial_h0);
        free(a);
}

bool autotune_running(const AutoDevice *a) {
        return trial_engine_running(&a->trial);
}

static int read_stat(const Device *d, BlockStat *ret) {
        _cleanup_free_ char *p = path_join(d->info->blockdir, "stat"), *text = NULL;
        int r;
        if (!p)
                return -ENOMEM;
        r = sysfs_read(p, &text);
        if (r < 0)
                return r;
        return blockstat_parse(text, ret);
}

/* The device's probe latencies so far (NULL: not probed). */
static const Hist *probe_hist(const AutoTuner *t, const Device *d) {
        ProbeTarget *pt = t->prober ? prober_find(t->prober, d->sysname) : NULL;
        return pt && pt->lat ? &pt->lat->total : NULL;
}

/* Notes the probe latencies at an epoch's start. */
static void probe_mark(AutoDevice *a) {
        const Hist *h = probe_hist(a->tuner, a->device);

        if (!h) {
                a->probe0 = mfree(a->probe0);
                return;
        }
        if (!a->probe0 && !(a->probe0 = malloc(sizeof *a->probe0)))
                return; /* no p99 for this epoch: the trial falls back to the mean await */
        *a->probe0 = *h;
}

/* The p99 of the probes since probe_mark(), in ms; 0 with fewer than
 * AUTOTUNE_P99_MIN_PROBES. */
static double probe_p99_ms(AutoDevice *a) {
        const Hist *h = probe_hist(a->tuner, a->device);
        Hist d;
        uint64_t ns;

        if (!h || !a->probe0 || hist_diff(&d, h, a->probe0) < 0 || d.count < AUTOTUNE_P99_MIN_PROBES ||
            hist_percentile(&d, 99, &ns) < 0)
                return 0;
        return (double) ns / 1e6;
}

/* The most probes an epoch of usec can hold: one in flight at a time,
 * started at most every interval less its jitter (at most half of it,
 * probe.c); 0 without probes. */
static uint64_t probes_max(const AutoTuner *t, const Device *d, uint64_t usec) {
        ProbeTarget *pt = t->prober ? prober_find(t->prober, d->sysname) : NULL;
        if (!pt || pt->config.interval_usec == 0)
                return 0;
        uint64_t iv = pt->config.interval_usec, j = pt->config.jitter_usec;
        uint64_t step = iv - (j > iv / 2 ? iv / 2 : j);
        return step ? usec / step + 1 : 0;
}

/* A look at the probes of the epoch so far, against the engine's
 * far-worse limit: how many, how many above it, their p99, and the most
 * an epoch (and a look's slack: its end may come a little late) can hold.
 * n = 0: nothing to look at. */
static TrialPeek peek_figures(AutoDevice *a, uint64_t now) {
        const Hist *h = probe_hist(a->tuner, a->device);
        uint64_t n_max = probes_max(a->tuner, a->device, a->trial.policy.epoch_usec + TRIAL_PEEK_USEC), ns;
        TrialPeek pk = { .now = now, .n_max = n_max };
        Hist d;

        if (!h || !a->probe0 || n_max == 0 || hist_diff(&d, h, a->probe0) < 0 || d.count == 0)
                return pk;
        pk.n = d.count;
        pk.above = d.count - hist_count_le(&d, (uint64_t) (a->trial.peek_limit_ms * 1e6));
        if (hist_percentile(&d, 99, &ns) >= 0)
                pk.p99_ms = (double) ns / 1e6;
        return pk;
}

/* Adds the probes of the epoch just ended to candidate c's pool. */
static void probe_pool(AutoDevice *a, size_t c) {
        const Hist *h = probe_hist(a->tuner, a->device);
        Hist d;

        if (h && a->probe0 && a->cand_hist && hist_diff(&d, h, a->probe0) >= 0)
                hist_merge(&a->cand_hist[c], &d);
}

/* The p99 of a pool in ms; 0 with fewer than AUTOTUNE_P99_MIN_PROBES. */
static double hist_p99_ms(const Hist *h) {
        uint64_t ns;
        if (!h || h->count < AUTOTUNE_P99_MIN_PROBES || hist_percentile(h, 99, &ns) < 0)
                return 0;
        return (double) ns / 1e6;
}

/* The price of the trial for the workload's reads: the probes' p99 during
 * it (every probe from its first epoch to its end, the settling between
 * candidates included) against the setting before it and the one in force
 * after it, each over its own epochs at the trial's probe rate. */
static void price_compute(AutoDevice *a) {
        const Hist *h = probe_hist(a->tuner, a->device);
        Hist d;

        a->p99_before = a->p99_during = a->p99_after = 0;
        if (!a->cand_hist)
                return;
        a->p99_before = a->trial.search && a->trial.n_phases > 0 ? a->p99_before0 : hist_p99_ms(&a->cand_hist[0]);
        a->p99_after = hist_p99_ms(&a->cand_hist[a->trial.decision.winner]);
        if (h && a->trial_h0 && hist_diff(&d, h, a->trial_h0) >= 0)
                a->p99_during = hist_p99_ms(&d);
}

/* Read errors of the device's latency probes so far (0 without probes):
 * the guard rail's I/O errors. */
static uint64_t probe_errors(const AutoTuner *t, const Device *d) {
        if (!t->prober)
                return 0;
        for (size_t i = 0; i < prober_count(t->prober); i++) {
                const ProbeTarget *pt = prober_get(t->prober, i);
                if (streq(pt->sysname, d->sysname))
                        return pt->n_errors;
        }
        return 0;
}

static void emit(AutoDevice *a) {
        Manager *m = a->tuner->manager;
        manager_notify(m, MANAGER_EVENT_TRIAL, a->device);
}

static void progress(AutoDevice *a) {
        trial_engine_summarise(&a->trial);
        for (size_t i = 0; i < a->n_calls; i++)
                if (varlink_call_wants_more(a->calls[i]) && varlink_call_is_connected(a->calls[i]))
                        (void) varlink_call_notify(a->calls[i], json_pack("{s:s, s:o}", "device", a->device->sysname,
                                                                           "trial", autotune_trial_json(a)));
}

/* ---- the trial: the engine's I/O driver ---- */

/* What the trial chose (or kept) for the workload it measured, for when
 * that workload comes back. Not after an abort, an idle disk or too few
 * epochs: those learned nothing of it. */
static void remember(AutoDevice *a) {
        const TrialEngine *e = &a->trial;
        AutoVerdict v = e->decision.verdict;
        AutoSignature sig;
        AutoMemoryDisk *m;

        if (!e->policy.remember || e->aborted ||
            (v != AUTO_VERDICT_CHANGE && v != AUTO_VERDICT_KEEP_BEST && v != AUTO_VERDICT_KEEP_NOISE &&
             v != AUTO_VERDICT_KEEP_HYSTERESIS) ||
            !autotune_series_signature(e->series, e->n_cand, &sig) || sig.iops < e->policy.min_iops)
                return;
        m = autotune_memory_disk(a->tuner, a->device, true);
        if (!m)
                return;
        autotune_memory_record(m->m, &m->n, &sig, &e->cand[e->decision.winner], now_usec(CLOCK_REALTIME));
        (void) autotune_memory_save(a->tuner);
        /* the workload the watch compares with from now on; it is in
         * force, not arriving */
        a->sig = a->prev_sig = sig;
        a->has_sig = a->has_prev_sig = true;
        a->changed_samples = 0;
}

/* The probes of a search's phases: the first phase's p99 of the setting
 * before the trial is the trial's "before"; a phase begun anew (apply)
 * pools its candidates' probes afresh. */
static void sync_phases(AutoDevice *a, bool apply) {
        if (a->seen_phases == 0 && a->trial.n_phases > 0 && a->cand_hist)
                a->p99_before0 = hist_p99_ms(&a->cand_hist[0]);
        if (apply && a->trial.n_phases != a->seen_phases)
                for (size_t c = 0; a->cand_hist && c < AUTOTUNE_MAX_CANDIDATES; c++)
                        hist_reset(&a->cand_hist[c]);
        a->seen_phases = a->trial.n_phases;
}

static void finish(AutoDevice *a);
static int on_timer(sd_event_source *s, uint64_t usec, void *userdata);
static TrialAction on_wait(AutoDevice *a, TrialWait w);

/* Carries out what the engine asks, until it waits for an event. */
static void carry_out(AutoDevice *a, TrialAction act) {
        char why[256];
        int r;

        for (;;)
                switch (act.what) {
                case TRIAL_DO_NOTHING:
                        return;
                case TRIAL_DO_APPLY:
                        sync_phases(a, true);
                        r = manager_apply(a->tuner->manager, a->device);
                        if (r < 0) {
                                snprintf(why, sizeof why, "cannot apply: %s", strerror(-r));
                                act = trial_engine_abort(&a->trial, why);
                        } else if (!a->device->busy)
                                /* no job: the device matches no section any more
                                 * (a loop device detached from its file, say) */
                                act = trial_engine_abort(&a->trial, "the device no longer matches its policy");
                        else
                                return;
                        break;
                case TRIAL_DO_WAIT:
                        if (act.usec == 0) {
                                act = on_wait(a, act.wait);
                                break;
                        }
                        a->timer = sd_event_source_disable_unref(a->timer);
                        a->timer_wait = act.wait;
                        r = sd_event_add_time_relative(a->tuner->manager->event, &a->timer, CLOCK_MONOTONIC, act.usec,
                                                       1000, on_timer, a);
                        if (r >= 0)
                                return;
                        snprintf(why, sizeof why, "cannot arm a timer: %s", strerror(-r));
                        act = trial_engine_abort(&a->trial, why);
                        break;
                case TRIAL_DO_NEXT:
                        progress(a);
                        act = trial_engine_next(&a->trial, now_usec(CLOCK_MONOTONIC));
                        break;
                case TRIAL_DO_FINISH:
                        sync_phases(a, false);
                        finish(a);
                        return;
                }
}

/* The event a wait was for. */
static TrialAction on_wait(AutoDevice *a, TrialWait w) {
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        BlockStat st;
        int r;

        switch (w) {
        case TRIAL_WAIT_SETTLE: {
                r = read_stat(a->device, &st);
                TrialAction act = trial_engine_settled(&a->trial, r < 0 ? NULL : &st, r,
                                                       probe_hist(a->tuner, a->device) != NULL, now);
                if (a->trial.phase == TRIAL_MEASURING && act.what == TRIAL_DO_WAIT && act.wait != TRIAL_WAIT_SETTLE) {
                        /* the epoch begins: its probes from here */
                        a->probe_errors0 = probe_errors(a->tuner, a->device);
                        probe_mark(a);
                }
                return act;
        }
        case TRIAL_WAIT_PEEK: {
                TrialPeek pk = peek_figures(a, now);
                return trial_engine_peek(&a->trial, &pk);
        }
        case TRIAL_WAIT_EPOCH:
                r = read_stat(a->device, &st);
                if (r >= 0)
                        probe_pool(a, a->trial.current);
                return trial_engine_epoch(&a->trial, r < 0 ? NULL : &st, r,
                                          (unsigned) (probe_errors(a->tuner, a->device) - a->probe_errors0),
                                          probe_p99_ms(a), now);
        }
        return (TrialAction) { .what = TRIAL_DO_NOTHING };
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        AutoDevice *a = userdata;

        a->timer = sd_event_source_disable_unref(a->timer);
        carry_out(a, on_wait(a, a->timer_wait));
        return 0;
}

/* The trial's chosen setting becomes what is in force: the choice, where
 * it came from and explain's sentence of it; the change is counted. */
static void install_choice(AutoDevice *a, const AutoCandidate *c, const char *origin, const char *text,
                           uint64_t now) {
        a->choice = *c;
        a->choice.baseline = false;
        a->has_choice = true;
        a->choice_trial = a->n_trials;
        snprintf(a->origin, sizeof a->origin, "%s", origin);
        snprintf(a->choice_text, sizeof a->choice_text, "%s", text);
        a->history.last_change_usec = now;
        a->n_changes++;
        a->tuner->n_changes++;
}

/* The engine decided (or aborted): what the daemon makes of it. */
static void finish(AutoDevice *a) {
        Device *d = a->device;
        AutoTuner *t = a->tuner;
        TrialEngine *e = &a->trial;
        char w[AUTOTUNE_CANDIDATE_STRMAX], b[AUTOTUNE_CANDIDATE_STRMAX], hm[16], origin[128], text[768];

        a->ended_usec = now_usec(CLOCK_REALTIME);
        a->timer = sd_event_source_disable_unref(a->timer);
        price_compute(a);
        remember(a);
        /* the watch's next interval starts after the trial, not across it */
        a->watch_mono = a->recall_mono = 0;
        const AutoCandidate *chosen = &e->cand[e->decision.winner];
        autotune_candidate_format(chosen, w, sizeof w);
        autotune_candidate_format(&e->cand[0], b, sizeof b);
        if (e->decision.verdict == AUTO_VERDICT_CHANGE) {
                snprintf(origin, sizeof origin, "trial at %s", autotune_clock_hm(a->ended_usec, hm));
                const AutoSummary *sw = &e->summary[e->decision.winner], *s0 = &e->summary[0];
                double dw = s0->write_mbps > 0 ? (sw->write_mbps - s0->write_mbps) / s0->write_mbps * 100 : 0;
                if (e->search) {
                        autotune_candidate_format(&e->origin0, b, sizeof b);
                        if (snprintf(text, sizeof text,
                                     "%s, chosen by %s over %s: a search by families, %u candidates measured in %u "
                                     "phases (%.200s). AutoTune= wins over the static keys of these knobs.",
                                     w, origin, b, e->n_measured, e->n_phases, e->phases_text) < 0)
                                text[0] = 0;
                } else if (snprintf(text, sizeof text,
                         "%s, chosen by %s: read %s %.2f ms against %.2f ms for %s, write throughput %+.0f %%; "
                         "confidence %.1f %%. AutoTune= wins over the static keys of these knobs.",
                         w, origin, e->decision.by_p99 ? "p99" : "await",
                         e->decision.by_p99 ? sw->read_p99_ms : sw->read_await_ms,
                         e->decision.by_p99 ? s0->read_p99_ms : s0->read_await_ms, b, dw,
                         e->decision.confidence * 100) < 0)
                        text[0] = 0;
                install_choice(a, chosen, origin, text, now_usec(CLOCK_MONOTONIC));
                autotune_promise_make(&e->policy, e->series, e->summary, e->n_cand, e->decision.winner, &a->promise);
                a->has_promise = a->promising = true;
                a->promise_state = AUTO_PROMISE_WATCHING;
                a->promise_until = now_usec(CLOCK_MONOTONIC) + AUTOTUNE_PROMISE_USEC;
                a->n_promise_e = 0;
                a->fell_back = false;
                snprintf(a->promise_why, sizeof a->promise_why, "watching the chosen setting on the workload");
                log_struct(LOG_INFO, BLKMQD_MESSAGE_TRIAL_DECISION,
                           LOG_FIELDS({ "BLKMQD_DEVICE", d->sysname }, { "BLKMQD_VERDICT", auto_verdict_to_string(e->decision.verdict) },
                                      { "BLKMQD_OLD", b }, { "BLKMQD_NEW", w }, { "BLKMQD_REASON", e->decision.reason }),
                           "%s: trial chose %s over %s: %s (switches %u, apply time %" PRIu64 " ms).", d->sysname, w, b,
                           e->decision.reason, e->switches, e->apply_usec / 1000);
        } else {
                /* Keep what was there; a choice of an earlier trial stays. */
                if (e->decision.verdict == AUTO_VERDICT_ABORTED)
                        t->n_aborted++;
                log_struct(LOG_INFO, BLKMQD_MESSAGE_TRIAL_DECISION,
                           LOG_FIELDS({ "BLKMQD_DEVICE", d->sysname }, { "BLKMQD_VERDICT", auto_verdict_to_string(e->decision.verdict) },
                                      { "BLKMQD_OLD", b }, { "BLKMQD_NEW", b }, { "BLKMQD_REASON", e->decision.reason }),
                           "%s: trial kept %s: %s: %s.", d->sysname, b, auto_verdict_to_string(e->decision.verdict),
                           e->decision.reason);
        }
        /* Put the chosen (or the kept) setting in place (the engine made
         * it cand[current]); the callers get their reply once it is
         * (autotuner_event()). */
        emit(a);
        /* No job (the device no longer matches a section, or the apply
         * failed): nothing to wait for. */
        if (manager_apply(t->manager, d) < 0 || !d->busy) {
                trial_engine_finished(e);
                calls_finish(a, json_pack("{s:s, s:o}", "device", d->sysname, "trial", autotune_trial_json(a)));
        }
}

/* Ends a running trial at once, from outside it (a restore, the device
 * removed or replaced): no setting is applied; its calls get the trial as it
 * stands. */
static void end_trial_now(AutoDevice *a, const char *reason) {
        trial_engine_end_now(&a->trial, reason);
        a->timer = sd_event_source_disable_unref(a->timer);
        a->ended_usec = now_usec(CLOCK_REALTIME);
        calls_finish(a, json_pack("{s:s, s:o}", "device", a->device->sysname, "trial", autotune_trial_json(a)));
}

/* Whether knob k is one candidate c sets (its refusal refuses c). */
static bool trial_knob(const AutoCandidate *c, int k) {
        if (k == KNOB_SCHEDULER || k == KNOB_NR_REQUESTS || k == KNOB_WBT_LAT_USEC)
                return true;
        if (k == KNOB_READ_AHEAD_KB)
                return c->set & AUTO_SET_READ_AHEAD;
        for (AutoTunable t = 0; t < _AUTO_TUN_MAX; t++)
                if ((c->set & (1U << t)) && autotune_tunable_info(t)->knob == k)
                        return true;
        return false;
}

/* The job of a candidate came back. */
static void on_applied(AutoDevice *a) {
        Device *d = a->device;
        const TuneJob *j = d->last;
        TrialApplied ev = {};

        /* A job that was running when the candidate was asked for came
         * back; the candidate's own job follows (dirty). */
        if (!j || d->dirty)
                return;
        ev.usec = j->usec;
        for (size_t i = 0; i < j->n_entries; i++) {
                const TuneEntry *te = &j->entries[i];
                if (!trial_knob(&a->trial.cand[a->trial.current], te->knob))
                        continue;
                if (te->outcome == TUNE_FAILED)
                        ev.refused = true;
                if (te->knob == KNOB_SCHEDULER && te->outcome == TUNE_CHANGED)
                        ev.switches++;
        }
        ev.device_error = j->device_error;
        ev.have_stat = !ev.refused && !ev.device_error && read_stat(d, &ev.stat) >= 0;
        ev.now = now_usec(CLOCK_MONOTONIC);
        carry_out(a, trial_engine_applied(&a->trial, &ev));
}

static int current_setting(const Device *d, const AutoTunePolicy *p, AutoCandidate *ret, char **ret_line) {
        _cleanup_free_ char *ps = path_join(d->info->blockdir, "queue/scheduler"), *line = NULL, *act = NULL;
        int r;

        *ret = (AutoCandidate) { .wbt_lat_usec = AUTO_WBT_UNSET, .baseline = true };
        if (!ps)
                return -ENOMEM;
        r = sysfs_read(ps, &line);
        if (r < 0)
                return r;
        act = scheduler_active(line);
        if (!act)
                return -EOPNOTSUPP; /* bio-based: nothing to choose */
        r = scheduler_line_add_loadable(&line); /* a module not loaded yet is a candidate */
        if (r < 0)
                return r;
        snprintf(ret->scheduler, sizeof ret->scheduler, "%s", act);
        if (p->n_nr_requests && !streq(act, "none")) {
                _cleanup_free_ char *pn = path_join(d->info->blockdir, "queue/nr_requests");
                long long v;
                if (pn && sysfs_read_int(pn, &v) >= 0 && v > 0)
                        ret->nr_requests = (unsigned) v;
        }
        if (p->n_wbt_lat_usec || (p->knobs & (1U << AUTO_FAMILY_WBT))) {
                _cleanup_free_ char *pw = path_join(d->info->blockdir, "queue/wbt_lat_usec");
                long long v;
                if (pw && sysfs_read_int(pw, &v) >= 0)
                        ret->wbt_lat_usec = v;
        }
        if ((p->knobs & (1U << AUTO_FAMILY_NR_REQUESTS)) && !ret->nr_requests && !streq(act, "none")) {
                _cleanup_free_ char *pn = path_join(d->info->blockdir, "queue/nr_requests");
                long long v;
                if (pn && sysfs_read_int(pn, &v) >= 0 && v > 0)
                        ret->nr_requests = (unsigned) v;
        }
        if (p->knobs & (1U << AUTO_FAMILY_READ_AHEAD)) {
                _cleanup_free_ char *pr = path_join(d->info->blockdir, "queue/read_ahead_kb");
                long long v;
                if (pr && sysfs_read_int(pr, &v) >= 0 && v >= 0) {
                        ret->read_ahead_kb = (unsigned) v;
                        ret->set |= AUTO_SET_READ_AHEAD;
                }
        }
        /* the tunables of the scheduler in force, as they are: the search's
         * incumbent is written back with them */
        for (AutoTunable t = 0; (p->knobs & (1U << AUTO_FAMILY_IOSCHED)) && t < _AUTO_TUN_MAX; t++) {
                const AutoTunableInfo *ti = autotune_tunable_info(t);
                _cleanup_free_ char *pt = NULL;
                long long v;
                if (!streq(ti->scheduler, act) || !(pt = path_join(d->info->blockdir, knob_info(ti->knob)->attribute)))
                        continue;
                if (sysfs_read_int(pt, &v) >= 0) {
                        ret->tun[t] = v;
                        ret->set |= 1U << t;
                }
        }
        *ret_line = TAKE_PTR(line);
        return 0;
}

/* Whether every knob c sets has that value on the device now. */
static bool setting_in_force(const Device *d, const AutoTunePolicy *p, const AutoCandidate *c) {
        _cleanup_free_ char *line = NULL;
        AutoCandidate cur;

        if (current_setting(d, p, &cur, &line) < 0 || !streq(cur.scheduler, c->scheduler))
                return false;
        if (c->nr_requests && c->nr_requests != cur.nr_requests)
                return false;
        if (c->wbt_lat_usec != AUTO_WBT_UNSET && c->wbt_lat_usec != cur.wbt_lat_usec)
                return false;
        if ((c->set & AUTO_SET_READ_AHEAD) && (!(cur.set & AUTO_SET_READ_AHEAD) || c->read_ahead_kb != cur.read_ahead_kb))
                return false;
        for (size_t t = 0; t < _AUTO_TUN_MAX; t++)
                if ((c->set & (1U << t)) && (!(cur.set & (1U << t)) || c->tun[t] != cur.tun[t]))
                        return false;
        return true;
}

/* call (NULL: none) gets the replies of the device's trial. */
static int add_call(AutoDevice *a, VarlinkCall *call) {
        VarlinkCall **c;

        if (!call)
                return 0;
        c = realloc(a->calls, sizeof *c * (a->n_calls + 1));
        if (!c)
                return -ENOMEM;
        a->calls = c;
        a->calls[a->n_calls++] = varlink_call_ref(call);
        return 0;
}

/* A new trial: the driver's counters and clocks, its probes, and the caps'
 * history. */
static void trial_begin(AutoDevice *a) {
        AutoTuner *t = a->tuner;

        a->p99_before = a->p99_during = a->p99_after = 0;
        a->p99_before0 = 0;
        a->seen_phases = 0;
        free(a->trial_h0);
        a->trial_h0 = NULL;
        const Hist *h = probe_hist(t, a->device);
        if (h && (a->trial_h0 = malloc(sizeof *a->trial_h0)))
                *a->trial_h0 = *h;
        free(a->cand_hist);
        a->cand_hist = calloc(AUTOTUNE_MAX_CANDIDATES, sizeof *a->cand_hist);
        for (size_t c = 0; a->cand_hist && c < AUTOTUNE_MAX_CANDIDATES; c++)
                hist_reset(&a->cand_hist[c]);
        a->promising = a->has_promise = a->fell_back = false;
        a->started_usec = now_usec(CLOCK_REALTIME);
        a->started_mono = now_usec(CLOCK_MONOTONIC);
        a->ended_usec = 0;
        a->n_trials++;
        t->n_trials++;
        autotune_history_add(&a->history, a->started_mono);
        autotune_history_add(&t->global, a->started_mono);
}

int autotuner_start(AutoTuner *t, Device *d, bool forced, VarlinkCall *call, char *why, size_t why_size) {
        Manager *m = t->manager;
        const AutoTunePolicy *p = autotune_device_policy(t, d);
        AutoDevice *a;
        _cleanup_free_ char *line = NULL;
        AutoCandidate cur;
        int r;

        if (!p || (!p->schedulers[0] && !p->n_nr_requests && !p->n_wbt_lat_usec && !p->knobs)) {
                snprintf(why, why_size, "no bounds: the matched [Device] sections set none of AutoScheduler=, "
                                        "AutoNrRequests=, AutoWbtLatUsec=, AutoKnobs=");
                return -EPERM;
        }
        if (m->state != MANAGER_RUNNING) {
                snprintf(why, why_size, "the daemon is not running (starting, reloading or stopping)");
                return -EPERM;
        }
        a = get(t, d);
        if (!a)
                return -ENOMEM;
        if (autotune_running(a) || a->trial.phase == TRIAL_FINISHING) {
                /* joined: it gets the running trial's replies */
                r = add_call(a, call);
                return r < 0 ? r : -EBUSY;
        }
        if (!autotune_may_start(p, &a->history, &t->global, m->config->daemon.autotune_trials_per_hour,
                                now_usec(CLOCK_MONOTONIC), forced, why, why_size))
                return -EPERM;
        r = current_setting(d, p, &cur, &line);
        if (r < 0) {
                snprintf(why, why_size, "cannot read the current setting: %s", strerror(-r));
                return -EPERM;
        }
        TrialSetup setup = {
                .policy = p,
                .current = cur,
                .scheduler_line = line,
                .zoned = d->info->zoned && !streq(d->info->zoned, "none"),
                .kernel_version = m->tune.kernel_version,
                .forced = forced,
                .now = now_usec(CLOCK_MONOTONIC),
        };
        r = trial_engine_start(&a->trial, &setup, why, why_size);
        if (r < 0)
                return r;
        trial_begin(a);
        r = add_call(a, call);
        if (r < 0)
                return r;
        log_info("%s: trial of %zu settings, %u rounds of %.1f s epochs (%s%s%s).", d->sysname, a->trial.n_cand,
                 p->rounds, (double) p->epoch_usec / 1e6, forced ? "asked for" : "automatic",
                 a->trial.note[0] ? "; " : "", a->trial.note);
        emit(a);
        carry_out(a, trial_engine_begin(&a->trial, now_usec(CLOCK_MONOTONIC)));
        return 0;
}

static int on_hotplug_timer(sd_event_source *s, uint64_t usec, void *userdata);

static void arm_hotplug_trial(AutoDevice *a) {
        if (a->hotplug_timer)
                return;
        (void) sd_event_add_time_relative(a->tuner->manager->event, &a->hotplug_timer, CLOCK_MONOTONIC,
                                          HOTPLUG_DELAY_USEC, 100000, on_hotplug_timer, a);
}

/* Another disk appeared under d's name (a loop device attached to another
 * file, a disk swapped into the slot): what the trials learned was of the
 * old one. Its choice, the candidates that tripped, the workload signature
 * go, a running trial ends, and a hotplug trial is due as for a new disk. */
static void check_replaced(AutoTuner *t, Device *d) {
        const AutoTunePolicy *p = autotune_device_policy(t, d);
        AutoDevice *a = autotune_find(t, d);

        if (!a && (!p || !p->enabled || !p->on_hotplug || d->generation == 0))
                return;
        if (!a) {
                a = get(t, d);
                if (!a)
                        return;
                a->generation = d->generation - 1;
        }
        if (a->generation == d->generation)
                return;
        a->generation = d->generation;
        log_info("%s: another disk (%s): what earlier trials found is dropped.", d->sysname, d->info->id);
        if (autotune_running(a))
                end_trial_now(a, "another disk appeared under the name");
        trial_engine_finished(&a->trial);
        a->has_choice = false;
        a->promising = false;
        a->trial.n_tripped = 0;
        autotune_memory_forget(t, d);
        a->has_sig = a->has_prev_sig = false;
        a->watch_mono = a->recall_mono = 0;
        a->changed_samples = 0;
        if (p && p->enabled && p->on_hotplug)
                arm_hotplug_trial(a);
}

void autotuner_overlay(AutoTuner *t, Device *d, Resolved *r) {
        AutoDevice *a;
        const AutoCandidate *c = NULL;
        const char *section = "AutoTune";
        const char *origin;

        check_replaced(t, d);
        a = autotune_find(t, d);
        if (!a)
                return;
        if (!autotune_device_policy(t, d)) {
                /* The Auto* keys are gone (reload), or the device matches
                 * no section any more: so is what they chose. A running
                 * trial ends at its next apply (no job). */
                a->has_choice = false;
                return;
        }
        if (a->trial.phase != TRIAL_IDLE && a->trial.phase != TRIAL_FINISHING) {
                c = &a->trial.cand[a->trial.current];
                origin = "trial running";
        } else if (a->has_choice) {
                c = &a->choice;
                origin = a->origin;
        } else if (a->trial.phase == TRIAL_FINISHING) {
                c = &a->trial.cand[a->trial.current]; /* the setting before the trial */
                origin = "trial kept the setting before it";
        } else
                return;

        free(r->value[KNOB_SCHEDULER]);
        r->value[KNOB_SCHEDULER] = strdup(c->scheduler);
        r->section[KNOB_SCHEDULER] = section;
        r->origin[KNOB_SCHEDULER] = origin;
        if (c->nr_requests || streq(c->scheduler, "none")) {
                /* none: never write nr_requests (it shrinks the driver tags) */
                free(r->value[KNOB_NR_REQUESTS]);
                r->value[KNOB_NR_REQUESTS] = NULL;
                if (c->nr_requests && asprintf(&r->value[KNOB_NR_REQUESTS], "%u", c->nr_requests) < 0)
                        r->value[KNOB_NR_REQUESTS] = NULL;
                r->section[KNOB_NR_REQUESTS] = c->nr_requests ? section : NULL;
                r->origin[KNOB_NR_REQUESTS] = c->nr_requests ? origin : NULL;
        }
        if (c->wbt_lat_usec != AUTO_WBT_UNSET) {
                free(r->value[KNOB_WBT_LAT_USEC]);
                if (asprintf(&r->value[KNOB_WBT_LAT_USEC], "%lld", c->wbt_lat_usec) < 0)
                        r->value[KNOB_WBT_LAT_USEC] = NULL;
                r->section[KNOB_WBT_LAT_USEC] = section;
                r->origin[KNOB_WBT_LAT_USEC] = origin;
        }
        if (c->set & AUTO_SET_READ_AHEAD) {
                free(r->value[KNOB_READ_AHEAD_KB]);
                if (asprintf(&r->value[KNOB_READ_AHEAD_KB], "%u", c->read_ahead_kb) < 0)
                        r->value[KNOB_READ_AHEAD_KB] = NULL;
                r->section[KNOB_READ_AHEAD_KB] = section;
                r->origin[KNOB_READ_AHEAD_KB] = origin;
        }
        /* a scheduler's own tunables: planned after the scheduler (knob
         * order) and written only while it is the active one (tune.c) */
        for (AutoTunable tu = 0; tu < _AUTO_TUN_MAX; tu++) {
                const AutoTunableInfo *ti = autotune_tunable_info(tu);
                if (!(c->set & (1U << tu)) || !streq(ti->scheduler, c->scheduler))
                        continue;
                free(r->value[ti->knob]);
                if (asprintf(&r->value[ti->knob], "%lld", c->tun[tu]) < 0)
                        r->value[ti->knob] = NULL;
                r->section[ti->knob] = section;
                r->origin[ti->knob] = origin;
        }
        if (autotune_running(a) && (!r->value[KNOB_PROBE] || !streq(r->value[KNOB_PROBE], "0"))) {
                free(r->value[KNOB_PROBE_INTERVAL]);
                r->value[KNOB_PROBE_INTERVAL] = strdup(TRIAL_PROBE_INTERVAL);
                r->section[KNOB_PROBE_INTERVAL] = section;
                r->origin[KNOB_PROBE_INTERVAL] = origin;
        }
}

void autotuner_forget(AutoTuner *t, Device *d) {
        for (AutoDevice *a = t->devices; a; a = a->next) {
                if (d && a->device != d)
                        continue;
                if (autotune_running(a)) {
                        log_info("%s: trial ended by a restore.", a->device->sysname);
                        end_trial_now(a, "restore");
                }
                trial_engine_finished(&a->trial);
                a->has_choice = false;
                a->promising = false;
        }
}

static int on_hotplug_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        AutoDevice *a = userdata;
        char why[256];
        int r;

        a->hotplug_timer = sd_event_source_disable_unref(a->hotplug_timer);
        r = autotuner_start(a->tuner, a->device, false, NULL, why, sizeof why);
        if (r == -EPERM)
                log_info("%s: no trial at hotplug: %s.", a->device->sysname, why);
        return 0;
}

void autotuner_event(AutoTuner *t, ManagerEventType type, Device *d) {
        AutoDevice *a;

        switch (type) {
        case MANAGER_EVENT_DEVICE_APPLIED:
                a = autotune_find(t, d);
                if (!a)
                        break;
                if (a->trial.phase == TRIAL_APPLYING)
                        on_applied(a);
                else if (a->trial.phase == TRIAL_FINISHING && !d->dirty) {
                        /* The chosen setting (or the one before the trial) is in place. */
                        trial_engine_finished(&a->trial);
                        emit(a);
                        calls_finish(a, json_pack("{s:s, s:o}", "device", d->sysname, "trial", autotune_trial_json(a)));
                }
                break;
        case MANAGER_EVENT_DEVICE_REMOVED:
                a = autotune_find(t, d);
                if (!a)
                        break;
                if (autotune_running(a)) {
                        log_warning("%s: device removed during a trial; trial ended.", d->sysname);
                        end_trial_now(a, "the device was removed");
                } else if (a->trial.phase == TRIAL_FINISHING) {
                        trial_engine_finished(&a->trial);
                        calls_finish(a, json_pack("{s:s, s:o}", "device", d->sysname, "trial", autotune_trial_json(a)));
                }
                auto_device_free(t, a);
                break;
        case MANAGER_EVENT_DEVICE_ADDED: {
                const AutoTunePolicy *p;
                if (!d || !(p = autotune_device_policy(t, d)) || !p->enabled || !p->on_hotplug)
                        break;
                a = get(t, d);
                if (a)
                        arm_hotplug_trial(a);
                break;
        }
        default:
                break;
        }
}

/* After a change: one more watch interval of the chosen setting, judged
 * against the bound the trial admitted it under. Broken: it falls back to
 * the trial's admissible candidate with the most margin (the setting
 * before the trial if none), says so (log, Monitor, explain, GetDevice),
 * and leaves the broken one out of the next trials for an hour. */
static void watch_promise(AutoDevice *a, const EpochFigures *e, uint64_t now) {
        AutoTuner *t = a->tuner;
        char why[256], w[AUTOTUNE_CANDIDATE_STRMAX], f[AUTOTUNE_CANDIDATE_STRMAX], hm[16];

        if (!a->has_choice) {
                a->promising = false; /* restored, or the Auto* keys went: nothing of it is in force */
                return;
        }
        if (a->n_promise_e < AUTOTUNE_PROMISE_MAX_INTERVALS)
                a->promise_e[a->n_promise_e++] = *e;
        AutoPromiseState st = autotune_promise_check(&a->trial.policy, &a->promise, a->promise_e, a->n_promise_e, why,
                                                     sizeof why);
        if (st != AUTO_PROMISE_WATCHING)
                snprintf(a->promise_why, sizeof a->promise_why, "%s", why);
        a->promise_state = st;
        if (st == AUTO_PROMISE_BROKEN) {
                int fb = autotune_fallback(&a->trial.policy, a->trial.summary, a->trial.n_cand, a->trial.decision.winner);
                const AutoCandidate *c = &a->trial.cand[fb >= 0 ? fb : 0];
                autotune_candidate_format(&a->trial.cand[a->trial.decision.winner], w, sizeof w);
                autotune_candidate_format(c, f, sizeof f);
                a->promising = false;
                a->fell_back = true;
                a->fallback = *c;
                a->fallback.baseline = false;
                autotune_tripped_add(a->trial.tripped, &a->trial.n_tripped, &a->trial.cand[a->trial.decision.winner], now);
                /* the workload's memory gets the fallback, not the broken choice */
                AutoMemoryDisk *m = a->trial.policy.remember ? autotune_memory_disk(t, a->device, true) : NULL;
                if (m) {
                        autotune_memory_record(m->m, &m->n, &a->promise.sig, &a->fallback, now_usec(CLOCK_REALTIME));
                        (void) autotune_memory_save(t);
                }
                a->choice = a->fallback;
                a->has_choice = true;
                a->choice_trial = a->n_trials;
                snprintf(a->origin, sizeof a->origin, "fallback at %s", autotune_clock_hm(now_usec(CLOCK_REALTIME), hm));
                if (snprintf(a->choice_text, sizeof a->choice_text,
                         "%s, fallen back to at %s: %s, chosen by the trial, broke the bound it was chosen under: %.200s. "
                         "%s is the trial's candidate that kept the bound with the most margin%s.",
                         f, hm, w, a->promise_why, f, fb >= 0 ? "" : " (none did: the setting before the trial)") < 0)
                        a->choice_text[0] = 0;
                a->history.last_change_usec = now;
                a->n_changes++;
                t->n_changes++;
                log_warning("%s: %s broke the bound the trial chose it under (%s); falling back to %s.",
                            a->device->sysname, w, a->promise_why, f);
                (void) manager_apply(t->manager, a->device);
                emit(a);
                return;
        }
        if (now >= a->promise_until) {
                a->promising = false;
                log_info("%s: the chosen setting %s: %s.", a->device->sysname,
                         st == AUTO_PROMISE_HOLDS ? "kept the trial's bound" : "was not judged (too little of the workload)",
                         a->promise_why);
        }
}

typedef enum Recall {
        RECALL_NONE,     /* not a workload seen before */
        RECALL_KNOWN,    /* one seen before, and what is in force stays */
        RECALL_APPLIED,  /* one seen before is back: its setting went in now */
} Recall;

/* A workload seen before is back (its signature is near one that a trial
 * chose for, and away from the one in force): its setting goes in at once,
 * with no trial and no dwell time. Not RECALL_NONE: the change detector
 * has nothing to start. */
static Recall recall(AutoDevice *a, const AutoTunePolicy *p, const AutoSignature *sig) {
        AutoTuner *t = a->tuner;
        const AutoMemoryDisk *mem = p->remember ? autotune_memory_disk(t, a->device, false) : NULL;
        char w[AUTOTUNE_CANDIDATE_STRMAX], hm[16];
        int i;

        if (!mem || mem->n == 0 || (i = autotune_memory_find(mem->m, mem->n, sig, p->min_iops)) < 0)
                return RECALL_NONE;
        /* It ran the interval before too: what is in force stays (a
         * trial's choice, or a restore's static keys until the workload
         * changes). At start the first interval counts as an arrival: the
         * daemon put the originals back when it stopped. */
        if (a->has_prev_sig && autotune_memory_find(mem->m, mem->n, &a->prev_sig, p->min_iops) == i)
                return RECALL_KNOWN;
        const AutoMemory *e = &mem->m[i];
        a->sig = *sig;
        a->has_sig = true;
        a->changed_samples = 0;
        if (a->has_choice && autotune_candidate_equal(&a->choice, &e->cand))
                return RECALL_KNOWN;
        /* The static keys are in force (the trial before kept them) and
         * already are what the workload's trial chose: recalled, but
         * nothing changes on the disk. */
        bool same = !a->has_choice && setting_in_force(a->device, p, &e->cand);
        autotune_candidate_format(&e->cand, w, sizeof w);
        a->choice = e->cand;
        a->has_choice = true;
        a->promising = false; /* the trial's promise was of another workload */
        a->recalled_usec = now_usec(CLOCK_REALTIME);
        a->n_recalls++;
        snprintf(a->origin, sizeof a->origin, "workload seen by the trial at %s", autotune_clock_hm(e->realtime_usec, hm));
        snprintf(a->choice_text, sizeof a->choice_text,
                 "%s, recalled at %s: the workload (reads %.0f %% of I/Os, %.0f KiB, %.0f I/Os per second, %.1f in "
                 "flight) is one the trial at %s chose it for; no trial. AutoTune= wins over the static keys of these "
                 "knobs.",
                 w, autotune_clock_hm(a->recalled_usec, hm), sig->read_share * 100, sig->avg_kb, sig->iops, sig->depth,
                 autotune_clock_hm(e->realtime_usec, (char[16]) {}));
        a->choice_trial = a->n_trials;
        if (same) {
                log_info("%s: a workload seen before is back: %s, as the trial at %s chose for it, is in force "
                         "already.", a->device->sysname, w, autotune_clock_hm(e->realtime_usec, hm));
                emit(a);
                return RECALL_APPLIED;
        }
        a->history.last_change_usec = now_usec(CLOCK_MONOTONIC);
        a->n_changes++;
        t->n_changes++;
        log_info("%s: a workload seen before is back: %s, as the trial at %s chose for it (no trial).",
                 a->device->sysname, w, autotune_clock_hm(e->realtime_usec, hm));
        (void) manager_apply(t->manager, a->device);
        emit(a);
        return RECALL_APPLIED;
}

/* Every RECALL_INTERVAL: a workload seen before (recall()), from the
 * figures of that interval. Every WATCH_INTERVAL: the promise watch,
 * periodic trials (AutoTrialIntervalSec=) and the workload-change
 * detector (AutoTrialOnWorkloadChange=): the signature of the last
 * interval against the one after the last trial; three changed intervals
 * in a row start a trial. */
static int on_watch(sd_event_source *s, uint64_t usec, void *userdata) {
        AutoTuner *t = userdata;
        Manager *m = t->manager;
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        char why[256];

        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                const AutoTunePolicy *p;
                if (d->removed || !(p = autotune_device_policy(t, d)) || !p->enabled)
                        continue;
                const AutoMemoryDisk *mem = p->remember ? autotune_memory_disk(t, d, false) : NULL;
                AutoDevice *known = autotune_find(t, d);
                if (!p->interval_usec && !p->on_workload_change && (!mem || mem->n == 0) && !(known && known->promising))
                        continue;
                AutoDevice *a = get(t, d);
                if (!a || autotune_running(a) || a->trial.phase == TRIAL_FINISHING)
                        continue;
                BlockStat st;
                if (read_stat(d, &st) < 0)
                        continue;
                if (a->recall_mono) {
                        EpochFigures e;
                        AutoSignature sig;
                        autotune_epoch_figures(&a->recall_stat, &st, now - a->recall_mono, &e);
                        autotune_signature(&e, &sig);
                        Recall rc = e.valid ? recall(a, p, &sig) : RECALL_NONE;
                        a->prev_sig = sig;
                        a->has_prev_sig = e.valid;
                        a->known_workload = rc != RECALL_NONE;
                        if (rc == RECALL_APPLIED) {
                                a->recall_stat = a->watch_stat = st;
                                a->recall_mono = a->watch_mono = now;
                                continue;
                        }
                }
                a->recall_stat = st;
                a->recall_mono = now;
                /* The rest every WATCH_INTERVAL (a tick may come a little early). */
                if (a->watch_mono && now + t->tick_usec / 2 < a->watch_mono + t->watch_usec)
                        continue;
                bool start = false;
                const char *reason = NULL;
                if (a->watch_mono) {
                        EpochFigures e;
                        AutoSignature sig;
                        autotune_epoch_figures(&a->watch_stat, &st, now - a->watch_mono, &e);
                        autotune_signature(&e, &sig);
                        if (a->promising)
                                watch_promise(a, &e, now);
                        if (!a->has_sig) {
                                a->sig = sig;
                                a->has_sig = true;
                        } else if (p->on_workload_change && !a->known_workload &&
                                   autotune_workload_changed(&a->sig, &sig, p->min_iops)) {
                                if (++a->changed_samples >= 3 && sig.iops >= p->min_iops) {
                                        start = true;
                                        reason = "workload changed";
                                }
                        } else
                                a->changed_samples = 0;
                        if (start) {
                                a->sig = sig;
                                a->trial.n_tripped = 0; /* another workload: what tripped may do well now */
                        }
                }
                a->watch_stat = st;
                a->watch_mono = now;
                if (!start && p->interval_usec && a->started_mono && now >= a->started_mono + p->interval_usec) {
                        start = true;
                        reason = "AutoTrialIntervalSec=";
                }
                if (!start)
                        continue;
                a->changed_samples = 0;
                int r = autotuner_start(t, d, false, NULL, why, sizeof why);
                if (r == 0)
                        log_info("%s: trial started: %s.", d->sysname, reason);
                else if (r == -EPERM)
                        log_debug("%s: %s, but no trial: %s.", d->sysname, reason, why);
        }
        /* On the tick's own schedule, not from now, and with 1 ms of
         * slack (not a tenth of a tick): a recall comes within two ticks
         * of the workload's return, which is 10 s only if the ticks are
         * 5 s apart, not 5 s plus the timer's slack and this pass. */
        uint64_t next = usec + t->tick_usec;
        sd_event_source_set_time(s, next > now_usec(CLOCK_MONOTONIC) ? next : now_usec(CLOCK_MONOTONIC) + t->tick_usec);
        sd_event_source_set_enabled(s, SD_EVENT_ON);
        return 0;
}

int autotuner_new(AutoTuner **ret, Manager *m, Prober *prober) {
        AutoTuner *t = calloc(1, sizeof *t);
        int r;

        if (!t)
                return -ENOMEM;
        t->manager = m;
        t->prober = prober;
        t->tick_usec = RECALL_INTERVAL_USEC;
        t->watch_usec = WATCH_INTERVAL_USEC;
        const char *e = secure_getenv("BLKMQD_TEST_WATCH_DIVISOR");
        uint64_t div;
        if (e && safe_atou64(e, &div) >= 0 && div >= 2 && div <= 100) {
                t->tick_usec /= div;
                t->watch_usec /= div;
                log_notice("BLKMQD_TEST_WATCH_DIVISOR=%" PRIu64 ": the watch ticks every %" PRIu64
                           " ms (a test's daemon).", div,
                           t->tick_usec / 1000);
        }
        r = sd_event_add_time_relative(m->event, &t->watch, CLOCK_MONOTONIC, t->tick_usec, 1000, on_watch, t);
        if (r < 0) {
                free(t);
                return r;
        }
        *ret = t;
        return 0;
}

AutoTuner *autotuner_free(AutoTuner *t) {
        if (!t)
                return NULL;
        while (t->devices)
                auto_device_free(t, t->devices);
        sd_event_source_disable_unref(t->watch);
        autotune_memory_free(t);
        free(t);
        return NULL;
}

json_t *autotuner_device_json(AutoTuner *t, const Device *d) {
        return autotune_report_device(t, d, autotune_device_policy(t, d), autotune_find(t, d));
}

char *autotuner_explain(AutoTuner *t, const Device *d) {
        return autotune_report_explain(t, d, autotune_device_policy(t, d), autotune_find(t, d));
}

void autotuner_metrics(AutoTuner *t, StrBuf *sb) {
        autotune_report_metrics(t, sb);
}
