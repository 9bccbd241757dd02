/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The race: after each round the candidates beaten with confidence leave
 * (autotune_race()), one far worse than the best so far leaves after its
 * epoch, the guard rail ends a trial on I/O errors; and the order the
 * rounds run the candidates in. */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "autotune-internal.h"
#include "autotune.h"
#include "util.h"

double autotune_looks(const AutotunePolicy *p) {
        return p->looks > 1 ? (double) p->looks : 1.0;
}

/* The race's rate per test: every look (a round) and every opponent. */
static double race_alpha(const AutotunePolicy *p, size_t n) {
        return (1.0 - p->confidence_pct / 100.0) /
               ((double) (p->rounds ? p->rounds : 1) * (double) (n > 1 ? n - 1 : 1)) / autotune_looks(p);
}

/* The valid epochs' objective, write MB/s and read latency of one series. */
static size_t race_values(const AutotunePolicy *p, const AutotuneSeries *s, bool p99, double *obj, double *wmb,
                          double *rlat) {
        size_t k = 0;
        for (size_t i = 0; i < s->n; i++) {
                const AutotuneEpochFigures *e = &s->epochs[i];
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
static bool outside_half_bound(const AutotunePolicy *p, double w, double best_write) {
        return p->objective == AUTOTUNE_OBJECTIVE_READ_LATENCY && best_write >= AUTOTUNE_MIN_WRITE_MBPS &&
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
size_t autotune_race(const AutotunePolicy *p, const AutotuneSeries *series, size_t n, AutotuneDrop *drops) {
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
         * the race included: they showed in their epochs what they write
         * (and those of a search's phases before) */
        double best_write = p->write_seen_mbps;
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
                        if (p->objective == AUTOTUNE_OBJECTIVE_READ_LATENCY) {
                                double wb = autotune_median(wmb[b], k[b]);
                                if (wb < wc && outside_half_bound(p, wb, best_write))
                                        continue;
                        } else if (p->objective == AUTOTUNE_OBJECTIVE_THROUGHPUT) {
                                double rb = autotune_median(rlat[b], k[b]);
                                if (rb > rc && rb * 1000.0 > (double) p->read_target_usec)
                                        continue;
                        }
                        double pv = log_t_p(lower ? mean[c] - mean[b] : mean[b] - mean[c], pooled, var[b], var[c],
                                            k[b], k[c], df);
                        if (pv > alpha)
                                continue;
                        drops[c] = (AutotuneDrop) { .dropped = true, .by = (int) b, .epochs = (unsigned) k[c],
                                                    .p = pv };
                        snprintf(drops[c].why, sizeof drops[c].why,
                                 "beaten by candidate %zu (%.3g against %.3g, p=%.2g <= %.2g) after %zu epochs", b,
                                 autotune_median(obj[b], k[b]), autotune_median(obj[c], k[c]), pv, alpha, k[c]);
                        dropped++;
                        break;
                }
                if (drops[c].dropped || p->objective != AUTOTUNE_OBJECTIVE_READ_LATENCY || !usable_w[c] ||
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
                        drops[c] = (AutotuneDrop) { .dropped = true, .by = (int) b, .epochs = (unsigned) k[c],
                                                    .p = pv };
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
                drops[c] = (AutotuneDrop) { .dropped = true, .by = 0, .epochs = (unsigned) k[c], .p = pv };
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

bool autotune_race_settled(const AutotuneDrop *drops, size_t n) {
        return n > 1 && drops[0].by > 0 && (size_t) drops[0].by < n && !drops[drops[0].by].dropped;
}

/* Sequential reads: an epoch reading less than the best so far's slowest
 * epoch divided by the guard factor. */
static bool far_worse_seq(const AutotunePolicy *p, const AutotuneSeries *series, size_t n, const AutotuneDrop *drops,
                          size_t c, const AutotuneEpochFigures *e, char *why, size_t why_size) {
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
static int far_ref(const AutotunePolicy *p, const AutotuneSeries *series, size_t n, const AutotuneDrop *drops, size_t c,
                   bool p99, double *ret_base) {
        double best_write = p->write_seen_mbps, ref_med = INFINITY, ref_worst = 0;
        int ref = -1;
        double med_w[AUTOTUNE_MAX_CANDIDATES], med_r[AUTOTUNE_MAX_CANDIDATES], worst_r[AUTOTUNE_MAX_CANDIDATES];
        bool has[AUTOTUNE_MAX_CANDIDATES] = {};

        for (size_t b = 0; b < n && b < AUTOTUNE_MAX_CANDIDATES; b++) {
                double w[AUTOTUNE_MAX_EPOCHS], r[AUTOTUNE_MAX_EPOCHS];
                size_t k = 0;
                if (b == c)
                        continue;
                for (size_t i = 0; i < series[b].n; i++) {
                        const AutotuneEpochFigures *f = &series[b].epochs[i];
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
                if (p->objective == AUTOTUNE_OBJECTIVE_READ_LATENCY && best_write >= AUTOTUNE_MIN_WRITE_MBPS &&
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

bool autotune_far_worse(const AutotunePolicy *p, const AutotuneSeries *series, size_t n, const AutotuneDrop *drops,
                        size_t c, const AutotuneEpochFigures *e, char *why, size_t why_size) {
        double base;

        if (c == 0 || !e->valid || e->read_iops == 0)
                return false;
        if (p->objective == AUTOTUNE_OBJECTIVE_SEQ_READ)
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
        snprintf(why, why_size,
                 "read %s %.2f ms, more than %u times the best so far's %.2f ms (candidate %d, its slowest epoch)",
                 p99 ? "p99" : "await", v, p->guard_factor, base, ref);
        return true;
}

double autotune_far_worse_limit(const AutotunePolicy *p, const AutotuneSeries *series, size_t n,
                                const AutotuneDrop *drops, size_t c, int *ret_ref, double *ret_base) {
        double base;

        if (c == 0 || p->objective == AUTOTUNE_OBJECTIVE_SEQ_READ || !autotune_have_p99(series, n))
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

bool autotune_guard(const AutotunePolicy *p, const AutotuneSeries *baseline, const AutotuneEpochFigures *e, char *why,
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
                snprintf(why, why_size,
                         "read await %.2f ms, more than %u times the current setting's %.2f ms (its slowest epoch)",
                         e->read_await_ms, p->guard_factor, base);
                return true;
        }
        return false;
}

static int sched_group(const AutotuneCandidate *cand, size_t c, const char *const *names, size_t *n_names) {
        for (size_t g = 0; g < *n_names; g++)
                if (streq(names[g], cand[c].scheduler))
                        return (int) g;
        return -1;
}

/* Where a candidate goes in its scheduler's group: the current setting
 * first, then the deepest queue (nr_requests unset: the scheduler's own,
 * deep, default). A shallow queue under a workload that keeps more in
 * flight starves its reads (they wait for a tag, which no await counts);
 * measured after the deeper ones, it meets a far-worse limit drawn from
 * the best of several settings, not from the one epoch of the current
 * setting alone, and leaves at its first look (bench/README: a whole
 * first epoch of mq-deadline nr_requests=4 was spent when it came second,
 * right after that one epoch). */
static uint64_t depth_key(const AutotuneCandidate *cand, size_t c) {
        if (c == 0 || cand[c].baseline)
                return UINT64_MAX;
        return cand[c].nr_requests ? cand[c].nr_requests : UINT32_MAX + (uint64_t) 1;
}

size_t autotune_round_order(const AutotuneCandidate *cand, size_t n, const AutotuneDrop *drops, unsigned round,
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
                size_t g = back ? n_names - 1 - gi : gi, grp[AUTOTUNE_MAX_CANDIDATES], m = 0;
                for (size_t c = 0; c < n && c < AUTOTUNE_MAX_CANDIDATES; c++)
                        if (!(drops && drops[c].dropped) && streq(cand[c].scheduler, names[g]))
                                grp[m++] = c;
                /* deepest queue first (stable: by index among equals) */
                for (size_t i = 1; i < m; i++)
                        for (size_t j = i; j > 0 && depth_key(cand, grp[j]) > depth_key(cand, grp[j - 1]); j--) {
                                size_t t = grp[j];
                                grp[j] = grp[j - 1];
                                grp[j - 1] = t;
                        }
                for (size_t i = 0; i < m; i++)
                        order[k++] = grp[back ? m - 1 - i : i];
        }
        return k;
}

unsigned autotune_order_switches(const AutotuneCandidate *cand, const size_t *order, size_t k, const char *from) {
        unsigned s = 0;
        for (size_t i = 0; i < k; i++) {
                const char *sch = cand[order[i]].scheduler;
                if (!from || !streq(from, sch))
                        s++;
                from = sch;
        }
        return s;
}

size_t autotune_slot_candidate(size_t slot, size_t n_cand) {
        size_t round = slot / n_cand, pos = slot % n_cand;
        return (pos + round) % n_cand;
}
