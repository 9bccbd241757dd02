/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "conf.h"
#include "managed-device.h"
#include "hist.h"
#include "device.h"
#include "policy.h"
#include "tune.h"
#include "udev-watch.h"
#include "work-pool.h"

/* The Manager owns everything: the event loop, the config, the device
 * registry, the worker pool. All of it is touched only on the loop thread. */


typedef enum ManagerState {
        MANAGER_STARTING,
        MANAGER_RUNNING,
        MANAGER_RELOADING,
        MANAGER_STOPPING,
} ManagerState;

typedef struct ManagerOptions {
        const char *config_path; /* NULL: default search */
        const char *sysfs_root;
        const char *proc_root;
        bool dry_run;
        bool once;
        bool json;
        unsigned kernel_version; /* 0: from uname() */
        const char *varlink_address; /* NULL: socket activation, else the default */
        const char *originals_dir; /* where the originals are kept on record; NULL: none (dry run, once) */
        const char *only_device; /* a kernel name: every other device is left out (--dry-run DEVICE) */
        /* --once: its originals on record in originals_dir before its first
         * write, else it refuses (false: --no-record, nothing on record). */
        bool once_record;
        const char *state_dir; /* where the active profile is kept; NULL: the config's StateDirectory= */
} ManagerOptions;

typedef enum ManagerEventType {
        MANAGER_EVENT_DEVICE_ADDED,
        MANAGER_EVENT_DEVICE_REMOVED,
        MANAGER_EVENT_DEVICE_APPLIED,  /* a job came back */
        MANAGER_EVENT_RELOADED,
        MANAGER_EVENT_PROFILE,
        MANAGER_EVENT_IDLE, /* no job in flight */
        MANAGER_EVENT_TRIAL, /* a closed-loop tuning trial started, progressed to a decision, or ended */
        MANAGER_EVENT_DEVICE_RESOLVED, /* its policy was resolved again; the plan runs next (a listener may
                                        * overlay d->resolved) */
        MANAGER_EVENT_RESTORING, /* a restore of d (NULL: every device) begins */
        _MANAGER_EVENT_MAX,
} ManagerEventType;

/* Listeners: the services and adapters blkmqd.c wires to the manager each
 * subscribe to the events they need (a mask of MANAGER_EVENT_MASK() bits),
 * and hear them in the order they subscribed. The manager knows none of
 * them. */
#define MANAGER_EVENT_MASK(t) (1u << (t))
typedef void (*ManagerListenerFn)(Manager *m, ManagerEventType type, Device *d, void *userdata);

typedef struct ManagerListener {
        unsigned mask;
        ManagerListenerFn fn;
        void *userdata;
} ManagerListener;

struct Manager {
        sd_event *event;
        /* Time the loop spends per iteration outside its wait (prepare and
         * the one event source it dispatches), ns: a reply can be no
         * faster than the longest of them. */
        Hist loop_hist;
        ManagerOptions opts;
        char *config_path;
        Config *config;
        TuneContext tune;
        WorkPool *pool;
        /* One thread: the sysfs reads of each udev event, in event order,
         * off the loop (a storm of attaches otherwise held every reply). */
        WorkPool *udev_pool;
        UdevWatch *udev;
        Device **devices;
        size_t n_devices;
        char *profile;
        /* The profile on record in the state directory that the
         * configuration no longer has (NULL: none): said in the status. */
        char *profile_missing;
        char *state_dir; /* the active profile is kept here (StateDirectory=); NULL: nowhere (dry run, once) */
        sd_event_source *drift_timer; /* DriftCheckSec= */
        ManagerState state;
        uint64_t sync_generation;
        uint64_t start_usec;
        unsigned n_failed; /* devices whose last job had failures (for --once) */
        unsigned n_tune_jobs; /* in flight; the work pool also runs zone jobs */
        char last_status[256];
        ManagerListener *listeners;
        size_t n_listeners;
        /* Serves probes and zone appends; NULL with --once, --dry-run, or
         * when io_uring is not available. */
        struct UringPool *uring;
        sd_event_source *sig_term, *sig_int, *sig_hup;
        char *originals_dir; /* NULL: originals kept in memory only */
        /* The records found at start, until their device is seen (adopted
         * or discarded) or the enumeration ends without it (dropped). */
        struct OriginalsRecord **records;
        size_t n_records;
};

int manager_new(Manager **ret, const ManagerOptions *opts, Config *config);
Manager *manager_free(Manager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(Manager *, manager_free)
/* Stops udev and the worker pools (their callbacks run, and tell the
 * listeners); what a callback touches must outlive this. Idempotent;
 * manager_free() calls it too. */
void manager_stop(Manager *m);
int manager_subscribe(Manager *m, unsigned mask, ManagerListenerFn fn, void *userdata);
void manager_unsubscribe(Manager *m, ManagerListenerFn fn, void *userdata);
/* Starts watching udev (and enumerates the devices present). */
int manager_start(Manager *m);
/* Runs the loop; returns the exit code for main(). */
int manager_run(Manager *m);
/* The plan of every device, as --dry-run --once --json prints it:
 * {"devices": [...]}. */
json_t *manager_plans_json(Manager *m);

Device *manager_find_device(Manager *m, const char *name_or_id);
/* Re-resolve and apply (d NULL: every device). */
int manager_apply(Manager *m, Device *d);
/* The policy of d as the daemon applies it: its sections and, for a disk
 * below stacked devices, theirs (policy_resolve_stacked()). */
int manager_resolve(Manager *m, Device *d, const char *profile, Resolved *ret);
/* Put back originals (d NULL: every device). */
int manager_restore(Manager *m, Device *d);
/* Loads the config again; on error keeps the old one and fills *err. */
int manager_reload(Manager *m, ConfigError *err);
/* manager_reload() as a service reloads: RELOADING=1 to systemd, the
 * error logged with its file:line and the old config kept, READY=1 once
 * the devices are re-applied. why: "SIGHUP", "varlink". */
int manager_reload_notify(Manager *m, const char *why, ConfigError *err);
/* NULL clears; -ENOENT if no such [Profile]. The profile is kept in the
 * state directory (StateDirectory=/profile) and active again after a
 * restart; clearing removes it. */
int manager_set_profile(Manager *m, const char *profile);
/* Forgets what the drift check logged of d (NULL: every device) and what
 * DriftPolicy=keep left to the other writer: an apply asked for manages
 * every setting again. */
void manager_forget_drift(Manager *m, Device *d);
/* The DriftPolicy= of d: its last matched [Device] section's, else [Daemon]'s. */
DriftPolicy manager_drift_policy(const Manager *m, const Device *d);
/* The drift check (DriftCheckSec=): every managed setting read back, drift
 * logged once per device, attribute and value, then what DriftPolicy= says. */
void manager_check_drift(Manager *m);
/* Tells the listeners (the Manager adapter, the trial runner) of an event. */
void manager_notify(Manager *m, ManagerEventType t, Device *d);
/* Tune jobs (apply, restore) in flight. */
static inline unsigned manager_tune_jobs(const Manager *m) {
        return m->n_tune_jobs;
}
