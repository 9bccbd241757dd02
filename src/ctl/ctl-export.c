/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A device's settings as configuration for other hosts: export DEVICE (the
 * static keys in force) and trial DEVICE --emit-conf (the keys the trial
 * chose). Both print one [Device] section, a drop-in for
 * /etc/blkmqd/blkmqd.conf.d/ (blkmqd.conf(5)), matched by what tells that
 * kind of disk apart: model, vendor, firmware and zoned model; a loop
 * device, which has none, by the name of its backing file. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/param.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

#define SECTION_NAME_MAX 64 /* conf.c: section_name_valid() */

bool arg_emit_conf = false;

int export_opt_emit_conf(const char *arg) {
        arg_emit_conf = true;
        return EXIT_OK;
}

int export_options_fit(const char *verb) {
        if (arg_emit_conf && !streq(verb, "trial"))
                return fail(EXIT_USAGE, "--emit-conf goes with trial");
        if (arg_emit_conf && arg_json)
                return fail(EXIT_USAGE, "--emit-conf prints configuration, not JSON: give one of them");
        if (arg_json && streq(verb, "export"))
                return fail(EXIT_USAGE, "export prints configuration, not JSON (show --json has the device, "
                                        "explain --json the values in force)");
        return EXIT_OK;
}

/* "2026-11-27 04:30:55 UTC": one clock for a whole fleet. */
static void format_utc(char *buf, size_t size, long long usec) {
        time_t t = (time_t) (usec / 1000000);
        struct tm tm;

        if (usec <= 0 || !gmtime_r(&t, &tm) || strftime(buf, size, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
                snprintf(buf, size, "-");
}

/* A name as a literal fnmatch(3) pattern, on one line of an INI value: the
 * glob characters escaped, and what the parser would take for a comment or
 * the end of the line replaced by '?'. Caller frees. */
static char *glob_escape(const char *s) {
        char *out = malloc(strlen(s) * 2 + 1), *o = out;

        if (!out)
                return NULL;
        for (; *s; s++) {
                if (strchr("*?[]\\", *s))
                        *o++ = '\\';
                *o++ = *s == ';' || *s == '#' || *s == '\n' || *s == '\r' ? '?' : *s;
        }
        *o = 0;
        return out;
}

/* "fleet-" and the identity, in the characters a section name may have.
 * A section of the same name in a later drop-in extends this one (and its
 * Match* lists grow), so the firmware (and a zoned model) is part of the
 * name. */
static void section_name(char *buf, size_t size, const char *a, const char *b, const char *z) {
        size_t n = (size_t) snprintf(buf, size, "fleet");
        const char *parts[] = { a, b, z };

        size = MIN(size, (size_t) SECTION_NAME_MAX + 1);
        for (size_t i = 0; i < ELEMENTSOF(parts); i++) {
                if (!parts[i])
                        continue;
                if (n + 1 < size)
                        buf[n++] = '-';
                for (const char *s = parts[i]; *s && n + 1 < size; s++) {
                        char c = *s;
                        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                              strchr("-_.@", c)))
                                c = '-';
                        if (c == '-' && buf[n - 1] == '-')
                                continue;
                        buf[n++] = c;
                }
                while (n > 0 && buf[n - 1] == '-')
                        n--;
        }
        buf[n] = 0;
}

/* The Match* lines of the device's kind, and the section name. */
static int match_lines(json_t *dev, char *name, size_t name_size, char **ret) {
        const char *model = jstr(dev, "model"), *vendor = jstr(dev, "vendor"), *fw = jstr(dev, "firmware");
        const char *backing = jstr(dev, "backingFile"), *zoned = jstr(dev, "zoned");
        _cleanup_free_ char *m = NULL, *v = NULL, *f = NULL;
        char *s = NULL;
        int k;

        /* A stacked device (its trial: issue 33) is named by what its
         * operators call it, never by the model of the disks under it:
         * the LVM volume, the dm-crypt mapping, the md array, the
         * multipath map. */
        static const char *const stack_keys[][2] = { { "volume", "MatchVolume" }, { "crypt", "MatchCrypt" },
                                                     { "mdName", "MatchMDName" },
                                                     { "multipathWwid", "MatchMultipathWWID" } };
        for (size_t i = 0; i < ELEMENTSOF(stack_keys); i++) {
                const char *n = jstr(dev, stack_keys[i][0]);
                if (!n)
                        continue;
                m = glob_escape(n);
                if (!m)
                        return fail(EXIT_PROTOCOL, "out of memory");
                section_name(name, name_size, "stack", n, NULL);
                if (asprintf(&s, "%s=%s\n", stack_keys[i][1], m) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
                *ret = s;
                return EXIT_OK;
        }
        if (model) {
                m = glob_escape(model);
                v = vendor ? glob_escape(vendor) : NULL;
                f = fw ? glob_escape(fw) : NULL;
                if (!m || (vendor && !v) || (fw && !f))
                        return fail(EXIT_PROTOCOL, "out of memory");
                /* One controller model can carry conventional and zoned
                 * namespaces (QEMU's does): the zoned model is part of the kind. */
                if (!zoned)
                        zoned = "none";
                section_name(name, name_size, model, fw, streq(zoned, "none") ? NULL : zoned);
                k = asprintf(&s, "MatchModel=%s\n%s%s%s%s%s%sMatchZoned=%s\n", m, v ? "MatchVendor=" : "", strempty(v),
                             v ? "\n" : "", f ? "MatchFirmware=" : "", strempty(f), f ? "\n" : "", zoned);
        } else if (backing && streq_ptr(jstr(dev, "transport"), "loop")) {
                /* A loop device is of the kind of the file it is over: the
                 * same file name, in whatever directory a host keeps it. */
                const char *base = strrchr(backing, '/');
                base = base ? base + 1 : backing;
                m = glob_escape(base);
                if (!m)
                        return fail(EXIT_PROTOCOL, "out of memory");
                section_name(name, name_size, "loop", base, NULL);
                k = asprintf(&s, "MatchTransport=loop\nMatchBackingFile=*/%s\n", m);
        } else
                return fail(EXIT_NO_SUCH,
                            "%s: no model, and not a loop device: nothing says which disks are of its kind "
                            "(write the Match* keys by hand; blkmqctl show %s lists what it has)",
                            dash(jstr(dev, "device")), dash(jstr(dev, "device")));
        if (k < 0)
                return fail(EXIT_PROTOCOL, "out of memory");
        *ret = s;
        return EXIT_OK;
}

/* The figures of each candidate of a trial, as comment lines. */
static void print_trial_comment(json_t *t) {
        char started[64], ended[64];
        json_t *c;
        size_t i;

        format_utc(started, sizeof started, jint(t, "startedUsec", 0));
        format_utc(ended, sizeof ended, jint(t, "endedUsec", 0));
        printf("# Trial from %s to %s: %s %s: %s\n", started, ended, dash(jstr(t, "verdict")), dash(jstr(t, "winner")),
               dash(jstr(t, "reason")));
        printf("# confidence %.1f %%, reads ranked by %s, objective %s\n", jreal(t, "confidence") * 100,
               streq_ptr(jstr(t, "readLatency"), "p99") ? "the probes' p99" : "the mean read await",
               dash(jstr(t, "objective")));
        printf("#   %-34s %6s %12s %12s %10s %10s\n", "SETTING", "EPOCHS", "READ AWAIT", "READ P99", "WRITE MB/s",
               "READ MB/s");
        json_array_foreach(json_object_get(t, "candidates"), i, c) {
                char p99[16] = "-";
                if (jreal(c, "readP99Ms") > 0)
                        snprintf(p99, sizeof p99, "%.2f ms", jreal(c, "readP99Ms"));
                printf("#   %-34s %6lld %9.2f ms %12s %10.1f %10.1f%s\n", dash(jstr(c, "setting")), jint(c, "epochs", 0),
                       jreal(c, "readAwaitMs"), p99, jreal(c, "writeMBps"), jreal(c, "readMBps"),
                       (long long) i == jint(t, "winnerIndex", -1)            ? "  <- chosen"
                       : json_is_true(json_object_get(c, "baseline"))        ? "  (before the trial)"
                                                                             : "");
        }
}

/* keys: [{key, value, from}], printed in order, each after a comment
 * saying where it came from. */
static int print_section(json_t *dev, const char *what, json_t *trial, json_t *keys, const char *left_out) {
        _cleanup_free_ char *match = NULL;
        char name[SECTION_NAME_MAX + 1], now[64], host[256] = "";
        struct timespec ts;
        json_t *k;
        size_t i;
        int r;

        r = match_lines(dev, name, sizeof name, &match);
        if (r != EXIT_OK)
                return r;
        clock_gettime(CLOCK_REALTIME, &ts);
        format_utc(now, sizeof now, (long long) ts.tv_sec * 1000000);
        (void) gethostname(host, sizeof host - 1);

        printf("# blkmqd.conf(5) drop-in: %s of %s (%s) on %s, written %s by blkmqctl %s.\n", what,
               dash(jstr(dev, "device")), dash(jstr(dev, "id")), host[0] ? host : "-", now, PACKAGE_VERSION);
        printf("# model %s, vendor %s, firmware %s, transport %s.\n", dash(jstr(dev, "model")),
               dash(jstr(dev, "vendor")), dash(jstr(dev, "firmware")), dash(jstr(dev, "transport")));
        printf("# Ship it as /etc/blkmqd/blkmqd.conf.d/60-%s.conf, then: blkmqctl reload\n", name);
        if (json_is_object(trial))
                print_trial_comment(trial);
        if (left_out)
                printf("# Left out: %s\n", left_out);
        printf("\n[Device %s]\n%s", name, match);
        json_array_foreach(keys, i, k) {
                if (jstr(k, "from"))
                        printf("# %s\n", jstr(k, "from"));
                printf("%s=%s\n", jstr(k, "key"), jstr(k, "value"));
        }
        printf("# The setting is known for these disks: no trial of their own (remove to let them try).\n"
               "AutoTune=no\n");
        return EXIT_OK;
}

static int add_key(json_t *keys, const char *key, const char *value, const char *from) {
        json_t *o = json_pack("{s:s, s:s, s:s?}", "key", key, "value", value, "from", from);

        if (!o || json_array_append_new(keys, o) < 0)
                return fail(EXIT_PROTOCOL, "out of memory");
        return EXIT_OK;
}

static int get_device(Ctl *c, const char *device, json_t **ret_reply, json_t **ret_dev) {
        _cleanup_(json_decrefp) json_t *params = device_params(device);
        int r;

        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = ctl_call(c, INTERFACE ".GetDevice", params, ret_reply);
        if (r != EXIT_OK)
                return r;
        *ret_dev = json_object_get(*ret_reply, "device");
        if (!json_is_object(*ret_dev))
                return fail(EXIT_PROTOCOL, "%s: GetDevice replied without a device", device);
        return EXIT_OK;
}

/* Did the trial's bounds have nr_requests (AutoNrRequests=)? */
static bool any_nr_requests(json_t *t) {
        json_t *c;
        size_t i;

        json_array_foreach(json_object_get(t, "candidates"), i, c)
                if (jint(c, "nrRequests", 0) > 0)
                        return true;
        return false;
}

/* trial DEVICE --emit-conf: the last reply of the trial in p. */
int emit_trial_conf(Ctl *c, json_t *p) {
        _cleanup_(json_decrefp) json_t *reply = NULL, *keys = json_array();
        json_t *t = json_object_get(p, "trial"), *dev, *w;
        const char *device = jstr(p, "device");
        char from[160], buf[32];
        int r;

        if (!keys || !device)
                return fail(EXIT_PROTOCOL, "out of memory, or a trial reply without a device");
        if (!streq_ptr(jstr(t, "state"), "decided"))
                return fail(EXIT_SETTING_FAILED, "%s: the trial did not decide (%s%s%s): nothing to emit", device,
                            dash(jstr(t, "state")), jstr(t, "abortReason") ? ": " : "", strempty(jstr(t, "abortReason")));
        w = json_array_get(json_object_get(t, "candidates"), (size_t) jint(t, "winnerIndex", -1));
        if (!json_is_object(w) || !jstr(w, "scheduler"))
                return fail(EXIT_PROTOCOL, "%s: the trial's reply names no winner (a blkmqd older than this blkmqctl?)",
                            device);
        r = get_device(c, device, &reply, &dev);
        if (r != EXIT_OK)
                return r;

        snprintf(from, sizeof from, "%s by the trial: %s", streq_ptr(jstr(t, "verdict"), "change") ? "chosen" : "kept",
                 dash(jstr(t, "winner")));
        r = add_key(keys, "Scheduler", jstr(w, "scheduler"), from);
        if (r == EXIT_OK && jint(w, "nrRequests", 0) > 0) {
                snprintf(buf, sizeof buf, "%lld", jint(w, "nrRequests", 0));
                r = add_key(keys, "NrRequests", buf, NULL);
        }
        if (r == EXIT_OK && json_is_integer(json_object_get(w, "wbtLatUsec"))) {
                snprintf(buf, sizeof buf, "%lld", jint(w, "wbtLatUsec", 0));
                r = add_key(keys, "WbtLatUsec", buf, NULL);
        }
        if (r == EXIT_OK && json_is_integer(json_object_get(w, "readAheadKB"))) {
                snprintf(buf, sizeof buf, "%lld", jint(w, "readAheadKB", 0));
                r = add_key(keys, "ReadAheadKB", buf, NULL);
        }
        /* a search's scheduler tunables (AutoKnobs=iosched), by their key */
        static const char *const iosched_keys[][2] = {
                { "read_lat_nsec", "ReadLatNsec" },       { "write_lat_nsec", "WriteLatNsec" },
                { "fifo_batch", "DeadlineFifoBatch" },    { "writes_starved", "DeadlineWritesStarved" },
                { "low_latency", "BfqLowLatency" },       { "slice_idle", "BfqSliceIdleMSec" },
        };
        json_t *io = json_object_get(w, "iosched");
        for (size_t i = 0; r == EXIT_OK && io && i < ELEMENTSOF(iosched_keys); i++)
                if (json_is_integer(json_object_get(io, iosched_keys[i][0]))) {
                        snprintf(buf, sizeof buf, "%lld", jint(io, iosched_keys[i][0], 0));
                        r = add_key(keys, iosched_keys[i][1], buf, NULL);
                }
        if (r != EXIT_OK)
                return r;
        return print_section(dev, "the choice of a trial", t, keys,
                             streq(jstr(w, "scheduler"), "none") && any_nr_requests(t)
                                     ? "NrRequests= (blkmqd never sets nr_requests with none)"
                                     : NULL);
}

/* export DEVICE: the static keys in force, as Explain resolves them, with
 * what a trial chose in place of its knobs; the active profile's values
 * are left out (a profile is for a time, not for a kind of disk). */
int verb_export(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL("export");
        _cleanup_(json_decrefp) json_t *dreply = NULL, *explain = NULL, *params = device_params(argv[1]),
                                       *keys = json_array();
        _cleanup_free_ char *left_out = NULL;
        json_t *dev, *at, *v;
        size_t i;
        int r;

        if (!params || !keys)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = get_device(&c, argv[1], &dreply, &dev);
        if (r != EXIT_OK)
                return r;
        at = json_object_get(dev, "autotune");
        if (streq_ptr(jstr(json_object_get(at, "trial"), "state"), "running"))
                return fail(EXIT_LEASE_STATE, "%s: a trial is running: export what it decides once it has", argv[1]);
        r = ctl_call(&c, INTERFACE ".Explain", params, &explain);
        if (r != EXIT_OK)
                return r;
        if (!json_is_true(json_object_get(explain, "managed")))
                return fail(EXIT_NO_SUCH, "%s: no [Device] section matches it: no policy is in force to export "
                                          "(blkmqctl explain %s says why)", argv[1], argv[1]);

        json_array_foreach(json_object_get(explain, "values"), i, v) {
                const char *section = jstr(v, "section");
                char from[4200];

                if (!jstr(v, "key") || !jstr(v, "value"))
                        continue;
                if (section && strncmp(section, "Profile ", 8) == 0) {
                        char *l = NULL;
                        if (asprintf(&l, "%s%s%s=%s (%s)", strempty(left_out), left_out ? ", " : "", jstr(v, "key"),
                                     jstr(v, "value"), section) < 0)
                                return fail(EXIT_PROTOCOL, "out of memory");
                        free(left_out);
                        left_out = l;
                        continue;
                }
                snprintf(from, sizeof from, "%s, %s", dash(section), dash(jstr(v, "origin")));
                r = add_key(keys, jstr(v, "key"), jstr(v, "value"), from);
                if (r != EXIT_OK)
                        return r;
        }
        if (json_array_size(keys) == 0)
                return fail(EXIT_NO_SUCH, "%s: its [Device] sections set no key: nothing to export", argv[1]);
        /* The trial's figures, when what a trial chose is what is in force. */
        return print_section(dev, "the settings in force", jstr(at, "chosen") ? json_object_get(at, "trial") : NULL,
                             keys, left_out);
}
