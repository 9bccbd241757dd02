/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* One trial of closed-loop tuning as a state machine: events in, actions
 * out. It reads no clock, no sysfs and no socket: the daemon's runner
 * (src/daemon/autotune-runner.c) is its I/O driver, and a unit test can be
 * one with a fake clock. The decisions are autotune.h's.
 *
 * A trial: for each candidate of a round, in autotune_round_order(), the
 * driver applies it (AUTOTUNE_TRIAL_DO_APPLY) and says how the kernel took it
 * (autotune_engine_applied()); the engine lets the queue settle and drain
 * (AUTOTUNE_TRIAL_DO_WAIT, autotune_engine_settled()), measures an epoch
 * (AUTOTUNE_TRIAL_DO_WAIT for looks at a challenger's probes, autotune_engine_peek(),
 * or for the epoch's end), and takes its figures (autotune_engine_epoch()). The race drops candidates at
 * each round's end; the trial ends after its last round, when the race
 * settles, at the switch cap, or on an abort (AUTOTUNE_TRIAL_DO_FINISH: the
 * decision is in AutotuneEngine.decision; the driver puts cand[current] in
 * place and calls autotune_engine_finished()). With AutoKnobs= the trial is a
 * search by families: one such race per family, each against the winner
 * of the phase before. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "autotune.h"

/* After an apply, before an epoch starts: the queue's refill after the
 * freeze the apply made; the tail of the candidate before is the drain's. */
#define AUTOTUNE_SETTLE_MAX_USEC 125000ULL
#define AUTOTUNE_DRAIN_POLL_USEC 50000ULL /* then until the queue of the candidate before drained */
#define AUTOTUNE_PEEK_USEC 100000ULL      /* a challenger's probes are looked at this often in its epoch */
/* An epoch whose probes are fewer than its read p99 needs
 * (AUTOTUNE_P99_MIN_PROBES) at its end runs on until it has them, up to
 * this many times AutoEpochSec: one such epoch would turn the whole trial
 * to the mean await, which ties where the tail differs by 100 times. */
#define AUTOTUNE_EPOCH_STRETCH_MAX 4

typedef enum AutotuneTrialPhase {
        AUTOTUNE_TRIAL_IDLE,
        AUTOTUNE_TRIAL_APPLYING,  /* a candidate's apply is on its way */
        AUTOTUNE_TRIAL_SETTLING,  /* applied; the queue refills (and drains) before measuring */
        AUTOTUNE_TRIAL_MEASURING, /* an epoch */
        AUTOTUNE_TRIAL_FINISHING, /* the chosen setting's apply is on its way */
} AutotuneTrialPhase;

typedef enum AutotuneTrialDo {
        AUTOTUNE_TRIAL_DO_NOTHING,
        AUTOTUNE_TRIAL_DO_APPLY,  /* put cand[current] in place, then autotune_engine_applied() */
        AUTOTUNE_TRIAL_DO_WAIT,   /* call back after usec (0: at once): the event the phase waits for */
        AUTOTUNE_TRIAL_DO_NEXT,   /* an epoch is recorded: report progress, then autotune_engine_next() */
        AUTOTUNE_TRIAL_DO_FINISH, /* decided (or aborted): put cand[current] in place, then
                                   * autotune_engine_finished() */
} AutotuneTrialDo;

typedef enum AutotuneTrialWait {
        AUTOTUNE_TRIAL_WAIT_SETTLE,  /* then autotune_engine_settled() with the stat */
        AUTOTUNE_TRIAL_WAIT_PEEK,    /* then autotune_engine_peek() */
        AUTOTUNE_TRIAL_WAIT_EPOCH,   /* then autotune_engine_epoch() with its figures */
} AutotuneTrialWait;

typedef struct AutotuneTrialAction {
        AutotuneTrialDo what;
        AutotuneTrialWait wait;
        uint64_t usec; /* AUTOTUNE_TRIAL_DO_WAIT: how long */
} AutotuneTrialAction;

/* What a trial starts from, read by the driver. */
typedef struct AutotuneTrialSetup {
        const AutotunePolicy *policy;
        AutotuneCandidate current;      /* the setting in force */
        const char *scheduler_line; /* queue/scheduler, the loadable ones added */
        bool zoned;
        unsigned kernel_version;
        bool forced;
        uint64_t now; /* CLOCK_MONOTONIC */
} AutotuneTrialSetup;

/* How the kernel took a candidate's apply. */
typedef struct AutotuneTrialApplied {
        bool refused;       /* a knob of the candidate failed */
        unsigned switches;  /* scheduler switches it made (0 or 1) */
        uint64_t usec;      /* the apply's time on the worker */
        bool device_error;  /* the device vanished */
        bool have_stat;     /* stat: /sys/block/X/stat when it came back */
        AutotuneBlockStat stat;
        uint64_t now;
} AutotuneTrialApplied;

/* A look at a challenger's probes during its epoch: of the n probes since
 * the epoch began, above were slower than AutotuneEngine.peek_limit_ms; p99_ms
 * their p99; n_max the most an epoch (and a look's slack) can hold. */
typedef struct AutotuneTrialPeek {
        uint64_t n, above, n_max;
        double p99_ms;
        uint64_t now;
} AutotuneTrialPeek;

typedef struct AutotuneEngine {
        char name[64]; /* the device, for the log */
        AutotuneTrialPhase phase;
        bool forced;
        AutotunePolicy policy;
        bool policy_copied;
        AutotuneCandidate cand[AUTOTUNE_MAX_CANDIDATES];
        bool refused[AUTOTUNE_MAX_CANDIDATES];
        AutotuneDrop drops[AUTOTUNE_MAX_CANDIDATES]; /* the race: who left, after how many epochs, why */
        AutotuneSeries series[AUTOTUNE_MAX_CANDIDATES];
        AutotuneSummary summary[AUTOTUNE_MAX_CANDIDATES];
        size_t n_cand, current;
        size_t slot;    /* epochs measured so far */
        size_t n_slots; /* the epochs the trial will measure at most, as the race stands */
        unsigned round; /* of policy.rounds */
        size_t order[AUTOTUNE_MAX_CANDIDATES], n_order, pos; /* the round's order, and where it is */
        char stop_reason[160]; /* why the trial ended before its last round (the switch cap), or "" */
        /* A search by families (AutoKnobs=): one phase per family, each a
         * race against the winner of the phase before (candidate 0). */
        bool search;
        int family;             /* the phase's AutotuneFamily */
        unsigned n_phases;      /* phases measured */
        unsigned n_generated;   /* candidates generated over the phases, the incumbents once */
        unsigned n_measured;    /* of them, measured at least one epoch */
        bool search_changed;    /* a phase before the last chose another setting */
        bool sequential;        /* the workload read sequentially in the last phase */
        AutotuneCandidate origin0;  /* the setting before the trial */
        AutotuneObjective objective0;
        char phases_text[512];  /* "scheduler: kyber (change); nr_requests: kept (keep-noise); ..." */
        char *scheduler_line;
        bool zoned;
        unsigned kernel_version;
        AutotuneBlockStat stat0;
        AutotuneBlockStat stat_applied; /* when the candidate's apply came back */
        uint64_t applied_mono;
        uint64_t drain_usec;    /* settling and draining, all candidates */
        uint64_t t0;            /* the epoch's start */
        uint64_t epoch_end;
        /* A look at the probes during an epoch of a challenger: the p99
         * over which it is far worse (0: no look), against what. */
        double peek_limit_ms, peek_base_ms;
        int peek_ref;
        char peek_why[256];     /* the epoch was cut short by a look: why */
        double peek_p99;
        bool probes;            /* the epoch has the device's probes (autotune_engine_settled()) */
        bool stretching;        /* the epoch runs on for its p99's probes */
        uint64_t stretch_usec;  /* epochs ran this much past AutoEpochSec for their probes, all candidates */
        unsigned n_stretched;   /* epochs stretched */
        unsigned n_short;       /* epochs with probes that ended without a p99 (then no more stretch) */
        char note[512];
        char abort_reason[256];
        bool has_result, aborted;
        AutotuneDecision decision;
        unsigned switches;   /* scheduler switches made by the trial */
        uint64_t apply_usec; /* time its applies took on the worker (the queue freezes among it) */
        /* candidates that tripped the guard rail or left the race far
         * worse lately: left out of the next trials */
        AutotuneTripped tripped[AUTOTUNE_TRIPPED_MAX];
        size_t n_tripped;
} AutotuneEngine;

void autotune_engine_init(AutotuneEngine *e, const char *name);
void autotune_engine_done(AutotuneEngine *e);

/* A trial is on (applying, settling or measuring a candidate). */
bool autotune_engine_running(const AutotuneEngine *e);

/* Builds the candidates of a trial. -EPERM with why: no trial (nothing
 * to compare, or the switch cap); the engine stays idle, with no
 * candidates. Then autotune_engine_begin() plans the first round: its
 * first AUTOTUNE_TRIAL_DO_APPLY (or AUTOTUNE_TRIAL_DO_FINISH). */
int autotune_engine_start(AutotuneEngine *e, const AutotuneTrialSetup *s, char *why, size_t why_size);
AutotuneTrialAction autotune_engine_begin(AutotuneEngine *e, uint64_t now);

AutotuneTrialAction autotune_engine_applied(AutotuneEngine *e, const AutotuneTrialApplied *ev);
/* The settle time is over: stat is /sys/block/X/stat now (NULL: it could
 * not be read, stat_error; the trial aborts). Once the queue drained, the
 * epoch begins at now (phase AUTOTUNE_TRIAL_MEASURING: the driver notes its probes
 * then); probes: the driver has the device's probe latencies, so that a
 * challenger's epoch is looked at. */
AutotuneTrialAction autotune_engine_settled(AutotuneEngine *e, const AutotuneBlockStat *stat, int stat_error,
                                            bool probes, uint64_t now);
AutotuneTrialAction autotune_engine_peek(AutotuneEngine *e, const AutotuneTrialPeek *pk);
/* The epoch ends: stat (NULL: unreadable, stat_error), the probes' read
 * errors in it, their p99 (0: too few) and how many completed. An epoch
 * with probes but fewer than AUTOTUNE_P99_MIN_PROBES runs on
 * (AUTOTUNE_TRIAL_DO_WAIT for AUTOTUNE_TRIAL_WAIT_EPOCH, at most
 * AUTOTUNE_EPOCH_STRETCH_MAX times AutoEpochSec in all): the driver then
 * calls this again with the figures from the epoch's start. */
AutotuneTrialAction autotune_engine_epoch(AutotuneEngine *e, const AutotuneBlockStat *stat, int stat_error,
                                          unsigned errors, double p99_ms, uint64_t n_probes, uint64_t now);
/* After AUTOTUNE_TRIAL_DO_NEXT: the next candidate, the race's look at a round's
 * end, the next phase of a search, or the decision. */
AutotuneTrialAction autotune_engine_next(AutotuneEngine *e, uint64_t now);
/* Ends the trial early and goes back to the setting before it: AUTOTUNE_TRIAL_DO_FINISH. */
AutotuneTrialAction autotune_engine_abort(AutotuneEngine *e, const char *reason);
/* Ends a running trial at once, from outside (a restore, the device gone):
 * no setting is applied. */
void autotune_engine_end_now(AutotuneEngine *e, const char *reason);
/* The chosen setting is in place. */
void autotune_engine_finished(AutotuneEngine *e);

/* Medians so far, for progress while the trial runs. */
void autotune_engine_summarise(AutotuneEngine *e);
