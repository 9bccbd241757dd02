/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

#include "api-manager.h"
#include "originals-record.h"
#include "autotune-runner.h"
#include "dm-table.h"
#include "io.blkmqd.Manager.varlink.h"
#include "log.h"
#include "plan-print.h"
#include "stack-tree.h"
#include "sysfs.h"
#include "util.h"
#include "varlink-subscribers.h"

/* A mutating call replies once the tune jobs it started are back: those
 * of its devices that were busy, or marked to run again, right after the
 * call. Other devices' jobs (a hotplug storm) never hold it up; a device
 * that stays busy longer than CallTimeoutSec= ends it with Timeout. */
typedef struct Waiter {
        struct Waiter *next;
        struct ApiManager *api;
        VarlinkCall *call;
        char *device;     /* the call's device; NULL: all devices */
        char **wait_for;  /* sysnames of the devices whose jobs it waits for */
        sd_event_source *deadline;
} Waiter;

/* A Trial call, answered when the device's trial is over (the runner's
 * news, AUTOTUNE_RUNNER_TRIAL_DONE), told of each epoch on the way with "more". */
typedef struct TrialCall {
        struct TrialCall *next;
        VarlinkCall *call;
        char *device;
} TrialCall;

struct ApiManager {
        Manager *manager;
        AutotuneRunner *autotuner; /* not owned; trial states in GetDevice and Monitor */
        Waiter *waiters;
        TrialCall *trial_calls;
        VarlinkSubscribers monitors;
};

static json_t *result_json(const Device *d) {
        unsigned c[_TUNE_OUTCOME_MAX] = {};

        if (d->last)
                tune_job_count(d->last, c);
        return json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "device", d->sysname, "changed", c[TUNE_CHANGED],
                         "unchanged", c[TUNE_UNCHANGED], "adjusted", c[TUNE_ADJUSTED], "skipped", c[TUNE_SKIPPED],
                         "failed", c[TUNE_FAILED]);
}

static const TuneEntry *first_failure(const Device *d) {
        for (size_t i = 0; d->last && i < d->last->n_entries; i++)
                if (d->last->entries[i].outcome == TUNE_FAILED)
                        return &d->last->entries[i];
        return NULL;
}

static void waiter_complete(ApiManager *a, Waiter *w) {
        Manager *m = a->manager;
        json_t *results = json_array();

        if (w->device) {
                Device *d = manager_find_device(m, w->device);
                const TuneEntry *e;

                if (!d) {
                        varlink_call_error(w->call, "io.blkmqd.Manager.NoSuchDevice",
                                           json_pack("{s:s}", "device", w->device));
                        json_decref(results);
                        return;
                }
                e = first_failure(d);
                if (e) {
                        varlink_call_error(w->call, "io.blkmqd.Manager.AttributeNotWritable",
                                           json_pack("{s:s, s:s, s:i, s:s}", "device", d->sysname, "attribute",
                                                     e->attr, "errno", -e->error, "message", strna(e->note)));
                        json_decref(results);
                        return;
                }
                json_array_append_new(results, result_json(d));
        } else
                for (size_t i = 0; i < m->n_devices; i++)
                        if (!m->devices[i]->removed && resolved_managed(&m->devices[i]->resolved))
                                json_array_append_new(results, result_json(m->devices[i]));
        varlink_call_reply(w->call, json_pack("{s:o}", "results", results));
}

static bool device_settled(const Device *d) {
        return !d || d->removed || (!d->busy && !d->dirty);
}

/* Drops the name at i from w's list (order does not matter). */
static void waiter_drop(Waiter *w, size_t i) {
        size_t n = strv_length(w->wait_for);

        free(w->wait_for[i]);
        w->wait_for[i] = w->wait_for[n - 1];
        w->wait_for[n - 1] = NULL;
}

/* Every device of the list looked up: when the call is made, and when no
 * job is left at all. A device seen settled leaves the list for good: its
 * jobs the call started are back, later ones are not the call's. */
static bool waiter_settled(ApiManager *a, Waiter *w) {
        for (size_t i = 0; w->wait_for && w->wait_for[i];) {
                if (!device_settled(manager_find_device(a->manager, w->wait_for[i]))) {
                        i++;
                        continue;
                }
                waiter_drop(w, i);
        }
        return !w->wait_for || !w->wait_for[0];
}

/* One device's job came back, or it went away: only that name is looked
 * at in each waiter (with 256 devices and a profile switch per second in a
 * hotplug storm, looking every name up again at every job was 256 x 256
 * string compares per completion, per waiter). */
static bool waiter_settled_by(Waiter *w, const char *sysname, bool settled) {
        if (settled)
                for (size_t i = 0; w->wait_for && w->wait_for[i]; i++)
                        if (streq(w->wait_for[i], sysname)) {
                                waiter_drop(w, i);
                                break;
                        }
        return !w->wait_for || !w->wait_for[0];
}

static void waiter_free(Waiter *w) {
        sd_event_source_disable_unref(w->deadline);
        varlink_call_unref(w->call);
        strv_free(w->wait_for);
        free(w->device);
        free(w);
}

static void waiter_unlink(ApiManager *a, Waiter *w) {
        for (Waiter **p = &a->waiters; *p; p = &(*p)->next)
                if (*p == w) {
                        *p = w->next;
                        return;
                }
}

/* Replies to every call whose own jobs are back: d's (settled or not), or
 * with d NULL all of them looked up. */
static void waiters_flush_device(ApiManager *a, const Device *d, bool settled) {
        for (Waiter *w = a->waiters, *next; w; w = next) {
                next = w->next;
                if (!(d ? waiter_settled_by(w, d->sysname, settled) : waiter_settled(a, w)))
                        continue;
                waiter_unlink(a, w);
                waiter_complete(a, w);
                waiter_free(w);
        }
}

static void waiters_flush(ApiManager *a) {
        waiters_flush_device(a, NULL, false);
}

static int waiter_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        Waiter *w = userdata;
        ApiManager *a = w->api;
        const char *busy = NULL;

        /* A device that settled without a job coming back (its next plan
         * was empty) is only seen by a full look-up: done, not late. */
        if (waiter_settled(a, w)) {
                waiter_unlink(a, w);
                waiter_complete(a, w);
                waiter_free(w);
                return 0;
        }

        STRV_FOREACH(n, w->wait_for)
                if (!device_settled(manager_find_device(a->manager, *n))) {
                        busy = *n;
                        break;
                }
        log_warning("%s: %s still being tuned after %llu s: the call gets Timeout; the tuning goes on.",
                    varlink_call_get_method(w->call), strna(busy),
                    (unsigned long long) (a->manager->config->daemon.call_timeout_usec / 1000000));
        varlink_call_error(w->call, "io.blkmqd.Manager.Timeout",
                           json_pack("{s:s?, s:I}", "device", busy, "seconds",
                                     (json_int_t) (a->manager->config->daemon.call_timeout_usec / 1000000)));
        waiter_unlink(a, w);
        waiter_free(w);
        return 0;
}

static int wait_for_jobs(ApiManager *a, VarlinkCall *call, const char *device) {
        Manager *m = a->manager;
        Waiter *w = calloc(1, sizeof *w);
        int r;

        if (!w)
                return -ENOMEM;
        w->api = a;
        if (device && !(w->device = strdup(device))) {
                free(w);
                return -ENOMEM;
        }
        /* The jobs this call started: its devices that are busy or due
         * again now, right after the call asked for them. */
        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                if ((device && !streq(d->sysname, device)) || device_settled(d))
                        continue;
                if (strv_extend(&w->wait_for, d->sysname) < 0) {
                        waiter_free(w);
                        return -ENOMEM;
                }
        }
        w->call = varlink_call_ref(call);
        if (m->config->daemon.call_timeout_usec > 0) {
                r = sd_event_add_time_relative(m->event, &w->deadline, CLOCK_MONOTONIC,
                                               m->config->daemon.call_timeout_usec, 0, waiter_timeout, w);
                if (r < 0) {
                        waiter_free(w);
                        return r;
                }
        }
        w->next = a->waiters;
        a->waiters = w;
        waiters_flush(a);
        return 0;
}

static void monitors_send(ApiManager *a, const char *event, Device *d, const char *profile) {
        json_t *o;

        if (varlink_subscribers_empty(&a->monitors))
                return;
        o = json_pack("{s:s}", "event", event);
        if (!o)
                return;
        if (d) {
                json_object_set_new(o, "device", json_string(d->sysname));
                if (streq(event, "applied") || streq(event, "restored"))
                        json_object_set_new(o, "result", result_json(d));
        }
        if (profile)
                json_object_set_new(o, "profile", json_string(profile));
        varlink_subscribers_notify(&a->monitors, o);
}

static void api_manager_event(Manager *m, ManagerEventType type, Device *d, void *userdata) {
        ApiManager *a = userdata;

        switch (type) {
        case MANAGER_EVENT_DEVICE_ADDED:
                monitors_send(a, "added", d, NULL);
                break;
        case MANAGER_EVENT_DEVICE_REMOVED:
                monitors_send(a, "removed", d, NULL);
                waiters_flush_device(a, d, true); /* gone: its jobs are no call's to wait for */
                break;
        case MANAGER_EVENT_DEVICE_APPLIED:
                monitors_send(a, d->last && d->last->restore ? "restored" : "applied", d, NULL);
                waiters_flush_device(a, d, device_settled(d));
                break;
        case MANAGER_EVENT_RELOADED:
                monitors_send(a, "reloaded", NULL, NULL);
                break;
        case MANAGER_EVENT_PROFILE:
                monitors_send(a, "profile", NULL, m->profile); /* absent: cleared */
                break;
        case MANAGER_EVENT_IDLE:
                waiters_flush(a);
                break;
        case MANAGER_EVENT_TRIAL:
                if (!varlink_subscribers_empty(&a->monitors) && a->autotuner) {
                        json_t *t = autotune_runner_device_json(a->autotuner, d);
                        json_t *o = json_pack("{s:s, s:s, s:o?}", "event", "trial", "device", d->sysname, "trial",
                                              t ? json_incref(json_object_get(t, "trial")) : NULL);
                        json_decref(t);
                        if (o)
                                varlink_subscribers_notify(&a->monitors, o);
                }
                break;
        default:
                break;
        }
}

static const char *state_name(ManagerState s) {
        switch (s) {
        case MANAGER_STARTING:
                return "starting";
        case MANAGER_RUNNING:
                return "running";
        case MANAGER_RELOADING:
                return "reloading";
        case MANAGER_STOPPING:
                return "stopping";
        }
        return "unknown";
}

static json_t *strv_json(char *const *l) {
        json_t *a = json_array();
        STRV_FOREACH(s, l)
                json_array_append_new(a, json_string(*s));
        return a;
}

static int no_such_device(VarlinkCall *call, const char *name) {
        return varlink_call_error(call, "io.blkmqd.Manager.NoSuchDevice", json_pack("{s:s}", "device", name));
}

static int method_get_status(VarlinkCall *call, json_t *params, void *userdata) {
        ApiManager *a = userdata;
        Manager *m = a->manager;
        unsigned managed = 0, changed = 0, failed = 0;
        char kernel[32];

        for (size_t i = 0; i < m->n_devices; i++) {
                Device *d = m->devices[i];
                unsigned c[_TUNE_OUTCOME_MAX] = {};
                if (d->removed || !resolved_managed(&d->resolved))
                        continue;
                managed++;
                changed += d->n_originals;
                if (d->last)
                        tune_job_count(d->last, c);
                failed += c[TUNE_FAILED];
        }
        snprintf(kernel, sizeof kernel, "%u.%u", m->tune.kernel_version >> 16, (m->tune.kernel_version >> 8) & 0xff);
        json_t *o = json_pack("{s:s, s:I, s:s, s:s, s:o, s:i, s:i, s:i, s:i}", "version", PACKAGE_VERSION,
                              "uptimeUsec", (json_int_t) (now_usec(CLOCK_MONOTONIC) - m->start_usec), "state",
                              state_name(m->state), "kernel", kernel, "configFiles", strv_json(m->config->files),
                              "devices", (int) m->n_devices, "managed", managed, "changed", changed, "failed", failed);
        if (m->profile)
                json_object_set_new(o, "profile", json_string(m->profile));
        json_t *profiles = json_array();
        for (size_t i = 0; i < m->config->n_profiles; i++)
                json_array_append_new(profiles, json_string(m->config->profiles[i].name));
        json_object_set_new(o, "profiles", profiles);
        if (m->loop_hist.count) {
                uint64_t p99 = 0;
                (void) hist_percentile(&m->loop_hist, 99.0, &p99);
                json_object_set_new(o, "loopIterations", json_integer((json_int_t) m->loop_hist.count));
                json_object_set_new(o, "loopP99Usec", json_integer((json_int_t) (p99 / 1000)));
                json_object_set_new(o, "loopMaxUsec", json_integer((json_int_t) (m->loop_hist.max / 1000)));
        }
        return varlink_call_reply(call, o);
}

static json_t *summary_json(const Device *d) {
        unsigned c[_TUNE_OUTCOME_MAX] = {};
        json_t *o;

        if (d->last)
                tune_job_count(d->last, c);
        o = json_pack("{s:s, s:s, s:s, s:b, s:o, s:i, s:i}", "device", d->sysname, "id", d->info->id, "zoned",
                      d->info->zoned, "managed", resolved_managed(&d->resolved), "matched",
                      strv_json(d->resolved.matched), "changed", (int) d->n_originals, "failed", c[TUNE_FAILED]);
        if (d->info->transport)
                json_object_set_new(o, "transport", json_string(d->info->transport));
        /* The scheduler as read when the device was last seen, unless a
         * job read it back since. */
        if (d->info->scheduler)
                json_object_set_new(o, "scheduler", json_string(d->info->scheduler));
        for (size_t i = 0; d->last && i < d->last->n_entries; i++)
                if (d->last->entries[i].knob == KNOB_SCHEDULER) {
                        const TuneEntry *e = &d->last->entries[i];
                        const char *s = e->after ? e->after : e->before;
                        if (s)
                                json_object_set_new(o, "scheduler", json_string(s));
                }
        return o;
}

static int method_list_devices(VarlinkCall *call, json_t *params, void *userdata) {
        ApiManager *a = userdata;
        Manager *m = a->manager;
        Device *prev = NULL;

        for (size_t i = 0; i < m->n_devices; i++) {
                if (m->devices[i]->removed)
                        continue;
                if (prev)
                        varlink_call_notify(call, json_pack("{s:o}", "device", summary_json(prev)));
                prev = m->devices[i];
        }
        if (!prev)
                return varlink_call_reply(call, NULL);
        return varlink_call_reply(call, json_pack("{s:o}", "device", summary_json(prev)));
}

static const Original *find_original(const Device *d, const char *attr) {
        for (size_t i = 0; i < d->n_originals; i++)
                if (streq(d->originals[i].attr, attr))
                        return &d->originals[i];
        return NULL;
}

static json_t *device_json(const ApiManager *a, const Device *d) {
        json_t *o = device_info_to_json(d->info), *knobs = json_array();

        json_object_set_new(o, "managed", json_boolean(resolved_managed(&d->resolved)));
        json_object_set_new(o, "matched", strv_json(d->resolved.matched));
        if (d->resolved.profile)
                json_object_set_new(o, "profile", json_string(d->resolved.profile));
        json_object_set_new(o, "properties", strv_json(d->info->properties));
        for (size_t i = 0; d->last && i < d->last->n_entries; i++) {
                const TuneEntry *e = &d->last->entries[i];
                json_t *k = tune_entry_to_json(e, &d->resolved);
                const Original *orig = find_original(d, e->attr);

                json_object_del(k, "before");
                if (strv_contains(d->kept, e->attr))
                        json_object_set_new(k, "note", json_string("kept as something else wrote it (DriftPolicy=keep): "
                                                                   "blkmqctl apply or a reload manages it again"));
                if (orig)
                        json_object_set_new(k, "original", json_string(orig->value));
                if (orig && original_adopted(orig))
                        json_object_set_new(k, "originalFrom",
                                            json_pack("{s:i, s:I}", "pid", orig->pid, "recordedUsec",
                                                      (json_int_t) orig->recorded_usec));
                json_array_append_new(knobs, k);
        }
        json_object_set_new(o, "knobs", knobs);
        if (d->last && d->last->hctx_map)
                json_object_set_new(o, "hctxCpus", json_string(d->last->hctx_map));
        if (d->last && d->last->affinity_note)
                json_object_set_new(o, "affinityNote", json_string(d->last->affinity_note));
        if (d->last_usec)
                json_object_set_new(o, "lastAppliedUsec", json_integer((json_int_t) d->last_usec));
        if (d->last)
                json_object_set_new(o, "lastJobUsec", json_integer((json_int_t) d->last->usec));
        json_object_set_new(o, "jobs", json_integer(d->n_jobs));
        json_object_set_new(o, "failedJobs", json_integer(d->n_failed_jobs));
        {
                json_t *adopted = json_array();
                for (size_t i = 0; i < d->n_originals; i++)
                        if (original_adopted(&d->originals[i]))
                                json_array_append_new(adopted, json_pack("{s:s, s:s, s:i, s:I}", "attribute",
                                                                         d->originals[i].attr, "value",
                                                                         d->originals[i].value, "pid", d->originals[i].pid,
                                                                         "recordedUsec",
                                                                         (json_int_t) d->originals[i].recorded_usec));
                json_object_set_new(o, "originalsAdopted", adopted);
        }
        if (d->record_sig && a->manager->originals_dir) {
                _cleanup_free_ char *rp = originals_record_path(a->manager->originals_dir, d->sysname);
                if (rp)
                        json_object_set_new(o, "originalsRecord", json_string(rp));
        }
        if (a->autotuner) {
                json_t *t = autotune_runner_device_json(a->autotuner, d);
                if (t)
                        json_object_set_new(o, "autotune", t);
        }
        return o;
}

static int method_get_device(VarlinkCall *call, json_t *params, void *userdata) {
        ApiManager *a = userdata;
        const char *name = json_string_value(json_object_get(params, "device"));
        Device *d = manager_find_device(a->manager, name);

        if (!d)
                return no_such_device(call, name);
        return varlink_call_reply(call, json_pack("{s:o}", "device", device_json(a, d)));
}

/* Device d's settings read again now, against what its last job left
 * (tune_entry_check()): sysfs reads on the loop, as the metrics writer's,
 * a few per device; none while a job of d is in flight (its writes are
 * not drift, and the job's values are not in yet). */
static json_t *verified_json(const Device *d) {
        _cleanup_free_ char *active = NULL;
        json_t *knobs = json_array(), *o;
        int drifted = 0;

        o = json_pack("{s:s, s:b, s:b}", "device", d->sysname, "managed", resolved_managed(&d->resolved), "busy",
                      d->busy);
        if (!o || !knobs) {
                json_decref(o);
                json_decref(knobs);
                return NULL;
        }
        for (size_t i = 0; !d->busy && d->last && i < d->last->n_entries; i++) {
                const TuneEntry *e = &d->last->entries[i];
                const Original *orig = find_original(d, e->attr);
                _cleanup_free_ char *found = NULL;
                int c = tune_entry_check(d->last, e, &active, &found);
                bool kept = strv_contains(d->kept, e->attr);
                json_t *k;

                if (c < 0)
                        break; /* out of memory: what was read so far */
                /* DriftPolicy=keep: another writer's value, left to it. */
                if (kept && !found && e->path)
                        (void) sysfs_read(e->path, &found);
                if (c == TUNE_CHECK_DRIFTED && !kept)
                        drifted++;
                k = json_pack("{s:s, s:s, s:s}", "attribute", e->attr, "key", knob_info(e->knob)->key, "state",
                              kept ? "kept" : tune_check_to_string(c));
                if (!k)
                        break;
                if (e->wanted)
                        json_object_set_new(k, "wanted", json_string(e->wanted));
                if (e->after)
                        json_object_set_new(k, "applied", json_string(e->after));
                if (found)
                        json_object_set_new(k, "found", json_string(found));
                if (orig)
                        json_object_set_new(k, "original", json_string(orig->value));
                if (e->section)
                        json_object_set_new(k, "section", json_string(e->section));
                if (d->resolved.origin[e->knob] && e->section && !streq(e->section, "original"))
                        json_object_set_new(k, "origin", json_string(d->resolved.origin[e->knob]));
                json_array_append_new(knobs, k);
        }
        json_object_set_new(o, "drifted", json_integer(drifted));
        json_object_set_new(o, "knobs", knobs);
        return o;
}

static int method_verify(VarlinkCall *call, json_t *params, void *userdata) {
        ApiManager *a = userdata;
        Manager *m = a->manager;
        const char *name = json_string_value(json_object_get(params, "device"));
        json_t *devices = json_array();

        if (!devices)
                return -ENOMEM;
        if (name) {
                Device *d = manager_find_device(m, name);
                if (!d) {
                        json_decref(devices);
                        return no_such_device(call, name);
                }
                json_array_append_new(devices, verified_json(d));
        } else
                for (size_t i = 0; i < m->n_devices; i++)
                        if (!m->devices[i]->removed && resolved_managed(&m->devices[i]->resolved))
                                json_array_append_new(devices, verified_json(m->devices[i]));
        return varlink_call_reply(call, json_pack("{s:o}", "devices", devices));
}

static int method_list_profiles(VarlinkCall *call, json_t *params, void *userdata) {
        ApiManager *a = userdata;
        Manager *m = a->manager;
        json_t *profiles = json_array();

        if (!profiles)
                return -ENOMEM;
        for (size_t i = 0; i < m->config->n_profiles; i++) {
                const ProfileSection *p = &m->config->profiles[i];
                _cleanup_free_ char *section = NULL, *origin = NULL;
                json_t *values = json_array();

                if (asprintf(&section, "Profile %s", p->name) < 0 || asprintf(&origin, "%s:%u", p->file, p->line) < 0)
                        section = origin = NULL;
                for (int k = 0; values && section && k < _KNOB_MAX; k++)
                        if (p->settings.value[k])
                                json_array_append_new(values,
                                                      json_pack("{s:s, s:s, s:s, s:s}", "key", knob_info(k)->key,
                                                                "value", p->settings.value[k], "section", section,
                                                                "origin", strna(p->settings.origin[k])));
                json_array_append_new(profiles, json_pack("{s:s, s:b, s:o, s:o*, s:s}", "name", p->name, "active",
                                                          streq_ptr(m->profile, p->name), "devices",
                                                          strv_json(p->devices), "values", values, "origin",
                                                          strna(origin)));
        }
        return varlink_call_reply(call, json_pack("{s:o}", "profiles", profiles));
}

/* One device of a stack for explain's tree: its policy resolved afresh,
 * a trial's overlay, its last job, its dm table's targets. */
static int stack_tree_lookup(const char *sysname, StackTreeDevice *ret, void *userdata) {
        ApiManager *a = userdata;
        Device *d = manager_find_device(a->manager, sysname);
        int r;

        if (!d || !streq(d->sysname, sysname))
                return 0; /* not one blkmqd manages: its name and role only */
        ret->info = d->info;
        ret->job = d->last;
        r = manager_resolve(a->manager, d, a->manager->profile, &ret->resolved);
        if (r < 0)
                return r;
        if (a->autotuner)
                autotune_runner_overlay(a->autotuner, d, &ret->resolved);
        if (d->info->dm_name || d->info->dm_uuid) {
                r = dm_target_types(d->info->devnum, &ret->dm_target);
                if (r < 0)
                        log_debug_errno(r, "%s: no dm table for explain's tree, the role without it: %m", sysname);
        }
        return 0;
}

static int method_explain(VarlinkCall *call, json_t *params, void *userdata) {
        ApiManager *a = userdata;
        const char *name = json_string_value(json_object_get(params, "device"));
        Device *d = manager_find_device(a->manager, name);
        Resolved r = {};
        json_t *values, *o, *stacks = NULL;
        int q;

        if (!d)
                return no_such_device(call, name);
        /* Resolve afresh: explain answers for the config in force now. */
        q = manager_resolve(a->manager, d, a->manager->profile, &r);
        if (q < 0)
                return q;
        if (a->autotuner)
                autotune_runner_overlay(a->autotuner, d, &r);
        /* the trees of the stacks d is in: its own on a top (a request-based
         * multipath map too, its paths below it), each top above it on a
         * member, a layer between or a map's path */
        q = stack_trees_json(a->manager->tune.sysfs_root, d->sysname, stack_tree_lookup, a, &stacks);
        if (q < 0) {
                resolved_done(&r);
                return q;
        }
        values = json_array();
        for (int k = 0; k < _KNOB_MAX; k++)
                if (r.value[k])
                        json_array_append_new(values, json_pack("{s:s, s:s, s:s, s:s}", "key", knob_info(k)->key,
                                                                "value", r.value[k], "section", strna(r.section[k]),
                                                                "origin", strna(r.origin[k])));
        o = json_pack("{s:s, s:b, s:o, s:o, s:o, s:o}", "device", d->sysname, "managed", resolved_managed(&r),
                      "matched", strv_json(r.matched), "sections", strv_json(r.explain), "values", values, "stacks",
                      stacks);
        if (r.profile)
                json_object_set_new(o, "profile", json_string(r.profile));
        if (a->autotuner) {
                char *s = autotune_runner_explain(a->autotuner, d);
                if (s)
                        json_object_set_new(o, "autotune", json_string(s));
                free(s);
        }
        resolved_done(&r);
        return varlink_call_reply(call, o);
}

static int method_apply_or_restore(VarlinkCall *call, json_t *params, ApiManager *a, bool restore) {
        const char *name = json_string_value(json_object_get(params, "device"));
        Device *d = NULL;
        int r;

        if (name && !(d = manager_find_device(a->manager, name)))
                return no_such_device(call, name);
        /* An apply asked for manages again what DriftPolicy=keep left to
         * another writer. */
        if (!restore)
                manager_forget_drift(a->manager, d);
        r = restore ? manager_restore(a->manager, d) : manager_apply(a->manager, d);
        if (r < 0)
                return r;
        return wait_for_jobs(a, call, d ? d->sysname : NULL);
}

static int method_apply(VarlinkCall *call, json_t *params, void *userdata) {
        return method_apply_or_restore(call, params, userdata, false);
}

static int method_restore(VarlinkCall *call, json_t *params, void *userdata) {
        return method_apply_or_restore(call, params, userdata, true);
}

static int method_reload(VarlinkCall *call, json_t *params, void *userdata) {
        ApiManager *a = userdata;
        ConfigError err;
        int r;

        r = manager_reload_notify(a->manager, "varlink", &err);
        if (r < 0 && err.file[0]) {
                /* Logged with its file:line by manager_reload_notify(). */
                return varlink_call_error(call, "io.blkmqd.Manager.ConfigInvalid",
                                          json_pack("{s:s, s:i, s:s}", "file", err.file, "line", err.line, "message",
                                                    err.message));
        }
        if (r < 0)
                return r;
        log_info("Configuration reloaded over varlink.");
        return wait_for_jobs(a, call, NULL);
}

static int method_set_profile(VarlinkCall *call, json_t *params, void *userdata) {
        ApiManager *a = userdata;
        const char *p = json_string_value(json_object_get(params, "profile"));
        int r;

        r = manager_set_profile(a->manager, p);
        if (r == -ENOENT)
                return varlink_call_error(call, "io.blkmqd.Manager.NoSuchProfile", json_pack("{s:s}", "profile", p));
        if (r < 0)
                return r;
        return wait_for_jobs(a, call, NULL);
}

static int method_clear_profile(VarlinkCall *call, json_t *params, void *userdata) {
        ApiManager *a = userdata;
        int r;

        r = manager_set_profile(a->manager, NULL);
        if (r < 0)
                return r;
        return wait_for_jobs(a, call, NULL);
}

static int method_set_log_level(VarlinkCall *call, json_t *params, void *userdata) {
        const char *l = json_string_value(json_object_get(params, "level"));
        int level = log_level_from_string(l);

        if (level < 0)
                return varlink_call_error_invalid_parameter(call, "level");
        log_set_max_level(level);
        log_info("Log level set to %s over varlink.", log_level_to_string(level));
        return varlink_call_reply(call, NULL);
}

static int method_monitor(VarlinkCall *call, json_t *params, void *userdata) {
        ApiManager *a = userdata;
        int r;

        r = varlink_subscribers_add(&a->monitors, call);
        if (r < 0)
                return r;
        return varlink_call_notify(call, json_pack("{s:s}", "event", "subscribed"));
}

static TrialCall *trial_call_free(TrialCall *c) {
        TrialCall *next = c->next;
        varlink_call_unref(c->call);
        free(c->device);
        free(c);
        return next;
}

/* The trial's news: its state to the calls of the device, as progress
 * (those with "more") or as their reply, the last. */
static void trial_news(Device *d, int news, void *userdata) {
        ApiManager *a = userdata;
        json_t *reply = NULL;

        for (TrialCall **p = &a->trial_calls; *p;) {
                TrialCall *c = *p;
                if (!streq(c->device, d->sysname)) {
                        p = &c->next;
                        continue;
                }
                if (!reply)
                        reply = json_pack("{s:s, s:o}", "device", d->sysname, "trial",
                                          autotune_runner_trial_json(a->autotuner, d));
                if (news == AUTOTUNE_RUNNER_TRIAL_PROGRESS) {
                        if (varlink_call_wants_more(c->call) && varlink_call_is_connected(c->call))
                                (void) varlink_call_notify(c->call, json_incref(reply));
                        p = &c->next;
                        continue;
                }
                if (varlink_call_is_connected(c->call))
                        (void) varlink_call_reply(c->call, json_incref(reply));
                *p = trial_call_free(c);
        }
        json_decref(reply);
}

/* Runs a trial of one device; with "more", one reply per epoch. */
static int method_trial(VarlinkCall *call, json_t *params, void *userdata) {
        ApiManager *a = userdata;
        const char *name = json_string_value(json_object_get(params, "device"));
        Device *d = manager_find_device(a->manager, name);
        char why[512] = "";
        int r;

        if (!d)
                return no_such_device(call, name);
        if (!a->autotuner)
                return varlink_call_error(call, "io.blkmqd.Manager.TrialRefused",
                                          json_pack("{s:s, s:s}", "device", d->sysname, "reason", "trials are off (--once, --dry-run)"));
        r = autotune_runner_start(a->autotuner, d, true, why, sizeof why);
        if (r == -EPERM)
                return varlink_call_error(call, "io.blkmqd.Manager.TrialRefused",
                                          json_pack("{s:s, s:s}", "device", d->sysname, "reason", why));
        if (r < 0 && r != -EBUSY) /* -EBUSY: it joins the running trial */
                return r;
        if (!autotune_runner_trial_pending(a->autotuner, d))
                /* over already (its first apply failed): the trial as it ended */
                return varlink_call_reply(call, json_pack("{s:s, s:o}", "device", d->sysname, "trial",
                                                          autotune_runner_trial_json(a->autotuner, d)));
        TrialCall *c = calloc(1, sizeof *c);
        if (!c || !(c->device = strdup(d->sysname))) {
                free(c);
                return -ENOMEM;
        }
        c->call = varlink_call_ref(call);
        c->next = a->trial_calls;
        a->trial_calls = c;
        return 0;
}

static const VarlinkMethod methods[] = {
        { "GetStatus", method_get_status, 0 },
        { "ListDevices", method_list_devices, VARLINK_METHOD_REQUIRES_MORE },
        { "GetDevice", method_get_device, 0 },
        { "Explain", method_explain, 0 },
        { "Verify", method_verify, 0 },
        { "ListProfiles", method_list_profiles, 0 },
        { "Apply", method_apply, VARLINK_METHOD_MUTATING },
        { "Restore", method_restore, VARLINK_METHOD_MUTATING },
        { "Reload", method_reload, VARLINK_METHOD_MUTATING },
        { "SetProfile", method_set_profile, VARLINK_METHOD_MUTATING },
        { "ClearProfile", method_clear_profile, VARLINK_METHOD_MUTATING },
        { "SetLogLevel", method_set_log_level, VARLINK_METHOD_MUTATING },
        { "Monitor", method_monitor, VARLINK_METHOD_REQUIRES_MORE },
        { "Trial", method_trial, VARLINK_METHOD_MUTATING },
};

int api_manager_new(ApiManager **ret, Manager *m, AutotuneRunner *autotuner, VarlinkServer *server) {
        _cleanup_(api_manager_freep) ApiManager *a = NULL;
        int r;

        a = calloc(1, sizeof *a);
        if (!a)
                return -ENOMEM;
        a->manager = m;
        a->autotuner = autotuner;
        r = manager_subscribe(m, MANAGER_EVENT_MASK(MANAGER_EVENT_DEVICE_ADDED) |
                                 MANAGER_EVENT_MASK(MANAGER_EVENT_DEVICE_REMOVED) |
                                 MANAGER_EVENT_MASK(MANAGER_EVENT_DEVICE_APPLIED) |
                                 MANAGER_EVENT_MASK(MANAGER_EVENT_RELOADED) |
                                 MANAGER_EVENT_MASK(MANAGER_EVENT_PROFILE) |
                                 MANAGER_EVENT_MASK(MANAGER_EVENT_IDLE) |
                                 MANAGER_EVENT_MASK(MANAGER_EVENT_TRIAL),
                              api_manager_event, a);
        if (r < 0)
                return r;
        r = varlink_server_add_interface(server, io_blkmqd_Manager_varlink, methods, ELEMENTSOF(methods), a);
        if (r < 0)
                return r;
        if (autotuner)
                autotune_runner_set_listener(autotuner, trial_news, a);
        *ret = TAKE_PTR(a);
        return 0;
}

ApiManager *api_manager_free(ApiManager *a) {
        if (!a)
                return NULL;
        manager_unsubscribe(a->manager, api_manager_event, a);
        /* the tuner is gone already (daemon_free() frees it first): no
         * news comes; the calls of a trial cut short get no reply */
        while (a->trial_calls)
                a->trial_calls = trial_call_free(a->trial_calls);
        varlink_subscribers_clear(&a->monitors);
        while (a->waiters) {
                Waiter *w = a->waiters;
                a->waiters = w->next;
                waiter_free(w);
        }
        free(a);
        return NULL;
}
