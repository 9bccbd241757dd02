/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <grp.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "conf.h"
#include "log.h"
#include "util.h"

typedef enum SectionKind {
        SECTION_NONE,
        SECTION_DAEMON,
        SECTION_ZONES,
        SECTION_DEVICE,
        SECTION_PROFILE,
        SECTION_INVALID, /* a header with an error: its keys are not looked at (config_check()) */
} SectionKind;

/* Every error of a check (config_check()), not only the first. */
typedef struct ErrorList {
        ConfigError *errors;
        size_t n;
} ErrorList;

#define CONFIG_CHECK_ERRORS_MAX 100U

typedef struct Parser {
        Config *config;
        const char *file;
        FILE *f;
        unsigned line;
        char *buf;
        size_t bufsize;
        SectionKind kind;
        size_t index; /* into devices or profiles */
        char **seen; /* section headers seen in this file */
        ConfigError *err;
        ErrorList *list; /* config_check(): go on past an error, and keep each one here */
        bool failed;
} Parser;

/* Keeps a copy of err in list (the first CONFIG_CHECK_ERRORS_MAX; list
 * NULL: nothing). */
static void error_list_add(ErrorList *list, const ConfigError *err) {
        ConfigError *t;

        if (!list || list->n >= CONFIG_CHECK_ERRORS_MAX)
                return;
        t = realloc(list->errors, sizeof *t * (list->n + 1));
        if (!t)
                return; /* the first error is in *err all the same */
        list->errors = t;
        list->errors[list->n++] = *err;
}

static bool error_list_has_line(const ErrorList *list, const char *file, unsigned line) {
        for (size_t i = 0; list && i < list->n; i++)
                if (list->errors[i].line == line && streq(list->errors[i].file, file))
                        return true;
        return false;
}

_printf_(2, 3) static int parser_error(Parser *p, const char *fmt, ...) {
        ConfigError e = {};
        va_list ap;

        if (p->failed && !p->list)
                return -EINVAL;
        snprintf(e.file, sizeof e.file, "%s", p->file);
        e.line = p->line;
        va_start(ap, fmt);
        vsnprintf(e.message, sizeof e.message, fmt, ap);
        va_end(ap);
        if (!p->failed)
                *p->err = e;
        p->failed = true;
        error_list_add(p->list, &e);
        return -EINVAL;
}

static void settings_done(Settings *s) {
        for (int i = 0; i < _KNOB_MAX; i++) {
                free(s->value[i]);
                free(s->origin[i]);
        }
}

static void match_done(Match *m) {
        strv_free(m->kernel);
        strv_free(m->backing_file);
        strv_free(m->zoned);
        strv_free(m->driver);
        strv_free(m->transport);
        strv_free(m->model);
        strv_free(m->vendor);
        strv_free(m->firmware);
        strv_free(m->serial);
        strv_free(m->wwn);
        strv_free(m->property);
        strv_free(m->volume);
        strv_free(m->dm_name);
        strv_free(m->dm_uuid);
        strv_free(m->crypt);
        strv_free(m->mpath_wwid);
        strv_free(m->md_name);
        strv_free(m->md_level);
}

Config *config_free(Config *c) {
        if (!c)
                return NULL;
        for (size_t i = 0; i < c->n_devices; i++) {
                free(c->devices[i].name);
                free(c->devices[i].file);
                match_done(&c->devices[i].match);
                settings_done(&c->devices[i].settings);
                autotune_policy_done(&c->devices[i].autotune);
                free(c->devices[i].autotune_origin);
        }
        free(c->devices);
        for (size_t i = 0; i < c->n_profiles; i++) {
                free(c->profiles[i].name);
                free(c->profiles[i].file);
                strv_free(c->profiles[i].devices);
                settings_done(&c->profiles[i].settings);
        }
        free(c->profiles);
        free(c->daemon.admin_group);
        free(c->daemon.metrics_textfile);
        free(c->daemon.originals_directory);
        free(c->daemon.state_directory);
        free(c->zones.emulate);
        free(c->zones.database);
        strv_free(c->files);
        free(c);
        return NULL;
}

static Config *config_new(void) {
        Config *c = calloc(1, sizeof *c);
        if (!c)
                return NULL;
        c->daemon.restore_on_exit = true;
        c->daemon.log_level = -1;
        c->daemon.apply_threads = CONFIG_DEFAULT_APPLY_THREADS;
        c->daemon.probe_interval_usec = CONFIG_DEFAULT_PROBE_INTERVAL_USEC;
        c->daemon.probe_threads = CONFIG_DEFAULT_PROBE_THREADS;
        c->daemon.call_timeout_usec = CONFIG_DEFAULT_CALL_TIMEOUT_USEC;
        c->daemon.autotune_trials_per_hour = CONFIG_DEFAULT_AUTOTUNE_TRIALS_PER_HOUR;
        c->daemon.drift_check_usec = CONFIG_DEFAULT_DRIFT_CHECK_USEC;
        c->daemon.drift_policy = DRIFT_REPORT;
        c->zones.zone_size = 64 * UINT64_C(1024 * 1024);
        c->zones.zone_count = 16;
        c->zones.reset_batch = 4;
        c->zones.verify_while_writing = true;
        c->zones.unique_labels = true;
        c->zones.scrub_interval_usec = ZONES_SCRUB_INTERVAL_DEFAULT_USEC;
        c->zones.scrub_rate = ZONES_SCRUB_RATE_DEFAULT;
        c->zones.database = strdup("/var/lib/blkmqd/zones.db");
        /* systemd's StateDirectory= hands it over in $STATE_DIRECTORY (the
         * first of a colon-separated list) */
        const char *sd = getenv("STATE_DIRECTORY");
        if (sd && sd[0] == '/')
                c->daemon.state_directory = strndup(sd, strcspn(sd, ":"));
        else
                c->daemon.state_directory = strdup(CONFIG_DEFAULT_STATE_DIRECTORY);
        if (!c->zones.database || !c->daemon.state_directory) {
                free(c->zones.database);
                free(c->daemon.state_directory);
                return mfree(c);
        }
        return c;
}

const char *drift_policy_to_string(DriftPolicy p) {
        static const char *const names[_DRIFT_POLICY_MAX] = {
                [DRIFT_REPORT] = "report",
                [DRIFT_REAPPLY] = "reapply",
                [DRIFT_KEEP] = "keep",
        };
        return (unsigned) p < _DRIFT_POLICY_MAX ? names[p] : NULL;
}

int drift_policy_from_string(const char *s) {
        for (int p = 0; p < _DRIFT_POLICY_MAX; p++)
                if (streq(s, drift_policy_to_string(p)))
                        return p;
        return -EINVAL;
}

const DeviceSection *config_find_device(const Config *c, const char *name) {
        for (size_t i = 0; i < c->n_devices; i++)
                if (streq(c->devices[i].name, name))
                        return &c->devices[i];
        return NULL;
}

const ProfileSection *config_find_profile(const Config *c, const char *name) {
        for (size_t i = 0; i < c->n_profiles; i++)
                if (streq(c->profiles[i].name, name))
                        return &c->profiles[i];
        return NULL;
}

static bool section_name_valid(const char *s) {
        if (!*s || strlen(s) > 64)
                return false;
        for (; *s; s++)
                if (!isalnum((unsigned char) *s) && !strchr("-_.@", *s))
                        return false;
        return true;
}

/* "Device  nvme" → "nvme" for kind "Device"; NULL if name is not of it. */
static const char *section_arg(const char *name, const char *kind) {
        size_t k = strlen(kind);

        if (strncmp(name, kind, k) != 0 || !isspace((unsigned char) name[k]))
                return NULL;
        name += k;
        while (isspace((unsigned char) *name))
                name++;
        return name;
}

/* Called by our reader for every "[...]" line, before inih sees it, so that
 * empty and repeated sections are seen with their line numbers. */
static int parser_section(Parser *p, char *hdr) {
        Config *c = p->config;
        const char *n;
        char *end, *name;

        end = strchr(hdr, ']');
        if (!end)
                return parser_error(p, "section header without closing ']'");
        *end = 0;
        end = strstrip(end + 1);
        if (*end && *end != '#' && *end != ';')
                return parser_error(p, "unexpected text after section header");
        name = strstrip(hdr + 1);

        if (strv_contains(p->seen, name))
                return parser_error(p, "duplicate section [%s] in this file", name);
        if (strv_extend(&p->seen, name) < 0)
                return -ENOMEM;

        if (streq(name, "Daemon")) {
                p->kind = SECTION_DAEMON;
                return 0;
        }
        if (streq(name, "Zones")) {
                p->kind = SECTION_ZONES;
                return 0;
        }
        if ((n = section_arg(name, "Device"))) {
                if (!section_name_valid(n))
                        return parser_error(p, "invalid device section name \"%s\"", n);
                p->kind = SECTION_DEVICE;
                const DeviceSection *e = config_find_device(c, n);
                if (e) { /* a drop-in extends a section of an earlier file */
                        p->index = (size_t) (e - c->devices);
                        return 0;
                }
                DeviceSection *t = realloc(c->devices, sizeof *t * (c->n_devices + 1));
                if (!t)
                        return -ENOMEM;
                c->devices = t;
                t = &c->devices[c->n_devices];
                *t = (DeviceSection) { .match.rotational = -1, .line = p->line, .drift_policy = -1 };
                autotune_policy_init(&t->autotune);
                t->name = strdup(n);
                t->file = strdup(p->file);
                p->index = c->n_devices++;
                return t->name && t->file ? 0 : -ENOMEM;
        }
        if ((n = section_arg(name, "Profile"))) {
                if (!section_name_valid(n))
                        return parser_error(p, "invalid profile name \"%s\"", n);
                p->kind = SECTION_PROFILE;
                const ProfileSection *e = config_find_profile(c, n);
                if (e) {
                        p->index = (size_t) (e - c->profiles);
                        return 0;
                }
                ProfileSection *t = realloc(c->profiles, sizeof *t * (c->n_profiles + 1));
                if (!t)
                        return -ENOMEM;
                c->profiles = t;
                t = &c->profiles[c->n_profiles];
                *t = (ProfileSection) { .line = p->line };
                t->name = strdup(n);
                t->file = strdup(p->file);
                p->index = c->n_profiles++;
                return t->name && t->file ? 0 : -ENOMEM;
        }
        p->kind = SECTION_NONE;
        return parser_error(p, "unknown section [%s] (expected [Daemon], [Zones], [Device NAME] or [Profile NAME])", name);
}

/* A KEY=VALUE (or KEY:VALUE) line as inih sees it: the delimiter comes
 * before an inline comment (a ';' after a blank). */
static bool line_has_assignment(const char *s) {
        for (const char *c = s; *c; c++) {
                if (*c == '=' || *c == ':')
                        return true;
                if (*c == ';' && c > s && isspace((unsigned char) c[-1]))
                        return false;
        }
        return false;
}

static char *parser_reader(char *str, int num, void *stream) {
        Parser *p = stream;
        ssize_t n;
        char *s;

        n = getline(&p->buf, &p->bufsize, p->f);
        if (n < 0)
                return NULL;
        p->line++;
        while (n > 0 && (p->buf[n - 1] == '\n' || p->buf[n - 1] == '\r'))
                p->buf[--n] = 0;
        if (p->line == 1 && strncmp(p->buf, "\xEF\xBB\xBF", 3) == 0) {
                memmove(p->buf, p->buf + 3, n - 2);
                n -= 3;
        }
        if (n > num - 2) {
                parser_error(p, "line too long (%zd characters, at most %d)", n, num - 2);
                str[0] = 0;
                return str;
        }
        /* Leading blanks are ignored, as systemd does: an indented line is
         * never an inih continuation of the previous value. */
        s = strstrip(p->buf);
        n = strlen(s);
        if (*s == '[') {
                char copy[n + 1];
                int r;

                memcpy(copy, s, strlen(s) + 1);
                r = parser_section(p, copy);
                if (r == -ENOMEM)
                        parser_error(p, "out of memory");
                if (r < 0)
                        p->kind = SECTION_INVALID;
        } else if (p->list && *s && !strchr(";#", *s) && !line_has_assignment(s))
                /* What inih calls an error (it returns only the first). */
                parser_error(p, "syntax error (expected KEY=VALUE or [Section])");
        memcpy(str, s, n + 1);
        str[n] = '\n';
        str[n + 1] = 0;
        return str;
}

static int set_list(Parser *p, char ***l, const char *value) {
        _cleanup_strv_free_ char **add = NULL;

        if (!*value) { /* an empty assignment resets the list */
                strv_free(*l);
                *l = NULL;
                return 0;
        }
        if (strv_split_ws(value, &add) < 0)
                return -ENOMEM;
        STRV_FOREACH(s, add)
                if (strv_extend(l, *s) < 0)
                        return -ENOMEM;
        return 0;
}

static int parse_size_range(const char *v, uint64_t *min, uint64_t *max) {
        const char *dash = strchr(v, '-');
        char a[64] = "", b[64] = "";
        int r;

        if (!dash || strchr(dash + 1, '-'))
                return -EINVAL;
        if ((size_t) (dash - v) >= sizeof a || strlen(dash + 1) >= sizeof b)
                return -EINVAL;
        memcpy(a, v, dash - v);
        strcpy(b, dash + 1);
        *min = 0;
        *max = UINT64_MAX;
        if (*strstrip(a)) {
                r = parse_size(strstrip(a), min);
                if (r < 0)
                        return r;
        }
        if (*strstrip(b)) {
                r = parse_size(strstrip(b), max);
                if (r < 0)
                        return r;
        }
        if (*min > *max)
                return -ERANGE;
        return 0;
}

static int parse_match(Parser *p, Match *m, const char *key, const char *value) {
        int r;

        if (streq(key, "MatchKernel"))
                return set_list(p, &m->kernel, value);
        if (streq(key, "MatchBackingFile"))
                return set_list(p, &m->backing_file, value);
        if (streq(key, "MatchDriver"))
                return set_list(p, &m->driver, value);
        if (streq(key, "MatchTransport"))
                return set_list(p, &m->transport, value);
        if (streq(key, "MatchModel") || streq(key, "MatchVendor")) {
                /* Model and vendor names contain blanks: the whole value
                 * is one glob; another line adds one. */
                char ***l = streq(key, "MatchModel") ? &m->model : &m->vendor;
                if (!*value) {
                        strv_free(*l);
                        *l = NULL;
                        return 0;
                }
                return strv_extend(l, value);
        }
        if (streq(key, "MatchFirmware"))
                return set_list(p, &m->firmware, value);
        if (streq(key, "MatchSerial"))
                return set_list(p, &m->serial, value);
        if (streq(key, "MatchWWN"))
                return set_list(p, &m->wwn, value);
        if (streq(key, "MatchZoned")) {
                _cleanup_strv_free_ char **l = NULL;
                if (strv_split_ws(value, &l) < 0)
                        return -ENOMEM;
                STRV_FOREACH(s, l)
                        if (!streq(*s, "none") && !streq(*s, "host-aware") && !streq(*s, "host-managed"))
                                return parser_error(p, "MatchZoned=: \"%s\" is not one of none, host-aware, host-managed", *s);
                return set_list(p, &m->zoned, value);
        }
        if (streq(key, "MatchProperty")) {
                _cleanup_strv_free_ char **l = NULL;
                if (strv_split_ws(value, &l) < 0)
                        return -ENOMEM;
                STRV_FOREACH(s, l)
                        if (!strchr(*s, '=') || **s == '=')
                                return parser_error(p, "MatchProperty=: \"%s\" is not KEY=GLOB", *s);
                return set_list(p, &m->property, value);
        }
        if (streq(key, "MatchVolume")) {
                _cleanup_strv_free_ char **l = NULL;
                if (strv_split_ws(value, &l) < 0)
                        return -ENOMEM;
                STRV_FOREACH(s, l) {
                        const char *sl = strchr(*s, '/');
                        if (!sl || sl == *s || !sl[1] || strchr(sl + 1, '/'))
                                return parser_error(p, "MatchVolume=: \"%s\" is not VG/LV (globs on the volume group and the logical volume, e.g. vgdata/* for every volume of vgdata)", *s);
                }
                return set_list(p, &m->volume, value);
        }
        if (streq(key, "MatchDMName"))
                return set_list(p, &m->dm_name, value);
        if (streq(key, "MatchDMUUID"))
                return set_list(p, &m->dm_uuid, value);
        if (streq(key, "MatchCrypt"))
                return set_list(p, &m->crypt, value);
        if (streq(key, "MatchMultipathWWID"))
                return set_list(p, &m->mpath_wwid, value);
        if (streq(key, "MatchMDName"))
                return set_list(p, &m->md_name, value);
        if (streq(key, "MatchMDLevel")) {
                static const char *const levels[] = { "linear", "raid0", "raid1", "raid4", "raid5", "raid6",
                                                      "raid10", "multipath", "faulty", "container" };
                _cleanup_strv_free_ char **l = NULL;
                if (strv_split_ws(value, &l) < 0)
                        return -ENOMEM;
                STRV_FOREACH(s, l) {
                        bool known = false;
                        for (size_t i = 0; i < ELEMENTSOF(levels); i++)
                                known = known || fnmatch(*s, levels[i], 0) == 0;
                        if (!known)
                                return parser_error(p, "MatchMDLevel=: \"%s\" matches no md level (linear, raid0, raid1, raid4, raid5, raid6, raid10)", *s);
                }
                return set_list(p, &m->md_level, value);
        }
        if (streq(key, "MatchRotational")) {
                if (!*value) {
                        m->rotational = -1;
                        return 0;
                }
                r = parse_boolean(value);
                if (r < 0)
                        return parser_error(p, "MatchRotational=: expected a boolean, got \"%s\"", value);
                m->rotational = r;
                return 0;
        }
        if (streq(key, "MatchSize")) {
                if (!*value) {
                        m->has_size = false;
                        return 0;
                }
                if (parse_size_range(value, &m->size_min, &m->size_max) < 0)
                        return parser_error(p, "MatchSize=: expected MIN-MAX with sizes like 1G-2T (either side may be empty), got \"%s\"", value);
                m->has_size = true;
                return 0;
        }
        return -ENOENT;
}

static int parse_setting(Parser *p, Settings *s, const char *key, const char *value) {
        char origin[4200];
        const char *msg;
        char *v = NULL;
        int k, r;

        k = knob_from_key(key);
        if (k < 0)
                return -ENOENT;
        snprintf(origin, sizeof origin, "%s:%u", p->file, p->line);
        if (!*value) { /* empty assignment unsets: a drop-in can take a key back */
                s->value[k] = mfree(s->value[k]);
                s->origin[k] = mfree(s->origin[k]);
                return 0;
        }
        r = knob_parse_value(k, value, &v, &msg);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return parser_error(p, "%s=: %s, got \"%s\"", key, msg, value);
        free(s->value[k]);
        s->value[k] = v;
        r = free_and_strdup(&s->origin[k], origin);
        return r;
}

static int parse_autotune(Parser *p, DeviceSection *d, const char *key, const char *value) {
        char msgbuf[256], origin[4200];
        const char *msg = NULL;
        int r;

        r = autotune_policy_parse(&d->autotune, key, value, msgbuf, sizeof msgbuf, &msg);
        if (r == -EINVAL)
                return parser_error(p, "%s=: %s, got \"%s\"", key, msg, value);
        if (r == 0 && streq(key, "AutoTune")) {
                snprintf(origin, sizeof origin, "%s:%u", p->file, p->line);
                return free_and_strdup(&d->autotune_origin, origin);
        }
        return r;
}

static int parse_daemon(Parser *p, const char *key, const char *value) {
        DaemonConfig *d = &p->config->daemon;
        int r;

        if (streq(key, "RestoreOnExit")) {
                r = parse_boolean(value);
                if (r < 0)
                        return parser_error(p, "RestoreOnExit=: expected a boolean, got \"%s\"", value);
                d->restore_on_exit = r;
                return 0;
        }
        if (streq(key, "LogLevel")) {
                r = log_level_from_string(value);
                if (r < 0)
                        return parser_error(p, "LogLevel=: expected one of emerg, alert, crit, err, warning, notice, info, debug, got \"%s\"", value);
                d->log_level = r;
                return 0;
        }
        if (streq(key, "ApplyThreads")) {
                int n;
                if (safe_atoi(value, &n) < 0 || n < 1 || n > 256)
                        return parser_error(p, "ApplyThreads=: expected a number from 1 to 256, got \"%s\"", value);
                d->apply_threads = n;
                return 0;
        }
        if (streq(key, "ProbeIntervalSec")) {
                uint64_t us;
                if (parse_seconds(value, &us) < 0 || (us != 0 && us < 10000))
                        return parser_error(p, "ProbeIntervalSec=: expected seconds (0 turns probes off, else at least 0.01), got \"%s\"", value);
                d->probe_interval_usec = us;
                return 0;
        }
        if (streq(key, "ProbeThreads")) {
                int n;
                if (safe_atoi(value, &n) < 0 || n < 1 || n > 64)
                        return parser_error(p, "ProbeThreads=: expected a number from 1 to 64, got \"%s\"", value);
                d->probe_threads = n;
                return 0;
        }
        if (streq(key, "MetricsTextfile")) {
                size_t n = strlen(value);
                if (*value && (value[0] != '/' || n < 6 || !streq(value + n - 5, ".prom")))
                        return parser_error(p, "MetricsTextfile=: expected an absolute path ending in .prom (node_exporter's textfile collector), got \"%s\"", value);
                return free_and_strdup(&d->metrics_textfile, *value ? value : NULL);
        }
        if (streq(key, "StateDirectory")) {
                if (value[0] != '/')
                        return parser_error(p, "StateDirectory=: expected an absolute path, got \"%s\"", value);
                return free_and_strdup(&d->state_directory, value);
        }
        if (streq(key, "CallTimeoutSec")) {
                long long v;
                if (safe_atolli(value, &v) < 0 || v < 0 || v > 86400)
                        return parser_error(p, "CallTimeoutSec=: expected seconds from 0 (no limit) to 86400, got \"%s\"",
                                            value);
                d->call_timeout_usec = (uint64_t) v * 1000000;
                return 0;
        }
        if (streq(key, "TrialsPerHourAllDevices") || streq(key, "AutoTrialsPerHour")) {
                long long v;
                /* The cap's old name, which [Device] uses for its own
                 * per-device limit: still read, with a warning. */
                if (streq(key, "AutoTrialsPerHour"))
                        log_warning("%s:%u: AutoTrialsPerHour= in [Daemon] is the old name of TrialsPerHourAllDevices=; "
                                    "rename it (in [Device], AutoTrialsPerHour= is the per-device limit)",
                                    p->file, p->line);
                if (safe_atolli(value, &v) < 0 || v < 1 || v > 3600)
                        return parser_error(p, "%s=: expected a number from 1 to 3600 (trials across all devices), got \"%s\"",
                                            key, value);
                d->autotune_trials_per_hour = (unsigned) v;
                return 0;
        }
        if (streq(key, "DriftCheckSec")) {
                uint64_t us;
                if (parse_seconds(value, &us) < 0 || (us != 0 && us < 100000) || us > 86400ULL * 1000000)
                        return parser_error(p, "DriftCheckSec=: expected seconds from 0.1 to 86400 (0 turns the check off), got \"%s\"",
                                            value);
                d->drift_check_usec = us;
                return 0;
        }
        if (streq(key, "DriftPolicy")) {
                r = drift_policy_from_string(value);
                if (r < 0)
                        return parser_error(p, "DriftPolicy=: expected report, reapply or keep, got \"%s\"", value);
                d->drift_policy = r;
                return 0;
        }
        if (streq(key, "OriginalsDirectory")) {
                if (*value && value[0] != '/')
                        return parser_error(p, "OriginalsDirectory=: expected an absolute path, got \"%s\"", value);
                return free_and_strdup(&d->originals_directory, *value ? value : NULL);
        }
        if (streq(key, "AdminGroup")) {
                if (*value && !section_name_valid(value))
                        return parser_error(p, "AdminGroup=: invalid group name \"%s\"", value);
                return free_and_strdup(&d->admin_group, *value ? value : NULL);
        }
        return -ENOENT;
}

static int parse_zones(Parser *p, const char *key, const char *value) {
        ZonesConfig *z = &p->config->zones;
        long long v;

        if (streq(key, "Emulate") || streq(key, "Database")) {
                if (*value && value[0] != '/')
                        return parser_error(p, "%s=: expected an absolute path, got \"%s\"", key, value);
                return free_and_strdup(streq(key, "Emulate") ? &z->emulate : &z->database, *value ? value : NULL);
        }
        if (streq(key, "ZoneSizeMB") || streq(key, "ZoneCapacityMB")) {
                if (safe_atolli(value, &v) < 0 || v < 1 || v > 65536)
                        return parser_error(p, "%s=: expected MiB from 1 to 65536, got \"%s\"", key, value);
                *(streq(key, "ZoneSizeMB") ? &z->zone_size : &z->zone_capacity) = (uint64_t) v << 20;
                return 0;
        }
        if (streq(key, "AppendChunkKB")) {
                if (safe_atolli(value, &v) < 0 || v < 0 || v > 1024 || v % 4)
                        return parser_error(p, "AppendChunkKB=: expected KiB from 4 to 1024, a multiple of 4 "
                                            "(0: the device's largest), got \"%s\"", value);
                z->append_chunk = (uint32_t) v * 1024;
                return 0;
        }
        if (streq(key, "VerifyWhileWriting") || streq(key, "UniqueLabels")) {
                int b = parse_boolean(value);
                if (b < 0)
                        return parser_error(p, "%s=: expected a boolean, got \"%s\"", key, value);
                *(streq(key, "UniqueLabels") ? &z->unique_labels : &z->verify_while_writing) = b;
                return 0;
        }
        if (streq(key, "ScrubIntervalSec")) {
                if (safe_atolli(value, &v) < 0 || v < 0 || v > 10LL * 365 * 24 * 3600)
                        return parser_error(p, "ScrubIntervalSec=: expected seconds from 0 (never) to 315360000, "
                                            "got \"%s\"", value);
                z->scrub_interval_usec = (uint64_t) v * 1000000;
                return 0;
        }
        if (streq(key, "ScrubRateMBps")) {
                if (safe_atolli(value, &v) < 0 || v < 1 || v > 100000)
                        return parser_error(p, "ScrubRateMBps=: expected MiB/s from 1 to 100000, got \"%s\"",
                                            value);
                z->scrub_rate = (uint64_t) v << 20;
                return 0;
        }
        if (streq(key, "AppendDepth")) {
                if (safe_atolli(value, &v) < 0 || v < 1 || v > ZONES_APPEND_DEPTH_MAX)
                        return parser_error(p, "AppendDepth=: expected a number from 1 to %u, got \"%s\"",
                                            ZONES_APPEND_DEPTH_MAX, value);
                z->append_depth = (unsigned) v;
                return 0;
        }
        if (streq(key, "ZoneCount") || streq(key, "MaxOpen") || streq(key, "MaxActive") || streq(key, "ResetBatch")) {
                bool count = streq(key, "ZoneCount") || streq(key, "ResetBatch");
                if (safe_atolli(value, &v) < 0 || v < (count ? 1 : 0) || v > 1000000)
                        return parser_error(p, "%s=: expected a number from %d to 1000000, got \"%s\"", key,
                                            count ? 1 : 0, value);
                if (streq(key, "ZoneCount"))
                        z->zone_count = (uint32_t) v;
                else if (streq(key, "MaxOpen"))
                        z->max_open = (uint32_t) v;
                else if (streq(key, "MaxActive"))
                        z->max_active = (uint32_t) v;
                else
                        z->reset_batch = (unsigned) v;
                return 0;
        }
        return -ENOENT;
}

static int parser_handler(void *user, const char *section, const char *key, const char *value) {
        Parser *p = user;
        int r = -ENOENT;

        if (p->failed && !p->list)
                return 1;
        switch (p->kind) {
        case SECTION_INVALID:
                return 1;
        case SECTION_NONE:
                if (!*section)
                        parser_error(p, "%s= outside of a section", key);
                return 1;
        case SECTION_DAEMON:
                r = parse_daemon(p, key, value);
                break;
        case SECTION_ZONES:
                r = parse_zones(p, key, value);
                break;
        case SECTION_DEVICE: {
                DeviceSection *d = &p->config->devices[p->index];
                r = parse_match(p, &d->match, key, value);
                if (r == -ENOENT && streq(key, "DriftPolicy")) {
                        /* empty: back to the [Daemon] one */
                        int dp = *value ? drift_policy_from_string(value) : -1;
                        if (*value && dp < 0)
                                r = parser_error(p, "DriftPolicy=: expected report, reapply or keep, got \"%s\"", value);
                        else {
                                d->drift_policy = dp;
                                r = 0;
                        }
                }
                if (r == -ENOENT)
                        r = parse_setting(p, &d->settings, key, value);
                if (r == -ENOENT)
                        r = parse_autotune(p, d, key, value);
                break;
        }
        case SECTION_PROFILE: {
                ProfileSection *pr = &p->config->profiles[p->index];
                if (streq(key, "Devices"))
                        r = set_list(p, &pr->devices, value);
                else if (strncmp(key, "Match", 5) == 0) {
                        parser_error(p, "%s= belongs in a [Device] section; a [Profile] applies to the devices its Devices= sections matched", key);
                        return 1;
                } else
                        r = parse_setting(p, &pr->settings, key, value);
                break;
        }
        }
        if (r == -ENOENT)
                parser_error(p, "unknown key %s= in this section", key);
        else if (r == -ENOMEM)
                parser_error(p, "out of memory");
        return 1;
}

static int parse_stream(Config *c, FILE *f, const char *name, ConfigError *err, ErrorList *list) {
        Parser p = { .config = c, .file = name, .f = f, .err = err, .list = list };
        int r;

        r = ini_parse_stream(parser_reader, &p, parser_handler, &p);
        free(p.buf);
        strv_free(p.seen);
        if (r != 0 && (!p.failed || !error_list_has_line(list, name, r > 0 ? (unsigned) r : 0))) {
                /* inih's first error, unless the reader said it already (a
                 * check: the reader said every other one) */
                p.line = r > 0 ? (unsigned) r : 0;
                parser_error(&p, "syntax error (expected KEY=VALUE or [Section])");
        }
        if (p.failed)
                return -EINVAL;
        return strv_extend(&c->files, name);
}

static int collect_dropins(const char *dir, char ***names, char ***paths) {
        _cleanup_(closedirp_helper) DIR *d = NULL;
        struct dirent *de;

        d = opendir(dir);
        if (!d)
                return errno == ENOENT ? 0 : -errno;
        while ((de = readdir(d))) {
                size_t n = strlen(de->d_name);
                _cleanup_free_ char *path = NULL;

                if (de->d_name[0] == '.' || n < 6 || !streq(de->d_name + n - 5, ".conf"))
                        continue;
                if (strv_contains(*names, de->d_name))
                        continue; /* masked by an earlier directory */
                if (asprintf(&path, "%s/%s", dir, de->d_name) < 0)
                        return -ENOMEM;
                if (strv_extend(names, de->d_name) < 0 || strv_extend(paths, path) < 0)
                        return -ENOMEM;
        }
        return 0;
}

static int cmp_basename(const void *a, const void *b) {
        const char *x = strrchr(*(char *const *) a, '/'), *y = strrchr(*(char *const *) b, '/');
        return strcmp(x ? x + 1 : *(char *const *) a, y ? y + 1 : *(char *const *) b);
}

/* A whole-configuration error: in *err if it is the first (*failed
 * false), and in list. */
_printf_(6, 7) static void verify_error(ConfigError *err, ErrorList *list, bool *failed, const char *file,
                                        unsigned line, const char *fmt, ...) {
        ConfigError e = {};
        va_list ap;

        snprintf(e.file, sizeof e.file, "%s", file);
        e.line = line;
        va_start(ap, fmt);
        vsnprintf(e.message, sizeof e.message, fmt, ap);
        va_end(ap);
        if (!*failed)
                *err = e;
        *failed = true;
        error_list_add(list, &e);
}

/* Checks that need the whole configuration: the first error, or with a
 * list every one. */
static int config_verify(Config *c, ConfigError *err, ErrorList *list) {
        bool failed = false;

        if (c->zones.zone_capacity > c->zones.zone_size)
                verify_error(err, list, &failed, c->files && c->files[0] ? c->files[0] : "blkmqd.conf", 0,
                             "[Zones] ZoneCapacityMB= exceeds ZoneSizeMB=");
        for (size_t i = 0; i < c->n_profiles && (!failed || list); i++)
                STRV_FOREACH(n, c->profiles[i].devices)
                        if (!config_find_device(c, *n)) {
                                verify_error(err, list, &failed, c->profiles[i].file, c->profiles[i].line,
                                             "[Profile %s]: Devices= names %s, but there is no [Device %s] section",
                                             c->profiles[i].name, *n, *n);
                                if (!list)
                                        break;
                        }
        return failed ? -EINVAL : 0;
}

/* The file's error is in *err; a check (list) keeps it and goes on. */
static int parse_file_checked(Config *c, const char *path, ConfigError *err, ErrorList *list, bool *failed) {
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        ConfigError e = {};
        int r;

        if (!f) {
                r = -errno;
                snprintf(e.file, sizeof e.file, "%s", path);
                snprintf(e.message, sizeof e.message, "cannot read: %s", strerror(-r));
                error_list_add(list, &e);
        } else
                r = parse_stream(c, f, path, &e, list);
        if (r < 0) {
                if (!*failed)
                        *err = e;
                *failed = true;
        }
        /* A check goes on past the file's errors (not past a lack of memory). */
        return r < 0 && list && r != -ENOMEM ? 0 : r;
}

/* config_load(); with list (config_check()) past the first error. */
static int config_load_list(const char *main_path, Config **ret, ConfigError *err, ErrorList *list) {
        /* Fixed, as systemd does it, whatever the build prefix. */
        static const char *const dirs[] = { "/etc/blkmqd", "/run/blkmqd", "/usr/lib/blkmqd" };
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_strv_free_ char **names = NULL, **paths = NULL;
        bool failed = false;
        int r;

        *err = (ConfigError) {};
        c = config_new();
        if (!c)
                return -ENOMEM;

        if (main_path) {
                _cleanup_free_ char *d = NULL;

                r = parse_file_checked(c, main_path, err, list, &failed);
                if (r < 0)
                        return r;
                if (asprintf(&d, "%s.d", main_path) < 0)
                        return -ENOMEM;
                r = collect_dropins(d, &names, &paths);
        } else {
                for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                        _cleanup_free_ char *f = NULL;
                        if (asprintf(&f, "%s/blkmqd.conf", dirs[i]) < 0)
                                return -ENOMEM;
                        if (access(f, F_OK) < 0)
                                continue;
                        r = parse_file_checked(c, f, err, list, &failed);
                        if (r < 0)
                                return r;
                        /* (a check: the file is read, if with errors) */
                        if (list && !strv_contains(c->files, f) && strv_extend(&c->files, f) < 0)
                                return -ENOMEM;
                        break;
                }
                if (!c->files)
                        log_warning("No blkmqd.conf in /etc/blkmqd, /run/blkmqd or /usr/lib/blkmqd.");
                r = 0;
                for (size_t i = 0; i < ELEMENTSOF(dirs) && r >= 0; i++) {
                        _cleanup_free_ char *d = NULL;
                        if (asprintf(&d, "%s/blkmqd.conf.d", dirs[i]) < 0)
                                return -ENOMEM;
                        r = collect_dropins(d, &names, &paths);
                }
        }
        if (r < 0) {
                ConfigError e = {};
                snprintf(e.file, sizeof e.file, "%s", main_path ? main_path : "blkmqd.conf.d");
                snprintf(e.message, sizeof e.message, "cannot list drop-ins: %s", strerror(-r));
                if (!failed)
                        *err = e;
                error_list_add(list, &e);
                return r;
        }
        if (paths)
                qsort(paths, strv_length(paths), sizeof(char *), cmp_basename);
        STRV_FOREACH(pth, paths) {
                r = parse_file_checked(c, *pth, err, list, &failed);
                if (r < 0)
                        return r;
        }
        if (failed)
                return -EINVAL;
        r = config_verify(c, err, list);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(c);
        return 0;
}

int config_load(const char *main_path, Config **ret, ConfigError *err) {
        return config_load_list(main_path, ret, err, NULL);
}

int config_check(const char *main_path, Config **ret, ConfigError **ret_errors, size_t *ret_n_errors) {
        ErrorList list = {};
        ConfigError err;
        int r;

        r = config_load_list(main_path, ret, &err, &list);
        if (r < 0 && list.n == 0) /* out of memory for the list: the first one */
                error_list_add(&list, &err);
        if (r < 0 && list.n == 0) {
                free(list.errors);
                return r;
        }
        *ret_errors = list.errors;
        *ret_n_errors = list.n;
        return r;
}

int config_load_string(const char *text, const char *name, Config **ret, ConfigError *err) {
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_fclose_ FILE *f = NULL;
        int r;

        *err = (ConfigError) {};
        c = config_new();
        if (!c)
                return -ENOMEM;
        f = fmemopen((void *) text, strlen(text), "r");
        if (!f)
                return -errno;
        r = parse_stream(c, f, name, err, NULL);
        if (r < 0)
                return r;
        r = config_verify(c, err, NULL);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(c);
        return 0;
}
