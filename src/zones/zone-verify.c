/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdlib.h>
#include <sys/param.h>

#include "log.h"
#include "sha256.h"
#include "util.h"
#include "zone-seal-read.h"
#include "zone-service-device.h"
#include "zone-service-internal.h"
#include "zone-state.h"
#include "zone-verify.h"

/* Verification behind the appends.
 *
 * What has landed is read back and hashed behind the appends, on the work
 * pool, VERIFY_STEP (or a quarter of a small zone) at a time, while later
 * data is still being written: the seal then reads back only the rest. It is still a read of the device
 * after the write completed, as a seal-time read would be. The running
 * digest lives in the zone's slot (vsha over the first `verified` bytes);
 * a job in flight owns it. Any failure drops it, and the seal reads the
 * whole zone back. */

#define VERIFY_STEP (4U * 1024 * 1024)

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

static void verify_run(void *data) {
        VerifyJob *j = data;

        j->ran = true;
        j->r = zone_read_hash(j->zbd, j->start, j->from, j->to, &j->sha);
}

static void verify_done(void *data, void *userdata);

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
