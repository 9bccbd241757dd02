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
#include "log.h"
#include "message-id.h"
#include "metrics-text.h"
#include "probe.h"
#include "strbuf.h"
#include "sysfs.h"
#include "util.h"
#include "varlink.h"

#define SETTLE_MAX_USEC 500000ULL     /* after an apply, before an epoch starts */
#define HOTPLUG_DELAY_USEC 10000000ULL /* a new disk gets its workload first */
#define WATCH_INTERVAL_USEC 10000000ULL /* periodic and workload-change checks */
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

static void finish(AutoDevice *a) {
        Device *d = a->device;
        AutoTuner *t = a->tuner;
        char w[96], b[96], hm[16];

        a->ended_usec = now_usec(CLOCK_REALTIME);
        a->timer = sd_event_source_disable_unref(a->timer);
        if (!a->aborted) {
                autotune_decide(&a->policy, a->series, a->n_cand, a->summary, &a->decision);
                a->has_result = true;
        } else {
                autotune_summarise_partial(a);
                a->decision = (AutoDecision) { .verdict = AUTO_VERDICT_ABORTED, .winner = 0, .best = -1, .p = 1 };
                snprintf(a->decision.reason, sizeof a->decision.reason, "%s", a->abort_reason);
                a->has_result = true;
        }
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
                snprintf(a->choice_text, sizeof a->choice_text,
                         "%s, chosen by %s: read %s %.2f ms against %.2f ms for %s, write throughput %+.0f %%; "
                         "confidence %.1f %%. AutoTune= wins over the static keys of these knobs.",
                         w, a->origin, a->decision.by_p99 ? "p99" : "await",
                         a->decision.by_p99 ? sw->read_p99_ms : sw->read_await_ms,
                         a->decision.by_p99 ? s0->read_p99_ms : s0->read_await_ms, b, dw,
                         a->decision.confidence * 100);
                a->history.last_change_usec = now_usec(CLOCK_MONOTONIC);
                a->n_changes++;
                t->n_changes++;
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

static int on_epoch_end(sd_event_source *s, uint64_t usec, void *userdata) {
        AutoDevice *a = userdata;
        BlockStat b;
        EpochFigures e;
        char why[256], buf[96];
        int r;

        a->timer = sd_event_source_disable_unref(a->timer);
        r = read_stat(a->device, &b);
        if (r < 0) {
                abort_trial(a, "cannot read stat: %s", strerror(-r));
                return 0;
        }
        autotune_epoch_figures(&a->stat0, &b, now_usec(CLOCK_MONOTONIC) - a->t0, &e);
        e.errors = (unsigned) (probe_errors(a->tuner, a->device) - a->probe_errors0);
        e.read_p99_ms = probe_p99_ms(a);
        AutoSeries *ser = &a->series[a->current];
        if (ser->n < AUTOTUNE_MAX_EPOCHS)
                ser->epochs[ser->n++] = e;
        autotune_candidate_format(&a->cand[a->current], buf, sizeof buf);
        log_debug("%s: epoch %zu/%zu %s: read await %.2f ms, probe p99 %.2f ms, %.0f r/s, write %.1f MB/s, "
                  "in flight %.1f",
                  a->device->sysname, a->slot + 1, a->n_slots, buf, e.read_await_ms, e.read_p99_ms, e.read_iops,
                  e.write_mbps, e.in_flight);
        if ((a->current != 0 || e.errors) && autotune_guard(&a->policy, &a->series[0], &e, why, sizeof why)) {
                char msg[400];
                snprintf(msg, sizeof msg, "guard rail: %s with %s", why, buf);
                if (a->current != 0)
                        autotune_tripped_add(a->tripped, &a->n_tripped, &a->cand[a->current],
                                             now_usec(CLOCK_MONOTONIC));
                abort_trial(a, "%s", msg);
                return 0;
        }
        a->slot++;
        progress(a);
        if (a->slot >= a->n_slots)
                finish(a);
        else
                apply_slot(a);
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
        a->t0 = now_usec(CLOCK_MONOTONIC);
        a->probe_errors0 = probe_errors(a->tuner, a->device);
        probe_mark(a);
        a->phase = PHASE_MEASURING;
        r = sd_event_add_time_relative(a->tuner->manager->event, &a->timer, CLOCK_MONOTONIC, a->policy.epoch_usec,
                                       1000, on_epoch_end, a);
        if (r < 0)
                abort_trial(a, "cannot arm a timer: %s", strerror(-r));
        return 0;
}

static void apply_slot(AutoDevice *a) {
        /* Candidates the kernel refused are passed over. */
        while (a->slot < a->n_slots && a->refused[autotune_slot_candidate(a->slot, a->n_cand)])
                a->slot++;
        if (a->slot >= a->n_slots) {
                finish(a);
                return;
        }
        a->current = autotune_slot_candidate(a->slot, a->n_cand);
        a->phase = PHASE_APPLYING;
        int r = manager_apply(a->tuner->manager, a->device);
        if (r < 0)
                abort_trial(a, "cannot apply: %s", strerror(-r));
        else if (!a->device->busy)
                /* no job: the device matches no section any more (a loop
                 * device detached from its file, say) */
                abort_trial(a, "%s", "the device no longer matches its policy");
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
                if (e->knob != KNOB_SCHEDULER && e->knob != KNOB_NR_REQUESTS && e->knob != KNOB_WBT_LAT_USEC)
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
                char buf[96];
                log_notice("%s: the kernel refused %s; left out of this trial.", d->sysname,
                           autotune_candidate_format(&a->cand[a->current], buf, sizeof buf));
                if (a->current == 0) {
                        abort_trial(a, "%s", "the current setting cannot be put back");
                        return;
                }
                a->refused[a->current] = true;
                a->slot++;
                apply_slot(a);
                return;
        }
        uint64_t settle = a->policy.epoch_usec / 4;
        if (settle > SETTLE_MAX_USEC)
                settle = SETTLE_MAX_USEC;
        a->phase = PHASE_SETTLING;
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
        snprintf(ret->scheduler, sizeof ret->scheduler, "%s", act);
        if (p->n_nr_requests && !streq(act, "none")) {
                _cleanup_free_ char *pn = path_join(d->info->blockdir, "queue/nr_requests");
                long long v;
                if (pn && sysfs_read_int(pn, &v) >= 0 && v > 0)
                        ret->nr_requests = (unsigned) v;
        }
        if (p->n_wbt_lat_usec) {
                _cleanup_free_ char *pw = path_join(d->info->blockdir, "queue/wbt_lat_usec");
                long long v;
                if (pw && sysfs_read_int(pw, &v) >= 0)
                        ret->wbt_lat_usec = v;
        }
        *ret_line = TAKE_PTR(line);
        return 0;
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
        a->forced = forced;
        a->aborted = a->has_result = false;
        a->abort_reason[0] = 0;
        a->switches = 0;
        a->apply_usec = 0;
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

        if (!p || (!p->schedulers[0] && !p->n_nr_requests && !p->n_wbt_lat_usec)) {
                snprintf(why, why_size, "no bounds: the matched [Device] sections set none of AutoScheduler=, "
                                        "AutoNrRequests=, AutoWbtLatUsec=");
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
        r = autotune_candidates(p, &cur, line, d->info->zoned && !streq(d->info->zoned, "none"),
                                m->tune.kernel_version, 0, a->cand, &a->n_cand, a->note, sizeof a->note);
        if (r >= 0) {
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
        trial_begin(a, forced);
        r = add_call(a, call);
        if (r < 0)
                return r;
        log_info("%s: trial of %zu settings, %u rounds of %.1f s epochs (%s%s%s).", d->sysname, a->n_cand, p->rounds,
                 (double) p->epoch_usec / 1e6, forced ? "asked for" : "automatic", a->note[0] ? "; " : "", a->note);
        emit(a);
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
        a->n_tripped = 0;
        a->has_sig = false;
        a->watch_mono = 0;
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

/* Every WATCH_INTERVAL: periodic trials (AutoTrialIntervalSec=) and the
 * workload-change detector (AutoTrialOnWorkloadChange=): the signature of
 * the last interval against the one after the last trial; three changed
 * intervals in a row start a trial. */
static int on_watch(sd_event_source *s, uint64_t usec, void *userdata) {
        AutoTuner *t = userdata;
        Manager *m = t->manager;
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        char why[256];

        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                const AutoTunePolicy *p;
                if (d->removed || !(p = autotune_device_policy(t, d)) || !p->enabled ||
                    (!p->interval_usec && !p->on_workload_change))
                        continue;
                AutoDevice *a = get(t, d);
                if (!a || autotune_running(a) || a->phase == PHASE_FINISHING)
                        continue;
                BlockStat st;
                if (read_stat(d, &st) < 0)
                        continue;
                bool start = false;
                const char *reason = NULL;
                if (a->watch_mono) {
                        EpochFigures e;
                        AutoSignature sig;
                        autotune_epoch_figures(&a->watch_stat, &st, now - a->watch_mono, &e);
                        autotune_signature(&e, &sig);
                        if (!a->has_sig) {
                                a->sig = sig;
                                a->has_sig = true;
                        } else if (p->on_workload_change && autotune_workload_changed(&a->sig, &sig, p->min_iops)) {
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
        sd_event_source_set_time(s, now_usec(CLOCK_MONOTONIC) + WATCH_INTERVAL_USEC);
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
        r = sd_event_add_time_relative(m->event, &t->watch, CLOCK_MONOTONIC, WATCH_INTERVAL_USEC, 1000000, on_watch, t);
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
        free(t);
        return NULL;
}
