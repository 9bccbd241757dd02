/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Inside the zone service: shared by zone-service.c (devices, leases, the
 * state transitions, records), zone-append.c (the append engine) and
 * zone-verify.c (verification, seal, read-back, Verify, scrub). Nothing
 * else includes it. */

#include "uring-pool.h"
#include "work-pool.h"
#include "zbd.h"
#include "zone-db.h"
#include "conf.h"
#include "zone-service-types.h"

struct ZoneDevice {
        ZoneService *service;
        char *id;
        char *sysname; /* NULL while gone */
        const char *backend;
        Zbd *zbd;
        ZoneSlot *slots;
        size_t n;
        bool resetting;
        bool gone;      /* removed; zbd is dropped once in-flight operations end */
        char *readd[3]; /* sysname, devnode, blockdir of a re-plug that came while busy */
};

typedef struct PendingAlloc PendingAlloc;

struct ZoneService {
        sd_event *event;
        ZonesConfig config;
        UringPool *uring;
        WorkPool *work;
        WorkPool *verifier; /* SCHED_IDLE: verification behind the appends */
        bool freeing;
        bool stopping;  /* zone_service_stop(): no new reads or hash jobs */
        ZoneDb *db;
        ZoneDevice **devs;
        size_t n_devs;
        PendingAlloc *pending;
        sd_event_source *scrub_timer;
        bool scrubbing;           /* one scrub read at a time */
        uint64_t start_usec;      /* CLOCK_REALTIME at start: scrub ages count from here at most */
        uint64_t scrubbed, scrub_errors; /* objects checked, mismatches and read errors found */
        ZoneAlertFn alert_cb;
        void *alert_userdata;
};

/* Every cancellable operation starts with one. */
struct ZoneOp {
        void (*cancel)(ZoneOp *op);
};

typedef struct SealJob SealJob;

/* Only a lease's owner or root may use it. */
static inline bool zone_uid_may(uid_t uid, const ZoneSlot *x) {
        return uid == 0 || uid == x->owner_uid;
}

/* ---- zone-service.c ---- */

/* Fills res as error e (its errno too); the details are the caller's. */
void zone_result_error(ZoneResult *res, ZoneError e);
void zone_result_io(ZoneResult *res, int r, const char *what);
/* Calls done with res, or with ZONE_ERROR_IO (r, what). */
void zone_done_io(ZoneDoneFn done, void *userdata, int r, const char *what);
void zone_done(ZoneDoneFn done, void *userdata, const ZoneResult *res);

/* Records zone i as the slot holds it now, in the background. */
int zone_record(ZoneDevice *d, uint32_t i);
/* Records zone i and then calls done with res (or with an IOError if the
 * record cannot be made durable); kill_point names the test kill point
 * ("durable:..."). Copies res's strings. */
int zone_record_then(ZoneDevice *d, uint32_t i, const ZoneResult *res, const char *kill_point, ZoneDoneFn done,
                     void *userdata);

ZoneDevice *zone_find_dev(const ZoneService *s, const char *name);
ZoneDevice *zone_find_lease(const ZoneService *s, const char *lease, uint32_t *ret_zone);
/* Resets the released zones of d when zone_resets_due() says so. */
void zone_maybe_reset(ZoneDevice *d, bool starved);
void zone_alert(ZoneService *s, const char *event, const char *device, const char *detail);
/* The lease's zone if uid may use it now (Append, Seal, Release); 1 with
 * *ret_d and *ret_z, or 0 with res set to the error. */
int zone_lease_checks(ZoneService *s, const char *lease, uid_t uid, ZoneDevice **ret_d, uint32_t *ret_z,
                      ZoneResult *res);

/* The state transitions the engines ask for. */
void zone_slot_begin_writing(ZoneDevice *d, uint32_t z);
/* An append ended: with r < 0 the zone holds only what reached the device;
 * else appended more bytes, and tail (taken) is the partial last block. */
void zone_slot_appended(ZoneDevice *d, uint32_t z, int r, uint64_t appended, uint8_t *tail, uint32_t tail_len);
void zone_slot_sealed(ZoneDevice *d, uint32_t z, const char *sha256, uint64_t verified);
void zone_slot_seal_mismatch(ZoneDevice *d, uint32_t z, const char *expected, const char *actual);
/* The seal's flush failed with r: the zone is failed. */
void zone_slot_flush_failed(ZoneDevice *d, uint32_t z, int r);

/* ---- zone-service-device.c ---- */

/* Adds (or re-attaches) device id on backend zbd (taken), reconciling its
 * zone report with its records. */
int zone_device_add(ZoneService *s, const char *id, const char *sysname, const char *backend, Zbd *zbd);
void zone_device_free(ZoneDevice *d);
bool zone_device_present(const ZoneDevice *d);
/* A device that went away lets go of its backend once nothing runs on it,
 * and takes a re-plug that arrived meanwhile. */
void zone_device_settle(ZoneDevice *d);

/* ---- zone-append.c ---- */

/* Writes out the zone's partial last block, padded, then goes on with the
 * seal (zone_seal_submit(), or zone_seal_fail()). */
void zone_append_flush(ZoneDevice *d, uint32_t z, SealJob *j);

/* ---- zone-verify.c ---- */

/* Starts a verification job if enough has landed and none runs. */
void zone_verify_kick(ZoneDevice *d, uint32_t z);
void zone_verify_forget(ZoneSlot *x);
void zone_seal_submit(SealJob *j);
void zone_seal_fail(SealJob *j, int r, const char *what);
/* The sealed object ref names: 1 with res->ref, or 0 with the error in res.
 * With check_peer, only its owner (uid) or root may. */
int zone_object_lookup(ZoneService *s, const ZoneObjectRef *ref, bool check_peer, uid_t uid, ZoneResult *res);
/* Scrubs the sealed object checked longest ago, if one is due. */
int zone_scrub_start(ZoneService *s);
/* After a scrub ended: looks for the next due object now. */
void zone_scrub_again(ZoneService *s);
