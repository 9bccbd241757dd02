/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Histogram accuracy against exact nearest-rank percentiles of synthetic
 * samples, merge, iteration, log2 conversion and sliding-window rollover
 * checked against a brute-force replay of every record. */

#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cleanup.h"
#include "hist.h"

/* ---- seeded PRNG and distributions (no libm in the link) ---- */

typedef struct rng {
        uint64_t s;
} Rng;

static uint64_t rng_next(Rng *r) {
        /* splitmix64 */
        uint64_t z = (r->s += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

/* (0, 1) */
static double rng_uniform(Rng *r) {
        return ((double) (rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

#define T_LN2 0.69314718055994530942

static double t_ln(double x) {
        double z, z2, term, sum = 0;
        int e = 0;

        while (x >= 2) {
                x /= 2;
                e++;
        }
        while (x < 1) {
                x *= 2;
                e--;
        }
        /* ln(x) = 2 atanh((x-1)/(x+1)), x in [1, 2) */
        z = (x - 1) / (x + 1);
        z2 = z * z;
        term = z;
        for (int k = 1; k < 60; k += 2) {
                sum += term / k;
                term *= z2;
        }
        return 2 * sum + e * T_LN2;
}

static double t_exp(double x) {
        double k = (double) (long long) (x / T_LN2), r = x - k * T_LN2, term = 1, sum = 1;

        for (int i = 1; i < 30; i++) {
                term *= r / i;
                sum += term;
        }
        for (; k > 0; k--)
                sum *= 2;
        for (; k < 0; k++)
                sum /= 2;
        return sum;
}

/* Irwin-Hall: close enough to N(0, 1) for synthetic latencies. */
static double rng_normal(Rng *r) {
        double s = 0;

        for (int i = 0; i < 12; i++)
                s += rng_uniform(r);
        return s - 6;
}

static uint64_t to_ns(double v) {
        if (v < 1)
                return 1;
        if (v > 1e15)
                return UINT64_C(1000000000000000);
        return (uint64_t) v;
}

enum dist {
        DIST_UNIFORM,
        DIST_EXPONENTIAL,
        DIST_BIMODAL,
        DIST_LOGNORMAL,
        DIST_CONSTANT,
        DIST_SMALL,
        DIST_WIDE,
        _DIST_MAX,
};

static const char *const dist_name[_DIST_MAX] = {
        "uniform", "exponential", "bimodal", "lognormal", "constant", "small", "wide",
};

static uint64_t dist_sample(enum dist d, Rng *r) {
        switch (d) {
        case DIST_UNIFORM:      /* 1 us .. 10 ms */
                return to_ns(1e3 + rng_uniform(r) * 1e7);
        case DIST_EXPONENTIAL:  /* mean 200 us */
                return to_ns(-2e5 * t_ln(rng_uniform(r)));
        case DIST_BIMODAL:      /* 90 % around 100 us, 10 % around 5 ms */
                if (rng_uniform(r) < 0.9)
                        return to_ns(1e5 + 1e4 * rng_normal(r));
                return to_ns(5e6 + 5e5 * rng_normal(r));
        case DIST_LOGNORMAL:    /* median 150 us, sigma 1 */
                return to_ns(t_exp(t_ln(1.5e5) + rng_normal(r)));
        case DIST_CONSTANT:
                return 123457;
        case DIST_SMALL:        /* the exact region and just above */
                return 1 + rng_next(r) % 100;
        case DIST_WIDE: {       /* log-uniform over the whole range */
                uint64_t v = to_ns(t_exp(rng_uniform(r) * HIST_RANGE_BITS * T_LN2) - 1);
                return v < HIST_VALUE_MAX ? v : HIST_VALUE_MAX;
        }
        default:
                abort();
        }
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
        return (x > y) - (x < y);
}

static uint64_t absdiff(uint64_t a, uint64_t b) {
        return a > b ? a - b : b - a;
}

static bool within_bound(uint64_t reported, uint64_t exact) {
        return absdiff(reported, exact) * HIST_REL_ERROR_DEN <= exact;
}

/* ---- bucket geometry ---- */

static void test_bucket_layout(void **state) {
        assert_int_equal(HIST_BUCKETS, 592);
        assert_int_equal(hist_bucket_lower(0), 0);
        assert_int_equal(hist_bucket_upper(HIST_BUCKETS - 1), HIST_VALUE_MAX + 1);

        for (size_t i = 0; i < HIST_BUCKETS; i++) {
                uint64_t lo = hist_bucket_lower(i), hi = hist_bucket_upper(i);

                assert_true(lo < hi);
                if (i + 1 < HIST_BUCKETS)
                        assert_int_equal(hi, hist_bucket_lower(i + 1));
                assert_int_equal(hist_bucket_index(lo), i);
                assert_int_equal(hist_bucket_index(hi - 1), i);
                assert_true(hist_bucket_value(i) >= lo && hist_bucket_value(i) < hi);
                /* Width at most 1/HIST_SUB_BUCKETS of the lower bound, or exact. */
                assert_true(hi - lo == 1 || (hi - lo) * HIST_SUB_BUCKETS <= lo);
        }

        assert_int_equal(hist_bucket_index(HIST_VALUE_MAX + 1), HIST_BUCKETS - 1);
        assert_int_equal(hist_bucket_index(UINT64_MAX), HIST_BUCKETS - 1);
        for (uint64_t v = 0; v < 2 * HIST_SUB_BUCKETS; v++)
                assert_int_equal(hist_bucket_value(hist_bucket_index(v)), v);
}

/* Every value up to 2^22 and a sweep of larger ones: the midpoint is within
 * the bound, and the bound is attained (so it is the right constant). */
static void test_value_bound(void **state) {
        bool attained = false;
        Rng r = { 1 };

        for (uint64_t v = 1; v < (UINT64_C(1) << 22); v++) {
                uint64_t rep = hist_bucket_value(hist_bucket_index(v));

                assert_true(within_bound(rep, v));
                if (absdiff(rep, v) * HIST_REL_ERROR_DEN == v)
                        attained = true;
        }
        assert_true(attained);

        for (int i = 0; i < 1000000; i++) {
                uint64_t v = 1 + rng_next(&r) % HIST_VALUE_MAX;

                assert_true(within_bound(hist_bucket_value(hist_bucket_index(v)), v));
        }
}

/* ---- accuracy against exact percentiles ---- */

static const double percentiles[] = { 0, 1, 10, 50, 90, 99, 99.9, 99.99, 100 };

static void check_distribution(enum dist d, uint64_t seed, size_t n, double *max_err) {
        _cleanup_free_ uint64_t *v = NULL;
        _cleanup_free_ Hist *h = NULL;
        Rng r = { seed * 1000003 + (uint64_t) d };
        uint64_t sum = 0;

        v = malloc(n * sizeof(uint64_t));
        h = malloc(sizeof(Hist));
        assert_non_null(v);
        assert_non_null(h);
        hist_init(h);

        for (size_t i = 0; i < n; i++) {
                v[i] = dist_sample(d, &r);
                assert_true(v[i] <= HIST_VALUE_MAX);
                hist_record(h, v[i]);
                sum += v[i];
        }
        qsort(v, n, sizeof(uint64_t), cmp_u64);

        assert_int_equal(h->count, n);
        assert_int_equal(h->sum_lo, sum);
        assert_int_equal(h->sum_hi, 0);
        assert_int_equal(h->min, v[0]);
        assert_int_equal(h->max, v[n - 1]);

        for (size_t i = 0; i < ELEMENTSOF(percentiles); i++) {
                uint64_t exact = v[hist_rank(percentiles[i], n) - 1], got = 0;

                assert_int_equal(hist_percentile(h, percentiles[i], &got), 0);
                if (!within_bound(got, exact))
                        fail_msg("%s seed=%" PRIu64 " n=%zu p%g: got %" PRIu64 ", exact %" PRIu64,
                                 dist_name[d], seed, n, percentiles[i], got, exact);
                if ((double) absdiff(got, exact) / (double) exact > *max_err)
                        *max_err = (double) absdiff(got, exact) / (double) exact;
        }

        /* Extremes are exact, not just within the bound. */
        {
                uint64_t got;
                assert_int_equal(hist_percentile(h, 100, &got), 0);
                assert_int_equal(got, v[n - 1]);
                assert_int_equal(hist_percentile(h, 0, &got), 0);
                assert_int_equal(got, v[0]);
        }
}

static void test_percentile_accuracy(void **state) {
        double max_err = 0;
        unsigned runs = 0;

        for (enum dist d = 0; d < _DIST_MAX; d++)
                for (uint64_t seed = 1; seed <= 40; seed++) {
                        /* 1, 2, 3 samples and then sizes up to 20000 */
                        size_t n = seed <= 3 ? seed : 1 + (seed * 7919) % 20000;

                        check_distribution(d, seed, n, &max_err);
                        runs++;
                }

        assert_int_equal(runs, 7 * 40);
        assert_true(max_err <= HIST_REL_ERROR);
        /* The samples get near the bound, so the check above has teeth. */
        assert_true(max_err > HIST_REL_ERROR / 4);
}

static void test_rank(void **state) {
        assert_int_equal(hist_rank(0, 10), 1);
        assert_int_equal(hist_rank(50, 10), 5);
        assert_int_equal(hist_rank(51, 10), 6);
        assert_int_equal(hist_rank(99, 100), 99);
        assert_int_equal(hist_rank(99.9, 1000), 999);
        assert_int_equal(hist_rank(99.9, 1001), 1000);
        assert_int_equal(hist_rank(99.99, 10000), 9999);
        assert_int_equal(hist_rank(99.99, 10001), 10000);
        assert_int_equal(hist_rank(90, 10), 9);
        assert_int_equal(hist_rank(1e-7, 1000000000), 1);
        assert_int_equal(hist_rank(2e-7, 1000000000), 2);
        assert_int_equal(hist_rank(2.1e-7, 1000000000), 3);
        assert_int_equal(hist_rank(100, 10), 10);
        assert_int_equal(hist_rank(50, 1), 1);
        assert_int_equal(hist_rank(50, 0), 0);
}

static void test_percentile_errors(void **state) {
        Hist h;
        uint64_t v = 4242;

        hist_init(&h);
        assert_int_equal(hist_percentile(&h, 50, &v), -ENODATA);
        assert_int_equal(v, 4242);
        hist_record(&h, 1000);
        assert_int_equal(hist_percentile(&h, -0.1, &v), -EINVAL);
        assert_int_equal(hist_percentile(&h, 100.1, &v), -EINVAL);
        assert_int_equal(hist_percentile(&h, __builtin_nan(""), &v), -EINVAL);
        assert_int_equal(v, 4242);
        assert_int_equal(hist_percentile(&h, 50, &v), 0);
        assert_int_equal(v, 1000);
        assert_true(hist_mean(&h) == 1000.0);
        hist_reset(&h);
        assert_true(hist_mean(&h) != hist_mean(&h));    /* NaN */
        assert_int_equal(h.min, UINT64_MAX);
        assert_int_equal(h.max, 0);
}

/* Above the range: counted in the last bucket, statistics stay exact. */
static void test_out_of_range(void **state) {
        Hist h;
        uint64_t v;

        hist_init(&h);
        hist_record(&h, 0);
        hist_record(&h, UINT64_C(1) << 50);
        hist_record(&h, UINT64_MAX / 2);
        hist_record(&h, UINT64_MAX / 2);

        assert_int_equal(h.count, 4);
        assert_int_equal(h.min, 0);
        assert_int_equal(h.max, UINT64_MAX / 2);
        assert_int_equal(h.buckets[0], 1);
        assert_int_equal(h.buckets[HIST_BUCKETS - 1], 3);
        /* 128-bit sum: 2^50 + 2 * (2^63 - 1) = 2^64 + 2^50 - 2 */
        assert_int_equal(h.sum_hi, 1);
        assert_int_equal(h.sum_lo, (UINT64_C(1) << 50) - 2);
        assert_true(hist_sum(&h) == 18446744073709551616.0 + 1125899906842622.0);
        assert_int_equal(hist_percentile(&h, 100, &v), 0);
        assert_int_equal(v, UINT64_MAX / 2);
        assert_int_equal(hist_percentile(&h, 0, &v), 0);
        assert_int_equal(v, 0);
        assert_int_equal(hist_count_le(&h, UINT64_MAX / 2), 4);
        assert_int_equal(hist_count_le(&h, 0), 1);
}

/* ---- merge, iteration, count_le, log2 ---- */

/* hist_diff: what was recorded since a copy; a copy from the future (or of
 * another histogram with more in a bucket) is refused. */
static void test_diff(void **state) {
        Hist h, then, d;
        uint64_t v;

        hist_init(&h);
        for (uint64_t i = 1; i <= 100; i++)
                hist_record(&h, i * 1000);
        then = h;
        for (uint64_t i = 0; i < 99; i++)
                hist_record(&h, 5000000);
        hist_record(&h, 90000000);
        assert_int_equal(hist_diff(&d, &h, &then), 0);
        assert_int_equal(d.count, 100);
        assert_int_equal(hist_percentile(&d, 50, &v), 0);
        assert_true(v >= 5000000 - 5000000 / HIST_REL_ERROR_DEN && v <= 5000000 + 5000000 / HIST_REL_ERROR_DEN);
        assert_int_equal(hist_percentile(&d, 100, &v), 0);
        assert_true(v >= 90000000 - 90000000 / HIST_REL_ERROR_DEN && v <= 90000000 + 90000000 / HIST_REL_ERROR_DEN);
        assert_true(fabs(hist_mean(&d) - (99 * 5e6 + 9e7) / 100) < 1);
        assert_true(d.min <= 5000000 && d.max >= 90000000);
        /* nothing since: empty */
        assert_int_equal(hist_diff(&d, &h, &h), 0);
        assert_int_equal(d.count, 0);
        assert_int_equal(hist_percentile(&d, 99, &v), -ENODATA);
        /* backwards */
        assert_int_equal(hist_diff(&d, &then, &h), -EINVAL);
}

static void test_merge(void **state) {
        _cleanup_free_ Hist *a = malloc(sizeof(Hist)), *b = malloc(sizeof(Hist)),
                              *all = malloc(sizeof(Hist)), *empty = malloc(sizeof(Hist));
        Rng r = { 77 };

        assert_true(a && b && all && empty);
        hist_init(a);
        hist_init(b);
        hist_init(all);
        hist_init(empty);

        for (int i = 0; i < 50000; i++) {
                uint64_t v = dist_sample(i % 3 ? DIST_LOGNORMAL : DIST_BIMODAL, &r);

                hist_record(i % 5 ? a : b, v);
                hist_record(all, v);
        }
        /* Carry across the 64-bit sum halves. */
        hist_record(a, UINT64_MAX - 5);
        hist_record(b, UINT64_MAX - 7);
        hist_record(all, UINT64_MAX - 5);
        hist_record(all, UINT64_MAX - 7);

        hist_merge(a, empty);
        hist_merge(a, b);
        assert_memory_equal(a, all, sizeof(Hist));

        hist_merge(empty, all);
        assert_memory_equal(empty, all, sizeof(Hist));

        assert_int_equal(a->count, 50002);
        assert_int_equal(a->max, UINT64_MAX - 5);

        /* The carry of the merge itself: neither half wraps on its own. */
        hist_init(a);
        hist_init(b);
        hist_record(a, UINT64_C(1) << 63);
        hist_record(b, (UINT64_C(1) << 63) + 5);
        assert_int_equal(a->sum_hi, 0);
        assert_int_equal(b->sum_hi, 0);
        hist_merge(a, b);
        assert_int_equal(a->sum_hi, 1);
        assert_int_equal(a->sum_lo, 5);
        assert_int_equal(a->count, 2);
}

static void test_iterate(void **state) {
        _cleanup_free_ uint64_t *v = malloc(20000 * sizeof(uint64_t));
        Hist h;
        HistBucket b;
        size_t it = 0, j = 0, buckets = 0;
        uint64_t total = 0, prev_upper = 0;
        Rng r = { 5 };

        assert_non_null(v);
        hist_init(&h);
        assert_false(hist_bucket_next(&h, &it, &b));

        it = 0;
        for (size_t i = 0; i < 20000; i++) {
                v[i] = dist_sample(DIST_WIDE, &r);
                hist_record(&h, v[i]);
        }
        qsort(v, 20000, sizeof(uint64_t), cmp_u64);

        while (hist_bucket_next(&h, &it, &b)) {
                uint64_t n = 0;

                assert_true(b.lower < b.upper);
                assert_true(b.lower >= prev_upper);
                assert_true(b.count > 0);
                /* The raw samples in [lower, upper) are exactly those counted. */
                while (j < 20000 && v[j] < b.lower)
                        j++;
                while (j < 20000 && v[j] < b.upper) {
                        n++;
                        j++;
                }
                assert_int_equal(n, b.count);
                prev_upper = b.upper;
                total += b.count;
                buckets++;
        }
        assert_int_equal(total, 20000);
        assert_true(buckets > 100);
        assert_int_equal(j, 20000);
        assert_false(hist_bucket_next(&h, &it, &b));
}

/* Samples whose reported value can sit on the other side of boundary bnd. */
static uint64_t count_near(const uint64_t *v, size_t n, uint64_t bnd) {
        uint64_t c = 0;

        for (size_t i = 0; i < n; i++)
                if (absdiff(v[i], bnd) * HIST_SUB_BUCKETS <= v[i])
                        c++;
        return c;
}

static void test_count_le(void **state) {
        _cleanup_free_ uint64_t *v = malloc(30000 * sizeof(uint64_t));
        Hist h;
        uint64_t prev = 0;
        Rng r = { 9 };
        unsigned exact_hits = 0;

        assert_non_null(v);
        hist_init(&h);
        assert_int_equal(hist_count_le(&h, 1000), 0);
        for (size_t i = 0; i < 30000; i++) {
                v[i] = dist_sample(DIST_EXPONENTIAL, &r);
                hist_record(&h, v[i]);
        }
        qsort(v, 30000, sizeof(uint64_t), cmp_u64);

        for (uint64_t bnd = 1; bnd < UINT64_C(20000000); bnd = bnd * 11 / 10 + 1) {
                uint64_t got = hist_count_le(&h, bnd), exact = 0;

                while (exact < 30000 && v[exact] <= bnd)
                        exact++;
                assert_true(got >= prev);
                assert_true(absdiff(got, exact) <= count_near(v, 30000, bnd));
                exact_hits += got == exact;
                prev = got;
        }
        assert_true(exact_hits > 10);

        /* As documented: a sample counts as its bucket's midpoint, the same
         * value hist_percentile() reports. */
        {
                uint64_t cum = 0;

                for (size_t i = 0; i < HIST_BUCKETS; i++) {
                        uint64_t mid = hist_bucket_value(i);

                        if (h.buckets[i] > 0 && mid > h.min && mid < h.max) {
                                assert_int_equal(hist_count_le(&h, mid - 1), cum);
                                assert_int_equal(hist_count_le(&h, mid), cum + h.buckets[i]);
                        }
                        cum += h.buckets[i];
                }
        }
        assert_int_equal(hist_count_le(&h, v[0] - 1), 0);
        assert_int_equal(hist_count_le(&h, v[29999]), 30000);
}

static size_t exact_log2_slot(uint64_t ns) {
        uint64_t us = ns / 1000;
        size_t k = 0;

        if (us < 2)
                return 0;
        while (us >>= 1)
                k++;
        return k;
}

static void test_log2_fixed(void **state) {
        static const struct { uint64_t ns; size_t slot; } cases[] = {
                { 0, 0 }, { 1, 0 }, { 500, 0 }, { 1500, 0 }, { 3000, 1 }, { 6000, 2 },
                { 12000, 3 }, { 1500000, 10 }, { 3000000000, 21 }, { HIST_VALUE_MAX, 30 },
        };
        uint64_t out[HIST_LOG2_USEC_SLOTS], cum[HIST_LOG2_USEC_SLOTS];
        Hist h;

        hist_init(&h);
        assert_int_equal(hist_log2_usec(&h, false, out), 0);
        for (size_t k = 0; k < HIST_LOG2_USEC_SLOTS; k++)
                assert_int_equal(out[k], 0);

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                assert_int_equal(exact_log2_slot(cases[i].ns), cases[i].slot);
                for (size_t j = 0; j <= i; j++)
                        hist_record(&h, cases[i].ns);
        }

        assert_int_equal(hist_log2_usec(&h, false, out), 31);
        assert_int_equal(hist_log2_usec(&h, true, cum), 31);
        assert_int_equal(out[0], 1 + 2 + 3 + 4);
        assert_int_equal(out[1], 5);
        assert_int_equal(out[2], 6);
        assert_int_equal(out[3], 7);
        assert_int_equal(out[10], 8);
        assert_int_equal(out[21], 9);
        assert_int_equal(out[30], 10);
        assert_int_equal(out[4], 0);
        assert_int_equal(cum[0], 10);
        assert_int_equal(cum[3], 28);
        assert_int_equal(cum[9], 28);
        assert_int_equal(cum[10], 36);
        assert_int_equal(cum[HIST_LOG2_USEC_SLOTS - 1], h.count);
}

static void test_log2_random(void **state) {
        _cleanup_free_ uint64_t *v = malloc(40000 * sizeof(uint64_t));
        assert_non_null(v);

        for (enum dist d = 0; d < _DIST_MAX; d++) {
                uint64_t exact[HIST_LOG2_USEC_SLOTS] = {}, out[HIST_LOG2_USEC_SLOTS], cum[HIST_LOG2_USEC_SLOTS];
                Hist h;
                Rng r = { 100 + (uint64_t) d };
                size_t last = 0, n;
                uint64_t total = 0;

                hist_init(&h);
                for (size_t i = 0; i < 40000; i++) {
                        v[i] = dist_sample(d, &r);
                        hist_record(&h, v[i]);
                        exact[exact_log2_slot(v[i])]++;
                        if (exact_log2_slot(v[i]) + 1 > last)
                                last = exact_log2_slot(v[i]) + 1;
                }

                n = hist_log2_usec(&h, false, out);
                assert_int_equal(hist_log2_usec(&h, true, cum), n);
                assert_true(n >= last - 1 && n <= last + 1);

                for (size_t k = 0; k < HIST_LOG2_USEC_SLOTS; k++) {
                        /* Slot k is [2^k, 2^(k+1)) us, slot 0 starts at 0. */
                        uint64_t slack = (k > 0 ? count_near(v, 40000, UINT64_C(1000) << k) : 0) +
                                         count_near(v, 40000, UINT64_C(2000) << k);

                        if (absdiff(out[k], exact[k]) > slack)
                                fail_msg("%s slot %zu: got %" PRIu64 ", exact %" PRIu64, dist_name[d], k, out[k], exact[k]);
                        total += out[k];
                        assert_int_equal(cum[k], total);
                }
                assert_int_equal(total, 40000);
        }
}

/* ---- sliding windows, against a replay of every record ---- */

struct rec {
        uint64_t t, v;
};

static void expect_window(const HistWindow *w, const struct rec *recs, size_t n_recs,
                          HistWindowSpan span, uint64_t now) {
        _cleanup_free_ Hist *got = malloc(sizeof(Hist)), *want = malloc(sizeof(Hist));
        uint64_t slot = span == HIST_WINDOW_1MIN ? HIST_WINDOW_SHORT_SLOT_USEC : HIST_WINDOW_LONG_SLOT_USEC;
        uint64_t slots = span == HIST_WINDOW_1MIN ? HIST_WINDOW_SHORT_SLOTS : HIST_WINDOW_LONG_SLOTS;

        assert_true(got && want);
        hist_init(want);
        for (size_t i = 0; i < n_recs; i++)
                if (span == HIST_WINDOW_TOTAL || recs[i].t / slot + slots > now / slot)
                        hist_record(want, recs[i].v);

        hist_window_get(w, span, now, got);
        if (got->count != want->count)
                fail_msg("span %s at %" PRIu64 " us: count %" PRIu64 ", want %" PRIu64,
                         hist_window_span_to_string(span), now, got->count, want->count);
        assert_memory_equal(got, want, sizeof(Hist));
}

static void expect_all(const HistWindow *w, const struct rec *recs, size_t n_recs, uint64_t now) {
        for (HistWindowSpan s = 0; s < _HIST_WINDOW_SPAN_MAX; s++)
                expect_window(w, recs, n_recs, s, now);
}

static void test_window_boundaries(void **state) {
        _cleanup_free_ HistWindow *w = malloc(sizeof(HistWindow));
        Hist h;

        assert_non_null(w);
        hist_window_init(w);
        hist_window_get(w, HIST_WINDOW_1MIN, 0, &h);
        assert_int_equal(h.count, 0);

        hist_window_record(w, 0, 1000);
        hist_window_record(w, 9999999, 2000);   /* same 10 s slot */
        hist_window_record(w, 10000000, 3000);  /* next one */

        hist_window_get(w, HIST_WINDOW_1MIN, 59999999, &h);
        assert_int_equal(h.count, 3);
        hist_window_get(w, HIST_WINDOW_1MIN, 60000000, &h);     /* first slot expired */
        assert_int_equal(h.count, 1);
        assert_int_equal(h.min, 3000);
        assert_int_equal(h.sum_lo, 3000);
        hist_window_get(w, HIST_WINDOW_1MIN, 70000000, &h);
        assert_int_equal(h.count, 0);
        assert_int_equal(h.min, UINT64_MAX);

        hist_window_get(w, HIST_WINDOW_10MIN, 599999999, &h);
        assert_int_equal(h.count, 3);
        hist_window_get(w, HIST_WINDOW_10MIN, 600000000, &h);
        assert_int_equal(h.count, 0);
        hist_window_get(w, HIST_WINDOW_TOTAL, 600000000, &h);
        assert_int_equal(h.count, 3);
        assert_int_equal(h.sum_lo, 6000);
}

static void test_window_no_movement(void **state) {
        _cleanup_free_ HistWindow *w = malloc(sizeof(HistWindow));
        _cleanup_free_ struct rec *recs = malloc(5000 * sizeof(struct rec));
        Rng r = { 3 };

        assert_true(w && recs);
        hist_window_init(w);
        for (size_t i = 0; i < 5000; i++) {
                recs[i] = (struct rec) { .t = 123456789, .v = dist_sample(DIST_LOGNORMAL, &r) };
                hist_window_record(w, recs[i].t, recs[i].v);
                if (i % 1000 == 999)
                        expect_all(w, recs, i + 1, recs[i].t);
        }
        /* Reading does not age anything. */
        for (int i = 0; i < 3; i++)
                expect_all(w, recs, 5000, 123456789);
}

static void test_window_big_jump(void **state) {
        _cleanup_free_ HistWindow *w = malloc(sizeof(HistWindow));
        struct rec recs[64];
        size_t n = 0;
        uint64_t t = 5000000;
        Hist h;

        assert_non_null(w);
        hist_window_init(w);
        for (; n < 30; n++) {
                recs[n] = (struct rec) { .t = t + n * 1000000, .v = 1000 + n };
                hist_window_record(w, recs[n].t, recs[n].v);
        }
        t = recs[n - 1].t;
        expect_all(w, recs, n, t);

        /* Far beyond both windows: everything expires, total stays. */
        t += UINT64_C(3600) * 1000000;
        expect_all(w, recs, n, t);
        hist_window_get(w, HIST_WINDOW_10MIN, t, &h);
        assert_int_equal(h.count, 0);
        hist_window_get(w, HIST_WINDOW_TOTAL, t, &h);
        assert_int_equal(h.count, 30);

        recs[n] = (struct rec) { .t = t, .v = 777777 };
        hist_window_record(w, recs[n].t, recs[n].v);
        n++;
        expect_all(w, recs, n, t);
        hist_window_get(w, HIST_WINDOW_1MIN, t, &h);
        assert_int_equal(h.count, 1);
        assert_int_equal(h.min, 777777);

        /* Exactly one ring length later: the same ring position, a newer epoch. */
        t += HIST_WINDOW_SHORT_SLOTS * HIST_WINDOW_SHORT_SLOT_USEC;
        recs[n] = (struct rec) { .t = t, .v = 888888 };
        hist_window_record(w, recs[n].t, recs[n].v);
        n++;
        expect_all(w, recs, n, t);
        hist_window_get(w, HIST_WINDOW_1MIN, t, &h);
        assert_int_equal(h.count, 1);
        assert_int_equal(h.max, 888888);
        hist_window_get(w, HIST_WINDOW_10MIN, t, &h);
        assert_int_equal(h.count, 2);

        t += HIST_WINDOW_LONG_SLOTS * HIST_WINDOW_LONG_SLOT_USEC;
        recs[n] = (struct rec) { .t = t, .v = 999999 };
        hist_window_record(w, recs[n].t, recs[n].v);
        n++;
        expect_all(w, recs, n, t);
        hist_window_get(w, HIST_WINDOW_10MIN, t, &h);
        assert_int_equal(h.count, 1);
        assert_int_equal(h.max, 999999);
}

static void test_window_backwards(void **state) {
        _cleanup_free_ HistWindow *w = malloc(sizeof(HistWindow));
        Hist h;

        assert_non_null(w);
        hist_window_init(w);
        hist_window_record(w, 100000000, 5000);
        hist_window_record(w, 50000000, 6000);  /* treated as 100 s */
        hist_window_get(w, HIST_WINDOW_1MIN, 0, &h);
        assert_int_equal(h.count, 2);
        hist_window_get(w, HIST_WINDOW_1MIN, 159999999, &h);
        assert_int_equal(h.count, 2);
        hist_window_get(w, HIST_WINDOW_1MIN, 160000000, &h);
        assert_int_equal(h.count, 0);
}

/* Random steps (none, small, slot-sized, beyond a window) against the replay. */
static void test_window_random_walk(void **state) {
        _cleanup_free_ HistWindow *w = malloc(sizeof(HistWindow));
        _cleanup_free_ struct rec *recs = malloc(20000 * sizeof(struct rec));
        Rng r = { 11 };
        uint64_t t = 1;
        size_t n = 0;

        assert_true(w && recs);
        hist_window_init(w);

        for (int step = 0; step < 4000; step++) {
                uint64_t k = rng_next(&r) % 100;

                if (k < 20)
                        ;                                               /* same time */
                else if (k < 80)
                        t += rng_next(&r) % 3000000;                    /* < 3 s */
                else if (k < 95)
                        t += rng_next(&r) % 70000000;                   /* < 70 s */
                else
                        t += rng_next(&r) % UINT64_C(1300000000);       /* < 21.7 min */

                for (uint64_t m = rng_next(&r) % 5; m > 0; m--) {
                        recs[n] = (struct rec) { .t = t, .v = dist_sample(DIST_BIMODAL, &r) };
                        hist_window_record(w, recs[n].t, recs[n].v);
                        n++;
                }
                if (step % 8 == 0)
                        expect_all(w, recs, n, t + rng_next(&r) % 20000000);
        }
        expect_all(w, recs, n, t);
        assert_true(n > 5000);
}

static void test_window_percentile(void **state) {
        _cleanup_free_ HistWindow *w = malloc(sizeof(HistWindow));
        Hist h;
        uint64_t p;

        assert_non_null(w);
        hist_window_init(w);
        /* Ten minutes of 100 us, then one minute of 10 ms. */
        for (uint64_t s = 0; s < 600; s++)
                for (int i = 0; i < 10; i++)
                        hist_window_record(w, s * 1000000, 100000);
        for (uint64_t s = 600; s < 660; s++)
                for (int i = 0; i < 10; i++)
                        hist_window_record(w, s * 1000000, 10000000);

        hist_window_get(w, HIST_WINDOW_1MIN, 659000000, &h);
        assert_int_equal(hist_percentile(&h, 50, &p), 0);
        assert_int_equal(p, 10000000);
        /* 10 min: 540 s of 100 us (60 s expired) and 60 s of 10 ms. */
        hist_window_get(w, HIST_WINDOW_10MIN, 659000000, &h);
        assert_int_equal(h.count, 6000);
        assert_int_equal(hist_percentile(&h, 50, &p), 0);
        assert_true(within_bound(p, 100000));
        assert_int_equal(hist_percentile(&h, 95, &p), 0);
        assert_true(within_bound(p, 10000000));
        hist_window_get(w, HIST_WINDOW_TOTAL, 659000000, &h);
        assert_int_equal(h.count, 6600);
}

static void test_memory(void **state) {
        assert_true(sizeof(HistWindow) <= 64 * 1024);
        assert_true(sizeof(HistSlot) < 2500);
        assert_string_equal(hist_window_span_to_string(HIST_WINDOW_10MIN), "10m");
        assert_null(hist_window_span_to_string(_HIST_WINDOW_SPAN_MAX));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_bucket_layout),
                cmocka_unit_test(test_value_bound),
                cmocka_unit_test(test_rank),
                cmocka_unit_test(test_percentile_accuracy),
                cmocka_unit_test(test_percentile_errors),
                cmocka_unit_test(test_out_of_range),
                cmocka_unit_test(test_diff),
                cmocka_unit_test(test_merge),
                cmocka_unit_test(test_iterate),
                cmocka_unit_test(test_count_le),
                cmocka_unit_test(test_log2_fixed),
                cmocka_unit_test(test_log2_random),
                cmocka_unit_test(test_window_boundaries),
                cmocka_unit_test(test_window_no_movement),
                cmocka_unit_test(test_window_big_jump),
                cmocka_unit_test(test_window_backwards),
                cmocka_unit_test(test_window_random_walk),
                cmocka_unit_test(test_window_percentile),
                cmocka_unit_test(test_memory),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
