/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A workload's signature (read share, request size, rate, depth): whether
 * it changed, how far two lie apart, and the workloads seen with the
 * setting a trial chose for each, as the state file's lines hold them. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "autotune.h"
#include "util.h"

void autotune_signature(const AutotuneEpochFigures *e, AutotuneSignature *ret) {
        double ios = e->read_iops + e->write_iops;
        *ret = (AutotuneSignature) {
                .iops = ios,
                .read_share = ios > 0 ? e->read_iops / ios : 0,
                .avg_kb = ios > 0 ? (e->read_mbps + e->write_mbps) * 1e6 / 1024 / ios : 0,
                .depth = e->in_flight,
        };
}

static bool factor_apart(double a, double b, double f) {
        if (a <= 0 || b <= 0)
                return (a > 0) != (b > 0);
        return a > b * f || b > a * f;
}

bool autotune_workload_changed(const AutotuneSignature *a, const AutotuneSignature *b, double min_iops) {
        if (a->iops < min_iops && b->iops < min_iops)
                return false; /* idle then and now: noise */
        if ((a->iops < min_iops) != (b->iops < min_iops))
                return true; /* woke up, or went idle */
        return fabs(a->read_share - b->read_share) > 0.25 || factor_apart(a->avg_kb, b->avg_kb, 2) ||
               factor_apart(a->iops, b->iops, 2);
}

static double log2_ratio(double a, double b) {
        if (a <= 0 && b <= 0)
                return 0;
        if (a <= 0 || b <= 0)
                return INFINITY;
        return fabs(log2(a / b));
}

double autotune_signature_distance(const AutotuneSignature *a, const AutotuneSignature *b) {
        double d = fabs(a->read_share - b->read_share) / 0.25;
        d = fmax(d, log2_ratio(a->avg_kb, b->avg_kb));
        d = fmax(d, log2_ratio(a->iops, b->iops) / 2);
        d = fmax(d, log2_ratio(a->depth + 1, b->depth + 1) / 2);
        return d;
}

bool autotune_series_signature(const AutotuneSeries *series, size_t n, AutotuneSignature *ret) {
        double rs[AUTOTUNE_MAX_EPOCHS * 2], kb[AUTOTUNE_MAX_EPOCHS * 2], io[AUTOTUNE_MAX_EPOCHS * 2],
                dp[AUTOTUNE_MAX_EPOCHS * 2];
        size_t k = 0;

        for (size_t c = 0; c < n; c++)
                for (size_t i = 0; i < series[c].n && k < ELEMENTSOF(rs); i++) {
                        AutotuneSignature s;
                        if (!series[c].epochs[i].valid)
                                continue;
                        autotune_signature(&series[c].epochs[i], &s);
                        rs[k] = s.read_share, kb[k] = s.avg_kb, io[k] = s.iops, dp[k] = s.depth;
                        k++;
                }
        if (k == 0)
                return false;
        *ret = (AutotuneSignature) { .read_share = autotune_median(rs, k), .avg_kb = autotune_median(kb, k),
                                 .iops = autotune_median(io, k), .depth = autotune_median(dp, k) };
        return true;
}

void autotune_memory_record(AutotuneMemory *m, size_t *n, const AutotuneSignature *sig, const AutotuneCandidate *c,
                            uint64_t now_usec) {
        size_t at = *n;
        double best = INFINITY;

        for (size_t i = 0; i < *n; i++) {
                double d = autotune_signature_distance(&m[i].sig, sig);
                if (d <= AUTOTUNE_MEMORY_MATCH && d < best) {
                        best = d;
                        at = i;
                }
        }
        if (at == *n && *n == AUTOTUNE_MEMORY_MAX) {
                at = 0;
                for (size_t i = 1; i < *n; i++)
                        if (m[i].realtime_usec < m[at].realtime_usec)
                                at = i;
        }
        m[at] = (AutotuneMemory) { .sig = *sig, .cand = *c, .realtime_usec = now_usec };
        m[at].cand.baseline = false;
        if (at == *n)
                (*n)++;
}

int autotune_memory_find(const AutotuneMemory *m, size_t n, const AutotuneSignature *sig, double min_iops) {
        int at = -1;
        double best = INFINITY;

        if (sig->iops < min_iops)
                return -1;
        for (size_t i = 0; i < n; i++) {
                double d = autotune_signature_distance(&m[i].sig, sig);
                if (d <= AUTOTUNE_MEMORY_MATCH && d < best) {
                        best = d;
                        at = (int) i;
                }
        }
        return at;
}

int autotune_memory_format(const char *id, uint64_t diskseq, const AutotuneMemory *e, char *buf, size_t size) {
        if (!id || !*id || strpbrk(id, "\t\n") || strpbrk(e->cand.scheduler, "\t\n "))
                return -EINVAL;
        int r = snprintf(buf, size, "%s\t%" PRIu64 "\t%.6g\t%.6g\t%.6g\t%.6g\t%" PRIu64 "\t%s\t%u\t%lld", id, diskseq,
                         e->sig.read_share, e->sig.avg_kb, e->sig.iops, e->sig.depth, e->realtime_usec,
                         e->cand.scheduler, e->cand.nr_requests,
                         e->cand.wbt_lat_usec == AUTOTUNE_WBT_UNSET ? LLONG_MIN : e->cand.wbt_lat_usec);
        /* the read-ahead and the tunables, only when set (the lines of
         * before them stay as they were) */
        for (size_t t = 0; e->cand.set && t <= _AUTOTUNE_TUN_MAX + 1 && r >= 0 && (size_t) r < size; t++)
                r += t == 0   ? snprintf(buf + r, size - (size_t) r, "\t%u", e->cand.set)
                     : t == 1 ? snprintf(buf + r, size - (size_t) r, "\t%u", e->cand.read_ahead_kb)
                              : snprintf(buf + r, size - (size_t) r, "\t%lld", e->cand.tun[t - 2]);
        return r < 0 || (size_t) r >= size ? -ENOBUFS : 0;
}

int autotune_memory_parse(const char *line, char *idbuf, size_t idsize, uint64_t *ret_diskseq, AutotuneMemory *ret) {
        const char *tab = strchr(line, '\t');
        AutotuneMemory e = {};
        uint64_t seq;
        char sched[32];
        long long wbt;
        int used = 0;

        if (!tab || tab == line || (size_t) (tab - line) >= idsize)
                return -EINVAL;
        if (sscanf(tab + 1, "%" SCNu64 "\t%lf\t%lf\t%lf\t%lf\t%" SCNu64 "\t%31[^\t]\t%u\t%lld%n", &seq,
                   &e.sig.read_share, &e.sig.avg_kb, &e.sig.iops, &e.sig.depth, &e.realtime_usec, sched,
                   &e.cand.nr_requests, &wbt, &used) != 9)
                return -EINVAL;
        const char *rest = tab + 1 + used;
        if (*rest == '\t') {
                int u = 0;
                if (sscanf(rest, "\t%u\t%u%n", &e.cand.set, &e.cand.read_ahead_kb, &u) != 2 || e.cand.set == 0 ||
                    e.cand.set >= (AUTOTUNE_SET_READ_AHEAD << 1))
                        return -EINVAL;
                rest += u;
                for (size_t t = 0; t < _AUTOTUNE_TUN_MAX; t++) {
                        if (sscanf(rest, "\t%lld%n", &e.cand.tun[t], &u) != 1)
                                return -EINVAL;
                        rest += u;
                }
        }
        if (*rest != 0)
                return -EINVAL;
        if (!isfinite(e.sig.read_share) || e.sig.read_share < 0 || e.sig.read_share > 1 || !(e.sig.avg_kb >= 0) ||
            !(e.sig.iops >= 0) || !(e.sig.depth >= 0) || !isfinite(e.sig.avg_kb) || !isfinite(e.sig.iops) ||
            !isfinite(e.sig.depth) || !*sched)
                return -EINVAL;
        snprintf(e.cand.scheduler, sizeof e.cand.scheduler, "%s", sched);
        e.cand.wbt_lat_usec = wbt == LLONG_MIN ? AUTOTUNE_WBT_UNSET : wbt;
        memcpy(idbuf, line, (size_t) (tab - line));
        idbuf[tab - line] = 0;
        *ret_diskseq = seq;
        *ret = e;
        return 0;
}
