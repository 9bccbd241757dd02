/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* zone-state.c: the zones' lease state as the service's files share it.
 * The lowest file of the service: it calls no other. */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "zone-db.h"
#include "zone-service-internal.h"

/* ---- results ---- */

/* Fills res as error e (its errno too); the details are the caller's. */
void zone_result_error(ZoneResult *res, ZoneError e);
void zone_result_io(ZoneResult *res, int r, const char *what);
void zone_done(ZoneDoneFn done, void *userdata, const ZoneResult *res);
/* Calls done with res as error e. */
void zone_done_error(ZoneDoneFn done, void *userdata, ZoneResult *res, ZoneError e);
/* Calls done with ZONE_ERROR_IO (r, what). */
void zone_done_io(ZoneDoneFn done, void *userdata, int r, const char *what);

/* ---- records ---- */

/* The record of zone i as the slot holds it now (borrows its strings). */
ZoneRecord zone_record_of(const ZoneDevice *d, uint32_t i);
/* Records zone i as the slot holds it now, in the background. */
int zone_record(ZoneDevice *d, uint32_t i);
/* Records zone i and then calls done with res (or with an IOError if the
 * record cannot be made durable); kill_point names the test kill point
 * ("durable:..."). Copies res's strings. */
int zone_record_then(ZoneDevice *d, uint32_t i, const ZoneResult *res, const char *kill_point, ZoneDoneFn done,
                     void *userdata);
/* The same for a zone just sealed: if its record cannot be made durable,
 * the zone is failed (in doubt) rather than served as sealed. */
int zone_record_seal(ZoneDevice *d, uint32_t i, const ZoneResult *res, const char *kill_point, ZoneDoneFn done,
                     void *userdata);
/* The same for a new lease: if its record cannot be made durable, the
 * allocation is undone (the zone stays free) before done hears of it. */
int zone_record_allocation(ZoneDevice *d, uint32_t i, const ZoneResult *res, const char *kill_point, ZoneDoneFn done,
                           void *userdata);

/* ---- looking up ---- */

ZoneDevice *zone_find_dev(const ZoneService *s, const char *name);
ZoneDevice *zone_find_lease(const ZoneService *s, const char *lease, uint32_t *ret_zone);
bool zone_device_present(const ZoneDevice *d);
/* The lease's zone if uid may use it now (Append, Seal, Release); 1 with
 * *ret_d and *ret_z, or 0 with res set to the error. */
int zone_lease_checks(ZoneService *s, const char *lease, uid_t uid, ZoneDevice **ret_d, uint32_t *ret_z,
                      ZoneResult *res);
void zone_alert(ZoneService *s, const char *event, const char *device, const char *detail);

/* ---- the state transitions the engines ask for ---- */

void zone_slot_begin_writing(ZoneDevice *d, uint32_t z);
/* An append ended: with r < 0 the zone holds only what reached the device;
 * else appended more bytes, and tail (taken) is the partial last block. */
void zone_slot_appended(ZoneDevice *d, uint32_t z, int r, uint64_t appended, uint8_t *tail, uint32_t tail_len);
/* flush_usec: how long the flush of the write cache before it took. */
void zone_slot_sealed(ZoneDevice *d, uint32_t z, const char *sha256, uint64_t verified, uint64_t flush_usec);
void zone_slot_seal_mismatch(ZoneDevice *d, uint32_t z, const char *expected, const char *actual);
/* The seal's flush failed with r: the zone is failed. */
void zone_slot_flush_failed(ZoneDevice *d, uint32_t z, int r);
/* Drops what the verification behind the appends had hashed
 * (zone-verify.c): the seal reads the whole zone back. */
void zone_verify_forget(ZoneSlot *x);
