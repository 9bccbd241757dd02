/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * powerdisk: a disk that forgets, for power-cut tests.
 *
 * A FUSE file system (libfuse3, low-level API; the directory code is
 * tools/fusedisk, shared with modeldisk) that serves MOUNTPOINT/disk from
 * memory and remembers what a disk with a volatile write cache would have on
 * its media:
 *
 *   - every write is kept in order in the "tail" (the writes since the last
 *     completed flush), with its data;
 *   - an fsync or fdatasync of the file (FUSE_FSYNC: what a loop device
 *     sends for a REQ_OP_FLUSH, and QEMU for a guest's NVMe Flush) makes the
 *     whole tail durable: it is applied to the durable image and dropped;
 *   - a write on a descriptor opened O_DSYNC or O_SYNC, or a pwritev2()
 *     with RWF_DSYNC (the kernel passes both in the write's flags), is a
 *     FUA write: a crash state always keeps it, not the writes before it;
 *   - a close (FUSE_FLUSH) is counted, and makes nothing durable;
 *   - fallocate(PUNCH_HOLE or ZERO_RANGE) is a write of zeros.
 *
 * Control: MOUNTPOINT/ctl. Each write(2) to it is one command:
 *
 *   cut                 the power cut: from now on every read, write and
 *                       fsync of the disk fails with EIO (freeze the writer
 *                       first: kill -9 it, then cut);
 *   cut-after N [PID]   the power cut comes when N more writes have arrived
 *                       (the Nth is kept in the tail, the next fails): a cut
 *                       inside the writer's I/O, between a write and its
 *                       flush, where a cut at a random time seldom lands;
 *                       with PID, that process is stopped (SIGSTOP) in the
 *                       same instant, so that nothing more of it reaches
 *                       another disk before the test cuts that one too;
 *   fail-fsync N [SKIP] the next N fsyncs (after SKIP more that work as
 *                       ever) fail with EIO and make nothing durable (the
 *                       tail stays as it was); "fail-fsync 0" disarms;
 *   fail-read OFF+LEN[,OFF+LEN...]
 *                       from now on every read of the disk that overlaps
 *                       one of those byte ranges fails with EIO (a medium
 *                       error), until the next fail-read: "fail-read none"
 *                       makes every read work again; writes are not
 *                       affected (a write to a bad sector would remap it on
 *                       a disk, here the range stays unreadable);
 *   state PATH SPEC     writes a crash state to PATH (outside this mount):
 *                       the durable image plus the tail writes SPEC keeps,
 *                       replayed in order (as dm-log-writes and CrashMonkey
 *                       replay them). FUA writes are always kept. SPEC:
 *                         none | all | prefix:K (the first K) |
 *                         random:SEED (each with probability 1/2) |
 *                         torn:SEED (random, and a kept write of more than
 *                         one 512-byte sector is, with probability 1/2, cut
 *                         after a random number of its sectors);
 *                       with "@OFF+LEN[,OFF+LEN...]" (bytes) appended the
 *                       choice applies only to writes that overlap those
 *                       ranges, and every other write is kept;
 *   log PATH            writes the tail as text, one write a line:
 *                       "SEQ OFFSET LENGTH fua|-|zero".
 *
 * Reading ctl gives the counters ("writes N", "fua N", "fsyncs N",
 * "failed-fsyncs N", "failed-reads N", "closes N", "tail N", "tail-bytes N",
 * "cut 0|1", and "last-state KEPT DROPPED TORN" for the last state
 * written).
 *
 * The disk is served from one thread, so requests are handled in arrival
 * order and a flush covers every write that arrived before it.
 *
 * usage: powerdisk [--size=BYTES | --image=FILE] MOUNTPOINT
 */

#include "fusedisk.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DISK_INO 2
#define CTL_INO 3
#define CHUNK (64u << 10)       /* granularity of the "ever written" map */
#define SECTOR 512u
#define MAX_RANGES 64

typedef struct Write {
        uint64_t seq, off, len;
        int fua;                /* 1: always kept */
        uint8_t *data;          /* NULL: zeros */
} Write;

static struct {
        uint64_t size;
        uint8_t *cur;           /* what reads see */
        uint8_t *dur;           /* what survives a cut: everything flushed */
        uint8_t *touched;       /* per CHUNK of dur: may hold non-zero bytes */
        Write *tail;
        size_t n_tail, cap_tail;
        uint64_t tail_bytes;
        uint64_t writes, fua, fsyncs, failed_fsyncs, failed_reads, closes;
        uint64_t fail_next;     /* fsyncs to fail, once fail_skip more worked */
        uint64_t fail_skip;
        size_t n_bad;           /* fail-read: reads overlapping these fail */
        uint64_t bad_off[MAX_RANGES], bad_len[MAX_RANGES];
        uint64_t cut_after;     /* 0: no cut planned */
        pid_t stop_pid;         /* stopped at that cut; 0: none */
        int cut;
        uint64_t last_kept, last_dropped, last_torn;
} D;

static void touch(uint64_t off, uint64_t len) {
        for (uint64_t c = off / CHUNK; c <= (off + len - 1) / CHUNK; c++)
                D.touched[c / 8] |= (uint8_t) (1u << (c % 8));
}

static int tail_add(uint64_t off, uint64_t len, const void *buf, int fua) {
        if (D.n_tail == D.cap_tail) {
                size_t cap = D.cap_tail ? D.cap_tail * 2 : 1024;
                Write *t = realloc(D.tail, cap * sizeof(*t));
                if (!t)
                        return -ENOMEM;
                D.tail = t;
                D.cap_tail = cap;
        }
        uint8_t *data = NULL;
        if (buf) {
                data = malloc(len);
                if (!data)
                        return -ENOMEM;
                memcpy(data, buf, len);
                memcpy(D.cur + off, buf, len);
        } else
                memset(D.cur + off, 0, len);
        D.tail[D.n_tail++] = (Write) { .seq = ++D.writes, .off = off, .len = len, .fua = fua, .data = data };
        D.tail_bytes += len;
        if (fua)
                D.fua++;
        if (D.cut_after > 0 && --D.cut_after == 0) {
                D.cut = 1;
                if (D.stop_pid > 0 && kill(D.stop_pid, SIGSTOP) < 0)
                        fprintf(stderr, "powerdisk: cut: stopping pid %d: %s\n", (int) D.stop_pid, strerror(errno));
                fprintf(stderr, "powerdisk: cut after write %" PRIu64 ": %zu writes (%" PRIu64
                        " bytes) since the last flush\n", D.writes, D.n_tail, D.tail_bytes);
        }
        return 0;
}

/* A completed flush: the tail reaches the media, in order. */
static void tail_commit(void) {
        for (size_t i = 0; i < D.n_tail; i++) {
                Write *w = &D.tail[i];
                if (w->data)
                        memcpy(D.dur + w->off, w->data, w->len);
                else
                        memset(D.dur + w->off, 0, w->len);
                touch(w->off, w->len);
                free(w->data);
        }
        D.n_tail = 0;
        D.tail_bytes = 0;
}

/* splitmix64: the same SEED gives the same state on every machine */
static uint64_t next_rand(uint64_t *s) {
        uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
}

typedef struct Spec {
        enum { KEEP_NONE, KEEP_ALL, KEEP_PREFIX, KEEP_RANDOM, KEEP_TORN } kind;
        uint64_t arg;
        size_t n_ranges;
        uint64_t range_off[MAX_RANGES], range_len[MAX_RANGES];
} Spec;

static int parse_spec(const char *s, Spec *ret) {
        Spec p = {};
        char *end;
        const char *at = strchr(s, '@');
        size_t klen = at ? (size_t) (at - s) : strlen(s);
        const char *colon = memchr(s, ':', klen);
        size_t nlen = colon ? (size_t) (colon - s) : klen;
        static const char *names[] = { "none", "all", "prefix", "random", "torn" };
        p.kind = 5;
        for (unsigned k = 0; k < 5; k++)
                if (strlen(names[k]) == nlen && strncmp(s, names[k], nlen) == 0)
                        p.kind = k;
        if (p.kind > KEEP_TORN || (!colon) != (p.kind <= KEEP_ALL))
                return -EINVAL;
        if (colon) {
                errno = 0;
                p.arg = strtoull(colon + 1, &end, 10);
                if (errno || end == colon + 1 || end != s + klen)
                        return -EINVAL;
        }
        for (const char *r = at; r; r = strchr(r + 1, ',')) {
                if (p.n_ranges == MAX_RANGES)
                        return -E2BIG;
                errno = 0;
                p.range_off[p.n_ranges] = strtoull(r + 1, &end, 10);
                if (errno || *end != '+')
                        return -EINVAL;
                p.range_len[p.n_ranges] = strtoull(end + 1, &end, 10);
                if (errno || (*end && *end != ','))
                        return -EINVAL;
                p.n_ranges++;
        }
        *ret = p;
        return 0;
}

/* "OFF+LEN[,OFF+LEN...]" (bytes) into off[], len[]: how many, or -errno. */
static int parse_ranges(const char *s, uint64_t *off, uint64_t *len) {
        size_t n = 0;
        char *end;

        for (const char *r = s; r; r = strchr(r, ',')) {
                if (r != s)
                        r++;
                if (n == MAX_RANGES)
                        return -E2BIG;
                errno = 0;
                off[n] = strtoull(r, &end, 10);
                if (errno || end == r || *end != '+')
                        return -EINVAL;
                len[n] = strtoull(end + 1, &end, 10);
                if (errno || len[n] == 0 || (*end && *end != ','))
                        return -EINVAL;
                n++;
        }
        return (int) n;
}

static int in_scope(const Spec *p, const Write *w) {
        if (p->n_ranges == 0)
                return 1;
        for (size_t i = 0; i < p->n_ranges; i++)
                if (w->off < p->range_off[i] + p->range_len[i] && p->range_off[i] < w->off + w->len)
                        return 1;
        return 0;
}

static int pwrite_all(int fd, const void *buf, uint64_t len, uint64_t off) {
        static const uint8_t zeros[CHUNK];
        while (len > 0) {
                size_t n = len > CHUNK && !buf ? CHUNK : (size_t) len;
                ssize_t k = pwrite(fd, buf ? buf : zeros, n, (off_t) off);
                if (k < 0)
                        return -errno;
                if (buf)
                        buf = (const uint8_t *) buf + k;
                len -= (uint64_t) k;
                off += (uint64_t) k;
        }
        return 0;
}

static int is_zero(const uint8_t *p, size_t n) {
        return p[0] == 0 && memcmp(p, p + 1, n - 1) == 0;
}

static int write_state(const char *path, const char *spec) {
        Spec p;
        uint64_t rnd, nth = 0, kept = 0, dropped = 0, torn = 0;
        int r = parse_spec(spec, &p);
        if (r < 0) {
                fprintf(stderr, "powerdisk: state %s: bad SPEC \"%s\" (none, all, prefix:K, random:SEED, torn:SEED, "
                        "then @OFF+LEN,...)\n", path, spec);
                return r;
        }
        rnd = p.arg;
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) {
                r = -errno;
                fprintf(stderr, "powerdisk: state %s: %s\n", path, strerror(errno));
                return r;
        }
        if (ftruncate(fd, (off_t) D.size) < 0)
                r = -errno;
        for (uint64_t c = 0; r >= 0 && c < D.size / CHUNK; c++)
                if ((D.touched[c / 8] & (1u << (c % 8))) && !is_zero(D.dur + c * CHUNK, CHUNK))
                        r = pwrite_all(fd, D.dur + c * CHUNK, CHUNK, c * CHUNK);
        for (size_t i = 0; r >= 0 && i < D.n_tail; i++) {
                const Write *w = &D.tail[i];
                uint64_t len = w->len;
                int keep = 1;
                if (!w->fua && in_scope(&p, w)) {
                        switch (p.kind) {
                        case KEEP_NONE: keep = 0; break;
                        case KEEP_ALL: break;
                        case KEEP_PREFIX: keep = nth++ < p.arg; break;
                        case KEEP_RANDOM: keep = next_rand(&rnd) & 1; break;
                        case KEEP_TORN:
                                keep = next_rand(&rnd) & 1;
                                if (keep && len > SECTOR && (next_rand(&rnd) & 1)) {
                                        len = SECTOR * (next_rand(&rnd) % (len / SECTOR));
                                        torn++;
                                }
                                break;
                        }
                }
                if (!keep) {
                        dropped++;
                        continue;
                }
                kept++;
                if (len > 0)
                        r = pwrite_all(fd, w->data, len, w->off);
        }
        if (r >= 0 && fsync(fd) < 0)
                r = -errno;
        close(fd);
        if (r < 0) {
                fprintf(stderr, "powerdisk: state %s: %s\n", path, strerror(-r));
                return r;
        }
        D.last_kept = kept, D.last_dropped = dropped, D.last_torn = torn;
        fprintf(stderr, "powerdisk: state %s (%s): %" PRIu64 " tail writes kept, %" PRIu64 " dropped, %" PRIu64
                " torn\n", path, spec, kept, dropped, torn);
        return 0;
}

static int write_log(const char *path) {
        FILE *f = fopen(path, "we");
        if (!f)
                return -errno;
        for (size_t i = 0; i < D.n_tail; i++)
                fprintf(f, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %s\n", D.tail[i].seq, D.tail[i].off, D.tail[i].len,
                        D.tail[i].fua ? "fua" : D.tail[i].data ? "-" : "zero");
        int r = ferror(f) ? -EIO : 0;
        if (fclose(f) != 0 && r == 0)
                r = -errno;
        return r;
}

static int ctl_command(char *cmd) {
        char *nl = strchr(cmd, '\n');
        if (nl)
                *nl = 0;
        char *arg = strchr(cmd, ' ');
        if (arg)
                *arg++ = 0;
        if (strcmp(cmd, "cut") == 0 && !arg) {
                D.cut = 1;
                fprintf(stderr, "powerdisk: cut: %zu writes (%" PRIu64 " bytes) since the last flush\n", D.n_tail,
                        D.tail_bytes);
                return 0;
        }
        if (strcmp(cmd, "cut-after") == 0 && arg) {
                char *end;
                long pid = 0;
                errno = 0;
                D.cut_after = strtoull(arg, &end, 10);
                if (*end == ' ')
                        pid = strtol(end + 1, &end, 10);
                if (errno || *end || D.cut_after == 0 || pid < 0) {
                        D.cut_after = 0;
                        return -EINVAL;
                }
                D.stop_pid = (pid_t) pid;
                return 0;
        }
        if (strcmp(cmd, "fail-fsync") == 0 && arg) {
                char *end;
                uint64_t n, skip = 0;
                errno = 0;
                n = strtoull(arg, &end, 10);
                if (*end == ' ')
                        skip = strtoull(end + 1, &end, 10);
                if (errno || *end || end == arg)
                        return -EINVAL;
                D.fail_next = n;
                D.fail_skip = n ? skip : 0;
                return 0;
        }
        if (strcmp(cmd, "fail-read") == 0 && arg) {
                uint64_t off[MAX_RANGES], len[MAX_RANGES];
                int n = strcmp(arg, "none") == 0 ? 0 : parse_ranges(arg, off, len);
                if (n < 0)
                        return n;
                memcpy(D.bad_off, off, sizeof(off[0]) * (size_t) n);
                memcpy(D.bad_len, len, sizeof(len[0]) * (size_t) n);
                D.n_bad = (size_t) n;
                fprintf(stderr, "powerdisk: fail-read: %s\n", n ? arg : "every read works again");
                return 0;
        }
        if (strcmp(cmd, "state") == 0 && arg) {
                char *spec = strchr(arg, ' ');
                if (!spec)
                        return -EINVAL;
                *spec++ = 0;
                return write_state(arg, spec);
        }
        if (strcmp(cmd, "log") == 0 && arg)
                return write_log(arg);
        fprintf(stderr, "powerdisk: ctl: unknown command \"%s\" (cut, cut-after N [PID], fail-fsync N [SKIP], fail-read OFF+LEN,...|none, state PATH SPEC, log PATH)\n",
                cmd);
        return -EINVAL;
}

static void pd_init(void *userdata, struct fuse_conn_info *conn) {
        conn->max_write = 1 << 20;
        conn->max_readahead = 0;
        conn->want &= ~(unsigned) (FUSE_CAP_AUTO_INVAL_DATA | FUSE_CAP_WRITEBACK_CACHE);
}

static void pd_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        if (ino != DISK_INO && ino != CTL_INO) {
                fuse_reply_err(req, EISDIR);
                return;
        }
        /* No page cache: every write and read reaches us, O_DIRECT works. */
        fi->direct_io = 1;
        fi->keep_cache = 0;
        fuse_reply_open(req, fi);
}

static void pd_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
        if (ino == CTL_INO) {
                char buf[512];
                int n = snprintf(buf, sizeof(buf),
                                 "writes %" PRIu64 "\nfua %" PRIu64 "\nfsyncs %" PRIu64 "\nfailed-fsyncs %" PRIu64
                                 "\nfailed-reads %" PRIu64 "\ncloses %" PRIu64 "\ntail %zu\ntail-bytes %" PRIu64 "\ncut %d\n"
                                 "last-state %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
                                 D.writes, D.fua, D.fsyncs, D.failed_fsyncs, D.failed_reads, D.closes, D.n_tail, D.tail_bytes, D.cut,
                                 D.last_kept, D.last_dropped, D.last_torn);
                if (off >= n) {
                        fuse_reply_buf(req, NULL, 0);
                        return;
                }
                fuse_reply_buf(req, buf + off, (size_t) n - (size_t) off < size ? (size_t) n - (size_t) off : size);
                return;
        }
        if (D.cut) {
                fuse_reply_err(req, EIO);
                return;
        }
        if ((uint64_t) off >= D.size) {
                fuse_reply_buf(req, NULL, 0);
                return;
        }
        if ((uint64_t) off + size > D.size)
                size = D.size - (uint64_t) off;
        for (size_t i = 0; i < D.n_bad; i++)
                if ((uint64_t) off < D.bad_off[i] + D.bad_len[i] && D.bad_off[i] < (uint64_t) off + size) {
                        D.failed_reads++;
                        fprintf(stderr, "powerdisk: read [%" PRIu64 ", +%zu) failed on demand (EIO)\n",
                                (uint64_t) off, size);
                        fuse_reply_err(req, EIO);
                        return;
                }
        fuse_reply_buf(req, (const char *) D.cur + off, size);
}

static void pd_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi) {
        int r;
        if (ino == CTL_INO) {
                char cmd[4096];
                if (size >= sizeof(cmd)) {
                        fuse_reply_err(req, E2BIG);
                        return;
                }
                memcpy(cmd, buf, size);
                cmd[size] = 0;
                r = ctl_command(cmd);
                if (r < 0)
                        fuse_reply_err(req, -r);
                else
                        fuse_reply_write(req, size);
                return;
        }
        if (D.cut) {
                fuse_reply_err(req, EIO);
                return;
        }
        if ((uint64_t) off >= D.size || (uint64_t) off + size > D.size) {
                fuse_reply_err(req, ENOSPC);
                return;
        }
        r = size ? tail_add((uint64_t) off, size, buf, (fi->flags & (O_DSYNC | O_SYNC)) != 0) : 0;
        if (r < 0)
                fuse_reply_err(req, -r);
        else
                fuse_reply_write(req, size);
}

static void pd_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len, struct fuse_file_info *fi) {
        int r;
        if (ino != DISK_INO || !(mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE))) {
                fuse_reply_err(req, EOPNOTSUPP);
                return;
        }
        if (D.cut) {
                fuse_reply_err(req, EIO);
                return;
        }
        if (off < 0 || len <= 0 || (uint64_t) off + (uint64_t) len > D.size) {
                fuse_reply_err(req, EINVAL);
                return;
        }
        r = tail_add((uint64_t) off, (uint64_t) len, NULL, (fi->flags & (O_DSYNC | O_SYNC)) != 0);
        fuse_reply_err(req, -r);
}

static void pd_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi) {
        if (ino != DISK_INO) {
                fuse_reply_err(req, 0);
                return;
        }
        if (D.cut) {
                fuse_reply_err(req, EIO);
                return;
        }
        if (D.fail_next > 0 && D.fail_skip > 0)
                D.fail_skip--;
        else if (D.fail_next > 0) {
                D.fail_next--;
                D.failed_fsyncs++;
                fprintf(stderr, "powerdisk: fsync failed on demand (EIO), %zu writes stay volatile\n", D.n_tail);
                fuse_reply_err(req, EIO);
                return;
        }
        D.fsyncs++;
        tail_commit();
        fuse_reply_err(req, 0);
}

static void pd_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        if (ino == DISK_INO)
                D.closes++;
        fuse_reply_err(req, 0);
}

static void pd_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        fuse_reply_err(req, 0);
}

static const struct fuse_lowlevel_ops ops = {
        .init = pd_init,
        .lookup = fusedisk_lookup,
        .getattr = fusedisk_getattr,
        .readdir = fusedisk_readdir,
        .open = pd_open,
        .read = pd_read,
        .write = pd_write,
        .fallocate = pd_fallocate,
        .fsync = pd_fsync,
        .flush = pd_flush,
        .release = pd_release,
};

/* The image's bytes become durable content, its holes stay untouched. */
static int load_image(const char *path) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        for (uint64_t off = 0; off < D.size; off += CHUNK) {
                ssize_t n = pread(fd, D.dur + off, CHUNK, (off_t) off);
                if (n < 0) {
                        int r = -errno;
                        close(fd);
                        return r;
                }
                if (n == 0)
                        break;
                if (!is_zero(D.dur + off, (size_t) n)) {
                        memcpy(D.cur + off, D.dur + off, (size_t) n);
                        touch(off, (uint64_t) n);
                } else
                        madvise(D.dur + off, CHUNK, MADV_DONTNEED);
        }
        close(fd);
        return 0;
}

static void usage(FILE *f) {
        fprintf(f,
                "usage: powerdisk [--size=BYTES | --image=FILE] MOUNTPOINT\n"
                "Serves MOUNTPOINT/disk from memory as a disk with a volatile write cache, and\n"
                "MOUNTPOINT/ctl: cut | cut-after N [PID] | fail-fsync N [SKIP] | fail-read OFF+LEN,...|none |\n"
                "state PATH SPEC | log PATH (see the source's opening comment). SPEC: none, all, prefix:K, random:SEED, torn:SEED [@OFF+LEN,...].\n"
                "  --size=BYTES    a new zeroed disk (K/M/G suffixes, a multiple of 64K)\n"
                "  --image=FILE    start from FILE's contents (all of it durable); not changed\n"
                "Stops on SIGTERM/SIGINT or when unmounted.\n");
}

int main(int argc, char **argv) {
        enum { ARG_SIZE = 0x100, ARG_IMAGE };
        static const struct option longopts[] = {
                { "size", required_argument, NULL, ARG_SIZE },
                { "image", required_argument, NULL, ARG_IMAGE },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        const char *image = NULL;
        int c, r;
        while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0)
                switch (c) {
                case ARG_SIZE:
                        if (fusedisk_parse_size(optarg, 1, &D.size) < 0 || D.size == 0 || D.size % CHUNK) {
                                fprintf(stderr, "powerdisk: --size=%s: not a multiple of 64K\n", optarg);
                                return 2;
                        }
                        break;
                case ARG_IMAGE: image = optarg; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        if (optind + 1 != argc || (!image) == (D.size == 0)) {
                usage(stderr);
                return 2;
        }
        if (image) {
                struct stat st;
                if (stat(image, &st) < 0 || st.st_size == 0 || st.st_size % CHUNK) {
                        fprintf(stderr, "powerdisk: --image=%s: missing, empty or not a multiple of 64K\n", image);
                        return 2;
                }
                D.size = (uint64_t) st.st_size;
        }
        D.cur = mmap(NULL, D.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        D.dur = mmap(NULL, D.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        D.touched = calloc(D.size / CHUNK / 8 + 1, 1);
        if (D.cur == MAP_FAILED || D.dur == MAP_FAILED || !D.touched) {
                perror("powerdisk: mmap");
                return 1;
        }
        if (image && (r = load_image(image)) < 0) {
                fprintf(stderr, "powerdisk: --image=%s: %s\n", image, strerror(-r));
                return 1;
        }
        FuseDiskFile files[] = {
                { "disk", DISK_INO, S_IFREG | 0600, D.size },
                { "ctl", CTL_INO, S_IFREG | 0600, 0 },
                {}
        };
        fusedisk_set_files(files);
        fprintf(stderr, "powerdisk: %s/disk, %" PRIu64 " bytes%s%s\n", argv[optind], D.size, image ? " from " : "",
                image ? image : "");
        r = fusedisk_serve("powerdisk", argv[optind], &ops, 1, NULL);
        fprintf(stderr, "powerdisk: %" PRIu64 " writes (%" PRIu64 " FUA), %" PRIu64 " fsyncs (%" PRIu64
                " failed), %zu writes never flushed\n", D.writes, D.fua, D.fsyncs, D.failed_fsyncs, D.n_tail);
        return r < 0 ? 1 : 0;
}
