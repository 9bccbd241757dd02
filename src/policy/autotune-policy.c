/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The closed loop's policy: the Auto* keys of a [Device] section
 * (AutotunePolicy, its objective and families of knobs by name), and the
 * limits it sets on when a trial may start (dwell, trials per hour). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune.h"
#include "knobs.h"
#include "util.h"

static const char *const objective_names[] = {
        [AUTOTUNE_OBJECTIVE_READ_LATENCY] = "read-latency",
        [AUTOTUNE_OBJECTIVE_THROUGHPUT] = "throughput",
        [AUTOTUNE_OBJECTIVE_SEQ_READ] = "sequential-read",
};

const char *autotune_objective_to_string(AutotuneObjective o) {
        return (unsigned) o < _AUTOTUNE_OBJECTIVE_MAX ? objective_names[o] : NULL;
}

/* The index of s among names[0..n); -EINVAL: none. */
static int name_index(const char *const *names, size_t n, const char *s) {
        for (size_t i = 0; i < n; i++)
                if (streq(s, names[i]))
                        return (int) i;
        return -EINVAL;
}

int autotune_objective_from_string(const char *s) {
        /* sequential-read is the search's own, not a value of AutoObjective= */
        return name_index(objective_names, AUTOTUNE_OBJECTIVE_SEQ_READ, s);
}

static const char *const family_names[_AUTOTUNE_FAMILY_MAX] = {
        [AUTOTUNE_FAMILY_SCHEDULER] = "scheduler",
        [AUTOTUNE_FAMILY_NR_REQUESTS] = "nr_requests",
        [AUTOTUNE_FAMILY_WBT] = "wbt_lat_usec",
        [AUTOTUNE_FAMILY_IOSCHED] = "iosched",
        [AUTOTUNE_FAMILY_READ_AHEAD] = "read_ahead_kb",
};

const char *autotune_family_to_string(AutotuneFamily f) {
        return (unsigned) f < _AUTOTUNE_FAMILY_MAX ? family_names[f] : NULL;
}

int autotune_family_from_string(const char *s) {
        return name_index(family_names, _AUTOTUNE_FAMILY_MAX, s);
}

void autotune_policy_init(AutotunePolicy *p) {
        *p = (AutotunePolicy) {
                .objective = AUTOTUNE_OBJECTIVE_READ_LATENCY,
                .write_tolerance_pct = 10,
                .read_target_usec = 10000,
                .epoch_usec = 500000,
                .rounds = 6,
                .confidence_pct = 95,
                .min_improvement_pct = 10,
                .guard_factor = 4,
                .dwell_usec = 600ULL * 1000000,
                .interval_usec = 0,
                .trials_per_hour = 4,
                .min_iops = 20,
                .max_switches = AUTOTUNE_DEFAULT_MAX_SWITCHES,
                .remember = true,
        };
}

void autotune_policy_done(AutotunePolicy *p) {
        for (size_t i = 0; p->schedulers[i]; i++)
                p->schedulers[i] = mfree(p->schedulers[i]);
}

int autotune_policy_copy(AutotunePolicy *dst, const AutotunePolicy *src) {
        *dst = *src;
        for (size_t i = 0; src->schedulers[i]; i++)
                if (!(dst->schedulers[i] = strdup(src->schedulers[i]))) {
                        while (i > 0) {
                                i--;
                                dst->schedulers[i] = mfree(dst->schedulers[i]);
                        }
                        dst->schedulers[0] = NULL;
                        return -ENOMEM;
                }
        return 0;
}

static int parse_uint_in(const char *s, long long min, long long max, long long *ret) {
        long long v;
        if (safe_atolli(s, &v) < 0 || v < min || v > max)
                return -EINVAL;
        *ret = v;
        return 0;
}

int autotune_parse_nr_requests(const char *value, unsigned *ret, size_t *ret_n) {
        const char *dots = strstr(value, "..");
        size_t n = 0;

        if (dots) {
                char a[32], b[32];
                long long lo, hi;
                if ((size_t) (dots - value) >= sizeof a || strlen(dots + 2) >= sizeof b)
                        return -EINVAL;
                memcpy(a, value, (size_t) (dots - value));
                a[dots - value] = 0;
                strcpy(b, dots + 2);
                if (parse_uint_in(strstrip(a), 4, 100000, &lo) < 0 || parse_uint_in(strstrip(b), 4, 100000, &hi) < 0 ||
                    lo > hi)
                        return -EINVAL;
                ret[n++] = (unsigned) lo;
                for (long long v = 8; v < hi && n < AUTOTUNE_MAX_VALUES - 1; v *= 2)
                        if (v > lo)
                                ret[n++] = (unsigned) v;
                if (hi > lo)
                        ret[n++] = (unsigned) hi;
                *ret_n = n;
                return 0;
        }
        _cleanup_strv_free_ char **l = NULL;
        if (strv_split_ws(value, &l) < 0)
                return -ENOMEM;
        STRV_FOREACH(s, l) {
                long long v;
                if (n >= AUTOTUNE_MAX_VALUES || parse_uint_in(*s, 4, 100000, &v) < 0)
                        return -EINVAL;
                bool dup = false;
                for (size_t i = 0; i < n; i++)
                        dup = dup || ret[i] == (unsigned) v;
                if (!dup)
                        ret[n++] = (unsigned) v;
        }
        if (n == 0)
                return -EINVAL;
        *ret_n = n;
        return 0;
}

/* "10" or "10%" */
static int parse_percent(const char *value, long long min, long long max, long long *ret) {
        char buf[32];
        size_t n = strlen(value);
        if (n == 0 || n >= sizeof buf)
                return -EINVAL;
        strcpy(buf, value);
        if (buf[n - 1] == '%')
                buf[n - 1] = 0;
        return parse_uint_in(buf, min, max, ret);
}

static int parse_schedulers(AutotunePolicy *p, const char *value, char *msgbuf, size_t msgsize) {
        _cleanup_strv_free_ char **l = NULL;
        size_t n = 0;
        int r;

        if (strv_split_ws(value, &l) < 0)
                return -ENOMEM;
        STRV_FOREACH(s, l) {
                _cleanup_free_ char *canon = NULL;
                const char *msg;
                if (n >= AUTOTUNE_MAX_SCHEDULERS) {
                        snprintf(msgbuf, msgsize, "at most %d schedulers", AUTOTUNE_MAX_SCHEDULERS);
                        return -EINVAL;
                }
                r = knob_parse_value(KNOB_SCHEDULER, *s, &canon, &msg);
                if (r == -ENOMEM)
                        return r;
                if (r < 0 || strchr(canon, ' ')) {
                        snprintf(msgbuf, msgsize, "\"%s\" is not a scheduler name", *s);
                        return -EINVAL;
                }
                n++;
        }
        for (size_t i = 0; p->schedulers[i]; i++)
                p->schedulers[i] = mfree(p->schedulers[i]);
        for (size_t i = 0; i < n; i++)
                if (!(p->schedulers[i] = strdup(l[i])))
                        return -ENOMEM;
        return 0;
}

static int parse_wbt_list(AutotunePolicy *p, const char *value) {
        _cleanup_strv_free_ char **l = NULL;
        long long v;
        size_t n = 0;

        if (strv_split_ws(value, &l) < 0)
                return -ENOMEM;
        STRV_FOREACH(s, l) {
                if (n >= AUTOTUNE_MAX_VALUES || parse_uint_in(*s, -1, 10000000, &v) < 0)
                        return -EINVAL;
                p->wbt_lat_usec[n++] = v;
        }
        p->n_wbt_lat_usec = n;
        return 0;
}

/* The keys whose value is one number in a range, a percentage, a duration
 * or a boolean: where it goes and what a bad value is told. */
typedef enum AutoKeyKind {
        AUTO_KEY_BOOL,
        AUTO_KEY_UINT,    /* stored as unsigned */
        AUTO_KEY_U64,     /* stored as uint64_t */
        AUTO_KEY_DOUBLE,  /* an integer stored as double */
        AUTO_KEY_PERCENT, /* "10" or "10%", stored as unsigned */
        AUTO_KEY_SECONDS, /* a duration in µs, min/max in µs */
} AutoKeyKind;

typedef struct AutoKey {
        const char *name;
        AutoKeyKind kind;
        size_t offset;
        long long min, max;
        const char *expected;
} AutoKey;

#define F(field) offsetof(AutotunePolicy, field)
static const AutoKey auto_keys[] = {
        { "AutoTune", AUTO_KEY_BOOL, F(enabled), 0, 0, "expected a boolean" },
        { "AutoTrialOnHotplug", AUTO_KEY_BOOL, F(on_hotplug), 0, 0, "expected a boolean" },
        { "AutoTrialOnWorkloadChange", AUTO_KEY_BOOL, F(on_workload_change), 0, 0, "expected a boolean" },
        { "AutoRemember", AUTO_KEY_BOOL, F(remember), 0, 0, "expected a boolean" },
        { "AutoMaxSwitches", AUTO_KEY_UINT, F(max_switches), 1, 1000, "expected a number from 1 to 1000" },
        { "AutoWriteTolerance", AUTO_KEY_PERCENT, F(write_tolerance_pct), 0, 100,
          "expected a percentage from 0 to 100" },
        { "AutoConfidence", AUTO_KEY_PERCENT, F(confidence_pct), 50, 99, "expected a percentage from 50 to 99" },
        { "AutoMinImprovement", AUTO_KEY_PERCENT, F(min_improvement_pct), 0, 1000,
          "expected a percentage from 0 to 1000" },
        { "AutoReadLatencyTargetUSec", AUTO_KEY_U64, F(read_target_usec), 1, 60000000,
          "expected microseconds from 1 to 60000000" },
        { "AutoRounds", AUTO_KEY_UINT, F(rounds), 3, AUTOTUNE_MAX_EPOCHS, NULL },
        { "AutoGuardFactor", AUTO_KEY_UINT, F(guard_factor), 2, 1000, "expected a factor from 2 to 1000" },
        { "AutoTrialsPerHour", AUTO_KEY_UINT, F(trials_per_hour), 1, 60, "expected a number from 1 to 60" },
        { "AutoMinIOPS", AUTO_KEY_DOUBLE, F(min_iops), 1, 10000000, "expected I/Os per second from 1 to 10000000" },
        { "AutoEpochSec", AUTO_KEY_SECONDS, F(epoch_usec), 250000, 600000000, "expected seconds from 0.25 to 600" },
        { "AutoMinDwellSec", AUTO_KEY_SECONDS, F(dwell_usec), 0, 86400LL * 1000000,
          "expected seconds from 0 to 86400" },
};
#undef F

static int parse_auto_key(const AutoKey *k, AutotunePolicy *p, const char *value) {
        uint8_t *field = (uint8_t *) p + k->offset;
        long long v;
        uint64_t us;
        int r;

        switch (k->kind) {
        case AUTO_KEY_BOOL:
                r = parse_boolean(value);
                if (r < 0)
                        return r;
                *(bool *) field = r;
                return 0;
        case AUTO_KEY_PERCENT:
                r = parse_percent(value, k->min, k->max, &v);
                break;
        case AUTO_KEY_SECONDS:
                if (parse_seconds(value, &us) < 0 || us < (uint64_t) k->min || us > (uint64_t) k->max)
                        return -EINVAL;
                *(uint64_t *) field = us;
                return 0;
        default:
                r = parse_uint_in(value, k->min, k->max, &v);
        }
        if (r < 0)
                return r;
        if (k->kind == AUTO_KEY_U64)
                *(uint64_t *) field = (uint64_t) v;
        else if (k->kind == AUTO_KEY_DOUBLE)
                *(double *) field = (double) v;
        else
                *(unsigned *) field = (unsigned) v;
        return 0;
}

/* The keys with a value of their own shape. */
static int parse_auto_special(AutotunePolicy *p, const char *key, const char *value, char *msgbuf,
                              size_t msgsize) {
        int r;

        if (streq(key, "AutoScheduler"))
                return parse_schedulers(p, value, msgbuf, msgsize);
        if (streq(key, "AutoNrRequests")) {
                if (!*value) {
                        p->n_nr_requests = 0;
                        return 0;
                }
                if (autotune_parse_nr_requests(value, p->nr_requests, &p->n_nr_requests) >= 0)
                        return 0;
                snprintf(msgbuf, msgsize,
                         "expected values from 4 to 100000, as a list (\"64 256\") or a range (\"64..1024\": "
                         "both ends and the powers of two between them), at most %d", AUTOTUNE_MAX_VALUES);
                return -EINVAL;
        }
        if (streq(key, "AutoWbtLatUsec")) {
                r = parse_wbt_list(p, value);
                if (r == -EINVAL)
                        snprintf(msgbuf, msgsize,
                                 "expected values from -1 (the kernel's default) and 0 (off) to 10000000, "
                                 "at most %d", AUTOTUNE_MAX_VALUES);
                return r;
        }
        if (streq(key, "AutoKnobs")) {
                _cleanup_strv_free_ char **l = NULL;
                unsigned mask = 0;
                if (strv_split_ws(value, &l) < 0)
                        return -ENOMEM;
                STRV_FOREACH(s, l) {
                        r = autotune_family_from_string(*s);
                        if (r < 0) {
                                snprintf(msgbuf, msgsize,
                                         "\"%s\" is not a family of knobs: expected scheduler, nr_requests, "
                                         "wbt_lat_usec, iosched, read_ahead_kb", *s);
                                return -EINVAL;
                        }
                        mask |= 1U << r;
                }
                p->knobs = mask; /* empty: back to one race over the bounds' product */
                return 0;
        }
        if (streq(key, "AutoReadAheadKB")) {
                _cleanup_strv_free_ char **l = NULL;
                size_t n = 0;
                if (strv_split_ws(value, &l) < 0)
                        return -ENOMEM;
                STRV_FOREACH(s, l) {
                        long long v;
                        if (n >= AUTOTUNE_MAX_VALUES || parse_uint_in(*s, 0, 1048576, &v) < 0) {
                                snprintf(msgbuf, msgsize, "expected KiB from 0 to 1048576, at most %d values",
                                         AUTOTUNE_MAX_VALUES);
                                return -EINVAL;
                        }
                        p->read_ahead_kb[n++] = (unsigned) v;
                }
                p->n_read_ahead_kb = n;
                return 0;
        }
        if (streq(key, "AutoObjective")) {
                r = autotune_objective_from_string(value);
                if (r < 0) {
                        snprintf(msgbuf, msgsize, "expected read-latency or throughput");
                        return -EINVAL;
                }
                p->objective = (AutotuneObjective) r;
                return 0;
        }
        if (streq(key, "AutoTrialIntervalSec")) {
                uint64_t us;
                if (parse_seconds(value, &us) < 0 || us > 86400ULL * 1000000 || (us && us < 60000000)) {
                        snprintf(msgbuf, msgsize, "expected seconds from 60 to 86400, or 0 (no periodic trials)");
                        return -EINVAL;
                }
                p->interval_usec = us;
                return 0;
        }
        return -ENOENT;
}

int autotune_policy_parse(AutotunePolicy *p, const char *key, const char *value, char *msgbuf, size_t msgsize,
                          const char **ret_message) {
        int r = -ENOENT;

        if (strncmp(key, "Auto", 4) != 0)
                return -ENOENT;

        for (size_t i = 0; i < ELEMENTSOF(auto_keys); i++) {
                const AutoKey *k = &auto_keys[i];
                if (!streq(key, k->name))
                        continue;
                r = parse_auto_key(k, p, value);
                if (r == -EINVAL) {
                        if (k->expected)
                                snprintf(msgbuf, msgsize, "%s", k->expected);
                        else
                                snprintf(msgbuf, msgsize, "expected a number from %lld to %lld", k->min, k->max);
                }
                break;
        }
        if (r == -ENOENT)
                r = parse_auto_special(p, key, value, msgbuf, msgsize);
        if (r == -EINVAL)
                *ret_message = msgbuf;
        if (r < 0)
                return r;
        p->set = true;
        return 0;
}

void autotune_history_add(AutotuneHistory *h, uint64_t now_usec) {
        size_t cap = sizeof h->starts / sizeof h->starts[0];
        if (h->n == cap) {
                memmove(h->starts, h->starts + 1, (cap - 1) * sizeof h->starts[0]);
                h->n--;
        }
        h->starts[h->n++] = now_usec;
}

unsigned autotune_history_count(const AutotuneHistory *h, uint64_t now_usec, uint64_t window_usec) {
        unsigned n = 0;
        for (size_t i = 0; i < h->n; i++)
                if (h->starts[i] + window_usec > now_usec)
                        n++;
        return n;
}

bool autotune_may_start(const AutotunePolicy *p, const AutotuneHistory *device, const AutotuneHistory *global,
                        unsigned global_per_hour, uint64_t now_usec, bool forced, char *why, size_t why_size) {
        const uint64_t hour = 3600ULL * 1000000;

        if (global && global_per_hour && autotune_history_count(global, now_usec, hour) >= global_per_hour) {
                snprintf(why, why_size,
                         "%u trials in the last hour across all devices (TrialsPerHourAllDevices= of [Daemon])",
                         global_per_hour);
                return false;
        }
        if (forced)
                return true;
        if (!p->enabled) {
                snprintf(why, why_size, "AutoTune= is off");
                return false;
        }
        if (device->last_change_usec && now_usec < device->last_change_usec + p->dwell_usec) {
                snprintf(why, why_size, "changed %" PRIu64 " s ago, less than AutoMinDwellSec=%" PRIu64,
                         (now_usec - device->last_change_usec) / 1000000, p->dwell_usec / 1000000);
                return false;
        }
        if (autotune_history_count(device, now_usec, hour) >= p->trials_per_hour) {
                snprintf(why, why_size, "%u trials of this device in the last hour (AutoTrialsPerHour=)",
                         p->trials_per_hour);
                return false;
        }
        return true;
}
