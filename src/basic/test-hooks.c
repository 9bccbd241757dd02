/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "test-hooks.h"
#include "util.h"

/* Each hook's variable is read only here (test-hooks.h lists them). */

void test_kill_point(const char *point) {
        const char *e = point ? secure_getenv("BLKMQD_TEST_KILL_AT") : NULL;
        size_t n = point ? strlen(point) : 0;

        for (const char *p = e; p && *p; p += strcspn(p, ","), p += *p == ',') {
                if (strncmp(p, point, n) == 0 && (p[n] == ',' || p[n] == '\0')) {
                        log_warning("BLKMQD_TEST_KILL_AT=%s: killed at \"%s\".", e, point);
                        (void) raise(SIGKILL);
                }
        }
}

unsigned test_job_delay_msec(const char *sysname) {
        const char *e = secure_getenv("BLKMQD_TEST_JOB_DELAY"), *colon;
        int ms;

        if (!e || !(colon = strchr(e, ':')) || strncmp(e, sysname, (size_t) (colon - e)) != 0 ||
            sysname[colon - e] != '\0' || safe_atoi(colon + 1, &ms) < 0 || ms <= 0)
                return 0;
        return (unsigned) ms;
}

uint64_t test_misplace_append(const char *devnode) {
        const char *e = secure_getenv("BLKMQD_TEST_MISPLACE_APPEND");
        uint64_t n;

        if (!e || safe_atou64(e, &n) < 0 || n == 0)
                return 0;
        log_warning("zbd: %s: BLKMQD_TEST_MISPLACE_APPEND=%" PRIu64 ": append result %" PRIu64
                    " will be misreported (fault injection for tests).", devnode, n, n);
        return n;
}

/* The count is under a lock: flushes run on worker threads. */
bool test_fail_flush(const char *path) {
        static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        static char armed[32];
        static uint64_t calls;
        const char *e = secure_getenv("BLKMQD_TEST_FAIL_FLUSH");
        uint64_t n;
        bool fail;

        if (!e || safe_atou64(e, &n) < 0 || n == 0) {
                pthread_mutex_lock(&lock);
                armed[0] = 0; /* set again, the count starts again */
                pthread_mutex_unlock(&lock);
                return false;
        }
        pthread_mutex_lock(&lock);
        if (strncmp(armed, e, sizeof armed) != 0) {
                snprintf(armed, sizeof armed, "%s", e);
                calls = 0;
                log_warning("zbd: BLKMQD_TEST_FAIL_FLUSH=%s: flush %s will fail (fault injection for tests).", e, e);
        }
        fail = ++calls == n;
        pthread_mutex_unlock(&lock);
        if (fail)
                log_warning("zbd: %s: BLKMQD_TEST_FAIL_FLUSH=%s: failing this flush with EIO.", path, e);
        return fail;
}

bool test_fail_write(const char *sysname, const char *attr, const char *value) {
        const char *e = secure_getenv("BLKMQD_TEST_FAIL_WRITE"), *colon, *eq;
        size_t ns, na;

        if (!e || !sysname || !attr || !value || !(colon = strchr(e, ':')) || !(eq = strchr(colon, '=')))
                return false;
        ns = (size_t) (colon - e);
        na = (size_t) (eq - colon - 1);
        if (strlen(sysname) != ns || strncmp(e, sysname, ns) != 0 || strlen(attr) != na ||
            strncmp(colon + 1, attr, na) != 0 || !streq(eq + 1, value))
                return false;
        log_warning("%s: BLKMQD_TEST_FAIL_WRITE=%s: failing the write of %s to %s with EIO (fault injection for "
                    "tests).", sysname, e, value, attr);
        return true;
}

unsigned test_db_delay_msec(void) {
        const char *e = secure_getenv("BLKMQD_TEST_DB_DELAY_MS");
        int ms;

        if (!e || safe_atoi(e, &ms) < 0 || ms <= 0)
                return 0;
        log_warning("zone-db: BLKMQD_TEST_DB_DELAY_MS=%d: every commit waits that long first.", ms);
        return (unsigned) ms;
}
