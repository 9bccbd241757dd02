/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "util.h"

/* The io_uring worker pool: N threads, each pinned to one CPU and owning its
 * own ring(s), run reads and writes for the event loop thread (zone appends,
 * verify reads, latency probes). Requests are caller-owned structs; the done
 * callback runs on the event loop thread, which owns all state. Workers touch
 * nothing but the requests handed to them.
 *
 * Everything below is for the loop thread only. */

typedef struct UringPool UringPool;
typedef struct UringReq UringReq;
typedef void (*uring_done_fn_t)(UringReq *req, void *userdata); /* loop thread */

enum {
        URING_OP_READ = 0,
        URING_OP_WRITE = 1,
        /* An NVMe I/O command passed through to a generic char device
         * (/dev/ngXnY): IORING_OP_URING_CMD with NVME_URING_CMD_IO, on a
         * third ring per worker set up lazily with IORING_SETUP_SQE128 |
         * IORING_SETUP_CQE32 (5.19+). The command is req->nvme; its data
         * buffer is buf/len (addr/data_len; the direction follows the
         * opcode); offset is not used (the LBA is in the cdws) and flags
         * must be 0. Several may be in flight to one zone: the pool orders
         * nothing. On 6.1 the fd needs CAP_SYS_ADMIN. */
        URING_OP_NVME_IO = 2,
        /* A stream of NVMe commands over one buffer: see UringStream. */
        URING_OP_NVME_STREAM = 3,
        /* A stream of plain writes over one buffer, part i at offset +
         * i * part_len of fd (lba_shift 0): see UringStream. */
        URING_OP_WRITE_STREAM = 4,
        _URING_OP_MAX,
};

/* The NVMe command of a URING_OP_NVME_IO request (struct nvme_uring_cmd
 * without the buffer fields). For a Zone Append: opcode 0x7d, cdw10/11 the
 * zone start LBA (low/high), cdw12 the number of LBAs - 1. */
typedef struct UringNvmeCmd {
        uint8_t opcode;
        uint32_t nsid;
        uint32_t cdw2, cdw3;
        uint32_t cdw10, cdw11, cdw12, cdw13, cdw14, cdw15;
        uint32_t timeout_ms; /* 0: the driver's default */
} UringNvmeCmd;

enum {
        /* Submit on the worker's IORING_SETUP_IOPOLL ring: the fd must be
         * O_DIRECT, ideally on a queue with poll queues (io_poll_queues). */
        URING_REQ_POLLED = 1 << 0,
};

/* IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0): below any workload. */
#define URING_IOPRIO_IDLE ((uint16_t) (3U << 13))

/* Registered (fixed) buffers per worker, each fixed_buf_size bytes, 4096-aligned.
 * buf == NULL requests wait for one of these, in submission order. */
#define URING_POOL_FIXED_BUFS 4U

struct UringReq {
        /* in */
        int fd;
        int op;              /* URING_OP_* */
        unsigned flags;      /* URING_REQ_* */
        uint64_t offset;
        uint32_t len;
        /* Caller-owned, valid until done. NULL: one of the pool's registered
         * buffers (len <= fixed_buf_size); data read is discarded, data
         * written is whatever that buffer last held. */
        void *buf;
        int cpu;             /* preferred CPU for the worker, -1 any */
        /* URING_OP_READ/WRITE: the request's I/O priority (sqe->ioprio, as
         * ioprio_set(2) takes it; e.g. URING_IOPRIO_IDLE), 0: the worker's.
         * Schedulers with priority classes (mq-deadline, bfq) serve an idle
         * request only when nothing else waits. */
        uint16_t ioprio;
        uring_done_fn_t done;
        void *userdata;
        UringNvmeCmd nvme;   /* URING_OP_NVME_IO only */

        /* out (valid in done) */
        int res;             /* bytes or -errno; -EOPNOTSUPP: polled I/O impossible on this fd;
                              * -ECANCELED: the pool was freed first.
                              * URING_OP_NVME_IO: len on success (NVMe status 0); -errno from
                              * the kernel (-EOPNOTSUPP/-ENOTTY/-EINVAL: not an NVMe generic
                              * char device, or a kernel without SQE128/uring_cmd; -EACCES/-EPERM:
                              * no CAP_SYS_ADMIN on 6.1; -EINVAL also for a transfer above the
                              * queue's max_hw_sectors_kb); -EIO when the device answered with an
                              * NVMe status, which is then in nvme_status; -EINTR: the command
                              * timed out or was aborted */
        uint64_t result64;   /* URING_OP_NVME_IO: the command's result (CQE DW0-1; the
                              * LBA a Zone Append landed at), valid when res >= 0 */
        uint16_t nvme_status; /* URING_OP_NVME_IO: the kernel's NVMe status (SCT << 8 | SC,
                               * plus CRD/More/DNR above bit 10) when res == -EIO, else 0 */
        uint64_t latency_ns; /* CLOCK_MONOTONIC on the worker, just before io_uring_submit()
                              * to the completion being reaped; 0 if never submitted */
        int worker_cpu;      /* sched_getcpu() of the worker when it submitted, -1 if never */

        /* private to the pool */
        UringReq *_next;
        uint64_t _t_submit;
        int _buf_idx;
};

/* A stream: req.buf/req.len cut into parts of part_len bytes (the last one
 * may be shorter), each sent as the command req.nvme with cdw12 = its
 * blocks - 1 (blocks of 1 << lba_shift bytes): for zone appends, one object
 * into one zone. One worker keeps up to depth parts in flight and starts the
 * next as one completes, without a trip through the loop thread in between
 * (the point: per part, the worker does what fio's loop does, and no more).
 * After a failed part no new one starts. parts[i] gets each part's outcome,
 * as the fields of the same name in UringReq; uring_stream_parts_done()
 * counts the parts completed in order from the first — parts[0 .. that)
 * are final and may be read on the loop thread while the stream runs.
 * Submit &s->req (op URING_OP_NVME_STREAM, fd, buf, len, nvme, cpu, done,
 * userdata; flags 0); done runs once, when no part is in flight any more,
 * with req.res = len, or the first part's error, or -ECANCELED if the pool
 * stopped it. */
#define URING_STREAM_DEPTH_MAX 32U

/* A write stream (URING_OP_WRITE_STREAM) is the same with plain writes:
 * part i goes to req.offset + i * part_len, its res is the bytes written or
 * -errno, result64 the offset it was written at (a short write ends the
 * stream like an error). It runs on the same ring as the NVMe commands
 * (submitted and waited for in one io_uring_enter() per part): the
 * emulated backend appends this way. */
typedef struct UringStreamPart {
        uint64_t result64;
        int res;
        uint16_t nvme_status;
} UringStreamPart;

typedef struct UringStream {
        UringReq req;
        uint32_t part_len;        /* a multiple of 1 << lba_shift */
        unsigned lba_shift;
        unsigned depth;           /* 1 .. URING_STREAM_DEPTH_MAX */
        UringStreamPart *parts;   /* uring_stream_parts() entries, caller-owned */

        /* private to the pool */
        _Atomic uint32_t _parts_done;
        uint32_t _n, _next, _inflight;
        int _error;
        struct UringStream *_next_active;
        struct UringStreamSlot {
                struct UringStream *s;
                uint32_t part;
        } _slot[URING_STREAM_DEPTH_MAX];
} UringStream;

static inline uint32_t uring_stream_parts(const UringStream *s) {
        return s->part_len ? (uint32_t) ((s->req.len + (uint64_t) s->part_len - 1) / s->part_len) : 0;
}
uint32_t uring_stream_parts_done(UringStream *s); /* loop thread, while it runs or after */

/* n_workers >= 1; worker i is pinned to the i-th CPU of cpus (NULL: the CPUs
 * this process may run on), round-robin. Where pinning is forbidden
 * (sched_setaffinity filtered by the unit's SystemCallFilter=~@resources)
 * workers run unpinned, logged once. fixed_buf_size: bytes per registered
 * buffer (rounded up to 4096), 0 for none. Returns once every worker has its
 * ring; -errno if any could not get one. */
int uring_pool_new(UringPool **ret, sd_event *e, unsigned n_workers, const CpuSet *cpus,
                   uint32_t fixed_buf_size);
/* req must stay alive and untouched until its done callback. Goes to a worker
 * pinned on req->cpu if there is one, else round-robin. Done callbacks may
 * submit again (a request may be resubmitted from its own callback).
 * -EINVAL for a bad op, or buf == NULL without fixed buffers or with a len
 * above fixed_buf_size, or URING_REQ_POLLED on URING_OP_NVME_IO; -ESHUTDOWN
 * while the pool is being freed. I/O errors come back in req->res, never
 * here. (URING_OP_NVME_IO with buf == NULL uses a pool buffer, unregistered.) */
int uring_pool_submit(UringPool *p, UringReq *req);
unsigned uring_pool_pending(UringPool *p); /* submitted, done callback not yet run */
/* Joins the workers. Requests not yet submitted to the kernel, and in-flight
 * ones the kernel can cancel (e.g. a read on a pipe), complete with
 * -ECANCELED; in-flight disk I/O is waited for and keeps its result. All done
 * callbacks run before this returns (they must not submit). NULL ok. */
UringPool *uring_pool_free(UringPool *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(UringPool *, uring_pool_free)
#define _cleanup_uring_pool_free_ _cleanup_(uring_pool_freep)
