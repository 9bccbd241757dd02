/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The figures of an epoch (from two samples of /sys/block/X/stat), the
 * figure an objective ranks by, and the statistics the decision tests
 * them with (the median, the exact Mann-Whitney rank test, Student's t). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune-internal.h"
#include "autotune.h"

int autotune_blockstat_parse(const char *text, AutotuneBlockStat *ret) {
        AutotuneBlockStat s = {};
        int n = sscanf(text, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
                       " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, &s.rd_ios, &s.rd_merges, &s.rd_sectors,
                       &s.rd_ticks, &s.wr_ios, &s.wr_merges, &s.wr_sectors, &s.wr_ticks, &s.in_flight, &s.io_ticks,
                       &s.time_in_queue);
        if (n != 11)
                return -EINVAL;
        *ret = s;
        return 0;
}

bool autotune_drained(const AutotuneBlockStat *at, const AutotuneBlockStat *now) {
        if (now->rd_ios < at->rd_ios || now->wr_ios < at->wr_ios)
                return true; /* counters went back: another disk; the epoch will say invalid */
        uint64_t done = (now->rd_ios - at->rd_ios) + (now->wr_ios - at->wr_ios);
        return now->in_flight == 0 || done >= at->in_flight;
}

void autotune_epoch_figures(const AutotuneBlockStat *a, const AutotuneBlockStat *b, uint64_t usec,
                            AutotuneEpochFigures *ret) {
        *ret = (AutotuneEpochFigures) {};
        if (usec == 0 || b->rd_ios < a->rd_ios || b->wr_ios < a->wr_ios || b->rd_ticks < a->rd_ticks ||
            b->wr_ticks < a->wr_ticks || b->rd_sectors < a->rd_sectors || b->wr_sectors < a->wr_sectors ||
            b->time_in_queue < a->time_in_queue || b->io_ticks < a->io_ticks)
                return;
        double sec = (double) usec / 1e6, ms = (double) usec / 1e3;
        uint64_t rd = b->rd_ios - a->rd_ios, wr = b->wr_ios - a->wr_ios;
        ret->read_iops = (double) rd / sec;
        ret->write_iops = (double) wr / sec;
        ret->read_mbps = (double) (b->rd_sectors - a->rd_sectors) * 512 / 1e6 / sec;
        ret->write_mbps = (double) (b->wr_sectors - a->wr_sectors) * 512 / 1e6 / sec;
        ret->read_await_ms = rd ? (double) (b->rd_ticks - a->rd_ticks) / (double) rd : 0;
        ret->write_await_ms = wr ? (double) (b->wr_ticks - a->wr_ticks) / (double) wr : 0;
        ret->in_flight = (double) (b->time_in_queue - a->time_in_queue) / ms;
        ret->util = fmin(1.0, (double) (b->io_ticks - a->io_ticks) / ms);
        ret->valid = true;
}

bool autotune_objective_lower_better(const AutotunePolicy *p) {
        return p->objective == AUTOTUNE_OBJECTIVE_READ_LATENCY;
}

double autotune_read_latency(const AutotuneEpochFigures *e, bool p99) {
        return p99 ? e->read_p99_ms : e->read_await_ms;
}

double autotune_objective_value(const AutotunePolicy *p, const AutotuneEpochFigures *e, bool p99) {
        if (p->objective == AUTOTUNE_OBJECTIVE_READ_LATENCY)
                return autotune_read_latency(e, p99);
        if (p->objective == AUTOTUNE_OBJECTIVE_SEQ_READ)
                return e->read_mbps;
        return e->read_mbps + e->write_mbps;
}

uint64_t autotune_trial_probe_usec(double iops) {
        if (!(iops > 0))
                return AUTOTUNE_TRIAL_PROBE_SLOW_USEC;
        double usec = 1e6 * AUTOTUNE_TRIAL_PROBE_SHARE / iops;
        if (usec <= AUTOTUNE_TRIAL_PROBE_FAST_USEC)
                return AUTOTUNE_TRIAL_PROBE_FAST_USEC;
        if (usec >= AUTOTUNE_TRIAL_PROBE_SLOW_USEC)
                return AUTOTUNE_TRIAL_PROBE_SLOW_USEC;
        return (uint64_t) ceil(usec);
}

bool autotune_have_p99(const AutotuneSeries *series, size_t n) {
        bool any = false;

        for (size_t c = 0; c < n; c++)
                for (size_t i = 0; i < series[c].n; i++) {
                        const AutotuneEpochFigures *e = &series[c].epochs[i];
                        if (!e->valid)
                                continue;
                        if (!(e->read_p99_ms > 0))
                                return false;
                        any = true;
                }
        return any;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

double autotune_median(const double *v, size_t n) {
        double t[AUTOTUNE_MAX_EPOCHS * 2];
        if (n == 0)
                return NAN;
        if (n > sizeof t / sizeof t[0])
                n = sizeof t / sizeof t[0];
        memcpy(t, v, n * sizeof *t);
        qsort(t, n, sizeof *t, cmp_double);
        return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* Number of arrangements of m x's and n y's with U (pairs x > y) = u, for
 * u = 0..m*n, by the recurrence f(m,n,u) = f(m-1,n,u-n) + f(m,n-1,u). */
static void mw_counts(size_t m, size_t n, double *out /* (m*n+1) */) {
        size_t umax = m * n;
        /* dp[j][u] for the current i, j = 0..n */
        double *prev = calloc((n + 1) * (umax + 1), sizeof(double));
        double *cur = calloc((n + 1) * (umax + 1), sizeof(double));
        if (!prev || !cur) {
                free(prev);
                free(cur);
                for (size_t u = 0; u <= umax; u++)
                        out[u] = 1;
                return;
        }
#define AT(a, j, u) a[(j) * (umax + 1) + (u)]
        /* i = 0 x's: any j y's, U = 0: one arrangement */
        for (size_t j = 0; j <= n; j++)
                AT(prev, j, 0) = 1;
        for (size_t i = 1; i <= m; i++) {
                memset(cur, 0, (n + 1) * (umax + 1) * sizeof(double));
                for (size_t j = 0; j <= n; j++)
                        for (size_t u = 0; u <= i * j; u++) {
                                /* the last element is an x (it is larger than all j y's: adds j) */
                                double v = u >= j ? AT(prev, j, u - j) : 0;
                                /* or a y */
                                if (j > 0)
                                        v += AT(cur, j - 1, u);
                                AT(cur, j, u) = v;
                        }
                double *t = prev;
                prev = cur;
                cur = t;
        }
        for (size_t u = 0; u <= umax; u++)
                out[u] = AT(prev, n, u);
#undef AT
        free(prev);
        free(cur);
}

double autotune_mann_whitney_less(const double *x, size_t nx, const double *y, size_t ny) {
        double u = 0;
        if (nx == 0 || ny == 0)
                return 1;
        for (size_t i = 0; i < nx; i++)
                for (size_t j = 0; j < ny; j++)
                        u += x[i] > y[j] ? 1 : x[i] == y[j] ? 0.5 : 0;
        /* Small U: x tends to be smaller. p = P(U <= u) under the null. */
        if (nx * ny <= 400) {
                size_t umax = nx * ny;
                double counts[401], total = 0, below = 0;
                mw_counts(nx, ny, counts);
                for (size_t k = 0; k <= umax; k++) {
                        total += counts[k];
                        if ((double) k <= u + 1e-9)
                                below += counts[k];
                }
                return below / total;
        }
        double mu = (double) nx * (double) ny / 2;
        double sigma = sqrt((double) nx * (double) ny * (double) (nx + ny + 1) / 12);
        double z = (u + 0.5 - mu) / sigma;
        return 0.5 * erfc(-z / sqrt(2));
}

/* The regularized incomplete beta function I_x(a, b), by its continued
 * fraction (Lentz), for the t distribution's tail. */
static double beta_cf(double a, double b, double x) {
        const double tiny = 1e-300;
        double c = 1, d = 1 - (a + b) * x / (a + 1);
        if (fabs(d) < tiny)
                d = tiny;
        d = 1 / d;
        double h = d;
        for (int m = 1; m <= 300; m++) {
                double m2 = 2.0 * m;
                double num = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
                d = 1 + num * d;
                c = 1 + num / c;
                d = 1 / (fabs(d) < tiny ? tiny : d);
                c = fabs(c) < tiny ? tiny : c;
                h *= d * c;
                num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
                d = 1 + num * d;
                c = 1 + num / c;
                d = 1 / (fabs(d) < tiny ? tiny : d);
                c = fabs(c) < tiny ? tiny : c;
                double del = d * c;
                h *= del;
                if (fabs(del - 1) < 1e-12)
                        break;
        }
        return h;
}

static double beta_inc(double a, double b, double x) {
        if (x <= 0)
                return 0;
        if (x >= 1)
                return 1;
        double lbt = lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x);
        if (x < (a + 1) / (a + b + 2))
                return exp(lbt) * beta_cf(a, b, x) / a;
        return 1 - exp(lbt) * beta_cf(b, a, 1 - x) / b;
}

static double t_upper(double t, double df) {
        double tail = 0.5 * beta_inc(df / 2, 0.5, df / (df + t * t));
        return t >= 0 ? tail : 1 - tail;
}

double autotune_t_upper(double t, double df) {
        return t_upper(t, df);
}

/* The t with P(T >= t) = alpha for Student's t with df degrees of freedom
 * (by bisection: t_upper() falls as t grows). */
double autotune_t_quantile_upper(double alpha, double df) {
        double lo = 0, hi = 1e3;
        if (alpha >= 0.5)
                return 0;
        for (int i = 0; i < 100; i++) {
                double mid = (lo + hi) / 2;
                if (t_upper(mid, df) > alpha)
                        lo = mid;
                else
                        hi = mid;
        }
        return hi;
}
