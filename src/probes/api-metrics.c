/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api-metrics.h"
#include "varlink-subscribers.h"
#include "io.blkmqd.Metrics.varlink.h"
#include "log.h"
#include "util.h"

#define SAMPLE_EVENT_INTERVAL_USEC (UINT64_C(1) * 1000000) /* Monitor: sample events per device */

/* What the previous sample event of a device saw, to tell the latency of the
 * probe that just completed and to throttle sample events. */
typedef struct SampleState {
        struct SampleState *next;
        char *sysname;
        bool seen; /* count, sum and errors hold the previous event's */
        uint64_t count, sum; /* t->lat->total: count and sum (low 64 bits, differences are exact) */
        uint64_t errors;
        uint64_t sent_usec; /* last sample event sent; 0: none yet */
} SampleState;

struct ApiMetrics {
        Prober *prober;
        VarlinkSubscribers monitors;
        SampleState *samples;
};

/* ---- JSON building, pure ---- */

static json_t *json_u64(uint64_t v) {
        return json_integer(v > (uint64_t) INT64_MAX ? INT64_MAX : (json_int_t) v);
}

/* A float field that cannot be null: not finite (should not happen) reads 0. */
static json_t *json_finite(double v) {
        return json_real(isfinite(v) ? v : 0.0);
}

/* Rounded to an integer; NULL (the field is left out) when not finite. */
static json_t *json_round(double v) {
        if (!isfinite(v))
                return NULL;
        if (v <= 0)
                return json_integer(0);
        if (v >= 9.2e18)
                return json_integer(INT64_MAX);
        return json_integer((json_int_t) (v + 0.5));
}

/* Sets key to v (stolen); a NULL v leaves the key out. Returns -ENOMEM if
 * the object could not take it. */
static int set_optional(json_t *o, const char *key, json_t *v) {
        if (!v)
                return 0;
        return json_object_set_new(o, key, v) < 0 ? -ENOMEM : 0;
}

/* Sets key to v (stolen); a NULL v is out of memory. */
static int set(json_t *o, const char *key, json_t *v) {
        if (!v)
                return -ENOMEM;
        return json_object_set_new(o, key, v) < 0 ? -ENOMEM : 0;
}

int api_metrics_window_from_string(const char *s) {
        if (!s)
                return -EINVAL;
        for (int i = 0; i < _HIST_WINDOW_SPAN_MAX; i++)
                if (streq(s, hist_window_span_to_string(i)))
                        return i;
        return -EINVAL;
}

static void target_window(const ProbeTarget *t, HistWindowSpan span, uint64_t now_usec, Hist *ret) {
        if (t->lat)
                hist_window_get(t->lat, span, now_usec, ret);
        else
                hist_reset(ret);
}

json_t *api_metrics_window_json(const char *name, const Hist *h) {
        static const struct {
                const char *key;
                double p;
        } percentiles[] = {
                { "p50Ns", 50 },
                { "p90Ns", 90 },
                { "p99Ns", 99 },
                { "p999Ns", 99.9 },
        };
        json_t *o = json_object();
        int r = 0;

        if (!o)
                return NULL;
        r |= set(o, "window", json_string(name));
        r |= set(o, "count", json_u64(h->count));
        if (h->count > 0) {
                r |= set(o, "minNs", json_u64(h->min));
                for (size_t i = 0; i < ELEMENTSOF(percentiles); i++) {
                        uint64_t v;
                        if (hist_percentile(h, percentiles[i].p, &v) >= 0)
                                r |= set(o, percentiles[i].key, json_u64(v));
                }
                r |= set(o, "maxNs", json_u64(h->max));
        }
        if (r < 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

static json_t *stats_json(const ProbeStats *s) {
        json_t *o = json_object();
        int r = 0;

        if (!o)
                return NULL;
        r |= set(o, "spanUsec", json_u64(s->interval_usec));
        r |= set(o, "readIops", json_finite(s->read_iops));
        r |= set(o, "writeIops", json_finite(s->write_iops));
        r |= set(o, "readBytesPerSec", json_round(isfinite(s->read_bytes_per_sec) ? s->read_bytes_per_sec : 0));
        r |= set(o, "writeBytesPerSec", json_round(isfinite(s->write_bytes_per_sec) ? s->write_bytes_per_sec : 0));
        r |= set_optional(o, "readAwaitUsec", json_round(s->read_await_usec));
        r |= set_optional(o, "writeAwaitUsec", json_round(s->write_await_usec));
        r |= set(o, "utilPercent", json_finite(s->util_percent));
        r |= set(o, "aquSz", json_finite(s->aqu_sz));
        r |= set(o, "inFlight", json_integer(s->in_flight));
        if (r < 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

static json_t *alert_json(const Alert *a, uint64_t threshold_usec, uint64_t episodes) {
        json_t *o = json_object();
        int r = 0;

        if (!o)
                return NULL;
        if (threshold_usec > 0)
                r |= set(o, "thresholdUsec", json_u64(threshold_usec));
        r |= set(o, "active", json_boolean(threshold_usec > 0 && alert_is_active(a)));
        r |= set(o, "episodes", json_u64(episodes));
        if (r < 0) {
                json_decref(o);
                return NULL;
        }
        return o;
}

json_t *probe_target_metrics_json(const ProbeTarget *t, uint64_t now_usec) {
        json_t *o = json_object(), *windows = json_array(), *alerts = json_object();
        Hist h;
        int r = 0;

        if (!o || !windows || !alerts)
                goto fail;
        for (int span = 0; span < _HIST_WINDOW_SPAN_MAX; span++) {
                target_window(t, span, now_usec, &h);
                if (json_array_append_new(windows, api_metrics_window_json(hist_window_span_to_string(span), &h)) < 0)
                        goto fail;
        }
        r |= set(alerts, "read", alert_json(&t->read_alert, t->config.alert_read_usec, t->read_alert.episodes));
        r |= set(alerts, "write", alert_json(&t->write_alert, t->config.alert_write_usec, t->write_alert.episodes));

        r |= set(o, "device", json_string(t->sysname));
        if (t->devnode)
                r |= set(o, "devnode", json_string(t->devnode));
        r |= set(o, "probes", json_u64(t->n_probes));
        r |= set(o, "errors", json_u64(t->n_errors));
        if (t->last_error != 0)
                r |= set(o, "lastErrno", json_integer(t->last_error < 0 ? -(json_int_t) t->last_error : t->last_error));
        if (t->note && *t->note)
                r |= set(o, "note", json_string(t->note));
        r |= set(o, "intervalUsec", json_u64(t->config.interval_usec));
        r |= set(o, "sizeBytes", json_u64(t->config.size));
        r |= set(o, "polled", json_boolean(t->config.polled && !t->polled_unsupported));
        r |= set(o, "windows", windows);
        windows = NULL;
        if (t->stats.interval_usec > 0)
                r |= set(o, "stats", stats_json(&t->stats));
        r |= set(o, "alerts", alerts);
        alerts = NULL;
        if (r < 0)
                goto fail;
        return o;

fail:
        json_decref(o);
        json_decref(windows);
        json_decref(alerts);
        return NULL;
}

int probe_target_histogram_json(const ProbeTarget *t, const char *window, uint64_t now_usec, json_t **ret) {
        json_t *o = NULL, *buckets = NULL, *log2 = NULL;
        uint64_t slots[HIST_LOG2_USEC_SLOTS];
        HistBucket b;
        size_t it = 0, n;
        int span, r = 0;
        Hist h;

        span = window ? api_metrics_window_from_string(window) : API_METRICS_WINDOW_DEFAULT;
        if (span < 0)
                return -EINVAL;
        target_window(t, span, now_usec, &h);

        o = json_object();
        buckets = json_array();
        log2 = json_array();
        if (!o || !buckets || !log2)
                goto fail;
        while (hist_bucket_next(&h, &it, &b))
                if (json_array_append_new(buckets, json_pack("{s:o, s:o, s:o}", "lowerNs", json_u64(b.lower),
                                                             "upperNs", json_u64(b.upper), "count",
                                                             json_u64(b.count))) < 0)
                        goto fail;
        n = hist_log2_usec(&h, false, slots);
        for (size_t k = 0; k < n; k++)
                if (json_array_append_new(log2, json_u64(slots[k])) < 0)
                        goto fail;

        r |= set(o, "device", json_string(t->sysname));
        r |= set(o, "window", json_string(hist_window_span_to_string(span)));
        r |= set(o, "count", json_u64(h.count));
        if (h.count > 0 && h.sum_hi == 0 && h.sum_lo <= (uint64_t) INT64_MAX)
                r |= set(o, "sumNs", json_u64(h.sum_lo));
        r |= set(o, "buckets", buckets);
        buckets = NULL;
        r |= set(o, "log2Usec", log2);
        log2 = NULL;
        if (r < 0)
                goto fail;
        *ret = o;
        return 0;

fail:
        json_decref(o);
        json_decref(buckets);
        json_decref(log2);
        return -ENOMEM;
}

/* ---- the interface ---- */

static ProbeTarget *find_target(ApiMetrics *a, const char *name) {
        _cleanup_free_ char *real = NULL;
        const char *base = name;
        ProbeTarget *t;

        if (!a->prober || !name)
                return NULL;
        t = prober_find(a->prober, name);
        if (t || strncmp(name, "/dev/", 5) != 0)
                return t;
        /* A /dev path, possibly a symlink (/dev/disk/by-id/...), as io.blkmqd.Manager takes it. */
        real = realpath(name, NULL);
        base = strrchr(real ? real : name, '/') + 1;
        for (size_t i = 0; i < prober_count(a->prober); i++) {
                t = prober_get(a->prober, i);
                if (streq(t->sysname, base) || (t->devnode && streq(t->devnode, name)))
                        return t;
        }
        return NULL;
}

static int no_such_device(VarlinkCall *call, const char *name) {
        return varlink_call_error(call, "io.blkmqd.Metrics.NoSuchDevice", json_pack("{s:s}", "device", name));
}

static int method_get(VarlinkCall *call, json_t *params, void *userdata) {
        ApiMetrics *a = userdata;
        const char *name = json_string_value(json_object_get(params, "device"));
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        json_t *devices = json_array();

        if (!devices)
                return -ENOMEM;
        if (name) {
                ProbeTarget *t = find_target(a, name);
                if (!t) {
                        json_decref(devices);
                        return no_such_device(call, name);
                }
                if (json_array_append_new(devices, probe_target_metrics_json(t, now)) < 0) {
                        json_decref(devices);
                        return -ENOMEM;
                }
        } else
                for (size_t i = 0; i < prober_count(a->prober); i++)
                        if (json_array_append_new(devices, probe_target_metrics_json(prober_get(a->prober, i), now)) <
                            0) {
                                json_decref(devices);
                                return -ENOMEM;
                        }
        return varlink_call_reply(call, json_pack("{s:o}", "devices", devices));
}

static int method_histogram(VarlinkCall *call, json_t *params, void *userdata) {
        ApiMetrics *a = userdata;
        const char *name = json_string_value(json_object_get(params, "device"));
        const char *window = json_string_value(json_object_get(params, "window"));
        ProbeTarget *t;
        json_t *o;
        int r;

        if (window && api_metrics_window_from_string(window) < 0)
                return varlink_call_error_invalid_parameter(call, "window");
        t = find_target(a, name);
        if (!t)
                return no_such_device(call, name);
        r = probe_target_histogram_json(t, window, now_usec(CLOCK_MONOTONIC), &o);
        if (r < 0)
                return r;
        return varlink_call_reply(call, o);
}

static int method_monitor(VarlinkCall *call, json_t *params, void *userdata) {
        ApiMetrics *a = userdata;
        int r;

        r = varlink_subscribers_add(&a->monitors, call);
        if (r < 0)
                return r;
        return varlink_call_notify(call, json_pack("{s:s}", "event", "subscribed"));
}

/* latency_ns < 0: none. */
static void monitors_send(ApiMetrics *a, const char *event, const ProbeTarget *t, int64_t latency_ns,
                          const char *detail) {
        json_t *o = json_pack("{s:s, s:s}", "event", event, "device", t->sysname);

        if (!o)
                return;
        if (latency_ns >= 0)
                json_object_set_new(o, "latencyNs", json_integer(latency_ns));
        if (detail)
                json_object_set_new(o, "detail", json_string(detail));
        varlink_subscribers_notify(&a->monitors, o);
}

static void sample_state_free(SampleState *s) {
        free(s->sysname);
        free(s);
}

static SampleState *sample_state_get(ApiMetrics *a, const char *sysname) {
        SampleState *s;

        for (s = a->samples; s; s = s->next)
                if (streq(s->sysname, sysname))
                        return s;

        /* A new device: forget those the prober no longer has (loop devices come and go). */
        for (SampleState **p = &a->samples; *p;)
                if (!a->prober || !prober_find(a->prober, (*p)->sysname)) {
                        SampleState *gone = *p;
                        *p = gone->next;
                        sample_state_free(gone);
                } else
                        p = &(*p)->next;

        s = calloc(1, sizeof *s);
        if (!s)
                return NULL;
        s->sysname = strdup(sysname);
        if (!s->sysname) {
                free(s);
                return NULL;
        }
        s->next = a->samples;
        a->samples = s;
        return s;
}

static void sample_event(ApiMetrics *a, ProbeTarget *t, const char *detail) {
        uint64_t count = t->lat ? t->lat->total.count : 0, sum = t->lat ? t->lat->total.sum_lo : 0;
        int64_t latency = -1;
        char buf[128];
        bool fresh, failed;
        SampleState *s;
        uint64_t now;

        s = sample_state_get(a, t->sysname);
        if (!s) {
                log_oom();
                return;
        }
        fresh = !s->seen;
        failed = fresh ? count == 0 && t->n_errors > 0 : t->n_errors > s->errors;

        if (!fresh && count > s->count) /* the mean, should several have come at once */
                latency = (int64_t) ((sum - s->sum) / (count - s->count));
        else if (count == 1 && (fresh || count < s->count)) /* the first one, or the first after a reset */
                latency = (int64_t) sum;
        if (latency < 0 && failed && !detail && t->last_error != 0) {
                snprintf(buf, sizeof buf, "%s", strerror(abs(t->last_error)));
                detail = buf;
        }
        s->seen = true;
        s->count = count;
        s->sum = sum;
        s->errors = t->n_errors;

        if (varlink_subscribers_empty(&a->monitors))
                return;
        now = now_usec(CLOCK_MONOTONIC);
        if (s->sent_usec > 0 && now - s->sent_usec < SAMPLE_EVENT_INTERVAL_USEC)
                return;
        s->sent_usec = now;
        monitors_send(a, "sample", t, latency, detail);
}

static int64_t alert_value_ns(const ProbeTarget *t, const char *detail) {
        const Alert *al = detail && streq(detail, "write") ? &t->write_alert
                            : detail && streq(detail, "read") ? &t->read_alert
                                                               : NULL;
        double v;

        if (!al || al->evaluations == 0)
                return -1;
        v = al->last_value * 1000.0;
        if (!isfinite(v) || v < 0)
                return -1;
        return v >= 9.2e18 ? INT64_MAX : (int64_t) (v + 0.5);
}

void api_metrics_probe_event(Prober *p, ProbeEventType type, ProbeTarget *t, const char *detail, void *userdata) {
        ApiMetrics *a = userdata;

        if (!a || !t)
                return;
        switch (type) {
        case PROBE_EVENT_SAMPLE:
                sample_event(a, t, detail);
                break;
        case PROBE_EVENT_ALERT_RAISED:
                monitors_send(a, "alertRaised", t, alert_value_ns(t, detail), detail);
                break;
        case PROBE_EVENT_ALERT_CLEARED:
                monitors_send(a, "alertCleared", t, alert_value_ns(t, detail), detail);
                break;
        }
}

static const VarlinkMethod methods[] = {
        { "Get", method_get, 0 },
        { "Histogram", method_histogram, 0 },
        { "Monitor", method_monitor, VARLINK_METHOD_REQUIRES_MORE },
};

void api_metrics_zone_alert(const char *event, const char *device, const char *detail, void *userdata) {
        ApiMetrics *a = userdata;
        json_t *o;

        if (!a || !event)
                return;
        o = json_pack("{s:s}", "event", event);
        if (!o)
                return;
        if (device)
                json_object_set_new(o, "device", json_string(device));
        if (detail)
                json_object_set_new(o, "detail", json_string(detail));
        varlink_subscribers_notify(&a->monitors, o);
}

int api_metrics_new(ApiMetrics **ret, Prober *prober, VarlinkServer *server) {
        ApiMetrics *a = calloc(1, sizeof *a);
        int r;

        if (!a)
                return -ENOMEM;
        a->prober = prober;
        r = varlink_server_add_interface(server, io_blkmqd_Metrics_varlink, methods, ELEMENTSOF(methods), a);
        if (r < 0) {
                free(a);
                return r;
        }
        *ret = a;
        return 0;
}

ApiMetrics *api_metrics_free(ApiMetrics *a) {
        if (!a)
                return NULL;
        varlink_subscribers_clear(&a->monitors);
        while (a->samples) {
                SampleState *s = a->samples;
                a->samples = s->next;
                sample_state_free(s);
        }
        free(a);
        return NULL;
}
