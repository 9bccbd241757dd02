/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The daemon's configuration (io.blkmqd.Manager): reload, profile NAME,
 * profile --clear, log-level. */
#include "config.h"

#include <stdio.h>

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
