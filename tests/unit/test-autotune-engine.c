/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* autotune-engine.c and autotune-lookout.c driven as the daemon drives them: their
 * actions carried out on a simulated disk with a fake clock. Whole trials
 * (a clear winner, a tie, a refusal, aborts, a look at the probes that
 * cuts a starving challenger's epoch short) and a search by families, at
 * the policy's real cadence (its default epochs, 6 rounds); the watch between
 * trials at its own (a tick every 5 s, its checks every 10 s): a recall,
 * the workload-change detector's re-trial, periodic trials, the promise
 * kept and broken. Minutes and hours of simulated time, milliseconds of
 * CPU. */

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

#include "autotune-engine.h"
#include "autotune-lookout.h"
#include "autotune.h"
#include "util.h"

#define USEC 1000000ULL
#define APPLY_USEC 20000ULL /* a candidate's apply on the worker */

/* What the disk does under a setting: its read await and write MB/s, and
 * the p99 of a probe read (0: twice the await). */
typedef struct Model {
        const char *setting; /* autotune_candidate_format()'s; NULL ends the list */
        double await_ms, write_mbps, p99_ms;
} Model;

typedef struct Sim {
        AutotuneEngine e;
        uint64_t now; /* the fake CLOCK_MONOTONIC */
        uint64_t rng;
        double noise; /* relative, of each stretch's read await */
        const Model *model;
        const char *refuse;   /* a setting the kernel refuses (NULL: none) */
        size_t errors_at;     /* the epoch (1-based) whose probes see read errors (0: none) */
        bool stat_fails;      /* /sys/block/X/stat unreadable at the epoch's end */
        bool probes;          /* latency probes every probe_usec, their p99 the model's */
        uint64_t probe_usec;  /* 5 ms (100 in an epoch of 0.5 s: every epoch has a p99) */
        const char *timed;    /* a scheduler whose time in force is counted (in_force_usec) */
        unsigned timed_nr;    /* and its nr_requests= (0: any) */
        uint64_t in_force_usec;
        AutotuneCandidate in_force;
        double read_iops, read_kb; /* the workload's reads (1,000 a second of 4 KiB) */
        double write_scale;        /* of the model's write MB/s (1; less: the disk slowed) */
        double acc[5];        /* fractional counters: reads, read ticks, writes, write sectors, read sectors */
        AutotuneBlockStat st;
        unsigned applies, epochs, switches;
        uint64_t epoch_min_usec, epoch_max_usec; /* the epochs' lengths, first to last look */
} Sim;

static double rnd(Sim *s) { /* uniform [0, 1) */
        s->rng = s->rng * 6364136223846793005ULL + 1442695040888963407ULL;
        return (double) (s->rng >> 11) / (double) (1ULL << 53);
}

static const Model *model_of(const Sim *s, const AutotuneCandidate *c) {
        char buf[AUTOTUNE_CANDIDATE_STRMAX];

        autotune_candidate_format(c, buf, sizeof buf);
        for (const Model *m = s->model; m->setting; m++)
                if (streq(m->setting, buf))
                        return m;
        fail_msg("no model for %s", buf);
        return NULL;
}

/* The disk runs usec under the setting in force: the workload's reads,
 * and the model's writes in 64 KiB. */
static void advance(Sim *s, uint64_t usec) {
        const Model *m = model_of(s, &s->in_force);
        double sec = (double) usec / 1e6, await = m->await_ms * (1 + s->noise * (2 * rnd(s) - 1));
        double rd = s->read_iops * sec, wr = m->write_mbps * s->write_scale * 1e6 / 65536 * sec;

        s->now += usec;
        if (s->timed && streq(s->timed, s->in_force.scheduler) &&
            (s->timed_nr == 0 || s->timed_nr == s->in_force.nr_requests))
                s->in_force_usec += usec;
        s->acc[0] += rd;
        s->acc[1] += rd * await;
        s->acc[2] += wr;
        s->acc[3] += wr * 128;
        s->st.rd_ios = (uint64_t) s->acc[0];
        s->acc[4] += rd * s->read_kb * 2;
        s->st.rd_sectors = (uint64_t) s->acc[4];
        s->st.rd_ticks = (uint64_t) s->acc[1];
        s->st.wr_ios = (uint64_t) s->acc[2];
        s->st.wr_sectors = (uint64_t) s->acc[3];
        s->st.io_ticks += usec / 1000;
        s->st.time_in_queue += (uint64_t) (4 * sec * 1000);
}

static void sim_init(Sim *s, const Model *model, const char *current, const char *line) {
        *s = (Sim) { .rng = 42, .noise = 0.05, .model = model, .read_iops = 1000, .read_kb = 4, .write_scale = 1,
                     .probe_usec = 5000 };
        autotune_engine_init(&s->e, "sim0");
        s->in_force = (AutotuneCandidate) { .wbt_lat_usec = AUTOTUNE_WBT_UNSET, .baseline = true };
        snprintf(s->in_force.scheduler, sizeof s->in_force.scheduler, "%s", current);
        (void) line;
}

/* Carries out the engine's actions as the runner does, until it finishes
 * (or waits for nothing). */
static AutotuneTrialAction drive(Sim *s, AutotuneTrialAction act) {
        char buf[AUTOTUNE_CANDIDATE_STRMAX];

        for (;;)
                switch (act.what) {
                case AUTOTUNE_TRIAL_DO_NOTHING:
                case AUTOTUNE_TRIAL_DO_FINISH:
                        return act;
                case AUTOTUNE_TRIAL_DO_APPLY: {
                        const AutotuneCandidate *c = &s->e.cand[s->e.current];
                        AutotuneTrialApplied ev = { .usec = APPLY_USEC };
                        s->applies++;
                        autotune_candidate_format(c, buf, sizeof buf);
                        ev.refused = s->refuse && streq(s->refuse, buf);
                        if (!ev.refused) {
                                ev.switches = !streq(c->scheduler, s->in_force.scheduler);
                                s->switches += ev.switches;
                                s->in_force = *c;
                        }
                        advance(s, APPLY_USEC);
                        ev.have_stat = true;
                        ev.stat = s->st;
                        ev.now = s->now;
                        act = autotune_engine_applied(&s->e, &ev);
                        break;
                }
                case AUTOTUNE_TRIAL_DO_WAIT: {
                        advance(s, act.usec);
                        const Model *m = model_of(s, &s->in_force);
                        double probe_ms = m->p99_ms > 0 ? m->p99_ms : 2 * m->await_ms;
                        uint64_t n = s->probes ? (s->now - s->e.t0) / s->probe_usec : 0;
                        if (act.wait == AUTOTUNE_TRIAL_WAIT_SETTLE)
                                act = autotune_engine_settled(&s->e, &s->st, 0, s->probes, s->now);
                        else if (act.wait == AUTOTUNE_TRIAL_WAIT_PEEK) {
                                assert_true(s->probes);
                                AutotuneTrialPeek pk = { .now = s->now, .p99_ms = probe_ms,
                                                         .n = n,
                                                         .n_max = (s->e.policy.epoch_usec + AUTOTUNE_PEEK_USEC) /
                                                                  s->probe_usec + 1 };
                                pk.above = probe_ms > s->e.peek_limit_ms ? pk.n : 0;
                                act = autotune_engine_peek(&s->e, &pk);
                        } else {
                                act = autotune_engine_epoch(&s->e, s->stat_fails ? NULL : &s->st, -EIO,
                                                         s->epochs + 1 == s->errors_at ? 3 : 0,
                                                         n >= AUTOTUNE_P99_MIN_PROBES ? probe_ms : 0, n, s->now);
                                /* an epoch short of its p99's probes runs on */
                                if (!(act.what == AUTOTUNE_TRIAL_DO_WAIT && act.wait == AUTOTUNE_TRIAL_WAIT_EPOCH)) {
                                        uint64_t len = s->now - s->e.t0;
                                        if (s->epochs++ == 0 || len < s->epoch_min_usec)
                                                s->epoch_min_usec = len;
                                        if (len > s->epoch_max_usec)
                                                s->epoch_max_usec = len;
                                }
                        }
                        break;
                }
                case AUTOTUNE_TRIAL_DO_NEXT:
                        act = autotune_engine_next(&s->e, s->now);
                        break;
                }
}

static AutotunePolicy policy(const char *schedulers) {
        AutotunePolicy p;
        char buf[256];
        const char *msg;

        autotune_policy_init(&p);
        p.enabled = true;
        if (schedulers)
                assert_int_equal(autotune_policy_parse(&p, "AutoScheduler", schedulers, buf, sizeof buf, &msg), 0);
        return p;
}

/* Starts a trial from the setting in force and drives it to its end;
 * returns the simulated time it took. */
static uint64_t trial(Sim *s, const AutotunePolicy *p, const char *line) {
        char why[256];
        uint64_t t0 = s->now;
        AutotuneTrialSetup setup = { .policy = p, .current = s->in_force, .scheduler_line = line, .now = s->now };

        assert_int_equal(autotune_engine_start(&s->e, &setup, why, sizeof why), 0);
        assert_true(s->e.n_cand >= 2);
        AutotuneTrialAction act = drive(s, autotune_engine_begin(&s->e, s->now));
        assert_int_equal(act.what, AUTOTUNE_TRIAL_DO_FINISH);
        assert_int_equal(s->e.phase, AUTOTUNE_TRIAL_FINISHING);
        assert_true(s->e.has_result);
        /* the chosen setting goes in; then the trial is over */
        s->in_force = s->e.cand[s->e.current];
        autotune_engine_finished(&s->e);
        assert_false(autotune_engine_running(&s->e));
        print_message("# %s: %s %s in %.1f s simulated (%u epochs, %u applies, %u switches): %s\n", s->e.name,
                      autotune_verdict_to_string(s->e.decision.verdict), s->e.cand[s->e.decision.winner].scheduler,
                      (double) (s->now - t0) / 1e6, s->epochs, s->applies, s->switches, s->e.decision.reason);
        return s->now - t0;
}

static const Model SCHEDULERS[] = {
        { "none", 8.0, 100 },
        { "mq-deadline", 2.0, 100 },
        { "kyber", 8.5, 100 },
        {},
};

static void test_clear_winner(void **state) {
        AutotunePolicy p = policy("none mq-deadline kyber");
        Sim s;

        sim_init(&s, SCHEDULERS, "none", NULL);
        uint64_t took = trial(&s, &p, "[none] mq-deadline kyber");
        assert_int_equal(s.e.decision.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_string_equal(s.e.cand[s.e.decision.winner].scheduler, "mq-deadline");
        assert_string_equal(s.in_force.scheduler, "mq-deadline");
        /* the race: kyber, far behind, left before the last round, and
         * the trial is shorter than its 3 x 6 epochs */
        assert_true(took < 3 * 6 * p.epoch_usec);
        assert_true(took > 3 * p.epoch_usec);
        assert_true(s.e.drops[2].dropped || s.e.round < p.rounds);
        /* a second trial from the winner keeps it: no flapping */
        s.applies = s.epochs = s.switches = 0;
        trial(&s, &p, "none [mq-deadline] kyber");
        assert_int_not_equal(s.e.decision.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_string_equal(s.in_force.scheduler, "mq-deadline");
        autotune_engine_done(&s.e);
        autotune_policy_done(&p);
}

static const Model TIE[] = {
        { "none", 4.0, 100 },
        { "mq-deadline", 4.1, 100 },
        {},
};

static void test_tie(void **state) {
        AutotunePolicy p = policy("none mq-deadline");
        Sim s;

        sim_init(&s, TIE, "none", NULL);
        s.noise = 0.15;
        uint64_t took = trial(&s, &p, "[none] mq-deadline");
        assert_int_not_equal(s.e.decision.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_int_equal(s.e.decision.winner, 0);
        assert_string_equal(s.in_force.scheduler, "none");
        /* no winner: every round measured, 2 candidates x 6 rounds */
        assert_int_equal(s.epochs, 2 * 6);
        assert_true(took >= 2 * 6 * p.epoch_usec);
        assert_true(took < 2 * 6 * p.epoch_usec + 2 * 6 * USEC / 2);
        autotune_engine_done(&s.e);
        autotune_policy_done(&p);
}

static void test_refused(void **state) {
        AutotunePolicy p = policy("none mq-deadline kyber");
        Sim s;

        /* the kernel refuses kyber: left out, the trial goes on */
        sim_init(&s, SCHEDULERS, "none", NULL);
        s.refuse = "kyber";
        trial(&s, &p, "[none] mq-deadline kyber");
        assert_true(s.e.refused[2]);
        assert_true(s.e.drops[2].dropped);
        assert_string_equal(s.e.drops[2].why, "refused by the kernel");
        assert_int_equal(s.e.series[2].n, 0);
        assert_int_equal(s.e.decision.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_string_equal(s.in_force.scheduler, "mq-deadline");
        autotune_engine_done(&s.e);

        /* the setting in force refused: nothing can be put back */
        sim_init(&s, SCHEDULERS, "none", NULL);
        s.refuse = "none";
        trial(&s, &p, "[none] mq-deadline kyber");
        assert_int_equal(s.e.decision.verdict, AUTOTUNE_VERDICT_ABORTED);
        assert_true(s.e.aborted);
        assert_string_equal(s.e.abort_reason, "the current setting cannot be put back");
        assert_int_equal(s.e.current, 0);
        autotune_engine_done(&s.e);
        autotune_policy_done(&p);
}

static void test_abort(void **state) {
        AutotunePolicy p = policy("none mq-deadline kyber");
        Sim s;

        /* read errors in a challenger's epoch: the guard rail ends the
         * trial, back to the setting before it, and the candidate is left
         * out of the next trials */
        sim_init(&s, SCHEDULERS, "none", NULL);
        s.errors_at = 2;
        trial(&s, &p, "[none] mq-deadline kyber");
        assert_int_equal(s.e.decision.verdict, AUTOTUNE_VERDICT_ABORTED);
        assert_non_null(strstr(s.e.abort_reason, "guard rail"));
        assert_string_equal(s.in_force.scheduler, "none");
        assert_int_equal(s.epochs, 2);
        assert_int_equal(s.e.n_tripped, 1);
        char why[256];
        AutotuneTrialSetup setup = { .policy = &p, .current = s.in_force, .scheduler_line = "[none] mq-deadline kyber",
                             .now = s.now };
        assert_int_equal(autotune_engine_start(&s.e, &setup, why, sizeof why), 0);
        assert_int_equal(s.e.n_cand, 2); /* the tripped one is out */
        assert_non_null(strstr(s.e.note, "mq-deadline"));
        autotune_engine_end_now(&s.e, "restore");
        assert_false(autotune_engine_running(&s.e));
        autotune_engine_done(&s.e);

        /* the stat unreadable: aborted */
        sim_init(&s, SCHEDULERS, "none", NULL);
        s.stat_fails = true;
        trial(&s, &p, "[none] mq-deadline kyber");
        assert_int_equal(s.e.decision.verdict, AUTOTUNE_VERDICT_ABORTED);
        assert_non_null(strstr(s.e.abort_reason, "cannot read stat"));
        autotune_engine_done(&s.e);

        /* from outside, mid-trial (a restore): ended, nothing to apply */
        sim_init(&s, SCHEDULERS, "none", NULL);
        setup.current = s.in_force;
        assert_int_equal(autotune_engine_start(&s.e, &setup, why, sizeof why), 0);
        AutotuneTrialAction act = autotune_engine_begin(&s.e, s.now);
        assert_int_equal(act.what, AUTOTUNE_TRIAL_DO_APPLY);
        assert_true(autotune_engine_running(&s.e));
        autotune_engine_end_now(&s.e, "restore");
        assert_false(autotune_engine_running(&s.e));
        assert_true(s.e.aborted);
        /* a late event finds nothing to do */
        assert_int_equal(autotune_engine_settled(&s.e, &s.st, 0, false, s.now).what, AUTOTUNE_TRIAL_DO_NOTHING);
        autotune_engine_done(&s.e);

        /* nothing to compare: refused to start */
        AutotunePolicy one = policy("none");
        sim_init(&s, SCHEDULERS, "none", NULL);
        setup = (AutotuneTrialSetup) { .policy = &one, .current = s.in_force, .scheduler_line = "[none] mq-deadline" };
        assert_int_equal(autotune_engine_start(&s.e, &setup, why, sizeof why), -EPERM);
        assert_non_null(strstr(why, "nothing to compare"));
        assert_int_equal(s.e.n_cand, 0);
        autotune_engine_done(&s.e);
        autotune_policy_done(&one);
        autotune_policy_done(&p);
}

/* A search by families: the schedulers, then the winner's depth. */
static const Model SEARCH[] = {
        { "none", 9.0, 100 },
        { "mq-deadline", 3.0, 100 },
        { "kyber", 9.0, 100 },
        { "mq-deadline nr_requests=4", 6.0, 100 },
        { "mq-deadline nr_requests=8", 5.0, 100 },
        { "mq-deadline nr_requests=16", 3.0, 100 },
        { "mq-deadline nr_requests=32", 1.0, 100 },
        { "mq-deadline nr_requests=64", 3.0, 100 },
        { "mq-deadline nr_requests=128", 3.0, 100 },
        { "mq-deadline nr_requests=256", 3.5, 100 },
        {},
};

static void test_family_search(void **state) {
        AutotunePolicy p = policy(NULL);
        char buf[256];
        const char *msg;
        Sim s;

        assert_int_equal(autotune_policy_parse(&p, "AutoKnobs", "scheduler nr_requests", buf, sizeof buf, &msg), 0);
        assert_int_equal(autotune_policy_parse(&p, "AutoScheduler", "none mq-deadline kyber", buf, sizeof buf, &msg),
                         0);
        assert_int_equal(autotune_policy_parse(&p, "AutoNrRequests", "4 8 16 32 64 128 256", buf, sizeof buf, &msg),
                         0);
        sim_init(&s, SEARCH, "none", NULL);
        uint64_t took = trial(&s, &p, "[none] mq-deadline kyber");
        assert_true(s.e.search);
        assert_int_equal(s.e.n_phases, 2);
        assert_int_equal(s.e.decision.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_string_equal(s.in_force.scheduler, "mq-deadline");
        assert_int_equal(s.in_force.nr_requests, 32);
        assert_non_null(strstr(s.e.phases_text, "scheduler: mq-deadline (change)"));
        assert_non_null(strstr(s.e.phases_text, "nr_requests: mq-deadline nr_requests=32"));
        assert_true(s.e.n_measured >= 3);
        assert_true(took < 120 * USEC);
        autotune_engine_done(&s.e);
        autotune_policy_done(&p);
}

/* With probes: a challenger whose reads starve is looked at every 0.1 s
 * of its epoch and leaves as soon as its probes settle that its p99 is
 * far worse, not at the epoch's end. */
static const Model STARVES[] = {
        { "none", 2.0, 100 },
        { "mq-deadline", 40.0, 100 },
        { "kyber", 2.1, 100 },
        {},
};

static void test_peek(void **state) {
        AutotunePolicy p = policy("none mq-deadline kyber");
        Sim s;

        sim_init(&s, STARVES, "none", NULL);
        s.probes = true;
        s.timed = "mq-deadline";
        trial(&s, &p, "[none] mq-deadline kyber");
        assert_true(s.e.drops[1].dropped);
        assert_int_equal(s.e.series[1].n, 1);
        assert_non_null(strstr(s.e.drops[1].why, "probes"));
        /* its one epoch (2 s) cut short: in force for well under one */
        print_message("# mq-deadline in force for %.2f s: %s\n", (double) s.in_force_usec / 1e6, s.e.drops[1].why);
        assert_true(s.in_force_usec < USEC / 2);
        assert_int_not_equal(s.e.decision.verdict, AUTOTUNE_VERDICT_CHANGE);
        autotune_engine_done(&s.e);
        autotune_policy_done(&p);
}

/* bench/autotune's read-mostly on the model disk (bench/README, "The
 * oracle's clock mended"): the probes' p99 under none, whose one epoch is
 * all the trial knows when the next candidate goes in, is a slow 1.6 ms
 * (the far-worse limit 4 x 1.6 = 6.4 ms); the deeper mq-deadline queues
 * read 0.5 ms; nr_requests=4 starves the reads behind the writer's tags
 * (the probes' p99 5.9 ms, fio's 57-76 ms), under 6.4 and 12 times 0.5. */
static const Model SHALLOW[] = {
        { "none", 0.30, 64, 1.6 },
        { "mq-deadline nr_requests=4", 0.28, 52, 5.9 },
        { "mq-deadline nr_requests=32", 0.30, 64, 0.5 },
        { "mq-deadline nr_requests=256", 0.30, 65, 0.5 },
        {},
};

/* The shallow queue is measured after the deeper ones, so its limit is
 * theirs (4 x 0.5 ms, at least 4 x 1 ms) and its first look ends it: in
 * force 0.15 s (the apply, the settling, one look). Measured second, right
 * after none's one epoch, it held a whole epoch under none's limit before
 * its second epoch's first look cut it (2 epochs, 0.7 s). */
static void test_shallow_last(void **state) {
        AutotunePolicy p = policy("none mq-deadline");
        char buf[256];
        const char *msg;
        Sim s;

        assert_int_equal(autotune_policy_parse(&p, "AutoNrRequests", "4 32 256", buf, sizeof buf, &msg), 0);
        sim_init(&s, SHALLOW, "none", NULL);
        s.probes = true;
        s.noise = 0.02;
        s.timed = "mq-deadline";
        s.timed_nr = 4;
        trial(&s, &p, "[none] mq-deadline");
        size_t shallow = 0;
        for (size_t c = 0; c < s.e.n_cand; c++)
                if (s.e.cand[c].nr_requests == 4)
                        shallow = c;
        assert_int_not_equal(shallow, 0);
        assert_true(s.e.drops[shallow].dropped);
        assert_int_equal(s.e.series[shallow].n, 1);
        print_message("# mq-deadline nr_requests=4 in force for %.2f s: %s\n", (double) s.in_force_usec / 1e6,
                      s.e.drops[shallow].why);
        assert_true(s.in_force_usec < USEC / 4);
        autotune_engine_done(&s.e);
        autotune_policy_done(&p);
}

/* The tail a reader sees (bench/README, read-mostly): the two settings'
 * mean read awaits tie, kyber's probe p99 is a hundredth of none's. */
static const Model TAIL[] = {
        { "none", 1.0, 100, 50.0 },
        { "kyber", 1.0, 100, 0.5 },
        {},
};

/* Probes every 20 ms hold 25 in an epoch of 0.5 s, half its p99's 50:
 * each epoch runs on until it has them, and the trial ranks by the p99
 * (without the stretch it fell to the mean await and tied). At 50 ms four
 * epochs would hold 40: no epoch runs on in vain, each is short, and the
 * trial ranks by the await. */
static void test_stretch(void **state) {
        AutotunePolicy p = policy("none kyber");
        Sim s;

        sim_init(&s, TAIL, "none", NULL);
        s.probes = true;
        s.probe_usec = 20000;
        uint64_t took = trial(&s, &p, "[none] kyber");
        print_message("# stretched %u epochs by %.2f s, %u short\n", s.e.n_stretched, (double) s.e.stretch_usec / 1e6,
                      s.e.n_short);
        assert_true(s.e.decision.by_p99);
        assert_int_equal(s.e.decision.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_string_equal(s.in_force.scheduler, "kyber");
        assert_int_equal(s.e.n_stretched, s.epochs);
        assert_int_equal(s.e.n_short, 0);
        /* each epoch about 1.1 s (50 probes and a tenth), each with a p99 */
        for (size_t c = 0; c < s.e.n_cand; c++)
                for (size_t k = 0; k < s.e.series[c].n; k++)
                        assert_true(s.e.series[c].epochs[k].read_p99_ms > 0);
        assert_true(s.epoch_min_usec >= 50 * s.probe_usec);
        assert_true(s.epoch_max_usec <= 60 * s.probe_usec);
        assert_true(took < s.epochs * (4 * p.epoch_usec / 2 + AUTOTUNE_SETTLE_MAX_USEC + APPLY_USEC));
        autotune_engine_done(&s.e);

        sim_init(&s, TAIL, "none", NULL);
        s.probes = true;
        s.probe_usec = 50000;
        trial(&s, &p, "[none] kyber");
        print_message("# kyber: %s\n", s.e.drops[1].dropped ? s.e.drops[1].why : "in the race");
        assert_false(s.e.decision.by_p99);
        assert_int_equal(s.e.n_short, s.epochs);
        assert_int_not_equal(s.e.decision.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_int_equal(s.e.n_stretched, 0);
        assert_int_equal(s.epoch_max_usec, p.epoch_usec);
        autotune_engine_done(&s.e);

        /* sequential reads rank by MB/s: 25 probes an epoch, none runs on */
        sim_init(&s, TAIL, "none", NULL);
        s.probes = true;
        s.probe_usec = 20000;
        p.objective = AUTOTUNE_OBJECTIVE_SEQ_READ;
        trial(&s, &p, "[none] kyber");
        assert_int_equal(s.e.n_stretched, 0);
        assert_int_equal(s.epoch_max_usec, p.epoch_usec);
        autotune_engine_done(&s.e);
        autotune_policy_done(&p);
}

/* ---- the watch between trials, at its real cadence: a tick every 5 s,
 * the other checks every 10 s ---- */

typedef struct Watcher {
        AutotuneLookout w;
        AutotuneMemory mem[AUTOTUNE_MEMORY_MAX];
        size_t n_mem;
        bool has_choice;
        AutotuneCandidate choice;
        uint64_t last_trial;
        unsigned recalls, starts, broken, held;
        uint64_t recalled_at, started_at, broken_at;
        const char *reason;
} Watcher;

/* The watch for usec of simulated time, its verdicts carried out as the
 * daemon's watch does (a recall or a fallback puts the setting in force;
 * a start is counted as a trial started, none runs). */
static void watch_for(Sim *s, Watcher *wt, const AutotunePolicy *p, uint64_t usec) {
        uint64_t end = s->now + usec;

        while (s->now + AUTOTUNE_RECALL_INTERVAL_USEC <= end) {
                advance(s, AUTOTUNE_RECALL_INTERVAL_USEC);
                AutotuneLookoutInput in = { .policy = p, .memory = wt->mem, .n_memory = wt->n_mem,
                                       .has_choice = wt->has_choice, .choice = &wt->choice,
                                       .last_trial_mono = wt->last_trial, .stat = s->st, .now = s->now };
                AutotuneLookoutVerdict v = autotune_lookout_tick(&wt->w, &s->e, &in, AUTOTUNE_RECALL_INTERVAL_USEC,
                                                       AUTOTUNE_WATCH_INTERVAL_USEC);
                if (v.recall == AUTOTUNE_LOOKOUT_RECALL_APPLY) {
                        wt->choice = wt->mem[v.recall_index].cand;
                        wt->has_choice = true;
                        s->in_force = wt->choice;
                        wt->recalls++;
                        wt->recalled_at = s->now;
                        continue;
                }
                if (v.promise == AUTOTUNE_LOOKOUT_PROMISE_BROKEN) {
                        wt->choice = wt->w.fallback;
                        s->in_force = wt->choice;
                        wt->broken++;
                        wt->broken_at = s->now;
                } else if (v.promise == AUTOTUNE_LOOKOUT_PROMISE_HELD)
                        wt->held++;
                if (v.start) {
                        wt->starts++;
                        wt->started_at = wt->last_trial = s->now;
                        wt->reason = v.start;
                }
        }
}

/* The signature of the workload the sim runs now, over 10 s. */
static AutotuneSignature sim_signature(Sim *s) {
        AutotuneBlockStat a = s->st;
        AutotuneEpochFigures f;
        AutotuneSignature sig;

        advance(s, 10 * USEC);
        autotune_epoch_figures(&a, &s->st, 10 * USEC, &f);
        autotune_signature(&f, &sig);
        return sig;
}

/* A reader: no writes under any setting. */
static const Model READS[] = {
        { "none", 1.0, 0 },
        { "mq-deadline", 1.0, 0 },
        {},
};

static void test_recall(void **state) {
        AutotunePolicy p = policy(NULL);
        Watcher wt = {};
        Sim s;

        sim_init(&s, READS, "none", NULL);
        autotune_lookout_init(&wt.w);
        /* a trial chose mq-deadline for 4 KiB random reads */
        AutotuneSignature a = sim_signature(&s);
        AutotuneCandidate dl = { .scheduler = "mq-deadline", .wbt_lat_usec = AUTOTUNE_WBT_UNSET };
        autotune_memory_record(wt.mem, &wt.n_mem, &a, &dl, 1);
        /* another workload (reads of 16 KiB): nothing for a minute */
        s.read_kb = 16;
        watch_for(&s, &wt, &p, 60 * USEC);
        assert_int_equal(wt.recalls, 0);
        assert_int_equal(wt.starts, 0);
        assert_string_equal(s.in_force.scheduler, "none");
        /* the first workload is back: its setting within two ticks */
        s.read_kb = 4;
        uint64_t back = s.now;
        watch_for(&s, &wt, &p, 30 * USEC);
        assert_int_equal(wt.recalls, 1);
        assert_true(wt.recalled_at - back <= 2 * AUTOTUNE_RECALL_INTERVAL_USEC);
        assert_string_equal(s.in_force.scheduler, "mq-deadline");
        print_message("# recalled %.1f s after the workload's return\n", (double) (wt.recalled_at - back) / 1e6);
        /* it stays: no recall again, for ten minutes */
        watch_for(&s, &wt, &p, 600 * USEC);
        assert_int_equal(wt.recalls, 1);

        /* after a start (a fresh watch: the daemon put the originals
         * back), the workload running counts as an arrival: recalled at
         * the second tick */
        Watcher w2 = { .n_mem = wt.n_mem };
        memcpy(w2.mem, wt.mem, sizeof wt.mem);
        autotune_lookout_init(&w2.w);
        snprintf(s.in_force.scheduler, sizeof s.in_force.scheduler, "none");
        uint64_t start = s.now;
        watch_for(&s, &w2, &p, 10 * USEC);
        assert_int_equal(w2.recalls, 1);
        assert_int_equal(w2.recalled_at - start, 2 * AUTOTUNE_RECALL_INTERVAL_USEC);
        /* AutoRemember=no: nothing recalled */
        Watcher w3 = { .n_mem = wt.n_mem };
        memcpy(w3.mem, wt.mem, sizeof wt.mem);
        autotune_lookout_init(&w3.w);
        p.remember = false;
        watch_for(&s, &w3, &p, 60 * USEC);
        assert_int_equal(w3.recalls, 0);
        autotune_engine_done(&s.e);
        autotune_policy_done(&p);
}

static void test_workload_change(void **state) {
        AutotunePolicy p = policy(NULL);
        Watcher wt = {};
        Sim s;

        p.on_workload_change = true;
        sim_init(&s, TIE, "none", NULL);
        autotune_lookout_init(&wt.w);
        /* a steady workload: no trial in an hour */
        watch_for(&s, &wt, &p, 3600 * USEC);
        assert_int_equal(wt.starts, 0);
        /* it turns from 4 KiB reads to 256 KiB reads: three changed
         * intervals of 10 s in a row start a trial */
        s.read_kb = 256;
        uint64_t changed = s.now;
        watch_for(&s, &wt, &p, 120 * USEC);
        assert_int_equal(wt.starts, 1);
        assert_string_equal(wt.reason, "workload changed");
        uint64_t took = wt.started_at - changed;
        print_message("# a trial %.1f s after the workload changed\n", (double) took / 1e6);
        assert_true(took >= 3 * AUTOTUNE_WATCH_INTERVAL_USEC - AUTOTUNE_RECALL_INTERVAL_USEC);
        assert_true(took <= 4 * AUTOTUNE_WATCH_INTERVAL_USEC);
        /* the new workload is the one in force from then on */
        watch_for(&s, &wt, &p, 600 * USEC);
        assert_int_equal(wt.starts, 1);
        /* a change that does not last three intervals: no trial */
        s.read_kb = 4;
        watch_for(&s, &wt, &p, 20 * USEC);
        s.read_kb = 256;
        watch_for(&s, &wt, &p, 600 * USEC);
        assert_int_equal(wt.starts, 1);
        autotune_engine_done(&s.e);
        autotune_policy_done(&p);
}

static void test_periodic(void **state) {
        AutotunePolicy p = policy(NULL);
        Watcher wt = {};
        Sim s;

        p.interval_usec = 300 * USEC;
        sim_init(&s, TIE, "none", NULL);
        autotune_lookout_init(&wt.w);
        /* no trial yet: the period counts from one */
        watch_for(&s, &wt, &p, 600 * USEC);
        assert_int_equal(wt.starts, 0);
        uint64_t last = wt.last_trial = s.now;
        /* one every period, each from the one before */
        watch_for(&s, &wt, &p, 3 * p.interval_usec - 30 * USEC);
        assert_int_equal(wt.starts, 2);
        assert_string_equal(wt.reason, "AutoTrialIntervalSec=");
        assert_true(wt.started_at >= last + 2 * p.interval_usec);
        assert_true(wt.started_at <= last + 2 * (p.interval_usec + AUTOTUNE_WATCH_INTERVAL_USEC));
        autotune_engine_done(&s.e);
        autotune_policy_done(&p);
}

/* The promise: a change watched against the write bound it was chosen
 * under; a disk that then writes below it falls back, within the
 * intervals the judgement needs. */
static const Model PROMISE[] = {
        { "none", 8.0, 100 },
        { "mq-deadline", 2.0, 100 },
        { "kyber", 2.6, 100 },
        {},
};

static void test_promise(void **state) {
        AutotunePolicy p = policy("none mq-deadline kyber");
        Sim s;

        for (int broken = 0; broken < 2; broken++) {
                Watcher wt = {};
                sim_init(&s, PROMISE, "none", NULL);
                autotune_lookout_init(&wt.w);
                trial(&s, &p, "[none] mq-deadline kyber");
                assert_int_equal(s.e.decision.verdict, AUTOTUNE_VERDICT_CHANGE);
                wt.choice = s.in_force;
                wt.has_choice = true;
                wt.last_trial = s.now;
                autotune_lookout_restart(&wt.w);
                autotune_lookout_promise(&wt.w, &s.e, s.now);
                assert_true(wt.w.promising);
                assert_true(wt.w.promise.write_floor_mbps > 0);
                uint64_t t0 = s.now;
                if (broken)
                        s.write_scale = 0.75; /* the disk slows: 75 MB/s, under the floor */
                watch_for(&s, &wt, &p, 400 * USEC);
                if (!broken) {
                        assert_int_equal(wt.broken, 0);
                        assert_int_equal(wt.held, 1);
                        assert_int_equal(wt.w.promise_state, AUTOTUNE_PROMISE_HOLDS);
                        assert_false(wt.w.promising);
                        assert_string_equal(s.in_force.scheduler, "mq-deadline");
                } else {
                        assert_int_equal(wt.broken, 1);
                        assert_int_equal(wt.w.promise_state, AUTOTUNE_PROMISE_BROKEN);
                        assert_true(wt.w.fell_back);
                        assert_string_not_equal(wt.w.fallback.scheduler, "mq-deadline");
                        assert_string_equal(s.in_force.scheduler, wt.w.fallback.scheduler);
                        /* the broken choice is left out of the next trials */
                        assert_int_equal(s.e.n_tripped, 1);
                        assert_string_equal(s.e.tripped[0].cand.scheduler, "mq-deadline");
                        uint64_t took = wt.broken_at - t0;
                        print_message("# broken %.1f s after the change: %s; fell back to %s\n", (double) took / 1e6,
                                      wt.w.promise_why, wt.w.fallback.scheduler);
                        assert_true(took >= AUTOTUNE_PROMISE_MIN_INTERVALS * AUTOTUNE_WATCH_INTERVAL_USEC);
                        assert_true(took <= (AUTOTUNE_PROMISE_MIN_INTERVALS + 2) * AUTOTUNE_WATCH_INTERVAL_USEC);
                }
                autotune_engine_done(&s.e);
        }
        autotune_policy_done(&p);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_clear_winner),
                cmocka_unit_test(test_tie),
                cmocka_unit_test(test_refused),
                cmocka_unit_test(test_abort),
                cmocka_unit_test(test_family_search),
                cmocka_unit_test(test_peek),
                cmocka_unit_test(test_shallow_last),
                cmocka_unit_test(test_stretch),
                cmocka_unit_test(test_recall),
                cmocka_unit_test(test_workload_change),
                cmocka_unit_test(test_periodic),
                cmocka_unit_test(test_promise),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
