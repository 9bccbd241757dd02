/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "work-pool.h"

typedef struct WorkItem {
        struct WorkItem *next;
        work_fn_t fn;
        work_done_fn_t done;
        void *data;
        void *userdata;
        bool ran;
} WorkItem;

struct WorkPool {
        sd_event_source *source;
        int efd;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        WorkItem *queue_head, *queue_tail; /* to run; protected by lock */
        WorkItem *done_head, *done_tail;   /* finished; protected by lock */
        bool stopping;                     /* protected by lock */
        pthread_t *threads;
        unsigned n_threads;
        unsigned pending; /* loop thread only */
        unsigned flags;
};

static void list_append(WorkItem **head, WorkItem **tail, WorkItem *w) {
        w->next = NULL;
        if (*tail)
                (*tail)->next = w;
        else
                *head = w;
        *tail = w;
}

static void *worker(void *arg) {
        WorkPool *p = arg;

        if (p->flags & WORK_POOL_IDLE) {
                struct sched_param sp = {};
                int r = -pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
                if (r < 0)
                        log_debug_errno(r, "Cannot run a worker as SCHED_IDLE, it runs normally: %m");
        }
        for (;;) {
                WorkItem *w;
                uint64_t one = 1;

                pthread_mutex_lock(&p->lock);
                while (!p->queue_head && !p->stopping)
                        pthread_cond_wait(&p->cond, &p->lock);
                if (!p->queue_head) {
                        pthread_mutex_unlock(&p->lock);
                        return NULL;
                }
                w = p->queue_head;
                p->queue_head = w->next;
                if (!p->queue_head)
                        p->queue_tail = NULL;
                pthread_mutex_unlock(&p->lock);

                w->fn(w->data);
                w->ran = true;

                pthread_mutex_lock(&p->lock);
                list_append(&p->done_head, &p->done_tail, w);
                pthread_mutex_unlock(&p->lock);
                (void) !write(p->efd, &one, sizeof one);
        }
}

/* Completions handed to the loop per dispatch: a burst of finished jobs
 * (a hotplug storm's applies, each one fanned out to every Monitor stream)
 * is worked off in slices, calls served in between. */
#define DELIVER_PER_DISPATCH 16

static void deliver(WorkPool *p) {
        WorkItem *w, *last;
        bool more;
        uint64_t one = 1;

        pthread_mutex_lock(&p->lock);
        w = last = p->done_head;
        for (unsigned n = 1; last && last->next && n < DELIVER_PER_DISPATCH; n++)
                last = last->next;
        if (last) {
                p->done_head = last->next;
                if (!p->done_head)
                        p->done_tail = NULL;
                last->next = NULL;
        }
        more = p->done_head != NULL;
        pthread_mutex_unlock(&p->lock);
        if (more)
                (void) !write(p->efd, &one, sizeof one); /* the rest in the next dispatch */

        while (w) {
                WorkItem *next = w->next;
                p->pending--;
                if (w->done)
                        w->done(w->data, w->userdata);
                free(w);
                w = next;
        }
}

static int on_eventfd(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        WorkPool *p = userdata;
        uint64_t v;

        (void) !read(fd, &v, sizeof v);
        deliver(p);
        return 0;
}

int work_pool_new(WorkPool **ret, sd_event *e, unsigned n_threads) {
        return work_pool_new_flags(ret, e, n_threads, 0);
}

int work_pool_new_flags(WorkPool **ret, sd_event *e, unsigned n_threads, unsigned flags) {
        WorkPool *p;
        sigset_t all, old;
        int r;

        if (n_threads < 1)
                return -EINVAL;
        p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->efd = -EBADF;
        p->flags = flags;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->cond, NULL);
        p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (p->efd < 0) {
                r = -errno;
                goto fail;
        }
        r = sd_event_add_io(e, &p->source, p->efd, EPOLLIN, on_eventfd, p);
        if (r < 0)
                goto fail;
        (void) sd_event_source_set_description(p->source, "work-pool");
        p->threads = calloc(n_threads, sizeof(pthread_t));
        if (!p->threads) {
                r = -ENOMEM;
                goto fail;
        }
        /* Workers get no signals: those are for the event loop's signalfd. */
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        for (unsigned i = 0; i < n_threads; i++) {
                pthread_attr_t a;
                pthread_attr_init(&a);
                pthread_attr_setstacksize(&a, 256 * 1024);
                r = -pthread_create(&p->threads[i], &a, worker, p);
                pthread_attr_destroy(&a);
                if (r < 0)
                        break;
                p->n_threads++;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r < 0)
                goto fail;
        *ret = p;
        return 0;
fail:
        work_pool_free(p);
        return r;
}

static int submit(WorkPool *p, work_fn_t fn, work_done_fn_t done, void *data, void *userdata, bool first) {
        WorkItem *w = calloc(1, sizeof *w);

        if (!w)
                return -ENOMEM;
        *w = (WorkItem) { .fn = fn, .done = done, .data = data, .userdata = userdata };
        pthread_mutex_lock(&p->lock);
        if (first && p->queue_head) {
                w->next = p->queue_head;
                p->queue_head = w;
        } else
                list_append(&p->queue_head, &p->queue_tail, w);
        pthread_cond_signal(&p->cond);
        pthread_mutex_unlock(&p->lock);
        p->pending++;
        return 0;
}

int work_pool_submit(WorkPool *p, work_fn_t fn, work_done_fn_t done, void *data, void *userdata) {
        return submit(p, fn, done, data, userdata, false);
}

int work_pool_submit_first(WorkPool *p, work_fn_t fn, work_done_fn_t done, void *data, void *userdata) {
        return submit(p, fn, done, data, userdata, true);
}

unsigned work_pool_pending(WorkPool *p) {
        return p ? p->pending : 0;
}

WorkPool *work_pool_free(WorkPool *p) {
        WorkItem *w;

        if (!p)
                return NULL;
        pthread_mutex_lock(&p->lock);
        p->stopping = true;
        /* Items never started are not run, but are handed back below. */
        w = p->queue_head;
        p->queue_head = p->queue_tail = NULL;
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->lock);
        for (unsigned i = 0; i < p->n_threads; i++)
                pthread_join(p->threads[i], NULL);
        while (p->done_head) /* the threads are gone: no lock needed, every one delivered */
                deliver(p);
        while (w) {
                WorkItem *next = w->next;
                if (w->done)
                        w->done(w->data, w->userdata);
                free(w);
                w = next;
        }
        sd_event_source_disable_unref(p->source);
        closep(&p->efd);
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->cond);
        free(p->threads);
        free(p);
        return NULL;
}
