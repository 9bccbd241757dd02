/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * modeldisk: a disk with a known behaviour, for testing closed-loop tuning.
 *
 * A FUSE file system (libfuse3, low-level API) that serves one file, "disk",
 * from memory and completes every request after a modelled service time:
 *
 *   - `channels` parallel channels; a request goes to the channel that frees
 *     first (one shared FIFO queue in front of N servers);
 *   - service time = fixed latency per direction + size / bandwidth;
 *   - with --write-bw-usr1, SIGUSR1 changes the write bandwidth to that one
 *     from then on (a disk that slows down under the same workload, as an
 *     SSD does when its write cache fills).
 *
 * The schedule is kept in modelled time (a channel's next free instant), not
 * in the time the replying thread happens to wake up, so host noise delays a
 * reply a little but never shifts the model. Handlers never sleep: they put
 * the request on a heap ordered by completion time, and one completion thread
 * replies when the time comes. Put a loop device over the file with
 * `losetup --direct-io=on` and the block device behaves as its model says.
 *
 * usage: modeldisk [options] MOUNTPOINT
 */

#include "fusedisk.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FILE_INO 2
#define FILE_NAME "disk"
#define MAX_CHANNELS 64

struct model {
        unsigned channels;
        uint64_t read_lat_ns, write_lat_ns;
        uint64_t read_bw, write_bw;     /* bytes per second */
        uint64_t write_bw_usr1;         /* after SIGUSR1, if not 0 */
        uint64_t size;
        uint8_t *mem;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        uint64_t free_at[MAX_CHANNELS]; /* CLOCK_MONOTONIC ns */
        bool stop;
        /* completion heap */
        struct pending *heap;
        size_t n, cap;
        uint64_t nreads, nwrites;
};

struct pending {
        uint64_t due;
        fuse_req_t req;
        bool is_write;
        uint64_t off;
        size_t size;
};

static struct model M = {
        .channels = 4,
        .read_lat_ns = 200000,
        .write_lat_ns = 400000,
        .read_bw = 400ull << 20,
        .write_bw = 200ull << 20,
        .size = 256ull << 20,
        .lock = PTHREAD_MUTEX_INITIALIZER,
        .cond = PTHREAD_COND_INITIALIZER,
};

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

static void heap_push(struct pending p) {
        if (M.n == M.cap) {
                size_t cap = M.cap ? M.cap * 2 : 1024;
                struct pending *h = realloc(M.heap, cap * sizeof(*h));
                if (!h)
                        abort();
                M.heap = h;
                M.cap = cap;
        }
        size_t i = M.n++;
        while (i > 0) {
                size_t parent = (i - 1) / 2;
                if (M.heap[parent].due <= p.due)
                        break;
                M.heap[i] = M.heap[parent];
                i = parent;
        }
        M.heap[i] = p;
}

static struct pending heap_pop(void) {
        struct pending top = M.heap[0], last = M.heap[--M.n];
        size_t i = 0;
        for (;;) {
                size_t c = 2 * i + 1;
                if (c >= M.n)
                        break;
                if (c + 1 < M.n && M.heap[c + 1].due < M.heap[c].due)
                        c++;
                if (M.heap[c].due >= last.due)
                        break;
                M.heap[i] = M.heap[c];
                i = c;
        }
        if (M.n > 0)
                M.heap[i] = last;
        return top;
}

static volatile sig_atomic_t slowed;

static void on_usr1(int sig) {
        (void) sig;
        slowed = 1;
}

/* Schedule one request on the channel that frees first; caller holds M.lock. */
static uint64_t schedule(bool is_write, size_t size) {
        uint64_t now = now_ns();
        unsigned best = 0;
        for (unsigned c = 1; c < M.channels; c++)
                if (M.free_at[c] < M.free_at[best])
                        best = c;
        uint64_t bw = !is_write ? M.read_bw : slowed && M.write_bw_usr1 ? M.write_bw_usr1 : M.write_bw;
        uint64_t service = (is_write ? M.write_lat_ns : M.read_lat_ns) +
                (uint64_t) ((double) size * 1e9 / (double) bw);
        uint64_t start = M.free_at[best] > now ? M.free_at[best] : now;
        M.free_at[best] = start + service;
        return start + service;
}

static void submit(fuse_req_t req, bool is_write, uint64_t off, size_t size) {
        pthread_mutex_lock(&M.lock);
        uint64_t due = schedule(is_write, size);
        heap_push((struct pending) { .due = due, .req = req, .is_write = is_write, .off = off, .size = size });
        if (is_write)
                M.nwrites++;
        else
                M.nreads++;
        pthread_cond_signal(&M.cond);
        pthread_mutex_unlock(&M.lock);
}

static void *completer(void *arg) {
        pthread_mutex_lock(&M.lock);
        while (!M.stop) {
                if (M.n == 0) {
                        pthread_cond_wait(&M.cond, &M.lock);
                        continue;
                }
                uint64_t due = M.heap[0].due;
                if (due > now_ns()) {
                        struct timespec ts = { .tv_sec = due / 1000000000ull, .tv_nsec = due % 1000000000ull };
                        /* the cond uses CLOCK_MONOTONIC (see main) */
                        pthread_cond_timedwait(&M.cond, &M.lock, &ts);
                        continue;
                }
                struct pending p = heap_pop();
                pthread_mutex_unlock(&M.lock);
                if (p.is_write)
                        fuse_reply_write(p.req, p.size);
                else
                        fuse_reply_buf(p.req, (const char *) M.mem + p.off, p.size);
                pthread_mutex_lock(&M.lock);
        }
        pthread_mutex_unlock(&M.lock);
        return NULL;
}

static void md_init(void *userdata, struct fuse_conn_info *conn) {
        /* Async direct I/O comes as background requests: let many through,
         * so the queue that matters is the model's, not FUSE's. */
        conn->max_background = 1024;
        conn->congestion_threshold = 1024;
        conn->max_write = 1 << 20;
        conn->max_readahead = 0;
        if (conn->capable & FUSE_CAP_ASYNC_DIO)
                conn->want |= FUSE_CAP_ASYNC_DIO;
        conn->want &= ~(unsigned) FUSE_CAP_AUTO_INVAL_DATA;
}

static void md_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        if (ino != FILE_INO) {
                fuse_reply_err(req, EISDIR);
                return;
        }
        fi->direct_io = 1;
        fi->keep_cache = 0;
#ifdef FUSE_CAP_PARALLEL_DIRECT_WRITES
        fi->parallel_direct_writes = 1;
#endif
        fuse_reply_open(req, fi);
}

static void md_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
        if ((uint64_t) off >= M.size) {
                fuse_reply_buf(req, NULL, 0);
                return;
        }
        if ((uint64_t) off + size > M.size)
                size = M.size - (uint64_t) off;
        submit(req, false, (uint64_t) off, size);
}

static void md_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi) {
        if ((uint64_t) off >= M.size || (uint64_t) off + size > M.size) {
                fuse_reply_err(req, ENOSPC);
                return;
        }
        memcpy(M.mem + off, buf, size);
        submit(req, true, (uint64_t) off, size);
}

static void md_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        fuse_reply_err(req, 0);
}

static void md_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
        fuse_reply_err(req, 0);
}

static void md_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        fuse_reply_err(req, 0);
}

static pthread_t completer_thread;

/* Requests still on the heap die with the session. */
static void stop_completer(void) {
        pthread_mutex_lock(&M.lock);
        M.stop = true;
        pthread_cond_signal(&M.cond);
        pthread_mutex_unlock(&M.lock);
        pthread_join(completer_thread, NULL);
}

static const struct fuse_lowlevel_ops ops = {
        .init = md_init,
        .lookup = fusedisk_lookup,
        .getattr = fusedisk_getattr,
        .open = md_open,
        .read = md_read,
        .write = md_write,
        .readdir = fusedisk_readdir,
        .flush = md_flush,
        .fsync = md_fsync,
        .release = md_release,
};

static void usage(FILE *f) {
        fprintf(f,
                "usage: modeldisk [options] MOUNTPOINT\n"
                "Serves MOUNTPOINT/" FILE_NAME " from memory with a modelled service time.\n"
                "  --size=BYTES          file size (K/M/G suffixes; default 256M)\n"
                "  --channels=N          parallel channels, FIFO each (default 4, max %d)\n"
                "  --read-lat-us=US      fixed latency of a read (default 200)\n"
                "  --write-lat-us=US     fixed latency of a write (default 400)\n"
                "  --read-bw=BYTES       read bandwidth per channel, per second (default 400M)\n"
                "  --write-bw=BYTES      write bandwidth per channel, per second (default 200M)\n"
                "  --write-bw-usr1=BYTES the write bandwidth per channel after a SIGUSR1 (default:\n"
                "                        SIGUSR1 is ignored)\n"
                "  --threads=N           FUSE worker threads (default 4)\n"
                "Stops on SIGTERM/SIGINT or when unmounted.\n", MAX_CHANNELS);
}

int main(int argc, char **argv) {
        enum { ARG_SIZE = 0x100, ARG_CH, ARG_RLAT, ARG_WLAT, ARG_RBW, ARG_WBW, ARG_WBW_USR1, ARG_THREADS };
        static const struct option longopts[] = {
                { "size", required_argument, NULL, ARG_SIZE },
                { "channels", required_argument, NULL, ARG_CH },
                { "read-lat-us", required_argument, NULL, ARG_RLAT },
                { "write-lat-us", required_argument, NULL, ARG_WLAT },
                { "read-bw", required_argument, NULL, ARG_RBW },
                { "write-bw", required_argument, NULL, ARG_WBW },
                { "write-bw-usr1", required_argument, NULL, ARG_WBW_USR1 },
                { "threads", required_argument, NULL, ARG_THREADS },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        uint64_t v, threads = 4;
        int c;
        while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
                int r = 0;
                switch (c) {
                case ARG_SIZE: r = fusedisk_parse_size(optarg, 1, &M.size); break;
                case ARG_CH:
                        r = fusedisk_parse_size(optarg, 1, &v);
                        if (r == 0 && (v < 1 || v > MAX_CHANNELS))
                                r = -EINVAL;
                        M.channels = (unsigned) v;
                        break;
                case ARG_RLAT: r = fusedisk_parse_size(optarg, 1000, &M.read_lat_ns); break;
                case ARG_WLAT: r = fusedisk_parse_size(optarg, 1000, &M.write_lat_ns); break;
                case ARG_RBW: r = fusedisk_parse_size(optarg, 1, &M.read_bw); break;
                case ARG_WBW: r = fusedisk_parse_size(optarg, 1, &M.write_bw); break;
                case ARG_WBW_USR1:
                        r = fusedisk_parse_size(optarg, 1, &M.write_bw_usr1);
                        if (r == 0 && M.write_bw_usr1 == 0)
                                r = -EINVAL;
                        break;
                case ARG_THREADS: r = fusedisk_parse_size(optarg, 1, &threads); break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
                if (r < 0 || M.read_bw == 0 || M.write_bw == 0 || M.size == 0 || M.size % 4096) {
                        fprintf(stderr, "modeldisk: bad value for option: %s\n", optarg);
                        return 2;
                }
        }
        if (optind + 1 != argc) {
                usage(stderr);
                return 2;
        }
        const char *mountpoint = argv[optind];

        M.mem = mmap(NULL, M.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (M.mem == MAP_FAILED) {
                perror("modeldisk: mmap");
                return 1;
        }
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&M.cond, &ca);

        struct sigaction sa = { .sa_handler = M.write_bw_usr1 ? on_usr1 : SIG_IGN, .sa_flags = SA_RESTART };
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGUSR1, &sa, NULL) < 0) {
                perror("modeldisk: sigaction");
                return 1;
        }
        pthread_t th;
        if (pthread_create(&th, NULL, completer, NULL) != 0)
                return 1;

        fprintf(stderr, "modeldisk: %s/%s, %" PRIu64 " bytes, %u channels, read %" PRIu64 " us + %" PRIu64
                " B/s, write %" PRIu64 " us + %" PRIu64 " B/s\n", mountpoint, FILE_NAME, M.size, M.channels,
                M.read_lat_ns / 1000, M.read_bw, M.write_lat_ns / 1000, M.write_bw);

        FuseDiskFile files[] = { { FILE_NAME, FILE_INO, S_IFREG | 0600, M.size }, {} };
        fusedisk_set_files(files);
        completer_thread = th;
        int r = fusedisk_serve("modeldisk", mountpoint, &ops, (unsigned) threads, stop_completer);
        fprintf(stderr, "modeldisk: %" PRIu64 " reads, %" PRIu64 " writes\n", M.nreads, M.nwrites);
        return r < 0 ? 1 : 0;
}
