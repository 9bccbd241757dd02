/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The decision: each candidate's medians, the objective's bound (against
 * the best writer of every candidate measured), the rank test of the best
 * admissible candidate against the current setting
 * (autotune_decide_raced()), and the fallback when a change broke its
 * promise. */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "autotune-internal.h"
#include "autotune.h"

static const char *const verdict_names[_AUTOTUNE_VERDICT_MAX] = {
        [AUTOTUNE_VERDICT_CHANGE] = "change",
        [AUTOTUNE_VERDICT_KEEP_BEST] = "keep-best",
        [AUTOTUNE_VERDICT_KEEP_NOISE] = "keep-noise",
        [AUTOTUNE_VERDICT_KEEP_HYSTERESIS] = "keep-hysteresis",
        [AUTOTUNE_VERDICT_KEEP_IDLE] = "keep-idle",
        [AUTOTUNE_VERDICT_KEEP_NO_DATA] = "keep-no-data",
        [AUTOTUNE_VERDICT_ABORTED] = "aborted",
};

const char *autotune_verdict_to_string(AutotuneVerdict v) {
        return (unsigned) v < _AUTOTUNE_VERDICT_MAX ? verdict_names[v] : NULL;
}

static void series_values(const AutotunePolicy *p, const AutotuneSeries *s, bool p99, double *obj, double *rd,
                          double *p99s, double *wmb, double *rmb, double *iops, double *inflight, size_t *ret_n) {
        size_t n = 0;
        for (size_t i = 0; i < s->n; i++) {
                const AutotuneEpochFigures *e = &s->epochs[i];
                if (!e->valid)
                        continue;
                obj[n] = autotune_objective_value(p, e, p99);
                rd[n] = e->read_await_ms;
                p99s[n] = e->read_p99_ms;
                wmb[n] = e->write_mbps;
                rmb[n] = e->read_mbps;
                iops[n] = e->read_iops + e->write_iops;
                inflight[n] = e->in_flight;
                n++;
        }
        *ret_n = n;
}

/* An epoch that wrote nothing beside ones that wrote: its logarithm as if
 * it wrote this little (a huge spread, not an infinite one). */
#define WRITE_LOG_FLOOR_MBPS 0.1

/* The lower one-sided confidence bound (at AutoConfidence=) of each
 * candidate's write MB/s: its median less the noise of its few epochs,
 * from Student's t on the logarithms of the per-epoch figures, the
 * variance pooled over every candidate measured (dropped or not) and at
 * least its own, as the race's tests take it. The read-latency bound
 * judges a challenger by it: a short, noisy measurement must not admit a
 * setting that writes less than it seemed to. */
static void write_lower_bounds(const AutotunePolicy *p, const AutotuneSeries *series, size_t n, AutotuneSummary *sum) {
        double lw[AUTOTUNE_MAX_CANDIDATES][AUTOTUNE_MAX_EPOCHS], var[AUTOTUNE_MAX_CANDIDATES], ss = 0, df = 0;
        size_t k[AUTOTUNE_MAX_CANDIDATES];

        for (size_t c = 0; c < n && c < AUTOTUNE_MAX_CANDIDATES; c++) {
                double m = 0, q = 0;
                k[c] = 0;
                for (size_t i = 0; i < series[c].n; i++)
                        if (series[c].epochs[i].valid)
                                lw[c][k[c]++] = log(fmax(series[c].epochs[i].write_mbps, WRITE_LOG_FLOOR_MBPS));
                for (size_t i = 0; i < k[c]; i++)
                        m += lw[c][i];
                m = k[c] ? m / (double) k[c] : 0;
                for (size_t i = 0; i < k[c]; i++)
                        q += (lw[c][i] - m) * (lw[c][i] - m);
                var[c] = k[c] > 1 ? q / (double) (k[c] - 1) : 0;
                ss += q;
                df += k[c] > 1 ? (double) (k[c] - 1) : 0;
        }
        /* a floor of 1 % relative noise per epoch, as the race's */
        double pooled = fmax(df > 0 ? ss / df : 0, 0.01 * 0.01);
        double t = df >= 1 ? autotune_t_quantile_upper(1.0 - p->confidence_pct / 100.0, df) : 0;
        for (size_t c = 0; c < n && c < AUTOTUNE_MAX_CANDIDATES; c++)
                sum[c].write_low_mbps = k[c] == 0 || df < 1
                                                ? sum[c].write_mbps
                                                : sum[c].write_mbps *
                                                  exp(-t * sqrt(fmax(pooled, var[c]) / (double) k[c]));
}

/* Each candidate's medians (a candidate without valid epochs: n 0 and its
 * figures 0); returns the best write throughput seen, among every
 * candidate measured: one that left the race early (for its read latency,
 * say) still showed in its epochs what it writes. */
static double summarize(const AutotunePolicy *p, const AutotuneSeries *series, size_t n, bool p99, AutotuneSummary *sum,
                        double obj[][AUTOTUNE_MAX_EPOCHS]) {
        double best_write = p->write_seen_mbps; /* the phases before, in a search */

        for (size_t c = 0; c < n; c++) {
                double rd[AUTOTUNE_MAX_EPOCHS], p99s[AUTOTUNE_MAX_EPOCHS], wmb[AUTOTUNE_MAX_EPOCHS],
                        rmb[AUTOTUNE_MAX_EPOCHS], iops[AUTOTUNE_MAX_EPOCHS], inf[AUTOTUNE_MAX_EPOCHS];
                size_t k;
                series_values(p, &series[c], p99, obj[c], rd, p99s, wmb, rmb, iops, inf, &k);
                if (k == 0) {
                        sum[c] = (AutotuneSummary) { .p_vs_current = 1 };
                        continue;
                }
                sum[c] = (AutotuneSummary) {
                        .objective = autotune_median(obj[c], k),
                        .read_await_ms = autotune_median(rd, k),
                        .read_p99_ms = p99 ? autotune_median(p99s, k) : 0,
                        .write_mbps = autotune_median(wmb, k),
                        .read_mbps = autotune_median(rmb, k),
                        .iops = autotune_median(iops, k),
                        .in_flight = autotune_median(inf, k),
                        .p_vs_current = 1,
                        .n = k,
                };
                if (sum[c].write_mbps > best_write)
                        best_write = sum[c].write_mbps;
        }
        write_lower_bounds(p, series, n, sum);
        return best_write;
}

void autotune_summarise(const AutotunePolicy *p, const AutotuneSeries *series, size_t n, AutotuneSummary *summaries) {
        double obj[AUTOTUNE_MAX_CANDIDATES][AUTOTUNE_MAX_EPOCHS];

        if (n > AUTOTUNE_MAX_CANDIDATES)
                n = AUTOTUNE_MAX_CANDIDATES;
        (void) summarize(p, series, n, autotune_have_p99(series, n), summaries, obj);
}

/* Marks the candidates inside the objective's bound, tests each challenger
 * against the current setting, and returns the best admissible one (-1:
 * none). For read latency a challenger is inside the write bound when the
 * lower confidence bound of its writes (not their median) is at least
 * (1 - tolerance) times the best writer's median, the best among every
 * candidate measured; the current setting by its median (keeping it
 * promises nothing new). */
static int pick_best(const AutotunePolicy *p, size_t n, bool p99, AutotuneSummary *sum,
                     double obj[][AUTOTUNE_MAX_EPOCHS], double best_write) {
        bool lower = autotune_objective_lower_better(p);
        int best = -1;

        for (size_t c = 0; c < n; c++) {
                if (p->objective == AUTOTUNE_OBJECTIVE_READ_LATENCY)
                        sum[c].admissible = best_write < AUTOTUNE_MIN_WRITE_MBPS ||
                                            (c == 0 ? sum[c].write_mbps : sum[c].write_low_mbps) >=
                                                    best_write * (1.0 - p->write_tolerance_pct / 100.0);
                else if (p->objective == AUTOTUNE_OBJECTIVE_SEQ_READ)
                        sum[c].admissible = true; /* the reader waits on its throughput, not one request */
                else
                        sum[c].admissible = (p99 ? sum[c].read_p99_ms : sum[c].read_await_ms) * 1000.0 <=
                                            (double) p->read_target_usec;
                if (c > 0)
                        sum[c].p_vs_current = lower ? autotune_mann_whitney_less(obj[c], sum[c].n, obj[0], sum[0].n)
                                                    : autotune_mann_whitney_less(obj[0], sum[0].n, obj[c], sum[c].n);
        }
        for (size_t c = 0; c < n; c++) {
                if (!sum[c].admissible || sum[c].dropped)
                        continue;
                if (best < 0 ||
                    (lower ? sum[c].objective < sum[best].objective : sum[c].objective > sum[best].objective))
                        best = (int) c;
        }
        return best;
}

/* The p-value of "best writes faster than the current setting", over the
 * epochs of each. */
static double write_gain_p(const AutotuneSeries *current, const AutotuneSeries *best) {
        double wb[AUTOTUNE_MAX_EPOCHS], w0[AUTOTUNE_MAX_EPOCHS];
        size_t kb = 0, k0 = 0;

        for (size_t i = 0; i < best->n; i++)
                if (best->epochs[i].valid)
                        wb[kb++] = best->epochs[i].write_mbps;
        for (size_t i = 0; i < current->n; i++)
                if (current->epochs[i].valid)
                        w0[k0++] = current->epochs[i].write_mbps;
        return autotune_mann_whitney_less(w0, k0, wb, kb);
}

/* Before any comparison: enough epochs, and a disk that is not idle. */
static bool decide_no_trial(const AutotunePolicy *p, size_t n, const AutotuneSummary *sum, AutotuneDecision *ret) {
        /* The test needs 3 epochs per side to say anything at 95 %. */
        for (size_t c = 0; c < n; c++)
                if (sum[c].n < 3 && !sum[c].dropped) {
                        ret->verdict = AUTOTUNE_VERDICT_KEEP_NO_DATA;
                        snprintf(ret->reason, sizeof ret->reason, "too few epochs measured (%zu of candidate %zu)",
                                 sum[c].n, c);
                        return true;
                }
        if (sum[0].iops < p->min_iops) {
                ret->verdict = AUTOTUNE_VERDICT_KEEP_IDLE;
                snprintf(ret->reason, sizeof ret->reason, "idle: %.1f I/Os per second, below %.0f", sum[0].iops,
                         p->min_iops);
                return true;
        }
        return false;
}

void autotune_decide(const AutotunePolicy *p, const AutotuneSeries *series, size_t n, AutotuneSummary *sum,
                     AutotuneDecision *ret) {
        autotune_decide_raced(p, series, n, NULL, sum, ret);
}

void autotune_decide_raced(const AutotunePolicy *p, const AutotuneSeries *series, size_t n, const AutotuneDrop *drops,
                           AutotuneSummary *sum, AutotuneDecision *ret) {
        double obj[AUTOTUNE_MAX_CANDIDATES][AUTOTUNE_MAX_EPOCHS];
        bool lower = autotune_objective_lower_better(p);
        /* Bonferroni: the best of n-1 challengers is tested, so each test
         * runs at alpha / (n-1) to keep the trial's false change rate. */
        double alpha = (1.0 - p->confidence_pct / 100.0) / (double) (n > 1 ? n - 1 : 1) / autotune_looks(p) / 2;

        bool p99 = autotune_have_p99(series, n);
        *ret = (AutotuneDecision) { .winner = 0, .best = -1, .p = 1, .by_p99 = p99 };
        double best_write = summarize(p, series, n, p99, sum, obj);
        size_t left = 0;
        for (size_t c = 0; c < n; c++) {
                sum[c].dropped = drops && c > 0 && drops[c].dropped;
                left += c > 0 && !sum[c].dropped;
        }
        if (n > 1 && left == 0) {
                /* Every challenger left the race: each was beaten with
                 * confidence or was far worse than one still in it. */
                ret->verdict = sum[0].n > 0 && sum[0].iops < p->min_iops ? AUTOTUNE_VERDICT_KEEP_IDLE
                                                                          : AUTOTUNE_VERDICT_KEEP_BEST;
                ret->best = 0;
                if (ret->verdict == AUTOTUNE_VERDICT_KEEP_IDLE)
                        snprintf(ret->reason, sizeof ret->reason, "idle: %.1f I/Os per second, below %.0f",
                                 sum[0].iops, p->min_iops);
                else
                        snprintf(ret->reason, sizeof ret->reason,
                                 "the current setting is the best: every other candidate left the race");
                return;
        }
        if (decide_no_trial(p, n, sum, ret))
                return;

        int best = ret->best = pick_best(p, n, p99, sum, obj, best_write);
        if (best < 0) {
                /* Nothing meets the bound: the throughput form with a target
                 * nobody reaches. Keep what is there. */
                ret->verdict = AUTOTUNE_VERDICT_KEEP_BEST;
                snprintf(ret->reason, sizeof ret->reason, "no candidate meets the objective's bound");
                return;
        }
        if (best == 0) {
                ret->verdict = AUTOTUNE_VERDICT_KEEP_BEST;
                ret->p = 1;
                snprintf(ret->reason, sizeof ret->reason, "the current setting is the best");
                return;
        }
        double cur_v = sum[0].objective, best_v = sum[best].objective;
        ret->p = sum[best].p_vs_current;
        ret->confidence = 1 - ret->p;
        ret->improvement = lower ? (cur_v > 0 ? (cur_v - best_v) / cur_v : 0)
                                 : (cur_v > 0 ? (best_v - cur_v) / cur_v : (best_v > 0 ? 1 : 0));
        /* A current setting outside the bound (it costs too much write
         * throughput) is left for the best admissible one when the
         * throughput difference is significant, whatever the latency. */
        if (!sum[0].admissible && p->objective == AUTOTUNE_OBJECTIVE_READ_LATENCY) {
                double pw = write_gain_p(&series[0], &series[best]);
                if (pw <= alpha) {
                        ret->verdict = AUTOTUNE_VERDICT_CHANGE;
                        ret->winner = best;
                        ret->p = pw;
                        ret->confidence = 1 - pw;
                        snprintf(ret->reason, sizeof ret->reason,
                                 "the current setting costs write throughput beyond the tolerance (p=%.3f)", pw);
                        return;
                }
        }
        if (drops && autotune_race_settled(drops, n) && drops[0].by == best &&
            ret->improvement >= p->min_improvement_pct / 100.0) {
                /* The race settled on it (autotune_race()): its test, at
                 * its own share of the rate, is the decision's. */
                ret->verdict = AUTOTUNE_VERDICT_CHANGE;
                ret->winner = best;
                ret->p = drops[0].p;
                ret->confidence = 1 - ret->p;
                snprintf(ret->reason, sizeof ret->reason,
                         "better by %.0f %% with confidence %.2f %% (the race settled after %u epochs)",
                         ret->improvement * 100, ret->confidence * 100, drops[0].epochs);
                return;
        }
        if (ret->p > alpha) {
                ret->verdict = AUTOTUNE_VERDICT_KEEP_NOISE;
                snprintf(ret->reason, sizeof ret->reason,
                         "no clear winner: the best differs by %.0f %% but p=%.3f > %.2g", ret->improvement * 100,
                         ret->p, alpha);
                return;
        }
        if (ret->improvement < p->min_improvement_pct / 100.0) {
                ret->verdict = AUTOTUNE_VERDICT_KEEP_HYSTERESIS;
                snprintf(ret->reason, sizeof ret->reason, "better by %.1f %% only, below the minimum of %u %%",
                         ret->improvement * 100, p->min_improvement_pct);
                return;
        }
        ret->verdict = AUTOTUNE_VERDICT_CHANGE;
        ret->winner = best;
        snprintf(ret->reason, sizeof ret->reason, "better by %.0f %% with confidence %.1f %%", ret->improvement * 100,
                 ret->confidence * 100);
}

int autotune_fallback(const AutotunePolicy *p, const AutotuneSummary *sum, size_t n, int chosen) {
        int fb = -1;

        for (size_t c = 0; c < n; c++) {
                if ((int) c == chosen || !sum[c].admissible || sum[c].dropped || sum[c].n == 0)
                        continue;
                if (fb < 0)
                        fb = (int) c;
                else if (p->objective == AUTOTUNE_OBJECTIVE_READ_LATENCY  ? sum[c].write_mbps > sum[fb].write_mbps
                         : p->objective == AUTOTUNE_OBJECTIVE_SEQ_READ ? sum[c].read_mbps > sum[fb].read_mbps
                                                                   : sum[c].read_await_ms < sum[fb].read_await_ms)
                        fb = (int) c;
        }
        return fb;
}
