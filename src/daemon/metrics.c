/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"
#include "metrics-text.h"
#include "zone-service.h"
#include "metrics.h"
#include "autotune-runner.h"
#include "probe.h"
#include "util.h"

static const struct {
        HistWindowSpan span;
        const char *name;
} windows[] = {
        { HIST_WINDOW_1MIN, "1m" },
        { HIST_WINDOW_10MIN, "10m" },
        { HIST_WINDOW_TOTAL, "total" },
};

static const double quantiles[] = { 0.5, 0.9, 0.99, 0.999 };

#define LBL(n, v) { .name = (n), .value = (v) }

static void gauge_if_finite(StrBuf *sb, const char *name, const char *dev, double v) {
        MetricLabel l[] = { LBL("device", dev) };
        if (isfinite(v))
                metrics_text_gauge(sb, name, l, 1, v);
}

/* One gauge family: per managed device, the settings of its last job that
 * ended in outcome o. */
static void render_outcome_count(StrBuf *sb, Manager *m, const char *name, const char *help, TuneOutcome o) {
        metrics_text_family(sb, name, METRIC_GAUGE, help);
        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                unsigned c[_TUNE_OUTCOME_MAX] = {};
                MetricLabel l[] = { LBL("device", d->sysname) };
                if (d->removed || !resolved_managed(&d->resolved))
                        continue;
                if (d->last)
                        tune_job_count(d->last, c);
                metrics_text_gauge(sb, name, l, 1, c[o]);
        }
}

/* d's settings that read otherwise than its last job left them (drift),
 * but those DriftPolicy=keep leaves to their other writer. */
static unsigned device_drifted(const Device *d) {
        _cleanup_free_ char *active = NULL;
        unsigned n = 0;

        for (size_t i = 0; i < d->last->n_entries; i++) {
                const TuneEntry *e = &d->last->entries[i];
                if (!strv_contains(d->kept, e->attr) &&
                    tune_entry_check(d->last, e, &active, NULL) == TUNE_CHECK_DRIFTED)
                        n++;
        }
        return n;
}

/* The text format wants each family's samples in one group: one pass per
 * family. */
static void render_devices(StrBuf *sb, Manager *m) {
        metrics_text_family(sb, "blkmqd_device_managed", METRIC_GAUGE,
                            "1 for each block device a [Device] section matches.");
        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                MetricLabel l[] = { LBL("device", d->sysname), LBL("id", d->info->id) };
                if (!d->removed)
                        metrics_text_gauge(sb, "blkmqd_device_managed", l, 2, resolved_managed(&d->resolved));
        }
        /* What identifies the kind of disk (firmware: udev's ID_REVISION), for
         * comparing the settings of one model across a fleet. */
        metrics_text_family(sb, "blkmqd_device_info", METRIC_GAUGE,
                            "1 for each block device blkmqd knows, with its model, firmware and transport.");
        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                MetricLabel l[] = { LBL("device", d->sysname), LBL("id", d->info->id),
                                    LBL("model", strempty(d->info->model)),
                                    LBL("firmware", strempty(device_info_property(d->info, "ID_REVISION"))),
                                    LBL("transport", strempty(d->info->transport)) };
                if (!d->removed)
                        metrics_text_gauge(sb, "blkmqd_device_info", l, ELEMENTSOF(l), 1);
        }
        metrics_text_family(sb, "blkmqd_device_setting", METRIC_GAUGE,
                            "Numeric value of a block-layer setting as read back after blkmqd applied it; "
                            "source: the section it came from.");
        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                if (d->removed || !d->last)
                        continue;
                for (size_t k = 0; k < d->last->n_entries; k++) {
                        const TuneEntry *e = &d->last->entries[k];
                        const char *v = e->after ? e->after : e->before;
                        long long x;
                        if (!v || e->knob == KNOB_SCHEDULER || safe_atolli(v, &x) < 0)
                                continue;
                        MetricLabel l[] = { LBL("device", d->sysname), LBL("key", knob_info(e->knob)->key),
                                            LBL("attribute", e->attr), LBL("source", strempty(e->section)) };
                        metrics_text_gauge(sb, "blkmqd_device_setting", l, ELEMENTSOF(l), (double) x);
                }
        }
        metrics_text_family(sb, "blkmqd_device_scheduler_info", METRIC_GAUGE,
                            "The active I/O scheduler (value 1); source: the section it came from.");
        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                if (d->removed || !d->last)
                        continue;
                for (size_t k = 0; k < d->last->n_entries; k++) {
                        const TuneEntry *e = &d->last->entries[k];
                        const char *v = e->after ? e->after : e->before;
                        if (!v || e->knob != KNOB_SCHEDULER)
                                continue;
                        MetricLabel l[] = { LBL("device", d->sysname), LBL("scheduler", v),
                                            LBL("source", strempty(e->section)) };
                        metrics_text_gauge(sb, "blkmqd_device_scheduler_info", l, ELEMENTSOF(l), 1);
                }
        }
        render_outcome_count(sb, m, "blkmqd_device_settings_failed", "Settings whose last write failed, per device.",
                             TUNE_FAILED);
        render_outcome_count(sb, m, "blkmqd_device_settings_adjusted",
                             "Settings the kernel did not take as written (it settled on another value), per device.",
                             TUNE_ADJUSTED);
        /* Read again at each write of the file (at most once a second): a
         * few small sysfs reads per device, none while a job is in flight
         * (its writes are no drift). */
        metrics_text_family(sb, "blkmqd_device_settings_drifted", METRIC_GAUGE,
                            "Settings that no longer read as blkmqd left them (something else wrote them since), "
                            "per device.");
        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                MetricLabel l[] = { LBL("device", d->sysname) };
                if (d->removed || !resolved_managed(&d->resolved) || !d->last || d->busy)
                        continue;
                metrics_text_gauge(sb, "blkmqd_device_settings_drifted", l, 1, device_drifted(d));
        }
}

static void render_probe_latency(StrBuf *sb, Prober *p, uint64_t now) {
        size_t n = prober_count(p);

        metrics_text_family(sb, "blkmqd_probe_latency_seconds", METRIC_HISTOGRAM,
                            "Latency of blkmqd's read probes (O_DIRECT, QD1) since start.");
        for (size_t i = 0; i < n; i++) {
                ProbeTarget *t = prober_get(p, i);
                MetricLabel l[] = { LBL("device", t->sysname) };
                Hist h;
                hist_window_get(t->lat, HIST_WINDOW_TOTAL, now, &h);
                metrics_text_histogram(sb, "blkmqd_probe_latency_seconds", l, 1, &h);
        }
        metrics_text_family(sb, "blkmqd_probe_latency_quantile_seconds", METRIC_GAUGE,
                            "Probe latency quantiles over a sliding window (1m, 10m) or since start (total).");
        for (size_t i = 0; i < n; i++) {
                ProbeTarget *t = prober_get(p, i);
                for (size_t w = 0; w < ELEMENTSOF(windows); w++) {
                        Hist h;
                        hist_window_get(t->lat, windows[w].span, now, &h);
                        for (size_t q = 0; q < ELEMENTSOF(quantiles); q++) {
                                char qs[16];
                                uint64_t v;
                                if (hist_percentile(&h, quantiles[q] * 100, &v) < 0)
                                        continue;
                                snprintf(qs, sizeof qs, "%g", quantiles[q]);
                                MetricLabel l[] = { LBL("device", t->sysname), LBL("window", windows[w].name),
                                                            LBL("quantile", qs) };
                                metrics_text_gauge(sb, "blkmqd_probe_latency_quantile_seconds", l, 3, v / 1e9);
                        }
                }
        }
        metrics_text_family(sb, "blkmqd_probes_total", METRIC_COUNTER, "Probe reads completed.");
        for (size_t i = 0; i < n; i++) {
                ProbeTarget *t = prober_get(p, i);
                MetricLabel l[] = { LBL("device", t->sysname) };
                metrics_text_counter(sb, "blkmqd_probes_total", l, 1, t->n_probes);
        }
        metrics_text_family(sb, "blkmqd_probe_errors_total", METRIC_COUNTER, "Probe reads that failed.");
        for (size_t i = 0; i < n; i++) {
                ProbeTarget *t = prober_get(p, i);
                MetricLabel l[] = { LBL("device", t->sysname) };
                metrics_text_counter(sb, "blkmqd_probe_errors_total", l, 1, t->n_errors);
        }
}

/* iostat's figures, from the probe targets' /sys/block/X/stat samples. */
static void render_iostat(StrBuf *sb, Prober *p) {
        size_t n = prober_count(p);

        static const struct {
                const char *name, *help;
                size_t off;
                double scale;
        } g[] = {
                { "blkmqd_device_reads_per_second", "Completed reads per second (iostat r/s).", offsetof(ProbeStats, read_iops), 1 },
                { "blkmqd_device_writes_per_second", "Completed writes per second (iostat w/s).", offsetof(ProbeStats, write_iops), 1 },
                { "blkmqd_device_read_bytes_per_second", "Bytes read per second.", offsetof(ProbeStats, read_bytes_per_sec), 1 },
                { "blkmqd_device_write_bytes_per_second", "Bytes written per second.", offsetof(ProbeStats, write_bytes_per_sec), 1 },
                { "blkmqd_device_read_await_seconds", "Average read time in the device and queue (iostat r_await).", offsetof(ProbeStats, read_await_usec), 1e-6 },
                { "blkmqd_device_write_await_seconds", "Average write time in the device and queue (iostat w_await).", offsetof(ProbeStats, write_await_usec), 1e-6 },
                { "blkmqd_device_utilization_ratio", "Time the device was busy, 0..1 (iostat %util / 100).", offsetof(ProbeStats, util_percent), 0.01 },
                { "blkmqd_device_queue_size", "Average number of requests in flight (iostat aqu-sz).", offsetof(ProbeStats, aqu_sz), 1 },
        };
        for (size_t k = 0; k < ELEMENTSOF(g); k++) {
                metrics_text_family(sb, g[k].name, METRIC_GAUGE, g[k].help);
                for (size_t i = 0; i < n; i++) {
                        ProbeTarget *t = prober_get(p, i);
                        if (t->stats.interval_usec == 0)
                                continue;
                        double v = *(const double *) ((const char *) &t->stats + g[k].off);
                        gauge_if_finite(sb, g[k].name, t->sysname, v * g[k].scale);
                }
        }
}

static void render_alerts(StrBuf *sb, Prober *p) {
        size_t n = prober_count(p);

        static const char *const kinds[] = { "read", "write" };
        metrics_text_family(sb, "blkmqd_latency_alerts_total", METRIC_COUNTER,
                            "Latency alert episodes raised (AlertReadLatUsec=, AlertWriteLatUsec=).");
        for (size_t i = 0; i < n; i++) {
                ProbeTarget *t = prober_get(p, i);
                for (size_t k = 0; k < ELEMENTSOF(kinds); k++) {
                        const Alert *a = k == 0 ? &t->read_alert : &t->write_alert;
                        if (!(k == 0 ? t->config.alert_read_usec : t->config.alert_write_usec))
                                continue;
                        MetricLabel l[] = { LBL("device", t->sysname), LBL("kind", kinds[k]) };
                        metrics_text_counter(sb, "blkmqd_latency_alerts_total", l, 2, a->episodes);
                }
        }
        metrics_text_family(sb, "blkmqd_latency_alert_active", METRIC_GAUGE, "1 while a latency alert is raised.");
        for (size_t i = 0; i < n; i++) {
                ProbeTarget *t = prober_get(p, i);
                for (size_t k = 0; k < ELEMENTSOF(kinds); k++) {
                        const Alert *a = k == 0 ? &t->read_alert : &t->write_alert;
                        if (!(k == 0 ? t->config.alert_read_usec : t->config.alert_write_usec))
                                continue;
                        MetricLabel l[] = { LBL("device", t->sysname), LBL("kind", kinds[k]) };
                        metrics_text_gauge(sb, "blkmqd_latency_alert_active", l, 2, alert_is_active(a));
                }
        }
}

static void render_zones(StrBuf *sb, ZoneService *zones) {
        uint64_t checked, errors;
        unsigned bad;

        zone_service_scrub_stats(zones, &checked, &errors, &bad);
        metrics_text_family(sb, "blkmqd_zone_objects_checked_total", METRIC_COUNTER,
                            "Sealed objects read back and checked against their SHA-256 (scrub, Verify, Read).");
        metrics_text_counter(sb, "blkmqd_zone_objects_checked_total", NULL, 0, checked);
        metrics_text_family(sb, "blkmqd_zone_object_errors_total", METRIC_COUNTER,
                            "Checks that found a SHA-256 mismatch or a read error.");
        metrics_text_counter(sb, "blkmqd_zone_object_errors_total", NULL, 0, errors);
        metrics_text_family(sb, "blkmqd_zone_objects_damaged", METRIC_GAUGE,
                            "Sealed objects whose last check failed (an alert: never repaired by blkmqd).");
        metrics_text_gauge(sb, "blkmqd_zone_objects_damaged", NULL, 0, bad);

        /* Per zoned device: zones by state, and how far the scrub is through
         * its pass (objects not checked within ScrubIntervalSec=). A device
         * gone, or emulated, is named by its deviceId. */
        metrics_text_family(sb, "blkmqd_zones", METRIC_GAUGE, "Zones of each zoned device by state.");
        for (size_t i = 0; zone_service_device_at(zones, i); i++) {
                const ZoneDevice *zd = zone_service_device_at(zones, i);
                unsigned counts[_ZONE_STATE_MAX], damaged;
                ZoneDeviceInfo info;
                zone_device_get_info(zd, &info);
                zone_device_count(zd, counts, &damaged);
                for (ZoneState st = 0; st < _ZONE_STATE_MAX; st++) {
                        MetricLabel l[] = { LBL("device", info.sysname ?: info.id),
                                            LBL("state", zone_state_to_string(st)) };
                        metrics_text_gauge(sb, "blkmqd_zones", l, ELEMENTSOF(l), counts[st]);
                }
        }
        metrics_text_family(sb, "blkmqd_zone_objects", METRIC_GAUGE, "Sealed objects of each zoned device.");
        for (size_t i = 0; zone_service_device_at(zones, i); i++) {
                const ZoneDevice *zd = zone_service_device_at(zones, i);
                unsigned objects, due;
                ZoneDeviceInfo info;
                zone_device_get_info(zd, &info);
                zone_service_scrub_progress(zones, zd, &objects, &due);
                MetricLabel l[] = { LBL("device", info.sysname ?: info.id) };
                metrics_text_gauge(sb, "blkmqd_zone_objects", l, 1, objects);
        }
        metrics_text_family(sb, "blkmqd_zone_objects_scrub_due", METRIC_GAUGE,
                            "Sealed objects not checked within ScrubIntervalSec= (the scrub's work left).");
        for (size_t i = 0; zone_service_device_at(zones, i); i++) {
                const ZoneDevice *zd = zone_service_device_at(zones, i);
                unsigned objects, due;
                ZoneDeviceInfo info;
                zone_device_get_info(zd, &info);
                zone_service_scrub_progress(zones, zd, &objects, &due);
                MetricLabel l[] = { LBL("device", info.sysname ?: info.id) };
                metrics_text_gauge(sb, "blkmqd_zone_objects_scrub_due", l, 1, due);
        }
}

int metrics_render(Manager *m, Prober *p, ZoneService *zones, AutotuneRunner *autotuner, StrBuf *sb) {
        render_devices(sb, m);
        /* Without probe targets, neither the event loop nor the zone figures
         * are written. */
        if (prober_count(p) == 0)
                return strbuf_error(sb);
        render_probe_latency(sb, p, now_usec(CLOCK_MONOTONIC));
        render_iostat(sb, p);
        render_alerts(sb, p);
        if (autotuner)
                autotune_runner_metrics(autotuner, sb);
        metrics_text_family(sb, "blkmqd_event_loop_iteration_seconds", METRIC_HISTOGRAM,
                            "Busy time of each event loop iteration (prepare and one dispatch, not the wait): "
                            "no reply is faster than the iteration it waits behind.");
        metrics_text_histogram(sb, "blkmqd_event_loop_iteration_seconds", NULL, 0, &m->loop_hist);
        if (zones)
                render_zones(sb, zones);
        return strbuf_error(sb);
}

struct MetricsWriter {
        Manager *manager;
        Prober *prober;
        ZoneService *zones;
        AutotuneRunner *autotuner;
        sd_event_source *timer;
        uint64_t last_usec;
        int last_error;
};

static int on_metrics_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        MetricsWriter *w = userdata;
        Manager *m = w->manager;
        StrBuf sb = {};
        int r;

        w->last_usec = now_usec(CLOCK_MONOTONIC);
        r = metrics_render(m, w->prober, w->zones, w->autotuner, &sb);
        if (r >= 0)
                r = metrics_write_textfile_atomic(m->config->daemon.metrics_textfile, strbuf_str(&sb));
        if (r < 0 && r != w->last_error)
                log_warning_errno(r, "Failed to write %s: %m", m->config->daemon.metrics_textfile);
        w->last_error = r < 0 ? r : 0;
        strbuf_done(&sb);
        return 0;
}

void metrics_writer_schedule(MetricsWriter *w) {
        Manager *m = w->manager;
        uint64_t when;
        int r, enabled = SD_EVENT_OFF;

        if (!m->config->daemon.metrics_textfile || m->opts.dry_run || m->opts.once)
                return;
        if (!w->timer) {
                r = sd_event_add_time(m->event, &w->timer, CLOCK_MONOTONIC, UINT64_MAX, 10000,
                                      on_metrics_timer, w);
                if (r < 0) {
                        log_warning_errno(r, "Failed to set up the metrics timer: %m");
                        return;
                }
                (void) sd_event_source_set_description(w->timer, "metrics-textfile");
        } else if (sd_event_source_get_enabled(w->timer, &enabled) >= 0 && enabled != SD_EVENT_OFF)
                return; /* a write is pending already */
        when = w->last_usec + 1000000;
        sd_event_source_set_time(w->timer, when);
        sd_event_source_set_enabled(w->timer, SD_EVENT_ONESHOT);
}

static void metrics_on_manager_event(Manager *m, ManagerEventType type, Device *d, void *userdata) {
        metrics_writer_schedule(userdata);
}

int metrics_writer_new(MetricsWriter **ret, Manager *m, Prober *prober, ZoneService *zones, AutotuneRunner *autotuner) {
        _cleanup_(metrics_writer_freep) MetricsWriter *w = NULL;
        int r;

        w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        w->manager = m;
        w->prober = prober;
        w->autotuner = autotuner;
        w->zones = zones;
        r = manager_subscribe(m, MANAGER_EVENT_MASK(MANAGER_EVENT_DEVICE_APPLIED) |
                                 MANAGER_EVENT_MASK(MANAGER_EVENT_DEVICE_REMOVED),
                              metrics_on_manager_event, w);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(w);
        return 0;
}

MetricsWriter *metrics_writer_free(MetricsWriter *w) {
        if (!w)
                return NULL;
        manager_unsubscribe(w->manager, metrics_on_manager_event, w);
        sd_event_source_disable_unref(w->timer);
        free(w);
        return NULL;
}
