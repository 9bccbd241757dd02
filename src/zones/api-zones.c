/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/param.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "api-zones.h"
#include "io.blkmqd.Zones.varlink.h"
#include "log.h"
#include "sha256.h"
#include "uring-pool.h"
#include "util.h"
#include "work-pool.h"
#include "zbd.h"
#include "zone-db.h"
#include "zones.h"

/* Largest inline chunk a client may send in one Append call. */
#define INLINE_MAX (1024 * 1024)

typedef struct ZDev ZDev;
typedef struct AppendOp AppendOp;
typedef struct SealJob SealJob;
struct VerifyJob;

typedef struct ZSlotExtra {
        char *lease;
        uint32_t owner_uid;
        char *label;
        char *sha256;
        uint64_t allocated_usec, sealed_usec;
        char *note;
        AppendOp *append; /* in flight */
        bool busy;        /* sealing */
        bool releasing;   /* a Release waits for its record to be durable */
        unsigned readers; /* Read, Verify or the scrub reading the sealed object */
        uint64_t scrub_usec; /* CLOCK_REALTIME of the last check; 0: none since start */
        int scrub_result;    /* of it: 0, -EBADMSG (mismatch), -errno */
        /* The last partial block of what was appended so far: zones are
         * written in whole blocks, so it waits for more data or the seal. */
        uint8_t *tail;
        uint32_t tail_len;
        /* Verification behind the appends (see "verification" below). */
        Sha256 vsha;
        uint64_t verified;
        struct VerifyJob *verify; /* in flight */
        SealJob *seal_wait;       /* a seal waiting for it */
        unsigned verify_gen;      /* bumped when the zone is reset under a lease */
} ZSlotExtra;

struct ZDev {
        ZoneService *service;
        char *id;
        char *sysname; /* NULL while gone */
        const char *backend;
        Zbd *zbd;
        ZoneSlot *slots;
        ZSlotExtra *extra;
        size_t n;
        bool resetting;
        bool gone;      /* removed; zbd is dropped once in-flight operations end */
        char *readd[3]; /* sysname, devnode, blockdir of a re-plug that came while busy */
};

typedef struct PendingAlloc {
        struct PendingAlloc *next;
        VarlinkCall *call;
        json_t *params;
} PendingAlloc;

struct ZoneService {
        sd_event *event;
        ZonesConfig config;
        UringPool *uring;
        WorkPool *work;
        WorkPool *verifier; /* SCHED_IDLE: verification behind the appends */
        bool freeing;
        ZoneDb *db;
        ZDev **devs;
        size_t n_devs;
        PendingAlloc *pending;
        sd_event_source *scrub_timer;
        bool scrubbing;           /* one scrub read at a time */
        uint64_t start_usec;      /* CLOCK_REALTIME at start: scrub ages count from here at most */
        uint64_t scrubbed, scrub_errors; /* objects checked, mismatches and read errors found */
        zone_alert_cb_t alert_cb;
        void *alert_userdata;
};

/* Zone append lets the device pick the offset, so several appends can be in
 * flight ([Zones] AppendDepth=); the kernel and emulated backends write at
 * the write pointer, one at a time. Each append must land where the object
 * continues: a device that reorders them fails the append rather than
 * scrambling the data. */
typedef struct AppendSlot {
        uint8_t *buf;    /* copy mode: aligned, chunk bytes; map mode: into the mapping */
        uint32_t len;    /* bytes being written */
        uint64_t expect; /* where they must land */
        UringReq req;
        bool busy;
        AppendOp *op;
} AppendSlot;

/* Data comes in one of three ways:
 *  - map mode: a regular file passed by fd, at a page-aligned offset, with
 *    no partial block carried from an earlier append. Its pages, mapped
 *    read-only, go to the device as they are: no copy. The daemon never
 *    touches the mapping itself (only the kernel does, for the writes, where
 *    a file truncated meanwhile gives EFAULT, not SIGBUS); the last partial
 *    block is read with a read, not through the mapping.
 *  - copy mode: anything else passed by fd (pipes, sockets, unaligned
 *    offsets), read chunk by chunk into the slots' buffers.
 *  - inline: base64 data of the call, copied into the slots' buffers. */
struct AppendOp {
        ZDev *dev;
        uint32_t zone;
        VarlinkCall *call;
        int src_fd;        /* -1: inline */
        uint8_t *inline_data;
        size_t inline_len, inline_pos;
        AppendSlot slots[ZONES_APPEND_DEPTH_MAX];
        unsigned depth;
        unsigned cur;      /* the slot being filled; UINT_MAX: all busy */
        unsigned inflight;
        uint32_t chunk;
        size_t fill;       /* bytes in the current slot, the carried tail first */
        uint8_t *tail;     /* a partial last block left at the end */
        uint32_t tail_len;
        bool eof;
        bool reading;
        bool final;        /* the seal's flush: the tail goes out padded */
        SealJob *seal;     /* continue with it once flushed */
        uint64_t next_off; /* where the next write lands */
        uint64_t appended; /* new bytes taken by this call */
        uint64_t last_progress;
        int error;
        const char *error_what;
        UringReq rreq;
        /* map mode */
        void *map;
        size_t map_len;
        uint64_t src_pos;  /* file offset of the first byte */
        uint64_t src_size; /* bytes from src_pos to the end of the file at the call */
        uint64_t src_sent; /* bytes of them handed to the device */
        bool tail_asked;
        /* map mode on a zone-append device (or the emulated one, as
         * writes at the write pointer): the object goes to one worker as a
         * stream of appends; a timer follows its parts meanwhile */
        UringStream *stream;
        bool no_stream;        /* the kernel has no ring for write streams */
        uint64_t stream_base;  /* where its first part must land */
        uint32_t parts_seen;   /* parts checked so far */
        sd_event_source *tick;
        /* Appends that landed out of order (zone append allows it; seen
         * under QEMU at depth 4-8 now and then): a stream that began on an
         * empty zone resets it and writes the object again, one append in
         * flight, which cannot reorder. */
        bool restartable, reordered;
        unsigned restarts;
        struct { Zbd *zbd; uint64_t start; int r; } reset;
};

/* How often the loop looks at a running stream's landed parts (for the
 * write pointer, verification behind it and progress), and the largest
 * stream (UringReq.len is 32-bit; a larger object takes several). */
_Static_assert(ZONES_APPEND_DEPTH_MAX <= URING_STREAM_DEPTH_MAX, "AppendDepth= must fit a stream");
#define STREAM_TICK_USEC (20 * 1000)
#define STREAM_MAX (1024U * 1024 * 1024)

/* ---- helpers ---- */

static const char *cond_name(ZoneCond c) {
        switch (c) {
        case ZONE_COND_NOT_WP:
                return "notWritePointer";
        case ZONE_COND_EMPTY:
                return "empty";
        case ZONE_COND_IMP_OPEN:
                return "implicitOpen";
        case ZONE_COND_EXP_OPEN:
                return "explicitOpen";
        case ZONE_COND_CLOSED:
                return "closed";
        case ZONE_COND_READONLY:
                return "readOnly";
        case ZONE_COND_FULL:
                return "full";
        case ZONE_COND_OFFLINE:
                return "offline";
        }
        return "unknown";
}

static int b64_value(int c) {
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+')
                return 62;
        if (c == '/')
                return 63;
        return -1;
}

/* Strict base64 (RFC 4648, padding required). */
static int base64_decode(const char *in, uint8_t **ret, size_t *ret_len) {
        size_t n = strlen(in), o = 0;
        uint8_t *out;

        if (n % 4)
                return -EINVAL;
        out = malloc(n / 4 * 3 + 1);
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < n; i += 4) {
                int v[4];
                for (int k = 0; k < 4; k++) {
                        v[k] = in[i + k] == '=' ? -2 : b64_value((unsigned char) in[i + k]);
                        if (v[k] == -1 || (v[k] == -2 && (i + 4 != n || k < 2))) {
                                free(out);
                                return -EINVAL;
                        }
                }
                if (v[2] == -2 && v[3] != -2) {
                        free(out);
                        return -EINVAL;
                }
                out[o++] = (uint8_t) (v[0] << 2 | v[1] >> 4);
                if (v[2] >= 0)
                        out[o++] = (uint8_t) ((v[1] & 15) << 4 | v[2] >> 2);
                if (v[3] >= 0)
                        out[o++] = (uint8_t) ((v[2] & 3) << 6 | v[3]);
        }
        *ret = out;
        *ret_len = o;
        return 0;
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

static json_t *scrub_json(const ZSlotExtra *x) {
        json_t *o = json_pack("{s:I, s:s}", "usec", (json_int_t) x->scrub_usec, "result",
                              x->scrub_result == 0          ? "ok"
                              : x->scrub_result == -EBADMSG ? "mismatch"
                                                            : "ioError");
        if (o && x->scrub_result < 0)
                json_object_set_new(o, "message",
                                    json_string(x->scrub_result == -EBADMSG ? "the data does not match its SHA-256"
                                                                            : strerror(-x->scrub_result)));
        return o;
}

static json_t *zone_json(const ZDev *d, uint32_t i) {
        const ZoneSlot *s = &d->slots[i];
        const ZSlotExtra *x = &d->extra[i];
        json_t *o = json_pack("{s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:s, s:s, s:I, s:i}", "deviceId", d->id,
                              "zoneIndex", (int) i, "startLba", (json_int_t) (s->zone.start / 512), "start",
                              (json_int_t) s->zone.start, "size", (json_int_t) s->zone.len, "capacity",
                              (json_int_t) s->zone.capacity, "writePointer", (json_int_t) s->zone.wp, "condition",
                              cond_name(s->zone.cond), "state", zone_state_to_string(s->state), "bytesWritten",
                              (json_int_t) s->bytes_written, "resetCount", (int) s->reset_count);
        if (d->sysname)
                json_object_set_new(o, "device", json_string(d->sysname));
        if (x->lease)
                json_object_set_new(o, "lease", json_string(x->lease));
        if (x->owner_uid != ZONE_DB_UID_INVALID)
                json_object_set_new(o, "ownerUid", json_integer(x->owner_uid));
        if (x->label)
                json_object_set_new(o, "label", json_string(x->label));
        if (x->sha256)
                json_object_set_new(o, "sha256", json_string(x->sha256));
        if (x->note)
                json_object_set_new(o, "note", json_string(x->note));
        if (x->sealed_usec)
                json_object_set_new(o, "sealedUsec", json_integer((json_int_t) x->sealed_usec));
        if (x->scrub_usec)
                json_object_set_new(o, "scrub", scrub_json(x));
        return o;
}

typedef struct PutDone {
        VarlinkCall *call; /* reply once durable, or NULL */
        json_t *reply;
        const char *error;
        json_t *error_params;
        /* An allocation whose record did not become durable is undone: the
         * caller got IOError, so nobody holds the lease. */
        struct ZDev *undo_dev;
        uint32_t undo_zone;
} PutDone;

static void undo_allocation(struct ZDev *d, uint32_t z);

static void put_done(int r, void *userdata) {
        PutDone *p = userdata;

        if (p->call) {
                /* Crash tests: "durable:io.blkmqd.Zones.Seal" dies with the
                 * record on disk and the reply not sent. */
                char point[128];
                snprintf(point, sizeof point, "durable:%s", varlink_call_get_method(p->call));
                test_kill_point(point);
                if (r < 0 && p->undo_dev)
                        undo_allocation(p->undo_dev, p->undo_zone);
                if (r < 0)
                        varlink_call_error(p->call, "io.blkmqd.Zones.IOError",
                                           json_pack("{s:i, s:s}", "errno", -r, "message",
                                                     "the zone record could not be made durable"));
                else if (p->error)
                        varlink_call_error(p->call, p->error, TAKE_PTR(p->error_params));
                else
                        varlink_call_reply(p->call, TAKE_PTR(p->reply));
                varlink_call_unref(p->call);
        } else if (r < 0)
                log_warning_errno(r, "Failed to record a zone state: %m");
        json_decref(p->reply);
        json_decref(p->error_params);
        free(p);
}

/* The record of zone i as the slot holds it now. Borrows the strings. */
static ZoneRecord record_of(const ZDev *d, uint32_t i) {
        const ZoneSlot *sl = &d->slots[i];
        const ZSlotExtra *x = &d->extra[i];

        return (ZoneRecord) {
                .device_id = d->id,
                .zone_index = i,
                .state = (char *) zone_state_to_string(sl->state),
                .lease = x->lease,
                .owner_uid = x->owner_uid,
                .label = x->label,
                .bytes_written = sl->bytes_written,
                .sha256 = x->sha256,
                .reset_count = sl->reset_count,
                .allocated_usec = x->allocated_usec,
                .sealed_usec = x->sealed_usec,
                .updated_usec = now_usec(CLOCK_REALTIME),
                .note = x->note,
        };
}

/* Records zone i; if call is given, replies with reply (or error) once the
 * record is durable. Takes reply and error_params. With undo, an
 * allocation that does not become durable is undone. */
static int record_full(ZDev *d, uint32_t i, VarlinkCall *call, json_t *reply, const char *error,
                       json_t *error_params, bool undo) {
        ZoneService *s = d->service;
        PutDone *p = calloc(1, sizeof *p);
        ZoneRecord rec = record_of(d, i);
        int r;

        if (!p) {
                json_decref(reply);
                json_decref(error_params);
                if (undo)
                        undo_allocation(d, i);
                return -ENOMEM;
        }
        if (undo) {
                p->undo_dev = d;
                p->undo_zone = i;
        }
        p->call = call ? varlink_call_ref(call) : NULL;
        p->reply = reply;
        p->error = error;
        p->error_params = error_params;
        r = zone_db_put(s->db, &rec, put_done, p);
        if (r < 0) {
                put_done(r, p);
                return r;
        }
        return 0;
}

static int record(ZDev *d, uint32_t i, VarlinkCall *call, json_t *reply, const char *error, json_t *error_params) {
        return record_full(d, i, call, reply, error, error_params, false);
}

static ZDev *find_dev(ZoneService *s, const char *name) {
        for (size_t i = 0; i < s->n_devs; i++) {
                ZDev *d = s->devs[i];
                if (streq(d->id, name) || streq_ptr(d->sysname, name) ||
                    (strncmp(name, "/dev/", 5) == 0 && d->sysname && streq(name + 5, d->sysname)) ||
                    (name[0] == '/' && strncmp(d->id, "emu:", 4) == 0 && streq(d->id + 4, name)))
                        return d;
        }
        return NULL;
}

static ZDev *find_lease(ZoneService *s, const char *lease, uint32_t *ret_zone) {
        for (size_t i = 0; i < s->n_devs; i++)
                for (size_t k = 0; k < s->devs[i]->n; k++)
                        if (streq_ptr(s->devs[i]->extra[k].lease, lease)) {
                                *ret_zone = (uint32_t) k;
                                return s->devs[i];
                        }
        return NULL;
}

static bool zdev_busy(const ZDev *d) {
        if (d->resetting)
                return true;
        for (size_t k = 0; k < d->n; k++)
                if (d->extra[k].append || d->extra[k].busy || d->extra[k].verify || d->extra[k].readers)
                        return true;
        return false;
}

static void zdev_settle(ZDev *d);

static int peer_may(VarlinkCall *call, const ZSlotExtra *x) {
        uid_t uid;
        int r = varlink_call_get_peer(call, &uid, NULL, NULL);
        if (r < 0)
                return r;
        return uid == 0 || uid == x->owner_uid;
}

static int error_lease(VarlinkCall *call, const char *lease) {
        return varlink_call_error(call, "io.blkmqd.Zones.LeaseNotFound", json_pack("{s:s}", "lease", lease));
}

static int error_io(VarlinkCall *call, int r, const char *what) {
        return varlink_call_error(call, "io.blkmqd.Zones.IOError",
                                  json_pack("{s:i, s:s}", "errno", r < 0 ? -r : r, "message", what));
}

/* ---- resets, batched ---- */

typedef struct ResetJob {
        ZDev *dev;
        uint32_t *zones;
        int *results;
        size_t n;
} ResetJob;

static void reset_run(void *data) {
        ResetJob *j = data;
        for (size_t i = 0; i < j->n; i++)
                j->results[i] = j->dev->zbd->ops->reset(j->dev->zbd, j->dev->slots[j->zones[i]].zone.start);
}

static void retry_pending(ZoneService *s);

static void reset_done(void *data, void *userdata) {
        ResetJob *j = data;
        ZDev *d = j->dev;

        test_kill_point("reset-done");
        d->resetting = false;
        for (size_t i = 0; i < j->n; i++) {
                uint32_t z = j->zones[i];
                ZoneSlot *sl = &d->slots[z];

                if (j->results[i] < 0) {
                        log_warning_errno(j->results[i], "%s: zone %u: reset failed, keeping it out of use: %m",
                                          d->id, z);
                        sl->state = ZONE_STATE_FAILED;
                        (void) free_and_strdup(&d->extra[z].note, "reset failed");
                } else {
                        sl->state = ZONE_STATE_FREE;
                        sl->reset_count++;
                        sl->bytes_written = 0;
                        sl->zone.wp = sl->zone.start;
                        sl->zone.cond = ZONE_COND_EMPTY;
                        d->extra[z].sha256 = mfree(d->extra[z].sha256);
                        d->extra[z].label = mfree(d->extra[z].label);
                        d->extra[z].note = mfree(d->extra[z].note);
                        d->extra[z].tail = mfree(d->extra[z].tail);
                        d->extra[z].tail_len = 0;
                        sha256_done(&d->extra[z].vsha);
                        d->extra[z].verified = 0;
                        d->extra[z].owner_uid = ZONE_DB_UID_INVALID;
                        d->extra[z].allocated_usec = d->extra[z].sealed_usec = 0;
                        log_info("%s: zone %u reset (%u resets so far).", d->id, z, sl->reset_count);
                }
                (void) record(d, z, NULL, NULL, NULL, NULL);
        }
        free(j->zones);
        free(j->results);
        free(j);
        zdev_settle(d);
        retry_pending(d->service);
}

static void maybe_reset(ZDev *d, bool starved) {
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

/* ---- devices ---- */

static void zdev_free(ZDev *d) {
        if (!d)
                return;
        for (size_t i = 0; i < d->n; i++) {
                free(d->extra[i].lease);
                free(d->extra[i].label);
                free(d->extra[i].sha256);
                free(d->extra[i].note);
                free(d->extra[i].tail);
                sha256_done(&d->extra[i].vsha);
        }
        free(d->extra);
        free(d->slots);
        if (d->zbd)
                zbd_free(d->zbd);
        for (size_t i = 0; i < ELEMENTSOF(d->readd); i++)
                free(d->readd[i]);
        free(d->id);
        free(d->sysname);
        free(d);
}

/* Reads the zone report and the records, and reconciles them. Runs at
 * start and when a device (re)appears. */
static int zdev_attach(ZoneService *s, ZDev *d, Zbd *zbd) {
        _cleanup_free_ Zone *zones = NULL;
        ZoneRecord *recs = NULL;
        size_t n = 0, n_recs = 0;
        int r;

        r = zbd_report_all(zbd, &zones, &n);
        if (r < 0)
                return log_error_errno(r, "%s: zone report failed: %m", d->id);
        if (d->n && d->n != n)
                return log_error_errno(EINVAL, "%s: came back with %zu zones instead of %zu, not using it.", d->id,
                                       n, d->n);
        if (!d->n) {
                d->slots = calloc(n, sizeof *d->slots);
                d->extra = calloc(n, sizeof *d->extra);
                if (!d->slots || !d->extra)
                        return -ENOMEM;
                d->n = n;
                for (size_t i = 0; i < n; i++) {
                        d->slots[i].index = (uint32_t) i;
                        d->extra[i].owner_uid = ZONE_DB_UID_INVALID;
                }
                r = zone_db_load_device(s->db, d->id, &recs, &n_recs);
                if (r < 0)
                        return log_error_errno(r, "%s: cannot read zone records: %m", d->id);
                for (size_t k = 0; k < n_recs; k++) {
                        ZoneRecord *rc = &recs[k];
                        int st = zone_state_from_string(rc->state);
                        if (rc->zone_index >= n || st < 0)
                                continue;
                        d->slots[rc->zone_index].state = st;
                        d->slots[rc->zone_index].bytes_written = rc->bytes_written;
                        d->slots[rc->zone_index].reset_count = rc->reset_count;
                        ZSlotExtra *x = &d->extra[rc->zone_index];
                        x->lease = TAKE_PTR(rc->lease);
                        x->label = TAKE_PTR(rc->label);
                        x->sha256 = TAKE_PTR(rc->sha256);
                        x->note = TAKE_PTR(rc->note);
                        x->owner_uid = rc->owner_uid;
                        x->allocated_usec = rc->allocated_usec;
                        x->sealed_usec = rc->sealed_usec;
                }
                zone_records_free(recs, n_recs);
        }
        d->zbd = zbd;
        (void) zone_db_put_device(s->db, d->id, zbd->limits.zone_size, (uint32_t) n, NULL, NULL);

        for (size_t i = 0; i < n; i++) {
                ZoneSlot *sl = &d->slots[i];
                const char *why;
                ZoneState st;

                sl->zone = zones[i];
                st = zone_reconcile(sl, &why);
                if (!why)
                        continue;
                log_notice("%s: zone %zu: %s → %s: %s", d->id, i, zone_state_to_string(sl->state),
                           zone_state_to_string(st), why);
                sl->state = st;
                (void) free_and_strdup(&d->extra[i].note, why);
                if (st == ZONE_STATE_FREE || st == ZONE_STATE_RELEASING)
                        d->extra[i].lease = mfree(d->extra[i].lease);
                (void) record(d, (uint32_t) i, NULL, NULL, NULL, NULL);
        }
        maybe_reset(d, true);
        return 0;
}

static int zdev_add(ZoneService *s, const char *id, const char *sysname, const char *backend, Zbd *zbd) {
        ZDev *d = find_dev(s, id);
        int r;

        if (!d) {
                ZDev **t = realloc(s->devs, sizeof *t * (s->n_devs + 1));
                if (!t)
                        return -ENOMEM;
                s->devs = t;
                d = calloc(1, sizeof *d);
                if (!d || !(d->id = strdup(id))) {
                        free(d);
                        return -ENOMEM;
                }
                d->service = s;
                s->devs[s->n_devs++] = d;
        } else if (d->zbd) {
                zbd_free(zbd);
                return 0; /* already attached */
        }
        d->backend = backend;
        r = free_and_strdup(&d->sysname, sysname);
        if (r < 0)
                return r;
        bool was_gone = d->gone;
        d->gone = false;
        r = zdev_attach(s, d, zbd);
        if (r < 0) {
                d->gone = was_gone;
                d->zbd = NULL;
                zbd_free(zbd);
                return r;
        }
        log_info("%s: %zu zones of %s (%s backend) available for leases.", d->id, d->n,
                 format_size(zbd->limits.zone_size, (char[16]) {}), backend);
        return 0;
}

int zone_service_add_kernel(ZoneService *s, const char *id, const char *sysname, const char *devnode,
                            const char *blockdir) {
        Zbd *z = NULL;
        int r;

        if (!s)
                return 0;
        ZDev *d = find_dev(s, id);
        if (d && d->zbd && !d->gone)
                return free_and_strdup(&d->sysname, sysname);
        if (d && d->gone && zdev_busy(d)) {
                /* The old backend is still in use by an operation that is
                 * failing now; reattach when it has ended. */
                for (size_t i = 0; i < ELEMENTSOF(d->readd); i++)
                        d->readd[i] = mfree(d->readd[i]);
                d->readd[0] = strdup(sysname);
                d->readd[1] = strdup(devnode);
                d->readd[2] = blockdir ? strdup(blockdir) : NULL;
                return 0;
        }
        /* NVMe ZNS namespaces: zone append through passthrough on /dev/ngXnY
         * (the device picks the offset). Anything else, or an NVMe namespace
         * where that is not possible (not ZNS, no generic char device, no
         * CAP_SYS_ADMIN on 6.1, metadata formats): the kernel's interface. */
        if (sysname && strncmp(sysname, "nvme", 4) == 0) {
                r = zbd_nvme_open(devnode, blockdir, &z);
                if (r >= 0)
                        return zdev_add(s, id, sysname, "nvme", z);
                log_notice_errno(r, "%s: no NVMe zone append passthrough on %s, using the kernel's zoned interface: %m",
                                 sysname, devnode);
        }
        r = zbd_kernel_open(devnode, blockdir, &z);
        if (r < 0)
                return log_warning_errno(r, "%s: cannot use %s for zone leases: %m", sysname, devnode);
        return zdev_add(s, id, sysname, "kernel", z);
}

void zone_service_device_gone(ZoneService *s, const char *sysname) {
        if (!s)
                return;
        for (size_t i = 0; i < s->n_devs; i++) {
                ZDev *d = s->devs[i];
                if (!streq_ptr(d->sysname, sysname) || !d->zbd)
                        continue;
                /* Records stay; operations in flight fail on their own and
                 * the backend is dropped when the last one ended. */
                log_info("%s: %s went away; its zones and leases wait for it to come back.", d->id, sysname);
                d->gone = true;
                d->sysname = mfree(d->sysname);
                zdev_settle(d);
        }
}

/* A device that went away lets go of its backend once nothing runs on it,
 * and takes a re-plug that arrived meanwhile. */
static void zdev_settle(ZDev *d) {
        _cleanup_free_ char *sysname = NULL, *devnode = NULL, *blockdir = NULL;

        if (!d->gone || zdev_busy(d))
                return;
        if (d->zbd) {
                zbd_free(d->zbd);
                d->zbd = NULL;
        }
        if (!d->readd[0])
                return;
        sysname = TAKE_PTR(d->readd[0]);
        devnode = TAKE_PTR(d->readd[1]);
        blockdir = TAKE_PTR(d->readd[2]);
        (void) zone_service_add_kernel(d->service, d->id, sysname, devnode, blockdir);
}

/* ---- methods ---- */

static void device_counts(const ZDev *d, unsigned c[_ZONE_STATE_MAX]) {
        memset(c, 0, sizeof(unsigned) * _ZONE_STATE_MAX);
        for (size_t i = 0; i < d->n; i++)
                c[d->slots[i].state]++;
}

/* Sealed objects of d whose last check (scrub, Verify, Read) failed. */
static unsigned device_damaged(const ZDev *d) {
        unsigned n = 0;

        for (size_t i = 0; i < d->n; i++)
                if (d->slots[i].state == ZONE_STATE_SEALED && d->extra[i].scrub_usec && d->extra[i].scrub_result < 0)
                        n++;
        return n;
}

static int method_list_devices(VarlinkCall *call, json_t *params, void *userdata) {
        ZoneService *s = userdata;
        json_t *a = json_array();

        for (size_t i = 0; i < s->n_devs; i++) {
                ZDev *d = s->devs[i];
                unsigned c[_ZONE_STATE_MAX];
                json_t *o;

                device_counts(d, c);
                o = json_pack("{s:s, s:s, s:i, s:I, s:I, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "deviceId", d->id,
                              "backend", d->backend, "zones", (int) d->n, "zoneSize",
                              (json_int_t) (d->n ? d->slots[0].zone.len : 0), "zoneCapacity",
                              (json_int_t) (d->n ? d->slots[d->n - 1].zone.capacity : 0), "maxOpen",
                              d->zbd ? (int) d->zbd->limits.max_open : 0, "maxActive",
                              d->zbd ? (int) d->zbd->limits.max_active : 0, "free", c[ZONE_STATE_FREE], "allocated",
                              c[ZONE_STATE_ALLOCATED], "writing", c[ZONE_STATE_WRITING], "sealed",
                              c[ZONE_STATE_SEALED], "releasing", c[ZONE_STATE_RELEASING], "failed",
                              c[ZONE_STATE_FAILED]);
                if (d->sysname)
                        json_object_set_new(o, "device", json_string(d->sysname));
                json_object_set_new(o, "damaged", json_integer(device_damaged(d)));
                json_array_append_new(a, o);
        }
        return varlink_call_reply(call, json_pack("{s:o}", "devices", a));
}

static int error_device(VarlinkCall *call, const char *name) {
        return varlink_call_error(call, "io.blkmqd.Zones.NoSuchDevice", json_pack("{s:s}", "device", name));
}

static int method_list_zones(VarlinkCall *call, json_t *params, void *userdata) {
        ZoneService *s = userdata;
        const char *name = json_string_value(json_object_get(params, "device"));
        const char *state = json_string_value(json_object_get(params, "state"));
        ZDev *d = find_dev(s, name);
        json_t *a;
        int want = -1;

        if (!d)
                return error_device(call, name);
        if (state && !streq(state, "empty")) {
                want = zone_state_from_string(state);
                if (want < 0)
                        return varlink_call_error_invalid_parameter(call, "state");
        }
        a = json_array();
        for (size_t i = 0; i < d->n; i++) {
                if (state && streq(state, "empty") && !zone_is_empty(&d->slots[i].zone))
                        continue;
                if (want >= 0 && (int) d->slots[i].state != want)
                        continue;
                json_array_append_new(a, zone_json(d, (uint32_t) i));
        }
        return varlink_call_reply(call, json_pack("{s:o}", "zones", a));
}

static int do_allocate(ZoneService *s, VarlinkCall *call, json_t *params, bool may_wait);

static void undo_allocation(ZDev *d, uint32_t z) {
        ZSlotExtra *x = &d->extra[z];

        if (d->slots[z].state != ZONE_STATE_ALLOCATED)
                return;
        log_warning("%s: zone %u: the allocation could not be recorded; the zone stays free.", d->id, z);
        d->slots[z].state = ZONE_STATE_FREE;
        x->lease = mfree(x->lease);
        x->label = mfree(x->label);
        x->owner_uid = ZONE_DB_UID_INVALID;
        x->allocated_usec = 0;
}

/* The zone of d whose lease carries label (allocated, being written, sealed
 * or failed), or -1. */
static int label_holder(const ZDev *d, const char *label) {
        for (size_t i = 0; i < d->n; i++)
                if (d->extra[i].lease && streq_ptr(d->extra[i].label, label))
                        return (int) i;
        return -1;
}

static void retry_pending(ZoneService *s) {
        PendingAlloc *p = s->pending;

        s->pending = NULL;
        while (p) {
                PendingAlloc *next = p->next;
                /* May wait again: calls served meanwhile (pipelined, or on
                 * other connections) may have taken the zones just reset,
                 * and more are being released. */
                if (varlink_call_is_connected(p->call))
                        (void) do_allocate(s, p->call, p->params, true);
                varlink_call_unref(p->call);
                json_decref(p->params);
                free(p);
                p = next;
        }
}

static int do_allocate(ZoneService *s, VarlinkCall *call, json_t *params, bool may_wait) {
        const char *name = json_string_value(json_object_get(params, "device"));
        const char *label = json_string_value(json_object_get(params, "label"));
        json_int_t size = json_integer_value(json_object_get(params, "size"));
        uint64_t cap = 0;
        bool waiting = false;
        const ZDev *limited = NULL, *dup = NULL;
        int dup_zone = -1;
        uid_t uid = 0;
        int r;

        if (size <= 0)
                return varlink_call_error_invalid_parameter(call, "size");
        if (label && strlen(label) > 256)
                return varlink_call_error_invalid_parameter(call, "label");
        if (name && !find_dev(s, name))
                return error_device(call, name);
        (void) varlink_call_get_peer(call, &uid, NULL, NULL);

        for (size_t i = 0; i < s->n_devs; i++) {
                ZDev *d = s->devs[i];
                char lease[37];

                if ((name && d != find_dev(s, name)) || !d->zbd || d->gone)
                        continue;
                if (label && s->config.unique_labels && (r = label_holder(d, label)) >= 0) {
                        dup = d;
                        dup_zone = r;
                        continue;
                }
                r = zone_pick(d->slots, d->n, &d->zbd->limits, (uint64_t) size);
                for (size_t k = 0; k < d->n; k++)
                        if (d->slots[k].zone.capacity > cap)
                                cap = d->slots[k].zone.capacity;
                if (r == -EUSERS) {
                        limited = d;
                        if (name)
                                return varlink_call_error(call, "io.blkmqd.Zones.ZoneLimitReached",
                                                          json_pack("{s:s, s:i}", "device", d->id, "maxActive",
                                                                    (int) d->zbd->limits.max_active));
                        continue;
                }
                if (r == -ENOSPC) {
                        bool any = false;
                        for (size_t k = 0; k < d->n; k++)
                                any = any || d->slots[k].state == ZONE_STATE_RELEASING;
                        if (any && may_wait) {
                                maybe_reset(d, true);
                                waiting = true;
                        }
                        continue;
                }
                if (r < 0)
                        continue;

                uint32_t z = (uint32_t) r;
                ZSlotExtra *x = &d->extra[z];
                make_lease(lease);
                d->slots[z].state = ZONE_STATE_ALLOCATED;
                d->slots[z].bytes_written = 0;
                if (free_and_strdup(&x->lease, lease) < 0 || free_and_strdup(&x->label, label) < 0)
                        return -ENOMEM;
                x->owner_uid = uid;
                x->allocated_usec = now_usec(CLOCK_REALTIME);
                x->note = mfree(x->note);
                log_info("%s: zone %u leased to uid %u (%s), %lld bytes.", d->id, z, (unsigned) uid, strna(label),
                         (long long) size);
                /* The lease is handed out only once its record is durable;
                 * if it cannot be, the allocation is undone. */
                return record_full(d, z, call, json_pack("{s:s, s:o}", "lease", lease, "zone", zone_json(d, z)),
                                   NULL, NULL, true);
        }
        if (dup && !waiting && !limited)
                return varlink_call_error(call, "io.blkmqd.Zones.LabelExists",
                                          json_pack("{s:s, s:s}", "label", label, "lease",
                                                    dup->extra[dup_zone].lease));
        if (waiting) {
                PendingAlloc *p = calloc(1, sizeof *p);
                if (!p)
                        return -ENOMEM;
                p->call = varlink_call_ref(call);
                p->params = json_incref(params);
                /* Oldest first: retried in the order they came. */
                PendingAlloc **pp = &s->pending;
                while (*pp)
                        pp = &(*pp)->next;
                *pp = p;
                return 0;
        }
        if (cap && (uint64_t) size > cap)
                return varlink_call_error(call, "io.blkmqd.Zones.TooLarge",
                                          json_pack("{s:I, s:I}", "size", size, "capacity", (json_int_t) cap));
        if (limited)
                return varlink_call_error(call, "io.blkmqd.Zones.ZoneLimitReached",
                                          json_pack("{s:s, s:i}", "device", limited->id, "maxActive",
                                                    limited->zbd ? (int) limited->zbd->limits.max_active : 0));
        if (name && (!find_dev(s, name)->zbd || find_dev(s, name)->gone))
                return varlink_call_error(call, "io.blkmqd.Zones.DeviceGone",
                                          json_pack("{s:s}", "deviceId", find_dev(s, name)->id));
        json_t *e = json_object();
        if (name)
                json_object_set_new(e, "device", json_string(name));
        return varlink_call_error(call, "io.blkmqd.Zones.NoFreeZone", e);
}

static int method_allocate(VarlinkCall *call, json_t *params, void *userdata) {
        return do_allocate(userdata, call, params, true);
}

/* ---- append ---- */

static void append_step(AppendOp *op);

static void append_free(AppendOp *op) {
        if (op->src_fd >= 0)
                close(op->src_fd);
        free(op->inline_data);
        if (op->map)
                (void) munmap(op->map, op->map_len);
        else
                for (unsigned i = 0; i < op->depth; i++)
                        free(op->slots[i].buf);
        free(op->tail);
        if (op->stream) {
                free(op->stream->parts);
                free(op->stream);
        }
        sd_event_source_disable_unref(op->tick);
        varlink_call_unref(op->call);
        free(op);
}

static void seal_submit(SealJob *j);
static void seal_fail(SealJob *j, int r, const char *what);
static void verify_kick(ZDev *d, uint32_t z);
static void verify_forget(ZSlotExtra *x);

static void append_finish(AppendOp *op, int r, const char *what) {
        ZDev *d = op->dev;
        uint32_t z = op->zone;
        ZSlotExtra *x = &d->extra[z];
        ZoneSlot *sl = &d->slots[z];

        x->append = NULL;
        if (r < 0) {
                /* What is on the device is what counts: every completed
                 * write was whole blocks of data. The rest is lost. */
                sl->bytes_written = zone_written(&sl->zone);
                op->appended = 0;
                x->tail = mfree(x->tail);
                x->tail_len = 0;
                (void) free_and_strdup(&x->note, "an append failed: the zone holds only what was written before");
        } else {
                /* Keep the partial last block for the next append or the seal. */
                free(x->tail);
                x->tail = TAKE_PTR(op->tail);
                x->tail_len = op->tail_len;
                op->tail_len = 0;
        }
        sl->bytes_written += op->appended;

        if (op->seal) {
                SealJob *j = TAKE_PTR(op->seal);
                if (r < 0)
                        seal_fail(j, r, what);
                else
                        seal_submit(j);
                append_free(op);
                zdev_settle(d);
                return;
        }
        if (r < 0) {
                log_warning_errno(r, "%s: zone %u: append failed (%s): %m", d->id, z, what);
                if (r == -ENOSPC)
                        varlink_call_error(op->call, "io.blkmqd.Zones.TooLarge",
                                           json_pack("{s:I, s:I}", "size", (json_int_t) sl->bytes_written,
                                                     "capacity", (json_int_t) sl->zone.capacity));
                else
                        error_io(op->call, r, what);
                (void) record(d, z, NULL, NULL, NULL, NULL);
        } else {
                /* Replied without waiting for the record to be durable: a
                 * zone being written is reclaimed after a crash whatever its
                 * record says (reconcile), so no fsync sits in every
                 * append's path. Allocate, Seal and Release do wait. */
                (void) record(d, z, NULL, NULL, NULL, NULL);
                (void) varlink_call_reply(op->call, json_pack("{s:I, s:o}", "bytesWritten",
                                                              (json_int_t) sl->bytes_written, "zone", zone_json(d, z)));
        }
        append_free(op);
        zdev_settle(d);
}

static void append_step(AppendOp *op);

/* Records the first error; the op ends when nothing is in flight any more. */
static void append_fail(AppendOp *op, int r, const char *what) {
        if (!op->error) {
                op->error = r;
                op->error_what = what;
        }
        append_step(op);
}

static void on_append_read(UringReq *req, void *userdata) {
        AppendOp *op = userdata;
        ZoneSlot *sl = &op->dev->slots[op->zone];

        op->reading = false;
        if (op->call && !varlink_call_is_connected(op->call))
                return append_fail(op, -ECONNRESET, "the client went away");
        if (req->res < 0)
                return append_fail(op, req->res, "reading the data");
        if (req->res == 0)
                op->eof = true;
        op->fill += (size_t) req->res;
        op->appended += (size_t) req->res;
        if (sl->bytes_written + op->appended > sl->zone.capacity)
                return append_fail(op, -ENOSPC, "the data exceeds the zone's capacity");
        append_step(op);
}

static void on_append_write(UringReq *req, void *userdata) {
        AppendSlot *slot = userdata;
        AppendOp *op = slot->op;
        ZDev *d = op->dev;
        ZoneSlot *sl = &d->slots[op->zone];
        uint64_t off;
        int r;

        slot->busy = false;
        op->inflight--;
        if (op->cur == UINT_MAX)
                op->cur = (unsigned) (slot - op->slots);
        r = d->zbd ? d->zbd->ops->append_result(d->zbd, req, &off) : -ENODEV;
        if (r < 0)
                return append_fail(op, r, "writing the zone");
        if (off != slot->expect) {
                log_warning("%s: zone %u: an append landed at %llu instead of %llu.", d->id, op->zone,
                            (unsigned long long) off, (unsigned long long) slot->expect);
                return append_fail(op, -EILSEQ, "the device placed appends out of order");
        }
        if (off + slot->len > sl->zone.wp)
                sl->zone.wp = off + slot->len;
        if (sl->zone.cond == ZONE_COND_EMPTY)
                sl->zone.cond = ZONE_COND_IMP_OPEN;
        verify_kick(d, op->zone);
        if (op->call && varlink_call_wants_more(op->call) && op->appended - op->last_progress >= 4 * 1024 * 1024) {
                op->last_progress = op->appended;
                varlink_call_notify(op->call, json_pack("{s:I, s:o}", "bytesWritten",
                                                        (json_int_t) (sl->bytes_written + op->appended), "zone",
                                                        zone_json(d, op->zone)));
        }
        append_step(op);
}

static void append_step_map(AppendOp *op);
static void append_restart(AppendOp *op);

/* Records why the op cannot go on (the device gone; the client gone, if
 * asked to look); true if it must stop: it ends here once nothing is in
 * flight any more, else at the last completion. */
static bool append_stopped(AppendOp *op, bool client) {
        ZDev *d = op->dev;

        if (!op->error && (!d->zbd || d->gone)) {
                op->error = -ENODEV;
                op->error_what = "the device went away";
        }
        if (client && !op->error && op->call && !varlink_call_is_connected(op->call)) {
                op->error = -ECONNRESET;
                op->error_what = "the client went away";
        }
        if (!op->error)
                return false;
        if (op->inflight == 0 && !op->reading)
                append_finish(op, op->error, op->error_what);
        return true;
}

/* Sends len bytes of slot->buf to where the object continues (op->next_off)
 * and moves that on. -errno with *ret_what saying which step failed. */
static int slot_submit(AppendOp *op, AppendSlot *slot, uint32_t len, const char **ret_what) {
        ZDev *d = op->dev;
        int r;

        slot->req = (UringReq) { .cpu = -1 };
        r = d->zbd->ops->prep_append(d->zbd, d->slots[op->zone].zone.start, op->next_off, slot->buf, len,
                                     &slot->req);
        if (r < 0) {
                *ret_what = "preparing the write";
                return r;
        }
        slot->req.done = on_append_write;
        slot->req.userdata = slot;
        slot->len = len;
        slot->expect = op->next_off;
        r = uring_pool_submit(d->service->uring, &slot->req);
        if (r < 0) {
                *ret_what = "queueing the write";
                return r;
        }
        slot->busy = true;
        op->inflight++;
        op->next_off += len;
        return 0;
}

/* Moves the op on: reads into the current slot, writes full slots, and ends
 * it once the data is all out and nothing is in flight. */
static void append_step(AppendOp *op) {
        ZDev *d = op->dev;
        ZoneSlot *sl = &d->slots[op->zone];
        uint32_t bs;
        int r;

        if (op->map)
                return append_step_map(op);
        for (;;) {
                if (append_stopped(op, false))
                        return;
                if (op->eof && op->fill == 0) {
                        if (op->inflight == 0 && !op->reading)
                                append_finish(op, 0, NULL);
                        return;
                }
                if (op->cur == UINT_MAX || op->reading)
                        return; /* a completion brings us back */

                AppendSlot *slot = &op->slots[op->cur];
                bs = d->zbd->limits.block_size ? d->zbd->limits.block_size : 512;

                if (op->src_fd < 0 && !op->eof) { /* inline data: fill from memory */
                        size_t n = MIN(op->chunk - op->fill, op->inline_len - op->inline_pos);
                        memcpy(slot->buf + op->fill, op->inline_data + op->inline_pos, n);
                        op->fill += n;
                        op->inline_pos += n;
                        op->appended += n;
                        if (op->inline_pos == op->inline_len)
                                op->eof = true;
                        if (sl->bytes_written + op->appended > sl->zone.capacity) {
                                op->error = -ENOSPC;
                                op->error_what = "the data exceeds the zone's capacity";
                                continue;
                        }
                }
                if (op->fill < op->chunk && !op->eof) {
                        op->rreq = (UringReq) { .fd = op->src_fd, .op = URING_OP_READ, .offset = UINT64_MAX,
                                                .len = (uint32_t) (op->chunk - op->fill),
                                                .buf = slot->buf + op->fill, .cpu = -1,
                                                .done = on_append_read, .userdata = op };
                        r = uring_pool_submit(d->service->uring, &op->rreq);
                        if (r < 0) {
                                op->error = r;
                                op->error_what = "queueing a read";
                                continue;
                        }
                        op->reading = true;
                        return;
                }

                /* Whole blocks only; the seal's flush pads the last one. */
                size_t w = op->final ? (op->fill + bs - 1) / bs * bs : op->fill - op->fill % bs;
                if (w < op->fill && !op->final) {
                        /* Only at the end: the partial block waits. */
                        op->tail_len = (uint32_t) (op->fill - w);
                        op->tail = malloc(op->tail_len);
                        if (!op->tail) {
                                op->error = -ENOMEM;
                                op->error_what = "keeping the last block";
                                continue;
                        }
                        memcpy(op->tail, slot->buf + w, op->tail_len);
                }
                if (w == 0) {
                        op->fill = 0;
                        continue;
                }
                if (w > op->fill)
                        memset(slot->buf + op->fill, 0, w - op->fill);
                if (op->next_off + w > sl->zone.start + sl->zone.capacity) {
                        op->error = -ENOSPC;
                        op->error_what = "the data exceeds the zone's capacity";
                        continue;
                }
                r = slot_submit(op, slot, (uint32_t) w, &op->error_what);
                if (r < 0) {
                        op->error = r;
                        continue;
                }
                op->fill = 0;

                /* The next slot to fill, if one is free. */
                op->cur = UINT_MAX;
                for (unsigned i = 0; i < op->depth; i++)
                        if (!op->slots[i].busy) {
                                op->cur = i;
                                break;
                        }
        }
}

static void on_append_tail_read(UringReq *req, void *userdata) {
        AppendOp *op = userdata;

        op->reading = false;
        if (req->res < 0)
                return append_fail(op, req->res, "reading the data");
        if ((uint32_t) req->res != op->tail_len)
                return append_fail(op, -ENODATA, "reading the data: the file shrank");
        op->appended += op->tail_len;
        append_step(op);
}

/* The parts of the running stream that completed, in order: each must have
 * landed where the object continues. Moves the write pointer, feeds the
 * verification and the progress notifications. */
static void stream_progress(AppendOp *op) {
        ZDev *d = op->dev;
        ZoneSlot *sl = &d->slots[op->zone];
        UringStream *st = op->stream;
        uint32_t done = uring_stream_parts_done(st);
        uint64_t landed;

        for (; op->parts_seen < done; op->parts_seen++) {
                uint64_t po = (uint64_t) op->parts_seen * st->part_len, off;
                const UringStreamPart *p = &st->parts[op->parts_seen];
                uint32_t len = (uint32_t) MIN((uint64_t) st->part_len, st->req.len - po);
                UringReq t = { .offset = st->req.op == URING_OP_WRITE_STREAM ? p->result64 : sl->zone.start,
                               .len = len, .res = p->res, .result64 = p->result64, .nvme_status = p->nvme_status };
                int r = d->zbd ? d->zbd->ops->append_result(d->zbd, &t, &off) : -ENODEV;

                if (op->error)
                        continue;
                if (r < 0) {
                        op->error = r;
                        op->error_what = "writing the zone";
                        continue;
                }
                if (op->reordered)
                        continue;
                if (off != op->stream_base + po) {
                        log_warning("%s: zone %u: an append landed at %llu instead of %llu.", d->id, op->zone,
                                    (unsigned long long) off, (unsigned long long) (op->stream_base + po));
                        if (op->restartable && op->restarts == 0) {
                                op->reordered = true;
                                continue;
                        }
                        op->error = -EILSEQ;
                        op->error_what = "the device placed appends out of order";
                        continue;
                }
                if (off + t.len > sl->zone.wp)
                        sl->zone.wp = off + t.len;
                if (sl->zone.cond == ZONE_COND_EMPTY)
                        sl->zone.cond = ZONE_COND_IMP_OPEN;
        }
        if (!op->reordered)
                verify_kick(d, op->zone);
        landed = sl->zone.wp - sl->zone.start;
        if (op->call && varlink_call_wants_more(op->call) && landed - op->last_progress >= 4 * 1024 * 1024 &&
            !op->error) {
                op->last_progress = landed;
                varlink_call_notify(op->call, json_pack("{s:I, s:o}", "bytesWritten", (json_int_t) landed, "zone",
                                                        zone_json(d, op->zone)));
        }
}

static int on_stream_tick(sd_event_source *src, uint64_t usec, void *userdata) {
        AppendOp *op = userdata;

        stream_progress(op);
        (void) sd_event_source_set_time_relative(src, STREAM_TICK_USEC);
        return sd_event_source_set_enabled(src, SD_EVENT_ONESHOT);
}

static void on_append_stream(UringReq *req, void *userdata) {
        AppendOp *op = userdata;

        if (req->res == -EOPNOTSUPP && req->op == URING_OP_WRITE_STREAM && op->parts_seen == 0 &&
            uring_stream_parts_done(op->stream) == 0) {
                /* No ring for streams here (before 5.19): nothing was
                 * written; the same data goes as single writes. */
                uint64_t n = op->stream->req.len;

                log_debug("%s: zone %u: no write streams on this kernel, writing part by part.", op->dev->id,
                          op->zone);
                (void) sd_event_source_set_enabled(op->tick, SD_EVENT_OFF);
                free(op->stream->parts);
                op->stream = mfree(op->stream);
                op->inflight--;
                op->no_stream = true;
                op->next_off -= n;
                op->src_sent -= n;
                op->appended -= n;
                return append_step(op);
        }
        stream_progress(op);
        if (req->res < 0 && !op->error) {
                op->error = req->res;
                op->error_what = "writing the zone";
        }
        (void) sd_event_source_set_enabled(op->tick, SD_EVENT_OFF);
        free(op->stream->parts);
        op->stream = mfree(op->stream);
        op->inflight--;
        if (op->reordered && !op->error)
                return append_restart(op);
        append_step(op);
}

static void restart_run(void *data) {
        AppendOp *op = data;

        op->reset.r = op->reset.zbd->ops->reset(op->reset.zbd, op->reset.start);
}

static void restart_done(void *data, void *userdata) {
        AppendOp *op = data;
        ZDev *d = op->dev;
        ZSlotExtra *x = &d->extra[op->zone];
        ZoneSlot *sl = &d->slots[op->zone];

        op->inflight--;
        if (op->reset.r < 0)
                return append_fail(op, op->reset.r, "resetting the zone after appends landed out of order");
        sl->zone.wp = sl->zone.start;
        sl->zone.cond = ZONE_COND_EMPTY;
        x->verify_gen++; /* a verification job in flight read the old data */
        verify_forget(x);
        op->next_off = sl->zone.start;
        op->appended -= op->src_sent;
        op->src_sent = 0;
        op->last_progress = 0;
        op->reordered = false;
        op->restarts++;
        op->depth = 1;
        log_warning("%s: zone %u reset; writing the object again, one append in flight.", d->id, op->zone);
        append_step(op);
}

/* The zone held nothing but this object when it began: reset it, then write
 * the object again at depth 1. */
static void append_restart(AppendOp *op) {
        ZDev *d = op->dev;
        int r;

        if (!d->zbd || d->gone)
                return append_fail(op, -ENODEV, "the device went away");
        op->reset.zbd = d->zbd;
        op->reset.start = d->slots[op->zone].zone.start;
        op->reset.r = -ECANCELED;
        r = work_pool_submit(d->service->work, restart_run, restart_done, op, NULL);
        if (r < 0)
                return append_fail(op, r, "queueing a zone reset");
        op->inflight++;
}

/* Starts a stream of the next (up to STREAM_MAX) whole blocks. */
static int append_stream(AppendOp *op, uint64_t whole) {
        ZDev *d = op->dev;
        ZoneSlot *sl = &d->slots[op->zone];
        uint64_t n = MIN(whole - op->src_sent, (uint64_t) (STREAM_MAX - STREAM_MAX % op->chunk));
        UringStream *st;
        int r;

        if (op->next_off + n > sl->zone.start + sl->zone.capacity)
                return -ENOSPC;
        st = calloc(1, sizeof *st);
        if (!st)
                return -ENOMEM;
        r = d->zbd->ops->prep_stream(d->zbd, sl->zone.start, (uint8_t *) op->map + op->src_sent, (uint32_t) n,
                                     op->chunk, st);
        if (r >= 0) {
                st->parts = calloc(uring_stream_parts(st), sizeof *st->parts);
                if (!st->parts)
                        r = -ENOMEM;
        }
        if (r < 0) {
                free(st->parts);
                free(st);
                return r;
        }
        st->depth = op->depth;
        st->req.cpu = -1;
        st->req.done = on_append_stream;
        st->req.userdata = op;
        r = uring_pool_submit(d->service->uring, &st->req);
        if (r < 0) {
                free(st->parts);
                free(st);
                return r;
        }
        if (!op->tick) {
                r = sd_event_add_time_relative(d->service->event, &op->tick, CLOCK_MONOTONIC, STREAM_TICK_USEC,
                                               STREAM_TICK_USEC / 4, on_stream_tick, op);
                if (r < 0)
                        op->tick = NULL; /* progress comes at the end only */
        } else {
                (void) sd_event_source_set_time_relative(op->tick, STREAM_TICK_USEC);
                (void) sd_event_source_set_enabled(op->tick, SD_EVENT_ONESHOT);
        }
        op->stream = st;
        op->stream_base = op->next_off;
        op->parts_seen = 0;
        op->inflight++;
        op->next_off += n;
        op->src_sent += n;
        op->appended += n;
        return 0;
}

/* Map mode: whole blocks straight from the mapping, up to depth in flight;
 * the last partial block is read into op->tail for the next append or the
 * seal. */
static void append_step_map(AppendOp *op) {
        ZDev *d = op->dev;
        ZoneSlot *sl = &d->slots[op->zone];
        uint32_t bs;
        uint64_t whole;
        int r;

        if (append_stopped(op, true))
                return;
        bs = d->zbd->limits.block_size ? d->zbd->limits.block_size : 512;
        whole = op->src_size - op->src_size % bs;

        if (!op->tail_asked && whole < op->src_size) {
                op->tail_asked = true;
                op->tail_len = (uint32_t) (op->src_size - whole);
                op->tail = malloc(op->tail_len);
                if (!op->tail) {
                        op->tail_len = 0;
                        return append_fail(op, -ENOMEM, "keeping the last block");
                }
                op->rreq = (UringReq) { .fd = op->src_fd, .op = URING_OP_READ, .offset = op->src_pos + whole,
                                        .len = op->tail_len, .buf = op->tail, .cpu = -1,
                                        .done = on_append_tail_read, .userdata = op };
                r = uring_pool_submit(d->service->uring, &op->rreq);
                if (r < 0)
                        return append_fail(op, r, "queueing a read");
                op->reading = true;
        }
        if (d->zbd->ops->prep_stream && !op->no_stream) {
                if (!op->stream && op->src_sent < whole) {
                        r = append_stream(op, whole);
                        if (r < 0)
                                return append_fail(op, r, r == -ENOSPC ? "the data exceeds the zone's capacity" :
                                                                         "queueing the writes");
                }
        } else {
                for (unsigned i = 0; i < op->depth && op->src_sent < whole; i++) {
                        AppendSlot *slot = &op->slots[i];
                        uint32_t w = (uint32_t) MIN((uint64_t) op->chunk, whole - op->src_sent);

                        if (slot->busy)
                                continue;
                        if (op->next_off + w > sl->zone.start + sl->zone.capacity)
                                return append_fail(op, -ENOSPC, "the data exceeds the zone's capacity");
                        const char *what;

                        slot->buf = (uint8_t *) op->map + op->src_sent;
                        r = slot_submit(op, slot, w, &what);
                        if (r < 0)
                                return append_fail(op, r, what);
                        op->src_sent += w;
                        op->appended += w;
                }
        }
        if (op->src_sent == whole && op->inflight == 0 && !op->reading) {
                /* Consumed, as a read would have: the file offset moves past the data. */
                (void) lseek(op->src_fd, (off_t) (op->src_pos + op->src_size), SEEK_SET);
                append_finish(op, 0, NULL);
        }
}

/* An append op for zone z, its I/O shape from [Zones]; no buffers yet
 * (append_map() or append_bufs() decide). */
static AppendOp *append_new(ZDev *d, uint32_t z) {
        const ZonesConfig *c = &d->service->config;
        AppendOp *op = calloc(1, sizeof *op);
        uint32_t max = zbd_chunk_max(d->zbd);

        if (!op)
                return NULL;
        op->src_fd = -1;
        if (max == 0 || max > 1024 * 1024)
                max = 1024 * 1024;
        op->chunk = c->append_chunk && c->append_chunk < max ? c->append_chunk : max;
        /* Whole pages, so that every chunk of a mapped file is page-aligned. */
        if (op->chunk >= 4096)
                op->chunk -= op->chunk % 4096;
        /* The device picks the offset of a zone append: several in flight. */
        op->depth = 1;
        if (streq(d->zbd->ops->name, "nvme"))
                op->depth = c->append_depth ? MIN(c->append_depth, ZONES_APPEND_DEPTH_MAX) : ZONES_APPEND_DEPTH_DEFAULT;
        for (unsigned i = 0; i < op->depth; i++)
                op->slots[i].op = op;
        op->dev = d;
        op->zone = z;
        op->next_off = d->slots[z].zone.wp;
        d->extra[z].append = op;
        return op;
}

/* Copy and inline mode: a buffer per slot, the zone's carried tail first. */
static int append_bufs(AppendOp *op) {
        ZSlotExtra *x = &op->dev->extra[op->zone];

        for (unsigned i = 0; i < op->depth; i++)
                if (posix_memalign((void **) &op->slots[i].buf, 4096, op->chunk) != 0) {
                        op->slots[i].buf = NULL;
                        return -ENOMEM;
                }
        if (x->tail_len) {
                memcpy(op->slots[0].buf, x->tail, x->tail_len);
                op->fill = x->tail_len;
                x->tail = mfree(x->tail);
                x->tail_len = 0;
        }
        return 0;
}

/* Map mode if the fd allows it (see struct AppendOp): 1 if mapped, 0 for
 * copy mode, -errno (-EFBIG: more than the zone's capacity left). */
static int append_map(AppendOp *op) {
        const ZoneSlot *sl = &op->dev->slots[op->zone];
        struct stat st;
        off_t pos;
        void *p;

        if (op->dev->extra[op->zone].tail_len)
                return 0;
        if (fstat(op->src_fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0)
                return 0;
        pos = lseek(op->src_fd, 0, SEEK_CUR);
        if (pos < 0 || pos % 4096 || pos > st.st_size)
                return 0;
        op->src_pos = (uint64_t) pos;
        op->src_size = (uint64_t) (st.st_size - pos);
        if (sl->bytes_written + op->src_size > sl->zone.capacity)
                return -EFBIG;
        if (op->src_size == 0 || op->src_size > SIZE_MAX / 2)
                return 0;
        op->map_len = (size_t) op->src_size;
        p = mmap(NULL, op->map_len, PROT_READ, MAP_SHARED, op->src_fd, pos);
        if (p == MAP_FAILED) {
                log_debug_errno(errno, "%s: zone %u: cannot map the data (%m), reading it instead.", op->dev->id,
                                op->zone);
                op->map_len = 0;
                return 0;
        }
        op->map = p;
        op->eof = true;
        return 1;
}

static int lease_checks(ZoneService *s, VarlinkCall *call, const char *lease, ZDev **ret_d, uint32_t *ret_z) {
        ZDev *d;
        uint32_t z;
        int r;

        d = find_lease(s, lease, &z);
        if (!d) {
                error_lease(call, lease);
                return 0;
        }
        r = peer_may(call, &d->extra[z]);
        if (r < 0)
                return r;
        if (!r) {
                varlink_call_error(call, VARLINK_ERROR_PERMISSION_DENIED, NULL);
                return 0;
        }
        if (!d->zbd || d->gone) {
                varlink_call_error(call, "io.blkmqd.Zones.DeviceGone", json_pack("{s:s}", "deviceId", d->id));
                return 0;
        }
        if (d->extra[z].append || d->extra[z].busy || d->extra[z].releasing || d->extra[z].readers) {
                varlink_call_error(call, "io.blkmqd.Zones.LeaseBusy", json_pack("{s:s}", "lease", lease));
                return 0;
        }
        *ret_d = d;
        *ret_z = z;
        return 1;
}

static int method_append(VarlinkCall *call, json_t *params, void *userdata) {
        ZoneService *s = userdata;
        const char *lease = json_string_value(json_object_get(params, "lease"));
        json_t *jfd = json_object_get(params, "fd"), *jdata = json_object_get(params, "data");
        AppendOp *op;
        ZDev *d;
        uint32_t z;
        int r;

        if ((!jfd || json_is_null(jfd)) == (!jdata || json_is_null(jdata)))
                return varlink_call_error_invalid_parameter(call, jfd ? "data" : "fd");
        r = lease_checks(s, call, lease, &d, &z);
        if (r <= 0)
                return r;
        if (d->slots[z].state != ZONE_STATE_ALLOCATED && d->slots[z].state != ZONE_STATE_WRITING)
                return varlink_call_error(call, "io.blkmqd.Zones.WrongState",
                                          json_pack("{s:s, s:s}", "lease", lease, "state",
                                                    zone_state_to_string(d->slots[z].state)));
        _cleanup_free_ uint8_t *inl = NULL;
        size_t inl_len = 0;
        int src = -EBADF;
        if (jdata && !json_is_null(jdata)) {
                r = base64_decode(json_string_value(jdata), &inl, &inl_len);
                if (r == -ENOMEM)
                        return r;
                if (r < 0 || inl_len > INLINE_MAX)
                        return varlink_call_error_invalid_parameter(call, "data");
        } else {
                json_int_t idx = json_integer_value(jfd);
                src = idx < 0 ? -EBADF : varlink_call_take_fd(call, (unsigned) idx);
                if (src < 0)
                        return varlink_call_error_invalid_parameter(call, "fd");
        }
        op = append_new(d, z);
        if (!op) {
                if (src >= 0)
                        close(src);
                return -ENOMEM;
        }
        op->src_fd = src;
        op->inline_data = TAKE_PTR(inl);
        op->inline_len = inl_len;
        r = src >= 0 ? append_map(op) : 0;
        if (r == 0)
                r = append_bufs(op);
        if (r < 0) {
                /* Nothing was written, nothing changes. */
                uint64_t size = d->slots[z].bytes_written + d->extra[z].tail_len + op->src_size;

                d->extra[z].append = NULL;
                append_free(op);
                if (r == -EFBIG)
                        return varlink_call_error(call, "io.blkmqd.Zones.TooLarge",
                                                  json_pack("{s:I, s:I}", "size", (json_int_t) size, "capacity",
                                                            (json_int_t) d->slots[z].zone.capacity));
                return r;
        }
        op->call = varlink_call_ref(call);
        op->restartable = op->map && d->slots[z].bytes_written == 0 && d->slots[z].zone.wp == d->slots[z].zone.start;
        log_debug("%s: zone %u: appending %s, writes of %u KiB, up to %u in flight.", d->id, z,
                  op->map ? "from a mapped file" : src >= 0 ? "from a stream (copied)" : "inline data",
                  op->chunk / 1024, op->depth);
        if (d->slots[z].state == ZONE_STATE_ALLOCATED) {
                /* Recorded before the data lands: after a crash, reconcile
                 * knows the zone was being written. */
                d->slots[z].state = ZONE_STATE_WRITING;
                (void) record(d, z, NULL, NULL, NULL, NULL);
        }
        append_step(op);
        return 0;
}

/* ---- verification ----
 *
 * What has landed is read back and hashed behind the appends, on the work
 * pool, VERIFY_STEP (or a quarter of a small zone) at a time, while later
 * data is still being written: the seal then reads back only the rest. It is still a read of the device
 * after the write completed, as a seal-time read would be. The running
 * digest lives in the zone's extra (vsha over the first `verified` bytes);
 * a job in flight owns it. Any failure drops it, and the seal reads the
 * whole zone back. */

#define VERIFY_STEP (4U * 1024 * 1024)
#define VERIFY_BUF (1024U * 1024)

typedef struct VerifyJob {
        ZDev *dev;
        uint32_t zone;
        Zbd *zbd;
        uint64_t start;    /* the zone's start */
        uint64_t from, to; /* bytes of the zone to read and hash */
        Sha256 sha;        /* over [0, from) on entry */
        unsigned gen;      /* the zone's verify_gen when started */
        bool ran;
        int r;
} VerifyJob;

static int hash_consume(const uint8_t *buf, size_t n, void *userdata) {
        sha256_update(userdata, buf, n);
        return 0;
}

/* Worker side: reads [from, to) of the zone and hashes it into sha, the
 * next chunk read while this one is hashed (where hashing is the slower,
 * as without SHA extensions, the read-back then costs nothing). */
static int verify_hash(Zbd *zbd, uint64_t start, uint64_t from, uint64_t to, Sha256 *sha) {
        return zbd_read_each(zbd, start + from, to - from, VERIFY_BUF, hash_consume, sha);
}

static void verify_run(void *data) {
        VerifyJob *j = data;

        j->ran = true;
        j->r = verify_hash(j->zbd, j->start, j->from, j->to, &j->sha);
}

static void verify_forget(ZSlotExtra *x) {
        sha256_done(&x->vsha);
        x->verified = 0;
}

static void seal_submit(SealJob *j);
static void verify_done(void *data, void *userdata);

/* Starts a verification job if enough has landed and none runs. */
static void verify_kick(ZDev *d, uint32_t z) {
        ZSlotExtra *x = &d->extra[z];
        const ZoneSlot *sl = &d->slots[z];
        uint64_t landed = sl->zone.wp - sl->zone.start;
        VerifyJob *j;

        /* busy: sealing, its flush writes padding that is not data. */
        if (!d->service->config.verify_while_writing || x->verify || x->busy || !d->zbd || d->gone ||
            sl->state != ZONE_STATE_WRITING || d->service->freeing ||
            landed < x->verified + MIN((uint64_t) VERIFY_STEP, MAX(sl->zone.capacity / 4, (uint64_t) 65536)))
                return;
        if (!x->vsha.ctx) {
                x->verified = 0;
                if (sha256_init(&x->vsha) < 0)
                        return;
        }
        j = calloc(1, sizeof *j);
        if (!j)
                return;
        *j = (VerifyJob) { .dev = d, .zone = z, .zbd = d->zbd, .start = sl->zone.start, .from = x->verified,
                           .to = landed, .sha = x->vsha, .gen = x->verify_gen };
        x->vsha = (Sha256) {};
        x->verify = j;
        if (work_pool_submit(d->service->verifier, verify_run, verify_done, j, NULL) < 0) {
                x->vsha = j->sha;
                x->verify = NULL;
                free(j);
        }
}

static void verify_done(void *data, void *userdata) {
        VerifyJob *j = data;
        ZDev *d = j->dev;
        uint32_t z = j->zone;
        ZSlotExtra *x = &d->extra[z];

        x->verify = NULL;
        if (!j->ran || j->r < 0 || d->slots[j->zone].state != ZONE_STATE_WRITING || j->gen != x->verify_gen) {
                if (j->ran && j->r < 0)
                        log_warning_errno(j->r, "%s: zone %u: reading back what landed failed, the seal will "
                                          "read it all: %m", d->id, j->zone);
                sha256_done(&j->sha);
                verify_forget(x);
        } else {
                x->vsha = j->sha;
                x->verified = j->to;
        }
        free(j);
        if (x->seal_wait && d->service->freeing)
                /* The main work pool is gone already. */
                seal_fail(TAKE_PTR(x->seal_wait), -ESHUTDOWN, "verifying the zone");
        else if (x->seal_wait)
                seal_submit(TAKE_PTR(x->seal_wait));
        else
                verify_kick(d, z);
        zdev_settle(d);
}

/* ---- seal ---- */

struct SealJob {
        ZDev *dev;
        uint32_t zone;
        VarlinkCall *call;
        Zbd *zbd;
        uint64_t start, verified, size;
        Sha256 sha;  /* over the first verified bytes */
        char expected[65];
        char actual[65];
        int r;       /* -ECANCELED until seal_run ran */
        const char *what;
};

static void seal_run(void *data) {
        SealJob *j = data;
        uint8_t digest[SHA256_DIGEST_SIZE];

        j->r = verify_hash(j->zbd, j->start, j->verified, j->size, &j->sha);
        if (j->r < 0) {
                j->what = "reading the zone back";
                return;
        }
        sha256_final(&j->sha, digest);
        sha256_hex(digest, j->actual);
        if (strcasecmp(j->actual, j->expected) != 0) {
                /* Kept for inspection, but finished: a failed zone must not
                 * hold one of the device's active resources. */
                (void) j->zbd->ops->finish(j->zbd, j->start);
                j->r = -EBADMSG;
                return;
        }
        /* Finishing frees the zone's active resource. */
        j->r = j->zbd->ops->finish(j->zbd, j->start);
        if (j->r < 0)
                j->what = "finishing the zone";
}

static void seal_done(void *data, void *userdata) {
        SealJob *j = data;
        ZDev *d = j->dev;
        ZoneSlot *sl = &d->slots[j->zone];
        ZSlotExtra *x = &d->extra[j->zone];

        x->busy = false;
        sha256_done(&j->sha);
        if (j->r == -EBADMSG) {
                log_warning("%s: zone %u does not verify: expected %s, read back %s.", d->id, j->zone, j->expected,
                            j->actual);
                sl->state = ZONE_STATE_FAILED;
                sl->zone.cond = ZONE_COND_FULL;
                sl->zone.wp = sl->zone.start + sl->zone.capacity;
                (void) free_and_strdup(&x->note, "checksum mismatch at seal");
                (void) record(d, j->zone, j->call, NULL, "io.blkmqd.Zones.ChecksumMismatch",
                              json_pack("{s:s, s:s}", "expected", j->expected, "actual", j->actual));
        } else if (j->r < 0) {
                error_io(j->call, j->r, j->what ? j->what : "verifying the zone");
        } else {
                sl->state = ZONE_STATE_SEALED;
                sl->zone.cond = ZONE_COND_FULL;
                sl->zone.wp = sl->zone.start + sl->zone.capacity;
                (void) free_and_strdup(&x->sha256, j->actual);
                x->sealed_usec = now_usec(CLOCK_REALTIME);
                log_info("%s: zone %u sealed, %llu bytes (%llu of them verified while written), sha256 %s.",
                         d->id, j->zone, (unsigned long long) sl->bytes_written, (unsigned long long) j->verified,
                         j->actual);
                (void) record(d, j->zone, j->call, json_pack("{s:o}", "zone", zone_json(d, j->zone)), NULL, NULL);
        }
        varlink_call_unref(j->call);
        free(j);
        zdev_settle(d);
}

static void seal_fail(SealJob *j, int r, const char *what);

/* After the flush: waits for a verification job in flight, then reads back
 * and hashes what it has not covered. */
static void seal_submit(SealJob *j) {
        ZDev *d = j->dev;
        ZSlotExtra *x = &d->extra[j->zone];
        const ZoneSlot *sl = &d->slots[j->zone];
        int r;

        if (x->verify) {
                x->seal_wait = j;
                return;
        }
        if (!d->zbd || d->gone)
                return seal_fail(j, -ENODEV, "the device went away");
        j->zbd = d->zbd;
        j->start = sl->zone.start;
        j->size = sl->bytes_written;
        if (x->vsha.ctx && x->verified <= j->size) {
                j->sha = x->vsha;
                x->vsha = (Sha256) {};
                j->verified = x->verified;
        } else {
                r = sha256_init(&j->sha);
                if (r < 0)
                        return seal_fail(j, r, "setting up SHA-256");
        }
        verify_forget(x);
        j->r = -ECANCELED;
        r = work_pool_submit(d->service->work, seal_run, seal_done, j, NULL);
        if (r < 0)
                seal_fail(j, r, "queueing the verification");
}

static void seal_fail(SealJob *j, int r, const char *what) {
        ZDev *d = j->dev;

        d->extra[j->zone].busy = false;
        sha256_done(&j->sha);
        error_io(j->call, r, what);
        varlink_call_unref(j->call);
        free(j);
        zdev_settle(d);
}

static int method_seal(VarlinkCall *call, json_t *params, void *userdata) {
        ZoneService *s = userdata;
        const char *lease = json_string_value(json_object_get(params, "lease"));
        const char *sha = json_string_value(json_object_get(params, "sha256"));
        SealJob *j;
        ZDev *d;
        uint32_t z;
        int r;

        if (strlen(sha) != 64 || strspn(sha, "0123456789abcdefABCDEF") != 64)
                return varlink_call_error_invalid_parameter(call, "sha256");
        r = lease_checks(s, call, lease, &d, &z);
        if (r <= 0)
                return r;
        if (d->slots[z].state != ZONE_STATE_WRITING || d->slots[z].bytes_written == 0)
                return varlink_call_error(call, "io.blkmqd.Zones.WrongState",
                                          json_pack("{s:s, s:s}", "lease", lease, "state",
                                                    zone_state_to_string(d->slots[z].state)));
        j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        j->dev = d;
        j->zone = z;
        j->call = varlink_call_ref(call);
        memcpy(j->expected, sha, 65);
        for (char *c = j->expected; *c; c++)
                if (*c >= 'A' && *c <= 'F')
                        *c += 'a' - 'A';
        d->extra[z].busy = true;
        if (d->extra[z].tail_len) {
                /* The partial last block goes out first, padded. */
                AppendOp *op = append_new(d, z);
                if (!op || append_bufs(op) < 0) {
                        if (op) {
                                d->extra[z].append = NULL;
                                append_free(op);
                        }
                        seal_fail(j, -ENOMEM, "flushing the last block");
                        return 0;
                }
                op->final = true;
                op->eof = true;
                op->seal = j;
                append_step(op);
                return 0;
        }
        seal_submit(j);
        return 0;
}

typedef struct ReleaseOp {
        ZDev *dev;
        uint32_t zone;
        VarlinkCall *call;
} ReleaseOp;

/* The "releasing" record is durable: only now may the zone's data go. Until
 * then the zone stays sealed under its lease, in memory as on disk, so a
 * kill -9 at any point leaves a record that matches the device: sealed with
 * the data, or releasing (and the reset is done again at start). */
static void release_committed(int r, void *userdata) {
        _cleanup_free_ ReleaseOp *op = userdata;
        ZDev *d = op->dev;
        uint32_t z = op->zone;
        ZSlotExtra *x = &d->extra[z];

        x->releasing = false;
        if (r < 0) {
                log_warning_errno(r, "%s: zone %u: the release could not be made durable; the lease is kept: %m", d->id,
                                  z);
                (void) error_io(op->call, r, "the release could not be made durable; the lease is kept");
                varlink_call_unref(op->call);
                return;
        }
        test_kill_point("durable:io.blkmqd.Zones.Release");
        d->slots[z].state = ZONE_STATE_RELEASING;
        x->lease = mfree(x->lease);
        x->label = mfree(x->label);
        x->owner_uid = ZONE_DB_UID_INVALID;
        x->scrub_usec = 0;
        sha256_done(&x->vsha); /* a job in flight drops its own */
        x->verified = 0;
        log_info("%s: zone %u released; reset queued.", d->id, z);
        (void) varlink_call_reply(op->call, json_pack("{s:o}", "zone", zone_json(d, z)));
        varlink_call_unref(op->call);
        if (!d->service->freeing)
                maybe_reset(d, false);
}

static int method_release(VarlinkCall *call, json_t *params, void *userdata) {
        ZoneService *s = userdata;
        const char *lease = json_string_value(json_object_get(params, "lease"));
        ReleaseOp *op;
        ZoneRecord rec;
        ZDev *d;
        uint32_t z;
        int r;

        r = lease_checks(s, call, lease, &d, &z);
        if (r <= 0)
                return r;
        op = calloc(1, sizeof *op);
        if (!op)
                return -ENOMEM;
        *op = (ReleaseOp) { .dev = d, .zone = z, .call = varlink_call_ref(call) };
        rec = record_of(d, z);
        rec.state = (char *) zone_state_to_string(ZONE_STATE_RELEASING);
        rec.lease = NULL;
        rec.label = NULL;
        rec.owner_uid = ZONE_DB_UID_INVALID;
        d->extra[z].releasing = true;
        r = zone_db_put(s->db, &rec, release_committed, op);
        if (r < 0)
                release_committed(r, op);
        return 0;
}

static int method_get(VarlinkCall *call, json_t *params, void *userdata) {
        ZoneService *s = userdata;
        const char *lease = json_string_value(json_object_get(params, "lease"));
        const char *name = json_string_value(json_object_get(params, "device"));
        json_t *jidx = json_object_get(params, "zoneIndex");
        ZDev *d;
        uint32_t z;

        if (lease) {
                d = find_lease(s, lease, &z);
                if (!d)
                        return error_lease(call, lease);
        } else {
                if (!name)
                        return varlink_call_error_invalid_parameter(call, "lease");
                d = find_dev(s, name);
                if (!d)
                        return error_device(call, name);
                if (!jidx || json_integer_value(jidx) < 0 || (size_t) json_integer_value(jidx) >= d->n)
                        return varlink_call_error_invalid_parameter(call, "zoneIndex");
                z = (uint32_t) json_integer_value(jidx);
        }
        return varlink_call_reply(call, json_pack("{s:o}", "zone", zone_json(d, z)));
}

/* ---- objects: find by label, read back, verify, scrub ----
 *
 * A sealed zone holds one object: its label, size, SHA-256 and lease. A
 * Read writes it into a descriptor the client passed, hashing on the way;
 * Verify and the background scrub read it and hash it only. All three run
 * on a worker thread (the reads block, and so may a write into a client's
 * pipe), while the zone counts a reader: no Release, reset or second write
 * meanwhile. A mismatch or a read error is kept with the zone (its scrub
 * result, logged at error level, and the note of its record) and never
 * repaired: the object is the stager's to replace. */

#define READ_BUF (1024U * 1024)
#define READ_CLIENT_TIMEOUT_MSEC (30 * 1000)
#define SCRUB_TICK_USEC (10ULL * 1000000)
#define READ_PROGRESS_USEC (250ULL * 1000)

static bool is_object(const ZDev *d, uint32_t i) {
        return d->slots[i].state == ZONE_STATE_SEALED && d->extra[i].lease && d->extra[i].sha256;
}

static json_t *object_json(const ZDev *d, uint32_t i) {
        const ZoneSlot *sl = &d->slots[i];
        const ZSlotExtra *x = &d->extra[i];
        json_t *o = json_pack("{s:I, s:s, s:s, s:s, s:i, s:I, s:I, s:I}", "size", (json_int_t) sl->bytes_written,
                              "sha256", x->sha256, "lease", x->lease, "deviceId", d->id, "zoneIndex", (int) i,
                              "startLba", (json_int_t) (sl->zone.start / 512), "start", (json_int_t) sl->zone.start,
                              "sealedUsec", (json_int_t) x->sealed_usec);
        if (!o)
                return NULL;
        if (x->label)
                json_object_set_new(o, "label", json_string(x->label));
        if (x->owner_uid != ZONE_DB_UID_INVALID)
                json_object_set_new(o, "ownerUid", json_integer(x->owner_uid));
        if (d->sysname)
                json_object_set_new(o, "device", json_string(d->sysname));
        if (x->scrub_usec)
                json_object_set_new(o, "scrub", scrub_json(x));
        return o;
}

/* Sealed objects labelled label, on only (if given): how many, and the first. */
static size_t objects_labelled(ZoneService *s, const char *label, const ZDev *only, ZDev **ret_d, uint32_t *ret_z) {
        size_t n = 0;

        for (size_t i = 0; i < s->n_devs; i++) {
                ZDev *d = s->devs[i];
                if (only && d != only)
                        continue;
                for (size_t k = 0; k < d->n; k++)
                        if (is_object(d, (uint32_t) k) && streq_ptr(d->extra[k].label, label) && n++ == 0) {
                                *ret_d = d;
                                *ret_z = (uint32_t) k;
                        }
        }
        return n;
}

static int method_list_objects(VarlinkCall *call, json_t *params, void *userdata) {
        ZoneService *s = userdata;
        const char *name = json_string_value(json_object_get(params, "device"));
        const char *label = json_string_value(json_object_get(params, "label"));
        const ZDev *only = NULL;
        json_t *a = json_array();

        if (name && !(only = find_dev(s, name))) {
                json_decref(a);
                return error_device(call, name);
        }
        for (size_t i = 0; i < s->n_devs; i++) {
                const ZDev *d = s->devs[i];
                if (only && d != only)
                        continue;
                for (size_t k = 0; k < d->n; k++)
                        if (is_object(d, (uint32_t) k) && (!label || streq_ptr(d->extra[k].label, label)))
                                json_array_append_new(a, object_json(d, (uint32_t) k));
        }
        return varlink_call_reply(call, json_pack("{s:o}", "objects", a));
}

/* The sealed object a call names, by lease or by label (and device).
 * Returns 1 with *ret_d and *ret_z; 0 once it replied with the error. */
static int object_lookup(ZoneService *s, VarlinkCall *call, json_t *params, bool check_peer, ZDev **ret_d,
                         uint32_t *ret_z) {
        const char *lease = json_string_value(json_object_get(params, "lease"));
        const char *label = json_string_value(json_object_get(params, "label"));
        const char *name = json_string_value(json_object_get(params, "device"));
        ZDev *d = NULL, *only = NULL;
        uint32_t z = 0;
        int r;

        if (lease && label)
                return varlink_call_error_invalid_parameter(call, "label"), 0;
        if (lease) {
                d = find_lease(s, lease, &z);
                if (!d)
                        return error_lease(call, lease), 0;
                if (!is_object(d, z))
                        return varlink_call_error(call, "io.blkmqd.Zones.WrongState",
                                                  json_pack("{s:s, s:s}", "lease", lease, "state",
                                                            zone_state_to_string(d->slots[z].state))),
                               0;
        } else if (label) {
                size_t n;
                if (name && !(only = find_dev(s, name)))
                        return error_device(call, name), 0;
                n = objects_labelled(s, label, only, &d, &z);
                if (n == 0)
                        return varlink_call_error(call, "io.blkmqd.Zones.LabelNotFound",
                                                  json_pack("{s:s}", "label", label)),
                               0;
                if (n > 1)
                        return varlink_call_error(call, "io.blkmqd.Zones.LabelNotUnique",
                                                  json_pack("{s:s, s:i}", "label", label, "count", (int) n)),
                               0;
        } else
                return varlink_call_error_invalid_parameter(call, "lease"), 0;
        if (check_peer) {
                r = peer_may(call, &d->extra[z]);
                if (r < 0)
                        return r;
                if (!r)
                        return varlink_call_error(call, VARLINK_ERROR_PERMISSION_DENIED, NULL), 0;
        }
        if (!d->zbd || d->gone)
                return varlink_call_error(call, "io.blkmqd.Zones.DeviceGone", json_pack("{s:s}", "deviceId", d->id)),
                       0;
        *ret_d = d;
        *ret_z = z;
        return 1;
}

static int method_find(VarlinkCall *call, json_t *params, void *userdata) {
        ZDev *d;
        uint32_t z;
        int r;

        r = object_lookup(userdata, call, params, false, &d, &z);
        if (r <= 0)
                return r;
        return varlink_call_reply(call, json_pack("{s:o}", "object", object_json(d, z)));
}

typedef struct ObjectBatch ObjectBatch;

typedef struct ReadJob {
        ZDev *dev;
        uint32_t zone;
        Zbd *zbd;
        uint64_t start, size;
        int fd;                 /* the client's, or -1: hash only */
        uint64_t rate;          /* bytes/s, 0: as fast as it goes */
        bool idle;              /* idle I/O priority (the scrub) */
        VarlinkCall *call;      /* Read */
        ObjectBatch *batch;     /* Verify */
        sd_event_source *tick;  /* Read with "more": progress */
        _Atomic uint64_t bytes; /* read so far (worker writes, loop reads) */
        _Atomic bool cancel;    /* the client went away */
        char expected[65], actual[65];
        const char *what;
        bool ran;
        int r;
} ReadJob;

struct ObjectBatch {
        VarlinkCall *call;
        unsigned pending;
        size_t n;
        struct { ZDev *dev; uint32_t zone; } *zones;
};

/* Writes all of buf into a client's descriptor, which may be a pipe or a
 * socket that does not drain: waits at most READ_CLIENT_TIMEOUT_MSEC for
 * room, in slices, so that a client going away is seen. */
static int write_client(ReadJob *j, const uint8_t *buf, size_t n) {
        unsigned waited = 0;

        while (n > 0) {
                ssize_t w = write(j->fd, buf, n);
                if (w > 0) {
                        buf += w;
                        n -= (size_t) w;
                        waited = 0;
                        continue;
                }
                if (w < 0 && errno != EAGAIN && errno != EINTR)
                        return -errno;
                if (atomic_load(&j->cancel))
                        return -ECONNRESET;
                if (waited >= READ_CLIENT_TIMEOUT_MSEC)
                        return -ETIMEDOUT;
                struct pollfd p = { .fd = j->fd, .events = POLLOUT };
                (void) poll(&p, 1, 250);
                waited += 250;
        }
        return 0;
}

#define IOPRIO_CLASS_IDLE_VALUE (3 << 13) /* IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0) */

typedef struct ReadRun {
        ReadJob *job;
        Sha256 *sha;
        uint64_t off, t0;
} ReadRun;

/* One chunk read back: hashed, written to the client, paced. */
static int read_consume(const uint8_t *buf, size_t n, void *userdata) {
        ReadRun *rr = userdata;
        ReadJob *j = rr->job;
        int r;

        sha256_update(rr->sha, buf, n);
        if (j->fd >= 0) {
                r = write_client(j, buf, n);
                if (r < 0) {
                        j->what = r == -ETIMEDOUT ? "the client stopped reading"
                                                  : "writing into the client's file descriptor";
                        return r;
                }
        }
        rr->off += n;
        atomic_store(&j->bytes, rr->off);
        if (atomic_load(&j->cancel)) {
                j->what = NULL;
                return -ECONNRESET;
        }
        if (j->rate) {
                /* Paced: off bytes may take off / rate seconds. */
                uint64_t due = rr->t0 + rr->off * 1000000 / j->rate, now = now_usec(CLOCK_MONOTONIC);
                if (due > now)
                        (void) usleep((useconds_t) MIN(due - now, (uint64_t) 1000000));
        }
        return 0;
}

static void read_run(void *data) {
        ReadJob *j = data;
        _cleanup_sha256_ Sha256 sha = {};
        uint8_t digest[SHA256_DIGEST_SIZE];
        ReadRun rr = { .job = j, .sha = &sha, .t0 = now_usec(CLOCK_MONOTONIC) };
        int r;

        j->ran = true;
        if (j->idle)
                /* ioprio_set(IOPRIO_WHO_PROCESS, this thread): below the workload. */
                (void) syscall(SYS_ioprio_set, 1, 0, IOPRIO_CLASS_IDLE_VALUE);
        r = sha256_init(&sha);
        if (r < 0) {
                j->r = r;
                return;
        }
        /* The next chunk is read while this one is hashed and written. */
        j->what = "reading the zone";
        r = zbd_read_each(j->zbd, j->start, j->size, READ_BUF, read_consume, &rr);
        if (r < 0) {
                j->r = r;
                return;
        }
        j->what = NULL;
        sha256_final(&sha, digest);
        sha256_hex(digest, j->actual);
        j->r = strcasecmp(j->actual, j->expected) == 0 ? 0 : -EBADMSG;
}

/* Keeps what a read found with the zone: its scrub result and, for a
 * mismatch or read error, an error line, a note in its record and the
 * count in the metrics. Never repairs anything. */
static void alert(ZoneService *s, const char *event, const char *device, const char *detail) {
        if (s->alert_cb)
                s->alert_cb(event, device, detail, s->alert_userdata);
}

void zone_service_set_alert_cb(ZoneService *s, zone_alert_cb_t cb, void *userdata) {
        if (!s)
                return;
        s->alert_cb = cb;
        s->alert_userdata = userdata;
}

static void scrub_note(ZDev *d, uint32_t z, ReadJob *j) {
        ZSlotExtra *x = &d->extra[z];
        bool was_bad = x->scrub_usec && x->scrub_result < 0;
        int x_prev_result = x->scrub_result;
        char note[192];

        if (j->r < 0 && j->r != -EBADMSG && (j->fd >= 0 || j->r == -ECONNRESET || j->r == -ECANCELED))
                return; /* the client's side failed, or the read never ran: says nothing about the zone */
        x->scrub_usec = now_usec(CLOCK_REALTIME);
        x->scrub_result = j->r;
        d->service->scrubbed++;
        if (j->r == 0) {
                if (was_bad) {
                        log_notice("%s: zone %u (%s) reads back to its SHA-256 again.", d->id, z, strna(x->label));
                        snprintf(note, sizeof note, "zone %u (%s, lease %s) reads back to its SHA-256 again", z,
                                 strna(x->label), x->lease);
                        alert(d->service, "objectIntact", d->id, note);
                }
                return;
        }
        d->service->scrub_errors++;
        if (was_bad && x_prev_result == j->r)
                log_debug("%s: zone %u (%s): still %s.", d->id, z, strna(x->label),
                          j->r == -EBADMSG ? "not matching its SHA-256" : "unreadable");
        else {
                if (j->r == -EBADMSG) {
                        log_error("%s: zone %u (%s, lease %s) no longer matches its SHA-256: recorded %s, read %s. "
                                  "Not repaired: stage the object again.",
                                  d->id, z, strna(x->label), x->lease, j->expected, j->actual);
                        snprintf(note, sizeof note, "zone %u (%s, lease %s): SHA-256 mismatch, not repaired", z,
                                 strna(x->label), x->lease);
                } else {
                        log_error_errno(j->r, "%s: zone %u (%s, lease %s) cannot be read back: %m", d->id, z,
                                        strna(x->label), x->lease);
                        snprintf(note, sizeof note, "zone %u (%s, lease %s): read error: %s", z, strna(x->label),
                                 x->lease, strerror(-j->r));
                }
                alert(d->service, "objectDamaged", d->id, note);
        }
        if (j->r == -EBADMSG)
                snprintf(note, sizeof note, "scrub: SHA-256 mismatch, read %.16s…", j->actual);
        else
                snprintf(note, sizeof note, "scrub: read error: %s", strerror(-j->r));
        if (!streq_ptr(x->note, note)) {
                (void) free_and_strdup(&x->note, note);
                (void) record(d, z, NULL, NULL, NULL, NULL);
        }
}

static void batch_finish(ObjectBatch *b) {
        json_t *a = json_array();

        for (size_t i = 0; i < b->n; i++)
                if (is_object(b->zones[i].dev, b->zones[i].zone))
                        json_array_append_new(a, object_json(b->zones[i].dev, b->zones[i].zone));
        (void) varlink_call_reply(b->call, json_pack("{s:o}", "objects", a));
        varlink_call_unref(b->call);
        free(b->zones);
        free(b);
}

static void read_done(void *data, void *userdata) {
        ReadJob *j = data;
        ZDev *d = j->dev;
        ZSlotExtra *x = &d->extra[j->zone];

        x->readers--;
        if (!j->ran)
                j->r = -ECANCELED;
        scrub_note(d, j->zone, j);
        if (j->call) {
                if (j->r == 0)
                        (void) varlink_call_reply(j->call, json_pack("{s:I, s:s, s:o}", "bytes", (json_int_t) j->size,
                                                                     "sha256", j->actual, "object",
                                                                     object_json(d, j->zone)));
                else if (j->r == -EBADMSG)
                        (void) varlink_call_error(j->call, "io.blkmqd.Zones.ChecksumMismatch",
                                                  json_pack("{s:s, s:s}", "expected", j->expected, "actual",
                                                            j->actual));
                else
                        (void) error_io(j->call, j->r, j->what ? j->what : "reading the object back");
                varlink_call_set_disconnect_callback(j->call, NULL, NULL);
                varlink_call_unref(j->call);
        } else if (j->batch) {
                if (--j->batch->pending == 0)
                        batch_finish(j->batch);
        } else
                d->service->scrubbing = false;
        sd_event_source_disable_unref(j->tick);
        if (j->fd >= 0)
                close(j->fd);
        free(j);
        zdev_settle(d);
}

static ReadJob *read_job_new(ZDev *d, uint32_t z) {
        ReadJob *j = calloc(1, sizeof *j);

        if (!j)
                return NULL;
        j->dev = d;
        j->zone = z;
        j->zbd = d->zbd;
        j->start = d->slots[z].zone.start;
        j->size = d->slots[z].bytes_written;
        j->fd = -EBADF;
        snprintf(j->expected, sizeof j->expected, "%s", d->extra[z].sha256);
        return j;
}

static int read_submit(ReadJob *j, WorkPool *pool) {
        int r = work_pool_submit(pool, read_run, read_done, j, NULL);
        if (r >= 0)
                j->dev->extra[j->zone].readers++;
        return r;
}

static void read_client_gone(VarlinkCall *call, void *userdata) {
        ReadJob *j = userdata;
        atomic_store(&j->cancel, true);
}

static int read_progress(sd_event_source *es, uint64_t usec, void *userdata) {
        ReadJob *j = userdata;

        (void) varlink_call_notify(j->call, json_pack("{s:I}", "bytes", (json_int_t) atomic_load(&j->bytes)));
        (void) sd_event_source_set_time_relative(es, READ_PROGRESS_USEC);
        return sd_event_source_set_enabled(es, SD_EVENT_ONESHOT);
}

static int method_read(VarlinkCall *call, json_t *params, void *userdata) {
        ZoneService *s = userdata;
        json_t *jfd = json_object_get(params, "fd");
        _cleanup_close_ int fd = -EBADF;
        ReadJob *j;
        ZDev *d;
        uint32_t z;
        int r;

        if (!json_is_integer(jfd) || json_integer_value(jfd) < 0 || json_integer_value(jfd) > INT_MAX)
                return varlink_call_error_invalid_parameter(call, "fd");
        fd = varlink_call_take_fd(call, (unsigned) json_integer_value(jfd));
        if (fd < 0)
                return varlink_call_error_invalid_parameter(call, "fd");
        r = object_lookup(s, call, params, true, &d, &z);
        if (r <= 0)
                return r;
        j = read_job_new(d, z);
        if (!j)
                return -ENOMEM;
        j->fd = TAKE_FD(fd);
        j->call = varlink_call_ref(call);
        varlink_call_set_disconnect_callback(call, read_client_gone, j);
        if (varlink_call_wants_more(call))
                (void) sd_event_add_time_relative(s->event, &j->tick, CLOCK_MONOTONIC, READ_PROGRESS_USEC, 0,
                                                  read_progress, j);
        log_debug("%s: zone %u (%s): reading %llu bytes back into the caller's descriptor.", d->id, z, strna(d->extra[z].label),
                  (unsigned long long) j->size);
        r = read_submit(j, s->work);
        if (r < 0) {
                varlink_call_set_disconnect_callback(call, NULL, NULL);
                varlink_call_unref(j->call);
                sd_event_source_disable_unref(j->tick);
                close(j->fd);
                free(j);
                return error_io(call, r, "starting the read");
        }
        return 0;
}

static int method_verify(VarlinkCall *call, json_t *params, void *userdata) {
        ZoneService *s = userdata;
        const char *name = json_string_value(json_object_get(params, "device"));
        bool one = json_object_get(params, "lease") || json_object_get(params, "label");
        ObjectBatch *b;
        const ZDev *only = NULL;
        ZDev *d1 = NULL;
        uint32_t z1 = 0;
        int r;

        if (one) {
                r = object_lookup(s, call, params, false, &d1, &z1);
                if (r <= 0)
                        return r;
        } else if (name && !(only = find_dev(s, name)))
                return error_device(call, name);
        b = calloc(1, sizeof *b);
        if (!b)
                return -ENOMEM;
        b->call = varlink_call_ref(call);
        b->pending = 1; /* until every job is submitted */
        for (size_t i = 0; i < s->n_devs; i++) {
                ZDev *d = s->devs[i];
                if ((one && d != d1) || (only && d != only) || !d->zbd || d->gone)
                        continue;
                for (size_t k = 0; k < d->n; k++) {
                        ReadJob *j;
                        if ((one && k != z1) || !is_object(d, (uint32_t) k))
                                continue;
                        void *t = realloc(b->zones, sizeof *b->zones * (b->n + 1));
                        if (!t || !(j = read_job_new(d, (uint32_t) k))) {
                                if (t)
                                        b->zones = t;
                                continue;
                        }
                        b->zones = t;
                        b->zones[b->n].dev = d;
                        b->zones[b->n++].zone = (uint32_t) k;
                        j->batch = b;
                        b->pending++;
                        if (read_submit(j, s->work) < 0) {
                                b->pending--;
                                free(j);
                        }
                }
        }
        if (--b->pending == 0)
                batch_finish(b);
        return 0;
}

/* The scrub: every ScrubIntervalSec=, each sealed object is read back at
 * ScrubRateMBps= and idle I/O priority, on the verifier's thread (idle CPU
 * priority too), one at a time, the one checked longest ago first. */
static int scrub_tick(sd_event_source *es, uint64_t usec, void *userdata) {
        ZoneService *s = userdata;
        uint64_t now = now_usec(CLOCK_REALTIME), best_age = 0;
        ZDev *bd = NULL;
        uint32_t bz = 0;

        /* Looks every 10 s, or as often as the interval asks for, down to 1 s. */
        (void) sd_event_source_set_time_relative(
                es, MIN(SCRUB_TICK_USEC, MAX(s->config.scrub_interval_usec, 1000000ULL)));
        (void) sd_event_source_set_enabled(es, SD_EVENT_ONESHOT);
        if (!s->config.scrub_interval_usec || s->scrubbing || s->freeing)
                return 0;
        for (size_t i = 0; i < s->n_devs; i++) {
                ZDev *d = s->devs[i];
                if (!d->zbd || d->gone)
                        continue;
                for (size_t k = 0; k < d->n; k++) {
                        const ZSlotExtra *x = &d->extra[k];
                        uint64_t last = MAX(MAX(x->scrub_usec, x->sealed_usec), s->start_usec), age;
                        if (!is_object(d, (uint32_t) k) || x->readers || x->busy || x->releasing)
                                continue;
                        age = now > last ? now - last : 0;
                        if (age >= s->config.scrub_interval_usec && age > best_age) {
                                best_age = age;
                                bd = d;
                                bz = (uint32_t) k;
                        }
                }
        }
        if (!bd)
                return 0;
        ReadJob *j = read_job_new(bd, bz);
        if (!j)
                return 0;
        j->idle = true;
        j->rate = s->config.scrub_rate;
        log_debug("%s: scrubbing zone %u (%s), %llu bytes.", bd->id, bz, strna(bd->extra[bz].label),
                  (unsigned long long) j->size);
        if (read_submit(j, s->verifier) < 0)
                free(j);
        else
                s->scrubbing = true;
        return 0;
}

void zone_service_scrub_stats(ZoneService *s, uint64_t *ret_checked, uint64_t *ret_errors, unsigned *ret_bad) {
        unsigned bad = 0;

        for (size_t i = 0; s && i < s->n_devs; i++)
                for (size_t k = 0; k < s->devs[i]->n; k++)
                        if (is_object(s->devs[i], (uint32_t) k) && s->devs[i]->extra[k].scrub_usec &&
                            s->devs[i]->extra[k].scrub_result < 0)
                                bad++;
        *ret_checked = s ? s->scrubbed : 0;
        *ret_errors = s ? s->scrub_errors : 0;
        *ret_bad = bad;
}

static const VarlinkMethod methods[] = {
        /* Pipelined: a client may send many calls without waiting; their
         * records go into one transaction (zone-db's group commit). */
        { "ListDevices", method_list_devices, VARLINK_METHOD_PIPELINED },
        { "ListZones", method_list_zones, VARLINK_METHOD_PIPELINED },
        { "Allocate", method_allocate, VARLINK_METHOD_MUTATING | VARLINK_METHOD_PIPELINED },
        { "Append", method_append, VARLINK_METHOD_MUTATING | VARLINK_METHOD_ACCEPTS_FDS },
        { "Seal", method_seal, VARLINK_METHOD_MUTATING | VARLINK_METHOD_PIPELINED },
        { "Release", method_release, VARLINK_METHOD_MUTATING | VARLINK_METHOD_PIPELINED },
        { "Get", method_get, VARLINK_METHOD_PIPELINED },
        { "ListObjects", method_list_objects, VARLINK_METHOD_PIPELINED },
        { "Find", method_find, VARLINK_METHOD_PIPELINED },
        { "Read", method_read, VARLINK_METHOD_ACCEPTS_FDS },
        { "Verify", method_verify, 0 },
};

ZoneService *zone_service_free(ZoneService *s) {
        if (!s)
                return NULL;
        s->freeing = true;
        s->scrub_timer = sd_event_source_disable_unref(s->scrub_timer);
        s->verifier = work_pool_free(s->verifier); /* runs the outstanding callbacks */
        while (s->pending) {
                PendingAlloc *p = s->pending;
                s->pending = p->next;
                varlink_call_unref(p->call);
                json_decref(p->params);
                free(p);
        }
        s->db = zone_db_free(s->db); /* runs the outstanding callbacks */
        for (size_t i = 0; i < s->n_devs; i++)
                zdev_free(s->devs[i]);
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
}

int zone_service_new(ZoneService **ret, sd_event *e, const ZonesConfig *config, UringPool *uring, WorkPool *work,
                     VarlinkServer *server) {
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
        r = sd_event_add_time_relative(e, &s->scrub_timer, CLOCK_MONOTONIC, SCRUB_TICK_USEC, 0, scrub_tick, s);
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
        if (server) {
                r = varlink_server_add_interface(server, io_blkmqd_Zones_varlink, methods, ELEMENTSOF(methods), s);
                if (r < 0) {
                        zone_service_free(s);
                        return r;
                }
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
                r = zdev_add(s, id, NULL, "emulated", z);
                if (r < 0) {
                        zone_service_free(s);
                        return r;
                }
        }
        *ret = s;
        return 0;
}
