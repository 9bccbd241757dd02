/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <errno.h>
#include <stdarg.h>
#include <syslog.h>

#include "cleanup.h"

/* Logging. The level and target are the one piece of process-wide mutable
 * state outside main(): main() sets them, the varlink SetLogLevel method
 * changes the level from the event loop thread. Worker threads only log
 * through log_internal(), which takes no locks and writes one line with a
 * single write(2), so lines never interleave. */

typedef enum LogTarget {
        LOG_TARGET_AUTO,    /* journal if JOURNAL_STREAM matches stderr, else console */
        LOG_TARGET_CONSOLE, /* stderr, "<N>" prefix unless stderr is a TTY */
        LOG_TARGET_JOURNAL, /* sd_journal_send() */
} LogTarget;

void log_set_max_level(int level);
int log_get_max_level(void);
void log_set_target(LogTarget target);
int log_level_from_string(const char *s);  /* -EINVAL if unknown */
const char *log_level_to_string(int level);

int log_internal(int level, int error, const char *file, int line, const char *func,
                 const char *fmt, ...) _printf_(6, 7);

#define log_full_errno(level, error, ...)                                                 \
        ({                                                                                 \
                int _l_ = (level), _e_ = (error);                                          \
                (log_get_max_level() >= _l_)                                               \
                        ? log_internal(_l_, _e_, __FILE__, __LINE__, __func__, __VA_ARGS__) \
                        : -(_e_ < 0 ? -_e_ : _e_);                                         \
        })

#define log_full(level, ...) (void) log_full_errno(level, 0, __VA_ARGS__)

#define log_debug(...) log_full(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_full(LOG_INFO, __VA_ARGS__)
#define log_notice(...) log_full(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_full(LOG_WARNING, __VA_ARGS__)
#define log_error(...) log_full(LOG_ERR, __VA_ARGS__)

/* These return -abs(error), so "return log_error_errno(r, ...)" works. "%m"
 * in the format prints strerror(error). */
#define log_debug_errno(e, ...) log_full_errno(LOG_DEBUG, e, __VA_ARGS__)
#define log_info_errno(e, ...) log_full_errno(LOG_INFO, e, __VA_ARGS__)
#define log_notice_errno(e, ...) log_full_errno(LOG_NOTICE, e, __VA_ARGS__)
#define log_warning_errno(e, ...) log_full_errno(LOG_WARNING, e, __VA_ARGS__)
#define log_error_errno(e, ...) log_full_errno(LOG_ERR, e, __VA_ARGS__)

#define log_oom() log_error_errno(ENOMEM, "Out of memory.")
