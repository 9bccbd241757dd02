/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "message-id.h"
#include "sha256.h"
#include "test-hooks.h"
#include "util.h"
#include "zone-service-internal.h"
#include "zone-service-device.h"
#include "zone-state.h"
#include "zone-service.h"
#include "zones.h"

/* The zone service's devices: added (a kernel device offered by the
 * manager, or the emulation), gone, and re-plugged; the zone report and
 * the records reconciled when one (re)appears. */

/* ---- reading ---- */

/* Sealed objects of d whose last check (scrub, Verify, Read) failed. */
static unsigned device_damaged(const ZoneDevice *d) {
        unsigned n = 0;

        for (size_t i = 0; i < d->n; i++)
                if (d->slots[i].state == ZONE_STATE_SEALED && d->slots[i].scrub_usec && d->slots[i].scrub_result < 0)
                        n++;
        return n;
}

void zone_device_get_info(const ZoneDevice *d, ZoneDeviceInfo *ret) {
        *ret = (ZoneDeviceInfo) {
                .id = d->id,
                .sysname = d->sysname,
                .backend = d->backend,
                .slots = d->slots,
                .n_zones = d->n,
                .max_open = d->zbd ? d->zbd->limits.max_open : 0,
                .max_active = d->zbd ? d->zbd->limits.max_active : 0,
                .write_limits = d->zbd && write_limits_any(&d->write_limits) ? &d->write_limits : NULL,
        };
}

void zone_device_count(const ZoneDevice *d, unsigned ret_counts[_ZONE_STATE_MAX], unsigned *ret_damaged) {
        memset(ret_counts, 0, sizeof(unsigned) * _ZONE_STATE_MAX);
        for (size_t i = 0; i < d->n; i++)
                ret_counts[d->slots[i].state]++;
        *ret_damaged = device_damaged(d);
}

static bool zdev_busy(const ZoneDevice *d) {
        if (d->resetting)
                return true;
        for (size_t k = 0; k < d->n; k++)
                if (d->slots[k].append || d->slots[k].busy || d->slots[k].verify || d->slots[k].readers)
                        return true;
        return false;
}

/* ---- resets, batched ---- */
/* A zone whose reset is durable: free and empty, nothing of its object
 * or lease kept. */
static void slot_reset_done(ZoneSlot *x) {
        x->state = ZONE_STATE_FREE;
        x->reset_count++;
        x->bytes_written = 0;
        x->zone.wp = x->zone.start;
        x->zone.cond = ZONE_COND_EMPTY;
        x->sha256 = mfree(x->sha256);
        x->label = mfree(x->label);
        x->note = mfree(x->note);
        x->tail = mfree(x->tail);
        x->tail_len = 0;
        sha256_done(&x->vsha);
        x->verified = 0;
        x->owner_uid = ZONE_DB_UID_INVALID;
        x->allocated_usec = x->sealed_usec = 0;
}

typedef struct ResetJob {
        ZoneDevice *dev;
        uint32_t *zones;
        int *results;
        size_t n;
        int flushed; /* the flush after the resets: 0, or a negative errno */
        uint64_t flush_usec;
} ResetJob;

/* A zone is recorded free only once its reset is durable: the resets of
 * the batch, then one flush of the device's write cache (where it has a
 * volatile one) that covers them all. */
/* On a worker: resets zones[0..n) of d (results[i]: 0 or a negative
 * errno), then, if any reset worked, one flush that covers them all (its
 * result, or 0; *ret_flush_usec, if not NULL: how long it took). Only a
 * reset followed by a flush that succeeded is known to be durable. */
static int resets_then_flush(ZoneDevice *d, const uint32_t *zones, int *results, size_t n, uint64_t *ret_flush_usec) {
        bool any = false;
        uint64_t t0;
        int r;

        for (size_t i = 0; i < n; i++) {
                results[i] = d->zbd->ops->reset(d->zbd, d->slots[zones[i]].zone.start);
                any = any || results[i] >= 0;
        }
        t0 = now_usec(CLOCK_MONOTONIC);
        r = any ? zbd_flush(d->zbd) : 0;
        if (ret_flush_usec)
                *ret_flush_usec = now_usec(CLOCK_MONOTONIC) - t0;
        return r;
}

static void reset_run(void *data) {
        ResetJob *j = data;

        j->flushed = resets_then_flush(j->dev, j->zones, j->results, j->n, &j->flush_usec);
}

static void reset_done(void *data, void *userdata) {
        ResetJob *j = data;
        ZoneDevice *d = j->dev;

        test_kill_point("reset-done");
        d->resetting = false;
        if (j->flushed >= 0)
                log_debug("%s: %zu resets, then the write cache flushed in %llu µs.", d->id, j->n,
                          (unsigned long long) j->flush_usec);
        for (size_t i = 0; i < j->n; i++) {
                uint32_t z = j->zones[i];
                ZoneSlot *x = &d->slots[z];

                if (j->results[i] < 0) {
                        char zs[16];
                        snprintf(zs, sizeof zs, "%u", z);
                        log_struct_errno(LOG_WARNING, j->results[i], BLKMQD_MESSAGE_ZONE_FAILED,
                                         LOG_FIELDS({ "BLKMQD_DEVICE", d->id }, { "BLKMQD_ZONE", zs }),
                                         "%s: zone %u: reset failed, keeping it out of use: %m", d->id, z);
                        x->state = ZONE_STATE_FAILED;
                        (void) free_and_strdup(&x->note, "reset failed");
                } else if (j->flushed < 0) {
                        /* The device may forget the reset, and a power cut
                         * bring the old data back under a free record: out
                         * of use, as after a failed reset. */
                        char zs[16];
                        snprintf(zs, sizeof zs, "%u", z);
                        log_struct_errno(LOG_ERR, j->flushed, BLKMQD_MESSAGE_ZONE_FAILED,
                                         LOG_FIELDS({ "BLKMQD_DEVICE", d->id }, { "BLKMQD_ZONE", zs }),
                                         "%s: zone %u: the flush after its reset failed, the reset is "
                                         "not known to be durable; keeping it out of use: %m", d->id, z);
                        x->state = ZONE_STATE_FAILED;
                        (void) free_and_strdup(&x->note, "the flush after the reset failed: not known to be empty");
                } else {
                        slot_reset_done(x);
                        log_info("%s: zone %u reset (%u resets so far).", d->id, z, x->reset_count);
                }
                (void) zone_record(d, z);
        }
        free(j->zones);
        free(j->results);
        free(j);
        zone_device_settle(d);
        /* Zones are free: allocations waiting for them go on. */
        if (d->service->zones_freed)
                d->service->zones_freed(d->service);
}

void zone_maybe_reset(ZoneDevice *d, bool starved) {
        ResetJob *j;

        if (d->resetting || !d->zbd || d->gone || !zone_resets_due(d->slots, d->n, d->service->config.reset_batch, starved))
                return;
        j = calloc(1, sizeof *j);
        if (!j)
                return;
        j->dev = d;
        j->zones = calloc(d->n, sizeof *j->zones);
        j->results = calloc(d->n, sizeof *j->results);
        if (!j->zones || !j->results) {
                free(j->zones);
                free(j->results);
                free(j);
                return;
        }
        for (size_t i = 0; i < d->n; i++)
                if (d->slots[i].state == ZONE_STATE_RELEASING)
                        j->zones[j->n++] = (uint32_t) i;
        log_info("%s: resetting %zu released zones.", d->id, j->n);
        d->resetting = true;
        if (work_pool_submit(d->service->work, reset_run, reset_done, j, NULL) < 0) {
                d->resetting = false;
                free(j->zones);
                free(j->results);
                free(j);
        }
}

/* ---- repair: failed zones back into use ---- */
typedef struct RepairJob {
        ZoneDevice *dev;
        uint32_t *zones;
        int *results; /* the reset of each zone */
        ZoneRef *refs;
        size_t n;
        int flushed;
        unsigned pending;  /* records not yet durable (and one for repair_done itself) */
        int record_error;
        ZoneDoneFn done;
        void *userdata;
} RepairJob;

static void repair_job_free(RepairJob *j) {
        free(j->zones);
        free(j->results);
        free(j->refs);
        free(j);
}

/* The same order as a batch of resets (resets_then_flush()). */
static void repair_run(void *data) {
        RepairJob *j = data;

        j->flushed = resets_then_flush(j->dev, j->zones, j->results, j->n, NULL);
}

/* One record of the repair is durable (or failed): the reply waits for
 * all of them, so that "free" in it is what a restart finds. */
static void repair_recorded(const ZoneResult *res, void *userdata) {
        RepairJob *j = userdata;

        if (res->error != ZONE_ERROR_NONE && j->record_error == 0)
                j->record_error = res->r < 0 ? res->r : -EIO;
        if (--j->pending > 0)
                return;
        if (j->record_error < 0)
                zone_done_io(j->done, j->userdata, j->record_error, "the repaired zones' records could not be made durable");
        else
                zone_done(j->done, j->userdata, &(ZoneResult) { .objects = j->refs, .n_objects = j->n });
        repair_job_free(j);
}

static void repair_done(void *data, void *userdata) {
        RepairJob *j = data;
        ZoneDevice *d = j->dev;

        j->pending = (unsigned) j->n + 1;
        for (size_t i = 0; i < j->n; i++) {
                uint32_t z = j->zones[i];
                ZoneSlot *x = &d->slots[z];
                int r = j->results[i] < 0 ? j->results[i] : j->flushed;

                x->busy = false;
                j->refs[i] = (ZoneRef) { d, z };
                if (r < 0) {
                        log_error_errno(r, "%s: zone %u: repair failed, the %s failed; it stays failed: %m", d->id, z,
                                        j->results[i] < 0 ? "reset" : "flush after the reset");
                        (void) free_and_strdup(&x->note, j->results[i] < 0 ? "repair: the reset failed"
                                                                           : "repair: the flush after the reset failed");
                } else {
                        _cleanup_free_ char *was = TAKE_PTR(x->note);
                        slot_reset_done(x);
                        log_info("%s: zone %u repaired: reset and flushed, free again (it was failed: %s).", d->id,
                                 z, was ?: "no reason recorded");
                }
                if (zone_record_then(d, z, NULL, NULL, repair_recorded, j) < 0)
                        repair_recorded(&(ZoneResult) { .error = ZONE_ERROR_IO, .r = -ENOMEM }, j);
        }
        zone_device_settle(d);
        if (d->service->zones_freed)
                d->service->zones_freed(d->service);
        repair_recorded(&(ZoneResult) {}, j); /* the reply, once every record is durable */
}

static bool repairable(const ZoneSlot *x) {
        return x->state == ZONE_STATE_FAILED && !x->lease && !x->busy && !x->append && !x->verify && !x->readers;
}

int zone_service_repair(ZoneService *s, const char *device, int64_t zone, ZoneDoneFn done, void *userdata) {
        ZoneResult res = {};
        ZoneDevice *d = (ZoneDevice *) zone_service_find_device(s, device);
        RepairJob *j;

        if (!d) {
                res.name = device;
                zone_done_error(done, userdata, &res, ZONE_ERROR_NO_SUCH_DEVICE);
                return 0;
        }
        if (d->gone || !d->zbd) {
                res.name = d->id;
                zone_done_error(done, userdata, &res, ZONE_ERROR_DEVICE_GONE);
                return 0;
        }
        if (zone >= (int64_t) d->n) {
                res.parameter = "zoneIndex";
                zone_done_error(done, userdata, &res, ZONE_ERROR_INVALID_PARAMETER);
                return 0;
        }
        if (zone >= 0 && !repairable(&d->slots[zone])) {
                const ZoneSlot *x = &d->slots[zone];
                res.ref = (ZoneRef) { d, (uint32_t) zone };
                res.name = d->id;
                res.lease = x->lease;
                res.state = x->state == ZONE_STATE_FAILED ? "failed (in use)" : zone_state_to_string(x->state);
                zone_done_error(done, userdata, &res, ZONE_ERROR_NOT_REPAIRABLE);
                return 0;
        }
        j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        *j = (RepairJob) { .dev = d, .done = done, .userdata = userdata };
        j->zones = calloc(d->n, sizeof *j->zones);
        j->results = calloc(d->n, sizeof *j->results);
        j->refs = calloc(d->n, sizeof *j->refs);
        if (!j->zones || !j->results || !j->refs) {
                repair_job_free(j);
                return -ENOMEM;
        }
        for (size_t i = 0; i < d->n; i++)
                if ((zone < 0 || (int64_t) i == zone) && repairable(&d->slots[i]))
                        j->zones[j->n++] = (uint32_t) i;
        if (j->n == 0) {
                /* Nothing failed without a lease: nothing to do. */
                zone_done(done, userdata, &(ZoneResult) {});
                repair_job_free(j);
                return 0;
        }
        log_info("%s: repairing %zu failed zones (reset, then a flush).", d->id, j->n);
        for (size_t i = 0; i < j->n; i++)
                d->slots[j->zones[i]].busy = true;
        if (work_pool_submit(s->work, repair_run, repair_done, j, NULL) < 0) {
                for (size_t i = 0; i < j->n; i++)
                        d->slots[j->zones[i]].busy = false;
                repair_job_free(j);
                return -ENOMEM;
        }
        return 0;
}

/* ---- devices ---- */

void zone_device_free(ZoneDevice *d) {
        if (!d)
                return;
        for (size_t i = 0; i < d->n; i++) {
                free(d->slots[i].lease);
                free(d->slots[i].label);
                free(d->slots[i].sha256);
                free(d->slots[i].note);
                free(d->slots[i].tail);
                sha256_done(&d->slots[i].vsha);
        }
        free(d->slots);
        if (d->zbd)
                zbd_free(d->zbd);
        for (size_t i = 0; i < ELEMENTSOF(d->readd); i++)
                free(d->readd[i]);
        free(d->id);
        free(d->sysname);
        free(d);
}

/* Reads the zone report and the records, and reconciles them. Runs at
 * start and when a device (re)appears. */
static int zdev_attach(ZoneService *s, ZoneDevice *d, Zbd *zbd) {
        _cleanup_free_ Zone *zones = NULL;
        ZoneRecord *recs = NULL;
        size_t n = 0, n_recs = 0;
        int r;

        r = zbd_report_all(zbd, &zones, &n);
        if (r < 0)
                return log_error_errno(r, "%s: zone report failed: %m", d->id);
        /* Every Seal and every reset waits for a flush where the device
         * has a volatile write cache: one that cannot flush could never
         * keep that promise, so it gets no leases. Tried once here, on an
         * idle device, as the zone report above (both block this thread
         * briefly; the flushes of seals and resets run on workers). */
        r = zbd_flush(zbd);
        if (r < 0)
                return log_error_errno(r, "%s: refused for zone leases: its write cache is volatile "
                                       "(queue/write_cache: write back) and the kernel refused to flush it, so "
                                       "blkmqd could not make a sealed object durable: %m", d->id);
        if (d->n && d->n != n)
                return log_error_errno(EINVAL, "%s: came back with %zu zones instead of %zu, not using it.", d->id,
                                       n, d->n);
        if (!d->n) {
                d->slots = calloc(n, sizeof *d->slots);
                if (!d->slots)
                        return -ENOMEM;
                d->n = n;
                for (size_t i = 0; i < n; i++) {
                        d->slots[i].index = (uint32_t) i;
                        d->slots[i].owner_uid = ZONE_DB_UID_INVALID;
                }
                r = zone_db_load_device(s->db, d->id, &recs, &n_recs);
                if (r < 0)
                        return log_error_errno(r, "%s: cannot read zone records: %m", d->id);
                for (size_t k = 0; k < n_recs; k++) {
                        ZoneRecord *rc = &recs[k];
                        int st = zone_state_from_string(rc->state);
                        if (rc->zone_index >= n || st < 0)
                                continue;
                        d->slots[rc->zone_index].state = st;
                        d->slots[rc->zone_index].bytes_written = rc->bytes_written;
                        d->slots[rc->zone_index].reset_count = rc->reset_count;
                        ZoneSlot *x = &d->slots[rc->zone_index];
                        x->lease = TAKE_PTR(rc->lease);
                        x->label = TAKE_PTR(rc->label);
                        x->sha256 = TAKE_PTR(rc->sha256);
                        x->note = TAKE_PTR(rc->note);
                        x->owner_uid = rc->owner_uid;
                        x->allocated_usec = rc->allocated_usec;
                        x->sealed_usec = rc->sealed_usec;
                }
                zone_records_free(recs, n_recs);
        }
        d->zbd = zbd;
        (void) zone_db_put_device(s->db, d->id, zbd->limits.zone_size, (uint32_t) n, NULL, NULL);

        for (size_t i = 0; i < n; i++) {
                ZoneSlot *sl = &d->slots[i];
                const char *why;
                ZoneState st;

                sl->zone = zones[i];
                st = zone_reconcile(sl, &why);
                if (!why)
                        continue;
                char zs[24];
                snprintf(zs, sizeof zs, "%zu", i);
                log_struct(st == ZONE_STATE_FAILED ? LOG_WARNING : LOG_NOTICE,
                           st == ZONE_STATE_FAILED ? BLKMQD_MESSAGE_ZONE_FAILED : NULL,
                           LOG_FIELDS({ "BLKMQD_DEVICE", d->id }, { "BLKMQD_ZONE", zs }, { "BLKMQD_LEASE", sl->lease },
                                      { "BLKMQD_LABEL", sl->label }, { "BLKMQD_OLD", zone_state_to_string(sl->state) },
                                      { "BLKMQD_NEW", zone_state_to_string(st) }),
                           "%s: zone %zu: %s → %s: %s", d->id, i, zone_state_to_string(sl->state),
                           zone_state_to_string(st), why);
                sl->state = st;
                (void) free_and_strdup(&d->slots[i].note, why);
                if (st == ZONE_STATE_FREE || st == ZONE_STATE_RELEASING) {
                        /* Nobody holds it any more: nothing of the lease
                         * stays on it (a listing would show a label and an
                         * owner on a free zone), as after a Release. */
                        sl->lease = mfree(sl->lease);
                        sl->label = mfree(sl->label);
                        sl->sha256 = mfree(sl->sha256);
                        sl->owner_uid = ZONE_DB_UID_INVALID;
                        sl->allocated_usec = sl->sealed_usec = 0;
                }
                (void) zone_record(d, (uint32_t) i);
        }
        zone_maybe_reset(d, true);
        return 0;
}

int zone_device_add(ZoneService *s, const char *id, const char *sysname, const char *backend, Zbd *zbd) {
        ZoneDevice *d = zone_find_dev(s, id);
        int r;

        if (!d) {
                ZoneDevice **t = realloc(s->devs, sizeof *t * (s->n_devs + 1));
                if (!t)
                        return -ENOMEM;
                s->devs = t;
                d = calloc(1, sizeof *d);
                if (!d || !(d->id = strdup(id))) {
                        free(d);
                        return -ENOMEM;
                }
                d->service = s;
                write_limits_none(&d->write_limits);
                s->devs[s->n_devs++] = d;
        } else if (d->zbd) {
                zbd_free(zbd);
                return 0; /* already attached */
        }
        d->backend = backend;
        r = free_and_strdup(&d->sysname, sysname);
        if (r < 0)
                return r;
        bool was_gone = d->gone;
        d->gone = false;
        r = zdev_attach(s, d, zbd);
        if (r < 0) {
                d->gone = was_gone;
                d->zbd = NULL;
                zbd_free(zbd);
                return r;
        }
        log_info("%s: %zu zones of %s (%s backend) available for leases.", d->id, d->n,
                 format_size(zbd->limits.zone_size, (char[16]) {}), backend);
        return 0;
}

/* zone_device_add() of a block device's backend, with the write limits
 * the kernel reports for it (read again at each attach: a replug may
 * bring another controller). */
static int zone_device_add_block(ZoneService *s, const char *id, const char *sysname, const char *backend, Zbd *zbd,
                                 const char *blockdir) {
        int r = zone_device_add(s, id, sysname, backend, zbd);
        ZoneDevice *d;

        if (r >= 0 && (d = zone_find_dev(s, id)))
                write_limits_read(blockdir, &d->write_limits);
        return r;
}

int zone_service_add_kernel(ZoneService *s, const char *id, const char *sysname, const char *devnode,
                            const char *blockdir) {
        Zbd *z = NULL;
        int r;

        if (!s)
                return 0;
        ZoneDevice *d = zone_find_dev(s, id);
        if (d && d->zbd && !d->gone)
                return free_and_strdup(&d->sysname, sysname);
        if (d && d->gone && zdev_busy(d)) {
                /* The old backend is still in use by an operation that is
                 * failing now; reattach when it has ended. */
                for (size_t i = 0; i < ELEMENTSOF(d->readd); i++)
                        d->readd[i] = mfree(d->readd[i]);
                d->readd[0] = strdup(sysname);
                d->readd[1] = strdup(devnode);
                d->readd[2] = blockdir ? strdup(blockdir) : NULL;
                return 0;
        }
        /* NVMe ZNS namespaces: zone append through passthrough on /dev/ngXnY
         * (the device picks the offset). Anything else, or an NVMe namespace
         * where that is not possible (not ZNS, no generic char device, no
         * CAP_SYS_ADMIN on 6.1, metadata formats): the kernel's interface. */
        if (sysname && strncmp(sysname, "nvme", 4) == 0) {
                r = zbd_nvme_open(devnode, blockdir, &z);
                if (r >= 0)
                        return zone_device_add_block(s, id, sysname, "nvme", z, blockdir);
                log_notice_errno(r, "%s: no NVMe zone append passthrough on %s, using the kernel's zoned interface: %m",
                                 sysname, devnode);
        }
        r = zbd_kernel_open(devnode, blockdir, &z);
        if (r < 0)
                return log_warning_errno(r, "%s: cannot use %s for zone leases: %m", sysname, devnode);
        return zone_device_add_block(s, id, sysname, "kernel", z, blockdir);
}

void zone_service_device_gone(ZoneService *s, const char *sysname) {
        if (!s)
                return;
        for (size_t i = 0; i < s->n_devs; i++) {
                ZoneDevice *d = s->devs[i];
                if (!streq_ptr(d->sysname, sysname) || !d->zbd)
                        continue;
                /* Records stay; operations in flight fail on their own and
                 * the backend is dropped when the last one ended. */
                log_info("%s: %s went away; its zones and leases wait for it to come back.", d->id, sysname);
                d->gone = true;
                d->sysname = mfree(d->sysname);
                zone_device_settle(d);
        }
}

void zone_device_settle(ZoneDevice *d) {
        _cleanup_free_ char *sysname = NULL, *devnode = NULL, *blockdir = NULL;

        if (!d->gone || zdev_busy(d))
                return;
        if (d->zbd) {
                zbd_free(d->zbd);
                d->zbd = NULL;
        }
        if (!d->readd[0])
                return;
        sysname = TAKE_PTR(d->readd[0]);
        devnode = TAKE_PTR(d->readd[1]);
        blockdir = TAKE_PTR(d->readd[2]);
        (void) zone_service_add_kernel(d->service, d->id, sysname, devnode, blockdir);
}


