/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What blkmqctl prints, whatever the verb: errors, JSON, fields, figures
 * in units for people, the progress bar. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

bool utf8 = false;
static bool progress_shown = false;

int fail(int status, const char *fmt, ...) {
        va_list ap;

        progress_done();
        fflush(stdout);
        fputs("blkmqctl: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return status;
}

const char *ellipsis(void) {
        return utf8 ? "…" : "...";
}

const char *arrow(void) {
        return utf8 ? "→" : "->";
}

/* ---- JSON accessors: absent or null fields read as NULL / def ---- */

const char *jstr(json_t *o, const char *key) {
        return json_string_value(json_object_get(o, key));
}

json_t *json_array_find(json_t *array, const char *key, const char *value) {
        json_t *o;
        size_t i;

        json_array_foreach(array, i, o)
                if (streq_ptr(jstr(o, key), value))
                        return o;
        return NULL;
}

long long jint(json_t *o, const char *key, long long def) {
        json_t *v = json_object_get(o, key);
        return json_is_integer(v) ? (long long) json_integer_value(v) : def;
}

const char *jbool(json_t *o, const char *key) {
        json_t *v = json_object_get(o, key);
        return json_is_boolean(v) ? (json_is_true(v) ? "yes" : "no") : NULL;
}

double jreal(json_t *o, const char *key) {
        json_t *v = json_object_get(o, key);
        return json_is_number(v) ? json_number_value(v) : 0;
}

const char *dash(const char *s) {
        return s && *s ? s : "-";
}

/* "a, b, c" of an array of strings; "-" when empty. Caller frees. */
char *join_strings(json_t *a, const char *sep) {
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
const char *explain_errno(char *buf, size_t size, const char *note, int e) {
        const char *why = e > 0 ? strerror(e) : NULL;

        if (note && *note && why && !strstr(note, why))
                snprintf(buf, size, "%s (%s)", note, why);
        else if (note && *note)
                snprintf(buf, size, "%s", note);
        else
                snprintf(buf, size, "%s", why ? why : "failed");
        return buf;
}

void print_json(json_t *j) {
        size_t flags = isatty(STDOUT_FILENO) ? JSON_INDENT(2) : JSON_COMPACT;

        json_dumpf(j, stdout, flags | JSON_ENCODE_ANY);
        fputc('\n', stdout);
}
json_t *device_params(const char *device) {
        return device ? json_pack("{s:s}", "device", device) : json_object();
}

/* ---- figures for people ---- */


void format_timestamp(char *buf, size_t size, long long usec, bool millis) {
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

void format_duration(char *buf, size_t size, long long usec) {
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

void format_bytes(char *buf, size_t size, long long bytes) {
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

void field(const char *label, const char *value) {
        printf("%12s: %s\n", label, dash(value));
}

/* "64.0 MiB (67108864 bytes)"; a plain "512 B" below 1 KiB. */
void format_bytes_exact(char *buf, size_t size, long long bytes) {
        char h[32];

        format_bytes(h, sizeof h, bytes);
        if (bytes < 1024)
                snprintf(buf, size, "%s", h);
        else
                snprintf(buf, size, "%s (%lld bytes)", h, bytes);
}

/* ---- output width ---- */

unsigned columns(void) {
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

/* ---- progress ---- */

/* A bar on stderr, only on a terminal; total 0: unknown (a pipe). */
void progress(const char *what, uint64_t done, uint64_t total) {
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

void progress_done(void) {
        if (progress_shown)
                fputs("\r\033[K", stderr);
        progress_shown = false;
}

