/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A growable, always NUL-terminated string buffer. Zero-initialised is empty
 * and valid. Allocation failure is sticky: the failing append and every later
 * one return -ENOMEM and leave the contents as they were, so a writer can
 * append freely and check strbuf_error() once at the end. */

#include <stdarg.h>
#include <stddef.h>

#include "cleanup.h"

typedef struct StrBuf {
        char *buf;              /* NULL until the first append */
        size_t len;             /* excluding the NUL */
        size_t allocated;
        int error;              /* 0 or -ENOMEM */
} StrBuf;

#define STRBUF_INIT ((StrBuf) {})

int strbuf_append(StrBuf *sb, const char *s);
int strbuf_appendn(StrBuf *sb, const char *s, size_t n);
int strbuf_appendc(StrBuf *sb, char c);
int strbuf_appendf(StrBuf *sb, const char *fmt, ...) _printf_(2, 3);
int strbuf_appendv(StrBuf *sb, const char *fmt, va_list ap) _printf_(2, 0);

static inline int strbuf_error(const StrBuf *sb) {
        return sb->error;
}

/* "" for an empty buffer, never NULL. */
static inline const char *strbuf_str(const StrBuf *sb) {
        return sb->buf ? sb->buf : "";
}

/* Hands the string on (NULL if nothing was appended or on error) and empties sb. */
char *strbuf_steal(StrBuf *sb);
void strbuf_truncate(StrBuf *sb, size_t len);
void strbuf_done(StrBuf *sb);
#define _cleanup_strbuf_ _cleanup_(strbuf_done)
