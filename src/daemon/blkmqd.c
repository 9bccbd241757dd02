/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"
#include "manager.h"
#include "util.h"

/* Exit codes: 0 success; 1 bad usage or configuration, or a fatal error;
 * 2 --once finished but some setting failed. */

typedef struct Args {
        const char *config_path;
        const char *sysfs_root;
        const char *proc_root;
        const char *varlink_address;
        unsigned kernel_version;
        bool dry_run, once, json;
        int log_level;
} Args;

static void help(void) {
        printf("Usage: blkmqd [OPTIONS]\n\n"
               "Tunes the block layer of disks as they appear, by policy.\n\n"
               "  -c, --config=FILE        read FILE (and FILE.d/*.conf) instead of the default\n"
               "                           /etc/blkmqd/blkmqd.conf search\n"
               "  -n, --dry-run            write nothing: print per device the matched sections\n"
               "                           and the plan (current → wanted)\n"
               "  -1, --once               handle the devices present now, then exit\n"
               "      --json               with --dry-run or --once: print JSON\n"
               "  -l, --log-level=LEVEL    emerg … debug (debug shows every sysfs access)\n"
               "      --log-target=TARGET  auto, console or journal\n"
               "      --varlink-address=PATH  serve the varlink API at PATH instead of the\n"
               "                           socket systemd passes or " VARLINK_ADDRESS "\n"
               "      --sysfs-root=DIR     tune the tree below DIR instead of /sys (testing)\n"
               "      --kernel-version=X.Y behave as on kernel X.Y (testing the zoned guard)\n"
               "  -h, --help               show this help\n"
               "      --version            show the version\n\n"
               "See blkmqd(8) and blkmqd.conf(5).\n");
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
        };
        static const struct option options[] = {
                { "config", required_argument, NULL, 'c' },
                { "dry-run", no_argument, NULL, 'n' },
                { "once", no_argument, NULL, '1' },
                { "json", no_argument, NULL, ARG_JSON },
                { "log-level", required_argument, NULL, 'l' },
                { "log-target", required_argument, NULL, ARG_LOG_TARGET },
                { "varlink-address", required_argument, NULL, ARG_VARLINK_ADDRESS },
                { "sysfs-root", required_argument, NULL, ARG_SYSFS_ROOT },
                { "proc-root", required_argument, NULL, ARG_PROC_ROOT },
                { "kernel-version", required_argument, NULL, ARG_KERNEL_VERSION },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                {}
        };
        int c;

        while ((c = getopt_long(argc, argv, "c:n1l:h", options, NULL)) >= 0)
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
                        if (streq(optarg, "auto"))
                                log_set_target(LOG_TARGET_AUTO);
                        else if (streq(optarg, "console"))
                                log_set_target(LOG_TARGET_CONSOLE);
                        else if (streq(optarg, "journal"))
                                log_set_target(LOG_TARGET_JOURNAL);
                        else {
                                log_error("Invalid log target \"%s\".", optarg);
                                return -EINVAL;
                        }
                        break;
                case ARG_VARLINK_ADDRESS:
                        a->varlink_address = optarg;
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
        if (optind < argc) {
                log_error("Unexpected argument \"%s\".", argv[optind]);
                return -EINVAL;
        }
        if (a->json && !a->dry_run && !a->once) {
                log_error("--json goes with --dry-run or --once.");
                return -EINVAL;
        }
        return 1;
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

int main(int argc, char **argv) {
        _cleanup_(manager_freep) Manager *m = NULL;
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

        r = config_load(a.config_path, &config, &err);
        if (r < 0) {
                if (err.line)
                        log_error("%s:%u: %s", err.file, err.line, err.message);
                else
                        log_error("%s: %s", err.file, err.message);
                log_error("Refusing to start with a broken configuration.");
                return 1;
        }
        if (a.log_level >= 0)
                log_set_max_level(a.log_level);
        else if (config->daemon.log_level >= 0)
                log_set_max_level(config->daemon.log_level);

        ManagerOptions opts = {
                .config_path = a.config_path,
                .sysfs_root = a.sysfs_root,
                .proc_root = a.proc_root,
                .dry_run = a.dry_run,
                .once = a.once,
                .json = a.json,
                .kernel_version = a.kernel_version,
                .varlink_address = a.varlink_address,
        };
        r = manager_new(&m, &opts, config);
        if (r < 0) {
                config_free(config);
                return 1;
        }
        r = manager_start(m);
        if (r < 0)
                return 1;
        r = manager_run(m);
        return r < 0 ? 1 : r;
}
