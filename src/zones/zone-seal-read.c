/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "sha256.h"
#include "util.h"
#include "zone-seal-read.h"
#include "zone-service-device.h"
#include "zone-service-internal.h"
#include "zone-state.h"

/* The seal's read-back: what the verification behind the appends
 * (zone-verify.c) has not hashed yet is read back and hashed, compared
 * with the stager's SHA-256, then the zone is finished and the device's
 * write cache flushed, on the work pool. */

#define VERIFY_BUF (1024U * 1024)

static int hash_consume(const uint8_t *buf, size_t n, void *userdata) {
        sha256_update(userdata, buf, n);
        return 0;
}

int zone_read_hash(Zbd *zbd, uint64_t start, uint64_t from, uint64_t to, Sha256 *sha) {
        return zbd_read_each(zbd, start + from, to - from, VERIFY_BUF, hash_consume, sha);
}

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

        j->r = zone_read_hash(j->zbd, j->start, j->verified, j->size, &j->sha);
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
