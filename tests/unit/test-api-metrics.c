/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* io.blkmqd.Metrics: the pure JSON builders on hand-filled ProbeTargets
 * (windows, percentiles, buckets, log2 slots, nullable fields), then the
 * interface over a socketpair with a fake Prober (Get, Histogram, errors,
 * Monitor with its throttle and disconnect), every reply checked against the
 * IDL, and blkmqctl latency/top run against it when the binary is there.
 *
 * The targets and the Prober are probe.c's own; the Prober's timer is
 * kept off, so nothing probes a device here. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "api-metrics.h"
#include "log.h"
#include "util.h"
#include "varlink-idl.h"
#include "varlink.h"
#include "varlink-peer.h"

/* ---- targets filled by hand ---- */

static const ProbeConfig target_config = {
        .enabled = true,
        .polled = true,
        .interval_usec = 1000000,
        .size = 4096,
};

/* What the tests expect of a fresh target beyond probe_target_new(): its
 * config, and no iostat figures yet. */
static void target_init(ProbeTarget *t) {
        t->config = target_config;
        t->stats.read_await_usec = NAN;
        t->stats.write_await_usec = NAN;
}

static ProbeTarget *target_new(const char *sysname, const char *devnode) {
        ProbeTarget *t = probe_target_new(sysname);

        assert_non_null(t);
        t->devnode = devnode ? strdup(devnode) : NULL;
        target_init(t);
        return t;
}

/* A target of the Prober p, made by prober_update() as the daemon does. Its
 * first probe is put off for ever, and the timer off with it (the second
 * prober_update() re-arms from next_due_usec). */
static ProbeTarget *prober_add(Prober *p, const char *sysname, const char *devnode) {
        ProbeDevice dev = { .sysname = sysname, .devnode = devnode, .blockdir = "/nonexistent", .stat_fd = -EBADF };
        ProbeTarget *t;

        assert_int_equal(prober_update(p, &dev, &target_config), 0);
        t = prober_find(p, sysname);
        assert_non_null(t);
        t->next_due_usec = UINT64_MAX;
        assert_int_equal(prober_update(p, &dev, &target_config), 0);
        target_init(t);
        return t;
}

/* A recorded probe, as probe.c does it. */
static void target_record(ProbeTarget *t, uint64_t now, uint64_t ns) {
        hist_window_record(t->lat, now, ns);
        t->n_probes++;
}

/* ---- JSON helpers ---- */

static long long jint(json_t *o, const char *key) {
        json_t *v = json_object_get(o, key);

        if (!json_is_integer(v))
                fail_msg("%s: not an integer", key);
        return (long long) json_integer_value(v);
}

static json_t *window_of(json_t *device, const char *name) {
        json_t *w;
        size_t i;

        json_array_foreach(json_object_get(device, "windows"), i, w)
                if (streq(json_string_value(json_object_get(w, "window")), name))
                        return w;
        fail_msg("no window %s", name);
        return NULL;
}

static bool within(long long got, long long exact) {
        long long d = got > exact ? got - exact : exact - got;
        return d * HIST_REL_ERROR_DEN <= exact;
}

static VarlinkIdlInterface *idl;

/* Checks o against the output of method (or, method NULL, the parameters of
 * the type name) of io.blkmqd.Metrics. */
static void check_idl(const char *method, json_t *o) {
        const VarlinkIdlMember *m = varlink_idl_find_member(idl, VARLINK_IDL_MEMBER_METHOD, method);
        _cleanup_free_ char *path = NULL;

        assert_non_null(m);
        if (varlink_idl_validate(m->output, o, &path) != 0)
                fail_msg("%s reply does not match the IDL at '%s': %s", method, path,
                         json_dumps(o, JSON_COMPACT));
}

static void check_device_idl(json_t *device) {
        json_t *reply = json_pack("{s:[O]}", "devices", device);

        check_idl("Get", reply);
        json_decref(reply);
}

/* ---- pure functions ---- */

static void test_window_names(void **state) {
        assert_int_equal(api_metrics_window_from_string("1m"), HIST_WINDOW_1MIN);
        assert_int_equal(api_metrics_window_from_string("10m"), HIST_WINDOW_10MIN);
        assert_int_equal(api_metrics_window_from_string("total"), HIST_WINDOW_TOTAL);
        assert_int_equal(api_metrics_window_from_string("5m"), -EINVAL);
        assert_int_equal(api_metrics_window_from_string(""), -EINVAL);
        assert_int_equal(api_metrics_window_from_string("1M"), -EINVAL);
        assert_int_equal(api_metrics_window_from_string(NULL), -EINVAL);
}

static void test_metrics_empty(void **state) {
        ProbeTarget *t = target_new("sdb", NULL);
        json_t *o, *w, *a;

        t->note = strdup("device smaller than one probe");
        t->config.polled = false;
        o = probe_target_metrics_json(t, 5000000);
        assert_non_null(o);
        check_device_idl(o);

        assert_string_equal(json_string_value(json_object_get(o, "device")), "sdb");
        assert_null(json_object_get(o, "devnode"));
        assert_int_equal(jint(o, "probes"), 0);
        assert_int_equal(jint(o, "errors"), 0);
        assert_null(json_object_get(o, "lastErrno"));
        assert_string_equal(json_string_value(json_object_get(o, "note")), "device smaller than one probe");
        assert_int_equal(jint(o, "intervalUsec"), 1000000);
        assert_int_equal(jint(o, "sizeBytes"), 4096);
        assert_true(json_is_false(json_object_get(o, "polled")));
        assert_int_equal(json_array_size(json_object_get(o, "windows")), 3);
        for (size_t i = 0; i < 3; i++) {
                static const char *const names[] = { "1m", "10m", "total" };
                w = json_array_get(json_object_get(o, "windows"), i);
                assert_string_equal(json_string_value(json_object_get(w, "window")), names[i]);
                assert_int_equal(jint(w, "count"), 0);
                /* No percentiles without samples: absent, not null, not 0. */
                assert_int_equal(json_object_size(w), 2);
        }
        /* No stats before two samples of /sys/block/X/stat. */
        assert_null(json_object_get(o, "stats"));
        a = json_object_get(json_object_get(o, "alerts"), "read");
        assert_null(json_object_get(a, "thresholdUsec"));
        assert_true(json_is_false(json_object_get(a, "active")));
        assert_int_equal(jint(a, "episodes"), 0);
        json_decref(o);

        /* No histogram at all (lat NULL) reads as empty. */
        free(t->lat);
        t->lat = NULL;
        o = probe_target_metrics_json(t, 5000000);
        assert_non_null(o);
        assert_int_equal(jint(window_of(o, "total"), "count"), 0);
        json_decref(o);
        assert_int_equal(probe_target_histogram_json(t, "total", 5000000, &o), 0);
        assert_non_null(o);
        assert_int_equal(jint(o, "count"), 0);
        json_decref(o);
        probe_target_free(t);
}

static void test_metrics_windows(void **state) {
        ProbeTarget *t = target_new("nvme0n1", "/dev/nvme0n1");
        const uint64_t t0 = 1000ULL * 1000000; /* any monotonic time */
        json_t *o, *w;

        /* 1 µs, 2 µs, ... 1000 µs, all at t0. */
        for (uint64_t i = 1; i <= 1000; i++)
                target_record(t, t0, i * 1000);

        o = probe_target_metrics_json(t, t0 + 1000000);
        assert_non_null(o);
        check_device_idl(o);
        assert_string_equal(json_string_value(json_object_get(o, "devnode")), "/dev/nvme0n1");
        assert_int_equal(jint(o, "probes"), 1000);
        assert_true(json_is_true(json_object_get(o, "polled")));
        for (size_t i = 0; i < 3; i++) {
                w = json_array_get(json_object_get(o, "windows"), i);
                assert_int_equal(jint(w, "count"), 1000);
                assert_int_equal(jint(w, "minNs"), 1000); /* exact */
                assert_int_equal(jint(w, "maxNs"), 1000000);
                /* Nearest rank: p50 is the 500th sample, p99.9 the 999th. */
                assert_true(within(jint(w, "p50Ns"), 500000));
                assert_true(within(jint(w, "p90Ns"), 900000));
                assert_true(within(jint(w, "p99Ns"), 990000));
                assert_true(within(jint(w, "p999Ns"), 999000));
                assert_true(jint(w, "p50Ns") <= jint(w, "p90Ns") && jint(w, "p90Ns") <= jint(w, "p99Ns") &&
                            jint(w, "p99Ns") <= jint(w, "p999Ns") && jint(w, "p999Ns") <= jint(w, "maxNs"));
        }
        json_decref(o);

        /* 2 min later: out of the 1 min window, still in 10 min and total. */
        o = probe_target_metrics_json(t, t0 + 120ULL * 1000000);
        w = window_of(o, "1m");
        assert_int_equal(jint(w, "count"), 0);
        assert_null(json_object_get(w, "p50Ns"));
        assert_null(json_object_get(w, "maxNs"));
        assert_int_equal(jint(window_of(o, "10m"), "count"), 1000);
        assert_int_equal(jint(window_of(o, "total"), "count"), 1000);
        check_device_idl(o);
        json_decref(o);

        /* 11 min later: total only. */
        o = probe_target_metrics_json(t, t0 + 660ULL * 1000000);
        assert_int_equal(jint(window_of(o, "1m"), "count"), 0);
        assert_int_equal(jint(window_of(o, "10m"), "count"), 0);
        assert_int_equal(jint(window_of(o, "total"), "count"), 1000);
        json_decref(o);

        /* One sample: every percentile is that sample. */
        hist_window_reset(t->lat);
        target_record(t, t0, 123456);
        o = probe_target_metrics_json(t, t0);
        w = window_of(o, "1m");
        assert_int_equal(jint(w, "count"), 1);
        assert_int_equal(jint(w, "minNs"), 123456);
        assert_int_equal(jint(w, "p50Ns"), 123456);
        assert_int_equal(jint(w, "p999Ns"), 123456);
        assert_int_equal(jint(w, "maxNs"), 123456);
        json_decref(o);
        probe_target_free(t);
}

static void test_metrics_stats_alerts(void **state) {
        ProbeTarget *t = target_new("sda", "/dev/sda");
        json_t *o, *s, *a;
        AlertConfig c;

        t->stats = (ProbeStats) {
                .read_iops = 120.5,
                .write_iops = 0,
                .read_bytes_per_sec = 493568.4,
                .write_bytes_per_sec = 0,
                .read_await_usec = 1234.6,
                .write_await_usec = NAN, /* no writes */
                .util_percent = 12.25,
                .aqu_sz = 0.15,
                .in_flight = 3,
                .interval_usec = 1000000,
        };
        t->n_errors = 2;
        t->last_error = -EIO;
        t->polled_unsupported = true; /* asked for, fell back */

        alert_config_init(&c, 500);
        assert_int_equal(alert_init(&t->read_alert, &c), 0);
        t->config.alert_read_usec = 500;
        for (unsigned i = 0; i < 3; i++)
                alert_update(&t->read_alert, 900, 1000000 * (i + 1));
        assert_true(alert_is_active(&t->read_alert));

        o = probe_target_metrics_json(t, 10000000);
        assert_non_null(o);
        check_device_idl(o);
        assert_int_equal(jint(o, "errors"), 2);
        assert_int_equal(jint(o, "lastErrno"), EIO); /* positive */
        assert_null(json_object_get(o, "note"));
        assert_true(json_is_false(json_object_get(o, "polled")));

        s = json_object_get(o, "stats");
        assert_non_null(s);
        assert_int_equal(jint(s, "spanUsec"), 1000000);
        assert_true(json_is_real(json_object_get(s, "readIops")));
        assert_true(fabs(json_real_value(json_object_get(s, "readIops")) - 120.5) < 1e-9);
        assert_true(fabs(json_real_value(json_object_get(s, "writeIops"))) < 1e-9);
        assert_int_equal(jint(s, "readBytesPerSec"), 493568);
        assert_int_equal(jint(s, "writeBytesPerSec"), 0);
        assert_int_equal(jint(s, "readAwaitUsec"), 1235); /* rounded */
        assert_null(json_object_get(s, "writeAwaitUsec")); /* NaN: absent */
        assert_true(fabs(json_real_value(json_object_get(s, "utilPercent")) - 12.25) < 1e-9);
        assert_true(fabs(json_real_value(json_object_get(s, "aquSz")) - 0.15) < 1e-9);
        assert_int_equal(jint(s, "inFlight"), 3);

        a = json_object_get(json_object_get(o, "alerts"), "read");
        assert_int_equal(jint(a, "thresholdUsec"), 500);
        assert_true(json_is_true(json_object_get(a, "active")));
        assert_int_equal(jint(a, "episodes"), 1);
        a = json_object_get(json_object_get(o, "alerts"), "write");
        assert_null(json_object_get(a, "thresholdUsec"));
        assert_true(json_is_false(json_object_get(a, "active")));
        json_decref(o);

        /* Both awaits NaN, a non-finite float (a bug elsewhere) reads 0, not a missing field. */
        t->stats.read_await_usec = NAN;
        t->stats.util_percent = INFINITY;
        o = probe_target_metrics_json(t, 10000000);
        assert_non_null(o);
        s = json_object_get(o, "stats");
        assert_null(json_object_get(s, "readAwaitUsec"));
        assert_null(json_object_get(s, "writeAwaitUsec"));
        assert_true(json_real_value(json_object_get(s, "utilPercent")) == 0);
        check_device_idl(o);
        json_decref(o);
        probe_target_free(t);
}

static void test_histogram(void **state) {
        ProbeTarget *t = target_new("nvme1n1", "/dev/nvme1n1");
        const uint64_t t0 = 5000ULL * 1000000;
        json_t *o, *b, *l;
        long long total = 0, prev_upper = 0;
        size_t i;

        /* 3 × 100 µs (log2 slot 6: [64, 128) µs), 5 × 1.5 ms (slot 10:
         * [1024, 2048)), 2 × 900 ns (slot 0: [0, 2) µs). */
        for (i = 0; i < 3; i++)
                target_record(t, t0, 100000);
        for (i = 0; i < 5; i++)
                target_record(t, t0, 1500000);
        for (i = 0; i < 2; i++)
                target_record(t, t0, 900);

        assert_int_equal(probe_target_histogram_json(t, NULL, t0 + 1000000, &o), 0); /* default window: 10m */
        assert_non_null(o);
        check_idl("Histogram", o);
        assert_string_equal(json_string_value(json_object_get(o, "device")), "nvme1n1");
        assert_string_equal(json_string_value(json_object_get(o, "window")), "10m");
        assert_int_equal(jint(o, "count"), 10);
        assert_int_equal(jint(o, "sumNs"), 3 * 100000 + 5 * 1500000 + 2 * 900);

        /* Non-empty buckets only, ascending, each containing its value. */
        b = json_object_get(o, "buckets");
        assert_int_equal(json_array_size(b), 3);
        json_array_foreach(b, i, l) {
                static const long long values[] = { 900, 100000, 1500000 }, counts[] = { 2, 3, 5 };
                assert_true(jint(l, "lowerNs") <= values[i] && values[i] < jint(l, "upperNs"));
                assert_true(jint(l, "lowerNs") >= prev_upper);
                assert_true((jint(l, "upperNs") - jint(l, "lowerNs")) * 16 <= jint(l, "lowerNs"));
                assert_int_equal(jint(l, "count"), counts[i]);
                prev_upper = jint(l, "upperNs");
                total += jint(l, "count");
        }
        assert_int_equal(total, 10);

        /* log2 µs slots up to the last non-empty one. */
        l = json_object_get(o, "log2Usec");
        assert_int_equal(json_array_size(l), 11);
        for (i = 0; i < 11; i++) {
                long long want = i == 0 ? 2 : i == 6 ? 3 : i == 10 ? 5 : 0;
                assert_int_equal(json_integer_value(json_array_get(l, i)), want);
        }
        json_decref(o);

        /* 2 min later the 1 min window is empty: no sum, no buckets, no slots;
         * total still has them all. */
        assert_int_equal(probe_target_histogram_json(t, "1m", t0 + 120ULL * 1000000, &o), 0);
        check_idl("Histogram", o);
        assert_int_equal(jint(o, "count"), 0);
        assert_null(json_object_get(o, "sumNs"));
        assert_int_equal(json_array_size(json_object_get(o, "buckets")), 0);
        assert_int_equal(json_array_size(json_object_get(o, "log2Usec")), 0);
        json_decref(o);
        assert_int_equal(probe_target_histogram_json(t, "total", t0 + 120ULL * 1000000, &o), 0);
        assert_string_equal(json_string_value(json_object_get(o, "window")), "total");
        assert_int_equal(jint(o, "count"), 10);
        json_decref(o);

        assert_int_equal(probe_target_histogram_json(t, "1h", t0, &o), -EINVAL);

        /* Samples past the histogram's range (~18 min) still count; a sum
         * past INT64_MAX is left out rather than wrong. */
        hist_window_reset(t->lat);
        for (i = 0; i < 3; i++)
                target_record(t, t0, UINT64_C(4) << 60);
        assert_int_equal(probe_target_histogram_json(t, "total", t0, &o), 0);
        check_idl("Histogram", o);
        assert_int_equal(jint(o, "count"), 3);
        assert_null(json_object_get(o, "sumNs"));
        /* In the last bucket, below 2^40 ns = 1.1e9 µs: slot 30. */
        assert_int_equal(json_array_size(json_object_get(o, "log2Usec")), 31);
        assert_int_equal(json_integer_value(json_array_get(json_object_get(o, "log2Usec"), 30)), 3);
        json_decref(o);
        probe_target_free(t);
}

/* ---- over varlink ---- */

typedef struct Fixture {
        sd_event *e;
        VarlinkServer *s;
        ApiMetrics *api;
        Prober *prober;
        VarlinkPeer peer;
} Fixture;


static void connect_client(Fixture *f) {
        int p[2];

        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p), 0);
        assert_int_equal(varlink_server_add_connection(f->s, p[1]), 0);
        f->peer.fd = p[0];
        f->peer.size = 0;
}

static int setup(void **state) {
        Fixture *f = calloc(1, sizeof *f);
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        ProbeTarget *t;

        assert_non_null(f);
        assert_int_equal(sd_event_new(&f->e), 0);
        f->peer.e = f->e;
        assert_int_equal(varlink_server_new(&f->s, f->e, "blkmqd project", "blkmqd", "9.9", "https://example.org"), 0);
        assert_int_equal(prober_new(&f->prober, f->e, NULL), 0);
        t = prober_add(f->prober, "nvme0n1", "/dev/nvme0n1");
        for (uint64_t i = 1; i <= 100; i++)
                target_record(t, now, i * 10000); /* 10 µs .. 1 ms */
        t->stats = (ProbeStats) { .read_iops = 2000, .read_bytes_per_sec = 8192000, .read_await_usec = 95,
                                  .write_await_usec = NAN, .util_percent = 35.5, .aqu_sz = 0.2,
                                  .interval_usec = 1000000 };
        t = prober_add(f->prober, "sda", "/dev/sda");
        t->note = strdup("nothing written yet");
        assert_int_equal(api_metrics_new(&f->api, f->prober, f->s), 0);
        connect_client(f);
        *state = f;
        return 0;
}

static int teardown(void **state) {
        Fixture *f = *state;

        if (f->peer.fd >= 0)
                close(f->peer.fd);
        f->api = api_metrics_free(f->api);
        varlink_server_free(f->s);
        prober_free(f->prober);
        sd_event_unref(f->e);
        free(f->peer.buf);
        free(f);
        return 0;
}

static void pump(Fixture *f) {
        peer_pump(f->e);
}

static void send_msg(Fixture *f, const char *text) {
        peer_send(&f->peer, text);
}

/* The next message, or NULL at EOF; with wait false, NULL also when none
 * is there once the loop settled. */
static json_t *next_message_full(Fixture *f, bool wait) {
        return peer_next(&f->peer, wait);
}


static json_t *next_message(Fixture *f) {
        return next_message_full(f, true);
}

/* A reply's parameters (new ref); continues: whether "continues" must be set. */
static json_t *expect_reply(Fixture *f, const char *method, bool continues) {
        json_t *m = next_message(f), *p;

        assert_non_null(m);
        if (json_object_get(m, "error"))
                fail_msg("unexpected error reply %s", json_dumps(m, JSON_COMPACT));
        assert_int_equal(json_is_true(json_object_get(m, "continues")), continues);
        p = json_object_get(m, "parameters");
        assert_true(json_is_object(p)); /* never null */
        check_idl(method, p);
        json_incref(p);
        json_decref(m);
        return p;
}

static void expect_error(Fixture *f, const char *name, const char *key, const char *value) {
        json_t *m = next_message(f), *p;

        assert_non_null(m);
        assert_string_equal(json_string_value(json_object_get(m, "error")), name);
        p = json_object_get(m, "parameters");
        assert_true(json_is_object(p));
        if (key)
                assert_string_equal(json_string_value(json_object_get(p, key)), value);
        json_decref(m);
}

/* The next Monitor reply, of event EVENT: its parameters (the caller
 * json_decref()s them). */
static json_t *expect_event(Fixture *f, const char *event) {
        json_t *p = expect_reply(f, "Monitor", true);

        assert_string_equal(json_string_value(json_object_get(p, "event")), event);
        return p;
}

/* Metrics.Monitor with "more": its first reply is "subscribed", alone. */
static void monitor_subscribe(Fixture *f) {
        json_t *p;

        send_msg(f, "{\"method\":\"io.blkmqd.Metrics.Monitor\",\"more\":true}");
        p = expect_event(f, "subscribed");
        assert_int_equal(json_object_size(p), 1);
        json_decref(p);
}

static void test_get(Fixture *f) {
        json_t *p, *d;

        send_msg(f, "{\"method\":\"io.blkmqd.Metrics.Get\"}");
        p = expect_reply(f, "Get", false);
        assert_int_equal(json_array_size(json_object_get(p, "devices")), 2);
        d = json_array_get(json_object_get(p, "devices"), 0);
        assert_string_equal(json_string_value(json_object_get(d, "device")), "nvme0n1");
        assert_int_equal(jint(window_of(d, "1m"), "count"), 100);
        assert_true(within(jint(window_of(d, "1m"), "p99Ns"), 990000));
        assert_int_equal(jint(json_object_get(d, "stats"), "readAwaitUsec"), 95);
        d = json_array_get(json_object_get(p, "devices"), 1);
        assert_string_equal(json_string_value(json_object_get(d, "note")), "nothing written yet");
        json_decref(p);

        /* By name and by /dev path. */
        send_msg(f, "{\"method\":\"io.blkmqd.Metrics.Get\",\"parameters\":{\"device\":\"sda\"}}");
        p = expect_reply(f, "Get", false);
        assert_int_equal(json_array_size(json_object_get(p, "devices")), 1);
        json_decref(p);
        send_msg(f, "{\"method\":\"io.blkmqd.Metrics.Get\",\"parameters\":{\"device\":\"/dev/nvme0n1\"}}");
        p = expect_reply(f, "Get", false);
        d = json_array_get(json_object_get(p, "devices"), 0);
        assert_string_equal(json_string_value(json_object_get(d, "device")), "nvme0n1");
        json_decref(p);

        send_msg(f, "{\"method\":\"io.blkmqd.Metrics.Get\",\"parameters\":{\"device\":\"sdz\"}}");
        expect_error(f, "io.blkmqd.Metrics.NoSuchDevice", "device", "sdz");
        send_msg(f, "{\"method\":\"io.blkmqd.Metrics.Get\",\"parameters\":{\"device\":\"/dev/sdz\"}}");
        expect_error(f, "io.blkmqd.Metrics.NoSuchDevice", "device", "/dev/sdz");
        send_msg(f, "{\"method\":\"io.blkmqd.Metrics.Get\",\"parameters\":{\"device\":7}}");
        expect_error(f, VARLINK_ERROR_INVALID_PARAMETER, "parameter", "device");
}

static void test_get_calls(void **state) {
        test_get(*state);
}

static void test_get_none(void **state) {
        Fixture *f = *state;
        json_t *p;

        prober_remove(f->prober, "nvme0n1");
        prober_remove(f->prober, "sda");
        send_msg(f, "{\"method\":\"io.blkmqd.Metrics.Get\"}");
        p = expect_reply(f, "Get", false);
        assert_true(json_is_array(json_object_get(p, "devices")));
        assert_int_equal(json_array_size(json_object_get(p, "devices")), 0);
        json_decref(p);
}

static void test_histogram_calls(void **state) {
        Fixture *f = *state;
        json_t *p;

        send_msg(f, "{\"method\":\"io.blkmqd.Metrics.Histogram\",\"parameters\":{\"device\":\"nvme0n1\"}}");
        p = expect_reply(f, "Histogram", false);
        assert_string_equal(json_string_value(json_object_get(p, "window")), "10m");
        assert_int_equal(jint(p, "count"), 100);
        assert_int_equal(jint(p, "sumNs"), 10000LL * 100 * 101 / 2);
        /* 10 µs .. 1 ms: slots 3 ([8, 16) µs) to 9 ([512, 1024) µs). */
        assert_int_equal(json_array_size(json_object_get(p, "log2Usec")), 10);
        assert_int_equal(json_integer_value(json_array_get(json_object_get(p, "log2Usec"), 2)), 0);
        assert_true(json_integer_value(json_array_get(json_object_get(p, "log2Usec"), 3)) > 0);
        json_decref(p);

        send_msg(f, "{\"method\":\"io.blkmqd.Metrics.Histogram\",\"parameters\":{\"device\":\"sda\","
                    "\"window\":\"10m\"}}");
        p = expect_reply(f, "Histogram", false);
        assert_string_equal(json_string_value(json_object_get(p, "window")), "10m");
        assert_int_equal(jint(p, "count"), 0);
        json_decref(p);

        send_msg(f, "{\"method\":\"io.blkmqd.Metrics.Histogram\",\"parameters\":{\"device\":\"nvme0n1\","
                    "\"window\":\"oneMinute\"}}");
        expect_error(f, VARLINK_ERROR_INVALID_PARAMETER, "parameter", "window");
        send_msg(f, "{\"method\":\"io.blkmqd.Metrics.Histogram\",\"parameters\":{\"device\":\"loop7\"}}");
        expect_error(f, "io.blkmqd.Metrics.NoSuchDevice", "device", "loop7");
        send_msg(f, "{\"method\":\"io.blkmqd.Metrics.Histogram\",\"parameters\":{}}");
        expect_error(f, VARLINK_ERROR_INVALID_PARAMETER, "parameter", "device");
}

static void test_monitor(void **state) {
        Fixture *f = *state;
        ProbeTarget *nvme = prober_find(f->prober, "nvme0n1"), *sda = prober_find(f->prober, "sda");
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        AlertConfig c;
        json_t *p;

        send_msg(f, "{\"method\":\"io.blkmqd.Metrics.Monitor\"}");
        expect_error(f, VARLINK_ERROR_EXPECTED_MORE, NULL, NULL);

        /* Samples before anyone listens set the baseline. */
        target_record(nvme, now, 55555);
        api_metrics_probe_event(f->prober, PROBE_EVENT_SAMPLE, nvme, NULL, f->api);

        monitor_subscribe(f);

        /* The latency of exactly the probe that completed. */
        target_record(nvme, now, 77777);
        api_metrics_probe_event(f->prober, PROBE_EVENT_SAMPLE, nvme, NULL, f->api);
        p = expect_event(f, "sample");
        assert_string_equal(json_string_value(json_object_get(p, "device")), "nvme0n1");
        assert_int_equal(jint(p, "latencyNs"), 77777);
        assert_null(json_object_get(p, "detail"));
        json_decref(p);

        /* Within the second: no sample event for nvme0n1, but for another
         * device (its first sample: exact too), and alerts always. */
        target_record(nvme, now, 88888);
        api_metrics_probe_event(f->prober, PROBE_EVENT_SAMPLE, nvme, NULL, f->api);
        target_record(sda, now, 4242);
        api_metrics_probe_event(f->prober, PROBE_EVENT_SAMPLE, sda, NULL, f->api);
        p = expect_event(f, "sample");
        assert_string_equal(json_string_value(json_object_get(p, "device")), "sda");
        assert_int_equal(jint(p, "latencyNs"), 4242);
        json_decref(p);

        alert_config_init(&c, 50);
        assert_int_equal(alert_init(&nvme->read_alert, &c), 0);
        nvme->config.alert_read_usec = 50;
        for (unsigned i = 0; i < 3; i++)
                alert_update(&nvme->read_alert, 88.888, now + i);
        api_metrics_probe_event(f->prober, PROBE_EVENT_ALERT_RAISED, nvme, "read", f->api);
        p = expect_event(f, "alertRaised");
        assert_string_equal(json_string_value(json_object_get(p, "device")), "nvme0n1");
        assert_string_equal(json_string_value(json_object_get(p, "detail")), "read");
        assert_int_equal(jint(p, "latencyNs"), 88888); /* the value evaluated */
        json_decref(p);
        api_metrics_probe_event(f->prober, PROBE_EVENT_ALERT_CLEARED, nvme, "write", f->api);
        p = expect_event(f, "alertCleared");
        assert_string_equal(json_string_value(json_object_get(p, "detail")), "write");
        assert_null(json_object_get(p, "latencyNs")); /* the write alert never evaluated */
        json_decref(p);
        assert_null(next_message_full(f, false)); /* the throttled sample stays away */

        /* A second later: the next one goes, with its own latency. A failed
         * probe (no new sample, one more error) says why. */
        usleep(1000 * 1000 + 10000);
        target_record(nvme, now, 99999);
        api_metrics_probe_event(f->prober, PROBE_EVENT_SAMPLE, nvme, NULL, f->api);
        p = expect_reply(f, "Monitor", true);
        assert_int_equal(jint(p, "latencyNs"), 99999);
        json_decref(p);
        usleep(1000 * 1000 + 10000);
        nvme->n_errors++;
        nvme->last_error = -EIO;
        api_metrics_probe_event(f->prober, PROBE_EVENT_SAMPLE, nvme, NULL, f->api);
        p = expect_event(f, "sample");
        assert_null(json_object_get(p, "latencyNs"));
        assert_string_equal(json_string_value(json_object_get(p, "detail")), strerror(EIO));
        json_decref(p);

        /* A reset histogram (new settings): its first sample is exact again. */
        usleep(1000 * 1000 + 10000);
        hist_window_reset(nvme->lat);
        target_record(nvme, now, 31337);
        api_metrics_probe_event(f->prober, PROBE_EVENT_SAMPLE, nvme, NULL, f->api);
        p = expect_reply(f, "Monitor", true);
        assert_int_equal(jint(p, "latencyNs"), 31337);
        json_decref(p);

        /* The client goes: the monitor is dropped, events go nowhere. */
        close(f->peer.fd);
        f->peer.fd = -EBADF;
        pump(f);
        assert_int_equal(varlink_server_n_connections(f->s), 0);
        api_metrics_probe_event(f->prober, PROBE_EVENT_ALERT_RAISED, nvme, "read", f->api);
        pump(f);

        /* A new client gets a fresh stream. */
        connect_client(f);
        monitor_subscribe(f);
        api_metrics_probe_event(f->prober, PROBE_EVENT_ALERT_CLEARED, nvme, "read", f->api);
        p = expect_event(f, "alertCleared");
        json_decref(p);
}

/* Two monitors, one freed with the interface while still open. */
static void test_monitor_free(void **state) {
        Fixture *f = *state;

        monitor_subscribe(f);
        f->api = api_metrics_free(f->api);
        pump(f);
        /* The connection stays (its call is simply never answered again). */
        assert_int_equal(varlink_server_n_connections(f->s), 1);
}

/* ---- blkmqctl against the interface ---- */

static const char fake_manager_idl[] =
        "interface io.blkmqd.Manager\n"
        "type DeviceSummary (device: string, scheduler: ?string)\n"
        "method ListDevices() -> (device: ?DeviceSummary)\n";

static int fake_list_devices(VarlinkCall *call, json_t *parameters, void *userdata) {
        varlink_call_notify(call, json_pack("{s:{s:s, s:s}}", "device", "device", "nvme0n1", "scheduler", "none"));
        return varlink_call_reply(call, json_pack("{s:{s:s, s:s}}", "device", "device", "sda", "scheduler",
                                                  "mq-deadline"));
}

static const VarlinkMethod fake_manager_methods[] = {
        { "ListDevices", fake_list_devices, VARLINK_METHOD_REQUIRES_MORE },
};

/* build/tests/unit/test-api-metrics → build/src/blkmqctl */
static char *blkmqctl_path(void) {
        char exe[PATH_MAX], *s, *path = NULL;
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);

        if (n <= 0)
                return NULL;
        exe[n] = 0;
        for (int i = 0; i < 3; i++) {
                s = strrchr(exe, '/');
                if (!s)
                        return NULL;
                *s = 0;
        }
        if (asprintf(&path, "%s/src/blkmqctl", exe) < 0)
                return NULL;
        if (access(path, X_OK) < 0) {
                free(path);
                return NULL;
        }
        return path;
}

/* Runs blkmqctl with args while serving the fixture's loop; returns its exit
 * status, *ret_out its standard output. */
static int run_ctl(Fixture *f, const char *address, char **ret_out, ...) {
        _cleanup_free_ char *ctl = blkmqctl_path(), *addr = NULL;
        char *argv[16] = { ctl }, *out = NULL;
        size_t n = 1, size = 0;
        int p[2], status;
        va_list ap;
        pid_t pid;

        assert_non_null(ctl);
        assert_true(asprintf(&addr, "--address=%s", address) > 0);
        argv[n++] = addr;
        va_start(ap, ret_out);
        for (char *a; (a = va_arg(ap, char *)) && n < ELEMENTSOF(argv) - 1;)
                argv[n++] = a;
        va_end(ap);
        argv[n] = NULL;

        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                dup2(p[1], STDOUT_FILENO);
                setenv("COLUMNS", "200", 1);
                setenv("LC_ALL", "C", 1);
                execv(ctl, argv);
                _exit(127);
        }
        close(p[1]);
        assert_int_equal(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
        for (;;) {
                char chunk[4096];
                ssize_t k;

                assert_true(sd_event_run(f->e, 10000) >= 0);
                while ((k = read(p[0], chunk, sizeof chunk)) > 0) {
                        out = realloc(out, size + k + 1);
                        assert_non_null(out);
                        memcpy(out + size, chunk, k);
                        size += k;
                        out[size] = 0;
                }
                if (k == 0 && waitpid(pid, &status, WNOHANG) == pid)
                        break;
        }
        close(p[0]);
        *ret_out = out ? out : strdup("");
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void test_blkmqctl(void **state) {
        Fixture *f = *state;
        _cleanup_free_ char *ctl = blkmqctl_path(), *dir = strdup("/tmp/test-api-metrics.XXXXXX"), *sock = NULL;
        char *out;
        json_t *j;
        int r;

        if (!ctl) {
                skip();
                return;
        }
        assert_non_null(mkdtemp(dir));
        assert_true(asprintf(&sock, "%s/sock", dir) > 0);
        assert_int_equal(varlink_server_add_interface(f->s, fake_manager_idl, fake_manager_methods, 1, NULL), 0);
        assert_int_equal(varlink_server_listen_address(f->s, sock, 0600), 0);

        /* 100 samples of 10 µs .. 1 ms: slots 8 µs .. 512 µs; 1 of 50 is
         * less than a star (BCC rounds down). */
        r = run_ctl(f, sock, &out, "latency", "nvme0n1", NULL);
        assert_int_equal(r, 0);
        assert_non_null(strstr(out, "nvme0n1: 100 probe reads in the last 10 minutes (4.0 KiB every 1.000s, polled)\n"));
        assert_non_null(strstr(out, "     usecs               : count     distribution\n"));
        assert_null(strstr(out, "   4 -> 7 ")); /* nothing before the first non-empty slot */
        assert_non_null(strstr(out, "     usecs               : count     distribution\n"
                                    "         8 -> 15         : 1        |                                        |\n"
                                    "        16 -> 31         : 2        |*                                       |\n"));
        assert_non_null(strstr(out, "       128 -> 255        : 13       |**********                              |\n"));
        assert_non_null(strstr(out, "       512 -> 1023       : 50       |****************************************|\n"
                                    "\n"
                                    "p50 500us  p90 901us  p99 999us  p99.9 1.00ms  max 1.00ms\n"));
        assert_null(strstr(out, "1024 -> ")); /* nor after the last */
        free(out);

        r = run_ctl(f, sock, &out, "latency", "--window=1m", "--no-legend", "/dev/nvme0n1", NULL);
        assert_int_equal(r, 0);
        assert_true(strncmp(out, "         8 -> 15  ", 18) == 0); /* no title, no header */
        assert_non_null(strstr(out, "\np50 500us  p90 901us"));
        free(out);

        r = run_ctl(f, sock, &out, "latency", "--window=total", "--json", "nvme0n1", NULL);
        assert_int_equal(r, 0);
        j = json_loads(out, 0, NULL);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_object_get(json_object_get(j, "histogram"), "window")), "total");
        assert_string_equal(json_string_value(json_object_get(json_object_get(j, "metrics"), "device")), "nvme0n1");
        json_decref(j);
        free(out);

        r = run_ctl(f, sock, &out, "latency", "sda", NULL);
        assert_int_equal(r, 0);
        assert_non_null(strstr(out, "sda: 0 probe reads in the last 10 minutes"));
        assert_non_null(strstr(out, "Probes paused: nothing written yet\n"));
        free(out);

        r = run_ctl(f, sock, &out, "latency", "sdq", NULL);
        assert_int_equal(r, 3);
        free(out);
        r = run_ctl(f, sock, &out, "latency", "--window=2m", "nvme0n1", NULL);
        assert_int_equal(r, 1);
        free(out);
        r = run_ctl(f, sock, &out, "status", "--window=1m", NULL);
        assert_int_equal(r, 1);
        free(out);
        r = run_ctl(f, sock, &out, "top", "--count=0", NULL);
        assert_int_equal(r, 1);
        free(out);

        r = run_ctl(f, sock, &out, "top", "--count=2", "--interval=0.1", NULL);
        assert_int_equal(r, 0);
        assert_non_null(strstr(out, ": 2 probed devices, every 0.100s\n\n"));
        assert_non_null(strstr(out, "DEVICE   SCHED           r/s  w/s   rkB/s  wkB/s  r_await  w_await  aqu-sz  %util  "
                                    "p99(1m)  ALERT\n"
                                    "nvme0n1  none         2000.0  0.0  8000.0    0.0     0.10        -    0.20   35.5  "
                                    "  999us  -\n"
                                    "sda      mq-deadline       -    -       -      -        -        -       -      -  "
                                    "      -  -\n"));
        /* Not a terminal: no escape sequences, blocks separated by a blank line. */
        assert_null(strchr(out, '\033'));
        assert_non_null(strstr(out, "\n\n"));
        free(out);

        r = run_ctl(f, sock, &out, "top", "--count=2", "--interval=0.1", "--json", NULL);
        assert_int_equal(r, 0);
        {
                char *nl = strchr(out, '\n');
                assert_non_null(nl);
                *nl = 0;
                j = json_loads(out, 0, NULL);
                assert_non_null(j);
                assert_int_equal(json_array_size(json_object_get(j, "devices")), 2);
                assert_string_equal(json_string_value(json_object_get(
                                            json_array_get(json_object_get(j, "devices"), 1), "scheduler")),
                                    "mq-deadline");
                json_decref(j);
                assert_non_null(strchr(nl + 1, '\n')); /* a second line */
        }
        free(out);

        unlink(sock);
        rmdir(dir);
}

/* The IDL as the server serves it (GetInterfaceDescription), for check_idl(). */
static int group_setup(void **state) {
        Fixture f = { .peer.fd = -EBADF };
        ApiMetrics *a = NULL;
        json_t *p;
        int s[2];

        assert_int_equal(sd_event_new(&f.e), 0);
        f.peer.e = f.e;
        assert_int_equal(varlink_server_new(&f.s, f.e, "t", "t", "0", "t"), 0);
        assert_int_equal(prober_new(&f.prober, f.e, NULL), 0);
        assert_int_equal(api_metrics_new(&a, f.prober, f.s), 0);
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s), 0);
        assert_int_equal(varlink_server_add_connection(f.s, s[1]), 0);
        f.peer.fd = s[0];
        send_msg(&f, "{\"method\":\"org.varlink.service.GetInterfaceDescription\","
                     "\"parameters\":{\"interface\":\"io.blkmqd.Metrics\"}}");
        p = next_message(&f);
        assert_non_null(p);
        assert_int_equal(varlink_idl_parse(json_string_value(json_object_get(json_object_get(p, "parameters"),
                                                                             "description")),
                                           &idl, NULL),
                         0);
        assert_string_equal(idl->name, "io.blkmqd.Metrics");
        json_decref(p);
        close(f.peer.fd);
        api_metrics_free(a);
        prober_free(f.prober);
        varlink_server_free(f.s);
        sd_event_unref(f.e);
        free(f.peer.buf);
        return 0;
}

static int group_teardown(void **state) {
        idl = varlink_idl_free(idl);
        return 0;
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_window_names),
                cmocka_unit_test(test_metrics_empty),
                cmocka_unit_test(test_metrics_windows),
                cmocka_unit_test(test_metrics_stats_alerts),
                cmocka_unit_test(test_histogram),
                cmocka_unit_test_setup_teardown(test_get_calls, setup, teardown),
                cmocka_unit_test_setup_teardown(test_get_none, setup, teardown),
                cmocka_unit_test_setup_teardown(test_histogram_calls, setup, teardown),
                cmocka_unit_test_setup_teardown(test_monitor, setup, teardown),
                cmocka_unit_test_setup_teardown(test_monitor_free, setup, teardown),
                cmocka_unit_test_setup_teardown(test_blkmqctl, setup, teardown),
        };

        signal(SIGPIPE, SIG_IGN);
        log_set_max_level(LOG_WARNING);
        return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
