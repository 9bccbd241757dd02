/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* stage FILE: allocate a zone, append the file by fd while a thread hashes
 * it, seal with its SHA-256; and what to do when blkmqd goes away halfway
 * (settle the lease when it is back). Never leaves a lease behind without
 * saying so. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "sha256.h" /* basic's SHA-256 (src/basic/sha256.c, over libcrypto): blkmqctl links basic and libblkmq */

static uint64_t arg_settle_usec = 30ULL * 1000000ULL; /* how long to wait for blkmqd to come back */

/* Not an exit code: blkmqd came back without the lease (it restarted
 * before the seal and dropped it, nothing of it kept): stage again. */
#define STAGE_AGAIN (-1)
/* Not an exit code either: the lease is not sealed with the file and
 * blkmqd could not release it (its disk failing): ask again, until a
 * blkmqd that can settle it answers, or the settle timeout. */
#define SETTLE_RETRY (-2)

int stage_opt_settle_timeout(const char *arg) {
        char *end;
        unsigned long long sec;

        errno = 0;
        sec = strtoull(arg, &end, 10);
        if (errno || end == arg || *end || *arg == '-' || sec > 24 * 3600)
                return fail(EXIT_USAGE, "--settle-timeout=%s: not a number of seconds (0 to 86400)", arg);
        arg_settle_usec = sec * 1000000ULL;
        return EXIT_OK;
}

/* ---- hashing alongside the append ---- */

typedef struct HashJob {
        int fd;
        Sha256 *sha;     /* set up by stage_open(); stage_done() frees it if hashing fails */
        int error;       /* errno */
        uint64_t length; /* bytes hashed */
        uint64_t usec;   /* how long it took */
        char hex[SHA256_HEX_SIZE];
} HashJob;

static uint64_t monotonic_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000ULL + (uint64_t) ts.tv_nsec / 1000;
}

/* pread(): the file offset, which the daemon's reads of the same open file
 * advance, is left alone. */
static void *hash_thread(void *userdata) {
        HashJob *j = userdata;
        _cleanup_free_ uint8_t *buf = malloc(INLINE_CHUNK);
        uint8_t digest[SHA256_DIGEST_SIZE];
        uint64_t t0 = monotonic_usec();

        if (!buf) {
                j->error = ENOMEM;
                return NULL;
        }
        for (;;) {
                ssize_t n = pread(j->fd, buf, INLINE_CHUNK, (off_t) j->length);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        j->error = errno;
                        return NULL;
                }
                if (n == 0)
                        break;
                sha256_update(j->sha, buf, (size_t) n);
                j->length += (uint64_t) n;
        }
        sha256_final(j->sha, digest);
        sha256_hex(digest, j->hex);
        j->usec = monotonic_usec() - t0;
        return NULL;
}

/* ---- when something failed ---- */

/* After a failed append or seal: give the zone back, best effort.
 * Returns false when it is not released: blkmqd could not be reached (on
 * this connection or a new one), or refused (its disk failing): whatever
 * became of the lease is then up to its restart. */
static bool stage_release(Ctl *c, const char *lease, bool quiet) {
        _cleanup_ctl_ Ctl fresh = CTL("stage");
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s}", "lease", lease), *reply = NULL;
        const char *error = NULL;
        int r;

        if (!params)
                return true;
        r = ctl_call_raw(c, ZONES_INTERFACE ".Release", params, &reply, &error);
        if (r < 0) {
                /* The connection may be what failed: one more try on a new one. */
                if (ctl_open(&fresh) < 0)
                        goto gone;
                r = ctl_call_raw(&fresh, ZONES_INTERFACE ".Release", params, &reply, &error);
        }
        if (r >= 0 && !error) {
                fail(EXIT_OK, "stage: released lease %s", lease);
                return true;
        }
gone:
        if (!quiet)
                fail(EXIT_OK, "stage: could not release lease %s (%s); blkmqd reclaims it at its next start", lease,
                     r < 0 ? strerror(-r) : error);
        return false;
}

/* What became of the lease, asked of a blkmqd that came back (Get's reply,
 * or its error): sealed with our SHA-256 and size is a success
 * (*ret_zone); unknown (LeaseNotFound: a restart drops every lease that
 * was not sealed, and reclaims its zone) is STAGE_AGAIN; anything else is
 * released, and the stage failed. */
static int stage_settled(Ctl *c, const char *lease, const char *hex, uint64_t size, json_t *reply, const char *error,
                         bool quiet, json_t **ret_zone) {
        json_t *z = json_object_get(reply, "zone");

        if (error && streq(error, ZONES_INTERFACE ".LeaseNotFound"))
                return STAGE_AGAIN;
        if (error)
                return varlink_error("stage", error, reply);
        if (streq_ptr(jstr(z, "state"), "sealed") && streq_ptr(jstr(z, "sha256"), hex) &&
            jint(z, "bytesWritten", -1) == (long long) size) {
                fprintf(stderr, "stage: lease %s was sealed before blkmqd went away; staged.\n", lease);
                *ret_zone = json_incref(z);
                return EXIT_OK;
        }
        if (!stage_release(c, lease, quiet))
                return SETTLE_RETRY;
        return fail(EXIT_UNREACHABLE,
                    "stage: blkmqd went away while staging; lease %s was %s, not sealed with the "
                    "file, and is released",
                    lease, jstr(z, "state") ?: "in an unknown state");
}

/* blkmqd went away in the middle of a stage (a crash, a restart): the
 * zone may be sealed with our data, or reclaimed, or still leased. Wait
 * for blkmqd to come back (systemd restarts it), ask what became of the
 * lease, and settle it (stage_settled()). */
static int stage_settle(const char *lease, const char *hex, uint64_t size, json_t **ret_zone) {
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s}", "lease", lease);
        uint64_t deadline = monotonic_usec() + arg_settle_usec;
        bool said = false, refused = false;

        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        for (;;) {
                _cleanup_ctl_ Ctl c = CTL("stage");
                _cleanup_(json_decrefp) json_t *reply = NULL;
                const char *error = NULL;
                int r = ctl_call_raw(&c, ZONES_INTERFACE ".Get", params, &reply, &error);

                if (r >= 0) {
                        r = stage_settled(&c, lease, hex, size, reply, error, said, ret_zone);
                        if (r != SETTLE_RETRY)
                                return r;
                        refused = true;
                }
                if (monotonic_usec() >= deadline)
                        return fail(EXIT_UNREACHABLE,
                                    "stage: %s within %llu s; the outcome of "
                                    "lease %s is unknown. When blkmqd is back: blkmqctl zones get %s; staged if it "
                                    "is sealed with SHA-256 %s, otherwise: blkmqctl zones release %s",
                                    refused ? "blkmqd could not settle the lease (it refused to release it)"
                                            : "blkmqd went away and did not come back",
                                    (unsigned long long) (arg_settle_usec / 1000000ULL), lease, lease, hex, lease);
                if (!said && r == SETTLE_RETRY)
                        fprintf(stderr, "stage: blkmqd cannot release lease %s now; asking again for up to %llu s\n",
                                lease, (unsigned long long) (arg_settle_usec / 1000000ULL));
                else if (!said)
                        fprintf(stderr, "stage: lost blkmqd (%s); waiting up to %llu s for it to settle lease %s\n",
                                strerror(-r), (unsigned long long) (arg_settle_usec / 1000000ULL), lease);
                said = true;
                (void) usleep(r == SETTLE_RETRY ? 500 * 1000 : 100 * 1000);
        }
}

/* ---- the stage ---- */

typedef struct Stage {
        Ctl ctl;
        const char *path;
        int fd;
        uint64_t size;
        char *lease;
        Sha256 sha;
        HashJob job;
        json_t *zone; /* as sealed */
        bool over;    /* settled after blkmqd went away during the append: nothing more to do */
        /* Where the time went (µs): the calls, as the client waited for
         * them; the client's own hash ran alongside the append. */
        uint64_t t_alloc, t_append, t_seal;
} Stage;

static void stage_done(Stage *s) {
        ctl_close(&s->ctl);
        closep(&s->fd);
        free(s->lease);
        sha256_done(&s->sha);
        json_decref(s->zone);
}

/* For a second attempt: the file stays open, the rest starts afresh. */
static int stage_reset(Stage *s) {
        int r;

        ctl_close(&s->ctl);
        s->ctl = (Ctl) CTL("stage");
        s->lease = mfree(s->lease);
        sha256_done(&s->sha);
        json_decref(s->zone);
        s->zone = NULL;
        s->job = (HashJob) {};
        s->over = false;
        s->t_alloc = s->t_append = s->t_seal = 0;
        /* The daemon read the file through the descriptor it was passed,
         * which shares its offset with ours: from the start again. */
        if (lseek(s->fd, 0, SEEK_SET) < 0)
                return fail(EXIT_USAGE, "%s: %s", s->path, strerror(errno));
        r = sha256_init(&s->sha);
        if (r < 0)
                return fail(EXIT_PROTOCOL, "stage: cannot set up SHA-256 (libcrypto): %s", strerror(-r));
        return EXIT_OK;
}

static int stage_open(Stage *s) {
        struct stat st;
        int r;

        s->fd = open(s->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (s->fd < 0)
                return fail(EXIT_USAGE, "%s: %s", s->path, strerror(errno));
        if (fstat(s->fd, &st) < 0)
                return fail(EXIT_USAGE, "%s: %s", s->path, strerror(errno));
        if (!S_ISREG(st.st_mode))
                return fail(EXIT_USAGE, "%s: not a regular file (for pipes: zones alloc, zones append, zones seal)", s->path);
        s->size = (uint64_t) st.st_size;

        /* Before anything is allocated: a failure here leaves no lease behind. */
        r = sha256_init(&s->sha);
        if (r < 0)
                return fail(EXIT_PROTOCOL, "stage: cannot set up SHA-256 (libcrypto): %s", strerror(-r));
        return EXIT_OK;
}

static int stage_allocate(Stage *s) {
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:I}", "size", (json_int_t) s->size), *alloc = NULL;
        json_t *z;
        int r;

        if (!params || (arg_device && json_object_set_new(params, "device", json_string(arg_device)) < 0) ||
            (arg_label && json_object_set_new(params, "label", json_string(arg_label)) < 0))
                return fail(EXIT_PROTOCOL, "out of memory");
        r = ctl_connect(&s->ctl);
        if (r != EXIT_OK)
                return r;
        r = ctl_call(&s->ctl, ZONES_INTERFACE ".Allocate", params, &alloc);
        if (r == EXIT_UNREACHABLE)
                return fail(r, "stage: blkmqd went away before it answered the allocation; nothing was written, "
                               "and blkmqd reclaims a zone it did not hand out when it starts again");
        if (r != EXIT_OK)
                return r;
        if (!jstr(alloc, "lease"))
                return fail(EXIT_PROTOCOL, "stage: Allocate replied without a lease");
        s->lease = strdup(jstr(alloc, "lease"));
        if (!s->lease)
                return fail(EXIT_PROTOCOL, "out of memory");
        /* Said at once, so that whatever happens next the lease is known. */
        z = json_object_get(alloc, "zone");
        fprintf(stderr, "stage: lease %s: %s zone %lld\n", s->lease,
                jstr(z, "device") ?: jstr(z, "deviceId") ?: "?", jint(z, "zoneIndex", -1));
        return EXIT_OK;
}

/* Appends by fd while a thread hashes the file (the daemon reads and
 * writes meanwhile); the file must not change. */
/* After a failed append: nothing was sealed, so a lease blkmqd cannot
 * release now is dropped when it starts again, whatever the disk kept. */
static void stage_unsealed_release(Stage *s) {
        if (!stage_release(&s->ctl, s->lease, false))
                fprintf(stderr, "stage: lease %s was never sealed: blkmqd drops it when it starts again\n", s->lease);
}

static int stage_append(Stage *s) {
        _cleanup_(json_decrefp) json_t *appended = NULL;
        pthread_t thread;
        bool hashing = false;
        int r;

        s->job.fd = s->fd;
        s->job.sha = &s->sha;
        if (pthread_create(&thread, NULL, hash_thread, &s->job) == 0)
                hashing = true;
        r = append_fd(&s->ctl, s->lease, s->fd, s->size, &appended);
        if (hashing)
                pthread_join(thread, NULL);
        else
                hash_thread(&s->job);
        if (r == EXIT_UNREACHABLE) {
                s->over = true;
                return stage_settle(s->lease, s->job.error == 0 ? s->job.hex : "", s->size, &s->zone);
        }
        if (r != EXIT_OK) {
                stage_unsealed_release(s);
                return r;
        }
        if (s->job.error != 0) {
                stage_unsealed_release(s);
                return fail(EXIT_USAGE, "%s: %s", s->path, strerror(s->job.error));
        }
        if (s->job.length != s->size || (long long) s->job.length != jint(appended, "bytesWritten", -1)) {
                stage_unsealed_release(s);
                return fail(EXIT_CHECKSUM, "%s: changed while staging (%lld bytes, hashed %llu, appended %lld)", s->path,
                            (long long) s->size, (unsigned long long) s->job.length, jint(appended, "bytesWritten", -1));
        }
        return EXIT_OK;
}

static int stage_seal(Stage *s) {
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s, s:s}", "lease", s->lease, "sha256", s->job.hex),
                                       *sealed = NULL;
        const char *error = NULL;
        int r;

        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = ctl_call_raw(&s->ctl, ZONES_INTERFACE ".Seal", params, &sealed, &error);
        if (r < 0) {
                r = transport_error(r);
                if (r == EXIT_UNREACHABLE)
                        return stage_settle(s->lease, s->job.hex, s->size, &s->zone);
                return r;
        }
        if (error && streq(error, ZONES_INTERFACE ".ChecksumMismatch")) {
                /* A mismatch leaves the zone failed, for a look (zones get LEASE). */
                r = varlink_error(s->ctl.verb, error, sealed);
                fail(EXIT_OK, "stage: lease %s kept for inspection: blkmqctl zones get %s", s->lease, s->lease);
                return r;
        }
        if (error) {
                /* The error is said (and under --json printed) only once
                 * it is the outcome: not when the stage settles after all. */
                _cleanup_free_ char *name = strdup(error);
                if (!name)
                        return fail(EXIT_PROTOCOL, "out of memory");
                if (stage_release(&s->ctl, s->lease, false))
                        return varlink_error(s->ctl.verb, name, sealed);
                /* The seal failed and the lease could not be released (an
                 * I/O error as the power or the disk went, blkmqd gone or
                 * its disk failing): what the failed call wrote may have
                 * reached the media all the same, and a restart may find
                 * the zone sealed with the file. Ask, as after a lost
                 * connection, until a blkmqd that can settle it answers:
                 * sealed with the file is staged, anything else released
                 * (or the lease dropped: staged again). A blkmqd whose
                 * seal record failed calls the zone failed, never sealed,
                 * until it restarts and reads what its disk kept. */
                fprintf(stderr, "stage: the seal of lease %s failed (%s) and blkmqd went away or could not release "
                        "it; asking what became of it once blkmqd is back\n", s->lease, name);
                return stage_settle(s->lease, s->job.hex, s->size, &s->zone);
        }
        s->zone = json_incref(json_object_get(sealed, "zone"));
        return EXIT_OK;
}

static int stage_fields(json_t *o, void *userdata) {
        const Stage *s = userdata;
        json_t *z = s->zone;
        char buf[64], tbuf[160];

        field("Device", jstr(z, "device") ? jstr(z, "device") : jstr(z, "deviceId"));
        snprintf(buf, sizeof buf, "%lld", jint(z, "zoneIndex", -1));
        field("Zone", buf);
        snprintf(buf, sizeof buf, "%lld", jint(z, "startLba", -1));
        field("Start LBA", buf);
        snprintf(buf, sizeof buf, "%lld", jint(z, "start", -1));
        field("Start byte", buf);
        format_bytes_exact(buf, sizeof buf, (long long) s->size);
        field("Size", buf);
        field("Lease", s->lease);
        field("SHA256", s->job.hex);
        snprintf(tbuf, sizeof tbuf, "%.3f s: allocate %.3f, append %.3f (hash %.3f alongside), seal %.3f",
                 (double) (s->t_alloc + s->t_append + s->t_seal) / 1e6, (double) s->t_alloc / 1e6,
                 (double) s->t_append / 1e6, (double) s->job.usec / 1e6, (double) s->t_seal / 1e6);
        field("Time", tbuf);
        return EXIT_OK;
}

/* Where the file is now: device, zone, start LBA, lease, SHA-256. */
static int stage_print(Stage *s) {
        json_t *z = s->zone;
        _cleanup_(json_decrefp) json_t *o = json_pack(
                "{s:s?, s:s?, s:I, s:I, s:s, s:s, s:I, s:O?, s:{s:f, s:f, s:f, s:f}}", "device", jstr(z, "device"),
                "deviceId", jstr(z, "deviceId"), "zoneIndex", (json_int_t) jint(z, "zoneIndex", -1), "startLba",
                (json_int_t) jint(z, "startLba", -1), "lease", s->lease, "sha256", s->job.hex, "size",
                (json_int_t) s->size, "zone", z, "seconds", "allocate", (double) s->t_alloc / 1e6, "append",
                (double) s->t_append / 1e6, "hash", (double) s->job.usec / 1e6, "seal", (double) s->t_seal / 1e6);

        if (!o && arg_json)
                return fail(EXIT_PROTOCOL, "out of memory");
        return ctl_render(o, stage_fields, s);
}

/* One attempt: allocate, append, seal. */
static int stage_once(Stage *s) {
        int r;

        s->t_alloc = monotonic_usec();
        r = stage_allocate(s);
        if (r != EXIT_OK)
                return r;
        s->t_append = monotonic_usec();
        s->t_alloc = s->t_append - s->t_alloc;
        r = stage_append(s);
        if (r != EXIT_OK || s->over)
                return r;
        s->t_seal = monotonic_usec();
        s->t_append = s->t_seal - s->t_append;
        r = stage_seal(s);
        if (r != EXIT_OK)
                return r;
        s->t_seal = monotonic_usec() - s->t_seal;
        return EXIT_OK;
}

/* A restart of blkmqd before the seal drops the lease (blkmqd(8): what
 * each reply promises): nothing of the attempt is kept, the file is still
 * here, so it is staged again, once. A second loss is reported. */
int verb_stage(int argc, char **argv) {
        _cleanup_(stage_done) Stage s = { .ctl = CTL("stage"), .path = argv[1], .fd = -EBADF };
        int r;

        r = stage_open(&s);
        if (r != EXIT_OK)
                return r;
        for (unsigned attempt = 1;; attempt++) {
                r = stage_once(&s);
                if (r != STAGE_AGAIN)
                        break;
                if (attempt == 2)
                        return fail(EXIT_UNREACHABLE,
                                    "stage: blkmqd restarted again before lease %s was sealed and dropped it; "
                                    "nothing is staged", s.lease);
                fprintf(stderr, "stage: blkmqd restarted before lease %s was sealed and dropped it (its zone "
                        "is reclaimed, nothing of it kept); staging again\n", s.lease);
                r = stage_reset(&s);
                if (r != EXIT_OK)
                        return r;
        }
        if (r != EXIT_OK || s.over)
                return r;
        return stage_print(&s);
}
