/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
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

static bool needs_quotes(const char *v) {
        return !*v || strpbrk(v, " \t\n\"\\]") != NULL;
}

int log_format_fields(char *out, size_t size, const char *message_id, const LogField *fields) {
        size_t n = 0;
        bool first = true;

#define PUT(...)                                                                        \
        do {                                                                            \
                int _k_ = snprintf(n < size ? out + n : NULL, n < size ? size - n : 0, __VA_ARGS__); \
                if (_k_ > 0)                                                            \
                        n += (size_t) _k_;                                              \
        } while (0)

        if (size > 0)
                out[0] = 0;
        if (message_id) {
                PUT(" [MESSAGE_ID=%s", message_id);
                first = false;
        }
        for (const LogField *f = fields; f && f->key; f++) {
                if (!f->value)
                        continue;
                PUT("%s%s=", first ? " [" : " ", f->key);
                first = false;
                if (!needs_quotes(f->value)) {
                        PUT("%s", f->value);
                        continue;
                }
                PUT("\"");
                for (const char *c = f->value; *c; c++) {
                        if (*c == '"' || *c == '\\')
                                PUT("\\%c", *c);
                        else if (*c == '\n')
                                PUT("\\n");
                        else
                                PUT("%c", *c);
                }
                PUT("\"");
        }
        if (!first)
                PUT("]");
#undef PUT
        return (int) n;
}

static int log_dispatch(int level, int error, const char *file, int line, const char *func, const char *message_id,
                        const LogField *fields, const char *fmt, va_list ap) {
        char msg[2048], out[4200], extra[2048] = "";
        int saved = errno, t, n;

        if (error < 0)
                error = -error;
        /* Let %m print the error we were handed. */
        errno = error;
        vsnprintf(msg, sizeof msg, fmt, ap);

        t = atomic_load(&target);
        if (t == LOG_TARGET_AUTO)
                t = stderr_kind_get() == STDERR_JOURNAL ? LOG_TARGET_JOURNAL : LOG_TARGET_CONSOLE;

        if (t == LOG_TARGET_JOURNAL && (message_id || fields)) {
                /* Up to 22 fields beside PRIORITY, ERRNO, MESSAGE_ID and MESSAGE. */
                char buf[24][512];
                struct iovec iov[24];
                size_t k = 0;

#define FIELD(...)                                                                         \
                do {                                                                       \
                        int _n_ = snprintf(buf[k], sizeof buf[k], __VA_ARGS__);            \
                        iov[k] = (struct iovec) { .iov_base = buf[k],                      \
                                                  .iov_len = _n_ < (int) sizeof buf[k] ? (size_t) _n_ : sizeof buf[k] - 1 }; \
                        k++;                                                               \
                } while (0)
                FIELD("PRIORITY=%i", level);
                if (error)
                        FIELD("ERRNO=%i", error);
                if (message_id)
                        FIELD("MESSAGE_ID=%s", message_id);
                for (const LogField *f = fields; f && f->key && k < ELEMENTSOF(buf) - 1; f++)
                        if (f->value)
                                FIELD("%s=%s", f->key, f->value);
#undef FIELD
                /* MESSAGE last and not cut at 512 bytes. */
                _cleanup_free_ char *m = NULL;
                if (asprintf(&m, "MESSAGE=%s", msg) >= 0) {
                        iov[k++] = (struct iovec) { .iov_base = m, .iov_len = strlen(m) };
                        char cf[64], ln[32];
                        snprintf(cf, sizeof cf, "CODE_FILE=%s", file);
                        snprintf(ln, sizeof ln, "CODE_LINE=%d", line);
                        /* Not sd_journal_sendv(): that macro records this line as the location. */
                        sd_journal_sendv_with_location(cf, ln, func, iov, (int) k);
                }
        } else if (t == LOG_TARGET_JOURNAL) {
                char cf[64], ln[32];
                snprintf(cf, sizeof cf, "CODE_FILE=%s", file);
                snprintf(ln, sizeof ln, "CODE_LINE=%d", line);
                sd_journal_send_with_location(cf, ln, func, "MESSAGE=%s", msg, "PRIORITY=%i", level,
                                              error ? "ERRNO=%i" : NULL, error, NULL);
        } else {
                if (message_id || fields)
                        (void) log_format_fields(extra, sizeof extra, message_id, fields);
                if (stderr_kind_get() == STDERR_TTY)
                        n = snprintf(out, sizeof out, "%s%s\n", msg, extra);
                else
                        n = snprintf(out, sizeof out, "<%i>%s%s\n", level, msg, extra);
                if (n > (int) sizeof out - 1) {
                        n = sizeof out - 1;
                        out[n - 1] = '\n';
                }
                (void) !write(STDERR_FILENO, out, n);
        }
        errno = saved;
        return -error;
}

int log_internal(int level, int error, const char *file, int line, const char *func, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = log_dispatch(level, error, file, line, func, NULL, NULL, fmt, ap);
        va_end(ap);
        return r;
}

int log_struct_internal(int level, int error, const char *file, int line, const char *func, const char *message_id,
                        const LogField *fields, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = log_dispatch(level, error, file, line, func, message_id, fields, fmt, ap);
        va_end(ap);
        return r;
}
