/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <pthread.h>
#include <sched.h>

#include "log.h"
#include "thread-sched.h"

int thread_leave_realtime(void) {
        struct sched_param sp = {};
        int policy, r;

        r = -pthread_getschedparam(pthread_self(), &policy, &sp);
        if (r < 0)
                return r;
        if (policy != SCHED_FIFO && policy != SCHED_RR)
                return 0;
        sp.sched_priority = 0;
        r = -pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp);
        if (r < 0)
                log_debug_errno(r, "Cannot take a thread out of realtime scheduling: %m");
        return r;
}
