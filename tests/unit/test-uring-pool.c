/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The io_uring worker pool against a real file in the build directory (O_DIRECT
 * where the file system has it): caller and registered buffers, many requests
 * in flight on two workers, writes, errors, polled requests, cancellation on
 * free, CPU preference, resubmission from done callbacks, registration
 * failing under a tiny RLIMIT_MEMLOCK, and NVMe passthrough requests on
 * fds that are no NVMe device. No root needed. */

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "cleanup.h"
#include "uring-pool.h"

#define FILE_SIZE (4U << 20)
#define BLK 4096U

typedef struct Fixture {
        sd_event *e;
        int fd;          /* O_DIRECT if the file system allows it */
        int fd_buffered;
        bool direct;
} Fixture;

typedef struct Counter {
        unsigned n;
} Counter;

static uint8_t pat(uint64_t off) {
        uint64_t x = (off + 1) * UINT64_C(0x9e3779b97f4a7c15);
        return (uint8_t) ((x >> 56) ^ (off >> 12));
}

static bool check_pat(const uint8_t *buf, uint64_t off, size_t len) {
        for (size_t i = 0; i < len; i++)
                if (buf[i] != pat(off + i))
                        return false;
        return true;
}

static void *balloc(size_t len) {
        void *b = NULL;

        assert_int_equal(posix_memalign(&b, BLK, len), 0);
        memset(b, 0xee, len); /* defined for valgrind before the kernel writes it */
        return b;
}

static int setup(void **state) {
        Fixture *f = calloc(1, sizeof *f);
        char path[] = "uring-pool-test.XXXXXX";
        _cleanup_free_ uint8_t *data = malloc(FILE_SIZE);
        int fd;

        assert_non_null(f);
        assert_non_null(data);
        assert_int_equal(sd_event_new(&f->e), 0);
        /* The build directory (cwd under meson test): ext4 or xfs usually,
         * where O_DIRECT works; tmpfs does not have it. */
        fd = mkstemp(path);
        assert_true(fd >= 0);
        for (uint32_t i = 0; i < FILE_SIZE; i++)
                data[i] = pat(i);
        assert_int_equal(pwrite(fd, data, FILE_SIZE, 0), (ssize_t) FILE_SIZE);
        assert_int_equal(fsync(fd), 0);
        f->fd_buffered = fd;
        f->fd = open(path, O_RDWR | O_CLOEXEC | O_DIRECT);
        if (f->fd >= 0)
                f->direct = true;
        else {
                assert_int_equal(errno, EINVAL);
                f->fd = open(path, O_RDWR | O_CLOEXEC);
                assert_true(f->fd >= 0);
        }
        assert_int_equal(unlink(path), 0);
        *state = f;
        return 0;
}

static int teardown(void **state) {
        Fixture *f = *state;

        close(f->fd);
        close(f->fd_buffered);
        sd_event_unref(f->e);
        free(f);
        return 0;
}

static void count_done(UringReq *req, void *userdata) {
        Counter *c = userdata;

        c->n++;
}

/* Runs the loop until *n reaches want; fails after ~30 s. */
static void run_until(sd_event *e, const unsigned *n, unsigned want) {
        for (unsigned i = 0; *n < want && i < 300; i++)
                assert_true(sd_event_run(e, 100 * 1000) >= 0);
        assert_int_equal(*n, want);
}

static UringReq mkreq(int fd, int op, uint64_t off, uint32_t len, void *buf, Counter *c) {
        return (UringReq) {
                .fd = fd, .op = op, .offset = off, .len = len, .buf = buf, .cpu = -1,
                .done = count_done, .userdata = c,
        };
}

static void test_read_caller_buf(void **state) {
        Fixture *f = *state;
        _cleanup_(uring_pool_freep) UringPool *p = NULL;
        _cleanup_free_ uint8_t *buf = balloc(2 * BLK);
        Counter c = {};
        UringReq r = mkreq(f->fd, URING_OP_READ, 3 * BLK, 2 * BLK, buf, &c);

        assert_int_equal(uring_pool_new(&p, f->e, 1, NULL, 0), 0);
        assert_int_equal(uring_pool_submit(p, &r), 0);
        assert_int_equal(uring_pool_pending(p), 1);
        run_until(f->e, &c.n, 1);
        assert_int_equal(uring_pool_pending(p), 0);
        assert_int_equal(r.res, (int) (2 * BLK));
        assert_true(r.latency_ns > 0);
        assert_true(r.worker_cpu >= 0);
        assert_true(check_pat(buf, 3 * BLK, 2 * BLK));
}

static void test_read_fixed_buf(void **state) {
        Fixture *f = *state;
        _cleanup_(uring_pool_freep) UringPool *p = NULL, *p0 = NULL;
        Counter c = {};
        UringReq r = mkreq(f->fd, URING_OP_READ, 16 * BLK, 64 * 1024, NULL, &c);
        UringReq big = mkreq(f->fd, URING_OP_READ, 0, (1U << 20) + 1, NULL, &c);
        UringReq badop = mkreq(f->fd, 7, 0, BLK, NULL, &c);

        assert_int_equal(uring_pool_new(&p, f->e, 1, NULL, 1U << 20), 0);
        assert_int_equal(uring_pool_submit(p, &r), 0);
        assert_int_equal(uring_pool_submit(p, &big), -EINVAL);
        assert_int_equal(uring_pool_submit(p, &badop), -EINVAL);
        run_until(f->e, &c.n, 1);
        assert_int_equal(r.res, 64 * 1024);
        assert_true(r.latency_ns > 0);

        /* No fixed buffers: buf NULL is a caller error. */
        assert_int_equal(uring_pool_new(&p0, f->e, 1, NULL, 0), 0);
        r = mkreq(f->fd, URING_OP_READ, 0, BLK, NULL, &c);
        assert_int_equal(uring_pool_submit(p0, &r), -EINVAL);
        assert_int_equal(uring_pool_pending(p0), 0);
}

/* The request's I/O priority reaches the kernel: an idle-class read is
 * served, and a class the kernel does not know (7) is refused by it in the
 * completion, which it could not be if the field were dropped. Only reads
 * and writes carry one. */
static void test_ioprio(void **state) {
        Fixture *f = *state;
        _cleanup_(uring_pool_freep) UringPool *p = NULL;
        _cleanup_free_ uint8_t *buf = balloc(2 * BLK), *buf2 = balloc(BLK);
        Counter c = {};
        UringReq idle = mkreq(f->fd, URING_OP_READ, 5 * BLK, 2 * BLK, buf, &c);
        UringReq bad = mkreq(f->fd, URING_OP_READ, 0, BLK, buf2, &c);
        UringReq nvme = mkreq(f->fd, URING_OP_NVME_IO, 0, BLK, buf2, &c);

        idle.ioprio = URING_IOPRIO_IDLE;
        bad.ioprio = (uint16_t) (7U << 13);
        nvme.ioprio = URING_IOPRIO_IDLE;
        assert_int_equal(uring_pool_new(&p, f->e, 1, NULL, 0), 0);
        assert_int_equal(uring_pool_submit(p, &nvme), -EINVAL);
        assert_int_equal(uring_pool_submit(p, &idle), 0);
        assert_int_equal(uring_pool_submit(p, &bad), 0);
        run_until(f->e, &c.n, 2);
        assert_int_equal(idle.res, (int) (2 * BLK));
        assert_true(check_pat(buf, 5 * BLK, 2 * BLK));
        assert_int_equal(bad.res, -EINVAL);
}

static void test_bad_args(void **state) {
        Fixture *f = *state;
        UringPool *p = NULL;
        CpuSet none = {};

        assert_int_equal(uring_pool_new(&p, f->e, 0, NULL, 0), -EINVAL);
        assert_int_equal(uring_pool_new(&p, f->e, 1, &none, 0), -EINVAL);
        assert_null(p);
        assert_null(uring_pool_free(NULL));
        assert_int_equal(uring_pool_pending(NULL), 0);
}

#define N_CONC 200

static void test_concurrent(void **state) {
        Fixture *f = *state;
        _cleanup_(uring_pool_freep) UringPool *p = NULL;
        UringReq *reqs = calloc(N_CONC, sizeof *reqs);
        uint8_t *bufs[N_CONC] = {};
        Counter c = {};
        uint64_t seed = 42;

        assert_non_null(reqs);
        assert_int_equal(uring_pool_new(&p, f->e, 2, NULL, 64 * 1024), 0);
        for (unsigned i = 0; i < N_CONC; i++) {
                uint32_t len;
                uint64_t off;

                seed = seed * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
                len = BLK * (1 + (unsigned) ((seed >> 33) % 4));
                off = BLK * ((seed >> 40) % (FILE_SIZE / BLK - 4));
                /* Every fourth on a registered buffer: more of those than
                 * buffers, so they queue for one. */
                if (i % 4 != 0)
                        bufs[i] = balloc(len);
                reqs[i] = mkreq(f->fd, URING_OP_READ, off, len, bufs[i], &c);
                assert_int_equal(uring_pool_submit(p, &reqs[i]), 0);
        }
        assert_int_equal(uring_pool_pending(p), N_CONC);
        run_until(f->e, &c.n, N_CONC);
        assert_int_equal(uring_pool_pending(p), 0);
        for (unsigned i = 0; i < N_CONC; i++) {
                assert_int_equal(reqs[i].res, (int) reqs[i].len);
                assert_true(reqs[i].latency_ns > 0);
                assert_true(reqs[i].worker_cpu >= 0);
                if (bufs[i])
                        assert_true(check_pat(bufs[i], reqs[i].offset, reqs[i].len));
                free(bufs[i]);
        }
        free(reqs);
}

static void test_write_round_trip(void **state) {
        Fixture *f = *state;
        _cleanup_(uring_pool_freep) UringPool *p = NULL;
        _cleanup_free_ uint8_t *out = balloc(BLK), *in = balloc(BLK);
        Counter c = {};
        UringReq w = mkreq(f->fd, URING_OP_WRITE, 100 * BLK, BLK, out, &c);
        UringReq r = mkreq(f->fd, URING_OP_READ, 100 * BLK, BLK, in, &c);

        for (unsigned i = 0; i < BLK; i++)
                out[i] = (uint8_t) (i * 31 + 7);
        assert_int_equal(uring_pool_new(&p, f->e, 2, NULL, 0), 0);
        assert_int_equal(uring_pool_submit(p, &w), 0);
        run_until(f->e, &c.n, 1);
        assert_int_equal(w.res, (int) BLK);
        assert_int_equal(uring_pool_submit(p, &r), 0);
        run_until(f->e, &c.n, 2);
        assert_int_equal(r.res, (int) BLK);
        assert_memory_equal(in, out, BLK);
}

static void test_bad_fd(void **state) {
        Fixture *f = *state;
        _cleanup_(uring_pool_freep) UringPool *p = NULL;
        _cleanup_free_ uint8_t *buf = balloc(BLK);
        Counter c = {};
        UringReq r1 = mkreq(-1, URING_OP_READ, 0, BLK, buf, &c);
        UringReq r2 = mkreq(1 << 20, URING_OP_READ, 0, BLK, NULL, &c);
        UringReq r3 = mkreq(f->fd, URING_OP_READ, 0, BLK, buf, &c);

        assert_int_equal(uring_pool_new(&p, f->e, 1, NULL, BLK), 0);
        assert_int_equal(uring_pool_submit(p, &r1), 0);
        assert_int_equal(uring_pool_submit(p, &r2), 0);
        assert_int_equal(uring_pool_submit(p, &r3), 0); /* a good one in the same batch */
        run_until(f->e, &c.n, 3);
        assert_int_equal(r1.res, -EBADF);
        assert_int_equal(r2.res, -EBADF);
        assert_int_equal(r3.res, (int) BLK);
}

static void test_polled(void **state) {
        Fixture *f = *state;
        _cleanup_(uring_pool_freep) UringPool *p = NULL;
        _cleanup_free_ uint8_t *buf = balloc(BLK), *buf2 = balloc(BLK);
        Counter c = {};
        UringReq nodirect = mkreq(f->fd_buffered, URING_OP_READ, 0, BLK, buf2, &c);
        UringReq r = mkreq(f->fd, URING_OP_READ, 5 * BLK, BLK, buf, &c);
        UringReq rf = mkreq(f->fd, URING_OP_READ, 6 * BLK, BLK, NULL, &c);
        UringReq plain = mkreq(f->fd, URING_OP_READ, 0, BLK, NULL, &c);

        nodirect.flags = r.flags = rf.flags = URING_REQ_POLLED;
        assert_int_equal(uring_pool_new(&p, f->e, 1, NULL, BLK), 0);
        assert_int_equal(uring_pool_submit(p, &nodirect), 0);
        assert_int_equal(uring_pool_submit(p, &r), 0);
        assert_int_equal(uring_pool_submit(p, &rf), 0);
        assert_int_equal(uring_pool_submit(p, &plain), 0);
        run_until(f->e, &c.n, 4);
        /* Polled I/O needs O_DIRECT. */
        assert_int_equal(nodirect.res, -EOPNOTSUPP);
        if (!f->direct) {
                assert_int_equal(r.res, -EOPNOTSUPP);
                assert_int_equal(rf.res, -EOPNOTSUPP);
        } else {
                /* ext4 and xfs have ->iopoll; whether the disk has poll
                 * queues only changes who notices the completion. */
                print_message("polled O_DIRECT read: res %d, %llu ns\n", r.res,
                              (unsigned long long) r.latency_ns);
                assert_true(r.res == (int) BLK || r.res == -EOPNOTSUPP);
                assert_true(rf.res == (int) BLK || rf.res == -EOPNOTSUPP);
                if (r.res > 0) {
                        assert_true(check_pat(buf, 5 * BLK, BLK));
                        assert_true(r.latency_ns > 0);
                }
        }
        assert_int_equal(plain.res, (int) BLK);
}

static void test_free_cancels(void **state) {
        Fixture *f = *state;
        UringPool *p = NULL;
        _cleanup_free_ uint8_t *buf = balloc(3 * BLK);
        UringReq reqs[4 + 3 + 5];
        Counter c = {};
        int pfd[2];
        unsigned n = 0;

        assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
        assert_int_equal(uring_pool_new(&p, f->e, 1, NULL, BLK), 0);
        /* Reads parked on an empty pipe hold every registered buffer ... */
        for (unsigned i = 0; i < URING_POOL_FIXED_BUFS; i++)
                reqs[n++] = mkreq(pfd[0], URING_OP_READ, 0, BLK, NULL, &c);
        /* ... and the ring, with caller buffers ... */
        for (unsigned i = 0; i < 3; i++)
                reqs[n++] = mkreq(pfd[0], URING_OP_READ, 0, BLK, buf + i * BLK, &c);
        /* ... so these wait for a buffer, never submitted. */
        for (unsigned i = 0; i < 5; i++)
                reqs[n++] = mkreq(f->fd, URING_OP_READ, i * BLK, BLK, NULL, &c);
        assert_int_equal(n, ELEMENTSOF(reqs));
        for (unsigned i = 0; i < n; i++)
                assert_int_equal(uring_pool_submit(p, &reqs[i]), 0);
        /* Give the worker time to submit (not an assertion on timing). */
        for (unsigned i = 0; i < 5; i++)
                assert_true(sd_event_run(f->e, 10 * 1000) >= 0);
        assert_int_equal(c.n, 0);
        assert_int_equal(uring_pool_pending(p), n);

        p = uring_pool_free(p);
        assert_int_equal(c.n, n);
        for (unsigned i = 0; i < n; i++)
                assert_int_equal(reqs[i].res, -ECANCELED);
        close(pfd[0]);
        close(pfd[1]);
}

static bool can_pin(void) {
        cpu_set_t s;

        return sched_getaffinity(0, sizeof s, &s) == 0 &&
               pthread_setaffinity_np(pthread_self(), sizeof s, &s) == 0;
}

static void test_cpu_preference(void **state) {
        Fixture *f = *state;
        _cleanup_free_ uint8_t *buf = balloc(BLK);
        cpu_set_t allowed;
        CpuSet one = {};
        int cpus[8], first;
        unsigned n_cpus = 0;

        if (!can_pin()) {
                print_message("cannot set CPU affinity here, skipping\n");
                return;
        }
        assert_int_equal(sched_getaffinity(0, sizeof allowed, &allowed), 0);
        for (int c = 0; c < CPU_SETSIZE && n_cpus < ELEMENTSOF(cpus); c++)
                if (CPU_ISSET(c, &allowed))
                        cpus[n_cpus++] = c;
        assert_true(n_cpus > 0);
        first = cpus[0];

        /* One worker per CPU: each request runs where it asked. */
        {
                _cleanup_(uring_pool_freep) UringPool *p = NULL;

                assert_int_equal(uring_pool_new(&p, f->e, n_cpus, NULL, 0), 0);
                for (unsigned round = 0; round < 3; round++)
                        for (unsigned i = 0; i < n_cpus; i++) {
                                Counter c = {};
                                UringReq r = mkreq(f->fd, URING_OP_READ, 0, BLK, buf, &c);

                                r.cpu = cpus[(i + round) % n_cpus];
                                assert_int_equal(uring_pool_submit(p, &r), 0);
                                run_until(f->e, &c.n, 1);
                                assert_int_equal(r.res, (int) BLK);
                                assert_int_equal(r.worker_cpu, r.cpu);
                        }
        }

        /* Two workers on one CPU: a preference for another one falls back
         * to round-robin, still on that CPU. */
        {
                _cleanup_(uring_pool_freep) UringPool *p = NULL;
                Counter c = {};
                UringReq r[4];

                cpuset_set(&one, (unsigned) first);
                assert_int_equal(uring_pool_new(&p, f->e, 2, &one, 0), 0);
                for (unsigned i = 0; i < ELEMENTSOF(r); i++) {
                        r[i] = mkreq(f->fd, URING_OP_READ, 0, BLK, buf, &c);
                        r[i].cpu = n_cpus > 1 ? cpus[1] : (int) i % 2 - 1;
                        assert_int_equal(uring_pool_submit(p, &r[i]), 0);
                }
                run_until(f->e, &c.n, ELEMENTSOF(r));
                for (unsigned i = 0; i < ELEMENTSOF(r); i++) {
                        assert_int_equal(r[i].res, (int) BLK);
                        assert_int_equal(r[i].worker_cpu, first);
                }
        }
}

typedef struct Chain {
        UringPool *p;
        unsigned n, want;
        bool ok;
} Chain;

static void chain_done(UringReq *req, void *userdata) {
        Chain *ch = userdata;

        if (req->res != (int) req->len || !check_pat(req->buf, req->offset, req->len))
                ch->ok = false;
        if (++ch->n < ch->want) {
                req->offset = (req->offset + 7 * BLK) % (FILE_SIZE - BLK);
                if (uring_pool_submit(ch->p, req) < 0)
                        ch->ok = false;
        }
}

static void test_resubmit_from_done(void **state) {
        Fixture *f = *state;
        _cleanup_(uring_pool_freep) UringPool *p = NULL;
        _cleanup_free_ uint8_t *buf = balloc(BLK);
        Chain ch = { .want = 50, .ok = true };
        UringReq r = {
                .fd = f->fd, .op = URING_OP_READ, .len = BLK, .buf = buf, .cpu = -1,
                .done = chain_done, .userdata = &ch,
        };

        assert_int_equal(uring_pool_new(&p, f->e, 2, NULL, 0), 0);
        ch.p = p;
        assert_int_equal(uring_pool_submit(p, &r), 0);
        run_until(f->e, &ch.n, ch.want);
        assert_true(ch.ok);
        assert_int_equal(uring_pool_pending(p), 0);
}

/* Drops CAP_IPC_LOCK from this thread's effective set (the workers inherit
 * it), so registered buffers count against RLIMIT_MEMLOCK even as root. */
static int set_ipc_lock(bool on) {
        struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
        struct __user_cap_data_struct d[2];

        if (syscall(SYS_capget, &h, d) < 0)
                return -errno;
        if (on && (d[0].permitted & (1U << CAP_IPC_LOCK)))
                d[0].effective |= 1U << CAP_IPC_LOCK;
        else if (!on)
                d[0].effective &= ~(1U << CAP_IPC_LOCK);
        return syscall(SYS_capset, &h, d) < 0 ? -errno : 0;
}

static void test_memlock_fallback(void **state) {
        Fixture *f = *state;
        UringPool *p = NULL;
        struct rlimit old, tiny;
        Counter c = {};
        UringReq r = mkreq(f->fd, URING_OP_READ, 8 * BLK, 256 * 1024, NULL, &c);
        UringReq pr = mkreq(f->fd, URING_OP_READ, 8 * BLK, BLK, NULL, &c);

        assert_int_equal(getrlimit(RLIMIT_MEMLOCK, &old), 0);
        tiny = (struct rlimit) { .rlim_cur = 512 * 1024, .rlim_max = old.rlim_max };
        assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &tiny), 0);
        assert_int_equal(set_ipc_lock(false), 0);

        /* The rings fit in 512 KiB, 2 workers × 4 × 1 MiB of buffers do not:
         * reads still work, from the same buffers unregistered (logged
         * once). Without CAP_IPC_LOCK the rings count too, per user, and
         * the kernel uncharges a closed ring a little later: the pools of
         * the tests before may still be charged, so retry for a while. */
        for (unsigned i = 0; i < 100; i++) {
                int k = uring_pool_new(&p, f->e, 2, NULL, 1U << 20);

                if (k != -ENOMEM) {
                        assert_int_equal(k, 0);
                        break;
                }
                usleep(20 * 1000);
        }
        assert_non_null(p);
        assert_int_equal(set_ipc_lock(true), 0);
        assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &old), 0);

        pr.flags = URING_REQ_POLLED;
        assert_int_equal(uring_pool_submit(p, &r), 0);
        assert_int_equal(uring_pool_submit(p, &pr), 0);
        run_until(f->e, &c.n, 2);
        assert_int_equal(r.res, 256 * 1024);
        assert_true(pr.res == (int) BLK || pr.res == -EOPNOTSUPP);
        uring_pool_free(p);
}

/* NVMe passthrough (URING_OP_NVME_IO) where there is no NVMe: a regular
 * file, a pipe and a bad fd complete with an error, never hang, and leave
 * the worker's other rings working. What the kernel says: -EOPNOTSUPP (no
 * ->uring_cmd), -EBADF; -EOPNOTSUPP too before 5.19 (no SQE128 ring). The
 * real thing runs in the vm suite (tests/vm/guest/zbd-nvme.sh). */
static bool nvme_refused(int res) {
        return res == -EOPNOTSUPP || res == -ENOTTY || res == -EINVAL;
}

static void test_nvme_not_nvme(void **state) {
        Fixture *f = *state;
        _cleanup_(uring_pool_freep) UringPool *p = NULL;
        _cleanup_free_ uint8_t *buf = balloc(8 * BLK), *rbuf = balloc(BLK);
        UringReq nv[6], plain, polled, badop;
        Counter c = {};
        int pfd[2];

        assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
        assert_int_equal(uring_pool_new(&p, f->e, 2, NULL, BLK), 0);
        for (unsigned i = 0; i < ELEMENTSOF(nv); i++) {
                /* A Zone Append of 1 block to "zone" i, as zbd-nvme.c builds it. */
                nv[i] = mkreq(f->fd, URING_OP_NVME_IO, 0, BLK, buf + i * BLK, &c);
                nv[i].nvme = (UringNvmeCmd) { .opcode = 0x7d, .nsid = 1, .cdw10 = i * 16, .cdw12 = 0 };
                nv[i].result64 = 0xdead;
                nv[i].nvme_status = 0xbeef;
        }
        nv[3].fd = f->fd_buffered;
        nv[4].fd = pfd[1];
        nv[5].fd = -1;
        nv[2].buf = NULL; /* a pool buffer, unregistered on this ring */
        plain = mkreq(f->fd, URING_OP_READ, 7 * BLK, BLK, rbuf, &c);

        /* Passthrough is never polled here; an unknown op stays -EINVAL. */
        polled = nv[0];
        polled.flags = URING_REQ_POLLED;
        assert_int_equal(uring_pool_submit(p, &polled), -EINVAL);
        badop = mkreq(f->fd, _URING_OP_MAX, 0, BLK, buf, &c);
        assert_int_equal(uring_pool_submit(p, &badop), -EINVAL);

        for (unsigned i = 0; i < ELEMENTSOF(nv); i++)
                assert_int_equal(uring_pool_submit(p, &nv[i]), 0);
        assert_int_equal(uring_pool_submit(p, &plain), 0);
        run_until(f->e, &c.n, ELEMENTSOF(nv) + 1);
        assert_int_equal(uring_pool_pending(p), 0);
        for (unsigned i = 0; i < ELEMENTSOF(nv); i++) {
                print_message("NVMe passthrough on a non-NVMe fd (%u): res %d (%s)\n", i, nv[i].res,
                              nv[i].res < 0 ? strerror(-nv[i].res) : "?");
                if (i == 5)
                        assert_int_equal(nv[i].res, -EBADF);
                else
                        assert_true(nvme_refused(nv[i].res));
                assert_int_equal(nv[i].result64, 0);
                assert_int_equal(nv[i].nvme_status, 0);
        }
        assert_int_equal(plain.res, (int) BLK);
        assert_true(check_pat(rbuf, 7 * BLK, BLK));

        /* The worker goes on after its passthrough ring is up: again, with
         * the requests resubmitted, and a plain read alongside. */
        c.n = 0;
        assert_int_equal(uring_pool_submit(p, &nv[0]), 0);
        assert_int_equal(uring_pool_submit(p, &plain), 0);
        assert_int_equal(uring_pool_submit(p, &nv[1]), 0);
        run_until(f->e, &c.n, 3);
        assert_true(nvme_refused(nv[0].res));
        assert_true(nvme_refused(nv[1].res));
        assert_int_equal(plain.res, (int) BLK);
        close(pfd[0]);
        close(pfd[1]);
}

/* A stream (URING_OP_NVME_STREAM) where there is no NVMe: bad shapes are
 * refused at submission; on a regular file the first parts fail, no part
 * starts after that (at most depth were started), every started part is
 * accounted in order, done runs once with the first error, and the worker
 * goes on. The real thing runs in the vm suite (vm-zones, vm-zbd-nvme). */
static void test_stream_not_nvme(void **state) {
        Fixture *f = *state;
        _cleanup_(uring_pool_freep) UringPool *p = NULL;
        _cleanup_free_ uint8_t *buf = balloc(40 * BLK), *rbuf = balloc(BLK);
        UringStreamPart parts[10];
        UringStream st = {}, bad;
        UringReq plain;
        Counter c = {};
        uint32_t done;

        assert_int_equal(uring_pool_new(&p, f->e, 1, NULL, 0), 0);
        st.req = mkreq(f->fd, URING_OP_NVME_STREAM, 0, 40 * BLK, buf, &c);
        st.req.nvme = (UringNvmeCmd) { .opcode = 0x7d, .nsid = 1 };
        st.part_len = 4 * BLK;
        st.lba_shift = 12;
        st.depth = 3;
        st.parts = parts;
        assert_int_equal(uring_stream_parts(&st), 10);

        bad = st;
        bad.depth = 0;
        assert_int_equal(uring_pool_submit(p, &bad.req), -EINVAL);
        bad = st;
        bad.depth = URING_STREAM_DEPTH_MAX + 1;
        assert_int_equal(uring_pool_submit(p, &bad.req), -EINVAL);
        bad = st;
        bad.part_len = BLK + 512; /* not whole blocks of 1 << 12 */
        assert_int_equal(uring_pool_submit(p, &bad.req), -EINVAL);
        bad = st;
        bad.req.buf = NULL;
        assert_int_equal(uring_pool_submit(p, &bad.req), -EINVAL);
        assert_int_equal(uring_pool_pending(p), 0);

        assert_int_equal(uring_pool_submit(p, &st.req), 0);
        run_until(f->e, &c.n, 1);
        done = uring_stream_parts_done(&st);
        print_message("stream on a regular file: res %d (%s), %u of 10 parts started and done\n", st.req.res,
                      strerror(-st.req.res), done);
        assert_true(nvme_refused(st.req.res));
        assert_true(done >= 1 && done <= st.depth);
        for (uint32_t i = 0; i < done; i++) {
                assert_true(nvme_refused(parts[i].res));
                assert_int_equal(parts[i].result64, 0);
        }
        assert_int_equal(uring_pool_pending(p), 0);

        /* The worker goes on: a plain read, then the stream again. */
        c.n = 0;
        plain = mkreq(f->fd, URING_OP_READ, 9 * BLK, BLK, rbuf, &c);
        assert_int_equal(uring_pool_submit(p, &plain), 0);
        assert_int_equal(uring_pool_submit(p, &st.req), 0);
        run_until(f->e, &c.n, 2);
        assert_int_equal(plain.res, (int) BLK);
        assert_true(check_pat(rbuf, 9 * BLK, BLK));
        assert_true(nvme_refused(st.req.res));
}

/* A write stream (URING_OP_WRITE_STREAM), as the emulated zones append:
 * every part lands at its offset, in order, one in flight at depth 1;
 * parts[] says where and how much; a second stream goes on from there. A
 * lba_shift is refused. */
static void test_write_stream(void **state) {
        Fixture *f = *state;
        _cleanup_(uring_pool_freep) UringPool *p = NULL;
        _cleanup_free_ uint8_t *buf = balloc(40 * BLK + 512), *back = malloc(40 * BLK + 512);
        UringStreamPart parts[11];
        UringStream st = {}, bad;
        Counter c = {};

        assert_non_null(back);
        for (uint32_t i = 0; i < 40 * BLK + 512; i++)
                buf[i] = (uint8_t) (i * 7 + 3);
        assert_int_equal(uring_pool_new(&p, f->e, 1, NULL, 0), 0);
        /* The last part is short: 512 bytes (buffered fd: no alignment). */
        st.req = mkreq(f->fd_buffered, URING_OP_WRITE_STREAM, 200 * BLK, 40 * BLK + 512, buf, &c);
        st.part_len = 4 * BLK;
        st.depth = 1;
        st.parts = parts;
        assert_int_equal(uring_stream_parts(&st), 11);
        bad = st;
        bad.lba_shift = 9;
        assert_int_equal(uring_pool_submit(p, &bad.req), -EINVAL);

        assert_int_equal(uring_pool_submit(p, &st.req), 0);
        run_until(f->e, &c.n, 1);
        assert_int_equal(st.req.res, (int) (40 * BLK + 512));
        assert_int_equal(uring_stream_parts_done(&st), 11);
        for (uint32_t i = 0; i < 11; i++) {
                assert_int_equal(parts[i].res, i < 10 ? (int) (4 * BLK) : 512);
                assert_int_equal(parts[i].result64, 200 * BLK + (uint64_t) i * 4 * BLK);
        }
        assert_int_equal(pread(f->fd_buffered, back, 40 * BLK + 512, 200 * BLK), (ssize_t) (40 * BLK + 512));
        assert_memory_equal(back, buf, 40 * BLK + 512);
        /* Untouched around it. */
        assert_int_equal(pread(f->fd_buffered, back, BLK, 199 * BLK), (ssize_t) BLK);
        assert_true(check_pat(back, 199 * BLK, BLK));

        /* A bad fd: the first part fails, no other starts, done once. */
        c.n = 0;
        st.req.fd = -1;
        assert_int_equal(uring_pool_submit(p, &st.req), 0);
        run_until(f->e, &c.n, 1);
        assert_int_equal(st.req.res, -EBADF);
        assert_int_equal(uring_stream_parts_done(&st), 1);
        assert_int_equal(parts[0].res, -EBADF);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_read_caller_buf, setup, teardown),
                cmocka_unit_test_setup_teardown(test_read_fixed_buf, setup, teardown),
                cmocka_unit_test_setup_teardown(test_ioprio, setup, teardown),
                cmocka_unit_test_setup_teardown(test_bad_args, setup, teardown),
                cmocka_unit_test_setup_teardown(test_concurrent, setup, teardown),
                cmocka_unit_test_setup_teardown(test_write_round_trip, setup, teardown),
                cmocka_unit_test_setup_teardown(test_bad_fd, setup, teardown),
                cmocka_unit_test_setup_teardown(test_polled, setup, teardown),
                cmocka_unit_test_setup_teardown(test_free_cancels, setup, teardown),
                cmocka_unit_test_setup_teardown(test_cpu_preference, setup, teardown),
                cmocka_unit_test_setup_teardown(test_resubmit_from_done, setup, teardown),
                cmocka_unit_test_setup_teardown(test_memlock_fallback, setup, teardown),
                cmocka_unit_test_setup_teardown(test_nvme_not_nvme, setup, teardown),
                cmocka_unit_test_setup_teardown(test_stream_not_nvme, setup, teardown),
                cmocka_unit_test_setup_teardown(test_write_stream, setup, teardown),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
