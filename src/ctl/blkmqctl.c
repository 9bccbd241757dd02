/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <langinfo.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

/* blkmqctl: the command-line client of io.blkmqd.Manager,
 * io.blkmqd.Metrics and io.blkmqd.Zones (see io.blkmqd.*.varlink, blkmqctl(8) and
 * blkmqd-varlink(7)). It links libblkmq only: everything it knows about
 * devices comes from the daemon.
 *
 * This file: main(), the options and the verb table. The verbs are in one
 * file per family (ctl-devices.c, ctl-profiles.c, ctl-latency.c,
 * ctl-zones.c, ctl-objects.c, ctl-stage.c), each of which owns the options
 * that go with it; they talk to blkmqd through ctl-call.c and print through
 * ctl-output.c and ctl-table.c (ctl.h declares them all). */

const char *arg_address = NULL;
bool arg_json = false;
bool arg_legend = true;

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
        { "export", 2, 2, verb_export },
        { "apply", 1, 2, verb_apply },
        { "restore", 1, 2, verb_apply },
        { "verify", 1, 2, verb_verify },
        { "reload", 1, 1, verb_reload },
        { "profiles", 1, 1, verb_profiles },
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
               "  explain DEVICE       which sections match and why; where each value comes from;\n"
               "                       a stack (VG/LV, dm-N, md0) drawn as a tree\n"
               "  trial DEVICE         compare the candidates of its Auto* keys on the live workload\n"
               "                       and keep the winner (blkmqd.conf(5), AutoTune=); with\n"
               "                       --emit-conf print the winner as a [Device] drop-in\n"
               "  export DEVICE        the static keys in force, as a [Device] drop-in matched by\n"
               "                       model and firmware (a loop device: its backing file's name)\n"
               "  apply [DEVICE]       apply the policy again (every device without DEVICE)\n"
               "  restore [DEVICE]     put back the values blkmqd replaced\n"
               "  verify [DEVICE]      read every setting blkmqd holds from sysfs now and name\n"
               "                       those that no longer read as blkmqd left them (exit 12)\n"
               "  reload               reload the configuration (a broken one is refused)\n"
               "  profiles             the [Profile] sections: active or not, the keys each sets\n"
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
               "  zones repair DEVICE [INDEX]\n"
               "                       failed zones without a lease: reset, flushed, free again\n"
               "  zones objects [DEVICE]\n"
               "                       sealed objects: label, size, SHA-256, device, zone,\n"
               "                       seal time, last check, lease\n"
               "  zones find LABEL     the one sealed object with that label\n"
               "  zones cat LABEL|LEASE [-o FILE]\n"
               "                       the object, read back and verified (nothing is\n"
               "                       written before its SHA-256 matched)\n"
               "  zones verify [DEVICE|LABEL|LEASE] [--io-class=CLASS]\n"
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
               "      --emit-conf      with trial: print the decision as configuration\n"
               "      --window=WINDOW  with latency: 1m, 10m (default) or total\n"
               "      --interval=SEC   with top: seconds between refreshes (default 1)\n"
               "      --count=N        with top: stop after N refreshes\n"
               "      --state=STATE    with zones DEVICE: free, allocated, writing, sealed,\n"
               "                       releasing, failed, or empty (the device's condition)\n"
               "      --size=N         with zones alloc: bytes (K, M, G suffixes: KiB, MiB, GiB)\n"
               "      --device=DEV     with zones alloc, stage: the zoned device (default: any)\n"
               "      --label=LABEL    with zones alloc, stage: a label kept with the lease\n"
               "      --inline         with zones append: send base64 data, not the fd\n"
               "      --io-class=CLASS with zones verify: idle (default: after the disk's other\n"
               "                       I/O) or best-effort (before it)\n"
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
               " 11 lease busy, or in the wrong state for the command\n"
               " 12 drift (verify): a setting no longer reads as blkmqd left it\n\n"
               "apply, restore, reload, profile and log-level need root or the AdminGroup=\n"
               "of blkmqd.conf. A lease is used by its owner or root only.\n"
               "See blkmqctl(8) and blkmqd-varlink(7).\n");
}

/* ---- options ---- */

static int opt_help(const char *arg) {
        help();
        return OPTION_DONE;
}

static int opt_version(const char *arg) {
        printf("blkmqctl %s\n", PACKAGE_VERSION);
        return OPTION_DONE;
}

static int opt_address(const char *arg) {
        if (!*arg)
                return fail(EXIT_USAGE, "--address: empty path");
        arg_address = arg;
        return EXIT_OK;
}

static int opt_json(const char *arg) {
        arg_json = true;
        return EXIT_OK;
}

static int opt_no_legend(const char *arg) {
        arg_legend = false;
        return EXIT_OK;
}

/* Every option: its setter is in the file of the verbs it goes with. */
static const struct {
        const char *name;
        int has_arg;
        char short_name; /* 0: long only */
        OptionFn set;
} options[] = {
        { "help", no_argument, 'h', opt_help },
        { "version", no_argument, 0, opt_version },
        { "address", required_argument, 0, opt_address },
        { "json", no_argument, 0, opt_json },
        { "no-legend", no_argument, 0, opt_no_legend },
        { "clear", no_argument, 0, profile_opt_clear },
        { "window", required_argument, 0, latency_opt_window },
        { "interval", required_argument, 0, latency_opt_interval },
        { "count", required_argument, 0, latency_opt_count },
        { "state", required_argument, 0, zones_opt_state },
        { "device", required_argument, 0, zones_opt_device },
        { "label", required_argument, 0, zones_opt_label },
        { "size", required_argument, 0, zones_opt_size },
        { "inline", no_argument, 0, zones_opt_inline },
        { "settle-timeout", required_argument, 0, stage_opt_settle_timeout },
        { "io-class", required_argument, 0, objects_opt_io_class },
        { "output", required_argument, 'o', zones_opt_output },
        { "emit-conf", no_argument, 0, export_opt_emit_conf },
};

/* getopt_long()'s value of options[i]: its letter, else 0x100 + i (so that
 * "takes no argument" can tell a long option from a letter). */
static int option_value(size_t i) {
        return options[i].short_name ? options[i].short_name : 0x100 + (int) i;
}

/* The usage error of getopt_long()'s ':' (missing argument) or '?'. */
static int option_error(int c, char **argv) {
        if (c == ':')
                return fail(EXIT_USAGE, "%s: missing argument (see blkmqctl --help)", argv[optind - 1]);
        if (optopt >= 0x100)
                return fail(EXIT_USAGE, "%s: takes no argument", argv[optind - 1]);
        if (optopt > 0)
                return fail(EXIT_USAGE, "-%c: unknown option (see blkmqctl --help)", optopt);
        return fail(EXIT_USAGE, "%s: unknown option (see blkmqctl --help)", argv[optind - 1]);
}

/* Returns < 0 on a usage error (minus its exit status), 0 to exit
 * successfully, > 0 to go on. */
static int parse_argv(int argc, char **argv) {
        struct option long_options[ELEMENTSOF(options) + 1] = {};
        int c;

        for (size_t i = 0; i < ELEMENTSOF(options); i++)
                long_options[i] = (struct option) { options[i].name, options[i].has_arg, NULL, option_value(i) };

        opterr = 0; /* reported by option_error(), as "blkmqctl: …" */
        while ((c = getopt_long(argc, argv, ":ho:", long_options, NULL)) >= 0) {
                OptionFn set = NULL;
                int r;

                if (c == ':' || c == '?')
                        return -option_error(c, argv);
                for (size_t i = 0; i < ELEMENTSOF(options); i++)
                        if (option_value(i) == c)
                                set = options[i].set;
                if (!set)
                        return -(fail(EXIT_USAGE, "unhandled option"));
                r = set(optarg);
                if (r == OPTION_DONE)
                        return 0;
                if (r != EXIT_OK)
                        return -r;
        }
        return 1;
}

/* The verb, its number of arguments, and options that go with another verb. */
static int dispatch_verb(int argc, char **argv) {
        static char *default_argv[] = { (char *) "status", NULL };
        const Verb *verb = NULL;
        unsigned n;
        int r;

        if (argc <= 0) {
                argc = 1;
                argv = default_argv;
        }
        /* Shell completion's helper (ctl-complete.c): not a command of
         * the table, nor of --help. */
        if (streq(argv[0], "__complete"))
                return argc == 2 ? verb_complete(argc, argv) : EXIT_USAGE;
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
        r = profiles_options_fit(verb->name);
        if (r == EXIT_OK)
                r = latency_options_fit(verb->name);
        if (r == EXIT_OK)
                r = zones_options_fit(verb->name);
        if (r == EXIT_OK)
                r = export_options_fit(verb->name);
        if (r != EXIT_OK)
                return r;
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
