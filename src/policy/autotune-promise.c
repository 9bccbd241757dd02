/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a trial promised when it changed the setting (the bound it was
 * admitted under), and whether the intervals watched after the change
 * keep it. */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "autotune.h"

void autotune_promise_make(const AutotunePolicy *p, const AutotuneSeries *series, const AutotuneSummary *sum, size_t n,
                           int winner, AutotunePromise *ret) {
        double best_write = p->write_seen_mbps; /* the phases before, in a search */

        *ret = (AutotunePromise) {};
        for (size_t c = 0; c < n; c++) /* every candidate measured, dropped or not */
                if (sum[c].n > 0)
                        best_write = fmax(best_write, sum[c].write_mbps);
        (void) autotune_series_signature(series, n, &ret->sig);
        if (winner < 0 || (size_t) winner >= n)
                return;
        ret->predicted_write_mbps = sum[winner].write_mbps;
        ret->predicted_read_ms = sum[winner].read_p99_ms > 0 ? sum[winner].read_p99_ms : sum[winner].read_await_ms;
        if (p->objective == AUTOTUNE_OBJECTIVE_READ_LATENCY) {
                if (best_write >= AUTOTUNE_MIN_WRITE_MBPS)
                        ret->write_floor_mbps = best_write * (1.0 - p->write_tolerance_pct / 100.0);
        } else if (p->objective == AUTOTUNE_OBJECTIVE_THROUGHPUT)
                ret->read_ceiling_ms = (double) p->read_target_usec / 1000.0;
}

AutotunePromiseState autotune_promise_check(const AutotunePolicy *p, const AutotunePromise *pr,
                                            const AutotuneEpochFigures *e, size_t k, char *why, size_t why_size) {
        double w[AUTOTUNE_PROMISE_MAX_INTERVALS], r[AUTOTUNE_PROMISE_MAX_INTERVALS];
        size_t m = 0;

        for (size_t i = 0; i < k && m < AUTOTUNE_PROMISE_MAX_INTERVALS; i++) {
                AutotuneSignature s;
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
                return AUTOTUNE_PROMISE_WATCHING;
        double mw = autotune_median(w, m), mr = autotune_median(r, m);
        if (pr->write_floor_mbps > 0 && mw < pr->write_floor_mbps) {
                snprintf(why, why_size,
                         "writes %.1f MB/s over %zu intervals of the workload, below the %.1f MB/s the trial's bound "
                         "assumed (it measured %.1f)",
                         mw, m, pr->write_floor_mbps, pr->predicted_write_mbps);
                return AUTOTUNE_PROMISE_BROKEN;
        }
        if (pr->read_ceiling_ms > 0 && mr > pr->read_ceiling_ms) {
                snprintf(why, why_size,
                         "read await %.2f ms over %zu intervals of the workload, above the target of %.2f ms "
                         "(the trial measured %.2f)",
                         mr, m, pr->read_ceiling_ms, pr->predicted_read_ms);
                return AUTOTUNE_PROMISE_BROKEN;
        }
        snprintf(why, why_size, "holds over %zu intervals of the workload: writes %.1f MB/s, read await %.2f ms", m, mw,
                 mr);
        return AUTOTUNE_PROMISE_HOLDS;
}
