/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/param.h>
#include <sys/random.h>
#include <time.h>

#include "log.h"
#include "sha256.h"
#include "util.h"
#include "zone-service-internal.h"
#include "zone-service.h"
#include "zones.h"

/* The zone service: the leases on the zones (allocate, release), pending
 * allocations, batched resets, the records, the service's life. Its devices
 * are zone-service-device.c's. Every change of a zone's lease state is made
 * in these two files; zone-append.c and zone-verify.c ask for theirs
 * through the zone_slot_*() transitions. */

#define SCRUB_TICK_USEC (10ULL * 1000000)

/* ---- results ---- */

/* Each error's name on the wire, and the errno that goes with it. */
static const struct {
        const char *name;
        int errnum;
} zone_errors[_ZONE_ERROR_MAX] = {
        [ZONE_ERROR_NONE] = { NULL, 0 },
        [ZONE_ERROR_INVALID_PARAMETER] = { "org.varlink.service.InvalidParameter", EINVAL },
        [ZONE_ERROR_PERMISSION_DENIED] = { "org.varlink.service.PermissionDenied", EPERM },
        [ZONE_ERROR_NO_SUCH_DEVICE] = { "io.blkmqd.Zones.NoSuchDevice", ENODEV },
        [ZONE_ERROR_DEVICE_GONE] = { "io.blkmqd.Zones.DeviceGone", ENODEV },
        [ZONE_ERROR_NO_FREE_ZONE] = { "io.blkmqd.Zones.NoFreeZone", ENOSPC },
        [ZONE_ERROR_ZONE_LIMIT_REACHED] = { "io.blkmqd.Zones.ZoneLimitReached", EUSERS },
        [ZONE_ERROR_LEASE_NOT_FOUND] = { "io.blkmqd.Zones.LeaseNotFound", ENOENT },
        [ZONE_ERROR_LEASE_BUSY] = { "io.blkmqd.Zones.LeaseBusy", EBUSY },
        [ZONE_ERROR_WRONG_STATE] = { "io.blkmqd.Zones.WrongState", EBADFD },
        [ZONE_ERROR_TOO_LARGE] = { "io.blkmqd.Zones.TooLarge", EFBIG },
        [ZONE_ERROR_CHECKSUM_MISMATCH] = { "io.blkmqd.Zones.ChecksumMismatch", EBADMSG },
        [ZONE_ERROR_IO] = { "io.blkmqd.Zones.IOError", EIO },
        [ZONE_ERROR_LABEL_EXISTS] = { "io.blkmqd.Zones.LabelExists", EEXIST },
        [ZONE_ERROR_LABEL_NOT_FOUND] = { "io.blkmqd.Zones.LabelNotFound", ENOENT },
        [ZONE_ERROR_LABEL_NOT_UNIQUE] = { "io.blkmqd.Zones.LabelNotUnique", ENOTUNIQ },
        [ZONE_ERROR_FLUSH_FAILED] = { "io.blkmqd.Zones.FlushFailed", EIO },
        [ZONE_ERROR_CANCELLED] = { NULL, ECANCELED },
};

const char *zone_error_to_string(ZoneError e) {
        return e >= 0 && e < _ZONE_ERROR_MAX ? zone_errors[e].name : NULL;
}

void zone_result_error(ZoneResult *res, ZoneError e) {
        res->error = e;
        res->r = -zone_errors[e].errnum;
}

void zone_result_io(ZoneResult *res, int r, const char *what) {
        zone_result_error(res, ZONE_ERROR_IO);
        res->errnum = r < 0 ? -r : r;
        res->r = -res->errnum;
        res->message = what;
}

void zone_done(ZoneDoneFn done, void *userdata, const ZoneResult *res) {
        if (done)
                done(res, userdata);
}

void zone_done_io(ZoneDoneFn done, void *userdata, int r, const char *what) {
        ZoneResult res = {};

        zone_result_io(&res, r, what);
        zone_done(done, userdata, &res);
}

static void done_error(ZoneDoneFn done, void *userdata, ZoneResult *res, ZoneError e) {
        zone_result_error(res, e);
        zone_done(done, userdata, res);
}

void zone_op_cancel(ZoneOp *op) {
        if (op && op->cancel)
                op->cancel(op);
}

static void make_lease(char out[37]) {
        uint8_t b[16];

        if (getrandom(b, sizeof b, 0) != sizeof b)
                for (size_t i = 0; i < sizeof b; i++)
                        b[i] = (uint8_t) (now_usec(CLOCK_MONOTONIC) >> (i % 8));
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
                 b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* ---- records ---- */

typedef struct PutDone {
        ZoneDoneFn done; /* called once durable, or NULL */
        void *userdata;
        ZoneResult res;
        const char *kill_point;
        char lease[37], expected[65], actual[65];
        /* An allocation whose record did not become durable is undone: the
         * caller got IOError, so nobody holds the lease. */
        ZoneDevice *undo_dev;
        uint32_t undo_zone;
} PutDone;

static void undo_allocation(ZoneDevice *d, uint32_t z);

static void put_done(int r, void *userdata) {
        _cleanup_free_ PutDone *p = userdata;

        if (p->done) {
                /* Crash tests: "durable:io.blkmqd.Zones.Seal" dies with the
                 * record on disk and the reply not sent. */
                test_kill_point(p->kill_point);
                if (r < 0 && p->undo_dev)
                        undo_allocation(p->undo_dev, p->undo_zone);
                if (r < 0)
                        zone_done_io(p->done, p->userdata, r, "the zone record could not be made durable");
                else
                        zone_done(p->done, p->userdata, &p->res);
        } else if (r < 0)
                log_warning_errno(r, "Failed to record a zone state: %m");
}

/* The record of zone i as the slot holds it now. Borrows the strings. */
static ZoneRecord record_of(const ZoneDevice *d, uint32_t i) {
        const ZoneSlot *x = &d->slots[i];

        return (ZoneRecord) {
                .device_id = d->id,
                .zone_index = i,
                .state = (char *) zone_state_to_string(x->state),
                .lease = x->lease,
                .owner_uid = x->owner_uid,
                .label = x->label,
                .bytes_written = x->bytes_written,
                .sha256 = x->sha256,
                .reset_count = x->reset_count,
                .allocated_usec = x->allocated_usec,
                .sealed_usec = x->sealed_usec,
                .updated_usec = now_usec(CLOCK_REALTIME),
                .note = x->note,
        };
}

static int record_full(ZoneDevice *d, uint32_t i, const ZoneResult *res, const char *kill_point, ZoneDoneFn done,
                       void *userdata, bool undo) {
        ZoneRecord rec = record_of(d, i);
        PutDone *p = calloc(1, sizeof *p);
        int r;

        if (!p) {
                if (undo)
                        undo_allocation(d, i);
                return -ENOMEM;
        }
        if (undo) {
                p->undo_dev = d;
                p->undo_zone = i;
        }
        p->done = done;
        p->userdata = userdata;
        p->kill_point = kill_point;
        if (res) {
                p->res = *res;
                if (res->lease)
                        p->res.lease = strncpy(p->lease, res->lease, sizeof p->lease - 1);
                if (res->expected)
                        p->res.expected = strncpy(p->expected, res->expected, sizeof p->expected - 1);
                if (res->actual)
                        p->res.actual = strncpy(p->actual, res->actual, sizeof p->actual - 1);
        }
        r = zone_db_put(d->service->db, &rec, put_done, p);
        if (r < 0)
                put_done(r, p); /* done is told */
        return 0;
}

int zone_record(ZoneDevice *d, uint32_t i) {
        return record_full(d, i, NULL, NULL, NULL, NULL, false);
}

int zone_record_then(ZoneDevice *d, uint32_t i, const ZoneResult *res, const char *kill_point, ZoneDoneFn done,
                     void *userdata) {
        return record_full(d, i, res, kill_point, done, userdata, false);
}

/* ---- looking up ---- */

ZoneDevice *zone_find_dev(const ZoneService *s, const char *name) {
        for (size_t i = 0; name && i < s->n_devs; i++) {
                ZoneDevice *d = s->devs[i];
                if (streq(d->id, name) || streq_ptr(d->sysname, name) ||
                    (strncmp(name, "/dev/", 5) == 0 && d->sysname && streq(name + 5, d->sysname)) ||
                    (name[0] == '/' && strncmp(d->id, "emu:", 4) == 0 && streq(d->id + 4, name)))
                        return d;
        }
        return NULL;
}

ZoneDevice *zone_find_lease(const ZoneService *s, const char *lease, uint32_t *ret_zone) {
        for (size_t i = 0; lease && i < s->n_devs; i++)
                for (size_t k = 0; k < s->devs[i]->n; k++)
                        if (streq_ptr(s->devs[i]->slots[k].lease, lease)) {
                                *ret_zone = (uint32_t) k;
                                return s->devs[i];
                        }
        return NULL;
}

const ZoneDevice *zone_service_device_at(const ZoneService *s, size_t i) {
        return s && i < s->n_devs ? s->devs[i] : NULL;
}

const ZoneDevice *zone_service_find_device(const ZoneService *s, const char *name) {
        return zone_find_dev(s, name);
}

const ZoneDevice *zone_service_find_lease(const ZoneService *s, const char *lease, uint32_t *ret_zone) {
        return zone_find_lease(s, lease, ret_zone);
}

bool zone_device_present(const ZoneDevice *d) {
        return d->zbd && !d->gone;
}

bool zone_device_is_object(const ZoneDevice *d, uint32_t i) {
        return d->slots[i].state == ZONE_STATE_SEALED && d->slots[i].lease && d->slots[i].sha256;
}


/* ---- resets, batched ---- */
typedef struct ResetJob {
        ZoneDevice *dev;
        uint32_t *zones;
        int *results;
        size_t n;
        int flushed; /* the flush after the resets: 0, or a negative errno */
} ResetJob;

/* A zone is recorded free only once its reset is durable: the resets of
 * the batch, then one flush of the device's write cache (where it has a
 * volatile one) that covers them all. */
static void reset_run(void *data) {
        ResetJob *j = data;
        bool any = false;

        for (size_t i = 0; i < j->n; i++) {
                j->results[i] = j->dev->zbd->ops->reset(j->dev->zbd, j->dev->slots[j->zones[i]].zone.start);
                any = any || j->results[i] >= 0;
        }
        j->flushed = any ? zbd_flush(j->dev->zbd) : 0;
}

static void retry_pending(ZoneService *s);

static void reset_done(void *data, void *userdata) {
        ResetJob *j = data;
        ZoneDevice *d = j->dev;

        test_kill_point("reset-done");
        d->resetting = false;
        for (size_t i = 0; i < j->n; i++) {
                uint32_t z = j->zones[i];
                ZoneSlot *x = &d->slots[z];

                if (j->results[i] < 0) {
                        log_warning_errno(j->results[i], "%s: zone %u: reset failed, keeping it out of use: %m",
                                          d->id, z);
                        x->state = ZONE_STATE_FAILED;
                        (void) free_and_strdup(&x->note, "reset failed");
                } else if (j->flushed < 0) {
                        /* The device may forget the reset, and a power cut
                         * bring the old data back under a free record: out
                         * of use, as after a failed reset. */
                        log_error_errno(j->flushed, "%s: zone %u: the flush after its reset failed, the reset is "
                                        "not known to be durable; keeping it out of use: %m", d->id, z);
                        x->state = ZONE_STATE_FAILED;
                        (void) free_and_strdup(&x->note, "the flush after the reset failed: not known to be empty");
                } else {
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
                        log_info("%s: zone %u reset (%u resets so far).", d->id, z, x->reset_count);
                }
                (void) zone_record(d, z);
        }
        free(j->zones);
        free(j->results);
        free(j);
        zone_device_settle(d);
        retry_pending(d->service);
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

/* ---- allocation ---- */

struct PendingAlloc {
        ZoneOp op;
        PendingAlloc *next;
        char *device, *label;
        uint64_t size;
        uid_t uid;
        ZoneDoneFn done;
        void *userdata;
        bool cancelled; /* the client went away: dropped unanswered at the retry */
};

static PendingAlloc *pending_free(PendingAlloc *p) {
        if (p) {
                free(p->device);
                free(p->label);
                free(p);
        }
        return NULL;
}

static void pending_cancel(ZoneOp *op) {
        ((PendingAlloc *) op)->cancelled = true;
}

/* Every end of an allocation comes through here: the request lives until
 * then (a waiting one may be cancelled until then). */
static void alloc_done(const ZoneResult *res, void *userdata) {
        PendingAlloc *p = userdata;

        zone_done(p->done, p->userdata, res);
        pending_free(p);
}

static void done_cancelled(PendingAlloc *p) {
        ZoneResult res = {};

        done_error(alloc_done, p, &res, ZONE_ERROR_CANCELLED);
}

static void undo_allocation(ZoneDevice *d, uint32_t z) {
        ZoneSlot *x = &d->slots[z];

        if (x->state != ZONE_STATE_ALLOCATED)
                return;
        log_warning("%s: zone %u: the allocation could not be recorded; the zone stays free.", d->id, z);
        x->state = ZONE_STATE_FREE;
        x->lease = mfree(x->lease);
        x->label = mfree(x->label);
        x->owner_uid = ZONE_DB_UID_INVALID;
        x->allocated_usec = 0;
}

/* The zone of d whose lease carries label (allocated, being written, sealed
 * or failed), or -1. */
static int label_holder(const ZoneDevice *d, const char *label) {
        for (size_t i = 0; i < d->n; i++)
                if (d->slots[i].lease && streq_ptr(d->slots[i].label, label))
                        return (int) i;
        return -1;
}

/* Leases zone z of d to uid; done once the record is durable. */
static int lease_zone(ZoneDevice *d, uint32_t z, PendingAlloc *req) {
        ZoneSlot *x = &d->slots[z];
        ZoneResult res = {};
        char lease[37];

        make_lease(lease);
        x->state = ZONE_STATE_ALLOCATED;
        x->bytes_written = 0;
        if (free_and_strdup(&x->lease, lease) < 0 || free_and_strdup(&x->label, req->label) < 0)
                return -ENOMEM;
        x->owner_uid = req->uid;
        x->allocated_usec = now_usec(CLOCK_REALTIME);
        x->note = mfree(x->note);
        log_info("%s: zone %u leased to uid %u (%s), %lld bytes.", d->id, z, (unsigned) req->uid, strna(req->label),
                 (long long) req->size);
        /* The lease is handed out only once its record is durable; if it
         * cannot be, the allocation is undone. */
        res.ref = (ZoneRef) { d, z };
        res.lease = lease;
        return record_full(d, z, &res, "durable:io.blkmqd.Zones.Allocate", alloc_done, req, true);
}

/* Why no device could lease a zone, in the order the caller is told. */
static void allocate_refused(ZoneService *s, PendingAlloc *req, uint64_t cap, const ZoneDevice *limited) {
        ZoneResult res = {};
        const ZoneDevice *named = zone_find_dev(s, req->device);

        if (cap && req->size > cap) {
                res.size = req->size;
                res.capacity = cap;
                return done_error(alloc_done, req, &res, ZONE_ERROR_TOO_LARGE);
        }
        if (limited) {
                res.name = limited->id;
                res.max_active = limited->zbd ? limited->zbd->limits.max_active : 0;
                return done_error(alloc_done, req, &res, ZONE_ERROR_ZONE_LIMIT_REACHED);
        }
        if (named && !zone_device_present(named)) {
                res.name = named->id;
                return done_error(alloc_done, req, &res, ZONE_ERROR_DEVICE_GONE);
        }
        res.name = req->device;
        done_error(alloc_done, req, &res, ZONE_ERROR_NO_FREE_ZONE);
}

/* 0 once done was called or the request waits (*ret_waiting), -errno if
 * done will not be called. */
static int allocate_try(ZoneService *s, PendingAlloc *req, bool may_wait, bool *ret_waiting) {
        const ZoneDevice *named = zone_find_dev(s, req->device), *limited = NULL, *dup = NULL;
        ZoneResult res = {};
        uint64_t cap = 0;
        bool waiting = false;
        int dup_zone = -1, r;

        *ret_waiting = false;
        if (req->device && !named) {
                res.name = req->device;
                done_error(alloc_done, req, &res, ZONE_ERROR_NO_SUCH_DEVICE);
                return 0;
        }
        for (size_t i = 0; i < s->n_devs; i++) {
                ZoneDevice *d = s->devs[i];

                if ((named && d != named) || !zone_device_present(d))
                        continue;
                if (req->label && s->config.unique_labels && (r = label_holder(d, req->label)) >= 0) {
                        dup = d;
                        dup_zone = r;
                        continue;
                }
                r = zone_pick(d->slots, d->n, &d->zbd->limits, req->size);
                for (size_t k = 0; k < d->n; k++)
                        cap = MAX(cap, d->slots[k].zone.capacity);
                if (r == -EUSERS) {
                        limited = d;
                        if (named)
                                break;
                        continue;
                }
                if (r == -ENOSPC) {
                        bool any = false;
                        for (size_t k = 0; k < d->n; k++)
                                any = any || d->slots[k].state == ZONE_STATE_RELEASING;
                        if (any && may_wait) {
                                zone_maybe_reset(d, true);
                                waiting = true;
                        }
                        continue;
                }
                if (r >= 0)
                        return lease_zone(d, (uint32_t) r, req);
        }
        if (limited && named) {
                res.name = limited->id;
                res.max_active = limited->zbd->limits.max_active;
                done_error(alloc_done, req, &res, ZONE_ERROR_ZONE_LIMIT_REACHED);
                return 0;
        }
        if (dup && !waiting && !limited) {
                res.label = req->label;
                res.lease = dup->slots[dup_zone].lease;
                done_error(alloc_done, req, &res, ZONE_ERROR_LABEL_EXISTS);
                return 0;
        }
        if (waiting) {
                *ret_waiting = true;
                return 0;
        }
        allocate_refused(s, req, cap, limited);
        return 0;
}

/* Queued oldest first: retried in the order they came. */
static void pending_add(ZoneService *s, PendingAlloc *p) {
        PendingAlloc **pp = &s->pending;

        while (*pp)
                pp = &(*pp)->next;
        p->next = NULL;
        *pp = p;
}

static void retry_pending(ZoneService *s) {
        PendingAlloc *p = s->pending;

        s->pending = NULL;
        while (p) {
                PendingAlloc *next = p->next;
                bool waiting = false;

                /* May wait again: calls served meanwhile (pipelined, or on
                 * other connections) may have taken the zones just reset,
                 * and more are being released. */
                if (p->cancelled || allocate_try(s, p, true, &waiting) < 0)
                        done_cancelled(p);
                else if (waiting)
                        pending_add(s, p);
                p = next;
        }
}

int zone_service_allocate(ZoneService *s, const ZoneAllocRequest *req, uid_t uid, ZoneDoneFn done, void *userdata,
                          ZoneOp **ret_op) {
        PendingAlloc *p = calloc(1, sizeof *p);
        bool waiting;
        int r;

        if (ret_op)
                *ret_op = NULL;
        if (!p)
                return -ENOMEM;
        *p = (PendingAlloc) { .op.cancel = pending_cancel, .size = req->size, .uid = uid, .done = done,
                              .userdata = userdata };
        if ((req->device && !(p->device = strdup(req->device))) || (req->label && !(p->label = strdup(req->label)))) {
                pending_free(p);
                return -ENOMEM;
        }
        r = allocate_try(s, p, true, &waiting);
        if (r < 0) {
                pending_free(p);
                return r;
        }
        if (!waiting)
                return 0; /* done was called, or will be once the lease is durable */
        pending_add(s, p);
        if (ret_op)
                *ret_op = &p->op;
        return 0;
}

/* ---- leases ---- */

int zone_lease_checks(ZoneService *s, const char *lease, uid_t uid, ZoneDevice **ret_d, uint32_t *ret_z,
                      ZoneResult *res) {
        ZoneDevice *d;
        uint32_t z;

        d = zone_find_lease(s, lease, &z);
        if (!d) {
                res->lease = lease;
                zone_result_error(res, ZONE_ERROR_LEASE_NOT_FOUND);
                return 0;
        }
        if (!zone_uid_may(uid, &d->slots[z])) {
                zone_result_error(res, ZONE_ERROR_PERMISSION_DENIED);
                return 0;
        }
        if (!zone_device_present(d)) {
                res->name = d->id;
                zone_result_error(res, ZONE_ERROR_DEVICE_GONE);
                return 0;
        }
        if (d->slots[z].append || d->slots[z].busy || d->slots[z].releasing || d->slots[z].readers) {
                res->lease = lease;
                zone_result_error(res, ZONE_ERROR_LEASE_BUSY);
                return 0;
        }
        *ret_d = d;
        *ret_z = z;
        return 1;
}

void zone_slot_begin_writing(ZoneDevice *d, uint32_t z) {
        if (d->slots[z].state != ZONE_STATE_ALLOCATED)
                return;
        /* Recorded before the data lands: after a crash, reconcile knows
         * the zone was being written. */
        d->slots[z].state = ZONE_STATE_WRITING;
        (void) zone_record(d, z);
}

void zone_slot_appended(ZoneDevice *d, uint32_t z, int r, uint64_t appended, uint8_t *tail, uint32_t tail_len) {
        ZoneSlot *x = &d->slots[z];

        if (r < 0) {
                /* What is on the device is what counts: every completed
                 * write was whole blocks of data. The rest is lost. */
                x->bytes_written = zone_written(&x->zone);
                appended = 0;
                x->tail = mfree(x->tail);
                x->tail_len = 0;
                free(tail);
                (void) free_and_strdup(&x->note, "an append failed: the zone holds only what was written before");
        } else {
                /* Keep the partial last block for the next append or the seal. */
                free(x->tail);
                x->tail = tail;
                x->tail_len = tail_len;
        }
        x->bytes_written += appended;
}

void zone_slot_sealed(ZoneDevice *d, uint32_t z, const char *sha256, uint64_t verified) {
        ZoneSlot *x = &d->slots[z];

        x->state = ZONE_STATE_SEALED;
        x->zone.cond = ZONE_COND_FULL;
        x->zone.wp = x->zone.start + x->zone.capacity;
        (void) free_and_strdup(&x->sha256, sha256);
        x->sealed_usec = now_usec(CLOCK_REALTIME);
        log_info("%s: zone %u sealed, %llu bytes (%llu of them verified while written), sha256 %s.", d->id, z,
                 (unsigned long long) x->bytes_written, (unsigned long long) verified, sha256);
}

/* The flush after the finish failed: the data read back and matched, but
 * it may sit in a cache the device could not write out, and may have been
 * dropped from it. Not sealed, and never retried into sealed (a later
 * flush that succeeds proves nothing about these writes): failed, kept
 * with its lease until released, as after a mismatch. */
void zone_slot_flush_failed(ZoneDevice *d, uint32_t z, int r) {
        ZoneSlot *x = &d->slots[z];

        log_error_errno(r, "%s: zone %u: the flush after the seal failed, the data is not known to be on stable "
                        "media; the zone is failed, not sealed: %m", d->id, z);
        x->state = ZONE_STATE_FAILED;
        x->zone.cond = ZONE_COND_FULL;
        x->zone.wp = x->zone.start + x->zone.capacity;
        (void) free_and_strdup(&x->note, "the flush after the seal failed: not known to be on stable media");
}

void zone_slot_seal_mismatch(ZoneDevice *d, uint32_t z, const char *expected, const char *actual) {
        ZoneSlot *x = &d->slots[z];

        log_warning("%s: zone %u does not verify: expected %s, read back %s.", d->id, z, expected, actual);
        x->state = ZONE_STATE_FAILED;
        x->zone.cond = ZONE_COND_FULL;
        x->zone.wp = x->zone.start + x->zone.capacity;
        (void) free_and_strdup(&x->note, "checksum mismatch at seal");
}

typedef struct ReleaseOp {
        ZoneDevice *dev;
        uint32_t zone;
        ZoneDoneFn done;
        void *userdata;
} ReleaseOp;

/* The "releasing" record is durable: only now may the zone's data go. Until
 * then the zone stays sealed under its lease, in memory as on disk, so a
 * kill -9 at any point leaves a record that matches the device: sealed with
 * the data, or releasing (and the reset is done again at start). */
static void release_committed(int r, void *userdata) {
        _cleanup_free_ ReleaseOp *op = userdata;
        ZoneDevice *d = op->dev;
        uint32_t z = op->zone;
        ZoneSlot *x = &d->slots[z];

        x->releasing = false;
        if (r < 0) {
                log_warning_errno(r, "%s: zone %u: the release could not be made durable; the lease is kept: %m", d->id,
                                  z);
                return zone_done_io(op->done, op->userdata, r, "the release could not be made durable; the lease is kept");
        }
        test_kill_point("durable:io.blkmqd.Zones.Release");
        x->state = ZONE_STATE_RELEASING;
        x->lease = mfree(x->lease);
        x->label = mfree(x->label);
        x->owner_uid = ZONE_DB_UID_INVALID;
        x->scrub_usec = 0;
        sha256_done(&x->vsha); /* a job in flight drops its own */
        x->verified = 0;
        log_info("%s: zone %u released; reset queued.", d->id, z);
        zone_done(op->done, op->userdata, &(ZoneResult) { .ref = { d, z } });
        if (!d->service->freeing)
                zone_maybe_reset(d, false);
}

int zone_service_release(ZoneService *s, const char *lease, uid_t uid, ZoneDoneFn done, void *userdata) {
        ZoneResult res = {};
        ReleaseOp *op;
        ZoneRecord rec;
        ZoneDevice *d;
        uint32_t z;
        int r;

        if (!zone_lease_checks(s, lease, uid, &d, &z, &res)) {
                zone_done(done, userdata, &res);
                return 0;
        }
        op = calloc(1, sizeof *op);
        if (!op)
                return -ENOMEM;
        *op = (ReleaseOp) { .dev = d, .zone = z, .done = done, .userdata = userdata };
        rec = record_of(d, z);
        rec.state = (char *) zone_state_to_string(ZONE_STATE_RELEASING);
        rec.lease = NULL;
        rec.label = NULL;
        rec.owner_uid = ZONE_DB_UID_INVALID;
        d->slots[z].releasing = true;
        r = zone_db_put(s->db, &rec, release_committed, op);
        if (r < 0)
                release_committed(r, op);
        return 0;
}

/* ---- the service ---- */

void zone_alert(ZoneService *s, const char *event, const char *device, const char *detail) {
        if (s->alert_cb)
                s->alert_cb(event, device, detail, s->alert_userdata);
}

void zone_service_set_alert_cb(ZoneService *s, ZoneAlertFn cb, void *userdata) {
        if (!s)
                return;
        s->alert_cb = cb;
        s->alert_userdata = userdata;
}

void zone_service_scrub_stats(ZoneService *s, uint64_t *ret_checked, uint64_t *ret_errors, unsigned *ret_bad) {
        unsigned bad = 0;

        for (size_t i = 0; s && i < s->n_devs; i++)
                for (size_t k = 0; k < s->devs[i]->n; k++)
                        if (zone_device_is_object(s->devs[i], (uint32_t) k) && s->devs[i]->slots[k].scrub_usec &&
                            s->devs[i]->slots[k].scrub_result < 0)
                                bad++;
        *ret_checked = s ? s->scrubbed : 0;
        *ret_errors = s ? s->scrub_errors : 0;
        *ret_bad = bad;
}

/* The scrub looks every 10 s, or as often as the interval asks for, down
 * to 1 s. */
static uint64_t scrub_tick_usec(const ZoneService *s) {
        return MIN(SCRUB_TICK_USEC, MAX(s->config.scrub_interval_usec, 1000000ULL));
}

static int scrub_tick(sd_event_source *es, uint64_t usec, void *userdata) {
        ZoneService *s = userdata;

        (void) sd_event_source_set_time_relative(es, scrub_tick_usec(s));
        (void) sd_event_source_set_enabled(es, SD_EVENT_ONESHOT);
        if (!s->config.scrub_interval_usec || s->scrubbing || s->freeing)
                return 0;
        return zone_scrub_start(s);
}

void zone_scrub_again(ZoneService *s) {
        /* The next due object follows at once: a scrub that fell behind (a
         * long stop, many objects) catches up at its rate, not one object
         * per look. */
        if (s->scrub_timer && !s->stopping && !s->freeing &&
            sd_event_source_set_time_relative(s->scrub_timer, 0) >= 0)
                (void) sd_event_source_set_enabled(s->scrub_timer, SD_EVENT_ONESHOT);
}

void zone_service_stop(ZoneService *s) {
        if (s)
                s->stopping = true;
}

ZoneService *zone_service_free(ZoneService *s) {
        if (!s)
                return NULL;
        s->stopping = true;
        s->freeing = true;
        s->scrub_timer = sd_event_source_disable_unref(s->scrub_timer);
        s->verifier = work_pool_free(s->verifier); /* runs the outstanding callbacks */
        while (s->pending) {
                PendingAlloc *p = s->pending;
                s->pending = p->next;
                done_cancelled(p);
        }
        s->db = zone_db_free(s->db); /* runs the outstanding callbacks */
        for (size_t i = 0; i < s->n_devs; i++)
                zone_device_free(s->devs[i]);
        free(s->devs);
        free(s->config.emulate);
        free(s->config.database);
        sd_event_unref(s->event);
        free(s);
        return NULL;
}

void zone_service_reload(ZoneService *s, const ZonesConfig *c) {
        if (!streq_ptr(c->emulate, s->config.emulate) || !streq_ptr(c->database, s->config.database) ||
            c->zone_size != s->config.zone_size || c->zone_capacity != s->config.zone_capacity ||
            c->zone_count != s->config.zone_count || c->max_open != s->config.max_open ||
            c->max_active != s->config.max_active)
                log_warning("[Zones] Emulate=, Database= and the emulated geometry take effect on restart only.");
        s->config.reset_batch = c->reset_batch;
        s->config.append_chunk = c->append_chunk;
        s->config.append_depth = c->append_depth;
        s->config.verify_while_writing = c->verify_while_writing;
        s->config.unique_labels = c->unique_labels;
        s->config.scrub_interval_usec = c->scrub_interval_usec;
        s->config.scrub_rate = c->scrub_rate;
        /* A shorter interval is looked at from now, not after the old tick. */
        if (s->scrub_timer)
                (void) sd_event_source_set_time_relative(s->scrub_timer, scrub_tick_usec(s));
}

int zone_service_new(ZoneService **ret, sd_event *e, const ZonesConfig *config, UringPool *uring, WorkPool *work) {
        ZoneService *s = calloc(1, sizeof *s);
        int r;

        if (!s)
                return -ENOMEM;
        s->event = sd_event_ref(e);
        s->config = *config;
        s->config.emulate = config->emulate ? strdup(config->emulate) : NULL;
        s->config.database = config->database ? strdup(config->database) : NULL;
        s->uring = uring;
        s->work = work;
        s->start_usec = now_usec(CLOCK_REALTIME);
        r = sd_event_add_time_relative(e, &s->scrub_timer, CLOCK_MONOTONIC, scrub_tick_usec(s), 0, scrub_tick, s);
        if (r < 0) {
                zone_service_free(s);
                return r;
        }
        /* One thread, at idle priority: verification lags behind the
         * appends rather than take CPU time from them. */
        r = work_pool_new_flags(&s->verifier, e, 1, WORK_POOL_IDLE);
        if (r < 0) {
                zone_service_free(s);
                return r;
        }
        if (!s->config.database || (config->emulate && !s->config.emulate)) {
                zone_service_free(s);
                return -ENOMEM;
        }
        r = zone_db_open(&s->db, e, s->config.database);
        if (r < 0) {
                log_error_errno(r, "Failed to open the zone records %s: %m", s->config.database);
                zone_service_free(s);
                return r;
        }
        if (s->config.emulate) {
                Zbd *z = NULL;
                _cleanup_free_ char *id = NULL;
                ZbdEmuConfig ec = {
                        .zone_size = s->config.zone_size,
                        .zone_capacity = s->config.zone_capacity ? s->config.zone_capacity : s->config.zone_size,
                        .nr_zones = s->config.zone_count,
                        .max_open = s->config.max_open,
                        .max_active = s->config.max_active,
                };
                r = zbd_emu_open_config(s->config.emulate, &ec, &z);
                if (r < 0) {
                        log_error_errno(r, "Failed to emulate zones over %s: %m", s->config.emulate);
                        zone_service_free(s);
                        return r;
                }
                if (asprintf(&id, "emu:%s", s->config.emulate) < 0) {
                        zbd_free(z);
                        zone_service_free(s);
                        return -ENOMEM;
                }
                r = zone_device_add(s, id, NULL, "emulated", z);
                if (r < 0) {
                        zone_service_free(s);
                        return r;
                }
        }
        *ret = s;
        return 0;
}
