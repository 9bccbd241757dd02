/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "autotune.h"
#include "cleanup.h"
#include "knobs.h"

/* The configuration: blkmqd.conf plus drop-ins, parsed with inih. A Config
 * is immutable once loaded; reload builds a new one and swaps it in only if
 * it parsed cleanly. */

typedef struct Settings {
        char *value[_KNOB_MAX];  /* canonical value, NULL if unset */
        char *origin[_KNOB_MAX]; /* "file:line" */
} Settings;

typedef struct Match {
        char **kernel;       /* globs on the sysname */
        char **backing_file; /* globs on loop/backing_file */
        char **zoned;        /* none, host-aware, host-managed */
        char **driver;
        char **transport;
        char **model;
        char **vendor;   /* one glob each, like model: vendors contain blanks */
        char **firmware; /* globs on the firmware revision */
        char **serial;
        char **wwn;
        char **property; /* "KEY=GLOB" */
        /* stacks, by what operators name them (DeviceInfo's stack names) */
        char **volume;     /* "VG/LV" globs */
        char **dm_name;
        char **dm_uuid;
        char **crypt;      /* dm-crypt mapping names */
        char **mpath_wwid;
        char **md_name;    /* MD_NAME, or its part after "HOST:" */
        char **md_level;
        int rotational;  /* -1 unset */
        bool has_size;
        uint64_t size_min, size_max; /* bytes, inclusive */
} Match;

typedef struct DeviceSection {
        char *name;
        char *file;
        unsigned line;
        Match match;
        Settings settings;
        AutotunePolicy autotune; /* the Auto* keys (autotune.h) */
        char *autotune_origin;   /* "file:line" of its AutoTune= */
        int drift_policy;        /* DriftPolicy=: a DriftPolicy, -1 unset (the [Daemon] one) */
} DeviceSection;

typedef struct ProfileSection {
        char *name;
        char *file;
        unsigned line;
        char **devices; /* names of [Device] sections it applies to; empty = all */
        Settings settings;
} ProfileSection;

/* What blkmqd does when a setting it manages reads otherwise than it left
 * it (something else wrote it): DriftPolicy=. */
typedef enum DriftPolicy {
        DRIFT_REPORT,  /* log it once, leave it */
        DRIFT_REAPPLY, /* log it once, write the wanted value again */
        DRIFT_KEEP,    /* log it once, leave it and stop managing it until the next apply or reload */
        _DRIFT_POLICY_MAX,
} DriftPolicy;

const char *drift_policy_to_string(DriftPolicy p);
int drift_policy_from_string(const char *s);

typedef struct DaemonConfig {
        bool restore_on_exit;
        int log_level; /* -1 unset */
        unsigned apply_threads;
        char *admin_group;
        uint64_t probe_interval_usec; /* default for [Device] ProbeIntervalSec=; 0: no probes */
        unsigned probe_threads;
        char *metrics_textfile;
        uint64_t call_timeout_usec; /* a mutating call waits this long for its jobs; 0: for ever */
        unsigned autotune_trials_per_hour; /* AutoTrialsPerHour=: trials across all devices */
        char *originals_directory; /* OriginalsDirectory=: NULL: $RUNTIME_DIRECTORY or the default */
        char *state_directory; /* StateDirectory=: what trials learned of workloads (autotune-memory),
                                * the active profile */
        uint64_t drift_check_usec; /* DriftCheckSec=: how often managed settings are read back; 0: never */
        DriftPolicy drift_policy;  /* DriftPolicy=: for the [Device] sections that set none */
} DaemonConfig;

#define CONFIG_DEFAULT_DRIFT_CHECK_USEC (30 * UINT64_C(1000000))

#define CONFIG_DEFAULT_STATE_DIRECTORY "/var/lib/blkmqd"

#define CONFIG_DEFAULT_AUTOTUNE_TRIALS_PER_HOUR 12u

#define CONFIG_DEFAULT_CALL_TIMEOUT_USEC (30 * UINT64_C(1000000))

typedef struct ZonesConfig {
        char *emulate;          /* file to emulate zones over, or NULL */
        uint64_t zone_size;     /* bytes */
        uint64_t zone_capacity; /* bytes, 0: = zone_size */
        uint32_t zone_count;
        uint32_t max_open, max_active; /* 0: no limit */
        unsigned reset_batch;
        char *database;
        /* The I/O shape of an Append (reloadable): bytes per write, 0 = the
         * device's largest; writes in flight per zone on zone-append
         * devices, 0 = ZONES_APPEND_DEPTH_DEFAULT. */
        uint32_t append_chunk;
        unsigned append_depth;
        /* Read back and hash what has landed while the rest of an object
         * is written (reloadable; default yes). */
        bool verify_while_writing;
        /* A label names one object per device (reloadable; default yes). */
        bool unique_labels;
        /* Scrub: every sealed zone is read back and checked against its
         * SHA-256 once per scrub_interval (0: never), at most scrub_rate
         * bytes per second, at idle I/O priority (reloadable). */
        uint64_t scrub_interval_usec;
        uint64_t scrub_rate;
} ZonesConfig;

#define ZONES_SCRUB_INTERVAL_DEFAULT_USEC (7ULL * 24 * 3600 * 1000000)
#define ZONES_SCRUB_RATE_DEFAULT (16ULL << 20)

#define ZONES_APPEND_DEPTH_DEFAULT 8U
#define ZONES_APPEND_DEPTH_MAX 32U

typedef struct Config {
        DaemonConfig daemon;
        ZonesConfig zones;
        DeviceSection *devices;
        size_t n_devices;
        ProfileSection *profiles;
        size_t n_profiles;
        char **files; /* every file read, in order */
} Config;

typedef struct ConfigError {
        char file[4096];
        unsigned line; /* 0 if the error is about the file as a whole */
        char message[512];
} ConfigError;

#define CONFIG_DEFAULT_APPLY_THREADS 16u
#define CONFIG_DEFAULT_PROBE_INTERVAL_USEC (10 * UINT64_C(1000000))
#define CONFIG_DEFAULT_PROBE_THREADS 1u

/* Loads main_path (or the default search when NULL: the first of
 * /etc/blkmqd/blkmqd.conf, /run/blkmqd/blkmqd.conf, /usr/lib/blkmqd/blkmqd.conf)
 * and the drop-ins. With an explicit main_path, drop-ins come from
 * "<main_path>.d/"; by default from blkmqd.conf.d/ in /etc, /run and
 * /usr/lib, a file name in an earlier directory masking the same name in a
 * later one, all sorted by file name. A missing default config is an empty
 * config, a missing explicit one is an error. On error returns -EINVAL (or
 * -errno) and fills *err. */
int config_load(const char *main_path, Config **ret, ConfigError *err);
/* The same, but past the first error: each file to its end (a key with an
 * error is left out, the keys of a section header with an error are not
 * looked at) and every drop-in; the checks of the whole configuration
 * (each of them) once every file parsed. On -EINVAL, *ret_errors (free()) holds every error found, in the order
 * of the files (at most 100); errors after the first may follow from it.
 * On success *ret as config_load() and no errors. For --check-config. */
int config_check(const char *main_path, Config **ret, ConfigError **ret_errors, size_t *ret_n_errors);
/* Same, from a string (tests); "name" stands for the file name. */
int config_load_string(const char *text, const char *name, Config **ret, ConfigError *err);
Config *config_free(Config *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(Config *, config_free)

const DeviceSection *config_find_device(const Config *c, const char *name);
const ProfileSection *config_find_profile(const Config *c, const char *name);
