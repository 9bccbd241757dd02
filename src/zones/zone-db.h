/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <systemd/sd-event.h>

#include "zone-db-schema.h" /* ZONE_DB_SCHEMA_VERSION */

/* The SQLite store of zone records: who owns which zone, in which state.
 *
 * Threads. All functions are called on the sd-event loop thread. Writes are
 * queued and executed, in submission order, by ONE thread the store owns;
 * consecutive queued writes share one transaction (group commit: while one
 * commit waits for fsync, the next ones pile up and go in the next
 * transaction, so N puts cost far fewer than N fsyncs). Each write's done
 * callback runs on the loop thread (delivered through an eventfd), in
 * submission order, only after the transaction holding it committed durably
 * — so "reply after the callback" is "reply after the record is on disk".
 *
 * Durability. WAL mode with synchronous=FULL: every commit fsyncs the WAL
 * before it returns. synchronous=NORMAL would only fsync at checkpoints: a
 * commit survives a crash of the daemon but not a power cut, which is not
 * good enough for a record we hand out a zone on. The file is created 0600
 * (leases are bearer tokens) and its directory fsynced once at creation.
 *
 * Errors. The callback's r is 0 or a negative errno: -EINVAL for a CHECK or
 * NOT NULL violation (bad state), -EEXIST for a lease held by another zone,
 * -ENODEV for a zone of a device never put with zone_db_put_device(),
 * -EBUSY, -ENOSPC, -EIO, ... A failed write does not fail the others in its
 * group. r < 0 means "not known to be durable", not "known absent": after a
 * failed fsync the record may or may not be on disk (reconcile copes). After
 * an I/O error on commit every later write fails with -EIO until the store
 * is reopened: retrying an fsync that failed can report success for data
 * the kernel already dropped.
 *
 * Values. Times are CLOCK_REALTIME microseconds. NULL strings are stored as
 * NULL; allocated_usec/sealed_usec 0 and owner_uid ZONE_DB_UID_INVALID are
 * stored as NULL and read back as such. uint64_t values are stored as
 * SQLite's signed 64-bit integers (bit-exact round trip). */

typedef struct ZoneDb ZoneDb;

#define ZONE_DB_UID_INVALID UINT32_MAX


typedef struct ZoneRecord {
        char *device_id;     /* stable identity: "wwn:...", "emu:/path"; NOT NULL */
        uint32_t zone_index;
        char *state;         /* free allocated writing sealed releasing failed; NOT NULL */
        char *lease;         /* unique among zones, or NULL */
        uint32_t owner_uid;  /* ZONE_DB_UID_INVALID: none */
        char *label;
        uint64_t bytes_written;
        char *sha256;        /* hex */
        uint32_t reset_count;
        uint64_t allocated_usec, sealed_usec, updated_usec;
        char *note;
} ZoneRecord;

typedef struct ZoneDbDevice {
        char *id;
        uint64_t zone_size;
        uint32_t nr_zones;
        uint64_t first_seen_usec, last_seen_usec;
} ZoneDbDevice;

/* Runs on the loop thread after the write's transaction committed (r == 0)
 * or failed (r < 0). It may queue more writes; it must not free the store. */
typedef void (*zone_db_done_t)(int r, void *userdata);

/* Opens (creating 0600 if missing) the database at path, whose directory must
 * exist, creates or migrates the schema, starts the store thread. Blocks: call
 * at start. -EPROTONOSUPPORT: the schema is newer than this daemon's;
 * -EMEDIUMTYPE: the file belongs to something else. ":memory:" is a database
 * in memory, the store's own, gone when it is freed: for tests (nothing is
 * durable, though the callbacks still come from the store thread). */
int zone_db_open(ZoneDb **ret, sd_event *e, const char *path);
/* Runs every queued write and every callback (including writes queued by
 * those callbacks), stops the thread, checkpoints and closes. Blocks. Must
 * not be called from a done callback. NULL ok. */
ZoneDb *zone_db_free(ZoneDb *db);

/* Upserts the zone (device_id, zone_index); rec is copied. On a negative
 * return (-EINVAL for NULL device_id/state, -ENOMEM, -ESHUTDOWN) done is
 * never called; otherwise it is called exactly once. done may be NULL. */
int zone_db_put(ZoneDb *db, const ZoneRecord *rec, zone_db_done_t done, void *userdata);
/* Upserts a device: first_seen is set the first time, last_seen every time
 * (to now, at queueing). Zones need their device put first (or earlier in
 * the same queue). */
int zone_db_put_device(ZoneDb *db, const char *device_id, uint64_t zone_size, uint32_t nr_zones,
                       zone_db_done_t done, void *userdata);

/* Synchronous reads on the loop thread, for reconcile at start only. They
 * see committed writes (all whose callbacks ran), not queued ones. */
int zone_db_load_device(ZoneDb *db, const char *device_id, ZoneRecord **ret, size_t *ret_n);
/* -ENOENT if the device was never put. */
int zone_db_get_device(ZoneDb *db, const char *device_id, ZoneDbDevice *ret);

void zone_record_done(ZoneRecord *r);            /* frees the strings, not r */
void zone_records_free(ZoneRecord *r, size_t n); /* and the array */
void zone_db_device_done(ZoneDbDevice *d);

/* Transactions committed so far (group commit: << writes). */
uint64_t zone_db_commits(ZoneDb *db);
/* Writes queued whose callback has not run yet. */
unsigned zone_db_pending(ZoneDb *db);
