/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "manager.h"
#include "strbuf.h"

/* Prometheus text exposition of what the manager and the prober know:
 * probe latency histograms (seconds), windowed quantiles, iostat gauges,
 * alerts, and the applied settings. Written to MetricsTextfile= atomically
 * (node_exporter's textfile collector), at most once a second, only after
 * something changed: no timer runs while nothing happens. */

int metrics_render(Manager *m, strbuf_t *sb);
/* Schedules a write (coalesced); no-op without MetricsTextfile=. */
void metrics_schedule_write(Manager *m);
