/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a finished tune job leaves in its Device: the originals that restore
 * and stop put back (each attribute's value before blkmqd first changed it,
 * and those a change moved as a side effect), and its log lines. Runs on
 * the loop thread, in the manager's job_done(). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "managed-device.h"
#include "knobs.h"
#include "log.h"
#include "message-id.h"
#include "originals-record.h"
#include "sysfs.h"
#include "test-hooks.h"
#include "util.h"

static void original_done(Original *o) {
        free(o->attr);
        free(o->path);
        free(o->value);
        free(o->scheduler);
}

void device_forget_originals(Device *d) {
        for (size_t i = 0; i < d->n_originals; i++)
                original_done(&d->originals[i]);
        d->originals = mfree(d->originals);
        d->n_originals = 0;
}

Original *device_find_original(Device *d, const char *attr) {
        for (size_t i = 0; i < d->n_originals; i++)
                if (streq(d->originals[i].attr, attr))
                        return &d->originals[i];
        return NULL;
}

static int device_add_original(Device *d, const TuneEntry *e) {
        Original *t, *o;

        if (!e->before || device_find_original(d, e->attr))
                return 0;
        t = realloc(d->originals, sizeof *t * (d->n_originals + 1));
        if (!t)
                return -ENOMEM;
        d->originals = t;
        o = &t[d->n_originals];
        *o = (Original) { .knob = e->knob };
        o->attr = strdup(e->attr);
        o->path = e->path ? strdup(e->path) : NULL;
        o->value = strdup(e->before);
        o->scheduler = e->before_scheduler ? strdup(e->before_scheduler) : NULL;
        if (!o->attr || !o->value || (e->path && !o->path) || (e->before_scheduler && !o->scheduler)) {
                original_done(o);
                return -ENOMEM;
        }
        d->n_originals++;
        return 0;
}

static void device_drop_original(Device *d, const char *attr) {
        for (size_t i = 0; i < d->n_originals; i++)
                if (streq(d->originals[i].attr, attr)) {
                        original_done(&d->originals[i]);
                        memmove(&d->originals[i], &d->originals[i + 1],
                                sizeof(Original) * (d->n_originals - i - 1));
                        d->n_originals--;
                        return;
                }
}

/* The original of an attribute that a change of another moved as a side
 * effect (its value before the job: before). */
static void record_implied(Device *d, Knob knob, const char *attr, const char *before) {
        _cleanup_free_ char *p = NULL;

        if (!before || device_find_original(d, attr))
                return;
        p = path_join(d->info->blockdir, attr);
        TuneEntry e = { .knob = knob, .attr = (char *) attr, .path = p, .before = (char *) before };
        if (!p || device_add_original(d, &e) < 0)
                log_oom();
        else
                device_find_original(d, attr)->implied = true;
}

/* predict: before j's writes, with every value that differs from the one
 * wanted taken as about to change, and nothing put back yet: a superset of
 * what the job will leave on record. */
static void record_originals(Device *d, const TuneJob *j, bool predict) {
        for (size_t i = 0; i < j->n_entries; i++) {
                const TuneEntry *e = &j->entries[i];
                bool ours = e->section && streq(e->section, "original");
                TuneOutcome outcome = e->outcome;

                if (predict && ours)
                        continue; /* on record until it is put back */
                if (predict && outcome == TUNE_PENDING)
                        outcome = e->before && e->wanted && !knob_value_equal(e->knob, e->before, e->wanted)
                                          ? TUNE_CHANGED : TUNE_UNCHANGED;
                if (ours && (outcome == TUNE_CHANGED || outcome == TUNE_UNCHANGED)) {
                        device_drop_original(d, e->attr);
                        continue;
                }
                if (ours || (outcome != TUNE_CHANGED && outcome != TUNE_ADJUSTED))
                        continue;
                if (device_add_original(d, e) < 0)
                        log_oom();
                /* Written for its own key: no longer only moved by a switch. */
                if (e->knob == KNOB_ASYNC_DEPTH && device_find_original(d, e->attr))
                        device_find_original(d, e->attr)->implied = false;
                /* A scheduler switch resets nr_requests: its original must
                 * come back too. Both a switch and an nr_requests change
                 * move queue/async_depth (capped at nr_requests). */
                if (e->knob == KNOB_SCHEDULER)
                        record_implied(d, KNOB_NR_REQUESTS, "queue/nr_requests", j->nr_requests_before);
                if (e->knob == KNOB_SCHEDULER || e->knob == KNOB_NR_REQUESTS)
                        record_implied(d, KNOB_ASYNC_DEPTH, "queue/async_depth", j->async_depth_before);
        }
}

void device_record_originals(Device *d, const TuneJob *j) {
        record_originals(d, j, false);
}

bool original_adopted(const Original *o) {
        return o->pid != 0 && o->pid != (int) getpid();
}

static int original_copy(Original *dst, const Original *src) {
        *dst = *src;
        dst->attr = strdup(src->attr);
        dst->value = strdup(src->value);
        dst->path = src->path ? strdup(src->path) : NULL;
        dst->scheduler = src->scheduler ? strdup(src->scheduler) : NULL;
        if (!dst->attr || !dst->value || (src->path && !dst->path) || (src->scheduler && !dst->scheduler)) {
                original_done(dst);
                return -ENOMEM;
        }
        return 0;
}

/* What a job's write-ahead needs, copied at plan time: the job runs on a
 * worker while the loop may replace the device's info. */
typedef struct RecordAhead {
        char *dir;
        OriginalsIdentity identity;
        DeviceInfo info;    /* only blockdir: what record_implied() reads */
        Device device;      /* the originals at plan time, and info */
        char *sig;          /* what the record file holds */
        bool wrote;         /* sig is new: written by the job */
        bool required;      /* no write without the record (--once) */
} RecordAhead;

static void record_ahead_free(void *data) {
        RecordAhead *a = data;

        if (!a)
                return;
        free(a->dir);
        originals_identity_done(&a->identity);
        free(a->info.blockdir);
        device_forget_originals(&a->device);
        free(a->sig);
        free(a);
}

static void record_ahead_run(TuneJob *j, void *data) {
        RecordAhead *a = data;
        _cleanup_free_ char *sig = NULL;
        int r;

        record_originals(&a->device, j, true);
        sig = originals_signature(a->device.originals, a->device.n_originals);
        /* Only what would put a new value on record is written: a job that
         * changes nothing, or only what is on record already, costs nothing. */
        if (sig && streq_ptr(sig, a->sig))
                return;
        r = sig ? originals_record_write(a->dir, &a->identity, a->device.originals, a->device.n_originals) : -ENOMEM;
        if (r < 0 && a->required) {
                /* --once: a value changed with no record could never be put back. */
                log_error_errno(r, "%s: cannot put the original values on record in %s, changing nothing: %m",
                                j->sysname, a->dir);
                for (size_t i = 0; i < j->n_entries; i++) {
                        TuneEntry *e = &j->entries[i];
                        if (e->outcome != TUNE_PENDING)
                                continue;
                        e->outcome = TUNE_FAILED;
                        e->error = r;
                        free(e->note);
                        e->note = strdup("not changed: the original value could not be put on record");
                }
                return;
        }
        if (!sig)
                return;
        if (r < 0) {
                log_warning_errno(r, "%s: cannot put the original values on record in %s, changing them anyway "
                                  "(a restart after a crash will not know them): %m", j->sysname, a->dir);
                return;
        }
        free(a->sig);
        a->sig = TAKE_PTR(sig);
        a->wrote = true;
        test_kill_point("originals-recorded");
}

int device_record_ahead(Device *d, TuneJob *j, const char *dir, bool required) {
        RecordAhead *a;

        a = calloc(1, sizeof *a);
        if (!a)
                return -ENOMEM;
        a->required = required;
        a->device.info = &a->info;
        if (!(a->dir = strdup(dir)) || !(a->info.blockdir = strdup(d->info->blockdir)) ||
            originals_identity_from_info(d->info, &a->identity) < 0 ||
            (d->record_sig && !(a->sig = strdup(d->record_sig))))
                goto oom;
        a->device.originals = calloc(d->n_originals + 1, sizeof(Original));
        if (!a->device.originals)
                goto oom;
        for (size_t i = 0; i < d->n_originals; i++) {
                if (original_copy(&a->device.originals[i], &d->originals[i]) < 0)
                        goto oom;
                a->device.n_originals++;
        }
        j->before_write = record_ahead_run;
        j->before_write_data = a;
        j->before_write_free = record_ahead_free;
        return 0;
oom:
        record_ahead_free(a);
        return -ENOMEM;
}

void device_record_sync(Device *d, const TuneJob *j, const char *dir) {
        _cleanup_free_ char *sig = NULL;
        RecordAhead *a = j->before_write == record_ahead_run ? j->before_write_data : NULL;
        int r;

        if (a && a->wrote) {
                free(d->record_sig);
                d->record_sig = TAKE_PTR(a->sig);
        }
        sig = originals_signature(d->originals, d->n_originals);
        if (streq_ptr(sig, d->record_sig) || (d->n_originals > 0 && !sig))
                return;
        if (d->n_originals == 0) {
                r = originals_record_remove(dir, d->sysname);
        } else {
                OriginalsIdentity id;
                r = originals_identity_from_info(d->info, &id);
                if (r >= 0) {
                        r = originals_record_write(dir, &id, d->originals, d->n_originals);
                        originals_identity_done(&id);
                }
        }
        if (r < 0) {
                log_warning_errno(r, "%s: cannot update the record of its original values in %s: %m", d->sysname, dir);
                return;
        }
        free(d->record_sig);
        d->record_sig = TAKE_PTR(sig);
}

void device_adopt_originals(Device *d, Original *o, size_t n) {
        device_forget_originals(d);
        d->originals = o;
        d->n_originals = n;
        free(d->record_sig);
        d->record_sig = originals_signature(o, n);
}

void device_prune_originals(Device *d) {
        for (size_t i = 0; i < d->n_originals;) {
                Original *o = &d->originals[i];
                _cleanup_free_ char *p = NULL, *line = NULL, *act = NULL;
                if (o->scheduler && (p = path_join(d->info->blockdir, "queue/scheduler")) &&
                    sysfs_read(p, &line) >= 0 && (act = scheduler_active(line)) && !streq(act, o->scheduler)) {
                        device_drop_original(d, o->attr);
                        continue;
                }
                i++;
        }
}

void device_log_results(Device *d, const TuneJob *j) {
        const TuneJob *prev = d->last;
        unsigned c[_TUNE_OUTCOME_MAX];

        for (size_t i = 0; i < j->n_entries; i++) {
                const TuneEntry *e = &j->entries[i];
                const TuneEntry *p = NULL;

                /* Log each problem once: a failure or skip that was already
                 * reported by the previous job of this device goes to debug. */
                for (size_t k = 0; prev && k < prev->n_entries; k++)
                        if (streq(prev->entries[k].attr, e->attr)) {
                                p = &prev->entries[k];
                                break;
                        }
                bool repeat = p && p->outcome == e->outcome && p->error == e->error && streq_ptr(p->note, e->note);
                /* An original being put back (a restore, or a key the
                 * policy no longer sets). */
                bool back = j->restore || streq_ptr(e->section, "original");
                const LogField *fields = LOG_FIELDS({ "BLKMQD_DEVICE", j->sysname }, { "BLKMQD_KNOB", e->attr },
                                                    { "BLKMQD_OLD", e->before }, { "BLKMQD_NEW", e->after ? e->after : e->wanted },
                                                    { "BLKMQD_SECTION", e->section });

                switch (e->outcome) {
                case TUNE_CHANGED:
                        log_struct(LOG_INFO, back ? BLKMQD_MESSAGE_RESTORE : BLKMQD_MESSAGE_CHANGE_APPLIED, fields,
                                   "%s: %s %s → %s (%s)%s%s", j->sysname, e->attr, strna(e->before), strna(e->after),
                                   strna(e->section), e->note ? ": " : "", strempty(e->note));
                        break;
                case TUNE_ADJUSTED:
                        log_struct(repeat ? LOG_DEBUG : LOG_WARNING,
                                   back ? BLKMQD_MESSAGE_RESTORE_REFUSED : BLKMQD_MESSAGE_CHANGE_APPLIED, fields,
                                   "%s: %s: wrote %s, %s", j->sysname, e->attr, strna(e->wanted), strna(e->note));
                        break;
                case TUNE_FAILED:
                        if (e->error == -ENODEV)
                                /* Nothing left to put back into: no refusal. */
                                log_debug("%s: %s: device vanished", j->sysname, e->attr);
                        else
                                log_struct_errno(repeat ? LOG_DEBUG : LOG_ERR, e->error,
                                                 back ? BLKMQD_MESSAGE_RESTORE_REFUSED : NULL, fields,
                                                 "%s: %s=%s: %s", j->sysname, e->attr, strna(e->wanted), strna(e->note));
                        break;
                case TUNE_SKIPPED:
                        /* Putting back a tunable of a scheduler that is gone
                         * again is expected to find nothing to do. */
                        log_full(repeat || streq_ptr(e->section, "original") ? LOG_DEBUG : LOG_NOTICE, "%s: %s skipped: %s", j->sysname, e->attr,
                                 strna(e->note));
                        break;
                default:
                        log_debug("%s: %s = %s (%s)", j->sysname, e->attr, strna(e->after ? e->after : e->before),
                                  tune_outcome_to_string(e->outcome));
                }
        }
        if (j->affinity_note && !(prev && streq_ptr(prev->affinity_note, j->affinity_note)))
                log_notice("%s: %s", j->sysname, j->affinity_note);
        tune_job_count(j, c);
        if (j->device_error == -ENODEV)
                log_info("%s: device went away while being tuned.", j->sysname);
        else
                log_full(c[TUNE_CHANGED] + c[TUNE_FAILED] + c[TUNE_ADJUSTED] ? LOG_INFO : LOG_DEBUG,
                         "%s: %s: %u changed, %u unchanged, %u adjusted, %u skipped, %u failed (%.1f ms)", j->sysname,
                         j->restore ? "restored" : "applied", c[TUNE_CHANGED], c[TUNE_UNCHANGED], c[TUNE_ADJUSTED],
                         c[TUNE_SKIPPED], c[TUNE_FAILED], j->usec / 1000.0);
}
