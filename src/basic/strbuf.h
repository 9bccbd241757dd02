/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A growable, always NUL-terminated string buffer. Zero-initialised is empty
 * and valid. Allocation failure is sticky: the failing append and every later
 * one return -ENOMEM and leave the contents as they were, so a writer can
 * append freely and check strbuf_error() once at the end. */

#include <stdarg.h>
#include <stddef.h>

#include "cleanup.h"

typedef struct strbuf {
        char *buf;              /* NULL until the first append */
        size_t len;             /* excluding the NUL */
        size_t allocated;
        int error;              /* 0 or -ENOMEM */
} strbuf_t;

#define STRBUF_INIT ((strbuf_t) {})

int strbuf_append(strbuf_t *sb, const char *s);
int strbuf_appendn(strbuf_t *sb, const char *s, size_t n);
int strbuf_appendc(strbuf_t *sb, char c);
int strbuf_appendf(strbuf_t *sb, const char *fmt, ...) _printf_(2, 3);
int strbuf_appendv(strbuf_t *sb, const char *fmt, va_list ap) _printf_(2, 0);

static inline int strbuf_error(const strbuf_t *sb) {
        return sb->error;
}

/* "" for an empty buffer, never NULL. */
static inline const char *strbuf_str(const strbuf_t *sb) {
        return sb->buf ? sb->buf : "";
}

/* Hands the string on (NULL if nothing was appended or on error) and empties sb. */
char *strbuf_steal(strbuf_t *sb);
void strbuf_truncate(strbuf_t *sb, size_t len);
void strbuf_done(strbuf_t *sb);
#define _cleanup_strbuf_ _cleanup_(strbuf_done)
