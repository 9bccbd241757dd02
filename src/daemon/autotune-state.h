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

typedef struct AutoTuner AutoTuner;
typedef struct Prober Prober;
struct VarlinkCall;

typedef enum Phase {
        PHASE_IDLE,
        PHASE_APPLYING,  /* a candidate's apply is on the work pool */
        PHASE_SETTLING,  /* applied; the queue refills before measuring */
        PHASE_MEASURING, /* an epoch */
        PHASE_FINISHING, /* the chosen setting's apply is on the work pool */
} Phase;

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
        char choice_text[512]; /* explain's sentence about it */
        unsigned choice_trial; /* n_trials of the trial that chose it */

        /* The trial (running, or the last one) */
        Phase phase;
        bool forced;
        AutoTunePolicy policy;
        bool policy_copied;
        AutoCandidate cand[AUTOTUNE_MAX_CANDIDATES];
        bool refused[AUTOTUNE_MAX_CANDIDATES];
        AutoSeries series[AUTOTUNE_MAX_CANDIDATES];
        AutoSummary summary[AUTOTUNE_MAX_CANDIDATES];
        size_t n_cand, slot, n_slots, current;
        BlockStat stat0;
        uint64_t t0;
        uint64_t probe_errors0; /* the device's probe errors when the epoch began */
        Hist *probe0;           /* its probe latencies when the epoch began (NULL: no probes) */
        sd_event_source *timer;
        char note[512];
        char abort_reason[256];
        bool has_result, aborted;
        AutoDecision decision;
        uint64_t started_usec, ended_usec; /* CLOCK_REALTIME */
        uint64_t started_mono;
        unsigned switches;   /* scheduler switches made by the trial */
        uint64_t apply_usec; /* time its applies took on the worker (the queue freezes among it) */
        unsigned n_trials, n_changes;
        struct VarlinkCall **calls;
        size_t n_calls;

        unsigned generation; /* of the disk the trials knew (Device.generation) */

        /* candidates that tripped the guard rail lately, left out */
        AutoTripped tripped[AUTOTUNE_TRIPPED_MAX];
        size_t n_tripped;

        /* workload-change detector */
        bool has_sig, sig_valid;
        AutoSignature sig;
        BlockStat watch_stat;
        uint64_t watch_mono;
        unsigned changed_samples;
        sd_event_source *hotplug_timer;
};

struct AutoTuner {
        Manager *manager;
        Prober *prober; /* not owned: the error counts a guard reads; NULL: no probes */
        AutoDevice *devices;
        AutoHistory global;
        sd_event_source *watch;
        unsigned n_trials, n_changes, n_aborted;
};

/* The [Device] section's Auto* keys that apply to d (the last matched
 * section with any wins as a whole); NULL: none. */
const AutoTunePolicy *autotune_device_policy(AutoTuner *t, const Device *d);
AutoDevice *autotune_find(AutoTuner *t, const Device *d);
/* A trial is on (applying, settling or measuring a candidate). */
bool autotune_running(const AutoDevice *a);
/* Medians so far, for progress while the trial runs. */
void autotune_summarise_partial(AutoDevice *a);
/* The trial as Trial, GetDevice and Monitor give it. */
json_t *autotune_trial_json(const AutoDevice *a);
/* "10:42:05" of a CLOCK_REALTIME time. */
char *autotune_clock_hm(uint64_t realtime_usec, char buf[static 16]);
