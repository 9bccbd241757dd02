/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the trial runner says of its trials: the trial as JSON (Trial,
 * GetDevice, Monitor), explain's sentence, the Prometheus families. The
 * trials themselves run in autotune-runner.c, which calls these; nothing
 * here calls it back (the device's policy and state come as arguments). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autotune-report.h"
#include "autotune-state.h"
#include "metrics-text.h"
#include "strbuf.h"
#include "util.h"

char *autotune_clock_hm(uint64_t realtime_usec, char buf[static 16]) {
        time_t s = (time_t) (realtime_usec / 1000000);
        struct tm tm;
        localtime_r(&s, &tm);
        strftime(buf, 16, "%H:%M:%S", &tm);
        return buf;
}

/* ---- JSON ---- */

static json_t *candidate_json(const AutotuneDevice *a, size_t c) {
        char buf[AUTOTUNE_CANDIDATE_STRMAX];
        const AutotuneSummary *s = &a->trial.summary[c];
        json_t *o = json_pack("{s:s, s:s, s:b, s:i}",
                              "setting", autotune_candidate_format(&a->trial.cand[c], buf, sizeof buf),
                              "scheduler", a->trial.cand[c].scheduler, "baseline", a->trial.cand[c].baseline, "epochs",
                              (int) a->trial.series[c].n);
        if (a->trial.cand[c].nr_requests)
                json_object_set_new(o, "nrRequests", json_integer(a->trial.cand[c].nr_requests));
        if (a->trial.cand[c].wbt_lat_usec != AUTOTUNE_WBT_UNSET)
                json_object_set_new(o, "wbtLatUsec", json_integer(a->trial.cand[c].wbt_lat_usec));
        if (a->trial.cand[c].set & AUTOTUNE_SET_READ_AHEAD)
                json_object_set_new(o, "readAheadKB", json_integer(a->trial.cand[c].read_ahead_kb));
        for (AutotuneTunable t = 0; t < _AUTOTUNE_TUN_MAX; t++)
                if (a->trial.cand[c].set & (1U << t)) {
                        json_t *io = json_object_get(o, "iosched");
                        if (!io) {
                                io = json_object();
                                json_object_set_new(o, "iosched", io);
                        }
                        json_object_set_new(io, autotune_tunable_info(t)->name, json_integer(a->trial.cand[c].tun[t]));
                }
        if (a->trial.refused[c])
                json_object_set_new(o, "refused", json_true());
        if (a->trial.drops[c].dropped && !a->trial.refused[c]) {
                json_object_set_new(o, "dropped", json_true());
                json_object_set_new(o, "dropReason", json_string(a->trial.drops[c].why));
        }
        if (s->n > 0) {
                json_object_set_new(o, "readAwaitMs", json_real(s->read_await_ms));
                json_object_set_new(o, "writeMBps", json_real(s->write_mbps));
                json_object_set_new(o, "readMBps", json_real(s->read_mbps));
                json_object_set_new(o, "iops", json_real(s->iops));
                json_object_set_new(o, "inFlight", json_real(s->in_flight));
                json_object_set_new(o, "objective", json_real(s->objective));
                if (s->read_p99_ms > 0)
                        json_object_set_new(o, "readP99Ms", json_real(s->read_p99_ms));
                if (a->trial.has_result) {
                        json_object_set_new(o, "admissible", json_boolean(s->admissible));
                        json_object_set_new(o, "pVsCurrent", json_real(s->p_vs_current));
                }
        }
        return o;
}

json_t *autotune_trial_json(const AutotuneDevice *a) {
        json_t *o = json_object(), *cands = json_array();
        const char *state = autotune_engine_running(&a->trial) ? "running" :
                            a->trial.aborted ? "aborted" : a->trial.has_result ? "decided" : "idle";
        char buf[AUTOTUNE_CANDIDATE_STRMAX];

        json_object_set_new(o, "state", json_string(state));
        for (size_t c = 0; c < a->trial.n_cand; c++)
                json_array_append_new(cands, candidate_json(a, c));
        json_object_set_new(o, "candidates", cands);
        if (a->trial.policy_copied)
                json_object_set_new(o, "objective",
                                    json_string(autotune_objective_to_string(a->trial.policy.objective)));
        if (autotune_engine_running(&a->trial)) {
                json_object_set_new(o, "epoch", json_integer((json_int_t) a->trial.slot + 1));
                json_object_set_new(o, "epochs", json_integer((json_int_t) a->trial.n_slots));
                json_object_set_new(o, "measuring",
                                    json_string(autotune_candidate_format(&a->trial.cand[a->trial.current], buf,
                                                                          sizeof buf)));
        }
        if (a->started_usec)
                json_object_set_new(o, "startedUsec", json_integer((json_int_t) a->started_usec));
        if (a->ended_usec)
                json_object_set_new(o, "endedUsec", json_integer((json_int_t) a->ended_usec));
        if (a->trial.has_result) {
                json_object_set_new(o, "verdict", json_string(autotune_verdict_to_string(a->trial.decision.verdict)));
                json_object_set_new(o, "reason", json_string(a->trial.decision.reason));
                json_object_set_new(o, "winner",
                                    json_string(autotune_candidate_format(&a->trial.cand[a->trial.decision.winner], buf,
                                                                          sizeof buf)));
                /* the winner's own fields (scheduler, nrRequests, wbtLatUsec) are those of candidates[winnerIndex] */
                json_object_set_new(o, "winnerIndex", json_integer(a->trial.decision.winner));
                json_object_set_new(o, "confidence", json_real(a->trial.decision.confidence));
                json_object_set_new(o, "improvement", json_real(a->trial.decision.improvement));
                json_object_set_new(o, "readLatency", json_string(a->trial.decision.by_p99 ? "p99" : "await"));
        }
        if (a->trial.aborted)
                json_object_set_new(o, "abortReason", json_string(a->trial.abort_reason));
        if (a->trial.note[0])
                json_object_set_new(o, "note", json_string(a->trial.note));
        json_object_set_new(o, "schedulerSwitches", json_integer(a->trial.switches));
        if (a->trial.policy_copied)
                json_object_set_new(o, "maxSchedulerSwitches", json_integer(a->trial.policy.max_switches));
        json_object_set_new(o, "applyUsec", json_integer((json_int_t) a->trial.apply_usec));
        json_object_set_new(o, "settleUsec", json_integer((json_int_t) a->trial.drain_usec));
        json_object_set_new(o, "stretchUsec", json_integer((json_int_t) a->trial.stretch_usec));
        json_object_set_new(o, "epochsStretched", json_integer(a->trial.n_stretched));
        json_object_set_new(o, "epochsShort", json_integer(a->trial.n_short));
        json_object_set_new(o, "rounds", json_integer(a->trial.round));
        if (a->trial.stop_reason[0])
                json_object_set_new(o, "stopReason", json_string(a->trial.stop_reason));
        if (a->trial.search) {
                /* a search by families: candidates are the last phase's */
                json_t *se = json_pack("{s:s, s:i, s:i, s:i, s:s, s:b}",
                                       "family", autotune_family_to_string(a->trial.family),
                                       "phases", (int) a->trial.n_phases + (autotune_engine_running(&a->trial) ? 1 : 0),
                                       "candidatesGenerated", (int) a->trial.n_generated,
                                       "candidatesMeasured", (int) a->trial.n_measured,
                                       "phasesText", a->trial.phases_text,
                                       "sequentialReads", a->trial.sequential);
                if (se)
                        json_object_set_new(o, "search", se);
        }
        if (a->trial.has_result) {
                json_t *price = json_object();
                if (a->p99_before > 0)
                        json_object_set_new(price, "readP99MsBefore", json_real(a->p99_before));
                if (a->p99_during > 0)
                        json_object_set_new(price, "readP99MsDuring", json_real(a->p99_during));
                if (a->p99_after > 0)
                        json_object_set_new(price, "readP99MsAfter", json_real(a->p99_after));
                double ref = fmax(a->p99_before, a->p99_after);
                if (a->p99_during > 0 && ref > 0)
                        json_object_set_new(price, "ratio", json_real(a->p99_during / ref));
                json_object_set_new(o, "price", price);
        }
        return o;
}

/* The trial's price in one phrase: "a read p99 of 116 ms during it, 1.2
 * times the worse of before (97 ms) and after (54 ms)." buf[0] = 0
 * without probes enough. */
static char *price_text(const AutotuneDevice *a, char *buf, size_t size) {
        double ref = fmax(a->p99_before, a->p99_after);
        buf[0] = 0;
        if (a->p99_during > 0 && ref > 0)
                snprintf(buf, size,
                         "a read p99 of %.2f ms during it, %.2f times the worse of before (%.2f ms) and "
                         "after (%.2f ms).",
                         a->p99_during, a->p99_during / ref, a->p99_before, a->p99_after);
        return buf;
}

static json_t *memory_json(AutotuneRunner *t, const Device *d) {
        const AutotuneMemoryDisk *m = autotune_memory_disk(t, d, false);
        json_t *arr = json_array();
        char buf[AUTOTUNE_CANDIDATE_STRMAX];

        for (size_t i = 0; m && i < m->n; i++) {
                const AutotuneMemory *e = &m->m[i];
                json_array_append_new(arr, json_pack("{s:f, s:f, s:f, s:f, s:s, s:I}", "readShare", e->sig.read_share,
                                                     "requestKiB", e->sig.avg_kb, "iops", e->sig.iops, "depth",
                                                     e->sig.depth, "setting",
                                                     autotune_candidate_format(&e->cand, buf, sizeof buf),
                                                     "chosenUsec", (json_int_t) e->realtime_usec));
        }
        return arr;
}

json_t *autotune_report_device(AutotuneRunner *t, const Device *d, const AutotunePolicy *p, const AutotuneDevice *a) {
        char buf[AUTOTUNE_CANDIDATE_STRMAX];

        if (!p && !a)
                return NULL;
        json_t *o = json_pack("{s:b}", "enabled", p && p->enabled);
        if (a) {
                json_object_set_new(o, "trial", autotune_trial_json(a));
                json_object_set_new(o, "trials", json_integer(a->n_trials));
                json_object_set_new(o, "changes", json_integer(a->n_changes));
                if (a->has_choice)
                        json_object_set_new(o, "chosen",
                                            json_string(autotune_candidate_format(&a->choice, buf, sizeof buf)));
                json_object_set_new(o, "recalls", json_integer(a->n_recalls));
                if (a->has_choice && a->recalled_usec && a->choice_trial == a->n_trials)
                        json_object_set_new(o, "recalledUsec", json_integer((json_int_t) a->recalled_usec));
        }
        if (p && p->remember)
                json_object_set_new(o, "workloads", memory_json(t, d));
        if (a && a->watch.has_promise) {
                static const char *const names[] = { "watching", "holds", "broken" };
                json_t *pr = json_pack("{s:s, s:b, s:s}", "state", names[a->watch.promise_state],
                                       "watching", a->watch.promising, "why", a->watch.promise_why);
                if (a->watch.promise.write_floor_mbps > 0)
                        json_object_set_new(pr, "writeFloorMBps", json_real(a->watch.promise.write_floor_mbps));
                if (a->watch.promise.read_ceiling_ms > 0)
                        json_object_set_new(pr, "readCeilingMs", json_real(a->watch.promise.read_ceiling_ms));
                if (a->watch.fell_back)
                        json_object_set_new(pr, "fallback",
                                            json_string(autotune_candidate_format(&a->watch.fallback, buf,
                                                                                  sizeof buf)));
                json_object_set_new(o, "promise", pr);
        }
        if (p && p->enabled && p->interval_usec) {
                uint64_t last = a && a->started_usec ? a->started_usec : now_usec(CLOCK_REALTIME);
                json_object_set_new(o, "nextTrialUsec", json_integer((json_int_t) (last + p->interval_usec)));
        }
        return o;
}

/* s (owned), and the workloads remembered for the disk after it. */
static char *explain_with_memory(AutotuneRunner *t, const Device *d, const AutotunePolicy *p, char *s) {
        const AutotuneMemoryDisk *m = p && p->remember ? autotune_memory_disk(t, d, false) : NULL;
        StrBuf sb = {};
        char buf[AUTOTUNE_CANDIDATE_STRMAX], hm[16];

        if (!s || !m || m->n == 0)
                return s;
        strbuf_appendf(&sb, "%s Workloads seen (%zu):", s, m->n);
        for (size_t i = 0; i < m->n; i++) {
                const AutotuneMemory *e = &m->m[i];
                strbuf_appendf(&sb, "%s reads %.0f %% of I/Os, %.0f KiB, %.0f I/Os per second, "
                               "%.1f in flight: %s (trial at %s)",
                               i ? ";" : "", e->sig.read_share * 100, e->sig.avg_kb, e->sig.iops, e->sig.depth,
                               autotune_candidate_format(&e->cand, buf, sizeof buf),
                               autotune_clock_hm(e->realtime_usec, hm));
        }
        strbuf_appendf(&sb, ".");
        free(s);
        s = strdup(strbuf_str(&sb));
        strbuf_done(&sb);
        return s;
}

char *autotune_report_explain(AutotuneRunner *t, const Device *d, const AutotunePolicy *p, const AutotuneDevice *a) {
        char *s = NULL, w[AUTOTUNE_CANDIDATE_STRMAX], b[AUTOTUNE_CANDIDATE_STRMAX], hm[16];
        int r;

        if (a && a->has_choice && a->recalled_usec && !a->trial.has_result)
                return explain_with_memory(t, d, p, strdup(a->choice_text));
        if (!a || !a->trial.has_result) {
                if (p && p->enabled)
                        return explain_with_memory(t, d, p,
                                                   strdup("AutoTune=yes: no trial has run yet; "
                                                          "the static keys are in force."));
                return NULL;
        }
        if (autotune_engine_running(&a->trial))
                return strdup("a trial is running.");
        autotune_candidate_format(&a->trial.cand[a->trial.decision.winner], w, sizeof w);
        autotune_candidate_format(&a->trial.cand[0], b, sizeof b);
        autotune_clock_hm(a->ended_usec, hm);
        if (a->has_choice && a->choice_trial == a->n_trials)
                r = asprintf(&s, "%s", a->choice_text);
        else if (a->has_choice)
                r = asprintf(&s, "%s The last trial, at %s, kept it: %s (%s).", a->choice_text, hm,
                             autotune_verdict_to_string(a->trial.decision.verdict), a->trial.decision.reason);
        else if (a->trial.decision.verdict == AUTOTUNE_VERDICT_CHANGE)
                r = asprintf(&s, "the trial at %s chose %s, since put back by a restore: the static keys are in force.",
                             hm, w);
        else
                r = asprintf(&s, "%s kept by the trial at %s: %s (%s).", b, hm,
                             autotune_verdict_to_string(a->trial.decision.verdict), a->trial.decision.reason);
        if (r < 0)
                return NULL;
        char price[256], *t2 = NULL;
        price_text(a, price, sizeof price);
        if (a->watch.has_promise && !a->watch.fell_back && a->has_choice) {
                r = asprintf(&t2, "%s After the change: %s%s.", s, a->watch.promise_why,
                             a->watch.promising ? " (watching)" : "");
                free(s);
                if (r < 0)
                        return NULL;
                s = t2;
                t2 = NULL;
        }
        if (a->trial.stop_reason[0] || price[0]) {
                r = asprintf(&t2, "%s%s%s%s%s%s", s, a->trial.stop_reason[0] ? " The last trial " : "",
                             a->trial.stop_reason, a->trial.stop_reason[0] ? "." : "",
                             price[0] ? " The last trial's price: " : "", price);
                free(s);
                if (r < 0)
                        return NULL;
                s = t2;
        }
        return explain_with_memory(t, d, p, s);
}

void autotune_report_metrics(AutotuneRunner *t, StrBuf *sb) {
        metrics_text_family(sb, "blkmqd_autotune_trials_total", METRIC_COUNTER, "Closed-loop tuning trials started.");
        for (AutotuneDevice *a = t->devices; a; a = a->next) {
                MetricLabel l[] = { { "device", a->device->sysname } };
                metrics_text_counter(sb, "blkmqd_autotune_trials_total", l, 1, a->n_trials);
        }
        metrics_text_family(sb, "blkmqd_autotune_changes_total", METRIC_COUNTER,
                            "Settings changed by the decision of a trial.");
        for (AutotuneDevice *a = t->devices; a; a = a->next) {
                MetricLabel l[] = { { "device", a->device->sysname } };
                metrics_text_counter(sb, "blkmqd_autotune_changes_total", l, 1, a->n_changes);
        }
        metrics_text_family(sb, "blkmqd_autotune_last_verdict_info", METRIC_GAUGE,
                            "The verdict of the device's last trial once it has finished "
                            "(value 1; none while one runs).");
        for (AutotuneDevice *a = t->devices; a; a = a->next) {
                MetricLabel l[] = { { "device", a->device->sysname },
                                    { "verdict", autotune_verdict_to_string(a->trial.decision.verdict) } };
                if (a->trial.has_result && l[1].value)
                        metrics_text_gauge(sb, "blkmqd_autotune_last_verdict_info", l, 2, 1);
        }
        metrics_text_family(sb, "blkmqd_autotune_recalls_total", METRIC_COUNTER,
                            "Settings put back at once for a workload a trial had seen (no trial).");
        for (AutotuneDevice *a = t->devices; a; a = a->next) {
                MetricLabel l[] = { { "device", a->device->sysname } };
                metrics_text_counter(sb, "blkmqd_autotune_recalls_total", l, 1, a->n_recalls);
        }
        metrics_text_family(sb, "blkmqd_autotune_scheduler_switches", METRIC_GAUGE,
                            "Scheduler switches of the last trial (each freezes the queue).");
        for (AutotuneDevice *a = t->devices; a; a = a->next) {
                MetricLabel l[] = { { "device", a->device->sysname } };
                if (a->n_trials)
                        metrics_text_gauge(sb, "blkmqd_autotune_scheduler_switches", l, 1, a->trial.switches);
        }
        metrics_text_family(sb, "blkmqd_autotune_trial_read_p99_seconds", METRIC_GAUGE,
                            "The price of the last trial: the probes' read p99 before it (the setting before, over "
                            "its epochs), during it, and after it (the setting in force after, over its epochs).");
        for (AutotuneDevice *a = t->devices; a; a = a->next) {
                const struct {
                        const char *when;
                        double v;
                } w[] = { { "before", a->p99_before }, { "during", a->p99_during }, { "after", a->p99_after } };
                for (size_t i = 0; i < ELEMENTSOF(w); i++) {
                        MetricLabel l[] = { { "device", a->device->sysname }, { "when", w[i].when } };
                        if (a->trial.has_result && w[i].v > 0)
                                metrics_text_gauge(sb, "blkmqd_autotune_trial_read_p99_seconds", l, 2, w[i].v / 1000);
                }
        }
        metrics_text_family(sb, "blkmqd_autotune_candidate_read_await_seconds", METRIC_GAUGE,
                            "Median read await of each candidate in the last trial.");
        for (AutotuneDevice *a = t->devices; a; a = a->next)
                for (size_t c = 0; c < a->trial.n_cand; c++) {
                        char buf[AUTOTUNE_CANDIDATE_STRMAX];
                        MetricLabel l[] = { { "device", a->device->sysname },
                                            { "setting",
                                              autotune_candidate_format(&a->trial.cand[c], buf, sizeof buf) } };
                        if (a->trial.summary[c].n)
                                metrics_text_gauge(sb, "blkmqd_autotune_candidate_read_await_seconds", l, 2,
                                                   a->trial.summary[c].read_await_ms / 1000);
                }
        metrics_text_family(sb, "blkmqd_autotune_candidate_read_p99_seconds", METRIC_GAUGE,
                            "Median over the epochs of each candidate's probe read p99 in the last trial.");
        for (AutotuneDevice *a = t->devices; a; a = a->next)
                for (size_t c = 0; c < a->trial.n_cand; c++) {
                        char buf[AUTOTUNE_CANDIDATE_STRMAX];
                        MetricLabel l[] = { { "device", a->device->sysname },
                                            { "setting",
                                              autotune_candidate_format(&a->trial.cand[c], buf, sizeof buf) } };
                        if (a->trial.summary[c].read_p99_ms > 0)
                                metrics_text_gauge(sb, "blkmqd_autotune_candidate_read_p99_seconds", l, 2,
                                                   a->trial.summary[c].read_p99_ms / 1000);
                }
}

/* ---- events and automatic trials ---- */
