/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "manager.h"
#include "strbuf.h"

struct Prober;
struct ZoneService;
struct AutotuneRunner;

/* Prometheus text exposition of what the manager, the prober and the zone
 * service know: probe latency histograms (seconds), windowed quantiles,
 * iostat gauges, alerts, and the applied settings. Written to
 * MetricsTextfile= atomically (node_exporter's textfile collector), at most
 * once a second, only after something changed: no timer runs while nothing
 * happens. The writer listens to the manager (devices applied and removed);
 * blkmqd.c tells it about probe events. */

typedef struct MetricsWriter MetricsWriter;

/* prober and zones may be NULL (off). */
int metrics_render(Manager *m, struct Prober *prober, struct ZoneService *zones, struct AutotuneRunner *autotuner,
                   StrBuf *sb);

int metrics_writer_new(MetricsWriter **ret, Manager *m, struct Prober *prober, struct ZoneService *zones,
                       struct AutotuneRunner *autotuner);
MetricsWriter *metrics_writer_free(MetricsWriter *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(MetricsWriter *, metrics_writer_free)
/* Schedules a write (coalesced); no-op without MetricsTextfile=. */
void metrics_writer_schedule(MetricsWriter *w);
