/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/blkzoned.h>
#include <linux/fs.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "probe.h"
#include "uring-pool.h"
#include "util.h"

/* A device that went away under a probe, asked through the probe's own
 * descriptor and the held stat file, never by a sysfs path: a lookup waits
 * on the kernfs lock that each attach and detach takes for writing (up to
 * tens of milliseconds in a hotplug storm), and this runs on the event loop.
 * Gone: its stat file is (the disk was deleted), it has no media any more
 * (a detached loop device keeps its node with size 0), or other media came
 * under its name since the probes began (diskseq: a loop device detached
 * and attached again, faster than its events arrive). */
static bool device_vanished(const ProbeTarget *t, int fd) {
        uint64_t size = 0;
        char buf[256];

        if (t->stat_fd >= 0 && pread(t->stat_fd, buf, sizeof buf, 0) < 0 && (errno == ENODEV || errno == ENOENT))
                return true;
        if (fd < 0)
                return false;
        if (ioctl(fd, BLKGETSIZE64, &size) < 0)
                return errno == ENXIO || errno == ENODEV;
        if (size == 0)
                return true;
#ifdef BLKGETDISKSEQ
        uint64_t seq = 0;
        if (t->diskseq && ioctl(fd, BLKGETDISKSEQ, &seq) >= 0 && seq != t->diskseq)
                return true;
#endif
        return false;
}

/* Zone reports are refreshed at most this often: write pointers move, but
 * a probe only needs some written data, not the newest. */
#define ZONE_REPORT_USEC (60 * UINT64_C(1000000))

struct Prober {
        sd_event *event;
        sd_event_source *timer;
        UringPool *pool;
        ProbeTarget **targets;
        size_t n_targets;
        uint64_t rng;
        uint64_t total_probes;
        ProbeEventFn cb;
        void *cb_userdata;
};

typedef struct ProbeReq {
        UringReq req;
        ProbeTarget *target; /* NULL once the target went away */
} ProbeReq;

static uint64_t rng_next(Prober *p) {
        /* xorshift64*: plenty for picking offsets. */
        p->rng ^= p->rng >> 12;
        p->rng ^= p->rng << 25;
        p->rng ^= p->rng >> 27;
        return p->rng * UINT64_C(2685821657736338717);
}

ProbeTarget *probe_target_new(const char *sysname) {
        _cleanup_(probe_target_freep) ProbeTarget *t = NULL;

        t = calloc(1, sizeof *t);
        if (!t)
                return NULL;
        t->stat_fd = -EBADF;
        t->lat = calloc(1, sizeof *t->lat);
        t->sysname = strdup(sysname);
        if (!t->lat || !t->sysname)
                return NULL;
        hist_window_reset(t->lat);
        return TAKE_PTR(t);
}

ProbeTarget *probe_target_free(ProbeTarget *t) {
        if (!t)
                return NULL;
        if (t->req)
                ((ProbeReq *) t->req)->target = NULL; /* the completion frees it */
        free(t->sysname);
        free(t->devnode);
        free(t->blockdir);
        free(t->note);
        free(t->lat);
        free(t->extents);
        if (t->stat_fd >= 0)
                close(t->stat_fd);
        free(t);
        return NULL;
}

Prober *prober_free(Prober *p) {
        if (!p)
                return NULL;
        for (size_t i = 0; i < p->n_targets; i++)
                probe_target_free(p->targets[i]);
        free(p->targets);
        sd_event_source_disable_unref(p->timer);
        sd_event_unref(p->event);
        free(p);
        return NULL;
}

static void prober_rearm(Prober *p);

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata);

int prober_new(Prober **ret, sd_event *e, UringPool *pool) {
        Prober *p = calloc(1, sizeof *p);
        int r;

        if (!p)
                return -ENOMEM;
        p->event = sd_event_ref(e);
        p->pool = pool;
        p->rng = now_usec(CLOCK_REALTIME) ^ ((uint64_t) getpid() << 32) ^ UINT64_C(0x9E3779B97F4A7C15);
        if (!p->rng)
                p->rng = 1;
        r = sd_event_add_time(e, &p->timer, CLOCK_MONOTONIC, UINT64_MAX, 1000, on_timer, p);
        if (r < 0) {
                prober_free(p);
                return r;
        }
        (void) sd_event_source_set_description(p->timer, "probe-timer");
        sd_event_source_set_enabled(p->timer, SD_EVENT_OFF);
        *ret = p;
        return 0;
}

void prober_set_event_cb(Prober *p, ProbeEventFn cb, void *userdata) {
        p->cb = cb;
        p->cb_userdata = userdata;
}

static void emit(Prober *p, ProbeEventType type, ProbeTarget *t, const char *detail) {
        if (p->cb)
                p->cb(p, type, t, detail, p->cb_userdata);
}

ProbeTarget *prober_find(Prober *p, const char *sysname) {
        for (size_t i = 0; i < p->n_targets; i++)
                if (streq(p->targets[i]->sysname, sysname))
                        return p->targets[i];
        return NULL;
}

size_t prober_count(Prober *p) {
        return p ? p->n_targets : 0;
}

ProbeTarget *prober_get(Prober *p, size_t i) {
        return i < p->n_targets ? p->targets[i] : NULL;
}

uint64_t prober_total_probes(Prober *p) {
        return p ? p->total_probes : 0;
}

static void set_note(ProbeTarget *t, const char *note) {
        if (streq_ptr(t->note, note))
                return;
        if (note)
                log_notice("%s: probes paused: %s", t->sysname, note);
        else if (t->note)
                log_info("%s: probes resumed.", t->sysname);
        (void) free_and_strdup(&t->note, note);
}

static uint64_t next_interval(Prober *p, const ProbeTarget *t) {
        uint64_t j = t->config.jitter_usec, iv = t->config.interval_usec;

        if (j == 0)
                return iv;
        if (j > iv / 2)
                j = iv / 2;
        return iv - j + rng_next(p) % (2 * j + 1);
}

/* From the open device, not from sysfs (see device_vanished()). */
static int target_read_geometry(ProbeTarget *t, int fd) {
        uint64_t sz = 0;
        int lbs = 0;

        if (ioctl(fd, BLKGETSIZE64, &sz) < 0 || sz == 0)
                return -ENODEV;
        if (ioctl(fd, BLKSSZGET, &lbs) < 0 || lbs <= 0)
                lbs = 512;
        t->size_bytes = sz;
        t->logical_block_size = (uint32_t) lbs;
        return 0;
}

int prober_update(Prober *p, const ProbeDevice *dev, const ProbeConfig *config) {
        const char *sysname = dev->sysname;
        ProbeTarget *t = prober_find(p, sysname);
        _cleanup_close_ int stat_fd = dev->stat_fd; /* ours, whatever happens */
        bool added = false;

        if (!config->enabled || !dev->devnode) {
                prober_remove(p, sysname);
                return 0;
        }
        if (!t) {
                ProbeTarget **n = realloc(p->targets, sizeof *n * (p->n_targets + 1));
                if (!n)
                        return -ENOMEM;
                p->targets = n;
                t = probe_target_new(sysname);
                if (!t)
                        return -ENOMEM;
                t->prober = p;
                p->targets[p->n_targets++] = t;
                added = true;
        }
        t->diskseq = dev->diskseq;
        if (stat_fd >= 0) {
                if (t->stat_fd >= 0)
                        close(t->stat_fd);
                t->stat_fd = TAKE_FD(stat_fd);
                t->stat_have_prev = false; /* other media, maybe: no rates across it */
        }
        if (free_and_strdup(&t->devnode, dev->devnode) < 0 || free_and_strdup(&t->blockdir, dev->blockdir) < 0)
                return -ENOMEM;
        t->zoned = dev->zoned;
        t->extents_usec = 0; /* re-read the zone report */

        bool interval_changed = t->config.interval_usec != config->interval_usec;
        t->config = *config;
        if (t->config.size < 512)
                t->config.size = 4096;

        AlertConfig ac;
        if (config->alert_read_usec) {
                alert_config_init(&ac, (double) config->alert_read_usec);
                if (t->read_alert.config.threshold != ac.threshold)
                        (void) alert_init(&t->read_alert, &ac);
        }
        if (config->alert_write_usec) {
                alert_config_init(&ac, (double) config->alert_write_usec);
                if (t->write_alert.config.threshold != ac.threshold)
                        (void) alert_init(&t->write_alert, &ac);
        }

        t->size_bytes = dev->size_bytes;
        t->logical_block_size = dev->logical_block_size ? dev->logical_block_size : 512;
        if (added || interval_changed) {
                /* Spread the first probes of many devices over one interval. */
                uint64_t now = now_usec(CLOCK_MONOTONIC);
                t->next_due_usec = now + (added ? rng_next(p) % (t->config.interval_usec + 1) : next_interval(p, t));
                if (added)
                        log_debug("%s: probing every %.3f s, %u bytes%s.", sysname, t->config.interval_usec / 1e6,
                                  t->config.size, t->config.polled ? ", polled" : "");
        }
        prober_rearm(p);
        return 0;
}

void prober_remove(Prober *p, const char *sysname) {
        for (size_t i = 0; i < p->n_targets; i++)
                if (streq(p->targets[i]->sysname, sysname)) {
                        probe_target_free(p->targets[i]);
                        memmove(&p->targets[i], &p->targets[i + 1], sizeof(ProbeTarget *) * (p->n_targets - i - 1));
                        p->n_targets--;
                        prober_rearm(p);
                        return;
                }
}

static void prober_rearm(Prober *p) {
        uint64_t next = UINT64_MAX;

        for (size_t i = 0; i < p->n_targets; i++)
                if (!p->targets[i]->in_flight && p->targets[i]->next_due_usec < next)
                        next = p->targets[i]->next_due_usec;
        if (next == UINT64_MAX) {
                sd_event_source_set_enabled(p->timer, SD_EVENT_OFF);
                return;
        }
        sd_event_source_set_time(p->timer, next);
        sd_event_source_set_enabled(p->timer, SD_EVENT_ONESHOT);
}

/* /sys/block/X/stat: the iostat figures as deltas over the last interval. */
static void target_sample_stat(ProbeTarget *t, uint64_t now) {
        char line[512];
        uint64_t v[17] = {};
        double dt;
        ssize_t k;
        int n;

        if (t->stat_fd < 0)
                return;
        k = pread(t->stat_fd, line, sizeof line - 1, 0);
        if (k <= 0)
                return;
        line[k] = 0;
        n = sscanf(line, "%lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu %lu", &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11], &v[12], &v[13], &v[14], &v[15],
                   &v[16]);
        if (n < 11)
                return;
        t->stats.in_flight = (unsigned) v[8];
        if (t->stat_have_prev && now > t->stat_prev_usec) {
                uint64_t *o = t->stat_prev;
                double rios = (double) (v[0] - o[0]), wios = (double) (v[4] - o[4]);

                dt = (now - t->stat_prev_usec) / 1e6;
                t->stats.interval_usec = now - t->stat_prev_usec;
                t->stats.read_iops = rios / dt;
                t->stats.write_iops = wios / dt;
                t->stats.read_bytes_per_sec = (double) (v[2] - o[2]) * 512 / dt;
                t->stats.write_bytes_per_sec = (double) (v[6] - o[6]) * 512 / dt;
                t->stats.read_await_usec = rios > 0 ? (double) (v[3] - o[3]) * 1000 / rios : NAN;
                t->stats.write_await_usec = wios > 0 ? (double) (v[7] - o[7]) * 1000 / wios : NAN;
                t->stats.util_percent = (double) (v[9] - o[9]) / (dt * 10);
                if (t->stats.util_percent > 100)
                        t->stats.util_percent = 100;
                t->stats.aqu_sz = (double) (v[10] - o[10]) / (dt * 1000);
        }
        memcpy(t->stat_prev, v, sizeof v);
        t->stat_prev_usec = now;
        t->stat_have_prev = true;

        if (t->config.alert_write_usec) {
                AlertEvent ev = alert_update(&t->write_alert, t->stats.write_await_usec, now);
                if (ev == ALERT_RAISED) {
                        log_warning("%s: write latency %.0f µs, above AlertWriteLatUsec=%" PRIu64 ".", t->sysname,
                                    t->stats.write_await_usec, t->config.alert_write_usec);
                        emit(t->prober, PROBE_EVENT_ALERT_RAISED, t, "write");
                } else if (ev == ALERT_CLEARED) {
                        log_notice("%s: write latency back to %.0f µs.", t->sysname, t->stats.write_await_usec);
                        emit(t->prober, PROBE_EVENT_ALERT_CLEARED, t, "write");
                }
        }
}

/* Zoned devices: reads of empty zones return a fill pattern without
 * touching the media; probe only what lies below the write pointers. */
static int target_refresh_extents(ProbeTarget *t, int fd, uint64_t now) {
        const unsigned batch = 256;
        _cleanup_free_ struct blk_zone_report *rep = NULL;
        uint64_t (*ext)[2] = NULL;
        size_t n = 0;
        uint64_t sector = 0, end = t->size_bytes / 512;

        rep = calloc(1, sizeof *rep + batch * sizeof(struct blk_zone));
        if (!rep)
                return -ENOMEM;
        while (sector < end) {
                rep->sector = sector;
                rep->nr_zones = batch;
                if (ioctl(fd, BLKREPORTZONE, rep) < 0) {
                        free(ext);
                        return -errno;
                }
                if (rep->nr_zones == 0)
                        break;
                for (unsigned i = 0; i < rep->nr_zones; i++) {
                        struct blk_zone *z = &rep->zones[i];
                        uint64_t last;

                        if (z->type == BLK_ZONE_TYPE_CONVENTIONAL)
                                last = z->start + z->len;
                        else if (z->cond == BLK_ZONE_COND_FULL)
                                last = z->start + (z->capacity ? z->capacity : z->len);
                        else if (z->cond == BLK_ZONE_COND_EMPTY || z->cond == BLK_ZONE_COND_OFFLINE)
                                last = z->start;
                        else
                                last = z->wp;
                        if (last > z->start) {
                                uint64_t (*x)[2] = realloc(ext, sizeof *ext * (n + 1));
                                if (!x) {
                                        free(ext);
                                        return -ENOMEM;
                                }
                                ext = x;
                                ext[n][0] = z->start * 512;
                                ext[n][1] = last * 512;
                                n++;
                        }
                        sector = z->start + z->len;
                }
        }
        free(t->extents);
        t->extents = ext;
        t->n_extents = n;
        t->extents_usec = now;
        return 0;
}

static int pick_offset(Prober *p, ProbeTarget *t, uint64_t *ret) {
        uint64_t align = t->logical_block_size > 4096 ? t->logical_block_size : 4096;
        uint64_t lo = 0, hi = t->size_bytes;

        if (t->zoned) {
                /* Extents whose written part holds at least one read. */
                size_t usable = 0, pick;
                for (size_t i = 0; i < t->n_extents; i++)
                        usable += t->extents[i][1] - t->extents[i][0] >= t->config.size;
                if (usable == 0)
                        return -ENODATA;
                pick = rng_next(p) % usable;
                for (size_t i = 0; i < t->n_extents; i++) {
                        if (t->extents[i][1] - t->extents[i][0] < t->config.size)
                                continue;
                        if (pick-- == 0) {
                                lo = t->extents[i][0];
                                hi = t->extents[i][1];
                                break;
                        }
                }
        }
        if (hi - lo < t->config.size)
                return -ENODATA;
        uint64_t slots = (hi - lo - t->config.size) / align + 1;
        *ret = lo + (rng_next(p) % slots) * align;
        return 0;
}

static void on_probe_done(UringReq *req, void *userdata);

static void target_probe(Prober *p, ProbeTarget *t, uint64_t now) {
        _cleanup_close_ int fd = -EBADF;
        ProbeReq *pr;
        uint64_t off;
        int r;

        target_sample_stat(t, now);

        /* Opened for each probe and closed at its end: a descriptor held
         * between probes would keep a detached loop device from going away. */
        fd = open(t->devnode, O_RDONLY | O_DIRECT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0) {
                t->n_errors++;
                t->last_error = -errno;
                log_debug_errno(errno, "%s: cannot open %s for probing: %m", t->sysname, t->devnode);
                return;
        }
        if (t->size_bytes == 0 && target_read_geometry(t, fd) < 0) {
                set_note(t, "size unknown");
                return;
        }
        if (t->zoned && (t->extents_usec == 0 || now - t->extents_usec > ZONE_REPORT_USEC)) {
                r = target_refresh_extents(t, fd, now);
                if (r < 0) {
                        t->last_error = r;
                        set_note(t, "zone report failed");
                        return;
                }
        }
        r = pick_offset(p, t, &off);
        if (r < 0) {
                set_note(t, t->zoned ? "no written data below the write pointers to read" : "device smaller than one probe");
                return;
        }
        set_note(t, NULL);

        pr = calloc(1, sizeof *pr);
        if (!pr)
                return;
        pr->target = t;
        pr->req = (UringReq) {
                .fd = TAKE_FD(fd),
                .op = URING_OP_READ,
                .flags = t->config.polled && !t->polled_unsupported ? URING_REQ_POLLED : 0,
                .offset = off,
                .len = t->config.size,
                .buf = NULL,
                .cpu = -1,
                .done = on_probe_done,
                .userdata = p,
        };
        r = uring_pool_submit(p->pool, &pr->req);
        if (r < 0) {
                close(pr->req.fd);
                free(pr);
                t->last_error = r;
                return;
        }
        t->in_flight = true;
        t->req = pr;
        p->total_probes++;
}

static void on_probe_done(UringReq *req, void *userdata) {
        ProbeReq *pr = (ProbeReq *) req;
        ProbeTarget *t = pr->target;
        Prober *p = userdata;
        uint64_t now = now_usec(CLOCK_MONOTONIC);
        const int res = req->res;
        const uint64_t latency_ns = req->latency_ns;

        _cleanup_close_ int fd = TAKE_FD(req->fd); /* for device_vanished() */

        free(pr);
        if (!t) /* the device went away meanwhile */
                return;
        t->in_flight = false;
        t->req = NULL;

        if (res == -EOPNOTSUPP && t->config.polled && !t->polled_unsupported) {
                log_notice("%s: polled probes are not possible on this queue, probing with interrupts.", t->sysname);
                t->polled_unsupported = true;
                t->next_due_usec = now;
                prober_rearm(p);
                return;
        }
        if (res != (int) t->config.size && device_vanished(t, fd)) {
                /* Raced a detach or removal: not an I/O error of a disk
                 * that is there. The remove event ends the probes. */
                if (!t->vanished_logged)
                        log_debug("%s: probe read failed (%s): the device is gone (detached or removed).", t->sysname,
                                  strerror(res < 0 ? -res : EIO));
                t->vanished_logged = true;
        } else if (res != (int) t->config.size) {
                t->n_errors++;
                t->last_error = res < 0 ? res : -EIO;
                log_full(t->n_errors == 1 ? LOG_WARNING : LOG_DEBUG, "%s: probe read failed: %s", t->sysname,
                         strerror(-t->last_error));
        } else {
                t->n_probes++;
                hist_window_record(t->lat, now, latency_ns);
                if (t->config.alert_read_usec) {
                        double us = latency_ns / 1000.0;
                        AlertEvent ev = alert_update(&t->read_alert, us, now);
                        if (ev == ALERT_RAISED) {
                                log_warning("%s: read latency %.0f µs, above AlertReadLatUsec=%" PRIu64 ".",
                                            t->sysname, us, t->config.alert_read_usec);
                                emit(p, PROBE_EVENT_ALERT_RAISED, t, "read");
                        } else if (ev == ALERT_CLEARED) {
                                log_notice("%s: read latency back to %.0f µs.", t->sysname, us);
                                emit(p, PROBE_EVENT_ALERT_CLEARED, t, "read");
                        }
                }
                emit(p, PROBE_EVENT_SAMPLE, t, NULL);
        }
        prober_rearm(p);
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Prober *p = userdata;
        uint64_t now = now_usec(CLOCK_MONOTONIC);

        /* Everything due within the timer's accuracy goes now: one wakeup
         * for many devices. */
        for (size_t i = 0; i < p->n_targets; i++) {
                ProbeTarget *t = p->targets[i];
                if (t->in_flight || t->next_due_usec > now + 1000)
                        continue;
                t->next_due_usec = now + next_interval(p, t);
                target_probe(p, t, now);
        }
        prober_rearm(p);
        return 0;
}
