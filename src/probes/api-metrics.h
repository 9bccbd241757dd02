/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdint.h>

#include <jansson.h>

#include "hist.h"
#include "probe.h"
#include "varlink.h"

/* The io.blkmqd.Metrics varlink interface: latency probe results and
 * iostat figures of the devices the Prober probes (Get, Histogram), and a
 * Monitor stream of probe samples and alerts. Read-only; loop thread only.
 *
 * Wiring (blkmqd.c):
 *         api_metrics_new(&d->api_metrics, d->prober, server);
 *         prober_set_event_cb(d->prober, api_metrics_probe_event, d->api_metrics);
 *         ...
 *         prober_set_event_cb(d->prober, NULL, NULL);   (before the free)
 *         api_metrics_free(d->api_metrics);
 */

typedef struct ApiMetrics ApiMetrics;

/* Registers io.blkmqd.Metrics on server; prober must outlive the result. */
int api_metrics_new(ApiMetrics **ret, Prober *prober, VarlinkServer *server);
/* NULL ok. Monitor calls still open get no more events. */
ApiMetrics *api_metrics_free(ApiMetrics *a);
/* The Prober's event callback, userdata = ApiMetrics*. For PROBE_EVENT_SAMPLE
 * call it after the probe was recorded into t->lat (and n_probes/n_errors
 * updated): the sample's latency is taken from the change of t->lat's total
 * count and sum since the previous event of that device. detail: for alerts
 * "read" or "write"; for a sample NULL, or a text passed on to Monitor. */
void api_metrics_probe_event(Prober *p, ProbeEventType type, ProbeTarget *t, const char *detail, void *userdata);

/* The zone service's alert callback (zone_alert_cb_t), userdata =
 * ApiMetrics*: event (objectDamaged, objectIntact), device and detail go to
 * the Monitor streams. */
void api_metrics_zone_alert(const char *event, const char *device, const char *detail, void *userdata);

/* ---- pure JSON builders, also for tests: no Prober, no clock ---- */

/* "1m", "10m", "total" → the span; -EINVAL otherwise. */
int api_metrics_window_from_string(const char *s);
#define API_METRICS_WINDOW_DEFAULT HIST_WINDOW_10MIN

/* One DeviceMetrics object of the IDL, windows as of now_usec (the clock
 * t->lat is recorded with: CLOCK_MONOTONIC). t->lat may be NULL (no
 * samples). NULL on OOM. */
json_t *probe_target_metrics_json(const ProbeTarget *t, uint64_t now_usec);
/* The Histogram reply of the IDL; window NULL = "10m". -EINVAL for an
 * unknown window, -ENOMEM. */
int probe_target_histogram_json(const ProbeTarget *t, const char *window, uint64_t now_usec, json_t **ret);
/* One Window object of the IDL for a histogram. NULL on OOM. */
json_t *api_metrics_window_json(const char *name, const Hist *h);
