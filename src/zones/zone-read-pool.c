/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/param.h>

#include "sha256.h"
#include "util.h"
#include "zone-read-pool.h"
#include "zone-read.h"
#include "zone-service-internal.h"

typedef struct PoolRead PoolRead;

/* Verify and the scrub read through the io_uring pool.
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
        zone_read_done(j, NULL);
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

int zone_read_pool_start(ReadJob *j, WorkPool *hasher, uint16_t ioprio, uint64_t rate) {
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
