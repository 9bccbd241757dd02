/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Prometheus text exposition format, version 0.0.4, as read by node_exporter's
 * textfile collector and by a scrape. Pure writers into a StrBuf plus one
 * file helper. The caller emits each family's samples together, right after
 * metrics_text_family(); the writers validate names and labels (-EINVAL) but
 * not ordering. They return 0, -EINVAL or the buffer's sticky -ENOMEM. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hist.h"
#include "strbuf.h"

typedef enum MetricType {
        METRIC_GAUGE,
        METRIC_COUNTER,
        METRIC_HISTOGRAM,
        _METRIC_TYPE_MAX,
} MetricType;

typedef struct MetricLabel {
        const char *name;       /* [a-zA-Z_][a-zA-Z0-9_]*, not __-prefixed */
        const char *value;      /* any UTF-8; \, " and newline are escaped */
} MetricLabel;

const char *metric_type_to_string(MetricType t);
bool metric_name_is_valid(const char *name);    /* [a-zA-Z_:][a-zA-Z0-9_:]* */
bool metric_label_name_is_valid(const char *name);

/* "# HELP name help" (help escaped: \\ and \n) and "# TYPE name type".
 * Counter names must end in "_total". */
int metrics_text_family(StrBuf *sb, const char *name, MetricType type, const char *help);

/* One sample line: name{labels} value. */
int metrics_text_gauge(StrBuf *sb, const char *name,
                       const MetricLabel *labels, size_t n_labels, double value);
int metrics_text_counter(StrBuf *sb, const char *name,
                         const MetricLabel *labels, size_t n_labels, uint64_t value);

/* A nanosecond histogram in seconds: name_bucket{...,le="<s>"} for each of
 * metrics_latency_le_ns[] and le="+Inf" (cumulative, from hist_count_le(),
 * so a bucket may be off by samples within 1/16 of its bound), then name_sum
 * (seconds) and name_count. The labels must not include "le". */
int metrics_text_histogram(StrBuf *sb, const char *name,
                           const MetricLabel *labels, size_t n_labels, const Hist *h);

/* 10 us .. 10 s in a 1-2.5-5 series; +Inf is implicit. */
extern const uint64_t metrics_latency_le_ns[];
extern const size_t metrics_latency_le_count;

/* Shortest "%g" text that strtod() reads back to the same double; "+Inf",
 * "-Inf", "NaN" as Prometheus spells them. Returns buf. */
#define METRICS_DOUBLE_MAX 32
char *metrics_format_double(double v, char buf[static METRICS_DOUBLE_MAX]);

/* node_exporter textfile convention: writes text to "<path>.tmp.XXXXXX" in the
 * same directory (a name the collector ignores), mode 0644, fsync()s it,
 * rename()s it over path and fsync()s the directory, so the collector sees
 * the old or the new file, never a partial one. path must end in ".prom"
 * (-EINVAL otherwise). On failure the temporary file is removed. */
int metrics_write_textfile_atomic(const char *path, const char *text);
