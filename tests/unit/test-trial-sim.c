/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The trial simulator: the trial engine (autotune-engine.h) driven the way
 * the daemon's runner drives it, in simulated time (its rounds, the race
 * after each, far-worse candidates leaving, the stop when the race
 * settles, the switch cap, the decision), on epoch series recorded from
 * the model disk (bench/trial-record) and from the QEMU guest's NVMe
 * namespace (tests/vm/capture-trial-series.sh; tests/fixtures/trial-series/),
 * resampled by the thousand: each epoch of a candidate is a block of
 * consecutive samples of /sys/block/X/stat from one of its recorded
 * stretches, picked by a seeded generator, that the engine turns into
 * figures through the daemon's own parsing (autotune_epoch_figures()).
 *
 * The known answer of a workload comes from the whole recording: each
 * candidate's mean read await and write MB/s over all its samples; the
 * winner is the lowest read await among those writing within
 * AutoWriteTolerance= of the best writer, and a workload has one when it
 * beats the baseline (candidate 0, the setting in force when
 * bench/autotune's trial starts) by AutoMinImprovement= and more. Per
 * workload the simulator reports the false-change rate (a change where
 * the answer is to keep), the miss rate (kept, or chose another than a
 * near-best (within 10 % of the winner's read await, inside the bound),
 * where a winner exists), the write bound's breaks (the choice writing
 * less than (1 - tolerance) times the best writer, by the whole
 * recording), the convergence time (epochs measured x epoch length:
 * p50, p90, max), and the changes of the setting a trial makes (each
 * freezes the disk's queue: on bench/autotune's read-mostly 41-65 reads
 * over the exploring price's limit a change, bench/README, against a
 * budget of about 350 in a trial: more than 8 changes cannot keep the
 * price within 1.5 there). A null trial runs every candidate on the baseline's own
 * recording (a tie by construction) with the defaults and without the
 * hysteresis (AutoMinImprovement=0): its change rate is the significance
 * level's alone.
 *
 * The unit test asserts what blkmqd.conf(5) promises at the defaults
 * (AutoEpochSec=0.5, AutoRounds=6, AutoConfidence=95%; AutoWriteTolerance=20%,
 * bench/autotune's): at most 1 - AutoConfidence= of false changes, of
 * changes in the null trials, and of choices outside the write bound;
 * and as few misses where a winner exists (no promise of the page, but
 * what a stop of the race on a leader the decision does not take cost:
 * mixed missed kyber nr_requests=32 5.65 % of the time at epochs of 2 s,
 * 10.94 % at 0.5 s, keeping the setting).
 * `test-trial-sim --explore` prints the same figures for other epochs and
 * rounds (2, 1 and 0.5 s x 6, 4 and 3 rounds, or EPOCH_SEC:ROUNDS ...). */

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
#include <time.h>

#include <cmocka.h>

#include "autotune-engine.h"
#include "autotune.h"
#include "cleanup.h"
#include "log.h"
#include "util.h"

#define SIM_TRIALS 10000
#define SIM_MAX_SAMPLES 1024
#define NEAR_BEST 1.10 /* a choice within 10 % of the winner's read await is not a miss */

static const char *const workloads[] = { "mixed", "read-mostly", "seq-write", "guest-6.12-mixed" };

typedef struct Sample {
        unsigned stretch;
        uint64_t usec; /* since the sample before in its stretch */
        AutotuneBlockStat st;
} Sample;

typedef struct Recording {
        char name[32];
        uint64_t step_usec;
        size_t n_cand;
        AutotuneCandidate cand[AUTOTUNE_MAX_CANDIDATES];
        Sample *s[AUTOTUNE_MAX_CANDIDATES];
        size_t n[AUTOTUNE_MAX_CANDIDATES];
        /* the whole recording's figures per candidate */
        double await_ms[AUTOTUNE_MAX_CANDIDATES], write_mbps[AUTOTUNE_MAX_CANDIDATES];
} Recording;

typedef struct Answer {
        int winner;   /* -1: keep (no candidate better by the minimum) */
        int best;     /* the lowest read await inside the bound */
        double best_write;
} Answer;

typedef struct Figures {
        unsigned trials, changes, misses, wrong, bound_breaks, best_dropped;
        uint64_t epochs;
        uint64_t applies; /* changes of the setting on the disk, all trials: each freezes its queue */
        double conv_p50, conv_p90, conv_max;
} Figures;

/* splitmix64: a seeded generator of the simulator's own, no global state */
static uint64_t rng_next(uint64_t *st) {
        uint64_t z = (*st += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
}

static void recording_done(Recording *r) {
        for (size_t c = 0; c < AUTOTUNE_MAX_CANDIDATES; c++)
                free(r->s[c]);
}

static int recording_load(const char *name, Recording *ret) {
        const char *dir = getenv("FIXTURES_DIR");
        char path[4096];
        _cleanup_free_ char *line = NULL;
        size_t size = 0;
        Recording r = {};
        int k;

        snprintf(path, sizeof path, "%s/trial-series/%s.tsv", dir ? dir : "tests/fixtures", name);
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        snprintf(r.name, sizeof r.name, "%s", name);
        while (getline(&line, &size, f) > 0) {
                unsigned c, stretch, nr;
                unsigned long long usec;
                char sched[32];
                if (line[0] == '#')
                        continue;
                if (sscanf(line, "step_usec\t%llu", &usec) == 1) {
                        r.step_usec = usec;
                        continue;
                }
                if (sscanf(line, "candidate\t%u\t%31s\t%u", &c, sched, &nr) == 3) {
                        if (c >= AUTOTUNE_MAX_CANDIDATES)
                                goto bad;
                        r.cand[c] = (AutotuneCandidate) { .nr_requests = nr, .wbt_lat_usec = AUTOTUNE_WBT_UNSET,
                                                      .baseline = c == 0 };
                        snprintf(r.cand[c].scheduler, sizeof r.cand[c].scheduler, "%s", sched);
                        r.n_cand = c + 1 > r.n_cand ? c + 1 : r.n_cand;
                        continue;
                }
                if (sscanf(line, "%u\t%u\t%llu\t%n", &c, &stretch, &usec, &k) != 3 || c >= r.n_cand)
                        goto bad;
                if (!r.s[c] && !(r.s[c] = calloc(SIM_MAX_SAMPLES, sizeof(Sample))))
                        goto bad;
                if (r.n[c] >= SIM_MAX_SAMPLES)
                        goto bad;
                Sample *s = &r.s[c][r.n[c]];
                *s = (Sample) { .stretch = stretch, .usec = usec };
                if (autotune_blockstat_parse(line + k, &s->st) < 0)
                        goto bad;
                r.n[c]++;
        }
        if (r.n_cand < 2 || r.step_usec == 0)
                goto bad;
        /* the whole recording: every stretch's first to last sample */
        for (size_t c = 0; c < r.n_cand; c++) {
                double rd_ios = 0, rd_ticks = 0, wr_sectors = 0, usec = 0;
                for (size_t i = 1; i < r.n[c]; i++) {
                        const Sample *a = &r.s[c][i - 1], *b = &r.s[c][i];
                        if (a->stretch != b->stretch)
                                continue;
                        rd_ios += (double) (b->st.rd_ios - a->st.rd_ios);
                        rd_ticks += (double) (b->st.rd_ticks - a->st.rd_ticks);
                        wr_sectors += (double) (b->st.wr_sectors - a->st.wr_sectors);
                        usec += (double) b->usec;
                }
                if (usec <= 0)
                        goto bad;
                r.await_ms[c] = rd_ios > 0 ? rd_ticks / rd_ios : 0;
                r.write_mbps[c] = wr_sectors * 512 / usec;
        }
        *ret = r;
        return 0;
bad:
        recording_done(&r);
        return -EINVAL;
}

static Answer known_answer(const Recording *r, const AutotunePolicy *p) {
        Answer a = { .winner = -1, .best = -1 };
        for (size_t c = 0; c < r->n_cand; c++)
                a.best_write = fmax(a.best_write, r->write_mbps[c]);
        for (size_t c = 0; c < r->n_cand; c++) {
                if (r->write_mbps[c] < a.best_write * (1.0 - p->write_tolerance_pct / 100.0))
                        continue;
                if (a.best < 0 || r->await_ms[c] < r->await_ms[a.best])
                        a.best = (int) c;
        }
        bool base_in = r->write_mbps[0] >= a.best_write * (1.0 - p->write_tolerance_pct / 100.0);
        if (a.best > 0 && (!base_in || (r->await_ms[0] - r->await_ms[a.best]) / r->await_ms[0] >=
                                                   p->min_improvement_pct / 100.0))
                a.winner = a.best;
        return a;
}

/* The recording's candidate that engine candidate c is. */
static int rec_index(const Recording *r, const AutotuneCandidate *c) {
        for (size_t i = 0; i < r->n_cand; i++)
                if (streq(r->cand[i].scheduler, c->scheduler) &&
                    (r->cand[i].nr_requests == c->nr_requests || streq(c->scheduler, "none")))
                        return (int) i;
        return -1;
}

/* One trial, driven through the trial engine (autotune-engine.h) as the
 * daemon's runner drives it, in simulated time: each apply comes back at
 * once, each epoch's stat samples are a block of the recording of the
 * candidate in place (src[] says whose), the epoch's end comes when the
 * block's time has passed. No probes (none recorded): no looks during an
 * epoch, the far-worse test at its end. Returns the decision;
 * *ret_epochs: epochs measured, *ret_applies: the changes of the setting
 * on the disk (an apply of another candidate than the one in place, the
 * last, the choice, included), *ret_usec: the trial's simulated time,
 * drops: the race's, by recorded candidate. */
static AutotuneDecision sim_trial(const Recording *r, const AutotunePolicy *p, const size_t *src, unsigned m,
                              uint64_t *rng, AutotuneDrop *drops, unsigned *ret_epochs, unsigned *ret_applies,
                              uint64_t *ret_usec, int *ret_winner) {
        _cleanup_free_ AutotuneEngine *e = calloc(1, sizeof(AutotuneEngine));
        AutotuneCandidate cur = r->cand[0];
        char in_place[32];
        size_t in_place_c = 0;
        unsigned applies = 0;
        uint64_t now = 1000000, t_start = now;
        size_t block_end = 0;
        int map[AUTOTUNE_MAX_CANDIDATES];
        char why[256];
        AutotuneDecision d;

        assert_non_null(e);
        autotune_engine_init(e, r->name);
        AutotuneTrialSetup su = { .policy = p, .current = cur, .scheduler_line = "[none] mq-deadline kyber bfq",
                          .kernel_version = KERNEL_VERSION_CODE(6, 18), .forced = true, .now = now };
        assert_int_equal(autotune_engine_start(e, &su, why, sizeof why), 0);
        for (size_t c = 0; c < e->n_cand; c++) {
                map[c] = rec_index(r, &e->cand[c]);
                assert_true(map[c] >= 0);
        }
        snprintf(in_place, sizeof in_place, "%s", cur.scheduler);
        AutotuneTrialAction a = autotune_engine_begin(e, now);
        for (;;) {
                const Recording *rr = r;
                size_t c = (size_t) map[e->current], from = src[c];
                if (a.what == AUTOTUNE_TRIAL_DO_FINISH)
                        break;
                if (a.what == AUTOTUNE_TRIAL_DO_APPLY) {
                        /* a switch only where the scheduler changes, as the
                         * runner counts them (AutoMaxSwitches=) */
                        AutotuneTrialApplied ev = { .switches = !streq(in_place, e->cand[e->current].scheduler),
                                                    .now = now };
                        snprintf(in_place, sizeof in_place, "%s", e->cand[e->current].scheduler);
                        applies += e->current != in_place_c;
                        in_place_c = e->current;
                        a = autotune_engine_applied(e, &ev);
                } else if (a.what == AUTOTUNE_TRIAL_DO_NEXT)
                        a = autotune_engine_next(e, now);
                else if (a.what == AUTOTUNE_TRIAL_DO_WAIT && a.wait == AUTOTUNE_TRIAL_WAIT_SETTLE) {
                        now += a.usec;
                        /* the epoch to come: a block of m steps of one stretch */
                        size_t i;
                        do
                                i = rng_next(rng) % (rr->n[from] - m);
                        while (rr->s[from][i].stretch != rr->s[from][i + m].stretch);
                        block_end = i + m;
                        a = autotune_engine_settled(e, &rr->s[from][i].st, 0, false, now);
                        if (a.what == AUTOTUNE_TRIAL_DO_WAIT && a.wait == AUTOTUNE_TRIAL_WAIT_EPOCH) {
                                uint64_t usec = 0;
                                for (size_t j = i + 1; j <= block_end; j++)
                                        usec += rr->s[from][j].usec;
                                a.usec = usec; /* the block's own length */
                        }
                } else if (a.what == AUTOTUNE_TRIAL_DO_WAIT && a.wait == AUTOTUNE_TRIAL_WAIT_EPOCH) {
                        now += a.usec;
                        a = autotune_engine_epoch(e, &rr->s[from][block_end].st, 0, 0, 0, 0, now);
                } else
                        fail_msg("unexpected action %d (wait %d)", a.what, a.wait);
        }
        d = e->decision;
        memset(drops, 0, sizeof(AutotuneDrop) * r->n_cand);
        for (size_t c = 0; c < e->n_cand; c++)
                drops[map[c]] = e->drops[c];
        *ret_winner = map[d.winner];
        *ret_epochs = (unsigned) e->slot;
        /* the choice goes in after the trial (the runner installs it) */
        *ret_applies = applies + ((size_t) d.winner != in_place_c);
        *ret_usec = now - t_start;
        autotune_engine_finished(e);
        autotune_engine_done(e);
        return d;
}

static int cmp_unsigned(const void *a, const void *b) {
        unsigned x = *(const unsigned *) a, y = *(const unsigned *) b;
        return (x > y) - (x < y);
}

/* trials trials of r under p with epochs of m steps; null: every candidate
 * on the baseline's recording. */
static Figures simulate(const Recording *r, const AutotunePolicy *p, unsigned m, unsigned trials, bool null,
                        uint64_t seed) {
        Answer ans = known_answer(r, p);
        size_t src[AUTOTUNE_MAX_CANDIDATES];
        _cleanup_free_ unsigned *conv = calloc(trials, sizeof(unsigned));
        Figures f = { .trials = trials };
        uint64_t rng = seed;

        assert_non_null(conv);
        for (size_t c = 0; c < r->n_cand; c++)
                src[c] = null ? 0 : c;
        for (unsigned t = 0; t < trials; t++) {
                AutotuneDrop drops[AUTOTUNE_MAX_CANDIDATES];
                unsigned epochs, applies;
                uint64_t usec;
                int winner;
                AutotuneDecision d = sim_trial(r, p, src, m, &rng, drops, &epochs, &applies, &usec, &winner);
                bool change = d.verdict == AUTOTUNE_VERDICT_CHANGE;
                conv[t] = (unsigned) (usec / 1000); /* ms */
                f.epochs += epochs;
                f.applies += applies;
                f.changes += change;
                if (null)
                        continue;
                size_t w = (size_t) winner;
                if (change && r->write_mbps[w] < ans.best_write * (1.0 - p->write_tolerance_pct / 100.0))
                        f.bound_breaks++;
                if (ans.winner < 0)
                        continue;
                bool near = (int) w == ans.winner ||
                            (w != 0 && r->write_mbps[w] >= ans.best_write * (1.0 - p->write_tolerance_pct / 100.0) &&
                             r->await_ms[w] <= r->await_ms[ans.winner] * NEAR_BEST);
                f.misses += !change;
                f.wrong += change && !near;
                /* the race's promise: the best leaves only by a false test
                 * (far worse is the guard rail's, not a test) */
                f.best_dropped += drops[ans.winner].dropped && drops[ans.winner].by >= 0;
        }
        qsort(conv, trials, sizeof(unsigned), cmp_unsigned);
        f.conv_p50 = conv[trials / 2] / 1e3;
        f.conv_p90 = conv[trials * 9 / 10] / 1e3;
        f.conv_max = conv[trials - 1] / 1e3;
        return f;
}

/* bench/autotune's trial: AutoScheduler=none mq-deadline kyber,
 * AutoNrRequests=4 32 256, AutoWriteTolerance=20%, the rest at the
 * defaults. */
static AutotunePolicy sim_policy(void) {
        AutotunePolicy p;
        char msg[256];
        const char *m;
        autotune_policy_init(&p);
        assert_int_equal(autotune_policy_parse(&p, "AutoTune", "yes", msg, sizeof msg, &m), 0);
        assert_int_equal(autotune_policy_parse(&p, "AutoScheduler", "none mq-deadline kyber", msg, sizeof msg, &m), 0);
        assert_int_equal(autotune_policy_parse(&p, "AutoNrRequests", "4 32 256", msg, sizeof msg, &m), 0);
        assert_int_equal(autotune_policy_parse(&p, "AutoWriteTolerance", "20%", msg, sizeof msg, &m), 0);
        return p;
}

static void report(const Recording *r, const AutotunePolicy *p, unsigned m, const Figures *f, const Figures *nul,
                   const Figures *nul0) {
        Answer a = known_answer(r, p);
        char buf[AUTOTUNE_CANDIDATE_STRMAX];
        double tr = f->trials;
        printf("# %-11s epoch %.2f s x %u rounds: answer %s; %u trials: false change %.2f %%, miss %.2f %%, "
               "wrong %.2f %%, best dropped %.2f %%, bound broken %.2f %%; %.1f epochs, %.1f changes of the setting, "
               "convergence p50 %.1f s, "
               "p90 %.1f s, max %.1f s; null: change %.2f %% (AutoMinImprovement=0: %.2f %%)\n",
               r->name, (double) m * (double) r->step_usec / 1e6, p->rounds,
               a.winner < 0 ? "keep" : autotune_candidate_format(&r->cand[a.winner], buf, sizeof buf), f->trials,
               a.winner < 0 ? 100.0 * f->changes / tr : 0.0, a.winner >= 0 ? 100.0 * f->misses / tr : 0.0,
               100.0 * f->wrong / tr, 100.0 * f->best_dropped / tr, 100.0 * f->bound_breaks / tr,
               (double) f->epochs / tr, (double) f->applies / tr, f->conv_p50,
               f->conv_p90, f->conv_max, 100.0 * nul->changes / nul->trials, 100.0 * nul0->changes / nul0->trials);
}

static void print_recording(const Recording *r, const AutotunePolicy *p) {
        char buf[AUTOTUNE_CANDIDATE_STRMAX];
        Answer a = known_answer(r, p);
        for (size_t c = 0; c < r->n_cand; c++)
                printf("# %-11s %-28s read await %8.2f ms, write %7.1f MB/s (%zu samples)%s%s\n", r->name,
                       autotune_candidate_format(&r->cand[c], buf, sizeof buf), r->await_ms[c], r->write_mbps[c],
                       r->n[c], (int) c == a.best ? ", best inside the bound" : "",
                       r->write_mbps[c] == a.best_write ? ", best writer" : "");
}

/* At the defaults: the promised rates. */
static void test_promised_rates(void **state) {
        AutotunePolicy p = sim_policy(), p0 = sim_policy();
        double alpha = 1.0 - p.confidence_pct / 100.0;
        clock_t t0 = clock();

        p0.min_improvement_pct = 0;
        for (size_t w = 0; w < ELEMENTSOF(workloads); w++) {
                Recording r;
                assert_int_equal(recording_load(workloads[w], &r), 0);
                unsigned m = (unsigned) (p.epoch_usec / r.step_usec);
                print_recording(&r, &p);
                Figures f = simulate(&r, &p, m, SIM_TRIALS, false, 1000 + w);
                Figures nul = simulate(&r, &p, m, SIM_TRIALS, true, 2000 + w);
                Figures nul0 = simulate(&r, &p0, m, SIM_TRIALS, true, 3000 + w);
                report(&r, &p, m, &f, &nul, &nul0);
                Answer a = known_answer(&r, &p);
                if (a.winner < 0)
                        assert_true(f.changes <= alpha * f.trials);
                else
                        assert_true(f.misses <= alpha * f.trials);
                assert_true(f.bound_breaks <= alpha * f.trials);
                assert_true(f.best_dropped <= alpha * f.trials);
                assert_true(nul.changes <= alpha * nul.trials);
                assert_true(nul0.changes <= alpha * nul0.trials);
                recording_done(&r);
        }
        printf("# %zu workloads x 3 x %u trials in %.1f s of CPU\n", ELEMENTSOF(workloads), SIM_TRIALS,
               (double) (clock() - t0) / CLOCKS_PER_SEC);
        autotune_policy_done(&p);
        autotune_policy_done(&p0);
}

/* The faster schedules: epochs of 2, 1 and 0.5 s, 6, 4 and 3 rounds, or
 * the schedules given as EPOCH_SEC:ROUNDS. */
static int explore(char **args, int n_args) {
        static const double epochs[] = { 2, 1, 0.5 };
        static const unsigned rounds[] = { 6, 4, 3 };
        double ep[64];
        unsigned ro[64];
        size_t n = 0;

        for (int i = 0; i < n_args && n < ELEMENTSOF(ep); i++)
                if (sscanf(args[i], "%lf:%u", &ep[n], &ro[n]) == 2 && ep[n] > 0 && ro[n] >= 3)
                        n++;
                else {
                        fprintf(stderr, "not EPOCH_SEC:ROUNDS: %s\n", args[i]);
                        return 1;
                }
        if (n == 0)
                for (size_t e = 0; e < ELEMENTSOF(epochs); e++)
                        for (size_t k = 0; k < ELEMENTSOF(rounds); k++) {
                                ep[n] = epochs[e];
                                ro[n++] = rounds[k];
                        }
        for (size_t w = 0; w < ELEMENTSOF(workloads); w++) {
                Recording r;
                if (recording_load(workloads[w], &r) < 0) {
                        fprintf(stderr, "cannot load %s\n", workloads[w]);
                        return 1;
                }
                for (size_t k = 0; k < n; k++) {
                        AutotunePolicy p = sim_policy(), p0 = sim_policy();
                        p.epoch_usec = p0.epoch_usec = (uint64_t) (ep[k] * 1e6);
                        p.rounds = p0.rounds = ro[k];
                        p0.min_improvement_pct = 0;
                        unsigned m = (unsigned) (p.epoch_usec / r.step_usec);
                        if (m < 1) {
                                fprintf(stderr, "an epoch of %.2f s is shorter than the recording's step\n", ep[k]);
                                return 1;
                        }
                        Figures f = simulate(&r, &p, m, SIM_TRIALS, false, 1000 + w);
                        Figures nul = simulate(&r, &p, m, SIM_TRIALS, true, 2000 + w);
                        Figures nul0 = simulate(&r, &p0, m, SIM_TRIALS, true, 3000 + w);
                        report(&r, &p, m, &f, &nul, &nul0);
                        autotune_policy_done(&p);
                        autotune_policy_done(&p0);
                }
                recording_done(&r);
        }
        return 0;
}

int main(int argc, char *argv[]) {
        log_set_max_level(LOG_WARNING); /* the engine tells every candidate that leaves */
        if (argc > 1 && streq(argv[1], "--explore"))
                return explore(argv + 2, argc - 2);
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_promised_rates),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
