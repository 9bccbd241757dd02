/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* blkmqctl __complete WHAT: the names shell completion offers, asked from
 * the daemon, one a line (shell-completion/bash/blkmqctl calls it). Not in
 * --help: it is for the completion script, which cannot read JSON itself
 * (bash has no parser, and jq or python are not always there), and gets
 * here one name a line from the same calls the verbs make.
 *
 * It never says anything on standard error, and gives up after a short
 * wait: a completion must not hang or spill errors into the command line.
 * Without a daemon it prints nothing and exits 2. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "ctl.h"

#define COMPLETE_TIMEOUT_USEC (2ULL * 1000000ULL)

static void print_field(json_t *o, const char *key) {
        const char *s = jstr(o, key);

        if (s && *s && !strchr(s, '\n'))
                printf("%s\n", s);
}

static int zoned_devices(Ctl *c, json_t **ret) {
        return ctl_call(c, ZONES_INTERFACE ".ListDevices", NULL, ret);
}

static int complete_devices(Ctl *c) {
        _cleanup_(json_decrefp) json_t *list = json_array();
        json_t *d;
        size_t i;
        int r;

        if (!list)
                return EXIT_PROTOCOL;
        r = list_devices(c, list);
        json_array_foreach(list, i, d)
                print_field(d, "device");
        return r;
}

static int complete_profiles(Ctl *c) {
        _cleanup_(json_decrefp) json_t *reply = NULL;
        json_t *p;
        size_t i;
        int r;

        r = ctl_call(c, INTERFACE ".GetStatus", NULL, &reply);
        json_array_foreach(json_object_get(reply, "profiles"), i, p)
                if (json_is_string(p))
                        printf("%s\n", json_string_value(p));
        return r;
}

/* The allocator's devices by kernel name, or by ID where there is none
 * (an emulation file: emu:PATH). */
static int complete_zoned(Ctl *c) {
        _cleanup_(json_decrefp) json_t *reply = NULL;
        json_t *d;
        size_t i;
        int r;

        r = zoned_devices(c, &reply);
        json_array_foreach(json_object_get(reply, "devices"), i, d)
                print_field(d, jstr(d, "device") ? "device" : "deviceId");
        return r;
}

static int complete_leases(Ctl *c) {
        _cleanup_(json_decrefp) json_t *reply = NULL;
        json_t *d;
        size_t i;
        int r;

        r = zoned_devices(c, &reply);
        json_array_foreach(json_object_get(reply, "devices"), i, d) {
                _cleanup_(json_decrefp) json_t *params = json_pack("{s:s}", "device", dash(jstr(d, "deviceId"))),
                                               *zones = NULL;
                json_t *z;
                size_t k;

                if (!params || ctl_call(c, ZONES_INTERFACE ".ListZones", params, &zones) != EXIT_OK)
                        continue;
                json_array_foreach(json_object_get(zones, "zones"), k, z)
                        print_field(z, "lease");
        }
        return r;
}

static int complete_labels(Ctl *c) {
        _cleanup_(json_decrefp) json_t *reply = NULL, *params = json_object();
        json_t *o;
        size_t i;
        int r;

        if (!params)
                return EXIT_PROTOCOL;
        r = ctl_call(c, ZONES_INTERFACE ".ListObjects", params, &reply);
        json_array_foreach(json_object_get(reply, "objects"), i, o)
                print_field(o, "label");
        return r;
}

int verb_complete(int argc, char **argv) {
        static const struct {
                const char *what;
                int (*fn)(Ctl *c);
        } kinds[] = {
                { "devices", complete_devices }, { "profiles", complete_profiles }, { "zoned", complete_zoned },
                { "leases", complete_leases },   { "labels", complete_labels },
        };
        _cleanup_ctl_ Ctl c = CTL("__complete");

        /* Quiet, whatever goes wrong: the line being typed is on the terminal. */
        if (!freopen("/dev/null", "w", stderr))
                return EXIT_USAGE;
        arg_json = false;
        for (size_t i = 0; i < ELEMENTSOF(kinds); i++)
                if (streq(argv[1], kinds[i].what)) {
                        if (ctl_open(&c) < 0)
                                return EXIT_UNREACHABLE;
                        blkmq_varlink_set_timeout(c.link, COMPLETE_TIMEOUT_USEC);
                        return kinds[i].fn(&c);
                }
        return EXIT_USAGE;
}
