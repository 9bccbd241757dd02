/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "conf.h"
#include "zone-service-types.h"
#include "zones.h"

/* The zone service: devices, their zones, the leases on them and the
 * objects sealed in them. State lives here, on the loop thread, and only
 * here is it written (this interface is implemented by the files listed in
 * zone-service-internal.h, one per responsibility); choices come from zones.c, records go to zone-db.c, data
 * to the io_uring pool, blocking zone management and verification reads to
 * the work pool. It knows no wire: zones-varlink.c decodes io.blkmqd.Zones
 * calls into the requests below and encodes their results.
 *
 * An operation takes the caller's uid (the owner of a new lease; only the
 * owner or root may use one) and a completion callback, called exactly once
 * unless the start function itself fails (-ENOMEM: then never), maybe before
 * the start function returns. */

int zone_service_new(ZoneService **ret, sd_event *e, const ZonesConfig *config, struct UringPool *uring,
                     struct WorkPool *work);
/* Before the pools it was given go: starts no new read or hash job (the
 * Verify and scrub reads in flight end as cancelled once back). */
void zone_service_stop(ZoneService *s);
ZoneService *zone_service_free(ZoneService *s);
/* Takes the [Zones] keys that apply at once (ResetBatch=, AppendChunkKB=,
 * AppendDepth=: the next Append); the others wait for a restart, said in
 * the log. */
void zone_service_reload(ZoneService *s, const ZonesConfig *c);
/* A zoned kernel device a [Device] section offered (ZoneAllocator=yes);
 * found again by identity after a re-plug. */
int zone_service_add_kernel(ZoneService *s, const char *id, const char *sysname, const char *devnode,
                            const char *blockdir);
/* sysname's device went away (NULL: the emulated device, which has none):
 * its records stay, operations on it fail, it is found again by identity. */
void zone_service_device_gone(ZoneService *s, const char *sysname);
/* Objects the scrub (and Read, Verify) checked since start, mismatches and
 * read errors found, and sealed objects whose last check failed now. */
void zone_service_scrub_stats(ZoneService *s, uint64_t *ret_checked, uint64_t *ret_errors, unsigned *ret_bad);
/* cb: see ZoneAlertFn. */
void zone_service_set_alert_cb(ZoneService *s, ZoneAlertFn cb, void *userdata);

/* ---- reading the state ---- */

/* The i-th device, NULL past the last. */
const ZoneDevice *zone_service_device_at(const ZoneService *s, size_t i);
/* By deviceId, sysname, /dev/sysname, or an emulation's path. */
const ZoneDevice *zone_service_find_device(const ZoneService *s, const char *name);
const ZoneDevice *zone_service_find_lease(const ZoneService *s, const char *lease, uint32_t *ret_zone);
void zone_device_get_info(const ZoneDevice *d, ZoneDeviceInfo *ret);
/* Its zones in each state, and the sealed objects whose last check failed. */
void zone_device_count(const ZoneDevice *d, unsigned ret_counts[_ZONE_STATE_MAX], unsigned *ret_damaged);
/* Its sealed objects, and those of them the scrub has not checked within
 * ScrubIntervalSec= (the rest of its pass; 0 while the scrub is off). */
void zone_service_scrub_progress(const ZoneService *s, const ZoneDevice *d, unsigned *ret_objects,
                                 unsigned *ret_due);
/* A sealed zone with its lease and SHA-256: an object. */
bool zone_device_is_object(const ZoneDevice *d, uint32_t zone);

/* ---- operations ---- */

/* A new lease on a free zone, once its record is durable. With no zone
 * free but some being reset, it waits for them: *ret_op is then set (else
 * NULL). */
int zone_service_allocate(ZoneService *s, const ZoneAllocRequest *req, uid_t uid, ZoneDoneFn done, void *userdata,
                          ZoneOp **ret_op);

/* Appends the data to the lease's zone; progress (may be NULL) every 4 MiB.
 * *ret_op is set while it runs (NULL if it ended at once). */
int zone_service_append(ZoneService *s, const ZoneAppendRequest *req, uid_t uid, ZoneProgressFn progress,
                        ZoneDoneFn done, void *userdata, ZoneOp **ret_op);
/* Writes out the last partial block, reads the zone back and seals it if
 * the data's SHA-256 is sha256 (64 hex digits). */
int zone_service_seal(ZoneService *s, const char *lease, const char *sha256, uid_t uid, ZoneDoneFn done,
                      void *userdata);
/* Lets the lease go once that is durable; the zone is reset later. */
int zone_service_release(ZoneService *s, const char *lease, uid_t uid, ZoneDoneFn done, void *userdata);

/* Puts failed zones without a lease back into use: zone (or, when zone
 * is negative, every failed zone of device without a lease) is reset,
 * the write cache flushed, and only then recorded free; a zone whose
 * reset or flush fails stays failed. done gets the zones as they ended
 * (.objects, .n_objects; none when nothing was to repair). */
int zone_service_repair(ZoneService *s, const char *device, int64_t zone, ZoneDoneFn done, void *userdata);

/* Looks an object up now: fills res (res->ref, or res->error). */
void zone_service_find_object(ZoneService *s, const ZoneObjectRef *ref, ZoneResult *res);
/* Reads the object into fd (taken, always), checking its SHA-256; only its
 * owner or root may. Progress (may be NULL) every 250 ms; *ret_op is set
 * while it runs. */
int zone_service_read(ZoneService *s, const ZoneObjectRef *ref, uid_t uid, int fd, ZoneProgressFn progress,
                      ZoneDoneFn done, void *userdata, ZoneOp **ret_op);
/* Reads back one object (ref), or every object (on device, if given), and
 * checks each against its SHA-256: at idle I/O priority (as the scrub;
 * on an idle disk as fast as the default), or with idle false at the
 * default priority, before the workload's own I/O. Unpaced. */
int zone_service_verify(ZoneService *s, const ZoneObjectRef *ref, const char *device, bool idle, ZoneDoneFn done,
                        void *userdata);
