/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <ctype.h>
#include <fcntl.h>
#include <getopt.h>
#include <langinfo.h>
#include <limits.h>
#include <locale.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/param.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "blkmq/varlink.h"
#include "cleanup.h"
#include "sha256.h" /* basic's SHA-256 (src/basic/sha256.c, over libcrypto): blkmqctl links basic and libblkmq */

/* blkmqctl: the command-line client of io.blkmqd.Manager,
 * io.blkmqd.Metrics and io.blkmqd.Zones (see io.blkmqd.*.varlink, blkmqctl(8) and
 * blkmqd-varlink(7)). It links libblkmq only: everything it knows about
 * devices comes from the daemon. */

#define INTERFACE "io.blkmqd.Manager"
#define METRICS_INTERFACE "io.blkmqd.Metrics"
#define ZONES_INTERFACE "io.blkmqd.Zones"
#define INLINE_CHUNK (1024U * 1024U)            /* zones append --inline: decoded bytes per call */
#define SECTOR_SIZE 512ULL                      /* LBAs as nvme-cli and blkzone print them */
#define CALL_TIMEOUT_USEC (120ULL * 1000000ULL) /* Apply waits for the writes: be generous */
#define MONITOR_TICK_USEC (200ULL * 1000ULL)    /* how often monitor looks for SIGINT/SIGTERM */
#define HIST_BAR_WIDTH 40                       /* latency: biolatency's bars */

/* Exit status; documented in --help and blkmqctl(8), scripts rely on them. */
enum {
        EXIT_OK = 0,
        EXIT_USAGE = 1,
        EXIT_UNREACHABLE = 2,
        EXIT_NO_SUCH = 3,
        EXIT_PERMISSION = 4,
        EXIT_CONFIG = 5,
        EXIT_SETTING_FAILED = 6,
        EXIT_PROTOCOL = 7,
        EXIT_NO_SPACE = 8,        /* NoFreeZone, ZoneLimitReached, TooLarge */
        EXIT_CHECKSUM = 9,        /* ChecksumMismatch */
        EXIT_ZONE_IO = 10,        /* IOError, DeviceGone */
        EXIT_LEASE_STATE = 11,    /* LeaseBusy, WrongState */
};

static const char *arg_address = NULL;
static bool arg_json = false;
static bool arg_legend = true;
static bool arg_clear = false;
static const char *arg_window = NULL;      /* latency; NULL: the daemon's default, 10m */
static uint64_t arg_interval_usec = 1000000; /* top */
static unsigned long arg_count = 0;        /* top; 0: until Ctrl-C */
static bool arg_interval_set = false, arg_count_set = false;
static const char *arg_state = NULL;       /* zones DEV */
static const char *arg_device = NULL;      /* zones alloc, stage */
static const char *arg_label = NULL;       /* zones alloc, stage */
static const char *arg_output = NULL;      /* zones cat */
static char arg_device_buf[PATH_MAX + 8];
static uint64_t arg_settle_usec = 30ULL * 1000000ULL; /* stage: how long to wait for blkmqd to come back */
static uint64_t arg_size = 0;              /* zones alloc */
static bool arg_size_set = false;
static bool arg_inline = false;            /* zones append */

static bool utf8 = false;
static volatile sig_atomic_t quit = 0;

DEFINE_TRIVIAL_CLEANUP_FUNC(blkmq_varlink *, blkmq_varlink_free)

_printf_(2, 3) static int fail(int status, const char *fmt, ...) {
        va_list ap;

        fflush(stdout);
        fputs("blkmqctl: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return status;
}

static const char *ellipsis(void) {
        return utf8 ? "…" : "...";
}

static const char *arrow(void) {
        return utf8 ? "→" : "->";
}

/* ---- JSON accessors: absent or null fields read as NULL / def ---- */

static const char *jstr(json_t *o, const char *key) {
        return json_string_value(json_object_get(o, key));
}

static long long jint(json_t *o, const char *key, long long def) {
        json_t *v = json_object_get(o, key);
        return json_is_integer(v) ? (long long) json_integer_value(v) : def;
}

static const char *jbool(json_t *o, const char *key) {
        json_t *v = json_object_get(o, key);
        return json_is_boolean(v) ? (json_is_true(v) ? "yes" : "no") : NULL;
}

static const char *dash(const char *s) {
        return s && *s ? s : "-";
}

/* "a, b, c" of an array of strings; "-" when empty. Caller frees. */
static char *join_strings(json_t *a, const char *sep) {
        size_t len = 1, i;
        json_t *v;
        char *s;

        json_array_foreach(a, i, v)
                if (json_is_string(v))
                        len += strlen(json_string_value(v)) + strlen(sep);
        s = malloc(len + 1);
        if (!s)
                return NULL;
        s[0] = 0;
        json_array_foreach(a, i, v)
                if (json_is_string(v)) {
                        if (s[0])
                                strcat(s, sep);
                        strcat(s, json_string_value(v));
                }
        if (!s[0])
                strcpy(s, "-");
        return s;
}

/* "note (strerror)", without saying the same thing twice. */
static const char *explain_errno(char *buf, size_t size, const char *note, int e) {
        const char *why = e > 0 ? strerror(e) : NULL;

        if (note && *note && why && !strstr(note, why))
                snprintf(buf, size, "%s (%s)", note, why);
        else if (note && *note)
                snprintf(buf, size, "%s", note);
        else
                snprintf(buf, size, "%s", why ? why : "failed");
        return buf;
}

static void print_json(json_t *j) {
        size_t flags = isatty(STDOUT_FILENO) ? JSON_INDENT(2) : JSON_COMPACT;

        json_dumpf(j, stdout, flags | JSON_ENCODE_ANY);
        fputc('\n', stdout);
}

/* ---- output width ---- */

static unsigned columns(void) {
        const char *e = getenv("COLUMNS");
        struct winsize ws = {};

        /* COLUMNS= wins, as with systemd's tools, so that it can be forced. */
        if (e) {
                char *end;
                unsigned long c = strtoul(e, &end, 10);
                if (end != e && *end == 0 && c > 0 && c < 10000)
                        return (unsigned) c;
        }
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) >= 0 && ws.ws_col > 0)
                return ws.ws_col;
        /* Not a terminal: a script or a file reads it, and an ID cut to
         * "emu…" or a lease cut short is worth nothing there (as systemctl,
         * whole lines when not on a terminal). */
        return isatty(STDOUT_FILENO) ? 80 : UINT_MAX;
}

/* Display width of UTF-8 text, one column per code point (the daemon sends
 * sysfs values, names and paths: no wide characters to speak of). */
static size_t text_width(const char *s) {
        size_t w = 0;

        for (; *s; s++)
                if (((unsigned char) *s & 0xc0) != 0x80)
                        w++;
        return w;
}

/* Prints s in exactly width columns (padded unless last), cut with an
 * ellipsis if it does not fit. */
static void print_cell(const char *s, size_t width, bool right, bool last) {
        size_t w = text_width(s);

        if (w <= width) {
                if (right)
                        printf("%*s%s", (int) (width - w), "", s);
                else if (last)
                        fputs(s, stdout);
                else
                        printf("%s%*s", s, (int) (width - w), "");
                return;
        }

        size_t ew = text_width(ellipsis()), keep = width > ew ? width - ew : 0, n = 0;
        const char *p = s;

        /* Copy keep code points. */
        while (*p) {
                if (((unsigned char) *p & 0xc0) != 0x80) {
                        if (n == keep)
                                break;
                        n++;
                }
                p++;
        }
        fwrite(s, 1, p - s, stdout);
        if (width >= ew)
                fputs(ellipsis(), stdout);
}

/* ---- tables: sized to the terminal, the widest column gives way ---- */

#define TABLE_COLUMNS_MAX 12U

typedef struct Table {
        size_t n_columns;
        bool right[TABLE_COLUMNS_MAX];
        bool full_width; /* never cut to the terminal (top: figures, not text) */
        bool fixed[TABLE_COLUMNS_MAX]; /* columns never cut (figures); the others give way */
        char **cells; /* row-major; the first row is the header */
        size_t n_cells, allocated;
} Table;

static Table *table_free(Table *t) {
        if (!t)
                return NULL;
        for (size_t i = 0; i < t->n_cells; i++)
                free(t->cells[i]);
        free(t->cells);
        free(t);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(Table *, table_free)

static int table_add(Table *t, const char *s) {
        char *c;

        if (t->n_cells == t->allocated) {
                size_t a = t->allocated ? t->allocated * 2 : 32;
                char **p = realloc(t->cells, a * sizeof *p);
                if (!p)
                        return -ENOMEM;
                t->cells = p;
                t->allocated = a;
        }
        c = strdup(dash(s));
        if (!c)
                return -ENOMEM;
        /* A cell is one line. */
        for (char *p = c; *p; p++)
                if (*p == '\n' || *p == '\t')
                        *p = ' ';
        t->cells[t->n_cells++] = c;
        return 0;
}

_printf_(2, 3) static int table_addf(Table *t, const char *fmt, ...) {
        _cleanup_free_ char *s = NULL;
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        return table_add(t, s);
}

/* headers: n_columns names; a name starting with '>' is right-aligned. */
static Table *table_new(size_t n_columns, const char *const *headers) {
        _cleanup_(table_freep) Table *t = calloc(1, sizeof *t);

        if (!t || n_columns > TABLE_COLUMNS_MAX)
                return NULL;
        t->n_columns = n_columns;
        for (size_t i = 0; i < n_columns; i++) {
                const char *h = headers[i];
                if (h[0] == '>') {
                        t->right[i] = true;
                        h++;
                }
                if (table_add(t, h) < 0)
                        return NULL;
        }
        return TAKE_PTR(t);
}

static size_t table_rows(const Table *t) {
        return t->n_cells / t->n_columns - 1;
}

static void table_print(const Table *t) {
        size_t width[TABLE_COLUMNS_MAX] = {}, n = t->n_columns, total = 0, avail = columns();
        size_t first = arg_legend ? 0 : 1;

        for (size_t row = first; row * n < t->n_cells; row++)
                for (size_t c = 0; c < n; c++) {
                        size_t w = text_width(t->cells[row * n + c]);
                        if (w > width[c])
                                width[c] = w;
                }
        for (size_t c = 0; c < n; c++)
                total += width[c] + (c + 1 < n ? 2 : 0);

        /* Too wide: take from the widest column, one at a time, so several
         * long columns end up equally cut; no column goes below 4 (a
         * character and an ellipsis). */
        while (!t->full_width && total > avail) {
                size_t widest = SIZE_MAX;
                for (size_t c = 0; c < n; c++)
                        if (!t->fixed[c] && (widest == SIZE_MAX || width[c] > width[widest]))
                                widest = c;
                if (widest == SIZE_MAX || width[widest] <= 4)
                        break;
                width[widest]--;
                total--;
        }

        for (size_t row = first; row * n < t->n_cells; row++) {
                for (size_t c = 0; c < n; c++) {
                        print_cell(t->cells[row * n + c], width[c], t->right[c], c + 1 == n);
                        if (c + 1 < n)
                                fputs("  ", stdout);
                }
                fputc('\n', stdout);
        }
}

/* ---- talking to blkmqd ---- */

static int connect_daemon(blkmq_varlink **ret) {
        blkmq_varlink *v;
        int r;

        r = blkmq_varlink_connect(&v, arg_address);
        if (r < 0)
                return fail(EXIT_UNREACHABLE, "cannot connect to %s: %s%s", arg_address, strerror(-r),
                            r == -ENOENT || r == -ECONNREFUSED ? " (is blkmqd running?)"
                            : r == -EINVAL                     ? " (not an absolute path or @abstract name)"
                                                               : "");
        blkmq_varlink_set_timeout(v, CALL_TIMEOUT_USEC);
        *ret = v;
        return EXIT_OK;
}

static int transport_error(int r) {
        switch (r) {
        case -ECONNRESET:
        case -EPIPE:
        case -ENOTCONN:
                return fail(EXIT_UNREACHABLE, "%s: blkmqd closed the connection", arg_address);
        case -ETIMEDOUT:
                return fail(EXIT_PROTOCOL, "%s: no reply from blkmqd within %llu s", arg_address,
                            CALL_TIMEOUT_USEC / 1000000ULL);
        case -EBADMSG:
                return fail(EXIT_PROTOCOL, "%s: malformed reply from blkmqd", arg_address);
        default:
                return fail(EXIT_PROTOCOL, "%s: %s", arg_address, strerror(-r));
        }
}

/* An error reply: one line on stderr (and the error as JSON on stdout with
 * --json); returns the exit status it maps to. */
static int varlink_error(const char *verb, const char *error, json_t *p) {
        const char *name = strrchr(error, '.') ? strrchr(error, '.') + 1 : error;

        if (arg_json) {
                json_t *o = json_pack("{s:s, s:O}", "error", error, "parameters", p);
                if (o)
                        print_json(o);
                json_decref(o);
        }

        if (streq(error, "io.blkmqd.TooManyConnections"))
                return fail(EXIT_UNREACHABLE, "blkmqd refuses more connections (%lld in all, %lld per user are open): "
                            "try again when some have closed",
                            jint(p, "max", 0), jint(p, "maxPerUid", 0));
        if (strncmp(error, INTERFACE ".", strlen(INTERFACE) + 1) == 0) {
                if (streq(name, "NoSuchDevice"))
                        return fail(EXIT_NO_SUCH, "%s: no such device", dash(jstr(p, "device")));
                if (streq(name, "Timeout"))
                        return fail(EXIT_SETTING_FAILED, "%s: %s is still being tuned after %lld s (CallTimeoutSec=); "
                                    "blkmqd goes on, see blkmqctl show", verb, dash(jstr(p, "device")),
                                    jint(p, "seconds", 0));
                if (streq(name, "NoSuchProfile"))
                        return fail(EXIT_NO_SUCH, "%s: no such profile", dash(jstr(p, "profile")));
                if (streq(name, "ConfigInvalid")) {
                        long long line = jint(p, "line", 0);
                        if (line > 0)
                                return fail(EXIT_CONFIG, "%s:%lld: %s", dash(jstr(p, "file")), line,
                                            dash(jstr(p, "message")));
                        return fail(EXIT_CONFIG, "%s: %s", dash(jstr(p, "file")), dash(jstr(p, "message")));
                }
                if (streq(name, "AttributeNotWritable")) {
                        const char *msg = jstr(p, "message");
                        char buf[512];

                        if (msg && streq(msg, "n/a")) /* the daemon's placeholder for no note */
                                msg = NULL;
                        return fail(EXIT_SETTING_FAILED, "%s: %s: %s", dash(jstr(p, "device")),
                                    dash(jstr(p, "attribute")),
                                    explain_errno(buf, sizeof buf, msg, (int) jint(p, "errno", 0)));
                }
        } else if (strncmp(error, METRICS_INTERFACE ".", strlen(METRICS_INTERFACE) + 1) == 0) {
                if (streq(name, "NoSuchDevice"))
                        return fail(EXIT_NO_SUCH, "%s: no such device, or not probed", dash(jstr(p, "device")));
        } else if (strncmp(error, ZONES_INTERFACE ".", strlen(ZONES_INTERFACE) + 1) == 0) {
                char buf[512];

                if (streq(name, "NoSuchDevice"))
                        return fail(EXIT_NO_SUCH, "%s: no such zoned device", dash(jstr(p, "device")));
                if (streq(name, "NotZoned"))
                        return fail(EXIT_NO_SUCH, "%s: not a zoned device of the allocator (see ZoneAllocator= in blkmqd.conf(5))",
                                    dash(jstr(p, "device")));
                if (streq(name, "LeaseNotFound"))
                        return fail(EXIT_NO_SUCH, "%s: no such lease", dash(jstr(p, "lease")));
                if (streq(name, "NoFreeZone")) {
                        if (jstr(p, "device"))
                                return fail(EXIT_NO_SPACE, "%s: no free zone (released zones become free after their reset)",
                                            jstr(p, "device"));
                        return fail(EXIT_NO_SPACE, "no free zone on any device (released zones become free after their reset)");
                }
                if (streq(name, "ZoneLimitReached")) {
                        const char *device = jstr(p, "device");
                        long long max = jint(p, "maxActive", 0);

                        if (!device || streq(device, "any"))
                                return fail(EXIT_NO_SPACE, "every device is at its active zone limit: seal or release a lease first");
                        if (max > 0)
                                return fail(EXIT_NO_SPACE, "%s: active zone limit reached (max %lld): seal or release a lease first",
                                            device, max);
                        return fail(EXIT_NO_SPACE, "%s: active zone limit reached: seal or release a lease first", device);
                }
                if (streq(name, "TooLarge"))
                        return fail(EXIT_NO_SPACE, "%lld bytes do not fit in a zone (capacity %lld bytes, one object per zone)",
                                    jint(p, "size", 0), jint(p, "capacity", 0));
                if (streq(name, "ChecksumMismatch"))
                        return fail(EXIT_CHECKSUM, "checksum mismatch: expected %s, the zone holds %s",
                                    dash(jstr(p, "expected")), dash(jstr(p, "actual")));
                if (streq(name, "DeviceGone"))
                        return fail(EXIT_ZONE_IO, "%s: the device is gone", dash(jstr(p, "deviceId")));
                if (streq(name, "IOError"))
                        return fail(EXIT_ZONE_IO, "%s: I/O error: %s", verb,
                                    explain_errno(buf, sizeof buf, jstr(p, "message"), (int) jint(p, "errno", 0)));
                if (streq(name, "LeaseBusy"))
                        return fail(EXIT_LEASE_STATE, "%s: lease busy (an append, seal, release or read is in progress)",
                                    dash(jstr(p, "lease")));
                if (streq(name, "LabelExists"))
                        return fail(EXIT_LEASE_STATE, "%s: label already used on this device, by lease %s "
                                    "(labels are unique per device; see UniqueLabels= in blkmqd.conf(5))",
                                    dash(jstr(p, "label")), dash(jstr(p, "lease")));
                if (streq(name, "LabelNotFound"))
                        return fail(EXIT_NO_SUCH, "%s: no sealed object with this label", dash(jstr(p, "label")));
                if (streq(name, "LabelNotUnique"))
                        return fail(EXIT_LEASE_STATE, "%s: %lld sealed objects have this label: name the device "
                                    "(--device=) or the lease", dash(jstr(p, "label")), jint(p, "count", 0));
                if (streq(name, "WrongState"))
                        return fail(EXIT_LEASE_STATE, "%s: %s: not possible while the zone is %s", verb,
                                    dash(jstr(p, "lease")), dash(jstr(p, "state")));
        } else if (streq(error, "org.varlink.service.PermissionDenied")) {
                if (streq(verb, "zones append") || streq(verb, "zones seal") || streq(verb, "zones release"))
                        return fail(EXIT_PERMISSION, "permission denied: %s: the lease belongs to another user (only its owner or root)",
                                    verb);
                return fail(EXIT_PERMISSION, "permission denied: %s needs root or the AdminGroup", verb);
        } else if (streq(error, "org.varlink.service.InterfaceNotFound") &&
                   streq_ptr(jstr(p, "interface"), ZONES_INTERFACE))
                return fail(EXIT_PROTOCOL, "%s: this blkmqd has no zone allocator (" ZONES_INTERFACE ")", verb);
        else if (streq(error, "org.varlink.service.InvalidParameter") && streq(verb, "zones") &&
                 streq_ptr(jstr(p, "parameter"), "state"))
                return fail(EXIT_USAGE, "invalid state (free, allocated, writing, sealed, releasing, failed, empty)");
        else if (streq(error, "org.varlink.service.InvalidParameter") && streq(verb, "log-level") &&
                 streq_ptr(jstr(p, "parameter"), "level"))
                return fail(EXIT_USAGE, "invalid log level (emerg, alert, crit, err, warning, notice, info, debug)");
        else if (streq(error, "org.varlink.service.InvalidParameter") && streq(verb, "latency") &&
                 streq_ptr(jstr(p, "parameter"), "window"))
                return fail(EXIT_USAGE, "invalid window (1m, 10m, total)");

        _cleanup_free_ char *text = json_object_size(p) > 0 ? json_dumps(p, JSON_COMPACT) : NULL;
        return fail(EXIT_PROTOCOL, "%s: %s%s%s", verb, error, text ? " " : "", text ? text : "");
}

/* One call, one reply, on an open connection. Returns an exit status; on
 * EXIT_OK *ret holds the reply's parameters, otherwise the problem was
 * reported. params is borrowed (NULL: none). */
static int call_on(blkmq_varlink *v, const char *verb, const char *method, json_t *params, json_t **ret) {
        _cleanup_(json_decrefp) json_t *reply = NULL;
        const char *error = NULL;
        int r;

        r = blkmq_varlink_call_sync(v, method, params, &reply, &error);
        if (r < 0)
                return transport_error(r);
        if (error)
                return varlink_error(verb, error, reply);
        *ret = TAKE_PTR(reply);
        return EXIT_OK;
}

/* The same on a connection of its own. */
static int call(const char *verb, const char *method, json_t *params, json_t **ret) {
        _cleanup_(blkmq_varlink_freep) blkmq_varlink *v = NULL;
        int r;

        r = connect_daemon(&v);
        if (r != EXIT_OK)
                return r;
        return call_on(v, verb, method, params, ret);
}

static json_t *device_params(const char *device) {
        return device ? json_pack("{s:s}", "device", device) : json_object();
}

/* ---- formatting helpers ---- */

static void format_timestamp(char *buf, size_t size, long long usec, bool millis) {
        time_t t = (time_t) (usec / 1000000);
        struct tm tm;
        size_t n;

        if (!localtime_r(&t, &tm) || (n = strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm)) == 0) {
                snprintf(buf, size, "@%lld", usec / 1000000);
                return;
        }
        if (millis)
                snprintf(buf + n, size - n, ".%03lld", (usec / 1000) % 1000);
        else
                strftime(buf + n, size - n, " %Z", &tm);
}

static void format_duration(char *buf, size_t size, long long usec) {
        long long s = usec / 1000000;

        if (s >= 86400)
                snprintf(buf, size, "%lldd %lldh %lldmin", s / 86400, s % 86400 / 3600, s % 3600 / 60);
        else if (s >= 3600)
                snprintf(buf, size, "%lldh %lldmin %llds", s / 3600, s % 3600 / 60, s % 60);
        else if (s >= 60)
                snprintf(buf, size, "%lldmin %llds", s / 60, s % 60);
        else
                snprintf(buf, size, "%lld.%03llds", s, usec / 1000 % 1000);
}

static void format_bytes(char *buf, size_t size, long long bytes) {
        static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
        double v = (double) bytes;
        size_t u = 0;

        while (v >= 1024.0 && u + 1 < ELEMENTSOF(units)) {
                v /= 1024.0;
                u++;
        }
        if (u == 0)
                snprintf(buf, size, "%lld B", bytes);
        else
                snprintf(buf, size, "%.1f %s", v, units[u]);
}

static void field(const char *label, const char *value) {
        printf("%12s: %s\n", label, dash(value));
}

/* ---- results of Apply/Restore/Reload/SetProfile/ClearProfile ---- */

static int print_results(const char *verb, json_t *reply) {
        json_t *results = json_object_get(reply, "results"), *res;
        _cleanup_(table_freep) Table *t = NULL;
        int status = EXIT_OK;
        size_t i;

        if (arg_json)
                print_json(reply);
        else {
                static const char *const h[] = { "DEVICE", ">CHANGED", ">UNCHANGED", ">ADJUSTED", ">SKIPPED",
                                                 ">FAILED" };
                t = table_new(ELEMENTSOF(h), h);
                if (!t)
                        return fail(EXIT_PROTOCOL, "out of memory");
                json_array_foreach(results, i, res)
                        if (table_add(t, jstr(res, "device")) < 0 ||
                            table_addf(t, "%lld", jint(res, "changed", 0)) < 0 ||
                            table_addf(t, "%lld", jint(res, "unchanged", 0)) < 0 ||
                            table_addf(t, "%lld", jint(res, "adjusted", 0)) < 0 ||
                            table_addf(t, "%lld", jint(res, "skipped", 0)) < 0 ||
                            table_addf(t, "%lld", jint(res, "failed", 0)) < 0)
                                return fail(EXIT_PROTOCOL, "out of memory");
                if (table_rows(t) > 0)
                        table_print(t);
                if (arg_legend)
                        printf("%s%zu managed device%s.\n", table_rows(t) > 0 ? "\n" : "", table_rows(t),
                               table_rows(t) == 1 ? "" : "s");
        }

        json_array_foreach(results, i, res) {
                long long failed = jint(res, "failed", 0);
                if (failed > 0)
                        status = fail(EXIT_SETTING_FAILED, "%s: %s: %lld setting%s failed (see blkmqctl show %s)",
                                      verb, dash(jstr(res, "device")), failed, failed == 1 ? "" : "s",
                                      dash(jstr(res, "device")));
        }
        return status;
}

/* ---- verbs ---- */

static int verb_status(int argc, char **argv) {
        _cleanup_(json_decrefp) json_t *s = NULL;
        char buf[64];
        size_t i;
        json_t *f;
        int r;

        r = call("status", INTERFACE ".GetStatus", NULL, &s);
        if (r != EXIT_OK)
                return r;
        if (arg_json) {
                print_json(s);
                return EXIT_OK;
        }

        field("Version", jstr(s, "version"));
        field("State", jstr(s, "state"));
        format_duration(buf, sizeof buf, jint(s, "uptimeUsec", 0));
        field("Uptime", buf);
        field("Kernel", jstr(s, "kernel"));
        field("Address", arg_address);
        field("Profile", jstr(s, "profile") ? jstr(s, "profile") : "none");
        snprintf(buf, sizeof buf, "%lld known, %lld managed", jint(s, "devices", 0), jint(s, "managed", 0));
        field("Devices", buf);
        snprintf(buf, sizeof buf, "%lld changed, %lld failed", jint(s, "changed", 0), jint(s, "failed", 0));
        field("Settings", buf);
        if (jint(s, "loopIterations", 0) > 0) {
                snprintf(buf, sizeof buf, "%lld iteration%s, p99 %.1f ms, longest %.1f ms", jint(s, "loopIterations", 0), jint(s, "loopIterations", 0) == 1 ? "" : "s",
                         jint(s, "loopP99Usec", 0) / 1000.0, jint(s, "loopMaxUsec", 0) / 1000.0);
                field("Event loop", buf);
        }
        json_array_foreach(json_object_get(s, "configFiles"), i, f)
                printf("%12s%s %s\n", i == 0 ? "Config" : "", i == 0 ? ":" : " ", dash(json_string_value(f)));
        return EXIT_OK;
}

/* ListDevices on an open connection: appends each DeviceSummary to list.
 * Returns an exit status. */
static int list_devices_on(blkmq_varlink *v, const char *verb, json_t *list) {
        unsigned flags;
        json_t *d;
        int r;

        r = blkmq_varlink_call(v, INTERFACE ".ListDevices", NULL, BLKMQ_VARLINK_MORE, NULL, 0);
        if (r < 0)
                return transport_error(r);
        do {
                _cleanup_(json_decrefp) json_t *p = NULL;
                const char *error = NULL;

                r = blkmq_varlink_read_reply(v, &p, &error, &flags);
                if (r < 0)
                        return transport_error(r);
                if (error)
                        return varlink_error(verb, error, p);
                d = json_object_get(p, "device");
                if (json_is_object(d))
                        json_array_append(list, d);
        } while (flags & BLKMQ_VARLINK_REPLY_CONTINUES);
        return EXIT_OK;
}

static int verb_devices(int argc, char **argv) {
        _cleanup_(blkmq_varlink_freep) blkmq_varlink *v = NULL;
        _cleanup_(json_decrefp) json_t *list = json_array();
        _cleanup_(table_freep) Table *t = NULL;
        json_t *d;
        size_t i;
        int r;

        if (!list)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = connect_daemon(&v);
        if (r != EXIT_OK)
                return r;
        r = list_devices_on(v, "devices", list);
        if (r != EXIT_OK)
                return r;

        if (arg_json) {
                print_json(list);
                return EXIT_OK;
        }

        static const char *const h[] = { "DEVICE", "TRANSPORT", "ZONED", "MANAGED", "SCHEDULER",
                                         ">CHANGED", ">FAILED", "MATCHED" };
        t = table_new(ELEMENTSOF(h), h);
        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        json_array_foreach(list, i, d) {
                _cleanup_free_ char *matched = join_strings(json_object_get(d, "matched"), ",");
                if (table_add(t, jstr(d, "device")) < 0 || table_add(t, jstr(d, "transport")) < 0 ||
                    table_add(t, jstr(d, "zoned")) < 0 || table_add(t, jbool(d, "managed")) < 0 ||
                    table_add(t, jstr(d, "scheduler")) < 0 || table_addf(t, "%lld", jint(d, "changed", 0)) < 0 ||
                    table_addf(t, "%lld", jint(d, "failed", 0)) < 0 || table_add(t, matched) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        }
        if (table_rows(t) > 0)
                table_print(t);
        if (arg_legend)
                printf("%s%zu device%s listed.\n", table_rows(t) > 0 ? "\n" : "", table_rows(t),
                       table_rows(t) == 1 ? "" : "s");
        return EXIT_OK;
}

static void print_hctx_map(const char *map, const char *note) {
        _cleanup_free_ char *copy = map ? strdup(map) : NULL;
        char *save = NULL, *tok;
        bool first = true;

        if (!map && !note)
                return;
        printf("\nHardware queues %s CPUs (read-only):\n", arrow());
        if (copy)
                for (tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
                        char *colon = strchr(tok, ':');
                        if (colon) {
                                *colon = 0;
                                printf("  hctx%s %s %s\n", tok, arrow(), *colon + 1 ? colon + 1 : "(no CPU)");
                        } else
                                printf("  %s\n", tok);
                        first = false;
                }
        if (note)
                printf("  %s%s\n", first ? "" : "note: ", note);
}

static int verb_show(int argc, char **argv) {
        _cleanup_(json_decrefp) json_t *params = device_params(argv[1]), *reply = NULL;
        _cleanup_(table_freep) Table *t = NULL;
        _cleanup_free_ char *matched = NULL;
        json_t *d, *knobs, *k;
        char buf[512];
        bool notes = false;
        size_t i;
        int r;

        r = call("show", INTERFACE ".GetDevice", params, &reply);
        if (r != EXIT_OK)
                return r;
        if (arg_json) {
                print_json(reply);
                return EXIT_OK;
        }
        d = json_object_get(reply, "device");

        if (jstr(d, "devnode"))
                snprintf(buf, sizeof buf, "%s (%s)", dash(jstr(d, "device")), jstr(d, "devnode"));
        else
                snprintf(buf, sizeof buf, "%s", dash(jstr(d, "device")));
        field("Device", buf);
        field("Id", jstr(d, "id"));
        field("Transport", jstr(d, "transport"));
        field("Driver", jstr(d, "driver"));
        field("Model", jstr(d, "model"));
        field("Serial", jstr(d, "serial"));
        field("WWN", jstr(d, "wwn"));
        if (jint(d, "nsid", 0) > 0) {
                snprintf(buf, sizeof buf, "%lld", jint(d, "nsid", 0));
                field("NSID", buf);
        }
        field("Zoned", jstr(d, "zoned"));
        field("Rotational", jbool(d, "rotational"));
        format_bytes(buf, sizeof buf, jint(d, "sizeBytes", 0));
        field("Size", buf);
        if (jstr(d, "backingFile"))
                field("Backing file", jstr(d, "backingFile"));
        if (json_is_true(json_object_get(d, "hidden")) || json_is_true(json_object_get(d, "bioBased")))
                field("Queue", json_is_true(json_object_get(d, "hidden")) ? "hidden (multipath path device)"
                                                                         : "bio-based (no scheduler)");
        field("Managed", jbool(d, "managed"));
        matched = join_strings(json_object_get(d, "matched"), ", ");
        field("Matched", matched);
        field("Profile", jstr(d, "profile"));
        if (jint(d, "lastAppliedUsec", 0) > 0) {
                format_timestamp(buf, sizeof buf, jint(d, "lastAppliedUsec", 0), false);
                field("Last applied", buf);
        }
        snprintf(buf, sizeof buf, "%lld (%lld failed)", jint(d, "jobs", 0), jint(d, "failedJobs", 0));
        field("Jobs", buf);

        knobs = json_object_get(d, "knobs");
        static const char *const h[] = { "ATTRIBUTE", "ORIGINAL", "WANTED", "CURRENT", "OUTCOME", "SECTION" };
        t = table_new(ELEMENTSOF(h), h);
        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        json_array_foreach(knobs, i, k)
                if (table_add(t, jstr(k, "attribute")) < 0 || table_add(t, jstr(k, "original")) < 0 ||
                    table_add(t, jstr(k, "wanted")) < 0 || table_add(t, jstr(k, "current")) < 0 ||
                    table_add(t, jstr(k, "outcome")) < 0 || table_add(t, jstr(k, "section")) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        fputc('\n', stdout);
        if (table_rows(t) > 0)
                table_print(t);
        else
                printf("No settings.\n");

        json_array_foreach(knobs, i, k) {
                const char *note = jstr(k, "note");
                long long e = jint(k, "errno", 0);

                if (!note && e <= 0)
                        continue;
                if (!notes)
                        printf("\nNotes:\n");
                notes = true;
                printf("  %s: %s\n", dash(jstr(k, "attribute")), explain_errno(buf, sizeof buf, note, (int) e));
        }
        print_hctx_map(jstr(d, "hctxCpus"), jstr(d, "affinityNote"));
        return EXIT_OK;
}

static int verb_explain(int argc, char **argv) {
        _cleanup_(json_decrefp) json_t *params = device_params(argv[1]), *e = NULL;
        _cleanup_(table_freep) Table *t = NULL;
        _cleanup_free_ char *matched = NULL;
        json_t *s, *v;
        size_t i;
        int r;

        r = call("explain", INTERFACE ".Explain", params, &e);
        if (r != EXIT_OK)
                return r;
        if (arg_json) {
                print_json(e);
                return EXIT_OK;
        }

        matched = join_strings(json_object_get(e, "matched"), ", ");
        field("Device", jstr(e, "device"));
        field("Managed", jbool(e, "managed"));
        field("Matched", matched);
        field("Profile", jstr(e, "profile"));

        printf("\nSections:\n");
        json_array_foreach(json_object_get(e, "sections"), i, s)
                printf("  %s\n", dash(json_string_value(s)));
        if (json_array_size(json_object_get(e, "sections")) == 0)
                printf("  (no [Device] sections)\n");

        static const char *const h[] = { "KEY", "VALUE", "SECTION", "ORIGIN" };
        t = table_new(ELEMENTSOF(h), h);
        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        json_array_foreach(json_object_get(e, "values"), i, v)
                if (table_add(t, jstr(v, "key")) < 0 || table_add(t, jstr(v, "value")) < 0 ||
                    table_add(t, jstr(v, "section")) < 0 || table_add(t, jstr(v, "origin")) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        printf("\nValues:\n");
        if (table_rows(t) > 0)
                table_print(t);
        else
                printf("  (none: no section sets anything for this device)\n");
        if (jstr(e, "autotune"))
                printf("\nAutoTune: %s\n", jstr(e, "autotune"));
        return EXIT_OK;
}


static int verb_apply(int argc, char **argv) {
        _cleanup_(json_decrefp) json_t *params = device_params(argc > 1 ? argv[1] : NULL), *reply = NULL;
        bool restore = streq(argv[0], "restore");
        int r;

        r = call(argv[0], restore ? INTERFACE ".Restore" : INTERFACE ".Apply", params, &reply);
        if (r != EXIT_OK)
                return r;
        return print_results(argv[0], reply);
}

static int verb_reload(int argc, char **argv) {
        _cleanup_(json_decrefp) json_t *reply = NULL;
        int r;

        r = call("reload", INTERFACE ".Reload", NULL, &reply);
        if (r != EXIT_OK)
                return r;
        return print_results("reload", reply);
}

static int verb_profile(int argc, char **argv) {
        _cleanup_(json_decrefp) json_t *params = NULL, *reply = NULL;
        int r;

        if (arg_clear == (argc > 1))
                return fail(EXIT_USAGE, "profile: give either a profile NAME or --clear");
        if (arg_clear)
                r = call("profile", INTERFACE ".ClearProfile", NULL, &reply);
        else {
                params = json_pack("{s:s}", "profile", argv[1]);
                if (!params)
                        return fail(EXIT_PROTOCOL, "out of memory");
                r = call("profile", INTERFACE ".SetProfile", params, &reply);
        }
        if (r != EXIT_OK)
                return r;
        return print_results("profile", reply);
}

static bool log_level_valid(const char *l) {
        static const char *const names[] = { "emerg", "alert", "crit",   "err",  "warning",
                                             "notice", "info", "debug", "error" };

        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (streq(l, names[i]))
                        return true;
        return l[0] >= '0' && l[0] <= '7' && l[1] == 0;
}

static int verb_log_level(int argc, char **argv) {
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s}", "level", argv[1]), *reply = NULL;
        int r;

        /* The daemon checks too; this names the culprit. */
        if (!log_level_valid(argv[1]))
                return fail(EXIT_USAGE, "%s: invalid log level (emerg, alert, crit, err, warning, notice, info, debug)",
                            argv[1]);
        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = call("log-level", INTERFACE ".SetLogLevel", params, &reply);
        if (r != EXIT_OK)
                return r;
        if (arg_json)
                print_json(reply);
        return EXIT_OK;
}

static void on_quit(int sig) {
        quit = 1;
}

static void print_event(json_t *p) {
        const char *event = dash(jstr(p, "event")), *device = jstr(p, "device");
        json_t *res = json_object_get(p, "result");
        struct timespec ts;
        char when[64];

        if (streq(event, "subscribed"))
                return;
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
}

/* SIGINT and SIGTERM set the quit flag, without SA_RESTART, so that a
 * blocking wait returns and the verb can end cleanly. */
static void catch_quit_signals(void) {
        struct sigaction sa = { .sa_handler = on_quit };

        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
}

/* Calls METHOD with "more" and hands each reply to RENDER (last: the one
 * without "continues") until the stream ends, an error comes, or a signal
 * stops the wait (QUIT_NOTE is printed then, if any). The library comes
 * back within MONITOR_TICK_USEC, so a signal is seen at once. */
typedef void (*stream_render_fn)(json_t *p, bool last, void *userdata);

static int stream_call(const char *verb, const char *method, json_t *params, stream_render_fn render, void *userdata,
                       const char *quit_note) {
        _cleanup_(blkmq_varlink_freep) blkmq_varlink *v = NULL;
        unsigned flags;
        int r;

        catch_quit_signals();
        r = connect_daemon(&v);
        if (r != EXIT_OK)
                return r;
        r = blkmq_varlink_call(v, method, params, BLKMQ_VARLINK_MORE, NULL, 0);
        if (r < 0)
                return transport_error(r);
        blkmq_varlink_set_timeout(v, MONITOR_TICK_USEC);

        for (;;) {
                _cleanup_(json_decrefp) json_t *p = NULL;
                const char *error = NULL;

                if (quit) {
                        if (quit_note)
                                printf("%s\n", quit_note);
                        return EXIT_OK;
                }
                r = blkmq_varlink_read_reply(v, &p, &error, &flags);
                if (r == -ETIMEDOUT)
                        continue;
                if (r < 0)
                        return transport_error(r);
                if (error)
                        return varlink_error(verb, error, p);
                render(p, !(flags & BLKMQ_VARLINK_REPLY_CONTINUES), userdata);
                fflush(stdout);
                if (!(flags & BLKMQ_VARLINK_REPLY_CONTINUES))
                        return EXIT_OK; /* the daemon ended the stream */
        }
}

static void render_event(json_t *p, bool last, void *userdata) {
        if (arg_json)
                print_json(p);
        else
                print_event(p);
}

static int verb_monitor(int argc, char **argv) {
        return stream_call("monitor", INTERFACE ".Monitor", NULL, render_event, NULL, NULL);
}

/* ---- trial: closed-loop tuning ---- */

static double jreal(json_t *o, const char *key) {
        json_t *v = json_object_get(o, key);
        return json_is_number(v) ? json_number_value(v) : 0;
}

static void print_trial_table(json_t *t) {
        json_t *c;
        size_t i;

        printf("  %-34s %6s %12s %11s %10s %9s %s\n", "SETTING", "EPOCHS", "READ AWAIT", "WRITE MB/s", "READ MB/s",
               "IN FLIGHT", "");
        json_array_foreach(json_object_get(t, "candidates"), i, c) {
                const char *mark = json_is_true(json_object_get(c, "refused"))              ? "refused by the kernel"
                                   : json_is_false(json_object_get(c, "admissible"))         ? "outside the bound"
                                   : json_is_true(json_object_get(c, "baseline"))            ? "(before the trial)"
                                                                                             : "";
                printf("  %-34s %6lld %9.2f ms %11.1f %10.1f %9.1f %s\n", dash(jstr(c, "setting")), jint(c, "epochs", 0),
                       jreal(c, "readAwaitMs"), jreal(c, "writeMBps"), jreal(c, "readMBps"), jreal(c, "inFlight"), mark);
        }
}

static void render_trial(json_t *p, bool last, void *userdata) {
        json_t *t = json_object_get(p, "trial");

        if (arg_json)
                print_json(p);
        else if (!last) {
                printf("epoch %lld/%lld: %s measured\n", jint(t, "epoch", 0) - 1, jint(t, "epochs", 0),
                       dash(jstr(t, "measuring")));
                print_trial_table(t);
        } else {
                printf("Trial of %s: %s\n", dash(jstr(p, "device")), dash(jstr(t, "state")));
                print_trial_table(t);
                if (jstr(t, "abortReason"))
                        printf("Ended early: %s\n", jstr(t, "abortReason"));
                printf("Decision: %s %s: %s (confidence %.1f %%)\n", dash(jstr(t, "verdict")),
                       dash(jstr(t, "winner")), dash(jstr(t, "reason")), jreal(t, "confidence") * 100);
                printf("Scheduler switches: %lld, time in applies: %lld ms\n", jint(t, "schedulerSwitches", 0),
                       jint(t, "applyUsec", 0) / 1000);
        }
}

static int verb_trial(int argc, char **argv) {
        _cleanup_(json_decrefp) json_t *params = device_params(argv[1]);
        _cleanup_free_ char *note = NULL;

        if (asprintf(&note, "Interrupted; the trial goes on in the daemon (blkmqctl show %s).", argv[1]) < 0)
                return fail(EXIT_PROTOCOL, "out of memory");
        return stream_call("trial", INTERFACE ".Trial", params, render_trial, NULL, note);
}

/* ---- latency and top: io.blkmqd.Metrics ---- */

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

static json_t *find_window(json_t *device, const char *window) {
        json_t *w;
        size_t i;

        json_array_foreach(json_object_get(device, "windows"), i, w)
                if (streq_ptr(jstr(w, "window"), window))
                        return w;
        return NULL;
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

static int verb_latency(int argc, char **argv) {
        _cleanup_(blkmq_varlink_freep) blkmq_varlink *v = NULL;
        _cleanup_(json_decrefp) json_t *hparams = json_pack("{s:s}", "device", argv[1]),
                                       *gparams = device_params(argv[1]), *h = NULL, *g = NULL;
        const char *window;
        long long count;
        json_t *d, *w;
        char buf[64], size[32], interval[32];
        int r;

        if (!hparams || !gparams || (arg_window && json_object_set_new(hparams, "window", json_string(arg_window)) < 0))
                return fail(EXIT_PROTOCOL, "out of memory");
        r = connect_daemon(&v);
        if (r != EXIT_OK)
                return r;
        r = call_on(v, "latency", METRICS_INTERFACE ".Histogram", hparams, &h);
        if (r != EXIT_OK)
                return r;
        r = call_on(v, "latency", METRICS_INTERFACE ".Get", gparams, &g);
        if (r != EXIT_OK)
                return r;
        d = json_array_get(json_object_get(g, "devices"), 0);
        if (arg_json) {
                _cleanup_(json_decrefp) json_t *o = json_pack("{s:O, s:O?}", "histogram", h, "metrics", d);
                if (!o)
                        return fail(EXIT_PROTOCOL, "out of memory");
                print_json(o);
                return EXIT_OK;
        }

        window = dash(jstr(h, "window"));
        w = find_window(d, window);
        count = jint(h, "count", 0);
        if (arg_legend) {
                format_bytes(size, sizeof size, jint(d, "sizeBytes", 0));
                format_duration(interval, sizeof interval, jint(d, "intervalUsec", 0));
                printf("%s: %lld probe read%s %s (%s every %s%s)\n", dash(jstr(h, "device")), count,
                       count == 1 ? "" : "s", window_text(window), size, interval,
                       json_is_true(json_object_get(d, "polled")) ? ", polled" : "");
        }
        if (count > 0) {
                static const struct {
                        const char *label, *key;
                } pcts[] = {
                        { "p50", "p50Ns" }, { "p90", "p90Ns" }, { "p99", "p99Ns" }, { "p99.9", "p999Ns" }, { "max", "maxNs" },
                };

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

static const char *scheduler_of(json_t *list, const char *device) {
        json_t *d;
        size_t i;

        json_array_foreach(list, i, d)
                if (streq_ptr(jstr(d, "device"), device))
                        return jstr(d, "scheduler");
        return NULL;
}

/* A number field divided by div, as "%.Nf"; "-" when absent. */
static int table_add_float(Table *t, json_t *o, const char *key, int decimals, double div) {
        json_t *v = json_object_get(o, key);

        if (!json_is_number(v))
                return table_add(t, NULL);
        return table_addf(t, "%.*f", decimals, json_number_value(v) / div);
}

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
                char p99[32];

                format_latency(p99, sizeof p99, jint(find_window(d, "1m"), "p99Ns", -1));
                if (table_add(t, jstr(d, "device")) < 0 || table_add(t, scheduler_of(list, jstr(d, "device"))) < 0 ||
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

static int top_iteration(blkmq_varlink *v, unsigned long n) {
        _cleanup_(json_decrefp) json_t *g = NULL, *list = json_array();
        json_t *devices, *d;
        struct timespec ts;
        size_t i;
        int r;

        if (!list)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = call_on(v, "top", METRICS_INTERFACE ".Get", NULL, &g);
        if (r != EXIT_OK)
                return r;
        r = list_devices_on(v, "top", list);
        if (r != EXIT_OK)
                return r;
        devices = json_object_get(g, "devices");
        clock_gettime(CLOCK_REALTIME, &ts);

        if (arg_json) {
                /* One object a line, also on a terminal: a stream for jq -c and friends. */
                _cleanup_(json_decrefp) json_t *o = NULL;

                json_array_foreach(devices, i, d)
                        if (scheduler_of(list, jstr(d, "device")))
                                json_object_set_new(d, "scheduler", json_string(scheduler_of(list, jstr(d, "device"))));
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

static int verb_top(int argc, char **argv) {
        _cleanup_(blkmq_varlink_freep) blkmq_varlink *v = NULL;
        struct timespec next;
        int r;

        /* A signal ends the sleep between refreshes. */
        catch_quit_signals();

        r = connect_daemon(&v);
        if (r != EXIT_OK)
                return r;
        clock_gettime(CLOCK_MONOTONIC, &next);
        for (unsigned long n = 0; !quit && (arg_count == 0 || n < arg_count); n++) {
                if (n > 0) {
                        /* Absolute deadlines: the refreshes do not drift by the time each takes. */
                        next.tv_sec += (time_t) (arg_interval_usec / 1000000);
                        next.tv_nsec += (long) (arg_interval_usec % 1000000) * 1000;
                        if (next.tv_nsec >= 1000000000L) {
                                next.tv_sec++;
                                next.tv_nsec -= 1000000000L;
                        }
                        while (!quit && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
                                ;
                        if (quit)
                                break;
                }
                r = top_iteration(v, n);
                if (r != EXIT_OK)
                        return r;
                if (fflush(stdout) != 0)
                        return fail(EXIT_PROTOCOL, "writing output: %s", strerror(errno));
        }
        return EXIT_OK;
}

/* ---- zones and stage: io.blkmqd.Zones ---- */

static const char *const zone_states[] = { "free", "allocated", "writing", "sealed", "releasing", "failed", "empty" };

static bool zone_state_valid(const char *s) {
        for (size_t i = 0; i < ELEMENTSOF(zone_states); i++)
                if (streq(s, zone_states[i]))
                        return true;
        return false;
}

/* Bytes: an integer with an optional binary suffix (K, M, G, T, or KiB,
 * MiB, GiB, TiB, or B): "4096", "64M", "1GiB". */
static int parse_size(const char *s, uint64_t *ret) {
        static const struct {
                const char *suffix;
                uint64_t factor;
        } suffixes[] = {
                { "", 1 },          { "B", 1 },
                { "K", 1ULL << 10 }, { "KiB", 1ULL << 10 }, { "M", 1ULL << 20 }, { "MiB", 1ULL << 20 },
                { "G", 1ULL << 30 }, { "GiB", 1ULL << 30 }, { "T", 1ULL << 40 }, { "TiB", 1ULL << 40 },
        };
        unsigned long long v;
        char *end;

        if (!*s || *s == '-' || *s == '+' || *s == ' ')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno != 0 || end == s)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(suffixes); i++)
                if (streq(end, suffixes[i].suffix)) {
                        if (v > (unsigned long long) INT64_MAX / suffixes[i].factor)
                                return -ERANGE;
                        *ret = v * suffixes[i].factor;
                        return 0;
                }
        return -EINVAL;
}

/* "64.0 MiB (67108864 bytes)"; a plain "512 B" below 1 KiB. */
static void format_bytes_exact(char *buf, size_t size, long long bytes) {
        char h[32];

        format_bytes(h, sizeof h, bytes);
        if (bytes < 1024)
                snprintf(buf, size, "%s", h);
        else
                snprintf(buf, size, "%s (%lld bytes)", h, bytes);
}

/* A ZoneInfo, one field a line; lease: from the reply, if the zone has none. */
static void print_zone(json_t *z, const char *lease) {
        char buf[256], a[64], b[64];

        field("Lease", jstr(z, "lease") ? jstr(z, "lease") : lease);
        if (jstr(z, "device"))
                snprintf(buf, sizeof buf, "%s (%s)", jstr(z, "device"), dash(jstr(z, "deviceId")));
        else if (strncmp(dash(jstr(z, "deviceId")), "emu:", 4) == 0)
                /* Emulated zones have no kernel name. */
                snprintf(buf, sizeof buf, "%s (emulated)", jstr(z, "deviceId"));
        else
                snprintf(buf, sizeof buf, "%s (gone)", dash(jstr(z, "deviceId")));
        field("Device", buf);
        snprintf(buf, sizeof buf, "%lld", jint(z, "zoneIndex", -1));
        field("Zone", buf);
        snprintf(buf, sizeof buf, "%lld", jint(z, "startLba", -1));
        field("Start LBA", buf);
        /* The LBA above counts 512-byte sectors (as blkzone does; nvme-cli
         * counts the namespace's own blocks): the byte offset says it
         * without a unit to get wrong. */
        snprintf(buf, sizeof buf, "%lld", jint(z, "start", -1));
        field("Start byte", buf);
        field("State", jstr(z, "state"));
        field("Condition", jstr(z, "condition"));
        format_bytes_exact(a, sizeof a, jint(z, "bytesWritten", 0));
        format_bytes(b, sizeof b, jint(z, "capacity", 0));
        snprintf(buf, sizeof buf, "%s of %s", a, b);
        field("Written", buf);
        if (jstr(z, "label"))
                field("Label", jstr(z, "label"));
        if (jint(z, "ownerUid", -1) >= 0) {
                snprintf(buf, sizeof buf, "%lld", jint(z, "ownerUid", -1));
                field("Owner UID", buf);
        }
        if (jstr(z, "sha256"))
                field("SHA256", jstr(z, "sha256"));
        if (jint(z, "sealedUsec", 0) > 0) {
                format_timestamp(buf, sizeof buf, jint(z, "sealedUsec", 0), false);
                field("Sealed", buf);
        }
        if (json_object_get(z, "scrub")) {
                json_t *sc = json_object_get(z, "scrub");
                format_timestamp(a, sizeof a, jint(sc, "usec", 0), false);
                snprintf(buf, sizeof buf, "%s at %s%s%s", dash(jstr(sc, "result")), a, jstr(sc, "message") ? ": " : "",
                         jstr(sc, "message") ?: "");
                field("Checked", buf);
        }
        snprintf(buf, sizeof buf, "%lld", jint(z, "resetCount", 0));
        field("Resets", buf);
        if (jstr(z, "note"))
                field("Note", jstr(z, "note"));
}

/* The reply of a call that returns {zone} (and maybe more): JSON or fields. */
static int print_zone_reply(json_t *reply, const char *lease) {
        if (arg_json)
                print_json(reply);
        else
                print_zone(json_object_get(reply, "zone"), lease);
        return EXIT_OK;
}

static int zones_list_devices(void) {
        _cleanup_(json_decrefp) json_t *reply = NULL;
        _cleanup_(table_freep) Table *t = NULL;
        json_t *devices, *d;
        size_t i;
        int r;

        r = call("zones", ZONES_INTERFACE ".ListDevices", NULL, &reply);
        if (r != EXIT_OK)
                return r;
        devices = json_object_get(reply, "devices");
        if (arg_json) {
                print_json(devices ? devices : reply);
                return EXIT_OK;
        }

        static const char *const h[] = { "DEVICE", "ID",     "BACKEND",  ">ZONES",  ">SIZE",      ">CAP",
                                         ">FREE",  ">ALLOC", ">WRITING", ">SEALED", ">RELEASING", ">FAILED" };
        t = table_new(ELEMENTSOF(h), h);
        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        for (size_t c = 0; c < ELEMENTSOF(h); c++)
                t->fixed[c] = c != 1; /* only ID (long: wwn:..., emu:/path) gives way */
        json_array_foreach(devices, i, d) {
                char size[32], cap[32];

                format_bytes(size, sizeof size, jint(d, "zoneSize", 0));
                format_bytes(cap, sizeof cap, jint(d, "zoneCapacity", 0));
                const char *id = jstr(d, "deviceId");
                /* An emulated device has no kernel name: its file is what a person knows it by. */
                const char *dev = jstr(d, "device") ?: (id && strncmp(id, "emu:", 4) == 0 ? id + 4 : NULL);
                if (table_add(t, dev) < 0 || table_add(t, id) < 0 ||
                    table_add(t, jstr(d, "backend")) < 0 || table_addf(t, "%lld", jint(d, "zones", 0)) < 0 ||
                    table_add(t, size) < 0 || table_add(t, cap) < 0 ||
                    table_addf(t, "%lld", jint(d, "free", 0)) < 0 || table_addf(t, "%lld", jint(d, "allocated", 0)) < 0 ||
                    table_addf(t, "%lld", jint(d, "writing", 0)) < 0 || table_addf(t, "%lld", jint(d, "sealed", 0)) < 0 ||
                    table_addf(t, "%lld", jint(d, "releasing", 0)) < 0 || table_addf(t, "%lld", jint(d, "failed", 0)) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        }
        if (table_rows(t) > 0)
                table_print(t);
        if (arg_legend)
                printf("%s%zu zoned device%s listed.\n", table_rows(t) > 0 ? "\n" : "", table_rows(t),
                       table_rows(t) == 1 ? "" : "s");
        /* Damaged objects are said even without a legend, on stderr: a
         * script reading the table still sees the table alone. */
        json_array_foreach(devices, i, d)
                if (jint(d, "damaged", 0) > 0)
                        fprintf(stderr, "%s: %lld sealed object%s no longer read%s back to %s SHA-256 "
                                "(never repaired; see blkmqctl zones objects).\n",
                                jstr(d, "deviceId"), jint(d, "damaged", 0), jint(d, "damaged", 0) == 1 ? "" : "s",
                                jint(d, "damaged", 0) == 1 ? "s" : "", jint(d, "damaged", 0) == 1 ? "its" : "their");
        return EXIT_OK;
}

static int list_zones(const char *verb, const char *device, const char *state, json_t **ret) {
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s}", "device", device);

        if (!params || (state && json_object_set_new(params, "state", json_string(state)) < 0))
                return fail(EXIT_PROTOCOL, "out of memory");
        return call(verb, ZONES_INTERFACE ".ListZones", params, ret);
}

/* A sealed zone whose last check failed is not just "sealed": the table
 * says so in the same column, as one word a script cannot mistake. */
static const char *zone_state_text(json_t *z, char *buf, size_t size) {
        json_t *sc = json_object_get(z, "scrub");
        const char *state = jstr(z, "state");

        if (!sc || streq_ptr(jstr(sc, "result"), "ok") || !streq_ptr(state, "sealed"))
                return state;
        snprintf(buf, size, "sealed!%s", jstr(sc, "result") ?: "?");
        return buf;
}

static int zones_list_zones(const char *device) {
        _cleanup_(json_decrefp) json_t *reply = NULL;
        _cleanup_(table_freep) Table *t = NULL;
        json_t *zones, *z;
        size_t i;
        int r;

        r = list_zones("zones", device, arg_state, &reply);
        if (r != EXIT_OK)
                return r;
        zones = json_object_get(reply, "zones");
        if (arg_json) {
                print_json(zones ? zones : reply);
                return EXIT_OK;
        }

        static const char *const h[] = { ">INDEX", ">START-LBA", ">WP", "COND", "STATE", "LEASE", "LABEL", ">BYTES" };
        t = table_new(ELEMENTSOF(h), h);
        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        for (size_t c = 0; c < ELEMENTSOF(h); c++)
                t->fixed[c] = c != 5 && c != 6; /* LEASE and LABEL give way */
        char statebuf[64];
        json_array_foreach(zones, i, z)
                if (table_addf(t, "%lld", jint(z, "zoneIndex", -1)) < 0 ||
                    table_addf(t, "%lld", jint(z, "startLba", -1)) < 0 ||
                    table_addf(t, "%lld", jint(z, "writePointer", 0) / (long long) SECTOR_SIZE) < 0 ||
                    table_add(t, jstr(z, "condition")) < 0 || table_add(t, zone_state_text(z, statebuf, sizeof statebuf)) < 0 ||
                    table_add(t, jstr(z, "lease")) < 0 || table_add(t, jstr(z, "label")) < 0 ||
                    table_addf(t, "%lld", jint(z, "bytesWritten", 0)) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        if (table_rows(t) > 0)
                table_print(t);
        if (arg_legend)
                printf("%s%zu zone%s listed (START-LBA and WP in 512-byte sectors).\n", table_rows(t) > 0 ? "\n" : "", table_rows(t),
                       table_rows(t) == 1 ? "" : "s");
        return EXIT_OK;
}

/* zones free DEV: the start LBA of the first free, empty zone, alone on a
 * line, for $(...) in scripts. */
static int zones_free(const char *device) {
        _cleanup_(json_decrefp) json_t *reply = NULL;
        json_t *z;
        size_t i;
        int r;

        r = list_zones("zones free", device, "free", &reply);
        if (r != EXIT_OK)
                return r;
        json_array_foreach(json_object_get(reply, "zones"), i, z) {
                if (!streq_ptr(jstr(z, "state"), "free") || !streq_ptr(jstr(z, "condition"), "empty"))
                        continue;
                if (arg_json)
                        print_json(z);
                else
                        printf("%lld\n", jint(z, "startLba", -1));
                return EXIT_OK;
        }
        return fail(EXIT_NO_SUCH, "%s: no free empty zone", device);
}

static int zones_alloc(void) {
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:I}", "size", (json_int_t) arg_size), *reply = NULL;
        int r;

        if (!params || (arg_device && json_object_set_new(params, "device", json_string(arg_device)) < 0) ||
            (arg_label && json_object_set_new(params, "label", json_string(arg_label)) < 0))
                return fail(EXIT_PROTOCOL, "out of memory");
        r = call("zones alloc", ZONES_INTERFACE ".Allocate", params, &reply);
        if (r != EXIT_OK)
                return r;
        return print_zone_reply(reply, jstr(reply, "lease"));
}

/* ---- append: progress, fd passing, inline base64 ---- */

static bool progress_shown = false;

/* A bar on stderr, only on a terminal; total 0: unknown (a pipe). */
static void progress(const char *what, uint64_t done, uint64_t total) {
        char d[32], tot[32];
        unsigned width = columns() > 60 ? 30 : 10;

        if (!isatty(STDERR_FILENO))
                return;
        format_bytes(d, sizeof d, (long long) done);
        if (total > 0) {
                unsigned fill = done >= total ? width : (unsigned) ((double) done * width / (double) total);
                char bar[64];

                for (unsigned i = 0; i < width; i++)
                        bar[i] = i < fill ? '#' : '-';
                bar[width] = 0;
                format_bytes(tot, sizeof tot, (long long) total);
                fprintf(stderr, "\r%s [%s] %3u%%  %s / %s\033[K", what, bar,
                        done >= total ? 100U : (unsigned) ((double) done * 100 / (double) total), d, tot);
        } else
                fprintf(stderr, "\r%s %s\033[K", what, d);
        progress_shown = true;
}

static void progress_done(void) {
        if (progress_shown)
                fputs("\r\033[K", stderr);
        progress_shown = false;
}

/* Append(lease, fd) with "more" on v: the daemon reads fd to its end and
 * sends the bytes appended so far as it goes. Returns an exit status; on
 * EXIT_OK *ret is the last reply. */
/* method(params with "fd": 0) with "more", passing fd: the progress
 * replies carry key (bytes so far), shown as what on a terminal. Returns an
 * exit status; on EXIT_OK *ret is the last reply. */
static int call_fd_progress(blkmq_varlink *v, const char *verb, const char *method, json_t *params, int fd,
                            const char *what, const char *key, uint64_t total, json_t **ret) {
        unsigned flags = 0;
        int r;

        r = blkmq_varlink_call(v, method, params, BLKMQ_VARLINK_MORE, &fd, 1);
        if (r < 0)
                return transport_error(r);
        do {
                _cleanup_(json_decrefp) json_t *p = NULL;
                const char *error = NULL;

                r = blkmq_varlink_read_reply(v, &p, &error, &flags);
                if (r < 0) {
                        progress_done();
                        return transport_error(r);
                }
                if (error) {
                        progress_done();
                        return varlink_error(verb, error, p);
                }
                if (flags & BLKMQ_VARLINK_REPLY_CONTINUES)
                        progress(what, (uint64_t) jint(p, key, 0), total);
                else
                        *ret = TAKE_PTR(p);
        } while (flags & BLKMQ_VARLINK_REPLY_CONTINUES);
        progress_done();
        return EXIT_OK;
}

static int append_fd(blkmq_varlink *v, const char *verb, const char *lease, int fd, uint64_t total, json_t **ret) {
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s, s:i}", "lease", lease, "fd", 0);

        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        return call_fd_progress(v, verb, ZONES_INTERFACE ".Append", params, fd, "append", "bytesWritten", total, ret);
}

static char *base64_encode(const uint8_t *p, size_t n) {
        static const char table[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
        size_t i;

        if (!out)
                return NULL;
        for (i = 0; i + 2 < n; i += 3) {
                uint32_t v = (uint32_t) p[i] << 16 | (uint32_t) p[i + 1] << 8 | p[i + 2];
                *o++ = table[v >> 18 & 63];
                *o++ = table[v >> 12 & 63];
                *o++ = table[v >> 6 & 63];
                *o++ = table[v & 63];
        }
        if (i < n) {
                uint32_t v = (uint32_t) p[i] << 16 | (i + 1 < n ? (uint32_t) p[i + 1] << 8 : 0);
                *o++ = table[v >> 18 & 63];
                *o++ = table[v >> 12 & 63];
                *o++ = i + 1 < n ? table[v >> 6 & 63] : '=';
                *o++ = '=';
        }
        *o = 0;
        return out;
}

/* Reads up to size bytes, short only at end of file. */
static ssize_t read_full(int fd, uint8_t *buf, size_t size) {
        size_t got = 0;

        while (got < size) {
                ssize_t n = read(fd, buf + got, size - got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                got += (size_t) n;
        }
        return (ssize_t) got;
}

/* Append(lease, data) per chunk of at most INLINE_CHUNK bytes, for clients
 * that cannot pass fds; the last reply in *ret (its bytesWritten, as
 * blkmqd's, counts the zone's bytes, not this call's). */
static int append_inline(blkmq_varlink *v, const char *lease, const char *path, int fd, uint64_t total, json_t **ret) {
        _cleanup_free_ uint8_t *buf = malloc(INLINE_CHUNK);
        _cleanup_(json_decrefp) json_t *last = NULL;
        uint64_t done = 0;
        int r;

        if (!buf)
                return fail(EXIT_PROTOCOL, "out of memory");
        for (;;) {
                _cleanup_(json_decrefp) json_t *params = NULL, *reply = NULL;
                _cleanup_free_ char *data = NULL;
                ssize_t n = read_full(fd, buf, INLINE_CHUNK);

                if (n < 0) {
                        progress_done();
                        return fail(EXIT_USAGE, "%s: %s", path, strerror((int) -n));
                }
                if (n == 0)
                        break;
                data = base64_encode(buf, (size_t) n);
                params = data ? json_pack("{s:s, s:s}", "lease", lease, "data", data) : NULL;
                if (!params)
                        return fail(EXIT_PROTOCOL, "out of memory");
                r = call_on(v, "zones append", ZONES_INTERFACE ".Append", params, &reply);
                if (r != EXIT_OK) {
                        progress_done();
                        return r;
                }
                done += (uint64_t) n;
                progress("append", done, total);
                json_decref(last);
                last = TAKE_PTR(reply);
                if ((size_t) n < INLINE_CHUNK)
                        break;
        }
        progress_done();
        if (!last) {
                /* Nothing to send: the zone as it is. */
                _cleanup_(json_decrefp) json_t *params = json_pack("{s:s}", "lease", lease), *reply = NULL;

                if (!params)
                        return fail(EXIT_PROTOCOL, "out of memory");
                r = call_on(v, "zones append", ZONES_INTERFACE ".Get", params, &reply);
                if (r != EXIT_OK)
                        return r;
                last = json_pack("{s:I, s:O}", "bytesWritten", (json_int_t) jint(json_object_get(reply, "zone"), "bytesWritten", 0),
                                 "zone", json_object_get(reply, "zone"));
                if (!last)
                        return fail(EXIT_PROTOCOL, "out of memory");
        }
        *ret = TAKE_PTR(last);
        return EXIT_OK;
}

static int zones_append(const char *lease, const char *path) {
        _cleanup_(blkmq_varlink_freep) blkmq_varlink *v = NULL;
        _cleanup_(json_decrefp) json_t *reply = NULL;
        _cleanup_close_ int opened = -EBADF;
        struct stat st;
        uint64_t total = 0;
        int fd, r;

        if (streq(path, "-"))
                fd = STDIN_FILENO;
        else {
                opened = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
                if (opened < 0)
                        return fail(EXIT_USAGE, "%s: %s", path, strerror(errno));
                fd = opened;
        }
        if (fstat(fd, &st) < 0)
                return fail(EXIT_USAGE, "%s: %s", path, strerror(errno));
        if (S_ISDIR(st.st_mode))
                return fail(EXIT_USAGE, "%s: is a directory", path);
        if (S_ISREG(st.st_mode))
                total = (uint64_t) st.st_size;

        r = connect_daemon(&v);
        if (r != EXIT_OK)
                return r;
        if (arg_inline)
                r = append_inline(v, lease, path, fd, total, &reply);
        else
                r = append_fd(v, "zones append", lease, fd, total, &reply);
        if (r != EXIT_OK)
                return r;
        return print_zone_reply(reply, lease);
}

static bool sha256_hex_valid(const char *s) {
        size_t n = 0;

        for (; s[n]; n++)
                if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f') || (s[n] >= 'A' && s[n] <= 'F')))
                        return false;
        return n == 2 * SHA256_DIGEST_SIZE;
}

static int zones_lease_call(const char *verb, const char *method, const char *lease, const char *sha) {
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s}", "lease", lease), *reply = NULL;
        char lower[SHA256_HEX_SIZE];
        int r;

        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        if (sha) {
                if (!sha256_hex_valid(sha))
                        return fail(EXIT_USAGE, "%s: not a SHA-256 (64 hex digits)", sha);
                for (size_t i = 0; i < sizeof lower; i++)
                        lower[i] = (char) (sha[i] >= 'A' && sha[i] <= 'F' ? sha[i] - 'A' + 'a' : sha[i]);
                if (json_object_set_new(params, "sha256", json_string(lower)) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        }
        r = call(verb, method, params, &reply);
        if (r != EXIT_OK)
                return r;
        return print_zone_reply(reply, lease);
}

static int zones_get(int argc, char **argv) {
        _cleanup_(json_decrefp) json_t *params = NULL, *reply = NULL;
        int r;

        if (argc == 3)
                params = json_pack("{s:s}", "lease", argv[2]);
        else {
                char *end;
                unsigned long idx;

                errno = 0;
                idx = strtoul(argv[3], &end, 10);
                if (errno != 0 || end == argv[3] || *end != 0 || argv[3][0] == '-' || idx > INT32_MAX)
                        return fail(EXIT_USAGE, "%s: not a zone index", argv[3]);
                params = json_pack("{s:s, s:I}", "device", argv[2], "zoneIndex", (json_int_t) idx);
        }
        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = call("zones get", ZONES_INTERFACE ".Get", params, &reply);
        if (r != EXIT_OK)
                return r;
        return print_zone_reply(reply, argc == 3 ? argv[2] : NULL);
}

/* A zoned device as a person types it: nvme0n1, /dev/nvme0n1, its ID, or
 * an emulation file by its path (emu:PATH, or just PATH, relative or not).
 * Paths become absolute here, where the working directory is the user's. */
static const char *device_arg(const char *in, char buf[static PATH_MAX + 8]) {
        const char *path = strncmp(in, "emu:", 4) == 0 ? in + 4 : in;
        char real[PATH_MAX];

        struct stat st;

        /* nvme0n1, /dev/nvme0n1, an ID: as they are. A path: only to a file. */
        if (strncmp(in, "/dev/", 5) == 0 || stat(path, &st) < 0 || !S_ISREG(st.st_mode) || !realpath(path, real))
                return in;
        snprintf(buf, PATH_MAX + 8, "emu:%s", real);
        return buf;
}

/* ---- objects: zones objects, find, cat, verify ---- */

/* A lease is a UUID; anything else names an object by its label. */
static bool looks_like_lease(const char *s) {
        if (strlen(s) != 36)
                return false;
        for (size_t i = 0; i < 36; i++)
                if ((i == 8 || i == 13 || i == 18 || i == 23) ? s[i] != '-' : !isxdigit((unsigned char) s[i]))
                        return false;
        return true;
}

/* {"lease": X} or {"label": X[, "device": --device]} */
static json_t *object_params(const char *what) {
        json_t *p = looks_like_lease(what) ? json_pack("{s:s}", "lease", what) : json_pack("{s:s}", "label", what);

        if (p && !looks_like_lease(what) && arg_device && json_object_set_new(p, "device", json_string(arg_device)) < 0)
                return json_decref(p), NULL;
        return p;
}

static const char *scrub_text(json_t *o, char *buf, size_t size) {
        json_t *sc = json_object_get(o, "scrub");

        if (!sc)
                return "-";
        if (streq_ptr(jstr(sc, "result"), "ok")) {
                char ts[64];
                format_timestamp(ts, sizeof ts, jint(sc, "usec", 0), false);
                snprintf(buf, size, "ok %s", ts);
        } else
                snprintf(buf, size, "%s!", jstr(sc, "result") ?: "?");
        return buf;
}

static int print_objects(json_t *objects) {
        _cleanup_(table_freep) Table *t = NULL;
        json_t *o;
        size_t i;

        if (arg_json) {
                print_json(objects);
                return EXIT_OK;
        }
        static const char *const h[] = { "LABEL", ">SIZE", "SHA256", "DEVICE", ">ZONE", ">START-LBA", "SEALED",
                                         "SCRUB", "LEASE" };
        t = table_new(ELEMENTSOF(h), h);
        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        json_array_foreach(objects, i, o) {
                char size[64], sealed[64], scrub[96];
                format_bytes(size, sizeof size, jint(o, "size", 0));
                format_timestamp(sealed, sizeof sealed, jint(o, "sealedUsec", 0), false);
                if (table_add(t, jstr(o, "label")) < 0 || table_add(t, size) < 0 || table_add(t, jstr(o, "sha256")) < 0 ||
                    table_add(t, jstr(o, "device") ?: jstr(o, "deviceId")) < 0 ||
                    table_addf(t, "%lld", jint(o, "zoneIndex", -1)) < 0 ||
                    table_addf(t, "%lld", jint(o, "startLba", -1)) < 0 || table_add(t, sealed) < 0 ||
                    table_add(t, scrub_text(o, scrub, sizeof scrub)) < 0 || table_add(t, jstr(o, "lease")) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        }
        if (table_rows(t) > 0)
                table_print(t);
        if (arg_legend)
                printf("%s%zu object%s listed (START-LBA in 512-byte sectors).\n", table_rows(t) > 0 ? "\n" : "",
                       table_rows(t), table_rows(t) == 1 ? "" : "s");
        return EXIT_OK;
}

/* zones objects [DEVICE]: the sealed objects. */
static int zones_objects(const char *device) {
        _cleanup_(json_decrefp) json_t *reply = NULL, *params = device ? json_pack("{s:s}", "device", device) : json_object();
        int r;

        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = call("zones objects", ZONES_INTERFACE ".ListObjects", params, &reply);
        if (r != EXIT_OK)
                return r;
        return print_objects(json_object_get(reply, "objects"));
}

/* zones find LABEL: the one sealed object with that label. */
static int zones_find(const char *label) {
        _cleanup_(json_decrefp) json_t *reply = NULL, *params = json_pack("{s:s}", "label", label), *one = NULL;
        int r;

        if (!params || (arg_device && json_object_set_new(params, "device", json_string(arg_device)) < 0))
                return fail(EXIT_PROTOCOL, "out of memory");
        r = call("zones find", ZONES_INTERFACE ".Find", params, &reply);
        if (r != EXIT_OK)
                return r;
        if (arg_json) {
                print_json(json_object_get(reply, "object"));
                return EXIT_OK;
        }
        one = json_array();
        if (!one || json_array_append(one, json_object_get(reply, "object")) < 0)
                return fail(EXIT_PROTOCOL, "out of memory");
        return print_objects(one);
}

/* The lease of the one sealed object labelled label (--device= narrows). */
static int lease_of_label(const char *label, char **ret) {
        _cleanup_(json_decrefp) json_t *reply = NULL, *params = json_pack("{s:s}", "label", label);

        if (!params || (arg_device && json_object_set_new(params, "device", json_string(arg_device)) < 0))
                return fail(EXIT_PROTOCOL, "out of memory");
        int r = call("zones", ZONES_INTERFACE ".Find", params, &reply);
        if (r != EXIT_OK)
                return r;
        *ret = strdup(jstr(json_object_get(reply, "object"), "lease") ?: "");
        return *ret ? EXIT_OK : fail(EXIT_PROTOCOL, "out of memory");
}

/* zones verify [LEASE|LABEL|DEVICE]: read back and check now. */
/* Whether name is a zoned device of the allocator by its kernel name or ID
 * (zones verify nvme0n1: the device, not a label). */
static bool names_zoned_device(const char *name) {
        _cleanup_(json_decrefp) json_t *reply = NULL;
        json_t *d;
        size_t i;

        if (call("zones verify", ZONES_INTERFACE ".ListDevices", NULL, &reply) != EXIT_OK)
                return false;
        json_array_foreach(json_object_get(reply, "devices"), i, d)
                if (streq_ptr(jstr(d, "device"), name) || streq_ptr(jstr(d, "deviceId"), name))
                        return true;
        return false;
}

static int zones_verify(const char *what) {
        _cleanup_(json_decrefp) json_t *reply = NULL, *params = NULL;
        json_t *objects, *o;
        size_t i;
        int r, bad = 0;

        if (!what)
                params = json_object();
        else if (looks_like_lease(what) ||
                 !(strchr(what, '/') || strncmp(what, "emu:", 4) == 0 || arg_device || names_zoned_device(what)))
                /* a lease or a label; a device is named by a path, or with --device */
                params = object_params(what);
        else
                params = json_pack("{s:s}", "device", what);
        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = call("zones verify", ZONES_INTERFACE ".Verify", params, &reply);
        if (r != EXIT_OK)
                return r;
        objects = json_object_get(reply, "objects");
        json_array_foreach(objects, i, o) {
                json_t *sc = json_object_get(o, "scrub");
                if (!sc || !streq_ptr(jstr(sc, "result"), "ok"))
                        bad++;
        }
        r = print_objects(objects);
        if (r != EXIT_OK)
                return r;
        if (bad)
                return fail(EXIT_CHECKSUM, "zones verify: %d of %zu objects do not read back to their SHA-256 "
                                           "(SCRUB column; blkmqd logged each)",
                            bad, json_array_size(objects));
        return EXIT_OK;
}

/* zones cat LABEL|LEASE [-o FILE]: the object, read back by blkmqd into a
 * descriptor we pass and verified on the way. Nothing reaches FILE or
 * standard output before the SHA-256 matched: blkmqd writes into a file of
 * our own (an unnamed file beside FILE, linked in at the end; a memfd for
 * standard output, copied out at the end). */
static int zones_cat(const char *what, const char *out) {
        _cleanup_(blkmq_varlink_freep) blkmq_varlink *v = NULL;
        _cleanup_(json_decrefp) json_t *params = object_params(what), *last = NULL;
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ char *dir = NULL;
        uint64_t total = 0;
        int r;

        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        if (out) {
                const char *slash = strrchr(out, '/');
                dir = slash ? strndup(out, (size_t) (slash - out) + (slash == out)) : strdup(".");
                if (!dir)
                        return fail(EXIT_PROTOCOL, "out of memory");
                fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
                if (fd < 0)
                        return fail(EXIT_USAGE, "%s: cannot create a file in %s: %s", out, dir, strerror(errno));
        } else {
                fd = memfd_create("blkmqctl-cat", MFD_CLOEXEC);
                if (fd < 0)
                        return fail(EXIT_PROTOCOL, "memfd_create: %s", strerror(errno));
        }
        {
                /* the size, for the progress bar */
                _cleanup_(json_decrefp) json_t *found = NULL;
                if (!looks_like_lease(what) && call("zones cat", ZONES_INTERFACE ".Find", params, &found) == EXIT_OK)
                        total = (uint64_t) jint(json_object_get(found, "object"), "size", 0);
        }
        if (json_object_set_new(params, "fd", json_integer(0)) < 0)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = connect_daemon(&v);
        if (r != EXIT_OK)
                return r;
        r = call_fd_progress(v, "zones cat", ZONES_INTERFACE ".Read", params, fd, "read", "bytes", total, &last);
        if (r != EXIT_OK)
                return r;

        /* Verified: only now does anything reach the reader. */
        if (out) {
                char proc[64];
                snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
                if (fsync(fd) < 0)
                        return fail(EXIT_PROTOCOL, "%s: %s", out, strerror(errno));
                (void) unlink(out);
                if (linkat(AT_FDCWD, proc, AT_FDCWD, out, AT_SYMLINK_FOLLOW) < 0)
                        return fail(EXIT_USAGE, "%s: %s", out, strerror(errno));
        } else {
                off_t off = 0;
                uint64_t n = (uint64_t) jint(last, "bytes", 0);
                while ((uint64_t) off < n) {
                        ssize_t w = sendfile(STDOUT_FILENO, fd, &off, (size_t) MIN(n - (uint64_t) off, (uint64_t) 1 << 30));
                        if (w < 0 && errno == EINTR)
                                continue;
                        if (w <= 0) {
                                /* not a target sendfile takes (a tty, some pipes): plain copies */
                                uint8_t buf[65536];
                                ssize_t k = pread(fd, buf, sizeof buf, off);
                                if (k <= 0 || write(STDOUT_FILENO, buf, (size_t) k) != k)
                                        return fail(EXIT_USAGE, "standard output: %s", strerror(errno ?: EIO));
                                off += k;
                        }
                }
        }
        if (arg_json) {
                _cleanup_(json_decrefp) json_t *o = json_pack("{s:I, s:s, s:O}", "bytes", (json_int_t) jint(last, "bytes", 0),
                                                              "sha256", jstr(last, "sha256") ?: "", "object",
                                                              json_object_get(last, "object"));
                if (o && out) {
                        char *txt = json_dumps(o, JSON_COMPACT);
                        if (txt)
                                fprintf(stderr, "%s\n", txt);
                        free(txt);
                }
        } else if (out)
                fprintf(stderr, "%s: %lld bytes, SHA-256 %s verified.\n", out, jint(last, "bytes", 0), jstr(last, "sha256"));
        return EXIT_OK;
}

static int verb_zones(int argc, char **argv) {
        static const struct {
                const char *name;
                int min_args, max_args; /* including "zones" and the subcommand */
        } subs[] = {
                { "free", 3, 3 },    { "alloc", 2, 2 },  { "append", 4, 4 }, { "seal", 4, 4 },
                { "release", 3, 3 }, { "get", 3, 4 },    { "objects", 2, 3 }, { "find", 3, 3 },
                { "cat", 3, 3 },     { "verify", 2, 3 },
        };
        const char *sub = argc > 1 ? argv[1] : NULL;
        char devbuf[PATH_MAX + 8];
        bool known = false;

        for (size_t i = 0; sub && i < ELEMENTSOF(subs); i++)
                if (streq(sub, subs[i].name)) {
                        known = true;
                        if (argc < subs[i].min_args)
                                return fail(EXIT_USAGE, "zones %s: missing argument (see blkmqctl --help)", sub);
                        if (argc > subs[i].max_args)
                                return fail(EXIT_USAGE, "zones %s: too many arguments (see blkmqctl --help)", sub);
                }
        if (!known && argc > 2)
                return fail(EXIT_USAGE, "zones %s: unknown zones command (free, alloc, append, seal, release, get, "
                                        "objects, find, cat, verify)", sub);

        if (arg_state && (known || argc != 2))
                return fail(EXIT_USAGE, "--state goes with zones DEVICE");
        if (arg_label && !streq_ptr(sub, "alloc"))
                return fail(EXIT_USAGE, "--label goes with zones alloc and stage");
        if (arg_device && !streq_ptr(sub, "alloc") && !streq_ptr(sub, "find") && !streq_ptr(sub, "cat") &&
            !streq_ptr(sub, "verify") && !streq_ptr(sub, "release"))
                return fail(EXIT_USAGE, "--device goes with zones alloc, find, cat, verify, release and stage");
        if (arg_output && !streq_ptr(sub, "cat"))
                return fail(EXIT_USAGE, "--output goes with zones cat");
        if (arg_size_set && !streq_ptr(sub, "alloc"))
                return fail(EXIT_USAGE, "--size goes with zones alloc");
        if (arg_inline && !streq_ptr(sub, "append"))
                return fail(EXIT_USAGE, "--inline goes with zones append");

        if (argc == 1)
                return zones_list_devices();
        if (!known)
                return zones_list_zones(device_arg(sub, devbuf));
        if (streq(sub, "free"))
                return zones_free(device_arg(argv[2], devbuf));
        if (streq(sub, "alloc")) {
                if (!arg_size_set)
                        return fail(EXIT_USAGE, "zones alloc: --size is required");
                return zones_alloc();
        }
        if (streq(sub, "append"))
                return zones_append(argv[2], argv[3]);
        if (streq(sub, "seal"))
                return zones_lease_call("zones seal", ZONES_INTERFACE ".Seal", argv[2], argv[3]);
        if (streq(sub, "release")) {
                /* by lease, or by the label of a sealed object */
                _cleanup_free_ char *lease = NULL;
                if (!looks_like_lease(argv[2])) {
                        int r = lease_of_label(argv[2], &lease);
                        if (r != EXIT_OK)
                                return r;
                }
                return zones_lease_call("zones release", ZONES_INTERFACE ".Release", lease ?: argv[2], NULL);
        }
        if (streq(sub, "objects"))
                return zones_objects(argc > 2 ? device_arg(argv[2], devbuf) : NULL);
        if (streq(sub, "find"))
                return zones_find(argv[2]);
        if (streq(sub, "cat"))
                return zones_cat(argv[2], arg_output);
        if (streq(sub, "verify"))
                return zones_verify(argc > 2 ? device_arg(argv[2], devbuf) : NULL);
        return zones_get(argc, argv);
}

/* ---- stage: allocate, append by fd, hash alongside, seal ---- */

typedef struct HashJob {
        int fd;
        Sha256 *sha;     /* set up by verb_stage(), which frees it if hashing fails */
        int error;       /* errno */
        uint64_t length; /* bytes hashed */
        char hex[SHA256_HEX_SIZE];
} HashJob;

/* pread(): the file offset, which the daemon's reads of the same open file
 * advance, is left alone. */
static void *hash_thread(void *userdata) {
        HashJob *j = userdata;
        _cleanup_free_ uint8_t *buf = malloc(INLINE_CHUNK);
        uint8_t digest[SHA256_DIGEST_SIZE];

        if (!buf) {
                j->error = ENOMEM;
                return NULL;
        }
        for (;;) {
                ssize_t n = pread(j->fd, buf, INLINE_CHUNK, (off_t) j->length);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        j->error = errno;
                        return NULL;
                }
                if (n == 0)
                        break;
                sha256_update(j->sha, buf, (size_t) n);
                j->length += (uint64_t) n;
        }
        sha256_final(j->sha, digest);
        sha256_hex(digest, j->hex);
        return NULL;
}

/* After a failed append or seal: give the zone back, best effort. */
static void stage_release(blkmq_varlink *v, const char *lease) {
        _cleanup_(blkmq_varlink_freep) blkmq_varlink *fresh = NULL;
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s}", "lease", lease), *reply = NULL;
        const char *error = NULL;
        int r;

        if (!params)
                return;
        r = blkmq_varlink_call_sync(v, ZONES_INTERFACE ".Release", params, &reply, &error);
        if (r < 0) {
                /* The connection may be what failed: one more try on a new one. */
                if (blkmq_varlink_connect(&fresh, arg_address) < 0)
                        goto gone;
                blkmq_varlink_set_timeout(fresh, CALL_TIMEOUT_USEC);
                r = blkmq_varlink_call_sync(fresh, ZONES_INTERFACE ".Release", params, &reply, &error);
        }
        if (r >= 0 && !error) {
                fail(EXIT_OK, "stage: released lease %s", lease);
                return;
        }
gone:
        fail(EXIT_OK, "stage: could not release lease %s (%s); blkmqd reclaims it at its next start", lease,
             r < 0 ? strerror(-r) : error);
}

/* blkmqd went away in the middle of a stage (a crash, a restart): the
 * zone may be sealed with our data, or reclaimed, or still leased. Wait
 * for blkmqd to come back (systemd restarts it), ask what became of the
 * lease, and settle it: sealed with our SHA-256 and size is a success
 * (*ret_zone); anything else is released, and the stage failed. Never
 * leaves a lease behind without saying so. */
static uint64_t monotonic_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000ULL + (uint64_t) ts.tv_nsec / 1000;
}

static int stage_settle(const char *lease, const char *hex, uint64_t size, json_t **ret_zone) {
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s}", "lease", lease);
        uint64_t deadline = monotonic_usec() + arg_settle_usec;
        bool said = false;

        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        for (;;) {
                _cleanup_(blkmq_varlink_freep) blkmq_varlink *v = NULL;
                _cleanup_(json_decrefp) json_t *reply = NULL;
                const char *error = NULL;
                int r = blkmq_varlink_connect(&v, arg_address);

                if (r >= 0) {
                        blkmq_varlink_set_timeout(v, CALL_TIMEOUT_USEC);
                        r = blkmq_varlink_call_sync(v, ZONES_INTERFACE ".Get", params, &reply, &error);
                }
                if (r >= 0 && error && streq(error, ZONES_INTERFACE ".LeaseNotFound"))
                        return fail(EXIT_UNREACHABLE,
                                    "stage: blkmqd restarted before lease %s was sealed; it reclaimed the zone, "
                                    "nothing is staged",
                                    lease);
                if (r >= 0 && error)
                        return varlink_error("stage", error, reply);
                if (r >= 0) {
                        json_t *z = json_object_get(reply, "zone");
                        if (streq_ptr(jstr(z, "state"), "sealed") && streq_ptr(jstr(z, "sha256"), hex) &&
                            jint(z, "bytesWritten", -1) == (long long) size) {
                                fprintf(stderr, "stage: lease %s was sealed before blkmqd went away; staged.\n",
                                        lease);
                                *ret_zone = json_incref(z);
                                return EXIT_OK;
                        }
                        stage_release(v, lease);
                        return fail(EXIT_UNREACHABLE,
                                    "stage: blkmqd went away while staging; lease %s was %s, not sealed with the "
                                    "file, and is released",
                                    lease, jstr(z, "state") ?: "in an unknown state");
                }
                if (monotonic_usec() >= deadline)
                        return fail(EXIT_UNREACHABLE,
                                    "stage: blkmqd went away and did not come back within %llu s; the outcome of "
                                    "lease %s is unknown. When blkmqd is back: blkmqctl zones get %s; staged if it "
                                    "is sealed with SHA-256 %s, otherwise: blkmqctl zones release %s",
                                    (unsigned long long) (arg_settle_usec / 1000000ULL), lease, lease, hex, lease);
                if (!said) {
                        fprintf(stderr, "stage: lost blkmqd (%s); waiting up to %llu s for it to settle lease %s\n",
                                strerror(-r), (unsigned long long) (arg_settle_usec / 1000000ULL), lease);
                        said = true;
                }
                (void) usleep(100 * 1000);
        }
}

static int verb_stage(int argc, char **argv) {
        _cleanup_(blkmq_varlink_freep) blkmq_varlink *v = NULL;
        _cleanup_(json_decrefp) json_t *params = NULL, *alloc = NULL, *appended = NULL, *sealed = NULL, *sparams = NULL,
                                       *sealed_zone = NULL;
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ char *lease = NULL;
        _cleanup_sha256_ Sha256 sha = {};
        const char *path = argv[1];
        HashJob job = {};
        pthread_t thread;
        bool hashing = false;
        struct stat st;
        json_t *z;
        int r;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return fail(EXIT_USAGE, "%s: %s", path, strerror(errno));
        if (fstat(fd, &st) < 0)
                return fail(EXIT_USAGE, "%s: %s", path, strerror(errno));
        if (!S_ISREG(st.st_mode))
                return fail(EXIT_USAGE, "%s: not a regular file (for pipes: zones alloc, zones append, zones seal)", path);

        /* Before anything is allocated: a failure here leaves no lease behind. */
        r = sha256_init(&sha);
        if (r < 0)
                return fail(EXIT_PROTOCOL, "stage: cannot set up SHA-256 (libcrypto): %s", strerror(-r));

        params = json_pack("{s:I}", "size", (json_int_t) st.st_size);
        if (!params || (arg_device && json_object_set_new(params, "device", json_string(arg_device)) < 0) ||
            (arg_label && json_object_set_new(params, "label", json_string(arg_label)) < 0))
                return fail(EXIT_PROTOCOL, "out of memory");
        r = connect_daemon(&v);
        if (r != EXIT_OK)
                return r;
        r = call_on(v, "stage", ZONES_INTERFACE ".Allocate", params, &alloc);
        if (r == EXIT_UNREACHABLE)
                return fail(r, "stage: blkmqd went away before it answered the allocation; nothing was written, "
                               "and blkmqd reclaims a zone it did not hand out when it starts again");
        if (r != EXIT_OK)
                return r;
        if (!jstr(alloc, "lease"))
                return fail(EXIT_PROTOCOL, "stage: Allocate replied without a lease");
        lease = strdup(jstr(alloc, "lease"));
        if (!lease)
                return fail(EXIT_PROTOCOL, "out of memory");
        /* Said at once, so that whatever happens next the lease is known. */
        z = json_object_get(alloc, "zone");
        fprintf(stderr, "stage: lease %s: %s zone %lld\n", lease,
                jstr(z, "device") ?: jstr(z, "deviceId") ?: "?", jint(z, "zoneIndex", -1));

        /* Hash while the daemon reads and writes. */
        job.fd = fd;
        job.sha = &sha;
        if (pthread_create(&thread, NULL, hash_thread, &job) == 0)
                hashing = true;
        r = append_fd(v, "stage", lease, fd, (uint64_t) st.st_size, &appended);
        if (hashing)
                pthread_join(thread, NULL);
        else
                hash_thread(&job);
        if (r == EXIT_UNREACHABLE)
                return stage_settle(lease, job.error == 0 ? job.hex : "", (uint64_t) st.st_size, &sealed_zone);
        if (r != EXIT_OK) {
                stage_release(v, lease);
                return r;
        }
        if (job.error != 0) {
                stage_release(v, lease);
                return fail(EXIT_USAGE, "%s: %s", path, strerror(job.error));
        }
        if (job.length != (uint64_t) st.st_size || (long long) job.length != jint(appended, "bytesWritten", -1)) {
                stage_release(v, lease);
                return fail(EXIT_CHECKSUM, "%s: changed while staging (%lld bytes, hashed %llu, appended %lld)", path,
                            (long long) st.st_size, (unsigned long long) job.length, jint(appended, "bytesWritten", -1));
        }

        sparams = json_pack("{s:s, s:s}", "lease", lease, "sha256", job.hex);
        if (!sparams)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = call_on(v, "stage", ZONES_INTERFACE ".Seal", sparams, &sealed);
        if (r == EXIT_UNREACHABLE) {
                r = stage_settle(lease, job.hex, (uint64_t) st.st_size, &sealed_zone);
                if (r != EXIT_OK)
                        return r;
        } else if (r != EXIT_OK) {
                /* A mismatch leaves the zone failed, for a look (zones get LEASE). */
                if (r != EXIT_CHECKSUM)
                        stage_release(v, lease);
                else
                        fail(EXIT_OK, "stage: lease %s kept for inspection: blkmqctl zones get %s", lease, lease);
                return r;
        }

        z = sealed_zone ?: json_object_get(sealed, "zone");
        if (arg_json) {
                _cleanup_(json_decrefp) json_t *o = json_pack(
                        "{s:s?, s:s?, s:I, s:I, s:s, s:s, s:I, s:O?}", "device", jstr(z, "device"), "deviceId",
                        jstr(z, "deviceId"), "zoneIndex", (json_int_t) jint(z, "zoneIndex", -1), "startLba",
                        (json_int_t) jint(z, "startLba", -1), "lease", lease, "sha256", job.hex, "size",
                        (json_int_t) st.st_size, "zone", z);
                if (!o)
                        return fail(EXIT_PROTOCOL, "out of memory");
                print_json(o);
                return EXIT_OK;
        }
        char buf[64];
        field("Device", jstr(z, "device") ? jstr(z, "device") : jstr(z, "deviceId"));
        snprintf(buf, sizeof buf, "%lld", jint(z, "zoneIndex", -1));
        field("Zone", buf);
        snprintf(buf, sizeof buf, "%lld", jint(z, "startLba", -1));
        field("Start LBA", buf);
        snprintf(buf, sizeof buf, "%lld", jint(z, "start", -1));
        field("Start byte", buf);
        format_bytes_exact(buf, sizeof buf, (long long) st.st_size);
        field("Size", buf);
        field("Lease", lease);
        field("SHA256", job.hex);
        return EXIT_OK;
}

typedef struct Verb {
        const char *name;
        unsigned min_args, max_args; /* including the verb itself */
        int (*fn)(int argc, char **argv);
} Verb;

static const Verb verbs[] = {
        { "status", 1, 1, verb_status },
        { "devices", 1, 1, verb_devices },
        { "show", 2, 2, verb_show },
        { "explain", 2, 2, verb_explain },
        { "trial", 2, 2, verb_trial },
        { "apply", 1, 2, verb_apply },
        { "restore", 1, 2, verb_apply },
        { "reload", 1, 1, verb_reload },
        { "profile", 1, 2, verb_profile },
        { "monitor", 1, 1, verb_monitor },
        { "log-level", 2, 2, verb_log_level },
        { "latency", 2, 2, verb_latency },
        { "top", 1, 1, verb_top },
        { "zones", 1, 4, verb_zones },
        { "stage", 2, 2, verb_stage },
};

static void help(void) {
        printf("Usage: blkmqctl [OPTIONS] COMMAND [ARG]\n\n"
               "Query and steer blkmqd, the block-layer tuning daemon.\n\n"
               "Commands:\n"
               "  status               show the daemon's state (the default)\n"
               "  devices              list the devices blkmqd knows\n"
               "  show DEVICE          identity, every setting (original, wanted, current,\n"
               "                       outcome, section), notes, hardware queue map\n"
               "  explain DEVICE       which sections match and why; where each value comes from\n"
               "  trial DEVICE         compare the candidates of its Auto* keys on the live workload\n"
               "                       and keep the winner (blkmqd.conf(5), AutoTune=)\n"
               "  apply [DEVICE]       apply the policy again (every device without DEVICE)\n"
               "  restore [DEVICE]     put back the values blkmqd replaced\n"
               "  reload               reload the configuration (a broken one is refused)\n"
               "  profile NAME         activate [Profile NAME]\n"
               "  profile --clear      deactivate the active profile\n"
               "  monitor              print events as they happen, until Ctrl-C\n"
               "  log-level LEVEL      set the daemon's log level (emerg ... debug)\n"
               "  latency DEVICE       probe latency histogram and percentiles of a device\n"
               "  top                  iostat-like figures and probe latency of the probed\n"
               "                       devices, refreshed until Ctrl-C\n\n"
               "Zone allocator (io.blkmqd.Zones):\n"
               "  zones                zoned devices of the allocator, with zone counts by state\n"
               "  zones DEVICE         the device's zones [--state=STATE]\n"
               "  zones free DEVICE    start LBA of the first free empty zone (nothing else)\n"
               "  zones alloc --size=N [--device=DEV] [--label=L]\n"
               "                       lease an empty zone with room for N bytes\n"
               "  zones append LEASE FILE|-\n"
               "                       append the file (its fd is passed; - is stdin)\n"
               "  zones append LEASE --inline FILE|-\n"
               "                       the same as base64 chunks of at most 1 MiB\n"
               "  zones seal LEASE SHA256\n"
               "                       blkmqd reads the zone back, compares, finishes it\n"
               "  zones release LEASE  give the zone up (it is reset in a batch)\n"
               "  zones get LEASE      the leased zone (or: zones get DEVICE INDEX)\n"
               "  zones objects [DEVICE]\n"
               "                       sealed objects: label, size, SHA-256, device, zone,\n"
               "                       seal time, last check, lease\n"
               "  zones find LABEL     the one sealed object with that label\n"
               "  zones cat LABEL|LEASE [-o FILE]\n"
               "                       the object, read back and verified (nothing is\n"
               "                       written before its SHA-256 matched)\n"
               "  zones verify [DEVICE|LABEL|LEASE]\n"
               "                       read sealed objects back now and check them\n"
               "  stage FILE [--device=DEV] [--label=L]\n"
               "                       alloc + append + seal with the file's SHA-256;\n"
               "                       prints device, zone, start LBA, lease, sha256\n\n"
               "Options:\n"
               "      --address=PATH   the daemon's socket (default: $BLKMQD_ADDRESS, else\n"
               "                       " VARLINK_ADDRESS ")\n"
               "      --json           print the replies as JSON (monitor, top: one object a line)\n"
               "      --no-legend      no table headers and footers\n"
               "      --clear          with profile: clear the active profile\n"
               "      --window=WINDOW  with latency: 1m, 10m (default) or total\n"
               "      --interval=SEC   with top: seconds between refreshes (default 1)\n"
               "      --count=N        with top: stop after N refreshes\n"
               "      --state=STATE    with zones DEVICE: free, allocated, writing, sealed,\n"
               "                       releasing, failed, or empty (the device's condition)\n"
               "      --size=N         with zones alloc: bytes (K, M, G suffixes: KiB, MiB, GiB)\n"
               "      --device=DEV     with zones alloc, stage: the zoned device (default: any)\n"
               "      --label=LABEL    with zones alloc, stage: a label kept with the lease\n"
               "      --inline         with zones append: send base64 data, not the fd\n"
               "      --settle-timeout=SEC  with stage: wait that long for blkmqd to come back and\n"
               "                       settle the lease after it went away (default 30)\n"
               "  -h, --help           show this help\n"
               "      --version        show the version\n\n"
               "Exit status:\n"
               "  0 success                      4 permission denied (needs root or AdminGroup=)\n"
               "  1 usage error                  5 configuration invalid (reload)\n"
               "  2 blkmqd not reachable         6 a setting failed\n"
               "  3 no such device, profile,     7 other varlink or protocol error\n"
               "    lease, or free zone          8 no space: no free zone, active zone limit,\n"
               "                                   or larger than a zone\n"
               "  9 checksum mismatch (seal)    10 zone I/O error, or the device is gone\n"
               " 11 lease busy, or in the wrong state for the command\n\n"
               "apply, restore, reload, profile and log-level need root or the AdminGroup=\n"
               "of blkmqd.conf. A lease is used by its owner or root only.\n"
               "See blkmqctl(8) and blkmqd-varlink(7).\n");
}

/* Returns < 0 on a usage error, 0 to exit successfully, > 0 to go on. */
static int parse_argv(int argc, char **argv) {
        enum {
                ARG_VERSION = 0x100,
                ARG_ADDRESS,
                ARG_JSON,
                ARG_NO_LEGEND,
                ARG_CLEAR,
                ARG_WINDOW,
                ARG_INTERVAL,
                ARG_COUNT,
                ARG_STATE,
                ARG_DEVICE,
                ARG_LABEL,
                ARG_SIZE,
                ARG_INLINE,
                ARG_SETTLE_TIMEOUT,
        };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                { "address", required_argument, NULL, ARG_ADDRESS },
                { "json", no_argument, NULL, ARG_JSON },
                { "no-legend", no_argument, NULL, ARG_NO_LEGEND },
                { "clear", no_argument, NULL, ARG_CLEAR },
                { "window", required_argument, NULL, ARG_WINDOW },
                { "interval", required_argument, NULL, ARG_INTERVAL },
                { "count", required_argument, NULL, ARG_COUNT },
                { "state", required_argument, NULL, ARG_STATE },
                { "device", required_argument, NULL, ARG_DEVICE },
                { "label", required_argument, NULL, ARG_LABEL },
                { "size", required_argument, NULL, ARG_SIZE },
                { "inline", no_argument, NULL, ARG_INLINE },
                { "settle-timeout", required_argument, NULL, ARG_SETTLE_TIMEOUT },
                { "output", required_argument, NULL, 'o' },
                {}
        };
        int c;

        opterr = 0; /* reported below, as "blkmqctl: …" */
        while ((c = getopt_long(argc, argv, ":ho:", options, NULL)) >= 0)
                switch (c) {
                case 'o':
                        if (!*optarg)
                                return -(fail(EXIT_USAGE, "--output: empty file name"));
                        arg_output = optarg;
                        break;
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("blkmqctl %s\n", PACKAGE_VERSION);
                        return 0;
                case ARG_ADDRESS:
                        if (!*optarg)
                                return -(fail(EXIT_USAGE, "--address: empty path"));
                        arg_address = optarg;
                        break;
                case ARG_JSON:
                        arg_json = true;
                        break;
                case ARG_NO_LEGEND:
                        arg_legend = false;
                        break;
                case ARG_CLEAR:
                        arg_clear = true;
                        break;
                case ARG_WINDOW:
                        if (!window_valid(optarg))
                                return -(fail(EXIT_USAGE, "--window=%s: invalid window (1m, 10m, total)", optarg));
                        arg_window = optarg;
                        break;
                case ARG_INTERVAL: {
                        char *end;
                        double sec;

                        errno = 0;
                        sec = strtod(optarg, &end);
                        if (errno != 0 || end == optarg || *end != 0 || !(sec >= 0.1 && sec <= 86400))
                                return -(fail(EXIT_USAGE, "--interval=%s: not a number of seconds from 0.1 to 86400",
                                              optarg));
                        arg_interval_usec = (uint64_t) (sec * 1e6 + 0.5);
                        arg_interval_set = true;
                        break;
                }
                case ARG_COUNT: {
                        char *end;

                        errno = 0;
                        arg_count = strtoul(optarg, &end, 10);
                        if (errno != 0 || end == optarg || *end != 0 || optarg[0] == '-' || arg_count == 0)
                                return -(fail(EXIT_USAGE, "--count=%s: not a positive number", optarg));
                        arg_count_set = true;
                        break;
                }
                case ARG_STATE:
                        if (!zone_state_valid(optarg))
                                return -(fail(EXIT_USAGE,
                                              "--state=%s: invalid state (free, allocated, writing, sealed, releasing, failed, empty)",
                                              optarg));
                        arg_state = optarg;
                        break;
                case ARG_DEVICE:
                        if (!*optarg)
                                return -(fail(EXIT_USAGE, "--device: empty name"));
                        arg_device = device_arg(optarg, arg_device_buf);
                        break;
                case ARG_LABEL:
                        arg_label = optarg;
                        break;
                case ARG_SIZE:
                        if (parse_size(optarg, &arg_size) < 0)
                                return -(fail(EXIT_USAGE, "--size=%s: not a size in bytes (K, M, G suffixes allowed)", optarg));
                        arg_size_set = true;
                        break;
                case ARG_SETTLE_TIMEOUT: {
                        char *end;
                        unsigned long long sec;
                        errno = 0;
                        sec = strtoull(optarg, &end, 10);
                        if (errno || end == optarg || *end || *optarg == '-' || sec > 24 * 3600)
                                return -(fail(EXIT_USAGE, "--settle-timeout=%s: not a number of seconds (0 to 86400)",
                                              optarg));
                        arg_settle_usec = sec * 1000000ULL;
                        break;
                }
                case ARG_INLINE:
                        arg_inline = true;
                        break;
                case ':':
                        return -(fail(EXIT_USAGE, "%s: missing argument (see blkmqctl --help)", argv[optind - 1]));
                case '?':
                        if (optopt >= 0x100)
                                return -(fail(EXIT_USAGE, "%s: takes no argument", argv[optind - 1]));
                        if (optopt > 0)
                                return -(fail(EXIT_USAGE, "-%c: unknown option (see blkmqctl --help)", optopt));
                        return -(fail(EXIT_USAGE, "%s: unknown option (see blkmqctl --help)", argv[optind - 1]));
                default:
                        return -(fail(EXIT_USAGE, "unhandled option"));
                }
        return 1;
}

static int dispatch_verb(int argc, char **argv) {
        static char *default_argv[] = { (char *) "status", NULL };
        const Verb *verb = NULL;
        unsigned n;

        if (argc <= 0) {
                argc = 1;
                argv = default_argv;
        }
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                if (streq(argv[0], verbs[i].name))
                        verb = &verbs[i];
        if (!verb)
                return fail(EXIT_USAGE, "%s: unknown command (see blkmqctl --help)", argv[0]);
        n = (unsigned) argc;
        if (n < verb->min_args)
                return fail(EXIT_USAGE, "%s: missing argument (see blkmqctl --help)", verb->name);
        if (n > verb->max_args)
                return fail(EXIT_USAGE, "%s: too many arguments (see blkmqctl --help)", verb->name);
        if (arg_clear && !streq(verb->name, "profile"))
                return fail(EXIT_USAGE, "--clear goes with profile");
        if (arg_window && !streq(verb->name, "latency"))
                return fail(EXIT_USAGE, "--window goes with latency");
        if ((arg_interval_set || arg_count_set) && !streq(verb->name, "top"))
                return fail(EXIT_USAGE, "--%s goes with top", arg_interval_set ? "interval" : "count");
        if ((arg_state || arg_size_set || arg_inline) && !streq(verb->name, "zones"))
                return fail(EXIT_USAGE, "--%s goes with zones", arg_state ? "state" : arg_size_set ? "size" : "inline");
        if ((arg_device || arg_label) && !streq(verb->name, "zones") && !streq(verb->name, "stage"))
                return fail(EXIT_USAGE, "--%s goes with zones alloc and stage", arg_device ? "device" : "label");
        return verb->fn(argc, argv);
}

int main(int argc, char **argv) {
        int r;

        setlocale(LC_ALL, "");
        utf8 = streq(nl_langinfo(CODESET), "UTF-8");

        r = parse_argv(argc, argv);
        if (r <= 0)
                return -r;
        if (!arg_address) {
                const char *e = getenv("BLKMQD_ADDRESS");
                arg_address = e && *e ? e : VARLINK_ADDRESS;
        }

        r = dispatch_verb(argc - optind, argv + optind);
        if (fflush(stdout) != 0 || ferror(stdout))
                return r != EXIT_OK ? r : fail(EXIT_PROTOCOL, "writing output: %s", strerror(errno));
        return r;
}
