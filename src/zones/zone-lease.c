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
#include "test-hooks.h"
#include "util.h"
#include "zone-service-internal.h"
#include "zone-service-device.h"
#include "zone-state.h"
#include "zone-scrub.h"
#include "zone-service.h"
#include "zones.h"

/* The zone service's top: its life (new, reload, stop, free), the leases
 * handed out (Allocate, and the allocations waiting for resets) and given
 * back (Release). The files below it (zone-service-internal.h lists them)
 * never call it: the device's resets tell it through zones_freed. */

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

        zone_done_error(alloc_done, p, &res, ZONE_ERROR_CANCELLED);
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
        return zone_record_allocation(d, z, &res, "durable:io.blkmqd.Zones.Allocate", alloc_done, req);
}

/* Why no device could lease a zone, in the order the caller is told. */
static void allocate_refused(ZoneService *s, PendingAlloc *req, uint64_t cap, const ZoneDevice *limited) {
        ZoneResult res = {};
        const ZoneDevice *named = zone_find_dev(s, req->device);

        if (cap && req->size > cap) {
                res.size = req->size;
                res.capacity = cap;
                return zone_done_error(alloc_done, req, &res, ZONE_ERROR_TOO_LARGE);
        }
        if (limited) {
                res.name = limited->id;
                res.max_active = limited->zbd ? limited->zbd->limits.max_active : 0;
                return zone_done_error(alloc_done, req, &res, ZONE_ERROR_ZONE_LIMIT_REACHED);
        }
        if (named && !zone_device_present(named)) {
                res.name = named->id;
                return zone_done_error(alloc_done, req, &res, ZONE_ERROR_DEVICE_GONE);
        }
        res.name = req->device;
        zone_done_error(alloc_done, req, &res, ZONE_ERROR_NO_FREE_ZONE);
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
                zone_done_error(alloc_done, req, &res, ZONE_ERROR_NO_SUCH_DEVICE);
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
                zone_done_error(alloc_done, req, &res, ZONE_ERROR_ZONE_LIMIT_REACHED);
                return 0;
        }
        if (dup && !waiting && !limited) {
                res.label = req->label;
                res.lease = dup->slots[dup_zone].lease;
                zone_done_error(alloc_done, req, &res, ZONE_ERROR_LABEL_EXISTS);
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
        rec = zone_record_of(d, z);
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
        zone_scrub_timer_reset(s);
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
        s->zones_freed = retry_pending;
        r = zone_scrub_timer_add(s);
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
