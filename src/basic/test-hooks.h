/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Test hooks: every BLKMQD_TEST_* variable blkmqd reads, each read here
 * and only here (test-hooks.c), each with what it injects and the tests
 * that set it. They are fault injection: they stay in the shipped binary,
 * do nothing unless their variable is set, and log a warning when they
 * act. None makes a test faster: a test that wants time to pass faster
 * gives the code its clock instead (as the trial engine and its watch
 * are: the variable that divided the watch's clock is gone).
 * tests/unit/test_hooks.py holds this list to the code and to the tests:
 * a variable read elsewhere, a hook without its entry, or a test named
 * here that does not set it fails. */

#include <stdbool.h>
#include <stdint.h>

/* BLKMQD_TEST_KILL_AT=POINT[,POINT...]: kills the process with SIGKILL at
 * a named point (a power cut or kill -9 at the worst moment: "durable:"
 * plus a method after its record is durable and before its reply,
 * "tune-changed", "reset-done", "append-begin"...). Does nothing where
 * point is not listed.
 * Used by: tests/integration/test_zone_crash.py,
 * tests/integration/test_originals.py, tests/integration/test_io_errors.py,
 * tests/integration/test_faults.py, tests/vm/guest/zones-crash.sh */
void test_kill_point(const char *point);

/* BLKMQD_TEST_JOB_DELAY=SYSNAME:MSEC: a slow disk: the tuning jobs of the
 * device SYSNAME wait MSEC before they run (a call about another device
 * must not wait for them; a trial's apply overdue, of a disk or of a
 * stack's member). Returns the wait in ms, 0 for other devices.
 * Used by: tests/integration/test_call_wait.py, tests/vm/guest/stack-trial.sh */
unsigned test_job_delay_msec(const char *sysname);

/* BLKMQD_TEST_MISPLACE_APPEND=N: a device that reorders appends: the Nth
 * NVMe zone append result reports its data one append further on. Returns
 * N (logged once for devnode), 0 when unset.
 * Used by: tests/vm/guest/zones-kernel.sh */
uint64_t test_misplace_append(const char *devnode);

/* BLKMQD_TEST_FAIL_FLUSH=N: a failed flush: the Nth flush of a volatile
 * write cache since the variable took this value fails with -EIO instead
 * of being sent, where no disk below can fail one (a real failed flush is
 * tools/powerdisk's, in test_io_errors). True: fail this flush of path.
 * Thread-safe (flushes run on worker threads).
 * Used by: tests/unit/test-zone-service.c, tests/integration/test_faults.py */
bool test_fail_flush(const char *path);

/* BLKMQD_TEST_FAIL_WRITE=SYSNAME:ATTR=VALUE: a member that refuses a
 * setting: a tuning write of VALUE to ATTR ("queue/scheduler") of the
 * device SYSNAME fails with -EIO instead of being made, as a scheduler a
 * disk lacks or a write the kernel rejects would (a stack's trial: the
 * candidate is refused for every member). True: fail this write.
 * Used by: tests/vm/guest/stack-trial.sh */
bool test_fail_write(const char *sysname, const char *attr, const char *value);

/* BLKMQD_TEST_DB_DELAY_MS=MSEC: a slow zone database: every commit waits
 * MSEC first, so that a test can kill blkmqd or call again while a record
 * is not yet durable. Returns MSEC (logged), 0 when unset.
 * Used by: tests/integration/test_zone_crash.py */
unsigned test_db_delay_msec(void);
