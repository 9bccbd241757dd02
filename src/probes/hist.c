/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "cleanup.h"
#include "hist.h"

static_assert(HIST_SUB_BITS >= 1 && HIST_SUB_BITS < HIST_RANGE_BITS, "bad HIST_SUB_BITS");
static_assert(HIST_RANGE_BITS < 63, "bad HIST_RANGE_BITS");
static_assert(sizeof(HistWindow) <= 64 * 1024, "HistWindow should stay below 64 KiB per device");

uint64_t hist_bucket_lower(size_t i) {
        size_t g = i / HIST_SUB_BUCKETS, sub = i % HIST_SUB_BUCKETS;

        if (g == 0)
                return sub;
        return (uint64_t) (HIST_SUB_BUCKETS + sub) << (g - 1);
}

uint64_t hist_bucket_upper(size_t i) {
        size_t g = i / HIST_SUB_BUCKETS;

        return hist_bucket_lower(i) + (g == 0 ? 1 : UINT64_C(1) << (g - 1));
}

uint64_t hist_bucket_value(size_t i) {
        return hist_bucket_lower(i) + (hist_bucket_upper(i) - hist_bucket_lower(i)) / 2;
}

void hist_reset(Hist *h) {
        memset(h, 0, sizeof(*h));
        h->min = UINT64_MAX;
}

void hist_merge(Hist *dst, const Hist *src) {
        if (src->count == 0)
                return;

        for (size_t i = 0; i < HIST_BUCKETS; i++)
                dst->buckets[i] += src->buckets[i];
        dst->count += src->count;
        dst->sum_lo += src->sum_lo;
        dst->sum_hi += src->sum_hi + (dst->sum_lo < src->sum_lo);
        if (src->min < dst->min)
                dst->min = src->min;
        if (src->max > dst->max)
                dst->max = src->max;
}

int hist_diff(Hist *ret, const Hist *now, const Hist *then) {
        if (now->count < then->count)
                return -EINVAL;
        hist_reset(ret);
        for (size_t i = 0; i < HIST_BUCKETS; i++) {
                if (now->buckets[i] < then->buckets[i])
                        return -EINVAL;
                uint64_t n = now->buckets[i] - then->buckets[i];
                if (n == 0)
                        continue;
                ret->buckets[i] = n;
                ret->count += n;
                if (ret->min == UINT64_MAX)
                        ret->min = hist_bucket_lower(i);
                ret->max = hist_bucket_upper(i) - 1;
        }
        ret->sum_lo = now->sum_lo - then->sum_lo;
        ret->sum_hi = now->sum_hi - then->sum_hi - (now->sum_lo < then->sum_lo);
        return 0;
}

double hist_sum(const Hist *h) {
        return (double) h->sum_hi * 18446744073709551616.0 + (double) h->sum_lo;
}

double hist_mean(const Hist *h) {
        if (h->count == 0)
                return __builtin_nan("");
        return hist_sum(h) / (double) h->count;
}

uint64_t hist_rank(double p, uint64_t n) {
        double x = p * (double) n / 100.0;
        uint64_t r;

        /* ceil() without libm, and with a little slack: 99.9 is not exact in
         * binary, and p99.9 of 1000 samples should be the 999th, not the
         * 1000th. */
        if (!(x > 0))
                return n > 0 ? 1 : 0;
        if (x >= (double) n)
                return n;
        r = (uint64_t) x;
        if (x - (double) r > x * 1e-9)
                r++;
        return r < 1 ? 1 : r;
}

static uint64_t clamp_u64(uint64_t v, uint64_t lo, uint64_t hi) {
        return v < lo ? lo : v > hi ? hi : v;
}

int hist_percentile(const Hist *h, double p, uint64_t *ret) {
        uint64_t rank, seen = 0;

        if (!(p >= 0 && p <= 100))
                return -EINVAL;
        if (h->count == 0)
                return -ENODATA;

        rank = hist_rank(p, h->count);
        if (rank == h->count) {
                *ret = h->max;
                return 0;
        }
        if (rank == 1) {
                *ret = h->min;
                return 0;
        }

        for (size_t i = 0; i < HIST_BUCKETS; i++) {
                seen += h->buckets[i];
                if (seen >= rank) {
                        *ret = clamp_u64(hist_bucket_value(i), h->min, h->max);
                        return 0;
                }
        }

        /* Not reached while count matches the buckets. */
        *ret = h->max;
        return 0;
}

uint64_t hist_count_le(const Hist *h, uint64_t v) {
        uint64_t n = 0;

        if (h->count == 0 || v < h->min)
                return 0;
        if (v >= h->max)
                return h->count;

        for (size_t i = 0; i < HIST_BUCKETS && hist_bucket_value(i) <= v; i++)
                n += h->buckets[i];
        return n;
}

bool hist_bucket_next(const Hist *h, size_t *iter, HistBucket *ret) {
        for (size_t i = *iter; i < HIST_BUCKETS; i++) {
                if (h->buckets[i] == 0)
                        continue;

                *ret = (HistBucket) {
                        .lower = hist_bucket_lower(i),
                        .upper = hist_bucket_upper(i),
                        .count = h->buckets[i],
                };
                *iter = i + 1;
                return true;
        }

        *iter = HIST_BUCKETS;
        return false;
}

static size_t log2_usec_slot(uint64_t ns) {
        uint64_t us = ns / 1000;
        size_t k;

        if (us < 2)
                return 0;
        k = 63u - (unsigned) __builtin_clzll(us);
        return k < HIST_LOG2_USEC_SLOTS ? k : HIST_LOG2_USEC_SLOTS - 1;
}

size_t hist_log2_usec(const Hist *h, bool cumulative, uint64_t ret[static HIST_LOG2_USEC_SLOTS]) {
        size_t n = 0;

        memset(ret, 0, sizeof(uint64_t) * HIST_LOG2_USEC_SLOTS);

        for (size_t i = 0; i < HIST_BUCKETS; i++) {
                size_t k;

                if (h->buckets[i] == 0)
                        continue;

                k = log2_usec_slot(hist_bucket_value(i));
                ret[k] += h->buckets[i];
                if (k + 1 > n)
                        n = k + 1;
        }

        if (cumulative)
                for (size_t k = 1; k < HIST_LOG2_USEC_SLOTS; k++)
                        ret[k] += ret[k - 1];

        return n;
}

static void slot_reset(HistSlot *s, uint64_t epoch) {
        memset(s, 0, sizeof(*s));
        s->epoch = epoch;
        s->min = UINT64_MAX;
}

/* Caller has already clamped now to w->last_usec. */
static void slot_record(HistSlot *slots, size_t n_slots, uint64_t slot_usec,
                        uint64_t now_usec, size_t idx, uint64_t v) {
        uint64_t epoch = now_usec / slot_usec;
        HistSlot *s = &slots[epoch % n_slots];

        if (s->epoch != epoch)
                slot_reset(s, epoch);

        if (_likely_(s->buckets[idx] != UINT32_MAX))
                s->buckets[idx]++;
        s->sum += v;
        if (v < s->min)
                s->min = v;
        if (v > s->max)
                s->max = v;
}

static void slots_merge(const HistSlot *slots, size_t n_slots, uint64_t slot_usec,
                        uint64_t now_usec, Hist *ret) {
        uint64_t epoch = now_usec / slot_usec;

        for (size_t j = 0; j < n_slots; j++) {
                const HistSlot *s = &slots[j];
                uint64_t n = 0;

                /* Unused, or older than the window; epochs are never ahead of now. */
                if (s->epoch == HIST_EPOCH_NONE || s->epoch > epoch || epoch - s->epoch >= n_slots)
                        continue;

                for (size_t i = 0; i < HIST_BUCKETS; i++) {
                        ret->buckets[i] += s->buckets[i];
                        n += s->buckets[i];
                }
                if (n == 0)
                        continue;

                ret->count += n;
                ret->sum_lo += s->sum;
                ret->sum_hi += ret->sum_lo < s->sum;
                if (s->min < ret->min)
                        ret->min = s->min;
                if (s->max > ret->max)
                        ret->max = s->max;
        }
}

void hist_window_reset(HistWindow *w) {
        w->last_usec = 0;
        for (size_t j = 0; j < HIST_WINDOW_SHORT_SLOTS; j++)
                slot_reset(&w->short_slots[j], HIST_EPOCH_NONE);
        for (size_t j = 0; j < HIST_WINDOW_LONG_SLOTS; j++)
                slot_reset(&w->long_slots[j], HIST_EPOCH_NONE);
        hist_reset(&w->total);
}

void hist_window_record(HistWindow *w, uint64_t now_usec, uint64_t value_ns) {
        size_t idx = hist_bucket_index(value_ns);

        if (now_usec < w->last_usec)
                now_usec = w->last_usec;
        w->last_usec = now_usec;

        slot_record(w->short_slots, HIST_WINDOW_SHORT_SLOTS, HIST_WINDOW_SHORT_SLOT_USEC, now_usec, idx, value_ns);
        slot_record(w->long_slots, HIST_WINDOW_LONG_SLOTS, HIST_WINDOW_LONG_SLOT_USEC, now_usec, idx, value_ns);
        hist_record(&w->total, value_ns);
}

void hist_window_get(const HistWindow *w, HistWindowSpan span, uint64_t now_usec, Hist *ret) {
        if (now_usec < w->last_usec)
                now_usec = w->last_usec;

        hist_reset(ret);
        switch (span) {
        case HIST_WINDOW_1MIN:
                slots_merge(w->short_slots, HIST_WINDOW_SHORT_SLOTS, HIST_WINDOW_SHORT_SLOT_USEC, now_usec, ret);
                break;
        case HIST_WINDOW_10MIN:
                slots_merge(w->long_slots, HIST_WINDOW_LONG_SLOTS, HIST_WINDOW_LONG_SLOT_USEC, now_usec, ret);
                break;
        case HIST_WINDOW_TOTAL:
                *ret = w->total;
                break;
        default:
                break;
        }
}

const char *hist_window_span_to_string(HistWindowSpan s) {
        static const char *const table[_HIST_WINDOW_SPAN_MAX] = {
                [HIST_WINDOW_1MIN] = "1m",
                [HIST_WINDOW_10MIN] = "10m",
                [HIST_WINDOW_TOTAL] = "total",
        };

        if ((unsigned) s >= _HIST_WINDOW_SPAN_MAX)
                return NULL;
        return table[s];
}
