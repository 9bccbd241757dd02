/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The trial runner's state, shared by autotune-runner.c (trials, triggers,
 * the overlay on a device's policy) and autotune-report.c (what GetDevice,
 * Trial, Monitor, explain and the metrics say of it). Loop thread only. Not
 * for other modules: they see autotune-runner.h. */

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "autotune.h"
#include "hist.h"
#include "manager.h"
#include "trial-engine.h"

typedef struct AutoTuner AutoTuner;
typedef struct Prober Prober;
struct VarlinkCall;


typedef struct AutoDevice AutoDevice;

struct AutoDevice {
        AutoTuner *tuner;
        Device *device;
        AutoDevice *next;
        AutoHistory history;

        /* What a trial chose, in force until restore or a policy without
         * Auto* keys. */
        bool has_choice;
        AutoCandidate choice;
        char origin[128]; /* "trial at 10:42" */
        char choice_text[768]; /* explain's sentence about it */
        unsigned choice_trial; /* n_trials of the trial that chose it */

        /* The trial (running, or the last one): its state machine, and
         * what the driver keeps beside it. */
        TrialEngine trial;
        unsigned seen_phases;   /* of trial.n_phases: a search's phase begun anew resets cand_hist */
        double p99_before0;     /* the first phase's p99 of the setting before the trial */
        /* The price: probe latencies pooled over each candidate's epochs
         * (n_cand) and over the whole trial (its start, then the span);
         * NULL without probes. Read p99s in ms, 0: too few probes. */
        Hist *cand_hist;
        Hist *trial_h0;
        double p99_before, p99_during, p99_after;
        uint64_t probe_errors0; /* the device's probe errors when the epoch began */
        Hist *probe0;           /* its probe latencies when the epoch began (NULL: no probes) */
        sd_event_source *timer;
        TrialWait timer_wait;   /* what the timer waits for */
        uint64_t started_usec, ended_usec; /* CLOCK_REALTIME */
        uint64_t started_mono;
        unsigned n_trials, n_changes;
        struct VarlinkCall **calls;
        size_t n_calls;

        unsigned generation; /* of the disk the trials knew (Device.generation) */

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

        /* workload-change detector, and the last recall of a workload seen */
        unsigned n_recalls;
        uint64_t recalled_usec; /* CLOCK_REALTIME */
        bool has_prev_sig;
        AutoSignature prev_sig; /* the recall interval before the last */
        bool has_sig, sig_valid;
        AutoSignature sig;
        BlockStat watch_stat;
        uint64_t watch_mono;
        /* The recall's own, shorter interval (RECALL_INTERVAL_USEC): a
         * workload seen before is back within two of them. */
        BlockStat recall_stat;
        uint64_t recall_mono;
        bool known_workload; /* the last recall interval's workload is one seen before */
        unsigned changed_samples;
        sd_event_source *hotplug_timer;
};

/* What trials chose per workload, for one disk (its identity and
 * diskseq), kept in StateDirectory=/autotune-memory across restarts. */
typedef struct AutoMemoryDisk {
        char *id;
        uint64_t diskseq;
        AutoMemory m[AUTOTUNE_MEMORY_MAX];
        size_t n;
} AutoMemoryDisk;

struct AutoTuner {
        Manager *manager;
        AutoMemoryDisk *memory;
        size_t n_memory;
        bool memory_loaded;
        Prober *prober; /* not owned: the error counts a guard reads; NULL: no probes */
        AutoDevice *devices;
        AutoHistory global;
        sd_event_source *watch;
        /* The watch's tick (recalls) and its interval (the promise watch,
         * the workload-change detector, periodic trials): RECALL_INTERVAL_USEC
         * and WATCH_INTERVAL_USEC, both divided by $BLKMQD_TEST_WATCH_DIVISOR
         * (2-100) in the test suite's daemons. */
        uint64_t tick_usec, watch_usec;
        unsigned n_trials, n_changes, n_aborted;
};

/* The [Device] section's Auto* keys that apply to d (the last matched
 * section with any wins as a whole); NULL: none. */
const AutoTunePolicy *autotune_device_policy(AutoTuner *t, const Device *d);
AutoDevice *autotune_find(AutoTuner *t, const Device *d);
/* A trial is on (applying, settling or measuring a candidate). */
bool autotune_running(const AutoDevice *a);
/* autotune-memory.c: the disk's memory (NULL: none; create: a new empty
 * one). A disk whose diskseq differs from the remembered one is another
 * medium: its entries go. */
AutoMemoryDisk *autotune_memory_disk(AutoTuner *t, const Device *d, bool create);
/* Forgets d's workloads (another disk under its name) and saves. */
void autotune_memory_forget(AutoTuner *t, const Device *d);
/* Writes StateDirectory=/autotune-memory (atomically: a temporary file
 * renamed over it). */
int autotune_memory_save(AutoTuner *t);
void autotune_memory_free(AutoTuner *t);
