/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "test-hooks.h"
#include "uring-pool.h"
#include "log.h"
#include "manager.h"
#include "message-id.h"
#include "originals-record.h"
#include "plan-print.h"
#include "stack.h"
#include "sysfs.h"
#include "util.h"

/* A DeviceInfo is built on the udev thread, from its malloc arena. Freed
 * on the loop, it would take that arena's lock, and wait whenever the udev
 * thread (a normal thread, the loop runs realtime) was preempted holding
 * it: milliseconds in a hotplug storm. So it goes back to be freed there. */
typedef struct InfoFree {
        DeviceInfo *info;
} InfoFree;

static void info_free_run(void *data) {
        InfoFree *f = data;
        f->info = device_info_free(f->info);
}

static void info_free_done(void *data, void *userdata) {
        InfoFree *f = data;
        device_info_free(f->info); /* never run: the pool is stopping */
        free(f);
}

static void manager_free_info(Manager *m, DeviceInfo *info) {
        InfoFree *f;

        if (!info)
                return;
        if (m && m->udev_pool && (f = malloc(sizeof *f))) {
                f->info = info;
                if (work_pool_submit(m->udev_pool, info_free_run, info_free_done, f, NULL) >= 0)
                        return;
                free(f);
        }
        device_info_free(info);
}

static Device *device_free(Device *d) {
        if (!d)
                return NULL;
        free(d->sysname);
        manager_free_info(d->manager, d->info);
        resolved_done(&d->resolved);
        device_forget_originals(d);
        free(d->record_sig);
        strv_free(d->drift_logged);
        strv_free(d->kept);
        tune_job_free(d->last);
        free(d);
        return NULL;
}

static void manager_emit(Manager *m, ManagerEventType t, Device *d) {
        /* By index: a listener may unsubscribe (itself) while it is told. */
        for (size_t i = 0; i < m->n_listeners; i++) {
                ManagerListener *l = &m->listeners[i];
                if (l->mask & MANAGER_EVENT_MASK(t))
                        l->fn(m, t, d, l->userdata);
        }
}

int manager_subscribe(Manager *m, unsigned mask, ManagerListenerFn fn, void *userdata) {
        ManagerListener *l;

        l = reallocarray(m->listeners, m->n_listeners + 1, sizeof *l);
        if (!l)
                return -ENOMEM;
        m->listeners = l;
        m->listeners[m->n_listeners++] = (ManagerListener) { .mask = mask, .fn = fn, .userdata = userdata };
        return 0;
}

void manager_unsubscribe(Manager *m, ManagerListenerFn fn, void *userdata) {
        for (size_t i = 0; i < m->n_listeners; i++)
                if (m->listeners[i].fn == fn && m->listeners[i].userdata == userdata) {
                        memmove(&m->listeners[i], &m->listeners[i + 1],
                                sizeof(ManagerListener) * (m->n_listeners - i - 1));
                        m->n_listeners--;
                        return;
                }
}

Device *manager_find_device(Manager *m, const char *name) {
        _cleanup_free_ char *real = NULL;
        const char *base = name;

        if (strncmp(name, "/dev/", 5) == 0) {
                real = realpath(name, NULL);
                base = strrchr(real ? real : name, '/') + 1;
        } else if (strchr(name, '/')) {
                /* VG/LV, as an operator names an LVM volume: /dev/VG/LV
                 * (the link lvm makes) to its dm-N, where no udev database
                 * gave the device its volume name */
                _cleanup_free_ char *p = path_join("/dev", name);
                real = p ? realpath(p, NULL) : NULL;
                if (real)
                        base = strrchr(real, '/') + 1;
        }
        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                if (d->removed)
                        continue;
                if (streq(d->sysname, base) || streq(d->info->id, name) ||
                    (d->info->devnode && streq(d->info->devnode, name)) ||
                    (d->info->volume && streq(d->info->volume, name)))
                        return d;
        }
        return NULL;
}

void manager_notify(Manager *m, ManagerEventType t, Device *d) {
        manager_emit(m, t, d);
}

static void manager_update_status(Manager *m) {
        unsigned managed = 0, changed = 0, failed = 0;

        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                if (d->removed || !resolved_managed(&d->resolved))
                        continue;
                managed++;
                changed += d->n_originals;
                if (d->last) {
                        unsigned c[_TUNE_OUTCOME_MAX];
                        tune_job_count(d->last, c);
                        failed += c[TUNE_FAILED];
                }
        }
        m->n_failed = failed;
        if (m->opts.dry_run || m->opts.once)
                return;
        /* sd_notify() blocks when the manager's queue is full: send only
         * what changed, not one datagram per event. */
        char status[256];
        snprintf(status, sizeof status, "STATUS=Managing %u of %zu block devices, %u values changed, %u failed%s%s%s%s",
                 managed, m->n_devices, changed, failed, m->profile ? ", profile " : "", strempty(m->profile),
                 m->profile_missing ? ", no profile: the configuration has no [Profile] " : "",
                 strempty(m->profile_missing));
        if (streq(status, m->last_status))
                return;
        snprintf(m->last_status, sizeof m->last_status, "%s", status);
        sd_notify(false, status);
}

static void manager_check_progress(Manager *m) {
        if (m->n_tune_jobs > 0 || m->sync_generation == 0)
                return;
        manager_emit(m, MANAGER_EVENT_IDLE, NULL);
        switch (m->state) {
        case MANAGER_STARTING:
                manager_update_status(m);
                if (m->opts.once) {
                        (void) sd_event_exit(m->event, m->n_failed > 0 ? 2 : 0);
                        return;
                }
                if (!m->opts.dry_run)
                        log_info("Tuned %zu block devices in %.1f ms; ready.", m->n_devices,
                                 (now_usec(CLOCK_MONOTONIC) - m->start_usec) / 1000.0);
                sd_notify(false, "READY=1");
                m->state = MANAGER_RUNNING;
                break;
        case MANAGER_RELOADING:
                manager_update_status(m);
                sd_notify(false, "READY=1");
                m->state = MANAGER_RUNNING;
                log_info("Configuration reloaded and applied.");
                break;
        case MANAGER_STOPPING:
                (void) sd_event_exit(m->event, 0);
                break;
        case MANAGER_RUNNING:
                manager_update_status(m);
                break;
        }
}

static void manager_remove_device_slot(Manager *m, Device *d) {
        for (size_t i = 0; i < m->n_devices; i++)
                if (m->devices[i] == d) {
                        memmove(&m->devices[i], &m->devices[i + 1], sizeof(Device *) * (m->n_devices - i - 1));
                        m->n_devices--;
                        return;
                }
}

static int device_apply(Device *d);
static int device_restore(Device *d);

static void job_run(void *data) {
        TuneJob *j = data;
        unsigned delay = test_job_delay_msec(j->sysname);

        if (delay > 0)
                (void) usleep((useconds_t) delay * 1000);
        tune_execute(j);
}

static void job_done(void *data, void *userdata) {
        TuneJob *j = data;
        Device *d = userdata;
        Manager *m = d->manager;

        m->n_tune_jobs--;
        d->busy = false;
        if (d->removed) {
                log_debug("%s: job finished after removal, dropping its results.", j->sysname);
                /* Its record goes with it, unless another disk has the name by now. */
                if (m->originals_dir && !manager_find_device(m, d->sysname))
                        (void) originals_record_remove(m->originals_dir, d->sysname);
                tune_job_free(j);
                manager_remove_device_slot(m, d);
                device_free(d);
                manager_check_progress(m);
                return;
        }
        device_record_originals(d, j);
        /* A restore leaves the device at its originals: the iosched values
         * of a scheduler that is gone again no longer need putting back. */
        if (j->restore)
                device_prune_originals(d);
        if (m->originals_dir)
                device_record_sync(d, j, m->originals_dir);

        device_log_results(d, j);
        d->n_jobs++;
        {
                unsigned c[_TUNE_OUTCOME_MAX];
                tune_job_count(j, c);
                if (c[TUNE_FAILED])
                        d->n_failed_jobs++;
        }
        tune_job_free(d->last);
        d->last = j;
        d->last_usec = now_usec(CLOCK_REALTIME);
        manager_emit(m, MANAGER_EVENT_DEVICE_APPLIED, d);

        if (d->dirty) {
                d->dirty = false;
                /* While stopping, dirty means a restore was asked for while
                 * this job ran. */
                if (m->state == MANAGER_STOPPING)
                        (void) device_restore(d);
                else
                        (void) device_apply(d);
        }
        manager_check_progress(m);
}

static int device_submit(Device *d, TuneJob *j) {
        Manager *m = d->manager;
        int r;

        if (m->originals_dir && device_record_ahead(d, j, m->originals_dir, m->opts.once) < 0) {
                tune_job_free(j);
                return log_oom();
        }
        /* A job somebody waits for (a call about this one device) goes
         * ahead of a hotplug backlog; the others keep their order. */
        r = (d->urgent ? work_pool_submit_first : work_pool_submit)(m->pool, job_run, job_done, j, d);
        d->urgent = false;
        if (r < 0) {
                tune_job_free(j);
                return log_error_errno(r, "%s: failed to queue job: %m", d->sysname);
        }
        d->busy = true;
        m->n_tune_jobs++;
        return 0;
}

static Device *manager_find(Manager *m, const char *sysname) {
        for (size_t i = 0; i < m->n_devices; i++)
                if (!m->devices[i]->removed && streq(m->devices[i]->sysname, sysname))
                        return m->devices[i];
        return NULL;
}

int manager_resolve(Manager *m, Device *d, const char *profile, Resolved *ret) {
        _cleanup_strv_free_ char **above = NULL;
        _cleanup_free_ const DeviceInfo **infos = NULL;
        size_t n = 0;

        /* A request-based disk below stacked devices (LVs, md arrays,
         * dm-crypt mappings) takes their sections' request-queue keys. */
        if (!d->info->bio_based && stack_above(m->tune.sysfs_root, d->sysname, &above) >= 0 && above) {
                infos = calloc(strv_length(above), sizeof *infos);
                if (!infos)
                        return -ENOMEM;
                STRV_FOREACH(a, above) {
                        Device *t = manager_find(m, *a);
                        if (t && t->info)
                                infos[n++] = t->info;
                }
        }
        return policy_resolve_stacked(m->config, d->info, infos, n, profile, ret);
}

/* The disks whose policy depends on stacked device sysname: those below it
 * now, and those a section matching it was applied to before (it left, or
 * left their stack). Each is planned again. */
static void manager_apply_stack(Manager *m, const char *sysname) {
        _cleanup_(stack_freep) Stack *s = NULL;
        Device *top = manager_find(m, sysname);

        if (top && top->info->bio_based && stack_resolve(m->tune.sysfs_root, sysname, &s) >= 0)
                STRV_FOREACH(member, s->members) {
                        Device *d = manager_find(m, *member);
                        if (d && d != top)
                                (void) device_apply(d);
                }
        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                if (!d->removed && !streq(d->sysname, sysname) && strv_contains(d->resolved.stacks, sysname) &&
                    !(s && strv_contains(s->members, d->sysname)))
                        (void) device_apply(d);
        }
}

/* Resolves the policy, plans, and runs the plan (dry run: inline, reads only). */
static int device_apply(Device *d) {
        Manager *m = d->manager;
        _cleanup_(tune_job_freep) TuneJob *j = NULL;
        int r;

        if (d->busy) {
                d->dirty = true;
                return 0;
        }
        resolved_done(&d->resolved);
        r = manager_resolve(m, d, m->profile, &d->resolved);
        if (r < 0)
                return log_oom();
        /* The listeners: the trial runner (first) overlays a trial's
         * candidate, or what a trial chose; the prober and the zone service
         * follow the result. */
        manager_emit(m, MANAGER_EVENT_DEVICE_RESOLVED, d);

        r = tune_plan(&m->tune, d->info, &d->resolved, &j);
        if (r < 0)
                return log_error_errno(r, "%s: failed to plan: %m", d->sysname);

        /* Values blkmqd changed that the policy no longer asks for go back
         * to what they were: removing a key and reloading undoes it. */
        for (size_t i = 0; i < d->n_originals; i++) {
                Original *o = &d->originals[i];
                bool planned = false;
                /* nr_requests changed only by the scheduler switch (and
                 * async_depth, by the switch or by nr_requests) stays as the
                 * kernel set it while what moved it is still wanted. */
                for (size_t k = 0; k < j->n_entries && !planned; k++)
                        planned = streq(j->entries[k].attr, o->attr) ||
                                  (o->implied && !streq_ptr(j->entries[k].section, "original") &&
                                   (j->entries[k].knob == KNOB_SCHEDULER ||
                                    (o->knob == KNOB_ASYNC_DEPTH && j->entries[k].knob == KNOB_NR_REQUESTS)));
                if (planned || !o->path || strv_contains(d->kept, o->attr))
                        continue;
                r = tune_job_add(j, o->knob, o->attr, o->path, o->value, "original", o->scheduler);
                if (r < 0)
                        return log_oom();
        }
        tune_job_sort(j);
        /* DriftPolicy=keep: what something else wrote stays until an apply
         * is asked for. */
        for (size_t i = 0; i < j->n_entries; i++) {
                TuneEntry *e = &j->entries[i];
                if (!strv_contains(d->kept, e->attr))
                        continue;
                e->outcome = TUNE_SKIPPED;
                free(e->note);
                e->note = strdup("kept as something else wrote it (DriftPolicy=keep): blkmqctl apply or a reload "
                                 "manages it again");
        }

        if (m->opts.dry_run) {
                j->dry_run = true;
                tune_execute(j);
                if (m->opts.json) {
                        /* With --once the whole set is printed at exit. */
                        if (!m->opts.once) {
                                json_t *o = device_plan_to_json(d->info, &d->resolved, j);
                                json_dumpf(o, stdout, JSON_COMPACT);
                                fputc('\n', stdout);
                                json_decref(o);
                        }
                } else
                        device_plan_print(stdout, d->info, &d->resolved, j);
                fflush(stdout);
                tune_job_free(d->last);
                d->last = TAKE_PTR(j);
                return 0;
        }
        if (j->n_entries == 0) {
                log_debug("%s: not managed (no [Device] section matches).", d->sysname);
                tune_job_free(d->last);
                d->last = TAKE_PTR(j);
                return 0;
        }
        return device_submit(d, TAKE_PTR(j));
}

static int device_restore(Device *d) {
        _cleanup_(tune_job_freep) TuneJob *j = NULL;
        int r;

        if (d->busy) {
                /* The running job comes back first (and may record the
                 * first originals: checked after it); the STOPPING path (or
                 * the caller) will ask again. */
                d->dirty = true;
                return 0;
        }
        if (d->n_originals == 0)
                return 0;
        r = tune_job_new(d->sysname, d->info->blockdir, &j);
        if (r < 0)
                return log_oom();
        j->restore = true;
        for (size_t i = 0; i < d->n_originals; i++) {
                Original *o = &d->originals[i];
                /* Kept (DriftPolicy=keep): left to what wrote it. */
                if (!o->path || strv_contains(d->kept, o->attr))
                        continue;
                r = tune_job_add(j, o->knob, o->attr, o->path, o->value, "original", o->scheduler);
                if (r < 0)
                        return log_oom();
        }
        if (j->n_entries == 0)
                return 0;
        tune_job_sort(j);
        return device_submit(d, TAKE_PTR(j));
}

int manager_restore(Manager *m, Device *d) {
        int r = 0;

        if (m->opts.dry_run)
                return 0;
        manager_emit(m, MANAGER_EVENT_RESTORING, d);
        if (d) {
                d->urgent = true;
                return device_restore(d);
        }
        for (size_t i = 0; i < m->n_devices; i++)
                if (!m->devices[i]->removed) {
                        int q = device_restore(m->devices[i]);
                        if (q < 0 && r == 0)
                                r = q;
                }
        return r;
}

int manager_apply(Manager *m, Device *d) {
        int r = 0;

        if (d) {
                d->urgent = true; /* a caller waits for it alone */
                return device_apply(d);
        }
        for (size_t i = 0; i < m->n_devices; i++)
                if (!m->devices[i]->removed) {
                        int q = device_apply(m->devices[i]);
                        if (q < 0 && r == 0)
                                r = q;
                }
        return r;
}

/* Whether pid is another blkmqd that runs now (its comm, as the kernel
 * keeps it, is ours): then its records are its own, not left over. */
static bool record_writer_runs(int pid) {
        _cleanup_free_ char *p = NULL, *comm = NULL;
        char self[16];

        if (pid <= 0 || pid == (int) getpid() || asprintf(&p, "/proc/%d/comm", pid) < 0 || sysfs_read(p, &comm) < 0)
                return false;
        snprintf(self, sizeof self, "%s", program_invocation_short_name);
        return streq(strstrip(comm), self);
}

/* The record an earlier instance left of d's originals, found at start:
 * adopted if it is of the same disk, else discarded. */
static void manager_claim_record(Manager *m, Device *d) {
        _cleanup_(originals_identity_done) OriginalsIdentity now = {};
        OriginalsRecord *rec = NULL;
        char why[512];
        const char *mismatch;

        for (size_t i = 0; i < m->n_records; i++)
                if (streq(m->records[i]->identity.sysname, d->sysname)) {
                        rec = m->records[i];
                        memmove(&m->records[i], &m->records[i + 1], sizeof(rec) * (m->n_records - i - 1));
                        m->n_records--;
                        break;
                }
        if (!rec)
                return;
        if (record_writer_runs(rec->pid)) {
                log_warning("%s: its original values are on record by blkmqd[%d], which still runs (%s): "
                            "left alone; two instances should not manage one disk.", d->sysname, rec->pid, rec->path);
                originals_record_free(rec);
                return;
        }
        if (originals_identity_from_info(d->info, &now) < 0) {
                log_oom();
                originals_record_free(rec);
                return;
        }
        mismatch = originals_identity_mismatch(&rec->identity, &now, why, sizeof why);
        if (mismatch) {
                log_notice("%s: discarding the original values recorded by blkmqd[%d] (%s): not the same disk: %s.",
                           d->sysname, rec->pid, rec->path, mismatch);
                if (unlink(rec->path) < 0 && errno != ENOENT)
                        log_warning_errno(errno, "%s: cannot remove %s: %m", d->sysname, rec->path);
        } else {
                char pid[16];
                snprintf(pid, sizeof pid, "%d", rec->pid);
                log_struct(LOG_NOTICE, BLKMQD_MESSAGE_ORIGINALS_ADOPTED,
                           LOG_FIELDS({ "BLKMQD_DEVICE", d->sysname }, { "BLKMQD_PID", pid }, { "BLKMQD_RECORD", rec->path }),
                                 "%s: adopting %zu original value%s recorded by blkmqd[%d] (%s): a stop puts "
                                 "them back.", d->sysname, rec->n_originals, rec->n_originals == 1 ? "" : "s",
                                 rec->pid, rec->path);
                device_adopt_originals(d, TAKE_PTR(rec->originals), rec->n_originals);
                rec->n_originals = 0;
        }
        originals_record_free(rec);
}

/* The records whose device the first enumeration did not find. */
static void manager_drop_records(Manager *m) {
        for (size_t i = 0; i < m->n_records; i++) {
                OriginalsRecord *rec = m->records[i];
                if (record_writer_runs(rec->pid)) {
                        originals_record_free(rec);
                        continue;
                }
                log_info("%s: the disk whose original values blkmqd[%d] recorded is gone, dropping %s.",
                         rec->identity.sysname, rec->pid, rec->path);
                if (unlink(rec->path) < 0 && errno != ENOENT)
                        log_warning_errno(errno, "Cannot remove %s: %m", rec->path);
                originals_record_free(rec);
        }
        m->records = mfree(m->records);
        m->n_records = 0;
}

/* A device seen, with its identity read from sysfs (r, info: of
 * device_info_load(), which this takes). */
static void manager_device_loaded(Manager *m, const char *sysname, int r, DeviceInfo *info) {
        Device *d = NULL;

        if (m->opts.only_device && !streq(sysname, m->opts.only_device)) {
                manager_free_info(m, info);
                return;
        }

        for (size_t i = 0; i < m->n_devices; i++)
                if (!m->devices[i]->removed && streq(m->devices[i]->sysname, sysname)) {
                        d = m->devices[i];
                        break;
                }

        if (r < 0) {
                if (r != -ENOENT)
                        log_warning_errno(r, "%s: cannot read device, ignoring: %m", sysname);
                else
                        log_debug("%s: no request queue, ignoring.", sysname);
                manager_free_info(m, info);
                return;
        }

        if (!d) {
                Device **t;

                d = calloc(1, sizeof *d);
                if (!d || !(d->sysname = strdup(sysname))) {
                        free(d);
                        manager_free_info(m, info);
                        log_oom();
                        return;
                }
                t = realloc(m->devices, sizeof *t * (m->n_devices + 1));
                if (!t) {
                        device_free(d);
                        manager_free_info(m, info);
                        log_oom();
                        return;
                }
                m->devices = t;
                m->devices[m->n_devices++] = d;
                d->manager = m;
                d->info = TAKE_PTR(info);
                log_debug("%s: new device %s", sysname, d->info->id);
                manager_claim_record(m, d);
                manager_emit(m, MANAGER_EVENT_DEVICE_ADDED, d);
        } else {
                if (!streq(d->info->id, info->id)) {
                        log_info("%s: identity changed from %s to %s.", sysname, d->info->id, info->id);
                        d->generation++;
                }
                manager_free_info(m, d->info);
                d->info = TAKE_PTR(info);
        }
        (void) device_apply(d);
}

static void manager_device_update(Manager *m, const char *sysname, char *const *props) {
        _cleanup_free_ char *blockdir = path_join(m->tune.sysfs_root, "block", sysname);
        DeviceInfo *info = NULL;
        int r;

        if (!blockdir) {
                log_oom();
                return;
        }
        r = device_info_load(blockdir, props, &info);
        manager_device_loaded(m, sysname, r, info);
}

/* The per-path disks of an NVMe multipath head (nvmeXcYnZ under nvmeXnZ)
 * are hidden: the kernel sends no uevent for them, so they are found here,
 * whenever their head is seen. They carry the queue worth tuning. */
static void manager_for_each_path(Manager *m, const char *head, void (*fn)(Manager *m, const char *sysname)) {
        _cleanup_free_ char *dir = path_join(m->tune.sysfs_root, "block");
        _cleanup_(closedirp_helper) DIR *d = NULL;
        unsigned subsys, ns, a, b, c;
        struct dirent *de;
        int n = 0;

        if (sscanf(head, "nvme%un%u%n", &subsys, &ns, &n) != 2 || head[n] != 0 || !dir)
                return;
        d = opendir(dir);
        if (!d)
                return;
        while ((de = readdir(d))) {
                int k = 0;
                if (sscanf(de->d_name, "nvme%uc%un%u%n", &a, &b, &c, &k) == 3 && de->d_name[k] == 0 && a == subsys &&
                    c == ns)
                        fn(m, de->d_name);
        }
}

static void path_seen(Manager *m, const char *sysname) {
        manager_device_update(m, sysname, NULL);
}

/* ---- udev events, in order, their sysfs reads on m->udev_pool ---- */

typedef struct UdevJob {
        Manager *m;
        UdevAction action;
        char *sysname;     /* NULL for UDEV_ACTION_SYNCED */
        char **props;
        char *blockdir;
        DeviceInfo *info;  /* read on the worker */
        int r;
} UdevJob;

static void udev_job_free(UdevJob *j) {
        free(j->sysname);
        strv_free(j->props);
        free(j->blockdir);
        manager_free_info(j->m, j->info);
        free(j);
}

static void udev_job_run(void *data) {
        UdevJob *j = data;

        /* Only sysfs reads: nothing of the manager's state. */
        if (j->action == UDEV_ACTION_ADD || j->action == UDEV_ACTION_CHANGE)
                j->r = device_info_load(j->blockdir, j->props, &j->info);
}

static void manager_udev_event(Manager *m, UdevJob *j);

static void udev_job_done(void *data, void *userdata) {
        UdevJob *j = data;

        manager_udev_event(j->m, j);
        udev_job_free(j);
}

static void manager_device_seen(Manager *m, const char *sysname, int r, DeviceInfo *info) {
        manager_device_loaded(m, sysname, r, info);
        manager_for_each_path(m, sysname, path_seen);
        /* an LV activated or deactivated, an array assembled or stopped, a
         * member added: dm's change once its table is live, md's when the
         * array starts; at start, a top enumerated after its disks */
        manager_apply_stack(m, sysname);
}

static void manager_device_removed(Manager *m, const char *sysname) {
        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                if (d->removed || !streq(d->sysname, sysname))
                        continue;
                log_info("%s: removed%s.", sysname, d->n_originals ? ", forgetting its original values" : "");
                manager_emit(m, MANAGER_EVENT_DEVICE_REMOVED, d);
                if (m->originals_dir && !d->busy && d->record_sig)
                        (void) originals_record_remove(m->originals_dir, d->sysname);
                if (d->busy) {
                        d->removed = true; /* freed when its job is back */
                        return;
                }
                manager_remove_device_slot(m, d);
                device_free(d);
                return;
        }
}

/* Forgets the devices whose queue is gone from sysfs (only hidden NVMe
 * path disks with hidden_only), for which no remove event came. */
static void manager_drop_vanished(Manager *m, bool hidden_only) {
        for (size_t i = 0; i < m->n_devices;) {
                Device *d = m->devices[i];
                _cleanup_free_ char *q = NULL;
                if (!d->removed && (!hidden_only || d->info->hidden) &&
                    (q = path_join(d->info->blockdir, "queue")) && !sysfs_exists(q)) {
                        manager_device_removed(m, d->sysname); /* may take d out of the array */
                        continue;
                }
                i++;
        }
}

/* Runs on the loop, in event order, once the event's sysfs reads are done. */
static void manager_udev_event(Manager *m, UdevJob *j) {
        if (m->state == MANAGER_STOPPING)
                return;
        switch (j->action) {
        case UDEV_ACTION_ADD:
        case UDEV_ACTION_CHANGE:
                manager_device_seen(m, j->sysname, j->r, TAKE_PTR(j->info));
                break;
        case UDEV_ACTION_REMOVE:
                manager_device_removed(m, j->sysname);
                /* the disks below it: their originals back, unless
                 * another section still asks */
                manager_apply_stack(m, j->sysname);
                /* Its hidden paths went with the head; no event says so. */
                manager_drop_vanished(m, true);
                break;
        case UDEV_ACTION_SYNCED: {
                /* Devices that enumeration did not find again are gone. */
                manager_drop_vanished(m, false);
                manager_drop_records(m);
                m->sync_generation++;
                manager_check_progress(m);
                break;
        }
        }
}

static void on_udev(UdevAction action, struct udev_device *ud, void *userdata) {
        Manager *m = userdata;
        UdevJob *j;

        if (m->state == MANAGER_STOPPING)
                return;
        j = calloc(1, sizeof *j);
        if (!j) {
                log_oom();
                return;
        }
        *j = (UdevJob) { .m = m, .action = action };
        if (ud) {
                j->sysname = strdup(udev_device_get_sysname(ud));
                j->blockdir = path_join(m->tune.sysfs_root, "block", udev_device_get_sysname(ud));
                if (!j->sysname || !j->blockdir ||
                    ((action == UDEV_ACTION_ADD || action == UDEV_ACTION_CHANGE) &&
                     udev_device_properties(ud, &j->props) < 0)) {
                        udev_job_free(j);
                        log_oom();
                        return;
                }
        }
        /* Every event through the one thread, even those with nothing to
         * read (remove, synced): the order of events is kept. Except while
         * starting: the enumeration's devices are all known before the
         * first call is served (a stager settling a lease after a restart
         * must not be told LeaseNotFound because the zoned device it is on
         * has not been read yet). */
        if (m->state == MANAGER_STARTING || !m->udev_pool ||
            work_pool_submit(m->udev_pool, udev_job_run, udev_job_done, j, NULL) < 0) {
                udev_job_run(j);
                udev_job_done(j, NULL);
        }
}

static void manager_arm_drift(Manager *m);

int manager_reload(Manager *m, ConfigError *err) {
        Config *c = NULL;
        int r;

        r = config_load(m->config_path, &c, err);
        if (r < 0)
                return r;
        config_free(m->config);
        m->config = c;
        if (c->daemon.log_level >= 0)
                log_set_max_level(c->daemon.log_level);
        if (m->opts.state_dir && free_and_strdup(&c->daemon.state_directory, m->opts.state_dir) < 0)
                return log_oom();
        /* The profile stays on record in the state directory: it is active
         * again once the configuration has it again. */
        if (m->profile && !config_find_profile(c, m->profile)) {
                log_warning("Profile %s no longer exists in the configuration: running without a profile "
                            "(blkmqctl profile --clear forgets it).", m->profile);
                free(m->profile_missing);
                m->profile_missing = TAKE_PTR(m->profile);
        } else if (m->profile_missing && config_find_profile(c, m->profile_missing)) {
                log_info("Profile %s is in the configuration again: active.", m->profile_missing);
                free(m->profile);
                m->profile = TAKE_PTR(m->profile_missing);
        }
        manager_forget_drift(m, NULL);
        manager_arm_drift(m);
        manager_emit(m, MANAGER_EVENT_RELOADED, NULL);
        return manager_apply(m, NULL);
}

/* ---- the active profile, kept in the state directory ---- */

#define PROFILE_FILE "profile"

/* StateDirectory=/profile holds the name and a newline, or is absent (no
 * profile): written to a temporary file, synced, renamed over, and the
 * directory synced, so a crash or a power cut leaves the old or the new
 * one. */
static int profile_save(const char *dir, const char *profile) {
        _cleanup_free_ char *path = path_join(dir, PROFILE_FILE);
        int r;

        if (!path)
                return -ENOMEM;
        if (!profile) {
                if (unlink(path) < 0)
                        return errno == ENOENT ? 0 : -errno;
                return fsync_directory(dir);
        }
        r = mkdir_p(dir, 0755);
        if (r < 0)
                return r;
        return write_file_atomic(path, profile, 0644, WRITE_FILE_SYNC);
}

/* The profile on record (NULL in *ret: none). */
static int profile_load(const char *dir, char **ret) {
        _cleanup_free_ char *path = path_join(dir, PROFILE_FILE), *text = NULL;
        int r;

        if (!path)
                return -ENOMEM;
        r = sysfs_read(path, &text);
        if (r == -ENOENT) {
                *ret = NULL;
                return 0;
        }
        if (r < 0)
                return r;
        strstrip(text);
        *ret = *text ? TAKE_PTR(text) : NULL;
        return 0;
}

/* At start: the profile active before the restart, active again if the
 * configuration still has it. */
static void manager_load_profile(Manager *m) {
        _cleanup_free_ char *p = NULL, *file = NULL;
        int r;

        if (!m->state_dir)
                return;
        file = path_join(m->state_dir, PROFILE_FILE);
        r = profile_load(m->state_dir, &p);
        if (r < 0) {
                log_warning_errno(r, "Cannot read the active profile from %s, running without one: %m", strna(file));
                return;
        }
        if (!p)
                return;
        if (!config_find_profile(m->config, p)) {
                log_warning("Profile %s, on record in %s, is not in the configuration: running without a "
                            "profile (blkmqctl profile --clear forgets it).", p, strna(file));
                m->profile_missing = TAKE_PTR(p);
                return;
        }
        log_info("Profile %s, on record in %s: active.", p, strna(file));
        m->profile = TAKE_PTR(p);
}

int manager_set_profile(Manager *m, const char *profile) {
        int r;

        if (profile && !config_find_profile(m->config, profile))
                return -ENOENT;
        if (free_and_strdup(&m->profile, profile) < 0)
                return -ENOMEM;
        m->profile_missing = mfree(m->profile_missing);
        log_info("Profile %s.", profile ? profile : "cleared");
        if (m->state_dir && !m->opts.dry_run && !m->opts.once) {
                r = profile_save(m->state_dir, profile);
                if (r < 0)
                        log_warning_errno(r, "Cannot keep the active profile in %s: a restart will %s: %m",
                                          m->state_dir, profile ? "not activate it" : "activate the previous one");
        }
        manager_forget_drift(m, NULL);
        manager_emit(m, MANAGER_EVENT_PROFILE, NULL);
        return manager_apply(m, NULL);
}

/* ---- drift: a managed setting written by something else ---- */

void manager_forget_drift(Manager *m, Device *d) {
        for (size_t i = 0; i < m->n_devices; i++) {
                Device *x = m->devices[i];
                if (d && x != d)
                        continue;
                strv_free(x->drift_logged);
                strv_free(x->kept);
                x->drift_logged = x->kept = NULL;
        }
}

DriftPolicy manager_drift_policy(const Manager *m, const Device *d) {
        int p = -1;

        STRV_FOREACH(n, d->resolved.matched) {
                const DeviceSection *s = config_find_device(m->config, *n);
                if (s && s->drift_policy >= 0)
                        p = s->drift_policy;
        }
        return p >= 0 ? (DriftPolicy) p : m->config->daemon.drift_policy;
}

/* At most this many drifts remembered per device as logged: a writer that
 * cycles through values is logged again after that many. */
#define DRIFT_LOGGED_MAX 64

static bool drift_log_once(Device *d, const char *attr, const char *found) {
        _cleanup_free_ char *key = NULL;
        size_t n;

        if (asprintf(&key, "%s=%s", attr, found) < 0)
                return true;
        if (strv_contains(d->drift_logged, key))
                return false;
        n = strv_length(d->drift_logged);
        if (n >= DRIFT_LOGGED_MAX) {
                free(d->drift_logged[0]);
                memmove(d->drift_logged, d->drift_logged + 1, sizeof(char *) * n);
        }
        (void) strv_extend(&d->drift_logged, key);
        return true;
}

static void device_check_drift(Manager *m, Device *d) {
        _cleanup_free_ char *active = NULL;
        const TuneJob *j = d->last;
        DriftPolicy policy;
        bool reapply = false;

        /* Not while a job of d runs (its writes are no drift), nor after a
         * restore (nothing is managed then). */
        if (d->removed || d->busy || !j || j->dry_run || j->restore || !resolved_managed(&d->resolved))
                return;
        policy = manager_drift_policy(m, d);
        for (size_t i = 0; i < j->n_entries; i++) {
                const TuneEntry *e = &j->entries[i];
                _cleanup_free_ char *found = NULL;
                const char *what;
                int c;

                if (streq_ptr(e->section, "original") || strv_contains(d->kept, e->attr))
                        continue;
                c = tune_entry_check(j, e, &active, &found);
                if (c < 0) {
                        log_oom();
                        return;
                }
                if (c != TUNE_CHECK_DRIFTED)
                        continue;
                what = policy == DRIFT_REAPPLY ? "writing it again (DriftPolicy=reapply)"
                       : policy == DRIFT_KEEP  ? "left as it is and no longer managed until blkmqctl apply or a "
                                                 "reload (DriftPolicy=keep)"
                                               : "left as it is (DriftPolicy=report; blkmqctl apply puts it back)";
                if (drift_log_once(d, e->attr, found))
                        log_struct(LOG_WARNING, BLKMQD_MESSAGE_DRIFT,
                                   LOG_FIELDS({ "BLKMQD_DEVICE", d->sysname }, { "BLKMQD_KNOB", e->attr },
                                              { "BLKMQD_OLD", e->after }, { "BLKMQD_NEW", found },
                                              { "BLKMQD_POLICY", drift_policy_to_string(policy) }),
                                   "%s: %s reads %s, blkmqd left %s: something else wrote it; %s.", d->sysname,
                                   e->attr, found, e->after, what);
                if (policy == DRIFT_REAPPLY)
                        reapply = true;
                else if (policy == DRIFT_KEEP && strv_extend(&d->kept, e->attr) < 0)
                        log_oom();
        }
        if (reapply)
                (void) device_apply(d);
}

/* The stacks above each disk, as the policy sees them now: a member taken
 * out of an md array (mdadm --fail, --remove) sends no uevent, nor does
 * its array. A disk whose stacks changed is planned again. */
static void manager_check_stacks(Manager *m) {
        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                Resolved r = {};
                bool same;

                if (d->removed || d->busy || d->info->bio_based)
                        continue;
                if (manager_resolve(m, d, m->profile, &r) < 0) {
                        log_oom();
                        return;
                }
                same = strv_length(r.stacks) == strv_length(d->resolved.stacks);
                STRV_FOREACH(t, r.stacks)
                        same = same && strv_contains(d->resolved.stacks, *t);
                resolved_done(&r);
                if (!same) {
                        log_info("%s: the stacks above it changed, planning it again.", d->sysname);
                        (void) device_apply(d);
                }
        }
}

void manager_check_drift(Manager *m) {
        if (m->state != MANAGER_RUNNING || m->opts.dry_run || m->opts.once)
                return;
        manager_check_stacks(m);
        for (size_t i = 0; i < m->n_devices; i++)
                device_check_drift(m, m->devices[i]);
}

static int on_drift_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        manager_check_drift(m);
        manager_arm_drift(m);
        return 0;
}

/* (Re)arms the drift check DriftCheckSec= from now; 0 turns it off. */
static void manager_arm_drift(Manager *m) {
        uint64_t usec = m->config->daemon.drift_check_usec;
        int r;

        if (m->opts.dry_run || m->opts.once || !m->event)
                return;
        if (usec == 0) {
                if (m->drift_timer)
                        (void) sd_event_source_set_enabled(m->drift_timer, SD_EVENT_OFF);
                return;
        }
        if (!m->drift_timer)
                r = sd_event_add_time_relative(m->event, &m->drift_timer, CLOCK_MONOTONIC, usec, usec / 20,
                                               on_drift_timer, m);
        else {
                r = sd_event_source_set_time_relative(m->drift_timer, usec);
                if (r >= 0)
                        r = sd_event_source_set_time_accuracy(m->drift_timer, usec / 20);
                if (r >= 0)
                        r = sd_event_source_set_enabled(m->drift_timer, SD_EVENT_ONESHOT);
        }
        if (r < 0)
                log_warning_errno(r, "Cannot set up the drift check, settings written by others go unnoticed: %m");
}

int manager_reload_notify(Manager *m, const char *why, ConfigError *err) {
        int r;

        *err = (ConfigError) {};
        if (m->state == MANAGER_STOPPING)
                return -ESHUTDOWN;
        /* systemd 252 has no Type=notify-reload: ExecReload= (blkmqctl
         * reload) waits for this call, and RELOADING=1 ... READY=1 tell it
         * the same for a SIGHUP sent by hand. */
        sd_notifyf(false, "RELOADING=1\nSTATUS=Reloading configuration\nMONOTONIC_USEC=%llu",
                   (unsigned long long) now_usec(CLOCK_MONOTONIC));
        log_info("Reloading configuration (%s).", why);
        m->state = MANAGER_RELOADING;
        r = manager_reload(m, err);
        if (r < 0) {
                if (err->line)
                        log_error("%s:%u: %s", err->file, err->line, err->message);
                else if (err->file[0])
                        log_error("%s: %s", err->file, err->message);
                else
                        log_error_errno(r, "Failed to reload the configuration: %m");
                log_error("Configuration not reloaded, keeping the previous one.");
        }
        /* READY=1 once the re-apply is done (at once when it failed). */
        manager_check_progress(m);
        return r;
}

static int on_sighup(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        ConfigError err;

        (void) manager_reload_notify(userdata, "SIGHUP", &err);
        return 0;
}

static int on_sigterm(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Manager *m = userdata;

        if (m->state == MANAGER_STOPPING) {
                log_warning("Second termination signal, exiting without waiting.");
                return sd_event_exit(m->event, 1);
        }
        log_info("Stopping (%s).", si->ssi_signo == SIGINT ? "SIGINT" : "SIGTERM");
        sd_notify(false, "STOPPING=1\nSTATUS=Restoring original values");
        m->state = MANAGER_STOPPING;
        m->udev = udev_watch_free(m->udev);
        /* Devices busy right now get marked dirty and are restored when
         * their job is back (job_done). */
        for (size_t i = 0; i < m->n_devices; i++)
                m->devices[i]->dirty = false;
        if (m->config->daemon.restore_on_exit && !m->opts.once)
                (void) manager_restore(m, NULL);
        manager_check_progress(m);
        return 0;
}

void manager_stop(Manager *m) {
        m->udev = udev_watch_free(m->udev);
        /* Events still on their way are dropped (their callbacks see
         * STOPPING) before anything they would touch goes. */
        m->state = MANAGER_STOPPING;
        /* Taken first: what its last callbacks free is freed here. */
        work_pool_free(TAKE_PTR(m->udev_pool));
        /* Teardown order: whatever a pool's outstanding callbacks touch
         * must outlive that pool. The prober goes before this (its
         * cancelled reads find no target), then the io_uring pool (zone
         * appends finish into the zone service), then the work pool (tune
         * jobs into the devices and the listeners, seals and resets into
         * the zone service); the services after it. */
        m->uring = uring_pool_free(m->uring);
        m->pool = work_pool_free(m->pool);
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;
        manager_stop(m);
        free(m->listeners);
        for (size_t i = 0; i < m->n_records; i++)
                originals_record_free(m->records[i]);
        free(m->records);
        free(m->originals_dir);
        free(m->state_dir);
        free(m->profile_missing);
        sd_event_source_disable_unref(m->drift_timer);
        for (size_t i = 0; i < m->n_devices; i++)
                device_free(m->devices[i]);
        free(m->devices);
        sd_event_source_disable_unref(m->sig_term);
        sd_event_source_disable_unref(m->sig_int);
        sd_event_source_disable_unref(m->sig_hup);
        sd_event_unref(m->event);
        config_free(m->config);
        free(m->config_path);
        free(m->profile);
        free((char *) m->tune.sysfs_root);
        free((char *) m->tune.proc_root);
        free(m);
        return NULL;
}

int manager_new(Manager **ret, const ManagerOptions *opts, Config *config) {
        _cleanup_(manager_freep) Manager *m = NULL;
        sigset_t ss;
        int r;

        m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        m->opts = *opts;
        m->start_usec = now_usec(CLOCK_MONOTONIC);
        hist_init(&m->loop_hist);
        if (opts->config_path && !(m->config_path = strdup(opts->config_path)))
                return -ENOMEM;
        /* --once puts its originals on record too (unless --no-record): a
         * later start adopts them, and its stop or restore puts them back. */
        if (opts->originals_dir && !opts->dry_run && (!opts->once || opts->once_record) &&
            !(m->originals_dir = strdup(opts->originals_dir)))
                return -ENOMEM;
        if (opts->state_dir && free_and_strdup(&config->daemon.state_directory, opts->state_dir) < 0)
                return -ENOMEM;
        if (config->daemon.state_directory && !(m->state_dir = strdup(config->daemon.state_directory)))
                return -ENOMEM;
        m->tune.sysfs_root = strdup(opts->sysfs_root ? opts->sysfs_root : "/sys");
        m->tune.proc_root = strdup(opts->proc_root ? opts->proc_root : "/proc");
        if (!m->tune.sysfs_root || !m->tune.proc_root)
                return -ENOMEM;
        m->tune.kernel_version = opts->kernel_version;
        if (!m->tune.kernel_version) {
                struct utsname u;
                if (uname(&u) < 0 || kernel_version_parse(u.release, &m->tune.kernel_version) < 0)
                        return log_error_errno(EINVAL, "Cannot determine the kernel version.");
        }

        r = sd_event_default(&m->event);
        if (r < 0)
                return log_error_errno(r, "Failed to create event loop: %m");
        sigemptyset(&ss);
        sigaddset(&ss, SIGTERM);
        sigaddset(&ss, SIGINT);
        sigaddset(&ss, SIGHUP);
        if (sigprocmask(SIG_BLOCK, &ss, NULL) < 0)
                return -errno;
        r = sd_event_add_signal(m->event, &m->sig_term, SIGTERM, on_sigterm, m);
        if (r >= 0)
                r = sd_event_add_signal(m->event, &m->sig_int, SIGINT, on_sigterm, m);
        if (r >= 0)
                r = sd_event_add_signal(m->event, &m->sig_hup, SIGHUP, on_sighup, m);
        if (r < 0)
                return log_error_errno(r, "Failed to set up signal handling: %m");
        r = sd_event_set_watchdog(m->event, true);
        if (r < 0)
                log_warning_errno(r, "Failed to enable the watchdog, ignoring: %m");

        r = work_pool_new(&m->pool, m->event, config->daemon.apply_threads);
        if (r < 0)
                return log_error_errno(r, "Failed to start worker threads: %m");
        r = work_pool_new(&m->udev_pool, m->event, 1);
        if (r < 0)
                return log_error_errno(r, "Failed to start the udev event thread: %m");

        if (!opts->dry_run && !opts->once) {
                /* The io_uring pool serves probes and zone appends. */
                r = uring_pool_new(&m->uring, m->event, config->daemon.probe_threads, NULL, 1024 * 1024);
                if (r < 0)
                        log_warning_errno(r, "Failed to set up io_uring, latency probes and zone leases are off: %m");
        }

        m->config = config; /* owned from here on */
        *ret = TAKE_PTR(m);
        return 0;
}

int manager_start(Manager *m) {
        int r;

        /* In --once mode there is nothing to watch. */
        r = udev_watch_new(&m->udev, m->event, !m->opts.once, on_udev, m);
        if (r < 0)
                return log_error_errno(r, "Failed to set up udev: %m");
        log_info("blkmqd " PACKAGE_VERSION " starting%s%s, kernel %u.%u, %u apply threads.",
                 m->opts.dry_run ? " (dry run)" : "", m->opts.once ? " (once)" : "",
                 m->tune.kernel_version >> 16, (m->tune.kernel_version >> 8) & 0xff, m->config->daemon.apply_threads);
        STRV_FOREACH(f, m->config->files)
                log_debug("Configuration file: %s", *f);
        if (m->originals_dir) {
                r = originals_record_scan(m->originals_dir, &m->records, &m->n_records);
                if (r >= 0 && m->opts.once && access(m->originals_dir, W_OK) < 0)
                        r = -errno;
                if (r < 0 && m->opts.once)
                        /* Nothing written yet: what it cannot undo, it does not do. */
                        return log_error_errno(r, "Cannot put the original values on record in %s: %m. --once "
                                               "changes nothing it could not undo; --no-record changes them "
                                               "anyway, with no record (no restore, no start of blkmqd puts "
                                               "them back).", m->originals_dir);
                if (r < 0) {
                        log_warning("Original values are kept in memory only: a restart after a crash will not know them.");
                        m->originals_dir = mfree(m->originals_dir);
                } else
                        log_debug("Original values on record in %s (%zu records found).", m->originals_dir, m->n_records);
                /* --once beside a running blkmqd would fight it, and put the
                 * values that one set on record as the originals. */
                for (size_t i = 0; m->opts.once && i < m->n_records; i++)
                        if (record_writer_runs(m->records[i]->pid))
                                return log_error_errno(EBUSY, "blkmqd[%d] runs and manages %s (its record: %s): --once "
                                                       "changes nothing beside it; stop it first, or use blkmqctl "
                                                       "apply.", m->records[i]->pid,
                                                       m->records[i]->identity.sysname, m->records[i]->path);
        } else if (m->opts.once && !m->opts.dry_run)
                log_notice("--no-record: the values changed are on record nowhere; no restore and no start of "
                           "blkmqd will put the originals back.");
        manager_load_profile(m);
        manager_arm_drift(m);
        if (m->config->n_devices == 0 && !m->config->zones.emulate)
                log_warning("The configuration has no [Device] section: no device will be managed.");
        if (!m->opts.once && access("/run/udev/control", F_OK) < 0)
                log_warning("systemd-udevd does not seem to run (no /run/udev/control): "
                            "hotplugged disks will not be seen until it does.");
        return udev_watch_enumerate(m->udev);
}

static uint64_t now_nsec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

/* sd_event_loop(), with each iteration's busy time (prepare, and the one
 * source dispatch runs) recorded, the wait left out. */
static int loop_timed(Manager *m) {
        sd_event *e = m->event;
        int r, code = 0;

        while (sd_event_get_state(e) != SD_EVENT_FINISHED) {
                uint64_t t = now_nsec(), spent;

                r = sd_event_prepare(e);
                if (r < 0)
                        return r;
                spent = now_nsec() - t;
                if (r == 0) {
                        r = sd_event_wait(e, UINT64_MAX);
                        if (r < 0)
                                return r;
                }
                if (r > 0) {
                        t = now_nsec();
                        r = sd_event_dispatch(e);
                        spent += now_nsec() - t;
                        if (r < 0)
                                return r;
                }
                hist_record(&m->loop_hist, spent);
                if (spent > 100ULL * 1000 * 1000)
                        log_debug("event loop: one iteration took %.1f ms.", spent / 1e6);
        }
        r = sd_event_get_exit_code(e, &code);
        return r < 0 ? r : code;
}

int manager_run(Manager *m) {
        int r;

        r = loop_timed(m);
        if (r < 0)
                return log_error_errno(r, "Event loop failed: %m");
        return r;
}

json_t *manager_plans_json(Manager *m) {
        json_t *devs = json_array();

        for (size_t i = 0; devs && i < m->n_devices; i++) {
                Device *d = m->devices[i];
                if (!d->removed)
                        json_array_append_new(devs, device_plan_to_json(d->info, &d->resolved, d->last));
        }
        return json_pack("{s:o}", "devices", devs);
}
