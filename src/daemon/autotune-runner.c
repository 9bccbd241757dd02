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

/* After an apply, before an epoch starts: the queue's refill after the
 * freeze the apply made; the tail of the candidate before is the drain's. */
#define SETTLE_MAX_USEC 125000ULL
#define DRAIN_POLL_USEC 50000ULL      /* then until the queue of the candidate before drained */
#define PEEK_USEC 100000ULL           /* a challenger's probes are looked at this often in its epoch */
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
        if (a->policy_copied)
                autotune_policy_done(&a->policy);
        free(a->probe0);
        free(a->cand_hist);
        free(a->trial_h0);
        free(a);
}

bool autotune_running(const AutoDevice *a) {
        return a->phase != PHASE_IDLE && a->phase != PHASE_FINISHING;
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

/* Whether the probes of the epoch so far settle that the candidate is far
 * worse than the best so far: more of them above a->peek_limit_ms than
 * the p99 of the most probes the epoch can hold allows (then its p99
 * would be over the limit whatever the rest of the epoch brings).
 * *ret_p99 is the p99 of the probes so far (over the limit then). */
static bool peek_far_worse(AutoDevice *a, uint64_t now, double *ret_p99, char *why, size_t why_size) {
        const Hist *h = probe_hist(a->tuner, a->device);
        /* the epoch's end may come a little late: a look's worth of slack */
        uint64_t n_max = probes_max(a->tuner, a->device, a->policy.epoch_usec + PEEK_USEC), ns;
        Hist d;

        if (!h || !a->probe0 || n_max == 0 || hist_diff(&d, h, a->probe0) < 0 || d.count == 0)
                return false;
        uint64_t above = d.count - hist_count_le(&d, (uint64_t) (a->peek_limit_ms * 1e6));
        if (!autotune_p99_above_certain(above, n_max) || hist_percentile(&d, 99, &ns) < 0 ||
            !((double) ns / 1e6 > a->peek_limit_ms))
                return false;
        *ret_p99 = (double) ns / 1e6;
        snprintf(why, why_size,
                 "%" PRIu64 " of its first %" PRIu64 " probes (%.1f s into the epoch) read slower than %.2f ms, %u times "
                 "the best so far's %.2f ms (candidate %d, its slowest epoch): more than its epoch's p99 can allow",
                 above, d.count, (double) (now - a->t0) / 1e6, a->peek_limit_ms, a->policy.guard_factor,
                 a->peek_base_ms, a->peek_ref);
        return true;
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
        a->p99_before = a->search && a->n_phases > 0 ? a->p99_before0 : hist_p99_ms(&a->cand_hist[0]);
        a->p99_after = hist_p99_ms(&a->cand_hist[a->decision.winner]);
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
        autotune_summarise_partial(a);
        for (size_t i = 0; i < a->n_calls; i++)
                if (varlink_call_wants_more(a->calls[i]) && varlink_call_is_connected(a->calls[i]))
                        (void) varlink_call_notify(a->calls[i], json_pack("{s:s, s:o}", "device", a->device->sysname,
                                                                           "trial", autotune_trial_json(a)));
}

/* ---- the trial ---- */

static void apply_slot(AutoDevice *a);

/* What the trial chose (or kept) for the workload it measured, for when
 * that workload comes back. Not after an abort, an idle disk or too few
 * epochs: those learned nothing of it. */
static void remember(AutoDevice *a) {
        AutoVerdict v = a->decision.verdict;
        AutoSignature sig;
        AutoMemoryDisk *m;

        if (!a->policy.remember || a->aborted ||
            (v != AUTO_VERDICT_CHANGE && v != AUTO_VERDICT_KEEP_BEST && v != AUTO_VERDICT_KEEP_NOISE &&
             v != AUTO_VERDICT_KEEP_HYSTERESIS) ||
            !autotune_series_signature(a->series, a->n_cand, &sig) || sig.iops < a->policy.min_iops)
                return;
        m = autotune_memory_disk(a->tuner, a->device, true);
        if (!m)
                return;
        autotune_memory_record(m->m, &m->n, &sig, &a->cand[a->decision.winner], now_usec(CLOCK_REALTIME));
        (void) autotune_memory_save(a->tuner);
        /* the workload the watch compares with from now on; it is in
         * force, not arriving */
        a->sig = a->prev_sig = sig;
        a->has_sig = a->has_prev_sig = true;
        a->changed_samples = 0;
}

static bool plan_round(AutoDevice *a);

/* The candidates of family f around incumbent, the kernel guards and the
 * candidates that tripped applied; -ENOENT: nothing to compare (why is
 * appended to the trial's note). */
static int family_candidates(AutoDevice *a, AutoFamily f, const AutoCandidate *incumbent, const char *line) {
        Manager *m = a->tuner->manager;
        Device *d = a->device;
        char note[256];
        size_t n;
        int r;

        r = autotune_family_candidates(&a->policy, f, incumbent, line, d->info->zoned && !streq(d->info->zoned, "none"),
                                       m->tune.kernel_version, 0, a->cand, &n, note, sizeof note);
        if (r >= 0)
                n = autotune_drop_tripped(a->cand, n, a->tripped, a->n_tripped, now_usec(CLOCK_MONOTONIC), note,
                                          sizeof note);
        if (note[0]) {
                size_t len = strlen(a->note);
                if (len + 1 < sizeof a->note)
                        snprintf(a->note + len, sizeof a->note - len, "%s%s: %s", len ? "; " : "",
                                 auto_family_to_string(f), note);
        }
        a->n_cand = n;
        return r < 0 || n < 2 ? -ENOENT : 0;
}

/* The state of a phase about to be measured. */
static void phase_begin(AutoDevice *a, AutoFamily f) {
        a->family = f;
        a->policy.objective = f == AUTO_FAMILY_READ_AHEAD ? AUTO_OBJECTIVE_SEQ_READ : a->objective0;
        memset(a->series, 0, sizeof a->series);
        memset(a->refused, 0, sizeof a->refused);
        memset(a->summary, 0, sizeof a->summary);
        memset(a->drops, 0, sizeof a->drops);
        a->round = 0;
        a->n_generated += (unsigned) a->n_cand - (a->n_phases > 0); /* the incumbent was counted already */
        for (size_t c = 0; a->cand_hist && c < AUTOTUNE_MAX_CANDIDATES; c++)
                hist_reset(&a->cand_hist[c]);
}

/* A search's phase is over: its winner is the next phase's incumbent.
 * true: the next phase runs; false: the search is over (no family left,
 * none with a candidate, or the switch cap reached), and finish() decides
 * with the last phase. */
static bool next_phase(AutoDevice *a) {
        AutoDecision dec;
        AutoSignature sig;
        char w[AUTOTUNE_CANDIDATE_STRMAX];
        char active[32];

        autotune_decide_raced(&a->policy, a->series, a->n_cand, a->drops, a->summary, &dec);
        for (size_t c = 0; c < a->n_cand; c++)
                a->n_measured += a->series[c].n > 0 && (c > 0 || a->n_phases == 0);
        if (a->n_phases == 0 && a->cand_hist)
                a->p99_before0 = hist_p99_ms(&a->cand_hist[0]);
        a->n_phases++;
        if (autotune_series_signature(a->series, a->n_cand, &sig))
                a->sequential = autotune_sequential_reads(&sig, a->policy.min_iops);
        AutoCandidate inc = a->cand[dec.winner];
        size_t len = strlen(a->phases_text);
        if (len + 1 < sizeof a->phases_text)
                snprintf(a->phases_text + len, sizeof a->phases_text - len, "%s%s: %s (%s)", len ? "; " : "",
                         auto_family_to_string(a->family), autotune_candidate_format(&inc, w, sizeof w),
                         auto_verdict_to_string(dec.verdict));
        a->search_changed = a->search_changed || dec.verdict == AUTO_VERDICT_CHANGE;
        if (dec.verdict != AUTO_VERDICT_CHANGE && dec.verdict != AUTO_VERDICT_KEEP_BEST &&
            dec.verdict != AUTO_VERDICT_KEEP_NOISE && dec.verdict != AUTO_VERDICT_KEEP_HYSTERESIS)
                return false; /* idle, too few epochs: the next phase would learn no more */
        snprintf(active, sizeof active, "%s", a->cand[a->current].scheduler);

        _cleanup_free_ char *ps = path_join(a->device->info->blockdir, "queue/scheduler"), *line = NULL;
        if (!ps || sysfs_read(ps, &line) < 0 || scheduler_line_add_loadable(&line) < 0)
                return false;
        for (AutoFamily f = autotune_next_family(&a->policy, a->family, a->sequential); f < _AUTO_FAMILY_MAX;
             f = autotune_next_family(&a->policy, f, a->sequential)) {
                AutoCandidate keep[AUTOTUNE_MAX_CANDIDATES];
                size_t n_keep = a->n_cand;
                memcpy(keep, a->cand, sizeof keep);
                a->policy.objective = a->objective0;
                if (family_candidates(a, f, &inc, line) < 0) {
                        /* the decision of finish() is on the last phase measured */
                        memcpy(a->cand, keep, sizeof keep);
                        a->n_cand = n_keep;
                        continue;
                }
                phase_begin(a, f);
                a->current = 0;
                for (size_t c = 0; c < a->n_cand; c++)
                        if (streq(a->cand[c].scheduler, active)) {
                                a->current = c; /* what is in force, for the switch count of the plan */
                                break;
                        }
                log_info("%s: search phase %u: %s, %zu settings around %s.", a->device->sysname, a->n_phases + 1,
                         auto_family_to_string(f), a->n_cand, autotune_candidate_format(&inc, w, sizeof w));
                if (!plan_round(a)) {
                        a->n_cand = 1; /* measured nothing: the incumbent stands */
                        a->cand[0] = inc;
                        a->series[0].n = 0;
                        return false;
                }
                apply_slot(a);
                return true;
        }
        return false;
}

static void finish(AutoDevice *a) {
        Device *d = a->device;
        AutoTuner *t = a->tuner;
        char w[AUTOTUNE_CANDIDATE_STRMAX], b[AUTOTUNE_CANDIDATE_STRMAX], hm[16];

        a->ended_usec = now_usec(CLOCK_REALTIME);
        a->timer = sd_event_source_disable_unref(a->timer);
        if (a->search && !a->aborted && a->n_cand > 1 && next_phase(a))
                return;
        if (!a->aborted) {
                autotune_decide_raced(&a->policy, a->series, a->n_cand, a->drops, a->summary, &a->decision);
                a->has_result = true;
                if (a->search && a->decision.verdict != AUTO_VERDICT_CHANGE && a->search_changed &&
                    !autotune_candidate_equal(&a->cand[a->decision.winner], &a->origin0)) {
                        /* an earlier phase changed the setting, the last kept it */
                        a->decision.verdict = AUTO_VERDICT_CHANGE;
                        snprintf(a->decision.reason, sizeof a->decision.reason, "a search by families: %.200s",
                                 a->phases_text);
                }
        } else {
                autotune_summarise_partial(a);
                a->decision = (AutoDecision) { .verdict = AUTO_VERDICT_ABORTED, .winner = 0, .best = -1, .p = 1 };
                snprintf(a->decision.reason, sizeof a->decision.reason, "%s", a->abort_reason);
                a->has_result = true;
                if (a->search) {
                        a->cand[0] = a->origin0; /* back to the setting before the trial, not a phase's */
                        a->n_cand = a->n_cand ? a->n_cand : 1;
                }
        }
        a->policy.objective = a->search ? a->objective0 : a->policy.objective;
        price_compute(a);
        remember(a);
        /* the watch's next interval starts after the trial, not across it */
        a->watch_mono = a->recall_mono = 0;
        const AutoCandidate *chosen = &a->cand[a->decision.winner];
        autotune_candidate_format(chosen, w, sizeof w);
        autotune_candidate_format(&a->cand[0], b, sizeof b);
        if (a->decision.verdict == AUTO_VERDICT_CHANGE) {
                a->choice = *chosen;
                a->choice.baseline = false;
                a->has_choice = true;
                snprintf(a->origin, sizeof a->origin, "trial at %s", autotune_clock_hm(a->ended_usec, hm));
                a->choice_trial = a->n_trials;
                const AutoSummary *sw = &a->summary[a->decision.winner], *s0 = &a->summary[0];
                double dw = s0->write_mbps > 0 ? (sw->write_mbps - s0->write_mbps) / s0->write_mbps * 100 : 0;
                if (a->search) {
                        autotune_candidate_format(&a->origin0, b, sizeof b);
                        if (snprintf(a->choice_text, sizeof a->choice_text,
                                     "%s, chosen by %s over %s: a search by families, %u candidates measured in %u "
                                     "phases (%.200s). AutoTune= wins over the static keys of these knobs.",
                                     w, a->origin, b, a->n_measured, a->n_phases, a->phases_text) < 0)
                                a->choice_text[0] = 0;
                } else if (snprintf(a->choice_text, sizeof a->choice_text,
                         "%s, chosen by %s: read %s %.2f ms against %.2f ms for %s, write throughput %+.0f %%; "
                         "confidence %.1f %%. AutoTune= wins over the static keys of these knobs.",
                         w, a->origin, a->decision.by_p99 ? "p99" : "await",
                         a->decision.by_p99 ? sw->read_p99_ms : sw->read_await_ms,
                         a->decision.by_p99 ? s0->read_p99_ms : s0->read_await_ms, b, dw,
                         a->decision.confidence * 100) < 0)
                        a->choice_text[0] = 0;
                a->history.last_change_usec = now_usec(CLOCK_MONOTONIC);
                a->n_changes++;
                t->n_changes++;
                autotune_promise_make(&a->policy, a->series, a->summary, a->n_cand, a->decision.winner, &a->promise);
                a->has_promise = a->promising = true;
                a->promise_state = AUTO_PROMISE_WATCHING;
                a->promise_until = now_usec(CLOCK_MONOTONIC) + AUTOTUNE_PROMISE_USEC;
                a->n_promise_e = 0;
                a->fell_back = false;
                snprintf(a->promise_why, sizeof a->promise_why, "watching the chosen setting on the workload");
                log_struct(LOG_INFO, BLKMQD_MESSAGE_TRIAL_DECISION,
                           LOG_FIELDS({ "BLKMQD_DEVICE", d->sysname }, { "BLKMQD_VERDICT", auto_verdict_to_string(a->decision.verdict) },
                                      { "BLKMQD_OLD", b }, { "BLKMQD_NEW", w }, { "BLKMQD_REASON", a->decision.reason }),
                           "%s: trial chose %s over %s: %s (switches %u, apply time %" PRIu64 " ms).", d->sysname, w, b,
                           a->decision.reason, a->switches, a->apply_usec / 1000);
        } else {
                /* Keep what was there; a choice of an earlier trial stays. */
                if (a->decision.verdict == AUTO_VERDICT_ABORTED)
                        t->n_aborted++;
                log_struct(LOG_INFO, BLKMQD_MESSAGE_TRIAL_DECISION,
                           LOG_FIELDS({ "BLKMQD_DEVICE", d->sysname }, { "BLKMQD_VERDICT", auto_verdict_to_string(a->decision.verdict) },
                                      { "BLKMQD_OLD", b }, { "BLKMQD_NEW", b }, { "BLKMQD_REASON", a->decision.reason }),
                           "%s: trial kept %s: %s: %s.", d->sysname, b, auto_verdict_to_string(a->decision.verdict),
                           a->decision.reason);
        }
        /* Put the chosen (or the kept) setting in place; the callers get
         * their reply once it is (autotuner_event()). */
        a->current = a->decision.winner;
        a->phase = PHASE_FINISHING;
        emit(a);
        /* No job (the device no longer matches a section, or the apply
         * failed): nothing to wait for. */
        if (manager_apply(t->manager, d) < 0 || !d->busy) {
                a->phase = PHASE_IDLE;
                calls_finish(a, json_pack("{s:s, s:o}", "device", d->sysname, "trial", autotune_trial_json(a)));
        }
}

static void abort_trial(AutoDevice *a, const char *fmt, const char *arg) {
        snprintf(a->abort_reason, sizeof a->abort_reason, fmt, arg);
        a->aborted = true;
        log_warning("%s: trial ended early: %s; going back to the setting before it.", a->device->sysname,
                    a->abort_reason);
        finish(a);
}

/* Ends a running trial at once, from outside it (a restore, the device
 * removed or replaced): no setting is applied; its calls get the trial as it
 * stands. */
static void end_trial_now(AutoDevice *a, const char *reason) {
        snprintf(a->abort_reason, sizeof a->abort_reason, "%s", reason);
        a->aborted = true;
        a->phase = PHASE_IDLE;
        a->timer = sd_event_source_disable_unref(a->timer);
        a->ended_usec = now_usec(CLOCK_REALTIME);
        calls_finish(a, json_pack("{s:s, s:o}", "device", a->device->sysname, "trial", autotune_trial_json(a)));
}

/* Candidates still in the race, the current setting included. */
static size_t in_race(const AutoDevice *a) {
        size_t k = 0;
        for (size_t c = 0; c < a->n_cand; c++)
                k += !a->drops[c].dropped;
        return k;
}

/* The next round's order, unless the trial is over: its last round done,
 * every challenger gone, or the round's switches beyond AutoMaxSwitches=. */
static bool plan_round(AutoDevice *a) {
        if (a->round >= a->policy.rounds || in_race(a) < 2)
                return false;
        a->n_order = autotune_round_order(a->cand, a->n_cand, a->drops, a->round, a->order);
        a->pos = 0;
        unsigned need = autotune_order_switches(a->cand, a->order, a->n_order, a->cand[a->current].scheduler);
        if (a->switches + need > a->policy.max_switches) {
                snprintf(a->stop_reason, sizeof a->stop_reason,
                         "ended after %u of %u rounds: the next would take the scheduler switches to %u, above "
                         "AutoMaxSwitches=%u", a->round, a->policy.rounds, a->switches + need, a->policy.max_switches);
                return false;
        }
        a->n_slots = a->slot + a->n_order * (a->policy.rounds - a->round);
        return true;
}

/* After an epoch (or a candidate the kernel refused): the next candidate
 * of the round, or the race's look at the round's end and the next round. */
static void next_epoch(AutoDevice *a) {
        char buf[AUTOTUNE_CANDIDATE_STRMAX];

        a->pos++;
        if (a->pos < a->n_order) {
                apply_slot(a);
                return;
        }
        bool was[AUTOTUNE_MAX_CANDIDATES];
        for (size_t c = 0; c < a->n_cand; c++)
                was[c] = a->drops[c].dropped;
        if (autotune_race(&a->policy, a->series, a->n_cand, a->drops) > 0)
                for (size_t c = 1; c < a->n_cand; c++)
                        if (a->drops[c].dropped && !was[c])
                                log_info("%s: %s leaves the trial: %s.", a->device->sysname,
                                         autotune_candidate_format(&a->cand[c], buf, sizeof buf), a->drops[c].why);
        a->round++;
        if (autotune_race_settled(a->drops, a->n_cand) && a->round < a->policy.rounds) {
                const AutoDrop *d0 = &a->drops[0];
                snprintf(a->stop_reason, sizeof a->stop_reason,
                         "settled after %u of %u rounds: %s beats the current setting with confidence (p=%.2g)",
                         a->round, a->policy.rounds, autotune_candidate_format(&a->cand[d0->by], buf, sizeof buf),
                         d0->p);
                log_info("%s: trial %s.", a->device->sysname, a->stop_reason);
                finish(a);
                return;
        }
        if (plan_round(a))
                apply_slot(a);
        else
                finish(a);
}

/* An epoch ends: at its time, or cut short by a look at its probes
 * (peek_why: why it is far worse already, its probes' p99 in peek_p99). */
static void end_epoch(AutoDevice *a, const char *peek_why, double peek_p99) {
        BlockStat b;
        EpochFigures e;
        char why[256], buf[AUTOTUNE_CANDIDATE_STRMAX];
        int r;

        a->timer = sd_event_source_disable_unref(a->timer);
        r = read_stat(a->device, &b);
        if (r < 0) {
                abort_trial(a, "cannot read stat: %s", strerror(-r));
                return;
        }
        autotune_epoch_figures(&a->stat0, &b, now_usec(CLOCK_MONOTONIC) - a->t0, &e);
        e.errors = (unsigned) (probe_errors(a->tuner, a->device) - a->probe_errors0);
        /* cut short: the p99 of the probes it had, over the limit */
        e.read_p99_ms = peek_why ? peek_p99 : probe_p99_ms(a);
        probe_pool(a, a->current);
        autotune_candidate_format(&a->cand[a->current], buf, sizeof buf);
        log_debug("%s: epoch %zu/%zu %s: read await %.2f ms, probe p99 %.2f ms, %.0f r/s, write %.1f MB/s, "
                  "in flight %.1f",
                  a->device->sysname, a->slot + 1, a->n_slots, buf, e.read_await_ms, e.read_p99_ms, e.read_iops,
                  e.write_mbps, e.in_flight);
        if (e.errors && autotune_guard(&a->policy, &a->series[0], &e, why, sizeof why)) {
                char msg[512];
                if (snprintf(msg, sizeof msg, "guard rail: %s with %s", why, buf) < 0)
                        msg[0] = 0;
                if (a->current != 0)
                        autotune_tripped_add(a->tripped, &a->n_tripped, &a->cand[a->current],
                                             now_usec(CLOCK_MONOTONIC));
                abort_trial(a, "%s", msg);
                return;
        }
        /* The price: a candidate far worse than the best so far leaves the
         * trial after this one epoch (and the next trials for an hour). */
        bool far;
        if (peek_why) {
                far = true;
                snprintf(why, sizeof why, "%s", peek_why);
        } else
                far = autotune_far_worse(&a->policy, a->series, a->n_cand, a->drops, a->current, &e, why, sizeof why);
        AutoSeries *ser = &a->series[a->current];
        if (ser->n < AUTOTUNE_MAX_EPOCHS)
                ser->epochs[ser->n++] = e;
        if (far) {
                AutoDrop *dr = &a->drops[a->current];
                *dr = (AutoDrop) { .dropped = true, .by = -1, .epochs = (unsigned) ser->n };
                snprintf(dr->why, sizeof dr->why, "far worse than the best so far: %.200s", why);
                autotune_tripped_add(a->tripped, &a->n_tripped, &a->cand[a->current], now_usec(CLOCK_MONOTONIC));
                log_info("%s: %s leaves the trial: %s.", a->device->sysname, buf, dr->why);
        }
        a->slot++;
        progress(a);
        next_epoch(a);
}

static int on_epoch_end(sd_event_source *s, uint64_t usec, void *userdata) {
        end_epoch(userdata, NULL, 0);
        return 0;
}

/* Every PEEK_USEC of a challenger's epoch: its probes so far, against the
 * far-worse limit. A setting that starves the reads costs the workload
 * for as long as it is measured; its verdict is often certain in a tenth
 * of the epoch. */
static int on_peek(sd_event_source *s, uint64_t usec, void *userdata) {
        AutoDevice *a = userdata;
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        char why[256];
        double p99 = 0;

        a->timer = sd_event_source_disable_unref(a->timer);
        if (now + 1000 >= a->epoch_end) {
                end_epoch(a, NULL, 0);
                return 0;
        }
        if (peek_far_worse(a, now, &p99, why, sizeof why)) {
                end_epoch(a, why, p99);
                return 0;
        }
        uint64_t left = a->epoch_end - now;
        int r = sd_event_add_time_relative(a->tuner->manager->event, &a->timer, CLOCK_MONOTONIC,
                                           left < PEEK_USEC ? left : PEEK_USEC, 1000, on_peek, a);
        if (r < 0)
                abort_trial(a, "cannot arm a timer: %s", strerror(-r));
        return 0;
}

static int on_settled(sd_event_source *s, uint64_t usec, void *userdata) {
        AutoDevice *a = userdata;
        int r;

        a->timer = sd_event_source_disable_unref(a->timer);
        r = read_stat(a->device, &a->stat0);
        if (r < 0) {
                abort_trial(a, "cannot read stat: %s", strerror(-r));
                return 0;
        }
        /* The queue of the candidate before must have drained first. */
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        if (!autotune_drained(&a->stat_applied, &a->stat0) && now < a->applied_mono + AUTOTUNE_DRAIN_MAX_USEC) {
                r = sd_event_add_time_relative(a->tuner->manager->event, &a->timer, CLOCK_MONOTONIC,
                                               DRAIN_POLL_USEC, 1000, on_settled, a);
                if (r < 0)
                        abort_trial(a, "cannot arm a timer: %s", strerror(-r));
                return 0;
        }
        a->drain_usec += now - a->applied_mono;
        a->t0 = now_usec(CLOCK_MONOTONIC);
        a->probe_errors0 = probe_errors(a->tuner, a->device);
        probe_mark(a);
        a->phase = PHASE_MEASURING;
        a->epoch_end = a->t0 + a->policy.epoch_usec;
        a->peek_ref = -1;
        a->peek_limit_ms = a->probe0 && a->policy.epoch_usec > PEEK_USEC
                                   ? autotune_far_worse_limit(&a->policy, a->series, a->n_cand, a->drops, a->current,
                                                              &a->peek_ref, &a->peek_base_ms)
                                   : 0;
        if (a->peek_limit_ms > 0)
                r = sd_event_add_time_relative(a->tuner->manager->event, &a->timer, CLOCK_MONOTONIC, PEEK_USEC, 1000,
                                               on_peek, a);
        else
                r = sd_event_add_time_relative(a->tuner->manager->event, &a->timer, CLOCK_MONOTONIC,
                                               a->policy.epoch_usec, 1000, on_epoch_end, a);
        if (r < 0)
                abort_trial(a, "cannot arm a timer: %s", strerror(-r));
        return 0;
}

static void apply_slot(AutoDevice *a) {
        /* Candidates the kernel refused, or that left the race in this
         * round, are passed over. */
        while (a->pos < a->n_order && (a->refused[a->order[a->pos]] || a->drops[a->order[a->pos]].dropped))
                a->pos++;
        if (a->pos >= a->n_order) {
                a->pos = a->n_order - 1;
                next_epoch(a);
                return;
        }
        a->current = a->order[a->pos];
        a->phase = PHASE_APPLYING;
        int r = manager_apply(a->tuner->manager, a->device);
        if (r < 0)
                abort_trial(a, "cannot apply: %s", strerror(-r));
        else if (!a->device->busy)
                /* no job: the device matches no section any more (a loop
                 * device detached from its file, say) */
                abort_trial(a, "%s", "the device no longer matches its policy");
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
        bool refused = false;

        /* A job that was running when the candidate was asked for came
         * back; the candidate's own job follows (dirty). */
        if (!j || d->dirty)
                return;
        a->apply_usec += j->usec;
        for (size_t i = 0; i < j->n_entries; i++) {
                const TuneEntry *e = &j->entries[i];
                if (!trial_knob(&a->cand[a->current], e->knob))
                        continue;
                if (e->outcome == TUNE_FAILED)
                        refused = true;
                if (e->knob == KNOB_SCHEDULER && e->outcome == TUNE_CHANGED)
                        a->switches++;
        }
        if (j->device_error) {
                abort_trial(a, "%s", "the device vanished");
                return;
        }
        if (refused) {
                char buf[AUTOTUNE_CANDIDATE_STRMAX];
                log_notice("%s: the kernel refused %s; left out of this trial.", d->sysname,
                           autotune_candidate_format(&a->cand[a->current], buf, sizeof buf));
                if (a->current == 0) {
                        abort_trial(a, "%s", "the current setting cannot be put back");
                        return;
                }
                a->refused[a->current] = true;
                a->drops[a->current] = (AutoDrop) { .dropped = true, .by = -1,
                                                    .epochs = (unsigned) a->series[a->current].n };
                snprintf(a->drops[a->current].why, sizeof a->drops[a->current].why, "refused by the kernel");
                next_epoch(a);
                return;
        }
        uint64_t settle = a->policy.epoch_usec / 16;
        if (settle > SETTLE_MAX_USEC)
                settle = SETTLE_MAX_USEC;
        a->phase = PHASE_SETTLING;
        a->applied_mono = now_usec(CLOCK_MONOTONIC);
        if (read_stat(d, &a->stat_applied) < 0)
                a->stat_applied = (BlockStat) {}; /* nothing in flight: settle by time alone */
        if (sd_event_add_time_relative(a->tuner->manager->event, &a->timer, CLOCK_MONOTONIC, settle, 1000, on_settled,
                                       a) < 0)
                abort_trial(a, "%s", "cannot arm a timer");
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

/* A new trial of a's candidates: its counters and clocks, and the caps'
 * history. */
static void trial_begin(AutoDevice *a, bool forced) {
        AutoTuner *t = a->tuner;

        a->n_slots = a->n_cand * a->policy.rounds;
        a->slot = 0;
        a->round = 0;
        a->stop_reason[0] = 0;
        a->p99_before = a->p99_during = a->p99_after = 0;
        memset(a->drops, 0, sizeof a->drops);
        free(a->trial_h0);
        a->trial_h0 = NULL;
        const Hist *h = probe_hist(t, a->device);
        if (h && (a->trial_h0 = malloc(sizeof *a->trial_h0)))
                *a->trial_h0 = *h;
        free(a->cand_hist);
        a->cand_hist = calloc(AUTOTUNE_MAX_CANDIDATES, sizeof *a->cand_hist);
        for (size_t c = 0; a->cand_hist && c < AUTOTUNE_MAX_CANDIDATES; c++)
                hist_reset(&a->cand_hist[c]);
        a->forced = forced;
        a->aborted = a->has_result = false;
        a->abort_reason[0] = 0;
        a->switches = 0;
        a->apply_usec = 0;
        a->drain_usec = 0;
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
        if (autotune_running(a) || a->phase == PHASE_FINISHING) {
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

        if (a->policy_copied)
                autotune_policy_done(&a->policy);
        r = autotune_policy_copy(&a->policy, p);
        if (r < 0)
                return r;
        a->policy_copied = true;
        memset(a->series, 0, sizeof a->series);
        memset(a->refused, 0, sizeof a->refused);
        memset(a->summary, 0, sizeof a->summary);
        a->search = p->knobs != 0;
        a->n_phases = a->n_generated = a->n_measured = 0;
        a->search_changed = a->sequential = false;
        a->phases_text[0] = 0;
        a->origin0 = cur;
        a->objective0 = p->objective;
        a->p99_before0 = 0;
        if (a->search) {
                /* Every phase may change the setting: their tests share
                 * the trial's error rate (AutoTunePolicy.looks), counted
                 * over the families the search may run (read-ahead
                 * included: whether the workload reads sequentially is
                 * known only later; an upper bound keeps it honest). */
                a->policy.looks = 0;
                for (AutoFamily f = autotune_next_family(p, -1, true); f < _AUTO_FAMILY_MAX;
                     f = autotune_next_family(p, f, true))
                        a->policy.looks++;
                /* the first family with something to compare */
                a->note[0] = 0;
                r = -ENOENT;
                for (AutoFamily f = autotune_next_family(p, -1, false); f < _AUTO_FAMILY_MAX && r < 0;
                     f = autotune_next_family(p, f, false))
                        if (family_candidates(a, f, &cur, line) >= 0) {
                                r = 0;
                                a->family = f;
                        }
        } else
                r = autotune_candidates(p, &cur, line, d->info->zoned && !streq(d->info->zoned, "none"),
                                        m->tune.kernel_version, 0, a->cand, &a->n_cand, a->note, sizeof a->note);
        if (r >= 0 && !a->search) {
                a->n_cand = autotune_drop_tripped(a->cand, a->n_cand, a->tripped, a->n_tripped,
                                                  now_usec(CLOCK_MONOTONIC), a->note, sizeof a->note);
                if (a->n_cand < 2)
                        r = -EPERM;
        }
        if (r < 0) {
                snprintf(why, why_size, "nothing to compare: the bounds leave only the current setting%s%s",
                         a->note[0] ? "; " : "", a->note);
                a->n_cand = 0;
                return -EPERM;
        }
        {
                size_t order[AUTOTUNE_MAX_CANDIDATES], k;
                k = autotune_round_order(a->cand, a->n_cand, NULL, 0, order);
                unsigned need = autotune_order_switches(a->cand, order, k, a->cand[0].scheduler);
                if (need > p->max_switches) {
                        snprintf(why, why_size, "one round of these candidates takes %u scheduler switches, above "
                                                "AutoMaxSwitches=%u", need, p->max_switches);
                        a->n_cand = 0;
                        return -EPERM;
                }
        }
        trial_begin(a, forced);
        if (a->search)
                phase_begin(a, a->family);
        r = add_call(a, call);
        if (r < 0)
                return r;
        log_info("%s: trial of %zu settings, %u rounds of %.1f s epochs (%s%s%s).", d->sysname, a->n_cand, p->rounds,
                 (double) p->epoch_usec / 1e6, forced ? "asked for" : "automatic", a->note[0] ? "; " : "", a->note);
        emit(a);
        a->current = 0;
        (void) plan_round(a);
        apply_slot(a);
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
        a->phase = PHASE_IDLE;
        a->has_choice = false;
        a->promising = false;
        a->n_tripped = 0;
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
                 * trial ends at its next step (apply_slot() sees no job). */
                a->has_choice = false;
                return;
        }
        if (a->phase != PHASE_IDLE && a->phase != PHASE_FINISHING) {
                c = &a->cand[a->current];
                origin = "trial running";
        } else if (a->has_choice) {
                c = &a->choice;
                origin = a->origin;
        } else if (a->phase == PHASE_FINISHING) {
                c = &a->cand[a->current]; /* the setting before the trial */
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
                a->phase = PHASE_IDLE;
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
                if (a->phase == PHASE_APPLYING)
                        on_applied(a);
                else if (a->phase == PHASE_FINISHING && !d->dirty) {
                        /* The chosen setting (or the one before the trial) is in place. */
                        a->phase = PHASE_IDLE;
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
                } else if (a->phase == PHASE_FINISHING) {
                        a->phase = PHASE_IDLE;
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
        AutoPromiseState st = autotune_promise_check(&a->policy, &a->promise, a->promise_e, a->n_promise_e, why,
                                                     sizeof why);
        if (st != AUTO_PROMISE_WATCHING)
                snprintf(a->promise_why, sizeof a->promise_why, "%s", why);
        a->promise_state = st;
        if (st == AUTO_PROMISE_BROKEN) {
                int fb = autotune_fallback(&a->policy, a->summary, a->n_cand, a->decision.winner);
                const AutoCandidate *c = &a->cand[fb >= 0 ? fb : 0];
                autotune_candidate_format(&a->cand[a->decision.winner], w, sizeof w);
                autotune_candidate_format(c, f, sizeof f);
                a->promising = false;
                a->fell_back = true;
                a->fallback = *c;
                a->fallback.baseline = false;
                autotune_tripped_add(a->tripped, &a->n_tripped, &a->cand[a->decision.winner], now);
                /* the workload's memory gets the fallback, not the broken choice */
                AutoMemoryDisk *m = a->policy.remember ? autotune_memory_disk(t, a->device, true) : NULL;
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
                if (!a || autotune_running(a) || a->phase == PHASE_FINISHING)
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
                                a->n_tripped = 0; /* another workload: what tripped may do well now */
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
