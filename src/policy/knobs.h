/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* The table of settings a [Device] or [Profile] section can hold, in the
 * order they are applied. The order is the kernel's: the scheduler first
 * (switching it resets nr_requests and swaps the iosched/ directory), then
 * nr_requests, then queue/async_depth (capped at nr_requests: a scheduler
 * switch and an nr_requests change both move it), then the other queue
 * limits, then the scheduler's own tunables, then affinity. Restores are
 * sorted the same way (tune_job_sort()). */

typedef enum Knob {
        KNOB_SCHEDULER,
        KNOB_NR_REQUESTS,
        KNOB_ASYNC_DEPTH,
        KNOB_WBT_LAT_USEC,
        KNOB_READ_AHEAD_KB,
        KNOB_RQ_AFFINITY,
        KNOB_IO_POLL,
        KNOB_IO_POLL_DELAY,
        KNOB_KYBER_READ_LAT_NSEC,
        KNOB_KYBER_WRITE_LAT_NSEC,
        KNOB_DL_READ_EXPIRE,
        KNOB_DL_WRITE_EXPIRE,
        KNOB_DL_WRITES_STARVED,
        KNOB_DL_FRONT_MERGES,
        KNOB_DL_FIFO_BATCH,
        KNOB_DL_ASYNC_DEPTH,
        KNOB_BFQ_LOW_LATENCY,
        KNOB_BFQ_SLICE_IDLE,
        KNOB_ZONED_QD1_WRITES,
        KNOB_CPU_AFFINITY,
        KNOB_SCHEDULER_FORCE, /* policy only from here on: no attribute */
        KNOB_PROBE,
        KNOB_PROBE_INTERVAL,
        KNOB_PROBE_JITTER,
        KNOB_PROBE_SIZE,
        KNOB_PROBE_POLLED,
        KNOB_ALERT_READ_LAT,
        KNOB_ALERT_WRITE_LAT,
        KNOB_ZONE_ALLOCATOR,
        _KNOB_MAX,
} Knob;

typedef enum KnobType {
        KNOB_TYPE_SCHEDULERS, /* space-separated scheduler names */
        KNOB_TYPE_INT,        /* integer within [min, max] */
        KNOB_TYPE_BOOL,       /* written as 1/0 */
        KNOB_TYPE_CPUSET,     /* "0-3,8" */
        KNOB_TYPE_SECONDS,    /* "10", "0.25": canonical in µs */
} KnobType;

typedef struct KnobInfo {
        const char *key;       /* config key, "NrRequests" */
        const char *attribute; /* below /sys/block/X/, NULL if none */
        KnobType type;
        long long min, max;
        const char *scheduler; /* the iosched/ tunable belongs to this scheduler */
        const char *unit;      /* for documentation and explain */
} KnobInfo;

const KnobInfo *knob_info(Knob k);
/* A setting of the request queue (the scheduler, its tunables, the queue's
 * depth and limits, completion and IRQ affinity), which a stacked device's
 * section sets on the request-based disks below it; not read-ahead (the
 * top's), probes, alerts or the zone allocator. */
bool knob_request_queue(Knob k);
/* -ENOENT if key is not a setting key. */
int knob_from_key(const char *key);
/* Validates and canonicalises a config value (bools → "1"/"0", ints in
 * range, scheduler names, cpu lists). On error *ret_message says why. */
int knob_parse_value(Knob k, const char *value, char **ret, const char **ret_message);
/* Compares a value read from sysfs with a wanted canonical value, as the
 * kernel formats it (scheduler brackets, cpu lists, numbers). */
bool knob_value_equal(Knob k, const char *current, const char *wanted);

/* Decimal seconds ("10", "0.25") → µs, within [0, 1 day]. */
int parse_seconds(const char *s, uint64_t *ret_usec);

/* "[none] mq-deadline kyber" → "none"; NULL if no bracket (bio-based queue
 * prints plain "none"). */
char *scheduler_active(const char *line);
bool scheduler_available(const char *line, const char *name);
