/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "message-id.h"
#include "sha256.h"
#include "test-hooks.h"
#include "util.h"
#include "zone-service-internal.h"
#include "zone-service.h"
#include "zone-state.h"
#include "zones.h"

/* The zones' lease state as the engines share it: results and their
 * errors, the records, looking devices and leases up, and the state
 * transitions. Every change of a zone's lease state is made here or in
 * zone-lease.c (allocation, release) and zone-service-device.c
 * (reconcile, resets); the engines (zone-append.c, zone-seal-read.c) ask for
 * theirs through the zone_slot_*() transitions. It calls no other file of
 * the folder. */

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
        [ZONE_ERROR_NOT_REPAIRABLE] = { "io.blkmqd.Zones.NotRepairable", EBUSY },
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

void zone_done_error(ZoneDoneFn done, void *userdata, ZoneResult *res, ZoneError e) {
        zone_result_error(res, e);
        zone_done(done, userdata, res);
}

void zone_op_cancel(ZoneOp *op) {
        if (op && op->cancel)
                op->cancel(op);
}


/* An allocation whose record could not be made durable: nobody holds
 * the lease (its caller got IOError). */
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

/* A seal whose record could not be made durable (its caller got
 * IOError): the record may or may not have reached the media, so this
 * instance must not serve the zone as sealed (a restart may find it
 * sealed, or reclaim it). Failed, with its lease, until released or a
 * restart reads what the disk kept. */
static void undo_seal(ZoneDevice *d, uint32_t z) {
        ZoneSlot *x = &d->slots[z];

        if (x->state != ZONE_STATE_SEALED)
                return;
        log_error("%s: zone %u: the seal could not be recorded; the zone is failed until released or blkmqd "
                  "restarts (the record may have reached the disk).", d->id, z);
        x->state = ZONE_STATE_FAILED;
        (void) free_and_strdup(&x->note, "the seal's record could not be made durable: sealed or not is known at "
                                         "the next start");
}

/* ---- records ---- */

typedef struct PutDone {
        ZoneDoneFn done; /* called once durable, or NULL */
        void *userdata;
        ZoneResult res;
        const char *kill_point;
        char lease[37], expected[65], actual[65];
        /* An allocation whose record did not become durable is undone: the
         * caller got IOError, so nobody holds the lease; a seal's is in
         * doubt (undo_seal()). */
        ZoneDevice *undo_dev;
        uint32_t undo_zone;
        bool undo_is_seal;
} PutDone;


static void put_done(int r, void *userdata) {
        _cleanup_free_ PutDone *p = userdata;

        if (p->done) {
                /* Crash tests: "durable:io.blkmqd.Zones.Seal" dies with the
                 * record on disk and the reply not sent. */
                test_kill_point(p->kill_point);
                if (r < 0 && p->undo_dev && p->undo_is_seal)
                        undo_seal(p->undo_dev, p->undo_zone);
                else if (r < 0 && p->undo_dev)
                        undo_allocation(p->undo_dev, p->undo_zone);
                if (r < 0)
                        zone_done_io(p->done, p->userdata, r, "the zone record could not be made durable");
                else
                        zone_done(p->done, p->userdata, &p->res);
        } else if (r < 0)
                log_warning_errno(r, "Failed to record a zone state: %m");
}

/* The record of zone i as the slot holds it now. Borrows the strings. */
ZoneRecord zone_record_of(const ZoneDevice *d, uint32_t i) {
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

typedef enum Undo { UNDO_NONE, UNDO_ALLOCATION, UNDO_SEAL } Undo;

static int record_full(ZoneDevice *d, uint32_t i, const ZoneResult *res, const char *kill_point, ZoneDoneFn done,
                       void *userdata, Undo undo) {
        ZoneRecord rec = zone_record_of(d, i);
        PutDone *p = calloc(1, sizeof *p);
        int r;

        if (!p) {
                if (undo == UNDO_ALLOCATION)
                        undo_allocation(d, i);
                else if (undo == UNDO_SEAL)
                        undo_seal(d, i);
                return -ENOMEM;
        }
        if (undo != UNDO_NONE) {
                p->undo_dev = d;
                p->undo_zone = i;
                p->undo_is_seal = undo == UNDO_SEAL;
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
        return record_full(d, i, NULL, NULL, NULL, NULL, UNDO_NONE);
}

int zone_record_then(ZoneDevice *d, uint32_t i, const ZoneResult *res, const char *kill_point, ZoneDoneFn done,
                     void *userdata) {
        return record_full(d, i, res, kill_point, done, userdata, UNDO_NONE);
}

int zone_record_seal(ZoneDevice *d, uint32_t i, const ZoneResult *res, const char *kill_point, ZoneDoneFn done,
                     void *userdata) {
        return record_full(d, i, res, kill_point, done, userdata, UNDO_SEAL);
}

int zone_record_allocation(ZoneDevice *d, uint32_t i, const ZoneResult *res, const char *kill_point, ZoneDoneFn done,
                           void *userdata) {
        return record_full(d, i, res, kill_point, done, userdata, UNDO_ALLOCATION);
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

void zone_slot_sealed(ZoneDevice *d, uint32_t z, const char *sha256, uint64_t verified, uint64_t flush_usec) {
        ZoneSlot *x = &d->slots[z];

        x->state = ZONE_STATE_SEALED;
        x->zone.cond = ZONE_COND_FULL;
        x->zone.wp = x->zone.start + x->zone.capacity;
        (void) free_and_strdup(&x->sha256, sha256);
        x->sealed_usec = now_usec(CLOCK_REALTIME);
        log_info("%s: zone %u sealed, %llu bytes (%llu of them verified while written), sha256 %s; %s %llu µs.",
                 d->id, z, (unsigned long long) x->bytes_written, (unsigned long long) verified, sha256,
                 d->zbd && d->zbd->write_back ? "write cache flushed in" : "no volatile write cache, no flush:",
                 (unsigned long long) flush_usec);
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

        char zs[16];
        snprintf(zs, sizeof zs, "%u", z);
        log_struct(LOG_WARNING, BLKMQD_MESSAGE_ZONE_FAILED,
                   LOG_FIELDS({ "BLKMQD_DEVICE", d->id }, { "BLKMQD_ZONE", zs }, { "BLKMQD_LEASE", x->lease },
                              { "BLKMQD_LABEL", x->label }, { "BLKMQD_SHA256", expected }, { "BLKMQD_SHA256_READ", actual }),
                   "%s: zone %u does not verify: expected %s, read back %s.", d->id, z, expected, actual);
        x->state = ZONE_STATE_FAILED;
        x->zone.cond = ZONE_COND_FULL;
        x->zone.wp = x->zone.start + x->zone.capacity;
        (void) free_and_strdup(&x->note, "checksum mismatch at seal");
}

void zone_alert(ZoneService *s, const char *event, const char *device, const char *detail) {
        if (s->alert_cb)
                s->alert_cb(event, device, detail, s->alert_userdata);
}

void zone_verify_forget(ZoneSlot *x) {
        sha256_done(&x->vsha);
        x->verified = 0;
}
