/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The lookout: what the watch decides between trials, for one device, as
 * a pure function of its ticks: a workload seen before is back (recall),
 * the chosen setting broke the bound the trial promised (fall back), the
 * workload changed for three intervals in a row or AutoTrialIntervalSec=
 * passed (start a trial). The watch (src/daemon/autotune-watch.c) is its
 * driver: it reads /sys/block/X/stat at each tick and carries the verdicts
 * out; a unit test feeds it a fake clock. No clock, no sysfs here. The
 * lookout calls out, the watch acts: as the engine (autotune-engine.h)
 * decides a trial and the runner (autotune-runner.c) carries it out. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "autotune-engine.h"
#include "autotune.h"

/* The watch ticks this often: a workload seen before is recalled from the
 * figures of one such interval, so that it is back at its setting within
 * two of them (10 s) of its start; the other checks run every
 * AUTOTUNE_WATCH_INTERVAL_USEC. */
#define AUTOTUNE_RECALL_INTERVAL_USEC 5000000ULL
#define AUTOTUNE_WATCH_INTERVAL_USEC 10000000ULL /* periodic and workload-change checks, the promise's intervals */

typedef struct AutotuneLookout {
        /* After a change: the chosen setting watched against the bound
         * the trial admitted it under, for AUTOTUNE_PROMISE_USEC. */
        bool promising;          /* watching now */
        bool has_promise;        /* a promise was made (watching or judged) */
        AutotunePromise promise;
        AutotunePromiseState promise_state;
        uint64_t promise_until;  /* CLOCK_MONOTONIC */
        AutotuneEpochFigures promise_e[AUTOTUNE_PROMISE_MAX_INTERVALS];
        size_t n_promise_e;
        char promise_why[256];
        bool fell_back;
        AutotuneCandidate fallback;  /* what it fell back to */
        int fallback_index;      /* of the trial's candidates; -1: none kept the bound (the setting before) */

        /* the workload-change detector, and the last recall */
        bool has_prev_sig;
        AutotuneSignature prev_sig;  /* the recall interval before the last */
        bool has_sig;
        AutotuneSignature sig;       /* the workload in force, as the detector knows it */
        AutotuneBlockStat watch_stat;
        uint64_t watch_mono;
        /* The recall's own, shorter interval (AUTOTUNE_RECALL_INTERVAL_USEC):
         * a workload seen before is back within two of them. */
        AutotuneBlockStat recall_stat;
        uint64_t recall_mono;
        bool known_workload;     /* the last recall interval's workload is one seen before */
        unsigned changed_samples;
} AutotuneLookout;

/* What a device has now, as the watch sees it. */
typedef struct AutotuneLookoutInput {
        const AutotunePolicy *policy;
        const AutotuneMemory *memory; /* the workloads remembered for the disk (NULL, 0: none) */
        size_t n_memory;
        bool has_choice;          /* a trial's (or a recall's) setting is in force */
        const AutotuneCandidate *choice;
        uint64_t last_trial_mono; /* when the last trial started (0: none yet) */
        AutotuneBlockStat stat;           /* /sys/block/X/stat now */
        uint64_t now;             /* CLOCK_MONOTONIC */
} AutotuneLookoutInput;

typedef enum AutotuneLookoutRecall {
        AUTOTUNE_LOOKOUT_RECALL_NONE,    /* not a workload seen before */
        AUTOTUNE_LOOKOUT_RECALL_KNOWN,   /* one seen before, and what is in force stays */
        AUTOTUNE_LOOKOUT_RECALL_APPLY,   /* one seen before is back: its setting goes in now */
} AutotuneLookoutRecall;

typedef enum AutotuneLookoutPromise {
        AUTOTUNE_LOOKOUT_PROMISE_QUIET,    /* not watching, or watching on */
        AUTOTUNE_LOOKOUT_PROMISE_HELD,     /* the watch is over: it held (or was not judged) */
        AUTOTUNE_LOOKOUT_PROMISE_BROKEN,   /* broken: fall back to AutotuneLookout.fallback */
} AutotuneLookoutPromise;

/* A tick's verdicts, in the order the driver carries them out. */
typedef struct AutotuneLookoutVerdict {
        AutotuneLookoutRecall recall;
        int recall_index;        /* AUTOTUNE_LOOKOUT_RECALL_APPLY: the memory's entry */
        AutotuneSignature recall_sig;
        AutotuneLookoutPromise promise;
        const char *start;       /* start a trial, for this reason; NULL: none */
} AutotuneLookoutVerdict;

void autotune_lookout_init(AutotuneLookout *w);

/* One tick of the watch (every AUTOTUNE_RECALL_INTERVAL_USEC), with the
 * interval of its other checks (AUTOTUNE_WATCH_INTERVAL_USEC normally).
 * trial: the device's last trial, whose candidates a broken promise falls
 * back among (and the broken choice joins the candidates left out). */
AutotuneLookoutVerdict autotune_lookout_tick(AutotuneLookout *w, AutotuneEngine *trial, const AutotuneLookoutInput *in,
                                             uint64_t tick_usec, uint64_t watch_usec);

/* A trial changed the setting: watch it against the bound it was chosen
 * under from now on. */
void autotune_lookout_promise(AutotuneLookout *w, const AutotuneEngine *trial, uint64_t now);
/* A trial measured the workload sig and chose for it: it is in force, not
 * arriving. */
void autotune_lookout_remembered(AutotuneLookout *w, const AutotuneSignature *sig);
/* A trial begins or ended: the watch's next interval starts after it, not
 * across it. */
void autotune_lookout_restart(AutotuneLookout *w);
/* Another disk under the name, or a restore: forget the workload. */
void autotune_lookout_forget(AutotuneLookout *w);
