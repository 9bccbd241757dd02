/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Watching the devices: monitor (io.blkmqd.Manager's events), trial (a
 * closed-loop tuning run, streamed), latency and top (io.blkmqd.Metrics). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

#define HIST_BAR_WIDTH 40                       /* latency: biolatency's bars */

static const char *arg_window = NULL;        /* latency; NULL: the daemon's default, 10m */
static uint64_t arg_interval_usec = 1000000; /* top */
static unsigned long arg_count = 0;          /* top; 0: until Ctrl-C */
static bool arg_interval_set = false, arg_count_set = false;

/* ---- monitor ---- */

static int print_event(json_t *p, void *userdata) {
        const char *event = dash(jstr(p, "event")), *device = jstr(p, "device");
        json_t *res = json_object_get(p, "result");
        struct timespec ts;
        char when[64];

        if (streq(event, "subscribed"))
                return EXIT_OK;
        clock_gettime(CLOCK_REALTIME, &ts);
        format_timestamp(when, sizeof when, (long long) ts.tv_sec * 1000000 + ts.tv_nsec / 1000, true);
        printf("%s %-10s %-12s", when, event, dash(device));
        if (json_is_object(res))
                printf(" changed %lld, unchanged %lld, adjusted %lld, skipped %lld, failed %lld",
                       jint(res, "changed", 0), jint(res, "unchanged", 0), jint(res, "adjusted", 0),
                       jint(res, "skipped", 0), jint(res, "failed", 0));
        if (json_is_string(json_object_get(p, "profile"))) {
                const char *profile = jstr(p, "profile");
                printf(" %s", *profile ? profile : "(cleared)");
        }
        if (json_is_object(json_object_get(p, "trial"))) {
                json_t *t = json_object_get(p, "trial");
                printf(" %s", dash(jstr(t, "state")));
                if (jstr(t, "verdict"))
                        printf(" %s: %s (%s)", jstr(t, "verdict"), dash(jstr(t, "winner")), dash(jstr(t, "reason")));
        }
        fputc('\n', stdout);
        return EXIT_OK;
}

static int render_event(json_t *p, bool last, void *userdata) {
        return ctl_render(p, print_event, NULL);
}

int verb_monitor(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL("monitor");

        return ctl_stream(&c, INTERFACE ".Monitor", NULL, render_event, NULL, NULL);
}

/* ---- trial: closed-loop tuning ---- */

static void print_trial_table(json_t *t) {
        json_t *c;
        size_t i;

        printf("  %-34s %6s %12s %12s %11s %10s %9s %s\n", "SETTING", "EPOCHS", "READ AWAIT", "READ P99", "WRITE MB/s",
               "READ MB/s", "IN FLIGHT", "");
        json_array_foreach(json_object_get(t, "candidates"), i, c) {
                const char *mark = json_is_true(json_object_get(c, "refused"))              ? "refused by the kernel"
                                   : json_is_true(json_object_get(c, "dropped"))             ? "left the race"
                                   : json_is_false(json_object_get(c, "admissible"))         ? "outside the bound"
                                   : json_is_true(json_object_get(c, "baseline"))            ? "(before the trial)"
                                                                                             : "";
                char p99[16] = "-";
                if (jreal(c, "readP99Ms") > 0)
                        snprintf(p99, sizeof p99, "%.2f ms", jreal(c, "readP99Ms"));
                printf("  %-34s %6lld %9.2f ms %12s %11.1f %10.1f %9.1f %s\n", dash(jstr(c, "setting")),
                       jint(c, "epochs", 0), jreal(c, "readAwaitMs"), p99, jreal(c, "writeMBps"), jreal(c, "readMBps"),
                       jreal(c, "inFlight"), mark);
        }
}

/* A reply before the last: the epoch just measured. */
static int print_trial_epoch(json_t *p, void *userdata) {
        json_t *t = json_object_get(p, "trial");

        printf("epoch %lld/%lld: %s measured\n", jint(t, "epoch", 0) - 1, jint(t, "epochs", 0),
               dash(jstr(t, "measuring")));
        print_trial_table(t);
        return EXIT_OK;
}

/* Who left the race and why, and what the trial cost the workload's reads. */
static void print_trial_price(json_t *t) {
        json_t *c, *pr = json_object_get(t, "price");
        size_t i;

        json_array_foreach(json_object_get(t, "candidates"), i, c)
                if (jstr(c, "dropReason"))
                        printf("Left the race after %lld epochs: %s: %s\n", jint(c, "epochs", 0), dash(jstr(c, "setting")),
                               jstr(c, "dropReason"));
        if (jstr(t, "stopReason"))
                printf("Stopped: %s\n", jstr(t, "stopReason"));
        if (jreal(pr, "readP99MsDuring") > 0)
                printf("Price: read p99 %.2f ms during the trial, %.2f ms before (the setting before it), %.2f ms after "
                       "(the setting after it): %.2f times the worse\n",
                       jreal(pr, "readP99MsDuring"), jreal(pr, "readP99MsBefore"), jreal(pr, "readP99MsAfter"),
                       jreal(pr, "ratio"));
        else
                printf("Price: too few probes for a read p99 (ProbeIntervalSec=, the probes' own %s)\n",
                       "rate during a trial is one per 5-20 ms");
}

/* The last reply: the outcome. */
static int print_trial_result(json_t *p, void *userdata) {
        json_t *t = json_object_get(p, "trial");

        printf("Trial of %s: %s\n", dash(jstr(p, "device")), dash(jstr(t, "state")));
        print_trial_table(t);
        if (jstr(t, "abortReason"))
                printf("Ended early: %s\n", jstr(t, "abortReason"));
        printf("Decision: %s %s: %s (confidence %.1f %%)\n", dash(jstr(t, "verdict")),
               dash(jstr(t, "winner")), dash(jstr(t, "reason")), jreal(t, "confidence") * 100);
        if (jstr(t, "readLatency"))
                printf("Reads ranked by: %s\n", streq(jstr(t, "readLatency"), "p99") ? "the probes' read p99"
                                                                                      : "the mean read await (too few probes for a p99)");
        if (jstr(t, "note"))
                printf("Note: %s\n", jstr(t, "note"));
        json_t *se = json_object_get(t, "search");
        if (se)
                printf("Search by families: %lld phases, %lld candidates generated, %lld measured (the table is the "
                       "last phase, %s): %s\n",
                       jint(se, "phases", 0), jint(se, "candidatesGenerated", 0), jint(se, "candidatesMeasured", 0),
                       dash(jstr(se, "family")), dash(jstr(se, "phasesText")));
        printf("Scheduler switches: %lld (at most %lld), time in applies: %lld ms\n", jint(t, "schedulerSwitches", 0),
               jint(t, "maxSchedulerSwitches", 0), jint(t, "applyUsec", 0) / 1000);
        print_trial_price(t);
        return EXIT_OK;
}

static int render_trial(json_t *p, bool last, void *userdata) {
        if (arg_emit_conf) {
                /* Standard output is the configuration alone; the epochs
                 * go to standard error as one line each. */
                json_t *t = json_object_get(p, "trial");
                if (last)
                        return emit_trial_conf(userdata, p);
                fprintf(stderr, "epoch %lld/%lld: %s measured\n", jint(t, "epoch", 0) - 1, jint(t, "epochs", 0),
                        dash(jstr(t, "measuring")));
                return EXIT_OK;
        }
        return ctl_render(p, last ? print_trial_result : print_trial_epoch, NULL);
}

int verb_trial(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL("trial");
        _cleanup_(json_decrefp) json_t *params = device_params(argv[1]);
        _cleanup_free_ char *note = NULL;
        int r;

        if (asprintf(&note, "Interrupted; the trial goes on in the daemon (blkmqctl show %s).", argv[1]) < 0)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = ctl_stream(&c, INTERFACE ".Trial", params, render_trial, &c, arg_emit_conf ? NULL : note);
        /* Standard output may be a drop-in being written: no note there. */
        if (r == EXIT_OK && arg_emit_conf && ctl_quit)
                return fail(EXIT_SETTING_FAILED, "interrupted: the trial goes on in the daemon; nothing emitted");
        return r;
}

/* ---- latency: io.blkmqd.Metrics ---- */

static bool window_valid(const char *w) {
        return streq(w, "1m") || streq(w, "10m") || streq(w, "total");
}

static const char *window_text(const char *w) {
        if (streq(w, "1m"))
                return "in the last minute";
        if (streq(w, "10m"))
                return "in the last 10 minutes";
        if (streq(w, "total"))
                return "since probing started";
        return "";
}

/* A latency in ns for people, three significant digits: "850ns", "41.2µs",
 * "1.21ms", "2.50s"; "-" for none (< 0). */
static void format_latency(char *buf, size_t size, long long ns) {
        static const struct {
                long long ns;
                const char *unit, *ascii;
        } units[] = {
                { 1000000000LL, "s", "s" },
                { 1000000LL, "ms", "ms" },
                { 1000LL, "µs", "us" },
        };

        if (ns < 0) {
                snprintf(buf, size, "-");
                return;
        }
        for (size_t i = 0; i < ELEMENTSOF(units); i++)
                if (ns >= units[i].ns) {
                        double v = (double) ns / (double) units[i].ns;
                        snprintf(buf, size, "%.*f%s", v < 9.995 ? 2 : v < 99.95 ? 1 : 0, v,
                                 utf8 ? units[i].unit : units[i].ascii);
                        return;
                }
        snprintf(buf, size, "%lldns", ns);
}

/* biolatency's histogram (BCC's print_log2_hist()) of a log2Usec array:
 * slots[0] counts [0, 2) µs, slots[k] [2^k, 2^(k+1)) µs. One line per slot
 * from the first to the last non-empty one, the bars scaled to the largest
 * count. Prints nothing when all are empty. */
static void print_log2_hist(json_t *slots) {
        static const char bar[HIST_BAR_WIDTH + 1] = "****************************************";
        size_t first = SIZE_MAX, last = 0, i;
        long long max = 0;
        json_t *v;

        json_array_foreach(slots, i, v) {
                long long c = json_is_integer(v) ? (long long) json_integer_value(v) : 0;
                if (c <= 0 || i >= 63)
                        continue;
                if (first == SIZE_MAX)
                        first = i;
                last = i;
                if (c > max)
                        max = c;
        }
        if (first == SIZE_MAX)
                return;

        if (arg_legend)
                printf("     %-19s : count     distribution\n", "usecs");
        for (i = first; i <= last; i++) {
                json_t *e = json_array_get(slots, i);
                long long c = json_is_integer(e) ? (long long) json_integer_value(e) : 0;
                unsigned long long low = i == 0 ? 0 : 1ULL << i, high = (1ULL << (i + 1)) - 1;
                int stars = c > 0 ? (int) ((double) c * HIST_BAR_WIDTH / (double) max) : 0;

                printf("%10llu -> %-10llu : %-8lld |%-*.*s|\n", low, high, c < 0 ? 0 : c, HIST_BAR_WIDTH, stars, bar);
        }
}

static void print_probe_state(json_t *d) {
        json_t *alerts = json_object_get(d, "alerts");
        long long errors = jint(d, "errors", 0), e = jint(d, "lastErrno", 0);
        char buf[64];

        if (jstr(d, "note"))
                printf("Probes paused: %s\n", jstr(d, "note"));
        if (errors > 0)
                printf("%lld probe read%s failed%s%s\n", errors, errors == 1 ? "" : "s", e > 0 ? ", the last with: " : "",
                       e > 0 ? strerror((int) e) : "");
        for (int k = 0; k < 2; k++) {
                const char *which = k == 0 ? "read" : "write";
                json_t *a = json_object_get(alerts, which);

                if (!json_is_true(json_object_get(a, "active")))
                        continue;
                format_latency(buf, sizeof buf, jint(a, "thresholdUsec", -1) < 0 ? -1 : jint(a, "thresholdUsec", 0) * 1000);
                printf("Alert: %s latency above %s\n", which, buf);
        }
}


/* {histogram: Metrics.Histogram's reply, metrics: the device of
 * Metrics.Get}, for people. */
static int print_latency(json_t *o, void *userdata) {
        static const struct {
                const char *label, *key;
        } pcts[] = {
                { "p50", "p50Ns" }, { "p90", "p90Ns" }, { "p99", "p99Ns" }, { "p99.9", "p999Ns" }, { "max", "maxNs" },
        };
        json_t *h = json_object_get(o, "histogram"), *d = json_object_get(o, "metrics");
        const char *window = dash(jstr(h, "window"));
        json_t *w = json_array_find(json_object_get(d, "windows"), "window", window);
        long long count = jint(h, "count", 0);
        char buf[64], size[32], interval[32];

        if (arg_legend) {
                format_bytes(size, sizeof size, jint(d, "sizeBytes", 0));
                format_duration(interval, sizeof interval, jint(d, "intervalUsec", 0));
                printf("%s: %lld probe read%s %s (%s every %s%s)\n", dash(jstr(h, "device")), count,
                       count == 1 ? "" : "s", window_text(window), size, interval,
                       json_is_true(json_object_get(d, "polled")) ? ", polled" : "");
        }
        if (count > 0) {
                print_log2_hist(json_object_get(h, "log2Usec"));
                fputc('\n', stdout);
                for (size_t i = 0; i < ELEMENTSOF(pcts); i++) {
                        format_latency(buf, sizeof buf, jint(w, pcts[i].key, -1));
                        printf("%s%s %s", i > 0 ? "  " : "", pcts[i].label, buf);
                }
                fputc('\n', stdout);
        }
        print_probe_state(d);
        return EXIT_OK;
}

int verb_latency(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL("latency");
        _cleanup_(json_decrefp) json_t *hparams = json_pack("{s:s}", "device", argv[1]),
                                       *gparams = device_params(argv[1]), *h = NULL, *g = NULL, *o = NULL;
        int r;

        if (!hparams || !gparams || (arg_window && json_object_set_new(hparams, "window", json_string(arg_window)) < 0))
                return fail(EXIT_PROTOCOL, "out of memory");
        r = ctl_call(&c, METRICS_INTERFACE ".Histogram", hparams, &h);
        if (r != EXIT_OK)
                return r;
        r = ctl_call(&c, METRICS_INTERFACE ".Get", gparams, &g);
        if (r != EXIT_OK)
                return r;
        o = json_pack("{s:O, s:O?}", "histogram", h, "metrics", json_array_get(json_object_get(g, "devices"), 0));
        if (!o)
                return fail(EXIT_PROTOCOL, "out of memory");
        return ctl_render(o, print_latency, NULL);
}

/* ---- top ---- */

static int top_table(json_t *devices, json_t *list) {
        static const char *const h[] = { "DEVICE", "SCHED",   ">r/s",   ">w/s",   ">rkB/s",   ">wkB/s",
                                         ">r_await", ">w_await", ">aqu-sz", ">%util", ">p99(1m)", "ALERT" };
        _cleanup_(table_freep) Table *t = table_new(ELEMENTSOF(h), h);
        json_t *d;
        size_t i;

        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        t->full_width = true; /* like iostat -x: a cut figure is worse than a long line */
        json_array_foreach(devices, i, d) {
                json_t *s = json_object_get(d, "stats"), *alerts = json_object_get(d, "alerts");
                bool ar = json_is_true(json_object_get(json_object_get(alerts, "read"), "active")),
                     aw = json_is_true(json_object_get(json_object_get(alerts, "write"), "active"));
                const char *sched = jstr(json_array_find(list, "device", jstr(d, "device")), "scheduler");
                char p99[32];

                format_latency(p99, sizeof p99,
                               jint(json_array_find(json_object_get(d, "windows"), "window", "1m"), "p99Ns", -1));
                if (table_add(t, jstr(d, "device")) < 0 || table_add(t, sched) < 0 ||
                    table_add_float(t, s, "readIops", 1, 1) < 0 || table_add_float(t, s, "writeIops", 1, 1) < 0 ||
                    table_add_float(t, s, "readBytesPerSec", 1, 1024) < 0 ||
                    table_add_float(t, s, "writeBytesPerSec", 1, 1024) < 0 ||
                    table_add_float(t, s, "readAwaitUsec", 2, 1000) < 0 ||
                    table_add_float(t, s, "writeAwaitUsec", 2, 1000) < 0 || table_add_float(t, s, "aquSz", 2, 1) < 0 ||
                    table_add_float(t, s, "utilPercent", 1, 1) < 0 || table_add(t, p99) < 0 ||
                    table_add(t, ar && aw ? "read,write" : ar ? "read" : aw ? "write" : NULL) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        }
        if (table_rows(t) > 0)
                table_print(t);
        else
                printf("No probed devices.\n");
        return EXIT_OK;
}


/* One refresh of top, the n-th: Metrics.Get and the schedulers of
 * ListDevices, one JSON object a line or the table. */
static int top_iteration(Ctl *c, unsigned long n) {
        _cleanup_(json_decrefp) json_t *g = NULL, *list = json_array();
        json_t *devices, *d;
        struct timespec ts;
        size_t i;
        int r;

        if (!list)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = ctl_call(c, METRICS_INTERFACE ".Get", NULL, &g);
        if (r != EXIT_OK)
                return r;
        r = list_devices(c, list);
        if (r != EXIT_OK)
                return r;
        devices = json_object_get(g, "devices");
        clock_gettime(CLOCK_REALTIME, &ts);

        if (arg_json) {
                /* One object a line, also on a terminal: a stream for jq -c and friends. */
                _cleanup_(json_decrefp) json_t *o = NULL;

                json_array_foreach(devices, i, d) {
                        const char *sched = jstr(json_array_find(list, "device", jstr(d, "device")), "scheduler");
                        if (sched)
                                json_object_set_new(d, "scheduler", json_string(sched));
                }
                o = json_pack("{s:I, s:O}", "timeUsec", (json_int_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000, "devices",
                              devices);
                if (!o)
                        return fail(EXIT_PROTOCOL, "out of memory");
                json_dumpf(o, stdout, JSON_COMPACT);
                fputc('\n', stdout);
                return EXIT_OK;
        }

        if (isatty(STDOUT_FILENO))
                fputs("\033[H\033[2J", stdout); /* home, clear screen */
        else if (n > 0)
                fputc('\n', stdout);
        if (arg_legend) {
                char when[64], every[32];
                size_t k = json_array_size(devices);

                format_timestamp(when, sizeof when, (long long) ts.tv_sec * 1000000 + ts.tv_nsec / 1000, false);
                format_duration(every, sizeof every, (long long) arg_interval_usec);
                printf("%s: %zu probed device%s, every %s\n\n", when, k, k == 1 ? "" : "s", every);
        }
        return top_table(devices, list);
}

/* Sleeps to the next refresh (absolute deadlines: the refreshes do not
 * drift by the time each takes); false if a signal came. */
static bool top_wait(struct timespec *next) {
        next->tv_sec += (time_t) (arg_interval_usec / 1000000);
        next->tv_nsec += (long) (arg_interval_usec % 1000000) * 1000;
        if (next->tv_nsec >= 1000000000L) {
                next->tv_sec++;
                next->tv_nsec -= 1000000000L;
        }
        while (!ctl_quit && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, next, NULL) == EINTR)
                ;
        return !ctl_quit;
}

int verb_top(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL("top");
        struct timespec next;
        int r;

        /* A signal ends the sleep between refreshes. */
        catch_quit_signals();

        r = ctl_connect(&c);
        if (r != EXIT_OK)
                return r;
        clock_gettime(CLOCK_MONOTONIC, &next);
        for (unsigned long n = 0; !ctl_quit && (arg_count == 0 || n < arg_count); n++) {
                if (n > 0 && !top_wait(&next))
                        break;
                r = top_iteration(&c, n);
                if (r != EXIT_OK)
                        return r;
                if (fflush(stdout) != 0)
                        return fail(EXIT_PROTOCOL, "writing output: %s", strerror(errno));
        }
        return EXIT_OK;
}

/* ---- options ---- */

int latency_opt_window(const char *arg) {
        if (!window_valid(arg))
                return fail(EXIT_USAGE, "--window=%s: invalid window (1m, 10m, total)", arg);
        arg_window = arg;
        return EXIT_OK;
}

int latency_opt_interval(const char *arg) {
        char *end;
        double sec;

        errno = 0;
        sec = strtod(arg, &end);
        if (errno != 0 || end == arg || *end != 0 || !(sec >= 0.1 && sec <= 86400))
                return fail(EXIT_USAGE, "--interval=%s: not a number of seconds from 0.1 to 86400", arg);
        arg_interval_usec = (uint64_t) (sec * 1e6 + 0.5);
        arg_interval_set = true;
        return EXIT_OK;
}

int latency_opt_count(const char *arg) {
        char *end;

        errno = 0;
        arg_count = strtoul(arg, &end, 10);
        if (errno != 0 || end == arg || *end != 0 || arg[0] == '-' || arg_count == 0)
                return fail(EXIT_USAGE, "--count=%s: not a positive number", arg);
        arg_count_set = true;
        return EXIT_OK;
}

int latency_options_fit(const char *verb) {
        if (arg_window && !streq(verb, "latency"))
                return fail(EXIT_USAGE, "--window goes with latency");
        if ((arg_interval_set || arg_count_set) && !streq(verb, "top"))
                return fail(EXIT_USAGE, "--%s goes with top", arg_interval_set ? "interval" : "count");
        return EXIT_OK;
}
