/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <sys/param.h>

#include "log.h"
#include "util.h"
#include "zone-read-pool.h"
#include "zone-read.h"
#include "zone-scrub.h"
#include "zone-service-internal.h"
#include "zone-service.h"

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

static void zone_scrub_again(ZoneService *s);

/* A scrub's read ended (after the job is freed): the next object is due. */
static void scrub_read_end(void *userdata, int r) {
        ZoneService *s = userdata;

        s->scrubbing = false;
        if (r != -ECANCELED)
                zone_scrub_again(s);
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
        ReadJob *j = zone_read_job_new(bd, bz);
        if (!j)
                return 0;
        log_debug("%s: scrubbing zone %u (%s), %llu bytes, through the io_uring pool at idle I/O priority, "
                  "%llu KiB/s at most.", bd->id, bz, strna(bd->slots[bz].label), (unsigned long long) j->size,
                  (unsigned long long) (s->config.scrub_rate >> 10));
        j->end = scrub_read_end;
        j->end_data = s;
        s->scrubbing = true;
        if (zone_read_pool_start(j, s->verifier, URING_IOPRIO_IDLE, s->config.scrub_rate) < 0) {
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
