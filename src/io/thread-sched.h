/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The event loop thread may run realtime (blkmqd.service sets
 * CPUSchedulingPolicy=rr: it answers every call, and on a busy machine a
 * normal thread waits tens of milliseconds for a CPU). No other thread of
 * blkmqd does: each one that is started calls thread_leave_realtime() first,
 * so that sqlite, io_uring submission and sysfs writes never compete with
 * the loop at its priority (and io_uring's io-wq helpers, which copy their
 * creator's policy, do not either). Returns 0 if the thread runs normally
 * now, < 0 if the policy could not be changed (logged at debug level). */
int thread_leave_realtime(void);
