/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <systemd/sd-event.h>

/* A pool of threads for work that may block for milliseconds (sysfs writes:
 * a scheduler switch freezes the queue and waits for an RCU grace period).
 * Work functions run on a worker and must touch only their own data; done
 * callbacks run on the event loop thread, which owns all state. Items are
 * started in submission order; ordering within a device is the caller's
 * business (the manager keeps one job per device in flight).
 *
 * The loop thread never waits for a worker: hand-offs both ways are
 * lock-free. Workers run as SCHED_BATCH (a worker that wakes does not
 * preempt the loop) and WORK_POOL_NICE_DELTA nice levels below the thread
 * that made the pool (capped at 19). Where the policy cannot be set
 * (SystemCallFilter=), they run as they are, logged at debug level. */

#define WORK_POOL_NICE_DELTA 10

typedef struct WorkPool WorkPool;
typedef void (*work_fn_t)(void *data);
typedef void (*work_done_fn_t)(void *data, void *userdata);

enum {
        /* The threads run as SCHED_IDLE: only on CPU time nothing else
         * wants (work that may lag, like verifying data behind its
         * writes). Where the policy cannot be set (SystemCallFilter=), they
         * run normally, logged once. */
        WORK_POOL_IDLE = 1 << 0,
};

int work_pool_new(WorkPool **ret, sd_event *e, unsigned n_threads);
int work_pool_new_flags(WorkPool **ret, sd_event *e, unsigned n_threads, unsigned flags);
int work_pool_submit(WorkPool *p, work_fn_t fn, work_done_fn_t done, void *data, void *userdata);
/* Ahead of everything queued with work_pool_submit(), not of what runs:
 * for work a caller waits for (an Apply of one device) behind a backlog (a
 * hotplug storm). In order among themselves. */
int work_pool_submit_first(WorkPool *p, work_fn_t fn, work_done_fn_t done, void *data, void *userdata);
unsigned work_pool_pending(WorkPool *p); /* submitted, done callback not yet run */
/* Stops the threads after the running items finish; items never started
 * and finished ones not yet delivered get their done callback (not fn)
 * run synchronously, so nothing leaks. NULL ok. */
WorkPool *work_pool_free(WorkPool *p);
