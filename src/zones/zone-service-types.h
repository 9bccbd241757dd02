/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "zones.h"

/* The zone service's types (zone-service.h has its functions): requests,
 * results and the callbacks that carry them. */

typedef struct ZoneService ZoneService;
typedef struct ZoneDevice ZoneDevice;
struct UringPool;
struct WorkPool;
struct WriteLimits;

/* The errors an operation ends with, besides success. */
typedef enum ZoneError {
        ZONE_ERROR_NONE,
        ZONE_ERROR_INVALID_PARAMETER, /* .parameter */
        ZONE_ERROR_PERMISSION_DENIED, /* the lease is another uid's */
        ZONE_ERROR_NO_SUCH_DEVICE,    /* .name: the device asked for */
        ZONE_ERROR_DEVICE_GONE,       /* .name: the deviceId */
        ZONE_ERROR_NO_FREE_ZONE,      /* .name: the device asked for, or NULL */
        ZONE_ERROR_ZONE_LIMIT_REACHED, /* .name: the deviceId, .max_active */
        ZONE_ERROR_LEASE_NOT_FOUND,   /* .lease */
        ZONE_ERROR_LEASE_BUSY,        /* .lease */
        ZONE_ERROR_WRONG_STATE,       /* .lease, .state */
        ZONE_ERROR_TOO_LARGE,         /* .size, .capacity */
        ZONE_ERROR_CHECKSUM_MISMATCH, /* .expected, .actual */
        ZONE_ERROR_IO,                /* .errnum, .message */
        ZONE_ERROR_LABEL_EXISTS,      /* .label, .lease (its holder) */
        ZONE_ERROR_LABEL_NOT_FOUND,   /* .label */
        ZONE_ERROR_LABEL_NOT_UNIQUE,  /* .label, .count */
        ZONE_ERROR_FLUSH_FAILED,      /* .name: the deviceId, .errnum, .message */
        ZONE_ERROR_NOT_REPAIRABLE,    /* .name: the deviceId, .ref.zone, .state, .lease (or NULL) */
        ZONE_ERROR_CANCELLED,         /* the operation was dropped unanswered: zone_op_cancel(), or shutdown */
        _ZONE_ERROR_MAX,
} ZoneError;

/* The io.blkmqd.Zones (or org.varlink.service) error name; NULL for
 * ZONE_ERROR_NONE and ZONE_ERROR_CANCELLED (nothing is sent). */
const char *zone_error_to_string(ZoneError e);

/* A zone: its device and index. */
typedef struct ZoneRef {
        const ZoneDevice *dev;
        uint32_t zone;
} ZoneRef;

typedef struct ZoneResult {
        int r;           /* 0, or a negative errno that goes with error */
        ZoneError error;
        /* The error's details (see ZoneError); borrowed until the callback returns. */
        const char *name, *lease, *label, *state, *parameter, *message, *expected, *actual;
        uint64_t size, capacity;
        unsigned max_active, count;
        int errnum;      /* positive */
        /* Success: the zone (Allocate: .lease is the new lease), bytes
         * written (Append) or read (Read, with .actual the SHA-256), the
         * objects checked (Verify). */
        ZoneRef ref;
        uint64_t bytes;
        const ZoneRef *objects;
        size_t n_objects;
} ZoneResult;

typedef void (*ZoneDoneFn)(const ZoneResult *res, void *userdata);

/* Append, Read: how far it got (.bytes, .ref), now and then. */
typedef void (*ZoneProgressFn)(const ZoneResult *res, void *userdata);

/* An operation in flight that can be cancelled (its client went away).
 * Valid until its done callback ran. An Append or Read then ends as it
 * would on an I/O error, an Allocate waiting for a zone with
 * ZONE_ERROR_CANCELLED. */
typedef struct ZoneOp ZoneOp;
void zone_op_cancel(ZoneOp *op);

/* Called when a check (scrub, Verify, Read) finds a sealed object damaged
 * (event "objectDamaged": a SHA-256 mismatch or a read error) and when one
 * found damaged reads back to its SHA-256 again ("objectIntact"); once per
 * episode, as the error line in the log. device is the deviceId, detail a
 * sentence. NULL cb: none. */
typedef void (*ZoneAlertFn)(const char *event, const char *device, const char *detail, void *userdata);

typedef struct ZoneDeviceInfo {
        const char *id;      /* the deviceId */
        const char *sysname; /* NULL while gone (or emulated) */
        const char *backend;
        const ZoneSlot *slots;
        size_t n_zones;
        unsigned max_open, max_active; /* 0 while gone */
        /* The kernel's write limits of its block device (device.h); NULL
         * while gone, emulated, or where the kernel has none of them. */
        const struct WriteLimits *write_limits;
} ZoneDeviceInfo;

typedef struct ZoneAllocRequest {
        const char *device; /* NULL: any */
        const char *label;  /* NULL: none */
        uint64_t size;
} ZoneAllocRequest;

typedef struct ZoneAppendRequest {
        const char *lease;
        int fd;             /* the data, read from here (taken, always), or -1 */
        uint8_t *data;      /* or these bytes (taken, always) */
        size_t data_len;
        /* A parameter the caller could not decode: refused (as
         * ZONE_ERROR_INVALID_PARAMETER) after the lease checks. */
        const char *bad_parameter;
} ZoneAppendRequest;

/* A sealed object, by lease, or by label (on device, if given). */
typedef struct ZoneObjectRef {
        const char *lease, *label, *device;
} ZoneObjectRef;
