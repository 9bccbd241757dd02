/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The daemon's configuration (io.blkmqd.Manager): reload, profiles,
 * profile NAME, profile --clear, log-level. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "ctl.h"

static bool arg_clear = false;

int profile_opt_clear(const char *arg) {
        arg_clear = true;
        return EXIT_OK;
}

int profiles_options_fit(const char *verb) {
        if (arg_clear && !streq(verb, "profile"))
                return fail(EXIT_USAGE, "--clear goes with profile");
        return EXIT_OK;
}

int verb_reload(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL("reload");
        _cleanup_(json_decrefp) json_t *reply = NULL;
        int r;

        r = ctl_call(&c, INTERFACE ".Reload", NULL, &reply);
        if (r != EXIT_OK)
                return r;
        return print_results("reload", reply);
}

int verb_profile(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL("profile");
        _cleanup_(json_decrefp) json_t *params = NULL, *reply = NULL;
        int r;

        if (arg_clear == (argc > 1))
                return fail(EXIT_USAGE, "profile: give either a profile NAME or --clear");
        if (arg_clear)
                r = ctl_call(&c, INTERFACE ".ClearProfile", NULL, &reply);
        else {
                params = json_pack("{s:s}", "profile", argv[1]);
                if (!params)
                        return fail(EXIT_PROTOCOL, "out of memory");
                r = ctl_call(&c, INTERFACE ".SetProfile", params, &reply);
        }
        if (r != EXIT_OK)
                return r;
        return print_results("profile", reply);
}

/* "ReadAheadKB=1024 NrRequests=64" of a Profile's values. */
static char *profile_keys(json_t *values) {
        _cleanup_(json_decrefp) json_t *l = json_array();
        json_t *v;
        size_t i;

        if (!l)
                return NULL;
        json_array_foreach(values, i, v) {
                char *kv = NULL;
                if (asprintf(&kv, "%s=%s", dash(jstr(v, "key")), dash(jstr(v, "value"))) < 0 ||
                    json_array_append_new(l, json_string(kv)) < 0) {
                        free(kv);
                        return NULL;
                }
                free(kv);
        }
        return join_strings(l, " ");
}

static int profiles_table(json_t *reply, void *userdata) {
        static const char *const h[] = { "PROFILE", "ACTIVE", "DEVICES", "KEYS" };
        _cleanup_(table_freep) Table *t = table_new(ELEMENTSOF(h), h);
        json_t *p;
        size_t i;

        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        json_array_foreach(reply, i, p) {
                _cleanup_free_ char *devices = join_strings(json_object_get(p, "devices"), ",");
                _cleanup_free_ char *keys = profile_keys(json_object_get(p, "values"));

                if (!devices || !keys || table_add(t, jstr(p, "name")) < 0 || table_add(t, jbool(p, "active")) < 0 ||
                    table_add(t, streq(devices, "-") ? "all" : devices) < 0 || table_add(t, keys) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        }
        table_print_counted(t, "profile", " in the configuration in force.");
        return EXIT_OK;
}

int verb_profiles(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL("profiles");
        _cleanup_(json_decrefp) json_t *reply = NULL;
        int r;

        r = ctl_call(&c, INTERFACE ".ListProfiles", NULL, &reply);
        if (r != EXIT_OK)
                return r;
        /* A list: its items, as devices prints DeviceSummary objects. */
        return ctl_render(json_object_get(reply, "profiles"), profiles_table, NULL);
}

static bool log_level_valid(const char *l) {
        static const char *const names[] = { "emerg", "alert", "crit",   "err",  "warning",
                                             "notice", "info", "debug", "error" };

        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (streq(l, names[i]))
                        return true;
        return l[0] >= '0' && l[0] <= '7' && l[1] == 0;
}

int verb_log_level(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL("log-level");
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s}", "level", argv[1]);

        /* The daemon checks too; this names the culprit. */
        if (!log_level_valid(argv[1]))
                return fail(EXIT_USAGE, "%s: invalid log level (emerg, alert, crit, err, warning, notice, info, debug)",
                            argv[1]);
        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        /* Nothing to say but under --json. */
        return ctl_query(&c, INTERFACE ".SetLogLevel", params, NULL, NULL);
}
