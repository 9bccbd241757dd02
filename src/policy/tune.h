/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "cleanup.h"
#include "device.h"
#include "knobs.h"
#include "policy.h"

/* Turning a resolved policy into sysfs writes. tune_plan() runs on the
 * event loop thread and only builds a job; tune_execute() does every read
 * and write of a job and touches nothing but the job, so it may run on any
 * thread. Jobs for one device must not run concurrently (the manager
 * guarantees that); jobs for different devices may. */

typedef struct TuneContext {
        const char *sysfs_root; /* "/sys" */
        const char *proc_root;  /* "/proc" */
        unsigned kernel_version; /* KERNEL_VERSION_CODE() of the running kernel */
} TuneContext;

typedef enum TuneOutcome {
        TUNE_PENDING,   /* not executed yet */
        TUNE_UNCHANGED, /* already had the wanted value: nothing written */
        TUNE_CHANGED,   /* written and read back equal */
        TUNE_ADJUSTED,  /* written, the kernel settled on another value (after) */
        TUNE_SKIPPED,   /* not applicable here (note says why); nothing written */
        TUNE_FAILED,    /* write or read failed (error) */
        TUNE_PLANNED,   /* dry run: would be written */
        _TUNE_OUTCOME_MAX,
} TuneOutcome;

const char *tune_outcome_to_string(TuneOutcome o);

typedef struct TuneEntry {
        Knob knob;
        char *attr;    /* "queue/nr_requests", "queue/iosched/read_lat_nsec", "irq/24" */
        char *path;    /* absolute */
        char *wanted;  /* canonical; for the scheduler the candidate list */
        char *section; /* "Device nvme", "Profile offpeak", "original" */
        char *scheduler; /* iosched tunables: applies only while this scheduler is active */
        /* Results, written by tune_execute(): */
        char *before;           /* value before the job touched the device */
        char *before_scheduler; /* active scheduler when before was read */
        char *after;            /* value read back */
        char *note;
        int error; /* negative errno */
        TuneOutcome outcome;
} TuneEntry;

typedef struct TuneJob TuneJob;
/* Called by tune_execute(), on its thread, once every value of the job is
 * read and before its first write (never in a dry run). The daemon puts
 * the values it is about to change on record here (write-ahead); it must
 * touch nothing but the job and data. */
typedef void (*TuneBeforeWriteFn)(TuneJob *j, void *data);

struct TuneJob {
        char *sysname;
        char *blockdir;
        TuneEntry *entries;
        size_t n_entries;
        bool dry_run;
        bool restore;
        char *cpu_affinity; /* wanted CPUAffinity=, for the hctx report */
        char *hctx_map;     /* "0:0-1 1:2-3", filled by execute */
        char *affinity_note;
        char *planned_scheduler; /* dry run: the scheduler that would be chosen */
        char *nr_requests_before; /* before the job: a scheduler switch resets it */
        char *async_depth_before; /* before the job, where queue/async_depth exists:
                                   * a scheduler switch or an nr_requests change moves it */
        bool zoned;         /* the device is zoned (for what an absent attribute means) */
        int device_error;   /* -ENODEV if the device vanished mid-job */
        uint64_t usec;      /* time spent in execute */
        TuneBeforeWriteFn before_write;
        void *before_write_data;             /* freed with the job, by: */
        void (*before_write_free)(void *data);
};

/* Builds the job for a device from its resolved settings; originals
 * (may be NULL) are values to put back for knobs the policy no longer sets. */
int tune_plan(const TuneContext *ctx, const DeviceInfo *d, const Resolved *r, TuneJob **ret);
/* Adds an entry; used by tune_plan() and by the manager to build restore jobs. */
int tune_job_add(TuneJob *j, Knob knob, const char *attr, const char *path, const char *wanted,
                 const char *section, const char *scheduler);
int tune_job_new(const char *sysname, const char *blockdir, TuneJob **ret);
void tune_execute(TuneJob *j);
TuneJob *tune_job_free(TuneJob *j);
DEFINE_TRIVIAL_CLEANUP_FUNC(TuneJob *, tune_job_free)
/* Sorts entries into apply order: knob order, then attribute name. */
void tune_job_sort(TuneJob *j);
/* Counts entries by outcome. */
void tune_job_count(const TuneJob *j, unsigned counts[_TUNE_OUTCOME_MAX]);
/* An entry of an executed job read again now, against the value the job
 * left (after). */
typedef enum TuneCheck {
        TUNE_CHECK_OK,       /* reads as the job left it */
        TUNE_CHECK_DRIFTED,  /* reads otherwise: something else wrote it since */
        TUNE_CHECK_INACTIVE, /* a tunable of a scheduler that is not the active one now */
        TUNE_CHECK_GONE,     /* cannot be read now (the device or the attribute is gone) */
        TUNE_CHECK_FAILED,   /* the job's write failed: it left no value */
        TUNE_CHECK_SKIPPED,  /* the job left no value to compare (skipped, a dry run) */
        _TUNE_CHECK_MAX,
} TuneCheck;

const char *tune_check_to_string(TuneCheck c);
/* Entry e of the executed job j, read again now (sysfs reads only): the
 * scheduler by its active name; a scheduler's tunable only while that
 * scheduler is active. *active caches the active scheduler between the
 * entries of one job (start with NULL, free() it). *ret_found (if
 * ret_found, and only when it returns OK or DRIFTED): the value read.
 * -ENOMEM, or a TuneCheck. */
int tune_entry_check(const TuneJob *j, const TuneEntry *e, char **active, char **ret_found);
/* Of an executed job, the settings that no longer read as the job left them
 * (something else wrote them since), by tune_entry_check(). */
unsigned tune_job_drifted(const TuneJob *j);

/* *line (queue/scheduler) with every blk-mq scheduler the running kernel
 * could load as a module on demand added: the kernel lists one only once it
 * is loaded (trixie's 6.12 and later cloud kernels build mq-deadline as a
 * module, 6.1 built it in), and a write of its name loads it. */
int scheduler_line_add_loadable(char **line);
