/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The trial runner's state, shared by autotune-runner.c (the trial engine's
 * I/O driver, the hotplug trigger, the overlay on a device's policy),
 * autotune-watch.c (the watch between trials: recall, the promise, the
 * workload-change and periodic triggers), autotune-report.c (what GetDevice,
 * Trial, Monitor, explain and the metrics say of it) and autotune-memory.c.
 * The watch calls the runner, both call the report and the memory; none
 * calls back up. Loop thread only. Not for other modules: they see
 * autotune-runner.h. */

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "autotune-engine.h"
#include "autotune-lockstep.h"
#include "autotune-lookout.h"
#include "autotune.h"
#include "hist.h"
#include "manager.h"

typedef struct AutotuneRunner AutotuneRunner;
typedef struct Prober Prober;


typedef struct AutotuneDevice AutotuneDevice;

struct AutotuneDevice {
        AutotuneRunner *tuner;
        Device *device;
        AutotuneDevice *next;
        AutotuneHistory history;

        /* What a trial chose, in force until restore or a policy without
         * Auto* keys. */
        bool has_choice;
        AutotuneCandidate choice;
        char origin[128]; /* "trial at 10:42" */
        char choice_text[768]; /* explain's sentence about it */
        unsigned choice_trial; /* n_trials of the trial that chose it */

        /* The trial (running, or the last one): its state machine, and
         * what the driver keeps beside it. */
        AutotuneEngine trial;
        unsigned seen_phases;   /* of trial.n_phases: a search's phase begun anew resets cand_hist */
        double p99_before0;     /* the first phase's p99 of the setting before the trial */
        /* The price: probe latencies pooled over each candidate's epochs
         * (n_cand) and over the whole trial (its start, then the span);
         * NULL without probes. Read p99s in ms, 0: too few probes. */
        Hist *cand_hist;
        Hist *trial_h0;
        double p99_before, p99_during, p99_after;
        uint64_t probe_interval_usec; /* the probes' during the trial (trial_probe_interval()) */
        uint64_t probe_errors0; /* the device's probe errors when the epoch began */
        Hist *probe0;           /* its probe latencies when the epoch began (NULL: no probes) */
        sd_event_source *timer;
        AutotuneTrialWait timer_wait;   /* what the timer waits for */
        sd_event_source *apply_timer;   /* an apply's jobs are overdue (CallTimeoutSec=) */
        uint64_t started_usec, ended_usec; /* CLOCK_REALTIME */
        uint64_t started_mono;
        unsigned n_trials, n_changes;

        unsigned generation; /* of the disk the trials knew (Device.generation) */

        /* Between trials: the recall, the promise, the workload-change
         * detector (autotune-watch.c drives it). */
        AutotuneLookout watch;
        unsigned n_recalls;
        uint64_t recalled_usec; /* CLOCK_REALTIME */
        sd_event_source *hotplug_timer;

        /* A stack's trial (issue 33): device is the top, measured (its
         * stat, its probes); members the request-based disks under it
         * (stack_resolve()), each given every candidate before its epoch
         * begins (the lockstep: an apply is done when every member's job
         * is back and read back: autotune-lockstep.h). NULL: a disk, its own
         * member. */
        char **members;
        AutotuneLockstep lockstep;       /* of members: whose job for this apply came back, their outcomes */
        unsigned *member_job;            /* per member: the count of its jobs done (Device.n_jobs) once the
                                          * first job that carries this apply is back */
};

/* What trials chose per workload, for one disk (its identity and
 * diskseq), kept in StateDirectory=/autotune-memory across restarts. */
typedef struct AutotuneMemoryDisk {
        char *id;
        uint64_t diskseq;
        AutotuneMemory m[AUTOTUNE_MEMORY_MAX];
        size_t n;
} AutotuneMemoryDisk;

struct AutotuneRunner {
        Manager *manager;
        AutotuneMemoryDisk *memory;
        size_t n_memory;
        bool memory_loaded;
        Prober *prober; /* not owned: the error counts a guard reads; NULL: no probes */
        AutotuneDevice *devices;
        AutotuneHistory global;
        sd_event_source *watch; /* the watch's tick (autotune-watch.c) */
        void (*listener)(Device *d, int news, void *userdata); /* the trials' news (an AutotuneTrialListenerFn),
                                                                * or NULL */
        void *listener_data;
        unsigned n_trials, n_changes, n_aborted;
};

/* The [Device] section's Auto* keys that apply to d (the last matched
 * section with any wins as a whole); NULL: none. */
const AutotunePolicy *autotune_device_policy(AutotuneRunner *t, const Device *d);
AutotuneDevice *autotune_find(AutotuneRunner *t, const Device *d);
/* A trial is on (applying, settling or measuring a candidate). */
bool autotune_running(const AutotuneDevice *a);
/* For autotune-watch.c: the device's state (created), freed; its stat; a
 * setting put in force as the trial's choice (change_mono: when, counted
 * as a change; 0: already in force, not counted); whether every knob c
 * sets has that value on the device now; a Monitor event. */
AutotuneDevice *autotune_get(AutotuneRunner *t, Device *d);
void autotune_device_free(AutotuneRunner *t, AutotuneDevice *a);
int autotune_read_stat(const Device *d, AutotuneBlockStat *ret);
void autotune_install_choice(AutotuneDevice *a, const AutotuneCandidate *c, const char *origin, const char *text,
                             uint64_t change_mono);
bool autotune_setting_in_force(const Device *d, const AutotunePolicy *p, const AutotuneCandidate *c);
/* The trial's device, or each member of a stack's: c in force on all of
 * them; and an apply of what the overlay gives (a stack: the top and
 * each member). */
bool autotune_in_force(AutotuneDevice *a, const AutotunePolicy *p, const AutotuneCandidate *c);
int autotune_apply(AutotuneDevice *a);
void autotune_emit(AutotuneDevice *a);
/* autotune-memory.c: the disk's memory (NULL: none; create: a new empty
 * one). A disk whose diskseq differs from the remembered one is another
 * medium: its entries go. */
AutotuneMemoryDisk *autotune_memory_disk(AutotuneRunner *t, const Device *d, bool create);
/* Forgets d's workloads (another disk under its name) and saves. */
void autotune_memory_forget(AutotuneRunner *t, const Device *d);
/* Writes StateDirectory=/autotune-memory (atomically: a temporary file
 * renamed over it). */
int autotune_memory_save(AutotuneRunner *t);
void autotune_memory_free(AutotuneRunner *t);
