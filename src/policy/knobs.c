/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "knobs.h"
#include "util.h"

static const KnobInfo knobs[_KNOB_MAX] = {
        [KNOB_SCHEDULER] = { "Scheduler", "queue/scheduler", KNOB_TYPE_SCHEDULERS, 0, 0, NULL, "list" },
        [KNOB_NR_REQUESTS] = { "NrRequests", "queue/nr_requests", KNOB_TYPE_INT, 1, 1 << 20, NULL, "requests" },
        [KNOB_ASYNC_DEPTH] = { "AsyncDepth", "queue/async_depth", KNOB_TYPE_INT, 1, 1 << 20, NULL, "requests" },
        [KNOB_WBT_LAT_USEC] = { "WbtLatUsec", "queue/wbt_lat_usec", KNOB_TYPE_INT, -1, LLONG_MAX / 1000, NULL, "µs" },
        [KNOB_READ_AHEAD_KB] = { "ReadAheadKB", "queue/read_ahead_kb", KNOB_TYPE_INT, 0, INT_MAX, NULL, "KiB" },
        [KNOB_RQ_AFFINITY] = { "RqAffinity", "queue/rq_affinity", KNOB_TYPE_INT, 0, 2, NULL, NULL },
        [KNOB_IO_POLL] = { "IOPoll", "queue/io_poll", KNOB_TYPE_BOOL, 0, 1, NULL, NULL },
        [KNOB_IO_POLL_DELAY] = { "IOPollDelay", "queue/io_poll_delay", KNOB_TYPE_INT, -1, INT_MAX, NULL, "µs" },
        [KNOB_KYBER_READ_LAT_NSEC] = { "ReadLatNsec", "queue/iosched/read_lat_nsec", KNOB_TYPE_INT, 1, LLONG_MAX, "kyber", "ns" },
        [KNOB_KYBER_WRITE_LAT_NSEC] = { "WriteLatNsec", "queue/iosched/write_lat_nsec", KNOB_TYPE_INT, 1, LLONG_MAX, "kyber", "ns" },
        [KNOB_DL_READ_EXPIRE] = { "DeadlineReadExpireMSec", "queue/iosched/read_expire", KNOB_TYPE_INT, 0, INT_MAX, "mq-deadline", "ms" },
        [KNOB_DL_WRITE_EXPIRE] = { "DeadlineWriteExpireMSec", "queue/iosched/write_expire", KNOB_TYPE_INT, 0, INT_MAX, "mq-deadline", "ms" },
        [KNOB_DL_WRITES_STARVED] = { "DeadlineWritesStarved", "queue/iosched/writes_starved", KNOB_TYPE_INT, INT_MIN, INT_MAX, "mq-deadline", NULL },
        [KNOB_DL_FRONT_MERGES] = { "DeadlineFrontMerges", "queue/iosched/front_merges", KNOB_TYPE_BOOL, 0, 1, "mq-deadline", NULL },
        [KNOB_DL_FIFO_BATCH] = { "DeadlineFifoBatch", "queue/iosched/fifo_batch", KNOB_TYPE_INT, 0, INT_MAX, "mq-deadline", "requests" },
        [KNOB_DL_ASYNC_DEPTH] = { "DeadlineAsyncDepth", "queue/iosched/async_depth", KNOB_TYPE_INT, 1, INT_MAX, "mq-deadline", "requests" },
        [KNOB_BFQ_LOW_LATENCY] = { "BfqLowLatency", "queue/iosched/low_latency", KNOB_TYPE_BOOL, 0, 1, "bfq", NULL },
        [KNOB_BFQ_SLICE_IDLE] = { "BfqSliceIdleMSec", "queue/iosched/slice_idle", KNOB_TYPE_INT, 0, INT_MAX, "bfq", "ms" },
        [KNOB_ZONED_QD1_WRITES] = { "ZonedQD1Writes", "queue/zoned_qd1_writes", KNOB_TYPE_BOOL, 0, 1, NULL, NULL },
        [KNOB_CPU_AFFINITY] = { "CPUAffinity", NULL, KNOB_TYPE_CPUSET, 0, 0, NULL, "CPU list" },
        [KNOB_SCHEDULER_FORCE] = { "SchedulerForce", NULL, KNOB_TYPE_BOOL, 0, 1, NULL, NULL },
        [KNOB_PROBE] = { "Probe", NULL, KNOB_TYPE_BOOL, 0, 1, NULL, NULL },
        [KNOB_PROBE_INTERVAL] = { "ProbeIntervalSec", NULL, KNOB_TYPE_SECONDS, 10000, 86400000000LL, NULL, "s" },
        [KNOB_PROBE_JITTER] = { "ProbeJitterSec", NULL, KNOB_TYPE_SECONDS, 0, 86400000000LL, NULL, "s" },
        [KNOB_PROBE_SIZE] = { "ProbeSizeKB", NULL, KNOB_TYPE_INT, 1, 1024, NULL, "KiB" },
        [KNOB_PROBE_POLLED] = { "ProbePolled", NULL, KNOB_TYPE_BOOL, 0, 1, NULL, NULL },
        [KNOB_ALERT_READ_LAT] = { "AlertReadLatUsec", NULL, KNOB_TYPE_INT, 1, 3600000000LL, NULL, "µs" },
        [KNOB_ALERT_WRITE_LAT] = { "AlertWriteLatUsec", NULL, KNOB_TYPE_INT, 1, 3600000000LL, NULL, "µs" },
        [KNOB_ZONE_ALLOCATOR] = { "ZoneAllocator", NULL, KNOB_TYPE_BOOL, 0, 1, NULL, NULL },
};

const KnobInfo *knob_info(Knob k) {
        if ((unsigned) k >= _KNOB_MAX)
                return NULL;
        return &knobs[k];
}

bool knob_request_queue(Knob k) {
        return (k < KNOB_SCHEDULER_FORCE && k != KNOB_READ_AHEAD_KB) || k == KNOB_SCHEDULER_FORCE;
}

int knob_from_key(const char *key) {
        for (int i = 0; i < _KNOB_MAX; i++)
                if (streq(knobs[i].key, key))
                        return i;
        return -ENOENT;
}

static bool scheduler_name_valid(const char *s) {
        if (!*s || strlen(s) > 32)
                return false;
        for (; *s; s++)
                if (!isalnum((unsigned char) *s) && *s != '-' && *s != '_')
                        return false;
        return true;
}

int knob_parse_value(Knob k, const char *value, char **ret, const char **ret_message) {
        const KnobInfo *ki = knob_info(k);
        char buf[64];
        long long v;
        int r;

        *ret_message = NULL;
        switch (ki->type) {
        case KNOB_TYPE_SCHEDULERS: {
                _cleanup_strv_free_ char **l = NULL;

                if (strv_split_ws(value, &l) < 0)
                        return -ENOMEM;
                if (strv_length(l) == 0) {
                        *ret_message = "expected one or more scheduler names";
                        return -EINVAL;
                }
                STRV_FOREACH(s, l)
                        if (!scheduler_name_valid(*s)) {
                                *ret_message = "invalid scheduler name";
                                return -EINVAL;
                        }
                *ret = strv_join(l, " ");
                return *ret ? 0 : -ENOMEM;
        }
        case KNOB_TYPE_INT:
                r = safe_atolli(value, &v);
                if (r < 0) {
                        *ret_message = "expected an integer";
                        return -EINVAL;
                }
                if (v < ki->min || v > ki->max) {
                        *ret_message = "value out of range";
                        return -ERANGE;
                }
                snprintf(buf, sizeof buf, "%lld", v);
                break;
        case KNOB_TYPE_BOOL:
                r = parse_boolean(value);
                if (r < 0) {
                        *ret_message = "expected a boolean (yes/no)";
                        return -EINVAL;
                }
                snprintf(buf, sizeof buf, "%d", r);
                break;
        case KNOB_TYPE_SECONDS: {
                uint64_t us;

                r = parse_seconds(value, &us);
                if (r < 0 || (long long) us < ki->min || (long long) us > ki->max) {
                        *ret_message = r < 0 ? "expected seconds, like 10 or 0.5" : "value out of range";
                        return -EINVAL;
                }
                snprintf(buf, sizeof buf, "%llu", (unsigned long long) us);
                break;
        }
        case KNOB_TYPE_CPUSET: {
                CpuSet c;

                r = cpuset_parse(value, &c);
                if (r < 0 || cpuset_is_empty(&c)) {
                        *ret_message = r == -ERANGE ? "CPU number out of range" : "expected a CPU list like 0-3,8";
                        return -EINVAL;
                }
                *ret = cpuset_format(&c);
                return *ret ? 0 : -ENOMEM;
        }
        default:
                return -EINVAL;
        }
        *ret = strdup(buf);
        return *ret ? 0 : -ENOMEM;
}

bool knob_value_equal(Knob k, const char *current, const char *wanted) {
        const KnobInfo *ki = knob_info(k);

        if (!current || !wanted)
                return false;
        switch (ki->type) {
        case KNOB_TYPE_SCHEDULERS: {
                _cleanup_free_ char *a = scheduler_active(current);
                return streq(a ? a : current, wanted);
        }
        case KNOB_TYPE_INT:
        case KNOB_TYPE_SECONDS:
        case KNOB_TYPE_BOOL: {
                long long a, b;
                if (safe_atolli(current, &a) < 0 || safe_atolli(wanted, &b) < 0)
                        return streq(current, wanted);
                return a == b;
        }
        case KNOB_TYPE_CPUSET: {
                CpuSet a, b;
                if (cpuset_parse(current, &a) < 0 || cpuset_parse(wanted, &b) < 0)
                        return false;
                return cpuset_equal(&a, &b);
        }
        }
        return false;
}

int parse_seconds(const char *s, uint64_t *ret_usec) {
        uint64_t whole = 0, frac = 0, scale = 1000000;
        const char *p = s;

        if (!s || !*s)
                return -EINVAL;
        if (!isdigit((unsigned char) *p) && *p != '.')
                return -EINVAL;
        for (; isdigit((unsigned char) *p); p++) {
                whole = whole * 10 + (uint64_t) (*p - '0');
                if (whole > 86400)
                        return -ERANGE;
        }
        if (*p == '.') {
                p++;
                if (!isdigit((unsigned char) *p))
                        return -EINVAL;
                for (; isdigit((unsigned char) *p); p++)
                        if (scale > 1) {
                                scale /= 10;
                                frac += (uint64_t) (*p - '0') * scale;
                        }
        }
        if (*p)
                return -EINVAL;
        *ret_usec = whole * 1000000 + frac;
        return 0;
}

char *scheduler_active(const char *line) {
        const char *a = strchr(line, '['), *b;

        if (!a)
                return NULL;
        b = strchr(a, ']');
        if (!b)
                return NULL;
        return strndup(a + 1, b - a - 1);
}

bool scheduler_available(const char *line, const char *name) {
        _cleanup_strv_free_ char **l = NULL;

        if (strv_split_ws(line, &l) < 0)
                return false;
        STRV_FOREACH(s, l) {
                char *w = *s;
                size_t n = strlen(w);
                if (w[0] == '[' && n >= 2 && w[n - 1] == ']') {
                        w[n - 1] = 0;
                        w++;
                }
                if (streq(w, name))
                        return true;
        }
        return false;
}
