/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "log.h"
#include "util.h"
#include "zone-read-pool.h"
#include "zone-read.h"
#include "zone-service-device.h"
#include "zone-service-internal.h"
#include "zone-service.h"
#include "zone-state.h"

/* Sealed objects: found by lease or label, Read into a client's
 * descriptor (zone-read.c), Verify'd through the io_uring pool
 * (zone-read-pool.c). */

typedef struct ObjectBatch ObjectBatch;

/* A Verify call: its objects read BATCH_RUNNING at a time. */
#define BATCH_RUNNING 2U

struct ObjectBatch {
        ZoneDoneFn done;
        void *userdata;
        unsigned running;
        bool pumping;
        bool idle;  /* idle I/O priority */
        size_t n, next;
        ZoneRef *zones;
};

/* Sealed objects labelled label, on only (if given): how many, and the first. */
static size_t objects_labelled(ZoneService *s, const char *label, const ZoneDevice *only, ZoneDevice **ret_d,
                               uint32_t *ret_z) {
        size_t n = 0;

        for (size_t i = 0; i < s->n_devs; i++) {
                ZoneDevice *d = s->devs[i];
                if (only && d != only)
                        continue;
                for (size_t k = 0; k < d->n; k++)
                        if (zone_device_is_object(d, (uint32_t) k) && streq_ptr(d->slots[k].label, label) &&
                            n++ == 0) {
                                *ret_d = d;
                                *ret_z = (uint32_t) k;
                        }
        }
        return n;
}

static int zone_object_lookup(ZoneService *s, const ZoneObjectRef *ref, bool check_peer, uid_t uid, ZoneResult *res) {
        ZoneDevice *d = NULL, *only = NULL;
        uint32_t z = 0;

        if (ref->lease && ref->label) {
                res->parameter = "label";
                return zone_result_error(res, ZONE_ERROR_INVALID_PARAMETER), 0;
        }
        if (ref->lease) {
                d = zone_find_lease(s, ref->lease, &z);
                res->lease = ref->lease;
                if (!d)
                        return zone_result_error(res, ZONE_ERROR_LEASE_NOT_FOUND), 0;
                if (!zone_device_is_object(d, z)) {
                        res->state = zone_state_to_string(d->slots[z].state);
                        return zone_result_error(res, ZONE_ERROR_WRONG_STATE), 0;
                }
        } else if (ref->label) {
                size_t n;
                if (ref->device && !(only = zone_find_dev(s, ref->device))) {
                        res->name = ref->device;
                        return zone_result_error(res, ZONE_ERROR_NO_SUCH_DEVICE), 0;
                }
                n = objects_labelled(s, ref->label, only, &d, &z);
                res->label = ref->label;
                if (n == 0)
                        return zone_result_error(res, ZONE_ERROR_LABEL_NOT_FOUND), 0;
                if (n > 1) {
                        res->count = (unsigned) n;
                        return zone_result_error(res, ZONE_ERROR_LABEL_NOT_UNIQUE), 0;
                }
        } else {
                res->parameter = "lease";
                return zone_result_error(res, ZONE_ERROR_INVALID_PARAMETER), 0;
        }
        if (check_peer && !zone_uid_may(uid, &d->slots[z]))
                return zone_result_error(res, ZONE_ERROR_PERMISSION_DENIED), 0;
        if (!zone_device_present(d)) {
                res->name = d->id;
                return zone_result_error(res, ZONE_ERROR_DEVICE_GONE), 0;
        }
        *res = (ZoneResult) { .ref = { d, z } };
        return 1;
}

void zone_service_find_object(ZoneService *s, const ZoneObjectRef *ref, ZoneResult *res) {
        *res = (ZoneResult) {};
        (void) zone_object_lookup(s, ref, false, 0, res);
}

static void batch_finish(ObjectBatch *b) {
        ZoneResult res = { .objects = b->zones };

        /* Those read, and still objects once read. */
        for (size_t i = 0; i < b->n; i++)
                if (b->zones[i].zone != UINT32_MAX && zone_device_is_object(b->zones[i].dev, b->zones[i].zone))
                        b->zones[res.n_objects++] = b->zones[i];
        zone_done(b->done, b->userdata, &res);
        free(b->zones);
        free(b);
}

static void batch_pump(ObjectBatch *b);

/* One of the batch's reads ended (after the job is freed): the next. */
static void batch_read_end(void *userdata, int r) {
        ObjectBatch *b = userdata;

        b->running--;
        if (!b->pumping)
                batch_pump(b);
}

/* Starts the batch's next objects, BATCH_RUNNING at a time, and answers
 * once every one was read. */
static void batch_pump(ObjectBatch *b) {
        b->pumping = true;
        while (b->running < BATCH_RUNNING && b->next < b->n) {
                ZoneRef *ref = &b->zones[b->next++];
                ZoneDevice *d = (ZoneDevice *) ref->dev;
                ReadJob *j;

                if (!zone_device_present(d) || !zone_device_is_object(d, ref->zone) ||
                    !(j = zone_read_job_new(d, ref->zone))) {
                        ref->zone = UINT32_MAX; /* released or gone since the call: not in the answer */
                        continue;
                }
                j->end = batch_read_end;
                j->end_data = b;
                b->running++;
                if (zone_read_pool_start(j, d->service->work, b->idle ? URING_IOPRIO_IDLE : 0, 0) < 0) {
                        b->running--;
                        free(j);
                        ref->zone = UINT32_MAX;
                }
        }
        b->pumping = false;
        if (b->running == 0 && b->next == b->n)
                batch_finish(b);
}

int zone_service_read(ZoneService *s, const ZoneObjectRef *ref, uid_t uid, int fd, ZoneProgressFn progress,
                      ZoneDoneFn done, void *userdata, ZoneOp **ret_op) {
        _cleanup_close_ int fd_close = fd;
        ZoneResult res = {};
        ReadJob *j;
        ZoneDevice *d;
        int r;

        if (ret_op)
                *ret_op = NULL;
        if (!zone_object_lookup(s, ref, true, uid, &res))
                return zone_done(done, userdata, &res), 0;
        d = (ZoneDevice *) res.ref.dev;
        j = zone_read_job_new(d, res.ref.zone);
        if (!j)
                return -ENOMEM;
        j->fd = TAKE_FD(fd_close);
        j->done = done;
        j->progress = progress;
        j->userdata = userdata;
        r = zone_read_submit(j, s->work);
        if (r < 0) {
                sd_event_source_disable_unref(j->tick);
                close(j->fd);
                free(j);
                zone_done_io(done, userdata, r, "starting the read");
                return 0;
        }
        if (ret_op)
                *ret_op = &j->zop;
        return 0;
}

int zone_service_verify(ZoneService *s, const ZoneObjectRef *ref, const char *device, bool idle, ZoneDoneFn done,
                        void *userdata) {
        ZoneResult res = {};
        const ZoneDevice *only = NULL, *d1 = NULL;
        ObjectBatch *b;
        uint32_t z1 = 0;

        if (ref) {
                if (!zone_object_lookup(s, ref, false, 0, &res))
                        return zone_done(done, userdata, &res), 0;
                d1 = res.ref.dev;
                z1 = res.ref.zone;
        } else if (device && !(only = zone_find_dev(s, device))) {
                res.name = device;
                return zone_done_error(done, userdata, &res, ZONE_ERROR_NO_SUCH_DEVICE), 0;
        }
        b = calloc(1, sizeof *b);
        if (!b)
                return -ENOMEM;
        b->done = done;
        b->userdata = userdata;
        b->idle = idle;
        for (size_t i = 0; i < s->n_devs; i++) {
                ZoneDevice *d = s->devs[i];
                if ((ref && d != d1) || (only && d != only) || !zone_device_present(d))
                        continue;
                for (size_t k = 0; k < d->n; k++) {
                        if ((ref && k != z1) || !zone_device_is_object(d, (uint32_t) k))
                                continue;
                        void *t = realloc(b->zones, sizeof *b->zones * (b->n + 1));
                        if (!t) {
                                free(b->zones);
                                free(b);
                                return -ENOMEM;
                        }
                        b->zones = t;
                        b->zones[b->n++] = (ZoneRef) { d, (uint32_t) k };
                }
        }
        batch_pump(b);
        return 0;
}
