/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/param.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "message-id.h"
#include "sha256.h"
#include "util.h"
#include "zone-service-internal.h"
#include "zone-service-device.h"
#include "zone-state.h"
#include "zone-verify.h"
#include "zone-service.h"

/* Reading zones back: verification behind the appends, the seal's
 * read-back, and the sealed objects' Read, Verify and scrub. */

static int done_error(ZoneDoneFn done, void *userdata, ZoneResult *res, ZoneError e) {
        zone_result_error(res, e);
        zone_done(done, userdata, res);
        return 0;
}

/* ---- verification ----
 *
 * What has landed is read back and hashed behind the appends, on the work
 * pool, VERIFY_STEP (or a quarter of a small zone) at a time, while later
 * data is still being written: the seal then reads back only the rest. It is still a read of the device
 * after the write completed, as a seal-time read would be. The running
 * digest lives in the zone's slot (vsha over the first `verified` bytes);
 * a job in flight owns it. Any failure drops it, and the seal reads the
 * whole zone back. */

#define VERIFY_STEP (4U * 1024 * 1024)
#define VERIFY_BUF (1024U * 1024)

typedef struct VerifyJob {
        ZoneDevice *dev;
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

void zone_verify_forget(ZoneSlot *x) {
        sha256_done(&x->vsha);
        x->verified = 0;
}

static void verify_done(void *data, void *userdata);
static void zone_scrub_again(ZoneService *s);

void zone_verify_kick(ZoneDevice *d, uint32_t z) {
        ZoneSlot *x = &d->slots[z];
        uint64_t landed = x->zone.wp - x->zone.start;
        VerifyJob *j;

        /* busy: sealing, its flush writes padding that is not data. */
        if (!d->service->config.verify_while_writing || x->verify || x->busy || !d->zbd || d->gone ||
            x->state != ZONE_STATE_WRITING || d->service->freeing ||
            landed < x->verified + MIN((uint64_t) VERIFY_STEP, MAX(x->zone.capacity / 4, (uint64_t) 65536)))
                return;
        if (!x->vsha.ctx) {
                x->verified = 0;
                if (sha256_init(&x->vsha) < 0)
                        return;
        }
        j = calloc(1, sizeof *j);
        if (!j)
                return;
        *j = (VerifyJob) { .dev = d, .zone = z, .zbd = d->zbd, .start = x->zone.start, .from = x->verified,
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
        ZoneDevice *d = j->dev;
        uint32_t z = j->zone;
        ZoneSlot *x = &d->slots[z];

        x->verify = NULL;
        if (!j->ran || j->r < 0 || d->slots[j->zone].state != ZONE_STATE_WRITING || j->gen != x->verify_gen) {
                if (j->ran && j->r < 0)
                        log_warning_errno(j->r, "%s: zone %u: reading back what landed failed, the seal will "
                                          "read it all: %m", d->id, j->zone);
                sha256_done(&j->sha);
                zone_verify_forget(x);
        } else {
                x->vsha = j->sha;
                x->verified = j->to;
        }
        free(j);
        if (x->seal_wait && d->service->freeing)
                /* The main work pool is gone already. */
                zone_seal_fail(TAKE_PTR(x->seal_wait), -ESHUTDOWN, "verifying the zone");
        else if (x->seal_wait)
                zone_seal_submit(TAKE_PTR(x->seal_wait));
        else
                zone_verify_kick(d, z);
        zone_device_settle(d);
}

/* ---- seal ---- */

struct SealJob {
        ZoneDevice *dev;
        uint32_t zone;
        ZoneDoneFn done;
        void *userdata;
        Zbd *zbd;
        uint64_t start, verified, size;
        Sha256 sha;  /* over the first verified bytes */
        char expected[65];
        char actual[65];
        int r;       /* -ECANCELED until seal_run ran */
        const char *what;
        bool flush_failed; /* r is the flush's */
        uint64_t flush_usec; /* how long the flush took */
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
        if (j->r < 0) {
                j->what = "finishing the zone";
                return;
        }
        /* Durable before acknowledged: the data and the finish, out of a
         * volatile write cache (zbd_flush(): only where there is one). The
         * read-back above came from that same cache, so it proves what
         * the device holds, not what survives a power cut. */
        j->flush_usec = now_usec(CLOCK_MONOTONIC);
#ifdef BLKMQD_NEGATIVE_CONTROL_SEAL_NO_FLUSH
        /* Only in the test build blkmqd-nc-seal-noflush (tests/integration/
         * meson.build), which the power-cut runs must catch: no flush. */
        j->r = 0;
#else
        j->r = zbd_flush(j->zbd);
#endif
        j->flush_usec = now_usec(CLOCK_MONOTONIC) - j->flush_usec;
        if (j->r < 0) {
                j->flush_failed = true;
                j->what = "flushing the device's write cache after the seal";
        }
}

static void seal_done(void *data, void *userdata) {
        SealJob *j = data;
        ZoneDevice *d = j->dev;
        ZoneResult res = { .ref = { d, j->zone } };

        d->slots[j->zone].busy = false;
        sha256_done(&j->sha);
        if (j->r == -EBADMSG) {
                zone_slot_seal_mismatch(d, j->zone, j->expected, j->actual);
                res.expected = j->expected;
                res.actual = j->actual;
                zone_result_error(&res, ZONE_ERROR_CHECKSUM_MISMATCH);
                (void) zone_record_then(d, j->zone, &res, "durable:io.blkmqd.Zones.Seal", j->done, j->userdata);
        } else if (j->flush_failed) {
                zone_slot_flush_failed(d, j->zone, j->r);
                res.name = d->id;
                res.message = j->what;
                zone_result_error(&res, ZONE_ERROR_FLUSH_FAILED);
                res.errnum = -j->r;
                (void) zone_record_then(d, j->zone, &res, "durable:io.blkmqd.Zones.Seal", j->done, j->userdata);
        } else if (j->r < 0)
                zone_done_io(j->done, j->userdata, j->r, j->what ? j->what : "verifying the zone");
        else {
                zone_slot_sealed(d, j->zone, j->actual, j->verified, j->flush_usec);
                (void) zone_record_seal(d, j->zone, &res, "durable:io.blkmqd.Zones.Seal", j->done, j->userdata);
        }
        free(j);
        zone_device_settle(d);
}


/* After the flush: waits for a verification job in flight, then reads back
 * and hashes what it has not covered. */
void zone_seal_submit(SealJob *j) {
        ZoneDevice *d = j->dev;
        ZoneSlot *x = &d->slots[j->zone];
        int r;

        if (x->verify) {
                x->seal_wait = j;
                return;
        }
        if (!d->zbd || d->gone)
                return zone_seal_fail(j, -ENODEV, "the device went away");
        j->zbd = d->zbd;
        j->start = x->zone.start;
        j->size = x->bytes_written;
        if (x->vsha.ctx && x->verified <= j->size) {
                j->sha = x->vsha;
                x->vsha = (Sha256) {};
                j->verified = x->verified;
        } else {
                r = sha256_init(&j->sha);
                if (r < 0)
                        return zone_seal_fail(j, r, "setting up SHA-256");
        }
        zone_verify_forget(x);
        j->r = -ECANCELED;
        r = work_pool_submit(d->service->work, seal_run, seal_done, j, NULL);
        if (r < 0)
                zone_seal_fail(j, r, "queueing the verification");
}

void zone_seal_fail(SealJob *j, int r, const char *what) {
        ZoneDevice *d = j->dev;

        d->slots[j->zone].busy = false;
        sha256_done(&j->sha);
        zone_done_io(j->done, j->userdata, r, what);
        free(j);
        zone_device_settle(d);
}

SealJob *zone_seal_new(ZoneDevice *d, uint32_t z, const char *sha256, ZoneDoneFn done, void *userdata) {
        SealJob *j = calloc(1, sizeof *j);

        if (!j)
                return NULL;
        j->dev = d;
        j->zone = z;
        j->done = done;
        j->userdata = userdata;
        snprintf(j->expected, sizeof j->expected, "%s", sha256);
        for (char *c = j->expected; *c; c++)
                if (*c >= 'A' && *c <= 'F')
                        *c += 'a' - 'A';
        return j;
}

/* ---- objects: find by label, read back, verify, scrub ----
 *
 * A sealed zone holds one object: its label, size, SHA-256 and lease. A
 * Read writes it into a descriptor the client passed, hashing on the way,
 * on a worker thread (a write into a client's pipe may block). Verify and
 * the background scrub read it through the io_uring pool and hash it only
 * (see PoolRead below). Meanwhile the zone counts a reader: no Release,
 * reset or second write. A mismatch or a read error is kept with the zone
 * (its scrub result, logged at error level, and the note of its record)
 * and never repaired: the object is the stager's to replace. */

#define READ_BUF (1024U * 1024)
#define READ_CLIENT_TIMEOUT_MSEC (30 * 1000)
#define READ_PROGRESS_USEC (250ULL * 1000)

typedef struct ObjectBatch ObjectBatch;
typedef struct PoolRead PoolRead;

typedef struct ReadJob {
        ZoneDevice *dev;
        uint32_t zone;
        Zbd *zbd;
        uint64_t start, size;
        int fd;                 /* the client's, or -1: hash only (through the pool) */
        ZoneOp zop;             /* Read: cancelled when the client goes away */
        ZoneDoneFn done;        /* Read */
        ZoneProgressFn progress;
        void *userdata;
        ObjectBatch *batch;     /* Verify */
        sd_event_source *tick;  /* Read with "more": progress */
        _Atomic uint64_t bytes; /* read so far (worker writes, loop reads) */
        _Atomic bool cancel;    /* the client went away */
        char expected[65], actual[65];
        const char *what;
        bool ran;
        int r;
} ReadJob;

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

typedef struct ReadRun {
        ReadJob *job;
        Sha256 *sha;
        uint64_t off;
} ReadRun;

/* One chunk read back: hashed, written to the client. */
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
        return 0;
}

static void read_run(void *data) {
        ReadJob *j = data;
        _cleanup_sha256_ Sha256 sha = {};
        uint8_t digest[SHA256_DIGEST_SIZE];
        ReadRun rr = { .job = j, .sha = &sha };
        int r;

        j->ran = true;
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
static void scrub_note(ZoneDevice *d, uint32_t z, ReadJob *j) {
        ZoneSlot *x = &d->slots[z];
        bool was_bad = x->scrub_usec && x->scrub_result < 0;
        int x_prev_result = x->scrub_result;
        char note[192];

        if (j->r < 0 && j->r != -EBADMSG && (j->fd >= 0 || j->r == -ECONNRESET || j->r == -ECANCELED || d->gone))
                /* The client's side failed, the read never ran, or the
                 * device went away under it: says nothing about the zone. */
                return;
        x->scrub_usec = now_usec(CLOCK_REALTIME);
        x->scrub_result = j->r;
        d->service->scrubbed++;
        if (j->r == 0) {
                if (was_bad) {
                        log_notice("%s: zone %u (%s) reads back to its SHA-256 again.", d->id, z, strna(x->label));
                        snprintf(note, sizeof note, "zone %u (%s, lease %s) reads back to its SHA-256 again", z,
                                 strna(x->label), x->lease);
                        zone_alert(d->service, "objectIntact", d->id, note);
                }
                return;
        }
        d->service->scrub_errors++;
        if (was_bad && x_prev_result == j->r)
                log_debug("%s: zone %u (%s): still %s.", d->id, z, strna(x->label),
                          j->r == -EBADMSG ? "not matching its SHA-256" : "unreadable");
        else {
                char zs[16];
                snprintf(zs, sizeof zs, "%u", z);
                if (j->r == -EBADMSG) {
                        log_struct(LOG_ERR, BLKMQD_MESSAGE_OBJECT_DAMAGED,
                                   LOG_FIELDS({ "BLKMQD_DEVICE", d->id }, { "BLKMQD_ZONE", zs }, { "BLKMQD_LEASE", x->lease },
                                              { "BLKMQD_LABEL", x->label }, { "BLKMQD_SHA256", j->expected },
                                              { "BLKMQD_SHA256_READ", j->actual }),
                                   "%s: zone %u (%s, lease %s) no longer matches its SHA-256: recorded %s, read %s. "
                                   "Not repaired: stage the object again.",
                                   d->id, z, strna(x->label), x->lease, j->expected, j->actual);
                        snprintf(note, sizeof note, "zone %u (%s, lease %s): SHA-256 mismatch, not repaired", z,
                                 strna(x->label), x->lease);
                } else {
                        log_struct_errno(LOG_ERR, j->r, BLKMQD_MESSAGE_OBJECT_DAMAGED,
                                         LOG_FIELDS({ "BLKMQD_DEVICE", d->id }, { "BLKMQD_ZONE", zs },
                                                    { "BLKMQD_LEASE", x->lease }, { "BLKMQD_LABEL", x->label }),
                                         "%s: zone %u (%s, lease %s) cannot be read back: %m", d->id, z,
                                         strna(x->label), x->lease);
                        snprintf(note, sizeof note, "zone %u (%s, lease %s): read error: %s", z, strna(x->label),
                                 x->lease, strerror(-j->r));
                }
                zone_alert(d->service, "objectDamaged", d->id, note);
        }
        if (j->r == -EBADMSG)
                snprintf(note, sizeof note, "scrub: SHA-256 mismatch, read %.16s…", j->actual);
        else
                snprintf(note, sizeof note, "scrub: read error: %s", strerror(-j->r));
        if (!streq_ptr(x->note, note)) {
                (void) free_and_strdup(&x->note, note);
                (void) zone_record(d, z);
        }
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

static ReadJob *read_job_new(ZoneDevice *d, uint32_t z);
static int pool_read_start(ReadJob *j, WorkPool *hasher, uint16_t ioprio, uint64_t rate);

/* Starts the batch's next objects, BATCH_RUNNING at a time, and answers
 * once every one was read. */
static void batch_pump(ObjectBatch *b) {
        b->pumping = true;
        while (b->running < BATCH_RUNNING && b->next < b->n) {
                ZoneRef *ref = &b->zones[b->next++];
                ZoneDevice *d = (ZoneDevice *) ref->dev;
                ReadJob *j;

                if (!zone_device_present(d) || !zone_device_is_object(d, ref->zone) ||
                    !(j = read_job_new(d, ref->zone))) {
                        ref->zone = UINT32_MAX; /* released or gone since the call: not in the answer */
                        continue;
                }
                j->batch = b;
                b->running++;
                if (pool_read_start(j, d->service->work, b->idle ? URING_IOPRIO_IDLE : 0, 0) < 0) {
                        b->running--;
                        free(j);
                        ref->zone = UINT32_MAX;
                }
        }
        b->pumping = false;
        if (b->running == 0 && b->next == b->n)
                batch_finish(b);
}

static void read_done(void *data, void *userdata) {
        ReadJob *j = data;
        ZoneDevice *d = j->dev;
        ZoneSlot *x = &d->slots[j->zone];
        ObjectBatch *b;

        x->readers--;
        if (!j->ran)
                j->r = -ECANCELED;
        scrub_note(d, j->zone, j);
        if (j->done) {
                ZoneResult res = { .ref = { d, j->zone }, .bytes = j->size, .actual = j->actual };

                if (j->r == -EBADMSG) {
                        res.expected = j->expected;
                        zone_result_error(&res, ZONE_ERROR_CHECKSUM_MISMATCH);
                } else if (j->r < 0)
                        zone_result_io(&res, j->r, j->what ? j->what : "reading the object back");
                zone_done(j->done, j->userdata, &res);
        } else if (!j->batch) {
                d->service->scrubbing = false;
                if (j->r != -ECANCELED)
                        zone_scrub_again(d->service);
        }
        b = j->batch;
        sd_event_source_disable_unref(j->tick);
        if (j->fd >= 0)
                close(j->fd);
        free(j);
        zone_device_settle(d);
        if (b) {
                b->running--;
                if (!b->pumping)
                        batch_pump(b);
        }
}

static ReadJob *read_job_new(ZoneDevice *d, uint32_t z) {
        ReadJob *j = calloc(1, sizeof *j);

        if (!j)
                return NULL;
        j->dev = d;
        j->zone = z;
        j->zbd = d->zbd;
        j->start = d->slots[z].zone.start;
        j->size = d->slots[z].bytes_written;
        j->fd = -EBADF;
        snprintf(j->expected, sizeof j->expected, "%s", d->slots[z].sha256);
        return j;
}

static int read_submit(ReadJob *j, WorkPool *pool) {
        int r = work_pool_submit(pool, read_run, read_done, j, NULL);
        if (r >= 0)
                j->dev->slots[j->zone].readers++;
        return r;
}

static void read_cancel(ZoneOp *zop) {
        ReadJob *j = (ReadJob *) ((uint8_t *) zop - offsetof(ReadJob, zop));

        atomic_store(&j->cancel, true);
}

static int read_progress(sd_event_source *es, uint64_t usec, void *userdata) {
        ReadJob *j = userdata;

        j->progress(&(ZoneResult) { .ref = { j->dev, j->zone }, .bytes = atomic_load(&j->bytes) }, j->userdata);
        (void) sd_event_source_set_time_relative(es, READ_PROGRESS_USEC);
        return sd_event_source_set_enabled(es, SD_EVENT_ONESHOT);
}

/* ---- Verify and the scrub: through the io_uring pool ----
 *
 * The loop thread keeps POOL_DEPTH reads of POOL_CHUNK bytes in flight
 * through the io_uring pool and hands each chunk, in order, to a work pool
 * thread to hash while the next ones are read: the workers only read or
 * hash, and the digest goes from one hash job to the next. The scrub's
 * reads carry the idle I/O priority (a scheduler with classes serves them
 * only when the workload leaves the disk idle), its hashing runs on the
 * SCHED_IDLE verifier thread, and ScrubRateMBps= paces it with a timer
 * before each read. Verify is a person waiting: no pace, hashing on the
 * main work pool, at idle I/O priority unless asked otherwise (an idle
 * request is served at once on a disk that has nothing else to do). */

#define POOL_CHUNK (1024U * 1024)
#define POOL_DEPTH 3U

typedef enum ChunkState {
        CHUNK_FREE,
        CHUNK_READING,
        CHUNK_READ,
        CHUNK_HASHING,
} ChunkState;

typedef struct PoolChunk {
        UringReq req;
        PoolRead *pr;
        uint8_t *buf;     /* POOL_CHUNK bytes, 4096-aligned */
        uint64_t index;   /* of the chunk in the object */
        uint32_t len;     /* the object's bytes in it */
        ChunkState state;
        bool hashed;      /* the hash job ran */
} PoolChunk;

struct PoolRead {
        ReadJob *job;
        ZoneService *service;
        WorkPool *hasher;
        uint16_t ioprio;
        uint64_t rate;          /* bytes/s, 0: as fast as it goes */
        uint64_t n_chunks, next_read, next_hash;
        unsigned busy;          /* reads and hash jobs in flight */
        bool hashing;
        Sha256 sha;             /* the hash job in flight owns it */
        sd_event_source *pace;
        uint64_t t0;
        PoolChunk chunk[POOL_DEPTH];
};

static void pool_pump(PoolRead *pr);

static void pool_fail(PoolRead *pr, int r, const char *what) {
        if (pr->job->r == 0) {
                pr->job->r = r;
                pr->job->what = what;
        }
}

static void pool_finish(PoolRead *pr) {
        ReadJob *j = pr->job;
        uint8_t digest[SHA256_DIGEST_SIZE];

        if (j->r == 0) {
                sha256_final(&pr->sha, digest);
                sha256_hex(digest, j->actual);
                j->r = strcasecmp(j->actual, j->expected) == 0 ? 0 : -EBADMSG;
                j->what = NULL;
        }
        j->ran = j->r != -ECANCELED;
        sha256_done(&pr->sha);
        sd_event_source_disable_unref(pr->pace);
        for (unsigned i = 0; i < POOL_DEPTH; i++)
                free(pr->chunk[i].buf);
        free(pr);
        read_done(j, NULL);
}

static void pool_read_done(UringReq *req, void *userdata) {
        PoolChunk *c = userdata;
        PoolRead *pr = c->pr;

        pr->busy--;
        if (req->res >= 0 && (uint32_t) req->res >= c->len)
                c->state = CHUNK_READ;
        else {
                /* Short: a read past the end of a device. */
                pool_fail(pr, req->res < 0 ? req->res : -EIO, "reading the zone");
                c->state = CHUNK_FREE;
        }
        pool_pump(pr);
}

static int pool_read_submit(PoolRead *pr, PoolChunk *c) {
        ReadJob *j = pr->job;
        uint32_t bs = j->zbd->limits.block_size ? j->zbd->limits.block_size : 512;
        int r;

        c->index = pr->next_read;
        c->len = (uint32_t) MIN((uint64_t) POOL_CHUNK, j->size - c->index * POOL_CHUNK);
        c->hashed = false;
        /* Whole blocks: the seal padded the last one. */
        r = zbd_prep_read(j->zbd, j->start + c->index * POOL_CHUNK, c->buf, (c->len + bs - 1) / bs * bs, &c->req);
        if (r < 0)
                return r;
        c->req.ioprio = pr->ioprio;
        c->req.cpu = -1;
        c->req.done = pool_read_done;
        c->req.userdata = c;
        r = uring_pool_submit(pr->service->uring, &c->req);
        if (r < 0)
                return r;
        c->state = CHUNK_READING;
        pr->next_read++;
        pr->busy++;
        return 0;
}

static void pool_hash_run(void *data) {
        PoolChunk *c = data;

        c->hashed = true;
        sha256_update(&c->pr->sha, c->buf, c->len);
}

static void pool_hash_done(void *data, void *userdata) {
        PoolChunk *c = data;
        PoolRead *pr = c->pr;

        pr->busy--;
        pr->hashing = false;
        c->state = CHUNK_FREE;
        if (!c->hashed)
                pool_fail(pr, -ECANCELED, NULL); /* the work pool went first */
        else {
                pr->next_hash++;
                atomic_store(&pr->job->bytes, MIN(pr->next_hash * POOL_CHUNK, pr->job->size));
        }
        pool_pump(pr);
}

static int pool_pace(sd_event_source *es, uint64_t usec, void *userdata) {
        pool_pump(userdata);
        return 0;
}

/* Starts what can start: reads into free chunks (paced), the next hash in
 * order; finishes once all is hashed, or after an error once nothing is in
 * flight. */
static void pool_pump(PoolRead *pr) {
        ZoneService *s = pr->service;
        int r;

        if (s->stopping)
                pool_fail(pr, -ECANCELED, NULL);
        while (pr->job->r == 0 && pr->next_read < pr->n_chunks) {
                PoolChunk *c = NULL;

                for (unsigned i = 0; i < POOL_DEPTH && !c; i++)
                        if (pr->chunk[i].state == CHUNK_FREE)
                                c = &pr->chunk[i];
                if (!c)
                        break;
                if (pr->rate) {
                        /* Paced: the first n bytes take n / rate seconds at least. */
                        uint64_t due = pr->t0 + pr->next_read * POOL_CHUNK * 1000000ULL / pr->rate;
                        if (due > now_usec(CLOCK_MONOTONIC)) {
                                if (pr->pace)
                                        r = sd_event_source_set_time(pr->pace, due);
                                else
                                        r = sd_event_add_time(s->event, &pr->pace, CLOCK_MONOTONIC, due, 0,
                                                              pool_pace, pr);
                                if (r >= 0)
                                        r = sd_event_source_set_enabled(pr->pace, SD_EVENT_ONESHOT);
                                if (r < 0)
                                        pool_fail(pr, r, "pacing the read");
                                break;
                        }
                }
                r = pool_read_submit(pr, c);
                if (r < 0)
                        pool_fail(pr, r, "queueing a read");
        }
        if (pr->job->r == 0 && !pr->hashing)
                for (unsigned i = 0; i < POOL_DEPTH; i++) {
                        PoolChunk *c = &pr->chunk[i];
                        if (c->state != CHUNK_READ || c->index != pr->next_hash)
                                continue;
                        r = work_pool_submit(pr->hasher, pool_hash_run, pool_hash_done, c, NULL);
                        if (r < 0) {
                                pool_fail(pr, r, "queueing the hash");
                                break;
                        }
                        c->state = CHUNK_HASHING;
                        pr->hashing = true;
                        pr->busy++;
                        break;
                }
        if (pr->busy == 0 && (pr->job->r < 0 || pr->next_hash == pr->n_chunks))
                pool_finish(pr);
}

/* Reads j's object through the pool at I/O priority ioprio (0: the
 * default), at most rate bytes/s (0: unpaced), and hashes it on hasher.
 * read_done() follows, as for a Read. */
static int pool_read_start(ReadJob *j, WorkPool *hasher, uint16_t ioprio, uint64_t rate) {
        ZoneService *s = j->dev->service;
        PoolRead *pr;
        int r;

        if (!s->uring || !j->zbd || j->size == 0)
                return -EINVAL;
        pr = calloc(1, sizeof *pr);
        if (!pr)
                return -ENOMEM;
        *pr = (PoolRead) { .job = j, .service = s, .hasher = hasher, .ioprio = ioprio, .rate = rate,
                           .t0 = now_usec(CLOCK_MONOTONIC), .n_chunks = (j->size + POOL_CHUNK - 1) / POOL_CHUNK };
        r = sha256_init(&pr->sha);
        for (unsigned i = 0; r >= 0 && i < POOL_DEPTH; i++) {
                pr->chunk[i].pr = pr;
                if (posix_memalign((void **) &pr->chunk[i].buf, 4096, POOL_CHUNK) != 0)
                        r = -ENOMEM;
        }
        if (r < 0) {
                sha256_done(&pr->sha);
                for (unsigned i = 0; i < POOL_DEPTH; i++)
                        free(pr->chunk[i].buf);
                free(pr);
                return r;
        }
        j->dev->slots[j->zone].readers++;
        pool_pump(pr);
        return 0;
}

/* ---- objects ---- */

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

/* The scrub: every ScrubIntervalSec=, each sealed object is read back
 * through the io_uring pool at ScrubRateMBps= and idle I/O priority, and
 * hashed on the verifier's thread (idle CPU priority), one at a time, the
 * one checked longest ago first. */
static uint64_t scrub_age(const ZoneService *s, const ZoneSlot *x, uint64_t now) {
        uint64_t last = MAX(MAX(x->scrub_usec, x->sealed_usec), s->start_usec);

        return now > last ? now - last : 0;
}

void zone_service_scrub_progress(const ZoneService *s, const ZoneDevice *d, unsigned *ret_objects,
                                 unsigned *ret_due) {
        uint64_t now = now_usec(CLOCK_REALTIME);
        unsigned objects = 0, due = 0;

        for (size_t k = 0; k < d->n; k++) {
                if (!zone_device_is_object(d, (uint32_t) k))
                        continue;
                objects++;
                if (s->config.scrub_interval_usec && scrub_age(s, &d->slots[k], now) >= s->config.scrub_interval_usec)
                        due++;
        }
        *ret_objects = objects;
        *ret_due = due;
}

static int zone_scrub_start(ZoneService *s) {
        uint64_t now = now_usec(CLOCK_REALTIME), best_age = 0;
        ZoneDevice *bd = NULL;
        uint32_t bz = 0;

        for (size_t i = 0; i < s->n_devs; i++) {
                ZoneDevice *d = s->devs[i];
                if (!d->zbd || d->gone)
                        continue;
                for (size_t k = 0; k < d->n; k++) {
                        const ZoneSlot *x = &d->slots[k];
                        uint64_t age;
                        if (!zone_device_is_object(d, (uint32_t) k) || x->readers || x->busy || x->releasing)
                                continue;
                        age = scrub_age(s, x, now);
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
        log_debug("%s: scrubbing zone %u (%s), %llu bytes, through the io_uring pool at idle I/O priority, "
                  "%llu KiB/s at most.", bd->id, bz, strna(bd->slots[bz].label), (unsigned long long) j->size,
                  (unsigned long long) (s->config.scrub_rate >> 10));
        s->scrubbing = true;
        if (pool_read_start(j, s->verifier, URING_IOPRIO_IDLE, s->config.scrub_rate) < 0) {
                s->scrubbing = false;
                free(j);
        }
        return 0;
}

#define SCRUB_TICK_USEC (10ULL * 1000000)

/* The scrub looks every 10 s, or as often as the interval asks for, down
 * to 1 s. */
static uint64_t scrub_tick_usec(const ZoneService *s) {
        return MIN(SCRUB_TICK_USEC, MAX(s->config.scrub_interval_usec, 1000000ULL));
}

static int scrub_tick(sd_event_source *es, uint64_t usec, void *userdata) {
        ZoneService *s = userdata;

        (void) sd_event_source_set_time_relative(es, scrub_tick_usec(s));
        (void) sd_event_source_set_enabled(es, SD_EVENT_ONESHOT);
        if (!s->config.scrub_interval_usec || s->scrubbing || s->freeing)
                return 0;
        return zone_scrub_start(s);
}

static void zone_scrub_again(ZoneService *s) {
        /* The next due object follows at once: a scrub that fell behind (a
         * long stop, many objects) catches up at its rate, not one object
         * per look. */
        if (s->scrub_timer && !s->stopping && !s->freeing &&
            sd_event_source_set_time_relative(s->scrub_timer, 0) >= 0)
                (void) sd_event_source_set_enabled(s->scrub_timer, SD_EVENT_ONESHOT);
}

int zone_scrub_timer_add(ZoneService *s) {
        return sd_event_add_time_relative(s->event, &s->scrub_timer, CLOCK_MONOTONIC, scrub_tick_usec(s), 0,
                                          scrub_tick, s);
}

void zone_scrub_timer_reset(ZoneService *s) {
        /* A shorter interval is looked at from now, not after the old tick. */
        if (s->scrub_timer)
                (void) sd_event_source_set_time_relative(s->scrub_timer, scrub_tick_usec(s));
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
        j = read_job_new(d, res.ref.zone);
        if (!j)
                return -ENOMEM;
        j->fd = TAKE_FD(fd_close);
        j->zop.cancel = read_cancel;
        j->done = done;
        j->progress = progress;
        j->userdata = userdata;
        if (progress)
                (void) sd_event_add_time_relative(s->event, &j->tick, CLOCK_MONOTONIC, READ_PROGRESS_USEC, 0,
                                                  read_progress, j);
        log_debug("%s: zone %u (%s): reading %llu bytes back into the caller's descriptor.", d->id, j->zone,
                  strna(d->slots[j->zone].label), (unsigned long long) j->size);
        r = read_submit(j, s->work);
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
                return done_error(done, userdata, &res, ZONE_ERROR_NO_SUCH_DEVICE);
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
