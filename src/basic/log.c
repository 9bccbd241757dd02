/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <systemd/sd-journal.h>

#include "log.h"

static atomic_int max_level = LOG_INFO;
static atomic_int target = LOG_TARGET_AUTO;

static const char *const level_names[] = {
        [LOG_EMERG] = "emerg",     [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",
        [LOG_ERR] = "err",         [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
        [LOG_INFO] = "info",       [LOG_DEBUG] = "debug",
};

void log_set_max_level(int level) {
        atomic_store(&max_level, level);
}

int log_get_max_level(void) {
        return atomic_load(&max_level);
}

void log_set_target(LogTarget t) {
        atomic_store(&target, t);
}

int log_level_from_string(const char *s) {
        if (!s)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(level_names); i++)
                if (streq(s, level_names[i]))
                        return (int) i;
        if (streq(s, "error"))
                return LOG_ERR;
        if (s[0] >= '0' && s[0] <= '7' && s[1] == 0)
                return s[0] - '0';
        return -EINVAL;
}

const char *log_level_to_string(int level) {
        if (level < 0 || (size_t) level >= ELEMENTSOF(level_names))
                return NULL;
        return level_names[level];
}

static int stderr_is_journal(void) {
        const char *e = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        struct stat st;

        if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
                return 0;
        if (fstat(STDERR_FILENO, &st) < 0)
                return 0;
        return st.st_dev == dev && st.st_ino == ino;
}

/* What stderr is, decided at the first message and kept: an fstat() and
 * a TCGETS ioctl per line would be two syscalls on the event loop for
 * every line logged (and TCGETS on a terminal takes the tty's locks). */
enum { STDERR_UNKNOWN, STDERR_JOURNAL, STDERR_TTY, STDERR_PLAIN };
static atomic_int stderr_kind = STDERR_UNKNOWN;

static int stderr_kind_get(void) {
        int k = atomic_load(&stderr_kind);

        if (k == STDERR_UNKNOWN) {
                k = stderr_is_journal() ? STDERR_JOURNAL : isatty(STDERR_FILENO) ? STDERR_TTY : STDERR_PLAIN;
                atomic_store(&stderr_kind, k);
        }
        return k;
}

int log_internal(int level, int error, const char *file, int line, const char *func,
                 const char *fmt, ...) {
        char msg[2048], out[2100];
        int saved = errno, t, n;
        va_list ap;

        if (error < 0)
                error = -error;
        /* Let %m print the error we were handed. */
        errno = error;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);

        t = atomic_load(&target);
        if (t == LOG_TARGET_AUTO)
                t = stderr_kind_get() == STDERR_JOURNAL ? LOG_TARGET_JOURNAL : LOG_TARGET_CONSOLE;

        if (t == LOG_TARGET_JOURNAL) {
                char cf[64], ln[32];
                snprintf(cf, sizeof cf, "CODE_FILE=%s", file);
                snprintf(ln, sizeof ln, "CODE_LINE=%d", line);
                sd_journal_send_with_location(cf, ln, func, "MESSAGE=%s", msg, "PRIORITY=%i", level,
                                              error ? "ERRNO=%i" : NULL, error, NULL);
        } else {
                if (stderr_kind_get() == STDERR_TTY)
                        n = snprintf(out, sizeof out, "%s\n", msg);
                else
                        n = snprintf(out, sizeof out, "<%i>%s\n", level, msg);
                if (n > (int) sizeof out - 1) {
                        n = sizeof out - 1;
                        out[n - 1] = '\n';
                }
                (void) !write(STDERR_FILENO, out, n);
        }
        errno = saved;
        return -error;
}
