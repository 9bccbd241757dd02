/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "sysfs.h"
#include "test-hooks.h"
#include "tune.h"
#include "util.h"

/* queue_gone(): 20 x 5 ms after a failed write (a worker thread; only then). */
#define QUEUE_GONE_POLLS 20U
#define QUEUE_GONE_POLL_USEC 5000U

static const char *const outcome_names[_TUNE_OUTCOME_MAX] = {
        [TUNE_PENDING] = "pending",   [TUNE_UNCHANGED] = "unchanged", [TUNE_CHANGED] = "changed",
        [TUNE_ADJUSTED] = "adjusted", [TUNE_SKIPPED] = "skipped",     [TUNE_FAILED] = "failed",
        [TUNE_PLANNED] = "planned",
};

const char *tune_outcome_to_string(TuneOutcome o) {
        return (unsigned) o < _TUNE_OUTCOME_MAX ? outcome_names[o] : NULL;
}

static void entry_done(TuneEntry *e) {
        free(e->attr);
        free(e->path);
        free(e->wanted);
        free(e->section);
        free(e->scheduler);
        free(e->before);
        free(e->before_scheduler);
        free(e->after);
        free(e->note);
}

TuneJob *tune_job_free(TuneJob *j) {
        if (!j)
                return NULL;
        for (size_t i = 0; i < j->n_entries; i++)
                entry_done(&j->entries[i]);
        free(j->entries);
        free(j->sysname);
        free(j->blockdir);
        free(j->cpu_affinity);
        free(j->hctx_map);
        free(j->affinity_note);
        free(j->planned_scheduler);
        free(j->nr_requests_before);
        free(j->async_depth_before);
        if (j->before_write_free)
                j->before_write_free(j->before_write_data);
        free(j);
        return NULL;
}

int tune_job_new(const char *sysname, const char *blockdir, TuneJob **ret) {
        TuneJob *j = calloc(1, sizeof *j);

        if (!j)
                return -ENOMEM;
        j->sysname = strdup(sysname);
        j->blockdir = strdup(blockdir);
        if (!j->sysname || !j->blockdir) {
                tune_job_free(j);
                return -ENOMEM;
        }
        *ret = j;
        return 0;
}

static int dup_opt(char **dst, const char *src) {
        if (!src)
                return 0;
        *dst = strdup(src);
        return *dst ? 0 : -ENOMEM;
}

int tune_job_add(TuneJob *j, Knob knob, const char *attr, const char *path, const char *wanted,
                 const char *section, const char *scheduler) {
        TuneEntry *t = realloc(j->entries, sizeof *t * (j->n_entries + 1));

        if (!t)
                return -ENOMEM;
        j->entries = t;
        t = &j->entries[j->n_entries];
        *t = (TuneEntry) { .knob = knob };
        j->n_entries++;
        if (dup_opt(&t->attr, attr) < 0 || dup_opt(&t->path, path) < 0 || dup_opt(&t->wanted, wanted) < 0 ||
            dup_opt(&t->section, section) < 0 || dup_opt(&t->scheduler, scheduler) < 0)
                return -ENOMEM;
        return 0;
}

static int entry_cmp(const void *a, const void *b) {
        const TuneEntry *x = a, *y = b;
        if (x->knob != y->knob)
                return x->knob < y->knob ? -1 : 1;
        return strcmp(x->attr, y->attr);
}

void tune_job_sort(TuneJob *j) {
        if (j->n_entries > 1) /* qsort(NULL, 0) is undefined */
                qsort(j->entries, j->n_entries, sizeof *j->entries, entry_cmp);
}

void tune_job_count(const TuneJob *j, unsigned counts[_TUNE_OUTCOME_MAX]) {
        memset(counts, 0, sizeof(unsigned) * _TUNE_OUTCOME_MAX);
        for (size_t i = 0; i < j->n_entries; i++)
                counts[j->entries[i].outcome]++;
}

static int entry_skip(TuneEntry *e, const char *fmt, ...) _printf_(2, 3);
static int entry_skip(TuneEntry *e, const char *fmt, ...) {
        va_list ap;
        int r;

        e->outcome = TUNE_SKIPPED;
        free(e->note);
        va_start(ap, fmt);
        r = vasprintf(&e->note, fmt, ap);
        va_end(ap);
        if (r < 0)
                e->note = NULL;
        return 0;
}

/* Device interrupts: the MSI vectors (or legacy line) of the nearest
 * parent that has them, e.g. the NVMe controller's PCI function. */
static int find_irqs(const char *blockdir, char ***ret) {
        _cleanup_free_ char *dev = path_join(blockdir, "device"), *real = NULL;
        _cleanup_strv_free_ char **irqs = NULL;

        if (!dev)
                return -ENOMEM;
        real = realpath(dev, NULL);
        if (!real) {
                *ret = NULL;
                return 0;
        }
        for (char *p = real; strlen(p) > strlen("/sys/devices");) {
                _cleanup_free_ char *msi = path_join(p, "msi_irqs"), *irq = path_join(p, "irq");
                _cleanup_(closedirp_helper) DIR *d = NULL;
                char *slash;

                if (!msi || !irq)
                        return -ENOMEM;
                d = opendir(msi);
                if (d) {
                        struct dirent *de;
                        while ((de = readdir(d)))
                                if (de->d_name[0] != '.' && strv_extend(&irqs, de->d_name) < 0)
                                        return -ENOMEM;
                        break;
                }
                _cleanup_free_ char *v = NULL;
                if (sysfs_read(irq, &v) >= 0 && !streq(v, "0")) {
                        if (strv_extend(&irqs, v) < 0)
                                return -ENOMEM;
                        break;
                }
                slash = strrchr(p, '/');
                if (!slash)
                        break;
                *slash = 0;
        }
        *ret = TAKE_PTR(irqs);
        return 0;
}

static bool is_iosched(Knob k) {
        return knob_info(k)->scheduler != NULL;
}

/* CPUAffinity=: one entry per interrupt of the device, or one skipped entry
 * that says it has none. */
static int plan_cpu_affinity(TuneJob *j, const TuneContext *ctx, const DeviceInfo *d, const Resolved *r) {
        _cleanup_strv_free_ char **irqs = NULL;
        int k = KNOB_CPU_AFFINITY, q;

        q = dup_opt(&j->cpu_affinity, r->value[k]);
        if (q < 0)
                return q;
        q = find_irqs(d->blockdir, &irqs);
        if (q < 0)
                return q;
        STRV_FOREACH(irq, irqs) {
                _cleanup_free_ char *a = NULL, *p = NULL;
                if (asprintf(&a, "irq/%s", *irq) < 0 ||
                    asprintf(&p, "%s/irq/%s/smp_affinity_list", ctx->proc_root, *irq) < 0)
                        return -ENOMEM;
                q = tune_job_add(j, k, a, p, r->value[k], r->section[k], NULL);
                if (q < 0)
                        return q;
        }
        if (!irqs) {
                q = tune_job_add(j, k, "irq", NULL, r->value[k], r->section[k], NULL);
                if (q < 0)
                        return q;
                entry_skip(&j->entries[j->n_entries - 1],
                           "the device has no interrupts of its own; the hctx map is reported");
        }
        return 0;
}

/* Scheduler= on a zoned device before 6.10 (no zone write plugging): only
 * mq-deadline keeps writes to a sequential zone in order. From a list, it
 * is chosen; without it in the list, the entry is refused. */
static int plan_zoned_scheduler(TuneJob *j, const DeviceInfo *d, const Resolved *r, const char *path) {
        _cleanup_strv_free_ char **l = NULL;
        int k = KNOB_SCHEDULER, q;
        bool has_dl;

        if (strv_split_ws(r->value[k], &l) < 0)
                return -ENOMEM;
        has_dl = strv_contains(l, "mq-deadline");
        q = tune_job_add(j, k, knob_info(k)->attribute, path, has_dl ? "mq-deadline" : r->value[k], r->section[k],
                         NULL);
        if (q < 0)
                return q;
        TuneEntry *e = &j->entries[j->n_entries - 1];
        if (!has_dl)
                entry_skip(e, "refusing Scheduler=%s on a %s device: kernels before 6.10 need mq-deadline "
                           "to keep zoned writes in order (SchedulerForce=yes overrides)",
                           r->value[k], d->zoned);
        else if (strv_length(l) > 1)
                (void) free_and_strdup(&e->note, "zoned device on a kernel before 6.10: mq-deadline chosen");
        return 0;
}

/* One knob's entry (not CPUAffinity=). */
static int plan_knob(TuneJob *j, const DeviceInfo *d, const Resolved *r, int k, bool zoned_guard) {
        const KnobInfo *ki = knob_info(k);
        _cleanup_free_ char *path = NULL;
        int q;

        path = path_join(d->blockdir, ki->attribute);
        if (!path)
                return -ENOMEM;

        if (d->bio_based && (k == KNOB_SCHEDULER || k == KNOB_NR_REQUESTS || k == KNOB_ASYNC_DEPTH || is_iosched(k))) {
                q = tune_job_add(j, k, ki->attribute, path, r->value[k], r->section[k], ki->scheduler);
                if (q < 0)
                        return q;
                entry_skip(&j->entries[j->n_entries - 1], "bio-based queue without a blk-mq scheduler%s",
                           streq_ptr(d->transport, "nvme") && !d->hidden
                                   ? " (an NVMe multipath head: its path devices carry the queue)"
                                   : "");
                return 0;
        }
        if (k == KNOB_SCHEDULER && zoned_guard)
                return plan_zoned_scheduler(j, d, r, path);
        return tune_job_add(j, k, ki->attribute, path, r->value[k], r->section[k], ki->scheduler);
}

int tune_plan(const TuneContext *ctx, const DeviceInfo *d, const Resolved *r, TuneJob **ret) {
        _cleanup_(tune_job_freep) TuneJob *j = NULL;
        bool zoned_guard;
        int q;

        q = tune_job_new(d->sysname, d->blockdir, &j);
        if (q < 0)
                return q;
        j->zoned = d->zoned && !streq(d->zoned, "none");

        zoned_guard = !streq_ptr(d->zoned, "none") && ctx->kernel_version < KERNEL_VERSION_CODE(6, 10) &&
                      !(r->value[KNOB_SCHEDULER_FORCE] && streq(r->value[KNOB_SCHEDULER_FORCE], "1"));

        for (int k = 0; k < _KNOB_MAX; k++) {
                /* Policy-only keys (SchedulerForce, probes, alerts) write nothing. */
                if (!r->value[k] || (!knob_info(k)->attribute && k != KNOB_CPU_AFFINITY))
                        continue;
                q = k == KNOB_CPU_AFFINITY ? plan_cpu_affinity(j, ctx, d, r) : plan_knob(j, d, r, k, zoned_guard);
                if (q < 0)
                        return q;
        }
        *ret = TAKE_PTR(j);
        return 0;
}

static char *active_scheduler(const char *blockdir) {
        _cleanup_free_ char *p = path_join(blockdir, "queue/scheduler"), *line = NULL;

        if (!p || sysfs_read(p, &line) < 0)
                return NULL;
        return scheduler_active(line);
}

const char *tune_check_to_string(TuneCheck c) {
        static const char *const names[_TUNE_CHECK_MAX] = {
                [TUNE_CHECK_OK] = "ok",         [TUNE_CHECK_DRIFTED] = "drifted", [TUNE_CHECK_INACTIVE] = "inactive",
                [TUNE_CHECK_GONE] = "gone",     [TUNE_CHECK_FAILED] = "failed",   [TUNE_CHECK_SKIPPED] = "skipped",
        };
        return (unsigned) c < _TUNE_CHECK_MAX ? names[c] : NULL;
}

int tune_entry_check(const TuneJob *j, const TuneEntry *e, char **active, char **ret_found) {
        _cleanup_free_ char *cur = NULL;
        TuneCheck c;

        if (e->outcome == TUNE_FAILED)
                return TUNE_CHECK_FAILED;
        if (j->dry_run || !e->after || !e->path ||
            (e->outcome != TUNE_UNCHANGED && e->outcome != TUNE_CHANGED && e->outcome != TUNE_ADJUSTED))
                return TUNE_CHECK_SKIPPED;
        if (e->knob == KNOB_SCHEDULER || e->scheduler) {
                if (!*active && !(*active = active_scheduler(j->blockdir)))
                        return TUNE_CHECK_GONE; /* gone, or bio-based now */
        }
        if (e->knob == KNOB_SCHEDULER) {
                if (ret_found && !(*ret_found = strdup(*active)))
                        return -ENOMEM;
                return streq(*active, e->after) ? TUNE_CHECK_OK : TUNE_CHECK_DRIFTED;
        }
        /* A tunable of another scheduler than the active one is not
         * there to compare (the scheduler's own entry counts). */
        if (e->scheduler && !streq(e->scheduler, *active))
                return TUNE_CHECK_INACTIVE;
        if (sysfs_read(e->path, &cur) < 0)
                return TUNE_CHECK_GONE;
        c = knob_value_equal(e->knob, cur, e->after) ? TUNE_CHECK_OK : TUNE_CHECK_DRIFTED;
        if (ret_found)
                *ret_found = TAKE_PTR(cur);
        return c;
}

unsigned tune_job_drifted(const TuneJob *j) {
        _cleanup_free_ char *active = NULL;
        unsigned n = 0;

        for (size_t i = 0; i < j->n_entries; i++)
                if (tune_entry_check(j, &j->entries[i], &active, NULL) == TUNE_CHECK_DRIFTED)
                        n++;
        return n;
}

static void entry_fail(TuneEntry *e, int error, const char *what) {
        e->outcome = TUNE_FAILED;
        e->error = error;
        free(e->note);
        if (asprintf(&e->note, "%s: %s", what, strerror(-error)) < 0)
                e->note = NULL;
}

/* Whether the running kernel could load scheduler name as a module: what a
 * dry run can know without writing. */
static bool scheduler_module_exists(const char *name) {
        _cleanup_free_ char *dep = NULL, *a = NULL, *b = NULL;
        _cleanup_fclose_ FILE *f = NULL;
        char line[512];
        struct utsname u;

        if (uname(&u) < 0 || asprintf(&dep, "/lib/modules/%s/modules.dep", u.release) < 0 ||
            asprintf(&a, "/%s.ko", name) < 0 || asprintf(&b, "/%s-iosched.ko", name) < 0)
                return false;
        f = fopen(dep, "re");
        if (!f)
                return false;
        while (fgets(line, sizeof line, f)) {
                char *colon = strchr(line, ':');
                if (colon)
                        *colon = 0;
                if (strstr(line, a) || strstr(line, b))
                        return true;
        }
        return false;
}

int scheduler_line_add_loadable(char **line) {
        static const char *const known[] = { "mq-deadline", "kyber", "bfq" };

        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
                char *n;
                if (scheduler_available(*line, known[i]) || !scheduler_module_exists(known[i]))
                        continue;
                if (asprintf(&n, "%s %s", *line, known[i]) < 0)
                        return -ENOMEM;
                free(*line);
                *line = n;
        }
        return 0;
}

static void execute_scheduler(TuneJob *j, TuneEntry *e) {
        _cleanup_strv_free_ char **l = NULL;
        _cleanup_free_ char *line = NULL, *active = NULL;
        int r;

        r = sysfs_read(e->path, &line);
        if (r < 0)
                return entry_fail(e, r, "reading the scheduler");
        active = scheduler_active(line);
        if (!active)
                return (void) entry_skip(e, "bio-based queue without a blk-mq scheduler");
        if (!e->before)
                e->before = strdup(active);
        if (strv_split_ws(e->wanted, &l) < 0)
                return entry_fail(e, -ENOMEM, "planning");

        /* The first candidate the kernel offers wins. One it does not list
         * may still be a module the kernel loads on demand when written. */
        r = -ENOENT;
        int last_error = 0;
        STRV_FOREACH(s, l) {
                if (streq(*s, active)) {
                        e->outcome = TUNE_UNCHANGED;
                        free(e->after);
                        e->after = strdup(active);
                        free(e->wanted);
                        e->wanted = strdup(*s);
                        return;
                }
                if (!scheduler_available(line, *s) && !streq(*s, "none")) {
                        if (j->dry_run) {
                                if (!scheduler_module_exists(*s))
                                        continue;
                                e->outcome = TUNE_PLANNED;
                                free(e->wanted);
                                e->wanted = strdup(*s);
                                (void) free_and_strdup(&e->note, "module not loaded yet: the kernel loads it on demand");
                                return;
                        }
                } else if (j->dry_run) {
                        e->outcome = TUNE_PLANNED;
                        free(e->wanted);
                        e->wanted = strdup(*s);
                        return;
                }
                r = test_fail_write(j->sysname, e->attr, *s) ? -EIO : sysfs_write(e->path, *s);
                if (r < 0) {
                        log_debug_errno(r, "%s: scheduler %s not accepted: %m", j->sysname, *s);
                        last_error = r;
                        continue;
                }
                free(e->wanted);
                e->wanted = strdup(*s);
                break;
        }
        if (r < 0) {
                if (j->dry_run)
                        return (void) entry_skip(e, "none of \"%s\" is offered by this kernel (%s)", e->wanted, line);
                entry_fail(e, r, "no scheduler of the list was accepted");
                free(e->note);
                if (asprintf(&e->note, "none of \"%s\" was accepted by the kernel (offers: %s; last error: %s)",
                             e->wanted, line, strerror(-(last_error ? last_error : r))) < 0)
                        e->note = NULL;
                return;
        }
        free(e->after);
        e->after = active_scheduler(j->blockdir);
        if (!e->after)
                return entry_fail(e, -ENODEV, "reading back");
        e->outcome = streq(e->after, e->wanted) ? TUNE_CHANGED : TUNE_ADJUSTED;
}

/* An attribute the device does not have: nothing is written or created.
 * The newest kernels' knobs say which kernels offer them. */
static int entry_skip_absent(const TuneJob *j, TuneEntry *e) {
        switch (e->knob) {
        case KNOB_ZONED_QD1_WRITES:
                if (!j->zoned)
                        return entry_skip(e, "%s is not offered by this kernel for a device that is not zoned", e->attr);
                return entry_skip(e, "%s is not offered by this kernel (zoned devices, Linux 7.1 and later)", e->attr);
        case KNOB_ASYNC_DEPTH:
                return entry_skip(e, "%s is not offered by this kernel (recent kernels; mq-deadline's own "
                                  "iosched/async_depth is DeadlineAsyncDepth=)", e->attr);
        default:
                return entry_skip(e, "%s does not exist on this kernel or device", e->attr);
        }
}

static void execute_attr(TuneJob *j, TuneEntry *e) {
        _cleanup_free_ char *cur = NULL;
        int r;

        if (e->scheduler) {
                _cleanup_free_ char *s = active_scheduler(j->blockdir);
                if (j->dry_run && !streq_ptr(s, e->scheduler) && streq_ptr(j->planned_scheduler, e->scheduler)) {
                        e->outcome = TUNE_PLANNED;
                        return (void) free_and_strdup(&e->note, "after the scheduler switch");
                }
                if (!streq_ptr(s, e->scheduler))
                        return (void) entry_skip(e, "%s applies to %s, the active scheduler is %s", knob_info(e->knob)->key,
                                                 e->scheduler, strna(s));
        }
        r = sysfs_read(e->path, &cur);
        if (r == -ENOENT || r == -ENODEV) {
                _cleanup_free_ char *q = path_join(j->blockdir, "queue");
                if (q && access(q, F_OK) < 0)
                        return entry_fail(e, -ENODEV, "device vanished");
                return (void) entry_skip_absent(j, e);
        }
        if (r < 0)
                return entry_fail(e, r, "reading");
        if (!e->before) {
                e->before = strdup(cur);
                if (e->scheduler)
                        e->before_scheduler = strdup(e->scheduler);
        }
        if (knob_value_equal(e->knob, cur, e->wanted) ||
            (e->knob == KNOB_WBT_LAT_USEC && streq(e->wanted, "-1") && j->restore)) {
                e->outcome = TUNE_UNCHANGED;
                e->after = TAKE_PTR(cur);
                return;
        }
        if (j->dry_run) {
                e->outcome = TUNE_PLANNED;
                return;
        }
        if (sysfs_writable(e->path) == 0)
                return (void) entry_skip(e, "%s is read-only on this kernel", e->attr);
        r = test_fail_write(j->sysname, e->attr, e->wanted) ? -EIO : sysfs_write(e->path, e->wanted);
        if (r < 0) {
                if (e->knob == KNOB_CPU_AFFINITY && r == -EIO)
                        return (void) entry_skip(e, "interrupt %s is managed by the kernel: its affinity cannot be set",
                                                 e->attr + 4);
                return entry_fail(e, r, "writing");
        }
        r = sysfs_read(e->path, &e->after);
        if (r < 0)
                return entry_fail(e, r, "reading back");
        if (knob_value_equal(e->knob, e->after, e->wanted) || (e->knob == KNOB_WBT_LAT_USEC && streq(e->wanted, "-1")))
                e->outcome = TUNE_CHANGED;
        else {
                e->outcome = TUNE_ADJUSTED;
                free(e->note);
                if (asprintf(&e->note, "the kernel kept %s instead of %s", e->after, e->wanted) < 0)
                        e->note = NULL;
        }
}

static bool safe_atou_dir(const char *s, unsigned *ret) {
        long long v;
        if (safe_atolli(s, &v) < 0 || v < 0 || v > 65535)
                return false;
        *ret = (unsigned) v;
        return true;
}

static int cmp_unsigned(const void *a, const void *b) {
        unsigned x = *(const unsigned *) a, y = *(const unsigned *) b;
        return x < y ? -1 : x > y;
}

/* Reports which CPUs each hardware queue serves (mq/N/cpu_list is
 * read-only: the kernel decides) and which hctx serve none of CPUAffinity=. */
static void report_hctx(TuneJob *j) {
        _cleanup_free_ char *mq = path_join(j->blockdir, "mq");
        _cleanup_(closedirp_helper) DIR *d = NULL;
        _cleanup_free_ char *map = NULL, *idle = NULL;
        size_t maplen = 0, idlelen = 0;
        FILE *m, *n;
        CpuSet want = {};
        struct dirent *de;
        unsigned ids[4096];
        size_t n_ids = 0;

        if (!mq || !(d = opendir(mq)))
                return;
        /* readdir() order is hash order: sort the hctx numerically. */
        while ((de = readdir(d)) && n_ids < ELEMENTSOF(ids)) {
                unsigned v;
                if (safe_atou_dir(de->d_name, &v))
                        ids[n_ids++] = v;
        }
        qsort(ids, n_ids, sizeof ids[0], cmp_unsigned);
        if (j->cpu_affinity)
                (void) cpuset_parse(j->cpu_affinity, &want);
        m = open_memstream(&map, &maplen);
        n = open_memstream(&idle, &idlelen);
        if (!m || !n) {
                if (m)
                        fclose(m);
                if (n)
                        fclose(n);
                return;
        }
        for (size_t i = 0; i < n_ids; i++) {
                _cleanup_free_ char *p = NULL, *v = NULL;
                char name[16];
                CpuSet c;

                snprintf(name, sizeof name, "%u", ids[i]);
                p = path_join(mq, name, "cpu_list");
                if (!p || sysfs_read(p, &v) < 0 || cpuset_parse(v, &c) < 0)
                        continue;
                _cleanup_free_ char *norm = cpuset_format(&c);
                fprintf(m, "%s%s:%s", ftell(m) ? " " : "", name, strempty(norm));
                if (j->cpu_affinity) {
                        bool any = false;
                        for (unsigned cpu = 0; cpu < CPU_MAX && !any; cpu++)
                                any = cpuset_isset(&c, cpu) && cpuset_isset(&want, cpu);
                        if (!any)
                                fprintf(n, "%s%s", ftell(n) ? "," : "", name);
                }
        }
        fclose(m);
        fclose(n);
        j->hctx_map = TAKE_PTR(map);
        if (idle && *idle && asprintf(&j->affinity_note,
                                      "hardware queues %s serve no CPU of CPUAffinity=%s (the kernel maps hctx to CPUs; "
                                      "submit from those CPUs to use them)", idle, j->cpu_affinity) < 0)
                j->affinity_note = NULL;
}

/* Whether the device's queue/ is gone. After a failed write, first give
 * a removal in progress a moment: del_gendisk() takes the attributes away
 * one by one (ENOENT, EBUSY) before queue/ itself, and a device that
 * vanishes should be said once, not once per attribute. */
static bool queue_gone(const TuneJob *j, const char *qdir) {
        bool failed = false;

        for (size_t i = 0; i < j->n_entries; i++)
                if (j->entries[i].outcome == TUNE_FAILED)
                        failed = true;
        for (unsigned t = 0;; t++) {
                if (access(qdir, F_OK) < 0)
                        return true;
                if (!failed || t >= QUEUE_GONE_POLLS)
                        return false;
                (void) usleep(QUEUE_GONE_POLL_USEC);
        }
}

void tune_execute(TuneJob *j) {
        uint64_t start = now_usec(CLOCK_MONOTONIC);
        _cleanup_free_ char *qdir = path_join(j->blockdir, "queue");
        _cleanup_free_ char *sched0 = NULL;

        if (qdir && access(qdir, F_OK) < 0) {
                j->device_error = -ENODEV;
                for (size_t i = 0; i < j->n_entries; i++)
                        if (j->entries[i].outcome == TUNE_PENDING)
                                entry_fail(&j->entries[i], -ENODEV, "device vanished");
                return;
        }

        /* Snapshot every value before the first write: a scheduler switch
         * resets nr_requests and swaps iosched/, and the originals must be
         * the values from before blkmqd touched anything. */
        sched0 = active_scheduler(j->blockdir);
        for (size_t i = 0; i < j->n_entries; i++) {
                TuneEntry *e = &j->entries[i];
                if (e->knob == KNOB_SCHEDULER && !j->nr_requests_before) {
                        _cleanup_free_ char *p = path_join(j->blockdir, "queue/nr_requests");
                        if (p)
                                (void) sysfs_read(p, &j->nr_requests_before);
                }
                if ((e->knob == KNOB_SCHEDULER || e->knob == KNOB_NR_REQUESTS) && !j->async_depth_before) {
                        _cleanup_free_ char *p = path_join(j->blockdir, "queue/async_depth");
                        if (p)
                                (void) sysfs_read(p, &j->async_depth_before);
                }
                /* The active scheduler is the scheduler entry's before (a
                 * bio-based queue has none: execute_scheduler() skips it). */
                if (e->knob == KNOB_SCHEDULER && e->outcome == TUNE_PENDING && !e->before && sched0)
                        e->before = strdup(sched0);
                if (e->outcome != TUNE_PENDING || !e->path || e->knob == KNOB_SCHEDULER)
                        continue;
                if (e->scheduler && !streq_ptr(sched0, e->scheduler))
                        continue;
                if (sysfs_read(e->path, &e->before) >= 0 && e->scheduler)
                        e->before_scheduler = strdup(e->scheduler);
        }
        if (j->before_write && !j->dry_run)
                j->before_write(j, j->before_write_data);

        for (size_t i = 0; i < j->n_entries; i++) {
                TuneEntry *e = &j->entries[i];

                if (e->outcome != TUNE_PENDING)
                        continue;
                if (e->knob == KNOB_SCHEDULER) {
                        execute_scheduler(j, e);
                        if (e->outcome == TUNE_PLANNED)
                                (void) free_and_strdup(&j->planned_scheduler, e->wanted);
                } else
                        execute_attr(j, e);
                /* Tests: killed with a value changed (its original must be on record). */
                if (e->outcome == TUNE_CHANGED)
                        test_kill_point("tune-changed");
                if (e->outcome == TUNE_FAILED && e->error == -ENODEV)
                        j->device_error = -ENODEV;
        }
        /* A device removed under our feet fails its writes with whatever
         * errno the kernel had at hand (EBUSY, ENOENT, EINVAL): say what
         * really happened, once. */
        if (qdir && queue_gone(j, qdir)) {
                j->device_error = -ENODEV;
                for (size_t i = 0; i < j->n_entries; i++)
                        if (j->entries[i].outcome == TUNE_FAILED || j->entries[i].outcome == TUNE_SKIPPED)
                                entry_fail(&j->entries[i], -ENODEV, "device vanished");
        }
        if (j->cpu_affinity || !j->restore)
                report_hctx(j);
        j->usec = now_usec(CLOCK_MONOTONIC) - start;
}
