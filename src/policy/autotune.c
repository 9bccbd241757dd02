/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune-internal.h"
#include "autotune.h"
#include "knobs.h"
#include "util.h"

static const char *const verdict_names[_AUTO_VERDICT_MAX] = {
        [AUTO_VERDICT_CHANGE] = "change",
        [AUTO_VERDICT_KEEP_BEST] = "keep-best",
        [AUTO_VERDICT_KEEP_NOISE] = "keep-noise",
        [AUTO_VERDICT_KEEP_HYSTERESIS] = "keep-hysteresis",
        [AUTO_VERDICT_KEEP_IDLE] = "keep-idle",
        [AUTO_VERDICT_KEEP_NO_DATA] = "keep-no-data",
        [AUTO_VERDICT_ABORTED] = "aborted",
};

const char *auto_verdict_to_string(AutoVerdict v) {
        return (unsigned) v < _AUTO_VERDICT_MAX ? verdict_names[v] : NULL;
}

size_t autotune_slot_candidate(size_t slot, size_t n_cand) {
        size_t round = slot / n_cand, pos = slot % n_cand;
        return (pos + round) % n_cand;
}

static void series_values(const AutoTunePolicy *p, const AutoSeries *s, bool p99, double *obj, double *rd,
                          double *p99s, double *wmb, double *rmb, double *iops, double *inflight, size_t *ret_n) {
        size_t n = 0;
        for (size_t i = 0; i < s->n; i++) {
                const EpochFigures *e = &s->epochs[i];
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
static void write_lower_bounds(const AutoTunePolicy *p, const AutoSeries *series, size_t n, AutoSummary *sum) {
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
                                                : sum[c].write_mbps * exp(-t * sqrt(fmax(pooled, var[c]) / (double) k[c]));
}

/* Each candidate's medians; returns the best write throughput seen, among
 * every candidate measured: one that left the race early (for its read
 * latency, say) still showed in its epochs what it writes. */
static double summarize(const AutoTunePolicy *p, const AutoSeries *series, size_t n, bool p99, AutoSummary *sum,
                        double obj[][AUTOTUNE_MAX_EPOCHS]) {
        double best_write = 0;

        for (size_t c = 0; c < n; c++) {
                double rd[AUTOTUNE_MAX_EPOCHS], p99s[AUTOTUNE_MAX_EPOCHS], wmb[AUTOTUNE_MAX_EPOCHS],
                        rmb[AUTOTUNE_MAX_EPOCHS], iops[AUTOTUNE_MAX_EPOCHS], inf[AUTOTUNE_MAX_EPOCHS];
                size_t k;
                series_values(p, &series[c], p99, obj[c], rd, p99s, wmb, rmb, iops, inf, &k);
                sum[c] = (AutoSummary) {
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
                if (k > 0 && sum[c].write_mbps > best_write)
                        best_write = sum[c].write_mbps;
        }
        write_lower_bounds(p, series, n, sum);
        return best_write;
}

/* Marks the candidates inside the objective's bound, tests each challenger
 * against the current setting, and returns the best admissible one (-1:
 * none). For read latency a challenger is inside the write bound when the
 * lower confidence bound of its writes (not their median) is at least
 * (1 - tolerance) times the best writer's median, the best among every
 * candidate measured; the current setting by its median (keeping it
 * promises nothing new). */
static int pick_best(const AutoTunePolicy *p, size_t n, bool p99, AutoSummary *sum,
                     double obj[][AUTOTUNE_MAX_EPOCHS], double best_write) {
        bool lower = autotune_objective_lower_better(p);
        int best = -1;

        for (size_t c = 0; c < n; c++) {
                if (p->objective == AUTO_OBJECTIVE_READ_LATENCY)
                        sum[c].admissible = best_write < AUTOTUNE_MIN_WRITE_MBPS ||
                                            (c == 0 ? sum[c].write_mbps : sum[c].write_low_mbps) >=
                                                    best_write * (1.0 - p->write_tolerance_pct / 100.0);
                else if (p->objective == AUTO_OBJECTIVE_SEQ_READ)
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
                if (best < 0 || (lower ? sum[c].objective < sum[best].objective : sum[c].objective > sum[best].objective))
                        best = (int) c;
        }
        return best;
}

/* The p-value of "best writes faster than the current setting", over the
 * epochs of each. */
static double write_gain_p(const AutoSeries *current, const AutoSeries *best) {
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
static bool decide_no_trial(const AutoTunePolicy *p, size_t n, const AutoSummary *sum, AutoDecision *ret) {
        /* The test needs 3 epochs per side to say anything at 95 %. */
        for (size_t c = 0; c < n; c++)
                if (sum[c].n < 3 && !sum[c].dropped) {
                        ret->verdict = AUTO_VERDICT_KEEP_NO_DATA;
                        snprintf(ret->reason, sizeof ret->reason, "too few epochs measured (%zu of candidate %zu)",
                                 sum[c].n, c);
                        return true;
                }
        if (sum[0].iops < p->min_iops) {
                ret->verdict = AUTO_VERDICT_KEEP_IDLE;
                snprintf(ret->reason, sizeof ret->reason, "idle: %.1f I/Os per second, below %.0f", sum[0].iops,
                         p->min_iops);
                return true;
        }
        return false;
}

void autotune_decide(const AutoTunePolicy *p, const AutoSeries *series, size_t n, AutoSummary *sum,
                     AutoDecision *ret) {
        autotune_decide_raced(p, series, n, NULL, sum, ret);
}

/* The decisions the trial's error rate is shared by (AutoTunePolicy.looks). */
static double looks(const AutoTunePolicy *p) {
        return p->looks > 1 ? (double) p->looks : 1.0;
}

/* The race's rate per test: every look (a round) and every opponent. */
static double race_alpha(const AutoTunePolicy *p, size_t n) {
        return (1.0 - p->confidence_pct / 100.0) / ((double) (p->rounds ? p->rounds : 1) * (double) (n > 1 ? n - 1 : 1)) /
               looks(p);
}

void autotune_decide_raced(const AutoTunePolicy *p, const AutoSeries *series, size_t n, const AutoDrop *drops,
                           AutoSummary *sum, AutoDecision *ret) {
        double obj[AUTOTUNE_MAX_CANDIDATES][AUTOTUNE_MAX_EPOCHS];
        bool lower = autotune_objective_lower_better(p);
        /* Bonferroni: the best of n-1 challengers is tested, so each test
         * runs at alpha / (n-1) to keep the trial's false change rate. */
        double alpha = (1.0 - p->confidence_pct / 100.0) / (double) (n > 1 ? n - 1 : 1) / looks(p) / 2;

        bool p99 = autotune_have_p99(series, n);
        *ret = (AutoDecision) { .winner = 0, .best = -1, .p = 1, .by_p99 = p99 };
        double best_write = summarize(p, series, n, p99, sum, obj);
        size_t left = 0;
        for (size_t c = 0; c < n; c++) {
                sum[c].dropped = drops && c > 0 && drops[c].dropped;
                left += c > 0 && !sum[c].dropped;
        }
        if (n > 1 && left == 0) {
                /* Every challenger left the race: each was beaten with
                 * confidence or was far worse than one still in it. */
                ret->verdict = sum[0].n > 0 && sum[0].iops < p->min_iops ? AUTO_VERDICT_KEEP_IDLE
                                                                          : AUTO_VERDICT_KEEP_BEST;
                ret->best = 0;
                if (ret->verdict == AUTO_VERDICT_KEEP_IDLE)
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
                ret->verdict = AUTO_VERDICT_KEEP_BEST;
                snprintf(ret->reason, sizeof ret->reason, "no candidate meets the objective's bound");
                return;
        }
        if (best == 0) {
                ret->verdict = AUTO_VERDICT_KEEP_BEST;
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
        if (!sum[0].admissible && p->objective == AUTO_OBJECTIVE_READ_LATENCY) {
                double pw = write_gain_p(&series[0], &series[best]);
                if (pw <= alpha) {
                        ret->verdict = AUTO_VERDICT_CHANGE;
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
                ret->verdict = AUTO_VERDICT_CHANGE;
                ret->winner = best;
                ret->p = drops[0].p;
                ret->confidence = 1 - ret->p;
                snprintf(ret->reason, sizeof ret->reason,
                         "better by %.0f %% with confidence %.2f %% (the race settled after %u epochs)",
                         ret->improvement * 100, ret->confidence * 100, drops[0].epochs);
                return;
        }
        if (ret->p > alpha) {
                ret->verdict = AUTO_VERDICT_KEEP_NOISE;
                snprintf(ret->reason, sizeof ret->reason,
                         "no clear winner: the best differs by %.0f %% but p=%.3f > %.2g", ret->improvement * 100,
                         ret->p, alpha);
                return;
        }
        if (ret->improvement < p->min_improvement_pct / 100.0) {
                ret->verdict = AUTO_VERDICT_KEEP_HYSTERESIS;
                snprintf(ret->reason, sizeof ret->reason, "better by %.1f %% only, below the minimum of %u %%",
                         ret->improvement * 100, p->min_improvement_pct);
                return;
        }
        ret->verdict = AUTO_VERDICT_CHANGE;
        ret->winner = best;
        snprintf(ret->reason, sizeof ret->reason, "better by %.0f %% with confidence %.1f %%", ret->improvement * 100,
                 ret->confidence * 100);
}

bool autotune_guard(const AutoTunePolicy *p, const AutoSeries *baseline, const EpochFigures *e, char *why,
                    size_t why_size) {
        double rd[AUTOTUNE_MAX_EPOCHS];
        size_t k = 0;

        if (e->errors) {
                snprintf(why, why_size, "%u I/O errors", e->errors);
                return true;
        }
        if (!e->valid)
                return false;
        for (size_t i = 0; i < baseline->n; i++)
                if (baseline->epochs[i].valid && baseline->epochs[i].read_iops > 0)
                        rd[k++] = baseline->epochs[i].read_await_ms;
        if (k == 0 || e->read_iops == 0)
                return false;
        /* Against the slowest epoch of the current setting so far: one
         * lucky epoch of it (the trial's first is often alone) must not
         * end a trial whose candidate is merely no better. */
        double worst = rd[0];
        for (size_t i = 1; i < k; i++)
                worst = fmax(worst, rd[i]);
        double base = fmax(worst, AUTOTUNE_GUARD_FLOOR_MS);
        if (e->read_await_ms > base * p->guard_factor) {
                snprintf(why, why_size, "read await %.2f ms, more than %u times the current setting's %.2f ms (its slowest epoch)",
                         e->read_await_ms, p->guard_factor, base);
                return true;
        }
        return false;
}

/* ---- racing ---- */

/* The valid epochs' objective, write MB/s and read latency of one series. */
static size_t race_values(const AutoTunePolicy *p, const AutoSeries *s, bool p99, double *obj, double *wmb,
                          double *rlat) {
        size_t k = 0;
        for (size_t i = 0; i < s->n; i++) {
                const EpochFigures *e = &s->epochs[i];
                if (!e->valid)
                        continue;
                obj[k] = autotune_objective_value(p, e, p99);
                wmb[k] = e->write_mbps;
                rlat[k] = autotune_read_latency(e, p99);
                k++;
        }
        return k;
}

/* The sample variance of the logs of v[0..k), and their mean. */
static double log_var(const double *v, size_t k, double *ret_mean) {
        double m = 0, q = 0;
        for (size_t i = 0; i < k; i++)
                m += log(v[i]);
        m /= (double) k;
        for (size_t i = 0; i < k; i++)
                q += (log(v[i]) - m) * (log(v[i]) - m);
        *ret_mean = m;
        return k > 1 ? q / (double) (k - 1) : 0;
}

/* The race's one-sided test: Student's t on a difference of mean logs,
 * diff > 0 the side it asks about, the variance pooled (and at least each
 * side's own), df degrees of freedom. Returns p. */
static double log_t_p(double diff, double pooled, double var_a, double var_b, size_t k_a, size_t k_b, double df) {
        double v = fmax(pooled, fmax(var_a, var_b));
        return autotune_t_upper(diff / sqrt(v * (1.0 / (double) k_a + 1.0 / (double) k_b)), df);
}

/* Whether write MB/s w is outside the write bound with half the tolerance
 * to spare (where equal writes differ by their noise); only the
 * read-latency objective has that bound. */
static bool outside_half_bound(const AutoTunePolicy *p, double w, double best_write) {
        return p->objective == AUTO_OBJECTIVE_READ_LATENCY && best_write >= AUTOTUNE_MIN_WRITE_MBPS &&
               w < best_write * (1.0 - p->write_tolerance_pct / 200.0);
}

/* Why the correction is honest. A candidate c that is in truth the best
 * (no other is better in the objective while inside the bound) leaves the
 * race only through a false positive of one of the tests "b beats c": at
 * most n - 1 opponents, at most `rounds` looks (one after each round: a
 * candidate is in at most `rounds` rounds), and as many tests "c writes
 * outside the bound" and one "c is no better than 0 by the minimum" a
 * look. Each test runs at alpha / (3 * rounds * (n - 1)), so by the
 * union bound (Bonferroni, which
 * holds whatever the dependence between the looks) the best is dropped
 * with probability at most alpha = 1 - AutoConfidence=, however often the
 * race looks. Dropping only ever removes challengers: the final decision
 * (autotune_decide_raced()) still tests its best against the current
 * setting once, at the end, with its own Bonferroni over all n - 1
 * challengers, the dropped ones included, at half the rate; the other
 * half is settling's (below), the one way the race itself may change the
 * setting.
 *
 * The test is Student's t on the logarithms of the per-epoch figures
 * (latency and throughput are roughly log-normal per epoch), with the
 * noise variance pooled over every candidate in the race (the disk's
 * relative noise is much the same under each setting): after two rounds
 * of 8 candidates it has 8 degrees of freedom, where a pair alone has 2
 * and a rank test of 2 epochs against 2 can never go below p = 1/6. The
 * variance used for a pair is at least each side's own, so one noisy
 * candidate is not judged by the others' quiet. It is an assumption
 * (log-normal, shared noise), where the final decision's rank test makes
 * none; a false drop costs a missed improvement, never a false change. */
size_t autotune_race(const AutoTunePolicy *p, const AutoSeries *series, size_t n, AutoDrop *drops) {
        double obj[AUTOTUNE_MAX_CANDIDATES][AUTOTUNE_MAX_EPOCHS], wmb[AUTOTUNE_MAX_CANDIDATES][AUTOTUNE_MAX_EPOCHS],
                rlat[AUTOTUNE_MAX_CANDIDATES][AUTOTUNE_MAX_EPOCHS], mean[AUTOTUNE_MAX_CANDIDATES],
                var[AUTOTUNE_MAX_CANDIDATES];
        size_t k[AUTOTUNE_MAX_CANDIDATES], dropped = 0;
        bool lower = autotune_objective_lower_better(p);
        bool p99 = autotune_have_p99(series, n);
        bool was[AUTOTUNE_MAX_CANDIDATES], usable[AUTOTUNE_MAX_CANDIDATES], usable_w[AUTOTUNE_MAX_CANDIDATES] = {};
        double ss = 0, df = 0;
        /* a floor of 1 % relative noise per epoch: two identical figures
         * are a coincidence of rounding, not a disk without noise */
        const double floor_var = 0.01 * 0.01;

        if (n < 2 || n > AUTOTUNE_MAX_CANDIDATES)
                return 0;
        /* Three kinds of test may drop the best candidate (beaten,
         * outside the write bound, or no better than the current setting
         * by the minimum), each at a third of the rate; settling (a false
         * change, another budget) runs at half of it. */
        double alpha = race_alpha(p, n) / 3, alpha_settle = race_alpha(p, n) / 2;
        double wss = 0, wlog[AUTOTUNE_MAX_CANDIDATES], wvar[AUTOTUNE_MAX_CANDIDATES];
        drops[0].by = -1;
        drops[0].p = 1;
        for (size_t c = 0; c < n; c++) {
                was[c] = drops[c].dropped; /* a candidate dropped at this look still counts as an opponent */
                k[c] = race_values(p, &series[c], p99, obj[c], wmb[c], rlat[c]);
                usable[c] = !was[c] && k[c] >= 2;
                for (size_t i = 0; i < k[c]; i++)
                        usable[c] = usable[c] && obj[c][i] > 0;
                if (!usable[c])
                        continue;
                var[c] = log_var(obj[c], k[c], &mean[c]);
                ss += var[c] * (double) (k[c] - 1);
                df += (double) (k[c] - 1);
                usable_w[c] = true;
                for (size_t i = 0; i < k[c]; i++)
                        usable_w[c] = usable_w[c] && wmb[c][i] > 0;
                if (usable_w[c]) {
                        wvar[c] = log_var(wmb[c], k[c], &wlog[c]);
                        wss += wvar[c] * (double) (k[c] - 1);
                }
        }
        if (df < 2)
                return 0;
        double pooled = fmax(ss / df, floor_var), wpooled = fmax(wss / df, floor_var);
        /* the best writer among every candidate measured, those that left
         * the race included: they showed in their epochs what they write */
        double best_write = 0;
        for (size_t c = 0; c < n; c++)
                if (k[c] > 0)
                        best_write = fmax(best_write, autotune_median(wmb[c], k[c]));

        for (size_t c = 1; c < n; c++) {
                if (!usable[c])
                        continue;
                double wc = autotune_median(wmb[c], k[c]), rc = autotune_median(rlat[c], k[c]);
                for (size_t b = 0; b < n; b++) {
                        if (b == c || !usable[b])
                                continue;
                        /* b must not be worse on the bound's figure (then c
                         * inside the bound means b inside it too), or be
                         * inside the write bound with half the tolerance to
                         * spare (where equal writes differ by their noise) */
                        if (p->objective == AUTO_OBJECTIVE_READ_LATENCY) {
                                double wb = autotune_median(wmb[b], k[b]);
                                if (wb < wc && outside_half_bound(p, wb, best_write))
                                        continue;
                        } else if (p->objective == AUTO_OBJECTIVE_THROUGHPUT) {
                                double rb = autotune_median(rlat[b], k[b]);
                                if (rb > rc && rb * 1000.0 > (double) p->read_target_usec)
                                        continue;
                        }
                        double pv = log_t_p(lower ? mean[c] - mean[b] : mean[b] - mean[c], pooled, var[b], var[c],
                                            k[b], k[c], df);
                        if (pv > alpha)
                                continue;
                        drops[c] = (AutoDrop) { .dropped = true, .by = (int) b, .epochs = (unsigned) k[c], .p = pv };
                        snprintf(drops[c].why, sizeof drops[c].why,
                                 "beaten by candidate %zu (%.3g against %.3g, p=%.2g <= %.2g) after %zu epochs", b,
                                 autotune_median(obj[b], k[b]), autotune_median(obj[c], k[c]), pv, alpha, k[c]);
                        dropped++;
                        break;
                }
                if (drops[c].dropped || p->objective != AUTO_OBJECTIVE_READ_LATENCY || !usable_w[c] ||
                    best_write < AUTOTUNE_MIN_WRITE_MBPS)
                        continue;
                /* Outside the write bound with confidence: it can never be
                 * chosen (autotune_decide_raced() takes the admissible
                 * ones only), whatever its read latency. Tested against
                 * each candidate b in the race: c writes less than
                 * (1 - tolerance) times b's. */
                for (size_t b = 0; b < n; b++) {
                        if (b == c || !usable[b] || !usable_w[b])
                                continue;
                        double pv = log_t_p(wlog[b] + log(1.0 - p->write_tolerance_pct / 100.0) - wlog[c], wpooled,
                                            wvar[b], wvar[c], k[b], k[c], df);
                        if (pv > alpha)
                                continue;
                        drops[c] = (AutoDrop) { .dropped = true, .by = (int) b, .epochs = (unsigned) k[c], .p = pv };
                        snprintf(drops[c].why, sizeof drops[c].why,
                                 "outside the write bound: %.1f MB/s against candidate %zu's %.1f less %u %% (p=%.2g "
                                 "<= %.2g) after %zu epochs",
                                 autotune_median(wmb[c], k[c]), b, autotune_median(wmb[b], k[b]),
                                 p->write_tolerance_pct, pv, alpha, k[c]);
                        dropped++;
                        break;
                }
        }

        /* Equivalent: with confidence, c is not better than the current
         * setting by AutoMinImprovement= (the least a change needs): it
         * could never change the setting, so measuring it more learns
         * nothing the decision uses. Only while the current setting is
         * inside the write bound with half the tolerance to spare (a
         * setting outside it is left for write throughput alone). When
         * every challenger has left, the trial ends keeping the current
         * setting: a workload on which all settings tie costs a few
         * rounds, not AutoRounds=. */
        bool base_in = usable[0] && !outside_half_bound(p, autotune_median(wmb[0], k[0]), best_write);
        double margin = -log(1.0 - fmin(p->min_improvement_pct, 90) / 100.0); /* in logs */
        for (size_t c = 1; c < n && base_in && p->min_improvement_pct > 0; c++) {
                if (!usable[c] || drops[c].dropped)
                        continue;
                /* H0: c improves on 0 by margin or more; rejected when
                 * its improvement is confidently under it */
                double gain = lower ? mean[0] - mean[c] : mean[c] - mean[0];
                double pv = log_t_p(margin - gain, pooled, var[0], var[c], k[0], k[c], df);
                if (pv > alpha)
                        continue;
                drops[c] = (AutoDrop) { .dropped = true, .by = 0, .epochs = (unsigned) k[c], .p = pv };
                snprintf(drops[c].why, sizeof drops[c].why,
                         "no better than the current setting by %u %% (%.3g against %.3g, p=%.2g <= %.2g) after %zu "
                         "epochs", p->min_improvement_pct, autotune_median(obj[c], k[c]), autotune_median(obj[0], k[0]),
                         pv, alpha, k[c]);
                dropped++;
        }

        /* Settled: the leader of those left (the best median among the
         * challengers inside the write bound with half the tolerance to
         * spare) beats the current setting with confidence, and by
         * AutoMinImprovement= at least, both measured 3 times or more (the
         * least the decision takes). The trial may stop here: its
         * decision is that change (autotune_decide_raced()). Each look's
         * test runs at race_alpha() / 2: over every look and every
         * challenger that may lead, a false change by settling happens at
         * most half the trial's rate, the final rank test having the
         * other half. */
        int lead = -1;
        for (size_t c = 1; c < n; c++) {
                if (!usable[c] || drops[c].dropped)
                        continue;
                if (outside_half_bound(p, autotune_median(wmb[c], k[c]), best_write))
                        continue;
                if (lead < 0 || (lower ? mean[c] < mean[lead] : mean[c] > mean[lead]))
                        lead = (int) c;
        }
        /* with the decision's least epochs (decide_no_trial()) on both sides */
        if (lead > 0 && usable[0] && k[0] >= 3 && k[lead] >= 3) {
                double m0 = autotune_median(obj[0], k[0]), ml = autotune_median(obj[lead], k[lead]);
                double gain = lower ? (m0 > 0 ? (m0 - ml) / m0 : 0) : (m0 > 0 ? (ml - m0) / m0 : 0);
                double pv = log_t_p(lower ? mean[0] - mean[lead] : mean[lead] - mean[0], pooled, var[0], var[lead],
                                    k[0], k[lead], df);
                if (pv <= alpha_settle && gain >= p->min_improvement_pct / 100.0) {
                        drops[0].by = lead;
                        drops[0].p = pv;
                        drops[0].epochs = (unsigned) k[lead];
                }
        }
        return dropped;
}

bool autotune_race_settled(const AutoDrop *drops, size_t n) {
        return n > 1 && drops[0].by > 0 && (size_t) drops[0].by < n && !drops[drops[0].by].dropped;
}

/* Sequential reads: an epoch reading less than the best so far's slowest
 * epoch divided by the guard factor. */
static bool far_worse_seq(const AutoTunePolicy *p, const AutoSeries *series, size_t n, const AutoDrop *drops,
                          size_t c, const EpochFigures *e, char *why, size_t why_size) {
        double best_med = 0, best_low = 0;
        int ref = -1;

        for (size_t b = 0; b < n && b < AUTOTUNE_MAX_CANDIDATES; b++) {
                double r[AUTOTUNE_MAX_EPOCHS];
                size_t k = 0;
                if (b == c || (drops && drops[b].dropped))
                        continue;
                for (size_t i = 0; i < series[b].n; i++)
                        if (series[b].epochs[i].valid)
                                r[k++] = series[b].epochs[i].read_mbps;
                if (k == 0)
                        continue;
                double med = autotune_median(r, k), low = r[0];
                for (size_t i = 1; i < k; i++)
                        low = fmin(low, r[i]);
                if (ref < 0 || med > best_med) {
                        best_med = med;
                        best_low = low;
                        ref = (int) b;
                }
        }
        if (ref < 0 || best_low < AUTOTUNE_MIN_WRITE_MBPS || e->read_mbps * p->guard_factor >= best_low)
                return false;
        snprintf(why, why_size, "reads %.1f MB/s, less than the best so far's %.1f MB/s (candidate %d, its slowest "
                 "epoch) over %u", e->read_mbps, best_low, ref, p->guard_factor);
        return true;
}

/* The far-worse test's reference for candidate c: among the candidates
 * still in the race (c aside) inside the write bound so far (against the
 * best writer of every candidate measured, dropped or not), the one with
 * the lowest median read latency (p99 or mean await); *ret_base is its
 * slowest epoch, at least AUTOTUNE_GUARD_FLOOR_MS. -1: none yet. */
static int far_ref(const AutoTunePolicy *p, const AutoSeries *series, size_t n, const AutoDrop *drops, size_t c,
                   bool p99, double *ret_base) {
        double best_write = 0, ref_med = INFINITY, ref_worst = 0;
        int ref = -1;
        double med_w[AUTOTUNE_MAX_CANDIDATES], med_r[AUTOTUNE_MAX_CANDIDATES], worst_r[AUTOTUNE_MAX_CANDIDATES];
        bool has[AUTOTUNE_MAX_CANDIDATES] = {};

        for (size_t b = 0; b < n && b < AUTOTUNE_MAX_CANDIDATES; b++) {
                double w[AUTOTUNE_MAX_EPOCHS], r[AUTOTUNE_MAX_EPOCHS];
                size_t k = 0;
                if (b == c)
                        continue;
                for (size_t i = 0; i < series[b].n; i++) {
                        const EpochFigures *f = &series[b].epochs[i];
                        if (!f->valid || f->read_iops == 0)
                                continue;
                        w[k] = f->write_mbps;
                        r[k] = autotune_read_latency(f, p99);
                        k++;
                }
                if (k == 0)
                        continue;
                has[b] = true;
                med_w[b] = autotune_median(w, k);
                med_r[b] = autotune_median(r, k);
                worst_r[b] = r[0];
                for (size_t i = 1; i < k; i++)
                        worst_r[b] = fmax(worst_r[b], r[i]);
                best_write = fmax(best_write, med_w[b]); /* the best writer: dropped ones count */
        }
        for (size_t b = 0; b < n && b < AUTOTUNE_MAX_CANDIDATES; b++) {
                if (!has[b] || (drops && drops[b].dropped))
                        continue;
                if (p->objective == AUTO_OBJECTIVE_READ_LATENCY && best_write >= AUTOTUNE_MIN_WRITE_MBPS &&
                    med_w[b] < best_write * (1.0 - p->write_tolerance_pct / 100.0))
                        continue; /* outside the write bound so far: no reference */
                if (med_r[b] < ref_med) {
                        ref_med = med_r[b];
                        ref_worst = worst_r[b];
                        ref = (int) b;
                }
        }
        /* Its slowest epoch, not its median: one lucky epoch of the best
         * must not end a candidate that is merely no better. */
        *ret_base = fmax(ref_worst, AUTOTUNE_GUARD_FLOOR_MS);
        return ref;
}

bool autotune_far_worse(const AutoTunePolicy *p, const AutoSeries *series, size_t n, const AutoDrop *drops,
                        size_t c, const EpochFigures *e, char *why, size_t why_size) {
        double base;

        if (c == 0 || !e->valid || e->read_iops == 0)
                return false;
        if (p->objective == AUTO_OBJECTIVE_SEQ_READ)
                return far_worse_seq(p, series, n, drops, c, e, why, why_size);
        /* the read latency the trial ranks by: the probes' p99 where every
         * epoch so far has one (a setting whose queue starves the reads
         * shows there first), else the mean await */
        bool p99 = e->read_p99_ms > 0 && autotune_have_p99(series, n);
        int ref = far_ref(p, series, n, drops, c, p99, &base);
        if (ref < 0)
                return false;
        double v = autotune_read_latency(e, p99);
        if (v <= base * p->guard_factor)
                return false;
        snprintf(why, why_size, "read %s %.2f ms, more than %u times the best so far's %.2f ms (candidate %d, its slowest epoch)",
                 p99 ? "p99" : "await", v, p->guard_factor, base, ref);
        return true;
}

double autotune_far_worse_limit(const AutoTunePolicy *p, const AutoSeries *series, size_t n, const AutoDrop *drops,
                                size_t c, int *ret_ref, double *ret_base) {
        double base;

        if (c == 0 || p->objective == AUTO_OBJECTIVE_SEQ_READ || !autotune_have_p99(series, n))
                return 0;
        int ref = far_ref(p, series, n, drops, c, true, &base);
        if (ref < 0)
                return 0;
        if (ret_ref)
                *ret_ref = ref;
        if (ret_base)
                *ret_base = base;
        return base * p->guard_factor;
}

bool autotune_p99_above_certain(uint64_t above, uint64_t n_max) {
        /* the p99 of n samples is the ceil(0.99 n)-th smallest: it is over
         * the limit once more than n - ceil(0.99 n) samples are, and that
         * allowance only grows with n */
        if (n_max == 0)
                return false;
        uint64_t rank = (99 * n_max + 99) / 100;
        return above > n_max - rank;
}

static int sched_group(const AutoCandidate *cand, size_t c, const char *const *names, size_t *n_names) {
        for (size_t g = 0; g < *n_names; g++)
                if (streq(names[g], cand[c].scheduler))
                        return (int) g;
        return -1;
}

size_t autotune_round_order(const AutoCandidate *cand, size_t n, const AutoDrop *drops, unsigned round,
                            size_t *order) {
        const char *names[AUTOTUNE_MAX_CANDIDATES];
        size_t n_names = 0, k = 0;

        /* groups in the order of their first candidate: the current
         * setting's group first, so that round 0 starts with no switch */
        for (size_t c = 0; c < n && c < AUTOTUNE_MAX_CANDIDATES; c++)
                if (sched_group(cand, c, names, &n_names) < 0)
                        names[n_names++] = cand[c].scheduler;
        bool back = round % 2 == 1;
        for (size_t gi = 0; gi < n_names; gi++) {
                size_t g = back ? n_names - 1 - gi : gi;
                for (size_t ci = 0; ci < n; ci++) {
                        size_t c = back ? n - 1 - ci : ci;
                        if ((drops && drops[c].dropped) || !streq(cand[c].scheduler, names[g]))
                                continue;
                        order[k++] = c;
                }
        }
        return k;
}

unsigned autotune_order_switches(const AutoCandidate *cand, const size_t *order, size_t k, const char *from) {
        unsigned s = 0;
        for (size_t i = 0; i < k; i++) {
                const char *sch = cand[order[i]].scheduler;
                if (!from || !streq(from, sch))
                        s++;
                from = sch;
        }
        return s;
}

/* ---- what the trial promised ---- */

void autotune_promise_make(const AutoTunePolicy *p, const AutoSeries *series, const AutoSummary *sum, size_t n,
                           int winner, AutoPromise *ret) {
        double best_write = 0;

        *ret = (AutoPromise) {};
        for (size_t c = 0; c < n; c++) /* every candidate measured, dropped or not */
                if (sum[c].n > 0)
                        best_write = fmax(best_write, sum[c].write_mbps);
        (void) autotune_series_signature(series, n, &ret->sig);
        if (winner < 0 || (size_t) winner >= n)
                return;
        ret->predicted_write_mbps = sum[winner].write_mbps;
        ret->predicted_read_ms = sum[winner].read_p99_ms > 0 ? sum[winner].read_p99_ms : sum[winner].read_await_ms;
        if (p->objective == AUTO_OBJECTIVE_READ_LATENCY) {
                if (best_write >= AUTOTUNE_MIN_WRITE_MBPS)
                        ret->write_floor_mbps = best_write * (1.0 - p->write_tolerance_pct / 100.0);
        } else if (p->objective == AUTO_OBJECTIVE_THROUGHPUT)
                ret->read_ceiling_ms = (double) p->read_target_usec / 1000.0;
}

AutoPromiseState autotune_promise_check(const AutoTunePolicy *p, const AutoPromise *pr, const EpochFigures *e,
                                        size_t k, char *why, size_t why_size) {
        double w[AUTOTUNE_PROMISE_MAX_INTERVALS], r[AUTOTUNE_PROMISE_MAX_INTERVALS];
        size_t m = 0;

        for (size_t i = 0; i < k && m < AUTOTUNE_PROMISE_MAX_INTERVALS; i++) {
                AutoSignature s;
                if (!e[i].valid)
                        continue;
                autotune_signature(&e[i], &s);
                if (s.iops < p->min_iops || autotune_signature_distance(&s, &pr->sig) > AUTOTUNE_MEMORY_MATCH)
                        continue; /* another workload: it promised nothing of that */
                w[m] = e[i].write_mbps;
                r[m] = e[i].read_await_ms;
                m++;
        }
        if (m < AUTOTUNE_PROMISE_MIN_INTERVALS)
                return AUTO_PROMISE_WATCHING;
        double mw = autotune_median(w, m), mr = autotune_median(r, m);
        if (pr->write_floor_mbps > 0 && mw < pr->write_floor_mbps) {
                snprintf(why, why_size,
                         "writes %.1f MB/s over %zu intervals of the workload, below the %.1f MB/s the trial's bound "
                         "assumed (it measured %.1f)",
                         mw, m, pr->write_floor_mbps, pr->predicted_write_mbps);
                return AUTO_PROMISE_BROKEN;
        }
        if (pr->read_ceiling_ms > 0 && mr > pr->read_ceiling_ms) {
                snprintf(why, why_size,
                         "read await %.2f ms over %zu intervals of the workload, above the target of %.2f ms (the trial "
                         "measured %.2f)",
                         mr, m, pr->read_ceiling_ms, pr->predicted_read_ms);
                return AUTO_PROMISE_BROKEN;
        }
        snprintf(why, why_size, "holds over %zu intervals of the workload: writes %.1f MB/s, read await %.2f ms", m, mw,
                 mr);
        return AUTO_PROMISE_HOLDS;
}

int autotune_fallback(const AutoTunePolicy *p, const AutoSummary *sum, size_t n, int chosen) {
        int fb = -1;

        for (size_t c = 0; c < n; c++) {
                if ((int) c == chosen || !sum[c].admissible || sum[c].dropped || sum[c].n == 0)
                        continue;
                if (fb < 0)
                        fb = (int) c;
                else if (p->objective == AUTO_OBJECTIVE_READ_LATENCY  ? sum[c].write_mbps > sum[fb].write_mbps
                         : p->objective == AUTO_OBJECTIVE_SEQ_READ ? sum[c].read_mbps > sum[fb].read_mbps
                                                                   : sum[c].read_await_ms < sum[fb].read_await_ms)
                        fb = (int) c;
        }
        return fb;
}
