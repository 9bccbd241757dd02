/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <systemd/sd-event.h>

#include "conf.h"
#include "varlink.h"

/* The zone allocator service and its varlink interface io.blkmqd.Zones.
 * State (devices, zones, leases) lives here, on the loop thread; choices
 * come from zones.c, records go to zone-db.c, data to the io_uring pool,
 * blocking zone management and verification reads to the work pool. */

typedef struct ZoneService ZoneService;
struct UringPool;
struct WorkPool;

int zone_service_new(ZoneService **ret, sd_event *e, const ZonesConfig *config, struct UringPool *uring,
                     struct WorkPool *work, VarlinkServer *server);
ZoneService *zone_service_free(ZoneService *s);
/* Objects the scrub (and Read, Verify) checked since start, mismatches and
 * read errors found, and sealed objects whose last check failed now. */
void zone_service_scrub_stats(ZoneService *s, uint64_t *ret_checked, uint64_t *ret_errors, unsigned *ret_bad);
/* Takes the [Zones] keys that apply at once (ResetBatch=, AppendChunkKB=,
 * AppendDepth=: the next Append); the others wait for a restart, said in
 * the log. */
void zone_service_reload(ZoneService *s, const ZonesConfig *c);
/* A zoned kernel device a [Device] section offered (ZoneAllocator=yes);
 * found again by identity after a re-plug. */
int zone_service_add_kernel(ZoneService *s, const char *id, const char *sysname, const char *devnode,
                            const char *blockdir);
void zone_service_device_gone(ZoneService *s, const char *sysname);
/* Called when a check (scrub, Verify, Read) finds a sealed object damaged
 * (event "objectDamaged": a SHA-256 mismatch or a read error) and when one
 * found damaged reads back to its SHA-256 again ("objectIntact"); once per
 * episode, as the error line in the log. device is the deviceId, detail a
 * sentence. NULL cb: none. */
typedef void (*zone_alert_cb_t)(const char *event, const char *device, const char *detail, void *userdata);
void zone_service_set_alert_cb(ZoneService *s, zone_alert_cb_t cb, void *userdata);
