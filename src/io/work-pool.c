/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "thread-sched.h"
#include "work-pool.h"

/* The loop thread never takes a lock that a worker may hold, and never
 * waits for a worker: a worker preempted anywhere (it runs at a lower
 * priority than the loop, see worker_priority()) must not hold up the
 * loop. So there is no mutex and no condition variable between them (glibc's
 * pthread_cond_signal() itself can wait, in __condvar_quiesce_and_switch_g1,
 * for woken waiters that have not run yet):
 *
 *   loop -> workers: two rings (urgent, normal), filled by the loop only and
 *   emptied by the workers with a compare-and-swap per item; a semaphore
 *   counts the items published (sem_post never blocks). When a ring is
 *   full, items wait in a list of the loop's own until completions show
 *   that workers took some.
 *
 *   workers -> loop: a lock-free stack the workers push finished items on;
 *   the loop takes it whole (an atomic exchange, so no ABA), puts it back in
 *   order and delivers at most DELIVER_PER_DISPATCH per dispatch. */

typedef struct WorkItem {
        struct WorkItem *next;
        work_fn_t fn;
        work_done_fn_t done;
        void *data;
        void *userdata;
} WorkItem;

#define RING_SIZE 1024u /* a power of two */

typedef struct Cell {
        atomic_size_t seq;
        WorkItem *item;
} Cell;

/* A bounded queue with one producer (the loop) and many consumers
 * (D. Vyukov's bounded MPMC queue, with the producer side unshared). */
typedef struct Ring {
        Cell cells[RING_SIZE];
        atomic_size_t head; /* next cell to take: workers */
        size_t tail;        /* next cell to fill: the loop only */
        WorkItem *overflow_head, *overflow_tail; /* the loop only */
} Ring;

struct WorkPool {
        sd_event_source *source;
        int efd;
        sem_t items;            /* published, not yet taken (plus one per thread when stopping) */
        Ring urgent, normal;
        _Atomic(WorkItem *) done; /* finished, newest first: pushed by workers */
        atomic_bool stopping;
        WorkItem *ready_head, *ready_tail; /* finished, in order, not yet delivered: the loop only */
        pthread_t *threads;
        unsigned n_threads;
        unsigned pending; /* loop thread only */
        unsigned flags;
        int nice;         /* of the thread that made the pool */
};

static void list_append(WorkItem **head, WorkItem **tail, WorkItem *w) {
        w->next = NULL;
        if (*tail)
                (*tail)->next = w;
        else
                *head = w;
        *tail = w;
}

static void ring_init(Ring *r) {
        for (size_t i = 0; i < RING_SIZE; i++)
                atomic_init(&r->cells[i].seq, i);
        atomic_init(&r->head, 0);
        r->tail = 0;
}

/* The loop: false if the ring is full (a worker has not finished taking the
 * item a lap ago). Never waits. */
static bool ring_put(Ring *r, WorkItem *w) {
        Cell *c = &r->cells[r->tail & (RING_SIZE - 1)];

        if (atomic_load_explicit(&c->seq, memory_order_acquire) != r->tail)
                return false;
        c->item = w;
        atomic_store_explicit(&c->seq, r->tail + 1, memory_order_release);
        r->tail++;
        return true;
}

/* A worker: NULL if empty. */
static WorkItem *ring_take(Ring *r) {
        size_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);

        for (;;) {
                Cell *c = &r->cells[pos & (RING_SIZE - 1)];
                size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
                intptr_t dif = (intptr_t) seq - (intptr_t) (pos + 1);

                if (dif == 0) {
                        if (atomic_compare_exchange_weak_explicit(&r->head, &pos, pos + 1, memory_order_relaxed,
                                                                  memory_order_relaxed)) {
                                WorkItem *w = c->item;
                                atomic_store_explicit(&c->seq, pos + RING_SIZE, memory_order_release);
                                return w;
                        }
                } else if (dif < 0)
                        return NULL;
                else
                        pos = atomic_load_explicit(&r->head, memory_order_relaxed);
        }
}

/* The loop: publishes w, or keeps it (and everything after it) in the
 * ring's overflow list, in order. */
static void publish(WorkPool *p, Ring *r, WorkItem *w) {
        if (!r->overflow_head && ring_put(r, w)) {
                sem_post(&p->items);
                return;
        }
        list_append(&r->overflow_head, &r->overflow_tail, w);
}

static void flush_overflow(WorkPool *p, Ring *r) {
        while (r->overflow_head) {
                WorkItem *w = r->overflow_head;
                if (!ring_put(r, w))
                        return;
                r->overflow_head = w->next;
                if (!r->overflow_head)
                        r->overflow_tail = NULL;
                sem_post(&p->items);
        }
}

/* Workers never preempt the loop thread when they wake (SCHED_BATCH), and
 * yield to it when both want the CPU (WORK_POOL_NICE_DELTA below it); the
 * loop never waits for them, so this cannot invert priorities. */
static void worker_priority(WorkPool *p) {
        struct sched_param sp = {};
        int policy = p->flags & WORK_POOL_IDLE ? SCHED_IDLE : SCHED_BATCH, r;

        r = -pthread_setschedparam(pthread_self(), policy, &sp);
        if (r < 0) {
                log_debug_errno(r, "Cannot run a worker as %s, it runs normally: %m",
                                policy == SCHED_IDLE ? "SCHED_IDLE" : "SCHED_BATCH");
                (void) thread_leave_realtime();
        }
        if (policy == SCHED_BATCH) {
                int nice = p->nice + WORK_POOL_NICE_DELTA;
                if (nice > 19)
                        nice = 19;
                if (setpriority(PRIO_PROCESS, (id_t) gettid(), nice) < 0)
                        log_debug_errno(errno, "Cannot lower a worker's priority to nice %i: %m", nice);
        }
}

static void *worker(void *arg) {
        WorkPool *p = arg;

        worker_priority(p);
        for (;;) {
                WorkItem *w;
                uint64_t one = 1;

                while (sem_wait(&p->items) < 0)
                        ; /* EINTR */
                if (atomic_load(&p->stopping))
                        return NULL;
                w = ring_take(&p->urgent);
                if (!w)
                        w = ring_take(&p->normal);
                if (!w)
                        continue;

                w->fn(w->data);

                w->next = atomic_load_explicit(&p->done, memory_order_relaxed);
                while (!atomic_compare_exchange_weak_explicit(&p->done, &w->next, w, memory_order_release,
                                                              memory_order_relaxed))
                        ;
                (void) !write(p->efd, &one, sizeof one);
        }
}

/* Completions handed to the loop per dispatch: a burst of finished jobs
 * (a hotplug storm's applies, each one fanned out to every Monitor stream)
 * is worked off in slices, calls served in between. */
#define DELIVER_PER_DISPATCH 16

/* Moves what the workers finished to the ready list, oldest first. */
static void collect(WorkPool *p) {
        WorkItem *w = atomic_exchange_explicit(&p->done, NULL, memory_order_acquire), *rev = NULL;

        while (w) {
                WorkItem *next = w->next;
                w->next = rev;
                rev = w;
                w = next;
        }
        if (!rev)
                return;
        if (p->ready_tail)
                p->ready_tail->next = rev;
        else
                p->ready_head = rev;
        for (w = rev; w->next; w = w->next)
                ;
        p->ready_tail = w;
}

static void deliver(WorkPool *p, unsigned max) {
        uint64_t one = 1;

        collect(p);
        /* Workers took items since the last time: room in the rings. */
        flush_overflow(p, &p->urgent);
        flush_overflow(p, &p->normal);
        for (unsigned n = 0; p->ready_head && n < max; n++) {
                WorkItem *w = p->ready_head;
                p->ready_head = w->next;
                if (!p->ready_head)
                        p->ready_tail = NULL;
                p->pending--;
                if (w->done)
                        w->done(w->data, w->userdata);
                free(w);
        }
        if (p->ready_head)
                (void) !write(p->efd, &one, sizeof one); /* the rest in the next dispatch */
}

static int on_eventfd(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        WorkPool *p = userdata;
        uint64_t v;

        (void) !read(fd, &v, sizeof v);
        deliver(p, DELIVER_PER_DISPATCH);
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
        ring_init(&p->urgent);
        ring_init(&p->normal);
        atomic_init(&p->done, NULL);
        atomic_init(&p->stopping, false);
        if (sem_init(&p->items, 0, 0) < 0) {
                free(p);
                return -errno;
        }
        errno = 0;
        p->nice = getpriority(PRIO_PROCESS, 0); /* this thread's */
        if (errno != 0)
                p->nice = 0;
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

static int submit(WorkPool *p, work_fn_t fn, work_done_fn_t done, void *data, void *userdata, bool urgent) {
        WorkItem *w = calloc(1, sizeof *w);

        if (!w)
                return -ENOMEM;
        *w = (WorkItem) { .fn = fn, .done = done, .data = data, .userdata = userdata };
        p->pending++;
        publish(p, urgent ? &p->urgent : &p->normal, w);
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

static void hand_back(WorkPool *p, Ring *r) {
        WorkItem *w;

        /* The threads are gone: what is left in the ring never started. */
        while ((w = ring_take(r)) || (w = r->overflow_head)) {
                if (w == r->overflow_head) {
                        r->overflow_head = w->next;
                        if (!r->overflow_head)
                                r->overflow_tail = NULL;
                }
                p->pending--;
                if (w->done)
                        w->done(w->data, w->userdata);
                free(w);
        }
}

WorkPool *work_pool_free(WorkPool *p) {
        if (!p)
                return NULL;
        atomic_store(&p->stopping, true);
        for (unsigned i = 0; i < p->n_threads; i++)
                sem_post(&p->items); /* each thread leaves at its next wait */
        for (unsigned i = 0; i < p->n_threads; i++)
                pthread_join(p->threads[i], NULL);
        /* Finished ones first, then those never started (not run, handed back). */
        deliver(p, UINT_MAX);
        hand_back(p, &p->urgent);
        hand_back(p, &p->normal);
        sd_event_source_disable_unref(p->source);
        closep(&p->efd);
        sem_destroy(&p->items);
        free(p->threads);
        free(p);
        return NULL;
}
