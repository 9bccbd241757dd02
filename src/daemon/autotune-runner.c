/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
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
#include "stack.h"
#include "strbuf.h"
#include "sysfs.h"
#include "util.h"

#define HOTPLUG_DELAY_USEC 10000000ULL /* a new disk gets its workload first */

const AutotunePolicy *autotune_device_policy(AutotuneRunner *t, const Device *d) {
        const Config *c = t->manager->config;
        const AutotunePolicy *p = NULL;

        /* The last matched [Device] section with Auto* keys wins as a
         * whole; of d's own sections only: a stack's section, applied to
         * the disks below it, runs the trials of its top (the lockstep),
         * never a trial of each member. */
        for (size_t i = 0; i < c->n_devices; i++)
                if (c->devices[i].autotune.set && strv_contains(d->resolved.own, c->devices[i].name))
                        p = &c->devices[i].autotune;
        return p;
}

AutotuneDevice *autotune_find(AutotuneRunner *t, const Device *d) {
        for (AutotuneDevice *a = t->devices; a; a = a->next)
                if (a->device == d)
                        return a;
        return NULL;
}

AutotuneDevice *autotune_get(AutotuneRunner *t, Device *d) {
        AutotuneDevice *a = autotune_find(t, d);
        if (a)
                return a;
        a = calloc(1, sizeof *a);
        if (!a)
                return NULL;
        a->tuner = t;
        a->device = d;
        autotune_engine_init(&a->trial, d->sysname);
        autotune_lookout_init(&a->watch);
        a->generation = d->generation;
        a->next = t->devices;
        t->devices = a;
        return a;
}

/* The trial's news for the listener (api-manager.c: the Trial calls). */
static void tell(AutotuneDevice *a, AutotuneTrialNews news) {
        AutotuneRunner *t = a->tuner;

        if (t->listener)
                t->listener(a->device, news, t->listener_data);
}

void autotune_device_free(AutotuneRunner *t, AutotuneDevice *a) {
        for (AutotuneDevice **p = &t->devices; *p; p = &(*p)->next)
                if (*p == a) {
                        *p = a->next;
                        break;
                }
        a->timer = sd_event_source_disable_unref(a->timer);
        a->apply_timer = sd_event_source_disable_unref(a->apply_timer);
        a->hotplug_timer = sd_event_source_disable_unref(a->hotplug_timer);
        autotune_engine_done(&a->trial);
        free(a->probe0);
        free(a->cand_hist);
        free(a->trial_h0);
        strv_free(a->members);
        autotune_lockstep_done(&a->lockstep);
        free(a->member_job);
        free(a);
}

/* The stack trial whose member d is (NULL: none). */
static AutotuneDevice *stack_of(AutotuneRunner *t, const Device *d) {
        for (AutotuneDevice *a = t->devices; a; a = a->next)
                if (a->members && a->device != d && strv_contains(a->members, d->sysname))
                        return a;
        return NULL;
}

/* Puts what the overlay gives in place: on the device, or on the top and
 * each member of a stack (the lockstep: the members' jobs are gathered by
 * member_applied()). The jobs running (0: none, the device or every
 * member matches no section), or a negative errno with why. */
static int on_apply_overdue(sd_event_source *s, uint64_t usec, void *userdata);

/* An apply of the trial waits CallTimeoutSec= at most for its jobs: a
 * sysfs write can block for as long as a queue does not drain (a dead
 * path, a device timing its I/O out), and the trial, the device's next
 * trials and a stack's other members on the candidate with it. */
static void arm_apply_deadline(AutotuneDevice *a) {
        uint64_t usec = a->tuner->manager->config->daemon.call_timeout_usec;

        a->apply_timer = sd_event_source_disable_unref(a->apply_timer);
        if (usec > 0 && sd_event_add_time_relative(a->tuner->manager->event, &a->apply_timer, CLOCK_MONOTONIC, usec,
                                                   100000, on_apply_overdue, a) < 0)
                log_warning("%s: cannot arm the trial's apply deadline; it waits for its jobs.", a->device->sysname);
}

static int apply_all(AutotuneDevice *a, char *why, size_t why_size) {
        Manager *m = a->tuner->manager;
        int r, jobs = 0;

        if (!a->members) {
                r = manager_apply(m, a->device);
                if (r < 0) {
                        snprintf(why, why_size, "cannot apply: %s", strerror(-r));
                        return r;
                }
                if (a->device->busy)
                        arm_apply_deadline(a);
                return a->device->busy ? 1 : 0;
        }
        unsigned *mj = reallocarray(a->member_job, strv_length(a->members) + 1, sizeof *mj);
        if (!mj) {
                snprintf(why, why_size, "cannot apply: %s", strerror(ENOMEM));
                return -ENOMEM;
        }
        a->member_job = mj;
        for (size_t i = 0; a->members[i]; i++)
                mj[i] = UINT_MAX; /* none counts until the loop below has asked */
        autotune_lockstep_begin(&a->lockstep);
        (void) manager_apply(m, a->device); /* the top: the trial's probe rate */
        for (size_t i = 0; a->members[i]; i++) {
                Device *d = manager_find_device(m, a->members[i]);
                if (!d) {
                        snprintf(why, why_size, "member %s of the stack is gone", a->members[i]);
                        return -ENODEV;
                }
                /* The job that carries this apply: the next one, or, if
                 * one runs now (it started before the candidate was asked
                 * for), the one after it. Counted, not told by d->dirty: a
                 * stream of re-plans (a top's udev "change" at every close
                 * of a writer) keeps a member dirty at the end of each job,
                 * and the trial waited for a clean one for ever. */
                mj[i] = d->n_jobs + (d->busy ? 2 : 1);
                r = manager_apply(m, d);
                if (r < 0) {
                        snprintf(why, why_size, "cannot apply to member %s: %s", d->sysname, strerror(-r));
                        return r;
                }
                if (d->busy)
                        jobs++;
                else
                        /* a member without a job did not take the candidate */
                        autotune_lockstep_no_job(&a->lockstep, i, d->sysname);
        }
        if (jobs > 0)
                arm_apply_deadline(a);
        return jobs;
}

int autotune_apply(AutotuneDevice *a) {
        char why[256];
        int r = apply_all(a, why, sizeof why);
        return r < 0 ? r : 0;
}

bool autotune_running(const AutotuneDevice *a) {
        return autotune_engine_running(&a->trial);
}

int autotune_read_stat(const Device *d, AutotuneBlockStat *ret) {
        _cleanup_free_ char *p = path_join(d->info->blockdir, "stat"), *text = NULL;
        int r;
        if (!p)
                return -ENOMEM;
        r = sysfs_read(p, &text);
        if (r < 0)
                return r;
        return autotune_blockstat_parse(text, ret);
}

/* The device's probe latencies so far (NULL: not probed). */
static const Hist *probe_hist(const AutotuneRunner *t, const Device *d) {
        ProbeTarget *pt = t->prober ? prober_find(t->prober, d->sysname) : NULL;
        return pt && pt->lat ? &pt->lat->total : NULL;
}

/* Notes the probe latencies at an epoch's start. */
static void probe_mark(AutotuneDevice *a) {
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
 * AUTOTUNE_P99_MIN_PROBES. *ret_n: how many there were. */
static double probe_p99_ms(AutotuneDevice *a, uint64_t *ret_n) {
        const Hist *h = probe_hist(a->tuner, a->device);
        Hist d;
        uint64_t ns;

        *ret_n = 0;
        if (!h || !a->probe0 || hist_diff(&d, h, a->probe0) < 0)
                return 0;
        *ret_n = d.count;
        if (d.count < AUTOTUNE_P99_MIN_PROBES || hist_percentile(&d, 99, &ns) < 0)
                return 0;
        return (double) ns / 1e6;
}

/* The most probes an epoch of usec can hold: one in flight at a time,
 * started at most every interval less its jitter (at most half of it,
 * probe.c); 0 without probes. */
static uint64_t probes_max(const AutotuneRunner *t, const Device *d, uint64_t usec) {
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
static AutotuneTrialPeek peek_figures(AutotuneDevice *a, uint64_t now) {
        const Hist *h = probe_hist(a->tuner, a->device);
        uint64_t n_max = probes_max(a->tuner, a->device, a->trial.policy.epoch_usec + AUTOTUNE_PEEK_USEC), ns;
        AutotuneTrialPeek pk = { .now = now, .n_max = n_max };
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
static void probe_pool(AutotuneDevice *a, size_t c) {
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
static void price_compute(AutotuneDevice *a) {
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
static uint64_t probe_errors(const AutotuneRunner *t, const Device *d) {
        if (!t->prober)
                return 0;
        for (size_t i = 0; i < prober_count(t->prober); i++) {
                const ProbeTarget *pt = prober_get(t->prober, i);
                if (streq(pt->sysname, d->sysname))
                        return pt->n_errors;
        }
        return 0;
}

void autotune_emit(AutotuneDevice *a) {
        Manager *m = a->tuner->manager;
        manager_notify(m, MANAGER_EVENT_TRIAL, a->device);
}

static void progress(AutotuneDevice *a) {
        autotune_engine_summarise(&a->trial);
        tell(a, AUTOTUNE_RUNNER_TRIAL_PROGRESS);
}

/* ---- the trial: the engine's I/O driver ---- */

/* What the trial chose (or kept) for the workload it measured, for when
 * that workload comes back. Not after an abort, an idle disk or too few
 * epochs: those learned nothing of it. */
static void remember(AutotuneDevice *a) {
        const AutotuneEngine *e = &a->trial;
        AutotuneVerdict v = e->decision.verdict;
        AutotuneSignature sig;
        AutotuneMemoryDisk *m;

        if (!e->policy.remember || e->aborted ||
            (v != AUTOTUNE_VERDICT_CHANGE && v != AUTOTUNE_VERDICT_KEEP_BEST && v != AUTOTUNE_VERDICT_KEEP_NOISE &&
             v != AUTOTUNE_VERDICT_KEEP_HYSTERESIS) ||
            !autotune_series_signature(e->series, e->n_cand, &sig) || sig.iops < e->policy.min_iops)
                return;
        m = autotune_memory_disk(a->tuner, a->device, true);
        if (!m)
                return;
        autotune_memory_record(m->m, &m->n, &sig, &e->cand[e->decision.winner], now_usec(CLOCK_REALTIME));
        (void) autotune_memory_save(a->tuner);
        /* the workload the watch compares with from now on; it is in
         * force, not arriving */
        autotune_lookout_remembered(&a->watch, &sig);
}

/* The probes of a search's phases: the first phase's p99 of the setting
 * before the trial is the trial's "before"; a phase begun anew (apply)
 * pools its candidates' probes afresh. */
static void sync_phases(AutotuneDevice *a, bool apply) {
        if (a->seen_phases == 0 && a->trial.n_phases > 0 && a->cand_hist)
                a->p99_before0 = hist_p99_ms(&a->cand_hist[0]);
        if (apply && a->trial.n_phases != a->seen_phases)
                for (size_t c = 0; a->cand_hist && c < AUTOTUNE_MAX_CANDIDATES; c++)
                        hist_reset(&a->cand_hist[c]);
        a->seen_phases = a->trial.n_phases;
}

static void finish(AutotuneDevice *a);
static int on_timer(sd_event_source *s, uint64_t usec, void *userdata);
static AutotuneTrialAction on_wait(AutotuneDevice *a, AutotuneTrialWait w);

/* Carries out what the engine asks, until it waits for an event. */
static void carry_out(AutotuneDevice *a, AutotuneTrialAction act) {
        char why[256];
        int r;

        for (;;)
                switch (act.what) {
                case AUTOTUNE_TRIAL_DO_NOTHING:
                        return;
                case AUTOTUNE_TRIAL_DO_APPLY:
                        sync_phases(a, true);
                        r = apply_all(a, why, sizeof why);
                        if (r < 0)
                                act = autotune_engine_abort(&a->trial, why);
                        else if (r == 0)
                                /* no job: the device matches no section any more
                                 * (a loop device detached from its file, say) */
                                act = autotune_engine_abort(&a->trial, "the device no longer matches its policy");
                        else
                                return;
                        break;
                case AUTOTUNE_TRIAL_DO_WAIT:
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
                        act = autotune_engine_abort(&a->trial, why);
                        break;
                case AUTOTUNE_TRIAL_DO_NEXT:
                        progress(a);
                        act = autotune_engine_next(&a->trial, now_usec(CLOCK_MONOTONIC));
                        break;
                case AUTOTUNE_TRIAL_DO_FINISH:
                        sync_phases(a, false);
                        finish(a);
                        return;
                }
}


/* The event a wait was for. */
static AutotuneTrialAction on_wait(AutotuneDevice *a, AutotuneTrialWait w) {
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        AutotuneBlockStat st;
        int r;

        switch (w) {
        case AUTOTUNE_TRIAL_WAIT_SETTLE: {
                r = autotune_read_stat(a->device, &st);
                AutotuneTrialAction act = autotune_engine_settled(&a->trial, r < 0 ? NULL : &st, r,
                                                       probe_hist(a->tuner, a->device) != NULL, now);
                if (a->trial.phase == AUTOTUNE_TRIAL_MEASURING && act.what == AUTOTUNE_TRIAL_DO_WAIT &&
                    act.wait != AUTOTUNE_TRIAL_WAIT_SETTLE) {
                        /* the epoch begins: its probes from here */
                        a->probe_errors0 = probe_errors(a->tuner, a->device);
                        probe_mark(a);
                }
                return act;
        }
        case AUTOTUNE_TRIAL_WAIT_PEEK: {
                AutotuneTrialPeek pk = peek_figures(a, now);
                return autotune_engine_peek(&a->trial, &pk);
        }
        case AUTOTUNE_TRIAL_WAIT_EPOCH: {
                size_t c = a->trial.current;
                uint64_t n;
                r = autotune_read_stat(a->device, &st);
                double p99 = probe_p99_ms(a, &n);
                AutotuneTrialAction act = autotune_engine_epoch(&a->trial, r < 0 ? NULL : &st, r,
                                          (unsigned) (probe_errors(a->tuner, a->device) - a->probe_errors0),
                                          p99, n, now);
                /* the epoch's probes to its candidate's pool once it ended
                 * (not when it runs on for its p99) */
                if (r >= 0 && !(act.what == AUTOTUNE_TRIAL_DO_WAIT && act.wait == AUTOTUNE_TRIAL_WAIT_EPOCH))
                        probe_pool(a, c);
                return act;
        }
        }
        return (AutotuneTrialAction) { .what = AUTOTUNE_TRIAL_DO_NOTHING };
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        AutotuneDevice *a = userdata;

        a->timer = sd_event_source_disable_unref(a->timer);
        carry_out(a, on_wait(a, a->timer_wait));
        return 0;
}

void autotune_install_choice(AutotuneDevice *a, const AutotuneCandidate *c, const char *origin, const char *text,
                             uint64_t change_mono) {
        a->choice = *c;
        a->has_choice = true;
        a->choice_trial = a->n_trials;
        snprintf(a->origin, sizeof a->origin, "%s", origin);
        snprintf(a->choice_text, sizeof a->choice_text, "%s", text);
        if (change_mono == 0)
                return;
        a->history.last_change_usec = change_mono;
        a->n_changes++;
        a->tuner->n_changes++;
}

/* The engine decided (or aborted): what the daemon makes of it. */
static void finish(AutotuneDevice *a) {
        Device *d = a->device;
        AutotuneRunner *t = a->tuner;
        AutotuneEngine *e = &a->trial;
        char w[AUTOTUNE_CANDIDATE_STRMAX], b[AUTOTUNE_CANDIDATE_STRMAX], hm[16], origin[128], text[768];

        a->ended_usec = now_usec(CLOCK_REALTIME);
        a->timer = sd_event_source_disable_unref(a->timer);
        price_compute(a);
        remember(a);
        /* the watch's next interval starts after the trial, not across it */
        autotune_lookout_restart(&a->watch);
        const AutotuneCandidate *chosen = &e->cand[e->decision.winner];
        autotune_candidate_format(chosen, w, sizeof w);
        autotune_candidate_format(&e->cand[0], b, sizeof b);
        if (e->decision.verdict == AUTOTUNE_VERDICT_CHANGE) {
                snprintf(origin, sizeof origin, "trial at %s", autotune_clock_hm(a->ended_usec, hm));
                const AutotuneSummary *sw = &e->summary[e->decision.winner], *s0 = &e->summary[0];
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
                AutotuneCandidate c = *chosen;
                c.baseline = false;
                autotune_install_choice(a, &c, origin, text, now_usec(CLOCK_MONOTONIC));
                autotune_lookout_promise(&a->watch, e, now_usec(CLOCK_MONOTONIC));
                log_struct(LOG_INFO, BLKMQD_MESSAGE_TRIAL_DECISION,
                           LOG_FIELDS({ "BLKMQD_DEVICE", d->sysname },
                                      { "BLKMQD_VERDICT", autotune_verdict_to_string(e->decision.verdict) },
                                      { "BLKMQD_OLD", b }, { "BLKMQD_NEW", w },
                                      { "BLKMQD_REASON", e->decision.reason }),
                           "%s: trial chose %s over %s: %s (switches %u, apply time %" PRIu64 " ms).", d->sysname, w, b,
                           e->decision.reason, e->switches, e->apply_usec / 1000);
        } else {
                /* Keep what was there; a choice of an earlier trial stays. */
                if (e->decision.verdict == AUTOTUNE_VERDICT_ABORTED)
                        t->n_aborted++;
                log_struct(LOG_INFO, BLKMQD_MESSAGE_TRIAL_DECISION,
                           LOG_FIELDS({ "BLKMQD_DEVICE", d->sysname },
                                      { "BLKMQD_VERDICT", autotune_verdict_to_string(e->decision.verdict) },
                                      { "BLKMQD_OLD", b }, { "BLKMQD_NEW", b },
                                      { "BLKMQD_REASON", e->decision.reason }),
                           "%s: trial kept %s: %s: %s.", d->sysname, b, autotune_verdict_to_string(e->decision.verdict),
                           e->decision.reason);
        }
        /* Put the chosen (or the kept) setting in place (the engine made
         * it cand[current]); the callers get their reply once it is
         * (autotune_runner_event()). */
        autotune_emit(a);
        /* No job (the device no longer matches a section, or the apply
         * failed): nothing to wait for. */
        if (apply_all(a, text, sizeof text) <= 0) {
                autotune_engine_finished(e);
                tell(a, AUTOTUNE_RUNNER_TRIAL_DONE);
        }
}

/* Ends a running trial at once, from outside it (a restore, the device
 * removed or replaced): no setting is applied; its calls get the trial as it
 * stands. */
static void end_trial_now(AutotuneDevice *a, const char *reason) {
        autotune_engine_end_now(&a->trial, reason);
        a->timer = sd_event_source_disable_unref(a->timer);
        a->apply_timer = sd_event_source_disable_unref(a->apply_timer);
        a->ended_usec = now_usec(CLOCK_REALTIME);
        tell(a, AUTOTUNE_RUNNER_TRIAL_DONE);
}

/* Whether knob k is one candidate c sets (its refusal refuses c). */
static bool trial_knob(const AutotuneCandidate *c, int k) {
        if (k == KNOB_SCHEDULER || k == KNOB_NR_REQUESTS || k == KNOB_WBT_LAT_USEC)
                return true;
        if (k == KNOB_READ_AHEAD_KB)
                return c->set & AUTOTUNE_SET_READ_AHEAD;
        for (AutotuneTunable t = 0; t < _AUTOTUNE_TUN_MAX; t++)
                if ((c->set & (1U << t)) && autotune_tunable_info(t)->knob == k)
                        return true;
        return false;
}

/* The job of a candidate came back. */
static void on_applied(AutotuneDevice *a) {
        Device *d = a->device;
        const TuneJob *j = d->last;
        AutotuneTrialApplied ev = {};

        /* A job that was running when the candidate was asked for came
         * back; the candidate's own job follows (dirty). */
        if (!j || d->dirty)
                return;
        a->apply_timer = sd_event_source_disable_unref(a->apply_timer);
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
        ev.have_stat = !ev.refused && !ev.device_error && autotune_read_stat(d, &ev.stat) >= 0;
        ev.now = now_usec(CLOCK_MONOTONIC);
        carry_out(a, autotune_engine_applied(&a->trial, &ev));
}

/* The job of member d of a stack's trial came back. The candidate's apply
 * is done when every member's is, each read back: a member that refused a
 * knob, or does not carry the candidate afterwards, refuses it for the
 * stack; the engine then asks for the next one (or the setting before the
 * trial), which every member gets, those that took the refused one too.
 * The trial's last apply is checked alike (autotune_lockstep_end()). */
static void member_applied(AutotuneDevice *a, Device *d) {
        const TuneJob *j = d->last;
        AutotuneEngine *e = &a->trial;
        const AutotuneCandidate *c = a->has_choice && e->phase == AUTOTUNE_TRIAL_FINISHING ? &a->choice
                                                                                           : &e->cand[e->current];
        const AutotunePolicy *p = autotune_device_policy(a->tuner, a->device);
        char buf[AUTOTUNE_CANDIDATE_STRMAX];
        AutotuneLockstepOutcome o = {};
        size_t i = 0;

        while (a->members[i] && !streq(a->members[i], d->sysname))
                i++;
        if (!a->members[i] || autotune_lockstep_is_back(&a->lockstep, i) || !j || !a->member_job ||
            d->n_jobs < a->member_job[i])
                return;
        if (e->phase != AUTOTUNE_TRIAL_APPLYING && e->phase != AUTOTUNE_TRIAL_FINISHING)
                return;
        for (size_t k = 0; k < j->n_entries; k++) {
                const TuneEntry *te = &j->entries[k];
                if (!trial_knob(c, te->knob))
                        continue;
                if (te->outcome == TUNE_FAILED)
                        o.refused = true;
                if (te->knob == KNOB_SCHEDULER && te->outcome == TUNE_CHANGED)
                        o.switched = true;
        }
        o.carries = p && autotune_setting_in_force(d, p, c);
        o.device_error = j->device_error;
        o.usec = j->usec;
        if (!o.refused && !o.carries)
                log_notice("%s: member %s does not carry %s after its apply.", a->device->sysname, d->sysname,
                           autotune_candidate_format(c, buf, sizeof buf));
        if (!autotune_lockstep_back(&a->lockstep, i, d->sysname, &o))
                return;
        a->apply_timer = sd_event_source_disable_unref(a->apply_timer);
        if (e->phase == AUTOTUNE_TRIAL_APPLYING) {
                AutotuneTrialApplied ev = a->lockstep.gathered;
                if (ev.refused)
                        log_notice("%s: member %s refused %s: refused for the stack; the members go on together.",
                                   a->device->sysname, a->lockstep.refused_by,
                                   autotune_candidate_format(c, buf, sizeof buf));
                ev.have_stat = !ev.refused && !ev.device_error && autotune_read_stat(a->device, &ev.stat) >= 0;
                ev.now = now_usec(CLOCK_MONOTONIC);
                carry_out(a, autotune_engine_applied(e, &ev));
                return;
        }
        /* the trial's last apply: its choice, or the setting before it */
        const AutotuneCandidate *before = e->search ? &e->origin0 : &e->cand[0];
        bool is_before = autotune_lockstep_carries(c, before) && autotune_lockstep_carries(before, c);
        switch (autotune_lockstep_end(&a->lockstep, is_before)) {
        case AUTOTUNE_LOCKSTEP_END_FALL_BACK: {
                char w[AUTOTUNE_CANDIDATE_STRMAX], text[768];
                autotune_candidate_format(c, w, sizeof w);
                autotune_candidate_format(before, buf, sizeof buf);
                log_warning("%s: member %s refused the trial's %s; every member goes back to %s, the setting "
                            "before the trial.", a->device->sysname, a->lockstep.refused_by, w, buf);
                if (snprintf(text, sizeof text,
                             "%s, the setting before the trial: member %s refused the trial's %s, so every member "
                             "went back to it.", buf, a->lockstep.refused_by, w) < 0)
                        text[0] = 0;
                AutotuneCandidate b = *before;
                b.baseline = false;
                autotune_install_choice(a, &b, "trial's choice refused by a member", text, 0);
                if (apply_all(a, text, sizeof text) > 0)
                        return; /* back here with every member's job */
                break;
        }
        case AUTOTUNE_LOCKSTEP_END_DIFFER:
                log_warning("%s: member %s does not carry %s, the setting before the trial, as the others do: "
                            "the members differ.", a->device->sysname, a->lockstep.refused_by,
                            autotune_candidate_format(c, buf, sizeof buf));
                break;
        case AUTOTUNE_LOCKSTEP_END_DONE:
                break;
        }
        autotune_engine_finished(e);
        autotune_emit(a);
        tell(a, AUTOTUNE_RUNNER_TRIAL_DONE);
}

/* The jobs of the trial's apply are not all back within CallTimeoutSec=.
 * Applying a candidate: the trial aborts (every device goes back to the
 * setting before it, each when its job can run). Its last apply: the
 * trial ends without waiting; the late job still runs, and the drift
 * check gives its device its policy if it does not carry it then. */
static int on_apply_overdue(sd_event_source *s, uint64_t usec, void *userdata) {
        AutotuneDevice *a = userdata;
        AutotuneEngine *e = &a->trial;
        unsigned sec = (unsigned) (a->tuner->manager->config->daemon.call_timeout_usec / 1000000);
        const char *late = a->device->sysname;
        char why[256];

        a->apply_timer = sd_event_source_disable_unref(a->apply_timer);
        for (size_t i = 0; a->members && a->members[i]; i++)
                if (!autotune_lockstep_is_back(&a->lockstep, i)) {
                        late = a->members[i];
                        break;
                }
        if (e->phase == AUTOTUNE_TRIAL_APPLYING) {
                snprintf(why, sizeof why, "the apply to %s did not come back within %u s (CallTimeoutSec=)", late, sec);
                log_warning("%s: %s; the trial ends.", a->device->sysname, why);
                carry_out(a, autotune_engine_abort(e, why));
        } else if (e->phase == AUTOTUNE_TRIAL_FINISHING) {
                log_warning("%s: the trial's last apply to %s did not come back within %u s (CallTimeoutSec=); the "
                            "trial ends without it.", a->device->sysname, late, sec);
                autotune_engine_finished(e);
                autotune_emit(a);
                tell(a, AUTOTUNE_RUNNER_TRIAL_DONE);
        }
        return 0;
}

static int current_setting(const Device *d, const AutotunePolicy *p, AutotuneCandidate *ret, char **ret_line) {
        _cleanup_free_ char *ps = path_join(d->info->blockdir, "queue/scheduler"), *line = NULL, *act = NULL;
        int r;

        *ret = (AutotuneCandidate) { .wbt_lat_usec = AUTOTUNE_WBT_UNSET, .baseline = true };
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
        if (p->n_wbt_lat_usec || (p->knobs & (1U << AUTOTUNE_FAMILY_WBT))) {
                _cleanup_free_ char *pw = path_join(d->info->blockdir, "queue/wbt_lat_usec");
                long long v;
                if (pw && sysfs_read_int(pw, &v) >= 0)
                        ret->wbt_lat_usec = v;
        }
        if ((p->knobs & (1U << AUTOTUNE_FAMILY_NR_REQUESTS)) && !ret->nr_requests && !streq(act, "none")) {
                _cleanup_free_ char *pn = path_join(d->info->blockdir, "queue/nr_requests");
                long long v;
                if (pn && sysfs_read_int(pn, &v) >= 0 && v > 0)
                        ret->nr_requests = (unsigned) v;
        }
        if (p->knobs & (1U << AUTOTUNE_FAMILY_READ_AHEAD)) {
                _cleanup_free_ char *pr = path_join(d->info->blockdir, "queue/read_ahead_kb");
                long long v;
                if (pr && sysfs_read_int(pr, &v) >= 0 && v >= 0) {
                        ret->read_ahead_kb = (unsigned) v;
                        ret->set |= AUTOTUNE_SET_READ_AHEAD;
                }
        }
        /* the tunables of the scheduler in force, as they are: the search's
         * incumbent is written back with them */
        for (AutotuneTunable t = 0; (p->knobs & (1U << AUTOTUNE_FAMILY_IOSCHED)) && t < _AUTOTUNE_TUN_MAX; t++) {
                const AutotuneTunableInfo *ti = autotune_tunable_info(t);
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
bool autotune_setting_in_force(const Device *d, const AutotunePolicy *p, const AutotuneCandidate *c) {
        _cleanup_free_ char *line = NULL;
        AutotuneCandidate cur;

        return current_setting(d, p, &cur, &line) >= 0 && autotune_lockstep_carries(&cur, c);
}

bool autotune_in_force(AutotuneDevice *a, const AutotunePolicy *p, const AutotuneCandidate *c) {
        if (!a->members)
                return autotune_setting_in_force(a->device, p, c);
        for (size_t i = 0; a->members[i]; i++) {
                Device *d = manager_find_device(a->tuner->manager, a->members[i]);
                if (!d || !autotune_setting_in_force(d, p, c))
                        return false;
        }
        return true;
}

/* The members of a stacked device d (a bio-based top: an LV, an md array,
 * a dm-crypt mapping), each a device blkmqd knows; *ret NULL for a disk.
 * -EPERM with why: no trial. Whether the lockstep may start over them is
 * autotune_lockstep_check_start()'s. */
static int stack_members(AutotuneRunner *t, Device *d, char ***ret, char *why, size_t why_size) {
        _cleanup_(stack_freep) Stack *s = NULL;
        int r;

        *ret = NULL;
        if (!d->info->bio_based)
                return 0;
        r = stack_resolve(t->manager->tune.sysfs_root, d->sysname, &s);
        if (r < 0) {
                snprintf(why, why_size, "cannot follow the stack under it: %s", strerror(-r));
                return -EPERM;
        }
        if (!s->members || !s->members[0]) {
                snprintf(why, why_size, "bio-based with no request-based disk under it: no scheduler to try");
                return -EPERM;
        }
        for (size_t i = 0; s->members[i]; i++)
                if (!manager_find_device(t->manager, s->members[i])) {
                        snprintf(why, why_size, "member %s is not a device blkmqd manages", s->members[i]);
                        return -EPERM;
                }
        *ret = TAKE_PTR(s->members);
        return 0;
}

/* Reads each member's setting and trial: autotune_lockstep_check_start() over
 * them. */
static int stack_check(AutotuneRunner *t, Device *d, const AutotunePolicy *p, char **members, char *why,
                       size_t why_size) {
        size_t n = strv_length(members);
        _cleanup_free_ AutotuneLockstepMember *lm = calloc(n ? n : 1, sizeof *lm);

        if (!lm)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                Device *md = manager_find_device(t->manager, members[i]);
                AutotuneDevice *ma = autotune_find(t, md), *o = stack_of(t, md);
                _cleanup_free_ char *line = NULL;

                lm[i].name = md->sysname;
                lm[i].read_error = current_setting(md, p, &lm[i].current, &line);
                if (ma && ma->trial.phase != AUTOTUNE_TRIAL_IDLE)
                        lm[i].trial_of = md->sysname;
                else if (o && o->device != d && o->trial.phase != AUTOTUNE_TRIAL_IDLE)
                        lm[i].trial_of = o->device->sysname;
        }
        return autotune_lockstep_check_start(d->sysname, lm, n, why, why_size);
}

/* The probe interval of a trial on d (autotune_trial_probe_usec()), from
 * the disk's I/O rate as the prober last sampled its stat, over the probe
 * interval before the trial (where the probes' own share is one per
 * ProbeIntervalSec=); where the prober has sampled it once only (a daemon
 * or a disk that just started: the first probe), the rate from that
 * sample to now, at least 0.1 s later; none: one per 20 ms. */
static uint64_t trial_probe_interval(const AutotuneRunner *t, const Device *d) {
        const ProbeTarget *pt = t->prober ? prober_find(t->prober, d->sysname) : NULL;
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        double iops = 0;
        AutotuneBlockStat st;

        if (pt && pt->stats.interval_usec > 0)
                iops = pt->stats.read_iops + pt->stats.write_iops;
        else if (pt && pt->stat_have_prev && now >= pt->stat_prev_usec + 100000 && autotune_read_stat(d, &st) >= 0 &&
                 st.rd_ios + st.wr_ios >= pt->stat_prev[0] + pt->stat_prev[4])
                iops = (double) (st.rd_ios + st.wr_ios - pt->stat_prev[0] - pt->stat_prev[4]) * 1e6 /
                       (double) (now - pt->stat_prev_usec);
        return autotune_trial_probe_usec(iops);
}

/* A new trial: the driver's counters and clocks, its probes, and the caps'
 * history. */
static void trial_begin(AutotuneDevice *a) {
        AutotuneRunner *t = a->tuner;

        a->probe_interval_usec = trial_probe_interval(t, a->device);

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
        a->watch.promising = a->watch.has_promise = a->watch.fell_back = false;
        a->started_usec = now_usec(CLOCK_REALTIME);
        a->started_mono = now_usec(CLOCK_MONOTONIC);
        a->ended_usec = 0;
        a->n_trials++;
        t->n_trials++;
        autotune_history_add(&a->history, a->started_mono);
        autotune_history_add(&t->global, a->started_mono);
}

int autotune_runner_start(AutotuneRunner *t, Device *d, bool forced, char *why, size_t why_size) {
        Manager *m = t->manager;
        const AutotunePolicy *p = autotune_device_policy(t, d);
        AutotuneDevice *a;
        _cleanup_free_ char *line = NULL;
        _cleanup_strv_free_ char **members = NULL;
        Device *first = d; /* where the setting before the trial is read */
        AutotuneDevice *s = stack_of(t, d);
        AutotuneCandidate cur;
        int r;

        /* A member of a stack whose trial runs, or whose choice it
         * carries: no trial of its own (the stack's would come apart). */
        if (s && autotune_lockstep_check_own(d->sysname, s->device->sysname, s->trial.phase != AUTOTUNE_TRIAL_IDLE,
                                             s->has_choice, why, why_size) < 0)
                return -EPERM;
        if (!p && d->resolved.stacks) {
                snprintf(why, why_size, "no bounds of its own: the Auto* keys of a stack's section are its top's "
                                        "(blkmqctl trial %s)", d->resolved.stacks[0]);
                return -EPERM;
        }
        if (!p || (!p->schedulers[0] && !p->n_nr_requests && !p->n_wbt_lat_usec && !p->knobs)) {
                snprintf(why, why_size, "no bounds: the matched [Device] sections set none of AutoScheduler=, "
                                        "AutoNrRequests=, AutoWbtLatUsec=, AutoKnobs=");
                return -EPERM;
        }
        if (m->state != MANAGER_RUNNING) {
                snprintf(why, why_size, "the daemon is not running (starting, reloading or stopping)");
                return -EPERM;
        }
        a = autotune_get(t, d);
        if (!a)
                return -ENOMEM;
        if (autotune_running(a) || a->trial.phase == AUTOTUNE_TRIAL_FINISHING)
                return -EBUSY;
        if (!autotune_may_start(p, &a->history, &t->global, m->config->daemon.autotune_trials_per_hour,
                                now_usec(CLOCK_MONOTONIC), forced, why, why_size))
                return -EPERM;
        r = stack_members(t, d, &members, why, why_size);
        if (r < 0)
                return r;
        if (members) {
                if (p->knobs & (1U << AUTOTUNE_FAMILY_READ_AHEAD)) {
                        snprintf(why, why_size, "AutoKnobs=read_ahead_kb on a stack: its read-ahead is the top's, "
                                                "not its members'; a stack's trial does not try it yet");
                        return -EPERM;
                }
                first = manager_find_device(m, members[0]);
                r = stack_check(t, d, p, members, why, why_size);
                if (r < 0)
                        return r;
        }
        r = current_setting(first, p, &cur, &line);
        if (r < 0) {
                snprintf(why, why_size, "cannot read the current setting%s%s: %s", members ? " of " : "",
                         members ? first->sysname : "", strerror(-r));
                return -EPERM;
        }
        _cleanup_(autotune_lockstep_done) AutotuneLockstep ls = {};
        if (members) {
                r = autotune_lockstep_init(&ls, strv_length(members));
                if (r < 0)
                        return r;
        }
        AutotuneTrialSetup setup = {
                .policy = p,
                .current = cur,
                .scheduler_line = line,
                .zoned = first->info->zoned && !streq(first->info->zoned, "none"),
                .kernel_version = m->tune.kernel_version,
                .forced = forced,
                .now = now_usec(CLOCK_MONOTONIC),
        };
        r = autotune_engine_start(&a->trial, &setup, why, why_size);
        if (r < 0)
                return r;
        strv_free(a->members);
        autotune_lockstep_done(&a->lockstep);
        a->members = TAKE_PTR(members);
        a->lockstep = ls;
        ls = (AutotuneLockstep) {};
        trial_begin(a);
        if (a->members) {
                _cleanup_free_ char *list = strv_join(a->members, ", ");
                log_info("%s: a stack: each candidate goes to its members %s in lockstep.", d->sysname,
                         list ? list : "-");
        }
        log_info("%s: trial of %zu settings, %u rounds of %.2f s epochs, probes every %.1f ms (%s%s%s).", d->sysname,
                 a->trial.n_cand, p->rounds, (double) p->epoch_usec / 1e6, (double) a->probe_interval_usec / 1e3,
                 forced ? "asked for" : "automatic", a->trial.note[0] ? "; " : "", a->trial.note);
        autotune_emit(a);
        carry_out(a, autotune_engine_begin(&a->trial, now_usec(CLOCK_MONOTONIC)));
        return 0;
}

static int on_hotplug_timer(sd_event_source *s, uint64_t usec, void *userdata);

static void arm_hotplug_trial(AutotuneDevice *a) {
        if (a->hotplug_timer)
                return;
        (void) sd_event_add_time_relative(a->tuner->manager->event, &a->hotplug_timer, CLOCK_MONOTONIC,
                                          HOTPLUG_DELAY_USEC, 100000, on_hotplug_timer, a);
}

/* Another disk appeared under d's name (a loop device attached to another
 * file, a disk swapped into the slot): what the trials learned was of the
 * old one. Its choice, the candidates that tripped, the workload signature
 * go, a running trial ends, and a hotplug trial is due as for a new disk. */
static void check_replaced(AutotuneRunner *t, Device *d) {
        const AutotunePolicy *p = autotune_device_policy(t, d);
        AutotuneDevice *a = autotune_find(t, d);

        /* A device's first policy with AutoTrialOnHotplug=, before its
         * first job: its hotplug trial. MANAGER_EVENT_DEVICE_ADDED comes
         * before the device is resolved, when no section matches it yet;
         * a stack's top (an md array made, an LV activated) is resolved
         * here once its stack is up. */
        if (!a && p && p->enabled && p->on_hotplug && d->n_jobs == 0 && !d->busy && (a = autotune_get(t, d))) {
                arm_hotplug_trial(a);
                return;
        }
        if (!a && (!p || !p->enabled || !p->on_hotplug || d->generation == 0))
                return;
        if (!a) {
                a = autotune_get(t, d);
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
        else if (a->trial.phase == AUTOTUNE_TRIAL_FINISHING) {
                autotune_engine_finished(&a->trial);
                tell(a, AUTOTUNE_RUNNER_TRIAL_DONE);
        }
        autotune_engine_finished(&a->trial);
        a->has_choice = false;
        a->trial.n_tripped = 0;
        autotune_memory_forget(t, d);
        autotune_lookout_forget(&a->watch);
        if (p && p->enabled && p->on_hotplug)
                arm_hotplug_trial(a);
}

/* Knob k of r comes from the trial: value (owned; NULL: not written),
 * section AutoTune (none without a value), origin. */
static void overlay_knob(Resolved *r, int k, char *value, const char *origin) {
        free(r->value[k]);
        r->value[k] = value;
        r->section[k] = value ? "AutoTune" : NULL;
        r->origin[k] = value ? origin : NULL;
}

static char *strdupf(const char *fmt, ...) _printf_(1, 2);
static char *strdupf(const char *fmt, ...) {
        va_list ap;
        char *s;
        int r;

        va_start(ap, fmt);
        r = vasprintf(&s, fmt, ap);
        va_end(ap);
        return r < 0 ? NULL : s;
}

void autotune_runner_overlay(AutotuneRunner *t, Device *d, Resolved *r) {
        AutotuneDevice *a, *s;
        const AutotuneCandidate *c = NULL;
        const char *origin;

        check_replaced(t, d);
        /* A member of a stack under trial (or whose trial chose) takes the
         * stack's candidate (or choice); the top takes none of its knobs
         * (it has no request queue), only the trial's probe rate. */
        s = stack_of(t, d);
        a = s && (s->trial.phase != AUTOTUNE_TRIAL_IDLE || s->has_choice) ? s : autotune_find(t, d);
        if (!a)
                return;
        bool top = a->members && a->device == d;
        if (!autotune_device_policy(t, a->device)) {
                /* The Auto* keys are gone (reload), or the device matches
                 * no section any more: so is what they chose. A running
                 * trial ends at its next apply (no job). */
                a->has_choice = false;
                return;
        }
        if (a->trial.phase != AUTOTUNE_TRIAL_IDLE && a->trial.phase != AUTOTUNE_TRIAL_FINISHING) {
                c = &a->trial.cand[a->trial.current];
                origin = "trial running";
        } else if (a->has_choice) {
                c = &a->choice;
                origin = a->origin;
        } else if (a->trial.phase == AUTOTUNE_TRIAL_FINISHING) {
                c = &a->trial.cand[a->trial.current]; /* the setting before the trial */
                origin = "trial kept the setting before it";
        } else
                return;

        if (top)
                goto probes;
        overlay_knob(r, KNOB_SCHEDULER, strdup(c->scheduler), origin);
        if (c->nr_requests || streq(c->scheduler, "none")) {
                /* none: never write nr_requests (it shrinks the driver tags) */
                if (c->nr_requests)
                        overlay_knob(r, KNOB_NR_REQUESTS, strdupf("%u", c->nr_requests), origin);
                else
                        overlay_knob(r, KNOB_NR_REQUESTS, NULL, NULL);
        }
        if (c->wbt_lat_usec != AUTOTUNE_WBT_UNSET)
                overlay_knob(r, KNOB_WBT_LAT_USEC, strdupf("%lld", c->wbt_lat_usec), origin);
        if (c->set & AUTOTUNE_SET_READ_AHEAD)
                overlay_knob(r, KNOB_READ_AHEAD_KB, strdupf("%u", c->read_ahead_kb), origin);
        /* a scheduler's own tunables: planned after the scheduler (knob
         * order) and written only while it is the active one (tune.c) */
        for (AutotuneTunable tu = 0; tu < _AUTOTUNE_TUN_MAX; tu++) {
                const AutotuneTunableInfo *ti = autotune_tunable_info(tu);
                if ((c->set & (1U << tu)) && streq(ti->scheduler, c->scheduler))
                        overlay_knob(r, ti->knob, strdupf("%lld", c->tun[tu]), origin);
        }
probes:
        if (a->device == d && autotune_running(a) && (!r->value[KNOB_PROBE] || !streq(r->value[KNOB_PROBE], "0")))
                overlay_knob(r, KNOB_PROBE_INTERVAL, strdupf("%" PRIu64, a->probe_interval_usec), origin);
}

void autotune_runner_forget(AutotuneRunner *t, Device *d) {
        for (AutotuneDevice *a = t->devices; a; a = a->next) {
                bool member = d && a->members && strv_contains(a->members, d->sysname);
                if (d && a->device != d && !member)
                        continue;
                if (autotune_running(a)) {
                        log_info("%s: trial ended by a restore%s%s.", a->device->sysname, member ? " of member " : "",
                                 member ? d->sysname : "");
                        end_trial_now(a, "restore");
                } else if (a->trial.phase == AUTOTUNE_TRIAL_FINISHING) {
                        /* decided, its setting on its way: its calls get
                         * their reply now, or never */
                        autotune_engine_finished(&a->trial);
                        tell(a, AUTOTUNE_RUNNER_TRIAL_DONE);
                }
                autotune_engine_finished(&a->trial);
                a->has_choice = false;
                a->watch.promising = false;
                /* A restore of a stack's top or of one member: the
                 * (other) members leave the trial's setting too, for their
                 * own policy. */
                for (size_t i = 0; d && a->members && a->members[i]; i++) {
                        Device *md = manager_find_device(t->manager, a->members[i]);
                        if (md && md != d)
                                (void) manager_apply(t->manager, md);
                }
        }
}

static int on_hotplug_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        AutotuneDevice *a = userdata;
        char why[256];
        int r;

        a->hotplug_timer = sd_event_source_disable_unref(a->hotplug_timer);
        r = autotune_runner_start(a->tuner, a->device, false, why, sizeof why);
        if (r == -EPERM)
                log_info("%s: no trial at hotplug: %s.", a->device->sysname, why);
        return 0;
}

void autotune_runner_event(AutotuneRunner *t, ManagerEventType type, Device *d) {
        AutotuneDevice *a;

        switch (type) {
        case MANAGER_EVENT_DEVICE_APPLIED:
                a = stack_of(t, d);
                if (a && (a->trial.phase == AUTOTUNE_TRIAL_APPLYING || a->trial.phase == AUTOTUNE_TRIAL_FINISHING)) {
                        member_applied(a, d);
                        break;
                }
                /* else its own trial's, if any (its stack's is idle) */
                a = autotune_find(t, d);
                if (!a || a->members)
                        /* a stack's top: its members' jobs are the trial's */
                        break;
                if (a->trial.phase == AUTOTUNE_TRIAL_APPLYING)
                        on_applied(a);
                else if (a->trial.phase == AUTOTUNE_TRIAL_FINISHING && !d->dirty) {
                        /* The chosen setting (or the one before the trial) is in place. */
                        a->apply_timer = sd_event_source_disable_unref(a->apply_timer);
                        autotune_engine_finished(&a->trial);
                        autotune_emit(a);
                        tell(a, AUTOTUNE_RUNNER_TRIAL_DONE);
                }
                break;
        case MANAGER_EVENT_DEVICE_REMOVED:
                a = stack_of(t, d);
                if (a && a->trial.phase != AUTOTUNE_TRIAL_IDLE) {
                        /* a member gone: the lockstep cannot hold; the
                         * others go back to their policy without the trial */
                        log_warning("%s: member %s removed during a trial; trial ended.", a->device->sysname,
                                    d->sysname);
                        if (autotune_running(a))
                                end_trial_now(a, "a member of the stack was removed");
                        else {
                                autotune_engine_finished(&a->trial);
                                tell(a, AUTOTUNE_RUNNER_TRIAL_DONE);
                        }
                        for (size_t i = 0; a->members[i]; i++) {
                                Device *md = manager_find_device(t->manager, a->members[i]);
                                if (md && md != d)
                                        (void) manager_apply(t->manager, md);
                        }
                }
                a = autotune_find(t, d);
                if (!a)
                        break;
                if (autotune_running(a)) {
                        log_warning("%s: device removed during a trial; trial ended.", d->sysname);
                        end_trial_now(a, "the device was removed");
                } else if (a->trial.phase == AUTOTUNE_TRIAL_FINISHING) {
                        autotune_engine_finished(&a->trial);
                        tell(a, AUTOTUNE_RUNNER_TRIAL_DONE);
                }
                autotune_device_free(t, a);
                break;
        case MANAGER_EVENT_DEVICE_ADDED: {
                const AutotunePolicy *p;
                if (!d || !(p = autotune_device_policy(t, d)) || !p->enabled || !p->on_hotplug)
                        break;
                a = autotune_get(t, d);
                if (a)
                        arm_hotplug_trial(a);
                break;
        }
        default:
                break;
        }
}

json_t *autotune_runner_device_json(AutotuneRunner *t, const Device *d) {
        return autotune_report_device(t, d, autotune_device_policy(t, d), autotune_find(t, d));
}

char *autotune_runner_explain(AutotuneRunner *t, const Device *d) {
        return autotune_report_explain(t, d, autotune_device_policy(t, d), autotune_find(t, d));
}

void autotune_runner_metrics(AutotuneRunner *t, StrBuf *sb) {
        autotune_report_metrics(t, sb);
}

void autotune_runner_set_listener(AutotuneRunner *t, AutotuneTrialListenerFn listener, void *userdata) {
        t->listener = listener;
        t->listener_data = userdata;
}

bool autotune_runner_trial_pending(AutotuneRunner *t, const Device *d) {
        AutotuneDevice *a = autotune_find(t, d);
        return a && a->trial.phase != AUTOTUNE_TRIAL_IDLE;
}

json_t *autotune_runner_trial_json(AutotuneRunner *t, const Device *d) {
        AutotuneDevice *a = autotune_find(t, d);
        return a ? autotune_trial_json(a) : json_object();
}
