/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
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

/* Structured entries: a MESSAGE_ID (message-id.h) and fields beside
 * MESSAGE, as systemd's log_struct(). Fields are {KEY, value} pairs; a
 * NULL value leaves its field out:
 *     log_struct(LOG_INFO, BLKMQD_MESSAGE_CHANGE_APPLIED,
 *                LOG_FIELDS({ "BLKMQD_DEVICE", name }, { "BLKMQD_KNOB", attr }),
 *                "%s: %s changed", name, attr);
 * To the journal they go as fields of the entry. On the console (stderr
 * not the journal) they follow the message in brackets,
 * "... [MESSAGE_ID=… BLKMQD_DEVICE=sda]", so nothing is lost and grep finds
 * them; a value with a space or a quote is written in double quotes with
 * \" and \\ escaped. */
typedef struct LogField {
        const char *key;
        const char *value;
} LogField;

#define LOG_FIELDS(...) ((const LogField[]) { __VA_ARGS__, { NULL, NULL } })

int log_struct_internal(int level, int error, const char *file, int line, const char *func, const char *message_id,
                        const LogField *fields, const char *fmt, ...) _printf_(8, 9);

#define log_struct_errno(level, error, message_id, fields, ...)                                              \
        ({                                                                                                    \
                int _l_ = (level), _e_ = (error);                                                             \
                (log_get_max_level() >= _l_)                                                                  \
                        ? log_struct_internal(_l_, _e_, __FILE__, __LINE__, __func__, message_id, fields,       \
                                              __VA_ARGS__)                                                      \
                        : -(_e_ < 0 ? -_e_ : _e_);                                                            \
        })
#define log_struct(level, message_id, fields, ...) (void) log_struct_errno(level, 0, message_id, fields, __VA_ARGS__)

/* The console form of fields, " [MESSAGE_ID=… KEY=value …]", appended to
 * out (of size): what log_struct() writes after the message when stderr is
 * not the journal. Returns the length it would have (as snprintf()). */
int log_format_fields(char *out, size_t size, const char *message_id, const LogField *fields);

#define log_oom() log_error_errno(ENOMEM, "Out of memory.")
