/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the watch decides between trials, for one device, as a pure
 * function of its ticks: a workload seen before is back (recall), the
 * chosen setting broke the bound the trial promised (fall back), the
 * workload changed for three intervals in a row or AutoTrialIntervalSec=
 * passed (start a trial). The driver (src/daemon/autotune-watch.c) reads
 * /sys/block/X/stat at each tick and carries the verdicts out; a unit test
 * feeds it a fake clock. No clock, no sysfs here. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "autotune.h"
#include "trial-engine.h"

/* The watch ticks this often: a workload seen before is recalled from the
 * figures of one such interval, so that it is back at its setting within
 * two of them (10 s) of its start; the other checks run every
 * TRIAL_WATCH_INTERVAL_USEC. */
#define TRIAL_RECALL_INTERVAL_USEC 5000000ULL
#define TRIAL_WATCH_INTERVAL_USEC 10000000ULL /* periodic and workload-change checks, the promise's intervals */

typedef struct TrialWatch {
        /* After a change: the chosen setting watched against the bound
         * the trial admitted it under, for AUTOTUNE_PROMISE_USEC. */
        bool promising;          /* watching now */
        bool has_promise;        /* a promise was made (watching or judged) */
        AutoPromise promise;
        AutoPromiseState promise_state;
        uint64_t promise_until;  /* CLOCK_MONOTONIC */
        EpochFigures promise_e[AUTOTUNE_PROMISE_MAX_INTERVALS];
        size_t n_promise_e;
        char promise_why[256];
        bool fell_back;
        AutoCandidate fallback;  /* what it fell back to */
        int fallback_index;      /* of the trial's candidates; -1: none kept the bound (the setting before) */

        /* the workload-change detector, and the last recall */
        bool has_prev_sig;
        AutoSignature prev_sig;  /* the recall interval before the last */
        bool has_sig;
        AutoSignature sig;       /* the workload in force, as the detector knows it */
        BlockStat watch_stat;
        uint64_t watch_mono;
        /* The recall's own, shorter interval (TRIAL_RECALL_INTERVAL_USEC):
         * a workload seen before is back within two of them. */
        BlockStat recall_stat;
        uint64_t recall_mono;
        bool known_workload;     /* the last recall interval's workload is one seen before */
        unsigned changed_samples;
} TrialWatch;

/* What a device has now, as the watch sees it. */
typedef struct TrialWatchInput {
        const AutoTunePolicy *policy;
        const AutoMemory *memory; /* the workloads remembered for the disk (NULL, 0: none) */
        size_t n_memory;
        bool has_choice;          /* a trial's (or a recall's) setting is in force */
        const AutoCandidate *choice;
        uint64_t last_trial_mono; /* when the last trial started (0: none yet) */
        BlockStat stat;           /* /sys/block/X/stat now */
        uint64_t now;             /* CLOCK_MONOTONIC */
} TrialWatchInput;

typedef enum TrialWatchRecall {
        TRIAL_RECALL_NONE,    /* not a workload seen before */
        TRIAL_RECALL_KNOWN,   /* one seen before, and what is in force stays */
        TRIAL_RECALL_APPLY,   /* one seen before is back: its setting goes in now */
} TrialWatchRecall;

typedef enum TrialWatchPromise {
        TRIAL_PROMISE_QUIET,    /* not watching, or watching on */
        TRIAL_PROMISE_HELD,     /* the watch is over: it held (or was not judged) */
        TRIAL_PROMISE_BROKEN,   /* broken: fall back to TrialWatch.fallback */
} TrialWatchPromise;

/* A tick's verdicts, in the order the driver carries them out. */
typedef struct TrialWatchVerdict {
        TrialWatchRecall recall;
        int recall_index;        /* TRIAL_RECALL_APPLY: the memory's entry */
        AutoSignature recall_sig;
        TrialWatchPromise promise;
        const char *start;       /* start a trial, for this reason; NULL: none */
} TrialWatchVerdict;

void trial_watch_init(TrialWatch *w);

/* One tick of the watch (every TRIAL_RECALL_INTERVAL_USEC), with the
 * interval of its other checks (TRIAL_WATCH_INTERVAL_USEC normally).
 * trial: the device's last trial, whose candidates a broken promise falls
 * back among (and the broken choice joins the candidates left out). */
TrialWatchVerdict trial_watch_tick(TrialWatch *w, TrialEngine *trial, const TrialWatchInput *in, uint64_t tick_usec,
                                   uint64_t watch_usec);

/* A trial changed the setting: watch it against the bound it was chosen
 * under from now on. */
void trial_watch_promise(TrialWatch *w, const TrialEngine *trial, uint64_t now);
/* A trial measured the workload sig and chose for it: it is in force, not
 * arriving. */
void trial_watch_remembered(TrialWatch *w, const AutoSignature *sig);
/* A trial begins or ended: the watch's next interval starts after it, not
 * across it. */
void trial_watch_restart(TrialWatch *w);
/* Another disk under the name, or a restore: forget the workload. */
void trial_watch_forget(TrialWatch *w);
