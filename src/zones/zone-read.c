/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "log.h"
#include "message-id.h"
#include "sha256.h"
#include "util.h"
#include "zone-read.h"
#include "zone-service-device.h"
#include "zone-service-internal.h"
#include "zone-service.h"
#include "zone-state.h"

/* Reading a sealed object back.
 *
 * A sealed zone holds one object: its label, size, SHA-256 and lease. A
 * Read writes it into a descriptor the client passed, hashing on the way,
 * on a worker thread (a write into a client's pipe may block). Verify and
 * the background scrub read it through the io_uring pool and hash it only
 * (zone-read-pool.c). Meanwhile the zone counts a reader: no Release,
 * reset or second write. A mismatch or a read error is kept with the zone
 * (its scrub result, logged at error level, and the note of its record)
 * and never repaired: the object is the stager's to replace. */

#define READ_BUF (1024U * 1024)
#define READ_CLIENT_TIMEOUT_MSEC (30 * 1000)
#define READ_PROGRESS_USEC (250ULL * 1000)

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

void zone_read_done(void *data, void *userdata) {
        ReadJob *j = data;
        ZoneDevice *d = j->dev;
        ZoneSlot *x = &d->slots[j->zone];
        ZoneReadEndFn end = j->end;
        void *end_data = j->end_data;
        int r;

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
        }
        r = j->r;
        sd_event_source_disable_unref(j->tick);
        if (j->fd >= 0)
                close(j->fd);
        free(j);
        zone_device_settle(d);
        if (end)
                end(end_data, r);
}

ReadJob *zone_read_job_new(ZoneDevice *d, uint32_t z) {
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

static void read_cancel(ZoneOp *zop);
static int read_progress(sd_event_source *es, uint64_t usec, void *userdata);

int zone_read_submit(ReadJob *j, WorkPool *pool) {
        int r;

        j->zop.cancel = read_cancel;
        if (j->progress)
                (void) sd_event_add_time_relative(j->dev->service->event, &j->tick, CLOCK_MONOTONIC,
                                                  READ_PROGRESS_USEC, 0, read_progress, j);
        log_debug("%s: zone %u (%s): reading %llu bytes back into the caller's descriptor.", j->dev->id, j->zone,
                  strna(j->dev->slots[j->zone].label), (unsigned long long) j->size);
        r = work_pool_submit(pool, read_run, zone_read_done, j, NULL);
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
