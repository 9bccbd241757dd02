/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <signal.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "api-manager.h"
#include "api-metrics.h"
#include "zones-varlink.h"
#include "autotune-runner.h"
#include "conf.h"
#include "log.h"
#include "manager.h"
#include "metrics.h"
#include "probe.h"
#include "sysfs.h"
#include "util.h"
#include "varlink.h"

/* The composition root. The manager owns the event loop, the config and
 * the devices, and tells its listeners what happens to them; it knows no
 * service and no adapter. Here each service (the prober, the zone service,
 * the metrics writer) and each varlink adapter is built and subscribed to
 * what it needs, and torn down in an order that lets the worker pools'
 * last callbacks land (daemon_free()). */

#define ORIGINALS_DIR_DEFAULT "/run/blkmqd/originals"

/* Exit codes: 0 success (--check-config: the configuration is valid); 1
 * bad usage or configuration (--check-config: every error said), an
 * unknown DEVICE, or a fatal error; 2 --once (and --check-config) finished
 * but some setting failed (in a dry run: could not be read). */

typedef struct Args {
        const char *config_path;
        const char *sysfs_root;
        const char *proc_root;
        const char *varlink_address;
        const char *originals_dir;
        const char *state_dir;
        const char *device; /* --dry-run DEVICE, --check-config DEVICE: as given */
        unsigned kernel_version;
        bool dry_run, once, json, check_config, no_record;
        int log_level;
} Args;

static void help(void) {
        printf("Usage: blkmqd [OPTIONS]\n"
               "       blkmqd --dry-run [--once] [DEVICE]\n"
               "       blkmqd --check-config [DEVICE]\n\n"
               "Tunes the block layer of disks as they appear, by policy.\n\n"
               "  -c, --config=FILE        read FILE (and FILE.d/*.conf) instead of the default\n"
               "                           /etc/blkmqd/blkmqd.conf search\n"
               "  -n, --dry-run            write nothing: print per device the matched sections\n"
               "                           and the plan (current → wanted); with DEVICE (nvme0n1,\n"
               "                           /dev/sda) that device's alone\n"
               "  -1, --once               handle the devices present now, then exit; the\n"
               "                           original values go on record first (see\n"
               "                           --originals-dir): the next start of blkmqd adopts\n"
               "                           them, its stop or restore puts them back; refuses\n"
               "                           when it cannot record them\n"
               "      --no-record          with --once: change the values with no record (none\n"
               "                           can be put back later)\n"
               "  -t, --check-config       check the configuration files as they are on disk: each\n"
               "                           error with its file:line (exit 1), else the plan of\n"
               "                           every disk (or DEVICE) as --dry-run --once prints it;\n"
               "                           writes nothing, needs no running blkmqd\n"
               "      --json               with --dry-run, --once or --check-config: print JSON\n"
               "  -l, --log-level=LEVEL    emerg … debug (debug shows every sysfs access)\n"
               "      --log-target=TARGET  auto, console or journal\n"
               "      --varlink-address=PATH  serve the varlink API at PATH instead of the\n"
               "                           socket systemd passes or " VARLINK_ADDRESS "\n"
               "      --originals-dir=DIR  keep the original values on record in DIR instead of\n"
               "                           OriginalsDirectory=, $RUNTIME_DIRECTORY or\n"
               "                           " ORIGINALS_DIR_DEFAULT "\n"
               "      --state-dir=DIR      keep the active profile (and what trials learned) in\n"
               "                           DIR instead of StateDirectory=, $STATE_DIRECTORY or\n"
               "                           " CONFIG_DEFAULT_STATE_DIRECTORY "\n"
               "      --sysfs-root=DIR     tune the tree below DIR instead of /sys (testing)\n"
               "      --kernel-version=X.Y behave as on kernel X.Y (testing the zoned guard)\n"
               "  -h, --help               show this help\n"
               "      --version            show the version\n\n"
               "See blkmqd(8) and blkmqd.conf(5).\n");
}

static int parse_log_target(const char *s) {
        if (streq(s, "auto"))
                log_set_target(LOG_TARGET_AUTO);
        else if (streq(s, "console"))
                log_set_target(LOG_TARGET_CONSOLE);
        else if (streq(s, "journal"))
                log_set_target(LOG_TARGET_JOURNAL);
        else {
                log_error("Invalid log target \"%s\".", s);
                return -EINVAL;
        }
        return 0;
}

/* Options that only go together: 1 if the combination is fine. */
static int check_args(const Args *a) {
        if (a->json && !a->dry_run && !a->once && !a->check_config) {
                log_error("--json goes with --dry-run, --once or --check-config.");
                return -EINVAL;
        }
        if (a->no_record && (!a->once || a->dry_run)) {
                log_error("--no-record goes with --once (and not --dry-run).");
                return -EINVAL;
        }
        if (a->device && !a->dry_run && !a->check_config) {
                log_error("A DEVICE (\"%s\") goes with --dry-run or --check-config.", a->device);
                return -EINVAL;
        }
        return 1;
}

static int parse_args(int argc, char **argv, Args *a) {
        enum {
                ARG_JSON = 0x100,
                ARG_VERSION,
                ARG_SYSFS_ROOT,
                ARG_PROC_ROOT,
                ARG_KERNEL_VERSION,
                ARG_LOG_TARGET,
                ARG_VARLINK_ADDRESS,
                ARG_ORIGINALS_DIR,
                ARG_STATE_DIR,
                ARG_NO_RECORD,
        };
        static const struct option options[] = {
                { "config", required_argument, NULL, 'c' },
                { "dry-run", no_argument, NULL, 'n' },
                { "once", no_argument, NULL, '1' },
                { "check-config", no_argument, NULL, 't' },
                { "json", no_argument, NULL, ARG_JSON },
                { "log-level", required_argument, NULL, 'l' },
                { "log-target", required_argument, NULL, ARG_LOG_TARGET },
                { "varlink-address", required_argument, NULL, ARG_VARLINK_ADDRESS },
                { "originals-dir", required_argument, NULL, ARG_ORIGINALS_DIR },
                { "state-dir", required_argument, NULL, ARG_STATE_DIR },
                { "no-record", no_argument, NULL, ARG_NO_RECORD },
                { "sysfs-root", required_argument, NULL, ARG_SYSFS_ROOT },
                { "proc-root", required_argument, NULL, ARG_PROC_ROOT },
                { "kernel-version", required_argument, NULL, ARG_KERNEL_VERSION },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                {}
        };
        int c, r;

        while ((c = getopt_long(argc, argv, "c:n1tl:h", options, NULL)) >= 0)
                switch (c) {
                case 'c':
                        a->config_path = optarg;
                        break;
                case 'n':
                        a->dry_run = true;
                        break;
                case '1':
                        a->once = true;
                        break;
                case 't':
                        a->check_config = true;
                        break;
                case ARG_JSON:
                        a->json = true;
                        break;
                case 'l':
                        a->log_level = log_level_from_string(optarg);
                        if (a->log_level < 0) {
                                log_error("Invalid log level \"%s\".", optarg);
                                return -EINVAL;
                        }
                        break;
                case ARG_LOG_TARGET:
                        r = parse_log_target(optarg);
                        if (r < 0)
                                return r;
                        break;
                case ARG_VARLINK_ADDRESS:
                        a->varlink_address = optarg;
                        break;
                case ARG_ORIGINALS_DIR:
                        if (optarg[0] != '/') {
                                log_error("--originals-dir= needs an absolute path, got \"%s\".", optarg);
                                return -EINVAL;
                        }
                        a->originals_dir = optarg;
                        break;
                case ARG_STATE_DIR:
                        if (optarg[0] != '/') {
                                log_error("--state-dir= needs an absolute path, got \"%s\".", optarg);
                                return -EINVAL;
                        }
                        a->state_dir = optarg;
                        break;
                case ARG_NO_RECORD:
                        a->no_record = true;
                        break;
                case ARG_SYSFS_ROOT:
                        a->sysfs_root = optarg;
                        break;
                case ARG_PROC_ROOT:
                        a->proc_root = optarg;
                        break;
                case ARG_KERNEL_VERSION:
                        if (kernel_version_parse(optarg, &a->kernel_version) < 0) {
                                log_error("Invalid kernel version \"%s\" (expected X.Y).", optarg);
                                return -EINVAL;
                        }
                        break;
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("blkmqd %s\n", PACKAGE_VERSION);
                        return 0;
                default:
                        return -EINVAL;
                }
        if (optind < argc)
                a->device = argv[optind++];
        if (optind < argc) {
                log_error("Unexpected argument \"%s\".", argv[optind]);
                return -EINVAL;
        }
        return check_args(a);
}

/* The varlink server allows 4096 connections; the soft fd limit systemd
 * and shells hand out is 1024. Raise it to the hard limit (epoll has no
 * FD_SETSIZE problem), as systemd's own daemons do. */
static void bump_nofile(void) {
        struct rlimit rl;

        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
                return;
        rl.rlim_cur = rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
                log_debug_errno(errno, "Failed to raise RLIMIT_NOFILE, ignoring: %m");
}

/* The descriptor table sized for every connection at once, while blkmqd
 * has one thread: growing it later, in a process with threads, waits for an
 * RCU grace period (expand_fdtable()), 10-30 ms on the event loop inside an
 * accept() or an open() when 1,000 clients connect during a hotplug storm.
 * 8192 slots: 4096 connections, the refused ones waiting for their first
 * call, a stat file per probed device, and what the pools hold. 64 KiB. */
#define FDTABLE_PRESIZE 8192

static void presize_fdtable(void) {
        struct rlimit rl;
        int fd, top = FDTABLE_PRESIZE - 1;

        if (getrlimit(RLIMIT_NOFILE, &rl) >= 0 && rl.rlim_cur != RLIM_INFINITY && (rlim_t) top >= rl.rlim_cur)
                top = (int) rl.rlim_cur - 1;
        fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, top);
        if (fd < 0)
                fd = open("/dev/null", O_RDONLY | O_CLOEXEC); /* stderr closed: any fd will do */
        if (fd >= 0 && fd < top) {
                int high = fcntl(fd, F_DUPFD_CLOEXEC, top);
                close(fd);
                fd = high;
        }
        if (fd >= 0)
                close(fd);
}

typedef struct Daemon {
        Manager *manager;
        AutotuneRunner *autotuner;    /* closed-loop tuning trials */
        VarlinkServer *varlink;
        ApiManager *api;
        Prober *prober;          /* NULL when probes are off (ProbeIntervalSec=0, no io_uring) */
        ApiMetrics *api_metrics;
        ZoneService *zones;      /* NULL without [Zones] Emulate= or ZoneAllocator=yes */
        MetricsWriter *metrics;
} Daemon;

static uint64_t resolved_u64(const Resolved *r, Knob k, uint64_t def) {
        long long v;
        if (!r->value[k] || safe_atolli(r->value[k], &v) < 0 || v < 0)
                return def;
        return (uint64_t) v;
}

/* The prober follows each device's resolved probe settings. */
static void prober_on_manager_event(Manager *m, ManagerEventType type, Device *d, void *userdata) {
        Prober *p = userdata;
        const Resolved *r = &d->resolved;
        ProbeConfig c = {};

        if (type == MANAGER_EVENT_DEVICE_REMOVED) {
                prober_remove(p, d->sysname);
                return;
        }
        c.enabled = resolved_managed(r) && resolved_u64(r, KNOB_PROBE, 1) && d->info->devnode;
        c.interval_usec = resolved_u64(r, KNOB_PROBE_INTERVAL, m->config->daemon.probe_interval_usec);
        c.enabled = c.enabled && c.interval_usec > 0;
        c.jitter_usec = resolved_u64(r, KNOB_PROBE_JITTER, c.interval_usec / 10);
        c.size = (uint32_t) resolved_u64(r, KNOB_PROBE_SIZE, 4) * 1024;
        c.polled = resolved_u64(r, KNOB_PROBE_POLLED, 0);
        c.alert_read_usec = resolved_u64(r, KNOB_ALERT_READ_LAT, 0);
        c.alert_write_usec = resolved_u64(r, KNOB_ALERT_WRITE_LAT, 0);
        ProbeDevice pd = {
                .sysname = d->sysname,
                .devnode = d->info->devnode,
                .blockdir = d->info->blockdir,
                .zoned = !streq_ptr(d->info->zoned, "none"),
                .size_bytes = d->info->size,
                .logical_block_size = d->info->logical_block_size,
                .diskseq = d->info->diskseq,
                .stat_fd = TAKE_FD(d->info->stat_fd),
        };
        if (prober_update(p, &pd, &c) < 0)
                log_oom();
}

/* The zone service takes the zoned devices offered to it (ZoneAllocator=yes)
 * and the [Zones] keys of a reloaded config. */
static void zones_on_manager_event(Manager *m, ManagerEventType type, Device *d, void *userdata) {
        ZoneService *z = userdata;

        switch (type) {
        case MANAGER_EVENT_DEVICE_RESOLVED:
                if (streq_ptr(d->resolved.value[KNOB_ZONE_ALLOCATOR], "1") && resolved_managed(&d->resolved) &&
                    !streq_ptr(d->info->zoned, "none") && d->info->devnode)
                        (void) zone_service_add_kernel(z, d->info->id, d->sysname, d->info->devnode,
                                                       d->info->blockdir);
                break;
        case MANAGER_EVENT_DEVICE_REMOVED:
                zone_service_device_gone(z, d->sysname);
                break;
        case MANAGER_EVENT_RELOADED:
                zone_service_reload(z, &m->config->zones);
                break;
        default:
                break;
        }
}

/* The trial runner: overlays a trial's candidate on a resolved policy (it
 * subscribes first, so the others see the result), forgets its trials on a
 * restore, and follows the rest. */
static void autotune_runner_on_manager_event(Manager *m, ManagerEventType type, Device *d, void *userdata) {
        AutotuneRunner *t = userdata;

        switch (type) {
        case MANAGER_EVENT_DEVICE_RESOLVED:
                autotune_runner_overlay(t, d, &d->resolved);
                break;
        case MANAGER_EVENT_RESTORING:
                autotune_runner_forget(t, d);
                break;
        default:
                autotune_runner_event(t, type, d);
                break;
        }
}

static void daemon_on_probe_event(Prober *p, ProbeEventType type, ProbeTarget *t, const char *detail, void *userdata) {
        Daemon *d = userdata;

        if (d->api_metrics)
                api_metrics_probe_event(p, type, t, detail, d->api_metrics);
        if (d->metrics)
                metrics_writer_schedule(d->metrics);
}

static Daemon *daemon_free(Daemon *d) {
        if (!d)
                return NULL;
        if (d->autotuner) {
                manager_unsubscribe(d->manager, autotune_runner_on_manager_event, d->autotuner);
                d->autotuner = autotune_runner_free(d->autotuner);
        }
        /* Probes go first (their cancelled reads find no target); then the
         * manager stops its pools, whose last callbacks land in the
         * services and adapters (manager_stop()); then those go. */
        if (d->prober) {
                prober_set_event_cb(d->prober, NULL, NULL);
                manager_unsubscribe(d->manager, prober_on_manager_event, d->prober);
        }
        if (d->zones) {
                zone_service_set_alert_cb(d->zones, NULL, NULL); /* its checks may still end below */
                zone_service_stop(d->zones); /* its reads go no further once the pools stop */
        }
        d->api_metrics = api_metrics_free(d->api_metrics);
        d->prober = prober_free(d->prober);
        if (d->manager)
                manager_stop(d->manager);
        if (d->zones)
                manager_unsubscribe(d->manager, zones_on_manager_event, d->zones);
        d->zones = zone_service_free(d->zones);
        d->metrics = metrics_writer_free(d->metrics);
        d->api = api_manager_free(d->api);
        d->varlink = varlink_server_free(d->varlink);
        d->manager = manager_free(d->manager);
        free(d);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(Daemon *, daemon_free)

/* The allocator runs when it has something to serve: emulated zones, or a
 * [Device] section offering devices (ZoneAllocator=yes). */
static bool config_wants_zones(const Config *c) {
        if (c->zones.emulate)
                return true;
        for (size_t i = 0; i < c->n_devices; i++)
                if (streq_ptr(c->devices[i].settings.value[KNOB_ZONE_ALLOCATOR], "1"))
                        return true;
        for (size_t i = 0; i < c->n_profiles; i++)
                if (streq_ptr(c->profiles[i].settings.value[KNOB_ZONE_ALLOCATOR], "1"))
                        return true;
        return false;
}

/* Socket activation first (blkmqd.socket, FileDescriptorName=varlink),
 * else the address given or the default. */
static int daemon_listen(Daemon *d) {
        _cleanup_strv_free_ char **names = NULL;
        const char *address = d->manager->opts.varlink_address;
        int n, r, fd = -EBADF;

        n = address ? 0 : sd_listen_fds_with_names(true, &names);
        for (int i = 0; i < n; i++) {
                if (fd < 0 && names && names[i] && (streq(names[i], "varlink") || streq(names[i], "unknown")))
                        fd = SD_LISTEN_FDS_START + i;
                else
                        close(SD_LISTEN_FDS_START + i);
        }
        if (fd >= 0) {
                r = varlink_server_listen_fd(d->varlink, fd);
                if (r < 0)
                        return log_error_errno(r, "Failed to listen on the passed varlink socket: %m");
                log_debug("Listening on the varlink socket systemd passed.");
                return 0;
        }
        if (!address)
                address = VARLINK_ADDRESS;
        r = varlink_server_listen_address(d->varlink, address, 0666);
        if (r < 0)
                return log_error_errno(r, "Failed to listen on %s: %m", address);
        log_debug("Listening on %s.", address);
        return 0;
}

/* The services and the varlink API of a running daemon (not --once, not
 * --dry-run). Listeners hear an event in the order they subscribe here:
 * the trial runner, the Manager adapter, the prober, the zone service, the
 * metrics writer. */
static int daemon_setup_services(Daemon *d) {
        Manager *m = d->manager;
        int r;

        r = varlink_server_new(&d->varlink, m->event, "blkmqd", "blkmqd", PACKAGE_VERSION,
                               "https://github.com/blkmqd/blkmqd");
        if (r < 0)
                return log_error_errno(r, "Failed to create varlink server: %m");
        if (m->config->daemon.admin_group) {
                struct group *g = getgrnam(m->config->daemon.admin_group);
                if (g)
                        varlink_server_set_admin_gid(d->varlink, g->gr_gid);
                else
                        log_warning("AdminGroup=%s: no such group, only root may change settings.",
                                    m->config->daemon.admin_group);
        }
        if (m->uring && m->config->daemon.probe_interval_usec > 0) {
                r = prober_new(&d->prober, m->event, m->uring);
                if (r < 0)
                        return log_error_errno(r, "Failed to set up latency probes: %m");
        }
        r = autotune_runner_new(&d->autotuner, m, d->prober);
        if (r < 0)
                return log_error_errno(r, "Failed to set up tuning trials: %m");
        r = manager_subscribe(m, ~0u, autotune_runner_on_manager_event, d->autotuner);
        if (r < 0)
                return log_oom();

        r = api_manager_new(&d->api, m, d->autotuner, d->varlink);
        if (r < 0)
                return log_error_errno(r, "Failed to set up io.blkmqd.Manager: %m");

        if (d->prober) {
                r = manager_subscribe(m, MANAGER_EVENT_MASK(MANAGER_EVENT_DEVICE_RESOLVED) |
                                         MANAGER_EVENT_MASK(MANAGER_EVENT_DEVICE_REMOVED),
                                      prober_on_manager_event, d->prober);
                if (r < 0)
                        return log_oom();
                r = api_metrics_new(&d->api_metrics, d->prober, d->varlink);
                if (r < 0)
                        return log_error_errno(r, "Failed to set up io.blkmqd.Metrics: %m");
                prober_set_event_cb(d->prober, daemon_on_probe_event, d);
        }
        if (m->uring && config_wants_zones(m->config)) {
                r = zone_service_new(&d->zones, m->event, &m->config->zones, m->uring, m->pool);
                if (r < 0)
                        return log_error_errno(r, "Failed to set up the zone allocator: %m");
                r = zones_varlink_add(d->varlink, d->zones);
                if (r < 0)
                        return log_error_errno(r, "Failed to set up io.blkmqd.Zones: %m");
                /* Damaged objects on the Metrics Monitor streams, beside the latency alerts. */
                if (d->api_metrics)
                        zone_service_set_alert_cb(d->zones, api_metrics_zone_alert, d->api_metrics);
                r = manager_subscribe(m, MANAGER_EVENT_MASK(MANAGER_EVENT_DEVICE_RESOLVED) |
                                         MANAGER_EVENT_MASK(MANAGER_EVENT_DEVICE_REMOVED) |
                                         MANAGER_EVENT_MASK(MANAGER_EVENT_RELOADED),
                                      zones_on_manager_event, d->zones);
                if (r < 0)
                        return log_oom();
        }
        r = metrics_writer_new(&d->metrics, m, d->prober, d->zones, d->autotuner);
        if (r < 0)
                return log_oom();
        return daemon_listen(d);
}

static void config_error_log(const ConfigError *e) {
        if (e->line)
                log_error("%s:%u: %s", e->file, e->line, e->message);
        else
                log_error("%s: %s", e->file, e->message);
}

/* --check-config: the configuration as it is on disk, every error with
 * its file:line (and under --json {"valid": false, "errors": [...]} on
 * stdout); valid, a line that says so (the plans follow). Returns 1 if
 * it is not, else 0 with *ret. */
static int check_config_load(const Args *a, Config **ret) {
        _cleanup_free_ ConfigError *errors = NULL;
        size_t n_errors = 0;
        int r;

        r = config_check(a->config_path, ret, &errors, &n_errors);
        if (r == -ENOMEM)
                return log_oom(), 1;
        if (r < 0) {
                for (size_t i = 0; i < n_errors; i++)
                        config_error_log(&errors[i]);
                log_error("The configuration has %zu error%s.", n_errors, n_errors == 1 ? "" : "s");
                if (a->json) {
                        json_t *l = json_array();
                        for (size_t i = 0; l && i < n_errors; i++)
                                json_array_append_new(l, json_pack("{s:s, s:i, s:s}", "file", errors[i].file,
                                                                   "line", (int) errors[i].line, "message",
                                                                   errors[i].message));
                        json_t *o = json_pack("{s:b, s:o, s:[]}", "valid", false, "errors", l, "devices");
                        if (o) {
                                json_dumpf(o, stdout, JSON_INDENT(2));
                                fputc('\n', stdout);
                        }
                        json_decref(o);
                }
                return 1;
        }
        if (!a->json) {
                _cleanup_free_ char *files = strv_join((*ret)->files, ", ");
                printf("The configuration is valid: %s (%zu [Device] section%s, %zu [Profile] section%s).\n\n",
                       files && *files ? files : "no file", (*ret)->n_devices, (*ret)->n_devices == 1 ? "" : "s",
                       (*ret)->n_profiles, (*ret)->n_profiles == 1 ? "" : "s");
                fflush(stdout);
        }
        return 0;
}

/* DEVICE as given (nvme0n1, /dev/nvme0n1, /dev/disk/by-id/…): the kernel
 * name of a whole disk below the sysfs root, or an error that names it. */
static int device_kernel_name(const char *given, const char *sysfs_root, char **ret) {
        _cleanup_free_ char *real = NULL, *dir = NULL, *part = NULL;
        const char *name = given;
        struct stat st;

        if (given[0] == '/') {
                real = realpath(given, NULL);
                if (!real || stat(real, &st) < 0)
                        return log_error_errno(errno, "%s: no such device: %m", given);
                if (!S_ISBLK(st.st_mode)) {
                        log_error("%s: not a block device.", given);
                        return -ENOTBLK;
                }
                name = strrchr(real, '/') + 1;
        } else if (!*given || strchr(given, '/') || streq(given, ".") || streq(given, "..")) {
                log_error("\"%s\": not a kernel name (nvme0n1, loop3) or a /dev path.", given);
                return -EINVAL;
        }
        dir = path_join(sysfs_root ? sysfs_root : "/sys", "block", name);
        part = path_join(sysfs_root ? sysfs_root : "/sys", "class/block", name, "partition");
        if (!dir || !part)
                return log_oom();
        if (access(dir, F_OK) < 0) {
                if (access(part, F_OK) >= 0) {
                        log_error("%s: a partition; blkmqd tunes whole disks.", given);
                        return -EINVAL;
                }
                log_error("%s: no such block device.", given);
                return -ENODEV;
        }
        *ret = strdup(name);
        return *ret ? 0 : log_oom();
}

int main(int argc, char **argv) {
        _cleanup_(daemon_freep) Daemon *d = NULL;
        _cleanup_free_ char *only_device = NULL;
        Config *config = NULL;
        ConfigError err;
        Args a = { .log_level = -1 };
        int r;

        r = parse_args(argc, argv, &a);
        if (r <= 0)
                return r < 0 ? 1 : 0;
        bump_nofile();
        presize_fdtable();
        /* A client's pipe closed under a Read is EPIPE for that call, not the
         * end of the daemon (systemd's IgnoreSIGPIPE= does this for services;
         * this covers runs outside it). */
        (void) signal(SIGPIPE, SIG_IGN);
        /* A fixed mmap threshold: buffers of 128 KiB and more (large
         * replies, zone append chunks) are mapped and unmapped. glibc would
         * otherwise raise the threshold each time one is freed, and later
         * ones would land in a heap that fragments and does not shrink. */
        (void) mallopt(M_MMAP_THRESHOLD, 128 * 1024);
        (void) mallopt(M_TRIM_THRESHOLD, 512 * 1024);
        /* An arena per thread (there are ApplyThreads + ProbeThreads + a
         * few): glibc's default of 8 per CPU is 16 on two CPUs, and the
         * threads past it share arenas round-robin, the event loop's
         * among them, so the loop waited for the arena lock of a worker
         * preempted inside malloc(). */
        (void) mallopt(M_ARENA_MAX, 8 + 256 + 64);

        if (a.check_config) {
                /* What a check says is on stdout; the log, warnings only. */
                log_set_max_level(a.log_level >= 0 ? a.log_level : LOG_WARNING);
                if (check_config_load(&a, &config) != 0)
                        return 1;
                a.dry_run = a.once = true;
        } else {
                r = config_load(a.config_path, &config, &err);
                if (r < 0) {
                        config_error_log(&err);
                        log_error("Refusing to start with a broken configuration.");
                        return 1;
                }
                if (a.log_level >= 0)
                        log_set_max_level(a.log_level);
                else if (config->daemon.log_level >= 0)
                        log_set_max_level(config->daemon.log_level);
        }
        if (a.device && device_kernel_name(a.device, a.sysfs_root, &only_device) < 0) {
                config_free(config);
                return 1;
        }

        /* Where the originals are kept on record: the option, the config,
         * the unit's RuntimeDirectory= (systemd sets $RUNTIME_DIRECTORY;
         * with several, the first), the default. */
        _cleanup_free_ char *runtime_dir = NULL;
        const char *originals_dir = a.originals_dir ? a.originals_dir : config->daemon.originals_directory;
        const char *rd = getenv("RUNTIME_DIRECTORY");
        if (!originals_dir && rd && rd[0] == '/') {
                runtime_dir = strndup(rd, strcspn(rd, ":"));
                if (!runtime_dir) {
                        config_free(config);
                        return log_oom(), 1;
                }
                originals_dir = runtime_dir;
        }
        if (!originals_dir)
                originals_dir = ORIGINALS_DIR_DEFAULT;

        ManagerOptions opts = {
                .originals_dir = originals_dir,
                .config_path = a.config_path,
                .sysfs_root = a.sysfs_root,
                .proc_root = a.proc_root,
                .dry_run = a.dry_run,
                .once = a.once,
                .once_record = a.once && !a.no_record,
                .state_dir = a.state_dir,
                .json = a.json,
                .kernel_version = a.kernel_version,
                .varlink_address = a.varlink_address,
                .only_device = only_device,
        };
        d = calloc(1, sizeof *d);
        if (!d) {
                config_free(config);
                return log_oom(), 1;
        }
        r = manager_new(&d->manager, &opts, config);
        if (r < 0) {
                config_free(config);
                return 1;
        }
        if (!a.dry_run && !a.once) {
                r = daemon_setup_services(d);
                if (r < 0)
                        return 1;
        }
        r = manager_start(d->manager);
        if (r < 0)
                return 1;
        r = manager_run(d->manager);
        if (r < 0)
                return 1;
        if (only_device && a.once && !manager_find_device(d->manager, only_device)) {
                log_error("%s: not a device blkmqd handles (no request queue).", a.device);
                return 1;
        }
        if (a.once && a.json) {
                json_t *o = manager_plans_json(d->manager);
                if (a.check_config) {
                        json_t *files = json_array();
                        STRV_FOREACH(f, d->manager->config->files)
                                json_array_append_new(files, json_string(*f));
                        json_object_set_new(o, "valid", json_true());
                        json_object_set_new(o, "errors", json_array());
                        json_object_set_new(o, "configFiles", files);
                }
                json_dumpf(o, stdout, JSON_INDENT(2));
                fputc('\n', stdout);
                json_decref(o);
        }
        return r;
}
