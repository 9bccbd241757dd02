/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The Prometheus text writer, checked by parsing its output back with a
 * strict parser of the 0.0.4 grammar, and the atomic textfile write. */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cleanup.h"
#include "hist.h"
#include "metrics-text.h"
#include "strbuf.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(DIR *, closedir)

/* ---- strict parser ---- */

#define MAX_LABELS 8
#define MAX_SAMPLES 512
#define MAX_FAMILIES 32

struct sample {
        char name[128];
        size_t n_labels;
        char label_name[MAX_LABELS][64];
        char label_value[MAX_LABELS][256];
        double value;
        char value_text[64];
        size_t family;
};

struct family {
        char name[128];
        char type[16];
        char help[256];
        bool has_help, has_type;
};

struct exposition {
        struct sample samples[MAX_SAMPLES];
        size_t n_samples;
        struct family families[MAX_FAMILIES];
        size_t n_families;
};

static bool is_name_start(char c, bool colon) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}

static bool is_name_char(char c, bool colon) {
        return is_name_start(c, colon) || (c >= '0' && c <= '9');
}

/* Reads [a-zA-Z_:][a-zA-Z0-9_:]* (or without ':' for labels) into out. */
static const char *parse_name(const char *p, bool colon, char *out, size_t size) {
        size_t n = 0;

        if (!is_name_start(*p, colon))
                return NULL;
        while (is_name_char(*p, colon)) {
                if (n + 1 >= size)
                        return NULL;
                out[n++] = *p++;
        }
        out[n] = 0;
        return p;
}

/* Unescapes until the terminator: label values allow \\ \" \n, HELP \\ \n. */
static const char *parse_escaped(const char *p, char term, bool quotes, char *out, size_t size) {
        size_t n = 0;

        while (*p != term) {
                char c = *p++;

                if (c == 0 || c == '\n' || (quotes && c == '"'))
                        return NULL;
                if (c == '\\') {
                        c = *p++;
                        if (c == 'n')
                                c = '\n';
                        else if (c == '\\' || (quotes && c == '"'))
                                ;
                        else
                                return NULL;
                }
                if (n + 1 >= size)
                        return NULL;
                out[n++] = c;
        }
        out[n] = 0;
        return p;
}

static bool parse_value(const char *s, double *ret) {
        char *end = NULL;

        if (streq(s, "+Inf")) {
                *ret = __builtin_inf();
                return true;
        }
        if (streq(s, "-Inf")) {
                *ret = -__builtin_inf();
                return true;
        }
        if (streq(s, "NaN")) {
                *ret = __builtin_nan("");
                return true;
        }
        /* strtod takes "inf", "nan", hex and leading blanks; the format does not. */
        if (!*s || strpbrk(s, "xXiInN \t"))
                return false;
        errno = 0;
        *ret = strtod(s, &end);
        if (!end || *end)
                return false;
        /* ERANGE is fine for subnormals, not for overflow to infinity. */
        return errno == 0 || (errno == ERANGE && *ret - *ret == 0);
}

static bool sample_belongs(const struct sample *s, const struct family *f) {
        size_t l = strlen(f->name);

        if (streq(s->name, f->name))
                return !streq(f->type, "histogram");
        if (!streq(f->type, "histogram") || strncmp(s->name, f->name, l) != 0)
                return false;
        return streq(s->name + l, "_bucket") || streq(s->name + l, "_sum") || streq(s->name + l, "_count");
}

/* Returns 0 or the 1-based number of the first bad line. */
static int parse_exposition(const char *text, struct exposition *e) {
        const char *p = text;
        int line = 0;

        memset(e, 0, sizeof(*e));
        if (!*text || text[strlen(text) - 1] != '\n')
                return 1;

        while (*p) {
                const char *eol = strchr(p, '\n');
                char buf[1024];
                size_t len = (size_t) (eol - p);

                line++;
                if (len == 0 || len >= sizeof(buf))
                        return line;
                memcpy(buf, p, len);
                buf[len] = 0;
                p = eol + 1;

                if (buf[0] == '#') {
                        char name[128];
                        const char *q;
                        bool help = strncmp(buf, "# HELP ", 7) == 0;
                        struct family *f;

                        if (!help && strncmp(buf, "# TYPE ", 7) != 0)
                                return line;
                        q = parse_name(buf + 7, true, name, sizeof(name));
                        if (!q || *q != ' ')
                                return line;
                        q++;

                        /* A family's HELP and TYPE come together, before its samples. */
                        f = e->n_families > 0 ? &e->families[e->n_families - 1] : NULL;
                        if (!f || !streq(f->name, name)) {
                                for (size_t i = 0; i < e->n_families; i++)
                                        if (streq(e->families[i].name, name))
                                                return line;
                                if (e->n_families >= MAX_FAMILIES)
                                        return line;
                                f = &e->families[e->n_families++];
                                strcpy(f->name, name);
                        } else if (e->n_samples > 0 && e->samples[e->n_samples - 1].family == e->n_families - 1)
                                return line;

                        if (help) {
                                if (f->has_help || f->has_type)
                                        return line;
                                q = parse_escaped(q, 0, false, f->help, sizeof(f->help));
                                if (!q)
                                        return line;
                                f->has_help = true;
                        } else {
                                if (f->has_type)
                                        return line;
                                if (!streq(q, "counter") && !streq(q, "gauge") && !streq(q, "histogram") &&
                                    !streq(q, "summary") && !streq(q, "untyped"))
                                        return line;
                                strcpy(f->type, q);
                                f->has_type = true;
                        }
                        continue;
                }

                {
                        struct sample *s;
                        const char *q;

                        if (e->n_samples >= MAX_SAMPLES || e->n_families == 0)
                                return line;
                        s = &e->samples[e->n_samples];
                        memset(s, 0, sizeof(*s));

                        q = parse_name(buf, true, s->name, sizeof(s->name));
                        if (!q)
                                return line;
                        if (*q == '{') {
                                q++;
                                while (*q != '}') {
                                        if (s->n_labels >= MAX_LABELS)
                                                return line;
                                        q = parse_name(q, false, s->label_name[s->n_labels], 64);
                                        if (!q || q[0] != '=' || q[1] != '"')
                                                return line;
                                        q = parse_escaped(q + 2, '"', true, s->label_value[s->n_labels], 256);
                                        if (!q)
                                                return line;
                                        q++;
                                        for (size_t i = 0; i < s->n_labels; i++)
                                                if (streq(s->label_name[i], s->label_name[s->n_labels]))
                                                        return line;
                                        s->n_labels++;
                                        if (*q == ',')
                                                q++;
                                        else if (*q != '}')
                                                return line;
                                }
                                q++;
                        }
                        /* One space, the value, no timestamp (textfiles must not have one). */
                        if (*q != ' ' || strlen(q + 1) >= sizeof(s->value_text))
                                return line;
                        strcpy(s->value_text, q + 1);
                        if (!parse_value(s->value_text, &s->value))
                                return line;

                        /* Samples follow their family's TYPE, all together. */
                        s->family = e->n_families - 1;
                        if (!e->families[s->family].has_type || !sample_belongs(s, &e->families[s->family]))
                                return line;
                        e->n_samples++;
                }
        }
        return 0;
}

static const char *label_get(const struct sample *s, const char *name) {
        for (size_t i = 0; i < s->n_labels; i++)
                if (streq(s->label_name[i], name))
                        return s->label_value[i];
        return NULL;
}

/* Same labels apart from le. */
static bool same_series(const struct sample *a, const struct sample *b) {
        size_t na = 0, nb = 0;

        for (size_t i = 0; i < a->n_labels; i++) {
                const char *v;

                if (streq(a->label_name[i], "le"))
                        continue;
                na++;
                v = label_get(b, a->label_name[i]);
                if (!v || !streq(v, a->label_value[i]))
                        return false;
        }
        for (size_t i = 0; i < b->n_labels; i++)
                nb += !streq(b->label_name[i], "le");
        return na == nb;
}

static const struct sample *find_sample(const struct exposition *e, const char *name, const struct sample *like) {
        for (size_t i = 0; i < e->n_samples; i++)
                if (streq(e->samples[i].name, name) && (!like || same_series(&e->samples[i], like)))
                        return &e->samples[i];
        return NULL;
}

/* Every histogram series: le ascending ending in +Inf, counts cumulative,
 * +Inf == _count, _sum present. Returns the number of series checked. */
static size_t check_histograms(const struct exposition *e) {
        size_t series = 0;

        for (size_t i = 0; i < e->n_samples; i++) {
                const struct sample *first = &e->samples[i], *count, *sum;
                const struct family *f = &e->families[first->family];
                char name[160];
                double prev_le = -__builtin_inf(), prev_count = 0;
                size_t j;

                if (!streq(f->type, "histogram") || !label_get(first, "le"))
                        continue;
                /* Only at the start of a series. */
                if (i > 0 && e->samples[i - 1].family == first->family &&
                    label_get(&e->samples[i - 1], "le") && same_series(&e->samples[i - 1], first))
                        continue;

                for (j = i; j < e->n_samples && label_get(&e->samples[j], "le") &&
                            same_series(&e->samples[j], first); j++) {
                        double le;

                        assert_true(parse_value(label_get(&e->samples[j], "le"), &le));
                        assert_true(le > prev_le);
                        assert_true(e->samples[j].value >= prev_count);
                        assert_true(e->samples[j].value == (double) (uint64_t) e->samples[j].value);
                        prev_le = le;
                        prev_count = e->samples[j].value;
                }
                assert_string_equal(label_get(&e->samples[j - 1], "le"), "+Inf");

                snprintf(name, sizeof(name), "%s_count", f->name);
                count = find_sample(e, name, first);
                assert_non_null(count);
                assert_true(count->value == prev_count);
                snprintf(name, sizeof(name), "%s_sum", f->name);
                sum = find_sample(e, name, first);
                assert_non_null(sum);
                assert_true(sum->value >= 0);
                series++;
        }
        return series;
}

/* ---- strbuf ---- */

static void test_strbuf(void **state) {
        _cleanup_(strbuf_done) StrBuf sb = STRBUF_INIT;
        _cleanup_free_ char *s = NULL;
        char big[5000];

        assert_string_equal(strbuf_str(&sb), "");
        assert_null(strbuf_steal(&sb));

        assert_int_equal(strbuf_append(&sb, "ab"), 0);
        assert_int_equal(strbuf_appendc(&sb, 'c'), 0);
        assert_int_equal(strbuf_appendf(&sb, "%d-%s", 42, "x"), 0);
        assert_string_equal(strbuf_str(&sb), "abc42-x");
        assert_int_equal(sb.len, 7);

        memset(big, 'y', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        for (int i = 0; i < 10; i++)
                assert_int_equal(strbuf_appendf(&sb, "%s", big), 0);
        assert_int_equal(sb.len, 7 + 10 * 4999);
        assert_int_equal(strlen(strbuf_str(&sb)), sb.len);
        assert_true(sb.allocated > sb.len);

        strbuf_truncate(&sb, 3);
        assert_string_equal(strbuf_str(&sb), "abc");
        assert_int_equal(strbuf_error(&sb), 0);

        s = strbuf_steal(&sb);
        assert_string_equal(s, "abc");
        assert_null(sb.buf);
        assert_int_equal(sb.len, 0);
}

/* ---- number formatting ---- */

static void test_format_double(void **state) {
        static const struct { double v; const char *s; } cases[] = {
                { 0, "0" },
                { 1, "1" },
                { 0.1, "0.1" },
                { 1e-5, "1e-05" },
                { 2.5e-5, "2.5e-05" },
                { 0.0005, "0.0005" },
                { 1234567.25, "1234567.25" },
                { 1e300, "1e+300" },
                { 0.30000000000000004, "0.30000000000000004" },
                { 9007199254740993.0, "9007199254740992" },
        };
        char buf[METRICS_DOUBLE_MAX];
        uint64_t seed = 7;

        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                assert_string_equal(metrics_format_double(cases[i].v, buf), cases[i].s);
        assert_string_equal(metrics_format_double(__builtin_inf(), buf), "+Inf");
        assert_string_equal(metrics_format_double(-__builtin_inf(), buf), "-Inf");
        assert_string_equal(metrics_format_double(__builtin_nan(""), buf), "NaN");

        /* Round trip for arbitrary bit patterns, subnormals included. */
        for (int i = 0; i < 200000; i++) {
                uint64_t bits;
                double v, back;

                seed = seed * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
                bits = seed ^ (seed >> 29);
                memcpy(&v, &bits, sizeof(v));
                if (v != v || v - v != 0)
                        continue;
                metrics_format_double(v, buf);
                assert_true(parse_value(buf, &back));
                assert_memory_equal(&back, &v, sizeof(v));
        }
}

static void test_names(void **state) {
        assert_true(metric_name_is_valid("blkmq_io_latency_seconds"));
        assert_true(metric_name_is_valid("a:b_c9"));
        assert_true(metric_name_is_valid(":x"));
        assert_false(metric_name_is_valid("9abc"));
        assert_false(metric_name_is_valid("a-b"));
        assert_false(metric_name_is_valid(""));
        assert_false(metric_name_is_valid(NULL));
        assert_true(metric_label_name_is_valid("device"));
        assert_true(metric_label_name_is_valid("_x"));
        assert_false(metric_label_name_is_valid("__name__"));
        assert_false(metric_label_name_is_valid("a:b"));
        assert_false(metric_label_name_is_valid("1a"));
}

static void test_invalid(void **state) {
        _cleanup_(strbuf_done) StrBuf sb = STRBUF_INIT;
        const MetricLabel le[] = { { "le", "1" } }, dup[] = { { "a", "1" }, { "a", "2" } },
                                  reserved[] = { { "__x", "1" } }, nullv[] = { { "a", NULL } };
        Hist h;

        hist_init(&h);
        assert_int_equal(metrics_text_family(&sb, "ios", METRIC_COUNTER, "x"), -EINVAL);
        assert_int_equal(metrics_text_family(&sb, "ios_total", _METRIC_TYPE_MAX, "x"), -EINVAL);
        assert_int_equal(metrics_text_family(&sb, "io-s", METRIC_GAUGE, "x"), -EINVAL);
        assert_int_equal(metrics_text_counter(&sb, "ios", NULL, 0, 1), -EINVAL);
        assert_int_equal(metrics_text_gauge(&sb, "9x", NULL, 0, 1), -EINVAL);
        assert_int_equal(metrics_text_gauge(&sb, "g", dup, 2, 1), -EINVAL);
        assert_int_equal(metrics_text_gauge(&sb, "g", reserved, 1, 1), -EINVAL);
        assert_int_equal(metrics_text_gauge(&sb, "g", nullv, 1, 1), -EINVAL);
        assert_int_equal(metrics_text_gauge(&sb, "g", NULL, 1, 1), -EINVAL);
        assert_int_equal(metrics_text_histogram(&sb, "h", le, 1, &h), -EINVAL);
        /* Nothing written by the failures. */
        assert_int_equal(sb.len, 0);
        assert_int_equal(metrics_text_gauge(&sb, "g", le, 1, 1), 0);
        assert_string_equal(strbuf_str(&sb), "g{le=\"1\"} 1\n");
}

/* ---- a full exposition, parsed back ---- */

static void test_exposition(void **state) {
        static const char weird[] = "a\\b\"c\nd\\n}{,=";
        const MetricLabel l0[] = { { "device", "nvme0n1" }, { "op", "read" } },
                                  l1[] = { { "device", "sda" }, { "op", "read" } },
                                  lw[] = { { "device", weird } };
        _cleanup_(strbuf_done) StrBuf sb = STRBUF_INIT;
        _cleanup_free_ struct exposition *e = malloc(sizeof(struct exposition));
        _cleanup_free_ Hist *h0 = malloc(sizeof(Hist)), *h1 = malloc(sizeof(Hist));
        const struct sample *s;
        uint64_t raw[] = { 20000, 300000, 2000000000, 30000000000 };
        uint64_t mult[] = { 1000, 500, 10, 1 };
        uint64_t sum_ns = 0;
        char name[64];
        int r;

        assert_true(e && h0 && h1);
        hist_init(h0);
        hist_init(h1);
        for (size_t i = 0; i < ELEMENTSOF(raw); i++)
                for (uint64_t k = 0; k < mult[i]; k++) {
                        hist_record(h0, raw[i]);
                        sum_ns += raw[i];
                }

        assert_int_equal(metrics_text_family(&sb, "blkmq_io_latency_seconds", METRIC_HISTOGRAM,
                                             "Completion latency.\nBack\\slash."), 0);
        assert_int_equal(metrics_text_histogram(&sb, "blkmq_io_latency_seconds", l0, 2, h0), 0);
        assert_int_equal(metrics_text_histogram(&sb, "blkmq_io_latency_seconds", l1, 2, h1), 0);
        assert_int_equal(metrics_text_family(&sb, "blkmq_inflight", METRIC_GAUGE, "In flight \"now\"."), 0);
        assert_int_equal(metrics_text_gauge(&sb, "blkmq_inflight", lw, 1, 0.1), 0);
        assert_int_equal(metrics_text_gauge(&sb, "blkmq_inflight", l1, 2, __builtin_inf()), 0);
        assert_int_equal(metrics_text_gauge(&sb, "blkmq_inflight", NULL, 0, __builtin_nan("")), 0);
        assert_int_equal(metrics_text_family(&sb, "blkmq_alert_episodes_total", METRIC_COUNTER, NULL), 0);
        assert_int_equal(metrics_text_counter(&sb, "blkmq_alert_episodes_total", l0, 2, UINT64_MAX), 0);

        r = parse_exposition(strbuf_str(&sb), e);
        if (r != 0)
                fail_msg("line %d does not parse:\n%s", r, strbuf_str(&sb));

        assert_int_equal(e->n_families, 3);
        assert_string_equal(e->families[0].type, "histogram");
        assert_string_equal(e->families[0].help, "Completion latency.\nBack\\slash.");
        assert_string_equal(e->families[1].help, "In flight \"now\".");
        assert_false(e->families[2].has_help);
        assert_string_equal(e->families[2].type, "counter");
        assert_int_equal(e->n_samples, 2 * (metrics_latency_le_count + 3) + 4);
        assert_int_equal(check_histograms(e), 2);

        /* Buckets against exact counts; the samples sit far from every bound. */
        for (size_t i = 0; i < metrics_latency_le_count; i++) {
                const struct sample *b = &e->samples[i];
                uint64_t exact = 0;
                double le;

                assert_string_equal(b->name, "blkmq_io_latency_seconds_bucket");
                assert_string_equal(label_get(b, "device"), "nvme0n1");
                assert_true(parse_value(label_get(b, "le"), &le));
                assert_true(le == (double) metrics_latency_le_ns[i] / 1e9);
                for (size_t k = 0; k < ELEMENTSOF(raw); k++)
                        if (raw[k] <= metrics_latency_le_ns[i])
                                exact += mult[k];
                if (b->value != (double) exact)
                        fail_msg("le=%s: %s, want %" PRIu64, label_get(b, "le"), b->value_text, exact);
        }
        assert_string_equal(label_get(&e->samples[0], "le"), "1e-05");
        assert_string_equal(label_get(&e->samples[metrics_latency_le_count - 1], "le"), "10");
        s = &e->samples[metrics_latency_le_count];
        assert_string_equal(label_get(s, "le"), "+Inf");
        assert_true(s->value == 1511);

        s = find_sample(e, "blkmq_io_latency_seconds_sum", &e->samples[0]);
        assert_non_null(s);
        assert_true(s->value == (double) sum_ns / 1e9);
        assert_true(s->value > 50.169 && s->value < 50.171);
        s = find_sample(e, "blkmq_io_latency_seconds_count", &e->samples[0]);
        assert_true(s->value == 1511);

        /* The empty histogram: zeros throughout. */
        s = find_sample(e, "blkmq_io_latency_seconds_sum", &e->samples[metrics_latency_le_count + 3]);
        assert_non_null(s);
        assert_string_equal(s->value_text, "0");
        assert_string_equal(label_get(s, "device"), "sda");

        /* Label escaping round trip and special values. */
        s = find_sample(e, "blkmq_inflight", NULL);
        assert_string_equal(label_get(s, "device"), weird);
        assert_string_equal(s->value_text, "0.1");
        assert_string_equal(s[1].value_text, "+Inf");
        assert_int_equal(s[2].n_labels, 0);
        assert_string_equal(s[2].value_text, "NaN");
        assert_string_equal(s[3].value_text, "18446744073709551615");

        /* The raw text of the escaped label, once. */
        assert_non_null(strstr(strbuf_str(&sb), "blkmq_inflight{device=\"a\\\\b\\\"c\\nd\\\\n}{,=\"} 0.1\n"));
        snprintf(name, sizeof(name), "# TYPE %s counter\n", "blkmq_alert_episodes_total");
        assert_non_null(strstr(strbuf_str(&sb), name));
}

/* The parser rejects what it should, so passing it means something. */
static void test_parser_is_strict(void **state) {
        static const char *const bad[] = {
                "x 1\n",                                        /* no TYPE */
                "# TYPE x gauge\nx 1",                          /* no final newline */
                "# TYPE x gauge\nx  1\n",
                "# TYPE x gauge\nx 1 1700000000\n",             /* timestamp */
                "# TYPE x gauge\nx{a=\"b} 1\n",
                "# TYPE x gauge\nx{a=\"\\t\"} 1\n",
                "# TYPE x gauge\nx{a=\"1\",a=\"2\"} 1\n",
                "# TYPE x gauge\nx{1a=\"1\"} 1\n",
                "# TYPE x gauge\nx inf\n",
                "# TYPE x gauge\nx 0x10\n",
                "# TYPE x gauge\ny 1\n",
                "# TYPE x gauge\n\nx 1\n",
                "# TYPE x gauge\nx 1\n# HELP x late\n",
                "# TYPE x gauge\n# TYPE x gauge\nx 1\n",
                "# TYPE x histogram\nx 1\n",
                "# TYPE x gauge\nx 1\n# TYPE y gauge\ny 1\n# TYPE x gauge\n",
                "# TYPE x wrong\nx 1\n",
                "# some comment\n",
        };
        _cleanup_free_ struct exposition *e = malloc(sizeof(struct exposition));

        assert_non_null(e);
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                if (parse_exposition(bad[i], e) == 0)
                        fail_msg("accepted: %s", bad[i]);
        assert_int_equal(parse_exposition("# HELP x a\\nb\n# TYPE x gauge\nx{a=\"\\\"\",} -Inf\nx 1e-05\n", e), 0);
        assert_int_equal(e->n_samples, 2);
        assert_string_equal(e->families[0].help, "a\nb");
        assert_string_equal(e->samples[0].label_value[0], "\"");
}

/* ---- atomic textfile ---- */

static size_t dir_entries(const char *dir, char names[][256], size_t max) {
        _cleanup_(closedirp) DIR *d = opendir(dir);
        struct dirent *de;
        size_t n = 0;

        assert_non_null(d);
        while ((de = readdir(d))) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                assert_true(n < max);
                snprintf(names[n++], 256, "%s", de->d_name);
        }
        return n;
}

static char *read_file(const char *path) {
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        char *buf = calloc(1, 65536);
        size_t n;

        assert_non_null(f);
        assert_non_null(buf);
        n = fread(buf, 1, 65535, f);
        buf[n] = 0;
        return buf;
}

static void test_textfile(void **state) {
        char dir[] = "/tmp/test-metrics-text.XXXXXX", path[128], other[128], names[8][256];
        _cleanup_free_ char *content = NULL, *content2 = NULL;
        struct stat st, st2;

        assert_non_null(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/blkmqd.prom", dir);

        assert_int_equal(metrics_write_textfile_atomic(path, "# TYPE x gauge\nx 1\n"), 0);
        content = read_file(path);
        assert_string_equal(content, "# TYPE x gauge\nx 1\n");
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0644);
        assert_int_equal(dir_entries(dir, names, 8), 1);
        assert_string_equal(names[0], "blkmqd.prom");

        /* Replaced by rename: a new inode, the new content, no leftovers. */
        assert_int_equal(metrics_write_textfile_atomic(path, "# TYPE x gauge\nx 2\n"), 0);
        content2 = read_file(path);
        assert_string_equal(content2, "# TYPE x gauge\nx 2\n");
        assert_int_equal(stat(path, &st2), 0);
        assert_true(st.st_ino != st2.st_ino);
        assert_int_equal(dir_entries(dir, names, 8), 1);

        /* Not a .prom name: refused before anything is created. */
        snprintf(other, sizeof(other), "%s/blkmqd.txt", dir);
        assert_int_equal(metrics_write_textfile_atomic(other, "x"), -EINVAL);
        snprintf(other, sizeof(other), "%s/.prom", dir);
        assert_int_equal(metrics_write_textfile_atomic(other, "x"), -EINVAL);
        snprintf(other, sizeof(other), "%s/blkmqd.prom.tmp", dir);
        assert_int_equal(metrics_write_textfile_atomic(other, "x"), -EINVAL);
        assert_int_equal(metrics_write_textfile_atomic(NULL, "x"), -EINVAL);
        assert_int_equal(metrics_write_textfile_atomic(path, NULL), -EINVAL);
        snprintf(other, sizeof(other), "%s/missing/blkmqd.prom", dir);
        assert_int_equal(metrics_write_textfile_atomic(other, "x"), -ENOENT);
        assert_int_equal(dir_entries(dir, names, 8), 1);

        /* rename() fails onto a directory: the temporary file is removed. */
        snprintf(other, sizeof(other), "%s/isdir.prom", dir);
        assert_int_equal(mkdir(other, 0755), 0);
        assert_int_equal(metrics_write_textfile_atomic(other, "x 1\n"), -EISDIR);
        assert_int_equal(dir_entries(dir, names, 8), 2);
        assert_int_equal(rmdir(other), 0);

        assert_int_equal(unlink(path), 0);
        assert_int_equal(rmdir(dir), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_strbuf),
                cmocka_unit_test(test_format_double),
                cmocka_unit_test(test_names),
                cmocka_unit_test(test_invalid),
                cmocka_unit_test(test_exposition),
                cmocka_unit_test(test_parser_is_strict),
                cmocka_unit_test(test_textfile),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
