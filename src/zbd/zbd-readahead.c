/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Reading a zone back while the previous chunk is being hashed: see
 * zbd_read_each() in zbd.h. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/param.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "zbd.h"

#define SLOTS 2U

typedef struct ReadAhead {
        Zbd *zbd;
        uint64_t offset, len;
        size_t bufsize;
        int ioprio; /* the caller's, for the reader; < 0: leave it */
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct {
                uint8_t *buf;
                size_t n;
                int r;
                bool full;
        } slot[SLOTS];
        bool stop; /* the consumer gave up */
} ReadAhead;

static size_t chunk_len(const ReadAhead *ra, uint64_t i) {
        return (size_t) MIN((uint64_t) ra->bufsize, ra->len - i * ra->bufsize);
}

static uint64_t n_chunks(const ReadAhead *ra) {
        return (ra->len + ra->bufsize - 1) / ra->bufsize;
}

static void *reader(void *arg) {
        ReadAhead *ra = arg;

        if (ra->ioprio >= 0)
                /* ioprio_set(IOPRIO_WHO_PROCESS, this thread): as the caller (idle for verification). */
                (void) syscall(SYS_ioprio_set, 1, 0, ra->ioprio);
        for (uint64_t i = 0; i < n_chunks(ra); i++) {
                unsigned k = (unsigned) (i % SLOTS);
                size_t n = chunk_len(ra, i);
                int r;

                pthread_mutex_lock(&ra->lock);
                while (ra->slot[k].full && !ra->stop)
                        pthread_cond_wait(&ra->cond, &ra->lock);
                bool stop = ra->stop;
                pthread_mutex_unlock(&ra->lock);
                if (stop)
                        break;
                r = ra->zbd->ops->read(ra->zbd, ra->offset + i * ra->bufsize, ra->slot[k].buf, n);
                pthread_mutex_lock(&ra->lock);
                ra->slot[k].n = n;
                ra->slot[k].r = r;
                ra->slot[k].full = true;
                pthread_cond_broadcast(&ra->cond);
                pthread_mutex_unlock(&ra->lock);
                if (r < 0)
                        break;
        }
        return NULL;
}

static int read_each_serial(ReadAhead *ra, zbd_consume_t consume, void *userdata) {
        for (uint64_t i = 0; i < n_chunks(ra); i++) {
                size_t n = chunk_len(ra, i);
                int r = ra->zbd->ops->read(ra->zbd, ra->offset + i * ra->bufsize, ra->slot[0].buf, n);

                if (r < 0)
                        return r;
                r = consume(ra->slot[0].buf, n, userdata);
                if (r < 0)
                        return r;
        }
        return 0;
}

int zbd_read_each(Zbd *z, uint64_t offset, uint64_t len, size_t bufsize, zbd_consume_t consume, void *userdata) {
        ReadAhead ra = { .zbd = z, .offset = offset, .len = len, .bufsize = bufsize };
        pthread_t thread;
        int r = 0;

        if (!z || !consume || bufsize == 0 || bufsize % 4096)
                return -EINVAL;
        if (len == 0)
                return 0;
        for (unsigned k = 0; k < SLOTS; k++)
                if (posix_memalign((void **) &ra.slot[k].buf, 4096, bufsize) != 0) {
                        ra.slot[k].buf = NULL;
                        r = -ENOMEM;
                        goto out;
                }
        if (n_chunks(&ra) == 1) {
                r = read_each_serial(&ra, consume, userdata);
                goto out;
        }
        /* ioprio_get(IOPRIO_WHO_PROCESS, this thread) */
        ra.ioprio = (int) syscall(SYS_ioprio_get, 1, 0);
        pthread_mutex_init(&ra.lock, NULL);
        pthread_cond_init(&ra.cond, NULL);
        if (pthread_create(&thread, NULL, reader, &ra) != 0) {
                r = read_each_serial(&ra, consume, userdata);
                goto destroy;
        }
        for (uint64_t i = 0; i < n_chunks(&ra) && r >= 0; i++) {
                unsigned k = (unsigned) (i % SLOTS);

                pthread_mutex_lock(&ra.lock);
                while (!ra.slot[k].full)
                        pthread_cond_wait(&ra.cond, &ra.lock);
                pthread_mutex_unlock(&ra.lock);
                r = ra.slot[k].r;
                if (r >= 0)
                        r = consume(ra.slot[k].buf, ra.slot[k].n, userdata);
                pthread_mutex_lock(&ra.lock);
                ra.slot[k].full = false;
                if (r < 0)
                        ra.stop = true;
                pthread_cond_broadcast(&ra.cond);
                pthread_mutex_unlock(&ra.lock);
        }
        pthread_join(thread, NULL);
destroy:
        pthread_cond_destroy(&ra.cond);
        pthread_mutex_destroy(&ra.lock);
out:
        for (unsigned k = 0; k < SLOTS; k++)
                free(ra.slot[k].buf);
        return r;
}
