/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The work pool: items run in order, urgent ones ahead of the queue; more
 * items than the hand-off ring holds; the done callbacks on the loop, each
 * once, also for items never started when the pool is freed; and the
 * workers' scheduling: SCHED_BATCH, 10 nice levels below the thread that
 * made the pool, never realtime when that thread is. No root needed (the
 * realtime case skips without it). */

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "work-pool.h"

#define MANY 5000 /* more than the ring (1024) holds */

typedef struct Log {
        unsigned started[MANY + 16];
        atomic_uint n_started;
        unsigned done[MANY + 16];
        unsigned n_done;
        sem_t gate;      /* the first item waits on it */
        sem_t entered;   /* posted by the first item as it starts */
        bool gated;
} Log;

typedef struct Item {
        Log *log;
        unsigned id;
        bool ran;
        int policy, nice;
} Item;

static void item_run(void *data) {
        Item *it = data;

        if (it->log->gated && it->id == 0) {
                sem_post(&it->log->entered);
                while (sem_wait(&it->log->gate) < 0)
                        ;
        }
        it->log->started[atomic_fetch_add(&it->log->n_started, 1)] = it->id;
        it->ran = true;
        it->policy = sched_getscheduler(0);
        errno = 0;
        it->nice = getpriority(PRIO_PROCESS, (id_t) gettid());
}

static void item_done(void *data, void *userdata) {
        Item *it = data;

        assert_ptr_equal(userdata, it->log);
        it->log->done[it->log->n_done++] = it->id;
}

static void run_until(sd_event *e, Log *log, unsigned n) {
        while (log->n_done < n)
                assert_true(sd_event_run(e, 100 * 1000) >= 0);
}

static Item *items_new(Log *log, unsigned n) {
        Item *it = calloc(n, sizeof *it);

        assert_non_null(it);
        for (unsigned i = 0; i < n; i++)
                it[i] = (Item) { .log = log, .id = i };
        return it;
}

/* A pool of one thread whose first item (id 0) waits on log->gate, and
 * N items for it. */
typedef struct Held {
        sd_event *e;
        WorkPool *p;
        Log *log;
        Item *it;
} Held;

static void held_new(Held *h, unsigned n) {
        h->log = calloc(1, sizeof *h->log);
        assert_non_null(h->log);
        h->it = items_new(h->log, n);
        assert_int_equal(sem_init(&h->log->gate, 0, 0), 0);
        assert_int_equal(sem_init(&h->log->entered, 0, 0), 0);
        h->log->gated = true;
        assert_int_equal(sd_event_new(&h->e), 0);
        assert_int_equal(work_pool_new(&h->p, h->e, 1), 0);
}

/* Frees what held_new made (the pool unless the test freed it already and
 * set h->p to NULL). */
static void held_free(Held *h) {
        if (h->p)
                work_pool_free(h->p);
        sd_event_unref(h->e);
        sem_destroy(&h->log->gate);
        sem_destroy(&h->log->entered);
        free(h->it);
        free(h->log);
}

/* One thread, held in its first item: what is queued behind it starts in
 * order, the urgent ones first (in order among themselves). */
static void test_order_urgent_first(void **state) {
        Held h = {};

        (void) state;
        held_new(&h, 6);
        assert_int_equal(work_pool_submit(h.p, item_run, item_done, &h.it[0], h.log), 0);
        while (sem_wait(&h.log->entered) < 0) /* the thread is in item 0 */
                ;
        assert_int_equal(work_pool_submit(h.p, item_run, item_done, &h.it[1], h.log), 0);
        assert_int_equal(work_pool_submit(h.p, item_run, item_done, &h.it[2], h.log), 0);
        assert_int_equal(work_pool_submit_first(h.p, item_run, item_done, &h.it[3], h.log), 0);
        assert_int_equal(work_pool_submit_first(h.p, item_run, item_done, &h.it[4], h.log), 0);
        assert_int_equal(work_pool_submit(h.p, item_run, item_done, &h.it[5], h.log), 0);
        assert_int_equal(work_pool_pending(h.p), 6);
        sem_post(&h.log->gate);
        run_until(h.e, h.log, 6);
        assert_int_equal(work_pool_pending(h.p), 0);
        unsigned want[] = { 0, 3, 4, 1, 2, 5 };
        for (unsigned i = 0; i < 6; i++) {
                assert_int_equal(h.log->started[i], want[i]);
                assert_int_equal(h.log->done[i], want[i]); /* one thread: done in the order run */
        }
        held_free(&h);
}

/* More items than the ring holds, queued while the only thread is held:
 * the rest wait in the loop's own list and all run, in order, each done
 * once. */
static void test_more_than_the_ring(void **state) {
        Held h = {};

        (void) state;
        held_new(&h, MANY);
        for (unsigned i = 0; i < MANY; i++)
                assert_int_equal(work_pool_submit(h.p, item_run, item_done, &h.it[i], h.log), 0);
        sem_post(&h.log->gate);
        run_until(h.e, h.log, MANY);
        for (unsigned i = 0; i < MANY; i++) {
                assert_int_equal(h.log->started[i], i);
                assert_int_equal(h.log->done[i], i);
        }
        assert_int_equal(work_pool_pending(h.p), 0);
        held_free(&h);
}

/* Freed with items queued behind a held one : every done
 * callback runs once; those never started did not run. */
static void test_free_hands_back(void **state) {
        Held h = {};

        (void) state;
        held_new(&h, 2000);
        for (unsigned i = 0; i < 2000; i++)
                assert_int_equal(work_pool_submit(h.p, item_run, item_done, &h.it[i], h.log), 0);
        sem_post(&h.log->gate); /* the free races the first items */
        work_pool_free(h.p);
        h.p = NULL;
        assert_int_equal(h.log->n_done, 2000);
        unsigned ran = 0;
        for (unsigned i = 0; i < 2000; i++)
                ran += h.it[i].ran;
        assert_int_equal(ran, atomic_load(&h.log->n_started));
        held_free(&h);
}

static void check_workers(int want_nice) {
        sd_event *e = NULL;
        WorkPool *p = NULL;
        Log *log = calloc(1, sizeof *log);
        Item *it = items_new(log, 8);

        assert_non_null(log);
        assert_int_equal(sd_event_new(&e), 0);
        assert_int_equal(work_pool_new(&p, e, 4), 0);
        for (unsigned i = 0; i < 8; i++)
                assert_int_equal(work_pool_submit(p, item_run, item_done, &it[i], log), 0);
        run_until(e, log, 8);
        for (unsigned i = 0; i < 8; i++) {
                /* A worker that wakes does not preempt the loop thread, and
                 * yields to it when both want the CPU. */
                assert_int_equal(it[i].policy, SCHED_BATCH);
                assert_int_equal(it[i].nice, want_nice);
        }
        work_pool_free(p);
        sd_event_unref(e);
        free(it);
        free(log);
}

static void test_workers_below_the_loop(void **state) {
        int nice;

        (void) state;
        errno = 0;
        nice = getpriority(PRIO_PROCESS, (id_t) gettid());
        assert_int_equal(errno, 0);
        check_workers(nice + WORK_POOL_NICE_DELTA > 19 ? 19 : nice + WORK_POOL_NICE_DELTA);
}

/* The loop thread realtime (blkmqd.service): the workers are not. */
static void test_workers_leave_realtime(void **state) {
        struct sched_param sp = { .sched_priority = 1 }, old_sp = {};
        int old_policy, nice;

        (void) state;
        assert_int_equal(pthread_getschedparam(pthread_self(), &old_policy, &old_sp), 0);
        if (pthread_setschedparam(pthread_self(), SCHED_RR, &sp) != 0)
                skip(); /* needs CAP_SYS_NICE */
        errno = 0;
        nice = getpriority(PRIO_PROCESS, (id_t) gettid());
        check_workers(nice + WORK_POOL_NICE_DELTA > 19 ? 19 : nice + WORK_POOL_NICE_DELTA);
        assert_int_equal(pthread_setschedparam(pthread_self(), old_policy, &old_sp), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_order_urgent_first),
                cmocka_unit_test(test_more_than_the_ring),
                cmocka_unit_test(test_free_hands_back),
                cmocka_unit_test(test_workers_below_the_loop),
                cmocka_unit_test(test_workers_leave_realtime),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
