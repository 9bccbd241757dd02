/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/param.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "test-hooks.h"
#include "util.h"
#include "zone-service-internal.h"
#include "zone-append.h"
#include "zone-service-device.h"
#include "zone-state.h"
#include "zone-verify.h"
#include "zone-service.h"

/* The append engine: an object's data, from a descriptor or inline, into
 * the lease's zone through the io_uring pool; the verification behind the
 * appends (zone-verify.c) follows what landed. */

/* Largest inline chunk a client may send in one Append call. */
#define INLINE_MAX (1024 * 1024)

typedef struct AppendOp AppendOp;

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
 *  - inline: the data of the call, copied into the slots' buffers. */
struct AppendOp {
        ZoneOp zop;        /* cancelled: the client went away */
        ZoneDevice *dev;
        uint32_t zone;
        bool cancelled;
        ZoneProgressFn progress; /* NULL: none wanted */
        ZoneDoneFn done;   /* NULL: the seal's flush */
        void *userdata;
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
        ZoneFlushedFn flushed; /* the seal's: called once the tail is out */
        void *flushed_userdata;
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

/* ---- append ---- */

static void append_step(AppendOp *op);

typedef struct Unmap {
        void *p;
        size_t len;
} Unmap;

static void unmap_run(void *data) {
        Unmap *u = data;

        (void) munmap(u->p, u->len);
        u->p = NULL;
}

static void unmap_done(void *data, void *userdata) {
        Unmap *u = data;

        if (u->p) /* the pool stopped before it ran */
                (void) munmap(u->p, u->len);
        free(u);
}

/* Unmapping a large object's pages takes milliseconds (about 2.5 ms for 48
 * MiB here): on a worker, not on the loop, which answers the Append first. */
static void unmap_later(ZoneService *s, void *p, size_t len) {
        Unmap *u = malloc(sizeof *u);

        if (u) {
                *u = (Unmap) { p, len };
                if (work_pool_submit(s->work, unmap_run, unmap_done, u, NULL) >= 0)
                        return;
                free(u);
        }
        (void) munmap(p, len);
}

static void append_free(AppendOp *op) {
        if (op->src_fd >= 0)
                close(op->src_fd);
        free(op->inline_data);
        if (op->map)
                unmap_later(op->dev->service, op->map, op->map_len);
        else
                for (unsigned i = 0; i < op->depth; i++)
                        free(op->slots[i].buf);
        free(op->tail);
        if (op->stream) {
                free(op->stream->parts);
                free(op->stream);
        }
        sd_event_source_disable_unref(op->tick);
        free(op);
}


static void append_finish(AppendOp *op, int r, const char *what) {
        ZoneDevice *d = op->dev;
        uint32_t z = op->zone;
        ZoneSlot *sl = &d->slots[z];
        ZoneResult res = { .ref = { d, z } };

        sl->append = NULL;
        zone_slot_appended(d, z, r, op->appended, TAKE_PTR(op->tail), op->tail_len);
        op->tail_len = 0;
        if (op->flushed) {
                op->flushed(r, what, op->flushed_userdata);
                append_free(op);
                zone_device_settle(d);
                return;
        }
        if (r < 0) {
                log_warning_errno(r, "%s: zone %u: append failed (%s): %m", d->id, z, what);
                if (r == -ENOSPC) {
                        res.size = sl->bytes_written;
                        res.capacity = sl->zone.capacity;
                        zone_result_error(&res, ZONE_ERROR_TOO_LARGE);
                } else
                        zone_result_io(&res, r, what);
                (void) zone_record(d, z);
        } else {
                /* Replied without waiting for the record to be durable: a
                 * zone being written is reclaimed after a crash whatever its
                 * record says (reconcile), so no fsync sits in every
                 * append's path. Allocate, Seal and Release do wait. */
                (void) zone_record(d, z);
                res.bytes = sl->bytes_written;
        }
        zone_done(op->done, op->userdata, &res);
        append_free(op);
        zone_device_settle(d);
}

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
        if (op->cancelled)
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
        ZoneDevice *d = op->dev;
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
        zone_verify_kick(d, op->zone);
        if (op->progress && op->appended - op->last_progress >= 4 * 1024 * 1024) {
                op->last_progress = op->appended;
                op->progress(&(ZoneResult) { .ref = { d, op->zone }, .bytes = sl->bytes_written + op->appended },
                             op->userdata);
        }
        append_step(op);
}

static void append_step_map(AppendOp *op);
static void append_restart(AppendOp *op);

/* Records why the op cannot go on (the device gone; the client gone, if
 * asked to look); true if it must stop: it ends here once nothing is in
 * flight any more, else at the last completion. */
static bool append_stopped(AppendOp *op, bool client) {
        ZoneDevice *d = op->dev;

        if (!op->error && (!d->zbd || d->gone)) {
                op->error = -ENODEV;
                op->error_what = "the device went away";
        }
        if (client && !op->error && op->cancelled) {
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
        ZoneDevice *d = op->dev;
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
        ZoneDevice *d = op->dev;
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
        ZoneDevice *d = op->dev;
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
                zone_verify_kick(d, op->zone);
        landed = sl->zone.wp - sl->zone.start;
        if (op->progress && landed - op->last_progress >= 4 * 1024 * 1024 && !op->error) {
                op->last_progress = landed;
                op->progress(&(ZoneResult) { .ref = { d, op->zone }, .bytes = landed }, op->userdata);
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
        ZoneDevice *d = op->dev;
        ZoneSlot *x = &d->slots[op->zone];

        op->inflight--;
        if (op->reset.r < 0)
                return append_fail(op, op->reset.r, "resetting the zone after appends landed out of order");
        x->zone.wp = x->zone.start;
        x->zone.cond = ZONE_COND_EMPTY;
        x->verify_gen++; /* a verification job in flight read the old data */
        zone_verify_forget(x);
        op->next_off = x->zone.start;
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
        ZoneDevice *d = op->dev;
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
        ZoneDevice *d = op->dev;
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
        ZoneDevice *d = op->dev;
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
static AppendOp *append_new(ZoneDevice *d, uint32_t z) {
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
        d->slots[z].append = op;
        return op;
}

/* Copy and inline mode: a buffer per slot, the zone's carried tail first. */
static int append_bufs(AppendOp *op) {
        ZoneSlot *x = &op->dev->slots[op->zone];

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

        if (op->dev->slots[op->zone].tail_len)
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


static void append_cancel(ZoneOp *zop) {
        ((AppendOp *) zop)->cancelled = true;
}

/* The data of req as an op on zone z of d, ready to start; NULL with res
 * set (or -ENOMEM) if nothing is to be written. */
static int append_prepare(ZoneDevice *d, uint32_t z, ZoneAppendRequest *req, ZoneResult *res, AppendOp **ret) {
        _cleanup_close_ int src = TAKE_FD(req->fd);
        _cleanup_free_ uint8_t *data = TAKE_PTR(req->data);
        ZoneSlot *sl = &d->slots[z];
        AppendOp *op;
        int r;

        *ret = NULL;
        if (sl->state != ZONE_STATE_ALLOCATED && sl->state != ZONE_STATE_WRITING) {
                res->lease = req->lease;
                res->state = zone_state_to_string(sl->state);
                return zone_result_error(res, ZONE_ERROR_WRONG_STATE), 0;
        }
        if (req->bad_parameter || (src < 0 && req->data_len > INLINE_MAX)) {
                res->parameter = req->bad_parameter ? req->bad_parameter : "data";
                return zone_result_error(res, ZONE_ERROR_INVALID_PARAMETER), 0;
        }
        op = append_new(d, z);
        if (!op)
                return -ENOMEM;
        op->src_fd = TAKE_FD(src);
        op->inline_data = TAKE_PTR(data);
        op->inline_len = req->data_len;
        r = op->src_fd >= 0 ? append_map(op) : 0;
        if (r == 0)
                r = append_bufs(op);
        if (r < 0) {
                /* Nothing was written, nothing changes. */
                res->size = sl->bytes_written + sl->tail_len + op->src_size;
                res->capacity = sl->zone.capacity;
                sl->append = NULL;
                append_free(op);
                if (r == -EFBIG)
                        return zone_result_error(res, ZONE_ERROR_TOO_LARGE), 0;
                return r;
        }
        *ret = op;
        return 0;
}

int zone_service_append(ZoneService *s, const ZoneAppendRequest *req, uid_t uid, ZoneProgressFn progress,
                        ZoneDoneFn done, void *userdata, ZoneOp **ret_op) {
        ZoneAppendRequest q = *req;
        ZoneResult res = {};
        AppendOp *op;
        ZoneDevice *d;
        uint32_t z;
        int r;

        if (ret_op)
                *ret_op = NULL;
        if (!zone_lease_checks(s, req->lease, uid, &d, &z, &res)) {
                if (q.fd >= 0)
                        close(q.fd);
                free(q.data);
                zone_done(done, userdata, &res);
                return 0;
        }
        /* Crash tests: a lease acknowledged, nothing of its data written
         * (not even the "writing" record). */
        test_kill_point("append-begin");
        r = append_prepare(d, z, &q, &res, &op);
        if (r < 0)
                return r;
        if (!op) {
                zone_done(done, userdata, &res);
                return 0;
        }
        op->zop.cancel = append_cancel;
        op->progress = progress;
        op->done = done;
        op->userdata = userdata;
        op->restartable = op->map && d->slots[z].bytes_written == 0 && d->slots[z].zone.wp == d->slots[z].zone.start;
        log_debug("%s: zone %u: appending %s, writes of %u KiB, up to %u in flight.", d->id, z,
                  op->map ? "from a mapped file" : op->src_fd >= 0 ? "from a stream (copied)" : "inline data",
                  op->chunk / 1024, op->depth);
        zone_slot_begin_writing(d, z);
        append_step(op);
        /* It may have ended already (done was called, op is gone). */
        if (ret_op && d->slots[z].append == op)
                *ret_op = &op->zop;
        return 0;
}

void zone_append_flush(ZoneDevice *d, uint32_t z, ZoneFlushedFn flushed, void *userdata) {
        AppendOp *op = append_new(d, z);

        if (!op || append_bufs(op) < 0) {
                if (op) {
                        d->slots[z].append = NULL;
                        append_free(op);
                }
                return flushed(-ENOMEM, "flushing the last block", userdata);
        }
        op->final = true;
        op->eof = true;
        op->flushed = flushed;
        op->flushed_userdata = userdata;
        append_step(op);
}
