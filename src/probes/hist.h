/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Latency histograms: pure data structures, no clock reads, no allocation, no
 * locking. The caller owns serialisation (one writer per histogram; readers
 * that run on another thread must hold the same lock as the writer).
 *
 * Bucketing is log-linear (HDR style): every power of two [2^k, 2^(k+1)) is
 * split into HIST_SUB_BUCKETS equal sub-buckets, values below
 * 2 * HIST_SUB_BUCKETS get one bucket each and are exact. A bucket's width is
 * therefore at most 1/HIST_SUB_BUCKETS of its lower bound, and reporting a
 * bucket by its midpoint (hist_bucket_value()) is off by at most
 *
 *         HIST_REL_ERROR = 1 / (2 * HIST_SUB_BUCKETS) = 1/32 = 3.125 %
 *
 * relative to any value that fell into it. hist_percentile() has this bound
 * against the exact nearest-rank percentile of the recorded samples, as long
 * as that sample is <= HIST_VALUE_MAX (2^40 - 1 ns, about 18 minutes). Larger
 * values are counted in the last bucket; count, sum, min and max stay exact.
 *
 * Memory: Hist is 4776 bytes (64-bit counts), HistSlot 2400
 * (32-bit counts), HistWindow 43184 (42.2 KiB) per device, see below. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HIST_SUB_BITS 4
#define HIST_SUB_BUCKETS (1u << HIST_SUB_BITS)
#define HIST_RANGE_BITS 40
#define HIST_VALUE_MAX ((UINT64_C(1) << HIST_RANGE_BITS) - 1)
/* Group 0 holds 0 .. HIST_SUB_BUCKETS-1 linearly, group g >= 1 holds
 * [2^(g+SUB_BITS-1), 2^(g+SUB_BITS)) in HIST_SUB_BUCKETS sub-buckets. */
#define HIST_GROUPS (HIST_RANGE_BITS - HIST_SUB_BITS + 1)
#define HIST_BUCKETS (HIST_GROUPS * HIST_SUB_BUCKETS)
/* As a fraction: |reported - exact| * HIST_REL_ERROR_DEN <= exact. */
#define HIST_REL_ERROR_DEN (2 * HIST_SUB_BUCKETS)
#define HIST_REL_ERROR (1.0 / HIST_REL_ERROR_DEN)

typedef struct Hist {
        uint64_t count;
        uint64_t sum_lo, sum_hi;        /* 128-bit sum of recorded values */
        uint64_t min, max;              /* exact; UINT64_MAX and 0 while empty */
        uint64_t buckets[HIST_BUCKETS];
} Hist;

static inline size_t hist_bucket_index(uint64_t v) {
        unsigned msb, shift;

        if (v < HIST_SUB_BUCKETS)
                return (size_t) v;
        if (v > HIST_VALUE_MAX)
                v = HIST_VALUE_MAX;
        msb = 63u - (unsigned) __builtin_clzll(v);
        shift = msb - HIST_SUB_BITS;
        return (size_t) (shift + 1) * HIST_SUB_BUCKETS + (size_t) ((v >> shift) & (HIST_SUB_BUCKETS - 1));
}

/* Bucket i holds [hist_bucket_lower(i), hist_bucket_upper(i)). */
uint64_t hist_bucket_lower(size_t i);
uint64_t hist_bucket_upper(size_t i);
/* The value a sample in bucket i is reported as: the midpoint, rounded down. */
uint64_t hist_bucket_value(size_t i);

void hist_reset(Hist *h);
#define hist_init hist_reset

/* O(1): one bucket increment plus count/sum/min/max. */
static inline void hist_record(Hist *h, uint64_t v) {
        h->buckets[hist_bucket_index(v)]++;
        h->count++;
        h->sum_lo += v;
        h->sum_hi += h->sum_lo < v;
        if (v < h->min)
                h->min = v;
        if (v > h->max)
                h->max = v;
}

/* dst += src. */
void hist_merge(Hist *dst, const Hist *src);
/* The samples recorded into now since it was copied as then (bucket by
 * bucket; min and max become the bounds of the outer non-empty buckets).
 * -EINVAL if then is not an earlier copy of now (a count went down). */
int hist_diff(Hist *ret, const Hist *now, const Hist *then);

/* Sum of the recorded values as a double (exact up to 2^53) and the mean. */
double hist_sum(const Hist *h);
double hist_mean(const Hist *h);     /* NaN when empty */

/* Nearest-rank percentile: the smallest recorded x such that at least
 * hist_rank(p, count) samples are <= x; reported as its bucket's midpoint,
 * clamped to [min, max]. p = 100 gives max exactly, p = 0 gives min.
 * -EINVAL for p outside [0, 100] or NaN, -ENODATA when empty. */
int hist_percentile(const Hist *h, double p, uint64_t *ret);
/* The 1-based rank used above: ceil(p / 100 * n) clamped to [1, n], where
 * values within 1e-9 (relative) above an integer count as that integer. */
uint64_t hist_rank(double p, uint64_t n);

/* Number of samples whose reported value (bucket midpoint) is <= v; exact
 * below min and at or above max. Monotonic in v. */
uint64_t hist_count_le(const Hist *h, uint64_t v);

/* Iteration over non-empty buckets in ascending order, for export:
 *
 *         size_t it = 0;
 *         HistBucket b;
 *         while (hist_bucket_next(h, &it, &b))
 *                 ...
 */
typedef struct HistBucket {
        uint64_t lower;  /* inclusive, ns */
        uint64_t upper;  /* exclusive, ns */
        uint64_t count;
} HistBucket;
bool hist_bucket_next(const Hist *h, size_t *iter, HistBucket *ret);

/* biolatency-style log2 microsecond buckets: slot 0 is [0, 2) usec, slot
 * k >= 1 is [2^k, 2^(k+1)) usec. Each HDR bucket goes whole to the slot of its
 * midpoint, so only samples within one bucket width (<= 1/16) of a slot
 * boundary can land in a neighbour slot. With cumulative, ret[k] counts
 * everything below 2^(k+1) usec instead. Returns the number of slots up to and
 * including the last non-empty one (0 when empty); ret[] is filled in full. */
#define HIST_LOG2_USEC_SLOTS 32
size_t hist_log2_usec(const Hist *h, bool cumulative, uint64_t ret[static HIST_LOG2_USEC_SLOTS]);

/* One interval of a sliding window. 32-bit bucket counts keep the window
 * small; a bucket saturates at UINT32_MAX instead of wrapping, which would
 * take 4.3e9 completions of one bucket in one slot (72 M IOPS for 60 s). */
typedef struct HistSlot {
        uint64_t epoch;                 /* now_usec / slot length; HIST_EPOCH_NONE if unused */
        uint64_t sum;
        uint64_t min, max;
        uint32_t buckets[HIST_BUCKETS];
} HistSlot;
#define HIST_EPOCH_NONE UINT64_MAX

/* Sliding windows over completions of one device, built from two rings of
 * per-interval histograms, plus everything since start (or the last reset):
 *
 *         1 min:   6 slots of 10 s  (14.1 KiB)
 *         10 min: 10 slots of 60 s  (23.4 KiB)
 *         total:  one Hist        (4.7 KiB)
 *
 * A window is the current, partly filled slot plus the n-1 before it, so it
 * covers between (n-1) and n slot lengths: 50..60 s and 9..10 min. Ten slots
 * per window keep the trailing edge within 10 % without one-second slots,
 * which would need 60 slots for the 1 min window alone (141 KiB). A record
 * touches three buckets; a slot is cleared lazily when its ring position is
 * reused for a newer interval (memset of 2.3 KiB at most once per slot
 * length), and expired slots are skipped by epoch when read, so jumps of any
 * size and repeated calls with the same time need no catch-up work.
 *
 * Time is the caller's (CLOCK_MONOTONIC usec is the intended source). It must
 * not go backwards; if it does, the latest time seen is used instead. */
#define HIST_WINDOW_SHORT_SLOTS 6
#define HIST_WINDOW_SHORT_SLOT_USEC (UINT64_C(10) * 1000000)
#define HIST_WINDOW_LONG_SLOTS 10
#define HIST_WINDOW_LONG_SLOT_USEC (UINT64_C(60) * 1000000)

typedef enum HistWindowSpan {
        HIST_WINDOW_1MIN,
        HIST_WINDOW_10MIN,
        HIST_WINDOW_TOTAL,
        _HIST_WINDOW_SPAN_MAX,
} HistWindowSpan;

typedef struct HistWindow {
        uint64_t last_usec;
        HistSlot short_slots[HIST_WINDOW_SHORT_SLOTS];
        HistSlot long_slots[HIST_WINDOW_LONG_SLOTS];
        Hist total;
} HistWindow;

void hist_window_reset(HistWindow *w);
#define hist_window_init hist_window_reset
void hist_window_record(HistWindow *w, uint64_t now_usec, uint64_t value_ns);
/* Fills *ret with the samples in the span as of now_usec; never fails. */
void hist_window_get(const HistWindow *w, HistWindowSpan span, uint64_t now_usec, Hist *ret);
const char *hist_window_span_to_string(HistWindowSpan s);
