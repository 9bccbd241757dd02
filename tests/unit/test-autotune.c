/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* autotune-*.c: the decisions of closed-loop tuning, fed with synthetic
 * series (a seeded generator, so every run sees the same numbers) and a
 * series recorded on the model disk (tools/modeldisk). It picks a clear
 * winner; does not flip on noise, drift or one outlier; keeps inside the
 * bounds, the dwell time and the caps; ends a harmful trial early. */

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "autotune-internal.h"
#include "autotune.h"
#include "util.h"

static uint64_t rng_state;

static double rnd(void) { /* uniform [0, 1) */
        rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
        return (double) (rng_state >> 11) / (double) (1ULL << 53);
}

static double noisy(double v, double rel) {
        return v * (1 + rel * (2 * rnd() - 1));
}

static AutotunePolicy policy(void) {
        AutotunePolicy p;
        autotune_policy_init(&p);
        p.enabled = true;
        return p;
}

/* Fills series[c] with `rounds` epochs: read await mean[c] ms, write MB/s
 * wmb[c], relative noise rel; drift multiplies every value by 1 + drift *
 * (slot / slots), slots taken in the rotated trial order. */
static void fill(AutotuneSeries *series, size_t n, unsigned rounds, const double *mean, const double *wmb, double rel,
                 double drift) {
        size_t slots = n * rounds;
        memset(series, 0, sizeof(AutotuneSeries) * n);
        for (size_t s = 0; s < slots; s++) {
                size_t c = autotune_slot_candidate(s, n);
                double f = 1 + drift * (double) s / (double) slots;
                AutotuneEpochFigures *e = &series[c].epochs[series[c].n++];
                *e = (AutotuneEpochFigures) {
                        .valid = true,
                        .read_iops = 200,
                        .write_iops = 100,
                        .read_await_ms = noisy(mean[c], rel) * f,
                        .write_mbps = noisy(wmb[c], rel / 3),
                        .read_mbps = 0.8,
                };
        }
}

/* A running trial's medians (autotune_summarise()) are the decision's, and
 * a candidate not measured yet has n 0 and figures 0, not NaN. */
static void test_summarise(void **state) {
        AutotunePolicy p;
        AutotuneSeries s[2] = {};
        AutotuneSummary sum[2], dsum[1];
        AutotuneDecision d;

        autotune_policy_init(&p);
        for (size_t i = 0; i < 5; i++)
                s[0].epochs[s[0].n++] = (AutotuneEpochFigures) { .read_iops = 100 + (double) i,
                                                                 .read_await_ms = 1 + (double) i,
                                                                 .write_mbps = 10, .valid = true };
        autotune_summarise(&p, s, 2, sum);
        assert_int_equal(sum[0].n, 5);
        assert_true(sum[0].read_await_ms == 3 && sum[0].objective == 3 && sum[0].iops == 102 &&
                    sum[0].write_mbps == 10);
        assert_int_equal(sum[1].n, 0);
        assert_true(sum[1].read_await_ms == 0 && sum[1].write_mbps == 0 && sum[1].objective == 0 && sum[1].iops == 0);
        assert_true(sum[1].p_vs_current == 1);
        autotune_decide(&p, s, 1, dsum, &d);
        assert_true(dsum[0].read_await_ms == sum[0].read_await_ms && dsum[0].objective == sum[0].objective &&
                    dsum[0].write_mbps == sum[0].write_mbps && dsum[0].iops == sum[0].iops);
        autotune_policy_done(&p);
}

/* The probes during a trial: one per 20 ms at least, faster while they
 * stay at most 1 in 10 of the disk's I/Os, never faster than one per 5 ms. */
static void test_trial_probe_usec(void **state) {
        assert_int_equal(autotune_trial_probe_usec(0), 20000);
        assert_int_equal(autotune_trial_probe_usec(NAN), 20000);
        assert_int_equal(autotune_trial_probe_usec(-5), 20000);
        assert_int_equal(autotune_trial_probe_usec(170), 20000); /* seq-write: 1 MiB writes */
        assert_int_equal(autotune_trial_probe_usec(500), 20000);
        assert_int_equal(autotune_trial_probe_usec(1000), 10000);
        assert_int_equal(autotune_trial_probe_usec(1300), 7693); /* mixed */
        assert_int_equal(autotune_trial_probe_usec(2000), 5000);
        assert_int_equal(autotune_trial_probe_usec(2400), 5000); /* read-mostly */
        assert_int_equal(autotune_trial_probe_usec(1e6), 5000);
        /* between the ends, the share holds */
        for (double iops = 510; iops < 2000; iops += 37.5) {
                uint64_t usec = autotune_trial_probe_usec(iops);
                assert_true(usec > 5000 && usec < 20000);
                assert_true(1e6 / (double) usec <= iops / 10);
        }
}

static void test_mann_whitney(void **state) {
        double lo[] = { 1, 2, 3, 4, 5 }, hi[] = { 6, 7, 8, 9, 10 }, same[] = { 3, 3, 3, 3, 3 };

        /* complete separation, 5 against 5: 1 arrangement of C(10,5) = 252 */
        assert_true(fabs(autotune_mann_whitney_less(lo, 5, hi, 5) - 1.0 / 252) < 1e-12);
        assert_true(autotune_mann_whitney_less(hi, 5, lo, 5) > 0.99);
        /* all tied: no evidence */
        assert_true(autotune_mann_whitney_less(same, 5, same, 5) > 0.4);
        /* 3 against 3 at best 1/20 */
        assert_true(fabs(autotune_mann_whitney_less(lo, 3, hi, 3) - 0.05) < 1e-12);
        /* large samples take the normal approximation */
        double a[30], b[30];
        for (int i = 0; i < 30; i++)
                a[i] = i, b[i] = i + 15;
        assert_true(autotune_mann_whitney_less(a, 30, b, 30) < 0.001);
}

static void test_clear_winner(void **state) {
        AutotunePolicy p = policy();
        AutotuneSeries s[3];
        AutotuneSummary sum[3];
        AutotuneDecision d;
        double mean[] = { 40, 8, 30 }, wmb[] = { 150, 150, 150 };

        rng_state = 1;
        fill(s, 3, 5, mean, wmb, 0.2, 0);
        autotune_decide(&p, s, 3, sum, &d);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_int_equal(d.winner, 1);
        assert_true(d.confidence >= 0.95);
        assert_true(d.improvement > 0.6);
        assert_true(sum[1].admissible && sum[2].admissible);

        /* the current setting is already the best: keep it */
        double mean2[] = { 8, 40, 30 };
        fill(s, 3, 5, mean2, wmb, 0.2, 0);
        autotune_decide(&p, s, 3, sum, &d);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_KEEP_BEST);
        assert_int_equal(d.winner, 0);
}

/* How many of TRIALS trials (seeds 1..TRIALS) of N equal candidates
 * (10 ms, 150 MB/s; 5 epochs each, NOISE and DRIFT as fill() takes them)
 * end in a change of setting. */
static unsigned changes_among_equals(unsigned n, unsigned trials, double noise, double drift) {
        AutotunePolicy p = policy();
        AutotuneSeries s[4];
        AutotuneSummary sum[4];
        AutotuneDecision d;
        double mean[4], wmb[4];
        unsigned changes = 0;

        assert_true(n <= 4);
        for (unsigned i = 0; i < n; i++) {
                mean[i] = 10;
                wmb[i] = 150;
        }
        for (unsigned seed = 1; seed <= trials; seed++) {
                rng_state = seed;
                fill(s, n, 5, mean, wmb, noise, drift);
                autotune_decide(&p, s, n, sum, &d);
                changes += d.verdict == AUTOTUNE_VERDICT_CHANGE;
        }
        return changes;
}

/* Equal candidates with 30 % noise per epoch: the decision keeps the
 * current setting nearly always (the test's alpha is 5 % per trial before
 * hysteresis; with it, fewer). */
static void test_no_flip_on_noise(void **state) {
        unsigned changes = changes_among_equals(4, 400, 0.3, 0);

        print_message("noise: %u changes in 400 trials of equal candidates\n", changes);
        assert_true(changes <= 400 / 20);
}

/* The workload triples its latency during the trial; the candidates are
 * equal. Interleaving with a rotated order keeps the drift from choosing. */
static void test_no_flip_on_drift(void **state) {
        unsigned changes = changes_among_equals(3, 200, 0.05, 2.0);

        print_message("drift: %u changes in 200 trials\n", changes);
        assert_true(changes <= 200 / 20);
}

/* One outlier epoch does not decide: medians and ranks ignore its size. */
static void test_no_flip_on_outlier(void **state) {
        AutotunePolicy p = policy();
        AutotuneSeries s[2];
        AutotuneSummary sum[2];
        AutotuneDecision d;
        double mean[] = { 10, 11 }, wmb[] = { 150, 150 };

        rng_state = 7;
        fill(s, 2, 5, mean, wmb, 0.02, 0);
        s[0].epochs[2].read_await_ms = 900; /* one stall of the current setting */
        autotune_decide(&p, s, 2, sum, &d);
        assert_int_not_equal(d.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_true(sum[0].objective < 11);

        /* and a clearly better candidate with one stall still wins */
        double mean2[] = { 40, 10 };
        fill(s, 2, 8, mean2, wmb, 0.05, 0);
        s[1].epochs[0].read_await_ms = 900;
        autotune_decide(&p, s, 2, sum, &d);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_int_equal(d.winner, 1);
}

/* Significant but small: hysteresis keeps the current setting. */
static void test_hysteresis(void **state) {
        AutotunePolicy p = policy();
        AutotuneSeries s[2];
        AutotuneSummary sum[2];
        AutotuneDecision d;
        double mean[] = { 10, 9.5 }, wmb[] = { 150, 150 };

        rng_state = 3;
        fill(s, 2, 8, mean, wmb, 0.01, 0);
        autotune_decide(&p, s, 2, sum, &d);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_KEEP_HYSTERESIS);
        assert_true(d.p <= 0.05);
        p.min_improvement_pct = 2;
        autotune_decide(&p, s, 2, sum, &d);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_CHANGE);
}

/* The write-throughput bound: the lowest latency costs 40 % of the writes
 * and is not admissible; the next one wins. */
static void test_write_tolerance(void **state) {
        AutotunePolicy p = policy();
        AutotuneSeries s[3];
        AutotuneSummary sum[3];
        AutotuneDecision d;
        double mean[] = { 40, 2, 9 }, wmb[] = { 150, 90, 148 };

        rng_state = 11;
        fill(s, 3, 5, mean, wmb, 0.1, 0);
        autotune_decide(&p, s, 3, sum, &d);
        assert_false(sum[1].admissible);
        assert_true(sum[2].admissible);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_int_equal(d.winner, 2);

        /* a tolerance of 50 % admits it */
        p.write_tolerance_pct = 50;
        autotune_decide(&p, s, 3, sum, &d);
        assert_int_equal(d.winner, 1);
}

static void test_throughput_objective(void **state) {
        AutotunePolicy p = policy();
        AutotuneSeries s[3];
        AutotuneSummary sum[3];
        AutotuneDecision d;
        double mean[] = { 5, 20, 8 }, wmb[] = { 100, 200, 160 };

        p.objective = AUTOTUNE_OBJECTIVE_THROUGHPUT;
        p.read_target_usec = 10000; /* 10 ms: candidate 1 is faster but too slow for reads */
        rng_state = 5;
        fill(s, 3, 5, mean, wmb, 0.05, 0);
        autotune_decide(&p, s, 3, sum, &d);
        assert_false(sum[1].admissible);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_int_equal(d.winner, 2);
}

static void test_idle_and_no_data(void **state) {
        AutotunePolicy p = policy();
        AutotuneSeries s[2];
        AutotuneSummary sum[2];
        AutotuneDecision d;
        double mean[] = { 40, 5 }, wmb[] = { 1, 1 };

        rng_state = 9;
        fill(s, 2, 5, mean, wmb, 0.1, 0);
        for (size_t c = 0; c < 2; c++)
                for (size_t i = 0; i < s[c].n; i++)
                        s[c].epochs[i].read_iops = 2, s[c].epochs[i].write_iops = 1;
        autotune_decide(&p, s, 2, sum, &d);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_KEEP_IDLE);

        fill(s, 2, 2, mean, wmb, 0.1, 0);
        autotune_decide(&p, s, 2, sum, &d);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_KEEP_NO_DATA);
}

/* The probes' read p99: when every epoch has one, the read-latency
 * objective ranks by it (the tail), not by the mean await; an epoch without
 * one (too few probes) sends the whole trial back to the mean await. */
static void test_p99_objective(void **state) {
        AutotunePolicy p = policy();
        AutotuneSeries s[3];
        AutotuneSummary sum[3];
        AutotuneDecision d;
        /* candidate 1 has the lower mean, candidate 2 the lower tail */
        double mean[] = { 10, 5, 9 }, wmb[] = { 150, 150, 150 }, p99[] = { 40, 60, 12 };

        rng_state = 11;
        fill(s, 3, 6, mean, wmb, 0.1, 0);
        for (size_t c = 0; c < 3; c++)
                for (size_t i = 0; i < s[c].n; i++)
                        s[c].epochs[i].read_p99_ms = noisy(p99[c], 0.1);
        assert_true(autotune_have_p99(s, 3));
        autotune_decide(&p, s, 3, sum, &d);
        assert_true(d.by_p99);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_int_equal(d.winner, 2);
        assert_true(sum[2].read_p99_ms > 10 && sum[2].read_p99_ms < 14);
        assert_true(fabs(sum[2].objective - sum[2].read_p99_ms) < 1e-9);

        /* the throughput form bounds the p99, not the mean */
        p.objective = AUTOTUNE_OBJECTIVE_THROUGHPUT;
        p.read_target_usec = 20000;
        autotune_decide(&p, s, 3, sum, &d);
        assert_false(sum[0].admissible); /* mean 10 ms, p99 40 ms */
        assert_true(sum[2].admissible);
        p.objective = AUTOTUNE_OBJECTIVE_READ_LATENCY;

        /* one epoch with too few probes: the mean await decides */
        s[1].epochs[2].read_p99_ms = 0;
        assert_false(autotune_have_p99(s, 3));
        autotune_decide(&p, s, 3, sum, &d);
        assert_false(d.by_p99);
        assert_int_equal(d.winner, 1);
        assert_true(sum[1].read_p99_ms == 0);
}

/* A candidate that tripped the guard rail is left out of the next trials
 * for an hour; the baseline never is; the list keeps the newest. */
static void test_tripped(void **state) {
        AutotuneCandidate c[3] = {
                { .scheduler = "mq-deadline", .nr_requests = 32, .wbt_lat_usec = AUTOTUNE_WBT_UNSET, .baseline = true },
                { .scheduler = "mq-deadline", .nr_requests = 256, .wbt_lat_usec = AUTOTUNE_WBT_UNSET },
                { .scheduler = "mq-deadline", .nr_requests = 4, .wbt_lat_usec = AUTOTUNE_WBT_UNSET },
        };
        AutotuneCandidate k[3];
        AutotuneTripped t[AUTOTUNE_TRIPPED_MAX];
        size_t n_t = 0, n;
        char note[256] = "";
        uint64_t now = 10 * AUTOTUNE_TRIPPED_USEC;

        autotune_tripped_add(t, &n_t, &c[1], now);
        autotune_tripped_add(t, &n_t, &c[1], now + 5); /* again: renewed, not added */
        assert_int_equal(n_t, 1);
        assert_int_equal(t[0].usec, now + 5);

        memcpy(k, c, sizeof k);
        n = autotune_drop_tripped(k, 3, t, n_t, now + 60000000, note, sizeof note);
        assert_int_equal(n, 2);
        assert_true(k[0].baseline && k[0].nr_requests == 32);
        assert_int_equal(k[1].nr_requests, 4);
        assert_non_null(strstr(note, "mq-deadline nr_requests=256 left out"));

        /* an hour later it is tried again */
        memcpy(k, c, sizeof k);
        note[0] = 0;
        n = autotune_drop_tripped(k, 3, t, n_t, now + 5 + AUTOTUNE_TRIPPED_USEC, note, sizeof note);
        assert_int_equal(n, 3);
        assert_string_equal(note, "");

        /* the baseline stays even if it tripped once (as a candidate of an earlier trial) */
        autotune_tripped_add(t, &n_t, &c[0], now);
        memcpy(k, c, sizeof k);
        n = autotune_drop_tripped(k, 3, t, n_t, now + 10, note, sizeof note);
        assert_int_equal(n, 2);
        assert_int_equal(k[0].nr_requests, 32);

        /* full: the oldest goes */
        n_t = 0;
        for (unsigned i = 0; i < AUTOTUNE_TRIPPED_MAX + 1; i++) {
                AutotuneCandidate x = { .scheduler = "kyber", .nr_requests = 8 + i,
                                        .wbt_lat_usec = AUTOTUNE_WBT_UNSET };
                autotune_tripped_add(t, &n_t, &x, now + i);
        }
        assert_int_equal(n_t, AUTOTUNE_TRIPPED_MAX);
        for (size_t i = 0; i < n_t; i++)
                assert_int_not_equal(t[i].cand.nr_requests, 8);
}

static void test_guard(void **state) {
        AutotunePolicy p = policy();
        AutotuneSeries base = {};
        char why[128];
        AutotuneEpochFigures e = { .valid = true, .read_iops = 100, .read_await_ms = 9.5 };

        base.epochs[0] = (AutotuneEpochFigures) { .valid = true, .read_iops = 100, .read_await_ms = 2.5 };
        base.n = 1;
        assert_false(autotune_guard(&p, &base, &e, why, sizeof why)); /* 9.5 < 4 x 2.5 */
        e.read_await_ms = 10.5;
        assert_true(autotune_guard(&p, &base, &e, why, sizeof why)); /* 10.5 > 4 x 2.5 */
        assert_non_null(strstr(why, "more than 4 times"));
        /* below the floor, no guard: 0.1 ms against 3.9 ms is noise-level */
        base.epochs[0].read_await_ms = 0.1;
        e.read_await_ms = 3.9;
        assert_false(autotune_guard(&p, &base, &e, why, sizeof why));
        e.read_await_ms = 4.1;
        assert_true(autotune_guard(&p, &base, &e, why, sizeof why));
        /* one lucky epoch of the current setting does not end a trial: the
         * guard compares with its slowest epoch */
        base.epochs[0].read_await_ms = 0.5;
        base.epochs[1] = (AutotuneEpochFigures) { .valid = true, .read_iops = 100, .read_await_ms = 0.5 };
        base.epochs[2] = (AutotuneEpochFigures) { .valid = true, .read_iops = 100, .read_await_ms = 30 };
        base.n = 3;
        e.read_await_ms = 20;
        assert_false(autotune_guard(&p, &base, &e, why, sizeof why));
        e.read_await_ms = 121;
        assert_true(autotune_guard(&p, &base, &e, why, sizeof why));
        /* errors end it whatever the latency */
        e = (AutotuneEpochFigures) { .valid = true, .errors = 2 };
        assert_true(autotune_guard(&p, &base, &e, why, sizeof why));
        assert_string_equal(why, "2 I/O errors");
}

static void test_candidates(void **state) {
        AutotunePolicy p = policy();
        AutotuneCandidate cur = { .scheduler = "none", .wbt_lat_usec = AUTOTUNE_WBT_UNSET }, c[AUTOTUNE_MAX_CANDIDATES];
        size_t n;
        char note[512], buf[96];

        p.schedulers[0] = strdup("none");
        p.schedulers[1] = strdup("kyber");
        p.schedulers[2] = strdup("mq-deadline");
        assert_int_equal(autotune_parse_nr_requests("32 256", p.nr_requests, &p.n_nr_requests), 0);
        assert_int_equal(autotune_candidates(&p, &cur, "[none] mq-deadline kyber bfq", false,
                                             KERNEL_VERSION_CODE(6, 18), 0, c, &n, note, sizeof note), 0);
        /* baseline (none, so no twin and no nr_requests: the trap) + 2 x kyber + 2 x mq-deadline */
        assert_int_equal(n, 5);
        assert_true(c[0].baseline);
        assert_string_equal(autotune_candidate_format(&c[0], buf, sizeof buf), "none");
        assert_string_equal(autotune_candidate_format(&c[1], buf, sizeof buf), "kyber nr_requests=32");
        assert_string_equal(autotune_candidate_format(&c[4], buf, sizeof buf), "mq-deadline nr_requests=256");
        for (size_t i = 1; i < n; i++)
                assert_false(streq(c[i].scheduler, "none") && c[i].nr_requests);

        /* zoned before 6.10: mq-deadline only */
        cur = (AutotuneCandidate) { .scheduler = "mq-deadline", .wbt_lat_usec = AUTOTUNE_WBT_UNSET };
        assert_int_equal(autotune_candidates(&p, &cur, "none [mq-deadline] kyber", true, KERNEL_VERSION_CODE(6, 9),
                                             0, c, &n, note, sizeof note), 0);
        for (size_t i = 0; i < n; i++)
                assert_string_equal(c[i].scheduler, "mq-deadline");
        assert_non_null(strstr(note, "none left out: a zoned disk before 6.10"));
        /* ... and a current scheduler other than mq-deadline there could not
         * be put back for the baseline's epochs: nothing to compare */
        AutotuneCandidate cur_none = { .scheduler = "none", .wbt_lat_usec = AUTOTUNE_WBT_UNSET };
        assert_int_equal(autotune_candidates(&p, &cur_none, "[none] mq-deadline kyber", true,
                                             KERNEL_VERSION_CODE(6, 1), 0, c, &n, note, sizeof note), -ENOENT);
        assert_int_equal(n, 1);
        assert_non_null(strstr(note, "the current scheduler none cannot be put back"));
        /* from 6.10 all of them */
        assert_int_equal(autotune_candidates(&p, &cur, "none [mq-deadline] kyber", true, KERNEL_VERSION_CODE(6, 10),
                                             0, c, &n, note, sizeof note), 0);
        assert_int_equal(n, 6);

        /* a scheduler the kernel does not offer, a depth above its bound */
        assert_int_equal(autotune_candidates(&p, &cur, "none [mq-deadline]", false, KERNEL_VERSION_CODE(6, 18), 128,
                                             c, &n, note, sizeof note), 0);
        assert_non_null(strstr(note, "kyber left out"));
        assert_non_null(strstr(note, "nr_requests=256 left out"));
        for (size_t i = 0; i < n; i++)
                assert_true(c[i].nr_requests <= 128);
        autotune_policy_done(&p);
}

static void test_parse(void **state) {
        AutotunePolicy p;
        char buf[256];
        const char *msg = NULL;
        unsigned v[AUTOTUNE_MAX_VALUES];
        size_t n;

        autotune_policy_init(&p);
        assert_int_equal(autotune_parse_nr_requests("64..1024", v, &n), 0);
        assert_int_equal(n, 5);
        assert_int_equal(v[0], 64);
        assert_int_equal(v[1], 128);
        assert_int_equal(v[4], 1024);
        assert_int_equal(autotune_parse_nr_requests("48..100", v, &n), 0);
        assert_int_equal(n, 3); /* 48 64 100 */
        assert_int_equal(v[1], 64);
        assert_int_equal(autotune_parse_nr_requests("1024..64", v, &n), -EINVAL);
        assert_int_equal(autotune_parse_nr_requests("2", v, &n), -EINVAL);

        assert_int_equal(autotune_policy_parse(&p, "Scheduler", "kyber", buf, sizeof buf, &msg), -ENOENT);
        assert_int_equal(autotune_policy_parse(&p, "AutoTune", "yes", buf, sizeof buf, &msg), 0);
        assert_true(p.enabled);
        assert_int_equal(autotune_policy_parse(&p, "AutoScheduler", "kyber mq-deadline none", buf, sizeof buf, &msg),
                         0);
        assert_string_equal(p.schedulers[2], "none");
        assert_null(p.schedulers[3]);
        assert_int_equal(autotune_policy_parse(&p, "AutoScheduler", "kyber b@d", buf, sizeof buf, &msg), -EINVAL);
        assert_non_null(strstr(msg, "b@d"));
        assert_int_equal(autotune_policy_parse(&p, "AutoWriteTolerance", "5%", buf, sizeof buf, &msg), 0);
        assert_int_equal(p.write_tolerance_pct, 5);
        assert_int_equal(autotune_policy_parse(&p, "AutoObjective", "fast", buf, sizeof buf, &msg), -EINVAL);
        assert_int_equal(autotune_policy_parse(&p, "AutoEpochSec", "0.1", buf, sizeof buf, &msg), -EINVAL);
        assert_int_equal(autotune_policy_parse(&p, "AutoEpochSec", "1.5", buf, sizeof buf, &msg), 0);
        assert_int_equal(p.epoch_usec, 1500000);
        assert_int_equal(autotune_policy_parse(&p, "AutoWbtLatUsec", "-1 0 2000", buf, sizeof buf, &msg), 0);
        assert_int_equal(p.n_wbt_lat_usec, 3);
        assert_int_equal(autotune_policy_parse(&p, "AutoBogus", "1", buf, sizeof buf, &msg), -ENOENT);
        /* the scheduler switches of a trial, and the memory of workloads */
        assert_int_equal(p.max_switches, AUTOTUNE_DEFAULT_MAX_SWITCHES);
        assert_true(p.remember);
        assert_int_equal(autotune_policy_parse(&p, "AutoMaxSwitches", "6", buf, sizeof buf, &msg), 0);
        assert_int_equal(p.max_switches, 6);
        assert_int_equal(autotune_policy_parse(&p, "AutoMaxSwitches", "0", buf, sizeof buf, &msg), -EINVAL);
        assert_string_equal(msg, "expected a number from 1 to 1000");
        assert_int_equal(autotune_policy_parse(&p, "AutoRemember", "no", buf, sizeof buf, &msg), 0);
        assert_false(p.remember);
        autotune_policy_done(&p);
}

static void test_caps(void **state) {
        AutotunePolicy p = policy();
        AutotuneHistory dev = {}, global = {};
        char why[256];
        const uint64_t s = 1000000, hour = 3600 * s;
        uint64_t now = 10 * hour;

        p.trials_per_hour = 2;
        p.dwell_usec = 600 * s;
        assert_true(autotune_may_start(&p, &dev, &global, 10, now, false, why, sizeof why));
        autotune_history_add(&dev, now - 30 * 60 * s);
        autotune_history_add(&dev, now - 10 * 60 * s);
        assert_false(autotune_may_start(&p, &dev, &global, 10, now, false, why, sizeof why));
        assert_non_null(strstr(why, "AutoTrialsPerHour="));
        /* an hour later the window is free again */
        assert_true(autotune_may_start(&p, &dev, &global, 10, now + hour, false, why, sizeof why));
        /* dwell: no trial within AutoMinDwellSec= of a change */
        dev.last_change_usec = now + hour - 60 * s;
        assert_false(autotune_may_start(&p, &dev, &global, 10, now + hour, false, why, sizeof why));
        assert_non_null(strstr(why, "AutoMinDwellSec="));
        /* an operator's trial passes the device's limits, not the global cap */
        assert_true(autotune_may_start(&p, &dev, &global, 10, now + hour, true, why, sizeof why));
        for (int i = 0; i < 10; i++)
                autotune_history_add(&global, now + hour - (uint64_t) i * s);
        assert_false(autotune_may_start(&p, &dev, &global, 10, now + hour, true, why, sizeof why));
        assert_non_null(strstr(why, "across all devices"));
        /* AutoTune=no: only on demand */
        p.enabled = false;
        assert_false(autotune_may_start(&p, &(AutotuneHistory) {}, NULL, 0, now, false, why, sizeof why));
}

static void test_epoch_figures(void **state) {
        AutotuneBlockStat a, b;
        AutotuneEpochFigures e;

        assert_int_equal(autotune_blockstat_parse("  100 0 800 200  50 0 12800 1000 3 500 1200  0 0 0 0", &a), 0);
        assert_int_equal(autotune_blockstat_parse("  300 0 2400 1200 150 0 51200 3000 7 1500 5200 0 0 0 0", &b), 0);
        autotune_epoch_figures(&a, &b, 2000000, &e);
        assert_true(e.valid);
        assert_true(fabs(e.read_iops - 100) < 1e-9);
        assert_true(fabs(e.write_iops - 50) < 1e-9);
        assert_true(fabs(e.read_await_ms - 5) < 1e-9);  /* 1000 ms over 200 reads */
        assert_true(fabs(e.write_await_ms - 20) < 1e-9);
        assert_true(fabs(e.write_mbps - 38400.0 * 512 / 1e6 / 2) < 1e-9);
        assert_true(fabs(e.in_flight - 2) < 1e-9);      /* 4000 ms of queue time in 2000 ms */
        assert_true(fabs(e.util - 0.5) < 1e-9);
        /* counters going backwards: a new device under the same name */
        autotune_epoch_figures(&b, &a, 2000000, &e);
        assert_false(e.valid);
        assert_int_equal(autotune_blockstat_parse("1 2 3", &a), -EINVAL);
}

static void test_slots(void **state) {
        /* A B C, B C A, C A B: every candidate in every position once */
        unsigned pos[3][3] = {};
        for (size_t s = 0; s < 9; s++)
                pos[autotune_slot_candidate(s, 3)][s % 3]++;
        for (int c = 0; c < 3; c++)
                for (int p = 0; p < 3; p++)
                        assert_int_equal(pos[c][p], 1);
}

static void test_workload_change(void **state) {
        AutotuneSignature a, b;
        AutotuneEpochFigures mixed = { .read_iops = 700, .write_iops = 300, .read_mbps = 2.8, .write_mbps = 39 };
        AutotuneEpochFigures mixed2 = { .read_iops = 650, .write_iops = 320, .read_mbps = 2.7, .write_mbps = 41 };
        AutotuneEpochFigures seq = { .read_iops = 10, .write_iops = 400, .read_mbps = 0.04, .write_mbps = 400 };
        AutotuneEpochFigures idle = { .read_iops = 0.5 };

        autotune_signature(&mixed, &a);
        autotune_signature(&mixed2, &b);
        assert_false(autotune_workload_changed(&a, &b, 20));
        autotune_signature(&seq, &b);
        assert_true(autotune_workload_changed(&a, &b, 20));
        autotune_signature(&idle, &a);
        assert_true(autotune_workload_changed(&a, &b, 20));
        autotune_signature(&idle, &b);
        assert_false(autotune_workload_changed(&a, &b, 20)); /* idle is never a change */
}

/* Recorded on the model disk (tools/modeldisk --channels=16
 * --read-lat-us=100 --write-lat-us=200 --write-bw=10M --read-bw=200M, loop
 * --direct-io=on, fio 128 KiB random writes at depth 256 + 4 KiB random
 * reads at depth 4): read await (ms) and write MB/s of 2-second epochs,
 * interleaved, for mq-deadline with nr_requests 256 (current), 8 and 32. */
static void test_recorded(void **state) {
        static const struct {
                size_t cand;
                uint64_t usec;
                const char *a, *b;
        } rec[] = {
#include "autotune-recorded.inc"
        };
        AutotunePolicy p = policy();
        AutotuneSeries s[3] = {};
        AutotuneSummary sum[3];
        AutotuneDecision d;
        char why[128];

        for (size_t i = 0; i < sizeof rec / sizeof rec[0]; i++) {
                AutotuneBlockStat a, b;
                assert_int_equal(autotune_blockstat_parse(rec[i].a, &a), 0);
                assert_int_equal(autotune_blockstat_parse(rec[i].b, &b), 0);
                AutotuneSeries *t = &s[rec[i].cand];
                autotune_epoch_figures(&a, &b, rec[i].usec, &t->epochs[t->n]);
                assert_true(t->epochs[t->n].valid);
                t->n++;
        }
        autotune_decide(&p, s, 3, sum, &d);
        for (int c = 0; c < 3; c++)
                print_message("candidate %d: read await %.2f ms, write %.1f MB/s, "
                              "in flight %.0f, admissible %d, p %.4f\n",
                              c, sum[c].read_await_ms, sum[c].write_mbps, sum[c].in_flight, sum[c].admissible,
                              sum[c].p_vs_current);
        /* nr_requests 8 has the lowest latency but halves the writes */
        assert_false(sum[1].admissible);
        assert_true(sum[1].read_await_ms < sum[2].read_await_ms);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_int_equal(d.winner, 2);
        assert_true(d.confidence >= 0.99);

        /* Measured as the current setting after the change, the old one
         * would be ended by the guard rail at its first epoch. */
        AutotuneSeries base = { .n = 0 };
        for (size_t i = 0; i < s[2].n; i++)
                base.epochs[base.n++] = s[2].epochs[i];
        assert_true(autotune_guard(&p, &base, &s[0].epochs[0], why, sizeof why));

        /* The same recording replayed as a re-trial from the good setting
         * (32 first, then 8 and 256, in the trial's serpentine order): the
         * old setting leaves the race after one epoch, far worse than the
         * best so far, and the trial goes on to keep 32, where the guard
         * rail ended it. */
        AutotuneSeries src[3] = { s[2], s[1], s[0] }, r[3] = {};
        AutotuneCandidate cand[3] = { { "mq-deadline", 32 }, { "mq-deadline", 8 }, { "mq-deadline", 256 } };
        AutotuneDrop drops[3] = {};
        size_t next[3] = {};
        for (unsigned round = 0; round < 5; round++) {
                size_t order[3];
                size_t k = autotune_round_order(cand, 3, drops, round, order);
                for (size_t i = 0; i < k; i++) {
                        size_t c = order[i];
                        if (drops[c].dropped || next[c] >= src[c].n)
                                continue;
                        const AutotuneEpochFigures *e = &src[c].epochs[next[c]++];
                        if (autotune_far_worse(&p, r, 3, drops, c, e, why, sizeof why))
                                drops[c] = (AutotuneDrop) { .dropped = true, .by = -1,
                                                            .epochs = (unsigned) r[c].n + 1 };
                        r[c].epochs[r[c].n++] = *e;
                }
                autotune_race(&p, r, 3, drops);
        }
        assert_true(drops[2].dropped);
        assert_int_equal(r[2].n, 1);
        /* faster reads, but outside the write bound with confidence: it could never be chosen */
        assert_true(drops[1].dropped && strstr(drops[1].why, "outside the write bound"));
        autotune_decide_raced(&p, r, 3, drops, sum, &d);
        print_message("re-trial from 32: %s (%s)\n", autotune_verdict_to_string(d.verdict), d.reason);
        assert_int_equal(d.winner, 0);
        assert_true(d.verdict == AUTOTUNE_VERDICT_KEEP_BEST || d.verdict == AUTOTUNE_VERDICT_KEEP_NOISE);
}

/* The t distribution the race tests with. */
static void test_t_distribution(void **state) {
        assert_true(fabs(autotune_t_upper(2.0, 4) - 0.0581) < 0.0005);
        assert_true(fabs(autotune_t_upper(1.0, 1) - 0.25) < 1e-9);
        assert_true(fabs(autotune_t_upper(0, 7) - 0.5) < 1e-12);
        assert_true(fabs(autotune_t_upper(-2.0, 4) - (1 - 0.0581)) < 0.0005);
        assert_true(fabs(autotune_t_upper(4.501, 8) - 0.001) < 0.0001);
        assert_true(autotune_t_upper(50, 1.5) < 0.01);
}

/* 8 candidates: the current (10 ms), one clearly better (3 ms), six worse
 * (15-30 ms), 5 % noise, writes equal. */
static void fill_race(AutotuneSeries *s, size_t n, const double *mean, unsigned rounds, const AutotuneDrop *drops) {
        for (unsigned r = 0; r < rounds; r++)
                for (size_t c = 0; c < n; c++) {
                        if (drops && drops[c].dropped)
                                continue;
                        s[c].epochs[s[c].n++] = (AutotuneEpochFigures) {
                                .valid = true, .read_iops = 300, .write_iops = 80,
                                .read_await_ms = noisy(mean[c], 0.05), .write_mbps = noisy(90, 0.02),
                        };
                }
}

static void test_race(void **state) {
        AutotunePolicy p = policy();
        AutotuneSeries s[8] = {};
        AutotuneDrop drops[8] = {};
        AutotuneSummary sum[8];
        AutotuneDecision d;
        double mean[8] = { 10, 3, 15, 18, 20, 25, 28, 30 };

        rng_state = 7;
        /* one round: nothing to test yet (one epoch a side) */
        fill_race(s, 8, mean, 1, drops);
        assert_int_equal(autotune_race(&p, s, 8, drops), 0);
        /* two rounds: every worse one is beaten with confidence; the
         * current setting stays, whatever it is */
        fill_race(s, 8, mean, 1, drops);
        assert_int_equal(autotune_race(&p, s, 8, drops), 6);
        assert_false(drops[0].dropped);
        assert_false(drops[1].dropped);
        for (size_t c = 2; c < 8; c++) {
                assert_true(drops[c].dropped);
                assert_int_equal(drops[c].epochs, 2);
                assert_non_null(strstr(drops[c].why, "beaten by candidate"));
        }
        /* the rest of the trial only for the two left; the decision sees
         * the drops and changes to the better one */
        fill_race(s, 8, mean, 4, drops);
        assert_int_equal(s[1].n, 6);
        assert_int_equal(s[2].n, 2);
        autotune_decide_raced(&p, s, 8, drops, sum, &d);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_int_equal(d.winner, 1);
        assert_true(sum[2].dropped);
        /* without the drops the same series are "too few epochs" */
        autotune_decide(&p, s, 8, sum, &d);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_KEEP_NO_DATA);

        /* every challenger out: keep the current one as the best at once */
        memset(s, 0, sizeof s);
        memset(drops, 0, sizeof drops);
        double mean2[3] = { 3, 15, 20 };
        fill_race(s, 3, mean2, 2, drops);
        assert_int_equal(autotune_race(&p, s, 3, drops), 2);
        autotune_decide_raced(&p, s, 3, drops, sum, &d);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_KEEP_BEST);
        assert_int_equal(d.winner, 0);

        /* faster reads at half the writes do not knock out a candidate
         * that writes more: it could be the only one inside the bound */
        memset(s, 0, sizeof s);
        memset(drops, 0, sizeof drops);
        double mean3[2] = { 10, 2 };
        fill_race(s, 2, mean3, 3, drops);
        assert_int_equal(autotune_race(&p, s, 2, drops), 0); /* candidate 0 never leaves */
        for (size_t i = 0; i < s[1].n; i++)
                s[1].epochs[i].write_mbps = 40;
        AutotuneSeries s3[3] = { s[0], s[1], s[0] }; /* 2: writes 90, reads 10 ms */
        p.min_improvement_pct = 0; /* 2 ties with 0: not dropped for being no better here */
        assert_int_equal(autotune_race(&p, s3, 3, drops), 1);
        assert_false(drops[2].dropped);
        /* 1 itself leaves for its writes, never for its reads */
        assert_true(drops[1].dropped && strstr(drops[1].why, "outside the write bound"));
}

/* Equal candidates with 30 % noise: how often the race drops one over
 * 6 rounds of looks. The correction keeps it under 1 - confidence over
 * the whole trial for each candidate (here far under: Bonferroni is
 * conservative). */
static void test_race_no_false_drop(void **state) {
        AutotunePolicy p = policy();
        unsigned trials_dropping = 0, trials = 300;

        for (unsigned seed = 1; seed <= trials; seed++) {
                AutotuneSeries s[4] = {};
                AutotuneDrop drops[4] = {};
                double mean[4] = { 10, 10, 10, 10 };
                size_t total = 0;
                rng_state = seed;
                for (unsigned r = 0; r < p.rounds; r++) {
                        for (size_t c = 0; c < 4; c++)
                                if (!drops[c].dropped)
                                        s[c].epochs[s[c].n++] = (AutotuneEpochFigures) {
                                                .valid = true, .read_iops = 300, .write_iops = 80,
                                                .read_await_ms = noisy(mean[c], 0.3), .write_mbps = noisy(90, 0.1),
                                        };
                        (void) autotune_race(&p, s, 4, drops);
                }
                /* Leaving as no better than the current setting by the
                 * minimum is right among equals: only a drop for being
                 * beaten or outside the bound is a false one. */
                for (size_t c = 1; c < 4; c++)
                        total += drops[c].dropped && !strstr(drops[c].why, "no better than the current setting");
                trials_dropping += total > 0;
        }
        print_message("trials of 4 equal candidates with a drop: %u of %u\n", trials_dropping, trials);
        assert_true(trials_dropping <= trials * 5 / 100);
}

/* One raced trial of 4 candidates (read await mean[c] ms, 20 % noise)
 * over p.rounds rounds, stopping when the race settles; *ret_rounds:
 * the rounds it took. */
static AutotuneDecision raced_trial(const AutotunePolicy *p, const double *mean, unsigned *ret_rounds) {
        AutotuneSeries s[4] = {};
        AutotuneDrop drops[4] = {};
        AutotuneSummary sum[4];
        AutotuneDecision d;
        unsigned r;

        for (r = 0; r < p->rounds; r++) {
                for (size_t c = 0; c < 4; c++)
                        if (!drops[c].dropped)
                                s[c].epochs[s[c].n++] = (AutotuneEpochFigures) {
                                        .valid = true, .read_iops = 300, .write_iops = 80,
                                        .read_await_ms = noisy(mean[c], 0.2), .write_mbps = noisy(90, 0.05),
                                };
                (void) autotune_race(p, s, 4, drops);
                if (autotune_race_settled(drops, 4)) {
                        r++;
                        break;
                }
        }
        autotune_decide_raced(p, s, 4, drops, sum, &d);
        *ret_rounds = r;
        return d;
}

/* A clear winner settles the race in a few rounds, and the decision is
 * that change (at the race's own share of the rate); among equal
 * candidates the early stop adds few false changes. */
static void test_race_settles(void **state) {
        AutotunePolicy p = policy();
        unsigned rounds, changes = 0, trials = 300, total = 0;
        double clear[4] = { 40, 8, 30, 35 }, equal[4] = { 10, 10, 10, 10 };

        rng_state = 11;
        AutotuneDecision d = raced_trial(&p, clear, &rounds);
        print_message("clear winner: %s after %u of %u rounds (%s)\n", autotune_verdict_to_string(d.verdict), rounds,
                      p.rounds, d.reason);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_int_equal(d.winner, 1);
        assert_true(rounds < p.rounds);
        assert_non_null(strstr(d.reason, "race settled"));
        for (unsigned seed = 1; seed <= trials; seed++) {
                rng_state = seed * 104729;
                d = raced_trial(&p, equal, &rounds);
                changes += d.verdict == AUTOTUNE_VERDICT_CHANGE;
                total += rounds;
        }
        print_message("equal candidates: %u changes in %u raced trials (%.1f rounds on average)\n", changes, trials,
                      (double) total / trials);
        assert_true(changes <= trials * 5 / 100);
}

/* Settings that tie on a quiet disk (2 % noise): every challenger leaves
 * as no better than the current setting by AutoMinImprovement=, and the
 * trial ends early keeping it; one that is 30 % better is never dropped
 * that way, and wins. */
static void test_race_equivalent(void **state) {
        AutotunePolicy p = policy();
        AutotuneSeries s[4] = {};
        AutotuneDrop drops[4] = {};
        AutotuneSummary sum[4];
        AutotuneDecision d;
        unsigned rounds;
        double mean[4] = { 10, 10.1, 9.9, 10 };

        rng_state = 5;
        for (rounds = 0; rounds < p.rounds; rounds++) {
                for (size_t c = 0; c < 4; c++)
                        if (!drops[c].dropped)
                                s[c].epochs[s[c].n++] = (AutotuneEpochFigures) {
                                        .valid = true, .read_iops = 300, .write_iops = 80,
                                        .read_await_ms = noisy(mean[c], 0.02), .write_mbps = noisy(90, 0.02),
                                };
                (void) autotune_race(&p, s, 4, drops);
                if (drops[1].dropped && drops[2].dropped && drops[3].dropped)
                        break;
        }
        print_message("ties: every challenger left after %u of %u rounds (%s)\n", rounds + 1, p.rounds, drops[2].why);
        assert_true(rounds + 1 < p.rounds);
        assert_non_null(strstr(drops[1].why, "no better than the current setting"));
        autotune_decide_raced(&p, s, 4, drops, sum, &d);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_KEEP_BEST);

        double better[4] = { 10, 7, 10, 10 };
        AutotuneDecision d2 = raced_trial(&p, better, &rounds);
        print_message("30 %% better: %s after %u rounds (%s)\n", autotune_verdict_to_string(d2.verdict), rounds,
                      d2.reason);
        assert_int_equal(d2.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_int_equal(d2.winner, 1);
}

/* A search decides once per phase, and any phase may change the setting:
 * of trials of 4 phases over 4 equal candidates each, at most about
 * 1 - confidence may change anything (AutotunePolicy.looks), where one
 * test per phase at the full rate would change in up to 4 times as many.
 * The hysteresis is off and the confidence low, so that the rate shows. */
static unsigned search_changes(unsigned looks, unsigned trials) {
        AutotunePolicy p = policy();
        unsigned changed = 0;

        p.confidence_pct = 80;
        p.min_improvement_pct = 0;
        p.looks = looks;
        for (unsigned seed = 1; seed <= trials; seed++) {
                bool any = false;
                rng_state = seed * 7919;
                for (unsigned phase = 0; phase < 4; phase++) {
                        AutotuneSeries s[4] = {};
                        AutotuneDrop drops[4] = {};
                        AutotuneSummary sum[4];
                        AutotuneDecision d;
                        for (unsigned r = 0; r < p.rounds; r++) {
                                for (size_t c = 0; c < 4; c++)
                                        if (!drops[c].dropped)
                                                s[c].epochs[s[c].n++] = (AutotuneEpochFigures) {
                                                        .valid = true, .read_iops = 300, .write_iops = 80,
                                                        .read_await_ms = noisy(10, 0.3), .write_mbps = noisy(90, 0.1),
                                                };
                                (void) autotune_race(&p, s, 4, drops);
                        }
                        autotune_decide_raced(&p, s, 4, drops, sum, &d);
                        any = any || d.verdict == AUTOTUNE_VERDICT_CHANGE;
                }
                changed += any;
        }
        return changed;
}

static void test_search_error_rate(void **state) {
        unsigned trials = 300;
        unsigned corrected = search_changes(4, trials), uncorrected = search_changes(1, trials);

        print_message("searches of 4 phases of 4 equal candidates that changed the setting: %u of %u (looks=4), "
                      "%u (looks=1)\n", corrected, trials, uncorrected);
        assert_true(corrected <= trials * 20 / 100);
        /* and it is what keeps it there: uncorrected, the phases add up */
        assert_true(uncorrected * 2 > corrected * 3);
}

/* The price: a candidate far worse than the best so far leaves after one
 * epoch, compared with the best so far, not the current setting. */
static void test_far_worse(void **state) {
        AutotunePolicy p = policy();
        AutotuneSeries s[3] = {};
        AutotuneDrop drops[3] = {};
        char why[256];
        AutotuneEpochFigures e = { .valid = true, .read_iops = 300, .write_mbps = 90 };

        /* the current setting reads in 3.19 ms, candidate 1 in 2 ms */
        s[0].epochs[s[0].n++] = (AutotuneEpochFigures) { .valid = true, .read_iops = 300, .read_await_ms = 3.19,
                                                         .write_mbps = 90 };
        s[1].epochs[s[1].n++] = (AutotuneEpochFigures) { .valid = true, .read_iops = 300, .read_await_ms = 2.0,
                                                         .write_mbps = 90 };
        e.read_await_ms = 7.9;
        assert_false(autotune_far_worse(&p, s, 3, drops, 2, &e, why, sizeof why)); /* < 4 x 2 */
        e.read_await_ms = 8.1;
        assert_true(autotune_far_worse(&p, s, 3, drops, 2, &e, why, sizeof why)); /* > 4 x 2, < 4 x 3.19 */
        assert_non_null(strstr(why, "best so far"));
        assert_non_null(strstr(why, "candidate 1"));
        /* the current setting itself never leaves */
        assert_false(autotune_far_worse(&p, s, 3, drops, 0, &e, why, sizeof why));
        /* a dropped candidate is no reference */
        drops[1].dropped = true;
        assert_false(autotune_far_worse(&p, s, 3, drops, 2, &e, why, sizeof why));
        drops[1].dropped = false;
        /* nor one outside the write bound so far: candidate 1 writes 30 */
        s[1].epochs[0].write_mbps = 30;
        assert_false(autotune_far_worse(&p, s, 3, drops, 2, &e, why, sizeof why));
        /* the floor: 0.1 ms against 3.9 is noise-level */
        s[1].epochs[0] = (AutotuneEpochFigures) { .valid = true, .read_iops = 300, .read_await_ms = 0.1,
                                                  .write_mbps = 90 };
        s[0].epochs[0].read_await_ms = 0.1;
        e.read_await_ms = 3.9;
        assert_false(autotune_far_worse(&p, s, 3, drops, 2, &e, why, sizeof why));
        /* A trial that ranks by the probes' p99 judges by it: the same
         * mean await, a p99 26 times the best so far's (the read-mostly
         * bench: a depth of 4 starves the probes' reads). */
        s[0].epochs[0] = (AutotuneEpochFigures) { .valid = true, .read_iops = 300, .read_await_ms = 0.27,
                                                  .read_p99_ms = 0.58, .write_mbps = 90 };
        s[1].epochs[0] = s[0].epochs[0];
        e = (AutotuneEpochFigures) { .valid = true, .read_iops = 300, .read_await_ms = 0.27, .read_p99_ms = 15.5,
                                     .write_mbps = 80 };
        assert_true(autotune_far_worse(&p, s, 3, drops, 2, &e, why, sizeof why));
        assert_non_null(strstr(why, "read p99 15.50 ms"));
        e.read_p99_ms = 3.9; /* under 4 x the 1 ms floor */
        assert_false(autotune_far_worse(&p, s, 3, drops, 2, &e, why, sizeof why));
}

/* The look during an epoch: the limit is the far-worse test's own, and a
 * count of probes above it settles the epoch's p99 only when no probes
 * still to come could bring it under. */
static void test_far_worse_peek(void **state) {
        AutotunePolicy p = policy();
        AutotuneSeries s[3] = {};
        AutotuneDrop drops[3] = {};
        char why[256];
        int ref = -1;
        double base = 0;

        /* no epoch yet: no limit (nothing to compare with) */
        assert_true(autotune_far_worse_limit(&p, s, 3, drops, 2, &ref, &base) == 0);
        s[0].epochs[s[0].n++] = (AutotuneEpochFigures) { .valid = true, .read_iops = 300, .read_await_ms = 0.27,
                                                 .read_p99_ms = 0.85, .write_mbps = 78 };
        s[1].epochs[s[1].n++] = (AutotuneEpochFigures) { .valid = true, .read_iops = 300, .read_await_ms = 0.27,
                                                 .read_p99_ms = 2.5, .write_mbps = 78 };
        /* the best so far is 0 (0.85 ms, floored to 1): 4 ms */
        assert_true(fabs(autotune_far_worse_limit(&p, s, 3, drops, 2, &ref, &base) - 4.0) < 1e-9);
        assert_int_equal(ref, 0);
        assert_true(fabs(base - 1.0) < 1e-9);
        /* and it is the line autotune_far_worse() draws at the epoch's end */
        AutotuneEpochFigures e = { .valid = true, .read_iops = 300, .read_await_ms = 0.27, .read_p99_ms = 4.0,
                                   .write_mbps = 78 };
        assert_false(autotune_far_worse(&p, s, 3, drops, 2, &e, why, sizeof why));
        e.read_p99_ms = 4.01;
        assert_true(autotune_far_worse(&p, s, 3, drops, 2, &e, why, sizeof why));
        /* never for the current setting, nor for sequential reads, nor
         * where an epoch so far has no p99 (the test is by mean await) */
        assert_true(autotune_far_worse_limit(&p, s, 3, drops, 0, NULL, NULL) == 0);
        s[1].epochs[0].read_p99_ms = 0;
        assert_true(autotune_far_worse_limit(&p, s, 3, drops, 2, NULL, NULL) == 0);
        s[1].epochs[0].read_p99_ms = 2.5;
        p.objective = AUTOTUNE_OBJECTIVE_SEQ_READ;
        assert_true(autotune_far_worse_limit(&p, s, 3, drops, 2, NULL, NULL) == 0);

        /* At most 101 probes (2 s, one per 20 ms): their p99 is the 100th
         * smallest, so 2 above the limit settle it, 1 does not. */
        assert_false(autotune_p99_above_certain(1, 101));
        assert_true(autotune_p99_above_certain(2, 101));
        assert_false(autotune_p99_above_certain(1, 100));
        assert_true(autotune_p99_above_certain(2, 100));
        /* 201: the 199th of 201 leaves 2 above it, so 3 are needed */
        assert_false(autotune_p99_above_certain(2, 201));
        assert_true(autotune_p99_above_certain(3, 201));
        assert_false(autotune_p99_above_certain(5, 0));
        /* Checked against the percentile itself: for every n up to n_max,
         * `above` values over the limit out of n put the ceil(0.99 n)-th
         * smallest over it whenever the rule says so. */
        for (uint64_t n_max = 1; n_max <= 450; n_max++)
                for (uint64_t above = 0; above <= 6; above++) {
                        if (!autotune_p99_above_certain(above, n_max))
                                continue;
                        for (uint64_t n = above; n <= n_max; n++) {
                                uint64_t rank = (uint64_t) ceil(0.99 * (double) n - 1e-9);
                                assert_true(n - above < rank); /* the rank-th smallest is one of those above */
                        }
                }
}

/* A re-trial from a good setting (the issue's case: the current setting
 * reads in 3.19 ms, the first candidate measured in 15.14): the old guard
 * rail ends the whole trial; the race drops that candidate and goes on to
 * find the better one that drift created. */
static void test_retrial_finds_drift(void **state) {
        AutotunePolicy p = policy();
        AutotuneSeries s[4] = {};
        AutotuneDrop drops[4] = {};
        AutotuneSummary sum[4];
        AutotuneDecision d;
        char why[256];
        double mean[4] = { 3.19, 15.14, 1.6, 4.0 };
        unsigned epochs = 0;

        rng_state = 11;
        for (unsigned r = 0; r < p.rounds; r++) {
                size_t order[4];
                size_t k = autotune_round_order((AutotuneCandidate[4]) { { "kyber" }, { "none" }, { "kyber" },
                                                                         { "bfq" } },
                                                4, drops, r, order);
                for (size_t i = 0; i < k; i++) {
                        size_t c = order[i];
                        if (drops[c].dropped)
                                continue;
                        AutotuneEpochFigures e = { .valid = true, .read_iops = 300, .write_iops = 80,
                                           .read_await_ms = noisy(mean[c], 0.05), .write_mbps = noisy(90, 0.02) };
                        epochs++;
                        if (c == 1 && r == 0)
                                assert_true(autotune_guard(&p, &s[0], &e, why, sizeof why) || s[0].n == 0);
                        if (autotune_far_worse(&p, s, 4, drops, c, &e, why, sizeof why)) {
                                drops[c] = (AutotuneDrop) { .dropped = true, .by = -1,
                                                            .epochs = (unsigned) s[c].n + 1 };
                                snprintf(drops[c].why, sizeof drops[c].why, "%.200s", why);
                        }
                        s[c].epochs[s[c].n++] = e;
                }
                autotune_race(&p, s, 4, drops);
        }
        assert_true(drops[1].dropped);
        assert_int_equal(s[1].n, 1); /* one epoch of the bad candidate: the price */
        autotune_decide_raced(&p, s, 4, drops, sum, &d);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_int_equal(d.winner, 2);
        assert_true(epochs < 4 * p.rounds);
}

static void test_round_order(void **state) {
        AutotuneCandidate c[6] = { { "kyber" }, { "none" }, { "mq-deadline" }, { "kyber" }, { "mq-deadline" },
                                   { "none" } };
        AutotuneDrop drops[6] = {};
        size_t o0[6], o1[6];
        char from[32] = "kyber";

        size_t k0 = autotune_round_order(c, 6, drops, 0, o0), k1 = autotune_round_order(c, 6, drops, 1, o1);
        assert_int_equal(k0, 6);
        assert_int_equal(k1, 6);
        /* round 0 starts with the current setting; grouped by scheduler */
        assert_int_equal(o0[0], 0);
        assert_int_equal(o0[1], 3);
        assert_int_equal(autotune_order_switches(c, o0, k0, from), 2);
        /* round 1 is round 0 backwards: it starts where round 0 ended */
        for (size_t i = 0; i < 6; i++)
                assert_int_equal(o1[i], o0[5 - i]);
        assert_int_equal(autotune_order_switches(c, o1, k1, c[o0[5]].scheduler), 2);
        /* 6 rounds: 12 switches where the rotated order makes 6 a round */
        unsigned total = 0, rotated = 0;
        for (unsigned r = 0; r < 6; r++) {
                size_t o[6];
                size_t k = autotune_round_order(c, 6, drops, r, o);
                total += autotune_order_switches(c, o, k, from);
                snprintf(from, sizeof from, "%s", c[o[k - 1]].scheduler);
        }
        const char *prev = "kyber";
        for (size_t sl = 0; sl < 36; sl++) {
                const char *s = c[autotune_slot_candidate(sl, 6)].scheduler;
                rotated += !streq(s, prev);
                prev = s;
        }
        print_message("switches over 6 rounds: %u grouped, %u rotated\n", total, rotated);
        assert_int_equal(total, 12);
        assert_true(rotated > total);
        /* dropped candidates are passed over */
        drops[1].dropped = drops[5].dropped = true;
        assert_int_equal(autotune_round_order(c, 6, drops, 0, o0), 4);
        assert_int_equal(autotune_order_switches(c, o0, 4, "kyber"), 1);

        /* within a group: the current setting, then the deepest queue
         * (unset: the scheduler's default, deep), the shallowest last;
         * backwards in the next round */
        AutotuneCandidate d[5] = { { "mq-deadline", .nr_requests = 32, .baseline = true }, { "mq-deadline", 4 },
                                   { "mq-deadline", 256 }, { "mq-deadline", 0 }, { "mq-deadline", 64 } };
        AutotuneDrop nodrops[5] = {};
        size_t want[5] = { 0, 3, 2, 4, 1 };
        assert_int_equal(autotune_round_order(d, 5, nodrops, 0, o0), 5);
        assert_int_equal(autotune_round_order(d, 5, nodrops, 1, o1), 5);
        for (size_t i = 0; i < 5; i++) {
                assert_int_equal(o0[i], want[i]);
                assert_int_equal(o1[i], want[4 - i]);
        }
}

/* An epoch measures once the requests in flight at the apply have left. */
static void test_drained(void **state) {
        AutotuneBlockStat at = { .rd_ios = 1000, .wr_ios = 500, .in_flight = 200 }, now = at;

        now.in_flight = 180;
        now.rd_ios += 100;
        now.wr_ios += 50; /* 150 of 200 done */
        assert_false(autotune_drained(&at, &now));
        now.wr_ios += 50; /* 200 */
        assert_true(autotune_drained(&at, &now));
        /* an empty queue is drained whatever came before */
        now = at;
        now.in_flight = 0;
        assert_true(autotune_drained(&at, &now));
        /* nothing in flight at the apply: at once */
        at.in_flight = 0;
        now = at;
        now.in_flight = 5;
        assert_true(autotune_drained(&at, &now));
}

/* The issue's pgbench case: SELECTs beside a bulk writer, tolerance 25 %;
 * the trial measured the chosen setting at 946 MB/s against the best's
 * 1,178; after the change it wrote 697. */
static void test_promise(void **state) {
        AutotunePolicy p = policy();
        AutotuneSeries s[3] = {};
        AutotuneSummary sum[3];
        AutotuneDecision d;
        AutotunePromise pr;
        char why[256];
        double rd[3] = { 80, 30, 14 }, wr[3] = { 1080, 1178, 946 };

        p.write_tolerance_pct = 25;
        rng_state = 5;
        for (unsigned r = 0; r < 6; r++)
                for (size_t c = 0; c < 3; c++)
                        s[c].epochs[s[c].n++] = (AutotuneEpochFigures) {
                                .valid = true, .read_iops = 900, .write_iops = 1000,
                                .read_await_ms = noisy(rd[c], 0.05), .write_mbps = noisy(wr[c], 0.02),
                                .read_mbps = 3.6, .in_flight = 40,
                        };
        autotune_decide(&p, s, 3, sum, &d);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_int_equal(d.winner, 2);
        autotune_promise_make(&p, s, sum, 3, d.winner, &pr);
        assert_true(fabs(pr.write_floor_mbps - 0.75 * sum[1].write_mbps) < 1e-9);

        AutotuneEpochFigures w[10];
        for (int i = 0; i < 10; i++)
                w[i] = (AutotuneEpochFigures) { .valid = true, .read_iops = 900, .write_iops = 1000 * 697.0 / 946,
                                        .read_await_ms = 15, .write_mbps = 697, .read_mbps = 3.6, .in_flight = 40 };
        /* under a minute of the workload: no judgement yet */
        assert_int_equal(autotune_promise_check(&p, &pr, w, 5, why, sizeof why), AUTOTUNE_PROMISE_WATCHING);
        assert_int_equal(autotune_promise_check(&p, &pr, w, 10, why, sizeof why), AUTOTUNE_PROMISE_BROKEN);
        assert_non_null(strstr(why, "697.0 MB/s"));
        /* the fallback: the admissible candidate with the most margin */
        assert_int_equal(autotune_fallback(&p, sum, 3, d.winner), 1);
        /* writing as promised: holds */
        for (int i = 0; i < 10; i++)
                w[i].write_mbps = 930;
        assert_int_equal(autotune_promise_check(&p, &pr, w, 10, why, sizeof why), AUTOTUNE_PROMISE_HOLDS);
        /* another workload (reads only) promised nothing */
        for (int i = 0; i < 10; i++)
                w[i] = (AutotuneEpochFigures) { .valid = true, .read_iops = 3000, .read_await_ms = 2, .read_mbps = 12,
                                        .in_flight = 8 };
        assert_int_equal(autotune_promise_check(&p, &pr, w, 10, why, sizeof why), AUTOTUNE_PROMISE_WATCHING);
        /* nothing else admissible: no fallback */
        sum[0].admissible = sum[1].admissible = false;
        assert_int_equal(autotune_fallback(&p, sum, 3, d.winner), -1);
}

/* A trial run the way the daemon's runner runs it: rounds in
 * autotune_round_order(), each epoch judged by autotune_far_worse() as it
 * ends (a far-worse candidate leaves at once), autotune_race() after each
 * round, the trial stopping when the race settles, then
 * autotune_decide_raced(). The epoch of candidate c at its j-th epoch is
 * made by epoch(c, j). */
static void runner_trial(const AutotunePolicy *p, const AutotuneCandidate *cand, size_t n,
                         AutotuneEpochFigures (*epoch)(size_t c, size_t j), AutotuneSeries *s, AutotuneDrop *drops,
                         AutotuneSummary *sum, AutotuneDecision *d) {
        memset(s, 0, sizeof(AutotuneSeries) * n);
        memset(drops, 0, sizeof(AutotuneDrop) * n);
        for (unsigned r = 0; r < p->rounds; r++) {
                size_t order[AUTOTUNE_MAX_CANDIDATES];
                size_t k = autotune_round_order(cand, n, drops, r, order);
                for (size_t i = 0; i < k; i++) {
                        size_t c = order[i];
                        char why[256];
                        AutotuneEpochFigures e = epoch(c, s[c].n);
                        bool far = autotune_far_worse(p, s, n, drops, c, &e, why, sizeof why);
                        s[c].epochs[s[c].n++] = e;
                        if (far)
                                drops[c] = (AutotuneDrop) { .dropped = true, .by = -1, .epochs = (unsigned) s[c].n };
                }
                (void) autotune_race(p, s, n, drops);
                if (autotune_race_settled(drops, n))
                        break;
        }
        autotune_decide_raced(p, s, n, drops, sum, d);
}

/* Issue 32's trial (pgbench's SELECTs beside a bulk writer on ext4 on a
 * model disk, AutoWriteTolerance=25%): bfq/64 reads best and writes 800
 * MB/s on average; mq-deadline/256 writes 1,403 MB/s and leaves in its
 * first epoch for its reads; from mq-deadline/64 (1,081 MB/s). Here bfq's
 * writes come in bursts (1,150, 1,100, 150: 800 on average), so that the
 * median of a few epochs says 1,100, inside 0.75 x 1,403; a decision by
 * the median, or a bound against the best of the candidates left in the
 * race only, chose bfq/64. */
static double issue32_bfq_writes[3] = { 1150, 1100, 150 };

static AutotuneEpochFigures issue32_epoch(size_t c, size_t j) {
        static const double rd[4] = { 80, 11, 400, 120 }, wr[4] = { 1081, 0, 1403, 1090 };
        double w = c == 1 ? issue32_bfq_writes[j % 3] : wr[c];
        return (AutotuneEpochFigures) {
                .valid = true, .read_iops = 900, .write_iops = noisy(w, 0.03),
                .read_await_ms = noisy(rd[c], 0.05), .write_mbps = noisy(w, 0.03), .read_mbps = 3.6, .in_flight = 60,
        };
}

static void test_write_bound_every_candidate(void **state) {
        AutotunePolicy p = policy();
        AutotuneCandidate cand[4] = {
                { .scheduler = "mq-deadline", .nr_requests = 64, .wbt_lat_usec = AUTOTUNE_WBT_UNSET, .baseline = true },
                { .scheduler = "bfq", .nr_requests = 64, .wbt_lat_usec = AUTOTUNE_WBT_UNSET },
                { .scheduler = "mq-deadline", .nr_requests = 256, .wbt_lat_usec = AUTOTUNE_WBT_UNSET },
                { .scheduler = "none", .nr_requests = 64, .wbt_lat_usec = AUTOTUNE_WBT_UNSET },
        };
        AutotuneSeries s[4];
        AutotuneDrop drops[4];
        AutotuneSummary sum[4];
        AutotuneDecision d;
        AutotunePromise pr;

        p.write_tolerance_pct = 25;
        rng_state = 32;
        runner_trial(&p, cand, 4, issue32_epoch, s, drops, sum, &d);
        print_message("bursty bfq/64 (median %.0f, lower bound %.0f MB/s; mq-deadline/256 %.0f MB/s in %zu epoch, "
                      "dropped: %s): %s, winner %d (%s)\n", sum[1].write_mbps, sum[1].write_low_mbps,
                      sum[2].write_mbps, s[2].n, drops[2].why[0] ? drops[2].why : "far worse",
                      autotune_verdict_to_string(d.verdict), d.winner, d.reason);
        assert_true(drops[2].dropped && s[2].n == 1);
        assert_true(sum[1].write_mbps >= 0.75 * 1403); /* its median alone would admit it */
        assert_false(sum[1].admissible);
        assert_int_not_equal(d.winner, 1);
        assert_true(sum[d.winner].write_mbps >= 0.75 * sum[2].write_mbps);

        /* bfq/64 writing a steady 1,100 MB/s is inside the bound: the
         * change, and its promise is against the best writer measured,
         * the dropped mq-deadline/256, not the best of those left */
        issue32_bfq_writes[2] = 1100;
        runner_trial(&p, cand, 4, issue32_epoch, s, drops, sum, &d);
        issue32_bfq_writes[2] = 150;
        print_message("steady bfq/64 (lower bound %.0f MB/s): %s, winner %d (%s)\n", sum[1].write_low_mbps,
                      autotune_verdict_to_string(d.verdict), d.winner, d.reason);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_int_equal(d.winner, 1);
        autotune_promise_make(&p, s, sum, 4, d.winner, &pr);
        assert_true(fabs(pr.write_floor_mbps - 0.75 * sum[2].write_mbps) < 1e-9);

        /* the far-worse test's reference must be inside the bound of
         * every writer measured: with mq-deadline/256 (1,403) gone, a
         * reader writing 900 is no reference */
        AutotuneSeries s2[3] = {};
        AutotuneDrop dr2[3] = {};
        char why[256];
        double base;
        for (unsigned i = 0; i < 3; i++) {
                s2[0].epochs[s2[0].n++] = (AutotuneEpochFigures) { .valid = true, .read_iops = 900, .read_await_ms = 10,
                                                           .write_mbps = 900 };
                s2[1].epochs[s2[1].n++] = (AutotuneEpochFigures) { .valid = true, .read_iops = 900,
                                                                   .read_await_ms = 100, .write_mbps = 1403 };
        }
        dr2[1].dropped = true;
        AutotuneEpochFigures e = { .valid = true, .read_iops = 900, .read_await_ms = 50, .write_mbps = 1300 };
        assert_false(autotune_far_worse(&p, s2, 3, dr2, 2, &e, why, sizeof why));
        int ref = -2;
        assert_true(autotune_far_worse_limit(&p, s2, 3, dr2, 2, &ref, &base) == 0);

        /* a search: the scheduler phase measured mq-deadline/256 at 1,403
         * MB/s; the depth phase races bfq's depths only, around 800-1,100:
         * bfq/64 (steady 1,000, reads best) is outside the bound of every
         * writer measured, whatever this phase's best */
        AutotuneSeries s3[3] = {};
        AutotuneSummary sum3[3];
        double rd3[3] = { 80, 11, 60 }, wr3[3] = { 1090, 1000, 1100 };
        for (unsigned r = 0; r < 6; r++)
                for (size_t c = 0; c < 3; c++)
                        s3[c].epochs[s3[c].n++] = (AutotuneEpochFigures) { .valid = true, .read_iops = 900,
                                                                   .write_iops = 1000,
                                                                   .read_await_ms = noisy(rd3[c], 0.05),
                                                                   .write_mbps = noisy(wr3[c], 0.02) };
        autotune_decide(&p, s3, 3, sum3, &d);
        assert_int_equal(d.winner, 1); /* this phase alone: inside 0.75 x 1,100 */
        p.write_seen_mbps = 1403;
        autotune_decide(&p, s3, 3, sum3, &d);
        print_message("a search's depth phase after a 1,403 MB/s writer: %s, winner %d (%s)\n",
                      autotune_verdict_to_string(d.verdict), d.winner, d.reason);
        assert_int_not_equal(d.winner, 1);
        assert_false(sum3[1].admissible);
        autotune_promise_make(&p, s3, sum3, 3, 2, &pr);
        assert_true(fabs(pr.write_floor_mbps - 0.75 * 1403) < 1e-9);
}

static void test_signature_memory(void **state) {
        AutotuneSignature oltp = { .read_share = 0.7, .avg_kb = 8, .iops = 5000, .depth = 24 },
                      oltp2 = { .read_share = 0.66, .avg_kb = 9, .iops = 3200, .depth = 60 },
                      backup = { .read_share = 0.05, .avg_kb = 1024, .iops = 300, .depth = 64 },
                      idle = { .read_share = 0.7, .avg_kb = 8, .iops = 5, .depth = 0.1 };
        AutotuneMemory m[AUTOTUNE_MEMORY_MAX];
        size_t n = 0;
        AutotuneCandidate kyber = { .scheduler = "kyber", .nr_requests = 64, .wbt_lat_usec = AUTOTUNE_WBT_UNSET },
                      bfq = { .scheduler = "bfq", .wbt_lat_usec = 0, .baseline = true };

        /* the scales: share by 0.25, size by a factor 2, rate and depth by 4 */
        assert_true(autotune_signature_distance(&oltp, &oltp) == 0);
        assert_true(autotune_signature_distance(&oltp, &oltp2) <= AUTOTUNE_MEMORY_MATCH);
        assert_true(autotune_signature_distance(&oltp, &backup) > 4);
        AutotuneSignature x = oltp;
        x.read_share = 0.7 - 0.26;
        assert_true(autotune_signature_distance(&oltp, &x) > 1);
        x = oltp;
        x.avg_kb = 17;
        assert_true(autotune_signature_distance(&oltp, &x) > 1);
        x = oltp;
        x.iops = 5000 * 3.9;
        assert_true(autotune_signature_distance(&oltp, &x) < 1);
        x.iops = 5000 * 4.1;
        assert_true(autotune_signature_distance(&oltp, &x) > 1);
        x = oltp;
        x.depth = 0; /* depth is counted + 1: an idle queue is not infinitely far */
        assert_true(isfinite(autotune_signature_distance(&oltp, &x)));

        autotune_memory_record(m, &n, &oltp, &kyber, 1000);
        autotune_memory_record(m, &n, &backup, &bfq, 2000);
        assert_int_equal(n, 2);
        assert_false(m[1].cand.baseline);
        assert_int_equal(autotune_memory_find(m, n, &oltp2, 20), 0);
        assert_int_equal(autotune_memory_find(m, n, &backup, 20), 1);
        assert_int_equal(autotune_memory_find(m, n, &idle, 20), -1);
        /* the same workload again replaces its entry */
        autotune_memory_record(m, &n, &oltp2, &bfq, 3000);
        assert_int_equal(n, 2);
        assert_string_equal(m[0].cand.scheduler, "bfq");
        /* full: the oldest makes room */
        for (int i = 0; i < AUTOTUNE_MEMORY_MAX; i++) {
                AutotuneSignature s = { .read_share = 0.5, .avg_kb = 4 << (2 * i), .iops = 100, .depth = 1 };
                autotune_memory_record(m, &n, &s, &kyber, 10000 + i);
        }
        assert_int_equal(n, AUTOTUNE_MEMORY_MAX);
        assert_int_equal(autotune_memory_find(m, n, &backup, 20), -1);

        /* the state file's lines */
        char line[512], id[256];
        uint64_t seq;
        AutotuneMemory e;
        AutotuneMemory w = { .sig = backup, .cand = bfq, .realtime_usec = 1790000000000000ULL };
        assert_int_equal(autotune_memory_format("loop:/var/tmp/a b.img", 42, &w, line, sizeof line), 0);
        assert_int_equal(autotune_memory_parse(line, id, sizeof id, &seq, &e), 0);
        assert_string_equal(id, "loop:/var/tmp/a b.img");
        assert_int_equal(seq, 42);
        assert_string_equal(e.cand.scheduler, "bfq");
        assert_int_equal(e.cand.wbt_lat_usec, 0);
        assert_true(fabs(e.sig.avg_kb - 1024) < 1e-9);
        w.cand = kyber;
        assert_int_equal(autotune_memory_format("serial:X", 0, &w, line, sizeof line), 0);
        assert_int_equal(autotune_memory_parse(line, id, sizeof id, &seq, &e), 0);
        assert_int_equal(e.cand.wbt_lat_usec, AUTOTUNE_WBT_UNSET);
        assert_int_equal(e.cand.nr_requests, 64);
        assert_int_equal(autotune_memory_format("a\tb", 0, &w, line, sizeof line), -EINVAL);
        assert_int_equal(autotune_memory_parse("serial:X\t1\t2", id, sizeof id, &seq, &e), -EINVAL);
        assert_int_equal(autotune_memory_parse("serial:X\t0\t1.5\t8\t100\t1\t0\tkyber\t0\t0", id, sizeof id, &seq, &e),
                         -EINVAL); /* read share above 1 */
        assert_int_equal(autotune_memory_parse("serial:X\t0\t0.5\t8\t100\t1\t0\tkyber\t0\t0 junk", id, sizeof id, &seq,
                                               &e), -EINVAL);
}


/* ---- searching by families (AutoKnobs=) ---- */

static AutotunePolicy search_policy(unsigned knobs) {
        AutotunePolicy p = policy();
        p.knobs = knobs;
        return p;
}

#define ALL_FAMILIES ((1U << _AUTOTUNE_FAMILY_MAX) - 1)

static void test_family_order(void **state) {
        AutotunePolicy p = search_policy(ALL_FAMILIES);

        /* the schedulers first, then the winner's depth, wbt, its own
         * tunables, and read-ahead only on sequential readers */
        assert_int_equal(autotune_next_family(&p, -1, false), AUTOTUNE_FAMILY_SCHEDULER);
        assert_int_equal(autotune_next_family(&p, AUTOTUNE_FAMILY_SCHEDULER, false), AUTOTUNE_FAMILY_NR_REQUESTS);
        assert_int_equal(autotune_next_family(&p, AUTOTUNE_FAMILY_NR_REQUESTS, false), AUTOTUNE_FAMILY_WBT);
        assert_int_equal(autotune_next_family(&p, AUTOTUNE_FAMILY_WBT, false), AUTOTUNE_FAMILY_IOSCHED);
        assert_int_equal(autotune_next_family(&p, AUTOTUNE_FAMILY_IOSCHED, false), _AUTOTUNE_FAMILY_MAX);
        assert_int_equal(autotune_next_family(&p, AUTOTUNE_FAMILY_IOSCHED, true), AUTOTUNE_FAMILY_READ_AHEAD);
        assert_int_equal(autotune_next_family(&p, AUTOTUNE_FAMILY_READ_AHEAD, true), _AUTOTUNE_FAMILY_MAX);
        /* only the families named */
        p.knobs = (1U << AUTOTUNE_FAMILY_IOSCHED) | (1U << AUTOTUNE_FAMILY_SCHEDULER);
        assert_int_equal(autotune_next_family(&p, -1, true), AUTOTUNE_FAMILY_SCHEDULER);
        assert_int_equal(autotune_next_family(&p, AUTOTUNE_FAMILY_SCHEDULER, true), AUTOTUNE_FAMILY_IOSCHED);
        p.knobs = 1U << AUTOTUNE_FAMILY_READ_AHEAD;
        assert_int_equal(autotune_next_family(&p, -1, false), _AUTOTUNE_FAMILY_MAX);
        assert_int_equal(autotune_next_family(&p, -1, true), AUTOTUNE_FAMILY_READ_AHEAD);
}

/* Every candidate sets a tunable only of its own scheduler. */
static void assert_tunables_own(const AutotuneCandidate *c, size_t n) {
        for (size_t i = 0; i < n; i++)
                for (AutotuneTunable t = 0; t < _AUTOTUNE_TUN_MAX; t++)
                        if (c[i].set & (1U << t))
                                assert_string_equal(autotune_tunable_info(t)->scheduler, c[i].scheduler);
}

static void test_family_tunables(void **state) {
        AutotunePolicy p = search_policy(ALL_FAMILIES);
        AutotuneCandidate c[AUTOTUNE_MAX_CANDIDATES];
        char note[256];
        size_t n;
        AutotuneCandidate dl = { .scheduler = "mq-deadline", .nr_requests = 48, .wbt_lat_usec = AUTOTUNE_WBT_UNSET };

        /* mq-deadline: fifo_batch and writes_starved, one at a time, the
         * incumbent written with the kernel's defaults */
        assert_int_equal(autotune_family_candidates(&p, AUTOTUNE_FAMILY_IOSCHED, &dl, NULL, false, 0, 0, c, &n, note,
                                                    sizeof note), 0);
        assert_int_equal(n, 1 + 3 + 2);
        assert_true(c[0].baseline);
        assert_int_equal(c[0].tun[AUTOTUNE_TUN_DL_FIFO_BATCH], 16);
        assert_int_equal(c[0].tun[AUTOTUNE_TUN_DL_WRITES_STARVED], 2);
        assert_tunables_own(c, n);
        for (size_t i = 1; i < n; i++) {
                assert_string_equal(c[i].scheduler, "mq-deadline");
                assert_int_equal(c[i].nr_requests, 48); /* the winner's depth stays */
                assert_false(c[i].baseline);
                unsigned moved = (c[i].tun[AUTOTUNE_TUN_DL_FIFO_BATCH] != 16) +
                                 (c[i].tun[AUTOTUNE_TUN_DL_WRITES_STARVED] != 2);
                assert_int_equal(moved, 1); /* one tunable at a time */
        }
        /* kyber and bfq: their own */
        AutotuneCandidate ky = { .scheduler = "kyber", .wbt_lat_usec = AUTOTUNE_WBT_UNSET };
        assert_int_equal(autotune_family_candidates(&p, AUTOTUNE_FAMILY_IOSCHED, &ky, NULL, false, 0, 0, c, &n, note,
                                                    sizeof note), 0);
        assert_int_equal(n, 1 + 3 + 2);
        assert_tunables_own(c, n);
        AutotuneCandidate bfq = { .scheduler = "bfq", .wbt_lat_usec = AUTOTUNE_WBT_UNSET };
        assert_int_equal(autotune_family_candidates(&p, AUTOTUNE_FAMILY_IOSCHED, &bfq, NULL, false, 0, 0, c, &n, note,
                                                    sizeof note), 0);
        assert_int_equal(n, 1 + 1 + 2);
        assert_tunables_own(c, n);
        /* a tunable of another scheduler left on the incumbent is never
         * varied under it */
        ky.set = 1U << AUTOTUNE_TUN_DL_FIFO_BATCH;
        ky.tun[AUTOTUNE_TUN_DL_FIFO_BATCH] = 4;
        assert_int_equal(autotune_family_candidates(&p, AUTOTUNE_FAMILY_IOSCHED, &ky, NULL, false, 0, 0, c, &n, note,
                                                    sizeof note), 0);
        for (size_t i = 1; i < n; i++)
                assert_int_equal(c[i].tun[AUTOTUNE_TUN_DL_FIFO_BATCH], 4);
        /* none has none; nor an nr_requests */
        AutotuneCandidate none = { .scheduler = "none", .wbt_lat_usec = AUTOTUNE_WBT_UNSET };
        assert_int_equal(autotune_family_candidates(&p, AUTOTUNE_FAMILY_IOSCHED, &none, NULL, false, 0, 0, c, &n, note,
                                                    sizeof note), -ENOENT);
        assert_non_null(strstr(note, "no tunables"));
        assert_int_equal(autotune_family_candidates(&p, AUTOTUNE_FAMILY_NR_REQUESTS, &none, NULL, false, 0, 0, c, &n,
                                                    note, sizeof note), -ENOENT);
        /* the schedulers at their defaults: the kernel guards hold */
        assert_int_equal(autotune_family_candidates(&p, AUTOTUNE_FAMILY_SCHEDULER, &dl, "[mq-deadline] none bfq", true,
                                                    KERNEL_VERSION_CODE(6, 1), 0, c, &n, note, sizeof note),
                         -ENOENT);
        assert_non_null(strstr(note, "zoned"));
        assert_int_equal(autotune_family_candidates(&p, AUTOTUNE_FAMILY_SCHEDULER, &dl, "[mq-deadline] none bfq", false,
                                                    0, 0, c, &n, note, sizeof note), 0);
        assert_int_equal(n, 3); /* mq-deadline (incumbent), bfq, none: kyber is not offered */
        assert_non_null(strstr(note, "kyber left out"));
        for (size_t i = 1; i < n; i++) {
                assert_int_equal(c[i].nr_requests, 0); /* its default: not written */
                assert_int_equal(c[i].set, 0);
        }
        /* nr_requests above the kernel's bound */
        p.nr_requests[0] = 16, p.nr_requests[1] = 48, p.nr_requests[2] = 96, p.nr_requests[3] = 4096;
        p.n_nr_requests = 4;
        assert_int_equal(autotune_family_candidates(&p, AUTOTUNE_FAMILY_NR_REQUESTS, &dl, NULL, false, 0, 1024, c, &n,
                                                    note, sizeof note), 0);
        assert_int_equal(n, 3); /* 48 is the incumbent's, 4096 above the bound */
        assert_non_null(strstr(note, "4096"));
}

/* A synthetic disk: read await (ms) of a setting, separable by family,
 * so the best of each family is the best whatever the others. */
static double oracle(const AutotuneCandidate *c) {
        double v = streq(c->scheduler, "kyber") ? 3 : streq(c->scheduler, "bfq") ? 5 : 4;
        unsigned nr = c->nr_requests ? c->nr_requests : 64;
        v *= 1 + fabs(log2((double) nr / 96.0)) / 4;
        if (streq(c->scheduler, "kyber")) {
                long long rl = (c->set & (1U << AUTOTUNE_TUN_KYBER_READ_LAT)) ? c->tun[AUTOTUNE_TUN_KYBER_READ_LAT]
                                                                              : 2000000;
                v *= rl == 1000000 ? 0.7 : 1;
        }
        return v;
}

static void test_family_search_not_product(void **state) {
        AutotunePolicy p = search_policy((1U << AUTOTUNE_FAMILY_SCHEDULER) | (1U << AUTOTUNE_FAMILY_NR_REQUESTS) |
                                         (1U << AUTOTUNE_FAMILY_IOSCHED) | (1U << AUTOTUNE_FAMILY_READ_AHEAD));
        char buf[256];
        const char *msg;
        AutotuneCandidate inc = { .scheduler = "mq-deadline", .nr_requests = 64, .wbt_lat_usec = AUTOTUNE_WBT_UNSET,
                              .set = AUTOTUNE_SET_READ_AHEAD, .read_ahead_kb = 128 };
        size_t generated = 1, phases = 0;

        assert_int_equal(autotune_policy_parse(&p, "AutoScheduler", "mq-deadline kyber bfq", buf, sizeof buf, &msg), 0);
        assert_int_equal(autotune_policy_parse(&p, "AutoNrRequests", "24 48 96 192", buf, sizeof buf, &msg), 0);
        assert_int_equal(autotune_policy_parse(&p, "AutoReadAheadKB", "256 1024 4096", buf, sizeof buf, &msg), 0);
        /* the space: 3 schedulers x 5 depths x (kyber's 4 x 3 tunable
         * pairs at most) x 4 read-aheads */
        size_t space = 3 * 5 * 12 * 4;
        assert_true(space >= 24);
        for (AutotuneFamily f = autotune_next_family(&p, -1, true); f < _AUTOTUNE_FAMILY_MAX;
             f = autotune_next_family(&p, f, true)) {
                AutotuneCandidate c[AUTOTUNE_MAX_CANDIDATES];
                char note[256];
                size_t n, best = 0;
                if (autotune_family_candidates(&p, f, &inc, NULL, false, 0, 0, c, &n, note, sizeof note) < 0)
                        continue;
                phases++;
                generated += n - 1;
                assert_tunables_own(c, n);
                for (size_t i = 1; i < n; i++)
                        if (oracle(&c[i]) < oracle(&c[best]))
                                best = i;
                inc = c[best];
                inc.baseline = false;
        }
        /* 4 phases: the schedulers (2 more), the depths (4 more), kyber's
         * tunables (5 more), read-ahead (3 more) */
        assert_int_equal(phases, 4);
        assert_int_equal(generated, 1 + 2 + 4 + 5 + 3);
        assert_true(generated * 10 < space);
        /* and it found the best of the space */
        assert_string_equal(inc.scheduler, "kyber");
        assert_int_equal(inc.nr_requests, 96);
        assert_int_equal(inc.tun[AUTOTUNE_TUN_KYBER_READ_LAT], 1000000);
        autotune_policy_done(&p);
}

static void test_sequential_objective(void **state) {
        AutotuneSignature s = { .read_share = 0.9, .avg_kb = 64, .iops = 20, .depth = 16 };

        /* the boundary: each of the four on its edge, then just past it */
        assert_true(autotune_sequential_reads(&s, 20));
        s.read_share = 0.89;
        assert_false(autotune_sequential_reads(&s, 20));
        s.read_share = 0.9, s.avg_kb = 63.9;
        assert_false(autotune_sequential_reads(&s, 20));
        s.avg_kb = 64, s.iops = 19.9;
        assert_false(autotune_sequential_reads(&s, 20));
        s.iops = 20, s.depth = 16.1;
        assert_false(autotune_sequential_reads(&s, 20));
        /* a database's mix is not */
        AutotuneSignature oltp = { .read_share = 0.7, .avg_kb = 8, .iops = 5000, .depth = 24 };
        assert_false(autotune_sequential_reads(&oltp, 20));

        /* read MB/s ranks, whatever the await: a larger read-ahead makes
         * each request slower and the reader faster */
        AutotunePolicy p = policy();
        p.objective = AUTOTUNE_OBJECTIVE_SEQ_READ;
        assert_false(autotune_objective_lower_better(&p));
        AutotuneSeries series[2] = {};
        AutotuneSummary sum[2];
        AutotuneDecision d;
        rng_state = 23;
        for (size_t c = 0; c < 2; c++)
                for (size_t i = 0; i < 6; i++)
                        series[c].epochs[series[c].n++] = (AutotuneEpochFigures) {
                                .valid = true, .read_iops = c ? 300 : 1600, .read_mbps = noisy(c ? 310 : 190, 0.05),
                                .read_await_ms = noisy(c ? 9 : 1.2, 0.05),
                                /* a writer beside it: read MB/s alone ranks, not the sum */
                                .write_iops = 100, .write_mbps = noisy(c ? 20 : 150, 0.05),
                        };
        autotune_decide(&p, series, 2, sum, &d);
        assert_int_equal(d.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_int_equal(d.winner, 1);
        /* the far-worse drop looks at read MB/s too */
        char why[256];
        AutotuneEpochFigures slow = { .valid = true, .read_iops = 2000, .read_mbps = 30, .read_await_ms = 0.5 };
        assert_true(autotune_far_worse(&p, series, 2, NULL, 1, &slow, why, sizeof why));
        assert_non_null(strstr(why, "MB/s"));
        AutotuneEpochFigures deep = { .valid = true, .read_iops = 200, .read_mbps = 300, .read_await_ms = 40 };
        assert_false(autotune_far_worse(&p, series, 2, NULL, 1, &deep, why, sizeof why));
        /* under read latency the same epoch would be far worse */
        p.objective = AUTOTUNE_OBJECTIVE_READ_LATENCY;
        assert_true(autotune_far_worse(&p, series, 2, NULL, 1, &deep, why, sizeof why));
}

static void test_knobs_parse_and_format(void **state) {
        AutotunePolicy p;
        char buf[256];
        const char *msg = NULL;

        autotune_policy_init(&p);
        assert_int_equal(p.knobs, 0); /* the default: one race over the bounds, as before */
        assert_int_equal(autotune_policy_parse(&p, "AutoKnobs", "scheduler iosched read_ahead_kb", buf, sizeof buf,
                                               &msg), 0);
        assert_int_equal(p.knobs, (1U << AUTOTUNE_FAMILY_SCHEDULER) | (1U << AUTOTUNE_FAMILY_IOSCHED) |
                                          (1U << AUTOTUNE_FAMILY_READ_AHEAD));
        assert_int_equal(autotune_policy_parse(&p, "AutoKnobs", "scheduler readahead", buf, sizeof buf, &msg), -EINVAL);
        assert_non_null(strstr(msg, "\"readahead\""));
        assert_int_equal(p.knobs, (1U << AUTOTUNE_FAMILY_SCHEDULER) | (1U << AUTOTUNE_FAMILY_IOSCHED) |
                                          (1U << AUTOTUNE_FAMILY_READ_AHEAD)); /* a bad value changes nothing */
        assert_int_equal(autotune_policy_parse(&p, "AutoKnobs", "", buf, sizeof buf, &msg), 0);
        assert_int_equal(p.knobs, 0);
        assert_int_equal(autotune_policy_parse(&p, "AutoReadAheadKB", "256 1024", buf, sizeof buf, &msg), 0);
        assert_int_equal(p.n_read_ahead_kb, 2);
        assert_int_equal(p.read_ahead_kb[1], 1024);
        assert_int_equal(autotune_policy_parse(&p, "AutoReadAheadKB", "256 -1", buf, sizeof buf, &msg), -EINVAL);
        assert_non_null(strstr(msg, "KiB"));
        assert_int_equal(autotune_policy_parse(&p, "AutoObjective", "sequential-read", buf, sizeof buf, &msg), -EINVAL);

        /* the setting's text, and the state file's line keep the new knobs */
        AutotuneCandidate c = { .scheduler = "kyber", .nr_requests = 96, .wbt_lat_usec = AUTOTUNE_WBT_UNSET,
                                .set = AUTOTUNE_SET_READ_AHEAD | (1U << AUTOTUNE_TUN_KYBER_READ_LAT),
                                .read_ahead_kb = 1024 };
        c.tun[AUTOTUNE_TUN_KYBER_READ_LAT] = 1000000;
        char s[AUTOTUNE_CANDIDATE_STRMAX];
        assert_string_equal(autotune_candidate_format(&c, s, sizeof s),
                            "kyber nr_requests=96 read_ahead_kb=1024 read_lat_nsec=1000000");
        AutotuneCandidate d = c;
        d.tun[AUTOTUNE_TUN_KYBER_READ_LAT] = 500000;
        assert_false(autotune_candidate_equal(&c, &d));
        d = c;
        d.set &= ~AUTOTUNE_SET_READ_AHEAD;
        assert_false(autotune_candidate_equal(&c, &d));
        AutotuneMemory w = { .sig = { .read_share = 1, .avg_kb = 512, .iops = 400, .depth = 2 }, .cand = c }, e;
        char line[512], id[64];
        uint64_t seq;
        assert_int_equal(autotune_memory_format("serial:X", 3, &w, line, sizeof line), 0);
        assert_int_equal(autotune_memory_parse(line, id, sizeof id, &seq, &e), 0);
        assert_true(autotune_candidate_equal(&e.cand, &c));
        autotune_policy_done(&p);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_trial_probe_usec),
                cmocka_unit_test(test_mann_whitney),
                cmocka_unit_test(test_summarise),
                cmocka_unit_test(test_clear_winner),
                cmocka_unit_test(test_no_flip_on_noise),
                cmocka_unit_test(test_no_flip_on_drift),
                cmocka_unit_test(test_no_flip_on_outlier),
                cmocka_unit_test(test_hysteresis),
                cmocka_unit_test(test_write_tolerance),
                cmocka_unit_test(test_throughput_objective),
                cmocka_unit_test(test_idle_and_no_data),
                cmocka_unit_test(test_p99_objective),
                cmocka_unit_test(test_tripped),
                cmocka_unit_test(test_guard),
                cmocka_unit_test(test_candidates),
                cmocka_unit_test(test_parse),
                cmocka_unit_test(test_caps),
                cmocka_unit_test(test_epoch_figures),
                cmocka_unit_test(test_slots),
                cmocka_unit_test(test_workload_change),
                cmocka_unit_test(test_recorded),
                cmocka_unit_test(test_t_distribution),
                cmocka_unit_test(test_race),
                cmocka_unit_test(test_race_no_false_drop),
                cmocka_unit_test(test_far_worse),
                cmocka_unit_test(test_far_worse_peek),
                cmocka_unit_test(test_search_error_rate),
                cmocka_unit_test(test_race_settles),
                cmocka_unit_test(test_race_equivalent),
                cmocka_unit_test(test_retrial_finds_drift),
                cmocka_unit_test(test_round_order),
                cmocka_unit_test(test_drained),
                cmocka_unit_test(test_promise),
                cmocka_unit_test(test_write_bound_every_candidate),
                cmocka_unit_test(test_signature_memory),
                cmocka_unit_test(test_family_order),
                cmocka_unit_test(test_family_tunables),
                cmocka_unit_test(test_family_search_not_product),
                cmocka_unit_test(test_sequential_objective),
                cmocka_unit_test(test_knobs_parse_and_format),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
