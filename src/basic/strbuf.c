/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

/* Makes room for extra more bytes plus the NUL. */
static int strbuf_reserve(StrBuf *sb, size_t extra) {
        size_t need, a;
        char *p;

        if (sb->error < 0)
                return sb->error;

        if (extra > SIZE_MAX - sb->len - 1)
                return (sb->error = -ENOMEM);
        need = sb->len + extra + 1;
        if (need <= sb->allocated)
                return 0;

        a = sb->allocated > 0 ? sb->allocated : 256;
        while (a < need)
                a = a > SIZE_MAX / 2 ? need : a * 2;

        p = realloc(sb->buf, a);
        if (!p)
                return (sb->error = -ENOMEM);
        sb->buf = p;
        sb->allocated = a;
        return 0;
}

int strbuf_appendn(StrBuf *sb, const char *s, size_t n) {
        int r;

        r = strbuf_reserve(sb, n);
        if (r < 0)
                return r;

        memcpy(sb->buf + sb->len, s, n);
        sb->len += n;
        sb->buf[sb->len] = 0;
        return 0;
}

int strbuf_append(StrBuf *sb, const char *s) {
        return strbuf_appendn(sb, s, strlen(s));
}

int strbuf_appendc(StrBuf *sb, char c) {
        return strbuf_appendn(sb, &c, 1);
}

int strbuf_appendv(StrBuf *sb, const char *fmt, va_list ap) {
        va_list aq;
        int n, r;

        if (sb->error < 0)
                return sb->error;

        va_copy(aq, ap);
        n = vsnprintf(NULL, 0, fmt, aq);
        va_end(aq);
        if (n < 0)
                return -EINVAL;

        r = strbuf_reserve(sb, (size_t) n);
        if (r < 0)
                return r;

        n = vsnprintf(sb->buf + sb->len, sb->allocated - sb->len, fmt, ap);
        if (n < 0) {
                sb->buf[sb->len] = 0;
                return -EINVAL;
        }
        sb->len += (size_t) n;
        return 0;
}

int strbuf_appendf(StrBuf *sb, const char *fmt, ...) {
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = strbuf_appendv(sb, fmt, ap);
        va_end(ap);
        return r;
}

char *strbuf_steal(StrBuf *sb) {
        char *s = NULL;

        if (sb->error >= 0)
                s = TAKE_PTR(sb->buf);
        strbuf_done(sb);
        return s;
}

void strbuf_truncate(StrBuf *sb, size_t len) {
        if (!sb->buf || len >= sb->len)
                return;
        sb->len = len;
        sb->buf[len] = 0;
}

void strbuf_done(StrBuf *sb) {
        if (!sb)
                return;
        free(sb->buf);
        *sb = STRBUF_INIT;
}
