/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* autotune-lockstep.c: a stack's trial over fake members (issue 33, item 4). Its
 * start refused, naming the member and both values, when the members
 * differ or one is in a trial already; a member's own trial refused while
 * its stack's runs or its choice is in force; the bookkeeping of one apply;
 * and whole trials of autotune-engine.c driven as the runner drives a stack's:
 * a member that lacks a scheduler, a write that fails on one member in the
 * middle of the trial and at its last apply. At every epoch's start, and
 * after the trial, every member carries the same setting. Simulated time,
 * milliseconds of CPU. */

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "autotune-engine.h"
#include "autotune-lockstep.h"
#include "autotune.h"
#include "util.h"

#define APPLY_USEC 20000ULL

static AutotuneCandidate setting(const char *scheduler, unsigned nr_requests) {
        AutotuneCandidate c = { .wbt_lat_usec = AUTOTUNE_WBT_UNSET, .nr_requests = nr_requests };
        snprintf(c.scheduler, sizeof c.scheduler, "%s", scheduler);
        return c;
}

static void test_check_start(void **state) {
        char why[256];
        AutotuneLockstepMember m[3] = {
                { .name = "nvme0n1", .current = setting("mq-deadline", 64) },
                { .name = "nvme0n2", .current = setting("mq-deadline", 64) },
                { .name = "nvme0n3", .current = setting("mq-deadline", 64) },
        };

        assert_int_equal(autotune_lockstep_check_start("dm-0", m, 3, why, sizeof why), 0);

        /* one member set by hand to another scheduler: refused, the
         * member and both values named (not made alike: which one is
         * the baseline is the operator's to say) */
        m[2].current = setting("bfq", 64);
        assert_int_equal(autotune_lockstep_check_start("dm-0", m, 3, why, sizeof why), -EPERM);
        assert_string_equal(why, "the members of dm-0 differ: nvme0n3 has bfq nr_requests=64, nvme0n1 has mq-deadline "
                                 "nr_requests=64 (a [Device] section matching the stack puts them alike)");
        /* a knob the policy tries differs, the scheduler alike */
        m[2].current = setting("mq-deadline", 64);
        m[1].current = setting("mq-deadline", 256);
        assert_int_equal(autotune_lockstep_check_start("dm-0", m, 3, why, sizeof why), -EPERM);
        assert_non_null(strstr(why, "nvme0n2 has mq-deadline nr_requests=256, nvme0n1 has mq-deadline nr_requests=64"));
        m[1].current = setting("mq-deadline", 64);

        /* a member in a trial of its own, or of another stack's */
        m[1].trial_of = "nvme0n2";
        assert_int_equal(autotune_lockstep_check_start("dm-0", m, 3, why, sizeof why), -EPERM);
        assert_string_equal(why, "member nvme0n2 is in a trial of its own");
        m[1].trial_of = "md0";
        assert_int_equal(autotune_lockstep_check_start("dm-0", m, 3, why, sizeof why), -EPERM);
        assert_string_equal(why, "member nvme0n2 is in a trial already (md0's)");
        m[1].trial_of = NULL;

        m[0].read_error = -ENOENT;
        assert_int_equal(autotune_lockstep_check_start("dm-0", m, 3, why, sizeof why), -EPERM);
        assert_non_null(strstr(why, "cannot read the current setting of member nvme0n1"));
        assert_int_equal(autotune_lockstep_check_start("dm-0", m, 0, why, sizeof why), -EPERM);
}

static void test_check_own(void **state) {
        char why[256];

        assert_int_equal(autotune_lockstep_check_own("nvme0n1", "dm-0", false, false, why, sizeof why), 0);
        assert_int_equal(autotune_lockstep_check_own("nvme0n1", "dm-0", true, false, why, sizeof why), -EPERM);
        assert_string_equal(why, "nvme0n1 is a member of dm-0, whose trial is running: its own trial would take the "
                                 "lockstep apart");
        assert_int_equal(autotune_lockstep_check_own("nvme0n1", "dm-0", false, true, why, sizeof why), -EPERM);
        assert_non_null(strstr(why, "carries what dm-0's trial chose"));
}

static void test_bookkeeping(void **state) {
        AutotuneLockstep l;
        AutotuneLockstepOutcome ok = { .carries = true, .switched = true, .usec = 30 },
                        slow = { .carries = true, .usec = 90 },
                        failed = { .refused = true, .usec = 10 },
                        stale = { .carries = false, .usec = 10 };

        assert_int_equal(autotune_lockstep_init(&l, 3), 0);
        autotune_lockstep_begin(&l);
        assert_false(autotune_lockstep_back(&l, 1, "b", &ok));
        assert_false(autotune_lockstep_back(&l, 1, "b", &failed)); /* back already: ignored */
        assert_false(autotune_lockstep_all_back(&l));
        assert_false(autotune_lockstep_back(&l, 0, "a", &slow));
        assert_true(autotune_lockstep_back(&l, 2, "c", &ok));
        assert_false(l.gathered.refused);
        assert_int_equal(l.gathered.switches, 1); /* one switch of the stack */
        assert_int_equal(l.gathered.usec, 90);    /* side by side: the slowest */
        assert_int_equal(autotune_lockstep_end(&l, false), AUTOTUNE_LOCKSTEP_END_DONE);

        /* the next apply: one refuses, one does not carry it read back */
        autotune_lockstep_begin(&l);
        assert_false(autotune_lockstep_is_back(&l, 0));
        assert_false(autotune_lockstep_back(&l, 2, "c", &stale));
        assert_false(autotune_lockstep_back(&l, 0, "a", &failed));
        assert_true(autotune_lockstep_back(&l, 1, "b", &ok));
        assert_true(l.gathered.refused);
        assert_string_equal(l.refused_by, "c");
        assert_int_equal(autotune_lockstep_end(&l, false), AUTOTUNE_LOCKSTEP_END_FALL_BACK);
        assert_int_equal(autotune_lockstep_end(&l, true), AUTOTUNE_LOCKSTEP_END_DIFFER);

        /* a member without a job does not take the candidate */
        autotune_lockstep_begin(&l);
        autotune_lockstep_no_job(&l, 0, "a");
        assert_false(autotune_lockstep_back(&l, 1, "b", &ok));
        assert_true(autotune_lockstep_back(&l, 2, "c", &ok));
        assert_true(l.gathered.refused);
        assert_string_equal(l.refused_by, "a");
        autotune_lockstep_done(&l);
}

/* ---- whole trials over fake members ---- */

typedef struct Member {
        const char *name;
        const char *lacks;    /* a scheduler it does not offer (NULL: none) */
        unsigned fail_at;     /* the apply (1-based) whose write fails on it (0: none) */
        AutotuneCandidate in_force;
} Member;

typedef struct StackSim {
        AutotuneEngine e;
        AutotuneLockstep l;
        Member m[3];
        size_t n;
        uint64_t now;
        double acc[2];
        AutotuneBlockStat st;
        unsigned applies, epochs, refusals;
        bool fell_back;
} StackSim;

/* The top's read await under the setting its members carry. */
static double await_ms(const char *scheduler) {
        return streq(scheduler, "kyber") ? 1.0 : streq(scheduler, "mq-deadline") ? 2.0 : 8.0;
}

static void advance(StackSim *s, uint64_t usec) {
        double sec = (double) usec / 1e6, rd = 1000 * sec;

        s->now += usec;
        s->acc[0] += rd;
        s->acc[1] += rd * await_ms(s->m[0].in_force.scheduler);
        s->st.rd_ios = (uint64_t) s->acc[0];
        s->st.rd_sectors = s->st.rd_ios * 8;
        s->st.rd_ticks = (uint64_t) s->acc[1];
        s->st.wr_ios += (uint64_t) (1500 * sec);
        s->st.wr_sectors = s->st.wr_ios * 128;
        s->st.io_ticks += usec / 1000;
        s->st.time_in_queue += (uint64_t) (4 * sec * 1000);
}

static bool alike(const AutotuneCandidate *a, const AutotuneCandidate *b) {
        return autotune_lockstep_carries(a, b) && autotune_lockstep_carries(b, a);
}

static void members_alike(const StackSim *s, const AutotuneCandidate *c) {
        for (size_t i = 0; i < s->n; i++)
                if (!alike(&s->m[i].in_force, c))
                        fail_msg("%s carries %s, not %s", s->m[i].name, s->m[i].in_force.scheduler, c->scheduler);
}

/* Each member's job for c, back in reverse order (the last member's
 * first): the runner's member_applied(). True when the last one is back. */
static bool apply_members(StackSim *s, const AutotuneCandidate *c) {
        bool done = false;

        s->applies++;
        autotune_lockstep_begin(&s->l);
        for (size_t k = s->n; k-- > 0;) {
                Member *m = &s->m[k];
                AutotuneLockstepOutcome o = { .usec = APPLY_USEC };
                o.refused = (m->lacks && streq(m->lacks, c->scheduler)) || m->fail_at == s->applies;
                if (!o.refused) {
                        o.switched = !streq(m->in_force.scheduler, c->scheduler);
                        m->in_force = *c;
                }
                o.carries = alike(&m->in_force, c);
                done = autotune_lockstep_back(&s->l, k, m->name, &o);
        }
        advance(s, APPLY_USEC);
        return done;
}

static void drive(StackSim *s, AutotuneTrialAction act) {
        for (;;)
                switch (act.what) {
                case AUTOTUNE_TRIAL_DO_NOTHING:
                        fail_msg("the engine waits for nothing");
                        return;
                case AUTOTUNE_TRIAL_DO_FINISH: {
                        /* the trial's last apply, checked as the runner does */
                        const AutotuneCandidate *before = &s->e.cand[0];
                        const AutotuneCandidate *c = &s->e.cand[s->e.current];
                        assert_true(apply_members(s, c));
                        AutotuneLockstepEnd end = autotune_lockstep_end(&s->l, alike(c, before));
                        if (end == AUTOTUNE_LOCKSTEP_END_FALL_BACK) {
                                s->fell_back = true;
                                assert_true(apply_members(s, before));
                                end = autotune_lockstep_end(&s->l, true);
                        }
                        assert_int_equal(end, AUTOTUNE_LOCKSTEP_END_DONE);
                        autotune_engine_finished(&s->e);
                        return;
                }
                case AUTOTUNE_TRIAL_DO_APPLY: {
                        assert_true(apply_members(s, &s->e.cand[s->e.current]));
                        AutotuneTrialApplied ev = s->l.gathered;
                        s->refusals += ev.refused;
                        ev.have_stat = !ev.refused;
                        ev.stat = s->st;
                        ev.now = s->now;
                        act = autotune_engine_applied(&s->e, &ev);
                        break;
                }
                case AUTOTUNE_TRIAL_DO_WAIT:
                        advance(s, act.usec);
                        if (act.wait == AUTOTUNE_TRIAL_WAIT_SETTLE) {
                                act = autotune_engine_settled(&s->e, &s->st, 0, false, s->now);
                                if (s->e.phase == AUTOTUNE_TRIAL_MEASURING) {
                                        /* an epoch begins: every member has the candidate */
                                        members_alike(s, &s->e.cand[s->e.current]);
                                        s->epochs++;
                                }
                        } else
                                act = autotune_engine_epoch(&s->e, &s->st, 0, 0, 0, 0, s->now);
                        break;
                case AUTOTUNE_TRIAL_DO_NEXT:
                        act = autotune_engine_next(&s->e, s->now);
                        break;
                }
}

static void sim_init(StackSim *s, const char *current) {
        *s = (StackSim) { .n = 3 };
        const char *names[] = { "nvme0n1", "nvme0n2", "nvme0n3" };
        for (size_t i = 0; i < s->n; i++)
                s->m[i] = (Member) { .name = names[i], .in_force = setting(current, 0) };
        autotune_engine_init(&s->e, "dm-0");
        assert_int_equal(autotune_lockstep_init(&s->l, s->n), 0);
}

static void sim_trial(StackSim *s, AutotunePolicy *p) {
        char why[256];
        AutotuneLockstepMember lm[3];

        for (size_t i = 0; i < s->n; i++)
                lm[i] = (AutotuneLockstepMember) { .name = s->m[i].name, .current = s->m[i].in_force };
        assert_int_equal(autotune_lockstep_check_start("dm-0", lm, s->n, why, sizeof why), 0);
        AutotuneTrialSetup setup = { .policy = p, .current = s->m[0].in_force,
                                     .scheduler_line = "[none] mq-deadline kyber", .now = s->now };
        setup.current.baseline = true;
        assert_int_equal(autotune_engine_start(&s->e, &setup, why, sizeof why), 0);
        drive(s, autotune_engine_begin(&s->e, s->now));
        print_message("# dm-0: %s %s; %u applies, %u epochs, %u refused%s\n",
                      autotune_verdict_to_string(s->e.decision.verdict), s->e.cand[s->e.decision.winner].scheduler,
                      s->applies, s->epochs, s->refusals, s->fell_back ? ", fell back" : "");
}

static AutotunePolicy policy(void) {
        AutotunePolicy p;
        char buf[256];
        const char *msg;

        autotune_policy_init(&p);
        p.enabled = true;
        assert_int_equal(autotune_policy_parse(&p, "AutoScheduler", "none mq-deadline kyber", buf, sizeof buf, &msg),
                         0);
        return p;
}

static void sim_done(StackSim *s) {
        autotune_engine_done(&s->e);
        autotune_lockstep_done(&s->l);
}

static void test_trial_alike(void **state) {
        AutotunePolicy p = policy();
        StackSim s;

        /* every member takes every candidate: kyber, the best, wins */
        sim_init(&s, "none");
        sim_trial(&s, &p);
        assert_int_equal(s.e.decision.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_string_equal(s.e.cand[s.e.decision.winner].scheduler, "kyber");
        assert_int_equal(s.refusals, 0);
        members_alike(&s, &s.e.cand[s.e.decision.winner]);
        assert_true(s.epochs >= 3);
        sim_done(&s);
        autotune_policy_done(&p);
}

static void test_trial_member_lacks(void **state) {
        AutotunePolicy p = policy();
        StackSim s;

        /* the last member lacks kyber: refused for the stack at its first
         * apply (the two others took it and go on with the rest), never
         * measured; mq-deadline wins, on every member */
        sim_init(&s, "none");
        s.m[2].lacks = "kyber";
        sim_trial(&s, &p);
        assert_true(s.e.refused[2]);
        assert_string_equal(s.e.drops[2].why, "refused by the kernel");
        assert_int_equal(s.e.series[2].n, 0);
        assert_int_equal(s.refusals, 1);
        assert_int_equal(s.e.decision.verdict, AUTOTUNE_VERDICT_CHANGE);
        assert_string_equal(s.e.cand[s.e.decision.winner].scheduler, "mq-deadline");
        members_alike(&s, &s.e.cand[s.e.decision.winner]);
        sim_done(&s);
        autotune_policy_done(&p);
}

static void test_trial_write_fails(void **state) {
        AutotunePolicy p = policy();
        StackSim s;

        /* a write that fails once on the middle member, at the third
         * apply: that candidate is refused for the stack (left out of the
         * trial), the others carried on alike */
        sim_init(&s, "none");
        s.m[1].fail_at = 3;
        sim_trial(&s, &p);
        assert_int_equal(s.refusals, 1);
        size_t refused = 0;
        for (size_t c = 0; c < s.e.n_cand; c++)
                refused += s.e.refused[c];
        assert_int_equal(refused, 1);
        members_alike(&s, &s.e.cand[s.e.current]);
        assert_false(s.fell_back);
        sim_done(&s);

        /* the trial's last apply (kyber, chosen) fails on the first
         * member: every member goes back to the setting before the trial */
        sim_init(&s, "none");
        sim_trial(&s, &p);
        unsigned applies = s.applies; /* the same trial without the failure */
        sim_done(&s);
        sim_init(&s, "none");
        s.m[0].fail_at = applies;
        sim_trial(&s, &p);
        assert_string_equal(s.e.cand[s.e.decision.winner].scheduler, "kyber");
        assert_true(s.fell_back);
        AutotuneCandidate none = setting("none", 0);
        members_alike(&s, &none);
        sim_done(&s);
        autotune_policy_done(&p);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_check_start),
                cmocka_unit_test(test_check_own),
                cmocka_unit_test(test_bookkeeping),
                cmocka_unit_test(test_trial_alike),
                cmocka_unit_test(test_trial_member_lacks),
                cmocka_unit_test(test_trial_write_fails),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
