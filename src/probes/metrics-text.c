/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "metrics-text.h"

const uint64_t metrics_latency_le_ns[] = {
        UINT64_C(10000), UINT64_C(25000), UINT64_C(50000),                      /* 10 us */
        UINT64_C(100000), UINT64_C(250000), UINT64_C(500000),
        UINT64_C(1000000), UINT64_C(2500000), UINT64_C(5000000),                /* 1 ms */
        UINT64_C(10000000), UINT64_C(25000000), UINT64_C(50000000),
        UINT64_C(100000000), UINT64_C(250000000), UINT64_C(500000000),
        UINT64_C(1000000000), UINT64_C(2500000000), UINT64_C(5000000000),       /* 1 s */
        UINT64_C(10000000000),
};
const size_t metrics_latency_le_count = ELEMENTSOF(metrics_latency_le_ns);

const char *metric_type_to_string(MetricType t) {
        static const char *const table[_METRIC_TYPE_MAX] = {
                [METRIC_GAUGE] = "gauge",
                [METRIC_COUNTER] = "counter",
                [METRIC_HISTOGRAM] = "histogram",
        };

        if ((unsigned) t >= _METRIC_TYPE_MAX)
                return NULL;
        return table[t];
}

static bool char_is_alpha_(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool char_is_digit(char c) {
        return c >= '0' && c <= '9';
}

bool metric_name_is_valid(const char *name) {
        if (!name || !(char_is_alpha_(*name) || *name == ':'))
                return false;
        for (const char *p = name + 1; *p; p++)
                if (!char_is_alpha_(*p) && !char_is_digit(*p) && *p != ':')
                        return false;
        return true;
}

bool metric_label_name_is_valid(const char *name) {
        if (!name || !char_is_alpha_(*name) || strncmp(name, "__", 2) == 0)
                return false;
        for (const char *p = name + 1; *p; p++)
                if (!char_is_alpha_(*p) && !char_is_digit(*p))
                        return false;
        return true;
}

static bool endswith(const char *s, const char *suffix) {
        size_t l = strlen(s), n = strlen(suffix);

        return l >= n && memcmp(s + l - n, suffix, n) == 0;
}

char *metrics_format_double(double v, char buf[static METRICS_DOUBLE_MAX]) {
        if (isnan(v))
                return strcpy(buf, "NaN");
        if (isinf(v))
                return strcpy(buf, v > 0 ? "+Inf" : "-Inf");

        /* %.15g is the shortest form whenever any shorter one round-trips. */
        for (int prec = 15; prec <= 17; prec++) {
                snprintf(buf, METRICS_DOUBLE_MAX, "%.*g", prec, v);
                if (strtod(buf, NULL) == v)
                        break;
        }
        return buf;
}

/* Escapes for label values: \\, \" and \n. HELP text escapes only \\ and \n. */
static void append_escaped(StrBuf *sb, const char *s, bool quote) {
        for (; *s; s++)
                switch (*s) {
                case '\\':
                        (void) strbuf_append(sb, "\\\\");
                        break;
                case '\n':
                        (void) strbuf_append(sb, "\\n");
                        break;
                case '"':
                        (void) strbuf_append(sb, quote ? "\\\"" : "\"");
                        break;
                default:
                        (void) strbuf_appendc(sb, *s);
                }
}

static int labels_check(const MetricLabel *labels, size_t n_labels, bool histogram) {
        if (n_labels > 0 && !labels)
                return -EINVAL;

        for (size_t i = 0; i < n_labels; i++) {
                if (!metric_label_name_is_valid(labels[i].name) || !labels[i].value)
                        return -EINVAL;
                if (histogram && streq(labels[i].name, "le"))
                        return -EINVAL;
                for (size_t j = 0; j < i; j++)
                        if (streq(labels[i].name, labels[j].name))
                                return -EINVAL;
        }
        return 0;
}

/* name{a="x",b="y"[,le="..."]} followed by a space. */
static void append_series(StrBuf *sb, const char *name, const char *suffix,
                          const MetricLabel *labels, size_t n_labels, const char *le) {
        (void) strbuf_append(sb, name);
        if (suffix)
                (void) strbuf_append(sb, suffix);

        if (n_labels > 0 || le) {
                (void) strbuf_appendc(sb, '{');
                for (size_t i = 0; i < n_labels; i++) {
                        if (i > 0)
                                (void) strbuf_appendc(sb, ',');
                        (void) strbuf_appendf(sb, "%s=\"", labels[i].name);
                        append_escaped(sb, labels[i].value, true);
                        (void) strbuf_appendc(sb, '"');
                }
                if (le)
                        (void) strbuf_appendf(sb, "%sle=\"%s\"", n_labels > 0 ? "," : "", le);
                (void) strbuf_appendc(sb, '}');
        }
        (void) strbuf_appendc(sb, ' ');
}

int metrics_text_family(StrBuf *sb, const char *name, MetricType type, const char *help) {
        const char *t = metric_type_to_string(type);

        if (!t || !metric_name_is_valid(name))
                return -EINVAL;
        if (type == METRIC_COUNTER && !endswith(name, "_total"))
                return -EINVAL;

        if (help) {
                (void) strbuf_appendf(sb, "# HELP %s ", name);
                append_escaped(sb, help, false);
                (void) strbuf_appendc(sb, '\n');
        }
        (void) strbuf_appendf(sb, "# TYPE %s %s\n", name, t);
        return strbuf_error(sb);
}

int metrics_text_gauge(StrBuf *sb, const char *name,
                       const MetricLabel *labels, size_t n_labels, double value) {
        char buf[METRICS_DOUBLE_MAX];
        int r;

        if (!metric_name_is_valid(name))
                return -EINVAL;
        r = labels_check(labels, n_labels, false);
        if (r < 0)
                return r;

        append_series(sb, name, NULL, labels, n_labels, NULL);
        (void) strbuf_appendf(sb, "%s\n", metrics_format_double(value, buf));
        return strbuf_error(sb);
}

int metrics_text_counter(StrBuf *sb, const char *name,
                         const MetricLabel *labels, size_t n_labels, uint64_t value) {
        int r;

        if (!metric_name_is_valid(name) || !endswith(name, "_total"))
                return -EINVAL;
        r = labels_check(labels, n_labels, false);
        if (r < 0)
                return r;

        append_series(sb, name, NULL, labels, n_labels, NULL);
        (void) strbuf_appendf(sb, "%" PRIu64 "\n", value);
        return strbuf_error(sb);
}

int metrics_text_histogram(StrBuf *sb, const char *name,
                           const MetricLabel *labels, size_t n_labels, const Hist *h) {
        char buf[METRICS_DOUBLE_MAX];
        int r;

        if (!metric_name_is_valid(name))
                return -EINVAL;
        r = labels_check(labels, n_labels, true);
        if (r < 0)
                return r;

        for (size_t i = 0; i < metrics_latency_le_count; i++) {
                uint64_t le = metrics_latency_le_ns[i];

                append_series(sb, name, "_bucket", labels, n_labels,
                              metrics_format_double((double) le / 1e9, buf));
                (void) strbuf_appendf(sb, "%" PRIu64 "\n", hist_count_le(h, le));
        }
        append_series(sb, name, "_bucket", labels, n_labels, "+Inf");
        (void) strbuf_appendf(sb, "%" PRIu64 "\n", h->count);

        append_series(sb, name, "_sum", labels, n_labels, NULL);
        (void) strbuf_appendf(sb, "%s\n", metrics_format_double(hist_sum(h) / 1e9, buf));

        append_series(sb, name, "_count", labels, n_labels, NULL);
        (void) strbuf_appendf(sb, "%" PRIu64 "\n", h->count);

        return strbuf_error(sb);
}

static void unlink_and_freep(char **p) {
        if (!*p)
                return;
        (void) unlink(*p);
        free(*p);
}

static int write_all(int fd, const char *p, size_t n) {
        while (n > 0) {
                ssize_t k = write(fd, p, n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += k;
                n -= (size_t) k;
        }
        return 0;
}

static int fsync_parent_dir(const char *path) {
        _cleanup_free_ char *dir = NULL;
        _cleanup_close_ int fd = -EBADF;
        const char *slash = strrchr(path, '/');

        if (!slash)
                dir = strdup(".");
        else if (slash == path)
                dir = strdup("/");
        else
                dir = strndup(path, (size_t) (slash - path));
        if (!dir)
                return -ENOMEM;

        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fsync(fd) < 0)
                return -errno;
        return 0;
}

int metrics_write_textfile_atomic(const char *path, const char *text) {
        _cleanup_(unlink_and_freep) char *tmp = NULL;
        _cleanup_close_ int fd = -EBADF;
        const char *base;
        int r;

        if (!path || !text)
                return -EINVAL;
        base = strrchr(path, '/');
        base = base ? base + 1 : path;
        if (strlen(base) <= strlen(".prom") || !endswith(base, ".prom"))
                return -EINVAL;

        if (asprintf(&tmp, "%s.tmp.XXXXXX", path) < 0) {
                tmp = NULL;
                return -ENOMEM;
        }

        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0) {
                r = -errno;
                tmp = mfree(tmp);       /* nothing to unlink */
                return log_debug_errno(r, "Failed to create temporary file for %s: %m", path);
        }

        /* mkostemp() creates 0600; the collector usually runs as another user. */
        if (fchmod(fd, 0644) < 0)
                return log_debug_errno(errno, "Failed to chmod %s: %m", tmp);

        r = write_all(fd, text, strlen(text));
        if (r < 0)
                return log_debug_errno(r, "Failed to write %s: %m", tmp);

        if (fsync(fd) < 0)
                return log_debug_errno(errno, "Failed to fsync %s: %m", tmp);

        r = close(TAKE_FD(fd));
        if (r < 0)
                return log_debug_errno(errno, "Failed to close %s: %m", tmp);

        if (rename(tmp, path) < 0)
                return log_debug_errno(errno, "Failed to rename %s to %s: %m", tmp, path);
        tmp = mfree(tmp);

        /* The new file is in place; a failed directory fsync only weakens durability. */
        r = fsync_parent_dir(path);
        if (r < 0)
                log_debug_errno(r, "Failed to fsync directory of %s, ignoring: %m", path);

        return 0;
}
