/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "alert.h"
#include "cleanup.h"
#include "hist.h"

/* Latency probes: per managed device, periodic read-only O_DIRECT reads at
 * QD1 through the io_uring pool, into log-linear histograms; plus
 * /sys/block/X/stat deltas (iostat's figures) and latency alerts with
 * hysteresis. One timer for all devices, armed for the earliest one due and
 * off when none is: no wakeups while nothing is due. Loop thread only. */

typedef struct Prober Prober;
struct UringPool;

typedef struct ProbeConfig {
        bool enabled;
        bool polled;            /* RWF_HIPRI-style: an IOPOLL ring, where the queue polls */
        uint64_t interval_usec;
        uint64_t jitter_usec;   /* each interval is drawn from interval ± jitter */
        uint32_t size;          /* bytes per read */
        uint64_t alert_read_usec;  /* 0: no alert */
        uint64_t alert_write_usec; /* on the stat-derived average write latency */
} ProbeConfig;

/* iostat's figures over the last sample interval. */
typedef struct ProbeStats {
        double read_iops, write_iops;
        double read_bytes_per_sec, write_bytes_per_sec;
        double read_await_usec, write_await_usec; /* NaN without I/O */
        double util_percent;
        double aqu_sz;
        unsigned in_flight;
        uint64_t interval_usec; /* 0 until two samples exist */
} ProbeStats;

typedef struct ProbeTarget {
        char *sysname;
        char *devnode;
        char *blockdir;
        ProbeConfig config;
        bool zoned;
        bool vanished_logged; /* a probe raced its removal: said once, at debug level */
        uint64_t diskseq;     /* of the media probed; 0: unknown */
        uint32_t logical_block_size;
        uint64_t size_bytes;
        uint64_t next_due_usec;
        bool in_flight;
        bool polled_unsupported; /* fell back to plain reads */
        uint64_t n_probes, n_errors;
        int last_error;
        char *note;          /* why the device is not probed right now, e.g. nothing written yet */
        HistWindow *lat;  /* read latency in ns */
        ProbeStats stats;
        uint64_t stat_prev[17];
        uint64_t stat_prev_usec;
        bool stat_have_prev;
        int stat_fd;         /* <blockdir>/stat, read with pread(): no sysfs lookup on the loop */
        Alert read_alert, write_alert; /* .episodes counts alerts raised */
        /* zoned devices: readable extents [start, end) in bytes, below the write pointers */
        uint64_t (*extents)[2];
        size_t n_extents;
        uint64_t extents_usec;
        struct Prober *prober;
        void *req; /* in-flight request */
} ProbeTarget;

typedef enum ProbeEventType {
        PROBE_EVENT_SAMPLE,        /* a probe completed */
        PROBE_EVENT_ALERT_RAISED,  /* detail: "read" or "write" */
        PROBE_EVENT_ALERT_CLEARED,
} ProbeEventType;

typedef void (*ProbeEventFn)(Prober *p, ProbeEventType type, ProbeTarget *t, const char *detail, void *userdata);

int prober_new(Prober **ret, sd_event *e, struct UringPool *pool);
Prober *prober_free(Prober *p);
void prober_set_event_cb(Prober *p, ProbeEventFn cb, void *userdata);
/* A device as its udev event found it: read off the event loop (sysfs
 * lookups wait on the kernfs lock that attaches and detaches hold). */
typedef struct ProbeDevice {
        const char *sysname, *devnode, *blockdir;
        bool zoned;
        uint64_t size_bytes;         /* 0: read at the first probe */
        uint32_t logical_block_size;
        uint64_t diskseq;            /* 0: unknown */
        int stat_fd;                 /* <blockdir>/stat, taken over; -EBADF: keep the one the target has */
} ProbeDevice;

/* Adds or updates the target for a device; config->enabled false removes it. */
int prober_update(Prober *p, const ProbeDevice *dev, const ProbeConfig *config);
void prober_remove(Prober *p, const char *sysname);
ProbeTarget *prober_find(Prober *p, const char *sysname);
/* A target outside any prober, its histogram empty (prober_update() makes
 * them; tests fill them by hand); NULL on OOM. The free takes NULL. */
ProbeTarget *probe_target_new(const char *sysname);
ProbeTarget *probe_target_free(ProbeTarget *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(ProbeTarget *, probe_target_free)
/* Iteration: for (size_t i = 0; i < prober_count(p); i++) prober_get(p, i). */
size_t prober_count(Prober *p);
ProbeTarget *prober_get(Prober *p, size_t i);
/* CPU time the daemon spent, and probes issued, since start (for cost figures). */
uint64_t prober_total_probes(Prober *p);
