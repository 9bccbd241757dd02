/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One trial as a state machine (autotune-engine.h): what to apply, how long
 * to wait, when to measure, when the race or the search is over and what
 * it chose. Pure: the clock, the stat and the probes come in as events. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune-engine.h"
#include "log.h"
#include "util.h"

static const AutotuneTrialAction NOTHING = { .what = AUTOTUNE_TRIAL_DO_NOTHING };

static AutotuneTrialAction wait_for(AutotuneTrialWait w, uint64_t usec) {
        return (AutotuneTrialAction) { .what = AUTOTUNE_TRIAL_DO_WAIT, .wait = w, .usec = usec };
}

void autotune_engine_init(AutotuneEngine *e, const char *name) {
        *e = (AutotuneEngine) {};
        snprintf(e->name, sizeof e->name, "%s", name);
}

void autotune_engine_done(AutotuneEngine *e) {
        if (e->policy_copied)
                autotune_policy_done(&e->policy);
        e->policy_copied = false;
        e->scheduler_line = mfree(e->scheduler_line);
}

bool autotune_engine_running(const AutotuneEngine *e) {
        return e->phase != AUTOTUNE_TRIAL_IDLE && e->phase != AUTOTUNE_TRIAL_FINISHING;
}

static bool decided(AutotuneVerdict v) {
        return v == AUTOTUNE_VERDICT_CHANGE || v == AUTOTUNE_VERDICT_KEEP_BEST || v == AUTOTUNE_VERDICT_KEEP_NOISE ||
               v == AUTOTUNE_VERDICT_KEEP_HYSTERESIS;
}

void autotune_engine_summarise(AutotuneEngine *e) {
        autotune_summarise(&e->policy, e->series, e->n_cand, e->summary);
}

/* The candidates of family f around incumbent, the kernel guards and the
 * candidates that tripped applied; -ENOENT: nothing to compare (why is
 * appended to the trial's note). */
static int family_candidates(AutotuneEngine *e, AutotuneFamily f, const AutotuneCandidate *incumbent, uint64_t now) {
        char note[256];
        size_t n;
        int r;

        r = autotune_family_candidates(&e->policy, f, incumbent, e->scheduler_line, e->zoned, e->kernel_version, 0,
                                       e->cand, &n, note, sizeof note);
        if (r >= 0)
                n = autotune_drop_tripped(e->cand, n, e->tripped, e->n_tripped, now, note, sizeof note);
        if (note[0]) {
                size_t len = strlen(e->note);
                if (len + 1 < sizeof e->note)
                        snprintf(e->note + len, sizeof e->note - len, "%s%s: %s", len ? "; " : "",
                                 autotune_family_to_string(f), note);
        }
        e->n_cand = n;
        return r < 0 || n < 2 ? -ENOENT : 0;
}

/* The state of a phase about to be measured. */
static void phase_begin(AutotuneEngine *e, AutotuneFamily f) {
        e->family = f;
        e->policy.objective = f == AUTOTUNE_FAMILY_READ_AHEAD ? AUTOTUNE_OBJECTIVE_SEQ_READ : e->objective0;
        memset(e->series, 0, sizeof e->series);
        memset(e->refused, 0, sizeof e->refused);
        memset(e->summary, 0, sizeof e->summary);
        memset(e->drops, 0, sizeof e->drops);
        e->round = 0;
        e->n_generated += (unsigned) e->n_cand - (e->n_phases > 0); /* the incumbent was counted already */
}

/* Candidates still in the race, the current setting included. */
static size_t in_race(const AutotuneEngine *e) {
        size_t k = 0;
        for (size_t c = 0; c < e->n_cand; c++)
                k += !e->drops[c].dropped;
        return k;
}

/* The next round's order, unless the trial is over: its last round done,
 * every challenger gone, or the round's switches beyond AutoMaxSwitches=. */
static bool plan_round(AutotuneEngine *e) {
        if (e->round >= e->policy.rounds || in_race(e) < 2)
                return false;
        e->n_order = autotune_round_order(e->cand, e->n_cand, e->drops, e->round, e->order);
        e->pos = 0;
        unsigned need = autotune_order_switches(e->cand, e->order, e->n_order, e->cand[e->current].scheduler);
        if (e->switches + need > e->policy.max_switches) {
                snprintf(e->stop_reason, sizeof e->stop_reason,
                         "ended after %u of %u rounds: the next would take the scheduler switches to %u, above "
                         "AutoMaxSwitches=%u", e->round, e->policy.rounds, e->switches + need, e->policy.max_switches);
                return false;
        }
        e->n_slots = e->slot + e->n_order * (e->policy.rounds - e->round);
        return true;
}

static AutotuneTrialAction finish(AutotuneEngine *e, uint64_t now);
static AutotuneTrialAction next_epoch(AutotuneEngine *e, uint64_t now);

/* The candidate at the round's position, passing over those the kernel
 * refused or that left the race in this round. */
static AutotuneTrialAction apply_slot(AutotuneEngine *e, uint64_t now) {
        while (e->pos < e->n_order && (e->refused[e->order[e->pos]] || e->drops[e->order[e->pos]].dropped))
                e->pos++;
        if (e->pos >= e->n_order) {
                e->pos = e->n_order - 1;
                return next_epoch(e, now);
        }
        e->current = e->order[e->pos];
        e->phase = AUTOTUNE_TRIAL_APPLYING;
        return (AutotuneTrialAction) { .what = AUTOTUNE_TRIAL_DO_APPLY };
}

/* A search's phase is over: its winner is the next phase's incumbent.
 * true, with *ret its first apply: the next phase runs; false: the search
 * is over (no family left, none with a candidate, or the switch cap
 * reached), and finish() decides with the last phase. */
static bool next_phase(AutotuneEngine *e, uint64_t now, AutotuneTrialAction *ret) {
        AutotuneDecision dec;
        AutotuneSignature sig;
        char w[AUTOTUNE_CANDIDATE_STRMAX];
        char active[32];

        autotune_decide_raced(&e->policy, e->series, e->n_cand, e->drops, e->summary, &dec);
        for (size_t c = 0; c < e->n_cand; c++) {
                e->n_measured += e->series[c].n > 0 && (c > 0 || e->n_phases == 0);
                /* the write bound of the phases to come: the best writer
                 * of every candidate measured, this phase's too */
                if (e->summary[c].n > 0)
                        e->policy.write_seen_mbps = fmax(e->policy.write_seen_mbps, e->summary[c].write_mbps);
        }
        e->n_phases++;
        if (autotune_series_signature(e->series, e->n_cand, &sig))
                e->sequential = autotune_sequential_reads(&sig, e->policy.min_iops);
        AutotuneCandidate inc = e->cand[dec.winner];
        size_t len = strlen(e->phases_text);
        if (len + 1 < sizeof e->phases_text)
                snprintf(e->phases_text + len, sizeof e->phases_text - len, "%s%s: %s (%s)", len ? "; " : "",
                         autotune_family_to_string(e->family), autotune_candidate_format(&inc, w, sizeof w),
                         autotune_verdict_to_string(dec.verdict));
        e->search_changed = e->search_changed || dec.verdict == AUTOTUNE_VERDICT_CHANGE;
        if (!decided(dec.verdict))
                return false; /* idle, too few epochs: the next phase would learn no more */
        snprintf(active, sizeof active, "%s", e->cand[e->current].scheduler);
        if (!e->scheduler_line)
                return false;
        for (AutotuneFamily f = autotune_next_family(&e->policy, e->family, e->sequential); f < _AUTOTUNE_FAMILY_MAX;
             f = autotune_next_family(&e->policy, f, e->sequential)) {
                AutotuneCandidate keep[AUTOTUNE_MAX_CANDIDATES];
                size_t n_keep = e->n_cand;
                memcpy(keep, e->cand, sizeof keep);
                e->policy.objective = e->objective0;
                if (family_candidates(e, f, &inc, now) < 0) {
                        /* the decision of finish() is on the last phase measured */
                        memcpy(e->cand, keep, sizeof keep);
                        e->n_cand = n_keep;
                        continue;
                }
                phase_begin(e, f);
                e->current = 0;
                for (size_t c = 0; c < e->n_cand; c++)
                        if (streq(e->cand[c].scheduler, active)) {
                                e->current = c; /* what is in force, for the switch count of the plan */
                                break;
                        }
                log_info("%s: search phase %u: %s, %zu settings around %s.", e->name, e->n_phases + 1,
                         autotune_family_to_string(f), e->n_cand, autotune_candidate_format(&inc, w, sizeof w));
                if (!plan_round(e)) {
                        e->n_cand = 1; /* measured nothing: the incumbent stands */
                        e->cand[0] = inc;
                        e->series[0].n = 0;
                        return false;
                }
                *ret = apply_slot(e, now);
                return true;
        }
        return false;
}

/* The decision (or the abort's): the setting to put in place is
 * cand[current]. */
static AutotuneTrialAction finish(AutotuneEngine *e, uint64_t now) {
        AutotuneTrialAction act;

        if (e->search && !e->aborted && e->n_cand > 1 && next_phase(e, now, &act))
                return act;
        if (!e->aborted) {
                autotune_decide_raced(&e->policy, e->series, e->n_cand, e->drops, e->summary, &e->decision);
                e->has_result = true;
                if (e->search && e->decision.verdict != AUTOTUNE_VERDICT_CHANGE && e->search_changed &&
                    !autotune_candidate_equal(&e->cand[e->decision.winner], &e->origin0)) {
                        /* an earlier phase changed the setting, the last kept it */
                        e->decision.verdict = AUTOTUNE_VERDICT_CHANGE;
                        snprintf(e->decision.reason, sizeof e->decision.reason, "a search by families: %.200s",
                                 e->phases_text);
                }
        } else {
                autotune_engine_summarise(e);
                e->decision = (AutotuneDecision) { .verdict = AUTOTUNE_VERDICT_ABORTED, .winner = 0, .best = -1,
                                                   .p = 1 };
                snprintf(e->decision.reason, sizeof e->decision.reason, "%s", e->abort_reason);
                e->has_result = true;
                if (e->search) {
                        e->cand[0] = e->origin0; /* back to the setting before the trial, not a phase's */
                        e->n_cand = e->n_cand ? e->n_cand : 1;
                }
        }
        e->policy.objective = e->search ? e->objective0 : e->policy.objective;
        e->current = e->decision.winner;
        e->phase = AUTOTUNE_TRIAL_FINISHING;
        return (AutotuneTrialAction) { .what = AUTOTUNE_TRIAL_DO_FINISH };
}

AutotuneTrialAction autotune_engine_abort(AutotuneEngine *e, const char *reason) {
        snprintf(e->abort_reason, sizeof e->abort_reason, "%s", reason);
        e->aborted = true;
        log_warning("%s: trial ended early: %s; going back to the setting before it.", e->name, e->abort_reason);
        return finish(e, 0);
}

void autotune_engine_end_now(AutotuneEngine *e, const char *reason) {
        snprintf(e->abort_reason, sizeof e->abort_reason, "%s", reason);
        e->aborted = true;
        e->phase = AUTOTUNE_TRIAL_IDLE;
}

void autotune_engine_finished(AutotuneEngine *e) {
        e->phase = AUTOTUNE_TRIAL_IDLE;
}

/* Whether the race settled on the candidate the decision takes: the
 * race's leader is the best mean of the logs among those inside the
 * write bound with half the tolerance to spare, the decision's the best
 * median inside the bound; where two near ones trade places (kyber and
 * mq-deadline at nr_requests=32 on the mixed workload, 12 and 17 ms),
 * a stop on the race's leader would leave the decision to its rank test
 * with 3 epochs a side (p >= 0.05) and keep the setting. The rounds go on
 * instead. */
static bool settled_decides(AutotuneEngine *e) {
        AutotuneSummary sum[AUTOTUNE_MAX_CANDIDATES];
        AutotuneDecision d;

        if (!autotune_race_settled(e->drops, e->n_cand))
                return false;
        autotune_decide_raced(&e->policy, e->series, e->n_cand, e->drops, sum, &d);
        return d.verdict == AUTOTUNE_VERDICT_CHANGE && d.winner == e->drops[0].by;
}

/* After an epoch (or a candidate the kernel refused): the next candidate
 * of the round, or the race's look at the round's end and the next round. */
static AutotuneTrialAction next_epoch(AutotuneEngine *e, uint64_t now) {
        char buf[AUTOTUNE_CANDIDATE_STRMAX];

        e->pos++;
        if (e->pos < e->n_order)
                return apply_slot(e, now);
        bool was[AUTOTUNE_MAX_CANDIDATES];
        for (size_t c = 0; c < e->n_cand; c++)
                was[c] = e->drops[c].dropped;
        if (autotune_race(&e->policy, e->series, e->n_cand, e->drops) > 0)
                for (size_t c = 1; c < e->n_cand; c++)
                        if (e->drops[c].dropped && !was[c])
                                log_info("%s: %s leaves the trial: %s.", e->name,
                                         autotune_candidate_format(&e->cand[c], buf, sizeof buf), e->drops[c].why);
        e->round++;
        if (e->round < e->policy.rounds && settled_decides(e)) {
                const AutotuneDrop *d0 = &e->drops[0];
                snprintf(e->stop_reason, sizeof e->stop_reason,
                         "settled after %u of %u rounds: %s beats the current setting with confidence (p=%.2g)",
                         e->round, e->policy.rounds, autotune_candidate_format(&e->cand[d0->by], buf, sizeof buf),
                         d0->p);
                log_info("%s: trial %s.", e->name, e->stop_reason);
                return finish(e, now);
        }
        if (plan_round(e))
                return apply_slot(e, now);
        return finish(e, now);
}

AutotuneTrialAction autotune_engine_next(AutotuneEngine *e, uint64_t now) {
        return next_epoch(e, now);
}

int autotune_engine_start(AutotuneEngine *e, const AutotuneTrialSetup *s, char *why, size_t why_size) {
        const AutotunePolicy *p = s->policy;
        int r;

        if (e->policy_copied)
                autotune_policy_done(&e->policy);
        e->policy_copied = false;
        r = autotune_policy_copy(&e->policy, p);
        if (r < 0)
                return r;
        e->policy_copied = true;
        free(e->scheduler_line);
        e->scheduler_line = s->scheduler_line ? strdup(s->scheduler_line) : NULL;
        if (s->scheduler_line && !e->scheduler_line)
                return -ENOMEM;
        e->zoned = s->zoned;
        e->kernel_version = s->kernel_version;
        memset(e->series, 0, sizeof e->series);
        memset(e->refused, 0, sizeof e->refused);
        memset(e->summary, 0, sizeof e->summary);
        e->search = p->knobs != 0;
        e->policy.write_seen_mbps = 0; /* a search's phases add theirs */
        e->n_phases = e->n_generated = e->n_measured = 0;
        e->search_changed = e->sequential = false;
        e->phases_text[0] = 0;
        e->origin0 = s->current;
        e->objective0 = p->objective;
        if (e->search) {
                /* Every phase may change the setting: their tests share
                 * the trial's error rate (AutotunePolicy.looks), counted
                 * over the families the search may run (read-ahead
                 * included: whether the workload reads sequentially is
                 * known only later; an upper bound keeps it honest). */
                e->policy.looks = 0;
                for (AutotuneFamily f = autotune_next_family(p, -1, true); f < _AUTOTUNE_FAMILY_MAX;
                     f = autotune_next_family(p, f, true))
                        e->policy.looks++;
                /* the first family with something to compare */
                e->note[0] = 0;
                r = -ENOENT;
                for (AutotuneFamily f = autotune_next_family(p, -1, false); f < _AUTOTUNE_FAMILY_MAX && r < 0;
                     f = autotune_next_family(p, f, false))
                        if (family_candidates(e, f, &s->current, s->now) >= 0) {
                                r = 0;
                                e->family = f;
                        }
        } else
                r = autotune_candidates(p, &s->current, s->scheduler_line, s->zoned, s->kernel_version, 0, e->cand,
                                        &e->n_cand, e->note, sizeof e->note);
        if (r >= 0 && !e->search) {
                e->n_cand = autotune_drop_tripped(e->cand, e->n_cand, e->tripped, e->n_tripped, s->now, e->note,
                                                  sizeof e->note);
                if (e->n_cand < 2)
                        r = -EPERM;
        }
        if (r < 0) {
                snprintf(why, why_size, "nothing to compare: the bounds leave only the current setting%s%s",
                         e->note[0] ? "; " : "", e->note);
                e->n_cand = 0;
                return -EPERM;
        }
        size_t order[AUTOTUNE_MAX_CANDIDATES], k;
        k = autotune_round_order(e->cand, e->n_cand, NULL, 0, order);
        unsigned need = autotune_order_switches(e->cand, order, k, e->cand[0].scheduler);
        if (need > p->max_switches) {
                snprintf(why, why_size, "one round of these candidates takes %u scheduler switches, above "
                                        "AutoMaxSwitches=%u", need, p->max_switches);
                e->n_cand = 0;
                return -EPERM;
        }
        /* a new trial: its counters */
        e->n_slots = e->n_cand * e->policy.rounds;
        e->slot = 0;
        e->round = 0;
        e->stop_reason[0] = 0;
        memset(e->drops, 0, sizeof e->drops);
        e->forced = s->forced;
        e->aborted = e->has_result = false;
        e->abort_reason[0] = 0;
        e->switches = 0;
        e->apply_usec = 0;
        e->drain_usec = 0;
        e->stretch_usec = 0;
        e->n_stretched = e->n_short = 0;
        if (e->search)
                phase_begin(e, e->family);
        return 0;
}

AutotuneTrialAction autotune_engine_begin(AutotuneEngine *e, uint64_t now) {
        e->current = 0;
        (void) plan_round(e);
        return apply_slot(e, now);
}

AutotuneTrialAction autotune_engine_applied(AutotuneEngine *e, const AutotuneTrialApplied *ev) {
        if (e->phase != AUTOTUNE_TRIAL_APPLYING)
                return NOTHING;
        e->apply_usec += ev->usec;
        e->switches += ev->switches;
        if (ev->device_error)
                return autotune_engine_abort(e, "the device vanished");
        if (ev->refused) {
                char buf[AUTOTUNE_CANDIDATE_STRMAX];
                log_notice("%s: the kernel refused %s; left out of this trial.", e->name,
                           autotune_candidate_format(&e->cand[e->current], buf, sizeof buf));
                if (e->current == 0)
                        return autotune_engine_abort(e, "the current setting cannot be put back");
                e->refused[e->current] = true;
                e->drops[e->current] = (AutotuneDrop) { .dropped = true, .by = -1,
                                                    .epochs = (unsigned) e->series[e->current].n };
                snprintf(e->drops[e->current].why, sizeof e->drops[e->current].why, "refused by the kernel");
                return next_epoch(e, ev->now);
        }
        uint64_t settle = e->policy.epoch_usec / 16;
        if (settle > AUTOTUNE_SETTLE_MAX_USEC)
                settle = AUTOTUNE_SETTLE_MAX_USEC;
        e->phase = AUTOTUNE_TRIAL_SETTLING;
        e->applied_mono = ev->now;
        /* nothing in flight without a stat: settle by time alone */
        e->stat_applied = ev->have_stat ? ev->stat : (AutotuneBlockStat) {};
        return wait_for(AUTOTUNE_TRIAL_WAIT_SETTLE, settle);
}

AutotuneTrialAction autotune_engine_settled(AutotuneEngine *e, const AutotuneBlockStat *stat, int stat_error,
                                            bool probes, uint64_t now) {
        char why[256];

        if (e->phase != AUTOTUNE_TRIAL_SETTLING)
                return NOTHING;
        if (!stat) {
                snprintf(why, sizeof why, "cannot read stat: %s", strerror(-stat_error));
                return autotune_engine_abort(e, why);
        }
        e->stat0 = *stat;
        /* The queue of the candidate before must have drained first. */
        if (!autotune_drained(&e->stat_applied, &e->stat0) && now < e->applied_mono + AUTOTUNE_DRAIN_MAX_USEC)
                return wait_for(AUTOTUNE_TRIAL_WAIT_SETTLE, AUTOTUNE_DRAIN_POLL_USEC);
        e->drain_usec += now - e->applied_mono;
        e->t0 = now;
        e->phase = AUTOTUNE_TRIAL_MEASURING;
        e->epoch_end = e->t0 + e->policy.epoch_usec;
        e->peek_ref = -1;
        e->peek_why[0] = 0;
        e->peek_p99 = 0;
        e->probes = probes;
        e->stretching = false;
        e->peek_limit_ms = probes && e->policy.epoch_usec > AUTOTUNE_PEEK_USEC
                                   ? autotune_far_worse_limit(&e->policy, e->series, e->n_cand, e->drops, e->current,
                                                              &e->peek_ref, &e->peek_base_ms)
                                   : 0;
        if (e->peek_limit_ms > 0)
                return wait_for(AUTOTUNE_TRIAL_WAIT_PEEK, AUTOTUNE_PEEK_USEC);
        return wait_for(AUTOTUNE_TRIAL_WAIT_EPOCH, e->policy.epoch_usec);
}

/* Every AUTOTUNE_PEEK_USEC of a challenger's epoch: its probes so far,
 * against the far-worse limit. A setting that starves the reads costs the
 * workload for as long as it is measured; its verdict is often certain in
 * a tenth of the epoch: more of its probes above the limit than the p99
 * of the most probes the epoch can hold allows (then its p99 would be
 * over the limit whatever the rest of the epoch brings). */
AutotuneTrialAction autotune_engine_peek(AutotuneEngine *e, const AutotuneTrialPeek *pk) {
        if (e->phase != AUTOTUNE_TRIAL_MEASURING)
                return NOTHING;
        if (pk->now + 1000 >= e->epoch_end)
                return wait_for(AUTOTUNE_TRIAL_WAIT_EPOCH, 0);
        if (pk->n > 0 && pk->n_max > 0 && autotune_p99_above_certain(pk->above, pk->n_max) &&
            pk->p99_ms > e->peek_limit_ms) {
                e->peek_p99 = pk->p99_ms;
                snprintf(e->peek_why, sizeof e->peek_why,
                         "%" PRIu64 " of its first %" PRIu64 " probes (%.1f s into the epoch) read slower than "
                         "%.2f ms, %u times the best so far's %.2f ms (candidate %d, its slowest epoch): more than "
                         "its epoch's p99 can allow",
                         pk->above, pk->n, (double) (pk->now - e->t0) / 1e6, e->peek_limit_ms, e->policy.guard_factor,
                         e->peek_base_ms, e->peek_ref);
                return wait_for(AUTOTUNE_TRIAL_WAIT_EPOCH, 0);
        }
        uint64_t left = e->epoch_end - pk->now;
        return wait_for(AUTOTUNE_TRIAL_WAIT_PEEK, left < AUTOTUNE_PEEK_USEC ? left : AUTOTUNE_PEEK_USEC);
}

/* How much longer an epoch of the probes' should run for the p99 it lacks
 * (n_probes at elapsed): at the rate they came, a tenth more, within the
 * stretch; an epoch's length where none came yet (a probe may wait behind
 * a deep queue: the very tail to see). 0: no more, and none where it is
 * in vain: at that rate the stretch cannot hold them, or an epoch of the
 * trial already ended without a p99 (the trial ranks by the mean await
 * then: bench/autotune's mixed, probes behind 256 writes, took 20 s where
 * it took 10). */
static uint64_t stretch_for_p99(const AutotuneEngine *e, uint64_t n_probes, uint64_t elapsed) {
        uint64_t cap = e->policy.epoch_usec * AUTOTUNE_EPOCH_STRETCH_MAX, more;

        /* sequential reads rank by MB/s: no latency to wait for */
        if (!e->probes || n_probes >= AUTOTUNE_P99_MIN_PROBES || elapsed >= cap || e->n_short > 0 ||
            e->policy.objective == AUTOTUNE_OBJECTIVE_SEQ_READ)
                return 0;
        if (n_probes > 0 && elapsed > 0 && n_probes * cap / elapsed < AUTOTUNE_P99_MIN_PROBES)
                return 0;
        if (n_probes == 0)
                more = e->policy.epoch_usec;
        else {
                more = (AUTOTUNE_P99_MIN_PROBES - n_probes) * elapsed / n_probes;
                more += more / 10 + 1000;
        }
        return more < cap - elapsed ? more : cap - elapsed;
}

AutotuneTrialAction autotune_engine_epoch(AutotuneEngine *e, const AutotuneBlockStat *stat, int stat_error,
                                          unsigned errors, double p99_ms, uint64_t n_probes, uint64_t now) {
        AutotuneEpochFigures f;
        char why[256], buf[AUTOTUNE_CANDIDATE_STRMAX];

        if (e->phase != AUTOTUNE_TRIAL_MEASURING)
                return NOTHING;
        if (!stat) {
                snprintf(why, sizeof why, "cannot read stat: %s", strerror(-stat_error));
                return autotune_engine_abort(e, why);
        }
        /* cut short: the p99 of the probes it had, over the limit */
        bool peeked = e->peek_why[0] != 0;
        if (!peeked && !(p99_ms > 0)) {
                uint64_t more = stretch_for_p99(e, n_probes, now - e->t0);
                if (more > 0) {
                        if (!e->stretching)
                                e->n_stretched++;
                        e->stretching = true;
                        e->stretch_usec += more;
                        log_debug("%s: epoch %zu: %" PRIu64 " probes in %.2f s, fewer than its p99 needs: %.2f s more",
                                  e->name, e->slot + 1, n_probes, (double) (now - e->t0) / 1e6, (double) more / 1e6);
                        return wait_for(AUTOTUNE_TRIAL_WAIT_EPOCH, more);
                }
                if (e->probes)
                        e->n_short++;
        }
        autotune_epoch_figures(&e->stat0, stat, now - e->t0, &f);
        f.errors = errors;
        f.read_p99_ms = peeked ? e->peek_p99 : p99_ms;
        autotune_candidate_format(&e->cand[e->current], buf, sizeof buf);
        log_debug("%s: epoch %zu/%zu %s: read await %.2f ms, probe p99 %.2f ms, %.0f r/s, write %.1f MB/s, "
                  "in flight %.1f",
                  e->name, e->slot + 1, e->n_slots, buf, f.read_await_ms, f.read_p99_ms, f.read_iops, f.write_mbps,
                  f.in_flight);
        if (f.errors && autotune_guard(&e->policy, &e->series[0], &f, why, sizeof why)) {
                char msg[512];
                if (snprintf(msg, sizeof msg, "guard rail: %s with %s", why, buf) < 0)
                        msg[0] = 0;
                if (e->current != 0)
                        autotune_tripped_add(e->tripped, &e->n_tripped, &e->cand[e->current], now);
                return autotune_engine_abort(e, msg);
        }
        /* The price: a candidate far worse than the best so far leaves the
         * trial after this one epoch (and the next trials for an hour). */
        bool far;
        if (peeked) {
                far = true;
                snprintf(why, sizeof why, "%s", e->peek_why);
        } else
                far = autotune_far_worse(&e->policy, e->series, e->n_cand, e->drops, e->current, &f, why, sizeof why);
        AutotuneSeries *ser = &e->series[e->current];
        if (ser->n < AUTOTUNE_MAX_EPOCHS)
                ser->epochs[ser->n++] = f;
        if (far) {
                AutotuneDrop *dr = &e->drops[e->current];
                *dr = (AutotuneDrop) { .dropped = true, .by = -1, .epochs = (unsigned) ser->n };
                snprintf(dr->why, sizeof dr->why, "far worse than the best so far: %.200s", why);
                autotune_tripped_add(e->tripped, &e->n_tripped, &e->cand[e->current], now);
                log_info("%s: %s leaves the trial: %s.", e->name, buf, dr->why);
        }
        e->slot++;
        return (AutotuneTrialAction) { .what = AUTOTUNE_TRIAL_DO_NEXT };
}
