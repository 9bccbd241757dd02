/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <limits.h>
#include <linux/nvme_ioctl.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/param.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "thread-sched.h"
#include "uring-pool.h"

/* The io_uring worker pool: N threads, each with rings of its own, that
 * only do I/O; everything they finish is handed back to the event loop
 * thread, which alone runs the callers' callbacks.
 *
 * Why one file of about 1,000 lines: the loop side (submit, cancel, the
 * completion eventfd) and the worker side (the queue, the rings, the
 * wakeup poll) share the worker struct and one ordering argument (below)
 * about who may touch a request when. Split in two, each half would be
 * correct only by reference to the other; read together, the argument is
 * in one place.
 *
 * Each worker owns one ring for ordinary I/O and, once a polled request
 * comes, one IORING_SETUP_IOPOLL ring (an IOPOLL ring takes only
 * O_DIRECT reads/writes, so the wakeup poll cannot live there), and once an
 * NVMe passthrough request comes, one IORING_SETUP_SQE128 | CQE32 ring
 * (NVMe uring_cmd needs both: 80 bytes of command in the SQE, the 64-bit
 * result in the CQE's big_cqe[0]). Big SQEs/CQEs double the ring's memory,
 * so ordinary I/O does not pay for them.
 *
 * Waking a worker: the loop thread appends to the worker's queue and, if the
 * queue was empty, writes the worker's eventfd, which sits as a multishot
 * POLL_ADD on the worker's own ring; one wait for a CQE then covers both new
 * work and I/O completions. The worker reads the eventfd before it takes
 * the queue, so a write it consumed always belongs to an entry it will take,
 * and a later write posts a new CQE. */

#define URING_QD 64U
/* In flight on the main ring. The SQ is never full when a request is
 * prepared, leaving room for re-arming the wakeup poll and for the cancel
 * sent at shutdown; the CQ (2 × QD) cannot overflow. */
#define URING_MAX_INFLIGHT (URING_QD - 4U)
#define URING_BUF_ALIGN 4096U

#define TAG_WAKE UINT64_C(1)
#define TAG_CANCEL UINT64_C(2)

typedef struct ReqList {
        UringReq *head, *tail;
} ReqList;

typedef struct UringWorker {
        UringPool *pool;
        int want_cpu; /* CPU to pin to; set before the thread starts */
        int cpu;      /* pinned CPU or -1; written by the worker before it reports ready */
        pthread_t thread;
        bool started;
        int wake_fd;  /* loop thread → worker */
        pthread_mutex_t lock;
        ReqList queue; /* submitted, not yet taken; protected by lock */
        bool stopping; /* protected by lock */
        int init_r;    /* protected by pool->lock */
        bool init_done; /* protected by pool->lock */

        /* Worker thread only from here on. */
        struct io_uring ring;
        bool ring_up;
        struct io_uring pring; /* IOPOLL */
        int pring_state;       /* 0 not tried, 1 up, < 0 setup failed */
        bool pring_fixed;
        struct io_uring nring; /* SQE128 | CQE32, NVMe passthrough */
        int nring_state;       /* 0 not tried, 1 up, < 0 setup failed */
        void *bufs[URING_POOL_FIXED_BUFS];
        unsigned n_bufs;
        uint32_t free_bufs;    /* bitmask over bufs */
        bool bufs_fixed;       /* registered on ring */
        bool wake_multishot, wake_need_arm;
        ReqList backlog;       /* taken, not yet submitted: waiting for a buffer or ring room */
        unsigned inflight, pinflight, ninflight;
        UringStream *streams;  /* active: parts to start or in flight */
        bool stop_seen, cancel_sent;
} UringWorker;

struct UringPool {
        sd_event_source *source;
        int efd;                /* workers → loop thread */
        pthread_mutex_t lock;
        pthread_cond_t cond;    /* worker startup */
        ReqList done;           /* protected by lock */
        UringWorker *workers;
        unsigned n_workers;
        uint32_t fixed_buf_size;
        unsigned rr;            /* loop thread only */
        unsigned pending;       /* loop thread only */
        bool freeing;           /* loop thread only */
        atomic_bool logged_memlock, logged_affinity;
};

/* Requests prepared in one worker iteration, stamped just before submission. */
typedef struct Batch {
        UringReq *main[URING_QD], *poll[URING_QD], *nvme[URING_QD];
        unsigned n_main, n_poll, n_nvme;
} Batch;

typedef enum RingKind {
        RING_MAIN,
        RING_POLL,
        RING_NVME,
} RingKind;

static void list_append(ReqList *l, UringReq *r) {
        r->_next = NULL;
        if (l->tail)
                l->tail->_next = r;
        else
                l->head = r;
        l->tail = r;
}

static void list_splice(ReqList *l, ReqList *from) {
        if (!from->head)
                return;
        if (l->tail)
                l->tail->_next = from->head;
        else
                l->head = from->head;
        l->tail = from->tail;
        *from = (ReqList) {};
}

static uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * UINT64_C(1000000000) + (uint64_t) ts.tv_nsec;
}

static int ring_setup(struct io_uring *ring, unsigned extra_flags) {
        /* SUBMIT_ALL (5.18): one bad SQE does not hold back the rest of a
         * batch. SINGLE_ISSUER (6.0): only this thread submits. Older
         * kernels say EINVAL to flags they do not know. */
        static const unsigned try_flags[] = {
#ifdef IORING_SETUP_SINGLE_ISSUER
                IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER,
#endif
                IORING_SETUP_SUBMIT_ALL,
                0,
        };
        int r = -EINVAL;

        for (size_t i = 0; i < ELEMENTSOF(try_flags); i++) {
                r = io_uring_queue_init(URING_QD, ring, try_flags[i] | extra_flags);
                if (r != -EINVAL)
                        break;
        }
        return r;
}

static void log_memlock_once(UringPool *p, int r) {
        if (!atomic_exchange(&p->logged_memlock, true))
                log_notice_errno(r, "Cannot register io_uring buffers (RLIMIT_MEMLOCK without CAP_IPC_LOCK?), "
                                 "using them unregistered: %m");
}

static void worker_pin(UringWorker *w) {
        cpu_set_t set;
        int r;

        w->cpu = -1;
        if (w->want_cpu < 0)
                return;
        CPU_ZERO(&set);
        CPU_SET(w->want_cpu, &set);
        r = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
        if (r != 0) {
                /* EPERM under SystemCallFilter=~@resources: run unpinned. */
                if (!atomic_exchange(&w->pool->logged_affinity, true))
                        log_notice_errno(r, "Cannot pin io_uring workers to CPUs, running them unpinned: %m");
                return;
        }
        w->cpu = w->want_cpu;
}

static int register_bufs(UringWorker *w, struct io_uring *ring) {
        struct iovec iov[URING_POOL_FIXED_BUFS];

        for (unsigned i = 0; i < w->n_bufs; i++)
                iov[i] = (struct iovec) { .iov_base = w->bufs[i], .iov_len = w->pool->fixed_buf_size };
        return io_uring_register_buffers(ring, iov, w->n_bufs);
}

static int worker_setup_bufs(UringWorker *w) {
        uint32_t size = w->pool->fixed_buf_size;
        int r;

        if (size == 0)
                return 0;
        for (unsigned i = 0; i < URING_POOL_FIXED_BUFS; i++) {
                r = posix_memalign(&w->bufs[i], URING_BUF_ALIGN, size);
                if (r != 0)
                        return -r;
                /* Fault the pages in here, on this worker's CPU (and node). */
                memset(w->bufs[i], 0, size);
                w->n_bufs++;
        }
        w->free_bufs = (UINT32_C(1) << w->n_bufs) - 1;
        r = register_bufs(w, &w->ring);
        if (r < 0)
                log_memlock_once(w->pool, r);
        else
                w->bufs_fixed = true;
        return 0;
}

static void worker_setup_pring(UringWorker *w) {
        int r;

        r = ring_setup(&w->pring, IORING_SETUP_IOPOLL);
        if (r < 0) {
                w->pring_state = r;
                log_debug_errno(r, "Cannot set up a polled io_uring, polled requests fail: %m");
                return;
        }
        w->pring_state = 1;
        if (w->bufs_fixed) {
                r = register_bufs(w, &w->pring);
                if (r < 0)
                        log_memlock_once(w->pool, r);
                else
                        w->pring_fixed = true;
        }
}

static void worker_setup_nring(UringWorker *w) {
        int r;

        /* No registered buffers here: uring_cmd takes them only with
         * IORING_URING_CMD_FIXED (6.1), and appends bring their own. */
        r = ring_setup(&w->nring, IORING_SETUP_SQE128 | IORING_SETUP_CQE32);
        if (r < 0) {
                w->nring_state = r;
                log_debug_errno(r, "Cannot set up an SQE128/CQE32 io_uring, NVMe passthrough requests fail: %m");
                return;
        }
        w->nring_state = 1;
}

static void prep_nvme(struct io_uring_sqe *sqe, int fd, const UringNvmeCmd *c, void *buf, uint32_t len) {
        struct nvme_uring_cmd cmd = {
                .opcode = c->opcode,
                .nsid = c->nsid,
                .cdw2 = c->cdw2,
                .cdw3 = c->cdw3,
                .addr = (uint64_t) (uintptr_t) buf,
                .data_len = len,
                .cdw10 = c->cdw10,
                .cdw11 = c->cdw11,
                .cdw12 = c->cdw12,
                .cdw13 = c->cdw13,
                .cdw14 = c->cdw14,
                .cdw15 = c->cdw15,
                .timeout_ms = c->timeout_ms,
        };

        /* liburing 2.3 has no io_uring_prep_uring_cmd(). The command fills
         * the SQE's second half (80 bytes from sqe->cmd on an SQE128 ring). */
        io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fd, NULL, 0, 0);
        sqe->cmd_op = NVME_URING_CMD_IO;
        memset(sqe->cmd, 0, 80);
        memcpy(sqe->cmd, &cmd, sizeof cmd);
}

/* ---- streams (worker side) ----
 * A stream sits on the worker's active list from the moment it is taken
 * until its last part completes. Its parts' CQEs carry the address of a
 * slot (tagged with bit 0; slots are 8-aligned) naming stream and part. */

#define TAG_PART UINT64_C(1)

static UringStream *stream_of(UringReq *req) {
        return (UringStream *) ((char *) req - offsetof(UringStream, req));
}

static void stream_complete(UringWorker *w, UringStream *s, ReqList *done) {
        UringStream **pp = &w->streams;

        while (*pp && *pp != s)
                pp = &(*pp)->_next_active;
        if (*pp)
                *pp = s->_next_active;
        s->req.res = s->_error ? s->_error : s->_next < s->_n ? -ECANCELED : (int) s->req.len;
        list_append(done, &s->req);
}

/* Starts parts while the depth, the ring and the stream allow. */
static void stream_fill(UringWorker *w, UringStream *s) {
        while (!s->_error && !w->stop_seen && s->_next < s->_n && s->_inflight < s->depth &&
               w->ninflight < URING_QD) {
                uint64_t off = (uint64_t) s->_next * s->part_len;
                uint32_t len = (uint32_t) MIN((uint64_t) s->part_len, s->req.len - off);
                UringNvmeCmd c = s->req.nvme;
                struct io_uring_sqe *sqe;
                unsigned k = 0;

                while (k < s->depth && s->_slot[k].s)
                        k++;
                if (k == s->depth)
                        return;
                sqe = io_uring_get_sqe(&w->nring);
                if (!sqe)
                        return;
                if (s->req.op == URING_OP_WRITE_STREAM)
                        io_uring_prep_write(sqe, s->req.fd, (uint8_t *) s->req.buf + off, len, s->req.offset + off);
                else {
                        c.cdw12 = (len >> s->lba_shift) - 1;
                        prep_nvme(sqe, s->req.fd, &c, (uint8_t *) s->req.buf + off, len);
                }
                s->_slot[k].s = s;
                s->_slot[k].part = s->_next;
                io_uring_sqe_set_data64(sqe, (uint64_t) (uintptr_t) &s->_slot[k] | TAG_PART);
                s->_next++;
                s->_inflight++;
                w->ninflight++;
        }
}

static void stream_start(UringWorker *w, UringStream *s, ReqList *done) {
        if (w->nring_state == 0)
                worker_setup_nring(w);
        if (w->nring_state < 0) {
                s->req.res = w->nring_state == -EINVAL ? -EOPNOTSUPP : w->nring_state;
                list_append(done, &s->req);
                return;
        }
        s->_n = uring_stream_parts(s);
        s->_next = s->_inflight = 0;
        s->_error = 0;
        for (uint32_t i = 0; i < s->_n; i++)
                s->parts[i] = (UringStreamPart) { .res = INT_MIN };
        memset(s->_slot, 0, sizeof s->_slot);
        atomic_store_explicit(&s->_parts_done, 0, memory_order_release);
        s->req.worker_cpu = sched_getcpu();
        s->_next_active = w->streams;
        w->streams = s;
        if (s->_n == 0)
                stream_complete(w, s, done);
}

/* A part's CQE. */
static void stream_part_done(UringWorker *w, struct UringStreamSlot *slot, const struct io_uring_cqe *cqe,
                             ReqList *done) {
        UringStream *s = slot->s;
        UringStreamPart *p = &s->parts[slot->part];
        uint32_t k;

        slot->s = NULL;
        p->result64 = 0;
        p->nvme_status = 0;
        if (s->req.op == URING_OP_WRITE_STREAM) {
                uint64_t off = (uint64_t) slot->part * s->part_len;

                p->res = cqe->res;
                p->result64 = s->req.offset + off;
                /* A short write: the stream stops there. */
                if (cqe->res >= 0 && (uint64_t) cqe->res != MIN((uint64_t) s->part_len, s->req.len - off) &&
                    !s->_error)
                        s->_error = -EIO;
        } else if (cqe->res == 0) {
                uint64_t off = (uint64_t) slot->part * s->part_len;
                p->res = (int) MIN((uint64_t) s->part_len, s->req.len - off);
                p->result64 = cqe->big_cqe[0];
        } else if (cqe->res > 0) {
                p->res = -EIO;
                p->nvme_status = (uint16_t) cqe->res;
        } else
                p->res = cqe->res;
        if (p->res < 0 && !s->_error)
                s->_error = p->res;
        s->_inflight--;
        w->ninflight--;
        k = atomic_load_explicit(&s->_parts_done, memory_order_relaxed);
        while (k < s->_n && s->parts[k].res != INT_MIN)
                k++;
        atomic_store_explicit(&s->_parts_done, k, memory_order_release);
        if (s->_inflight == 0 && (s->_next == s->_n || s->_error || w->stop_seen))
                stream_complete(w, s, done);
}

static void worker_teardown(UringWorker *w) {
        if (w->nring_state > 0)
                io_uring_queue_exit(&w->nring);
        if (w->pring_state > 0)
                io_uring_queue_exit(&w->pring);
        if (w->ring_up)
                io_uring_queue_exit(&w->ring);
        for (unsigned i = 0; i < w->n_bufs; i++)
                free(w->bufs[i]);
        w->n_bufs = 0;
}

/* 1: prepared and added to b; 0: not now (no buffer or no room), stays
 * queued; -1: finished here, req->res set. */
static int worker_prep(UringWorker *w, UringReq *req, bool bufs_blocked, Batch *b) {
        bool polled = req->flags & URING_REQ_POLLED, nvme = req->op == URING_OP_NVME_IO;
        struct io_uring_sqe *sqe;
        struct io_uring *ring;
        bool fixed;
        void *buf = req->buf;
        int idx = -1;

        if (nvme) {
                if (w->nring_state == 0)
                        worker_setup_nring(w);
                if (w->nring_state < 0) {
                        req->res = w->nring_state == -EINVAL ? -EOPNOTSUPP : w->nring_state;
                        return -1;
                }
                if (w->ninflight >= URING_QD)
                        return 0;
                ring = &w->nring;
                fixed = false;
        } else if (polled) {
                if (w->pring_state == 0)
                        worker_setup_pring(w);
                if (w->pring_state < 0) {
                        req->res = -EOPNOTSUPP;
                        return -1;
                }
                if (w->pinflight >= URING_QD)
                        return 0;
                ring = &w->pring;
                fixed = w->pring_fixed;
        } else {
                if (w->inflight >= URING_MAX_INFLIGHT)
                        return 0;
                ring = &w->ring;
                fixed = w->bufs_fixed;
        }
        if (!buf) {
                if (bufs_blocked || w->free_bufs == 0)
                        return 0;
                idx = __builtin_ctz(w->free_bufs);
                buf = w->bufs[idx];
        }
        sqe = io_uring_get_sqe(ring);
        if (!sqe)
                return 0;

        if (nvme)
                prep_nvme(sqe, req->fd, &req->nvme, buf, req->len);
        else if (idx >= 0 && fixed) {
                if (req->op == URING_OP_READ)
                        io_uring_prep_read_fixed(sqe, req->fd, buf, req->len, req->offset, idx);
                else
                        io_uring_prep_write_fixed(sqe, req->fd, buf, req->len, req->offset, idx);
        } else if (req->op == URING_OP_READ)
                io_uring_prep_read(sqe, req->fd, buf, req->len, req->offset);
        else
                io_uring_prep_write(sqe, req->fd, buf, req->len, req->offset);
        if (!nvme)
                sqe->ioprio = req->ioprio;
        io_uring_sqe_set_data(sqe, req);

        if (idx >= 0)
                w->free_bufs &= ~(UINT32_C(1) << idx);
        req->_buf_idx = idx;
        req->worker_cpu = sched_getcpu();
        if (nvme) {
                w->ninflight++;
                b->nvme[b->n_nvme++] = req;
        } else if (polled) {
                w->pinflight++;
                b->poll[b->n_poll++] = req;
        } else {
                w->inflight++;
                b->main[b->n_main++] = req;
        }
        return 1;
}

static void worker_arm_wake(UringWorker *w) {
        struct io_uring_sqe *sqe;

        if (!w->wake_need_arm || w->stop_seen)
                return;
        sqe = io_uring_get_sqe(&w->ring);
        if (!sqe)
                return; /* next iteration */
        if (w->wake_multishot)
                io_uring_prep_poll_multishot(sqe, w->wake_fd, POLLIN);
        else
                io_uring_prep_poll_add(sqe, w->wake_fd, POLLIN);
        io_uring_sqe_set_data64(sqe, TAG_WAKE);
        w->wake_need_arm = false;
}

/* Prepares what it can from the backlog, in order; buffer users stay FIFO
 * among themselves. */
static void worker_dispatch(UringWorker *w, Batch *b, ReqList *done) {
        ReqList keep = {};
        bool bufs_blocked = false;
        UringReq *req = w->backlog.head;

        w->backlog = (ReqList) {};
        while (req) {
                UringReq *next = req->_next;
                int k;

                if (req->op == URING_OP_NVME_STREAM || req->op == URING_OP_WRITE_STREAM) {
                        stream_start(w, stream_of(req), done);
                        req = next;
                        continue;
                }
                k = worker_prep(w, req, bufs_blocked, b);

                if (k == 0) {
                        list_append(&keep, req);
                        if (!req->buf)
                                bufs_blocked = true;
                } else if (k < 0)
                        list_append(done, req);
                req = next;
        }
        w->backlog = keep;
        for (UringStream *st = w->streams; st; st = st->_next_active)
                stream_fill(w, st);
}

/* Requests never submitted are cancelled here; in-flight ones get one
 * IORING_ASYNC_CANCEL_ANY (5.19+): what the kernel can cancel (a read
 * parked on a pipe, work punted to io-wq) ends -ECANCELED, the rest is
 * waited for. */
static void worker_stop(UringWorker *w, ReqList *done) {
        UringReq *req = w->backlog.head;

        w->backlog = (ReqList) {};
        while (req) {
                UringReq *next = req->_next;

                req->res = -ECANCELED;
                list_append(done, req);
                req = next;
        }
        for (UringStream *st = w->streams, *nx; st; st = nx) {
                nx = st->_next_active;
                if (st->_inflight == 0)
                        stream_complete(w, st, done);
        }
        if (!w->cancel_sent && w->inflight > 0) {
                struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);

                if (sqe) {
                        io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
                        io_uring_sqe_set_data64(sqe, TAG_CANCEL);
                        w->cancel_sent = true;
                }
        }
}

static void ring_submit(struct io_uring *ring, UringReq **reqs, unsigned n) {
        uint64_t t;
        int r;

        if (n == 0 && io_uring_sq_ready(ring) == 0)
                return;
        t = now_ns();
        for (unsigned i = 0; i < n; i++)
                reqs[i]->_t_submit = t;
        r = io_uring_submit(ring);
        /* What was not taken stays in the SQ; the wait below retries soon. */
        if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY)
                log_debug_errno(r, "io_uring_submit() failed, retrying: %m");
}

static void worker_reap(UringWorker *w, struct io_uring *ring, RingKind kind, uint64_t t, ReqList *done) {
        struct io_uring_cqe *cqe;
        unsigned head, n = 0;

        io_uring_for_each_cqe(ring, head, cqe) {
                uint64_t ud = io_uring_cqe_get_data64(cqe);
                UringReq *req;

                n++;
                if (ud == TAG_CANCEL)
                        continue;
                if (ud == TAG_WAKE) {
                        uint64_t v;

                        /* Before the queue is taken (next iteration): see above. */
                        (void) !read(w->wake_fd, &v, sizeof v);
                        if (!(cqe->flags & IORING_CQE_F_MORE)) {
                                if (cqe->res == -EINVAL && w->wake_multishot)
                                        w->wake_multishot = false; /* before 5.13 */
                                w->wake_need_arm = true;
                        }
                        continue;
                }
                if (kind == RING_NVME && (ud & TAG_PART)) {
                        stream_part_done(w, (struct UringStreamSlot *) (uintptr_t) (ud & ~TAG_PART), cqe, done);
                        continue;
                }
                req = (UringReq *) (uintptr_t) ud;
                req->res = cqe->res;
                if (kind == RING_POLL && (req->res == -EOPNOTSUPP || req->res == -EINVAL))
                        req->res = -EOPNOTSUPP;
                if (kind == RING_NVME) {
                        /* res: -errno, 0 = success, > 0 = the NVMe status. */
                        if (cqe->res == 0) {
                                req->res = (int) req->len;
                                req->result64 = cqe->big_cqe[0];
                        } else if (cqe->res > 0) {
                                req->res = -EIO;
                                req->nvme_status = (uint16_t) cqe->res;
                        }
                }
                req->latency_ns = t - req->_t_submit;
                if (req->_buf_idx >= 0)
                        w->free_bufs |= UINT32_C(1) << req->_buf_idx;
                if (kind == RING_POLL)
                        w->pinflight--;
                else if (kind == RING_NVME)
                        w->ninflight--;
                else
                        w->inflight--;
                list_append(done, req);
        }
        io_uring_cq_advance(ring, n);
}

static void worker_wait(UringWorker *w, ReqList *done) {
        struct io_uring_cqe *cqe;
        uint64_t t;
        int r = 0;

        if (w->pinflight > 0)
                /* IOPOLL completions are found only by polling: this spins in
                 * the kernel until one is there. Main-ring completions and new
                 * work wait for it, which is microseconds on a polled queue. */
                r = io_uring_wait_cqe(&w->pring, &cqe);
        else if (io_uring_cq_ready(&w->ring) == 0 &&
                 (w->nring_state <= 0 || io_uring_cq_ready(&w->nring) == 0)) {
                /* Sleep in poll(2) on the ring fds rather than in
                 * io_uring_wait_cqe(): same wakeup (a CQE, the eventfd's
                 * included), but valgrind (3.19) does not know that
                 * io_uring_enter() blocks and would hang every thread of the
                 * process behind this one; and one poll covers both rings.
                 * NVMe passthrough completions come as task work to this
                 * thread: it interrupts the poll, runs, posts the CQE, and
                 * the restarted poll sees it. If something could not be
                 * submitted, retry soon rather than sleep on it. */
                struct pollfd pfd[2] = {
                        { .fd = w->ring.ring_fd, .events = POLLIN },
                        { .fd = w->nring_state > 0 ? w->nring.ring_fd : -1, .events = POLLIN },
                };
                bool retry = io_uring_sq_ready(&w->ring) > 0 ||
                             (w->nring_state > 0 && io_uring_sq_ready(&w->nring) > 0);

                if (poll(pfd, 2, retry ? 1 : -1) < 0)
                        r = -errno;
        }
        if (r < 0 && r != -EINTR && r != -EAGAIN)
                log_debug_errno(r, "Waiting for io_uring completions failed, retrying: %m");

        /* Reaped now: one timestamp for the whole batch. */
        t = now_ns();
        worker_reap(w, &w->ring, RING_MAIN, t, done);
        if (w->pring_state > 0)
                worker_reap(w, &w->pring, RING_POLL, t, done);
        if (w->nring_state > 0)
                worker_reap(w, &w->nring, RING_NVME, t, done);
}

/* While a stream runs and nothing else is in flight or ready, the worker
 * submits and waits on the NVMe ring in one io_uring_enter(), as fio's
 * loop does, instead of submitting and then sleeping in poll(2): one
 * syscall per part instead of two, and the completion's task work runs
 * inside the wait. A request the loop queues meanwhile is taken at the next
 * part's completion (its wakeup lands on the main ring). valgrind never
 * sees this: the vm suite alone has NVMe. */
static bool worker_stream_only(const UringWorker *w) {
        return w->streams && w->nring_state > 0 && w->ninflight > 0 && w->inflight == 0 && w->pinflight == 0 &&
               !w->stop_seen && !w->backlog.head && io_uring_cq_ready(&w->ring) == 0;
}

static void worker_submit_wait_nvme(UringWorker *w, UringReq **reqs, unsigned n, ReqList *done) {
        uint64_t t = now_ns();
        int r;

        for (unsigned i = 0; i < n; i++)
                reqs[i]->_t_submit = t;
        r = io_uring_submit_and_wait(&w->nring, 1);
        if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY)
                log_debug_errno(r, "io_uring_submit_and_wait() failed, retrying: %m");
        t = now_ns();
        worker_reap(w, &w->ring, RING_MAIN, t, done);
        worker_reap(w, &w->nring, RING_NVME, t, done);
}

static void worker_hand_back(UringWorker *w, ReqList *done) {
        UringPool *p = w->pool;
        uint64_t one = 1;

        if (!done->head)
                return;
        pthread_mutex_lock(&p->lock);
        list_splice(&p->done, done);
        pthread_mutex_unlock(&p->lock);
        (void) !write(p->efd, &one, sizeof one);
}

static void worker_loop(UringWorker *w) {
        for (;;) {
                ReqList done = {}, taken;
                Batch b;

                b.n_main = b.n_poll = b.n_nvme = 0;
                pthread_mutex_lock(&w->lock);
                taken = w->queue;
                w->queue = (ReqList) {};
                if (w->stopping)
                        w->stop_seen = true;
                pthread_mutex_unlock(&w->lock);
                list_splice(&w->backlog, &taken);

                worker_arm_wake(w);
                if (w->stop_seen)
                        worker_stop(w, &done);
                else
                        worker_dispatch(w, &b, &done);
                ring_submit(&w->ring, b.main, b.n_main);
                if (w->pring_state > 0)
                        ring_submit(&w->pring, b.poll, b.n_poll);
                if (worker_stream_only(w)) {
                        worker_hand_back(w, &done);
                        worker_submit_wait_nvme(w, b.nvme, b.n_nvme, &done);
                        worker_hand_back(w, &done);
                        continue;
                }
                if (w->nring_state > 0)
                        ring_submit(&w->nring, b.nvme, b.n_nvme);
                worker_hand_back(w, &done);

                if (w->stop_seen && w->inflight == 0 && w->pinflight == 0 && w->ninflight == 0)
                        return;

                worker_wait(w, &done);
                worker_hand_back(w, &done);
        }
}

static void *worker_main(void *arg) {
        UringWorker *w = arg;
        UringPool *p = w->pool;
        int r;

        (void) thread_leave_realtime();
        worker_pin(w);
        /* The ring is created here: with SINGLE_ISSUER only its creator may
         * submit, and io-wq helpers inherit this thread's affinity. */
        r = ring_setup(&w->ring, 0);
        if (r >= 0) {
                w->ring_up = true;
                r = worker_setup_bufs(w);
        }
        if (r < 0)
                log_debug_errno(r, "Cannot set up io_uring worker: %m");

        pthread_mutex_lock(&p->lock);
        w->init_r = r;
        w->init_done = true;
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);

        if (r >= 0) {
                w->wake_multishot = w->wake_need_arm = true;
                worker_loop(w);
        }
        worker_teardown(w);
        return NULL;
}

static void pool_deliver(UringPool *p) {
        UringReq *req;

        pthread_mutex_lock(&p->lock);
        req = p->done.head;
        p->done = (ReqList) {};
        pthread_mutex_unlock(&p->lock);

        while (req) {
                UringReq *next = req->_next; /* done may resubmit or free req */

                req->_next = NULL;
                p->pending--;
                if (req->done)
                        req->done(req, req->userdata);
                req = next;
        }
}

static int on_eventfd(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        UringPool *p = userdata;
        uint64_t v;

        (void) !read(fd, &v, sizeof v);
        pool_deliver(p);
        return 0;
}

/* The CPUs the workers are pinned to, in turn: only those this process may
 * run on (offline ones and those outside the unit's CPUAffinity= would make
 * pinning fail), inside cpus if given. */
static int allowed_cpus(const CpuSet *cpus, unsigned **ret, unsigned *ret_n) {
        _cleanup_free_ unsigned *list = NULL;
        cpu_set_t allowed;
        unsigned n = 0;

        CPU_ZERO(&allowed);
        if (sched_getaffinity(0, sizeof allowed, &allowed) < 0)
                return -errno;
        list = calloc(CPU_MAX, sizeof *list);
        if (!list)
                return -ENOMEM;
        for (unsigned c = 0; c < CPU_MAX && c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &allowed) && (!cpus || cpuset_isset(cpus, c)))
                        list[n++] = c;
        if (n == 0)
                return -EINVAL;
        *ret = TAKE_PTR(list);
        *ret_n = n;
        return 0;
}

/* Starts the worker threads (with every signal blocked: those are for the
 * event loop's signalfd) and waits until each has set up its ring. */
static int workers_start(UringPool *p) {
        sigset_t all, old;
        int r = 0;

        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        for (unsigned i = 0; i < p->n_workers; i++) {
                UringWorker *w = &p->workers[i];
                pthread_attr_t a;

                pthread_attr_init(&a);
                pthread_attr_setstacksize(&a, 256 * 1024);
                r = -pthread_create(&w->thread, &a, worker_main, w);
                pthread_attr_destroy(&a);
                if (r < 0)
                        break;
                w->started = true;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r < 0)
                return r;

        pthread_mutex_lock(&p->lock);
        for (unsigned i = 0; i < p->n_workers; i++) {
                while (!p->workers[i].init_done)
                        pthread_cond_wait(&p->cond, &p->lock);
                if (p->workers[i].init_r < 0 && r >= 0)
                        r = p->workers[i].init_r;
        }
        pthread_mutex_unlock(&p->lock);
        return r;
}

int uring_pool_new(UringPool **ret, sd_event *e, unsigned n_workers, const CpuSet *cpus,
                   uint32_t fixed_buf_size) {
        _cleanup_(uring_pool_freep) UringPool *p = NULL;
        _cleanup_free_ unsigned *cpu_list = NULL;
        unsigned n_cpus = 0;
        int r;

        if (!ret || !e || n_workers < 1 || fixed_buf_size > UINT32_MAX - (URING_BUF_ALIGN - 1))
                return -EINVAL;
        r = allowed_cpus(cpus, &cpu_list, &n_cpus);
        if (r < 0)
                return r;

        p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->efd = -EBADF;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->cond, NULL);
        p->fixed_buf_size = (fixed_buf_size + URING_BUF_ALIGN - 1) & ~(URING_BUF_ALIGN - 1);
        p->workers = calloc(n_workers, sizeof *p->workers);
        if (!p->workers)
                return -ENOMEM;
        for (unsigned i = 0; i < n_workers; i++) {
                UringWorker *w = &p->workers[i];

                w->pool = p;
                w->want_cpu = (int) cpu_list[i % n_cpus];
                w->cpu = -1;
                w->wake_fd = -EBADF;
                pthread_mutex_init(&w->lock, NULL);
        }
        p->n_workers = n_workers;

        p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (p->efd < 0)
                return -errno;
        for (unsigned i = 0; i < n_workers; i++) {
                p->workers[i].wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
                if (p->workers[i].wake_fd < 0)
                        return -errno;
        }
        r = sd_event_add_io(e, &p->source, p->efd, EPOLLIN, on_eventfd, p);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(p->source, "uring-pool");

        r = workers_start(p);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(p);
        return 0;
}

int uring_pool_submit(UringPool *p, UringReq *req) {
        UringWorker *w = NULL;
        uint64_t one = 1;
        bool was_empty;

        if (!p || !req)
                return -EINVAL;
        if (p->freeing)
                return -ESHUTDOWN;
        if (req->op != URING_OP_READ && req->op != URING_OP_WRITE && req->op != URING_OP_NVME_IO &&
            req->op != URING_OP_NVME_STREAM && req->op != URING_OP_WRITE_STREAM)
                return -EINVAL;
        if (req->op == URING_OP_WRITE_STREAM && stream_of(req)->lba_shift != 0)
                return -EINVAL;
        if (req->op == URING_OP_NVME_STREAM || req->op == URING_OP_WRITE_STREAM) {
                UringStream *st = stream_of(req);

                if (!req->buf || req->flags || st->depth < 1 || st->depth > URING_STREAM_DEPTH_MAX ||
                    st->part_len == 0 || st->lba_shift > 16 || st->part_len % (UINT32_C(1) << st->lba_shift) ||
                    req->len % (UINT32_C(1) << st->lba_shift) || (!st->parts && req->len))
                        return -EINVAL;
                atomic_store_explicit(&st->_parts_done, 0, memory_order_relaxed);
        }
        if (req->op == URING_OP_NVME_IO && (req->flags & URING_REQ_POLLED))
                return -EINVAL;
        if (req->ioprio && req->op != URING_OP_READ && req->op != URING_OP_WRITE)
                return -EINVAL;
        if (!req->buf && (p->fixed_buf_size == 0 || req->len > p->fixed_buf_size))
                return -EINVAL;

        if (req->cpu >= 0)
                for (unsigned i = 0; i < p->n_workers; i++) {
                        UringWorker *c = &p->workers[(p->rr + i) % p->n_workers];

                        if (c->cpu == req->cpu) {
                                w = c;
                                break;
                        }
                }
        if (!w)
                w = &p->workers[p->rr % p->n_workers];
        p->rr++;

        req->res = 0;
        req->result64 = 0;
        req->nvme_status = 0;
        req->latency_ns = 0;
        req->worker_cpu = -1;
        req->_t_submit = 0;
        req->_buf_idx = -1;

        pthread_mutex_lock(&w->lock);
        was_empty = !w->queue.head;
        list_append(&w->queue, req);
        pthread_mutex_unlock(&w->lock);
        /* A non-empty queue has a wakeup on its way already. */
        if (was_empty)
                (void) !write(w->wake_fd, &one, sizeof one);
        p->pending++;
        return 0;
}

uint32_t uring_stream_parts_done(UringStream *s) {
        return atomic_load_explicit(&s->_parts_done, memory_order_acquire);
}

unsigned uring_pool_pending(UringPool *p) {
        return p ? p->pending : 0;
}

UringPool *uring_pool_free(UringPool *p) {
        uint64_t one = 1;

        if (!p)
                return NULL;
        p->freeing = true;
        for (unsigned i = 0; i < p->n_workers; i++) {
                UringWorker *w = &p->workers[i];

                if (!w->started)
                        continue;
                pthread_mutex_lock(&w->lock);
                w->stopping = true;
                pthread_mutex_unlock(&w->lock);
                (void) !write(w->wake_fd, &one, sizeof one);
        }
        for (unsigned i = 0; i < p->n_workers; i++)
                if (p->workers[i].started)
                        pthread_join(p->workers[i].thread, NULL);
        pool_deliver(p);

        for (unsigned i = 0; i < p->n_workers; i++) {
                closep(&p->workers[i].wake_fd);
                pthread_mutex_destroy(&p->workers[i].lock);
        }
        free(p->workers);
        sd_event_source_disable_unref(p->source);
        closep(&p->efd);
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->cond);
        free(p);
        return NULL;
}
